# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
#
# scripts/lib/build.sh - meson helpers shared by scripts/demo and scripts/test. Source deps.sh first.

# odx_meson_setup DIR [-Dkey=value ...]
# Configures DIR if it is not a build directory yet. If it is, changes only the options whose
# current value differs (a "meson configure" that changes nothing still forces a regeneration, so
# it is skipped to keep second runs fast). Options not named are left as they are.
odx_meson_setup() {
	local dir="$1"
	shift
	if [[ ! -f "$dir/build.ninja" || ! -d "$dir/meson-private" ]]; then
		odx_log "meson setup $dir $*"
		meson setup "$dir" "$@"
		return
	fi
	local changed=()
	mapfile -t changed < <(odx__meson_changed_options "$dir" "$@")
	if ((${#changed[@]} > 0)); then
		odx_log "meson configure $dir ${changed[*]}"
		meson configure "$dir" "${changed[@]}"
	fi
}

# Prints the -Dkey=value arguments whose value differs from DIR's current configuration.
odx__meson_changed_options() {
	local dir="$1"
	shift
	(($# == 0)) && return 0
	meson introspect "$dir" --buildoptions | python3 -c '
import json, sys
current = {}
for opt in json.load(sys.stdin):
    v = opt["value"]
    if isinstance(v, bool):
        v = "true" if v else "false"
    elif isinstance(v, list):
        v = ",".join(str(x) for x in v)
    current[opt["name"]] = str(v)
for arg in sys.argv[1:]:
    key, _, value = arg[2:].partition("=")
    if current.get(key) != value:
        print(arg)
' "$@"
}
