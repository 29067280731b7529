//! The numbers of the error classes in the MPICH ABI: the one place that
//! maps the runtime's [`ErrorClass`] (a plain enum, with no numbers) to the
//! integers C programs compare return codes with, and back.

use std::ffi::c_int;

use gmpi::ErrorClass;

use crate::abi::consts::*;

/// Every runtime error class and its MPICH number.
const CLASSES: [(ErrorClass, c_int); 28] = [
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
];

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
}
