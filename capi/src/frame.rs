//! Layer 4 of the C ABI (beside [`crate::resolve`]): the frame every entry
//! point runs in.
//!
//! `mpi_fn!` defines each `PMPI_X` and its `MPI_X` (a plain forwarder, so a
//! profiling library that defines `MPI_X` and calls `PMPI_X` interposes
//! cleanly). The body runs inside [`entry`], which catches panics, checks
//! initialisation, and routes an error to the error handler of the
//! communicator the call named ([`crate::errors`]). `direct_fn!` defines
//! the few calls whose errors go to a handler they are given or to a file's
//! ([`run`]).
//!
//! An entry point that takes a pointer (to data or to a function) is an
//! `unsafe extern "C" fn`: its caller vouches for the pointers as the MPI
//! standard says for the call, in the words `pointer_contract!` gives every
//! `# Safety` section (each pointer points to what the prototype says or is
//! a special value the call accepts; a buffer stays valid until its request
//! completes; a function pointer has the standard's prototype). `ptr.rs` is
//! where those pointers are dereferenced. An entry point that takes no
//! pointer (`MPI_Barrier`, `MPI_Finalize`) is marked `safe fn` in the macro
//! and is an ordinary `extern "C" fn` (it may still complete operations
//! whose pointers an earlier unsafe call vouched for); the macro checks at
//! compile time that each of its arguments is a plain integer
//! ([`NoPointer`]).

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use gmpi::{Error, ErrorClass};

use crate::abi::{
    MPI_Comm, MPI_Errhandler, MPI_COMM_WORLD, MPI_ERRORS_ABORT, MPI_ERRORS_ARE_FATAL, MPI_SUCCESS,
};
use crate::errors::{code_of, raise, set_target, target};
use crate::tables::{err, PHASE};

/// The contract the caller of an `unsafe` entry point keeps (the `# Safety`
/// section of each).
macro_rules! pointer_contract {
    () => {
        "each points to what the call's prototype says (an object, or an \
         array of the length the standard ties to it) or is a special value \
         the call accepts (NULL where allowed, `MPI_STATUS_IGNORE`, \
         `MPI_IN_PLACE`, …); a buffer holds the elements its count and \
         datatype describe, for the call and, for a non-blocking call, until \
         its request completes; a function pointer has the prototype the \
         standard gives."
    };
}

/// Define C entry points: `PMPI_X` runs the body in [`entry`]; `MPI_X`
/// forwards to it. `noinit fn` marks the calls valid before `MPI_Init` or
/// after `MPI_Finalize`; `safe fn` the calls that take no pointer (they are
/// not `unsafe`; their arguments must implement [`NoPointer`]).
/// `fn X(args) fast { hot } { body }` first evaluates `hot`, an
/// `Option<c_int>`: `Some(code)` when it handled the call (through
/// [`fast`]), `None`, having done nothing, to run `body` as usual — so every
/// argument the hot path does not recognise as valid gets the full checks.
macro_rules! mpi_fn {
    () => {};
    ($(#[$m:meta])* noinit safe fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block $($rest:tt)*) => {
        mpi_fn!(@safe false, $(#[$m])* $name($($a: $t),*) $body);
        mpi_fn!($($rest)*);
    };
    ($(#[$m:meta])* noinit fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block $($rest:tt)*) => {
        mpi_fn!(@unsafe false, $(#[$m])* $name($($a: $t),*) $body);
        mpi_fn!($($rest)*);
    };
    ($(#[$m:meta])* safe fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block $($rest:tt)*) => {
        mpi_fn!(@safe true, $(#[$m])* $name($($a: $t),*) $body);
        mpi_fn!($($rest)*);
    };
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) fast $fast:block $body:block $($rest:tt)*) => {
        mpi_fn!(@fast $(#[$m])* $name($($a: $t),*) $fast $body);
        mpi_fn!($($rest)*);
    };
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block $($rest:tt)*) => {
        mpi_fn!(@unsafe true, $(#[$m])* $name($($a: $t),*) $body);
        mpi_fn!($($rest)*);
    };
    (@safe $init:expr, $(#[$m:meta])* $name:ident($($a:ident: $t:ty),*) $body:block) => {
        paste::paste! {
            const _: () = { $($crate::frame::no_pointer::<$t>();)* };
            #[doc = concat!("`MPI_", stringify!($name), "` (it takes no pointer).")]
            $(#[$m])*
            #[no_mangle]
            pub extern "C" fn [<PMPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                #[allow(dead_code)]
                const CALL: &str = concat!("MPI_", stringify!($name));
                $crate::frame::entry(CALL, $init, #[allow(unused_mut)] || -> Result<(), gmpi::Error> { $body })
            }
            #[doc = concat!("`MPI_", stringify!($name), "`: forwards to `PMPI_", stringify!($name), "`.")]
            #[no_mangle]
            pub extern "C" fn [<MPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                [<PMPI_ $name>]($($a),*)
            }
        }
    };
    (@unsafe $init:expr, $(#[$m:meta])* $name:ident($($a:ident: $t:ty),*) $body:block) => {
        paste::paste! {
            #[doc = concat!("`MPI_", stringify!($name), "`.")]
            $(#[$m])*
            #[doc = ""]
            #[doc = "# Safety"]
            #[doc = ""]
            #[doc = concat!("The caller vouches for its pointers as the MPI standard says for `MPI_", stringify!($name), "`: ", pointer_contract!())]
            #[no_mangle]
            pub unsafe extern "C" fn [<PMPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                #[allow(dead_code)]
                const CALL: &str = concat!("MPI_", stringify!($name));
                $crate::frame::entry(CALL, $init, #[allow(unused_mut)] || -> Result<(), gmpi::Error> { $body })
            }
            #[doc = concat!("`MPI_", stringify!($name), "`: forwards to `PMPI_", stringify!($name), "`.")]
            #[doc = ""]
            #[doc = "# Safety"]
            #[doc = ""]
            #[doc = concat!("As `PMPI_", stringify!($name), "`.")]
            #[no_mangle]
            pub unsafe extern "C" fn [<MPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                // SAFETY: the same arguments, under the same contract.
                unsafe { [<PMPI_ $name>]($($a),*) }
            }
        }
    };
    (@fast $(#[$m:meta])* $name:ident($($a:ident: $t:ty),*) $fast:block $body:block) => {
        paste::paste! {
            #[doc = concat!("`MPI_", stringify!($name), "`, with a hot path.")]
            $(#[$m])*
            #[doc = ""]
            #[doc = "# Safety"]
            #[doc = ""]
            #[doc = concat!("The caller vouches for its pointers as the MPI standard says for `MPI_", stringify!($name), "`: ", pointer_contract!())]
            #[no_mangle]
            pub unsafe extern "C" fn [<PMPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                #[allow(dead_code)]
                const CALL: &str = concat!("MPI_", stringify!($name));
                /// The full path.
                ///
                /// # Safety
                ///
                /// As the entry point's.
                #[cold]
                #[inline(never)]
                unsafe fn slow($($a: $t),*) -> std::ffi::c_int {
                    $crate::frame::entry(CALL, true, #[allow(unused_mut)] || -> Result<(), gmpi::Error> { $body })
                }
                let fast: Option<std::ffi::c_int> = $fast;
                match fast {
                    Some(rc) => rc,
                    // SAFETY: the caller's arguments, under its contract.
                    None => unsafe { slow($($a),*) },
                }
            }
            #[doc = concat!("`MPI_", stringify!($name), "`: forwards to `PMPI_", stringify!($name), "`.")]
            #[doc = ""]
            #[doc = "# Safety"]
            #[doc = ""]
            #[doc = concat!("As `PMPI_", stringify!($name), "`.")]
            #[no_mangle]
            pub unsafe extern "C" fn [<MPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                // SAFETY: the same arguments, under the same contract.
                unsafe { [<PMPI_ $name>]($($a),*) }
            }
        }
    };
}

/// Define `PMPI_X` (the body, returning the C code itself) and `MPI_X`
/// forwarding to it, for the calls whose errors do not go to a
/// communicator's handler (they run their body through [`run`] or a
/// wrapper of it). A call that takes a pointer is `unsafe`, with the
/// contract of `mpi_fn!`'s; `safe fn` marks one that takes none (its
/// arguments must implement [`NoPointer`]).
macro_rules! direct_fn {
    () => {};
    (safe fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block $($rest:tt)*) => {
        paste::paste! {
            const _: () = { $($crate::frame::no_pointer::<$t>();)* };
            #[doc = concat!("`MPI_", stringify!($name), "` (it takes no pointer).")]
            #[no_mangle]
            pub extern "C" fn [<PMPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                const CALL: &str = concat!("MPI_", stringify!($name));
                $body
            }
            #[doc = concat!("`MPI_", stringify!($name), "`: forwards to `PMPI_", stringify!($name), "`.")]
            #[no_mangle]
            pub extern "C" fn [<MPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                [<PMPI_ $name>]($($a),*)
            }
        }
        direct_fn!($($rest)*);
    };
    (fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block $($rest:tt)*) => {
        paste::paste! {
            #[doc = concat!("`MPI_", stringify!($name), "`.")]
            #[doc = ""]
            #[doc = "# Safety"]
            #[doc = ""]
            #[doc = concat!("The caller vouches for its pointers as the MPI standard says for `MPI_", stringify!($name), "`: ", pointer_contract!())]
            #[no_mangle]
            pub unsafe extern "C" fn [<PMPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                const CALL: &str = concat!("MPI_", stringify!($name));
                $body
            }
            #[doc = concat!("`MPI_", stringify!($name), "`: forwards to `PMPI_", stringify!($name), "`.")]
            #[doc = ""]
            #[doc = "# Safety"]
            #[doc = ""]
            #[doc = concat!("As `PMPI_", stringify!($name), "`.")]
            #[no_mangle]
            pub unsafe extern "C" fn [<MPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                // SAFETY: the same arguments, under the same contract.
                unsafe { [<PMPI_ $name>]($($a),*) }
            }
        }
        direct_fn!($($rest)*);
    };
}

/// The argument types of a `safe fn` entry point: integers (handles,
/// counts, ranks, tags, addresses as `MPI_Aint`), never a pointer.
pub trait NoPointer {}
impl NoPointer for i32 {}
impl NoPointer for i64 {}
impl NoPointer for isize {}

/// Compiles only for a [`NoPointer`] type (`mpi_fn!`'s check of `safe fn`).
pub const fn no_pointer<T: NoPointer>() {}

/// Run the hot path `f` of entry point `call`, whose arguments the caller
/// has found to be what the hot path handles (MPI running, the predefined
/// communicator `comm`, a predefined datatype, …): as [`entry`], with
/// errors raised on `comm` directly.
#[inline(always)]
pub fn fast(call: &'static str, comm: MPI_Comm, f: impl FnOnce() -> Result<(), Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => MPI_SUCCESS,
        Ok(Err(e)) => raise(comm, e),
        Err(p) => raise(comm, panic_error(call, p)),
    }
}

/// The error of a panic caught in `call`.
#[cold]
#[inline(never)]
fn panic_error(call: &str, p: Box<dyn std::any::Any + Send>) -> Error {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    err(ErrorClass::Intern, call, format!("internal error: {what}"))
}

/// Run the body of entry point `call`; its MPI return code.
pub fn entry(call: &'static str, need_init: bool, f: impl FnOnce() -> Result<(), Error>) -> c_int {
    set_target(MPI_COMM_WORLD);
    let r = catch_unwind(AssertUnwindSafe(|| {
        if need_init {
            match PHASE.load(Ordering::Acquire) {
                1 => {}
                0 => {
                    return Err(err(
                        ErrorClass::Other,
                        call,
                        "MPI is not initialized (call MPI_Init first)",
                    ))
                }
                _ => return Err(err(ErrorClass::Other, call, "MPI has been finalized")),
            }
        }
        f()
    }));
    let e = match r {
        Ok(Ok(())) => return MPI_SUCCESS,
        Ok(Err(e)) => e,
        Err(p) => panic_error(call, p),
    };
    raise(target(), e)
}

/// Run `f` (after checking that MPI is initialized, if `need_init`); hand an
/// error to the error handler `errh`. Only the predefined handlers apply
/// here: `MPI_ERRORS_ARE_FATAL` and `MPI_ERRORS_ABORT` end the job, any
/// other returns the code.
pub fn run(
    call: &str,
    need_init: bool,
    errh: MPI_Errhandler,
    f: impl FnOnce() -> Result<(), Error>,
) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        if need_init && !crate::tables::initialized() {
            return Err(err(
                ErrorClass::Other,
                call,
                "MPI is not initialized (call MPI_Init first)",
            ));
        }
        if need_init && crate::tables::finalized() {
            return Err(err(ErrorClass::Other, call, "MPI has been finalized"));
        }
        f()
    }));
    let e = match r {
        Ok(Ok(())) => return MPI_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => err(ErrorClass::Intern, call, "internal error: a panic"),
    };
    let code = code_of(&e);
    match errh {
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT => gmpi::abort(code, &e.to_string()),
        _ => code,
    }
}

/// Run the body of a call that is given its error handler (valid before
/// `MPI_Init`, as those calls are).
pub fn with_errhandler(
    call: &str,
    errh: MPI_Errhandler,
    f: impl FnOnce() -> Result<(), Error>,
) -> c_int {
    run(call, false, errh, f)
}
