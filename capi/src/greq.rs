//! Generalized requests (`MPI_Grequest_start`, `MPI_Grequest_complete`):
//! requests the program completes itself, waited for and tested like any
//! other.
//!
//! The request is an operation ([`Active`]) over the runtime's
//! [`gmpi::Request::user`], which completes once its flag is set; the flag
//! is also kept by handle here, so `MPI_Grequest_complete` sets it without
//! the request table (whose slot a wait in progress has emptied). At
//! completion the status comes from the query function, then the free
//! function runs ([`Greq`]); `MPI_Cancel` calls the cancel function with
//! whether the request has completed.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use gmpi::ErrorClass;

use crate::abi::*;
use crate::ptr;
use crate::tables::*;

/// The completion flag of each generalized request, by handle.
static FLAGS: LazyLock<Mutex<HashMap<MPI_Request, Arc<AtomicBool>>>> =
    LazyLock::new(Default::default);

fn flags() -> std::sync::MutexGuard<'static, HashMap<MPI_Request, Arc<AtomicBool>>> {
    FLAGS.lock().unwrap_or_else(|p| p.into_inner())
}

/// `MPI_Cancel` on an operation: the cancel function of a generalized
/// request (`None` if it is not one).
pub(crate) fn cancel(a: &Active) -> Option<Result<(), gmpi::Error>> {
    let u = a.user.as_ref()?;
    let done = u.done.load(Ordering::Acquire);
    let rc = u
        .cancel
        .map_or(MPI_SUCCESS, |f| ptr::call_greq_cancel(f, u.extra, done));
    Some(if rc == MPI_SUCCESS {
        Ok(())
    } else {
        Err(err(
            runtime_class(rc).unwrap_or(ErrorClass::Other),
            "MPI_Cancel",
            format!("the generalized request's cancel function returned {rc}"),
        ))
    })
}

/// Forget the flags of generalized requests that are gone (the flag is
/// then held here only: the engine let go of it at completion, and the
/// request's [`Greq`] with its slot).
fn forget_finished(f: &mut HashMap<MPI_Request, Arc<AtomicBool>>) {
    f.retain(|_, flag| Arc::strong_count(flag) > 1);
}

mpi_fn! {
    fn Grequest_start(query_fn: Option<GreqQueryFn>, free_fn: Option<GreqFreeFn>, cancel_fn: Option<GreqCancelFn>, extra_state: *mut c_void, request: *mut MPI_Request) {
        if request.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "request is NULL"));
        }
        let flag = Arc::new(AtomicBool::new(false));
        let req = gmpi::Request::user(CALL, flag.clone())?;
        let mut a = Active::new(req, MPI_COMM_WORLD);
        a.user = Some(Box::new(Greq {
            query: query_fn,
            free: free_fn,
            cancel: cancel_fn,
            extra: extra_state as usize,
            done: flag.clone(),
        }));
        let h = new_request(a);
        let mut f = flags();
        forget_finished(&mut f);
        f.insert(h, flag);
        drop(f);
        ptr::write(CALL, "request", request, h)
    }

    safe fn Grequest_complete(request: MPI_Request) {
        if request == MPI_REQUEST_NULL {
            return Err(err(ErrorClass::Request, CALL, "request is MPI_REQUEST_NULL"));
        }
        match flags().get(&request).filter(|f| Arc::strong_count(f) > 1) {
            Some(f) => {
                f.store(true, Ordering::Release);
                // A thread may be waiting for it (MPI_THREAD_MULTIPLE).
                gmpi::wake_waiters();
                Ok(())
            }
            None => Err(err(
                ErrorClass::Request,
                CALL,
                format!("request = {request:#x} is not a generalized request in progress"),
            )),
        }
    }
}
