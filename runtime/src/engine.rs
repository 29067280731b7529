//! The engine: one per process. It owns the progress driver (pml + btls), the
//! PMI client and the process-wide facts (rank, size, node layout), and runs
//! the wait loop that spins, then yields, then blocks.
//!
//! Wire-up (`Engine::start`), over PMI: every rank puts its node card (the
//! hostname, or `GMPI_NODE_NAME`) and, without `GMPI_JOB_SECRET`, rank 0 puts
//! a fresh job secret; fence; each rank reads the node cards. Peers on this
//! node are reached through shm, the others through tcp (`GMPI_BTL` may
//! remove either: without shm every peer goes through tcp). A rank with tcp
//! peers opens its listening sockets and puts its tcp card before the two
//! fences of the shm bootstrap (two plain fences when shm is off, so every
//! rank fences the same number of times), then reads its tcp peers' cards.
//! tcp connections themselves are made on first use.
//!
//! Threads (`MPI_THREAD_MULTIPLE`, see [`set_multithreaded`]): the engine
//! lives behind one global mutex that every call takes ([`with`] hands it
//! out as a [`Locked`]), but no thread keeps it while it waits. A wait
//! ([`Locked::wait_until`]) progresses under the lock and lets go of it
//! whenever another thread asks for it, and yields outside it. When idle
//! long enough to sleep, one waiting thread (the *sleeper*) sleeps in the
//! transports as a lone thread does, and a thread that then asks for the
//! lock rings the sleeper's waker first ([`lock`]), so it gets the lock at
//! once; the other waiting threads (*followers*) sleep on a condition
//! variable, woken whenever any thread's progress pass moves something
//! (their operation may be what moved) or the sleeper's wait ends (one of
//! them takes its place). A single-threaded process pays one relaxed load
//! per lock and per productive progress pass for this. A C program below
//! `MPI_THREAD_MULTIPLE` does not even take the mutex: its calls never
//! overlap, so the lock is in serial mode until gmpi starts a thread of its
//! own (`engine/lock.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use gmpi_btl::loopback::Loopback;
use gmpi_btl::{Btl, Wake};
use gmpi_btl_shm::{ShmBtl, ShmConfig};
use gmpi_btl_tcp::{Secret, TcpBtl, TcpConfig};
use gmpi_gpu::Gpu;
use gmpi_pmi::PmiClient;
use gmpi_pml::{Pml, PmlConfig};

use crate::buffer::HostMem;
use crate::config::Config;
use crate::error::{Error, ErrorClass, Result};
use crate::progress::Driver;

mod lock;
use lock::{EngineLock, Guard};

/// Longest sleep when more than one btl can block and the driver cannot
/// sleep in one while the others watch (see [`Backoff::new`]).
const MULTI_BLOCK: Duration = Duration::from_millis(1);

/// Longest sleep in the transports while a non-blocking collective waits
/// for the other ranks' stores to the shared-memory area (no doorbell rings
/// for them): as long as a blocking collective's nap in the area.
const AREA_NAP: Duration = Duration::from_micros(50);

/// How an idle wait backs off.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    pub spin: u32,
    pub yields: u32,
    pub block: Duration,
    /// Until when the CPU is seen crowded ([`Backoff::yielded`]): waits
    /// then go from spinning straight to blocking.
    pub crowded_until: Option<Instant>,
    /// Whether slow yields mean load from outside the job: not when the
    /// node's own ranks outnumber its CPUs (their yields hand the CPU to a
    /// peer rank, which is what they are for).
    pub adaptive: bool,
}

/// A `sched_yield` that returns later than this let another task run
/// meanwhile: the CPU is shared with someone (another job's processes,
/// or this job's own ranks when oversubscribed, where the backoff does not
/// adapt). A bare one is well under a microsecond.
const CROWDED_YIELD: Duration = Duration::from_micros(20);

/// How long one slow yield keeps a rank from yielding.
const CROWDED_FOR: Duration = Duration::from_millis(20);

impl Backoff {
    /// Oversubscribed ranks (more local ranks than `node_cpus`, the CPUs the
    /// node's ranks may run on together: see [`node_cpu_count`]) give the CPU
    /// away almost at once; others spin a while first for latency.
    ///
    /// `blockers`: how many btls the rank sleeps in one after the other
    /// (shm: futex, tcp: epoll). Normally 1: the driver sleeps in shm while
    /// btl-tcp's watcher thread wakes it on socket readiness
    /// ([`Driver::wakes_across`]). Where it cannot, it sleeps in each in
    /// turn, so a message on one waits while the rank sleeps in the other:
    /// the sleep is then cut to [`MULTI_BLOCK`] (a rank idle for long wakes
    /// about 1000 times a second instead of 10).
    pub fn new(cfg: &Config, local_size: usize, node_cpus: usize, blockers: usize) -> Self {
        let over = local_size > node_cpus;
        let mut block = Duration::from_millis(cfg.block_ms);
        if blockers > 1 {
            block = block.min(MULTI_BLOCK);
        }
        Self {
            spin: cfg.spin.unwrap_or(if over { 5 } else { 2000 }),
            yields: cfg.yields.unwrap_or(if over { 4 } else { 100 }),
            block,
            crowded_until: None,
            adaptive: !over,
        }
    }

    /// Whether a wait may yield now: not while the CPU is crowded.
    #[inline]
    pub fn may_yield(&mut self) -> bool {
        match self.crowded_until {
            Some(t) if Instant::now() < t => false,
            Some(_) => {
                self.crowded_until = None;
                true
            }
            None => true,
        }
    }

    /// Adapt to the load a yield that began at `start` saw. Under load, a
    /// yield hands the CPU to every other runnable task in turn, and the
    /// rank gets it back only after their slices, long after the message it
    /// waits for came (a 2-rank ping-pong measured 46–93 µs per message
    /// next to a `perf bench sched messaging` load, 1.7–6 µs without the
    /// yields), while blocking is woken by the sender's doorbell at once. So
    /// once a yield comes back late, waits skip yielding for
    /// [`CROWDED_FOR`], then try again.
    #[inline]
    pub fn yielded(&mut self, start: Instant) {
        if !self.adaptive {
            return;
        }
        let now = Instant::now();
        if now.duration_since(start) >= CROWDED_YIELD {
            self.crowded_until = Some(now + CROWDED_FOR);
        }
    }
}

pub(crate) struct Engine {
    pub rank: u32,
    pub size: u32,
    pub local_rank: u32,
    pub local_size: u32,
    pub hostname: String,
    pub driver: Driver<HostMem>,
    pub pmi: Option<PmiClient>,
    pub gpu: std::sync::Arc<Gpu>,
    pub backoff: Backoff,
    pub cma_status: String,
    /// Whether this rank reads its shared-memory peers by CMA (the shm
    /// transport's probe passed and `cma` is on).
    pub cma: bool,
    /// Node index of each world rank (ranks with equal indices share a node).
    pub node_of: Vec<u32>,
    /// Prefix of this job's shared-memory files on this node.
    pub shm_prefix: Option<String>,
    /// Whether the launcher itself ends the job when a rank exits early:
    /// `gmpirun` does (it sets `GMPI_JOBID`); Hydra does for a rank killed or
    /// exiting non-zero, Slurm only with `--kill-on-bad-exit`. Where it is
    /// not known to, a panicking rank asks for the job's end through PMI, and
    /// the ranks of a node watch each other (`watch.rs`).
    pub launcher_watches_exits: bool,
    /// The ranks of this node, watched while waits block when the launcher
    /// does not watch exits (empty otherwise).
    pub watch: crate::watch::PeerWatch,
    /// `MPI_Finalize` has begun: peers may now exit before this rank.
    pub finalizing: bool,
    /// The next free context id: every new communicator takes two (its
    /// point-to-point and collective contexts), agreed as the maximum over
    /// the parent's ranks, so an id is never used twice in a job.
    pub next_ctx: u32,
    /// A thread of this process is in a context-id agreement round
    /// (`MPI_THREAD_MULTIPLE`: see [`Engine::ctx_round`]).
    pub ctx_owned: bool,
    /// Non-blocking collectives (and derived-datatype receives) in flight,
    /// advanced by every progress pass, by id. Ids are handed out in
    /// sequence and few are in flight: a B-tree keeps them without hashing
    /// each one (SipHash stood out in a small non-blocking collective's
    /// profile).
    pub scheds: std::collections::BTreeMap<u64, crate::coll::sched::Sched>,
    pub next_sched: u64,
    /// Non-blocking collectives on a communicator's area of their own
    /// (`coll/shm/nb.rs`): one exchange each, looked at by every progress
    /// pass; ids from `next_sched`.
    pub areas: Vec<AreaOp>,
    /// The completion flags of generalized requests (`Request::user`), by
    /// id (ids from `next_sched`).
    pub users: std::collections::HashMap<u64, std::sync::Arc<std::sync::atomic::AtomicBool>>,
    pub cfg: Config,
    /// The target side of one-sided windows between nodes (`win/am.rs`),
    /// served by every progress pass.
    pub rma: crate::win::Agent,
    /// What the collectives' algorithm choice reads of `cfg`, derived once.
    pub coll: crate::coll::select::Settings,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("local_rank", &self.local_rank)
            .field("local_size", &self.local_size)
            .finish_non_exhaustive()
    }
}

pub(crate) enum State {
    Uninit,
    Running(Box<Engine>),
    Finalized,
}

static STATE: EngineLock<State> = EngineLock::new(State::Uninit);

/// The process's gpu layer, once `init` made it (host-only before): read
/// without the engine lock by code that classifies or stages buffers.
static GPU: std::sync::OnceLock<std::sync::Arc<Gpu>> = std::sync::OnceLock::new();

/// The process's gpu layer (host-only before `MPI_Init`).
#[inline]
pub(crate) fn gpu() -> &'static Gpu {
    static HOST: std::sync::OnceLock<Gpu> = std::sync::OnceLock::new();
    match GPU.get() {
        Some(g) => g,
        None => HOST.get_or_init(|| Gpu::host_only("before MPI_Init")),
    }
}

/// The process's gpu layer if `init` made it (it outlives finalize).
pub(crate) fn gpu_made() -> Option<&'static Gpu> {
    GPU.get().map(|g| &**g)
}

// ---- threads ----

/// The process asked for `MPI_THREAD_MULTIPLE`.
static MULTI: AtomicBool = AtomicBool::new(false);
/// Threads waiting in [`lock`] for the engine while another holds it.
static CONTENDERS: AtomicUsize = AtomicUsize::new(0);
/// The holder of the lock sleeps in the transports (rung by [`lock`]).
static SLEEPING: AtomicBool = AtomicBool::new(false);
/// A waiting thread holds the sleeper's role (see the module header).
static SLEEPER: AtomicBool = AtomicBool::new(false);
/// Interrupts the sleeper's sleep in the transports (set by `start`).
static WAKE: OnceLock<Arc<dyn Wake>> = OnceLock::new();
/// Followers: how many sleep on [`FOLLOW`], and the count of wake-ups
/// (read under the engine lock, bumped under it, compared under the
/// condition variable's mutex, so none is lost).
static FOLLOWING: AtomicUsize = AtomicUsize::new(0);
static EPOCH: AtomicU64 = AtomicU64::new(0);
static FOLLOW: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());

/// From now on any thread may call the engine at any time
/// (`MPI_THREAD_MULTIPLE`): waits let go of the lock (see the module
/// header), and a blocking receive no longer takes the pml's single direct
/// slot.
pub fn set_multithreaded() {
    MULTI.store(true, Ordering::SeqCst);
    STATE.leave_serial();
}

/// From now on the program's calls into gmpi never overlap, so the engine's
/// lock needs no mutex (its serial mode, see `engine/lock.rs`); false where
/// it keeps the mutex (threads of gmpi's own, or `MPI_THREAD_MULTIPLE`,
/// came first). The C ABI's `MPI_Init` and `MPI_Init_thread` below
/// `MPI_THREAD_MULTIPLE` call it; a later [`set_multithreaded`] (the
/// one-sided progress thread starting) ends it.
///
/// # Safety
/// Until [`set_multithreaded`], each call into gmpi (any thread's) happens
/// before the next one starts, and no call is in progress now: the
/// contract of `MPI_THREAD_SINGLE`, `_FUNNELED` and `_SERIALIZED`.
pub unsafe fn set_serial_calls() -> bool {
    // SAFETY: our caller's promise is `enter_serial`'s.
    unsafe { STATE.enter_serial(multithreaded()) }
}

/// Whether the engine's lock is in serial mode (no mutex per call).
pub(crate) fn serial_calls() -> bool {
    STATE.serial()
}

/// Whether [`set_multithreaded`] was called.
#[inline]
pub(crate) fn multithreaded() -> bool {
    MULTI.load(Ordering::Relaxed)
}

/// The sleeper's role, held by a waiting thread while `.0`: handed on
/// (a follower takes it) when dropped.
struct SleeperRole(bool);

impl Drop for SleeperRole {
    fn drop(&mut self) {
        if self.0 {
            SLEEPER.store(false, Ordering::SeqCst);
            wake_followers();
        }
    }
}

/// Something completed outside the transports (a generalized request
/// `MPI_Grequest_complete` finished from another thread): wake the threads
/// that wait, which would otherwise notice it only at their timeout.
pub fn wake_waiters() {
    if !multithreaded() {
        return;
    }
    if let Some(w) = WAKE.get() {
        w.wake();
    }
    wake_followers();
}

/// Wake the followers: something moved, or the sleeper's role is free.
fn wake_followers() {
    EPOCH.fetch_add(1, Ordering::SeqCst);
    // Taking the mutex orders the bump before any follower's check.
    drop(FOLLOW.0.lock().unwrap_or_else(|p| p.into_inner()));
    FOLLOW.1.notify_all();
}

#[inline]
pub(crate) fn lock() -> Guard<State> {
    if !multithreaded() {
        return STATE.lock();
    }
    match STATE.try_lock() {
        Some(g) => g,
        None => {
            // Announce ourselves, then ring the holder if it sleeps in the
            // transports: it sees either the count before it sleeps or the
            // ring (a wake before its sleep makes that sleep return at once).
            CONTENDERS.fetch_add(1, Ordering::SeqCst);
            if SLEEPING.load(Ordering::SeqCst) {
                if let Some(w) = WAKE.get() {
                    w.wake();
                }
            }
            let g = STATE.lock();
            CONTENDERS.fetch_sub(1, Ordering::SeqCst);
            g
        }
    }
}

/// The engine, locked: what [`with`] hands out. It derefs to the
/// [`Engine`]; its waits let go of the lock when other threads want it.
pub(crate) struct Locked(Option<Guard<State>>);

impl std::ops::Deref for Locked {
    type Target = Engine;
    #[inline]
    fn deref(&self) -> &Engine {
        match self.0.as_deref() {
            Some(State::Running(e)) => e,
            _ => unreachable!("the engine is running while locked"),
        }
    }
}

impl std::ops::DerefMut for Locked {
    #[inline]
    fn deref_mut(&mut self) -> &mut Engine {
        match self.0.as_deref_mut() {
            Some(State::Running(e)) => e,
            _ => unreachable!("the engine is running while locked"),
        }
    }
}

/// A rank is unwinding from a panic without finalizing: unless the launcher
/// watches for that itself, ask it (PMI `abort`) to end the job, so that the
/// peers waiting for this rank do not wait forever. The panic hook has already
/// printed the panic's message.
pub(crate) fn abort_after_panic() {
    let mut g = lock();
    if let State::Running(e) = &mut *g {
        if !e.launcher_watches_exits {
            let msg = format!("rank {} panicked", e.rank);
            if let Some(p) = e.pmi.as_mut() {
                ask_launcher_to_abort(p, 101, &msg);
            }
        }
    }
}

/// How long a rank whose stderr is a pipe or socket waits between writing why
/// it ends the job and asking the launcher to end it.
const ABORT_SETTLE: Duration = Duration::from_millis(100);

/// Sends PMI `abort` (code, msg), once what this rank wrote to stderr has had
/// time to reach the launcher. A launcher reads a rank's stderr pipe and its PMI
/// connection in one event loop and kills every rank as soon as it reads the
/// abort; Hydra then drops what was still in the pipe, so the message that says
/// why the job ended (printed just before) was lost in about one run of twenty.
/// The process ends right after, so the wait costs nothing but its length.
pub(crate) fn ask_launcher_to_abort(pmi: &mut PmiClient, code: i32, msg: &str) {
    if stderr_is_piped() {
        std::thread::sleep(ABORT_SETTLE);
    }
    if let Err(e) = pmi.abort(code, msg) {
        tracing::debug!("PMI abort: {e}");
    }
}

/// Whether fd 2 is a pipe or a socket (what launchers give their ranks), read
/// through /proc so no unsafe is needed.
fn stderr_is_piped() -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata("/proc/self/fd/2")
        .map(|m| m.file_type().is_fifo() || m.file_type().is_socket())
        .unwrap_or(false)
}

/// Run `f` on the engine, or fail `call` if MPI is not running.
pub(crate) fn with<R>(call: &str, f: impl FnOnce(&mut Locked) -> Result<R>) -> Result<R> {
    let g = lock();
    check_running(call, &g)?;
    f(&mut Locked(Some(g)))
}

/// Run `f` on the engine unless another thread holds it: `None` then (that
/// thread's own progress passes do what `f` would), `Some(Err)` if MPI is
/// not running. Never waits, and never rings a thread sleeping in the
/// transports (the one-sided progress thread polls with it).
pub(crate) fn try_with<R>(
    call: &str,
    f: impl FnOnce(&mut Locked) -> Result<R>,
) -> Option<Result<R>> {
    let g = STATE.try_lock()?;
    if let Err(e) = check_running(call, &g) {
        return Some(Err(e));
    }
    Some(f(&mut Locked(Some(g))))
}

/// The engine, locked, for `call` (which fails if it is not running).
pub(crate) fn locked(call: &str) -> Result<Locked> {
    let g = lock();
    check_running(call, &g)?;
    Ok(Locked(Some(g)))
}

/// The error of a call made while the engine is not running.
#[inline(always)]
fn check_running(call: &str, s: &State) -> Result<()> {
    match s {
        State::Running(_) => Ok(()),
        _ => Err(not_running(call, s)),
    }
}

/// [`check_running`]'s error.
#[cold]
#[inline(never)]
fn not_running(call: &str, s: &State) -> Error {
    let why = match s {
        State::Finalized => "gmpi has already been finalized",
        _ => "gmpi is not initialized (call gmpi::init first)",
    };
    Error::new(ErrorClass::Other, call, -1, why)
}

/// This process's CPU affinity as a business-card field: bytes in CPU order (byte
/// `k` holds CPUs `8k..8k+8`, lowest bit first), in hex, trailing zero bytes
/// dropped; empty when the mask cannot be read.
fn cpu_mask_hex() -> String {
    use nix::sched::{sched_getaffinity, CpuSet};
    let Ok(set) = sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
        return String::new();
    };
    let mut bytes = vec![0u8; CpuSet::count().div_ceil(8)];
    for c in 0..CpuSet::count() {
        if set.is_set(c).unwrap_or(false) {
            bytes[c / 8] |= 1 << (c % 8);
        }
    }
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How many CPUs the ranks of a node may run on together: the union of their
/// affinity masks ([`cpu_mask_hex`] fields), so ranks pinned by `taskset`,
/// `srun --cpu-bind`, a cgroup cpuset or `gmpirun --bind-to` count the CPUs they
/// really have, not each one its own mask. A mask that is missing or malformed
/// falls back to this process's CPU count.
fn node_cpu_count<'a>(masks: impl IntoIterator<Item = &'a str>) -> usize {
    let fallback = || std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut union: Vec<u8> = Vec::new();
    for m in masks {
        if m.is_empty() || m.len() % 2 != 0 || !m.bytes().all(|b| b.is_ascii_hexdigit()) {
            return fallback();
        }
        for (i, pair) in m.as_bytes().chunks(2).enumerate() {
            let b = u8::from_str_radix(std::str::from_utf8(pair).unwrap_or("00"), 16).unwrap_or(0);
            if union.len() <= i {
                union.push(0);
            }
            union[i] |= b;
        }
    }
    let n: u32 = union.iter().map(|b| b.count_ones()).sum();
    if n == 0 {
        fallback()
    } else {
        n as usize
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The text of a [`hex`] card (for messages).
fn unhex(s: &str) -> String {
    let bytes: Vec<u8> = s
        .as_bytes()
        .chunks(2)
        .filter_map(|p| std::str::from_utf8(p).ok())
        .filter_map(|p| u8::from_str_radix(p, 16).ok())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// PMI key of the job secret rank 0 shares when the launcher gave none.
const SECRET_KEY: &str = "gmpi-secret";

/// This node's name: the UTS hostname (per network/UTS namespace), read
/// through /proc so no unsafe is needed.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// The job's part of its shared-memory file names, `/dev/shm/gmpi-{tag}-...`.
///
/// Under `gmpirun` it is `GMPI_JOBID` (gmpirun removes `gmpi-{GMPI_JOBID}*` when the job
/// ends, whatever happened). Under other launchers it comes from the PMI kvsname, which
/// names the job uniquely: Slurm's `pmi2` plugin serves `JOBID.STEPID`, Hydra
/// `kvs_PID_N_RANDOM_HOST`. Characters other than ASCII letters, digits and `_` become
/// `_` (dropping them would make job 1 step 10 and job 11 step 0 both `110`); a name
/// longer than 48 bytes keeps its first 32 and a hash of the whole, so the file name
/// stays far below the 255-byte limit.
pub(crate) fn job_tag(gmpi_jobid: Option<&str>, kvsname: &str) -> String {
    file_part(gmpi_jobid.filter(|j| !j.is_empty()).unwrap_or(kvsname))
}

/// `name` as part of a file name: other than ASCII letters and digits
/// become `_`, and a name longer than 48 characters keeps its first 32 and
/// a hash of the whole, so two long names never share a file.
pub(crate) fn file_part(name: &str) -> String {
    let mut tag: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if tag.len() > 48 {
        // FNV-1a: stable across processes and builds (std's hasher is not promised to be).
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        tag.truncate(32);
        tag.push_str(&format!("_{hash:016x}"));
    }
    tag
}

fn pmi_err(call: &str, rank: i32) -> impl Fn(gmpi_pmi::PmiError) -> Error + '_ {
    move |e| {
        Error::new(
            ErrorClass::Other,
            call,
            rank,
            format!("bootstrap (PMI): {e}"),
        )
    }
}

impl Engine {
    /// Bring up this process: PMI wire-up, node layout, transports.
    pub fn start(cfg: Config) -> Result<Engine> {
        const CALL: &str = "MPI_Init";
        let mut pmi = PmiClient::from_env().map_err(pmi_err(CALL, -1))?;
        let (rank, size) = pmi.as_ref().map_or((0, 1), |p| (p.rank(), p.size()));
        let r = rank as i32;
        let host = hostname();
        let launcher_watches_exits = std::env::var_os("GMPI_JOBID").is_some();
        let env_secret = match std::env::var("GMPI_JOB_SECRET") {
            Ok(v) => Some(Secret::from_hex(&v).map_err(|e| {
                Error::new(ErrorClass::Arg, CALL, r, format!("GMPI_JOB_SECRET: {e}"))
            })?),
            Err(_) => None,
        };
        let allow = |t: &str| cfg.btl.iter().any(|b| b == t);
        let (allow_shm, allow_tcp, allow_ib) = (allow("shm"), allow("tcp"), allow("ib"));

        // Business cards: which node each rank is on (its hostname, hex-encoded
        // so it travels as one PMI value) and the CPUs it may run on:
        // `NODEHEX.MASKHEX`.
        let node_name = cfg.node_name.clone().unwrap_or_else(|| host.clone());
        let mut node_of: Vec<String> = vec![hex(&node_name); size as usize];
        let mut mask_of: Vec<String> = vec![String::new(); size as usize];
        mask_of[rank as usize] = cpu_mask_hex();
        if let Some(p) = pmi.as_mut() {
            let card = format!("{}.{}", node_of[rank as usize], mask_of[rank as usize]);
            p.put(&format!("gmpi-card-{rank}"), &card)
                .map_err(pmi_err(CALL, r))?;
            if !launcher_watches_exits {
                p.put(&format!("gmpi-pid-{rank}"), &std::process::id().to_string())
                    .map_err(pmi_err(CALL, r))?;
            }
            if rank == 0 && size > 1 && env_secret.is_none() {
                // Ranks not started by gmpirun (srun, Hydra): share a secret
                // through the job's private key space.
                let s = Secret::random().map_err(|e| {
                    Error::new(ErrorClass::Other, CALL, r, format!("job secret: {e}"))
                })?;
                p.put(SECRET_KEY, &s.to_hex()).map_err(pmi_err(CALL, r))?;
            }
            p.fence().map_err(pmi_err(CALL, r))?;
            for peer in 0..size as usize {
                if peer as u32 == rank {
                    continue;
                }
                let card = p
                    .get(&format!("gmpi-card-{peer}"))
                    .map_err(pmi_err(CALL, r))?;
                let (node, mask) = card.split_once('.').unwrap_or((&card, ""));
                if node.is_empty() || !node.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(Error::new(
                        ErrorClass::Intern,
                        CALL,
                        r,
                        format!("malformed business card of rank {peer}: {card:?}"),
                    ));
                }
                node_of[peer] = node.to_owned();
                mask_of[peer] = mask.to_owned();
            }
        }
        let me_node = node_of[rank as usize].clone();
        let local: Vec<u32> = (0..size)
            .filter(|&q| node_of[q as usize] == me_node)
            .collect();
        let local_rank = local
            .iter()
            .position(|&q| q == rank)
            .expect("self is local") as u32;
        let local_size = local.len() as u32;
        let node_cpus = node_cpu_count(local.iter().map(|&q| mask_of[q as usize].as_str()));
        tracing::debug!(target: "gmpi", "{local_size} local ranks on {node_cpus} CPUs{}", if local_size as usize > node_cpus { ": oversubscribed" } else { "" });

        // The pids of this node's other ranks, for the peer watch.
        let mut local_pids = Vec::new();
        if let (Some(p), false) = (pmi.as_mut(), launcher_watches_exits) {
            for &peer in local.iter().filter(|&&q| q != rank) {
                let pid = p
                    .get(&format!("gmpi-pid-{peer}"))
                    .map_err(pmi_err(CALL, r))?;
                let pid = pid.parse::<u32>().map_err(|_| {
                    Error::new(
                        ErrorClass::Intern,
                        CALL,
                        r,
                        format!("malformed pid of rank {peer}: {pid:?}"),
                    )
                })?;
                local_pids.push((peer, pid));
            }
        }

        // Node index of each rank: order of first appearance.
        let mut nodes: Vec<&String> = Vec::new();
        let node_idx: Vec<u32> = node_of
            .iter()
            .map(|n| match nodes.iter().position(|m| *m == n) {
                Some(i) => i as u32,
                None => {
                    nodes.push(n);
                    (nodes.len() - 1) as u32
                }
            })
            .collect();
        // Who goes through tcp: every other rank that shm does not reach.
        let tcp_peers: Vec<u32> = (0..size)
            .filter(|&q| q != rank && !(allow_shm && node_of[q as usize] == me_node))
            .collect();
        if let (Some(&q), false) = (tcp_peers.first(), allow_tcp || allow_ib) {
            return Err(Error::new(
                ErrorClass::Unsupported,
                CALL,
                r,
                format!(
                    "no allowed transport reaches rank {q} (on node {:?}; GMPI_BTL={})",
                    unhex(&node_of[q as usize]),
                    cfg.btl.join(",")
                ),
            ));
        }
        // Checked before any transport is set up: a bad value fails here
        // on every rank alike.
        let ib_want = gmpi_btl_ib::gpudirect::Want::from_env()
            .map_err(|e| Error::new(ErrorClass::Arg, CALL, r, e))?;
        let gcfg = cfg
            .gpu()
            .map_err(|e| Error::new(ErrorClass::Arg, CALL, r, e))?;
        let simd = cfg
            .simd
            .parse::<crate::op::SimdLimit>()
            .map_err(|e| Error::new(ErrorClass::Arg, CALL, r, format!("simd: {e}")))?;
        crate::op::set_simd_limit(simd);
        tracing::debug!(target: "coll", "reduction kernels: {}", crate::op::simd_level());
        // Before the transports (btl-ib chooses its port near the rank's
        // GPU). Loads libcuda (under `auto`, where present) but creates no
        // context and allocates nothing: the first device buffer does that.
        let gpu =
            std::sync::Arc::new(Gpu::init(&gcfg).map_err(|e| {
                Error::new(ErrorClass::Other, CALL, r, format!("GMPI_CUDA=on: {e}"))
            })?);
        tracing::debug!(target: "gpu", "CUDA: {}", gpu.status());
        // btl-ib once connected, and where it goes among the transports.
        let mut ib_btl = None;
        let mut btls: Vec<Box<dyn Btl>> = vec![Box::new(Loopback::new(rank))];
        let mut cma_status = String::from("no shared-memory peers");
        let mut cma = false;
        let mut shm_prefix = None;
        if let Some(p) = pmi.as_mut() {
            let job = job_tag(std::env::var("GMPI_JOBID").ok().as_deref(), p.kvsname());
            // tcp: listen and publish the card before the fences below.
            let mut tcp = None;
            if !tcp_peers.is_empty() && allow_tcp {
                let secret = match &env_secret {
                    Some(s) => s.clone(),
                    None => {
                        let v = p.get(SECRET_KEY).map_err(|e| {
                            Error::new(
                                ErrorClass::Other,
                                CALL,
                                r,
                                format!(
                                    "no GMPI_JOB_SECRET and none shared by rank 0 through PMI: {e}"
                                ),
                            )
                        })?;
                        Secret::from_hex(&v).map_err(|e| {
                            Error::new(
                                ErrorClass::Intern,
                                CALL,
                                r,
                                format!("job secret shared by rank 0: {e}"),
                            )
                        })?
                    }
                };
                let mut tcfg = TcpConfig::new(secret, job.clone());
                tcfg.interfaces = cfg.tcp_if.clone();
                if let Some(f) = cfg.tcp_max_frag {
                    tcfg.max_frag = f;
                }
                tcfg.eager_limit = tcfg
                    .eager_limit
                    .min(tcfg.max_frag.saturating_sub(gmpi_pml::wire::MAX_HDR));
                let t = TcpBtl::bind(rank, size, tcfg).map_err(|e| {
                    Error::new(ErrorClass::Other, CALL, r, format!("{e} (on {host})"))
                })?;
                p.put(&format!("gmpi-tcp-{rank}"), &t.card())
                    .map_err(pmi_err(CALL, r))?;
                tcp = Some(t);
            }
            // ib: open a port and publish the card (or `none`: the reason is logged here).
            let mut ib = None;
            if !tcp_peers.is_empty() {
                let v = if allow_ib {
                    let bus = gpu.bus_id_for(local_rank as usize);
                    match crate::ib::open(
                        rank,
                        size,
                        &tcp_peers,
                        cfg.ib_devices.as_deref(),
                        bus.as_deref(),
                    ) {
                        Ok(b) => {
                            let c = b.card();
                            ib = Some(b);
                            c
                        }
                        Err(e) => {
                            tracing::debug!(target: "btl", "ib: not used: {e}");
                            crate::ib::NONE.to_string()
                        }
                    }
                } else {
                    tracing::debug!(target: "btl", "ib: not allowed (GMPI_BTL)");
                    crate::ib::NONE.to_string()
                };
                p.put(&format!("gmpi-ib-{rank}"), &v)
                    .map_err(pmi_err(CALL, r))?;
            }
            if allow_shm {
                let node_tag = file_part(&me_node);
                let path = format!("/dev/shm/gmpi-{job}-{node_tag}");
                shm_prefix = Some(path.clone());
                let mut scfg = ShmConfig {
                    cma: cfg.cma,
                    ring_bytes: cfg.shm_ring_bytes,
                    // Oversubscribed, a helper may lose its core in the middle
                    // of a chunk and the receiver would wait for it.
                    coop: cfg.shm_coop.unwrap_or(local.len() <= node_cpus),
                    ..ShmConfig::default()
                };
                if let Some(m) = cfg.shm_coop_min {
                    scfg.coop_min = m;
                }
                if let Some(c) = cfg.shm_coop_chunk {
                    scfg.coop_chunk = c;
                }
                if let Some(f) = cfg.shm_max_frag {
                    scfg.max_frag = f;
                }
                // The transport's own eager limit must fit in one fragment with its
                // header; a smaller `max_frag` lowers it (the pml's eager limit is
                // the configured one, capped the same way).
                scfg.eager_limit = scfg
                    .eager_limit
                    .min(scfg.max_frag.saturating_sub(gmpi_pml::wire::MAX_HDR));
                let mut fence = || p.fence().map_err(|e| e.to_string());
                let shm = ShmBtl::bootstrap(
                    &path,
                    local_rank as usize,
                    local.len(),
                    &local,
                    &scfg,
                    &mut fence,
                )
                .map_err(|e| {
                    Error::new(
                        ErrorClass::Other,
                        CALL,
                        r,
                        format!("shared-memory transport: {e}"),
                    )
                })?;
                cma_status = shm.cma_status().to_string();
                cma = shm.cma_enabled();
                tracing::debug!(target: "btl", "shm: {} local ranks, {} B per rank, cma: {}, cooperative copies: {}", local_size, shm.memory_per_rank(), cma_status, shm.coop_status());
                if local_size > 1 {
                    btls.push(Box::new(shm));
                }
            } else {
                // The same two fences the shm bootstrap makes.
                p.fence().map_err(pmi_err(CALL, r))?;
                p.fence().map_err(pmi_err(CALL, r))?;
                cma_status = String::from("shared memory not allowed (GMPI_BTL)");
            }
            if let Some(mut b) = ib {
                let mut reached = 0;
                for &q in &tcp_peers {
                    let v = p.get(&format!("gmpi-ib-{q}")).map_err(pmi_err(CALL, r))?;
                    if !crate::ib::is_card(&v) {
                        tracing::debug!(target: "btl", "ib: rank {q} has no ib; tcp reaches it");
                        continue;
                    }
                    b.add_peer(q, &v)
                        .map_err(|e| Error::new(ErrorClass::Other, CALL, r, e))?;
                    reached += 1;
                }
                tracing::debug!(target: "btl", "ib: {reached} of {} peers on other nodes", tcp_peers.len());
                if reached > 0 {
                    ib_btl = Some((btls.len(), b));
                }
            }
            if let Some(mut t) = tcp {
                for &q in &tcp_peers {
                    let card = p.get(&format!("gmpi-tcp-{q}")).map_err(pmi_err(CALL, r))?;
                    t.add_peer(q, &card)
                        .map_err(|e| Error::new(ErrorClass::Intern, CALL, r, e.to_string()))?;
                }
                tracing::debug!(target: "btl", "tcp: {} peers, listening on {}", tcp_peers.len(), t.card());
                btls.push(Box::new(t));
            }
        }
        match std::env::var("GMPI_GPU_BIND").as_deref() {
            Ok("local-rank") => match gpu.select_device(local_rank as usize) {
                Ok(Some(d)) => tracing::debug!(target: "gpu", "local rank {local_rank}: GPU {d}"),
                Ok(None) => {}
                Err(e) => {
                    return Err(Error::new(
                        ErrorClass::Other,
                        CALL,
                        r,
                        format!("GMPI_GPU_BIND=local-rank: {e}"),
                    ))
                }
            },
            Ok("none") | Ok("") | Err(_) => {}
            Ok(other) => {
                return Err(Error::new(
                    ErrorClass::Arg,
                    CALL,
                    r,
                    format!("GMPI_GPU_BIND={other:?}: expected none or local-rank"),
                ))
            }
        }
        // btl-ib, connected above, learns whether it registers GPU memory
        // (GPUDirect RDMA), and takes its place among the transports.
        if let Some((at, mut b)) = ib_btl {
            b.gpudirect(&gpu, ib_want);
            btls.insert(at, b.into_btl());
        }
        let pcfg = PmlConfig {
            eager_limit: cfg.eager_limit,
            get_threshold: cfg.get_threshold,
            use_get: cfg.cma,
            pipeline_chunk: cfg.pipeline_chunk,
            device: cfg.device(gpu.eager_path() == gmpi_gpu::CopyPath::GdrCopy),
        };
        // A second init in one process (not allowed by MPI) keeps the first.
        let _ = GPU.set(gpu.clone());
        let driver = Driver::new(Pml::new(rank, size, pcfg), btls, HostMem, gpu.clone());
        for peer in 0..size {
            if driver.pml.route(peer).is_none() {
                return Err(Error::new(
                    ErrorClass::Intern,
                    CALL,
                    r,
                    format!(
                        "no transport reaches rank {peer} (on node {:?})",
                        unhex(&node_of[peer as usize])
                    ),
                ));
            }
        }
        if let Some(w) = driver.waker() {
            let _ = WAKE.set(w);
        }
        let blockers = if driver.wakes_across() {
            1
        } else {
            driver
                .btls()
                .iter()
                .filter(|b| matches!(b.caps().name, "shm" | "tcp" | "ib"))
                .count()
        };
        tracing::debug!(target: "gmpi", "idle sleep: {}", if blockers > 1 { "one btl at a time (1 ms cap)" } else { "one btl, woken across transports" });
        let backoff = Backoff::new(&cfg, local_size as usize, node_cpus, blockers);
        let watch = crate::watch::PeerWatch::new(&local_pids);
        if !launcher_watches_exits {
            tracing::debug!(target: "gmpi", "not started by gmpirun: watching {} of {} other local ranks", watch.len(), local_pids.len());
        }
        Ok(Engine {
            node_of: node_idx,
            shm_prefix,
            launcher_watches_exits,
            watch,
            finalizing: false,
            next_ctx: 2,
            ctx_owned: false,
            scheds: Default::default(),
            next_sched: 1,
            areas: Vec::new(),
            users: std::collections::HashMap::new(),
            rma: Default::default(),
            coll: crate::coll::select::Settings::of(&cfg),
            cfg,
            rank,
            size,
            local_rank,
            local_size,
            hostname: host,
            driver,
            pmi,
            gpu,
            backoff,
            cma_status,
            cma,
        })
    }

    /// One progress pass: the transports, then every schedule in flight.
    /// Returns how much happened.
    #[inline]
    pub fn progress_all(&mut self, call: &str) -> Result<usize> {
        let mut n = self.driver.progress();
        if let Some(e) = self.driver.fatal() {
            return Err(Error::from_pml(e.clone(), call, self.rank as i32));
        }
        if !self.scheds.is_empty() {
            for s in self.scheds.values_mut() {
                n += s.advance(&mut self.driver);
            }
        }
        if !self.areas.is_empty() {
            n += self.poll_areas();
        }
        if !self.rma.is_idle() {
            n += crate::win::serve_requests(self);
        }
        if n > 0 && multithreaded() && FOLLOWING.load(Ordering::SeqCst) > 0 {
            // What moved may be a follower's operation.
            wake_followers();
        }
        Ok(n)
    }

    /// From a wait about to block: if a rank of this node is gone without
    /// finalizing (see `watch.rs`), end the whole job through PMI `abort`, as
    /// gmpirun would have, instead of waiting for it forever.
    fn check_peers(&mut self) {
        if self.finalizing {
            return;
        }
        let Some(gone) = self.watch.poll(std::time::Instant::now()) else {
            return;
        };
        let msg = format!(
            "rank {} (pid {}) on {} is gone without calling MPI_Finalize; rank {} ends the job",
            gone.rank, gone.pid, self.hostname, self.rank
        );
        eprintln!("gmpi: {msg}");
        if let Some(p) = self.pmi.as_mut() {
            ask_launcher_to_abort(p, 1, &msg);
        }
        std::process::exit(1);
    }

    /// Start a round of context-id agreement: `(candidate, busy)`, where
    /// `busy` is 1 when another thread of this process owns the agreement
    /// (this round must then fail everywhere and be retried), and `owned`
    /// says whether this thread took ownership (hand it to
    /// [`Engine::ctx_round_end`]).
    ///
    /// Why: the new id is the maximum of the members' next free ids, taken
    /// by a collective during which (under `MPI_THREAD_MULTIPLE`) other
    /// threads run. Two threads creating communicators on different parents
    /// at once could agree on the same id. As in MPICH, only the thread
    /// that owns the agreement in each process may claim an id; a round in
    /// which any member did not own it claims nothing on any member (the
    /// flags are reduced with the candidates) and is retried, so a claimed
    /// id was free on every member, and ownership is let go after every
    /// round, so no process waits for another's owner.
    pub fn ctx_round(&mut self) -> (u32, u32, bool) {
        if !multithreaded() {
            return (self.next_ctx, 0, false);
        }
        if self.ctx_owned {
            return (self.next_ctx, 1, false);
        }
        self.ctx_owned = true;
        (self.next_ctx, 0, true)
    }

    /// End a round begun by [`Engine::ctx_round`]: claim `agreed` (and
    /// the `width - 1` ids after it) if the round succeeded, let go of
    /// ownership if this thread had it.
    pub fn ctx_round_end(&mut self, owned: bool, agreed: Option<u32>, width: u32) {
        if let Some(c) = agreed {
            self.next_ctx = self.next_ctx.max(c + width);
        }
        if owned {
            self.ctx_owned = false;
        }
    }

    /// Park a schedule to run in the background; advance it once now.
    pub fn park(&mut self, mut s: crate::coll::sched::Sched) -> crate::comm::Handle {
        s.advance(&mut self.driver);
        let id = self.next_sched;
        self.next_sched += 1;
        self.scheds.insert(id, s);
        crate::comm::Handle::Sched(id)
    }

    /// Park a non-blocking exchange of epoch `e` on `comm`'s area of
    /// non-blocking collectives for `call`, started already: the next
    /// progress pass looks at it first.
    pub fn park_area(
        &mut self,
        comm: &std::sync::Arc<crate::comm::CommInner>,
        call: &'static str,
        e: u64,
    ) -> crate::comm::Handle {
        let id = self.next_sched;
        self.next_sched += 1;
        self.areas.push(AreaOp {
            id,
            comm: comm.clone(),
            call,
            e,
            outcome: None,
        });
        crate::comm::Handle::Area(id)
    }

    /// A progress pass's look at the area exchanges not finished yet: how
    /// many finished.
    #[inline(never)]
    fn poll_areas(&mut self) -> usize {
        let mut n = 0;
        for a in self.areas.iter_mut().filter(|a| a.outcome.is_none()) {
            if let Some(r) = crate::coll::shm::nb::outcome(&a.comm, a.call, a.e) {
                a.outcome = Some(r);
                n += 1;
            }
        }
        n
    }

    /// Whether the operation behind `h` has completed.
    #[inline]
    pub fn is_done(&self, h: crate::comm::Handle) -> bool {
        match h {
            crate::comm::Handle::Pml(id) => self.driver.pml.is_complete(id),
            crate::comm::Handle::Sched(id) => self.scheds.get(&id).is_none_or(|s| s.is_done()),
            crate::comm::Handle::Area(id) => self
                .areas
                .iter()
                .find(|a| a.id == id)
                .is_none_or(|a| a.outcome.is_some()),
            crate::comm::Handle::User(id) => self
                .users
                .get(&id)
                .is_none_or(|f| f.load(std::sync::atomic::Ordering::Acquire)),
        }
    }

    /// The outcome of a completed point-to-point operation, left in place
    /// for [`Engine::take`]; other operations cannot be looked at so.
    pub fn peek(&self, call: &str, h: crate::comm::Handle) -> Result<crate::request::Status> {
        match h {
            crate::comm::Handle::Pml(id) => self.pml_outcome(call, self.driver.pml.peek(id)),
            _ => Err(Error::new(
                ErrorClass::Request,
                call,
                self.rank as i32,
                "only a point-to-point request can be looked at without completing it",
            )),
        }
    }

    /// A point-to-point operation's outcome as the pml gave it (`None`: it
    /// has no outcome to give, which no caller expects).
    #[inline(never)]
    fn pml_outcome(
        &self,
        call: &str,
        r: Option<std::result::Result<gmpi_pml::Status, gmpi_pml::PmlError>>,
    ) -> Result<crate::request::Status> {
        let rank = self.rank as i32;
        match r {
            Some(r) => r
                .map(crate::request::Status::from_pml)
                .map_err(|e| Error::from_pml(e, call, rank)),
            None => Err(Error::new(
                ErrorClass::Request,
                call,
                rank,
                "request vanished",
            )),
        }
    }

    /// Take the outcome of a completed operation.
    #[inline]
    pub fn take(&mut self, call: &str, h: crate::comm::Handle) -> Result<crate::request::Status> {
        match h {
            crate::comm::Handle::Pml(id) => match self.driver.test(id) {
                Some(Ok(st)) => Ok(crate::request::Status::from_pml(st)),
                r => self.pml_outcome(call, r),
            },
            _ => self.take_other(call, h),
        }
    }

    /// [`Engine::take`] of a schedule or a generalized request.
    #[inline(never)]
    fn take_other(&mut self, call: &str, h: crate::comm::Handle) -> Result<crate::request::Status> {
        let rank = self.rank as i32;
        match h {
            crate::comm::Handle::Pml(id) => {
                let r = self.driver.test(id);
                self.pml_outcome(call, r)
            }
            crate::comm::Handle::User(id) => {
                self.users.remove(&id);
                Ok(crate::request::Status::empty())
            }
            crate::comm::Handle::Area(id) => {
                let out = match self.areas.iter().position(|a| a.id == id) {
                    Some(i) => self.areas.swap_remove(i).outcome,
                    None => None,
                };
                match out {
                    Some(r) => r.map(|()| crate::request::Status::empty()),
                    None => Err(Error::new(
                        ErrorClass::Request,
                        call,
                        rank,
                        "request vanished",
                    )),
                }
            }
            crate::comm::Handle::Sched(id) => match self.scheds.remove(&id) {
                Some(mut s) => s
                    .result()
                    .map(|st| st.unwrap_or_else(crate::request::Status::empty)),
                None => Err(Error::new(
                    ErrorClass::Request,
                    call,
                    rank,
                    "request vanished",
                )),
            },
        }
    }

    /// Progress once without blocking.
    pub fn poke(&mut self, call: &str) -> Result<()> {
        self.progress_all(call).map(|_| ())
    }
}

/// A non-blocking exchange on a communicator's area ([`Engine::park_area`]).
#[derive(Debug)]
pub struct AreaOp {
    id: u64,
    comm: std::sync::Arc<crate::comm::CommInner>,
    call: &'static str,
    e: u64,
    /// Its outcome once finished, kept for the request's test or wait.
    outcome: Option<Result<()>>,
}

impl Locked {
    /// The engine is finalized: its state goes (the lock is still held).
    pub(crate) fn set_finalized(&mut self) {
        if let Some(g) = self.0.as_mut() {
            **g = State::Finalized;
        }
    }

    /// Run `f` without the engine lock (other threads may call the engine
    /// meanwhile), then take it back; fails `call` if another thread
    /// finalized meanwhile.
    fn unlocked<R>(&mut self, call: &str, f: impl FnOnce() -> R) -> Result<R> {
        self.0 = None;
        let r = f();
        let g = lock();
        check_running(call, &g)?;
        self.0 = Some(g);
        Ok(r)
    }

    /// A context-id agreement round failed because some member was busy
    /// (see [`Engine::ctx_round`]): let the owner's thread run before the
    /// next round.
    pub(crate) fn ctx_retry(&mut self, call: &str) -> Result<()> {
        self.unlocked(call, std::thread::yield_now)
    }

    /// Let another thread that asked for the lock have it for a moment.
    #[inline]
    fn let_in(&mut self, call: &str) -> Result<()> {
        if multithreaded() && CONTENDERS.load(Ordering::Relaxed) > 0 {
            self.unlocked(call, std::thread::yield_now)?;
        }
        Ok(())
    }

    /// Progress until `done` holds: spin, then yield, then block.
    pub fn wait_until(
        &mut self,
        call: &str,
        mut done: impl FnMut(&mut Engine) -> Result<bool>,
    ) -> Result<()> {
        // Dropped on every way out, a panic included (caught at the C ABI's
        // frame, after which the process goes on).
        let mut role = SleeperRole(false);
        self.wait_loop(call, &mut done, &mut role.0)
    }

    fn wait_loop(
        &mut self,
        call: &str,
        done: &mut impl FnMut(&mut Engine) -> Result<bool>,
        sleeper: &mut bool,
    ) -> Result<()> {
        let mut idle: u32 = 0;
        loop {
            if done(self)? {
                return Ok(());
            }
            if self.progress_all(call)? > 0 {
                idle = 0;
                self.let_in(call)?;
                continue;
            }
            idle = idle.saturating_add(1);
            self.back_off(call, idle, sleeper)?;
        }
    }

    /// Idle policy after `idle` empty polls: spin, then yield, then block.
    /// With several threads (see the module header) the spin lets others
    /// in, the yield happens without the lock, and only the thread holding
    /// the sleeper's role (`sleeper`) blocks in the transports.
    fn back_off(&mut self, call: &str, idle: u32, sleeper: &mut bool) -> Result<()> {
        let b = self.backoff;
        if idle <= b.spin {
            // A progress pass is itself a handful of loads; a PAUSE here
            // (~140 cycles on recent x86) would only delay noticing an
            // arrival. Pause only in the second half of the spin.
            if idle > b.spin / 2 {
                std::hint::spin_loop();
            }
            return self.let_in(call);
        }
        if idle <= b.spin + b.yields && self.backoff.may_yield() {
            let start = Instant::now();
            let r = if multithreaded() {
                self.unlocked(call, std::thread::yield_now)
            } else {
                std::thread::yield_now();
                Ok(())
            };
            self.backoff.yielded(start);
            return r;
        }
        let block = self.block_for(b.block);
        if !multithreaded() {
            self.check_peers();
            self.driver.wait(block);
            return Ok(());
        }
        if !*sleeper && !SLEEPER.swap(true, Ordering::SeqCst) {
            *sleeper = true;
        }
        if *sleeper && WAKE.get().is_none() {
            // No transport can be interrupted (a rank alone, on loopback
            // only): what completes a wait comes from another thread's call,
            // whose progress pass wakes the followers; sleep as one, without
            // the lock, for at most MULTI_BLOCK.
            self.check_peers();
            return self.follow(call, b.block.min(MULTI_BLOCK));
        }
        if *sleeper {
            self.check_peers();
            SLEEPING.store(true, Ordering::SeqCst);
            if CONTENDERS.load(Ordering::SeqCst) == 0 {
                self.driver.wait(block);
            }
            SLEEPING.store(false, Ordering::SeqCst);
            return self.let_in(call);
        }
        // A follower: sleep until something moves or the role frees up.
        self.follow(call, b.block)
    }

    /// How long a wait may sleep in the transports: `block`, or no longer
    /// than [`AREA_NAP`] while an area exchange ([`Engine::park_area`])
    /// waits for a store to a shared-memory area, which rings no doorbell.
    fn block_for(&self, block: Duration) -> Duration {
        if !self.areas.is_empty() {
            block.min(AREA_NAP)
        } else {
            block
        }
    }

    /// Sleep on the followers' condition variable, without the lock, until
    /// a progress pass moves something, the sleeper's role frees up, or
    /// `timeout` passes.
    fn follow(&mut self, call: &str, timeout: Duration) -> Result<()> {
        FOLLOWING.fetch_add(1, Ordering::SeqCst);
        let seen = EPOCH.load(Ordering::SeqCst);
        let r = self.unlocked(call, || {
            let g = FOLLOW.0.lock().unwrap_or_else(|p| p.into_inner());
            if EPOCH.load(Ordering::SeqCst) == seen {
                let _ = FOLLOW.1.wait_timeout(g, timeout);
            }
        });
        FOLLOWING.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// What a wait on shared-memory flags does while nothing has arrived:
    /// progress everything else, then back off (yielding rather than blocking,
    /// since a flag write rings no doorbell).
    pub fn idle_flags(&mut self, call: &str, k: u32) -> Result<()> {
        let b = self.backoff;
        // Poll the flag tightly at first; progress the rest every so often.
        if k <= b.spin && !k.is_multiple_of(64) {
            std::hint::spin_loop();
            return Ok(());
        }
        if self.progress_all(call)? > 0 {
            return self.let_in(call);
        }
        if k <= b.spin {
            std::hint::spin_loop();
            self.let_in(call)
        } else if k <= b.spin + 20_000 {
            if multithreaded() {
                return self.unlocked(call, std::thread::yield_now);
            }
            std::thread::yield_now();
            Ok(())
        } else {
            self.check_peers();
            let nap = || std::thread::sleep(AREA_NAP);
            if multithreaded() {
                return self.unlocked(call, nap);
            }
            nap();
            Ok(())
        }
    }

    /// Drive a schedule to its end (a blocking collective).
    pub fn drive(&mut self, call: &str, s: &mut crate::coll::sched::Sched) -> Result<()> {
        s.advance(&mut self.driver);
        self.wait_until(call, |e| {
            s.advance(&mut e.driver);
            Ok(s.is_done())
        })?;
        s.result().map(|_| ())
    }

    /// Wait for `h` and take its outcome.
    pub fn wait_handle(
        &mut self,
        call: &str,
        h: crate::comm::Handle,
    ) -> Result<crate::request::Status> {
        self.wait_until(call, |e| Ok(e.is_done(h)))?;
        self.take(call, h)
    }

    /// Wait for the receive in the pml's direct slot
    /// ([`gmpi_pml::Pml::post_recv_direct`]) and take its end. A rendezvous
    /// that matched it turned it into a request, waited for as any other.
    pub fn wait_direct(&mut self, call: &str) -> Result<crate::request::Status> {
        let mut end = None;
        if let Err(e) = self.wait_until(call, |e| {
            end = e.driver.pml.take_direct();
            Ok(end.is_some())
        }) {
            self.driver.pml.drop_direct();
            return Err(e);
        }
        match end {
            Some(gmpi_pml::DirectEnd::Done(r)) => r
                .map(crate::request::Status::from_pml)
                .map_err(|e| Error::from_pml(e, call, self.rank as i32)),
            Some(gmpi_pml::DirectEnd::Promoted(id)) => {
                self.wait_handle(call, crate::comm::Handle::Pml(id))
            }
            None => unreachable!("wait_until returns Ok once the direct receive ended"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{cpu_mask_hex, job_tag, node_cpu_count, Backoff, CROWDED_FOR, CROWDED_YIELD};
    use std::time::{Duration, Instant};

    #[test]
    fn a_slow_yield_stops_yielding_for_a_while_unless_oversubscribed() {
        let cfg = crate::config::Config::default();
        let mut b = Backoff::new(&cfg, 2, 2, 1);
        assert!(b.adaptive && b.may_yield());
        // A bare yield: nothing changes.
        b.yielded(Instant::now());
        assert!(b.may_yield());
        // One that came back late: no yields for CROWDED_FOR.
        b.yielded(Instant::now() - CROWDED_YIELD * 2);
        assert!(!b.may_yield());
        let until = b.crowded_until.expect("crowded");
        assert!(until > Instant::now() + CROWDED_FOR - Duration::from_millis(5));
        // Once it is over, yields resume.
        b.crowded_until = Some(Instant::now() - Duration::from_millis(1));
        assert!(b.may_yield());
        assert!(b.crowded_until.is_none());
        // The job's own ranks outnumber the CPUs: slow yields are expected.
        let mut b = Backoff::new(&cfg, 4, 2, 1);
        assert!(!b.adaptive);
        b.yielded(Instant::now() - CROWDED_YIELD * 2);
        assert!(b.may_yield());
    }

    #[test]
    fn node_cpus_are_the_union_of_the_ranks_masks() {
        // Two ranks pinned to CPU 0 share one CPU; pinned to 0 and 1, two.
        assert_eq!(node_cpu_count(["01", "01"]), 1);
        assert_eq!(node_cpu_count(["01", "02"]), 2);
        // CPUs 8-15 and 0-3: bytes in CPU order, masks of different lengths.
        assert_eq!(node_cpu_count(["00ff", "0f"]), 12);
        // Unknown or malformed: this process's own count.
        let own = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(node_cpu_count(["01", ""]), own);
        assert_eq!(node_cpu_count(["0x"]), own);
        // This process's own mask reads back as its CPU count.
        assert_eq!(node_cpu_count([cpu_mask_hex().as_str()]), own);
    }

    #[test]
    fn job_tags_from_every_launcher_are_distinct_file_name_parts() {
        assert_eq!(job_tag(Some("00ff12"), "gmpi_00ff12"), "00ff12");
        assert_eq!(job_tag(None, "1.10"), "1_10");
        assert_ne!(job_tag(None, "1.10"), job_tag(None, "11.0"));
        assert_eq!(job_tag(Some(""), "kvs_20399_0_42_vm"), "kvs_20399_0_42_vm");
        assert_eq!(job_tag(None, "kvs_1_0_7_node-a.b"), "kvs_1_0_7_node_a_b");
        let long_a = format!("kvs_1_0_7_{}", "h".repeat(200));
        let long_b = format!("kvs_1_0_7_{}x", "h".repeat(199));
        let (a, b) = (job_tag(None, &long_a), job_tag(None, &long_b));
        assert!(a.len() <= 49 && b.len() <= 49, "{a} {b}");
        assert_ne!(a, b);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    }
}
