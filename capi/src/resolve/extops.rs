//! Predefined reduction operations on the MPICH datatypes the runtime has no
//! primitive for: complex numbers, C `long double`, and the Fortran pair
//! types (`MPI_2REAL`, `MPI_2DOUBLE_PRECISION`) and `MPI_LONG_DOUBLE_INT`.
//!
//! The runtime moves these types as opaque bytes; [`predefined_op`] turns a
//! predefined `MPI_Op` on one of them into a commutative `gmpi::Op::user`
//! kernel that computes `inout[i] = in[i] ∘ inout[i]` on the raw bytes
//! (native byte order, any alignment), as the MPI standard's table of
//! (operation, datatype) pairs defines:
//!
//! | datatype | operations |
//! |---|---|
//! | complex float (`MPI_C_FLOAT_COMPLEX`, `MPI_COMPLEX`, `MPI_COMPLEX8`, `MPI_CXX_FLOAT_COMPLEX`) | `MPI_SUM`, `MPI_PROD` |
//! | complex double (`MPI_C_DOUBLE_COMPLEX`, `MPI_DOUBLE_COMPLEX`, `MPI_COMPLEX16`, `MPI_CXX_DOUBLE_COMPLEX`) | `MPI_SUM`, `MPI_PROD` |
//! | `MPI_LONG_DOUBLE` | `MPI_SUM`, `MPI_PROD`, `MPI_MAX`, `MPI_MIN` |
//! | `MPI_C_LONG_DOUBLE_COMPLEX`, `MPI_CXX_LONG_DOUBLE_COMPLEX` | `MPI_SUM`, `MPI_PROD` |
//! | `MPI_2REAL`, `MPI_2DOUBLE_PRECISION`, `MPI_LONG_DOUBLE_INT`, `MPI_DOUBLE_INT`, `MPI_LONG_INT`, `MPI_SHORT_INT` | `MPI_MINLOC`, `MPI_MAXLOC` |
//!
//! Any other predefined reduction on them is an `MPI_ERR_OP` error
//! ("MPI_MAX is not defined for MPI_C_DOUBLE_COMPLEX"). `MPI_REPLACE` and
//! `MPI_NO_OP` are left to the runtime. The same holds for a derived
//! datatype whose every basic element is of one of these kinds (all complex
//! float, all long double, …): reductions receive packed data, so the kernel
//! sees a plain sequence of elements. A derived type is recognised through
//! the envelopes of the handle table; one built on a handle freed since is
//! not, and gets the runtime's error.
//!
//! Semantics:
//! - Complex product is the schoolbook formula `(ar·br − ai·bi) +
//!   (ar·bi + ai·br)i`, as MPICH computes it (no C99 Annex G recovery of
//!   infinities from NaN results).
//! - `long double` is x86-64's 80-bit x87 extended format in a 16-byte slot.
//!   Rust has no such type, so arithmetic runs in x87 inline assembly with
//!   the x87 control word as the process left it (64-bit significand on
//!   Linux), giving the same bits as C. Results are stored in the low 10
//!   bytes of the slot; the 6 padding bytes of `inout` are left as they
//!   were. `MPI_MAX` is `in > inout ? in : inout` and `MPI_MIN` is
//!   `in < inout ? in : inout`, as for the runtime's floats: a NaN on either
//!   side keeps `inout`. On other architectures `long double` operations
//!   are `MPI_ERR_OP` errors.
//! - `MPI_MINLOC`/`MPI_MAXLOC`: the better value wins, and on equal values
//!   the smaller index; the winning pair's bytes (padding included) are
//!   copied, as the runtime does for its pair types. For `MPI_2REAL` and
//!   `MPI_2DOUBLE_PRECISION` the index is a `REAL`/`DOUBLE PRECISION` too;
//!   `MPI_LONG_DOUBLE_INT` is C's `struct { long double v; int i; }`: the
//!   value at 0, the `int` at 16. `MPI_DOUBLE_INT`, `MPI_LONG_INT` and
//!   `MPI_SHORT_INT` are here too: like `MPI_LONG_DOUBLE_INT` their MPI size
//!   leaves out the C padding (12, 12, 6 and 20 bytes, extents 16, 16, 8
//!   and 32), so the kernels see packed pairs, the index right after the
//!   value.
//! - `MPI_REAL16` and `MPI_COMPLEX32` are IEEE binary128 (gfortran's
//!   `REAL(16)`), which gmpi has no arithmetic for: every predefined
//!   reduction on them is an `MPI_ERR_OP` error saying so.

use std::collections::BTreeSet;

use gmpi::{Error, ErrorClass, Op};

use crate::abi::*;
use crate::resolve::datatype::predefined;
use crate::tables::{err, state};

/// A kind of datatype this module reduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ext {
    /// Two `f32`s.
    ComplexF32,
    /// Two `f64`s.
    ComplexF64,
    /// x87 extended in 16 bytes.
    LongDouble,
    /// Two 16-byte long doubles.
    ComplexLongDouble,
    /// IEEE binary128 (`MPI_REAL16`) or two of them (`MPI_COMPLEX32`).
    Quad,
    /// `f32` value, `f32` index.
    TwoReal,
    /// `f64` value, `f64` index.
    TwoDouble,
    /// long double value, `int` index at 16: 20 bytes packed.
    LongDoubleInt,
    /// `f64` value, `int` index at 8: 12 bytes packed.
    DoubleInt,
    /// `i64` value, `int` index at 8: 12 bytes packed.
    LongInt,
    /// `i16` value, `int` index at 2: 6 bytes packed.
    ShortInt,
}

/// The kind of predefined datatype `h`, if this module handles it.
fn kind_of(h: MPI_Datatype) -> Option<Ext> {
    Some(match h {
        MPI_C_FLOAT_COMPLEX | MPI_CXX_FLOAT_COMPLEX | MPI_COMPLEX | MPI_COMPLEX8 => Ext::ComplexF32,
        MPI_C_DOUBLE_COMPLEX | MPI_CXX_DOUBLE_COMPLEX | MPI_DOUBLE_COMPLEX | MPI_COMPLEX16 => {
            Ext::ComplexF64
        }
        MPI_LONG_DOUBLE => Ext::LongDouble,
        MPI_C_LONG_DOUBLE_COMPLEX | MPI_CXX_LONG_DOUBLE_COMPLEX => Ext::ComplexLongDouble,
        MPI_REAL16 | MPI_COMPLEX32 => Ext::Quad,
        MPI_2REAL => Ext::TwoReal,
        MPI_2DOUBLE_PRECISION => Ext::TwoDouble,
        MPI_LONG_DOUBLE_INT => Ext::LongDoubleInt,
        MPI_DOUBLE_INT => Ext::DoubleInt,
        MPI_LONG_INT => Ext::LongInt,
        MPI_SHORT_INT => Ext::ShortInt,
        _ => return None,
    })
}

/// Whether the predefined datatype `h` is one of the types this module
/// reduces (so [`predefined_op`] may take over a predefined op on it).
#[inline]
pub fn is_ext_type(h: MPI_Datatype) -> bool {
    kind_of(h).is_some()
}

/// The kind and a predefined handle of the basic elements of `h`, if all of
/// them are of one kind this module handles: `h` itself if predefined, or
/// the leaves of a derived type's envelopes.
fn element_kind(h: MPI_Datatype) -> Option<(Ext, MPI_Datatype)> {
    if let Some(k) = kind_of(h) {
        return Some((k, h));
    }
    decode(Kind::Datatype, h)?;
    // Walk the construction tree (each handle once) under the table lock;
    // nothing here calls the runtime.
    let st = state();
    let mut seen = BTreeSet::new();
    let mut todo = vec![h];
    let mut found: Option<(Ext, MPI_Datatype)> = None;
    while let Some(t) = todo.pop() {
        if !seen.insert(t) {
            continue;
        }
        if let Some(k) = kind_of(t) {
            match found {
                None => found = Some((k, t)),
                Some((f, _)) if f == k => {}
                Some(_) => return None,
            }
            continue;
        }
        let obj = decode(Kind::Datatype, t).and_then(|i| st.types.get(i))?;
        if obj.env.types.is_empty() || seen.len() > 4096 {
            return None;
        }
        todo.extend_from_slice(&obj.env.types);
    }
    found
}

/// The name of predefined datatype `h`.
fn type_name(h: MPI_Datatype) -> &'static str {
    predefined(h).map_or("this datatype", |(_, n)| n)
}

fn op_name(h: MPI_Op) -> &'static str {
    match h {
        MPI_MAX => "MPI_MAX",
        MPI_MIN => "MPI_MIN",
        MPI_SUM => "MPI_SUM",
        MPI_PROD => "MPI_PROD",
        MPI_LAND => "MPI_LAND",
        MPI_BAND => "MPI_BAND",
        MPI_LOR => "MPI_LOR",
        MPI_BOR => "MPI_BOR",
        MPI_LXOR => "MPI_LXOR",
        MPI_BXOR => "MPI_BXOR",
        MPI_MINLOC => "MPI_MINLOC",
        MPI_MAXLOC => "MPI_MAXLOC",
        _ => "this operation",
    }
}

/// A raw reduction kernel: `inout = in ∘ inout` on whole elements.
type Kernel = fn(&[u8], &mut [u8]);

/// The predefined operation `h` on datatype `dt_h`, when `dt_h` (or every
/// basic element of it) is one of this module's types: `None` for any other
/// datatype, and for `MPI_REPLACE`/`MPI_NO_OP` or a handle that is no
/// predefined reduction (the caller handles those).
pub fn predefined_op(call: &str, h: MPI_Op, dt_h: MPI_Datatype) -> Option<Result<Op, Error>> {
    if !(MPI_MAX..=MPI_MAXLOC).contains(&h) {
        return None;
    }
    let (kind, leaf) = element_kind(dt_h)?;
    let k: Option<(usize, Kernel)> = match (kind, h) {
        (Ext::ComplexF32, MPI_SUM) => Some((8, complex_sum::<f32>)),
        (Ext::ComplexF32, MPI_PROD) => Some((8, complex_prod::<f32>)),
        (Ext::ComplexF64, MPI_SUM) => Some((16, complex_sum::<f64>)),
        (Ext::ComplexF64, MPI_PROD) => Some((16, complex_prod::<f64>)),
        (Ext::TwoReal, MPI_MINLOC) => Some((8, loc_pair::<f32, false>)),
        (Ext::TwoReal, MPI_MAXLOC) => Some((8, loc_pair::<f32, true>)),
        (Ext::TwoDouble, MPI_MINLOC) => Some((16, loc_pair::<f64, false>)),
        (Ext::TwoDouble, MPI_MAXLOC) => Some((16, loc_pair::<f64, true>)),
        (Ext::DoubleInt, MPI_MINLOC) => Some((12, loc_int::<f64, false>)),
        (Ext::DoubleInt, MPI_MAXLOC) => Some((12, loc_int::<f64, true>)),
        (Ext::LongInt, MPI_MINLOC) => Some((12, loc_int::<i64, false>)),
        (Ext::LongInt, MPI_MAXLOC) => Some((12, loc_int::<i64, true>)),
        (Ext::ShortInt, MPI_MINLOC) => Some((6, loc_int::<i16, false>)),
        (Ext::ShortInt, MPI_MAXLOC) => Some((6, loc_int::<i16, true>)),
        (Ext::LongDouble | Ext::ComplexLongDouble | Ext::LongDoubleInt, _) => x87::kernel(kind, h),
        _ => None,
    };
    let Some((size, f)) = k else {
        let why = match kind {
            Ext::Quad => format!(
                "{} is not supported for {}: gmpi has no IEEE binary128 (REAL(16)) arithmetic",
                op_name(h),
                type_name(leaf)
            ),
            Ext::LongDouble | Ext::ComplexLongDouble | Ext::LongDoubleInt
                if !cfg!(target_arch = "x86_64") =>
            {
                format!(
                    "{} is not supported for {}: gmpi has long double arithmetic only on x86-64",
                    op_name(h),
                    type_name(leaf)
                )
            }
            _ => format!("{} is not defined for {}", op_name(h), type_name(leaf)),
        };
        let why = if leaf == dt_h {
            why
        } else {
            format!("{why} (the elements of datatype {dt_h:#x})")
        };
        return Some(Err(err(ErrorClass::Op, call, why)));
    };
    Some(Ok(Op::user(
        move |a: &[u8], b: &mut [u8], _n: usize| {
            // The slices hold whole derived elements, each a whole number of
            // basic elements (packed).
            let len = a.len().min(b.len()) / size * size;
            f(&a[..len], &mut b[..len]);
        },
        true,
    )))
}

/// An `f32` or `f64` stored in native byte order at any alignment.
trait Real: Copy + PartialOrd {
    const SIZE: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
}

macro_rules! real {
    ($($t:ty),*) => {$(
        impl Real for $t {
            const SIZE: usize = size_of::<$t>();
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b[..Self::SIZE].try_into().expect("element-sized chunk"))
            }
            fn store(self, b: &mut [u8]) {
                b[..Self::SIZE].copy_from_slice(&self.to_ne_bytes())
            }
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn sub(self, o: Self) -> Self {
                self - o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
        }
    )*};
}
real!(f32, f64);

/// Complex sum of `(re, im)` pairs of `T`.
fn complex_sum<T: Real>(a: &[u8], b: &mut [u8]) {
    let s = T::SIZE;
    for (x, y) in a.chunks_exact(2 * s).zip(b.chunks_exact_mut(2 * s)) {
        let re = T::load(x).add(T::load(y));
        let im = T::load(&x[s..]).add(T::load(&y[s..]));
        re.store(y);
        im.store(&mut y[s..]);
    }
}

/// Complex product of `(re, im)` pairs of `T`: `in · inout`.
fn complex_prod<T: Real>(a: &[u8], b: &mut [u8]) {
    let s = T::SIZE;
    for (x, y) in a.chunks_exact(2 * s).zip(b.chunks_exact_mut(2 * s)) {
        let (ar, ai) = (T::load(x), T::load(&x[s..]));
        let (br, bi) = (T::load(y), T::load(&y[s..]));
        let re = ar.mul(br).sub(ai.mul(bi));
        let im = ar.mul(bi).add(ai.mul(br));
        re.store(y);
        im.store(&mut y[s..]);
    }
}

/// `MPI_MINLOC` (`MAX` false) or `MPI_MAXLOC` on `(value, index)` pairs of
/// `T`: the better value wins, on equal values the smaller index.
fn loc_pair<T: Real, const MAX: bool>(a: &[u8], b: &mut [u8]) {
    let s = T::SIZE;
    for (x, y) in a.chunks_exact(2 * s).zip(b.chunks_exact_mut(2 * s)) {
        let (u, v) = (T::load(x), T::load(y));
        let better = if MAX { u > v } else { u < v };
        if better || (u == v && T::load(&x[s..]) < T::load(&y[s..])) {
            y.copy_from_slice(x);
        }
    }
}

/// A pair's value: `f64`, `i64` or `i16` in native byte order.
trait PairValue: Copy + PartialOrd {
    const BYTES: usize;
    fn load(b: &[u8]) -> Self;
}

macro_rules! pair_value {
    ($($t:ty),*) => {$(
        impl PairValue for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b[..Self::BYTES].try_into().expect("a value"))
            }
        }
    )*};
}
pair_value!(f64, i64, i16);

/// MINLOC (`MAX` false) or MAXLOC on packed `{T value; int index}` pairs
/// (`MPI_DOUBLE_INT`, `MPI_LONG_INT`, `MPI_SHORT_INT`: the index right after
/// the value, as MPI packs them, without the C padding).
fn loc_int<T: PairValue, const MAX: bool>(a: &[u8], b: &mut [u8]) {
    let s = T::BYTES;
    let idx = |x: &[u8]| i32::from_ne_bytes(x[s..s + 4].try_into().expect("an int"));
    for (x, y) in a.chunks_exact(s + 4).zip(b.chunks_exact_mut(s + 4)) {
        let (u, v) = (PairValue::load(x), PairValue::load(y));
        let (u, v): (T, T) = (u, v);
        let better = if MAX { u > v } else { u < v };
        if better || (u == v && idx(x) < idx(y)) {
            y.copy_from_slice(x);
        }
    }
}

/// `long double` arithmetic on x86-64's x87 unit.
#[cfg(target_arch = "x86_64")]
mod x87 {
    use std::arch::asm;
    use std::cmp::Ordering;
    use std::ffi::c_int;

    use super::{Ext, Kernel};
    use crate::abi::{MPI_MAX, MPI_MAXLOC, MPI_MIN, MPI_MINLOC, MPI_PROD, MPI_SUM};

    /// An 80-bit extended value: the significant bytes of a `long double`.
    pub type F80 = [u8; 10];

    /// The value in the first 10 bytes of `b`.
    pub fn load(b: &[u8]) -> F80 {
        b[..10].try_into().expect("a long double slot")
    }

    macro_rules! binop {
        ($(#[$m:meta])* $name:ident, $($insn:literal),+) => {
            $(#[$m])*
            pub fn $name(a: &F80, b: &F80) -> F80 {
                let mut out = [0u8; 10];
                // SAFETY: `a`, `b` and `out` are valid 10-byte buffers that
                // `fld tbyte`/`fstp tbyte` read and write exactly; the block
                // pushes two values and pops both, leaving the x87 stack
                // empty as it found it (every st register is declared
                // clobbered, so the compiler keeps nothing there), and uses
                // no stack memory.
                unsafe {
                    asm!(
                        "fld tbyte ptr [{a}]",
                        "fld tbyte ptr [{b}]",
                        // st(0) = b, st(1) = a: st(1) = a op st(0); pop.
                        $($insn,)+
                        "fstp tbyte ptr [{o}]",
                        a = in(reg) a.as_ptr(),
                        b = in(reg) b.as_ptr(),
                        o = in(reg) out.as_mut_ptr(),
                        out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                        out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                        options(nostack),
                    );
                }
                out
            }
        };
    }

    binop!(
        /// `a + b`, rounded as C's `long double` addition.
        add,
        "faddp st(1), st"
    );
    binop!(
        /// `a − b`, computed as `a + (−b)` (the same rounding; this avoids
        /// the assemblers' disagreement over the operand order of the
        /// popping `fsubp`/`fsubrp` forms).
        sub,
        "fchs",
        "faddp st(1), st"
    );
    binop!(
        /// `a × b`.
        mul,
        "fmulp st(1), st"
    );

    /// How `a` compares with `b` (`None` if either is a NaN).
    pub fn cmp(a: &F80, b: &F80) -> Option<Ordering> {
        let (cf, zf, pf): (u8, u8, u8);
        // SAFETY: `a` and `b` are valid 10-byte buffers read by
        // `fld tbyte`; the block pushes two values and pops both
        // (`fucomip` pops one, `fstp st(0)` the other), leaving the x87
        // stack empty (every st register is declared clobbered); it writes
        // only the three byte registers and the flags, and uses no stack
        // memory.
        unsafe {
            asm!(
                "fld tbyte ptr [{b}]",
                "fld tbyte ptr [{a}]",
                // Compare st(0) = a with st(1) = b; pop.
                "fucomip st, st(1)",
                "fstp st(0)",
                "setb {cf}",
                "sete {zf}",
                "setp {pf}",
                a = in(reg) a.as_ptr(),
                b = in(reg) b.as_ptr(),
                cf = out(reg_byte) cf,
                zf = out(reg_byte) zf,
                pf = out(reg_byte) pf,
                out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                options(nostack),
            );
        }
        if pf != 0 {
            None
        } else if cf != 0 {
            Some(Ordering::Less)
        } else if zf != 0 {
            Some(Ordering::Equal)
        } else {
            Some(Ordering::Greater)
        }
    }

    /// Store `v` in the first 10 bytes of `b` (the padding stays).
    fn store(v: F80, b: &mut [u8]) {
        b[..10].copy_from_slice(&v);
    }

    fn ld_sum(a: &[u8], b: &mut [u8]) {
        for (x, y) in a.chunks_exact(16).zip(b.chunks_exact_mut(16)) {
            store(add(&load(x), &load(y)), y);
        }
    }

    fn ld_prod(a: &[u8], b: &mut [u8]) {
        for (x, y) in a.chunks_exact(16).zip(b.chunks_exact_mut(16)) {
            store(mul(&load(x), &load(y)), y);
        }
    }

    fn ld_minmax<const MAX: bool>(a: &[u8], b: &mut [u8]) {
        let want = if MAX {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Less
        };
        for (x, y) in a.chunks_exact(16).zip(b.chunks_exact_mut(16)) {
            let (u, v) = (load(x), load(y));
            if cmp(&u, &v) == Some(want) {
                store(u, y);
            }
        }
    }

    fn ldc_sum(a: &[u8], b: &mut [u8]) {
        // A complex long double is two long double slots.
        ld_sum(a, b)
    }

    fn ldc_prod(a: &[u8], b: &mut [u8]) {
        for (x, y) in a.chunks_exact(32).zip(b.chunks_exact_mut(32)) {
            let (ar, ai) = (load(x), load(&x[16..]));
            let (br, bi) = (load(y), load(&y[16..]));
            let re = sub(&mul(&ar, &br), &mul(&ai, &bi));
            let im = add(&mul(&ar, &bi), &mul(&ai, &br));
            store(re, y);
            store(im, &mut y[16..]);
        }
    }

    fn ldi_loc<const MAX: bool>(a: &[u8], b: &mut [u8]) {
        let want = if MAX {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Less
        };
        let idx = |s: &[u8]| i32::from_ne_bytes(s[16..20].try_into().expect("an int"));
        for (x, y) in a.chunks_exact(20).zip(b.chunks_exact_mut(20)) {
            let c = cmp(&load(x), &load(y));
            if c == Some(want) || (c == Some(std::cmp::Ordering::Equal) && idx(x) < idx(y)) {
                y.copy_from_slice(x);
            }
        }
    }

    /// The kernel of op `h` on `kind` and its element size, if defined.
    pub fn kernel(kind: Ext, h: c_int) -> Option<(usize, Kernel)> {
        Some(match (kind, h) {
            (Ext::LongDouble, MPI_SUM) => (16, ld_sum),
            (Ext::LongDouble, MPI_PROD) => (16, ld_prod),
            (Ext::LongDouble, MPI_MAX) => (16, ld_minmax::<true>),
            (Ext::LongDouble, MPI_MIN) => (16, ld_minmax::<false>),
            (Ext::ComplexLongDouble, MPI_SUM) => (32, ldc_sum),
            (Ext::ComplexLongDouble, MPI_PROD) => (32, ldc_prod),
            (Ext::LongDoubleInt, MPI_MINLOC) => (20, ldi_loc::<false>),
            (Ext::LongDoubleInt, MPI_MAXLOC) => (20, ldi_loc::<true>),
            _ => return None,
        })
    }
}

/// No `long double` arithmetic off x86-64: every operation is undefined.
#[cfg(not(target_arch = "x86_64"))]
mod x87 {
    use super::{Ext, Kernel};

    pub fn kernel(_kind: Ext, _h: std::ffi::c_int) -> Option<(usize, Kernel)> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c32(v: &[(f32, f32)]) -> Vec<u8> {
        v.iter()
            .flat_map(|&(r, i)| [r.to_ne_bytes(), i.to_ne_bytes()].concat())
            .collect()
    }

    fn c64(v: &[(f64, f64)]) -> Vec<u8> {
        v.iter()
            .flat_map(|&(r, i)| [r.to_ne_bytes(), i.to_ne_bytes()].concat())
            .collect()
    }

    #[test]
    fn complex_float_sum_and_prod() {
        let a = c32(&[(1.0, 2.0), (0.5, -1.0)]);
        let mut b = c32(&[(3.0, -4.0), (2.0, 2.0)]);
        complex_sum::<f32>(&a, &mut b);
        assert_eq!(b, c32(&[(4.0, -2.0), (2.5, 1.0)]));
        let mut b = c32(&[(3.0, -4.0), (2.0, 2.0)]);
        complex_prod::<f32>(&a, &mut b);
        // (1+2i)(3-4i) = 11 + 2i; (0.5-i)(2+2i) = 3 - i.
        assert_eq!(b, c32(&[(11.0, 2.0), (3.0, -1.0)]));
    }

    #[test]
    fn complex_double_prod_unaligned() {
        let a = c64(&[(0.0, 1.0)]);
        let b = c64(&[(0.0, 1.0)]);
        // Shift both by one byte to exercise unaligned access.
        let a1 = [&[0u8][..], &a].concat();
        let mut b1 = [&[0u8][..], &b].concat();
        complex_prod::<f64>(&a1[1..], &mut b1[1..]);
        assert_eq!(&b1[1..], &c64(&[(-1.0, 0.0)])[..]);
    }

    #[test]
    fn pair_loc_ties_take_the_lower_index() {
        let pairs = |v: &[(f64, f64)]| c64(v);
        let a = pairs(&[(1.0, 5.0), (2.0, 1.0), (3.0, 0.0)]);
        let mut b = pairs(&[(1.0, 3.0), (2.0, 4.0), (1.0, 9.0)]);
        loc_pair::<f64, false>(&a, &mut b);
        assert_eq!(b, pairs(&[(1.0, 3.0), (2.0, 1.0), (1.0, 9.0)]));
        let mut b = pairs(&[(1.0, 3.0), (2.0, 4.0), (1.0, 9.0)]);
        loc_pair::<f64, true>(&a, &mut b);
        assert_eq!(b, pairs(&[(1.0, 3.0), (2.0, 1.0), (3.0, 0.0)]));
        let a = c32(&[(f32::NAN, 0.0)]);
        let mut b = c32(&[(1.0, 7.0)]);
        loc_pair::<f32, true>(&a, &mut b);
        assert_eq!(b, c32(&[(1.0, 7.0)]));
    }

    #[cfg(target_arch = "x86_64")]
    mod long_double {
        use super::super::x87::*;
        use std::cmp::Ordering;

        /// The x87 extended encoding of an `f64` (exact).
        fn ext(v: f64) -> F80 {
            if v == 0.0 {
                let mut r = [0u8; 10];
                r[9] = if v.is_sign_negative() { 0x80 } else { 0 };
                return r;
            }
            let bits = v.to_bits();
            let sign = (bits >> 63) as u16;
            let exp = ((bits >> 52) & 0x7ff) as i32;
            assert!(exp != 0 && exp != 0x7ff, "normal values only");
            let mant = (1u64 << 63) | ((bits & ((1 << 52) - 1)) << 11);
            let e = (exp - 1023 + 16383) as u16 | sign << 15;
            let mut r = [0u8; 10];
            r[..8].copy_from_slice(&mant.to_le_bytes());
            r[8..].copy_from_slice(&e.to_le_bytes());
            r
        }

        fn mant(v: &F80) -> u64 {
            u64::from_le_bytes(v[..8].try_into().unwrap())
        }

        #[test]
        fn arithmetic_keeps_64_bits() {
            // 1 + 2^-60 is exact in 80 bits (not in f64).
            let s = add(&ext(1.0), &ext(2f64.powi(-60)));
            assert_eq!(mant(&s), (1u64 << 63) | 8);
            assert_eq!(&s[8..], &ext(1.0)[8..]);
            // (1 + 2^-60) - 1 = 2^-60 exactly.
            assert_eq!(sub(&s, &ext(1.0)), ext(2f64.powi(-60)));
            assert_eq!(sub(&ext(5.0), &ext(3.0)), ext(2.0));
            assert_eq!(mul(&ext(1.5), &ext(-4.0)), ext(-6.0));
            assert_eq!(add(&ext(1.5), &ext(2.25)), ext(3.75));
        }

        #[test]
        fn comparisons() {
            assert_eq!(cmp(&ext(1.0), &ext(2.0)), Some(Ordering::Less));
            assert_eq!(cmp(&ext(2.0), &ext(1.0)), Some(Ordering::Greater));
            assert_eq!(cmp(&ext(-0.0), &ext(0.0)), Some(Ordering::Equal));
            let nan = {
                let mut r = [0u8; 10];
                r[..8].copy_from_slice(&(3u64 << 62).to_le_bytes());
                r[8..].copy_from_slice(&0x7fffu16.to_le_bytes());
                r
            };
            assert_eq!(cmp(&nan, &ext(1.0)), None);
            assert_eq!(cmp(&ext(1.0), &nan), None);
            let s = add(&ext(1.0), &ext(2f64.powi(-60)));
            assert_eq!(cmp(&s, &ext(1.0)), Some(Ordering::Greater));
        }

        #[test]
        fn kernels_keep_padding_and_break_ties() {
            use super::super::Ext;
            use crate::abi::{MPI_MAX, MPI_MINLOC, MPI_PROD, MPI_SUM};
            let slot = |v: f64, pad: u8| [&ext(v)[..], &[pad; 6]].concat();
            let (_, sum) = kernel(Ext::LongDouble, MPI_SUM).unwrap();
            let a = [slot(1.0, 0xaa), slot(2.0, 0xaa)].concat();
            let mut b = [slot(3.0, 0x55), slot(-2.0, 0x55)].concat();
            sum(&a, &mut b);
            assert_eq!(b, [slot(4.0, 0x55), slot(0.0, 0x55)].concat());
            let (_, max) = kernel(Ext::LongDouble, MPI_MAX).unwrap();
            let mut b = [slot(0.5, 0x55), slot(7.0, 0x55)].concat();
            max(&a, &mut b);
            assert_eq!(b, [slot(1.0, 0x55), slot(7.0, 0x55)].concat());
            // (1 + 2i)(3 - 4i) = 11 + 2i in long double complex.
            let (_, prod) = kernel(Ext::ComplexLongDouble, MPI_PROD).unwrap();
            let a = [slot(1.0, 0), slot(2.0, 0)].concat();
            let mut b = [slot(3.0, 0), slot(-4.0, 0)].concat();
            prod(&a, &mut b);
            assert_eq!(b, [slot(11.0, 0), slot(2.0, 0)].concat());
            let (_, minloc) = kernel(Ext::LongDoubleInt, MPI_MINLOC).unwrap();
            let pair = |v: f64, i: i32| [&ext(v)[..], &[0; 6], &i.to_ne_bytes()].concat();
            let a = [pair(1.0, 4), pair(1.0, 1), pair(0.5, 9)].concat();
            let mut b = [pair(1.0, 2), pair(1.0, 3), pair(2.0, 0)].concat();
            minloc(&a, &mut b);
            assert_eq!(b, [pair(1.0, 2), pair(1.0, 1), pair(0.5, 9)].concat());
        }
    }
}
