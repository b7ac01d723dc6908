#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# run.sh - runs one multi-process fabric test and checks it left nothing behind.
#
#   run.sh KIND ODX_RUN FAB_TEST NRANKS MODE
#
# KIND: plain (all ranks must exit 0), kill (the last rank dies; every survivor must report
# ODX_EPEER naming it), netns (plain, in network namespaces with a tbf link; 77 without root or
# ip netns), mpirun (plain, launched by Open MPI's mpirun through PMIx; 77 without mpirun).
# Afterwards no shm segment of the job's ranks may remain in /dev/shm and no namespace of ours.
set -u
kind=$1 odx_run=$2 fab_test=$3 n=$4 mode=$5
# FAB_TEST_SLOW (meson.build: 3 under ASan, 5 under TSan) stretches every deadline here and in
# fab_test: they guard against hangs, and a sanitized run on a loaded machine is that much slower.
slow=${FAB_TEST_SLOW:-1}
case "$slow" in '' | *[!0-9]* | 0) slow=1 ;; esac
outer=$((150 * slow)) inner=$((140 * slow))

shm_before=$(ls /dev/shm 2>/dev/null | sort)
out=$(mktemp)
# odx-run writes its ranks' pids here: only their segments are this test's business
ODX_RUN_PIDFILE=$(mktemp)
export ODX_RUN_PIDFILE
trap 'rm -f "$out" "$ODX_RUN_PIDFILE"' EXIT

case "$kind" in
plain)
	timeout -k 5 "$outer" "$odx_run" -n "$n" --timeout "$inner" "$fab_test" "$mode" >"$out" 2>&1
	rc=$?
	# udp;ofi_rxd (the ue profile here) is known to stop delivering between two ranks now and
	# then on a busy host, which ODX reports as that peer failing, or, when only one message
	# was lost and heartbeats still pass, as a barrier that times out (docs/distributed.md,
	# "What ue supports here"): those signatures, and only those, get one more run, said loudly.
	# The stall comes with load (2 runs in 15 at load 2-3), so two in a row happen too: then the
	# test could not decide and says so (77, skipped), like a test whose machine lacks what it
	# needs. Any other failure, in either run, fails it.
	stall="ODX_EPEER|barrier.*ODX_ETIMEDOUT"
	if [ "$mode" = ue ] && [ $rc -ne 0 ] && grep -qE "$stall" "$out"; then
		cat "$out"
		echo "NOTE: ue run failed with the known udp;ofi_rxd stall (ODX_EPEER or a barrier timeout); running it once more"
		timeout -k 5 "$outer" "$odx_run" -n "$n" --timeout "$inner" "$fab_test" "$mode" >"$out" 2>&1
		rc=$?
		if [ $rc -ne 0 ] && grep -qE "$stall" "$out"; then
			echo "SKIP: the rerun stalled the same way: udp;ofi_rxd on this loaded host cannot carry the test (output below)"
			rc=77
		fi
	fi
	;;
kill)
	timeout -k 5 "$outer" "$odx_run" --no-kill -n "$n" --timeout "$inner" "$fab_test" "$mode" >"$out" 2>&1
	rc=$?
	got=$(grep -c "got ODX_EPEER: .* rank $((n - 1)) failed" "$out")
	if [ "$got" -ne $((n - 1)) ]; then
		cat "$out"
		echo "FAIL: $got of $((n - 1)) survivors reported ODX_EPEER naming rank $((n - 1))"
		exit 1
	fi
	# the survivors exit 3 (their peer error), the victim was killed: never 0
	[ "$rc" -ne 0 ] && rc=0 || rc=1
	;;
netns)
	if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1 || ! command -v tc >/dev/null; then
		echo "SKIP: needs root, ip netns and tc"
		exit 77
	fi
	timeout -k 5 "$outer" "$odx_run" --netns --rate 200mbit -n "$n" --timeout "$inner" "$fab_test" "$mode" >"$out" 2>&1
	rc=$?
	[ $rc -eq 77 ] && { cat "$out"; exit 77; }
	if ! grep -q "tbf 200mbit on rank 1's link: Sent [1-9]" "$out"; then
		echo "FAIL: the tbf link carried no traffic"
		rc=1
	fi
	# odx-run names its namespaces odx<its pid>r<rank> and odx<its pid>sw: those of an odx-run
	# that is gone were left behind (another job's, running beside this one, are still in use)
	left=$(ip netns list | grep -oE '^odx[0-9]+(r[0-9]+|sw)' | while read -r ns; do
		pid=${ns#odx}
		pid=${pid%%[rs]*}
		kill -0 "$pid" 2>/dev/null || echo "$ns"
	done)
	if [ -n "$left" ]; then
		echo "FAIL: network namespaces left behind:" $left
		rc=1
	fi
	;;
mpirun)
	if ! command -v mpirun >/dev/null; then
		echo "SKIP: no mpirun"
		exit 77
	fi
	timeout -k 5 "$outer" mpirun --allow-run-as-root --oversubscribe -n "$n" "$fab_test" "$mode" >"$out" 2>&1
	rc=$?
	;;
*)
	echo "unknown kind $kind"
	exit 2
	;;
esac
cat "$out"
# ODX names its shm segments "odx-PID-START-N" (fabric/fab_shm.c). Only segments of this job's
# ranks (the pids odx-run wrote; mpirun's ranks are not known, so there: any ODX segment of a dead
# process) that stay for a second count as left behind: other jobs on the machine, ODX or not,
# are not this test's business (the next ODX job removes what dead ODX processes left).
dead_segments() {
	comm -13 <(echo "$shm_before") <(ls /dev/shm 2>/dev/null | sort) | grep -E '^odx-[0-9]+-' |
		while read -r seg; do
			pid=${seg#odx-}
			pid=${pid%%-*}
			if [ -s "$ODX_RUN_PIDFILE" ] && ! grep -qx "$pid" "$ODX_RUN_PIDFILE"; then
				continue
			fi
			kill -0 "$pid" 2>/dev/null || echo "$seg"
		done
}
leftover=$(dead_segments)
if [ -n "$leftover" ]; then
	sleep 1
	leftover=$(dead_segments)
fi
if [ -n "$leftover" ]; then
	echo "FAIL: shm segments left behind: $leftover"
	rc=1
fi
exit $rc
