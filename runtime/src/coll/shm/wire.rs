//! The wire format of the shared-memory collectives: what each rank puts
//! in its slot of the area (`gmpi_btl_shm::ShmColl`) for one exchange: a
//! [`HDR`]-byte header, then its data packed.
//!
//! | bytes | field (little-endian) |
//! |---|---|
//! | 0..4 | collective ([`kind`]): 0 the `coll_check` agreement, 1 reduce/allreduce, 2 gather/allgather, 3 bcast, 4 alltoall |
//! | 4..8 | root (-1: none) |
//! | 8..12 | op: 0 none, 1 `SUM` … 14 `NO_OP`, 15 user-defined (see [`header`]) |
//! | 12..16 | bytes of data that follow (`coll_check`: `u32::MAX` for the `v` forms, whose sizes differ by rank) |
//!
//! Every rank compares every other rank's header with its own before
//! using any data ([`mismatch`]), so ranks that called different
//! collectives, or passed different roots, ops or sizes, all fail the
//! same way instead of reading garbage. `coll_check` gathers the same
//! header through the schedules and compares it the same way.

use crate::buffer::View;
use crate::error::{Error, ErrorClass};
use crate::op::Op;

/// Bytes of the header each rank puts before its data in a shared-memory
/// exchange (and gathers under `coll_check`): which collective, root, op and
/// length, so every rank sees a mismatch between ranks (the same way on every
/// rank) instead of reading garbage or panicking.
pub(crate) const HDR: usize = 16;

/// The collective field of a header.
pub(crate) mod kind {
    /// `coll_check`'s agreement on root, op and size (gathered by schedules).
    pub(crate) const CHECK: u32 = 0;
    /// Reduce and allreduce (root -1), the tiny road included.
    pub(crate) const REDUCE: u32 = 1;
    /// Gather and allgather (root -1).
    pub(crate) const GATHER: u32 = 2;
    pub(crate) const BCAST: u32 = 3;
    pub(crate) const ALLTOALL: u32 = 4;
}

/// The header of a shared-memory exchange.
pub(crate) fn header(kind: u32, root: i32, op: Option<&Op>, len: usize) -> [u8; HDR] {
    let op: u32 = op.map_or(0, |o| match o {
        Op::Sum => 1,
        Op::Prod => 2,
        Op::Min => 3,
        Op::Max => 4,
        Op::Land => 5,
        Op::Lor => 6,
        Op::Lxor => 7,
        Op::Band => 8,
        Op::Bor => 9,
        Op::Bxor => 10,
        Op::MinLoc => 11,
        Op::MaxLoc => 12,
        Op::Replace => 13,
        Op::NoOp => 14,
        Op::User(_) => 15,
    });
    let mut h = [0u8; HDR];
    h[0..4].copy_from_slice(&kind.to_le_bytes());
    h[4..8].copy_from_slice(&root.to_le_bytes());
    h[8..12].copy_from_slice(&op.to_le_bytes());
    h[12..16].copy_from_slice(&(len as u32).to_le_bytes());
    h
}

/// Run `f` on this rank's contribution to a shared-memory exchange: `hdr`,
/// then `input`'s bytes packed (nothing for `None`). Small contributions are
/// assembled on the stack, larger ones in one allocation.
pub(crate) fn with_contribution<R>(
    hdr: [u8; HDR],
    input: Option<&View>,
    f: impl FnOnce(&[u8]) -> R,
) -> R {
    let len = input.map_or(0, View::bytes);
    let mut small = [0u8; 256];
    let mut big = Vec::new();
    let data: &mut [u8] = if HDR + len <= small.len() {
        &mut small[..HDR + len]
    } else {
        big.resize(HDR + len, 0);
        &mut big
    };
    data[..HDR].copy_from_slice(&hdr);
    if let Some(v) = input {
        if v.read_contig(|d| data[HDR..].copy_from_slice(d)).is_none() {
            v.pack_into(&mut data[HDR..]);
        }
    }
    f(data)
}

/// Compare every rank's header with ours (the header carries the length,
/// so sizes are compared too): the first difference as an error.
pub(crate) fn mismatch(call: &str, me: i32, mine: &[u8], slots: &[&[u8]]) -> Option<Error> {
    let field = |h: &[u8], i: usize| i32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    let (r, s) = slots
        .iter()
        .enumerate()
        .find(|(_, s)| s.len() < HDR || s[..HDR] != mine[..HDR])?;
    let (class, what) = if s.len() < HDR || field(s, 0) != field(mine, 0) {
        (
            ErrorClass::Other,
            "called a different collective".to_string(),
        )
    } else if field(s, 4) != field(mine, 4) {
        (
            ErrorClass::Root,
            format!(
                "passed root {}, this rank root {}",
                field(s, 4),
                field(mine, 4)
            ),
        )
    } else if field(s, 8) != field(mine, 8) {
        (
            ErrorClass::Op,
            "passed a different reduction op".to_string(),
        )
    } else {
        (
            ErrorClass::Count,
            format!(
                "passed {} bytes, this rank {}",
                field(s, 12),
                field(mine, 12)
            ),
        )
    };
    Some(Error::new(class, call, me, format!("rank {r} {what}")))
}
