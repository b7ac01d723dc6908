#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# groupby_ranks.sh ODX_RUN GROUPBY RANKS - runs the group-by example on RANKS ranks through
# scripts/odx-run with small sizes, uniform keys then Zipf 1.1 keys (a hot key, the combiner at
# work), and a case with fewer keys than ranks (some ranks receive nothing at all). Each run must
# verify on every rank (key by key against the sequential reference), and every rank must print
# the same digest.
set -u
odx_run=$1
prog=$2
ranks=$3

run() {
	local out
	out=$(bash "$odx_run" -n "$ranks" --timeout 150 "$prog" "$@") || {
		echo "$ranks ranks, $* failed:"; echo "$out"; return 1; }
	echo "$out"
	[[ $(grep -c 'verify  ok' <<<"$out") == "$ranks" ]] ||
		{ echo "not every rank verified ($*)"; return 1; }
	[[ $(grep -o 'checksum [0-9a-f]*' <<<"$out" | sort -u | wc -l) == 1 ]] ||
		{ echo "the ranks print different digests ($*)"; return 1; }
}

run -n 20000 -k 5000 -z 0 &&
	run -n 20000 -k 5000 -z 1.1 -r 2 &&
	run -n 3000 -k 1 -z 0
