//! What the pml keeps per peer: the btls that reach it (routes, striped
//! round-robin), the sequence numbers that keep its messages in order, its
//! failure, and the queue of actions its transport refused.
//!
//! Back-pressure (the lesson of ob1's progress loop): an action the btl
//! refuses ([`crate::Pml::handle_refused`]) waits at the head of its peer's
//! pending queue, and every later action for that peer waits behind it
//! (checked in [`crate::Pml::poll_action`]), so one peer's fragments never
//! reorder. The driver calls [`crate::Pml::retry_refused`] on every
//! progress pass: each blocked peer's actions are then handed out again,
//! oldest first, until one is refused, which ends that peer's turn. A pass
//! costs one refusal per blocked peer, not a move of every waiting action
//! (with 300 000 sends queued behind a full transport, that move made each
//! pass take most of a second). They are never retried only from a
//! completion.

use std::collections::VecDeque;

use gmpi_btl::Rank;

use crate::action::Action;
use crate::BtlId;

/// Per-peer state. Indexed by world rank.
#[derive(Debug)]
pub(crate) struct Peers {
    /// Per peer: the btls of the highest exclusivity that reach it. Messages
    /// are striped round-robin over them (multi-rail); sequence numbers keep
    /// them in order.
    routes: Vec<Vec<BtlId>>,
    rr: Vec<u32>,
    /// Per peer, when exactly one btl reaches it: that btl and the largest
    /// host message it sends eagerly (the inline send path's whole plan,
    /// cached from the btl's plan table).
    inline: Vec<Option<(BtlId, usize)>>,
    send_seq: Vec<u32>,
    recv_seq: Vec<u32>,
    failed: Vec<bool>,
    pending: Vec<VecDeque<Action>>,
    pending_count: usize,
    /// The peers whose pending queue may be non-empty (each once: `listed`).
    blocked_peers: Vec<Rank>,
    listed: Vec<bool>,
    /// The blocked peers whose turn in this retry round has not ended; the
    /// last is the one being retried.
    retrying: Vec<Rank>,
}

impl Peers {
    pub fn new(nprocs: u32) -> Self {
        let n = nprocs as usize;
        Self {
            routes: vec![Vec::new(); n],
            rr: vec![0; n],
            inline: vec![None; n],
            send_seq: vec![0; n],
            recv_seq: vec![0; n],
            failed: vec![false; n],
            pending: (0..n).map(|_| VecDeque::new()).collect(),
            pending_count: 0,
            blocked_peers: Vec::new(),
            listed: vec![false; n],
            retrying: Vec::new(),
        }
    }

    /// Add `btl` (of exclusivity `excl`) as a route to every peer `reaches`
    /// accepts: it replaces routes of lower exclusivity and joins those of
    /// equal. `excl_of` gives an already registered btl's exclusivity.
    pub fn add_route(
        &mut self,
        btl: BtlId,
        excl: u32,
        reaches: &dyn Fn(Rank) -> bool,
        excl_of: &dyn Fn(BtlId) -> u32,
    ) {
        for (p, r) in self.routes.iter_mut().enumerate() {
            if !reaches(p as Rank) {
                continue;
            }
            match r.first().map(|&cur| excl_of(cur)) {
                Some(e) if e > excl => {}
                Some(e) if e == excl => r.push(btl),
                _ => *r = vec![btl],
            }
        }
    }

    /// Recompute the inline cache: `eager_upto(btl)` is the largest host
    /// message that btl's plan sends eagerly.
    pub fn set_inline(&mut self, eager_upto: &dyn Fn(BtlId) -> Option<usize>) {
        for (p, r) in self.routes.iter().enumerate() {
            self.inline[p] = match r.as_slice() {
                [b] => eager_upto(*b).map(|l| (*b, l)),
                _ => None,
            };
        }
    }

    /// The first btl chosen for `peer`, if any.
    pub fn route(&self, peer: Rank) -> Option<BtlId> {
        self.routes
            .get(peer as usize)
            .and_then(|r| r.first().copied())
    }

    /// The btl for the next message to `peer` (round-robin over equals).
    pub fn next_route(&mut self, peer: Rank) -> Option<BtlId> {
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

    /// The inline plan for `peer`: its only btl and eager limit.
    #[inline]
    pub fn inline(&self, peer: Rank) -> Option<(BtlId, usize)> {
        *self.inline.get(peer as usize)?
    }

    /// Take the next sequence number for a message to `peer`.
    #[inline]
    pub fn next_send_seq(&mut self, peer: Rank) -> u32 {
        let s = &mut self.send_seq[peer as usize];
        let v = *s;
        *s = s.wrapping_add(1);
        v
    }

    /// The sequence number the next message from `peer` must carry.
    #[inline]
    pub fn expected_seq(&self, peer: Rank) -> u32 {
        self.recv_seq[peer as usize]
    }

    /// A message from `peer` was processed in order.
    #[inline]
    pub fn advance_seq(&mut self, peer: Rank) {
        let s = &mut self.recv_seq[peer as usize];
        *s = s.wrapping_add(1);
    }

    /// Whether `peer` has failed (unknown ranks have not).
    #[inline]
    pub fn failed(&self, peer: Rank) -> bool {
        self.failed.get(peer as usize).copied().unwrap_or(false)
    }

    /// Mark `peer` failed; `false` if it already was (or is no rank).
    pub fn fail(&mut self, peer: Rank) -> bool {
        match self.failed.get_mut(peer as usize) {
            Some(f) if !*f => {
                *f = true;
                true
            }
            _ => false,
        }
    }

    /// Whether refused actions wait for `peer`.
    #[inline]
    pub fn blocked(&self, peer: Rank) -> bool {
        self.pending_count > 0 && !self.pending[peer as usize].is_empty()
    }

    /// Whether refused actions wait for any peer.
    #[inline]
    pub fn any_pending(&self) -> bool {
        self.pending_count > 0
    }

    /// Queue `a` behind `peer`'s refused actions.
    pub fn push_pending(&mut self, peer: Rank, a: Action) {
        self.pending[peer as usize].push_back(a);
        self.pending_count += 1;
        self.list(peer);
    }

    /// `a`, an action for `peer` just refused, waits ahead of every other
    /// for `peer` (it is the oldest: a newer one reaches the driver only
    /// when none waits), and `peer`'s turn in the retry round ends.
    pub fn refused(&mut self, peer: Rank, a: Action) {
        self.pending[peer as usize].push_front(a);
        self.pending_count += 1;
        self.list(peer);
        if let Some(i) = self.retrying.iter().rposition(|&p| p == peer) {
            self.retrying.remove(i);
        }
    }

    fn list(&mut self, peer: Rank) {
        if !self.listed[peer as usize] {
            self.listed[peer as usize] = true;
            self.blocked_peers.push(peer);
        }
    }

    /// Start a retry round: every blocked peer gets a turn.
    pub fn start_retry(&mut self) {
        let (pending, listed) = (&self.pending, &mut self.listed);
        self.blocked_peers.retain(|&p| {
            let keep = !pending[p as usize].is_empty();
            listed[p as usize] = keep;
            keep
        });
        self.retrying.clear();
        // Lowest rank first (taken from the end).
        self.retrying.extend(self.blocked_peers.iter().rev());
    }

    /// The oldest refused action of the peer whose turn it is, if a retry
    /// round is on.
    #[inline]
    pub fn next_retry(&mut self) -> Option<Action> {
        while let Some(&p) = self.retrying.last() {
            if let Some(a) = self.pending[p as usize].pop_front() {
                self.pending_count -= 1;
                return Some(a);
            }
            self.retrying.pop();
        }
        None
    }

    /// Drop what waits for `peer` (it failed: the requests those actions
    /// served have failed with it).
    pub fn drop_pending(&mut self, peer: Rank) {
        let q = &mut self.pending[peer as usize];
        self.pending_count -= q.len();
        q.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Buf, MemKind};

    fn reg(peer: Rank, token: u64) -> Action {
        Action::Register {
            btl: 0,
            peer,
            buf: Buf {
                addr: 0,
                len: 0,
                kind: MemKind::Host,
            },
            token,
        }
    }

    fn tok(a: &Action) -> u64 {
        match a {
            Action::Register { token, .. } => *token,
            other => panic!("{other:?}"),
        }
    }

    fn token(a: Option<Action>) -> u64 {
        tok(&a.expect("an action"))
    }

    /// A retry round hands out each blocked peer's oldest action first; a
    /// refusal puts it back at the head and ends that peer's turn, however
    /// many actions wait behind it, and the next round starts from it.
    #[test]
    fn a_refusal_ends_the_peer_s_turn_and_keeps_its_order() {
        let mut p = Peers::new(3);
        p.refused(1, reg(1, 100));
        for t in 101..10_000 {
            p.push_pending(1, reg(1, t));
        }
        p.refused(2, reg(2, 200));
        p.push_pending(2, reg(2, 201));
        p.start_retry();
        // Rank 1's turn: its oldest, refused again, ends it.
        let a = p.next_retry().expect("rank 1's oldest");
        assert_eq!(tok(&a), 100);
        p.refused(1, a);
        // Rank 2's turn: both of its actions go.
        assert_eq!(token(p.next_retry()), 200);
        assert_eq!(token(p.next_retry()), 201);
        assert!(p.next_retry().is_none(), "the round is over");
        assert!(p.blocked(1) && !p.blocked(2));
        // The next round: rank 1's actions in order, up to the refusal.
        p.start_retry();
        for t in 100..150 {
            assert_eq!(token(p.next_retry()), t);
        }
        let a = p.next_retry().expect("rank 1's 51st");
        assert_eq!(tok(&a), 150);
        p.refused(1, a);
        assert!(p.next_retry().is_none());
        assert!(p.any_pending());
        p.start_retry();
        assert_eq!(token(p.next_retry()), 150);
        // A peer that fails mid-round: nothing of it is handed out.
        p.drop_pending(1);
        assert!(p.next_retry().is_none());
        assert!(!p.any_pending());
        p.start_retry();
        assert!(p.next_retry().is_none());
    }
}
