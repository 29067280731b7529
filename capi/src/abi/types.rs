//! The C types of the MPICH ABI: handles (32-bit integers, except
//! `MPI_File`, a pointer), address and count integers, and the C callback
//! prototypes gmpi stores and calls.

use std::ffi::{c_int, c_void};

pub type MPI_Comm = c_int;
pub type MPI_Group = c_int;
pub type MPI_Datatype = c_int;
pub type MPI_Op = c_int;
pub type MPI_Request = c_int;
pub type MPI_Message = c_int;
pub type MPI_Errhandler = c_int;
pub type MPI_Info = c_int;
pub type MPI_Win = c_int;
pub type MPI_Session = c_int;
pub type MPI_Fint = c_int;
pub type MPI_Aint = isize;
pub type MPI_Offset = i64;
pub type MPI_Count = i64;
/// `MPI_File`: a pointer in the MPICH ABI (`struct ADIOI_FileD *`).
pub type MPI_File = *mut c_void;

/// A C reduction function: `void f(void *in, void *inout, int *len,
/// MPI_Datatype *type)`.
pub type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype);

/// A large-count C reduction function (`MPI_Op_create_c`): `void f(void *in,
/// void *inout, MPI_Count *len, MPI_Datatype *type)`.
pub type UserFnC =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *mut MPI_Count, *mut MPI_Datatype);

/// A C communicator error handler: `void f(MPI_Comm *, int *, ...)`.
pub type CommErrFn = unsafe extern "C" fn(*mut MPI_Comm, *mut c_int);

/// Generalized request callbacks (`MPI_Grequest_start`): query
/// `int f(void *extra, MPI_Status *status)`, free `int f(void *extra)`,
/// cancel `int f(void *extra, int complete)`.
pub type GreqQueryFn = unsafe extern "C" fn(*mut c_void, *mut crate::abi::MPI_Status) -> c_int;
pub type GreqFreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
pub type GreqCancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// Attribute copy callback: `int f(MPI_Comm old, int keyval, void *extra,
/// void *val_in, void *val_out, int *flag)`.
pub type CopyFn =
    unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;

/// Attribute delete callback: `int f(MPI_Comm comm, int keyval, void *val,
/// void *extra)`.
pub type DeleteFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> c_int;

/// A C callback argument of a call gmpi does not implement (it is never
/// invoked).
pub type Callback = Option<unsafe extern "C" fn()>;
