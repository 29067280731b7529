//! Datatypes by handle: the predefined datatypes of the MPICH ABI (what
//! each handle is in the runtime) and the user datatypes of the table.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

use gmpi::{Datatype, Error, ErrorClass, Primitive, UserDatatype};

use crate::abi::*;
use crate::resolve::comm::Shared;
use crate::tables::{err, state};

/// What a predefined MPICH datatype is in the runtime.
#[derive(Debug, Clone, Copy)]
enum Pre {
    P(Primitive),
    /// Moved as `size` bytes of C alignment `align` (the reductions of
    /// `extops`).
    Bytes(usize, usize),
    /// A pair whose MPI size leaves out its C padding: data blocks
    /// (offset, length), extent, alignment (moved as bytes; `extops`).
    Pair(&'static [(isize, usize)], isize, usize),
}

use Primitive as P;

/// Every predefined datatype of the MPICH ABI: handle, name, meaning.
const PREDEFINED: &[(MPI_Datatype, &str, Pre)] = &[
    (MPI_CHAR, "MPI_CHAR", Pre::P(P::Char)),
    (MPI_SIGNED_CHAR, "MPI_SIGNED_CHAR", Pre::P(P::I8)),
    (MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR", Pre::P(P::U8)),
    (MPI_BYTE, "MPI_BYTE", Pre::P(P::Byte)),
    (MPI_WCHAR, "MPI_WCHAR", Pre::P(P::I32)),
    (MPI_SHORT, "MPI_SHORT", Pre::P(P::I16)),
    (MPI_UNSIGNED_SHORT, "MPI_UNSIGNED_SHORT", Pre::P(P::U16)),
    (MPI_INT, "MPI_INT", Pre::P(P::I32)),
    (MPI_UNSIGNED, "MPI_UNSIGNED", Pre::P(P::U32)),
    (MPI_LONG, "MPI_LONG", Pre::P(P::I64)),
    (MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG", Pre::P(P::U64)),
    (MPI_FLOAT, "MPI_FLOAT", Pre::P(P::F32)),
    (MPI_DOUBLE, "MPI_DOUBLE", Pre::P(P::F64)),
    (MPI_LONG_DOUBLE, "MPI_LONG_DOUBLE", Pre::Bytes(16, 16)),
    (MPI_LONG_LONG_INT, "MPI_LONG_LONG_INT", Pre::P(P::I64)),
    (
        MPI_UNSIGNED_LONG_LONG,
        "MPI_UNSIGNED_LONG_LONG",
        Pre::P(P::U64),
    ),
    (MPI_PACKED, "MPI_PACKED", Pre::P(P::Byte)),
    (MPI_FLOAT_INT, "MPI_FLOAT_INT", Pre::P(P::FloatInt)),
    (
        MPI_DOUBLE_INT,
        "MPI_DOUBLE_INT",
        Pre::Pair(&[(0, 8), (8, 4)], 16, 8),
    ),
    (
        MPI_LONG_INT,
        "MPI_LONG_INT",
        Pre::Pair(&[(0, 8), (8, 4)], 16, 8),
    ),
    (
        MPI_SHORT_INT,
        "MPI_SHORT_INT",
        Pre::Pair(&[(0, 2), (4, 4)], 8, 4),
    ),
    (MPI_2INT, "MPI_2INT", Pre::P(P::TwoInt)),
    (
        MPI_LONG_DOUBLE_INT,
        "MPI_LONG_DOUBLE_INT",
        Pre::Pair(&[(0, 16), (16, 4)], 32, 16),
    ),
    (MPI_COMPLEX, "MPI_COMPLEX", Pre::Bytes(8, 4)),
    (MPI_DOUBLE_COMPLEX, "MPI_DOUBLE_COMPLEX", Pre::Bytes(16, 8)),
    (MPI_LOGICAL, "MPI_LOGICAL", Pre::P(P::I32)),
    (MPI_REAL, "MPI_REAL", Pre::P(P::F32)),
    (MPI_DOUBLE_PRECISION, "MPI_DOUBLE_PRECISION", Pre::P(P::F64)),
    (MPI_INTEGER, "MPI_INTEGER", Pre::P(P::I32)),
    (MPI_2INTEGER, "MPI_2INTEGER", Pre::P(P::TwoInt)),
    (MPI_2REAL, "MPI_2REAL", Pre::Bytes(8, 4)),
    (
        MPI_2DOUBLE_PRECISION,
        "MPI_2DOUBLE_PRECISION",
        Pre::Bytes(16, 8),
    ),
    (MPI_CHARACTER, "MPI_CHARACTER", Pre::P(P::Char)),
    (MPI_REAL4, "MPI_REAL4", Pre::P(P::F32)),
    (MPI_REAL8, "MPI_REAL8", Pre::P(P::F64)),
    (MPI_REAL16, "MPI_REAL16", Pre::Bytes(16, 16)),
    (MPI_COMPLEX8, "MPI_COMPLEX8", Pre::Bytes(8, 4)),
    (MPI_COMPLEX16, "MPI_COMPLEX16", Pre::Bytes(16, 8)),
    (MPI_COMPLEX32, "MPI_COMPLEX32", Pre::Bytes(32, 16)),
    (MPI_INTEGER1, "MPI_INTEGER1", Pre::P(P::I8)),
    (MPI_INTEGER2, "MPI_INTEGER2", Pre::P(P::I16)),
    (MPI_INTEGER4, "MPI_INTEGER4", Pre::P(P::I32)),
    (MPI_INTEGER8, "MPI_INTEGER8", Pre::P(P::I64)),
    (MPI_INT8_T, "MPI_INT8_T", Pre::P(P::I8)),
    (MPI_INT16_T, "MPI_INT16_T", Pre::P(P::I16)),
    (MPI_INT32_T, "MPI_INT32_T", Pre::P(P::I32)),
    (MPI_INT64_T, "MPI_INT64_T", Pre::P(P::I64)),
    (MPI_UINT8_T, "MPI_UINT8_T", Pre::P(P::U8)),
    (MPI_UINT16_T, "MPI_UINT16_T", Pre::P(P::U16)),
    (MPI_UINT32_T, "MPI_UINT32_T", Pre::P(P::U32)),
    (MPI_UINT64_T, "MPI_UINT64_T", Pre::P(P::U64)),
    (MPI_C_BOOL, "MPI_C_BOOL", Pre::P(P::Bool)),
    (MPIX_C_FLOAT16, "MPIX_C_FLOAT16", Pre::P(P::F16)),
    (MPIX_BFLOAT16, "MPIX_BFLOAT16", Pre::P(P::BF16)),
    (MPI_C_FLOAT_COMPLEX, "MPI_C_FLOAT_COMPLEX", Pre::Bytes(8, 4)),
    (
        MPI_C_DOUBLE_COMPLEX,
        "MPI_C_DOUBLE_COMPLEX",
        Pre::Bytes(16, 8),
    ),
    (
        MPI_C_LONG_DOUBLE_COMPLEX,
        "MPI_C_LONG_DOUBLE_COMPLEX",
        Pre::Bytes(32, 16),
    ),
    (MPI_AINT, "MPI_AINT", Pre::P(P::ISize)),
    (MPI_OFFSET, "MPI_OFFSET", Pre::P(P::I64)),
    (MPI_COUNT, "MPI_COUNT", Pre::P(P::I64)),
    (MPI_CXX_BOOL, "MPI_CXX_BOOL", Pre::P(P::Bool)),
    (
        MPI_CXX_FLOAT_COMPLEX,
        "MPI_CXX_FLOAT_COMPLEX",
        Pre::Bytes(8, 4),
    ),
    (
        MPI_CXX_DOUBLE_COMPLEX,
        "MPI_CXX_DOUBLE_COMPLEX",
        Pre::Bytes(16, 8),
    ),
    (
        MPI_CXX_LONG_DOUBLE_COMPLEX,
        "MPI_CXX_LONG_DOUBLE_COMPLEX",
        Pre::Bytes(32, 16),
    ),
];

/// The predefined datatypes, indexed by [`datatype_slot`].
struct Predefined {
    by_slot: Vec<Option<(MPI_Datatype, &'static str, UserDatatype)>>,
    /// Per slot: the handle and, for a type the runtime views as a basic
    /// type ([`gmpi::View::raw_basic`]), that type (the hot path of
    /// [`crate::ptr::fast_buf`]).
    basic: Box<[(MPI_Datatype, Option<Datatype>); 256]>,
}

static PREDEF: LazyLock<Predefined> = LazyLock::new(|| {
    let mut by_slot = vec![None; 256];
    let mut basic = Box::new([(MPI_DATATYPE_NULL, None); 256]);
    for &(h, name, pre) in PREDEFINED {
        let layout = |blocks: &[(isize, usize)], extent: isize, align: usize| {
            UserDatatype::predefined_bytes(name, blocks, extent, align)
                .expect("a valid predefined layout")
        };
        let udt = match pre {
            Pre::P(p) => UserDatatype::from(Datatype::Primitive(p)),
            Pre::Bytes(size, align) => layout(&[(0, size)], size as isize, align),
            Pre::Pair(blocks, extent, align) => layout(blocks, extent, align),
        };
        let slot = datatype_slot(h).expect("a predefined handle");
        debug_assert!(by_slot[slot].is_none(), "{name} collides");
        basic[slot] = (h, gmpi::View::raw_basic(&udt));
        by_slot[slot] = Some((h, name, udt));
    }
    Predefined { by_slot, basic }
});

/// Per slot of a predefined datatype the runtime views as a basic type:
/// `handle << 32 | (size + 1)` (0: none), the hot path's one-load look-up
/// (filled by [`init_fast_types`] before `MPI_Init` publishes the running
/// phase, which the hot path checks first).
static FAST_TYPES: [AtomicU64; 256] = [const { AtomicU64::new(0) }; 256];

/// Fill the hot path's table of predefined datatypes (at `MPI_Init`).
pub fn init_fast_types() {
    for (slot, &(h, d)) in PREDEF.basic.iter().enumerate() {
        if let Some(d) = d {
            let v = ((h as u32 as u64) << 32) | (d.size() as u64 + 1);
            FAST_TYPES[slot].store(v, Ordering::Relaxed);
        }
    }
}

/// The size of one element of the predefined datatype `h`, if the hot path
/// handles it (see [`fast_dtype`]); `None` otherwise.
#[inline(always)]
pub fn fast_size(h: MPI_Datatype) -> Option<usize> {
    let v = FAST_TYPES[builtin_datatype_slot(h)?].load(Ordering::Relaxed);
    if (v >> 32) as u32 != h as u32 || v as u32 == 0 {
        return None;
    }
    Some(v as u32 as usize - 1)
}

/// The basic type the predefined datatype `h` is, if `h` is one the runtime
/// views as a basic type: the look-up of the hot path (no lock, no
/// reference count), with no error (the caller falls back to [`dtype`]).
#[inline]
pub fn fast_dtype(h: MPI_Datatype) -> Option<Datatype> {
    let slot = datatype_slot(h)?;
    match PREDEF.basic[slot & 0xff] {
        (hh, d) if hh == h => d,
        _ => None,
    }
}

/// The predefined datatype `h` and its name, if `h` is one.
pub fn predefined(h: MPI_Datatype) -> Option<(&'static UserDatatype, &'static str)> {
    let slot = datatype_slot(h)?;
    match &PREDEF.by_slot[slot] {
        Some((hh, name, dt)) if *hh == h => Some((dt, name)),
        _ => None,
    }
}

/// The datatype `h` (predefined or user).
pub fn dtype(call: &str, h: MPI_Datatype) -> Result<Shared<UserDatatype>, Error> {
    if let Some((dt, _)) = predefined(h) {
        return Ok(Shared::Static(dt));
    }
    if let Some(t) =
        decode(Kind::Datatype, h).and_then(|i| state().types.get(i).map(|o| o.dt.clone()))
    {
        return Ok(Shared::Owned(t));
    }
    Err(err(
        ErrorClass::Type,
        call,
        match h {
            MPI_DATATYPE_NULL => "datatype is MPI_DATATYPE_NULL".to_string(),
            MPI_LB | MPI_UB => {
                "MPI_LB and MPI_UB were removed in MPI-3 (use MPI_Type_create_resized)".to_string()
            }
            _ => format!("datatype = {h:#x} is not a valid datatype"),
        },
    ))
}
