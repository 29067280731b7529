//! Reduce-scatter (`MPI_Reduce_scatter`, `MPI_Reduce_scatter_block`,
//! their `i`-forms, in place or not): a ring for commutative ops, else a
//! binomial reduce in rank order to rank 0 followed by a linear scatter
//! (`algo.rs`; the choice in `select.rs`); on single-node communicators,
//! blocking calls whose whole input fits the shared-memory area's slot take
//! one exchange through it (`shm/`).

use super::algo;
use super::check::reduction;
use super::run::{Choice, Staged};
use super::sched::{Reduction, Region, Sched};
use super::select::{Algo, Coll, Form, Query};
use crate::buffer::{Buffer, BufferMut, View};
use crate::comm::Communicator;
use crate::engine::Locked;
use crate::error::{ErrorClass, Result};
use crate::op::Op;
use crate::request::Request;

impl Communicator {
    #[allow(clippy::too_many_arguments)]
    fn reduce_scatter_sched(
        &self,
        call: &'static str,
        tag: i32,
        send: Option<&View>,
        recv: &View,
        counts: &[usize],
        red: Reduction,
        algo: Algo,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let unit = red.unit;
        s.red = Some(red);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let total: usize = counts.iter().sum::<usize>() * unit;
        // The whole contribution in a writable accumulator.
        let (acc, out) = match send {
            Some(sv) => {
                let i = s.input(sv);
                let t = s.temp(total);
                s.copy(i, t);
                (t, st.out(&mut s, recv))
            }
            None => {
                // In place: `recv` holds the whole input; the result lands in
                // its first block and the rest stays as it was (as MPICH
                // leaves it), so accumulate in a copy.
                let io = st.inout(&mut s, recv);
                let t = s.temp(total);
                s.copy(io, t);
                (t, io.sub(0, counts[me as usize] * unit))
            }
        };
        let mut off = 0;
        let blocks: Vec<Region> = counts
            .iter()
            .map(|&c| {
                let r = acc.sub(off, c * unit);
                off += c * unit;
                r
            })
            .collect();
        match algo {
            Algo::ReduceScatterRing => {
                let tmp = s.temp(counts.iter().max().copied().unwrap_or(0) * unit);
                algo::reduce_scatter_ring(&mut s, n, me, &blocks, tmp);
                let tmp2 = s.temp(blocks[me as usize].len);
                // `out` may overlap `acc` (in place): go through a temporary.
                s.copy(blocks[me as usize], tmp2);
                s.copy(tmp2, out);
            }
            Algo::ReduceScatterRankOrder => {
                let tmp = s.temp(total);
                let res = algo::reduce_binomial(&mut s, n, me, 0, acc, acc, tmp, false);
                let rblocks: Vec<Region> = if me == 0 {
                    let mut off = 0;
                    counts
                        .iter()
                        .map(|&c| {
                            let r = res.sub(off, c * unit);
                            off += c * unit;
                            r
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let mine = s.temp(counts[me as usize] * unit);
                algo::scatter_linear(&mut s, n, me, 0, &rblocks, Some(mine));
                s.copy(mine, out);
            }
            Algo::Local => {
                let t = s.temp(out.len);
                s.copy(blocks[0], t);
                s.copy(t, out);
            }
            _ => unreachable!("{call}: {algo:?} is not a reduce-scatter"),
        }
        st.finish(&mut s);
        s
    }

    /// A blocking reduce-scatter: through the shared-memory area if the
    /// selector says so (done: `None`), else the schedule to drive.
    #[allow(clippy::too_many_arguments)]
    fn reduce_scatter_run(
        &self,
        e: &mut Locked,
        call: &'static str,
        tag: i32,
        q: Query,
        send: Option<&View>,
        recv: &View,
        counts: &[usize],
        red: Reduction,
    ) -> Result<Option<Sched>> {
        match self.choose(e, call, tag, q)? {
            Choice::Shm(area) => {
                let me = self.rank() as usize;
                let input = send.unwrap_or(recv);
                // In place the result lands in the first block of `recv`.
                let mine;
                let out = match send {
                    Some(_) => recv,
                    None => {
                        let elems = counts[me] * red.unit / recv.ty.size().max(1);
                        mine = recv
                            .sub(0, elems)
                            .expect("the first block is inside the buffer");
                        &mine
                    }
                };
                self.shm_reduce_scatter(e, call, area, input, out, counts, &red)?;
                Ok(None)
            }
            Choice::Sched(algo) => Ok(Some(
                self.reduce_scatter_sched(call, tag, send, recv, counts, red, algo),
            )),
        }
    }

    /// The selector's question about a reduce-scatter of `counts` (in
    /// reduction units).
    fn reduce_scatter_query(
        &self,
        form: Form,
        counts: &[usize],
        red: &Reduction,
        in_place: bool,
    ) -> Query {
        let total = counts.iter().sum::<usize>() * red.unit;
        self.query(Coll::ReduceScatter, form, total)
            .commutative(red.op.is_commutative())
            .unit(red.unit)
            .in_place(in_place)
    }

    fn reduce_scatter_args(
        &self,
        call: &str,
        send: Option<&View>,
        recv: &View,
        counts: &[i32],
        op: &Op,
    ) -> Result<(Vec<usize>, Reduction)> {
        let n = self.size() as usize;
        if counts.len() != n {
            return Err(self.err(
                ErrorClass::Arg,
                call,
                format!("{} counts for {n} ranks", counts.len()),
            ));
        }
        if let Some((i, c)) = counts.iter().enumerate().find(|(_, &c)| c < 0) {
            return Err(self.err(
                ErrorClass::Count,
                call,
                format!("count[{i}] = {c} is negative"),
            ));
        }
        let input = send.unwrap_or(recv);
        let red = reduction(call, self.rank(), op, &input.ty)?;
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        // Counts are in elements of the input's type.
        let elem = input.ty.size();
        self.same_bytes(
            call,
            ("the input", input.bytes()),
            ("the sum of the counts", total * elem),
        )?;
        let me = self.rank() as usize;
        if send.is_some() {
            self.same_bytes(
                call,
                ("the receive buffer", recv.bytes()),
                ("this rank's count", counts[me] as usize * elem),
            )?;
        }
        // Counts in reduction units.
        let per = elem / red.unit.max(1);
        Ok((counts.iter().map(|&c| c as usize * per).collect(), red))
    }

    /// Reduce every rank's `send` (`size` blocks of `recv.len()` elements)
    /// with `op`; rank `i` gets block `i` of the result in `recv`
    /// (`MPI_Reduce_scatter_block`).
    pub fn reduce_scatter_block<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: impl Into<Op>,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Reduce_scatter_block";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_reduce_scatter_block(CALL, tag, &sv, &rv, &op)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        if let Some(r) = self.reduce_scatter_tiny(CALL, &sv, &rv, &op) {
            return r;
        }
        let (counts, red) = self.reduce_scatter_block_args(CALL, Some(&sv), &rv, &op)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, -1, Some(&op), Some(sv.bytes()))?;
            let q = c.reduce_scatter_query(Form::Blocking, &counts, &red, false);
            c.reduce_scatter_run(e, CALL, tag, q, Some(&sv), &rv, &counts, red)
        })
    }

    /// [`Communicator::reduce_scatter_block`] in place: `buf` holds the
    /// `size` blocks of input; this rank's block of the result lands in its
    /// first block.
    pub fn reduce_scatter_block_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        op: impl Into<Op>,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Reduce_scatter_block";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let (counts, red) = self.reduce_scatter_block_args(CALL, None, &v, &op)?;
        self.blocking(CALL, |c, e, tag| {
            let q = c.reduce_scatter_query(Form::Blocking, &counts, &red, true);
            c.reduce_scatter_run(e, CALL, tag, q, None, &v, &counts, red)
        })
    }

    /// The counts (in reduction units) and reduction of a reduce-scatter
    /// with equal blocks; `send` is `None` in place (then `recv` holds all
    /// `size` blocks).
    fn reduce_scatter_block_args(
        &self,
        call: &str,
        send: Option<&View>,
        recv: &View,
        op: &Op,
    ) -> Result<(Vec<usize>, Reduction)> {
        let n = self.size() as usize;
        let counts = match send {
            Some(sv) => {
                vec![recv.count as i32 * (recv.ty.size() / sv.ty.size().max(1)).max(1) as i32; n]
            }
            None => {
                if !recv.count.is_multiple_of(n) {
                    return Err(self.err(
                        ErrorClass::Count,
                        call,
                        format!(
                            "the buffer has {} elements, not a multiple of the communicator size {n}",
                            recv.count
                        ),
                    ));
                }
                vec![(recv.count / n) as i32; n]
            }
        };
        self.reduce_scatter_args(call, send, recv, &counts, op)
    }

    /// Start a reduce-scatter with equal blocks (`MPI_Ireduce_scatter_block`).
    pub fn ireduce_scatter_block<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Ireduce_scatter_block";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_reduce_scatter_block(CALL, tag, &sv, &rv, &op)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (counts, red) = self.reduce_scatter_block_args(CALL, Some(&sv), &rv, &op)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c.reduce_scatter_query(Form::Nonblocking, &counts, &red, false);
            let algo = c.pick(e, CALL, &q);
            Ok(c.reduce_scatter_sched(CALL, tag, Some(&sv), &rv, &counts, red, algo))
        })
    }

    /// Start an in-place reduce-scatter with equal blocks
    /// (`MPI_Ireduce_scatter_block` with `MPI_IN_PLACE`): as
    /// [`Communicator::reduce_scatter_block_in_place`].
    pub fn ireduce_scatter_block_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Ireduce_scatter_block";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let (counts, red) = self.reduce_scatter_block_args(CALL, None, &v, &op)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c.reduce_scatter_query(Form::Nonblocking, &counts, &red, true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.reduce_scatter_sched(CALL, tag, None, &v, &counts, red, algo))
        })
    }

    /// Reduce, then scatter blocks of `counts[i]` elements to rank `i`
    /// (`MPI_Reduce_scatter`).
    pub fn reduce_scatter<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        counts: &[i32],
        op: impl Into<Op>,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Reduce_scatter";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_reduce_scatter(CALL, tag, &sv, &rv, counts, &op)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        // Equal counts: the same exchange as a reduce-scatter of blocks.
        let equal = counts.len() == self.size() as usize && counts.windows(2).all(|w| w[0] == w[1]);
        if equal {
            if let Some(r) = self.reduce_scatter_tiny(CALL, &sv, &rv, &op) {
                return r;
            }
        }
        let (counts, red) = self.reduce_scatter_args(CALL, Some(&sv), &rv, counts, &op)?;
        self.blocking(CALL, |c, e, tag| {
            let q = c.reduce_scatter_query(Form::Blocking, &counts, &red, false);
            c.reduce_scatter_run(e, CALL, tag, q, Some(&sv), &rv, &counts, red)
        })
    }

    /// [`Communicator::reduce_scatter`] in place: `buf` holds the whole input;
    /// this rank's block of the result lands at its start.
    pub fn reduce_scatter_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        counts: &[i32],
        op: impl Into<Op>,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Reduce_scatter";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let (counts, red) = self.reduce_scatter_args(CALL, None, &v, counts, &op)?;
        self.blocking(CALL, |c, e, tag| {
            let q = c.reduce_scatter_query(Form::Blocking, &counts, &red, true);
            c.reduce_scatter_run(e, CALL, tag, q, None, &v, &counts, red)
        })
    }

    /// Start a reduce-scatter (`MPI_Ireduce_scatter`).
    pub fn ireduce_scatter<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        counts: &[i32],
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Ireduce_scatter";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_reduce_scatter(CALL, tag, &sv, &rv, counts, &op)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let (counts, red) = self.reduce_scatter_args(CALL, Some(&sv), &rv, counts, &op)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c.reduce_scatter_query(Form::Nonblocking, &counts, &red, false);
            let algo = c.pick(e, CALL, &q);
            Ok(c.reduce_scatter_sched(CALL, tag, Some(&sv), &rv, &counts, red, algo))
        })
    }

    /// Start an in-place reduce-scatter (`MPI_Ireduce_scatter` with
    /// `MPI_IN_PLACE`): as [`Communicator::reduce_scatter_in_place`].
    pub fn ireduce_scatter_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        counts: &[i32],
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Ireduce_scatter";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let (counts, red) = self.reduce_scatter_args(CALL, None, &v, counts, &op)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c.reduce_scatter_query(Form::Nonblocking, &counts, &red, true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.reduce_scatter_sched(CALL, tag, None, &v, &counts, red, algo))
        })
    }
}
