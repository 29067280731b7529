//! The receiver's side: posting receives (and the direct slot of a blocking
//! receive), the arrival of fragments ([`Pml::handle_frag`]: MATCH and RNDV
//! in sequence order, the control fragments handed to their protocol), the
//! delivery of eager data, and cancel.
//!
//! Trace of an eager receive: [`Pml::handle_frag`] (inlined fast path:
//! the next MATCH in order) → matched against the direct slot or the posted
//! queue → the payload written into the buffer through [`HostWrite`] (or,
//! for device memory, an `Action::CopyIn`) → complete; unmatched, it waits
//! in the unexpected queue for [`Pml::post_recv`]. A RNDV is matched the
//! same way and goes on in `rndv/`.

use gmpi_btl::Rank;

use crate::matching::{self, RndvBody, Unexpected, UnexpectedBody};
use crate::memory::HostWrite;
use crate::request::{self, RecvReq, RecvState, Req};
use crate::rndv::Frag;
use crate::wire::{Hdr, MatchHdr, F_SYNC};
use crate::{BtlId, Buf, Payload, Pml, PmlError, ReqId, Status, Violation};

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
    /// ([`gmpi_btl::Pull::Alone`]).
    pub consumed: bool,
}

/// A blocking receive posted by [`Pml::post_recv_direct`]: first in matching
/// order (posted while no other receive was), held here instead of in a
/// request until its caller takes its end.
#[derive(Debug)]
pub(crate) struct Direct {
    ctx: u32,
    src: Option<u32>,
    pub(crate) src_world: Option<Rank>,
    tag: Option<i32>,
    buf: Buf,
    /// `None` while it waits.
    pub(crate) end: Option<DirectEnd>,
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

/// Write an eager message's payload (as much as fits) into a matched host
/// receive's buffer: its status, and its outcome (truncated when the message
/// is longer than the buffer).
#[inline(always)]
fn write_eager(
    buf: Buf,
    m: &MatchHdr,
    payload: &[u8],
    w: &mut dyn HostWrite,
) -> (Status, Result<Status, PmlError>) {
    let n = payload.len().min(buf.len);
    if n > 0 {
        w.write(buf.addr, &payload[..n]);
    }
    eager_outcome(buf, m, n)
}

/// The status and outcome of an eager message of which `n` bytes landed in
/// `buf`.
#[inline(always)]
fn eager_outcome(buf: Buf, m: &MatchHdr, n: usize) -> (Status, Result<Status, PmlError>) {
    let st = eager_status(m, n);
    (st, request::outcome(st, m.len, buf.len))
}

/// The status of an eager message of which `n` bytes landed.
#[inline(always)]
fn eager_status(m: &MatchHdr, n: usize) -> Status {
    Status {
        source: m.src,
        tag: m.tag,
        len: n as u64,
        cancelled: false,
    }
}

impl Pml {
    /// Post a receive. If an unexpected message matches, it is delivered (or
    /// its rendezvous started) at once, writing through `w`.
    pub fn post_recv(&mut self, a: RecvArgs, w: &mut dyn HostWrite) -> Result<ReqId, PmlError> {
        if let Some(p) = a.src_world {
            if self.peers.failed(p) {
                return Err(PmlError::PeerFailed(p));
            }
        }
        let id = self
            .reqs
            .insert(Req::Recv(RecvReq::posted(a.src_world, a.buf, a.consumed)));
        if let Some(u) = self.matching.take_unexpected(a.ctx, a.src, a.tag) {
            self.deliver(id, u, w);
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
        w: &mut dyn HostWrite,
    ) -> Result<Posted, PmlError> {
        if self.direct.is_some()
            || !a.buf.kind.is_host()
            || !self.matching.nothing_posted()
            || !self.matching.nothing_unexpected()
        {
            return self.post_recv(a, w).map(Posted::Req);
        }
        if let Some(p) = a.src_world {
            if self.peers.failed(p) {
                return Err(PmlError::PeerFailed(p));
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
    fn promote_direct(&mut self) -> Option<ReqId> {
        let d = self.direct.as_mut()?;
        let id = self
            .reqs
            .insert(Req::Recv(RecvReq::posted(d.src_world, d.buf, false)));
        d.end = Some(DirectEnd::Promoted(id));
        Some(id)
    }

    /// Cancel a receive that has not been matched yet. Returns whether it was
    /// cancelled; it then completes with `Status::cancelled` set.
    pub fn cancel(&mut self, id: ReqId) -> bool {
        let Some(r) = self.reqs.recv_mut(id) else {
            return false;
        };
        if !matches!(r.state, RecvState::AwaitMatch { .. }) {
            return false;
        }
        self.matching.unpost(id);
        let st = Status {
            cancelled: true,
            ..Status::default()
        };
        self.reqs.complete(id, Ok(st));
        true
    }

    /// A fragment arrived from `peer` on `btl`. An eager payload for a
    /// matched host receive is written through `w` (the pml's one
    /// callback); everything else becomes state and actions.
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
        w: &mut dyn HostWrite,
    ) -> Result<(), PmlError> {
        if peer < self.nprocs {
            if let Some((flags, m, off)) = Hdr::decode_match(data) {
                if m.seq == self.peers.expected_seq(peer) {
                    self.incoming_match(btl, peer, flags, m, &data[off..], w)?;
                    return self.unstash(peer, w);
                }
            }
        }
        self.handle_frag_general(btl, peer, data, w)
    }

    /// [`Pml::handle_frag`] of any fragment.
    #[inline(never)]
    fn handle_frag_general(
        &mut self,
        btl: BtlId,
        peer: Rank,
        data: &[u8],
        w: &mut dyn HostWrite,
    ) -> Result<(), PmlError> {
        if peer >= self.nprocs {
            return Err(PmlError::peer(peer, Violation::UnknownRank(peer)));
        }
        let (hdr, off) = Hdr::decode(data).map_err(|e| PmlError::peer(peer, e))?;
        match hdr {
            Hdr::Match { m, .. } | Hdr::Rndv { m, .. } | Hdr::RndvIpc { m, .. } => {
                let expected = self.peers.expected_seq(peer);
                if m.seq != expected {
                    if m.seq.wrapping_sub(expected) > u32::MAX / 2 {
                        return Err(PmlError::peer(
                            peer,
                            Violation::Replayed {
                                seq: m.seq,
                                expected,
                            },
                        ));
                    }
                    self.matching.stash(peer, m.seq, btl, data.to_vec());
                    return Ok(());
                }
                self.incoming(btl, peer, hdr, &data[off..], w)?;
                self.unstash(peer, w)
            }
            Hdr::Ack { sreq } => self.handle_ack(peer, sreq),
            Hdr::Fin { sreq } => self.handle_fin(peer, sreq),
            Hdr::Cts {
                sreq,
                rreq,
                want,
                pull,
            } => self.handle_cts(peer, sreq, rreq, want, pull),
            Hdr::Chunk {
                rreq,
                offset,
                len,
                desc,
            } => self.handle_chunk(peer, rreq, offset, len, desc),
            Hdr::ChunkAck { sreq, offset } => self.handle_chunk_ack(peer, sreq, offset),
            Hdr::Frag { rreq, offset } => {
                self.handle_frag_payload(peer, Frag { rreq, offset }, &data[off..], w)
            }
        }
    }

    /// Process the stashed fragments from `peer` that are now in order.
    ///
    /// Runs after every in-order fragment; the stash is almost always empty
    /// (it holds only fragments that overtook others on another btl), so
    /// the test is inlined and the walk is not.
    #[inline]
    fn unstash(&mut self, peer: Rank, w: &mut dyn HostWrite) -> Result<(), PmlError> {
        if !self.matching.has_stashed() {
            return Ok(());
        }
        self.unstash_in_order(peer, w)
    }

    #[inline(never)]
    fn unstash_in_order(&mut self, peer: Rank, w: &mut dyn HostWrite) -> Result<(), PmlError> {
        while let Some((b, d)) = self.matching.unstash(peer, self.peers.expected_seq(peer)) {
            let (h, o) = Hdr::decode(&d).map_err(|e| PmlError::peer(peer, e))?;
            self.incoming(b, peer, h, &d[o..], w)?;
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
        w: &mut dyn HostWrite,
    ) -> Result<(), PmlError> {
        self.peers.advance_seq(peer);
        if payload.len() as u64 != m.len {
            return Err(PmlError::peer(
                peer,
                Violation::EagerLength {
                    said: m.len,
                    got: payload.len(),
                },
            ));
        }
        if self.direct_accepts(&m) {
            self.deliver_direct(peer, btl, m, flags, payload, w);
        } else if let Some(id) = self.matching.match_posted(m.ctx, m.src, m.tag) {
            self.deliver_eager(id, peer, btl, m, flags, payload, w);
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

    /// An in-order MATCH, RNDV or RNDV_IPC.
    fn incoming(
        &mut self,
        btl: BtlId,
        peer: Rank,
        hdr: Hdr,
        payload: &[u8],
        w: &mut dyn HostWrite,
    ) -> Result<(), PmlError> {
        let (m, flags, body) = match hdr {
            Hdr::Match { flags, m } => {
                return self.incoming_match(btl, peer, flags, m, payload, w);
            }
            Hdr::Rndv { flags, m, desc } => {
                let body = desc.map_or(RndvBody::Stream, RndvBody::Get);
                (m, flags, UnexpectedBody::Rndv(body))
            }
            Hdr::RndvIpc { flags, m } => {
                // `Hdr::decode` checked the length.
                let d = gmpi_mem::IpcDesc::decode(payload).ok_or(PmlError::peer(
                    peer,
                    crate::WireError::Length {
                        what: "RNDV_IPC",
                        got: payload.len(),
                        expected: gmpi_mem::IpcDesc::WIRE_LEN,
                    },
                ))?;
                if d.len != m.len {
                    return Err(PmlError::peer(
                        peer,
                        Violation::IpcLength {
                            exposed: d.len,
                            len: m.len,
                        },
                    ));
                }
                (m, flags, UnexpectedBody::Rndv(RndvBody::Ipc(d)))
            }
            // The caller only hands over the three that carry an envelope.
            Hdr::Ack { .. }
            | Hdr::Cts { .. }
            | Hdr::Frag { .. }
            | Hdr::Fin { .. }
            | Hdr::Chunk { .. }
            | Hdr::ChunkAck { .. } => {
                return Ok(());
            }
        };
        self.peers.advance_seq(peer);
        let u = Unexpected {
            peer,
            btl,
            m,
            flags,
            body,
        };
        if self.direct_accepts(&u.m) {
            if let Some(id) = self.promote_direct() {
                self.deliver(id, u, w);
            }
        } else if let Some(id) = self.matching.match_posted(u.m.ctx, u.m.src, u.m.tag) {
            self.deliver(id, u, w);
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
        w: &mut dyn HostWrite,
    ) {
        let Some(d) = self.direct.as_mut() else {
            return;
        };
        let (_, res) = write_eager(d.buf, &m, payload, w);
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

    /// An eager message matched receive `id`: host memory is written now;
    /// device memory is copied in by the driver (`Action::CopyIn`) and the
    /// receive ends when it answers ([`Pml::deliver_eager_device`]).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn deliver_eager(
        &mut self,
        id: ReqId,
        peer: Rank,
        btl: BtlId,
        m: MatchHdr,
        flags: u8,
        payload: &[u8],
        w: &mut dyn HostWrite,
    ) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let buf = r.buf;
        if !buf.kind.is_host() {
            return self.deliver_eager_device(id, peer, btl, m, flags, payload);
        }
        let (_, res) = write_eager(buf, &m, payload, w);
        self.ack_if_sync(btl, peer, flags, &m);
        self.reqs.complete(id, res);
    }

    /// [`Pml::deliver_eager`] into device memory.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn deliver_eager_device(
        &mut self,
        id: ReqId,
        peer: Rank,
        btl: BtlId,
        m: MatchHdr,
        flags: u8,
        payload: &[u8],
    ) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let buf = r.buf;
        let n = payload.len().min(buf.len);
        if n == 0 {
            let (_, outcome) = eager_outcome(buf, &m, n);
            self.ack_if_sync(btl, peer, flags, &m);
            self.reqs.complete(id, outcome);
            return;
        }
        r.state = RecvState::AwaitCopy {
            status: eager_status(&m, n),
            msg_len: m.len,
        };
        self.ack_if_sync(btl, peer, flags, &m);
        self.actions.push_back(crate::Action::CopyIn {
            dst: buf.addr,
            dst_kind: buf.kind,
            data: payload[..n].to_vec(),
            token: id.0,
            overlap: false,
        });
    }

    /// Deliver a matched message (eager or rendezvous) to receive `id`.
    pub(crate) fn deliver(&mut self, id: ReqId, u: Unexpected, w: &mut dyn HostWrite) {
        match u.body {
            UnexpectedBody::Eager(data) => {
                self.deliver_eager(id, u.peer, u.btl, u.m, u.flags, &data, w)
            }
            UnexpectedBody::Rndv(body) => self.start_rndv_recv(id, u.peer, u.btl, &u.m, body),
        }
    }
}
