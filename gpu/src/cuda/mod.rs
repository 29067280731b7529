//! The real backend (being written): see `driver.rs`.
use std::sync::Arc;

use crate::api::{CudaApi, GpuError};

/// Load the CUDA driver and return the backend.
pub fn load() -> Result<Arc<dyn CudaApi>, GpuError> {
    Err(GpuError::Unavailable("backend under construction".into()))
}
