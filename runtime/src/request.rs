//! Requests of non-blocking operations, and [`Status`].

use std::cell::Cell;
use std::marker::PhantomData;

use crate::comm::Handle;
use crate::datatype::Equivalence;
use crate::engine;
use crate::error::{Error, ErrorClass, Result};
use crate::{ANY_TAG, PROC_NULL};

/// What a completed receive or probe reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub(crate) source: i32,
    pub(crate) tag: i32,
    pub(crate) bytes: usize,
    pub(crate) cancelled: bool,
}

impl Status {
    pub(crate) fn from_pml(s: gmpi_pml::Status) -> Self {
        Self {
            source: s.source as i32,
            tag: s.tag,
            bytes: s.len as usize,
            cancelled: s.cancelled,
        }
    }

    /// A status with these fields (a generalized request's, as its query
    /// function gives them).
    #[doc(hidden)]
    pub fn from_parts(source: i32, tag: i32, bytes: usize, cancelled: bool) -> Self {
        Self {
            source,
            tag,
            bytes,
            cancelled,
        }
    }

    pub(crate) fn empty() -> Self {
        Self {
            source: PROC_NULL,
            tag: ANY_TAG,
            bytes: 0,
            cancelled: false,
        }
    }

    /// Rank of the sender in the communicator (`PROC_NULL` for a receive from
    /// `PROC_NULL`).
    pub fn source(&self) -> i32 {
        self.source
    }

    /// Tag of the message.
    pub fn tag(&self) -> i32 {
        self.tag
    }

    /// Number of whole `T` elements received. A trailing partial element is
    /// not counted (where MPI's `MPI_Get_count` would say `MPI_UNDEFINED`);
    /// [`Status::bytes`] gives the exact size.
    pub fn count<T: Equivalence>(&self) -> usize {
        match T::DATATYPE.size() {
            0 => 0,
            n => self.bytes / n,
        }
    }

    /// Number of whole elements of `dtype` received (`MPI_Get_count`), or
    /// `None` (`MPI_UNDEFINED`) if the bytes received are not a whole number
    /// of elements.
    pub fn get_count(&self, dtype: &impl crate::AsDatatype) -> Option<usize> {
        let size = dtype.as_user().size();
        match size {
            0 => Some(0),
            n if self.bytes.is_multiple_of(n) => Some(self.bytes / n),
            _ => None,
        }
    }

    /// Number of basic elements (of the primitives `dtype` is made of)
    /// received (`MPI_Get_elements`), or `None` if the bytes end inside one.
    pub fn get_elements(&self, dtype: &impl crate::AsDatatype) -> Option<usize> {
        dtype.as_user().get_elements(self.bytes)
    }

    /// Bytes received.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the operation was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }
}

/// A non-blocking operation in flight. It borrows its buffer for `'a`, so the
/// borrow checker forbids touching the buffer until the request completes.
///
/// Dropping an unfinished request waits for it to finish. Never
/// `std::mem::forget` an unfinished request: the transfer would go on into
/// memory you have taken back.
#[must_use = "a request must be waited on (dropping it waits)"]
pub struct Request<'a> {
    // Cells: `test` takes `&self` (a request is polled through a shared
    // reference, as in `let r = comm.irecv(..)?; r.test()?`).
    id: Cell<Option<Handle>>,
    call: &'static str,
    done: Cell<Option<Status>>,
    /// The error of a request completed by [`wait_set`], handed out by the
    /// next `wait` or `test` (boxed: requests move a lot and rarely fail).
    failed: Cell<Option<Box<Error>>>,
    _buf: PhantomData<&'a mut [u8]>,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `failed` is looked at by taking it out and putting it back.
        let failed = self.failed.take();
        let r = f
            .debug_struct("Request")
            .field("id", &self.id.get())
            .field("call", &self.call)
            .field("done", &self.done.get())
            .field("failed", &failed)
            .finish();
        self.failed.set(failed);
        r
    }
}

impl<'a> Request<'a> {
    pub(crate) fn new(id: Handle, call: &'static str) -> Self {
        Self {
            id: Cell::new(Some(id)),
            call,
            done: Cell::new(None),
            failed: Cell::new(None),
            _buf: PhantomData,
        }
    }

    /// An already complete request (e.g. to or from `PROC_NULL`).
    pub(crate) fn completed(call: &'static str, st: Status) -> Self {
        Self {
            id: Cell::new(None),
            call,
            done: Cell::new(Some(st)),
            failed: Cell::new(None),
            _buf: PhantomData,
        }
    }

    /// A generalized request (`MPI_Grequest_start`): it completes once
    /// `done` is set (by any thread: `MPI_Grequest_complete`), with an
    /// empty status; waits on it progress everything else meanwhile.
    pub fn user(
        call: &'static str,
        done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<Request<'static>> {
        let id = engine::with(call, |e| {
            let id = e.next_sched;
            e.next_sched += 1;
            e.users.insert(id, done);
            Ok(id)
        })?;
        Ok(Request::new(Handle::User(id), call))
    }

    /// The same request with its borrow erased (see `Request::detach`).
    pub(crate) fn into_static(self) -> Request<'static> {
        let me = std::mem::ManuallyDrop::new(self);
        Request {
            id: Cell::new(me.id.get()),
            call: me.call,
            done: Cell::new(me.done.get()),
            failed: Cell::new(me.failed.take()),
            _buf: PhantomData,
        }
    }

    /// Whether the request has completed (without progressing anything).
    #[doc(hidden)]
    pub fn is_complete(&self) -> bool {
        self.id.get().is_none()
    }

    /// Wait for completion.
    pub fn wait(self) -> Result<Status> {
        self.wait_inner()
    }

    fn wait_inner(&self) -> Result<Status> {
        let Some(id) = self.id.take() else {
            if let Some(e) = self.failed.take() {
                return Err(*e);
            }
            return self.done.get().ok_or_else(|| {
                Error::new(
                    ErrorClass::Request,
                    self.call,
                    -1,
                    "request already waited on",
                )
            });
        };
        let st = engine::with(self.call, |e| e.wait_handle(self.call, id))?;
        self.done.set(Some(st));
        Ok(st)
    }

    /// Check for completion without blocking: `Some(status)` once complete
    /// (and on every later call).
    pub fn test(&self) -> Result<Option<Status>> {
        let Some(id) = self.id.get() else {
            if let Some(e) = self.failed.take() {
                return Err(*e);
            }
            return Ok(self.done.get());
        };
        let call = self.call;
        let r = engine::with(call, |e| {
            e.poke(call)?;
            Ok(e.is_done(id).then(|| e.take(call, id)))
        })?;
        match r {
            None => Ok(None),
            Some(res) => {
                self.id.set(None);
                let st = res?;
                self.done.set(Some(st));
                Ok(Some(st))
            }
        }
    }

    /// Check for completion without blocking and without taking the
    /// outcome: `Some(status)` once complete, and the request stays to be
    /// waited on or tested (`MPI_Request_get_status`).
    #[doc(hidden)]
    pub fn peek(&self) -> Result<Option<Status>> {
        let Some(id) = self.id.get() else {
            return match self.failed.take() {
                Some(e) => {
                    let copy = (*e).clone();
                    self.failed.set(Some(e));
                    Err(copy)
                }
                None => Ok(self.done.get()),
            };
        };
        let call = self.call;
        engine::with(call, |e| {
            e.poke(call)?;
            match e.is_done(id).then(|| e.peek(call, id)) {
                None => Ok(None),
                Some(r) => r.map(Some),
            }
        })
    }

    /// Cancel a receive that has not matched a message yet (collectives and
    /// receives into derived datatypes cannot be cancelled: this does nothing
    /// on them). The request then
    /// completes with [`Status::is_cancelled`] set; a receive that already
    /// matched completes normally. Sends cannot be cancelled (MPI-4 deprecates
    /// it): on a send this does nothing, and its `wait` returns once the
    /// message is delivered (for a synchronous or rendezvous send, once the
    /// receiver matched it).
    pub fn cancel(&self) -> Result<()> {
        if let Some(Handle::Pml(id)) = self.id.get() {
            engine::with(self.call, |e| {
                e.driver.cancel(id);
                Ok(())
            })?;
        }
        Ok(())
    }
}

impl Request<'static> {
    /// The point-to-point operation's pml id, if this request is one in
    /// flight (the C ABI names its hot paths' requests by it).
    #[doc(hidden)]
    #[inline]
    pub fn raw_id(&self) -> Option<u64> {
        match self.id.get() {
            Some(Handle::Pml(id)) => Some(id.0),
            _ => None,
        }
    }

    /// Let go of a point-to-point request in flight without waiting for
    /// it: its pml id, from which [`Request::from_raw`] makes it again
    /// (exactly once, or the operation is never waited for). `Err(self)`
    /// for any other request.
    #[doc(hidden)]
    #[inline]
    pub fn into_raw(self) -> std::result::Result<u64, Self> {
        match self.raw_id() {
            Some(raw) => {
                // Nothing to drop: `failed` and `done` are empty while the
                // id is set.
                std::mem::forget(self);
                Ok(raw)
            }
            None => Err(self),
        }
    }

    /// The request [`Request::into_raw`] let go of, for `call`. An id that
    /// names no request in flight (a stale one) fails at its wait.
    #[doc(hidden)]
    #[inline]
    pub fn from_raw(raw: u64, call: &'static str) -> Self {
        Request::new(Handle::Pml(gmpi_pml::ReqId(raw)), call)
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if self.id.get().is_some() && std::thread::panicking() {
            // Waiting could hang (the peer may wait for us), and returning
            // would free a buffer still in flight: end the job instead.
            if !matches!(self.test(), Ok(Some(_))) {
                crate::abort(
                    101,
                    &format!(
                        "a thread panicked while an {} request was in flight",
                        self.call
                    ),
                );
            }
            return;
        }
        if self.id.get().is_some() {
            if let Err(e) = self.wait_inner() {
                tracing::warn!(target: "gmpi", "request dropped with an error: {e}");
            }
        }
    }
}

/// Block until at least one of `reqs` could complete (a `test` on it would
/// succeed), progressing everything meanwhile. Returns at once if `reqs` is
/// empty or one has already completed. (For `MPI_Waitany`/`MPI_Waitsome`.)
#[doc(hidden)]
pub fn wait_any_ready(call: &'static str, reqs: &[&Request<'_>]) -> Result<()> {
    let mut ids = Vec::with_capacity(reqs.len());
    for r in reqs {
        match r.id.get() {
            None => return Ok(()),
            Some(h) => ids.push(h),
        }
    }
    if ids.is_empty() {
        return Ok(());
    }
    engine::with(call, |e| {
        e.wait_until(call, |e| Ok(ids.iter().any(|&h| e.is_done(h))))
    })
}

/// Block until every one of `reqs` has completed, progressing everything
/// meanwhile, under one hold of the engine; each outcome stays in its
/// request, for its next `wait` or `test` to return without the engine (an
/// error then, once, as from a `wait`). For `MPI_Waitall`, whose requests
/// mostly complete together: waiting for them one by one would take the
/// engine, look the request up and take it out once per request.
///
/// An `Err` is the wait's own failure (a peer is gone, the job is ending):
/// requests not yet taken are left in flight, to be waited for one by one.
#[doc(hidden)]
pub fn wait_set(call: &'static str, reqs: &[&Request<'_>]) -> Result<()> {
    let mut ids: Vec<(usize, Handle)> = Vec::with_capacity(reqs.len());
    ids.extend(
        reqs.iter()
            .enumerate()
            .filter_map(|(i, r)| r.id.get().map(|h| (i, h))),
    );
    if ids.is_empty() {
        return Ok(());
    }
    engine::with(call, |e| {
        // Completion is for good: a cursor over the handles checks each
        // one until it is done, not all of them on every pass.
        let mut next = 0;
        e.wait_until(call, |e| {
            while next < ids.len() && e.is_done(ids[next].1) {
                next += 1;
            }
            Ok(next == ids.len())
        })?;
        for &(i, h) in &ids {
            let r = reqs[i];
            r.id.set(None);
            match e.take(r.call, h) {
                Ok(st) => r.done.set(Some(st)),
                Err(err) => r.failed.set(Some(Box::new(err))),
            }
        }
        Ok(())
    })
}

/// [`wait_set`] for point-to-point requests let go of by
/// [`Request::into_raw`]: block until every one of `items` (whose pml ids
/// `id` gives) has completed, then hand each one's outcome to `out`, in
/// order, under one hold of the engine (`out` must not call gmpi). An
/// `Err` is the wait's own failure: no outcome was taken then, and every
/// id is still in flight for [`Request::from_raw`].
#[doc(hidden)]
pub fn wait_raw<T>(
    call: &'static str,
    items: &[T],
    id: impl Fn(&T) -> u64,
    mut out: impl FnMut(&T, Result<Status>),
) -> Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    let handle = |t: &T| Handle::Pml(gmpi_pml::ReqId(id(t)));
    engine::with(call, |e| {
        let mut next = 0;
        e.wait_until(call, |e| {
            while next < items.len() && e.is_done(handle(&items[next])) {
                next += 1;
            }
            Ok(next == items.len())
        })?;
        for t in items {
            out(t, e.take(call, handle(t)));
        }
        Ok(())
    })
}

/// Wait for every request; returns their statuses in order, or the first
/// error (after waiting for all of them, since they borrow buffers).
pub fn wait_all<'a>(reqs: impl IntoIterator<Item = Request<'a>>) -> Result<Vec<Status>> {
    let reqs: Vec<Request<'a>> = reqs.into_iter().collect();
    if let Some(call) = reqs.first().map(|r| r.call) {
        let refs: Vec<&Request<'a>> = reqs.iter().collect();
        // On failure each request is waited for on its own below.
        let _ = wait_set(call, &refs);
    }
    let mut out = Vec::with_capacity(reqs.len());
    let mut first_err = None;
    for r in reqs {
        match r.wait() {
            Ok(s) => out.push(s),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
