//! Barrier (`MPI_Barrier`, `MPI_Ibarrier`): the shared-memory area's
//! barrier on single-node communicators, else a dissemination barrier
//! (`algo::barrier`).

use super::algo;
use super::run::Choice;
use super::sched::Sched;
use super::select::{Algo, Coll, Form};
use crate::comm::Communicator;
use crate::engine::Locked;
use crate::error::Result;
use crate::request::Request;

impl Communicator {
    /// Block until every rank of the communicator has entered the barrier
    /// (`MPI_Barrier`): a shared-memory barrier on single-node communicators,
    /// else a dissemination barrier.
    pub fn barrier(&self) -> Result<()> {
        const CALL: &str = "MPI_Barrier";
        if self.is_inter() {
            return self.inter_blocking(CALL, |c, tag| Ok(c.inter_barrier(CALL, tag)));
        }
        self.blocking(CALL, |c, e, tag| {
            let q = c.query(Coll::Barrier, Form::Blocking, 0);
            match c.choose(e, CALL, tag, q)? {
                Choice::Shm(area) => {
                    c.shm_barrier(e, CALL, area)?;
                    Ok(None)
                }
                Choice::Sched(algo) => Ok(Some(c.barrier_sched(CALL, tag, algo))),
            }
        })
    }

    fn barrier_sched(&self, call: &'static str, tag: i32, algo: Algo) -> Sched {
        let mut s = Sched::new(call, &self.inner, tag);
        match algo {
            Algo::Dissemination => algo::barrier(&mut s, self.size(), self.rank()),
            _ => unreachable!("{call}: {algo:?} is not a barrier"),
        }
        s
    }

    /// The world barrier finalize runs (the engine is already locked).
    pub(crate) fn barrier_in(&self, e: &mut Locked, call: &'static str) -> Result<()> {
        let tag = self.next_tag();
        let q = self.query(Coll::Barrier, Form::Internal, 0);
        let algo = self.pick(e, call, &q);
        let mut s = self.barrier_sched(call, tag, algo);
        e.drive(call, &mut s)
    }

    /// Start a barrier (`MPI_Ibarrier`).
    pub fn ibarrier(&self) -> Result<Request<'static>> {
        if self.is_inter() {
            return self.inter_nonblocking("MPI_Ibarrier", |c, tag| {
                Ok(c.inter_barrier("MPI_Ibarrier", tag))
            });
        }
        self.nonblocking("MPI_Ibarrier", |c, e, tag| {
            let algo = c.pick(
                e,
                "MPI_Ibarrier",
                &c.query(Coll::Barrier, Form::Nonblocking, 0),
            );
            Ok(c.barrier_sched("MPI_Ibarrier", tag, algo))
        })
    }
}
