//! Reduce (`MPI_Reduce`, `MPI_Ireduce`, in place or not) and the local
//! reduction `MPI_Reduce_local`: one exchange through the shared-memory
//! area on single-node communicators, every input combined at the root in
//! rank order (`shm/`), else a binomial tree (`algo::reduce_binomial`),
//! rooted at rank 0 and combined in rank order for a non-commutative op.

use super::algo;
use super::check::reduction;
use super::run::{Choice, Staged};
use super::sched::{Reduction, Sched};
use super::select::{Algo, Coll, Form, Query};
use crate::buffer::{Buffer, BufferMut, HostMem, View};
use crate::comm::Communicator;
use crate::error::{Error, ErrorClass, Result};
use crate::op::Op;
use crate::request::Request;

impl Communicator {
    #[allow(clippy::too_many_arguments)]
    fn reduce_sched(
        &self,
        call: &'static str,
        tag: i32,
        send: Option<&View>,
        recv: &View,
        op: &Op,
        root: i32,
        red: Reduction,
        algo: Algo,
    ) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        s.red = Some(red);
        let mut st = Staged::default();
        let (n, me) = (self.size(), self.rank());
        let commutative = op.is_commutative();
        // Input and the accumulator: at the root the receive buffer; a leaf
        // sends straight from its input; others use a temporary. The input
        // is read where it is (see `reduce_binomial`).
        let bytes = if me == root {
            recv.bytes()
        } else {
            send.unwrap_or(recv).bytes()
        };
        let (input, acc) = if me == root {
            match send {
                Some(sv) => {
                    let out = st.out(&mut s, recv);
                    (s.input(sv), out)
                }
                None => {
                    let io = st.inout(&mut s, recv);
                    (io, io)
                }
            }
        } else {
            let i = s.input(send.unwrap_or(recv));
            let tree_root = if commutative { root } else { 0 };
            let rel = (me - tree_root).rem_euclid(n);
            if rel % 2 == 1 {
                (i, i)
            } else {
                (i, s.temp(bytes))
            }
        };
        match algo {
            Algo::ReduceBinomial { .. } => {
                let tmp = s.temp(bytes);
                let res = algo::reduce_binomial(&mut s, n, me, root, input, acc, tmp, commutative);
                if me == root {
                    s.copy(res, acc);
                }
            }
            Algo::Local => s.copy(input, acc),
            _ => unreachable!("{call}: {algo:?} is not a reduce"),
        }
        st.finish(&mut s);
        s
    }

    /// The selector's question about a reduce of `bytes` with `op`.
    fn reduce_query(&self, form: Form, bytes: usize, op: &Op) -> Query {
        self.query(Coll::Reduce, form, bytes)
            .commutative(op.is_commutative())
    }

    fn reduce_checked(
        &self,
        call: &'static str,
        send: Option<&View>,
        recv: &View,
        op: &Op,
        root: i32,
    ) -> Result<Reduction> {
        self.check_root(call, root)?;
        let me = self.rank();
        let input = send.unwrap_or(recv);
        if me == root {
            if let Some(sv) = send {
                self.same_bytes(
                    call,
                    ("the send buffer", sv.bytes()),
                    ("the receive buffer", recv.bytes()),
                )?;
            }
        }
        reduction(call, me, op, &input.ty)
    }

    /// Reduce every rank's `send` with `op` into `recv` at `root`
    /// (`MPI_Reduce`). `recv` is only written at the root (other ranks may
    /// pass an empty slice).
    pub fn reduce<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: impl Into<Op>,
        root: i32,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Reduce";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_blocking(CALL, |c, tag| {
                c.inter_reduce(CALL, tag, &sv, &rv, &op, root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        if let Some(r) = self.reduce_root_tiny(Some(&sv), &rv, &op, root) {
            return r;
        }
        let red = self.reduce_checked(CALL, Some(&sv), &rv, &op, root)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, root, Some(&op), Some(sv.bytes()))?;
            let q = c.reduce_query(Form::Blocking, sv.bytes(), &op);
            match c.choose(e, CALL, tag, q)? {
                Choice::Shm(area) => {
                    c.shm_reduce(e, CALL, area, &sv, Some(&rv), &red, Some(root))?;
                    Ok(None)
                }
                Choice::Sched(algo) => Ok(Some(c.reduce_sched(
                    CALL,
                    tag,
                    Some(&sv),
                    &rv,
                    &op,
                    root,
                    red,
                    algo,
                ))),
            }
        })
    }

    /// [`Communicator::reduce`] in place: at the root `buf` is both input and
    /// result; elsewhere it is the input (`MPI_IN_PLACE`).
    pub fn reduce_in_place<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        op: impl Into<Op>,
        root: i32,
    ) -> Result<()> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Reduce";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        if let Some(r) = self.reduce_root_tiny(None, &v, &op, root) {
            return r;
        }
        let red = self.reduce_checked(CALL, None, &v, &op, root)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, root, Some(&op), Some(v.bytes()))?;
            let q = c
                .reduce_query(Form::Blocking, v.bytes(), &op)
                .in_place(true);
            match c.choose(e, CALL, tag, q)? {
                Choice::Shm(area) => {
                    let out = (c.rank() == root).then_some(&v);
                    c.shm_reduce(e, CALL, area, &v, out, &red, Some(root))?;
                    Ok(None)
                }
                Choice::Sched(algo) => Ok(Some(
                    c.reduce_sched(CALL, tag, None, &v, &op, root, red, algo),
                )),
            }
        })
    }

    /// Start a reduce (`MPI_Ireduce`).
    pub fn ireduce<'a, S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        op: impl Into<Op>,
        root: i32,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Ireduce";
        if self.is_inter() {
            let (sv, rv) = (send.view(), recv.view_mut());
            return self.inter_nonblocking(CALL, |c, tag| {
                c.inter_reduce(CALL, tag, &sv, &rv, &op, root)
            });
        }
        let (sv, rv) = (send.view(), recv.view_mut());
        let red = self.reduce_checked(CALL, Some(&sv), &rv, &op, root)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c.reduce_query(Form::Nonblocking, sv.bytes(), &op);
            let algo = c.pick(e, CALL, &q);
            Ok(c.reduce_sched(CALL, tag, Some(&sv), &rv, &op, root, red, algo))
        })
    }

    /// Start an in-place reduce (`MPI_Ireduce` with `MPI_IN_PLACE` at the
    /// root): as [`Communicator::reduce_in_place`], `buf` is the input and
    /// (at the root) the result.
    pub fn ireduce_in_place<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        op: impl Into<Op>,
        root: i32,
    ) -> Result<Request<'a>> {
        let op: Op = op.into();
        const CALL: &str = "MPI_Ireduce";
        self.check_in_place(CALL)?;
        let v = buf.view_mut();
        let red = self.reduce_checked(CALL, None, &v, &op, root)?;
        self.nonblocking(CALL, |c, e, tag| {
            let q = c
                .reduce_query(Form::Nonblocking, v.bytes(), &op)
                .in_place(true);
            let algo = c.pick(e, CALL, &q);
            Ok(c.reduce_sched(CALL, tag, None, &v, &op, root, red, algo))
        })
    }
}

/// Combine `inbuf` into `inout` element by element, `inout = inbuf ∘ inout`
/// (`MPI_Reduce_local`): no communication.
pub fn reduce_local<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
    inbuf: &S,
    inout: &mut R,
    op: impl Into<Op>,
) -> Result<()> {
    const CALL: &str = "MPI_Reduce_local";
    let op: Op = op.into();
    let (iv, ov) = (inbuf.view(), inout.view_mut());
    if iv.bytes() != ov.bytes() {
        return Err(Error::new(
            ErrorClass::Count,
            CALL,
            -1,
            format!(
                "inbuf holds {} bytes but inoutbuf {}",
                iv.bytes(),
                ov.bytes()
            ),
        ));
    }
    let red = reduction(CALL, -1, &op, &ov.ty)?;
    // Contiguous host buffers that do not overlap: reduced in place, with
    // no copy of either (4 KiB of MPI_INT: 0.35 µs through the copies).
    let len = ov.bytes();
    if let (Some(s), Some(d)) = (iv.contig_addr(), ov.contig_addr()) {
        let apart = s.saturating_add(len as u64) <= d || d.saturating_add(len as u64) <= s;
        if apart && iv.is_host() && ov.is_host() {
            use crate::progress::HostMemory;
            let cnt = len / red.unit;
            // Classified above: straight to the memory, not through
            // `read_contig`/`write_contig`, which would classify again.
            HostMem.with_read(s, len, |a| {
                HostMem.with_write(d, len, |b| {
                    crate::op::apply_datatype(&red.op, red.dt, cnt, a, b)
                })
            });
            return Ok(());
        }
    }
    let a = iv.pack(CALL, -1)?;
    let mut b = ov.pack(CALL, -1)?;
    let cnt = b.len() / red.unit;
    crate::op::apply_datatype(&red.op, red.dt, cnt, &a, &mut b);
    ov.unpack(CALL, -1, &b)
}
