//! The frame of every entry point, error handlers, and error codes.
//!
//! [`mpi_fn!`] defines each `PMPI_X` and its `MPI_X` (a plain forwarder, so a
//! profiling library that defines `MPI_X` and calls `PMPI_X` interposes
//! cleanly). The body runs inside [`entry`], which catches panics, checks
//! initialisation, and routes an error to the error handler of the
//! communicator the call named (the look-up of a communicator handle records
//! it; calls without one use `MPI_COMM_WORLD`'s).
//!
//! Error codes are the error classes themselves (as Open MPI returns them),
//! so `rc == MPI_ERR_TRUNCATE` works as well as `MPI_Error_class`;
//! `MPI_Error_string` gives the message of the latest error of that class on
//! this process, which names the call, the argument and the rank.

use std::collections::HashMap;
use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{LazyLock, Mutex};

use gmpi::{Error, ErrorClass};

use crate::handles::{
    self, state, MPI_Comm, MPI_Errhandler, MPI_ERRORS_ABORT, MPI_ERRORS_ARE_FATAL,
    MPI_ERRORS_RETURN, MPI_SUCCESS,
};

/// Define C entry points: `PMPI_X` runs the body in [`entry`]; `MPI_X`
/// forwards to it. `noinit fn` marks the calls valid before `MPI_Init` or
/// after `MPI_Finalize`. `fn X(args) fast { hot } { body }` first evaluates
/// `hot`, an `Option<c_int>`: `Some(code)` when it handled the call (through
/// [`fast`]), `None`, having done nothing, to run `body` as usual — so every
/// argument the hot path does not recognise as valid gets the full checks.
macro_rules! mpi_fn {
    () => {};
    ($(#[$m:meta])* noinit fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block $($rest:tt)*) => {
        mpi_fn!(@def false, $(#[$m])* $name($($a: $t),*) $body);
        mpi_fn!($($rest)*);
    };
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) fast $fast:block $body:block $($rest:tt)*) => {
        mpi_fn!(@fast $(#[$m])* $name($($a: $t),*) $fast $body);
        mpi_fn!($($rest)*);
    };
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block $($rest:tt)*) => {
        mpi_fn!(@def true, $(#[$m])* $name($($a: $t),*) $body);
        mpi_fn!($($rest)*);
    };
    (@def $init:expr, $(#[$m:meta])* $name:ident($($a:ident: $t:ty),*) $body:block) => {
        paste::paste! {
            $(#[$m])*
            #[no_mangle]
            pub extern "C" fn [<PMPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                #[allow(dead_code)]
                const CALL: &str = concat!("MPI_", stringify!($name));
                $crate::errors::entry(CALL, $init, #[allow(unused_mut)] || -> Result<(), gmpi::Error> { $body })
            }
            #[doc = concat!("`MPI_", stringify!($name), "`: forwards to `PMPI_", stringify!($name), "`.")]
            #[no_mangle]
            pub extern "C" fn [<MPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                [<PMPI_ $name>]($($a),*)
            }
        }
    };
    (@fast $(#[$m:meta])* $name:ident($($a:ident: $t:ty),*) $fast:block $body:block) => {
        paste::paste! {
            $(#[$m])*
            #[no_mangle]
            pub extern "C" fn [<PMPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                #[allow(dead_code)]
                const CALL: &str = concat!("MPI_", stringify!($name));
                #[cold]
                #[inline(never)]
                fn slow($($a: $t),*) -> std::ffi::c_int {
                    $crate::errors::entry(CALL, true, #[allow(unused_mut)] || -> Result<(), gmpi::Error> { $body })
                }
                let fast: Option<std::ffi::c_int> = $fast;
                match fast {
                    Some(rc) => rc,
                    None => slow($($a),*),
                }
            }
            #[doc = concat!("`MPI_", stringify!($name), "`: forwards to `PMPI_", stringify!($name), "`.")]
            #[no_mangle]
            pub extern "C" fn [<MPI_ $name>]($($a: $t),*) -> std::ffi::c_int {
                [<PMPI_ $name>]($($a),*)
            }
        }
    };
}

/// 0: not initialized, 1: running, 2: finalized.
pub static PHASE: AtomicU8 = AtomicU8::new(0);

pub fn initialized() -> bool {
    PHASE.load(Ordering::Acquire) >= 1
}

pub fn finalized() -> bool {
    PHASE.load(Ordering::Acquire) == 2
}

/// Whether MPI is initialized and not finalized (the state every call but
/// the `noinit` ones needs).
#[inline]
pub fn running() -> bool {
    PHASE.load(Ordering::Acquire) == 1
}

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
    handles::err(ErrorClass::Intern, call, format!("internal error: {what}"))
}

/// Run the body of entry point `call`; its MPI return code.
pub fn entry(call: &'static str, need_init: bool, f: impl FnOnce() -> Result<(), Error>) -> c_int {
    handles::set_target(handles::MPI_COMM_WORLD);
    let r = catch_unwind(AssertUnwindSafe(|| {
        if need_init {
            match PHASE.load(Ordering::Acquire) {
                1 => {}
                0 => {
                    return Err(handles::err(
                        ErrorClass::Other,
                        call,
                        "MPI is not initialized (call MPI_Init first)",
                    ))
                }
                _ => {
                    return Err(handles::err(
                        ErrorClass::Other,
                        call,
                        "MPI has been finalized",
                    ))
                }
            }
        }
        f()
    }));
    let e = match r {
        Ok(Ok(())) => return MPI_SUCCESS,
        Ok(Err(e)) => e,
        Err(p) => panic_error(call, p),
    };
    raise(handles::target(), e)
}

/// Messages of the latest error of each class, user error strings, and
/// user-added classes and codes.
#[derive(Default)]
struct Codes {
    last: HashMap<c_int, String>,
    strings: HashMap<c_int, String>,
    /// User code → its class.
    user_codes: HashMap<c_int, c_int>,
    next_class: c_int,
    next_code: c_int,
}

static CODES: LazyLock<Mutex<Codes>> = LazyLock::new(|| {
    Mutex::new(Codes {
        next_class: FIRST_USER_CLASS,
        next_code: FIRST_USER_CODE,
        ..Default::default()
    })
});

fn codes() -> std::sync::MutexGuard<'static, Codes> {
    CODES.lock().unwrap_or_else(|p| p.into_inner())
}

/// User classes start above every MPICH class; user codes above those.
const FIRST_USER_CLASS: c_int = 0x80;
const FIRST_USER_CODE: c_int = 0x1000;

/// The code of error `e` (its class), with the message kept for
/// `MPI_Error_string`.
pub fn code_of(e: &Error) -> c_int {
    let c = e.class().code();
    codes().last.insert(c, e.message().to_string());
    c
}

/// Hand `e` to the error handler of `comm`; the code to return.
#[cold]
#[inline(never)]
pub fn raise(comm: MPI_Comm, e: Error) -> c_int {
    let code = code_of(&e);
    invoke(comm, code, &e.to_string())
}

/// Invoke `comm`'s error handler on `code` (`msg` for the fatal handlers).
pub fn invoke(comm: MPI_Comm, code: c_int, msg: &str) -> c_int {
    let errh = errhandler_of(comm);
    match errh {
        MPI_ERRORS_RETURN => code,
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT => {
            gmpi::abort(if code == 0 { 1 } else { code }, msg)
        }
        h => match handles::decode(handles::Kind::Errhandler, h)
            .and_then(|i| state().errhs.get(i).copied())
        {
            Some(o) => {
                crate::ptr::call_errhandler(o.f, comm, code);
                code
            }
            None => gmpi::abort(code, msg),
        },
    }
}

/// The error handler set on `comm` (`MPI_ERRORS_ARE_FATAL` if none or the
/// handle is invalid).
pub fn errhandler_of(comm: MPI_Comm) -> MPI_Errhandler {
    let st = state();
    handles::comm_slot(comm)
        .and_then(|i| st.comms.get(i))
        .map(|o| o.errh)
        .unwrap_or(MPI_ERRORS_ARE_FATAL)
}

/// The class of `code` (`None` if it is not a code gmpi knows).
pub fn class_of(code: c_int) -> Option<c_int> {
    if code == MPI_SUCCESS || ErrorClass::from_code(code).is_some() || (1..=77).contains(&code) {
        return Some(code);
    }
    let c = codes();
    if (FIRST_USER_CLASS..c.next_class).contains(&code) {
        return Some(code);
    }
    c.user_codes.get(&code).copied()
}

/// The text of `code`.
pub fn string_of(code: c_int) -> Option<String> {
    let c = codes();
    if let Some(s) = c.strings.get(&code) {
        return Some(s.clone());
    }
    if let Some(s) = c.last.get(&code) {
        return Some(s.clone());
    }
    drop(c);
    let class = class_of(code)?;
    Some(match ErrorClass::from_code(class) {
        Some(k) => format!("{}: {}", k.name(), describe(class)),
        None if class == MPI_SUCCESS => "MPI_SUCCESS: no errors".into(),
        None => format!("error class {class}: {}", describe(class)),
    })
}

fn describe(class: c_int) -> &'static str {
    match class {
        1 => "invalid buffer pointer",
        2 => "invalid count argument",
        3 => "invalid datatype",
        4 => "invalid tag",
        5 => "invalid communicator",
        6 => "invalid rank",
        7 => "invalid root",
        8 => "invalid group",
        9 => "invalid operation",
        10 => "invalid topology",
        11 => "invalid dimension argument",
        12 => "invalid argument",
        13 => "unknown error",
        14 => "message truncated",
        15 => "other error",
        16 => "internal error",
        17 => "error code is in status",
        18 => "pending request",
        19 => "invalid request",
        28 => "invalid info object",
        29 => "invalid info key",
        30 => "invalid info value",
        31 => "info key not defined",
        34 => "out of memory",
        44 => "operation not supported by gmpi",
        45 => "invalid window",
        48 => "invalid attribute key",
        101 => "a process failed",
        _ => "error",
    }
}

/// `MPI_Add_error_class`.
pub fn add_class() -> c_int {
    let mut c = codes();
    let k = c.next_class;
    c.next_class += 1;
    k
}

/// `MPI_Add_error_code`.
pub fn add_code(class: c_int) -> Option<c_int> {
    class_of(class).filter(|&k| k == class)?;
    let mut c = codes();
    let k = c.next_code;
    c.next_code += 1;
    c.user_codes.insert(k, class);
    Some(k)
}

/// `MPI_Add_error_string`.
pub fn set_string(code: c_int, s: String) -> bool {
    if class_of(code).is_none() {
        return false;
    }
    codes().strings.insert(code, s);
    true
}

/// The largest error code in use (`MPI_LASTUSEDCODE`).
pub fn last_used_code() -> c_int {
    let c = codes();
    (c.next_code - 1).max(c.next_class - 1)
}
