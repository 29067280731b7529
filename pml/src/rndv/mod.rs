//! Rendezvous: what every rendezvous protocol shares.
//!
//! Sender: a large message's plan ([`crate::protocol::select`]) names a
//! rendezvous. Where the plan needs its buffer exposed first (`get`: the
//! btl's registration; `cuda-ipc`: an IPC handle), [`Pml::start_setup`]
//! emits that set-up as an action and the request waits in
//! `AwaitSetup`; the driver's answer (`get.rs`, `cuda_ipc.rs`) sends the
//! request-to-send ([`Pml::send_rts`]) or, if the set-up failed, falls back
//! to the plan's fallback. Then the send waits for FIN (the receiver pulled
//! the data: [`Pml::handle_fin`]) or CTS (stream it: `pipelined.rs`); either
//! ends an IPC export's use (`Action::IpcRelease`, `cuda_ipc.rs`).
//!
//! Receiver: a request-to-send is matched like an eager message
//! (`recv.rs`); [`Pml::start_rndv_recv`] then asks the receiver's half of
//! the plan ([`crate::protocol::receive`]) how to complete it into this
//! buffer, and starts a get (`get.rs`), an IPC copy (`cuda_ipc.rs`) or a
//! stream (`pipelined.rs`). A failed pull falls back to the stream.
//!
//! Ordering: the sequence number is taken when the send is posted, so a
//! set-up in flight never lets a later message overtake; the
//! request-to-send goes out in the set-up's place in the peer's queue.

mod cuda_ipc;
mod get;
mod pipelined;
mod staged;

use gmpi_btl::{MemDesc, Rank};

use crate::action::{Action, Payload};
use crate::matching::RndvBody;
use crate::protocol::{self, Offer, Protocol};
use crate::request::{Matched, RecvState, SendState};
use crate::wire::{Hdr, MatchHdr, F_SYNC};
use crate::{Pml, PmlError, ReqId, Status, Violation, LOG};

pub(crate) use pipelined::Frag;
pub use staged::MAX_DEPTH;

impl Pml {
    /// A rendezvous whose buffer needs `setup` (registration or IPC export)
    /// before its request-to-send: the driver does it and answers.
    pub(crate) fn start_setup(&mut self, id: ReqId, m: MatchHdr, sync: bool, setup: Action) {
        if let Some(s) = self.reqs.send_mut(id) {
            s.state = SendState::AwaitSetup { m, sync };
        }
        self.actions.push_back(setup);
    }

    /// The set-up of send `token` ended: take the request out of
    /// `AwaitSetup`, falling back to its plan's fallback when `ok` is false.
    /// Returns what the request-to-send needs.
    fn end_setup(&mut self, token: u64, ok: bool) -> Option<(ReqId, MatchHdr, bool)> {
        let id = ReqId(token);
        let s = self.reqs.send_mut(id)?;
        let SendState::AwaitSetup { m, sync } = s.state else {
            return None;
        };
        s.state = SendState::AwaitReply;
        if !ok {
            let fb = s.plan.fallback.unwrap_or(Protocol::RndvPipelined);
            tracing::debug!(target: LOG, "send {} B to rank {}: {} not possible, falling back to {}",
                s.buf.len, s.peer, s.plan.protocol.name(), fb.describe(s.buf.kind, None, false));
            s.plan.protocol = fb;
            s.plan.fallback = fb.fallback();
        }
        Some((id, m, sync))
    }

    /// Send the request-to-send of `id`: a RNDV, with the descriptor a
    /// get may read where there is one. See [`Pml::push_rts`] for `after_setup`.
    pub(crate) fn send_rts(
        &mut self,
        id: ReqId,
        m: MatchHdr,
        sync: bool,
        desc: Option<MemDesc>,
        after_setup: bool,
    ) {
        let Some(s) = self.reqs.send_mut(id) else {
            return;
        };
        let (btl, peer) = (s.btl, s.peer);
        let flags = if sync { F_SYNC } else { 0 };
        let hdr = Hdr::Rndv { flags, m, desc };
        self.push_rts(btl, peer, hdr, Payload::None, after_setup);
    }

    /// Queue a request-to-send. When it answers a set-up (`after_setup`), it
    /// goes to the front: everything still queued was emitted after the
    /// set-up, so the front is the set-up's place in its peer's order (and
    /// if earlier actions of that peer wait refused, `poll_action` puts it
    /// behind them).
    pub(crate) fn push_rts(
        &mut self,
        btl: usize,
        peer: Rank,
        hdr: Hdr,
        payload: Payload,
        after_setup: bool,
    ) {
        let a = Action::Send {
            btl,
            peer,
            header: hdr.encode(),
            payload,
            token: 0,
        };
        if after_setup {
            self.actions.push_front(a);
        } else {
            self.actions.push_back(a);
        }
    }

    /// FIN: the receiver has pulled the data of send `sreq`.
    pub(crate) fn handle_fin(&mut self, peer: Rank, sreq: u64) -> Result<(), PmlError> {
        let id = ReqId(sreq);
        let s = self.send_req_of(peer, id, "FIN")?;
        if s.state != SendState::AwaitReply {
            return Err(PmlError::peer(peer, Violation::OutOfPlace { what: "FIN" }));
        }
        if Self::holds_export(s) {
            self.release_export(sreq);
        }
        self.release_registration(sreq);
        self.reqs.complete(id, Ok(Status::default()));
        Ok(())
    }

    /// The request-to-send with envelope `m` from `peer` on `btl`, offering
    /// `body`, matched receive `id`: accept it, then complete it the way the
    /// receiver's half of the plan says.
    pub(crate) fn start_rndv_recv(
        &mut self,
        id: ReqId,
        peer: Rank,
        btl: usize,
        m: &MatchHdr,
        body: RndvBody,
    ) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let consumed = matches!(r.state, RecvState::AwaitMatch { consumed: true, .. });
        let buf = r.buf;
        let want = m.len.min(buf.len as u64);
        let offer = body.offer();
        let matched = Matched {
            peer,
            btl,
            sreq: m.sreq,
            want,
            msg_len: m.len,
            status: Status {
                source: m.src,
                tag: m.tag,
                len: want,
                cancelled: false,
            },
            from_device: offer == Offer::Ipc,
        };
        let caps = &self.btls[btl].caps;
        let how = protocol::receive(offer, buf.kind, caps, &self.cfg);
        let can_get = caps.get && self.cfg.use_get;
        match (how, body) {
            (Protocol::RndvIpc, RndvBody::Ipc(d)) => self.start_ipc_copy(id, matched, d),
            (Protocol::RndvGet, RndvBody::Get(d)) => self.start_get(id, matched, d, consumed),
            // Memory offered for a get (host memory, or GPU memory the
            // sender's NIC registered for GPUDirect), into device memory
            // this transport cannot write: pull it through pinned slots.
            (Protocol::RndvPipelined, RndvBody::Get(d)) if can_get => {
                self.start_staged_pull(id, matched, d)
            }
            _ => self.start_streaming(id, matched),
        }
    }

    /// Complete a rendezvous receive; truncated if the message was longer
    /// than the buffer (only `want` bytes were moved).
    pub(crate) fn finish_rndv_recv(&mut self, id: ReqId, m: &Matched) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let res = crate::request::outcome(m.status, m.msg_len, r.buf.len);
        self.reqs.complete(id, res);
    }

    /// Receive `id` waits for a pull of matched rendezvous `m`: its buffer,
    /// or `None` when there is nothing to pull (the sender is released at
    /// once and the receive completes).
    pub(crate) fn begin_pull(&mut self, id: ReqId, m: Matched) -> Option<crate::Buf> {
        let r = self.reqs.recv_mut(id)?;
        let buf = r.buf;
        r.state = RecvState::AwaitPull { m };
        if m.want == 0 {
            self.handle_get_done(id.0);
            return None;
        }
        Some(buf)
    }

    /// A pull (get or IPC copy) of receive `token` landed: release the
    /// sender (FIN) and complete.
    pub fn handle_get_done(&mut self, token: u64) {
        let id = ReqId(token);
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let RecvState::AwaitPull { m } = r.state else {
            return;
        };
        self.push_send(m.btl, m.peer, Hdr::Fin { sreq: m.sreq }, Payload::None, 0);
        self.finish_rndv_recv(id, &m);
    }

    /// A pull of receive `token` failed: fall back to the stream (the
    /// sender streams from its buffer, whatever the pull was).
    pub fn handle_get_failed(&mut self, token: u64, why: &str) {
        let id = ReqId(token);
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let RecvState::AwaitPull { m } = r.state else {
            return;
        };
        tracing::debug!(target: LOG, "pull from rank {} failed ({why}); falling back to {}",
            m.peer, staged::streamed_name(&m, r.buf.kind));
        self.start_streaming(id, m);
    }
}
