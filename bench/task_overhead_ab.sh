#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench/task_overhead_ab.sh - two builds of ODX side by side on bench/task_overhead: A B A B ...
# for ROUNDS rounds (each a fresh process of each build), then per variant the median [min-max]
# us/task of each build and the median of the per-round ratios A/B (> 1: B is faster). For a
# change to the scheduler: build the commit before it in another directory, e.g.
#
#   mkdir /tmp/odx-before && git archive HEAD~1 | tar -x -C /tmp/odx-before
#   meson setup /tmp/odx-before/build /tmp/odx-before && ninja -C /tmp/odx-before/build bench/task_overhead
#   bench/task_overhead_ab.sh -r 11 /tmp/odx-before/build build
#
# The load is printed before and after: alternate on a quiet machine, and quote the range.
#
#   usage: bench/task_overhead_ab.sh [-r ROUNDS] [-n TASKS] [-v VARIANT]... BUILD_A BUILD_B
set -euo pipefail

rounds=7
ntasks=100000
variants=()
while getopts "r:n:v:h" opt; do
	case $opt in
	r) rounds=$OPTARG ;;
	n) ntasks=$OPTARG ;;
	v) variants+=(-v "$OPTARG") ;;
	*) sed -n '3,17p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { sed -n '3,17p' "$0" >&2; exit 2; }
((${#variants[@]})) || variants=(-v 0buf -v 2buf -v 2buf-chain)
a=$1
b=$2
for d in "$a" "$b"; do
	[[ -x $d/bench/task_overhead ]] || { echo "no $d/bench/task_overhead" >&2; exit 1; }
done

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
export ODX_CONFIG=
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
	for side in A B; do
		dir=$a
		[[ $side == B ]] && dir=$b
		"$dir/bench/task_overhead" -n "$ntasks" "${variants[@]}" -r 1 |
			sed "s/^{/{\"side\":\"$side\",\"round\":$r,/" >>"$raw"
	done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$raw" "$a" "$b" <<'PY'
import json, statistics, sys
raw, a, b = sys.argv[1:4]
runs = {}
for line in open(raw):
    r = json.loads(line)
    runs.setdefault(r["variant"], {}).setdefault(r["side"], {})[r["round"]] = r["value"]
print("us/task, median [min-max]; A = %s, B = %s; ratio = median over rounds of A/B" % (a, b))
for v, sides in runs.items():
    cells = []
    for s in ("A", "B"):
        x = list(sides[s].values())
        cells.append("%.3f [%.3f-%.3f]" % (statistics.median(x), min(x), max(x)))
    common = set(sides["A"]) & set(sides["B"])
    ratio = statistics.median(sides["A"][k] / sides["B"][k] for k in common)
    print("%-22s A %-24s B %-24s A/B %.2f" % (v, cells[0], cells[1], ratio))
PY
