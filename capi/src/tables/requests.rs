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

use crate::abi::{
    GreqCancelFn, GreqFreeFn, GreqQueryFn, MPI_Comm, MPI_Count, MPI_Datatype, MPI_Request,
    MPI_Status, MPI_SUCCESS, MPI_UNDEFINED,
};

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

/// A generalized request's callbacks and extra state
/// (`MPI_Grequest_start`). Its free function runs when it is dropped, once
/// the request has completed and its status was taken.
#[derive(Debug)]
pub struct Greq {
    pub query: Option<GreqQueryFn>,
    pub free: Option<GreqFreeFn>,
    pub cancel: Option<GreqCancelFn>,
    pub extra: usize,
    /// Its completion flag (shared with `greq.rs`'s table while it lives).
    pub done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Greq {
    /// The status the query function gives (an error if it returns one).
    pub fn status(&self) -> Result<gmpi::Status, Error> {
        let mut st = MPI_Status::empty();
        st.MPI_SOURCE = MPI_UNDEFINED;
        st.MPI_TAG = MPI_UNDEFINED;
        if let Some(q) = self.query {
            let rc = crate::ptr::call_greq_query(q, self.extra, &mut st);
            if rc != MPI_SUCCESS {
                return Err(crate::tables::err(
                    crate::abi::runtime_class(rc).unwrap_or(gmpi::ErrorClass::Other),
                    "MPI_Grequest_start",
                    format!("the query function returned error code {rc}"),
                ));
            }
        }
        Ok(gmpi::Status::from_parts(
            st.MPI_SOURCE,
            st.MPI_TAG,
            st.bytes() as usize,
            st.cancelled(),
        ))
    }
}

impl Greq {
    /// Run the free function (once): its error, if it returns one.
    pub fn free_now(&mut self) -> Result<(), Error> {
        let Some(f) = self.free.take() else {
            return Ok(());
        };
        match crate::ptr::call_greq_free(f, self.extra) {
            MPI_SUCCESS => Ok(()),
            rc => Err(crate::tables::err(
                crate::abi::runtime_class(rc).unwrap_or(gmpi::ErrorClass::Other),
                "MPI_Grequest_start",
                format!("the free function returned error code {rc}"),
            )),
        }
    }
}

impl Drop for Greq {
    fn drop(&mut self) {
        // Completed by a test (whose caller has the status already), or
        // freed by MPI_Request_free: the error can only be told here.
        if let Err(e) = self.free_now() {
            tracing::warn!(target: "gmpi", "{e}");
        }
    }
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
    /// The callbacks of a generalized request (`MPI_Grequest_start`).
    pub user: Option<Box<Greq>>,
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
            user: None,
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
        match (st.filter(|_| all), &self.user) {
            (Some(_), Some(u)) => u.status().map(Some),
            (st, _) => Ok(st),
        }
    }

    /// Wait for every operation (the first error after all have finished),
    /// then drop what the operation kept alive.
    pub fn wait(self) -> Result<gmpi::Status, Error> {
        if self.more.is_empty() && self.keep.is_none() && self.user.is_none() {
            return self.req.wait();
        }
        let Active {
            req,
            keep,
            more,
            user,
            ..
        } = self;
        if let Some(mut u) = user {
            // The status comes from the query function, then the free
            // function runs; the first error of the two is the wait's.
            let r = req.wait().and_then(|_| u.status());
            let f = u.free_now();
            return r.and_then(|st| f.map(|()| st));
        }
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
