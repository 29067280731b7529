//! Layer 1 of the C ABI: the tables of the objects C programs create, and
//! the state of this process's MPI.
//!
//! - `direct.rs`: the requests of the hot paths, named by their pml id
//!   with no table slot.
//! - `slab.rs`: [`slab::Table`], a slab of objects addressed by slot.
//! - `objects.rs`: what the C ABI keeps per object (communicators with their
//!   names, error handlers, attributes and topologies; datatypes with their
//!   envelopes; operations, error handlers, keyvals, info objects).
//! - `requests.rs`: what a request slot holds (an operation in flight, a
//!   persistent request, a matched message), and the operations that
//!   complete in the background after their request was freed.
//! - `state.rs`: every table in one [`State`] behind one lock, taken only
//!   for look-ups and updates, never while the runtime runs; and the
//!   registration of new objects (a slot, then its handle).
//! - `world.rs`: the phase of MPI (initialized, finalized), the predefined
//!   communicators, this process's rank and the errors that name it.
//!
//! This layer imports only [`crate::abi`] (and the runtime): translating a
//! handle a C program passed, with its checks, is [`crate::resolve`]'s work.

pub mod direct;
pub mod objects;
pub mod requests;
pub mod slab;
pub mod state;
pub mod world;

pub use objects::*;
pub use requests::*;
pub use state::*;
pub use world::*;
