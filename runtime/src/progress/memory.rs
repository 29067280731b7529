//! How the progress driver reaches user memory: host memory through a
//! [`HostMemory`] (the runtime's raw-address `HostMem` in `buffer.rs`,
//! simulated memory in tests), device and managed memory through the gpu
//! layer (`gmpi_gpu::Gpu`, the real CUDA backend or its test double).
//!
//! The pml itself never touches memory; its one callback,
//! [`gmpi_pml::HostWrite`], is the write half of [`HostMemory`].

use gmpi_pml::HostWrite;

/// Host memory by address: what the driver reads to send and writes to
/// receive. Every address it is handed is inside a buffer the user lent to
/// a live request or blocking call (the pml hands out nothing else).
pub(crate) trait HostMemory: HostWrite {
    /// Run `f` over the `len` bytes at `addr`.
    fn with_read<R>(&self, addr: u64, len: usize, f: impl FnOnce(&[u8]) -> R) -> R;
    /// Run `f` over the `len` writable bytes at `addr`.
    fn with_write<R>(&mut self, addr: u64, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R;
}
