//! Layer 0 of the C ABI: the MPICH ABI itself, as numbers and C types.
//!
//! Everything a C program built against MPICH's `mpi.h` sees as a value or a
//! layout lives here and nowhere else in the crate: the handle types and
//! `MPI_Status` ([`types`], [`status`]), the constants and every predefined
//! handle value ([`consts`]), the bit layout of handles and the handles gmpi
//! makes for user objects ([`handle`]), and the numbers of the error classes
//! ([`errclass`]). The MPI-5 standard ABI (`libmpi_abi.so.1`) has other
//! numbers for the same things: it would add its own module beside this one.
//!
//! This layer imports nothing from the rest of the crate (only `std` and the
//! runtime's plain types it maps numbers to), so every other module may
//! import it.

pub mod consts;
pub mod errclass;
pub mod handle;
pub mod status;
pub mod types;

pub use consts::*;
pub use errclass::*;
pub use handle::*;
pub use status::*;
pub use types::*;
