#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dist_shuffle_trace.sh ODX_RUN PROG - runs PROG (test_dist_shuffle with DIST_SHUFFLE_TRACE set:
# its good rounds only) as 2 ranks with ODX_TRACE and ODX_STATS, and checks what each rank wrote
# against the parts the program says it sent and received (EXPECT lines): on its lane of the other
# rank, one `shuffle send` span per part sent and one `shuffle receive` span per part received,
# named and sized by the part; on its own receive lane one span per own part copied; and the
# `shuffles:` ODX_STATS line with the number of shuffles and the bytes sent, received and copied.
set -u
odx_run=$1
prog=$2
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
dir=$(mktemp -d /tmp/odx-dist-shuffle-trace.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT

DIST_SHUFFLE_TRACE=1 ODX_TRACE="$dir/trace.json" ODX_STATS=1 bash "$odx_run" -n 2 \
	--timeout "${DIST_TIMEOUT:-170}" "$prog" >"$dir/out" 2>&1
rc=$?
cat "$dir/out"
[ "$rc" -eq 0 ] || { echo "FAIL: the ranks exited $rc"; exit 1; }

python3 - "$dir" <<'PY'
import json, os, re, sys
from collections import Counter

d = sys.argv[1]
out = open(os.path.join(d, "out")).read()
fail = []


def spans(r, lane, cat):
    ev = json.load(open(os.path.join(d, "trace.rank%d.json" % r)))["traceEvents"]
    tids = [x["tid"] for x in ev if x.get("name") == "thread_name" and x["args"]["name"] == lane]
    return [x for x in ev if x.get("ph") == "X" and x["tid"] in tids and x.get("cat") == cat]


for r in (0, 1):
    p = 1 - r
    exp = {"send": Counter(), "recv": Counter()}
    stats = None
    for line in out.splitlines():
        m = re.match(r"\[%d\] EXPECT (send|recv) (\d+) (\d+)$" % r, line)
        if m:
            exp[m.group(1)][int(m.group(3))] += 1
        m = re.match(r"\[%d\] EXPECT stats (\d+) (\d+) (\d+) (\d+)$" % r, line)
        if m:
            stats = tuple(int(x) for x in m.groups())
    if stats is None:
        fail.append("rank %d printed no EXPECT stats line" % r)
        continue
    sends = spans(r, "rank %d send" % p, "shuffle send")
    recvs = spans(r, "rank %d receive" % p, "shuffle receive")
    own = spans(r, "rank %d receive" % r, "shuffle receive")
    got = {"send": Counter(x["args"]["bytes"] for x in sends),
           "recv": Counter(x["args"]["bytes"] for x in recvs)}
    for k in ("send", "recv"):
        if got[k] != exp[k]:
            fail.append("rank %d: %s spans by size %s, expected %s" %
                        (r, k, dict(got[k]), dict(exp[k])))
    bad = [x["name"] for x in sends
           if not re.match(r"shuffle part %d of buffer \d+, [\d.]+ (B|KiB|MiB)$" % p, x["name"])]
    bad += [x["name"] for x in recvs + own
            if not re.match(r"shuffle part %d into 'dst %d', [\d.]+ (B|KiB|MiB)$" % (r, r),
                            x["name"])]
    if bad:
        fail.append("rank %d: badly named spans: %s" % (r, bad[:3]))
    if len(own) != stats[0]:
        fail.append("rank %d: %d own-part spans, %d shuffles" % (r, len(own), stats[0]))
    want = ("[%d]   shuffles: %d on this rank; parts: %d bytes sent to other ranks, %d bytes "
            "received from them, %d bytes copied locally" % ((r,) + stats))
    if want not in out:
        fail.append("rank %d: no stats line '%s'" % (r, want))
    print("rank %d: %d send spans, %d receive spans, %d own copies, stats as expected: %s" %
          (r, len(sends), len(recvs), len(own), want in out))
if fail:
    print("FAIL:\n  " + "\n  ".join(fail))
    sys.exit(1)
PY
