//! The constants of the MPICH ABI (the values of `mpi.h`), every predefined
//! handle, and the numbers gmpi chooses inside MPICH's ranges (user error
//! classes and codes).

use std::ffi::c_int;

use crate::abi::types::{
    MPI_Comm, MPI_Datatype, MPI_Errhandler, MPI_File, MPI_Group, MPI_Info, MPI_Message, MPI_Op,
    MPI_Request, MPI_Win,
};

// ---- plain constants ----

/// The standard gmpi implements (`MPI_Get_version`; mpi.h's `MPI_VERSION`).
pub const MPI_VERSION: c_int = 4;
pub const MPI_SUBVERSION: c_int = 1;
pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ANY_SOURCE: c_int = -2;
pub const MPI_ANY_TAG: c_int = -1;
pub const MPI_PROC_NULL: c_int = -1;
pub const MPI_ROOT: c_int = -3;
pub const MPI_UNDEFINED: c_int = -32766;
pub const MPI_IDENT: c_int = 0;
pub const MPI_CONGRUENT: c_int = 1;
pub const MPI_SIMILAR: c_int = 2;
pub const MPI_UNEQUAL: c_int = 3;
pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1;
pub const MPI_THREAD_SERIALIZED: c_int = 2;
pub const MPI_THREAD_MULTIPLE: c_int = 3;
pub const MPI_MAX_PROCESSOR_NAME: usize = 128;
pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const MPI_MAX_ERROR_STRING: usize = 512;
pub const MPI_MAX_OBJECT_NAME: usize = 128;
pub const MPI_MAX_INFO_KEY: usize = 255;
pub const MPI_MAX_INFO_VAL: usize = 1024;
pub const MPI_BSEND_OVERHEAD: c_int = 96;
pub const MPI_COMM_TYPE_SHARED: c_int = 1;
pub const MPI_COMM_TYPE_HW_GUIDED: c_int = 2;
pub const MPI_COMM_TYPE_HW_UNGUIDED: c_int = 3;
pub const MPI_COMM_TYPE_RESOURCE_GUIDED: c_int = 4;
/// `MPI_BUFFER_AUTOMATIC` (MPI 4.1): `(void *)-2`.
pub const MPI_BUFFER_AUTOMATIC: *mut std::ffi::c_void =
    usize::MAX.wrapping_sub(1) as *mut std::ffi::c_void;
pub const MPI_ORDER_C: c_int = 56;
pub const MPI_ORDER_FORTRAN: c_int = 57;
pub const MPI_GRAPH: c_int = 1;
pub const MPI_CART: c_int = 2;
pub const MPI_DIST_GRAPH: c_int = 3;

pub const MPI_COMBINER_NAMED: c_int = 1;
pub const MPI_COMBINER_DUP: c_int = 2;
pub const MPI_COMBINER_CONTIGUOUS: c_int = 3;
pub const MPI_COMBINER_VECTOR: c_int = 4;
pub const MPI_COMBINER_HVECTOR: c_int = 6;
pub const MPI_COMBINER_INDEXED: c_int = 7;
pub const MPI_COMBINER_HINDEXED: c_int = 9;
pub const MPI_COMBINER_INDEXED_BLOCK: c_int = 10;
pub const MPI_COMBINER_STRUCT: c_int = 12;
pub const MPI_COMBINER_SUBARRAY: c_int = 13;
pub const MPI_COMBINER_DARRAY: c_int = 14;
pub const MPI_COMBINER_F90_REAL: c_int = 15;
pub const MPI_COMBINER_F90_COMPLEX: c_int = 16;
pub const MPI_COMBINER_F90_INTEGER: c_int = 17;
pub const MPI_COMBINER_RESIZED: c_int = 18;
pub const MPI_COMBINER_HINDEXED_BLOCK: c_int = 19;

pub const MPI_DISTRIBUTE_BLOCK: c_int = 121;
pub const MPI_DISTRIBUTE_CYCLIC: c_int = 122;
pub const MPI_DISTRIBUTE_NONE: c_int = 123;
pub const MPI_DISTRIBUTE_DFLT_DARG: c_int = -49767;

pub const MPI_TYPECLASS_REAL: c_int = 1;
pub const MPI_TYPECLASS_INTEGER: c_int = 2;
pub const MPI_TYPECLASS_COMPLEX: c_int = 3;

// ---- error classes ----

pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_ROOT: c_int = 7;
pub const MPI_ERR_GROUP: c_int = 8;
pub const MPI_ERR_OP: c_int = 9;
pub const MPI_ERR_TOPOLOGY: c_int = 10;
pub const MPI_ERR_DIMS: c_int = 11;
pub const MPI_ERR_ARG: c_int = 12;
pub const MPI_ERR_UNKNOWN: c_int = 13;
pub const MPI_ERR_TRUNCATE: c_int = 14;
pub const MPI_ERR_OTHER: c_int = 15;
pub const MPI_ERR_INTERN: c_int = 16;
pub const MPI_ERR_IN_STATUS: c_int = 17;
pub const MPI_ERR_PENDING: c_int = 18;
pub const MPI_ERR_REQUEST: c_int = 19;
pub const MPI_ERR_INFO: c_int = 28;
pub const MPI_ERR_INFO_KEY: c_int = 29;
pub const MPI_ERR_INFO_VALUE: c_int = 30;
pub const MPI_ERR_INFO_NOKEY: c_int = 31;
pub const MPI_ERR_NO_MEM: c_int = 34;
pub const MPI_ERR_UNSUPPORTED_OPERATION: c_int = 44;
pub const MPI_ERR_WIN: c_int = 45;
pub const MPI_ERR_KEYVAL: c_int = 48;
pub const MPI_ERR_BASE: c_int = 46;
pub const MPI_ERR_LOCKTYPE: c_int = 47;
pub const MPI_ERR_RMA_CONFLICT: c_int = 49;
pub const MPI_ERR_RMA_SYNC: c_int = 50;
pub const MPI_ERR_SIZE: c_int = 51;
pub const MPI_ERR_DISP: c_int = 52;
pub const MPI_ERR_ASSERT: c_int = 53;
pub const MPI_ERR_RMA_RANGE: c_int = 55;
pub const MPI_ERR_RMA_ATTACH: c_int = 56;
pub const MPI_ERR_RMA_SHARED: c_int = 57;
pub const MPI_ERR_RMA_FLAVOR: c_int = 58;
pub const MPI_ERR_SESSION: c_int = 75;
/// `MPI_T_ERR_NOT_SUPPORTED` (MPI 4.0): what the tool interface's calls
/// return while gmpi lacks it.
pub const MPI_T_ERR_NOT_SUPPORTED: c_int = 78;
/// `MPIX_ERR_PROC_FAILED` (ULFM), MPICH's number.
pub const MPI_ERR_PROC_FAILED: c_int = 101;
pub const MPI_ERR_LASTCODE: c_int = 0x3fffffff;

/// MPICH's mark of a dynamic error class or code (`ERROR_DYN_MASK`,
/// `MPI_ERR_LASTCODE + 1`): `MPI_Add_error_class` hands out `DYN | n` for
/// n = 1, 2, .. (below [`ERROR_MAX_NCLASS`]), all above `MPI_ERR_LASTCODE`.
pub const ERROR_DYN_MASK: c_int = 0x4000_0000;
/// How many dynamic classes MPICH allows (`ERROR_MAX_NCLASS`: the class
/// bits of a code, `ERROR_CLASS_MASK` 0x7f).
pub const ERROR_MAX_NCLASS: c_int = 128;
/// Where the index of a dynamic code sits (`ERROR_GENERIC_SHIFT`):
/// `MPI_Add_error_code(class)` hands out `class | (n << 8)` for n = 1, 2, ..
/// (below [`ERROR_MAX_NCODE`]), one count over all classes.
pub const ERROR_GENERIC_SHIFT: u32 = 8;
/// How many dynamic codes MPICH allows (`ERROR_GENERIC_MASK` 0x7ff00).
pub const ERROR_MAX_NCODE: c_int = 2048;

// ---- predefined handles ----

pub const MPI_COMM_NULL: MPI_Comm = 0x04000000;
pub const MPI_COMM_WORLD: MPI_Comm = 0x44000000;
pub const MPI_COMM_SELF: MPI_Comm = 0x44000001;
pub const MPI_GROUP_NULL: MPI_Group = 0x08000000;
pub const MPI_GROUP_EMPTY: MPI_Group = 0x48000000;
pub const MPI_DATATYPE_NULL: MPI_Datatype = 0x0c000000;
pub const MPI_OP_NULL: MPI_Op = 0x18000000;
pub const MPI_REQUEST_NULL: MPI_Request = 0x2c000000;
pub const MPI_MESSAGE_NULL: MPI_Message = 0x2c000000;
pub const MPI_MESSAGE_NO_PROC: MPI_Message = 0x6c000000;
pub const MPI_ERRHANDLER_NULL: MPI_Errhandler = 0x14000000;
pub const MPI_ERRORS_ARE_FATAL: MPI_Errhandler = 0x54000000;
pub const MPI_ERRORS_RETURN: MPI_Errhandler = 0x54000001;
pub const MPI_ERRORS_ABORT: MPI_Errhandler = 0x54000003;
pub const MPI_INFO_NULL: MPI_Info = 0x1c000000;
pub const MPI_INFO_ENV: MPI_Info = 0x5c000001;
pub const MPI_WIN_NULL: MPI_Win = 0x20000000;
pub const MPI_SESSION_NULL: c_int = 0x38000000;
pub const MPI_WIN_BASE: c_int = 0x66000001;
pub const MPI_WIN_SIZE: c_int = 0x66000003;
pub const MPI_WIN_DISP_UNIT: c_int = 0x66000005;
pub const MPI_WIN_CREATE_FLAVOR: c_int = 0x66000007;
pub const MPI_WIN_MODEL: c_int = 0x66000009;
pub const MPI_WIN_UNIFIED: c_int = 2;
pub const MPI_LOCK_EXCLUSIVE: c_int = 234;
pub const MPI_LOCK_SHARED: c_int = 235;
pub const MPI_KEYVAL_INVALID: c_int = 0x24000000;
pub const MPI_FILE_NULL: MPI_File = std::ptr::null_mut();

pub const MPI_TAG_UB: c_int = 0x64400001;
pub const MPI_HOST: c_int = 0x64400003;
pub const MPI_IO: c_int = 0x64400005;
pub const MPI_WTIME_IS_GLOBAL: c_int = 0x64400007;
pub const MPI_UNIVERSE_SIZE: c_int = 0x64400009;
pub const MPI_LASTUSEDCODE: c_int = 0x6440000b;
pub const MPI_APPNUM: c_int = 0x6440000d;

pub const MPI_MAX: MPI_Op = 0x58000001;
pub const MPI_MIN: MPI_Op = 0x58000002;
pub const MPI_SUM: MPI_Op = 0x58000003;
pub const MPI_PROD: MPI_Op = 0x58000004;
pub const MPI_LAND: MPI_Op = 0x58000005;
pub const MPI_BAND: MPI_Op = 0x58000006;
pub const MPI_LOR: MPI_Op = 0x58000007;
pub const MPI_BOR: MPI_Op = 0x58000008;
pub const MPI_LXOR: MPI_Op = 0x58000009;
pub const MPI_BXOR: MPI_Op = 0x5800000a;
pub const MPI_MINLOC: MPI_Op = 0x5800000b;
pub const MPI_MAXLOC: MPI_Op = 0x5800000c;
pub const MPI_REPLACE: MPI_Op = 0x5800000d;
pub const MPI_NO_OP: MPI_Op = 0x5800000e;

// Datatypes: kind bits 30–31 = builtin, object type in bits 26–29, the size
// in bits 8–15 and a distinct low byte; the five C pair types with holes
// have their own `0x8c…` values.
pub const MPI_CHAR: MPI_Datatype = 0x4c000101;
pub const MPI_SIGNED_CHAR: MPI_Datatype = 0x4c000118;
pub const MPI_UNSIGNED_CHAR: MPI_Datatype = 0x4c000102;
pub const MPI_BYTE: MPI_Datatype = 0x4c00010d;
pub const MPI_WCHAR: MPI_Datatype = 0x4c00040e;
pub const MPI_SHORT: MPI_Datatype = 0x4c000203;
pub const MPI_UNSIGNED_SHORT: MPI_Datatype = 0x4c000204;
pub const MPI_INT: MPI_Datatype = 0x4c000405;
pub const MPI_UNSIGNED: MPI_Datatype = 0x4c000406;
pub const MPI_LONG: MPI_Datatype = 0x4c000807;
pub const MPI_UNSIGNED_LONG: MPI_Datatype = 0x4c000808;
pub const MPI_FLOAT: MPI_Datatype = 0x4c00040a;
pub const MPI_DOUBLE: MPI_Datatype = 0x4c00080b;
pub const MPI_LONG_DOUBLE: MPI_Datatype = 0x4c00100c;
pub const MPI_LONG_LONG_INT: MPI_Datatype = 0x4c000809;
pub const MPI_UNSIGNED_LONG_LONG: MPI_Datatype = 0x4c000819;
pub const MPI_PACKED: MPI_Datatype = 0x4c00010f;
pub const MPI_LB: MPI_Datatype = 0x4c000010;
pub const MPI_UB: MPI_Datatype = 0x4c000011;
pub const MPI_FLOAT_INT: MPI_Datatype = 0x8c000000_u32 as MPI_Datatype;
pub const MPI_DOUBLE_INT: MPI_Datatype = 0x8c000001_u32 as MPI_Datatype;
pub const MPI_LONG_INT: MPI_Datatype = 0x8c000002_u32 as MPI_Datatype;
pub const MPI_SHORT_INT: MPI_Datatype = 0x8c000003_u32 as MPI_Datatype;
pub const MPI_LONG_DOUBLE_INT: MPI_Datatype = 0x8c000004_u32 as MPI_Datatype;
pub const MPI_2INT: MPI_Datatype = 0x4c000816;
pub const MPI_COMPLEX: MPI_Datatype = 0x4c00081e;
pub const MPI_DOUBLE_COMPLEX: MPI_Datatype = 0x4c001022;
pub const MPI_LOGICAL: MPI_Datatype = 0x4c00041d;
pub const MPI_REAL: MPI_Datatype = 0x4c00041c;
pub const MPI_DOUBLE_PRECISION: MPI_Datatype = 0x4c00081f;
pub const MPI_INTEGER: MPI_Datatype = 0x4c00041b;
pub const MPI_2INTEGER: MPI_Datatype = 0x4c000820;
pub const MPI_2REAL: MPI_Datatype = 0x4c000821;
pub const MPI_2DOUBLE_PRECISION: MPI_Datatype = 0x4c001023;
pub const MPI_CHARACTER: MPI_Datatype = 0x4c00011a;
pub const MPI_REAL4: MPI_Datatype = 0x4c000427;
pub const MPI_REAL8: MPI_Datatype = 0x4c000829;
pub const MPI_REAL16: MPI_Datatype = 0x4c00102b;
pub const MPI_COMPLEX8: MPI_Datatype = 0x4c000828;
pub const MPI_COMPLEX16: MPI_Datatype = 0x4c00102a;
pub const MPI_COMPLEX32: MPI_Datatype = 0x4c00202c;
pub const MPI_INTEGER1: MPI_Datatype = 0x4c00012d;
pub const MPI_INTEGER2: MPI_Datatype = 0x4c00022f;
pub const MPI_INTEGER4: MPI_Datatype = 0x4c000430;
pub const MPI_INTEGER8: MPI_Datatype = 0x4c000831;
pub const MPI_INT8_T: MPI_Datatype = 0x4c000137;
pub const MPI_INT16_T: MPI_Datatype = 0x4c000238;
pub const MPI_INT32_T: MPI_Datatype = 0x4c000439;
pub const MPI_INT64_T: MPI_Datatype = 0x4c00083a;
pub const MPI_UINT8_T: MPI_Datatype = 0x4c00013b;
pub const MPI_UINT16_T: MPI_Datatype = 0x4c00023c;
pub const MPI_UINT32_T: MPI_Datatype = 0x4c00043d;
pub const MPI_UINT64_T: MPI_Datatype = 0x4c00083e;
pub const MPI_C_BOOL: MPI_Datatype = 0x4c00013f;
pub const MPI_C_FLOAT_COMPLEX: MPI_Datatype = 0x4c000840;
pub const MPI_C_DOUBLE_COMPLEX: MPI_Datatype = 0x4c001041;
pub const MPI_C_LONG_DOUBLE_COMPLEX: MPI_Datatype = 0x4c002042;
/// `MPIX_C_FLOAT16` (MPICH's): IEEE 754 half precision.
pub const MPIX_C_FLOAT16: MPI_Datatype = 0x4c000246;
/// `MPIX_BFLOAT16` (MPICH 5's): bfloat16.
pub const MPIX_BFLOAT16: MPI_Datatype = 0x4c00024c;
pub const MPI_AINT: MPI_Datatype = 0x4c000843;
pub const MPI_OFFSET: MPI_Datatype = 0x4c000844;
pub const MPI_COUNT: MPI_Datatype = 0x4c000845;
pub const MPI_CXX_BOOL: MPI_Datatype = 0x4c000133;
pub const MPI_CXX_FLOAT_COMPLEX: MPI_Datatype = 0x4c000834;
pub const MPI_CXX_DOUBLE_COMPLEX: MPI_Datatype = 0x4c001035;
pub const MPI_CXX_LONG_DOUBLE_COMPLEX: MPI_Datatype = 0x4c002036;

// ---- GPU-support queries (MPICH's MPIX extension) ----

/// `MPIX_GPU_SUPPORT_CUDA`: `MPIX_GPU_query_support`'s `gpu_type` for CUDA.
pub const MPIX_GPU_SUPPORT_CUDA: c_int = 0;
/// `MPIX_GPU_SUPPORT_ZE`: Intel Level Zero.
pub const MPIX_GPU_SUPPORT_ZE: c_int = 1;
/// `MPIX_GPU_SUPPORT_HIP`: AMD HIP.
pub const MPIX_GPU_SUPPORT_HIP: c_int = 2;

// ---- special pointer values ----

/// `MPI_IN_PLACE`: `(void *) -1`.
pub const MPI_IN_PLACE: usize = usize::MAX;
/// `MPI_STATUS_IGNORE`: `(MPI_Status *) 1`.
pub const MPI_STATUS_IGNORE: usize = 1;
/// `MPI_STATUSES_IGNORE`: `(MPI_Status *) 1`.
pub const MPI_STATUSES_IGNORE: usize = 1;
