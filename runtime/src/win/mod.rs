//! One-sided communication (MPI-3 RMA): windows, their operations and
//! their synchronisation.
//!
//! Two transports, chosen at creation for the whole window:
//! - its ranks share a node: the shared area and CMA, below;
//! - they do not: active messages over the pml to an agent in each target
//!   process, with a progress thread for passive target (`am.rs`, whose
//!   header says how), except the reads and writes of targets joined to
//!   this rank by a btl with RDMA (ib): each rank exposes its window
//!   memory (host memory, not dynamic) to that btl at creation
//!   ([`rdma_targets`]: `Btl::register_window`, descriptors allgathered),
//!   and `MPI_Put`, `MPI_Get` and the request forms read and write it by
//!   RDMA READ and WRITE (`rdma_runs`, through the progress driver's
//!   `onesided.rs`), waited for before the call returns like an active
//!   message's reply: the target takes no part, its agent and progress
//!   thread are not in the way, and every epoch rule below holds
//!   unchanged (a lock is granted before any transfer under it starts;
//!   an unlock, fence or complete follows transfers that have ended).
//!   Accumulates stay active messages, so their atomicity does not depend
//!   on the NIC's. The epoch bookkeeping and every argument check here are
//!   the same for every transport; only the moves differ.
//!
//! On one node, every window has a shared area (`gmpi_btl_shm::WinArea`): the lock word
//! and accumulate mutex of each rank, and the post/complete counters of
//! general active-target synchronisation. Where the window memory lives:
//! - `MPI_Win_allocate`, `MPI_Win_allocate_shared`: in the area itself, so
//!   an origin reads and writes a target's memory directly (load/store);
//!   shared windows are contiguous across ranks and `MPI_Win_shared_query`
//!   hands out each rank's base in this process;
//! - `MPI_Win_create`, `MPI_Win_create_dynamic`: in the owner's own memory,
//!   reached by Cross Memory Attach (`process_vm_readv`/`writev`, one
//!   system call per contiguous run), also for a rank's own window;
//! - `MPI_Win_create` over GPU memory (any rank's, mixed with host memory
//!   on others): each such rank exports its buffer by CUDA IPC at creation
//!   and every other rank maps it (`map_device_memory`), so an operation
//!   is a device copy into or out of the mapping (through a host buffer
//!   for packing and for combining accumulates). Where IPC fails on any
//!   rank, creation fails on every rank with `MPI_ERR_UNSUPPORTED_OPERATION`
//!   saying why.
//!
//! The C ABI's hot path (`put_raw`, `get_raw`, `acc_raw`, `cas_basic`,
//! `flush_basic`) takes contiguous predefined elements on the allocated
//! flavors with no lock: each target's epoch state is published as atomic
//! bits (`EpochsGuard`).
//!
//! So every operation completes at the origin before it returns, and no
//! target ever has to act: passive-target epochs progress while the
//! target computes, with no progress thread. `MPI_Win_flush*` and
//! `MPI_Win_sync` only order memory; the memory model is
//! `MPI_WIN_UNIFIED`.
//!
//! Accumulates (`Accumulate`, `Get_accumulate`, `Fetch_and_op`,
//! `Compare_and_swap`, and their request forms) take the target's
//! accumulate mutex for the whole operation, so concurrent accumulates on
//! one target are atomic per element, as MPI requires, whatever the
//! datatype. Epochs: fence (a barrier of the window's private
//! communicator), post/start/complete/wait/test (the counters, so a target
//! only waits for the origins it exposed itself to), and lock/unlock
//! (a reader-writer lock word per target; `lock_all` takes every target's
//! shared lock). Operations outside an access epoch to their target are
//! `MPI_ERR_RMA_SYNC`.
//!
//! Not here: device memory of `MPI_Win_allocate` (it is host memory) and
//! dynamic windows on device memory (attach of a device region is
//! refused: on one node it would be reached by CMA, which cannot read it).
//! `MPI_Win_create` over device memory works on one node (CUDA IPC) and
//! between nodes (the target's agent copies to and from its GPU). Device
//! *origin* buffers work everywhere (packed and unpacked through the gpu
//! layer like any send or receive buffer).

mod am;

pub(crate) use am::{serve as serve_requests, stop_progress_thread, Agent};

/// Whether the `len` bytes at `addr` are host memory (the C ABI's hot
/// paths; `false` also where the gpu layer cannot say).
#[doc(hidden)]
#[inline]
pub fn is_host_memory(addr: u64, len: usize) -> bool {
    engine::gpu().is_host(addr, len)
}

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use gmpi_btl::{LocalMem, MemDesc};
use std::sync::{Arc, Mutex, MutexGuard};

use gmpi_btl_shm::{cma_read, cma_write, WinArea, LOCK_EXCLUSIVE};

use crate::buffer::View;
use crate::comm::Communicator;
use crate::datatype::{Datatype, Primitive};
use crate::engine;
use crate::error::{Error, ErrorClass, Result};
use crate::group::Group;
use crate::op::Op;
use crate::typemap::UserDatatype;

/// `MPI_MODE_NOCHECK`.
pub const MODE_NOCHECK: i32 = 1024;
/// `MPI_MODE_NOSTORE`.
pub const MODE_NOSTORE: i32 = 2048;
/// `MPI_MODE_NOPUT`.
pub const MODE_NOPUT: i32 = 4096;
/// `MPI_MODE_NOPRECEDE`.
pub const MODE_NOPRECEDE: i32 = 8192;
/// `MPI_MODE_NOSUCCEED`.
pub const MODE_NOSUCCEED: i32 = 16384;

/// Fields each rank publishes at window creation (pid, base, size,
/// displacement unit, on a GPU, probe address).
const F: usize = 6;

/// The word every rank publishes for its peers' CMA probe.
static PROBE: u64 = u64::from_le_bytes(*b"gmpi-win");

/// How a window's memory was made (`MPI_WIN_CREATE_FLAVOR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WinFlavor {
    /// `MPI_Win_create`: the user's memory.
    Create = 1,
    /// `MPI_Win_allocate`: memory gmpi allocated.
    Allocate = 2,
    /// `MPI_Win_create_dynamic`: memory attached later, addressed absolutely.
    Dynamic = 3,
    /// `MPI_Win_allocate_shared`: memory every rank may load and store.
    Shared = 4,
}

/// The lock of a passive-target epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockType {
    /// `MPI_LOCK_EXCLUSIVE`: no other origin holds the lock.
    Exclusive,
    /// `MPI_LOCK_SHARED`: other origins may hold it shared.
    Shared,
}

/// What every rank knows of each rank's memory.
#[derive(Debug, Clone, Copy)]
struct Peer {
    pid: u64,
    /// Base address in the owner's process (0 for dynamic windows).
    base: u64,
    size: u64,
    disp_unit: i64,
    /// Where this process reaches the memory of a window on GPU memory
    /// (`MPI_Win_create` over a device buffer): the owner's base for this
    /// rank, its CUDA IPC mapping for the others; 0 for host memory.
    dev: u64,
}

/// The targets this rank has locked (indexed by rank: the check of every
/// operation looks it up).
#[derive(Debug, Default)]
struct Locks {
    by_rank: Vec<Option<(LockType, bool)>>,
    count: usize,
}

impl Locks {
    fn contains_key(&self, t: &usize) -> bool {
        self.by_rank.get(*t).is_some_and(Option::is_some)
    }

    fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn insert(&mut self, t: usize, v: (LockType, bool)) {
        if self.by_rank.len() <= t {
            self.by_rank.resize(t + 1, None);
        }
        if self.by_rank[t].replace(v).is_none() {
            self.count += 1;
        }
    }

    fn remove(&mut self, t: &usize) -> Option<(LockType, bool)> {
        let v = self.by_rank.get_mut(*t)?.take();
        if v.is_some() {
            self.count -= 1;
        }
        v
    }
}

/// This rank's epochs.
#[derive(Debug, Default)]
struct Epochs {
    /// Inside a fence epoch (a fence without `MODE_NOSUCCEED` was called).
    fence: bool,
    lock_all: bool,
    /// Whether `lock_all` took the lock words (not under `MODE_NOCHECK`).
    lock_all_held: bool,
    /// Locked targets: the lock type, and whether the lock word was taken
    /// (not under `MODE_NOCHECK`, where the program vouches that no
    /// conflicting lock exists, as MPICH trusts it).
    locks: Locks,
    /// The targets of the access epoch `MPI_Win_start` opened.
    start: Option<Vec<usize>>,
    /// The origins of the exposure epoch `MPI_Win_post` opened.
    post: Option<Vec<usize>>,
    /// Posts consumed per target; completes consumed per origin.
    seen_post: Vec<u64>,
    seen_complete: Vec<u64>,
    /// Regions attached to a dynamic window: (base, size).
    attached: Vec<(u64, u64)>,
}

#[derive(Debug)]
struct WinInner {
    comm: Communicator,
    /// How the window reaches its targets.
    reach: Reach,
    flavor: WinFlavor,
    me: usize,
    peers: Vec<Peer>,
    epochs: Mutex<Epochs>,
    /// What the epochs allow per target, published whenever they change
    /// ([`EpochsGuard`]): [`PASSIVE`] and [`ACTIVE`] bits, read without the
    /// mutex by each operation's epoch check.
    access: Vec<AtomicU8>,
    freed: AtomicBool,
    /// Windows between nodes: the targets this rank reads and writes by
    /// RDMA (the btl that reaches each, and the target's descriptor of its
    /// memory); empty, or `None`, for the others (`rdma_runs`).
    rdma: Vec<Option<(usize, MemDesc)>>,
    /// This rank's window memory as exposed to peers' RDMA, given back when
    /// the window is freed.
    exposed: Option<(usize, MemDesc)>,
    /// Puts and gets done by RDMA, and by active messages (the debug line
    /// of `MPI_Win_free`).
    by_rdma: AtomicU64,
    by_am: AtomicU64,
}

/// The transport of a window, chosen at creation for all its targets.
#[derive(Debug)]
enum Reach {
    /// Every rank on one node: the shared area (and CMA).
    Shm(WinArea),
    /// Ranks on more than one node: active messages (`am.rs`).
    Am(am::Origin),
}

impl Reach {
    fn area(&self) -> Option<&WinArea> {
        match self {
            Reach::Shm(a) => Some(a),
            Reach::Am(_) => None,
        }
    }
}

/// Access bits of [`WinInner::access`]: a lock (or `lock_all`) covers the
/// target; a fence epoch or the start group does.
const PASSIVE: u8 = 1;
const ACTIVE: u8 = 2;

/// The epochs, locked; publishes the access bits when let go.
struct EpochsGuard<'a> {
    g: MutexGuard<'a, Epochs>,
    access: &'a [AtomicU8],
}

impl std::ops::Deref for EpochsGuard<'_> {
    type Target = Epochs;
    fn deref(&self) -> &Epochs {
        &self.g
    }
}

impl std::ops::DerefMut for EpochsGuard<'_> {
    fn deref_mut(&mut self) -> &mut Epochs {
        &mut self.g
    }
}

impl Drop for EpochsGuard<'_> {
    fn drop(&mut self) {
        let ep = &*self.g;
        for (t, a) in self.access.iter().enumerate() {
            let mut bits = 0;
            if ep.lock_all || ep.locks.contains_key(&t) {
                bits |= PASSIVE;
            }
            if ep.fence || ep.start.as_ref().is_some_and(|g| g.contains(&t)) {
                bits |= ACTIVE;
            }
            a.store(bits, Ordering::Relaxed);
        }
    }
}

/// A one-sided communication window (the runtime's; the C ABI and the
/// typed Rust API sit on it). Cloning refers to the same window.
#[derive(Debug, Clone)]
pub struct Window {
    inner: Arc<WinInner>,
}

/// Where an operation touches its target: the target rank and the byte
/// runs, as offsets from the target's base (absolute addresses for
/// dynamic windows).
struct Runs {
    target: usize,
    /// The runs (one, without allocating, for dense datatypes).
    one: Option<(i128, usize)>,
    many: Vec<(i128, usize)>,
    bytes: usize,
}

impl Runs {
    fn iter(&self) -> impl Iterator<Item = (i128, usize)> + '_ {
        self.one.into_iter().chain(self.many.iter().copied())
    }
}

/// Runs of one RDMA operation beyond which each must average
/// [`RDMA_MIN_RUN`] bytes for RDMA to be used (else one active message
/// carries them all).
const RDMA_MAX_RUNS: usize = 16;
const RDMA_MIN_RUN: usize = 4096;
/// How long a failed wait still waits for RDMA transfers in flight.
const RDMA_DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Windows between nodes: expose this rank's window memory (host memory of
/// `MPI_Win_create` or `MPI_Win_allocate`, `rma_rdma` on) to peers' RDMA
/// through the btl that offers it, tell every rank, and find the targets
/// this rank reaches so: those that exposed theirs and that this rank's
/// messages reach through such a btl. Collective. Returns the exposure
/// (given back at `MPI_Win_free`) and the targets' descriptors.
#[allow(clippy::type_complexity)]
fn rdma_targets(
    private: &Communicator,
    call: &'static str,
    flavor: WinFlavor,
    base: u64,
    size: u64,
    on_device: bool,
) -> Result<(Option<(usize, MemDesc)>, Vec<Option<(usize, MemDesc)>>)> {
    let me = private.rank() as usize;
    let n = private.size() as usize;
    let want = matches!(flavor, WinFlavor::Create | WinFlavor::Allocate) && !on_device && size > 0;
    let world = private.inner.peers().to_vec();
    // Exposed only where some other rank of the window is reached through
    // such a btl (its route back is the same kind): pinned memory nobody
    // could write is not registered.
    let exposed = engine::with(call, |e| {
        let reached = (0..n).any(|t| t != me && e.driver.rdma_route(world[t]).is_some());
        Ok(if want && reached && e.cfg.rma_rdma {
            e.driver.expose_window(base, size)
        } else {
            None
        })
    })?;
    let mine = match exposed {
        Some((_, d)) => [1, d.addr, d.len, d.key],
        None => [0; 4],
    };
    let mut all = vec![0u64; 4 * n];
    if let Err(err) = private.allgather(&mine[..], &mut all[..]) {
        if let Some((btl, d)) = exposed {
            engine::with(call, |e| {
                e.driver.unexpose_window(btl, &d);
                Ok(())
            })?;
        }
        return Err(err);
    }
    let rdma = engine::with(call, |e| {
        let on = e.cfg.rma_rdma;
        Ok((0..n)
            .map(|t| {
                let w = &all[4 * t..4 * t + 4];
                if t == me || w[0] == 0 || !on {
                    return None;
                }
                let btl = e.driver.rdma_route(world[t])?;
                Some((
                    btl,
                    MemDesc {
                        addr: w[1],
                        len: w[2],
                        key: w[3],
                    },
                ))
            })
            .collect())
    })?;
    Ok((exposed, rdma))
}

/// Words of a CUDA IPC descriptor on the wire of window creation: the
/// handle's 64 bytes, base, buffer id, offset, length, and a success flag.
const DESC_WORDS: usize = 13;

/// Windows on GPU memory: every rank whose window memory is device memory
/// exports it by CUDA IPC, and every other rank maps it (one node: the
/// window's ranks share it), so that operations copy straight into and out
/// of the target's memory with no call from the target. Collective: a rank
/// that cannot export or map fails every rank's creation.
fn map_device_memory(
    comm: &Communicator,
    call: &'static str,
    peers: &mut [Peer],
    all: &[u64],
    on_device: bool,
) -> Result<()> {
    let me = comm.rank() as usize;
    let n = peers.len();
    let gpu = engine::gpu();
    let mut mine = [0u64; DESC_WORDS];
    let mut why = None;
    if on_device {
        match gpu.ipc_export(peers[me].base, peers[me].size as usize) {
            Ok(d) => {
                for (w, c) in mine.iter_mut().zip(d.handle.0.chunks(8)) {
                    *w = u64::from_ne_bytes(c.try_into().expect("8-byte chunks"));
                }
                mine[8..12].copy_from_slice(&[d.base, d.buffer_id, d.offset, d.len]);
                mine[12] = 1;
            }
            Err(e) => {
                why = Some(format!(
                    "rank {me} cannot export its device memory by CUDA IPC: {e}"
                ))
            }
        }
    }
    let mut descs = vec![0u64; DESC_WORDS * n];
    comm.allgather(&mine[..], &mut descs[..])?;
    for r in 0..n {
        if all[F * r + 4] == 0 {
            continue;
        }
        if r == me {
            peers[r].dev = peers[r].base;
            continue;
        }
        let w = &descs[DESC_WORDS * r..DESC_WORDS * (r + 1)];
        if w[12] == 0 {
            // That rank says why itself.
            why.get_or_insert_with(|| format!("rank {r} cannot export its device memory"));
            continue;
        }
        let mut handle = [0u8; 64];
        for (c, word) in handle.chunks_mut(8).zip(&w[..8]) {
            c.copy_from_slice(&word.to_ne_bytes());
        }
        let d = gmpi_gpu::IpcDesc {
            handle: gmpi_gpu::IpcHandle(handle),
            base: w[8],
            buffer_id: w[9],
            offset: w[10],
            len: w[11],
        };
        match gpu.ipc_map(comm.inner.world[r], &d) {
            Ok(a) => peers[r].dev = a,
            Err(e) => {
                why.get_or_insert_with(|| {
                    format!("rank {me} cannot map rank {r}'s device memory by CUDA IPC: {e}")
                });
            }
        }
    }
    let ok = [u32::from(why.is_none())];
    let mut all_ok = [0u32];
    comm.allreduce(&ok[..], &mut all_ok[..], Op::Min)?;
    if all_ok[0] == 1 {
        tracing::debug!(target: "rma", "{call}: device memory reached by CUDA IPC");
        return Ok(());
    }
    Err(Error::new(
        ErrorClass::Unsupported,
        call,
        me as i32,
        format!(
            "windows on GPU memory need CUDA IPC between their ranks, which failed ({})",
            why.as_deref().unwrap_or("on another rank")
        ),
    ))
}

/// How the C ABI's leanest accumulate combines ([`Window::acc_raw`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum AccHow {
    /// `MPI_REPLACE`.
    Replace,
    /// `MPI_NO_OP`.
    NoOp,
    /// The element-wise kernel of a predefined operation.
    Kernel(fn(&[u8], &mut [u8])),
}

impl AccHow {
    /// How `op` combines elements of `p`; `None` where only the general
    /// path can (undefined pairs, the location operations, user
    /// functions), which names the error if there is one.
    #[inline(always)]
    pub fn of(op: &Op, p: Primitive) -> Option<AccHow> {
        Some(match op {
            Op::Replace => AccHow::Replace,
            Op::NoOp => AccHow::NoOp,
            Op::User(_) => return None,
            _ => AccHow::Kernel(crate::op::kernel(op, p)?),
        })
    }
}

/// `dst.copy_from_slice(src)`, without a `memcpy` call for the element
/// sizes of one-element operations (fetch-and-op, compare-and-swap).
#[inline(always)]
fn copy_small(dst: &mut [u8], src: &[u8]) {
    match (
        dst.len(),
        <&[u8; 8]>::try_from(src),
        <&[u8; 4]>::try_from(src),
    ) {
        (8, Ok(s), _) => dst.copy_from_slice(s),
        (4, _, Ok(s)) => dst.copy_from_slice(s),
        _ => dst.copy_from_slice(src),
    }
}

/// Take an accumulate mutex (a word of the shared area): spin briefly,
/// then yield. Released by storing 0. Nothing inside it can fail or
/// panic but the caller's work, whose unwinding [`Window::with_acc`]
/// guards.
#[inline]
fn acc_lock(word: &std::sync::atomic::AtomicU32) {
    let mut k = 0u32;
    while word
        .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        k = k.saturating_add(1);
        if k < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

impl Window {
    fn err(&self, class: ErrorClass, call: &str, what: impl std::fmt::Display) -> Error {
        Error::new(class, call, self.inner.comm.rank(), what)
    }

    /// The shared area of a window on one node (only the one-node paths
    /// call this).
    fn area(&self) -> &WinArea {
        self.inner
            .reach
            .area()
            .expect("a window on one node has its shared area")
    }

    /// Whether the window's ranks are on more than one node (its
    /// operations are active messages).
    #[inline]
    fn is_am(&self) -> bool {
        matches!(self.inner.reach, Reach::Am(_))
    }

    /// Set up a window over `comm` (collective). `size`, `disp_unit` and
    /// `base` are this rank's; `in_area` puts every rank's memory in the
    /// shared area (allocated flavors).
    fn make(
        comm: &Communicator,
        call: &'static str,
        flavor: WinFlavor,
        base: u64,
        size: usize,
        disp_unit: isize,
    ) -> Result<Window> {
        comm.check_live(call)?;
        let me = comm.rank();
        if comm.is_inter() {
            return Err(Error::new(
                ErrorClass::Comm,
                call,
                me,
                "comm is an intercommunicator; windows need an intracommunicator",
            ));
        }
        if disp_unit <= 0 && flavor != WinFlavor::Dynamic {
            return Err(Error::new(
                ErrorClass::Disp,
                call,
                me,
                format!("disp_unit = {disp_unit}; it must be positive"),
            ));
        }
        let on_device = flavor == WinFlavor::Create
            && size > 0
            && !engine::gpu()
                .classify(base, size)
                .map(|k| k.is_host())
                .unwrap_or(true);
        // Every rank learns every rank's memory (and whether any failed).
        let mine = [
            u64::from(std::process::id()),
            base,
            size as u64,
            disp_unit as i64 as u64,
            u64::from(on_device),
            std::ptr::addr_of!(PROBE) as u64,
        ];
        let n = comm.size() as usize;
        let mut all = vec![0u64; F * n];
        comm.allgather(&mine[..], &mut all[..])?;
        let mut peers: Vec<Peer> = (0..n)
            .map(|r| Peer {
                pid: all[F * r],
                base: all[F * r + 1],
                size: all[F * r + 2],
                disp_unit: all[F * r + 3] as i64,
                dev: 0,
            })
            .collect();
        if !comm.inner.single_node {
            return Self::make_am(comm, call, flavor, peers, on_device);
        }
        if (0..n).any(|r| all[F * r + 4] != 0) {
            map_device_memory(comm, call, &mut peers, &all, on_device)?;
        }
        let private = comm.dup()?;
        let in_area = matches!(flavor, WinFlavor::Allocate | WinFlavor::Shared);
        if !in_area {
            // The program's memory is reached by CMA: find out now, on every
            // rank alike, whether the system allows it (Yama's ptrace_scope,
            // containers and LSMs may forbid it).
            let failed = (0..n).filter(|&r| r != me as usize).find_map(|r| {
                let mut word = [0u8; 8];
                match cma_read(all[F * r], all[F * r + 5], &mut word) {
                    Ok(()) if word == PROBE.to_ne_bytes() => None,
                    Ok(()) => Some(format!("rank {r}'s probe word read back wrong")),
                    Err(e) => Some(format!("rank {r}: {e}")),
                }
            });
            let ok = [u32::from(failed.is_none())];
            let mut all_ok = [0u32];
            private.allreduce(&ok[..], &mut all_ok[..], Op::Min)?;
            if all_ok[0] == 0 {
                let _ = private.free();
                return Err(Error::new(
                    ErrorClass::Unsupported,
                    call,
                    me,
                    format!(
                        "windows over the program's own memory need Cross Memory Attach between \
                         the ranks, which this system forbids ({}); MPI_Win_allocate works \
                         without it",
                        failed.as_deref().unwrap_or("on another rank")
                    ),
                ));
            }
        }
        let sizes: Vec<u64> = peers
            .iter()
            .map(|p| if in_area { p.size } else { 0 })
            .collect();
        let prefix = engine::with(call, |e| Ok(e.shm_prefix.clone()))?
            .unwrap_or_else(|| "/dev/shm/gmpi".to_string());
        let path = format!(
            "{prefix}-win{}-{}-{}",
            private.inner.ctx, private.inner.world[0], peers[0].pid
        );
        let mut fence_err = None;
        let area = {
            let mut fence = || {
                private.barrier().map_err(|e| {
                    let s = e.to_string();
                    fence_err = Some(e);
                    s
                })
            };
            WinArea::bootstrap(
                &path,
                me as usize,
                &sizes,
                flavor == WinFlavor::Shared,
                &mut fence,
            )
        };
        if let Some(e) = fence_err {
            return Err(e);
        }
        // Agree: a rank that failed to attach fails everyone.
        let ok = [u32::from(area.is_ok())];
        let mut all_ok = [0u32];
        private.allreduce(&ok[..], &mut all_ok[..], Op::Min)?;
        let area = match area {
            Ok(a) if all_ok[0] == 1 => a,
            Ok(_) => {
                return Err(Error::new(
                    ErrorClass::Other,
                    call,
                    me,
                    "another rank could not set up the window's shared area",
                ))
            }
            Err(e) => {
                return Err(Error::new(
                    ErrorClass::Other,
                    call,
                    me,
                    format!("cannot set up the window's shared area: {e}"),
                ))
            }
        };
        if in_area {
            // Bases as the owners see them.
            for (r, p) in peers.iter_mut().enumerate() {
                p.base = area.base(r);
            }
        }
        let epochs = Epochs {
            seen_post: vec![0; n],
            seen_complete: vec![0; n],
            ..Epochs::default()
        };
        tracing::debug!(target: "rma", "{call}: window of {n} ranks ({flavor:?}, {size} bytes here)");
        Ok(Window {
            inner: Arc::new(WinInner {
                comm: private,
                reach: Reach::Shm(area),
                flavor,
                me: me as usize,
                peers,
                epochs: Mutex::new(epochs),
                access: (0..n).map(|_| AtomicU8::new(0)).collect(),
                freed: AtomicBool::new(false),
                rdma: Vec::new(),
                exposed: None,
                by_rdma: AtomicU64::new(0),
                by_am: AtomicU64::new(0),
            }),
        })
    }

    /// [`Window::make`] for ranks on more than one node: no shared area;
    /// every target, this rank included, is reached by active messages
    /// (`am.rs`), and this rank's memory is served by its agent.
    fn make_am(
        comm: &Communicator,
        call: &'static str,
        flavor: WinFlavor,
        mut peers: Vec<Peer>,
        on_device: bool,
    ) -> Result<Window> {
        let me = comm.rank();
        let n = peers.len();
        if flavor == WinFlavor::Shared {
            return Err(Error::new(
                ErrorClass::RmaShared,
                call,
                me,
                "the communicator's ranks are on more than one node, so they cannot share \
                 memory (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED gives a communicator of \
                 one node's ranks)",
            ));
        }
        let mine = &mut peers[me as usize];
        let own = (flavor == WinFlavor::Allocate).then(|| am::OwnMem::new(mine.size as usize));
        if let Some((_, addr)) = &own {
            mine.base = *addr;
        }
        if on_device {
            mine.dev = mine.base;
        }
        let (base, size) = (mine.base, mine.size);
        let private = comm.dup()?;
        let ctx = private.inner.ctx;
        let target = am::Target::new(&private, flavor, base, size, on_device, own.map(|(m, _)| m));
        engine::with(call, |e| {
            e.rma.add(ctx, target);
            Ok(())
        })?;
        if let Err(err) = am::start_progress_thread() {
            engine::with(call, |e| Ok(e.rma.remove(ctx)))?;
            return Err(Error::new(
                ErrorClass::Other,
                call,
                me,
                format!("cannot start the one-sided progress thread: {err}"),
            ));
        }
        let (exposed, rdma) = match rdma_targets(&private, call, flavor, base, size, on_device) {
            Ok(x) => x,
            Err(err) => {
                if !engine::with(call, |e| Ok(e.rma.remove(ctx)))? {
                    am::stop_progress_thread();
                }
                return Err(err);
            }
        };
        let epochs = Epochs {
            seen_post: vec![0; n],
            seen_complete: vec![0; n],
            ..Epochs::default()
        };
        let direct = rdma.iter().filter(|d| d.is_some()).count();
        tracing::debug!(
            target: "rma",
            "{call}: window of {n} ranks on more than one node ({flavor:?}, {size} bytes here): \
             active messages; put and get by RDMA to {direct} targets{}",
            if exposed.is_some() { ", this rank's memory exposed for RDMA" } else { "" }
        );
        Ok(Window {
            inner: Arc::new(WinInner {
                comm: private,
                reach: Reach::Am(am::Origin::default()),
                flavor,
                me: me as usize,
                peers,
                epochs: Mutex::new(epochs),
                access: (0..n).map(|_| AtomicU8::new(0)).collect(),
                freed: AtomicBool::new(false),
                rdma,
                exposed,
                by_rdma: AtomicU64::new(0),
                by_am: AtomicU64::new(0),
            }),
        })
    }

    /// A request to target `t` of a window between nodes, waited for; the
    /// reply's data lands in `out`.
    fn am_call(&self, call: &str, t: usize, req: am::Request, out: &mut [u8]) -> Result<()> {
        let Reach::Am(o) = &self.inner.reach else {
            unreachable!("only windows between nodes send requests")
        };
        am::call(&self.inner.comm, o, call, t, req, out)
    }

    /// An accumulate between nodes: applied by the target's agent, or, for
    /// an operation it cannot name (a function of this process), read,
    /// combined here and written back under the target's accumulate lock.
    /// The target's former bytes when `want_old`.
    fn am_acc(
        &self,
        call: &str,
        r: &Runs,
        op: &Op,
        el: Datatype,
        data: &[u8],
        want_old: bool,
    ) -> Result<Vec<u8>> {
        let t = r.target;
        let runs: Vec<(i128, usize)> = r.iter().collect();
        let mut old = vec![0u8; if want_old { r.bytes } else { 0 }];
        if let Some(code) = crate::op::code(op) {
            let req = am::Request::new(am::Kind::Acc, &runs, data.len())
                .acc(el, code, want_old)
                .data(data);
            self.am_call(call, t, req, &mut old)?;
            return Ok(old);
        }
        let simple = |k| am::Request::new(k, &[], 0);
        self.am_call(call, t, simple(am::Kind::AccLock), &mut [])?;
        let done = (|| {
            let mut cur = vec![0u8; r.bytes];
            self.read_runs(call, r, &mut cur)?;
            if want_old {
                old.copy_from_slice(&cur);
            }
            let n = r.bytes / el.size().max(1);
            crate::op::apply_datatype(op, el, n, data, &mut cur);
            self.write_runs(call, r, &cur)
        })();
        let unlocked = self.am_call(call, t, simple(am::Kind::AccUnlock), &mut []);
        done.and(unlocked).map(|()| old)
    }

    /// `MPI_Win_create`: a window over `size` bytes of the caller's memory
    /// at `base`, addressed in units of `disp_unit` bytes. Collective.
    ///
    /// # Safety
    /// `base..base + size` must stay valid, readable and writable memory of
    /// this process until the window is freed; other ranks read and write it
    /// at any time during their epochs.
    pub unsafe fn create_raw(
        comm: &Communicator,
        base: u64,
        size: usize,
        disp_unit: isize,
    ) -> Result<Window> {
        Self::over(comm, base, size, disp_unit)
    }

    /// `MPI_Win_create` over memory the caller has borrowed for the
    /// window's lifetime (the typed API's `Communicator::win_create`).
    pub(crate) fn over(
        comm: &Communicator,
        base: u64,
        size: usize,
        disp_unit: isize,
    ) -> Result<Window> {
        Self::make(
            comm,
            "MPI_Win_create",
            WinFlavor::Create,
            base,
            size,
            disp_unit,
        )
    }

    /// `MPI_Win_allocate` (`shared`: `MPI_Win_allocate_shared`): a window
    /// over `size` bytes gmpi allocates in shared memory, zeroed; its
    /// address is [`Window::base`]. Collective.
    pub fn allocate(
        comm: &Communicator,
        size: usize,
        disp_unit: isize,
        shared: bool,
    ) -> Result<Window> {
        let (call, flavor) = if shared {
            ("MPI_Win_allocate_shared", WinFlavor::Shared)
        } else {
            ("MPI_Win_allocate", WinFlavor::Allocate)
        };
        Self::make(comm, call, flavor, 0, size, disp_unit)
    }

    /// `MPI_Win_create_dynamic`: a window without memory; ranks attach
    /// regions and origins address them by absolute address. Collective.
    pub fn create_dynamic(comm: &Communicator) -> Result<Window> {
        Self::make(comm, "MPI_Win_create_dynamic", WinFlavor::Dynamic, 0, 0, 1)
    }

    /// This rank's window memory (its address in this process; 0 for a
    /// dynamic window).
    pub fn base(&self) -> u64 {
        self.inner.peers[self.inner.me].base
    }

    /// This rank's window size in bytes.
    pub fn size(&self) -> usize {
        self.inner.peers[self.inner.me].size as usize
    }

    /// This rank's displacement unit.
    pub fn disp_unit(&self) -> isize {
        self.inner.peers[self.inner.me].disp_unit as isize
    }

    /// How the window was made.
    pub fn flavor(&self) -> WinFlavor {
        self.inner.flavor
    }

    /// This rank's rank in the window's group.
    pub fn rank(&self) -> i32 {
        self.inner.me as i32
    }

    /// Ranks in the window's group.
    pub fn group_size(&self) -> i32 {
        self.inner.peers.len() as i32
    }

    /// The window's group (`MPI_Win_get_group`).
    pub fn group(&self) -> Group {
        self.inner.comm.group()
    }

    /// Whether [`Window::free`] ran.
    #[inline]
    pub fn is_freed(&self) -> bool {
        self.inner.freed.load(Ordering::Acquire)
    }

    fn check_live(&self, call: &str) -> Result<()> {
        if self.is_freed() {
            return Err(self.err(ErrorClass::Win, call, "the window was freed"));
        }
        Ok(())
    }

    fn epochs(&self) -> EpochsGuard<'_> {
        EpochsGuard {
            g: self.inner.epochs.lock().unwrap_or_else(|p| p.into_inner()),
            access: &self.inner.access,
        }
    }

    /// `MPI_Win_shared_query`: `rank`'s size, displacement unit and base
    /// address in this process ([`crate::PROC_NULL`]: the first rank with
    /// memory). Windows of `MPI_Win_create` (MPI 4.1) answer for this
    /// rank's own memory only (size 0 and NULL for the others, whose memory
    /// is reached by Cross Memory Attach, not load and store); dynamic
    /// windows have none.
    pub fn shared_query(&self, rank: i32) -> Result<(usize, isize, u64)> {
        const CALL: &str = "MPI_Win_shared_query";
        self.check_live(CALL)?;
        if self.inner.flavor == WinFlavor::Dynamic {
            return Err(self.err(
                ErrorClass::RmaFlavor,
                CALL,
                "a dynamic window has no memory of its own to query (only windows of \
                 MPI_Win_allocate_shared, MPI_Win_allocate and MPI_Win_create do)",
            ));
        }
        let n = self.inner.peers.len();
        let r = if rank == crate::PROC_NULL {
            match (0..n).find(|&r| self.inner.peers[r].size > 0) {
                Some(r) => r,
                None => return Ok((0, self.inner.peers[0].disp_unit as isize, 0)),
            }
        } else if rank < 0 || rank as usize >= n {
            return Err(self.err(
                ErrorClass::Rank,
                CALL,
                format!("rank = {rank}; the window has {n} ranks"),
            ));
        } else {
            rank as usize
        };
        let p = self.inner.peers[r];
        if self.inner.flavor == WinFlavor::Create || self.is_am() {
            // MPI 4.1: memory not reachable by load and store (CMA on one
            // node, messages between nodes) answers size 0 and NULL; this
            // rank's own memory is.
            return Ok(if r == self.inner.me {
                (p.size as usize, p.disp_unit as isize, p.base)
            } else {
                (0, p.disp_unit as isize, 0)
            });
        }
        Ok((p.size as usize, p.disp_unit as isize, self.area().base(r)))
    }

    /// `MPI_Win_attach`: expose `size` bytes at `base` through this dynamic
    /// window.
    ///
    /// # Safety
    /// `base..base + size` must stay valid, writable memory of this process
    /// until it is detached or the window freed.
    pub unsafe fn attach(&self, base: u64, size: usize) -> Result<()> {
        const CALL: &str = "MPI_Win_attach";
        self.check_live(CALL)?;
        if self.inner.flavor != WinFlavor::Dynamic {
            return Err(self.err(
                ErrorClass::RmaFlavor,
                CALL,
                "the window is not dynamic (MPI_Win_create_dynamic)",
            ));
        }
        if size > 0
            && !engine::gpu()
                .classify(base, size)
                .map(|k| k.is_host())
                .unwrap_or(true)
        {
            // Attached regions are reached by Cross Memory Attach.
            return Err(self.err(
                ErrorClass::Unsupported,
                CALL,
                format!(
                    "{size} bytes at {base:#x} are GPU memory; dynamic windows take host \
                     memory only (MPI_Win_create takes GPU memory)"
                ),
            ));
        }
        let mut ep = self.epochs();
        let end = base.saturating_add(size as u64);
        if size > 0
            && ep
                .attached
                .iter()
                .any(|&(b, s)| base < b.saturating_add(s) && b < end)
        {
            return Err(self.err(
                ErrorClass::RmaAttach,
                CALL,
                format!("{size} bytes at {base:#x} overlap a region already attached"),
            ));
        }
        ep.attached.push((base, size as u64));
        drop(ep);
        self.am_attached(CALL, |a| a.push((base, size as u64)))
    }

    /// Between nodes, the agent checks addresses against the regions
    /// attached: change its list as this rank's.
    fn am_attached(&self, call: &str, f: impl FnOnce(&mut Vec<(u64, u64)>)) -> Result<()> {
        if !self.is_am() {
            return Ok(());
        }
        let ctx = self.inner.comm.inner.ctx;
        engine::with(call, |e| {
            if let Some(t) = e.rma.target(ctx) {
                f(&mut t.attached);
            }
            Ok(())
        })
    }

    /// `MPI_Win_detach`: stop exposing the region attached at `base`.
    pub fn detach(&self, base: u64) -> Result<()> {
        const CALL: &str = "MPI_Win_detach";
        self.check_live(CALL)?;
        if self.inner.flavor != WinFlavor::Dynamic {
            return Err(self.err(
                ErrorClass::RmaFlavor,
                CALL,
                "the window is not dynamic (MPI_Win_create_dynamic)",
            ));
        }
        let mut ep = self.epochs();
        match ep.attached.iter().position(|&(b, _)| b == base) {
            Some(i) => {
                ep.attached.remove(i);
                drop(ep);
                self.am_attached(CALL, |a| {
                    if let Some(j) = a.iter().position(|&(b, _)| b == base) {
                        a.remove(j);
                    }
                })
            }
            None => Err(self.err(
                ErrorClass::RmaAttach,
                CALL,
                format!("no region is attached at {base:#x}"),
            )),
        }
    }

    // ---- targets ----

    fn target_rank(&self, call: &str, target: i32) -> Result<Option<usize>> {
        let n = self.inner.peers.len();
        if target == crate::PROC_NULL {
            return Ok(None);
        }
        if target < 0 || target as usize >= n {
            return Err(self.err(
                ErrorClass::Rank,
                call,
                format!("target_rank = {target}; the window has {n} ranks"),
            ));
        }
        Ok(Some(target as usize))
    }

    /// The access epoch check: an operation on `t` needs a fence epoch,
    /// a lock on `t` (or lock_all), or `t` in the start group.
    #[inline]
    fn check_access(&self, call: &str, t: usize, passive_only: bool) -> Result<()> {
        let bits = self.inner.access[t].load(Ordering::Relaxed);
        if bits & PASSIVE != 0 || (!passive_only && bits & ACTIVE != 0) {
            return Ok(());
        }
        Err(self.err(
            ErrorClass::RmaSync,
            call,
            if passive_only {
                format!(
                    "no passive-target epoch is open to rank {t} (request-based operations \
                     need MPI_Win_lock or MPI_Win_lock_all)"
                )
            } else {
                format!("no access epoch is open to rank {t} (fence, start or lock first)")
            },
        ))
    }

    /// Where `count` elements of `dt` at displacement `disp` of target `t`
    /// lie, checked against the target's window.
    fn runs(
        &self,
        call: &str,
        t: usize,
        disp: isize,
        count: usize,
        dt: &UserDatatype,
    ) -> Result<Runs> {
        if !dt.is_committed() {
            return Err(self.err(ErrorClass::Type, call, "target_datatype is not committed"));
        }
        let p = self.inner.peers[t];
        if disp < 0 && self.inner.flavor != WinFlavor::Dynamic {
            return Err(self.err(
                ErrorClass::Disp,
                call,
                format!("target_disp = {disp}; it must not be negative"),
            ));
        }
        let start = disp as i128 * p.disp_unit as i128;
        let desc = dt.desc();
        let r = match desc.dense_run(count) {
            Some((o, l)) => Runs {
                target: t,
                one: (l > 0).then_some((start + o as i128, l)),
                many: Vec::new(),
                bytes: l,
            },
            None => {
                let many: Vec<(i128, usize)> = desc
                    .segments(count)
                    .into_iter()
                    .map(|(o, l)| (start + o as i128, l))
                    .collect();
                let bytes = many.iter().map(|r| r.1).sum();
                Runs {
                    target: t,
                    one: None,
                    many,
                    bytes,
                }
            }
        };
        if self.inner.flavor != WinFlavor::Dynamic {
            for (o, l) in r.iter() {
                if o < 0 || o + l as i128 > p.size as i128 {
                    return Err(self.err(
                        ErrorClass::RmaRange,
                        call,
                        format!(
                            "the access touches bytes {o}..{} of rank {t}'s window, which has {} \
                             bytes",
                            o + l as i128,
                            p.size
                        ),
                    ));
                }
            }
        }
        Ok(r)
    }

    fn read_runs(&self, call: &str, r: &Runs, out: &mut [u8]) -> Result<()> {
        if self.is_am() {
            let (at, len) = (out.as_mut_ptr() as u64, out.len());
            // SAFETY: `out` is borrowed mutably for this call, and
            // `rdma_runs` ends every transfer before it returns.
            let rdma = unsafe { self.rdma_runs(call, r, at, len, false) };
            if let Some(done) = rdma {
                return done;
            }
            self.inner.by_am.fetch_add(1, Ordering::Relaxed);
            let runs: Vec<(i128, usize)> = r.iter().collect();
            let req = am::Request::new(am::Kind::Get, &runs, 0);
            return self.am_call(call, r.target, req, out);
        }
        let mut pos = 0;
        for (o, l) in r.iter() {
            self.read_at(call, r.target, o, &mut out[pos..pos + l])?;
            pos += l;
        }
        Ok(())
    }

    fn write_runs(&self, call: &str, r: &Runs, data: &[u8]) -> Result<()> {
        if self.is_am() {
            let (at, len) = (data.as_ptr() as u64, data.len());
            // SAFETY: `data` is borrowed for this call (read only), and
            // `rdma_runs` ends every transfer before it returns.
            let rdma = unsafe { self.rdma_runs(call, r, at, len, true) };
            if let Some(done) = rdma {
                return done;
            }
            self.inner.by_am.fetch_add(1, Ordering::Relaxed);
            let runs: Vec<(i128, usize)> = r.iter().collect();
            let req = am::Request::new(am::Kind::Put, &runs, data.len()).data(data);
            return self.am_call(call, r.target, req, &mut []);
        }
        let mut pos = 0;
        for (o, l) in r.iter() {
            self.write_at(call, r.target, o, &data[pos..pos + l])?;
            pos += l;
        }
        Ok(())
    }

    /// Read the runs `r` of a target between nodes into the `len` bytes at
    /// `local` (`write` false), or write them from there, by RDMA READ or
    /// WRITE, waiting until every transfer has ended: `None` where this
    /// rank does not reach the target so (see [`rdma_targets`]), the local
    /// memory is not host memory, or the runs are too many and small to be
    /// worth a transfer each (one active message carries them all).
    ///
    /// # Safety
    /// `local..local + len` is valid for writes (for reads with `write`)
    /// and nothing else touches it during the call: the caller's borrow.
    unsafe fn rdma_runs(
        &self,
        call: &str,
        r: &Runs,
        local: u64,
        len: usize,
        write: bool,
    ) -> Option<Result<()>> {
        let (btl, desc) = (*self.inner.rdma.get(r.target)?)?;
        let runs = usize::from(r.one.is_some()) + r.many.len();
        if r.bytes == 0
            || len < r.bytes
            || (runs > RDMA_MAX_RUNS && r.bytes < runs * RDMA_MIN_RUN)
            || !is_host_memory(local, len)
        {
            return None;
        }
        let peer = self.inner.comm.inner.peers()[r.target];
        let me = self.rank();
        self.inner.by_rdma.fetch_add(1, Ordering::Relaxed);
        Some(engine::with(call, |e| {
            let mut tokens = Vec::new();
            let mut failed = None;
            let mut pos = 0u64;
            for (o, l) in r.iter() {
                if l == 0 {
                    continue;
                }
                let m = LocalMem {
                    addr: local + pos,
                    len: l,
                };
                pos += l as u64;
                // SAFETY: `m` lies in the caller's borrow (the runs add up
                // to `r.bytes` ≤ `len`), which outlasts every transfer: this
                // returns only once each has ended, by the wait below or,
                // when that fails, `rdma_drain`.
                match unsafe { e.driver.rdma_start(btl, peer, &desc, o as u64, m, write) } {
                    Ok(None) => {}
                    Ok(Some(t)) => tokens.push(t),
                    Err(why) => {
                        failed = Some(why);
                        break;
                    }
                }
            }
            let waited = e.wait_until(call, |e| {
                tokens.retain(|&t| match e.driver.rdma_take(t) {
                    None => true,
                    Some(res) => {
                        if let Err(why) = res {
                            failed.get_or_insert(why);
                        }
                        false
                    }
                });
                Ok(tokens.is_empty())
            });
            if waited.is_err() {
                e.driver.rdma_drain(&mut tokens, RDMA_DRAIN_LIMIT);
            }
            waited?;
            match failed {
                None => Ok(()),
                Some(why) => Err(Error::new(
                    ErrorClass::Other,
                    call,
                    me,
                    format!(
                        "RDMA {} of rank {}'s window memory failed: {why}",
                        if write { "WRITE into" } else { "READ" },
                        r.target
                    ),
                )),
            }
        }))
    }

    fn cma_err(&self, call: &str, t: usize, what: String) -> Error {
        let class = if self.inner.flavor == WinFlavor::Dynamic && what.contains("os error 14") {
            ErrorClass::RmaRange
        } else {
            ErrorClass::Other
        };
        self.err(
            class,
            call,
            format!("cannot reach rank {t}'s window memory by Cross Memory Attach: {what}"),
        )
    }

    fn dev_err(&self, call: &str, t: usize, e: gmpi_gpu::GpuError) -> Error {
        self.err(
            ErrorClass::Other,
            call,
            format!("a device copy to or from rank {t}'s window memory failed: {e}"),
        )
    }

    fn read_at(&self, call: &str, t: usize, off: i128, out: &mut [u8]) -> Result<()> {
        let p = self.inner.peers[t];
        match self.inner.flavor {
            WinFlavor::Allocate | WinFlavor::Shared => self
                .area()
                .read(t, off as usize, out)
                .map_err(|e| self.err(ErrorClass::RmaRange, call, e)),
            WinFlavor::Create if p.dev != 0 => engine::gpu()
                .copy_to_host(out, (p.dev as i128 + off) as u64)
                .map(|_| ())
                .map_err(|e| self.dev_err(call, t, e)),
            WinFlavor::Create => cma_read(p.pid, (p.base as i128 + off) as u64, out)
                .map_err(|e| self.cma_err(call, t, e)),
            WinFlavor::Dynamic => {
                cma_read(p.pid, off as u64, out).map_err(|e| self.cma_err(call, t, e))
            }
        }
    }

    fn write_at(&self, call: &str, t: usize, off: i128, data: &[u8]) -> Result<()> {
        let p = self.inner.peers[t];
        match self.inner.flavor {
            WinFlavor::Allocate | WinFlavor::Shared => self
                .area()
                .write(t, off as usize, data)
                .map_err(|e| self.err(ErrorClass::RmaRange, call, e)),
            WinFlavor::Create if p.dev != 0 => engine::gpu()
                .copy_to_device((p.dev as i128 + off) as u64, data)
                .map(|_| ())
                .map_err(|e| self.dev_err(call, t, e)),
            WinFlavor::Create => cma_write(p.pid, (p.base as i128 + off) as u64, data)
                .map_err(|e| self.cma_err(call, t, e)),
            WinFlavor::Dynamic => {
                cma_write(p.pid, off as u64, data).map_err(|e| self.cma_err(call, t, e))
            }
        }
    }

    fn check_sizes(&self, call: &str, what: &str, have: usize, want: usize) -> Result<()> {
        if have != want {
            return Err(self.err(
                ErrorClass::Type,
                call,
                format!(
                    "the {what} holds {have} bytes but the target datatype and count describe \
                     {want}: their type signatures must match"
                ),
            ));
        }
        Ok(())
    }

    /// Wait for `ready` on the window's behalf, progressing everything else.
    fn wait_for(&self, call: &str, mut ready: impl FnMut() -> bool) -> Result<()> {
        let mut k = 0u32;
        while !ready() {
            k = k.saturating_add(1);
            engine::with(call, |e| e.idle_flags(call, k))?;
        }
        Ok(())
    }

    /// Run `f` holding target `t`'s accumulate mutex.
    fn with_acc<R>(&self, t: usize, f: impl FnOnce() -> Result<R>) -> Result<R> {
        let word = self.area().acc_word(t);
        acc_lock(word);
        // Released on every way out, a panic included (the other ranks
        // would wait for it forever).
        struct Held<'a>(&'a std::sync::atomic::AtomicU32);
        impl Drop for Held<'_> {
            fn drop(&mut self) {
                self.0.store(0, Ordering::Release);
            }
        }
        let _held = Held(word);
        f()
    }

    // ---- operations ----

    /// The checks every operation makes (a live window, a valid target, an
    /// open access epoch to it) and where it touches the target; `None` for
    /// `MPI_PROC_NULL`, which makes the operation a no-op.
    fn target(
        &self,
        call: &str,
        target: i32,
        disp: isize,
        count: usize,
        dt: &UserDatatype,
    ) -> Result<Option<Runs>> {
        self.check_live(call)?;
        let Some(t) = self.target_rank(call, target)? else {
            return Ok(None);
        };
        self.check_access(call, t, false)?;
        self.runs(call, t, disp, count, dt).map(Some)
    }

    /// `MPI_Put`: write `origin` to `count` elements of `dt` at `disp` of
    /// `target`'s window.
    pub fn put(
        &self,
        call: &str,
        origin: &View,
        target: i32,
        disp: isize,
        count: usize,
        dt: &UserDatatype,
    ) -> Result<()> {
        let Some(r) = self.target(call, target, disp, count, dt)? else {
            return Ok(());
        };
        self.check_sizes(call, "origin buffer", origin.packed_size(), r.bytes)?;
        tracing::trace!(target: "rma", "{call}: {} B to rank {target} at {:?}", r.bytes, r.iter().next());
        // Contiguous host data goes straight from the origin buffer.
        if let Some(done) = origin.read_contig(|data| self.write_runs(call, &r, data)) {
            return done;
        }
        let mut data = vec![0u8; r.bytes];
        origin.pack_to(call, self.rank(), &mut data)?;
        self.write_runs(call, &r, &data)
    }

    /// The C ABI's hot path of `MPI_Put`: `data` (contiguous elements of
    /// one predefined type, host memory the caller classified and lends for
    /// the call) to the same elements at `disp` of `target`, on a window
    /// whose memory is in the shared area (allocated flavors), in an open
    /// epoch. `None` wherever any of that does not hold or the call would
    /// fail (a bad rank or displacement, no epoch): the caller then takes
    /// [`Window::put`], which checks everything and names the error.
    #[doc(hidden)]
    #[inline]
    pub fn put_raw(&self, call: &str, data: &[u8], target: i32, disp: isize) -> Option<Result<()>> {
        let (t, off) = self.basic_target(target, disp)?;
        let area = self.inner.reach.area()?;
        Some(
            area.write(t, off, data)
                .map_err(|e| self.err(ErrorClass::RmaRange, call, e)),
        )
    }

    /// [`Window::put_raw`] for `MPI_Get`: into `out`.
    #[doc(hidden)]
    #[inline]
    pub fn get_raw(
        &self,
        call: &str,
        out: &mut [u8],
        target: i32,
        disp: isize,
    ) -> Option<Result<()>> {
        let (t, off) = self.basic_target(target, disp)?;
        let area = self.inner.reach.area()?;
        Some(
            area.read(t, off, out)
                .map_err(|e| self.err(ErrorClass::RmaRange, call, e)),
        )
    }

    /// The target offset of the hot paths ([`Window::put_raw`] and
    /// the accumulates'): `target`'s slot and the byte offset of `disp`,
    /// on a live window in the shared area with an epoch open to it;
    /// `None` otherwise (the general path checks and names the error).
    #[inline]
    fn basic_target(&self, target: i32, disp: isize) -> Option<(usize, usize)> {
        let i = &*self.inner;
        if !matches!(i.flavor, WinFlavor::Allocate | WinFlavor::Shared)
            || i.reach.area().is_none()
            || disp < 0
            || self.is_freed()
        {
            return None;
        }
        let t = usize::try_from(target)
            .ok()
            .filter(|&t| t < i.peers.len())?;
        if i.access[t].load(Ordering::Relaxed) == 0 {
            return None;
        }
        Some((
            t,
            (disp as usize).checked_mul(i.peers[t].disp_unit as usize)?,
        ))
    }

    /// The C ABI's leanest accumulate (`MPI_Accumulate`,
    /// `MPI_Get_accumulate`, `MPI_Fetch_and_op` of one predefined type on
    /// both sides): `src` (empty with `AccHow::NoOp`) combined by `how`
    /// into the same bytes at `disp` of `target`, their former contents
    /// into `old`; host memory the caller classified and lends for the
    /// call, on a window in the shared area with an epoch open to `target`.
    /// `None` where any of that does not hold: the caller takes the general
    /// path, which checks everything and names the error.
    #[doc(hidden)]
    #[inline]
    pub fn acc_raw(
        &self,
        call: &str,
        target: i32,
        disp: isize,
        src: &[u8],
        old: Option<&mut [u8]>,
        how: AccHow,
    ) -> Option<Result<()>> {
        let (t, off) = self.basic_target(target, disp)?;
        let area = self.inner.reach.area()?;
        let len = old.as_ref().map_or(src.len(), |o| o.len());
        if !matches!(how, AccHow::NoOp) && src.len() != len {
            return None;
        }
        let word = area.acc_word(t);
        acc_lock(word);
        let r = area.modify(t, off, len, |cur| {
            if let Some(o) = old {
                copy_small(o, cur);
            }
            match how {
                AccHow::Kernel(k) => k(src, cur),
                AccHow::Replace => copy_small(cur, src),
                AccHow::NoOp => {}
            }
        });
        word.store(0, Ordering::Release);
        Some(r.map_err(|e| self.err(ErrorClass::RmaRange, call, e)))
    }

    /// The C ABI's hot path of `MPI_Compare_and_swap`: host buffers of one
    /// element of an integer, logical or byte type, as
    /// [`Window::acc_raw`]; `None` otherwise.
    #[doc(hidden)]
    #[inline]
    pub fn cas_basic(
        &self,
        call: &str,
        origin: &View,
        compare: &View,
        result: &View,
        target: i32,
        disp: isize,
    ) -> Option<Result<()>> {
        let (t, off) = self.basic_target(target, disp)?;
        let p = origin.ty.prim().filter(|&q| crate::op::compares_bits(q))?;
        let len = origin.bytes();
        let same = |v: &View| v.ty.prim() == Some(p) && v.bytes() == len;
        if !same(origin) || !same(compare) || !same(result) {
            return None;
        }
        let range = |e: String| self.err(ErrorClass::RmaRange, call, e);
        origin.read_contig(|new| {
            compare.read_contig(|cmp| {
                result.write_contig(|out| {
                    self.with_acc(t, || {
                        self.area()
                            .modify(t, off, len, |cur| {
                                out.copy_from_slice(cur);
                                if cur == cmp {
                                    cur.copy_from_slice(new);
                                }
                            })
                            .map_err(range)
                    })
                })
            })
        })??
    }

    /// `MPI_Get`: read `count` elements of `dt` at `disp` of `target`'s
    /// window into `origin`.
    pub fn get(
        &self,
        call: &str,
        origin: &View,
        target: i32,
        disp: isize,
        count: usize,
        dt: &UserDatatype,
    ) -> Result<()> {
        let Some(r) = self.target(call, target, disp, count, dt)? else {
            return Ok(());
        };
        self.check_sizes(call, "origin buffer", origin.packed_size(), r.bytes)?;
        tracing::trace!(target: "rma", "{call}: {} B from rank {target} at {:?}", r.bytes, r.iter().next());
        // Into a contiguous host buffer directly.
        if let Some(done) = origin.write_contig(|out| self.read_runs(call, &r, out)) {
            return done;
        }
        let mut data = vec![0u8; r.bytes];
        self.read_runs(call, &r, &mut data)?;
        origin.unpack_from(call, self.rank(), &data)
    }

    /// The basic element of an accumulate's target datatype, checked
    /// against `op` and the other buffers' elements.
    fn acc_element(
        &self,
        call: &str,
        op: &Op,
        dt: &UserDatatype,
        others: &[&View],
    ) -> Result<Datatype> {
        if let Op::User(_) = op {
            // The C ABI's kernels of predefined operations on the types
            // without a runtime primitive (complex, long double), made for
            // the target datatype: whole elements of it at a time.
            if dt.desc().is_contig && dt.size() > 0 {
                return Ok(Datatype::Opaque { size: dt.size() });
            }
            return Err(self.err(
                ErrorClass::Op,
                call,
                "this operation applies to a contiguous target datatype only (user-defined \
                 operations are not allowed in one-sided accumulates)",
            ));
        }
        let Some(p) = dt.desc().homogeneous() else {
            if dt.size() == 0 {
                return Ok(Datatype::Primitive(Primitive::Byte));
            }
            return Err(self.err(
                ErrorClass::Type,
                call,
                "the target datatype of an accumulate must be made of one predefined type",
            ));
        };
        for v in others {
            if v.packed_size() > 0 && v.ty.prim().is_some_and(|q| q != p) {
                return Err(self.err(
                    ErrorClass::Type,
                    call,
                    format!(
                        "the origin's and the target's basic types differ ({} and {})",
                        v.ty.prim().map_or("?", |q| q.mpi_name()),
                        p.mpi_name()
                    ),
                ));
            }
        }
        let d = Datatype::Primitive(p);
        if !matches!(op, Op::Replace | Op::NoOp) {
            crate::op::check_datatype(op, d).map_err(|e| self.err(ErrorClass::Op, call, e))?;
        }
        Ok(d)
    }

    /// `MPI_Accumulate`: combine `origin` into the target with `op`
    /// (`MPI_REPLACE` writes it), atomically per element.
    #[allow(clippy::too_many_arguments)]
    pub fn accumulate(
        &self,
        call: &str,
        origin: &View,
        target: i32,
        disp: isize,
        count: usize,
        dt: &UserDatatype,
        op: &Op,
    ) -> Result<()> {
        self.check_live(call)?;
        let el = if count == 0 || dt.size() == 0 {
            Datatype::Primitive(Primitive::Byte)
        } else {
            self.acc_element(call, op, dt, &[origin])?
        };
        let Some(r) = self.target(call, target, disp, count, dt)? else {
            return Ok(());
        };
        let t = r.target;
        self.check_sizes(call, "origin buffer", origin.packed_size(), r.bytes)?;
        if matches!(op, Op::NoOp) || r.bytes == 0 {
            return Ok(());
        }
        if self.is_am() {
            let data = match origin.read_contig(|d| d.to_vec()) {
                Some(d) => d,
                None => {
                    let mut d = vec![0u8; r.bytes];
                    origin.pack_to(call, self.rank(), &mut d)?;
                    d
                }
            };
            return self.am_acc(call, &r, op, el, &data, false).map(|_| ());
        }
        let n = r.bytes / el.size().max(1);
        let combine = |data: &[u8]| {
            self.with_acc(t, || {
                if let Op::Replace = op {
                    return self.write_runs(call, &r, data);
                }
                // One run of memory in the area: combined in place.
                if let (Some((o, l)), true, true) = (r.one, r.many.is_empty(), self.in_area()) {
                    return self
                        .area()
                        .modify(t, o as usize, l, |cur| {
                            crate::op::apply_datatype(op, el, n, data, cur)
                        })
                        .map_err(|e| self.err(ErrorClass::RmaRange, call, e));
                }
                let mut cur = vec![0u8; r.bytes];
                self.read_runs(call, &r, &mut cur)?;
                crate::op::apply_datatype(op, el, n, data, &mut cur);
                self.write_runs(call, &r, &cur)
            })
        };
        // Contiguous host data is combined straight from the origin buffer.
        if let Some(done) = origin.read_contig(combine) {
            return done;
        }
        let mut data = vec![0u8; r.bytes];
        origin.pack_to(call, self.rank(), &mut data)?;
        combine(&data)
    }

    /// Whether the window's memory lives in the shared area.
    fn in_area(&self) -> bool {
        matches!(self.inner.flavor, WinFlavor::Allocate | WinFlavor::Shared)
    }

    /// `MPI_Get_accumulate`: as [`Window::accumulate`], returning the
    /// target's former contents in `result` (`origin` is unused with
    /// `MPI_NO_OP`).
    #[allow(clippy::too_many_arguments)]
    pub fn get_accumulate(
        &self,
        call: &str,
        origin: Option<&View>,
        result: &View,
        target: i32,
        disp: isize,
        count: usize,
        dt: &UserDatatype,
        op: &Op,
    ) -> Result<()> {
        self.check_live(call)?;
        let mut bufs = vec![result];
        if let (Some(o), false) = (origin, matches!(op, Op::NoOp)) {
            bufs.push(o);
        }
        let el = if count == 0 || dt.size() == 0 {
            Datatype::Primitive(Primitive::Byte)
        } else {
            self.acc_element(call, op, dt, &bufs)?
        };
        let Some(r) = self.target(call, target, disp, count, dt)? else {
            return Ok(());
        };
        let t = r.target;
        self.check_sizes(call, "result buffer", result.packed_size(), r.bytes)?;
        let data = match (origin, op) {
            (_, Op::NoOp) => Vec::new(),
            (Some(o), _) => {
                self.check_sizes(call, "origin buffer", o.packed_size(), r.bytes)?;
                let mut d = vec![0u8; r.bytes];
                o.pack_to(call, self.rank(), &mut d)?;
                d
            }
            (None, _) => {
                return Err(self.err(
                    ErrorClass::Buffer,
                    call,
                    "origin_addr is needed unless op is MPI_NO_OP",
                ))
            }
        };
        if r.bytes == 0 {
            return Ok(());
        }
        if self.is_am() {
            let old = self.am_acc(call, &r, op, el, &data, true)?;
            return result.unpack_from(call, self.rank(), &old);
        }
        let n = r.bytes / el.size().max(1);
        let mut old = vec![0u8; r.bytes];
        self.with_acc(t, || {
            if let (Some((o, l)), true, true) = (r.one, r.many.is_empty(), self.in_area()) {
                // One run of memory in the area: read and combined in place.
                return self
                    .area()
                    .modify(t, o as usize, l, |cur| {
                        old.copy_from_slice(cur);
                        match op {
                            Op::NoOp => {}
                            Op::Replace => cur.copy_from_slice(&data),
                            _ => crate::op::apply_datatype(op, el, n, &data, cur),
                        }
                    })
                    .map_err(|e| self.err(ErrorClass::RmaRange, call, e));
            }
            self.read_runs(call, &r, &mut old)?;
            match op {
                Op::NoOp => Ok(()),
                Op::Replace => self.write_runs(call, &r, &data),
                _ => {
                    let mut new = old.clone();
                    crate::op::apply_datatype(op, el, n, &data, &mut new);
                    self.write_runs(call, &r, &new)
                }
            }
        })?;
        result.unpack_from(call, self.rank(), &old)
    }

    /// `MPI_Compare_and_swap`: if the target element equals `compare`,
    /// replace it with `origin`; `result` gets its former value. One
    /// element of a predefined integer, logical, byte or pointer type.
    #[allow(clippy::too_many_arguments)]
    pub fn compare_and_swap(
        &self,
        call: &str,
        origin: &View,
        compare: &View,
        result: &View,
        target: i32,
        disp: isize,
        dt: &UserDatatype,
    ) -> Result<()> {
        self.check_live(call)?;
        let Some(p) = dt.desc().basic_type() else {
            return Err(self.err(ErrorClass::Type, call, "datatype must be a predefined type"));
        };
        if let Datatype::Primitive(q) = p {
            if !crate::op::compares_bits(q) {
                return Err(self.err(
                    ErrorClass::Type,
                    call,
                    format!(
                        "{} is not an integer, logical or byte type (MPI_Compare_and_swap \
                         compares bits of those only)",
                        q.mpi_name()
                    ),
                ));
            }
        }
        let Some(r) = self.target(call, target, disp, 1, dt)? else {
            return Ok(());
        };
        let t = r.target;
        let mut new = vec![0u8; r.bytes];
        let mut cmp = vec![0u8; r.bytes];
        origin.pack_to(call, self.rank(), &mut new)?;
        compare.pack_to(call, self.rank(), &mut cmp)?;
        if self.is_am() {
            let runs: Vec<(i128, usize)> = r.iter().collect();
            let req = am::Request::new(am::Kind::Cas, &runs, 2 * r.bytes)
                .data(&new)
                .data(&cmp);
            let mut old = vec![0u8; r.bytes];
            self.am_call(call, t, req, &mut old)?;
            return result.unpack_from(call, self.rank(), &old);
        }
        let old = self.with_acc(t, || {
            let mut cur = vec![0u8; r.bytes];
            self.read_runs(call, &r, &mut cur)?;
            if cur == cmp {
                self.write_runs(call, &r, &new)?;
            }
            Ok(cur)
        })?;
        result.unpack_from(call, self.rank(), &old)
    }

    /// A request-based operation needs a passive-target epoch.
    pub fn check_request_epoch(&self, call: &str, target: i32) -> Result<()> {
        self.check_live(call)?;
        match self.target_rank(call, target)? {
            Some(t) => self.check_access(call, t, true),
            None => Ok(()),
        }
    }

    // ---- synchronisation ----

    fn check_assert(&self, call: &str, assert: i32, allowed: i32) -> Result<()> {
        if assert & !allowed != 0 {
            return Err(self.err(
                ErrorClass::Assert,
                call,
                format!("assert = {assert} has bits this call does not accept"),
            ));
        }
        Ok(())
    }

    /// `MPI_Win_fence`: end the fence epoch (every rank's operations are
    /// complete) and, unless `MODE_NOSUCCEED`, start the next.
    pub fn fence(&self, assert: i32) -> Result<()> {
        const CALL: &str = "MPI_Win_fence";
        self.check_live(CALL)?;
        self.check_assert(
            CALL,
            assert,
            MODE_NOCHECK | MODE_NOSTORE | MODE_NOPUT | MODE_NOPRECEDE | MODE_NOSUCCEED,
        )?;
        {
            let ep = self.epochs();
            if ep.lock_all || !ep.locks.is_empty() || ep.start.is_some() || ep.post.is_some() {
                return Err(self.err(
                    ErrorClass::RmaSync,
                    CALL,
                    "another epoch (lock, start or post) is open on the window",
                ));
            }
        }
        fence(Ordering::SeqCst);
        self.inner.comm.barrier()?;
        self.epochs().fence = assert & MODE_NOSUCCEED == 0;
        Ok(())
    }

    fn try_lock(&self, t: usize, lt: LockType) -> bool {
        let w = self.area().lock_word(t);
        match lt {
            LockType::Exclusive => w
                .compare_exchange(0, LOCK_EXCLUSIVE, Ordering::Acquire, Ordering::Relaxed)
                .is_ok(),
            LockType::Shared => {
                let v = w.load(Ordering::Relaxed);
                v & LOCK_EXCLUSIVE == 0
                    && w.compare_exchange(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
            }
        }
    }

    /// Take target `t`'s lock, waiting for it.
    fn take_lock(&self, call: &str, t: usize, lt: LockType) -> Result<()> {
        if self.is_am() {
            let req = am::Request::new(am::Kind::Lock, &[], 0).exclusive(lt == LockType::Exclusive);
            return self.am_call(call, t, req, &mut []);
        }
        self.wait_for(call, || self.try_lock(t, lt))
    }

    /// Release target `t`'s lock.
    fn drop_lock(&self, call: &str, t: usize, lt: LockType) -> Result<()> {
        if self.is_am() {
            let req =
                am::Request::new(am::Kind::Unlock, &[], 0).exclusive(lt == LockType::Exclusive);
            return self.am_call(call, t, req, &mut []);
        }
        self.release(t, lt);
        Ok(())
    }

    fn release(&self, t: usize, lt: LockType) {
        let w = self.area().lock_word(t);
        match lt {
            LockType::Exclusive => w.store(0, Ordering::Release),
            LockType::Shared => {
                w.fetch_sub(1, Ordering::Release);
            }
        }
    }

    /// `MPI_Win_lock`: open a passive-target epoch to `target`, waiting
    /// for the lock.
    pub fn lock(&self, lt: LockType, target: i32, assert: i32) -> Result<()> {
        const CALL: &str = "MPI_Win_lock";
        self.check_live(CALL)?;
        self.check_assert(CALL, assert, MODE_NOCHECK)?;
        let Some(t) = self.target_rank(CALL, target)? else {
            return Ok(());
        };
        {
            let ep = self.epochs();
            if ep.lock_all || ep.locks.contains_key(&t) {
                return Err(self.err(
                    ErrorClass::RmaSync,
                    CALL,
                    format!("rank {t} is already locked by this rank"),
                ));
            }
            if ep.start.is_some() {
                return Err(self.err(
                    ErrorClass::RmaSync,
                    CALL,
                    "an access epoch opened by MPI_Win_start is open on the window",
                ));
            }
        }
        let held = assert & MODE_NOCHECK == 0;
        if held {
            self.take_lock(CALL, t, lt)?;
        }
        let mut ep = self.epochs();
        ep.locks.insert(t, (lt, held));
        // A fence followed by no operation opened no epoch.
        ep.fence = false;
        Ok(())
    }

    /// `MPI_Win_unlock`: complete the operations to `target` and release
    /// its lock.
    pub fn unlock(&self, target: i32) -> Result<()> {
        const CALL: &str = "MPI_Win_unlock";
        self.check_live(CALL)?;
        let Some(t) = self.target_rank(CALL, target)? else {
            return Ok(());
        };
        let lt = self.epochs().locks.remove(&t);
        match lt {
            Some((lt, held)) => {
                fence(Ordering::SeqCst);
                if held {
                    self.drop_lock(CALL, t, lt)?;
                }
                Ok(())
            }
            None => Err(self.err(
                ErrorClass::RmaSync,
                CALL,
                format!("rank {t} is not locked by this rank"),
            )),
        }
    }

    /// `MPI_Win_lock_all`: a shared lock on every rank.
    pub fn lock_all(&self, assert: i32) -> Result<()> {
        const CALL: &str = "MPI_Win_lock_all";
        self.check_live(CALL)?;
        self.check_assert(CALL, assert, MODE_NOCHECK)?;
        {
            let ep = self.epochs();
            if ep.lock_all || !ep.locks.is_empty() || ep.start.is_some() {
                return Err(self.err(
                    ErrorClass::RmaSync,
                    CALL,
                    "another access epoch is open on the window",
                ));
            }
        }
        let held = assert & MODE_NOCHECK == 0;
        for t in (0..self.inner.peers.len()).filter(|_| held) {
            if let Err(e) = self.take_lock(CALL, t, LockType::Shared) {
                for u in 0..t {
                    let _ = self.drop_lock(CALL, u, LockType::Shared);
                }
                return Err(e);
            }
        }
        let mut ep = self.epochs();
        ep.lock_all = true;
        ep.lock_all_held = held;
        ep.fence = false;
        Ok(())
    }

    /// `MPI_Win_unlock_all`.
    pub fn unlock_all(&self) -> Result<()> {
        const CALL: &str = "MPI_Win_unlock_all";
        self.check_live(CALL)?;
        let (was, held) = {
            let mut ep = self.epochs();
            let held = std::mem::replace(&mut ep.lock_all_held, false);
            (std::mem::replace(&mut ep.lock_all, false), held)
        };
        if !was {
            return Err(self.err(ErrorClass::RmaSync, CALL, "MPI_Win_lock_all was not called"));
        }
        fence(Ordering::SeqCst);
        let mut first = Ok(());
        for t in (0..self.inner.peers.len()).filter(|_| held) {
            let r = self.drop_lock(CALL, t, LockType::Shared);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// `MPI_Win_flush`, `_flush_local` (`target` given) and `_flush_all`,
    /// `_flush_local_all` (`None`): operations complete as they are
    /// issued, so this orders memory and checks the epoch.
    pub fn flush(&self, call: &str, target: Option<i32>) -> Result<()> {
        self.check_live(call)?;
        let ok = match target {
            Some(r) => match self.target_rank(call, r)? {
                Some(t) => self.inner.access[t].load(Ordering::Relaxed) & PASSIVE != 0,
                None => true,
            },
            None => {
                let ep = self.epochs();
                ep.lock_all || !ep.locks.is_empty()
            }
        };
        if !ok {
            return Err(self.err(
                ErrorClass::RmaSync,
                call,
                "no passive-target epoch is open to the rank(s) flushed",
            ));
        }
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// The C ABI's hot path of `MPI_Win_flush(target)`: `false` unless a
    /// passive-target epoch is open to `target` (the caller then takes
    /// [`Window::flush`], which names the error).
    #[doc(hidden)]
    #[inline]
    pub fn flush_basic(&self, target: i32) -> bool {
        let i = &*self.inner;
        let open = usize::try_from(target)
            .ok()
            .and_then(|t| i.access.get(t))
            .is_some_and(|a| a.load(Ordering::Relaxed) & PASSIVE != 0);
        if !open || self.is_freed() {
            return false;
        }
        fence(Ordering::SeqCst);
        true
    }

    /// `MPI_Win_sync`: synchronise the public and private copies (one
    /// memory fence in the unified model).
    pub fn sync(&self) -> Result<()> {
        self.check_live("MPI_Win_sync")?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn group_ranks(&self, call: &str, g: &Group) -> Result<Vec<usize>> {
        let mine = self.group();
        let ranks: Vec<i32> = (0..g.size()).collect();
        let t = g.translate_ranks(&ranks, &mine)?;
        t.into_iter()
            .map(|r| {
                if r == crate::UNDEFINED || r < 0 {
                    Err(self.err(
                        ErrorClass::Group,
                        call,
                        "the group holds a process that is not in the window's group",
                    ))
                } else {
                    Ok(r as usize)
                }
            })
            .collect()
    }

    /// `MPI_Win_post`: expose the window to the origins of `group`.
    pub fn post(&self, group: &Group, assert: i32) -> Result<()> {
        const CALL: &str = "MPI_Win_post";
        self.check_live(CALL)?;
        self.check_assert(CALL, assert, MODE_NOCHECK | MODE_NOSTORE | MODE_NOPUT)?;
        let origins = self.group_ranks(CALL, group)?;
        let mut ep = self.epochs();
        if ep.post.is_some() {
            return Err(self.err(
                ErrorClass::RmaSync,
                CALL,
                "an exposure epoch opened by MPI_Win_post is already open",
            ));
        }
        fence(Ordering::SeqCst);
        if self.is_am() {
            // One message per origin and epoch (eager: it does not wait
            // for the origin).
            drop(ep);
            for &o in &origins {
                self.inner.comm.send(&[0u8][..], o as i32, am::TAG_POST)?;
            }
            ep = self.epochs();
        } else {
            for &o in &origins {
                self.area()
                    .posts(self.inner.me, o)
                    .fetch_add(1, Ordering::Release);
            }
        }
        ep.post = Some(origins);
        ep.fence = false;
        Ok(())
    }

    /// `MPI_Win_start`: open an access epoch to the targets of `group`,
    /// waiting until each has posted.
    pub fn start(&self, group: &Group, assert: i32) -> Result<()> {
        const CALL: &str = "MPI_Win_start";
        self.check_live(CALL)?;
        self.check_assert(CALL, assert, MODE_NOCHECK)?;
        let targets = self.group_ranks(CALL, group)?;
        {
            let ep = self.epochs();
            if ep.start.is_some() || ep.lock_all || !ep.locks.is_empty() {
                return Err(self.err(
                    ErrorClass::RmaSync,
                    CALL,
                    "another access epoch is open on the window",
                ));
            }
        }
        let me = self.inner.me;
        for &t in targets.iter().filter(|_| self.is_am()) {
            self.inner
                .comm
                .recv(&mut [0u8][..], t as i32, am::TAG_POST)?;
        }
        for &t in targets.iter().filter(|_| !self.is_am()) {
            let seen = self.epochs().seen_post[t];
            let word = self.area().posts(t, me);
            self.wait_for(CALL, || word.load(Ordering::Acquire) > seen)?;
            self.epochs().seen_post[t] = seen + 1;
        }
        let mut ep = self.epochs();
        ep.start = Some(targets);
        ep.fence = false;
        Ok(())
    }

    /// `MPI_Win_complete`: end the access epoch `start` opened.
    pub fn complete(&self) -> Result<()> {
        const CALL: &str = "MPI_Win_complete";
        self.check_live(CALL)?;
        let Some(targets) = self.epochs().start.take() else {
            return Err(self.err(
                ErrorClass::RmaSync,
                CALL,
                "no access epoch was opened by MPI_Win_start",
            ));
        };
        fence(Ordering::SeqCst);
        for t in targets {
            if self.is_am() {
                self.inner
                    .comm
                    .send(&[0u8][..], t as i32, am::TAG_COMPLETE)?;
                continue;
            }
            self.area()
                .completes(t, self.inner.me)
                .fetch_add(1, Ordering::Release);
        }
        Ok(())
    }

    fn exposure_done(&self, ep: &Epochs, origins: &[usize]) -> bool {
        origins.iter().all(|&o| {
            self.area()
                .completes(self.inner.me, o)
                .load(Ordering::Acquire)
                > ep.seen_complete[o]
        })
    }

    fn end_exposure(&self, call: &str, block: bool) -> Result<bool> {
        let Some(origins) = self.epochs().post.clone() else {
            return Err(self.err(
                ErrorClass::RmaSync,
                call,
                "no exposure epoch was opened by MPI_Win_post",
            ));
        };
        if self.is_am() {
            // Each origin's complete is its next message of that tag.
            let comm = &self.inner.comm;
            if !block {
                for &o in &origins {
                    if comm.iprobe(o as i32, am::TAG_COMPLETE)?.is_none() {
                        return Ok(false);
                    }
                }
            }
            for &o in &origins {
                comm.recv(&mut [0u8][..], o as i32, am::TAG_COMPLETE)?;
            }
        } else if block {
            self.wait_for(call, || self.exposure_done(&self.epochs(), &origins))?;
        } else if !self.exposure_done(&self.epochs(), &origins) {
            return Ok(false);
        }
        let mut ep = self.epochs();
        for &o in &origins {
            ep.seen_complete[o] += 1;
        }
        ep.post = None;
        fence(Ordering::SeqCst);
        Ok(true)
    }

    /// `MPI_Win_wait`: end the exposure epoch once every origin completed.
    pub fn wait(&self) -> Result<()> {
        self.end_exposure("MPI_Win_wait", true).map(|_| ())
    }

    /// `MPI_Win_test`: [`Window::wait`] if it would not block.
    pub fn test(&self) -> Result<bool> {
        self.end_exposure("MPI_Win_test", false)
    }

    /// `MPI_Win_free`: collective; every epoch must be closed.
    pub fn free(&self) -> Result<()> {
        const CALL: &str = "MPI_Win_free";
        self.check_live(CALL)?;
        {
            let ep = self.epochs();
            if ep.lock_all || !ep.locks.is_empty() || ep.start.is_some() || ep.post.is_some() {
                return Err(self.err(
                    ErrorClass::RmaSync,
                    CALL,
                    "an epoch (lock, start or post) is still open on the window",
                ));
            }
        }
        fence(Ordering::SeqCst);
        self.inner.comm.barrier()?;
        self.inner.freed.store(true, Ordering::Release);
        if let Some((btl, desc)) = self.inner.exposed {
            // Every origin's transfers ended before the barrier.
            engine::with(CALL, |e| {
                e.driver.unexpose_window(btl, &desc);
                Ok(())
            })?;
        }
        if self.is_am() {
            tracing::debug!(target: "rma", "{CALL}: {} puts and gets by RDMA, {} by active messages", self.inner.by_rdma.load(Ordering::Relaxed), self.inner.by_am.load(Ordering::Relaxed));
            // No request to this rank is in flight: every origin's ended
            // before the barrier.
            let ctx = self.inner.comm.inner.ctx;
            if !engine::with(CALL, |e| Ok(e.rma.remove(ctx)))? {
                am::stop_progress_thread();
            }
        }
        self.inner.comm.free()
    }
}
