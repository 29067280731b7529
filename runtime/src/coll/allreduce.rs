//! Allreduce (`MPI_Allreduce`, `MPI_Iallreduce`, in place or not): on
//! single-node communicators one exchange through the shared-memory area,
//! every input combined on every rank in rank order (`shm/`; 1 B to 1 KiB
//! take its tiny road, `Communicator::allreduce_tiny`, and an
//! `MPI_Iallreduce` up to a slot the non-blocking collectives' area where
//! the communicator has one, `shm/nb.rs`);
//! else recursive doubling, or from `allreduce_large` (commutative ops, an
//! element per rank) a ring: reduce-scatter then allgather (`algo.rs`,
//! thresholds in `select.rs`). Every rank gets the same bits.

use super::algo;
use super::check::reduction;
use super::run::{Choice, Staged};
use super::sched::{Reduction, Sched};
use super::select::{Algo, Coll, Form, Query};
use crate::buffer::{Buffer, BufferMut, View};
use crate::comm::Communicator;
use crate::engine::Locked;
use crate::error::Result;
use crate::op::Op;
use crate::request::Request;

impl Communicator {
    fn allreduce_sched(
        &self,
        call: &'static str,
        tag: i32,
        send: Option<&View>,
        recv: &View,
        red: Reduction,
        algo: Algo,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let unit = red.unit;
        s.red = Some(red);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let bytes = recv.bytes();
        let (input, acc) = match send {
            // Both algorithms read the contribution where it is.
            Some(sv) => {
                let out = st.out(&mut s, recv);
                (s.input(sv), out)
            }
            None => {
                let io = st.inout(&mut s, recv);
                (io, io)
            }
        };
        match algo {
            Algo::AllreduceRing => {
                let (_, first) = algo::split(bytes, unit, n, 0);
                let tmp = (input == acc).then(|| s.temp(first));
                algo::allreduce_ring(&mut s, n, me, input, acc, tmp, unit);
            }
            Algo::AllreduceRecursiveDoubling => {
                let tmp = s.temp(bytes);
                let res = algo::allreduce_recursive_doubling(&mut s, n, me, input, acc, tmp);
                s.copy(res, acc);
            }
            Algo::Local => s.copy(input, acc),
            _ => unreachable!("{call}: {algo:?} is not an allreduce"),
        }
        st.finish(&mut s);
        s
    }

    /// The selector's question about an allreduce of `recv`'s size with
    /// `red`.
    fn allreduce_query(&self, form: Form, recv: &View, red: &Reduction) -> Query {
        self.query(Coll::Allreduce, form, recv.bytes())
            .commutative(red.op.is_commutative())
            .unit(red.unit)
    }

    pub(super) fn allreduce_checked(
        &self,
        call: &'static str,
        send: Option<&View>,
        recv: &View,
        op: &Op,
    ) -> Result<Reduction> {
        if let Some(sv) = send {
            self.same_bytes(
                call,
                ("the send buffer", sv.bytes()),
                ("the receive buffer", recv.bytes()),
            )?;
        }
        reduction(call, self.rank(), op, &send.unwrap_or(recv).ty)
    }

    /// An allreduce of the runtime's own (the engine is already locked).
    pub(crate) fn allreduce_in<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        e: &mut Locked,
        call: &'static str,
        send: &S,
        recv: &mut R,
        op: &Op,
    ) -> Result<()> {
        let (sv, rv) = (send.view(), recv.view_mut());
        let red = self.allreduce_checked(call, Some(&sv), &rv, op)?;
        let tag = self.next_tag();
        let q = self.allreduce_query(Form::Internal, &rv, &red);
        let algo = self.pick(e, call, &q);
        let mut s = self.allreduce_sched(call, tag, Some(&sv), &rv, red, algo);
        e.drive(call, &mut s)
    }

    /// A blocking allreduce past the tiny road (`send` is `None` in place).
    #[inline]
    fn allreduce_blocking(
        &self,
        call: &'static str,
        send: Option<&View>,
        recv: &View,
        op: &Op,
    ) -> Result<()> {
        let red = self.allreduce_checked(call, send, recv, op)?;
        self.blocking(call, |c, e, tag| {
            let input = send.unwrap_or(recv);
            c.check_agree(e, call, -1, Some(op), Some(input.bytes()))?;
            let q = c
                .allreduce_query(Form::Blocking, recv, &red)
                .in_place(send.is_none());
            match c.choose(e, call, tag, q)? {
                Choice::Shm(area) => {
                    c.shm_reduce(e, call, area, input, Some(recv), &red, None)?;
                    Ok(None)
                }
                Choice::Sched(algo) => {
                    Ok(Some(c.allreduce_sched(call, tag, send, recv, red, algo)))
                }
            }
        })
    }

    /// Reduce every rank's `send` with `op`; every rank gets the result in
    /// `recv`, bit for bit the same everywhere (`MPI_Allreduce`).
    pub fn allreduce<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: impl Into<Op>,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Allreduce";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| c.inter_allreduce(CALL, tag, &sv, &rv, &op));
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        if let Some(r) = self.allreduce_tiny(Some(&sv), &rv, &op) {
            return r;
        }
        self.allreduce_blocking(CALL, Some(&sv), &rv, &op)
    }

    /// [`Communicator::allreduce`] in place: `buf` is input and result.
    pub fn allreduce_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        op: impl Into<Op>,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Allreduce";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        if let Some(r) = self.allreduce_tiny(None, &v, &op) {
            return r;
        }
        self.allreduce_blocking(CALL, None, &v, &op)
    }

    /// Start an allreduce (`MPI_Iallreduce`).
    pub fn iallreduce<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Iallreduce";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self
                .inter_nonblocking(CALL, |c, tag| c.inter_allreduce(CALL, tag, &sv, &rv, &op));
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let red = self.allreduce_checked(CALL, Some(&sv), &rv, &op)?;
        if let Some(r) = self.iallreduce_area(Some(&sv), &rv, &op) {
            return r;
        }
        self.nonblocking(CALL, |c, e, tag| {
            let q = c.allreduce_query(Form::Nonblocking, &rv, &red);
            let algo = c.pick(e, CALL, &q);
            Ok(c.allreduce_sched(CALL, tag, Some(&sv), &rv, red, algo))
        })
    }

    /// Start an in-place allreduce (`MPI_Iallreduce` with `MPI_IN_PLACE`).
    pub fn iallreduce_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Iallreduce";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let red = self.allreduce_checked(CALL, None, &v, &op)?;
        if let Some(r) = self.iallreduce_area(None, &v, &op) {
            return r;
        }
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .allreduce_query(Form::Nonblocking, &v, &red)
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.allreduce_sched(CALL, tag, None, &v, red, algo))
        })
    }
}
