//! Matching: posted and unexpected queues, per-peer sequence numbers, and the
//! out-of-order stash.
//!
//! MPI's rules, as implemented here:
//! - An arriving message matches the *first posted* receive (in posting
//!   order) whose context, source and tag accept it (`None` = wildcard).
//! - A newly posted receive matches the *first unexpected* message (in
//!   arrival order) it accepts.
//! - Messages from one sender are processed in the order it sent them: each
//!   MATCH/RNDV carries a per-peer sequence number, and one that arrives early
//!   (over another transport) waits in a stash until the gap is filled.

use std::collections::{BTreeMap, VecDeque};

use gmpi_btl::{MemDesc, Rank};

use crate::header::MatchHdr;
use crate::{BtlId, ReqId};

/// The body of an unexpected message.
#[derive(Debug)]
pub(crate) enum UnexpectedBody {
    /// Eager payload, copied out of the transport.
    Eager(Vec<u8>),
    /// Rendezvous: the data stays with the sender until matched.
    Rndv(Option<MemDesc>),
    /// Rendezvous of device memory by CUDA IPC.
    Ipc(gmpi_gpu::IpcDesc),
}

/// An arrived message no receive was waiting for.
#[derive(Debug)]
pub(crate) struct Unexpected {
    pub peer: Rank,
    pub btl: BtlId,
    pub m: MatchHdr,
    pub flags: u8,
    pub body: UnexpectedBody,
}

#[derive(Debug)]
struct Posted {
    id: ReqId,
    ctx: u32,
    src: Option<u32>,
    tag: Option<i32>,
}

/// Whether a receive for (`ctx`, `src`, `tag`) (`None` = wildcard) accepts a
/// message with envelope (`mctx`, `msrc`, `mtag`).
#[inline]
pub(crate) fn accepts(
    ctx: u32,
    src: Option<u32>,
    tag: Option<i32>,
    (mctx, msrc, mtag): (u32, u32, i32),
) -> bool {
    ctx == mctx && src.is_none_or(|s| s == msrc) && tag.is_none_or(|t| t == mtag)
}

fn envelope(m: &MatchHdr) -> (u32, u32, i32) {
    (m.ctx, m.src, m.tag)
}

#[derive(Debug)]
pub(crate) struct Matching {
    posted: VecDeque<Posted>,
    unexpected: VecDeque<Unexpected>,
    send_seq: Vec<u32>,
    recv_seq: Vec<u32>,
    stash: BTreeMap<(Rank, u32), (BtlId, Vec<u8>)>,
}

impl Matching {
    pub fn new(nprocs: u32) -> Self {
        Self {
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            send_seq: vec![0; nprocs as usize],
            recv_seq: vec![0; nprocs as usize],
            stash: BTreeMap::new(),
        }
    }

    pub fn next_send_seq(&mut self, peer: Rank) -> u32 {
        let s = &mut self.send_seq[peer as usize];
        let v = *s;
        *s = s.wrapping_add(1);
        v
    }

    pub fn expected_seq(&self, peer: Rank) -> u32 {
        self.recv_seq[peer as usize]
    }

    pub fn advance_seq(&mut self, peer: Rank) {
        let s = &mut self.recv_seq[peer as usize];
        *s = s.wrapping_add(1);
    }

    pub fn stash(&mut self, peer: Rank, seq: u32, btl: BtlId, frag: Vec<u8>) {
        self.stash.insert((peer, seq), (btl, frag));
    }

    /// Whether any fragment waits in the stash (from any peer).
    #[inline]
    pub fn has_stashed(&self) -> bool {
        !self.stash.is_empty()
    }

    /// The stashed fragment that is next in order from `peer`, if it arrived.
    pub fn unstash(&mut self, peer: Rank) -> Option<(BtlId, Vec<u8>)> {
        if self.stash.is_empty() {
            return None;
        }
        self.stash.remove(&(peer, self.recv_seq[peer as usize]))
    }

    /// Whether no receive is posted.
    #[inline]
    pub fn nothing_posted(&self) -> bool {
        self.posted.is_empty()
    }

    /// Whether no unexpected message waits.
    #[inline]
    pub fn nothing_unexpected(&self) -> bool {
        self.unexpected.is_empty()
    }

    pub fn post(&mut self, id: ReqId, ctx: u32, src: Option<u32>, tag: Option<i32>) {
        self.posted.push_back(Posted { id, ctx, src, tag });
    }

    pub fn unpost(&mut self, id: ReqId) {
        self.posted.retain(|p| p.id != id);
    }

    /// The first posted receive accepting this envelope, removed.
    #[inline]
    pub fn match_posted(&mut self, ctx: u32, src: u32, tag: i32) -> Option<ReqId> {
        let ok = |p: &Posted| accepts(p.ctx, p.src, p.tag, (ctx, src, tag));
        // Common case: the oldest posted receive is the one.
        if ok(self.posted.front()?) {
            return self.posted.pop_front().map(|p| p.id);
        }
        let i = self.posted.iter().position(ok)?;
        self.posted.remove(i).map(|p| p.id)
    }

    pub fn push_unexpected(&mut self, u: Unexpected) {
        self.unexpected.push_back(u);
    }

    #[inline]
    pub fn take_unexpected(
        &mut self,
        ctx: u32,
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Option<Unexpected> {
        if self.unexpected.is_empty() {
            return None;
        }
        let i = self
            .unexpected
            .iter()
            .position(|u| accepts(ctx, src, tag, envelope(&u.m)))?;
        self.unexpected.remove(i)
    }

    pub fn peek_unexpected(
        &self,
        ctx: u32,
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Option<&Unexpected> {
        self.unexpected
            .iter()
            .find(|u| accepts(ctx, src, tag, envelope(&u.m)))
    }

    /// Forget what cannot complete any more from a failed peer: stashed
    /// fragments and unexpected rendezvous (their data is gone). Eager data
    /// that already arrived stays receivable.
    pub fn drop_peer(&mut self, peer: Rank) {
        self.stash.retain(|&(p, _), _| p != peer);
        self.unexpected.retain(|u| {
            !(u.peer == peer && matches!(u.body, UnexpectedBody::Rndv(_) | UnexpectedBody::Ipc(_)))
        });
    }
}
