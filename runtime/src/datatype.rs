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
                Primitive::I8 | Primitive::U8 | Primitive::Bool => 1,
                Primitive::I16 | Primitive::U16 => 2,
                Primitive::I32 | Primitive::U32 | Primitive::F32 => 4,
                Primitive::I64 | Primitive::U64 | Primitive::F64 => 8,
                Primitive::I128 | Primitive::U128 => 16,
                Primitive::ISize | Primitive::USize => std::mem::size_of::<usize>(),
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
      u64 => U64, i128 => I128, u128 => U128, f32 => F32, f64 => F64, isize => ISize, usize => USize, bool => Bool);

// SAFETY: arrays of Equivalence types have no padding between elements and
// inherit the element's validity.
unsafe impl<T: Equivalence, const N: usize> Equivalence for [T; N] {}

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
}
