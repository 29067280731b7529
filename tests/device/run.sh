#!/usr/bin/env bash
# tests/device/run.sh -- the whole GPU check of gmpi in one go, on the device machine.
#
#   bash tests/device/run.sh CARRY [QUICK]
#
# Run from the repository root. CARRY is the folder tests/device/build.sh made (gmpi's
# prefix, the test programs, the benchmark suite, Rust test binaries). Everything goes to
# $OUT (default ./device-out): summary.md (the tables), steps.tsv (every step: status,
# seconds), logs/ (each step's output), machine.txt. Every step has a time limit and the
# whole run stays under about 540 s; a failing step is recorded and the run goes on.
# Exit status: 0 when every correctness step passed, 1 otherwise.
# QUICK=1 (or a second argument) runs a reduced set (np 2, sizes up to 1 MiB, no
# performance part): what CI runs against tests/c/fake_libcuda.c.
set -uo pipefail

carry=${1:?usage: run.sh CARRY [QUICK]}
quick=${2:-${QUICK:-0}}
carry=$(cd "$carry" && pwd -P)
repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd -P)
out=${OUT:-$PWD/device-out}
mkdir -p "$out/logs"
out=$(cd "$out" && pwd -P)
prefix=$carry/prefix
bin=$carry/bin
export PATH=$prefix/bin:$PATH
export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# NVRTC (gmpi's device reduction kernels) lives with the toolkit, often off the loader path
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
start=$(date +%s)
budget=${DEVICE_BUDGET_S:-540}
steps=$out/steps.tsv
printf 'step\tstatus\tseconds\tresult\n' >"$steps"
failed_steps=0

elapsed() { echo $(($(date +%s) - start)); }

# step NAME LIMIT [VAR=VALUE...] -- COMMAND...: runs COMMAND with the variables set, under
# `timeout LIMIT` (cut to what is left of the budget), output in logs/NAME.log.
# Correctness steps (name not starting with perf-/sweep-/info-) count towards the exit status.
step() {
    local name=$1 limit=$2
    shift 2
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    local left=$((budget - $(elapsed)))
    if [ "$left" -lt 5 ]; then
        printf '%s\tSKIPPED\t0\tno time left\n' "$name" >>"$steps"
        echo "run.sh: $name skipped (no time left)"
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    local log=$out/logs/$name.log t0 rc
    t0=$(date +%s)
    { echo "# $name: ${envs[*]} $*"; echo "# limit ${limit}s"; } >"$log"
    env "${envs[@]}" timeout -k 5 "$limit" "$@" >>"$log" 2>&1
    rc=$?
    local secs=$(($(date +%s) - t0)) status=ok result
    result=$(grep -h '^SUMMARY' "$log" | sed 's/^SUMMARY //' | paste -sd ';' -)
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        status=TIMEOUT
    elif [ $rc -ne 0 ]; then
        status="FAIL($rc)"
    elif grep -q '^FAIL' "$log"; then
        status=FAIL
    fi
    case $name in
    perf-* | sweep-* | info-*) ;;
    *) [ "$status" = ok ] || failed_steps=$((failed_steps + 1)) ;;
    esac
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$secs" "${result:-}" >>"$steps"
    echo "run.sh: $name: $status (${secs}s) ${result:-}"
}

# "${run[@]}" NP PROGRAM ARGS...: gmpirun with a job time limit (steps run commands, not
# shell functions, under `timeout`)
run=(gmpirun --timeout 170 -np)

{
    echo "date: $(date -u)"
    echo "host: $(uname -a)"
    echo "carry: $carry"
    echo "repo: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
    command -v nvidia-smi >/dev/null && nvidia-smi topo -m
    command -v nvcc >/dev/null && nvcc --version | tail -2
    nproc
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc|libgdrapi' || true
} >"$out/machine.txt" 2>&1

step info-doctor 20 -- gmpirun --doctor

# ---- correctness ----------------------------------------------------------------------
if [ "$quick" != 0 ]; then
    step p2p-np2 60 -- "${run[@]}" 2 "$bin/dt_p2p" -M 1M
    step p2p-np2-staged 60 GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/dt_p2p" -M 1M
    step coll-np2 90 -- "${run[@]}" 2 "$bin/dt_coll" -M 256K
    step realloc-np2 60 -- "${run[@]}" 2 "$bin/dt_realloc" -M 1M -n 4
    step kinds-np2 60 -- "${run[@]}" 2 "$bin/dt_kinds" -M 1M
    step ctx-first-np2 60 -- "${run[@]}" 2 "$bin/dt_ctx_first" -M 1M
    step rust-api-np2 90 -- "${run[@]}" 2 "$bin/gmpi-cuda"
    step protocols 60 GMPI_LOG=pml=debug -- "${run[@]}" 2 "$bin/dt_p2p" -M 1M -k D
    step protocols-staged 60 GMPI_LOG=pml=debug GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/dt_p2p" -M 1M -k D
else
    step p2p-np2 60 -- "${run[@]}" 2 "$bin/dt_p2p"
    step p2p-np4 90 -- "${run[@]}" 4 "$bin/dt_p2p"
    step p2p-np2-staged 60 GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/dt_p2p"
    step p2p-np2-managed 60 -- "${run[@]}" 2 "$bin/dt_p2p" -k HM -M 4M
    step coll-np2 90 -- "${run[@]}" 2 "$bin/dt_coll" -M 4M
    step coll-np4 90 -- "${run[@]}" 4 "$bin/dt_coll" -M 1M
    step coll-np2-managed 60 -- "${run[@]}" 2 "$bin/dt_coll" -k M -M 1M
    step realloc-np2 60 -- "${run[@]}" 2 "$bin/dt_realloc" -M 16M
    step realloc-np4 60 -- "${run[@]}" 4 "$bin/dt_realloc" -M 4M -n 6
    step realloc-np2-staged 60 GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/dt_realloc" -M 4M -n 6
    step kinds-np2 60 -- "${run[@]}" 2 "$bin/dt_kinds" -M 64M
    step kinds-np4 60 -- "${run[@]}" 4 "$bin/dt_kinds" -M 4M
    step ctx-first-np2 40 -- "${run[@]}" 2 "$bin/dt_ctx_first" -M 64M
    step ctx-first-np4 40 -- "${run[@]}" 4 "$bin/dt_ctx_first"
    # the Rust API: cudarc CudaSlice/CudaView/CudaViewMut through p2p and collectives
    step rust-api-np2 90 -- "${run[@]}" 2 "$bin/gmpi-cuda"
    step rust-api-np4 120 -- "${run[@]}" 4 "$bin/gmpi-cuda"
    # every collective with device memory on some ranks and host memory on the others
    step rust-mixed-np3 90 -- "${run[@]}" 3 "$bin/gmpi-cuda-mixed"
    step rust-mixed-np4 90 -- "${run[@]}" 4 "$bin/gmpi-cuda-mixed"
    # which protocol each size used (device buffers only; both sides' logs)
    step protocols 60 GMPI_LOG=pml=debug -- "${run[@]}" 2 "$bin/dt_p2p" -k HD
    step protocols-staged 60 GMPI_LOG=pml=debug GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/dt_p2p" -k D
    if command -v nvcc >/dev/null; then
        step cudart-build 120 -- nvcc -O2 -I"$prefix/include" "$repo/tests/device/cudart.cu" -o "$out/dt_cudart" \
            -L"$prefix/lib" -lmpi -Xlinker -rpath -Xlinker "$prefix/lib"
        [ -x "$out/dt_cudart" ] && step cudart-np2 60 -- "${run[@]}" 2 "$out/dt_cudart"
        rm -f "$out/dt_cudart"
    else
        printf 'cudart\tSKIPPED\t0\tno nvcc\n' >>"$steps"
    fi
    if [ -s "$carry/rust/list.txt" ]; then
        while read -r t; do
            step "rust-$t" 90 -- "$carry/rust/$t" --test-threads 4
        done <"$carry/rust/list.txt"
    fi
fi

# ---- performance (issue 6) --------------------------------------------------------------
if [ "$quick" = 0 ]; then
    step perf-copybw 40 -- "$bin/dt_copybw" 8 4M 64M
    step perf-bw-DD 40 -- "${run[@]}" 2 "$bin/gb_bw" -d cuda D D -m 4194304:67108864 -i 20:10 -x 3:2 -W 8
    step perf-bw-HH 40 -- "${run[@]}" 2 "$bin/gb_bw" -m 4194304:67108864 -i 20:10 -x 3:2 -W 8
    step perf-bw-DH 40 -- "${run[@]}" 2 "$bin/gb_bw" -d cuda D H -m 4194304:67108864 -i 20:10 -x 3:2 -W 8
    step perf-bw-DD-staged 40 GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/gb_bw" -d cuda D D -m 4194304:67108864 -i 10:5 -x 2:1 -W 4
    step perf-lat-DD 30 -- "${run[@]}" 2 "$bin/gb_latency" -d cuda D D -m 0:65536 -i 5000:1000 -x 500:100
    step perf-lat-HH 30 -- "${run[@]}" 2 "$bin/gb_latency" -m 0:65536 -i 5000:1000 -x 500:100
    step perf-lat-DD-large 30 -- "${run[@]}" 2 "$bin/gb_latency" -d cuda D D -m 131072:67108864 -i 100:20 -x 10:3
    step perf-allreduce-D-np2 40 -- "${run[@]}" 2 "$bin/gb_allreduce" -d cuda -m 4:67108864 -i 200:10 -x 20:2
    step perf-allreduce-H-np2 40 -- "${run[@]}" 2 "$bin/gb_allreduce" -m 4:67108864 -i 200:10 -x 20:2
    step perf-allreduce-D-np4 40 -- "${run[@]}" 4 "$bin/gb_allreduce" -d cuda -m 4:67108864 -i 100:5 -x 10:1
    # crossovers: the device eager limit (latency around it), the IPC threshold (bandwidth
    # below / above it), the staged pipeline chunk (bandwidth with IPC off)
    for e in 4096 8192 16384 32768 65536; do
        step "sweep-eager-$e" 15 GMPI_GPU_EAGER_LIMIT=$e -- "${run[@]}" 2 "$bin/gb_latency" -d cuda D D -m 1024:131072 -i 2000:500 -x 100:50
    done
    for t in 0 65536 262144 1048576; do
        step "sweep-ipc-$t" 15 GMPI_GPU_IPC_THRESHOLD=$t -- "${run[@]}" 2 "$bin/gb_bw" -d cuda D D -m 8192:4194304 -i 20:10 -x 2:2 -W 8
    done
    for c in 131072 262144 524288 1048576 2097152 4194304; do
        step "sweep-chunk-$c" 20 GMPI_GPU_IPC=off GMPI_GPU_PIPELINE_CHUNK=$c -- "${run[@]}" 2 "$bin/gb_bw" -d cuda D D -m 1048576:67108864 -i 6:4 -x 1:1 -W 4
    done
fi

# ---- summary ------------------------------------------------------------------------------
summary=$out/summary.md
{
    echo "# gmpi GPU check"
    echo
    echo "$(date -u), $(elapsed) s in all; carry $carry; quick=$quick"
    echo
    echo '```'
    head -n 8 "$out/machine.txt"
    echo '```'
    echo
    echo "## Steps"
    echo
    echo "| step | status | s | result |"
    echo "|---|---|---|---|"
    tail -n +2 "$steps" | awk -F'\t' '{printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4}'
    echo
    echo "Failed cases:"
    echo '```'
    grep -h '^FAIL\|FATAL\|panicked\|fake-cuda: ERROR' "$out"/logs/*.log | sort | uniq -c | head -50
    echo '```'
    echo
    echo "gmpi warnings (e.g. no NVRTC: device reductions on the CPU):"
    echo '```'
    grep -h ' WARN ' "$out"/logs/*.log | sed 's/^\[gmpi rank [0-9]*\] *//' | sort | uniq -c | sort -rn | head -20
    echo '```'
    echo
    echo "## Protocols (GMPI_LOG=pml=debug): size, memory, protocol, messages"
    echo
    for f in "$out/logs/protocols.log" "$out/logs/protocols-staged.log"; do
        [ -f "$f" ] || continue
        echo "### $(basename "$f" .log)"
        echo '```'
        sed -n 's/.*send \([0-9]*\) B of \([a-z]*\) memory to rank [0-9]* tag [0-9-]* ctx [0-9]* via \([a-z]*\): \(.*\)$/\1 \2 \3 \4/p' "$f" |
            sort -n -k1,1 | uniq -c | awk '{printf "%10s B %-8s %-5s %-16s x%s\n", $2, $3, $4, $5, $1}'
        grep -o 'recv [0-9]* B into [a-z]* memory from rank [0-9]*: rndv/cuda-ipc' "$f" | awk '{print $2, $5}' |
            sort -n | uniq -c | awk '{printf "%10s B recv %-8s rndv/cuda-ipc x%s\n", $2, $3, $1}'
        grep -ho 'no CUDA IPC for [^;]*; staging instead\|falling back to rndv/staged' "$f" | sed 's/0x[0-9a-f]*+[0-9]*/ADDR/' | sort | uniq -c
        echo '```'
    done
    if [ "$quick" = 0 ]; then
        echo
        echo "## Performance (issue 6)"
        echo
        echo "Copy rates (dt_copybw, one GPU, no MPI):"
        echo '```'
        grep '^copy' "$out/logs/perf-copybw.log" 2>/dev/null
        echo '```'
        for f in perf-bw-DD perf-bw-HH perf-bw-DH perf-bw-DD-staged perf-lat-DD perf-lat-HH perf-lat-DD-large \
            perf-allreduce-D-np2 perf-allreduce-H-np2 perf-allreduce-D-np4; do
            [ -f "$out/logs/$f.log" ] || continue
            echo
            echo "$f ($(grep -m1 '^# ranks' "$out/logs/$f.log" | sed 's/^# //')):"
            echo '```'
            grep -m1 '^# Size' "$out/logs/$f.log"
            grep -v '^#' "$out/logs/$f.log" | grep '^[0-9]'
            echo '```'
        done
        echo
        echo "## Threshold sweeps"
        for kind in eager ipc chunk; do
            echo
            echo "### $kind (rows: size; columns: setting)"
            echo '```'
            files=$(ls "$out"/logs/sweep-"$kind"-*.log 2>/dev/null | sort -t- -k3 -n)
            [ -n "$files" ] || { echo '```'; continue; }
            printf '%-10s' size
            for f in $files; do printf ' %12s' "$(basename "$f" .log | sed "s/sweep-$kind-//")"; done
            echo
            # shellcheck disable=SC2086
            awk 'FNR==1{n++} /^[0-9]/{v[$1,n]=$2; s[$1]=1} END{for (k in s) {printf "%-10s", k; for (i=1;i<=n;i++) printf " %12s", ((k,i) in v ? v[k,i] : "-"); printf "\n"}}' $files | sort -n
            echo '```'
        done
        echo
        echo "(bw in MB/s, latency in us; sweep-eager: latency, sweep-ipc and sweep-chunk: bandwidth)"
    fi
    echo
    echo "Correctness steps failed: $failed_steps"
} >"$summary"
echo "run.sh: done in $(elapsed) s; $failed_steps correctness steps failed; see $summary"
[ "$failed_steps" -eq 0 ]
