//! Collective operations on any [`Communicator`](crate::Communicator).
//!
//! Every collective is built as a schedule of point-to-point steps
//! ([`sched`]) by one of the algorithms of [`algo`], chosen by message size
//! and communicator size ([`select`]: one pure function, thresholds in
//! `gmpi.toml`; `GMPI_LOG=coll=debug` names each choice). A blocking call
//! drives its schedule to the end; the `i`-forms park it in the engine,
//! where every progress pass advances it. Single-node communicators run
//! barrier, bcast and small reductions, gathers and alltoalls through a
//! shared-memory area instead ([`shm`]), whatever memory each rank passes
//! (device bytes are staged through host memory); allreduces of at most 64
//! bytes take a shorter road to the same exchange
//! (`Communicator::allreduce_tiny`), since their time is mostly the call's
//! own overhead. The choice never depends on a rank's own memory kind, which
//! MPI lets differ between ranks.
//!
//! Collective traffic uses the communicator's collective context with the
//! collective's sequence number as tag, so it never matches user messages,
//! and concurrent non-blocking collectives on one communicator never match
//! each other's messages.
//!
//! Buffers: like MPI's `(buf, count, datatype)`, a buffer is a slice of
//! [`crate::Equivalence`] values or a [`crate::TypedBuf`]. Counts of the `v`
//! forms and displacements are in elements of the buffer's datatype
//! (`alltoallw`'s displacements are in bytes). Each rank's block of a
//! gathered or scattered buffer is `len / size` elements.
//!
//! File map (each collective's file holds its blocking, `i`-, `v`- and
//! in-place forms, the schedule it builds and its dispatch on the choice):
//! - `barrier.rs`, `bcast.rs`, `reduce.rs` (and `reduce_local`),
//!   `allreduce.rs`, `gather.rs`, `scatter.rs`, `allgather.rs`,
//!   `alltoall.rs`, `reduce_scatter.rs`, `scan.rs`: the collectives of
//!   intracommunicators.
//! - `select.rs`: the algorithm selector, a pure function of plain inputs,
//!   with its table of tests.
//! - `run.rs`: how a call runs: tags, asking the selector (and the area),
//!   blocking and non-blocking drivers, staged outputs.
//! - `check.rs`: argument checks (roots, sizes, blocks, reductions) and
//!   `coll_check`'s agreement across ranks.
//! - `shm/`: the shared-memory area: `wire.rs` (what each rank writes in
//!   its slot), `mod.rs` (setting the area up, and the barrier, bcast,
//!   reduce, gather and alltoall exchanges through it; the tiny allreduce).
//! - `algo.rs`: the algorithms as schedule builders.
//! - `sched.rs`: schedules: the steps a collective runs, blocking or not.
//! - `inter.rs`: the collectives of intercommunicators.

pub(crate) mod algo;
mod allgather;
mod allreduce;
mod alltoall;
mod barrier;
mod bcast;
mod check;
mod gather;
pub(crate) mod inter;
mod reduce;
mod reduce_scatter;
mod run;
mod scan;
mod scatter;
pub(crate) mod sched;
pub(crate) mod select;
pub(crate) mod shm;

pub use reduce::reduce_local;
