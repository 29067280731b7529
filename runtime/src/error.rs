//! Errors: one type, [`Error`], carrying an MPI error class and a message that
//! names the call, the argument and the rank. This is the one place that maps
//! lower-layer errors to MPI classes.

use std::fmt;

/// MPI error classes. They carry no numbers: each C ABI maps them to its own
/// (`gmpi-capi`'s `abi` module holds the MPICH ABI's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// `MPI_ERR_BUFFER`: invalid buffer pointer.
    Buffer,
    /// `MPI_ERR_COUNT`: invalid count.
    Count,
    /// `MPI_ERR_TYPE`: invalid datatype.
    Type,
    /// `MPI_ERR_TAG`: invalid tag.
    Tag,
    /// `MPI_ERR_COMM`: invalid communicator.
    Comm,
    /// `MPI_ERR_RANK`: invalid rank.
    Rank,
    /// `MPI_ERR_ROOT`: invalid root.
    Root,
    /// `MPI_ERR_GROUP`: invalid group.
    Group,
    /// `MPI_ERR_OP`: invalid operation.
    Op,
    /// `MPI_ERR_TRUNCATE`: message truncated on receive.
    Truncate,
    /// `MPI_ERR_OTHER`: known error not in this list.
    Other,
    /// `MPI_ERR_INTERN`: internal error.
    Intern,
    /// `MPI_ERR_IN_STATUS`: error code is in status.
    InStatus,
    /// `MPI_ERR_PENDING`: pending request.
    Pending,
    /// `MPI_ERR_REQUEST`: invalid request.
    Request,
    /// `MPI_ERR_ARG`: invalid argument.
    Arg,
    /// `MPI_ERR_TOPOLOGY`: invalid topology.
    Topology,
    /// `MPI_ERR_DIMS`: invalid dimensions.
    Dims,
    /// `MPI_ERR_UNKNOWN`: unknown error.
    Unknown,
    /// `MPI_ERR_INFO_KEY`: invalid info key.
    InfoKey,
    /// `MPI_ERR_INFO_VALUE`: invalid info value.
    InfoValue,
    /// `MPI_ERR_INFO_NOKEY`: the info key is not defined.
    InfoNokey,
    /// `MPI_ERR_NO_MEM`: out of memory.
    NoMem,
    /// `MPI_ERR_INFO`: invalid info object.
    Info,
    /// `MPI_ERR_UNSUPPORTED_OPERATION`.
    Unsupported,
    /// `MPI_ERR_KEYVAL`: invalid attribute key.
    Keyval,
    /// `MPI_ERR_WIN`: invalid window.
    Win,
    /// `MPI_ERR_PROC_FAILED` (ULFM): a peer process failed.
    ProcFailed,
    /// `MPI_ERR_BASE`: invalid base address.
    Base,
    /// `MPI_ERR_LOCKTYPE`: invalid lock type.
    LockType,
    /// `MPI_ERR_RMA_CONFLICT`: conflicting accesses to a window.
    RmaConflict,
    /// `MPI_ERR_RMA_SYNC`: wrong synchronization of RMA calls.
    RmaSync,
    /// `MPI_ERR_SIZE`: invalid size.
    Size,
    /// `MPI_ERR_DISP`: invalid displacement.
    Disp,
    /// `MPI_ERR_ASSERT`: invalid assert.
    Assert,
    /// `MPI_ERR_RMA_RANGE`: target memory is not part of the window.
    RmaRange,
    /// `MPI_ERR_RMA_ATTACH`: memory cannot be attached.
    RmaAttach,
    /// `MPI_ERR_RMA_SHARED`: memory cannot be shared.
    RmaShared,
    /// `MPI_ERR_RMA_FLAVOR`: wrong window flavor.
    RmaFlavor,
    /// `MPI_ERR_SESSION`: invalid session.
    Session,
}

impl ErrorClass {
    /// The MPI name of the class.
    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Buffer => "MPI_ERR_BUFFER",
            ErrorClass::Count => "MPI_ERR_COUNT",
            ErrorClass::Type => "MPI_ERR_TYPE",
            ErrorClass::Tag => "MPI_ERR_TAG",
            ErrorClass::Comm => "MPI_ERR_COMM",
            ErrorClass::Rank => "MPI_ERR_RANK",
            ErrorClass::Root => "MPI_ERR_ROOT",
            ErrorClass::Group => "MPI_ERR_GROUP",
            ErrorClass::Op => "MPI_ERR_OP",
            ErrorClass::Truncate => "MPI_ERR_TRUNCATE",
            ErrorClass::Other => "MPI_ERR_OTHER",
            ErrorClass::Intern => "MPI_ERR_INTERN",
            ErrorClass::InStatus => "MPI_ERR_IN_STATUS",
            ErrorClass::Pending => "MPI_ERR_PENDING",
            ErrorClass::Request => "MPI_ERR_REQUEST",
            ErrorClass::Arg => "MPI_ERR_ARG",
            ErrorClass::Unsupported => "MPI_ERR_UNSUPPORTED_OPERATION",
            ErrorClass::Topology => "MPI_ERR_TOPOLOGY",
            ErrorClass::Dims => "MPI_ERR_DIMS",
            ErrorClass::Unknown => "MPI_ERR_UNKNOWN",
            ErrorClass::InfoKey => "MPI_ERR_INFO_KEY",
            ErrorClass::InfoValue => "MPI_ERR_INFO_VALUE",
            ErrorClass::InfoNokey => "MPI_ERR_INFO_NOKEY",
            ErrorClass::NoMem => "MPI_ERR_NO_MEM",
            ErrorClass::Info => "MPI_ERR_INFO",
            ErrorClass::Keyval => "MPI_ERR_KEYVAL",
            ErrorClass::Win => "MPI_ERR_WIN",
            ErrorClass::ProcFailed => "MPI_ERR_PROC_FAILED",
            ErrorClass::Base => "MPI_ERR_BASE",
            ErrorClass::LockType => "MPI_ERR_LOCKTYPE",
            ErrorClass::RmaConflict => "MPI_ERR_RMA_CONFLICT",
            ErrorClass::RmaSync => "MPI_ERR_RMA_SYNC",
            ErrorClass::Size => "MPI_ERR_SIZE",
            ErrorClass::Disp => "MPI_ERR_DISP",
            ErrorClass::Assert => "MPI_ERR_ASSERT",
            ErrorClass::RmaRange => "MPI_ERR_RMA_RANGE",
            ErrorClass::RmaAttach => "MPI_ERR_RMA_ATTACH",
            ErrorClass::RmaShared => "MPI_ERR_RMA_SHARED",
            ErrorClass::RmaFlavor => "MPI_ERR_RMA_FLAVOR",
            ErrorClass::Session => "MPI_ERR_SESSION",
        }
    }

    /// Every class (for a table that maps each one, such as a C ABI's
    /// numbers).
    pub const ALL: [ErrorClass; 40] = [
        ErrorClass::Buffer,
        ErrorClass::Count,
        ErrorClass::Type,
        ErrorClass::Tag,
        ErrorClass::Comm,
        ErrorClass::Rank,
        ErrorClass::Root,
        ErrorClass::Group,
        ErrorClass::Op,
        ErrorClass::Topology,
        ErrorClass::Dims,
        ErrorClass::Arg,
        ErrorClass::Unknown,
        ErrorClass::Truncate,
        ErrorClass::Other,
        ErrorClass::Intern,
        ErrorClass::InStatus,
        ErrorClass::Pending,
        ErrorClass::Request,
        ErrorClass::Info,
        ErrorClass::InfoKey,
        ErrorClass::InfoValue,
        ErrorClass::InfoNokey,
        ErrorClass::NoMem,
        ErrorClass::Unsupported,
        ErrorClass::Win,
        ErrorClass::Keyval,
        ErrorClass::ProcFailed,
        ErrorClass::Base,
        ErrorClass::LockType,
        ErrorClass::RmaConflict,
        ErrorClass::RmaSync,
        ErrorClass::Size,
        ErrorClass::Disp,
        ErrorClass::Assert,
        ErrorClass::RmaRange,
        ErrorClass::RmaAttach,
        ErrorClass::RmaShared,
        ErrorClass::RmaFlavor,
        ErrorClass::Session,
    ];
}

/// A gmpi error: an MPI error class and a message naming the call, the
/// argument and the rank.
///
/// Where a lower layer raised it, [`std::error::Error::source`] is that
/// layer's typed error (a [`gmpi_pml::PmlError`]: a peer that broke the
/// protocol, a local transport or device failure, …), for programs that
/// inspect it; the message already names every cause, as MPI's error
/// strings must. Two errors are equal when their class and message are.
#[derive(Debug, Clone)]
pub struct Error {
    class: ErrorClass,
    msg: String,
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.class == other.class && self.msg == other.msg
    }
}

impl Eq for Error {}

impl Error {
    /// An error of `class` raised by `call` on `rank`.
    pub fn new(class: ErrorClass, call: &str, rank: i32, what: impl fmt::Display) -> Self {
        let msg = if rank >= 0 {
            format!("{call}: {what} (on rank {rank})")
        } else {
            format!("{call}: {what}")
        };
        Self {
            class,
            msg,
            source: None,
        }
    }

    /// The MPI error class.
    pub fn class(&self) -> ErrorClass {
        self.class
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.msg
    }

    /// An error with exactly this message (no call or rank added).
    pub fn with_message(class: ErrorClass, msg: String) -> Self {
        Self {
            class,
            msg,
            source: None,
        }
    }

    /// Map a pml error raised under `call` on `rank`: the one place that
    /// gives each pml error its MPI class. The message carries the error's
    /// whole chain of causes.
    pub(crate) fn from_pml(e: gmpi_pml::PmlError, call: &str, rank: i32) -> Self {
        use gmpi_pml::PmlError as P;
        let class = match &e {
            P::Truncated { .. } => ErrorClass::Truncate,
            P::PeerFailed(_) => ErrorClass::ProcFailed,
            P::Unreachable(_) => ErrorClass::Rank,
            // A peer broke the protocol: nothing the caller did.
            P::Peer { .. } => ErrorClass::Intern,
            P::Transport { .. } | P::Device(_) => ErrorClass::Other,
        };
        let mut err = Self::new(class, call, rank, gmpi_pml::error::chain(&e));
        err.source = Some(std::sync::Arc::new(e));
        err
    }
}

impl Error {
    /// The gpu layer could not say where the buffer at `addr` lives (a
    /// sticky or context error of the driver's pointer query): raised by
    /// `call` on `rank` as `MPI_ERR_OTHER` naming the CUDA error, since the
    /// buffer must not be taken for host memory.
    pub(crate) fn classify_failed(e: gmpi_gpu::GpuError, call: &str, rank: i32, addr: u64) -> Self {
        let mut err = Self::new(
            ErrorClass::Other,
            call,
            rank,
            format_args!(
                "cannot tell whether the buffer at {addr:#x} is host or device memory: {e}"
            ),
        );
        err.source = Some(std::sync::Arc::new(e));
        err
    }

    /// A copy into or out of device memory failed: raised by `call` on
    /// `rank` as `MPI_ERR_OTHER`, the message naming what was copied
    /// (`what`: the bytes, the direction and the device address, e.g.
    /// "copying 64 B out of device memory at 0x7a0000000000") and the CUDA
    /// error, which is also its [`std::error::Error::source`].
    pub(crate) fn device_copy(
        e: gmpi_gpu::GpuError,
        call: &str,
        rank: i32,
        what: impl fmt::Display,
    ) -> Self {
        let mut err = Self::new(
            ErrorClass::Other,
            call,
            rank,
            format_args!("{what} failed: {e}"),
        );
        err.source = Some(std::sync::Arc::new(e));
        err
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.msg, self.class.name())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Result with a gmpi [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_call_argument_and_rank() {
        let e = Error::new(
            ErrorClass::Rank,
            "MPI_Send",
            3,
            "invalid destination rank 9 (size 4)",
        );
        assert_eq!(e.class(), ErrorClass::Rank);
        let s = e.to_string();
        assert!(
            s.contains("MPI_Send")
                && s.contains("rank 9")
                && s.contains("on rank 3")
                && s.contains("MPI_ERR_RANK"),
            "{s}"
        );
        let t = Error::from_pml(
            gmpi_pml::PmlError::Truncated { len: 10, cap: 4 },
            "MPI_Recv",
            0,
        );
        assert_eq!(t.class(), ErrorClass::Truncate);
        // The pml's error stays reachable, typed, with its causes.
        let p = Error::from_pml(
            gmpi_pml::PmlError::transport(1, gmpi_btl::BtlError::Os("connection reset".into())),
            "MPI_Send",
            0,
        );
        assert_eq!(p.class(), ErrorClass::Other);
        assert!(p.message().contains("connection reset"), "{p}");
        let src = std::error::Error::source(&p).expect("the pml error");
        assert!(matches!(
            src.downcast_ref::<gmpi_pml::PmlError>(),
            Some(gmpi_pml::PmlError::Transport { peer: 1, .. })
        ));
        assert!(
            std::error::Error::source(src).is_some(),
            "and the transport's below it"
        );
    }
}
