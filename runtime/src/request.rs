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
#[derive(Debug)]
pub struct Request<'a> {
    // Cells: `test` takes `&self` (a request is polled through a shared
    // reference, as in `let r = comm.irecv(..)?; r.test()?`).
    id: Cell<Option<Handle>>,
    call: &'static str,
    done: Cell<Option<Status>>,
    _buf: PhantomData<&'a mut [u8]>,
}

impl<'a> Request<'a> {
    pub(crate) fn new(id: Handle, call: &'static str) -> Self {
        Self {
            id: Cell::new(Some(id)),
            call,
            done: Cell::new(None),
            _buf: PhantomData,
        }
    }

    /// An already complete request (e.g. to or from `PROC_NULL`).
    pub(crate) fn completed(call: &'static str, st: Status) -> Self {
        Self {
            id: Cell::new(None),
            call,
            done: Cell::new(Some(st)),
            _buf: PhantomData,
        }
    }

    /// The same request with its borrow erased (see `Request::detach`).
    pub(crate) fn into_static(self) -> Request<'static> {
        let me = std::mem::ManuallyDrop::new(self);
        Request {
            id: Cell::new(me.id.get()),
            call: me.call,
            done: Cell::new(me.done.get()),
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

/// Wait for every request; returns their statuses in order, or the first
/// error (after waiting for all of them, since they borrow buffers).
pub fn wait_all<'a>(reqs: impl IntoIterator<Item = Request<'a>>) -> Result<Vec<Status>> {
    let mut out = Vec::new();
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
