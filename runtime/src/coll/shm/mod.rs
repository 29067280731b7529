//! The shared-memory collectives of single-node communicators: the area
//! (`gmpi_btl_shm::ShmColl`, one slot per rank), set up on the first call
//! the selector sends to it, and the paths that use it instead of
//! schedules: barrier, bcast, reduce and allreduce, gather and allgather,
//! alltoall. Each is one exchange: every rank publishes a header and its
//! contribution ([`wire`]), and once every header agrees, reads what it
//! needs from every slot. Reductions combine the slots in rank order, so
//! every rank gets the same bits.
//!
//! Any rank's buffers may be host, device or managed memory, whatever the
//! other ranks pass (the selector does not ask: every rank must take the
//! same road). The slots hold host bytes: a rank's device (or managed)
//! contribution is copied out of the GPU into its slot
//! (`wire::with_contribution`, `View::pack_into`), and what it receives is
//! copied from the slots into the GPU (`View::unpack`: one copy per
//! contiguous block); reductions into device memory run on the host, in the
//! same rank order, into a host buffer that is then copied in whole. A
//! failed device copy is the call's error on its rank (`MPI_ERR_OTHER`); a
//! rank that could not copy its contribution out still takes part in the
//! exchange (so the others do not wait for it), marked failed (so they fail
//! too, naming it, instead of using the data it does not have:
//! `wire::with_contribution`).
//!
//! Allreduces, bcasts, reduces, gathers and scatters of a byte up to what
//! one slot holds (a bcast or reduce up to half a slot, an allreduce up to
//! seven eighths: from there the general road splits them in chunks; an
//! allreduce in place only up to [`TINY`] bytes), of contiguous host memory
//! take a shorter road to the
//! same exchange or one-way operation (`allreduce_tiny`, `bcast_tiny`,
//! `reduce_root_tiny`, `gather_tiny`, `scatter_tiny`; gatherv and scatterv
//! too, `vform.rs`), since their time is mostly the call's own overhead:
//! no view per block, the contribution published straight from the
//! user's buffer or the stack, the op's kernel called directly. The C ABI
//! reaches them without its handle tables on `MPI_COMM_WORLD` and
//! `MPI_COMM_SELF`.
//!
//! `MPI_Iallreduce` of up to a slot starts a non-blocking exchange in an
//! area of the non-blocking collectives' own, where the communicator has
//! one (`MPI_COMM_WORLD`), finished by the engine's progress passes
//! (`nb.rs`).
//!
//! Bcast, reduce, allreduce, allgather and reduce-scatter larger than a
//! slot, up to `coll_shm_pipeline_max`, go through the area in chunks
//! (`pipeline.rs`).
//! Bcast, gather, scatter, allgather and alltoall that the slots do not
//! carry, of large enough blocks (`coll_shm_copy_min`), where every rank
//! can read the others' memory by CMA, publish where their data lies
//! instead, and the readers copy it from there once (`copy.rs`).

mod copy;
pub(crate) mod nb;
mod pipeline;
mod vform;
pub(crate) mod wire;

use std::sync::MutexGuard;

use gmpi_btl_shm::{CollConfig, ShmColl};

use super::algo;
use super::sched::{Reduction, Sched};
use super::select::{self, Area, Coll, Form, TINY};
use crate::buffer::View;
use crate::comm::{Communicator, ShmState};
use crate::engine::{self, Locked};
use crate::error::Result;
use crate::op::Op;
pub(super) use pipeline::tiny_splits;
use pipeline::Split;
use wire::{header, kind, mismatch, with_contribution, HDR};

/// The area of a call the selector sent through shared memory: locked,
/// set up, unbroken, with room for the call.
pub(crate) struct ShmArea<'g> {
    pub(super) guard: MutexGuard<'g, ShmState>,
    /// The selector chose [`Algo::ShmCopy`](super::select::Algo::ShmCopy):
    /// the data moves by CMA from its owners' memory (`copy.rs`).
    pub(super) copy: bool,
}

impl ShmArea<'_> {
    fn coll(&mut self) -> &mut ShmColl {
        match &mut *self.guard {
            ShmState::Ready(c, _) => c,
            _ => unreachable!("the selector chose an area that is not ready"),
        }
    }
}

/// Epochs each rank's slots buffer in a communicator of `n` ranks: how far
/// the root of a one-way bcast, scatter, reduce or gather (or a non-root of
/// the last two) may run ahead of the slowest rank. Deep on small
/// communicators, where it matters most when their ranks share cores: the
/// root then does many calls before a reader must run, and each rank many
/// calls per time slice (8 B on 2 cores, µs per call: a bcast at np 4 2.9
/// at depth 2, 0.36-0.55 at 16, 0.22-0.29 at 64; a gather 0.41-0.70 at 16,
/// 0.26-0.34 at 64; at np 8 every rooted collective 1.4-2.0 at depth 8,
/// 0.68-0.89 at 32; at np 2, on a core each, no change); shallower as `n`
/// grows, so that an area holds at most 256 slots (about 4 MiB at the
/// default 16 KiB `coll_shm_max`) up to 128 ranks. Slots are pages of a
/// file mapping touched only as far as the data goes (a page each for
/// small calls).
fn area_depth(n: i32) -> usize {
    (256 / n.max(1) as usize).clamp(2, 64)
}

/// The area as the selector sees it.
#[inline]
fn area_of(state: &ShmState) -> Area {
    match state {
        ShmState::Ready(c, _) if !c.is_broken() => Area::Ready {
            slot: c.slot_bytes(),
            single_copy: c.single_copy(),
        },
        _ => Area::None,
    }
}

/// Write `slots` reduced in rank order (`slots[0] ∘ slots[1] ∘ …`) into
/// `out`: every rank that does this gets the same bits.
/// (The data reduced is each slot's `out.len()` bytes from byte `off`.)
fn reduce_slots(red: &Reduction, slots: &[&[u8]], off: usize, out: &mut [u8]) {
    let (cnt, end) = (out.len() / red.unit, off + out.len());
    out.copy_from_slice(&slots[slots.len().min(2) - 1][off..end]);
    if slots.len() < 2 {
        return;
    }
    crate::op::apply_datatype(&red.op, red.dt, cnt, &slots[0][off..end], out);
    let mut acc = Vec::new();
    for s in &slots[2..] {
        acc.clear();
        acc.extend_from_slice(out);
        out.copy_from_slice(&s[off..end]);
        crate::op::apply_datatype(&red.op, red.dt, cnt, &acc, out);
    }
}

/// Write the contributions in `slots` (each [`HDR`] header bytes, then
/// `out.len()` data bytes) reduced with `k` into `out`, in the order of
/// [`reduce_slots`], so both give the same bits. At least two slots; up to
/// [`TINY`] bytes need no allocation.
#[inline]
fn reduce_tiny(k: crate::op::Kernel, slots: &[&[u8]], out: &mut [u8]) {
    reduce_tiny_at(k, slots, HDR, out);
}

/// [`reduce_tiny`] of the `out.len()` bytes at byte `at` of each slot.
#[inline]
fn reduce_tiny_at(k: crate::op::Kernel, slots: &[&[u8]], at: usize, out: &mut [u8]) {
    fn data(s: &[u8], at: usize, n: usize) -> &[u8] {
        &s[at..at + n]
    }
    let n = out.len();
    gmpi_btl::copy_bytes(out, data(slots[1], at, n));
    k(data(slots[0], at, n), out);
    if slots.len() > 2 {
        let (mut stack, mut heap) = ([0u8; TINY], Vec::new());
        let acc = if n <= TINY {
            &mut stack[..n]
        } else {
            heap.resize(n, 0);
            &mut heap[..]
        };
        for s in &slots[2..] {
            gmpi_btl::copy_bytes(acc, out);
            gmpi_btl::copy_bytes(out, data(s, at, n));
            k(acc, out);
        }
    }
}

impl Communicator {
    /// The shared-memory area, locked, set up on first use, and what the
    /// selector makes of it. Only for calls [`select::area_wanted`] sends
    /// to it: setting up is collective (a fence over the communicator, on
    /// the call's `tag`).
    pub(super) fn area<'g>(
        &'g self,
        e: &mut Locked,
        call: &'static str,
        tag: i32,
    ) -> Result<(MutexGuard<'g, ShmState>, Area)> {
        let mut g = self.lock_area(call)?;
        if let ShmState::NotTried = *g {
            let cma = e.cma;
            *g = match self.bootstrap_area(e, call, tag, "", cma) {
                Some(c) => ShmState::Ready(Box::new(c), None),
                None => ShmState::Unavailable,
            };
        }
        let area = area_of(&g);
        Ok((g, area))
    }

    /// Set up a shared-memory area of this communicator, collectively (two
    /// fences over its point-to-point barrier, on `tag`), named apart by
    /// `suffix`, with slots of `coll_shm_max` and [`area_depth`] epochs a
    /// rank; CMA reads through it where `single_copy`. `None` (logged)
    /// where the node has no shared memory or the area cannot be made:
    /// every rank gets it or none does (`ShmColl::bootstrap`).
    pub(super) fn bootstrap_area(
        &self,
        e: &mut Locked,
        call: &'static str,
        tag: i32,
        suffix: &str,
        single_copy: bool,
    ) -> Option<ShmColl> {
        let prefix = e.shm_prefix.clone()?;
        // Communicators of one split share a context id but not members:
        // the first member names the area apart.
        let path = format!(
            "{prefix}-c{}-{}{suffix}",
            self.inner.ctx, self.inner.world[0]
        );
        let cfg = CollConfig {
            slot_bytes: e.coll.shm_max.max(64) + HDR,
            depth: area_depth(self.size()),
            single_copy,
        };
        let (n, me) = (self.size(), self.rank());
        let mut fence = || {
            let mut s = Sched::new(call, &self.inner, tag);
            algo::barrier(&mut s, n, me);
            e.drive(call, &mut s).map_err(|e| e.to_string())
        };
        match ShmColl::bootstrap(&path, me as usize, n as usize, &cfg, &mut fence) {
            Ok(c) => {
                tracing::debug!(target: "coll", "{call}: shared-memory area {path} on context {} ({n} ranks, {} B slots)", self.inner.ctx, c.slot_bytes());
                Some(c)
            }
            Err(err) => {
                tracing::debug!(target: "coll", "{call}: no shared-memory area {path} on context {}: {err}", self.inner.ctx);
                None
            }
        }
    }

    /// The area's lock. Held for a whole collective: another thread that
    /// holds it is in a collective on this communicator too, which MPI
    /// forbids (collectives on one communicator must not overlap); that is
    /// an error here rather than a wait that could never end.
    pub(crate) fn lock_area(&self, call: &str) -> Result<MutexGuard<'_, ShmState>> {
        match self.inner.shm.try_lock() {
            Ok(g) => Ok(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Err(crate::error::Error::new(
                crate::error::ErrorClass::Other,
                call,
                self.rank(),
                "another thread is in a collective on this communicator: collective calls on \
                 one communicator must not overlap",
            )),
        }
    }

    /// One exchange through the area: publish `hdr` and then `input`
    /// packed, and once every rank's header agrees with ours run `f` over
    /// every rank's slot (header included). A difference fails this rank as
    /// it fails every other.
    fn exchange(
        &self,
        e: &mut Locked,
        call: &'static str,
        area: &mut ShmArea<'_>,
        hdr: [u8; HDR],
        input: Option<&View>,
        f: impl FnOnce(&[&[u8]]) -> Result<()>,
    ) -> Result<()> {
        let me = self.rank();
        let a = area.coll();
        with_contribution(engine::gpu(), call, me, hdr, input, |data| {
            let mut bad = None;
            a.exchange(data, &mut |k| e.idle_flags(call, k), |slots| {
                bad = mismatch(call, me, data, slots).map_or_else(|| f(slots).err(), Some);
            })?;
            bad.map_or(Ok(()), Err)
        })
    }

    /// A one-way gather to `root` through the area: publish `hdr` and then
    /// `input` packed; the others return at once, the root waits for every
    /// contribution and, once every header agrees with its own, runs `f`
    /// over every rank's slot (header included). A difference fails the
    /// root, naming the first rank that differs.
    #[allow(clippy::too_many_arguments)]
    fn one_way_gather(
        &self,
        e: &mut Locked,
        call: &'static str,
        area: &mut ShmArea<'_>,
        hdr: [u8; HDR],
        input: &View,
        root: i32,
        f: impl FnOnce(&[&[u8]]) -> Result<()>,
    ) -> Result<()> {
        let me = self.rank();
        let a = area.coll();
        with_contribution(engine::gpu(), call, me, hdr, Some(input), |data| {
            let idle = &mut |k| e.idle_flags(call, k);
            let got = a.gather_with(root as usize, data, idle, |slots| {
                match mismatch(call, me, data, slots) {
                    Some(err) => Err(err),
                    None => f(slots),
                }
            })?;
            got.unwrap_or(Ok(()))
        })
    }

    /// A barrier through the area.
    pub(super) fn shm_barrier(
        &self,
        e: &mut Locked,
        call: &'static str,
        mut area: ShmArea<'_>,
    ) -> Result<()> {
        area.coll().barrier(&mut |k| e.idle_flags(call, k))?;
        Ok(())
    }

    /// A bcast through the area. By default one-way, as the best peers do
    /// it: the root publishes its header and data and returns; each other
    /// rank waits for the root's slot, compares the root's header with its
    /// own arguments (a different size, or a root that called another
    /// collective, fails that rank naming the root) and copies the data. A
    /// root that is not broadcasting at all (every rank named another root)
    /// is seen absent by its readers (`ShmColl::bcast_with`), who fail
    /// instead of waiting. With `coll_check` every rank publishes a header
    /// and checks everyone's, so ranks naming different roots or sizes all
    /// fail alike.
    pub(super) fn shm_bcast(
        &self,
        e: &mut Locked,
        call: &'static str,
        mut area: ShmArea<'_>,
        v: &View,
        root: i32,
    ) -> Result<()> {
        if area.copy {
            return self.shm_bcast_copy(e, call, &mut area, v, root);
        }
        let (me, len) = (self.rank(), v.bytes());
        let hdr = header(kind::BCAST, root, None, len);
        if pipeline::pipelined(Split::Rooted, area.coll(), len) {
            let check = e.cfg.coll_check;
            return self.shm_bcast_pipelined(e, call, &mut area, v, root, hdr, check);
        }
        if !e.cfg.coll_check {
            let a = area.coll();
            if me == root {
                return with_contribution(engine::gpu(), call, me, hdr, Some(v), |data| {
                    a.bcast_with(root as usize, data, &mut |k| e.idle_flags(call, k), |_| ())?;
                    Ok(())
                });
            }
            let (room, mut more) = (a.slot_bytes() - HDR, 0);
            let copies = pipeline::copy_min(a, &e.coll);
            let idle = &mut |k| e.idle_flags(call, k);
            let got = a.bcast_with(root as usize, &[], idle, |s| {
                if let Some(err) = bcast_mismatch(call, me, root, &hdr, s) {
                    more = pipeline::root_epochs(room, copies, s) - 1;
                    return Err(err);
                }
                v.unpack(call, me, &s[HDR..])
            })?;
            pipeline::skip_root(a, root, more, idle)?;
            return got.unwrap_or(Ok(()));
        }
        self.exchange(
            e,
            call,
            &mut area,
            hdr,
            (me == root).then_some(v),
            |slots| {
                if me != root {
                    v.unpack(call, me, &slots[root as usize][HDR..])?;
                }
                Ok(())
            },
        )
    }

    /// A reduce (`root`) or allreduce (`None`) through the area: every rank
    /// publishes its input, then every rank, or the root, reduces the
    /// inputs in rank order into `out` (in place in host memory; into a
    /// host buffer unpacked into `out` when it is device memory or not
    /// contiguous). A reduce is one-way unless `coll_check` is set
    /// (`ShmColl::gather_with`): the others publish and return, the root
    /// waits, checks every header against its own (a rank that passed
    /// another root, op or size fails the root, naming it) and reduces.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn shm_reduce(
        &self,
        e: &mut Locked,
        call: &'static str,
        mut area: ShmArea<'_>,
        input: &View,
        out: Option<&View>,
        red: &Reduction,
        root: Option<i32>,
    ) -> Result<()> {
        let me = self.rank();
        let len = input.bytes();
        let out = out.filter(|_| root.is_none_or(|r| r == me) && len > 0);
        let hdr = header(kind::REDUCE, root.unwrap_or(-1), Some(&red.op), len);
        let split = if root.is_some() {
            Split::Rooted
        } else {
            Split::Exchange
        };
        if pipeline::pipelined(split, area.coll(), len) {
            return self.shm_reduce_pipelined(e, call, &mut area, input, out, red, hdr);
        }
        let mut staged: Option<Vec<u8>> = None;
        let mut reduce = |slots: &[&[u8]]| {
            if let Some(o) = out {
                if o.write_contig(|o| reduce_slots(red, slots, HDR, o))
                    .is_none()
                {
                    let mut r = vec![0u8; len];
                    reduce_slots(red, slots, HDR, &mut r);
                    staged = Some(r);
                }
            }
        };
        match root {
            Some(root) if !e.cfg.coll_check => {
                self.one_way_gather(e, call, &mut area, hdr, input, root, |slots| {
                    reduce(slots);
                    Ok(())
                })?;
            }
            _ => self.exchange(e, call, &mut area, hdr, Some(input), |slots| {
                reduce(slots);
                Ok(())
            })?,
        }
        if let (Some(o), Some(r)) = (out, staged) {
            o.unpack(call, me, &r)?;
        }
        Ok(())
    }

    /// A gather (`root`) or allgather (`None`) through the area, every rank
    /// the same size: every rank, or the root, copies every slot into its
    /// block of `blocks`. A gather is one-way unless `coll_check` is set.
    pub(super) fn shm_gather(
        &self,
        e: &mut Locked,
        call: &'static str,
        mut area: ShmArea<'_>,
        input: &View,
        blocks: &[View],
        root: Option<i32>,
    ) -> Result<()> {
        if area.copy {
            return self.shm_gather_copy(e, call, &mut area, input, blocks, root);
        }
        let (me, len) = (self.rank(), input.bytes());
        let hdr = header(kind::GATHER, root.unwrap_or(-1), None, len);
        if root.is_none() && pipeline::pipelined(Split::Exchange, area.coll(), len) {
            return self.shm_allgather_pipelined(e, call, &mut area, input, blocks, hdr);
        }
        let copy = |slots: &[&[u8]]| {
            for (b, s) in blocks.iter().zip(slots) {
                b.unpack(call, me, &s[HDR..])?;
            }
            Ok(())
        };
        match root {
            // One-way, as a reduce: the others publish and return, the root
            // checks every header against its own and copies the blocks.
            Some(root) if !e.cfg.coll_check => {
                self.one_way_gather(e, call, &mut area, hdr, input, root, copy)
            }
            _ => self.exchange(e, call, &mut area, hdr, Some(input), |slots| {
                if root.is_none_or(|r| r == me) {
                    copy(slots)?;
                }
                Ok(())
            }),
        }
    }

    /// A scatter through the area, one-way as a bcast: the root publishes
    /// its header and every rank's block (`blocks`, in rank order) and
    /// returns; each other rank checks the root's header against its own
    /// (the same size, root and collective) and copies its block into
    /// `recv`. `recv` is `None` at an in-place root.
    pub(super) fn shm_scatter(
        &self,
        e: &mut Locked,
        call: &'static str,
        mut area: ShmArea<'_>,
        blocks: &[View],
        recv: Option<&View>,
        root: i32,
    ) -> Result<()> {
        if area.copy {
            return self.shm_scatter_copy(e, call, &mut area, blocks, recv, root);
        }
        let me = self.rank();
        let len = scatter_block(call, me == root, blocks, recv, root);
        let hdr = header(kind::SCATTER, root, None, len);
        let a = area.coll();
        let idle = &mut |k| e.idle_flags(call, k);
        if me == root {
            let mut data = vec![0u8; HDR + len * blocks.len()];
            data[..HDR].copy_from_slice(&hdr);
            let g = engine::gpu();
            let mut packed = Ok(());
            for (i, b) in blocks.iter().enumerate() {
                let at = HDR + i * len;
                packed =
                    packed.and_then(|()| b.pack_into_with(g, call, me, &mut data[at..at + len]));
            }
            if packed.is_err() {
                wire::poison(&mut data);
            }
            a.bcast_with(root as usize, &data, idle, |_| ())?;
            packed?;
            if let Some(r) = recv {
                let at = HDR + me as usize * len;
                r.unpack(call, me, &data[at..at + len])?;
            }
            return Ok(());
        }
        let n = self.size() as usize;
        let got = a.bcast_with(root as usize, &[], idle, |s| {
            if let Some(err) = bcast_mismatch(call, me, root, &hdr, s) {
                return Err(err);
            }
            if s.len() != HDR + n * len {
                return Err(short(call, me, root as usize, s.len()));
            }
            let at = HDR + me as usize * len;
            recv.expect("a non-root receives")
                .unpack(call, me, &s[at..at + len])
        })?;
        got.unwrap_or(Ok(()))
    }

    /// A reduce-scatter through the area: every rank publishes its whole
    /// input (`counts` in reduction units, the same on every rank), then
    /// reduces its own range of every rank's contribution, in rank order,
    /// into `out` (this rank's block: the first of the buffer in place).
    /// An input larger than a slot goes in chunks (`pipeline.rs`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn shm_reduce_scatter(
        &self,
        e: &mut Locked,
        call: &'static str,
        mut area: ShmArea<'_>,
        input: &View,
        out: &View,
        counts: &[usize],
        red: &Reduction,
    ) -> Result<()> {
        let me = self.rank();
        let total = input.bytes();
        let off = HDR + counts[..me as usize].iter().sum::<usize>() * red.unit;
        let len = counts[me as usize] * red.unit;
        let hdr = header(kind::REDUCE_SCATTER, -1, Some(&red.op), total);
        if pipeline::pipelined(Split::Scatter, area.coll(), total) {
            return self
                .shm_reduce_scatter_pipelined(e, call, &mut area, input, out, counts, red, hdr);
        }
        let mut staged: Option<Vec<u8>> = None;
        self.exchange(e, call, &mut area, hdr, Some(input), |slots| {
            if len > 0
                && out
                    .write_contig(|o| reduce_slots(red, slots, off, o))
                    .is_none()
            {
                let mut r = vec![0u8; len];
                reduce_slots(red, slots, off, &mut r);
                staged = Some(r);
            }
            Ok(())
        })?;
        if let Some(r) = staged {
            out.unpack(call, me, &r)?;
        }
        Ok(())
    }

    /// An alltoall through the area: every rank publishes its whole send
    /// buffer (`input`, `n` blocks; in place, the receive buffer before it
    /// is overwritten) and copies block `me` of every rank's into `rblocks`.
    /// One exchange instead of `2(n - 1)` messages.
    pub(super) fn shm_alltoall(
        &self,
        e: &mut Locked,
        call: &'static str,
        mut area: ShmArea<'_>,
        input: &View,
        rblocks: &[View],
    ) -> Result<()> {
        if area.copy {
            return self.shm_alltoall_copy(e, call, &mut area, input, rblocks);
        }
        let (me, total) = (self.rank(), input.bytes());
        let block = total / rblocks.len();
        let at = HDR + me as usize * block;
        let hdr = header(kind::ALLTOALL, -1, None, total);
        self.exchange(e, call, &mut area, hdr, Some(input), |slots| {
            for (b, s) in rblocks.iter().zip(slots) {
                b.unpack(call, me, &s[at..at + block])?;
            }
            Ok(())
        })
    }

    /// The road of the latency-bound calls (`*_tiny`): on an
    /// intracommunicator whose shared-memory area is already set up, for
    /// `len` bytes (1 byte to a slot) of a blocking `coll` that the selector
    /// sends to the area ([`select::tiny_wanted`], [`select::tiny_room`]: never with `coll_check`), run
    /// `body` on the engine and the area, once the call's tag is consumed as
    /// the general road consumes it (`body` gets that tag, for what a `v`
    /// form moves by point-to-point). `None`, before any effect, sends the
    /// call down the general road, which makes every check (and sets the
    /// area up on first use) itself.
    #[inline]
    pub(super) fn tiny_road<R>(
        &self,
        call: &'static str,
        q: impl FnOnce(&Self) -> select::Query,
        body: impl FnOnce(&mut Locked, &mut ShmColl, i32) -> Result<R>,
    ) -> Option<Result<R>> {
        if self.is_inter() || self.check_live(call).is_err() {
            return None;
        }
        engine::with(call, |e| {
            // Only where the general road would use the area too; the tiny
            // road takes the area as it is and never sets it up. (An area
            // another thread holds: the general road, which says why where
            // it needs the area.)
            let Ok(mut g) = self.lock_area(call) else {
                return Ok(None);
            };
            let q = q(self).area(area_of(&g));
            // `tiny` only takes a ready area; anything else takes the
            // general road, which makes the same choice.
            let ShmState::Ready(a, last) = &mut *g else {
                return Ok(None);
            };
            // The selection depends on the query and the settings alone
            // (fixed at `MPI_Init`), and the query names the area's state
            // (a broken area is `Area::None`): the last query that took
            // this road takes it again. Most programs repeat their calls.
            if *last != Some(q) {
                let s = &e.coll;
                if !(select::tiny_wanted(&q, s) && select::tiny_room(&q, s)) {
                    return Ok(None);
                }
                *last = Some(q);
            }
            let tag = self.next_tag();
            tracing::debug!(target: "coll", "{call}: shared memory, {} B, tiny path", q.bytes);
            body(e, a, tag).map(Some)
        })
        .transpose()
    }

    /// The latency-bound allreduce: contiguous buffers of one predefined
    /// type, 1 byte up to seven eighths of a slot (in place or of device
    /// memory: to [`TINY`] bytes), a predefined element-wise op
    /// ([`tiny_road`](Self::tiny_road)). It is
    /// [`shm_reduce`](Self::shm_reduce)'s exchange (same header, same
    /// rank-order reduction, same mismatch errors, the same tag consumed),
    /// so ranks that take either path agree, minus what a tiny call cannot
    /// use: the op's kernel is looked up once and called directly, host
    /// input apart from the output is published straight from the user's
    /// buffer (else the contribution is built on the stack), and the result
    /// is written straight into `recv`. Device (or managed) buffers are
    /// copied into the contribution and the result copied out of a stack
    /// buffer, as the general path does.
    #[inline]
    pub(super) fn allreduce_tiny(
        &self,
        send: Option<&View>,
        recv: &View,
        op: &Op,
    ) -> Option<Result<()>> {
        use crate::buffer::HostMem;
        use crate::progress::HostMemory;
        const CALL: &str = "MPI_Allreduce";
        let len = recv.bytes();
        let input = send.unwrap_or(recv);
        if len == 0 || input.bytes() != len || !recv.writable {
            return None;
        }
        let kernel = crate::op::kernel(op, input.ty.prim()?)?;
        let (src, dst) = (input.contig_addr()?, recv.contig_addr()?);
        // Memory the gpu layer cannot classify takes the general path,
        // which fails with that error.
        let out_host = recv.kind().ok()?.is_host();
        let in_host = match send {
            Some(s) => s.kind().ok()?.is_host(),
            None => out_host,
        };
        let me = self.rank();
        let query = |c: &Self| c.query(Coll::Allreduce, Form::Blocking, len);
        // Host input apart from host output is published straight from the
        // user's buffer; the rest (in place, device memory) from the stack.
        let apart = send.is_some() && (src + len as u64 <= dst || dst + len as u64 <= src);
        // Past TINY bytes only what needs no copy through the stack: the
        // general road makes the same exchange for the rest.
        if len > TINY && !(in_host && out_host && apart) {
            return None;
        }
        self.tiny_road(CALL, query, |e, a, _| {
            let hdr = header(kind::REDUCE, -1, Some(op), len);
            let idle = &mut |k| e.idle_flags(CALL, k);
            let mut bad = None;
            let mut staged = (!out_host).then_some([0u8; TINY]);
            // `mine`: the header published, poisoned where packing failed.
            let mut reduce = |slots: &[&[u8]], mine: &[u8], packed: bool| {
                if !packed {
                    bad = mismatch(CALL, me, mine, slots);
                    return;
                }
                if let Some(err) = tiny_mismatch(CALL, me, &hdr, HDR + len, slots) {
                    bad = Some(err);
                    return;
                }
                match &mut staged {
                    None => HostMem.with_write(dst, len, |out| reduce_tiny(kernel, slots, out)),
                    Some(st) => reduce_tiny(kernel, slots, &mut st[..len]),
                }
            };
            if in_host && out_host && apart {
                HostMem.with_read(src, len, |d| {
                    a.exchange_parts(&[&hdr, d], idle, |slots| reduce(slots, &hdr, true))
                })?;
            } else {
                on_stack(HDR + len, |data| {
                    data[..HDR].copy_from_slice(&hdr);
                    // A contribution that cannot be copied out of the device
                    // still takes part, marked failed
                    // (`wire::with_contribution`).
                    let packed = if in_host {
                        HostMem.with_read(src, len, |d| gmpi_btl::copy_bytes(&mut data[HDR..], d));
                        Ok(())
                    } else {
                        input.pack_into(CALL, me, &mut data[HDR..])
                    };
                    if packed.is_err() {
                        wire::poison(data);
                    }
                    let (ok, data) = (packed.is_ok(), &*data);
                    let exchanged = a.exchange(data, idle, |slots| reduce(slots, &data[..HDR], ok));
                    packed?;
                    exchanged
                })?;
            }
            match (bad, staged) {
                (Some(err), _) => Err(err),
                (None, Some(st)) => recv.unpack(CALL, me, &st[..len]),
                (None, None) => Ok(()),
            }
        })
    }

    /// The latency-bound bcast: a contiguous host buffer of 1 byte to
    /// half a slot ([`tiny_road`](Self::tiny_road)). It is
    /// [`shm_bcast`](Self::shm_bcast)'s one-way road (same header, same
    /// checks by the readers, same errors), with the root's header and data
    /// assembled on the stack and a reader's copy made straight into its
    /// buffer.
    #[inline]
    pub(super) fn bcast_tiny(&self, v: &View, root: i32) -> Option<Result<()>> {
        use crate::buffer::HostMem;
        use crate::progress::HostMemory;
        const CALL: &str = "MPI_Bcast";
        let (me, len) = (self.rank(), v.bytes());
        if len == 0 || !(0..self.size()).contains(&root) {
            return None;
        }
        if (me != root && !v.writable) || !v.is_host() {
            return None;
        }
        let addr = v.contig_addr()?;
        let query = |c: &Self| c.query(Coll::Bcast, Form::Blocking, len);
        self.tiny_road(CALL, query, |e, a, _| {
            let hdr = header(kind::BCAST, root, None, len);
            let copies = pipeline::copy_min(a, &e.coll);
            let idle = &mut |k| e.idle_flags(CALL, k);
            if me == root {
                HostMem.with_read(addr, len, |d| {
                    a.bcast_parts(root as usize, &[&hdr, d], idle, |_| ())
                })?;
                return Ok(());
            }
            let (room, mut more) = (a.slot_bytes() - HDR, 0);
            let got = a.bcast_with(root as usize, &[], idle, |s| {
                if let Some(err) = bcast_mismatch(CALL, me, root, &hdr, s) {
                    more = pipeline::root_epochs(room, copies, s) - 1;
                    return Err(err);
                }
                if s.len() != HDR + len {
                    return Err(short(CALL, me, root as usize, s.len()));
                }
                HostMem.with_write(addr, len, |out| {
                    gmpi_btl::copy_bytes(out, &s[HDR..HDR + len])
                });
                Ok(())
            })?;
            pipeline::skip_root(a, root, more, idle)?;
            got.unwrap_or(Ok(()))
        })
    }

    /// The latency-bound reduce: contiguous host buffers of one predefined
    /// type, 1 byte to half a slot, a predefined element-wise op
    /// ([`tiny_road`](Self::tiny_road)). It is
    /// [`shm_reduce`](Self::shm_reduce)'s one-way gather (same header, same
    /// rank-order reduction, same errors at the root), with the
    /// contribution built on the stack, the op's kernel called directly and
    /// the result written straight into the root's `recv`. `send` is `None`
    /// in place (the input is then `recv` at the root, `send`'s role
    /// elsewhere being `recv`'s too).
    #[inline]
    pub(super) fn reduce_root_tiny(
        &self,
        send: Option<&View>,
        recv: &View,
        op: &Op,
        root: i32,
    ) -> Option<Result<()>> {
        use crate::buffer::HostMem;
        use crate::progress::HostMemory;
        const CALL: &str = "MPI_Reduce";
        let me = self.rank();
        let input = send.unwrap_or(recv);
        let len = input.bytes();
        if len == 0 || !(0..self.size()).contains(&root) {
            return None;
        }
        let kernel = crate::op::kernel(op, input.ty.prim()?)?;
        let src = input.contig_addr()?;
        if !input.is_host() {
            return None;
        }
        let dst = if me == root {
            if recv.bytes() != len || !recv.writable || !recv.is_host() {
                return None;
            }
            Some(recv.contig_addr()?)
        } else {
            None
        };
        let query = |c: &Self| {
            c.query(Coll::Reduce, Form::Blocking, len)
                .commutative(op.is_commutative())
                .in_place(send.is_none())
        };
        self.tiny_road(CALL, query, |e, a, _| {
            let hdr = header(kind::REDUCE, root, Some(op), len);
            let idle = &mut |k| e.idle_flags(CALL, k);
            tiny_gather(a, CALL, me, root, hdr, (src, len), idle, |slots| {
                if let Some(dst) = dst {
                    HostMem.with_write(dst, len, |out| reduce_tiny(kernel, slots, out));
                }
            })
        })
    }
}

impl Communicator {
    /// The latency-bound gather: contiguous host buffers, 1 byte to a slot
    /// per rank ([`tiny_road`](Self::tiny_road)). It is
    /// [`shm_gather`](Self::shm_gather)'s one-way gather (same header, the
    /// same checks at the root), with the contribution built on the stack
    /// and each slot copied straight into the root's `recv`.
    #[inline]
    pub(super) fn gather_tiny(&self, send: &View, recv: &View, root: i32) -> Option<Result<()>> {
        const CALL: &str = "MPI_Gather";
        let (me, n, len) = (self.rank(), self.size(), send.bytes());
        if len == 0 || !(0..n).contains(&root) {
            return None;
        }
        let src = tiny_host(send, len, false)?;
        let dst = match me == root {
            true => Some(tiny_host(recv, len * n as usize, true)?),
            false => None,
        };
        let query = |c: &Self| c.query(Coll::Gather, Form::Blocking, len);
        self.tiny_road(CALL, query, |e, a, _| {
            let hdr = header(kind::GATHER, root, None, len);
            let idle = &mut |k| e.idle_flags(CALL, k);
            tiny_gather(a, CALL, me, root, hdr, (src, len), idle, |slots| {
                let dst = dst.expect("the root has a receive buffer");
                copy_blocks(dst, len, HDR, slots);
            })
        })
    }

    /// The latency-bound allgather: contiguous host buffers, a result of 1
    /// byte up to a slot ([`tiny_road`](Self::tiny_road)), as the `v` form's. It is
    /// [`shm_gather`](Self::shm_gather)'s exchange for an allgather (same
    /// header, same checks of every rank's), published straight from
    /// `send` and each slot copied straight into its block of `recv`.
    #[inline]
    pub(super) fn allgather_tiny(&self, send: &View, recv: &View) -> Option<Result<()>> {
        const CALL: &str = "MPI_Allgather";
        let (me, n, len) = (self.rank(), self.size() as usize, send.bytes());
        let total = len.checked_mul(n)?;
        if len == 0 {
            return None;
        }
        let src = tiny_host(send, len, false)?;
        let dst = tiny_host(recv, total, true)?;
        let query = |c: &Self| c.query(Coll::Allgather, Form::Blocking, total);
        self.tiny_road(CALL, query, |e, a, _| {
            let hdr = header(kind::GATHER, -1, None, len);
            let idle = &mut |k| e.idle_flags(CALL, k);
            tiny_exchange(a, CALL, me, &hdr, (src, len), idle, |slots| {
                copy_blocks(dst, len, HDR, slots);
            })
        })
    }

    /// The latency-bound alltoall: contiguous host buffers whose whole send
    /// buffer fits a slot ([`tiny_road`](Self::tiny_road)), as the `v`
    /// form's. It is
    /// [`shm_alltoall`](Self::shm_alltoall)'s exchange (same header, same
    /// checks), the send buffer published straight from the user's memory
    /// and block `me` of every slot copied straight into `recv`.
    #[inline]
    pub(super) fn alltoall_tiny(&self, send: &View, recv: &View) -> Option<Result<()>> {
        const CALL: &str = "MPI_Alltoall";
        let (me, n, total) = (self.rank() as usize, self.size() as usize, send.bytes());
        // Blocks of whole elements, as the general road cuts them (it
        // fails the rest).
        if total == 0 || !send.count.is_multiple_of(n) || !recv.count.is_multiple_of(n) {
            return None;
        }
        let block = total / n;
        let src = tiny_host(send, total, false)?;
        let dst = tiny_host(recv, total, true)?;
        let query = |c: &Self| c.query(Coll::Alltoall, Form::Blocking, block);
        self.tiny_road(CALL, query, |e, a, _| {
            let hdr = header(kind::ALLTOALL, -1, None, total);
            let idle = &mut |k| e.idle_flags(CALL, k);
            let at = HDR + me * block;
            tiny_exchange(a, CALL, me as i32, &hdr, (src, total), idle, |slots| {
                copy_blocks(dst, block, at, slots);
            })
        })
    }

    /// The latency-bound reduce-scatter of equal blocks: contiguous host
    /// buffers of one predefined type, an input of 1 byte up to a slot, a
    /// predefined element-wise op ([`tiny_road`](Self::tiny_road)). It is
    /// [`shm_reduce_scatter`](Self::shm_reduce_scatter)'s exchange (same
    /// header, same checks), with the input published straight from
    /// `send` and this rank's block reduced, in rank order, straight into
    /// `recv` by the op's kernel. `call` names the caller
    /// (`MPI_Reduce_scatter_block`, or `MPI_Reduce_scatter` with equal
    /// counts).
    #[inline]
    pub(super) fn reduce_scatter_tiny(
        &self,
        call: &'static str,
        send: &View,
        recv: &View,
        op: &Op,
    ) -> Option<Result<()>> {
        use crate::buffer::HostMem;
        use crate::progress::HostMemory;
        let (me, n, len) = (self.rank(), self.size() as usize, recv.bytes());
        let total = len.checked_mul(n)?;
        if len == 0 || send.bytes() != total {
            return None;
        }
        let kernel = crate::op::kernel(op, send.ty.prim()?)?;
        if recv.ty.prim() != send.ty.prim() {
            return None;
        }
        let src = tiny_host(send, total, false)?;
        let dst = tiny_host(recv, len, true)?;
        let unit = send.ty.size().max(1);
        let query = |c: &Self| {
            c.query(Coll::ReduceScatter, Form::Blocking, total)
                .commutative(op.is_commutative())
                .unit(unit)
        };
        self.tiny_road(call, query, |e, a, _| {
            let hdr = header(kind::REDUCE_SCATTER, -1, Some(op), total);
            let idle = &mut |k| e.idle_flags(call, k);
            let at = HDR + me as usize * len;
            tiny_exchange(a, call, me, &hdr, (src, total), idle, |slots| {
                HostMem.with_write(dst, len, |out| reduce_tiny_at(kernel, slots, at, out));
            })
        })
    }

    /// The latency-bound scatter: contiguous host buffers, 1 byte per rank
    /// up to a slot in all ([`tiny_road`](Self::tiny_road)). It is
    /// [`shm_scatter`](Self::shm_scatter)'s one-way road (same header, the
    /// same checks by the readers), with the root's send buffer copied
    /// straight into its slot and a reader's block straight into `recv`.
    #[inline]
    pub(super) fn scatter_tiny(&self, send: &View, recv: &View, root: i32) -> Option<Result<()>> {
        use crate::buffer::HostMem;
        use crate::progress::HostMemory;
        const CALL: &str = "MPI_Scatter";
        let (me, n, len) = (self.rank(), self.size() as usize, recv.bytes());
        if len == 0 || !(0..n as i32).contains(&root) {
            return None;
        }
        let dst = tiny_host(recv, len, true)?;
        let src = match me == root {
            true => Some(tiny_host(send, len * n, false)?),
            false => None,
        };
        let query = |c: &Self| c.query(Coll::Scatter, Form::Blocking, len);
        self.tiny_road(CALL, query, |e, a, _| {
            let hdr = header(kind::SCATTER, root, None, len);
            let idle = &mut |k| e.idle_flags(CALL, k);
            if let Some(src) = src {
                HostMem.with_read(src, len * n, |all| {
                    a.bcast_parts(root as usize, &[&hdr, all], idle, |_| ())
                })?;
                HostMem::copy(src + (me as usize * len) as u64, dst, len);
                return Ok(());
            }
            let got = a.bcast_with(root as usize, &[], idle, |s| {
                if let Some(err) = bcast_mismatch(CALL, me, root, &hdr, s) {
                    return Err(err);
                }
                if s.len() != HDR + n * len {
                    return Err(short(CALL, me, root as usize, s.len()));
                }
                let at = HDR + me as usize * len;
                HostMem.with_write(dst, len, |out| gmpi_btl::copy_bytes(out, &s[at..at + len]));
                Ok(())
            })?;
            got.unwrap_or(Ok(()))
        })
    }
}

/// The exchange of the tiny roads that publish straight from the user's
/// memory (allgather, alltoall, reduce-scatter): `hdr` and the `len` bytes
/// at host address `src`; once every rank's slot (`HDR + len` bytes) agrees
/// with them ([`tiny_mismatch`], as the general road's exchange checks),
/// `put` reads the slots; a difference is this rank's error.
#[inline]
fn tiny_exchange(
    a: &mut ShmColl,
    call: &str,
    me: i32,
    hdr: &[u8; HDR],
    (src, len): (u64, usize),
    idle: &mut dyn FnMut(u32) -> Result<()>,
    put: impl FnOnce(&[&[u8]]),
) -> Result<()> {
    use crate::buffer::HostMem;
    use crate::progress::HostMemory;
    let mut bad = None;
    HostMem.with_read(src, len, |d| {
        a.exchange_parts(&[hdr, d], idle, |slots| {
            match tiny_mismatch(call, me, hdr, HDR + len, slots) {
                Some(err) => bad = Some(err),
                None => put(slots),
            }
        })
    })?;
    bad.map_or(Ok(()), Err)
}

/// Copy bytes `at..at + block` of each slot, in rank order, into the
/// consecutive blocks of the host buffer at `dst` (a tiny gather's,
/// allgather's or alltoall's receive buffer).
#[inline]
fn copy_blocks(dst: u64, block: usize, at: usize, slots: &[&[u8]]) {
    use crate::buffer::HostMem;
    use crate::progress::HostMemory;
    HostMem.with_write(dst, block * slots.len(), |out| {
        for (o, s) in out.chunks_exact_mut(block).zip(slots) {
            gmpi_btl::copy_bytes(o, &s[at..at + block]);
        }
    });
}

/// The one-way gather of the tiny roads (reduce, gather): `hdr` and the
/// `len` bytes at host address `src` published from the stack; the root
/// checks every slot against them ([`tiny_mismatch`]) and runs `f` over the
/// slots, the others return at once.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) fn tiny_gather(
    a: &mut ShmColl,
    call: &str,
    me: i32,
    root: i32,
    hdr: [u8; HDR],
    (src, len): (u64, usize),
    idle: &mut dyn FnMut(u32) -> Result<()>,
    f: impl FnOnce(&[&[u8]]),
) -> Result<()> {
    use crate::buffer::HostMem;
    use crate::progress::HostMemory;
    let got = HostMem.with_read(src, len, |d| {
        a.gather_parts(root as usize, &[&hdr, d], idle, |slots| {
            if let Some(err) = tiny_mismatch(call, me, &hdr, HDR + len, slots) {
                return Err(err);
            }
            f(slots);
            Ok(())
        })
    })?;
    got.unwrap_or(Ok(()))
}

/// Run `f` on `n` zeroed bytes of this stack frame (`n <= HDR + TINY`):
/// up to [`SMALL_STACK`] bytes a small array, whose zeroing is a few stores,
/// instead of a kilobyte's `memset` (about 80 instructions a call).
#[inline(always)]
pub(super) fn on_stack<R>(n: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    if n <= SMALL_STACK {
        let mut b = [0u8; SMALL_STACK];
        f(&mut b[..n])
    } else {
        let mut b = [0u8; HDR + TINY];
        f(&mut b[..n])
    }
}

/// [`on_stack`]'s small array.
const SMALL_STACK: usize = 128;

/// The address of `v`'s `bytes` bytes for a tiny road: one contiguous run
/// of host memory (writable where the road writes it); `None` sends the
/// call down the general road.
#[inline]
pub(super) fn tiny_host(v: &View, bytes: usize, write: bool) -> Option<u64> {
    (v.bytes() == bytes && (v.writable || !write) && v.is_host())
        .then(|| v.contig_addr())
        .flatten()
}

/// [`mismatch`] for the tiny roads, which read every slot as `len` bytes
/// (header `hdr` and data): a slot of another length with an equal header
/// (only a corrupt area makes one) is an error too.
#[inline]
fn tiny_mismatch(
    call: &str,
    me: i32,
    hdr: &[u8; HDR],
    len: usize,
    slots: &[&[u8]],
) -> Option<crate::error::Error> {
    if slots.iter().all(|s| s.len() == len && s[..HDR] == hdr[..]) {
        return None;
    }
    mismatch(call, me, hdr, slots).or_else(|| {
        let (r, s) = slots.iter().enumerate().find(|(_, s)| s.len() != len)?;
        Some(short(call, me, r, s.len()))
    })
}

/// Bytes of each block of a scatter: the root's own send block at the root,
/// the receive buffer elsewhere.
fn scatter_block(
    call: &str,
    root_here: bool,
    blocks: &[View],
    recv: Option<&View>,
    root: i32,
) -> usize {
    match (root_here, recv) {
        (true, _) => blocks[root as usize].bytes(),
        (false, Some(r)) => r.bytes(),
        (false, None) => unreachable!("{call}: a non-root without a receive buffer"),
    }
}

/// A contribution of rank `r` whose length `got` disagrees with its header.
#[cold]
fn short(call: &str, me: i32, r: usize, got: usize) -> crate::error::Error {
    crate::error::Error::new(
        crate::error::ErrorClass::Intern,
        call,
        me,
        format!("rank {r}'s contribution is {got} bytes, not what its header says (corrupt shared-memory area?)"),
    )
}

/// What a bcast reader makes of the root's contribution `s` against its own
/// header `hdr`: `None` if it may be used, else the error of rank `me`
/// (an empty `s`: the root is not broadcasting at all).
#[inline]
fn bcast_mismatch(
    call: &str,
    me: i32,
    root: i32,
    hdr: &[u8],
    s: &[u8],
) -> Option<crate::error::Error> {
    if s.is_empty() {
        return Some(crate::error::Error::new(
            crate::error::ErrorClass::Root,
            call,
            me,
            format!("rank {root} is not broadcasting: it named another root, or called another collective"),
        ));
    }
    wire::mismatch_of(call, me, hdr, root as usize, s)
}
