//! Errors of the pml, typed by whose fault they are.
//!
//! - [`PmlError::Truncated`], [`PmlError::PeerFailed`],
//!   [`PmlError::Unreachable`]: the outcomes MPI itself names
//!   (`MPI_ERR_TRUNCATE`, `MPI_ERR_PROC_FAILED`, a rank no transport reaches).
//! - [`PmlError::Peer`]: a peer broke the protocol ([`Violation`]; an
//!   undecodable fragment is a [`WireError`] inside it). This rank did
//!   nothing wrong; the job cannot go on with that peer.
//! - [`PmlError::Transport`]: a transport failed in this process (the
//!   [`BtlError`] is the source).
//! - [`PmlError::Device`]: copying device memory failed in this process (the
//!   gpu layer's error is the source, behind [`DeviceFault`]).
//!
//! Every variant keeps its cause as `source()`, so a caller can print the
//! whole chain; the runtime maps each variant to one MPI error class
//! (`runtime/src/error.rs`, the one place that does). The causes are boxed:
//! a `PmlError` is 24 bytes, and every completed request carries a
//! `Result<Status, PmlError>`.

use std::fmt;
use std::sync::Arc;

use gmpi_btl::{BtlError, Rank};

/// Errors of the pml.
///
/// Deliberately not `#[non_exhaustive]`: the runtime maps every variant to
/// an MPI class, and a new variant must be mapped there, not fall into a
/// catch-all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PmlError {
    /// The message was longer than the receive buffer; `min(len, cap)` bytes
    /// were written and nothing past the buffer.
    #[error("message of {len} bytes truncated to the receive buffer of {cap} bytes")]
    Truncated {
        /// Message length.
        len: u64,
        /// Buffer capacity.
        cap: u64,
    },
    /// The peer failed before the operation completed.
    #[error("rank {0} failed")]
    PeerFailed(Rank),
    /// No transport reaches the peer.
    #[error("no transport reaches rank {0}")]
    Unreachable(Rank),
    /// A peer sent something the protocol does not allow.
    #[error("rank {peer} broke the point-to-point protocol")]
    Peer {
        /// The peer.
        peer: Rank,
        /// What it did.
        #[source]
        source: Box<Violation>,
    },
    /// A transport failed in this process.
    #[error("the transport towards rank {peer} failed")]
    Transport {
        /// The peer the operation was for.
        peer: Rank,
        /// The transport's error.
        #[source]
        source: Box<BtlError>,
    },
    /// A device-memory copy failed in this process.
    #[error(transparent)]
    Device(Box<DeviceError>),
}

impl PmlError {
    /// A [`PmlError::Peer`] error.
    pub(crate) fn peer(peer: Rank, source: impl Into<Violation>) -> Self {
        PmlError::Peer {
            peer,
            source: Box::new(source.into()),
        }
    }

    /// A [`PmlError::Transport`] error: `source` towards `peer`.
    pub fn transport(peer: Rank, source: BtlError) -> Self {
        PmlError::Transport {
            peer,
            source: Box::new(source),
        }
    }

    /// A [`PmlError::Device`] error: `what` (`"reading"`, `"writing"`)
    /// `len` bytes at `addr` failed with the gpu layer's `e`.
    pub fn device(
        what: &'static str,
        addr: u64,
        len: usize,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        PmlError::Device(Box::new(DeviceError {
            what,
            addr,
            len,
            source: DeviceFault::new(e),
        }))
    }
}

/// A device-memory copy that failed in this process ([`PmlError::Device`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {len} bytes of device memory at {addr:#x} failed")]
pub struct DeviceError {
    /// `"reading"` or `"writing"`.
    pub what: &'static str,
    /// Device address.
    pub addr: u64,
    /// Bytes.
    pub len: usize,
    /// The gpu layer's error.
    #[source]
    pub source: DeviceFault,
}

/// How a peer broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// A fragment that does not decode.
    #[error("malformed fragment")]
    Wire(#[from] WireError),
    /// A fragment from a rank outside the job.
    #[error("fragment from rank {0}, outside the job")]
    UnknownRank(Rank),
    /// A control fragment naming a request this rank does not have.
    #[error("{what} for unknown request {id:#x}")]
    UnknownRequest {
        /// The fragment type.
        what: &'static str,
        /// The request id it named.
        id: u64,
    },
    /// A control fragment for a request not waiting for it.
    #[error("{what} for a request not waiting for one")]
    OutOfPlace {
        /// The fragment type.
        what: &'static str,
    },
    /// An acknowledgement that came twice.
    #[error("duplicate {0}")]
    Duplicate(&'static str),
    /// A sequence number this rank has already processed.
    #[error("sequence number {seq} replayed (expected {expected})")]
    Replayed {
        /// The number received.
        seq: u32,
        /// The next expected.
        expected: u32,
    },
    /// An eager header whose length disagrees with its payload.
    #[error("eager header says {said} bytes, fragment holds {got}")]
    EagerLength {
        /// The header's length.
        said: u64,
        /// The payload's.
        got: usize,
    },
    /// A CUDA IPC rendezvous whose descriptor does not cover the message.
    #[error("RNDV_IPC exposes {exposed} bytes of a {len}-byte message")]
    IpcLength {
        /// Bytes the descriptor exposes.
        exposed: u64,
        /// The message length.
        len: u64,
    },
    /// A clear-to-send asking for more than the message.
    #[error("CTS asks {want} bytes of a {len}-byte message")]
    CtsTooLong {
        /// Bytes asked.
        want: u64,
        /// Message length.
        len: usize,
    },
    /// A pipelined fragment outside what the receiver granted.
    #[error("FRAG at {offset}+{len} past the {granted} bytes granted")]
    FragOutOfBounds {
        /// Offset in the message.
        offset: u64,
        /// Payload bytes.
        len: usize,
        /// Bytes granted by the CTS.
        granted: u64,
    },
    /// A streamed fragment that is not a pipelined FRAG.
    #[error("a streamed fragment that is not a FRAG")]
    StreamNotFrag,
    /// A CHUNK_ACK for a chunk that was not offered.
    #[error("CHUNK_ACK at {offset} for a chunk not offered (chunks of {chunk}, {offered} bytes offered)")]
    ChunkNotOffered {
        /// Offset in the message.
        offset: u64,
        /// The chunk size.
        chunk: u64,
        /// Bytes offered so far.
        offered: u64,
    },
}

/// Why a fragment does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Shorter than its header.
    #[error("{what} header needs {need} bytes, fragment has {got}")]
    Truncated {
        /// The header type.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        got: usize,
    },
    /// A wire version this build does not speak.
    #[error("wire version {got}, this build speaks {speaks}")]
    Version {
        /// The version received.
        got: u8,
        /// This build's.
        speaks: u8,
    },
    /// An unknown fragment type.
    #[error("unknown fragment type {0}")]
    UnknownType(u8),
    /// Flags a header type does not have.
    #[error("{what} header with flags {flags:#x} (it has none)")]
    Flags {
        /// The header type.
        what: &'static str,
        /// The flags received.
        flags: u8,
    },
    /// A fragment of the wrong length for its type.
    #[error("{what} of {got} bytes, expected {expected}")]
    Length {
        /// The header type.
        what: &'static str,
        /// Bytes present.
        got: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// Bytes after a header that carries no payload.
    #[error("{0} trailing bytes after a control header")]
    Trailing(usize),
}

/// A device-memory error from the gpu layer, kept as the source of
/// [`PmlError::Device`] (the pml does not know the gpu layer's types).
/// Two faults are equal when they print the same.
#[derive(Clone)]
pub struct DeviceFault(Arc<dyn std::error::Error + Send + Sync>);

impl DeviceFault {
    /// Wrap the gpu layer's error.
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(e))
    }
}

impl fmt::Debug for DeviceFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for DeviceFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for DeviceFault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for DeviceFault {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

impl Eq for DeviceFault {}

/// The whole chain of `e`, outermost first, joined by `": "`: what a user
/// reads in an error message.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_name_every_cause() {
        let e = PmlError::peer(3, WireError::Version { got: 9, speaks: 3 });
        assert_eq!(
            chain(&e),
            "rank 3 broke the point-to-point protocol: malformed fragment: wire version 9, this build speaks 3"
        );
        let t = PmlError::transport(1, BtlError::Os("connection reset".into()));
        assert_eq!(
            chain(&t),
            "the transport towards rank 1 failed: connection reset"
        );
        let d = PmlError::device("reading", 0x1000, 8, BtlError::Os("cuMemcpy failed".into()));
        assert!(chain(&d).ends_with("at 0x1000 failed: cuMemcpy failed"));
        assert_eq!(d.clone(), d);
        assert_eq!(
            std::mem::size_of::<PmlError>(),
            24,
            "kept small: every outcome carries one"
        );
    }
}
