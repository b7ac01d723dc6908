#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench/shuffle.sh - the distributed hash group-by of issue 20, ODX (examples/groupby.c, built as
# bench/groupby) against a plain MPI program doing the same work (bench/shuffle_mpi.c: counts with
# MPI_Alltoall, rows with MPI_Alltoallv, then a local hash table). Both make the same rows with the
# same generator and the same hash partition, aggregate with the same table algorithm
# (bench/shuffle_common.h), time from the first step after the rows exist to the end of the
# group-by on every rank, and print the digest of their result: every pair must agree on it.
#
# For every configuration (ranks x rows per rank x key distribution, K keys), one untimed warm-up
# of each side, then PAIRS pairs alternated (ODX, MPI, ODX, MPI ...). Each run makes its rows, then
# does the group-by REPS times (-R; buffers kept, the table emptied untimed in between, on both
# sides) and reports the median: what is measured is the exchange and the group-by, not the first
# touch of fresh memory. Prints, per configuration,
# the median, min and max rows/s of both and the median of the per-pair ratios ODX/MPI (> 1: ODX
# faster) as JSON lines ("bench":"shuffle"), then a table, and writes a plot of rows/s against
# rows per rank (scripts/perf-plots) next to the raw outputs, in the results directory it prints.
# Open MPI's compiler wrapper and headers are installed when missing (scripts/lib/deps.sh, group
# mpi). ODX ranks start through scripts/odx-run (each binds to its own slice of the cores), MPI
# ranks through mpirun --allow-run-as-root --oversubscribe (needed as root, and for 4 ranks on 2
# cores).
#
#   usage: bench/shuffle.sh [-q] [-r "RANKS ..."] [-n "ROWS ..."] [-d "DISTS ..."] [-k KEYS]
#                           [-R REPS] [-p PAIRS] [-o DIR] [-B BUILDDIR]
set -euo pipefail

usage() {
	cat <<EOF
usage: bench/shuffle.sh [-q] [-r "RANKS ..."] [-n "ROWS ..."] [-d "DISTS ..."] [-k KEYS]
                        [-R REPS] [-p PAIRS] [-o DIR] [-B BUILDDIR]
  -q          quick smoke check: -r 2 -n 100000 -p 2 (a figure from it is not quotable)
  -r RANKS    rank counts (default "2 4")
  -n ROWS     rows per rank (default "1000000 16000000")
  -d DISTS    key distributions: uniform, zipf (Zipf 1.1) (default "uniform zipf")
  -k KEYS     distinct keys (default 1000000)
  -R REPS     group-bys per run, the median reported (default 3)
  -p PAIRS    ODX/MPI pairs per configuration, alternated (default 5)
  -o DIR      where raw outputs go (default BUILDDIR/bench-results/shuffle-DATE)
  -B BUILDDIR the meson build directory, set up if needed (default build)
EOF
}

ranks_list="2 4"
rows_list="1000000 16000000"
dists="uniform zipf"
keys=1000000
reps=3
pairs=5
outdir=""
builddir=build
while getopts "qr:n:d:k:R:p:o:B:h" opt; do
	case $opt in
	q) ranks_list=2 rows_list=100000 pairs=2 ;;
	r) ranks_list=${OPTARG//,/ } ;;
	n) rows_list=${OPTARG//,/ } ;;
	d) dists=${OPTARG//,/ } ;;
	k) keys=$OPTARG ;;
	R) reps=$OPTARG ;;
	p) pairs=$OPTARG ;;
	o) outdir=$OPTARG ;;
	B) builddir=$OPTARG ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -ne 0 ] || ! [[ $pairs =~ ^[1-9][0-9]*$ && $keys =~ ^[1-9][0-9]*$ &&
	$reps =~ ^[1-9][0-9]*$ ]]; then
	usage >&2
	exit 2
fi
for x in $ranks_list $rows_list; do
	[[ $x =~ ^[1-9][0-9]*$ ]] || { echo "bad count '$x'" >&2; exit 2; }
done
for d in $dists; do
	[[ $d == uniform || $d == zipf ]] || { echo "bad distribution '$d'" >&2; exit 2; }
done

# shellcheck source=scripts/lib/deps.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/deps.sh"
# shellcheck source=scripts/lib/build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/build.sh"
cd "$ODX_ROOT"

odx_deps_install build mpi
odx_meson_setup "$builddir" -Dbench=true
# dependency('mpi') is looked up at configure time: a build directory set up before Open MPI's
# headers were installed has to look again
if [[ ! -x "$builddir/bench/shuffle_mpi" ]] && ! grep -q "shuffle_mpi" "$builddir/build.ninja"; then
	meson setup --reconfigure "$builddir" >/dev/null
fi
meson compile -C "$builddir"
odx_bin=$(cd "$builddir" && pwd)/bench/groupby
mpi_bin=$(cd "$builddir" && pwd)/bench/shuffle_mpi
[[ -x "$odx_bin" ]] || odx_die "$odx_bin was not built"
[[ -x "$mpi_bin" ]] || odx_die "$mpi_bin was not built (is libopenmpi-dev installed?)"
odx_run=$ODX_ROOT/scripts/odx-run
mpi_version=$(dpkg-query -W -f='${Version}' openmpi-bin 2>/dev/null || echo unknown)

cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
echo "machine: $(nproc) CPUs, ${cpu:-unknown CPU}"
uptime
top -bn1 | head -n 12 || true
if awk -v n="$(nproc)" '{exit !($1 > 0.25 * n)}' /proc/loadavg; then
	odx_log "WARNING: load average $(cut -d' ' -f1 /proc/loadavg) on $(nproc) CPUs:" \
		"figures will be noisy"
fi

date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
outdir=${outdir:-$builddir/bench-results/shuffle-$date}
mkdir -p "$outdir"
raw=$outdir/raw.jsonl
: >"$raw"

zipf_s() { [[ $1 == zipf ]] && echo 1.1 || echo 0; }

# Each prints the program's JSON line (rank 0's), after checking that it is there.
run_odx() {
	local p=$1 n=$2 dist=$3 out
	out=$(env ODX_CONFIG= ODX_BACKENDS=host \
		"$odx_run" -n "$p" --timeout 600 "$odx_bin" -n "$n" -k "$keys" -z "$(zipf_s "$dist")" \
		-r "$reps" --no-check 2>&1) || { echo "$out" >&2; return 1; }
	grep -o '{"bench":"shuffle","side":"odx".*}' <<<"$out" | head -n 1 | grep . ||
		{ echo "no result line in ODX's output: $out" >&2; return 1; }
}
run_mpi() {
	local p=$1 n=$2 dist=$3 out
	out=$(timeout 600 mpirun --allow-run-as-root --oversubscribe -n "$p" "$mpi_bin" -n "$n" \
		-k "$keys" -z "$(zipf_s "$dist")" -r "$reps" 2>&1) || { echo "$out" >&2; return 1; }
	grep -o '{"bench":"shuffle","side":"mpi".*}' <<<"$out" | head -n 1 | grep . ||
		{ echo "no result line in the MPI program's output: $out" >&2; return 1; }
}
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

for p in $ranks_list; do
	for n in $rows_list; do
		for dist in $dists; do
			cfg="$p ranks x $n rows, $dist"
			odx_log "$cfg: warm-up (untimed): ODX, then MPI"
			run_odx "$p" "$n" "$dist" >/dev/null
			run_mpi "$p" "$n" "$dist" >/dev/null
			for ((i = 1; i <= pairs; i++)); do
				load=$(cut -d' ' -f1 /proc/loadavg)
				odx_log "$cfg, pair $i/$pairs (load $load): ODX"
				o=$(run_odx "$p" "$n" "$dist")
				odx_log "$cfg, pair $i/$pairs: MPI"
				m=$(run_mpi "$p" "$n" "$dist")
				if [[ $(field "$o" checksum) != $(field "$m" checksum) ||
					$(field "$o" groups) != $(field "$m" groups) ]]; then
					odx_die "$cfg: ODX and MPI disagree: $o / $m"
				fi
				echo "{\"pair\":$i,\"load\":$load,${o#\{}" >>"$raw"
				echo "{\"pair\":$i,\"load\":$load,${m#\{}" >>"$raw"
			done
		done
	done
done

python3 - "$raw" "$mpi_version" "$date" "$cpu" "$reps" >"$outdir/summary.txt" <<'EOF'
import json, statistics, sys

raw, mpi_version, date, cpu, reps = sys.argv[1:6]
mpi_name = "openmpi-" + ".".join(mpi_version.split(".")[:2])
runs = {}   # (ranks, rows, zipf_s) -> {pair: {side: record}}
for line in open(raw):
    r = json.loads(line)
    key = (r["ranks"], r["rows_per_rank"], r["zipf_s"])
    runs.setdefault(key, {}).setdefault(r["pair"], {})[r["side"]] = r

def spread(v):
    return statistics.median(v), min(v), max(v)

rows = []
for (ranks, n, z), per_pair in sorted(runs.items()):
    both = [p for p in per_pair.values() if "odx" in p and "mpi" in p]
    o = [p["odx"]["rows_per_s"] for p in both]
    m = [p["mpi"]["rows_per_s"] for p in both]
    med, lo, hi = spread(o)
    amed, alo, ahi = spread(m)
    rmed, rlo, rhi = spread([a / b for a, b in zip(o, m)])
    dist = "zipf%g" % z if z > 0 else "uniform"
    out = {"bench": "shuffle", "variant": "%dx%d/%s" % (ranks, n, dist), "ranks": ranks,
           "rows_per_rank": n, "dist": dist, "keys": both[0]["odx"]["keys"],
           "value": round(med), "min": round(lo), "max": round(hi), "unit": "rows/s",
           "anchor": mpi_name + " MPI_Alltoallv (bench/shuffle_mpi)",
           "anchor_value": round(amed), "anchor_min": round(alo), "anchor_max": round(ahi),
           "ratio": round(rmed, 3), "ratio_min": round(rlo, 3), "ratio_max": round(rhi, 3),
           "pairs": len(both), "reps": int(reps), "checksum": both[0]["odx"]["checksum"],
           "load_max": max(p["odx"]["load"] for p in both), "date": date}
    print(json.dumps(out, separators=(",", ":")))
    rows.append(out)

print()
print("Distributed hash group-by, ODX against MPI_Alltoallv, %s, %s" % (cpu, date))
print("Mrows/s: median [min-max]; ratio = median over pairs of ODX/MPI (> 1: ODX faster)")
fmt = "%-26s %5s  %-22s %-22s %s"
print(fmt % ("ranks x rows/dist", "pairs", "ODX", "MPI", "ratio"))
for r in rows:
    print(fmt % (r["variant"], r["pairs"],
                 "%.1f [%.1f-%.1f]" % (r["value"] / 1e6, r["min"] / 1e6, r["max"] / 1e6),
                 "%.1f [%.1f-%.1f]" % (r["anchor_value"] / 1e6, r["anchor_min"] / 1e6,
                                       r["anchor_max"] / 1e6),
                 "%.3f [%.3f-%.3f]" % (r["ratio"], r["ratio_min"], r["ratio_max"])))
EOF
cat "$outdir/summary.txt"
echo
if ! "$ODX_ROOT/scripts/perf-plots" -o "$outdir" -t "$cpu, $date" "$outdir/summary.txt" \
	>/dev/null; then
	odx_log "no plot (scripts/perf-plots failed)"
fi
echo "raw results, summary and plot: $outdir"
