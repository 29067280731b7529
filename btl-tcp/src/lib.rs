//! gmpi-btl-tcp: the transport between nodes over TCP.
//!
//! Each rank listens on an ephemeral port on each of its chosen addresses
//! ([`addr`]: `GMPI_TCP_IF`, or every non-loopback IPv4 address) and
//! publishes them as its *card*; the runtime hands every peer's card to
//! [`TcpBtl::add_peer`]. Nothing is connected at start: the first
//! [`Btl::send`] to a peer opens the connection, and the fragment waits in the
//! peer's queue until the handshake is over. One `mio` readiness loop
//! (edge-triggered epoll) drives every socket; sockets are non-blocking and
//! `TCP_NODELAY`.
//!
//! # File map
//! - `lib.rs`: [`TcpConfig`], [`TcpBtl`] (peers, connection life cycle,
//!   handshake driver, the [`Btl`] impl, clean shutdown).
//! - `conn.rs`: one socket: handshake stage, the peer's outgoing queue
//!   (vectored writes), the receive buffer frames are parsed from.
//! - `wire.rs`: handshake messages and frame headers (pure; fuzzed).
//! - `auth.rs`: the job [`Secret`] and the HMAC-SHA256 proofs.
//! - `addr.rs`: interface selection, cards, the order addresses are tried in.
//! - `watch.rs`: the helper thread that watches the sockets while the rank
//!   sleeps in another btl ([`Btl::watch`]).
//! - `tests/pairs.rs`: several `TcpBtl`s on threads of one process over
//!   127.0.0.1; `tests/hostile.rs`: raw sockets that lie, stall or send garbage;
//!   `examples/tcp_progress.rs`: idle `progress` cost and a btl-level ping-pong.
//!
//! # Handshake
//! `HELLO` (client: ranks, nonce) → `CHALLENGE` (server: nonce, proof) →
//! `PROOF` (client: proof) → `VERDICT` (server: welcome, duplicate or
//! closed); see [`wire`] and [`auth`]. The secret never travels. A process
//! that fails its proof, talks garbage, stays silent past
//! [`TcpConfig::handshake_timeout`], or names a rank that is not ours is
//! dropped with a warning; no event is reported and the transport goes on.
//! At most [`TcpConfig::max_handshakes`] unauthenticated connections are held
//! at once, each with a fixed-size buffer.
//!
//! # Simultaneous connect
//! When two ranks connect to each other at once, the connection opened by the
//! lower rank is kept. A server decides only after the client's proof: if it
//! has its own attempt towards that client in flight and is the lower rank,
//! it answers `duplicate` (the client then waits for the server's own
//! connection, up to the handshake timeout); if it is the higher rank, it
//! abandons its attempt and answers `welcome`. Fragments wait in the peer's
//! queue (not in a connection) until a connection is welcomed, and nothing is
//! written before the verdict, so nothing is lost or reordered.
//!
//! # Contract (beyond [`gmpi_btl`]'s)
//! - [`Btl::send`] writes at once (`writev` of frame header and parts) when
//!   the peer's queue is empty and the socket writable, and copies what the
//!   socket did not take into the peer's queue; it answers [`Submit::Done`].
//!   Otherwise a small fragment is copied into the queue (`Done`), while a
//!   large one (32 KiB and more, on an established connection) is refused
//!   with [`Submit::NoResource`] and stays in the caller's memory until the
//!   socket drains, so the pipelined rendezvous streams with no extra copy.
//!   `NoResource` also when the queue already holds
//!   [`TcpConfig::queue_bytes`]. Never `Queued`; `token` is unused.
//! - [`Btl::progress`] delivers at most [`MAX_FRAGS_PER_PROGRESS`] fragments
//!   per call, as slices of the connection's receive buffer. When nothing is
//!   ready it costs one `epoll_wait` with a zero timeout or, with at most
//!   four connections, usually one non-blocking read per connection (a
//!   message is then found with one system call instead of two).
//! - [`Btl::wait`] blocks in `epoll_wait` (bounded by the timeout and by the
//!   nearest handshake deadline); [`Btl::waker`] interrupts it (a
//!   `mio::Waker`, an eventfd in the epoll set).
//! - [`Btl::watch`] (the rank sleeps in another btl, shm): arms a helper
//!   thread (`watch.rs`, started on first use, joined at shutdown; arming
//!   is a store, no system call) that calls the sleeper's wake on the next
//!   socket readiness — data, new connections, writability, hang-ups, so
//!   failures too — then drains the epoll without blocking and answers zero
//!   if anything is to be done. The sleep is bounded by the nearest
//!   handshake deadline as in `wait`.
//! - A malformed frame from an authenticated peer, an end of stream or reset
//!   without a preceding `GOODBYE`, a write error, or a failed connect (every
//!   address of the card tried) is reported once as [`Event::PeerFailed`];
//!   sends to that peer then fail with [`BtlError::PeerFailed`].
//! - Dropping the btl (`MPI_Finalize`) is a clean shutdown: queued bytes are
//!   flushed (while connections still being set up finish their handshake),
//!   every peer gets a `GOODBYE`, and the btl waits for the peers' own
//!   `GOODBYE`s, all within [`TcpConfig::linger`]. Data arriving meanwhile is
//!   discarded.
//! - No `get`: large messages use the pml's pipelined rendezvous, whose
//!   chunks are at most `max_send_size` bytes and stream through the queue.
//! - Streamed fragments: [`Btl::send_stream`] (the pml's rendezvous chunks)
//!   sends a `Stream` frame. A receiver that finds one of at least 16 KiB
//!   whose body has not all arrived hands it up as [`Event::FragStream`] as
//!   soon as its first 64 bytes are in: the pml reads the rest from the
//!   buffer and then from the socket straight into the receive buffer
//!   (`conn::Body`), over as many deliveries as the data takes, so a large
//!   message is copied once on receipt (by the kernel), not twice. A frame
//!   whose receiver stops reading early is read and dropped.

#![forbid(unsafe_code)]

pub mod addr;
pub mod auth;
mod conn;
mod watch;
pub mod wire;

pub use auth::Secret;

use std::io;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gmpi_btl::{Btl, BtlError, Capabilities, Event, Rank, StreamBody, Submit, Wake};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use crate::addr::LocalAddr;
use crate::auth::{Side, Transcript};
use crate::conn::{Conn, Parsed, RxBuf, Stage, TxQueue};
use crate::wire::{FrameKind, Hs, Verdict};

/// Most fragments one [`Btl::progress`] call delivers.
pub const MAX_FRAGS_PER_PROGRESS: usize = 64;

/// Tracing target.
const LOG: &str = "btl";

/// Up to this many connection slots, progress reads sockets directly on
/// most passes (see [`TcpBtl::progress`]).
const DIRECT_MAX_CONNS: usize = 4;
/// With direct reads, every this-many-th pass asks epoll instead.
const DIRECT_EVERY: u32 = 8;

/// On an established connection, fragments of at least this many bytes are
/// written straight from the caller's memory or refused while the socket is
/// full (only the unwritten tail of a partial write is copied); smaller ones
/// are copied into the peer's queue.
const COPY_LIMIT: usize = 32 << 10;

/// Tokens at and above this one are listening sockets.
const LISTEN_BASE: usize = usize::MAX / 2;
/// The token of [`Btl::waker`]'s eventfd (no connection slot reaches it).
const WAKE_TOKEN: usize = LISTEN_BASE - 1;
/// Longest sleep while watching for another btl when the watcher thread
/// could not be started or has stopped (the rank then polls, as before
/// cross-transport wake-ups).
const UNWATCHED_SLEEP: Duration = Duration::from_millis(1);

/// Configuration of the tcp transport. Every rank of a job must use the same
/// secret and job id (the handshake fails otherwise) and the same
/// `max_frag` (a larger fragment is a protocol error at the receiver).
#[derive(Debug, Clone)]
pub struct TcpConfig {
    /// The job secret both ends of every connection prove they hold.
    pub secret: Secret,
    /// The job id (bound into every proof).
    pub job: String,
    /// `GMPI_TCP_IF`: interface names and CIDR blocks, comma-separated;
    /// `None`: every non-loopback IPv4 address (loopback if none).
    pub interfaces: Option<String>,
    /// Largest payload the pml should send eagerly (default 64 KiB: a
    /// rendezvous costs a round trip, which over TCP is worth a 64 KiB copy).
    pub eager_limit: usize,
    /// Largest fragment (the pml's header included) [`Btl::send`] accepts,
    /// and so the pipelined rendezvous chunk (default 128 KiB).
    pub max_frag: usize,
    /// Bytes a peer's queue may hold before [`Btl::send`] answers
    /// [`Submit::NoResource`] (default 4 MiB; one fragment is always taken
    /// into an empty queue).
    pub queue_bytes: usize,
    /// Longest time a connection may take from `connect`/`accept` to the
    /// verdict (default 10 s).
    pub handshake_timeout: Duration,
    /// Longest time a clean shutdown waits to flush and say goodbye
    /// (default 5 s).
    pub linger: Duration,
    /// Most connections held in their handshake at once (default 64); more
    /// are closed on accept.
    pub max_handshakes: usize,
}

impl TcpConfig {
    /// The defaults for a job with this secret and id.
    pub fn new(secret: Secret, job: impl Into<String>) -> Self {
        Self {
            secret,
            job: job.into(),
            interfaces: None,
            eager_limit: 64 << 10,
            max_frag: 128 << 10,
            queue_bytes: 4 << 20,
            handshake_timeout: Duration::from_secs(10),
            linger: Duration::from_secs(5),
            max_handshakes: 64,
        }
    }
}

/// How this rank is connected to a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    /// Never used.
    Idle,
    /// Our connection attempt (the connection's slot).
    Connecting(usize),
    /// The peer refused our attempt because its own wins; it must connect
    /// before then.
    AwaitInbound(Instant),
    /// Established (the connection's slot).
    Up(usize),
    /// The peer said goodbye and closed.
    Closed,
    /// Failed (reported).
    Failed,
}

#[derive(Debug)]
struct Peer {
    /// Its addresses, in the order to try them (empty: not reachable here).
    addrs: Vec<SocketAddr>,
    link: Link,
    /// Bytes not yet written to it, frames whole and in order.
    txq: TxQueue,
    /// It said goodbye: it will read nothing more.
    finished: bool,
    /// We said goodbye.
    goodbye_sent: bool,
    shut: bool,
}

/// The tcp btl of one rank. See the crate documentation.
#[derive(Debug)]
pub struct TcpBtl {
    me: Rank,
    caps: Capabilities,
    cfg: TcpConfig,
    local: Vec<LocalAddr>,
    listeners: Vec<(TcpListener, SocketAddr)>,
    poll: Poll,
    events: Events,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    peers: Vec<Peer>,
    /// Connections to look at on the next pass.
    active: Vec<usize>,
    /// The list `run_active` walks, kept between passes so that a spinning
    /// rank does not allocate one per pass.
    todo: Vec<usize>,
    /// Connections not yet established.
    handshaking: usize,
    /// Peers in [`Link::AwaitInbound`].
    awaiting: usize,
    unreported: Vec<Rank>,
    /// Shutting down: welcome new connections with a goodbye.
    closing: bool,
    closed: bool,
    warned_full: bool,
    /// Progress passes so far (see [`TcpBtl::progress`]'s direct reads).
    passes: u32,
    /// The helper thread of [`Btl::watch`] (started on first use).
    watcher: Option<watch::Watcher>,
    /// Starting it failed (warned once; watching then caps the sleep).
    watch_failed: bool,
}

fn os(msg: impl Into<String>) -> BtlError {
    BtlError::Os(msg.into())
}

fn list_addrs(a: &[SocketAddr]) -> String {
    a.iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl TcpBtl {
    /// Open the listening sockets of rank `me` (of `nprocs`). No peer is
    /// reachable until [`TcpBtl::add_peer`].
    pub fn bind(me: Rank, nprocs: u32, cfg: TcpConfig) -> Result<TcpBtl, BtlError> {
        if me >= nprocs {
            return Err(os(format!(
                "tcp: rank {me} out of range for {nprocs} ranks"
            )));
        }
        let min_frag = wire::FRAME_HDR;
        if cfg.max_frag < min_frag || cfg.max_frag > (u32::MAX as usize) / 2 {
            return Err(os(format!(
                "tcp: max_frag {} out of range ({min_frag}..=2 GiB)",
                cfg.max_frag
            )));
        }
        if cfg.eager_limit > cfg.max_frag {
            return Err(os(format!(
                "tcp: eager_limit {} exceeds max_frag {}",
                cfg.eager_limit, cfg.max_frag
            )));
        }
        let all = addr::host_addresses().map_err(|e| os(format!("tcp: {e}")))?;
        let local =
            addr::select(cfg.interfaces.as_deref(), &all).map_err(|e| os(format!("tcp: {e}")))?;
        let poll =
            Poll::new().map_err(|e| os(format!("tcp: cannot create an epoll instance: {e}")))?;
        let mut listeners = Vec::new();
        for (i, a) in local.iter().enumerate() {
            let mut l = TcpListener::bind(SocketAddr::new(a.ip, 0)).map_err(|e| {
                os(format!(
                    "tcp: cannot listen on {} ({}): {e}",
                    a.ip, a.ifname
                ))
            })?;
            let bound = l
                .local_addr()
                .map_err(|e| os(format!("tcp: listening socket on {}: {e}", a.ip)))?;
            poll.registry()
                .register(&mut l, Token(LISTEN_BASE + i), Interest::READABLE)
                .map_err(|e| os(format!("tcp: epoll registration: {e}")))?;
            listeners.push((l, bound));
        }
        let caps = Capabilities {
            name: "tcp",
            eager_limit: cfg.eager_limit,
            max_send_size: cfg.max_frag,
            get: false,
            put: false,
            exclusivity: 10,
            get_threshold: usize::MAX,
            cuda_ipc: false,
            gpudirect: None,
        };
        tracing::debug!(target: LOG, "tcp: rank {me} listening on {}", list_addrs(&listeners.iter().map(|l| l.1).collect::<Vec<_>>()));
        Ok(TcpBtl {
            me,
            caps,
            local,
            listeners,
            poll,
            events: Events::with_capacity(256),
            conns: Vec::new(),
            free: Vec::new(),
            peers: (0..nprocs)
                .map(|_| Peer {
                    addrs: Vec::new(),
                    link: Link::Idle,
                    txq: TxQueue::default(),
                    finished: false,
                    goodbye_sent: false,
                    shut: false,
                })
                .collect(),
            active: Vec::new(),
            todo: Vec::new(),
            handshaking: 0,
            awaiting: 0,
            unreported: Vec::new(),
            closing: false,
            closed: false,
            warned_full: false,
            passes: 0,
            watcher: None,
            watch_failed: false,
            cfg,
        })
    }

    /// This rank's card: its listening `ip:port` pairs (see [`addr`]).
    pub fn card(&self) -> String {
        addr::encode_card(&self.listen_addrs())
    }

    /// The addresses this rank listens on.
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|l| l.1).collect()
    }

    /// Make `peer` reachable at the addresses of its `card`.
    pub fn add_peer(&mut self, peer: Rank, card: &str) -> Result<(), BtlError> {
        if peer == self.me || peer as usize >= self.peers.len() {
            return Err(os(format!(
                "tcp: cannot add rank {peer} as a peer of rank {}",
                self.me
            )));
        }
        let addrs = addr::decode_card(card).map_err(|e| {
            os(format!(
                "tcp: malformed card of rank {peer} ({card:?}): {e}"
            ))
        })?;
        self.peers[peer as usize].addrs = addr::connect_order(&addrs, &self.local);
        Ok(())
    }

    /// Peers with an established connection (for diagnostics and tests).
    pub fn connected_peers(&self) -> Vec<Rank> {
        (0..self.peers.len() as Rank)
            .filter(|&p| matches!(self.peers[p as usize].link, Link::Up(_)))
            .collect()
    }

    /// Whether `peer` said goodbye (finished cleanly).
    pub fn peer_finished(&self, peer: Rank) -> bool {
        self.peers
            .get(peer as usize)
            .is_some_and(|p| p.finished || p.link == Link::Closed)
    }

    /// Connections still in their handshake (for diagnostics and tests).
    pub fn handshakes_in_progress(&self) -> usize {
        self.handshaking
    }

    // ---- connection slots ---------------------------------------------------------

    fn insert(&mut self, mut c: Conn) -> io::Result<usize> {
        let idx = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        if let Err(e) = self.poll.registry().register(
            &mut c.stream,
            Token(idx),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.free.push(idx);
            return Err(e);
        }
        if c.stage != Stage::Established {
            self.handshaking += 1;
        }
        self.conns[idx] = Some(c);
        Ok(idx)
    }

    /// Close connection `idx` (the caller fixes the peer's link).
    fn remove(&mut self, idx: usize) -> Option<Conn> {
        let mut c = self.conns.get_mut(idx)?.take()?;
        let _ = self.poll.registry().deregister(&mut c.stream);
        if c.stage != Stage::Established {
            self.handshaking -= 1;
        }
        self.free.push(idx);
        Some(c)
    }

    fn list(&mut self, idx: usize) {
        if let Some(c) = self.conns[idx].as_mut() {
            if !c.listed {
                c.listed = true;
                self.active.push(idx);
            }
        }
    }

    // ---- readiness ----------------------------------------------------------------

    /// One `epoll_wait`; records readiness and accepts new connections.
    fn poll_os(&mut self, timeout: Duration) {
        if let Err(e) = self.poll.poll(&mut self.events, Some(timeout)) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!(target: LOG, "tcp: epoll_wait failed: {e}");
            }
            return;
        }
        let mut accept = 0u64;
        let mut touched = Vec::new();
        for ev in self.events.iter() {
            let t = ev.token().0;
            if t >= LISTEN_BASE {
                accept |= 1 << ((t - LISTEN_BASE) % 64);
                continue;
            }
            let Some(c) = self.conns.get_mut(t).and_then(Option::as_mut) else {
                continue;
            };
            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                c.readable = true;
            }
            if ev.is_writable() || ev.is_write_closed() || ev.is_error() {
                c.writable = true;
            }
            if ev.is_read_closed() || ev.is_error() {
                c.hup = true;
            }
            touched.push(t);
        }
        for t in touched {
            self.list(t);
        }
        if accept != 0 {
            for i in 0..self.listeners.len() {
                if accept & (1 << (i % 64)) != 0 {
                    self.accept_all(i);
                }
            }
        }
    }

    fn accept_all(&mut self, i: usize) {
        loop {
            let (s, from) = match self.listeners[i].0.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // ECONNABORTED, EMFILE...: the listener stays usable.
                    tracing::warn!(target: LOG, "tcp: accept on {} failed: {e}", self.listeners[i].1);
                    return;
                }
            };
            if self.handshaking >= self.cfg.max_handshakes {
                if !self.warned_full {
                    tracing::warn!(target: LOG, "tcp: rank {}: {} connections already in their handshake; closing the one from {from} (and others like it, silently)", self.me, self.handshaking);
                    self.warned_full = true;
                }
                continue;
            }
            let _ = s.set_nodelay(true);
            let deadline = Instant::now() + self.cfg.handshake_timeout;
            let mut c = Conn::new(s, false, deadline);
            c.addr = Some(from);
            match self.insert(c) {
                Ok(idx) => self.list(idx),
                Err(e) => {
                    tracing::warn!(target: LOG, "tcp: cannot register the connection from {from}: {e}")
                }
            }
        }
    }

    // ---- connecting -----------------------------------------------------------------

    /// Try the peer's addresses from `from` on; fail the peer when none is left.
    fn start_connect(&mut self, peer: Rank, from: usize, mut why: String) {
        let p = peer as usize;
        for i in from..self.peers[p].addrs.len() {
            let a = self.peers[p].addrs[i];
            let s = match TcpStream::connect(a) {
                Ok(s) => s,
                Err(e) => {
                    why = format!("{a}: {e}");
                    continue;
                }
            };
            let _ = s.set_nodelay(true);
            let mut c = Conn::new(s, true, Instant::now() + self.cfg.handshake_timeout);
            c.peer = Some(peer);
            c.addr_idx = i;
            c.addr = Some(a);
            match self.insert(c) {
                Ok(idx) => {
                    tracing::debug!(target: LOG, "tcp: rank {} connecting to rank {peer} at {a}", self.me);
                    self.peers[p].link = Link::Connecting(idx);
                    self.list(idx);
                    return;
                }
                Err(e) => why = format!("{a}: cannot register the socket: {e}"),
            }
        }
        let addrs = list_addrs(&self.peers[p].addrs);
        self.fail_peer(
            peer,
            format!("cannot connect to rank {peer} at {addrs}: {why}"),
        );
    }

    /// Our attempt `idx` failed before being welcomed.
    fn attempt_failed(&mut self, idx: usize, why: String) {
        let Some(c) = self.remove(idx) else { return };
        let Some(peer) = c.peer else { return };
        let p = peer as usize;
        if self.peers[p].link != Link::Connecting(idx) {
            return;
        }
        let a = c.addr.map_or_else(String::new, |a| a.to_string());
        tracing::debug!(target: LOG, "tcp: rank {}: connection to rank {peer} at {a} failed: {why}", self.me);
        self.peers[p].link = Link::Idle;
        self.start_connect(peer, c.addr_idx + 1, format!("{a}: {why}"));
    }

    /// An unauthenticated inbound connection is dropped.
    fn drop_inbound(&mut self, idx: usize, why: &str, warn: bool) {
        if let Some(c) = self.remove(idx) {
            let from = c.addr.map_or_else(|| "?".into(), |a| a.to_string());
            if warn {
                tracing::warn!(target: LOG, "tcp: rank {}: dropping connection from {from}: {why}", self.me);
            } else {
                tracing::debug!(target: LOG, "tcp: rank {}: connection from {from} closed during its handshake: {why}", self.me);
            }
        }
    }

    fn handshake_failed(&mut self, idx: usize, why: String, warn: bool) {
        let client = self.conns[idx].as_ref().is_some_and(|c| c.client);
        if client {
            if warn {
                let (peer, a) = self.conns[idx]
                    .as_ref()
                    .map(|c| (c.peer.unwrap_or(0), c.addr))
                    .unwrap_or((0, None));
                tracing::warn!(target: LOG, "tcp: rank {}: the process at {} (for rank {peer}): {why}", self.me, a.map_or_else(String::new, |a| a.to_string()));
            }
            self.attempt_failed(idx, why);
        } else {
            self.drop_inbound(idx, &why, warn);
        }
    }

    /// Move the handshake of connection `idx` as far as the socket allows.
    fn advance_handshake(&mut self, idx: usize) {
        loop {
            let Some(c) = self.conns[idx].as_mut() else {
                return;
            };
            if c.stage == Stage::Connecting {
                if !c.writable && !c.readable {
                    return;
                }
                match c.stream.take_error() {
                    Ok(None) => {}
                    Ok(Some(e)) | Err(e) => return self.attempt_failed(idx, e.to_string()),
                }
                match c.stream.peer_addr() {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                        // Spurious: still connecting.
                        c.writable = false;
                        c.readable = false;
                        return;
                    }
                    Err(e) => return self.attempt_failed(idx, e.to_string()),
                }
                let nonce = match auth::nonce() {
                    Ok(n) => n,
                    Err(e) => return self.attempt_failed(idx, e),
                };
                c.my_nonce = nonce;
                c.hs_out = wire::encode_hs(&Hs::Hello {
                    client: self.me,
                    server: c.peer.expect("client knows its peer"),
                    nonce,
                });
                c.stage = Stage::AwaitChallenge;
            }
            if c.writable && !c.hs_out.is_empty() {
                if let Err(e) = c.flush_hs() {
                    return self.handshake_failed(idx, format!("write failed: {e}"), false);
                }
            }
            let Some(kind) = c.stage.awaits() else { return };
            if !c.readable {
                return;
            }
            match c.read_hs(kind) {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => return self.handshake_failed(idx, format!("read failed: {e}"), false),
            }
            let msg = wire::decode_hs(kind, c.take_hs(kind));
            match msg {
                Ok(m) => {
                    if !self.on_handshake(idx, m) {
                        return;
                    }
                }
                Err(e) => return self.handshake_failed(idx, format!("bad handshake: {e}"), true),
            }
        }
    }

    /// Act on a complete handshake message. Returns whether the connection
    /// is still in its handshake (to go on reading).
    fn on_handshake(&mut self, idx: usize, m: Hs) -> bool {
        let me = self.me;
        let job = self.cfg.job.clone();
        let c = self.conns[idx].as_mut().expect("live connection");
        match m {
            Hs::Hello {
                client,
                server,
                nonce,
            } => {
                if server != me {
                    self.drop_inbound(
                        idx,
                        &format!("it asked for rank {server}, this is rank {me}"),
                        true,
                    );
                    return false;
                }
                let known = self
                    .peers
                    .get(client as usize)
                    .is_some_and(|p| !p.addrs.is_empty());
                if !known {
                    self.drop_inbound(
                        idx,
                        &format!(
                            "it claims to be rank {client}, which is not a tcp peer of this rank"
                        ),
                        true,
                    );
                    return false;
                }
                let mine = match auth::nonce() {
                    Ok(n) => n,
                    Err(e) => {
                        self.drop_inbound(idx, &e, true);
                        return false;
                    }
                };
                c.peer = Some(client);
                c.their_nonce = nonce;
                c.my_nonce = mine;
                let t = Transcript {
                    client_nonce: &nonce,
                    server_nonce: &mine,
                    client,
                    server: me,
                    job: job.as_bytes(),
                };
                let proof = auth::proof(&self.cfg.secret, Side::Server, &t);
                c.hs_out = wire::encode_hs(&Hs::Challenge { nonce: mine, proof });
                c.stage = Stage::AwaitProof;
                true
            }
            Hs::Challenge { nonce, proof } => {
                let peer = c.peer.expect("client knows its peer");
                c.their_nonce = nonce;
                let t = Transcript {
                    client_nonce: &c.my_nonce,
                    server_nonce: &nonce,
                    client: me,
                    server: peer,
                    job: job.as_bytes(),
                };
                if !auth::verify(&self.cfg.secret, Side::Server, &t, &proof) {
                    self.handshake_failed(
                        idx,
                        "failed the job-secret proof (another job, or not gmpi)".into(),
                        true,
                    );
                    return false;
                }
                let mine = auth::proof(&self.cfg.secret, Side::Client, &t);
                c.hs_out = wire::encode_hs(&Hs::Proof { proof: mine });
                c.stage = Stage::AwaitVerdict;
                true
            }
            Hs::Proof { proof } => {
                let client = c.peer.expect("set at HELLO");
                let t = Transcript {
                    client_nonce: &c.their_nonce,
                    server_nonce: &c.my_nonce,
                    client,
                    server: me,
                    job: job.as_bytes(),
                };
                if !auth::verify(&self.cfg.secret, Side::Client, &t, &proof) {
                    self.drop_inbound(
                        idx,
                        &format!("it claims to be rank {client} but failed the job-secret proof"),
                        true,
                    );
                    return false;
                }
                let p = client as usize;
                // Our own attempt towards the client, abandoned if welcomed.
                let mut ours = None;
                let verdict = match self.peers[p].link {
                    Link::Closed | Link::Failed => Verdict::Closed,
                    // The usual end of a simultaneous connect: the client
                    // welcomed our connection (and dropped this attempt of
                    // its own) after sending this proof. Nothing to warn about.
                    Link::Up(_) => {
                        tracing::debug!(target: LOG, "tcp: rank {me}: second connection from rank {client} refused (simultaneous connect)");
                        Verdict::Duplicate
                    }
                    Link::Connecting(_) if me < client => Verdict::Duplicate,
                    Link::Connecting(i) => {
                        // The lower rank's connection wins (nothing was
                        // written on ours past the handshake).
                        ours = Some(i);
                        Verdict::Welcome
                    }
                    Link::Idle | Link::AwaitInbound(_) => Verdict::Welcome,
                };
                let c = self.conns[idx].as_mut().expect("live connection");
                c.hs_out = wire::encode_hs(&Hs::Verdict(verdict));
                // 16 bytes on a fresh socket: written at once in practice;
                // if not, the connection is given up (the client retries
                // or reports) and our own attempt is kept.
                let flushed = matches!(c.flush_hs(), Ok(true));
                if verdict == Verdict::Welcome && flushed {
                    if let Some(i) = ours {
                        self.remove(i);
                    }
                    self.establish(idx, client);
                } else {
                    tracing::debug!(target: LOG, "tcp: rank {me}: connection from rank {client}: {verdict:?} (verdict sent: {flushed})");
                    self.remove(idx);
                }
                false
            }
            Hs::Verdict(v) => {
                let peer = c.peer.expect("client knows its peer");
                match v {
                    Verdict::Welcome => self.establish(idx, peer),
                    Verdict::Duplicate => {
                        self.remove(idx);
                        let pr = &mut self.peers[peer as usize];
                        if pr.link == Link::Connecting(idx) {
                            pr.link =
                                Link::AwaitInbound(Instant::now() + self.cfg.handshake_timeout);
                            self.awaiting += 1;
                        }
                    }
                    Verdict::Closed => {
                        self.remove(idx);
                        if self.peers[peer as usize].link == Link::Connecting(idx) {
                            self.peers[peer as usize].link = Link::Idle;
                        }
                        self.fail_peer(peer, format!("rank {peer} refused the connection: it considers rank {me} finished or failed"));
                    }
                }
                false
            }
        }
    }

    fn establish(&mut self, idx: usize, peer: Rank) {
        let max_frag = self.cfg.max_frag;
        let c = self.conns[idx].as_mut().expect("live connection");
        c.stage = Stage::Established;
        c.rx = Some(RxBuf::new(max_frag));
        c.writable = true;
        let (client, a) = (c.client, c.addr);
        self.handshaking -= 1;
        let pr = &mut self.peers[peer as usize];
        if matches!(pr.link, Link::AwaitInbound(_)) {
            self.awaiting -= 1;
        }
        pr.link = Link::Up(idx);
        tracing::debug!(target: LOG, "tcp: rank {} connected to rank {peer} ({} {})", self.me,
            if client { "to" } else { "from" }, a.map_or_else(String::new, |a| a.to_string()));
        if self.closing {
            self.send_goodbye(peer);
        }
        self.list(idx);
    }

    // ---- failures -----------------------------------------------------------------

    /// The peer is lost: close its connection, drop its queue, report once.
    fn fail_peer(&mut self, peer: Rank, why: String) {
        let p = peer as usize;
        match self.peers[p].link {
            Link::Failed | Link::Closed => return,
            Link::Connecting(i) | Link::Up(i) => {
                self.remove(i);
            }
            Link::AwaitInbound(_) => self.awaiting -= 1,
            Link::Idle => {}
        }
        if self.closing {
            tracing::debug!(target: LOG, "tcp: rank {}: {why}", self.me);
        } else {
            tracing::warn!(target: LOG, "tcp: rank {}: {why}", self.me);
        }
        let pr = &mut self.peers[p];
        pr.link = Link::Failed;
        pr.txq.clear();
        self.unreported.push(peer);
    }

    fn check_deadlines(&mut self, now: Instant) {
        for idx in 0..self.conns.len() {
            let late = self.conns[idx]
                .as_ref()
                .is_some_and(|c| c.stage != Stage::Established && c.deadline <= now);
            if late {
                let t = self.cfg.handshake_timeout;
                self.handshake_failed(idx, format!("handshake not finished within {t:?}"), true);
            }
        }
        if self.awaiting > 0 {
            for peer in 0..self.peers.len() as Rank {
                if let Link::AwaitInbound(until) = self.peers[peer as usize].link {
                    if until <= now {
                        self.fail_peer(peer, format!("rank {peer} refused our connection in favour of its own, which never came"));
                    }
                }
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        if self.handshaking + self.awaiting == 0 {
            return None;
        }
        let conns = self
            .conns
            .iter()
            .flatten()
            .filter(|c| c.stage != Stage::Established)
            .map(|c| c.deadline);
        let peers = self.peers.iter().filter_map(|p| match p.link {
            Link::AwaitInbound(t) => Some(t),
            _ => None,
        });
        conns.chain(peers).min()
    }

    // ---- established connections ----------------------------------------------------

    /// Queue a goodbye to `peer` (flushed with its queue).
    fn send_goodbye(&mut self, peer: Rank) {
        let pr = &mut self.peers[peer as usize];
        if pr.goodbye_sent {
            return;
        }
        pr.goodbye_sent = true;
        let h = wire::frame_header(FrameKind::Goodbye, 0);
        pr.txq.push(&[&h], 0);
    }

    /// Flush, then read and deliver, on established connection `idx`.
    fn service(
        &mut self,
        idx: usize,
        on_event: &mut dyn FnMut(Event<'_>),
        budget: &mut usize,
    ) -> usize {
        let Some(c) = self.conns[idx].as_mut() else {
            return 0;
        };
        let peer = c.peer.expect("established connections know their peer");
        let pr = &mut self.peers[peer as usize];
        if c.writable && !pr.txq.is_empty() {
            match pr.txq.flush(&mut c.stream) {
                Ok(true) => {}
                Ok(false) => c.writable = false,
                Err(e) if pr.finished => {
                    // It left; what it no longer reads does not matter.
                    tracing::debug!(target: LOG, "tcp: rank {}: write to finished rank {peer}: {e}", self.me);
                    pr.txq.clear();
                }
                Err(e) => {
                    self.fail_peer(peer, format!("write to rank {peer} failed: {e}"));
                    return 0;
                }
            }
        }
        if pr.goodbye_sent && pr.txq.is_empty() && !pr.shut {
            pr.shut = true;
            let _ = c.stream.shutdown(Shutdown::Write);
        }
        if c.eof && pr.txq.is_empty() {
            // It said goodbye and closed; ours went out too.
            self.remove(idx);
            self.peers[peer as usize].link = Link::Closed;
            return 0;
        }
        let mut n = 0;
        let rx = c.rx.as_mut().expect("established");
        loop {
            loop {
                if *budget == 0 {
                    self.list(idx);
                    return n;
                }
                if rx.open.is_some() {
                    let mut body = conn::Body {
                        buf: rx,
                        stream: &mut c.stream,
                        end: conn::BodyEnd::default(),
                    };
                    let (discard, taken, len) = {
                        let o = body.buf.open.as_ref().expect("open");
                        (o.discard || pr.finished, o.taken, o.len)
                    };
                    if discard {
                        // The receiver stopped early: read the rest away.
                        let mut sink = vec![0; (len - taken).min(256 << 10)];
                        loop {
                            let left = len - body.buf.open.as_ref().expect("open").taken;
                            let k = left.min(sink.len());
                            if k == 0 || body.read(&mut sink[..k]) < k {
                                break;
                            }
                        }
                    } else {
                        let o = body.buf.open.as_ref().expect("open");
                        let (head, head_len) = (o.head, o.head_len);
                        on_event(Event::FragStream {
                            peer,
                            head: &head[..head_len],
                            len,
                            taken,
                            body: &mut body,
                        });
                    }
                    let end = std::mem::take(&mut body.end);
                    let o = rx.open.as_mut().expect("open");
                    if o.taken == o.len {
                        rx.open = None;
                        if !discard {
                            n += 1;
                            *budget -= 1;
                        }
                        continue;
                    }
                    if let Some(e) = end.error {
                        self.fail_peer(peer, format!("connection to rank {peer} lost: {e}"));
                        return n;
                    }
                    if end.eof {
                        self.fail_peer(peer, format!("rank {peer} closed its connection in the middle of a fragment (process ended?)"));
                        return n;
                    }
                    if end.would_block {
                        c.readable = false;
                        return n;
                    }
                    // Neither complete nor starved: the receiver stopped.
                    o.discard = true;
                    continue;
                }
                match rx.next_frame() {
                    Ok(Parsed::Partial) => break,
                    Ok(Parsed::Opened) => {}
                    Ok(Parsed::Frame(FrameKind::Data | FrameKind::Stream, r)) => {
                        if !pr.finished {
                            on_event(Event::Frag {
                                peer,
                                data: rx.slice(r),
                            });
                            n += 1;
                            *budget -= 1;
                        }
                    }
                    Ok(Parsed::Frame(FrameKind::Goodbye, _)) => {
                        // It reads on until our goodbye: what is queued
                        // still goes out (whole frames keep the stream sane).
                        pr.finished = true;
                    }
                    Err(e) => {
                        let a = c.addr.map_or_else(String::new, |a| a.to_string());
                        self.fail_peer(
                            peer,
                            format!(
                                "malformed frame from rank {peer} ({a}): {e}; connection closed"
                            ),
                        );
                        return n;
                    }
                }
            }
            if !c.readable || c.eof {
                return n;
            }
            match rx.fill(&mut c.stream) {
                Ok((0, _)) => {
                    if pr.finished {
                        // Answer with our goodbye (if not said yet), then
                        // close once it is written.
                        c.eof = true;
                        c.readable = false;
                        if !pr.goodbye_sent {
                            pr.goodbye_sent = true;
                            pr.txq
                                .push(&[&wire::frame_header(FrameKind::Goodbye, 0)], 0);
                        }
                        self.list(idx);
                    } else {
                        self.fail_peer(peer, format!("rank {peer} closed its connection without saying goodbye (process ended?)"));
                    }
                    return n;
                }
                Ok((_, full)) => {
                    // Edge-triggered epoll reports every later arrival, so a
                    // short read means the socket is drained — unless the
                    // peer hung up, which reports no further edge.
                    if !full && !c.hup {
                        c.readable = false;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.readable = false,
                Err(e) => {
                    if pr.finished {
                        self.remove(idx);
                        self.peers[peer as usize].link = Link::Closed;
                    } else {
                        self.fail_peer(peer, format!("connection to rank {peer} lost: {e}"));
                    }
                    return n;
                }
            }
        }
    }

    /// Look at every connection with news. Returns fragments delivered.
    fn run_active(&mut self, on_event: &mut dyn FnMut(Event<'_>), budget: &mut usize) -> usize {
        let mut todo = std::mem::take(&mut self.todo);
        std::mem::swap(&mut todo, &mut self.active);
        let mut n = 0;
        for (k, &idx) in todo.iter().enumerate() {
            let Some(c) = self.conns[idx].as_mut() else {
                continue;
            };
            c.listed = false;
            if c.stage == Stage::Established {
                if *budget == 0 {
                    // Back on the list for the next pass. Those after `k`
                    // were not visited, so their `listed` flag is still set
                    // from this pass: clear it first, or `list` would skip
                    // them and they would never be looked at again.
                    for &rest in &todo[k..] {
                        if let Some(c) = self.conns[rest].as_mut() {
                            c.listed = false;
                        }
                        self.list(rest);
                    }
                    break;
                }
                n += self.service(idx, on_event, budget);
            } else {
                self.advance_handshake(idx);
            }
        }
        todo.clear();
        self.todo = todo;
        n
    }

    fn report(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> usize {
        let n = self.unreported.len();
        for peer in std::mem::take(&mut self.unreported) {
            on_event(Event::PeerFailed { peer });
        }
        n
    }

    // ---- shutdown -----------------------------------------------------------------

    /// Clean shutdown (also run by `Drop`): flush every queue, say goodbye to
    /// every connected peer, wait for theirs, all within
    /// [`TcpConfig::linger`]; then close everything. Idempotent; the btl
    /// reaches no peer afterwards.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        // Join the watcher first: it polls our epoll descriptor.
        self.watcher = None;
        let start = Instant::now();
        let deadline = start + self.cfg.linger;
        let mut discard = |_: Event<'_>| {};
        // Phase 1: deliver what is queued (handshakes included).
        loop {
            self.progress(&mut discard);
            let pending: usize = self
                .peers
                .iter()
                .filter(|p| !matches!(p.link, Link::Failed | Link::Closed))
                .map(|p| p.txq.bytes())
                .sum();
            if pending == 0 {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(target: LOG, "tcp: rank {}: {pending} bytes still queued after {:?} at shutdown; dropped", self.me, self.cfg.linger);
                break;
            }
            self.wait((deadline - now).min(Duration::from_millis(50)));
        }
        // Phase 2: goodbyes, then wait for every peer's.
        self.closing = true;
        for peer in 0..self.peers.len() as Rank {
            if let Link::Up(idx) = self.peers[peer as usize].link {
                self.send_goodbye(peer);
                self.list(idx);
            }
        }
        loop {
            self.progress(&mut discard);
            let open = self
                .peers
                .iter()
                .any(|p| matches!(p.link, Link::Up(_)) && (!p.finished || !p.shut));
            let now = Instant::now();
            if !open || now >= deadline {
                break;
            }
            self.wait((deadline - now).min(Duration::from_millis(50)));
        }
        for idx in 0..self.conns.len() {
            self.remove(idx);
        }
        for p in &mut self.peers {
            p.addrs.clear();
            p.txq.clear();
        }
        for (l, _) in &mut self.listeners {
            let _ = self.poll.registry().deregister(l);
        }
        self.listeners.clear();
        self.closed = true;
        tracing::debug!(target: LOG, "tcp: rank {} closed in {:?}", self.me, start.elapsed());
    }
}

impl Drop for TcpBtl {
    fn drop(&mut self) {
        self.close();
    }
}

impl TcpBtl {
    /// [`Btl::send`] as a frame of `kind` ([`FrameKind::Data`] or
    /// [`FrameKind::Stream`]).
    fn send_frame(
        &mut self,
        kind: FrameKind,
        peer: Rank,
        parts: &[&[u8]],
    ) -> Result<Submit, BtlError> {
        if !self.reaches(peer) {
            return Err(BtlError::Unreachable(peer));
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.cfg.max_frag {
            return Err(BtlError::TooLarge {
                len,
                max: self.cfg.max_frag,
            });
        }
        let p = peer as usize;
        if matches!(self.peers[p].link, Link::Failed | Link::Closed) || self.peers[p].finished {
            return Err(BtlError::PeerFailed(peer));
        }
        let hdr = wire::frame_header(kind, len);
        let mut small: [&[u8]; 8] = [&[]; 8];
        let big: Vec<&[u8]>;
        let all: &[&[u8]] = if parts.len() < small.len() {
            small[0] = &hdr;
            small[1..=parts.len()].copy_from_slice(parts);
            &small[..=parts.len()]
        } else {
            big = std::iter::once(&hdr[..])
                .chain(parts.iter().copied())
                .collect();
            &big
        };
        let total = len + wire::FRAME_HDR;
        if let Link::Up(idx) = self.peers[p].link {
            let c = self.conns[idx].as_mut().expect("up link has a connection");
            let pr = &mut self.peers[p];
            if c.writable && !pr.txq.is_empty() {
                match pr.txq.flush(&mut c.stream) {
                    Ok(true) => {}
                    Ok(false) => c.writable = false,
                    Err(e) => {
                        self.fail_peer(peer, format!("write to rank {peer} failed: {e}"));
                        return Err(BtlError::PeerFailed(peer));
                    }
                }
            }
            if c.writable && pr.txq.is_empty() {
                match conn::write_parts(&mut c.stream, all, 0) {
                    Ok(n) if n == total => return Ok(Submit::Done),
                    Ok(n) => {
                        c.writable = false;
                        pr.txq.push(all, n);
                        return Ok(Submit::Done);
                    }
                    Err(e) => {
                        self.fail_peer(peer, format!("write to rank {peer} failed: {e}"));
                        return Err(BtlError::PeerFailed(peer));
                    }
                }
            }
        }
        let pr = &mut self.peers[p];
        let up = matches!(pr.link, Link::Up(_));
        if (up && total >= COPY_LIMIT)
            || (!pr.txq.is_empty() && pr.txq.bytes() + total > self.cfg.queue_bytes)
        {
            // A large fragment waits in the caller's memory (the driver
            // retries it once the socket drains) rather than being copied.
            return Ok(Submit::NoResource);
        }
        pr.txq.push(all, 0);
        if pr.link == Link::Idle {
            self.start_connect(peer, 0, "no address".into());
            if self.peers[p].link == Link::Failed {
                return Err(BtlError::PeerFailed(peer));
            }
        }
        Ok(Submit::Done)
    }
}

impl Btl for TcpBtl {
    fn caps(&self) -> &Capabilities {
        &self.caps
    }

    fn reaches(&self, peer: Rank) -> bool {
        peer != self.me
            && self
                .peers
                .get(peer as usize)
                .is_some_and(|p| !p.addrs.is_empty())
    }

    fn send(&mut self, peer: Rank, parts: &[&[u8]], _token: u64) -> Result<Submit, BtlError> {
        self.send_frame(FrameKind::Data, peer, parts)
    }

    fn send_stream(
        &mut self,
        peer: Rank,
        parts: &[&[u8]],
        _token: u64,
    ) -> Result<Submit, BtlError> {
        self.send_frame(FrameKind::Stream, peer, parts)
    }

    fn progress(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> usize {
        if self.closed {
            return 0;
        }
        // With few connections, most passes read the established sockets
        // directly instead of asking epoll first: a spinning receiver then
        // finds a message with one system call (the read) instead of two
        // (epoll_wait, then the read), which is most of a small message's
        // software cost here. Every DIRECT_EVERY-th pass, and whenever
        // handshakes or accepts may be pending, epoll still runs, for
        // writability, new connections and hang-ups.
        self.passes = self.passes.wrapping_add(1);
        let direct = self.handshaking + self.awaiting == 0
            && self.conns.len() <= DIRECT_MAX_CONNS
            && !self.passes.is_multiple_of(DIRECT_EVERY);
        if direct {
            for idx in 0..self.conns.len() {
                if let Some(c) = self.conns[idx].as_mut() {
                    if c.stage == Stage::Established && !c.eof {
                        c.readable = true;
                        self.list(idx);
                    }
                }
            }
        } else {
            self.poll_os(Duration::ZERO);
        }
        if self.handshaking + self.awaiting > 0 {
            self.check_deadlines(Instant::now());
        }
        let mut budget = MAX_FRAGS_PER_PROGRESS;
        let mut n = self.run_active(on_event, &mut budget);
        n += self.report(on_event);
        n
    }

    fn wait(&mut self, timeout: Duration) {
        if self.closed
            || timeout.is_zero()
            || !self.active.is_empty()
            || !self.unreported.is_empty()
        {
            return;
        }
        let t = match self.next_deadline() {
            Some(d) => timeout.min(d.saturating_duration_since(Instant::now())),
            None => timeout,
        };
        self.poll_os(t);
    }

    fn waker(&self) -> Option<Arc<dyn Wake>> {
        match mio::Waker::new(self.poll.registry(), Token(WAKE_TOKEN)) {
            Ok(w) => Some(Arc::new(TcpWake(w))),
            Err(e) => {
                tracing::warn!(target: LOG, "tcp: no waker (eventfd): {e}");
                None
            }
        }
    }

    fn can_watch(&self) -> bool {
        true
    }

    fn watch(&mut self, wake: &Arc<dyn Wake>, timeout: Duration) -> Duration {
        if self.closed {
            return timeout;
        }
        if timeout.is_zero() {
            return Duration::ZERO;
        }
        if self.watcher.is_none() && !self.watch_failed {
            let w = self
                .poll
                .registry()
                .as_fd()
                .try_clone_to_owned()
                .and_then(watch::Watcher::start);
            match w {
                Ok(w) => self.watcher = Some(w),
                Err(e) => {
                    tracing::warn!(target: LOG, "tcp: cannot start the watcher thread: {e}; sleeping at most {UNWATCHED_SLEEP:?} at a time");
                    self.watch_failed = true;
                }
            }
        }
        // Arm first, then take every edge so far: readiness after the drain
        // is an edge the armed watcher sees (see watch.rs).
        let armed = self.watcher.as_mut().is_some_and(|w| w.arm(wake));
        self.poll_os(Duration::ZERO);
        if !self.active.is_empty() || !self.unreported.is_empty() {
            return Duration::ZERO;
        }
        let t = match self.next_deadline() {
            Some(d) => timeout.min(d.saturating_duration_since(Instant::now())),
            None => timeout,
        };
        if armed {
            t
        } else {
            t.min(UNWATCHED_SLEEP)
        }
    }

    fn unwatch(&mut self) {
        if let Some(w) = self.watcher.as_mut() {
            w.disarm();
        }
    }
}

/// [`Btl::waker`]: the eventfd in our epoll set.
struct TcpWake(mio::Waker);

impl Wake for TcpWake {
    fn wake(&self) {
        if let Err(e) = self.0.wake() {
            tracing::warn!(target: LOG, "tcp: waking the epoll failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    #[test]
    fn btl_is_send() {
        assert_send::<TcpBtl>();
    }

    #[test]
    fn bad_configuration_is_refused() {
        let cfg = TcpConfig::new(Secret::from_bytes([1; 32]), "j");
        assert!(TcpBtl::bind(2, 2, cfg.clone()).is_err());
        let e = TcpBtl::bind(
            0,
            2,
            TcpConfig {
                eager_limit: 1 << 20,
                ..cfg.clone()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("eager_limit"), "{e}");
        let e = TcpBtl::bind(
            0,
            2,
            TcpConfig {
                interfaces: Some("no-such-if0".into()),
                ..cfg.clone()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("no-such-if0"), "{e}");
        let mut b = TcpBtl::bind(
            0,
            2,
            TcpConfig {
                interfaces: Some("127.0.0.0/8".into()),
                ..cfg
            },
        )
        .unwrap();
        assert!(b.card().starts_with("127.0.0.1:"), "{}", b.card());
        assert!(!b.reaches(1));
        assert_eq!(b.send(1, &[b"x"], 0), Err(BtlError::Unreachable(1)));
        assert!(b.add_peer(1, "nonsense").is_err());
        assert!(b.add_peer(0, "127.0.0.1:5").is_err(), "not to itself");
        b.add_peer(1, "127.0.0.1:5").unwrap();
        assert!(b.reaches(1) && !b.reaches(0));
        let big = vec![0u8; (128 << 10) + 1];
        assert!(matches!(
            b.send(1, &[&big], 0),
            Err(BtlError::TooLarge { .. })
        ));
    }
}
