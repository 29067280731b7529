//! Every `unsafe` call of this crate: thin, safe wrappers over the CUDA
//! driver API (through `cudarc::driver::sys`, loaded at run time), NVRTC and
//! GDRCopy (`libgdrapi`, opened with `dlopen`).
//!
//! Each wrapper turns a `CUresult` into [`GpuError::Driver`] naming the call;
//! raw handles live in small `Copy` newtypes (`Ctx`, `Func`) or RAII owners
//! (`HostAlloc`, `Gdr`). Nothing here decides policy (which context, which
//! path): that is `mod.rs`.
//!
//! `cudarc`'s dynamic loading resolves each symbol lazily, on the first call
//! of that function, and panics when the library or the symbol is missing.
//! [`missing_driver_symbols`] resolves every driver symbol we use up front,
//! so `load()` reports a too-old or absent driver as an error instead of
//! panicking later. NVRTC is opened here directly ([`Nvrtc`]) rather than
//! through `cudarc::nvrtc`, whose library names miss the versioned
//! `libnvrtc.so.13` that CUDA 13 runtime packages install alone.

#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr;

use cudarc::driver::sys as cu;

use crate::api::{GpuError, PinnedBuf};

/// Result of this module.
pub(crate) type Res<T> = Result<T, GpuError>;

/// Driver symbols `load()` requires (all present since CUDA 11.7).
pub(crate) const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetPCIBusId",
    "cuDeviceGetAttribute",
    "cuDeviceCanAccessPeer",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxGetDevice",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuPointerGetAttribute",
    "cuPointerGetAttributes",
    "cuMemGetAddressRange_v2",
    "cuMemcpy",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuIpcGetMemHandle",
    "cuIpcOpenMemHandle_v2",
    "cuIpcCloseMemHandle",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuLaunchKernel",
    "cuStreamSynchronize",
    "cuPointerSetAttribute",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoDAsync_v2",
];

/// `cuCtxGetId` (CUDA 12.0): without it, contexts are told apart by handle.
pub(crate) const CTX_ID_SYMBOL: &str = "cuCtxGetId";

/// Driver symbols that may be missing (older drivers): their feature is then
/// reported unsupported.
pub(crate) const DMABUF_SYMBOL: &str = "cuMemGetHandleForAddressRange";

/// Whether a CUDA driver library (`libcuda.so*`) can be opened.
pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library (running its
    // initialisers, as any CUDA program does) and closes it again.
    unsafe { cu::is_culib_present() }
}

/// The subset of `names` the driver library does not export. Call only after
/// [`driver_present`] returned true (cudarc's `culib()` panics otherwise).
pub(crate) fn missing_driver_symbols<'a>(names: &[&'a str]) -> Vec<&'a str> {
    // SAFETY: `driver_present()` was checked by the caller, so `culib()`
    // finds the library; looking a symbol up as an untyped pointer calls
    // nothing.
    let lib = unsafe { cu::culib() };
    names
        .iter()
        // SAFETY: the symbol is only looked up, never called or dereferenced.
        .filter(|n| unsafe { lib.get::<*const c_void>(n.as_bytes()) }.is_err())
        .copied()
        .collect()
}

fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the driver returns pointers to static NUL-terminated strings.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// `CUDA_ERROR_X: text` for a result code.
pub(crate) fn error_text(r: cu::CUresult) -> String {
    let mut name: *const c_char = ptr::null();
    let mut text: *const c_char = ptr::null();
    // SAFETY: both out-pointers are valid; the driver writes static strings
    // (or leaves NULL for an unknown code).
    unsafe {
        let _ = cu::cuGetErrorName(r, &mut name);
        let _ = cu::cuGetErrorString(r, &mut text);
    }
    match (cstr(name), cstr(text)) {
        (Some(n), Some(t)) => format!("{n}: {t}"),
        (Some(n), None) => n,
        _ => format!("{r:?}"),
    }
}

fn check(call: &'static str, r: cu::CUresult) -> Res<()> {
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Driver {
            call,
            msg: error_text(r),
        })
    }
}

/// `cuInit(0)`.
pub(crate) fn init() -> Res<()> {
    // SAFETY: plain call, no pointers.
    check("cuInit", unsafe { cu::cuInit(0) })
}

/// `cuDriverGetVersion`: e.g. 13000.
pub(crate) fn driver_version() -> Res<i32> {
    let mut v: c_int = 0;
    // SAFETY: valid out-pointer.
    check("cuDriverGetVersion", unsafe {
        cu::cuDriverGetVersion(&mut v)
    })?;
    Ok(v)
}

/// `cuDeviceGetCount`.
pub(crate) fn device_count() -> Res<i32> {
    let mut n: c_int = 0;
    // SAFETY: valid out-pointer.
    check("cuDeviceGetCount", unsafe { cu::cuDeviceGetCount(&mut n) })?;
    Ok(n)
}

fn device(ordinal: i32) -> Res<cu::CUdevice> {
    let mut d: cu::CUdevice = 0;
    // SAFETY: valid out-pointer.
    check("cuDeviceGet", unsafe { cu::cuDeviceGet(&mut d, ordinal) })?;
    Ok(d)
}

fn string_from_buf(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `cuDeviceGetName`.
pub(crate) fn device_name(ordinal: i32) -> Res<String> {
    let d = device(ordinal)?;
    let mut buf = [0 as c_char; 256];
    // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
    check("cuDeviceGetName", unsafe {
        cu::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int - 1, d)
    })?;
    Ok(string_from_buf(&buf))
}

/// `cuDeviceGetPCIBusId` (`dddd:bb:dd.f`).
pub(crate) fn device_pci_bus_id(ordinal: i32) -> Res<String> {
    let d = device(ordinal)?;
    let mut buf = [0 as c_char; 64];
    // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
    check("cuDeviceGetPCIBusId", unsafe {
        cu::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int - 1, d)
    })?;
    Ok(string_from_buf(&buf))
}

/// `cuDeviceTotalMem_v2`.
pub(crate) fn device_total_mem(ordinal: i32) -> Res<usize> {
    let d = device(ordinal)?;
    let mut n: usize = 0;
    // SAFETY: valid out-pointer.
    check("cuDeviceTotalMem_v2", unsafe {
        cu::cuDeviceTotalMem_v2(&mut n, d)
    })?;
    Ok(n)
}

/// `cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)`.
pub(crate) fn device_dmabuf_supported(ordinal: i32) -> Res<bool> {
    let d = device(ordinal)?;
    let mut v: c_int = 0;
    // SAFETY: valid out-pointer; the attribute exists since CUDA 11.7.
    check("cuDeviceGetAttribute", unsafe {
        cu::cuDeviceGetAttribute(
            &mut v,
            cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
            d,
        )
    })?;
    Ok(v != 0)
}

/// `cuDeviceCanAccessPeer(a, b)`.
pub(crate) fn can_access_peer(a: i32, b: i32) -> Res<bool> {
    let (da, db) = (device(a)?, device(b)?);
    let mut v: c_int = 0;
    // SAFETY: valid out-pointer.
    check("cuDeviceCanAccessPeer", unsafe {
        cu::cuDeviceCanAccessPeer(&mut v, da, db)
    })?;
    Ok(v != 0)
}

/// A CUDA context handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ctx(cu::CUcontext);

// SAFETY: a CUcontext is an opaque driver handle; the driver API is
// thread-safe and a context may be made current on any thread.
unsafe impl Send for Ctx {}
// SAFETY: as above; the handle is never dereferenced by us.
unsafe impl Sync for Ctx {}

impl Ctx {
    /// The handle as an integer (cache keys, logs).
    pub(crate) fn id(self) -> usize {
        self.0 as usize
    }
}

/// `cuCtxGetId`: the context's id, unique over the life of the process
/// (unlike the handle, which a new context may reuse).
pub(crate) fn ctx_unique_id(c: Ctx) -> Res<u64> {
    let mut id: u64 = 0;
    // SAFETY: `c` is the current (live) context; valid out-pointer.
    check("cuCtxGetId", unsafe { cu::cuCtxGetId(c.0, &mut id) })?;
    Ok(id)
}

/// `cuCtxGetCurrent`: `None` when the thread has no current context.
pub(crate) fn ctx_current() -> Res<Option<Ctx>> {
    let mut c: cu::CUcontext = ptr::null_mut();
    // SAFETY: valid out-pointer.
    check("cuCtxGetCurrent", unsafe { cu::cuCtxGetCurrent(&mut c) })?;
    Ok((!c.is_null()).then_some(Ctx(c)))
}

/// `cuCtxGetDevice` of the current context.
pub(crate) fn ctx_device() -> Res<i32> {
    let mut d: cu::CUdevice = 0;
    // SAFETY: valid out-pointer.
    check("cuCtxGetDevice", unsafe { cu::cuCtxGetDevice(&mut d) })?;
    Ok(d)
}

/// `cuDevicePrimaryCtxRetain`: one reference, dropped by
/// [`primary_ctx_release`].
pub(crate) fn primary_ctx_retain(ordinal: i32) -> Res<Ctx> {
    let d = device(ordinal)?;
    let mut c: cu::CUcontext = ptr::null_mut();
    // SAFETY: valid out-pointer.
    check("cuDevicePrimaryCtxRetain", unsafe {
        cu::cuDevicePrimaryCtxRetain(&mut c, d)
    })?;
    Ok(Ctx(c))
}

/// `cuDevicePrimaryCtxRelease_v2`.
pub(crate) fn primary_ctx_release(ordinal: i32) -> Res<()> {
    let d = device(ordinal)?;
    // SAFETY: releases one reference this process took with
    // `primary_ctx_retain`.
    check("cuDevicePrimaryCtxRelease_v2", unsafe {
        cu::cuDevicePrimaryCtxRelease_v2(d)
    })
}

/// `cuCtxSetCurrent`.
pub(crate) fn ctx_set_current(c: Ctx) -> Res<()> {
    // SAFETY: `c` is a live (retained) context.
    check("cuCtxSetCurrent", unsafe { cu::cuCtxSetCurrent(c.0) })
}

/// `cuCtxPushCurrent_v2`.
pub(crate) fn ctx_push(c: Ctx) -> Res<()> {
    // SAFETY: `c` is a live (retained) context.
    check("cuCtxPushCurrent_v2", unsafe {
        cu::cuCtxPushCurrent_v2(c.0)
    })
}

/// `cuCtxPopCurrent_v2` (undoes [`ctx_push`]).
pub(crate) fn ctx_pop() -> Res<()> {
    let mut c: cu::CUcontext = ptr::null_mut();
    // SAFETY: valid out-pointer; only called after a successful push.
    check("cuCtxPopCurrent_v2", unsafe {
        cu::cuCtxPopCurrent_v2(&mut c)
    })
}

/// What one `cuPointerGetAttributes` call says about an address.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RawAttrs {
    /// `CUmemorytype` (0: not a CUDA address).
    pub memory_type: u32,
    pub ordinal: i32,
    pub buffer_id: u64,
    pub is_managed: bool,
    pub context: usize,
    pub range_start: u64,
    pub range_size: u64,
}

/// `CU_MEMORYTYPE_DEVICE`.
pub(crate) const MEMORYTYPE_DEVICE: u32 = cu::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32;

/// One `cuPointerGetAttributes` for memory type, device ordinal, buffer id,
/// managed flag, context and allocation range. `Ok(None)` where the driver
/// answers `CUDA_ERROR_INVALID_VALUE`, `NOT_INITIALIZED` or
/// `DEINITIALIZED` (not a CUDA address).
pub(crate) fn pointer_attributes(addr: u64) -> Res<Option<RawAttrs>> {
    use cu::CUpointer_attribute as A;
    let mut attrs = [
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        A::CU_POINTER_ATTRIBUTE_BUFFER_ID,
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_CONTEXT,
        A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    // Every attribute is written into a zeroed 8-byte slot: the driver
    // writes 1 (bool), 4 (CUmemorytype, int) or 8 bytes (ids, pointers,
    // sizes), and on little-endian hosts the low bytes of the slot hold the
    // value whatever its width.
    let mut vals = [0u64; 7];
    let mut data: [*mut c_void; 7] = [ptr::null_mut(); 7];
    for (d, v) in data.iter_mut().zip(vals.iter_mut()) {
        *d = (v as *mut u64).cast();
    }
    // SAFETY: `attrs` and `data` have 7 entries each; every data pointer
    // points at 8 writable bytes, enough for each attribute's type.
    let r = unsafe {
        cu::cuPointerGetAttributes(
            attrs.len() as c_uint,
            attrs.as_mut_ptr(),
            data.as_mut_ptr(),
            addr,
        )
    };
    use cu::CUresult as R;
    match r {
        R::CUDA_SUCCESS => {}
        R::CUDA_ERROR_INVALID_VALUE
        | R::CUDA_ERROR_NOT_INITIALIZED
        | R::CUDA_ERROR_DEINITIALIZED => return Ok(None),
        r => {
            return Err(GpuError::Driver {
                call: "cuPointerGetAttributes",
                msg: error_text(r),
            })
        }
    }
    Ok(Some(RawAttrs {
        memory_type: vals[0] as u32,
        ordinal: vals[1] as u32 as i32,
        buffer_id: vals[2],
        is_managed: vals[3] & 0xff != 0,
        context: vals[4] as usize,
        range_start: vals[5],
        range_size: vals[6],
    }))
}

fn pointer_attr(addr: u64, a: cu::CUpointer_attribute, call: &'static str) -> Res<u64> {
    let mut v = 0u64;
    // SAFETY: 8 writable zeroed bytes, enough for any attribute read here
    // (see `pointer_attributes` for the width argument).
    check(call, unsafe {
        cu::cuPointerGetAttribute((&mut v as *mut u64).cast(), a, addr)
    })?;
    Ok(v)
}

/// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID)`.
pub(crate) fn pointer_buffer_id(addr: u64) -> Res<u64> {
    pointer_attr(
        addr,
        cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID,
        "cuPointerGetAttribute",
    )
}

/// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)`.
pub(crate) fn pointer_ordinal(addr: u64) -> Res<i32> {
    pointer_attr(
        addr,
        cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        "cuPointerGetAttribute",
    )
    .map(|v| v as u32 as i32)
}

/// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE)`:
/// false for stream-ordered (pool) and VMM (`cuMemCreate`) allocations.
pub(crate) fn pointer_ipc_capable(addr: u64) -> Res<bool> {
    pointer_attr(
        addr,
        cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        "cuPointerGetAttribute",
    )
    .map(|v| v & 0xff != 0)
}

/// `cuPointerSetAttribute(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, 1)`: makes
/// memory operations on the allocation synchronous, which GDRCopy needs
/// for its CPU mapping to be consistent with `cuMemcpy`s.
pub(crate) fn set_sync_memops(addr: u64) -> Res<()> {
    let one: c_uint = 1;
    // SAFETY: the attribute's value is an `unsigned int`, read only.
    check("cuPointerSetAttribute", unsafe {
        cu::cuPointerSetAttribute(
            (&one as *const c_uint).cast(),
            cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
            addr,
        )
    })
}

/// `cuMemGetAddressRange_v2`: (base, size).
pub(crate) fn mem_address_range(addr: u64) -> Res<(u64, u64)> {
    let (mut base, mut size): (cu::CUdeviceptr, usize) = (0, 0);
    // SAFETY: valid out-pointers.
    check("cuMemGetAddressRange_v2", unsafe {
        cu::cuMemGetAddressRange_v2(&mut base, &mut size, addr)
    })?;
    Ok((base, size as u64))
}

/// `cuMemcpyDtoH_v2` (synchronous) into `dst`.
pub(crate) fn memcpy_dtoh(dst: &mut [u8], src: u64) -> Res<()> {
    // SAFETY: `dst` is `dst.len()` writable bytes; the driver checks `src`.
    check("cuMemcpyDtoH_v2", unsafe {
        cu::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len())
    })
}

/// `cuMemcpyHtoD_v2` (synchronous for pageable memory; for pinned memory
/// it may return before the DMA ends, so callers synchronize).
pub(crate) fn memcpy_htod(dst: u64, src: &[u8]) -> Res<()> {
    // SAFETY: `src` is `src.len()` readable bytes; the driver checks `dst`.
    check("cuMemcpyHtoD_v2", unsafe {
        cu::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len())
    })
}

/// `cuMemcpy` (unified addressing: device, managed or mapped IPC memory).
pub(crate) fn memcpy(dst: u64, src: u64, len: usize) -> Res<()> {
    // SAFETY: device addresses only; the driver validates them.
    check("cuMemcpy", unsafe { cu::cuMemcpy(dst, src, len) })
}

/// `cuStreamSynchronize(NULL)`: wait for the legacy default stream.
pub(crate) fn sync_default_stream() -> Res<()> {
    // SAFETY: the NULL stream of the current context.
    check("cuStreamSynchronize", unsafe {
        cu::cuStreamSynchronize(ptr::null_mut())
    })
}

/// A stream of the current context (`cuStreamCreate`, a blocking stream:
/// its copies wait for work queued before them on the legacy default
/// stream, as the synchronous copies they replace did, so a program that
/// filled a buffer on the default stream and called MPI sends the new
/// bytes), for the staging copies of one direction; destroyed on drop.
#[derive(Debug)]
pub(crate) struct Stream(cu::CUstream);

// SAFETY: a stream handle may be used from any thread; the backend issues
// on it under its lock.
unsafe impl Send for Stream {}
// SAFETY: as above; the handle is never mutated.
unsafe impl Sync for Stream {}

/// `cuStreamCreate(CU_STREAM_DEFAULT)` in the current context.
pub(crate) fn stream_create() -> Res<Stream> {
    let mut s: cu::CUstream = ptr::null_mut();
    // SAFETY: valid out-pointer.
    check("cuStreamCreate", unsafe {
        cu::cuStreamCreate(&mut s, cu::CUstream_flags::CU_STREAM_DEFAULT as c_uint)
    })?;
    Ok(Stream(s))
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: a stream this value created; nothing uses it after this.
        let _ = unsafe { cu::cuStreamDestroy_v2(self.0) };
    }
}

/// An asynchronous copy between device memory and a pinned buffer, with the
/// event recorded after it. It owns the buffer until the event has
/// completed, so nothing can touch the bytes the DMA engine is moving; if
/// dropped before, it waits for the event first.
#[derive(Debug)]
pub(crate) struct InFlight {
    event: cu::CUevent,
    host: Option<Box<dyn PinnedBuf>>,
}

// SAFETY: the event handle may be queried from any thread; the buffer is
// `Send`.
unsafe impl Send for InFlight {}

impl InFlight {
    /// Issue `len` bytes from `dev` into `host` (`to_host`) or from `host`
    /// into `dev` on `s`, then record an event. On an error nothing is in
    /// flight and the buffer comes back.
    pub(crate) fn issue(
        to_host: bool,
        dev: u64,
        mut host: Box<dyn PinnedBuf>,
        len: usize,
        s: &Stream,
    ) -> Result<Self, (GpuError, Box<dyn PinnedBuf>)> {
        let buf = host.as_mut_slice();
        if buf.len() < len {
            return Err((
                GpuError::BadRange {
                    addr: dev,
                    len,
                    why: "longer than its pinned buffer".into(),
                },
                host,
            ));
        }
        let p = buf.as_mut_ptr();
        // SAFETY: `p` is `len` bytes of the pinned buffer `host`, which this
        // value owns (a heap allocation that does not move with the box)
        // and keeps, unread and unwritten, until the event recorded below
        // has completed (`poll`, or `drop`, which waits for it).
        let r = unsafe {
            if to_host {
                cu::cuMemcpyDtoHAsync_v2(p.cast(), dev, len, s.0)
            } else {
                cu::cuMemcpyHtoDAsync_v2(dev, p.cast(), len, s.0)
            }
        };
        let call = if to_host {
            "cuMemcpyDtoHAsync_v2"
        } else {
            "cuMemcpyHtoDAsync_v2"
        };
        if let Err(e) = check(call, r) {
            return Err((e, host));
        }
        // Without an event the copy has been waited for: the buffer can go
        // back.
        let event = match record_after(s) {
            Ok(e) => e,
            Err(e) => return Err((e, host)),
        };
        Ok(Self {
            event,
            host: Some(host),
        })
    }

    /// `None` while the copy runs; then the buffer and how it went.
    pub(crate) fn poll(&mut self) -> Option<(Box<dyn PinnedBuf>, Res<()>)> {
        let res = event_ended(self.event)?;
        self.host.take().map(|h| (h, res))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(host) = self.host.take() {
            // SAFETY: the event this value recorded: wait until the DMA
            // engine no longer uses the buffer dropped next.
            let r = unsafe { cu::cuEventSynchronize(self.event) };
            if r != cu::CUresult::CUDA_SUCCESS {
                // Whether the engine is done with it is unknown: leak the
                // pinned buffer rather than free memory a copy may write.
                tracing::warn!(target: "gpu", "cuEventSynchronize failed ({}): leaking a pinned staging buffer", error_text(r));
                std::mem::forget(host);
            }
        }
        // SAFETY: the event this value made; nothing uses it after this.
        let _ = unsafe { cu::cuEventDestroy_v2(self.event) };
    }
}

/// An asynchronous device-to-device copy with the event recorded after it;
/// dropped before it has ended, it waits for it (so that nothing freed next
/// is still being written).
#[derive(Debug)]
pub(crate) struct DeviceCopy {
    event: cu::CUevent,
    ended: bool,
}

// SAFETY: the event handle may be queried and destroyed from any thread.
unsafe impl Send for DeviceCopy {}

/// Make an event and record it on `s`; on an error, wait for `s` instead
/// (what was issued on it has then ended) and make no event.
fn record_after(s: &Stream) -> Res<cu::CUevent> {
    let mut event: cu::CUevent = ptr::null_mut();
    // SAFETY: valid out-pointer.
    let made = check("cuEventCreate", unsafe {
        cu::cuEventCreate(
            &mut event,
            cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint,
        )
    })
    // SAFETY: the event just made, on the caller's stream.
    .and_then(|()| check("cuEventRecord", unsafe { cu::cuEventRecord(event, s.0) }));
    if let Err(e) = made {
        // SAFETY: the caller's stream.
        let _ = unsafe { cu::cuStreamSynchronize(s.0) };
        if !event.is_null() {
            // SAFETY: the event made above, not recorded.
            let _ = unsafe { cu::cuEventDestroy_v2(event) };
        }
        return Err(e);
    }
    Ok(event)
}

/// `None` while the work before `event` runs; then how it went. On an
/// error (a failed copy, a broken context) it first waits for the event, so
/// that the engine is done with the memory the caller then hands back.
fn event_ended(event: cu::CUevent) -> Option<Res<()>> {
    // SAFETY: a recorded event of the caller's, not destroyed yet.
    let r = unsafe { cu::cuEventQuery(event) };
    match r {
        cu::CUresult::CUDA_ERROR_NOT_READY => None,
        cu::CUresult::CUDA_SUCCESS => Some(Ok(())),
        r => {
            // SAFETY: as above.
            let _ = unsafe { cu::cuEventSynchronize(event) };
            Some(check("cuEventQuery", r))
        }
    }
}

impl DeviceCopy {
    /// Issue `len` bytes from `src` to `dst` on `s`, then record an event.
    pub(crate) fn issue(dst: u64, src: u64, len: usize, s: &Stream) -> Res<Self> {
        // SAFETY: device addresses only, which the driver validates; the
        // caller keeps both ranges valid until the copy has ended.
        check("cuMemcpyDtoDAsync_v2", unsafe {
            cu::cuMemcpyDtoDAsync_v2(dst, src, len, s.0)
        })?;
        Ok(Self {
            event: record_after(s)?,
            ended: false,
        })
    }

    /// `None` while the copy runs; then how it went.
    pub(crate) fn poll(&mut self) -> Option<Res<()>> {
        let res = event_ended(self.event)?;
        self.ended = true;
        Some(res)
    }
}

impl Drop for DeviceCopy {
    fn drop(&mut self) {
        if !self.ended {
            // SAFETY: the event this value recorded.
            let _ = unsafe { cu::cuEventSynchronize(self.event) };
        }
        // SAFETY: the event this value made; nothing uses it after this.
        let _ = unsafe { cu::cuEventDestroy_v2(self.event) };
    }
}

/// Pinned host memory from `cuMemHostAlloc(PORTABLE)`, freed with
/// `cuMemFreeHost` on drop.
#[derive(Debug)]
pub(crate) struct HostAlloc {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the allocation is plain host memory owned by this value.
unsafe impl Send for HostAlloc {}

impl HostAlloc {
    /// The bytes.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is `len` bytes of host memory owned by `self`,
        // zero-initialised at allocation.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `cuMemHostAlloc` and is freed once.
        let r = unsafe { cu::cuMemFreeHost(self.ptr.cast()) };
        if let Err(e) = check("cuMemFreeHost", r) {
            tracing::warn!(target: "gpu", "{e}");
        }
    }
}

/// `cuMemHostAlloc(len, CU_MEMHOSTALLOC_PORTABLE)` in the current context.
pub(crate) fn mem_host_alloc(len: usize) -> Res<HostAlloc> {
    let len = len.max(1);
    let mut p: *mut c_void = ptr::null_mut();
    // SAFETY: valid out-pointer.
    check("cuMemHostAlloc", unsafe {
        cu::cuMemHostAlloc(&mut p, len, cu::CU_MEMHOSTALLOC_PORTABLE)
    })?;
    // SAFETY: `p` is `len` fresh writable bytes; zeroing them makes the
    // later `&mut [u8]` view initialised memory.
    unsafe { ptr::write_bytes(p.cast::<u8>(), 0, len) };
    Ok(HostAlloc { ptr: p.cast(), len })
}

/// `cuMemAlloc_v2` in the current context.
pub(crate) fn mem_alloc(len: usize) -> Res<u64> {
    let mut p: cu::CUdeviceptr = 0;
    // SAFETY: valid out-pointer.
    check("cuMemAlloc_v2", unsafe { cu::cuMemAlloc_v2(&mut p, len) })?;
    Ok(p)
}

/// `cuMemFree_v2`.
pub(crate) fn mem_free(p: u64) -> Res<()> {
    // SAFETY: the driver rejects addresses that are not allocations.
    check("cuMemFree_v2", unsafe { cu::cuMemFree_v2(p) })
}

/// `cuIpcGetMemHandle`.
pub(crate) fn ipc_get_handle(base: u64) -> Res<[u8; 64]> {
    // SAFETY: CUipcMemHandle is 64 plain bytes; all-zero is a valid value.
    let mut h: cu::CUipcMemHandle = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    check("cuIpcGetMemHandle", unsafe {
        cu::cuIpcGetMemHandle(&mut h, base)
    })?;
    Ok(h.reserved.map(|c| c as u8))
}

/// `cuIpcOpenMemHandle_v2(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)`.
pub(crate) fn ipc_open(h: &[u8; 64]) -> Res<u64> {
    // SAFETY: CUipcMemHandle is 64 plain bytes; all-zero is a valid value.
    let mut handle: cu::CUipcMemHandle = unsafe { std::mem::zeroed() };
    handle.reserved = h.map(|b| b as c_char);
    let mut p: cu::CUdeviceptr = 0;
    // SAFETY: valid out-pointer; the handle is passed by value.
    check("cuIpcOpenMemHandle_v2", unsafe {
        cu::cuIpcOpenMemHandle_v2(
            &mut p,
            handle,
            cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as c_uint,
        )
    })?;
    Ok(p)
}

/// `cuIpcCloseMemHandle`.
pub(crate) fn ipc_close(p: u64) -> Res<()> {
    // SAFETY: the driver rejects addresses it did not map.
    check("cuIpcCloseMemHandle", unsafe { cu::cuIpcCloseMemHandle(p) })
}

/// `cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)`.
/// `addr` and `len` must be page aligned (see the caller).
pub(crate) fn dmabuf_fd(addr: u64, len: usize) -> Res<OwnedFd> {
    let mut fd: c_int = -1;
    // SAFETY: for the DMA_BUF_FD type the handle out-parameter is an `int`.
    check("cuMemGetHandleForAddressRange", unsafe {
        cu::cuMemGetHandleForAddressRange(
            (&mut fd as *mut c_int).cast(),
            addr,
            len,
            cu::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0,
        )
    })?;
    if fd < 0 {
        return Err(GpuError::Driver {
            call: "cuMemGetHandleForAddressRange",
            msg: format!("returned fd {fd}"),
        });
    }
    // SAFETY: the driver created `fd` for us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A kernel (`CUfunction`) of a module loaded into a context that this
/// process keeps alive (modules are never unloaded: they live as long as the
/// retained context).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Func(cu::CUfunction);

// SAFETY: an opaque driver handle; launching is thread-safe.
unsafe impl Send for Func {}
// SAFETY: as above.
unsafe impl Sync for Func {}

/// `cuModuleLoadData` of `ptx` into the current context, then
/// `cuModuleGetFunction(name)`.
pub(crate) fn load_function(ptx: &CStr, name: &str) -> Res<Func> {
    let mut m: cu::CUmodule = ptr::null_mut();
    // SAFETY: `ptx` is a NUL-terminated PTX image.
    check("cuModuleLoadData", unsafe {
        cu::cuModuleLoadData(&mut m, ptx.as_ptr().cast())
    })?;
    let cname = CString::new(name).map_err(|_| GpuError::Driver {
        call: "cuModuleGetFunction",
        msg: "kernel name contains NUL".into(),
    })?;
    let mut f: cu::CUfunction = ptr::null_mut();
    // SAFETY: `m` was just loaded; `cname` is NUL-terminated.
    check("cuModuleGetFunction", unsafe {
        cu::cuModuleGetFunction(&mut f, m, cname.as_ptr())
    })?;
    Ok(Func(f))
}

/// Launch `f(a, b, n)` (a reduction kernel: `T*`, `const T*`,
/// `unsigned long long`) on the legacy default stream of the current
/// context and wait for it.
pub(crate) fn launch_reduce(f: Func, grid: u32, block: u32, a: u64, b: u64, n: u64) -> Res<()> {
    let (mut a, mut b, mut n) = (a, b, n);
    let mut params: [*mut c_void; 3] = [
        (&mut a as *mut u64).cast(),
        (&mut b as *mut u64).cast(),
        (&mut n as *mut u64).cast(),
    ];
    // SAFETY: `params` points at three 8-byte values matching the kernel's
    // parameters (two pointers and an unsigned long long); they outlive the
    // call, which copies them.
    check("cuLaunchKernel", unsafe {
        cu::cuLaunchKernel(
            f.0,
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            ptr::null_mut(),
            params.as_mut_ptr(),
            ptr::null_mut(),
        )
    })?;
    sync_default_stream()
}

// ---------------------------------------------------------------------------
// GDRCopy (libgdrapi, gdrapi.h of GDRCopy 2.x)

/// `gdr_mh_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct GdrMh {
    h: std::ffi::c_ulong,
}

type GdrOpenFn = unsafe extern "C" fn() -> *mut c_void;
type GdrCloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type GdrPinFn =
    unsafe extern "C" fn(*mut c_void, std::ffi::c_ulong, usize, u64, u32, *mut GdrMh) -> c_int;
type GdrUnpinFn = unsafe extern "C" fn(*mut c_void, GdrMh) -> c_int;
type GdrMapFn = unsafe extern "C" fn(*mut c_void, GdrMh, *mut *mut c_void, usize) -> c_int;
type GdrUnmapFn = unsafe extern "C" fn(*mut c_void, GdrMh, *mut c_void, usize) -> c_int;
type GdrCopyToFn = unsafe extern "C" fn(GdrMh, *mut c_void, *const c_void, usize) -> c_int;
type GdrCopyFromFn = unsafe extern "C" fn(GdrMh, *mut c_void, *const c_void, usize) -> c_int;
type GdrRtVersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type GdrDrvVersionFn = unsafe extern "C" fn(*mut c_void, *mut c_int, *mut c_int) -> c_int;

/// GPU page size GDRCopy pins and maps in (`GPU_PAGE_SIZE`, 64 KiB).
pub(crate) const GPU_PAGE: u64 = 1 << 16;

/// An open GDRCopy handle (`gdr_open`), closed on drop.
#[derive(Debug)]
pub(crate) struct Gdr {
    g: *mut c_void,
    close: GdrCloseFn,
    pin: GdrPinFn,
    unpin: GdrUnpinFn,
    map: GdrMapFn,
    unmap: GdrUnmapFn,
    copy_to: GdrCopyToFn,
    copy_from: GdrCopyFromFn,
    version: String,
    // Last: the library stays loaded while the function pointers live.
    _lib: libloading::Library,
}

// SAFETY: a gdr_t may be used from any thread; `Cuda` serialises pin, map
// and copy calls under one mutex.
unsafe impl Send for Gdr {}
// SAFETY: as above.
unsafe impl Sync for Gdr {}

/// A pinned and CPU-mapped device range (one allocation, rounded out to
/// GPU pages). Unmapped by [`Gdr::release`].
#[derive(Debug)]
pub(crate) struct GdrMapping {
    mh: GdrMh,
    va: *mut c_void,
    /// Device address the mapping starts at (GPU-page aligned).
    pub start: u64,
    /// Mapped bytes.
    pub len: usize,
}

// SAFETY: the mapping is plain memory of this process; `Cuda` uses it
// under its GDRCopy mutex only.
unsafe impl Send for GdrMapping {}

fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // SAFETY: `T` is the function type gdrapi.h declares for `name`.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("libgdrapi lacks {name}: {e}"))
}

impl Gdr {
    /// `dlopen` libgdrapi and `gdr_open()`. `Err` says why GDRCopy cannot
    /// be used (library absent, gdrdrv kernel module not loaded).
    pub(crate) fn open() -> Result<Self, String> {
        let mut errs = Vec::new();
        let mut found = None;
        for name in ["libgdrapi.so.2", "libgdrapi.so"] {
            // SAFETY: loading libgdrapi runs its initialisers, which only
            // set up its own state.
            match unsafe { libloading::Library::new(name) } {
                Ok(l) => {
                    found = Some(l);
                    break;
                }
                Err(e) => errs.push(format!("{name}: {e}")),
            }
        }
        let lib = found.ok_or_else(|| format!("libgdrapi not found ({})", errs.join("; ")))?;
        let open: GdrOpenFn = sym(&lib, "gdr_open")?;
        let close: GdrCloseFn = sym(&lib, "gdr_close")?;
        let pin: GdrPinFn = sym(&lib, "gdr_pin_buffer")?;
        let unpin: GdrUnpinFn = sym(&lib, "gdr_unpin_buffer")?;
        let map: GdrMapFn = sym(&lib, "gdr_map")?;
        let unmap: GdrUnmapFn = sym(&lib, "gdr_unmap")?;
        let copy_to: GdrCopyToFn = sym(&lib, "gdr_copy_to_mapping")?;
        let copy_from: GdrCopyFromFn = sym(&lib, "gdr_copy_from_mapping")?;
        let rt_version: Option<GdrRtVersionFn> = sym(&lib, "gdr_runtime_get_version").ok();
        let drv_version: Option<GdrDrvVersionFn> = sym(&lib, "gdr_driver_get_version").ok();
        // SAFETY: gdr_open takes no arguments; NULL means gdrdrv is absent.
        let g = unsafe { open() };
        if g.is_null() {
            return Err("gdr_open failed (is the gdrdrv kernel module loaded?)".into());
        }
        let (mut a, mut b, mut c, mut d) = (0, 0, 0, 0);
        let mut version = String::from("GDRCopy");
        if let Some(f) = rt_version {
            // SAFETY: valid out-pointers.
            unsafe { f(&mut a, &mut b) };
            version = format!("GDRCopy {a}.{b}");
        }
        if let Some(f) = drv_version {
            // SAFETY: `g` is open; valid out-pointers.
            if unsafe { f(g, &mut c, &mut d) } == 0 {
                version.push_str(&format!(" (gdrdrv {c}.{d})"));
            }
        }
        Ok(Self {
            g,
            close,
            pin,
            unpin,
            map,
            unmap,
            copy_to,
            copy_from,
            version,
            _lib: lib,
        })
    }

    /// Library and kernel driver versions.
    pub(crate) fn version(&self) -> &str {
        &self.version
    }

    /// Pin and map `len` device bytes at `start` (both GPU-page aligned).
    pub(crate) fn pin_map(&self, start: u64, len: usize) -> Result<GdrMapping, String> {
        let mut mh = GdrMh { h: 0 };
        // SAFETY: `g` is open; valid out-pointer; p2p token and VA space 0
        // as for any process-local allocation.
        let r = unsafe { (self.pin)(self.g, start as std::ffi::c_ulong, len, 0, 0, &mut mh) };
        if r != 0 {
            return Err(format!("gdr_pin_buffer({start:#x}+{len}) failed: {r}"));
        }
        let mut va: *mut c_void = ptr::null_mut();
        // SAFETY: `mh` was just pinned; valid out-pointer.
        let r = unsafe { (self.map)(self.g, mh, &mut va, len) };
        if r != 0 || va.is_null() {
            // SAFETY: undo the pin above.
            unsafe { (self.unpin)(self.g, mh) };
            return Err(format!("gdr_map({start:#x}+{len}) failed: {r}"));
        }
        Ok(GdrMapping { mh, va, start, len })
    }

    /// Unmap and unpin.
    pub(crate) fn release(&self, m: GdrMapping) {
        // SAFETY: `m` came from `pin_map` on this handle and is released
        // once (it is consumed).
        unsafe {
            (self.unmap)(self.g, m.mh, m.va, m.len);
            (self.unpin)(self.g, m.mh);
        }
    }

    fn bounds(m: &GdrMapping, off: usize, n: usize) -> Res<()> {
        if off.checked_add(n).is_some_and(|e| e <= m.len) {
            Ok(())
        } else {
            Err(GpuError::BadRange {
                addr: m.start + off as u64,
                len: n,
                why: format!("outside the GDRCopy mapping {:#x}+{}", m.start, m.len),
            })
        }
    }

    /// Copy from the mapping at byte `off` into `dst`.
    pub(crate) fn copy_from(&self, m: &GdrMapping, off: usize, dst: &mut [u8]) -> Res<()> {
        Self::bounds(m, off, dst.len())?;
        // SAFETY: `off + dst.len()` is within the mapping (checked above);
        // `dst` is writable.
        let r = unsafe {
            (self.copy_from)(
                m.mh,
                dst.as_mut_ptr().cast(),
                m.va.cast::<u8>().add(off).cast(),
                dst.len(),
            )
        };
        if r != 0 {
            return Err(GpuError::Driver {
                call: "gdr_copy_from_mapping",
                msg: format!("returned {r}"),
            });
        }
        Ok(())
    }

    /// Copy `src` into the mapping at byte `off`.
    pub(crate) fn copy_to(&self, m: &GdrMapping, off: usize, src: &[u8]) -> Res<()> {
        Self::bounds(m, off, src.len())?;
        // SAFETY: `off + src.len()` is within the mapping (checked above);
        // `src` is readable.
        let r = unsafe {
            (self.copy_to)(
                m.mh,
                m.va.cast::<u8>().add(off).cast(),
                src.as_ptr().cast(),
                src.len(),
            )
        };
        if r != 0 {
            return Err(GpuError::Driver {
                call: "gdr_copy_to_mapping",
                msg: format!("returned {r}"),
            });
        }
        Ok(())
    }
}

impl Drop for Gdr {
    fn drop(&mut self) {
        // SAFETY: `g` is open and closed once; mappings not released yet
        // are torn down by gdr_close.
        unsafe { (self.close)(self.g) };
    }
}

// ---------------------------------------------------------------------------
// NVRTC (nvrtc.h), opened with dlopen

type NvrtcProgram = *mut c_void;
type NvrtcCreateFn = unsafe extern "C" fn(
    *mut NvrtcProgram,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type NvrtcCompileFn = unsafe extern "C" fn(NvrtcProgram, c_int, *const *const c_char) -> c_int;
type NvrtcSizeFn = unsafe extern "C" fn(NvrtcProgram, *mut usize) -> c_int;
type NvrtcGetFn = unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> c_int;
type NvrtcDestroyFn = unsafe extern "C" fn(*mut NvrtcProgram) -> c_int;
type NvrtcErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// Library names tried for NVRTC, newest first after the unversioned one.
const NVRTC_NAMES: &[&str] = &[
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
];

/// The NVRTC library and the functions gmpi calls.
#[derive(Debug)]
pub(crate) struct Nvrtc {
    create: NvrtcCreateFn,
    compile: NvrtcCompileFn,
    ptx_size: NvrtcSizeFn,
    ptx: NvrtcGetFn,
    log_size: NvrtcSizeFn,
    log: NvrtcGetFn,
    destroy: NvrtcDestroyFn,
    error_string: NvrtcErrorStringFn,
    // Last: the library stays loaded while the function pointers live.
    _lib: libloading::Library,
}

// SAFETY: NVRTC is thread-safe for distinct programs; each compile uses
// its own program.
unsafe impl Send for Nvrtc {}
// SAFETY: as above.
unsafe impl Sync for Nvrtc {}

fn nvrtc_sym<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // SAFETY: `T` is the function type nvrtc.h declares for `name`.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("NVRTC lacks {name}: {e}"))
}

impl Nvrtc {
    /// `dlopen` NVRTC. `Err` says why it cannot be used.
    pub(crate) fn open() -> Result<Self, String> {
        let mut errs = Vec::new();
        let mut found = None;
        for &name in NVRTC_NAMES {
            // SAFETY: loading NVRTC runs its initialisers, which only set up
            // its own state.
            match unsafe { libloading::Library::new(name) } {
                Ok(l) => {
                    found = Some(l);
                    break;
                }
                Err(e) => errs.push(format!("{name}: {e}")),
            }
        }
        let lib = found.ok_or_else(|| format!("NVRTC not found ({})", errs.join("; ")))?;
        Ok(Self {
            create: nvrtc_sym(&lib, "nvrtcCreateProgram")?,
            compile: nvrtc_sym(&lib, "nvrtcCompileProgram")?,
            ptx_size: nvrtc_sym(&lib, "nvrtcGetPTXSize")?,
            ptx: nvrtc_sym(&lib, "nvrtcGetPTX")?,
            log_size: nvrtc_sym(&lib, "nvrtcGetProgramLogSize")?,
            log: nvrtc_sym(&lib, "nvrtcGetProgramLog")?,
            destroy: nvrtc_sym(&lib, "nvrtcDestroyProgram")?,
            error_string: nvrtc_sym(&lib, "nvrtcGetErrorString")?,
            _lib: lib,
        })
    }

    fn err(&self, call: &'static str, r: c_int, log: Option<String>) -> GpuError {
        // SAFETY: nvrtcGetErrorString returns a static string for any code.
        let text = cstr(unsafe { (self.error_string)(r) }).unwrap_or_else(|| format!("error {r}"));
        GpuError::Driver {
            call,
            msg: match log {
                Some(l) if !l.trim().is_empty() => format!("{text}\n{l}"),
                _ => text,
            },
        }
    }

    /// Compile CUDA C `src` (default options) to PTX, NUL-terminated for
    /// `cuModuleLoadData`.
    pub(crate) fn compile_ptx(&self, src: &str, name: &str) -> Res<CString> {
        let csrc = CString::new(src).map_err(|_| self.err("nvrtcCreateProgram", 1, None))?;
        let cname = CString::new(format!("{name}.cu"))
            .map_err(|_| self.err("nvrtcCreateProgram", 1, None))?;
        let mut prog: NvrtcProgram = ptr::null_mut();
        // SAFETY: valid out-pointer and NUL-terminated strings; no headers.
        let r = unsafe {
            (self.create)(
                &mut prog,
                csrc.as_ptr(),
                cname.as_ptr(),
                0,
                ptr::null(),
                ptr::null(),
            )
        };
        if r != 0 {
            return Err(self.err("nvrtcCreateProgram", r, None));
        }
        let out = self.compile_program(prog);
        // SAFETY: `prog` was created above and is destroyed once.
        unsafe { (self.destroy)(&mut prog) };
        out
    }

    fn compile_program(&self, prog: NvrtcProgram) -> Res<CString> {
        // SAFETY: `prog` is a live program; no options.
        let r = unsafe { (self.compile)(prog, 0, ptr::null()) };
        if r != 0 {
            return Err(self.err("nvrtcCompileProgram", r, self.program_log(prog)));
        }
        let mut n: usize = 0;
        // SAFETY: live program, valid out-pointer.
        let r = unsafe { (self.ptx_size)(prog, &mut n) };
        if r != 0 {
            return Err(self.err("nvrtcGetPTXSize", r, None));
        }
        let mut buf = vec![0u8; n.max(1)];
        // SAFETY: `buf` holds the `n` bytes (NUL included) NVRTC writes.
        let r = unsafe { (self.ptx)(prog, buf.as_mut_ptr().cast()) };
        if r != 0 {
            return Err(self.err("nvrtcGetPTX", r, None));
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(end);
        Ok(CString::new(buf).expect("no NUL before the end"))
    }

    fn program_log(&self, prog: NvrtcProgram) -> Option<String> {
        let mut n: usize = 0;
        // SAFETY: live program, valid out-pointer.
        if unsafe { (self.log_size)(prog, &mut n) } != 0 || n == 0 {
            return None;
        }
        let mut buf = vec![0u8; n];
        // SAFETY: `buf` holds the `n` bytes NVRTC writes.
        if unsafe { (self.log)(prog, buf.as_mut_ptr().cast()) } != 0 {
            return None;
        }
        Some(
            String::from_utf8_lossy(&buf)
                .trim_end_matches('\0')
                .to_string(),
        )
    }
}
