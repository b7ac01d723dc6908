#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# check_build_tree.sh ODX NAME... - `odx info` run from the build tree, with no ODX_BACKEND_PATH,
# finds the build's own module of every backend NAME (core/registry.c): none of them may be
# reported as missing ("no libodx-backend-NAME.so").
set -u
odx="$1"
shift
out=$(env -u ODX_BACKEND_PATH ODX_CONFIG= "$odx" info 2>&1) || {
	printf '%s\n' "$out"
	echo "check_build_tree: odx info failed" >&2
	exit 1
}
printf '%s\n' "$out"
rc=0
for name in "$@"; do
	if printf '%s\n' "$out" | grep -q "no libodx-backend-$name.so"; then
		echo "check_build_tree: the $name module of this build was not found" >&2
		rc=1
	fi
done
exit $rc
