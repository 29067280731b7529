#!/usr/bin/env bash
# run.sh PREFIX NP... -- BAGEL (Debian's `bagel`, built against MPICH; it asks
# MPI_Init_thread for MPI_THREAD_MULTIPLE and stops without it) on water
# (capi/tests/bagel/h2o.json: RHF, MP2 and a small CASSCF in the def2-SVP basis
# with density fitting), first on MPICH at np 1 (the reference), then on the
# gmpi installed in PREFIX at each NP. Prints the energies; exits non-zero
# unless every gmpi run ends normally with the reference's three energies (to
# 1e-8 Hartree).
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 PREFIX NP..." >&2; exit 2; }
prefix=$(cd "$1" && pwd -P)
shift
here=$(cd "$(dirname "$0")" && pwd -P)
command -v BAGEL >/dev/null || { echo "FAIL: BAGEL missing (apt-get install bagel)" >&2; exit 1; }
command -v mpiexec.mpich >/dev/null || { echo "FAIL: mpiexec.mpich missing (apt-get install mpich)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gmpi-bagel.XXXXXX")
trap 'rm -rf "$work"' EXIT

# HF (the iteration before "SCF iteration converged"), MP2, CASSCF (the last
# macro-iteration line, marked "*").
energies() {
    awk '/SCF iteration converged/ && !hf { hf = prev }
         $1 ~ /^[0-9]+$/ && $2 ~ /^-[0-9]+\.[0-9]+$/ { prev = $2 }
         /MP2 total energy:/ { mp2 = $4 }
         $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $3 == "*" { cas = $4 }
         END { print hf, mp2, cas }' "$1"
}

run_in() {  # run_in DIR COMMAND...
    local d=$1; shift
    mkdir -p "$d" && (cd "$d" && "$@" "$here/h2o.json" > out.txt 2>&1 </dev/null)
}

run_in "$work/ref" timeout 300 mpiexec.mpich -n 1 BAGEL
read -r rhf rmp2 rcas <<<"$(energies "$work/ref/out.txt")"
[ -n "$rcas" ] || { echo "FAIL: no reference energies from MPICH"; tail -20 "$work/ref/out.txt"; exit 1; }
echo "MPICH np 1: HF $rhf MP2 $rmp2 CASSCF $rcas"
same() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(a != "" && d < 1e-8 && d > -1e-8) }'; }
fail=0
for np in "$@"; do
    run_in "$work/np$np" env LD_LIBRARY_PATH="$prefix/lib" "$prefix/bin/gmpirun" --timeout 240 -np "$np" BAGEL
    rc=$?
    read -r hf mp2 cas <<<"$(energies "$work/np$np/out.txt")"
    if [ $rc -eq 0 ] && same "$hf" "$rhf" && same "$mp2" "$rmp2" && same "$cas" "$rcas"; then
        echo "gmpi np $np: HF $hf MP2 $mp2 CASSCF $cas ok"
    else
        echo "FAIL gmpi np $np: HF '$hf' MP2 '$mp2' CASSCF '$cas', exit status $rc"
        tail -20 "$work/np$np/out.txt"
        fail=1
    fi
done
exit $fail
