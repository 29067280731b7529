//! `gmpirun -np N gmpi-cuda-mixed [repeat ITER]`: collectives whose ranks
//! pass different kinds of memory, as MPI allows: device buffers (`cudarc`
//! slices) on some ranks, host buffers on the others.
//!
//! Without arguments: every collective (barrier, bcast, reduce and allreduce
//! with their in-place forms, gather(v), scatter(v), allgather(v),
//! alltoall(v), reduce_scatter(_block), scan, exscan) at sizes that take
//! the tiny allreduce, the shared-memory area and the schedules, every root,
//! in two layouts: device memory on the even ranks and host memory on the
//! odd ones, then the reverse. Every result is checked against a serial
//! reference. A rank that chose a different road than its peers would hang
//! (the job's `--timeout` ends it) or read garbage.
//!
//! `repeat ITER`: ITER allreduces and bcasts of device buffers on every
//! rank, large enough to take the schedules (with device temporaries),
//! results checked; the fake driver's exit report ("fake-cuda: alloc A")
//! then tells how many device allocations the job made.
//!
//! Prints "gmpi-cuda-mixed: OK on rank R of N" on success; exits 1 naming
//! the case otherwise. Run under `tests/tests/cuda_fake.rs` with
//! `tests/c/fake_libcuda.c` as `libcuda.so`, or on a GPU machine.

use std::sync::Arc;

use gmpi::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DriverError};
use gmpi::{Communicator, Op};

type R = Result<(), String>;

fn e(x: gmpi::Error) -> String {
    x.to_string()
}

fn d(x: DriverError) -> String {
    format!("cuda: {x:?}")
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

/// A buffer of this rank: host memory or a device slice.
enum Buf {
    H(Vec<u64>),
    D(CudaSlice<u64>),
}

/// `$body` with `$x` bound to the buffer `$b` (a `&Buf`) as a `&impl Buffer`.
macro_rules! buf {
    ($b:expr, $x:ident => $body:expr) => {
        match $b {
            Buf::H($x) => $body,
            Buf::D($x) => $body,
        }
    };
}

/// `$body` with `$x` bound to the buffer `$b` (a `&mut Buf`) as a
/// `&mut impl BufferMut`.
macro_rules! buf_mut {
    ($b:expr, $x:ident => $body:expr) => {
        match $b {
            Buf::H($x) => $body,
            Buf::D($x) => $body,
        }
    };
}

/// One rank's memory: device or host, and the stream device slices use.
struct Mem {
    dev: bool,
    s: Arc<CudaStream>,
}

impl Mem {
    fn of(&self, data: &[u64]) -> Result<Buf, String> {
        Ok(if self.dev {
            Buf::D(self.s.clone_htod(data).map_err(d)?)
        } else {
            Buf::H(data.to_vec())
        })
    }

    /// A buffer of `len` elements holding a sentinel.
    fn zeros(&self, len: usize) -> Result<Buf, String> {
        self.of(&vec![SENT; len])
    }

    fn get(&self, b: &Buf) -> Result<Vec<u64>, String> {
        match b {
            Buf::H(v) => Ok(v.clone()),
            Buf::D(x) => self.s.clone_dtoh(x).map_err(d),
        }
    }
}

const SENT: u64 = 0x5EA7_5EA7_5EA7_5EA7;

/// The value rank `q` contributes at index `i` (sums of a few stay exact).
fn val(q: i32, i: usize) -> u64 {
    (q as u64 + 1) * 1_000_003 + i as u64 * 7
}

/// Element `i` of the block rank `q` sends to rank `p` (alltoall).
fn enc(q: i32, p: i32, i: usize) -> u64 {
    ((q as u64) << 40) | ((p as u64) << 20) | i as u64
}

fn same(what: &str, got: &[u64], want: &[u64]) -> R {
    ensure!(
        got.len() == want.len(),
        "{what}: {} elements, expected {}",
        got.len(),
        want.len()
    );
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        return Err(format!(
            "{what}: element {i} is {:#x}, expected {:#x}",
            got[i], want[i]
        ));
    }
    Ok(())
}

/// Per-rank counts `m + q` (so blocks differ) and displacements with a gap
/// of one element between blocks; the total length.
fn vlayout(n: i32, m: usize) -> (Vec<i32>, Vec<i32>, usize) {
    let counts: Vec<i32> = (0..n).map(|q| (m + q as usize) as i32).collect();
    let mut displs = Vec::new();
    let mut at = 0;
    for c in &counts {
        displs.push(at);
        at += c + 1;
    }
    (counts, displs, at as usize)
}

/// Every collective at `m` elements per rank; `mem` is this rank's memory.
fn all(w: &Communicator, mem: &Mem, m: usize) -> R {
    let (r, n) = (w.rank(), w.size());
    let nu = n as usize;
    let mine: Vec<u64> = (0..m).map(|i| val(r, i)).collect();
    let sum: Vec<u64> = (0..m).map(|i| (0..n).map(|q| val(q, i)).sum()).collect();

    w.barrier().map_err(e)?;

    for root in 0..n {
        let want: Vec<u64> = (0..m).map(|i| val(root, i)).collect();
        let mut b = if r == root {
            mem.of(&want)?
        } else {
            mem.zeros(m)?
        };
        buf_mut!(&mut b, x => w.bcast(x, root)).map_err(e)?;
        same(&format!("bcast from {root}"), &mem.get(&b)?, &want)?;

        let sb = mem.of(&mine)?;
        let mut rb = mem.zeros(m)?;
        buf!(&sb, s => buf_mut!(&mut rb, o => w.reduce(s, o, Op::Sum, root))).map_err(e)?;
        if r == root {
            same(&format!("reduce to {root}"), &mem.get(&rb)?, &sum)?;
        }
        let mut b = mem.of(&mine)?;
        buf_mut!(&mut b, x => w.reduce_in_place(x, Op::Sum, root)).map_err(e)?;
        if r == root {
            same(&format!("reduce in place to {root}"), &mem.get(&b)?, &sum)?;
        }

        // gather and scatter: block q is rank q's.
        let all_blocks: Vec<u64> = (0..n)
            .flat_map(|q| (0..m).map(move |i| val(q, i)))
            .collect();
        let mut rb = mem.zeros(m * nu)?;
        buf!(&sb, s => buf_mut!(&mut rb, o => w.gather(s, o, root))).map_err(e)?;
        if r == root {
            same(&format!("gather to {root}"), &mem.get(&rb)?, &all_blocks)?;
        }
        let src = if r == root {
            mem.of(&all_blocks)?
        } else {
            mem.zeros(m * nu)?
        };
        let mut rb = mem.zeros(m)?;
        buf!(&src, s => buf_mut!(&mut rb, o => w.scatter(s, o, root))).map_err(e)?;
        same(&format!("scatter from {root}"), &mem.get(&rb)?, &mine)?;

        // The v forms: rank q's block has m + q elements, with gaps.
        let (counts, displs, total) = vlayout(n, m);
        let mut vwant = vec![SENT; total];
        for q in 0..n {
            for i in 0..counts[q as usize] as usize {
                vwant[displs[q as usize] as usize + i] = val(q, i);
            }
        }
        let vmine: Vec<u64> = (0..counts[r as usize] as usize)
            .map(|i| val(r, i))
            .collect();
        let vsb = mem.of(&vmine)?;
        let mut rb = mem.zeros(total)?;
        buf!(&vsb, s => buf_mut!(&mut rb, o => w.gatherv(s, o, &counts, &displs, root)))
            .map_err(e)?;
        if r == root {
            same(&format!("gatherv to {root}"), &mem.get(&rb)?, &vwant)?;
        }
        let src = if r == root {
            mem.of(&vwant)?
        } else {
            mem.zeros(total)?
        };
        let mut rb = mem.zeros(vmine.len())?;
        buf!(&src, s => buf_mut!(&mut rb, o => w.scatterv(s, &counts, &displs, o, root)))
            .map_err(e)?;
        same(&format!("scatterv from {root}"), &mem.get(&rb)?, &vmine)?;
    }

    let sb = mem.of(&mine)?;
    let mut rb = mem.zeros(m)?;
    buf!(&sb, s => buf_mut!(&mut rb, o => w.allreduce(s, o, Op::Sum))).map_err(e)?;
    same("allreduce", &mem.get(&rb)?, &sum)?;
    let mut b = mem.of(&mine)?;
    buf_mut!(&mut b, x => w.allreduce_in_place(x, Op::Sum)).map_err(e)?;
    same("allreduce in place", &mem.get(&b)?, &sum)?;

    let all_blocks: Vec<u64> = (0..n)
        .flat_map(|q| (0..m).map(move |i| val(q, i)))
        .collect();
    let mut rb = mem.zeros(m * nu)?;
    buf!(&sb, s => buf_mut!(&mut rb, o => w.allgather(s, o))).map_err(e)?;
    same("allgather", &mem.get(&rb)?, &all_blocks)?;

    let (counts, displs, total) = vlayout(n, m);
    let mut vwant = vec![SENT; total];
    for q in 0..n {
        for i in 0..counts[q as usize] as usize {
            vwant[displs[q as usize] as usize + i] = val(q, i);
        }
    }
    let vmine: Vec<u64> = (0..counts[r as usize] as usize)
        .map(|i| val(r, i))
        .collect();
    let vsb = mem.of(&vmine)?;
    let mut rb = mem.zeros(total)?;
    buf!(&vsb, s => buf_mut!(&mut rb, o => w.allgatherv(s, o, &counts, &displs))).map_err(e)?;
    same("allgatherv", &mem.get(&rb)?, &vwant)?;

    // alltoall: block p of rank q's send buffer goes to rank p.
    let out: Vec<u64> = (0..n)
        .flat_map(|p| (0..m).map(move |i| enc(r, p, i)))
        .collect();
    let want: Vec<u64> = (0..n)
        .flat_map(|q| (0..m).map(move |i| enc(q, r, i)))
        .collect();
    let asb = mem.of(&out)?;
    let mut rb = mem.zeros(m * nu)?;
    buf!(&asb, s => buf_mut!(&mut rb, o => w.alltoall(s, o))).map_err(e)?;
    same("alltoall", &mem.get(&rb)?, &want)?;

    // alltoallv: rank q sends m + p elements to rank p, packed in order.
    let scounts: Vec<i32> = (0..n).map(|p| (m + p as usize) as i32).collect();
    let sdispls: Vec<i32> = scounts
        .iter()
        .scan(0, |a, c| {
            let at = *a;
            *a += c;
            Some(at)
        })
        .collect();
    let rcounts: Vec<i32> = vec![(m + r as usize) as i32; nu];
    let rdispls: Vec<i32> = (0..n).map(|q| q * rcounts[0]).collect();
    let out: Vec<u64> = (0..n)
        .flat_map(|p| (0..m + p as usize).map(move |i| enc(r, p, i)))
        .collect();
    let want: Vec<u64> = (0..n)
        .flat_map(|q| (0..m + r as usize).map(move |i| enc(q, r, i)))
        .collect();
    let vsb = mem.of(&out)?;
    let mut rb = mem.zeros(want.len())?;
    buf!(&vsb, s => buf_mut!(&mut rb, o => w.alltoallv(s, &scounts, &sdispls, o, &rcounts, &rdispls)))
        .map_err(e)?;
    same("alltoallv", &mem.get(&rb)?, &want)?;

    // reduce_scatter_block: every rank contributes n blocks of m; rank r gets
    // block r summed.
    let big: Vec<u64> = (0..m * nu).map(|i| val(r, i)).collect();
    let bsum = |i: usize| -> u64 { (0..n).map(|q| val(q, i)).sum() };
    let want: Vec<u64> = (0..m).map(|i| bsum(r as usize * m + i)).collect();
    let bsb = mem.of(&big)?;
    let mut rb = mem.zeros(m)?;
    buf!(&bsb, s => buf_mut!(&mut rb, o => w.reduce_scatter_block(s, o, Op::Sum))).map_err(e)?;
    same("reduce_scatter_block", &mem.get(&rb)?, &want)?;

    // reduce_scatter: rank q gets m + q elements.
    let counts: Vec<i32> = (0..n).map(|q| (m + q as usize) as i32).collect();
    let len: usize = counts.iter().map(|&c| c as usize).sum();
    let at: usize = counts[..r as usize].iter().map(|&c| c as usize).sum();
    let input: Vec<u64> = (0..len).map(|i| val(r, i)).collect();
    let want: Vec<u64> = (at..at + counts[r as usize] as usize).map(bsum).collect();
    let isb = mem.of(&input)?;
    let mut rb = mem.zeros(want.len())?;
    buf!(&isb, s => buf_mut!(&mut rb, o => w.reduce_scatter(s, o, &counts, Op::Sum))).map_err(e)?;
    same("reduce_scatter", &mem.get(&rb)?, &want)?;

    // scan and exscan (exscan leaves rank 0's result undefined).
    let prefix =
        |upto: i32| -> Vec<u64> { (0..m).map(|i| (0..upto).map(|q| val(q, i)).sum()).collect() };
    let mut rb = mem.zeros(m)?;
    buf!(&sb, s => buf_mut!(&mut rb, o => w.scan(s, o, Op::Sum))).map_err(e)?;
    same("scan", &mem.get(&rb)?, &prefix(r + 1))?;
    let mut rb = mem.zeros(m)?;
    buf!(&sb, s => buf_mut!(&mut rb, o => w.exscan(s, o, Op::Sum))).map_err(e)?;
    if r > 0 {
        same("exscan", &mem.get(&rb)?, &prefix(r))?;
    }
    w.barrier().map_err(e)
}

/// Element counts per rank: 8 B and 64 B (the tiny allreduce), 4.7 KiB (the
/// shared-memory area), 23 KiB (above `coll_shm_max`: the area in chunks).
const COUNTS: [usize; 4] = [1, 8, 600, 3000];

fn mixed(w: &Communicator, s: &Arc<CudaStream>) -> R {
    let r = w.rank();
    for (layout, dev_rank) in [("device on even ranks", 0), ("device on odd ranks", 1)] {
        let mem = Mem {
            dev: r % 2 == dev_rank,
            s: s.clone(),
        };
        for m in COUNTS {
            all(w, &mem, m).map_err(|x| format!("{layout}, {m} elements per rank: {x}"))?;
        }
    }
    Ok(())
}

/// `iters` allreduces and reduces of device buffers, above `coll_shm_max`
/// (the area in chunks, staged through host memory); the buffers are made
/// once.
fn repeat(w: &Communicator, s: &Arc<CudaStream>, iters: usize) -> R {
    let (r, n) = (w.rank(), w.size());
    let m = 8192;
    let mem = Mem {
        dev: true,
        s: s.clone(),
    };
    let mine: Vec<u64> = (0..m).map(|i| val(r, i)).collect();
    let sum: Vec<u64> = (0..m).map(|i| (0..n).map(|q| val(q, i)).sum()).collect();
    let sb = mem.of(&mine)?;
    let mut rb = mem.zeros(m)?;
    for k in 0..iters {
        buf!(&sb, x => buf_mut!(&mut rb, o => w.allreduce(x, o, Op::Sum))).map_err(e)?;
        same(&format!("allreduce {k}"), &mem.get(&rb)?, &sum)?;
        buf!(&sb, x => buf_mut!(&mut rb, o => w.reduce(x, o, Op::Sum, k as i32 % n))).map_err(e)?;
        if r == k as i32 % n {
            same(&format!("reduce {k}"), &mem.get(&rb)?, &sum)?;
        }
    }
    w.barrier().map_err(e)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let u = match gmpi::init() {
        Ok(u) => u,
        Err(x) => {
            eprintln!("gmpi-cuda-mixed: init: {x}");
            std::process::exit(1);
        }
    };
    let w = u.world();
    let (r, n) = (w.rank(), w.size());
    let res = CudaContext::new(0)
        .map_err(|x| format!("CudaContext::new(0): {x:?}"))
        .and_then(|ctx| {
            let s = ctx.default_stream();
            match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                [] => mixed(&w, &s),
                ["repeat", iters] => {
                    let iters = iters.parse().map_err(|_| format!("bad count {iters:?}"))?;
                    repeat(&w, &s, iters)
                }
                _ => Err(format!(
                    "usage: gmpi-cuda-mixed [repeat ITER], not {args:?}"
                )),
            }
        });
    match res {
        Ok(()) => {
            println!("gmpi-cuda-mixed: OK on rank {r} of {n}");
            drop(u);
        }
        Err(msg) => {
            eprintln!("gmpi-cuda-mixed: FAILED on rank {r} of {n}: {msg}");
            std::process::exit(1);
        }
    }
}
