//! Alltoall (`MPI_Alltoall`, `MPI_Alltoallv`, `MPI_Alltoallw`, their
//! `i`-forms, in place or not): on single-node communicators one exchange
//! through the shared-memory area (`shm/`; equal blocks, blocking), else
//! every exchange posted at once below `alltoall_large` bytes per peer and
//! pairwise from there (`algo::alltoall`, thresholds in `select.rs`).

use super::algo;
use super::run::{Choice, Staged};
use super::sched::{Region, Sched};
use super::select::{Algo, Coll, Form, Query};
use crate::buffer::{Buffer, BufferMut, View};
use crate::comm::Communicator;
use crate::engine::Locked;
use crate::error::Result;
use crate::request::Request;
use crate::typemap::UserDatatype;

/// The largest block to one peer: the size an alltoall is chosen by.
fn per_peer(blocks: &[View]) -> usize {
    blocks.iter().map(View::bytes).max().unwrap_or(0)
}

impl Communicator {
    /// An alltoall of `sblocks` into `rblocks`; `sblocks` is `None` in place:
    /// then each receive block is sent, packed into a temporary the
    /// schedule owns (so a request may outlive the call).
    /// A blocking alltoallv or alltoallw (`send` `None` in place: `rb` is
    /// both): through the shared-memory area if the selector says so, every
    /// rank falling back to the pairwise schedule when some rank's blocks do
    /// not fit there (`shm/vform.rs`).
    fn alltoallv_run(
        &self,
        e: &mut Locked,
        call: &'static str,
        tag: i32,
        q: Query,
        send: Option<&[View]>,
        rb: &[View],
    ) -> Result<Option<Sched>> {
        let algo = match self.choose(e, call, tag, q)? {
            Choice::Shm(area) => match self.shm_alltoallv(e, call, area, send, rb)? {
                false => return Ok(None),
                true => Algo::AlltoallPairwise,
            },
            Choice::Sched(algo) => algo,
        };
        Ok(Some(self.alltoall_sched(call, tag, send, rb, algo)))
    }

    pub(super) fn alltoall_sched(
        &self,
        call: &'static str,
        tag: i32,
        sblocks: Option<&[View]>,
        rblocks: &[View],
        algo: Algo,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let sr: Vec<Region> = match sblocks {
            Some(sb) => sb.iter().map(|b| s.input(b)).collect(),
            None => rblocks.iter().map(|b| s.packed(b)).collect(),
        };
        let rr: Vec<Region> = rblocks.iter().map(|b| st.out(&mut s, b)).collect();
        let pairwise = match algo {
            Algo::AlltoallPairwise => true,
            Algo::AlltoallAtOnce => false,
            _ => unreachable!("{call}: {algo:?} is not an alltoall"),
        };
        algo::alltoall(&mut s, n, me, &sr, &rr, pairwise);
        st.finish(&mut s);
        s
    }

    /// A blocking alltoall of equal blocks (`sblocks` is `None` in place,
    /// `input` the whole buffer to send), through the shared-memory area if
    /// the selector says so.
    fn alltoall_blocking(
        &self,
        e: &mut Locked,
        call: &'static str,
        tag: i32,
        input: &View,
        sblocks: Option<&[View]>,
        rblocks: &[View],
    ) -> Result<Option<Sched>> {
        let q = self
            .query(
                Coll::Alltoall,
                Form::Blocking,
                per_peer(sblocks.unwrap_or(rblocks)),
            )
            .in_place(sblocks.is_none());
        match self.choose(e, call, tag, q)? {
            Choice::Shm(area) => {
                self.shm_alltoall(e, call, area, input, rblocks)?;
                Ok(None)
            }
            Choice::Sched(algo) => Ok(Some(self.alltoall_sched(call, tag, sblocks, rblocks, algo))),
        }
    }

    fn alltoall_args(&self, call: &str, sv: &View, rv: &View) -> Result<(Vec<View>, Vec<View>)> {
        let sb = self.blocks_of(call, "the send buffer", sv)?;
        let rb = self.blocks_of(call, "the receive buffer", rv)?;
        self.same_bytes(
            call,
            ("each block of the send buffer", sb[0].bytes()),
            ("each block of the receive buffer", rb[0].bytes()),
        )?;
        Ok((sb, rb))
    }

    /// Block `i` of every rank's `send` goes to rank `i`, landing in block
    /// `j` of its `recv` for sender `j` (`MPI_Alltoall`).
    pub fn alltoall<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        const CALL: &str = "MPI_Alltoall";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| c.inter_alltoall(CALL, tag, &sv, &rv));
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        if let Some(r) = self.alltoall_tiny(&sv, &rv) {
            return r;
        }
        let (sb, rb) = self.alltoall_args(CALL, &sv, &rv)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, -1, None, Some(sv.bytes()))?;
            c.alltoall_blocking(e, CALL, tag, &sv, Some(&sb), &rb)
        })
    }

    /// [`Communicator::alltoall`] in place: `buf` is sent and overwritten.
    pub fn alltoall_in_place<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<()> {
        const CALL: &str = "MPI_Alltoall";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let rb = self.blocks_of(CALL, "the buffer", &v)?;
        self.blocking(CALL, |c, e, tag| {
            c.alltoall_blocking(e, CALL, tag, &v, None, &rb)
        })
    }

    /// Start an alltoall (`MPI_Ialltoall`).
    pub fn ialltoall<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ialltoall";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| c.inter_alltoall(CALL, tag, &sv, &rv));
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (sb, rb) = self.alltoall_args(CALL, &sv, &rv)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c.query(Coll::Alltoall, Form::Nonblocking, per_peer(&sb));
            let algo = c.pick(e, CALL, &q);
            Ok(c.alltoall_sched(CALL, tag, Some(&sb), &rb, algo))
        })
    }

    /// Start an in-place alltoall (`MPI_Ialltoall` with `MPI_IN_PLACE`): as
    /// [`Communicator::alltoall_in_place`]; the data to send is copied when
    /// the call starts.
    pub fn ialltoall_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ialltoall";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let rb = self.blocks_of(CALL, "the buffer", &v)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Alltoall, Form::Nonblocking, per_peer(&rb))
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.alltoall_sched(CALL, tag, None, &rb, algo))
        })
    }

    /// The blocks of an alltoallv, checked.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn alltoallv_args(
        &self,
        call: &str,
        sv: &View,
        scounts: &[i32],
        sdispls: &[i32],
        rv: &View,
        rcounts: &[i32],
        rdispls: &[i32],
    ) -> Result<(Vec<View>, Vec<View>)> {
        let sb = self.vblocks(call, "the send buffer", sv, scounts, sdispls)?;
        let rb = self.vblocks(call, "the receive buffer", rv, rcounts, rdispls)?;
        let me = self.rank() as usize;
        self.same_bytes(
            call,
            (
                "this rank's block to itself in the send buffer",
                sb[me].bytes(),
            ),
            (
                "its block from itself in the receive buffer",
                rb[me].bytes(),
            ),
        )?;
        Ok((sb, rb))
    }

    /// Alltoall with per-peer counts and displacements (elements of each
    /// buffer's type) (`MPI_Alltoallv`).
    #[allow(clippy::too_many_arguments)]
    pub fn alltoallv<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        scounts: &[i32],
        sdispls: &[i32],
        recv: &mut R,
        rcounts: &[i32],
        rdispls: &[i32],
    ) -> Result<()> {
        const CALL: &str = "MPI_Alltoallv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_alltoallv(CALL, tag, &sv, scounts, sdispls, &rv, rcounts, rdispls)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        if let Some(r) = self.alltoallv_tiny(&sv, scounts, sdispls, &rv, rcounts, rdispls) {
            return r;
        }
        let (sb, rb) = self.alltoallv_args(CALL, &sv, scounts, sdispls, &rv, rcounts, rdispls)?;
        self.blocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Alltoall, Form::Blocking, per_peer(&sb))
                .vform(true);
            c.alltoallv_run(e, CALL, tag, q, Some(&sb), &rb)
        })
    }

    /// Start an alltoallv (`MPI_Ialltoallv`).
    #[allow(clippy::too_many_arguments)]
    pub fn ialltoallv<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        scounts: &[i32],
        sdispls: &[i32],
        recv: &'a mut R,
        rcounts: &[i32],
        rdispls: &[i32],
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ialltoallv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_alltoallv(CALL, tag, &sv, scounts, sdispls, &rv, rcounts, rdispls)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (sb, rb) = self.alltoallv_args(CALL, &sv, scounts, sdispls, &rv, rcounts, rdispls)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Alltoall, Form::Nonblocking, per_peer(&sb))
                .vform(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.alltoall_sched(CALL, tag, Some(&sb), &rb, algo))
        })
    }

    /// [`Communicator::alltoallv`] in place: `buf` is sent and overwritten,
    /// with the same counts and displacements for both directions.
    pub fn alltoallv_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<()> {
        const CALL: &str = "MPI_Alltoallv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let rb = self.vblocks(CALL, "the buffer", &v, counts, displs)?;
        self.blocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Alltoall, Form::Blocking, per_peer(&rb))
                .vform(true)
                .in_place(true);
            c.alltoallv_run(e, CALL, tag, q, None, &rb)
        })
    }

    /// Start an in-place alltoallv (`MPI_Ialltoallv` with `MPI_IN_PLACE`): as
    /// [`Communicator::alltoallv_in_place`]; the data to send is copied when
    /// the call starts.
    pub fn ialltoallv_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ialltoallv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let rb = self.vblocks(CALL, "the buffer", &v, counts, displs)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Alltoall, Form::Nonblocking, per_peer(&rb))
                .vform(true)
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.alltoall_sched(CALL, tag, None, &rb, algo))
        })
    }

    /// The blocks of an alltoallw, checked.
    #[allow(clippy::too_many_arguments)]
    fn alltoallw_args(
        &self,
        call: &str,
        sv: &View,
        scounts: &[i32],
        sdispls: &[isize],
        stypes: &[UserDatatype],
        rv: &View,
        rcounts: &[i32],
        rdispls: &[isize],
        rtypes: &[UserDatatype],
    ) -> Result<(Vec<View>, Vec<View>)> {
        let sb = self.wblocks(call, "the send buffer", sv, scounts, sdispls, stypes)?;
        let rb = self.wblocks(call, "the receive buffer", rv, rcounts, rdispls, rtypes)?;
        let me = self.rank() as usize;
        self.same_bytes(
            call,
            ("this rank's block to itself", sb[me].bytes()),
            ("its block from itself", rb[me].bytes()),
        )?;
        Ok((sb, rb))
    }

    /// The most general alltoall (`MPI_Alltoallw`): per-peer counts, byte
    /// displacements and datatypes on both sides. `send` and `recv` are the
    /// memory the displacements are relative to.
    #[allow(clippy::too_many_arguments)]
    pub fn alltoallw<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        scounts: &[i32],
        sdispls: &[isize],
        stypes: &[UserDatatype],
        recv: &mut R,
        rcounts: &[i32],
        rdispls: &[isize],
        rtypes: &[UserDatatype],
    ) -> Result<()> {
        const CALL: &str = "MPI_Alltoallw";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_alltoallw(
                    CALL,
                    tag,
                    &sv,
                    (scounts, sdispls, stypes),
                    &rv,
                    (rcounts, rdispls, rtypes),
                )
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (sb, rb) = self.alltoallw_args(
            CALL, &sv, scounts, sdispls, stypes, &rv, rcounts, rdispls, rtypes,
        )?;
        self.blocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Alltoall, Form::Blocking, per_peer(&sb))
                .vform(true);
            c.alltoallv_run(e, CALL, tag, q, Some(&sb), &rb)
        })
    }

    /// Start an alltoallw (`MPI_Ialltoallw`).
    #[allow(clippy::too_many_arguments)]
    pub fn ialltoallw<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        scounts: &[i32],
        sdispls: &[isize],
        stypes: &[UserDatatype],
        recv: &'a mut R,
        rcounts: &[i32],
        rdispls: &[isize],
        rtypes: &[UserDatatype],
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ialltoallw";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_alltoallw(
                    CALL,
                    tag,
                    &sv,
                    (scounts, sdispls, stypes),
                    &rv,
                    (rcounts, rdispls, rtypes),
                )
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (sb, rb) = self.alltoallw_args(
            CALL, &sv, scounts, sdispls, stypes, &rv, rcounts, rdispls, rtypes,
        )?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Alltoall, Form::Nonblocking, per_peer(&sb))
                .vform(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.alltoall_sched(CALL, tag, Some(&sb), &rb, algo))
        })
    }

    /// [`Communicator::alltoallw`] in place: `buf` is sent and overwritten,
    /// with the same counts, byte displacements and datatypes for both
    /// directions.
    pub fn alltoallw_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        counts: &[i32],
        displs: &[isize],
        types: &[UserDatatype],
    ) -> Result<()> {
        const CALL: &str = "MPI_Alltoallw";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let rb = self.wblocks(CALL, "the buffer", &v, counts, displs, types)?;
        self.blocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Alltoall, Form::Blocking, per_peer(&rb))
                .vform(true)
                .in_place(true);
            c.alltoallv_run(e, CALL, tag, q, None, &rb)
        })
    }

    /// Start an in-place alltoallw (`MPI_Ialltoallw` with `MPI_IN_PLACE`): as
    /// [`Communicator::alltoallw_in_place`]; the data to send is copied when
    /// the call starts.
    pub fn ialltoallw_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        counts: &[i32],
        displs: &[isize],
        types: &[UserDatatype],
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ialltoallw";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let rb = self.wblocks(CALL, "the buffer", &v, counts, displs, types)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Alltoall, Form::Nonblocking, per_peer(&rb))
                .vform(true)
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.alltoall_sched(CALL, tag, None, &rb, algo))
        })
    }
}
