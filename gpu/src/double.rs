//! The test double of the CUDA driver: host memory tagged as device memory.
//!
//! [`TestCuda`] implements [`CudaApi`] without a GPU, so the pml, the driver
//! and the runtime run their device paths in CI. Device and managed
//! allocations live in this object at fake addresses (far from any real
//! mapping); each has a buffer id that changes when an address is freed and
//! reused, as the driver's does. IPC handles name an allocation and map it at
//! a second address, so a receiver that copied from the sender's address
//! instead of its mapping would fail. Every copy is checked against the
//! allocations (a copy past the end of one is an error, as on a GPU) and
//! counted, so tests assert the number of copies each protocol makes.
//! [`TestCuda::without_kernels`] makes every reduction fail as a failed
//! NVRTC compile or module load does ([`GpuError::KernelUnavailable`]), for
//! the tests of [`crate::Gpu::reduce`]'s host fallback;
//! [`TestCuda::fail_queries`] and [`TestCuda::fail_copies`] make pointer
//! queries or copies fail as after a sticky driver error.
//! [`TestCuda::with_dmabuf`] exports device memory as a "dma-buf": a real,
//! unlinked file of the exported span's size, so a NIC model can check the
//! descriptor and the range it is asked to register, as the kernel does.
//!
//! One `TestCuda`'s memory is shared by every rank of an in-process test, the
//! way one driver serves every process of a node; each rank that plays a
//! process of its own gets a view with its own process id
//! ([`TestCuda::process`]). As with real CUDA, an IPC handle opens only in a
//! process other than the one that exported it (`cuIpcOpenMemHandle` in the
//! exporting process fails with `CUDA_ERROR_INVALID_CONTEXT`). As with real
//! CUDA, legacy IPC exports only `cudaMalloc` memory: stream-ordered pool
//! memory ([`TestCuda::malloc_async`]), VMM memory
//! ([`TestCuda::malloc_vmm`]) and managed memory are device memory to
//! [`CudaApi::query`] but not [`CudaApi::ipc_capable`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::api::*;
use crate::MemKind;

/// The double's "kernel", and the reference the device tests compare
/// against (it lives in `host_reduce.rs`, which production code uses too).
pub use crate::host_reduce::host_reduce;

/// The double's dma-buf: an unlinked temporary file of `span` bytes (its
/// size is what `fstat` reports, as for a real dma-buf).
fn span_file(span: usize) -> std::io::Result<(std::os::fd::OwnedFd, u64)> {
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "gmpi-double-dmabuf-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let _ = std::fs::remove_file(&path);
    f.set_len(span as u64)?;
    let ino = f.metadata()?.ino();
    Ok((f.into(), ino))
}

/// Where the fake device address space starts.
const DEVICE_BASE: u64 = 0x7a00_0000_0000;
/// Where IPC mappings are placed.
const MAP_BASE: u64 = 0x7b00_0000_0000;
/// Allocation granularity (the GPU page the real driver uses).
const GRAIN: u64 = 64 << 10;

/// Calls served, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// `query` calls.
    pub queries: u64,
    /// `buffer_id` calls.
    pub buffer_id_checks: u64,
    /// Device → host copies.
    pub dtoh: u64,
    /// Host → device copies.
    pub htod: u64,
    /// Device → device copies.
    pub dtod: u64,
    /// Bytes moved by all copies.
    pub bytes: u64,
    /// IPC handles made.
    pub ipc_handles: u64,
    /// IPC opens.
    pub ipc_opens: u64,
    /// IPC closes.
    pub ipc_closes: u64,
    /// Reduction kernels run.
    pub reduces: u64,
    /// Reductions refused for want of kernels ([`TestCuda::without_kernels`]).
    pub kernel_refusals: u64,
    /// Pinned buffers allocated.
    pub pinned: u64,
    /// Device allocations (by tests and by gmpi).
    pub mallocs: u64,
    /// Device frees.
    pub frees: u64,
    /// Asynchronous copies issued ([`CudaApi::copy_async`]; each is also
    /// counted in `dtoh` or `htod` when it lands).
    pub async_copies: u64,
    /// Asynchronous device-to-device copies issued
    /// ([`CudaApi::copy_device_async`]; each is also counted in `dtod` when
    /// it lands).
    pub async_dtod: u64,
    /// dma-buf exports made ([`CudaApi::export_dmabuf`]).
    pub dmabuf_exports: u64,
    /// Allocations made synchronous for a NIC ([`CudaApi::sync_memops`]).
    pub sync_memops: u64,
}

/// One step of the asynchronous copies, in the order it happened
/// ([`TestCuda::trace`]): what tests read overlap and order from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trace {
    /// A copy was issued.
    Issued {
        /// Its ticket.
        ticket: Ticket,
        /// Its direction.
        dir: CopyDir,
        /// Its device address.
        dev: u64,
        /// Its length.
        len: usize,
    },
    /// A copy's event completed and the bytes moved.
    Landed {
        /// Its ticket.
        ticket: Ticket,
    },
}

/// The most copies in `dir` that were in flight at once in `trace` (every
/// lane together).
pub fn max_in_flight(trace: &[Trace], dir: CopyDir) -> usize {
    let mut live = std::collections::HashSet::new();
    let mut most = 0;
    for t in trace {
        match *t {
            Trace::Issued { ticket, dir: d, .. } if d == dir => {
                live.insert(ticket);
                most = most.max(live.len());
            }
            Trace::Landed { ticket } => {
                live.remove(&ticket);
            }
            Trace::Issued { .. } => {}
        }
    }
    most
}

/// An asynchronous copy that has not landed.
#[derive(Debug)]
struct Pending {
    dir: CopyDir,
    dev: u64,
    host: Box<dyn PinnedBuf>,
    len: usize,
    /// The poll count (every `copy_poll` call, any ticket) at which its
    /// event has completed.
    due: u64,
}

#[derive(Debug)]
struct Alloc {
    data: Vec<u8>,
    kind: MemKind,
    buffer_id: u64,
    /// Legacy CUDA IPC can export it (`cudaMalloc` memory; not pool, VMM
    /// or managed memory).
    legacy_ipc: bool,
}

#[derive(Debug, Default)]
struct State {
    allocs: BTreeMap<u64, Alloc>,
    /// Freed ranges available for reuse: base → size.
    free: BTreeMap<u64, u64>,
    next: u64,
    next_id: u64,
    /// IPC mappings: mapped base → (owner base, owner buffer id).
    maps: BTreeMap<u64, (u64, u64)>,
    next_map: u64,
    /// Set: every `query` fails with this driver error (a sticky error).
    query_error: Option<String>,
    /// Asynchronous copies in flight, by ticket.
    pending: BTreeMap<Ticket, Pending>,
    /// Asynchronous device-to-device copies in flight, by ticket: (dst,
    /// src, len, due); the bytes move when the copy is seen complete.
    pending_d2d: BTreeMap<Ticket, (u64, u64, usize, u64)>,
    /// The most of those in flight at once so far.
    most_d2d: usize,
    next_ticket: u64,
    /// Polls (of any ticket) an asynchronous copy takes to complete (at
    /// least 1).
    async_polls: u32,
    /// `copy_poll` calls so far: the double's clock.
    polls: u64,
    trace: Vec<Trace>,
    /// Set: every copy (to, from or between device memory) fails with this
    /// driver error.
    copy_error: Option<String>,
    counts: Counts,
    /// The start address of each dma-buf exported, by its file's inode.
    dmabufs: BTreeMap<u64, u64>,
}

/// The test double. See the module documentation.
#[derive(Debug)]
pub struct TestCuda {
    devices: usize,
    gdrcopy: bool,
    dmabuf: bool,
    /// What one pointer query (`query`, `buffer_id`) costs, spent spinning:
    /// the cost model benchmarks use (a real `cuPointerGetAttributes` takes
    /// a few hundred nanoseconds).
    call_cost: std::time::Duration,
    kernels: bool,
    /// The process this view plays (IPC handles carry it).
    pid: u32,
    st: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct HostBuf(Vec<u8>);

impl PinnedBuf for HostBuf {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

fn bad(addr: u64, len: usize, why: &str) -> GpuError {
    GpuError::BadRange {
        addr,
        len,
        why: why.to_string(),
    }
}

impl State {
    /// The error [`TestCuda::fail_copies`] set, as driver `call` reports it.
    fn copy_failure(&self, call: &'static str) -> Result<(), GpuError> {
        match &self.copy_error {
            Some(msg) => Err(GpuError::Driver {
                call,
                msg: msg.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The allocation holding `addr` (through an IPC mapping too) and the
    /// offset in it.
    fn find(&self, addr: u64) -> Option<(u64, u64)> {
        if let Some((&m, &(base, id))) = self.maps.range(..=addr).next_back() {
            let a = self.allocs.get(&base)?;
            if a.buffer_id == id && addr - m < a.data.len() as u64 {
                return Some((base, addr - m));
            }
        }
        let (&base, a) = self.allocs.range(..=addr).next_back()?;
        (addr - base < a.data.len() as u64).then_some((base, addr - base))
    }

    fn slice(&mut self, addr: u64, len: usize) -> Result<&mut [u8], GpuError> {
        if len == 0 {
            return Ok(&mut []);
        }
        let (base, off) = self
            .find(addr)
            .ok_or_else(|| bad(addr, len, "not device memory"))?;
        let a = self.allocs.get_mut(&base).expect("found");
        let end = off as usize + len;
        if end > a.data.len() {
            return Err(bad(addr, len, "past the end of its allocation"));
        }
        Ok(&mut a.data[off as usize..end])
    }
}

impl TestCuda {
    /// A driver with `devices` devices and GDRCopy absent.
    pub fn new(devices: usize) -> Self {
        Self {
            devices,
            gdrcopy: false,
            dmabuf: false,
            call_cost: std::time::Duration::ZERO,
            kernels: true,
            pid: 0,
            st: Arc::new(Mutex::new(State {
                next: DEVICE_BASE,
                next_id: 1,
                next_map: MAP_BASE,
                async_polls: 2,
                ..State::default()
            })),
        }
    }

    /// A view of the same driver (same memory, counters and mappings) from
    /// process `pid`: what one rank of a multi-process test uses, so that
    /// IPC handles open in the other ranks and not in their exporter.
    pub fn process(&self, pid: u32) -> Self {
        Self {
            devices: self.devices,
            gdrcopy: self.gdrcopy,
            dmabuf: self.dmabuf,
            call_cost: self.call_cost,
            kernels: self.kernels,
            pid,
            st: Arc::clone(&self.st),
        }
    }

    /// Pretend the GPU exports dma-bufs (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`
    /// and the open kernel modules): [`CudaApi::export_dmabuf`] then
    /// answers with a real descriptor (see the module documentation).
    pub fn with_dmabuf(mut self) -> Self {
        self.dmabuf = true;
        self
    }

    /// Whether `len` bytes at `addr` lie in one device allocation (its own
    /// address, not an IPC mapping): what a NIC model asks before it reads
    /// or writes "GPU memory" with [`TestCuda::peek`] / [`TestCuda::poke`].
    pub fn is_device_range(&self, addr: u64, len: usize) -> bool {
        let s = self.st();
        match s.allocs.range(..=addr).next_back() {
            Some((&base, a)) => {
                matches!(a.kind, MemKind::Device { .. })
                    && addr - base + len as u64 <= a.data.len() as u64
            }
            None => false,
        }
    }

    /// The buffer id of the allocation holding `addr`, as a NIC model
    /// sees it (no driver call counted or charged).
    pub fn buffer_id_at(&self, addr: u64) -> Option<u64> {
        let s = self.st();
        let (base, _) = s.find(addr)?;
        Some(s.allocs[&base].buffer_id)
    }

    /// The device address at which the dma-buf behind `fd` (an export of
    /// this double) starts: what a NIC model checks a registration's
    /// offset and iova against.
    pub fn dmabuf_start(&self, fd: std::os::fd::BorrowedFd<'_>) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let f = std::fs::File::from(fd.try_clone_to_owned().ok()?);
        let ino = f.metadata().ok()?.ino();
        self.st().dmabufs.get(&ino).copied()
    }

    /// Pretend GDRCopy is present (copies then report [`CopyPath::GdrCopy`]).
    pub fn with_gdrcopy(mut self) -> Self {
        self.gdrcopy = true;
        self
    }

    /// Pretend the reduction kernels cannot be built: every
    /// [`CudaApi::reduce`] of a supported pair fails with
    /// [`GpuError::KernelUnavailable`] (what the real backend reports when
    /// NVRTC is absent or fails, or `cuModuleLoadData` refuses its PTX) and
    /// runs nothing.
    pub fn without_kernels(mut self) -> Self {
        self.kernels = false;
        self
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path(&self) -> CopyPath {
        if self.gdrcopy {
            CopyPath::GdrCopy
        } else {
            CopyPath::CudaCopy
        }
    }

    fn alloc(&self, len: usize, kind: MemKind, legacy_ipc: bool) -> u64 {
        let mut s = self.st();
        let size = (len as u64).max(1).div_ceil(GRAIN) * GRAIN;
        // Reuse the lowest freed range that fits, as allocators do: this is
        // what makes stale caches visible.
        let reuse = s.free.iter().find(|(_, &sz)| sz >= size).map(|(&b, _)| b);
        let base = match reuse {
            Some(b) => {
                let sz = s.free.remove(&b).expect("listed");
                if sz > size {
                    s.free.insert(b + size, sz - size);
                }
                b
            }
            None => {
                let b = s.next;
                s.next += size;
                b
            }
        };
        let id = s.next_id;
        s.next_id += 1;
        s.counts.mallocs += 1;
        s.allocs.insert(
            base,
            Alloc {
                data: vec![0; len],
                kind,
                buffer_id: id,
                legacy_ipc,
            },
        );
        base
    }

    /// `cudaMalloc` on device `ordinal`.
    pub fn malloc(&self, len: usize, ordinal: i32) -> u64 {
        assert!((ordinal as usize) < self.devices, "no device {ordinal}");
        self.alloc(len, MemKind::Device { ordinal }, true)
    }

    /// `cudaMallocAsync` on device `ordinal`: stream-ordered memory from
    /// the device's default pool (what `cudarc` allocates every
    /// `CudaSlice` with where the device has memory pools). Device memory
    /// like any other, except that legacy CUDA IPC cannot export it:
    /// [`CudaApi::ipc_capable`] is false and [`CudaApi::ipc_handle`] fails
    /// with `CUDA_ERROR_INVALID_VALUE`, as on the driver.
    pub fn malloc_async(&self, len: usize, ordinal: i32) -> u64 {
        assert!((ordinal as usize) < self.devices, "no device {ordinal}");
        self.alloc(len, MemKind::Device { ordinal }, false)
    }

    /// A VMM allocation (`cuMemCreate` + `cuMemAddressReserve` +
    /// `cuMemMap`) on device `ordinal`: as [`TestCuda::malloc_async`], not
    /// legacy-IPC-capable.
    pub fn malloc_vmm(&self, len: usize, ordinal: i32) -> u64 {
        assert!((ordinal as usize) < self.devices, "no device {ordinal}");
        self.alloc(len, MemKind::Device { ordinal }, false)
    }

    /// `cudaMallocManaged`.
    pub fn malloc_managed(&self, len: usize) -> u64 {
        self.alloc(len, MemKind::Managed, false)
    }

    /// `cudaFree`. Panics on an address that is not an allocation's base.
    pub fn free(&self, base: u64) {
        let mut s = self.st();
        let a = s.allocs.remove(&base).expect("free of a non-allocation");
        let size = (a.data.len() as u64).max(1).div_ceil(GRAIN) * GRAIN;
        s.free.insert(base, size);
        s.counts.frees += 1;
    }

    /// Write device memory directly (test set-up; not counted).
    pub fn poke(&self, addr: u64, data: &[u8]) {
        self.st()
            .slice(addr, data.len())
            .expect("poke into device memory")
            .copy_from_slice(data);
    }

    /// Read device memory directly (test checks; not counted).
    pub fn peek(&self, addr: u64, len: usize) -> Vec<u8> {
        self.st()
            .slice(addr, len)
            .expect("peek at device memory")
            .to_vec()
    }

    /// Make every pointer query cost `d` (spent spinning), as a driver call
    /// does: the cost model of the classification benchmark.
    pub fn with_call_cost(mut self, d: std::time::Duration) -> Self {
        self.call_cost = d;
        self
    }

    fn spend_call_cost(&self) {
        if self.call_cost.is_zero() {
            return;
        }
        let t = std::time::Instant::now();
        while t.elapsed() < self.call_cost {
            std::hint::spin_loop();
        }
    }

    /// An asynchronous copy completes `n` polls (of any copy: the double's
    /// clock) after it was issued (default 2, so that a copy is seen in
    /// flight at least once); copies complete in issue order, and are seen
    /// complete whenever they are next polled.
    pub fn with_async_polls(self, n: u32) -> Self {
        self.st().async_polls = n.max(1);
        self
    }

    /// The asynchronous copies so far, issued and landed, in order.
    pub fn trace(&self) -> Vec<Trace> {
        self.st().trace.clone()
    }

    /// The most asynchronous device-to-device copies
    /// ([`CudaApi::copy_device_async`]) in flight at once so far.
    pub fn most_device_copies_in_flight(&self) -> usize {
        self.st().most_d2d
    }

    /// Asynchronous copies issued and not yet landed.
    pub fn copies_in_flight(&self) -> usize {
        let s = self.st();
        s.pending.len() + s.pending_d2d.len()
    }

    /// Make every pointer query fail with `msg` (as after a sticky error or
    /// with a broken context), or answer again (`None`).
    pub fn fail_queries(&self, msg: Option<&str>) {
        self.st().query_error = msg.map(str::to_string);
    }

    /// Make every copy to, from or between device memory fail with `msg`
    /// (as after a sticky error, or an illegal address a kernel left), or
    /// copy again (`None`): synchronous copies fail, asynchronous ones are
    /// refused when issued. Failed copies copy nothing and are not counted.
    pub fn fail_copies(&self, msg: Option<&str>) {
        self.st().copy_error = msg.map(str::to_string);
    }

    /// The calls served so far.
    pub fn counts(&self) -> Counts {
        self.st().counts.clone()
    }

    /// Live IPC mappings.
    pub fn open_mappings(&self) -> usize {
        self.st().maps.len()
    }
}

impl CudaApi for TestCuda {
    fn name(&self) -> &'static str {
        "test-double"
    }

    fn device_count(&self) -> usize {
        self.devices
    }

    fn query(&self, addr: u64) -> Result<Option<PtrInfo>, GpuError> {
        self.spend_call_cost();
        let mut s = self.st();
        s.counts.queries += 1;
        if let Some(msg) = &s.query_error {
            return Err(GpuError::Driver {
                call: "cuPointerGetAttributes",
                msg: msg.clone(),
            });
        }
        let Some((base, _)) = s.find(addr) else {
            return Ok(None);
        };
        let a = &s.allocs[&base];
        // Through a mapping, the allocation is seen at the mapped base.
        let mapped = s
            .maps
            .range(..=addr)
            .next_back()
            .filter(|(m, (b, id))| {
                *b == base && *id == a.buffer_id && addr - **m < a.data.len() as u64
            })
            .map(|(m, _)| *m);
        Ok(Some(PtrInfo {
            kind: a.kind,
            base: mapped.unwrap_or(base),
            size: a.data.len() as u64,
            buffer_id: a.buffer_id,
        }))
    }

    fn buffer_id(&self, addr: u64) -> Option<u64> {
        self.spend_call_cost();
        let mut s = self.st();
        s.counts.buffer_id_checks += 1;
        let (base, _) = s.find(addr)?;
        Some(s.allocs[&base].buffer_id)
    }

    fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<CopyPath, GpuError> {
        let mut s = self.st();
        s.copy_failure("cuMemcpyDtoH_v2")?;
        dst.copy_from_slice(s.slice(src, dst.len())?);
        s.counts.dtoh += 1;
        s.counts.bytes += dst.len() as u64;
        Ok(self.path())
    }

    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<CopyPath, GpuError> {
        let mut s = self.st();
        s.copy_failure("cuMemcpyHtoD_v2")?;
        s.slice(dst, src.len())?.copy_from_slice(src);
        s.counts.htod += 1;
        s.counts.bytes += src.len() as u64;
        Ok(self.path())
    }

    fn copy_device(&self, dst: u64, src: u64, len: usize) -> Result<(), GpuError> {
        let mut s = self.st();
        s.copy_failure("cuMemcpyDtoD_v2")?;
        let tmp = s.slice(src, len)?.to_vec();
        s.slice(dst, len)?.copy_from_slice(&tmp);
        s.counts.dtod += 1;
        s.counts.bytes += len as u64;
        Ok(())
    }

    fn alloc_pinned(&self, len: usize) -> Result<Box<dyn PinnedBuf>, GpuError> {
        self.st().counts.pinned += 1;
        Ok(Box::new(HostBuf(vec![0; len])))
    }

    fn copy_async(
        &self,
        dir: CopyDir,
        dev: u64,
        mut host: Box<dyn PinnedBuf>,
        len: usize,
        // Every copy completes by the double's one clock, in issue order;
        // streams (lanes) need no more modelling than that.
        _lane: u32,
    ) -> Result<Ticket, (GpuError, Box<dyn PinnedBuf>)> {
        let mut s = self.st();
        let call = match dir {
            CopyDir::ToHost => "cuMemcpyDtoHAsync_v2",
            CopyDir::ToDevice => "cuMemcpyHtoDAsync_v2",
        };
        if let Err(e) = s.copy_failure(call) {
            return Err((e, host));
        }
        if host.as_mut_slice().len() < len {
            return Err((bad(dev, len, "longer than its pinned buffer"), host));
        }
        if let Err(e) = s.slice(dev, len) {
            return Err((e, host));
        }
        s.next_ticket += 1;
        let ticket = Ticket(s.next_ticket);
        let due = s.polls + u64::from(s.async_polls);
        s.pending.insert(
            ticket,
            Pending {
                dir,
                dev,
                host,
                len,
                due,
            },
        );
        s.counts.async_copies += 1;
        s.trace.push(Trace::Issued {
            ticket,
            dir,
            dev,
            len,
        });
        Ok(ticket)
    }

    fn copy_poll(&self, t: Ticket) -> Option<Landed> {
        let mut s = self.st();
        s.polls += 1;
        let now = s.polls;
        let p = s.pending.get(&t)?;
        // Copies of one stream complete in issue order (their due times
        // grow with it), but, as with CUDA events, a later copy may be seen
        // complete before anyone asks about an earlier one.
        if p.due > now {
            return None;
        }
        let dir = p.dir;
        let Pending {
            dev, mut host, len, ..
        } = s.pending.remove(&t).expect("pending");
        let res = match dir {
            CopyDir::ToHost => s.slice(dev, len).map(|d| {
                let d = d.to_vec();
                host.as_mut_slice()[..len].copy_from_slice(&d);
            }),
            CopyDir::ToDevice => {
                let src = host.as_mut_slice()[..len].to_vec();
                s.slice(dev, len).map(|d| d.copy_from_slice(&src))
            }
        };
        if res.is_ok() {
            match dir {
                CopyDir::ToHost => s.counts.dtoh += 1,
                CopyDir::ToDevice => s.counts.htod += 1,
            }
            s.counts.bytes += len as u64;
        }
        s.trace.push(Trace::Landed { ticket: t });
        Some((host, res))
    }

    fn copy_device_async(
        &self,
        dst: u64,
        src: u64,
        len: usize,
        _lane: u32,
    ) -> Result<Ticket, GpuError> {
        let mut s = self.st();
        s.copy_failure("cuMemcpyDtoDAsync_v2")?;
        s.slice(src, len)?;
        s.slice(dst, len)?;
        s.next_ticket += 1;
        let ticket = Ticket(s.next_ticket);
        let due = s.polls + u64::from(s.async_polls);
        s.pending_d2d.insert(ticket, (dst, src, len, due));
        s.most_d2d = s.most_d2d.max(s.pending_d2d.len());
        s.counts.async_dtod += 1;
        Ok(ticket)
    }

    fn device_poll(&self, t: Ticket) -> Option<Result<(), GpuError>> {
        let mut s = self.st();
        s.polls += 1;
        let &(dst, src, len, due) = s.pending_d2d.get(&t)?;
        if due > s.polls {
            return None;
        }
        s.pending_d2d.remove(&t);
        let res = s
            .slice(src, len)
            .map(|d| d.to_vec())
            .and_then(|tmp| s.slice(dst, len).map(|d| d.copy_from_slice(&tmp)));
        if res.is_ok() {
            s.counts.dtod += 1;
            s.counts.bytes += len as u64;
        }
        Some(res)
    }

    fn alloc_device(&self, len: usize, near: u64) -> Result<u64, GpuError> {
        let ordinal = match self.query(near)? {
            Some(PtrInfo {
                kind: MemKind::Device { ordinal },
                ..
            }) => ordinal,
            _ => 0,
        };
        Ok(self.malloc(len, ordinal))
    }

    fn free_device(&self, ptr: u64) -> Result<(), GpuError> {
        if !self.st().allocs.contains_key(&ptr) {
            return Err(bad(ptr, 0, "free of a non-allocation"));
        }
        self.free(ptr);
        Ok(())
    }

    fn ipc_capable(&self, addr: u64) -> Result<bool, GpuError> {
        let s = self.st();
        let (base, _) = s.find(addr).ok_or_else(|| GpuError::Driver {
            call: "cuPointerGetAttribute",
            msg: "CUDA_ERROR_INVALID_VALUE: not device memory".into(),
        })?;
        Ok(s.allocs[&base].legacy_ipc)
    }

    fn ipc_handle(&self, base: u64) -> Result<IpcHandle, GpuError> {
        let mut s = self.st();
        let a = s
            .allocs
            .get(&base)
            .ok_or_else(|| bad(base, 0, "not an allocation's base"))?;
        if a.kind == MemKind::Managed {
            return Err(GpuError::Driver {
                call: "cuIpcGetMemHandle",
                msg: "CUDA_ERROR_INVALID_VALUE: managed memory".into(),
            });
        }
        if !a.legacy_ipc {
            return Err(GpuError::Driver {
                call: "cuIpcGetMemHandle",
                msg: "CUDA_ERROR_INVALID_VALUE: not legacy-IPC-capable (stream-ordered pool or VMM memory)".into(),
            });
        }
        let mut h = [0u8; 64];
        h[..8].copy_from_slice(&base.to_le_bytes());
        h[8..16].copy_from_slice(&a.buffer_id.to_le_bytes());
        h[16..24].copy_from_slice(b"gmpidbl\0");
        h[24..28].copy_from_slice(&self.pid.to_le_bytes());
        s.counts.ipc_handles += 1;
        Ok(IpcHandle(h))
    }

    fn ipc_open(&self, h: &IpcHandle) -> Result<u64, GpuError> {
        let mut s = self.st();
        let f = |i: usize| u64::from_le_bytes(h.0[i..i + 8].try_into().expect("8"));
        let (base, id) = (f(0), f(8));
        let exporter = u32::from_le_bytes(h.0[24..28].try_into().expect("4"));
        if exporter == self.pid {
            return Err(GpuError::Driver {
                call: "cuIpcOpenMemHandle",
                msg: "CUDA_ERROR_INVALID_CONTEXT: an IPC handle cannot be opened in the process that exported it".into(),
            });
        }
        let live = s.allocs.get(&base).filter(|a| a.buffer_id == id);
        let Some(a) = live else {
            return Err(GpuError::Driver {
                call: "cuIpcOpenMemHandle",
                msg: "CUDA_ERROR_INVALID_HANDLE: the allocation is gone".into(),
            });
        };
        let size = (a.data.len() as u64).max(1).div_ceil(GRAIN) * GRAIN;
        let m = s.next_map;
        s.next_map += size;
        s.maps.insert(m, (base, id));
        s.counts.ipc_opens += 1;
        Ok(m)
    }

    fn ipc_close(&self, mapped: u64) -> Result<(), GpuError> {
        let mut s = self.st();
        s.maps
            .remove(&mapped)
            .ok_or_else(|| bad(mapped, 0, "not an IPC mapping"))?;
        s.counts.ipc_closes += 1;
        Ok(())
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
        if !self.kernels {
            self.st().counts.kernel_refusals += 1;
            return Err(GpuError::KernelUnavailable(format!(
                "cuModuleLoadData failed: CUDA_ERROR_UNSUPPORTED_PTX_VERSION (test double without kernels, {})",
                op.name()
            )));
        }
        let n = count * ty.size();
        let mut s = self.st();
        let b = s.slice(input, n)?.to_vec();
        let a = s.slice(inout, n)?;
        host_reduce(op, ty, a, &b);
        s.counts.reduces += 1;
        Ok(())
    }

    fn export_dmabuf(&self, addr: u64, len: usize) -> Result<DmaBufExport, GpuError> {
        if !self.dmabuf {
            return Err(GpuError::Unsupported(
                "the test double has no dma-buf export (TestCuda::with_dmabuf)".into(),
            ));
        }
        if !self.is_device_range(addr, len) {
            return Err(GpuError::Driver {
                call: "cuMemGetHandleForAddressRange",
                msg: format!("CUDA_ERROR_INVALID_VALUE: {addr:#x}+{len} is not device memory"),
            });
        }
        let (start, span) = dmabuf_span(addr, len);
        let (fd, ino) = span_file(span).map_err(|e| GpuError::Driver {
            call: "cuMemGetHandleForAddressRange",
            msg: format!("the double's dma-buf file: {e}"),
        })?;
        let mut s = self.st();
        s.counts.dmabuf_exports += 1;
        s.dmabufs.insert(ino, start);
        Ok(DmaBufExport::of_span(fd, addr, len))
    }

    fn sync_memops(&self, addr: u64) -> Result<(), GpuError> {
        if !self.is_device_range(addr, 1) {
            return Err(GpuError::Driver {
                call: "cuPointerSetAttribute",
                msg: format!("CUDA_ERROR_INVALID_VALUE: {addr:#x} is not device memory"),
            });
        }
        self.st().counts.sync_memops += 1;
        Ok(())
    }

    fn set_device(&self, ordinal: i32) -> Result<(), GpuError> {
        if ordinal < 0 || ordinal as usize >= self.devices {
            return Err(GpuError::Driver {
                call: "cuDeviceGet",
                msg: format!("CUDA_ERROR_INVALID_DEVICE: {ordinal}"),
            });
        }
        Ok(())
    }

    fn facts(&self) -> Facts {
        Facts {
            driver_version: Some("test-double".into()),
            devices: (0..self.devices)
                .map(|i| format!("{i}: test double (host memory)"))
                .collect(),
            gdrcopy: if self.gdrcopy {
                Ok("test double".into())
            } else {
                Err("test double without GDRCopy".into())
            },
            dmabuf: if self.dmabuf {
                Ok(())
            } else {
                Err("test double without dma-buf export".into())
            },
            peer_access: Vec::new(),
        }
    }
}
