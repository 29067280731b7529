//! Scatter (`MPI_Scatter`, `MPI_Scatterv`, their `i`-forms, in place or
//! not): one-way through the shared-memory area on single-node
//! communicators (`shm/`; equal blocks, blocking calls only: the root
//! writes every block, each rank reads its own; 1 B to 1 KiB per rank of
//! contiguous host memory by its tiny road, and a scatterv whose table
//! and blocks fit 1 KiB by its own), else linear: the root
//! sends every rank its block (`algo::scatter_linear`).

use super::algo;
use super::gather::own_block;
use super::run::{Choice, Staged};
use super::sched::{Region, Sched};
use super::select::{Algo, Coll, Form, Query};
use crate::buffer::{Buffer, BufferMut, View};
use crate::comm::Communicator;
use crate::engine::Locked;
use crate::error::Result;
use crate::request::Request;

impl Communicator {
    pub(super) fn scatter_sched(
        &self,
        call: &'static str,
        tag: i32,
        blocks: &[View],
        recv: Option<&View>,
        root: i32,
        algo: Algo,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let regions: Vec<Region> = if me == root {
            blocks.iter().map(|b| s.input(b)).collect()
        } else {
            Vec::new()
        };
        let mine = recv.map(|v| st.out(&mut s, v));
        match algo {
            Algo::ScatterLinear => algo::scatter_linear(&mut s, n, me, root, &regions, mine),
            _ => unreachable!("{call}: {algo:?} is not a scatter"),
        }
        st.finish(&mut s);
        s
    }

    /// A blocking scatterv: through the shared-memory area if the selector
    /// says so, falling back to the linear scatter when the root's blocks
    /// do not fit there (`shm/vform.rs`).
    #[allow(clippy::too_many_arguments)]
    fn scatterv_run(
        &self,
        e: &mut Locked,
        call: &'static str,
        tag: i32,
        q: Query,
        blocks: &[View],
        recv: Option<&View>,
        root: i32,
    ) -> Result<Option<Sched>> {
        let algo = match self.choose(e, call, tag, q)? {
            Choice::Shm(area) => match self.shm_scatterv(e, call, area, blocks, recv, root)? {
                false => return Ok(None),
                true => Algo::ScatterLinear,
            },
            Choice::Sched(algo) => algo,
        };
        Ok(Some(
            self.scatter_sched(call, tag, blocks, recv, root, algo),
        ))
    }

    fn scatter_args(&self, call: &str, sv: View, rv: View, root: i32) -> Result<(Vec<View>, View)> {
        self.check_root(call, root)?;
        let blocks = if self.rank() == root {
            let b = self.blocks_of(call, "the send buffer", &sv)?;
            self.same_bytes(
                call,
                ("each rank's block of the send buffer", b[0].bytes()),
                ("the receive buffer", rv.bytes()),
            )?;
            b
        } else {
            Vec::new()
        };
        Ok((blocks, rv))
    }

    /// Scatter blocks of `send` at `root` to every rank's `recv`
    /// (`MPI_Scatter`); `send` holds `size` blocks of `send.len() / size`
    /// elements. Non-roots may pass an empty `send`.
    pub fn scatter<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        root: i32,
    ) -> Result<()> {
        const CALL: &str = "MPI_Scatter";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_scatter(CALL, tag, &sv, None, &rv, root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        if let Some(r) = self.scatter_tiny(&sv, &rv, root) {
            return r;
        }
        let (blocks, rv) = self.scatter_args(CALL, sv, rv, root)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, root, None, Some(rv.bytes()))?;
            let q = c.query(Coll::Scatter, Form::Blocking, rv.bytes());
            match c.choose(e, CALL, tag, q)? {
                Choice::Shm(area) => {
                    c.shm_scatter(e, CALL, area, &blocks, Some(&rv), root)?;
                    Ok(None)
                }
                Choice::Sched(algo) => Ok(Some(c.scatter_sched(
                    CALL,
                    tag,
                    &blocks,
                    Some(&rv),
                    root,
                    algo,
                ))),
            }
        })
    }

    /// [`Communicator::scatter`] in place: at the root `buf` is the whole
    /// send buffer (its own block stays); elsewhere it is the receive buffer.
    pub fn scatter_in_place<B: BufferMut + ?Sized>(&self, buf: &mut B, root: i32) -> Result<()> {
        const CALL: &str = "MPI_Scatter";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_blocks(CALL, &v, root)?;
        self.blocking(CALL, |c, e, tag| {
            let q = c
                .query(
                    Coll::Scatter,
                    Form::Blocking,
                    own_block(me, root, &v, &blocks),
                )
                .in_place(true);
            let recv = (me != root).then_some(&v);
            match c.choose(e, CALL, tag, q)? {
                Choice::Shm(area) => {
                    c.shm_scatter(e, CALL, area, &blocks, recv, root)?;
                    Ok(None)
                }
                Choice::Sched(algo) => {
                    Ok(Some(c.scatter_sched(CALL, tag, &blocks, recv, root, algo)))
                }
            }
        })
    }

    /// Start an in-place scatter (`MPI_Iscatter` with `MPI_IN_PLACE` at the
    /// root): as [`Communicator::scatter_in_place`].
    pub fn iscatter_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iscatter";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_blocks(CALL, &v, root)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(
                    Coll::Scatter,
                    Form::Nonblocking,
                    own_block(me, root, &v, &blocks),
                )
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.scatter_sched(CALL, tag, &blocks, (me != root).then_some(&v), root, algo))
        })
    }

    /// Start a scatter (`MPI_Iscatter`).
    pub fn iscatter<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iscatter";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_scatter(CALL, tag, &sv, None, &rv, root)
            });
        }
        let (blocks, rv) = self.scatter_args(CALL, send.view(), recv.view_mut(), root)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c.query(Coll::Scatter, Form::Nonblocking, rv.bytes());
            let algo = c.pick(e, CALL, &q);
            Ok(c.scatter_sched(CALL, tag, &blocks, Some(&rv), root, algo))
        })
    }

    /// Scatter with per-rank counts and displacements (elements of `send`'s
    /// type) (`MPI_Scatterv`). Non-roots may pass empty slices.
    pub fn scatterv<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        counts: &[i32],
        displs: &[i32],
        recv: &mut R,
        root: i32,
    ) -> Result<()> {
        const CALL: &str = "MPI_Scatterv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_scatter(CALL, tag, &sv, Some((counts, displs)), &rv, root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        if let Some(r) = self.scatterv_tiny(&sv, counts, displs, &rv, root) {
            return r;
        }
        let blocks = self.rooted_vblocks(
            CALL,
            "the send buffer",
            &sv,
            counts,
            displs,
            root,
            Some(("the receive buffer", &rv)),
        )?;
        self.blocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Scatter, Form::Blocking, rv.bytes())
                .vform(true);
            c.scatterv_run(e, CALL, tag, q, &blocks, Some(&rv), root)
        })
    }

    /// Start a scatterv (`MPI_Iscatterv`).
    pub fn iscatterv<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        counts: &[i32],
        displs: &[i32],
        recv: &'a mut R,
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iscatterv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_scatter(CALL, tag, &sv, Some((counts, displs)), &rv, root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.rooted_vblocks(
            CALL,
            "the send buffer",
            &sv,
            counts,
            displs,
            root,
            Some(("the receive buffer", &rv)),
        )?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Scatter, Form::Nonblocking, rv.bytes())
                .vform(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.scatter_sched(CALL, tag, &blocks, Some(&rv), root, algo))
        })
    }

    /// [`Communicator::scatterv`] in place: at the root `buf` is the send
    /// buffer (its own block stays); elsewhere it is the receive buffer.
    pub fn scatterv_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Result<()> {
        const CALL: &str = "MPI_Scatterv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_vblocks(CALL, "the buffer", &v, counts, displs, root, None)?;
        self.blocking(CALL, |c, e, tag| {
            let q = c
                .query(
                    Coll::Scatter,
                    Form::Blocking,
                    own_block(me, root, &v, &blocks),
                )
                .vform(true)
                .in_place(true);
            c.scatterv_run(e, CALL, tag, q, &blocks, (me != root).then_some(&v), root)
        })
    }

    /// Start an in-place scatterv (`MPI_Iscatterv` with `MPI_IN_PLACE` at the
    /// root): as [`Communicator::scatterv_in_place`].
    pub fn iscatterv_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iscatterv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_vblocks(CALL, "the buffer", &v, counts, displs, root, None)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(
                    Coll::Scatter,
                    Form::Nonblocking,
                    own_block(me, root, &v, &blocks),
                )
                .vform(true)
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.scatter_sched(CALL, tag, &blocks, (me != root).then_some(&v), root, algo))
        })
    }
}
