#!/usr/bin/env bash
#
# exports.sh -- check that a built libmpi.so exports every symbol programs
# built against the MPICH ABI link to.
#
# Checks that `nm -D --defined-only LIB` has:
#   - MPI_X and PMPI_X for every name X in capi/include/functions.txt;
#   - MPIX_X and PMPIX_X for every MPIX_X function capi/include/mpi.h
#     declares (the extensions: GPU-support queries);
#   - MPIR_Dup_fn (what MPI_COMM_DUP_FN and friends expand to);
#   - the data symbols MPI_UNWEIGHTED, MPI_WEIGHTS_EMPTY,
#     MPI_F_STATUS_IGNORE, MPI_F_STATUSES_IGNORE;
#   - with --mpich MPICHLIB (repeatable): every MPI_ and PMPI_ symbol
#     MPICHLIB defines (an MPICH libmpi.so.12, e.g. Debian's libmpich.so.12
#     or the MPICH 5 wheel's libmpi.so.12), so every binary built against
#     that MPICH loads on LIB;
#   - every MPI_ name in the extra list (--syms FILE, else
#     /tmp/mpi4py_strong.txt if it exists, else the strong undefined MPI_
#     symbols of mpi4py's MPICH-flavour extension if it is installed).
# Prints each missing name and exits 1 if any is missing.
#
# Usage: exports.sh [--syms FILE] [--mpich MPICHLIB]... LIB
# Environment:
#   MPI4PY_SO  the mpi4py extension to read the extra list from (default
#              /opt/gmpi-py/lib/python3.11/site-packages/mpi4py/MPI.mpich.cpython-311-x86_64-linux-gnu.so)
#
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
functions="$here/../../include/functions.txt"
header="$here/../../include/mpi.h"
syms=""
mpich_libs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --syms) syms="$2"; shift 2 ;;
        --mpich) mpich_libs+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
if [ $# -ne 1 ]; then
    echo "usage: $0 [--syms FILE] [--mpich MPICHLIB]... LIB" >&2
    exit 2
fi
lib="$1"
[ -r "$lib" ] || { echo "exports.sh: cannot read $lib" >&2; exit 2; }
[ -r "$functions" ] || { echo "exports.sh: cannot read $functions" >&2; exit 2; }
[ -r "$header" ] || { echo "exports.sh: cannot read $header" >&2; exit 2; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# What the library defines (functions and data).
nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | sort -u > "$tmp/have"

# What it must define.
{
    grep -v '^[[:space:]]*\(#\|$\)' "$functions" | while read -r f; do
        echo "$f"
        echo "P$f"
    done
    sed -n -E 's/^[A-Za-z_ ]*[ *](MPIX_[A-Za-z0-9_]+)\(.*/\1/p' "$header" | while read -r f; do
        echo "$f"
        echo "P$f"
    done
    echo MPIR_Dup_fn
    echo MPI_UNWEIGHTED
    echo MPI_WEIGHTS_EMPTY
    echo MPI_F_STATUS_IGNORE
    echo MPI_F_STATUSES_IGNORE
    echo MPI_F08_STATUS_IGNORE
    echo MPI_F08_STATUSES_IGNORE
    echo MPI_T_PVAR_ALL_HANDLES
} > "$tmp/need"

for m in ${mpich_libs[@]+"${mpich_libs[@]}"}; do
    [ -r "$m" ] || { echo "exports.sh: cannot read $m" >&2; exit 2; }
    nm -D --defined-only "$m" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' \
        | grep -E '^P?MPI_' > "$tmp/mpich" || true
    [ -s "$tmp/mpich" ] || { echo "exports.sh: $m defines no MPI_ symbol" >&2; exit 2; }
    echo "exports.sh: $(wc -l < "$tmp/mpich") MPI_/PMPI_ symbols of $m required"
    cat "$tmp/mpich" >> "$tmp/need"
done

so="${MPI4PY_SO:-/opt/gmpi-py/lib/python3.11/site-packages/mpi4py/MPI.mpich.cpython-311-x86_64-linux-gnu.so}"
extra=""
if [ -n "$syms" ]; then
    [ -r "$syms" ] || { echo "exports.sh: cannot read $syms" >&2; exit 2; }
    extra="$syms"
elif [ -r /tmp/mpi4py_strong.txt ]; then
    extra=/tmp/mpi4py_strong.txt
elif [ -r "$so" ]; then
    # Strong references only: the weak ones (MPI-4 large-count calls, …)
    # mpi4py tests for at run time.
    nm -D --undefined-only "$so" | awk '$1 == "U" && $2 ~ /^MPI_/ { print $2 }' \
        | sed 's/@.*//' > "$tmp/mpi4py"
    extra="$tmp/mpi4py"
fi
if [ -n "$extra" ]; then
    grep '^MPI_' "$extra" | sed 's/[[:space:]]//g' >> "$tmp/need" || true
fi
sort -u "$tmp/need" | grep -v '^$' > "$tmp/need.sorted"

comm -23 "$tmp/need.sorted" "$tmp/have" > "$tmp/missing"
n_need=$(wc -l < "$tmp/need.sorted")
n_missing=$(wc -l < "$tmp/missing")
if [ "$n_missing" -gt 0 ]; then
    echo "exports.sh: $lib lacks $n_missing of $n_need required symbols:"
    cat "$tmp/missing"
    exit 1
fi
echo "exports.sh: $lib exports all $n_need required symbols${extra:+ (extra list: $extra)}"
