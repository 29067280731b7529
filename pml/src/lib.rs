//! gmpi-pml: point-to-point messaging as a sans-IO state machine.
//!
//! The pml implements MPI's matching rules and the eager and rendezvous
//! protocols. It performs no I/O and reads no clock (the way `quinn-proto`
//! does): a driver (the runtime's progress engine, `runtime/src/progress/`)
//! feeds it inputs, executes the actions it asks for and reports how each
//! ended. So every protocol, ordering rule and wildcard case runs in-process
//! and deterministically over the simulated fabric of `gmpi_btl::sim`.
//!
//! Calling contract:
//! - Inputs from the user: [`Pml::post_send`], [`Pml::try_inline`] (a
//!   standard-mode eager send with no request), [`Pml::post_recv`],
//!   [`Pml::post_recv_direct`] (a blocking receive waiting in a slot of its
//!   own; its end comes from [`Pml::take_direct`]), [`Pml::mrecv`],
//!   [`Pml::cancel`], [`Pml::free`].
//! - Inputs from the transports: [`Pml::handle_frag`] (a fragment arrived),
//!   [`Pml::stream_target`] / [`Pml::handle_stream_read`] (a streamed one),
//!   [`Pml::handle_peer_failed`].
//! - Answers to actions ([`action`] has the table): `handle_send_done`,
//!   `handle_refused`, `handle_registered`, `handle_ipc_exported`,
//!   `handle_get_done`, `handle_get_failed`, `handle_copy_done`
//!   (`IpcRelease` and `ForgetPeer`, clean-up, need no answer).
//! - Outputs: [`Pml::poll_action`], drained and executed in order after any
//!   input (and [`Pml::retry_refused`] on every progress pass), and the
//!   request queries [`Pml::is_complete`] / [`Pml::test`].
//! - User memory is named by address ([`Buf`]), never touched, with one
//!   documented exception: [`HostWrite`], the write of an arrived eager
//!   payload into a matched host receive during the input that delivered it.
//!   So the pml needs no `unsafe` and no CUDA: memory kinds and IPC
//!   descriptors come from `gmpi-mem`.
//!
//! File map (a reader traces each protocol by these names):
//! - `protocol.rs`: [`protocol::select`], the one place that chooses a
//!   protocol ([`Plan`]), and its tables.
//! - `send.rs`: posting a send (eager, inline, rendezvous start), the
//!   sender's ACK and completions.
//! - `recv.rs`: posting receives (and the direct slot), arrival of MATCH and
//!   RNDV fragments in order, delivery of eager data, cancel.
//! - `probe.rs`: `iprobe`, `improbe`, `mrecv`.
//! - `rndv/`: the rendezvous protocols, one file each: `mod.rs` (the
//!   request-to-send, the receiver's choice, FIN), `get.rs` (single-copy
//!   get), `cuda_ipc.rs` (device to device by CUDA IPC), `pipelined.rs`
//!   (CTS and FRAG streaming), `staged.rs` (device memory through host
//!   memory).
//! - `peer.rs`: routes, sequence numbers, failure, refused actions.
//! - `matching.rs`: posted and unexpected queues, out-of-order stash.
//! - `request.rs`: the request slab and the per-state request data.
//! - `action.rs`: what the driver is asked to do, and how it answers.
//! - `memory.rs`: [`Buf`] and the [`HostWrite`] callback.
//! - `wire.rs`: the wire format of every fragment.
//! - `error.rs`: [`PmlError`], by whose fault.
//!
//! Message ordering holds whatever path each message takes: every MATCH and
//! RNDV carries a per-peer sequence number and early arrivals wait in an
//! out-of-order stash.

#![forbid(unsafe_code)]

pub mod action;
pub mod error;
mod matching;
pub mod memory;
mod peer;
mod probe;
pub mod protocol;
mod recv;
mod request;
mod rndv;
mod send;
pub mod wire;

use std::collections::VecDeque;

use gmpi_btl::{Capabilities, Rank};

pub use action::{Action, Payload, StreamTarget};
pub use error::{DeviceError, DeviceFault, PmlError, Violation, WireError};
pub use gmpi_mem::MemKind;
pub use memory::{Buf, HostWrite};
pub use protocol::{DeviceConfig, Plan, PlanTable, PmlConfig, Protocol, SendMode};
pub use recv::{DirectEnd, Posted, RecvArgs};
pub use rndv::MAX_DEPTH;
pub use send::SendArgs;

use matching::Matching;
use peer::Peers;
use request::Slab;

/// Tracing target for protocol decisions (`GMPI_LOG=pml=debug`).
const LOG: &str = "pml";

/// Identifies a btl registered with [`Pml::add_btl`].
pub type BtlId = usize;

/// A request handle: slot index and generation, so a stale id never aliases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReqId(pub u64);

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

/// The plans of one btl, by source memory kind and send mode (the
/// destination is not known to a sender).
#[derive(Debug, Clone)]
struct Plans {
    /// `[kind][mode]`: kinds host, device, managed; modes standard,
    /// synchronous.
    tables: [[PlanTable; 2]; 3],
}

impl Plans {
    const KINDS: [MemKind; 3] = [
        MemKind::Host,
        MemKind::Device { ordinal: 0 },
        MemKind::Managed,
    ];

    fn build(caps: &Capabilities, cfg: &PmlConfig) -> Self {
        let t = |kind, mode| PlanTable::build(kind, None, mode, caps, cfg);
        let row = |kind| [t(kind, SendMode::Standard), t(kind, SendMode::Synchronous)];
        Self {
            tables: Self::KINDS.map(row),
        }
    }

    #[inline]
    fn table(&self, kind: MemKind, mode: SendMode) -> &PlanTable {
        let k = match kind {
            MemKind::Host => 0,
            MemKind::Device { .. } => 1,
            MemKind::Managed => 2,
        };
        &self.tables[k][mode as usize]
    }
}

/// A registered btl: what it can do and its plans.
#[derive(Debug, Clone)]
struct BtlInfo {
    caps: Capabilities,
    plans: Plans,
}

/// The point-to-point engine of one rank. See the crate documentation.
#[derive(Debug)]
pub struct Pml {
    me: Rank,
    nprocs: u32,
    cfg: PmlConfig,
    btls: Vec<BtlInfo>,
    peers: Peers,
    reqs: Slab,
    matching: Matching,
    /// Messages matched by [`Pml::improbe`], waiting for [`Pml::mrecv`].
    claimed: std::collections::HashMap<u64, matching::Unexpected>,
    next_claim: u64,
    actions: VecDeque<Action>,
    /// The blocking receive waiting in place of a request, if any
    /// ([`Pml::post_recv_direct`]).
    direct: Option<recv::Direct>,
    /// The first failed device copy of each streamed receive that had one
    /// (`rndv/staged.rs`), until the receive ends with it.
    copy_faults: std::collections::HashMap<u64, PmlError>,
    /// The btl registrations of rendezvous sends (`rndv/get`), by send
    /// token, until the rendezvous ends (`Action::Deregister`).
    registered: std::collections::HashMap<u64, (usize, gmpi_btl::MemDesc)>,
}

impl Pml {
    /// The pml of rank `me` in a job of `nprocs` ranks.
    pub fn new(me: Rank, nprocs: u32, cfg: PmlConfig) -> Self {
        Self {
            me,
            nprocs,
            cfg,
            btls: Vec::new(),
            peers: Peers::new(nprocs),
            reqs: Slab::default(),
            matching: Matching::new(),
            claimed: std::collections::HashMap::new(),
            next_claim: 0,
            actions: VecDeque::new(),
            direct: None,
            copy_faults: std::collections::HashMap::new(),
            registered: std::collections::HashMap::new(),
        }
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.me
    }

    /// Register a btl and the peers it reaches. For each peer the btls with
    /// the highest exclusivity win; several of equal exclusivity share the
    /// traffic round-robin. Its plan tables are built now
    /// (`GMPI_LOG=pml=debug` prints them).
    pub fn add_btl(&mut self, caps: Capabilities, reaches: &dyn Fn(Rank) -> bool) -> BtlId {
        let id = self.btls.len();
        let plans = Plans::build(&caps, &self.cfg);
        if tracing::enabled!(target: LOG, tracing::Level::DEBUG) {
            for row in &plans.tables {
                for t in row {
                    tracing::debug!(target: LOG, "{} plans: {}", caps.name, t.describe());
                }
            }
        }
        let excl = caps.exclusivity;
        let btls = &self.btls;
        self.peers
            .add_route(id, excl, reaches, &|b| btls[b].caps.exclusivity);
        self.btls.push(BtlInfo { caps, plans });
        let btls = &self.btls;
        self.peers.set_inline(&|b| {
            btls[b]
                .plans
                .table(MemKind::Host, SendMode::Standard)
                .eager_upto()
        });
        id
    }

    /// The first btl chosen for `peer`, if any.
    pub fn route(&self, peer: Rank) -> Option<BtlId> {
        self.peers.route(peer)
    }

    /// The plan of a message to `peer` (for diagnostics and tests): the
    /// cached table of the peer's first route.
    pub fn plan_for(&self, peer: Rank, len: usize, kind: MemKind, mode: SendMode) -> Option<Plan> {
        let b = self.route(peer)?;
        Some(self.btls[b].plans.table(kind, mode).plan(len))
    }

    /// The protocol a message to `peer` would start with.
    pub fn protocol_for(
        &self,
        peer: Rank,
        len: usize,
        kind: MemKind,
        mode: SendMode,
    ) -> Option<Protocol> {
        self.plan_for(peer, len, kind, mode).map(|p| p.protocol)
    }

    /// The plan of a message of `buf` on `btl`.
    #[inline]
    fn plan(&self, btl: BtlId, buf: &Buf, mode: SendMode) -> Plan {
        self.btls[btl].plans.table(buf.kind, mode).plan(buf.len)
    }

    /// The next action for the driver: refused ones first while a retry
    /// round is on ([`Pml::retry_refused`]). Actions for a peer whose
    /// transport refused an earlier one wait behind it (see `peer.rs`).
    #[inline]
    pub fn poll_action(&mut self) -> Option<Action> {
        if let Some(a) = self.peers.next_retry() {
            return Some(a);
        }
        while let Some(a) = self.actions.pop_front() {
            match a.peer() {
                Some(p) if self.peers.blocked(p) => self.peers.push_pending(p, a),
                _ => return Some(a),
            }
        }
        None
    }

    /// Whether actions are waiting to be polled.
    #[inline]
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// Whether refused actions wait for a retry.
    #[inline]
    pub fn has_refused(&self) -> bool {
        self.peers.any_pending()
    }

    /// The driver could not execute `a`, the last action
    /// [`Pml::poll_action`] gave it, for `peer`, now (its btl answered
    /// `NoResource`): it waits, with every later action for that peer,
    /// until [`Pml::retry_refused`].
    pub fn handle_refused(&mut self, peer: Rank, a: Action) {
        self.peers.refused(peer, a);
    }

    /// Start a retry round: [`Pml::poll_action`] hands out each blocked
    /// peer's refused actions again, oldest first and ahead of newer
    /// actions, until one is refused. The driver calls it on every progress
    /// pass; it costs one refusal per blocked peer, however many actions
    /// wait, and allocates nothing once the lists have grown.
    pub fn retry_refused(&mut self) {
        if !self.peers.any_pending() {
            return;
        }
        self.peers.start_retry();
    }

    /// Requests not yet completed and taken.
    pub fn outstanding(&self) -> usize {
        self.reqs.len()
    }

    /// Sends still in flight (what `MPI_Finalize` waits for: receives
    /// posted and never matched, which MPI leaves to the program, must not
    /// keep a rank from finalizing).
    pub fn sends_in_flight(&self) -> usize {
        self.reqs
            .iter()
            .filter(|(_, r)| matches!(r, request::Req::Send(_)))
            .count()
    }

    /// Whether the request with token `token` (an action's) is still in
    /// flight: the driver drops staging work for one that has ended.
    #[inline]
    pub fn in_flight(&self, token: u64) -> bool {
        self.reqs.in_flight(ReqId(token))
    }

    /// Whether a request has completed (without taking it).
    #[inline]
    pub fn is_complete(&self, id: ReqId) -> bool {
        self.reqs.result(id).is_some()
    }

    /// A completed request's outcome, left in place (a later [`Pml::test`]
    /// takes it); `None` while it is in flight.
    #[inline]
    pub fn peek(&self, id: ReqId) -> Option<Result<Status, PmlError>> {
        self.reqs.result(id).cloned()
    }

    /// Take a completed request's outcome; `None` while it is in flight.
    /// Sends report a default status.
    #[inline]
    pub fn test(&mut self, id: ReqId) -> Option<Result<Status, PmlError>> {
        self.reqs.take(id)
    }

    /// Forget a request: its outcome is discarded when it completes.
    pub fn free(&mut self, id: ReqId) {
        self.reqs.detach(id);
    }

    /// Queue a send of `hdr` + `payload` on `btl` to `peer`.
    fn push_send(&mut self, btl: BtlId, peer: Rank, hdr: wire::Hdr, payload: Payload, token: u64) {
        self.actions.push_back(Action::Send {
            btl,
            peer,
            header: hdr.encode(),
            payload,
            token,
        });
    }

    /// A peer failed: every request that depends on it fails, and what waits
    /// for it is dropped.
    pub fn handle_peer_failed(&mut self, peer: Rank) {
        if !self.peers.fail(peer) {
            return;
        }
        tracing::debug!(target: LOG, "rank {peer} failed");
        let mut exports = Vec::new();
        let mut regs = Vec::new();
        let victims: Vec<ReqId> = self
            .reqs
            .iter()
            .filter(|(id, r)| match r {
                request::Req::Send(s) if s.peer == peer => {
                    if Self::holds_export(s) {
                        exports.push(id.0);
                    }
                    regs.push(id.0);
                    true
                }
                request::Req::Send(_) => false,
                request::Req::Recv(r) => r.depends_on() == Some(peer),
            })
            .map(|(id, _)| id)
            .collect();
        self.matching.unpost_all(
            &victims
                .iter()
                .copied()
                .collect::<std::collections::HashSet<_>>(),
        );
        for id in victims {
            self.copy_faults.remove(&id.0);
            self.reqs.complete(id, Err(PmlError::PeerFailed(peer)));
        }
        if let Some(d) = self.direct.as_mut() {
            if d.end.is_none() && d.src_world == Some(peer) {
                d.end = Some(DirectEnd::Done(Err(PmlError::PeerFailed(peer))));
            }
        }
        self.matching.drop_peer(peer);
        self.actions.retain(|a| a.peer() != Some(peer));
        self.peers.drop_pending(peer);
        for token in exports {
            self.release_export(token);
        }
        for token in regs {
            self.release_registration(token);
        }
        self.actions.push_back(Action::ForgetPeer { peer });
    }

    /// Whether `peer` has failed.
    pub fn peer_failed(&self, peer: Rank) -> bool {
        self.peers.failed(peer)
    }

    /// The protocol configuration.
    pub fn config(&self) -> &PmlConfig {
        &self.cfg
    }
}
