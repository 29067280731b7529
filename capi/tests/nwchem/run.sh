#!/usr/bin/env bash
# run.sh PREFIX NP... -- NWChem's SCF energy of water (capi/tests/nwchem/h2o.nw: RHF,
# STO-3G) with Debian's nwchem.mpich (built against MPICH: Global Arrays over MPI
# one-sided communication), first on MPICH at np 1 (the reference), then on the gmpi
# installed in PREFIX at each NP. Prints the energies; exits non-zero unless every gmpi
# run ends normally with the reference energy (to 1e-8 Hartree).
#
# (The reference is MPICH at np 1 because Debian's MPICH 4.0.2 is wrong at np > 1 on
# this machine: -74.955149808278 at np 2, "negative proj" abort at np 3.)
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 PREFIX NP..." >&2; exit 2; }
prefix=$(cd "$1" && pwd -P)
shift
here=$(cd "$(dirname "$0")" && pwd -P)
command -v nwchem.mpich >/dev/null || { echo "FAIL: nwchem.mpich missing (apt-get install nwchem-mpich)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gmpi-nwchem.XXXXXX")
trap 'rm -rf "$work"' EXIT
energy() { sed -n 's/^ *Total SCF energy = *//p' "$1" | tail -1; }

run_in() {  # run_in DIR COMMAND...: NWChem writes its scratch files in the working dir
    local d=$1; shift
    mkdir -p "$d" && cp "$here/h2o.nw" "$d/" && (cd "$d" && "$@" h2o.nw > out.txt 2>&1 </dev/null)
}

run_in "$work/ref" timeout 300 mpiexec.mpich -n 1 nwchem.mpich
ref=$(energy "$work/ref/out.txt")
[ -n "$ref" ] || { echo "FAIL: no reference energy from MPICH"; tail -20 "$work/ref/out.txt"; exit 1; }
echo "MPICH np 1: $ref"
fail=0
for np in "$@"; do
    run_in "$work/np$np" env LD_LIBRARY_PATH="$prefix/lib" "$prefix/bin/gmpirun" --timeout 240 -np "$np" nwchem.mpich
    rc=$?
    e=$(energy "$work/np$np/out.txt")
    if [ $rc -eq 0 ] && [ -n "$e" ] && awk -v a="$e" -v b="$ref" 'BEGIN { d = a - b; exit !(d < 1e-8 && d > -1e-8) }'; then
        echo "gmpi np $np: $e ok"
    else
        echo "FAIL gmpi np $np: energy '$e', exit status $rc"
        tail -20 "$work/np$np/out.txt"
        fail=1
    fi
done
exit $fail
