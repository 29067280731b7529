//! The real backend: [`CudaApi`] over the CUDA driver API and NVRTC, both
//! loaded at run time by `cudarc`, and GDRCopy (`libgdrapi`) where present.
//!
//! - `driver.rs`: every `unsafe` call (driver, NVRTC, GDRCopy), as small safe
//!   wrappers.
//! - `kernels.rs`: the CUDA C source of the reduction kernels.
//! - this file: policy: which context, which copy path, the caches.
//!
//! Contexts. [`load`] only initialises the driver and counts devices: no
//! context is created and nothing is allocated. Before an operation on a
//! device pointer, the calling thread's current context is used if it has
//! one; otherwise the primary context of the pointer's device is retained
//! (once per device, released when the backend is dropped) and made
//! current. Reductions and device allocations must run on the device that
//! holds the data: if the current context belongs to another device, the
//! primary context of the right one is pushed for the call and popped after.
//! Device 0 is only touched when data lives there (or, for pinned host
//! memory, when no device pointer has been seen yet).
//!
//! Memory the driver does not know (`CUDA_ERROR_INVALID_VALUE`, memory type
//! 0) and host memory registered or allocated through CUDA (memory type
//! `HOST`) are host memory. Stream-ordered (`cudaMallocAsync` pool) and VMM
//! (`cuMemCreate`/`cuMemMap`) allocations classify as device memory (their
//! buffer id and range attributes work), but legacy CUDA IPC
//! (`cuIpcGetMemHandle`) does not work for them: [`CudaApi::ipc_capable`]
//! says so (`CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE`), and
//! [`CudaApi::ipc_handle`] fails with [`GpuError::Unsupported`]; the gpu
//! layer then copies such memory into a device staging buffer of its own
//! (`ipc_staging.rs`) and exports that.
//!
//! Reduction kernels are compiled by NVRTC on first use and loaded per
//! context. A failure to open NVRTC, to compile, or to load the PTX
//! (`cuModuleLoadData`: an NVRTC newer than the driver gives
//! `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`) is [`GpuError::KernelUnavailable`],
//! on which [`crate::Gpu::reduce`] reduces on the host instead.

mod driver;
mod kernels;

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::api::*;
use crate::MemKind;

use driver::{Ctx, Res};

/// Tracing target.
const LOG: &str = "gpu";

/// Largest copy made through GDRCopy; larger ones use `cuMemcpy`.
pub const GDRCOPY_LIMIT: usize = 8 << 10;

/// Size (and alignment) of the windows of device memory GDRCopy pins.
pub const GDRCOPY_WINDOW: u64 = 2 << 20;

pub use crate::api::{dmabuf_span, DMABUF_ALIGN};

const _: () = assert!(
    DMABUF_ALIGN == driver::GPU_PAGE,
    "dma-buf exports cover GPU pages"
);

/// Load the CUDA driver (`libcuda.so`), `cuInit(0)` and count devices.
/// Creates no context. [`GpuError::Unavailable`] when the library is absent,
/// lacks a function gmpi calls, or fails to initialise; never panics.
pub fn load() -> Result<Arc<dyn CudaApi>, GpuError> {
    if !driver::driver_present() {
        return Err(GpuError::Unavailable(
            "the CUDA driver library (libcuda.so) was not found".into(),
        ));
    }
    // cudarc resolves each symbol on its first call and panics if it is
    // missing: check all of them now.
    let missing = driver::missing_driver_symbols(driver::DRIVER_SYMBOLS);
    if !missing.is_empty() {
        return Err(GpuError::Unavailable(format!(
            "the CUDA driver is too old: it lacks {}",
            missing.join(", ")
        )));
    }
    let optional = driver::missing_driver_symbols(&[driver::DMABUF_SYMBOL, driver::CTX_ID_SYMBOL]);
    let unavailable = |e: GpuError| GpuError::Unavailable(e.to_string());
    driver::init().map_err(unavailable)?;
    let devices = driver::device_count().map_err(unavailable)?.max(0);
    let gdr = match driver::Gdr::open() {
        Ok(g) => Ok(g),
        Err(why) => {
            tracing::debug!(target: LOG, "GDRCopy not used: {why}");
            Err(why)
        }
    };
    Ok(Arc::new(Cuda {
        inner: Arc::new(Inner {
            devices,
            has_dmabuf: !optional.contains(&driver::DMABUF_SYMBOL),
            has_ctx_id: !optional.contains(&driver::CTX_ID_SYMBOL),
            primary: Mutex::default(),
            held: AtomicU64::new(0),
            last_ordinal: AtomicI32::new(-1),
            nvrtc: OnceLock::new(),
            ptx: Mutex::default(),
            kernels: Mutex::default(),
            ipc_ctx: Mutex::default(),
            streams: Mutex::default(),
            inflight: Mutex::default(),
            d2d: Mutex::default(),
            next_ticket: AtomicU64::new(0),
            gdr: gdr.map(|g| GdrState {
                gdr: g,
                pins: Mutex::default(),
            }),
            facts: OnceLock::new(),
        }),
    }))
}

/// A failed NVRTC compile or module load (`cuModuleLoadData`,
/// `cuModuleGetFunction`) as [`GpuError::KernelUnavailable`], so that
/// [`crate::Gpu::reduce`] falls back to the host; other errors (context,
/// launch, copies) keep their kind.
fn jit_failed(e: GpuError) -> GpuError {
    match e {
        GpuError::Driver { call, msg } => {
            GpuError::KernelUnavailable(format!("{call} failed: {msg}"))
        }
        other => other,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The real backend. See the module documentation.
#[derive(Debug)]
pub struct Cuda {
    inner: Arc<Inner>,
}

/// One pinned window of an allocation in the GDRCopy cache (keyed by the
/// window's start).
#[derive(Debug)]
struct Pin {
    /// End of the window.
    end: u64,
    /// The allocation's buffer id.
    buffer_id: u64,
    /// `None`: pinning failed for this allocation; use `cuMemcpy`.
    map: Option<driver::GdrMapping>,
}

#[derive(Debug)]
struct GdrState {
    gdr: driver::Gdr,
    /// By allocation base.
    pins: Mutex<BTreeMap<u64, Pin>>,
}

/// What a stream carries: staging copies (to the host or not), or
/// device-to-device copies (IPC receives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Lane {
    Staging(bool),
    DeviceToDevice,
}

#[derive(Debug)]
struct Inner {
    devices: i32,
    has_dmabuf: bool,
    has_ctx_id: bool,
    /// Primary contexts this backend retained, by ordinal.
    primary: Mutex<HashMap<i32, Ctx>>,
    /// The last current context whose device's primary context is known to
    /// be retained ([`Inner::hold`]; 0: none yet).
    held: AtomicU64,
    /// Device of the last device pointer classified (-1: none yet).
    last_ordinal: AtomicI32,
    /// NVRTC, opened on the first reduction (or why not).
    nvrtc: OnceLock<Result<driver::Nvrtc, String>>,
    /// Compiled PTX by (op, type).
    ptx: Mutex<HashMap<(ReduceOp, ElemType), Arc<CString>>>,
    /// Loaded kernels by (context id, op, type).
    kernels: Mutex<HashMap<(u64, ReduceOp, ElemType), driver::Func>>,
    /// The context each IPC mapping was opened in.
    ipc_ctx: Mutex<HashMap<u64, Ctx>>,
    /// The staging streams, by context (a stream belongs to the context it
    /// was made in, and the copy's event is made in the current one),
    /// direction (to host?) and lane, made on first use.
    streams: Mutex<HashMap<(u64, Lane, u32), Arc<driver::Stream>>>,
    /// Asynchronous copies in flight, by ticket.
    inflight: Mutex<HashMap<Ticket, driver::InFlight>>,
    /// Asynchronous device-to-device copies in flight, by ticket.
    d2d: Mutex<HashMap<Ticket, driver::DeviceCopy>>,
    next_ticket: AtomicU64,
    /// GDRCopy, or why not.
    gdr: Result<GdrState, String>,
    /// [`CudaApi::facts`], gathered once (they do not change while the
    /// process runs, and `Gpu::eager_path` asks on every eager message).
    facts: OnceLock<Facts>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(g) = &self.gdr {
            let pins = std::mem::take(&mut *lock(&g.pins));
            for (_, p) in pins {
                if let Some(m) = p.map {
                    g.gdr.release(m);
                }
            }
        }
        // What lives in a context goes first, while the contexts this
        // backend retained still exist: a copy in flight waits for its event,
        // streams are destroyed. (Fields drop after this function, too late.)
        lock(&self.inflight).clear();
        lock(&self.d2d).clear();
        lock(&self.streams).clear();
        for (ordinal, _) in lock(&self.primary).drain() {
            if let Err(e) = driver::primary_ctx_release(ordinal) {
                tracing::debug!(target: LOG, "releasing the primary context of device {ordinal}: {e}");
            }
        }
    }
}

impl Inner {
    /// The primary context of `ordinal`, retained once.
    fn primary(&self, ordinal: i32) -> Res<Ctx> {
        let mut p = lock(&self.primary);
        if let Some(c) = p.get(&ordinal) {
            return Ok(*c);
        }
        let c = driver::primary_ctx_retain(ordinal)?;
        p.insert(ordinal, c);
        Ok(c)
    }

    /// A device to fall back on when nothing says which: the last one a
    /// device pointer lived on, else device 0.
    fn fallback_ordinal(&self) -> i32 {
        self.last_ordinal.load(Ordering::Relaxed).max(0)
    }

    /// Make sure the thread has a current context: keep the one it has, or
    /// make the primary context of `ordinal()` current.
    fn ensure_ctx(&self, ordinal: impl FnOnce() -> i32) -> Res<Ctx> {
        if let Some(c) = driver::ctx_current()? {
            self.hold(c)?;
            return Ok(c);
        }
        let c = self.primary(ordinal())?;
        driver::ctx_set_current(c)?;
        Ok(c)
    }

    /// Keep the device of the current context `c` alive until this backend
    /// goes: retain its primary context. The application's context (cudarc's
    /// `CudaContext`, the CUDA runtime's) is the primary one, and the
    /// application may release it before `MPI_Finalize`; without a reference
    /// of ours the context is destroyed under our pinned buffers, streams and
    /// events (seen on an H200: `CUDA_ERROR_CONTEXT_IS_DESTROYED` at
    /// finalize, then a crash). One atomic load once `c` is known.
    fn hold(&self, c: Ctx) -> Res<()> {
        let key = c.id() as u64;
        if self.held.load(Ordering::Relaxed) == key {
            return Ok(());
        }
        self.primary(driver::ctx_device()?)?;
        self.held.store(key, Ordering::Relaxed);
        Ok(())
    }

    /// The stream of context `c` for `kind` of copy and `lane` (modulo
    /// [`crate::stage::LANES`]), made on first use. A stream belongs to the
    /// context it was made in, so the key holds the context's id.
    fn stream(&self, c: Ctx, kind: Lane, lane: u32) -> Res<Arc<driver::Stream>> {
        let ctx_key = if self.has_ctx_id {
            driver::ctx_unique_id(c)?
        } else {
            c.id() as u64
        };
        let key = (ctx_key, kind, lane % crate::stage::LANES);
        let mut m = lock(&self.streams);
        if let Some(s) = m.get(&key) {
            return Ok(s.clone());
        }
        let s = Arc::new(driver::stream_create()?);
        m.insert(key, s.clone());
        Ok(s)
    }

    /// The device of `addr`, or the fallback if the driver cannot say.
    fn ordinal_of(&self, addr: u64) -> i32 {
        driver::pointer_ordinal(addr)
            .ok()
            .filter(|o| *o >= 0 && *o < self.devices)
            .unwrap_or_else(|| self.fallback_ordinal())
    }

    /// Run `f` with a context of device `ordinal` current: the thread's own
    /// if it is on that device, else the primary context (set current if
    /// the thread has none, pushed and popped around `f` otherwise).
    fn on_device<R>(&self, ordinal: i32, f: impl FnOnce(Ctx) -> Res<R>) -> Res<R> {
        match driver::ctx_current()? {
            Some(c) if driver::ctx_device()? == ordinal => {
                self.hold(c)?;
                f(c)
            }
            None => {
                let c = self.primary(ordinal)?;
                driver::ctx_set_current(c)?;
                f(c)
            }
            Some(_) => {
                let c = self.primary(ordinal)?;
                driver::ctx_push(c)?;
                let r = f(c);
                let popped = driver::ctx_pop();
                let r = r?;
                popped?;
                Ok(r)
            }
        }
    }

    /// The loaded reduction kernel for `op` on `ty` in context `c`
    /// (current).
    fn kernel(&self, c: Ctx, op: ReduceOp, ty: ElemType) -> Res<driver::Func> {
        let ctx_key = if self.has_ctx_id {
            driver::ctx_unique_id(c)?
        } else {
            c.id() as u64
        };
        let key = (ctx_key, op, ty);
        if let Some(f) = lock(&self.kernels).get(&key) {
            return Ok(*f);
        }
        let ptx = {
            let mut cache = lock(&self.ptx);
            match cache.get(&(op, ty)) {
                Some(p) => p.clone(),
                None => {
                    let src = kernels::kernel_source(op, ty);
                    let nvrtc = self.nvrtc()?;
                    let p = Arc::new(
                        nvrtc
                            .compile_ptx(&src, &kernels::kernel_name(op, ty))
                            .map_err(jit_failed)?,
                    );
                    tracing::debug!(target: LOG, "compiled {}", kernels::kernel_name(op, ty));
                    cache.insert((op, ty), p.clone());
                    p
                }
            }
        };
        let f = driver::load_function(&ptx, &kernels::kernel_name(op, ty)).map_err(jit_failed)?;
        lock(&self.kernels).insert(key, f);
        Ok(f)
    }

    /// NVRTC, opened on first use; [`GpuError::KernelUnavailable`] if it
    /// cannot be.
    fn nvrtc(&self) -> Res<&driver::Nvrtc> {
        self.nvrtc
            .get_or_init(driver::Nvrtc::open)
            .as_ref()
            .map_err(|why| GpuError::KernelUnavailable(format!("NVRTC cannot be used: {why}")))
    }

    /// Copy through GDRCopy if `addr..addr+len` is small device memory that
    /// can be pinned. `Ok(false)`: not done, use `cuMemcpy`.
    ///
    /// Pins are cached per [`GDRCOPY_WINDOW`]-aligned window of an
    /// allocation (not whole allocations, which may be gigabytes of BAR
    /// space), clamped to the allocation rounded out to GPU pages, and keyed
    /// by window start; every use re-checks the allocation's buffer id, and
    /// a stale window (freed or re-allocated memory) is unmapped and unpinned.
    /// A window that cannot be pinned (IPC mappings of another process'
    /// memory, for example) is remembered, and its copies use `cuMemcpy`.
    fn gdr_copy(
        &self,
        addr: u64,
        len: usize,
        op: impl FnOnce(&driver::Gdr, &driver::GdrMapping, usize) -> Res<()>,
    ) -> Res<bool> {
        let Ok(g) = &self.gdr else { return Ok(false) };
        if len > GDRCOPY_LIMIT {
            return Ok(false);
        }
        let end = addr.saturating_add(len as u64);
        let mut pins = lock(&g.pins);
        let find = |pins: &BTreeMap<u64, Pin>| {
            pins.range(..=addr)
                .next_back()
                .filter(|(_, p)| addr < p.end)
                .map(|(s, p)| (*s, p.buffer_id))
        };
        let mut hit = find(&pins);
        if let Some((start, id)) = hit {
            if driver::pointer_buffer_id(addr).ok() != Some(id) {
                // Freed (and maybe re-allocated), or a neighbour sharing a
                // GPU page: drop the entry.
                if let Some(m) = pins.remove(&start).and_then(|p| p.map) {
                    g.gdr.release(m);
                }
                hit = None;
            }
        }
        let start = match hit {
            Some((s, _)) => s,
            None => {
                let Some(a) = driver::pointer_attributes(addr)? else {
                    return Ok(false);
                };
                if a.is_managed || a.memory_type != driver::MEMORYTYPE_DEVICE {
                    return Ok(false);
                }
                let (base, size) = if a.range_size != 0 {
                    (a.range_start, a.range_size)
                } else {
                    driver::mem_address_range(addr)?
                };
                let page = driver::GPU_PAGE;
                let lo = base & !(page - 1);
                let hi = base.saturating_add(size).next_multiple_of(page);
                let start = (addr & !(GDRCOPY_WINDOW - 1)).max(lo);
                let wend = (addr & !(GDRCOPY_WINDOW - 1))
                    .saturating_add(GDRCOPY_WINDOW)
                    .min(hi);
                // Older entries overlapping the window are dead (or a
                // neighbour's, which is re-pinned when next used).
                let dead: Vec<u64> = pins
                    .range(..wend)
                    .filter(|(_, p)| p.end > start)
                    .map(|(s, _)| *s)
                    .collect();
                for s in dead {
                    if let Some(m) = pins.remove(&s).and_then(|p| p.map) {
                        g.gdr.release(m);
                    }
                }
                let map = match driver::set_sync_memops(base)
                    .map_err(|e| e.to_string())
                    .and_then(|()| g.gdr.pin_map(start, (wend - start) as usize))
                {
                    Ok(m) => Some(m),
                    Err(why) => {
                        tracing::debug!(target: LOG, "GDRCopy cannot map {start:#x}..{wend:#x}: {why}; using cuMemcpy there");
                        None
                    }
                };
                pins.insert(
                    start,
                    Pin {
                        end: wend,
                        buffer_id: a.buffer_id,
                        map,
                    },
                );
                start
            }
        };
        let p = &pins[&start];
        let Some(m) = &p.map else { return Ok(false) };
        if end > p.end {
            // Crosses the window's end: rare for small copies.
            return Ok(false);
        }
        op(&g.gdr, m, (addr - m.start) as usize)?;
        Ok(true)
    }
}

/// Pinned host memory from `cuMemHostAlloc`; keeps the backend (and so the
/// context it was allocated in) alive until it is freed.
#[derive(Debug)]
struct Pinned {
    mem: Option<driver::HostAlloc>,
    ctx: Ctx,
    _keep: Arc<Inner>,
}

impl PinnedBuf for Pinned {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        self.mem.as_mut().map_or(&mut [], |m| m.as_mut_slice())
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // cuMemFreeHost wants a context: push ours if the thread has none.
        let pushed =
            matches!(driver::ctx_current(), Ok(None)) && driver::ctx_push(self.ctx).is_ok();
        drop(self.mem.take());
        if pushed {
            let _ = driver::ctx_pop();
        }
    }
}

impl CudaApi for Cuda {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device_count(&self) -> usize {
        self.inner.devices as usize
    }

    fn query(&self, addr: u64) -> Result<Option<PtrInfo>, GpuError> {
        let Some(a) = driver::pointer_attributes(addr)? else {
            return Ok(None);
        };
        let kind = if a.is_managed {
            MemKind::Managed
        } else if a.memory_type == driver::MEMORYTYPE_DEVICE {
            MemKind::Device { ordinal: a.ordinal }
        } else {
            // 0 (unknown to CUDA), HOST (pinned or registered host memory),
            // ARRAY (not addressable).
            return Ok(None);
        };
        let (base, size) = if a.range_size != 0 {
            (a.range_start, a.range_size)
        } else {
            driver::mem_address_range(addr)?
        };
        if let MemKind::Device { ordinal } = kind {
            self.inner.last_ordinal.store(ordinal, Ordering::Relaxed);
        }
        tracing::trace!(target: LOG, "{addr:#x}: {} in {base:#x}+{size}, buffer {}, context {:#x}", kind.name(), a.buffer_id, a.context);
        Ok(Some(PtrInfo {
            kind,
            base,
            size,
            buffer_id: a.buffer_id,
        }))
    }

    fn buffer_id(&self, addr: u64) -> Option<u64> {
        driver::pointer_buffer_id(addr).ok().filter(|id| *id != 0)
    }

    fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<CopyPath, GpuError> {
        let len = dst.len();
        self.inner.ensure_ctx(|| self.inner.ordinal_of(src))?;
        if self
            .inner
            .gdr_copy(src, len, |g, m, off| g.copy_from(m, off, dst))?
        {
            return Ok(CopyPath::GdrCopy);
        }
        // Synchronous: returns once the bytes are in `dst`.
        driver::memcpy_dtoh(dst, src)?;
        Ok(CopyPath::CudaCopy)
    }

    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<CopyPath, GpuError> {
        self.inner.ensure_ctx(|| self.inner.ordinal_of(dst))?;
        if self
            .inner
            .gdr_copy(dst, src.len(), |g, m, off| g.copy_to(m, off, src))?
        {
            return Ok(CopyPath::GdrCopy);
        }
        driver::memcpy_htod(dst, src)?;
        // From pageable memory the call may return before the DMA ends.
        driver::sync_default_stream()?;
        Ok(CopyPath::CudaCopy)
    }

    fn copy_device(&self, dst: u64, src: u64, len: usize) -> Result<(), GpuError> {
        self.inner.ensure_ctx(|| self.inner.ordinal_of(src))?;
        driver::memcpy(dst, src, len)?;
        // Device-to-device cuMemcpy does not wait for the copy.
        driver::sync_default_stream()
    }

    fn alloc_pinned(&self, len: usize) -> Result<Box<dyn PinnedBuf>, GpuError> {
        let ctx = self.inner.ensure_ctx(|| self.inner.fallback_ordinal())?;
        let mem = driver::mem_host_alloc(len)?;
        Ok(Box::new(Pinned {
            mem: Some(mem),
            ctx,
            _keep: self.inner.clone(),
        }))
    }

    fn copy_async(
        &self,
        dir: CopyDir,
        dev: u64,
        host: Box<dyn PinnedBuf>,
        len: usize,
        lane: u32,
    ) -> Result<Ticket, (GpuError, Box<dyn PinnedBuf>)> {
        let to_host = dir == CopyDir::ToHost;
        let ordinal = self.inner.ordinal_of(dev);
        let mut host = Some(host);
        let issued = self.inner.on_device(ordinal, |c| {
            let stream = self.inner.stream(c, Lane::Staging(to_host), lane)?;
            let h = host.take().expect("the buffer is taken once");
            match driver::InFlight::issue(to_host, dev, h, len, &stream) {
                Ok(f) => Ok(Ok(f)),
                Err((e, h)) => Ok(Err((e, h))),
            }
        });
        let f = match issued {
            Ok(Ok(f)) => f,
            Ok(Err((e, h))) => return Err((e, h)),
            Err(e) => return Err((e, host.take().expect("not issued"))),
        };
        let t = Ticket(self.inner.next_ticket.fetch_add(1, Ordering::Relaxed) + 1);
        lock(&self.inner.inflight).insert(t, f);
        Ok(t)
    }

    fn release(&self) {
        // In-flight copies wait for their events as they drop, before the
        // streams they ran on are destroyed.
        lock(&self.inner.inflight).clear();
        lock(&self.inner.d2d).clear();
        lock(&self.inner.streams).clear();
    }

    fn copy_poll(&self, t: Ticket) -> Option<Landed> {
        let mut m = lock(&self.inner.inflight);
        let landed = m.get_mut(&t)?.poll()?;
        m.remove(&t);
        Some(landed)
    }

    fn copy_device_async(
        &self,
        dst: u64,
        src: u64,
        len: usize,
        lane: u32,
    ) -> Result<Ticket, GpuError> {
        let ordinal = self.inner.ordinal_of(dst);
        let f = self.inner.on_device(ordinal, |c| {
            let stream = self.inner.stream(c, Lane::DeviceToDevice, lane)?;
            driver::DeviceCopy::issue(dst, src, len, &stream)
        })?;
        let t = Ticket(self.inner.next_ticket.fetch_add(1, Ordering::Relaxed) + 1);
        lock(&self.inner.d2d).insert(t, f);
        Ok(t)
    }

    fn device_poll(&self, t: Ticket) -> Option<Result<(), GpuError>> {
        let mut m = lock(&self.inner.d2d);
        let res = m.get_mut(&t)?.poll()?;
        m.remove(&t);
        Some(res)
    }

    fn alloc_device(&self, len: usize, near: u64) -> Result<u64, GpuError> {
        let ordinal = self.inner.ordinal_of(near);
        self.inner.on_device(ordinal, |_| driver::mem_alloc(len))
    }

    fn free_device(&self, ptr: u64) -> Result<(), GpuError> {
        let ordinal = self.inner.ordinal_of(ptr);
        self.inner.on_device(ordinal, |_| driver::mem_free(ptr))
    }

    fn ipc_capable(&self, addr: u64) -> Result<bool, GpuError> {
        driver::pointer_ipc_capable(addr)
    }

    /// Fails with [`GpuError::Unsupported`] for allocations legacy CUDA IPC
    /// cannot export (stream-ordered pool and VMM memory).
    fn ipc_handle(&self, base: u64) -> Result<IpcHandle, GpuError> {
        if let Ok(false) = driver::pointer_ipc_capable(base) {
            return Err(GpuError::Unsupported(format!(
                "the allocation at {base:#x} cannot be exported by CUDA IPC (stream-ordered pool or VMM memory)"
            )));
        }
        let ordinal = self.inner.ordinal_of(base);
        self.inner
            .on_device(ordinal, |_| driver::ipc_get_handle(base))
            .map(IpcHandle)
    }

    fn ipc_open(&self, h: &IpcHandle) -> Result<u64, GpuError> {
        let ctx = self.inner.ensure_ctx(|| self.inner.fallback_ordinal())?;
        let p = driver::ipc_open(&h.0)?;
        lock(&self.inner.ipc_ctx).insert(p, ctx);
        Ok(p)
    }

    fn ipc_close(&self, mapped: u64) -> Result<(), GpuError> {
        let ctx = lock(&self.inner.ipc_ctx).remove(&mapped);
        match (ctx, driver::ctx_current()?) {
            (Some(c), cur) if cur != Some(c) => {
                driver::ctx_push(c)?;
                let r = driver::ipc_close(mapped);
                let popped = driver::ctx_pop();
                r?;
                popped
            }
            (_, None) => {
                self.inner.ensure_ctx(|| self.inner.fallback_ordinal())?;
                driver::ipc_close(mapped)
            }
            _ => driver::ipc_close(mapped),
        }
    }

    fn reduce(
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
        self.inner.nvrtc()?;
        let ordinal = self.inner.ordinal_of(inout);
        self.inner.on_device(ordinal, |c| {
            let f = self.inner.kernel(c, op, ty)?;
            let n = count as u64;
            driver::launch_reduce(f, kernels::grid_for(n), kernels::BLOCK, inout, input, n)
        })
    }

    /// The fd covers [`dmabuf_span`]`(addr, len)`: the range rounded out to
    /// 64 KiB GPU pages (the driver requires page-aligned ranges).
    fn export_dmabuf(&self, addr: u64, len: usize) -> Result<DmaBufExport, GpuError> {
        if !self.inner.has_dmabuf {
            return Err(GpuError::Unsupported(
                "the CUDA driver lacks cuMemGetHandleForAddressRange (dma-buf export)".into(),
            ));
        }
        let (start, span) = dmabuf_span(addr, len);
        let ordinal = self.inner.ordinal_of(addr);
        self.inner
            .on_device(ordinal, |_| driver::dmabuf_fd(start, span))
            .map(|fd| DmaBufExport::of_span(fd, addr, len))
    }

    fn set_device(&self, ordinal: i32) -> Result<(), GpuError> {
        if ordinal < 0 || ordinal >= self.inner.devices {
            return Err(GpuError::Unsupported(format!(
                "no CUDA device {ordinal} ({} visible)",
                self.inner.devices
            )));
        }
        if let Some(_c) = driver::ctx_current()? {
            if driver::ctx_device()? == ordinal {
                return Ok(());
            }
        }
        let c = self.inner.primary(ordinal)?;
        driver::ctx_set_current(c)?;
        self.inner.last_ordinal.store(ordinal, Ordering::Relaxed);
        Ok(())
    }

    fn facts(&self) -> Facts {
        self.inner
            .facts
            .get_or_init(|| self.inner.gather_facts())
            .clone()
    }

    fn dmabuf_supported(&self) -> Result<(), String> {
        self.inner.dmabuf_supported()
    }

    fn pci_bus_id(&self, ordinal: i32) -> Option<String> {
        driver::device_pci_bus_id(ordinal).ok()
    }

    fn sync_memops(&self, addr: u64) -> Result<(), GpuError> {
        driver::set_sync_memops(addr)
    }
}

impl Inner {
    /// Whether every visible device exports dma-bufs.
    fn dmabuf_supported(&self) -> Result<(), String> {
        let n = self.devices;
        if !self.has_dmabuf {
            return Err("the driver lacks cuMemGetHandleForAddressRange".to_string());
        }
        if n == 0 {
            return Err("no device".to_string());
        }
        let no: Vec<String> = (0..n)
            .filter(|i| !matches!(driver::device_dmabuf_supported(*i), Ok(true)))
            .map(|i| i.to_string())
            .collect();
        if no.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0 on device(s) {} (needs the open kernel modules)",
                no.join(", ")
            ))
        }
    }

    fn gather_facts(&self) -> Facts {
        let driver_version = driver::driver_version()
            .ok()
            .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
        let n = self.devices;
        let devices = (0..n)
            .map(|i| {
                let name = driver::device_name(i).unwrap_or_else(|e| format!("? ({e})"));
                let mem = driver::device_total_mem(i)
                    .map(|b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64))
                    .unwrap_or_else(|e| format!("? ({e})"));
                let pci = driver::device_pci_bus_id(i).unwrap_or_else(|e| format!("? ({e})"));
                format!("{i}: {name}, {mem}, PCI {pci}")
            })
            .collect();
        let gdrcopy = match &self.gdr {
            Ok(g) => Ok(g.gdr.version().to_string()),
            Err(why) => Err(why.clone()),
        };
        let dmabuf = self.dmabuf_supported();
        let peer_access = (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b)))
            .filter(|(a, b)| a != b && matches!(driver::can_access_peer(*a, *b), Ok(true)))
            .collect();
        Facts {
            driver_version,
            devices,
            gdrcopy,
            dmabuf,
            peer_access,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_is_unavailable() {
        if driver::driver_present() {
            eprintln!("note: a CUDA driver is present here; no_driver_is_unavailable skipped");
            return;
        }
        match load() {
            Err(GpuError::Unavailable(why)) => assert!(why.contains("libcuda"), "{why}"),
            Err(e) => panic!("expected Unavailable, got {e}"),
            Ok(_) => panic!("loaded CUDA without a driver"),
        }
    }

    /// On a GPU machine (this test binary runs in `tests/device/run.sh`):
    /// `cuMemGetHandleForAddressRange` gives a dma-buf of `cuMemAlloc`
    /// memory that covers the exported pages, which is what GPUDirect RDMA
    /// registers (`ibv_reg_dmabuf_mr`); or, where the GPU says it cannot,
    /// the export fails with an error, not a crash. Says SKIPPED elsewhere.
    #[test]
    fn a_real_gpu_exports_device_memory_as_a_dma_buf() {
        if !driver::driver_present() {
            eprintln!("SKIPPED a_real_gpu_exports_device_memory_as_a_dma_buf: no CUDA driver here");
            return;
        }
        let api = match load() {
            Ok(a) if a.device_count() > 0 => a,
            Ok(_) => {
                eprintln!("SKIPPED a_real_gpu_exports_device_memory_as_a_dma_buf: no device");
                return;
            }
            Err(e) => {
                eprintln!("SKIPPED a_real_gpu_exports_device_memory_as_a_dma_buf: {e}");
                return;
            }
        };
        let len = 3 << 20;
        let d = api.alloc_device(len, 0).expect("cuMemAlloc");
        let (addr, n) = (d + 4096, 1 << 20);
        match api.dmabuf_supported() {
            Ok(()) => {
                let e = api
                    .export_dmabuf(addr, n)
                    .expect("a dma-buf of cuMemAlloc memory");
                let (start, span) = dmabuf_span(addr, n);
                assert_eq!(e.offset, addr - start);
                let size = std::fs::File::from(e.fd.try_clone().expect("dup"))
                    .metadata()
                    .expect("fstat of the dma-buf")
                    .len();
                eprintln!(
                    "note: dma-buf export of cuMemAlloc memory: {span} B from {start:#x}, offset {}, fstat size {size}",
                    e.offset
                );
                assert!(size == 0 || size >= e.offset + n as u64, "size {size}");
                // btl-ib's device cache registers whole allocations.
                let whole = api
                    .export_dmabuf(d, len)
                    .expect("a dma-buf of the whole allocation");
                assert_eq!(whole.offset, d - dmabuf_span(d, len).0);
            }
            Err(why) => {
                eprintln!("note: this GPU does not export dma-bufs: {why}");
                assert!(api.export_dmabuf(addr, n).is_err());
            }
        }
        api.free_device(d).expect("cuMemFree");
    }

    /// On a GPU machine: an address freed and allocated again comes back
    /// with another buffer id, which is all that keeps btl-ib's device
    /// registration cache (and the gpu layer's classification cache) from
    /// serving the old allocation's entry. Says SKIPPED elsewhere, and
    /// where the driver never hands the same address out again.
    #[test]
    fn a_real_gpu_gives_a_reallocated_address_a_new_buffer_id() {
        let name = "a_real_gpu_gives_a_reallocated_address_a_new_buffer_id";
        let api = match driver::driver_present().then(load) {
            Some(Ok(a)) if a.device_count() > 0 => a,
            _ => {
                eprintln!("SKIPPED {name}: no CUDA device here");
                return;
            }
        };
        let len = 4 << 20;
        let d = api.alloc_device(len, 0).expect("cuMemAlloc");
        let id = api.buffer_id(d).expect("a buffer id");
        api.free_device(d).expect("cuMemFree");
        let mut held = Vec::new();
        let mut again = None;
        for _ in 0..16 {
            let e = api.alloc_device(len, 0).expect("cuMemAlloc");
            if e == d {
                again = Some(e);
                break;
            }
            held.push(e);
        }
        match again {
            Some(e) => {
                let new = api.buffer_id(e).expect("a buffer id");
                eprintln!("note: {d:#x} allocated again: buffer id {id} then {new}");
                assert_ne!(new, id, "the same buffer id for a new allocation");
                api.free_device(e).expect("cuMemFree");
            }
            None => eprintln!("SKIPPED {name}: the driver did not hand {d:#x} out again"),
        }
        for e in held {
            api.free_device(e).expect("cuMemFree");
        }
    }

    #[test]
    fn dmabuf_spans_are_page_aligned_and_cover_the_range() {
        let p = DMABUF_ALIGN;
        assert_eq!(dmabuf_span(0, 1), (0, p as usize));
        assert_eq!(dmabuf_span(p, p as usize), (p, p as usize));
        assert_eq!(dmabuf_span(p + 10, 100), (p, p as usize));
        assert_eq!(dmabuf_span(p - 1, 2), (0, 2 * p as usize));
        for (addr, len) in [(12345u64, 99999usize), (7 * p + 3, 1), (3 * p, 0)] {
            let (s, l) = dmabuf_span(addr, len);
            assert_eq!(s % p, 0);
            assert_eq!(l as u64 % p, 0);
            assert!(s <= addr && s + l as u64 >= addr + len as u64);
        }
    }

    /// The backend end to end over `tests/c/fake_libcuda.c` (host memory
    /// posing as device memory): the test builds the fake as `libcuda.so`
    /// and re-runs itself with it on `LD_LIBRARY_PATH` (the loader reads
    /// that variable only at start-up), so cudarc loads the fake.
    #[test]
    fn fake_driver_end_to_end() {
        if std::env::var_os("GMPI_FAKE_CUDA_CHILD").is_some() {
            fake_driver_checks();
            return;
        }
        if driver::driver_present() {
            eprintln!("note: a CUDA driver is present here; fake_driver_end_to_end skipped");
            return;
        }
        let src =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/c/fake_libcuda.c");
        let dir = std::env::temp_dir().join(format!("gmpi-fake-cuda-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let built = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(dir.join("libcuda.so"))
            .arg(&src)
            .output();
        let built = match built {
            Ok(o) => o,
            Err(e) => {
                eprintln!("note: no C compiler ({e}); fake_driver_end_to_end skipped");
                return;
            }
        };
        assert!(
            built.status.success(),
            "building the fake libcuda: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let o = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "cuda::tests::fake_driver_end_to_end",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("GMPI_FAKE_CUDA_CHILD", "1")
            .env("LD_LIBRARY_PATH", &dir)
            .output()
            .expect("run the test binary");
        let _ = std::fs::remove_dir_all(&dir);
        let out = format!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "{out}");
        assert!(out.contains("1 passed"), "{out}");
        assert!(
            out.contains("fake-cuda: alloc "),
            "the fake was not loaded:\n{out}"
        );
        assert!(!out.contains("ERROR"), "driver misuse:\n{out}");
        assert!(out.contains("errors 0"), "{out}");
    }

    fn fake_driver_checks() {
        use crate::{Gpu, GpuConfig};
        let api = load().expect("load the fake driver");
        assert_eq!(api.name(), "cuda");
        assert_eq!(api.device_count(), 1);

        // Host memory: one call, no context needed.
        let host = [0u8; 64];
        assert_eq!(api.query(host.as_ptr() as u64).unwrap(), None);
        assert_eq!(api.buffer_id(host.as_ptr() as u64), None);

        // Device memory.
        let d = api.alloc_device(1000, 0).expect("alloc");
        let info = api.query(d + 10).unwrap().expect("device memory");
        assert_eq!(info.kind, MemKind::Device { ordinal: 0 });
        assert_eq!((info.base, info.size), (d, 1000));
        assert_ne!(info.buffer_id, 0);
        assert_eq!(api.buffer_id(d + 999), Some(info.buffer_id));

        let data: Vec<u8> = (0..200u8).collect();
        assert_eq!(api.copy_to_device(d, &data).unwrap(), CopyPath::CudaCopy);
        let mut back = vec![0u8; 200];
        assert_eq!(api.copy_to_host(&mut back, d).unwrap(), CopyPath::CudaCopy);
        assert_eq!(back, data);
        api.copy_device(d + 500, d, 200).unwrap();
        let mut back2 = vec![0u8; 200];
        api.copy_to_host(&mut back2, d + 500).unwrap();
        assert_eq!(back2, data);

        // Pinned host memory is host memory.
        let mut pinned = api.alloc_pinned(4096).expect("pinned");
        assert!(pinned.as_mut_slice().len() >= 4096);
        let pa = pinned.as_mut_slice().as_ptr() as u64;
        assert_eq!(api.query(pa).unwrap(), None);
        drop(pinned);

        // IPC: a handle is made, and, as with real CUDA, cannot be opened
        // in the process that exported it.
        assert_eq!(api.ipc_capable(d + 10), Ok(true), "cuMemAlloc memory");
        assert!(api.ipc_capable(host.as_ptr() as u64).is_err());
        let h = api.ipc_handle(d).expect("ipc handle");
        let own = api.ipc_open(&h).expect_err("opened in its exporter");
        assert!(own.to_string().contains("INVALID_CONTEXT"), "{own}");

        // Reductions need kernels, which the fake never loads (and NVRTC
        // may be absent): the failure says so, for the layer's fallback;
        // no dma-buf in the fake.
        assert!(matches!(
            api.reduce(ReduceOp::Sum, ElemType::I32, d, d + 500, 4),
            Err(GpuError::KernelUnavailable(_))
        ));
        assert!(matches!(
            api.reduce(ReduceOp::Band, ElemType::F32, d, d, 4),
            Err(GpuError::Unsupported(_))
        ));
        assert!(api.export_dmabuf(d, 100).is_err());
        api.set_device(0).expect("set_device(0)");
        assert!(api.set_device(1).is_err());

        let f = api.facts();
        assert_eq!(f.driver_version.as_deref(), Some("12.8"));
        assert_eq!(f.devices.len(), 1);
        assert!(f.devices[0].contains("Fake GPU 0"), "{:?}", f.devices);
        assert!(f.gdrcopy.is_err());
        assert!(f.dmabuf.is_err());
        assert!(f.peer_access.is_empty());

        // Through the Gpu layer: classification cache, bounce buffers, IPC
        // export and mapping.
        {
            let gpu = Gpu::with_api(api.clone(), GpuConfig::default());
            // Staging: asynchronous copies through a pinned slot on the
            // backend's streams, ended by events.
            let slot = gpu
                .take_slot(CopyDir::ToHost, 256)
                .unwrap()
                .expect("a slot");
            let t = gpu
                .copy_async(CopyDir::ToHost, d, slot, 200, 0)
                .expect("issued");
            let (mut slot, res) = loop {
                if let Some(l) = gpu.copy_poll(t) {
                    break l;
                }
            };
            res.expect("landed");
            assert_eq!(&slot.as_mut_slice()[..200], &data[..]);
            slot.as_mut_slice()[..8].copy_from_slice(b"stagedin");
            let t = gpu
                .copy_async(CopyDir::ToDevice, d + 600, slot, 8, 1)
                .expect("issued");
            let (slot, res) = loop {
                if let Some(l) = gpu.copy_poll(t) {
                    break l;
                }
            };
            res.expect("landed");
            let mut b8 = [0u8; 8];
            api.copy_to_host(&mut b8, d + 600).unwrap();
            assert_eq!(&b8, b"stagedin");
            gpu.put_slot(CopyDir::ToHost, slot);
            gpu.release();
            assert_eq!(gpu.classify(d + 1, 10), Ok(MemKind::Device { ordinal: 0 }));
            assert_eq!(gpu.classify(d + 2, 10), Ok(MemKind::Device { ordinal: 0 }));
            assert_eq!(gpu.classify(host.as_ptr() as u64, 10), Ok(MemKind::Host));
            let (sum, path) = gpu
                .with_read(d, 200, |b| b.iter().map(|&x| u64::from(x)).sum::<u64>())
                .unwrap();
            assert_eq!(sum, (0..200u64).sum::<u64>());
            assert_eq!(path, CopyPath::CudaCopy);
            gpu.with_write(d, 4, |b| b.copy_from_slice(&[9, 9, 9, 9]))
                .unwrap();
            let desc = gpu.ipc_export(d + 100, 50).expect("export");
            assert_eq!((desc.base, desc.offset), (d, 100));
            assert!(gpu.ipc_map(1, &desc).is_err(), "own handle opened");
            let to = gpu
                .ipc_export_to(1, d + 100, 50)
                .expect("export for rank 1");
            assert!(to.lease.is_none(), "exported itself, not staged");
            assert_eq!(to.desc, desc);
            let me = gpu.self_desc(d + 100, 50).expect("self descriptor");
            assert_eq!((me.base, me.offset, me.buffer_id), (d, 100, desc.buffer_id));
            let mut b = [0u8; 4];
            gpu.copy_to_host(&mut b, me.base + me.offset).unwrap();
            assert_eq!(b, [100, 101, 102, 103]);
            gpu.copy_to_host(&mut b, d).unwrap();
            assert_eq!(b, [9; 4]);

            // Without kernels, the layer reduces on host copies, and says
            // so once.
            let ints = |v: [i32; 4]| v.map(i32::to_ne_bytes).concat();
            gpu.copy_to_device(d + 600, &ints([1, 2, 3, -4])).unwrap();
            gpu.copy_to_device(d + 700, &ints([10, 20, 30, 40]))
                .unwrap();
            for _ in 0..2 {
                gpu.reduce(ReduceOp::Sum, ElemType::I32, d + 600, d + 700, 4)
                    .expect("host fallback");
            }
            let mut r = [0u8; 16];
            gpu.copy_to_host(&mut r, d + 600).unwrap();
            assert_eq!(r.to_vec(), ints([21, 42, 63, 76]));
            let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            assert_eq!(n(&gpu.stats.host_reduces), 2);
            assert_eq!(n(&gpu.stats.kernel_warnings), 1);
        }

        api.free_device(d).expect("free");
        assert_eq!(api.buffer_id(d), None);
        assert_eq!(api.query(d).unwrap(), None);
        drop(api);
    }
}
