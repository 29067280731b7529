//! What a request slot holds, and the operations that complete in the
//! background after their request was freed.
//!
//! A request handle names a slot of the request table. A request being
//! waited on or tested is taken out of its slot (left [`ReqObj::Busy`])
//! while the runtime runs, so callbacks may use the tables meanwhile.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use gmpi::{Error, Request};

use crate::abi::{MPI_Comm, MPI_Count, MPI_Datatype, MPI_Request, MPI_Status};

/// What a request slot holds.
#[derive(Debug)]
pub enum ReqObj {
    /// An operation in flight.
    Active(Active),
    /// An operation that completed when it started (to or from
    /// `MPI_PROC_NULL`, or a collective on one rank).
    Done { comm: MPI_Comm, st: MPI_Status },
    /// A persistent request and, while started, its operation. (The recipe
    /// is boxed to keep every request small: requests move in and out of
    /// their slots at each completion call.)
    Persistent {
        spec: Box<Spec>,
        active: Option<Active>,
    },
    /// A matched message (`MPI_Mprobe`): receive it with `MPI_Mrecv`.
    Message { comm: MPI_Comm, msg: gmpi::Message },
    /// Taken out by a completion call in progress.
    Busy,
}

/// An operation in flight and what it keeps alive.
#[derive(Debug)]
pub struct Active {
    pub req: Request<'static>,
    pub comm: MPI_Comm,
    /// Further operations of the same MPI request (a neighbourhood
    /// collective's sends and receives): it completes once `req` and every
    /// one of these have.
    pub more: Vec<Request<'static>>,
    /// Memory the operations use that the C ABI owns (`Isendrecv_replace`'s
    /// copy). Declared last: fields drop in order, and dropping a request
    /// waits for it, so this outlives every operation that uses it.
    pub keep: Option<Box<dyn std::any::Any + Send>>,
}

impl Active {
    pub fn new(req: Request<'static>, comm: MPI_Comm) -> Self {
        Self {
            req,
            comm,
            keep: None,
            more: Vec::new(),
        }
    }

    /// One MPI request over several operations: complete when all are;
    /// its status is `req`'s.
    pub fn group(req: Request<'static>, more: Vec<Request<'static>>, comm: MPI_Comm) -> Self {
        Self {
            more,
            ..Self::new(req, comm)
        }
    }

    /// Test every operation: `Some(status of req)` once all have completed.
    pub fn test(&self) -> Result<Option<gmpi::Status>, Error> {
        let mut all = true;
        for r in &self.more {
            all &= r.test()?.is_some();
        }
        let st = self.req.test()?;
        Ok(st.filter(|_| all))
    }

    /// Wait for every operation (the first error after all have finished),
    /// then drop what the operation kept alive.
    pub fn wait(self) -> Result<gmpi::Status, Error> {
        if self.more.is_empty() && self.keep.is_none() {
            return self.req.wait();
        }
        let Active {
            req, keep, more, ..
        } = self;
        let mut first = None;
        for r in more {
            if let Err(e) = r.wait() {
                first.get_or_insert(e);
            }
        }
        let r = req.wait();
        drop(keep);
        match first {
            Some(e) => Err(e),
            None => r,
        }
    }

    /// The operations a wait for "any progress" should watch: those not yet
    /// complete (or `req` if all are).
    pub fn waitables(&self) -> Vec<&Request<'static>> {
        let v: Vec<_> = std::iter::once(&self.req)
            .chain(&self.more)
            .filter(|r| !r.is_complete())
            .collect();
        if v.is_empty() {
            vec![&self.req]
        } else {
            v
        }
    }
}

/// The recipe of a persistent request: the arguments of its start.
#[derive(Debug, Clone)]
pub struct Spec {
    pub kind: SpecKind,
    /// The caller's buffer, read at each start.
    pub buf: usize,
    /// An `int` count, or an `MPI_Count` (the `_c` calls).
    pub count: MPI_Count,
    pub dt: MPI_Datatype,
    pub peer: c_int,
    pub tag: c_int,
    pub comm: MPI_Comm,
}

/// What a persistent request starts.
#[derive(Debug, Clone)]
pub enum SpecKind {
    Send(Mode),
    Recv,
    /// The send side of a partitioned communication (`MPI_Psend_init`):
    /// `count` elements in each of `partitions`.
    Psend {
        partitions: usize,
    },
    /// The receive side (`MPI_Precv_init`).
    Precv {
        partitions: usize,
    },
    /// A persistent collective (`MPI_Allreduce_init`, ...): the
    /// non-blocking collective with its `_init`'s arguments (the other
    /// fields of [`Spec`] but `comm` are unused).
    Coll(CollStart),
}

/// How a persistent collective starts: its non-blocking collective, called
/// with the name of the starting call and where to put the request.
#[derive(Clone)]
pub struct CollStart(
    pub Arc<dyn Fn(&'static str, *mut MPI_Request) -> Result<(), Error> + Send + Sync>,
);

impl CollStart {
    pub fn new(
        f: impl Fn(&'static str, *mut MPI_Request) -> Result<(), Error> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(f))
    }
}

impl std::fmt::Debug for CollStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CollStart")
    }
}

/// Send modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Standard,
    Sync,
    Ready,
    Buffered,
}

// ---- operations detached from their requests ----

/// Requests freed by `MPI_Request_free` while active, and buffered sends in
/// flight: they complete in the background and are reaped at every
/// completion call (and at finalize).
static DETACHED: LazyLock<Mutex<Vec<Active>>> = LazyLock::new(Default::default);

/// Whether `DETACHED` may hold operations (set with each one detached,
/// cleared when a reap leaves none): completion calls skip the lock when
/// nothing was detached.
static ANY_DETACHED: AtomicBool = AtomicBool::new(false);

/// Let `a` complete in the background.
pub fn detach(a: Active) {
    let mut list = DETACHED.lock().unwrap_or_else(|p| p.into_inner());
    list.push(a);
    ANY_DETACHED.store(true, Ordering::Relaxed);
}

/// Every detached operation, taken out of the list.
fn take_detached() -> Vec<Active> {
    let mut list = DETACHED.lock().unwrap_or_else(|p| p.into_inner());
    ANY_DETACHED.store(false, Ordering::Relaxed);
    std::mem::take(&mut *list)
}

/// Drop the detached operations that have completed.
pub fn reap() {
    if !ANY_DETACHED.load(Ordering::Relaxed) {
        return;
    }
    let list = take_detached();
    if list.is_empty() {
        return;
    }
    let mut left = Vec::new();
    for a in list {
        match a.test() {
            Ok(Some(_)) => {}
            Ok(None) => left.push(a),
            Err(e) => tracing::warn!(target: "gmpi", "a freed request failed: {e}"),
        }
    }
    let mut list = DETACHED.lock().unwrap_or_else(|p| p.into_inner());
    list.extend(left);
    ANY_DETACHED.store(!list.is_empty(), Ordering::Relaxed);
}

/// Complete every detached operation (`MPI_Finalize`, `MPI_Buffer_detach`).
pub fn finish_detached() -> Result<(), Error> {
    let list = take_detached();
    let mut first = None;
    for a in list {
        if let Err(e) = a.wait() {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}
