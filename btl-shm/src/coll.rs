//! A shared-memory collective area: barrier, small exchanges (allreduce,
//! allgather, gather), one-way gathers to a root (reduce) and small
//! broadcasts among the ranks of *one*
//! communicator whose members all live on one node, through a dedicated
//! segment instead of point-to-point messages.
//!
//! # Layout
//!
//! ```text
//! offset 0                         header (one 128-byte line): magic u64, version u32,
//!                                  n u32, slot_bytes u64, depth u64, total u64, state u32
//! 128 + 128*r                      control line of rank r (written by r only):
//!                                    +0  arrived  u64   last barrier epoch r entered
//!                                    +8  consumed u64   last epoch whose slots r has read
//!                                    +16 present  u64   set once at bootstrap (bit 1:
//!                                                       r can read its peers by CMA)
//!                                    +24 reading  u64   last epoch r entered as a
//!                                                       reader of a root's slot
//! data + (r*depth + i)*stride      slot i of rank r (written by r only), i = epoch % depth:
//!                                    +0  len u64, +8 epoch tag u64, +16 slot_bytes of data
//! ```
//!
//! `stride` is `16 + slot_bytes` rounded up to 128 bytes; words written by
//! different ranks never share a 128-byte (adjacent-line prefetch) pair. An
//! exchange or bcast publishes through the slot's epoch tag rather than
//! `arrived`, so a reader of a small contribution pulls exactly one line
//! per peer (tag, length and data together), and the `consumed` stores land
//! in a line nobody polls during a run of exchanges.
//!
//! # Protocol
//!
//! Every operation (barrier, exchange, bcast) increments each rank's private
//! epoch `e` (the same sequence on every rank, since the operations are
//! collective and issued in the same order). Epochs are `u64` and never wrap.
//!
//! - **barrier**: store `consumed = e` (nothing to read), `arrived = e`
//!   (Release), then wait until every rank's `arrived >= e` (Acquire loads).
//!   Flat: each rank polls `n - 1` lines, O(n²) line transfers per barrier in
//!   all; fine for the node-local sizes this is meant for (tested up to 7
//!   threads); a tree or dissemination barrier would serve large `n` better.
//! - **exchange**: *reserve* slot `e % depth`, write `len` and the data, store
//!   the slot's tag `= e` (Release), wait until every rank's tag for that
//!   slot is `>= e` (Acquire), run `f` over the `n` slots, store
//!   `consumed = e` (Release).
//! - **non-blocking exchange** (`nb_start`, then `nb_try_finish` or
//!   `nb_finish`): an exchange split in two. The start takes the epoch and
//!   publishes at once if no earlier non-blocking exchange is pending and
//!   the reserve holds without waiting; otherwise the contribution is
//!   copied and published later, in epoch order, by the calls that finish
//!   the exchanges before it (reserving then). The finish waits (or, in
//!   `nb_try_finish`, only looks) until every rank's tag for that slot is
//!   `>= e`, runs `f` and stores `consumed = e`, oldest first. A rank thus
//!   still publishes epoch `e` only after finishing `e - 1`, which the
//!   `done_all` shortcut below relies on, and a start never waits (MPI's
//!   non-blocking collectives are local). Blocking operations refuse to
//!   start while non-blocking ones are pending (the caller finishes them
//!   first, which may wait: every rank started them before this operation).
//!   The runtime gives non-blocking collectives an area of their own
//!   (MPI programs order them apart from blocking ones: mpi4py's
//!   `test_ulfm` starts an `MPI_Iallreduce` on one rank before a barrier
//!   the others enter first), so the two never share epochs.
//! - **bcast**: the root reserves and writes its slot (tag `= e`, Release),
//!   stores `consumed = e` and returns without waiting. The others store
//!   `reading = e`, wait for the root's tag `>= e` (Acquire), copy its slot
//!   out and store `consumed = e` (Release).
//! - **gather** (one-way, for reduce): every rank reserves and publishes its
//!   slot as in an exchange; the others store `consumed = e` and return at
//!   once, the root waits for every slot, reads them and stores `consumed`.
//! - **absent ranks**: a rank that waits for another's slot of epoch `e`
//!   also watches (every `ABSENT_EVERY` polls) that rank's `consumed` and
//!   `reading`: if either reaches `e`
//!   while the slot's tag stays below `e`, the rank did something at epoch `e`
//!   that publishes nothing there (a barrier, or a bcast it reads as a
//!   non-root: it named another root, or called another collective). The
//!   waiter then stops waiting for it and sees its contribution as empty, so
//!   callers that check headers report the mismatch instead of hanging. (The
//!   loads are ordered: `consumed`/`reading` first, Acquire, then the tag; a
//!   rank that published at `e` did so before either store, so its tag is
//!   then seen.)
//! - **reserve** (before writing the slot of epoch `e`): every rank's
//!   `consumed >= e - depth`, i.e. nobody still reads the slot's previous
//!   epoch. The answer is cached: a completed wait in which every rank was
//!   seen to have entered epoch `e` proves `consumed >= e - 1` everywhere (a
//!   rank publishes epoch `e` only after finishing `e - 1`), so runs of
//!   exchanges and barriers never load the `consumed` words; only a bcast
//!   root that runs ahead does. One that has to wait waits until the
//!   slowest rank is half the area behind (or has finished `e - 1`), so
//!   that it then runs `depth / 2` epochs without looking again.
//!
//! Every operation stores `consumed = e` as soon as it has read what it
//! needs, without waiting for anything else, so a reserve never waits for a
//! rank that is itself blocked in a later operation: no deadlock for any
//! `depth >= 1`.
//!
//! - **wait_read** (single copy): a contribution may say where its owner's
//!   data lies (the caller's format) instead of holding it, and its readers
//!   copy from there (CMA) inside `f`, before their `consumed = e`. The
//!   owner then waits, without starting an epoch, until its readers'
//!   `consumed >= e` (every other rank, or a gather's root) before it lets
//!   go of the memory. Every operation stores `consumed`, so this never
//!   waits for a rank that called something else at `e`.
//!
//! # Memory ordering
//!
//! Each word has a single writer and only grows (a slot's tag takes the
//! epochs `i, i + depth, ...`), so an Acquire load that returns `v`
//! synchronises with the writer's Release store of `v` (or of a later value,
//! which follows it in the writer's program order).
//! - *Data visibility*: the writer's slot writes (data, `len`) are sequenced
//!   before its Release store of the tag `e`; a reader's Acquire load seeing
//!   the tag `>= e` therefore happens after them, and so do its reads of the
//!   slot.
//! - *No overwrite while read*: a reader's reads of slot `e % depth` are
//!   sequenced before its Release store `consumed = e` (and before anything
//!   it publishes for later epochs); the writer overwrites that slot only for
//!   epoch `e + depth`, after an Acquire load of `consumed >= e` — or of an
//!   `arrived`/tag `>= e + 1`, see reserve — from every rank. So the reads of
//!   epoch `e` happen before the writes of epoch `e + depth`: no data race.
//!   In particular a tag never exceeds `e` while a reader waits for `e`.
//! - A rank may run ahead by up to `depth - 1` operations (bcast roots) and
//!   write a *different* slot meanwhile; readers of epoch `e` only ever look
//!   at slot `e % depth`.
//! - The barrier is the same argument with `arrived` and no data.
//!
//! Values read from shared memory are bounded before use (`len` is clamped to
//! `slot_bytes`), so a corrupt or hostile peer can garble results, never make
//! us access memory outside the area. Bootstrap mirrors
//! [`crate::ShmBtl::bootstrap`]: see [`ShmColl::bootstrap`].

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use gmpi_btl::BtlError;

use crate::segment::Mapping;

/// Control and slot alignment: two 64-byte lines (adjacent-line prefetch).
const LINE: usize = 128;
const MAGIC: u64 = u64::from_le_bytes(*b"gmpicol1");
const VERSION: u32 = 1;

const HDR_MAGIC: usize = 0;
const HDR_VERSION: usize = 8;
const HDR_N: usize = 12;
const HDR_SLOT_BYTES: usize = 16;
const HDR_DEPTH: usize = 24;
const HDR_TOTAL: usize = 32;
const HDR_STATE: usize = 40;
const STATE_READY: u32 = 1;
/// Written by a rank 0 that found a stale file of the same name.
const STATE_POISONED: u32 = 0xdead;

const CTRL_ARRIVED: usize = 0;
const CTRL_CONSUMED: usize = 8;
const CTRL_PRESENT: usize = 16;
/// Set in a rank's `present` word: it can read its peers by CMA.
const PRESENT_CMA: u64 = 2;
const CTRL_READING: usize = 24;

const SLOT_LEN: usize = 0;
const SLOT_EPOCH: usize = 8;
const SLOT_DATA: usize = 16;

/// Largest accepted `slot_bytes`.
const MAX_SLOT_BYTES: usize = 1 << 30;
/// Largest accepted `depth`.
const MAX_DEPTH: usize = 1024;
/// Up to this many ranks, [`ShmColl::exchange`] lists the slots on the stack.
const STACK_RANKS: usize = 16;
/// The largest area faulted in at bootstrap (256 slots of the default 16 KiB
/// `coll_shm_max` are about 4 MiB; a larger configured slot pays its faults
/// on first use instead).
const PREFAULT_MAX: usize = 16 << 20;

/// The most bytes of areas one process faults in at bootstrap: the first
/// communicators' (`MPI_COMM_WORLD`'s two areas first); a program that
/// makes hundreds of communicators pays for the pages its collectives touch
/// only, as before, instead of megabytes of shared memory each.
const PREFAULT_BUDGET: usize = 64 << 20;

/// Bytes of areas faulted in so far by this process (never given back).
static PREFAULTED: AtomicUsize = AtomicUsize::new(0);

/// Whether an area of `total` bytes is faulted in at bootstrap (then
/// counted against [`PREFAULT_BUDGET`]).
fn prefault_budget(total: usize) -> bool {
    total <= PREFAULT_MAX
        && PREFAULTED
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                (used + total <= PREFAULT_BUDGET).then_some(used + total)
            })
            .is_ok()
}

/// A waiter looks for an absent rank (see the module header) once every
/// this many unsuccessful polls: the check loads the rank's control line,
/// which it writes at the end of every operation, and a normal wait ends
/// long before (a mismatch is found a little later instead).
const ABSENT_EVERY: u32 = 64;

/// Which word announces that a rank entered an epoch.
#[derive(Clone, Copy)]
enum SlotOrCtrl {
    /// `arrived` in its control line (barrier).
    Ctrl,
    /// The epoch tag of its slot (exchange).
    Slot,
}

/// Configuration of a [`ShmColl`] area. Every participant must use the same
/// values (checked at bootstrap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollConfig {
    /// Largest contribution of one rank to an exchange, and largest
    /// broadcast (default 16 KiB, at most 1 GiB).
    pub slot_bytes: usize,
    /// Epochs buffered per rank (default 2, at least 1, at most 1024): how
    /// far a broadcast root may run ahead of the slowest reader.
    pub depth: usize,
    /// Whether this rank can read its peers' memory by Cross Memory Attach
    /// (the shm transport's probe). Not checked against the others: the
    /// area's [`single_copy`](ShmColl::single_copy) says whether every rank
    /// can (default `false`).
    pub single_copy: bool,
}

impl Default for CollConfig {
    fn default() -> Self {
        Self {
            slot_bytes: 16 << 10,
            depth: 2,
            single_copy: false,
        }
    }
}

/// Where everything lives in the area (pure arithmetic).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layout {
    n: usize,
    slot_bytes: usize,
    depth: usize,
    stride: usize,
    data_off: usize,
    total: usize,
}

impl Layout {
    fn new(n: usize, cfg: &CollConfig) -> Result<Self, String> {
        if n == 0 || n > u32::MAX as usize {
            return Err(format!("invalid number of ranks {n}"));
        }
        if !(1..=MAX_DEPTH).contains(&cfg.depth) {
            return Err(format!("depth {} outside 1..={MAX_DEPTH}", cfg.depth));
        }
        if cfg.slot_bytes > MAX_SLOT_BYTES {
            return Err(format!(
                "slot_bytes {} above {MAX_SLOT_BYTES}",
                cfg.slot_bytes
            ));
        }
        let stride = (SLOT_DATA + cfg.slot_bytes).next_multiple_of(LINE);
        let data_off = LINE + n * LINE;
        let total = n
            .checked_mul(cfg.depth)
            .and_then(|s| s.checked_mul(stride))
            .and_then(|s| s.checked_add(data_off))
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or_else(|| "collective area size overflows".to_string())?;
        Ok(Self {
            n,
            slot_bytes: cfg.slot_bytes,
            depth: cfg.depth,
            stride,
            data_off,
            total,
        })
    }

    fn ctrl(&self, r: usize) -> usize {
        debug_assert!(r < self.n);
        LINE + r * LINE
    }

    /// Slot `i` (`< depth`) of rank `r`.
    fn slot(&self, r: usize, i: usize) -> usize {
        debug_assert!(r < self.n && i < self.depth);
        self.data_off + (r * self.depth + i) * self.stride
    }
}

/// One rank's handle on a shared-memory collective area.
///
/// The area (one file, mapped by every participant and unlinked once all
/// attached) holds a control line per rank (epoch counters) and `depth` data
/// slots of [`CollConfig::slot_bytes`] per rank. Each operation is an epoch:
/// a rank publishes its slot or its arrival with a Release store of the
/// epoch number and the others observe it with Acquire loads; a rank reuses
/// a slot only after every rank has stored "consumed" for the slot's
/// previous epoch. No locks, no system calls: a 2-rank barrier is one cache
/// line each way. The layout and the full ordering argument are in the
/// header of `btl-shm/src/coll.rs`.
///
/// All operations are collective: every participant must call the same
/// sequence of [`barrier`](Self::barrier), [`exchange`](Self::exchange) and
/// [`bcast`](Self::bcast). Each waiting loop calls the caller's `idle(k)`
/// after its `k`-th unsuccessful poll (`k` = 1, 2, ...; never before the first
/// check); `idle` progresses the caller's other traffic and spins, yields or
/// sleeps; an `Err` from it aborts the wait and is returned. After an aborted
/// (or panicked) operation the area is out of step with its peers and must
/// not be used again: further operations panic (see
/// [`is_broken`](Self::is_broken)).
///
/// The mapping is unmapped on drop; the file itself was unlinked during
/// bootstrap.
#[derive(Debug)]
pub struct ShmColl {
    map: Mapping,
    layout: Layout,
    rank: usize,
    /// Last epoch started.
    epoch: u64,
    /// `epoch % depth`, maintained incrementally.
    slot: usize,
    /// Every rank has finished reading the slots of all epochs `<= done_all`.
    done_all: u64,
    /// An operation started and did not complete.
    broken: bool,
    /// Every rank said it can read its peers' memory by CMA.
    single_copy: bool,
    /// Non-blocking exchanges started and not finished, oldest first
    /// ([`nb_start`](Self::nb_start)).
    nb: VecDeque<Nb>,
}

/// A non-blocking exchange in flight: its epoch, its slot, and its
/// contribution while it waits to be published.
#[derive(Debug)]
struct Nb {
    e: u64,
    slot: usize,
    copy: Option<Vec<u8>>,
    /// Tries that found it unfinished ([`ShmColl::nb_try_finish`] looks
    /// for absent ranks every [`ABSENT_EVERY`] of them).
    tries: u32,
}

fn os(msg: impl Into<String>) -> BtlError {
    BtlError::Os(msg.into())
}

/// Poll `ready` until it holds, calling `idle(k)` after the `k`-th failure.
#[inline]
fn wait<E>(
    idle: &mut dyn FnMut(u32) -> Result<(), E>,
    mut ready: impl FnMut() -> bool,
) -> Result<(), E> {
    let mut polls: u32 = 0;
    while !ready() {
        polls = polls.saturating_add(1);
        idle(polls)?;
    }
    Ok(())
}

impl ShmColl {
    /// Collective over the `n` participants (this one is `rank`): rank 0
    /// creates `path` (e.g. `/dev/shm/gmpi-<job>-comm<id>`; `O_CREAT|O_EXCL`,
    /// mode 0600, sized for `n × depth` slots plus control lines) before the
    /// first call of `fence`, the others attach after it (checking magic,
    /// version and sizes) and mark themselves present, and rank 0 unlinks the
    /// file after the second call.
    ///
    /// `fence` is a barrier among the `n` participants supplied by the caller
    /// (e.g. over point-to-point messages). It is called exactly twice on
    /// every rank, whatever fails, so no rank hangs in a fence another skips;
    /// a fence error is passed through. On any failure up to the second
    /// fence — bad arguments, a configuration that differs between ranks, a
    /// stale file at `path` (rank 0 then marks it so nobody attaches to it),
    /// a rank that could not attach, a first fence that failed on some
    /// ranks only — every rank returns an error: a rank marks itself present
    /// in the area only once it passed the first fence and attached, and
    /// after the second fence each rank checks that all `n` did. What cannot
    /// be made collective without a third fence: a second fence that fails
    /// on some ranks only (the others succeed), and a failure to unlink the
    /// file, which is therefore ignored (the area works regardless, and a
    /// later `O_CREAT|O_EXCL` of the same name fails loudly).
    pub fn bootstrap(
        path: &str,
        rank: usize,
        n: usize,
        cfg: &CollConfig,
        fence: &mut dyn FnMut() -> Result<(), String>,
    ) -> Result<ShmColl, BtlError> {
        let path = Path::new(path);
        let checked = if rank >= n {
            Err(os(format!(
                "shm coll bootstrap: rank {rank} not below size {n}"
            )))
        } else {
            Layout::new(n, cfg).map_err(|e| os(format!("shm coll bootstrap: {e}")))
        };

        // Phase 1: rank 0 creates and initialises the area.
        let mut created = false;
        let mut map: Result<Option<Mapping>, BtlError> = match &checked {
            Err(e) => {
                if rank == 0 {
                    // Keep the others off whatever file may be at `path`.
                    poison(path);
                }
                Err(e.clone())
            }
            Ok(layout) if rank == 0 => create(path, layout).map(|m| {
                created = true;
                Some(m)
            }),
            Ok(_) => Ok(None),
        };
        let first = fence().map_err(|e| os(format!("shm coll bootstrap: first fence failed: {e}")));

        // Phase 2: the others attach; every rank that got this far marks
        // itself present (rank 0 only now: if its first fence failed, the
        // others must see it absent).
        if let (Ok(layout), Ok(None), Ok(())) = (&checked, &map, &first) {
            map = attach(path, layout).map(Some);
        }
        if let (Ok(layout), Ok(Some(m)), Ok(())) = (&checked, &map, &first) {
            if prefault_budget(layout.total) {
                // Every slot of every rank, in this process's page tables
                // (allocated by whichever rank comes first), before the first
                // operation: otherwise the first lap of the slots faults a page
                // in on both sides at every new slot and size, and a run of
                // 100 calls of 16-64 KiB (the benchmarks' count above 8 KiB)
                // is mostly page faults: a 16 KiB bcast at np 2 measured 3.5-3.9
                // µs a call over 1 000 calls, 0.71 over 10 000.
                m.prefault(0, layout.total);
            }
            mark_present(m, layout, rank, cfg.single_copy);
        }
        let second =
            fence().map_err(|e| os(format!("shm coll bootstrap: second fence failed: {e}")));
        if created {
            // Everyone who will attach has (or failed and will make every
            // rank fail below); see the doc comment about errors here.
            let _ = std::fs::remove_file(path);
        }
        let layout = checked?;
        first?;
        second?;
        let map = map?.ok_or_else(|| os("shm coll bootstrap: area not attached"))?;

        // Phase 3: everyone attached? (And could everyone read by CMA?)
        let mut single_copy = true;
        for r in 0..n {
            let present = map
                .u64_at(layout.ctrl(r) + CTRL_PRESENT)
                .load(Ordering::Acquire);
            if present == 0 {
                return Err(os(format!(
                    "shm coll area {}: rank {r} did not attach",
                    path.display()
                )));
            }
            single_copy &= present & PRESENT_CMA != 0;
        }
        Ok(ShmColl {
            map,
            layout,
            rank,
            epoch: 0,
            slot: 0,
            done_all: 0,
            broken: false,
            single_copy,
            nb: VecDeque::new(),
        })
    }

    /// Largest contribution to [`exchange`](Self::exchange) and largest
    /// [`bcast`](Self::bcast) buffer, in bytes.
    pub fn slot_bytes(&self) -> usize {
        self.layout.slot_bytes
    }

    /// Number of participants.
    pub fn size(&self) -> usize {
        self.layout.n
    }

    /// This participant's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Whether an operation was aborted (its `idle` returned an error) or
    /// panicked; the area is then unusable and further operations panic.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Whether every participant can read the others' memory by Cross
    /// Memory Attach ([`CollConfig::single_copy`] on every rank): then an
    /// operation may publish where its data lies instead of the data, and
    /// its readers copy it straight from the owner's memory, the owner
    /// waiting with [`wait_read`](Self::wait_read) before it lets go of it.
    pub fn single_copy(&self) -> bool {
        self.single_copy
    }

    /// Wait until the operation just completed (the last epoch) has been
    /// read: by `root` only (`Some`: a gather's non-root, whose data the
    /// root reads), or by every other participant (`None`: an exchange, a
    /// bcast's root). Readers store `consumed` once their reads, including
    /// any of the owners' memory they made inside `f`, are done, so after
    /// this the memory a contribution described may be reused. Never waits
    /// for a rank that called something else at that epoch: every
    /// operation stores `consumed`. Starts no epoch; an `idle` error leaves
    /// the area usable.
    pub fn wait_read<E>(
        &mut self,
        root: Option<usize>,
        idle: &mut dyn FnMut(u32) -> Result<(), E>,
    ) -> Result<(), E> {
        let e = self.epoch;
        if e <= self.done_all {
            return Ok(());
        }
        let (map, layout, me) = (&self.map, &self.layout, self.rank);
        let done = |r: usize| {
            map.u64_at(layout.ctrl(r) + CTRL_CONSUMED)
                .load(Ordering::Acquire)
                >= e
        };
        if let Some(r) = root {
            return wait(idle, || r == me || done(r));
        }
        let mut next = 0;
        wait(idle, || {
            while next < layout.n {
                if next != me && !done(next) {
                    return false;
                }
                next += 1;
            }
            true
        })?;
        self.done_all = e;
        Ok(())
    }

    /// Wait until every participant has entered this barrier.
    pub fn barrier<E>(&mut self, idle: &mut dyn FnMut(u32) -> Result<(), E>) -> Result<(), E> {
        let e = self.begin();
        // Nothing to read in a barrier: done with epoch `e` already.
        self.ctrl(self.rank, CTRL_CONSUMED)
            .store(e, Ordering::Release);
        self.ctrl(self.rank, CTRL_ARRIVED)
            .store(e, Ordering::Release);
        self.wait_all(e, idle, SlotOrCtrl::Ctrl)?;
        self.broken = false;
        Ok(())
    }

    /// Every participant contributes `data` (at most
    /// [`slot_bytes`](Self::slot_bytes); normally the same length on every
    /// rank); once all have, `f` sees the `n` contributions in rank order —
    /// each with the length its rank gave, slices into the shared area valid
    /// only during `f`; empty for an [absent](self) rank — and its result is
    /// returned.
    ///
    /// Reducing in rank order inside `f` gives bit-identical results on every
    /// rank (allreduce); copying the slices gives allgather or gather.
    ///
    /// # Panics
    /// If `data` is longer than [`slot_bytes`](Self::slot_bytes), or the area
    /// is [broken](Self::is_broken).
    pub fn exchange<E, R>(
        &mut self,
        data: &[u8],
        idle: &mut dyn FnMut(u32) -> Result<(), E>,
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<R, E> {
        self.exchange_parts(&[data], idle, f)
    }

    /// [`exchange`](Self::exchange) of the contribution made of `parts`
    /// one after the other (copied straight into the slot: a header and a
    /// piece of the caller's buffer need not be put together first).
    pub fn exchange_parts<E, R>(
        &mut self,
        parts: &[&[u8]],
        idle: &mut dyn FnMut(u32) -> Result<(), E>,
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<R, E> {
        self.check_len(parts_len(parts));
        let e = self.begin();
        self.reserve(e, idle)?;
        self.publish(e, parts);
        let absent = self.wait_all(e, idle, SlotOrCtrl::Slot)?;
        let out = self.with_slots(e, &absent, f);
        // All reads of epoch `e`'s slots (inside `f`) happen before this.
        self.ctrl(self.rank, CTRL_CONSUMED)
            .store(e, Ordering::Release);
        self.broken = false;
        Ok(out)
    }

    /// Copy the root's `buf` into every other participant's `buf` (all at most
    /// [`slot_bytes`](Self::slot_bytes); normally the same length everywhere;
    /// a receiver gets `min(root's len, its len)` bytes). The root does not
    /// wait for the others, unless it runs `depth` operations ahead of a
    /// reader (its slot is then still being read).
    ///
    /// # Panics
    /// If `root` is not a participant, `buf` is longer than
    /// [`slot_bytes`](Self::slot_bytes), or the area is
    /// [broken](Self::is_broken).
    pub fn bcast<E>(
        &mut self,
        root: usize,
        buf: &mut [u8],
        idle: &mut dyn FnMut(u32) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.rank == root {
            self.bcast_with(root, buf, idle, |_| ())?;
        } else {
            self.bcast_with(root, &[], idle, |src| {
                let k = src.len().min(buf.len());
                buf[..k].copy_from_slice(&src[..k]);
            })?;
        }
        Ok(())
    }

    /// The root publishes `data` and returns `None` without waiting for the
    /// others (unless it runs `depth` operations ahead of a reader); every
    /// other participant (whose `data` is ignored) waits for it and gets
    /// `Some` of `f` run over the root's contribution, a slice into the area
    /// valid only during `f`: empty if the root is [absent](self) at this
    /// epoch (it did not act as the root).
    ///
    /// # Panics
    /// If `root` is not a participant, the root's `data` is longer than
    /// [`slot_bytes`](Self::slot_bytes), or the area is
    /// [broken](Self::is_broken).
    pub fn bcast_with<E, R>(
        &mut self,
        root: usize,
        data: &[u8],
        idle: &mut dyn FnMut(u32) -> Result<(), E>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, E> {
        self.bcast_parts(root, &[data], idle, f)
    }

    /// [`bcast_with`](Self::bcast_with) of the root's contribution made of
    /// `parts` one after the other (ignored on the others).
    pub fn bcast_parts<E, R>(
        &mut self,
        root: usize,
        parts: &[&[u8]],
        idle: &mut dyn FnMut(u32) -> Result<(), E>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, E> {
        assert!(
            root < self.layout.n,
            "bcast root {root} is not below {}",
            self.layout.n
        );
        let e = self.begin();
        let out = if self.rank == root {
            self.check_len(parts_len(parts));
            self.reserve(e, idle)?;
            self.publish(e, parts);
            None
        } else {
            self.ctrl(self.rank, CTRL_READING)
                .store(e, Ordering::Release);
            let (map, layout, slot) = (&self.map, &self.layout, self.slot);
            let tag = map.u64_at(layout.slot(root, slot) + SLOT_EPOCH);
            let (mut absent, mut polls) = (false, 0u32);
            wait(idle, || {
                tag.load(Ordering::Acquire) >= e || {
                    polls = polls.wrapping_add(1);
                    absent = polls.is_multiple_of(ABSENT_EVERY)
                        && gone(map, layout, root, e)
                        && tag.load(Ordering::Acquire) < e;
                    absent
                }
            })?;
            let src = if absent {
                &[][..]
            } else {
                self.contribution(root, e)
            };
            Some(f(src))
        };
        // Root: read nothing. Others: `f`'s reads happen before this.
        self.ctrl(self.rank, CTRL_CONSUMED)
            .store(e, Ordering::Release);
        self.broken = false;
        Ok(out)
    }

    /// A one-way gather to `root`: every participant contributes `data` (at
    /// most [`slot_bytes`](Self::slot_bytes)); the others return `None` at
    /// once, the root waits for every contribution and gets `Some` of `f`
    /// run over the `n` of them in rank order (as in
    /// [`exchange`](Self::exchange); an [absent](self) rank's is empty).
    /// Reducing in rank order inside `f` is a reduce whose non-roots never
    /// wait for anyone (unless they run `depth` operations ahead of the root).
    ///
    /// # Panics
    /// If `root` is not a participant, `data` is longer than
    /// [`slot_bytes`](Self::slot_bytes), or the area is
    /// [broken](Self::is_broken).
    pub fn gather_with<E, R>(
        &mut self,
        root: usize,
        data: &[u8],
        idle: &mut dyn FnMut(u32) -> Result<(), E>,
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<Option<R>, E> {
        self.gather_parts(root, &[data], idle, f)
    }

    /// [`gather_with`](Self::gather_with) of the contribution made of
    /// `parts` one after the other (as in
    /// [`exchange_parts`](Self::exchange_parts)).
    pub fn gather_parts<E, R>(
        &mut self,
        root: usize,
        parts: &[&[u8]],
        idle: &mut dyn FnMut(u32) -> Result<(), E>,
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<Option<R>, E> {
        assert!(
            root < self.layout.n,
            "gather root {root} is not below {}",
            self.layout.n
        );
        self.check_len(parts_len(parts));
        let e = self.begin();
        self.reserve(e, idle)?;
        self.publish(e, parts);
        let out = if self.rank == root {
            let absent = self.wait_all(e, idle, SlotOrCtrl::Slot)?;
            Some(self.with_slots(e, &absent, f))
        } else {
            None
        };
        self.ctrl(self.rank, CTRL_CONSUMED)
            .store(e, Ordering::Release);
        self.broken = false;
        Ok(out)
    }

    /// Start a non-blocking [`exchange`](Self::exchange) of the
    /// contribution made of `parts` (at most
    /// [`slot_bytes`](Self::slot_bytes)) and return its epoch; it ends with
    /// [`nb_try_finish`](Self::nb_try_finish) or
    /// [`nb_finish`](Self::nb_finish), oldest first. Never waits.
    ///
    /// The contribution is published at once when no exchange started
    /// earlier is still pending and its slot is free (no rank still reads
    /// the slot's previous epoch); otherwise a copy of it waits here and is
    /// published, in order, by the calls that finish the exchanges before
    /// it. So a rank still publishes an epoch only after finishing the one
    /// before, which the waits of every operation rely on (see the module
    /// header), and a rank never waits in a call MPI makes local.
    ///
    /// While exchanges are pending, the blocking operations panic: finish
    /// them first.
    ///
    /// # Panics
    /// If `parts` are longer than [`slot_bytes`](Self::slot_bytes), or the
    /// area is [broken](Self::is_broken).
    pub fn nb_start(&mut self, parts: &[&[u8]]) -> u64 {
        self.check_len(parts_len(parts));
        let e = self.next_epoch();
        // An exchange ends in `nb_*finish`, not here: the area is usable.
        self.broken = false;
        let slot = self.slot;
        let now = self.nb.is_empty() && self.reserved_now(e);
        if now {
            self.publish_at(slot, e, parts);
        }
        let copy = (!now).then(|| parts.concat());
        self.nb.push_back(Nb {
            e,
            slot,
            copy,
            tries: 0,
        });
        e
    }

    /// The epoch of the oldest non-blocking exchange not finished yet.
    pub fn nb_pending(&self) -> Option<u64> {
        self.nb.front().map(|n| n.e)
    }

    /// Finish the oldest pending non-blocking exchange if every rank has
    /// published its contribution (publishing ours first if it waits and
    /// its slot is free now), without waiting: `Some` of `f` run over its
    /// epoch and the `n` contributions in rank order (as in
    /// [`exchange`](Self::exchange): an [absent](self) rank's is empty);
    /// `None` if nothing is pending or it cannot finish yet.
    pub fn nb_try_finish<R>(&mut self, f: impl FnOnce(u64, &[&[u8]]) -> R) -> Option<R> {
        let (e, slot) = self.nb.front().map(|n| (n.e, n.slot))?;
        // An `idle` that fails at once: publish only if the slot is free.
        self.nb_published(e, slot, &mut |_| Err(())).ok()?;
        let (mut next, mut absent) = (0, Vec::new());
        // Whether a rank is absent costs a load of its control line (which
        // it writes): looked at every `ABSENT_EVERY` tries, as a blocking
        // wait looks every `ABSENT_EVERY` polls.
        let look = self
            .nb
            .front()
            .is_some_and(|n| (n.tries + 1).is_multiple_of(ABSENT_EVERY));
        if !self.entered(slot, e, SlotOrCtrl::Slot, look, &mut next, &mut absent) {
            if let Some(n) = self.nb.front_mut() {
                n.tries = n.tries.wrapping_add(1);
            }
            return None;
        }
        self.done_all = self.done_all.max(e - 1);
        Some(self.nb_end(e, slot, &absent, f))
    }

    /// [`nb_try_finish`](Self::nb_try_finish), waiting as long as it takes
    /// (`None` if nothing is pending). An `idle` error leaves the exchange
    /// pending and the area usable.
    pub fn nb_finish<E, R>(
        &mut self,
        idle: &mut dyn FnMut(u32) -> Result<(), E>,
        f: impl FnOnce(u64, &[&[u8]]) -> R,
    ) -> Result<Option<R>, E> {
        let Some((e, slot)) = self.nb.front().map(|n| (n.e, n.slot)) else {
            return Ok(None);
        };
        self.nb_published(e, slot, idle)?;
        let absent = self.wait_all_at(slot, e, idle, SlotOrCtrl::Slot)?;
        Ok(Some(self.nb_end(e, slot, &absent, f)))
    }

    /// Publish the oldest pending exchange (epoch `e` in `slot`) if it
    /// still waits to be, once its slot is free, which `idle` waits for
    /// (an `idle` that fails at once does not wait).
    fn nb_published<E>(
        &mut self,
        e: u64,
        slot: usize,
        idle: &mut dyn FnMut(u32) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.nb.front().is_none_or(|n| n.copy.is_none()) {
            return Ok(());
        }
        self.reserve(e, idle)?;
        if let Some(copy) = self.nb.front_mut().and_then(|n| n.copy.take()) {
            self.publish_at(slot, e, &[&copy]);
        }
        Ok(())
    }

    /// The end of the oldest pending exchange, epoch `e` in `slot`, which
    /// every rank entered (`absent` those that did something else): `f`
    /// over the contributions, our `consumed = e`, and the next pending
    /// exchange published if its slot is free.
    fn nb_end<R>(
        &mut self,
        e: u64,
        slot: usize,
        absent: &[usize],
        f: impl FnOnce(u64, &[&[u8]]) -> R,
    ) -> R {
        let out = self.with_slots_at(slot, e, absent, |s| f(e, s));
        // All reads of epoch `e`'s slots (inside `f`) happen before this.
        self.ctrl(self.rank, CTRL_CONSUMED)
            .store(e, Ordering::Release);
        self.nb.pop_front();
        if let Some((e, slot)) = self.nb.front().map(|n| (n.e, n.slot)) {
            let _ = self.nb_published(e, slot, &mut |_| Err(()));
        }
        out
    }

    /// `f` over every rank's contribution of epoch `e` (published, or empty
    /// for the `absent` ranks), listed on the stack for up to
    /// [`STACK_RANKS`] ranks.
    #[inline]
    fn with_slots<R>(&self, e: u64, absent: &[usize], f: impl FnOnce(&[&[u8]]) -> R) -> R {
        self.with_slots_at(self.slot, e, absent, f)
    }

    /// [`with_slots`](Self::with_slots) in slot `slot` (epoch `e`'s).
    #[inline]
    fn with_slots_at<R>(
        &self,
        slot: usize,
        e: u64,
        absent: &[usize],
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> R {
        let n = self.layout.n;
        let part = |r: usize| {
            if absent.contains(&r) {
                &[][..]
            } else {
                self.contribution_at(slot, r, e)
            }
        };
        if n <= STACK_RANKS {
            let mut parts: [&[u8]; STACK_RANKS] = [&[]; STACK_RANKS];
            for (r, p) in parts[..n].iter_mut().enumerate() {
                *p = part(r);
            }
            f(&parts[..n])
        } else {
            let parts: Vec<&[u8]> = (0..n).map(part).collect();
            f(&parts)
        }
    }

    fn check_len(&self, len: usize) {
        assert!(
            len <= self.layout.slot_bytes,
            "{len} bytes exceed the collective area's slot of {} bytes",
            self.layout.slot_bytes
        );
    }

    /// Start the next epoch of a blocking operation; the area stays broken
    /// until the operation ends.
    #[inline]
    fn begin(&mut self) -> u64 {
        assert!(
            self.nb.is_empty(),
            "a blocking collective operation while non-blocking exchanges are pending"
        );
        self.next_epoch()
    }

    /// Start the next epoch; the area stays broken until it is cleared.
    #[inline]
    fn next_epoch(&mut self) -> u64 {
        assert!(
            !self.broken,
            "ShmColl used after an aborted or panicked operation"
        );
        self.broken = true;
        self.epoch += 1;
        self.slot = if self.slot + 1 == self.layout.depth {
            0
        } else {
            self.slot + 1
        };
        self.epoch
    }

    #[inline]
    fn ctrl(&self, r: usize, field: usize) -> &AtomicU64 {
        self.map.u64_at(self.layout.ctrl(r) + field)
    }

    /// Wait until no rank still reads our slot for epoch `e` (its previous
    /// epoch `e - depth`).
    #[inline]
    fn reserve<E>(&mut self, e: u64, idle: &mut dyn FnMut(u32) -> Result<(), E>) -> Result<(), E> {
        let need = e.saturating_sub(self.layout.depth as u64);
        if need <= self.done_all {
            return Ok(());
        }
        // We ourselves finished everything before `e`.
        let (mut low, mut next) = (e - 1, 0);
        if !self.consumed_all(need, &mut next, &mut low) {
            // Blocked: wait until the slowest rank is half the area behind,
            // not one slot, so that the next epochs start without a look at
            // its line. A root that waited for each slot in turn pulled its
            // readers' control lines once per call, and every reader's
            // store there then waited for the line to come back.
            let want = (e - 1).min(need + self.layout.depth as u64 / 2);
            (low, next) = (e - 1, 0);
            wait(idle, || self.consumed_all(want, &mut next, &mut low))?;
        }
        self.done_all = self.done_all.max(low);
        Ok(())
    }

    /// [`reserve`](Self::reserve) without waiting: whether the slot of
    /// epoch `e` is free now (every rank finished before `e` ourselves).
    fn reserved_now(&mut self, e: u64) -> bool {
        let need = e.saturating_sub(self.layout.depth as u64);
        if need <= self.done_all {
            return true;
        }
        let (mut low, mut next) = (e - 1, 0);
        if !self.consumed_all(need, &mut next, &mut low) {
            return false;
        }
        self.done_all = self.done_all.max(low);
        true
    }

    /// Whether every other rank from `*next` on has consumed epoch `need`
    /// (`*next` moves past those that have; `*low` is the lowest
    /// `consumed` seen).
    #[inline]
    fn consumed_all(&self, need: u64, next: &mut usize, low: &mut u64) -> bool {
        let (map, layout, me) = (&self.map, &self.layout, self.rank);
        while *next < layout.n {
            if *next != me {
                let done = map
                    .u64_at(layout.ctrl(*next) + CTRL_CONSUMED)
                    .load(Ordering::Acquire);
                if done < need {
                    return false;
                }
                *low = (*low).min(done);
            }
            *next += 1;
        }
        true
    }

    /// Write our slot for epoch `e` (reserved), then publish it: the Release
    /// store of its epoch tag.
    #[inline(always)]
    fn publish(&mut self, e: u64, parts: &[&[u8]]) {
        self.publish_at(self.slot, e, parts);
    }

    /// [`publish`](Self::publish) into slot `slot` (epoch `e`'s).
    #[inline(always)]
    fn publish_at(&mut self, slot: usize, e: u64, parts: &[&[u8]]) {
        let s = self.layout.slot(self.rank, slot);
        let mut at = s + SLOT_DATA;
        for p in parts {
            self.map.write_bytes(at, p);
            at += p.len();
        }
        self.map
            .u64_at(s + SLOT_LEN)
            .store((at - s - SLOT_DATA) as u64, Ordering::Relaxed);
        self.map.u64_at(s + SLOT_EPOCH).store(e, Ordering::Release);
    }

    /// Wait until every rank has entered epoch `e`: its `arrived` (barrier)
    /// or its slot's epoch tag (exchange) is at least `e`. For slots, a rank
    /// found [absent](self) is not waited for: the ranks returned (none, no
    /// allocation, in the normal case).
    #[inline]
    fn wait_all<E>(
        &mut self,
        e: u64,
        idle: &mut dyn FnMut(u32) -> Result<(), E>,
        word: SlotOrCtrl,
    ) -> Result<Vec<usize>, E> {
        self.wait_all_at(self.slot, e, idle, word)
    }

    /// [`wait_all`](Self::wait_all) for the slots of `slot` (epoch `e`'s).
    #[inline]
    fn wait_all_at<E>(
        &mut self,
        slot: usize,
        e: u64,
        idle: &mut dyn FnMut(u32) -> Result<(), E>,
        word: SlotOrCtrl,
    ) -> Result<Vec<usize>, E> {
        let slots = matches!(word, SlotOrCtrl::Slot);
        let mut next = 0;
        let (mut absent, mut polls) = (Vec::new(), 0u32);
        wait(idle, || {
            polls = polls.wrapping_add(1);
            let look = slots && polls.is_multiple_of(ABSENT_EVERY);
            self.entered(slot, e, word, look, &mut next, &mut absent)
        })?;
        // Everyone entered `e`, hence finished reading `e - 1` (an absent
        // rank too: it stored `consumed` or `reading` for `e`).
        self.done_all = self.done_all.max(e - 1);
        Ok(absent)
    }

    /// Whether every other rank from `*next` on has entered epoch `e` (see
    /// [`wait_all`](Self::wait_all)); `*next` moves past those that have.
    /// With `look`, a rank whose slot is behind is checked for
    /// [absence](self) and, if absent, pushed on `absent` and passed.
    #[inline]
    fn entered(
        &self,
        slot: usize,
        e: u64,
        word: SlotOrCtrl,
        look: bool,
        next: &mut usize,
        absent: &mut Vec<usize>,
    ) -> bool {
        let (map, layout, me) = (&self.map, &self.layout, self.rank);
        let at = |r: usize| match word {
            SlotOrCtrl::Ctrl => layout.ctrl(r) + CTRL_ARRIVED,
            SlotOrCtrl::Slot => layout.slot(r, slot) + SLOT_EPOCH,
        };
        let look = look && matches!(word, SlotOrCtrl::Slot);
        while *next < layout.n {
            if *next != me {
                let tag = map.u64_at(at(*next));
                if tag.load(Ordering::Acquire) < e {
                    if !(look && gone(map, layout, *next, e) && tag.load(Ordering::Acquire) < e) {
                        return false;
                    }
                    absent.push(*next);
                }
            }
            *next += 1;
        }
        true
    }

    /// Rank `r`'s published contribution for epoch `e` (after an Acquire
    /// load of its slot's epoch tag `>= e`).
    #[inline]
    fn contribution(&self, r: usize, e: u64) -> &[u8] {
        self.contribution_at(self.slot, r, e)
    }

    /// [`contribution`](Self::contribution) in slot `slot` (epoch `e`'s).
    #[inline]
    fn contribution_at(&self, slot: usize, r: usize, e: u64) -> &[u8] {
        let s = self.layout.slot(r, slot);
        let len = self.map.u64_at(s + SLOT_LEN).load(Ordering::Relaxed);
        debug_assert_eq!(
            self.map.u64_at(s + SLOT_EPOCH).load(Ordering::Relaxed),
            e,
            "rank {r}'s slot holds another epoch"
        );
        let len = len.min(self.layout.slot_bytes as u64) as usize;
        self.map.bytes(s + SLOT_DATA, len)
    }
}

/// The length of a contribution made of `parts`.
#[inline]
fn parts_len(parts: &[&[u8]]) -> usize {
    parts.iter().map(|p| p.len()).sum()
}

/// Whether rank `r` has entered epoch `e` in a role that publishes no slot
/// (see *absent ranks* in the module header): its `consumed` or `reading`
/// is at least `e`. Callers then load its slot's tag again: it is `>= e` if
/// the rank published after all.
#[inline]
fn gone(map: &Mapping, layout: &Layout, r: usize, e: u64) -> bool {
    let ctrl = layout.ctrl(r);
    map.u64_at(ctrl + CTRL_CONSUMED).load(Ordering::Acquire) >= e
        || map.u64_at(ctrl + CTRL_READING).load(Ordering::Acquire) >= e
}

/// Rank 0: create the file, initialise the header, publish it.
fn create(path: &Path, layout: &Layout) -> Result<Mapping, BtlError> {
    match Mapping::create(path, layout.total) {
        Ok(m) => {
            m.u32_at(HDR_VERSION).store(VERSION, Ordering::Relaxed);
            m.u32_at(HDR_N).store(layout.n as u32, Ordering::Relaxed);
            m.u64_at(HDR_SLOT_BYTES)
                .store(layout.slot_bytes as u64, Ordering::Relaxed);
            m.u64_at(HDR_DEPTH)
                .store(layout.depth as u64, Ordering::Relaxed);
            m.u64_at(HDR_TOTAL)
                .store(layout.total as u64, Ordering::Relaxed);
            m.u32_at(HDR_STATE).store(STATE_READY, Ordering::Release);
            m.u64_at(HDR_MAGIC).store(MAGIC, Ordering::Release);
            Ok(m)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            poison(path);
            Err(os(format!(
                "shm coll area {} already exists (left over by an earlier job?); refusing to reuse it",
                path.display()
            )))
        }
        Err(e) => Err(os(format!(
            "cannot create shm coll area {} ({} bytes): {e}",
            path.display(),
            layout.total
        ))),
    }
}

/// Mark a file at `path` (if any) so that no rank attaches to it. Best
/// effort: if we cannot open it, neither can the others, and a file too
/// short for a header fails their size check anyway.
fn poison(path: &Path) {
    if let Ok(stale) = Mapping::open(path) {
        stale
            .u32_at(HDR_STATE)
            .store(STATE_POISONED, Ordering::Release);
    }
}

/// Ranks other than 0: open the file and check it is the area we expect.
fn attach(path: &Path, layout: &Layout) -> Result<Mapping, BtlError> {
    let m = Mapping::open(path).map_err(|e| {
        os(format!(
            "cannot open shm coll area {} (did rank 0 fail?): {e}",
            path.display()
        ))
    })?;
    let fail = |what: String| {
        Err(os(format!(
            "shm coll area {} is unusable: {what}",
            path.display()
        )))
    };
    let state = m.u32_at(HDR_STATE).load(Ordering::Acquire);
    let magic = m.u64_at(HDR_MAGIC).load(Ordering::Acquire);
    if state == STATE_POISONED {
        return fail("it is a stale file of an earlier job".into());
    }
    if magic != MAGIC || state != STATE_READY {
        return fail("not an initialised gmpi collective area".into());
    }
    let version = m.u32_at(HDR_VERSION).load(Ordering::Relaxed);
    if version != VERSION {
        return fail(format!("layout version {version}, expected {VERSION}"));
    }
    let found = (
        m.u32_at(HDR_N).load(Ordering::Relaxed) as usize,
        m.u64_at(HDR_SLOT_BYTES).load(Ordering::Relaxed),
        m.u64_at(HDR_DEPTH).load(Ordering::Relaxed),
        m.u64_at(HDR_TOTAL).load(Ordering::Relaxed),
    );
    let want = (
        layout.n,
        layout.slot_bytes as u64,
        layout.depth as u64,
        layout.total as u64,
    );
    if found != want || m.len() != layout.total {
        return fail(format!(
            "(n, slot_bytes, depth, total) is {found:?} but this rank computed {want:?} \
             (do all ranks use the same size and CollConfig?); file is {} bytes",
            m.len()
        ));
    }
    Ok(m)
}

/// Mark `rank` present (bootstrap phase 3 checks every rank did).
fn mark_present(m: &Mapping, layout: &Layout, rank: usize, single_copy: bool) {
    let flags = if single_copy { PRESENT_CMA } else { 0 };
    m.u64_at(layout.ctrl(rank) + CTRL_PRESENT)
        .store(1 | flags, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefaulting_stops_at_the_budget() {
        assert!(!prefault_budget(PREFAULT_MAX + 1), "too large an area");
        // Other tests' areas may have used some of it already.
        let granted = (0..10).filter(|_| prefault_budget(PREFAULT_MAX)).count();
        assert!(granted <= PREFAULT_BUDGET / PREFAULT_MAX, "{granted}");
        assert!(!prefault_budget(PREFAULT_MAX), "the budget is spent");
        assert!(PREFAULTED.load(Ordering::Relaxed) <= PREFAULT_BUDGET);
    }

    #[test]
    fn layout_is_line_separated() {
        let l = Layout::new(3, &CollConfig::default()).unwrap();
        assert_eq!(l.stride, (16usize + (16 << 10)).next_multiple_of(128));
        assert_eq!(l.data_off, 128 + 3 * 128);
        assert_eq!(l.total, l.data_off + 3 * 2 * l.stride);
        let mut offs = Vec::new();
        for r in 0..3 {
            assert_eq!(l.ctrl(r) % LINE, 0);
            for i in 0..2 {
                let s = l.slot(r, i);
                assert_eq!(s % LINE, 0);
                assert!(s + SLOT_DATA + l.slot_bytes <= l.total);
                offs.push(s);
            }
        }
        assert!(offs.windows(2).all(|w| w[1] - w[0] == l.stride));
        let small = Layout::new(
            2,
            &CollConfig {
                slot_bytes: 8,
                depth: 1,
                ..CollConfig::default()
            },
        )
        .unwrap();
        assert_eq!(small.stride, 128);
    }

    #[test]
    fn rejects_bad_parameters() {
        let ok = CollConfig::default();
        assert!(Layout::new(0, &ok).is_err());
        assert!(Layout::new(
            2,
            &CollConfig {
                depth: 0,
                ..ok.clone()
            }
        )
        .is_err());
        assert!(Layout::new(
            2,
            &CollConfig {
                depth: 1025,
                ..ok.clone()
            }
        )
        .is_err());
        assert!(Layout::new(
            2,
            &CollConfig {
                slot_bytes: (1 << 30) + 1,
                ..ok.clone()
            }
        )
        .is_err());
        assert!(Layout::new(
            1 << 31,
            &CollConfig {
                depth: 1024,
                slot_bytes: 1 << 30,
                ..CollConfig::default()
            }
        )
        .is_err());
    }
}
