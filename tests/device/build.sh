#!/usr/bin/env bash
# tests/device/build.sh -- build everything the GPU check needs, on this (CPU) machine,
# into one folder that the device machine's `run` carries: gmpi's install prefix
# (release), the test programs of tests/device, the benchmark suite (bench/suite), the
# Rust test binaries of the packages named in tests/device/rust-tests.txt, all stripped.
#
#   tests/device/build.sh [--carry DIR] [--no-rust]     (default DIR: target/device-carry)
#
# Then prints the `run` invocation (command and carry list). Honours CARGO_TARGET_DIR.
# Needs cargo, cc and strip; no CUDA (the programs load libcuda.so.1 with dlopen).
set -euo pipefail

repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd -P)
carry_rel=target/device-carry
rust=yes
while [ $# -gt 0 ]; do
    case $1 in
    --carry) carry_rel=$2; shift 2 ;;
    --no-rust) rust=no; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
case $carry_rel in
/*) carry=$carry_rel ;;
*) carry=$repo/$carry_rel ;;
esac
cd "$repo"
target=${CARGO_TARGET_DIR:-$repo/target}
rm -rf "$carry"
mkdir -p "$carry/bin" "$carry/rust"

echo "build.sh: gmpi (release) into $carry/prefix"
./install.sh --prefix "$carry/prefix" >"$carry/install.log" 2>&1 || { cat "$carry/install.log"; exit 1; }
cc=$carry/prefix/bin/gmpicc
cflags=(-O2 -g0 -Wall -Wextra -Wno-unused-parameter -Wno-unused-function)

echo "build.sh: test programs"
for p in p2p coll ops realloc kinds ctx_first bufid; do
    "$cc" "${cflags[@]}" "tests/device/$p.c" -o "$carry/bin/dt_$p" -ldl
done
# One-sided communication on device memory (windows over cuMemAlloc'd buffers, CUDA IPC).
"$cc" "${cflags[@]}" -std=c99 -Icapi/tests/c capi/tests/c/rma_device.c -o "$carry/bin/dt_rma_device" -ldl
"${CC:-cc}" "${cflags[@]}" tests/device/copybw.c -o "$carry/bin/dt_copybw" -ldl

echo "build.sh: the Rust API scenarios and bandwidth (cudarc CudaSlice through gmpi; mixed host/device ranks)"
cargo build -q --release -p gmpi-tests --bin gmpi-cuda --bin gmpi-cuda-mixed --bin gmpi-cuda-bw
for b in gmpi-cuda gmpi-cuda-mixed gmpi-cuda-bw; do
    cp "$target/release/$b" "$carry/bin/$b"
done

echo "build.sh: benchmark suite"
make -s -C bench/suite MPICC="$cc" BUILD="$carry/suite-build" CFLAGS="-O2 -g0 -Wall -Wno-unused-parameter -Wno-stringop-overflow" >/dev/null
cp "$carry"/suite-build/gb_* "$carry/bin/"
rm -rf "$carry/suite-build"

if [ $rust = yes ] && [ -s tests/device/rust-tests.txt ]; then
    echo "build.sh: Rust test binaries"
    : >"$carry/rust/list.txt"
    while read -r pkg _; do
        case $pkg in '' | '#'*) continue ;; esac
        exes=$(cargo test --release -p "$pkg" --no-run --message-format=json 2>"$carry/rust/$pkg.build.log" |
            python3 -c 'import json,sys
for l in sys.stdin:
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["executable"])') || { cat "$carry/rust/$pkg.build.log"; exit 1; }
        for e in $exes; do
            n=$pkg-$(basename "$e" | sed 's/-[0-9a-f]\{16\}$//')
            cp "$e" "$carry/rust/$n"
            echo "$n" >>"$carry/rust/list.txt"
        done
    done <tests/device/rust-tests.txt
    rm -f "$carry"/rust/*.build.log
fi

strip --strip-unneeded "$carry"/bin/* "$carry"/prefix/bin/gmpirun "$carry"/prefix/lib/*.so*
find "$carry/rust" -type f ! -name list.txt -exec strip --strip-unneeded {} +
rm -f "$carry/install.log"
size=$(du -sm "$carry" | cut -f1)
echo "build.sh: $carry is $size MiB (the carry limit is 64 MiB)"
[ "$size" -lt 64 ] || { echo "build.sh: too large to carry" >&2; exit 1; }
cat <<EOM

Run it on the device machine (one call, under 600 s):
  run tool: command = "bash tests/device/run.sh $carry_rel"
            carry   = ["$carry_rel"]
            timeout_s = 360   (the run stops starting steps at 300 s)
Results come back under \$OUT: summary.md (tables), steps.tsv, logs.tar.gz.
The full run takes about 300 s (DEVICE_BUDGET_S), so a second run fits in the session.
EOM
