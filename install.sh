#!/usr/bin/env bash
# install.sh -- build gmpi's C/Fortran library and launcher and lay out an MPI prefix.
#
#   ./install.sh [--prefix DIR] [--debug] [--no-build] [--ib | --no-ib]
#
# Builds `cargo build --release -p gmpi-capi -p gmpi-launcher` (the dev profile with
# --debug; nothing with --no-build) and installs into DIR (default: <repo>/target/gmpi,
# the same layout straight from the build tree).
#
# InfiniBand/RoCE (cargo feature `ib`, the verbs transport btl-ib) is built in when
# rdma-core's development files are present (pkg-config finds libibverbs and librdmacm,
# and libclang is installed for the bindings: Debian's libibverbs-dev librdmacm-dev
# libclang-dev); the script says which it chose. --ib insists (and fails without them),
# --no-ib leaves it out. With it, libmpi.so and gmpirun need libibverbs.so.1 at run time.
#
# The layout:
#
#   bin/     gmpirun gmpicc gmpicxx gmpif90, and the usual MPI names as symlinks:
#            mpirun mpiexec -> gmpirun, mpicc -> gmpicc, mpicxx mpic++ -> gmpicxx,
#            mpif90 mpifort -> gmpif90
#   lib/     libmpi.so.12 (the MPICH ABI), libmpi.so libmpich.so.12 libmpich.so -> it;
#            libmpifort.so.12 when the Fortran bindings are not inside libmpi.so;
#            pkgconfig/{gmpi,mpi,mpich}.pc
#   include/ mpi.h, mpi-ext.h, mpif.h, mpi.mod (needs gfortran; skipped with a note without it)
#
# Everything is copied (never linked into target/), so an installed prefix survives
# `cargo clean`; files are replaced by rename, so re-running is safe even while
# programs of an older install are running. CARGO_TARGET_DIR is honoured.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

die() {
    echo "install.sh: $*" >&2
    exit 1
}

note() {
    echo "install.sh: $*"
}

repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd -P)
prefix=
profile=release
build=yes
ib=auto
while [ $# -gt 0 ]; do
    case $1 in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        --debug) profile=debug; shift ;;
        --release) profile=release; shift ;;
        --no-build) build=no; shift ;;
        --ib) ib=yes; shift ;;
        --no-ib) ib=no; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument '$1' (see ./install.sh --help)" ;;
    esac
done

# A relative --prefix is relative to where install.sh was started from.
[ -n "$prefix" ] || prefix=$repo/target/gmpi
prefix=$(realpath -m -- "$prefix")
cd "$repo"

# ---- build -------------------------------------------------------------------
if [ "$build" = yes ]; then
    command -v cargo >/dev/null || die "cargo not found (install Rust from https://rustup.rs)"
    have_verbs=no
    if command -v pkg-config >/dev/null && pkg-config --exists libibverbs librdmacm \
        && compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null; then
        have_verbs=yes
    fi
    features=()
    case $ib in
        yes)
            [ "$have_verbs" = yes ] || die "--ib: rdma-core's development files or libclang are missing (Debian: apt-get install libibverbs-dev librdmacm-dev libclang-dev)"
            features=(--features gmpi-capi/ib,gmpi-launcher/ib)
            note "InfiniBand/RoCE: built in (--ib)" ;;
        no) note "InfiniBand/RoCE: left out (--no-ib)" ;;
        auto)
            if [ "$have_verbs" = yes ]; then
                features=(--features gmpi-capi/ib,gmpi-launcher/ib)
                note "InfiniBand/RoCE: built in (rdma-core's libibverbs and librdmacm found; --no-ib leaves it out)"
            else
                note "InfiniBand/RoCE: left out (no libibverbs/librdmacm development files or libclang; Debian: libibverbs-dev librdmacm-dev libclang-dev); nodes talk over TCP"
            fi ;;
    esac
    if [ "$profile" = release ]; then
        cargo build --release -p gmpi-capi -p gmpi-launcher "${features[@]}"
    else
        cargo build -p gmpi-capi -p gmpi-launcher "${features[@]}"
    fi
fi

# Where cargo put its outputs: cargo resolves a relative CARGO_TARGET_DIR against the
# directory it runs in, which is $repo here.
target_dir=${CARGO_TARGET_DIR:-target}
case $target_dir in
    /*) ;;
    *) target_dir=$repo/$target_dir ;;
esac
outdir=$target_dir/$profile
built_lib=$outdir/libmpi.so
built_run=$outdir/gmpirun
for f in "$built_lib" "$built_run"; do
    [ -f "$f" ] || die "$f is missing: build first (drop --no-build, or add --debug for a debug build)"
done

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || version=0.0.0

# ---- helpers -----------------------------------------------------------------
tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/gmpi-install.XXXXXX")
trap 'rm -rf "$tmpdir"' EXIT

# put SRC DEST MODE: copy to a temporary name beside DEST, then rename over DEST.
# (Copying over a running executable fails, and over a mapped library crashes the
# programs using it; a rename does neither.)
put() {
    local src=$1 dest=$2 mode=$3
    local tmp
    tmp=$(mktemp "$(dirname "$dest")/.$(basename "$dest").XXXXXX")
    cp -f "$src" "$tmp"
    chmod "$mode" "$tmp"
    mv -f "$tmp" "$dest"
}

# link TARGET NAME: NAME -> TARGET (relative), replacing whatever NAME was.
link() {
    local target=$1 name=$2
    if [ -d "$name" ] && [ ! -L "$name" ]; then
        die "$name is a directory; not replacing it with a symlink"
    fi
    ln -sfn "$target" "$name"
}

mkdir -p "$prefix/bin" "$prefix/lib/pkgconfig" "$prefix/include"

# ---- bin/ --------------------------------------------------------------------
put "$built_run" "$prefix/bin/gmpirun" 755
for w in gmpicc gmpicxx gmpif90; do
    put "capi/scripts/$w" "$prefix/bin/$w" 755
done
link gmpicc "$prefix/bin/mpicc"
link gmpicxx "$prefix/bin/mpicxx"
link gmpicxx "$prefix/bin/mpic++"
link gmpif90 "$prefix/bin/mpif90"
link gmpif90 "$prefix/bin/mpifort"
link gmpirun "$prefix/bin/mpirun"
link gmpirun "$prefix/bin/mpiexec"

# ---- lib/ --------------------------------------------------------------------
put "$built_lib" "$prefix/lib/libmpi.so.12" 755
link libmpi.so.12 "$prefix/lib/libmpi.so"
link libmpi.so.12 "$prefix/lib/libmpich.so.12"
link libmpi.so.12 "$prefix/lib/libmpich.so"
if command -v readelf >/dev/null; then
    soname=$(readelf -d "$prefix/lib/libmpi.so.12" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    [ "$soname" = libmpi.so.12 ] ||
        note "WARNING: $built_lib has SONAME '${soname:-none}', not libmpi.so.12"
fi

# ---- include/ ----------------------------------------------------------------
for h in capi/include/*.h; do
    put "$h" "$prefix/include/$(basename "$h")" 644
done
put capi/fortran/mpif.h "$prefix/include/mpif.h" 644

# ---- Fortran -----------------------------------------------------------------
fc=${GMPI_FC:-gfortran}
if command -v "$fc" >/dev/null; then
    mkdir -p "$tmpdir/mod"
    if "$fc" -c -I"$prefix/include" -J"$tmpdir/mod" -o "$tmpdir/mpi.o" capi/fortran/mpi.f90; then
        for m in "$tmpdir"/mod/*.mod; do
            put "$m" "$prefix/include/$(basename "$m")" 644
        done
    else
        note "WARNING: $fc could not compile capi/fortran/mpi.f90; include/mpi.mod not installed"
    fi
else
    note "note: $fc not found: include/mpi.mod not built ('use mpi' needs it; mpif.h works)"
fi

# The Fortran bindings (mpi_send_ ...) are either inside libmpi.so or, as in MPICH,
# built here from capi/fortran/fbind.c into libmpifort.so.12.
has_fortran_symbols() {
    command -v nm >/dev/null || return 1
    nm -D --defined-only "$1" 2>/dev/null | grep -q ' mpi_send_$'
}
if has_fortran_symbols "$prefix/lib/libmpi.so.12"; then
    rm -f "$prefix/lib/libmpifort.so.12" "$prefix/lib/libmpifort.so" \
        "$prefix/lib/libmpichfort.so.12" "$prefix/lib/libmpichfort.so"
elif [ -f capi/fortran/fbind.c ]; then
    cc=${GMPI_CC:-cc}
    if $cc -O2 -g -fPIC -shared -Wl,-soname,libmpifort.so.12 -I"$prefix/include" \
        -o "$tmpdir/libmpifort.so.12" capi/fortran/fbind.c \
        -L"$prefix/lib" -Wl,-rpath,'$ORIGIN' -lmpi; then
        put "$tmpdir/libmpifort.so.12" "$prefix/lib/libmpifort.so.12" 755
        link libmpifort.so.12 "$prefix/lib/libmpifort.so"
        # Binaries built with MPICH's mpif90 (Debian) ask for libmpichfort.so.12.
        link libmpifort.so.12 "$prefix/lib/libmpichfort.so.12"
        link libmpifort.so.12 "$prefix/lib/libmpichfort.so"
    else
        note "WARNING: capi/fortran/fbind.c did not compile; Fortran programs will not link"
    fi
fi

# ---- pkg-config --------------------------------------------------------------
for pc in gmpi mpi mpich; do
    cat >"$tmpdir/$pc.pc" <<EOF
prefix=$prefix
exec_prefix=\${prefix}
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: gmpi
Description: gmpi, a CUDA-aware MPI runtime in Rust (MPICH ABI, libmpi.so.12)
Version: $version
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lmpi
Cflags: -I\${includedir}
EOF
    put "$tmpdir/$pc.pc" "$prefix/lib/pkgconfig/$pc.pc" 644
done

# ---- done --------------------------------------------------------------------
cat <<EOF

gmpi $version ($profile build) is installed in
    $prefix

Add it to your PATH:
    export PATH="$prefix/bin:\$PATH"

Then: gmpicc hello.c -o hello && gmpirun -np 4 ./hello
Binaries built against MPICH run on gmpi with
    LD_LIBRARY_PATH="$prefix/lib" gmpirun -np 4 ./app
mpi4py:  export MPI4PY_LIBMPI="$prefix/lib/libmpi.so.12" LD_LIBRARY_PATH="$prefix/lib"
rsmpi:   export MPICC="$prefix/bin/gmpicc"
CMake:   cmake -DMPI_C_COMPILER="$prefix/bin/gmpicc" ...
pkg-config: PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs gmpi
EOF
