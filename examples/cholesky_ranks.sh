#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# cholesky_ranks.sh ODX_RUN CHOLESKY "R1 R2 ..." ARGS... - runs the cholesky example on 1 rank,
# then on each of R1, R2, ... ranks through scripts/odx-run, and checks that every run verifies
# and that every rank of every run prints the checksum of the 1-rank run: the tiles moved between
# ranks, the factor did not change by a bit.
set -u
odx_run=$1
prog=$2
ranks=$3
shift 3

one=$("$prog" "$@") || { echo "1 rank failed:"; echo "$one"; exit 1; }
echo "$one"
want=$(awk '/checksum/ {print $3}' <<<"$one" | tr -d ,)
[[ -n $want ]] || { echo "no checksum from the 1-rank run"; exit 1; }
for r in $ranks; do
	out=$(bash "$odx_run" -n "$r" --timeout 150 "$prog" "$@") || {
		echo "$r ranks failed:"; echo "$out"; exit 1; }
	echo "$out"
	got=$(awk '/checksum/ {print $4}' <<<"$out" | tr -d , | sort -u)
	[[ $(grep -c 'verify  ok' <<<"$out") == "$r" ]] || {
		echo "$r ranks: not every rank verified"; exit 1; }
	[[ $(grep -c checksum <<<"$out") == "$r" ]] || {
		echo "$r ranks: not every rank printed a checksum"; exit 1; }
	if [[ "$got" != "$want" ]]; then
		echo "checksums differ: 1 rank $want, $r ranks: $got"
		exit 1
	fi
	echo "1 and $r ranks: same factor ($want)"
done
