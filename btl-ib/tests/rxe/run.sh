#!/usr/bin/env bash
# btl-ib/tests/rxe/run.sh -- btl-ib's tests over real verbs: Soft-RoCE (rdma_rxe) in a
# QEMU guest with Debian's kernel (../shared/rxe/: our kernels lack InfiniBand).
#
# Builds gmpi with feature `ib` (gmpirun, gmpi-check, gmpi-coll, pingpong and btl-ib's
# verbs test), makes the guest once (target/rxe-guest), boots it once and runs
# guest.sh inside: the conformance suite over verbs, point-to-point sweeps (0 B to 16 MiB,
# content-checked) at np 2 and 4 on two "nodes" with a device each, a reallocated send
# buffer, buffers unmapped, emptied and moved between messages (the registration cache),
# 20000 messages in flight, forced RNR, a rank without ib, one-sided communication
# between nodes at np 2 and 4, every collective at np 2 and 4,
# one-sided C tests built by MPICH's mpicc and OpenCoarrays' programs between the nodes,
# a killed rank, a port that goes down under a job. Prints one line per check and exits
# non-zero if any fails.
# With FIGURES=1 it also measures perftest and gmpi's pingpong on the same pair.
#
# Needs: qemu-system-x86 cpio rdma-core ibverbs-providers libibverbs-dev librdmacm-dev
# libclang-dev perftest iproute2 mpich libmpich-dev libcoarrays-mpich-dev (Debian), the `../shared/rxe` recipe, and about 10 minutes.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../../.." && pwd -P)
cd "$repo"
shared=${GMPI_SHARED:-$repo/../shared}
die() { echo "rxe/run.sh: $*" >&2; exit 1; }
for c in qemu-system-x86_64 cpio rdma; do
    command -v "$c" >/dev/null || die "$c is missing (apt-get install qemu-system-x86 cpio iproute2)"
done
[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ] || compgen -G '/usr/lib/*/libibverbs/librxe-*.so' >/dev/null \
    || die "the rxe verbs provider is missing (apt-get install ibverbs-providers)"
[ -x "$shared/rxe/build-guest.sh" ] || die "$shared/rxe/build-guest.sh is missing"

target=${CARGO_TARGET_DIR:-target}
features=gmpi-tests/ib,gmpi-launcher/ib,gmpi-examples/ib,gmpi-capi/ib
echo "rxe: building with feature ib"
cargo build --release -q -p gmpi-tests -p gmpi-launcher -p gmpi-examples -p gmpi-capi --features "$features"
verbs_test=$(cargo test -q --release -p gmpi-btl-ib --features ib --test verbs --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$verbs_test" ] || die "could not build btl-ib's verbs test"

guest=$target/rxe-guest
if [ ! -s "$guest/initrd.gz" ] || [ ! -s "$guest/vmlinuz" ]; then
    echo "rxe: making the guest (Debian kernel and busybox from the registry)"
    # build-guest.sh finds the kernel package through apt's lists.
    apt-cache depends linux-image-amd64 2>/dev/null | grep -q 'Depends: linux-image-[0-9]' || apt-get update -qq
    bash "$shared/rxe/build-guest.sh" "$guest" >/dev/null
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/gmpi-rxe.XXXXXX")
abs() { (cd "$(dirname "$1")" && echo "$(pwd -P)/$(basename "$1")"); }
rel=$(abs "$target/release")
{
    echo "GMPIRUN=$rel/gmpirun"
    echo "CHECK=$rel/gmpi-check"
    echo "COLL=$rel/gmpi-coll"
    echo "VERBS_TEST=$(abs "$verbs_test")"
    [ "${FIGURES:-0}" = 1 ] && echo "PINGPONG=$rel/pingpong"
} >"$work/env"
# The C ABI for programs built against MPICH: libmpich.so.12 is gmpi's
# libmpi.so.12, as install.sh lays it out; capi/tests/c/rma.c built by
# MPICH's mpicc, and Debian's OpenCoarrays test programs (MPICH flavour),
# run on it between the nodes.
mkdir -p "$work/lib"
cp "$rel/libmpi.so" "$work/lib/libmpi.so.12"
ln -s libmpi.so.12 "$work/lib/libmpich.so.12"
if command -v mpicc.mpich >/dev/null; then
    mpicc.mpich -std=c99 -O2 -o "$work/rma-mpich" "$repo/capi/tests/c/rma.c"
    echo "RMA_C=/tmp/work/rma-mpich" >>"$work/env"
fi
cp "$repo/btl-ib/tests/rxe/guest.sh" "$work/guest.sh"
chmod +x "$work/guest.sh"
echo "rxe: booting the guest (work directory $work)"
t0=$(date +%s)
bash "$shared/rxe/run-guest.sh" "$guest" "$work" "${RXE_TIMEOUT:-1500}" || true
echo "rxe: guest ran $(($(date +%s) - t0)) s"
[ -s "$work/results" ] || { tail -30 "$work/console.log" "$work/console-guest.log" 2>/dev/null; die "the guest wrote no results"; }
sed 's/^/rxe: /' "$work/results"
[ "${FIGURES:-0}" = 1 ] && [ -s "$work/figures.log" ] && cat "$work/figures.log"
grep -q '^DONE' "$work/results" || die "the guest stopped before the end (see $work)"
if grep -q '^FAIL' "$work/results"; then
    die "some checks failed; logs in $work"
fi
rm -rf "$work"
echo "rxe: all checks passed"
