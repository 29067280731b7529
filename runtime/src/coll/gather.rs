//! Gather (`MPI_Gather`, `MPI_Gatherv`, their `i`-forms, in place or not):
//! one exchange through the shared-memory area on single-node
//! communicators (`shm/`; equal blocks, blocking calls only; 1 B to 1 KiB
//! per rank of contiguous host memory by its tiny road, and a gatherv's
//! blocks by its own), else linear:
//! every rank sends its block to the root (`algo::gather_linear`).

use super::algo;
use super::run::{Choice, Staged};
use super::sched::{Region, Sched};
use super::select::{Algo, Coll, Form, Query};
use crate::buffer::{Buffer, BufferMut, View};
use crate::comm::Communicator;
use crate::engine::Locked;
use crate::error::Result;
use crate::request::Request;

impl Communicator {
    fn gather_sched(
        &self,
        call: &'static str,
        tag: i32,
        send: Option<&View>,
        blocks: &[View],
        root: i32,
        algo: Algo,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let mine = send.map(|v| s.input(v));
        let regions: Vec<Region> = if me == root {
            blocks
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if i as i32 == me && send.is_none() {
                        Region {
                            mem: 0,
                            off: 0,
                            len: 0,
                        }
                    } else {
                        st.out(&mut s, b)
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        match algo {
            Algo::GatherLinear => algo::gather_linear(&mut s, n, me, root, mine, &regions),
            _ => unreachable!("{call}: {algo:?} is not a gather"),
        }
        st.finish(&mut s);
        s
    }

    /// A blocking gatherv (`input` is this rank's block, `send` its send
    /// buffer unless an in-place root): through the shared-memory area if
    /// the selector says so, the blocks that do not fit there then moving
    /// by point-to-point (`shm/vform.rs`); else linear.
    #[allow(clippy::too_many_arguments)]
    fn gatherv_run(
        &self,
        e: &mut Locked,
        call: &'static str,
        tag: i32,
        q: Query,
        input: &View,
        send: Option<&View>,
        blocks: &[View],
        root: i32,
    ) -> Result<Option<Sched>> {
        let area = match self.choose(e, call, tag, q)? {
            Choice::Shm(area) => area,
            Choice::Sched(algo) => {
                return Ok(Some(self.gather_sched(call, tag, send, blocks, root, algo)))
            }
        };
        let (rest, bad) = self.shm_gatherv(e, call, area, input, send, blocks, root)?;
        if let Some(ranks) = rest {
            e.drive(
                call,
                &mut self.gatherv_rest(call, tag, input, blocks, root, &ranks),
            )?;
        }
        bad.map_or(Ok(None), Err)
    }

    /// What is left of a gatherv after the area: the blocks of `ranks` by
    /// point-to-point (the marked ranks, at the root, its own block having
    /// been copied; this rank's `input`, at a marked sender).
    pub(super) fn gatherv_rest(
        &self,
        call: &'static str,
        tag: i32,
        input: &View,
        blocks: &[View],
        root: i32,
        ranks: &[usize],
    ) -> Sched {
        if self.rank() != root {
            return self.gather_sched(call, tag, Some(input), &[], root, Algo::GatherLinear);
        }
        let only: Vec<View> = blocks
            .iter()
            .enumerate()
            .map(|(r, b)| {
                if ranks.contains(&r) {
                    b.clone()
                } else {
                    b.sub(0, 0).expect("an empty view fits")
                }
            })
            .collect();
        self.gather_sched(call, tag, None, &only, root, Algo::GatherLinear)
    }

    /// A blocking gather of equal blocks (`input` is this rank's block),
    /// through the shared-memory area if the selector says so.
    #[allow(clippy::too_many_arguments)]
    fn gather_blocking(
        &self,
        call: &'static str,
        input: &View,
        send: Option<&View>,
        blocks: &[View],
        root: i32,
        in_place: bool,
    ) -> Result<()> {
        self.blocking(call, |c, e, tag| {
            c.check_agree(e, call, root, None, Some(input.bytes()))?;
            let q = c
                .query(Coll::Gather, Form::Blocking, input.bytes())
                .in_place(in_place);
            match c.choose(e, call, tag, q)? {
                Choice::Shm(area) => {
                    c.shm_gather(e, call, area, input, blocks, Some(root))?;
                    Ok(None)
                }
                Choice::Sched(algo) => {
                    Ok(Some(c.gather_sched(call, tag, send, blocks, root, algo)))
                }
            }
        })
    }

    /// Gather every rank's `send` into `recv` at `root`, in rank order
    /// (`MPI_Gather`); at the root `recv` holds `size` blocks of
    /// `recv.len() / size` elements. Other ranks may pass an empty `recv`.
    pub fn gather<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        root: i32,
    ) -> Result<()> {
        const CALL: &str = "MPI_Gather";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_gather(CALL, tag, &sv, &rv, None, root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        if let Some(r) = self.gather_tiny(&sv, &rv, root) {
            return r;
        }
        let (sv, blocks) = self.gather_args(CALL, sv, rv, root)?;
        self.gather_blocking(CALL, &sv, Some(&sv), &blocks, root, false)
    }

    fn gather_args(&self, call: &str, sv: View, rv: View, root: i32) -> Result<(View, Vec<View>)> {
        self.check_root(call, root)?;
        let blocks = if self.rank() == root {
            let b = self.blocks_of(call, "the receive buffer", &rv)?;
            self.same_bytes(
                call,
                ("the send buffer", sv.bytes()),
                ("each rank's block of the receive buffer", b[0].bytes()),
            )?;
            b
        } else {
            Vec::new()
        };
        Ok((sv, blocks))
    }

    /// [`Communicator::gather`] in place: at the root `buf` is the whole
    /// receive buffer and the root's own block is already in place;
    /// elsewhere `buf` is the send buffer.
    pub fn gather_in_place<B: BufferMut + ?Sized>(&self, buf: &mut B, root: i32) -> Result<()> {
        const CALL: &str = "MPI_Gather";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_blocks(CALL, &v, root)?;
        // The root's input is its own block (the other ranks may not be in
        // place: they must take the same path as a root that is).
        let input = if me == root {
            blocks[root as usize].clone()
        } else {
            v.clone()
        };
        self.gather_blocking(
            CALL,
            &input,
            (me != root).then_some(&v),
            &blocks,
            root,
            true,
        )
    }

    /// Start a gather (`MPI_Igather`).
    pub fn igather<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Igather";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_gather(CALL, tag, &sv, &rv, None, root)
            });
        }
        let (sv, blocks) = self.gather_args(CALL, send.view(), recv.view_mut(), root)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c.query(Coll::Gather, Form::Nonblocking, sv.bytes());
            let algo = c.pick(e, CALL, &q);
            Ok(c.gather_sched(CALL, tag, Some(&sv), &blocks, root, algo))
        })
    }

    /// Start an in-place gather (`MPI_Igather` with `MPI_IN_PLACE` at the
    /// root): as [`Communicator::gather_in_place`].
    pub fn igather_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Igather";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_blocks(CALL, &v, root)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(
                    Coll::Gather,
                    Form::Nonblocking,
                    own_block(me, root, &v, &blocks),
                )
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.gather_sched(CALL, tag, (me != root).then_some(&v), &blocks, root, algo))
        })
    }

    /// Gather with per-rank counts and displacements (elements of `recv`'s
    /// type) at the root (`MPI_Gatherv`). Non-roots may pass empty slices.
    pub fn gatherv<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Result<()> {
        const CALL: &str = "MPI_Gatherv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_gather(CALL, tag, &sv, &rv, Some((counts, displs)), root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        if let Some(r) = self.gatherv_tiny(&sv, &rv, counts, displs, root) {
            return r;
        }
        let blocks = self.rooted_vblocks(
            CALL,
            "the receive buffer",
            &rv,
            counts,
            displs,
            root,
            Some(("the send buffer", &sv)),
        )?;
        self.blocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Gather, Form::Blocking, sv.bytes())
                .vform(true);
            c.gatherv_run(e, CALL, tag, q, &sv, Some(&sv), &blocks, root)
        })
    }

    /// Start a gatherv (`MPI_Igatherv`).
    pub fn igatherv<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Igatherv";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_gather(CALL, tag, &sv, &rv, Some((counts, displs)), root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let blocks = self.rooted_vblocks(
            CALL,
            "the receive buffer",
            &rv,
            counts,
            displs,
            root,
            Some(("the send buffer", &sv)),
        )?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(Coll::Gather, Form::Nonblocking, sv.bytes())
                .vform(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.gather_sched(CALL, tag, Some(&sv), &blocks, root, algo))
        })
    }

    /// [`Communicator::gatherv`] in place: at the root the root's block is
    /// already in `buf`; elsewhere `buf` is the send buffer.
    pub fn gatherv_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Result<()> {
        const CALL: &str = "MPI_Gatherv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_vblocks(CALL, "the buffer", &v, counts, displs, root, None)?;
        self.blocking(CALL, |c, e, tag| {
            let q = c
                .query(
                    Coll::Gather,
                    Form::Blocking,
                    own_block(me, root, &v, &blocks),
                )
                .vform(true)
                .in_place(true);
            let input = if me == root {
                &blocks[root as usize]
            } else {
                &v
            };
            c.gatherv_run(
                e,
                CALL,
                tag,
                q,
                input,
                (me != root).then_some(&v),
                &blocks,
                root,
            )
        })
    }

    /// Start an in-place gatherv (`MPI_Igatherv` with `MPI_IN_PLACE` at the
    /// root): as [`Communicator::gatherv_in_place`].
    pub fn igatherv_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Igatherv";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let me = self.rank();
        let blocks = self.rooted_vblocks(CALL, "the buffer", &v, counts, displs, root, None)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .query(
                    Coll::Gather,
                    Form::Nonblocking,
                    own_block(me, root, &v, &blocks),
                )
                .vform(true)
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.gather_sched(CALL, tag, (me != root).then_some(&v), &blocks, root, algo))
        })
    }
}

/// This rank's bytes in an in-place rooted collective: its block of the
/// root's buffer at the root, its whole buffer elsewhere.
pub(super) fn own_block(me: i32, root: i32, v: &View, blocks: &[View]) -> usize {
    if me == root {
        blocks[root as usize].bytes()
    } else {
        v.bytes()
    }
}
