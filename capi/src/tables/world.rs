//! This process's MPI: its phase, the predefined communicators, its rank,
//! and the errors that name it.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use gmpi::{Communicator, Error, ErrorClass};

/// 0: not initialized, 1: running, 2: finalized.
pub static PHASE: AtomicU8 = AtomicU8::new(0);

/// Whether `MPI_Init` has run.
pub fn initialized() -> bool {
    PHASE.load(Ordering::Acquire) >= 1
}

/// Whether `MPI_Finalize` has run.
pub fn finalized() -> bool {
    PHASE.load(Ordering::Acquire) == 2
}

/// Whether MPI is initialized and not finalized (the state every call but
/// the `noinit` ones needs).
#[inline]
pub fn running() -> bool {
    PHASE.load(Ordering::Acquire) == 1
}

/// `MPI_COMM_WORLD` and `MPI_COMM_SELF`, set at init (lock-free look-up).
pub static WORLD: OnceLock<Communicator> = OnceLock::new();
pub static SELF: OnceLock<Communicator> = OnceLock::new();

/// This process's rank in `MPI_COMM_WORLD`, or -1 before init.
pub fn world_rank() -> i32 {
    WORLD.get().map(|w| w.rank()).unwrap_or(-1)
}

/// An error of `class` in `call`, naming this rank.
pub fn err(class: ErrorClass, call: &str, what: impl std::fmt::Display) -> Error {
    Error::new(class, call, world_rank(), what)
}
