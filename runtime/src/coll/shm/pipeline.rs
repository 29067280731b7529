//! Collectives larger than a slot of the area, pipelined through it: the
//! data goes in chunks of the slot's room, one epoch each, so a bcast's
//! root copies chunk `k + 1` into its slot while the readers copy chunk
//! `k` out (the root runs up to the area's depth ahead), and an allreduce,
//! allgather or reduce-scatter is one exchange per chunk (a reduce-scatter's
//! chunk holds a piece of every block but the publisher's own). Up to
//! `coll_shm_pipeline_max` this beats the point-to-point schedules on one
//! node, which pay a rendezvous per message (the selector, `select.rs`,
//! sends bcast, reduce, allreduce, allgather and reduce-scatter here
//! between `coll_shm_max` and that size).
//!
//! Every chunk carries the call's header (with its whole length), so the
//! ranks compare their arguments at the first chunk as an unpipelined call
//! does. Ranks must also publish and read the same number of epochs, or
//! the next collective on the communicator would read the wrong slots:
//! - an exchange (allreduce, reduce, allgather; bcast under `coll_check`)
//!   stops after the first chunk on a mismatch, which every rank sees
//!   there, since each compares every header;
//! - a one-way bcast's readers compare the root's header: on a mismatch
//!   one still reads (and drops) as many chunks as the root's length makes,
//!   then fails.
//!
//! A reduce is an exchange here too, not one-way as below a slot: were a
//! non-root's length different from the root's, it would publish a
//! different number of chunks, and no rank could tell.
//!
//! Data are read and written in place when they are one contiguous run of
//! host memory; anything else (device memory, derived datatypes, an input
//! that is also the output) is staged in one host buffer for the call.

use std::ops::Range;

use gmpi_btl_shm::ShmColl;

use super::wire::{field, kind, mismatch, poison, HDR};
use super::{bcast_mismatch, reduce_slots, short, ShmArea};
use crate::buffer::View;
use crate::coll::sched::Reduction;
use crate::coll::select::{Coll, Settings};
use crate::comm::Communicator;
use crate::engine::Locked;
use crate::error::Result;

/// The collectives that go through the area in chunks, for the rule that
/// splits a call of one slot ([`Split::min`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Split {
    /// A bcast, or a reduce with a root.
    Rooted,
    /// An allreduce or allgather (an exchange, every rank reading every slot).
    Exchange,
    /// A reduce-scatter (one piece of every block per chunk).
    Scatter,
}

impl Split {
    /// The smallest length in bytes, for slots of `room` bytes of data,
    /// that goes in more than one chunk. A call of more than half a slot
    /// still goes in two: the readers copy the first chunk out while the
    /// publisher writes the second, and two half copies stay in the first
    /// level cache where one slot-sized one does not. Measured at np 2
    /// with 16 KiB slots (interleaved medians), two chunks took 0.60–0.84
    /// of one slot's time for a bcast of 10–16 KiB and 0.82–0.94 for a
    /// reduce; an allreduce or allgather gained only at a full slot
    /// (0.85, 0.88), none at 14 KiB and lost at 8 KiB (1.08), so those
    /// split from seven eighths of a slot. A reduce-scatter splits only
    /// above a slot.
    fn min(self, room: usize) -> usize {
        match self {
            Split::Rooted => room / 2 + 1,
            Split::Exchange => room / 8 * 7 + 1,
            Split::Scatter => room + 1,
        }
    }
}

/// Bytes of data the slots of `a` hold after the header.
pub(super) fn room(a: &ShmColl) -> usize {
    a.slot_bytes() - HDR
}

/// Bytes of data in each chunk of a call of `len` bytes, in whole `unit`s,
/// through slots of `room` bytes of data: two halves of a call that
/// [`Split::min`] splits and one slot holds, else the room (the selector
/// sends here only calls whose unit fits).
fn chunk_bytes(room: usize, unit: usize, len: usize) -> usize {
    let (unit, full) = (unit.max(1), whole_room(room, unit));
    if len > room {
        return full;
    }
    (len.div_ceil(2).div_ceil(unit) * unit).clamp(unit, full.max(unit))
}

/// The slot's `room` in whole `unit`s.
fn whole_room(room: usize, unit: usize) -> usize {
    room - room % unit.max(1)
}

/// The number of chunks (epochs) of a `len`-byte call of kind `k`, in
/// whole `unit`s, through slots of `room` bytes of data: the publisher
/// and every reader count them alike from the length.
pub(super) fn epochs(k: Split, room: usize, unit: usize, len: usize) -> usize {
    if len < k.min(room) {
        return 1;
    }
    len.div_ceil(chunk_bytes(room, unit, len))
}

/// Whether the general road splits a blocking `coll` of `len` bytes in
/// chunks through slots of `room` bytes of data although one slot holds
/// it (the tiny roads take only what goes in one epoch): a bcast or a
/// reduce (with a root: the tiny roads have no other) from half a slot, an
/// allreduce from seven eighths. The rest split only above a slot, or
/// never.
pub(in crate::coll) fn tiny_splits(coll: Coll, room: usize, len: usize) -> bool {
    let k = match coll {
        Coll::Bcast | Coll::Reduce => Split::Rooted,
        Coll::Allreduce => Split::Exchange,
        _ => return false,
    };
    len >= k.min(room)
}

/// Whether a `len`-byte call of kind `k` goes through `a` in chunks.
pub(super) fn pipelined(k: Split, a: &ShmColl, len: usize) -> bool {
    len >= k.min(room(a))
}

/// The chunks of `len` bytes, `chunk` bytes each (the last one shorter).
fn chunks(len: usize, chunk: usize) -> impl Iterator<Item = Range<usize>> {
    (0..len.div_ceil(chunk)).map(move |k| k * chunk..((k + 1) * chunk).min(len))
}

/// The epochs the root of a one-way bcast publishes, from its first
/// contribution `s` (an empty one: it is not broadcasting), the slots'
/// room for data and, where the area copies by CMA, the smallest bcast
/// that takes the single-copy road (`copy_min`, [`copy_min`]): one, or
/// [`epochs`] where its header is a bcast's (or a failed one's) whose
/// length goes in chunks and is below `copy_min` (from there the root took
/// the single-copy road, `copy.rs`, one epoch). A reader that fails reads
/// them all anyway, so that both sides go on at the same epoch.
pub(super) fn root_epochs(room: usize, copy_min: Option<usize>, s: &[u8]) -> usize {
    match (field(s, 0), field(s, 12)) {
        (Some(kind::BCAST | kind::FAILED), Some(len))
            if copy_min.is_none_or(|m| (len as usize) < m) =>
        {
            epochs(Split::Rooted, room, 1, len as usize)
        }
        _ => 1,
    }
}

/// The `copy_min` of [`root_epochs`] for area `a` under settings `s`: a
/// bcast takes the single-copy road from `coll_shm_copy_min` where the
/// slots do not carry it, in one or in chunks (the selector's `copies`).
pub(super) fn copy_min(a: &ShmColl, s: &Settings) -> Option<usize> {
    let carried = s.shm_max.max(s.shm_pipeline_max);
    a.single_copy()
        .then_some(s.shm_copy_min.max(carried.saturating_add(1)))
}

/// Read and drop `k` contributions of `root` (the rest of a one-way bcast
/// this rank failed: [`root_epochs`]); inline, as every tiny bcast reader
/// calls it, almost always with `k` 0.
#[inline]
pub(super) fn skip_root(
    a: &mut ShmColl,
    root: i32,
    k: usize,
    idle: &mut dyn FnMut(u32) -> Result<()>,
) -> Result<()> {
    for _ in 0..k {
        a.bcast_parts(root as usize, &[], idle, |_| ())?;
    }
    Ok(())
}

/// Whether two views' data may share bytes (both one contiguous run).
fn overlapping(a: &View, b: &View) -> bool {
    match (a.contig_addr(), b.contig_addr()) {
        (Some(x), Some(y)) => x < y + b.bytes() as u64 && y < x + a.bytes() as u64,
        _ => false,
    }
}

/// Run `f` over `v`'s data as host bytes (in place where they are one
/// contiguous run of host memory, unless `stage`; else packed into a
/// temporary) and whether they could be read: a failed device copy still
/// runs `f`, on zeros, so the rank takes part (it marks its header), and
/// that error is returned after it.
fn with_input<R>(
    call: &'static str,
    me: i32,
    v: &View,
    stage: bool,
    f: impl FnOnce(&[u8], bool) -> Result<R>,
) -> Result<R> {
    let mut f = Some(f);
    if !stage {
        if let Some(r) = v.read_contig(|b| (f.take().expect("runs once"))(b, true)) {
            return r;
        }
    }
    let mut buf = vec![0u8; v.bytes()];
    let packed = v.pack_into(call, me, &mut buf);
    let r = (f.take().expect("runs once"))(&buf, packed.is_ok());
    packed?;
    r
}

/// Run `f` over host bytes for `v`'s data (`v`'s own where they are one
/// contiguous run of host memory; else a temporary, unpacked into `v`
/// once `f` succeeded).
fn with_output<R>(
    call: &'static str,
    me: i32,
    v: &View,
    f: impl FnOnce(&mut [u8]) -> Result<R>,
) -> Result<R> {
    let mut f = Some(f);
    if let Some(r) = v.write_contig(|b| (f.take().expect("runs once"))(b)) {
        return r;
    }
    let mut buf = vec![0u8; v.bytes()];
    let r = (f.take().expect("runs once"))(&mut buf)?;
    v.unpack(call, me, &buf)?;
    Ok(r)
}

/// A header marked as a failed contribution where the data could not be
/// read.
fn marked(hdr: [u8; HDR], ok: bool) -> [u8; HDR] {
    let mut h = hdr;
    if !ok {
        poison(&mut h);
    }
    h
}

impl Communicator {
    /// A bcast of more than a slot: one-way in chunks (an exchange per
    /// chunk under `coll_check`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn shm_bcast_pipelined(
        &self,
        e: &mut Locked,
        call: &'static str,
        area: &mut ShmArea<'_>,
        v: &View,
        root: i32,
        hdr: [u8; HDR],
        check: bool,
    ) -> Result<()> {
        let (me, len) = (self.rank(), v.bytes());
        let a = area.coll();
        let room = room(a);
        let chunk = chunk_bytes(room, 1, len);
        let copies = copy_min(a, &e.coll);
        let idle = &mut |k| e.idle_flags(call, k);
        if me == root {
            return with_input(call, me, v, false, |src, ok| {
                let h = marked(hdr, ok);
                for r in chunks(len, chunk) {
                    if !check {
                        a.bcast_parts(root as usize, &[&h, &src[r]], idle, |_| ())?;
                        continue;
                    }
                    let bad = a.exchange_parts(&[&h, &src[r]], idle, |slots| {
                        mismatch(call, me, &h, slots)
                    })?;
                    if let Some(err) = bad {
                        return Err(err);
                    }
                }
                Ok(())
            });
        }
        with_output(call, me, v, |out| {
            let mut mine = chunks(len, chunk);
            // Chunks the root publishes: as many as its length makes, read
            // off its first (one if it is absent).
            let (mut k, mut total, mut failed) = (0usize, 1usize, None);
            while k < total {
                let r = mine.next();
                let first = k == 0;
                let mut take = |s: &[u8]| -> Result<()> {
                    if first {
                        total = root_epochs(room, copies, s);
                    }
                    if let Some(err) = bcast_mismatch(call, me, root, &hdr, s) {
                        return Err(err);
                    }
                    let r = r.clone().expect("a root of this rank's length");
                    if s.len() != HDR + r.len() {
                        return Err(short(call, me, root as usize, s.len()));
                    }
                    out[r].copy_from_slice(&s[HDR..]);
                    Ok(())
                };
                let got = if check {
                    a.exchange_parts(&[&hdr], idle, |slots| {
                        match mismatch(call, me, &hdr, slots) {
                            Some(err) => Err(err),
                            None => take(slots[root as usize]),
                        }
                    })?
                } else {
                    let skip = failed.is_some();
                    a.bcast_parts(root as usize, &[], idle, |s| {
                        if skip {
                            return Ok(());
                        }
                        take(s)
                    })?
                    .unwrap_or(Ok(()))
                };
                if let Err(err) = got {
                    // An exchange: every rank saw it at this chunk and
                    // stops. One-way: the root's chunks are read to the end.
                    if check {
                        return Err(err);
                    }
                    failed.get_or_insert(err);
                }
                k += 1;
            }
            failed.map_or(Ok(()), Err)
        })
    }

    /// A reduce (`root`) or allreduce (`None`) of more than a slot: an
    /// exchange per chunk, each reduced in rank order into the output's
    /// chunk (every rank's, or the root's).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn shm_reduce_pipelined(
        &self,
        e: &mut Locked,
        call: &'static str,
        area: &mut ShmArea<'_>,
        input: &View,
        out: Option<&View>,
        red: &Reduction,
        hdr: [u8; HDR],
    ) -> Result<()> {
        let (me, len) = (self.rank(), input.bytes());
        let a = area.coll();
        let chunk = chunk_bytes(room(a), red.unit, len);
        let idle = &mut |k| e.idle_flags(call, k);
        let stage = out.is_some_and(|o| overlapping(o, input));
        with_input(call, me, input, stage, |src, ok| {
            let h = marked(hdr, ok);
            let mut run = |dst: Option<&mut [u8]>| -> Result<()> {
                let mut dst = dst;
                for r in chunks(len, chunk) {
                    let bad = a.exchange_parts(&[&h, &src[r.clone()]], idle, |slots| {
                        if let Some(err) = mismatch(call, me, &h, slots) {
                            return Some(err);
                        }
                        if let Some(d) = dst.as_deref_mut() {
                            reduce_slots(red, slots, HDR, &mut d[r.clone()]);
                        }
                        None
                    })?;
                    if let Some(err) = bad {
                        return Err(err);
                    }
                }
                Ok(())
            };
            match out {
                Some(o) => with_output(call, me, o, |d| run(Some(d))),
                None => run(None),
            }
        })
    }

    /// A reduce-scatter of more than a slot: an exchange per chunk, in
    /// which each rank publishes the next piece of every other rank's block
    /// of its input (`per` units of each, not its own block's) and reduces,
    /// in rank order, the pieces of its own block the others published
    /// with its own input's, into its output (`counts` in reduction units,
    /// the same on every rank, so every rank makes the same chunks).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn shm_reduce_scatter_pipelined(
        &self,
        e: &mut Locked,
        call: &'static str,
        area: &mut ShmArea<'_>,
        input: &View,
        out: &View,
        counts: &[usize],
        red: &Reduction,
        hdr: [u8; HDR],
    ) -> Result<()> {
        let (me, n, unit) = (self.rank(), counts.len(), red.unit);
        let a = area.coll();
        // Units of each block per chunk: the others' pieces fill a slot
        // (the selector sends here only calls where one unit each fits).
        let per = (whole_room(room(a), unit) / unit / (n - 1).max(1)).max(1);
        let starts: Vec<usize> = counts
            .iter()
            .scan(0, |at, &c| {
                let here = *at;
                *at += c;
                Some(here)
            })
            .collect();
        let epochs = counts.iter().max().map_or(0, |&m| m.div_ceil(per));
        let idle = &mut |k| e.idle_flags(call, k);
        let stage = overlapping(out, input);
        let me = me as usize;
        // Block `j`'s piece of chunk `k`, in bytes of the input.
        let piece = |j: usize, k: usize| {
            let (lo, hi) = ((k * per).min(counts[j]), ((k + 1) * per).min(counts[j]));
            (starts[j] + lo) * unit..(starts[j] + hi) * unit
        };
        with_input(call, me as i32, input, stage, |src, ok| {
            let h = marked(hdr, ok);
            with_output(call, me as i32, out, |dst| {
                let mut parts: Vec<&[u8]> = Vec::with_capacity(n);
                for k in 0..epochs {
                    parts.clear();
                    parts.push(&h);
                    parts.extend((0..n).filter(|&j| j != me).map(|j| &src[piece(j, k)]));
                    let mine = piece(me, k);
                    let at = mine.start - starts[me] * unit;
                    let bad = a.exchange_parts(&parts, idle, |slots| {
                        if let Some(err) = mismatch(call, me as i32, &h, slots) {
                            return Some(err);
                        }
                        let mut pieces: Vec<&[u8]> = Vec::with_capacity(n);
                        for (q, s) in slots.iter().enumerate() {
                            if q == me {
                                pieces.push(&src[mine.clone()]);
                                continue;
                            }
                            // Rank q's slot: the pieces of every block but
                            // its own, in rank order.
                            let others = |j: &usize| *j != q;
                            let len: usize = (0..n).filter(others).map(|j| piece(j, k).len()).sum();
                            let off: usize =
                                (0..me).filter(others).map(|j| piece(j, k).len()).sum();
                            if s.len() != HDR + len {
                                return Some(short(call, me as i32, q, s.len()));
                            }
                            pieces.push(&s[HDR + off..HDR + off + mine.len()]);
                        }
                        if !mine.is_empty() {
                            reduce_slots(red, &pieces, 0, &mut dst[at..at + mine.len()]);
                        }
                        None
                    })?;
                    if let Some(err) = bad {
                        return Err(err);
                    }
                }
                Ok(())
            })
        })
    }

    /// An allgather of blocks of more than a slot: an exchange per chunk of
    /// every rank's block, copied into each block's chunk.
    pub(super) fn shm_allgather_pipelined(
        &self,
        e: &mut Locked,
        call: &'static str,
        area: &mut ShmArea<'_>,
        input: &View,
        blocks: &[View],
        hdr: [u8; HDR],
    ) -> Result<()> {
        let (me, len) = (self.rank(), input.bytes());
        let a = area.coll();
        let chunk = chunk_bytes(room(a), 1, len);
        let idle = &mut |k| e.idle_flags(call, k);
        with_input(call, me, input, false, |src, ok| {
            let h = marked(hdr, ok);
            // Each block in place where it is contiguous host memory, else
            // staged and unpacked at the end.
            let mut staged: Vec<Option<Vec<u8>>> = blocks
                .iter()
                .map(|b| (b.contig_addr().is_none() || !b.is_host()).then(|| vec![0u8; len]))
                .collect();
            for r in chunks(len, chunk) {
                let bad = a.exchange_parts(&[&h, &src[r.clone()]], idle, |slots| {
                    if let Some(err) = mismatch(call, me, &h, slots) {
                        return Some(err);
                    }
                    let all = blocks.iter().zip(staged.iter_mut()).zip(slots);
                    for (i, ((b, st), s)) in all.enumerate() {
                        if s.len() != HDR + r.len() {
                            return Some(short(call, me, i, s.len()));
                        }
                        let piece = &s[HDR..];
                        match st {
                            Some(buf) => buf[r.clone()].copy_from_slice(piece),
                            None => {
                                b.write_contig(|d| d[r.clone()].copy_from_slice(piece));
                            }
                        }
                    }
                    None
                })?;
                if let Some(err) = bad {
                    return Err(err);
                }
            }
            for (b, st) in blocks.iter().zip(staged) {
                if let Some(buf) = st {
                    b.unpack(call, me, &buf)?;
                }
            }
            Ok(())
        })
    }
}
