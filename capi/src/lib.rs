//! gmpi's MPI C ABI: `libmpi.so.12`, binary-compatible with the MPICH ABI
//! (MPICH, Intel MPI, MVAPICH2, Cray MPICH), so binaries built against any of
//! them run on gmpi unchanged, and `include/mpi.h` for new builds.
//!
//! A thin, defensive layer over the `gmpi` runtime. Every entry point
//! (`MPI_X`, with `PMPI_X` as the profiling name) runs through [`entry`]:
//! it catches panics, checks that MPI is initialized, translates handles,
//! checks every argument, calls the runtime, and hands any error to the
//! error handler of the communicator involved (`MPI_ERRORS_ARE_FATAL` by
//! default: the message names the call, the argument and the rank, and the
//! job ends; `MPI_ERRORS_RETURN` returns the class). The hottest calls
//! (`MPI_Send`/`Ssend`/`Rsend`/`Recv`/`Isend`/`Issend`/`Irsend`/`Irecv`,
//! `MPI_Comm_rank`/`size`) first try a hot path for `MPI_COMM_WORLD` or
//! `MPI_COMM_SELF` with a predefined datatype (no lock, no reference count;
//! see `mpi_fn!`'s `fast` form): it takes only arguments that pass the
//! C-side checks outright, leaves rank and tag checks to the runtime as the
//! full path does, and anything else takes the full path.
//!
//! File map:
//! - `handles.rs`: the one module that knows handle values: MPICH's
//!   predefined values, the tables of user objects, and translation both ways
//!   (a later `libmpi_abi.so.1` adds its own translation beside it).
//! - `ptr.rs`: every dereference of a pointer the C caller passed (the
//!   caller vouches for each, as the MPI standard says).
//! - `errors.rs`: [`entry`], error handlers, error codes and strings.
//! - `env.rs`: init, finalize, versions, time, memory, addresses.
//! - `p2p.rs`: point-to-point, requests, statuses, persistent and buffered
//!   sends, matched probes.
//! - `coll.rs`: collectives and reduction operations.
//! - `extops.rs`: predefined reductions on complex, `long double` and the
//!   Fortran pair types, which the runtime moves as opaque bytes.
//! - `comm.rs`: communicators, groups, attributes, names.
//! - `types.rs`: derived datatypes, pack/unpack.
//! - `topo.rs`: Cartesian topologies.
//! - `info.rs`: info objects.
//! - `unsupported.rs`: one-sided, MPI-IO, dynamic processes, sessions and
//!   the other calls gmpi exports but does not implement yet: each fails with
//!   `MPI_ERR_UNSUPPORTED_OPERATION` through the error handler, naming the
//!   call.
//!
//! Threading: `MPI_THREAD_FUNNELED`, as the runtime. Object tables sit behind
//! one lock that is never held while the runtime runs, so callbacks (user
//! reduction functions, attribute copy functions, error handlers) may call
//! MPI again.
//!
//! Unsafe code: this crate is an FFI boundary; DESIGN.md names `capi/src/*`
//! as one of the places `unsafe` lives. Raw pointers are dereferenced only in
//! `ptr.rs`, each after a null/special-value check.

// MPI's C names are not snake case, and its signatures are long: the entry
// points keep them exactly.
#![allow(
    non_snake_case,
    non_camel_case_types,
    clippy::missing_safety_doc,
    clippy::too_many_arguments,
    clippy::type_complexity
)]

pub mod handles;
mod ptr;
#[macro_use]
mod errors;
mod attrs;
mod coll;
mod comm;
mod env;
mod extops;
mod info;
mod p2p;
mod topo;
mod types;
mod unsupported;

pub use errors::entry;

/// A few entry points by Rust path, for Rust programs that link this crate
/// as an rlib and call the C ABI exactly as a C program does
/// (`bench/`'s `gmpi-capi-overhead`). Every entry point is also exported
/// under its C name.
pub mod entry_points {
    pub use crate::comm::{PMPI_Comm_rank, PMPI_Comm_size};
    pub use crate::env::{PMPI_Finalize, PMPI_Init};
    pub use crate::p2p::{PMPI_Recv, PMPI_Send};
}
