//! Reduction operations (`MPI_Op`): the predefined operations, user-defined
//! ones, and the kernels that combine two buffers element by element.
//!
//! Every operation follows MPI's convention for user functions:
//! `inout[i] = in[i] ∘ inout[i]`, where `in` holds the contribution of the
//! **lower** ranks. The kernels are deterministic (the same inputs always give
//! the same bits); callers fix the order in which contributions are combined.
//!
//! Buffers are byte slices holding values in native byte order, at any
//! alignment: an aligned buffer is processed as a typed slice (a plain loop
//! the compiler vectorizes), an unaligned one value by value through
//! `from_ne_bytes`. Each loop is built three times on x86-64, for the
//! baseline (SSE2), for AVX2 and for AVX-512, and the kernel is picked for
//! the CPU at run time, capped by the `simd` setting ([`Simd`]).

use std::borrow::Cow;
use std::fmt;
use std::mem::size_of;
use std::ops::{Add, BitAnd, BitOr, BitXor, Mul};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::buffer::{cast_slice, cast_slice_mut, from_bytes, write_bytes};
use crate::datatype::{Datatype, Equivalence, Primitive};

/// The callback of a user-defined operation: `(invec, inoutvec, count)`.
type UserFn = dyn Fn(&[u8], &mut [u8], usize) + Send + Sync;

/// A user-defined reduction operation (`MPI_Op_create`): a function that
/// combines `count` elements of `invec` into `inoutvec`, and whether it is
/// commutative. Build one with [`Op::user`] or [`Op::user_typed`].
#[derive(Clone)]
pub struct UserOp {
    f: Arc<UserFn>,
    commutative: bool,
}

impl UserOp {
    /// Whether the operation was declared commutative. Non-commutative
    /// operations are still assumed associative (as MPI requires).
    pub fn is_commutative(&self) -> bool {
        self.commutative
    }

    /// Run the function: `inout[i] = invec[i] ∘ inout[i]` for `count`
    /// elements.
    pub(crate) fn call(&self, invec: &[u8], inout: &mut [u8], count: usize) {
        (self.f)(invec, inout, count)
    }
}

impl fmt::Debug for UserOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserOp")
            .field("commutative", &self.commutative)
            .finish_non_exhaustive()
    }
}

/// A reduction operation (`MPI_Op`).
///
/// Which datatypes each predefined operation accepts follows the MPI
/// standard's table (a reduction with an undefined pair is an
/// `MPI_ERR_OP`-style error, never a panic):
///
/// | operation | datatypes |
/// |---|---|
/// | `Sum`, `Prod` | integers, floats |
/// | `Min`, `Max` | integers, floats |
/// | `Land`, `Lor`, `Lxor` | integers, `Bool` |
/// | `Band`, `Bor`, `Bxor` | integers, `Byte` |
///
/// `Char` (`MPI_CHAR`, `MPI_CHARACTER`) counts as an integer (a signed
/// byte): the standard lists it for no reduction, but MPICH takes it for
/// every one (its `MPIR_OP_TYPE_GROUP_C_INTEGER_EXTRA`), and programs such
/// as OSU's reduction benchmarks use it.
/// | `MinLoc`, `MaxLoc` | the pair types (`FloatInt`, `DoubleInt`, `LongInt`, `TwoInt`, `ShortInt`) |
/// | `User` | any |
/// | `Replace`, `NoOp` | none: one-sided (accumulate) operations only |
///
/// Integer arithmetic wraps. Float `Min` is `if in < inout { in } else { inout }`
/// and `Max` is `if in > inout { in } else { inout }` (C's `<`), so when either
/// value is NaN the result is the `inout` value. Logical operations treat
/// nonzero as true and produce 0 or 1 of the type.
#[derive(Clone)]
pub enum Op {
    /// `MPI_SUM`: sum (integers wrap).
    Sum,
    /// `MPI_PROD`: product (integers wrap).
    Prod,
    /// `MPI_MIN`: minimum.
    Min,
    /// `MPI_MAX`: maximum.
    Max,
    /// `MPI_LAND`: logical and.
    Land,
    /// `MPI_LOR`: logical or.
    Lor,
    /// `MPI_LXOR`: logical exclusive or.
    Lxor,
    /// `MPI_BAND`: bitwise and.
    Band,
    /// `MPI_BOR`: bitwise or.
    Bor,
    /// `MPI_BXOR`: bitwise exclusive or.
    Bxor,
    /// `MPI_MINLOC`: minimum value and its index; on equal values the
    /// smaller index wins.
    MinLoc,
    /// `MPI_MAXLOC`: maximum value and its index; on equal values the
    /// smaller index wins.
    MaxLoc,
    /// `MPI_REPLACE`: the target takes the origin's value (one-sided
    /// operations only).
    Replace,
    /// `MPI_NO_OP`: the target keeps its value (one-sided operations only).
    NoOp,
    /// A user-defined operation (`MPI_Op_create`).
    User(UserOp),
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::User(u) => u.fmt(f),
            _ => f.write_str(self.name()),
        }
    }
}

/// The kernel of a user-defined operation, on raw bytes.
type RawFn = Arc<dyn Fn(&[u8], &mut [u8], usize) + Send + Sync>;

/// A function [`Op::user`] accepts: either typed, `Fn(&[T], &mut [T])`
/// (`T: Equivalence`), or raw, `Fn(&[u8], &mut [u8], usize)` (bytes and the
/// element count). `M` only tells the two apart.
pub trait UserFunction<M>: Send + Sync + 'static {
    /// The function as a raw kernel.
    #[doc(hidden)]
    fn into_raw(self) -> RawFn;
}

/// Marker of raw user functions.
#[derive(Debug)]
pub enum RawMarker {}

/// Marker of typed user functions on `T`.
#[derive(Debug)]
pub struct TypedMarker<T>(std::marker::PhantomData<T>);

impl<F> UserFunction<RawMarker> for F
where
    F: Fn(&[u8], &mut [u8], usize) + Send + Sync + 'static,
{
    fn into_raw(self) -> RawFn {
        Arc::new(self)
    }
}

impl<T, F> UserFunction<TypedMarker<T>> for F
where
    T: Equivalence,
    F: Fn(&[T], &mut [T]) + Send + Sync + 'static,
{
    fn into_raw(self) -> RawFn {
        typed_kernel(self)
    }
}

impl Op {
    /// A user-defined operation (`MPI_Op_create`). `f` is either
    ///
    /// - typed, `f(invec: &[T], inoutvec: &mut [T])` for a `T:`
    ///   [`Equivalence`] — as [`Op::user_typed`] — or
    /// - raw, `f(invec: &[u8], inoutvec: &mut [u8], count: usize)`: both
    ///   slices hold exactly `count` elements in native byte order and may be
    ///   unaligned.
    ///
    /// Either way `f` must set each element of `inoutvec` to
    /// `invec[i] ∘ inoutvec[i]`, where `invec` comes from the lower ranks.
    /// `∘` must be associative; declare it `commutative` only if it is.
    /// Annotate the closure's argument types so the form is clear:
    ///
    /// ```
    /// let max_abs = gmpi::Op::user(|a: &[f64], b: &mut [f64]| {
    ///     for (x, y) in a.iter().zip(b) { *y = y.abs().max(x.abs()); }
    /// }, true);
    /// let xor = gmpi::Op::user(|a: &[u8], b: &mut [u8], _n: usize| {
    ///     for (x, y) in a.iter().zip(b) { *y ^= x; }
    /// }, true);
    /// # let _ = (max_abs, xor);
    /// ```
    pub fn user<M, F: UserFunction<M>>(f: F, commutative: bool) -> Op {
        Op::User(UserOp {
            f: f.into_raw(),
            commutative,
        })
    }

    /// A user-defined operation on values of `T`: `f(invec, inoutvec)` must
    /// set `inoutvec[i] = invec[i] ∘ inoutvec[i]` (`invec` from the lower
    /// ranks). The slices are views of the buffers when those are aligned
    /// for `T`, copies otherwise (written back after `f` returns). For a
    /// zero-sized `T`, `f` receives empty slices.
    pub fn user_typed<T, F>(f: F, commutative: bool) -> Op
    where
        T: Equivalence,
        F: Fn(&[T], &mut [T]) + Send + Sync + 'static,
    {
        Op::User(UserOp {
            f: typed_kernel(f),
            commutative,
        })
    }
}

/// A raw kernel running a typed user function.
fn typed_kernel<T, F>(f: F) -> RawFn
where
    T: Equivalence,
    F: Fn(&[T], &mut [T]) + Send + Sync + 'static,
{
    Arc::new(move |invec: &[u8], inout: &mut [u8], count: usize| {
        let n = count * size_of::<T>();
        let (a, b) = (&invec[..n], &mut inout[..n]);
        let a: Cow<'_, [T]> = match cast_slice::<T>(a) {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(from_bytes(a)),
        };
        match cast_slice_mut::<T>(b) {
            Some(s) => f(&a, s),
            None => {
                let mut v = from_bytes::<T>(b);
                f(&a, &mut v);
                write_bytes(&v, b);
            }
        }
    })
}

impl From<&Op> for Op {
    fn from(op: &Op) -> Op {
        op.clone()
    }
}

impl Op {
    /// Whether the operation is commutative: every predefined operation is;
    /// a user-defined one is as declared.
    pub fn is_commutative(&self) -> bool {
        match self {
            Op::User(u) => u.commutative,
            _ => true,
        }
    }

    /// The MPI name of the operation (`"MPI_SUM"`).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Sum => "MPI_SUM",
            Op::Prod => "MPI_PROD",
            Op::Min => "MPI_MIN",
            Op::Max => "MPI_MAX",
            Op::Land => "MPI_LAND",
            Op::Lor => "MPI_LOR",
            Op::Lxor => "MPI_LXOR",
            Op::Band => "MPI_BAND",
            Op::Bor => "MPI_BOR",
            Op::Bxor => "MPI_BXOR",
            Op::MinLoc => "MPI_MINLOC",
            Op::MaxLoc => "MPI_MAXLOC",
            Op::Replace => "MPI_REPLACE",
            Op::NoOp => "MPI_NO_OP",
            Op::User(_) => "user-defined operation",
        }
    }
}

/// The groups of the MPI standard's table of valid (operation, datatype)
/// pairs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Int,
    Float,
    Bool,
    Byte,
    Pair,
}

#[inline]
fn class(p: Primitive) -> Class {
    use Primitive as P;
    match p {
        P::I8
        | P::I16
        | P::I32
        | P::I64
        | P::U8
        | P::U16
        | P::U32
        | P::U64
        | P::I128
        | P::U128
        | P::ISize
        | P::USize
        | P::Char => Class::Int,
        P::F32 | P::F64 | P::F16 | P::BF16 => Class::Float,
        P::Bool => Class::Bool,
        P::Byte => Class::Byte,
        P::FloatInt | P::DoubleInt | P::LongInt | P::TwoInt | P::ShortInt => Class::Pair,
    }
}

/// Whether `MPI_Compare_and_swap` takes `p`: integer, logical and byte
/// types (it compares bits).
pub(crate) fn compares_bits(p: Primitive) -> bool {
    matches!(class(p), Class::Int | Class::Bool | Class::Byte)
}

/// Whether a reduction may apply `op` to `prim` (the MPI standard's table,
/// see [`Op`]). The error says why not, e.g. "MPI_SUM is not defined for
/// MPI_C_BOOL".
pub(crate) fn check(op: &Op, prim: Primitive) -> Result<(), String> {
    match defined(op, prim) {
        Some(true) => Ok(()),
        Some(false) => Err(format!(
            "{} is not defined for {}",
            op.name(),
            prim.mpi_name()
        )),
        None => Err(format!(
            "{} is only valid in one-sided operations, not in reductions",
            op.name()
        )),
    }
}

/// [`check`]'s table: whether `op` is defined on `prim`, `None` for the ops
/// that are never valid in a reduction (`Replace`, `NoOp`).
#[inline]
fn defined(op: &Op, prim: Primitive) -> Option<bool> {
    use Class as C;
    let c = class(prim);
    Some(match op {
        Op::Sum | Op::Prod => matches!(c, C::Int | C::Float),
        Op::Min | Op::Max => matches!(c, C::Int | C::Float),
        Op::Land | Op::Lor | Op::Lxor => matches!(c, C::Int | C::Bool),
        Op::Band | Op::Bor | Op::Bxor => matches!(c, C::Int | C::Byte),
        Op::MinLoc | Op::MaxLoc => c == C::Pair,
        Op::User(_) => true,
        Op::Replace | Op::NoOp => return None,
    })
}

/// [`check`] for any datatype: a datatype without a predefined meaning
/// ([`Datatype::Opaque`]) takes only user-defined operations.
pub(crate) fn check_datatype(op: &Op, dt: Datatype) -> Result<(), String> {
    match dt {
        Datatype::Primitive(p) => check(op, p),
        Datatype::Opaque { size } => match op {
            Op::User(_) => Ok(()),
            // The one-sided message.
            Op::Replace | Op::NoOp => check(op, Primitive::Byte),
            _ => Err(format!(
                "{} is not defined for a {size}-byte user datatype",
                op.name()
            )),
        },
    }
}

/// Bytes of `count` elements of `elem` bytes, checked against both buffers.
fn span(count: usize, elem: usize, invec: &[u8], inout: &[u8]) -> usize {
    let n = count.checked_mul(elem);
    match n {
        Some(n) if n <= invec.len() && n <= inout.len() => n,
        _ => panic!(
            "reduction of {count} elements of {elem} bytes: buffers of {} and {} bytes",
            invec.len(),
            inout.len()
        ),
    }
}

/// `inout = invec ∘ inout` element-wise on `count` elements of `prim`, stored
/// in native byte order at any alignment (the bytes after `count` elements
/// are left alone).
///
/// Call [`check`] first. `Replace` copies `invec`, `NoOp` leaves `inout` as
/// it is (their one-sided meanings), on any datatype.
///
/// # Panics
/// If either buffer is shorter than `count` elements, or `(op, prim)` is a
/// pair [`check`] rejects (other than `Replace`/`NoOp`).
pub(crate) fn apply(op: &Op, prim: Primitive, count: usize, invec: &[u8], inout: &mut [u8]) {
    apply_on(Simd::get(), op, prim, count, invec, inout)
}

/// [`apply`] with the element-wise kernels of vector unit `simd`.
fn apply_on(simd: Simd, op: &Op, prim: Primitive, count: usize, invec: &[u8], inout: &mut [u8]) {
    use Primitive as P;
    let n = span(count, Datatype::Primitive(prim).size(), invec, inout);
    let (a, b) = (&invec[..n], &mut inout[..n]);
    match op {
        Op::User(u) => return u.call(a, b, count),
        Op::Replace => return b.copy_from_slice(a),
        Op::NoOp => return,
        _ => {}
    }
    if let Err(e) = check(op, prim) {
        panic!("reduction kernel: {e}");
    }
    match prim {
        P::FloatInt => loc::<f32>(op, 8, 4, a, b),
        P::DoubleInt => loc::<f64>(op, 16, 8, a, b),
        P::LongInt => loc::<i64>(op, 16, 8, a, b),
        P::TwoInt => loc::<i32>(op, 8, 4, a, b),
        P::ShortInt => loc::<i16>(op, 8, 4, a, b),
        _ => elementwise(simd, op, prim)
            .expect("`check` passes only element-wise ops on these types")(a, b),
    }
}

/// An element-wise reduction kernel: `inout = invec ∘ inout` over two
/// slices of the same length, a whole number of elements, at any alignment.
pub(crate) type Kernel = fn(&[u8], &mut [u8]);

/// The kernel of a predefined `op` on `prim`, checked once, for callers that
/// apply the same reduction many times (the small-allreduce fast path).
/// `None` for user-defined ops, `MINLOC`/`MAXLOC` (pairs, see [`apply`]) and
/// whatever [`check`] rejects; [`apply`] handles all of those.
///
/// A look-up in a table made once per vector level (resolving through
/// [`defined`] and [`typed`] cost 38 of the 450 instructions of an 8-byte
/// `MPI_Accumulate`).
#[inline]
pub(crate) fn kernel(op: &Op, prim: Primitive) -> Option<Kernel> {
    let i = table_op(op)?;
    let s = Simd::get();
    let t = KERNELS[usize::from(Simd::number(s)) - 1].get_or_init(|| kernel_table(s));
    *t.get(i)?.get(prim as usize)?
}

/// The element-wise operations, which [`code`] numbers first: the rows of
/// [`kernel`]'s tables.
const TABLE_OPS: usize = 10;

/// The element types that have element-wise kernels (the pair types have
/// none); a type missing here only takes the general road ([`apply`]).
const TABLE_PRIMS: [Primitive; 19] = {
    use Primitive as P;
    [
        P::I8,
        P::I16,
        P::I32,
        P::I64,
        P::U8,
        P::U16,
        P::U32,
        P::U64,
        P::F32,
        P::F64,
        P::F16,
        P::BF16,
        P::Bool,
        P::I128,
        P::U128,
        P::ISize,
        P::USize,
        P::Byte,
        P::Char,
    ]
};

/// Room for every [`Primitive`] by its discriminant.
const PRIM_SLOTS: usize = 32;

/// The kernels of one vector level: `[op][prim as usize]`.
type KernelTable = [[Option<Kernel>; PRIM_SLOTS]; TABLE_OPS];

/// [`kernel`]'s tables, one per vector level ([`Simd::number`] - 1).
static KERNELS: [std::sync::OnceLock<KernelTable>; 3] = [const { std::sync::OnceLock::new() }; 3];

/// `op`'s row in [`kernel`]'s tables.
#[inline]
fn table_op(op: &Op) -> Option<usize> {
    code(op).map(usize::from).filter(|&c| c < TABLE_OPS)
}

/// The number of a predefined operation (`None` for a user function): the
/// one-sided transport's wire code (`win/am.rs`), the element-wise
/// operations first (the rows of [`kernel`]'s tables).
pub(crate) fn code(op: &Op) -> Option<u8> {
    Some(match op {
        Op::Sum => 0,
        Op::Prod => 1,
        Op::Min => 2,
        Op::Max => 3,
        Op::Land => 4,
        Op::Lor => 5,
        Op::Lxor => 6,
        Op::Band => 7,
        Op::Bor => 8,
        Op::Bxor => 9,
        Op::MinLoc => 10,
        Op::MaxLoc => 11,
        Op::Replace => 12,
        Op::NoOp => 13,
        Op::User(_) => return None,
    })
}

/// The predefined operation numbered `c` ([`code`]).
pub(crate) fn from_code(c: u8) -> Option<Op> {
    Some(match c {
        0 => Op::Sum,
        1 => Op::Prod,
        2 => Op::Min,
        3 => Op::Max,
        4 => Op::Land,
        5 => Op::Lor,
        6 => Op::Lxor,
        7 => Op::Band,
        8 => Op::Bor,
        9 => Op::Bxor,
        10 => Op::MinLoc,
        11 => Op::MaxLoc,
        12 => Op::Replace,
        13 => Op::NoOp,
        _ => return None,
    })
}

/// Every kernel of vector level `s` that [`defined`] allows.
fn kernel_table(s: Simd) -> KernelTable {
    let mut t: KernelTable = [[None; PRIM_SLOTS]; TABLE_OPS];
    for (i, row) in t.iter_mut().enumerate() {
        let op = from_code(i as u8).expect("the element-wise operations are numbered first");
        for p in TABLE_PRIMS {
            if defined(&op, p) == Some(true) {
                row[p as usize] = elementwise(s, &op, p);
            }
        }
    }
    t
}

/// The element-wise kernel of `op` on `prim` for vector unit `simd`,
/// unchecked: `None` for the pair types and for ops that have no
/// element-wise kernel.
#[inline]
fn elementwise(simd: Simd, op: &Op, prim: Primitive) -> Option<Kernel> {
    match simd {
        Simd::Base => typed::<BASE>(op, prim),
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => typed::<AVX2>(op, prim),
        #[cfg(target_arch = "x86_64")]
        Simd::Avx512 => typed::<AVX512>(op, prim),
    }
}

/// The vector levels as the kernels' const parameter ([`Simd`] as a
/// number): the baseline loop, AVX2, AVX-512.
const BASE: u8 = 0;
#[cfg(target_arch = "x86_64")]
const AVX2: u8 = 1;
#[cfg(target_arch = "x86_64")]
const AVX512: u8 = 2;

/// [`elementwise`] for one vector unit, `L` (one branch on the unit per
/// resolution, then the same two table look-ups at every level).
fn typed<const L: u8>(op: &Op, prim: Primitive) -> Option<Kernel> {
    use Primitive as P;
    match prim {
        P::I8 | P::Char => int::<i8, L>(op),
        P::I16 => int::<i16, L>(op),
        P::I32 => int::<i32, L>(op),
        P::I64 => int::<i64, L>(op),
        P::I128 => int::<i128, L>(op),
        P::ISize => int::<isize, L>(op),
        P::U8 | P::Bool | P::Byte => int::<u8, L>(op),
        P::U16 => int::<u16, L>(op),
        P::U32 => int::<u32, L>(op),
        P::U64 => int::<u64, L>(op),
        P::U128 => int::<u128, L>(op),
        P::USize => int::<usize, L>(op),
        P::F32 => arith::<f32, L>(op),
        P::F64 => arith::<f64, L>(op),
        // Half precision: each operation in f32, rounded back (as the
        // `half` crate's operators and CUDA's `__half` arithmetic do).
        P::F16 => arith::<half::f16, L>(op),
        P::BF16 => arith::<half::bf16, L>(op),
        P::FloatInt | P::DoubleInt | P::LongInt | P::TwoInt | P::ShortInt => None,
    }
}

/// [`apply`] for any datatype: on a [`Datatype::Opaque`] type only
/// user-defined operations (and `Replace`/`NoOp`) apply.
///
/// # Panics
/// As [`apply`]; and for a predefined operation on an opaque type.
#[inline]
pub(crate) fn apply_datatype(op: &Op, dt: Datatype, count: usize, invec: &[u8], inout: &mut [u8]) {
    match dt {
        Datatype::Primitive(p) => apply(op, p, count, invec, inout),
        Datatype::Opaque { size } => {
            let n = span(count, size, invec, inout);
            let (a, b) = (&invec[..n], &mut inout[..n]);
            match op {
                Op::User(u) => u.call(a, b, count),
                Op::Replace => b.copy_from_slice(a),
                Op::NoOp => {}
                _ => panic!(
                    "reduction kernel: {} on a {size}-byte user datatype",
                    op.name()
                ),
            }
        }
    }
}

/// A number the kernels combine: loads and stores itself in native byte
/// order, and adds and multiplies (wrapping, for integers).
trait Num: Equivalence + PartialOrd {
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
    fn sum(self, o: Self) -> Self;
    fn prod(self, o: Self) -> Self;
}

/// An integer: bitwise and logical operations too.
trait Int: Num + BitAnd<Output = Self> + BitOr<Output = Self> + BitXor<Output = Self> {
    /// Nonzero.
    fn truth(self) -> bool;
    /// 1 or 0.
    fn from_truth(t: bool) -> Self;
}

macro_rules! num {
    ($add:ident, $mul:ident: $($t:ty),*) => {$(
        impl Num for $t {
            #[inline(always)]
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b.try_into().expect("element-sized chunk"))
            }
            #[inline(always)]
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_ne_bytes())
            }
            #[inline(always)]
            fn sum(self, o: Self) -> Self {
                self.$add(o)
            }
            #[inline(always)]
            fn prod(self, o: Self) -> Self {
                self.$mul(o)
            }
        }
    )*};
}

num!(wrapping_add, wrapping_mul: i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);
// Floats: IEEE addition and multiplication (`std::ops`).
num!(add, mul: f32, f64, half::f16, half::bf16);

macro_rules! int {
    ($($t:ty),*) => {$(
        impl Int for $t {
            #[inline(always)]
            fn truth(self) -> bool {
                self != 0
            }
            #[inline(always)]
            fn from_truth(t: bool) -> Self {
                <$t>::from(t)
            }
        }
    )*};
}

int!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);

/// The bytes of [`zip`]'s fixed-length inner loop on aligned slices.
const BLOCK: usize = 64;

/// The shortest buffer (bytes) an AVX2 kernel hands to its AVX2 loop
/// ([`zip_wide`]). The call costs about 2 ns (64 bytes of i32: 0.0057 µs
/// against the inlined baseline loop's 0.0036); the two break even at 512
/// bytes, and AVX2 wins by a quarter at 1 KiB (`sum_speed`, dev VM).
const AVX2_FROM: usize = 512;

/// The same for an AVX-512 kernel: at 256 bytes the two are even, at 512
/// bytes of `i32` AVX-512 takes 0.0050 µs against the baseline's 0.0091
/// (`sum_speed`, 2-core AMD EPYC (Zen 4) dev VM).
const AVX512_FROM: usize = 512;

/// `b[i] = f(a[i], b[i])` over whole slices of equal length: a typed loop
/// when both are aligned for `T`, value by value otherwise.
#[inline(always)]
fn zip<T: Num>(a: &[u8], b: &mut [u8], f: impl Fn(T, T) -> T) {
    if let (Some(x), Some(y)) = (cast_slice::<T>(a), cast_slice_mut::<T>(b)) {
        // Blocks of 64 bytes, a fixed-length loop the compiler turns into
        // straight vector code (one AVX-512 operation, two AVX2 ones, four
        // SSE2 ones), then the rest. A plain loop over the whole slice is
        // vectorized four vectors at a time, with a tail of masked loads
        // and stores in the wide builds; [`zip_wide`] hands those builds
        // whole blocks only.
        let l = BLOCK / size_of::<T>();
        if x.len() < l {
            // Less than a block (a one-element accumulate, say): the loop
            // alone, without the blocks' bookkeeping.
            for (x, y) in x.iter().zip(y.iter_mut()) {
                *y = f(*x, *y);
            }
            return;
        }
        let mut xs = x.chunks_exact(l);
        let mut ys = y.chunks_exact_mut(l);
        for (x, y) in (&mut xs).zip(&mut ys) {
            for (x, y) in x.iter().zip(y.iter_mut()) {
                *y = f(*x, *y);
            }
        }
        for (x, y) in xs.remainder().iter().zip(ys.into_remainder()) {
            *y = f(*x, *y);
        }
        return;
    }
    let s = size_of::<T>();
    for (x, y) in a.chunks_exact(s).zip(b.chunks_exact_mut(s)) {
        f(T::load(x), T::load(y)).store(y);
    }
}

/// [`zip`] compiled for AVX2 (256-bit vectors).
///
/// # Safety
/// The CPU must have AVX2: call it only under [`Simd::Avx2`] or above.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn zip_avx2<T: Num>(a: &[u8], b: &mut [u8], f: impl Fn(T, T) -> T) {
    zip(a, b, f)
}

/// [`zip`] compiled for AVX-512 (512-bit vectors), with the byte, word and
/// quadword instructions (`BW`, `DQ`) and the shorter forms (`VL`): the
/// x86-64-v4 set, so that every element type has whole-width operations.
///
/// # Safety
/// The CPU must have those four: call it only under [`Simd::Avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn zip_avx512<T: Num>(a: &[u8], b: &mut [u8], f: impl Fn(T, T) -> T) {
    // One flat loop: [`zip`]'s blocks of 16 `i32`s, say, the compiler
    // vectorizes *across* blocks here, with gathers and scatters at a
    // block's stride (ten times slower than the baseline loop at 4 KiB).
    // The caller hands whole blocks, so the loop's tail is short.
    if let (Some(x), Some(y)) = (cast_slice::<T>(a), cast_slice_mut::<T>(b)) {
        for (x, y) in x.iter().zip(y.iter_mut()) {
            *y = f(*x, *y);
        }
        return;
    }
    zip(a, b, f)
}

/// [`zip`] of a buffer of [`AVX2_FROM`] ([`AVX512_FROM`]) bytes or more
/// at level `L`: whole blocks by [`zip_avx2`] ([`zip_avx512`]), the rest
/// by the baseline loop. In a wide function the compiler turns a loop of
/// fewer than a block's elements into masked loads and stores, which AMD's
/// cores run slowly (an 8-byte sum took 14-20 ns instead of 3 in AVX2). A
/// block is a whole number of elements of every type, so both parts keep
/// the buffers' alignment.
///
/// Out of line, so that the kernels' path for small buffers, the inlined
/// baseline loop, pays for no stack frame.
///
/// # Safety
/// The CPU must have level `L` ([`zip_avx2`], [`zip_avx512`]).
#[cfg(target_arch = "x86_64")]
#[inline(never)]
unsafe fn zip_wide<T: Num, const L: u8>(a: &[u8], b: &mut [u8], f: impl Fn(T, T) -> T + Copy) {
    let n = a.len().min(b.len()) / BLOCK * BLOCK;
    if L == AVX512 {
        // SAFETY: the caller's contract.
        unsafe { zip_avx512(&a[..n], &mut b[..n], f) };
    } else {
        // SAFETY: the caller's contract.
        unsafe { zip_avx2(&a[..n], &mut b[..n], f) };
    }
    zip(&a[n..], &mut b[n..], f)
}

/// The vector unit the element-wise kernels are compiled for.
///
/// The crate is built for baseline x86-64 (SSE2), so a plain loop moves 16
/// bytes at a time; [`zip`] is also compiled for AVX2 and for AVX-512, and
/// the kernel is picked for the CPU the process runs on when it is
/// resolved (once per call, or once per collective plan), as Open MPI's
/// `op/avx` component does. Inside the kernel there is no further check.
///
/// On the 2-core AMD EPYC (Zen 4) dev VM, `sum_speed` (`i32`, aligned,
/// cached data; µs):
///
/// | bytes | baseline | AVX2 | AVX-512 |
/// |---|---|---|---|
/// | 512 | 0.0091 | 0.0062 | 0.0050 |
/// | 1 KiB | 0.0166 | 0.0105 | 0.0071 |
/// | 4 KiB | 0.0637 | 0.0376 | 0.0210 |
/// | 32 KiB | 0.616 | 0.351 | 0.316 |
/// | 1 MiB | 20.8 | 18.0 | 17.9 |
///
/// The same on `i8`, `i64`, `f32` and `f64`. (An earlier AVX-512 build was
/// measured no faster. Built from [`zip`]'s blocks, the compiler vectorizes
/// across them with gathers and scatters, ten times slower: likely the
/// reason. [`zip_avx512`] runs one flat loop.)
/// The `simd` setting (`GMPI_SIMD`) caps the level (`avx2` where a
/// processor lowers its clock for 512-bit work, as older Intel Xeons do).
///
/// `Avx2` and `Avx512` exist only where [`Simd::get`] found them: that is
/// what the kernels' `unsafe` calls rely on, so nothing outside this module
/// builds one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Simd {
    /// What the crate is compiled for (SSE2 on x86-64).
    Base,
    /// AVX2.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512 (F, BW, DQ and VL).
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// The level in force: 0 until resolved, then 1 + the [`Simd`]'s number.
static LEVEL: AtomicU8 = AtomicU8::new(0);

/// The cap of the `simd` setting, as [`LEVEL`] counts (`u8::MAX`: none).
static LIMIT: AtomicU8 = AtomicU8::new(u8::MAX);

/// The `simd` setting: the widest vector unit the reduction kernels may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimdLimit {
    /// The widest this processor has.
    Auto,
    /// AVX-512 at most.
    Avx512,
    /// AVX2 at most.
    Avx2,
    /// The baseline build (SSE2 on x86-64).
    Base,
}

impl std::str::FromStr for SimdLimit {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "avx512" => Ok(Self::Avx512),
            "avx2" => Ok(Self::Avx2),
            "base" | "sse2" => Ok(Self::Base),
            _ => Err(format!(
                "unknown vector unit {s:?} (auto, avx512, avx2 or base)"
            )),
        }
    }
}

/// Cap the kernels' vector unit (`MPI_Init`, from the `simd` setting);
/// kernels resolved before keep theirs.
pub(crate) fn set_simd_limit(limit: SimdLimit) {
    let cap = match limit {
        SimdLimit::Auto => u8::MAX,
        SimdLimit::Avx512 => 3,
        SimdLimit::Avx2 => 2,
        SimdLimit::Base => 1,
    };
    LIMIT.store(cap, Ordering::Relaxed);
    LEVEL.store(0, Ordering::Relaxed);
}

/// The vector unit the kernels use (`MPI_Init`'s debug line, tests).
pub fn simd_level() -> &'static str {
    match Simd::get() {
        Simd::Base => "baseline",
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => "AVX2",
        #[cfg(target_arch = "x86_64")]
        Simd::Avx512 => "AVX-512",
    }
}

impl Simd {
    /// The vector unit in force: the widest this CPU has, within the
    /// `simd` setting's cap (a load and a branch once resolved).
    #[inline]
    fn get() -> Simd {
        match LEVEL.load(Ordering::Relaxed) {
            1 => Simd::Base,
            #[cfg(target_arch = "x86_64")]
            2 => Simd::Avx2,
            #[cfg(target_arch = "x86_64")]
            3 => Simd::Avx512,
            _ => Self::resolve(),
        }
    }

    /// [`Simd::get`] the first time: detect, cap, remember.
    #[cold]
    fn resolve() -> Simd {
        let all = Self::levels();
        let cap = LIMIT.load(Ordering::Relaxed);
        let s = all
            .into_iter()
            .filter(|l| Self::number(*l) <= cap)
            .max()
            .unwrap_or(Simd::Base);
        LEVEL.store(Self::number(s), Ordering::Relaxed);
        s
    }

    /// [`LEVEL`]'s number of `s`.
    fn number(s: Simd) -> u8 {
        match s {
            Simd::Base => 1,
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => 2,
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => 3,
        }
    }

    /// Every level this CPU can run, narrowest first (std caches the CPUID
    /// answers).
    fn levels() -> Vec<Simd> {
        #[allow(unused_mut)]
        let mut v = vec![Simd::Base];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                v.push(Simd::Avx2);
            }
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512dq")
                && std::arch::is_x86_feature_detected!("avx512vl")
            {
                v.push(Simd::Avx512);
            }
        }
        v
    }

    /// Every level this CPU can run, whatever the cap (for tests that check
    /// each build of the kernels).
    #[cfg(test)]
    fn available() -> Vec<Simd> {
        Self::levels()
    }
}

/// The kernel `b[i] = f(a[i], b[i])` on `T` for level `$level`. `f` must
/// be a path or a closure that captures nothing (the kernel is a plain
/// `fn`).
macro_rules! zip_kernel {
    ($level:expr, $t:ty, $f:expr) => {{
        let k: Kernel = match $level {
            #[cfg(target_arch = "x86_64")]
            AVX2 => wide_kernel!(AVX2, AVX2_FROM, $t, $f),
            #[cfg(target_arch = "x86_64")]
            AVX512 => wide_kernel!(AVX512, AVX512_FROM, $t, $f),
            _ => |a, b| zip::<$t>(a, b, $f),
        };
        k
    }};
}

/// The kernel of a wide level: below `$from` bytes the baseline loop,
/// inlined here, which is faster than a call into wide code; above it
/// [`zip_wide`].
#[cfg(target_arch = "x86_64")]
macro_rules! wide_kernel {
    ($level:ident, $from:expr, $t:ty, $f:expr) => {
        |a, b| {
            if a.len() < $from {
                zip::<$t>(a, b, $f)
            } else {
                // SAFETY: the kernels of a wide level are made only by
                // `typed::<L>` with that level, which `elementwise` calls
                // only under the `Simd` of that level, and that comes only
                // from `Simd::get` on a CPU that has it.
                unsafe { zip_wide::<$t, $level>(a, b, $f) }
            }
        }
    };
}

/// Sum, product, minimum and maximum.
fn arith<T: Num, const L: u8>(op: &Op) -> Option<Kernel> {
    Some(match op {
        Op::Sum => zip_kernel!(L, T, T::sum),
        Op::Prod => zip_kernel!(L, T, T::prod),
        Op::Min => zip_kernel!(L, T, |x: T, y: T| if x < y { x } else { y }),
        Op::Max => zip_kernel!(L, T, |x: T, y: T| if x > y { x } else { y }),
        _ => return None,
    })
}

/// Every operation on integers.
fn int<T: Int, const L: u8>(op: &Op) -> Option<Kernel> {
    Some(match op {
        Op::Land => zip_kernel!(L, T, |x: T, y: T| T::from_truth(x.truth() & y.truth())),
        Op::Lor => zip_kernel!(L, T, |x: T, y: T| T::from_truth(x.truth() | y.truth())),
        Op::Lxor => zip_kernel!(L, T, |x: T, y: T| T::from_truth(x.truth() ^ y.truth())),
        Op::Band => zip_kernel!(L, T, |x: T, y: T| x & y),
        Op::Bor => zip_kernel!(L, T, |x: T, y: T| x | y),
        Op::Bxor => zip_kernel!(L, T, |x: T, y: T| x ^ y),
        _ => return arith::<T, L>(op),
    })
}

/// `MinLoc`/`MaxLoc` on pairs of a `V` value at offset 0 and an `i32` index
/// at `idx`, `stride` bytes apart: the better value wins, and on equal
/// values the smaller index. The winner's bytes (padding included) end up
/// in `b`. A NaN value never compares better or equal, so a pair with a NaN
/// on either side keeps `b`'s pair.
fn loc<V: Num>(op: &Op, stride: usize, idx: usize, a: &[u8], b: &mut [u8]) {
    let max = match op {
        Op::MinLoc => false,
        Op::MaxLoc => true,
        _ => unreachable!("{} is not a location operation", op.name()),
    };
    let vs = size_of::<V>();
    for (x, y) in a.chunks_exact(stride).zip(b.chunks_exact_mut(stride)) {
        let (u, v) = (V::load(&x[..vs]), V::load(&y[..vs]));
        let better = if max { u > v } else { u < v };
        let take = better || (u == v && i32::load(&x[idx..idx + 4]) < i32::load(&y[idx..idx + 4]));
        if take {
            y.copy_from_slice(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use Primitive as P;

    /// The pair types (`MPI_MINLOC`/`MPI_MAXLOC` only).
    const PAIRS: [Primitive; 5] = [
        P::FloatInt,
        P::DoubleInt,
        P::LongInt,
        P::TwoInt,
        P::ShortInt,
    ];

    /// Every primitive: the element types of the kernel tables, then the
    /// pair types.
    const ALL_PRIMS: [Primitive; 24] = {
        let mut all = [P::FloatInt; 24];
        let mut i = 0;
        while i < TABLE_PRIMS.len() {
            all[i] = TABLE_PRIMS[i];
            i += 1;
        }
        let mut k = 0;
        while k < PAIRS.len() {
            all[i + k] = PAIRS[k];
            k += 1;
        }
        all
    };

    /// Compile-time reminder: a new `Primitive` must join `ALL_PRIMS`.
    #[allow(dead_code)]
    fn all_prims_is_exhaustive(p: Primitive) {
        match p {
            P::I8 | P::I16 | P::I32 | P::I64 | P::U8 | P::U16 | P::U32 | P::U64 => {}
            P::F32 | P::F64 | P::F16 | P::BF16 | P::Bool => {}
            P::I128 | P::U128 | P::ISize | P::USize => {}
            P::FloatInt | P::DoubleInt | P::LongInt | P::TwoInt | P::ShortInt => {}
            P::Byte | P::Char => {}
        }
    }

    /// Valid (predefined op, datatype) pairs: 12 integer types × 10 ops,
    /// 4 float types × 4, `Char` 10 (as MPICH), `Bool` 3, `Byte` 3, 5 pair
    /// types × 2.
    const PREDEFINED_VALID: usize = 120 + 16 + 10 + 3 + 3 + 10;

    fn predefined() -> Vec<Op> {
        use Op::*;
        vec![
            Sum, Prod, Min, Max, Land, Lor, Lxor, Band, Bor, Bxor, MinLoc, MaxLoc, Replace, NoOp,
        ]
    }

    /// The standard's table, written out independently of `check`.
    fn expected_valid(op: &Op, p: Primitive) -> bool {
        let ints = [
            P::I8,
            P::I16,
            P::I32,
            P::I64,
            P::U8,
            P::U16,
            P::U32,
            P::U64,
            P::I128,
            P::U128,
            P::ISize,
            P::USize,
        ];
        let floats = [P::F32, P::F64, P::F16, P::BF16];
        let is_int = ints.contains(&p);
        match op {
            // MPICH takes MPI_CHAR as a C integer.
            Op::Sum | Op::Prod => is_int || p == P::Char || floats.contains(&p),
            Op::Min | Op::Max => is_int || p == P::Char || floats.contains(&p),
            Op::Land | Op::Lor | Op::Lxor => is_int || p == P::Char || p == P::Bool,
            Op::Band | Op::Bor | Op::Bxor => is_int || p == P::Char || p == P::Byte,
            Op::MinLoc | Op::MaxLoc => PAIRS.contains(&p),
            Op::User(_) => true,
            Op::Replace | Op::NoOp => false,
        }
    }

    #[test]
    fn check_follows_the_table() {
        let mut ops = predefined();
        ops.push(Op::user(|_: &[u8], _: &mut [u8], _: usize| {}, true));
        let mut valid = 0;
        for op in &ops {
            for &p in &ALL_PRIMS {
                let got = check(op, p);
                assert_eq!(
                    got.is_ok(),
                    expected_valid(op, p),
                    "{op:?} on {p:?}: {got:?}"
                );
                if let Err(e) = got {
                    assert!(e.contains(op.name()), "{e}");
                    if !matches!(op, Op::Replace | Op::NoOp) {
                        assert!(e.contains(p.mpi_name()), "{e}");
                    } else {
                        assert!(e.contains("one-sided"), "{e}");
                    }
                } else {
                    valid += 1;
                }
            }
        }
        assert_eq!(valid, PREDEFINED_VALID + ALL_PRIMS.len());
        assert_eq!(
            check(&Op::Sum, P::Bool).unwrap_err(),
            "MPI_SUM is not defined for MPI_C_BOOL"
        );
        assert_eq!(
            check_datatype(&Op::Sum, Datatype::Opaque { size: 12 }).unwrap_err(),
            "MPI_SUM is not defined for a 12-byte user datatype"
        );
        assert!(check_datatype(&Op::Replace, Datatype::Opaque { size: 12 })
            .unwrap_err()
            .contains("one-sided"));
        assert!(check_datatype(
            &Op::user(|_: &[u8], _: &mut [u8], _: usize| {}, false),
            Datatype::Opaque { size: 12 }
        )
        .is_ok());
        assert!(check_datatype(&Op::Max, Datatype::Primitive(P::F32)).is_ok());
    }

    /// `kernel` exists exactly for the valid element-wise pairs (not for
    /// user ops, pairs, `Replace`/`NoOp`), and gives `apply`'s bytes.
    #[test]
    fn kernels_match_the_table_and_apply() {
        let mut ops = predefined();
        ops.push(Op::user(|_: &[u8], _: &mut [u8], _: usize| {}, true));
        let mut n = 0;
        for op in &ops {
            for &p in &ALL_PRIMS {
                let pair = matches!(op, Op::MinLoc | Op::MaxLoc | Op::User(_));
                let k = kernel(op, p);
                assert_eq!(
                    k.is_some(),
                    expected_valid(op, p) && !pair,
                    "{op:?} on {p:?}"
                );
                let Some(k) = k else { continue };
                n += 1;
                let size = Datatype::Primitive(p).size();
                let a: Vec<u8> = (0..3 * size).map(|i| (i * 37 + 5) as u8).collect();
                let b0: Vec<u8> = (0..3 * size).map(|i| (i * 11 + 200) as u8).collect();
                // Offset by one byte: the unaligned loop too.
                let (mut want, mut got) = (b0.clone(), [vec![0u8], b0.clone()].concat());
                apply(op, p, 3, &a, &mut want);
                k(&a, &mut got[1..]);
                assert_eq!(&got[1..], &want[..], "{op:?} on {p:?}");
            }
        }
        assert_eq!(n, PREDEFINED_VALID - 10);
    }

    #[test]
    fn names_debug_and_commutativity() {
        assert_eq!(Op::Sum.name(), "MPI_SUM");
        assert_eq!(Op::MaxLoc.name(), "MPI_MAXLOC");
        assert_eq!(format!("{:?}", Op::Bxor), "MPI_BXOR");
        let u = Op::user(|_: &[u8], _: &mut [u8], _: usize| {}, false);
        assert!(!u.is_commutative());
        assert!(format!("{u:?}").contains("commutative: false"));
        assert!(Op::user(|_: &[u8], _: &mut [u8], _: usize| {}, true).is_commutative());
        assert!(predefined().iter().all(Op::is_commutative));
    }

    // ---- scalar reference ----

    macro_rules! ref_int {
        ($t:ty, $op:expr, $a:expr, $b:expr) => {{
            const S: usize = size_of::<$t>();
            let mut out = Vec::new();
            for (x, y) in $a.chunks_exact(S).zip($b.chunks_exact(S)) {
                let x = <$t>::from_ne_bytes(x.try_into().unwrap());
                let y = <$t>::from_ne_bytes(y.try_into().unwrap());
                let z: $t = match $op {
                    Op::Sum => x.wrapping_add(y),
                    Op::Prod => x.wrapping_mul(y),
                    Op::Min => std::cmp::min(x, y),
                    Op::Max => std::cmp::max(x, y),
                    Op::Land => (x != 0 && y != 0) as $t,
                    Op::Lor => (x != 0 || y != 0) as $t,
                    Op::Lxor => ((x != 0) != (y != 0)) as $t,
                    Op::Band => x & y,
                    Op::Bor => x | y,
                    Op::Bxor => x ^ y,
                    _ => unreachable!(),
                };
                out.extend_from_slice(&z.to_ne_bytes());
            }
            out
        }};
    }

    macro_rules! ref_float {
        ($t:ty, $op:expr, $a:expr, $b:expr) => {{
            const S: usize = size_of::<$t>();
            let mut out = Vec::new();
            for (x, y) in $a.chunks_exact(S).zip($b.chunks_exact(S)) {
                let x = <$t>::from_ne_bytes(x.try_into().unwrap());
                let y = <$t>::from_ne_bytes(y.try_into().unwrap());
                let z: $t = match $op {
                    Op::Sum => x + y,
                    Op::Prod => x * y,
                    // NaN on either side: inout's value.
                    Op::Min if x.is_nan() || y.is_nan() => y,
                    Op::Max if x.is_nan() || y.is_nan() => y,
                    Op::Min => {
                        if x < y {
                            x
                        } else {
                            y
                        }
                    }
                    Op::Max => {
                        if x > y {
                            x
                        } else {
                            y
                        }
                    }
                    _ => unreachable!(),
                };
                out.extend_from_slice(&z.to_ne_bytes());
            }
            out
        }};
    }

    macro_rules! ref_loc {
        ($v:ty, $stride:expr, $idx:expr, $op:expr, $a:expr, $b:expr) => {{
            const S: usize = size_of::<$v>();
            let mut out = Vec::new();
            for (x, y) in $a.chunks_exact($stride).zip($b.chunks_exact($stride)) {
                let u = <$v>::from_ne_bytes(x[..S].try_into().unwrap());
                let v = <$v>::from_ne_bytes(y[..S].try_into().unwrap());
                let i = i32::from_ne_bytes(x[$idx..$idx + 4].try_into().unwrap());
                let j = i32::from_ne_bytes(y[$idx..$idx + 4].try_into().unwrap());
                #[allow(clippy::float_cmp)]
                let from_in = match $op {
                    Op::MinLoc => u < v || (u == v && i < j),
                    Op::MaxLoc => u > v || (u == v && i < j),
                    _ => unreachable!(),
                };
                out.extend_from_slice(if from_in { x } else { y });
            }
            out
        }};
    }

    fn reference(op: &Op, p: Primitive, a: &[u8], b: &[u8]) -> Vec<u8> {
        match p {
            P::I8 | P::Char => ref_int!(i8, op, a, b),
            P::I16 => ref_int!(i16, op, a, b),
            P::I32 => ref_int!(i32, op, a, b),
            P::I64 => ref_int!(i64, op, a, b),
            P::I128 => ref_int!(i128, op, a, b),
            P::ISize => ref_int!(isize, op, a, b),
            P::U8 | P::Bool | P::Byte => ref_int!(u8, op, a, b),
            P::U16 => ref_int!(u16, op, a, b),
            P::U32 => ref_int!(u32, op, a, b),
            P::U64 => ref_int!(u64, op, a, b),
            P::U128 => ref_int!(u128, op, a, b),
            P::USize => ref_int!(usize, op, a, b),
            P::F32 => ref_float!(f32, op, a, b),
            P::F64 => ref_float!(f64, op, a, b),
            P::F16 => ref_float!(half::f16, op, a, b),
            P::BF16 => ref_float!(half::bf16, op, a, b),
            P::FloatInt => ref_loc!(f32, 8, 4, op, a, b),
            P::DoubleInt => ref_loc!(f64, 16, 8, op, a, b),
            P::LongInt => ref_loc!(i64, 16, 8, op, a, b),
            P::TwoInt => ref_loc!(i32, 8, 4, op, a, b),
            P::ShortInt => ref_loc!(i16, 8, 4, op, a, b),
        }
    }

    /// Equal bytes, except that two NaNs of a float type compare equal
    /// (arithmetic may pick either operand's payload).
    fn same(p: Primitive, got: &[u8], want: &[u8]) -> bool {
        match p {
            P::F32 => got.chunks_exact(4).zip(want.chunks_exact(4)).all(|(g, w)| {
                let (g, w) = (
                    f32::from_ne_bytes(g.try_into().unwrap()),
                    f32::from_ne_bytes(w.try_into().unwrap()),
                );
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())
            }),
            P::F64 => got.chunks_exact(8).zip(want.chunks_exact(8)).all(|(g, w)| {
                let (g, w) = (
                    f64::from_ne_bytes(g.try_into().unwrap()),
                    f64::from_ne_bytes(w.try_into().unwrap()),
                );
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())
            }),
            _ => got == want,
        }
    }

    fn valid_pairs() -> Vec<(Op, Primitive)> {
        let mut v = Vec::new();
        for op in predefined() {
            for &p in &ALL_PRIMS {
                if check(&op, p).is_ok() {
                    v.push((op.clone(), p));
                }
            }
        }
        v
    }

    /// Run `apply` with the inputs at byte offsets `oa`/`ob` past a 16-byte
    /// boundary and compare with the reference; bytes past `count` elements
    /// must be untouched.
    fn run_case(op: &Op, p: Primitive, count: usize, oa: usize, ob: usize, ra: &[u8], rb: &[u8]) {
        let size = Datatype::Primitive(p).size();
        let n = count * size;
        let mut bufa = vec![0u8; n + 64];
        let mut bufb = vec![0u8; n + 64];
        let ba = bufa.as_ptr().align_offset(16) + oa;
        let bb = bufb.as_ptr().align_offset(16) + ob;
        bufa[ba..ba + n].copy_from_slice(&ra[..n]);
        bufb[bb..bb + n].copy_from_slice(&rb[..n]);
        let want = reference(op, p, &ra[..n], &rb[..n]);
        let before = bufb.clone();
        for simd in Simd::available() {
            bufb.copy_from_slice(&before);
            apply_on(
                simd,
                op,
                p,
                count,
                &bufa[ba..ba + n],
                &mut bufb[bb..bb + n + 5],
            );
            assert!(
                same(p, &bufb[bb..bb + n], &want),
                "{op:?} on {p:?} ({simd:?}), count {count}, offsets {oa}/{ob}"
            );
            assert_eq!(bufb[..bb], before[..bb]);
            assert_eq!(bufb[bb + n..], before[bb + n..]);
        }
    }

    /// Pseudo-random bytes (xorshift), with a sprinkling of small values so
    /// that ties, zeros and ones occur.
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut s = seed | 1;
        (0..n)
            .map(|k| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                if k % 7 == 3 {
                    (s % 3) as u8
                } else {
                    s as u8
                }
            })
            .collect()
    }

    #[test]
    fn every_valid_pair_matches_the_reference_aligned_and_not() {
        let pairs = valid_pairs();
        assert_eq!(pairs.len(), PREDEFINED_VALID);
        for (k, (op, p)) in pairs.iter().enumerate() {
            for &(oa, ob) in &[(0, 0), (1, 0), (0, 3), (5, 5), (8, 8)] {
                // 300 and 1031 elements run the vector loops of every
                // build, on every element size, with a remainder.
                for count in [0, 1, 7, 33, 300, 1031] {
                    let n = count * 16;
                    let ra = bytes(k as u64 * 1000 + count as u64, n);
                    let rb = bytes(k as u64 * 7777 + count as u64 + 1, n);
                    run_case(op, *p, count, oa, ob, &ra, &rb);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn random_cases_match_the_reference(
            k in 0usize..PREDEFINED_VALID,
            count in 0usize..48,
            oa in 0usize..16,
            ob in 0usize..16,
            ra in proptest::collection::vec(any::<u8>(), 48 * 16),
            rb in proptest::collection::vec(any::<u8>(), 48 * 16),
        ) {
            let pairs = valid_pairs();
            let (op, p) = &pairs[k];
            run_case(op, *p, count, oa, ob, &ra, &rb);
        }
    }

    fn ne<T: Equivalence>(v: &[T]) -> Vec<u8> {
        let mut out = vec![0u8; std::mem::size_of_val(v)];
        write_bytes(v, &mut out);
        out
    }

    #[test]
    fn integers_wrap_and_logicals_give_zero_or_one() {
        let mut b = ne(&[1i8, -128, 100]);
        apply(&Op::Sum, P::I8, 3, &ne(&[127i8, -1, 100]), &mut b);
        assert_eq!(from_bytes::<i8>(&b), [-128, 127, -56]);
        let mut b = ne(&[u64::MAX, 3]);
        apply(&Op::Prod, P::U64, 2, &ne(&[2u64, 3]), &mut b);
        assert_eq!(from_bytes::<u64>(&b), [u64::MAX - 1, 9]);
        let mut b = ne(&[i128::MAX]);
        apply(&Op::Sum, P::I128, 1, &ne(&[1i128]), &mut b);
        assert_eq!(from_bytes::<i128>(&b), [i128::MIN]);
        let mut b = ne(&[5i32, 0, 7, 0]);
        apply(&Op::Land, P::I32, 4, &ne(&[-3i32, 9, 0, 0]), &mut b);
        assert_eq!(from_bytes::<i32>(&b), [1, 0, 0, 0]);
        let mut b = vec![2u8, 0, 1, 0];
        apply(&Op::Lxor, P::Bool, 4, &[1, 7, 1, 0], &mut b);
        assert_eq!(b, [0, 1, 0, 0]);
    }

    #[test]
    fn half_precision_reduces_as_floats_do_and_refuses_bit_operations() {
        use half::f16;
        let h = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
        let mut b = ne(&h(&[1.0, -2.5, 0.5]));
        apply(&Op::Sum, P::F16, 3, &ne(&h(&[2.0, 0.5, 0.25])), &mut b);
        assert_eq!(from_bytes::<f16>(&b), h(&[3.0, -2.0, 0.75]));
        apply(&Op::Max, P::F16, 3, &ne(&h(&[4.0, -3.0, 1.0])), &mut b);
        assert_eq!(from_bytes::<f16>(&b), h(&[4.0, -2.0, 1.0]));
        apply(&Op::Prod, P::F16, 3, &ne(&h(&[0.5, 2.0, 3.0])), &mut b);
        assert_eq!(from_bytes::<f16>(&b), h(&[2.0, -4.0, 3.0]));
        // 65504 is the largest binary16: past it, infinity.
        let mut b = ne(&h(&[65504.0]));
        apply(&Op::Sum, P::F16, 1, &ne(&h(&[65504.0])), &mut b);
        assert!(from_bytes::<f16>(&b)[0].is_infinite());
        assert!(check(&Op::Band, P::F16).is_err());
        assert!(check(&Op::Sum, P::F16).is_ok());
        assert_eq!(P::F16.mpi_name(), "MPIX_C_FLOAT16");
    }

    #[test]
    fn bfloat16_reduces_as_floats_do_and_rounds_to_even() {
        use half::bf16;
        let h = |v: &[f32]| v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>();
        let mut b = ne(&h(&[1.0, -2.5, 256.0]));
        apply(&Op::Sum, P::BF16, 3, &ne(&h(&[2.0, 0.5, 1.0])), &mut b);
        // 256 + 1 is halfway between 256 and 258: to even.
        assert_eq!(from_bytes::<bf16>(&b), h(&[3.0, -2.0, 256.0]));
        apply(&Op::Min, P::BF16, 3, &ne(&h(&[4.0, -3.0, 1.0])), &mut b);
        assert_eq!(from_bytes::<bf16>(&b), h(&[3.0, -3.0, 1.0]));
        assert!(check(&Op::Bor, P::BF16).is_err());
        assert!(check(&Op::Prod, P::BF16).is_ok());
        assert_eq!(P::BF16.mpi_name(), "MPIX_BFLOAT16");
        assert_eq!(Datatype::Primitive(P::BF16).size(), 2);
    }

    #[test]
    fn float_min_max_and_nan() {
        let nan = f64::NAN;
        let mut b = ne(&[1.0f64, nan, 2.0, 0.0]);
        apply(&Op::Min, P::F64, 4, &ne(&[0.5f64, 1.0, nan, -0.0]), &mut b);
        let r = from_bytes::<f64>(&b);
        assert_eq!(r[0], 0.5);
        assert!(r[1].is_nan(), "NaN in inout stays");
        assert_eq!(r[2], 2.0, "NaN in invec loses");
        assert!(r[3] == 0.0 && r[3].is_sign_positive(), "equal: inout stays");
        let mut b = ne(&[1.0f32, 3.0]);
        apply(&Op::Max, P::F32, 2, &ne(&[2.0f32, f32::NAN]), &mut b);
        assert_eq!(from_bytes::<f32>(&b), [2.0, 3.0]);
    }

    fn two_int(v: &[(i32, i32)]) -> Vec<u8> {
        v.iter()
            .flat_map(|&(a, i)| [a.to_ne_bytes(), i.to_ne_bytes()].concat())
            .collect()
    }

    fn double_int(v: &[(f64, i32)]) -> Vec<u8> {
        v.iter()
            .flat_map(|&(a, i)| [&a.to_ne_bytes()[..], &i.to_ne_bytes(), &[0xee; 4]].concat())
            .collect()
    }

    #[test]
    fn minloc_maxloc_tie_breaking() {
        let a = two_int(&[(5, 3), (5, 0), (4, 9), (6, 1)]);
        let mut b = two_int(&[(5, 1), (5, 2), (5, 0), (5, 0)]);
        apply(&Op::MinLoc, P::TwoInt, 4, &a, &mut b);
        assert_eq!(b, two_int(&[(5, 1), (5, 0), (4, 9), (5, 0)]));
        let mut b = two_int(&[(5, 1), (5, 2), (5, 0), (5, 0)]);
        apply(&Op::MaxLoc, P::TwoInt, 4, &a, &mut b);
        assert_eq!(b, two_int(&[(5, 1), (5, 0), (5, 0), (6, 1)]));

        let a = double_int(&[(1.5, 7), (2.0, 1), (f64::NAN, 0)]);
        let mut b = double_int(&[(1.5, 8), (2.0, 4), (3.0, 5)]);
        apply(&Op::MaxLoc, P::DoubleInt, 3, &a[..], &mut b[..]);
        assert_eq!(b, double_int(&[(1.5, 7), (2.0, 1), (3.0, 5)]));

        // Equal value and index: inout's pair stays, padding and all.
        let mut a = double_int(&[(0.0, 2)]);
        a[12..].fill(0x11);
        let mut b = double_int(&[(-0.0, 2)]);
        let keep = b.clone();
        apply(&Op::MinLoc, P::DoubleInt, 1, &a, &mut b);
        assert_eq!(b, keep);

        // ShortInt: i16 value, 2 bytes of padding, i32 index at offset 4.
        let short = |v: i16, i: i32| [&v.to_ne_bytes()[..], &[0, 0], &i.to_ne_bytes()].concat();
        let a = [short(-2, 9), short(3, 0)].concat();
        let mut b = [short(-2, 4), short(1, 0)].concat();
        apply(&Op::MinLoc, P::ShortInt, 2, &a, &mut b);
        assert_eq!(b, [short(-2, 4), short(1, 0)].concat());
    }

    #[test]
    fn user_ops_see_invec_then_inout() {
        // Non-commutative: concatenation of digits, inout = in * 10 + inout.
        let op = Op::user_typed::<u32, _>(
            |a, b| {
                for (x, y) in a.iter().zip(b.iter_mut()) {
                    *y += x * 10;
                }
            },
            false,
        );
        assert!(!op.is_commutative());
        // Misaligned invec and inout: the typed function still sees u32s.
        let mut a = vec![0u8; 1];
        a.extend(ne(&[1u32, 2, 3]));
        let mut b = vec![0u8; 3];
        b.extend(ne(&[4u32, 5, 6]));
        b.push(0xab);
        apply(&op, P::U32, 3, &a[1..], &mut b[3..]);
        assert_eq!(from_bytes::<u32>(&b[3..15]), [14, 25, 36]);
        assert_eq!(b[15], 0xab);
        // Aligned: views in place.
        let mut b2 = ne(&[7u32, 8, 9]);
        apply(&op, P::U32, 2, &ne(&[1u32, 2, 3]), &mut b2);
        assert_eq!(from_bytes::<u32>(&b2), [17, 28, 9]);

        // Raw user op: receives exactly `count` elements.
        let raw = Op::user(
            |a: &[u8], b: &mut [u8], count: usize| {
                assert_eq!(a.len(), count * 8);
                assert_eq!(b.len(), count * 8);
                for (x, y) in a.iter().zip(b.iter_mut()) {
                    *y = y.wrapping_sub(*x);
                }
            },
            true,
        );
        let mut b = vec![10u8; 20];
        apply(&raw, P::F64, 2, &[3u8; 20], &mut b);
        assert_eq!(&b[..16], &[7u8; 16]);
        assert_eq!(&b[16..], &[10u8; 4]);

        // On an opaque type (a 12-byte struct): count elements of 12 bytes.
        let op = Op::user_typed::<[u32; 3], _>(
            |a, b| {
                for (x, y) in a.iter().zip(b.iter_mut()) {
                    y[2] += x[0];
                }
            },
            true,
        );
        let mut b = ne(&[[1u32, 2, 3], [4, 5, 6]]);
        apply_datatype(
            &op,
            Datatype::Opaque { size: 12 },
            2,
            &ne(&[[10u32, 0, 0], [20, 0, 0]]),
            &mut b,
        );
        assert_eq!(from_bytes::<[u32; 3]>(&b), [[1, 2, 13], [4, 5, 26]]);

        // bool: bytes other than 0/1 read as true, never as an invalid bool.
        let op = Op::user_typed::<bool, _>(
            |a, b| {
                for (x, y) in a.iter().zip(b.iter_mut()) {
                    *y = *x && !*y;
                }
            },
            false,
        );
        let mut b = vec![0u8, 5, 0];
        apply(&op, P::Bool, 3, &[3, 1, 0], &mut b);
        assert_eq!(b, [1, 0, 0]);
    }

    #[test]
    fn replace_and_no_op() {
        let mut b = vec![1u8, 2, 3, 4, 5];
        apply(&Op::NoOp, P::I16, 2, &[9; 4], &mut b);
        assert_eq!(b, [1, 2, 3, 4, 5]);
        apply(&Op::Replace, P::I16, 2, &[9; 4], &mut b);
        assert_eq!(b, [9, 9, 9, 9, 5]);
        apply_datatype(
            &Op::Replace,
            Datatype::Opaque { size: 3 },
            1,
            &[7; 3],
            &mut b,
        );
        assert_eq!(b, [7, 7, 7, 9, 5]);
    }

    #[test]
    #[should_panic(expected = "MPI_BAND is not defined for MPI_DOUBLE")]
    fn apply_rejects_an_invalid_pair() {
        apply(&Op::Band, P::F64, 1, &[0; 8], &mut [0; 8]);
    }

    #[test]
    #[should_panic(expected = "buffers of")]
    fn apply_rejects_short_buffers() {
        apply(&Op::Sum, P::F64, 2, &[0; 16], &mut [0; 8]);
    }

    #[test]
    fn kernel_tables_hold_every_defined_kernel() {
        let ops: Vec<Op> = (0..=u8::MAX).filter_map(from_code).collect();
        assert_eq!(ops.len(), 14);
        for op in &ops {
            for p in ALL_PRIMS {
                assert!((p as usize) < PRIM_SLOTS);
                let want =
                    defined(op, p) == Some(true) && elementwise(Simd::get(), op, p).is_some();
                assert_eq!(kernel(op, p).is_some(), want, "{op:?} on {p:?}");
            }
        }
    }

    #[test]
    fn simd_setting_parses_and_caps() {
        for (text, want) in [
            ("auto", SimdLimit::Auto),
            ("AVX512", SimdLimit::Avx512),
            (" avx2 ", SimdLimit::Avx2),
            ("base", SimdLimit::Base),
            ("sse2", SimdLimit::Base),
        ] {
            assert_eq!(text.parse::<SimdLimit>(), Ok(want), "{text:?}");
        }
        let err = "avx9".parse::<SimdLimit>().unwrap_err();
        assert!(err.contains("\"avx9\"") && err.contains("avx512"), "{err}");
        // Each cap gives the widest level this CPU has within it, and the
        // kernels it resolves still compute the same sums.
        let top = *Simd::levels().last().expect("the baseline at least");
        for (limit, cap) in [
            (SimdLimit::Base, Simd::Base),
            #[cfg(target_arch = "x86_64")]
            (SimdLimit::Avx2, Simd::Avx2),
            #[cfg(target_arch = "x86_64")]
            (SimdLimit::Avx512, Simd::Avx512),
            (SimdLimit::Auto, top),
        ] {
            set_simd_limit(limit);
            assert_eq!(Simd::get(), cap.min(top), "{limit:?}");
            let k = kernel(&Op::Sum, P::I32).expect("a sum kernel");
            let a: Vec<u8> = (0..1024i32).flat_map(|v| v.to_ne_bytes()).collect();
            let mut b = a.clone();
            k(&a, &mut b);
            let sums: Vec<i32> = b
                .chunks_exact(4)
                .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
                .collect();
            assert!(sums.iter().enumerate().all(|(i, v)| *v == 2 * i as i32));
        }
        set_simd_limit(SimdLimit::Auto);
        assert_eq!(Simd::get(), top);
    }

    /// Time of the sum kernels on every vector level this CPU has, aligned
    /// and not, from 8 bytes to 1 MiB: the best of five rounds that take
    /// the levels in turn, so a drift of the machine hits each alike.
    /// `cargo test -p gmpi --lib --release op::tests::sum_speed -- --ignored --nocapture`
    #[test]
    #[ignore = "timing; run in release"]
    fn sum_speed() {
        for (p, label) in [
            (P::I8, "i8"),
            (P::I32, "i32"),
            (P::I64, "i64"),
            (P::F32, "f32"),
            (P::F64, "f64"),
        ] {
            for bytes in [8, 64, 256, 512, 1 << 10, 4 << 10, 32 << 10, 1 << 20] {
                for off in [0usize, 1] {
                    let (a, mut b) = (vec![1u8; bytes + 64], vec![2u8; bytes + 64]);
                    let (sa, sb) = (
                        a.as_ptr().align_offset(64) + off,
                        b.as_ptr().align_offset(64) + off,
                    );
                    let levels = Simd::available();
                    let mut best = vec![f64::MAX; levels.len()];
                    for _round in 0..5 {
                        for (simd, best) in levels.iter().zip(best.iter_mut()) {
                            let k = elementwise(*simd, &Op::Sum, p).expect("a sum kernel");
                            let k = std::hint::black_box(k);
                            let reps = (1 << 27) / bytes.max(64);
                            let t = std::time::Instant::now();
                            for _ in 0..reps {
                                k(
                                    std::hint::black_box(&a[sa..sa + bytes]),
                                    &mut b[sb..sb + bytes],
                                );
                            }
                            *best = best.min(t.elapsed().as_secs_f64() / reps as f64 * 1e6);
                        }
                    }
                    let row: Vec<String> = levels
                        .iter()
                        .zip(&best)
                        .map(|(l, t)| format!("{l:?} {t:.4} µs"))
                        .collect();
                    println!("{label} {bytes:>7} B offset {off}: {}", row.join(", "));
                }
            }
        }
    }
}
