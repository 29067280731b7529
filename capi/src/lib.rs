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
//! Layers, each importing only those below it (no module imports one above
//! it or one beside it on the top layer):
//!
//! 0. `abi/`: the MPICH ABI as numbers and C types: handle types,
//!    `MPI_Status`, every constant and predefined handle value, the bit
//!    layout of handles and the handles gmpi makes, and the error class
//!    numbers (the runtime's `ErrorClass` has none). The one place that
//!    knows MPICH's values; a later `libmpi_abi.so.1` (the MPI-5 standard
//!    ABI) adds its own numbers beside it.
//! 1. `tables/`: the tables of the objects C programs create (what the C ABI
//!    keeps per communicator, datatype, request, keyval, info, …), the
//!    registration of new ones, and the process's MPI state (phase,
//!    `MPI_COMM_WORLD`/`MPI_COMM_SELF`, rank).
//! 2. `ptr.rs`: every dereference of a pointer the C caller passed and
//!    every call of a C function pointer (the caller vouches for each, as
//!    the MPI standard says).
//! 3. `errors.rs`: error codes and strings, user error classes, and the
//!    dispatch of an error to the handler of the communicator involved.
//! 4. `resolve/`: from handles to the runtime's objects, with the checks
//!    and errors of each (communicators, groups, requests, datatypes,
//!    operations, and the predefined reductions the runtime has no
//!    primitive for, `resolve/extops.rs`); and, beside it, `frame.rs`: the
//!    `mpi_fn!`/`direct_fn!` macros that define every entry point, and
//!    [`entry`].
//! 5. `cache.rs`: attribute caching, which the attribute calls share with
//!    the calls that duplicate and free communicators and datatypes.
//! 6. The entry points, by family:
//!    - `env.rs`: init, finalize, versions, time, memory, addresses, error
//!      handlers and codes, Fortran handle conversions.
//!    - `p2p.rs`: point-to-point, requests, statuses, persistent sends,
//!      matched probes; the persistent requests' start, which persistent
//!      collectives share.
//!    - `bsend.rs`: buffered sends and their buffers (the process's, and
//!      MPI 4.1's per communicator and per session), flushes.
//!    - `coll.rs`: collectives (blocking, non-blocking, persistent) and
//!      reduction operations.
//!    - `comm.rs`: communicators, groups, names, intercommunicators.
//!    - `attrs.rs`: keyvals and attributes, `MPIR_Dup_fn`.
//!    - `types.rs`: derived datatypes, pack/unpack, `external32`.
//!    - `topo.rs`: process topologies and neighbourhood collectives.
//!    - `removed.rs`: the MPI-1 names MPI-3.0 removed and MPICH still
//!      exports (`MPI_Address`, `MPI_Type_struct`, ...), under their MPI-2
//!      replacements.
//!    - `info.rs`: info objects.
//!    - `part.rs`: partitioned communication (`MPI_Psend_init`, …).
//!    - `win.rs`: one-sided communication (`MPI_Win_*`, `MPI_Put`, …).
//!    - `session.rs`: the MPI-4 sessions model.
//!    - `greq.rs`: generalized requests (`MPI_Grequest_start`, …).
//!    - `mpi41.rs`: the MPI 4.1 additions and MPI 5.0's toint/fromint and
//!      ABI queries that MPICH >= 4.1 exports (the MPI 5.0 ones exported,
//!      not declared).
//!    - `mpix.rs`: the MPIX extensions: the GPU-support queries
//!      (`MPIX_Query_cuda_support`, `MPIX_GPU_query_support`) and the
//!      fault-tolerance calls (`MPIX_Comm_agree`, `MPIX_Comm_shrink`, …).
//!    - `unsupported.rs`: MPI-IO, dynamic processes and the other calls
//!      gmpi exports but does not implement yet: each fails with
//!      `MPI_ERR_UNSUPPORTED_OPERATION` through the error handler, naming
//!      the call.
//!
//! Threading: every level up to `MPI_THREAD_MULTIPLE` (the runtime's waits
//! let go of its lock; see `gmpi::init_thread`). Object tables sit behind
//! one lock that is never held while the runtime runs, so callbacks (user
//! reduction functions, attribute copy functions, error handlers) may call
//! MPI again, and a thread waiting in the runtime blocks no other thread's
//! table look-ups. Under `MPI_THREAD_MULTIPLE` each thread keeps its own
//! error-handler target (`errors.rs`).
//!
//! Unsafe code: this crate is an FFI boundary; DESIGN.md names `capi/src/*`
//! as one of the places `unsafe` lives. Every entry point that takes a
//! pointer is an `unsafe extern "C" fn` whose `# Safety` section says what
//! its caller vouches for (the MPI standard's contract: see `frame.rs`);
//! those that take none are safe. Raw pointers are dereferenced only in
//! `ptr.rs`, each after a null/special-value check; its helpers are safe
//! functions that only the bodies of those unsafe entry points call, with
//! the pointers their callers passed.

// MPI's C names are not snake case, and its signatures are long: the entry
// points keep them exactly.
#![allow(
    non_snake_case,
    non_camel_case_types,
    clippy::too_many_arguments,
    clippy::type_complexity
)]

// The layers, bottom up.
pub mod abi;

mod tables;

mod ptr;

mod errors;

#[macro_use]
mod frame;
pub mod resolve;

mod cache;

// The entry points.
mod attrs;
mod bsend;
mod coll;
mod comm;
mod env;
mod greq;
mod info;
mod mpi41;
mod mpix;
mod p2p;
mod part;
mod removed;
mod session;
mod topo;
mod types;
mod unsupported;
mod win;

pub use frame::entry;

/// A few entry points by Rust path, for Rust programs that link this crate
/// as an rlib and call the C ABI exactly as a C program does
/// (`bench/`'s `gmpi-capi-overhead`, which also uses [`abi`]'s constants and
/// [`resolve::fast_comm`]). Every entry point is also exported under its C
/// name.
pub mod entry_points {
    pub use crate::comm::{PMPI_Comm_rank, PMPI_Comm_size};
    pub use crate::env::{PMPI_Finalize, PMPI_Init};
    pub use crate::p2p::{PMPI_Recv, PMPI_Send};
}
