//! The bit layout of MPICH handles, and the handles gmpi makes.
//!
//! MPICH's handles are 32-bit integers. Predefined objects have fixed values
//! (see [`crate::abi::consts`]: `MPI_COMM_WORLD = 0x44000000`, `MPI_INT =
//! 0x4c000405`: kind bits 30–31 = builtin, object type in bits 26–29, and
//! for datatypes the size in bits 8–15). gmpi gives the objects users
//! create the "indirect" kind (`0xc0000000 | type << 26 | slot`), so they
//! never collide with a predefined value, and decodes them back to a slot
//! in a table. Fortran handles are the same integers, so `MPI_X_f2c`/`c2f`
//! are the identity.

use std::ffi::c_int;

use crate::abi::types::{MPI_Datatype, MPI_Request};

/// The kind bits of the handles gmpi makes.
const USER: u32 = 0xc000_0000;
/// The slot bits of a handle gmpi makes.
const SLOT: u32 = 0x03ff_ffff;

/// Object types (bits 26–29 of a handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    Comm = 0x1,
    Group = 0x2,
    Datatype = 0x3,
    Errhandler = 0x5,
    Op = 0x6,
    Info = 0x7,
    Win = 0x8,
    Keyval = 0x9,
    Request = 0xb,
    Session = 0xe,
}

/// The handle of slot `i` of a `kind` table.
pub fn encode(kind: Kind, i: usize) -> c_int {
    (USER | (kind as u32) << 26 | i as u32) as c_int
}

/// The slot a user handle of `kind` names, if it is one.
pub fn decode(kind: Kind, h: c_int) -> Option<usize> {
    let h = h as u32;
    (h & !SLOT == USER | (kind as u32) << 26).then_some((h & SLOT) as usize)
}

/// The handle of every send that completed when it started (an eager
/// message already in the peer's ring or the loopback queue): one shared
/// value naming no table slot, as MPICH's lightweight requests do, so such a
/// send costs no slot and its completion no look-up. Completing it gives the
/// status of a send and `MPI_REQUEST_NULL`; `MPI_Request_free`,
/// `MPI_Request_get_status` and `MPI_Cancel` treat it as the completed send
/// it is. Its slot number is the largest a handle can hold, which a table
/// would reach only after 2^26 live requests (where handles run out anyway).
pub const SENT: MPI_Request = (USER | (Kind::Request as u32) << 26 | SLOT) as MPI_Request;

/// Slot bit 25 of a request handle: a request of the hot paths that has no
/// table slot (see `tables::direct`): bit 24 says it is a send, bit 23 that
/// it is on `MPI_COMM_SELF` (else `MPI_COMM_WORLD`), bits 17–22 hold the low
/// bits of its pml id's generation and bits 0–16 the id's index. The
/// request table's own slots stay below bit 25 (2^25 live requests), and
/// [`SENT`], all ones, is no direct handle.
const DIRECT: u32 = 1 << 25;
const DIRECT_SEND: u32 = 1 << 24;
const DIRECT_SELF: u32 = 1 << 23;
const DIRECT_GEN_SHIFT: u32 = 17;
/// The generation bits a direct handle keeps.
pub const DIRECT_GEN_MASK: u32 = 0x3f;
/// How many pml indices a direct handle can name (0 up to this, excluded:
/// the all-ones index belongs to [`SENT`]).
pub const DIRECT_INDICES: usize = (1 << DIRECT_GEN_SHIFT) - 1;

/// What a direct request handle says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectHandle {
    /// The pml id's index (below [`DIRECT_INDICES`]).
    pub index: usize,
    /// The pml id's generation, masked with [`DIRECT_GEN_MASK`].
    pub gen: u32,
    pub send: bool,
    pub on_self: bool,
}

/// The handle of a direct request.
pub fn encode_direct(d: DirectHandle) -> MPI_Request {
    debug_assert!(d.index < DIRECT_INDICES);
    let mut slot = DIRECT | (d.gen & DIRECT_GEN_MASK) << DIRECT_GEN_SHIFT | d.index as u32;
    if d.send {
        slot |= DIRECT_SEND;
    }
    if d.on_self {
        slot |= DIRECT_SELF;
    }
    encode(Kind::Request, slot as usize)
}

/// The direct request `h` names, if it is a direct handle.
#[inline]
pub fn decode_direct(h: MPI_Request) -> Option<DirectHandle> {
    let slot = decode(Kind::Request, h)? as u32;
    if slot & DIRECT == 0 || h == SENT {
        return None;
    }
    Some(DirectHandle {
        index: (slot & ((1 << DIRECT_GEN_SHIFT) - 1)) as usize,
        gen: slot >> DIRECT_GEN_SHIFT & DIRECT_GEN_MASK,
        send: slot & DIRECT_SEND != 0,
        on_self: slot & DIRECT_SELF != 0,
    })
}

/// The index of a datatype handle of MPICH's builtin form (`0x4c00_00xx`)
/// in a 256-entry table: its low byte, unique among MPICH's builtin
/// datatypes. `None` for any other form. (A slot is no proof that the
/// handle is predefined: compare the handle stored in the slot.)
#[inline(always)]
pub fn builtin_datatype_slot(h: MPI_Datatype) -> Option<usize> {
    (h as u32 & 0xffff_0000 == 0x4c00_0000).then_some((h & 0xff) as usize)
}

/// The index of a predefined datatype handle in a 256-entry table:
/// [`builtin_datatype_slot`] for the builtin form, and 0xf0 + the index of
/// the five C pair types with holes (`0x8c00_0000..=0x8c00_0004`), whose
/// low bytes no builtin handle uses. `None` for any other handle.
#[inline]
pub fn datatype_slot(h: MPI_Datatype) -> Option<usize> {
    let u = h as u32;
    if let Some(s) = builtin_datatype_slot(h) {
        Some(s)
    } else if (0x8c00_0000..=0x8c00_0004).contains(&u) {
        Some(0xf0 + (u & 0xf) as usize)
    } else {
        None
    }
}
