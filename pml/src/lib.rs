//! gmpi-pml: point-to-point messaging as a sans-IO state machine.
//!
//! The pml implements MPI's matching rules and the eager / rendezvous
//! protocols. It performs no I/O and reads no clock (the way `quinn-proto`
//! does): the progress driver (in the `gmpi` runtime) feeds it *inputs* and
//! executes its *outputs*, so every protocol and ordering rule is tested
//! in-process over the simulated fabric of `gmpi_btl::sim`.
//!
//! Calling contract:
//! - Inputs: [`Pml::post_send`], [`Pml::post_recv`],
//!   [`Pml::post_recv_direct`] (a blocking receive that, when nothing else is
//!   posted or unexpected, waits in a slot of its own instead of a request;
//!   its end comes from [`Pml::take_direct`]), [`Pml::cancel`],
//!   [`Pml::handle_frag`] (a fragment arrived), [`Pml::handle_send_done`],
//!   [`Pml::handle_get_done`], [`Pml::handle_get_failed`],
//!   [`Pml::handle_peer_failed`].
//! - Outputs: [`Pml::poll_action`] (send a fragment, get remote bytes) and the
//!   request queries [`Pml::test`] / [`Pml::is_complete`].
//! - User memory is touched only through the [`Memory`] the caller passes in
//!   (writes) or by the driver when it executes a [`Payload::Mem`] (reads), so
//!   the pml itself holds addresses, never references, and needs no `unsafe`;
//!   the driver's one `unsafe` block lends a receive buffer to
//!   [`gmpi_btl::Btl::get`], whose contract the receive's life cycle keeps.
//! - After any input, drain `poll_action` and execute every action *in order*.
//!   An action whose btl answers `NoResource` is retried later, and the actions
//!   behind it for the same peer wait behind it.
//!
//! File map:
//! - `header.rs`: the wire format of every fragment type.
//! - `protocol.rs`: the one function that chooses a protocol.
//! - `matching.rs`: posted and unexpected queues, per-peer sequence numbers and
//!   the out-of-order stash.
//! - `request.rs`: request slab and the send/receive state machines' states.
//! - `lib.rs`: [`Pml`], tying them together.
//! - `driver.rs`: the thin driver that owns the btls, executes actions in
//!   order (with per-peer pending queues for back-pressure) and feeds events
//!   back. It is generic over how user memory is reached, so the runtime (real
//!   memory) and the tests (simulated memory) run the same code.
//!
//! Protocols: eager (header + payload), eager-synchronous (ACK on match),
//! rendezvous with `get` (RTS carries a memory descriptor; receiver pulls,
//! then FIN) and pipelined rendezvous (RTS, CTS, FRAG chunks) as the fallback
//! when no single-copy path exists or a `get` fails. Message ordering holds
//! whatever path each message takes: every MATCH/RNDV carries a per-peer
//! sequence number and early arrivals wait in an out-of-order stash.

#![deny(unsafe_code)]

pub mod driver;
pub mod header;
mod matching;
pub mod protocol;
mod request;

use gmpi_btl::{Capabilities, MemDesc, Rank};
use gmpi_gpu::MemKind;

use header::{Hdr, HdrBuf, MatchHdr, F_SYNC};
use matching::{Matching, Unexpected, UnexpectedBody};
pub use protocol::{Protocol, SendMode};
use request::{RecvReq, RecvState, Req, SendReq, SendState, Slab};

/// Tracing target for protocol decisions (`GMPI_LOG=pml=debug`).
const LOG: &str = "pml";

/// Identifies a btl registered with [`Pml::add_btl`].
pub type BtlId = usize;

/// A request handle: slot index and generation, so a stale id never aliases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReqId(pub u64);

/// A user buffer, by address (the pml never dereferences it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Buf {
    /// Base address.
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// Where it lives.
    pub kind: MemKind,
}

/// [`Memory::fill`] for memory that cannot be handed out in place (device
/// memory, simulated memory): fill a temporary, then write what was filled.
pub fn fill_through_temporary<M: Memory + ?Sized>(
    mem: &mut M,
    addr: u64,
    len: usize,
    kind: MemKind,
    f: &mut dyn FnMut(&mut [u8]) -> usize,
) -> usize {
    let mut tmp = vec![0; len];
    let n = f(&mut tmp).min(len);
    mem.write(addr, kind, &tmp[..n]);
    n
}

/// User memory as the pml reaches it: writes, and registration for remote
/// access. The driver implements it over real memory and its btls; tests
/// implement it over simulated memory.
pub trait Memory {
    /// Copy `data` to the user memory at `addr` (of kind `kind`).
    fn write(&mut self, addr: u64, kind: MemKind, data: &[u8]);

    /// Let `f` fill up to `len` bytes of the user memory at `addr` from its
    /// start; it returns how many it filled, and so does this. The default
    /// fills a temporary and writes what was filled; host memory is handed
    /// to `f` in place (a streamed fragment read straight from the socket).
    fn fill(
        &mut self,
        addr: u64,
        len: usize,
        kind: MemKind,
        f: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> usize {
        fill_through_temporary(self, addr, len, kind, f)
    }

    /// Expose `buf` through `btl` so that the peer may `get` it; `None` if the
    /// btl cannot (the pml then streams the message instead). For device
    /// memory this is the GPUDirect registration (a dma-buf export handed to
    /// [`gmpi_btl::Btl::register_device`]).
    fn register(&mut self, btl: BtlId, buf: Buf) -> Option<MemDesc>;

    /// The CUDA IPC descriptor of device memory `buf`; `None` where IPC is
    /// impossible (no CUDA, managed or pool memory): the pml then stages.
    fn ipc_export(&mut self, buf: Buf) -> Option<gmpi_gpu::IpcDesc> {
        let _ = buf;
        None
    }

    /// How small device messages are copied (`"gdrcopy"` or `"cuda-copy"`),
    /// for the protocol names in the log.
    fn device_copy(&self) -> &'static str {
        "cuda-copy"
    }
}

/// Tunables of the pml. `None` means "the btl's own value".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmlConfig {
    /// Override of the eager limit.
    pub eager_limit: Option<usize>,
    /// Override of the smallest message sent by rendezvous `get`.
    pub get_threshold: Option<usize>,
    /// Whether rendezvous may use `get` at all.
    pub use_get: bool,
    /// Override of the pipelined fragment size.
    pub pipeline_chunk: Option<usize>,
    /// Thresholds of the device-memory protocols.
    pub gpu: gmpi_gpu::GpuConfig,
}

impl Default for PmlConfig {
    fn default() -> Self {
        Self {
            eager_limit: None,
            get_threshold: None,
            use_get: true,
            pipeline_chunk: None,
            gpu: gmpi_gpu::GpuConfig::default(),
        }
    }
}

/// Errors of the pml.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PmlError {
    /// The message was longer than the receive buffer; `min(len, cap)` bytes
    /// were written and nothing past the buffer.
    #[error("message of {len} bytes truncated to the receive buffer of {cap} bytes")]
    Truncated {
        /// Message length.
        len: u64,
        /// Buffer capacity.
        cap: u64,
    },
    /// The peer failed before the operation completed.
    #[error("rank {0} failed")]
    PeerFailed(Rank),
    /// No transport reaches the peer.
    #[error("no transport reaches rank {0}")]
    Unreachable(Rank),
    /// A peer sent a fragment that does not parse or refers to nothing.
    #[error("malformed fragment: {0}")]
    Malformed(String),
}

/// What a completed receive (or probe) reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// Sender's rank in the communicator.
    pub source: u32,
    /// Tag of the message.
    pub tag: i32,
    /// Bytes received (for a probe: the message length).
    pub len: u64,
    /// The receive was cancelled.
    pub cancelled: bool,
}

/// A send to post.
#[derive(Debug, Clone, Copy)]
pub struct SendArgs {
    /// Communicator context id.
    pub ctx: u32,
    /// Our rank in that communicator.
    pub src: u32,
    /// Destination (world rank).
    pub dest: Rank,
    /// Tag (≥ 0).
    pub tag: i32,
    /// The data.
    pub buf: Buf,
    /// MPI send mode.
    pub mode: SendMode,
}

/// A receive to post.
#[derive(Debug, Clone, Copy)]
pub struct RecvArgs {
    /// Communicator context id.
    pub ctx: u32,
    /// Source rank in the communicator, `None` for any source.
    pub src: Option<u32>,
    /// World rank of `src` (lets a peer failure fail this receive).
    pub src_world: Option<Rank>,
    /// Tag, `None` for any tag.
    pub tag: Option<i32>,
    /// Where to put the data.
    pub buf: Buf,
    /// The receiver reads the data as soon as it has arrived (a
    /// reduction's operand): a rendezvous get is copied by this rank alone
    /// ([`gmpi_btl::Btl::get_alone`]).
    pub consumed: bool,
}

/// Bytes that follow a header in a send action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Header only.
    None,
    /// User memory, read by the driver when it submits.
    Mem {
        /// Address.
        addr: u64,
        /// Length.
        len: usize,
        /// Kind.
        kind: MemKind,
    },
    /// Bytes the pml made (a CUDA IPC descriptor).
    Bytes(Vec<u8>),
}

/// Something the driver must do.
#[derive(Debug)]
pub enum Action {
    /// Submit `header` + `payload` on `btl` to `peer`. Report completion with
    /// [`Pml::handle_send_done`]`(token)` unless `token` is 0.
    Send {
        /// Which btl.
        btl: BtlId,
        /// Destination.
        peer: Rank,
        /// Encoded header.
        header: HdrBuf,
        /// Payload.
        payload: Payload,
        /// Completion token (0: nobody waits for this one).
        token: u64,
    },
    /// Read `len` bytes at `offset` in the peer's memory `desc` into local
    /// memory at `dst`; report with [`Pml::handle_get_done`] or
    /// [`Pml::handle_get_failed`].
    Get {
        /// Which btl.
        btl: BtlId,
        /// Owner of the memory.
        peer: Rank,
        /// Its descriptor.
        desc: MemDesc,
        /// Offset within it.
        offset: u64,
        /// Local destination address.
        dst: u64,
        /// Local destination kind.
        dst_kind: MemKind,
        /// Length.
        len: usize,
        /// Completion token.
        token: u64,
        /// Copy it alone ([`gmpi_btl::Btl::get_alone`]): the receive is
        /// [`RecvArgs::consumed`].
        alone: bool,
    },
    /// Copy `len` bytes at `offset` of the peer's device allocation `desc`
    /// (mapped by CUDA IPC) into local memory at `dst`; report with
    /// [`Pml::handle_get_done`] or [`Pml::handle_get_failed`].
    IpcGet {
        /// Owner of the memory.
        peer: Rank,
        /// Its descriptor.
        desc: gmpi_gpu::IpcDesc,
        /// Local destination address.
        dst: u64,
        /// Local destination kind.
        dst_kind: MemKind,
        /// Length.
        len: usize,
        /// Completion token.
        token: u64,
    },
}

/// Write an eager message's payload (as much as fits) into a matched
/// receive's buffer: its status, and its outcome (truncated when the message
/// is longer than the buffer).
#[inline(always)]
fn write_eager(
    buf: Buf,
    m: &MatchHdr,
    payload: &[u8],
    mem: &mut dyn Memory,
) -> (Status, Result<Status, PmlError>) {
    let cap = buf.len;
    let n = payload.len().min(cap);
    if n > 0 {
        mem.write(buf.addr, buf.kind, &payload[..n]);
    }
    let st = Status {
        source: m.src,
        tag: m.tag,
        len: n as u64,
        cancelled: false,
    };
    let res = if m.len > cap as u64 {
        Err(PmlError::Truncated {
            len: m.len,
            cap: cap as u64,
        })
    } else {
        Ok(st)
    };
    (st, res)
}

/// Registered btl facts the pml needs.
#[derive(Debug, Clone)]
struct BtlInfo {
    caps: Capabilities,
}

/// The point-to-point engine of one rank. See the crate documentation.
#[derive(Debug)]
pub struct Pml {
    me: Rank,
    nprocs: u32,
    cfg: PmlConfig,
    btls: Vec<BtlInfo>,
    /// Per peer: the btls of the highest exclusivity that reach it. Messages
    /// are striped round-robin over them (multi-rail); sequence numbers keep
    /// them in order.
    routes: Vec<Vec<BtlId>>,
    rr: Vec<u32>,
    /// Per peer, when exactly one btl reaches it: that btl and the eager
    /// limit in force (the inline send path's whole decision).
    inline_route: Vec<Option<(BtlId, usize)>>,
    failed: Vec<bool>,
    reqs: Slab,
    matching: Matching,
    /// Messages matched by [`Pml::improbe`], waiting for [`Pml::mrecv`].
    claimed: std::collections::HashMap<u64, Unexpected>,
    next_claim: u64,
    actions: std::collections::VecDeque<Action>,
    /// The blocking receive waiting in place of a request, if any
    /// ([`Pml::post_recv_direct`]).
    direct: Option<Direct>,
}

/// A blocking receive posted by [`Pml::post_recv_direct`]: first in matching
/// order (posted while no other receive was), held here instead of in a
/// request until its caller takes its end.
#[derive(Debug)]
struct Direct {
    ctx: u32,
    src: Option<u32>,
    src_world: Option<Rank>,
    tag: Option<i32>,
    buf: Buf,
    /// `None` while it waits.
    end: Option<DirectEnd>,
}

/// How a receive posted by [`Pml::post_recv_direct`] ended.
#[derive(Debug, Clone, PartialEq)]
pub enum DirectEnd {
    /// An eager message was delivered into it (or it failed).
    Done(Result<Status, PmlError>),
    /// A rendezvous message matched it: it goes on as this request, to be
    /// waited for and taken like any other.
    Promoted(ReqId),
}

/// What [`Pml::post_recv_direct`] posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posted {
    /// The receive waits in the pml's direct slot: poll
    /// [`Pml::take_direct`].
    Direct,
    /// A request, as [`Pml::post_recv`] makes.
    Req(ReqId),
}

impl Pml {
    /// The pml of rank `me` in a job of `nprocs` ranks.
    pub fn new(me: Rank, nprocs: u32, cfg: PmlConfig) -> Self {
        Self {
            me,
            nprocs,
            cfg,
            btls: Vec::new(),
            routes: vec![Vec::new(); nprocs as usize],
            rr: vec![0; nprocs as usize],
            inline_route: vec![None; nprocs as usize],
            failed: vec![false; nprocs as usize],
            reqs: Slab::default(),
            matching: Matching::new(nprocs),
            claimed: std::collections::HashMap::new(),
            next_claim: 0,
            actions: Default::default(),
            direct: None,
        }
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.me
    }

    /// Register a btl and the peers it reaches. For each peer the btls with
    /// the highest exclusivity win; several of equal exclusivity share the
    /// traffic round-robin.
    pub fn add_btl(&mut self, caps: Capabilities, reaches: &dyn Fn(Rank) -> bool) -> BtlId {
        let id = self.btls.len();
        for p in 0..self.nprocs {
            if !reaches(p) {
                continue;
            }
            let r = &mut self.routes[p as usize];
            match r.first().map(|&cur| self.btls[cur].caps.exclusivity) {
                Some(e) if e > caps.exclusivity => {}
                Some(e) if e == caps.exclusivity => r.push(id),
                _ => *r = vec![id],
            }
        }
        self.btls.push(BtlInfo { caps });
        for (p, r) in self.routes.iter().enumerate() {
            self.inline_route[p] = match r.as_slice() {
                [b] => Some((*b, protocol::eager_limit(&self.btls[*b].caps, &self.cfg))),
                _ => None,
            };
        }
        id
    }

    /// The first btl chosen for `peer`, if any.
    pub fn route(&self, peer: Rank) -> Option<BtlId> {
        self.routes
            .get(peer as usize)
            .and_then(|r| r.first().copied())
    }

    fn next_route(&mut self, peer: Rank) -> Option<BtlId> {
        let r = &self.routes[peer as usize];
        match r.len() {
            0 => None,
            1 => Some(r[0]),
            n => {
                let i = &mut self.rr[peer as usize];
                let pick = r[*i as usize % n];
                *i = i.wrapping_add(1);
                Some(pick)
            }
        }
    }

    /// The protocol a message would use (for diagnostics and tests).
    pub fn protocol_for(
        &self,
        peer: Rank,
        len: usize,
        kind: MemKind,
        mode: SendMode,
    ) -> Option<Protocol> {
        let b = self.route(peer)?;
        Some(protocol::choose(
            len,
            kind,
            mode,
            &self.btls[b].caps,
            &self.cfg,
        ))
    }

    /// Next action for the driver.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Whether actions are waiting.
    #[inline]
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// Requests not yet completed and taken.
    pub fn outstanding(&self) -> usize {
        self.reqs.len()
    }

    fn push_send(&mut self, btl: BtlId, peer: Rank, hdr: Hdr, payload: Payload, token: u64) {
        self.actions.push_back(Action::Send {
            btl,
            peer,
            header: hdr.encode(),
            payload,
            token,
        });
    }

    /// Post a send. Completion is observed with [`Pml::test`].
    pub fn post_send(&mut self, a: SendArgs, mem: &mut dyn Memory) -> Result<ReqId, PmlError> {
        let peer = a.dest;
        if peer >= self.nprocs {
            return Err(PmlError::Unreachable(peer));
        }
        if self.failed[peer as usize] {
            return Err(PmlError::PeerFailed(peer));
        }
        let btl = self.next_route(peer).ok_or(PmlError::Unreachable(peer))?;
        let caps = &self.btls[btl].caps;
        let mut proto = protocol::choose(a.buf.len, a.buf.kind, a.mode, caps, &self.cfg);
        let mut ipc = None;
        if proto == Protocol::RndvIpc {
            ipc = mem.ipc_export(a.buf);
            if ipc.is_none() {
                proto = Protocol::RndvPipelined;
            }
        }
        let desc = if proto == Protocol::RndvGet {
            let d = mem.register(btl, a.buf);
            if d.is_none() {
                proto = Protocol::RndvPipelined;
            }
            d
        } else {
            None
        };
        let caps = &self.btls[btl].caps;
        let seq = self.matching.next_send_seq(peer);
        let (state, sends_in_flight) = match proto {
            Protocol::Eager => (SendState::Eager, 1),
            Protocol::EagerSync => (SendState::EagerSync { acked: false }, 1),
            Protocol::RndvGet | Protocol::RndvPipelined | Protocol::RndvIpc => {
                (SendState::AwaitReply, 0)
            }
        };
        let id = self.reqs.insert(Req::Send(SendReq {
            peer,
            btl,
            buf: a.buf,
            state,
            sends_in_flight,
        }));
        let m = MatchHdr {
            ctx: a.ctx,
            src: a.src,
            tag: a.tag,
            seq,
            len: a.buf.len as u64,
            sreq: id.0,
        };
        tracing::debug!(target: LOG, "send {} B of {} memory to rank {} tag {} ctx {} via {}: {}",
            a.buf.len, a.buf.kind.name(), peer, a.tag, a.ctx, caps.name,
            proto.describe(a.buf.kind, mem.device_copy()));
        let payload = Payload::Mem {
            addr: a.buf.addr,
            len: a.buf.len,
            kind: a.buf.kind,
        };
        match proto {
            // A plain eager message is never answered (no ACK, CTS or FIN
            // names it), so it carries no sender request: that lets it go
            // out with the short MATCH header, as inline sends do.
            Protocol::Eager => {
                let m = MatchHdr { sreq: 0, ..m };
                self.push_send(btl, peer, Hdr::Match { flags: 0, m }, payload, id.0)
            }
            Protocol::EagerSync => {
                self.push_send(btl, peer, Hdr::Match { flags: F_SYNC, m }, payload, id.0)
            }
            Protocol::RndvGet | Protocol::RndvPipelined => {
                let flags = if a.mode == SendMode::Synchronous {
                    F_SYNC
                } else {
                    0
                };
                self.push_send(btl, peer, Hdr::Rndv { flags, m, desc }, Payload::None, 0);
            }
            Protocol::RndvIpc => {
                let mut b = vec![0u8; gmpi_gpu::IpcDesc::WIRE_LEN];
                ipc.expect("checked").encode(&mut b);
                self.push_send(
                    btl,
                    peer,
                    Hdr::RndvIpc { flags: 0, m },
                    Payload::Bytes(b),
                    0,
                );
            }
        }
        Ok(id)
    }

    /// Fast path for a standard-mode eager send (ob1's `sendi`): if the
    /// message goes eagerly and nothing is queued, assign its sequence number
    /// and return the btl and the encoded header; the driver submits header
    /// and payload at once and no request exists. `None`: use
    /// [`Pml::post_send`]. If the btl refuses, the driver hands the send back
    /// with [`Pml::inline_refused`], which turns it into a queued request.
    #[inline]
    pub fn try_inline(&mut self, a: &SendArgs) -> Option<Result<(BtlId, HdrBuf), PmlError>> {
        if a.mode != SendMode::Standard || !self.actions.is_empty() {
            return None;
        }
        let peer = a.dest;
        // Unreachable peers and multi-rail routes take the general path,
        // which reports errors and stripes.
        let (btl, limit) = (*self.inline_route.get(peer as usize)?)?;
        if a.buf.len > limit || !a.buf.kind.is_host() {
            return None;
        }
        if self.failed[peer as usize] {
            return Some(Err(PmlError::PeerFailed(peer)));
        }
        tracing::debug!(target: LOG, "send {} B to rank {} tag {} ctx {} via {}: eager (inline)",
            a.buf.len, peer, a.tag, a.ctx, self.btls[btl].caps.name);
        let m = MatchHdr {
            ctx: a.ctx,
            src: a.src,
            tag: a.tag,
            seq: self.matching.next_send_seq(peer),
            len: a.buf.len as u64,
            sreq: 0,
        };
        Some(Ok((btl, Hdr::Match { flags: 0, m }.encode())))
    }

    /// The btl refused an inline send: queue it as an eager request (first in
    /// line for its peer, so order holds) and return the request.
    pub fn inline_refused(&mut self, a: &SendArgs, btl: BtlId, header: HdrBuf) -> ReqId {
        let id = self.reqs.insert(Req::Send(SendReq {
            peer: a.dest,
            btl,
            buf: a.buf,
            state: SendState::Eager,
            sends_in_flight: 1,
        }));
        self.actions.push_front(Action::Send {
            btl,
            peer: a.dest,
            header,
            payload: Payload::Mem {
                addr: a.buf.addr,
                len: a.buf.len,
                kind: a.buf.kind,
            },
            token: id.0,
        });
        id
    }

    /// Post a receive. If an unexpected message matches, it is delivered (or
    /// its rendezvous started) at once, writing through `mem`.
    pub fn post_recv(&mut self, a: RecvArgs, mem: &mut dyn Memory) -> Result<ReqId, PmlError> {
        if let Some(w) = a.src_world {
            if self.failed.get(w as usize).copied().unwrap_or(false) {
                return Err(PmlError::PeerFailed(w));
            }
        }
        let mut r = RecvReq::posted(a.src_world, a.buf);
        r.consumed = a.consumed;
        let id = self.reqs.insert(Req::Recv(r));
        if let Some(u) = self.matching.take_unexpected(a.ctx, a.src, a.tag) {
            self.deliver(id, u, mem);
        } else {
            self.matching.post(id, a.ctx, a.src, a.tag);
        }
        Ok(id)
    }

    /// Post the receive of a blocking call (`MPI_Recv`), which waits for it
    /// at once and touches no other request meanwhile. When nothing else is
    /// posted and nothing unexpected waits (a ping-pong's steady state), it
    /// needs no request: it waits in a slot of its own, matched before any
    /// receive posted after it, and the caller polls [`Pml::take_direct`]
    /// for its end. Otherwise (or for device memory) it is posted as by
    /// [`Pml::post_recv`].
    ///
    /// A caller that stops waiting before the end (a fatal error) calls
    /// [`Pml::drop_direct`].
    pub fn post_recv_direct(
        &mut self,
        a: RecvArgs,
        mem: &mut dyn Memory,
    ) -> Result<Posted, PmlError> {
        if self.direct.is_some()
            || !a.buf.kind.is_host()
            || !self.matching.nothing_posted()
            || !self.matching.nothing_unexpected()
        {
            return self.post_recv(a, mem).map(Posted::Req);
        }
        if let Some(w) = a.src_world {
            if self.failed.get(w as usize).copied().unwrap_or(false) {
                return Err(PmlError::PeerFailed(w));
            }
        }
        self.direct = Some(Direct {
            ctx: a.ctx,
            src: a.src,
            src_world: a.src_world,
            tag: a.tag,
            buf: a.buf,
            end: None,
        });
        Ok(Posted::Direct)
    }

    /// The end of the receive [`Pml::post_recv_direct`] put in its slot,
    /// which is then free again; `None` while it waits.
    #[inline]
    pub fn take_direct(&mut self) -> Option<DirectEnd> {
        // Still waiting (or no direct receive): leave the slot as it is.
        self.direct.as_ref()?.end.as_ref()?;
        self.direct.take().and_then(|d| d.end)
    }

    /// Forget the receive in the direct slot (its caller stopped waiting).
    pub fn drop_direct(&mut self) {
        self.direct = None;
    }

    /// Whether the waiting direct receive accepts this envelope.
    #[inline]
    fn direct_accepts(&self, m: &MatchHdr) -> bool {
        self.direct.as_ref().is_some_and(|d| {
            d.end.is_none() && matching::accepts(d.ctx, d.src, d.tag, (m.ctx, m.src, m.tag))
        })
    }

    /// Turn the waiting direct receive into a request (a rendezvous matched
    /// it) and return the request.
    fn promote_direct(&mut self) -> ReqId {
        let d = self.direct.as_mut().expect("a waiting direct receive");
        let id = self
            .reqs
            .insert(Req::Recv(RecvReq::posted(d.src_world, d.buf)));
        d.end = Some(DirectEnd::Promoted(id));
        id
    }

    /// Look for a matching unexpected message without receiving it.
    pub fn iprobe(&self, ctx: u32, src: Option<u32>, tag: Option<i32>) -> Option<Status> {
        self.matching
            .peek_unexpected(ctx, src, tag)
            .map(|u| Status {
                source: u.m.src,
                tag: u.m.tag,
                len: u.m.len,
                cancelled: false,
            })
    }

    /// Match a message and take it out of matching without receiving it
    /// (`MPI_Improbe`): its status, and the handle under which only
    /// [`Pml::mrecv`] can receive it. Later receives and probes never see it.
    pub fn improbe(
        &mut self,
        ctx: u32,
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Option<(Status, u64)> {
        let u = self.matching.take_unexpected(ctx, src, tag)?;
        let st = Status {
            source: u.m.src,
            tag: u.m.tag,
            len: u.m.len,
            cancelled: false,
        };
        let id = self.next_claim;
        self.next_claim += 1;
        self.claimed.insert(id, u);
        Some((st, id))
    }

    /// Receive into `buf` the message [`Pml::improbe`] matched as `msg`
    /// (`MPI_Mrecv`). `None` if `msg` names no matched message.
    pub fn mrecv(&mut self, msg: u64, buf: Buf, mem: &mut dyn Memory) -> Option<ReqId> {
        let u = self.claimed.remove(&msg)?;
        let id = self.reqs.insert(Req::Recv(RecvReq::posted(None, buf)));
        self.deliver(id, u, mem);
        Some(id)
    }

    /// Cancel a receive that has not been matched yet. Returns whether it was
    /// cancelled; it then completes with `Status::cancelled` set.
    pub fn cancel(&mut self, id: ReqId) -> bool {
        let Some(Req::Recv(r)) = self.reqs.get_mut(id) else {
            return false;
        };
        if r.state != RecvState::Posted {
            return false;
        }
        self.matching.unpost(id);
        r.status.cancelled = true;
        r.state = RecvState::Done;
        let st = r.status;
        self.reqs.complete(id, Ok(st));
        true
    }

    /// Whether a request has completed (without taking it).
    #[inline]
    pub fn is_complete(&self, id: ReqId) -> bool {
        self.reqs.result(id).is_some()
    }

    /// Take a completed request's outcome; `None` while it is in flight.
    /// Sends report a default status.
    pub fn test(&mut self, id: ReqId) -> Option<Result<Status, PmlError>> {
        self.reqs.take(id)
    }

    /// Forget a request: its outcome is discarded when it completes.
    pub fn free(&mut self, id: ReqId) {
        self.reqs.detach(id);
    }

    // ----- inputs from the driver -------------------------------------------------------

    /// The driver submitted (or the btl completed) the send with `token`.
    pub fn handle_send_done(&mut self, token: u64) {
        let id = ReqId(token);
        let Some(Req::Send(s)) = self.reqs.get_mut(id) else {
            return;
        };
        s.sends_in_flight = s.sends_in_flight.saturating_sub(1);
        let done = match s.state {
            SendState::Eager => true,
            SendState::EagerSync { acked } => acked,
            SendState::Streaming => s.sends_in_flight == 0,
            _ => false,
        };
        if done {
            self.reqs.complete(id, Ok(Status::default()));
        }
    }

    /// A fragment arrived from `peer` on `btl`.
    ///
    /// Inlined fast path: the next eager MATCH in order from a known peer
    /// (what a small-message exchange is made of), without the general
    /// decode; everything else goes through the general path.
    #[inline]
    pub fn handle_frag(
        &mut self,
        btl: BtlId,
        peer: Rank,
        data: &[u8],
        mem: &mut dyn Memory,
    ) -> Result<(), PmlError> {
        if peer < self.nprocs {
            if let Some((flags, m, off)) = Hdr::decode_match(data) {
                if m.seq == self.matching.expected_seq(peer) {
                    self.incoming_match(btl, peer, flags, m, &data[off..], mem)?;
                    return self.unstash(peer, mem);
                }
            }
        }
        self.handle_frag_general(btl, peer, data, mem)
    }

    /// [`Pml::handle_frag`] of any fragment.
    #[inline(never)]
    fn handle_frag_general(
        &mut self,
        btl: BtlId,
        peer: Rank,
        data: &[u8],
        mem: &mut dyn Memory,
    ) -> Result<(), PmlError> {
        if peer >= self.nprocs {
            return Err(PmlError::Malformed(format!(
                "fragment from unknown rank {peer}"
            )));
        }
        let (hdr, off) = Hdr::decode(data)?;
        match hdr {
            Hdr::Match { m, .. } | Hdr::Rndv { m, .. } | Hdr::RndvIpc { m, .. } => {
                let expected = self.matching.expected_seq(peer);
                if m.seq != expected {
                    if m.seq.wrapping_sub(expected) > u32::MAX / 2 {
                        return Err(PmlError::Malformed(format!(
                            "rank {peer} replayed sequence number {} (expected {expected})",
                            m.seq
                        )));
                    }
                    self.matching.stash(peer, m.seq, btl, data.to_vec());
                    return Ok(());
                }
                self.incoming(btl, peer, hdr, &data[off..], mem)?;
                self.unstash(peer, mem)
            }
            Hdr::Ack { sreq } => {
                let id = ReqId(sreq);
                let s = self.send_req_of(peer, id, "ACK")?;
                let SendState::EagerSync { acked } = &mut s.state else {
                    return Err(PmlError::Malformed(
                        "ACK for a send that is not synchronous".into(),
                    ));
                };
                if *acked {
                    return Err(PmlError::Malformed("duplicate ACK".into()));
                }
                *acked = true;
                if s.sends_in_flight == 0 {
                    self.reqs.complete(id, Ok(Status::default()));
                }
                Ok(())
            }
            Hdr::Fin { sreq } => {
                let id = ReqId(sreq);
                let s = self.send_req_of(peer, id, "FIN")?;
                if s.state != SendState::AwaitReply {
                    return Err(PmlError::Malformed(
                        "FIN for a send not awaiting one".into(),
                    ));
                }
                s.state = SendState::Done;
                self.reqs.complete(id, Ok(Status::default()));
                Ok(())
            }
            Hdr::Cts { sreq, rreq, want } => {
                let id = ReqId(sreq);
                let chunk = {
                    let s = self.send_req_of(peer, id, "CTS")?;
                    if s.state != SendState::AwaitReply {
                        return Err(PmlError::Malformed(
                            "CTS for a send not awaiting one".into(),
                        ));
                    }
                    if want > s.buf.len as u64 {
                        return Err(PmlError::Malformed(format!(
                            "CTS asks {want} bytes of a {}-byte message",
                            s.buf.len
                        )));
                    }
                    s.btl
                };
                let (btl, buf) = {
                    let s = self.reqs.get_mut(id).expect("checked").as_send_mut();
                    (s.btl, s.buf)
                };
                let chunk = protocol::chunk_size(&self.btls[chunk].caps, &self.cfg, buf.kind);
                let want = want as usize;
                let n = want.div_ceil(chunk);
                tracing::debug!(target: LOG, "CTS from rank {peer}: streaming {want} B in {n} fragments");
                for i in 0..n {
                    let offset = i * chunk;
                    let len = chunk.min(want - offset);
                    self.push_send(
                        btl,
                        peer,
                        Hdr::Frag {
                            rreq,
                            offset: offset as u64,
                        },
                        Payload::Mem {
                            addr: buf.addr + offset as u64,
                            len,
                            kind: buf.kind,
                        },
                        sreq,
                    );
                }
                let s = self.reqs.get_mut(id).expect("checked").as_send_mut();
                s.sends_in_flight += n as u32;
                s.state = SendState::Streaming;
                if n == 0 {
                    s.state = SendState::Done;
                    self.reqs.complete(id, Ok(Status::default()));
                }
                Ok(())
            }
            Hdr::Frag { rreq, offset } => {
                let id = ReqId(rreq);
                let payload = &data[off..];
                let r = self.frag_recv_of(peer, id, offset, payload.len())?;
                mem.write(r.buf.addr + offset, r.buf.kind, payload);
                r.got += payload.len() as u64;
                if r.got >= r.want {
                    self.finish_recv(id);
                }
                Ok(())
            }
        }
    }

    /// A streamed fragment ([`gmpi_btl::Event::FragStream`]) from `peer`:
    /// only FRAG chunks are sent that way. The payload is read from `body`
    /// straight into the receive buffer, as far as it has arrived; the btl
    /// delivers the fragment again (with a larger `taken`) for the rest.
    pub fn handle_frag_stream(
        &mut self,
        peer: Rank,
        head: &[u8],
        len: usize,
        taken: usize,
        body: &mut dyn gmpi_btl::StreamBody,
        mem: &mut dyn Memory,
    ) -> Result<(), PmlError> {
        let (hdr, hlen) = Hdr::decode(head)?;
        let Hdr::Frag { rreq, offset } = hdr else {
            return Err(PmlError::Malformed(format!(
                "streamed fragment from rank {peer} is not a FRAG"
            )));
        };
        let plen = len.checked_sub(hlen).ok_or_else(|| {
            PmlError::Malformed(format!("streamed FRAG of {len} bytes from rank {peer}"))
        })?;
        let id = ReqId(rreq);
        let r = self.frag_recv_of(peer, id, offset, plen)?;
        let mut at = taken;
        if at < hlen {
            // The first delivery: the header's bytes come first.
            let mut skip = [0u8; gmpi_btl::STREAM_HEAD];
            let k = body.read(&mut skip[..hlen - at]);
            at += k;
            if at < hlen {
                return Ok(());
            }
        }
        let done = (at - hlen) as u64;
        let rest = plen - (at - hlen);
        let n = mem.fill(r.buf.addr + offset + done, rest, r.buf.kind, &mut |dst| {
            body.read(dst)
        });
        r.got += n as u64;
        if r.got >= r.want {
            self.finish_recv(id);
        }
        Ok(())
    }

    /// The receive that a FRAG of `plen` bytes at `offset` from `peer` is for:
    /// one streaming from that rank, with the bytes inside what it granted.
    fn frag_recv_of(
        &mut self,
        peer: Rank,
        id: ReqId,
        offset: u64,
        plen: usize,
    ) -> Result<&mut RecvReq, PmlError> {
        let Some(Req::Recv(r)) = self.reqs.get_mut(id) else {
            return Err(PmlError::Malformed(format!(
                "FRAG for unknown request {:#x}",
                id.0
            )));
        };
        if r.state != RecvState::Streaming || r.peer != peer {
            return Err(PmlError::Malformed(
                "FRAG for a receive not streaming from this rank".into(),
            ));
        }
        if offset.checked_add(plen as u64).is_none_or(|e| e > r.want) {
            return Err(PmlError::Malformed(format!(
                "FRAG at {offset}+{plen} past the {} bytes granted",
                r.want
            )));
        }
        Ok(r)
    }

    fn send_req_of(&mut self, peer: Rank, id: ReqId, what: &str) -> Result<&mut SendReq, PmlError> {
        match self.reqs.get_mut(id) {
            Some(Req::Send(s)) if s.peer == peer => Ok(s),
            _ => Err(PmlError::Malformed(format!(
                "{what} from rank {peer} for unknown send request {:#x}",
                id.0
            ))),
        }
    }

    /// Process the stashed fragments from `peer` that are now in order.
    ///
    /// Runs after every in-order fragment; the stash is almost always empty
    /// (it holds only fragments that overtook others on another btl), so
    /// the test is inlined and the walk is not.
    #[inline]
    fn unstash(&mut self, peer: Rank, mem: &mut dyn Memory) -> Result<(), PmlError> {
        if !self.matching.has_stashed() {
            return Ok(());
        }
        self.unstash_in_order(peer, mem)
    }

    #[inline(never)]
    fn unstash_in_order(&mut self, peer: Rank, mem: &mut dyn Memory) -> Result<(), PmlError> {
        while let Some((b, d)) = self.matching.unstash(peer) {
            let (h, o) = Hdr::decode(&d)?;
            self.incoming(b, peer, h, &d[o..], mem)?;
        }
        Ok(())
    }

    /// An in-order eager MATCH: delivered straight from the fragment to a
    /// posted receive, or kept as unexpected.
    #[inline(always)]
    fn incoming_match(
        &mut self,
        btl: BtlId,
        peer: Rank,
        flags: u8,
        m: MatchHdr,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) -> Result<(), PmlError> {
        self.matching.advance_seq(peer);
        if payload.len() as u64 != m.len {
            return Err(PmlError::Malformed(format!(
                "eager header says {} bytes, fragment holds {}",
                m.len,
                payload.len()
            )));
        }
        if self.direct_accepts(&m) {
            self.deliver_direct(peer, btl, m, flags, payload, mem);
        } else if let Some(id) = self.matching.match_posted(m.ctx, m.src, m.tag) {
            self.deliver_eager(id, peer, btl, m, flags, payload, mem);
        } else {
            self.matching.push_unexpected(Unexpected {
                peer,
                btl,
                m,
                flags,
                body: UnexpectedBody::Eager(payload.to_vec()),
            });
        }
        Ok(())
    }

    /// An in-order MATCH or RNDV.
    fn incoming(
        &mut self,
        btl: BtlId,
        peer: Rank,
        hdr: Hdr,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) -> Result<(), PmlError> {
        let u = match hdr {
            Hdr::Match { flags, m } => {
                return self.incoming_match(btl, peer, flags, m, payload, mem);
            }
            Hdr::Rndv { flags, m, desc } => {
                self.matching.advance_seq(peer);
                Unexpected {
                    peer,
                    btl,
                    m,
                    flags,
                    body: UnexpectedBody::Rndv(desc),
                }
            }
            Hdr::RndvIpc { flags, m } => {
                self.matching.advance_seq(peer);
                // `Hdr::decode` checked the length.
                let d = gmpi_gpu::IpcDesc::decode(payload)
                    .ok_or_else(|| PmlError::Malformed("RNDV_IPC without its descriptor".into()))?;
                if d.len != m.len {
                    return Err(PmlError::Malformed(format!(
                        "RNDV_IPC exposes {} bytes of a {}-byte message",
                        d.len, m.len
                    )));
                }
                Unexpected {
                    peer,
                    btl,
                    m,
                    flags,
                    body: UnexpectedBody::Ipc(d),
                }
            }
            _ => unreachable!("incoming() only takes MATCH, RNDV and RNDV_IPC"),
        };
        if self.direct_accepts(&u.m) {
            let id = self.promote_direct();
            self.deliver(id, u, mem);
        } else if let Some(id) = self.matching.match_posted(u.m.ctx, u.m.src, u.m.tag) {
            self.deliver(id, u, mem);
        } else {
            self.matching.push_unexpected(u);
        }
        Ok(())
    }

    /// An eager MATCH into the waiting direct receive.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn deliver_direct(
        &mut self,
        peer: Rank,
        btl: BtlId,
        m: MatchHdr,
        flags: u8,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) {
        let Some(d) = self.direct.as_mut() else {
            return;
        };
        let (_, res) = write_eager(d.buf, &m, payload, mem);
        d.end = Some(DirectEnd::Done(res));
        self.ack_if_sync(btl, peer, flags, &m);
    }

    /// The ACK a synchronous eager sender waits for, once its message matched.
    #[inline]
    fn ack_if_sync(&mut self, btl: BtlId, peer: Rank, flags: u8, m: &MatchHdr) {
        if flags & F_SYNC != 0 {
            self.push_send(btl, peer, Hdr::Ack { sreq: m.sreq }, Payload::None, 0);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn deliver_eager(
        &mut self,
        id: ReqId,
        peer: Rank,
        btl: BtlId,
        m: MatchHdr,
        flags: u8,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) {
        let r = self.reqs.get_mut(id).expect("posted receive").as_recv_mut();
        let (st, res) = write_eager(r.buf, &m, payload, mem);
        r.status = st;
        r.peer = peer;
        r.want = m.len;
        r.state = RecvState::Done;
        self.ack_if_sync(btl, peer, flags, &m);
        self.reqs.complete(id, res);
    }

    /// Deliver a matched message (eager or rendezvous) to receive `id`.
    fn deliver(&mut self, id: ReqId, u: Unexpected, mem: &mut dyn Memory) {
        match u.body {
            UnexpectedBody::Eager(data) => {
                self.deliver_eager(id, u.peer, u.btl, u.m, u.flags, &data, mem)
            }
            UnexpectedBody::Ipc(d) => {
                let r = self.reqs.get_mut(id).expect("posted receive").as_recv_mut();
                let want = r.accept_rndv(&u);
                r.state = RecvState::Pulling;
                r.from_device = true;
                let buf = r.buf;
                if want == 0 {
                    self.handle_get_done(id.0);
                    return;
                }
                tracing::debug!(target: LOG, "recv {want} B into {} memory from rank {}: rndv/cuda-ipc", buf.kind.name(), u.peer);
                self.actions.push_back(Action::IpcGet {
                    peer: u.peer,
                    desc: d,
                    dst: buf.addr,
                    dst_kind: buf.kind,
                    len: want as usize,
                    token: id.0,
                });
            }
            UnexpectedBody::Rndv(desc) => {
                // A CMA or RDMA get lands in host memory (or in device
                // memory only where the btl registered it for GPUDirect); a
                // device destination takes the stream instead, each chunk
                // copied in as it lands.
                let caps = &self.btls[u.btl].caps;
                let (get_ok, gpudirect) = (caps.get && self.cfg.use_get, caps.gpudirect);
                let r = self.reqs.get_mut(id).expect("posted receive").as_recv_mut();
                let use_get = desc.is_some() && get_ok && (r.buf.kind.is_host() || gpudirect);
                let want = r.accept_rndv(&u);
                if want == 0 {
                    // Nothing to move: release the sender at once.
                    r.state = RecvState::Done;
                    let (btl, peer, sreq) = (u.btl, u.peer, u.m.sreq);
                    if use_get {
                        self.push_send(btl, peer, Hdr::Fin { sreq }, Payload::None, 0);
                    } else {
                        self.push_cts(btl, peer, sreq, id, 0);
                    }
                    self.finish_recv(id);
                } else if use_get {
                    r.state = RecvState::Pulling;
                    let (buf, d) = (r.buf, desc.expect("checked"));
                    tracing::debug!(target: LOG, "recv {want} B from rank {}: rndv/get", u.peer);
                    self.actions.push_back(Action::Get {
                        btl: u.btl,
                        peer: u.peer,
                        desc: d,
                        offset: 0,
                        dst: buf.addr,
                        dst_kind: buf.kind,
                        len: want as usize,
                        token: id.0,
                        alone: r.consumed,
                    });
                } else {
                    self.start_streaming(id);
                }
            }
        }
    }

    fn start_streaming(&mut self, id: ReqId) {
        let r = self.reqs.get_mut(id).expect("receive").as_recv_mut();
        r.state = RecvState::Streaming;
        r.got = 0;
        let (btl, peer, sreq, want) = (r.btl, r.peer, r.sreq, r.want);
        tracing::debug!(target: LOG, "recv {want} B from rank {peer}: {} (CTS)", r.streamed_name());
        self.push_cts(btl, peer, sreq, id, want);
    }

    /// Clear-to-send: the sender may stream `want` bytes of `sreq` to `rreq`.
    fn push_cts(&mut self, btl: BtlId, peer: Rank, sreq: u64, rreq: ReqId, want: u64) {
        let hdr = Hdr::Cts {
            sreq,
            rreq: rreq.0,
            want,
        };
        self.push_send(btl, peer, hdr, Payload::None, 0);
    }

    /// A get finished.
    pub fn handle_get_done(&mut self, token: u64) {
        let id = ReqId(token);
        let Some(Req::Recv(r)) = self.reqs.get_mut(id) else {
            return;
        };
        if r.state != RecvState::Pulling {
            return;
        }
        r.state = RecvState::Done;
        let (btl, peer, sreq) = (r.btl, r.peer, r.sreq);
        self.push_send(btl, peer, Hdr::Fin { sreq }, Payload::None, 0);
        self.finish_recv(id);
    }

    /// A get failed: fall back to the pipelined protocol for this message.
    pub fn handle_get_failed(&mut self, token: u64, why: &str) {
        let id = ReqId(token);
        let Some(Req::Recv(r)) = self.reqs.get_mut(id) else {
            return;
        };
        if r.state != RecvState::Pulling {
            return;
        }
        tracing::debug!(target: LOG, "get from rank {} failed ({why}); falling back to {}", r.peer, r.streamed_name());
        self.start_streaming(id);
    }

    /// Complete a rendezvous receive; truncated if the message was longer
    /// than the buffer (only `want` bytes were moved).
    fn finish_recv(&mut self, id: ReqId) {
        let Some(Req::Recv(r)) = self.reqs.get_mut(id) else {
            return;
        };
        r.state = RecvState::Done;
        let (msg_len, cap) = (r.msg_len, r.buf.len as u64);
        let res = if msg_len > cap {
            Err(PmlError::Truncated { len: msg_len, cap })
        } else {
            Ok(r.status)
        };
        self.reqs.complete(id, res);
    }

    /// A peer failed: every request that depends on it fails.
    pub fn handle_peer_failed(&mut self, peer: Rank) {
        let Some(f) = self.failed.get_mut(peer as usize) else {
            return;
        };
        if *f {
            return;
        }
        *f = true;
        tracing::debug!(target: LOG, "rank {peer} failed");
        let victims: Vec<ReqId> = self
            .reqs
            .iter()
            .filter(|(_, r)| match r {
                Req::Send(s) => s.peer == peer && s.state != SendState::Done,
                Req::Recv(r) => match r.state {
                    RecvState::Posted => r.src_world == Some(peer),
                    RecvState::Pulling | RecvState::Streaming => r.peer == peer,
                    RecvState::Done => false,
                },
            })
            .map(|(id, _)| id)
            .collect();
        for id in victims {
            self.matching.unpost(id);
            self.reqs.complete(id, Err(PmlError::PeerFailed(peer)));
        }
        if let Some(d) = self.direct.as_mut() {
            if d.end.is_none() && d.src_world == Some(peer) {
                d.end = Some(DirectEnd::Done(Err(PmlError::PeerFailed(peer))));
            }
        }
        self.matching.drop_peer(peer);
    }

    /// Whether `peer` has failed.
    pub fn peer_failed(&self, peer: Rank) -> bool {
        self.failed.get(peer as usize).copied().unwrap_or(false)
    }
}
