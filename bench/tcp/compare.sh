#!/usr/bin/env bash
# gmpi's TCP path between two "hosts" (network namespaces joined by a veth
# pair, each with its own hostname and sshd, as ../shared/TESTING.md
# describes) against the limit (a raw socket ping-pong and stream,
# `tcp-raw`) and against Open MPI's and MPICH's TCP paths between the same
# namespaces, all running the same C program (bench/tcp/pp.c): 8 B latency,
# 4 MiB and 64 MiB bandwidth.
#
# usage (root): bench/tcp/compare.sh [LAT_ITERS] [TRIALS]   (default 20000 5)
# Needs: iproute2, openssh-server, and for the peers openmpi-bin
# libopenmpi-dev mpich libmpich-dev (skipped with a note when absent).
# SKIP: names among "raw gmpi openmpi mpich" to leave out.
# GMPI_PREFIX: an installed gmpi (default target/gmpi-install, built by
# ./install.sh when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
iters=${1:-20000}
trials=${2:-5}
prefix=${GMPI_PREFIX:-$root/target/gmpi-install}
[ "$(id -u)" = 0 ] || { echo "compare.sh needs root (network namespaces)" >&2; exit 2; }

cargo build -q --release -p gmpi-bench -p gmpi-launcher
[ -x "$prefix/bin/gmpicc" ] || ./install.sh --prefix "$prefix" >/dev/null

tag=gb$$
A=${tag}a B=${tag}b
net=10.231.$((($$ % 200) + 20))
ipA=$net.1 ipB=$net.2
tmp=$(mktemp -d)
cleanup() {
    for f in "$tmp"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# Two namespaces, one veth pair; both ends are called gx0 so that every
# MPI can be told the same interface name.
ip netns add "$A"
ip netns add "$B"
ip link add "${tag}x" type veth peer name "${tag}y"
ip link set "${tag}x" netns "$A"
ip link set "${tag}y" netns "$B"
ip -n "$A" link set "${tag}x" name gx0
ip -n "$B" link set "${tag}y" name gx0
ip -n "$A" addr add "$ipA/24" dev gx0
ip -n "$B" addr add "$ipB/24" dev gx0
for n in "$A" "$B"; do
    ip -n "$n" link set lo up
    ip -n "$n" link set gx0 up
done

# sshd in both (each with its own hostname), one key for root.
ssh-keygen -q -t ed25519 -N '' -f "$tmp/hostkey"
ssh-keygen -q -t ed25519 -N '' -f "$tmp/id"
cp "$tmp/id.pub" "$tmp/authorized_keys"
mkdir -p /run/sshd
for h in A B; do
    ns=${tag}$(echo $h | tr AB ab)
    ip=$([ $h = A ] && echo "$ipA" || echo "$ipB")
    cat >"$tmp/sshd_$h" <<EOF
ListenAddress $ip
HostKey $tmp/hostkey
AuthorizedKeysFile $tmp/authorized_keys
PidFile $tmp/sshd_$h.pid
PermitRootLogin yes
StrictModes no
UsePAM no
PasswordAuthentication no
AcceptEnv *
EOF
    ip netns exec "$ns" unshare --uts sh -c "hostname host$h; exec /usr/sbin/sshd -f $tmp/sshd_$h"
done
ssh_cmd="ssh -i $tmp/id -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
printf '#!/bin/sh\nexec %s "$@"\n' "$ssh_cmd" >"$tmp/ssh"
chmod +x "$tmp/ssh"
for i in $(seq 50); do
    ip netns exec "$A" $ssh_cmd -o BatchMode=yes "$ipB" true 2>/dev/null && break
    sleep 0.1
done
inA() { ip netns exec "$A" unshare --uts sh -c 'hostname hostA; exec "$@"' sh "$@"; }

echo "# two namespaces over a veth pair ($ipA <-> $ipB), $trials trials, medians"
printf '%-22s %10s %12s %12s\n' "" "8 B (us)" "4 MiB (GB/s)" "64 MiB (GB/s)"
want() { case " ${SKIP:-} " in *" $1 "*) return 1 ;; esac; }
report() { # name file
    awk -v n="$1" '/^lat8_us/ {l=$2} /^bw4M_GBs/ {a=$2} /^bw64M_GBs/ {b=$2}
        END {printf "%-22s %10s %12s %12s\n", n, l, a, b}' "$2"
}

# The limit: raw sockets (blocking, TCP_NODELAY), one session per trial.
if want raw; then
    for t in $(seq "$trials"); do
        port=$((7310 + t))
        ip netns exec "$B" ./target/release/tcp-raw server "$ipB:$port" >/dev/null 2>&1 &
        for i in $(seq 50); do
            ip netns exec "$B" ss -ltn 2>/dev/null | grep -q ":$port " && break
            sleep 0.1
        done
        inA ./target/release/tcp-raw client "$ipB:$port" --iters "$iters" >>"$tmp/raw.txt"
        wait
    done
    med() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
    {
        echo "lat8_us $(awk '/latency 8 B:/ {print $5}' "$tmp/raw.txt" | med)"
        echo "bw4M_GBs $(awk '/stream 4 MiB/ {print $(NF-1)}' "$tmp/raw.txt" | med)"
        echo "bw64M_GBs $(awk '/stream 64 MiB/ {print $(NF-1)}' "$tmp/raw.txt" | med)"
    } >"$tmp/raw.out"
    report "raw socket" "$tmp/raw.out"
fi

# gmpi
if want gmpi; then
"$prefix/bin/gmpicc" -O2 -w -o "$tmp/pp.gmpi" bench/tcp/pp.c
inA "$prefix/bin/gmpirun" -H "$ipA:1,$ipB:1" -np 2 --launch-agent "$ssh_cmd" \
    -x GMPI_TCP_IF=gx0 "$tmp/pp.gmpi" "$iters" "$trials" >"$tmp/gmpi.out"
report "gmpi" "$tmp/gmpi.out"
fi

# Open MPI 4 (ob1 + tcp btl). Without mpi_yield_when_idle its ranks spin
# without ever giving the CPU away, and on 2 cores the kernel's softirq
# thread that moves veth packets then runs only at scheduler ticks: 4 ms
# round trips. Yielding is what gmpi's progress engine does too.
if ! want openmpi; then :
elif command -v mpicc.openmpi >/dev/null; then
    mpicc.openmpi -O2 -w -o "$tmp/pp.ompi" bench/tcp/pp.c
    inA mpirun.openmpi --allow-run-as-root -np 2 --host "$ipA,$ipB" \
        --mca plm_rsh_agent "$tmp/ssh" --mca pml ob1 --mca btl tcp,self \
        --mca mpi_yield_when_idle 1 \
        --mca btl_tcp_if_include gx0 --mca oob_tcp_if_include gx0 \
        "$tmp/pp.ompi" "$iters" "$trials" >"$tmp/ompi.out" </dev/null
    report "Open MPI $(mpirun.openmpi --version 2>/dev/null | awk 'NR==1 {print $NF}')" "$tmp/ompi.out"
else
    echo "Open MPI: not installed (apt-get install openmpi-bin libopenmpi-dev)"
fi

# MPICH 4 (Hydra over ssh; Debian's is ch4 over UCX). UCX would use shared
# memory between namespaces (one kernel), so it is held to tcp.
if ! want mpich; then :
elif command -v mpicc.mpich >/dev/null; then
    mpicc.mpich -O2 -w -o "$tmp/pp.mpich" bench/tcp/pp.c
    inA mpiexec.hydra -launcher ssh -launcher-exec "$tmp/ssh" -hosts "$ipA,$ipB" -n 2 -ppn 1 \
        -iface gx0 -genv UCX_TLS tcp,self -genv UCX_NET_DEVICES gx0 \
        "$tmp/pp.mpich" "$iters" "$trials" >"$tmp/mpich.out" </dev/null
    report "MPICH $(mpichversion 2>/dev/null | awk '/Version:/ {print $NF}')" "$tmp/mpich.out"
else
    echo "MPICH: not installed (apt-get install mpich libmpich-dev)"
fi
