//! gmpi-btl-ib: the transport between nodes over InfiniBand or RoCE verbs.
//!
//! One port of one device per rank ([`fabric::Fabric`]: a protection
//! domain, one completion queue, one shared receive queue, one datagram
//! queue pair), and one RC queue pair per peer on another node, made on
//! first use ([`conn`]). The protocol here is written
//! against the [`fabric::Fabric`] trait only, so it runs unchanged over
//! libibverbs (`verbs.rs`, feature `ib`) and over the in-crate verbs model
//! its tests use (`model.rs`).
//!
//! # File map
//! - `lib.rs`: [`IbConfig`], [`IbBtl`] (credits, the shared receive queue,
//!   selective signalling, RDMA READ gets, registrations, the [`Btl`] impl).
//! - `fabric.rs`: the verbs the protocol uses, as plain data and a trait.
//! - `card.rs`: the business card (LID, GID, MTU, the datagram queue
//!   pair, a nonce).
//! - `conn.rs`: the connection messages that set up a peer's RC queue
//!   pair on first use, and their retry schedule.
//! - `gpudirect.rs`: whether and how the NIC registers GPU memory
//!   (dma-buf, else `nvidia_peermem`, else staging).
//! - `rcache.rs`: the registration cache of host memory, and the
//!   [`rcache::MemWatch`] it trusts to hear when memory leaves.
//! - `devcache.rs`: the registration cache of device memory, by
//!   allocation and buffer id.
//! - `memwatch.rs`: that watch over a `userfaultfd` and a helper thread.
//! - `select.rs`: `GMPI_IB_DEVICES` and the choice of a port.
//! - `model.rs`: an in-memory verbs model with RC's delivery, RNR and
//!   remote-access semantics, for the protocol's tests.
//! - `verbs.rs` (feature `ib`): the only `unsafe` of the crate besides the
//!   model's copies; RAII owners of every verbs object, device and port
//!   selection, the GID of RoCE v2.
//!
//! # Protocol
//! - **Connections on first use.** `MPI_Init` makes no RC queue pair: the
//!   first send or get towards a peer makes one and asks the peer for its
//!   own over the datagram queue pairs (REQ, REP, RTU: [`conn`]); until the
//!   peer's answer, sends answer [`Submit::NoResource`] (the pml holds them
//!   and retries) and gets wait. A rank therefore holds queue pairs only
//!   for the peers it talks to.
//! - **Eager.** A fragment (at most [`IbConfig::max_frag`] bytes) is copied
//!   into a registered send slot, or carried inline when it fits the queue
//!   pair's inline limit, and sent with immediate data. The immediate data
//!   returns credits: each peer may have [`IbConfig::credits`] fragments in
//!   this rank's shared receive queue, and every SEND's immediate data gives
//!   back the receive buffers consumed since the last one. A receiver that
//!   owes half a peer's credits and has nothing to send returns them in a
//!   zero-length *credit message* (its immediate data flagged
//!   [`CREDIT_ONLY`]), for which the receive queue keeps
//!   [`CREDIT_RESERVE`] buffers per peer beyond the credits. So an RNR NAK
//!   does not happen in normal operation; the queue pairs still retry RNR
//!   forever, as a safety net.
//! - **Receive buffers** are registered and posted a peer's share (its
//!   credits and reserve) at a time, when that peer's queue pair is made, so
//!   a rank's memory grows with the peers it talks to, not with the job;
//!   they come back to the shared receive queue once per progress pass, in
//!   one post (batched reposting).
//! - **Selective signalling**: one send in [`IbConfig::signal_every`] asks
//!   for a completion, and every send does once the slots or a send queue
//!   run low; a completion retires every earlier work request of its queue
//!   pair (send-queue completions come in order). Nothing waits unsignalled
//!   when resources are short, so a refused send always has a completion
//!   ahead that frees room.
//! - **Gets** ([`Btl::get`], the pml's `rndv/get`): RDMA READs from the
//!   owner's registration ([`Btl::register`]: a `MemDesc` with the rkey),
//!   in chunks of at most [`IbConfig::read_chunk`], at most the port's
//!   `max_rd_atomic` outstanding per queue pair. Bounds and the key's width
//!   are checked before anything is posted.
//! - **Puts** ([`Btl::put`], one-sided windows): RDMA WRITEs into memory
//!   its owner exposed for a window ([`Btl::register_window`]: registered
//!   writable, on its own, for the window's life), chunked like gets (at
//!   most `max_rd_atomic` chunks of one put in flight); the source comes
//!   from the registration cache. Puts and host gets of at most
//!   [`BOUNCE_MAX`] bytes go through a registered send slot instead (a
//!   put's bytes copied in at the start, a get's out at its completion):
//!   a window's small transfers come from and go to buffers, often fresh
//!   temporaries, that registering would cost more than copying. A put completes when its last WRITE's
//!   completion comes: the owner's port has acknowledged every byte.
//! - **Registrations** of host memory (a send buffer peers read, a get's
//!   destination) come from the registration cache ([`rcache`]): the
//!   buffer's pages are registered once and stay registered after the
//!   rendezvous ([`Btl::deregister`], after the pml's FIN, or the get's
//!   end), serving every later request inside them, until the memory
//!   watch ([`memwatch`], a `userfaultfd`) reports that the program
//!   unmapped, moved or emptied any of those pages: a freed and
//!   reallocated buffer can never meet a stale registration. Without a
//!   watch, registrations are counted per use and released with the last.
//!   Device memory comes from its own cache ([`devcache`], turned on by
//!   [`IbBtl::set_device_cache`]): the whole allocation is registered
//!   once and serves every later request made under the same CUDA buffer
//!   id (freeing device memory raises no event to watch; a freed and
//!   reallocated address comes with a new id).
//! - **GPUDirect RDMA** ([`IbBtl::set_gpudirect`], chosen by
//!   [`gpudirect::decide`]): device memory is registered like host memory,
//!   through its dma-buf (`ibv_reg_dmabuf_mr`, addressed by the device
//!   address as iova) or by its address (`nvidia_peermem`): a sender's
//!   buffer by [`Btl::register_device`], a receiver's destination by
//!   [`Btl::get_device`], so RDMA READs move GPU memory to GPU memory with
//!   no host copy (the pml's `rndv/gpudirect`).
//! - **Failures**: a fatal asynchronous event fails the peer of the queue
//!   pair it names, or every peer when it names none (port down, device
//!   fatal, a queue of the port); a completion error (a flush too: the queue pair is then
//!   in the error state) fails the peer of its queue pair ([`Event::PeerFailed`], once, with the device, the peer
//!   and the verbs status in the log); sends to it fail, its gets fail.
//! - [`Btl::wait`] sleeps in the completion channel; [`Btl::waker`] wakes
//!   it. [`Btl::watch`] has no helper thread: a rank asleep in another btl
//!   wakes at least every [`WATCH_NAP`] to look at this one.
//! - Dropping the btl waits (at most [`IbConfig::linger`]) for every posted
//!   send to complete, so the last messages of a job are not lost when the
//!   queue pairs are destroyed.

// `unsafe` lives in `verbs.rs` and `model.rs` (memory the device or the
// model reads and writes), in the few calls below that hand the
// `Fabric` contract on, and in the copies of small one-sided transfers
// through send slots (`Held::Bounce`), each with a SAFETY comment.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod card;
pub mod conn;
pub mod devcache;
pub mod fabric;
pub mod gpudirect;
pub mod memwatch;
pub mod model;
pub mod rcache;
pub mod select;
#[cfg(feature = "ib")]
pub mod verbs;

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use gmpi_btl::{
    Btl, BtlError, Capabilities, DeviceMem, DeviceReg, Event, LocalMem, MemDesc, Rank, Submit, Wake,
};

use crate::card::Card;
use crate::conn::{Kind, Msg, MSG_BYTES};
use crate::fabric::{
    wc_status_str, Fabric, LocalQp, Mr, SendWr, Sge, Wc, WcKind, GRH_BYTES, WC_FLUSH_ERR,
};

/// Tracing target.
const LOG: &str = "btl";

/// Immediate-data flag of a credit message (no payload).
pub const CREDIT_ONLY: u32 = 1 << 31;
/// Receive buffers per peer beyond its credits, for its credit messages.
pub const CREDIT_RESERVE: u32 = 4;
/// Longest a rank asleep in another btl goes without looking at this one.
pub const WATCH_NAP: Duration = Duration::from_millis(1);
/// Completions one progress pass takes at most.
const POLL_BATCH: usize = 64;

/// Work-request id kinds (top two bits).
const K_SEND: u64 = 0;
const K_READ: u64 = 1;
const K_RECV: u64 = 2;
/// A datagram (connection message): the peer field says which way
/// ([`CM_TX`] or [`CM_RX`]), the low bits the buffer.
const K_CM: u64 = 3;
const CM_TX: usize = 0;
const CM_RX: usize = 1;

/// Datagram send buffers (a connection message each).
const CM_SLOTS: usize = 64;
/// Datagram receive buffers.
const CM_RECVS: usize = 128;
/// Bytes of a datagram receive buffer: the GRH room, then a message.
const CM_RX_BYTES: usize = GRH_BYTES + MSG_BYTES;

fn wr_id(kind: u64, peer: usize, low: u64) -> u64 {
    (kind << 62) | ((peer as u64 & 0x3f_ffff) << 40) | (low & 0xff_ffff_ffff)
}

fn wr_kind(id: u64) -> u64 {
    id >> 62
}

fn wr_peer(id: u64) -> usize {
    ((id >> 40) & 0x3f_ffff) as usize
}

fn wr_low(id: u64) -> u64 {
    id & 0xff_ffff_ffff
}

/// Receive work requests for buffers `slots` of `size` bytes, each at the
/// address and with the key `place` gives, their ids of kind and tag `id`
/// and the slot, into `out` (emptied first; kept between passes, so that a
/// repost allocates nothing).
fn slots_to_post(
    out: &mut Vec<(u64, Sge)>,
    slots: &[u32],
    id: (u64, usize),
    size: usize,
    place: impl Fn(u32) -> (u64, u32),
) {
    out.clear();
    out.extend(slots.iter().map(|&s| {
        let (addr, lkey) = place(s);
        (
            wr_id(id.0, id.1, s as u64),
            Sge {
                addr,
                len: size as u32,
                lkey,
            },
        )
    }));
}

/// Settings of the transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbConfig {
    /// Largest fragment, header included (the size of every send slot and
    /// receive buffer).
    pub max_frag: usize,
    /// Largest payload the pml sends eagerly.
    pub eager_limit: usize,
    /// Smallest message the pml sends by get (RDMA READ) rendezvous.
    pub get_threshold: usize,
    /// Fragments each peer may have in this rank's receive queue.
    pub credits: u32,
    /// Registered send slots.
    pub send_slots: usize,
    /// One send in this many asks for a completion.
    pub signal_every: u32,
    /// Largest RDMA READ of a get; a larger get is pipelined in chunks.
    pub read_chunk: usize,
    /// RDMA READs outstanding per queue pair at most (and at most the
    /// port's `max_rd_atomic`).
    pub max_reads: u32,
    /// How long dropping the btl waits for posted sends.
    pub linger: Duration,
    /// Receive buffers to post, overriding what the credits need (for
    /// tests: fewer than the peers' credits makes receivers answer RNR,
    /// which the queue pairs retry).
    pub recv_buffers: Option<u32>,
}

impl Default for IbConfig {
    fn default() -> Self {
        Self {
            max_frag: 16 << 10,
            eager_limit: 12 << 10,
            get_threshold: 12 << 10,
            credits: 32,
            send_slots: 256,
            signal_every: 16,
            // Measured over Soft-RoCE (1 MiB streams: 1 MiB reads 37-45
            // MB/s, 256 KiB and 128 KiB reads 52-63, perftest's ib_read_bw
            // 50): reads in flight overlap where one large read does not; a
            // quarter MiB is still far above any link's bandwidth-delay
            // product, so a real HCA pays a few more work requests only.
            read_chunk: 256 << 10,
            max_reads: 8,
            linger: Duration::from_secs(2),
            recv_buffers: None,
        }
    }
}

/// A posted send-queue work request not yet known complete.
#[derive(Debug, Clone, Copy)]
struct Posted {
    seq: u64,
    /// The send slot it holds.
    slot: Option<u32>,
    /// The get whose chunk it is.
    get: Option<u64>,
}

/// A REQ waiting for its answer.
#[derive(Debug, Clone, Copy)]
struct Asking {
    /// When to ask again.
    next: Instant,
    /// REQs sent so far.
    tries: u32,
    /// The first one.
    since: Instant,
    /// Whether the slow answer was warned about.
    warned: bool,
}

/// A peer on another node.
#[derive(Debug)]
struct Peer {
    rank: Rank,
    /// Its card ([`IbBtl::add_peer`]).
    card: Option<Card>,
    /// The address handle of its datagram queue pair, once made.
    ah: Option<u64>,
    /// Our RC queue pair towards it, made on first use.
    qp: Option<LocalQp>,
    /// The peer's queue pair ours is connected to (RTR, RTS).
    remote_qpn: Option<u32>,
    /// The peer's queue pair is known to be connected too: sends may go.
    ready: bool,
    /// Our REQ, while unanswered.
    asking: Option<Asking>,
    /// Fragments we may still send it.
    credits: u32,
    /// Its fragments consumed here since we last told it.
    owed: u32,
    /// Send-queue entries in flight, oldest first.
    posted: VecDeque<Posted>,
    next_seq: u64,
    since_signal: u32,
    reads_out: u32,
    failed: bool,
    reported: bool,
}

/// What registered memory a get holds.
#[derive(Debug, Clone, Copy)]
enum Held {
    /// An entry of the host registration cache.
    Host(u64),
    /// An entry of the device registration cache.
    Device(u64),
    /// A send slot it goes through (a small one-sided transfer): a put's
    /// bytes were copied in when it started; a get's are copied out to
    /// `to` when it completes.
    Bounce { slot: u32, to: u64 },
}

/// Largest host transfer of [`Btl::get`] or [`Btl::put`] that goes through
/// a registered send slot instead of registering its memory (a window's
/// small puts and gets: a copy costs less than a registration, or a look-up
/// in the cache that a fresh temporary buffer misses).
pub const BOUNCE_MAX: usize = 4096;

/// A get (RDMA READs) or a put (RDMA WRITEs) in progress.
#[derive(Debug)]
struct GetOp {
    token: u64,
    /// A put: the bytes go from `dst` to the peer.
    write: bool,
    peer: usize,
    remote_addr: u64,
    rkey: u32,
    /// The destination's (a put's source's) registration (it may start
    /// before `dst`).
    local: Mr,
    /// Its entry in the registration cache that holds it, or its slot.
    held: Held,
    /// Where the bytes land (a put: come from): the destination (source),
    /// or the slot they go through.
    dst: u64,
    len: u64,
    /// Bytes posted so far.
    next: u64,
    outstanding: u32,
    error: Option<String>,
}

/// The verbs transport over fabric `F`.
pub struct IbBtl<F: Fabric> {
    rank: Rank,
    caps: Capabilities,
    cfg: IbConfig,
    fabric: F,
    /// Peers by index; `index[rank]` finds them.
    peers: Vec<Peer>,
    index: Vec<Option<usize>>,
    by_qpn: FxHashMap<u32, usize>,
    /// Send slots (registered once).
    tx: Box<[u8]>,
    tx_mr: Mr,
    free_slots: Vec<u32>,
    /// Receive buffers, in slabs registered once each: one slab of a
    /// peer's share (credits and reserve) per peer connected
    /// ([`IbBtl::grow_rx`]), or one of [`IbConfig::recv_buffers`].
    rx: Vec<(Box<[u8]>, Mr)>,
    /// The slab of each receive buffer (buffers are numbered across slabs).
    rx_slab: Vec<(u32, u32)>,
    repost: Vec<u32>,
    /// Receive work requests being posted (kept for its capacity).
    to_post: Vec<(u64, Sge)>,
    wcs: Vec<Wc>,
    gets: FxHashMap<u64, GetOp>,
    next_get: u64,
    /// Gets with chunks still to post, in order.
    pending_gets: VecDeque<u64>,
    /// Registrations of host memory (send buffers peers read, gets'
    /// destinations), cached while their memory stays mapped.
    rcache: rcache::Rcache,
    /// Registrations of device memory (GPUDirect: send buffers peers
    /// read, gets' destinations), by allocation and buffer id.
    devcache: devcache::DevCache,
    /// Windows' memory, registered writable by peers
    /// ([`Btl::register_window`]), by rkey, until deregistered.
    windows: FxHashMap<u32, Mr>,
    /// Failures to report.
    failed_news: Vec<Rank>,
    /// Peers (by index) that were owed half their credits when last
    /// counted: [`IbBtl::return_credits`] looks at these only.
    owing: Vec<usize>,
    /// The datagram queue pair's number, and this run's nonce (the card).
    ud_qpn: u32,
    nonce: u64,
    /// Datagram send buffers (registered once) and the free ones.
    cm_tx: Box<[u8]>,
    cm_tx_mr: Mr,
    cm_free: Vec<u32>,
    /// Datagram receive buffers (registered once) and those to repost.
    cm_rx: Box<[u8]>,
    cm_rx_mr: Mr,
    cm_repost: Vec<u32>,
    /// Peers with a REQ unanswered (so that a progress pass without any
    /// reads no clock and walks no peer list).
    asking: usize,
    waker: Arc<dyn Wake>,
    warned_reg: bool,
    warned_dev_reg: bool,
}

impl<F: Fabric> std::fmt::Debug for IbBtl<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IbBtl")
            .field("rank", &self.rank)
            .field("port", self.fabric.port())
            .field("peers", &self.peers.len())
            .field("gets", &self.gets.len())
            .finish_non_exhaustive()
    }
}

/// What the transport offers the pml with settings `cfg` (more than tcp's
/// exclusivity, less than shm's: ranks of one node stay on shm).
pub fn caps(cfg: &IbConfig) -> Capabilities {
    Capabilities {
        name: "ib",
        eager_limit: cfg.eager_limit.min(cfg.max_frag),
        max_send_size: cfg.max_frag,
        get: true,
        put: true,
        exclusivity: 50,
        get_threshold: cfg.get_threshold,
        cuda_ipc: false,
        gpudirect: None,
    }
}

/// Why a registration failed, with the fix where it is the locked-memory
/// limit.
fn reg_error(what: &str, len: u64, e: &str) -> String {
    let hint = if e.contains("Cannot allocate memory") || e.contains("ENOMEM") {
        " (the locked-memory limit is too low: raise it with `ulimit -l unlimited`, or `LimitMEMLOCK=infinity` / `/etc/security/limits.conf` for the launcher's sessions)"
    } else {
        ""
    };
    format!("registering {len} bytes of {what}: {e}{hint}")
}

impl<F: Fabric> IbBtl<F> {
    /// The transport of `rank` (of `size`) over `fabric`, reaching `peers`
    /// once their cards are added ([`IbBtl::add_peer`]); their queue pairs
    /// are made on first use.
    pub fn new(
        rank: Rank,
        size: u32,
        mut fabric: F,
        cfg: IbConfig,
        peers: &[Rank],
    ) -> Result<Self, String> {
        let port = fabric.port().clone();
        if cfg.max_frag < 64 || cfg.max_frag as u64 > port.max_msg {
            return Err(format!(
                "ib: fragment size {} outside 64..={}",
                cfg.max_frag, port.max_msg
            ));
        }
        let mut cfg = cfg;
        let n = peers.len().max(1) as u32;
        // The receive queue holds every peer's credits and reserve.
        let per_peer = (port.srq_depth / n).max(2);
        if per_peer < cfg.credits + CREDIT_RESERVE {
            cfg.credits = per_peer.saturating_sub(CREDIT_RESERVE).max(1);
        }
        cfg.signal_every = cfg.signal_every.clamp(1, (port.sq_depth / 4).max(1));
        // Buffers posted now: a fixed number if the settings say so, else
        // none until a peer connects (each brings its share).
        let rx_n = match cfg.recv_buffers {
            Some(b) => {
                if b < n * (cfg.credits + CREDIT_RESERVE) {
                    tracing::warn!(target: LOG, "ib: {b} receive buffers for {n} peers of {} credits: receivers will answer RNR", cfg.credits);
                }
                b.clamp(1, port.srq_depth.max(1)) as usize
            }
            None => 0,
        };
        let mut tx = vec![0u8; cfg.send_slots * cfg.max_frag].into_boxed_slice();
        let tx_mr = fabric
            .reg_mr(tx.as_mut_ptr() as u64, tx.len() as u64, false)
            .map_err(|e| reg_error("send slots", tx.len() as u64, &e))?;
        let mut cm_tx = vec![0u8; CM_SLOTS * MSG_BYTES].into_boxed_slice();
        let mut cm_rx = vec![0u8; CM_RECVS * CM_RX_BYTES].into_boxed_slice();
        let cm_tx_mr = fabric
            .reg_mr(cm_tx.as_mut_ptr() as u64, cm_tx.len() as u64, false)
            .map_err(|e| reg_error("connection messages", cm_tx.len() as u64, &e))?;
        let cm_rx_mr = fabric
            .reg_mr(cm_rx.as_mut_ptr() as u64, cm_rx.len() as u64, false)
            .map_err(|e| reg_error("connection messages", cm_rx.len() as u64, &e))?;
        let ud_qpn = fabric
            .create_ud(CM_RECVS as u32)
            .map_err(|e| format!("ib: the datagram queue pair: {e}"))?;
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| format!("ib: a random nonce: {e}"))?;
        let mut index = vec![None; size as usize];
        let mut list = Vec::with_capacity(peers.len());
        for &p in peers {
            if p == rank || p >= size || index[p as usize].is_some() {
                return Err(format!("ib: bad peer list {peers:?}"));
            }
            index[p as usize] = Some(list.len());
            list.push(Peer {
                rank: p,
                card: None,
                ah: None,
                qp: None,
                remote_qpn: None,
                ready: false,
                asking: None,
                credits: cfg.credits,
                owed: 0,
                posted: VecDeque::new(),
                next_seq: 1,
                since_signal: 0,
                reads_out: 0,
                failed: false,
                reported: false,
            });
        }
        let waker = fabric.waker();
        let caps = caps(&cfg);
        let mut b = Self {
            rank,
            caps,
            cfg,
            fabric,
            peers: list,
            index,
            by_qpn: FxHashMap::default(),
            tx,
            tx_mr,
            free_slots: Vec::new(),
            rx: Vec::new(),
            rx_slab: Vec::new(),
            repost: Vec::new(),
            to_post: Vec::new(),
            wcs: Vec::with_capacity(POLL_BATCH),
            gets: FxHashMap::default(),
            next_get: 1,
            pending_gets: VecDeque::new(),
            rcache: rcache::Rcache::new(Box::new(rcache::NoWatch), rcache::Limits::default()),
            devcache: devcache::DevCache::new(rcache::Limits::NONE),
            windows: FxHashMap::default(),
            failed_news: Vec::new(),
            owing: Vec::new(),
            ud_qpn,
            nonce: u64::from_le_bytes(nonce),
            cm_tx,
            cm_tx_mr,
            cm_free: (0..CM_SLOTS as u32).rev().collect(),
            cm_rx,
            cm_rx_mr,
            cm_repost: (0..CM_RECVS as u32).collect(),
            asking: 0,
            waker,
            warned_reg: false,
            warned_dev_reg: false,
        };
        b.free_slots = (0..b.cfg.send_slots as u32).rev().collect();
        if rx_n > 0 {
            b.grow_rx(rx_n)?;
        }
        b.repost_cm()?;
        tracing::debug!(target: LOG, "ib: {} port {} ({:?}, MTU {} B, GID index {}), {} peers, {} credits each, receive buffers of {} B: {}",
            port.device, port.port, port.link, port.mtu_bytes(), port.gid_index, b.peers.len(), b.cfg.credits, b.cfg.max_frag,
            if rx_n > 0 { format!("{rx_n}") } else { format!("{} per peer connected", b.cfg.credits + CREDIT_RESERVE) });
        Ok(b)
    }

    /// The card to publish (see [`card`]).
    pub fn card(&self) -> String {
        card::encode(self.fabric.port(), self.ud_qpn, self.nonce)
    }

    /// Reach `peer` through the card it published (its queue pair is made
    /// on first use).
    pub fn add_peer(&mut self, peer: Rank, card: &str) -> Result<(), String> {
        let i = self
            .index
            .get(peer as usize)
            .copied()
            .flatten()
            .ok_or_else(|| format!("ib: rank {peer} is not a peer of rank {}", self.rank))?;
        let c = card::decode(card).map_err(|e| format!("ib: rank {peer}'s {e}"))?;
        self.peers[i].card = Some(c);
        Ok(())
    }

    /// The number of this rank's queue pair towards `peer`, once made.
    pub fn queue_pair_of(&self, peer: Rank) -> Option<u32> {
        let i = self.index.get(peer as usize).copied().flatten()?;
        self.peers[i].qp.map(|q| q.qpn)
    }

    /// RC queue pairs made so far (one per peer talked to).
    pub fn queue_pairs(&self) -> usize {
        self.by_qpn.len()
    }

    /// Peer `i`'s queue pair, made now if it has none.
    fn ensure_qp(&mut self, i: usize) -> Result<LocalQp, String> {
        if let Some(q) = self.peers[i].qp {
            return Ok(q);
        }
        // The peer's share of receive buffers is posted before its queue
        // pair exists, so before anything can arrive on it.
        if self.cfg.recv_buffers.is_none() {
            self.grow_rx((self.cfg.credits + CREDIT_RESERVE) as usize)?;
        }
        let q = self.fabric.create_qp()?;
        self.by_qpn.insert(q.qpn, i);
        self.peers[i].qp = Some(q);
        Ok(q)
    }

    /// Register a slab of `n` more receive buffers and post them.
    fn grow_rx(&mut self, n: usize) -> Result<(), String> {
        let room = (self.fabric.port().srq_depth as usize).saturating_sub(self.rx_slab.len());
        let n = n.min(room);
        if n == 0 {
            return Ok(());
        }
        let f = self.cfg.max_frag;
        let mut slab = vec![0u8; n * f].into_boxed_slice();
        let mr = self
            .fabric
            .reg_mr(slab.as_mut_ptr() as u64, slab.len() as u64, false)
            .map_err(|e| reg_error("receive buffers", slab.len() as u64, &e))?;
        let k = self.rx.len() as u32;
        self.rx.push((slab, mr));
        let first = self.rx_slab.len() as u32;
        self.rx_slab.extend((0..n as u32).map(|j| (k, j)));
        self.repost.extend(first..first + n as u32);
        self.repost_buffers()
    }

    /// Receive buffer `slot`'s bytes.
    fn rx_buf(&self, slot: u32) -> &[u8] {
        let (k, j) = self.rx_slab[slot as usize];
        let f = self.cfg.max_frag;
        &self.rx[k as usize].0[j as usize * f..(j as usize + 1) * f]
    }

    /// Receive buffers posted or in use.
    pub fn receive_buffers(&self) -> usize {
        self.rx_slab.len()
    }

    /// Connect peer `i`'s queue pair to the peer's `qpn` (first PSN `psn`):
    /// `false` (and nothing done) when it is connected to another one.
    fn connect_qp(&mut self, i: usize, qpn: u32, psn: u32) -> Result<bool, String> {
        let p = &self.peers[i];
        if let Some(q) = p.remote_qpn {
            return Ok(q == qpn);
        }
        let card = p.card.expect("connection messages come from carded peers");
        let local = self.ensure_qp(i)?;
        self.fabric.connect(local.qpn, &card.rc(qpn, psn))?;
        self.peers[i].remote_qpn = Some(qpn);
        Ok(true)
    }

    /// Peer `i` may be sent to from now on.
    fn set_ready(&mut self, i: usize) {
        let p = &mut self.peers[i];
        if !p.ready {
            p.ready = true;
            if p.asking.take().is_some() {
                self.asking -= 1;
            }
            tracing::debug!(target: LOG, "ib: connected to rank {} (queue pair {:#x} to {:#x})",
                p.rank, p.qp.map_or(0, |q| q.qpn), p.remote_qpn.unwrap_or(0));
        }
    }

    /// Ask peer `i` for a connection, unless it is ready or asked already.
    fn ask(&mut self, i: usize) {
        let p = &self.peers[i];
        if p.ready || p.failed || p.asking.is_some() {
            return;
        }
        if let Err(e) = self.ensure_qp(i) {
            self.fail_peer(i, &format!("creating a queue pair: {e}"));
            return;
        }
        let now = Instant::now();
        self.peers[i].asking = Some(Asking {
            next: now + conn::retry_after(1),
            tries: 1,
            since: now,
            warned: false,
        });
        self.asking += 1;
        self.send_cm(i, Kind::Req);
    }

    /// Ask again every peer whose answer is late.
    fn ask_again(&mut self) {
        if self.asking == 0 {
            return;
        }
        let now = Instant::now();
        for i in 0..self.peers.len() {
            let Some(mut a) = self.peers[i].asking else {
                continue;
            };
            if a.next > now || self.peers[i].failed {
                continue;
            }
            a.tries += 1;
            a.next = now + conn::retry_after(a.tries);
            if !a.warned && now.duration_since(a.since) >= conn::SLOW_ANSWER {
                a.warned = true;
                tracing::warn!(target: LOG, "ib: rank {} has not answered a connection request for {} s (busy outside MPI, or gone?); still asking",
                    self.peers[i].rank, now.duration_since(a.since).as_secs());
            }
            self.peers[i].asking = Some(a);
            self.send_cm(i, Kind::Req);
        }
    }

    /// The earliest time a REQ is due again, if any is waited for.
    fn next_ask(&self) -> Option<Instant> {
        if self.asking == 0 {
            return None;
        }
        self.peers
            .iter()
            .filter(|p| !p.failed)
            .filter_map(|p| p.asking.map(|a| a.next))
            .min()
    }

    /// Send connection message `kind` to peer `i` (best effort: a message
    /// that cannot go now is as good as lost, which the REQ's repeats
    /// cover).
    fn send_cm(&mut self, i: usize, kind: Kind) {
        let Some(local) = self.peers[i].qp else {
            return;
        };
        let Some(card) = self.peers[i].card else {
            return;
        };
        let ah = match self.peers[i].ah {
            Some(a) => a,
            None => match self.fabric.ud_ah(&card.ud) {
                Ok(a) => {
                    self.peers[i].ah = Some(a);
                    a
                }
                Err(e) => {
                    self.fail_peer(i, &format!("an address handle for its datagrams: {e}"));
                    return;
                }
            },
        };
        let Some(slot) = self.cm_free.pop() else {
            tracing::debug!(target: LOG, "ib: no buffer for a {kind:?} to rank {}: dropped", self.peers[i].rank);
            return;
        };
        let m = Msg {
            kind,
            from: self.rank,
            to: self.peers[i].rank,
            nonce: self.nonce,
            qpn: local.qpn,
            psn: local.psn,
        };
        let at = slot as usize * MSG_BYTES;
        self.cm_tx[at..at + MSG_BYTES].copy_from_slice(&m.encode());
        let sge = Sge {
            addr: self.cm_tx.as_ptr() as u64 + at as u64,
            len: MSG_BYTES as u32,
            lkey: self.cm_tx_mr.lkey,
        };
        // SAFETY: the message is slot `slot` of `self.cm_tx`, out of
        // `cm_free` until its completion returns it; `cm_tx` outlives the
        // fabric's queues (field order, `Drop`).
        let r = unsafe {
            self.fabric
                .post_ud_send(ah, card.ud.qpn, wr_id(K_CM, CM_TX, slot as u64), sge)
        };
        if let Err(e) = r {
            self.cm_free.push(slot);
            tracing::debug!(target: LOG, "ib: a {kind:?} to rank {}: {e}", self.peers[i].rank);
        }
    }

    /// A datagram arrived in receive buffer `slot` (`len` bytes with the
    /// GRH room): act on the connection message it holds.
    fn on_cm(&mut self, slot: u32, len: u32) {
        let at = slot as usize * CM_RX_BYTES;
        let len = (len as usize).min(CM_RX_BYTES);
        let m = if len < GRH_BYTES {
            Err(format!("a datagram of {len} bytes"))
        } else {
            Msg::decode(&self.cm_rx[at + GRH_BYTES..at + len])
        };
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(target: LOG, "ib: a datagram dropped: {e}");
                return;
            }
        };
        let i = self.index.get(m.from as usize).copied().flatten();
        let Some(i) = i.filter(|_| m.to == self.rank) else {
            tracing::debug!(target: LOG, "ib: a connection message from rank {} to rank {} dropped: not for this rank's peers", m.from, m.to);
            return;
        };
        let p = &self.peers[i];
        if p.failed || p.card.is_none_or(|c| c.nonce != m.nonce) {
            tracing::debug!(target: LOG, "ib: a {:?} from rank {} dropped (failed peer, or another run's nonce)", m.kind, m.from);
            return;
        }
        let connected = match m.kind {
            Kind::Req | Kind::Rep => self.connect_qp(i, m.qpn, m.psn),
            Kind::Rtu => Ok(self.peers[i].remote_qpn == Some(m.qpn)),
        };
        match connected {
            Err(e) => {
                let dev = self.fabric.port().device.clone();
                self.fail_peer(i, &format!("connecting its queue pair on {dev}: {e}"));
            }
            Ok(false) => {
                tracing::debug!(target: LOG, "ib: a {:?} from rank {} names queue pair {:#x}, not the one connected: dropped", m.kind, m.from, m.qpn);
            }
            Ok(true) => match m.kind {
                Kind::Req => self.send_cm(i, Kind::Rep),
                Kind::Rep => {
                    self.set_ready(i);
                    self.send_cm(i, Kind::Rtu);
                }
                Kind::Rtu => self.set_ready(i),
            },
        }
    }

    /// Give the datagram receive buffers back to the queue pair.
    fn repost_cm(&mut self) -> Result<(), String> {
        if self.cm_repost.is_empty() {
            return Ok(());
        }
        let (base, lkey) = (self.cm_rx.as_ptr() as u64, self.cm_rx_mr.lkey);
        let mut bufs = std::mem::take(&mut self.to_post);
        slots_to_post(
            &mut bufs,
            &self.cm_repost,
            (K_CM, CM_RX),
            CM_RX_BYTES,
            |s| (base + (s as usize * CM_RX_BYTES) as u64, lkey),
        );
        // SAFETY: each buffer is a slot of `self.cm_rx`, which outlives the
        // fabric's queues, and is reposted only after its completion was
        // handled.
        let r = unsafe { self.fabric.post_ud_recv(&bufs) };
        self.to_post = bufs;
        r?;
        self.cm_repost.clear();
        Ok(())
    }

    /// Decide GPUDirect RDMA for this port ([`gpudirect::decide`]) from
    /// the gpu layer's answers `gpu` (a device is there, its memory
    /// exports as dma-bufs), this NIC's dma-buf probe, `nvidia_peermem`
    /// under the sysfs root `sys`, and what the user allows; set it
    /// ([`IbBtl::set_gpudirect`]) and return it. A setting that asks for
    /// GPUDirect RDMA where there is none is warned about.
    pub fn decide_gpudirect(
        &mut self,
        gpu: (Result<(), String>, Result<(), String>),
        want: gpudirect::Want,
        sys: &std::path::Path,
    ) -> gpudirect::Decision {
        let p = gpudirect::Probes::gather(gpu, self.fabric.probe_dmabuf(), sys);
        let d = gpudirect::decide(want, &p);
        if !matches!(want, gpudirect::Want::Auto | gpudirect::Want::Off) && d.via.is_none() {
            tracing::warn!(target: LOG, "ib: GMPI_IB_GPUDIRECT asks for GPUDirect RDMA, which {} cannot do: {}", self.fabric.port().device, d.describe());
        }
        self.set_gpudirect(d.via);
        d
    }

    /// Keep host registrations while `watch` says their memory stays
    /// mapped, within `limits` ([`rcache`]); without a watch (the default)
    /// each is released when its last user ends.
    pub fn set_memwatch(&mut self, watch: Box<dyn rcache::MemWatch>, limits: rcache::Limits) {
        self.rcache.clear(&mut self.fabric);
        self.rcache = rcache::Rcache::new(watch, limits);
    }

    /// What the registration cache has done so far.
    pub fn rcache_stats(&self) -> rcache::Stats {
        self.rcache.stats()
    }

    /// Keep registrations of device memory past their use, whole
    /// allocations, unused ones within `limits` ([`devcache`]); zero
    /// entries (the default): each use registers its own range.
    pub fn set_device_cache(&mut self, limits: rcache::Limits) {
        self.devcache.clear(&mut self.fabric);
        self.devcache = devcache::DevCache::new(limits);
    }

    /// What the device registration cache has done so far.
    pub fn devcache_stats(&self) -> rcache::Stats {
        self.devcache.stats()
    }

    /// Register GPU memory as `via` says (GPUDirect RDMA), or never
    /// (`None`, the default): the [`Capabilities::gpudirect`] the pml sees.
    pub fn set_gpudirect(&mut self, via: Option<DeviceReg>) {
        self.caps.gpudirect = via;
    }

    /// A registration of `len` bytes of device memory at `addr` (in
    /// `dev`'s allocation) from the device cache, made where needed as
    /// [`Capabilities::gpudirect`] says.
    fn reg_device(
        &mut self,
        addr: u64,
        len: u64,
        dev: DeviceMem<'_>,
    ) -> Result<rcache::Use, String> {
        let via = self.caps.gpudirect;
        let mut export = dev.export;
        self.devcache.acquire(
            &mut self.fabric,
            dev.alloc,
            addr,
            len,
            |fabric, start, span| match (via, export.as_mut()) {
                (Some(DeviceReg::DmaBuf), Some(export)) => {
                    let d = export(start, span)?;
                    fabric
                        .reg_dmabuf_mr(d.fd.as_fd(), d.offset, span, start, true)
                        .map_err(|e| format!("ibv_reg_dmabuf_mr: {e}"))
                }
                (Some(DeviceReg::DmaBuf), None) => Err("no dma-buf of the memory".into()),
                (Some(DeviceReg::Address), _) => fabric
                    .reg_mr(start, span, true)
                    .map_err(|e| format!("ibv_reg_mr of device memory: {e}")),
                (None, _) => Err("GPUDirect RDMA is not available".into()),
            },
        )
    }

    /// Say once (then in the debug log) that registering memory failed.
    fn reg_failed(&mut self, device: bool, msg: &str) {
        let warned = if device {
            &mut self.warned_dev_reg
        } else {
            &mut self.warned_reg
        };
        if *warned {
            tracing::debug!(target: LOG, "ib: {msg}; streaming instead");
        } else {
            *warned = true;
            tracing::warn!(target: LOG, "ib: {msg}; such messages are streamed instead");
        }
    }

    /// A get into `dst`, host memory (`device` `None`) or device memory
    /// (with its dma-buf, if any), or a put from it (`write`, host memory):
    /// checked, its local memory registered, its RDMA READs (WRITEs)
    /// queued.
    #[allow(clippy::too_many_arguments)]
    fn get_into(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        mut dst: LocalMem,
        device: Option<DeviceMem<'_>>,
        token: u64,
        write: bool,
    ) -> Result<Submit, BtlError> {
        let failed = |why: String| {
            if write {
                BtlError::PutFailed(why)
            } else {
                BtlError::GetFailed(why)
            }
        };
        let len = dst.len as u64;
        let i = self.peer_index(peer)?;
        let Ok(rkey) = u32::try_from(remote.key) else {
            return Err(failed(format!("key {:#x} is not an rkey", remote.key)));
        };
        match offset.checked_add(len) {
            Some(end) if end <= remote.len && remote.addr.checked_add(end).is_some() => {}
            _ => {
                return Err(failed(format!(
                    "{len} bytes at offset {offset} outside the {} registered",
                    remote.len
                )))
            }
        }
        if len == 0 {
            return Ok(Submit::Done);
        }
        let what = match (device.is_some(), write) {
            (_, true) => "a one-sided origin buffer",
            (true, false) => "a device receive buffer",
            (false, false) => "a receive buffer",
        };
        let f = self.cfg.max_frag;
        // Small host transfers go through a send slot while enough are free
        // for the sends (which take one each until their completion).
        let bounce = device.is_none()
            && len as usize <= BOUNCE_MAX.min(f)
            && self.free_slots.len() > 2 * self.cfg.signal_every as usize;
        let bounced = bounce.then(|| self.free_slots.pop()).flatten();
        let (local, held) = match (bounced, device) {
            (Some(slot), _) => {
                let at = slot as usize * f;
                if write {
                    // SAFETY: `dst` (a put's source) is valid for reads of
                    // `len` bytes during the call (`Btl::put`'s contract);
                    // it is copied now and not read again.
                    let src =
                        unsafe { std::slice::from_raw_parts(dst.addr as *const u8, len as usize) };
                    self.tx[at..at + len as usize].copy_from_slice(src);
                }
                let addr = self.tx.as_ptr() as u64 + at as u64;
                Ok((
                    self.tx_mr,
                    Held::Bounce {
                        slot,
                        to: std::mem::replace(&mut dst.addr, addr),
                    },
                ))
            }
            (None, None) => self
                .rcache
                .acquire(&mut self.fabric, dst.addr, len)
                .map(|u| (u.mr, Held::Host(u.id))),
            (None, Some(dev)) => self
                .reg_device(dst.addr, len, dev)
                .map(|u| (u.mr, Held::Device(u.id))),
        }
        .map_err(|e| failed(reg_error(what, len, &e)))?;
        let g = self.next_get;
        self.next_get += 1;
        self.gets.insert(
            g,
            GetOp {
                token,
                write,
                peer: i,
                remote_addr: remote.addr + offset,
                rkey,
                local,
                held,
                dst: dst.addr,
                len,
                next: 0,
                outstanding: 0,
                error: None,
            },
        );
        self.pending_gets.push_back(g);
        self.pump_gets();
        Ok(Submit::Queued)
    }

    /// A descriptor peers read `len` bytes of host memory at `addr` by,
    /// from the registration cache; given back by [`Btl::deregister`].
    fn expose(&mut self, addr: u64, len: u64) -> Option<MemDesc> {
        if len == 0 {
            return None;
        }
        match self.rcache.acquire(&mut self.fabric, addr, len) {
            Ok(u) => Some(MemDesc {
                addr,
                len,
                key: u.mr.rkey as u64,
            }),
            Err(e) => {
                self.reg_failed(false, &reg_error("a send buffer", len, &e));
                None
            }
        }
    }

    /// A descriptor peers read and write `len` bytes of host memory at
    /// `addr` by (a window's), registered on its own, outside the caches:
    /// it lives as long as the window; given back by [`Btl::deregister`].
    fn expose_window(&mut self, addr: u64, len: u64) -> Option<MemDesc> {
        if len == 0 {
            return None;
        }
        match self.fabric.reg_mr_window(addr, len) {
            Ok(mr) => {
                self.windows.insert(mr.rkey, mr);
                Some(MemDesc {
                    addr,
                    len,
                    key: mr.rkey as u64,
                })
            }
            Err(e) => {
                tracing::warn!(target: LOG, "ib: {}; the window is reached by active messages instead", reg_error("a window's memory", len, &e));
                None
            }
        }
    }

    /// A descriptor peers read `len` bytes of device memory at `addr` (in
    /// `dev`'s allocation) by, from the device cache; given back by
    /// [`Btl::deregister`].
    fn expose_device(&mut self, addr: u64, len: u64, dev: DeviceMem<'_>) -> Option<MemDesc> {
        if len == 0 {
            return None;
        }
        match self.reg_device(addr, len, dev) {
            Ok(u) => Some(MemDesc {
                addr,
                len,
                key: u.mr.rkey as u64,
            }),
            Err(e) => {
                self.reg_failed(true, &reg_error("a device send buffer", len, &e));
                None
            }
        }
    }

    /// The port this btl uses.
    pub fn port(&self) -> &fabric::PortInfo {
        self.fabric.port()
    }

    /// The fabric (tests inspect the model through it).
    pub fn fabric(&self) -> &F {
        &self.fabric
    }

    /// The fabric, mutably.
    pub fn fabric_mut(&mut self) -> &mut F {
        &mut self.fabric
    }

    /// Credits this rank may still use towards `peer` (tests).
    pub fn credits_to(&self, peer: Rank) -> Option<u32> {
        let i = self.index.get(peer as usize).copied().flatten()?;
        Some(self.peers[i].credits)
    }

    fn repost_buffers(&mut self) -> Result<(), String> {
        if self.repost.is_empty() {
            return Ok(());
        }
        let f = self.cfg.max_frag;
        let mut bufs = std::mem::take(&mut self.to_post);
        slots_to_post(&mut bufs, &self.repost, (K_RECV, 0), f, |s| {
            let (k, j) = self.rx_slab[s as usize];
            let (slab, mr) = &self.rx[k as usize];
            (slab.as_ptr() as u64 + (j as usize * f) as u64, mr.lkey)
        });
        // SAFETY: each buffer is a slot of a slab of `self.rx`, which lives as long as
        // the fabric (dropped after it: `Drop` below destroys the queues
        // first), and a slot is in `repost` only once its previous
        // completion has been handed up and the callback has returned.
        let r = unsafe { self.fabric.post_recv(&bufs) };
        self.to_post = bufs;
        r?;
        self.repost.clear();
        Ok(())
    }

    fn room(&self, p: &Peer) -> bool {
        (p.posted.len() as u32) + 1 < self.fabric.port().sq_depth
    }

    /// Post `wr` on peer `i`'s queue pair, recording what it holds.
    fn post(
        &mut self,
        i: usize,
        mut wr: SendWr,
        slot: Option<u32>,
        get: Option<u64>,
    ) -> Result<(), String> {
        let sq = self.fabric.port().sq_depth;
        let low_slots = self.free_slots.len() < 2 * self.cfg.signal_every as usize;
        let p = &mut self.peers[i];
        let seq = p.next_seq;
        p.next_seq += 1;
        // Reads and writes alike: a get's chunk.
        let id_kind = if get.is_some() { K_READ } else { K_SEND };
        let id = wr_id(id_kind, i, seq);
        if let SendWr::Send {
            wr_id, signaled, ..
        } = &mut wr
        {
            p.since_signal += 1;
            let near_full = p.posted.len() as u32 + 2 * self.cfg.signal_every >= sq;
            *signaled = p.since_signal >= self.cfg.signal_every || low_slots || near_full;
            if *signaled {
                p.since_signal = 0;
            }
            *wr_id = id;
        } else if let SendWr::Read { wr_id, .. } | SendWr::Write { wr_id, .. } = &mut wr {
            *wr_id = id;
            p.since_signal = 0;
        }
        let qpn = p.qp.expect("only ready peers are posted to").qpn;
        // SAFETY: a send's memory is a slot of `self.tx` (held in `posted`
        // until a completion retires it) or inline (copied now); a read's
        // is a get's destination (a put's source), registered and held by
        // its `GetOp`, which the caller of `Btl::get` (`put`) keeps valid
        // until GetComplete/GetFailed (PutComplete/PutFailed), reported
        // only once its last chunk has completed, or a send slot the
        // `GetOp` holds (`Held::Bounce`) until then.
        unsafe { self.fabric.post_send(qpn, &wr) }?;
        self.peers[i].posted.push_back(Posted { seq, slot, get });
        Ok(())
    }

    /// Fail the peers that fatal asynchronous events name, or every peer
    /// for an event of the port itself; `now`: read the event source
    /// whatever its schedule ([`Fabric::async_event_now`]).
    fn take_async_events(&mut self, now: bool) {
        loop {
            let ev = if now {
                self.fabric.async_event_now()
            } else {
                self.fabric.async_event()
            };
            let Some((qpn, why)) = ev else {
                return;
            };
            match qpn.and_then(|q| self.by_qpn.get(&q).copied()) {
                Some(i) => self.fail_peer(i, &why),
                None => {
                    // The port, the device, the completion or receive queue,
                    // or the datagram queue pair: nothing more gets through
                    // this port, to any peer.
                    tracing::error!(target: LOG, "ib: {} port {}: {why}; every peer reached through it fails", self.fabric.port().device, self.fabric.port().port);
                    for i in 0..self.peers.len() {
                        self.fail_peer(i, &why);
                    }
                }
            }
        }
    }

    /// Peer `i` failed (`why`): report it once, refuse it from now on.
    fn fail_peer(&mut self, i: usize, why: &str) {
        let p = &mut self.peers[i];
        if p.asking.take().is_some() {
            self.asking -= 1;
        }
        if !p.failed {
            p.failed = true;
            tracing::error!(target: LOG, "ib: rank {} (through {} port {}) failed: {why}",
                p.rank, self.fabric.port().device, self.fabric.port().port);
            // Its queue pair to the error state: what it still holds
            // completes flushed now, instead of retrying for seconds towards
            // a peer that is gone (and holding the device's resources, and
            // the process's exit, that long).
            if let Some(q) = p.qp.as_ref().map(|q| q.qpn) {
                if let Err(e) = self.fabric.fail_qp(q) {
                    tracing::warn!(target: LOG, "ib: queue pair {q:#x} to the error state: {e}");
                }
            }
        }
        if !p.reported {
            p.reported = true;
            self.failed_news.push(p.rank);
        }
    }

    /// Retire peer `i`'s work requests up to `seq`; what they held.
    fn retire(&mut self, i: usize, seq: u64, ok: bool, why: &str) -> Vec<u64> {
        let mut done_gets = Vec::new();
        while let Some(&front) = self.peers[i].posted.front() {
            if front.seq > seq {
                break;
            }
            self.peers[i].posted.pop_front();
            if let Some(s) = front.slot {
                self.free_slots.push(s);
            }
            if let Some(g) = front.get {
                if let Some(op) = self.gets.get_mut(&g) {
                    if !op.write {
                        let p = &mut self.peers[i];
                        p.reads_out = p.reads_out.saturating_sub(1);
                    }
                    op.outstanding -= 1;
                    if !ok && op.error.is_none() {
                        op.error = Some(why.to_string());
                    }
                    if op.outstanding == 0 && (op.next == op.len || op.error.is_some()) {
                        done_gets.push(g);
                    }
                }
            }
        }
        done_gets
    }

    /// Post what chunks the queue pairs take of the gets that wait.
    fn pump_gets(&mut self) {
        let max_rd = (self.fabric.port().max_rd_atomic as u32)
            .min(self.cfg.max_reads)
            .max(1);
        let chunk = self.cfg.read_chunk.max(1) as u64;
        let mut unready = Vec::new();
        let mut k = 0;
        while k < self.pending_gets.len() {
            let g = self.pending_gets[k];
            let Some(op) = self.gets.get(&g) else {
                self.pending_gets.remove(k);
                continue;
            };
            let i = op.peer;
            let mut finished = false;
            while let Some(op) = self.gets.get(&g) {
                if op.next == op.len || op.error.is_some() {
                    finished = true;
                    break;
                }
                let p = &self.peers[i];
                if p.failed {
                    let op = self.gets.get_mut(&g).expect("get");
                    op.error = Some(format!("rank {} failed", p.rank));
                    finished = true;
                    break;
                }
                if !p.ready {
                    unready.push(i);
                    break;
                }
                // Writes take no read resources, but as many chunks at
                // once at most.
                let out = if op.write {
                    op.outstanding
                } else {
                    p.reads_out
                };
                if out >= max_rd || !self.room(p) {
                    break;
                }
                let n = (op.len - op.next).min(chunk);
                let local = Sge {
                    addr: op.dst + op.next,
                    len: n as u32,
                    lkey: op.local.lkey,
                };
                let (remote_addr, rkey) = (op.remote_addr + op.next, op.rkey);
                let wr = if op.write {
                    SendWr::Write {
                        wr_id: 0,
                        local,
                        remote_addr,
                        rkey,
                    }
                } else {
                    SendWr::Read {
                        wr_id: 0,
                        local,
                        remote_addr,
                        rkey,
                    }
                };
                let write = op.write;
                match self.post(i, wr, None, Some(g)) {
                    Ok(()) => {
                        if !write {
                            self.peers[i].reads_out += 1;
                        }
                        let op = self.gets.get_mut(&g).expect("get");
                        op.next += n;
                        op.outstanding += 1;
                    }
                    Err(e) => {
                        let op = self.gets.get_mut(&g).expect("get");
                        let what = if write { "WRITE" } else { "READ" };
                        op.error = Some(format!("posting an RDMA {what}: {e}"));
                        finished = true;
                        break;
                    }
                }
            }
            if finished {
                self.pending_gets.remove(k);
            } else {
                k += 1;
            }
        }
        for i in unready {
            self.ask(i);
        }
    }

    /// A zero-length SEND giving back `credits` (`post` decides whether it
    /// is signalled).
    fn credit_message(&self, credits: u32) -> SendWr {
        SendWr::Send {
            wr_id: 0,
            sge: Sge {
                addr: self.tx.as_ptr() as u64,
                len: 0,
                lkey: self.tx_mr.lkey,
            },
            imm: CREDIT_ONLY | credits,
            inline: true,
            signaled: false,
        }
    }

    /// Half a peer's credits: owing that many, a receiver that has nothing
    /// to send returns them in a credit message.
    fn half_credits(&self) -> u32 {
        self.cfg.credits.div_ceil(2).max(1)
    }

    /// Send a credit message to every peer owed half its credits (those in
    /// `owing`: a pass walks them, not every peer).
    fn return_credits(&mut self) {
        if self.owing.is_empty() {
            return;
        }
        let half = self.half_credits();
        let mut k = 0;
        while k < self.owing.len() {
            let i = self.owing[k];
            let p = &self.peers[i];
            if p.owed < half || p.failed {
                // Paid back on a fragment since, or gone.
                self.owing.swap_remove(k);
                continue;
            }
            if !p.ready || !self.room(p) {
                k += 1;
                continue;
            }
            let wr = self.credit_message(p.owed);
            match self.post(i, wr, None, None) {
                Ok(()) => self.peers[i].owed = 0,
                Err(e) => self.fail_peer(i, &format!("posting a credit message: {e}")),
            }
            self.owing.swap_remove(k);
        }
    }

    /// Finish get (or put) `g` (its last chunk is in, or it failed): its
    /// events.
    fn end_get(&mut self, g: u64, on_event: &mut dyn FnMut(Event<'_>)) {
        if let Some(op) = self.gets.remove(&g) {
            match op.held {
                Held::Host(id) => self.rcache.release(&mut self.fabric, id),
                Held::Device(id) => self.devcache.release(&mut self.fabric, id),
                Held::Bounce { slot, to } => {
                    if !op.write && op.error.is_none() {
                        let at = slot as usize * self.cfg.max_frag;
                        let n = op.len as usize;
                        // SAFETY: `to` is the get's destination, valid for
                        // writes of `len` bytes and untouched by anyone else
                        // until the GetComplete reported just below
                        // (`Btl::get`'s contract); the slot holds what the
                        // READ brought.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                self.tx[at..at + n].as_ptr(),
                                to as *mut u8,
                                n,
                            );
                        }
                    }
                    self.free_slots.push(slot);
                }
            }
            let token = op.token;
            match (op.write, op.error) {
                (false, None) => on_event(Event::GetComplete { token }),
                (false, Some(e)) => on_event(Event::GetFailed {
                    token,
                    error: BtlError::GetFailed(e),
                }),
                (true, None) => on_event(Event::PutComplete { token }),
                (true, Some(e)) => on_event(Event::PutFailed {
                    token,
                    error: BtlError::PutFailed(e),
                }),
            }
        }
    }

    fn peer_index(&self, peer: Rank) -> Result<usize, BtlError> {
        let i = self
            .index
            .get(peer as usize)
            .copied()
            .flatten()
            .ok_or(BtlError::Unreachable(peer))?;
        let p = &self.peers[i];
        if p.failed {
            return Err(BtlError::PeerFailed(peer));
        }
        if p.card.is_none() {
            return Err(BtlError::Unreachable(peer));
        }
        Ok(i)
    }

    fn has_work(&self) -> bool {
        !self.failed_news.is_empty()
            || !self.pending_gets.is_empty()
            || !self.repost.is_empty()
            || !self.cm_repost.is_empty()
            || self.next_ask().is_some_and(|t| t <= Instant::now())
            || {
                let half = self.half_credits();
                self.owing.iter().any(|&i| {
                    let p = &self.peers[i];
                    p.owed >= half && !p.failed
                })
            }
    }
}

impl<F: Fabric> Btl for IbBtl<F> {
    fn caps(&self) -> &Capabilities {
        &self.caps
    }

    fn reaches(&self, peer: Rank) -> bool {
        self.index
            .get(peer as usize)
            .copied()
            .flatten()
            .is_some_and(|i| self.peers[i].card.is_some() && !self.peers[i].failed)
    }

    fn send(&mut self, peer: Rank, parts: &[&[u8]], _token: u64) -> Result<Submit, BtlError> {
        let i = self.peer_index(peer)?;
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.cfg.max_frag {
            return Err(BtlError::TooLarge {
                len,
                max: self.cfg.max_frag,
            });
        }
        if !self.peers[i].ready {
            // The pml holds the fragment and offers it again once the
            // connection is up (the answer wakes `wait`).
            self.ask(i);
            if self.peers[i].failed {
                return Err(BtlError::PeerFailed(peer));
            }
            return Ok(Submit::NoResource);
        }
        let p = &self.peers[i];
        if p.credits == 0 || !self.room(p) {
            return Ok(Submit::NoResource);
        }
        let Some(slot) = self.free_slots.pop() else {
            return Ok(Submit::NoResource);
        };
        let f = self.cfg.max_frag;
        let at = slot as usize * f;
        let mut o = at;
        for part in parts {
            gmpi_btl::copy_bytes(&mut self.tx[o..o + part.len()], part);
            o += part.len();
        }
        let inline = len as u32 <= self.fabric.port().max_inline;
        let owed = self.peers[i].owed.min(CREDIT_ONLY - 1);
        let wr = SendWr::Send {
            wr_id: 0,
            sge: Sge {
                addr: self.tx.as_ptr() as u64 + at as u64,
                len: len as u32,
                lkey: self.tx_mr.lkey,
            },
            imm: owed,
            inline,
            signaled: false,
        };
        // An inline send is copied at post time: its slot is free again.
        let held = if inline { None } else { Some(slot) };
        match self.post(i, wr, held, None) {
            Ok(()) => {
                if inline {
                    self.free_slots.push(slot);
                }
                let p = &mut self.peers[i];
                p.credits -= 1;
                p.owed -= owed;
                Ok(Submit::Done)
            }
            Err(e) => {
                self.free_slots.push(slot);
                self.fail_peer(i, &format!("posting a send: {e}"));
                Err(BtlError::PeerFailed(peer))
            }
        }
    }

    fn register(&mut self, addr: u64, len: u64) -> Option<MemDesc> {
        self.expose(addr, len)
    }

    fn register_device(&mut self, addr: u64, len: u64, dev: DeviceMem<'_>) -> Option<MemDesc> {
        self.caps.gpudirect?;
        self.expose_device(addr, len, dev)
    }

    fn register_window(&mut self, addr: u64, len: u64) -> Option<MemDesc> {
        self.expose_window(addr, len)
    }

    fn deregister(&mut self, desc: &MemDesc) {
        let Ok(key) = u32::try_from(desc.key) else {
            return;
        };
        if let Some(mr) = self.windows.remove(&key) {
            self.fabric.dereg_mr(mr);
        } else if let Some(id) = self.rcache.by_rkey(key) {
            self.rcache.release(&mut self.fabric, id);
        } else if let Some(id) = self.devcache.by_rkey(key) {
            self.devcache.release(&mut self.fabric, id);
        }
    }

    unsafe fn get(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
    ) -> Result<Submit, BtlError> {
        self.get_into(peer, remote, offset, dst, None, token, false)
    }

    unsafe fn put(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        src: LocalMem,
        token: u64,
    ) -> Result<Submit, BtlError> {
        // The source is registered (the host cache) and only read: the
        // RDMA WRITEs carry it out.
        self.get_into(peer, remote, offset, src, None, token, true)
    }

    unsafe fn get_device(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        dev: DeviceMem<'_>,
        token: u64,
    ) -> Result<Submit, BtlError> {
        if self.caps.gpudirect.is_none() {
            return Err(BtlError::Unsupported(self.caps.name));
        }
        self.get_into(peer, remote, offset, dst, Some(dev), token, false)
    }

    fn progress(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> usize {
        let mut n = 0;
        self.take_async_events(false);
        self.rcache.sweep(&mut self.fabric);
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        self.fabric.poll(&mut wcs, POLL_BATCH);
        let f = self.cfg.max_frag;
        let half = self.half_credits();
        for wc in wcs.iter().copied() {
            let kind = wr_kind(wc.wr_id);
            if kind == K_CM {
                let slot = wr_low(wc.wr_id) as u32;
                if wr_peer(wc.wr_id) == CM_TX {
                    self.cm_free.push(slot);
                } else {
                    if wc.status == 0 {
                        if let WcKind::Recv { len, .. } = wc.kind {
                            self.on_cm(slot, len);
                        }
                    }
                    self.cm_repost.push(slot);
                }
                continue;
            }
            if kind == K_RECV {
                let slot = wr_low(wc.wr_id) as u32;
                if wc.status != 0 {
                    // Its queue pair is in the error state (a receive
                    // flushed from the shared queue names none it failed).
                    if wc.status != WC_FLUSH_ERR {
                        self.take_async_events(true);
                        if let Some(&i) = self.by_qpn.get(&wc.qpn) {
                            self.fail_peer(
                                i,
                                &format!("receive completion: {}", wc_status_str(wc.status)),
                            );
                        }
                    }
                    self.repost.push(slot);
                    continue;
                }
                let WcKind::Recv { len, imm } = wc.kind else {
                    self.repost.push(slot);
                    continue;
                };
                let Some(&i) = self.by_qpn.get(&wc.qpn) else {
                    tracing::warn!(target: LOG, "ib: a fragment on unknown queue pair {:#x} dropped", wc.qpn);
                    self.repost.push(slot);
                    continue;
                };
                // Traffic on the queue pair: the peer's side is connected.
                if !self.peers[i].ready && self.peers[i].remote_qpn.is_some() {
                    self.set_ready(i);
                }
                let p = &mut self.peers[i];
                if imm & CREDIT_ONLY != 0 {
                    p.credits += imm & !CREDIT_ONLY;
                    self.repost.push(slot);
                    continue;
                }
                p.credits += imm;
                p.owed += 1;
                if p.owed == half {
                    self.owing.push(i);
                }
                let p = &self.peers[i];
                let rank = p.rank;
                if p.failed || len as usize > f {
                    self.repost.push(slot);
                    continue;
                }
                on_event(Event::Frag {
                    peer: rank,
                    data: &self.rx_buf(slot)[..len as usize],
                });
                n += 1;
                self.repost.push(slot);
                continue;
            }
            let i = wr_peer(wc.wr_id);
            if i >= self.peers.len() {
                continue;
            }
            let ok = wc.status == 0;
            let why = if ok {
                String::new()
            } else {
                format!("{} (verbs status {})", wc_status_str(wc.status), wc.status)
            };
            if !ok {
                // A port going down often shows first as completion
                // errors: its event, if already raised, names the cause.
                self.take_async_events(true);
                // A queue pair that completes in error is in the error
                // state: nothing it carries gets through any more.
                let what = if kind == K_READ {
                    "an RDMA READ or WRITE"
                } else {
                    "a send"
                };
                self.fail_peer(i, &format!("{what} failed: {why}"));
            }
            for g in self.retire(i, wr_low(wc.wr_id), ok, &why) {
                self.end_get(g, on_event);
                n += 1;
            }
        }
        self.wcs = wcs;
        if let Err(e) = self.repost_buffers() {
            tracing::error!(target: LOG, "ib: reposting receive buffers: {e}");
        }
        if let Err(e) = self.repost_cm() {
            tracing::error!(target: LOG, "ib: reposting datagram buffers: {e}");
        }
        self.ask_again();
        if self.gets.is_empty() {
            self.pending_gets.clear();
        } else {
            self.pump_gets();
            // Gets that ended without a completion to come (their peer
            // failed before their first chunk was posted).
            let idle: Vec<u64> = self
                .gets
                .iter()
                .filter(|(_, op)| op.outstanding == 0 && op.error.is_some())
                .map(|(&g, _)| g)
                .collect();
            for g in idle {
                self.end_get(g, on_event);
                n += 1;
            }
        }
        self.return_credits();
        for r in std::mem::take(&mut self.failed_news) {
            on_event(Event::PeerFailed { peer: r });
            n += 1;
        }
        n
    }

    fn wait(&mut self, timeout: Duration) {
        if self.has_work() {
            return;
        }
        let timeout = match self.next_ask() {
            Some(t) => timeout.min(t.saturating_duration_since(Instant::now())),
            None => timeout,
        };
        self.fabric.wait(timeout);
    }

    fn waker(&self) -> Option<Arc<dyn Wake>> {
        Some(self.waker.clone())
    }

    fn can_watch(&self) -> bool {
        true
    }

    fn watch(&mut self, _wake: &Arc<dyn Wake>, timeout: Duration) -> Duration {
        if self.has_work() {
            return Duration::ZERO;
        }
        timeout.min(WATCH_NAP)
    }
}

impl<F: Fabric> Drop for IbBtl<F> {
    fn drop(&mut self) {
        // Let every posted send reach its peer before the queue pairs go.
        let deadline = Instant::now() + self.cfg.linger;
        for i in 0..self.peers.len() {
            let p = &self.peers[i];
            let unsignalled = p.posted.back().is_some_and(|_| p.since_signal > 0);
            if unsignalled && !p.failed && p.ready && self.room(p) {
                // A credit message of none, signalled (`post` signals it:
                // the count says one is due).
                let wr = self.credit_message(0);
                self.peers[i].since_signal = self.cfg.signal_every;
                let _ = self.post(i, wr, None, None);
            }
        }
        let mut sink = |_: Event<'_>| {};
        while Instant::now() < deadline
            && self.peers.iter().any(|p| !p.failed && !p.posted.is_empty())
        {
            self.progress(&mut sink);
            self.fabric.wait(Duration::from_millis(1));
        }
        for (what, s) in [
            ("registration cache", self.rcache.stats()),
            ("device registration cache", self.devcache.stats()),
        ] {
            tracing::debug!(target: LOG, "ib: {what}: {} hits, {} misses, {} invalidated, {} evicted, {} merged", s.hits, s.misses, s.invalidated, s.evicted, s.merged);
        }
        self.rcache.clear(&mut self.fabric);
        self.devcache.clear(&mut self.fabric);
        for (_, mr) in self.windows.drain() {
            self.fabric.dereg_mr(mr);
        }
        // The fabric, dropped next (before the slabs: field order),
        // destroys the queues and then every registration still held.
    }
}
