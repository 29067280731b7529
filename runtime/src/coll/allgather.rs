//! Allgather (`MPI_Allgather`, `MPI_Allgatherv`, their `i`-forms, in
//! place or not): on single-node communicators one exchange through the
//! shared-memory area (`shm/`; equal blocks, blocking, not in place), else
//! Bruck below `allgather_large` bytes in all (equal blocks) and a ring
//! from there and for the `v` forms (`algo.rs`, thresholds in
//! `select.rs`).

use super::algo;
use super::run::{Choice, Staged};
use super::sched::{Region, Sched, Step};
use super::select::{Algo, Coll, Form};
use crate::buffer::{Buffer, BufferMut, View};
use crate::comm::Communicator;
use crate::engine::Locked;
use crate::error::Result;
use crate::request::Request;

/// Bytes of all blocks: the size an allgather is chosen by.
fn total(blocks: &[View]) -> usize {
    blocks.iter().map(View::bytes).sum()
}

impl Communicator {
    fn allgather_sched(
        &self,
        call: &'static str,
        tag: i32,
        send: Option<&View>,
        blocks: &[View],
        algo: Algo,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        if algo == Algo::AllgatherBruck {
            // Bruck (equal blocks) into one contiguous output.
            let total = total(blocks);
            let contiguous_out = blocks.iter().all(|b| b.contig_addr().is_some());
            let blk = blocks[0].bytes();
            let mine = match send {
                Some(v) => s.input(v),
                None => s.input(&blocks[me as usize]),
            };
            let out = if contiguous_out {
                let a = blocks[0].contig_addr().expect("contiguous");
                s.user(a, total, true)
            } else {
                s.temp(total)
            };
            algo::allgather_bruck(&mut s, n, me, mine, out, blk);
            if !contiguous_out {
                s.wait();
                for (i, b) in blocks.iter().enumerate() {
                    s.push(Step::Unpack {
                        src: out.sub(i * blk, blk),
                        view: b.clone(),
                        received: false,
                    });
                }
            }
        } else {
            assert_eq!(algo, Algo::AllgatherRing, "{call}: not an allgather");
            let regions: Vec<Region> = blocks
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if i as i32 == me && send.is_none() {
                        st.inout(&mut s, b)
                    } else {
                        st.out(&mut s, b)
                    }
                })
                .collect();
            if let Some(v) = send {
                let i = s.input(v);
                s.copy(i, regions[me as usize]);
            }
            algo::allgather_ring(&mut s, n, me, &regions);
        }
        st.finish(&mut s);
        s
    }

    fn allgather_args(&self, call: &str, sv: Option<&View>, rv: &View) -> Result<Vec<View>> {
        let b = self.blocks_of(call, "the receive buffer", rv)?;
        if let Some(sv) = sv {
            self.same_bytes(
                call,
                ("the send buffer", sv.bytes()),
                ("each rank's block of the receive buffer", b[0].bytes()),
            )?;
        }
        Ok(b)
    }

    /// Gather every rank's `send` into every rank's `recv`, in rank order
    /// (`MPI_Allgather`).
    pub fn allgather<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        const CALL: &str = "MPI_Allgather";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self
                .inter_blocking(CALL, |c, tag| c.inter_allgather(CALL, tag, &sv, &rv, None));
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        if let Some(r) = self.allgather_tiny(&sv, &rv) {
            return r;
        }
        let blocks = self.allgather_args(CALL, Some(&sv), &rv)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, -1, None, Some(sv.bytes()))?;
            let q = c.query(Coll::Allgather, Form::Blocking, total(&blocks));
            match c.choose(e, CALL, tag, q)? {
                Choice::Shm(area) => {
                    c.shm_gather(e, CALL, area, &sv, &blocks, None)?;
                    Ok(None)
                }
                Choice::Sched(algo) => {
                    Ok(Some(c.allgather_sched(CALL, tag, Some(&sv), &blocks, algo)))
                }
            }
        })
    }

    /// An allgather of the runtime's own (the engine is already locked).
    pub(crate) fn allgather_in<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        e: &mut Locked,
        call: &'static str,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.allgather_args(call, Some(&sv), &rv)?;
        let tag = self.next_tag();
        let q = self.query(Coll::Allgather, Form::Internal, total(&blocks));
        let algo = self.pick(e, call, &q);
        let mut s = self.allgather_sched(call, tag, Some(&sv), &blocks, algo);
        e.drive(call, &mut s)
    }

    /// [`Communicator::allgather`] in place: this rank's block is already in
    /// `buf`.
    pub fn allgather_in_place<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<()> {
        const CALL: &str = "MPI_Allgather";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let blocks = self.allgather_args(CALL, None, &v)?;
        self.blocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Allgather, Form::Blocking, total(&blocks))
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(Some(c.allgather_sched(CALL, tag, None, &blocks, algo)))
        })
    }

    /// Start an in-place allgather (`MPI_Iallgather` with `MPI_IN_PLACE`):
    /// as [`Communicator::allgather_in_place`].
    pub fn iallgather_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iallgather";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let blocks = self.allgather_args(CALL, None, &v)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Allgather, Form::Nonblocking, total(&blocks))
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.allgather_sched(CALL, tag, None, &blocks, algo))
        })
    }

    /// Start an allgather (`MPI_Iallgather`).
    pub fn iallgather<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iallgather";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self
                .inter_nonblocking(CALL, |c, tag| c.inter_allgather(CALL, tag, &sv, &rv, None));
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.allgather_args(CALL, Some(&sv), &rv)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c.query(Coll::Allgather, Form::Nonblocking, total(&blocks));
            let algo = c.pick(e, CALL, &q);
            Ok(c.allgather_sched(CALL, tag, Some(&sv), &blocks, algo))
        })
    }

    /// Allgather with per-rank counts and displacements (elements of `recv`'s
    /// type) (`MPI_Allgatherv`).
    pub fn allgatherv<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<()> {
        const CALL: &str = "MPI_Allgatherv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_allgather(CALL, tag, &sv, &rv, Some((counts, displs)))
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        if let Some(r) = self.allgatherv_tiny(&sv, &rv, counts, displs) {
            return r;
        }
        let blocks = self.allgatherv_args(CALL, Some(&sv), &rv, counts, displs)?;
        self.blocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Allgather, Form::Blocking, total(&blocks))
                .vform(true);
            match c.choose(e, CALL, tag, q)? {
                Choice::Shm(area) => {
                    c.shm_allgatherv(e, CALL, area, &sv, &blocks)?;
                    Ok(None)
                }
                Choice::Sched(algo) => {
                    Ok(Some(c.allgather_sched(CALL, tag, Some(&sv), &blocks, algo)))
                }
            }
        })
    }

    /// Start an allgatherv (`MPI_Iallgatherv`).
    pub fn iallgatherv<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iallgatherv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_allgather(CALL, tag, &sv, &rv, Some((counts, displs)))
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.allgatherv_args(CALL, Some(&sv), &rv, counts, displs)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Allgather, Form::Nonblocking, total(&blocks))
                .vform(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.allgather_sched(CALL, tag, Some(&sv), &blocks, algo))
        })
    }

    /// The receive blocks of an allgatherv; with a send buffer (not in
    /// place), its size must match this rank's block.
    fn allgatherv_args(
        &self,
        call: &str,
        sv: Option<&View>,
        rv: &View,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<Vec<View>> {
        let Some(sv) = sv else {
            return self.vblocks(call, "the buffer", rv, counts, displs);
        };
        let blocks = self.vblocks(call, "the receive buffer", rv, counts, displs)?;
        self.same_bytes(
            call,
            ("the send buffer", sv.bytes()),
            (
                "this rank's block of the receive buffer",
                blocks[self.rank() as usize].bytes(),
            ),
        )?;
        Ok(blocks)
    }

    /// [`Communicator::allgatherv`] in place: this rank's block is already in
    /// `buf`.
    pub fn allgatherv_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<()> {
        const CALL: &str = "MPI_Allgatherv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let blocks = self.allgatherv_args(CALL, None, &v, counts, displs)?;
        self.blocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Allgather, Form::Blocking, total(&blocks))
                .vform(true)
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(Some(c.allgather_sched(CALL, tag, None, &blocks, algo)))
        })
    }

    /// Start an in-place allgatherv (`MPI_Iallgatherv` with `MPI_IN_PLACE`):
    /// as [`Communicator::allgatherv_in_place`].
    pub fn iallgatherv_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Iallgatherv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let blocks = self.allgatherv_args(CALL, None, &v, counts, displs)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Allgather, Form::Nonblocking, total(&blocks))
                .vform(true)
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.allgather_sched(CALL, tag, None, &blocks, algo))
        })
    }
}
