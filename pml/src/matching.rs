//! Matching: posted and unexpected queues, and the out-of-order stash (the
//! per-peer sequence numbers it waits on are in `peer.rs`).
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

use crate::wire::MatchHdr;
use crate::{BtlId, ReqId};

/// The body of an unexpected message.
#[derive(Debug)]
pub(crate) enum UnexpectedBody {
    /// Eager payload, copied out of the transport.
    Eager(Vec<u8>),
    /// Rendezvous: the data stays with the sender until matched.
    Rndv(RndvBody),
}

/// What a request-to-send offers its receiver, with the descriptor it
/// carries ([`crate::protocol::Offer`] without the data).
#[derive(Debug, Clone, Copy)]
pub(crate) enum RndvBody {
    /// RNDV with a memory descriptor the receiver may `get`.
    Get(MemDesc),
    /// RNDV without one: the sender streams on clear-to-send.
    Stream,
    /// RNDV_IPC: device memory by CUDA IPC.
    Ipc(gmpi_mem::IpcDesc),
}

impl RndvBody {
    /// The offer, as the protocol choice sees it.
    pub fn offer(&self) -> crate::protocol::Offer {
        use crate::protocol::Offer;
        match self {
            RndvBody::Get(_) => Offer::Get,
            RndvBody::Stream => Offer::Stream,
            RndvBody::Ipc(_) => Offer::Ipc,
        }
    }
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
    stash: BTreeMap<(Rank, u32), (BtlId, Vec<u8>)>,
}

impl Matching {
    pub fn new() -> Self {
        Self {
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            stash: BTreeMap::new(),
        }
    }

    pub fn stash(&mut self, peer: Rank, seq: u32, btl: BtlId, frag: Vec<u8>) {
        self.stash.insert((peer, seq), (btl, frag));
    }

    /// Whether any fragment waits in the stash (from any peer).
    #[inline]
    pub fn has_stashed(&self) -> bool {
        !self.stash.is_empty()
    }

    /// The stashed fragment from `peer` with sequence number `seq` (the
    /// next in order), if it arrived.
    pub fn unstash(&mut self, peer: Rank, seq: u32) -> Option<(BtlId, Vec<u8>)> {
        if self.stash.is_empty() {
            return None;
        }
        self.stash.remove(&(peer, seq))
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

    /// Withdraw every posted receive in `ids`, in one pass (a failed peer
    /// may take hundreds of thousands with it: one [`Matching::unpost`]
    /// each would be quadratic).
    pub fn unpost_all(&mut self, ids: &std::collections::HashSet<ReqId>) {
        if !ids.is_empty() {
            self.posted.retain(|p| !ids.contains(&p.id));
        }
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
        self.unexpected
            .retain(|u| !(u.peer == peer && matches!(u.body, UnexpectedBody::Rndv(_))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> ReqId {
        ReqId((1 << 32) | n)
    }

    fn msg(peer: Rank, ctx: u32, src: u32, tag: i32, body: UnexpectedBody) -> Unexpected {
        Unexpected {
            peer,
            btl: 0,
            m: MatchHdr {
                ctx,
                src,
                tag,
                seq: 0,
                len: 0,
                sreq: 0,
            },
            flags: 0,
            body,
        }
    }

    fn eager(src: u32, tag: i32) -> Unexpected {
        msg(src, 0, src, tag, UnexpectedBody::Eager(vec![tag as u8]))
    }

    #[test]
    fn unpost_all_withdraws_exactly_the_named_receives_in_order() {
        let mut m = Matching::new();
        for n in 0..10 {
            m.post(id(n), 0, Some((n % 2) as u32), Some(n as i32));
        }
        let gone: std::collections::HashSet<ReqId> = (0..10).step_by(2).map(id).collect();
        m.unpost_all(&gone);
        m.unpost_all(&Default::default());
        let left: Vec<ReqId> = (0..10).filter_map(|n| m.match_posted(0, 1, n)).collect();
        assert_eq!(left, [1, 3, 5, 7, 9].map(id));
        assert!(m.nothing_posted());
    }

    #[test]
    fn accepts_wildcards_but_never_another_context() {
        let env = (3, 1, 7);
        assert!(accepts(3, Some(1), Some(7), env));
        assert!(accepts(3, None, Some(7), env));
        assert!(accepts(3, Some(1), None, env));
        assert!(accepts(3, None, None, env));
        assert!(
            !accepts(4, None, None, env),
            "context ids never match across"
        );
        assert!(!accepts(3, Some(2), None, env));
        assert!(!accepts(3, None, Some(8), env));
    }

    #[test]
    fn an_arrival_matches_the_first_posted_receive_that_accepts_it() {
        let mut m = Matching::new();
        m.post(id(1), 0, Some(1), Some(5));
        m.post(id(2), 0, None, None);
        m.post(id(3), 0, Some(2), None);
        // Rank 2's message skips receive 1 (wrong source) and takes the
        // wildcard posted before the specific one.
        assert_eq!(m.match_posted(0, 2, 9), Some(id(2)));
        assert_eq!(m.match_posted(0, 2, 9), Some(id(3)));
        assert_eq!(m.match_posted(0, 2, 9), None);
        assert_eq!(m.match_posted(1, 1, 5), None, "other context");
        assert_eq!(m.match_posted(0, 1, 5), Some(id(1)));
        assert!(m.nothing_posted());
    }

    #[test]
    fn a_receive_matches_the_first_unexpected_message_it_accepts() {
        let mut m = Matching::new();
        for (src, tag) in [(1, 1), (2, 1), (1, 2), (1, 1)] {
            m.push_unexpected(eager(src, tag));
        }
        let tags_of = |u: Option<Unexpected>| u.map(|u| (u.m.src, u.m.tag));
        assert_eq!(
            tags_of(m.take_unexpected(0, Some(1), Some(2))),
            Some((1, 2))
        );
        assert_eq!(
            m.peek_unexpected(0, None, Some(1))
                .map(|u| (u.m.src, u.m.tag)),
            Some((1, 1)),
            "a probe sees the first and leaves it"
        );
        assert_eq!(tags_of(m.take_unexpected(0, Some(2), None)), Some((2, 1)));
        // Two messages with the same envelope come out in arrival order.
        let a = m.take_unexpected(0, None, None).expect("first");
        let b = m.take_unexpected(0, None, None).expect("second");
        assert_eq!((a.m.tag, b.m.tag), (1, 1));
        assert!(m.nothing_unexpected());
        assert!(m.take_unexpected(0, None, None).is_none());
    }

    #[test]
    fn unposting_removes_only_that_receive() {
        let mut m = Matching::new();
        m.post(id(1), 0, None, None);
        m.post(id(2), 0, None, None);
        m.unpost(id(1));
        assert_eq!(m.match_posted(0, 0, 0), Some(id(2)));
        assert!(m.nothing_posted());
    }

    #[test]
    fn the_stash_gives_back_exactly_the_next_in_order() {
        let mut m = Matching::new();
        assert!(!m.has_stashed());
        m.stash(1, 5, 0, vec![5]);
        m.stash(1, 6, 1, vec![6]);
        m.stash(2, 5, 0, vec![25]);
        assert!(m.has_stashed());
        assert_eq!(m.unstash(1, 4), None, "the gap is not filled yet");
        assert_eq!(m.unstash(1, 5), Some((0, vec![5])));
        assert_eq!(m.unstash(1, 6), Some((1, vec![6])));
        assert_eq!(m.unstash(1, 7), None);
        assert_eq!(m.unstash(2, 5), Some((0, vec![25])));
        assert!(!m.has_stashed());
    }

    #[test]
    fn a_failed_peer_keeps_its_arrived_eager_data_and_loses_the_rest() {
        let mut m = Matching::new();
        m.push_unexpected(eager(1, 0));
        m.push_unexpected(msg(1, 0, 1, 1, UnexpectedBody::Rndv(RndvBody::Stream)));
        m.push_unexpected(eager(2, 0));
        m.stash(1, 9, 0, vec![]);
        m.drop_peer(1);
        assert!(!m.has_stashed());
        assert!(
            m.take_unexpected(0, Some(1), Some(1)).is_none(),
            "its rendezvous is gone"
        );
        assert!(
            m.take_unexpected(0, Some(1), Some(0)).is_some(),
            "its eager data stays"
        );
        assert!(m.take_unexpected(0, Some(2), None).is_some());
    }
}
