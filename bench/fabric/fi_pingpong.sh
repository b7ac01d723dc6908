#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# fi_pingpong.sh - libfabric-bin's fi_pingpong on loopback as a second reference for fabric_bw.
#
#   bench/fabric/fi_pingpong.sh [provider] [iterations]     (default: "tcp;ofi_rxm" 1000)
#
# Runs the server and the client (RDM endpoints, tagged mode, all sizes) on this host and prints
# one JSON line per size: {"bench":"fi_pingpong","provider":...,"size":...,"lat_us":...,"gbps":...}.
set -u
prov=${1:-"tcp;ofi_rxm"}
iters=${2:-1000}
port=$((30000 + RANDOM % 20000))
out=$(mktemp)
trap 'kill $srv 2>/dev/null; rm -f "$out"' EXIT
command -v fi_pingpong >/dev/null || { echo "fi_pingpong not installed (libfabric-bin)" >&2; exit 77; }
timeout 300 fi_pingpong -p "$prov" -e rdm -m tagged -I "$iters" -B "$port" >/dev/null 2>&1 &
srv=$!
sleep 0.5
timeout 300 fi_pingpong -p "$prov" -e rdm -m tagged -I "$iters" -P "$port" 127.0.0.1 >"$out" 2>&1
rc=$?
# columns: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
awk -v prov="$prov" '$1 ~ /^[0-9]+(k|m)?$/ && NF >= 7 {
	size = $1; mult = 1
	if (size ~ /k$/) { mult = 1024; sub(/k$/, "", size) }
	if (size ~ /m$/) { mult = 1048576; sub(/m$/, "", size) }
	printf("{\"bench\":\"fi_pingpong\",\"provider\":\"%s\",\"size\":%d,\"lat_us\":%s,\"gbps\":%.3f}\n",
	       prov, size * mult, $7, $6 / 1000.0)
}' "$out"
[ $rc -ne 0 ] && cat "$out" >&2
exit $rc
