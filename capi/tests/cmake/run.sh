#!/usr/bin/env bash
# run.sh PREFIX [NP] -- check that CMake's FindMPI finds the gmpi installed in PREFIX.
#
# Configures CMakeLists.txt here with -DMPI_C_COMPILER=PREFIX/bin/gmpicc in a temporary
# build directory, builds cmake_hello through MPI::MPI_C, and checks that
#   - FindMPI reported MPI_C_FOUND, with PREFIX's include directory and libmpi;
#   - the binary asks for libmpi.so.12 (NEEDED) and the loader finds it in PREFIX/lib
#     through the binary's own RUNPATH/RPATH (ldd, with LD_LIBRARY_PATH unset);
# then runs it with PREFIX/bin/gmpirun -np NP (default 2; NP=0 skips the run).
# Installs cmake with apt-get when it is missing. Exit status 0 means every check passed.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 PREFIX [NP]" >&2; exit 2; }
prefix=$(cd "$1" && pwd -P)
np=${2:-2}
here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd -P)

fail() { echo "FAIL cmake: $*" >&2; exit 1; }

if ! command -v cmake >/dev/null; then
    command -v apt-get >/dev/null || fail "cmake is missing and apt-get is not available"
    echo "cmake not found: installing it with apt-get"
    apt-get install -y cmake || { apt-get update && apt-get install -y cmake; }
fi

[ -x "$prefix/bin/gmpicc" ] || fail "$prefix/bin/gmpicc missing (run ./install.sh --prefix $prefix)"

build=$(mktemp -d "${TMPDIR:-/tmp}/gmpi-cmake.XXXXXX")
trap 'rm -rf "$build"' EXIT

# LD_LIBRARY_PATH could hide a missing RUNPATH: leave it out of everything below.
unset LD_LIBRARY_PATH
log=$build/configure.log
if ! cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release \
        -DMPI_C_COMPILER="$prefix/bin/gmpicc" \
        -DMPIEXEC_EXECUTABLE="$prefix/bin/gmpirun" >"$log" 2>&1; then
    cat "$log" >&2
    fail "cmake configure failed"
fi
grep 'gmpi-check:' "$log" | sed 's/^-- //'

value() { sed -n "s/^-- gmpi-check: $1=//p" "$log"; }
[ "$(value MPI_C_FOUND)" = TRUE ] || fail "MPI_C_FOUND is not TRUE"
case ";$(value MPI_C_INCLUDE_DIRS);" in
    *";$prefix/include;"*) ;;
    *) fail "MPI_C_INCLUDE_DIRS does not hold $prefix/include" ;;
esac
libs=$(value MPI_C_LIBRARIES)
case $libs in
    "$prefix/lib/libmpi.so"*) ;;
    *) fail "MPI_C_LIBRARIES is '$libs', not $prefix/lib/libmpi.so" ;;
esac

cmake --build "$build" >"$build/build.log" 2>&1 || { cat "$build/build.log" >&2; fail "build failed"; }
exe=$build/cmake_hello

readelf -d "$exe" | grep -q 'NEEDED.*\[libmpi\.so\.12\]' ||
    { readelf -d "$exe" >&2; fail "cmake_hello does not have NEEDED libmpi.so.12"; }
readelf -d "$exe" | grep -E 'NEEDED|RPATH|RUNPATH'
resolved=$(ldd "$exe" | sed -n 's/^[[:space:]]*libmpi\.so\.12 => \(.*\) (0x[0-9a-f]*)$/\1/p')
[ -n "$resolved" ] || { ldd "$exe" >&2; fail "ldd does not resolve libmpi.so.12"; }
[ "$(readlink -f "$resolved")" = "$(readlink -f "$prefix/lib/libmpi.so.12")" ] ||
    fail "libmpi.so.12 resolves to $resolved, not $prefix/lib/libmpi.so.12"
echo "libmpi.so.12 => $resolved"

if [ "$np" -gt 0 ]; then
    out=$("$prefix/bin/gmpirun" -np "$np" "$exe")
    echo "$out"
    n=$(grep -c '^OK cmake rank' <<<"$out" || true)
    [ "$n" -eq "$np" ] || fail "$n of $np ranks printed OK"
fi
echo "PASS cmake ($prefix)"
