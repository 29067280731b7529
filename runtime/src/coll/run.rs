//! How a collective call runs: its tag, the choice of its algorithm (the
//! selector of `select.rs` asked, and the shared-memory area looked at
//! only where the selector may send the call there), and its schedule
//! driven to the end (blocking) or parked in the engine (the `i`-forms),
//! with outputs that are not contiguous staged in temporaries.

use std::sync::atomic::Ordering;

use super::sched::{Region, Sched, Step};
use super::select::{self, Algo, Coll, Form, Query, Said, Settings};
use super::shm::ShmArea;
use crate::buffer::View;
use crate::comm::Communicator;
use crate::engine::{self, Engine, Locked};
use crate::error::Result;
use crate::request::Request;

/// What a blocking call with a shared-memory path runs.
pub(super) enum Choice<'g> {
    /// Through the shared-memory area (`shm/`), locked for the call.
    Shm(ShmArea<'g>),
    /// A schedule of this algorithm.
    Sched(Algo),
}

/// Output regions staged in temporaries, unpacked when the schedule ends.
#[derive(Default)]
pub(crate) struct Staged(Vec<(Region, View)>);

impl Staged {
    /// Where to write `v`'s data.
    pub(crate) fn out(&mut self, s: &mut Sched, v: &View) -> Region {
        let (r, staged) = s.output(v);
        if staged {
            self.0.push((r, v.clone()));
        }
        r
    }

    /// `v`'s data, to be read and overwritten (in-place operations).
    pub(crate) fn inout(&mut self, s: &mut Sched, v: &View) -> Region {
        match v.contig_addr() {
            Some(a) => s.user(a, v.bytes(), true),
            None => {
                let r = s.packed(v);
                self.0.push((r, v.clone()));
                r
            }
        }
    }

    pub(crate) fn finish(self, s: &mut Sched) {
        if self.0.is_empty() {
            return;
        }
        s.wait();
        for (r, v) in self.0 {
            s.push(Step::Unpack {
                src: r,
                view: v,
                received: false,
            });
        }
    }
}

/// The selector's choice, printed under `GMPI_LOG=coll=debug` (a
/// shared-memory barrier, the most frequent, under `coll=trace`; nothing
/// where there is nothing to exchange).
#[inline]
fn selected(call: &str, q: &Query, s: &Settings) -> Algo {
    let algo = select::select(q, s);
    match algo {
        Algo::Local => {}
        Algo::Shm if q.coll == Coll::Barrier => {
            tracing::trace!(target: "coll", "{call}: {}", Said(q, algo));
        }
        _ => tracing::debug!(target: "coll", "{call}: {}", Said(q, algo)),
    }
    algo
}

impl Communicator {
    /// The tag of the next blocking collective (even).
    pub(crate) fn next_tag(&self) -> i32 {
        ((self.inner.coll_seq.fetch_add(1, Ordering::Relaxed) & 0x3fff_ffff) * 2) as i32
    }

    /// The tag of the next non-blocking collective (odd): a sequence of its
    /// own, so blocking and non-blocking collectives never match each other.
    pub(crate) fn next_nb_tag(&self) -> i32 {
        ((self.inner.nb_seq.fetch_add(1, Ordering::Relaxed) & 0x3fff_ffff) * 2 + 1) as i32
    }

    /// A selector query about a call on this communicator (the rest of its
    /// fields at [`Query::new`]'s defaults).
    #[inline]
    pub(super) fn query(&self, coll: Coll, form: Form, bytes: usize) -> Query {
        Query::new(coll, form, self.size(), bytes).one_node(self.inner.single_node)
    }

    /// The algorithm of a call that does not go through the shared-memory
    /// area (the `i`-forms, the runtime's own collectives, and collectives
    /// or forms without a shared-memory path): the area is not looked at,
    /// so the selector never answers [`Algo::Shm`].
    #[inline]
    pub(super) fn pick(&self, e: &Engine, call: &str, q: &Query) -> Algo {
        selected(call, q, &e.coll)
    }

    /// The algorithm of a blocking call with a shared-memory path: where
    /// the selector may send it to the area, the area is locked (and set
    /// up on first use, on the call's `tag`) and looked at first.
    #[inline]
    pub(super) fn choose<'g>(
        &'g self,
        e: &mut Locked,
        call: &'static str,
        tag: i32,
        q: Query,
    ) -> Result<Choice<'g>> {
        let s = e.coll;
        if !select::area_wanted(&q, &s) {
            return Ok(Choice::Sched(selected(call, &q, &s)));
        }
        let (g, area) = self.area(e, call, tag)?;
        Ok(match selected(call, &q.area(area), &s) {
            Algo::Shm => Choice::Shm(ShmArea {
                guard: g,
                copy: false,
            }),
            Algo::ShmCopy => Choice::Shm(ShmArea {
                guard: g,
                copy: true,
            }),
            algo => Choice::Sched(algo),
        })
    }

    /// Run a collective: `build` makes its schedule (or does it all itself
    /// and returns `None`).
    pub(super) fn blocking(
        &self,
        call: &'static str,
        build: impl FnOnce(&Self, &mut Locked, i32) -> Result<Option<Sched>>,
    ) -> Result<()> {
        self.check_live(call)?;
        engine::with(call, |e| {
            let tag = self.next_tag();
            match build(self, e, tag)? {
                None => Ok(()),
                Some(mut s) => e.drive(call, &mut s),
            }
        })
    }

    /// Start a collective in the background.
    pub(super) fn nonblocking<'a>(
        &self,
        call: &'static str,
        build: impl FnOnce(&Self, &mut Locked, i32) -> Result<Sched>,
    ) -> Result<Request<'a>> {
        self.check_live(call)?;
        let h = engine::with(call, |e| {
            let tag = self.next_nb_tag();
            let s = build(self, e, tag)?;
            Ok(e.park(s))
        })?;
        Ok(Request::new(h, call))
    }
}
