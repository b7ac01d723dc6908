#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dist_trace.sh ODX_RUN PROG - runs PROG (test_dist_trace) as 2 ranks with ODX_TRACE and
# ODX_STATS set and checks what they wrote: one trace file per rank (trace.rank0.json,
# trace.rank1.json, never trace.json), each valid JSON with, on the lanes of the other rank, one
# span per transfer the program says it made (EXPECT lines), named by buffer, the consumer's tag
# and size; and per-peer ODX_STATS lines with those counts and bytes both ways.
#
# dist_trace.sh --aborts ODX_RUN PROG - runs PROG (test_dist_fail, a kernel failing on one rank)
# the same way and checks the marks of the transfers that carried an abort instead of bytes:
# every aborted send on one rank's trace has its aborted receive on the other's, there is at
# least one, and each rank's stats line counts them as failed.
set -u
mode=ok
if [ "${1:-}" = --aborts ]; then
	mode=aborts
	shift
fi
odx_run=$1
prog=$2
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
dir=$(mktemp -d /tmp/odx-dist-trace.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT

ODX_TRACE="$dir/trace.json" ODX_STATS=1 bash "$odx_run" -n 2 --timeout "${DIST_TIMEOUT:-170}" \
	"$prog" >"$dir/out" 2>&1
rc=$?
cat "$dir/out"
[ "$rc" -eq 0 ] || { echo "FAIL: the ranks exited $rc"; exit 1; }

python3 - "$dir" "$mode" <<'PY'
import json, os, re, sys

d, mode = sys.argv[1], sys.argv[2]
out = open(os.path.join(d, "out")).read()
fail = []
if os.path.exists(os.path.join(d, "trace.json")):
    fail.append("trace.json written: ranks must write trace.rankN.json")


def lane_spans(r, name):
    ev = json.load(open(os.path.join(d, "trace.rank%d.json" % r)))["traceEvents"]
    tids = [x["tid"] for x in ev if x.get("name") == "thread_name" and x["args"]["name"] == name]
    return [x for x in ev if x.get("ph") == "X" and x["tid"] in tids]


if mode == "aborts":
    failed = {0: 0, 1: 0}
    for s, r in ((0, 1), (1, 0)):
        sends = [x for x in lane_spans(s, "rank %d send" % r) if x["name"].endswith("(aborted)")]
        recvs = [x for x in lane_spans(r, "rank %d receive" % s)
                 if x["name"].endswith("(aborted)")]
        print("rank %d -> rank %d: %d aborted sends, %d aborted receives" % (s, r, len(sends),
                                                                            len(recvs)))
        if len(sends) != len(recvs):
            fail.append("rank %d -> %d: %d aborted sends, %d aborted receives" %
                        (s, r, len(sends), len(recvs)))
        if any(not re.match(r"buffer \d+ for .*\(aborted\)$", x["name"]) for x in sends + recvs):
            fail.append("rank %d -> %d: badly named: %s" % (s, r, [x["name"] for x in sends]))
        failed[s] += len(sends)
        failed[r] += len(recvs)
    if failed[0] + failed[1] == 0:
        fail.append("no aborted transfer in either trace: the failure did not cross ranks")
    for r in (0, 1):
        m = re.search(r"^\[%d\]\s+rank %d <-> rank %d: .*, (\d+) failed;" % (r, r, 1 - r), out,
                      re.M)
        if not m or int(m.group(1)) != failed[r]:
            fail.append("rank %d: stats say %s failed, the trace %d" %
                        (r, m.group(1) if m else "nothing", failed[r]))
    for f in fail:
        print("FAIL:", f)
    sys.exit(1 if fail else 0)
expects = [dict(kv.split("=") for kv in m.group(1).split())
           for m in re.finditer(r"EXPECT (.*)", out)]
if len(expects) != 2:
    fail.append("want 2 EXPECT lines, got %d" % len(expects))
for e in expects:
    r, p, size = int(e["rank"]), int(e["peer"]), int(e["bytes"])
    path = os.path.join(d, "trace.rank%d.json" % r)
    try:
        tr = json.load(open(path))
    except (OSError, ValueError) as x:
        fail.append("%s: %s" % (path, x))
        continue
    ev = tr["traceEvents"]
    procs = [x["args"]["name"] for x in ev if x.get("name") == "process_name"]
    if procs != ["odx rank %d" % r]:
        fail.append("rank %d: process names %s" % (r, procs))
    lanes = {x["tid"]: x["args"]["name"] for x in ev if x.get("name") == "thread_name"}
    for way, cat in (("sent", "send"), ("recv", "receive")):
        tids = [t for t, n in lanes.items() if n == "rank %d %s" % (p, cat)]
        if len(tids) != 1:
            fail.append("rank %d: lanes named 'rank %d %s': %d" % (r, p, cat, len(tids)))
            continue
        spans = [x for x in ev if x.get("ph") == "X" and x["tid"] == tids[0]]
        tag = "for '%s'" % e[way + "_tag"]
        tagged = [x for x in spans if tag in x["name"]]
        # buffer a (labelled 'ping-a') moves from rank 0 to rank 1, b (no label) back
        named = r"'ping-a'" if e["labelled"] == way else r"buffer \d+"
        bad = [x["name"] for x in spans
               if x["cat"] != cat or x["args"].get("bytes") != size
               or not x["args"].get("buffer")
               or not re.match(named + r" for .*, 32\.0 KiB$", x["name"]) or x["dur"] < 0]
        print("rank %d, lane 'rank %d %s': %d spans, %d %s" % (r, p, cat, len(spans),
                                                                len(tagged), tag))
        if len(spans) != int(e[way]) or len(tagged) != int(e[way + "_tagged"]) or bad:
            fail.append("rank %d lane 'rank %d %s': %d spans (want %s), %d %s (want %s), "
                        "bad: %s" % (r, p, cat, len(spans), e[way], len(tagged), tag,
                                     e[way + "_tagged"], bad[:3]))
    m = re.search(r"^\[%d\]\s+rank %d <-> rank %d: sent (\d+) transfers \((\d+) bytes\), "
                  r"received (\d+) \((\d+) bytes\), (\d+) failed; in flight ([0-9.]+) s "
                  r"\(([0-9.]+) s summed over transfers\)$" % (r, r, p), out, re.M)
    if not m:
        fail.append("rank %d: no stats line for rank %d" % (r, p))
        continue
    sent, sb, recv, rb, failed = (int(m.group(i)) for i in range(1, 6))
    busy, summed = float(m.group(6)), float(m.group(7))
    if (sent, sb, recv, rb, failed) != (int(e["sent"]), int(e["sent"]) * size, int(e["recv"]),
                                        int(e["recv"]) * size, 0) or busy > summed + 0.0015:
        fail.append("rank %d: stats line %r" % (r, m.group(0)))
    if not re.search(r"^\[%d\]\s+rank %d of 2 \(" % (r, r), out, re.M):
        fail.append("rank %d: the rank's stats line is missing" % r)
for f in fail:
    print("FAIL:", f)
sys.exit(1 if fail else 0)
PY
