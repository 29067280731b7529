//! The numbers of the error classes in the MPICH ABI: the one place that
//! maps the runtime's [`ErrorClass`] (a plain enum, with no numbers) to the
//! integers C programs compare return codes with, and back.

use std::ffi::c_int;

use gmpi::ErrorClass;

use crate::abi::consts::*;

/// Every runtime error class and its MPICH number.
const CLASSES: [(ErrorClass, c_int); 40] = [
    (ErrorClass::Buffer, MPI_ERR_BUFFER),
    (ErrorClass::Count, MPI_ERR_COUNT),
    (ErrorClass::Type, MPI_ERR_TYPE),
    (ErrorClass::Tag, MPI_ERR_TAG),
    (ErrorClass::Comm, MPI_ERR_COMM),
    (ErrorClass::Rank, MPI_ERR_RANK),
    (ErrorClass::Root, MPI_ERR_ROOT),
    (ErrorClass::Group, MPI_ERR_GROUP),
    (ErrorClass::Op, MPI_ERR_OP),
    (ErrorClass::Topology, MPI_ERR_TOPOLOGY),
    (ErrorClass::Dims, MPI_ERR_DIMS),
    (ErrorClass::Arg, MPI_ERR_ARG),
    (ErrorClass::Unknown, MPI_ERR_UNKNOWN),
    (ErrorClass::Truncate, MPI_ERR_TRUNCATE),
    (ErrorClass::Other, MPI_ERR_OTHER),
    (ErrorClass::Intern, MPI_ERR_INTERN),
    (ErrorClass::InStatus, MPI_ERR_IN_STATUS),
    (ErrorClass::Pending, MPI_ERR_PENDING),
    (ErrorClass::Request, MPI_ERR_REQUEST),
    (ErrorClass::Info, MPI_ERR_INFO),
    (ErrorClass::InfoKey, MPI_ERR_INFO_KEY),
    (ErrorClass::InfoValue, MPI_ERR_INFO_VALUE),
    (ErrorClass::InfoNokey, MPI_ERR_INFO_NOKEY),
    (ErrorClass::NoMem, MPI_ERR_NO_MEM),
    (ErrorClass::Unsupported, MPI_ERR_UNSUPPORTED_OPERATION),
    (ErrorClass::Win, MPI_ERR_WIN),
    (ErrorClass::Keyval, MPI_ERR_KEYVAL),
    (ErrorClass::ProcFailed, MPI_ERR_PROC_FAILED),
    (ErrorClass::Base, MPI_ERR_BASE),
    (ErrorClass::LockType, MPI_ERR_LOCKTYPE),
    (ErrorClass::RmaConflict, MPI_ERR_RMA_CONFLICT),
    (ErrorClass::RmaSync, MPI_ERR_RMA_SYNC),
    (ErrorClass::Size, MPI_ERR_SIZE),
    (ErrorClass::Disp, MPI_ERR_DISP),
    (ErrorClass::Assert, MPI_ERR_ASSERT),
    (ErrorClass::RmaRange, MPI_ERR_RMA_RANGE),
    (ErrorClass::RmaAttach, MPI_ERR_RMA_ATTACH),
    (ErrorClass::RmaShared, MPI_ERR_RMA_SHARED),
    (ErrorClass::RmaFlavor, MPI_ERR_RMA_FLAVOR),
    (ErrorClass::Session, MPI_ERR_SESSION),
];

/// Every predefined error class of the MPICH ABI (MPICH 4.x's `mpi.h`, up
/// to `MPI_ERR_ERRHANDLER`, and its `MPIX_ERR_*` classes above
/// `MPICH_ERR_FIRST_MPIX`), with its name and the text
/// `MPI_Error_string` gives for it. 54 and 79..100 other than those listed
/// are not classes in MPICH's header.
pub const PREDEFINED: [(c_int, &str, &str); 85] = [
    (0, "MPI_SUCCESS", "no errors"),
    (1, "MPI_ERR_BUFFER", "invalid buffer pointer"),
    (2, "MPI_ERR_COUNT", "invalid count argument"),
    (3, "MPI_ERR_TYPE", "invalid datatype"),
    (4, "MPI_ERR_TAG", "invalid tag"),
    (5, "MPI_ERR_COMM", "invalid communicator"),
    (6, "MPI_ERR_RANK", "invalid rank"),
    (7, "MPI_ERR_ROOT", "invalid root"),
    (8, "MPI_ERR_GROUP", "invalid group"),
    (9, "MPI_ERR_OP", "invalid operation"),
    (10, "MPI_ERR_TOPOLOGY", "invalid topology"),
    (11, "MPI_ERR_DIMS", "invalid dimension argument"),
    (12, "MPI_ERR_ARG", "invalid argument"),
    (13, "MPI_ERR_UNKNOWN", "unknown error"),
    (14, "MPI_ERR_TRUNCATE", "message truncated"),
    (15, "MPI_ERR_OTHER", "other error"),
    (16, "MPI_ERR_INTERN", "internal error"),
    (17, "MPI_ERR_IN_STATUS", "error code is in status"),
    (18, "MPI_ERR_PENDING", "pending request"),
    (19, "MPI_ERR_REQUEST", "invalid request"),
    (20, "MPI_ERR_ACCESS", "permission denied"),
    (21, "MPI_ERR_AMODE", "invalid file access mode"),
    (22, "MPI_ERR_BAD_FILE", "invalid file name"),
    (
        23,
        "MPI_ERR_CONVERSION",
        "error in a data conversion function",
    ),
    (
        24,
        "MPI_ERR_DUP_DATAREP",
        "data representation already defined",
    ),
    (25, "MPI_ERR_FILE_EXISTS", "file exists"),
    (26, "MPI_ERR_FILE_IN_USE", "file in use"),
    (27, "MPI_ERR_FILE", "invalid file handle"),
    (28, "MPI_ERR_INFO", "invalid info object"),
    (29, "MPI_ERR_INFO_KEY", "invalid info key"),
    (30, "MPI_ERR_INFO_VALUE", "invalid info value"),
    (31, "MPI_ERR_INFO_NOKEY", "info key not defined"),
    (32, "MPI_ERR_IO", "I/O error"),
    (33, "MPI_ERR_NAME", "invalid service name"),
    (34, "MPI_ERR_NO_MEM", "out of memory"),
    (35, "MPI_ERR_NOT_SAME", "arguments differ between processes"),
    (36, "MPI_ERR_NO_SPACE", "no space left on device"),
    (37, "MPI_ERR_NO_SUCH_FILE", "no such file"),
    (38, "MPI_ERR_PORT", "invalid port name"),
    (39, "MPI_ERR_QUOTA", "quota exceeded"),
    (40, "MPI_ERR_READ_ONLY", "read-only file or file system"),
    (41, "MPI_ERR_SERVICE", "invalid service"),
    (42, "MPI_ERR_SPAWN", "error spawning processes"),
    (
        43,
        "MPI_ERR_UNSUPPORTED_DATAREP",
        "unsupported data representation",
    ),
    (
        44,
        "MPI_ERR_UNSUPPORTED_OPERATION",
        "operation not supported by gmpi",
    ),
    (45, "MPI_ERR_WIN", "invalid window"),
    (46, "MPI_ERR_BASE", "invalid base address"),
    (47, "MPI_ERR_LOCKTYPE", "invalid lock type"),
    (48, "MPI_ERR_KEYVAL", "invalid attribute key"),
    (
        49,
        "MPI_ERR_RMA_CONFLICT",
        "conflicting accesses to a window",
    ),
    (50, "MPI_ERR_RMA_SYNC", "wrong synchronization of RMA calls"),
    (51, "MPI_ERR_SIZE", "invalid size"),
    (52, "MPI_ERR_DISP", "invalid displacement"),
    (53, "MPI_ERR_ASSERT", "invalid assert"),
    (
        55,
        "MPI_ERR_RMA_RANGE",
        "target memory is outside the window",
    ),
    (56, "MPI_ERR_RMA_ATTACH", "memory cannot be attached"),
    (57, "MPI_ERR_RMA_SHARED", "memory cannot be shared"),
    (58, "MPI_ERR_RMA_FLAVOR", "wrong window flavor"),
    (59, "MPI_T_ERR_MEMORY", "out of memory (MPI_T)"),
    (60, "MPI_T_ERR_NOT_INITIALIZED", "MPI_T not initialized"),
    (61, "MPI_T_ERR_CANNOT_INIT", "MPI_T cannot be initialized"),
    (62, "MPI_T_ERR_INVALID_INDEX", "invalid MPI_T index"),
    (63, "MPI_T_ERR_INVALID_ITEM", "invalid MPI_T item"),
    (64, "MPI_T_ERR_INVALID_HANDLE", "invalid MPI_T handle"),
    (65, "MPI_T_ERR_OUT_OF_HANDLES", "no more MPI_T handles"),
    (66, "MPI_T_ERR_OUT_OF_SESSIONS", "no more MPI_T sessions"),
    (67, "MPI_T_ERR_INVALID_SESSION", "invalid MPI_T session"),
    (
        68,
        "MPI_T_ERR_CVAR_SET_NOT_NOW",
        "control variable cannot be set now",
    ),
    (
        69,
        "MPI_T_ERR_CVAR_SET_NEVER",
        "control variable cannot be set",
    ),
    (
        70,
        "MPI_T_ERR_PVAR_NO_STARTSTOP",
        "performance variable cannot be started or stopped",
    ),
    (
        71,
        "MPI_T_ERR_PVAR_NO_WRITE",
        "performance variable cannot be written or reset",
    ),
    (
        72,
        "MPI_T_ERR_PVAR_NO_ATOMIC",
        "performance variable cannot be read and written atomically",
    ),
    (73, "MPI_T_ERR_INVALID_NAME", "invalid MPI_T name"),
    (74, "MPI_T_ERR_INVALID", "invalid use of MPI_T"),
    (75, "MPI_ERR_SESSION", "invalid session"),
    (
        76,
        "MPI_ERR_PROC_ABORTED",
        "communication with an aborted process",
    ),
    (77, "MPI_ERR_VALUE_TOO_LARGE", "value too large to store"),
    (
        78,
        "MPI_T_ERR_NOT_SUPPORTED",
        "MPI_T functionality not supported",
    ),
    (
        79,
        "MPI_T_ERR_NOT_ACCESSIBLE",
        "MPI_T functionality not accessible",
    ),
    (80, "MPI_ERR_ERRHANDLER", "invalid error handler"),
    (101, "MPIX_ERR_PROC_FAILED", "a process failed"),
    (
        102,
        "MPIX_ERR_PROC_FAILED_PENDING",
        "a process failure left this request pending",
    ),
    (
        103,
        "MPIX_ERR_REVOKED",
        "the communication object was revoked",
    ),
    (104, "MPIX_ERR_EAGAIN", "operation could not be issued"),
    (105, "MPIX_ERR_NOREQ", "cannot allocate a request"),
];

/// The name and text of the predefined class `code`, if it is one.
pub fn predefined(code: c_int) -> Option<(&'static str, &'static str)> {
    PREDEFINED
        .iter()
        .find(|(c, _, _)| *c == code)
        .map(|&(_, n, t)| (n, t))
}

/// The MPICH error class number of `class` (`MPI_ERR_OTHER` for a class
/// this table does not know yet; the test below keeps it complete).
pub fn class_code(class: ErrorClass) -> c_int {
    CLASSES
        .iter()
        .find(|(k, _)| *k == class)
        .map_or(MPI_ERR_OTHER, |&(_, c)| c)
}

/// The runtime class whose MPICH number is `code`, if it is one of them.
pub fn runtime_class(code: c_int) -> Option<ErrorClass> {
    CLASSES.iter().find(|(_, c)| *c == code).map(|&(k, _)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_runtime_class_has_its_own_number() {
        for k in ErrorClass::ALL {
            assert_eq!(
                CLASSES.iter().filter(|(c, _)| *c == k).count(),
                1,
                "{}",
                k.name()
            );
            assert_eq!(runtime_class(class_code(k)), Some(k), "{}", k.name());
        }
        let mut codes: Vec<c_int> = CLASSES.iter().map(|&(_, c)| c).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), CLASSES.len());
        assert_eq!(class_code(ErrorClass::Rank), 6);
        assert_eq!(runtime_class(MPI_SUCCESS), None);
    }

    #[test]
    fn predefined_classes_cover_mpich_and_the_runtime() {
        // MPI_ERR_ERRHANDLER (80) is the last class of MPICH 4.1+; every
        // number up to it but 54 is a class.
        for c in (0..=80).filter(|&c| c != 54).chain(101..=105) {
            assert!(predefined(c).is_some(), "class {c}");
        }
        assert_eq!(predefined(80).map(|p| p.0), Some("MPI_ERR_ERRHANDLER"));
        assert_eq!(predefined(54), None);
        assert_eq!(predefined(81), None);
        for k in ErrorClass::ALL {
            let (name, _) = predefined(class_code(k)).unwrap_or_else(|| panic!("{}", k.name()));
            assert_eq!(name.replace("MPIX_", "MPI_"), k.name());
        }
    }
}
