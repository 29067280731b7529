#!/usr/bin/env bash
# The C ABI's cost in 8 B latency, measured two ways (release builds):
#  1. gmpi-capi-overhead: one job alternating blocks of C-ABI calls
#     (PMPI_Send/PMPI_Recv) and Rust-API calls; the per-pair difference.
#  2. Separate jobs, alternated: the C ping-pong (capi/tests/c/pingpong.c,
#     built with gmpicc, through libmpi.so.12) against examples' Rust
#     pingpong; the median of the per-pair differences.
# usage: bench/capi-vs-rust.sh [PAIRS] [ROUND_TRIPS]   (default 24, 200000)
# Needs ./install.sh to have run (PREFIX, default target/gmpi-install: set
# GMPI_PREFIX to use another).
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-24}
iters=${2:-200000}
prefix=${GMPI_PREFIX:-$PWD/target/gmpi-install}
[ -x "$prefix/bin/gmpicc" ] || ./install.sh --prefix "$prefix" >/dev/null
cargo build -q --release -p gmpi-bench -p gmpi-examples -p gmpi-launcher
run=./target/release/gmpirun
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$prefix/bin/gmpicc" -O2 -Icapi/tests/c -o "$tmp/cpingpong" capi/tests/c/pingpong.c

echo "== 1. one job, paired blocks (gmpi-capi-overhead 400 2000)"
$run -np 2 ./target/release/gmpi-capi-overhead 400 2000

echo "== 2. separate jobs, $pairs alternated pairs of $iters round trips (one-way µs)"
c_lat() { $run -np 2 "$tmp/cpingpong" "$iters" | awk '/latency_us/ {print $2}'; }
r_lat() {
    $run -np 2 ./target/release/pingpong --lat-only --min 8 --max 8 --iters "$iters" |
        awk '$1 == 8 {print $2}'
}
for i in $(seq 1 "$pairs"); do
    if [ $((i % 2)) -eq 0 ]; then c=$(c_lat); r=$(r_lat); else r=$(r_lat); c=$(c_lat); fi
    echo "$c $r"
done >"$tmp/pairs"
awk '{print "C " $1 "  Rust " $2 "  C-Rust " $1 - $2}' "$tmp/pairs"
sort -n -k1,1 "$tmp/pairs" | awk '{c[NR]=$1} END {printf "C ABI:    min %.3f  median %.3f\n", c[1], c[int((NR+1)/2)]}'
sort -n -k2,2 "$tmp/pairs" | awk '{r[NR]=$2} END {printf "Rust API: min %.3f  median %.3f\n", r[1], r[int((NR+1)/2)]}'
awk '{print $1 - $2}' "$tmp/pairs" | sort -g |
    awk '{d[NR]=$1} END {printf "C - Rust per pair: median %+.4f µs (quartiles %+.4f .. %+.4f)\n", (d[int((NR+1)/2)] + d[int((NR+2)/2)]) / 2, d[int(NR/4)+1], d[int(3*NR/4)]}'
