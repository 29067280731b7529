//! `gmpirun -np 2 pingpong [--min BYTES] [--max BYTES] [--iters N] [--check]`
//!
//! Prints an OSU-style table between ranks 0 and 1:
//! - one-way latency (µs): half the round trip of a blocking ping-pong;
//! - bandwidth (MB/s, 10⁶ B/s): a window of 64 non-blocking sends per
//!   iteration from one buffer, acknowledged by a zero-byte reply (as
//!   `osu_bw` does). `osu_bw` also receives the whole window into one buffer;
//!   Rust forbids aliasing receive buffers, so the receiver cycles through
//!   distinct buffers of at most 4 MiB in all (posting the window in batches
//!   when larger messages need fewer buffers), which keeps the working set
//!   comparable;
//! - memcpy (MB/s): one core copying the same size in this process, the
//!   physical limit a shared-memory transport works against.
//!
//! `--check` fills every message with a pattern and verifies every byte;
//! `--lat-only` skips the bandwidth test (for profiling).
//!
//! `--rma` measures one-sided communication instead (the shape of OSU's
//! `osu_put_latency`, `osu_get_latency` and `osu_put_bw` with passive
//! target): rank 0 holds a shared lock on rank 1's window
//! (`MPI_Win_allocate`) for the whole run, and times `MPI_Put` and
//! `MPI_Get` of each size (each has completed when it returns: the
//! latency), and 64 puts in a row (the bandwidth); rank 1 only waits in a
//! barrier meanwhile.

use std::time::Instant;

struct Opts {
    min: usize,
    max: usize,
    iters: usize,
    check: bool,
    lat_only: bool,
    rma: bool,
}

fn parse_size(s: &str) -> usize {
    let s = s.trim();
    let (n, m) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    n.parse::<usize>().unwrap_or_else(|_| {
        eprintln!("pingpong: not a size: {s}");
        std::process::exit(2)
    }) * m
}

fn opts() -> Opts {
    let mut o = Opts {
        min: 0,
        max: 4 << 20,
        iters: 1000,
        check: false,
        lat_only: false,
        rma: false,
    };
    let mut a = std::env::args().skip(1);
    while let Some(x) = a.next() {
        match x.as_str() {
            "--min" => o.min = parse_size(&a.next().unwrap_or_default()),
            "--max" => o.max = parse_size(&a.next().unwrap_or_default()),
            "--iters" => o.iters = a.next().and_then(|v| v.parse().ok()).unwrap_or(1000),
            "--check" => o.check = true,
            "--lat-only" => o.lat_only = true,
            "--rma" => o.rma = true,
            "-h" | "--help" => {
                println!("usage: gmpirun -np 2 pingpong [--min BYTES] [--max BYTES] [--iters N] [--check] [--lat-only] [--rma]");
                std::process::exit(0);
            }
            other => {
                eprintln!("pingpong: unknown option {other}");
                std::process::exit(2);
            }
        }
    }
    o
}

fn sizes(min: usize, max: usize) -> Vec<usize> {
    let mut v = Vec::new();
    if min == 0 {
        v.push(0);
    }
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        s *= 2;
    }
    v
}

fn fill(buf: &mut [u8], size: usize, iter: usize) {
    for (i, b) in buf[..size].iter_mut().enumerate() {
        *b = (i.wrapping_mul(7) ^ iter) as u8;
    }
}

fn verify(buf: &[u8], size: usize, iter: usize) {
    for (i, b) in buf[..size].iter().enumerate() {
        let want = (i.wrapping_mul(7) ^ iter) as u8;
        if *b != want {
            eprintln!("pingpong: byte {i} of a {size}-byte message is {b}, expected {want}");
            std::process::exit(1);
        }
    }
}

fn memcpy_mbps(size: usize) -> f64 {
    if size == 0 {
        return 0.0;
    }
    let src = vec![1u8; size];
    let mut dst = vec![0u8; size];
    let reps = (256 << 20) / size.max(1024);
    let reps = reps.clamp(4, 100_000);
    dst.copy_from_slice(&src);
    let t = Instant::now();
    for _ in 0..reps {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    (size * reps) as f64 / t.elapsed().as_secs_f64() / 1e6
}

fn main() -> Result<(), gmpi::Error> {
    let o = opts();
    let universe = gmpi::init()?;
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    if size < 2 {
        eprintln!("pingpong needs 2 ranks: gmpirun -np 2 pingpong");
        std::process::exit(2);
    }
    if o.rma {
        return rma(&o, &world);
    }
    let window = 64;
    let mut sbuf = vec![0u8; o.max.max(1)];
    let mut rbuf = vec![0u8; o.max.max(1)];
    let window_bytes = 4 << 20;
    // Buffer i is used by sizes s with 4 MiB / s > i, so it needs at most
    // min(max, 4 MiB / (i + 1)) bytes: about 19 MiB for all 64.
    let mut wbufs: Vec<Vec<u8>> = (0..window)
        // The first buffer holds the largest message (sizes above the window
        // bytes are received one at a time into it).
        .map(|i| {
            let cap = if i == 0 {
                o.max
            } else {
                window_bytes / (i + 1)
            };
            vec![0u8; o.max.clamp(1, cap.max(1))]
        })
        .collect();
    if rank == 0 {
        println!(
            "# gmpi pingpong: {} ranks, ranks 0 and 1 measured{}",
            size,
            if o.check { ", data checked" } else { "" }
        );
        println!(
            "# {:>10} {:>14} {:>16} {:>16}",
            "size (B)", "latency (us)", "bandwidth (MB/s)", "memcpy (MB/s)"
        );
    }
    for s in sizes(o.min, o.max) {
        let iters = if s >= 1 << 20 {
            (o.iters / 10).max(10)
        } else {
            o.iters
        };
        let warm = (iters / 10).max(2);
        // Latency.
        let mut t0 = Instant::now();
        for i in 0..iters + warm {
            if i == warm {
                world.barrier()?;
                t0 = Instant::now();
            }
            if rank == 0 {
                if o.check {
                    fill(&mut sbuf, s, i);
                }
                world.send(&sbuf[..s], 1, 1)?;
                world.recv(&mut rbuf[..s], 1, 1)?;
                if o.check {
                    verify(&rbuf, s, i + 1);
                }
            } else if rank == 1 {
                world.recv(&mut rbuf[..s], 0, 1)?;
                if o.check {
                    verify(&rbuf, s, i);
                    fill(&mut sbuf, s, i + 1);
                }
                world.send(&sbuf[..s], 0, 1)?;
            }
        }
        let lat = t0.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64);
        if o.lat_only {
            if rank == 0 {
                println!("{:>12} {:>14.3}", s, lat);
            }
            continue;
        }
        // Bandwidth.
        let bw_iters = (iters / 10).max(5);
        let mut t1 = Instant::now();
        let mut ack = [0u8; 0];
        for i in 0..bw_iters + 2 {
            if i == 2 {
                world.barrier()?;
                t1 = Instant::now();
            }
            if rank == 0 {
                if o.check {
                    fill(&mut sbuf, s, i);
                }
                let reqs: Vec<_> = (0..window)
                    .map(|_| world.isend(&sbuf[..s], 1, 2))
                    .collect::<Result<_, _>>()?;
                gmpi::wait_all(reqs)?;
                world.recv(&mut ack[..], 1, 3)?;
            } else if rank == 1 {
                let per = (window_bytes / s.max(1)).clamp(1, window);
                let mut left = window;
                while left > 0 {
                    let n = left.min(per);
                    let reqs: Vec<_> = wbufs[..n]
                        .iter_mut()
                        .map(|b| world.irecv(&mut b[..s], 0, 2))
                        .collect::<Result<_, _>>()?;
                    gmpi::wait_all(reqs)?;
                    if o.check {
                        for b in &wbufs[..n] {
                            verify(b, s, i);
                        }
                    }
                    left -= n;
                }
                world.send(&ack[..], 0, 3)?;
            }
        }
        let secs = t1.elapsed().as_secs_f64();
        let bw = (s * window * bw_iters) as f64 / secs / 1e6;
        if rank == 0 {
            println!(
                "{:>12} {:>14.3} {:>16.1} {:>16.1}",
                s,
                lat,
                bw,
                memcpy_mbps(s)
            );
        }
    }
    world.barrier()?;
    Ok(())
}

/// `--rma`: put and get latency and put bandwidth, rank 0 to rank 1's
/// window under one shared lock (see the module header).
fn rma(o: &Opts, world: &gmpi::Communicator) -> Result<(), gmpi::Error> {
    let rank = world.rank();
    let win = world.win_allocate::<u8>(o.max.max(1))?;
    let mut buf = vec![0u8; o.max.max(1)];
    if rank == 0 {
        println!("# gmpi pingpong --rma: rank 0 puts and gets into rank 1's window (passive target, one shared lock)");
        println!(
            "# {:>10} {:>14} {:>14} {:>16}",
            "size (B)", "put (us)", "get (us)", "put bw (MB/s)"
        );
        let g = win.lock(1, gmpi::LockType::Shared)?;
        for s in sizes(o.min.max(1), o.max) {
            let iters = if s >= 1 << 20 {
                (o.iters / 10).max(10)
            } else {
                o.iters
            };
            let warm = (iters / 10).max(2);
            let mut time = |get: bool, reps: usize| -> Result<f64, gmpi::Error> {
                let mut t0 = Instant::now();
                for i in 0..reps + warm {
                    if i == warm {
                        t0 = Instant::now();
                    }
                    if get {
                        g.get(1, 0, &mut buf[..s])?;
                    } else {
                        if o.check {
                            fill(&mut buf, s, i);
                        }
                        g.put(1, 0, &buf[..s])?;
                        if o.check {
                            let mut back = vec![0u8; s];
                            g.get(1, 0, &mut back)?;
                            verify(&back, s, i);
                        }
                    }
                }
                Ok(t0.elapsed().as_secs_f64() / reps as f64)
            };
            let put = time(false, iters)? * 1e6;
            let get = time(true, iters)? * 1e6;
            let bw = if o.lat_only {
                0.0
            } else {
                let reps = 64 * (iters / 10).max(5);
                s as f64 / time(false, reps)? / 1e6
            };
            println!("{:>12} {:>14.3} {:>14.3} {:>16.1}", s, put, get, bw);
        }
        drop(g);
    }
    world.barrier()?;
    win.free()?;
    Ok(())
}
