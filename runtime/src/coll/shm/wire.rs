//! The wire format of the shared-memory collectives: what each rank puts
//! in its slot of the area (`gmpi_btl_shm::ShmColl`) for one exchange: a
//! [`HDR`]-byte header, then its data packed.
//!
//! | bytes | field (little-endian) |
//! |---|---|
//! | 0..4 | collective ([`kind`]): 0 the `coll_check` agreement, 1 reduce/allreduce, 2 gather/allgather, 3 bcast, 4 alltoall; 5 this rank could not copy its data out of device memory; 6 scatter, 7 reduce_scatter(_block), 8 gatherv, 9 scatterv, 10 alltoallv, 11 allgatherv (`shm/vform.rs`) |
//! | 4..8 | root (-1: none) |
//! | 8..12 | op: 0 none, 1 `SUM` … 14 `NO_OP`, 15 user-defined (see [`header`]) |
//! | 12..16 | bytes of data that follow (`coll_check`: `u32::MAX` for the `v` forms, whose sizes differ by rank) |
//!
//! Every rank compares every other rank's header with its own before
//! using any data ([`mismatch`]), so ranks that called different
//! collectives, or passed different roots, ops or sizes, all fail the
//! same way instead of reading garbage. `coll_check` gathers the same
//! header through the schedules and compares it the same way. A rank whose
//! contribution could not be packed (a failed device copy) still takes
//! part, so the others do not wait for it forever, with [`kind::FAILED`] in
//! its header: it returns its own error, and the others fail naming it
//! instead of using the data it does not have.

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
    /// In place of the collective's kind: this rank's data is missing (a
    /// copy out of device memory failed), so nobody may use the exchange.
    pub(crate) const FAILED: u32 = 5;
    pub(crate) const SCATTER: u32 = 6;
    pub(crate) const REDUCE_SCATTER: u32 = 7;
    pub(crate) const GATHERV: u32 = 8;
    pub(crate) const SCATTERV: u32 = 9;
    pub(crate) const ALLTOALLV: u32 = 10;
    pub(crate) const ALLGATHERV: u32 = 11;
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

/// Run `f` on this rank's contribution to a shared-memory exchange of
/// `call` on rank `me`: `hdr`, then `input`'s bytes packed through the gpu
/// layer `g` (nothing for `None`). Small contributions are assembled on the stack, larger ones in
/// one allocation. If packing fails, `f` still runs, on a contribution
/// marked [`kind::FAILED`] ([`poison`]), and the packing error is returned
/// whatever `f` returns.
pub(crate) fn with_contribution<R>(
    g: &gmpi_gpu::Gpu,
    call: &str,
    me: i32,
    hdr: [u8; HDR],
    input: Option<&View>,
    f: impl FnOnce(&[u8]) -> Result<R, Error>,
) -> Result<R, Error> {
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
    // (Host data, contiguous or not, is copied in place in one pass.)
    let packed = match input {
        Some(v) => v.pack_into_with(g, call, me, &mut data[HDR..]),
        None => Ok(()),
    };
    if packed.is_err() {
        poison(data);
    }
    let r = f(data);
    packed?;
    r
}

/// Mark a contribution whose data could not be packed: every rank's
/// [`mismatch`] then fails the exchange.
pub(crate) fn poison(data: &mut [u8]) {
    data[0..4].copy_from_slice(&kind::FAILED.to_le_bytes());
}

/// The 4-byte field at byte `i` of a header `h` ([`kind`] at 0, root at 4,
/// op at 8, length at 12); `None` past its end.
#[inline]
pub(crate) fn field(h: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_le_bytes(h.get(i..i + 4)?.try_into().ok()?))
}

/// Compare every rank's header with ours (the header carries the length,
/// so sizes are compared too): the first difference as an error. A
/// contribution marked [`kind::FAILED`], ours or another rank's, is an
/// error too, even where every rank's is.
pub(crate) fn mismatch(call: &str, me: i32, mine: &[u8], slots: &[&[u8]]) -> Option<Error> {
    slots
        .iter()
        .enumerate()
        .find_map(|(r, s)| mismatch_of(call, me, mine, r, s))
}

/// [`mismatch`] for the one contribution `s` of rank `r` (a bcast's root's).
/// Every reader of every collective on the area asks it once per
/// contribution, so the answer for equal headers (ours not marked
/// [`kind::FAILED`], hence neither theirs) is one 16-byte compare, inline.
#[inline]
pub(crate) fn mismatch_of(call: &str, me: i32, mine: &[u8], r: usize, s: &[u8]) -> Option<Error> {
    if let (Some(a), Some(b)) = (s.first_chunk::<HDR>(), mine.first_chunk::<HDR>()) {
        if u128::from_ne_bytes(*a) == u128::from_ne_bytes(*b)
            && b[..4] != kind::FAILED.to_le_bytes()
        {
            return None;
        }
    }
    mismatch_found(call, me, mine, r, s)
}

/// [`mismatch_of`] where the headers differ or one is marked failed: which
/// argument differs, as an error.
#[cold]
#[inline(never)]
fn mismatch_found(call: &str, me: i32, mine: &[u8], r: usize, s: &[u8]) -> Option<Error> {
    let field = |h: &[u8], i: usize| field(h, i).map_or(-1, |v| v as i32);
    let failed = |h: &[u8]| h.len() >= HDR && field(h, 0) == kind::FAILED as i32;
    if !(s.len() < HDR || s[..HDR] != mine[..HDR] || failed(s)) {
        return None;
    }
    let (class, what) = if failed(s) {
        (
            ErrorClass::Other,
            "could not copy its data out of device memory".to_string(),
        )
    } else if s.len() < HDR || field(s, 0) != field(mine, 0) {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gmpi_gpu::double::TestCuda;
    use gmpi_gpu::{Gpu, GpuConfig};

    use super::*;
    use crate::buffer::Ty;
    use crate::datatype::{Datatype, Primitive};

    const CALL: &str = "MPI_Allgather";

    #[test]
    fn a_failed_contribution_still_takes_part_and_fails_every_rank() {
        let cuda = Arc::new(TestCuda::new(1));
        let g = Gpu::with_api(cuda.clone(), GpuConfig::default());
        let p = cuda.malloc(64, 0);
        let v = View {
            base: p,
            len: 64,
            origin: 0,
            count: 16,
            ty: Ty::Basic(Datatype::Primitive(Primitive::I32)),
            writable: false,
        };
        let hdr = header(kind::GATHER, -1, None, 64);
        let healthy = with_contribution(&g, CALL, 0, hdr, Some(&v), |d| Ok(d.to_vec())).unwrap();
        assert_eq!(healthy[..HDR], hdr);

        // Rank 1 cannot copy its data out: it still publishes (so its
        // peers do not wait for it), with a marked header (so they do not
        // use what it published), then returns its own error.
        cuda.fail_copies(Some("CUDA_ERROR_ILLEGAL_ADDRESS: sticky"));
        let mut published = None;
        let e = with_contribution(&g, CALL, 1, hdr, Some(&v), |d| {
            published = Some(d.to_vec());
            Ok(())
        })
        .unwrap_err();
        assert_eq!(e.class(), ErrorClass::Other);
        assert!(
            e.message().contains("cuMemcpyDtoH_v2") && e.message().contains("on rank 1"),
            "{e}"
        );
        let failed = published.expect("the failed rank published");
        assert_eq!(failed.len(), healthy.len());
        assert_ne!(failed[..HDR], hdr);

        // Every rank sees the exchange fail: the healthy ones naming the
        // failed rank, the failed one (whose error wins) too, and so would
        // ranks that all failed.
        let slots = [&healthy[..], &failed[..]];
        let e = mismatch(CALL, 0, &healthy, &slots).expect("rank 0 sees the failure");
        assert_eq!(e.class(), ErrorClass::Other);
        assert!(
            e.message()
                .contains("rank 1 could not copy its data out of device memory"),
            "{e}"
        );
        assert!(mismatch(CALL, 1, &failed, &slots).is_some());
        assert!(mismatch(CALL, 1, &failed, &[&failed[..], &failed[..]]).is_some());
        assert!(mismatch(CALL, 0, &healthy, &[&healthy[..], &healthy[..]]).is_none());
    }

    #[test]
    fn each_header_field_that_differs_is_named_with_its_class() {
        let mine = header(kind::REDUCE, 1, Some(&Op::Sum), 64);
        let of = |s: &[u8]| {
            mismatch_of("MPI_Reduce", 0, &mine, 2, s).map(|e| (e.class(), e.message().to_string()))
        };
        // Equal headers, with data after them or not: nothing to say.
        assert_eq!(of(&mine), None);
        let mut with_data = mine.to_vec();
        with_data.extend_from_slice(&[7; 64]);
        assert_eq!(of(&with_data), None);
        let cases = [
            (
                header(kind::BCAST, 1, Some(&Op::Sum), 64),
                ErrorClass::Other,
                "rank 2 called a different collective",
            ),
            (
                header(kind::REDUCE, 0, Some(&Op::Sum), 64),
                ErrorClass::Root,
                "rank 2 passed root 0, this rank root 1",
            ),
            (
                header(kind::REDUCE, 1, Some(&Op::Max), 64),
                ErrorClass::Op,
                "rank 2 passed a different reduction op",
            ),
            (
                header(kind::REDUCE, 1, Some(&Op::Sum), 32),
                ErrorClass::Count,
                "rank 2 passed 32 bytes, this rank 64",
            ),
        ];
        for (theirs, class, what) in cases {
            let (c, m) = of(&theirs).expect("a difference");
            assert_eq!(c, class, "{m}");
            assert!(m.contains(what) && m.contains("MPI_Reduce"), "{m}");
        }
        // A slot shorter than a header, and a marked one.
        assert_eq!(of(&mine[..8]).map(|(c, _)| c), Some(ErrorClass::Other));
        let mut failed = mine;
        poison(&mut failed);
        assert_eq!(of(&failed).map(|(c, _)| c), Some(ErrorClass::Other));
    }
}
