//! Layer 4 of the C ABI: resolution, from the handles a C program passes to
//! the runtime's objects, with the checks and errors each handle gets.
//!
//! - `comm.rs`: communicators (recording the error-handler target of the
//!   call), groups, requests, and the lock-free look-up of
//!   `MPI_COMM_WORLD`/`MPI_COMM_SELF` for the hot paths.
//! - `datatype.rs`: the predefined datatypes (what each MPICH handle is in
//!   the runtime) and user datatypes, with the hot path's one-load look-up.
//! - `op.rs`: reduction operations, predefined and user (wrapped to see the
//!   datatype's own layout).
//! - `extops.rs`: the predefined reductions on the types the runtime moves
//!   as opaque bytes (complex, `long double`, the Fortran pairs).
//!
//! Everything here reads the tables (`tables/`) and records, for each
//! communicator it resolves, whose error handler the call's errors go to
//! (`errors.rs`); nothing here is an entry point. A second ABI (the MPI-5
//! standard ABI) would add a sibling of this module, over its own numbers.

pub mod comm;
pub mod datatype;
pub mod extops;
pub mod op;

pub use comm::*;
pub use datatype::*;
pub use op::*;
