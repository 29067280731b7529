//! gmpi: a CUDA-aware MPI runtime in Rust — the public API.
//!
//! ```no_run
//! fn main() -> Result<(), gmpi::Error> {
//!     let universe = gmpi::init()?;          // Drop finalizes
//!     let world = universe.world();
//!     let (rank, size) = (world.rank(), world.size());
//!     let mut buf = [0u64; 4];
//!     if rank == 0 {
//!         for dest in 1..size {
//!             world.send(&[7u64; 4][..], dest, 0)?;
//!         }
//!     } else {
//!         let status = world.recv(&mut buf[..], 0, 0)?;
//!         assert_eq!(status.count::<u64>(), 4);
//!     }
//!     world.barrier()?;
//!     // Collectives: every rank gets the same bits.
//!     let mut sum = [0.0f64; 2];
//!     world.allreduce(&[rank as f64, 1.0][..], &mut sum[..], gmpi::Op::Sum)?;
//!     // Communicators: one per parity of the rank.
//!     let half = world.split(rank % 2, rank)?.expect("a color was given");
//!     half.bcast(&mut buf[..], 0)?;
//!     Ok(())
//! }
//! ```
//!
//! Run it with `gmpirun -np 4 ./app`; run alone, it is a job of one rank.
//!
//! File map:
//! - `lib.rs`: [`init`], [`Universe`], constants, [`abort`], [`wtime`].
//! - `comm.rs`: [`Communicator`]: point-to-point calls; dup, split, create,
//!   compare, free; context ids.
//! - `intercomm.rs`: intercommunicators (two groups; ranks name the other
//!   one): create, create from groups, merge, and dup/split/create on them.
//! - `coll/`: the collectives: one file per collective (`barrier.rs`,
//!   `bcast.rs`, `reduce.rs`, `allreduce.rs`, `gather.rs`, `scatter.rs`,
//!   `allgather.rs`, `alltoall.rs`, `reduce_scatter.rs`, `scan.rs`),
//!   `select.rs` (the algorithm choice: one pure function), `run.rs`
//!   (running a call: tags, choice, blocking or not), `check.rs` (argument
//!   checks), `shm/` (the shared-memory area: its wire format and the
//!   paths through it), `algo.rs` (algorithms as schedule builders),
//!   `sched.rs` (schedules: the steps a collective runs, blocking or not),
//!   `inter.rs` (the collectives of intercommunicators); `mod.rs` has the
//!   map.
//! - `group.rs`: [`Group`].
//! - `request.rs`: [`Request`] (non-blocking operations), [`Status`], [`wait_all`]
//!   (which waits for its requests together, as the C ABI's `MPI_Waitall` does,
//!   through [`wait_set`]).
//! - `datatype.rs`: [`Equivalence`] (Rust types ↔ MPI datatypes), the pair
//!   types of `MINLOC`/`MAXLOC`.
//! - `typemap.rs`: [`UserDatatype`] (derived datatypes: flattened type maps,
//!   pack/unpack).
//! - `op.rs`: [`Op`] (reduction operations) and the kernels that apply them.
//! - `win/`: [`Window`]: one-sided communication (its operations and
//!   epochs; `win/am.rs`: windows between nodes by active messages and the
//!   progress thread that serves them); `window.rs`: the typed API over it
//!   ([`Win`], [`Epoch`], `Communicator::win_create`/`win_allocate`).
//! - `engine.rs`: the per-process engine: PMI wire-up, transports, the
//!   spin → yield → block wait loop.
//! - `progress/`: the progress driver, the I/O half of point-to-point: it
//!   owns the btls, feeds the sans-IO pml (`gmpi-pml`) its inputs and runs
//!   the actions the pml asks for (sends, gets, registrations, device
//!   copies), the only code that calls a btl.
//! - `watch.rs`: the local-peer watch that ends the job when a rank of this
//!   node is gone without finalizing, under launchers that would not.
//! - `buffer.rs`: user buffers as raw memory: the [`Buffer`] traits, views
//!   `(memory, count, datatype)`, [`TypedBuf`] (with `datatype.rs` and the
//!   `Btl::get` calls in `progress/execute.rs`, the only `unsafe` code in
//!   this crate).
//! - `cuda.rs` (feature `cuda`): `cudarc`'s `CudaSlice`, `CudaView` and
//!   `CudaViewMut` as buffers, ordered after the work queued on their
//!   stream; `cudarc` itself is re-exported as [`cudarc`].
//! - `config.rs`: `gmpi.toml` and `GMPI_*` settings.
//! - `error.rs`: [`Error`] and [`ErrorClass`] (the one place that maps lower
//!   errors to MPI classes).
//!
//! Contract: every call returns `Result<_, Error>`; a bad rank, tag or buffer
//! is an error naming the call, the argument and the rank, never a panic or a
//! hang. Threads: [`init`] gives `MPI_THREAD_FUNNELED` (call gmpi from the
//! thread that called it); [`init_thread`]`(Threading::Multiple)` lets any
//! thread call at any time (see `engine.rs` for how waits share the engine).

mod buffer;
mod coll;
mod comm;
pub mod config;
#[cfg(feature = "cuda")]
mod cuda;
mod datatype;
mod engine;
mod error;
pub mod gpu;
mod group;
mod ib;
mod intercomm;
mod op;
mod progress;
mod request;
mod typemap;
mod watch;
mod win;
mod window;

use std::marker::PhantomData;
use std::sync::OnceLock;
use std::time::Instant;

pub use buffer::View;
pub use buffer::{Buffer, BufferMut, TypedBuf, TypedBufMut};
pub use coll::reduce_local;
pub use comm::{Attr, Communicator, Message};
/// The `cudarc` gmpi is built with (feature `cuda`): allocate device buffers
/// with it (`gmpi::cudarc::driver::CudaContext`) so that their types are the
/// ones gmpi's [`Buffer`] impls name.
#[cfg(feature = "cuda")]
pub use cudarc;
pub use datatype::{
    Datatype, DoubleInt, Equivalence, FloatInt, LongInt, Primitive, ShortInt, TwoInt,
};
pub use error::{Error, ErrorClass, Result};
pub use group::{Comparison, Group, UNDEFINED};
/// The `half` crate whose `f16` is [`Primitive::F16`] (`MPIX_C_FLOAT16`)
/// and whose `bf16` is [`Primitive::BF16`] (`MPIX_BFLOAT16`):
/// `gmpi::half::f16` and `bf16` buffers send, receive and reduce (sum,
/// product, min, max) like any float.
pub use half;
pub use op::{Op, RawMarker, TypedMarker, UserFunction, UserOp};
pub use request::{wait_all, wait_any_ready, wait_raw, wait_set, Request, Status};
pub use typemap::{AsDatatype, Order, UserDatatype};
#[doc(hidden)]
pub use win::{is_host_memory, AccHow};
pub use win::{
    LockType, WinFlavor, Window, MODE_NOCHECK, MODE_NOPRECEDE, MODE_NOPUT, MODE_NOSTORE,
    MODE_NOSUCCEED,
};
pub use window::{Epoch, Win};

/// Receive from any source (MPICH's `MPI_ANY_SOURCE`).
pub const ANY_SOURCE: i32 = -2;
/// Receive any tag (`MPI_ANY_TAG`).
pub const ANY_TAG: i32 = -1;
/// The null process: sends to it and receives from it complete at once.
pub const PROC_NULL: i32 = -1;
/// `MPI_ROOT`: the root's own `root` argument in a rooted collective on an
/// intercommunicator (the other ranks of its group pass [`PROC_NULL`]).
pub const ROOT: i32 = -3;
/// Largest valid tag (`MPI_TAG_UB`).
pub const TAG_UB: i32 = i32::MAX;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Seconds since an arbitrary point in this process (`MPI_Wtime`).
pub fn wtime() -> f64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Resolution of [`wtime`] in seconds (`MPI_Wtick`).
pub fn wtick() -> f64 {
    1e-9
}

/// The MPI environment. Dropping it finalizes gmpi (`MPI_Finalize`).
#[derive(Debug)]
pub struct Universe {
    world: Communicator,
    finalized: bool,
    // Finalize must happen on the thread that initialized (FUNNELED).
    _not_send: PhantomData<*const ()>,
}

fn init_logging(cfg: &config::Config) {
    use tracing_subscriber::EnvFilter;
    let filter = cfg.log.clone().unwrap_or_else(|| "warn".into());
    let rank = std::env::var("PMI_RANK").unwrap_or_else(|_| "0".into());
    let prefix = format!("[gmpi rank {rank}] ");
    let writer = move || PrefixWriter {
        prefix: prefix.clone(),
        out: std::io::stderr(),
    };
    let env_filter = EnvFilter::try_new(&filter).unwrap_or_else(|e| {
        eprintln!("gmpi: ignoring the log filter {filter:?} (GMPI_LOG or gmpi.toml `log`): {e}");
        EnvFilter::new("warn")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(writer)
        .with_ansi(false)
        .without_time()
        .try_init();
}

/// Writes each log event as one line with the rank in front.
struct PrefixWriter {
    prefix: String,
    out: std::io::Stderr,
}

impl std::io::Write for PrefixWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut line = Vec::with_capacity(self.prefix.len() + buf.len());
        line.extend_from_slice(self.prefix.as_bytes());
        line.extend_from_slice(buf);
        self.out.lock().write_all(&line)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Initialize gmpi (`MPI_Init`): wire up with the other ranks through PMI
/// (or start as a singleton without a launcher) and open the transports.
pub fn init() -> Result<Universe> {
    const CALL: &str = "MPI_Init";
    let mut g = engine::lock();
    match &*g {
        engine::State::Running(_) => {
            return Err(Error::new(
                ErrorClass::Other,
                CALL,
                -1,
                "gmpi is already initialized",
            ))
        }
        engine::State::Finalized => {
            return Err(Error::new(
                ErrorClass::Other,
                CALL,
                -1,
                "gmpi cannot be initialized again after finalize",
            ))
        }
        engine::State::Uninit => {}
    }
    let _ = wtime();
    // Before PMI answers, the launcher's variable is the best name for this rank.
    let env_rank = std::env::var("PMI_RANK")
        .ok()
        .and_then(|r| r.parse::<i32>().ok())
        .unwrap_or(-1);
    let cfg = config::Config::load().map_err(|e| {
        Error::new(
            ErrorClass::Arg,
            CALL,
            env_rank,
            format!("configuration: {e}"),
        )
    })?;
    init_logging(&cfg);
    let e = engine::Engine::start(cfg)?;
    tracing::debug!(target: "btl", "single copy: {}", e.cma_status);
    tracing::debug!(target: "gmpi", "initialized: rank {} of {}, local {} of {} on {}", e.rank, e.size, e.local_rank, e.local_size, e.hostname);
    let world = Communicator::world(&e);
    *g = engine::State::Running(Box::new(e));
    drop(g);
    // The non-blocking collectives' area of `MPI_COMM_WORLD`, here, where
    // every rank sets it up before any of them can start one (`coll/shm/nb.rs`).
    engine::with(CALL, |e| world.setup_nb_area(e, CALL))?;
    Ok(Universe {
        world,
        finalized: false,
        _not_send: PhantomData,
    })
}

/// How much threading a process asks of gmpi (`MPI_THREAD_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Threading {
    /// One thread (`MPI_THREAD_SINGLE`).
    Single,
    /// Only the thread that called [`init_thread`] calls gmpi
    /// (`MPI_THREAD_FUNNELED`).
    Funneled,
    /// Any thread, one at a time (`MPI_THREAD_SERIALIZED`).
    Serialized,
    /// Any thread at any time (`MPI_THREAD_MULTIPLE`): blocking calls in
    /// several threads progress each other, and no thread holds the engine
    /// while it waits.
    Multiple,
}

/// [`init`] asking for a thread level; gmpi provides every level, so the
/// level provided is the one asked for. With [`Threading::Multiple`],
/// [`Communicator`]s and [`Window`]s may be used from any thread (they are
/// `Send + Sync`); [`Universe`] stays on the thread that made it, which
/// finalizes.
pub fn init_thread(required: Threading) -> Result<(Universe, Threading)> {
    let u = init()?;
    if required == Threading::Multiple {
        engine::set_multithreaded();
    }
    Ok((u, required))
}

/// The C ABI's promise that from now on calls into gmpi never overlap
/// (`MPI_Init`, or `MPI_Init_thread` below `MPI_THREAD_MULTIPLE`): the
/// engine then takes no mutex per call until gmpi starts a thread of its
/// own or [`init_thread`] asks for [`Threading::Multiple`]. False where the
/// mutex stays (such a thread already runs).
///
/// # Safety
/// Until then, each call into gmpi (on any thread) happens before the next
/// one starts, and none is in progress now: the contract of the MPI thread
/// levels below `MPI_THREAD_MULTIPLE`. The Rust API's own calls never make
/// this promise (its communicators are `Send + Sync`).
#[doc(hidden)]
pub unsafe fn serial_calls() -> bool {
    // SAFETY: our caller's promise is `set_serial_calls`'s.
    unsafe { engine::set_serial_calls() }
}

/// Wake the threads waiting in gmpi: something they may wait for completed
/// outside the transports (the C ABI's `MPI_Grequest_complete`).
#[doc(hidden)]
pub fn wake_waiters() {
    engine::wake_waiters();
}

/// Whether gmpi is initialized and not yet finalized.
pub fn is_initialized() -> bool {
    matches!(&*engine::lock(), engine::State::Running(_))
}

impl Universe {
    /// The communicator of every rank of the job (`MPI_COMM_WORLD`).
    pub fn world(&self) -> Communicator {
        self.world.clone()
    }

    /// Ranks on this node and this rank's index among them.
    pub fn local_rank_and_size(&self) -> (i32, i32) {
        engine::with("gmpi_local_rank", |e| {
            Ok((e.local_rank as i32, e.local_size as i32))
        })
        .unwrap_or((0, 1))
    }

    /// Name of this node (`MPI_Get_processor_name`).
    pub fn processor_name(&self) -> String {
        engine::with("MPI_Get_processor_name", |e| Ok(e.hostname.clone()))
            .unwrap_or_else(|_| engine::hostname())
    }

    /// Finalize explicitly and see errors (dropping the universe does the same
    /// and reports errors on stderr).
    pub fn finalize(mut self) -> Result<()> {
        self.finalize_inner()
    }

    fn finalize_inner(&mut self) -> Result<()> {
        const CALL: &str = "MPI_Finalize";
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        // Windows between nodes left unfreed: their progress thread stops
        // (this thread's own waits serve their requests from here on).
        win::stop_progress_thread();
        let mut e = engine::locked(CALL)?;
        // From here on, peers may finish and exit before this rank does.
        e.finalizing = true;
        // Finish the sends (detached ones too), then make sure every peer is
        // done with us. Receives the program posted and never completed are
        // left behind, as MPICH leaves them (OpenCoarrays' sync images
        // leaves one per image): a matched one still in progress keeps
        // progressing in the barrier, which its sender only joins once its
        // send has completed.
        let done = e
            .wait_until(CALL, |e| {
                Ok(e.driver.pml.sends_in_flight() == 0
                    && !e.driver.has_pending()
                    && e.scheds.is_empty()
                    && e.areas.is_empty())
            })
            .and_then(|()| self.world.barrier_in(&mut e, CALL));
        if let Err(err) = done {
            // Peers may be waiting for us in the final barrier, and the local
            // watch of those that are (see watch.rs) takes our exit for a clean
            // one: end the job where the launcher does not end it for a rank
            // that exits non-zero (srun without --kill-on-bad-exit; gmpirun
            // and Hydra do, and name the rank that failed first).
            if e.launcher_watches_exits {
                return Err(err);
            }
            if let Some(p) = e.pmi.as_mut() {
                let msg = format!("{err}; ending the job");
                eprintln!("gmpi: {msg}");
                engine::ask_launcher_to_abort(p, 1, &msg);
            }
            return Err(err);
        }
        let rank = e.rank as i32;
        if let Some(p) = e.pmi.as_mut() {
            p.finalize().map_err(|err| {
                Error::new(
                    ErrorClass::Other,
                    CALL,
                    rank,
                    format!("PMI finalize: {err}"),
                )
            })?;
        }
        // The process-wide GPU layer outlives the engine: free its pinned
        // buffers and IPC mappings now, while the application's CUDA context
        // still exists.
        e.gpu.release();
        e.set_finalized();
        Ok(())
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A panicking rank must not wait for its peers (they may be
            // waiting for it): leave without finalizing, so the process exits
            // non-zero and the launcher ends the job.
            self.finalized = true;
            engine::abort_after_panic();
            return;
        }
        if let Err(e) = self.finalize_inner() {
            eprintln!("gmpi: {e}");
        }
    }
}

/// Name of this node (`MPI_Get_processor_name`), whether or not gmpi is
/// initialized.
pub fn processor_name() -> String {
    engine::with("MPI_Get_processor_name", |e| Ok(e.hostname.clone()))
        .unwrap_or_else(|_| engine::hostname())
}

/// End the whole job with exit status `code` (`MPI_Abort`). The launcher kills
/// every rank and reports `msg`.
pub fn abort(code: i32, msg: &str) -> ! {
    // The message first: a launcher may kill this process as soon as it
    // reads the abort (Hydra does), and then nothing after it is printed.
    eprintln!("gmpi: {msg}");
    let mut g = engine::lock();
    if let engine::State::Running(e) = &mut *g {
        if let Some(p) = e.pmi.as_mut() {
            engine::ask_launcher_to_abort(p, code, msg);
        }
    }
    std::process::exit(if code == 0 { 1 } else { code & 0xff })
}

#[cfg(test)]
mod tests {
    /// With `Threading::Multiple`, the handles threads share must be
    /// shareable: this fails to compile if one stops being so.
    #[test]
    fn shared_handles_are_send_and_sync() {
        fn shareable<T: Send + Sync>() {}
        shareable::<crate::Communicator>();
        shareable::<crate::Group>();
        shareable::<crate::Window>();
        shareable::<crate::Win<'static, f64>>();
        shareable::<crate::UserDatatype>();
    }
}
