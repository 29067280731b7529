//! gmpi-btl-shm: the same-node transport.
//!
//! The ranks of one node are separate processes that share one segment file
//! (under `/dev/shm`), mapped `MAP_SHARED` by each. For every ordered pair
//! (sender → receiver) the segment holds a lock-free single-producer /
//! single-consumer ring of variable-length records; fragments are gathered
//! straight into the ring by [`Btl::send`] (one copy) and handed to the
//! receiver's [`Btl::progress`] callback as a slice *into* the ring (zero
//! copy). Large messages bypass the rings: [`Btl::get`] reads the sender's
//! memory directly with `process_vm_readv` (CMA, single copy) where the
//! kernel allows it; from [`ShmConfig::coop_min`] bytes the sender, when it
//! is inside MPI, writes part of the message at the same time with
//! `process_vm_writev` (a *cooperative* get, `coop.rs`), unless the receiver
//! reduces the data right after and it is below [`ALONE_MAX`]
//! ([`Pull::Alone`]: the helper's share would then be in the wrong cache),
//! or the sender is itself busy pulling messages from the receiver
//! ([`Pull::Unhelped`]: neither has time to lend).
//!
//! # File map
//! - `lib.rs`: [`ShmConfig`], [`ShmBtl`] (bootstrap, the [`Btl`] impl, the
//!   doorbell protocol of [`Btl::wait`]).
//! - `layout.rs`: segment layout, record format, ring sizing (pure arithmetic).
//! - `segment.rs`: the only `unsafe` operations: the mapping, the ring ends
//!   (`TxRing`/`RxRing`), futexes, `process_vm_readv`/`process_vm_writev`,
//!   and `Dst::lend`, which turns a get's [`gmpi_btl::LocalMem`] into memory
//!   they may write. (`lib.rs`'s [`Btl::get_as`] is an `unsafe fn`
//!   whose one block hands its caller's contract to `Dst::lend`; `get`
//!   hands it to `get_as`.)
//! - `cma.rs`: the single-copy read and write and their start-up probes.
//! - `coop.rs`: cooperative gets: chunks claimed by both processes through
//!   a slot in the segment, the helper's requests, completion.
//! - `coll.rs`: [`ShmColl`], a separate shared area for the barrier, small
//!   exchanges (allreduce/allgather/gather) and small broadcasts of one
//!   communicator whose ranks share a node (epoch counters and per-rank
//!   slots; no `unsafe`: its raw byte access goes through `segment.rs`).
//! - `conformance.rs` (tests only): `gmpi_btl::conformance`'s checks
//!   against two ranks on threads;
//! - `tests/rings.rs`: several ranks on threads of one process;
//!   `tests/coll.rs`: the collective area, participants on threads;
//!   `tests/process.rs`: two real processes (futex wake-up, CMA);
//!   `examples/shm_pingpong.rs`: two-process latency/bandwidth benchmark.
//!
//! # Contract (beyond [`gmpi_btl`]'s)
//! - [`ShmBtl::bootstrap`] is collective over the node's ranks and calls the
//!   caller's `fence` exactly twice on every rank (once if the first call
//!   fails), whatever else fails, so a job-wide fence stays balanced. Local
//!   rank 0 creates the file (`O_CREAT|O_EXCL`, 0600), the others attach after
//!   the first fence, and rank 0 unlinks it after the second: once bootstrap
//!   returns, no file is left, even if a rank crashes later. A stale file of
//!   the same name is an error naming the path (and is marked so that no rank
//!   attaches to it).
//! - [`Btl::send`] returns [`Submit::Done`] or [`Submit::NoResource`] (ring
//!   full, nothing written; the receiver will ring our doorbell when it frees
//!   space, so a rank blocked in [`Btl::wait`] on a full ring wakes up). Never
//!   `Queued`; `token` is unused.
//! - [`Btl::progress`] delivers at most [`MAX_FRAGS_PER_PROGRESS`] fragments
//!   per call, polling the incoming rings round-robin from a rotating start.
//!   A call that finds nothing costs one load per incoming ring (the header
//!   word at its read position): waiting ranks run it back to back.
//!   Its callback cannot call back into the btl (it holds `&mut self`); the
//!   runtime queues sends made while handling a fragment.
//! - [`Btl::get`] below [`ShmConfig::coop_min`] bytes (or with every
//!   cooperative slot busy, or `coop` off) is synchronous (`Done` or
//!   `Err(GetFailed)`). From `coop_min` it answers `Queued` and completes in a
//!   later [`Btl::progress`] with [`Event::GetComplete`] (or
//!   [`Event::GetFailed`], after a retry alone); `dst` must stay valid and
//!   untouched until then. [`Btl::progress`] also copies the chunks of the
//!   peers' cooperative gets of our memory that are left, and [`Btl::wait`]
//!   does not sleep while either kind is in flight.
//!   [`Btl::register`] needs no pinning and returns `{addr, len, key: pid}`.
//! - Everything read from shared memory is validated: a corrupt ring is
//!   reported once as [`Event::PeerFailed`] and never read again; sends to that
//!   peer then fail with [`BtlError::PeerFailed`]; see [`ShmBtl::fault`].
//! - A dead peer process is not detected here (the launcher ends the job).
//! - [`Btl::waker`] (with a segment): a `wake` from any thread of this
//!   process sets a local flag and rings our own doorbell, so a rank with
//!   tcp peers too sleeps here while btl-tcp watches its sockets. Alone on
//!   the node, the btl has no waker and [`Btl::watch`] is trivial (nothing
//!   can arrive).
//!
//! # Memory per rank
//! Each ring has `ring_bytes` of data plus two 64-byte control lines; each
//! rank has 64 cooperative-copy slots of one line (4 KiB). With
//! `ring_bytes` automatic it is `clamp(16 MiB / local_size` rounded down to
//! 4 KiB`, 64 KiB, 1 MiB)`, never below `2 * (max_frag + 8) + 64` (so a
//! largest fragment always fits a drained ring). The segment holds
//! `local_size * (local_size - 1)` rings (none to self), one 128-byte control
//! block per rank and a 64-byte header. A rank's share — its `local_size - 1`
//! incoming rings, its control block and `1/local_size` of the header — is
//! [`ShmBtl::memory_per_rank`]: 1 MiB + 128 B per peer, plus 4 KiB, up to
//! 16 ranks (15 MiB at 16), 15.8 MiB at 64 ranks (63 × (256 KiB + 128 B) +
//! 4 KiB + 129 B),
//! and at most 16 MiB for every `local_size` up to 127 with the default
//! `max_frag`; beyond that the per-ring floor (64 KiB, or
//! `2 * (max_frag + 8) + 64`, 128.3 KiB by default) makes it grow linearly
//! (32 MiB at 256 ranks: 255 × (128.3 KiB + 128 B)). The whole
//! segment is `local_size ×` that (1 GiB at 64 ranks). The file is sized with
//! `ftruncate`, so a page is allocated only when a ring first reaches it,
//! except in a segment of up to 64 MiB (8 ranks at the default sizes), whose
//! ranks fault their rings in at bootstrap (`prefault_rings`): the first lap
//! of a ring otherwise pays a page fault every 4 KiB on both sides.

#![deny(unsafe_code)]

mod cma;
mod coll;
#[cfg(test)]
mod conformance;
mod coop;
mod layout;
mod segment;
mod win;

pub use coll::{CollConfig, ShmColl};
pub use win::{cma_read, cma_write, WinArea, LOCK_EXCLUSIVE};

use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gmpi_btl::{Btl, BtlError, Capabilities, Event, LocalMem, MemDesc, Pull, Rank, Submit, Wake};

use crate::coop::{Coop, CoopCfg, Request, Start};
use crate::layout::Layout;
use crate::segment::{Corrupt, Dst, Mapping, Push, RxRing, TxRing};

/// Most fragments one [`Btl::progress`] call delivers, so it returns regularly.
pub const MAX_FRAGS_PER_PROGRESS: usize = 64;

/// Default largest fragment: a 64 KiB eager payload with room for the
/// pml's largest header (a full record is 64 KiB + 128 B, two lines more
/// than 64 KiB).
pub const DEFAULT_MAX_FRAG: usize = (64 << 10) + 120;

/// Gets of this many bytes or more are cooperative even when the caller
/// reads the data right away ([`Pull::Alone`]). Measured with
/// `MPI_Reduce` at 2 ranks (2026-11-27, Intel Xeon VM, 2 MiB L2 per core):
/// copied alone, 256 KiB took 30 µs instead of 48 and 512 KiB about the
/// same; 1 MiB alone was slower (median 236 µs against 171).
pub const ALONE_MAX: usize = 1 << 20;

/// Configuration of the shared-memory transport. Every rank of a node must use
/// the same values (checked at bootstrap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmConfig {
    /// Largest payload the pml should send eagerly (default 64 KiB: measured
    /// on the 2-core VM, 2026-12-02, np 2, interleaved medians against the
    /// single-copy rendezvous, a copy in and out of the ring took 0.19–0.27
    /// of the one-way latency at 16–64 KiB (0.56 µs against 2.9 at 16 KiB)
    /// and moved 4.6–7.6 times the bw/mbw_mr bandwidth; with a cold buffer
    /// per message it was still ahead. 128 and 256 KiB gained too, but
    /// fragments that large would double every ring's floor).
    pub eager_limit: usize,
    /// Largest fragment (header and payload) [`Btl::send`] accepts
    /// (default [`DEFAULT_MAX_FRAG`], 64 KiB + 120, so that the default
    /// eager limit fits with any pml header; at least 64, at most 1 GiB).
    pub max_frag: usize,
    /// Data bytes of one (sender → receiver) ring; `None` (default) sizes it
    /// automatically (see the crate documentation). An explicit value is
    /// rounded up to a multiple of 64 and to at least `2 * (max_frag + 8) + 64`.
    pub ring_bytes: Option<usize>,
    /// Use `process_vm_readv` for [`Btl::get`] when the kernel allows it
    /// (default true).
    pub cma: bool,
    /// [`Capabilities::get_threshold`] (default 8 KiB: every message above
    /// the eager limit is pulled by CMA when it works).
    pub get_threshold: usize,
    /// Cooperative gets (default true): from [`ShmConfig::coop_min`] bytes
    /// the owner of the data, when it is inside MPI, copies part of it with
    /// `process_vm_writev` while we read the rest; off, this rank neither
    /// asks for help nor helps. Needs CMA (and `process_vm_writev`); ranks
    /// of a node may differ.
    pub coop: bool,
    /// Preferred chunk of a cooperative get, the unit the two sides claim
    /// (default 128 KiB; at least 4 KiB, and large enough for 65535 chunks).
    pub coop_chunk: usize,
    /// Smallest get made cooperative (default 128 KiB: on the 2-core VM,
    /// 2026-12-08, np 2, a 128 KiB message in two 64 KiB shares took 6.3-7.7
    /// µs one way against 10.4-12.8 copied by the receiver alone, and
    /// `gb_bw` moved 20-24 GB/s against 13.5; a 64 KiB one is eager).
    pub coop_min: usize,
}

impl Default for ShmConfig {
    fn default() -> Self {
        Self {
            eager_limit: 64 << 10,
            max_frag: DEFAULT_MAX_FRAG,
            ring_bytes: None,
            cma: true,
            get_threshold: 8 << 10,
            coop: true,
            coop_chunk: 128 << 10,
            coop_min: 128 << 10,
        }
    }
}

/// The shared-memory btl of one rank. See the crate documentation.
#[derive(Debug)]
pub struct ShmBtl {
    caps: Capabilities,
    local_rank: usize,
    /// `(world rank, local rank)` of every peer on the node, by world rank.
    peers: Vec<(Rank, usize)>,
    layout: Layout,
    cma_status: String,
    coop_status: String,
    node: Option<Node>,
}

/// The attached segment (absent when this rank is alone on its node).
#[derive(Debug)]
struct Node {
    map: Arc<Mapping>,
    /// Outgoing ring to each local rank (`None` for ourselves).
    tx: Vec<Option<TxRing>>,
    /// Incoming rings, one per peer.
    rx: Vec<RxPeer>,
    /// Where the next progress pass starts.
    next_rx: usize,
    /// Local ranks whose rings were found corrupt.
    dead: Vec<bool>,
    /// Pid of each local rank, as published at bootstrap.
    pids: Vec<u64>,
    /// Cooperative gets (`None`: off on this rank).
    coop: Option<Coop>,
    /// Failures not yet reported by progress.
    unreported: Vec<Rank>,
    fault: Option<String>,
    /// Set by our [`ShmWake`] (another btl's helper thread) before it rings
    /// our doorbell; cleared when a wait ends.
    woken: Arc<AtomicBool>,
}

#[derive(Debug)]
struct RxPeer {
    world: Rank,
    local: usize,
    ring: RxRing,
}

fn os(msg: impl Into<String>) -> BtlError {
    BtlError::Os(msg.into())
}

impl ShmBtl {
    /// Collective over the ranks of one node: create (local rank 0) or attach
    /// to the segment at `path` (e.g. `/dev/shm/gmpi-<jobid>-node0`).
    ///
    /// `local_rank`/`local_size`: this process's index among the node's
    /// ranks; `world_ranks[i]` is the world rank of local rank `i`. `fence` is
    /// a node-wide (or job-wide) barrier; it is called exactly twice (once if
    /// the first call fails). With `local_size == 1` no segment is created and
    /// no peer is reachable.
    pub fn bootstrap(
        path: &str,
        local_rank: usize,
        local_size: usize,
        world_ranks: &[Rank],
        cfg: &ShmConfig,
        fence: &mut dyn FnMut() -> Result<(), String>,
    ) -> Result<ShmBtl, BtlError> {
        let path = Path::new(path);
        let checked = check_args(local_rank, local_size, world_ranks, cfg);
        let shared = checked.is_ok() && local_size > 1;

        // Phase 1: local rank 0 creates and initialises the segment.
        let mut created = false;
        let mut map: Result<Option<Arc<Mapping>>, BtlError> = match &checked {
            Err(e) => Err(e.clone()),
            Ok(layout) if shared && local_rank == 0 => create(path, layout).map(|m| {
                created = true;
                Some(m)
            }),
            Ok(_) => Ok(None),
        };
        if let (Ok(Some(m)), Ok(layout)) = (&map, &checked) {
            publish_self(m, layout, local_rank);
        }
        let fenced = fence().map_err(|e| os(format!("shm bootstrap: first fence failed: {e}")));

        // Phase 2: the others attach and publish their pid and probe word.
        if let (Ok(layout), Ok(None), Ok(())) = (&checked, &map, &fenced) {
            if shared {
                map = attach(path, layout).map(|m| {
                    publish_self(&m, layout, local_rank);
                    Some(m)
                });
            }
        }
        let fenced = fenced.and_then(|()| {
            fence().map_err(|e| os(format!("shm bootstrap: second fence failed: {e}")))
        });
        if created {
            // Everyone who will ever attach has; from now on the segment
            // lives only as long as its mappings.
            if let Err(e) = std::fs::remove_file(path) {
                map = map.and(Err(os(format!(
                    "cannot unlink shm segment {}: {e}",
                    path.display()
                ))));
            }
        }
        let layout = checked?;
        fenced?;
        let map = map?;

        // Phase 3: check that every rank attached; probe CMA; build the rings.
        let mut cma_ok = Err("disabled by configuration (ShmConfig::cma = false)".to_string());
        let mut coop_ok = Err("needs CMA".to_string());
        let node = match map {
            None => {
                cma_ok = Err("not used: no other rank on this node".to_string());
                None
            }
            Some(map) => {
                for r in 0..local_size {
                    if map
                        .u64_at(layout.rank_ctrl(r) + layout::CTRL_PID)
                        .load(Ordering::Acquire)
                        == 0
                    {
                        return Err(os(format!(
                            "shm segment {}: local rank {r} did not attach",
                            path.display()
                        )));
                    }
                }
                if cfg.cma {
                    cma_ok = probe_cma(&map, &layout, local_rank);
                }
                if cma_ok.is_ok() {
                    coop_ok = if !cfg.coop {
                        Err("disabled by configuration (ShmConfig::coop = false)".to_string())
                    } else {
                        cma::self_test_write().map(|()| CoopCfg {
                            chunk: cfg.coop_chunk as u64,
                            min: cfg.coop_min as u64,
                        })
                    };
                }
                if layout.total <= PREFAULT_MAX {
                    prefault_rings(&map, &layout, local_rank);
                }
                let coop = coop_ok.as_ref().ok().map(|&c| Coop::new(c, local_rank));
                Some(Node::new(map, &layout, local_rank, world_ranks, coop))
            }
        };
        let mut peers: Vec<(Rank, usize)> = world_ranks
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != local_rank)
            .map(|(i, &w)| (w, i))
            .collect();
        peers.sort_unstable();
        let caps = Capabilities {
            name: "shm",
            eager_limit: cfg.eager_limit,
            max_send_size: cfg.max_frag,
            get: cma_ok.is_ok(),
            put: false,
            exclusivity: 100,
            get_threshold: cfg.get_threshold,
            cuda_ipc: true,
            gpudirect: None,
        };
        let cma_status = match cma_ok {
            Ok(s) => format!("enabled: {s}"),
            Err(e) => format!("disabled: {e}"),
        };
        let coop_status = match coop_ok {
            Ok(c) => format!(
                "enabled: gets from {} B, chunks of {} B",
                c.min.max(2 * coop::MIN_CHUNK),
                c.chunk.max(coop::MIN_CHUNK)
            ),
            Err(e) => format!("disabled: {e}"),
        };
        Ok(ShmBtl {
            caps,
            local_rank,
            peers,
            layout,
            cma_status,
            coop_status,
            node,
        })
    }

    /// Whether [`Btl::get`] uses CMA (`process_vm_readv`) on this rank.
    pub fn cma_enabled(&self) -> bool {
        self.caps.get
    }

    /// Why CMA is enabled or disabled, for the runtime's log
    /// (e.g. `"disabled: process_vm_readv ... Operation not permitted"`).
    pub fn cma_status(&self) -> &str {
        &self.cma_status
    }

    /// Whether large gets are cooperative on this rank (see [`ShmConfig::coop`]).
    pub fn coop_enabled(&self) -> bool {
        self.node.as_ref().is_some_and(|n| n.coop.is_some())
    }

    /// Why cooperative gets are enabled or disabled, for the runtime's log.
    pub fn coop_status(&self) -> &str {
        &self.coop_status
    }

    /// Bytes of the segment attributable to one rank: its incoming rings, its
    /// control block, its cooperative-copy slots and its share of the header
    /// (0 when alone on the node).
    pub fn memory_per_rank(&self) -> usize {
        if self.node.is_some() {
            self.layout.memory_per_rank()
        } else {
            0
        }
    }

    /// Data bytes of each ring, after automatic sizing and rounding.
    pub fn ring_bytes(&self) -> usize {
        self.layout.ring_bytes
    }

    /// Size of the whole node segment in bytes (0 when alone on the node).
    pub fn segment_bytes(&self) -> usize {
        self.node.as_ref().map_or(0, |n| n.map.len())
    }

    /// The first ring corruption found, if any (its peer was reported failed).
    pub fn fault(&self) -> Option<&str> {
        self.node.as_ref().and_then(|n| n.fault.as_deref())
    }

    /// [`Btl::progress`] once something is there: failures to report, then
    /// the incoming rings round-robin from a rotating start.
    #[inline(never)]
    fn deliver(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> usize {
        let Some(node) = self.node.as_mut() else {
            return 0;
        };
        let mut delivered = 0;
        if !node.unreported.is_empty() {
            for peer in std::mem::take(&mut node.unreported) {
                on_event(Event::PeerFailed { peer });
                delivered += 1;
            }
        }
        let count = node.rx.len();
        let start = node.next_rx;
        node.next_rx = if start + 1 >= count { 0 } else { start + 1 };
        let mut budget = MAX_FRAGS_PER_PROGRESS;
        let mut idx = start;
        for _ in 0..count {
            let p = &mut node.rx[idx];
            idx = if idx + 1 == count { 0 } else { idx + 1 };
            // Most rings are empty on most passes: one load, nothing else.
            if !p.ring.has_data() || node.dead[p.local] {
                continue;
            }
            let (world, local) = (p.world, p.local);
            // Cooperative-copy requests met on the way, handled after the
            // drain (they are rare; data records go straight up).
            let mut ctrls: Vec<Result<Request, String>> = Vec::new();
            let (done, res) = p.ring.drain(budget, &mut |ctrl, data| {
                if ctrl {
                    ctrls.push(Request::decode(data));
                } else {
                    on_event(Event::Frag { peer: world, data });
                }
            });
            delivered += done.frags - ctrls.len();
            budget -= done.frags;
            if done.wake_producer {
                ring_doorbell(&node.map, &self.layout, local);
            }
            let mut bad = res.err();
            if !ctrls.is_empty() {
                bad = bad.or(node.take_ctrls(local, ctrls));
            }
            if let Some(c) = bad {
                if node.fail(local, world, c) {
                    on_event(Event::PeerFailed { peer: world });
                    delivered += 1;
                }
            }
            if budget == 0 {
                break;
            }
        }
        if let Some(c) = node.coop.as_mut() {
            if c.busy() {
                delivered += c.progress(&node.map, &self.layout, &node.dead, on_event);
            }
        }
        delivered
    }

    fn local_of(&self, peer: Rank) -> Option<usize> {
        self.peers
            .binary_search_by_key(&peer, |&(w, _)| w)
            .ok()
            .map(|i| self.peers[i].1)
    }

    /// [`Btl::get_as`], once its [`Pull`] is decided (`helped`: cooperative
    /// from [`ShmConfig::coop_min`] bytes, when the owner can help).
    fn get_maybe_helped(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: Dst,
        token: u64,
        helped: bool,
    ) -> Result<Submit, BtlError> {
        if !self.reaches(peer) {
            return Err(BtlError::Unreachable(peer));
        }
        if !self.caps.get {
            return Err(BtlError::GetFailed(format!("CMA {}", self.cma_status)));
        }
        let end = offset.checked_add(dst.len() as u64);
        if end.is_none_or(|e| e > remote.len) {
            return Err(BtlError::GetFailed(format!(
                "read of {} bytes at offset {offset} exceeds the {} registered bytes",
                dst.len(),
                remote.len
            )));
        }
        let addr = remote.addr.checked_add(offset).ok_or_else(|| {
            BtlError::GetFailed(format!("address {:#x} + {offset} overflows", remote.addr))
        })?;
        if let (Some(local), Some(node)) = (self.local_of(peer), self.node.as_mut()) {
            if let (Some(coop), Some(tx)) = (node.coop.as_mut(), node.tx[local].as_mut()) {
                if helped && !node.dead[local] && coop.wants(dst.len()) {
                    let req = coop.start(Start {
                        map: &node.map,
                        layout: &self.layout,
                        token,
                        peer,
                        local,
                        remote,
                        offset,
                        dst,
                    });
                    // Ask the owner for help; it may be asleep or busy, and
                    // a full ring only means no help: either way we copy
                    // whatever it does not, in progress().
                    if let Err(c) = tx.push_ctrl(&[&req.encode()], coop::REQ_LEN) {
                        if node.fail(local, peer, c) {
                            node.unreported.push(peer);
                        }
                    }
                    return Ok(Submit::Queued);
                }
            }
        }
        cma::read_exact(remote.key, addr, dst).map_err(BtlError::GetFailed)?;
        Ok(Submit::Done)
    }
}

fn check_args(
    local_rank: usize,
    local_size: usize,
    world_ranks: &[Rank],
    cfg: &ShmConfig,
) -> Result<Layout, BtlError> {
    let bad = |m: String| Err(os(format!("shm bootstrap: {m}")));
    if local_rank >= local_size {
        return bad(format!(
            "local rank {local_rank} not below local size {local_size}"
        ));
    }
    if world_ranks.len() != local_size {
        return bad(format!(
            "{} world ranks given for {local_size} local ranks",
            world_ranks.len()
        ));
    }
    let mut sorted = world_ranks.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return bad(format!("duplicate world rank in {world_ranks:?}"));
    }
    if cfg.eager_limit > cfg.max_frag {
        return bad(format!(
            "eager_limit {} exceeds max_frag {}",
            cfg.eager_limit, cfg.max_frag
        ));
    }
    Layout::new(local_size, cfg.ring_bytes, cfg.max_frag)
        .or_else(|e| bad(format!("invalid configuration: {e}")))
}

/// Local rank 0: create the file, initialise the header, publish it.
fn create(path: &Path, layout: &Layout) -> Result<Arc<Mapping>, BtlError> {
    match Mapping::create(path, layout.total) {
        Ok(m) => {
            m.u32_at(layout::HDR_VERSION)
                .store(layout::VERSION, Ordering::Relaxed);
            m.u32_at(layout::HDR_LOCAL_SIZE)
                .store(layout.local_size as u32, Ordering::Relaxed);
            m.u64_at(layout::HDR_RING_BYTES)
                .store(layout.ring_bytes as u64, Ordering::Relaxed);
            m.u64_at(layout::HDR_MAX_FRAG)
                .store(layout.max_frag as u64, Ordering::Relaxed);
            m.u64_at(layout::HDR_TOTAL)
                .store(layout.total as u64, Ordering::Relaxed);
            m.u32_at(layout::HDR_STATE)
                .store(layout::STATE_READY, Ordering::Release);
            m.u64_at(layout::HDR_MAGIC)
                .store(layout::MAGIC, Ordering::Release);
            Ok(Arc::new(m))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Mark it so that the other ranks refuse it rather than attach
            // to a dead job's rings. (Best effort: if we cannot open it,
            // neither can they.)
            if let Ok(stale) = Mapping::open(path) {
                stale
                    .u32_at(layout::HDR_STATE)
                    .store(layout::STATE_POISONED, Ordering::Release);
            }
            Err(os(format!(
                "shm segment {} already exists (left over by an earlier job?); refusing to reuse it",
                path.display()
            )))
        }
        Err(e) => Err(os(format!(
            "cannot create shm segment {} ({} bytes): {e}",
            path.display(),
            layout.total
        ))),
    }
}

/// The largest segment whose rings are faulted in at bootstrap
/// ([`prefault_rings`]): up to 8 ranks at the default ring sizes (56 MiB).
/// Beyond, every ring allocated at once would cost much more memory than
/// the pairs that talk touch (1 GiB at 64 ranks), so they fault in on use.
const PREFAULT_MAX: usize = 64 << 20;

/// Fault in the rings `local_rank` sends and receives on, before the first
/// message: otherwise the first lap of each ring takes a page fault every
/// 4 KiB on both sides (the sender's allocates the page), which measured
/// as 0.130-0.150 µs against 0.108-0.115 one-way for the first 0-2 B sizes
/// of a latency sweep at np 2 (about 30 000 round trips, until the 1 MiB
/// rings had gone round once).
fn prefault_rings(map: &Mapping, layout: &Layout, local_rank: usize) {
    for peer in (0..layout.local_size).filter(|&p| p != local_rank) {
        for (from, to) in [(local_rank, peer), (peer, local_rank)] {
            let ring = layout.ring(from, to);
            if !map.prefault(ring, layout::RING_CTRL_BYTES + layout.ring_bytes) {
                return;
            }
        }
    }
}

/// Other local ranks: open the file and check it is the segment we expect.
fn attach(path: &Path, layout: &Layout) -> Result<Arc<Mapping>, BtlError> {
    let m = Mapping::open(path).map_err(|e| {
        os(format!(
            "cannot open shm segment {} (did local rank 0 fail?): {e}",
            path.display()
        ))
    })?;
    let state = m.u32_at(layout::HDR_STATE).load(Ordering::Acquire);
    let magic = m.u64_at(layout::HDR_MAGIC).load(Ordering::Acquire);
    let fail = |what: String| {
        Err(os(format!(
            "shm segment {} is unusable: {what}",
            path.display()
        )))
    };
    if state == layout::STATE_POISONED {
        return fail("it is a stale file of an earlier job".into());
    }
    if magic != layout::MAGIC || state != layout::STATE_READY {
        return fail("not an initialised gmpi segment".into());
    }
    let version = m.u32_at(layout::HDR_VERSION).load(Ordering::Relaxed);
    if version != layout::VERSION {
        return fail(format!(
            "layout version {version}, expected {}",
            layout::VERSION
        ));
    }
    let found = (
        m.u32_at(layout::HDR_LOCAL_SIZE).load(Ordering::Relaxed) as usize,
        m.u64_at(layout::HDR_RING_BYTES).load(Ordering::Relaxed),
        m.u64_at(layout::HDR_MAX_FRAG).load(Ordering::Relaxed),
        m.u64_at(layout::HDR_TOTAL).load(Ordering::Relaxed),
    );
    let want = (
        layout.local_size,
        layout.ring_bytes as u64,
        layout.max_frag as u64,
        layout.total as u64,
    );
    if found != want || m.len() != layout.total {
        return fail(format!(
            "(local_size, ring_bytes, max_frag, total) is {found:?} but this rank computed {want:?} \
             (do all local ranks use the same ShmConfig?); file is {} bytes",
            m.len()
        ));
    }
    Ok(Arc::new(m))
}

/// Publish our pid and CMA probe word in our control block.
fn publish_self(m: &Mapping, layout: &Layout, local_rank: usize) {
    let c = layout.rank_ctrl(local_rank);
    m.u64_at(c + layout::CTRL_PROBE_ADDR)
        .store(cma::probe_addr(), Ordering::Relaxed);
    m.u64_at(c + layout::CTRL_PROBE_VALUE)
        .store(cma::PROBE_VALUE, Ordering::Relaxed);
    m.u64_at(c + layout::CTRL_PID)
        .store(u64::from(std::process::id()), Ordering::Release);
}

/// Self test, then read the probe word of the next local rank.
fn probe_cma(m: &Mapping, layout: &Layout, local_rank: usize) -> Result<String, String> {
    cma::self_test()?;
    let peer = (local_rank + 1) % layout.local_size;
    let c = layout.rank_ctrl(peer);
    let pid = m.u64_at(c + layout::CTRL_PID).load(Ordering::Acquire);
    let addr = m
        .u64_at(c + layout::CTRL_PROBE_ADDR)
        .load(Ordering::Relaxed);
    let value = m
        .u64_at(c + layout::CTRL_PROBE_VALUE)
        .load(Ordering::Relaxed);
    cma::peer_test(pid, addr, value)
        .map(|()| format!("process_vm_readv from local rank {peer} (pid {pid}) works"))
        .map_err(|e| {
            format!(
                "cannot read local rank {peer} (pid {pid}): {e} \
                 (ptrace restrictions such as Yama ptrace_scope, or a container, forbid CMA)"
            )
        })
}

impl Node {
    fn new(
        map: Arc<Mapping>,
        layout: &Layout,
        me: usize,
        world_ranks: &[Rank],
        coop: Option<Coop>,
    ) -> Self {
        let n = layout.local_size;
        let pids = (0..n)
            .map(|r| {
                map.u64_at(layout.rank_ctrl(r) + layout::CTRL_PID)
                    .load(Ordering::Acquire)
            })
            .collect();
        let tx = (0..n)
            .map(|r| (r != me).then(|| TxRing::new(&map, layout.ring(me, r), layout.ring_bytes)))
            .collect();
        let rx = (0..n)
            .filter(|&r| r != me)
            .map(|r| RxPeer {
                world: world_ranks[r],
                local: r,
                ring: RxRing::new(&map, layout.ring(r, me), layout.ring_bytes, layout.max_frag),
            })
            .collect();
        Self {
            map,
            tx,
            rx,
            next_rx: 0,
            dead: vec![false; n],
            pids,
            coop,
            unreported: Vec::new(),
            fault: None,
            woken: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Cooperative-copy requests drained from local rank `local`'s ring:
    /// queued for help (ignored with cooperative gets off: the receiver
    /// copies every chunk itself). A request that does not decode is the
    /// ring's corruption.
    #[cold]
    fn take_ctrls(&mut self, local: usize, ctrls: Vec<Result<Request, String>>) -> Option<Corrupt> {
        let pid = self.pids[local];
        let mut bad = None;
        for r in ctrls {
            match r {
                Ok(req) => {
                    if let Some(c) = self.coop.as_mut() {
                        c.push_help(local, pid, req);
                    }
                }
                Err(e) => {
                    bad.get_or_insert(Corrupt(e));
                }
            }
        }
        bad
    }

    /// Mark local rank `local` failed; true the first time (report it then).
    fn fail(&mut self, local: usize, world: Rank, Corrupt(msg): Corrupt) -> bool {
        if self.dead[local] {
            return false;
        }
        self.dead[local] = true;
        self.fault
            .get_or_insert_with(|| format!("ring with world rank {world}: {msg}"));
        true
    }

    /// Something for progress to do: a record, a failure to report, a
    /// cooperative get in flight or to help with, or room on a ring a send
    /// was refused on.
    fn ready(&mut self) -> bool {
        !self.unreported.is_empty()
            || self.coop.as_ref().is_some_and(Coop::busy)
            || self
                .rx
                .iter()
                .any(|p| !self.dead[p.local] && p.ring.has_data())
            || self.tx.iter_mut().flatten().any(TxRing::unblocked)
    }
}

/// Ring local rank `r`'s doorbell if it sleeps. The caller must have
/// published what `r` should see with a SeqCst store (see [`Btl::wait`]);
/// the flag is loaded with SeqCst (a plain load on x86).
#[inline(always)]
fn ring_doorbell(map: &Mapping, layout: &Layout, r: usize) {
    let c = layout.rank_ctrl(r);
    if map.u32_at(c + layout::CTRL_SLEEPING).load(Ordering::SeqCst) != 0 {
        wake_sleeper(map, c);
    }
}

/// [`ring_doorbell`] of a rank that sleeps (rare: only an idle rank sleeps).
#[cold]
#[inline(never)]
fn wake_sleeper(map: &Mapping, c: usize) {
    let bell = map.u32_at(c + layout::CTRL_DOORBELL);
    bell.fetch_add(1, Ordering::Release);
    segment::futex_wake(bell);
}

/// Wakes this rank from its [`Btl::wait`] on behalf of another btl (see
/// [`Btl::waker`]): the same handshake as a peer's [`ring_doorbell`], with
/// the local `woken` flag standing for the published record.
#[derive(Debug)]
struct ShmWake {
    map: Arc<Mapping>,
    /// Offset of our control block.
    ctrl: usize,
    woken: Arc<AtomicBool>,
}

impl Wake for ShmWake {
    fn wake(&self) {
        self.woken.store(true, Ordering::SeqCst);
        if self
            .map
            .u32_at(self.ctrl + layout::CTRL_SLEEPING)
            .load(Ordering::SeqCst)
            != 0
        {
            let bell = self.map.u32_at(self.ctrl + layout::CTRL_DOORBELL);
            bell.fetch_add(1, Ordering::Release);
            segment::futex_wake(bell);
        }
    }
}

impl Btl for ShmBtl {
    fn caps(&self) -> &Capabilities {
        &self.caps
    }

    fn reaches(&self, peer: Rank) -> bool {
        self.local_of(peer).is_some()
    }

    fn send(&mut self, peer: Rank, parts: &[&[u8]], _token: u64) -> Result<Submit, BtlError> {
        let local = self.local_of(peer).ok_or(BtlError::Unreachable(peer))?;
        let node = self.node.as_mut().ok_or(BtlError::Unreachable(peer))?;
        if node.dead[local] {
            return Err(BtlError::PeerFailed(peer));
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.layout.max_frag {
            return Err(BtlError::TooLarge {
                len,
                max: self.layout.max_frag,
            });
        }
        let Some(tx) = node.tx[local].as_mut() else {
            return Err(BtlError::Unreachable(peer));
        };
        match tx.push(parts, len) {
            Ok(Push::Done) => {
                // The record's header went out with a SeqCst store.
                ring_doorbell(&node.map, &self.layout, local);
                Ok(Submit::Done)
            }
            Ok(Push::Full) => Ok(Submit::NoResource),
            Err(c) => {
                if node.fail(local, peer, c) {
                    node.unreported.push(peer);
                }
                Err(BtlError::PeerFailed(peer))
            }
        }
    }

    fn register(&mut self, addr: u64, len: u64) -> Option<MemDesc> {
        self.caps.get.then(|| MemDesc {
            addr,
            len,
            key: u64::from(std::process::id()),
        })
    }

    /// [`Btl::get`]: synchronous below [`ShmConfig::coop_min`] bytes,
    /// cooperative (`Queued`) from there when the owner can help.
    #[allow(unsafe_code)]
    unsafe fn get(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
    ) -> Result<Submit, BtlError> {
        // SAFETY: our caller's contract is the one `get_as` asks for.
        unsafe { self.get_as(peer, remote, offset, dst, token, Pull::Helped) }
    }

    /// [`Btl::get_as`]: [`Pull::Alone`] copies alone, synchronously, below
    /// [`ALONE_MAX`], so that all of it is in the receiver's own cache, and
    /// cooperatively as any get from there on (the data no longer stays in
    /// one core's cache, and two cores copy faster than one);
    /// [`Pull::Unhelped`] copies alone at every size.
    #[allow(unsafe_code)]
    unsafe fn get_as(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
        pull: Pull,
    ) -> Result<Submit, BtlError> {
        let helped = match pull {
            Pull::Helped => true,
            Pull::Alone => dst.len >= ALONE_MAX,
            Pull::Unhelped => false,
        };
        // SAFETY: our caller lends `dst` as `Btl::get` requires, which is
        // what `Dst::lend` asks.
        let dst = unsafe { Dst::lend(dst) };
        self.get_maybe_helped(peer, remote, offset, dst, token, helped)
    }

    fn progress(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> usize {
        // The empty poll, which a waiting rank runs back to back: one
        // Acquire load of the header word at each incoming ring's read
        // position and nothing else (a dead ring that still shows a record
        // takes the full pass, which skips it).
        match &self.node {
            Some(node)
                if !node.unreported.is_empty()
                    || node.coop.as_ref().is_some_and(Coop::busy)
                    || node.rx.iter().any(|p| p.ring.has_data()) =>
            {
                self.deliver(on_event)
            }
            _ => 0,
        }
    }

    /// Sleep until a peer rings our doorbell, an incoming ring has a record,
    /// a ring we were refused on has room again, or `timeout` passes.
    ///
    /// No lost wake-up. We store `sleeping = 1`, SeqCst fence, load the
    /// doorbell value `seen`, then re-check every ring, then
    /// `FUTEX_WAIT(doorbell, seen)`. A sender publishes its record (SeqCst
    /// store of its header word, and of a pad record's before it), loads
    /// `sleeping` (SeqCst), and if set increments the doorbell and calls
    /// `FUTEX_WAKE`. Our fence and its store are totally ordered. If its
    /// store comes first, our re-check (after our fence) sees its record and
    /// we do not sleep. If our fence comes first, its load (after its store,
    /// so after our fence) sees `sleeping = 1` and it increments the doorbell: if that
    /// happened before our load of `seen`, the record is visible to our
    /// re-check (the increment is ordered after the header store); if after,
    /// the futex's value check fails (`doorbell != seen`, checked atomically
    /// by the kernel under its bucket lock) or the wake finds us queued. The
    /// same argument covers a consumer freeing space on a ring we were
    /// refused on: it stores head and loads the ring's want-space flag, both
    /// SeqCst (the flag set by us, then fenced, before our last look at
    /// head), and rings our
    /// doorbell. The futex is shared (not `FUTEX_PRIVATE_FLAG`): the word is
    /// in a `MAP_SHARED` mapping and the waker is another process. Our own
    /// [`ShmWake`] (another btl's watcher thread) follows the sender's side
    /// with its `woken` flag for the record, and we check that flag with the
    /// rings after loading `seen`.
    fn wait(&mut self, timeout: Duration) {
        let Some(node) = self.node.as_mut() else {
            // Alone on the node: nothing can arrive through this btl.
            if !timeout.is_zero() {
                std::thread::sleep(timeout);
            }
            return;
        };
        if timeout.is_zero() || node.ready() {
            return;
        }
        let c = self.layout.rank_ctrl(self.local_rank);
        let map = Arc::clone(&node.map);
        let sleeping = map.u32_at(c + layout::CTRL_SLEEPING);
        let bell = map.u32_at(c + layout::CTRL_DOORBELL);
        sleeping.store(1, Ordering::Relaxed);
        // A consumer may have used up our want-space request on a wake-up
        // that freed too little; ask again before the fence.
        node.tx.iter().flatten().for_each(TxRing::arm);
        fence(Ordering::SeqCst);
        let seen = bell.load(Ordering::Acquire);
        if !node.ready() && !node.woken.load(Ordering::SeqCst) {
            segment::futex_wait(bell, seen, timeout);
        }
        sleeping.store(0, Ordering::Relaxed);
        // A wake that lands after this store only makes the next wait
        // return at once (spurious, allowed).
        node.woken.store(false, Ordering::Relaxed);
    }

    fn waker(&self) -> Option<Arc<dyn Wake>> {
        let node = self.node.as_ref()?;
        Some(Arc::new(ShmWake {
            map: Arc::clone(&node.map),
            ctrl: self.layout.rank_ctrl(self.local_rank),
            woken: Arc::clone(&node.woken),
        }))
    }

    /// Alone on the node nothing can arrive, so watching is trivial; with a
    /// segment the rank sleeps here instead (no fd to watch a futex with).
    fn can_watch(&self) -> bool {
        self.node.is_none()
    }

    fn watch(&mut self, _wake: &Arc<dyn Wake>, timeout: Duration) -> Duration {
        if self.node.is_none() {
            timeout
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    #[test]
    fn btl_is_send() {
        assert_send::<ShmBtl>();
    }

    #[test]
    fn alone_on_the_node() {
        let mut fences = 0;
        let mut btl = ShmBtl::bootstrap(
            "/dev/shm/gmpi-unit-alone-never-created",
            0,
            1,
            &[7],
            &ShmConfig::default(),
            &mut || {
                fences += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(fences, 2);
        assert!(!btl.reaches(7) && !btl.reaches(0));
        assert!(!btl.cma_enabled());
        assert_eq!(btl.memory_per_rank(), 0);
        assert_eq!(btl.send(0, &[b"x"], 0), Err(BtlError::Unreachable(0)));
        assert_eq!(btl.progress(&mut |_| {}), 0);
        assert!(!Path::new("/dev/shm/gmpi-unit-alone-never-created").exists());
        // Nothing arrives: no waker, and watching is trivial.
        assert!(btl.waker().is_none() && btl.can_watch());
        let w: Arc<dyn Wake> = Arc::new(NoWake);
        assert_eq!(
            btl.watch(&w, Duration::from_secs(3)),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn bad_arguments_still_fence_twice() {
        for (rank, size, world, cfg) in [
            (2, 2, vec![0, 1], ShmConfig::default()),
            (0, 2, vec![0], ShmConfig::default()),
            (0, 2, vec![3, 3], ShmConfig::default()),
            (
                0,
                2,
                vec![0, 1],
                ShmConfig {
                    eager_limit: 100,
                    max_frag: 64,
                    ..ShmConfig::default()
                },
            ),
        ] {
            let mut fences = 0;
            let e = ShmBtl::bootstrap(
                "/dev/shm/gmpi-unit-bad",
                rank,
                size,
                &world,
                &cfg,
                &mut || {
                    fences += 1;
                    Ok(())
                },
            )
            .unwrap_err();
            assert_eq!(fences, 2, "{e}");
        }
    }

    #[test]
    fn failing_fence_is_reported_and_cleans_up() {
        let path = format!("/dev/shm/gmpi-unit-fence-{}", std::process::id());
        let e = ShmBtl::bootstrap(&path, 0, 2, &[0, 1], &ShmConfig::default(), &mut || {
            Err("pmi gone".into())
        })
        .unwrap_err();
        assert!(e.to_string().contains("pmi gone"), "{e}");
        assert!(!Path::new(&path).exists());
    }

    /// Two ranks on threads; the returned file handle stays valid after the
    /// unlink and writes through the same pages as the mappings.
    fn pair_with_file(cfg: &ShmConfig) -> (ShmBtl, ShmBtl, std::fs::File) {
        use std::sync::{Barrier, Mutex};
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let path = format!(
            "/dev/shm/gmpi-unit-corrupt-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let barrier = Arc::new(Barrier::new(2));
        let file = Arc::new(Mutex::new(None));
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let (barrier, file, path, cfg) = (
                    Arc::clone(&barrier),
                    Arc::clone(&file),
                    path.clone(),
                    cfg.clone(),
                );
                std::thread::spawn(move || {
                    ShmBtl::bootstrap(&path, r, 2, &[10, 11], &cfg, &mut || {
                        if r == 1 && file.lock().unwrap().is_none() {
                            *file.lock().unwrap() = std::fs::OpenOptions::new()
                                .read(true)
                                .write(true)
                                .open(&path)
                                .ok();
                        }
                        barrier.wait();
                        Ok(())
                    })
                })
            })
            .collect();
        let mut it = hs.into_iter().map(|h| h.join().unwrap().unwrap());
        let (a, b) = (it.next().unwrap(), it.next().unwrap());
        let f = file.lock().unwrap().take().unwrap();
        (a, b, f)
    }

    struct NoWake;
    impl Wake for NoWake {
        fn wake(&self) {}
    }

    /// The waker ends a wait in progress from another thread (well before a
    /// long timeout), and a wake that comes first makes the next wait
    /// return at once; the rank with a segment sleeps rather than watches.
    #[test]
    fn waker_interrupts_wait() {
        const LONG: Duration = Duration::from_secs(20);
        let (mut a, _b, _f) = pair_with_file(&ShmConfig::default());
        assert!(!a.can_watch());
        let w = a.waker().expect("a rank with a segment has a waker");
        for _ in 0..3 {
            let w2 = Arc::clone(&w);
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                w2.wake();
            });
            let start = std::time::Instant::now();
            a.wait(LONG);
            assert!(start.elapsed() < LONG, "the wake was lost");
            t.join().unwrap();
        }
        w.wake();
        let start = std::time::Instant::now();
        a.wait(LONG);
        assert!(start.elapsed() < LONG, "a wake before the wait was lost");
    }

    fn events(b: &mut ShmBtl) -> Vec<String> {
        let mut v = Vec::new();
        b.progress(&mut |e| v.push(format!("{e:?}")));
        v
    }

    fn frag_lens(b: &mut ShmBtl) -> Vec<usize> {
        let mut v = Vec::new();
        b.progress(&mut |e| match e {
            Event::Frag { data, .. } => v.push(data.len()),
            other => panic!("unexpected event {other:?}"),
        });
        v
    }

    /// A drain whose first record ends on a cache-line boundary hands that
    /// record up alone (the next header word is in a line the producer wrote
    /// last); the next pass takes the rest, in order. A drain whose first
    /// record ends inside a line goes on through the stream, boundaries and
    /// all.
    #[test]
    fn lone_record_ending_on_a_line_is_handed_up_alone() {
        let (mut a, mut b, _f) = pair_with_file(&ShmConfig::default());
        let line = layout::LINE - layout::REC_HDR;
        // 64-byte record, then 32, 32: the first ends on the boundary.
        for len in [line, 24, 24] {
            assert_eq!(a.send(11, &[&vec![1u8; len]], 0), Ok(Submit::Done));
        }
        assert_eq!(frag_lens(&mut b), [line]);
        assert_eq!(frag_lens(&mut b), [24, 24]);
        assert_eq!(frag_lens(&mut b), Vec::<usize>::new());
        // Now at offset 128: 32-byte records; the first ends mid-line, so
        // the drain continues past the boundary after the second.
        for _ in 0..5 {
            assert_eq!(a.send(11, &[&[2u8; 24]], 0), Ok(Submit::Done));
        }
        assert_eq!(frag_lens(&mut b), [24; 5]);
    }

    #[test]
    fn corrupt_record_header_reports_peer_failed_once() {
        use std::os::unix::fs::FileExt;
        let (mut a, mut b, f) = pair_with_file(&ShmConfig::default());
        let ring = a.layout.ring(0, 1) + layout::RING_CTRL_BYTES;
        a.send(11, &[b"first"], 0).unwrap();
        a.send(11, &[b"second"], 0).unwrap();
        // Overwrite the second record's header.
        let second = layout::record_size(b"first".len());
        f.write_at(
            &0x1234_5678_9abc_def0u64.to_le_bytes(),
            (ring + second) as u64,
        )
        .unwrap();
        let ev = events(&mut b);
        assert_eq!(ev.len(), 2, "{ev:?}");
        assert!(ev[0].contains("first".as_bytes().first().unwrap().to_string().as_str()));
        assert_eq!(ev[1], "PeerFailed { peer: 10 }");
        assert!(
            b.fault().unwrap().contains("bad record header"),
            "{:?}",
            b.fault()
        );
        assert!(
            events(&mut b).is_empty(),
            "reported once, ring no longer read"
        );
        assert_eq!(b.send(10, &[b"x"], 0), Err(BtlError::PeerFailed(10)));
        // The other direction is unaffected for the sender's side.
        b.wait(Duration::from_millis(1));
    }

    #[test]
    #[allow(unsafe_code)] // lends `dst` to a get
    fn cooperative_get_fails_when_its_peer_fails() {
        use std::os::unix::fs::FileExt;
        let (mut a, mut b, f) = pair_with_file(&ShmConfig::default());
        let src = vec![7u8; 1 << 20];
        let desc = a.register(src.as_ptr() as u64, src.len() as u64).unwrap();
        let mut dst = vec![0u8; src.len()];
        // SAFETY: `dst` is not touched again, and lives until the explicit
        // drop at the end, after the GetFailed that ends the get.
        let got = unsafe { b.get(10, &desc, 0, LocalMem::of(&mut dst), 42) };
        assert_eq!(got, Ok(Submit::Queued));
        // Rank 10's ring to us turns out corrupt before we copied anything.
        let ring = a.layout.ring(0, 1) + layout::RING_CTRL_BYTES;
        f.write_at(&0x0bad_0bad_0bad_0badu64.to_le_bytes(), ring as u64)
            .unwrap();
        let ev = events(&mut b);
        assert_eq!(
            ev,
            vec![
                "PeerFailed { peer: 10 }".to_string(),
                "GetFailed { token: 42, error: PeerFailed(10) }".to_string()
            ]
        );
        assert!(events(&mut b).is_empty());
        // Nothing is in flight any more: wait() may sleep.
        let t = std::time::Instant::now();
        b.wait(Duration::from_millis(20));
        assert!(t.elapsed() >= Duration::from_millis(10));
        // The helper finds its request refused: the slot was closed.
        assert_eq!(a.progress(&mut |e| panic!("{e:?}")), 0);
        drop(dst);
    }

    #[test]
    fn corrupt_counters_are_caught() {
        use std::os::unix::fs::FileExt;
        let (a, mut b, f) = pair_with_file(&ShmConfig::default());
        // A pad record at offset 0 (impossible: every record fits there).
        let ring = a.layout.ring(0, 1) + layout::RING_CTRL_BYTES;
        f.write_at(
            &layout::encode(layout::Kind::Pad).to_le_bytes(),
            ring as u64,
        )
        .unwrap();
        assert_eq!(events(&mut b), vec!["PeerFailed { peer: 10 }".to_string()]);
        assert!(
            b.fault().unwrap().contains("bad record header"),
            "{:?}",
            b.fault()
        );
        // A record longer than max_frag.
        let (a1, mut b1, f1) = pair_with_file(&ShmConfig::default());
        let ring = a1.layout.ring(0, 1) + layout::RING_CTRL_BYTES;
        f1.write_at(
            &layout::encode(layout::Kind::Data(1 << 20)).to_le_bytes(),
            ring as u64,
        )
        .unwrap();
        assert_eq!(events(&mut b1), vec!["PeerFailed { peer: 10 }".to_string()]);
        drop(a1);
        // Head of ring 0 -> 1 ahead of the producer's tail: the producer
        // notices when it reloads head (the ring looks full first).
        let (mut a2, _b2, f2) = pair_with_file(&ShmConfig {
            ring_bytes: Some(0),
            ..ShmConfig::default()
        });
        let ctrl = a2.layout.ring(0, 1);
        f2.write_at(
            &(1u64 << 40).to_le_bytes(),
            (ctrl + layout::RING_HEAD) as u64,
        )
        .unwrap();
        let msg = [0u8; 4000];
        let mut res = Ok(Submit::Done);
        for _ in 0..100 {
            res = a2.send(11, &[&msg], 0);
            if res.is_err() {
                break;
            }
        }
        assert_eq!(res, Err(BtlError::PeerFailed(11)));
        assert_eq!(events(&mut a2), vec!["PeerFailed { peer: 11 }".to_string()]);
        drop(a);
    }
}
