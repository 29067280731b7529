//! What the pml keeps per peer: the btls that reach it (routes, striped
//! round-robin), the sequence numbers that keep its messages in order, its
//! failure, and the queue of actions its transport refused.
//!
//! Back-pressure (the lesson of ob1's progress loop): an action the btl
//! refuses ([`crate::Pml::handle_refused`]) waits in its peer's pending
//! queue, and every later action for that peer waits behind it (checked in
//! [`crate::Pml::poll_action`]), so one peer's fragments never reorder. The
//! driver calls [`crate::Pml::retry_refused`] on every progress pass, which
//! puts them all back in line, in order; they are never retried only from a
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
    }

    /// Every refused action, peer by peer, each peer's in order.
    pub fn take_pending(&mut self) -> impl Iterator<Item = Action> + '_ {
        self.pending_count = 0;
        self.pending.iter_mut().flat_map(|q| q.drain(..))
    }

    /// Drop what waits for `peer` (it failed: the requests those actions
    /// served have failed with it).
    pub fn drop_pending(&mut self, peer: Rank) {
        let q = &mut self.pending[peer as usize];
        self.pending_count -= q.len();
        q.clear();
    }
}
