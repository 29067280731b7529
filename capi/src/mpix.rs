//! Entry points of the MPIX extensions: the GPU-support queries that
//! CUDA-aware programs and frameworks probe.
//!
//! - `MPIX_Query_cuda_support()` (Open MPI's `cuda` extension, declared by
//!   MPICH 4.x too): 1 when this process sends and receives CUDA device
//!   memory, that is when the CUDA driver is loaded with a device, else 0
//!   (`GMPI_CUDA=off`, no `libcuda`, no device). The answer is
//!   `gmpi::gpu::cuda_aware`'s.
//! - `MPIX_GPU_query_support(gpu_type, &is_supported)` (MPICH 4.x): the same
//!   answer for `MPIX_GPU_SUPPORT_CUDA`; 0 for `MPIX_GPU_SUPPORT_ZE` and
//!   `MPIX_GPU_SUPPORT_HIP` (gmpi has no Level Zero or HIP support);
//!   `MPI_ERR_ARG` for any other `gpu_type` or a NULL `is_supported`, as in
//!   MPICH.
//! - `MPIX_Query_ze_support()`, `MPIX_Query_hip_support()`: 0.
//!
//! All of them work before `MPI_Init` and after `MPI_Finalize` (MPICH 4.0
//! requires init for `MPIX_GPU_query_support`; Open MPI's query is called
//! before init in practice): before init the driver is probed as `MPI_Init`
//! would probe it, without creating a context.
//!
//! These are written out as `mpi_fn!` would write them (its names begin
//! `MPI_`): `PMPIX_X` holds the body, `MPIX_X` forwards to it, and the one
//! that takes a pointer is an `unsafe extern "C" fn`.

use std::ffi::c_int;
use std::panic::catch_unwind;

use gmpi::ErrorClass;

use crate::abi::{MPIX_GPU_SUPPORT_CUDA, MPIX_GPU_SUPPORT_HIP, MPIX_GPU_SUPPORT_ZE};
use crate::frame::entry;
use crate::ptr;
use crate::tables::err;

/// Whether CUDA device memory works in this process, as a C flag (0 if the
/// query panicked: no CUDA claimed that is not there).
fn cuda_flag() -> c_int {
    catch_unwind(gmpi::gpu::cuda_aware).unwrap_or(false) as c_int
}

/// `MPIX_Query_cuda_support`: 1 if CUDA device memory can be passed to MPI
/// calls in this process, else 0.
#[no_mangle]
pub extern "C" fn PMPIX_Query_cuda_support() -> c_int {
    cuda_flag()
}

/// `MPIX_Query_cuda_support`: forwards to `PMPIX_Query_cuda_support`.
#[no_mangle]
pub extern "C" fn MPIX_Query_cuda_support() -> c_int {
    PMPIX_Query_cuda_support()
}

/// `MPIX_Query_ze_support`: 0 (gmpi has no Level Zero support).
#[no_mangle]
pub extern "C" fn PMPIX_Query_ze_support() -> c_int {
    0
}

/// `MPIX_Query_ze_support`: forwards to `PMPIX_Query_ze_support`.
#[no_mangle]
pub extern "C" fn MPIX_Query_ze_support() -> c_int {
    PMPIX_Query_ze_support()
}

/// `MPIX_Query_hip_support`: 0 (gmpi has no HIP support).
#[no_mangle]
pub extern "C" fn PMPIX_Query_hip_support() -> c_int {
    0
}

/// `MPIX_Query_hip_support`: forwards to `PMPIX_Query_hip_support`.
#[no_mangle]
pub extern "C" fn MPIX_Query_hip_support() -> c_int {
    PMPIX_Query_hip_support()
}

/// `MPIX_GPU_query_support`: `*is_supported` = whether device memory of
/// `gpu_type` (`MPIX_GPU_SUPPORT_CUDA`, `_ZE`, `_HIP`) can be passed to MPI
/// calls in this process.
///
/// # Safety
///
/// `is_supported` is NULL (an `MPI_ERR_ARG` error) or points to an `int`
/// the call may write.
#[no_mangle]
pub unsafe extern "C" fn PMPIX_GPU_query_support(
    gpu_type: c_int,
    is_supported: *mut c_int,
) -> c_int {
    const CALL: &str = "MPIX_GPU_query_support";
    entry(CALL, false, || {
        let flag = match gpu_type {
            MPIX_GPU_SUPPORT_CUDA => cuda_flag(),
            MPIX_GPU_SUPPORT_ZE | MPIX_GPU_SUPPORT_HIP => 0,
            other => {
                return Err(err(
                    ErrorClass::Arg,
                    CALL,
                    format!("gpu_type = {other} is not MPIX_GPU_SUPPORT_CUDA (0), MPIX_GPU_SUPPORT_ZE (1) or MPIX_GPU_SUPPORT_HIP (2)"),
                ))
            }
        };
        ptr::write(CALL, "is_supported", is_supported, flag)
    })
}

/// `MPIX_GPU_query_support`: forwards to `PMPIX_GPU_query_support`.
///
/// # Safety
///
/// As `PMPIX_GPU_query_support`.
#[no_mangle]
pub unsafe extern "C" fn MPIX_GPU_query_support(
    gpu_type: c_int,
    is_supported: *mut c_int,
) -> c_int {
    // SAFETY: the same arguments, under the same contract.
    unsafe { PMPIX_GPU_query_support(gpu_type, is_supported) }
}
