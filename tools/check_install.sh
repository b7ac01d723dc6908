#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# check_install.sh BUILDDIR - `meson install` into a scratch DESTDIR puts the launcher beside the
# odx tool, and the installed launcher starts ranks with no source tree around it.
set -eu
build="$1"
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --no-rebuild --quiet --destdir "$dest" >/dev/null
odx=$(find "$dest" -path '*/bin/odx' -type f)
run=$(find "$dest" -path '*/bin/odx-run' -type f)
[ -n "$odx" ] || { echo "check_install: no bin/odx installed" >&2; exit 1; }
[ -n "$run" ] || { echo "check_install: no bin/odx-run installed" >&2; exit 1; }
[ "$(dirname "$odx")" = "$(dirname "$run")" ] || { echo "check_install: odx-run not beside odx" >&2; exit 1; }
[ -x "$run" ] || { echo "check_install: odx-run is not executable" >&2; exit 1; }
# The copy runs from anywhere: two ranks, each printing what odx-run gave it.
out=$(cd / && "$run" -n 2 --timeout 60 sh -c 'echo "rank=$ODX_RANK size=$ODX_SIZE"')
printf '%s\n' "$out"
printf '%s\n' "$out" | grep -q '^\[0\] rank=0 size=2$' || { echo "check_install: rank 0 missing" >&2; exit 1; }
printf '%s\n' "$out" | grep -q '^\[1\] rank=1 size=2$' || { echo "check_install: rank 1 missing" >&2; exit 1; }
