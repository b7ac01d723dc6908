#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dist_prio.sh ODX_RUN PROG - runs PROG (test_dist_prio) as 2 ranks with ODX_TRACE set and checks,
# in rank 1's trace, that after each gate kernel the receive of the consumer's input was posted
# (its span on the "rank 0 receive" lane starts) before the first of the lower-priority "busy"
# kernels started. That order is the scheduler's choice among ready tasks when the gate ends, so
# it does not depend on timing: at priority 0 (before transfers took their consumer's priority)
# the receive would start only after every busy kernel.
set -u
odx_run=$1
prog=$2
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
dir=$(mktemp -d /tmp/odx-dist-prio.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT

ODX_TRACE="$dir/trace.json" bash "$odx_run" -n 2 --timeout "${DIST_TIMEOUT:-170}" "$prog" \
	>"$dir/out" 2>&1
rc=$?
cat "$dir/out"
[ "$rc" -eq 0 ] || { echo "FAIL: the ranks exited $rc"; exit 1; }

python3 - "$dir/trace.rank1.json" <<'PY'
import json, sys

t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
lane = {}
for e in ev:
    if e.get("ph") == "M" and e.get("name") == "thread_name":
        lane[(e["pid"], e["tid"])] = e["args"]["name"]
spans = sorted((e for e in ev if e.get("ph") == "X"), key=lambda e: e["ts"])
gates = [e["ts"] for e in spans if e["name"] == "gate"]
recvs = [e["ts"] for e in spans if lane.get((e["pid"], e["tid"])) == "rank 0 receive"]
busy = [e["ts"] for e in spans if e["name"] == "busy"]
if len(gates) != 2:
    sys.exit("FAIL: expected 2 gate spans in rank 1's trace, found %d" % len(gates))
for phase, g in enumerate(gates):
    end = gates[phase + 1] if phase + 1 < len(gates) else float("inf")
    r = [x for x in recvs if g <= x < end]
    b = [x for x in busy if g <= x < end]
    if not r or not b:
        sys.exit("FAIL: phase %d: %d receive and %d busy spans after its gate" % (phase, len(r), len(b)))
    if r[0] > b[0]:
        sys.exit("FAIL: phase %d: the receive was posted %.0f us after the first lower-priority "
                 "kernel started: it waited behind them" % (phase, r[0] - b[0]))
    print("phase %d: receive posted %.0f us before the first of %d busy kernels" % (phase, b[0] - r[0], len(b)))
PY
