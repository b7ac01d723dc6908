#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# check_symbols.sh LIBODX.so - fails if the library exports a function or object whose name does
# not start with `odx_`, or an internal `odx__` name. Everything else must stay hidden
# (-fvisibility=hidden plus ODX_API on the public declarations).
set -eu

lib=${1:?usage: check_symbols.sh path/to/libodx.so}
[ -f "$lib" ] || { echo "check_symbols: no such file: $lib" >&2; exit 1; }

# Defined dynamic symbols: "ADDRESS TYPE NAME". Text (T), data (D, B, R) and weak (W, V) symbols
# count; the linker's own markers (_init, _fini, version nodes of type A) do not.
syms=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtDdBbRrWwVvi]$/ { print $3 }' |
	sed 's/@.*//' | grep -v -x -e _init -e _fini || true)

if [ -z "$syms" ]; then
	echo "check_symbols: $lib exports nothing" >&2
	exit 1
fi

bad=$(printf '%s\n' "$syms" | grep -v '^odx_' || true)
internal=$(printf '%s\n' "$syms" | grep '^odx__' || true)
status=0
if [ -n "$bad" ]; then
	echo "check_symbols: exported without the odx_ prefix:" >&2
	printf '  %s\n' $bad >&2
	status=1
fi
if [ -n "$internal" ]; then
	echo "check_symbols: internal odx__ names exported:" >&2
	printf '  %s\n' $internal >&2
	status=1
fi
[ $status -ne 0 ] || echo "check_symbols: $(printf '%s\n' "$syms" | wc -l) symbols, all odx_"
exit $status
