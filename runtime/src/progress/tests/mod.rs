//! The pml and the driver together over the simulated fabric
//! (`gmpi_btl::sim`): protocols, ordering, wildcards, back-pressure, peer
//! failure, device memory over the gpu layer's test double (`sim_gpu.rs`),
//! GPUDirect RDMA over btl-ib's verbs model and the double (`ib_gpu.rs`),
//! and sleeping across transports (`wake.rs`).

use std::sync::{Arc, Mutex};

use gmpi_btl::sim::SimMemory;
use gmpi_gpu::Gpu;
use gmpi_pml::HostWrite;

use super::HostMemory;

mod ib_gpu;
mod onesided;
mod sim;
mod sim_gpu;
mod wake;

/// A rank's simulated host memory, shared with the fabric (whose gets read
/// it).
struct SimMem(Arc<Mutex<SimMemory>>);

impl HostWrite for SimMem {
    fn write(&mut self, addr: u64, data: &[u8]) {
        self.0.lock().unwrap().write(addr, data);
    }
}

impl HostMemory for SimMem {
    fn with_read<R>(&self, addr: u64, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self.0.lock().unwrap().read(addr, len))
    }
    fn with_write<R>(&mut self, addr: u64, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        f(self.0.lock().unwrap().slice_mut(addr, len))
    }
}

/// The gpu layer of a process without CUDA.
fn host_only() -> Arc<Gpu> {
    Arc::new(Gpu::host_only("test"))
}
