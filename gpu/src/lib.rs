//! gmpi-gpu: where a buffer lives, and how bytes get in and out of GPU memory.
//!
//! Every buffer handed to gmpi is classified before a protocol is chosen:
//! [`Gpu::classify`] answers [`MemKind::Host`], [`MemKind::Device`] or
//! [`MemKind::Managed`]. Without CUDA (no `libcuda`, `GMPI_CUDA=off`, or the
//! `cuda` cargo feature off) every buffer is host memory and the answer costs
//! one branch. With CUDA, the first question about an address is one
//! `cuPointerGetAttributes` call; the answer is then cached (`cache.rs`:
//! host ranges and device allocations, read lock-free, no driver call on a
//! hit). What depends on the allocation itself (its IPC export, its base)
//! re-checks the allocation's buffer id, so a freed and re-allocated address
//! never reuses a stale IPC mapping or export. Only the driver's "not a CUDA
//! pointer" answers mean host memory: any other failure of the query is an
//! error of the call that classified ([`Gpu::classify`]).
//!
//! [`Gpu`] also moves bytes for the progress driver (`runtime/src/progress/`),
//! which runs the pml's actions: device memory is read and
//! written through pooled pinned bounce buffers ([`Gpu::with_read`],
//! [`Gpu::with_write`]), GDRCopy where the backend has it; CUDA IPC handles
//! are exported ([`Gpu::ipc_export`]; memory legacy IPC cannot export, such
//! as `cudaMallocAsync` pool memory, through a device staging buffer:
//! [`Gpu::ipc_export_to`]) and peers' handles mapped with a cache
//! keyed by peer, base and buffer id ([`Gpu::ipc_map`]); device reductions
//! run as kernels ([`Gpu::reduce`]), or, where the kernels cannot be built
//! or loaded (no NVRTC, or PTX the driver refuses), on host copies of the
//! operands, with one warning per process. Nothing here creates a context
//! or allocates device memory at start-up.
//!
//! File map:
//! - `lib.rs`: [`GpuConfig`], [`Gpu`] (classification, bounce pool, IPC
//!   caches);
//! - `cache.rs`: the lock-free classification cache;
//! - `stage.rs`: pinned staging slots and the asynchronous copies in and
//!   out of them (the staged pipeline's building blocks); [`MemKind`] and [`IpcDesc`] are re-exported from
//!   `gmpi-mem`, which the pml shares.
//! - `temp.rs`: device temporaries of the collectives ([`Gpu::alloc_device`],
//!   [`DeviceBuf`]), pooled per [`Gpu`] by device and size class.
//! - `api.rs`: the [`CudaApi`] trait every backend implements, and its types.
//! - `ipc_staging.rs`: per-peer device staging buffers for memory legacy CUDA
//!   IPC cannot export ([`Gpu::ipc_export_to`], [`Lease`]).
//! - `double.rs`: [`double::TestCuda`], the test double (host memory tagged as
//!   device memory; copies counted and checked).
//! - `host_reduce.rs`: reductions on host bytes with the kernels' semantics
//!   (the fallback of [`Gpu::reduce`], the double's kernel).
//! - `cuda/`: the real backend over the CUDA driver API and NVRTC, loaded at
//!   run time by `cudarc` (feature `cuda`, on by default); `cuda/driver.rs`
//!   is this crate's only `unsafe` module.

#![deny(unsafe_code)]

pub mod api;
mod cache;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod double;
mod host_reduce;
mod ipc_staging;
pub mod stage;
mod temp;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

pub use api::{
    CopyDir, CopyPath, CudaApi, ElemType, Facts, GpuError, Landed, PinnedBuf, PtrInfo, ReduceOp,
    Ticket,
};
/// The memory vocabulary shared with the pml (`gmpi-mem`).
pub use gmpi_mem::{IpcDesc, IpcHandle, MemKind};
pub use ipc_staging::{
    size_class, Export, Lease, StagingStats, KEEP_BYTES, KEEP_PER_PEER, MIN_STAGING,
};
pub use temp::DeviceBuf;

/// Tracing target of this crate.
const LOG: &str = "gpu";

/// `GMPI_CUDA`: whether to use CUDA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CudaMode {
    /// Use CUDA if the driver library loads and a device is present.
    #[default]
    Auto,
    /// Use CUDA; fail at start-up if it cannot be used.
    On,
    /// Never load CUDA: every buffer is host memory.
    Off,
}

impl std::str::FromStr for CudaMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(CudaMode::Auto),
            "on" | "1" | "yes" | "true" => Ok(CudaMode::On),
            "off" | "0" | "no" | "false" => Ok(CudaMode::Off),
            other => Err(format!("expected auto, on or off, got {other:?}")),
        }
    }
}

/// Tunables of the gpu layer (`GMPI_CUDA`, `GMPI_GPU_HOST_CACHE`; see the
/// runtime's configuration).
/// The device protocols' thresholds (`GMPI_GPU_EAGER_LIMIT`,
/// `GMPI_GPU_IPC_THRESHOLD`, `GMPI_GPU_PIPELINE_CHUNK`, `GMPI_GPU_IPC`) are
/// the pml's (`gmpi_pml::DeviceConfig`): they choose protocols, and the
/// gpu layer only moves bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuConfig {
    /// Whether to use CUDA.
    pub mode: CudaMode,
    /// Whether host answers of the driver are cached (`cache.rs`; off only
    /// for programs that unmap host memory the driver may later reuse for
    /// device memory).
    pub host_cache: bool,
}

impl Default for GpuConfig {
    fn default() -> Self {
        Self {
            mode: CudaMode::Auto,
            host_cache: true,
        }
    }
}

/// Counters, for tests and the start-up log.
#[derive(Debug, Default)]
pub struct Stats {
    /// Driver queries made by [`Gpu::classify`].
    pub queries: AtomicU64,
    /// Classifications answered from the range cache.
    pub cache_hits: AtomicU64,
    /// Cache entries found stale (buffer id changed) and dropped.
    pub stale: AtomicU64,
    /// IPC handles opened.
    pub ipc_opens: AtomicU64,
    /// Stale IPC mappings closed.
    pub ipc_stale_closed: AtomicU64,
    /// Reductions done on host copies because the kernels are unavailable.
    pub host_reduces: AtomicU64,
    /// Warnings that the kernels are unavailable (at most one per layer).
    pub kernel_warnings: AtomicU64,
    /// Pinned staging slots allocated (`stage.rs`).
    pub slots_made: AtomicU64,
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A peer's mapped allocation.
#[derive(Debug, Clone, Copy)]
struct Mapped {
    buffer_id: u64,
    local: u64,
}

#[derive(Debug, Default)]
struct Caches {
    /// Our exported handles by base: (buffer id, handle).
    exports: HashMap<u64, (u64, IpcHandle)>,
    /// Peers' mappings by (peer, their base).
    mapped: HashMap<(u32, u64), Mapped>,
}

/// The GPU layer of one process. See the crate documentation.
#[derive(Debug)]
pub struct Gpu {
    api: Option<Arc<dyn CudaApi>>,
    cfg: GpuConfig,
    kinds: cache::PtrCache,
    caches: Mutex<Caches>,
    bounce: Mutex<Vec<Box<dyn PinnedBuf>>>,
    slots: stage::Slots,
    temps: temp::Temps,
    ipc_staging: ipc_staging::Staging,
    status: String,
    /// Why the reduction kernels cannot be used, once a reduction found out:
    /// later reductions go straight to the host.
    no_kernels: OnceLock<String>,
    /// Counters.
    pub stats: Stats,
}

impl Default for Gpu {
    fn default() -> Self {
        Self::host_only("host-only")
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Gpu {
    /// A GPU layer that answers "host" for every buffer; `why` is reported by
    /// [`Gpu::status`].
    pub fn host_only(why: &str) -> Self {
        Self {
            api: None,
            cfg: GpuConfig {
                mode: CudaMode::Off,
                ..GpuConfig::default()
            },
            kinds: cache::PtrCache::new(false),
            caches: Mutex::default(),
            bounce: Mutex::default(),
            slots: stage::Slots::default(),
            temps: temp::Temps::default(),
            ipc_staging: ipc_staging::Staging::default(),
            status: why.to_string(),
            no_kernels: OnceLock::new(),
            stats: Stats::default(),
        }
    }

    /// The GPU layer over `api` (the real backend, or the test double).
    pub fn with_api(api: Arc<dyn CudaApi>, cfg: GpuConfig) -> Self {
        let status = format!("{} with {} device(s)", api.name(), api.device_count());
        Self {
            ipc_staging: ipc_staging::Staging::new(&api),
            api: Some(api),
            kinds: cache::PtrCache::new(cfg.host_cache),
            cfg,
            caches: Mutex::default(),
            bounce: Mutex::default(),
            slots: stage::Slots::default(),
            temps: temp::Temps::default(),
            status,
            no_kernels: OnceLock::new(),
            stats: Stats::default(),
        }
    }

    /// The GPU layer as `cfg` asks: under `auto`, CUDA when the driver loads
    /// and has a device, else host-only; under `on`, an error if CUDA cannot
    /// be used; under `off`, host-only without loading anything. Creates no
    /// context and allocates nothing.
    pub fn init(cfg: &GpuConfig) -> Result<Self, GpuError> {
        if cfg.mode == CudaMode::Off {
            return Ok(Self::host_only("disabled (GMPI_CUDA=off)"));
        }
        match Self::load_backend() {
            Ok(api) if api.device_count() > 0 => Ok(Self::with_api(api, cfg.clone())),
            Ok(_) if cfg.mode == CudaMode::On => Err(GpuError::Unavailable(
                "the CUDA driver reports no device (GMPI_CUDA=on)".into(),
            )),
            Ok(_) => Ok(Self::host_only("no CUDA device")),
            Err(e) if cfg.mode == CudaMode::On => Err(e),
            Err(e) => Ok(Self::host_only(&e.to_string())),
        }
    }

    #[cfg(feature = "cuda")]
    fn load_backend() -> Result<Arc<dyn CudaApi>, GpuError> {
        cuda::load()
    }

    #[cfg(not(feature = "cuda"))]
    fn load_backend() -> Result<Arc<dyn CudaApi>, GpuError> {
        Err(GpuError::Unavailable(
            "gmpi was built without the `cuda` feature".into(),
        ))
    }

    /// Whether device memory can exist in this process.
    pub fn cuda_available(&self) -> bool {
        self.api.is_some()
    }

    /// The backend, if any.
    pub fn api(&self) -> Option<&Arc<dyn CudaApi>> {
        self.api.as_ref()
    }

    /// The configuration in force.
    pub fn config(&self) -> &GpuConfig {
        &self.cfg
    }

    /// One line for the start-up log: the backend and its devices, or why
    /// there is none.
    pub fn status(&self) -> &str {
        &self.status
    }

    /// The kind of the `len` bytes at `addr`. Without CUDA one branch; with
    /// it, a cache hit is a few atomic loads and a miss one driver query. An
    /// error is a failure of the query other than "not a CUDA pointer" (a
    /// sticky or context error): the buffer's kind is unknown and must not
    /// be taken for host memory.
    #[inline(always)]
    pub fn classify(&self, addr: u64, len: usize) -> Result<MemKind, GpuError> {
        match &self.api {
            None => Ok(MemKind::Host),
            Some(_) if self.host_hit(addr, len) => Ok(MemKind::Host),
            Some(api) => self.classify_slow(api.as_ref(), addr, len),
        }
    }

    /// Whether the `len` bytes at `addr` are host memory: [`Gpu::classify`]
    /// for the hot paths that only ask that, with no `Result` to build (a
    /// failed query is "not host": the caller's general path classifies
    /// again and reports it).
    ///
    /// Always inlined, so a host-only process pays one branch; with CUDA
    /// loaded the cache look-up is one call (`is_host_cuda`).
    #[inline(always)]
    pub fn is_host(&self, addr: u64, len: usize) -> bool {
        match &self.api {
            None => true,
            Some(api) => self.is_host_cuda(api.as_ref(), addr, len),
        }
    }

    /// [`Gpu::is_host`] with CUDA loaded.
    #[inline(never)]
    fn is_host_cuda(&self, api: &dyn CudaApi, addr: u64, len: usize) -> bool {
        self.host_hit(addr, len) || matches!(self.classify_slow(api, addr, len), Ok(MemKind::Host))
    }

    /// The host fast path of [`Gpu::classify`] with CUDA loaded: a NULL
    /// address, or a range the cache knows for host memory (counted).
    #[inline]
    fn host_hit(&self, addr: u64, len: usize) -> bool {
        let hit = addr == 0 || self.kinds.is_host(addr, len);
        if hit {
            bump(&self.stats.cache_hits);
        }
        hit
    }

    /// Not a host hit: a device entry is trusted only after its buffer id
    /// is re-checked (one driver call), since a freed device range can come
    /// back as host memory (seen on an H200, driver 580: a 16 MiB
    /// `cuMemAlloc` range, freed, was the next 16 MiB `malloc`'s).
    #[inline(never)]
    fn classify_slow(&self, api: &dyn CudaApi, addr: u64, len: usize) -> Result<MemKind, GpuError> {
        if let Some(info) = self.kinds.device(addr) {
            if api.buffer_id(addr) == Some(info.buffer_id) {
                bump(&self.stats.cache_hits);
                return Ok(info.kind);
            }
            self.forget_device(&info);
        }
        Ok(self
            .query(api, addr, len)?
            .map_or(MemKind::Host, |i| i.kind))
    }

    /// Drop a device entry found stale, and everything derived from it.
    fn forget_device(&self, info: &PtrInfo) {
        bump(&self.stats.stale);
        tracing::debug!(target: LOG, "allocation at {:#x} changed (buffer id {}): cache entry dropped", info.base, info.buffer_id);
        self.kinds.remove_device(info.base);
        lock(&self.caches).exports.remove(&info.base);
    }

    /// Full pointer facts for a device or managed address (`None`: host),
    /// with the allocation's buffer id re-checked (one driver call) so that
    /// a freed and re-allocated address is seen as the new allocation.
    pub fn info(&self, addr: u64) -> Result<Option<PtrInfo>, GpuError> {
        match &self.api {
            None => Ok(None),
            Some(api) => self.lookup(api.as_ref(), addr),
        }
    }

    fn lookup(&self, api: &dyn CudaApi, addr: u64) -> Result<Option<PtrInfo>, GpuError> {
        if addr == 0 {
            return Ok(None);
        }
        if let Some(info) = self.kinds.device(addr) {
            if api.buffer_id(addr) == Some(info.buffer_id) {
                bump(&self.stats.cache_hits);
                return Ok(Some(info));
            }
            // Freed (and maybe re-allocated): forget everything derived
            // from the old allocation.
            self.forget_device(&info);
        }
        self.query(api, addr, 1)
    }

    /// Ask the driver about `addr` and cache the answer.
    fn query(&self, api: &dyn CudaApi, addr: u64, len: usize) -> Result<Option<PtrInfo>, GpuError> {
        bump(&self.stats.queries);
        let info = api.query(addr).map_err(|e| {
            tracing::debug!(target: LOG, "classifying {addr:#x}: {e}");
            e
        })?;
        match &info {
            None => self.kinds.insert_host(addr, len),
            Some(i) => {
                // A new allocation may overlap older, freed ones.
                self.kinds.insert_device(i);
                let end = i.base.saturating_add(i.size);
                lock(&self.caches)
                    .exports
                    .retain(|b, _| *b < i.base || *b >= end || *b == i.base);
            }
        }
        Ok(info)
    }

    /// Frees what the layer keeps for reuse: the pooled pinned bounce
    /// buffers, the pooled device temporaries, the device staging buffers
    /// and the peers' IPC mappings (and forgets the classification and
    /// export caches). Called at `MPI_Finalize`, since the process-wide
    /// layer is never dropped; later use simply allocates and maps again.
    pub fn release(&self) {
        lock(&self.bounce).clear();
        self.slots.clear();
        self.ipc_staging.release();
        if let Some(api) = &self.api {
            api.release();
        }
        if let Some(api) = &self.api {
            self.temps.release(api.as_ref());
            let mut c = lock(&self.caches);
            for (_, m) in c.mapped.drain() {
                let _ = api.ipc_close(m.local);
            }
            c.exports.clear();
        }
        self.kinds.clear();
    }

    fn need_api(&self) -> Result<&Arc<dyn CudaApi>, GpuError> {
        self.api
            .as_ref()
            .ok_or_else(|| GpuError::Unavailable(self.status.clone()))
    }

    fn take_bounce(&self, api: &dyn CudaApi, len: usize) -> Result<Box<dyn PinnedBuf>, GpuError> {
        let mut pool = lock(&self.bounce);
        if let Some(i) = pool.iter_mut().position(|b| b.as_mut_slice().len() >= len) {
            return Ok(pool.swap_remove(i));
        }
        drop(pool);
        // Round up so that a stream of slightly different sizes reuses one.
        api.alloc_pinned(len.max(64 << 10).next_power_of_two())
    }

    fn give_bounce(&self, b: Box<dyn PinnedBuf>) {
        let mut pool = lock(&self.bounce);
        if pool.len() < 8 {
            pool.push(b);
        }
    }

    /// Run `f` over a host copy of the `len` device (or managed) bytes at
    /// `addr`; also reports how they were copied.
    pub fn with_read<R>(
        &self,
        addr: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<(R, CopyPath), GpuError> {
        let api = self.need_api()?;
        let mut b = self.take_bounce(api.as_ref(), len)?;
        let s = &mut b.as_mut_slice()[..len];
        let path = if len == 0 {
            CopyPath::CudaCopy
        } else {
            api.copy_to_host(s, addr)?
        };
        let r = f(s);
        self.give_bounce(b);
        Ok((r, path))
    }

    /// Let `f` fill a host buffer of `len` bytes, then copy it to the device
    /// (or managed) memory at `addr`.
    pub fn with_write<R>(
        &self,
        addr: u64,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<(R, CopyPath), GpuError> {
        let api = self.need_api()?;
        let mut b = self.take_bounce(api.as_ref(), len)?;
        let s = &mut b.as_mut_slice()[..len];
        let r = f(s);
        let path = if len == 0 {
            CopyPath::CudaCopy
        } else {
            api.copy_to_device(addr, s)?
        };
        self.give_bounce(b);
        Ok((r, path))
    }

    /// How a small message at `addr` would be copied (for the pml's log).
    pub fn eager_path(&self) -> CopyPath {
        match self.api.as_ref().map(|a| a.facts().gdrcopy.is_ok()) {
            Some(true) => CopyPath::GdrCopy,
            _ => CopyPath::CudaCopy,
        }
    }

    /// The allocation (re-checked: [`Gpu::info`]) that holds all of
    /// `addr..addr+len`: an error for host memory, for a range crossing its
    /// allocation's end and, with `device_only`, for managed memory.
    fn allocation(&self, addr: u64, len: usize, device_only: bool) -> Result<PtrInfo, GpuError> {
        let info = self
            .info(addr)?
            .ok_or_else(|| GpuError::Unsupported(format!("{addr:#x} is not device memory")))?;
        if device_only && !matches!(info.kind, MemKind::Device { .. }) {
            return Err(GpuError::Unsupported(format!(
                "no CUDA IPC for {} memory",
                info.kind.name()
            )));
        }
        if !info.contains(addr, len) {
            return Err(GpuError::BadRange {
                addr,
                len,
                why: format!(
                    "crosses the end of its allocation ({:#x}+{})",
                    info.base, info.size
                ),
            });
        }
        Ok(info)
    }

    /// The IPC descriptor of `len` device bytes at `addr`, for a peer on this
    /// node. Fails for host or managed memory and where the driver refuses.
    pub fn ipc_export(&self, addr: u64, len: usize) -> Result<IpcDesc, GpuError> {
        let api = self.need_api()?;
        let info = self.allocation(addr, len, true)?;
        let cached = lock(&self.caches)
            .exports
            .get(&info.base)
            .filter(|(id, _)| *id == info.buffer_id)
            .map(|(_, h)| *h);
        let handle = match cached {
            Some(h) => h,
            None => {
                let h = api.ipc_handle(info.base)?;
                lock(&self.caches)
                    .exports
                    .insert(info.base, (info.buffer_id, h));
                h
            }
        };
        Ok(IpcDesc {
            handle,
            base: info.base,
            buffer_id: info.buffer_id,
            offset: addr - info.base,
            len: len as u64,
        })
    }

    /// The descriptor of `len` device bytes at `addr` for this process
    /// itself (a device self-send): no IPC handle is made, since CUDA cannot
    /// open one in the process that exported it and the receiver already
    /// shares the address space; so any device allocation qualifies,
    /// stream-ordered pool and VMM memory too. The receiver copies from
    /// `base + offset` directly.
    pub fn self_desc(&self, addr: u64, len: usize) -> Result<IpcDesc, GpuError> {
        self.need_api()?;
        let info = self.allocation(addr, len, false)?;
        Ok(IpcDesc {
            handle: IpcHandle([0; 64]),
            base: info.base,
            buffer_id: info.buffer_id,
            offset: addr - info.base,
            len: len as u64,
        })
    }

    /// The local address of byte `offset` of `d` (a descriptor from `peer`),
    /// mapping the peer's allocation on first use. A cached mapping of an
    /// older allocation at the same base (different buffer id) is closed
    /// first.
    pub fn ipc_map(&self, peer: u32, d: &IpcDesc) -> Result<u64, GpuError> {
        let api = self.need_api()?;
        let key = (peer, d.base);
        let old = lock(&self.caches).mapped.get(&key).copied();
        let local = match old {
            Some(m) if m.buffer_id == d.buffer_id => m.local,
            _ => {
                if let Some(m) = old {
                    bump(&self.stats.ipc_stale_closed);
                    tracing::debug!(target: LOG, "rank {peer}'s allocation at {:#x} changed: closing the old mapping", d.base);
                    lock(&self.caches).mapped.remove(&key);
                    if let Err(e) = api.ipc_close(m.local) {
                        tracing::warn!(target: LOG, "closing a stale IPC mapping of rank {peer}: {e}");
                    }
                }
                let local = api.ipc_open(&d.handle)?;
                bump(&self.stats.ipc_opens);
                lock(&self.caches).mapped.insert(
                    key,
                    Mapped {
                        buffer_id: d.buffer_id,
                        local,
                    },
                );
                local
            }
        };
        Ok(local + d.offset)
    }

    /// Close every mapping of `peer`'s memory and free the staging buffers
    /// kept for it (the peer failed or left).
    pub fn ipc_forget_peer(&self, peer: u32) {
        self.ipc_staging.forget_peer(peer);
        let Some(api) = &self.api else { return };
        let gone: Vec<Mapped> = {
            let mut c = lock(&self.caches);
            let keys: Vec<_> = c.mapped.keys().filter(|k| k.0 == peer).copied().collect();
            keys.iter().filter_map(|k| c.mapped.remove(k)).collect()
        };
        for m in gone {
            let _ = api.ipc_close(m.local);
        }
    }

    /// Copy `len` bytes between device (or managed) addresses.
    pub fn copy_device(&self, dst: u64, src: u64, len: usize) -> Result<(), GpuError> {
        if len == 0 {
            return Ok(());
        }
        self.need_api()?.copy_device(dst, src, len)
    }

    /// Copy device (or managed) bytes at `src` into host memory.
    pub fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<CopyPath, GpuError> {
        if dst.is_empty() {
            return Ok(CopyPath::CudaCopy);
        }
        self.need_api()?.copy_to_host(dst, src)
    }

    /// Copy host bytes into device (or managed) memory at `dst`.
    pub fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<CopyPath, GpuError> {
        if src.is_empty() {
            return Ok(CopyPath::CudaCopy);
        }
        self.need_api()?.copy_to_device(dst, src)
    }

    /// `inout = op(inout, input)` elementwise on the device. If the backend
    /// cannot build or load the kernel ([`GpuError::KernelUnavailable`]),
    /// this and every later reduction of the layer run on host copies of the
    /// operands instead, after one warning naming the cause; any other
    /// error is returned.
    pub fn reduce(
        &self,
        op: ReduceOp,
        ty: ElemType,
        inout: u64,
        input: u64,
        count: usize,
    ) -> Result<(), GpuError> {
        op.check(ty)?;
        if count == 0 {
            return Ok(());
        }
        let api = self.need_api()?;
        if self.no_kernels.get().is_none() {
            match api.reduce(op, ty, inout, input, count) {
                Err(GpuError::KernelUnavailable(why)) => self.kernels_unavailable(why),
                r => return r,
            }
        }
        self.reduce_on_host(api.as_ref(), op, ty, inout, input, count)
    }

    /// Remember (once) that the kernels are unavailable, and say so.
    #[cold]
    fn kernels_unavailable(&self, why: String) {
        if self.no_kernels.set(why).is_ok() {
            bump(&self.stats.kernel_warnings);
            let why = self.no_kernels.get().map_or("", String::as_str);
            tracing::warn!(target: LOG, "device reduction kernels unavailable ({why}); reducing device buffers on the host through copies");
        }
    }

    /// [`Gpu::reduce`] without kernels: both operands to the host, reduce,
    /// the result back.
    fn reduce_on_host(
        &self,
        api: &dyn CudaApi,
        op: ReduceOp,
        ty: ElemType,
        inout: u64,
        input: u64,
        count: usize,
    ) -> Result<(), GpuError> {
        let len = count * ty.size();
        let mut acc = vec![0u8; len];
        let mut inc = vec![0u8; len];
        api.copy_to_host(&mut acc, inout)?;
        api.copy_to_host(&mut inc, input)?;
        host_reduce::host_reduce(op, ty, &mut acc, &inc);
        api.copy_to_device(inout, &acc)?;
        bump(&self.stats.host_reduces);
        Ok(())
    }

    /// Select `local_rank % devices` as this thread's device (the
    /// `--gpu-bind local-rank` policy). `Ok(None)` without CUDA devices.
    pub fn select_device(&self, local_rank: usize) -> Result<Option<i32>, GpuError> {
        let Some(api) = &self.api else {
            return Ok(None);
        };
        let n = api.device_count();
        if n == 0 {
            return Ok(None);
        }
        let ordinal = (local_rank % n) as i32;
        api.set_device(ordinal)?;
        Ok(Some(ordinal))
    }

    /// The PCI bus id of the GPU a rank that is `local_rank` on its node
    /// uses by default (`local_rank % gpus`, as [`Gpu::select_device`]
    /// picks), where CUDA says: a NIC is chosen near it.
    pub fn bus_id_for(&self, local_rank: usize) -> Option<String> {
        let api = self.api.as_ref()?;
        let n = api.device_count();
        if n == 0 {
            return None;
        }
        api.pci_bus_id((local_rank % n) as i32)
    }

    /// What a NIC needs of the GPU for GPUDirect RDMA: `(a device is
    /// there, its memory exports as dma-bufs)`, each `Ok` or why not.
    pub fn gpudirect_probe(&self) -> (Result<(), String>, Result<(), String>) {
        match &self.api {
            Some(api) if api.device_count() > 0 => (Ok(()), api.dmabuf_supported()),
            Some(_) => {
                let no = Err("CUDA sees no device".to_string());
                (no.clone(), no)
            }
            None => {
                let no = Err(format!("CUDA is not in use ({})", self.status()));
                (no.clone(), no)
            }
        }
    }

    /// Prepare `len` bytes of device memory at `addr` for a NIC to read or
    /// write directly (GPUDirect RDMA): memory operations on its allocation
    /// become synchronous ([`CudaApi::sync_memops`]).
    pub fn prepare_for_nic(&self, addr: u64) -> Result<(), GpuError> {
        self.need_api()?.sync_memops(addr)
    }

    /// Export device memory as a dma-buf for a NIC (GPUDirect RDMA hook).
    pub fn export_dmabuf(&self, addr: u64, len: usize) -> Result<api::DmaBufExport, GpuError> {
        self.need_api()?.export_dmabuf(addr, len)
    }

    /// A snapshot of the counters: (queries, cache hits, stale, IPC opens,
    /// stale IPC closes).
    pub fn counters(&self) -> [u64; 5] {
        let s = &self.stats;
        [
            get(&s.queries),
            get(&s.cache_hits),
            get(&s.stale),
            get(&s.ipc_opens),
            get(&s.ipc_stale_closed),
        ]
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if let Some(api) = &self.api {
            self.temps.release(api.as_ref());
            let c = self.caches.get_mut().unwrap_or_else(|p| p.into_inner());
            for (_, m) in c.mapped.drain() {
                let _ = api.ipc_close(m.local);
            }
        }
    }
}

#[cfg(test)]
mod tests;
