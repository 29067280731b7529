//! Requests: the slab that owns them and the states of sends and receives.
//!
//! A [`ReqId`] packs a slot index (low 32 bits) and the slot's generation
//! (high 32 bits), so an id that outlived its request never aliases a new one,
//! and an id echoed by a peer (in ACK, CTS, FIN, FRAG) is checked, not trusted.

use gmpi_btl::Rank;

use crate::{BtlId, Buf, PmlError, ReqId, Status};

/// Where a send stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendState {
    /// Eager fragment submitted; done when the btl has taken it.
    Eager,
    /// Eager-synchronous: done when submitted *and* acknowledged.
    EagerSync { acked: bool },
    /// Request-to-send is out; waiting for FIN (get) or CTS (pipelined).
    AwaitReply,
    /// Streaming fragments after a CTS; done when every one is submitted.
    Streaming,
    /// Finished.
    Done,
}

/// A send request.
#[derive(Debug)]
pub(crate) struct SendReq {
    pub peer: Rank,
    pub btl: BtlId,
    pub buf: Buf,
    pub state: SendState,
    /// Submitted fragments whose completion has not been reported yet.
    pub sends_in_flight: u32,
}

/// Where a receive stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvState {
    /// In the posted queue, unmatched.
    Posted,
    /// Matched a rendezvous; a get is in flight.
    Pulling,
    /// Matched a rendezvous; CTS sent, fragments arriving.
    Streaming,
    /// Finished.
    Done,
}

/// A receive request.
#[derive(Debug)]
pub(crate) struct RecvReq {
    pub src_world: Option<Rank>,
    pub buf: Buf,
    pub state: RecvState,
    pub status: Status,
    /// Bytes to move (min of message length and buffer).
    pub want: u64,
    /// Bytes moved so far (streaming).
    pub got: u64,
    /// Full message length.
    pub msg_len: u64,
    /// Matched sender and its request.
    pub peer: Rank,
    pub sreq: u64,
    pub btl: BtlId,
    /// The sender's data is device memory (a CUDA IPC rendezvous): a
    /// fallback to streaming is staged on its side (`rndv/staged`).
    pub from_device: bool,
    /// Posted as [`crate::RecvArgs::consumed`].
    pub consumed: bool,
}

impl RecvReq {
    /// A receive into `buf` posted and not matched yet.
    pub fn posted(src_world: Option<Rank>, buf: Buf) -> Self {
        Self {
            src_world,
            buf,
            state: RecvState::Posted,
            status: Status::default(),
            want: 0,
            got: 0,
            peer: 0,
            sreq: 0,
            btl: 0,
            msg_len: 0,
            from_device: false,
            consumed: false,
        }
    }

    /// How the log names this receive's streamed rendezvous: `rndv/staged`
    /// where device memory is staged through host buffers on either side,
    /// `rndv/pipelined` for host memory.
    pub fn streamed_name(&self) -> &'static str {
        if self.from_device || !self.buf.kind.is_host() {
            "rndv/staged"
        } else {
            "rndv/pipelined"
        }
    }

    /// Take on the rendezvous `u` matched to this receive: its status, the
    /// sender's identity, and how many bytes to move (the message, cut to
    /// the buffer). Returns that count; the caller sets the state.
    pub fn accept_rndv(&mut self, u: &crate::matching::Unexpected) -> u64 {
        let want = u.m.len.min(self.buf.len as u64);
        self.status = Status {
            source: u.m.src,
            tag: u.m.tag,
            len: want,
            cancelled: false,
        };
        self.peer = u.peer;
        self.sreq = u.m.sreq;
        self.btl = u.btl;
        self.want = want;
        self.got = 0;
        self.msg_len = u.m.len;
        want
    }
}

/// A request of either kind.
#[derive(Debug)]
pub(crate) enum Req {
    Send(SendReq),
    Recv(RecvReq),
}

impl Req {
    pub fn as_send_mut(&mut self) -> &mut SendReq {
        match self {
            Req::Send(s) => s,
            Req::Recv(_) => unreachable!("request is a receive"),
        }
    }
    pub fn as_recv_mut(&mut self) -> &mut RecvReq {
        match self {
            Req::Recv(r) => r,
            Req::Send(_) => unreachable!("request is a send"),
        }
    }
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

    fn slot_mut(&mut self, id: ReqId) -> Option<&mut Slot> {
        let (i, g) = Self::split(id);
        self.slots
            .get_mut(i)
            .filter(|s| s.gen == g && s.req.is_some())
    }

    pub fn insert(&mut self, req: Req) -> ReqId {
        self.live += 1;
        if let Some(i) = self.free.pop() {
            let s = &mut self.slots[i as usize];
            s.req = Some(req);
            s.result = None;
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

    pub fn get_mut(&mut self, id: ReqId) -> Option<&mut Req> {
        self.slot_mut(id)
            .filter(|s| s.result.is_none())
            .and_then(|s| s.req.as_mut())
    }

    pub fn iter(&self) -> impl Iterator<Item = (ReqId, &Req)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let r = s.req.as_ref()?;
            s.result
                .is_none()
                .then_some((ReqId((u64::from(s.gen) << 32) | i as u64), r))
        })
    }

    fn release(&mut self, id: ReqId) {
        let (i, _) = Self::split(id);
        let s = &mut self.slots[i];
        s.req = None;
        s.result = None;
        s.gen = s.gen.wrapping_add(1).max(1);
        self.free.push(i as u32);
        self.live -= 1;
    }

    pub fn complete(&mut self, id: ReqId, res: Result<Status, PmlError>) {
        let Some(s) = self.slot_mut(id) else { return };
        if s.result.is_some() {
            return;
        }
        if s.detached {
            self.release(id);
        } else {
            s.result = Some(res);
        }
    }

    #[inline]
    pub fn result(&self, id: ReqId) -> Option<&Result<Status, PmlError>> {
        self.slot(id).and_then(|s| s.result.as_ref())
    }

    pub fn take(&mut self, id: ReqId) -> Option<Result<Status, PmlError>> {
        let s = self.slot_mut(id)?;
        let r = s.result.take()?;
        self.release(id);
        Some(r)
    }

    pub fn detach(&mut self, id: ReqId) {
        let Some(s) = self.slot_mut(id) else { return };
        if s.result.is_some() {
            self.release(id);
        } else {
            s.detached = true;
        }
    }
}
