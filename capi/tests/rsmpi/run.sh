#!/usr/bin/env bash
# run.sh PREFIX NP -- build this rsmpi check against the gmpi in PREFIX and run it on NP ranks.
#
# rsmpi's mpi-sys finds MPI with the build-probe-mpi crate, which tries, in order:
# $MPI_PKG_CONFIG (a .pc file), $CRAY_MPICH_DIR, then `$MPICC -show` (default `mpicc`),
# then pkg-config mpich / ompi. We unset the first two and point MPICC at PREFIX/bin/gmpicc:
# mpi-sys then compiles its C shim (rsmpi.c) with gmpicc, runs bindgen (libclang) on
# PREFIX/include/mpi.h, and links -L PREFIX/lib -lmpi. The probe takes only -I/-L/-l from
# `gmpicc -show` (no rpath), so we add the rpath through RUSTFLAGS.
#
# The target directory is per prefix ($CARGO_TARGET_DIR overrides it), and mpi-sys is
# rebuilt every time: its build script does not notice changes to MPICC or to mpi.h.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 PREFIX [NP]" >&2; exit 2; }
prefix=$(cd "$1" && pwd -P)
np=${2:-2}
here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd -P)

fail() { echo "FAIL rsmpi: $*" >&2; exit 1; }

[ -x "$prefix/bin/gmpicc" ] || fail "$prefix/bin/gmpicc missing (run ./install.sh --prefix $prefix)"

# bindgen needs libclang.
if ! ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/x86_64-linux-gnu/libclang*.so* 2>/dev/null | grep -q 'libclang\(-[0-9.]*\)\?\.so' &&
    [ -z "${LIBCLANG_PATH:-}" ]; then
    command -v apt-get >/dev/null || fail "libclang is missing (bindgen needs it); set LIBCLANG_PATH"
    echo "libclang not found: installing libclang-dev and clang with apt-get"
    apt-get install -y libclang-dev clang || { apt-get update && apt-get install -y libclang-dev clang; }
fi

key=$(printf '%s' "$prefix" | cksum | cut -d' ' -f1)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${TMPDIR:-/tmp}/gmpi-rsmpi-target-$key}
unset MPI_PKG_CONFIG CRAY_MPICH_DIR
export MPICC=$prefix/bin/gmpicc
export PATH=$prefix/bin:$PATH
export RUSTFLAGS="${RUSTFLAGS:-} -C link-arg=-Wl,-rpath,$prefix/lib"
unset LD_LIBRARY_PATH

manifest=$here/Cargo.toml
cargo clean --release -p mpi-sys --manifest-path "$manifest" 2>/dev/null || true
cargo build --release --manifest-path "$manifest"
exe=$CARGO_TARGET_DIR/release/gmpi-rsmpi-check

resolved=$(ldd "$exe" | sed -n 's/^[[:space:]]*libmpi\.so\.12 => \(.*\) (0x[0-9a-f]*)$/\1/p')
[ "$(readlink -f "${resolved:-/nonexistent}")" = "$(readlink -f "$prefix/lib/libmpi.so.12")" ] ||
    { ldd "$exe" >&2; fail "the binary does not load libmpi.so.12 from $prefix/lib"; }
echo "libmpi.so.12 => $resolved"

out=$("$prefix/bin/gmpirun" -np "$np" "$exe")
echo "$out"
n=$(grep -c '^OK rsmpi rank' <<<"$out" || true)
[ "$n" -eq "$np" ] || fail "$n of $np ranks printed OK"
echo "PASS rsmpi ($prefix, np $np)"
