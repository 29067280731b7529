//! Requests: the slab that owns them, and the states of sends and receives.
//!
//! A [`ReqId`] packs a slot index (low 32 bits) and the slot's generation
//! (high 32 bits), so an id that outlived its request never aliases a new one,
//! and an id echoed by a peer (in ACK, CTS, FIN, FRAG) is checked, not trusted.
//!
//! Each state is named for what the request waits on and holds only what
//! that wait needs; a finished request has no state at all (its outcome sits
//! in the slab until taken).

use gmpi_btl::Rank;

use crate::protocol::Plan;
use crate::wire::MatchHdr;
use crate::{BtlId, Buf, PmlError, ReqId, Status};

/// What a send waits on.
// Every state is named for what it waits on (as rustls names its states
// `Expect…`), so the shared prefix is the point.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendState {
    /// Eager: the btl to take the fragment.
    AwaitTaken,
    /// Eager-synchronous: the btl to take the fragment and the receiver's
    /// ACK, in either order.
    AwaitTakenAndAck { taken: bool, acked: bool },
    /// Rendezvous: the driver's set-up (registration or IPC export) of the
    /// buffer; the request-to-send with envelope `m` goes out when it
    /// answers.
    AwaitSetup { m: MatchHdr, sync: bool },
    /// Rendezvous: the receiver's FIN (it pulled the data) or CTS (stream
    /// it).
    AwaitReply,
    /// Streaming after a CTS: the btl to take `left` more fragments.
    AwaitStreamed { left: u32 },
    /// Staging device memory after a CTS (`rndv/staged`): chunks of `chunk`
    /// bytes of the first `want` are staged from `next` on, `inflight` of
    /// them are staged and not yet done, `acked` bytes are done; `rreq` is
    /// the receiver's request. `pull`: the receiver gets each chunk and
    /// acknowledges it; else each is sent in FRAGs of `frag` bytes and is
    /// done when the btl has taken them (`frags` of the oldest chunk so
    /// far: they are taken in order).
    AwaitChunks {
        rreq: u64,
        want: u64,
        chunk: u64,
        next: u64,
        acked: u64,
        inflight: u32,
        pull: bool,
        frag: u64,
        frags: u64,
        /// Pulled: the chunks after the first `acked` bytes already
        /// acknowledged (bit i: chunk `acked / chunk + i`), so a duplicate
        /// or unoffered acknowledgement is refused.
        mask: u64,
    },
}

/// A send request.
#[derive(Debug)]
pub(crate) struct SendReq {
    pub peer: Rank,
    pub btl: BtlId,
    pub buf: Buf,
    /// How it travels ([`crate::protocol::select`]).
    pub plan: Plan,
    pub state: SendState,
}

/// A matched rendezvous, as its receive knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Matched {
    /// The sender, the btl its request-to-send came on, and its request.
    pub peer: Rank,
    pub btl: BtlId,
    pub sreq: u64,
    /// Bytes to move: the message, cut to the buffer.
    pub want: u64,
    /// The whole message's length (longer than `want`: truncated).
    pub msg_len: u64,
    /// What the receive reports.
    pub status: Status,
    /// The sender's data is device memory (a CUDA IPC rendezvous): a
    /// fallback to streaming is staged on its side (`rndv/staged`).
    pub from_device: bool,
}

/// What a receive waits on (named as [`SendState`]'s are). Plain data, no
/// destructor: a request's state is written on every message, and dropped
/// on every completion. (A failed device copy's error waits beside it, in
/// the pml's `copy_faults`.)
#[allow(clippy::enum_variant_names)]
#[derive(Debug)]
pub(crate) enum RecvState {
    /// A matching message. `src_world` is the sender's world rank when the
    /// source is named (its failure fails this receive); `consumed`: see
    /// [`crate::RecvArgs::consumed`].
    AwaitMatch {
        src_world: Option<Rank>,
        consumed: bool,
    },
    /// A matched rendezvous: the pull (a get or a CUDA IPC copy) to land.
    AwaitPull { m: Matched },
    /// A matched rendezvous after its CTS: `m.want - got` more bytes of
    /// fragments (or pulled chunks), and the `copies` of fragments into
    /// device memory (or pulls of staged chunks) still in flight;
    /// `faulted`: a copy failed.
    AwaitFrags {
        m: Matched,
        got: u64,
        copies: u32,
        faulted: bool,
    },
    /// A matched rendezvous offering a get of host memory, into device
    /// memory the transport cannot write (`rndv/staged` pulled by the
    /// receiver): chunks from `next` on are still to get, `inflight` are
    /// being got and copied in, `got` bytes are in place; `faulted`: a
    /// copy into the device failed; `stream`: a get failed, so once the
    /// pulls in flight have ended the sender is asked to stream instead.
    AwaitPulls {
        m: Matched,
        desc: gmpi_btl::MemDesc,
        next: u64,
        got: u64,
        inflight: u32,
        faulted: bool,
        stream: bool,
    },
    /// An eager message of `msg_len` bytes into device memory: its copy in;
    /// then the receive ends with `status` (or truncated).
    AwaitCopy { status: Status, msg_len: u64 },
}

/// A receive request.
#[derive(Debug)]
pub(crate) struct RecvReq {
    pub buf: Buf,
    pub state: RecvState,
}

/// How a receive of a `msg_len`-byte message into a buffer of `cap` bytes
/// ends: its status, or `MPI_ERR_TRUNCATE` when the message was longer (only
/// `cap` bytes were written).
#[inline]
pub(crate) fn outcome(status: Status, msg_len: u64, cap: usize) -> Result<Status, PmlError> {
    if msg_len > cap as u64 {
        Err(PmlError::Truncated {
            len: msg_len,
            cap: cap as u64,
        })
    } else {
        Ok(status)
    }
}

impl RecvReq {
    /// A receive into `buf` posted and not matched yet.
    pub fn posted(src_world: Option<Rank>, buf: Buf, consumed: bool) -> Self {
        Self {
            buf,
            state: RecvState::AwaitMatch {
                src_world,
                consumed,
            },
        }
    }

    /// The peer this receive now depends on: the named source while it
    /// waits for a match, the sender once matched; `None` for a wildcard
    /// source or a local copy.
    pub fn depends_on(&self) -> Option<Rank> {
        match &self.state {
            RecvState::AwaitMatch { src_world, .. } => *src_world,
            RecvState::AwaitPull { m }
            | RecvState::AwaitFrags { m, .. }
            | RecvState::AwaitPulls { m, .. } => Some(m.peer),
            RecvState::AwaitCopy { .. } => None,
        }
    }
}

/// A request of either kind.
#[derive(Debug)]
pub(crate) enum Req {
    Send(SendReq),
    Recv(RecvReq),
}

#[derive(Debug)]
struct Slot {
    gen: u32,
    req: Option<Req>,
    result: Option<Result<Status, PmlError>>,
    detached: bool,
}

/// Owns every live request.
#[derive(Debug, Default)]
pub(crate) struct Slab {
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
}

impl Slab {
    #[inline]
    fn split(id: ReqId) -> (usize, u32) {
        ((id.0 & 0xffff_ffff) as usize, (id.0 >> 32) as u32)
    }

    #[inline]
    fn slot(&self, id: ReqId) -> Option<&Slot> {
        let (i, g) = Self::split(id);
        self.slots.get(i).filter(|s| s.gen == g && s.req.is_some())
    }

    #[inline]
    fn slot_mut(&mut self, id: ReqId) -> Option<&mut Slot> {
        let (i, g) = Self::split(id);
        self.slots
            .get_mut(i)
            .filter(|s| s.gen == g && s.req.is_some())
    }

    #[inline]
    pub fn insert(&mut self, req: Req) -> ReqId {
        self.live += 1;
        if let Some(i) = self.free.pop() {
            let s = &mut self.slots[i as usize];
            // A free slot holds neither request nor outcome (`release`), so
            // the outcome is not written (its drop code would run).
            debug_assert!(s.req.is_none() && s.result.is_none());
            s.req = Some(req);
            s.detached = false;
            return ReqId((u64::from(s.gen) << 32) | u64::from(i));
        }
        let i = self.slots.len() as u32;
        // Generation starts at 1 so that no id is ever 0 (0 means "no token").
        self.slots.push(Slot {
            gen: 1,
            req: Some(req),
            result: None,
            detached: false,
        });
        ReqId((1u64 << 32) | u64::from(i))
    }

    pub fn len(&self) -> usize {
        self.live
    }

    /// Slots [`Slab::iter`] walks (the most requests ever live at once).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    pub fn get_mut(&mut self, id: ReqId) -> Option<&mut Req> {
        self.slot_mut(id)
            .filter(|s| s.result.is_none())
            .and_then(|s| s.req.as_mut())
    }

    /// The send request `id`, if it is one and in flight.
    #[inline]
    pub fn send_mut(&mut self, id: ReqId) -> Option<&mut SendReq> {
        match self.get_mut(id) {
            Some(Req::Send(s)) => Some(s),
            _ => None,
        }
    }

    /// The receive request `id`, if it is one and in flight.
    #[inline]
    pub fn recv_mut(&mut self, id: ReqId) -> Option<&mut RecvReq> {
        match self.get_mut(id) {
            Some(Req::Recv(r)) => Some(r),
            _ => None,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (ReqId, &Req)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let r = s.req.as_ref()?;
            s.result
                .is_none()
                .then_some((ReqId((u64::from(s.gen) << 32) | i as u64), r))
        })
    }

    /// Free slot `id`'s index, whose outcome is already taken (or never
    /// came).
    #[inline]
    fn release(&mut self, id: ReqId) {
        let (i, _) = Self::split(id);
        let s = &mut self.slots[i];
        debug_assert!(s.result.is_none());
        s.req = None;
        s.gen = s.gen.wrapping_add(1).max(1);
        self.free.push(i as u32);
        self.live -= 1;
    }

    #[inline]
    pub fn complete(&mut self, id: ReqId, res: Result<Status, PmlError>) {
        let Some(s) = self.slot_mut(id) else { return };
        if s.result.is_some() {
            return;
        }
        if s.detached {
            self.release(id);
        } else {
            // `None` was there (checked above): forget it, no drop code.
            std::mem::forget(s.result.replace(res));
        }
    }

    /// Whether `id` is a request still in flight (not completed, not
    /// released).
    #[inline]
    pub fn in_flight(&self, id: ReqId) -> bool {
        self.slot(id).is_some_and(|s| s.result.is_none())
    }

    #[inline]
    pub fn result(&self, id: ReqId) -> Option<&Result<Status, PmlError>> {
        self.slot(id).and_then(|s| s.result.as_ref())
    }

    #[inline]
    pub fn take(&mut self, id: ReqId) -> Option<Result<Status, PmlError>> {
        let s = self.slot_mut(id)?;
        let r = s.result.take()?;
        self.release(id);
        Some(r)
    }

    pub fn detach(&mut self, id: ReqId) {
        let Some(s) = self.slot_mut(id) else { return };
        if s.result.take().is_some() {
            self.release(id);
        } else {
            s.detached = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv() -> Req {
        Req::Recv(RecvReq::posted(None, Buf::default(), false))
    }

    #[test]
    fn a_stale_id_never_reaches_the_slot_s_next_request() {
        let mut s = Slab::default();
        let a = s.insert(recv());
        assert_ne!(a.0, 0, "no id is 0 (0 means no token)");
        s.complete(a, Ok(Status::default()));
        assert!(
            s.recv_mut(a).is_none(),
            "a completed request takes no input"
        );
        assert_eq!(s.take(a), Some(Ok(Status::default())));
        let b = s.insert(recv());
        assert_eq!(a.0 & 0xffff_ffff, b.0 & 0xffff_ffff, "the slot is reused");
        assert_ne!(a, b);
        assert!(s.result(a).is_none() && s.take(a).is_none());
        assert!(s.recv_mut(b).is_some() && s.send_mut(b).is_none());
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_detached_request_is_released_when_it_completes() {
        let mut s = Slab::default();
        let a = s.insert(recv());
        s.detach(a);
        assert_eq!(s.len(), 1, "still in flight");
        s.complete(a, Err(PmlError::PeerFailed(1)));
        assert_eq!(s.len(), 0);
        assert!(s.take(a).is_none());
        let b = s.insert(recv());
        s.complete(b, Ok(Status::default()));
        s.complete(b, Err(PmlError::PeerFailed(1)));
        assert_eq!(
            s.take(b),
            Some(Ok(Status::default())),
            "the first outcome stays"
        );
        let c = s.insert(recv());
        s.complete(c, Ok(Status::default()));
        s.detach(c);
        assert_eq!(s.len(), 0, "detaching a completed request frees it");
    }
}
