//! Layer 3 of the C ABI: error codes, error strings and error handlers.
//!
//! Error codes are the error classes themselves (as Open MPI returns them),
//! so `rc == MPI_ERR_TRUNCATE` works as well as `MPI_Error_class`;
//! `MPI_Error_string` gives the message of the latest error of that class on
//! this process, which names the call, the argument and the rank. The
//! numbers come from [`crate::abi`] ([`class_code`]); this module keeps the
//! messages, the user's classes, codes and strings, and dispatches an error
//! to the handler of the communicator the current call named (its
//! "target": the look-up of a communicator handle records it, calls without
//! one use `MPI_COMM_WORLD`'s).

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{LazyLock, Mutex};

use gmpi::{Error, ErrorClass};

use crate::abi::*;
use crate::ptr;
use crate::tables::{comm_slot, err, state};

// ---- the error handler target of the current call ----

/// The communicator whose error handler the current call uses. A plain
/// global, not a thread-local (a thread-local in a shared library costs a
/// `__tls_get_addr` call on every MPI call): gmpi is `MPI_THREAD_FUNNELED`,
/// so one thread makes MPI calls at a time.
static TARGET: AtomicI32 = AtomicI32::new(MPI_COMM_WORLD);

/// Errors of the current call go to `comm`'s error handler.
#[inline]
pub fn set_target(comm: MPI_Comm) {
    TARGET.store(comm, Ordering::Relaxed);
}

/// The communicator whose error handler the current call uses.
pub fn target() -> MPI_Comm {
    TARGET.load(Ordering::Relaxed)
}

// ---- codes and strings ----

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

/// The code of error `e` (its class), with the message kept for
/// `MPI_Error_string`.
pub fn code_of(e: &Error) -> c_int {
    let c = class_code(e.class());
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
        h => match decode(Kind::Errhandler, h).and_then(|i| state().errhs.get(i).copied()) {
            Some(o) => {
                ptr::call_errhandler(o.f, comm, code);
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
    comm_slot(comm)
        .and_then(|i| st.comms.get(i))
        .map(|o| o.errh)
        .unwrap_or(MPI_ERRORS_ARE_FATAL)
}

/// Check that `h` names an error handler.
pub fn check_errhandler(call: &str, h: MPI_Errhandler) -> Result<(), Error> {
    let ok = matches!(
        h,
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_RETURN | MPI_ERRORS_ABORT
    ) || decode(Kind::Errhandler, h).is_some_and(|i| state().errhs.get(i).is_some());
    if ok {
        Ok(())
    } else {
        Err(err(
            ErrorClass::Arg,
            call,
            format!("errhandler = {h:#x} is not a valid error handler"),
        ))
    }
}

/// The class of `code` (`None` if it is not a code gmpi knows).
pub fn class_of(code: c_int) -> Option<c_int> {
    if code == MPI_SUCCESS
        || runtime_class(code).is_some()
        || (1..=MPI_ERR_VALUE_TOO_LARGE).contains(&code)
        || code == MPI_T_ERR_NOT_SUPPORTED
    {
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
    Some(match runtime_class(class) {
        Some(k) => format!("{}: {}", k.name(), describe(class)),
        None if class == MPI_SUCCESS => "MPI_SUCCESS: no errors".into(),
        None => format!("error class {class}: {}", describe(class)),
    })
}

fn describe(class: c_int) -> &'static str {
    match class {
        MPI_ERR_BUFFER => "invalid buffer pointer",
        MPI_ERR_COUNT => "invalid count argument",
        MPI_ERR_TYPE => "invalid datatype",
        MPI_ERR_TAG => "invalid tag",
        MPI_ERR_COMM => "invalid communicator",
        MPI_ERR_RANK => "invalid rank",
        MPI_ERR_ROOT => "invalid root",
        MPI_ERR_GROUP => "invalid group",
        MPI_ERR_OP => "invalid operation",
        MPI_ERR_TOPOLOGY => "invalid topology",
        MPI_ERR_DIMS => "invalid dimension argument",
        MPI_ERR_ARG => "invalid argument",
        MPI_ERR_UNKNOWN => "unknown error",
        MPI_ERR_TRUNCATE => "message truncated",
        MPI_ERR_OTHER => "other error",
        MPI_ERR_INTERN => "internal error",
        MPI_ERR_IN_STATUS => "error code is in status",
        MPI_ERR_PENDING => "pending request",
        MPI_ERR_REQUEST => "invalid request",
        MPI_ERR_INFO => "invalid info object",
        MPI_ERR_INFO_KEY => "invalid info key",
        MPI_ERR_INFO_VALUE => "invalid info value",
        MPI_ERR_INFO_NOKEY => "info key not defined",
        MPI_ERR_NO_MEM => "out of memory",
        MPI_ERR_UNSUPPORTED_OPERATION => "operation not supported by gmpi",
        MPI_ERR_WIN => "invalid window",
        MPI_ERR_KEYVAL => "invalid attribute key",
        MPI_ERR_PROC_FAILED => "a process failed",
        MPI_T_ERR_NOT_SUPPORTED => {
            "the tool information interface (MPI_T) is not supported by gmpi"
        }
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
