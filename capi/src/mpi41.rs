//! The MPI 4.1 additions and MPI 5.0's handle and ABI queries, as MPICH
//! 4.1+ and the MPICH 5 wheel's `libmpi.so.12` export them (programs built
//! against those, and mpi4py, which looks them up at run time, call them):
//!
//! - status fields (`MPI_Status_get/set_source`, `_tag`, `_error`),
//!   `MPI_Status_set_elements_c` and the `mpi_f08` status conversions
//!   (`MPI_F08_status` has `MPI_Status`'s layout in the MPICH ABI);
//! - `MPI_Remove_error_class`, `_code`, `_string`;
//! - `MPI_Request_get_status_any`, `_all`, `_some` (look, complete nothing);
//! - `MPI_Type_get_value_index` (the pair types of `MPI_MINLOC`/`MAXLOC`);
//! - `MPI_Get_hw_resource_info` (an empty info object, as MPICH);
//! - buffers per communicator and per session, flushes and
//!   `MPI_BUFFER_AUTOMATIC` (the work is in `bsend.rs`);
//! - `MPI_X_toint`/`_fromint` and `MPI_Session_c2f`/`_f2c` (the identity:
//!   MPICH ABI handles are integers; `MPI_File`, a pointer, goes through
//!   its Fortran number);
//! - `MPI_Abi_get_version` (-1.-1: gmpi implements MPICH's ABI, not the
//!   MPI-5 standard ABI, as MPICH's own build of it answers),
//!   `MPI_Abi_get_info`, `_get_fortran_info`, `_get/set_fortran_booleans`,
//!   `_set_fortran_info` (what gmpi's Fortran bindings were built with;
//!   a different setting is refused).
//!
//! `mpi.h` declares the MPI 4.1 ones (gmpi reports MPI 4.1; the ABI check
//! holds them to the MPICH 5 wheel's header), not the MPI 5.0 ones.

use std::ffi::{c_int, c_void};

use gmpi::{Error, ErrorClass};

use crate::abi::*;
use crate::bsend::{self, Owner};
use crate::errors;
use crate::info;
use crate::p2p::{self, Peek};
use crate::ptr;
use crate::resolve;
use crate::tables::*;

/// The key/value pairs of `MPI_Abi_get_info`.
const ABI_INFO: [(&str, &str); 3] = [
    ("mpi_aint_size", "8"),
    ("mpi_count_size", "8"),
    ("mpi_offset_size", "8"),
];

/// Fortran `LOGICAL`, `INTEGER`, `REAL` and `DOUBLE PRECISION` sizes of
/// gmpi's Fortran bindings (gfortran's defaults).
const FORTRAN_INFO: [(&str, &str); 4] = [
    ("mpi_logical_size", "4"),
    ("mpi_integer_size", "4"),
    ("mpi_real_size", "4"),
    ("mpi_double_precision_size", "8"),
];
/// The sized Fortran types `MPI_Abi_get_fortran_info` reports on, with
/// gmpi's handle for each. `None`: gmpi's header (MPICH 4's names plus
/// MPI 4.1's) does not name it (the `LOGICALn` kinds, `INTEGER16`, `REAL2`, `COMPLEX4`),
/// so it is not supported, as for MPICH before 5.0.
const FORTRAN_TYPES: [(&str, Option<MPI_Datatype>); 19] = [
    ("logical1", None),
    ("logical2", None),
    ("logical4", None),
    ("logical8", None),
    ("logical16", None),
    ("integer1", Some(MPI_INTEGER1)),
    ("integer2", Some(MPI_INTEGER2)),
    ("integer4", Some(MPI_INTEGER4)),
    ("integer8", Some(MPI_INTEGER8)),
    ("integer16", None),
    ("real2", None),
    ("real4", Some(MPI_REAL4)),
    ("real8", Some(MPI_REAL8)),
    ("real16", Some(MPI_REAL16)),
    ("complex4", None),
    ("complex8", Some(MPI_COMPLEX8)),
    ("complex16", Some(MPI_COMPLEX16)),
    ("complex32", Some(MPI_COMPLEX32)),
    ("double_complex", Some(MPI_DOUBLE_COMPLEX)),
];

/// What gmpi's Fortran bindings were built with; a sized type is
/// "supported" when gmpi has it as a predefined datatype.
fn fortran_info() -> InfoObj {
    let mut o = InfoObj::default();
    for (k, v) in FORTRAN_INFO {
        o.set(k, v);
    }
    for (k, h) in FORTRAN_TYPES {
        let yes = h.is_some_and(|h| resolve::predefined(h).is_some());
        o.set(
            &format!("mpi_{k}_supported"),
            if yes { "true" } else { "false" },
        );
    }
    o
}

/// A Fortran `LOGICAL` of `size` bytes holding `v` (gfortran: 1 and 0).
fn logical(call: &str, size: c_int) -> Result<usize, Error> {
    match size {
        1 | 2 | 4 | 8 | 16 => Ok(size as usize),
        _ => Err(err(
            ErrorClass::Arg,
            call,
            format!("logical_size = {size}; Fortran LOGICAL kinds have 1, 2, 4, 8 or 16 bytes"),
        )),
    }
}

/// The bytes at `p` (`n` of them) as a little-endian integer.
fn read_logical(call: &str, what: &str, p: *const c_void, n: usize) -> Result<u128, Error> {
    let bytes = ptr::slice(call, what, p.cast::<u8>(), n)?;
    Ok(bytes
        .iter()
        .rev()
        .fold(0u128, |a, &b| a << 8 | u128::from(b)))
}

/// Write `v` to the `n` bytes at `p`, little-endian.
fn write_logical(call: &str, what: &str, p: *mut c_void, n: usize, v: u128) -> Result<(), Error> {
    let out = ptr::slice_mut(call, what, p.cast::<u8>(), n)?;
    for (i, b) in out.iter_mut().enumerate() {
        *b = (v >> (8 * i)) as u8;
    }
    Ok(())
}

/// The requests of an `array_of_requests` argument.
fn requests<'a>(
    call: &str,
    n: c_int,
    reqs: *const MPI_Request,
) -> Result<&'a [MPI_Request], Error> {
    let n = ptr::count(call, "count", n)?;
    ptr::slice(call, "array_of_requests", reqs, n)
}

/// Status `i` of an `array_of_statuses` (nothing for `MPI_STATUSES_IGNORE`).
fn status_at(statuses: *mut MPI_Status, i: usize, s: &MPI_Status) {
    if statuses as usize != MPI_STATUSES_IGNORE {
        // A status array has one entry per request; `i` is one of them.
        ptr::status(statuses.wrapping_add(i), s);
    }
}

/// The pair type of `MPI_MINLOC`/`MPI_MAXLOC` of values of `value` and
/// indices of `index`, if the standard names one.
fn value_index(value: MPI_Datatype, index: MPI_Datatype) -> MPI_Datatype {
    match (value, index) {
        (MPI_FLOAT, MPI_INT) => MPI_FLOAT_INT,
        (MPI_DOUBLE, MPI_INT) => MPI_DOUBLE_INT,
        (MPI_LONG, MPI_INT) => MPI_LONG_INT,
        (MPI_INT, MPI_INT) => MPI_2INT,
        (MPI_SHORT, MPI_INT) => MPI_SHORT_INT,
        (MPI_LONG_DOUBLE, MPI_INT) => MPI_LONG_DOUBLE_INT,
        (MPI_REAL, MPI_REAL) => MPI_2REAL,
        (MPI_DOUBLE_PRECISION, MPI_DOUBLE_PRECISION) => MPI_2DOUBLE_PRECISION,
        (MPI_INTEGER, MPI_INTEGER) => MPI_2INTEGER,
        _ => MPI_DATATYPE_NULL,
    }
}

/// `MPI_Comm_attach_buffer` and friends: the owner of communicator `h`'s
/// buffer (checking `h`).
fn comm_owner(call: &str, h: MPI_Comm) -> Result<Owner, Error> {
    resolve::comm(call, h)?;
    Ok(Owner::Comm(h))
}

/// The owner of session `h`'s buffer (checking `h`).
fn session_owner(call: &str, h: MPI_Session) -> Result<Owner, Error> {
    crate::session::check(call, h)?;
    Ok(Owner::Session(h))
}

/// `MPI_*_detach_buffer` with an `int` size.
fn detach_int(call: &str, owner: Owner, addr: *mut c_void, size: *mut c_int) -> Result<(), Error> {
    let n = bsend::detach(call, owner, addr)?;
    // A buffer attached by an `_c` call may not fit an int.
    ptr::write(
        call,
        "size",
        size,
        c_int::try_from(n).unwrap_or(MPI_UNDEFINED),
    )
}

/// `MPI_*_iflush_buffer`: the request, registered.
fn iflush(
    call: &'static str,
    owner: Owner,
    errh: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    if request.is_null() {
        return Err(err(ErrorClass::Arg, call, "request is NULL"));
    }
    let a = bsend::iflush(call, owner, errh)?;
    ptr::write(call, "request", request, new_request(a))
}

mpi_fn! {
    noinit fn Status_get_source(status: *const MPI_Status, source: *mut c_int) {
        let s = ptr::read_status(CALL, status)?;
        ptr::write(CALL, "source", source, s.MPI_SOURCE)
    }
    noinit fn Status_get_tag(status: *const MPI_Status, tag: *mut c_int) {
        let s = ptr::read_status(CALL, status)?;
        ptr::write(CALL, "tag", tag, s.MPI_TAG)
    }
    noinit fn Status_get_error(status: *const MPI_Status, error: *mut c_int) {
        let s = ptr::read_status(CALL, status)?;
        ptr::write(CALL, "error", error, s.MPI_ERROR)
    }
    noinit fn Status_set_source(status: *mut MPI_Status, source: c_int) {
        let mut s = ptr::read_status(CALL, status)?;
        s.MPI_SOURCE = source;
        ptr::write(CALL, "status", status, s)
    }
    noinit fn Status_set_tag(status: *mut MPI_Status, tag: c_int) {
        let mut s = ptr::read_status(CALL, status)?;
        s.MPI_TAG = tag;
        ptr::write(CALL, "status", status, s)
    }
    noinit fn Status_set_error(status: *mut MPI_Status, error: c_int) {
        let mut s = ptr::read_status(CALL, status)?;
        s.MPI_ERROR = error;
        ptr::write(CALL, "status", status, s)
    }
    fn Status_set_elements_c(status: *mut MPI_Status, datatype: MPI_Datatype, count: MPI_Count) {
        p2p::set_elements(CALL, status, datatype, count)
    }
    noinit fn Status_c2f08(c_status: *const MPI_Status, f08_status: *mut MPI_Status) {
        let s = ptr::read(CALL, "c_status", c_status)?;
        ptr::write(CALL, "f08_status", f08_status, s)
    }
    noinit fn Status_f082c(f08_status: *const MPI_Status, c_status: *mut MPI_Status) {
        let s = ptr::read(CALL, "f08_status", f08_status)?;
        ptr::write(CALL, "c_status", c_status, s)
    }
    noinit fn Status_f082f(f08_status: *const MPI_Status, f_status: *mut MPI_Fint) {
        let s = ptr::read(CALL, "f08_status", f08_status)?;
        ptr::write(CALL, "f_status", f_status.cast::<MPI_Status>(), s)
    }
    noinit fn Status_f2f08(f_status: *const MPI_Fint, f08_status: *mut MPI_Status) {
        let s = ptr::read(CALL, "f_status", f_status.cast::<MPI_Status>())?;
        ptr::write(CALL, "f08_status", f08_status, s)
    }

    noinit safe fn Remove_error_class(errorclass: c_int) {
        errors::remove_class(errorclass).map_err(|m| err(ErrorClass::Arg, CALL, m))
    }
    noinit safe fn Remove_error_code(errorcode: c_int) {
        errors::remove_code(errorcode).map_err(|m| err(ErrorClass::Arg, CALL, m))
    }
    noinit safe fn Remove_error_string(errorcode: c_int) {
        errors::remove_string(errorcode).map_err(|m| err(ErrorClass::Arg, CALL, m))
    }

    fn Request_get_status_any(count: c_int, array_of_requests: *const MPI_Request, indx: *mut c_int, flag: *mut c_int, status: *mut MPI_Status) {
        let reqs = requests(CALL, count, array_of_requests)?;
        let mut active = false;
        for (i, &r) in reqs.iter().enumerate() {
            match p2p::peek(CALL, r)? {
                Peek::Inactive => {}
                Peek::Pending => active = true,
                Peek::Done(s) => {
                    ptr::write(CALL, "indx", indx, i as c_int)?;
                    ptr::status(status, &s);
                    return ptr::write(CALL, "flag", flag, 1);
                }
            }
        }
        // None complete: flag is false, unless none is active at all.
        ptr::write(CALL, "indx", indx, MPI_UNDEFINED)?;
        if !active {
            ptr::status(status, &MPI_Status::inactive());
        }
        ptr::write(CALL, "flag", flag, (!active) as c_int)
    }
    fn Request_get_status_all(count: c_int, array_of_requests: *const MPI_Request, flag: *mut c_int, array_of_statuses: *mut MPI_Status) {
        let reqs = requests(CALL, count, array_of_requests)?;
        let mut seen = Vec::with_capacity(reqs.len());
        for &r in reqs {
            match p2p::peek(CALL, r)? {
                Peek::Pending => return ptr::write(CALL, "flag", flag, 0),
                Peek::Inactive => seen.push(MPI_Status::inactive()),
                Peek::Done(s) => seen.push(s),
            }
        }
        for (i, s) in seen.iter().enumerate() {
            status_at(array_of_statuses, i, s);
        }
        ptr::write(CALL, "flag", flag, 1)
    }
    fn Request_get_status_some(incount: c_int, array_of_requests: *const MPI_Request, outcount: *mut c_int, array_of_indices: *mut c_int, array_of_statuses: *mut MPI_Status) {
        let reqs = requests(CALL, incount, array_of_requests)?;
        let mut active = false;
        let mut done = Vec::new();
        for (i, &r) in reqs.iter().enumerate() {
            match p2p::peek(CALL, r)? {
                Peek::Inactive => {}
                Peek::Pending => active = true,
                Peek::Done(s) => done.push((i, s)),
            }
        }
        if done.is_empty() && !active {
            return ptr::write(CALL, "outcount", outcount, MPI_UNDEFINED);
        }
        let idx = ptr::slice_mut(CALL, "array_of_indices", array_of_indices, done.len())?;
        for (k, (i, s)) in done.iter().enumerate() {
            idx[k] = *i as c_int;
            status_at(array_of_statuses, k, s);
        }
        ptr::write(CALL, "outcount", outcount, done.len() as c_int)
    }

    noinit fn Type_get_value_index(value_type: MPI_Datatype, index_type: MPI_Datatype, pair_type: *mut MPI_Datatype) {
        resolve::dtype(CALL, value_type)?;
        resolve::dtype(CALL, index_type)?;
        ptr::write(CALL, "pair_type", pair_type, value_index(value_type, index_type))
    }

    fn Get_hw_resource_info(hw_info: *mut MPI_Info) {
        // No hardware resource keys are defined (MPICH also returns none).
        ptr::write(CALL, "hw_info", hw_info, new_info(InfoObj::default()))
    }

    noinit fn Abi_get_version(abi_major: *mut c_int, abi_minor: *mut c_int) {
        ptr::write(CALL, "abi_major", abi_major, -1)?;
        ptr::write(CALL, "abi_minor", abi_minor, -1)
    }
    noinit fn Abi_get_info(info: *mut MPI_Info) {
        let mut o = InfoObj::default();
        for (k, v) in ABI_INFO {
            o.set(k, v);
        }
        ptr::write(CALL, "info", info, new_info(o))
    }
    noinit fn Abi_get_fortran_info(info: *mut MPI_Info) {
        ptr::write(CALL, "info", info, new_info(fortran_info()))
    }
    noinit safe fn Abi_set_fortran_info(info: MPI_Info) {
        resolve::check_info(CALL, info)?;
        if info == MPI_INFO_NULL {
            return Ok(());
        }
        let given = info::lookup(CALL, info)?;
        let ours = fortran_info();
        for (k, v) in &given.entries {
            if ours.get(k).is_some_and(|o| o != v) {
                return Err(err(ErrorClass::Arg, CALL, format!(
                    "{k} = {v}, but gmpi's Fortran bindings were built with {k} = {}",
                    ours.get(k).unwrap_or_default())));
            }
        }
        Ok(())
    }
    noinit fn Abi_get_fortran_booleans(logical_size: c_int, logical_true: *mut c_void, logical_false: *mut c_void, is_set: *mut c_int) {
        let n = logical(CALL, logical_size)?;
        write_logical(CALL, "logical_true", logical_true, n, 1)?;
        write_logical(CALL, "logical_false", logical_false, n, 0)?;
        ptr::write(CALL, "is_set", is_set, 1)
    }
    noinit fn Abi_set_fortran_booleans(logical_size: c_int, logical_true: *mut c_void, logical_false: *mut c_void) {
        let n = logical(CALL, logical_size)?;
        let (t, f) = (read_logical(CALL, "logical_true", logical_true, n)?, read_logical(CALL, "logical_false", logical_false, n)?);
        if (t, f) != (1, 0) {
            return Err(err(ErrorClass::Arg, CALL, format!(
                "LOGICAL values {t} (true) and {f} (false); gmpi's Fortran bindings use 1 and 0")));
        }
        Ok(())
    }

    fn Buffer_attach(buffer: *mut c_void, size: c_int) {
        bsend::attach(CALL, Owner::Process, buffer, size.into())
    }
    fn Buffer_attach_c(buffer: *mut c_void, size: MPI_Count) {
        bsend::attach(CALL, Owner::Process, buffer, size)
    }
    fn Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) {
        detach_int(CALL, Owner::Process, buffer_addr, size)
    }
    fn Buffer_detach_c(buffer_addr: *mut c_void, size: *mut MPI_Count) {
        let n = bsend::detach(CALL, Owner::Process, buffer_addr)?;
        ptr::write(CALL, "size", size, n as MPI_Count)
    }
    safe fn Buffer_flush() {
        bsend::flush(Owner::Process)
    }
    fn Buffer_iflush(request: *mut MPI_Request) {
        iflush(CALL, Owner::Process, MPI_COMM_WORLD, request)
    }
    fn Comm_attach_buffer(comm: MPI_Comm, buffer: *mut c_void, size: c_int) {
        bsend::attach(CALL, comm_owner(CALL, comm)?, buffer, size.into())
    }
    fn Comm_attach_buffer_c(comm: MPI_Comm, buffer: *mut c_void, size: MPI_Count) {
        bsend::attach(CALL, comm_owner(CALL, comm)?, buffer, size)
    }
    fn Comm_detach_buffer(comm: MPI_Comm, buffer_addr: *mut c_void, size: *mut c_int) {
        detach_int(CALL, comm_owner(CALL, comm)?, buffer_addr, size)
    }
    fn Comm_detach_buffer_c(comm: MPI_Comm, buffer_addr: *mut c_void, size: *mut MPI_Count) {
        let n = bsend::detach(CALL, comm_owner(CALL, comm)?, buffer_addr)?;
        ptr::write(CALL, "size", size, n as MPI_Count)
    }
    safe fn Comm_flush_buffer(comm: MPI_Comm) {
        bsend::flush(comm_owner(CALL, comm)?)
    }
    fn Comm_iflush_buffer(comm: MPI_Comm, request: *mut MPI_Request) {
        iflush(CALL, comm_owner(CALL, comm)?, comm, request)
    }
    fn Session_attach_buffer(session: MPI_Session, buffer: *mut c_void, size: c_int) {
        bsend::attach(CALL, session_owner(CALL, session)?, buffer, size.into())
    }
    fn Session_attach_buffer_c(session: MPI_Session, buffer: *mut c_void, size: MPI_Count) {
        bsend::attach(CALL, session_owner(CALL, session)?, buffer, size)
    }
    fn Session_detach_buffer(session: MPI_Session, buffer_addr: *mut c_void, size: *mut c_int) {
        detach_int(CALL, session_owner(CALL, session)?, buffer_addr, size)
    }
    fn Session_detach_buffer_c(session: MPI_Session, buffer_addr: *mut c_void, size: *mut MPI_Count) {
        let n = bsend::detach(CALL, session_owner(CALL, session)?, buffer_addr)?;
        ptr::write(CALL, "size", size, n as MPI_Count)
    }
    safe fn Session_flush_buffer(session: MPI_Session) {
        bsend::flush(session_owner(CALL, session)?)
    }
    fn Session_iflush_buffer(session: MPI_Session, request: *mut MPI_Request) {
        iflush(CALL, session_owner(CALL, session)?, MPI_COMM_WORLD, request)
    }
}

/// `MPI_X_toint` and `MPI_X_fromint` (MPI 5.0): the identity, since MPICH
/// ABI handles are integers.
macro_rules! toint_fromint {
    ($($obj:ident: $cty:ty),*) => { paste::paste! { $(
        #[doc = concat!("`MPI_", stringify!($obj), "_toint` (the identity in the MPICH ABI).")]
        #[no_mangle]
        pub extern "C" fn [<PMPI_ $obj _toint>](h: $cty) -> c_int { h as c_int }
        #[doc = concat!("`MPI_", stringify!($obj), "_toint`.")]
        #[no_mangle]
        pub extern "C" fn [<MPI_ $obj _toint>](h: $cty) -> c_int { h as c_int }
        #[doc = concat!("`MPI_", stringify!($obj), "_fromint` (the identity in the MPICH ABI).")]
        #[no_mangle]
        pub extern "C" fn [<PMPI_ $obj _fromint>](h: c_int) -> $cty { h as $cty }
        #[doc = concat!("`MPI_", stringify!($obj), "_fromint`.")]
        #[no_mangle]
        pub extern "C" fn [<MPI_ $obj _fromint>](h: c_int) -> $cty { h as $cty }
    )* } };
}

toint_fromint!(Comm: MPI_Comm, Errhandler: MPI_Errhandler, Group: MPI_Group, Info: MPI_Info,
    Message: MPI_Message, Op: MPI_Op, Request: MPI_Request, Session: MPI_Session,
    Type: MPI_Datatype, Win: MPI_Win);

/// `MPI_File_toint`: its Fortran number (`MPI_FILE_NULL` is 0; gmpi opens
/// no files).
#[no_mangle]
pub extern "C" fn PMPI_File_toint(file: MPI_File) -> c_int {
    crate::unsupported::PMPI_File_c2f(file)
}
/// `MPI_File_toint`: forwards to `PMPI_File_toint`.
#[no_mangle]
pub extern "C" fn MPI_File_toint(file: MPI_File) -> c_int {
    PMPI_File_toint(file)
}
/// `MPI_File_fromint`: the file of a Fortran number.
#[no_mangle]
pub extern "C" fn PMPI_File_fromint(file: c_int) -> MPI_File {
    crate::unsupported::PMPI_File_f2c(file)
}
/// `MPI_File_fromint`: forwards to `PMPI_File_fromint`.
#[no_mangle]
pub extern "C" fn MPI_File_fromint(file: c_int) -> MPI_File {
    PMPI_File_fromint(file)
}
