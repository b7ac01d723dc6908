#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dist_assist.sh ODX_RUN RANKS PROG - runs PROG (test_dist: the replicated task flow, checked
# bit for bit by the program) as RANKS ranks with fabric.progress = workers (idle workers drive
# the fabric, the progress thread parks meanwhile; docs/distributed.md) and ODX_STATS set, and
# checks that it passed and that every rank ran in that mode (its ODX_STATS progress line).
set -u
odx_run=$1
ranks=$2
prog=$3
out=$(mktemp /tmp/odx-dist-assist.XXXXXX) || exit 1
trap 'rm -f "$out"' EXIT

ODX_FABRIC_PROGRESS=workers ODX_STATS=1 bash "$odx_run" -n "$ranks" --timeout \
	"${DIST_TIMEOUT:-170}" "$prog" >"$out" 2>&1
rc=$?
cat "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: the ranks exited $rc"; exit 1; }
fail=0
for ((r = 0; r < ranks; r++)); do
	if ! grep -Eq "^\[$r\] +rank $r progress: workers drive it when idle; [0-9]+ rounds run by workers" "$out"; then
		echo "FAIL: rank $r did not report assisted progress (fabric.progress = workers)"
		fail=1
	fi
done
[ $fail -eq 0 ] && echo "ok: $ranks ranks passed with assisted progress"
exit $fail
