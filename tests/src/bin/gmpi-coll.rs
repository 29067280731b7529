//! `gmpirun -np N gmpi-coll SCENARIO [nobig]`: collective, communicator and
//! datatype scenarios checked against a reference every rank computes
//! serially (every rank's input is a function of (rank, index)). Exits
//! non-zero with a message naming the call, size and rank on any mismatch.
//!
//! Scenarios: `all` (every collective, every variant, sizes around each
//! algorithm threshold read from the same `GMPI_*` variables the runtime
//! reads; `nobig` skips the 4 MiB cases), `comms`, `types`, `nonblocking`,
//! `errors`, `inter` (intercommunicators).

use std::fmt::Debug;

use gmpi::{
    Attr, Communicator, Comparison, DoubleInt, Equivalence, ErrorClass, Op, Order, Request, TwoInt,
    TypedBuf, TypedBufMut, UserDatatype, ANY_SOURCE, ANY_TAG, UNDEFINED,
};

type R = Result<(), String>;

/// How a test hashes a result (to compare bits across ranks).
type HashFn<'a, T> = &'a dyn Fn(&[T]) -> u64;
/// A serial reduction step.
type StepFn<'a, T> = &'a dyn Fn(T, T) -> T;
/// A subarray case: sizes, subsizes, starts, order.
type SubCase = (Vec<i32>, Vec<i32>, Vec<i32>, Order);

fn e(x: gmpi::Error) -> String {
    x.to_string()
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

/// Deterministic 64-bit value for (rank, index, salt).
fn h(r: i32, i: usize, salt: u64) -> u64 {
    let mut z = (r as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((i as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(salt.wrapping_mul(0x94D0_49BB_1331_11EB))
        .wrapping_add(1);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value a data-movement test puts at index `i` of rank `r`'s block.
fn enc(r: i32, q: i32, i: usize) -> u64 {
    ((r as u64) << 48) | ((q as u64 & 0xffff) << 32) | i as u64
}

const SENT: u64 = 0xDEAD_BEEF_DEAD_BEEF;

fn same<T: PartialEq + Debug>(what: &str, got: &[T], exp: &[T]) -> R {
    ensure!(
        got.len() == exp.len(),
        "{what}: {} elements, expected {}",
        got.len(),
        exp.len()
    );
    if let Some(i) = (0..got.len()).find(|&i| got[i] != exp[i]) {
        let bad = (0..got.len()).filter(|&i| got[i] != exp[i]).count();
        return Err(format!(
            "{what}: element {i} of {} is {:?}, expected {:?} ({bad} elements wrong)",
            got.len(),
            got[i],
            exp[i]
        ));
    }
    Ok(())
}

fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mul) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1024),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        'g' | 'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().map(|n| n * mul)
}

fn env_size(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| parse_size(&v))
        .unwrap_or(default)
}

/// The largest threshold whose sizes the scenarios try (see [`sizes`]).
const BIG_THRESHOLD: usize = 4 << 20;

struct Th {
    shm: usize,
    /// Calls of one slot that still go in two chunks: bcast and reduce
    /// above half a slot, allreduce and allgather above seven eighths
    /// (`pipeline::Split`).
    split: usize,
    split_all: usize,
    pipeline: usize,
    /// `coll_shm_copy_min`: bcast, gather, scatter and alltoall blocks the
    /// area's slots do not carry are copied by CMA from here (allgather
    /// from half of it).
    copy: usize,
    /// Where bcast and gather leave the CMA road (`COPY_ROOTED_MAX`).
    copy_rooted_max: usize,
    bcast: usize,
    allreduce: usize,
    allgather: usize,
    alltoall: usize,
}

impl Th {
    fn from_env() -> Self {
        let shm = env_size("GMPI_COLL_SHM_MAX", 16 << 10);
        let room = shm.max(64);
        Th {
            shm,
            split: room / 2,
            split_all: room / 8 * 7,
            pipeline: env_size("GMPI_COLL_SHM_PIPELINE_MAX", 64 << 20),
            copy: env_size("GMPI_COLL_SHM_COPY_MIN", 16 << 10),
            copy_rooted_max: 256 << 10,
            bcast: env_size("GMPI_BCAST_LARGE", 128 << 10),
            allreduce: env_size("GMPI_ALLREDUCE_LARGE", 64 << 10),
            allgather: env_size("GMPI_ALLGATHER_LARGE", 64 << 10),
            alltoall: env_size("GMPI_ALLTOALL_LARGE", 8 << 10),
        }
    }
}

/// Element counts 0, 1, 3 and just around each byte threshold in `ths`,
/// 64 bytes (a cache line) and the 1 KiB tiny road of the rooted
/// collectives and allreduce, for elements of `es` bytes (each threshold
/// divided by `div` first). Thresholds above [`BIG_THRESHOLD`] are left
/// out (the 64 MiB `coll_shm_pipeline_max`): the jobs that test them lower
/// them.
fn sizes(ths: &[usize], es: usize, div: usize) -> Vec<usize> {
    let mut v = vec![0, 1, 3];
    for &t in ths.iter().chain(&[64, 1024]) {
        if t > BIG_THRESHOLD {
            continue;
        }
        let c = t / es / div.max(1);
        for x in [c.saturating_sub(1), c, c + 1] {
            v.push(x);
        }
    }
    v.sort_unstable();
    v.dedup();
    v
}

fn hash_f64(v: &[f64]) -> u64 {
    v.iter().fold(0xcbf2_9ce4_8422_2325u64, |acc, x| {
        (acc ^ x.to_bits()).wrapping_mul(0x100_0000_01b3)
    })
}

/// Every rank of `c` holds the same `x`.
fn agree(c: &Communicator, what: &str, x: u64) -> R {
    let mut all = vec![0u64; c.size() as usize];
    c.allgather(&[x][..], &mut all[..]).map_err(e)?;
    if let Some(q) = all.iter().position(|&y| y != x) {
        return Err(format!(
            "{what}: rank {} of {} has result hash {:#x}, rank {q} has {:#x} (results not bit-identical)",
            c.rank(),
            c.size(),
            x,
            all[q]
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------ reductions

/// One reduction setup: inputs, the serial op and how to compare.
struct Red<'a, T> {
    name: &'a str,
    op: Op,
    gen: &'a dyn Fn(i32, usize) -> T,
    f: &'a dyn Fn(T, T) -> T,
    eq: &'a dyn Fn(&T, &T) -> bool,
    hash: Option<HashFn<'a, T>>,
}

fn fold<T: Copy>(red: &Red<'_, T>, ranks: std::ops::Range<i32>, i: usize) -> T {
    let mut it = ranks;
    let first = it.next().expect("non-empty range");
    let mut acc = (red.gen)(first, i);
    for q in it {
        acc = (red.f)(acc, (red.gen)(q, i));
    }
    acc
}

fn check_red<T: Copy + Debug>(what: &str, red: &Red<'_, T>, got: &[T], exp: &[T]) -> R {
    ensure!(
        got.len() == exp.len(),
        "{what}: length {} vs {}",
        got.len(),
        exp.len()
    );
    if let Some(i) = (0..got.len()).find(|&i| !(red.eq)(&got[i], &exp[i])) {
        return Err(format!(
            "{what}: element {i} of {} is {:?}, expected {:?}",
            got.len(),
            got[i],
            exp[i]
        ));
    }
    Ok(())
}

/// reduce (roots 0 and n-1), allreduce, scan, exscan, reduce_scatter_block
/// and reduce_scatter, each with and without in-place, on `len` elements.
fn reductions<T: Equivalence + Copy + Debug + Default>(
    c: &Communicator,
    red: &Red<'_, T>,
    len: usize,
    only_allreduce: bool,
) -> R {
    let (n, r) = (c.size(), c.rank());
    let tag = |call: &str| {
        format!(
            "{call} {} {} len {len} np {n} rank {r}",
            red.name,
            red.op.name()
        )
    };
    let mine: Vec<T> = (0..len).map(|i| (red.gen)(r, i)).collect();
    let all: Vec<T> = (0..len).map(|i| fold(red, 0..n, i)).collect();

    // allreduce
    let mut out = vec![T::default(); len];
    c.allreduce(&mine[..], &mut out[..], red.op.clone())
        .map_err(e)?;
    check_red(&tag("allreduce"), red, &out, &all)?;
    if let Some(hf) = red.hash {
        agree(c, &tag("allreduce"), hf(&out))?;
    }
    let mut buf = mine.clone();
    c.allreduce_in_place(&mut buf[..], red.op.clone())
        .map_err(e)?;
    check_red(&tag("allreduce_in_place"), red, &buf, &all)?;
    if let Some(hf) = red.hash {
        agree(c, &tag("allreduce_in_place"), hf(&buf))?;
    }
    if only_allreduce {
        return Ok(());
    }

    // reduce
    for root in [0, n - 1] {
        let mut out = vec![T::default(); if r == root { len } else { 0 }];
        c.reduce(&mine[..], &mut out[..], red.op.clone(), root)
            .map_err(e)?;
        if r == root {
            check_red(&tag(&format!("reduce root {root}")), red, &out, &all)?;
        }
        let mut buf = mine.clone();
        c.reduce_in_place(&mut buf[..], red.op.clone(), root)
            .map_err(e)?;
        if r == root {
            check_red(
                &tag(&format!("reduce_in_place root {root}")),
                red,
                &buf,
                &all,
            )?;
        }
    }

    // scan / exscan
    let pre: Vec<T> = (0..len).map(|i| fold(red, 0..r + 1, i)).collect();
    let mut out = vec![T::default(); len];
    c.scan(&mine[..], &mut out[..], red.op.clone()).map_err(e)?;
    check_red(&tag("scan"), red, &out, &pre)?;
    let mut buf = mine.clone();
    c.scan_in_place(&mut buf[..], red.op.clone()).map_err(e)?;
    check_red(&tag("scan_in_place"), red, &buf, &pre)?;
    let expre: Vec<T> = if r == 0 {
        Vec::new()
    } else {
        (0..len).map(|i| fold(red, 0..r, i)).collect()
    };
    let sentinel: Vec<T> = (0..len).map(|i| (red.gen)(1000 + r, i)).collect();
    let mut out = sentinel.clone();
    c.exscan(&mine[..], &mut out[..], red.op.clone())
        .map_err(e)?;
    if r == 0 {
        check_red(&tag("exscan (rank 0 untouched)"), red, &out, &sentinel)?;
    } else {
        check_red(&tag("exscan"), red, &out, &expre)?;
    }
    let mut buf = mine.clone();
    c.exscan_in_place(&mut buf[..], red.op.clone()).map_err(e)?;
    if r > 0 {
        check_red(&tag("exscan_in_place"), red, &buf, &expre)?;
    }

    // reduce_scatter_block: blocks of b elements
    let b = len.div_ceil(n as usize);
    let nb = b * n as usize;
    let input: Vec<T> = (0..nb).map(|i| (red.gen)(r, i)).collect();
    let exp: Vec<T> = (0..b)
        .map(|j| fold(red, 0..n, r as usize * b + j))
        .collect();
    let mut out = vec![T::default(); b];
    c.reduce_scatter_block(&input[..], &mut out[..], red.op.clone())
        .map_err(e)?;
    check_red(
        &tag(&format!("reduce_scatter_block b {b}")),
        red,
        &out,
        &exp,
    )?;
    let mut buf = input.clone();
    c.reduce_scatter_block_in_place(&mut buf[..], red.op.clone())
        .map_err(e)?;
    check_red(
        &tag(&format!("reduce_scatter_block_in_place b {b}")),
        red,
        &buf[..b],
        &exp,
    )?;

    // reduce_scatter: irregular counts, some 0
    let counts: Vec<i32> = (0..n)
        .map(|q| {
            if q % 3 == 1 {
                0
            } else {
                (len / n as usize) as i32 + q % 3
            }
        })
        .collect();
    let total: usize = counts.iter().map(|&x| x as usize).sum();
    let off: usize = counts[..r as usize].iter().map(|&x| x as usize).sum();
    let mycount = counts[r as usize] as usize;
    let input: Vec<T> = (0..total).map(|i| (red.gen)(r, i)).collect();
    let exp: Vec<T> = (0..mycount).map(|j| fold(red, 0..n, off + j)).collect();
    let mut out = vec![T::default(); mycount];
    c.reduce_scatter(&input[..], &mut out[..], &counts, red.op.clone())
        .map_err(e)?;
    check_red(
        &tag(&format!("reduce_scatter counts {counts:?}")),
        red,
        &out,
        &exp,
    )?;
    let mut buf = input.clone();
    c.reduce_scatter_in_place(&mut buf[..], &counts, red.op.clone())
        .map_err(e)?;
    check_red(
        &tag(&format!("reduce_scatter_in_place counts {counts:?}")),
        red,
        &buf[..mycount],
        &exp,
    )?;
    Ok(())
}

trait IntT: Equivalence + Copy + PartialEq + Debug + Default + 'static {
    fn from_u64(x: u64) -> Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn band(self, o: Self) -> Self;
    fn bor(self, o: Self) -> Self;
    fn bxor(self, o: Self) -> Self;
    fn mn(self, o: Self) -> Self;
    fn mx(self, o: Self) -> Self;
    fn nz(self) -> bool;
}

macro_rules! int_t {
    ($($t:ty),*) => {$(
        impl IntT for $t {
            fn from_u64(x: u64) -> Self { x as $t }
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn band(self, o: Self) -> Self { self & o }
            fn bor(self, o: Self) -> Self { self | o }
            fn bxor(self, o: Self) -> Self { self ^ o }
            fn mn(self, o: Self) -> Self { if o < self { o } else { self } }
            fn mx(self, o: Self) -> Self { if o > self { o } else { self } }
            fn nz(self) -> bool { self != 0 }
        }
    )*};
}
int_t!(i32, u64, i64, u8);

fn int_ops<T: IntT>(c: &Communicator, name: &str, lens: &[usize], sum_lens: &[usize]) -> R {
    let b = |x: bool| T::from_u64(x as u64);
    type F<T> = fn(T, T) -> T;
    let ops: Vec<(Op, F<T>, u64)> = vec![
        (Op::Sum, |a, b| a.add(b), 0),
        (Op::Prod, |a, b| a.mul(b), 7),
        (Op::Min, |a, b| a.mn(b), 0),
        (Op::Max, |a, b| a.mx(b), 0),
        (Op::Band, |a, b| a.band(b), 0),
        (Op::Bor, |a, b| a.bor(b), 0),
        (Op::Bxor, |a, b| a.bxor(b), 0),
    ];
    let eq = |a: &T, b: &T| a == b;
    for (op, f, m) in ops {
        let gen = move |r: i32, i: usize| {
            let x = h(r, i, 11);
            T::from_u64(if m > 0 { x % m + 1 } else { x })
        };
        let red = Red {
            name,
            op: op.clone(),
            gen: &gen,
            f: &f,
            eq: &eq,
            hash: None,
        };
        let ls = if matches!(op, Op::Sum) {
            sum_lens
        } else {
            lens
        };
        for &len in ls {
            reductions(c, &red, len, false)?;
        }
    }
    // Logical ops: mostly nonzero inputs with some zeros.
    let land = move |x: T, y: T| b(x.nz() && y.nz());
    let lor = move |x: T, y: T| b(x.nz() || y.nz());
    let lxor = move |x: T, y: T| b(x.nz() != y.nz());
    let logic: [(Op, StepFn<'_, T>, u64); 3] = [
        (Op::Land, &land, 9),
        (Op::Lor, &lor, 2),
        (Op::Lxor, &lxor, 3),
    ];
    for (op, f, m) in logic {
        let gen =
            move |r: i32, i: usize| T::from_u64(if h(r, i, 5).is_multiple_of(m) { 0 } else { 2 });
        // The reference works on 0/1; an input of 2 is "true".
        let red = Red {
            name,
            op,
            gen: &gen,
            f: &|x, y| f(x, y),
            eq: &|a: &T, b: &T| a.nz() == b.nz(),
            hash: None,
        };
        for &len in lens {
            reductions(c, &red, len, false)?;
        }
    }
    Ok(())
}

const P: u64 = 1_000_003;

fn matmul(a: [u64; 4], b: [u64; 4]) -> [u64; 4] {
    [
        (a[0] * b[0] + a[1] * b[2]) % P,
        (a[0] * b[1] + a[1] * b[3]) % P,
        (a[2] * b[0] + a[3] * b[2]) % P,
        (a[2] * b[1] + a[3] * b[3]) % P,
    ]
}

fn all_reductions(c: &Communicator, th: &Th, big: bool) -> R {
    // f64 sum: close to the serial reference, identical bits on every rank.
    let gen = |r: i32, i: usize| (h(r, i, 3) % 1_000_000) as f64 / 1000.0 - 500.0;
    let fsum = |a: f64, b: f64| a + b;
    let close = |a: &f64, b: &f64| (a - b).abs() <= 1e-9 * (1.0 + b.abs()) * 64.0;
    let red = Red {
        name: "f64",
        op: Op::Sum,
        gen: &gen,
        f: &fsum,
        eq: &close,
        hash: Some(&hash_f64),
    };
    for len in sizes(
        &[th.shm, th.split, th.split_all, th.allreduce, th.pipeline],
        8,
        1,
    ) {
        reductions(c, &red, len, false)?;
    }
    if big {
        reductions(c, &red, (4 << 20) / 8, true)?;
        reductions(c, &red, (4 << 20) / 8 + 3, true)?;
    }
    // f64 min/max/prod
    for (op, f) in [
        (Op::Min, (|a: f64, b: f64| a.min(b)) as fn(f64, f64) -> f64),
        (Op::Max, |a: f64, b: f64| a.max(b)),
    ] {
        let red = Red {
            name: "f64",
            op,
            gen: &gen,
            f: &f,
            eq: &|a: &f64, b: &f64| a == b,
            hash: Some(&hash_f64),
        };
        for len in [0, 1, 3, th.shm / 8 + 1] {
            reductions(c, &red, len, false)?;
        }
    }

    let small = [0usize, 1, 3, th.shm / 4 + 1];
    int_ops::<i32>(c, "i32", &small, &sizes(&[th.shm, th.allreduce], 4, 1))?;
    int_ops::<u64>(
        c,
        "u64",
        &[0, 1, 3, (th.shm / 8).saturating_sub(1)],
        &sizes(&[th.shm, th.allreduce], 8, 1),
    )?;
    int_ops::<u8>(c, "u8", &[0, 1, 3, th.shm + 1], &[0, 1, 3, th.shm + 1])?;

    // minloc / maxloc on pairs: many ties so the index rule matters.
    let g2 = |r: i32, i: usize| TwoInt::new((h(r, i, 9) % 4) as i32 - 2, r);
    let gd = |r: i32, i: usize| DoubleInt::new((h(r, i, 9) % 4) as f64 * 0.5, r);
    fn loc<V: PartialOrd + Copy>(a: (V, i32), b: (V, i32), min: bool) -> (V, i32) {
        let better = if min { b.0 < a.0 } else { b.0 > a.0 };
        if better || (b.0 == a.0 && b.1 < a.1) {
            b
        } else {
            a
        }
    }
    for min in [true, false] {
        let op = if min { Op::MinLoc } else { Op::MaxLoc };
        let f2 = move |a: TwoInt, b: TwoInt| {
            let (v, i) = loc((a.value, a.index), (b.value, b.index), min);
            TwoInt::new(v, i)
        };
        let fd = move |a: DoubleInt, b: DoubleInt| {
            let (v, i) = loc((a.value, a.index), (b.value, b.index), min);
            DoubleInt::new(v, i)
        };
        let r2 = Red {
            name: "TwoInt",
            op: op.clone(),
            gen: &g2,
            f: &f2,
            eq: &|a: &TwoInt, b: &TwoInt| a.value == b.value && a.index == b.index,
            hash: None,
        };
        let rd = Red {
            name: "DoubleInt",
            op,
            gen: &gd,
            f: &fd,
            eq: &|a: &DoubleInt, b: &DoubleInt| a.value == b.value && a.index == b.index,
            hash: None,
        };
        for len in [0, 1, 3, th.shm / 16 + 1, th.allreduce / 8 + 1] {
            reductions(c, &r2, len, false)?;
            reductions(c, &rd, len, false)?;
        }
    }

    // Non-commutative user op: 2x2 matrix product mod P, in rank order.
    let gm = |r: i32, i: usize| {
        let x = h(r, i, 21);
        [x % P, (x >> 20) % P, (x >> 40) % P, (x >> 7) % 11]
    };
    let op = Op::user_typed::<[u64; 4], _>(
        |inv: &[[u64; 4]], io: &mut [[u64; 4]]| {
            for (a, b) in inv.iter().zip(io.iter_mut()) {
                *b = matmul(*a, *b);
            }
        },
        false,
    );
    let rm = Red {
        name: "2x2 matrix",
        op,
        gen: &gm,
        f: &matmul,
        eq: &|a: &[u64; 4], b: &[u64; 4]| a == b,
        hash: None,
    };
    for len in sizes(&[th.shm, th.split, th.allreduce], 32, 1) {
        reductions(c, &rm, len, false)?;
    }
    // The same op declared commutative would be wrong; a commutative user
    // op (xor-sum) may use any order.
    let op = Op::user_typed::<u64, _>(
        |inv: &[u64], io: &mut [u64]| {
            for (a, b) in inv.iter().zip(io.iter_mut()) {
                *b = b.wrapping_add(*a);
            }
        },
        true,
    );
    let gu = |r: i32, i: usize| h(r, i, 4);
    let ru = Red {
        name: "user commutative u64",
        op,
        gen: &gu,
        f: &|a: u64, b: u64| a.wrapping_add(b),
        eq: &|a: &u64, b: &u64| a == b,
        hash: None,
    };
    for len in sizes(&[th.shm, th.allreduce], 8, 1) {
        reductions(c, &ru, len, false)?;
    }
    Ok(())
}

// ------------------------------------------------------------------ data movement

fn movement(c: &Communicator, th: &Th, big: bool) -> R {
    let (n, r) = (c.size(), c.rank());
    let nu = n as usize;
    let ctx = |call: &str, len: usize| format!("{call} len {len} np {n} rank {r}");

    // barrier
    for _ in 0..3 {
        c.barrier().map_err(e)?;
    }
    c.ibarrier().map_err(e)?.wait().map_err(e)?;

    // bcast: u64 and odd-sized u8 buffers.
    let mut bl = sizes(
        &[
            th.shm,
            th.split,
            th.bcast,
            th.pipeline,
            th.copy,
            th.copy_rooted_max,
        ],
        8,
        1,
    );
    if big {
        bl.push((4 << 20) / 8);
    }
    for &len in &bl {
        for root in [0, n - 1] {
            let exp: Vec<u64> = (0..len).map(|i| enc(root, 0, i)).collect();
            let mut buf = if r == root {
                exp.clone()
            } else {
                vec![SENT; len]
            };
            c.bcast(&mut buf[..], root).map_err(e)?;
            same(&ctx(&format!("bcast u64 root {root}"), len), &buf, &exp)?;
        }
    }
    for len in sizes(&[th.shm, th.split, th.bcast], 1, 1) {
        let root = n - 1;
        let exp: Vec<u8> = (0..len).map(|i| h(root, i, 1) as u8).collect();
        let mut buf = if r == root {
            exp.clone()
        } else {
            vec![0xa5; len]
        };
        c.bcast(&mut buf[..], root).map_err(e)?;
        same(&ctx("bcast u8", len), &buf, &exp)?;
    }

    // gather / scatter (+ in place); a scatter's root publishes every
    // rank's block, so its area threshold is `shm / n` per block.
    let mut gl = sizes(&[th.shm, th.copy, th.copy_rooted_max], 8, 1);
    gl.extend(sizes(&[th.shm], 8, nu));
    gl.sort_unstable();
    gl.dedup();
    for len in gl {
        for root in [0, n - 1] {
            let mine: Vec<u64> = (0..len).map(|i| enc(r, 0, i)).collect();
            let exp: Vec<u64> = (0..n)
                .flat_map(|q| (0..len).map(move |i| enc(q, 0, i)))
                .collect();
            let mut out = vec![SENT; if r == root { len * nu } else { 0 }];
            c.gather(&mine[..], &mut out[..], root).map_err(e)?;
            if r == root {
                same(&ctx(&format!("gather root {root}"), len), &out, &exp)?;
            }
            let mut buf = if r == root {
                let mut b = vec![SENT; len * nu];
                b[r as usize * len..(r as usize + 1) * len].copy_from_slice(&mine);
                b
            } else {
                mine.clone()
            };
            c.gather_in_place(&mut buf[..], root).map_err(e)?;
            if r == root {
                same(
                    &ctx(&format!("gather_in_place root {root}"), len),
                    &buf,
                    &exp,
                )?;
            }

            let all: Vec<u64> = (0..n)
                .flat_map(|q| (0..len).map(move |i| enc(root, q, i)))
                .collect();
            let exp: Vec<u64> = (0..len).map(|i| enc(root, r, i)).collect();
            let send = if r == root { all.clone() } else { Vec::new() };
            let mut out = vec![SENT; len];
            c.scatter(&send[..], &mut out[..], root).map_err(e)?;
            same(&ctx(&format!("scatter root {root}"), len), &out, &exp)?;
            let mut buf = if r == root {
                all.clone()
            } else {
                vec![SENT; len]
            };
            c.scatter_in_place(&mut buf[..], root).map_err(e)?;
            if r == root {
                same(
                    &ctx(&format!("scatter_in_place root {root}"), len),
                    &buf,
                    &all,
                )?;
            } else {
                same(
                    &ctx(&format!("scatter_in_place root {root}"), len),
                    &buf,
                    &exp,
                )?;
            }
        }
    }

    // v-forms: irregular counts (some 0), displacements with gaps.
    let vcounts = |len: usize| -> Vec<i32> {
        (0..n)
            .map(|q| {
                if q % 3 == 1 {
                    0
                } else {
                    (len + q as usize * 2) as i32
                }
            })
            .collect()
    };
    let vdispls = |counts: &[i32]| -> (Vec<i32>, usize) {
        let mut d = Vec::new();
        let mut off = 1usize;
        for &cnt in counts {
            d.push(off as i32);
            off += cnt as usize + 2;
        }
        (d, off)
    };
    // (Around the area's slot too: gatherv, scatterv and alltoallv are
    // sized inside the area, where some ranks' blocks fit and others' go by
    // point-to-point.)
    for len in [
        0usize,
        1,
        3,
        // Around the tiny roads' 1 KiB (of u64): some ranks on them.
        127,
        128,
        129,
        th.shm / 8 / nu.max(1) + 1,
        th.shm / 8 - 2,
        th.shm / 8 + 1,
        th.allgather / 8 / nu + 1,
    ] {
        let counts = vcounts(len);
        let (displs, total) = vdispls(&counts);
        let mycount = counts[r as usize] as usize;
        // expected layout of a gathered buffer
        let layout = |src: &dyn Fn(i32, usize) -> u64| -> Vec<u64> {
            let mut v = vec![SENT; total];
            for q in 0..n {
                for i in 0..counts[q as usize] as usize {
                    v[displs[q as usize] as usize + i] = src(q, i);
                }
            }
            v
        };
        let mine: Vec<u64> = (0..mycount).map(|i| enc(r, 1, i)).collect();
        let gathered = layout(&|q, i| enc(q, 1, i));
        for root in [0, n - 1] {
            let what = |call: &str| ctx(&format!("{call} root {root} counts {counts:?}"), len);
            let mut out = vec![SENT; if r == root { total } else { 0 }];
            c.gatherv(&mine[..], &mut out[..], &counts, &displs, root)
                .map_err(e)?;
            if r == root {
                same(&what("gatherv"), &out, &gathered)?;
            }
            let mut buf = if r == root {
                let mut b = vec![SENT; total];
                let d = displs[r as usize] as usize;
                b[d..d + mycount].copy_from_slice(&mine);
                b
            } else {
                mine.clone()
            };
            c.gatherv_in_place(&mut buf[..], &counts, &displs, root)
                .map_err(e)?;
            if r == root {
                same(&what("gatherv_in_place"), &buf, &gathered)?;
            }

            let src = layout(&|q, i| enc(root, q, i));
            let exp: Vec<u64> = (0..mycount).map(|i| enc(root, r, i)).collect();
            let send = if r == root { src.clone() } else { Vec::new() };
            let mut out = vec![SENT; mycount];
            c.scatterv(&send[..], &counts, &displs, &mut out[..], root)
                .map_err(e)?;
            same(&what("scatterv"), &out, &exp)?;
            let mut buf = if r == root {
                src.clone()
            } else {
                vec![SENT; mycount]
            };
            c.scatterv_in_place(&mut buf[..], &counts, &displs, root)
                .map_err(e)?;
            same(
                &what("scatterv_in_place"),
                &buf,
                if r == root { &src } else { &exp },
            )?;
        }
        let what = |call: &str| ctx(&format!("{call} counts {counts:?}"), len);
        let mut out = vec![SENT; total];
        c.allgatherv(&mine[..], &mut out[..], &counts, &displs)
            .map_err(e)?;
        same(&what("allgatherv"), &out, &gathered)?;
        let mut buf = vec![SENT; total];
        let d = displs[r as usize] as usize;
        buf[d..d + mycount].copy_from_slice(&mine);
        c.allgatherv_in_place(&mut buf[..], &counts, &displs)
            .map_err(e)?;
        same(&what("allgatherv_in_place"), &buf, &gathered)?;
    }

    // allgather (+ in place): around the total-bytes threshold.
    let mut al = sizes(&[th.allgather], 8, nu);
    al.extend(sizes(&[th.shm], 8, nu));
    al.extend(sizes(
        &[th.shm, th.split_all, th.pipeline, th.copy / 2],
        8,
        1,
    ));
    al.sort_unstable();
    al.dedup();
    for len in al {
        let mine: Vec<u64> = (0..len).map(|i| enc(r, 2, i)).collect();
        let exp: Vec<u64> = (0..n)
            .flat_map(|q| (0..len).map(move |i| enc(q, 2, i)))
            .collect();
        let mut out = vec![SENT; len * nu];
        c.allgather(&mine[..], &mut out[..]).map_err(e)?;
        same(&ctx("allgather", len), &out, &exp)?;
        let mut buf = vec![SENT; len * nu];
        buf[r as usize * len..(r as usize + 1) * len].copy_from_slice(&mine);
        c.allgather_in_place(&mut buf[..]).map_err(e)?;
        same(&ctx("allgather_in_place", len), &buf, &exp)?;
    }
    // odd element size (3 bytes) to exercise the non-8-byte paths
    for len in [1usize, 5, th.allgather / 3 / nu + 1] {
        let mine: Vec<[u8; 3]> = (0..len)
            .map(|i| [r as u8, i as u8, (i >> 8) as u8])
            .collect();
        let exp: Vec<[u8; 3]> = (0..n)
            .flat_map(|q| (0..len).map(move |i| [q as u8, i as u8, (i >> 8) as u8]))
            .collect();
        let mut out = vec![[0u8; 3]; len * nu];
        c.allgather(&mine[..], &mut out[..]).map_err(e)?;
        same(&ctx("allgather [u8;3]", len), &out, &exp)?;
    }

    // alltoall (+ in place): around the per-peer threshold.
    for len in sizes(&[th.alltoall, th.copy / 2, th.copy], 8, 1) {
        let send: Vec<u64> = (0..n)
            .flat_map(|q| (0..len).map(move |i| enc(r, q, i)))
            .collect();
        let exp: Vec<u64> = (0..n)
            .flat_map(|q| (0..len).map(move |i| enc(q, r, i)))
            .collect();
        let mut out = vec![SENT; len * nu];
        c.alltoall(&send[..], &mut out[..]).map_err(e)?;
        same(&ctx("alltoall", len), &out, &exp)?;
        let mut buf = send.clone();
        c.alltoall_in_place(&mut buf[..]).map_err(e)?;
        same(&ctx("alltoall_in_place", len), &buf, &exp)?;
    }

    // alltoallv / alltoallw: count from a to b is cnt(a, b), some 0.
    // (Around the single-copy road too: blocks of coll_shm_copy_min, where
    // some ranks publish where their blocks lie and others the data.)
    for len in [
        0usize,
        1,
        3,
        th.alltoall / 8 + 1,
        (th.shm / 8 / nu).saturating_sub(2),
        th.shm / 8 / nu + 1,
        (th.copy / 8).saturating_sub(2),
        th.copy / 8,
        th.copy / 8 + 1,
    ] {
        let cnt = |a: i32, b: i32| -> usize {
            if (a + b) % 3 == 2 {
                0
            } else {
                len + ((a * b) % 3) as usize
            }
        };
        let sc: Vec<i32> = (0..n).map(|q| cnt(r, q) as i32).collect();
        let rc: Vec<i32> = (0..n).map(|q| cnt(q, r) as i32).collect();
        let (sd, stot) = vdispls(&sc);
        let (rd, rtot) = vdispls(&rc);
        let mut send = vec![SENT; stot];
        for q in 0..n {
            for i in 0..sc[q as usize] as usize {
                send[sd[q as usize] as usize + i] = enc(r, q, i);
            }
        }
        let mut exp = vec![SENT; rtot];
        for q in 0..n {
            for i in 0..rc[q as usize] as usize {
                exp[rd[q as usize] as usize + i] = enc(q, r, i);
            }
        }
        let what = |call: &str| ctx(&format!("{call} sendcounts {sc:?} recvcounts {rc:?}"), len);
        let mut out = vec![SENT; rtot];
        c.alltoallv(&send[..], &sc, &sd, &mut out[..], &rc, &rd)
            .map_err(e)?;
        same(&what("alltoallv"), &out, &exp)?;

        // alltoallw with u64 basic types and byte displacements.
        let t: Vec<UserDatatype> = (0..n).map(|_| UserDatatype::from(u64::DATATYPE)).collect();
        let sdb: Vec<isize> = sd.iter().map(|&d| d as isize * 8).collect();
        let rdb: Vec<isize> = rd.iter().map(|&d| d as isize * 8).collect();
        let mut out = vec![SENT; rtot];
        c.alltoallw(&send[..], &sc, &sdb, &t, &mut out[..], &rc, &rdb, &t)
            .map_err(e)?;
        same(&what("alltoallw"), &out, &exp)?;

        // in place needs symmetric counts: sym(a, b) = sym(b, a)
        let sym = |a: i32, b: i32| -> i32 {
            if (a + b) % 3 == 2 {
                0
            } else {
                (len + ((a + b) % 4) as usize) as i32
            }
        };
        let cc: Vec<i32> = (0..n).map(|q| sym(r, q)).collect();
        let (cd, ctot) = vdispls(&cc);
        let mut buf = vec![SENT; ctot];
        let mut exp = vec![SENT; ctot];
        for q in 0..n {
            for i in 0..cc[q as usize] as usize {
                buf[cd[q as usize] as usize + i] = enc(r, q, i);
                exp[cd[q as usize] as usize + i] = enc(q, r, i);
            }
        }
        c.alltoallv_in_place(&mut buf[..], &cc, &cd).map_err(e)?;
        same(
            &ctx(&format!("alltoallv_in_place counts {cc:?}"), len),
            &buf,
            &exp,
        )?;
    }
    Ok(())
}

fn scenario_all(w: &Communicator, big: bool) -> R {
    let th = Th::from_env();
    movement(w, &th, big)?;
    all_reductions(w, &th, big)?;
    // The same on a communicator with a permuted rank order.
    let n = w.size();
    let rev = w.split(0, n - w.rank()).map_err(e)?.expect("color 0");
    movement(&rev, &th, false)?;
    Ok(())
}

// ------------------------------------------------------------------ comms

fn scenario_comms(w: &Communicator) -> R {
    let (n, r) = (w.size(), w.rank());
    let cmp = |what: &str, got: Comparison, exp: Comparison| -> R {
        ensure!(
            got == exp,
            "{what}: compare gave {got:?}, expected {exp:?} (np {n} rank {r})"
        );
        Ok(())
    };
    cmp("world vs itself", w.compare(w), Comparison::Ident)?;
    cmp("world vs clone", w.compare(&w.clone()), Comparison::Ident)?;
    let d = w.dup().map_err(e)?;
    cmp("world vs dup", w.compare(&d), Comparison::Congruent)?;
    ensure!(d.rank() == r && d.size() == n, "dup: rank/size changed");

    // split by parity, key reversing the order
    let s = w.split(r % 2, -r).map_err(e)?.expect("defined color");
    let members: Vec<i32> = (0..n).filter(|q| q % 2 == r % 2).rev().collect();
    ensure!(
        s.size() == members.len() as i32,
        "split parity: size {} expected {}",
        s.size(),
        members.len()
    );
    let my = members.iter().position(|&q| q == r).unwrap() as i32;
    ensure!(
        s.rank() == my,
        "split parity: rank {} expected {my} (world rank {r})",
        s.rank()
    );
    let exp = if n == 1 {
        Comparison::Congruent
    } else {
        Comparison::Unequal
    };
    cmp("world vs parity split", w.compare(&s), exp)?;

    // one color, reversed key: the same members in a different order
    let rv = w.split(7, n - r).map_err(e)?.expect("defined");
    ensure!(
        rv.rank() == n - 1 - r,
        "reversed split: rank {} expected {}",
        rv.rank(),
        n - 1 - r
    );
    cmp(
        "world vs reversed split",
        w.compare(&rv),
        if n == 1 {
            Comparison::Congruent
        } else {
            Comparison::Similar
        },
    )?;
    // identical key: same order
    let same_order = w.split(3, 0).map_err(e)?.expect("defined");
    cmp(
        "world vs split(3, 0)",
        w.compare(&same_order),
        Comparison::Congruent,
    )?;

    // UNDEFINED color on rank 0
    let u = w.split(if r == 0 { UNDEFINED } else { 1 }, r).map_err(e)?;
    match (&u, r) {
        (None, 0) => {}
        (Some(c), q) if q > 0 => {
            ensure!(
                c.size() == n - 1 && c.rank() == r - 1,
                "split without rank 0: rank {} size {}",
                c.rank(),
                c.size()
            )
        }
        _ => return Err(format!("split UNDEFINED: rank {r} got {:?}", u.is_some())),
    }

    // split_shared: one node
    let sh = w.split_shared().map_err(e)?;
    ensure!(
        sh.size() == n && sh.rank() == r,
        "split_shared: {} of {}",
        sh.rank(),
        sh.size()
    );
    cmp(
        "world vs split_shared",
        w.compare(&sh),
        Comparison::Congruent,
    )?;

    // groups
    let g = w.group();
    ensure!(g.size() == n && g.rank() == Some(r), "world group");
    let all: Vec<i32> = (0..n).collect();
    let revr: Vec<i32> = (0..n).rev().collect();
    let gr = g.incl(&revr).map_err(e)?;
    cmp(
        "group vs reversed incl",
        g.compare(&gr),
        if n == 1 {
            Comparison::Ident
        } else {
            Comparison::Similar
        },
    )?;
    cmp(
        "group vs incl(all)",
        g.compare(&g.incl(&all).map_err(e)?),
        Comparison::Ident,
    )?;
    let evens: Vec<i32> = (0..n).step_by(2).collect();
    let odds: Vec<i32> = (1..n).step_by(2).collect();
    let ge = g.incl(&evens).map_err(e)?;
    let go = g.excl(&evens).map_err(e)?;
    ensure!(
        go.size() == odds.len() as i32,
        "excl(evens) size {}",
        go.size()
    );
    let un = ge.union(&go);
    ensure!(un.size() == n, "union size {}", un.size());
    cmp(
        "evens ∪ odds vs world",
        g.compare(&un),
        if n <= 2 {
            Comparison::Ident
        } else {
            Comparison::Similar
        },
    )?;
    ensure!(ge.intersection(&go).size() == 0, "evens ∩ odds not empty");
    let diff = g.difference(&ge);
    cmp(
        "world − evens vs odds",
        diff.compare(&go),
        Comparison::Ident,
    )?;
    ensure!(g.intersection(&gr).size() == n, "world ∩ reversed");
    let tr = gr.translate_ranks(&all, &g).map_err(e)?;
    ensure!(tr == revr, "translate_ranks reversed→world gave {tr:?}");
    let tr = ge
        .translate_ranks(&(0..ge.size()).collect::<Vec<_>>(), &go)
        .map_err(e)?;
    ensure!(
        tr.iter().all(|&x| x == UNDEFINED),
        "translate evens→odds gave {tr:?}"
    );
    ensure!(
        ge.rank() == (r % 2 == 0).then_some(r / 2),
        "evens group rank {:?}",
        ge.rank()
    );
    cmp("evens vs odds", ge.compare(&go), Comparison::Unequal)?;

    // create from a group
    let ce = w.create(&ge).map_err(e)?;
    match ce {
        Some(c) => {
            ensure!(
                r % 2 == 0 && c.rank() == r / 2 && c.size() == ge.size(),
                "create(evens) rank {} size {}",
                c.rank(),
                c.size()
            );
            let mut x = [r as u64];
            c.allreduce_in_place(&mut x[..], Op::Sum).map_err(e)?;
            let exp: u64 = evens.iter().map(|&q| q as u64).sum();
            ensure!(
                x[0] == exp,
                "allreduce on create(evens): {} expected {exp}",
                x[0]
            );
        }
        None => ensure!(r % 2 == 1, "create(evens): rank {r} got no communicator"),
    }
    let cr = w.create(&gr).map_err(e)?.expect("member");
    ensure!(
        cr.rank() == n - 1 - r,
        "create(reversed) rank {}",
        cr.rank()
    );
    cmp(
        "world vs create(reversed)",
        w.compare(&cr),
        if n == 1 {
            Comparison::Congruent
        } else {
            Comparison::Similar
        },
    )?;

    // attributes
    ensure!(
        w.get_attr(Attr::TagUb) == Some(gmpi::TAG_UB as i64),
        "TagUb {:?}",
        w.get_attr(Attr::TagUb)
    );
    ensure!(
        d.get_attr(Attr::TagUb) == w.get_attr(Attr::TagUb),
        "TagUb on dup"
    );
    ensure!(
        w.get_attr(Attr::UniverseSize)
            .is_some_and(|u| u >= n as i64),
        "UniverseSize {:?}",
        w.get_attr(Attr::UniverseSize)
    );
    ensure!(
        matches!(w.get_attr(Attr::WtimeIsGlobal), Some(0) | Some(1)),
        "WtimeIsGlobal"
    );

    // Same tags on world, a dup and a split while collectives run: nothing
    // may cross-match.
    let partner = r ^ 1;
    for round in 0..20u64 {
        let len = [1usize, 100, 5000, 40_000][round as usize % 4];
        let ww: Vec<u64> = (0..len).map(|i| enc(r, 10, i) ^ round).collect();
        let dd: Vec<u64> = (0..len).map(|i| enc(r, 20, i) ^ round).collect();
        let mut rw = vec![0u64; len];
        let mut any = vec![0u64; len];
        let active = partner < n;
        {
            let mut reqs: Vec<Request<'_>> = Vec::new();
            if active {
                // a wildcard receive on the dup posted before the collectives
                reqs.push(d.irecv(&mut any[..], ANY_SOURCE, ANY_TAG).map_err(e)?);
                reqs.push(w.irecv(&mut rw[..], partner, 0).map_err(e)?);
            }
            // collectives on the dup and the split, with the wildcard pending
            let mut x = vec![r as u64 + round; 64];
            s.allreduce_in_place(&mut x[..], Op::Sum).map_err(e)?;
            let exp: u64 = members.iter().map(|&q| q as u64 + round).sum();
            ensure!(
                x.iter().all(|&v| v == exp),
                "split allreduce during p2p: {} expected {exp}",
                x[0]
            );
            let mut b = vec![if d.rank() == 0 { round } else { 0 }; 300];
            d.bcast(&mut b[..], 0).map_err(e)?;
            ensure!(b.iter().all(|&v| v == round), "dup bcast during p2p");
            let mut y = [r as u64];
            d.allreduce_in_place(&mut y[..], Op::Max).map_err(e)?;
            ensure!(y[0] == n as u64 - 1, "dup allreduce during p2p");
            w.barrier().map_err(e)?;
            if active {
                reqs.push(w.isend(&ww[..], partner, 0).map_err(e)?);
                reqs.push(d.isend(&dd[..], partner, 0).map_err(e)?);
            }
            let sts = gmpi::wait_all(reqs).map_err(e)?;
            if active {
                ensure!(
                    sts[0].source() == partner && sts[0].tag() == 0,
                    "dup wildcard status: source {} tag {}",
                    sts[0].source(),
                    sts[0].tag()
                );
                ensure!(
                    sts[0].count::<u64>() == len,
                    "dup wildcard count {}",
                    sts[0].count::<u64>()
                );
            }
        }
        // the dup's message still lands where it should
        if active {
            let exp_w: Vec<u64> = (0..len).map(|i| enc(partner, 10, i) ^ round).collect();
            let exp_d: Vec<u64> = (0..len).map(|i| enc(partner, 20, i) ^ round).collect();
            same(
                &format!("world tag-0 message round {round} rank {r}"),
                &rw,
                &exp_w,
            )?;
            same(
                &format!("dup wildcard message round {round} rank {r}"),
                &any,
                &exp_d,
            )?;
        }
    }

    // a freed dup fails; the world still works
    let d2 = w.dup().map_err(e)?;
    d2.free().map_err(e)?;
    ensure!(d2.is_freed(), "is_freed after free");
    cmp("dup vs dup", d.compare(&d.clone()), Comparison::Ident)?;
    w.barrier().map_err(e)?;
    Ok(())
}

// ------------------------------------------------------------------ types

#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
struct Part {
    a: f64,
    b: i32,
    c: [u16; 2],
}

// SAFETY: repr(C) with fields 8 + 4 + 4 bytes, no padding; every bit
// pattern of each field is valid.
unsafe impl Equivalence for Part {}

/// Send `send` to the next rank and receive into `recv` from the previous.
fn ring<S: gmpi::Buffer + ?Sized, Rb: gmpi::BufferMut + ?Sized>(
    w: &Communicator,
    send: &S,
    recv: &mut Rb,
    tag: i32,
) -> Result<gmpi::Status, String> {
    let (n, r) = (w.size(), w.rank());
    let rq = w.isend(send, (r + 1) % n, tag).map_err(e)?;
    let st = w.recv(recv, (r + n - 1) % n, tag).map_err(e)?;
    rq.wait().map_err(e)?;
    Ok(st)
}

fn scenario_types(w: &Communicator) -> R {
    let (n, r) = (w.size(), w.rank());
    let prev = (r + n - 1) % n;
    let f64t = UserDatatype::from(f64::DATATYPE);
    let i32t = UserDatatype::from(i32::DATATYPE);

    // vector: 3 blocks of 2, stride 4 (of f64)
    let vt = UserDatatype::vector(3, 2, 4, &f64t).map_err(e)?.committed();
    let vidx = [0usize, 1, 4, 5, 8, 9];
    ensure!(
        vt.size() == 48 && vt.extent() == 80,
        "vector size/extent {} {}",
        vt.size(),
        vt.extent()
    );
    let row = |q: i32| -> Vec<f64> { (0..10).map(|i| q as f64 * 100.0 + i as f64).collect() };
    let mine = row(r);
    let mut packed = vec![0.0f64; 6];
    let st = ring(
        w,
        &TypedBuf::new(&mine[..], 1, &vt).map_err(e)?,
        &mut packed[..],
        1,
    )?;
    let exp: Vec<f64> = vidx.iter().map(|&i| row(prev)[i]).collect();
    same("vector → contiguous", &packed, &exp)?;
    ensure!(
        st.count::<f64>() == 6 && st.bytes() == 48,
        "vector recv status count {} bytes {}",
        st.count::<f64>(),
        st.bytes()
    );
    // A non-blocking allreduce whose ranks lay the same signature out
    // differently (a vector type on ranks 0 and 1, contiguous elsewhere),
    // after a blocking one has set the shared-memory area up: every rank
    // must take the same road.
    if n > 1 {
        let mut one = [1u64];
        w.allreduce_in_place(&mut one[..], Op::Sum).map_err(e)?;
        let src: Vec<f64> = (0..10).map(|i| f64::from(r * 10 + i)).collect();
        let six: Vec<f64> = vidx.iter().map(|&i| src[i]).collect();
        let exp: Vec<f64> = vidx
            .iter()
            .map(|&i| (0..n).map(|q| f64::from(q * 10) + i as f64).sum())
            .collect();
        let mut strided = vec![-1.0f64; 10];
        let mut flat = vec![-1.0f64; 6];
        if r == 0 {
            let mut tb = TypedBufMut::new(&mut strided[..], 1, &vt).map_err(e)?;
            let q = w.iallreduce(&six[..], &mut tb, Op::Sum).map_err(e)?;
            q.wait().map_err(e)?;
        } else if r == 1 {
            let tb = TypedBuf::new(&src[..], 1, &vt).map_err(e)?;
            let q = w.iallreduce(&tb, &mut flat[..], Op::Sum).map_err(e)?;
            q.wait().map_err(e)?;
        } else {
            let q = w.iallreduce(&six[..], &mut flat[..], Op::Sum).map_err(e)?;
            q.wait().map_err(e)?;
        }
        if r == 0 {
            let got: Vec<f64> = vidx.iter().map(|&i| strided[i]).collect();
            same("iallreduce into a vector type", &got, &exp)?;
            ensure!(
                (0..10).all(|i| vidx.contains(&i) || strided[i] == -1.0),
                "iallreduce into a vector type wrote its gaps: {strided:?}"
            );
        } else {
            same("iallreduce beside a vector type", &flat, &exp)?;
        }
    }
    if n > 1 {
        rooted_mixed_layouts(w, &f64t)?;
    }
    // contiguous → vector
    let cont: Vec<f64> = vidx.iter().map(|&i| mine[i]).collect();
    let mut out = vec![-1.0f64; 10];
    let st = ring(
        w,
        &cont[..],
        &mut TypedBufMut::new(&mut out[..], 1, &vt).map_err(e)?,
        2,
    )?;
    let mut exp = vec![-1.0f64; 10];
    for &i in &vidx {
        exp[i] = row(prev)[i];
    }
    same("contiguous → vector", &out, &exp)?;
    ensure!(
        st.bytes() == 48,
        "contiguous → vector status bytes {}",
        st.bytes()
    );

    // indexed on i32
    let it = UserDatatype::indexed(&[1, 3, 2], &[5, 0, 10], &i32t)
        .map_err(e)?
        .committed();
    let iidx = [5usize, 0, 1, 2, 10, 11];
    let src: Vec<i32> = (0..12).map(|i| r * 1000 + i).collect();
    let mut got = vec![0i32; 6];
    ring(
        w,
        &TypedBuf::new(&src[..], 1, &it).map_err(e)?,
        &mut got[..],
        3,
    )?;
    let exp: Vec<i32> = iidx.iter().map(|&i| prev * 1000 + i as i32).collect();
    same("indexed → contiguous", &got, &exp)?;
    let pk = it.pack(1, &to_bytes(&src), 0).map_err(e)?;
    let exp_b: Vec<u8> = iidx.iter().flat_map(|&i| src[i].to_ne_bytes()).collect();
    same("indexed pack", &pk, &exp_b)?;
    let mut back = vec![0u8; 48];
    it.unpack(1, &pk, &mut back, 0).map_err(e)?;
    let mut exp_back = vec![0u8; 48];
    for &i in &iidx {
        exp_back[i * 4..i * 4 + 4].copy_from_slice(&src[i].to_ne_bytes());
    }
    same("indexed unpack", &back, &exp_back)?;

    // struct with a repr(C) type, resized to its Rust size
    let st_t = UserDatatype::structured(
        &[1, 1, 2],
        &[0, 8, 12],
        &[
            f64t.clone(),
            i32t.clone(),
            UserDatatype::from(u16::DATATYPE),
        ],
    )
    .map_err(e)?;
    let st_t = UserDatatype::resized(&st_t, 0, 16).map_err(e)?.committed();
    ensure!(
        st_t.size() == 16 && st_t.extent() == 16,
        "struct size {} extent {}",
        st_t.size(),
        st_t.extent()
    );
    let part = |q: i32, i: usize| Part {
        a: q as f64 + i as f64 * 0.5,
        b: q * 10 + i as i32,
        c: [q as u16, i as u16],
    };
    let parts: Vec<Part> = (0..4).map(|i| part(r, i)).collect();
    let mut got = vec![Part::default(); 4];
    let st = ring(
        w,
        &TypedBuf::new(&parts[..], 4, &st_t).map_err(e)?,
        &mut TypedBufMut::new(&mut got[..], 4, &st_t).map_err(e)?,
        4,
    )?;
    let exp: Vec<Part> = (0..4).map(|i| part(prev, i)).collect();
    same("struct round trip", &got, &exp)?;
    ensure!(st.bytes() == 64, "struct status bytes {}", st.bytes());
    // only the f64 field of each Part, stride 16 → contiguous f64
    let only_a = UserDatatype::resized(
        &UserDatatype::structured(&[1], &[0], std::slice::from_ref(&f64t)).map_err(e)?,
        0,
        16,
    )
    .map_err(e)?
    .committed();
    let mut got = vec![0.0f64; 4];
    ring(
        w,
        &TypedBuf::new(&parts[..], 4, &only_a).map_err(e)?,
        &mut got[..],
        5,
    )?;
    let exp: Vec<f64> = (0..4).map(|i| part(prev, i).a).collect();
    same("struct field a → f64", &got, &exp)?;

    // subarrays
    let sub_cases: Vec<SubCase> = vec![
        (vec![4, 5], vec![2, 3], vec![1, 1], Order::C),
        (vec![4, 5], vec![2, 3], vec![1, 1], Order::Fortran),
        (vec![3, 4, 5], vec![2, 2, 3], vec![1, 2, 1], Order::C),
        (vec![3, 4, 5], vec![2, 2, 3], vec![1, 2, 1], Order::Fortran),
    ];
    for (k, (sz, sub, start, ord)) in sub_cases.iter().enumerate() {
        let t = UserDatatype::subarray(sz, sub, start, *ord, &i32t)
            .map_err(e)?
            .committed();
        let total: i32 = sz.iter().product();
        ensure!(
            t.extent() == total as isize * 4,
            "subarray {k} extent {}",
            t.extent()
        );
        // expected linear indices, in type-map order
        let mut idx = Vec::new();
        let nd = sz.len();
        let mut cur = vec![0i32; nd];
        let count: i32 = sub.iter().product();
        for _ in 0..count {
            // linear index of start + cur
            let li = match ord {
                Order::C => (0..nd).fold(0, |acc, d| acc * sz[d] + start[d] + cur[d]),
                Order::Fortran => (0..nd)
                    .rev()
                    .fold(0, |acc, d| acc * sz[d] + start[d] + cur[d]),
            };
            idx.push(li as usize);
            // advance: C → last dim fastest; Fortran → first dim fastest
            let dims: Vec<usize> = match ord {
                Order::C => (0..nd).rev().collect(),
                Order::Fortran => (0..nd).collect(),
            };
            for d in dims {
                cur[d] += 1;
                if cur[d] < sub[d] {
                    break;
                }
                cur[d] = 0;
            }
        }
        let arr: Vec<i32> = (0..total).map(|i| r * 10_000 + i).collect();
        let pk = t.pack(1, &to_bytes(&arr), 0).map_err(e)?;
        let exp_b: Vec<u8> = idx.iter().flat_map(|&i| arr[i].to_ne_bytes()).collect();
        same(&format!("subarray {k} ({ord:?}) pack"), &pk, &exp_b)?;
        let mut got = vec![0i32; idx.len()];
        ring(
            w,
            &TypedBuf::new(&arr[..], 1, &t).map_err(e)?,
            &mut got[..],
            10 + k as i32,
        )?;
        let exp: Vec<i32> = idx.iter().map(|&i| prev * 10_000 + i as i32).collect();
        same(&format!("subarray {k} ({ord:?}) send"), &got, &exp)?;
        let mut back = vec![-1i32; total as usize];
        let cont: Vec<i32> = idx.iter().map(|&i| r * 10_000 + i as i32).collect();
        ring(
            w,
            &cont[..],
            &mut TypedBufMut::new(&mut back[..], 1, &t).map_err(e)?,
            20 + k as i32,
        )?;
        let mut exp = vec![-1i32; total as usize];
        for &i in &idx {
            exp[i] = prev * 10_000 + i as i32;
        }
        same(&format!("subarray {k} ({ord:?}) recv"), &back, &exp)?;
    }

    // resized: every third i32
    let rt = UserDatatype::resized(&i32t, 0, 12).map_err(e)?.committed();
    let src: Vec<i32> = (0..12).map(|i| r * 100 + i).collect();
    let mut got = vec![0i32; 4];
    ring(
        w,
        &TypedBuf::new(&src[..], 4, &rt).map_err(e)?,
        &mut got[..],
        30,
    )?;
    same(
        "resized stride 3",
        &got,
        &[prev * 100, prev * 100 + 3, prev * 100 + 6, prev * 100 + 9],
    )?;

    // gather into columns: rank q's 3 values become column q of a 3×n matrix
    let nu = n as usize;
    let col = UserDatatype::resized(&UserDatatype::vector(3, 1, n, &f64t).map_err(e)?, 0, 8)
        .map_err(e)?
        .committed();
    let mine: Vec<f64> = (0..3).map(|i| r as f64 * 10.0 + i as f64).collect();
    for root in [0, n - 1] {
        let mut mat = vec![-1.0f64; 3 * nu];
        if r == root {
            let mut tb = TypedBufMut::new(&mut mat[..], nu, &col).map_err(e)?;
            w.gather(&mine[..], &mut tb, root).map_err(e)?;
            let exp: Vec<f64> = (0..3 * nu)
                .map(|k| (k % nu) as f64 * 10.0 + (k / nu) as f64)
                .collect();
            same(&format!("gather into columns root {root}"), &mat, &exp)?;
        } else {
            w.gather(&mine[..], &mut mat[..0], root).map_err(e)?;
        }
        // and the sender side derived: every other element
        let src: Vec<f64> = (0..6).map(|i| r as f64 * 10.0 + i as f64).collect();
        let ev = UserDatatype::vector(3, 1, 2, &f64t).map_err(e)?.committed();
        let mut out = vec![0.0f64; if r == root { 3 * nu } else { 0 }];
        w.gather(
            &TypedBuf::new(&src[..], 1, &ev).map_err(e)?,
            &mut out[..],
            root,
        )
        .map_err(e)?;
        if r == root {
            let exp: Vec<f64> = (0..3 * nu)
                .map(|k| (k / 3) as f64 * 10.0 + (2 * (k % 3)) as f64)
                .collect();
            same(&format!("gather from vector type root {root}"), &out, &exp)?;
        }
    }

    // alltoallw: column q of an m×n matrix goes to rank q, arriving contiguous
    let m = 5usize;
    let a: Vec<f64> = (0..m * nu).map(|k| r as f64 * 1000.0 + k as f64).collect();
    let colt = UserDatatype::vector(m as i32, 1, n, &f64t)
        .map_err(e)?
        .committed();
    let contt = UserDatatype::contiguous(m as i32, &f64t)
        .map_err(e)?
        .committed();
    let st: Vec<UserDatatype> = (0..n).map(|_| colt.clone()).collect();
    let rtv: Vec<UserDatatype> = (0..n).map(|_| contt.clone()).collect();
    let ones = vec![1i32; nu];
    let sd: Vec<isize> = (0..n as isize).map(|q| q * 8).collect();
    let rd: Vec<isize> = (0..n as isize).map(|q| q * m as isize * 8).collect();
    let mut out = vec![0.0f64; m * nu];
    w.alltoallw(&a[..], &ones, &sd, &st, &mut out[..], &ones, &rd, &rtv)
        .map_err(e)?;
    let exp: Vec<f64> = (0..nu)
        .flat_map(|q| (0..m).map(move |i| q as f64 * 1000.0 + (i * nu + r as usize) as f64))
        .collect();
    same("alltoallw columns", &out, &exp)?;

    // pack/unpack of several elements with an origin offset
    let vt2 = UserDatatype::resized(&UserDatatype::vector(2, 1, 3, &i32t).map_err(e)?, -4, 20)
        .map_err(e)?
        .committed();
    let src: Vec<i32> = (0..20).collect();
    let b = to_bytes(&src);
    let pk = vt2.pack(3, &b, 4).map_err(e)?;
    // element k at origin 4 + 20k: data at +0 and +12
    let exp: Vec<u8> = (0..3)
        .flat_map(|k| [4 + 20 * k, 16 + 20 * k])
        .flat_map(|off| b[off..off + 4].to_vec())
        .collect();
    same("pack with origin", &pk, &exp)?;
    let mut dst = vec![0u8; b.len()];
    vt2.unpack(3, &pk, &mut dst, 4).map_err(e)?;
    ensure!(
        vt2.pack(3, &dst, 4).map_err(e)? == pk,
        "unpack/pack round trip"
    );
    ensure!(vt2.pack_size(3).map_err(e)? == 24, "pack_size");
    v_exchanges_mixed(w)?;
    derived_collectives(w)
}

/// Allgatherv and alltoallv where the even ranks pass a derived datatype
/// (one `u64` per element, so the same counts) and the odd ranks plain
/// `u64` slices: the odd ranks take the tiny roads, the even ones the
/// general road, and both must publish and read the same contributions.
/// Also with rank 0 sending one block too big for the area, so that every
/// rank falls back to point-to-point from either road.
fn v_exchanges_mixed(w: &Communicator) -> R {
    let (n, r) = (w.size(), w.rank());
    let th = Th::from_env();
    let one = UserDatatype::contiguous(1, &u64::DATATYPE)
        .map_err(e)?
        .committed();
    let typed = r % 2 == 0;
    for big in [false, true] {
        let huge = th.shm / 8 + 1;
        let cnt = |a: i32, b: i32| -> usize {
            match (a, b) {
                (0, b) if big && b == n - 1 => huge,
                _ => ((a + 2 * b) % 4) as usize,
            }
        };
        let offsets = |counts: &[i32]| -> (Vec<i32>, usize) {
            let mut at = 0usize;
            let d = counts.iter().map(|&c| {
                let here = at as i32;
                at += c as usize + 1;
                here
            });
            (d.collect(), at)
        };
        let sc: Vec<i32> = (0..n).map(|q| cnt(r, q) as i32).collect();
        let rc: Vec<i32> = (0..n).map(|q| cnt(q, r) as i32).collect();
        let (sd, stot) = offsets(&sc);
        let (rd, rtot) = offsets(&rc);
        let mut send = vec![SENT; stot];
        let mut exp = vec![SENT; rtot];
        for q in 0..n as usize {
            for i in 0..sc[q] as usize {
                send[sd[q] as usize + i] = enc(r, q as i32, i);
            }
            for i in 0..rc[q] as usize {
                exp[rd[q] as usize + i] = enc(q as i32, r, i);
            }
        }
        let mut out = vec![SENT; rtot];
        let what = format!("alltoallv, derived types on even ranks, big {big}, counts {sc:?}");
        if typed {
            let sb = TypedBuf::new(&send[..], stot, &one).map_err(e)?;
            let mut rb = TypedBufMut::new(&mut out[..], rtot, &one).map_err(e)?;
            w.alltoallv(&sb, &sc, &sd, &mut rb, &rc, &rd)
                .map_err(|x| format!("{what}: {x}"))?;
        } else {
            w.alltoallv(&send[..], &sc, &sd, &mut out[..], &rc, &rd)
                .map_err(|x| format!("{what}: {x}"))?;
        }
        same(&what, &out, &exp)?;

        // allgatherv: rank q contributes cnt(q, 0) elements (rank 0 many
        // when `big`: above the area, by point-to-point on every rank).
        let counts: Vec<i32> = (0..n).map(|q| cnt(q, n - 1) as i32).collect();
        let (displs, total) = offsets(&counts);
        let mine: Vec<u64> = (0..counts[r as usize] as usize)
            .map(|i| enc(r, 7, i))
            .collect();
        let mut exp = vec![SENT; total];
        for q in 0..n as usize {
            for i in 0..counts[q] as usize {
                exp[displs[q] as usize + i] = enc(q as i32, 7, i);
            }
        }
        let mut out = vec![SENT; total];
        let what = format!("allgatherv, derived types on even ranks, counts {counts:?}");
        if typed {
            let sb = TypedBuf::new(&mine[..], mine.len(), &one).map_err(e)?;
            let mut rb = TypedBufMut::new(&mut out[..], total, &one).map_err(e)?;
            w.allgatherv(&sb, &mut rb, &counts, &displs)
                .map_err(|x| format!("{what}: {x}"))?;
        } else {
            w.allgatherv(&mine[..], &mut out[..], &counts, &displs)
                .map_err(|x| format!("{what}: {x}"))?;
        }
        same(&what, &out, &exp)?;
    }
    Ok(())
}

/// Collectives on non-contiguous derived types (every other i64), at sizes
/// around the thresholds: data lands in the strided slots, gaps untouched.
fn derived_collectives(w: &Communicator) -> R {
    let (n, r) = (w.size(), w.rank());
    let nu = n as usize;
    let th = Th::from_env();
    let i64t = UserDatatype::from(i64::DATATYPE);
    // one element = 1 i64 with extent 2 i64 (the gap)
    let ev = UserDatatype::resized(&i64t, 0, 16).map_err(e)?.committed();
    let gap = -7i64;
    let strided = |vals: &[i64]| -> Vec<i64> {
        let mut v = vec![gap; vals.len() * 2];
        for (k, &x) in vals.iter().enumerate() {
            v[2 * k] = x;
        }
        v
    };
    let mut lens = sizes(&[th.shm, th.bcast, th.allreduce], 8, 1);
    lens.retain(|&l| l > 0);
    for &len in &lens {
        let what =
            |call: &str| format!("{call} on every-other-i64 type, len {len} np {n} rank {r}");
        for root in [0, n - 1] {
            let vals: Vec<i64> = (0..len).map(|i| enc(root, 3, i) as i64).collect();
            let mut buf = if r == root {
                strided(&vals)
            } else {
                vec![gap; 2 * len]
            };
            w.bcast(
                &mut TypedBufMut::new(&mut buf[..], len, &ev).map_err(e)?,
                root,
            )
            .map_err(e)?;
            same(&what(&format!("bcast root {root}")), &buf, &strided(&vals))?;
        }
        let mine: Vec<i64> = (0..len).map(|i| (h(r, i, 8) % 1000) as i64).collect();
        let sum: Vec<i64> = (0..len)
            .map(|i| (0..n).map(|q| (h(q, i, 8) % 1000) as i64).sum())
            .collect();
        let src = strided(&mine);
        let mut out = vec![gap; 2 * len];
        w.allreduce(
            &TypedBuf::new(&src[..], len, &ev).map_err(e)?,
            &mut TypedBufMut::new(&mut out[..], len, &ev).map_err(e)?,
            Op::Sum,
        )
        .map_err(e)?;
        same(&what("allreduce sum"), &out, &strided(&sum))?;
        let mut io = src.clone();
        w.allreduce_in_place(
            &mut TypedBufMut::new(&mut io[..], len, &ev).map_err(e)?,
            Op::Sum,
        )
        .map_err(e)?;
        same(&what("allreduce_in_place sum"), &io, &strided(&sum))?;
        let mut out = vec![0i64; len];
        w.allreduce(
            &TypedBuf::new(&src[..], len, &ev).map_err(e)?,
            &mut out[..],
            Op::Sum,
        )
        .map_err(e)?;
        same(&what("allreduce strided → contiguous"), &out, &sum)?;
        let pre: Vec<i64> = (0..len)
            .map(|i| (0..=r).map(|q| (h(q, i, 8) % 1000) as i64).sum())
            .collect();
        let mut out = vec![gap; 2 * len];
        w.scan(
            &TypedBuf::new(&src[..], len, &ev).map_err(e)?,
            &mut TypedBufMut::new(&mut out[..], len, &ev).map_err(e)?,
            Op::Sum,
        )
        .map_err(e)?;
        same(&what("scan sum"), &out, &strided(&pre))?;
    }
    // allgather / alltoall with strided receive and send blocks
    for len in sizes(&[th.allgather / nu, th.alltoall, th.shm / nu], 8, 1) {
        let what =
            |call: &str| format!("{call} on every-other-i64 type, len {len} np {n} rank {r}");
        let mine: Vec<i64> = (0..len).map(|i| enc(r, 4, i) as i64).collect();
        let all: Vec<i64> = (0..n)
            .flat_map(|q| (0..len).map(move |i| enc(q, 4, i) as i64))
            .collect();
        let mut out = vec![gap; 2 * len * nu];
        w.allgather(
            &mine[..],
            &mut TypedBufMut::new(&mut out[..], len * nu, &ev).map_err(e)?,
        )
        .map_err(e)?;
        same(&what("allgather into strided"), &out, &strided(&all))?;
        let src = strided(&mine);
        let mut out = vec![0i64; len * nu];
        w.allgather(&TypedBuf::new(&src[..], len, &ev).map_err(e)?, &mut out[..])
            .map_err(e)?;
        same(&what("allgather from strided"), &out, &all)?;
        let send: Vec<i64> = (0..n)
            .flat_map(|q| (0..len).map(move |i| enc(r, q, i) as i64))
            .collect();
        let exp: Vec<i64> = (0..n)
            .flat_map(|q| (0..len).map(move |i| enc(q, r, i) as i64))
            .collect();
        let ssend = strided(&send);
        let mut out = vec![gap; 2 * len * nu];
        w.alltoall(
            &TypedBuf::new(&ssend[..], len * nu, &ev).map_err(e)?,
            &mut TypedBufMut::new(&mut out[..], len * nu, &ev).map_err(e)?,
        )
        .map_err(e)?;
        same(&what("alltoall strided"), &out, &strided(&exp))?;
        let mut io = ssend.clone();
        w.alltoall_in_place(&mut TypedBufMut::new(&mut io[..], len * nu, &ev).map_err(e)?)
            .map_err(e)?;
        same(&what("alltoall_in_place strided"), &io, &strided(&exp))?;
        // reduce_scatter_block from strided input
        let inp: Vec<i64> = (0..len * nu).map(|i| (h(r, i, 6) % 100) as i64).collect();
        let sinp = strided(&inp);
        let exp: Vec<i64> = (0..len)
            .map(|j| {
                (0..n)
                    .map(|q| (h(q, r as usize * len + j, 6) % 100) as i64)
                    .sum()
            })
            .collect();
        let mut out = vec![gap; 2 * len];
        w.reduce_scatter_block(
            &TypedBuf::new(&sinp[..], len * nu, &ev).map_err(e)?,
            &mut TypedBufMut::new(&mut out[..], len, &ev).map_err(e)?,
            Op::Sum,
        )
        .map_err(e)?;
        same(&what("reduce_scatter_block strided"), &out, &strided(&exp))?;
    }
    Ok(())
}

fn to_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

// ------------------------------------------------------------------ nonblocking

/// Blocking bcast, reduce, allreduce, gather, gatherv, scatter and scatterv whose ranks lay the
/// same signature out differently (a vector type on rank 1, contiguous
/// elsewhere), at sizes across the tiny roads' limits (1 KiB, half a slot,
/// a slot of the default 16 KiB `coll_shm_max`), from roots 0 and 1: rank 1
/// takes the general road, the others the tiny one where it goes, and both
/// must make the same exchange (a bcast or reduce of more than half a slot,
/// an allreduce of more than seven eighths, goes in chunks on the general
/// road, so not on the tiny one either).
fn rooted_mixed_layouts(w: &Communicator, f64t: &UserDatatype) -> R {
    let (n, r) = (w.size(), w.rank());
    let val = |q: i32, i: usize| f64::from(q) * 1e4 + i as f64;
    let spread = |flat: &[f64]| -> Vec<f64> {
        let mut wide = vec![-1.0f64; 2 * flat.len()];
        for (i, x) in flat.iter().enumerate() {
            wide[2 * i] = *x;
        }
        wide
    };
    let gaps = |what: &str, wide: &[f64]| -> R {
        ensure!(
            wide.iter().skip(1).step_by(2).all(|&x| x == -1.0),
            "{what}: a vector type's gaps were written"
        );
        Ok(())
    };
    for k in [129usize, 512, 1024, 1025, 1792, 1793, 2048, 2049] {
        let vt = UserDatatype::vector(k as i32, 1, 2, f64t)
            .map_err(e)?
            .committed();
        let mine: Vec<f64> = (0..k).map(|i| val(r, i)).collect();
        let wide_mine = spread(&mine);
        for root in [0, 1] {
            let what =
                |c: &str| format!("{c} of {k} f64 from root {root}, a vector type on rank 1");
            // bcast
            let from: Vec<f64> = (0..k).map(|i| val(root, i)).collect();
            let mut got = if r == root {
                from.clone()
            } else {
                vec![-1.0; k]
            };
            if r == 1 {
                let mut wide = spread(&got);
                w.bcast(
                    &mut TypedBufMut::new(&mut wide[..], 1, &vt).map_err(e)?,
                    root,
                )
                .map_err(e)?;
                gaps(&what("bcast"), &wide)?;
                got = wide.iter().step_by(2).copied().collect();
            } else {
                w.bcast(&mut got[..], root).map_err(e)?;
            }
            same(&what("bcast"), &got, &from)?;
            // reduce
            let mut out = vec![-1.0f64; k];
            if r == 1 {
                let tb = TypedBuf::new(&wide_mine[..], 1, &vt).map_err(e)?;
                w.reduce(&tb, &mut out[..], Op::Sum, root).map_err(e)?;
            } else {
                w.reduce(&mine[..], &mut out[..], Op::Sum, root)
                    .map_err(e)?;
            }
            if r == root {
                let sums: Vec<f64> = (0..k).map(|i| (0..n).map(|q| val(q, i)).sum()).collect();
                same(&what("reduce"), &out, &sums)?;
            }
            // allreduce: rank 1 from the vector type, rank 0 in place
            // (through the stack on the tiny road up to 1 KiB, else on the
            // general one), the others apart
            let mut out = vec![-1.0f64; k];
            match r {
                1 => {
                    let tb = TypedBuf::new(&wide_mine[..], 1, &vt).map_err(e)?;
                    w.allreduce(&tb, &mut out[..], Op::Sum).map_err(e)?;
                }
                0 => {
                    out.copy_from_slice(&mine);
                    w.allreduce_in_place(&mut out[..], Op::Sum).map_err(e)?;
                }
                _ => w.allreduce(&mine[..], &mut out[..], Op::Sum).map_err(e)?,
            }
            let sums: Vec<f64> = (0..k).map(|i| (0..n).map(|q| val(q, i)).sum()).collect();
            same(&what("allreduce"), &out, &sums)?;
            // gather and gatherv, rank 1 sending from the vector type
            let all: Vec<f64> = (0..n)
                .flat_map(|q| (0..k).map(move |i| val(q, i)))
                .collect();
            let counts = vec![k as i32; n as usize];
            let displs: Vec<i32> = (0..n).map(|q| q * k as i32).collect();
            for v in [false, true] {
                let mut out = vec![-1.0f64; k * n as usize];
                let got = match (r == 1, v) {
                    (true, false) => w.gather(
                        &TypedBuf::new(&wide_mine[..], 1, &vt).map_err(e)?,
                        &mut out[..],
                        root,
                    ),
                    (true, true) => w.gatherv(
                        &TypedBuf::new(&wide_mine[..], 1, &vt).map_err(e)?,
                        &mut out[..],
                        &counts,
                        &displs,
                        root,
                    ),
                    (false, false) => w.gather(&mine[..], &mut out[..], root),
                    (false, true) => w.gatherv(&mine[..], &mut out[..], &counts, &displs, root),
                };
                got.map_err(e)?;
                if r == root {
                    same(&what(if v { "gatherv" } else { "gather" }), &out, &all)?;
                }
            }
            // scatter and scatterv, rank 1 receiving into the vector type
            for v in [false, true] {
                let what = what(if v { "scatterv" } else { "scatter" });
                let mut got = vec![-1.0f64; k];
                let mut wide = spread(&got);
                let got = if r == 1 {
                    let mut tb = TypedBufMut::new(&mut wide[..], 1, &vt).map_err(e)?;
                    match v {
                        false => w.scatter(&all[..], &mut tb, root),
                        true => w.scatterv(&all[..], &counts, &displs, &mut tb, root),
                    }
                    .map_err(e)?;
                    gaps(&what, &wide)?;
                    wide.iter().step_by(2).copied().collect()
                } else {
                    match v {
                        false => w.scatter(&all[..], &mut got[..], root),
                        true => w.scatterv(&all[..], &counts, &displs, &mut got[..], root),
                    }
                    .map_err(e)?;
                    got
                };
                same(&what, &got, &mine)?;
            }
        }
    }
    Ok(())
}

fn scenario_nonblocking(w: &Communicator) -> R {
    let (n, r) = (w.size(), w.rank());
    let nu = n as usize;
    let d = w.dup().map_err(e)?;
    let s = w.split(r % 2, r).map_err(e)?.expect("defined");
    let smembers: Vec<i32> = (0..n).filter(|q| q % 2 == r % 2).collect();
    for (round, len) in [1usize, 1000, 20_000, 3, 70_000].into_iter().enumerate() {
        let what = |call: &str| format!("{call} round {round} len {len} np {n} rank {r}");
        let root = (round as i32) % n;
        let mut bc = if r == root {
            (0..len).map(|i| enc(root, 0, i)).collect()
        } else {
            vec![0u64; len]
        };
        let a1: Vec<u64> = (0..len).map(|i| h(r, i, 1)).collect();
        let mut o1 = vec![0u64; len];
        let a2: Vec<i32> = (0..len).map(|i| (h(r, i, 2) % 1000) as i32).collect();
        let mut o2 = vec![0i32; len];
        let mut o3 = vec![0u64; len];
        let mut rd = vec![0u64; if d.rank() == root { len } else { 0 }];
        let g1: Vec<u64> = (0..len).map(|i| enc(r, 5, i)).collect();
        let mut ag = vec![0u64; len * nu];
        let ta: Vec<u64> = (0..n)
            .flat_map(|q| (0..len).map(move |i| enc(r, q, i)))
            .collect();
        let mut at = vec![0u64; len * nu];
        let mut gt = vec![0u64; if r == root { len * nu } else { 0 }];
        let sc_src: Vec<u64> = if r == root {
            (0..n)
                .flat_map(|q| (0..len).map(move |i| enc(root, q, i)))
                .collect()
        } else {
            Vec::new()
        };
        let mut sc = vec![0u64; len];
        let mut scn = vec![0i32; len];
        let mut sa = vec![0u64; len];
        let p2p: Vec<u64> = (0..len).map(|i| enc(r, 9, i)).collect();
        let mut p2pr = vec![0u64; len];
        let mut x = [r as u64 + 1];
        {
            let mut reqs: Vec<Option<Request<'_>>> = vec![
                Some(w.ibarrier().map_err(e)?),
                Some(d.ibcast(&mut bc[..], root).map_err(e)?),
                Some(w.iallreduce(&a1[..], &mut o1[..], Op::Sum).map_err(e)?),
                Some(w.irecv(&mut p2pr[..], (r + n - 1) % n, 0).map_err(e)?),
                Some(s.iallreduce(&a1[..], &mut sa[..], Op::Bxor).map_err(e)?),
                Some(w.iallreduce(&a2[..], &mut o2[..], Op::Max).map_err(e)?),
                Some(d.ireduce(&a1[..], &mut rd[..], Op::Sum, root).map_err(e)?),
                Some(w.iallgather(&g1[..], &mut ag[..]).map_err(e)?),
                Some(d.ialltoall(&ta[..], &mut at[..]).map_err(e)?),
                Some(w.isend(&p2p[..], (r + 1) % n, 0).map_err(e)?),
                Some(w.igather(&g1[..], &mut gt[..], root).map_err(e)?),
                Some(d.iscatter(&sc_src[..], &mut sc[..], root).map_err(e)?),
                Some(w.iscan(&a2[..], &mut scn[..], Op::Sum).map_err(e)?),
                Some(d.iallreduce_in_place(&mut x[..], Op::Prod).map_err(e)?),
                Some(w.iallreduce(&a1[..], &mut o3[..], Op::Bor).map_err(e)?),
            ];
            // complete in reverse order by polling, the middle one by wait
            let mid = reqs.len() / 2;
            let rq = reqs[mid].take().expect("present");
            let mut spins = 0u64;
            while reqs.iter().any(Option::is_some) {
                for slot in reqs.iter_mut().rev() {
                    if let Some(q) = slot {
                        if q.test().map_err(e)?.is_some() {
                            *slot = None;
                        }
                    }
                }
                spins += 1;
                if spins.is_multiple_of(1000) {
                    std::thread::yield_now();
                }
            }
            rq.wait().map_err(e)?;
        }
        let exp: Vec<u64> = (0..len).map(|i| enc(root, 0, i)).collect();
        same(&what("ibcast"), &bc, &exp)?;
        let exp: Vec<u64> = (0..len)
            .map(|i| (0..n).fold(0u64, |a, q| a.wrapping_add(h(q, i, 1))))
            .collect();
        same(&what("iallreduce sum"), &o1, &exp)?;
        if d.rank() == root {
            same(&what("ireduce"), &rd, &exp)?;
        }
        let exp: Vec<u64> = (0..len)
            .map(|i| (0..n).fold(0u64, |a, q| a | h(q, i, 1)))
            .collect();
        same(&what("iallreduce bor"), &o3, &exp)?;
        let exp: Vec<u64> = (0..len)
            .map(|i| smembers.iter().fold(0u64, |a, &q| a ^ h(q, i, 1)))
            .collect();
        same(&what("iallreduce bxor on split"), &sa, &exp)?;
        let exp: Vec<i32> = (0..len)
            .map(|i| (0..n).map(|q| (h(q, i, 2) % 1000) as i32).max().unwrap())
            .collect();
        same(&what("iallreduce max"), &o2, &exp)?;
        let exp: Vec<i32> = (0..len)
            .map(|i| (0..=r).map(|q| (h(q, i, 2) % 1000) as i32).sum())
            .collect();
        same(&what("iscan"), &scn, &exp)?;
        let exp: Vec<u64> = (0..n)
            .flat_map(|q| (0..len).map(move |i| enc(q, 5, i)))
            .collect();
        same(&what("iallgather"), &ag, &exp)?;
        if r == root {
            same(&what("igather"), &gt, &exp)?;
        }
        let exp: Vec<u64> = (0..n)
            .flat_map(|q| (0..len).map(move |i| enc(q, r, i)))
            .collect();
        same(&what("ialltoall"), &at, &exp)?;
        let exp: Vec<u64> = (0..len).map(|i| enc(root, r, i)).collect();
        same(&what("iscatter"), &sc, &exp)?;
        let exp: Vec<u64> = (0..len).map(|i| enc((r + n - 1) % n, 9, i)).collect();
        same(&what("p2p during collectives"), &p2pr, &exp)?;
        let exp: u64 = (1..=n as u64).product();
        ensure!(
            x[0] == exp,
            "{}: {} expected {exp}",
            what("iallreduce_in_place prod"),
            x[0]
        );
    }
    // blocking collectives while non-blocking ones are outstanding, on the
    // same communicator and on others
    for len in [1usize, 3000, 40_000] {
        let a: Vec<u64> = (0..len).map(|i| h(r, i, 12)).collect();
        let mut o = vec![0u64; len];
        let mut ob = vec![0u64; len];
        let ib = w.ibarrier().map_err(e)?;
        let rq = w.iallreduce(&a[..], &mut o[..], Op::Bxor).map_err(e)?;
        let mut x = vec![r as u64; len];
        s.allreduce_in_place(&mut x[..], Op::Max).map_err(e)?;
        let mut b = if r == n - 1 {
            a.clone()
        } else {
            vec![0u64; len]
        };
        w.bcast(&mut b[..], n - 1).map_err(e)?;
        d.allreduce(&a[..], &mut ob[..], Op::Bxor).map_err(e)?;
        rq.wait().map_err(e)?;
        ib.wait().map_err(e)?;
        let exp: Vec<u64> = (0..len)
            .map(|i| (0..n).fold(0, |acc, q| acc ^ h(q, i, 12)))
            .collect();
        let what =
            |call: &str| format!("{call} with others outstanding, len {len} np {n} rank {r}");
        same(&what("iallreduce"), &o, &exp)?;
        same(&what("dup allreduce"), &ob, &exp)?;
        let smax = *smembers.iter().max().expect("member") as u64;
        ensure!(x.iter().all(|&v| v == smax), "{}", what("split allreduce"));
        let eb: Vec<u64> = (0..len).map(|i| h(n - 1, i, 12)).collect();
        same(&what("bcast"), &b, &eb)?;
    }
    // many outstanding small ones on one communicator, waited newest first
    let ins: Vec<[u64; 1]> = (0..64).map(|k| [r as u64 * 64 + k]).collect();
    let mut outs = vec![[0u64; 1]; 64];
    {
        let mut reqs = Vec::new();
        for (i, o) in ins.iter().zip(outs.iter_mut()) {
            reqs.push(w.iallreduce(&i[..], &mut o[..], Op::Sum).map_err(e)?);
        }
        while let Some(q) = reqs.pop() {
            q.wait().map_err(e)?;
        }
    }
    for (k, o) in outs.iter().enumerate() {
        let exp: u64 = (0..n as u64).map(|q| q * 64 + k as u64).sum();
        ensure!(
            o[0] == exp,
            "64 outstanding iallreduce #{k}: {} expected {exp}",
            o[0]
        );
    }
    // Non-blocking collectives are ordered apart from the blocking ones, as
    // MPICH and Open MPI match them and as mpi4py's own test_ulfm relies on:
    // each root starts a small iallreduce before a barrier that the others
    // enter first, and they start theirs after it.
    for root in 0..n {
        let mut x = [1u32 << (r % 32)];
        w.barrier().map_err(e)?;
        {
            let q = if r == root {
                let q = w.iallreduce_in_place(&mut x[..], Op::Bor).map_err(e)?;
                w.barrier().map_err(e)?;
                q
            } else {
                w.barrier().map_err(e)?;
                w.iallreduce_in_place(&mut x[..], Op::Bor).map_err(e)?
            };
            q.wait().map_err(e)?;
        }
        let exp = (0..n).fold(0u32, |a, q| a | 1 << (q % 32));
        ensure!(
            x[0] == exp,
            "iallreduce started across a barrier, root {root}: {:#x} expected {exp:#x}",
            x[0]
        );
    }
    // Starting a non-blocking collective is local: rank 0 starts many
    // before rank 1 has started any, and only then sends what rank 1 waits
    // for before it starts its own.
    if n > 1 {
        let many = 40u64;
        let ins: Vec<[u32; 2]> = (0..many).map(|k| [r as u32, k as u32]).collect();
        let mut outs = vec![[0u32; 2]; many as usize];
        let mut token = [0u8];
        if r == 1 {
            w.recv(&mut token[..], 0, 77).map_err(e)?;
        }
        let mut reqs = Vec::new();
        for (i, o) in ins.iter().zip(outs.iter_mut()) {
            reqs.push(w.iallreduce(&i[..], &mut o[..], Op::Max).map_err(e)?);
        }
        if r == 0 {
            w.send(&token[..], 1, 77).map_err(e)?;
        }
        gmpi::wait_all(reqs).map_err(e)?;
        for (k, o) in outs.iter().enumerate() {
            ensure!(
                *o == [n as u32 - 1, k as u32],
                "iallreduce #{k} started ahead of the others: {o:?}"
            );
        }
    }
    // Sizes around 1 KiB and 16 KiB (the shared-memory collectives' tiny
    // limit and slot), outstanding together with a blocking collective
    // between them, waited in mixed order.
    {
        let lens = [1usize, 100, 129, 1000, 2046, 2047, 2100];
        let ins: Vec<Vec<u64>> = lens
            .iter()
            .map(|&l| (0..l).map(|i| h(r, i, 21)).collect())
            .collect();
        let mut outs: Vec<Vec<u64>> = lens.iter().map(|&l| vec![0u64; l]).collect();
        let mut inplace: Vec<u64> = (0..1500).map(|i| h(r, i, 22)).collect();
        let mut mid = [r as u64];
        let mut reqs = Vec::new();
        for (i, o) in ins.iter().zip(outs.iter_mut()) {
            reqs.push(Some(w.iallreduce(&i[..], &mut o[..], Op::Bxor).map_err(e)?));
        }
        reqs.push(Some(
            w.iallreduce_in_place(&mut inplace[..], Op::Sum)
                .map_err(e)?,
        ));
        w.allreduce_in_place(&mut mid[..], Op::Max).map_err(e)?;
        ensure!(
            mid[0] == n as u64 - 1,
            "allreduce amid iallreduces: {}",
            mid[0]
        );
        for k in [3usize, 0, 7, 5, 1, 6, 2, 4] {
            reqs[k].take().expect("once").wait().map_err(e)?;
        }
        drop(reqs);
        for (l, o) in lens.iter().zip(&outs) {
            let exp: Vec<u64> = (0..*l)
                .map(|i| (0..n).fold(0, |acc, q| acc ^ h(q, i, 21)))
                .collect();
            same(&format!("iallreduce of {l} u64 np {n} rank {r}"), o, &exp)?;
        }
        let exp: Vec<u64> = (0..1500)
            .map(|i| (0..n).fold(0u64, |acc, q| acc.wrapping_add(h(q, i, 22))))
            .collect();
        same(
            &format!("iallreduce in place of 1500 u64 np {n} rank {r}"),
            &inplace,
            &exp,
        )?;
    }
    nonblocking_vector_and_in_place(w, &d)
}

/// Every non-blocking `v` collective and every in-place non-blocking form,
/// all outstanding at once on two communicators, each checked against the
/// closed form its blocking counterpart is checked against.
fn nonblocking_vector_and_in_place(w: &Communicator, d: &Communicator) -> R {
    let (n, r) = (w.size(), w.rank());
    let nu = n as usize;
    // Displacements with gaps of 2 (and 1 before the first block).
    let vd = |counts: &[i32]| -> (Vec<i32>, usize) {
        let mut ds = Vec::new();
        let mut off = 1usize;
        for &c in counts {
            ds.push(off as i32);
            off += c as usize + 2;
        }
        (ds, off)
    };
    for (round, len) in [1usize, 600, 9000].into_iter().enumerate() {
        let what = |call: &str| format!("{call} round {round} len {len} np {n} rank {r}");
        let root = (round as i32 + 1) % n;
        let cnt = |q: i32| (len + q as usize) as i32;
        let counts: Vec<i32> = (0..n).map(cnt).collect();
        let (displs, tot) = vd(&counts);
        // Rank q's block (tagged `salt`) at its displacement, SENT in gaps.
        let laid = |salt: i32, only: Option<i32>| -> Vec<u64> {
            let mut x = vec![SENT; tot];
            for q in (0..n).filter(|&q| only.is_none_or(|o| o == q)) {
                for i in 0..cnt(q) as usize {
                    x[displs[q as usize] as usize + i] = enc(q, salt, i);
                }
            }
            x
        };
        let mine =
            |salt: i32| -> Vec<u64> { (0..cnt(r) as usize).map(|i| enc(r, salt, i)).collect() };
        // n equal blocks of len: block q tagged (q, salt), or only ours.
        let flat = |salt: i32, only: Option<i32>| -> Vec<u64> {
            (0..n)
                .flat_map(|q| {
                    (0..len).map(move |i| {
                        if only.is_none_or(|o| o == q) {
                            enc(q, salt, i)
                        } else {
                            0
                        }
                    })
                })
                .collect()
        };
        let at_root = |v: Vec<u64>| if r == root { v } else { Vec::new() };

        // gatherv / scatterv / allgatherv, plain and in place
        let gv_send = mine(20);
        let mut gv = at_root(vec![SENT; tot]);
        let mut gvi = if r == root {
            laid(21, Some(root))
        } else {
            mine(21)
        };
        let sv_send = at_root(laid(22, None));
        let mut sv = vec![0u64; cnt(r) as usize];
        let mut svi = if r == root {
            laid(23, None)
        } else {
            vec![0u64; cnt(r) as usize]
        };
        let agv_send = mine(24);
        let mut agv = vec![SENT; tot];
        let mut agvi = laid(25, Some(r));
        // gather / scatter / allgather / alltoall in place
        let mut gi = if r == root {
            flat(26, Some(root))
        } else {
            (0..len).map(|i| enc(r, 26, i)).collect()
        };
        let mut si = if r == root {
            flat(27, None)
        } else {
            vec![0u64; len]
        };
        let mut agi = flat(28, Some(r));
        let mut ati: Vec<u64> = (0..n)
            .flat_map(|q| (0..len).map(move |i| enc(r, q, i)))
            .collect();
        // alltoallv / alltoallw: count from a to b, some 0
        let c2 = |a: i32, b: i32| -> usize {
            if (a + b) % 3 == 2 {
                0
            } else {
                len + ((a + 2 * b) % 3) as usize
            }
        };
        let sc: Vec<i32> = (0..n).map(|q| c2(r, q) as i32).collect();
        let rc: Vec<i32> = (0..n).map(|q| c2(q, r) as i32).collect();
        let (sd, stot) = vd(&sc);
        let (rd, rtot) = vd(&rc);
        let mut a2a_send = vec![SENT; stot];
        for q in 0..n {
            for i in 0..sc[q as usize] as usize {
                a2a_send[sd[q as usize] as usize + i] = enc(r, q, i);
            }
        }
        let mut a2a_exp = vec![SENT; rtot];
        for q in 0..n {
            for i in 0..rc[q as usize] as usize {
                a2a_exp[rd[q as usize] as usize + i] = enc(q, r, i);
            }
        }
        let mut atv = vec![SENT; rtot];
        let mut atw = vec![SENT; rtot];
        let t: Vec<UserDatatype> = (0..n).map(|_| UserDatatype::from(u64::DATATYPE)).collect();
        let bytes = |ds: &[i32]| -> Vec<isize> { ds.iter().map(|&x| x as isize * 8).collect() };
        let (sdb, rdb) = (bytes(&sd), bytes(&rd));
        // in place needs symmetric counts
        let sym: Vec<i32> = (0..n)
            .map(|q| {
                if (r + q) % 3 == 2 {
                    0
                } else {
                    (len + ((r * q) % 3) as usize) as i32
                }
            })
            .collect();
        let (yd, ytot) = vd(&sym);
        let ydb = bytes(&yd);
        let sym_in = |from: i32, to: i32| -> Vec<u64> {
            let mut x = vec![SENT; ytot];
            for q in 0..n {
                for i in 0..sym[q as usize] as usize {
                    let (a, b) = if from < 0 { (q, to) } else { (from, q) };
                    x[yd[q as usize] as usize + i] = enc(a, b, i);
                }
            }
            x
        };
        let mut atvi = sym_in(r, 0);
        let mut atwi = sym_in(r, 0);
        // reductions
        let a: Vec<u64> = (0..len).map(|i| h(r, i, 30)).collect();
        let sum_to = |hi: i32, salt: u64, i: usize| {
            (0..hi).fold(0u64, |acc, q| acc.wrapping_add(h(q, i, salt)))
        };
        let mut rdi = a.clone();
        let a2: Vec<i32> = (0..len).map(|i| (h(r, i, 32) % 1000) as i32).collect();
        let mut sci = a2.clone();
        let mut exs = vec![-1i32; len];
        let mut exsi = a2.clone();
        let rsc: Vec<i32> = (0..n).map(|q| (len / 2 + q as usize) as i32).collect();
        let rtot2: usize = rsc.iter().map(|&c| c as usize).sum();
        let rs_in: Vec<u64> = (0..rtot2).map(|i| h(r, i, 31)).collect();
        let mut rs = vec![0u64; rsc[r as usize] as usize];
        let mut rsi = rs_in.clone();
        let rsb_in: Vec<u64> = (0..len * nu).map(|i| h(r, i, 33)).collect();
        let mut rsb = vec![0u64; len];
        let mut rsbi = rsb_in.clone();
        {
            let mut reqs: Vec<Request<'_>> = vec![
                w.igatherv(&gv_send[..], &mut gv[..], &counts, &displs, root)
                    .map_err(e)?,
                d.igatherv_in_place(&mut gvi[..], &counts, &displs, root)
                    .map_err(e)?,
                w.iscatterv(&sv_send[..], &counts, &displs, &mut sv[..], root)
                    .map_err(e)?,
                d.iscatterv_in_place(&mut svi[..], &counts, &displs, root)
                    .map_err(e)?,
                w.iallgatherv(&agv_send[..], &mut agv[..], &counts, &displs)
                    .map_err(e)?,
                d.iallgatherv_in_place(&mut agvi[..], &counts, &displs)
                    .map_err(e)?,
                w.igather_in_place(&mut gi[..], root).map_err(e)?,
                d.iscatter_in_place(&mut si[..], root).map_err(e)?,
                w.iallgather_in_place(&mut agi[..]).map_err(e)?,
                d.ialltoall_in_place(&mut ati[..]).map_err(e)?,
                w.ialltoallv(&a2a_send[..], &sc, &sd, &mut atv[..], &rc, &rd)
                    .map_err(e)?,
                d.ialltoallw(&a2a_send[..], &sc, &sdb, &t, &mut atw[..], &rc, &rdb, &t)
                    .map_err(e)?,
                w.ialltoallv_in_place(&mut atvi[..], &sym, &yd).map_err(e)?,
                d.ialltoallw_in_place(&mut atwi[..], &sym, &ydb, &t)
                    .map_err(e)?,
                w.ireduce_in_place(&mut rdi[..], Op::Sum, root).map_err(e)?,
                d.iscan_in_place(&mut sci[..], Op::Sum).map_err(e)?,
                w.iexscan(&a2[..], &mut exs[..], Op::Sum).map_err(e)?,
                d.iexscan_in_place(&mut exsi[..], Op::Sum).map_err(e)?,
                w.ireduce_scatter(&rs_in[..], &mut rs[..], &rsc, Op::Sum)
                    .map_err(e)?,
                d.ireduce_scatter_in_place(&mut rsi[..], &rsc, Op::Sum)
                    .map_err(e)?,
                w.ireduce_scatter_block(&rsb_in[..], &mut rsb[..], Op::Sum)
                    .map_err(e)?,
                d.ireduce_scatter_block_in_place(&mut rsbi[..], Op::Sum)
                    .map_err(e)?,
            ];
            // newest first on even rounds, oldest first on odd ones
            if round % 2 == 1 {
                reqs.reverse();
            }
            while let Some(q) = reqs.pop() {
                q.wait().map_err(e)?;
            }
        }
        if r == root {
            same(&what("igatherv"), &gv, &laid(20, None))?;
            same(&what("igatherv_in_place"), &gvi, &laid(21, None))?;
            same(
                &what("iscatterv_in_place (root untouched)"),
                &svi,
                &laid(23, None),
            )?;
            same(&what("igather_in_place"), &gi, &flat(26, None))?;
            same(
                &what("iscatter_in_place (root untouched)"),
                &si,
                &flat(27, None),
            )?;
            let exp: Vec<u64> = (0..len).map(|i| sum_to(n, 30, i)).collect();
            same(&what("ireduce_in_place"), &rdi, &exp)?;
        } else {
            same(&what("iscatterv_in_place"), &svi, &mine(23))?;
            let exp: Vec<u64> = (0..len).map(|i| enc(r, 27, i)).collect();
            same(&what("iscatter_in_place"), &si, &exp)?;
        }
        same(&what("iscatterv"), &sv, &mine(22))?;
        same(&what("iallgatherv"), &agv, &laid(24, None))?;
        same(&what("iallgatherv_in_place"), &agvi, &laid(25, None))?;
        same(&what("iallgather_in_place"), &agi, &flat(28, None))?;
        let exp: Vec<u64> = (0..n)
            .flat_map(|q| (0..len).map(move |i| enc(q, r, i)))
            .collect();
        same(&what("ialltoall_in_place"), &ati, &exp)?;
        same(&what("ialltoallv"), &atv, &a2a_exp)?;
        same(&what("ialltoallw"), &atw, &a2a_exp)?;
        same(&what("ialltoallv_in_place"), &atvi, &sym_in(-1, r))?;
        same(&what("ialltoallw_in_place"), &atwi, &sym_in(-1, r))?;
        let pre = |hi: i32| -> Vec<i32> {
            (0..len)
                .map(|i| (0..hi).map(|q| (h(q, i, 32) % 1000) as i32).sum())
                .collect()
        };
        same(&what("iscan_in_place"), &sci, &pre(r + 1))?;
        if r == 0 {
            same(&what("iexscan (rank 0 untouched)"), &exs, &vec![-1i32; len])?;
        } else {
            same(&what("iexscan"), &exs, &pre(r))?;
            same(&what("iexscan_in_place"), &exsi, &pre(r))?;
        }
        let off: usize = rsc[..r as usize].iter().map(|&c| c as usize).sum();
        let exp: Vec<u64> = (0..rsc[r as usize] as usize)
            .map(|i| sum_to(n, 31, off + i))
            .collect();
        same(&what("ireduce_scatter"), &rs, &exp)?;
        same(&what("ireduce_scatter_in_place"), &rsi[..exp.len()], &exp)?;
        let exp: Vec<u64> = (0..len)
            .map(|i| sum_to(n, 33, r as usize * len + i))
            .collect();
        same(&what("ireduce_scatter_block"), &rsb, &exp)?;
        same(&what("ireduce_scatter_block_in_place"), &rsbi[..len], &exp)?;
    }
    Ok(())
}

// ------------------------------------------------------------------ errors

fn expect_class<T>(what: &str, res: gmpi::Result<T>, class: ErrorClass) -> R {
    match res {
        Ok(_) => Err(format!("{what}: succeeded, expected {}", class.name())),
        Err(x) if x.class() == class => Ok(()),
        Err(x) => Err(format!(
            "{what}: got {} ({x}), expected {}",
            x.class().name(),
            class.name()
        )),
    }
}

/// The world still works: an allreduce gives the right answer.
fn still_ok(w: &Communicator, after: &str) -> R {
    let mut x = [1u64];
    w.allreduce_in_place(&mut x[..], Op::Sum)
        .map_err(|x| format!("after {after}: {x}"))?;
    ensure!(
        x[0] == w.size() as u64,
        "after {after}: allreduce gave {}",
        x[0]
    );
    Ok(())
}

fn scenario_errors(w: &Communicator) -> R {
    let (n, r) = (w.size(), w.rank());
    let mut b = [0u64; 4];
    expect_class(
        "bcast root = size",
        w.bcast(&mut b[..], n),
        ErrorClass::Root,
    )?;
    expect_class("bcast root = -1", w.bcast(&mut b[..], -1), ErrorClass::Root)?;
    expect_class(
        "reduce root = size",
        w.reduce(&b[..], &mut vec![0u64; 4][..], Op::Sum, n),
        ErrorClass::Root,
    )?;
    expect_class(
        "gather root = size + 3",
        w.gather(&b[..], &mut vec![0u64; 4 * n as usize][..], n + 3),
        ErrorClass::Root,
    )?;
    expect_class(
        "ibcast root = size",
        w.ibcast(&mut b[..], n).map(|_| ()),
        ErrorClass::Root,
    )?;
    still_ok(w, "invalid roots")?;

    // Different counts on different ranks: the shared-memory path (on by
    // default for small messages) sees every rank's size and fails them all
    // alike, instead of panicking or hanging.
    if n > 1 && std::env::var("GMPI_COLL_SHM").map_or(true, |v| v != "0") {
        let k = if r == 0 { 4 } else { 3 };
        let src = vec![1u32; k];
        let mut dst = vec![0u32; k];
        expect_class(
            "allreduce with rank 0 passing 4 elements, others 3",
            w.allreduce(&src[..], &mut dst[..], Op::Sum),
            ErrorClass::Count,
        )?;
        let mut g = vec![0u32; k * n as usize];
        expect_class(
            "allgather with rank 0 passing 4 elements, others 3",
            w.allgather(&src[..], &mut g[..]),
            ErrorClass::Count,
        )?;
        let mut a2a = vec![0u32; k * n as usize];
        expect_class(
            "alltoall with rank 0 passing 4 elements per rank, others 3",
            w.alltoall(&vec![1u32; k * n as usize][..], &mut a2a[..]),
            ErrorClass::Count,
        )?;
        // One rank small enough for the tiny allreduce (1 KiB), the others
        // not: both paths exchange the same header, so all fail alike.
        let k = if r == 0 { 3 } else { 300 };
        let src = vec![1u32; k];
        let mut dst = vec![0u32; k];
        expect_class(
            "allreduce with rank 0 passing 3 elements, others 300",
            w.allreduce(&src[..], &mut dst[..], Op::Sum),
            ErrorClass::Count,
        )?;
        // Different ops (rank 0 in place, the others not).
        let mut io = [1u32; 2];
        let res = if r == 0 {
            w.allreduce_in_place(&mut io[..], Op::Max)
        } else {
            w.allreduce(&[1u32; 2][..], &mut io[..], Op::Sum)
        };
        expect_class(
            "allreduce with rank 0 passing MAX, others SUM",
            res,
            ErrorClass::Op,
        )?;
        // Small bcasts and reduces are one-way without coll_check (the root
        // writes, the others read; a reduce's root alone waits): what a rank
        // reads it checks against its own arguments. A bcast whose root
        // sends fewer bytes than the others expect fails every reader.
        // (`coll_check` fails every rank alike, the root included.)
        let check = std::env::var("GMPI_COLL_CHECK").is_ok_and(|v| v == "1" || v == "true");
        let k = if r == 1 { 2 } else { 3 };
        let res = w.bcast(&mut vec![7u64; k][..], 1);
        if r == 1 && !check {
            res.map_err(|x| format!("bcast root sending 2 elements: {x}"))?;
        } else {
            expect_class(
                "bcast of 3 elements from a root sending 2",
                res,
                ErrorClass::Count,
            )?;
        }
        // Ranks 0 and 1 each name the other as root, the rest rank 0: no
        // root broadcasts at all, and every rank says so instead of waiting.
        let mut bb = [7u64; 2];
        expect_class(
            "bcast in which no rank is the root its readers name",
            w.bcast(&mut bb[..], i32::from(r == 0)),
            ErrorClass::Root,
        )?;
        // A reduce: the ranks that take themselves for its root see the
        // others' roots.
        let res = w.reduce(&[1u32][..], &mut [0u32][..], Op::Sum, i32::from(r != 0));
        if r < 2 || check {
            expect_class(
                "reduce with rank 0 naming root 0, others root 1",
                res,
                ErrorClass::Root,
            )?;
        } else {
            res.map_err(|x| format!("reduce to root 1 as a non-root: {x}"))?;
        }
        // Small gathers and scatters are one-way too: a gather's root checks
        // every rank's size, a scatter's readers the root's.
        let nu = n as usize;
        let mine = vec![r as u32; if r == 1 { 2 } else { 1 }];
        let mut out = vec![0u32; if r == 0 { nu } else { 0 }];
        let res = w.gather(&mine[..], &mut out[..], 0);
        if r == 0 || check {
            expect_class("gather with rank 1 sending 2 of 1", res, ErrorClass::Count)?;
        } else {
            res.map_err(|x| format!("gather as a sender: {x}"))?;
        }
        let blocks = vec![7u32; if r == 0 { nu } else { 0 }];
        let mut got = vec![0u32; if r == 1 { 2 } else { 1 }];
        let res = w.scatter(&blocks[..], &mut got[..], 0);
        if r == 1 || check {
            expect_class(
                "scatter with rank 1 receiving 2 of 1",
                res,
                ErrorClass::Count,
            )?;
        } else {
            res.map_err(|x| format!("scatter of 1 element: {x}"))?;
            ensure!(got == [7], "scatter gave {got:?}");
        }
        still_ok(w, "mismatched counts and roots across ranks")?;
        // The same above a slot, where the area carries the data in chunks
        // (up to GMPI_COLL_SHM_PIPELINE_MAX): every rank fails as it does in
        // one slot, and reads as many of the area's epochs as the others
        // publish, so the communicator's next collectives still work.
        let th = Th::from_env();
        let big = th.shm / 4 + 1000;
        if 2 * big * 4 <= th.pipeline {
            let k = if r == 0 { big + 1 } else { big };
            expect_class(
                "allreduce in chunks with rank 0 passing one element more",
                w.allreduce(&vec![1u32; k][..], &mut vec![0u32; k][..], Op::Sum),
                ErrorClass::Count,
            )?;
            expect_class(
                "allgather in chunks with rank 0 passing one element more",
                w.allgather(&vec![1u32; k][..], &mut vec![0u32; k * n as usize][..]),
                ErrorClass::Count,
            )?;
            let res = w.reduce(&vec![1u32; k][..], &mut vec![0u32; k][..], Op::Sum, 0);
            expect_class(
                "reduce in chunks with rank 0 passing one element more",
                res,
                ErrorClass::Count,
            )?;
            still_ok(w, "mismatched counts in chunks")?;
            // A root sending twice the chunks its readers expect, half,
            // chunks to readers of one tiny slot, and one tiny slot to
            // readers of chunks.
            for (rk, other) in [(2 * big, big), (big, 2 * big), (big, 10), (10, big)] {
                let k = if r == 1 { rk } else { other };
                let res = w.bcast(&mut vec![7u32; k][..], 1);
                if r == 1 && !check {
                    res.map_err(|x| format!("bcast root sending {k} elements: {x}"))?;
                } else {
                    expect_class(
                        &format!("bcast of {other} elements in chunks from a root sending {rk}"),
                        res,
                        ErrorClass::Count,
                    )?;
                }
                still_ok(w, "a bcast in chunks of a different size")?;
            }
            let mut x = vec![1u32; big];
            w.allreduce_in_place(&mut x[..], Op::Sum)
                .map_err(|x| format!("allreduce in chunks after the mismatches: {x}"))?;
            ensure!(
                x.iter().all(|&v| v == n as u32),
                "allreduce in chunks after the mismatches gave {:?}",
                &x[..4]
            );
        }
        // v forms: a block longer than the receiver's count truncates at the
        // receiver (the root of a gatherv, rank 1 of an alltoallv); the
        // others succeed.
        let nu = n as usize;
        let counts = vec![2i32; nu];
        let displs: Vec<i32> = (0..n).map(|q| 2 * q).collect();
        let mine = vec![r as u32; if r == 1 { 3 } else { 2 }];
        let mut out = vec![0u32; if r == 0 { 2 * nu } else { 0 }];
        let res = w.gatherv(&mine[..], &mut out[..], &counts, &displs, 0);
        if r == 0 {
            expect_class(
                "gatherv with rank 1 sending 3 of 2",
                res,
                ErrorClass::Truncate,
            )?;
        } else {
            res.map_err(|x| format!("gatherv as a sender: {x}"))?;
        }
        // A block too big for the area from a rank the root expects a tiny
        // block from: it moves by point-to-point all the same, and
        // truncates there.
        let th = Th::from_env();
        let mine = vec![r as u32; if r == 1 { th.shm / 4 + 1000 } else { 2 }];
        let res = w.gatherv(&mine[..], &mut out[..], &counts, &displs, 0);
        if r == 0 {
            expect_class(
                "gatherv with rank 1 sending a block above the slot, of 2 expected",
                res,
                ErrorClass::Truncate,
            )?;
        } else {
            res.map_err(|x| format!("gatherv as a sender of a large block: {x}"))?;
        }
        // A scatterv whose root gives rank 1 two elements more than it
        // expects: rank 1 fails, the others get their blocks.
        let sc: Vec<i32> = (0..n).map(|q| if q == 1 { 3 } else { 1 }).collect();
        let sd: Vec<i32> = (0..n).map(|q| 3 * q).collect();
        let send = vec![9u32; if r == 0 { 3 * nu } else { 0 }];
        let mut got = [0u32; 1];
        let res = w.scatterv(&send[..], &sc, &sd, &mut got[..], 0);
        if r == 1 {
            expect_class(
                "scatterv giving rank 1 three elements of 1",
                res,
                ErrorClass::Truncate,
            )?;
        } else {
            res.map_err(|x| format!("scatterv of 1 element: {x}"))?;
            ensure!(got == [9], "scatterv gave {got:?}");
        }
        let sc: Vec<i32> = (0..n)
            .map(|q| if r == 0 && q == 1 { 2 } else { 1 })
            .collect();
        let sd: Vec<i32> = (0..n).map(|q| 2 * q).collect();
        let rc = vec![1i32; nu];
        let send = vec![7u32; 2 * nu];
        let mut recv = vec![0u32; 2 * nu];
        let res = w.alltoallv(&send[..], &sc, &sd, &mut recv[..], &rc, &sd);
        if r == 1 {
            expect_class(
                "alltoallv with rank 0 sending 2 of 1",
                res,
                ErrorClass::Truncate,
            )?;
        } else {
            res.map_err(|x| format!("alltoallv: {x}"))?;
        }
        still_ok(w, "truncated v forms")?;
    }

    // mismatched buffer sizes (checked on every rank)
    expect_class(
        "allreduce 3 vs 4",
        w.allreduce(&[0u64; 3][..], &mut [0u64; 4][..], Op::Sum),
        ErrorClass::Count,
    )?;
    expect_class(
        "allgather 2 vs 3n",
        w.allgather(&[0u64; 2][..], &mut vec![0u64; 3 * n as usize][..]),
        ErrorClass::Count,
    )?;
    if n > 1 {
        expect_class(
            "alltoall recv not a multiple of size",
            w.alltoall(
                &vec![0u64; n as usize][..],
                &mut vec![0u64; n as usize + 1][..],
            ),
            ErrorClass::Count,
        )?;
    }
    still_ok(w, "mismatched sizes")?;

    // invalid op for a type
    expect_class(
        "allreduce f64 Band",
        w.allreduce(&[1.0f64][..], &mut [0.0f64][..], Op::Band),
        ErrorClass::Op,
    )?;
    expect_class(
        "allreduce bool Sum",
        w.allreduce(&[true][..], &mut [false][..], Op::Sum),
        ErrorClass::Op,
    )?;
    expect_class(
        "allreduce i32 MinLoc",
        w.allreduce(&[1i32][..], &mut [0i32][..], Op::MinLoc),
        ErrorClass::Op,
    )?;
    expect_class(
        "reduce f64 Bxor",
        w.reduce(&[1.0f64][..], &mut [0.0f64][..], Op::Bxor, 0),
        ErrorClass::Op,
    )?;
    expect_class(
        "scan f32 Lor",
        w.scan(&[1.0f32][..], &mut [0.0f32][..], Op::Lor),
        ErrorClass::Op,
    )?;
    expect_class(
        "allreduce Replace",
        w.allreduce(&[1i32][..], &mut [0i32][..], Op::Replace),
        ErrorClass::Op,
    )?;
    still_ok(w, "invalid ops")?;

    // negative counts in v-forms
    let nu = n as usize;
    let mut neg = vec![1i32; nu];
    neg[nu - 1] = -1;
    let displs: Vec<i32> = (0..n).collect();
    let mine = vec![0u64; if r == n - 1 { 0 } else { 1 }];
    expect_class(
        "allgatherv negative count",
        w.allgatherv(&mine[..], &mut vec![0u64; nu][..], &neg, &displs),
        ErrorClass::Count,
    )?;
    expect_class(
        "alltoallv negative count",
        w.alltoallv(
            &vec![0u64; nu][..],
            &neg,
            &displs,
            &mut vec![0u64; nu][..],
            &neg,
            &displs,
        ),
        ErrorClass::Count,
    )?;
    expect_class(
        "reduce_scatter negative count",
        w.reduce_scatter(&vec![0u64; nu][..], &mut [0u64; 1][..], &neg, Op::Sum),
        ErrorClass::Count,
    )?;
    // gatherv/scatterv check counts only at the root: use a one-rank comm
    let me = w.split(r, 0).map_err(e)?.expect("defined");
    expect_class(
        "gatherv negative count (self comm)",
        me.gatherv(&[0u64; 1][..], &mut [0u64; 2][..], &[-1], &[0], 0),
        ErrorClass::Count,
    )?;
    expect_class(
        "scatterv negative count (self comm)",
        me.scatterv(&[0u64; 2][..], &[-2], &[0], &mut [0u64; 1][..], 0),
        ErrorClass::Count,
    )?;
    let t = vec![UserDatatype::from(u64::DATATYPE); nu];
    let zd = vec![0isize; nu];
    expect_class(
        "alltoallw negative count",
        w.alltoallw(
            &vec![0u64; nu][..],
            &neg,
            &zd,
            &t,
            &mut vec![0u64; nu][..],
            &neg,
            &zd,
            &t,
        ),
        ErrorClass::Count,
    )?;
    still_ok(w, "negative counts")?;

    // uncommitted datatype
    let unc = UserDatatype::vector(2, 1, 2, &UserDatatype::from(u64::DATATYPE)).map_err(e)?;
    let src = [0u64; 4];
    let res = TypedBuf::new(&src[..], 1, &unc).and_then(|tb| w.send(&tb, r, 0));
    expect_class("send with an uncommitted type", res, ErrorClass::Type)?;
    let ut = vec![unc.clone(); nu];
    let ones = vec![1i32; nu];
    expect_class(
        "alltoallw with uncommitted types",
        w.alltoallw(
            &vec![0u64; 4 * nu][..],
            &ones,
            &zd,
            &ut,
            &mut vec![0u64; 4 * nu][..],
            &ones,
            &zd,
            &ut,
        ),
        ErrorClass::Type,
    )?;
    expect_class(
        "pack with an uncommitted type",
        unc.pack(1, &[0u8; 32], 0),
        ErrorClass::Type,
    )?;
    still_ok(w, "uncommitted types")?;

    // freed communicator
    let d = w.dup().map_err(e)?;
    d.free().map_err(e)?;
    expect_class("barrier on freed", d.barrier(), ErrorClass::Comm)?;
    expect_class(
        "allreduce on freed",
        d.allreduce(&[1u64][..], &mut [0u64][..], Op::Sum),
        ErrorClass::Comm,
    )?;
    expect_class(
        "bcast on freed",
        d.bcast(&mut [0u64][..], 0),
        ErrorClass::Comm,
    )?;
    expect_class(
        "iallreduce on freed",
        d.iallreduce(&[1u64][..], &mut [0u64][..], Op::Sum)
            .map(|_| ()),
        ErrorClass::Comm,
    )?;
    expect_class("send on freed", d.send(&[1u64][..], r, 0), ErrorClass::Comm)?;
    expect_class("dup of freed", d.dup(), ErrorClass::Comm)?;
    expect_class("split of freed", d.split(0, 0), ErrorClass::Comm)?;
    expect_class("free twice", d.free(), ErrorClass::Comm)?;
    expect_class("free world", w.free(), ErrorClass::Comm)?;
    still_ok(w, "freed communicator")?;

    // mismatched roots with GMPI_COLL_CHECK=1: every rank returns Root
    let check = std::env::var("GMPI_COLL_CHECK").is_ok_and(|v| v == "1" || v == "true");
    if check && n > 1 {
        let mut b = [7u64; 16];
        expect_class(
            "bcast with per-rank roots (coll_check)",
            w.bcast(&mut b[..], r % 2),
            ErrorClass::Root,
        )?;
        let mut o = [0u64; 16];
        expect_class(
            "reduce with per-rank roots (coll_check)",
            w.reduce(&b[..], &mut o[..], Op::Sum, if r == 0 { 1 } else { 0 }),
            ErrorClass::Root,
        )?;
        expect_class(
            "allreduce with per-rank sizes (coll_check)",
            w.allreduce(
                &vec![1u64; 4 + r as usize][..],
                &mut vec![0u64; 4 + r as usize][..],
                Op::Sum,
            ),
            ErrorClass::Count,
        )?;
        still_ok(w, "mismatched roots (coll_check)")?;
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).cloned().unwrap_or_else(|| "all".into());
    let big = !args.iter().any(|a| a == "nobig");
    let u = match gmpi::init() {
        Ok(u) => u,
        Err(x) => {
            eprintln!("gmpi-coll: init: {x}");
            std::process::exit(2);
        }
    };
    let w = u.world();
    let (r, n) = (w.rank(), w.size());
    let t0 = std::time::Instant::now();
    let res = match which.as_str() {
        "all" => scenario_all(&w, big),
        "comms" => scenario_comms(&w),
        "types" => scenario_types(&w),
        "nonblocking" => scenario_nonblocking(&w),
        "errors" => scenario_errors(&w),
        "inter" => scenario_inter(&w),
        other => Err(format!("unknown scenario {other:?}")),
    };
    match res {
        Ok(()) => {
            println!(
                "gmpi-coll {which}: OK on rank {r} of {n} ({:.2}s)",
                t0.elapsed().as_secs_f64()
            );
            drop(u);
        }
        Err(msg) => {
            eprintln!("gmpi-coll {which}: FAILED on rank {r} of {n}: {msg}");
            // Peers may be blocked in a collective this rank will never join.
            gmpi::abort(1, &format!("gmpi-coll {which} failed on rank {r}"));
        }
    }
}

/// Intercommunicators: the world split into a low half A (`n / 2` ranks)
/// and a high half B, joined by `intercomm_create`; point-to-point across
/// the groups, every collective in both directions (blocking and not),
/// dup/split/create/merge, and the calls intercommunicators refuse.
fn scenario_inter(w: &Communicator) -> R {
    let (n, wr) = (w.size(), w.rank());
    if n < 2 {
        return Ok(());
    }
    let a = n / 2;
    let low = wr < a;
    let (my_size, their_size) = if low { (a, n - a) } else { (n - a, a) };
    // World rank of rank q of the remote group.
    let their_world = |q: i32| if low { a + q } else { q };
    let local = w.split(i32::from(!low), wr).map_err(e)?.expect("a color");
    let inter = local
        .intercomm_create(0, Some(w), if low { a } else { 0 }, 17)
        .map_err(e)?;
    let me = inter.rank();
    ensure!(inter.is_inter() && !w.is_inter(), "is_inter");
    ensure!(
        inter.size() == my_size
            && inter.remote_size() == Some(their_size)
            && w.remote_size().is_none(),
        "sizes: {} / {:?}",
        inter.size(),
        inter.remote_size()
    );
    ensure!(me == local.rank(), "rank {me} vs local {}", local.rank());
    let rg = inter.remote_group().expect("remote group");
    ensure!(
        rg.world_ranks()
            == (0..their_size)
                .map(|q| their_world(q) as u32)
                .collect::<Vec<_>>(),
        "remote group {:?}",
        rg.world_ranks()
    );

    // Point-to-point: ranks name the remote group.
    let mine = [wr];
    let mut reqs = Vec::new();
    for q in 0..their_size {
        reqs.push(inter.isend(&mine[..], q, 3).map_err(e)?);
    }
    for q in 0..their_size {
        let mut got = [0i32];
        let st = inter.recv(&mut got[..], q, 3).map_err(e)?;
        ensure!(
            got[0] == their_world(q) && st.source() == q,
            "p2p from remote {q}: {} (source {})",
            got[0],
            st.source()
        );
    }
    for r in reqs {
        r.wait().map_err(e)?;
    }
    let bad = inter.send(&mine[..], their_size, 3);
    ensure!(
        matches!(&bad, Err(x) if x.class() == ErrorClass::Rank),
        "send to remote size: {bad:?}"
    );

    inter.barrier().map_err(e)?;
    inter.ibarrier().map_err(e)?.wait().map_err(e)?;

    // bcast from A's rank 0, then from B's last rank (non-blocking).
    let roots = [(true, 0), (false, n - a - 1)];
    for (k, &(root_low, root)) in roots.iter().enumerate() {
        let mut v = [0i64; 5];
        let arg = if low == root_low {
            if me == root {
                v = [11, 22, 33, 44, 55 + k as i64];
                gmpi::ROOT
            } else {
                gmpi::PROC_NULL
            }
        } else {
            root
        };
        if k == 0 {
            inter.bcast(&mut v[..], arg).map_err(e)?;
        } else {
            inter
                .ibcast(&mut v[..], arg)
                .map_err(e)?
                .wait()
                .map_err(e)?;
        }
        if low != root_low || me == root {
            ensure!(v == [11, 22, 33, 44, 55 + k as i64], "bcast {k}: {v:?}");
        }
    }

    // allreduce: each group gets the other group's sum (and max).
    let x: Vec<i64> = (0..4).map(|i| (wr as i64 + 1) * 10 + i).collect();
    let theirs: Vec<i32> = (0..their_size).map(their_world).collect();
    let exp: Vec<i64> = (0..4)
        .map(|i| theirs.iter().map(|&q| (q as i64 + 1) * 10 + i).sum())
        .collect();
    let mut out = vec![0i64; 4];
    inter.allreduce(&x[..], &mut out[..], Op::Sum).map_err(e)?;
    same("inter allreduce", &out, &exp)?;
    let mut out2 = vec![0i64; 4];
    inter
        .iallreduce(&x[..], &mut out2[..], Op::Max)
        .map_err(e)?
        .wait()
        .map_err(e)?;
    let expmax: Vec<i64> = (0..4)
        .map(|i| (*theirs.iter().max().unwrap() as i64 + 1) * 10 + i)
        .collect();
    same("inter iallreduce max", &out2, &expmax)?;

    // reduce to B's rank 0 from A, then to A's last rank from B.
    for (root_low, root) in [(false, 0), (true, a - 1)] {
        let mut out = vec![0i64; 4];
        let arg = if low == root_low {
            if me == root {
                gmpi::ROOT
            } else {
                gmpi::PROC_NULL
            }
        } else {
            root
        };
        inter
            .reduce(&x[..], &mut out[..], Op::Sum, arg)
            .map_err(e)?;
        if low == root_low && me == root {
            same("inter reduce", &out, &exp)?;
        }
    }

    // gather / scatter / their v forms, rooted at A's rank 0.
    let root_arg = if low {
        if me == 0 {
            gmpi::ROOT
        } else {
            gmpi::PROC_NULL
        }
    } else {
        0
    };
    let is_root = low && me == 0;
    let send = [wr, wr * 2];
    let mut g = vec![-1i32; if is_root { 2 * their_size as usize } else { 0 }];
    inter.gather(&send[..], &mut g[..], root_arg).map_err(e)?;
    if is_root {
        let exp: Vec<i32> = theirs.iter().flat_map(|&q| [q, q * 2]).collect();
        same("inter gather", &g, &exp)?;
    }
    // gatherv: remote rank q sends q + 1 values, placed in reverse order.
    let cnts: Vec<i32> = (0..their_size).map(|q| q + 1).collect();
    let mut displs = vec![0i32; their_size as usize];
    let mut off = 0;
    for q in (0..their_size as usize).rev() {
        displs[q] = off;
        off += cnts[q];
    }
    let mine_v: Vec<i32> = (0..=me).map(|i| wr * 100 + i).collect();
    let mut gv = vec![-1i32; if is_root { off as usize } else { 0 }];
    let (c_arg, d_arg): (&[i32], &[i32]) = if is_root {
        (&cnts, &displs)
    } else {
        (&[], &[])
    };
    inter
        .igatherv(&mine_v[..], &mut gv[..], c_arg, d_arg, root_arg)
        .map_err(e)?
        .wait()
        .map_err(e)?;
    if is_root {
        for q in 0..their_size as usize {
            for i in 0..cnts[q] as usize {
                let got = gv[displs[q] as usize + i];
                ensure!(
                    got == theirs[q] * 100 + i as i32,
                    "inter gatherv [{q}][{i}] = {got}"
                );
            }
        }
    }
    let sc: Vec<i32> = (0..3 * their_size).map(|i| 1000 + i).collect();
    let mut sr = [0i32; 3];
    inter
        .scatter(
            if is_root { &sc[..] } else { &[][..] },
            &mut sr[..],
            root_arg,
        )
        .map_err(e)?;
    if !low {
        let b = 3 * me;
        same("inter scatter", &sr, &[1000 + b, 1001 + b, 1002 + b])?;
    }

    // allgather / alltoall / alltoallv across the groups.
    let mut ag = vec![0i32; 2 * their_size as usize];
    inter.allgather(&send[..], &mut ag[..]).map_err(e)?;
    let exp: Vec<i32> = theirs.iter().flat_map(|&q| [q, q * 2]).collect();
    same("inter allgather", &ag, &exp)?;
    let a2a: Vec<i32> = (0..their_size).map(|q| wr * 1000 + q).collect();
    let mut a2r = vec![0i32; their_size as usize];
    inter
        .ialltoall(&a2a[..], &mut a2r[..])
        .map_err(e)?
        .wait()
        .map_err(e)?;
    let exp: Vec<i32> = theirs.iter().map(|&q| q * 1000 + me).collect();
    same("inter alltoall", &a2r, &exp)?;
    // alltoallv: me sends (q + 1) values to remote q; gets (me + 1) from each.
    let scounts: Vec<i32> = (0..their_size).map(|q| q + 1).collect();
    let sdispls: Vec<i32> = scounts
        .iter()
        .scan(0, |s, &c| {
            let d = *s;
            *s += c;
            Some(d)
        })
        .collect();
    let sbuf: Vec<i32> = (0..their_size)
        .flat_map(|q| (0..=q).map(move |i| wr * 1000 + q * 10 + i))
        .collect();
    let rcounts = vec![me + 1; their_size as usize];
    let rdispls: Vec<i32> = (0..their_size).map(|q| q * (me + 1)).collect();
    let mut rbuf = vec![0i32; ((me + 1) * their_size) as usize];
    inter
        .alltoallv(
            &sbuf[..],
            &scounts,
            &sdispls,
            &mut rbuf[..],
            &rcounts,
            &rdispls,
        )
        .map_err(e)?;
    for (q, &tw) in theirs.iter().enumerate() {
        for i in 0..=me {
            let got = rbuf[(q as i32 * (me + 1) + i) as usize];
            ensure!(
                got == tw * 1000 + me * 10 + i,
                "inter alltoallv from {q}[{i}] = {got}"
            );
        }
    }

    // reduce_scatter_block: both sides reduce vectors of a × b elements;
    // A ranks get blocks of b, B ranks blocks of a.
    let total = (a * (n - a)) as usize;
    let v: Vec<i64> = (0..total).map(|i| wr as i64 * 7 + i as i64).collect();
    let per = total / my_size as usize;
    let mut rb = vec![0i64; per];
    inter
        .reduce_scatter_block(&v[..], &mut rb[..], Op::Sum)
        .map_err(e)?;
    let exp: Vec<i64> = (0..per)
        .map(|j| {
            let i = me as usize * per + j;
            theirs.iter().map(|&q| q as i64 * 7 + i as i64).sum()
        })
        .collect();
    same("inter reduce_scatter_block", &rb, &exp)?;
    // reduce_scatter: local rank 0 gets everything.
    let mut counts = vec![0i32; my_size as usize];
    counts[0] = total as i32;
    let mut rs = vec![0i64; if me == 0 { total } else { 0 }];
    inter
        .ireduce_scatter(&v[..], &mut rs[..], &counts, Op::Sum)
        .map_err(e)?
        .wait()
        .map_err(e)?;
    if me == 0 {
        let exp: Vec<i64> = (0..total)
            .map(|i| theirs.iter().map(|&q| q as i64 * 7 + i as i64).sum())
            .collect();
        same("inter reduce_scatter", &rs, &exp)?;
    }

    // What an intercommunicator refuses.
    let mut sbuf = [0i64; 4];
    let r = inter.scan(&x[..], &mut sbuf[..], Op::Sum);
    ensure!(
        matches!(&r, Err(x) if x.class() == ErrorClass::Comm),
        "scan on an intercommunicator: {r:?}"
    );
    let r = inter.allreduce_in_place(&mut sbuf[..], Op::Sum);
    ensure!(
        matches!(&r, Err(x) if x.class() == ErrorClass::Arg),
        "in place on an intercommunicator: {r:?}"
    );
    let r = inter.bcast(&mut sbuf[..], their_size);
    ensure!(
        matches!(&r, Err(x) if x.class() == ErrorClass::Root),
        "bad root: {r:?}"
    );

    // dup, split, create, split_shared_opt, compare.
    let d = inter.dup().map_err(e)?;
    ensure!(
        inter.compare(&d) == Comparison::Congruent,
        "dup compare {:?}",
        inter.compare(&d)
    );
    ensure!(w.compare(&inter) == Comparison::Unequal, "world vs inter");
    let mut dv = [0i64; 4];
    d.allreduce(&x[..], &mut dv[..], Op::Sum).map_err(e)?;
    same(
        "dup allreduce",
        &dv,
        &(0..4)
            .map(|i| theirs.iter().map(|&q| (q as i64 + 1) * 10 + i).sum())
            .collect::<Vec<i64>>(),
    )?;
    // Split by local parity: the remote side of the same parity.
    let s = inter.split(me % 2, -me).map_err(e)?;
    let my_par = (0..my_size).filter(|q| q % 2 == me % 2).count() as i32;
    let their_par = (0..their_size).filter(|q| q % 2 == me % 2).count() as i32;
    match &s {
        None => ensure!(
            their_par == 0,
            "split: no communicator though the remote side has {their_par}"
        ),
        Some(s) => {
            ensure!(
                s.size() == my_par && s.remote_size() == Some(their_par),
                "split sizes {} {:?}",
                s.size(),
                s.remote_size()
            );
            // key -me reverses the order
            ensure!(s.rank() == my_par - 1 - me / 2, "split rank {}", s.rank());
            s.barrier().map_err(e)?;
        }
    }
    let first = inter.group().incl(&[0]).map_err(e)?;
    let c = inter.create(&first).map_err(e)?;
    ensure!(c.is_some() == (me == 0), "create: member {}", c.is_some());
    if let Some(c) = &c {
        ensure!(c.size() == 1 && c.remote_size() == Some(1), "create sizes");
        let mut t = [0i32];
        c.sendrecv(&[wr][..], 0, 5, &mut t[..], 0, 5).map_err(e)?;
        ensure!(t[0] == their_world(0), "create sendrecv {}", t[0]);
    }
    let sh = inter
        .split_shared_opt(me, true)
        .map_err(e)?
        .expect("one node");
    ensure!(
        sh.size() == my_size && sh.remote_size() == Some(their_size),
        "split_shared"
    );

    // merge: A low, so merged ranks are world ranks.
    let m = inter.merge(!low).map_err(e)?;
    ensure!(
        m.size() == n && m.rank() == wr,
        "merge: rank {} size {}",
        m.rank(),
        m.size()
    );
    let mut tot = [0i32];
    m.allreduce(&[wr][..], &mut tot[..], Op::Sum).map_err(e)?;
    ensure!(tot[0] == n * (n - 1) / 2, "merged allreduce {}", tot[0]);
    // Both passing the same `high`: the group with world rank 0 first.
    let m2 = inter.merge(true).map_err(e)?;
    ensure!(m2.rank() == wr, "merge(true, true): rank {}", m2.rank());
    inter.free().map_err(e)?;
    w.barrier().map_err(e)
}
