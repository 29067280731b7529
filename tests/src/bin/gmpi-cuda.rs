//! `gmpirun -np N gmpi-cuda` (N even): the Rust API on `cudarc` device
//! buffers (`CudaSlice`, `CudaView`, `CudaViewMut`), every result checked
//! against host data. Ranks pair up (`r ^ 1`) for point-to-point: every
//! host/device pair of sender and receiver at 0 B, 1 B, 8 KiB, 64 KiB and
//! 1 MiB, both directions; isend/irecv; a free-and-reallocate loop; a
//! sub-range sent from a `CudaView` into a `CudaViewMut`; a slice on a second
//! stream (cudarc's event tracking). Then collectives on device buffers
//! against a host reference: bcast, allreduce (sum, max; i32, f64), reduce,
//! allgather, alltoall. Prints "gmpi-cuda: OK on rank R of N" on success;
//! exits 1 naming the case otherwise.
//!
//! Run under `tests/tests/cuda_fake.rs` with `tests/c/fake_libcuda.c` as
//! `libcuda.so` (host memory posing as device memory), or on a GPU machine.

use std::sync::Arc;

use gmpi::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DriverError};
use gmpi::{Communicator, Equivalence, Op};
use gmpi_tests::pattern;

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

const SIZES: [usize; 5] = [0, 1, 8 << 10, 64 << 10, 1 << 20];

/// A message's buffer: host memory or a device slice.
enum Buf {
    Host(Vec<u8>),
    Dev(CudaSlice<u8>),
}

impl Buf {
    fn new(dev: bool, s: &Arc<CudaStream>, data: &[u8]) -> Result<Self, String> {
        Ok(if dev {
            Buf::Dev(s.clone_htod(data).map_err(d)?)
        } else {
            Buf::Host(data.to_vec())
        })
    }

    fn bytes(&self, s: &Arc<CudaStream>) -> Result<Vec<u8>, String> {
        match self {
            Buf::Host(v) => Ok(v.clone()),
            Buf::Dev(x) => s.clone_dtoh(x).map_err(d),
        }
    }

    fn send(&self, w: &Communicator, to: i32, tag: i32) -> R {
        match self {
            Buf::Host(v) => w.send(&v[..], to, tag).map_err(e),
            Buf::Dev(x) => w.send(x, to, tag).map_err(e),
        }
    }

    fn recv(&mut self, w: &Communicator, from: i32, tag: i32) -> Result<usize, String> {
        let st = match self {
            Buf::Host(v) => w.recv(&mut v[..], from, tag),
            Buf::Dev(x) => w.recv(x, from, tag),
        };
        Ok(st.map_err(e)?.count::<u8>())
    }
}

fn kind(dev: bool) -> &'static str {
    if dev {
        "D"
    } else {
        "H"
    }
}

/// One message `from` → `to` of `len` bytes, sender memory `sd`, receiver
/// memory `rd`; both ranks of the pair call it.
#[allow(clippy::too_many_arguments)]
fn one(
    w: &Communicator,
    s: &Arc<CudaStream>,
    from: i32,
    to: i32,
    len: usize,
    sd: bool,
    rd: bool,
    tag: i32,
) -> R {
    let r = w.rank();
    let data = pattern(len, from, tag as u64);
    if r == from {
        Buf::new(sd, s, &data)?.send(w, to, tag)?;
    } else if r == to {
        let mut b = Buf::new(rd, s, &vec![0xA5; len])?;
        let n = b.recv(w, from, tag)?;
        ensure!(
            n == len,
            "{}->{} {len} B from {from}: status says {n} B",
            kind(sd),
            kind(rd)
        );
        ensure!(
            b.bytes(s)? == data,
            "{}->{} {len} B from {from}: wrong content",
            kind(sd),
            kind(rd)
        );
    }
    Ok(())
}

fn p2p(w: &Communicator, s: &Arc<CudaStream>) -> R {
    let r = w.rank();
    let (lo, hi) = (r & !1, r | 1);
    let mut tag = 0;
    for len in SIZES {
        for sd in [false, true] {
            for rd in [false, true] {
                tag += 1;
                one(w, s, lo, hi, len, sd, rd, tag)?;
                one(w, s, hi, lo, len, sd, rd, tag)?;
            }
        }
    }
    Ok(())
}

/// isend and irecv on device slices, both directions at once.
fn nonblocking(w: &Communicator, s: &Arc<CudaStream>) -> R {
    let r = w.rank();
    let peer = r ^ 1;
    for (k, len) in SIZES.into_iter().enumerate() {
        let tag = 100 + k as i32;
        let out = s.clone_htod(&pattern(len, r, 7)).map_err(d)?;
        let mut inb = s.alloc_zeros::<u8>(len).map_err(d)?;
        let mut host_in = vec![0u8; len];
        {
            let rq = w.irecv(&mut inb, peer, tag).map_err(e)?;
            let rh = w.irecv(&mut host_in[..], peer, tag + 50).map_err(e)?;
            let sq = w.isend(&out, peer, tag).map_err(e)?;
            let sh = w.isend(&out, peer, tag + 50).map_err(e)?;
            gmpi::wait_all(vec![rq, rh, sq, sh]).map_err(e)?;
        }
        let want = pattern(len, peer, 7);
        ensure!(
            s.clone_dtoh(&inb).map_err(d)? == want,
            "irecv into a CudaSlice of {len} B: wrong content"
        );
        ensure!(
            host_in == want,
            "isend from a CudaSlice of {len} B to host: wrong content"
        );
    }
    Ok(())
}

/// Free and allocate device buffers of the same size between messages (the
/// classification and IPC caches must not reuse a stale answer).
fn realloc(w: &Communicator, s: &Arc<CudaStream>) -> R {
    let r = w.rank();
    let peer = r ^ 1;
    for len in [4 << 10, 64 << 10, 1 << 20] {
        for i in 0..6u64 {
            let tag = 200 + i as i32;
            let salt = 1000 + i + len as u64;
            if r & 1 == 0 {
                let b = s.clone_htod(&pattern(len, r, salt)).map_err(d)?;
                w.send(&b, peer, tag).map_err(e)?;
                drop(b);
            } else {
                let mut b = s.alloc_zeros::<u8>(len).map_err(d)?;
                w.recv(&mut b, peer, tag).map_err(e)?;
                ensure!(
                    s.clone_dtoh(&b).map_err(d)? == pattern(len, peer, salt),
                    "reallocated buffer {i} of {len} B: wrong content"
                );
            }
        }
    }
    Ok(())
}

/// A `CudaView` sub-range sent into a `CudaViewMut` sub-range; the bytes
/// around the target range keep their values.
fn views(w: &Communicator, s: &Arc<CudaStream>) -> R {
    let r = w.rank();
    let peer = r ^ 1;
    let n = 1 << 16;
    let vals: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    if r & 1 == 0 {
        let a = s.clone_htod(&vals).map_err(d)?;
        w.send(&a.slice(1000..41000), peer, 300).map_err(e)?;
        w.send(&a.slice(5..6), peer, 301).map_err(e)?;
    } else {
        let mut b = s.clone_htod(&vec![7u32; n]).map_err(d)?;
        {
            let mut part = b.slice_mut(500..40500);
            let st = w.recv(&mut part, peer, 300).map_err(e)?;
            ensure!(st.count::<u32>() == 40000, "CudaViewMut recv count");
        }
        {
            let mut one = b.slice_mut(n - 1..);
            w.recv(&mut one, peer, 301).map_err(e)?;
        }
        let got = s.clone_dtoh(&b).map_err(d)?;
        ensure!(
            got[..500].iter().all(|&x| x == 7) && got[40500..n - 1].iter().all(|&x| x == 7),
            "CudaViewMut recv wrote outside its range"
        );
        ensure!(
            got[500..40500] == vals[1000..41000],
            "CudaView -> CudaViewMut: wrong content"
        );
        ensure!(got[n - 1] == vals[5], "one-element view: wrong content");
    }
    Ok(())
}

/// A slice allocated on a second stream (cudarc then tracks reads and
/// writes with events): gmpi must wait for the stream's copy.
fn second_stream(w: &Communicator, ctx: &Arc<CudaContext>, s: &Arc<CudaStream>) -> R {
    let r = w.rank();
    let peer = r ^ 1;
    let s2 = ctx.new_stream().map_err(d)?;
    let len = 256 << 10;
    let out = s2.clone_htod(&pattern(len, r, 77)).map_err(d)?;
    let mut inb = s2.alloc_zeros::<u8>(len).map_err(d)?;
    {
        let rq = w.irecv(&mut inb, peer, 400).map_err(e)?;
        let sq = w.isend(&out, peer, 400).map_err(e)?;
        gmpi::wait_all(vec![rq, sq]).map_err(e)?;
    }
    // Read back on the other stream: cudarc orders it after the receive.
    ensure!(
        s.clone_dtoh(&inb).map_err(d)? == pattern(len, peer, 77),
        "second stream: wrong content"
    );
    Ok(())
}

fn dev<T: gmpi::cudarc::driver::DeviceRepr>(
    s: &Arc<CudaStream>,
    v: &[T],
) -> Result<CudaSlice<T>, String> {
    s.clone_htod(v).map_err(d)
}

fn back<T: gmpi::cudarc::driver::DeviceRepr + Default + Clone>(
    s: &Arc<CudaStream>,
    x: &CudaSlice<T>,
) -> Result<Vec<T>, String> {
    s.clone_dtoh(x).map_err(d)
}

fn check<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) -> R {
    ensure!(got.len() == want.len(), "{what}: length {}", got.len());
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        return Err(format!(
            "{what}: element {i} is {:?}, expected {:?}",
            got[i], want[i]
        ));
    }
    Ok(())
}

/// Allreduce and reduce of `count` values `f(rank, i)` with `op` (`Sum` or
/// `Max`), device buffers, against a serial reference.
fn reduce_case<T>(
    w: &Communicator,
    s: &Arc<CudaStream>,
    name: &str,
    count: usize,
    f: impl Fn(i32, usize) -> T,
    op: Op,
    step: impl Fn(T, T) -> T,
) -> R
where
    T: Equivalence + gmpi::cudarc::driver::DeviceRepr + Default + Clone + Copy + PartialEq,
    T: std::fmt::Debug + gmpi::cudarc::driver::ValidAsZeroBits,
{
    let (r, n) = (w.rank(), w.size());
    let mine: Vec<T> = (0..count).map(|i| f(r, i)).collect();
    let want: Vec<T> = (0..count)
        .map(|i| (1..n).fold(f(0, i), |a, q| step(a, f(q, i))))
        .collect();
    let sb = dev(s, &mine)?;
    let mut rb = s.alloc_zeros::<T>(count).map_err(d)?;
    w.allreduce(&sb, &mut rb, op.clone()).map_err(e)?;
    check(&format!("allreduce {name} x{count}"), &back(s, &rb)?, &want)?;
    // Host send, device receive, and the reverse.
    let mut rb2 = s.alloc_zeros::<T>(count).map_err(d)?;
    w.allreduce(&mine[..], &mut rb2, op.clone()).map_err(e)?;
    check(
        &format!("allreduce H->D {name} x{count}"),
        &back(s, &rb2)?,
        &want,
    )?;
    let mut host = vec![T::default(); count];
    w.allreduce(&sb, &mut host[..], op.clone()).map_err(e)?;
    check(&format!("allreduce D->H {name} x{count}"), &host, &want)?;
    let mut rr = s.alloc_zeros::<T>(count).map_err(d)?;
    w.reduce(&sb, &mut rr, op, 0).map_err(e)?;
    if r == 0 {
        check(&format!("reduce {name} x{count}"), &back(s, &rr)?, &want)?;
    }
    Ok(())
}

fn collectives(w: &Communicator, s: &Arc<CudaStream>) -> R {
    let (r, n) = (w.rank(), w.size());
    let nu = n as usize;
    // bcast from each root, small and large.
    for root in 0..n {
        for len in [1usize, 8 << 10, 1 << 20] {
            let want = pattern(len, root, 11);
            let mut b = if r == root {
                dev(s, &want)?
            } else {
                s.alloc_zeros::<u8>(len).map_err(d)?
            };
            w.bcast(&mut b, root).map_err(e)?;
            check(&format!("bcast {len} B from {root}"), &back(s, &b)?, &want)?;
        }
    }
    for count in [1usize, 1000, 100_000] {
        reduce_case(
            w,
            s,
            "sum i32",
            count,
            |q, i| (q + 1) * (i as i32 % 1000) - 7,
            Op::Sum,
            |a, b| a + b,
        )?;
        reduce_case(
            w,
            s,
            "max i32",
            count,
            |q, i| ((q as usize * 7919 + i * 31) % 1009) as i32 - 500,
            Op::Max,
            |a: i32, b| a.max(b),
        )?;
        // Integer-valued doubles: the sum is exact in any order.
        reduce_case(
            w,
            s,
            "sum f64",
            count,
            |q, i| (q as f64 + 1.0) * ((i % 977) as f64) - 3.0,
            Op::Sum,
            |a, b| a + b,
        )?;
        reduce_case(
            w,
            s,
            "max f64",
            count,
            |q, i| ((q as usize * 104_729 + i * 17) % 2003) as f64 * 0.5,
            Op::Max,
            |a: f64, b| a.max(b),
        )?;
    }
    // allgather and alltoall: element i of the block rank q sends to rank p.
    let enc = |q: i32, p: usize, i: usize| ((q as u64) << 40) | ((p as u64) << 20) | i as u64;
    for m in [1usize, 2048, 65536] {
        let mine: Vec<u64> = (0..m).map(|i| enc(r, 0, i)).collect();
        let want: Vec<u64> = (0..nu)
            .flat_map(|q| (0..m).map(move |i| enc(q as i32, 0, i)))
            .collect();
        let sb = dev(s, &mine)?;
        let mut rb = s.alloc_zeros::<u64>(m * nu).map_err(d)?;
        w.allgather(&sb, &mut rb).map_err(e)?;
        check(&format!("allgather {m}"), &back(s, &rb)?, &want)?;

        let out: Vec<u64> = (0..nu)
            .flat_map(|p| (0..m).map(move |i| enc(r, p, i)))
            .collect();
        let want: Vec<u64> = (0..nu)
            .flat_map(|q| (0..m).map(move |i| enc(q as i32, r as usize, i)))
            .collect();
        let sb = dev(s, &out)?;
        let mut rb = s.alloc_zeros::<u64>(m * nu).map_err(d)?;
        w.alltoall(&sb, &mut rb).map_err(e)?;
        check(&format!("alltoall {m}"), &back(s, &rb)?, &want)?;
    }
    Ok(())
}

fn run(w: &Communicator, ctx: &Arc<CudaContext>) -> R {
    ensure!(w.size() % 2 == 0, "gmpi-cuda needs an even number of ranks");
    let s = ctx.default_stream();
    p2p(w, &s).map_err(|m| format!("p2p: {m}"))?;
    nonblocking(w, &s).map_err(|m| format!("nonblocking: {m}"))?;
    realloc(w, &s).map_err(|m| format!("realloc: {m}"))?;
    views(w, &s).map_err(|m| format!("views: {m}"))?;
    collectives(w, &s).map_err(|m| format!("collectives: {m}"))?;
    second_stream(w, ctx, &s).map_err(|m| format!("second stream: {m}"))?;
    w.barrier().map_err(e)
}

fn main() {
    let u = match gmpi::init() {
        Ok(u) => u,
        Err(x) => {
            eprintln!("gmpi-cuda: init: {x}");
            std::process::exit(1);
        }
    };
    let w = u.world();
    let (r, n) = (w.rank(), w.size());
    let res = CudaContext::new(0)
        .map_err(|x| format!("CudaContext::new(0): {x:?}"))
        .and_then(|ctx| run(&w, &ctx));
    match res {
        Ok(()) => {
            println!("gmpi-cuda: OK on rank {r} of {n}");
            drop(u);
        }
        Err(msg) => {
            eprintln!("gmpi-cuda: FAILED on rank {r} of {n}: {msg}");
            std::process::exit(1);
        }
    }
}
