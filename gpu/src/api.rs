//! The CUDA operations gmpi needs, as one object-safe trait.
//!
//! [`CudaApi`] is implemented twice: by the real backend over the CUDA driver
//! API (`cuda/`, loaded at run time through `cudarc`), and by the test double
//! ([`crate::double::TestCuda`]: host memory tagged as device memory, every
//! copy counted and checked). Everything above it ([`crate::Gpu`], the pml
//! driver, the runtime) is the same code for both, so CI exercises the
//! protocols and caches that the device machine runs for real.
//!
//! Addresses are `u64` device pointers in the unified address space; the
//! trait never hands out references to device memory.

use std::fmt;

use crate::MemKind;

/// Errors of the GPU layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// The CUDA driver library is absent or unusable (`GMPI_CUDA=on` makes
    /// this fatal; `auto` falls back to host-only).
    #[error("CUDA unavailable: {0}")]
    Unavailable(String),
    /// A driver call failed.
    #[error("{call} failed: {msg}")]
    Driver {
        /// The driver function (`cuMemcpyDtoH_v2`, …).
        call: &'static str,
        /// The driver's error name and text.
        msg: String,
    },
    /// The operation is not possible for this memory (for example an IPC
    /// handle of managed memory, or a device without IPC support).
    #[error("{0}")]
    Unsupported(String),
    /// The device reduction kernels cannot be built or loaded: NVRTC is
    /// absent or fails to compile them, or the driver refuses the PTX
    /// (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION` from an NVRTC newer than the
    /// driver). Only [`CudaApi::reduce`] reports it, and only for that cause
    /// (never for a failed copy, launch or range): [`crate::Gpu::reduce`]
    /// then reduces on the host.
    #[error("device reduction kernels unavailable: {0}")]
    KernelUnavailable(String),
    /// An address range that is not (wholly) inside one allocation.
    #[error("bad device range {addr:#x}+{len}: {why}")]
    BadRange {
        /// Start.
        addr: u64,
        /// Length.
        len: usize,
        /// What is wrong with it.
        why: String,
    },
}

/// What the driver says about one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtrInfo {
    /// Device or managed (never `Host`: host memory is `None` from
    /// [`CudaApi::query`]).
    pub kind: MemKind,
    /// Base of the allocation that holds the address.
    pub base: u64,
    /// Size of that allocation in bytes.
    pub size: u64,
    /// The driver's unique id of the allocation (`CU_POINTER_ATTRIBUTE_BUFFER_ID`):
    /// a freed and re-allocated address gets a new one.
    pub buffer_id: u64,
}

impl PtrInfo {
    /// Whether `addr..addr+len` lies within this allocation.
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        addr >= self.base
            && addr
                .checked_add(len as u64)
                .is_some_and(|e| e <= self.base.saturating_add(self.size))
    }
}

pub use gmpi_mem::IpcHandle;

/// How bytes were moved between device and host (for logs and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyPath {
    /// A CPU mapping of GPU memory through GDRCopy (`libgdrapi`, gdrdrv).
    GdrCopy,
    /// `cuMemcpy` through a pinned host buffer.
    CudaCopy,
}

impl CopyPath {
    /// Name used in logs (`eager/gdrcopy`, `eager/cuda-copy`).
    pub fn name(self) -> &'static str {
        match self {
            CopyPath::GdrCopy => "gdrcopy",
            CopyPath::CudaCopy => "cuda-copy",
        }
    }
}

/// Element types the device reductions support (MPI's basic types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum ElemType {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    /// C `bool` / `MPI_C_BOOL` (one byte, 0 or 1).
    Bool,
    /// IEEE 754 half precision (`MPIX_C_FLOAT16`): each operation is
    /// computed in `float` and rounded to half once, as the host does.
    F16,
    /// bfloat16 (`MPIX_BFLOAT16`): likewise in `float`, rounded to nearest
    /// even once.
    BF16,
}

impl ElemType {
    /// Every type, for tests and kernel pre-compilation.
    pub const ALL: [ElemType; 13] = [
        ElemType::I8,
        ElemType::U8,
        ElemType::I16,
        ElemType::U16,
        ElemType::I32,
        ElemType::U32,
        ElemType::I64,
        ElemType::U64,
        ElemType::F32,
        ElemType::F64,
        ElemType::Bool,
        ElemType::F16,
        ElemType::BF16,
    ];

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            ElemType::I8 | ElemType::U8 | ElemType::Bool => 1,
            ElemType::I16 | ElemType::U16 | ElemType::F16 | ElemType::BF16 => 2,
            ElemType::I32 | ElemType::U32 | ElemType::F32 => 4,
            ElemType::I64 | ElemType::U64 | ElemType::F64 => 8,
        }
    }

    /// The CUDA C type name used in generated kernels.
    pub fn c_name(self) -> &'static str {
        match self {
            ElemType::I8 => "signed char",
            ElemType::U8 => "unsigned char",
            ElemType::I16 => "short",
            ElemType::U16 => "unsigned short",
            ElemType::I32 => "int",
            ElemType::U32 => "unsigned int",
            ElemType::I64 => "long long",
            ElemType::U64 => "unsigned long long",
            ElemType::F32 => "float",
            ElemType::F64 => "double",
            ElemType::Bool => "bool",
            // Stored as its bits; the kernel converts to and from float.
            ElemType::F16 | ElemType::BF16 => "unsigned short",
        }
    }

    /// Whether the type is a floating-point type (no bitwise operations).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            ElemType::F32 | ElemType::F64 | ElemType::F16 | ElemType::BF16
        )
    }
}

/// Reduction operators the device reductions support (MPI's predefined ops
/// other than `MINLOC`/`MAXLOC`/`REPLACE`/`NO_OP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum ReduceOp {
    Sum,
    Prod,
    Min,
    Max,
    Land,
    Lor,
    Lxor,
    Band,
    Bor,
    Bxor,
}

impl ReduceOp {
    /// Every operator.
    pub const ALL: [ReduceOp; 10] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Land,
        ReduceOp::Lor,
        ReduceOp::Lxor,
        ReduceOp::Band,
        ReduceOp::Bor,
        ReduceOp::Bxor,
    ];

    /// Whether MPI defines this operator on `ty`.
    pub fn supports(self, ty: ElemType) -> bool {
        !(ty.is_float() && matches!(self, ReduceOp::Band | ReduceOp::Bor | ReduceOp::Bxor))
    }

    /// `Ok` if MPI defines this operator on `ty`, else the error every
    /// backend and the [`crate::Gpu`] layer report.
    pub fn check(self, ty: ElemType) -> Result<(), GpuError> {
        if self.supports(ty) {
            Ok(())
        } else {
            Err(GpuError::Unsupported(format!(
                "MPI defines no {} on {}",
                self.name(),
                ty.c_name()
            )))
        }
    }

    /// Lower-case name (kernel names, logs).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Land => "land",
            ReduceOp::Lor => "lor",
            ReduceOp::Lxor => "lxor",
            ReduceOp::Band => "band",
            ReduceOp::Bor => "bor",
            ReduceOp::Bxor => "bxor",
        }
    }

    /// The C expression combining `a` (the accumulator) and `b` (the
    /// incoming operand), both of type `ty`. Shared by the NVRTC kernel
    /// generator and the test double's host evaluation (as documentation of
    /// the same semantics).
    pub fn c_expr(self, ty: ElemType) -> &'static str {
        let b = ty == ElemType::Bool;
        match self {
            ReduceOp::Sum if b => "(a || b)",
            ReduceOp::Prod if b => "(a && b)",
            ReduceOp::Sum => "(a + b)",
            ReduceOp::Prod => "(a * b)",
            ReduceOp::Min => "(b < a ? b : a)",
            ReduceOp::Max => "(b > a ? b : a)",
            ReduceOp::Land => "((a && b) ? 1 : 0)",
            ReduceOp::Lor => "((a || b) ? 1 : 0)",
            ReduceOp::Lxor => "(((!a) != (!b)) ? 1 : 0)",
            ReduceOp::Band => "(a & b)",
            ReduceOp::Bor => "(a | b)",
            ReduceOp::Bxor => "(a ^ b)",
        }
    }
}

/// Which way an asynchronous staging copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyDir {
    /// Device (or managed) memory into a pinned host buffer.
    ToHost,
    /// A pinned host buffer into device (or managed) memory.
    ToDevice,
}

/// A copy issued by [`CudaApi::copy_async`], ended by an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// An ended asynchronous copy: its pinned buffer, handed back, and how the
/// copy went.
pub type Landed = (Box<dyn PinnedBuf>, Result<(), GpuError>);

/// Pinned (page-locked) host memory from the backend, freed on drop.
pub trait PinnedBuf: Send + fmt::Debug {
    /// The bytes.
    fn as_mut_slice(&mut self) -> &mut [u8];
}

/// Alignment of a dma-buf export: the GPU page (64 KiB). The driver
/// exports whole pages only.
pub const DMABUF_ALIGN: u64 = 1 << 16;

/// The range [`CudaApi::export_dmabuf`] exports for `len` bytes at `addr`:
/// `(start, len)` rounded out to [`DMABUF_ALIGN`]. The fd covers this range,
/// so a NIC registers the bytes with offset `addr - start`
/// (`ibv_reg_dmabuf_mr(pd, addr - start, len, iova, fd, access)`).
pub fn dmabuf_span(addr: u64, len: usize) -> (u64, usize) {
    let start = addr & !(DMABUF_ALIGN - 1);
    let end = (addr + len.max(1) as u64).next_multiple_of(DMABUF_ALIGN);
    (start, (end - start) as usize)
}

/// Device memory exported as a dma-buf ([`CudaApi::export_dmabuf`]).
#[derive(Debug)]
pub struct DmaBufExport {
    /// The dma-buf; closing it does not undo a NIC's registration of it.
    pub fd: std::os::fd::OwnedFd,
    /// Where the exported address lies in the buffer.
    pub offset: u64,
}

impl DmaBufExport {
    /// The export of `len` bytes at `addr` through `fd`, which covers
    /// [`dmabuf_span`]`(addr, len)`.
    pub fn of_span(fd: std::os::fd::OwnedFd, addr: u64, len: usize) -> Self {
        let (start, _) = dmabuf_span(addr, len);
        Self {
            fd,
            offset: addr - start,
        }
    }
}

/// What `gmpirun --doctor` and the runtime's start-up log say about CUDA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Driver version as `major.minor` (`cuDriverGetVersion`).
    pub driver_version: Option<String>,
    /// One line per GPU: ordinal, name, memory, PCI bus id.
    pub devices: Vec<String>,
    /// GDRCopy: `Ok(version)` or why not.
    pub gdrcopy: Result<String, String>,
    /// dma-buf export of device memory (`cuMemGetHandleForAddressRange`):
    /// supported or why not.
    pub dmabuf: Result<(), String>,
    /// Pairs of devices with peer access, as `(a, b)`.
    pub peer_access: Vec<(i32, i32)>,
}

/// The CUDA operations gmpi needs. Implementations are cheap to share
/// (`Arc<dyn CudaApi>`) and safe to call from any thread.
pub trait CudaApi: Send + Sync + fmt::Debug {
    /// `"cuda"` or `"test-double"`.
    fn name(&self) -> &'static str;

    /// Number of visible devices.
    fn device_count(&self) -> usize;

    /// Classify `addr`: `Ok(None)` for host memory (including when no context
    /// exists or the driver answers `CUDA_ERROR_INVALID_VALUE` /
    /// `NOT_INITIALIZED`). One driver call for host memory.
    fn query(&self, addr: u64) -> Result<Option<PtrInfo>, GpuError>;

    /// The current buffer id of the allocation holding `addr` (`None` if the
    /// address is no longer device memory): the cheap re-check on a cache hit.
    fn buffer_id(&self, addr: u64) -> Option<u64>;

    /// Copy `dst.len()` bytes from device (or managed) memory at `src` into
    /// host memory. Blocks until done. Reports the path taken.
    fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<CopyPath, GpuError>;

    /// Copy `src` into device (or managed) memory at `dst`. Blocks until the
    /// bytes are in device memory.
    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<CopyPath, GpuError>;

    /// Copy `len` bytes between two device (or managed) addresses, either of
    /// which may be an IPC mapping. Blocks until done.
    fn copy_device(&self, dst: u64, src: u64, len: usize) -> Result<(), GpuError>;

    /// Pinned host memory of at least `len` bytes.
    fn alloc_pinned(&self, len: usize) -> Result<Box<dyn PinnedBuf>, GpuError>;

    /// Issue a copy of `len` bytes between the device (or managed) memory at
    /// `dev` and the start of the pinned buffer `host` (from
    /// [`CudaApi::alloc_pinned`]), in `dir`, on this backend's stream for
    /// that device, direction and `lane` (the caller's choice, e.g. the
    /// peer: copies for different lanes may run concurrently on the copy
    /// engines; `lane` is taken modulo [`crate::stage::LANES`]), with an
    /// event recorded after it; returns at once. The backend owns `host` until the copy has ended, so nothing
    /// else can touch it meanwhile. On an error nothing was issued and the
    /// buffer comes back with the error.
    fn copy_async(
        &self,
        dir: CopyDir,
        dev: u64,
        host: Box<dyn PinnedBuf>,
        len: usize,
        lane: u32,
    ) -> Result<Ticket, (GpuError, Box<dyn PinnedBuf>)>;

    /// `None` while the copy of `t` runs (its event has not completed);
    /// once it has ended, its buffer and result, and the ticket is spent.
    /// Copies of one stream (device, direction, lane) end in the order they
    /// were issued.
    fn copy_poll(&self, t: Ticket) -> Option<Landed>;

    /// Issue a copy of `len` bytes between two device (or managed)
    /// addresses, either of which may be an IPC mapping, on this backend's
    /// device-to-device stream for `dst`'s device and `lane`, with an event
    /// recorded after it; returns at once. Both ranges must stay valid
    /// until [`CudaApi::device_poll`] says the copy ended. On an error
    /// nothing was issued.
    fn copy_device_async(
        &self,
        dst: u64,
        src: u64,
        len: usize,
        lane: u32,
    ) -> Result<Ticket, GpuError>;

    /// `None` while the copy of `t` (from [`CudaApi::copy_device_async`])
    /// runs; then how it went, and the ticket is spent.
    fn device_poll(&self, t: Ticket) -> Option<Result<(), GpuError>>;

    /// Free what the backend keeps for the staging copies (their streams;
    /// copies still in flight are waited for): called by
    /// [`crate::Gpu::release`] at `MPI_Finalize`. Made again on next use.
    fn release(&self) {}

    /// Device memory of `len` bytes on the device that holds `near` (for a
    /// collective's temporary buffers).
    fn alloc_device(&self, len: usize, near: u64) -> Result<u64, GpuError>;

    /// Free memory from [`CudaApi::alloc_device`].
    fn free_device(&self, ptr: u64) -> Result<(), GpuError>;

    /// Whether legacy CUDA IPC ([`CudaApi::ipc_handle`]) can export the
    /// device allocation holding `addr`
    /// (`CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE`): true for
    /// `cuMemAlloc`/`cudaMalloc` memory; false for stream-ordered pool
    /// memory (`cuMemAllocAsync`/`cudaMallocAsync`, hence every `cudarc`
    /// `CudaSlice` on a device with memory pools), VMM memory
    /// (`cuMemCreate` + `cuMemMap`) and managed memory. An error where the
    /// driver cannot tell (an older driver without the attribute).
    fn ipc_capable(&self, addr: u64) -> Result<bool, GpuError>;

    /// The IPC handle of the allocation starting at `base`.
    fn ipc_handle(&self, base: u64) -> Result<IpcHandle, GpuError>;

    /// Map a peer's allocation; returns the local base address.
    fn ipc_open(&self, h: &IpcHandle) -> Result<u64, GpuError>;

    /// Unmap what [`CudaApi::ipc_open`] returned.
    fn ipc_close(&self, mapped: u64) -> Result<(), GpuError>;

    /// `inout[i] = op(inout[i], input[i])` for `count` elements of `ty`, on
    /// the device that holds `inout`; both are device addresses. Blocks until
    /// done. [`GpuError::KernelUnavailable`] when the kernel cannot be built
    /// or loaded (and nothing was touched).
    fn reduce(
        &self,
        op: ReduceOp,
        ty: ElemType,
        inout: u64,
        input: u64,
        count: usize,
    ) -> Result<(), GpuError>;

    /// Export `len` bytes of device memory at `addr` as a dma-buf file
    /// descriptor, for a NIC to register (`ibv_reg_dmabuf_mr`): the hook
    /// GPUDirect RDMA transports use. The export covers
    /// [`dmabuf_span`]`(addr, len)`.
    fn export_dmabuf(&self, addr: u64, len: usize) -> Result<DmaBufExport, GpuError>;

    /// Make `ordinal` the device of this thread (retaining its primary
    /// context if no context is current), for `select_device`.
    fn set_device(&self, ordinal: i32) -> Result<(), GpuError>;

    /// What the doctor reports.
    fn facts(&self) -> Facts;

    /// Make memory operations on the allocation holding `addr` synchronous
    /// (`CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`): a NIC that reads or writes it
    /// directly (GPUDirect RDMA) must never see a `cudaMemcpy` or
    /// `cudaMemset` on it still in flight. The default does nothing.
    fn sync_memops(&self, addr: u64) -> Result<(), GpuError> {
        let _ = addr;
        Ok(())
    }

    /// The PCI bus id of device `ordinal` (`0000:3B:00.0`), where the
    /// backend knows it: for a NIC to be chosen near the GPU.
    fn pci_bus_id(&self, ordinal: i32) -> Option<String> {
        let _ = ordinal;
        None
    }

    /// Whether device memory exports as dma-bufs ([`Facts::dmabuf`] alone,
    /// for a transport deciding on GPUDirect RDMA at start-up).
    fn dmabuf_supported(&self) -> Result<(), String> {
        self.facts().dmabuf
    }
}
