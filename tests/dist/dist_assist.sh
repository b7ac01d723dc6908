#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dist_assist.sh ODX_RUN RANKS PROG - runs PROG (test_dist: the replicated task flow, checked
# bit for bit by the program) as RANKS ranks with fabric.progress = workers (idle workers drive
# the fabric, the progress thread parks meanwhile; docs/distributed.md) and ODX_STATS set, and
# checks that it passed and that every rank ran in that mode (its ODX_STATS progress line).
#
# dist_assist.sh --auto ODX_RUN PROG - the default (fabric.progress = auto) picks that mode for 2
# ranks on 2 CPUs (taskset: each rank gets one PU for its one host device) and the polling
# thread for 1 rank of the job per host (ODX_LOCAL_SIZE=1: ranks on other hosts); checked in the
# ODX_LOG=info line each rank prints at odx_open. Exits 77 with fewer than 2 CPUs.
set -u
auto=0
if [ "${1:-}" = --auto ]; then
	auto=1
	shift
fi
odx_run=$1
out=$(mktemp /tmp/odx-dist-assist.XXXXXX) || exit 1
trap 'rm -f "$out"' EXIT

if [ $auto -eq 1 ]; then
	prog=$2
	first2=$(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(",".join(map(str, c[:2])) if len(c) >= 2 else "")' 2>/dev/null)
	[ -n "$first2" ] || { echo "SKIP: fewer than 2 CPUs"; exit 77; }
	fail=0
	ODX_HOST_DEVICES=1 ODX_LOG=info taskset -c "$first2" bash "$odx_run" -n 2 --timeout \
		"${DIST_TIMEOUT:-170}" "$prog" >"$out" 2>&1
	rc=$?
	cat "$out"
	[ "$rc" -eq 0 ] || { echo "FAIL: the ranks exited $rc"; exit 1; }
	for r in 0 1; do
		grep -Eq "^\[$r\] .*fabric progress \(fabric.progress = auto\): idle workers drive it" \
			"$out" || { echo "FAIL: rank $r on its own core did not pick assisted progress"; fail=1; }
	done
	# ranks alone on their hosts (the odx-run variables say one local rank each)
	ODX_HOST_DEVICES=1 ODX_LOG=info taskset -c "$first2" bash "$odx_run" -n 2 --timeout \
		"${DIST_TIMEOUT:-170}" env ODX_LOCAL_RANK=0 ODX_LOCAL_SIZE=1 "$prog" >"$out" 2>&1
	rc=$?
	cat "$out"
	[ "$rc" -eq 0 ] || { echo "FAIL: the ranks (one per host) exited $rc"; exit 1; }
	for r in 0 1; do
		grep -Eq "^\[$r\] .*fabric progress \(fabric.progress = auto\): the progress thread polls" \
			"$out" || { echo "FAIL: rank $r alone on its host did not keep the polling thread"; fail=1; }
	done
	[ $fail -eq 0 ] && echo "ok: auto picks assisted progress for ranks sharing cores, the thread otherwise"
	exit $fail
fi

ranks=$2
prog=$3
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
