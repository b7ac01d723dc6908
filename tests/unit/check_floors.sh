#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# check_floors.sh - the memory wing's layering rule (core/mem/mem.h): a floor calls only its own
# floor and the floors below it, except the one completion door, odx__mem_done. Reads the floor
# table from mem.h, collects the functions each floor's files define (non-static, at column 0),
# and looks for those names in the code (comments stripped) of every lower floor's files.
# Prints each call that goes up and exits 1 if there is one.
#
# Usage: check_floors.sh [core/mem directory]   (default: ../../core/mem from this script)
set -eu
dir=${1:-$(dirname "$0")/../../core/mem}
door=odx__mem_done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# " *   3  copy.c  ..." -> "3 copy.c"; a line may name two files ("pool.c, spill.c").
sed -n 's/^ \*   \([0-9]\)  *\([a-z_]*\.c\)\(, *\([a-z_]*\.c\)\)\{0,1\} .*/\1 \2 \4/p' "$dir/mem.h" \
	>"$tmp/floors"
[ -s "$tmp/floors" ] || { echo "check_floors: no floor table in $dir/mem.h" >&2; exit 2; }

# Code without comments: drops /* ... */ on one line, then every line inside a block comment.
strip() {
	sed -e 's#/\*.*\*/##g' "$1" | awk '
		inc { if (index($0, "*/")) inc = 0; next }
		/\/\*/ { inc = 1; sub(/\/\*.*/, ""); }
		{ print }'
}

bad=0
nfiles=0
while read -r level f1 f2; do
	for f in $f1 $f2; do
		[ -f "$dir/$f" ] || { echo "check_floors: $dir/$f (floor $level) is missing" >&2; exit 2; }
		nfiles=$((nfiles + 1))
		# Functions it defines for others: "type name(" at column 0, not static, not a
		# declaration ending in ';'.
		strip "$dir/$f" | grep -E '^[A-Za-z_].*[ *](odx_[A-Za-z0-9_]*)\(' | grep -v '^static' |
			grep -v ';[[:space:]]*$' |
			sed -E 's/.*[ *](odx_[A-Za-z0-9_]*)\(.*/\1/' | sort -u |
			while read -r fn; do echo "$level $f $fn"; done >>"$tmp/defs"
		strip "$dir/$f" >"$tmp/code.$f"
	done
done <"$tmp/floors"

while read -r level f1 f2; do
	for f in $f1 $f2; do
		# Every name defined on a higher floor, the door excepted.
		awk -v l="$level" -v door="$door" '$1 > l && $3 != door { print $3 " " $2 " " $1 }' \
			"$tmp/defs" |
			while read -r fn where up; do
				if grep -nw "$fn" "$tmp/code.$f" >"$tmp/hits"; then
					sed "s#^#$f (floor $level) calls $fn of $where (floor $up): line #" \
						"$tmp/hits"
				fi
			done
	done
done <"$tmp/floors" >"$tmp/report"

if [ -s "$tmp/report" ]; then
	cat "$tmp/report"
	echo "check_floors: $(wc -l <"$tmp/report") call(s) go up a floor (see core/mem/mem.h)"
	exit 1
fi
echo "check_floors: $nfiles files on $(wc -l <"$tmp/floors") floors, no call goes up but $door"
