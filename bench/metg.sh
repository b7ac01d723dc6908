#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench/metg.sh - METG(50%), the Task Bench idea (Slaughter et al., SC'20): the smallest task
# duration at which a runtime still keeps its workers at least 50% busy, for ODX (bench/metg_odx)
# against StarPU 1.3 (bench/metg_starpu) running the same task graphs (bench/metg.h: trivial,
# stencil_1d, nearest, fft, tree; widths 2 and 4) on the same number of workers, each result checked bit
# for bit against a sequential evaluation by the programs themselves.
#
# Each pass: waits (up to -g seconds) for the 1-minute load to drop below -l, calibrates the busy
# loop once (ns per iteration, best of 31 samples on one core; both runtimes count a task's time
# with that figure), then for every task size, smallest first, runs ODX then StarPU (A B A B ...),
# each a fresh process running every pattern and width once after an untimed warm-up.
#   efficiency = tasks * (task's time alone on one core) / (wall time * workers)
#   METG(50%)  = the smallest task time whose efficiency is >= 0.5, interpolated (in log size)
#                with the size below it; "<" when the smallest size already reaches 0.5
# Task sizes are the kernel's time ("kernel-time convention"); Task Bench's own METG counts
# wall * workers / tasks instead, which is 2x the kernel time at exactly 50% efficiency.
#
# Prints per pattern and width the median, min and max over passes of each side's METG, the
# median of the per-pass ratios StarPU METG / ODX METG (> 1: ODX better), and each side's
# efficiency at 5, 10, 20 and 50 us, as JSON lines ("bench":"metg") then a table; the
# efficiency curves as "bench":"metg_curve" lines (scripts/perf-plots draws them). Raw outputs
# stay in the results directory it prints. Run through `scripts/bench metg` or directly.
#
# -n RANKS: the same graphs over RANKS processes of -w workers each (default 1 worker per rank):
# ODX's metg_odx under scripts/odx-run over its fabric (-f: shm by default, or tcp) against
# StarPU-MPI's metg_starpu_mpi under Open MPI's mpirun (same owners: contiguous blocks of
# columns; owner computes on both sides). Efficiency counts every rank's workers. trivial is
# left out there (no data to place its tasks by).
#
#   usage: bench/metg.sh [-w WORKERS] [-W "WIDTHS"] [-P "PATTERNS"] [-p PASSES] [-s "SIZES_US"]
#                        [-d SECONDS] [-N MAX_TASKS] [-r RADIX] [-g WAIT_S] [-l LOAD]
#                        [-n RANKS] [-f PROVIDER] [-o DIR] [-B BUILDDIR]
set -euo pipefail

usage() {
	cat <<EOF
usage: bench/metg.sh [options]
  -w WORKERS   ODX host devices (one thread each) and StarPU CPU workers (default 2; per rank
               with -n, default 1 there)
  -W WIDTHS    graph widths (default "2 4")
  -P PATTERNS  trivial stencil_1d nearest fft tree (default all five)
  -p PASSES    passes over every size (default 5)
  -s SIZES     task sizes in us, geometric (default "1 2 3 5 7 10 15 20 30 50 70 100 200 500 1000")
  -d SECONDS   ideal duration of each graph, which sets its steps (default 0.1)
  -N TASKS     at most this many tasks per graph (default 100000)
  -r RADIX     nearest's radix (default 5; 3 would be stencil_1d)
  -g WAIT_S    before each pass, wait up to this long for the load to drop (default 60; 0: no)
  -l LOAD      the 1-minute load counted as idle (default 0.25 x CPUs)
  -n RANKS     run over RANKS processes: ODX under scripts/odx-run, StarPU-MPI under mpirun
               (default 1: one process, no fabric)
  -f PROVIDER  ODX's fabric with -n: shm (default) or tcp
  -o DIR       where raw outputs go (default BUILDDIR/bench-results/metg-DATE)
  -B BUILDDIR  the meson build directory, set up if needed (default build)
EOF
}

workers=""
ranks=1
provider=shm
widths="2 4"
patterns="trivial stencil_1d nearest fft tree"
passes=5
sizes="1 2 3 5 7 10 15 20 30 50 70 100 200 500 1000"
target=0.1
max_tasks=100000
radix=5
gate_s=60
idle_load=""
outdir=""
builddir=build
while getopts "w:W:P:p:s:d:N:r:g:l:n:f:o:B:h" opt; do
	case $opt in
	n) ranks=$OPTARG ;;
	f) provider=$OPTARG ;;
	w) workers=$OPTARG ;;
	W) widths=${OPTARG//,/ } ;;
	P) patterns=${OPTARG//,/ } ;;
	p) passes=$OPTARG ;;
	s) sizes=${OPTARG//,/ } ;;
	d) target=$OPTARG ;;
	N) max_tasks=$OPTARG ;;
	r) radix=$OPTARG ;;
	g) gate_s=$OPTARG ;;
	l) idle_load=$OPTARG ;;
	o) outdir=$OPTARG ;;
	B) builddir=$OPTARG ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[[ $ranks =~ ^[1-9][0-9]*$ && ($provider == shm || $provider == tcp) ]] || { usage >&2; exit 2; }
workers=${workers:-$( ((ranks > 1)) && echo 1 || echo 2)}
if ((ranks > 1)); then
	# no data: nothing to place its tasks by on several ranks
	patterns=$(echo "$patterns" | tr ' ' '\n' | { grep -vx trivial || true; } | tr '\n' ' ')
	[[ -n ${patterns// /} ]] || odx_die "no pattern left for $ranks ranks (trivial is not run there)"
fi
if [ $# -ne 0 ] || ! [[ $workers =~ ^[1-9][0-9]*$ && $passes =~ ^[1-9][0-9]*$ &&
	$gate_s =~ ^[0-9]+$ ]]; then
	usage >&2
	exit 2
fi
for s in $sizes; do
	[[ $s =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "bad size '$s' (us)" >&2; exit 2; }
done

# shellcheck source=scripts/lib/deps.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/deps.sh"
# shellcheck source=scripts/lib/build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/build.sh"
cd "$ODX_ROOT"

# StarPU's headers and library come with libstarpu-dev (the bench group): meson then builds
# metg_starpu beside metg_odx.
odx_deps_install build bench
odx_meson_setup "$builddir" -Dbench=true
meson compile -C "$builddir"
bindir=$(cd "$builddir" && pwd)/bench
odx_bin=$bindir/metg_odx
starpu_bin=$bindir/metg_starpu
[[ -x "$odx_bin" ]] || odx_die "$odx_bin was not built"
if ((ranks > 1)); then
	starpu_bin=$bindir/metg_starpu_mpi
	command -v mpirun >/dev/null || odx_die "mpirun (openmpi-bin) is needed for -n $ranks"
fi
[[ -x "$starpu_bin" ]] ||
	odx_die "$starpu_bin was not built: is libstarpu-dev installed (pkg-config starpu-1.3)?"
starpu_version=$(dpkg-query -W -f='${Version}' libstarpu-dev 2>/dev/null || echo unknown)

cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
ncpu=$(nproc)
idle_load=${idle_load:-$(awk -v n="$ncpu" 'BEGIN {print 0.25 * n}')}
echo "machine: $ncpu CPUs, ${cpu:-unknown CPU}; $ranks rank(s) of $workers worker(s)"
uptime
top -bn1 | head -n 12 || true

date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
suffix=$( ((ranks > 1)) && echo "-${ranks}ranks-$provider" || true)
outdir=${outdir:-$builddir/bench-results/metg-$date$suffix}
mkdir -p "$outdir"
raw=$outdir/raw.jsonl
: >"$raw"

load1() { cut -d' ' -f1 /proc/loadavg; }
is_idle() { awk -v l="$(load1)" -v max="$idle_load" 'BEGIN {exit !(l < max)}'; }

# Waits up to gate_s for an idle machine; either way the load goes into every raw line.
gate() {
	local waited=0
	while ! is_idle && ((waited < gate_s)); do
		((waited % 30 == 0)) && odx_log "load $(load1) >= $idle_load: waiting (${waited}s of ${gate_s}s)"
		sleep 5
		waited=$((waited + 5))
	done
	is_idle || odx_log "WARNING: load $(load1) on $ncpu CPUs after ${waited}s: figures will be noisy"
}

common_args=(-w "$workers" -r "$radix" -d "$target" -N "$max_tasks")
for w in $widths; do common_args+=(-W "$w"); done
for p in $patterns; do common_args+=(-P "$p"); done

# How each side is started: one process, or RANKS of them (odx-run prefixes lines "[rank] ";
# only rank 0 prints results). StarPU-MPI: mpirun with no binding (StarPU binds its own
# workers), root allowed (CI containers), the StarPU variables passed to every rank.
launch_odx=()
launch_starpu=()
if ((ranks > 1)); then
	launch_odx=("$ODX_ROOT/scripts/odx-run" -n "$ranks" --timeout 600 --)
	launch_starpu=(mpirun -np "$ranks" --oversubscribe --bind-to none --allow-run-as-root
		-x STARPU_SILENT -x STARPU_NCPU -x STARPU_NCUDA -x STARPU_NOPENCL -x STARPU_NMIC
		-x STARPU_NMPIMSTHREADS)
	export ODX_FABRIC_PROVIDER=$provider
fi

# One process of one runtime at one size: its JSON lines, tagged with the pass, size and load.
run_one() {
	local bin=$1 pass=$2 size=$3 iters=$4 ns=$5 load line
	local -a launch=("${launch_odx[@]}")
	[[ $bin == "$starpu_bin" ]] && launch=("${launch_starpu[@]}")
	load=$(load1)
	"${launch[@]}" "$bin" "${common_args[@]}" -i "$iters" -c "$ns" | while IFS= read -r line; do
		line=${line#\[0\] }
		[[ $line == \{* ]] || continue
		echo "{\"pass\":$pass,\"size_us\":$size,\"load\":$load,${line#\{}"
	done
	# a wrong result or a crash stops the sweep (pipefail: the program's status)
}

# StarPU's workers as ODX's: W CPU workers and nothing else (the variables win over starpu_conf).
run_starpu() {
	STARPU_SILENT=1 STARPU_NCPU="$workers" STARPU_NCUDA=0 STARPU_NOPENCL=0 STARPU_NMIC=0 \
		STARPU_NMPIMSTHREADS=0 run_one "$starpu_bin" "$@"
}
calibrate() { "$odx_bin" -C | sed 's/.*"ns_per_iter":\([0-9.]*\).*/\1/'; }

export ODX_CONFIG=
odx_log "warm-up (untimed): ODX, then StarPU, at 10 us"
ns=$(calibrate)
warm_iters=$(awk -v ns="$ns" 'BEGIN {printf "%d", 10000 / ns}')
run_one "$odx_bin" 0 10 "$warm_iters" "$ns" >/dev/null
run_starpu 0 10 "$warm_iters" "$ns" >/dev/null

for ((p = 1; p <= passes; p++)); do
	gate
	ns=$(calibrate)
	echo "{\"bench\":\"metg_calibrate\",\"pass\":$p,\"ns_per_iter\":$ns,\"load\":$(load1)}" >>"$raw"
	odx_log "pass $p/$passes: $ns ns per busy-loop iteration, load $(load1)"
	for size in $sizes; do
		iters=$(awk -v s="$size" -v ns="$ns" 'BEGIN {i = int(s * 1000 / ns + 0.5); print i < 1 ? 1 : i}')
		odx_log "pass $p/$passes, ${size} us ($iters iterations), load $(load1): ODX, StarPU"
		run_one "$odx_bin" "$p" "$size" "$iters" "$ns" >>"$raw"
		run_starpu "$p" "$size" "$iters" "$ns" >>"$raw"
	done
done

python3 "$(dirname "${BASH_SOURCE[0]}")/metg_summary.py" "$raw" "$starpu_version" "$date" \
	"$cpu" >"$outdir/summary.txt"
cat "$outdir/summary.txt"
echo
echo "raw results and summary: $outdir"
