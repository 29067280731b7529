//! Collectives on intercommunicators (MPI-3.1 §5.2.2): every operation
//! moves data between the two groups — a group's result is made of the
//! *other* group's contributions — and rooted operations name the root
//! with [`ROOT`] in its own group (its peers there pass [`PROC_NULL`]) and
//! with its remote rank in the other group.
//!
//! Each collective is one schedule on the intercommunicator: steps between
//! the groups use its collective context; local phases ([`Step::Local`])
//! run on the private intracommunicator of the local group, with that
//! communicator's own next tag, so they never meet its other traffic.
//!
//! | operation | algorithm |
//! |---|---|
//! | barrier | local dissemination barrier, leaders swap a token, local binomial release |
//! | bcast | root → remote rank 0, binomial bcast in the receiving group |
//! | reduce | binomial reduce in the sending group (rank order), its rank 0 → root |
//! | allreduce | binomial reduce in each group, leaders swap results, binomial bcast |
//! | reduce_scatter(_block) | as allreduce to the leaders, then a linear scatter in each group |
//! | gather(v), scatter(v) | linear between the root and the other group |
//! | allgather(v), alltoall(v/w) | every rank exchanges directly with every remote rank |
//!
//! Scans are not defined on intercommunicators (`MPI_ERR_COMM`), nor is
//! `MPI_IN_PLACE` (`MPI_ERR_ARG`).

use super::algo;
use super::check::reduction;
use super::run::Staged;
use super::sched::{Region, Sched};
use crate::buffer::{BufferMut, View};
use crate::comm::{Communicator, Remote};
use crate::engine::Locked;
use crate::error::{ErrorClass, Result};
use crate::op::Op;
use crate::typemap::UserDatatype;
use crate::{PROC_NULL, ROOT};

/// A rank's part in a rooted intercommunicator collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The root ([`ROOT`]).
    Root,
    /// The root's group, not the root ([`PROC_NULL`]): takes no part.
    Idle,
    /// The other group; the root is this rank of the remote group.
    Leaf(i32),
}

impl Communicator {
    /// The remote side, on an intercommunicator.
    pub(crate) fn remote(&self) -> Option<&Remote> {
        self.inner.remote.as_ref()
    }

    /// Whether this is an intercommunicator (`MPI_Comm_test_inter`).
    pub fn is_inter(&self) -> bool {
        self.inner.remote.is_some()
    }

    /// Fail `call` on an intercommunicator (operations only defined within
    /// one group).
    pub(crate) fn check_intra(&self, call: &str, what: &str) -> Result<()> {
        if self.is_inter() {
            Err(self.err(
                ErrorClass::Comm,
                call,
                format!("{what} is not defined on an intercommunicator"),
            ))
        } else {
            Ok(())
        }
    }

    /// Fail an `MPI_IN_PLACE` form of `call` on an intercommunicator.
    pub(crate) fn check_in_place(&self, call: &str) -> Result<()> {
        if self.is_inter() {
            Err(self.err(
                ErrorClass::Arg,
                call,
                "MPI_IN_PLACE cannot be used on an intercommunicator",
            ))
        } else {
            Ok(())
        }
    }

    /// This rank's role for `root` on an intercommunicator.
    pub(crate) fn inter_role(&self, call: &str, root: i32) -> Result<Role> {
        let m = self.remote_size().unwrap_or(0);
        match root {
            ROOT => Ok(Role::Root),
            PROC_NULL => Ok(Role::Idle),
            r if (0..m).contains(&r) => Ok(Role::Leaf(r)),
            _ => Err(self.err(
                ErrorClass::Root,
                call,
                format!(
                    "invalid root {root} on an intercommunicator (MPI_ROOT, MPI_PROC_NULL, or a rank of the remote group of size {m})"
                ),
            )),
        }
    }

    /// An empty schedule on this intercommunicator, with its local phases
    /// on the local group's communicator.
    fn inter_sched(&self, call: &'static str, tag: i32) -> Sched {
        let local = &self.remote().expect("an intercommunicator").local;
        // The local phases take a tag of the same kind (odd: non-blocking).
        let local_tag = if tag & 1 == 1 {
            local.next_nb_tag()
        } else {
            local.next_tag()
        };
        Sched::inter(call, &self.inner, tag, &local.inner, local_tag)
    }

    /// Run an intercommunicator collective to the end.
    pub(crate) fn inter_blocking(
        &self,
        call: &'static str,
        build: impl FnOnce(&Self, i32) -> Result<Sched>,
    ) -> Result<()> {
        self.blocking(call, |c, _, tag| build(c, tag).map(Some))
    }

    /// Start an intercommunicator collective.
    pub(crate) fn inter_nonblocking<'a>(
        &self,
        call: &'static str,
        build: impl FnOnce(&Self, i32) -> Result<Sched>,
    ) -> Result<crate::request::Request<'a>> {
        self.nonblocking(call, |c, _, tag| build(c, tag))
    }

    // ---- construction helpers (the engine is locked) ----

    /// Broadcast `buf` from `root` over this intracommunicator.
    pub(crate) fn bcast_u32_in(
        &self,
        e: &mut Locked,
        call: &'static str,
        buf: &mut [u32],
        root: i32,
    ) -> Result<()> {
        self.bcast_in(e, call, &buf.view_mut(), root)
    }

    // ---- the collectives ----

    pub(crate) fn inter_barrier(&self, call: &'static str, tag: i32) -> Sched {
        let mut s = self.inter_sched(call, tag);
        let (n, me) = (self.size(), self.rank());
        tracing::debug!(target: "coll", "{call}: intercommunicator, {n} local ranks");
        let token = s.temp(0);
        s.local(true);
        algo::barrier(&mut s, n, me);
        s.local(false);
        if me == 0 {
            s.send(token, 0);
            s.recv(token, 0);
            s.wait();
        }
        s.local(true);
        algo::bcast_binomial(&mut s, n, me, 0, token);
        s
    }

    pub(crate) fn inter_bcast(
        &self,
        call: &'static str,
        tag: i32,
        v: &View,
        root: i32,
    ) -> Result<Sched> {
        let role = self.inter_role(call, root)?;
        let mut s = self.inter_sched(call, tag);
        let (n, me) = (self.size(), self.rank());
        match role {
            Role::Idle => {}
            Role::Root => {
                let r = s.input(v);
                s.send(r, 0);
                s.wait();
            }
            Role::Leaf(root) => {
                let mut st = Staged::default();
                let buf = st.out(&mut s, v);
                if me == 0 {
                    s.recv(buf, root);
                    s.wait();
                }
                s.local(true);
                algo::bcast_binomial(&mut s, n, me, 0, buf);
                st.finish(&mut s);
            }
        }
        Ok(s)
    }

    /// One block of `buf` per remote rank: equal blocks, or by counts and
    /// displacements (the `v` forms).
    fn peer_blocks(
        &self,
        call: &str,
        what: &str,
        buf: &View,
        v: Option<(&[i32], &[i32])>,
    ) -> Result<Vec<View>> {
        match v {
            None => self.blocks_of(call, what, buf),
            Some((c, d)) => self.vblocks(call, what, buf, c, d),
        }
    }

    /// Gather (or gatherv, with counts and displacements) from the remote
    /// group into `recv` at the root.
    pub(crate) fn inter_gather(
        &self,
        call: &'static str,
        tag: i32,
        send: &View,
        recv: &View,
        v: Option<(&[i32], &[i32])>,
        root: i32,
    ) -> Result<Sched> {
        let role = self.inter_role(call, root)?;
        let mut s = self.inter_sched(call, tag);
        match role {
            Role::Idle => {}
            Role::Root => {
                let blocks = self.peer_blocks(call, "the receive buffer", recv, v)?;
                let mut st = Staged::default();
                for (i, b) in blocks.iter().enumerate() {
                    let r = st.out(&mut s, b);
                    if r.len > 0 {
                        s.recv(r, i as i32);
                    }
                }
                s.wait();
                st.finish(&mut s);
            }
            Role::Leaf(root) => {
                let r = s.input(send);
                if r.len > 0 {
                    s.send(r, root);
                    s.wait();
                }
            }
        }
        Ok(s)
    }

    /// Scatter (or scatterv) from `send` at the root to the remote group.
    pub(crate) fn inter_scatter(
        &self,
        call: &'static str,
        tag: i32,
        send: &View,
        v: Option<(&[i32], &[i32])>,
        recv: &View,
        root: i32,
    ) -> Result<Sched> {
        let role = self.inter_role(call, root)?;
        let mut s = self.inter_sched(call, tag);
        match role {
            Role::Idle => {}
            Role::Root => {
                let blocks = self.peer_blocks(call, "the send buffer", send, v)?;
                for (i, b) in blocks.iter().enumerate() {
                    let r = s.input(b);
                    if r.len > 0 {
                        s.send(r, i as i32);
                    }
                }
                s.wait();
            }
            Role::Leaf(root) => {
                let mut st = Staged::default();
                let r = st.out(&mut s, recv);
                if r.len > 0 {
                    s.recv(r, root);
                    s.wait();
                }
                st.finish(&mut s);
            }
        }
        Ok(s)
    }

    /// Every rank sends `sblocks[j]` to remote rank `j` and receives
    /// `rblocks[j]` from it (allgather: the same block to everyone).
    fn inter_exchange(
        &self,
        call: &'static str,
        tag: i32,
        sblocks: &[View],
        rblocks: &[View],
    ) -> Sched {
        let mut s = self.inter_sched(call, tag);
        let mut st = Staged::default();
        tracing::debug!(target: "coll", "{call}: intercommunicator, direct exchange with {} remote ranks", rblocks.len());
        let sr: Vec<Region> = sblocks.iter().map(|b| s.input(b)).collect();
        for (j, (sb, rb)) in sr.iter().zip(rblocks).enumerate() {
            let r = st.out(&mut s, rb);
            if r.len > 0 {
                s.recv(r, j as i32);
            }
            if sb.len > 0 {
                s.send(*sb, j as i32);
            }
        }
        s.wait();
        st.finish(&mut s);
        s
    }

    /// Allgather (or allgatherv): `recv` gets every remote rank's `send`.
    pub(crate) fn inter_allgather(
        &self,
        call: &'static str,
        tag: i32,
        send: &View,
        recv: &View,
        v: Option<(&[i32], &[i32])>,
    ) -> Result<Sched> {
        let rb = self.peer_blocks(call, "the receive buffer", recv, v)?;
        let sb = vec![send.clone(); rb.len()];
        Ok(self.inter_exchange(call, tag, &sb, &rb))
    }

    /// Alltoall: block `j` of `send` to remote rank `j`, block `j` of
    /// `recv` from it.
    pub(crate) fn inter_alltoall(
        &self,
        call: &'static str,
        tag: i32,
        send: &View,
        recv: &View,
    ) -> Result<Sched> {
        let sb = self.blocks_of(call, "the send buffer", send)?;
        let rb = self.blocks_of(call, "the receive buffer", recv)?;
        Ok(self.inter_exchange(call, tag, &sb, &rb))
    }

    /// Alltoallv: blocks by counts and displacements (elements).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn inter_alltoallv(
        &self,
        call: &'static str,
        tag: i32,
        send: &View,
        scounts: &[i32],
        sdispls: &[i32],
        recv: &View,
        rcounts: &[i32],
        rdispls: &[i32],
    ) -> Result<Sched> {
        let sb = self.vblocks(call, "the send buffer", send, scounts, sdispls)?;
        let rb = self.vblocks(call, "the receive buffer", recv, rcounts, rdispls)?;
        Ok(self.inter_exchange(call, tag, &sb, &rb))
    }

    /// Alltoallw: blocks by counts, byte displacements and datatypes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn inter_alltoallw(
        &self,
        call: &'static str,
        tag: i32,
        send: &View,
        s: (&[i32], &[isize], &[UserDatatype]),
        recv: &View,
        r: (&[i32], &[isize], &[UserDatatype]),
    ) -> Result<Sched> {
        let sb = self.wblocks(call, "the send buffer", send, s.0, s.1, s.2)?;
        let rb = self.wblocks(call, "the receive buffer", recv, r.0, r.1, r.2)?;
        Ok(self.inter_exchange(call, tag, &sb, &rb))
    }

    /// Reduce this group's `send` (in rank order) onto local rank 0,
    /// leaving steps that end in the local phase; the region of the result
    /// at rank 0.
    fn local_reduce(&self, s: &mut Sched, send: &View, op: &Op) -> Region {
        let (n, me) = (self.size(), self.rank());
        let i = s.input(send);
        let acc = s.temp(i.len);
        s.copy(i, acc);
        let tmp = s.temp(i.len);
        s.local(true);
        algo::reduce_binomial(s, n, me, 0, acc, acc, tmp, op.is_commutative())
    }

    pub(crate) fn inter_reduce(
        &self,
        call: &'static str,
        tag: i32,
        send: &View,
        recv: &View,
        op: &Op,
        root: i32,
    ) -> Result<Sched> {
        let role = self.inter_role(call, root)?;
        let mut s = self.inter_sched(call, tag);
        match role {
            Role::Idle => {}
            Role::Root => {
                // The root group's datatype says what the op works on.
                s.red = Some(reduction(call, self.rank(), op, &recv.ty)?);
                let mut st = Staged::default();
                let out = st.out(&mut s, recv);
                s.recv(out, 0);
                s.wait();
                st.finish(&mut s);
            }
            Role::Leaf(root) => {
                s.red = Some(reduction(call, self.rank(), op, &send.ty)?);
                tracing::debug!(target: "coll", "{call}: intercommunicator, binomial reduce to the leader");
                let res = self.local_reduce(&mut s, send, op);
                s.local(false);
                if self.rank() == 0 {
                    s.send(res, root);
                    s.wait();
                }
            }
        }
        Ok(s)
    }

    /// Reduce each group's `send` to its leader and swap the results
    /// between the leaders: at local rank 0, the region holding the remote
    /// group's reduction (`len` bytes; a temporary unless `into` is given).
    fn leaders_swap_reductions(
        &self,
        s: &mut Sched,
        send: &View,
        op: &Op,
        into: Option<Region>,
        len: usize,
    ) -> Region {
        let res = self.local_reduce(s, send, op);
        s.local(false);
        let theirs = into.unwrap_or_else(|| s.temp(len));
        if self.rank() == 0 {
            s.recv(theirs, 0);
            s.send(res, 0);
            s.wait();
        }
        theirs
    }

    pub(crate) fn inter_allreduce(
        &self,
        call: &'static str,
        tag: i32,
        send: &View,
        recv: &View,
        op: &Op,
    ) -> Result<Sched> {
        self.same_bytes(
            call,
            ("the send buffer", send.bytes()),
            ("the receive buffer", recv.bytes()),
        )?;
        let mut s = self.inter_sched(call, tag);
        s.red = Some(reduction(call, self.rank(), op, &send.ty)?);
        tracing::debug!(target: "coll", "{call}: intercommunicator, reduce + leader swap + bcast");
        let mut st = Staged::default();
        let out = st.out(&mut s, recv);
        let theirs = self.leaders_swap_reductions(&mut s, send, op, Some(out), recv.bytes());
        s.local(true);
        algo::bcast_binomial(&mut s, self.size(), self.rank(), 0, theirs);
        st.finish(&mut s);
        Ok(s)
    }

    /// Reduce-scatter: the remote group's reduction of vectors of
    /// `sum(counts)` elements is scattered over this group, `counts[i]`
    /// elements to rank `i` (`counts` has one entry per local rank).
    pub(crate) fn inter_reduce_scatter(
        &self,
        call: &'static str,
        tag: i32,
        send: &View,
        recv: &View,
        counts: &[i32],
        op: &Op,
    ) -> Result<Sched> {
        let n = self.size() as usize;
        if counts.len() != n {
            return Err(self.err(
                ErrorClass::Arg,
                call,
                format!("{} counts for {n} local ranks", counts.len()),
            ));
        }
        if let Some((i, c)) = counts.iter().enumerate().find(|(_, &c)| c < 0) {
            return Err(self.err(
                ErrorClass::Count,
                call,
                format!("count[{i}] = {c} is negative"),
            ));
        }
        let elem = send.ty.size();
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        self.same_bytes(
            call,
            ("the send buffer", send.bytes()),
            ("the sum of the counts", total * elem),
        )?;
        let me = self.rank();
        self.same_bytes(
            call,
            ("the receive buffer", recv.bytes()),
            ("this rank's count", counts[me as usize] as usize * elem),
        )?;
        let mut s = self.inter_sched(call, tag);
        s.red = Some(reduction(call, me, op, &send.ty)?);
        tracing::debug!(target: "coll", "{call}: intercommunicator, reduce + leader swap + linear scatter");
        let theirs = self.leaders_swap_reductions(&mut s, send, op, None, send.bytes());
        let mut st = Staged::default();
        let out = st.out(&mut s, recv);
        s.local(true);
        if me == 0 {
            let mut off = 0;
            for (i, &c) in counts.iter().enumerate() {
                let b = theirs.sub(off, c as usize * elem);
                off += b.len;
                if i == 0 {
                    s.copy(b, out);
                } else if b.len > 0 {
                    s.send(b, i as i32);
                }
            }
        } else if out.len > 0 {
            s.recv(out, 0);
        }
        s.wait();
        st.finish(&mut s);
        Ok(s)
    }

    /// Reduce-scatter with equal blocks: `send` holds `size × recv.len()`
    /// elements (this group's size).
    pub(crate) fn inter_reduce_scatter_block(
        &self,
        call: &'static str,
        tag: i32,
        send: &View,
        recv: &View,
        op: &Op,
    ) -> Result<Sched> {
        let elem = send.ty.size().max(1);
        let per = (recv.bytes() / elem) as i32;
        let counts = vec![per; self.size() as usize];
        self.inter_reduce_scatter(call, tag, send, recv, &counts, op)
    }
}

/// Exchange `mine` with the other group's leader and broadcast what came
/// back over `local`: every rank of `local` returns the other group's
/// vector. Only `leader` (a rank of `local`) talks to `remote_leader`,
/// through schedules `mk` makes (on the peer or intercommunicator).
pub(crate) fn swap_in(
    e: &mut Locked,
    call: &'static str,
    local: &Communicator,
    leader: i32,
    mut mk: impl FnMut() -> Sched,
    remote_leader: i32,
    mine: &[u32],
) -> Result<Vec<u32>> {
    let mut len = [0u32];
    let mut theirs: Vec<u32> = Vec::new();
    if local.rank() == leader {
        let n = [mine.len() as u32];
        let mut s = mk();
        let a = s.user(n.as_ptr() as u64, 4, false);
        let b = s.user(len.as_mut_ptr() as u64, 4, true);
        s.recv(b, remote_leader);
        s.send(a, remote_leader);
        s.wait();
        e.drive(call, &mut s)?;
        theirs = vec![0u32; len[0] as usize];
        let mut s = mk();
        let a = s.user(mine.as_ptr() as u64, 4 * mine.len(), false);
        let b = s.user(theirs.as_mut_ptr() as u64, 4 * theirs.len(), true);
        s.recv(b, remote_leader);
        s.send(a, remote_leader);
        s.wait();
        e.drive(call, &mut s)?;
    }
    if local.size() > 1 {
        local.bcast_u32_in(e, call, &mut len, leader)?;
        theirs.resize(len[0] as usize, 0);
        local.bcast_u32_in(e, call, &mut theirs, leader)?;
    }
    Ok(theirs)
}
