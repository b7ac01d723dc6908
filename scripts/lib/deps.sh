# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
#
# scripts/lib/deps.sh - the one list of Debian packages ODX needs, and the function that installs
# what is missing. Sourced by scripts/demo, scripts/test (and scripts/bench); never run directly.
#
#   odx_deps_install build          # what building, testing and the demo need
#   odx_deps_install build bench    # plus the benchmark anchors (StarPU)
#   odx_deps_install build mpi      # plus Open MPI's compiler wrapper and headers (bench/shuffle)
#
# It asks dpkg-query first and calls apt-get (update, then install) only when something is
# missing, so a second run costs a few milliseconds and needs no network. Set ODX_SKIP_DEPS=1 to
# skip the check entirely (e.g. on a machine that is not Debian but has the tools).

# shellcheck disable=SC2034  # the lists are read through odx_deps_list
ODX_DEPS_BUILD=(meson ninja-build pkg-config gcc libinih-dev libhwloc-dev hwloc libcmocka-dev liblua5.4-dev
	libvulkan-dev libvulkan1 glslc spirv-tools mesa-vulkan-drivers vulkan-validationlayers
	ocl-icd-opencl-dev ocl-icd-libopencl1 pocl-opencl-icd clang
	libfabric-dev libfabric-bin libpmix-dev openmpi-bin liburing-dev iproute2 zlib1g-dev
	libopenblas-dev)
# shellcheck disable=SC2034
ODX_DEPS_BENCH=(libstarpu-dev starpu-examples)
# shellcheck disable=SC2034
ODX_DEPS_MPI=(openmpi-bin libopenmpi-dev)

# The repository root, whichever directory the calling script was started from.
ODX_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

odx_log() { printf '==> %s\n' "$*" >&2; }
odx_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Prints the packages of the named groups (build, bench, mpi), one per line.
odx_deps_list() {
	local group
	for group in "$@"; do
		case "$group" in
		build) printf '%s\n' "${ODX_DEPS_BUILD[@]}" ;;
		bench) printf '%s\n' "${ODX_DEPS_BENCH[@]}" ;;
		mpi) printf '%s\n' "${ODX_DEPS_MPI[@]}" ;;
		*) odx_die "unknown dependency group '$group' (build, bench, mpi)" ;;
		esac
	done
}

# Prints the packages of the named groups that are not installed.
odx_deps_missing() {
	local pkg
	while read -r pkg; do
		# "ii " = wanted and installed; anything else (or unknown to dpkg) is missing.
		if [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null)" != ii* ]]; then
			printf '%s\n' "$pkg"
		fi
	done < <(odx_deps_list "$@")
}

odx_deps_install() {
	[[ "${ODX_SKIP_DEPS:-0}" == 1 ]] && return 0
	if ! command -v dpkg-query >/dev/null 2>&1; then
		odx_log "not a Debian system: not installing packages; needed: $(odx_deps_list "$@" | tr '\n' ' ')"
		return 0
	fi
	local missing=()
	mapfile -t missing < <(odx_deps_missing "$@")
	((${#missing[@]} == 0)) && return 0

	local sudo=()
	if ((EUID != 0)); then
		command -v sudo >/dev/null 2>&1 ||
			odx_die "missing packages: ${missing[*]} (run as root, or install them first)"
		sudo=(sudo)
	fi
	odx_log "installing: ${missing[*]}"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends "${missing[@]}"
}
