#!/usr/bin/env bash
# tests/device/diag-latency.sh CARRY -- where the time of one small device
# message goes on the device machine: ping-pong with device memory on both
# ranks, on one rank only (only one process then touches the GPU), and under
# MPS when the driver ships it (GPU time-slicing between processes vs gmpi).
set -uo pipefail
carry=$(cd "${1:?usage: diag-latency.sh CARRY}" && pwd -P)
export PATH=$carry/prefix/bin:$PATH LD_LIBRARY_PATH=$carry/prefix/lib
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
lat() { timeout 40 gmpirun --timeout 35 -np 2 "$carry/bin/gb_latency" -d cuda "$@" -m 1:65536 -i 300:100 -x 30:10 2>&1 | grep -v '^#'; }
{
    echo "## tools: $(command -v strace perf nsys nvidia-cuda-mps-control nvidia-smi | tr '\n' ' ')"
    nvidia-smi --query-gpu=compute_mode,clocks.sm --format=csv 2>&1
    for k in "D D" "D H" "H D" "H H"; do echo "## $k"; lat $k; done
    echo "## D D, GMPI_GPU_HOST_CACHE=off"; GMPI_GPU_HOST_CACHE=off lat D D | head -3
    if command -v nvidia-cuda-mps-control >/dev/null; then
        export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
        mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
        nvidia-cuda-mps-control -d && sleep 1
        echo "## D D under MPS"; lat D D
        echo quit | nvidia-cuda-mps-control
        sleep 1
        cat /tmp/mps-log/control.log 2>/dev/null | tail -5
    fi
} >"$out/diag.txt" 2>&1
cat "$out/diag.txt"
