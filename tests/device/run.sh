#!/usr/bin/env bash
# tests/device/run.sh -- the whole GPU check of gmpi in one go, on the device machine.
#
#   bash tests/device/run.sh CARRY [QUICK]
#
# Run from the repository root. CARRY is the folder tests/device/build.sh made (gmpi's
# prefix, the test programs, the benchmark suite, Rust test binaries). Results go to $OUT
# (default ./device-out) as three files, well under the eight the device machine returns:
#   summary.md     the machine and GPU, every step (PASS/FAIL counts, SKIPPED ones), the
#                  protocol per size, the performance tables
#   steps.tsv      every step: status, seconds, result (written as the run goes)
#   logs.tar.gz    logs/STEP.log of every step and logs/machine.txt (refreshed after every
#                  step, so a run killed from outside still leaves the logs so far)
# Every step runs under `timeout`, cut to what is left of the budget (DEVICE_BUDGET_S,
# default 300 s, so that a second full run fits in one session's device time); once the
# budget is spent no new step starts and the rest are recorded as SKIPPED.
# DEVICE_PARTS=correctness or =perf runs one part only (default: both).
# Exit status: 0 when every correctness step ran and passed, 1 when one failed, 2 when none
# failed but some were skipped or cut for time.
# QUICK=1 (or a second argument) runs a reduced set (np 2, sizes up to 1 MiB, no
# performance part): what CI runs against tests/c/fake_libcuda.c.
# shellcheck disable=SC2317 # (write_summary and finish run from the EXIT trap)
set -uo pipefail

carry=${1:?usage: run.sh CARRY [QUICK]}
quick=${2:-${QUICK:-0}}
carry=$(cd "$carry" && pwd -P)
repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd -P)
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
out=$(cd "$out" && pwd -P)
work=$(mktemp -d "${TMPDIR:-/tmp}/gmpi-device.XXXXXX")
logs=$work/logs
mkdir -p "$logs"
prefix=$carry/prefix
bin=$carry/bin
parts=${DEVICE_PARTS:-correctness,perf}
export PATH=$prefix/bin:$PATH
export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# NVRTC (gmpi's device reduction kernels) lives with the toolkit, often off the loader path
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
start=$(date +%s)
budget=${DEVICE_BUDGET_S:-300}
steps=$out/steps.tsv
summary=$out/summary.md
rm -f "$out/logs.tar.gz" "$summary"
printf 'step\tstatus\tseconds\tresult\n' >"$steps"
failed_steps=0 short_steps=0

elapsed() { echo $(($(date +%s) - start)); }
part() { case ",$parts," in *",$1,"*) return 0 ;; esac; return 1; }
archive() { tar -czf "$out/logs.tar.gz.part" -C "$work" logs && mv -f "$out/logs.tar.gz.part" "$out/logs.tar.gz"; }

# step NAME LIMIT [VAR=VALUE...] -- COMMAND...: runs COMMAND with the variables set, under
# `timeout LIMIT` (cut to what is left of the budget), output in logs/NAME.log. An argument
# @LIMIT becomes the step's limit less 3 s (for gmpirun --timeout, so that gmpirun ends
# the job itself and says which ranks hung). Correctness steps (names not starting with
# perf-, sweep- or info-) count towards the exit status.
step() {
    local name=$1 limit=$2
    shift 2
    local envs=() args=() cut=no
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    local left=$((budget - $(elapsed))) correctness=yes
    case $name in perf-* | sweep-* | info-*) correctness=no ;; esac
    if [ "$left" -lt 5 ]; then
        printf '%s\tSKIPPED\t0\tbudget of %ss spent\n' "$name" "$budget" >>"$steps"
        echo "run.sh: $name: SKIPPED (budget spent)"
        [ $correctness = yes ] && short_steps=$((short_steps + 1))
        return 0
    fi
    [ "$limit" -gt "$left" ] && { limit=$left; cut=yes; }
    for a in "$@"; do
        if [ "$a" = @LIMIT ]; then args+=($((limit > 6 ? limit - 3 : limit))); else args+=("$a"); fi
    done
    local log=$logs/$name.log t0 rc
    t0=$(date +%s)
    { echo "# $name: ${envs[*]} ${args[*]}"; echo "# limit ${limit}s"; } >"$log"
    env "${envs[@]}" timeout -k 5 "$limit" "${args[@]}" >>"$log" 2>&1
    rc=$?
    local secs=$(($(date +%s) - t0)) status=ok result
    result=$(grep -h '^SUMMARY' "$log" | sed 's/^SUMMARY //' | paste -sd ';' -)
    # gmpirun says 124 after its own --timeout; timeout(1) says 124 or 137
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        if [ $cut = yes ]; then status=CUT; else status=TIMEOUT; fi
    elif [ $rc -ne 0 ]; then
        status="FAIL($rc)"
    elif grep -q '^FAIL' "$log"; then
        status=FAIL
    fi
    if [ $correctness = yes ]; then
        case $status in
        ok) ;;
        CUT) short_steps=$((short_steps + 1)) ;;
        *) failed_steps=$((failed_steps + 1)) ;;
        esac
    fi
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$secs" "${result:-}" >>"$steps"
    echo "run.sh: $name: $status (${secs}s) ${result:-}"
    archive
}

# "${run[@]}" NP PROGRAM ARGS...: gmpirun ending the job just before the step's limit
# (steps run commands, not shell functions, under `timeout`)
run=(gmpirun --timeout @LIMIT -np)

gpu_name() {
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name --format=csv,noheader 2>&1 | paste -sd ';' -
    else
        echo "unknown (no nvidia-smi)"
    fi
}

# first number of the row for SIZE in a benchmark log ("SIZE VALUE")
value_at() { awk -v s="$2" '$1 == s { print $2; exit }' "$logs/$1.log" 2>/dev/null; }

write_summary() {
    {
        echo "# gmpi GPU check"
        echo
        echo "$(date -u), $(elapsed) s of a ${budget} s budget; quick=$quick; parts=$parts; carry $carry"
        echo
        echo "GPU: $(gpu_name)${DEVICE_KIND:+ (device kind $DEVICE_KIND)}"
        echo
        echo '```'
        head -n 12 "$logs/machine.txt"
        echo '```'
        echo
        echo "## Steps"
        echo
        echo "| step | status | s | result |"
        echo "|---|---|---|---|"
        tail -n +2 "$steps" | awk -F'\t' '{printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4}'
        echo
        echo "Correctness steps failed: $failed_steps; skipped or cut for time: $short_steps"
        echo
        echo "Failed cases:"
        echo '```'
        grep -h '^FAIL\|FATAL\|panicked\|fake-cuda: ERROR\|gmpirun: .*abort\|gmpirun: .*time' "$logs"/*.log | sort | uniq -c | head -50
        echo '```'
        echo
        echo "gmpi warnings (e.g. no NVRTC: device reductions on the CPU):"
        echo '```'
        grep -h ' WARN ' "$logs"/*.log | sed 's/^\[gmpi rank [0-9]*\] *//' | sort | uniq -c | sort -rn | head -20
        echo '```'
        if [ -f "$logs/ops-np2.log" ]; then
            echo
            echo "Device reduction kernels compiled by NVRTC in ops-np2 (GMPI_LOG=gpu=debug): $(grep -o 'compiled gmpi_reduce_[a-z0-9_]*' "$logs/ops-np2.log" | sort -u | wc -l) distinct (99 expected: 10 ops x 8 integer types, 4 x 4 float types with f16 and bf16, 3 on bool)"
        fi
        echo
        echo "## Protocols (GMPI_LOG=pml=debug): size, memory, protocol, messages"
        echo
        for f in "$logs/protocols.log" "$logs/protocols-staged.log"; do
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
        if part perf && [ "$quick" = 0 ]; then
            echo
            echo "## Performance (issue 6)"
            echo
            echo "Copy rates (dt_copybw, one GPU, no MPI):"
            echo '```'
            grep '^copy' "$logs/perf-copybw.log" 2>/dev/null
            echo '```'
            echo
            echo "Host 8 B latency (gb_latency, us one way), the same ping-pong with CUDA loaded"
            echo "(GMPI_CUDA=auto: every buffer is classified) and with GMPI_CUDA=off:"
            echo
            echo "| run | CUDA loaded | GMPI_CUDA=off | difference |"
            echo "|---|---|---|---|"
            for i in 1 2; do
                local on off
                on=$(value_at "perf-lat8-cuda-$i" 8)
                off=$(value_at "perf-lat8-off-$i" 8)
                if [ -n "$on" ] && [ -n "$off" ]; then
                    echo "| $i | $on | $off | $(awk -v a="$on" -v b="$off" 'BEGIN { printf "%+.3f", a - b }') |"
                else
                    echo "| $i | ${on:--} | ${off:--} | - |"
                fi
            done
            for f in perf-bw-DD perf-bw-rust perf-bw-HH perf-bw-DH perf-bw-DD-staged perf-lat-DD perf-lat-DH perf-lat-HH \
                perf-lat-DD-large perf-allreduce-D-np2 perf-allreduce-H-np2 perf-allreduce-D-np4 \
                perf-lat-DD-mps perf-bw-DD-mps perf-bw-rust-mps perf-bw-DD-staged-mps perf-allreduce-D-np4-mps; do
                [ -f "$logs/$f.log" ] || continue
                echo
                echo "$f ($(grep -m1 '^# ranks\|^# gmpi-cuda-bw' "$logs/$f.log" | sed 's/^# //')):"
                echo '```'
                grep -m1 '^# Size' "$logs/$f.log"
                grep -v '^#' "$logs/$f.log" | grep '^[0-9]'
                echo '```'
            done
            echo
            echo "## Threshold sweeps"
            for kind in eager ipc; do
                echo
                echo "### $kind (rows: size; columns: setting)"
                echo '```'
                local files f
                # by setting (the number after the last dash), whatever the folder's name
                files=$(for f in "$logs"/sweep-"$kind"-*.log; do [ -e "$f" ] && echo "${f##*-} $f"; done |
                    sort -n | cut -d' ' -f2-)
                [ -n "$files" ] || { echo '```'; continue; }
                printf '%-10s' size
                for f in $files; do printf ' %12s' "$(basename "$f" .log | sed "s/sweep-$kind-//")"; done
                echo
                # shellcheck disable=SC2086
                awk 'FNR==1{n++} /^[0-9]/{v[$1,n]=$2; s[$1]=1} END{for (k in s) {printf "%-10s", k; for (i=1;i<=n;i++) printf " %12s", ((k,i) in v ? v[k,i] : "-"); printf "\n"}}' $files | sort -n
                echo '```'
            done
            echo
            echo "(bw in MB/s, latency in us; sweep-eager: latency, sweep-ipc: bandwidth)"
        fi
    } >"$summary"
}

finish() {
    trap - EXIT
    write_summary
    archive
    rm -rf "$work"
    echo "run.sh: done in $(elapsed) s; $failed_steps correctness steps failed, $short_steps skipped or cut; see $summary"
}
trap finish EXIT
trap 'echo "run.sh: stopped by a signal"; exit 143' TERM INT

{
    echo "date: $(date -u)"
    echo "gpu: $(gpu_name)"
    echo "host: $(uname -a)"
    echo "carry: $carry"
    echo "repo: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
    command -v nvcc >/dev/null && nvcc --version | tail -2
    echo "cpus: $(nproc)"
    command -v nvidia-smi >/dev/null && nvidia-smi topo -m
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc|libgdrapi' || true
} >"$logs/machine.txt" 2>&1

step info-doctor 20 -- gmpirun --doctor

# ---- correctness ----------------------------------------------------------------------
# Limits are about three times the time each step should take on an H100/H200 host
# (tests/device/README.md has the estimates); the budget, not the limits, bounds the run.
if part correctness && [ "$quick" != 0 ]; then
    step p2p-np2 60 -- "${run[@]}" 2 "$bin/dt_p2p" -M 1M
    step p2p-np2-staged 60 GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/dt_p2p" -M 1M
    step p2p-np2-mixed 60 -- "${run[@]}" 2 "$bin/dt_p2p" -M 1M -k X
    step coll-np2 90 -- "${run[@]}" 2 "$bin/dt_coll" -M 256K
    # even ranks device, odd ranks host, through the shared-memory area and without it
    step coll-np2-mixed 90 -- "${run[@]}" 2 "$bin/dt_coll" -M 64K -k X
    step coll-np2-mixed-noshm 90 GMPI_COLL_SHM=false -- "${run[@]}" 2 "$bin/dt_coll" -M 64K -k X
    step ops-np2 90 GMPI_LOG=gpu=debug -- "${run[@]}" 2 "$bin/dt_ops" -M 16K
    step realloc-np2 60 -- "${run[@]}" 2 "$bin/dt_realloc" -M 1M -n 4
    step kinds-np2 60 -- "${run[@]}" 2 "$bin/dt_kinds" -M 1M
    step ctx-first-np2 60 -- "${run[@]}" 2 "$bin/dt_ctx_first" -M 1M
    step bufid-np2 30 -- "${run[@]}" 2 "$bin/dt_bufid"
    step rma-device-np2 60 FAKE_CUDA_SHARED_IPC=1 -- "${run[@]}" 2 "$bin/dt_rma_device"
    step rust-api-np2 90 -- "${run[@]}" 2 "$bin/gmpi-cuda"
    step rust-bw-np2 60 -- "${run[@]}" 2 "$bin/gmpi-cuda-bw" 1M 4M
    step protocols 60 GMPI_LOG=pml=debug -- "${run[@]}" 2 "$bin/dt_p2p" -M 1M -k D
    step protocols-staged 60 GMPI_LOG=pml=debug GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/dt_p2p" -M 1M -k D
elif part correctness; then
    step p2p-np2 30 -- "${run[@]}" 2 "$bin/dt_p2p"
    step p2p-np4 40 -- "${run[@]}" 4 "$bin/dt_p2p"
    step p2p-np2-staged 30 GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/dt_p2p"
    step p2p-np2-managed 20 -- "${run[@]}" 2 "$bin/dt_p2p" -k HM -M 4M
    step p2p-np4-mixed 30 -- "${run[@]}" 4 "$bin/dt_p2p" -k XD -M 16M
    step coll-np2 40 -- "${run[@]}" 2 "$bin/dt_coll" -M 4M
    step coll-np4 40 -- "${run[@]}" 4 "$bin/dt_coll" -M 1M
    step coll-np2-managed 30 -- "${run[@]}" 2 "$bin/dt_coll" -k M -M 1M
    # even ranks device, odd ranks host (every rank chooses the same algorithm whatever
    # memory it passes), through the shared-memory area and without it
    step coll-np4-mixed 40 -- "${run[@]}" 4 "$bin/dt_coll" -M 1M -k X
    step coll-np4-mixed-noshm 40 GMPI_COLL_SHM=false -- "${run[@]}" 4 "$bin/dt_coll" -M 1M -k X
    step ops-np2 40 GMPI_LOG=gpu=debug -- "${run[@]}" 2 "$bin/dt_ops" -M 1M
    step realloc-np2 30 -- "${run[@]}" 2 "$bin/dt_realloc" -M 16M
    step realloc-np4 30 -- "${run[@]}" 4 "$bin/dt_realloc" -M 4M -n 6
    step realloc-np2-staged 30 GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/dt_realloc" -M 4M -n 6
    step kinds-np2 50 -- "${run[@]}" 2 "$bin/dt_kinds" -M 64M
    step kinds-np4 30 -- "${run[@]}" 4 "$bin/dt_kinds" -M 4M
    step ctx-first-np2 20 -- "${run[@]}" 2 "$bin/dt_ctx_first" -M 64M
    step ctx-first-np4 20 -- "${run[@]}" 4 "$bin/dt_ctx_first"
    # what btl-ib's GPU registration cache stands on: new buffer ids, whole-allocation dma-bufs
    step bufid-np2 20 -- "${run[@]}" 2 "$bin/dt_bufid"
    step rma-device-np2 20 -- "${run[@]}" 2 "$bin/dt_rma_device"
    step rma-device-np4-mixed 20 RMA_DEVICE_MIXED=1 -- "${run[@]}" 4 "$bin/dt_rma_device"
    # the Rust API: cudarc CudaSlice/CudaView/CudaViewMut through p2p and collectives
    step rust-api-np2 30 -- "${run[@]}" 2 "$bin/gmpi-cuda"
    step rust-api-np4 40 -- "${run[@]}" 4 "$bin/gmpi-cuda"
    # every collective with device memory on some ranks and host memory on the others
    step rust-mixed-np3 40 -- "${run[@]}" 3 "$bin/gmpi-cuda-mixed"
    step rust-mixed-np4 40 -- "${run[@]}" 4 "$bin/gmpi-cuda-mixed"
    # which protocol each size used (device buffers only; both sides' logs)
    step protocols 20 GMPI_LOG=pml=debug -- "${run[@]}" 2 "$bin/dt_p2p" -k HD -M 16M
    step protocols-staged 20 GMPI_LOG=pml=debug GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/dt_p2p" -k D -M 16M
    if command -v nvcc >/dev/null; then
        step cudart-build 60 -- nvcc -O2 -I"$prefix/include" "$repo/tests/device/cudart.cu" -o "$work/dt_cudart" \
            -L"$prefix/lib" -lmpi -Xlinker -rpath -Xlinker "$prefix/lib"
        [ -x "$work/dt_cudart" ] && step cudart-np2 20 -- "${run[@]}" 2 "$work/dt_cudart"
    else
        printf 'cudart\tSKIPPED\t0\tno nvcc\n' >>"$steps"
    fi
    if [ -s "$carry/rust/list.txt" ]; then
        while read -r t; do
            step "rust-$t" 40 -- "$carry/rust/$t" --test-threads 4
        done <"$carry/rust/list.txt"
    fi
fi

# ---- performance (issue 6) --------------------------------------------------------------
# Iterations are sized so each step takes a few seconds (the CUDA start-up of the ranks
# included); every number is the best or the mean of enough repetitions to be stable to a
# few per cent on an idle machine.
if part perf && [ "$quick" = 0 ]; then
    step perf-copybw 20 -- "$bin/dt_copybw" 8 4M 64M
    # host 8 B latency, CUDA loaded (auto) vs GMPI_CUDA=off, alternated twice
    for i in 1 2; do
        step "perf-lat8-cuda-$i" 10 -- "${run[@]}" 2 "$bin/gb_latency" -m 8:8 -i 20000 -x 2000
        step "perf-lat8-off-$i" 10 GMPI_CUDA=off -- "${run[@]}" 2 "$bin/gb_latency" -m 8:8 -i 20000 -x 2000
    done
    step perf-bw-DD 20 -- "${run[@]}" 2 "$bin/gb_bw" -d cuda D D -m 4194304:67108864 -i 20:10 -x 3:2 -W 8
    # the same through the Rust API (cudarc CudaSlice), 8 B .. 64 MiB
    step perf-bw-rust 20 -- "${run[@]}" 2 "$bin/gmpi-cuda-bw" 64M 128M
    step perf-bw-HH 20 -- "${run[@]}" 2 "$bin/gb_bw" -m 4194304:67108864 -i 20:10 -x 3:2 -W 8
    step perf-bw-DH 20 -- "${run[@]}" 2 "$bin/gb_bw" -d cuda D H -m 4194304:67108864 -i 20:10 -x 3:2 -W 8
    step perf-bw-DD-staged 20 GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/gb_bw" -d cuda D D -m 4194304:67108864 -i 10:5 -x 2:1 -W 4
    # (two processes on one GPU without MPS: the GPU switches between their contexts on
    # every copy, ~80 us each, so fewer iterations than the host latency)
    step perf-lat-DD 20 -- "${run[@]}" 2 "$bin/gb_latency" -d cuda D D -m 0:65536 -i 500:200 -x 50:20
    step perf-lat-DH 20 -- "${run[@]}" 2 "$bin/gb_latency" -d cuda D H -m 0:65536 -i 2000:1000 -x 200:100
    step perf-lat-HH 20 -- "${run[@]}" 2 "$bin/gb_latency" -m 0:65536 -i 5000:1000 -x 500:100
    step perf-lat-DD-large 20 -- "${run[@]}" 2 "$bin/gb_latency" -d cuda D D -m 131072:67108864 -i 100:20 -x 10:3
    step perf-allreduce-D-np2 20 -- "${run[@]}" 2 "$bin/gb_allreduce" -d cuda -m 4:67108864 -i 200:10 -x 20:2
    step perf-allreduce-H-np2 20 -- "${run[@]}" 2 "$bin/gb_allreduce" -m 4:67108864 -i 200:10 -x 20:2
    step perf-allreduce-D-np4 25 -- "${run[@]}" 4 "$bin/gb_allreduce" -d cuda -m 4:67108864 -i 100:5 -x 10:1
    # crossovers: the device eager limit (latency around it; its own setting, so limits
    # above the host eager limit count), the IPC threshold (bandwidth below / above it),
    # and the staged pipeline's chunk (GMPI_GPU_IPC=off: asynchronous copies through
    # pinned slots, pulled by the receiver's get, 4 in flight)
    for e in 4096 8192 16384 32768; do
        step "sweep-eager-$e" 15 GMPI_GPU_EAGER_LIMIT=$e -- "${run[@]}" 2 "$bin/gb_latency" -d cuda D D -m 1024:131072 -i 2000:500 -x 100:50
    done
    for t in 0 65536 262144 1048576; do
        step "sweep-ipc-$t" 15 GMPI_GPU_IPC_THRESHOLD=$t -- "${run[@]}" 2 "$bin/gb_bw" -d cuda D D -m 8192:4194304 -i 20:10 -x 2:2 -W 8
    done
    for c in 131072 524288 2097152; do
        step "sweep-chunk-$c" 15 GMPI_GPU_IPC=off GMPI_GPU_PIPELINE_CHUNK=$c -- "${run[@]}" 2 "$bin/gb_bw" -d cuda D D -m 1048576:67108864 -i 10:5 -x 2:1 -W 4
    done
    # the same device paths under MPS (one GPU context for all ranks, no time-slicing
    # between processes), when the driver ships it
    if command -v nvidia-cuda-mps-control >/dev/null && [ "${DEVICE_MPS:-1}" != 0 ]; then
        export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        if nvidia-cuda-mps-control -d; then
            step perf-lat-DD-mps 20 -- "${run[@]}" 2 "$bin/gb_latency" -d cuda D D -m 0:65536 -i 2000:1000 -x 200:100
            step perf-bw-DD-mps 20 -- "${run[@]}" 2 "$bin/gb_bw" -d cuda D D -m 4194304:67108864 -i 20:10 -x 3:2 -W 8
            step perf-bw-rust-mps 20 -- "${run[@]}" 2 "$bin/gmpi-cuda-bw" 64M 128M
            step perf-bw-DD-staged-mps 20 GMPI_GPU_IPC=off -- "${run[@]}" 2 "$bin/gb_bw" -d cuda D D -m 4194304:67108864 -i 10:5 -x 2:1 -W 4
            step perf-allreduce-D-np4-mps 25 -- "${run[@]}" 4 "$bin/gb_allreduce" -d cuda -m 4:67108864 -i 100:5 -x 10:1
            echo quit | nvidia-cuda-mps-control
        else
            printf 'perf-mps\tSKIPPED\t0\tnvidia-cuda-mps-control -d failed\n' >>"$steps"
        fi
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
fi

[ "$failed_steps" -eq 0 ] || exit 1
[ "$short_steps" -eq 0 ] || exit 2
exit 0
