//! The environment: init and finalize, versions, clocks, memory, addresses,
//! error handlers and error codes, and the Fortran handle conversions.

use std::cell::RefCell;
use std::ffi::{c_char, c_double, c_int, c_void};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use gmpi::{ErrorClass, Universe};

use crate::abi::*;
use crate::errors;
use crate::ptr;
use crate::resolve;
use crate::tables::*;

thread_local! {
    /// The runtime's universe, on the thread that called `MPI_Init` (never
    /// dropped implicitly: a job that exits without `MPI_Finalize` must not
    /// wait for its peers at exit).
    static UNIVERSE: RefCell<Option<ManuallyDrop<Universe>>> = const { RefCell::new(None) };
}

static MAIN_THREAD: OnceLock<std::thread::ThreadId> = OnceLock::new();
static THREAD_LEVEL: OnceLock<c_int> = OnceLock::new();

/// The library version string (`MPI_Get_library_version`).
pub const LIBRARY_VERSION: &str = concat!(
    "gmpi ",
    env!("CARGO_PKG_VERSION"),
    " (MPICH ABI, libmpi.so.12; MPI 4.1)"
);

/// Whether the world model was initialized (`MPI_Init`/`MPI_Init_thread`),
/// as opposed to the runtime having been started by `MPI_Session_init`.
static WORLD_MODEL: AtomicBool = AtomicBool::new(false);

/// `MPI_Init`/`MPI_Init_thread`: start the runtime, or take over the one
/// a session started.
fn init(call: &str, required: c_int) -> Result<c_int, gmpi::Error> {
    if PHASE.load(Ordering::Acquire) == 1 && !WORLD_MODEL.swap(true, Ordering::AcqRel) {
        // Started by MPI_Session_init: the world model joins it.
        return Ok(*THREAD_LEVEL.get().unwrap_or(&MPI_THREAD_FUNNELED));
    }
    let p = start(call, required)?;
    WORLD_MODEL.store(true, Ordering::Release);
    Ok(p)
}

/// Start the runtime (once per process: gmpi runs one MPI instance, which
/// the world model and every session share).
pub(crate) fn start(call: &str, required: c_int) -> Result<c_int, gmpi::Error> {
    match PHASE.load(Ordering::Acquire) {
        0 => {}
        1 => return Err(err(ErrorClass::Other, call, "MPI is already initialized")),
        _ => {
            return Err(err(
                ErrorClass::Other,
                call,
                "MPI cannot be initialized again after MPI_Finalize",
            ))
        }
    }
    let level = match required {
        MPI_THREAD_MULTIPLE => gmpi::Threading::Multiple,
        MPI_THREAD_SERIALIZED => gmpi::Threading::Serialized,
        MPI_THREAD_FUNNELED => gmpi::Threading::Funneled,
        _ => gmpi::Threading::Single,
    };
    if level == gmpi::Threading::Multiple {
        // Before any call can race: errors find their handler per thread.
        errors::set_multithreaded();
    }
    let (u, _) = gmpi::init_thread(level)?;
    if level != gmpi::Threading::Multiple {
        // SAFETY: below MPI_THREAD_MULTIPLE the program's MPI calls never
        // overlap (the thread levels' contract), and this call is the only
        // one in progress.
        unsafe { gmpi::serial_calls() };
    }
    let world = u.world();
    let me = world
        .split(world.rank(), 0)?
        .expect("every rank gives a color");
    {
        let mut st = state();
        let w = st
            .comms
            .insert(CommObj::new(world.clone(), "MPI_COMM_WORLD".into()));
        let s = st
            .comms
            .insert(CommObj::new(me.clone(), "MPI_COMM_SELF".into()));
        debug_assert_eq!((w, s), (0, 1));
    }
    let _ = WORLD.set(world);
    let _ = SELF.set(me);
    UNIVERSE.with(|u2| *u2.borrow_mut() = Some(ManuallyDrop::new(u)));
    let _ = MAIN_THREAD.set(std::thread::current().id());
    // Every level is provided (MPI_THREAD_MULTIPLE: see gmpi::init_thread).
    let provided = required.clamp(MPI_THREAD_SINGLE, MPI_THREAD_MULTIPLE);
    let _ = THREAD_LEVEL.set(provided);
    resolve::init_fast_types();
    PHASE.store(1, Ordering::Release);
    Ok(provided)
}

/// Finalize the runtime (`MPI_Finalize`, or the last `MPI_Session_finalize`
/// of a process that never called `MPI_Init`).
pub(crate) fn stop(call: &str) -> Result<(), gmpi::Error> {
    if MAIN_THREAD.get() != Some(&std::thread::current().id()) {
        return Err(err(
            ErrorClass::Other,
            call,
            "MPI must be finalized by the thread that initialized it",
        ));
    }
    // Attributes on MPI_COMM_SELF are deleted first (the standard's hook
    // for actions at finalize), then requests the user freed while
    // active are completed.
    crate::cache::delete_comm_attrs(call, MPI_COMM_SELF)?;
    finish_detached()?;
    let u = UNIVERSE.with(|u| u.borrow_mut().take());
    let Some(u) = u else {
        return Err(err(ErrorClass::Other, call, "MPI is not initialized"));
    };
    let r = ManuallyDrop::into_inner(u).finalize();
    PHASE.store(2, Ordering::Release);
    r
}

/// The thread level the runtime provides.
pub(crate) fn thread_level() -> c_int {
    THREAD_LEVEL.get().copied().unwrap_or(MPI_THREAD_SINGLE)
}

/// The name of the thread level the runtime provides (info values).
pub(crate) fn thread_level_name() -> &'static str {
    match thread_level() {
        MPI_THREAD_SINGLE => "MPI_THREAD_SINGLE",
        MPI_THREAD_SERIALIZED => "MPI_THREAD_SERIALIZED",
        MPI_THREAD_MULTIPLE => "MPI_THREAD_MULTIPLE",
        _ => "MPI_THREAD_FUNNELED",
    }
}

/// Whether the world model was initialized.
pub(crate) fn world_model() -> bool {
    WORLD_MODEL.load(Ordering::Acquire)
}

mpi_fn! {
    noinit fn Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) {
        init(CALL, MPI_THREAD_SINGLE).map(|_| ())
    }

    noinit fn Init_thread(_argc: *mut c_int, _argv: *mut *mut *mut c_char, required: c_int, provided: *mut c_int) {
        if !(MPI_THREAD_SINGLE..=MPI_THREAD_MULTIPLE).contains(&required) {
            return Err(err(ErrorClass::Arg, CALL, format!("required = {required} is not a thread level")));
        }
        let p = init(CALL, required)?;
        ptr::write(CALL, "provided", provided, p)
    }

    safe fn Finalize() {
        if !WORLD_MODEL.load(Ordering::Acquire) {
            return Err(err(ErrorClass::Other, CALL, "MPI is not initialized (MPI_Init was not called)"));
        }
        stop(CALL)
    }

    noinit fn Initialized(flag: *mut c_int) {
        ptr::write(CALL, "flag", flag, initialized() as c_int)
    }

    noinit fn Finalized(flag: *mut c_int) {
        ptr::write(CALL, "flag", flag, finalized() as c_int)
    }

    safe fn Abort(comm: MPI_Comm, errorcode: c_int) {
        let rank = world_rank();
        let name = if comm == MPI_COMM_WORLD { "MPI_COMM_WORLD".to_string() } else { format!("communicator {comm:#x}") };
        gmpi::abort(errorcode, &format!("MPI_Abort({name}, {errorcode}) called on rank {rank}"))
    }

    noinit fn Query_thread(provided: *mut c_int) {
        ptr::write(CALL, "provided", provided, THREAD_LEVEL.get().copied().unwrap_or(MPI_THREAD_SINGLE))
    }

    noinit fn Is_thread_main(flag: *mut c_int) {
        let main = MAIN_THREAD.get().is_none_or(|t| *t == std::thread::current().id());
        ptr::write(CALL, "flag", flag, main as c_int)
    }

    noinit fn Get_version(version: *mut c_int, subversion: *mut c_int) {
        // MPI 4.1: every MPI-4.1 call exists (large counts, persistent
        // collectives, partitioned communication, sessions, and 4.1's
        // buffers per communicator and session, status fields, error
        // removal, ...: mpi41.rs); MPI-IO and dynamic processes fail with
        // MPI_ERR_UNSUPPORTED_OPERATION.
        ptr::write(CALL, "version", version, MPI_VERSION)?;
        ptr::write(CALL, "subversion", subversion, MPI_SUBVERSION)
    }

    noinit fn Get_library_version(version: *mut c_char, resultlen: *mut c_int) {
        ptr::write_cstr(CALL, "version", version, MPI_MAX_LIBRARY_VERSION_STRING, LIBRARY_VERSION, resultlen)
    }

    fn Get_processor_name(name: *mut c_char, resultlen: *mut c_int) {
        let host = gmpi::processor_name();
        ptr::write_cstr(CALL, "name", name, MPI_MAX_PROCESSOR_NAME, &host, resultlen)
    }

    noinit fn Error_string(errorcode: c_int, string: *mut c_char, resultlen: *mut c_int) {
        let Some(s) = errors::string_of(errorcode) else {
            return Err(err(ErrorClass::Arg, CALL, format!("errorcode = {errorcode} is not an MPI error code")));
        };
        ptr::write_cstr(CALL, "string", string, MPI_MAX_ERROR_STRING, &s, resultlen)
    }

    noinit fn Error_class(errorcode: c_int, errorclass: *mut c_int) {
        let Some(c) = errors::class_of(errorcode) else {
            return Err(err(ErrorClass::Arg, CALL, format!("errorcode = {errorcode} is not an MPI error code")));
        };
        ptr::write(CALL, "errorclass", errorclass, c)
    }

    fn Add_error_class(errorclass: *mut c_int) {
        let Some(c) = errors::add_class() else {
            return Err(err(ErrorClass::Other, CALL, "no more error classes (MPICH's limit is 127)"));
        };
        ptr::write(CALL, "errorclass", errorclass, c)
    }

    fn Add_error_code(errorclass: c_int, errorcode: *mut c_int) {
        let c = match errors::add_code(errorclass) {
            Ok(c) => c,
            Err(false) => return Err(err(ErrorClass::Arg, CALL, format!("errorclass = {errorclass} is not an error class"))),
            Err(true) => return Err(err(ErrorClass::Other, CALL, "no more error codes (MPICH's limit is 2047)")),
        };
        ptr::write(CALL, "errorcode", errorcode, c)
    }

    fn Add_error_string(errorcode: c_int, string: *const c_char) {
        let s = ptr::cstr(CALL, "string", string)?;
        if s.len() >= MPI_MAX_ERROR_STRING {
            return Err(err(ErrorClass::Arg, CALL, format!("string is {} bytes (MPI_MAX_ERROR_STRING is {MPI_MAX_ERROR_STRING})", s.len())));
        }
        if errorcode <= 0 || !errors::set_string(errorcode, s) {
            return Err(err(ErrorClass::Arg, CALL, format!("errorcode = {errorcode} is not a user error code or class")));
        }
        Ok(())
    }

    fn Comm_create_errhandler(function: Option<CommErrFn>, errhandler: *mut MPI_Errhandler) {
        create_errhandler(CALL, function, errhandler)
    }

    safe fn Comm_set_errhandler(comm: MPI_Comm, errhandler: MPI_Errhandler) {
        set_errhandler(CALL, comm, errhandler)
    }

    fn Comm_get_errhandler(comm: MPI_Comm, errhandler: *mut MPI_Errhandler) {
        get_errhandler(CALL, comm, errhandler)
    }

    fn Errhandler_free(errhandler: *mut MPI_Errhandler) {
        let h = ptr::read(CALL, "errhandler", errhandler)?;
        errors::check_errhandler(CALL, h)?;
        if let Some(i) = decode(Kind::Errhandler, h) {
            // Communicators that still use it keep calling it: free the slot
            // only once none does.
            let mut st = state();
            let used = st.comms.iter().any(|(_, o)| o.errh == h)
                || st.wins.iter().any(|(_, o)| o.errh == h)
                || st.sessions.iter().any(|(_, o)| o.errh == h);
            if !used {
                st.errhs.remove(i);
            }
        }
        ptr::write(CALL, "errhandler", errhandler, MPI_ERRHANDLER_NULL)
    }

    safe fn Comm_call_errhandler(comm: MPI_Comm, errorcode: c_int) {
        resolve::comm(CALL, comm)?;
        let msg = errors::string_of(errorcode).unwrap_or_else(|| format!("error code {errorcode}"));
        errors::invoke(comm, errorcode, &format!("MPI_Comm_call_errhandler: {msg} (on rank {})", world_rank()));
        Ok(())
    }

    fn Alloc_mem(size: MPI_Aint, _info: MPI_Info, baseptr: *mut c_void) {
        let n = usize::try_from(size).map_err(|_| err(ErrorClass::Arg, CALL, format!("size = {size} is negative")))?;
        let p = ptr::alloc(n).ok_or_else(|| err(ErrorClass::NoMem, CALL, format!("cannot allocate {n} bytes")))?;
        ptr::write(CALL, "baseptr", baseptr.cast::<*mut c_void>(), p)
    }

    fn Free_mem(base: *mut c_void) {
        ptr::free(base);
        Ok(())
    }

    noinit fn Get_address(location: *const c_void, address: *mut MPI_Aint) {
        ptr::write(CALL, "address", address, ptr::addr_of(location))
    }

    safe fn Pcontrol(_level: c_int) {
        Ok(())
    }
}

/// `MPI_Wtime`.
#[no_mangle]
pub extern "C" fn PMPI_Wtime() -> c_double {
    gmpi::wtime()
}
/// `MPI_Wtime`: forwards to `PMPI_Wtime`.
#[no_mangle]
pub extern "C" fn MPI_Wtime() -> c_double {
    PMPI_Wtime()
}
/// `MPI_Wtick`.
#[no_mangle]
pub extern "C" fn PMPI_Wtick() -> c_double {
    gmpi::wtick()
}
/// `MPI_Wtick`: forwards to `PMPI_Wtick`.
#[no_mangle]
pub extern "C" fn MPI_Wtick() -> c_double {
    PMPI_Wtick()
}
/// `MPI_Aint_add`.
#[no_mangle]
pub extern "C" fn PMPI_Aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
    base.wrapping_add(disp)
}
/// `MPI_Aint_add`: forwards to `PMPI_Aint_add`.
#[no_mangle]
pub extern "C" fn MPI_Aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
    PMPI_Aint_add(base, disp)
}
/// `MPI_Aint_diff`.
#[no_mangle]
pub extern "C" fn PMPI_Aint_diff(a: MPI_Aint, b: MPI_Aint) -> MPI_Aint {
    a.wrapping_sub(b)
}
/// `MPI_Aint_diff`: forwards to `PMPI_Aint_diff`.
#[no_mangle]
pub extern "C" fn MPI_Aint_diff(a: MPI_Aint, b: MPI_Aint) -> MPI_Aint {
    PMPI_Aint_diff(a, b)
}

/// Handle conversions between C and Fortran: the MPICH ABI uses the same
/// integers in both, so each is the identity.
macro_rules! f2c_c2f {
    ($($obj:ident: $cty:ty),*) => { paste::paste! { $(
        #[doc = concat!("`MPI_", stringify!($obj), "_f2c` (the identity in the MPICH ABI).")]
        #[no_mangle]
        pub extern "C" fn [<PMPI_ $obj _f2c>](h: MPI_Fint) -> $cty { h as $cty }
        #[doc = concat!("`MPI_", stringify!($obj), "_f2c`.")]
        #[no_mangle]
        pub extern "C" fn [<MPI_ $obj _f2c>](h: MPI_Fint) -> $cty { h as $cty }
        #[doc = concat!("`MPI_", stringify!($obj), "_c2f` (the identity in the MPICH ABI).")]
        #[no_mangle]
        pub extern "C" fn [<PMPI_ $obj _c2f>](h: $cty) -> MPI_Fint { h as MPI_Fint }
        #[doc = concat!("`MPI_", stringify!($obj), "_c2f`.")]
        #[no_mangle]
        pub extern "C" fn [<MPI_ $obj _c2f>](h: $cty) -> MPI_Fint { h as MPI_Fint }
    )* } };
}

f2c_c2f!(Comm: MPI_Comm, Type: MPI_Datatype, Group: MPI_Group, Op: MPI_Op, Request: MPI_Request,
    Errhandler: MPI_Errhandler, Info: MPI_Info, Win: MPI_Win, Message: MPI_Message,
    Session: MPI_Session);

mpi_fn! {
    noinit fn Status_f2c(f_status: *const MPI_Fint, c_status: *mut MPI_Status) {
        let s = ptr::read(CALL, "f_status", f_status.cast::<MPI_Status>())?;
        ptr::write(CALL, "c_status", c_status, s)
    }
    noinit fn Status_c2f(c_status: *const MPI_Status, f_status: *mut MPI_Fint) {
        let s = ptr::read(CALL, "c_status", c_status)?;
        ptr::write(CALL, "f_status", f_status.cast::<MPI_Status>(), s)
    }
}

/// `MPI_Comm_create_errhandler` (and the MPI-1 `MPI_Errhandler_create`).
pub(crate) fn create_errhandler(
    call: &str,
    function: Option<CommErrFn>,
    errhandler: *mut MPI_Errhandler,
) -> Result<(), gmpi::Error> {
    let Some(f) = function else {
        return Err(err(ErrorClass::Arg, call, "function is NULL"));
    };
    let h = encode(Kind::Errhandler, state().errhs.insert(ErrhObj { f }));
    ptr::write(call, "errhandler", errhandler, h)
}

/// `MPI_Comm_set_errhandler` (and the MPI-1 `MPI_Errhandler_set`).
pub(crate) fn set_errhandler(
    call: &str,
    comm: MPI_Comm,
    errhandler: MPI_Errhandler,
) -> Result<(), gmpi::Error> {
    resolve::comm(call, comm)?;
    errors::check_errhandler(call, errhandler)?;
    resolve::with_comm(call, comm, |o| o.errh = errhandler)
}

/// `MPI_Comm_get_errhandler` (and the MPI-1 `MPI_Errhandler_get`).
pub(crate) fn get_errhandler(
    call: &str,
    comm: MPI_Comm,
    errhandler: *mut MPI_Errhandler,
) -> Result<(), gmpi::Error> {
    resolve::comm(call, comm)?;
    let e = resolve::with_comm(call, comm, |o| o.errh)?;
    ptr::write(call, "errhandler", errhandler, e)
}
