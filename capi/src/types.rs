//! Derived datatypes and packing: the type constructors
//! (`MPI_Type_contiguous` … `MPI_Type_create_darray`), commit and free,
//! dup, sizes and extents, names, decoding (`MPI_Type_get_envelope`,
//! `MPI_Type_get_contents`), `MPI_Type_match_size`, `MPI_Pack`/`MPI_Unpack`
//! and the `"external32"` representation (`MPI_Pack_external` and friends).
//!
//! The runtime's [`UserDatatype`] does the type-map work; this module keeps
//! beside each handle how the type was made (its [`Envelope`], in the order
//! `MPI_Type_get_contents` returns it) and a tree of [`Node`]s that holds
//! the constituent types themselves, so decoding still works after the
//! user freed the handles a type was built from, and so `external32` can
//! walk the type signature down to the predefined types.
//!
//! `MPI_Type_create_darray` is built the way the standard describes it
//! (MPI-4.0 §5.1.4): per dimension a contiguous/hvector (block) or an
//! hvector plus a struct for a trailing partial block (cyclic), then a
//! struct that places the local array and a resize to the global extent.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use gmpi::{Error, ErrorClass, Order, UserDatatype};

use crate::abi::*;
use crate::ptr;
use crate::resolve;
use crate::tables::*;

/// Longest type signature (runs of one predefined type) `external32`
/// conversion builds for one element.
const MAX_SIG_RUNS: usize = 1 << 24;

// ---- the construction tree ----

/// One constituent type of a derived type.
#[derive(Debug, Clone)]
enum Part {
    /// A predefined type (or a user handle gmpi has no tree for).
    Named(MPI_Datatype),
    /// A derived type, kept alive here even if its handle was freed.
    Derived(Arc<Node>),
}

/// How a derived type was made, with its constituent types.
#[derive(Debug)]
struct Node {
    dt: UserDatatype,
    env: Envelope,
    /// The types of `env.types`, in the same order.
    parts: Vec<Part>,
    committed: AtomicBool,
}

/// The tree of every derived type handle this module made.
static NODES: LazyLock<Mutex<HashMap<MPI_Datatype, Arc<Node>>>> = LazyLock::new(Default::default);

/// Names set on predefined datatypes with `MPI_Type_set_name`.
static PREDEF_NAMES: LazyLock<Mutex<HashMap<MPI_Datatype, String>>> =
    LazyLock::new(Default::default);

fn nodes() -> MutexGuard<'static, HashMap<MPI_Datatype, Arc<Node>>> {
    NODES.lock().unwrap_or_else(|p| p.into_inner())
}

fn predef_names() -> MutexGuard<'static, HashMap<MPI_Datatype, String>> {
    PREDEF_NAMES.lock().unwrap_or_else(|p| p.into_inner())
}

use crate::cache;

/// A runtime error, with this process's rank added to the message when the
/// runtime could not name it.
fn ranked(e: Error) -> Error {
    let r = world_rank();
    if r < 0 || e.message().contains("(on rank") {
        return e;
    }
    Error::with_message(e.class(), format!("{} (on rank {r})", e.message()))
}

/// The datatype argument `what` = `h`: the runtime type and the part it is
/// in a construction tree.
fn type_arg(call: &str, what: &str, h: MPI_Datatype) -> Result<(UserDatatype, Part), Error> {
    let dt = resolve::dtype(call, h).map_err(|_| {
        err(
            ErrorClass::Type,
            call,
            match h {
                MPI_DATATYPE_NULL => format!("{what} is MPI_DATATYPE_NULL"),
                MPI_LB | MPI_UB => format!(
                    "{what} is MPI_LB or MPI_UB, which MPI-3 removed (use MPI_Type_create_resized)"
                ),
                _ => format!("{what} = {h:#x} is not a valid datatype"),
            },
        )
    })?;
    Ok((dt.into_owned(), part_of(h)))
}

fn part_of(h: MPI_Datatype) -> Part {
    if resolve::predefined(h).is_some() {
        return Part::Named(h);
    }
    match nodes().get(&h) {
        Some(n) => Part::Derived(n.clone()),
        None => Part::Named(h),
    }
}

/// Register a new derived type and store its handle in `*newtype`.
fn create(
    call: &str,
    newtype: *mut MPI_Datatype,
    dt: Result<UserDatatype, Error>,
    env: Envelope,
    parts: Vec<Part>,
) -> Result<(), Error> {
    let dt = dt.map_err(ranked)?;
    let h = register(dt, env, parts, false);
    if let Err(e) = ptr::write(call, "newtype", newtype, h) {
        free_handle(h);
        return Err(e);
    }
    Ok(())
}

/// Add a type to the table and the tree; its handle.
fn register(
    mut dt: UserDatatype,
    env: Envelope,
    parts: Vec<Part>,
    committed: bool,
) -> MPI_Datatype {
    if committed {
        dt.commit();
    }
    let h = new_type(dt.clone(), env.clone());
    let node = Node {
        dt,
        env,
        parts,
        committed: AtomicBool::new(committed),
    };
    nodes().insert(h, Arc::new(node));
    h
}

/// Remove user type `h` from the table and the tree.
fn free_handle(h: MPI_Datatype) {
    if let Some(i) = decode(Kind::Datatype, h) {
        state().types.remove(i);
    }
    nodes().remove(&h);
}

/// Check that `newtype` can be written before building anything.
fn check_out(call: &str, newtype: *mut MPI_Datatype) -> Result<(), Error> {
    if newtype.is_null() {
        return Err(err(ErrorClass::Arg, call, "newtype is NULL"));
    }
    Ok(())
}

fn env(
    combiner: c_int,
    ints: Vec<c_int>,
    aints: Vec<MPI_Aint>,
    types: Vec<MPI_Datatype>,
) -> Envelope {
    Envelope {
        combiner,
        ints,
        aints,
        counts: Vec::new(),
        types,
    }
}

/// The envelope of a type a `_c` constructor built: its counts and
/// displacements are large counts (MPI 4.0's table of combiners).
fn env_c(
    combiner: c_int,
    ints: Vec<c_int>,
    counts: Vec<MPI_Count>,
    types: Vec<MPI_Datatype>,
) -> Envelope {
    Envelope {
        combiner,
        ints,
        aints: Vec::new(),
        counts,
        types,
    }
}

/// The array argument `what` of `n` entries.
fn arr<'a, T>(call: &str, what: &str, p: *const T, n: usize) -> Result<&'a [T], Error> {
    ptr::slice(call, what, p, n)
}

fn order_arg(call: &str, order: c_int) -> Result<Order, Error> {
    match order {
        MPI_ORDER_C => Ok(Order::C),
        MPI_ORDER_FORTRAN => Ok(Order::Fortran),
        _ => Err(err(
            ErrorClass::Arg,
            call,
            format!("order = {order} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN"),
        )),
    }
}

/// A C `int` out-value: `MPI_UNDEFINED` if `v` does not fit.
fn int_or_undefined(v: usize) -> c_int {
    c_int::try_from(v).unwrap_or(MPI_UNDEFINED)
}

// ---- darray ----

/// Arguments of `MPI_Type_create_darray` shared by the per-dimension steps.
struct Darray<'a> {
    gsizes: &'a [c_int],
    order: Order,
    ext: isize,
}

impl Darray<'_> {
    /// Bytes between consecutive indices of dimension `dim` of the global
    /// array.
    fn stride(&self, dim: usize) -> isize {
        let n = self.gsizes.len();
        let inner: Vec<usize> = match self.order {
            Order::Fortran => (0..dim).collect(),
            Order::C => (dim + 1..n).collect(),
        };
        inner
            .iter()
            .fold(self.ext, |s, &i| s.saturating_mul(self.gsizes[i] as isize))
    }

    /// Whether `dim` varies fastest in memory.
    fn fastest(&self, dim: usize) -> bool {
        match self.order {
            Order::Fortran => dim == 0,
            Order::C => dim == self.gsizes.len() - 1,
        }
    }

    /// A block distribution of dimension `dim` over `nprocs` processes as
    /// seen by the process at `coord`; the new type and the start index.
    fn block(
        &self,
        dim: usize,
        nprocs: c_int,
        coord: c_int,
        darg: c_int,
        old: &UserDatatype,
    ) -> Result<(UserDatatype, i64), Error> {
        let g = self.gsizes[dim] as i64;
        let blk = if darg == MPI_DISTRIBUTE_DFLT_DARG {
            (g + nprocs as i64 - 1) / nprocs as i64
        } else {
            darg as i64
        };
        let mysize = (g - blk * coord as i64).clamp(0, blk) as i32;
        let t = if self.fastest(dim) {
            UserDatatype::contiguous(mysize, old)?
        } else {
            UserDatatype::hvector(mysize, 1, self.stride(dim), old)?
        };
        let start = if mysize == 0 { 0 } else { blk * coord as i64 };
        Ok((t, start))
    }

    /// A cyclic distribution with blocks of `darg` of dimension `dim`.
    fn cyclic(
        &self,
        dim: usize,
        nprocs: c_int,
        coord: c_int,
        darg: c_int,
        old: &UserDatatype,
    ) -> Result<(UserDatatype, i64), Error> {
        let blk = if darg == MPI_DISTRIBUTE_DFLT_DARG {
            1
        } else {
            darg as i64
        };
        let g = self.gsizes[dim] as i64;
        let st = coord as i64 * blk;
        let local = if g - 1 < st {
            0
        } else {
            let span = g - st;
            let period = nprocs as i64 * blk;
            (span / period) * blk + (span % period).min(blk)
        };
        let count = (local / blk) as i32;
        let rem = (local % blk) as i32;
        let stride = (nprocs as isize)
            .saturating_mul(blk as isize)
            .saturating_mul(self.stride(dim));
        let mut t = UserDatatype::hvector(count, blk as i32, stride, old)?;
        if rem > 0 {
            t = UserDatatype::structured(
                &[1, rem],
                &[0, (count as isize).saturating_mul(stride)],
                &[t, old.clone()],
            )?;
        }
        if self.fastest(dim) {
            // Place this process's first block and give the dimension its
            // global extent.
            let disp = (st as isize).saturating_mul(self.ext);
            let placed = UserDatatype::structured(&[1], &[disp], &[t])?;
            let full = self.ext.saturating_mul(g as isize);
            Ok((UserDatatype::resized(&placed, 0, full)?, 0))
        } else {
            Ok((t, if local == 0 { 0 } else { st }))
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn darray(
    call: &str,
    size: c_int,
    rank: c_int,
    gsizes: &[c_int],
    distribs: &[c_int],
    dargs: &[c_int],
    psizes: &[c_int],
    order: Order,
    old: &UserDatatype,
) -> Result<UserDatatype, Error> {
    let arg = |what: String| err(ErrorClass::Arg, call, what);
    if size < 1 {
        return Err(arg(format!("size = {size} is not positive")));
    }
    if rank < 0 || rank >= size {
        return Err(arg(format!("rank = {rank} is not in 0..{size}")));
    }
    let n = gsizes.len();
    let mut procs: i64 = 1;
    for i in 0..n {
        if gsizes[i] < 1 {
            return Err(arg(format!(
                "array_of_gsizes[{i}] = {} is not positive",
                gsizes[i]
            )));
        }
        if psizes[i] < 1 {
            return Err(arg(format!(
                "array_of_psizes[{i}] = {} is not positive",
                psizes[i]
            )));
        }
        procs = procs.saturating_mul(psizes[i] as i64);
        match distribs[i] {
            MPI_DISTRIBUTE_NONE => {
                if psizes[i] != 1 {
                    return Err(arg(format!(
                        "array_of_distribs[{i}] is MPI_DISTRIBUTE_NONE but array_of_psizes[{i}] \
                         = {} is not 1",
                        psizes[i]
                    )));
                }
            }
            MPI_DISTRIBUTE_BLOCK | MPI_DISTRIBUTE_CYCLIC => {
                let d = dargs[i];
                if d != MPI_DISTRIBUTE_DFLT_DARG && d < 1 {
                    return Err(arg(format!(
                        "array_of_dargs[{i}] = {d} is neither positive nor \
                         MPI_DISTRIBUTE_DFLT_DARG"
                    )));
                }
                if distribs[i] == MPI_DISTRIBUTE_BLOCK
                    && d != MPI_DISTRIBUTE_DFLT_DARG
                    && (d as i64) * (psizes[i] as i64) < gsizes[i] as i64
                {
                    return Err(arg(format!(
                        "array_of_dargs[{i}] = {d} times array_of_psizes[{i}] = {} does not \
                         cover array_of_gsizes[{i}] = {}",
                        psizes[i], gsizes[i]
                    )));
                }
            }
            d => {
                return Err(arg(format!(
                    "array_of_distribs[{i}] = {d} is not MPI_DISTRIBUTE_BLOCK, _CYCLIC or _NONE"
                )))
            }
        }
    }
    if procs != size as i64 {
        return Err(arg(format!(
            "the product of array_of_psizes is {procs}, not size = {size}"
        )));
    }
    // The process grid is numbered row-major whatever the array order.
    let mut coords = vec![0; n];
    let (mut left, mut r) = (size as i64, rank as i64);
    for i in 0..n {
        left /= psizes[i] as i64;
        coords[i] = (r / left) as c_int;
        r %= left;
    }
    let d = Darray {
        gsizes,
        order,
        ext: old.extent(),
    };
    let dims: Vec<usize> = match order {
        Order::Fortran => (0..n).collect(),
        Order::C => (0..n).rev().collect(),
    };
    let mut t = old.clone();
    let mut starts = vec![0i64; n];
    for &i in &dims {
        let (nt, st) = match distribs[i] {
            MPI_DISTRIBUTE_BLOCK => d.block(i, psizes[i], coords[i], dargs[i], &t)?,
            MPI_DISTRIBUTE_CYCLIC => d.cyclic(i, psizes[i], coords[i], dargs[i], &t)?,
            _ => d.block(i, 1, 0, MPI_DISTRIBUTE_DFLT_DARG, &t)?,
        };
        // Each dimension's type spans the whole dimension, so that the next
        // dimension's blocks of several copies step over whole rows.
        let full = (gsizes[i] as isize).saturating_mul(t.extent());
        t = UserDatatype::resized(&nt, 0, full)?;
        starts[i] = st;
    }
    // Offset of the local array's first element, and the global extent.
    let mut disp: i128 = 0;
    let mut total: i128 = d.ext as i128;
    for &i in &dims {
        disp += starts[i] as i128 * d.stride(i) as i128;
        total *= gsizes[i] as i128;
    }
    let fit = |v: i128| {
        isize::try_from(v).map_err(|_| arg("the global array's extent overflows MPI_Aint".into()))
    };
    let placed = UserDatatype::structured(&[1], &[fit(disp)?], &[t])?;
    UserDatatype::resized(&placed, 0, fit(total)?)
}

// ---- external32 ----

/// One field of a predefined type in `external32`.
#[derive(Debug, Clone, Copy)]
enum Field {
    /// `n` bytes, byte-swapped to big-endian.
    Swap(usize),
    /// A native integer of `from` bytes stored in `to` (< `from`) bytes.
    Narrow {
        from: usize,
        to: usize,
        signed: bool,
    },
    /// A C `long double` (x86-64: the x87 80-bit extended format in 16
    /// bytes) as external32's 16-byte big-endian IEEE binary128.
    X87,
}

use Field::{Swap, X87};

const LONG_S: Field = Field::Narrow {
    from: 8,
    to: 4,
    signed: true,
};
const LONG_U: Field = Field::Narrow {
    from: 8,
    to: 4,
    signed: false,
};
const WCHAR: Field = Field::Narrow {
    from: 4,
    to: 2,
    signed: false,
};

/// The `external32` layout of predefined type `name` (MPI-4.0 §13.5.2
/// sizes), or `None` if gmpi cannot convert it (`long double` off x86-64).
fn ext32_fields(name: &str) -> Option<&'static [Field]> {
    Some(match name {
        "MPI_CHAR" | "MPI_SIGNED_CHAR" | "MPI_UNSIGNED_CHAR" | "MPI_BYTE" | "MPI_PACKED"
        | "MPI_C_BOOL" | "MPI_CXX_BOOL" | "MPI_CHARACTER" | "MPI_INT8_T" | "MPI_UINT8_T"
        | "MPI_INTEGER1" => &[Swap(1)],
        "MPI_SHORT" | "MPI_UNSIGNED_SHORT" | "MPI_INT16_T" | "MPI_UINT16_T" | "MPI_INTEGER2" => {
            &[Swap(2)]
        }
        "MPI_INT" | "MPI_UNSIGNED" | "MPI_FLOAT" | "MPI_INT32_T" | "MPI_UINT32_T"
        | "MPI_LOGICAL" | "MPI_REAL" | "MPI_INTEGER" | "MPI_REAL4" | "MPI_INTEGER4" => &[Swap(4)],
        "MPI_LONG_LONG_INT"
        | "MPI_UNSIGNED_LONG_LONG"
        | "MPI_DOUBLE"
        | "MPI_INT64_T"
        | "MPI_UINT64_T"
        | "MPI_AINT"
        | "MPI_OFFSET"
        | "MPI_COUNT"
        | "MPI_REAL8"
        | "MPI_INTEGER8"
        | "MPI_DOUBLE_PRECISION" => &[Swap(8)],
        "MPI_WCHAR" => &[WCHAR],
        "MPI_LONG" => &[LONG_S],
        "MPI_UNSIGNED_LONG" => &[LONG_U],
        "MPI_FLOAT_INT"
        | "MPI_2INT"
        | "MPI_2INTEGER"
        | "MPI_2REAL"
        | "MPI_COMPLEX"
        | "MPI_COMPLEX8"
        | "MPI_C_FLOAT_COMPLEX"
        | "MPI_CXX_FLOAT_COMPLEX" => &[Swap(4), Swap(4)],
        "MPI_2DOUBLE_PRECISION"
        | "MPI_DOUBLE_COMPLEX"
        | "MPI_COMPLEX16"
        | "MPI_C_DOUBLE_COMPLEX"
        | "MPI_CXX_DOUBLE_COMPLEX" => &[Swap(8), Swap(8)],
        // The pair types' packed native bytes have no padding (value, then
        // index), as their external32 form.
        "MPI_DOUBLE_INT" => &[Swap(8), Swap(4)],
        "MPI_LONG_INT" => &[LONG_S, Swap(4)],
        "MPI_SHORT_INT" => &[Swap(2), Swap(4)],
        // Fortran's REAL*16 is IEEE binary128 already.
        "MPI_REAL16" => &[Swap(16)],
        "MPI_COMPLEX32" => &[Swap(16), Swap(16)],
        "MPI_LONG_DOUBLE" if cfg!(target_arch = "x86_64") => &[X87],
        "MPI_C_LONG_DOUBLE_COMPLEX" | "MPI_CXX_LONG_DOUBLE_COMPLEX"
            if cfg!(target_arch = "x86_64") =>
        {
            &[X87, X87]
        }
        "MPI_LONG_DOUBLE_INT" if cfg!(target_arch = "x86_64") => &[X87, Swap(4)],
        _ => return None,
    })
}

fn ext_len(f: &[Field]) -> usize {
    f.iter()
        .map(|f| match *f {
            Swap(n) => n,
            Field::Narrow { to, .. } => to,
            Field::X87 => 16,
        })
        .sum()
}

/// The size of a part of a type.
fn part_size(p: &Part) -> usize {
    match p {
        Part::Named(h) => resolve::predefined(*h).map_or(0, |(d, _)| d.size()),
        Part::Derived(n) => n.dt.size(),
    }
}

/// Append `k` copies of signature `s` to `out`, merging runs.
fn push_repeat(
    call: &str,
    out: &mut Vec<(MPI_Datatype, u64)>,
    s: &[(MPI_Datatype, u64)],
    k: u64,
) -> Result<(), Error> {
    let push = |out: &mut Vec<(MPI_Datatype, u64)>, h: MPI_Datatype, n: u64| {
        if n == 0 {
            return;
        }
        match out.last_mut() {
            Some(last) if last.0 == h => last.1 += n,
            _ => out.push((h, n)),
        }
    };
    if k == 0 {
        return Ok(());
    }
    if let [(h, n)] = s {
        push(out, *h, n.saturating_mul(k));
        return Ok(());
    }
    if (s.len() as u64).saturating_mul(k) > (MAX_SIG_RUNS - out.len().min(MAX_SIG_RUNS)) as u64 {
        return Err(err(
            ErrorClass::Unsupported,
            call,
            format!("the type signature has more than {MAX_SIG_RUNS} runs"),
        ));
    }
    for _ in 0..k {
        for &(h, n) in s {
            push(out, h, n);
        }
    }
    Ok(())
}

/// The type signature of one element of `p`: runs of predefined types.
fn signature(call: &str, p: &Part) -> Result<Vec<(MPI_Datatype, u64)>, Error> {
    let node = match p {
        Part::Named(h) => {
            if resolve::predefined(*h).is_none() {
                return Err(err(
                    ErrorClass::Type,
                    call,
                    format!("datatype {h:#x} was not built by MPI_Type_* calls gmpi can decode"),
                ));
            }
            return Ok(vec![(*h, 1)]);
        }
        Part::Derived(n) => n,
    };
    let mut out = Vec::new();
    if node.env.combiner == MPI_COMBINER_STRUCT {
        let count = node.parts.len();
        for (i, part) in node.parts.iter().enumerate() {
            let bl = node.env.ints.get(1 + i).copied().unwrap_or(0).max(0) as u64;
            let s = signature(call, part)?;
            push_repeat(call, &mut out, &s, bl)?;
        }
        debug_assert_eq!(node.env.ints.len(), count + 1);
    } else if let Some(part) = node.parts.first() {
        if let Some(k) = node.dt.size().checked_div(part_size(part)) {
            let s = signature(call, part)?;
            push_repeat(call, &mut out, &s, k as u64)?;
        }
    }
    Ok(out)
}

/// The `external32` conversion of one element of a type: its signature
/// with each predefined type's fields, and the external size.
struct Ext32 {
    runs: Vec<(&'static [Field], u64)>,
    size: usize,
}

fn ext32(call: &str, datarep: *const c_char, p: &Part) -> Result<Ext32, Error> {
    let rep = ptr::cstr(call, "datarep", datarep)?;
    if rep != "external32" {
        return Err(err(
            ErrorClass::Arg,
            call,
            format!("datarep = \"{rep}\" is not \"external32\""),
        ));
    }
    let sig = signature(call, p)?;
    let mut runs = Vec::with_capacity(sig.len());
    let mut size: usize = 0;
    for (h, n) in sig {
        let name = resolve::predefined(h).map_or("?", |(_, name)| name);
        let f = ext32_fields(name).ok_or_else(|| {
            err(
                ErrorClass::Unsupported,
                call,
                format!("gmpi cannot convert {name} to external32"),
            )
        })?;
        size = (ext_len(f) as u64)
            .checked_mul(n)
            .and_then(|b| usize::try_from(b).ok())
            .and_then(|b| b.checked_add(size))
            .ok_or_else(|| err(ErrorClass::Count, call, "the external32 size overflows"))?;
        runs.push((f, n));
    }
    Ok(Ext32 { runs, size })
}

/// Convert `count` elements between native packed bytes and external32;
/// `to_ext` picks the direction.
fn convert(
    call: &str,
    e: &Ext32,
    count: usize,
    native: &mut [u8],
    ext: &mut [u8],
    to_ext: bool,
) -> Result<(), Error> {
    let (mut ni, mut xi) = (0usize, 0usize);
    for _ in 0..count {
        for &(fields, n) in &e.runs {
            for _ in 0..n {
                for f in fields {
                    match *f {
                        Swap(k) => {
                            let (a, b) = (&mut native[ni..ni + k], &mut ext[xi..xi + k]);
                            if to_ext {
                                b.copy_from_slice(a);
                                if cfg!(target_endian = "little") {
                                    b.reverse();
                                }
                            } else {
                                a.copy_from_slice(b);
                                if cfg!(target_endian = "little") {
                                    a.reverse();
                                }
                            }
                            ni += k;
                            xi += k;
                        }
                        Field::X87 => {
                            let (a, b) = (&mut native[ni..ni + 16], &mut ext[xi..xi + 16]);
                            if to_ext {
                                b.copy_from_slice(&x87_to_quad(a).to_be_bytes());
                            } else {
                                let q = u128::from_be_bytes(b[..16].try_into().expect("16 bytes"));
                                a.copy_from_slice(&quad_to_x87(q));
                            }
                            ni += 16;
                            xi += 16;
                        }
                        Field::Narrow { from, to, signed } => {
                            narrow(
                                call,
                                &mut native[ni..ni + from],
                                &mut ext[xi..xi + to],
                                signed,
                                to_ext,
                            )?;
                            ni += from;
                            xi += to;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// An x87 extended value (its 10 bytes little-endian, in a 16-byte slot)
/// as IEEE binary128 bits. Both have a sign, a 15-bit exponent with bias
/// 16383, and (denormals included) the same exponent for the same value;
/// x87 keeps the integer bit explicitly, binary128 has 112 fraction bits
/// to x87's 63, so the conversion is exact.
fn x87_to_quad(b: &[u8]) -> u128 {
    let mant = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let se = u16::from_le_bytes([b[8], b[9]]);
    let frac = u128::from(mant & !(1 << 63)) << 49;
    (u128::from(se) << 112) | frac
}

/// Binary128 bits as an x87 extended value in a 16-byte slot (the fraction's
/// low 49 bits, which x87 cannot hold, are dropped; zero for every value
/// external32 data from an x87 sender carries).
fn quad_to_x87(q: u128) -> [u8; 16] {
    let se = (q >> 112) as u16;
    let exp = se & 0x7fff;
    let frac = ((q >> 49) as u64) & !(1 << 63);
    // The explicit integer bit: set for normal numbers, infinities and NaNs.
    let mant = frac | (u64::from(exp != 0) << 63);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&mant.to_le_bytes());
    out[8..10].copy_from_slice(&se.to_le_bytes());
    out
}

/// Convert one integer between its native width and its narrower
/// big-endian external32 width (8 → 4 or 4 → 2 bytes).
fn narrow(
    call: &str,
    nat: &mut [u8],
    ext: &mut [u8],
    signed: bool,
    to_ext: bool,
) -> Result<(), Error> {
    let from = nat.len();
    let to = ext.len();
    if to_ext {
        let v: i128 = match (from, signed) {
            (8, true) => i64::from_ne_bytes(nat.try_into().expect("8 bytes")) as i128,
            (8, false) => u64::from_ne_bytes(nat.try_into().expect("8 bytes")) as i128,
            (4, true) => i32::from_ne_bytes(nat.try_into().expect("4 bytes")) as i128,
            _ => u32::from_ne_bytes(nat.try_into().expect("4 bytes")) as i128,
        };
        let bits = 8 * to as u32;
        let (lo, hi) = if signed {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        };
        if v < lo || v > hi {
            return Err(err(
                ErrorClass::Other,
                call,
                format!("the value {v} does not fit in the {to}-byte external32 integer"),
            ));
        }
        let be = (v as u64).to_be_bytes();
        ext.copy_from_slice(&be[8 - to..]);
    } else {
        let mut be = [0u8; 8];
        be[8 - to..].copy_from_slice(ext);
        let raw = u64::from_be_bytes(be);
        let v: i64 = if signed {
            let shift = 64 - 8 * to as u32;
            ((raw << shift) as i64) >> shift
        } else {
            raw as i64
        };
        match from {
            8 => nat.copy_from_slice(&v.to_ne_bytes()),
            _ => nat.copy_from_slice(&(v as i32).to_ne_bytes()),
        }
    }
    Ok(())
}

// ---- Type_match_size ----

const REAL_TYPES: &[MPI_Datatype] = &[
    MPI_REAL4,
    MPI_REAL8,
    MPI_REAL16,
    MPI_REAL,
    MPI_DOUBLE_PRECISION,
    MPI_FLOAT,
    MPI_DOUBLE,
    MPI_LONG_DOUBLE,
];
const INTEGER_TYPES: &[MPI_Datatype] = &[
    MPI_INTEGER1,
    MPI_INTEGER2,
    MPI_INTEGER4,
    MPI_INTEGER8,
    MPI_INTEGER,
    MPI_CHAR,
    MPI_SHORT,
    MPI_INT,
    MPI_LONG,
    MPI_LONG_LONG_INT,
];
const COMPLEX_TYPES: &[MPI_Datatype] = &[
    MPI_COMPLEX8,
    MPI_COMPLEX16,
    MPI_COMPLEX32,
    MPI_COMPLEX,
    MPI_DOUBLE_COMPLEX,
    MPI_C_FLOAT_COMPLEX,
    MPI_C_DOUBLE_COMPLEX,
    MPI_C_LONG_DOUBLE_COMPLEX,
];

// ---- the entry points ----

mpi_fn! {
    fn Type_contiguous(count: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        ptr::count(CALL, "count", count)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::contiguous(count, &old);
        create(CALL, newtype, dt, env(MPI_COMBINER_CONTIGUOUS, vec![count], vec![], vec![oldtype]), vec![p])
    }

    fn Type_vector(count: c_int, blocklength: c_int, stride: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        ptr::count(CALL, "count", count)?;
        ptr::count(CALL, "blocklength", blocklength)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::vector(count, blocklength, stride, &old);
        create(CALL, newtype, dt, env(MPI_COMBINER_VECTOR, vec![count, blocklength, stride], vec![], vec![oldtype]), vec![p])
    }

    fn Type_create_hvector(count: c_int, blocklength: c_int, stride: MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        hvector(CALL, count, blocklength, stride, oldtype, newtype)
    }

    fn Type_indexed(count: c_int, array_of_blocklengths: *const c_int, array_of_displacements: *const c_int,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let n = ptr::count(CALL, "count", count)?;
        let bls = arr(CALL, "array_of_blocklengths", array_of_blocklengths, n)?;
        let dps = arr(CALL, "array_of_displacements", array_of_displacements, n)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::indexed(bls, dps, &old);
        let ints = [&[count][..], bls, dps].concat();
        create(CALL, newtype, dt, env(MPI_COMBINER_INDEXED, ints, vec![], vec![oldtype]), vec![p])
    }

    fn Type_create_hindexed(count: c_int, array_of_blocklengths: *const c_int, array_of_displacements: *const MPI_Aint,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        hindexed(CALL, count, array_of_blocklengths, array_of_displacements, oldtype, newtype)
    }

    fn Type_create_indexed_block(count: c_int, blocklength: c_int, array_of_displacements: *const c_int,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let n = ptr::count(CALL, "count", count)?;
        ptr::count(CALL, "blocklength", blocklength)?;
        let dps = arr(CALL, "array_of_displacements", array_of_displacements, n)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::indexed_block(blocklength, dps, &old);
        let ints = [&[count, blocklength][..], dps].concat();
        create(CALL, newtype, dt, env(MPI_COMBINER_INDEXED_BLOCK, ints, vec![], vec![oldtype]), vec![p])
    }

    fn Type_create_hindexed_block(count: c_int, blocklength: c_int, array_of_displacements: *const MPI_Aint,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let n = ptr::count(CALL, "count", count)?;
        ptr::count(CALL, "blocklength", blocklength)?;
        let dps = arr(CALL, "array_of_displacements", array_of_displacements, n)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::hindexed_block(blocklength, dps, &old);
        create(CALL, newtype, dt, env(MPI_COMBINER_HINDEXED_BLOCK, vec![count, blocklength], dps.to_vec(), vec![oldtype]), vec![p])
    }

    fn Type_create_struct(count: c_int, array_of_blocklengths: *const c_int, array_of_displacements: *const MPI_Aint,
        array_of_types: *const MPI_Datatype, newtype: *mut MPI_Datatype) {
        struct_type(CALL, count, array_of_blocklengths, array_of_displacements, array_of_types, newtype)
    }

    fn Type_create_resized(oldtype: MPI_Datatype, lb: MPI_Aint, extent: MPI_Aint, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::resized(&old, lb, extent);
        create(CALL, newtype, dt, env(MPI_COMBINER_RESIZED, vec![], vec![lb, extent], vec![oldtype]), vec![p])
    }

    fn Type_create_subarray(ndims: c_int, array_of_sizes: *const c_int, array_of_subsizes: *const c_int,
        array_of_starts: *const c_int, order: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let n = ptr::len(CALL, "ndims", ndims)?;
        if n == 0 {
            return Err(err(ErrorClass::Arg, CALL, "ndims = 0; it must be positive"));
        }
        let sizes = arr(CALL, "array_of_sizes", array_of_sizes, n)?;
        let subs = arr(CALL, "array_of_subsizes", array_of_subsizes, n)?;
        let starts = arr(CALL, "array_of_starts", array_of_starts, n)?;
        let ord = order_arg(CALL, order)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::subarray(sizes, subs, starts, ord, &old);
        let ints = [&[ndims][..], sizes, subs, starts, &[order]].concat();
        create(CALL, newtype, dt, env(MPI_COMBINER_SUBARRAY, ints, vec![], vec![oldtype]), vec![p])
    }

    fn Type_create_darray(size: c_int, rank: c_int, ndims: c_int, array_of_gsizes: *const c_int,
        array_of_distribs: *const c_int, array_of_dargs: *const c_int, array_of_psizes: *const c_int,
        order: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let n = ptr::len(CALL, "ndims", ndims)?;
        if n == 0 {
            return Err(err(ErrorClass::Arg, CALL, "ndims = 0; it must be positive"));
        }
        let gsizes = arr(CALL, "array_of_gsizes", array_of_gsizes, n)?;
        let distribs = arr(CALL, "array_of_distribs", array_of_distribs, n)?;
        let dargs = arr(CALL, "array_of_dargs", array_of_dargs, n)?;
        let psizes = arr(CALL, "array_of_psizes", array_of_psizes, n)?;
        let ord = order_arg(CALL, order)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = darray(CALL, size, rank, gsizes, distribs, dargs, psizes, ord, &old);
        let ints = [&[size, rank, ndims][..], gsizes, distribs, dargs, psizes, &[order]].concat();
        create(CALL, newtype, dt, env(MPI_COMBINER_DARRAY, ints, vec![], vec![oldtype]), vec![p])
    }

    fn Type_dup(oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let committed = old.is_committed();
        let h = register(old.dup(), env(MPI_COMBINER_DUP, vec![], vec![], vec![oldtype]), vec![p], committed);
        if let Err(e) = cache::copy_type_attrs(oldtype, h) {
            let _ = cache::delete_type_attrs(h);
            free_handle(h);
            return Err(e);
        }
        ptr::write(CALL, "newtype", newtype, h)
    }

    fn Type_commit(datatype: *mut MPI_Datatype) {
        let h = ptr::read(CALL, "datatype", datatype)?;
        type_arg(CALL, "datatype", h)?;
        if resolve::predefined(h).is_some() {
            return Ok(());
        }
        if let Some(i) = decode(Kind::Datatype, h) {
            if let Some(o) = state().types.get_mut(i) {
                o.dt.commit();
            }
        }
        if let Some(n) = nodes().get(&h) {
            n.committed.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    fn Type_free(datatype: *mut MPI_Datatype) {
        let h = ptr::read(CALL, "datatype", datatype)?;
        type_arg(CALL, "datatype", h)?;
        if let Some((_, name)) = resolve::predefined(h) {
            return Err(err(ErrorClass::Type, CALL, format!("datatype is the predefined {name}, which cannot be freed")));
        }
        cache::delete_type_attrs(h)?;
        free_handle(h);
        ptr::write(CALL, "datatype", datatype, MPI_DATATYPE_NULL)
    }

    fn Type_size(datatype: MPI_Datatype, size: *mut c_int) {
        let (t, _) = type_arg(CALL, "datatype", datatype)?;
        ptr::write(CALL, "size", size, int_or_undefined(t.size()))
    }

    fn Type_size_x(datatype: MPI_Datatype, size: *mut MPI_Count) {
        let (t, _) = type_arg(CALL, "datatype", datatype)?;
        ptr::write(CALL, "size", size, t.size() as MPI_Count)
    }

    fn Type_get_extent(datatype: MPI_Datatype, lb: *mut MPI_Aint, extent: *mut MPI_Aint) {
        let (t, _) = type_arg(CALL, "datatype", datatype)?;
        ptr::write(CALL, "lb", lb, t.lb())?;
        ptr::write(CALL, "extent", extent, t.extent())
    }

    fn Type_get_extent_x(datatype: MPI_Datatype, lb: *mut MPI_Count, extent: *mut MPI_Count) {
        let (t, _) = type_arg(CALL, "datatype", datatype)?;
        ptr::write(CALL, "lb", lb, t.lb() as MPI_Count)?;
        ptr::write(CALL, "extent", extent, t.extent() as MPI_Count)
    }

    fn Type_get_true_extent(datatype: MPI_Datatype, true_lb: *mut MPI_Aint, true_extent: *mut MPI_Aint) {
        let (t, _) = type_arg(CALL, "datatype", datatype)?;
        ptr::write(CALL, "true_lb", true_lb, t.true_lb())?;
        ptr::write(CALL, "true_extent", true_extent, t.true_extent())
    }

    fn Type_get_true_extent_x(datatype: MPI_Datatype, true_lb: *mut MPI_Count, true_extent: *mut MPI_Count) {
        let (t, _) = type_arg(CALL, "datatype", datatype)?;
        ptr::write(CALL, "true_lb", true_lb, t.true_lb() as MPI_Count)?;
        ptr::write(CALL, "true_extent", true_extent, t.true_extent() as MPI_Count)
    }

    fn Type_get_name(datatype: MPI_Datatype, type_name: *mut c_char, resultlen: *mut c_int) {
        if datatype == MPI_DATATYPE_NULL {
            // MPI 4.1: the null handle's name.
            return ptr::write_cstr(CALL, "type_name", type_name, MPI_MAX_OBJECT_NAME, "MPI_DATATYPE_NULL", resultlen);
        }
        type_arg(CALL, "datatype", datatype)?;
        if resultlen.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "resultlen is NULL"));
        }
        let name = match resolve::predefined(datatype) {
            Some((_, n)) => predef_names().get(&datatype).cloned().unwrap_or_else(|| n.to_string()),
            None => decode(Kind::Datatype, datatype)
                .and_then(|i| state().types.get(i).map(|o| o.name.clone()))
                .unwrap_or_default(),
        };
        ptr::write_cstr(CALL, "type_name", type_name, MPI_MAX_OBJECT_NAME, &name, resultlen)
    }

    fn Type_set_name(datatype: MPI_Datatype, type_name: *const c_char) {
        type_arg(CALL, "datatype", datatype)?;
        let mut name = ptr::cstr(CALL, "type_name", type_name)?;
        let mut cut = name.len().min(MPI_MAX_OBJECT_NAME - 1);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
        if resolve::predefined(datatype).is_some() {
            predef_names().insert(datatype, name);
            return Ok(());
        }
        if let Some(i) = decode(Kind::Datatype, datatype) {
            if let Some(o) = state().types.get_mut(i) {
                o.name = name;
            }
        }
        Ok(())
    }

    fn Type_get_envelope(datatype: MPI_Datatype, num_integers: *mut c_int, num_addresses: *mut c_int,
        num_datatypes: *mut c_int, combiner: *mut c_int) {
        let (c, ni, na, _, nd) = envelope(CALL, datatype, false)?;
        ptr::write(CALL, "num_integers", num_integers, ni as c_int)?;
        ptr::write(CALL, "num_addresses", num_addresses, na as c_int)?;
        ptr::write(CALL, "num_datatypes", num_datatypes, nd as c_int)?;
        ptr::write(CALL, "combiner", combiner, c)
    }

    fn Type_get_contents(datatype: MPI_Datatype, max_integers: c_int, max_addresses: c_int, max_datatypes: c_int,
        array_of_integers: *mut c_int, array_of_addresses: *mut MPI_Aint, array_of_datatypes: *mut MPI_Datatype) {
        let mi = ptr::len(CALL, "max_integers", max_integers)?;
        let ma = ptr::len(CALL, "max_addresses", max_addresses)?;
        let md = ptr::len(CALL, "max_datatypes", max_datatypes)?;
        contents(CALL, datatype, (mi, array_of_integers), (ma, array_of_addresses), None, md, array_of_datatypes)
    }

    // MPI-4's large-count decoding: the envelope also counts MPI_Count
    // values, which only the `_c` constructors record.
    fn Type_get_envelope_c(datatype: MPI_Datatype, num_integers: *mut MPI_Count, num_addresses: *mut MPI_Count,
        num_large_counts: *mut MPI_Count, num_datatypes: *mut MPI_Count, combiner: *mut c_int) {
        let (c, ni, na, nc, nd) = envelope(CALL, datatype, true)?;
        ptr::write(CALL, "num_integers", num_integers, ni as MPI_Count)?;
        ptr::write(CALL, "num_addresses", num_addresses, na as MPI_Count)?;
        ptr::write(CALL, "num_large_counts", num_large_counts, nc as MPI_Count)?;
        ptr::write(CALL, "num_datatypes", num_datatypes, nd as MPI_Count)?;
        ptr::write(CALL, "combiner", combiner, c)
    }

    fn Type_get_contents_c(datatype: MPI_Datatype, max_integers: MPI_Count, max_addresses: MPI_Count,
        max_large_counts: MPI_Count, max_datatypes: MPI_Count, array_of_integers: *mut c_int,
        array_of_addresses: *mut MPI_Aint, array_of_large_counts: *mut MPI_Count,
        array_of_datatypes: *mut MPI_Datatype) {
        let mi = size_arg(CALL, "max_integers", max_integers)?;
        let ma = size_arg(CALL, "max_addresses", max_addresses)?;
        let mc = size_arg(CALL, "max_large_counts", max_large_counts)?;
        let md = size_arg(CALL, "max_datatypes", max_datatypes)?;
        contents(CALL, datatype, (mi, array_of_integers), (ma, array_of_addresses),
            Some((mc, array_of_large_counts)), md, array_of_datatypes)
    }

    fn Type_match_size(typeclass: c_int, size: c_int, datatype: *mut MPI_Datatype) {
        let list = match typeclass {
            MPI_TYPECLASS_REAL => REAL_TYPES,
            MPI_TYPECLASS_INTEGER => INTEGER_TYPES,
            MPI_TYPECLASS_COMPLEX => COMPLEX_TYPES,
            _ => return Err(err(ErrorClass::Arg, CALL, format!(
                "typeclass = {typeclass} is not MPI_TYPECLASS_REAL, _INTEGER or _COMPLEX"))),
        };
        let found = list.iter().copied().find(|&h| {
            resolve::predefined(h).is_some_and(|(d, _)| d.size() as i64 == size as i64)
        });
        match found {
            Some(h) => ptr::write(CALL, "datatype", datatype, h),
            None => Err(err(ErrorClass::Arg, CALL, format!(
                "no predefined datatype of typeclass {typeclass} has size {size}"))),
        }
    }

    fn Type_create_f90_real(p: c_int, r: c_int, newtype: *mut MPI_Datatype) {
        // The smallest IEEE real with at least `p` decimal digits and
        // decimal exponent range `r` (MPI_UNDEFINED: no requirement).
        let h = f90_pick(CALL, &[(6, 37, MPI_REAL4), (15, 307, MPI_REAL8)], p, r, "real")?;
        ptr::write(CALL, "newtype", newtype, f90_type(MPI_COMBINER_F90_REAL, &[p, r], h))
    }

    fn Type_create_f90_complex(p: c_int, r: c_int, newtype: *mut MPI_Datatype) {
        let h = f90_pick(CALL, &[(6, 37, MPI_COMPLEX8), (15, 307, MPI_COMPLEX16)], p, r, "complex")?;
        ptr::write(CALL, "newtype", newtype, f90_type(MPI_COMBINER_F90_COMPLEX, &[p, r], h))
    }

    fn Type_create_f90_integer(r: c_int, newtype: *mut MPI_Datatype) {
        let h = f90_pick(
            CALL,
            &[(0, 2, MPI_INTEGER1), (0, 4, MPI_INTEGER2), (0, 9, MPI_INTEGER4), (0, 18, MPI_INTEGER8)],
            MPI_UNDEFINED,
            r,
            "integer",
        )?;
        ptr::write(CALL, "newtype", newtype, f90_type(MPI_COMBINER_F90_INTEGER, &[r], h))
    }

    fn Pack(inbuf: *const c_void, incount: c_int, datatype: MPI_Datatype, outbuf: *mut c_void, outsize: c_int,
        position: *mut c_int, comm: MPI_Comm) {
        let outsize = ptr::len(CALL, "outsize", outsize)?;
        let pos = ptr::read(CALL, "position", position)?;
        let end = pack(CALL, inbuf, incount.into(), datatype, outbuf, outsize, pos.into(), comm)?;
        ptr::write(CALL, "position", position, c_int::try_from(end).expect("at most outsize"))
    }

    fn Unpack(inbuf: *const c_void, insize: c_int, position: *mut c_int, outbuf: *mut c_void, outcount: c_int,
        datatype: MPI_Datatype, comm: MPI_Comm) {
        let insize = ptr::len(CALL, "insize", insize)?;
        let pos = ptr::read(CALL, "position", position)?;
        let end = unpack(CALL, inbuf, insize, pos.into(), outbuf, outcount.into(), datatype, comm)?;
        ptr::write(CALL, "position", position, c_int::try_from(end).expect("at most insize"))
    }

    fn Pack_size(incount: c_int, datatype: MPI_Datatype, comm: MPI_Comm, size: *mut c_int) {
        let bytes = pack_size(CALL, incount.into(), datatype, comm)?;
        let bytes = c_int::try_from(bytes).map_err(|_| err(ErrorClass::Count, CALL, format!(
            "{incount} element(s) pack into {bytes} bytes, more than an int can hold")))?;
        ptr::write(CALL, "size", size, bytes)
    }

    fn Pack_external(datarep: *const c_char, inbuf: *const c_void, incount: c_int, datatype: MPI_Datatype,
        outbuf: *mut c_void, outsize: MPI_Aint, position: *mut MPI_Aint) {
        let pos = ptr::read(CALL, "position", position)?;
        let end = pack_external(CALL, datarep, inbuf, incount.into(), datatype, outbuf, outsize as MPI_Count,
            pos as MPI_Count)?;
        ptr::write(CALL, "position", position, end as MPI_Aint)
    }

    fn Unpack_external(datarep: *const c_char, inbuf: *const c_void, insize: MPI_Aint, position: *mut MPI_Aint,
        outbuf: *mut c_void, outcount: c_int, datatype: MPI_Datatype) {
        let pos = ptr::read(CALL, "position", position)?;
        let end = unpack_external(CALL, datarep, inbuf, insize as MPI_Count, pos as MPI_Count, outbuf,
            outcount.into(), datatype)?;
        ptr::write(CALL, "position", position, end as MPI_Aint)
    }

    fn Pack_external_size(datarep: *const c_char, incount: c_int, datatype: MPI_Datatype, size: *mut MPI_Aint) {
        let bytes = pack_external_size(CALL, datarep, incount.into(), datatype)?;
        ptr::write(CALL, "size", size, bytes as MPI_Aint)
    }

    // The large-count (`MPI_Count`) twins: the same code paths, with sizes,
    // extents and positions written at full width.
    fn Type_size_c(datatype: MPI_Datatype, size: *mut MPI_Count) {
        let (t, _) = type_arg(CALL, "datatype", datatype)?;
        ptr::write(CALL, "size", size, t.size() as MPI_Count)
    }

    fn Type_get_extent_c(datatype: MPI_Datatype, lb: *mut MPI_Count, extent: *mut MPI_Count) {
        let (t, _) = type_arg(CALL, "datatype", datatype)?;
        ptr::write(CALL, "lb", lb, t.lb() as MPI_Count)?;
        ptr::write(CALL, "extent", extent, t.extent() as MPI_Count)
    }

    fn Type_get_true_extent_c(datatype: MPI_Datatype, true_lb: *mut MPI_Count, true_extent: *mut MPI_Count) {
        let (t, _) = type_arg(CALL, "datatype", datatype)?;
        ptr::write(CALL, "true_lb", true_lb, t.true_lb() as MPI_Count)?;
        ptr::write(CALL, "true_extent", true_extent, t.true_extent() as MPI_Count)
    }

    fn Pack_c(inbuf: *const c_void, incount: MPI_Count, datatype: MPI_Datatype, outbuf: *mut c_void,
        outsize: MPI_Count, position: *mut MPI_Count, comm: MPI_Comm) {
        let outsize = size_arg(CALL, "outsize", outsize)?;
        let pos = ptr::read(CALL, "position", position)?;
        let end = pack(CALL, inbuf, incount, datatype, outbuf, outsize, pos, comm)?;
        ptr::write(CALL, "position", position, end as MPI_Count)
    }

    fn Unpack_c(inbuf: *const c_void, insize: MPI_Count, position: *mut MPI_Count, outbuf: *mut c_void,
        outcount: MPI_Count, datatype: MPI_Datatype, comm: MPI_Comm) {
        let insize = size_arg(CALL, "insize", insize)?;
        let pos = ptr::read(CALL, "position", position)?;
        let end = unpack(CALL, inbuf, insize, pos, outbuf, outcount, datatype, comm)?;
        ptr::write(CALL, "position", position, end as MPI_Count)
    }

    fn Pack_size_c(incount: MPI_Count, datatype: MPI_Datatype, comm: MPI_Comm, size: *mut MPI_Count) {
        let bytes = pack_size(CALL, incount, datatype, comm)?;
        let bytes = MPI_Count::try_from(bytes).map_err(|_| err(ErrorClass::Count, CALL, format!(
            "{incount} element(s) pack into {bytes} bytes, more than an MPI_Count can hold")))?;
        ptr::write(CALL, "size", size, bytes)
    }

    fn Pack_external_c(datarep: *const c_char, inbuf: *const c_void, incount: MPI_Count, datatype: MPI_Datatype,
        outbuf: *mut c_void, outsize: MPI_Count, position: *mut MPI_Count) {
        let pos = ptr::read(CALL, "position", position)?;
        let end = pack_external(CALL, datarep, inbuf, incount, datatype, outbuf, outsize, pos)?;
        ptr::write(CALL, "position", position, end as MPI_Count)
    }

    fn Unpack_external_c(datarep: *const c_char, inbuf: *const c_void, insize: MPI_Count, position: *mut MPI_Count,
        outbuf: *mut c_void, outcount: MPI_Count, datatype: MPI_Datatype) {
        let pos = ptr::read(CALL, "position", position)?;
        let end = unpack_external(CALL, datarep, inbuf, insize, pos, outbuf, outcount, datatype)?;
        ptr::write(CALL, "position", position, end as MPI_Count)
    }

    fn Pack_external_size_c(datarep: *const c_char, incount: MPI_Count, datatype: MPI_Datatype, size: *mut MPI_Count) {
        let bytes = pack_external_size(CALL, datarep, incount, datatype)?;
        ptr::write(CALL, "size", size, bytes as MPI_Count)
    }
}

// ---- decoding, shared by the int calls and their `_c` twins ----

/// `MPI_Type_get_envelope(_c)`: the combiner and the numbers of ints,
/// addresses and datatypes.
/// The lower bound and extent of `datatype` (the MPI-1 `MPI_Type_extent`,
/// `MPI_Type_lb` and `MPI_Type_ub`).
pub(crate) fn lb_extent(call: &str, datatype: MPI_Datatype) -> Result<(MPI_Aint, MPI_Aint), Error> {
    let (t, _) = type_arg(call, "datatype", datatype)?;
    Ok((t.lb(), t.extent()))
}

/// `MPI_Type_create_hvector` (and the MPI-1 `MPI_Type_hvector`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn hvector(
    call: &str,
    count: c_int,
    blocklength: c_int,
    stride: MPI_Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> Result<(), Error> {
    check_out(call, newtype)?;
    ptr::count(call, "count", count)?;
    ptr::count(call, "blocklength", blocklength)?;
    let (old, p) = type_arg(call, "oldtype", oldtype)?;
    let dt = UserDatatype::hvector(count, blocklength, stride, &old);
    create(
        call,
        newtype,
        dt,
        env(
            MPI_COMBINER_HVECTOR,
            vec![count, blocklength],
            vec![stride],
            vec![oldtype],
        ),
        vec![p],
    )
}

/// `MPI_Type_create_hindexed` (and the MPI-1 `MPI_Type_hindexed`).
pub(crate) fn hindexed(
    call: &str,
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const MPI_Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> Result<(), Error> {
    check_out(call, newtype)?;
    let n = ptr::count(call, "count", count)?;
    let bls = arr(call, "array_of_blocklengths", array_of_blocklengths, n)?;
    let dps = arr(call, "array_of_displacements", array_of_displacements, n)?;
    let (old, p) = type_arg(call, "oldtype", oldtype)?;
    let dt = UserDatatype::hindexed(bls, dps, &old);
    let ints = [&[count][..], bls].concat();
    create(
        call,
        newtype,
        dt,
        env(MPI_COMBINER_HINDEXED, ints, dps.to_vec(), vec![oldtype]),
        vec![p],
    )
}

/// `MPI_Type_create_struct` (and the MPI-1 `MPI_Type_struct`).
pub(crate) fn struct_type(
    call: &str,
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const MPI_Aint,
    array_of_types: *const MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> Result<(), Error> {
    check_out(call, newtype)?;
    let n = ptr::count(call, "count", count)?;
    let bls = arr(call, "array_of_blocklengths", array_of_blocklengths, n)?;
    let dps = arr(call, "array_of_displacements", array_of_displacements, n)?;
    let hs = arr(call, "array_of_types", array_of_types, n)?;
    let mut types = Vec::with_capacity(n);
    let mut parts = Vec::with_capacity(n);
    for (i, &h) in hs.iter().enumerate() {
        let (t, p) = type_arg(call, &format!("array_of_types[{i}]"), h)?;
        types.push(t);
        parts.push(p);
    }
    let dt = UserDatatype::structured(bls, dps, &types);
    let ints = [&[count][..], bls].concat();
    create(
        call,
        newtype,
        dt,
        env(MPI_COMBINER_STRUCT, ints, dps.to_vec(), hs.to_vec()),
        parts,
    )
}

// ---- the large-count (`_c`) constructors ----
//
// Counts and displacements arrive as `MPI_Count`; the type is built as its
// int twin builds it (a count or block length past `int`: MPI_ERR_COUNT;
// types that large are not supported here) and records them as large
// counts, as MPI 4.0 lays out each combiner's `_c` envelope (so only
// `MPI_Type_get_envelope_c`/`_contents_c` decode it, as on MPICH).

/// A `_c` constructor's count argument `what` as an `int`.
fn int_c(call: &str, what: &str, v: MPI_Count, class: ErrorClass) -> Result<c_int, Error> {
    c_int::try_from(v).map_err(|_| {
        err(
            class,
            call,
            format!(
                "{what} = {v} does not fit in an int (types this large are not supported here)"
            ),
        )
    })
}

/// A `_c` constructor's array `what` of `n` counts (or element
/// displacements) as `int`s.
fn ints_c(
    call: &str,
    what: &str,
    p: *const MPI_Count,
    n: usize,
    class: ErrorClass,
) -> Result<Vec<c_int>, Error> {
    arr(call, what, p, n)?
        .iter()
        .enumerate()
        .map(|(i, &v)| int_c(call, &format!("{what}[{i}]"), v, class))
        .collect()
}

/// A `_c` constructor's array `what` of `n` byte displacements.
fn aints_c(call: &str, what: &str, p: *const MPI_Count, n: usize) -> Result<Vec<MPI_Aint>, Error> {
    arr(call, what, p, n)?
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            MPI_Aint::try_from(v).map_err(|_| {
                err(
                    ErrorClass::Arg,
                    call,
                    format!("{what}[{i}] = {v} is not an address offset"),
                )
            })
        })
        .collect()
}

/// `count` (past `int`) copies of `old` in a row: a vector of `count /
/// INT_MAX` blocks of `INT_MAX` and a contiguous remainder, side by side in
/// a struct (how mpi4py builds such a type on an MPI-3 library); its
/// envelope still says `MPI_COMBINER_CONTIGUOUS` with `count`.
fn big_contiguous(call: &str, count: MPI_Count, old: &UserDatatype) -> Result<UserDatatype, Error> {
    let max = MPI_Count::from(c_int::MAX);
    let q = int_c(call, "count", count / max, ErrorClass::Count)?;
    let r = (count % max) as c_int;
    let blocks = UserDatatype::vector(q, c_int::MAX, c_int::MAX, old)?;
    let rest = UserDatatype::contiguous(r, old)?;
    let disp = MPI_Aint::try_from(MPI_Count::from(q) * max)
        .ok()
        .and_then(|n| n.checked_mul(old.extent()))
        .ok_or_else(|| {
            err(
                ErrorClass::Count,
                call,
                format!("count = {count} copies overflow an address"),
            )
        })?;
    UserDatatype::structured(&[1, 1], &[0, disp], &[blocks, rest])
}

/// The number of blocks `count` of a `_c` constructor: non-negative.
fn len_c(call: &str, what: &str, count: MPI_Count) -> Result<(c_int, usize), Error> {
    let c = int_c(call, what, count, ErrorClass::Count)?;
    Ok((c, ptr::count(call, what, c)?))
}

mpi_fn! {
    fn Type_contiguous_c(count: MPI_Count, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        ptr::count(CALL, "count", count)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = match c_int::try_from(count) {
            Ok(c) => UserDatatype::contiguous(c, &old),
            Err(_) => big_contiguous(CALL, count, &old),
        };
        create(CALL, newtype, dt, env_c(MPI_COMBINER_CONTIGUOUS, vec![], vec![count], vec![oldtype]), vec![p])
    }

    fn Type_vector_c(count: MPI_Count, blocklength: MPI_Count, stride: MPI_Count, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let (c, _) = len_c(CALL, "count", count)?;
        let bl = int_c(CALL, "blocklength", blocklength, ErrorClass::Count)?;
        ptr::count(CALL, "blocklength", bl)?;
        let st = int_c(CALL, "stride", stride, ErrorClass::Arg)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::vector(c, bl, st, &old);
        create(CALL, newtype, dt, env_c(MPI_COMBINER_VECTOR, vec![], vec![count, blocklength, stride], vec![oldtype]), vec![p])
    }

    fn Type_create_hvector_c(count: MPI_Count, blocklength: MPI_Count, stride: MPI_Count, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let (c, _) = len_c(CALL, "count", count)?;
        let bl = int_c(CALL, "blocklength", blocklength, ErrorClass::Count)?;
        ptr::count(CALL, "blocklength", bl)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::hvector(c, bl, stride as MPI_Aint, &old);
        create(CALL, newtype, dt, env_c(MPI_COMBINER_HVECTOR, vec![], vec![count, blocklength, stride], vec![oldtype]), vec![p])
    }

    fn Type_indexed_c(count: MPI_Count, array_of_blocklengths: *const MPI_Count, array_of_displacements: *const MPI_Count,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let (_, n) = len_c(CALL, "count", count)?;
        let bls = ints_c(CALL, "array_of_blocklengths", array_of_blocklengths, n, ErrorClass::Count)?;
        let dps = ints_c(CALL, "array_of_displacements", array_of_displacements, n, ErrorClass::Arg)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::indexed(&bls, &dps, &old);
        let counts = [&[count][..], arr(CALL, "array_of_blocklengths", array_of_blocklengths, n)?,
            arr(CALL, "array_of_displacements", array_of_displacements, n)?].concat();
        create(CALL, newtype, dt, env_c(MPI_COMBINER_INDEXED, vec![], counts, vec![oldtype]), vec![p])
    }

    fn Type_create_hindexed_c(count: MPI_Count, array_of_blocklengths: *const MPI_Count,
        array_of_displacements: *const MPI_Count, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let (_, n) = len_c(CALL, "count", count)?;
        let bls = ints_c(CALL, "array_of_blocklengths", array_of_blocklengths, n, ErrorClass::Count)?;
        let dps = aints_c(CALL, "array_of_displacements", array_of_displacements, n)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::hindexed(&bls, &dps, &old);
        let counts = [&[count][..], arr(CALL, "array_of_blocklengths", array_of_blocklengths, n)?,
            arr(CALL, "array_of_displacements", array_of_displacements, n)?].concat();
        create(CALL, newtype, dt, env_c(MPI_COMBINER_HINDEXED, vec![], counts, vec![oldtype]), vec![p])
    }

    fn Type_create_indexed_block_c(count: MPI_Count, blocklength: MPI_Count, array_of_displacements: *const MPI_Count,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let (_, n) = len_c(CALL, "count", count)?;
        let bl = int_c(CALL, "blocklength", blocklength, ErrorClass::Count)?;
        ptr::count(CALL, "blocklength", bl)?;
        let dps = ints_c(CALL, "array_of_displacements", array_of_displacements, n, ErrorClass::Arg)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::indexed_block(bl, &dps, &old);
        let counts = [&[count, blocklength][..], arr(CALL, "array_of_displacements", array_of_displacements, n)?].concat();
        create(CALL, newtype, dt, env_c(MPI_COMBINER_INDEXED_BLOCK, vec![], counts, vec![oldtype]), vec![p])
    }

    fn Type_create_hindexed_block_c(count: MPI_Count, blocklength: MPI_Count, array_of_displacements: *const MPI_Count,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let (_, n) = len_c(CALL, "count", count)?;
        let bl = int_c(CALL, "blocklength", blocklength, ErrorClass::Count)?;
        ptr::count(CALL, "blocklength", bl)?;
        let dps = aints_c(CALL, "array_of_displacements", array_of_displacements, n)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::hindexed_block(bl, &dps, &old);
        let counts = [&[count, blocklength][..], arr(CALL, "array_of_displacements", array_of_displacements, n)?].concat();
        create(CALL, newtype, dt, env_c(MPI_COMBINER_HINDEXED_BLOCK, vec![], counts, vec![oldtype]), vec![p])
    }

    fn Type_create_struct_c(count: MPI_Count, array_of_blocklengths: *const MPI_Count,
        array_of_displacements: *const MPI_Count, array_of_types: *const MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let (_, n) = len_c(CALL, "count", count)?;
        let bls = ints_c(CALL, "array_of_blocklengths", array_of_blocklengths, n, ErrorClass::Count)?;
        let dps = aints_c(CALL, "array_of_displacements", array_of_displacements, n)?;
        let hs = arr(CALL, "array_of_types", array_of_types, n)?;
        let mut types = Vec::with_capacity(n);
        let mut parts = Vec::with_capacity(n);
        for (i, &h) in hs.iter().enumerate() {
            let (t, p) = type_arg(CALL, &format!("array_of_types[{i}]"), h)?;
            types.push(t);
            parts.push(p);
        }
        let dt = UserDatatype::structured(&bls, &dps, &types);
        let counts = [&[count][..], arr(CALL, "array_of_blocklengths", array_of_blocklengths, n)?,
            arr(CALL, "array_of_displacements", array_of_displacements, n)?].concat();
        create(CALL, newtype, dt, env_c(MPI_COMBINER_STRUCT, vec![], counts, hs.to_vec()), parts)
    }

    fn Type_create_subarray_c(ndims: c_int, array_of_sizes: *const MPI_Count, array_of_subsizes: *const MPI_Count,
        array_of_starts: *const MPI_Count, order: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let n = ptr::len(CALL, "ndims", ndims)?;
        if n == 0 {
            return Err(err(ErrorClass::Arg, CALL, "ndims = 0; it must be positive"));
        }
        let sizes = ints_c(CALL, "array_of_sizes", array_of_sizes, n, ErrorClass::Count)?;
        let subs = ints_c(CALL, "array_of_subsizes", array_of_subsizes, n, ErrorClass::Count)?;
        let starts = ints_c(CALL, "array_of_starts", array_of_starts, n, ErrorClass::Arg)?;
        let ord = order_arg(CALL, order)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::subarray(&sizes, &subs, &starts, ord, &old);
        let counts = [arr(CALL, "array_of_sizes", array_of_sizes, n)?, arr(CALL, "array_of_subsizes", array_of_subsizes, n)?,
            arr(CALL, "array_of_starts", array_of_starts, n)?].concat();
        create(CALL, newtype, dt, env_c(MPI_COMBINER_SUBARRAY, vec![ndims, order], counts, vec![oldtype]), vec![p])
    }

    fn Type_create_darray_c(size: c_int, rank: c_int, ndims: c_int, array_of_gsizes: *const MPI_Count,
        array_of_distribs: *const c_int, array_of_dargs: *const c_int, array_of_psizes: *const c_int,
        order: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let n = ptr::len(CALL, "ndims", ndims)?;
        if n == 0 {
            return Err(err(ErrorClass::Arg, CALL, "ndims = 0; it must be positive"));
        }
        let gsizes = ints_c(CALL, "array_of_gsizes", array_of_gsizes, n, ErrorClass::Count)?;
        let distribs = arr(CALL, "array_of_distribs", array_of_distribs, n)?;
        let dargs = arr(CALL, "array_of_dargs", array_of_dargs, n)?;
        let psizes = arr(CALL, "array_of_psizes", array_of_psizes, n)?;
        let ord = order_arg(CALL, order)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = darray(CALL, size, rank, &gsizes, distribs, dargs, psizes, ord, &old);
        let ints = [&[size, rank, ndims][..], distribs, dargs, psizes, &[order]].concat();
        let counts = arr(CALL, "array_of_gsizes", array_of_gsizes, n)?.to_vec();
        create(CALL, newtype, dt, env_c(MPI_COMBINER_DARRAY, ints, counts, vec![oldtype]), vec![p])
    }

    fn Type_create_resized_c(oldtype: MPI_Datatype, lb: MPI_Count, extent: MPI_Count, newtype: *mut MPI_Datatype) {
        check_out(CALL, newtype)?;
        let (old, p) = type_arg(CALL, "oldtype", oldtype)?;
        let dt = UserDatatype::resized(&old, lb as MPI_Aint, extent as MPI_Aint);
        create(CALL, newtype, dt, env_c(MPI_COMBINER_RESIZED, vec![], vec![lb, extent], vec![oldtype]), vec![p])
    }
}

/// The combiner and the numbers of ints, addresses, large counts and types
/// of `datatype`'s envelope. The int calls (`large` false) cannot decode a
/// type with large counts: MPI_ERR_TYPE.
fn envelope(
    call: &str,
    datatype: MPI_Datatype,
    large: bool,
) -> Result<(c_int, usize, usize, usize, usize), Error> {
    type_arg(call, "datatype", datatype)?;
    let e = match user_env(datatype) {
        Some(e) => e,
        None => return Ok((MPI_COMBINER_NAMED, 0, 0, 0, 0)),
    };
    if !large && !e.counts.is_empty() {
        return Err(large_counts_error(call));
    }
    Ok((
        e.combiner,
        e.ints.len(),
        e.aints.len(),
        e.counts.len(),
        e.types.len(),
    ))
}

fn large_counts_error(call: &str) -> Error {
    err(
        ErrorClass::Type,
        call,
        "datatype was built by a large-count (_c) constructor: decode it with \
         MPI_Type_get_envelope_c and MPI_Type_get_contents_c",
    )
}

/// `MPI_Type_get_contents(_c)` into arrays of the given capacities.
fn contents(
    call: &str,
    datatype: MPI_Datatype,
    (mi, array_of_integers): (usize, *mut c_int),
    (ma, array_of_addresses): (usize, *mut MPI_Aint),
    large: Option<(usize, *mut MPI_Count)>,
    md: usize,
    array_of_datatypes: *mut MPI_Datatype,
) -> Result<(), Error> {
    type_arg(call, "datatype", datatype)?;
    let Some(e) = user_env(datatype) else {
        let name = resolve::predefined(datatype).map_or("", |(_, n)| n);
        return Err(err(ErrorClass::Arg, call, format!(
            "datatype is the predefined {name} (combiner MPI_COMBINER_NAMED), which has no contents")));
    };
    let Some((mc, array_of_large_counts)) =
        large.or(e.counts.is_empty().then_some((0, std::ptr::null_mut())))
    else {
        return Err(large_counts_error(call));
    };
    for (what, have, need) in [
        ("max_integers", mi, e.ints.len()),
        ("max_addresses", ma, e.aints.len()),
        ("max_large_counts", mc, e.counts.len()),
        ("max_datatypes", md, e.types.len()),
    ] {
        if have < need {
            return Err(err(
                ErrorClass::Arg,
                call,
                format!("{what} = {have} but the datatype has {need}"),
            ));
        }
    }
    let ints = ptr::slice_mut(call, "array_of_integers", array_of_integers, e.ints.len())?;
    let aints = ptr::slice_mut(
        call,
        "array_of_addresses",
        array_of_addresses,
        e.aints.len(),
    )?;
    let types = ptr::slice_mut(
        call,
        "array_of_datatypes",
        array_of_datatypes,
        e.types.len(),
    )?;
    let counts = ptr::slice_mut(
        call,
        "array_of_large_counts",
        array_of_large_counts,
        e.counts.len(),
    )?;
    ints.copy_from_slice(&e.ints);
    aints.copy_from_slice(&e.aints);
    counts.copy_from_slice(&e.counts);
    // Derived types come back as new handles the caller frees;
    // predefined ones as themselves.
    let parts: Vec<Part> = match nodes().get(&datatype) {
        Some(n) => n.parts.clone(),
        None => e.types.iter().map(|&h| Part::Named(h)).collect(),
    };
    for (k, (&h, p)) in e.types.iter().zip(parts).enumerate() {
        types[k] = match p {
            Part::Derived(n) => register(
                n.dt.clone(),
                n.env.clone(),
                n.parts.clone(),
                n.committed.load(Ordering::Relaxed),
            ),
            Part::Named(_) => h,
        };
    }
    Ok(())
}

// ---- packing, shared by the int calls and their `_c` twins ----

/// A `_c` call's buffer size argument (`MPI_ERR_ARG` if negative, as the
/// int calls' `ptr::len`).
fn size_arg(call: &str, what: &str, n: MPI_Count) -> Result<usize, Error> {
    usize::try_from(n).map_err(|_| err(ErrorClass::Arg, call, format!("{what} = {n} is negative")))
}

/// `*position` = `pos` checked against the buffer size `size`.
fn position_arg(call: &str, pos: MPI_Count, size: usize, what: &str) -> Result<usize, Error> {
    usize::try_from(pos)
        .ok()
        .filter(|&p| p <= size)
        .ok_or_else(|| {
            err(
                ErrorClass::Arg,
                call,
                format!("*position = {pos} is not in 0..={size} ({what})"),
            )
        })
}

/// `MPI_Pack(_c)`: pack `incount` elements into `outbuf` at `pos`; the new position.
#[allow(clippy::too_many_arguments)]
fn pack(
    call: &str,
    inbuf: *const c_void,
    incount: MPI_Count,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: usize,
    pos: MPI_Count,
    comm: MPI_Comm,
) -> Result<usize, Error> {
    let c = resolve::comm(call, comm)?;
    let (t, _) = type_arg(call, "datatype", datatype)?;
    let pos = position_arg(call, pos, outsize, "outsize")?;
    let v = ptr::buf(call, "inbuf", inbuf, incount, &t, false).map_err(ranked)?;
    let need = v.packed_size();
    if need > outsize - pos {
        return Err(err(
            ErrorClass::Arg,
            call,
            format!(
            "outbuf has {} bytes after *position = {pos} but {incount} element(s) pack into {need}",
            outsize - pos),
        ));
    }
    if need > 0 {
        let out = ptr::slice_mut(call, "outbuf", outbuf.cast::<u8>(), outsize)?;
        v.pack_to(call, c.rank(), &mut out[pos..pos + need])?;
    }
    Ok(pos + need)
}

/// `MPI_Unpack(_c)`: unpack `outcount` elements from `inbuf` at `pos`; the new position.
#[allow(clippy::too_many_arguments)]
fn unpack(
    call: &str,
    inbuf: *const c_void,
    insize: usize,
    pos: MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
) -> Result<usize, Error> {
    let c = resolve::comm(call, comm)?;
    let (t, _) = type_arg(call, "datatype", datatype)?;
    let pos = position_arg(call, pos, insize, "insize")?;
    let v = ptr::buf(call, "outbuf", outbuf, outcount, &t, true).map_err(ranked)?;
    let need = v.packed_size();
    if need > insize - pos {
        return Err(err(
            ErrorClass::Truncate,
            call,
            format!(
                "inbuf has {} bytes after *position = {pos} but {outcount} element(s) need {need}",
                insize - pos
            ),
        ));
    }
    if need > 0 {
        let data = ptr::slice(call, "inbuf", inbuf.cast::<u8>(), insize)?;
        v.unpack_from(call, c.rank(), &data[pos..pos + need])?;
    }
    Ok(pos + need)
}

/// `MPI_Pack_size(_c)`: the bytes `incount` elements pack into.
fn pack_size(
    call: &str,
    incount: MPI_Count,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
) -> Result<usize, Error> {
    resolve::comm(call, comm)?;
    let n = ptr::count(call, "incount", incount)?;
    let (t, _) = type_arg(call, "datatype", datatype)?;
    t.pack_size(n).map_err(ranked)
}

/// What `MPI_Pack_external` and `MPI_Unpack_external` check and work out
/// alike: the conversion of `datatype`, the view of the user buffer `buf`
/// (`count` elements, written to when `writable`), the size of the packed
/// buffer, the position in it, and the external32 bytes of `count` elements.
fn ext32_job(
    call: &str,
    datarep: *const c_char,
    datatype: MPI_Datatype,
    (buf, count, writable, buf_name): (*const c_void, MPI_Count, bool, &str),
    (size, pos, size_name): (MPI_Count, MPI_Count, &str),
) -> Result<(Ext32, gmpi::View, usize, usize, usize), Error> {
    let (t, p) = type_arg(call, "datatype", datatype)?;
    let e = ext32(call, datarep, &p)?;
    let size = usize::try_from(size).map_err(|_| {
        err(
            ErrorClass::Arg,
            call,
            format!("{size_name} = {size} is negative"),
        )
    })?;
    let pos = position_arg(call, pos, size, size_name)?;
    let v = ptr::buf(call, buf_name, buf, count, &t, writable).map_err(ranked)?;
    let need = e
        .size
        .checked_mul(count as usize)
        .ok_or_else(|| err(ErrorClass::Count, call, "the external32 size overflows"))?;
    Ok((e, v, size, pos, need))
}

/// `MPI_Pack_external(_c)`; the new position.
#[allow(clippy::too_many_arguments)]
fn pack_external(
    call: &str,
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: MPI_Count,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    pos: MPI_Count,
) -> Result<usize, Error> {
    let (e, v, outsize, pos, need) = ext32_job(
        call,
        datarep,
        datatype,
        (inbuf, incount, false, "inbuf"),
        (outsize, pos, "outsize"),
    )?;
    let n = incount as usize;
    if need > outsize - pos {
        return Err(err(ErrorClass::Arg, call, format!(
            "outbuf has {} bytes after *position = {pos} but {incount} element(s) need {need} in external32",
            outsize - pos)));
    }
    if need > 0 {
        let mut native = vec![0u8; v.packed_size()];
        v.pack_to(call, world_rank(), &mut native)?;
        let out = ptr::slice_mut(call, "outbuf", outbuf.cast::<u8>(), outsize)?;
        convert(call, &e, n, &mut native, &mut out[pos..pos + need], true)?;
    }
    Ok(pos + need)
}

/// `MPI_Unpack_external(_c)`; the new position.
#[allow(clippy::too_many_arguments)]
fn unpack_external(
    call: &str,
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: MPI_Count,
    pos: MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    datatype: MPI_Datatype,
) -> Result<usize, Error> {
    let (e, v, insize, pos, need) = ext32_job(
        call,
        datarep,
        datatype,
        (outbuf.cast_const(), outcount, true, "outbuf"),
        (insize, pos, "insize"),
    )?;
    let n = outcount as usize;
    if need > insize - pos {
        return Err(err(ErrorClass::Truncate, call, format!(
            "inbuf has {} bytes after *position = {pos} but {outcount} element(s) need {need} in external32",
            insize - pos)));
    }
    if need > 0 {
        let data = ptr::slice(call, "inbuf", inbuf.cast::<u8>(), insize)?;
        let mut ext = data[pos..pos + need].to_vec();
        let mut native = vec![0u8; v.packed_size()];
        convert(call, &e, n, &mut native, &mut ext, false)?;
        v.unpack_from(call, world_rank(), &native)?;
    }
    Ok(pos + need)
}

/// `MPI_Pack_external_size(_c)`: the external32 bytes of `incount` elements.
fn pack_external_size(
    call: &str,
    datarep: *const c_char,
    incount: MPI_Count,
    datatype: MPI_Datatype,
) -> Result<usize, Error> {
    let n = ptr::count(call, "incount", incount)?;
    let (_, p) = type_arg(call, "datatype", datatype)?;
    let e = ext32(call, datarep, &p)?;
    e.size
        .checked_mul(n)
        .filter(|&b| MPI_Aint::try_from(b).is_ok())
        .ok_or_else(|| {
            err(
                ErrorClass::Count,
                call,
                "the external32 size overflows MPI_Aint",
            )
        })
}

/// The envelope of user type `h` (`None` for a predefined type).
fn user_env(h: MPI_Datatype) -> Option<Envelope> {
    if resolve::predefined(h).is_some() {
        return None;
    }
    decode(Kind::Datatype, h).and_then(|i| state().types.get(i).map(|o| o.env.clone()))
}

/// The parameterized type of `MPI_Type_create_f90_*` (`combiner`
/// `MPI_COMBINER_F90_REAL`/`COMPLEX`/`INTEGER` with `params`) over the
/// predefined type `base`: one committed handle per distinct request, as the
/// standard wants (the same arguments give the same handle; never freed).
fn f90_type(combiner: c_int, params: &[c_int], base: MPI_Datatype) -> MPI_Datatype {
    static CACHE: std::sync::LazyLock<Mutex<HashMap<(c_int, Vec<c_int>), MPI_Datatype>>> =
        std::sync::LazyLock::new(Default::default);
    let key = (combiner, params.to_vec());
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&h) = cache.get(&key) {
        return h;
    }
    let (dt, _) = resolve::predefined(base).expect("a predefined Fortran type");
    let env = Envelope {
        combiner,
        ints: params.to_vec(),
        aints: Vec::new(),
        counts: Vec::new(),
        types: Vec::new(),
    };
    let h = new_type(dt.clone(), env);
    cache.insert(key, h);
    h
}

/// The first of `(digits, range, handle)` (smallest first) that meets
/// precision `p` and range `r` (`MPI_UNDEFINED`: any), as Fortran's
/// `SELECTED_*_KIND` would pick. gmpi returns the predefined type itself
/// (its envelope says `MPI_COMBINER_NAMED`).
fn f90_pick(
    call: &str,
    kinds: &[(c_int, c_int, MPI_Datatype)],
    p: c_int,
    r: c_int,
    what: &str,
) -> Result<MPI_Datatype, Error> {
    if (p < 0 && p != MPI_UNDEFINED) || (r < 0 && r != MPI_UNDEFINED) {
        return Err(err(
            ErrorClass::Arg,
            call,
            format!("p = {p} and r = {r} must be non-negative or MPI_UNDEFINED"),
        ));
    }
    kinds
        .iter()
        .find(|&&(kp, kr, _)| (p == MPI_UNDEFINED || p <= kp) && (r == MPI_UNDEFINED || r <= kr))
        .map(|&(_, _, h)| h)
        .ok_or_else(|| {
            err(
                ErrorClass::Arg,
                call,
                format!("gmpi has no Fortran {what} type with precision {p} and range {r}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_size_tables_name_the_right_types() {
        let names = |l: &[MPI_Datatype]| -> Vec<&str> {
            l.iter()
                .map(|&h| resolve::predefined(h).expect("predefined").1)
                .collect()
        };
        assert_eq!(
            names(REAL_TYPES)[..3],
            ["MPI_REAL4", "MPI_REAL8", "MPI_REAL16"]
        );
        assert_eq!(
            names(INTEGER_TYPES)[..4],
            [
                "MPI_INTEGER1",
                "MPI_INTEGER2",
                "MPI_INTEGER4",
                "MPI_INTEGER8"
            ]
        );
        assert_eq!(
            names(COMPLEX_TYPES)[..3],
            ["MPI_COMPLEX8", "MPI_COMPLEX16", "MPI_COMPLEX32"]
        );
    }

    #[test]
    fn ext32_fields_cover_the_native_size() {
        // The pair types' packed bytes have no padding: their fields must
        // cover exactly the packed size (they overran it once).
        let pairs = [
            MPI_DOUBLE_INT,
            MPI_LONG_INT,
            MPI_SHORT_INT,
            MPI_FLOAT_INT,
            MPI_2INT,
            MPI_LONG_DOUBLE_INT,
            MPI_LONG_DOUBLE,
            MPI_C_LONG_DOUBLE_COMPLEX,
        ];
        for h in REAL_TYPES
            .iter()
            .chain(INTEGER_TYPES)
            .chain(COMPLEX_TYPES)
            .chain(&pairs)
        {
            let (d, name) = resolve::predefined(*h).expect("predefined");
            let f = ext32_fields(name).unwrap_or_else(|| panic!("{name} has no external32 form"));
            let native: usize = f
                .iter()
                .map(|f| match *f {
                    Swap(n) => n,
                    Field::X87 => 16,
                    Field::Narrow { from, .. } => from,
                })
                .sum();
            assert_eq!(native, d.size(), "{name}");
        }
    }

    #[test]
    fn long_double_converts_exactly_to_binary128_and_back() {
        // 1.0L, -2.5L, the smallest x87 denormal, +infinity: the x87 bytes
        // (mantissa little-endian with its explicit integer bit, then sign
        // and exponent) and their binary128 bits.
        let cases: [([u8; 10], u128); 4] = [
            ([0, 0, 0, 0, 0, 0, 0, 0x80, 0xff, 0x3f], 0x3fff << 112),
            (
                [0, 0, 0, 0, 0, 0, 0, 0xa0, 0x00, 0xc0],
                (0xc000 << 112) | (1 << 110),
            ),
            ([1, 0, 0, 0, 0, 0, 0, 0, 0, 0], 1 << 49),
            ([0, 0, 0, 0, 0, 0, 0, 0x80, 0xff, 0x7f], 0x7fff << 112),
        ];
        for (x87, quad) in cases {
            let mut slot = [0u8; 16];
            slot[..10].copy_from_slice(&x87);
            assert_eq!(x87_to_quad(&slot), quad, "{x87:?}");
            assert_eq!(quad_to_x87(quad), slot, "{quad:#x}");
        }
    }

    #[test]
    fn narrow_round_trips_and_checks_range() {
        let mut nat = (-5i64).to_ne_bytes();
        let mut ext = [0u8; 4];
        narrow("t", &mut nat, &mut ext, true, true).unwrap();
        assert_eq!(ext, (-5i32).to_be_bytes());
        let mut back = [0u8; 8];
        narrow("t", &mut back, &mut ext, true, false).unwrap();
        assert_eq!(i64::from_ne_bytes(back), -5);
        let mut big = (1i64 << 40).to_ne_bytes();
        assert!(narrow("t", &mut big, &mut ext, true, true).is_err());
    }
}
