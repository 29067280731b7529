//! `gmpi-capi-overhead`: what the C ABI adds to small-message latency,
//! measured as a paired comparison inside one job.
//!
//! Ranks 0 and 1 run 8 B ping-pongs in alternating blocks: one block calls
//! `PMPI_Send`/`PMPI_Recv` (the very entry points `libmpi.so.12` exports,
//! called through function pointers as a C program calls them through the
//! PLT), the next calls the Rust API's `Communicator::send`/`recv` on the
//! same `MPI_COMM_WORLD`, and so on, the order flipping every trial. Because
//! both sides of each pair run in the same processes, on the same cores, a
//! few microseconds apart, the machine's slow drifts (frequency, placement of
//! the virtual CPUs, neighbours) cancel in the per-pair difference, which a
//! comparison of two separate jobs cannot do on a noisy machine.
//!
//! Usage: `gmpirun -np 2 gmpi-capi-overhead [TRIALS] [ROUND_TRIPS]`
//! (default 400 trials of 2000 round trips per block). Rank 0 prints the
//! one-way latency of each side (min, 10th percentile, median over blocks)
//! and the per-pair difference C − Rust: its median with a distribution-free
//! 95% confidence interval, and its quartiles.

use std::ffi::{c_char, c_int, c_void};
use std::hint::black_box;
use std::time::Instant;

use mpi::abi::{MPI_Status, MPI_BYTE, MPI_COMM_WORLD, MPI_STATUS_IGNORE};

type SendFn = unsafe extern "C" fn(*const c_void, c_int, c_int, c_int, c_int, c_int) -> c_int;
type RecvFn =
    unsafe extern "C" fn(*mut c_void, c_int, c_int, c_int, c_int, c_int, *mut MPI_Status) -> c_int;

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .map(|a| {
            a.parse()
                .unwrap_or_else(|_| panic!("argument {i} must be a count, got {a:?}"))
        })
        .unwrap_or(default)
}

/// `q`-quantile of sorted `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let trials = arg(1, 400).max(2);
    let iters = arg(2, 2000).max(1);

    // The C entry points, called through pointers the optimizer cannot see
    // through, as a C caller's PLT call.
    let init: unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char) -> c_int =
        black_box(mpi::entry_points::PMPI_Init);
    let finalize: extern "C" fn() -> c_int = black_box(mpi::entry_points::PMPI_Finalize);
    let c_send: SendFn = black_box(mpi::entry_points::PMPI_Send as SendFn);
    let c_recv: RecvFn = black_box(mpi::entry_points::PMPI_Recv as RecvFn);
    let mut rank: c_int = -1;
    let mut size: c_int = 0;
    // SAFETY: MPI_Init accepts NULL for argc and argv.
    let rc = unsafe { init(std::ptr::null_mut(), std::ptr::null_mut()) };
    assert_eq!(rc, 0);
    // SAFETY: `rank` and `size` are writable ints.
    unsafe {
        assert_eq!(
            mpi::entry_points::PMPI_Comm_rank(MPI_COMM_WORLD, &mut rank),
            0
        );
        assert_eq!(
            mpi::entry_points::PMPI_Comm_size(MPI_COMM_WORLD, &mut size),
            0
        );
    }
    assert!(size >= 2, "gmpi-capi-overhead needs at least 2 ranks");
    let world = mpi::resolve::fast_comm(MPI_COMM_WORLD).expect("MPI_COMM_WORLD after MPI_Init");
    let peer = 1 - rank;
    let status_ignore = MPI_STATUS_IGNORE as *mut MPI_Status;

    let mut buf = [0u8; 8];
    // One block of `n` round trips, through the C ABI or the Rust API.
    let mut block = |c: bool, n: usize| -> f64 {
        let t0 = Instant::now();
        for _ in 0..n {
            let p = buf.as_mut_ptr() as *mut c_void;
            match (c, rank) {
                // SAFETY: `p` points to the 8 bytes of `buf`, lent to each
                // blocking call; MPI_STATUS_IGNORE is a status it accepts.
                (true, 0) => unsafe {
                    assert_eq!(c_send(p, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD), 0);
                    assert_eq!(
                        c_recv(p, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD, status_ignore),
                        0
                    );
                },
                // SAFETY: as above.
                (true, 1) => unsafe {
                    assert_eq!(
                        c_recv(p, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD, status_ignore),
                        0
                    );
                    assert_eq!(c_send(p, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD), 0);
                },
                (false, 0) => {
                    world.send(&buf[..], peer, 0).expect("send");
                    world.recv(&mut buf[..], peer, 0).expect("recv");
                }
                (false, 1) => {
                    world.recv(&mut buf[..], peer, 0).expect("recv");
                    world.send(&buf[..], peer, 0).expect("send");
                }
                _ => {}
            }
        }
        t0.elapsed().as_secs_f64() * 1e6 / (2.0 * n as f64)
    };

    if rank <= 1 {
        block(true, iters);
        block(false, iters);
    }
    world.barrier().expect("barrier");
    let (mut cs, mut rs, mut diffs) = (Vec::new(), Vec::new(), Vec::new());
    if rank <= 1 {
        for t in 0..trials {
            let (c, r) = if t % 2 == 0 {
                let c = block(true, iters);
                (c, block(false, iters))
            } else {
                let r = block(false, iters);
                (block(true, iters), r)
            };
            cs.push(c);
            rs.push(r);
            diffs.push(c - r);
        }
    }
    if rank == 0 {
        for v in [&mut cs, &mut rs, &mut diffs] {
            v.sort_by(f64::total_cmp);
        }
        // A distribution-free 95% confidence interval for the median
        // difference: the order statistics n/2 ± 1.96·√n/2 (outliers from
        // a context switch in one block do not move it, unlike a mean).
        let n = diffs.len() as f64;
        let k = (1.96 * n.sqrt() / 2.0).ceil();
        let lo = diffs[((n / 2.0 - k).max(0.0)) as usize];
        let hi = diffs[((n / 2.0 + k) as usize).min(diffs.len() - 1)];
        println!("# 8 B one-way latency, {trials} pairs of blocks of {iters} round trips (µs)");
        println!("# {:<10} {:>8} {:>8} {:>8}", "path", "min", "p10", "median");
        for (name, v) in [("C ABI", &cs), ("Rust API", &rs)] {
            println!(
                "  {:<10} {:>8.3} {:>8.3} {:>8.3}",
                name,
                v[0],
                quantile(v, 0.1),
                quantile(v, 0.5)
            );
        }
        println!(
            "C - Rust per pair: median {:+.4} µs (95% CI {:+.4} .. {:+.4}), quartiles {:+.4} .. {:+.4}",
            quantile(&diffs, 0.5),
            lo,
            hi,
            quantile(&diffs, 0.25),
            quantile(&diffs, 0.75)
        );
    }
    world.barrier().expect("barrier");
    assert_eq!(finalize(), 0);
}
