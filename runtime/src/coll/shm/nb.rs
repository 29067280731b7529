//! Non-blocking collectives through a shared-memory area of their own.
//!
//! A single-node communicator whose ranks all agree on it without a wait
//! (`MPI_COMM_WORLD`, set up at `MPI_Init`: [`Communicator::setup_nb_area`])
//! has a second area beside the blocking collectives' one
//! ([`CommInner::nb_area`]), with epochs of its own: MPI programs order
//! non-blocking collectives apart from blocking ones (mpi4py's `test_ulfm`
//! starts an `MPI_Iallreduce` on one rank before a barrier that the others
//! enter first), as MPICH and Open MPI match them, so the two kinds must
//! never share an epoch sequence. (A communicator made later would have to
//! set its area up in a call every rank makes before any of its
//! non-blocking collectives; they take their schedules.)
//!
//! `MPI_Iallreduce` of 1 byte up to a slot (`coll_shm_max`) of one
//! predefined type with a predefined element-wise op takes the area's
//! non-blocking exchange ([`ShmColl::nb_start`]) instead of a
//! point-to-point schedule: the call publishes its header and contribution
//! (or, when an earlier one is still pending, leaves a copy that is
//! published in turn) and parks a request in the engine
//! ([`Engine::park_area`](crate::engine::Engine::park_area): no schedule,
//! whose building, parking and taking cost a small call more than the
//! exchange) that finishes the exchange once every rank has published: the
//! same header checks and the same rank-order reduction as the blocking
//! tiny road (`allreduce_tiny`), so every rank gets the same bits. The call
//! itself does not look at the others' slots (lines they write, each a
//! transfer from another cache): every progress pass does ([`outcome`]),
//! so a program that tests, or waits on anything, completes it, and a rank
//! that computes meanwhile finds it done.
//!
//! Every rank takes the same road, decided by what every rank knows alike:
//! the call, its size, the op, and whether the communicator has the area,
//! never by where a rank's data lies: contiguous host memory is read and
//! written in place, and anything else (device or managed memory, a strided
//! datatype) is packed at the start and unpacked at the end.

use std::collections::VecDeque;

use gmpi_btl_shm::ShmColl;

use super::super::select::{self, Area, Coll, Form};
use super::wire::{self, header, kind, HDR};
use super::{reduce_tiny, tiny_host, tiny_mismatch};
use crate::buffer::{HostMem, View};
use crate::comm::{CommInner, Communicator};
use crate::engine::{self, Locked};
use crate::error::{Error, ErrorClass, Result};
use crate::op::{Kernel, Op};
use crate::progress::HostMemory;
use crate::request::Request;

/// A communicator's area of non-blocking collectives, and its operations
/// not finished yet.
#[derive(Debug)]
pub(crate) struct Ready {
    coll: ShmColl,
    /// One per pending exchange of the area, in the same (epoch) order.
    ops: VecDeque<NbReduce>,
    /// The last epoch finished (0: none).
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
    fn new(coll: ShmColl) -> Self {
        Self {
            coll,
            ops: VecDeque::new(),
            finished: 0,
            failed: Vec::new(),
        }
    }

    /// The area as the selector sees it.
    fn area(&self) -> Area {
        match self.coll.is_broken() {
            true => Area::None,
            false => Area::Ready {
                slot: self.coll.slot_bytes(),
                single_copy: self.coll.single_copy(),
            },
        }
    }

    /// Finish the pending operations that can finish now, oldest first.
    fn poll(&mut self) {
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

    /// The outcome of the operation of epoch `e`, once it has finished.
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

/// A progress pass's look at the operation of epoch `e` on `comm`'s area
/// of non-blocking collectives ([`Engine::park_area`](crate::engine::Engine::park_area)): finish what can finish,
/// then its outcome if it has finished. `None` also while another thread
/// holds the area (it starts or polls an operation, and lets go at once).
pub(crate) fn outcome(comm: &CommInner, call: &'static str, e: u64) -> Option<Result<()>> {
    let mut g = match comm.nb_area.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    match &mut *g {
        Some(a) => {
            a.poll();
            a.outcome(e)
        }
        None => Some(Err(Error::new(
            ErrorClass::Other,
            call,
            comm.rank,
            "the communicator's shared-memory area is gone while this operation was pending",
        ))),
    }
}

impl Communicator {
    /// Set up the area of the non-blocking collectives (see the module
    /// header), collectively, on the engine `e` for `call`: only on an
    /// intracommunicator of one node with two ranks or more, where the
    /// blocking collectives may use an area too (`coll_shm`). Every rank
    /// gets it or none does (`ShmColl::bootstrap`); without it the
    /// non-blocking collectives take their schedules.
    pub(crate) fn setup_nb_area(&self, e: &mut Locked, call: &'static str) -> Result<()> {
        if self.is_inter() || !self.inner.single_node || self.size() < 2 || !e.coll.shm {
            return Ok(());
        }
        let tag = self.next_tag();
        let area = self.bootstrap_area(e, call, tag, "-nb", false);
        *self.inner.nb_area.lock().unwrap_or_else(|p| p.into_inner()) =
            area.map(|c| Box::new(Ready::new(c)));
        Ok(())
    }

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
        let (src_host, out_host) = (tiny_host(input, len, false), tiny_host(recv, len, true));
        if self.is_inter() || self.check_live(CALL).is_err() {
            return None;
        }
        let me = self.rank();
        let h = engine::with(CALL, |e| {
            let q = self.query(Coll::Allreduce, Form::Nonblocking, len);
            if !select::nb_area_wanted(&q, &e.coll) {
                return Ok(None);
            }
            // Held only while starting (never across a wait); a progress
            // pass of another thread only looks ([`outcome`]).
            let mut g = self.inner.nb_area.lock().unwrap_or_else(|p| p.into_inner());
            let Some(a) = g.as_mut() else {
                return Ok(None);
            };
            if !select::nb_area_room(&q.area(a.area())) {
                return Ok(None);
            }
            // Taken as the schedules' road takes it, so that the tags of
            // later non-blocking collectives stay in step on every rank.
            let _ = self.next_nb_tag();
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
            // The call does not look at the others' slots (lines they
            // write, a transfer from their caches each): the next progress
            // pass does, inside a test or wait, so that the start costs
            // this rank the publication only.
            drop(g);
            Ok(Some(e.park_area(&self.inner, CALL, ep)))
        });
        match h {
            Ok(Some(h)) => Some(Ok(Request::new(h, CALL))),
            Ok(None) => None,
            Err(err) => Some(Err(err)),
        }
    }
}
