//! Broadcast (`MPI_Bcast`, `MPI_Ibcast`): one exchange through the
//! shared-memory area on single-node communicators (`shm/`), else a
//! binomial tree, or for large messages a scatter followed by a ring
//! allgather (`algo.rs`); the threshold is `bcast_large` (`select.rs`).

use super::algo;
use super::run::{Choice, Staged};
use super::sched::Sched;
use super::select::{Algo, Coll, Form};
use crate::buffer::{BufferMut, View};
use crate::comm::Communicator;
use crate::engine::Locked;
use crate::error::Result;
use crate::request::Request;

impl Communicator {
    fn bcast_sched(&self, call: &'static str, tag: i32, v: &View, root: i32, algo: Algo) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        let mut st = Staged::default();
        let me = self.rank();
        let buf = if me == root {
            s.input(v)
        } else {
            st.out(&mut s, v)
        };
        let n = self.size();
        match algo {
            Algo::BcastScatterAllgather => algo::bcast_scatter_allgather(&mut s, n, me, root, buf),
            Algo::BcastBinomial => algo::bcast_binomial(&mut s, n, me, root, buf),
            Algo::Local => {}
            _ => unreachable!("{call}: {algo:?} is not a bcast"),
        }
        st.finish(&mut s);
        s
    }

    /// Broadcast `buf` from `root` to every rank (`MPI_Bcast`).
    pub fn bcast<B: BufferMut + ?Sized>(&self, buf: &mut B, root: i32) -> Result<()> {
        const CALL: &str = "MPI_Bcast";
        if self.is_inter() {
            let v = buf.view_mut();
            return self.inter_blocking(CALL, |c, tag| c.inter_bcast(CALL, tag, &v, root));
        }
        let v = buf.view_mut();
        if let Some(r) = self.bcast_tiny(&v, root) {
            return r;
        }
        self.check_root(CALL, root)?;
        self.blocking(CALL, |c, e, tag| {
            c.check_agree(e, CALL, root, None, Some(v.bytes()))?;
            let q = c.query(Coll::Bcast, Form::Blocking, v.bytes());
            match c.choose(e, CALL, tag, q)? {
                Choice::Shm(area) => {
                    c.shm_bcast(e, CALL, area, &v, root)?;
                    Ok(None)
                }
                Choice::Sched(algo) => Ok(Some(c.bcast_sched(CALL, tag, &v, root, algo))),
            }
        })
    }

    /// A broadcast of the runtime's own (the engine is already locked).
    pub(super) fn bcast_in(
        &self,
        e: &mut Locked,
        call: &'static str,
        v: &View,
        root: i32,
    ) -> Result<()> {
        let tag = self.next_tag();
        let q = self.query(Coll::Bcast, Form::Internal, v.bytes());
        let algo = self.pick(e, call, &q);
        let mut s = self.bcast_sched(call, tag, v, root, algo);
        e.drive(call, &mut s)
    }

    /// Start a broadcast (`MPI_Ibcast`).
    pub fn ibcast<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        root: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Ibcast";
        if self.is_inter() {
            let v = buf.view_mut();
            return self.inter_nonblocking(CALL, |c, tag| c.inter_bcast(CALL, tag, &v, root));
        }
        self.check_root(CALL, root)?;
        let v = buf.view_mut();
        self.nonblocking(CALL, |c, e, tag| {
            let q = c.query(Coll::Bcast, Form::Nonblocking, v.bytes());
            let algo = c.pick(e, CALL, &q);
            Ok(c.bcast_sched(CALL, tag, &v, root, algo))
        })
    }
}
