//! Datatypes: the [`Equivalence`] trait that maps Rust types to MPI
//! datatypes. This module holds the `unsafe impl`s for the primitives.

/// The basic MPI datatypes a Rust primitive maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Primitive {
    /// `MPI_INT8_T`
    I8,
    /// `MPI_INT16_T`
    I16,
    /// `MPI_INT32_T`
    I32,
    /// `MPI_INT64_T`
    I64,
    /// `MPI_UINT8_T`
    U8,
    /// `MPI_UINT16_T`
    U16,
    /// `MPI_UINT32_T`
    U32,
    /// `MPI_UINT64_T`
    U64,
    /// `MPI_FLOAT`
    F32,
    /// `MPI_DOUBLE`
    F64,
    /// `MPIX_C_FLOAT16`: IEEE 754 half precision ([`half::f16`]).
    F16,
    /// `MPIX_BFLOAT16` (MPICH 5's): bfloat16, the upper half of an
    /// `f32` ([`half::bf16`]).
    BF16,
    /// `MPI_C_BOOL`
    Bool,
    /// 128-bit integer (no MPI equivalent; moved as 16 bytes)
    I128,
    /// 128-bit unsigned integer (no MPI equivalent; moved as 16 bytes)
    U128,
    /// `MPI_AINT`-sized integer (isize)
    ISize,
    /// `MPI_AINT`-sized unsigned integer (usize)
    USize,
    /// `MPI_BYTE`: one uninterpreted byte.
    Byte,
    /// `MPI_CHAR`: a C `char` (signed 8-bit).
    Char,
    /// `MPI_FLOAT_INT`: `{f32 value; i32 index}`, 8 bytes (see [`FloatInt`]).
    FloatInt,
    /// `MPI_DOUBLE_INT`: `{f64 value; i32 index}` plus 4 bytes of C padding,
    /// 16 bytes (see [`DoubleInt`]). gmpi moves the padding too.
    DoubleInt,
    /// `MPI_LONG_INT`: `{i64 value; i32 index}` plus 4 bytes of C padding,
    /// 16 bytes (see [`LongInt`]). gmpi moves the padding too.
    LongInt,
    /// `MPI_2INT`: `{i32 value; i32 index}`, 8 bytes (see [`TwoInt`]).
    TwoInt,
    /// `MPI_SHORT_INT`: `{i16 value; 2 bytes of C padding; i32 index}`,
    /// 8 bytes (see [`ShortInt`]). gmpi moves the padding too.
    ShortInt,
}

impl Primitive {
    /// The MPI name of the datatype (`"MPI_DOUBLE"`); types without an MPI
    /// equivalent get a `GMPI_` name.
    pub const fn mpi_name(self) -> &'static str {
        match self {
            Primitive::I8 => "MPI_INT8_T",
            Primitive::I16 => "MPI_INT16_T",
            Primitive::I32 => "MPI_INT32_T",
            Primitive::I64 => "MPI_INT64_T",
            Primitive::U8 => "MPI_UINT8_T",
            Primitive::U16 => "MPI_UINT16_T",
            Primitive::U32 => "MPI_UINT32_T",
            Primitive::U64 => "MPI_UINT64_T",
            Primitive::F32 => "MPI_FLOAT",
            Primitive::F64 => "MPI_DOUBLE",
            Primitive::F16 => "MPIX_C_FLOAT16",
            Primitive::BF16 => "MPIX_BFLOAT16",
            Primitive::Bool => "MPI_C_BOOL",
            Primitive::I128 => "GMPI_INT128",
            Primitive::U128 => "GMPI_UINT128",
            Primitive::ISize => "MPI_AINT",
            Primitive::USize => "GMPI_USIZE",
            Primitive::FloatInt => "MPI_FLOAT_INT",
            Primitive::DoubleInt => "MPI_DOUBLE_INT",
            Primitive::LongInt => "MPI_LONG_INT",
            Primitive::TwoInt => "MPI_2INT",
            Primitive::ShortInt => "MPI_SHORT_INT",
            Primitive::Byte => "MPI_BYTE",
            Primitive::Char => "MPI_CHAR",
        }
    }
}

/// The datatype of an [`Equivalence`] type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Datatype {
    /// A predefined datatype.
    Primitive(Primitive),
    /// A user type moved as `size` contiguous bytes (a `#[repr(C)]` struct of
    /// primitives without padding).
    Opaque {
        /// Size in bytes.
        size: usize,
    },
}

impl Datatype {
    /// Size in bytes of one element.
    pub const fn size(self) -> usize {
        match self {
            Datatype::Primitive(p) => match p {
                Primitive::I8
                | Primitive::U8
                | Primitive::Bool
                | Primitive::Byte
                | Primitive::Char => 1,
                Primitive::I16 | Primitive::U16 | Primitive::F16 | Primitive::BF16 => 2,
                Primitive::I32 | Primitive::U32 | Primitive::F32 => 4,
                Primitive::I64 | Primitive::U64 | Primitive::F64 => 8,
                Primitive::I128 | Primitive::U128 => 16,
                Primitive::ISize | Primitive::USize => std::mem::size_of::<usize>(),
                Primitive::FloatInt | Primitive::TwoInt | Primitive::ShortInt => 8,
                Primitive::DoubleInt | Primitive::LongInt => 16,
            },
            Datatype::Opaque { size } => size,
        }
    }
}

/// A type whose values can be sent as their in-memory bytes.
///
/// # Safety
/// Implement only for `Copy` types that have **no padding bytes** and for
/// which **every bit pattern is a valid value** (integers, floats, and
/// `#[repr(C)]` structs or arrays of them laid out without padding). gmpi
/// reads and writes such values as raw bytes. `bool` and `char` do not
/// qualify for arbitrary bytes and are deliberately not implemented except
/// `bool`, whose receivers only ever see bytes sent from a `bool`.
///
/// ```
/// #[derive(Clone, Copy, Default)]
/// #[repr(C)]
/// struct Particle { pos: [f64; 3], id: u64 }
/// // SAFETY: repr(C), four 8-byte fields, no padding, any bits valid.
/// unsafe impl gmpi::Equivalence for Particle {}
/// ```
pub unsafe trait Equivalence: Copy + 'static {
    /// The MPI datatype of one value.
    const DATATYPE: Datatype = Datatype::Opaque {
        size: std::mem::size_of::<Self>(),
    };
}

macro_rules! prim {
    ($($t:ty => $p:ident),* $(,)?) => {$(
        // SAFETY: a primitive number type: no padding, every bit pattern valid.
        unsafe impl Equivalence for $t {
            const DATATYPE: Datatype = Datatype::Primitive(Primitive::$p);
        }
    )*};
}

prim!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32,
      u64 => U64, i128 => I128, u128 => U128, f32 => F32, f64 => F64, isize => ISize, usize => USize, bool => Bool,
      half::f16 => F16, half::bf16 => BF16);

// SAFETY: arrays of Equivalence types have no padding between elements and
// inherit the element's validity.
unsafe impl<T: Equivalence, const N: usize> Equivalence for [T; N] {}

macro_rules! pair {
    ($($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident : $t:ty,)* } => $p:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Default, Clone, Copy, PartialEq)]
        #[repr(C)]
        pub struct $name {
            $($(#[$fdoc])* pub $field: $t,)*
        }

        // SAFETY: repr(C) whose fields are primitive numbers laid out with
        // the C padding spelled out as explicit fields, so there are no
        // padding bytes and every bit pattern is valid.
        unsafe impl Equivalence for $name {
            const DATATYPE: Datatype = Datatype::Primitive(Primitive::$p);
        }
    )*};
}

pair! {
    /// A value-index pair for `MPI_MINLOC`/`MPI_MAXLOC` on `f32`
    /// (`MPI_FLOAT_INT`, 8 bytes).
    FloatInt {
        /// The value compared.
        value: f32,
        /// The index (usually a rank) carried along.
        index: i32,
    } => FloatInt;
    /// A value-index pair for `MPI_MINLOC`/`MPI_MAXLOC` on `f64`
    /// (`MPI_DOUBLE_INT`, 16 bytes with the C padding as `pad`).
    DoubleInt {
        /// The value compared.
        value: f64,
        /// The index (usually a rank) carried along.
        index: i32,
        /// The C struct's trailing padding; ignored by reductions.
        pad: i32,
    } => DoubleInt;
    /// A value-index pair for `MPI_MINLOC`/`MPI_MAXLOC` on `i64`
    /// (`MPI_LONG_INT`, 16 bytes with the C padding as `pad`).
    LongInt {
        /// The value compared.
        value: i64,
        /// The index (usually a rank) carried along.
        index: i32,
        /// The C struct's trailing padding; ignored by reductions.
        pad: i32,
    } => LongInt;
    /// A value-index pair for `MPI_MINLOC`/`MPI_MAXLOC` on `i32`
    /// (`MPI_2INT`, 8 bytes).
    TwoInt {
        /// The value compared.
        value: i32,
        /// The index (usually a rank) carried along.
        index: i32,
    } => TwoInt;
    /// A value-index pair for `MPI_MINLOC`/`MPI_MAXLOC` on `i16`
    /// (`MPI_SHORT_INT`, 8 bytes with the C padding as `pad`).
    ShortInt {
        /// The value compared.
        value: i16,
        /// The C struct's padding after `value`; ignored by reductions.
        pad: i16,
        /// The index (usually a rank) carried along.
        index: i32,
    } => ShortInt;
}

impl FloatInt {
    /// The pair `(value, index)`.
    pub const fn new(value: f32, index: i32) -> Self {
        Self { value, index }
    }
}

impl DoubleInt {
    /// The pair `(value, index)` with zero padding.
    pub const fn new(value: f64, index: i32) -> Self {
        Self {
            value,
            index,
            pad: 0,
        }
    }
}

impl LongInt {
    /// The pair `(value, index)` with zero padding.
    pub const fn new(value: i64, index: i32) -> Self {
        Self {
            value,
            index,
            pad: 0,
        }
    }
}

impl TwoInt {
    /// The pair `(value, index)`.
    pub const fn new(value: i32, index: i32) -> Self {
        Self { value, index }
    }
}

impl ShortInt {
    /// The pair `(value, index)` with zero padding.
    pub const fn new(value: i16, index: i32) -> Self {
        Self {
            value,
            index,
            pad: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_rust() {
        assert_eq!(<i32 as Equivalence>::DATATYPE.size(), 4);
        assert_eq!(<f64 as Equivalence>::DATATYPE.size(), 8);
        assert_eq!(<[u16; 3] as Equivalence>::DATATYPE.size(), 6);
        #[derive(Clone, Copy)]
        #[repr(C)]
        struct P {
            a: f64,
            b: u64,
        }
        // SAFETY: two 8-byte fields, no padding.
        unsafe impl Equivalence for P {}
        assert_eq!(P::DATATYPE, Datatype::Opaque { size: 16 });
        let _ = P { a: 0.0, b: 0 }.a + P { a: 0.0, b: 0 }.b as f64;
    }

    #[test]
    fn pair_types_match_c_layout() {
        fn check<T: Equivalence>(size: usize) {
            assert_eq!(std::mem::size_of::<T>(), size);
            assert_eq!(T::DATATYPE.size(), size);
        }
        check::<FloatInt>(8);
        check::<DoubleInt>(16);
        check::<LongInt>(16);
        check::<TwoInt>(8);
        check::<ShortInt>(8);
        assert_eq!(std::mem::offset_of!(ShortInt, index), 4);
        assert_eq!(std::mem::offset_of!(DoubleInt, index), 8);
        assert_eq!(Datatype::Primitive(Primitive::Byte).size(), 1);
        assert_eq!(Datatype::Primitive(Primitive::Char).size(), 1);
    }
}
