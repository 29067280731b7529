//! GPU helpers of the public API.
//!
//! Every send, receive and collective accepts device memory (a CUDA device
//! pointer behind a slice the program made from it, or through the C ABI);
//! the runtime finds out where a buffer lives and picks the path. This
//! module adds what a program may want to ask for explicitly.

use crate::error::{Error, ErrorClass, Result};

/// Make GPU `local_rank % gpus` this thread's current device (retaining its
/// primary context when no context is current): what `gmpirun --gpu-bind
/// local-rank` does in every rank. Other GPUs stay visible, so CUDA IPC to
/// them keeps working. Returns the device chosen, or `None` without CUDA
/// devices. Call it after `gmpi::init`.
pub fn select_device() -> Result<Option<i32>> {
    const CALL: &str = "gmpi::gpu::select_device";
    let (local, rank) = crate::engine::with(CALL, |e| Ok((e.local_rank, e.rank)))?;
    crate::engine::gpu()
        .select_device(local as usize)
        .map_err(|e| Error::new(ErrorClass::Other, CALL, rank as i32, e.to_string()))
}

/// Whether this process sends and receives CUDA device memory: the CUDA
/// driver is loaded and has a device (what the C ABI's
/// `MPIX_Query_cuda_support` answers). After `gmpi::init`, and after
/// finalize, the process's gpu layer answers. Before `init` the driver is
/// probed as `init` would probe it, once per process: `GMPI_CUDA` from the
/// configuration (`off`: `false` without loading anything), else `libcuda`
/// loaded, initialised and its devices counted, with no context created; a
/// configuration `init` would reject answers `false`.
pub fn cuda_aware() -> bool {
    if let Some(g) = crate::engine::gpu_made() {
        return g.cuda_available();
    }
    static PROBE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROBE.get_or_init(|| {
        crate::config::Config::load()
            .and_then(|c| c.gpu())
            .is_ok_and(|cfg| gmpi_gpu::Gpu::init(&cfg).is_ok_and(|g| g.cuda_available()))
    })
}

/// One line saying which CUDA backend this process uses and how many GPUs
/// it sees, or why it has none (`GMPI_CUDA=off`, no driver, no device).
pub fn status() -> String {
    crate::engine::gpu().status().to_string()
}
