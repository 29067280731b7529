//! The calls gmpi exports but does not implement yet: MPI-IO (`MPI_File_*`,
//! `MPI_Register_datarep`), dynamic processes (spawn, ports, names,
//! `MPI_Comm_join`, `MPI_Comm_disconnect`); and, generated
//! from MPICH's headers by `capi/scripts/gen_unsupported.py` into
//! [`generated`], every other function MPICH 4's `libmpi.so.12` exports:
//! the large-count `_c` forms of the file calls and the tool
//! information interface (`MPI_T_*`).
//!
//! Each has its exact C signature, so binaries that reference it load and
//! run until they call it; the call then fails with
//! `MPI_ERR_UNSUPPORTED_OPERATION` and a message naming it, after the
//! argument checks MPICH makes first (an invalid communicator is
//! `MPI_ERR_COMM`). Where the errors
//! go follows the standard:
//! - most calls raise it on the error handler of the communicator they name
//!   (`MPI_COMM_WORLD`'s when they name none), `MPI_ERRORS_ARE_FATAL` unless
//!   the program changed it;
//! - `MPI_File_*` raise it on the error handler of `MPI_FILE_NULL` (as no
//!   file can be opened), which is `MPI_ERRORS_RETURN` by default: the call
//!   returns the code. `MPI_File_set_errhandler`, `_get_errhandler` and
//!   `_call_errhandler` on `MPI_FILE_NULL` work (with the predefined
//!   handlers);
//! - `MPI_T_*` invoke no error handler (the standard's rule for the tool
//!   interface): they return `MPI_T_ERR_NOT_SUPPORTED`, before `MPI_Init`
//!   and after `MPI_Finalize` as well.
//!
//! The first call of each (per process) prints one line on stderr naming
//! it, whatever the error handler does with the error, so a program that
//! ignores return codes still says what it lacked.
//!
//! Also here: `MPI_File_c2f`/`MPI_File_f2c` (`MPI_FILE_NULL` is Fortran 0;
//! there are no other files), and the data symbols `MPI_F_STATUS_IGNORE`,
//! `MPI_F_STATUSES_IGNORE`, `MPI_F08_STATUS_IGNORE`,
//! `MPI_F08_STATUSES_IGNORE` and `MPI_T_PVAR_ALL_HANDLES`.

use std::cell::UnsafeCell;
use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{LazyLock, Mutex};

use gmpi::{Error, ErrorClass};

use crate::abi::*;
use crate::errors;
use crate::frame;
use crate::ptr;
use crate::resolve;
use crate::tables::*;

const IO: &str = "MPI-IO";
const DYNAMIC: &str = "dynamic process management";
const TOOLS: &str = "the tool information interface (MPI_T)";

mod generated;

/// The calls that have already said on stderr that they are unsupported.
static NOTED: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Default::default);

/// Print one line on stderr naming `call`, the first time it is called in
/// this process.
fn note_once(call: &'static str, what: &str) {
    let first = NOTED.lock().unwrap_or_else(|p| p.into_inner()).insert(call);
    if first {
        eprintln!("gmpi: {call} is not supported yet ({what})");
    }
}

/// The error of an unsupported call of `family` (announced on stderr once).
fn unsupported(call: &'static str, family: &str) -> Error {
    note_once(call, family);
    err(
        ErrorClass::Unsupported,
        call,
        format!("{family} is not supported by gmpi yet"),
    )
}

/// An `MPI_T_*` call: `MPI_T_ERR_NOT_SUPPORTED`, through no error handler
/// (announced on stderr once).
fn tool_call(call: &'static str) -> c_int {
    note_once(call, TOOLS);
    MPI_T_ERR_NOT_SUPPORTED
}

/// The error handler of `MPI_FILE_NULL` (`MPI_ERRORS_RETURN` unless the
/// program set another).
static FILE_ERRH: AtomicI32 = AtomicI32::new(MPI_ERRORS_RETURN);

/// Run the body of a file call; errors go to `MPI_FILE_NULL`'s handler.
fn file_call(call: &str, f: impl FnOnce() -> Result<(), Error>) -> c_int {
    frame::run(call, true, FILE_ERRH.load(Ordering::Relaxed), f)
}

/// Check the file argument of the error-handler calls: only `MPI_FILE_NULL`
/// can be named, as gmpi opens no files.
fn file_null(call: &str, fh: MPI_File) -> Result<(), Error> {
    if fh == MPI_FILE_NULL {
        Ok(())
    } else {
        Err(err(
            ErrorClass::Arg,
            call,
            format!("file = {fh:p} is not a valid file (gmpi opens no files: MPI-IO is not supported yet)"),
        ))
    }
}

direct_fn! {
    fn File_set_errhandler(file: MPI_File, errhandler: MPI_Errhandler) {
        file_call(CALL, || {
            file_null(CALL, file)?;
            if !matches!(errhandler, MPI_ERRORS_RETURN | MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT) {
                return Err(err(ErrorClass::Arg, CALL, format!("errhandler = {errhandler:#x} is not a file error handler (gmpi has only the predefined ones for files)")));
            }
            FILE_ERRH.store(errhandler, Ordering::Relaxed);
            Ok(())
        })
    }

    fn File_get_errhandler(file: MPI_File, errhandler: *mut MPI_Errhandler) {
        file_call(CALL, || {
            file_null(CALL, file)?;
            ptr::write(CALL, "errhandler", errhandler, FILE_ERRH.load(Ordering::Relaxed))
        })
    }

    fn File_call_errhandler(fh: MPI_File, errorcode: c_int) {
        file_call(CALL, || {
            file_null(CALL, fh)?;
            if errors::class_of(errorcode).is_none() {
                return Err(err(ErrorClass::Arg, CALL, format!("errorcode = {errorcode} is not an MPI error code")));
            }
            let h = FILE_ERRH.load(Ordering::Relaxed);
            if matches!(h, MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT) {
                let msg = errors::string_of(errorcode).unwrap_or_else(|| format!("error code {errorcode}"));
                gmpi::abort(errorcode, &format!("MPI_File_call_errhandler: {msg} (on rank {})", world_rank()));
            }
            Ok(())
        })
    }
}

/// `MPI_File_c2f`: the Fortran handle of a file (0 for `MPI_FILE_NULL`,
/// the only file handle there is). Safe: it never dereferences `file`.
#[no_mangle]
pub extern "C" fn PMPI_File_c2f(_file: MPI_File) -> MPI_Fint {
    0
}
/// `MPI_File_c2f`: forwards to `PMPI_File_c2f`.
#[no_mangle]
pub extern "C" fn MPI_File_c2f(file: MPI_File) -> MPI_Fint {
    PMPI_File_c2f(file)
}
/// `MPI_File_f2c`: the C handle of a Fortran file handle (`MPI_FILE_NULL`:
/// gmpi opens no files).
#[no_mangle]
pub extern "C" fn PMPI_File_f2c(_file: MPI_Fint) -> MPI_File {
    MPI_FILE_NULL
}
/// `MPI_File_f2c`: forwards to `PMPI_File_f2c`.
#[no_mangle]
pub extern "C" fn MPI_File_f2c(file: MPI_Fint) -> MPI_File {
    PMPI_File_f2c(file)
}

/// An exported `MPI_Fint *` variable (`extern MPI_Fint *X;` in `mpi.h`):
/// the pointer itself, writable by C code as the declaration allows.
#[repr(transparent)]
#[derive(Debug)]
pub struct FintPtr(UnsafeCell<*mut MPI_Fint>);

// SAFETY: gmpi never reads or writes the cell: the C program compares
// status arguments against its value, and any change to it is the
// program's own (C) business; the arrays it points to are never accessed
// by gmpi either.
unsafe impl Sync for FintPtr {}

/// The objects `MPI_F_STATUS_IGNORE` and `MPI_F_STATUSES_IGNORE` point to
/// (distinct addresses, each the size of a Fortran status).
#[repr(transparent)]
#[derive(Debug)]
pub struct FStatus(UnsafeCell<[MPI_Fint; 5]>);

// SAFETY: as for `FintPtr`: gmpi never accesses the contents.
unsafe impl Sync for FStatus {}

static F_STATUS_IGNORE_OBJ: FStatus = FStatus(UnsafeCell::new([0; 5]));
static F_STATUSES_IGNORE_OBJ: FStatus = FStatus(UnsafeCell::new([0; 5]));

/// `MPI_F_STATUS_IGNORE`.
#[no_mangle]
pub static MPI_F_STATUS_IGNORE: FintPtr = FintPtr(UnsafeCell::new(
    F_STATUS_IGNORE_OBJ.0.get().cast::<MPI_Fint>(),
));
/// `MPI_F_STATUSES_IGNORE`.
#[no_mangle]
pub static MPI_F_STATUSES_IGNORE: FintPtr = FintPtr(UnsafeCell::new(
    F_STATUSES_IGNORE_OBJ.0.get().cast::<MPI_Fint>(),
));

static F08_STATUS_IGNORE_OBJ: FStatus = FStatus(UnsafeCell::new([0; 5]));
static F08_STATUSES_IGNORE_OBJ: FStatus = FStatus(UnsafeCell::new([0; 5]));

/// `MPI_F08_STATUS_IGNORE` (`extern MPI_F08_status *`; an `MPI_F08_status`
/// is five `MPI_Fint`s).
#[no_mangle]
pub static MPI_F08_STATUS_IGNORE: FintPtr = FintPtr(UnsafeCell::new(
    F08_STATUS_IGNORE_OBJ.0.get().cast::<MPI_Fint>(),
));
/// `MPI_F08_STATUSES_IGNORE`.
#[no_mangle]
pub static MPI_F08_STATUSES_IGNORE: FintPtr = FintPtr(UnsafeCell::new(
    F08_STATUSES_IGNORE_OBJ.0.get().cast::<MPI_Fint>(),
));

/// A constant pointer data symbol (`extern struct X * const NAME;`).
#[repr(transparent)]
#[derive(Debug)]
pub struct ConstPtr(*const c_int);

// SAFETY: the pointer is never dereferenced (callers only pass it back to
// the MPI_T calls, which never read it), and it points at an immutable
// static, so sharing it between threads is harmless.
unsafe impl Sync for ConstPtr {}

static PVAR_ALL_HANDLES_TARGET: c_int = 0x5041_4c4c;

/// `MPI_T_PVAR_ALL_HANDLES`: a handle that names every performance
/// variable handle of a session (a sentinel: the MPI_T calls are not
/// supported yet).
#[no_mangle]
pub static MPI_T_PVAR_ALL_HANDLES: ConstPtr = ConstPtr(&PVAR_ALL_HANDLES_TARGET);

// ---- Dynamic processes ----

mpi_fn! {
    fn Close_port(_port_name: *const c_char) {
        Err(unsupported(CALL, DYNAMIC))
    }

    fn Comm_accept(_port_name: *const c_char, _info: MPI_Info, _root: c_int, comm: MPI_Comm, _newcomm: *mut MPI_Comm) {
        resolve::comm(CALL, comm)?;
        Err(unsupported(CALL, DYNAMIC))
    }

    fn Comm_connect(_port_name: *const c_char, _info: MPI_Info, _root: c_int, comm: MPI_Comm, _newcomm: *mut MPI_Comm) {
        resolve::comm(CALL, comm)?;
        Err(unsupported(CALL, DYNAMIC))
    }

    fn Comm_disconnect(comm: *mut MPI_Comm) {
        resolve::comm(CALL, ptr::read(CALL, "comm", comm.cast_const())?)?;
        Err(unsupported(CALL, DYNAMIC))
    }

    fn Comm_join(_fd: c_int, _intercomm: *mut MPI_Comm) {
        Err(unsupported(CALL, DYNAMIC))
    }

    fn Comm_spawn(_command: *const c_char, _argv: *mut *mut c_char, _maxprocs: c_int, _info: MPI_Info, _root: c_int, comm: MPI_Comm, _intercomm: *mut MPI_Comm, _array_of_errcodes: *mut c_int) {
        resolve::comm(CALL, comm)?;
        Err(unsupported(CALL, DYNAMIC))
    }

    fn Comm_spawn_multiple(_count: c_int, _array_of_commands: *mut *mut c_char, _array_of_argv: *mut *mut *mut c_char, _array_of_maxprocs: *const c_int, _array_of_info: *const MPI_Info, _root: c_int, comm: MPI_Comm, _intercomm: *mut MPI_Comm, _array_of_errcodes: *mut c_int) {
        resolve::comm(CALL, comm)?;
        Err(unsupported(CALL, DYNAMIC))
    }

    fn Lookup_name(_service_name: *const c_char, _info: MPI_Info, _port_name: *mut c_char) {
        Err(unsupported(CALL, DYNAMIC))
    }

    fn Open_port(_info: MPI_Info, _port_name: *mut c_char) {
        Err(unsupported(CALL, DYNAMIC))
    }

    fn Publish_name(_service_name: *const c_char, _info: MPI_Info, _port_name: *const c_char) {
        Err(unsupported(CALL, DYNAMIC))
    }

    fn Unpublish_name(_service_name: *const c_char, _info: MPI_Info, _port_name: *const c_char) {
        Err(unsupported(CALL, DYNAMIC))
    }

}

// ---- MPI-IO ----

direct_fn! {
    fn File_close(_fh: *mut MPI_File) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_create_errhandler(_file_errhandler_fn: Callback, _errhandler: *mut MPI_Errhandler) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_delete(_filename: *const c_char, _info: MPI_Info) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_get_amode(_fh: MPI_File, _amode: *mut c_int) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_get_atomicity(_fh: MPI_File, _flag: *mut c_int) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_get_byte_offset(_fh: MPI_File, _offset: MPI_Offset, _disp: *mut MPI_Offset) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_get_group(_fh: MPI_File, _group: *mut MPI_Group) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_get_info(_fh: MPI_File, _info_used: *mut MPI_Info) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_get_position(_fh: MPI_File, _offset: *mut MPI_Offset) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_get_position_shared(_fh: MPI_File, _offset: *mut MPI_Offset) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_get_size(_fh: MPI_File, _size: *mut MPI_Offset) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_get_type_extent(_fh: MPI_File, _datatype: MPI_Datatype, _extent: *mut MPI_Aint) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_get_view(_fh: MPI_File, _disp: *mut MPI_Offset, _etype: *mut MPI_Datatype, _filetype: *mut MPI_Datatype, _datarep: *mut c_char) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_iread(_fh: MPI_File, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype, _request: *mut MPI_Request) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_iread_all(_fh: MPI_File, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype, _request: *mut MPI_Request) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_iread_at(_fh: MPI_File, _offset: MPI_Offset, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype, _request: *mut MPI_Request) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_iread_at_all(_fh: MPI_File, _offset: MPI_Offset, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype, _request: *mut MPI_Request) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_iread_shared(_fh: MPI_File, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype, _request: *mut MPI_Request) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_iwrite(_fh: MPI_File, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype, _request: *mut MPI_Request) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_iwrite_all(_fh: MPI_File, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype, _request: *mut MPI_Request) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_iwrite_at(_fh: MPI_File, _offset: MPI_Offset, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype, _request: *mut MPI_Request) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_iwrite_at_all(_fh: MPI_File, _offset: MPI_Offset, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype, _request: *mut MPI_Request) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_iwrite_shared(_fh: MPI_File, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype, _request: *mut MPI_Request) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_open(_comm: MPI_Comm, _filename: *const c_char, _amode: c_int, _info: MPI_Info, _fh: *mut MPI_File) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_preallocate(_fh: MPI_File, _size: MPI_Offset) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_read(_fh: MPI_File, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_read_all(_fh: MPI_File, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_read_all_begin(_fh: MPI_File, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_read_all_end(_fh: MPI_File, _buf: *mut c_void, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_read_at(_fh: MPI_File, _offset: MPI_Offset, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_read_at_all(_fh: MPI_File, _offset: MPI_Offset, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_read_at_all_begin(_fh: MPI_File, _offset: MPI_Offset, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_read_at_all_end(_fh: MPI_File, _buf: *mut c_void, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_read_ordered(_fh: MPI_File, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_read_ordered_begin(_fh: MPI_File, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_read_ordered_end(_fh: MPI_File, _buf: *mut c_void, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_read_shared(_fh: MPI_File, _buf: *mut c_void, _count: c_int, _datatype: MPI_Datatype, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_seek(_fh: MPI_File, _offset: MPI_Offset, _whence: c_int) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_seek_shared(_fh: MPI_File, _offset: MPI_Offset, _whence: c_int) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_set_atomicity(_fh: MPI_File, _flag: c_int) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_set_info(_fh: MPI_File, _info: MPI_Info) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_set_size(_fh: MPI_File, _size: MPI_Offset) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_set_view(_fh: MPI_File, _disp: MPI_Offset, _etype: MPI_Datatype, _filetype: MPI_Datatype, _datarep: *const c_char, _info: MPI_Info) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_sync(_fh: MPI_File) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_write(_fh: MPI_File, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_write_all(_fh: MPI_File, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_write_all_begin(_fh: MPI_File, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_write_all_end(_fh: MPI_File, _buf: *const c_void, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_write_at(_fh: MPI_File, _offset: MPI_Offset, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_write_at_all(_fh: MPI_File, _offset: MPI_Offset, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_write_at_all_begin(_fh: MPI_File, _offset: MPI_Offset, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_write_at_all_end(_fh: MPI_File, _buf: *const c_void, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_write_ordered(_fh: MPI_File, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_write_ordered_begin(_fh: MPI_File, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_write_ordered_end(_fh: MPI_File, _buf: *const c_void, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn File_write_shared(_fh: MPI_File, _buf: *const c_void, _count: c_int, _datatype: MPI_Datatype, _status: *mut MPI_Status) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

    fn Register_datarep(_datarep: *const c_char, _read_conversion_fn: Callback, _write_conversion_fn: Callback, _dtype_file_extent_fn: Callback, _extra_state: *mut c_void) {
        file_call(CALL, || Err(unsupported(CALL, IO)))
    }

}
