#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench/cholesky.sh - tiled Cholesky in single precision, ODX (bench/cholesky --f32, built from
# examples/cholesky.c) against StarPU's cholesky_implicit (starpu-examples, which factorises floats:
# spotrf, strsm, ssyrk, sgemm; until 2026-11-26 ODX ran in double precision here, half of sgemm's
# speed, so earlier ratios understate ODX by about 2x), both with OpenBLAS on
# one thread per worker (OPENBLAS_NUM_THREADS=1) and the same number of workers: W host devices of
# one thread each against STARPU_NCPU=W. Same N and tile count on both sides; both time from the
# first submission to the end of the last task and count N^3 / 3 flops.
#
# Builds ./build if needed, runs one untimed warm-up of each side, then alternates ODX and StarPU
# (A B A B ...) for PAIRS pairs per size and prints, per size, the median, min and max GFLOP/s of
# both and the median of the per-pair ratios ODX/StarPU (> 1: ODX faster) as JSON lines, then a
# table. Raw outputs stay in the results directory it prints. Run through `scripts/bench cholesky`
# or directly.
#
#   usage: bench/cholesky.sh [-w WORKERS] [-p PAIRS] [-s "N/NB ..."] [-o DIR] [-B BUILDDIR]
set -euo pipefail

usage() {
	cat <<EOF
usage: bench/cholesky.sh [-w WORKERS] [-p PAIRS] [-s "N/NB ..."] [-o DIR] [-B BUILDDIR]
  -w WORKERS  ODX host devices (one thread each) and StarPU CPU workers (default 2)
  -p PAIRS    ODX/StarPU pairs per size, alternated (default 5)
  -s SIZES    matrix size / tiles per dimension (default "3840/12 7680/24")
  -o DIR      where raw outputs go (default BUILDDIR/bench-results/cholesky-DATE)
  -B BUILDDIR the meson build directory, set up if needed (default build)
EOF
}

workers=2
pairs=5
sizes="3840/12 7680/24"
outdir=""
builddir=build
while getopts "w:p:s:o:B:h" opt; do
	case $opt in
	w) workers=$OPTARG ;;
	p) pairs=$OPTARG ;;
	s) sizes=${OPTARG//,/ } ;;
	o) outdir=$OPTARG ;;
	B) builddir=$OPTARG ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -ne 0 ] || ! [[ $workers =~ ^[1-9][0-9]*$ && $pairs =~ ^[1-9][0-9]*$ ]]; then
	usage >&2
	exit 2
fi
for s in $sizes; do
	if ! [[ $s =~ ^([1-9][0-9]*)/([1-9][0-9]*)$ ]] ||
		((BASH_REMATCH[1] % BASH_REMATCH[2] != 0)); then
		echo "bad size '$s': N/NB with NB dividing N" >&2
		exit 2
	fi
done

# shellcheck source=scripts/lib/deps.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/deps.sh"
# shellcheck source=scripts/lib/build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/build.sh"
cd "$ODX_ROOT"

odx_deps_install build bench
odx_meson_setup "$builddir" -Dbench=true
meson compile -C "$builddir"
odx_bin=$(cd "$builddir" && pwd)/bench/cholesky
[[ -x "$odx_bin" ]] || odx_die "$odx_bin was not built (is libopenblas-dev installed?)"
starpu_bin=$(dpkg -L starpu-examples | grep '/examples/cholesky_implicit$' | head -n 1)
[[ -x "$starpu_bin" ]] || odx_die "cholesky_implicit missing from starpu-examples"
starpu_version=$(dpkg-query -W -f='${Version}' starpu-examples)

cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
echo "machine: $(nproc) CPUs, ${cpu:-unknown CPU}"
uptime
if awk -v n="$(nproc)" '{exit !($1 > 0.25 * n)}' /proc/loadavg; then
	odx_log "WARNING: load average $(cut -d' ' -f1 /proc/loadavg) on $(nproc) CPUs:" \
		"figures will be noisy"
fi

date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
outdir=${outdir:-$builddir/bench-results/cholesky-$date}
mkdir -p "$outdir"
raw=$outdir/raw.tsv
: >"$raw"

# Each prints the GFLOP/s of one run (N^3 / 3 flops over the factorisation's time).
run_odx() {
	local n=$1 nb=$2 out
	out=$(env ODX_CONFIG= ODX_BACKENDS=host ODX_HOST_DEVICES="$workers" ODX_HOST_THREADS=1 \
		OPENBLAS_NUM_THREADS=1 "$odx_bin" --f32 --no-check "$n" $((n / nb)) 2>&1) ||
		{ echo "$out" >&2; return 1; }
	awk '$1 == "rate" {print $2; found = 1} END {exit !found}' <<<"$out" ||
		{ echo "no rate in ODX's output: $out" >&2; return 1; }
}
run_starpu() {
	local n=$1 nb=$2 out
	out=$(env STARPU_SILENT=1 STARPU_NCPU="$workers" STARPU_NCUDA=0 STARPU_NOPENCL=0 \
		STARPU_NMIC=0 STARPU_NMPIMSTHREADS=0 OPENBLAS_NUM_THREADS=1 \
		"$starpu_bin" -size "$n" -nblocks "$nb" 2>&1) || { echo "$out" >&2; return 1; }
	# "# size	ms	GFlop/s" then the figures; GFLOP/s recomputed from ms (printed to 0.1)
	awk -v n="$n" 'prev ~ /^# size/ && $2 > 0 {printf "%.4f\n", n * n * n / 3 / ($2 * 1e6);
		found = 1} {prev = $0} END {exit !found}' <<<"$out" ||
		{ echo "no timing in StarPU's output: $out" >&2; return 1; }
}

for s in $sizes; do
	n=${s%/*} nb=${s#*/}
	odx_log "$s: warm-up (untimed): ODX, then StarPU"
	run_odx "$n" "$nb" >/dev/null
	run_starpu "$n" "$nb" >/dev/null
	for ((p = 1; p <= pairs; p++)); do
		load=$(cut -d' ' -f1 /proc/loadavg)
		odx_log "$s pair $p/$pairs (load $load): ODX"
		o=$(run_odx "$n" "$nb")
		odx_log "$s pair $p/$pairs: StarPU"
		a=$(run_starpu "$n" "$nb")
		printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$nb" "$p" "$o" "$a" "$load" >>"$raw"
	done
done

python3 - "$raw" "$workers" "$starpu_version" "$date" "$cpu" >"$outdir/summary.txt" <<'EOF'
import json, statistics, sys

raw, workers, starpu_version, date, cpu = sys.argv[1:6]
starpu_name = "starpu-" + ".".join(starpu_version.split(".")[:2])
runs = {}   # (n, nb) -> [(odx, starpu, load)]
for line in open(raw):
    n, nb, _, odx, starpu, load = line.split("\t")
    runs.setdefault((int(n), int(nb)), []).append((float(odx), float(starpu), float(load)))

def spread(v):
    return statistics.median(v), min(v), max(v)

rows = []
for (n, nb), rs in sorted(runs.items()):
    med, lo, hi = spread([r[0] for r in rs])
    amed, alo, ahi = spread([r[1] for r in rs])
    rmed, rlo, rhi = spread([r[0] / r[1] for r in rs])
    out = {"bench": "cholesky", "variant": "%d/%d" % (n, nb), "n": n, "tiles": nb,
           "tile": n // nb, "value": round(med, 3), "min": round(lo, 3), "max": round(hi, 3),
           "unit": "GFLOP/s", "anchor": starpu_name + " cholesky_implicit",
           "anchor_value": round(amed, 3), "anchor_min": round(alo, 3),
           "anchor_max": round(ahi, 3), "ratio": round(rmed, 3), "ratio_min": round(rlo, 3),
           "ratio_max": round(rhi, 3), "pairs": len(rs), "workers": int(workers),
           "load_max": max(r[2] for r in rs), "date": date}
    print(json.dumps(out, separators=(",", ":")))
    rows.append(out)

print()
print("Tiled Cholesky (f32 as StarPU's, OpenBLAS 1 thread per worker), %s workers, %s, %s" % (workers, cpu,
                                                                                  date))
print("GFLOP/s: median [min-max]; ratio = median over pairs of ODX/StarPU (> 1: ODX faster)")
fmt = "%-10s %5s  %-24s %-24s %s"
print(fmt % ("N/tiles", "pairs", "ODX", "StarPU", "ratio"))
for r in rows:
    print(fmt % (r["variant"], r["pairs"], "%.2f [%.2f-%.2f]" % (r["value"], r["min"], r["max"]),
                 "%.2f [%.2f-%.2f]" % (r["anchor_value"], r["anchor_min"], r["anchor_max"]),
                 "%.3f [%.3f-%.3f]" % (r["ratio"], r["ratio_min"], r["ratio_max"])))
EOF
cat "$outdir/summary.txt"
echo
echo "raw results and summary: $outdir"
