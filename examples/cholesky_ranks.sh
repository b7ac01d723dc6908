#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# cholesky_ranks.sh ODX_RUN CHOLESKY ARGS... - runs the cholesky example on 1 rank, then on 2
# ranks through scripts/odx-run, and checks that each run verifies and that every rank of the
# 2-rank run prints the checksum of the 1-rank run: the tiles moved between ranks, the factor did
# not change by a bit.
set -u
odx_run=$1
prog=$2
shift 2

one=$("$prog" "$@") || { echo "1 rank failed:"; echo "$one"; exit 1; }
echo "$one"
two=$(bash "$odx_run" -n 2 --timeout 150 "$prog" "$@") || {
	echo "2 ranks failed:"; echo "$two"; exit 1; }
echo "$two"

want=$(awk '/checksum/ {print $3}' <<<"$one" | tr -d ,)
got=$(awk '/checksum/ {print $4}' <<<"$two" | tr -d , | sort -u)
[[ -n $want ]] || { echo "no checksum from the 1-rank run"; exit 1; }
[[ $(grep -c 'verify  ok' <<<"$two") == 2 ]] || { echo "not every rank verified"; exit 1; }
[[ $(grep -c checksum <<<"$two") == 2 ]] || { echo "not every rank printed a checksum"; exit 1; }
if [[ "$got" != "$want" ]]; then
	echo "checksums differ: 1 rank $want, 2 ranks: $got"
	exit 1
fi
echo "1 and 2 ranks: same factor ($want)"
