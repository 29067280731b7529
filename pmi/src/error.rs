//! The one error type of the crate.

use std::io;

/// Everything that can go wrong speaking PMI, on either end.
///
/// Decoding errors ([`PmiError::Malformed`], [`PmiError::LineTooLong`]) are what the
/// server reports for a bad line from a rank; the client additionally reports transport
/// failures, unexpected replies and refused requests.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmiError {
    /// A line that is not a well-formed PMI-1 command.
    #[error("malformed PMI line: {0}")]
    Malformed(String),

    /// A line longer than [`crate::wire::MAX_LINE_LEN`] bytes.
    #[error("PMI line too long ({len} bytes, at most {max})")]
    LineTooLong {
        /// How many bytes were seen (a lower bound when the line was cut short).
        len: usize,
        /// The limit.
        max: usize,
    },

    /// The transport failed.
    #[error("PMI connection error: {0}")]
    Io(#[from] io::Error),

    /// The peer closed the connection (possibly in the middle of a line).
    #[error("the PMI server closed the connection {0}")]
    Closed(&'static str),

    /// A well-formed line that is not what the protocol allows at this point.
    #[error("PMI protocol error: {0}")]
    Protocol(String),

    /// The server answered a request with a non-zero `rc`.
    #[error("PMI server refused `{cmd}` (rc={rc}): {msg}")]
    Refused {
        /// The request command.
        cmd: String,
        /// The server's return code.
        rc: i64,
        /// The server's message, as sent.
        msg: String,
    },

    /// `get` of a key nobody has put (or not yet visible: fence before get).
    #[error("PMI key `{0}` not found")]
    NotFound(String),

    /// A key the client refuses to send.
    #[error("invalid PMI key `{key}`: {reason}")]
    InvalidKey {
        /// The key as given by the caller.
        key: String,
        /// Why it was refused.
        reason: String,
    },

    /// A value the client refuses to send.
    #[error("invalid PMI value for key `{key}`: {reason}")]
    InvalidValue {
        /// The key the value was meant for.
        key: String,
        /// Why it was refused.
        reason: String,
    },

    /// The PMI environment variables are missing or inconsistent.
    #[error("bad PMI environment: {0}")]
    Env(String),

    /// The client was used after [`crate::PmiClient::finalize`].
    #[error("PMI client already finalized")]
    Finalized,
}
