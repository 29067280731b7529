//! `tcp-raw server ADDR [--poll]` / `tcp-raw client ADDR [--iters N] [--poll]`:
//! the raw-socket limit that gmpi's tcp transport is compared with (between
//! two network namespaces, or over loopback).
//!
//! One TCP connection with `TCP_NODELAY`, blocking; with `--poll` (on both
//! sides) non-blocking, each side retrying a read or write that would block
//! after `sched_yield`, as a polling MPI progress loop does (on a busy
//! machine, blocking waits and polling ones each win at times: the
//! comparison takes the better of the two as the limit). The client drives:
//! - latency: an 8-byte ping-pong, `--iters` round trips (default 20000)
//!   after 1000 to warm up; prints the one-way latency (half the round trip),
//!   median and mean, in µs;
//! - bandwidth: a stream of 4 MiB and of 64 MiB messages from the client
//!   (at least 1 GiB and 8 messages each), acknowledged by one byte at the
//!   end; prints GB/s (10⁹ B/s). Both sides cycle through as many distinct
//!   buffers as `bench/tcp/pp.c`'s window uses (8 at 4 MiB, 2 at 64 MiB),
//!   so that the limit moves the same memory as the MPI programs.
//!
//! The server serves one client session and exits. Commands on the wire:
//! `L` + u64 iterations, `S` + u64 size + u64 count, `Q`.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

fn die(msg: &str) -> ! {
    eprintln!("tcp-raw: {msg}");
    std::process::exit(2)
}

/// Retry what would block after yielding the CPU (`--poll`: the socket is
/// non-blocking; blocking sockets never see `WouldBlock`).
fn again<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

fn read_exact(s: &mut TcpStream, mut b: &mut [u8]) -> io::Result<()> {
    while !b.is_empty() {
        match again(|| s.read(b))? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => b = &mut b[n..],
        }
    }
    Ok(())
}

fn write_all(s: &mut TcpStream, mut b: &[u8]) -> io::Result<()> {
    while !b.is_empty() {
        let n = again(|| s.write(b))?;
        b = &b[n..];
    }
    Ok(())
}

fn read_u64(s: &mut TcpStream) -> u64 {
    let mut b = [0u8; 8];
    read_exact(s, &mut b).unwrap_or_else(|e| die(&format!("read: {e}")));
    u64::from_le_bytes(b)
}

/// Distinct buffers a stream of `size`-byte messages cycles through on each
/// side: those of `bench/tcp/pp.c` (a window of 8 at 4 MiB, 2 at 64 MiB), so
/// that the limit moves the same memory as the MPI programs do.
fn buffers(size: usize) -> usize {
    if size >= 64 << 20 {
        2
    } else {
        8
    }
}

fn serve(addr: &str, poll: bool) {
    let l = TcpListener::bind(addr).unwrap_or_else(|e| die(&format!("bind {addr}: {e}")));
    println!(
        "tcp-raw: listening on {}",
        l.local_addr().expect("bound address")
    );
    let (mut s, from) = l.accept().unwrap_or_else(|e| die(&format!("accept: {e}")));
    s.set_nodelay(true).expect("TCP_NODELAY");
    s.set_nonblocking(poll).expect("O_NONBLOCK");
    eprintln!("tcp-raw: client {from}");
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let mut cmd = [0u8; 1];
        if read_exact(&mut s, &mut cmd).is_err() {
            return;
        }
        match cmd[0] {
            b'L' => {
                let n = read_u64(&mut s);
                let mut m = [0u8; 8];
                for _ in 0..n {
                    read_exact(&mut s, &mut m).unwrap_or_else(|e| die(&format!("ping: {e}")));
                    write_all(&mut s, &m).unwrap_or_else(|e| die(&format!("pong: {e}")));
                }
            }
            b'S' => {
                let (size, count) = (read_u64(&mut s) as usize, read_u64(&mut s));
                // Message i lands in buffer i % buffers(size), as the MPI
                // program's window of receives does.
                let nb = buffers(size);
                if buf.len() < nb * size {
                    buf.resize(nb * size, 0);
                }
                for i in 0..count as usize {
                    let at = (i % nb) * size;
                    read_exact(&mut s, &mut buf[at..at + size])
                        .unwrap_or_else(|e| die(&format!("stream: {e}")));
                }
                write_all(&mut s, b"k").unwrap_or_else(|e| die(&format!("ack: {e}")));
            }
            b'Q' => return,
            c => die(&format!("unknown command {c}")),
        }
    }
}

fn client(addr: &str, iters: u64, poll: bool) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| die(&format!("connect {addr}: {e}")));
    s.set_nodelay(true).expect("TCP_NODELAY");
    s.set_nonblocking(poll).expect("O_NONBLOCK");
    // Latency.
    let warm = 1000u64;
    let mut cmd = vec![b'L'];
    cmd.extend_from_slice(&(warm + iters).to_le_bytes());
    write_all(&mut s, &cmd).expect("command");
    let mut m = [7u8; 8];
    let mut rtts = Vec::with_capacity(iters as usize);
    for i in 0..warm + iters {
        let t = Instant::now();
        write_all(&mut s, &m).expect("ping");
        read_exact(&mut s, &mut m).expect("pong");
        if i >= warm {
            rtts.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    rtts.sort_by(f64::total_cmp);
    let mean = rtts.iter().sum::<f64>() / rtts.len() as f64;
    println!(
        "tcp-raw: latency 8 B: {:.2} us one-way (median of {iters} round trips; mean {mean:.2} us)",
        rtts[rtts.len() / 2]
    );
    // Bandwidth.
    for size in [4usize << 20, 64 << 20] {
        let count = ((1u64 << 30) / size as u64).max(8);
        let nb = buffers(size);
        let data = vec![0x5au8; nb * size];
        let mut cmd = vec![b'S'];
        cmd.extend_from_slice(&(size as u64).to_le_bytes());
        cmd.extend_from_slice(&count.to_le_bytes());
        write_all(&mut s, &cmd).expect("command");
        let t = Instant::now();
        for i in 0..count as usize {
            let at = (i % nb) * size;
            write_all(&mut s, &data[at..at + size]).expect("stream");
        }
        let mut ack = [0u8; 1];
        read_exact(&mut s, &mut ack).expect("ack");
        let secs = t.elapsed().as_secs_f64();
        println!(
            "tcp-raw: stream {} MiB x {count}: {:.2} GB/s",
            size >> 20,
            (size as f64 * count as f64) / secs / 1e9
        );
    }
    let _ = write_all(&mut s, b"Q");
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: tcp-raw server ADDR [--poll] | tcp-raw client ADDR [--iters N] [--poll]";
    let poll = args.iter().any(|a| a == "--poll");
    args.retain(|a| a != "--poll");
    let (Some(mode), Some(addr)) = (args.first(), args.get(1)) else {
        die(usage)
    };
    let iters = match args.get(2).map(String::as_str) {
        Some("--iters") => args
            .get(3)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| die(usage)),
        Some(_) => die(usage),
        None => 20_000,
    };
    match mode.as_str() {
        "server" => serve(addr, poll),
        "client" => client(addr, iters, poll),
        _ => die(usage),
    }
}
