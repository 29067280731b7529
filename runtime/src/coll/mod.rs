//! Collective operations on any [`Communicator`].
//!
//! Every collective is built as a schedule of point-to-point steps
//! ([`sched`]) by one of the algorithms of [`algo`], chosen by message size
//! and communicator size (thresholds in `gmpi.toml`; `GMPI_LOG=coll=debug`
//! names each choice). A blocking call drives its schedule to the end; the
//! `i`-forms park it in the engine, where every progress pass advances it.
//! Single-node communicators run barrier, bcast and small reductions,
//! gathers and alltoalls through a shared-memory area instead (`gmpi_btl_shm::ShmColl`);
//! allreduces of at most 64 bytes of host memory take a shorter road to the
//! same exchange (`Communicator::allreduce_tiny`), since their time is
//! mostly the call's own overhead.
//!
//! Collective traffic uses the communicator's collective context with the
//! collective's sequence number as tag, so it never matches user messages,
//! and concurrent non-blocking collectives on one communicator never match
//! each other's messages.
//!
//! Buffers: like MPI's `(buf, count, datatype)`, a buffer is a slice of
//! [`crate::Equivalence`] values or a [`crate::TypedBuf`]. Counts of the `v`
//! forms and displacements are in elements of the buffer's datatype
//! (`alltoallw`'s displacements are in bytes). Each rank's block of a
//! gathered or scattered buffer is `len / size` elements.

pub(crate) mod algo;
pub(crate) mod inter;
pub(crate) mod sched;

use std::sync::atomic::Ordering;

use gmpi_btl_shm::{CollConfig, ShmColl};

use crate::buffer::{Buffer, BufferMut, Ty, View};
use crate::comm::{Communicator, ShmState};
use crate::engine::{self, Engine};
use crate::error::{Error, ErrorClass, Result};
use crate::op::Op;
use crate::request::Request;
use crate::typemap::UserDatatype;
use sched::{Reduction, Region, Sched, Step};

const KIB: usize = 1024;

/// Output regions staged in temporaries, unpacked when the schedule ends.
#[derive(Default)]
struct Staged(Vec<(Region, View)>);

impl Staged {
    /// Where to write `v`'s data.
    fn out(&mut self, s: &mut Sched, v: &View) -> Region {
        let (r, staged) = s.output(v);
        if staged {
            self.0.push((r, v.clone()));
        }
        r
    }

    /// `v`'s data, to be read and overwritten (in-place operations).
    fn inout(&mut self, s: &mut Sched, v: &View) -> Region {
        match v.contig_addr() {
            Some(a) => s.user(a, v.bytes(), true),
            None => {
                let r = s.temp_from(v.pack());
                self.0.push((r, v.clone()));
                r
            }
        }
    }

    fn finish(self, s: &mut Sched) {
        if self.0.is_empty() {
            return;
        }
        s.wait();
        for (r, v) in self.0 {
            s.push(Step::Unpack {
                src: r,
                view: v,
                received: false,
            });
        }
    }
}

/// A reduction on `ty`, checked.
fn reduction(call: &str, rank: i32, op: &Op, ty: &Ty) -> Result<Reduction> {
    if let Op::User(_) = op {
        let dt = Datatype::Opaque { size: ty.size() };
        crate::op::check_datatype(op, dt).map_err(|m| Error::new(ErrorClass::Op, call, rank, m))?;
        return Ok(Reduction {
            op: op.clone(),
            dt,
            unit: ty.size().max(1),
        });
    }
    let Some(prim) = ty.prim() else {
        return Err(Error::new(
            ErrorClass::Op,
            call,
            rank,
            format!(
                "{} needs a datatype made of one predefined type; this one mixes several (use a user-defined op)",
                op.name()
            ),
        ));
    };
    crate::op::check(op, prim).map_err(|m| Error::new(ErrorClass::Op, call, rank, m))?;
    Ok(Reduction {
        op: op.clone(),
        dt: Datatype::Primitive(prim),
        unit: Datatype::Primitive(prim).size().max(1),
    })
}

use crate::datatype::Datatype;

/// Write `slots` reduced in rank order (`slots[0] ∘ slots[1] ∘ …`) into
/// `out`: every rank that does this gets the same bits.
/// (Each slot's data starts at byte `off`.)
fn reduce_slots(red: &Reduction, slots: &[&[u8]], off: usize, out: &mut [u8]) {
    let cnt = out.len() / red.unit;
    out.copy_from_slice(&slots[slots.len().min(2) - 1][off..]);
    if slots.len() < 2 {
        return;
    }
    crate::op::apply_datatype(&red.op, red.dt, cnt, &slots[0][off..], out);
    let mut acc = Vec::new();
    for s in &slots[2..] {
        acc.clear();
        acc.extend_from_slice(out);
        out.copy_from_slice(&s[off..]);
        crate::op::apply_datatype(&red.op, red.dt, cnt, &acc, out);
    }
}

/// Write the contributions in `slots` (each [`SHM_HDR`] header bytes, then
/// `out.len()` data bytes) reduced with `k` into `out`, in the order of
/// [`reduce_slots`], so both give the same bits. At least two slots, and
/// `out` at most [`TINY`] bytes.
#[inline]
fn reduce_tiny(k: crate::op::Kernel, slots: &[&[u8]], out: &mut [u8]) {
    fn data(s: &[u8], n: usize) -> &[u8] {
        &s[SHM_HDR..SHM_HDR + n]
    }
    let n = out.len();
    gmpi_btl::copy_bytes(out, data(slots[1], n));
    k(data(slots[0], n), out);
    let mut acc = [0u8; TINY];
    let acc = &mut acc[..n];
    for s in &slots[2..] {
        gmpi_btl::copy_bytes(acc, out);
        gmpi_btl::copy_bytes(out, data(s, n));
        k(acc, out);
    }
}

/// The largest allreduce, in bytes per rank, that takes the fast path
/// [`Communicator::allreduce_tiny`]: a few cache lines, where the call's own
/// overhead is most of its time.
const TINY: usize = 64;

/// Bytes of the header each rank puts before its data in a shared-memory
/// exchange (and gathers under `coll_check`): which collective, root, op and
/// length, so every rank sees a mismatch between ranks (the same way on every
/// rank) instead of reading garbage or panicking.
const SHM_HDR: usize = 16;

/// The largest contribution per rank the shared-memory area takes
/// (`coll_shm_max`, 16 KiB by default).
fn shm_max(e: &Engine) -> usize {
    e.cfg.coll_shm_max.unwrap_or(16 * KIB)
}

/// The header of a shared-memory exchange.
fn shm_header(kind: u32, root: i32, op: Option<&Op>, len: usize) -> [u8; SHM_HDR] {
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
    let mut h = [0u8; SHM_HDR];
    h[0..4].copy_from_slice(&kind.to_le_bytes());
    h[4..8].copy_from_slice(&root.to_le_bytes());
    h[8..12].copy_from_slice(&op.to_le_bytes());
    h[12..16].copy_from_slice(&(len as u32).to_le_bytes());
    h
}

/// Run `f` on this rank's contribution to a shared-memory exchange: `hdr`,
/// then `input`'s bytes packed (nothing for `None`). Small contributions are
/// assembled on the stack, larger ones in one allocation.
fn with_contribution<R>(hdr: [u8; SHM_HDR], input: Option<&View>, f: impl FnOnce(&[u8]) -> R) -> R {
    let len = input.map_or(0, View::bytes);
    let mut small = [0u8; 256];
    let mut big = Vec::new();
    let data: &mut [u8] = if SHM_HDR + len <= small.len() {
        &mut small[..SHM_HDR + len]
    } else {
        big.resize(SHM_HDR + len, 0);
        &mut big
    };
    data[..SHM_HDR].copy_from_slice(&hdr);
    if let Some(v) = input {
        if v.read_contig(|d| data[SHM_HDR..].copy_from_slice(d))
            .is_none()
        {
            v.pack_into(&mut data[SHM_HDR..]);
        }
    }
    f(data)
}

/// Compare every rank's header with ours (the header carries the length,
/// so sizes are compared too): the first difference as an error.
fn shm_mismatch(call: &str, me: i32, mine: &[u8], slots: &[&[u8]]) -> Option<Error> {
    let field = |h: &[u8], i: usize| i32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    let (r, s) = slots
        .iter()
        .enumerate()
        .find(|(_, s)| s.len() < SHM_HDR || s[..SHM_HDR] != mine[..SHM_HDR])?;
    let (class, what) = if s.len() < SHM_HDR || field(s, 0) != field(mine, 0) {
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

impl Communicator {
    pub(crate) fn next_tag(&self) -> i32 {
        (self.inner.coll_seq.fetch_add(1, Ordering::Relaxed) & 0x7fff_ffff) as i32
    }

    fn check_root(&self, call: &str, root: i32) -> Result<()> {
        if (0..self.size()).contains(&root) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorClass::Root,
                call,
                self.rank(),
                format!("invalid root {root} (communicator size {})", self.size()),
            ))
        }
    }

    fn err(&self, class: ErrorClass, call: &str, msg: impl std::fmt::Display) -> Error {
        Error::new(class, call, self.rank(), msg)
    }

    /// Equal byte counts of two buffers, or an error naming both.
    fn same_bytes(&self, call: &str, a: (&str, usize), b: (&str, usize)) -> Result<()> {
        if a.1 == b.1 {
            Ok(())
        } else {
            Err(self.err(
                ErrorClass::Count,
                call,
                format!(
                    "{} holds {} bytes but {} holds {} bytes (they must match)",
                    a.0, a.1, b.0, b.1
                ),
            ))
        }
    }

    /// Per-rank blocks of a buffer of `n × k` elements.
    fn blocks_of(&self, call: &str, what: &str, v: &View) -> Result<Vec<View>> {
        // One block per rank of the other side: the remote group's on an
        // intercommunicator.
        let n = self.inner.peers().len();
        if !v.count.is_multiple_of(n) {
            return Err(self.err(
                ErrorClass::Count,
                call,
                format!(
                    "{what} has {} elements, not a multiple of the {}",
                    v.count,
                    self.peers_desc()
                ),
            ));
        }
        let k = v.count / n;
        Ok((0..n)
            .map(|i| v.sub(i * k, k).expect("inside the buffer"))
            .collect())
    }

    /// Blocks given by counts and displacements (elements of `v`'s type).
    fn vblocks(
        &self,
        call: &str,
        what: &str,
        v: &View,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<Vec<View>> {
        let n = self.inner.peers().len();
        if counts.len() != n || displs.len() != n {
            return Err(self.err(
                ErrorClass::Arg,
                call,
                format!(
                    "{what}: {} counts and {} displacements for {n} ranks",
                    counts.len(),
                    displs.len()
                ),
            ));
        }
        (0..n)
            .map(|i| {
                let (c, d) = (counts[i], displs[i]);
                if c < 0 {
                    return Err(self.err(
                        ErrorClass::Count,
                        call,
                        format!("{what}: count[{i}] = {c} is negative"),
                    ));
                }
                if d < 0 {
                    return Err(self.err(
                        ErrorClass::Arg,
                        call,
                        format!("{what}: displacement[{i}] = {d} is negative"),
                    ));
                }
                v.sub(d as usize, c as usize).ok_or_else(|| {
                    self.err(
                        ErrorClass::Buffer,
                        call,
                        format!(
                            "{what}: block {i} ({c} elements at displacement {d}) reaches past the end of the buffer"
                        ),
                    )
                })
            })
            .collect()
    }

    /// Run a collective: `build` makes its schedule (or does it all itself
    /// and returns `None`).
    fn blocking(
        &self,
        call: &'static str,
        build: impl FnOnce(&Self, &mut Engine, i32) -> Result<Option<Sched>>,
    ) -> Result<()> {
        self.check_live(call)?;
        engine::with(call, |e| {
            let tag = self.next_tag();
            match build(self, e, tag)? {
                None => Ok(()),
                Some(mut s) => e.drive(call, &mut s),
            }
        })
    }

    /// Start a collective in the background.
    fn nonblocking<'a>(
        &self,
        call: &'static str,
        build: impl FnOnce(&Self, &mut Engine, i32) -> Result<Sched>,
    ) -> Result<Request<'a>> {
        self.check_live(call)?;
        let h = engine::with(call, |e| {
            let tag = self.next_tag();
            let s = build(self, e, tag)?;
            Ok(e.park(s))
        })?;
        Ok(Request::new(h, call))
    }

    /// The shared-memory area, made on first use, if this communicator can
    /// have one and `bytes` fits.
    fn shm<'g>(
        &'g self,
        e: &mut Engine,
        call: &'static str,
        tag: i32,
        bytes: usize,
    ) -> Option<std::sync::MutexGuard<'g, ShmState>> {
        let max = shm_max(e);
        if !self.inner.single_node || self.size() < 2 || !e.cfg.coll_shm || bytes > max {
            return None;
        }
        let mut g = self.inner.shm.lock().unwrap_or_else(|p| p.into_inner());
        if let ShmState::NotTried = *g {
            *g = ShmState::Unavailable;
            if let Some(prefix) = e.shm_prefix.clone() {
                // Communicators of one split share a context id but not members:
                // the first member names the area apart.
                let path = format!("{prefix}-c{}-{}", self.inner.ctx, self.inner.world[0]);
                let cfg = CollConfig {
                    slot_bytes: max.max(64) + SHM_HDR,
                    ..CollConfig::default()
                };
                let (n, me) = (self.size(), self.rank());
                let mut fence = || {
                    let mut s = Sched::new(call, &self.inner, tag);
                    algo::barrier(&mut s, n, me);
                    e.drive(call, &mut s).map_err(|e| e.to_string())
                };
                match ShmColl::bootstrap(&path, me as usize, n as usize, &cfg, &mut fence) {
                    Ok(c) => {
                        tracing::debug!(target: "coll", "{call}: shared-memory collectives on context {} ({n} ranks, {} B slots)", self.inner.ctx, c.slot_bytes());
                        *g = ShmState::Ready(Box::new(c));
                    }
                    Err(err) => {
                        tracing::debug!(target: "coll", "{call}: no shared-memory collectives on context {}: {err}", self.inner.ctx);
                    }
                }
            }
        }
        match &*g {
            ShmState::Ready(c) if bytes + SHM_HDR <= c.slot_bytes() && !c.is_broken() => Some(g),
            _ => None,
        }
    }

    /// One exchange through the shared-memory area, if this communicator
    /// has one that takes `bytes` per rank (`Ok(false)`, nothing done, if
    /// not): publish `hdr` and then `input` packed, and once every rank's
    /// header agrees with ours run `f` over every rank's slot (header
    /// included). A difference fails this rank as it fails every other.
    /// `what` describes the exchange under `GMPI_LOG=coll=debug`.
    #[allow(clippy::too_many_arguments)]
    fn shm_exchange(
        &self,
        e: &mut Engine,
        call: &'static str,
        tag: i32,
        bytes: usize,
        hdr: [u8; SHM_HDR],
        input: Option<&View>,
        what: std::fmt::Arguments<'_>,
        f: impl FnOnce(&[&[u8]]),
    ) -> Result<bool> {
        let Some(mut g) = self.shm(e, call, tag, bytes) else {
            return Ok(false);
        };
        let ShmState::Ready(a) = &mut *g else {
            unreachable!()
        };
        tracing::debug!(target: "coll", "{call}: shared memory, {what}");
        let me = self.rank();
        with_contribution(hdr, input, |data| {
            let mut bad = None;
            a.exchange(data, &mut |k| e.idle_flags(call, k), |slots| {
                bad = shm_mismatch(call, me, data, slots);
                if bad.is_none() {
                    f(slots);
                }
            })?;
            bad.map_or(Ok(true), Err)
        })
    }

    /// With `coll_check`, make sure every rank passed the same root, op and
    /// byte count (`bytes` is `None` for the `v` forms).
    ///
    /// Inlined: every collective calls it and it is off by default, so the
    /// common case is one test, not a call (the check itself is out of line).
    #[inline]
    fn check_agree(
        &self,
        e: &mut Engine,
        call: &'static str,
        root: i32,
        op: Option<&Op>,
        bytes: Option<usize>,
    ) -> Result<()> {
        if !e.cfg.coll_check || self.size() < 2 {
            return Ok(());
        }
        self.check_agree_gathered(e, call, root, op, bytes)
    }

    #[inline(never)]
    fn check_agree_gathered(
        &self,
        e: &mut Engine,
        call: &'static str,
        root: i32,
        op: Option<&Op>,
        bytes: Option<usize>,
    ) -> Result<()> {
        // The same header the shared-memory path exchanges, gathered from
        // every rank and compared the same way.
        let len = bytes.unwrap_or(u32::MAX as usize);
        let mine = shm_header(0, root, op, len);
        let mut all = vec![0u8; SHM_HDR * self.size() as usize];
        self.allgather_in(e, call, &mine[..], &mut all[..])?;
        let slots: Vec<&[u8]> = all.chunks(SHM_HDR).collect();
        match shm_mismatch(call, self.rank(), &mine, &slots) {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    // ---------------- barrier ----------------

    /// Block until every rank of the communicator has entered the barrier
    /// (`MPI_Barrier`): a shared-memory barrier on single-node communicators,
    /// else a dissemination barrier.
    pub fn barrier(&self) -> Result<()> {
        const CALL: &str = "MPI_Barrier";
        if self.is_inter() {
            return self.inter_blocking(CALL, |c, tag| Ok(c.inter_barrier(CALL, tag)));
        }
        self.blocking(CALL, |c, e, tag| {
            if let Some(mut g) = c.shm(e, CALL, tag, 0) {
                let ShmState::Ready(a) = &mut *g else {
                    unreachable!()
                };
                tracing::trace!(target: "coll", "{CALL}: shared memory");
                a.barrier(&mut |k| e.idle_flags(CALL, k))?;
                return Ok(None);
            }
            Ok(Some(c.barrier_sched(CALL, tag)))
        })
    }

    fn barrier_sched(&self, call: &'static str, tag: i32) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        tracing::debug!(target: "coll", "{call}: dissemination over {} ranks", self.size());
        algo::barrier(&mut s, self.size(), self.rank());
        s
    }

    /// The world barrier finalize runs (the engine is already locked).
    pub(crate) fn barrier_in(&self, e: &mut Engine, call: &'static str) -> Result<()> {
        let tag = self.next_tag();
        let mut s = self.barrier_sched(call, tag);
        e.drive(call, &mut s)
    }

    /// Start a barrier (`MPI_Ibarrier`).
    pub fn ibarrier(&self) -> Result<Request<'static>> {
        if self.is_inter() {
            return self.inter_nonblocking("MPI_Ibarrier", |c, tag| {
                Ok(c.inter_barrier("MPI_Ibarrier", tag))
            });
        }
        self.nonblocking("MPI_Ibarrier", |c, _, tag| {
            Ok(c.barrier_sched("MPI_Ibarrier", tag))
        })
    }

    // ---------------- bcast ----------------

    fn bcast_sched(&self, e: &Engine, call: &'static str, tag: i32, v: &View, root: i32) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let mut st = Staged::default();
        let me = self.rank();
        let buf = if me == root {
            s.input(v)
        } else {
            st.out(&mut s, v)
        };
        let (n, bytes) = (self.size(), v.bytes());
        if n > 1 && bytes > 0 {
            let large = e.cfg.bcast_large.unwrap_or(128 * KIB);
            if bytes >= large && n > 2 {
                tracing::debug!(target: "coll", "{call}: scatter + ring allgather, {bytes} B over {n} ranks");
                algo::bcast_scatter_allgather(&mut s, n, me, root, buf);
            } else {
                tracing::debug!(target: "coll", "{call}: binomial tree, {bytes} B over {n} ranks");
                algo::bcast_binomial(&mut s, n, me, root, buf);
            }
        }
        st.finish(&mut s);
        s
    }

    /// Broadcast `buf` from `root` to every rank (`MPI_Bcast`).
    pub fn bcast<B: BufferMut + ?Sized>(&self, buf: &mut B, root: i32) -> Result<()> {
        const CALL: &str = "MPI_Bcast";
        if self.is_inter() {
            let v = buf.view_mut();
            return self.inter_blocking(CALL, |c, tag| c.inter_bcast(CALL, tag, &v, root));
        }
        self.check_root(CALL, root)?;
        let v = buf.view_mut();
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, root, None, Some(v.bytes()))?;
            // Every rank publishes a header (the root its data too) and
            // checks everyone's, so ranks naming different roots or sizes all
            // fail alike; then the others copy the root's data.
            let (me, len) = (c.rank(), v.bytes());
            let hdr = shm_header(3, root, None, len);
            if v.is_host()
                && c.shm_exchange(
                    e,
                    CALL,
                    tag,
                    len,
                    hdr,
                    (me == root).then_some(&v),
                    format_args!("{len} B"),
                    |slots| {
                        if me != root {
                            v.unpack(&slots[root as usize][SHM_HDR..]);
                        }
                    },
                )?
            {
                return Ok(None);
            }
            Ok(Some(c.bcast_sched(e, CALL, tag, &v, root)))
        })
    }

    /// Start a broadcast (`MPI_Ibcast`).
    pub fn ibcast<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ibcast";
        if self.is_inter() {
            let v = buf.view_mut();
            return self.inter_nonblocking(CALL, |c, tag| c.inter_bcast(CALL, tag, &v, root));
        }
        self.check_root(CALL, root)?;
        let v = buf.view_mut();
        self.nonblocking(CALL, |c, e, tag| Ok(c.bcast_sched(e, CALL, tag, &v, root)))
    }

    // ---------------- reduce ----------------

    #[allow(clippy::too_many_arguments)]
    fn reduce_sched(
        &self,
        call: &'static str,
        tag: i32,
        send: Option<&View>,
        recv: &View,
        op: &Op,
        root: i32,
        red: Reduction,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        s.red = Some(red);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let commutative = op.is_commutative();
        // Input and the accumulator: at the root the receive buffer; a leaf
        // sends straight from its input; others use a temporary. The input
        // is read where it is (see `reduce_binomial`).
        let bytes = if me == root {
            recv.bytes()
        } else {
            send.unwrap_or(recv).bytes()
        };
        let (input, acc) = if me == root {
            match send {
                Some(sv) => {
                    let out = st.out(&mut s, recv);
                    (s.input(sv), out)
                }
                None => {
                    let io = st.inout(&mut s, recv);
                    (io, io)
                }
            }
        } else {
            let i = s.input(send.unwrap_or(recv));
            let tree_root = if commutative { root } else { 0 };
            let rel = (me - tree_root).rem_euclid(n);
            if rel % 2 == 1 {
                (i, i)
            } else {
                (i, s.temp(bytes))
            }
        };
        if n > 1 {
            tracing::debug!(target: "coll", "{call}: binomial tree{}, {bytes} B over {n} ranks", if commutative { "" } else { " in rank order" });
            let tmp = s.temp(bytes);
            let res = algo::reduce_binomial(&mut s, n, me, root, input, acc, tmp, commutative);
            if me == root {
                s.copy(res, acc);
            }
        } else {
            s.copy(input, acc);
        }
        st.finish(&mut s);
        s
    }

    fn reduce_checked(
        &self,
        call: &'static str,
        send: Option<&View>,
        recv: &View,
        op: &Op,
        root: i32,
    ) -> Result<Reduction> {
        self.check_root(call, root)?;
        let me = self.rank();
        let input = send.unwrap_or(recv);
        if me == root {
            if let Some(sv) = send {
                self.same_bytes(
                    call,
                    ("the send buffer", sv.bytes()),
                    ("the receive buffer", recv.bytes()),
                )?;
            }
        }
        reduction(call, me, op, &input.ty)
    }

    /// Reduce every rank's `send` with `op` into `recv` at `root`
    /// (`MPI_Reduce`). `recv` is only written at the root (other ranks may
    /// pass an empty slice).
    pub fn reduce<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: impl Into<Op>,
        root: i32,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Reduce";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_reduce(CALL, tag, &sv, &rv, &op, root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let red = self.reduce_checked(CALL, Some(&sv), &rv, &op, root)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, root, Some(&op), Some(sv.bytes()))?;
            if c.shm_reduce(e, CALL, tag, &sv, Some(&rv), &red, Some(root))? {
                return Ok(None);
            }
            Ok(Some(c.reduce_sched(
                CALL,
                tag,
                Some(&sv),
                &rv,
                &op,
                root,
                red,
            )))
        })
    }

    /// [`Communicator::reduce`] in place: at the root `buf` is both input and
    /// result; elsewhere it is the input (`MPI_IN_PLACE`).
    pub fn reduce_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        op: impl Into<Op>,
        root: i32,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Reduce";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let red = self.reduce_checked(CALL, None, &v, &op, root)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, root, Some(&op), Some(v.bytes()))?;
            if c.shm_reduce(
                e,
                CALL,
                tag,
                &v,
                (c.rank() == root).then_some(&v),
                &red,
                Some(root),
            )? {
                return Ok(None);
            }
            Ok(Some(c.reduce_sched(CALL, tag, None, &v, &op, root, red)))
        })
    }

    /// Start a reduce (`MPI_Ireduce`).
    pub fn ireduce<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        op: impl Into<Op>,
        root: i32,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Ireduce";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_reduce(CALL, tag, &sv, &rv, &op, root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let red = self.reduce_checked(CALL, Some(&sv), &rv, &op, root)?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.reduce_sched(CALL, tag, Some(&sv), &rv, &op, root, red))
        })
    }

    /// Start an in-place reduce (`MPI_Ireduce` with `MPI_IN_PLACE` at the
    /// root): as [`Communicator::reduce_in_place`], `buf` is the input and
    /// (at the root) the result.
    pub fn ireduce_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        op: impl Into<Op>,
        root: i32,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Ireduce";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let red = self.reduce_checked(CALL, None, &v, &op, root)?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.reduce_sched(CALL, tag, None, &v, &op, root, red))
        })
    }

    /// Small reductions through shared memory: every rank publishes its
    /// input, then (every rank, or the root) reduces the inputs in rank
    /// order. Returns whether it ran.
    #[allow(clippy::too_many_arguments)]
    fn shm_reduce(
        &self,
        e: &mut Engine,
        call: &'static str,
        tag: i32,
        input: &View,
        out: Option<&View>,
        red: &Reduction,
        root: Option<i32>,
    ) -> Result<bool> {
        // Device buffers take the schedules (device temporaries, reductions
        // on the GPU); the shared-memory area is for host bytes.
        if !input.is_host() || out.is_some_and(|o| !o.is_host()) {
            return Ok(false);
        }
        let me = self.rank();
        let len = input.bytes();
        let out = out.filter(|_| root.is_none_or(|r| r == me) && len > 0);
        let hdr = shm_header(1, root.unwrap_or(-1), Some(&red.op), len);
        let mut staged: Option<Vec<u8>> = None;
        let ran = self.shm_exchange(
            e,
            call,
            tag,
            len,
            hdr,
            Some(input),
            format_args!("{len} B, reduced in rank order"),
            |slots| {
                if let Some(o) = out {
                    if o.write_contig(|o| reduce_slots(red, slots, SHM_HDR, o))
                        .is_none()
                    {
                        let mut r = vec![0u8; len];
                        reduce_slots(red, slots, SHM_HDR, &mut r);
                        staged = Some(r);
                    }
                }
            },
        )?;
        if let (Some(o), Some(r)) = (out, staged) {
            o.unpack(&r);
        }
        Ok(ran)
    }

    // ---------------- allreduce ----------------

    /// The latency-bound allreduce: contiguous host buffers of one
    /// predefined type, 1 to [`TINY`] bytes, a predefined element-wise op,
    /// on an intracommunicator whose shared-memory area is already set up,
    /// without `coll_check`. It is [`shm_reduce`](Self::shm_reduce)'s
    /// exchange (same header, same rank-order reduction, same mismatch
    /// errors, the same tag consumed), so ranks that take either path agree,
    /// minus what a tiny call cannot use: the op's kernel is looked up once
    /// and called directly, the contribution is built on the stack, and the
    /// result is written straight into `recv`.
    ///
    /// `None`, before any effect, sends the call down the general path,
    /// which makes every check (and sets the area up on first use) itself.
    #[inline]
    fn allreduce_tiny(&self, send: Option<&View>, recv: &View, op: &Op) -> Option<Result<()>> {
        use crate::buffer::HostMem;
        use crate::progress::HostMemory;
        const CALL: &str = "MPI_Allreduce";
        let len = recv.bytes();
        let input = send.unwrap_or(recv);
        if len == 0 || len > TINY || input.bytes() != len || !recv.writable || self.is_inter() {
            return None;
        }
        let kernel = crate::op::kernel(op, input.ty.prim()?)?;
        let (src, dst) = (input.contig_addr()?, recv.contig_addr()?);
        if !recv.is_host() || send.is_some_and(|s| !s.is_host()) || self.check_live(CALL).is_err() {
            return None;
        }
        let me = self.rank();
        engine::with(CALL, |e| {
            // The general path's `shm` decides the same way from these.
            if e.cfg.coll_check || !e.cfg.coll_shm || len > shm_max(e) {
                return Ok(None);
            }
            let mut g = self.inner.shm.lock().unwrap_or_else(|p| p.into_inner());
            let ShmState::Ready(a) = &mut *g else {
                return Ok(None);
            };
            if a.is_broken() || SHM_HDR + len > a.slot_bytes() {
                return Ok(None);
            }
            self.next_tag();
            tracing::debug!(target: "coll", "{CALL}: shared memory, {len} B, tiny path, reduced in rank order");
            let mut buf = [0u8; SHM_HDR + TINY];
            let data = &mut buf[..SHM_HDR + len];
            data[..SHM_HDR].copy_from_slice(&shm_header(1, -1, Some(op), len));
            HostMem.with_read(src, len, |d| {
                gmpi_btl::copy_bytes(&mut data[SHM_HDR..], d)
            });
            let data: &[u8] = data;
            let mut bad = None;
            a.exchange(data, &mut |k| e.idle_flags(CALL, k), |slots| {
                if slots
                    .iter()
                    .any(|s| s.len() != data.len() || s[..SHM_HDR] != data[..SHM_HDR])
                {
                    bad = shm_mismatch(CALL, me, data, slots);
                    return;
                }
                HostMem.with_write(dst, len, |out| {
                    reduce_tiny(kernel, slots, out)
                });
            })?;
            match bad {
                Some(err) => Err(err),
                None => Ok(Some(())),
            }
        })
        .transpose()
    }

    #[allow(clippy::too_many_arguments)]
    fn allreduce_sched(
        &self,
        e: &Engine,
        call: &'static str,
        tag: i32,
        send: Option<&View>,
        recv: &View,
        op: &Op,
        red: Reduction,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let unit = red.unit;
        s.red = Some(red);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let bytes = recv.bytes();
        let large = e.cfg.allreduce_large.unwrap_or(64 * KIB);
        let ring = n > 1 && bytes >= large && op.is_commutative() && bytes / unit >= n as usize;
        let (input, acc) = match send {
            // Both algorithms read the contribution where it is.
            Some(sv) => {
                let out = st.out(&mut s, recv);
                (s.input(sv), out)
            }
            None => {
                let io = st.inout(&mut s, recv);
                (io, io)
            }
        };
        if ring {
            tracing::debug!(target: "coll", "{call}: ring (reduce-scatter + allgather), {bytes} B over {n} ranks");
            let (_, first) = algo::split(bytes, unit, n, 0);
            let tmp = (input == acc).then(|| s.temp(first));
            algo::allreduce_ring(&mut s, n, me, input, acc, tmp, unit);
        } else if n > 1 && bytes > 0 {
            tracing::debug!(target: "coll", "{call}: recursive doubling, {bytes} B over {n} ranks");
            let tmp = s.temp(bytes);
            let res = algo::allreduce_recursive_doubling(&mut s, n, me, input, acc, tmp);
            s.copy(res, acc);
        } else {
            s.copy(input, acc);
        }
        st.finish(&mut s);
        s
    }

    fn allreduce_checked(
        &self,
        call: &'static str,
        send: Option<&View>,
        recv: &View,
        op: &Op,
    ) -> Result<Reduction> {
        if let Some(sv) = send {
            self.same_bytes(
                call,
                ("the send buffer", sv.bytes()),
                ("the receive buffer", recv.bytes()),
            )?;
        }
        reduction(call, self.rank(), op, &send.unwrap_or(recv).ty)
    }

    pub(crate) fn allreduce_in<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        e: &mut Engine,
        call: &'static str,
        send: &S,
        recv: &mut R,
        op: &Op,
    ) -> Result<()> {
        let (sv, rv) = (send.view(), recv.view_mut());
        let red = self.allreduce_checked(call, Some(&sv), &rv, op)?;
        let tag = self.next_tag();
        let mut s = self.allreduce_sched(e, call, tag, Some(&sv), &rv, op, red);
        e.drive(call, &mut s)
    }

    /// Reduce every rank's `send` with `op`; every rank gets the result in
    /// `recv`, bit for bit the same everywhere (`MPI_Allreduce`).
    pub fn allreduce<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: impl Into<Op>,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Allreduce";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| c.inter_allreduce(CALL, tag, &sv, &rv, &op));
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        if let Some(r) = self.allreduce_tiny(Some(&sv), &rv, &op) {
            return r;
        }
        let red = self.allreduce_checked(CALL, Some(&sv), &rv, &op)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, -1, Some(&op), Some(sv.bytes()))?;
            if c.shm_reduce(e, CALL, tag, &sv, Some(&rv), &red, None)? {
                return Ok(None);
            }
            Ok(Some(c.allreduce_sched(
                e,
                CALL,
                tag,
                Some(&sv),
                &rv,
                &op,
                red,
            )))
        })
    }

    /// [`Communicator::allreduce`] in place: `buf` is input and result.
    pub fn allreduce_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        op: impl Into<Op>,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Allreduce";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        if let Some(r) = self.allreduce_tiny(None, &v, &op) {
            return r;
        }
        let red = self.allreduce_checked(CALL, None, &v, &op)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, -1, Some(&op), Some(v.bytes()))?;
            if c.shm_reduce(e, CALL, tag, &v, Some(&v), &red, None)? {
                return Ok(None);
            }
            Ok(Some(c.allreduce_sched(e, CALL, tag, None, &v, &op, red)))
        })
    }

    /// Start an allreduce (`MPI_Iallreduce`).
    pub fn iallreduce<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Iallreduce";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self
                .inter_nonblocking(CALL, |c, tag| c.inter_allreduce(CALL, tag, &sv, &rv, &op));
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let red = self.allreduce_checked(CALL, Some(&sv), &rv, &op)?;
        self.nonblocking(CALL, |c, e, tag| {
            Ok(c.allreduce_sched(e, CALL, tag, Some(&sv), &rv, &op, red))
        })
    }

    /// Start an in-place allreduce (`MPI_Iallreduce` with `MPI_IN_PLACE`).
    pub fn iallreduce_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Iallreduce";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let red = self.allreduce_checked(CALL, None, &v, &op)?;
        self.nonblocking(CALL, |c, e, tag| {
            Ok(c.allreduce_sched(e, CALL, tag, None, &v, &op, red))
        })
    }

    // ---------------- gather / scatter ----------------

    fn gather_sched(
        &self,
        call: &'static str,
        tag: i32,
        send: Option<&View>,
        blocks: &[View],
        root: i32,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let mine = send.map(|v| s.input(v));
        let regions: Vec<Region> = if me == root {
            blocks
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if i as i32 == me && send.is_none() {
                        Region {
                            mem: 0,
                            off: 0,
                            len: 0,
                        }
                    } else {
                        st.out(&mut s, b)
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        tracing::debug!(target: "coll", "{call}: linear, {n} ranks");
        algo::gather_linear(&mut s, n, me, root, mine, &regions);
        st.finish(&mut s);
        s
    }

    /// Gather every rank's `send` into `recv` at `root`, in rank order
    /// (`MPI_Gather`); at the root `recv` holds `size` blocks of
    /// `recv.len() / size` elements. Other ranks may pass an empty `recv`.
    pub fn gather<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        root: i32,
    ) -> Result<()> {
        const CALL: &str = "MPI_Gather";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_gather(CALL, tag, &sv, &rv, None, root)
            });
        }
        let (sv, blocks) = self.gather_args(CALL, send.view(), recv.view_mut(), root)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, root, None, Some(sv.bytes()))?;
            if c.shm_gather(e, CALL, tag, &sv, &blocks, Some(root))? {
                return Ok(None);
            }
            Ok(Some(c.gather_sched(CALL, tag, Some(&sv), &blocks, root)))
        })
    }

    fn gather_args(&self, call: &str, sv: View, rv: View, root: i32) -> Result<(View, Vec<View>)> {
        self.check_root(call, root)?;
        let blocks = if self.rank() == root {
            let b = self.blocks_of(call, "the receive buffer", &rv)?;
            self.same_bytes(
                call,
                ("the send buffer", sv.bytes()),
                ("each rank's block of the receive buffer", b[0].bytes()),
            )?;
            b
        } else {
            Vec::new()
        };
        Ok((sv, blocks))
    }

    /// [`Communicator::gather`] in place: at the root `buf` is the whole
    /// receive buffer and the root's own block is already in place;
    /// elsewhere `buf` is the send buffer.
    pub fn gather_in_place<B: BufferMut + ?Sized>(&self, buf: &mut B, root: i32) -> Result<()> {
        const CALL: &str = "MPI_Gather";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_blocks(CALL, &v, root)?;
        // The root's input is its own block (the other ranks may not be in
        // place: they must take the same path as a root that is).
        let input = if me == root {
            blocks[root as usize].clone()
        } else {
            v.clone()
        };
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, root, None, Some(input.bytes()))?;
            if c.shm_gather(e, CALL, tag, &input, &blocks, Some(root))? {
                return Ok(None);
            }
            Ok(Some(c.gather_sched(
                CALL,
                tag,
                (me != root).then_some(&v),
                &blocks,
                root,
            )))
        })
    }

    /// Start a gather (`MPI_Igather`).
    pub fn igather<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Igather";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_gather(CALL, tag, &sv, &rv, None, root)
            });
        }
        let (sv, blocks) = self.gather_args(CALL, send.view(), recv.view_mut(), root)?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.gather_sched(CALL, tag, Some(&sv), &blocks, root))
        })
    }

    /// Start an in-place gather (`MPI_Igather` with `MPI_IN_PLACE` at the
    /// root): as [`Communicator::gather_in_place`].
    pub fn igather_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Igather";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_blocks(CALL, &v, root)?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.gather_sched(CALL, tag, (me != root).then_some(&v), &blocks, root))
        })
    }

    /// The root's `size` equal blocks of an in-place rooted buffer (none
    /// elsewhere), after checking the root.
    fn rooted_blocks(&self, call: &str, v: &View, root: i32) -> Result<Vec<View>> {
        self.check_root(call, root)?;
        if self.rank() == root {
            self.blocks_of(call, "the buffer", v)
        } else {
            Ok(Vec::new())
        }
    }

    /// The root's blocks of a `v` rooted collective (none elsewhere), after
    /// checking the root; `other` is the buffer on the other side (`None` in
    /// place), whose size must match the root's own block.
    #[allow(clippy::too_many_arguments)]
    fn rooted_vblocks(
        &self,
        call: &str,
        what: &str,
        v: &View,
        counts: &[i32],
        displs: &[i32],
        root: i32,
        other: Option<(&str, &View)>,
    ) -> Result<Vec<View>> {
        self.check_root(call, root)?;
        if self.rank() != root {
            return Ok(Vec::new());
        }
        let b = self.vblocks(call, what, v, counts, displs)?;
        if let Some((name, o)) = other {
            let mine = format!("the root's block of {what}");
            self.same_bytes(call, (&mine, b[root as usize].bytes()), (name, o.bytes()))?;
        }
        Ok(b)
    }

    /// Gather with per-rank counts and displacements (elements of `recv`'s
    /// type) at the root (`MPI_Gatherv`). Non-roots may pass empty slices.
    pub fn gatherv<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Result<()> {
        const CALL: &str = "MPI_Gatherv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_gather(CALL, tag, &sv, &rv, Some((counts, displs)), root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.rooted_vblocks(
            CALL,
            "the receive buffer",
            &rv,
            counts,
            displs,
            root,
            Some(("the send buffer", &sv)),
        )?;
        self.blocking(CALL, |c, _, tag| {
            Ok(Some(c.gather_sched(CALL, tag, Some(&sv), &blocks, root)))
        })
    }

    /// Start a gatherv (`MPI_Igatherv`).
    pub fn igatherv<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Igatherv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_gather(CALL, tag, &sv, &rv, Some((counts, displs)), root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.rooted_vblocks(
            CALL,
            "the receive buffer",
            &rv,
            counts,
            displs,
            root,
            Some(("the send buffer", &sv)),
        )?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.gather_sched(CALL, tag, Some(&sv), &blocks, root))
        })
    }

    /// [`Communicator::gatherv`] in place: at the root the root's block is
    /// already in `buf`; elsewhere `buf` is the send buffer.
    pub fn gatherv_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Result<()> {
        const CALL: &str = "MPI_Gatherv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_vblocks(CALL, "the buffer", &v, counts, displs, root, None)?;
        self.blocking(CALL, |c, _, tag| {
            Ok(Some(c.gather_sched(
                CALL,
                tag,
                (me != root).then_some(&v),
                &blocks,
                root,
            )))
        })
    }

    /// Start an in-place gatherv (`MPI_Igatherv` with `MPI_IN_PLACE` at the
    /// root): as [`Communicator::gatherv_in_place`].
    pub fn igatherv_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Igatherv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_vblocks(CALL, "the buffer", &v, counts, displs, root, None)?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.gather_sched(CALL, tag, (me != root).then_some(&v), &blocks, root))
        })
    }

    /// Gathers through shared memory (every rank the same size). Returns
    /// whether it ran.
    fn shm_gather(
        &self,
        e: &mut Engine,
        call: &'static str,
        tag: i32,
        input: &View,
        blocks: &[View],
        root: Option<i32>,
    ) -> Result<bool> {
        if !input.is_host() || blocks.iter().any(|b| !b.is_host()) {
            return Ok(false);
        }
        let (me, len) = (self.rank(), input.bytes());
        let hdr = shm_header(2, root.unwrap_or(-1), None, len);
        self.shm_exchange(
            e,
            call,
            tag,
            len,
            hdr,
            Some(input),
            format_args!("{len} B per rank"),
            |slots| {
                if root.is_none_or(|r| r == me) {
                    for (b, s) in blocks.iter().zip(slots) {
                        b.unpack(&s[SHM_HDR..]);
                    }
                }
            },
        )
    }

    fn scatter_sched(
        &self,
        call: &'static str,
        tag: i32,
        blocks: &[View],
        recv: Option<&View>,
        root: i32,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let regions: Vec<Region> = if me == root {
            blocks.iter().map(|b| s.input(b)).collect()
        } else {
            Vec::new()
        };
        let mine = recv.map(|v| st.out(&mut s, v));
        tracing::debug!(target: "coll", "{call}: linear, {n} ranks");
        algo::scatter_linear(&mut s, n, me, root, &regions, mine);
        st.finish(&mut s);
        s
    }

    fn scatter_args(&self, call: &str, sv: View, rv: View, root: i32) -> Result<(Vec<View>, View)> {
        self.check_root(call, root)?;
        let blocks = if self.rank() == root {
            let b = self.blocks_of(call, "the send buffer", &sv)?;
            self.same_bytes(
                call,
                ("each rank's block of the send buffer", b[0].bytes()),
                ("the receive buffer", rv.bytes()),
            )?;
            b
        } else {
            Vec::new()
        };
        Ok((blocks, rv))
    }

    /// Scatter blocks of `send` at `root` to every rank's `recv`
    /// (`MPI_Scatter`); `send` holds `size` blocks of `send.len() / size`
    /// elements. Non-roots may pass an empty `send`.
    pub fn scatter<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        root: i32,
    ) -> Result<()> {
        const CALL: &str = "MPI_Scatter";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_scatter(CALL, tag, &sv, None, &rv, root)
            });
        }
        let (blocks, rv) = self.scatter_args(CALL, send.view(), recv.view_mut(), root)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, root, None, Some(rv.bytes()))?;
            Ok(Some(c.scatter_sched(CALL, tag, &blocks, Some(&rv), root)))
        })
    }

    /// [`Communicator::scatter`] in place: at the root `buf` is the whole
    /// send buffer (its own block stays); elsewhere it is the receive buffer.
    pub fn scatter_in_place<B: BufferMut + ?Sized>(&self, buf: &mut B, root: i32) -> Result<()> {
        const CALL: &str = "MPI_Scatter";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_blocks(CALL, &v, root)?;
        self.blocking(CALL, |c, _, tag| {
            Ok(Some(c.scatter_sched(
                CALL,
                tag,
                &blocks,
                (me != root).then_some(&v),
                root,
            )))
        })
    }

    /// Start an in-place scatter (`MPI_Iscatter` with `MPI_IN_PLACE` at the
    /// root): as [`Communicator::scatter_in_place`].
    pub fn iscatter_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iscatter";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_blocks(CALL, &v, root)?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.scatter_sched(CALL, tag, &blocks, (me != root).then_some(&v), root))
        })
    }

    /// Start a scatter (`MPI_Iscatter`).
    pub fn iscatter<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iscatter";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_scatter(CALL, tag, &sv, None, &rv, root)
            });
        }
        let (blocks, rv) = self.scatter_args(CALL, send.view(), recv.view_mut(), root)?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.scatter_sched(CALL, tag, &blocks, Some(&rv), root))
        })
    }

    /// Scatter with per-rank counts and displacements (elements of `send`'s
    /// type) (`MPI_Scatterv`). Non-roots may pass empty slices.
    pub fn scatterv<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        counts: &[i32],
        displs: &[i32],
        recv: &mut R,
        root: i32,
    ) -> Result<()> {
        const CALL: &str = "MPI_Scatterv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_scatter(CALL, tag, &sv, Some((counts, displs)), &rv, root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.rooted_vblocks(
            CALL,
            "the send buffer",
            &sv,
            counts,
            displs,
            root,
            Some(("the receive buffer", &rv)),
        )?;
        self.blocking(CALL, |c, _, tag| {
            Ok(Some(c.scatter_sched(CALL, tag, &blocks, Some(&rv), root)))
        })
    }

    /// Start a scatterv (`MPI_Iscatterv`).
    pub fn iscatterv<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        counts: &[i32],
        displs: &[i32],
        recv: &'a mut R,
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iscatterv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_scatter(CALL, tag, &sv, Some((counts, displs)), &rv, root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.rooted_vblocks(
            CALL,
            "the send buffer",
            &sv,
            counts,
            displs,
            root,
            Some(("the receive buffer", &rv)),
        )?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.scatter_sched(CALL, tag, &blocks, Some(&rv), root))
        })
    }

    /// [`Communicator::scatterv`] in place: at the root `buf` is the send
    /// buffer (its own block stays); elsewhere it is the receive buffer.
    pub fn scatterv_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Result<()> {
        const CALL: &str = "MPI_Scatterv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_vblocks(CALL, "the buffer", &v, counts, displs, root, None)?;
        self.blocking(CALL, |c, _, tag| {
            Ok(Some(c.scatter_sched(
                CALL,
                tag,
                &blocks,
                (me != root).then_some(&v),
                root,
            )))
        })
    }

    /// Start an in-place scatterv (`MPI_Iscatterv` with `MPI_IN_PLACE` at the
    /// root): as [`Communicator::scatterv_in_place`].
    pub fn iscatterv_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iscatterv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_vblocks(CALL, "the buffer", &v, counts, displs, root, None)?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.scatter_sched(CALL, tag, &blocks, (me != root).then_some(&v), root))
        })
    }

    // ---------------- allgather ----------------

    fn allgather_sched(
        &self,
        e: &Engine,
        call: &'static str,
        tag: i32,
        send: Option<&View>,
        blocks: &[View],
        equal: bool,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let total: usize = blocks.iter().map(View::bytes).sum();
        let large = e.cfg.allgather_large.unwrap_or(64 * KIB);
        let contiguous_out = equal && blocks.iter().all(|b| b.contig_addr().is_some());
        if equal && total < large && n > 1 {
            // Bruck into one contiguous output.
            tracing::debug!(target: "coll", "{call}: Bruck, {total} B over {n} ranks");
            let blk = blocks[0].bytes();
            let mine = match send {
                Some(v) => s.input(v),
                None => s.input(&blocks[me as usize]),
            };
            let out = if contiguous_out {
                let a = blocks[0].contig_addr().expect("contiguous");
                s.user(a, total, true)
            } else {
                s.temp(total)
            };
            algo::allgather_bruck(&mut s, n, me, mine, out, blk);
            if !contiguous_out {
                s.wait();
                for (i, b) in blocks.iter().enumerate() {
                    s.push(Step::Unpack {
                        src: out.sub(i * blk, blk),
                        view: b.clone(),
                        received: false,
                    });
                }
            }
        } else {
            tracing::debug!(target: "coll", "{call}: ring, {total} B over {n} ranks");
            let regions: Vec<Region> = blocks
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if i as i32 == me && send.is_none() {
                        st.inout(&mut s, b)
                    } else {
                        st.out(&mut s, b)
                    }
                })
                .collect();
            if let Some(v) = send {
                let i = s.input(v);
                s.copy(i, regions[me as usize]);
            }
            algo::allgather_ring(&mut s, n, me, &regions);
        }
        st.finish(&mut s);
        s
    }

    fn allgather_args(&self, call: &str, sv: Option<&View>, rv: &View) -> Result<Vec<View>> {
        let b = self.blocks_of(call, "the receive buffer", rv)?;
        if let Some(sv) = sv {
            self.same_bytes(
                call,
                ("the send buffer", sv.bytes()),
                ("each rank's block of the receive buffer", b[0].bytes()),
            )?;
        }
        Ok(b)
    }

    /// Gather every rank's `send` into every rank's `recv`, in rank order
    /// (`MPI_Allgather`).
    pub fn allgather<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        const CALL: &str = "MPI_Allgather";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self
                .inter_blocking(CALL, |c, tag| c.inter_allgather(CALL, tag, &sv, &rv, None));
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.allgather_args(CALL, Some(&sv), &rv)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, -1, None, Some(sv.bytes()))?;
            if c.shm_gather(e, CALL, tag, &sv, &blocks, None)? {
                return Ok(None);
            }
            Ok(Some(c.allgather_sched(
                e,
                CALL,
                tag,
                Some(&sv),
                &blocks,
                true,
            )))
        })
    }

    pub(crate) fn allgather_in<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        e: &mut Engine,
        call: &'static str,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.allgather_args(call, Some(&sv), &rv)?;
        let tag = self.next_tag();
        let mut s = self.allgather_sched(e, call, tag, Some(&sv), &blocks, true);
        e.drive(call, &mut s)
    }

    /// [`Communicator::allgather`] in place: this rank's block is already in
    /// `buf`.
    pub fn allgather_in_place<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<()> {
        const CALL: &str = "MPI_Allgather";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let blocks = self.allgather_args(CALL, None, &v)?;
        self.blocking(CALL, |c, e, tag| {
            Ok(Some(c.allgather_sched(e, CALL, tag, None, &blocks, true)))
        })
    }

    /// Start an in-place allgather (`MPI_Iallgather` with `MPI_IN_PLACE`):
    /// as [`Communicator::allgather_in_place`].
    pub fn iallgather_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iallgather";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let blocks = self.allgather_args(CALL, None, &v)?;
        self.nonblocking(CALL, |c, e, tag| {
            Ok(c.allgather_sched(e, CALL, tag, None, &blocks, true))
        })
    }

    /// Start an allgather (`MPI_Iallgather`).
    pub fn iallgather<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iallgather";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self
                .inter_nonblocking(CALL, |c, tag| c.inter_allgather(CALL, tag, &sv, &rv, None));
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.allgather_args(CALL, Some(&sv), &rv)?;
        self.nonblocking(CALL, |c, e, tag| {
            Ok(c.allgather_sched(e, CALL, tag, Some(&sv), &blocks, true))
        })
    }

    /// Allgather with per-rank counts and displacements (elements of `recv`'s
    /// type) (`MPI_Allgatherv`).
    pub fn allgatherv<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<()> {
        const CALL: &str = "MPI_Allgatherv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_allgather(CALL, tag, &sv, &rv, Some((counts, displs)))
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.allgatherv_args(CALL, Some(&sv), &rv, counts, displs)?;
        self.blocking(CALL, |c, e, tag| {
            Ok(Some(c.allgather_sched(
                e,
                CALL,
                tag,
                Some(&sv),
                &blocks,
                false,
            )))
        })
    }

    /// Start an allgatherv (`MPI_Iallgatherv`).
    pub fn iallgatherv<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iallgatherv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_allgather(CALL, tag, &sv, &rv, Some((counts, displs)))
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.allgatherv_args(CALL, Some(&sv), &rv, counts, displs)?;
        self.nonblocking(CALL, |c, e, tag| {
            Ok(c.allgather_sched(e, CALL, tag, Some(&sv), &blocks, false))
        })
    }

    /// The receive blocks of an allgatherv; with a send buffer (not in
    /// place), its size must match this rank's block.
    fn allgatherv_args(
        &self,
        call: &str,
        sv: Option<&View>,
        rv: &View,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<Vec<View>> {
        let Some(sv) = sv else {
            return self.vblocks(call, "the buffer", rv, counts, displs);
        };
        let blocks = self.vblocks(call, "the receive buffer", rv, counts, displs)?;
        self.same_bytes(
            call,
            ("the send buffer", sv.bytes()),
            (
                "this rank's block of the receive buffer",
                blocks[self.rank() as usize].bytes(),
            ),
        )?;
        Ok(blocks)
    }

    /// [`Communicator::allgatherv`] in place: this rank's block is already in
    /// `buf`.
    pub fn allgatherv_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<()> {
        const CALL: &str = "MPI_Allgatherv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let blocks = self.allgatherv_args(CALL, None, &v, counts, displs)?;
        self.blocking(CALL, |c, e, tag| {
            Ok(Some(c.allgather_sched(e, CALL, tag, None, &blocks, false)))
        })
    }

    /// Start an in-place allgatherv (`MPI_Iallgatherv` with `MPI_IN_PLACE`):
    /// as [`Communicator::allgatherv_in_place`].
    pub fn iallgatherv_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iallgatherv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let blocks = self.allgatherv_args(CALL, None, &v, counts, displs)?;
        self.nonblocking(CALL, |c, e, tag| {
            Ok(c.allgather_sched(e, CALL, tag, None, &blocks, false))
        })
    }

    // ---------------- alltoall ----------------

    /// An alltoall of `sblocks` into `rblocks`; `sblocks` is `None` in place:
    /// then each receive block is sent, packed into a temporary the
    /// schedule owns (so a request may outlive the call).
    fn alltoall_sched(
        &self,
        e: &Engine,
        call: &'static str,
        tag: i32,
        sblocks: Option<&[View]>,
        rblocks: &[View],
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let sr: Vec<Region> = match sblocks {
            Some(sb) => sb.iter().map(|b| s.input(b)).collect(),
            None => rblocks.iter().map(|b| s.temp_from(b.pack())).collect(),
        };
        let rr: Vec<Region> = rblocks.iter().map(|b| st.out(&mut s, b)).collect();
        let per_peer = sr.iter().map(|r| r.len).max().unwrap_or(0);
        let pairwise = per_peer >= e.cfg.alltoall_large.unwrap_or(8 * KIB);
        tracing::debug!(target: "coll", "{call}: {}, up to {per_peer} B per peer over {n} ranks", if pairwise { "pairwise exchange" } else { "all exchanges at once" });
        algo::alltoall(&mut s, n, me, &sr, &rr, pairwise);
        st.finish(&mut s);
        s
    }

    /// A small alltoall through the shared-memory area: every rank publishes
    /// its whole send buffer (`input`, `n` blocks; in place, the receive
    /// buffer before it is overwritten) and copies block `me` of every
    /// rank's into `rblocks`. One exchange instead of `2(n - 1)` messages.
    /// Returns whether it ran.
    fn shm_alltoall(
        &self,
        e: &mut Engine,
        call: &'static str,
        tag: i32,
        input: &View,
        rblocks: &[View],
    ) -> Result<bool> {
        if !input.is_host() || rblocks.iter().any(|b| !b.is_host()) {
            return Ok(false);
        }
        let total = input.bytes();
        let block = total / rblocks.len();
        let at = SHM_HDR + self.rank() as usize * block;
        let hdr = shm_header(4, -1, None, total);
        self.shm_exchange(
            e,
            call,
            tag,
            total,
            hdr,
            Some(input),
            format_args!("{block} B per peer"),
            |slots| {
                for (b, s) in rblocks.iter().zip(slots) {
                    b.unpack(&s[at..at + block]);
                }
            },
        )
    }

    fn alltoall_args(&self, call: &str, sv: &View, rv: &View) -> Result<(Vec<View>, Vec<View>)> {
        let sb = self.blocks_of(call, "the send buffer", sv)?;
        let rb = self.blocks_of(call, "the receive buffer", rv)?;
        self.same_bytes(
            call,
            ("each block of the send buffer", sb[0].bytes()),
            ("each block of the receive buffer", rb[0].bytes()),
        )?;
        Ok((sb, rb))
    }

    /// Block `i` of every rank's `send` goes to rank `i`, landing in block
    /// `j` of its `recv` for sender `j` (`MPI_Alltoall`).
    pub fn alltoall<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        const CALL: &str = "MPI_Alltoall";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| c.inter_alltoall(CALL, tag, &sv, &rv));
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (sb, rb) = self.alltoall_args(CALL, &sv, &rv)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, -1, None, Some(sv.bytes()))?;
            if c.shm_alltoall(e, CALL, tag, &sv, &rb)? {
                return Ok(None);
            }
            Ok(Some(c.alltoall_sched(e, CALL, tag, Some(&sb), &rb)))
        })
    }

    /// [`Communicator::alltoall`] in place: `buf` is sent and overwritten.
    pub fn alltoall_in_place<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<()> {
        const CALL: &str = "MPI_Alltoall";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let rb = self.blocks_of(CALL, "the buffer", &v)?;
        self.blocking(CALL, |c, e, tag| {
            if c.shm_alltoall(e, CALL, tag, &v, &rb)? {
                return Ok(None);
            }
            Ok(Some(c.alltoall_sched(e, CALL, tag, None, &rb)))
        })
    }

    /// Start an alltoall (`MPI_Ialltoall`).
    pub fn ialltoall<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ialltoall";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| c.inter_alltoall(CALL, tag, &sv, &rv));
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (sb, rb) = self.alltoall_args(CALL, &sv, &rv)?;
        self.nonblocking(CALL, |c, e, tag| {
            Ok(c.alltoall_sched(e, CALL, tag, Some(&sb), &rb))
        })
    }

    /// Start an in-place alltoall (`MPI_Ialltoall` with `MPI_IN_PLACE`): as
    /// [`Communicator::alltoall_in_place`]; the data to send is copied when
    /// the call starts.
    pub fn ialltoall_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ialltoall";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let rb = self.blocks_of(CALL, "the buffer", &v)?;
        self.nonblocking(CALL, |c, e, tag| {
            Ok(c.alltoall_sched(e, CALL, tag, None, &rb))
        })
    }

    /// The blocks of an alltoallv, checked.
    #[allow(clippy::too_many_arguments)]
    fn alltoallv_args(
        &self,
        call: &str,
        sv: &View,
        scounts: &[i32],
        sdispls: &[i32],
        rv: &View,
        rcounts: &[i32],
        rdispls: &[i32],
    ) -> Result<(Vec<View>, Vec<View>)> {
        let sb = self.vblocks(call, "the send buffer", sv, scounts, sdispls)?;
        let rb = self.vblocks(call, "the receive buffer", rv, rcounts, rdispls)?;
        let me = self.rank() as usize;
        self.same_bytes(
            call,
            (
                "this rank's block to itself in the send buffer",
                sb[me].bytes(),
            ),
            (
                "its block from itself in the receive buffer",
                rb[me].bytes(),
            ),
        )?;
        Ok((sb, rb))
    }

    /// Alltoall with per-peer counts and displacements (elements of each
    /// buffer's type) (`MPI_Alltoallv`).
    #[allow(clippy::too_many_arguments)]
    pub fn alltoallv<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        scounts: &[i32],
        sdispls: &[i32],
        recv: &mut R,
        rcounts: &[i32],
        rdispls: &[i32],
    ) -> Result<()> {
        const CALL: &str = "MPI_Alltoallv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_alltoallv(CALL, tag, &sv, scounts, sdispls, &rv, rcounts, rdispls)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (sb, rb) = self.alltoallv_args(CALL, &sv, scounts, sdispls, &rv, rcounts, rdispls)?;
        self.blocking(CALL, |c, e, tag| {
            Ok(Some(c.alltoall_sched(e, CALL, tag, Some(&sb), &rb)))
        })
    }

    /// Start an alltoallv (`MPI_Ialltoallv`).
    #[allow(clippy::too_many_arguments)]
    pub fn ialltoallv<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        scounts: &[i32],
        sdispls: &[i32],
        recv: &'a mut R,
        rcounts: &[i32],
        rdispls: &[i32],
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ialltoallv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_alltoallv(CALL, tag, &sv, scounts, sdispls, &rv, rcounts, rdispls)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (sb, rb) = self.alltoallv_args(CALL, &sv, scounts, sdispls, &rv, rcounts, rdispls)?;
        self.nonblocking(CALL, |c, e, tag| {
            Ok(c.alltoall_sched(e, CALL, tag, Some(&sb), &rb))
        })
    }

    /// [`Communicator::alltoallv`] in place: `buf` is sent and overwritten,
    /// with the same counts and displacements for both directions.
    pub fn alltoallv_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<()> {
        const CALL: &str = "MPI_Alltoallv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let rb = self.vblocks(CALL, "the buffer", &v, counts, displs)?;
        self.blocking(CALL, |c, e, tag| {
            Ok(Some(c.alltoall_sched(e, CALL, tag, None, &rb)))
        })
    }

    /// Start an in-place alltoallv (`MPI_Ialltoallv` with `MPI_IN_PLACE`): as
    /// [`Communicator::alltoallv_in_place`]; the data to send is copied when
    /// the call starts.
    pub fn ialltoallv_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ialltoallv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let rb = self.vblocks(CALL, "the buffer", &v, counts, displs)?;
        self.nonblocking(CALL, |c, e, tag| {
            Ok(c.alltoall_sched(e, CALL, tag, None, &rb))
        })
    }

    /// The blocks of an alltoallw, checked.
    #[allow(clippy::too_many_arguments)]
    fn alltoallw_args(
        &self,
        call: &str,
        sv: &View,
        scounts: &[i32],
        sdispls: &[isize],
        stypes: &[UserDatatype],
        rv: &View,
        rcounts: &[i32],
        rdispls: &[isize],
        rtypes: &[UserDatatype],
    ) -> Result<(Vec<View>, Vec<View>)> {
        let sb = self.wblocks(call, "the send buffer", sv, scounts, sdispls, stypes)?;
        let rb = self.wblocks(call, "the receive buffer", rv, rcounts, rdispls, rtypes)?;
        let me = self.rank() as usize;
        self.same_bytes(
            call,
            ("this rank's block to itself", sb[me].bytes()),
            ("its block from itself", rb[me].bytes()),
        )?;
        Ok((sb, rb))
    }

    /// The most general alltoall (`MPI_Alltoallw`): per-peer counts, byte
    /// displacements and datatypes on both sides. `send` and `recv` are the
    /// memory the displacements are relative to.
    #[allow(clippy::too_many_arguments)]
    pub fn alltoallw<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        scounts: &[i32],
        sdispls: &[isize],
        stypes: &[UserDatatype],
        recv: &mut R,
        rcounts: &[i32],
        rdispls: &[isize],
        rtypes: &[UserDatatype],
    ) -> Result<()> {
        const CALL: &str = "MPI_Alltoallw";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_alltoallw(
                    CALL,
                    tag,
                    &sv,
                    (scounts, sdispls, stypes),
                    &rv,
                    (rcounts, rdispls, rtypes),
                )
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (sb, rb) = self.alltoallw_args(
            CALL, &sv, scounts, sdispls, stypes, &rv, rcounts, rdispls, rtypes,
        )?;
        self.blocking(CALL, |c, e, tag| {
            Ok(Some(c.alltoall_sched(e, CALL, tag, Some(&sb), &rb)))
        })
    }

    /// Start an alltoallw (`MPI_Ialltoallw`).
    #[allow(clippy::too_many_arguments)]
    pub fn ialltoallw<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        scounts: &[i32],
        sdispls: &[isize],
        stypes: &[UserDatatype],
        recv: &'a mut R,
        rcounts: &[i32],
        rdispls: &[isize],
        rtypes: &[UserDatatype],
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ialltoallw";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_alltoallw(
                    CALL,
                    tag,
                    &sv,
                    (scounts, sdispls, stypes),
                    &rv,
                    (rcounts, rdispls, rtypes),
                )
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (sb, rb) = self.alltoallw_args(
            CALL, &sv, scounts, sdispls, stypes, &rv, rcounts, rdispls, rtypes,
        )?;
        self.nonblocking(CALL, |c, e, tag| {
            Ok(c.alltoall_sched(e, CALL, tag, Some(&sb), &rb))
        })
    }

    /// [`Communicator::alltoallw`] in place: `buf` is sent and overwritten,
    /// with the same counts, byte displacements and datatypes for both
    /// directions.
    pub fn alltoallw_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        counts: &[i32],
        displs: &[isize],
        types: &[UserDatatype],
    ) -> Result<()> {
        const CALL: &str = "MPI_Alltoallw";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let rb = self.wblocks(CALL, "the buffer", &v, counts, displs, types)?;
        self.blocking(CALL, |c, e, tag| {
            Ok(Some(c.alltoall_sched(e, CALL, tag, None, &rb)))
        })
    }

    /// Start an in-place alltoallw (`MPI_Ialltoallw` with `MPI_IN_PLACE`): as
    /// [`Communicator::alltoallw_in_place`]; the data to send is copied when
    /// the call starts.
    pub fn ialltoallw_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        counts: &[i32],
        displs: &[isize],
        types: &[UserDatatype],
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ialltoallw";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let rb = self.wblocks(CALL, "the buffer", &v, counts, displs, types)?;
        self.nonblocking(CALL, |c, e, tag| {
            Ok(c.alltoall_sched(e, CALL, tag, None, &rb))
        })
    }

    fn wblocks(
        &self,
        call: &str,
        what: &str,
        v: &View,
        counts: &[i32],
        displs: &[isize],
        types: &[UserDatatype],
    ) -> Result<Vec<View>> {
        let n = self.inner.peers().len();
        if counts.len() != n || displs.len() != n || types.len() != n {
            return Err(self.err(
                ErrorClass::Arg,
                call,
                format!(
                    "{what}: {} counts, {} displacements and {} datatypes for {n} ranks",
                    counts.len(),
                    displs.len(),
                    types.len()
                ),
            ));
        }
        (0..n)
            .map(|i| {
                if counts[i] < 0 {
                    return Err(self.err(ErrorClass::Count, call, format!("{what}: count[{i}] = {} is negative", counts[i])));
                }
                if !types[i].is_committed() {
                    return Err(self.err(ErrorClass::Type, call, format!("{what}: datatype[{i}] is not committed")));
                }
                // Displacements are relative to the buffer's start.
                let base = View { origin: 0, ..v.clone() };
                base.at_byte(displs[i], counts[i] as usize, Ty::Derived(types[i].clone())).ok_or_else(|| {
                    self.err(ErrorClass::Buffer, call, format!("{what}: block {i} ({} elements at byte {}) reaches outside the buffer", counts[i], displs[i]))
                })
            })
            .collect()
    }

    // ---------------- reduce_scatter ----------------

    #[allow(clippy::too_many_arguments)]
    fn reduce_scatter_sched(
        &self,
        call: &'static str,
        tag: i32,
        send: Option<&View>,
        recv: &View,
        counts: &[usize],
        op: &Op,
        red: Reduction,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let unit = red.unit;
        s.red = Some(red);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let total: usize = counts.iter().sum::<usize>() * unit;
        // The whole contribution in a writable accumulator.
        let (acc, out) = match send {
            Some(sv) => {
                let i = s.input(sv);
                let t = s.temp(total);
                s.copy(i, t);
                (t, st.out(&mut s, recv))
            }
            None => {
                // In place: `recv` holds the whole input; the result lands in
                // its first block and the rest stays as it was (as MPICH
                // leaves it), so accumulate in a copy.
                let io = st.inout(&mut s, recv);
                let t = s.temp(total);
                s.copy(io, t);
                (t, io.sub(0, counts[me as usize] * unit))
            }
        };
        let mut off = 0;
        let blocks: Vec<Region> = counts
            .iter()
            .map(|&c| {
                let r = acc.sub(off, c * unit);
                off += c * unit;
                r
            })
            .collect();
        if n > 1 && op.is_commutative() {
            tracing::debug!(target: "coll", "{call}: ring reduce-scatter, {total} B over {n} ranks");
            let tmp = s.temp(counts.iter().max().copied().unwrap_or(0) * unit);
            algo::reduce_scatter_ring(&mut s, n, me, &blocks, tmp);
            let tmp2 = s.temp(blocks[me as usize].len);
            // `out` may overlap `acc` (in place): go through a temporary.
            s.copy(blocks[me as usize], tmp2);
            s.copy(tmp2, out);
        } else if n > 1 {
            tracing::debug!(target: "coll", "{call}: reduce in rank order to rank 0, then scatter, {total} B over {n} ranks");
            let tmp = s.temp(total);
            let res = algo::reduce_binomial(&mut s, n, me, 0, acc, acc, tmp, false);
            let rblocks: Vec<Region> = if me == 0 {
                let mut off = 0;
                counts
                    .iter()
                    .map(|&c| {
                        let r = res.sub(off, c * unit);
                        off += c * unit;
                        r
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let mine = s.temp(counts[me as usize] * unit);
            algo::scatter_linear(&mut s, n, me, 0, &rblocks, Some(mine));
            s.copy(mine, out);
        } else {
            let t = s.temp(out.len);
            s.copy(blocks[0], t);
            s.copy(t, out);
        }
        st.finish(&mut s);
        s
    }

    fn reduce_scatter_args(
        &self,
        call: &str,
        send: Option<&View>,
        recv: &View,
        counts: &[i32],
        op: &Op,
    ) -> Result<(Vec<usize>, Reduction)> {
        let n = self.size() as usize;
        if counts.len() != n {
            return Err(self.err(
                ErrorClass::Arg,
                call,
                format!("{} counts for {n} ranks", counts.len()),
            ));
        }
        if let Some((i, c)) = counts.iter().enumerate().find(|(_, &c)| c < 0) {
            return Err(self.err(
                ErrorClass::Count,
                call,
                format!("count[{i}] = {c} is negative"),
            ));
        }
        let input = send.unwrap_or(recv);
        let red = reduction(call, self.rank(), op, &input.ty)?;
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        // Counts are in elements of the input's type.
        let elem = input.ty.size();
        self.same_bytes(
            call,
            ("the input", input.bytes()),
            ("the sum of the counts", total * elem),
        )?;
        let me = self.rank() as usize;
        if send.is_some() {
            self.same_bytes(
                call,
                ("the receive buffer", recv.bytes()),
                ("this rank's count", counts[me] as usize * elem),
            )?;
        }
        // Counts in reduction units.
        let per = elem / red.unit.max(1);
        Ok((counts.iter().map(|&c| c as usize * per).collect(), red))
    }

    /// Reduce every rank's `send` (`size` blocks of `recv.len()` elements)
    /// with `op`; rank `i` gets block `i` of the result in `recv`
    /// (`MPI_Reduce_scatter_block`).
    pub fn reduce_scatter_block<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: impl Into<Op>,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Reduce_scatter_block";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_reduce_scatter_block(CALL, tag, &sv, &rv, &op)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (counts, red) = self.reduce_scatter_block_args(CALL, Some(&sv), &rv, &op)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, -1, Some(&op), Some(sv.bytes()))?;
            Ok(Some(c.reduce_scatter_sched(
                CALL,
                tag,
                Some(&sv),
                &rv,
                &counts,
                &op,
                red,
            )))
        })
    }

    /// [`Communicator::reduce_scatter_block`] in place: `buf` holds the
    /// `size` blocks of input; this rank's block of the result lands in its
    /// first block.
    pub fn reduce_scatter_block_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        op: impl Into<Op>,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Reduce_scatter_block";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let (counts, red) = self.reduce_scatter_block_args(CALL, None, &v, &op)?;
        self.blocking(CALL, |c, _, tag| {
            Ok(Some(c.reduce_scatter_sched(
                CALL, tag, None, &v, &counts, &op, red,
            )))
        })
    }

    /// The counts (in reduction units) and reduction of a reduce-scatter
    /// with equal blocks; `send` is `None` in place (then `recv` holds all
    /// `size` blocks).
    fn reduce_scatter_block_args(
        &self,
        call: &str,
        send: Option<&View>,
        recv: &View,
        op: &Op,
    ) -> Result<(Vec<usize>, Reduction)> {
        let n = self.size() as usize;
        let counts = match send {
            Some(sv) => {
                vec![recv.count as i32 * (recv.ty.size() / sv.ty.size().max(1)).max(1) as i32; n]
            }
            None => {
                if !recv.count.is_multiple_of(n) {
                    return Err(self.err(
                        ErrorClass::Count,
                        call,
                        format!(
                            "the buffer has {} elements, not a multiple of the communicator size {n}",
                            recv.count
                        ),
                    ));
                }
                vec![(recv.count / n) as i32; n]
            }
        };
        self.reduce_scatter_args(call, send, recv, &counts, op)
    }

    /// Start a reduce-scatter with equal blocks (`MPI_Ireduce_scatter_block`).
    pub fn ireduce_scatter_block<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Ireduce_scatter_block";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_reduce_scatter_block(CALL, tag, &sv, &rv, &op)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (counts, red) = self.reduce_scatter_block_args(CALL, Some(&sv), &rv, &op)?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.reduce_scatter_sched(CALL, tag, Some(&sv), &rv, &counts, &op, red))
        })
    }

    /// Start an in-place reduce-scatter with equal blocks
    /// (`MPI_Ireduce_scatter_block` with `MPI_IN_PLACE`): as
    /// [`Communicator::reduce_scatter_block_in_place`].
    pub fn ireduce_scatter_block_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Ireduce_scatter_block";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let (counts, red) = self.reduce_scatter_block_args(CALL, None, &v, &op)?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.reduce_scatter_sched(CALL, tag, None, &v, &counts, &op, red))
        })
    }

    /// Reduce, then scatter blocks of `counts[i]` elements to rank `i`
    /// (`MPI_Reduce_scatter`).
    pub fn reduce_scatter<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        counts: &[i32],
        op: impl Into<Op>,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Reduce_scatter";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_reduce_scatter(CALL, tag, &sv, &rv, counts, &op)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (counts, red) = self.reduce_scatter_args(CALL, Some(&sv), &rv, counts, &op)?;
        self.blocking(CALL, |c, _, tag| {
            Ok(Some(c.reduce_scatter_sched(
                CALL,
                tag,
                Some(&sv),
                &rv,
                &counts,
                &op,
                red,
            )))
        })
    }

    /// [`Communicator::reduce_scatter`] in place: `buf` holds the whole input;
    /// this rank's block of the result lands at its start.
    pub fn reduce_scatter_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        counts: &[i32],
        op: impl Into<Op>,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Reduce_scatter";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let (counts, red) = self.reduce_scatter_args(CALL, None, &v, counts, &op)?;
        self.blocking(CALL, |c, _, tag| {
            Ok(Some(c.reduce_scatter_sched(
                CALL, tag, None, &v, &counts, &op, red,
            )))
        })
    }

    /// Start a reduce-scatter (`MPI_Ireduce_scatter`).
    pub fn ireduce_scatter<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        counts: &[i32],
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Ireduce_scatter";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_reduce_scatter(CALL, tag, &sv, &rv, counts, &op)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (counts, red) = self.reduce_scatter_args(CALL, Some(&sv), &rv, counts, &op)?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.reduce_scatter_sched(CALL, tag, Some(&sv), &rv, &counts, &op, red))
        })
    }

    /// Start an in-place reduce-scatter (`MPI_Ireduce_scatter` with
    /// `MPI_IN_PLACE`): as [`Communicator::reduce_scatter_in_place`].
    pub fn ireduce_scatter_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        counts: &[i32],
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Ireduce_scatter";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let (counts, red) = self.reduce_scatter_args(CALL, None, &v, counts, &op)?;
        self.nonblocking(CALL, |c, _, tag| {
            Ok(c.reduce_scatter_sched(CALL, tag, None, &v, &counts, &op, red))
        })
    }

    // ---------------- scan ----------------

    #[allow(clippy::too_many_arguments)]
    fn scan_sched(
        &self,
        call: &'static str,
        tag: i32,
        send: Option<&View>,
        recv: &View,
        red: Reduction,
        exclusive: bool,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        s.red = Some(red);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let bytes = recv.bytes();
        let (input, result) = match send {
            Some(sv) => {
                let i = s.input(sv);
                // Exscan leaves rank 0's receive buffer alone.
                let r = if exclusive && me == 0 {
                    s.temp(bytes)
                } else {
                    st.out(&mut s, recv)
                };
                (i, r)
            }
            None => {
                let io = st.inout(&mut s, recv);
                let t = s.temp(bytes);
                s.copy(io, t);
                (t, io)
            }
        };
        let partial = s.temp(bytes);
        s.copy(input, partial);
        if !exclusive && send.is_some() {
            s.copy(input, result);
        }
        if n > 1 {
            tracing::debug!(target: "coll", "{call}: recursive doubling, {bytes} B over {n} ranks");
            let tmp = s.temp(bytes);
            algo::scan(&mut s, n, me, result, partial, tmp, exclusive);
        }
        st.finish(&mut s);
        s
    }

    /// A blocking scan or exscan (`send` is `None` in place).
    fn scan_blocking(
        &self,
        call: &'static str,
        send: Option<&View>,
        recv: &View,
        op: Op,
        exclusive: bool,
    ) -> Result<()> {
        self.check_intra(call, "a scan")?;
        let red = self.allreduce_checked(call, send, recv, &op)?;
        self.blocking(call, |c, _, tag| {
            Ok(Some(c.scan_sched(call, tag, send, recv, red, exclusive)))
        })
    }

    /// Start a scan or exscan (`send` is `None` in place).
    fn scan_nonblocking<'a>(
        &self,
        call: &'static str,
        send: Option<&View>,
        recv: &View,
        op: Op,
        exclusive: bool,
    ) -> Result<Request<'a>> {
        self.check_intra(call, "a scan")?;
        let red = self.allreduce_checked(call, send, recv, &op)?;
        self.nonblocking(call, |c, _, tag| {
            Ok(c.scan_sched(call, tag, send, recv, red, exclusive))
        })
    }

    /// Inclusive prefix reduction: rank `i` gets `send₀ ∘ … ∘ sendᵢ`
    /// (`MPI_Scan`).
    pub fn scan<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: impl Into<Op>,
    ) -> Result<()> {
        let (sv, rv) = (send.view(), recv.view_mut());
        self.scan_blocking("MPI_Scan", Some(&sv), &rv, op.into(), false)
    }

    /// [`Communicator::scan`] in place.
    pub fn scan_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        op: impl Into<Op>,
    ) -> Result<()> {
        self.scan_blocking("MPI_Scan", None, &buf.view_mut(), op.into(), false)
    }

    /// Start an inclusive scan (`MPI_Iscan`).
    pub fn iscan<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let (sv, rv) = (send.view(), recv.view_mut());
        self.scan_nonblocking("MPI_Iscan", Some(&sv), &rv, op.into(), false)
    }

    /// Start an in-place inclusive scan (`MPI_Iscan` with `MPI_IN_PLACE`).
    pub fn iscan_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        self.scan_nonblocking("MPI_Iscan", None, &buf.view_mut(), op.into(), false)
    }

    /// Exclusive prefix reduction: rank `i > 0` gets `send₀ ∘ … ∘ sendᵢ₋₁`;
    /// rank 0's `recv` is left untouched (`MPI_Exscan`).
    pub fn exscan<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: impl Into<Op>,
    ) -> Result<()> {
        let (sv, rv) = (send.view(), recv.view_mut());
        self.scan_blocking("MPI_Exscan", Some(&sv), &rv, op.into(), true)
    }

    /// [`Communicator::exscan`] in place.
    pub fn exscan_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        op: impl Into<Op>,
    ) -> Result<()> {
        self.scan_blocking("MPI_Exscan", None, &buf.view_mut(), op.into(), true)
    }

    /// Start an exclusive scan (`MPI_Iexscan`).
    pub fn iexscan<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let (sv, rv) = (send.view(), recv.view_mut());
        self.scan_nonblocking("MPI_Iexscan", Some(&sv), &rv, op.into(), true)
    }

    /// Start an in-place exclusive scan (`MPI_Iexscan` with `MPI_IN_PLACE`).
    pub fn iexscan_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        self.scan_nonblocking("MPI_Iexscan", None, &buf.view_mut(), op.into(), true)
    }
}

/// Combine `inbuf` into `inout` element by element, `inout = inbuf ∘ inout`
/// (`MPI_Reduce_local`): no communication.
pub fn reduce_local<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    inbuf: &S,
    inout: &mut R,
    op: impl Into<Op>,
) -> Result<()> {
    const CALL: &str = "MPI_Reduce_local";
    let op: Op = op.into();
    let (iv, ov) = (inbuf.view(), inout.view_mut());
    if iv.bytes() != ov.bytes() {
        return Err(Error::new(
            ErrorClass::Count,
            CALL,
            -1,
            format!(
                "inbuf holds {} bytes but inoutbuf {}",
                iv.bytes(),
                ov.bytes()
            ),
        ));
    }
    let red = reduction(CALL, -1, &op, &ov.ty)?;
    let a = iv.pack();
    let mut b = ov.pack();
    let cnt = b.len() / red.unit;
    crate::op::apply_datatype(&red.op, red.dt, cnt, &a, &mut b);
    ov.unpack(&b);
    Ok(())
}
