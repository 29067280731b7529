//! Non-blocking collectives through the shared-memory area.
//!
//! `MPI_Iallreduce` of 1 byte up to a slot (`coll_shm_max`) of one
//! predefined type with a predefined element-wise op, on a communicator
//! whose area is already set up (a non-blocking call never sets one up:
//! that is collective, and the call must stay local), takes the area's non-blocking exchange
//! ([`ShmColl::nb_start`]) instead of a point-to-point schedule: the call
//! publishes its header and contribution (or, when an earlier one is still
//! pending, leaves a copy that is published in turn) and parks a request
//! whose one step ([`Step::Area`]) finishes the exchange once every rank
//! has published: the same header checks and the same rank-order
//! reduction as the blocking tiny road (`allreduce_tiny`), so every rank
//! gets the same bits. Every progress pass polls it ([`outcome`]), so a
//! program that tests, or waits on anything, completes it, and a rank that
//! computes meanwhile finds it done.
//!
//! The area's epochs are shared with the blocking collectives, which MPI
//! orders alike on every rank: a blocking collective on the communicator
//! first finishes every pending non-blocking one ([`Ready::drain`], which
//! may wait: every rank started them before this call). Every rank takes
//! the same road, decided by what every rank knows alike: the call, its
//! size, the op, and whether the area is set up, never by where a rank's
//! data lies: contiguous host memory is read and written in place, and
//! anything else (device or managed memory, a strided datatype) is packed
//! at the start and unpacked at the end.

use std::collections::VecDeque;

use gmpi_btl_shm::ShmColl;

use super::super::sched::{Sched, Step};
use super::super::select::{self, Coll, Form};
use super::wire::{self, header, kind, HDR};
use super::{area_of, reduce_tiny, tiny_mismatch};
use crate::buffer::{HostMem, View};
use crate::comm::{CommInner, Communicator, ShmState};
use crate::engine;
use crate::error::{Error, ErrorClass, Result};
use crate::op::{Kernel, Op};
use crate::progress::HostMemory;
use crate::request::{Request, Status};

/// A communicator's area once set up, and its non-blocking operations not
/// finished yet.
#[derive(Debug)]
pub(crate) struct Ready {
    pub(crate) coll: ShmColl,
    /// One per pending exchange of the area, in the same (epoch) order.
    ops: VecDeque<NbReduce>,
    /// The last non-blocking epoch finished (0: none).
    finished: u64,
    /// Errors of finished operations whose requests have not looked yet.
    failed: Vec<(u64, Error)>,
}

/// A non-blocking allreduce in flight.
#[derive(Debug)]
struct NbReduce {
    e: u64,
    call: &'static str,
    me: i32,
    /// The header this rank published (poisoned if its contribution could
    /// not be copied out of the device: `pack_err`).
    hdr: [u8; HDR],
    kernel: Kernel,
    recv: View,
    /// `recv` is contiguous host memory at this address (else the result
    /// is staged and unpacked).
    out_host: Option<u64>,
    pack_err: Option<Error>,
}

impl NbReduce {
    /// Reduce the exchange's `slots` into the receive buffer, or say why not.
    fn complete(self, slots: &[&[u8]]) -> Result<()> {
        let len = self.recv.bytes();
        if let Some(err) = self.pack_err {
            // The others fail naming this rank (its header is poisoned).
            return Err(err);
        }
        if let Some(err) = tiny_mismatch(self.call, self.me, &self.hdr, HDR + len, slots) {
            return Err(err);
        }
        if let Some(dst) = self.out_host {
            HostMem.with_write(dst, len, |out| reduce_tiny(self.kernel, slots, out));
            return Ok(());
        }
        let mut st = vec![0u8; len];
        reduce_tiny(self.kernel, slots, &mut st);
        self.recv.unpack(self.call, self.me, &st)
    }
}

impl Ready {
    pub(crate) fn new(coll: ShmColl) -> Self {
        Self {
            coll,
            ops: VecDeque::new(),
            finished: 0,
            failed: Vec::new(),
        }
    }

    /// Whether non-blocking operations are pending.
    pub(crate) fn pending(&self) -> bool {
        !self.ops.is_empty()
    }

    /// Finish the pending operations that can finish now, oldest first.
    pub(crate) fn poll(&mut self) {
        while !self.ops.is_empty() {
            let Ready {
                coll,
                ops,
                finished,
                failed,
            } = self;
            if coll
                .nb_try_finish(|e, slots| end(ops, finished, failed, e, slots))
                .is_none()
            {
                return;
            }
        }
    }

    /// Finish every pending operation, waiting as long as it takes (the
    /// first step of a blocking collective on the communicator); `idle` as
    /// in the area's waits.
    pub(crate) fn drain(&mut self, idle: &mut dyn FnMut(u32) -> Result<()>) -> Result<()> {
        while !self.ops.is_empty() {
            let Ready {
                coll,
                ops,
                finished,
                failed,
            } = self;
            coll.nb_finish(idle, |e, slots| end(ops, finished, failed, e, slots))?;
        }
        Ok(())
    }

    /// The outcome of the non-blocking operation of epoch `e`, once it has
    /// finished.
    fn outcome(&mut self, e: u64) -> Option<Result<()>> {
        if e > self.finished {
            return None;
        }
        Some(match self.failed.iter().position(|(f, _)| *f == e) {
            Some(i) => Err(self.failed.swap_remove(i).1),
            None => Ok(()),
        })
    }
}

/// The end of the oldest pending operation, epoch `e`, over its slots
/// (the fields of [`Ready`] besides the area, which lends the slots).
fn end(
    ops: &mut VecDeque<NbReduce>,
    finished: &mut u64,
    failed: &mut Vec<(u64, Error)>,
    e: u64,
    slots: &[&[u8]],
) {
    let op = ops
        .pop_front()
        .expect("a non-blocking operation for every pending exchange");
    debug_assert_eq!(op.e, e, "non-blocking operations end in epoch order");
    *finished = e;
    if let Err(err) = op.complete(slots) {
        failed.push((e, err));
    }
}

/// A progress pass's look at the non-blocking operation of epoch `e` on
/// `comm`'s area ([`Step::Area`]): finish what can finish, then its
/// outcome if it has finished. `None` also while another thread holds the
/// area (it is in a collective on the communicator, which finishes it).
pub(crate) fn outcome(comm: &CommInner, call: &'static str, e: u64) -> Option<Result<()>> {
    let mut g = match comm.shm.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    match &mut *g {
        ShmState::Ready(a) => {
            a.poll();
            a.outcome(e)
        }
        _ => Some(Err(Error::new(
            ErrorClass::Other,
            call,
            comm.rank,
            "the communicator's shared-memory area is gone while this operation was pending",
        ))),
    }
}

impl Communicator {
    /// The non-blocking road of a small allreduce (see the module header):
    /// `None`, before any effect, sends the call to its schedule.
    pub(in crate::coll) fn iallreduce_area<'a>(
        &self,
        send: Option<&View>,
        recv: &View,
        op: &Op,
    ) -> Option<Result<Request<'a>>> {
        const CALL: &str = "MPI_Iallreduce";
        let len = recv.bytes();
        let input = send.unwrap_or(recv);
        if len == 0 || input.bytes() != len || !recv.writable {
            return None;
        }
        // The op and the signature decide (the same on every rank); where
        // the data lies does not: other ranks may lay it out differently.
        let kernel = crate::op::kernel(op, input.ty.prim()?)?;
        let host_at = |v: &View| {
            v.contig_addr()
                .filter(|_| v.kind().is_ok_and(|k| k.is_host()))
        };
        let (src_host, out_host) = (host_at(input), host_at(recv));
        if self.is_inter() || self.check_live(CALL).is_err() {
            return None;
        }
        let me = self.rank();
        let h = engine::with(CALL, |e| {
            let q = self.query(Coll::Allreduce, Form::Nonblocking, len);
            if !select::nb_area_wanted(&q, &e.coll) {
                return Ok(None);
            }
            let mut g = self.lock_area(CALL)?;
            let q = q.area(area_of(&g));
            let ShmState::Ready(a) = &mut *g else {
                return Ok(None);
            };
            if !select::nb_area_room(&q) {
                return Ok(None);
            }
            let tag = self.next_nb_tag();
            a.poll();
            let mut hdr = header(kind::REDUCE, -1, Some(op), len);
            let (ep, pack_err) = if let Some(src) = src_host {
                // Published straight from the user's buffer (or copied
                // once, if it must wait to be).
                let ep = HostMem.with_read(src, len, |d| a.coll.nb_start(&[&hdr, d]));
                (ep, None)
            } else {
                let mut buf = vec![0u8; len];
                let packed = input.pack_into(CALL, me, &mut buf);
                if packed.is_err() {
                    // It still takes part, so that the others fail naming it.
                    wire::poison(&mut hdr);
                }
                (a.coll.nb_start(&[&hdr, &buf]), packed.err())
            };
            a.ops.push_back(NbReduce {
                e: ep,
                call: CALL,
                me,
                hdr,
                kernel,
                recv: recv.clone(),
                out_host,
                pack_err,
            });
            tracing::debug!(target: "coll", "{CALL}: shared memory, {len} B, non-blocking (epoch {ep})");
            // The others may all have published already: then it ends here,
            // with no request to park.
            a.poll();
            if let Some(r) = a.outcome(ep) {
                return r.map(|()| Some(None));
            }
            drop(g);
            let mut s = Sched::new(CALL, &self.inner, tag);
            s.push(Step::Area(ep));
            Ok(Some(Some(e.park(s))))
        });
        match h {
            Ok(Some(Some(h))) => Some(Ok(Request::new(h, CALL))),
            Ok(Some(None)) => Some(Ok(Request::completed(CALL, Status::empty()))),
            Ok(None) => None,
            Err(err) => Some(Err(err)),
        }
    }
}
