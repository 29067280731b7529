//! Scans (`MPI_Scan`, `MPI_Exscan`, their `i`-forms, in place or not):
//! recursive doubling (`algo::scan`), combined in rank order. Not defined
//! on intercommunicators. No shared-memory path.

use super::algo;
use super::run::Staged;
use super::sched::{Reduction, Sched};
use super::select::{Algo, Coll, Form, Query};
use crate::buffer::{Buffer, BufferMut, View};
use crate::comm::Communicator;
use crate::error::Result;
use crate::op::Op;
use crate::request::Request;

impl Communicator {
    #[allow(clippy::too_many_arguments)]
    fn scan_sched(
        &self,
        call: &'static str,
        tag: i32,
        send: Option<&View>,
        recv: &View,
        red: Reduction,
        exclusive: bool,
        algo: Algo,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        s.red = Some(red);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let bytes = recv.bytes();
        let (input, result) = match send {
            Some(sv) => {
                let i = s.input(sv);
                // Exscan leaves rank 0's receive buffer alone.
                let r = if exclusive && me == 0 {
                    s.temp(bytes)
                } else {
                    st.out(&mut s, recv)
                };
                (i, r)
            }
            None => {
                let io = st.inout(&mut s, recv);
                let t = s.temp(bytes);
                s.copy(io, t);
                (t, io)
            }
        };
        let partial = s.temp(bytes);
        s.copy(input, partial);
        if !exclusive && send.is_some() {
            s.copy(input, result);
        }
        match algo {
            Algo::ScanRecursiveDoubling => {
                let tmp = s.temp(bytes);
                algo::scan(&mut s, n, me, result, partial, tmp, exclusive);
            }
            Algo::Local => {}
            _ => unreachable!("{call}: {algo:?} is not a scan"),
        }
        st.finish(&mut s);
        s
    }

    /// The selector's question about a scan into `recv` (`send` is `None`
    /// in place).
    fn scan_query(&self, form: Form, send: Option<&View>, recv: &View) -> Query {
        self.query(Coll::Scan, form, recv.bytes())
            .in_place(send.is_none())
    }

    /// A blocking scan or exscan (`send` is `None` in place).
    fn scan_blocking(
        &self,
        call: &'static str,
        send: Option<&View>,
        recv: &View,
        op: Op,
        exclusive: bool,
    ) -> Result<()> {
        self.check_intra(call, "a scan")?;
        let red = self.allreduce_checked(call, send, recv, &op)?;
        self.blocking(call, |c, e, tag| {
            let q = c.scan_query(Form::Blocking, send, recv);
            let algo = c.pick(e, call, &q);
            Ok(Some(
                c.scan_sched(call, tag, send, recv, red, exclusive, algo),
            ))
        })
    }

    /// Start a scan or exscan (`send` is `None` in place).
    fn scan_nonblocking<'a>(
        &self,
        call: &'static str,
        send: Option<&View>,
        recv: &View,
        op: Op,
        exclusive: bool,
    ) -> Result<Request<'a>> {
        self.check_intra(call, "a scan")?;
        let red = self.allreduce_checked(call, send, recv, &op)?;
        self.nonblocking(call, |c, e, tag| {
            let q = c.scan_query(Form::Nonblocking, send, recv);
            let algo = c.pick(e, call, &q);
            Ok(c.scan_sched(call, tag, send, recv, red, exclusive, algo))
        })
    }

    /// Inclusive prefix reduction: rank `i` gets `send₀ ∘ … ∘ sendᵢ`
    /// (`MPI_Scan`).
    pub fn scan<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: impl Into<Op>,
    ) -> Result<()> {
        let (sv, rv) = (send.view(), recv.view_mut());
        self.scan_blocking("MPI_Scan", Some(&sv), &rv, op.into(), false)
    }

    /// [`Communicator::scan`] in place.
    pub fn scan_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        op: impl Into<Op>,
    ) -> Result<()> {
        self.scan_blocking("MPI_Scan", None, &buf.view_mut(), op.into(), false)
    }

    /// Start an inclusive scan (`MPI_Iscan`).
    pub fn iscan<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let (sv, rv) = (send.view(), recv.view_mut());
        self.scan_nonblocking("MPI_Iscan", Some(&sv), &rv, op.into(), false)
    }

    /// Start an in-place inclusive scan (`MPI_Iscan` with `MPI_IN_PLACE`).
    pub fn iscan_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        self.scan_nonblocking("MPI_Iscan", None, &buf.view_mut(), op.into(), false)
    }

    /// Exclusive prefix reduction: rank `i > 0` gets `send₀ ∘ … ∘ sendᵢ₋₁`;
    /// rank 0's `recv` is left untouched (`MPI_Exscan`).
    pub fn exscan<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: impl Into<Op>,
    ) -> Result<()> {
        let (sv, rv) = (send.view(), recv.view_mut());
        self.scan_blocking("MPI_Exscan", Some(&sv), &rv, op.into(), true)
    }

    /// [`Communicator::exscan`] in place.
    pub fn exscan_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        op: impl Into<Op>,
    ) -> Result<()> {
        self.scan_blocking("MPI_Exscan", None, &buf.view_mut(), op.into(), true)
    }

    /// Start an exclusive scan (`MPI_Iexscan`).
    pub fn iexscan<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        let (sv, rv) = (send.view(), recv.view_mut());
        self.scan_nonblocking("MPI_Iexscan", Some(&sv), &rv, op.into(), true)
    }

    /// Start an in-place exclusive scan (`MPI_Iexscan` with `MPI_IN_PLACE`).
    pub fn iexscan_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        op: impl Into<Op>,
    ) -> Result<Request<'a>> {
        self.scan_nonblocking("MPI_Iexscan", None, &buf.view_mut(), op.into(), true)
    }
}
