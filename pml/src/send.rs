//! The sender's side: posting a send (eager, inline, or the start of a
//! rendezvous), the receiver's ACK of a synchronous eager message, and the
//! completions that end a send.
//!
//! Trace of an eager send: [`Pml::try_inline`] (no request: the driver
//! submits at once) or [`Pml::post_send`] → `Action::Send` of a MATCH with
//! the payload → [`Pml::handle_send_done`] ends it. A rendezvous send starts
//! here too and goes on in `rndv/`.

use gmpi_btl::Rank;

use crate::action::{Action, Payload};
use crate::protocol::{Protocol, SendMode};
use crate::request::{Req, SendReq, SendState};
use crate::wire::{Hdr, HdrBuf, MatchHdr, F_SYNC};
use crate::{BtlId, Buf, Pml, PmlError, ReqId, Status, LOG};

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

impl SendArgs {
    /// The payload: the user's buffer, read by the driver as it submits.
    fn payload(&self) -> Payload {
        Payload::Mem {
            addr: self.buf.addr,
            len: self.buf.len,
            kind: self.buf.kind,
        }
    }
}

impl Pml {
    /// Post a send. Completion is observed with [`Pml::test`].
    pub fn post_send(&mut self, a: SendArgs) -> Result<ReqId, PmlError> {
        let peer = a.dest;
        if peer >= self.nprocs {
            return Err(PmlError::Unreachable(peer));
        }
        if self.peers.failed(peer) {
            return Err(PmlError::PeerFailed(peer));
        }
        let btl = self
            .peers
            .next_route(peer)
            .ok_or(PmlError::Unreachable(peer))?;
        let plan = self.plan(btl, &a.buf, a.mode);
        let seq = self.peers.next_send_seq(peer);
        let state = match plan.protocol {
            Protocol::Eager => SendState::AwaitTaken,
            Protocol::EagerSync => SendState::AwaitTakenAndAck {
                taken: false,
                acked: false,
            },
            Protocol::RndvGet | Protocol::RndvPipelined | Protocol::RndvIpc => {
                SendState::AwaitReply
            }
        };
        let id = self.reqs.insert(Req::Send(SendReq {
            peer,
            btl,
            buf: a.buf,
            plan,
            state,
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
            a.buf.len, a.buf.kind.name(), peer, a.tag, a.ctx, self.btls[btl].caps.name, plan.name);
        let sync = a.mode == SendMode::Synchronous;
        match plan.protocol {
            // A plain eager message is never answered (no ACK, CTS or FIN
            // names it), so it carries no sender request: that lets it go
            // out with the short MATCH header, as inline sends do.
            Protocol::Eager => {
                let m = MatchHdr { sreq: 0, ..m };
                self.push_send(btl, peer, Hdr::Match { flags: 0, m }, a.payload(), id.0);
            }
            Protocol::EagerSync => {
                self.push_send(
                    btl,
                    peer,
                    Hdr::Match { flags: F_SYNC, m },
                    a.payload(),
                    id.0,
                );
            }
            Protocol::RndvPipelined => self.send_rts(id, m, sync, None, false),
            Protocol::RndvGet => self.start_setup(
                id,
                m,
                sync,
                Action::Register {
                    btl,
                    peer,
                    buf: a.buf,
                    token: id.0,
                },
            ),
            Protocol::RndvIpc => self.start_setup(
                id,
                m,
                sync,
                Action::IpcExport {
                    peer,
                    buf: a.buf,
                    token: id.0,
                },
            ),
        }
        Ok(id)
    }

    /// Fast path for a standard-mode eager send (ob1's `sendi`): if its plan
    /// is eager and nothing is queued for the peer, assign its sequence
    /// number and return the btl and the encoded header; the driver submits
    /// header and payload at once and no request exists. `None`: use
    /// [`Pml::post_send`]. If the btl refuses, the driver hands the send back
    /// with [`Pml::inline_refused`], which turns it into a queued request.
    ///
    /// The plan is the one cached per peer from its btl's plan table
    /// (`peer.rs`): this is `protocol::select` for host memory, looked up.
    #[inline]
    pub fn try_inline(&mut self, a: &SendArgs) -> Option<Result<(BtlId, HdrBuf), PmlError>> {
        if a.mode != SendMode::Standard || !self.actions.is_empty() {
            return None;
        }
        let peer = a.dest;
        // Unreachable peers and multi-rail routes take the general path,
        // which reports errors and stripes.
        let (btl, limit) = self.peers.inline(peer)?;
        if a.buf.len > limit || !a.buf.kind.is_host() || self.peers.blocked(peer) {
            return None;
        }
        if self.peers.failed(peer) {
            return Some(Err(PmlError::PeerFailed(peer)));
        }
        tracing::debug!(target: LOG, "send {} B to rank {} tag {} ctx {} via {}: eager (inline)",
            a.buf.len, peer, a.tag, a.ctx, self.btls[btl].caps.name);
        let m = MatchHdr {
            ctx: a.ctx,
            src: a.src,
            tag: a.tag,
            seq: self.peers.next_send_seq(peer),
            len: a.buf.len as u64,
            sreq: 0,
        };
        Some(Ok((btl, Hdr::Match { flags: 0, m }.encode())))
    }

    /// The btl refused an inline send: queue it as an eager request (first in
    /// line for its peer, so order holds) and return the request.
    pub fn inline_refused(&mut self, a: &SendArgs, btl: BtlId, header: HdrBuf) -> ReqId {
        let plan = self.plan(btl, &a.buf, a.mode);
        let id = self.reqs.insert(Req::Send(SendReq {
            peer: a.dest,
            btl,
            buf: a.buf,
            plan,
            state: SendState::AwaitTaken,
        }));
        self.actions.push_front(Action::Send {
            btl,
            peer: a.dest,
            header,
            payload: a.payload(),
            token: id.0,
        });
        id
    }

    /// The btl took (or finished) the send with `token`.
    pub fn handle_send_done(&mut self, token: u64) {
        let id = ReqId(token);
        let Some(s) = self.reqs.send_mut(id) else {
            return;
        };
        let done = match &mut s.state {
            SendState::AwaitTaken => true,
            SendState::AwaitTakenAndAck { taken, acked } => {
                *taken = true;
                *acked
            }
            SendState::AwaitStreamed { left } => {
                *left = left.saturating_sub(1);
                *left == 0
            }
            // A staged send's chunks end by the receiver's acknowledgements
            // (pulled), or as their FRAGs are taken (sent).
            SendState::AwaitChunks { .. } => {
                self.staged_frag_taken(id);
                return;
            }
            SendState::AwaitSetup { .. } | SendState::AwaitReply => false,
        };
        if done {
            self.reqs.complete(id, Ok(Status::default()));
        }
    }

    /// The driver could not send a fragment of send `token` (its payload
    /// could not be read: a device copy failed): the send fails with `err`.
    pub fn handle_send_failed(&mut self, token: u64, err: PmlError) {
        let id = ReqId(token);
        if self.reqs.send_mut(id).is_some() {
            self.reqs.complete(id, Err(err));
        }
    }

    /// The receiver matched a synchronous eager message (ACK).
    pub(crate) fn handle_ack(&mut self, peer: Rank, sreq: u64) -> Result<(), PmlError> {
        let id = ReqId(sreq);
        let s = self.send_req_of(peer, id, "ACK")?;
        let SendState::AwaitTakenAndAck { taken, acked } = &mut s.state else {
            return Err(PmlError::peer(
                peer,
                crate::Violation::OutOfPlace { what: "ACK" },
            ));
        };
        if *acked {
            return Err(PmlError::peer(peer, crate::Violation::Duplicate("ACK")));
        }
        *acked = true;
        if *taken {
            self.reqs.complete(id, Ok(Status::default()));
        }
        Ok(())
    }

    /// The send request a control fragment from `peer` names.
    pub(crate) fn send_req_of(
        &mut self,
        peer: Rank,
        id: ReqId,
        what: &'static str,
    ) -> Result<&mut SendReq, PmlError> {
        match self.reqs.send_mut(id) {
            Some(s) if s.peer == peer => Ok(s),
            _ => Err(PmlError::peer(
                peer,
                crate::Violation::UnknownRequest { what, id: id.0 },
            )),
        }
    }
}
