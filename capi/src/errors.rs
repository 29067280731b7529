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
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{LazyLock, Mutex};

use gmpi::{Error, ErrorClass};

use crate::abi::*;
use crate::ptr;
use crate::tables::{comm_slot, err, state};

// ---- the error handler target of the current call ----

/// The communicator whose error handler the current call uses: a plain
/// global while one thread makes MPI calls at a time (a thread-local in a
/// shared library costs a `__tls_get_addr` call on every MPI call), and a
/// thread-local under `MPI_THREAD_MULTIPLE`, where calls overlap.
static TARGET: AtomicI32 = AtomicI32::new(MPI_COMM_WORLD);
static MULTI: AtomicBool = AtomicBool::new(false);
thread_local! {
    static THREAD_TARGET: std::cell::Cell<MPI_Comm> = const { std::cell::Cell::new(MPI_COMM_WORLD) };
}

/// Calls may overlap from now on (`MPI_Init_thread` with
/// `MPI_THREAD_MULTIPLE`): each thread keeps its own target.
pub fn set_multithreaded() {
    MULTI.store(true, Ordering::SeqCst);
}

/// Whether calls may overlap (`MPI_THREAD_MULTIPLE`).
#[inline]
pub fn multithreaded() -> bool {
    MULTI.load(Ordering::Relaxed)
}

/// Errors of the current call go to `comm`'s error handler.
#[inline]
pub fn set_target(comm: MPI_Comm) {
    if MULTI.load(Ordering::Relaxed) {
        THREAD_TARGET.with(|t| t.set(comm));
    } else {
        TARGET.store(comm, Ordering::Relaxed);
    }
}

/// The communicator whose error handler the current call uses.
pub fn target() -> MPI_Comm {
    if MULTI.load(Ordering::Relaxed) {
        THREAD_TARGET.with(|t| t.get())
    } else {
        TARGET.load(Ordering::Relaxed)
    }
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
    /// The index of the next user class (`ERROR_DYN_MASK | index`).
    next_class: c_int,
    /// The index of the next user code (`class | index << 8`).
    next_code: c_int,
    /// `MPI_LASTUSEDCODE`.
    last_used: c_int,
    /// User classes `MPI_Remove_error_class` removed (their numbers are
    /// not handed out again).
    removed_classes: std::collections::HashSet<c_int>,
}

impl Codes {
    /// `MPI_LASTUSEDCODE` after a removal: the largest class or code still
    /// in use, `MPI_ERR_LASTCODE` at least.
    fn recount(&mut self) {
        let classes = (1..self.next_class)
            .map(|i| ERROR_DYN_MASK | i)
            .filter(|k| !self.removed_classes.contains(k));
        self.last_used = classes
            .chain(self.user_codes.keys().copied())
            .fold(MPI_ERR_LASTCODE, c_int::max);
    }
}

static CODES: LazyLock<Mutex<Codes>> = LazyLock::new(|| {
    Mutex::new(Codes {
        next_class: 1,
        next_code: 1,
        last_used: MPI_ERR_LASTCODE,
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
    if let Some(i) = decode(Kind::Win, comm) {
        // A window's (its handle is the target of window calls).
        return st.wins.get(i).map_or(MPI_ERRORS_ARE_FATAL, |o| o.errh);
    }
    if let Some(i) = decode(Kind::Session, comm) {
        return st.sessions.get(i).map_or(MPI_ERRORS_ARE_FATAL, |o| o.errh);
    }
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
    if predefined(code).is_some() {
        return Some(code);
    }
    let c = codes();
    if is_user_class(&c, code) {
        return Some(code);
    }
    c.user_codes.get(&code).copied()
}

/// Whether `code` is a class `MPI_Add_error_class` handed out.
fn is_user_class(c: &Codes, code: c_int) -> bool {
    code & ERROR_DYN_MASK != 0
        && (1..c.next_class).contains(&(code & !ERROR_DYN_MASK))
        && !c.removed_classes.contains(&code)
}

/// `MPI_Remove_error_class`: a class `MPI_Add_error_class` made, with no
/// code left in it (the error says what is wrong).
pub fn remove_class(class: c_int) -> Result<(), String> {
    let mut c = codes();
    if !is_user_class(&c, class) {
        return Err(format!(
            "errorclass = {class} is not a class MPI_Add_error_class made"
        ));
    }
    if let Some(code) = c
        .user_codes
        .iter()
        .find(|(_, &k)| k == class)
        .map(|(&code, _)| code)
    {
        return Err(format!(
            "errorclass = {class} still has error code {code} (remove its codes first)"
        ));
    }
    if c.strings.contains_key(&class) {
        return Err(format!(
            "errorclass = {class} still has its error string (remove it first, as MPICH requires)"
        ));
    }
    c.removed_classes.insert(class);
    c.recount();
    Ok(())
}

/// `MPI_Remove_error_code`: a code `MPI_Add_error_code` made.
pub fn remove_code(code: c_int) -> Result<(), String> {
    let mut c = codes();
    if !c.user_codes.contains_key(&code) {
        return Err(format!(
            "errorcode = {code} is not a code MPI_Add_error_code made"
        ));
    }
    if c.strings.contains_key(&code) {
        return Err(format!(
            "errorcode = {code} still has its error string (remove it first, as MPICH requires)"
        ));
    }
    c.user_codes.remove(&code);
    c.recount();
    Ok(())
}

/// `MPI_Remove_error_string`: the string `MPI_Add_error_string` gave a
/// user class or code (it has the empty string again; one without a
/// string is left as it is, as MPICH does).
pub fn remove_string(code: c_int) -> Result<(), String> {
    let mut c = codes();
    if !is_user_class(&c, code) && !c.user_codes.contains_key(&code) {
        return Err(format!(
            "errorcode = {code} is not a user error class or code"
        ));
    }
    c.strings.remove(&code);
    Ok(())
}

/// The text of `code`.
pub fn string_of(code: c_int) -> Option<String> {
    let c = codes();
    if let Some(s) = c.strings.get(&code) {
        return Some(s.clone());
    }
    // A user class or code has the empty string until one is added
    // (MPI 4.0 §9.5, as MPICH).
    if is_user_class(&c, code) || c.user_codes.contains_key(&code) {
        return Some(String::new());
    }
    if let Some(s) = c.last.get(&code) {
        return Some(s.clone());
    }
    drop(c);
    let class = class_of(code)?;
    Some(match predefined(class) {
        Some((name, text)) => format!("{name}: {text}"),
        None => format!("error class {class}: error"),
    })
}

/// `MPI_Add_error_class`: MPICH's numbering, `ERROR_DYN_MASK | n` (`None`
/// when all are used).
pub fn add_class() -> Option<c_int> {
    let mut c = codes();
    if c.next_class >= ERROR_MAX_NCLASS {
        return None;
    }
    let k = ERROR_DYN_MASK | c.next_class;
    c.next_class += 1;
    c.last_used = c.last_used.max(k);
    Some(k)
}

/// `MPI_Add_error_code`: MPICH's numbering, `class | n << 8` (`Err(false)`
/// if `class` is not a class, `Err(true)` when all codes are used).
pub fn add_code(class: c_int) -> Result<c_int, bool> {
    if class_of(class) != Some(class) {
        return Err(false);
    }
    let mut c = codes();
    if c.next_code >= ERROR_MAX_NCODE {
        return Err(true);
    }
    let k = class | (c.next_code << ERROR_GENERIC_SHIFT);
    c.next_code += 1;
    c.user_codes.insert(k, class);
    // MPI_LASTUSEDCODE bounds every code and class in use (MPICH 4.0 only
    // follows classes; the standard says codes too).
    c.last_used = c.last_used.max(k);
    Ok(k)
}

/// `MPI_Add_error_string`.
pub fn set_string(code: c_int, s: String) -> bool {
    if class_of(code).is_none() {
        return false;
    }
    codes().strings.insert(code, s);
    true
}

/// The largest error code in use (`MPI_LASTUSEDCODE`): `MPI_ERR_LASTCODE`
/// until a class or code is added.
pub fn last_used_code() -> c_int {
    codes().last_used
}
