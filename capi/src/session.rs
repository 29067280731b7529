//! The MPI-4 sessions model: `MPI_Session_init`/`_finalize`, the process
//! sets (`mpi://WORLD`, `mpi://SELF`) with their info, groups made from them
//! (`MPI_Group_from_session_pset`), communicators made from groups
//! (`MPI_Comm_create_from_group`), and the sessions' error handlers.
//!
//! gmpi runs one MPI instance per process, which the world model and every
//! session share: the first `MPI_Session_init` starts the runtime if
//! `MPI_Init` has not (a later `MPI_Init` joins it), and the last
//! `MPI_Session_finalize` of a process that never called `MPI_Init`
//! finalizes it. A session cannot begin after the runtime was finalized.
//!
//! A session handle names a slot of the session table ([`SessionObj`]).
//! Errors of a call on a live session go to its error handler (the one
//! `MPI_Session_init` was given, or `MPI_Session_set_errhandler`'s).

use std::ffi::{c_char, c_int};

use gmpi::{Error, ErrorClass, Group};

use crate::abi::*;
use crate::errors;
use crate::frame;
use crate::info;
use crate::ptr;
use crate::resolve;
use crate::tables::*;

const WORLD_PSET: &str = "mpi://WORLD";
const SELF_PSET: &str = "mpi://SELF";
const PSETS: [&str; 2] = [WORLD_PSET, SELF_PSET];

/// The session `h`, with errors of the current call routed to its handler.
/// Check session handle `h` for `call` (errors go to its handler).
pub(crate) fn check(call: &str, h: MPI_Session) -> Result<(), Error> {
    session(call, h).map(|_| ())
}

fn session(call: &str, h: MPI_Session) -> Result<usize, Error> {
    match decode(Kind::Session, h).filter(|&i| state().sessions.get(i).is_some()) {
        Some(i) => {
            errors::set_target(h);
            Ok(i)
        }
        None => Err(err(
            ErrorClass::Session,
            call,
            if h == MPI_SESSION_NULL {
                "session is MPI_SESSION_NULL".to_string()
            } else {
                format!("session = {h:#x} is not a valid session")
            },
        )),
    }
}

/// The process set named `name` (names are case-insensitive).
fn pset(call: &str, name: *const c_char) -> Result<&'static str, Error> {
    let n = ptr::cstr(call, "pset_name", name)?;
    PSETS
        .into_iter()
        .find(|p| p.eq_ignore_ascii_case(&n))
        .ok_or_else(|| {
            err(
                ErrorClass::Arg,
                call,
                format!(
                    "pset_name = {n:?} names no process set (gmpi has mpi://WORLD and mpi://SELF)"
                ),
            )
        })
}

fn world() -> Result<gmpi::Communicator, Error> {
    WORLD
        .get()
        .cloned()
        .ok_or_else(|| err(ErrorClass::Other, "MPI_Session", "MPI is not running"))
}

/// The group of process set `p`.
fn pset_group(p: &str) -> Result<Group, Error> {
    let w = world()?;
    let g = w.group();
    Ok(if p == SELF_PSET {
        g.incl(&[w.rank()])?
    } else {
        g
    })
}

mpi_fn! {
    fn Session_finalize(session: *mut MPI_Session) {
        let h = ptr::read(CALL, "session", session)?;
        let i = self::session(CALL, h)?;
        let last = {
            let mut st = state();
            st.sessions.remove(i);
            let none_left = st.sessions.iter().next().is_none();
            none_left
        };
        ptr::write(CALL, "session", session, MPI_SESSION_NULL)?;
        errors::set_target(MPI_COMM_WORLD);
        if last && !crate::env::world_model() {
            crate::env::stop(CALL)?;
        }
        Ok(())
    }

    fn Session_get_info(session: MPI_Session, info_used: *mut MPI_Info) {
        let i = self::session(CALL, session)?;
        if info_used.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "info_used is NULL"));
        }
        let mut obj = state().sessions.get(i).map(|o| o.info.clone()).unwrap_or_default();
        obj.set("thread_level", crate::env::thread_level_name());
        ptr::write(CALL, "info_used", info_used, new_info(obj))
    }

    fn Session_get_num_psets(session: MPI_Session, info: MPI_Info, npset_names: *mut c_int) {
        self::session(CALL, session)?;
        resolve::check_info(CALL, info)?;
        ptr::write(CALL, "npset_names", npset_names, PSETS.len() as c_int)
    }

    fn Session_get_nth_pset(session: MPI_Session, info: MPI_Info, n: c_int, pset_len: *mut c_int, pset_name: *mut c_char) {
        self::session(CALL, session)?;
        resolve::check_info(CALL, info)?;
        let Some(name) = usize::try_from(n).ok().and_then(|n| PSETS.get(n)) else {
            return Err(err(ErrorClass::Arg, CALL, format!("n = {n}; there are {} process sets", PSETS.len())));
        };
        let room = ptr::read(CALL, "pset_len", pset_len)?;
        let need = name.len() as c_int + 1;
        if room > 0 {
            // At most room - 1 characters and the terminating NUL.
            let mut out = 0;
            ptr::write_cstr(CALL, "pset_name", pset_name, room as usize, name, &mut out)?;
        }
        ptr::write(CALL, "pset_len", pset_len, need)
    }

    fn Session_get_pset_info(session: MPI_Session, pset_name: *const c_char, info: *mut MPI_Info) {
        self::session(CALL, session)?;
        let p = pset(CALL, pset_name)?;
        if info.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "info is NULL"));
        }
        let size = pset_group(p)?.size();
        let mut obj = InfoObj::default();
        obj.set("mpi_size", &size.to_string());
        ptr::write(CALL, "info", info, new_info(obj))
    }

    fn Group_from_session_pset(session: MPI_Session, pset_name: *const c_char, newgroup: *mut MPI_Group) {
        self::session(CALL, session)?;
        let p = pset(CALL, pset_name)?;
        if newgroup.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "newgroup is NULL"));
        }
        let g = new_group(pset_group(p)?);
        crate::bsend::note_session_group(g, session);
        ptr::write(CALL, "newgroup", newgroup, g)
    }

    fn Session_create_errhandler(session_errhandler_fn: Option<CommErrFn>, errhandler: *mut MPI_Errhandler) {
        crate::env::create_errhandler(CALL, session_errhandler_fn, errhandler)
    }

    safe fn Session_set_errhandler(session: MPI_Session, errhandler: MPI_Errhandler) {
        let i = self::session(CALL, session)?;
        errors::check_errhandler(CALL, errhandler)?;
        if let Some(o) = state().sessions.get_mut(i) {
            o.errh = errhandler;
        }
        Ok(())
    }

    fn Session_get_errhandler(session: MPI_Session, errhandler: *mut MPI_Errhandler) {
        let i = self::session(CALL, session)?;
        let e = state().sessions.get(i).map_or(MPI_ERRORS_RETURN, |o| o.errh);
        ptr::write(CALL, "errhandler", errhandler, e)
    }

    safe fn Session_call_errhandler(session: MPI_Session, errorcode: c_int) {
        self::session(CALL, session)?;
        let msg = errors::string_of(errorcode).unwrap_or_else(|| format!("error code {errorcode}"));
        errors::invoke(session, errorcode, &format!("MPI_Session_call_errhandler: {msg} (on rank {})", world_rank()));
        Ok(())
    }
}

/// `MPI_Session_init`'s body.
fn session_init(
    call: &str,
    info: MPI_Info,
    errhandler: MPI_Errhandler,
    out: *mut MPI_Session,
) -> Result<(), Error> {
    resolve::check_info(call, info)?;
    errors::check_errhandler(call, errhandler)?;
    if out.is_null() {
        return Err(err(ErrorClass::Arg, call, "session is NULL"));
    }
    let info = if info == MPI_INFO_NULL {
        InfoObj::default()
    } else {
        info::lookup(call, info)?
    };
    match PHASE.load(std::sync::atomic::Ordering::Acquire) {
        0 => {
            // The info key MPI-4 names for it asks for a thread level.
            let level = match info.get("thread_level") {
                Some("MPI_THREAD_MULTIPLE") => MPI_THREAD_MULTIPLE,
                Some("MPI_THREAD_SERIALIZED") => MPI_THREAD_SERIALIZED,
                Some("MPI_THREAD_SINGLE") => MPI_THREAD_SINGLE,
                _ => MPI_THREAD_FUNNELED,
            };
            crate::env::start(call, level)?;
        }
        1 => {}
        _ => {
            return Err(err(
                ErrorClass::Other,
                call,
                "MPI was finalized: gmpi runs one MPI instance per process and cannot start \
                 another",
            ))
        }
    }
    let i = state().sessions.insert(SessionObj {
        errh: errhandler,
        info,
    });
    ptr::write(call, "session", out, encode(Kind::Session, i))
}

/// `MPI_Comm_create_from_group`'s body: a communicator over `group`
/// (collective over its members, which must include this process), told
/// apart from concurrent calls by `stringtag`.
fn create_from_group(
    call: &str,
    group: MPI_Group,
    stringtag: *const c_char,
    info: MPI_Info,
    errhandler: MPI_Errhandler,
    out: *mut MPI_Comm,
) -> Result<(), Error> {
    let g = resolve::group(call, group)?;
    let tag = ptr::cstr(call, "stringtag", stringtag)?;
    resolve::check_info(call, info)?;
    errors::check_errhandler(call, errhandler)?;
    if out.is_null() {
        return Err(err(ErrorClass::Arg, call, "newcomm is NULL"));
    }
    if g.rank().is_none() {
        return Err(err(
            ErrorClass::Group,
            call,
            "this process is not a member of group",
        ));
    }
    // The tag of the creation: a hash of the string tag (FNV-1a), the same
    // on every member.
    let h = tag.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let c = world()?
        .create_group(&g, (h & 0x3fff_ffff) as i32)?
        .ok_or_else(|| {
            err(
                ErrorClass::Group,
                call,
                "this process is not a member of group",
            )
        })?;
    let mut obj = CommObj::new(c, String::new());
    obj.errh = errhandler;
    let h = new_comm(obj);
    crate::bsend::note_comm_from_group(h, group);
    ptr::write(call, "newcomm", out, h)
}

direct_fn! {
    fn Comm_create_from_group(group: MPI_Group, stringtag: *const c_char, info: MPI_Info, errhandler: MPI_Errhandler, newcomm: *mut MPI_Comm) {
        frame::with_errhandler(CALL, errhandler, || create_from_group(CALL, group, stringtag, info, errhandler, newcomm))
    }

    fn Session_init(info: MPI_Info, errhandler: MPI_Errhandler, session: *mut MPI_Session) {
        frame::with_errhandler(CALL, errhandler, || session_init(CALL, info, errhandler, session))
    }
}
