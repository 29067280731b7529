//! gmpi-pmi: the PMI-1 "simple" wire protocol (MPICH's PMI v1.1), both ends.
//!
//! The same protocol is served by MPICH's Hydra and accepted by Slurm's `pmi2` plugin,
//! so a gmpi rank bootstraps the same way under `gmpirun`, `mpiexec.hydra` or
//! `srun --mpi=pmi2` (the client keeps to the strictest server's limits; see `client.rs`;
//! `tests/tests/launchers.rs` runs real jobs under both).
//!
//! File map:
//! - `wire.rs`: [`Command`], the line codec (`cmd=NAME key=value ...\n`); a total
//!   decoder (never panics, property-tested) and a canonical encoder.
//! - `client.rs`: [`PmiClient`], the blocking rank side used by the runtime:
//!   connection from `PMI_FD` or `PMI_PORT`+`PMI_ID`, put / fence / get (long values split
//!   across keys transparently), abort, finalize.
//! - `server.rs`: [`PmiServer`], the sans-IO launcher side: lines in, [`ServerOutput`]s
//!   (replies and job events) out; key-value space and barrier accounting kept apart.
//! - `error.rs`: [`PmiError`], the one error type.
//! - `sys.rs`: adoption of the inherited `PMI_FD` descriptor, the crate's only `unsafe`.
//!
//! Contract: nothing in this crate panics on input from the peer; every malformed or
//! unexpected line is a [`PmiError`]. The client never waits forever on a server that
//! went away: a closed connection is [`PmiError::Closed`].

#![deny(unsafe_code)]

mod client;
mod error;
mod server;
mod sys;
pub mod wire;

pub use client::PmiClient;
pub use error::PmiError;
pub use server::{
    PmiServer, ServerOutput, KEYLEN_MAX, KVSNAME_MAX, PROCESS_MAPPING_KEY, VALLEN_MAX,
};
pub use wire::Command;
