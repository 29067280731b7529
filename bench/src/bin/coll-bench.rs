//! Collective latency benchmark, OSU-style: for each operation and size, the
//! average time per call over `--iters` calls after a warm-up, reported as
//! the maximum over ranks of each rank's average (what the slowest rank saw).
//!
//! ```text
//! gmpirun -np 2 ./target/release/gmpi-coll-bench [--ops allreduce,bcast,barrier]
//!         [--sizes 8,1K,64K,1M] [--iters N] [--warmup N]
//! ```
//! Sizes are in bytes (of `f64` data: rounded down to whole elements, at
//! least one). Iteration counts shrink for large sizes so each point takes
//! about the same time.

use std::process::ExitCode;

use gmpi::{Communicator, Op};

fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (n, m) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    n.parse::<usize>().ok().map(|v| v * m)
}

struct Args {
    ops: Vec<String>,
    sizes: Vec<usize>,
    iters: usize,
    warmup: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        ops: ["barrier", "allreduce", "bcast"].map(String::from).to_vec(),
        sizes: vec![8, 1 << 10, 64 << 10, 1 << 20],
        iters: 10_000,
        warmup: 200,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut val = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--ops" => a.ops = val()?.split(',').map(String::from).collect(),
            "--sizes" => {
                a.sizes = val()?
                    .split(',')
                    .map(|s| parse_size(s).ok_or(format!("bad size {s:?}")))
                    .collect::<Result<_, _>>()?
            }
            "--iters" => a.iters = val()?.parse().map_err(|_| "bad --iters")?,
            "--warmup" => a.warmup = val()?.parse().map_err(|_| "bad --warmup")?,
            "-h" | "--help" => {
                return Err("usage: gmpi-coll-bench [--ops barrier,allreduce,bcast,reduce,allgather,alltoall] [--sizes 8,1K,64K,1M] [--iters N] [--warmup N]".into())
            }
            _ => return Err(format!("unknown argument {k:?}")),
        }
    }
    Ok(a)
}

fn time(
    w: &Communicator,
    iters: usize,
    warmup: usize,
    mut f: impl FnMut() -> gmpi::Result<()>,
) -> gmpi::Result<(f64, f64)> {
    for _ in 0..warmup {
        f()?;
    }
    w.barrier()?;
    let t0 = gmpi::wtime();
    for _ in 0..iters {
        f()?;
    }
    let us = (gmpi::wtime() - t0) * 1e6 / iters as f64;
    let mut max = [0.0f64];
    let mut min = [0.0f64];
    w.allreduce(&[us][..], &mut max[..], Op::Max)?;
    w.allreduce(&[us][..], &mut min[..], Op::Min)?;
    Ok((max[0], min[0]))
}

fn run(w: &Communicator, a: &Args) -> gmpi::Result<()> {
    let (me, n) = (w.rank(), w.size());
    if me == 0 {
        println!("# gmpi collective latency, {n} ranks (max / min over ranks of the per-rank average, µs)");
        println!(
            "{:<12} {:>10} {:>10} {:>12} {:>12}",
            "op", "bytes", "iters", "max µs", "min µs"
        );
    }
    for op in &a.ops {
        let sizes: Vec<usize> = if op == "barrier" {
            vec![0]
        } else {
            a.sizes.clone()
        };
        for &bytes in &sizes {
            let elems = (bytes / 8).max(1);
            let iters = (a.iters * 4096 / bytes.max(4096)).clamp(a.iters.min(20), a.iters);
            let warmup = a.warmup.min(iters);
            let send = vec![1.0f64 + me as f64; elems];
            let mut recv = vec![
                0.0f64;
                elems
                    * if op == "allgather" || op == "alltoall" {
                        n as usize
                    } else {
                        1
                    }
            ];
            let big: Vec<f64> = vec![1.0; elems * n as usize];
            let (max, min) = match op.as_str() {
                "barrier" => time(w, iters, warmup, || w.barrier())?,
                "allreduce" => time(w, iters, warmup, || {
                    w.allreduce(&send[..], &mut recv[..], Op::Sum)
                })?,
                "bcast" => time(w, iters, warmup, || w.bcast(&mut recv[..], 0))?,
                "reduce" => time(w, iters, warmup, || {
                    w.reduce(&send[..], &mut recv[..], Op::Sum, 0)
                })?,
                "allgather" => time(w, iters, warmup, || w.allgather(&send[..], &mut recv[..]))?,
                "alltoall" => time(w, iters, warmup, || w.alltoall(&big[..], &mut recv[..]))?,
                other => {
                    return Err(gmpi::Error::new(
                        gmpi::ErrorClass::Arg,
                        "gmpi-coll-bench",
                        me,
                        format!("unknown op {other:?}"),
                    ))
                }
            };
            if me == 0 {
                println!(
                    "{op:<12} {:>10} {iters:>10} {max:>12.3} {min:>12.3}",
                    if op == "barrier" { 0 } else { elems * 8 }
                );
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let u = match gmpi::init() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let w = u.world();
    if let Err(e) = run(&w, &a) {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
