//! Entry points of the MPIX extensions: the GPU-support queries that
//! CUDA-aware programs and frameworks probe, and the fault-tolerance (ULFM)
//! calls MPICH 4.x declares (`MPIX_Comm_agree`, `_iagree`, `_shrink`,
//! `_ishrink`, `_failure_ack`, `_failure_get_acked`, `_get_failed`,
//! `_ack_failed`: see the section at the end for what they mean in gmpi).
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

use crate::abi::{
    MPI_Comm, MPI_Group, MPI_Request, MPIX_GPU_SUPPORT_CUDA, MPIX_GPU_SUPPORT_HIP,
    MPIX_GPU_SUPPORT_ZE,
};
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

// ---- Fault tolerance (ULFM), as MPICH 4.x declares it ----
//
// gmpi ends the whole job when a rank fails (no survivor ever sees a failed
// peer), so in every job that is still running no process has failed: the
// agreement is a bitwise AND over the communicator, a shrink is a
// duplicate, and the failed and acknowledged groups are empty. These are
// exact for gmpi's failure model; revocation (`MPIX_Comm_revoke`) is not
// provided (programs then see it missing, as on an MPI without it).

/// Write an entry point pair for an ULFM call whose body is `$body` (the
/// arguments are checked by the calls it makes).
macro_rules! ulfm_fn {
    ($(#[$m:meta])* $p:ident, $x:ident, $name:literal, ($($a:ident: $t:ty),*) $body:block) => {
        $(#[$m])*
        ///
        /// # Safety
        ///
        /// Every pointer points to what the MPICH prototype says (an
        /// object the call may write).
        #[no_mangle]
        pub unsafe extern "C" fn $p($($a: $t),*) -> c_int {
            const CALL: &str = $name;
            entry(CALL, true, || $body)
        }

        #[doc = concat!("`", $name, "`: forwards to `P", $name, "`.")]
        ///
        /// # Safety
        ///
        /// As the `PMPIX_` function.
        #[no_mangle]
        pub unsafe extern "C" fn $x($($a: $t),*) -> c_int {
            // SAFETY: the same arguments, under the same contract.
            unsafe { $p($($a),*) }
        }
    };
}

fn check_code(call: &str, rc: c_int) -> Result<(), gmpi::Error> {
    if rc == crate::abi::MPI_SUCCESS {
        return Ok(());
    }
    Err(err(
        crate::abi::runtime_class(rc).unwrap_or(ErrorClass::Other),
        call,
        crate::errors::string_of(rc).unwrap_or_else(|| format!("error {rc}")),
    ))
}

ulfm_fn!(
    /// `MPIX_Comm_agree`: `*flag` becomes the bitwise AND of every rank's.
    PMPIX_Comm_agree, MPIX_Comm_agree, "MPIX_Comm_agree",
    (comm: MPI_Comm, flag: *mut c_int) {
        let c = crate::resolve::comm(CALL, comm)?;
        crate::errors::set_target(comm);
        let v = ptr::read(CALL, "flag", flag)?;
        let mut out = [0 as c_int];
        if c.is_inter() {
            c.allreduce(&[v][..], &mut out[..], gmpi::Op::Band)?;
        } else {
            c.agreement()?.allreduce(&[v][..], &mut out[..], gmpi::Op::Band)?;
        }
        ptr::write(CALL, "flag", flag, out[0])
    }
);

ulfm_fn!(
    /// `MPIX_Comm_iagree`: the non-blocking `MPIX_Comm_agree` (`*flag` is
    /// written when the request completes).
    PMPIX_Comm_iagree, MPIX_Comm_iagree, "MPIX_Comm_iagree",
    (comm: MPI_Comm, flag: *mut c_int, request: *mut MPI_Request) {
        let c = crate::resolve::comm(CALL, comm)?;
        crate::errors::set_target(comm);
        if !c.is_inter() {
            // On the agreement shadow: never matched with comm's own
            // collectives.
            let int = crate::resolve::dtype(CALL, crate::abi::MPI_INT)?;
            let mut v = ptr::buf(CALL, "flag", flag.cast_const().cast(), 1, &int, true)?;
            let r = c.agreement()?.iallreduce_in_place(&mut v, gmpi::Op::Band)?;
            let h = crate::tables::new_request(crate::tables::Active::new(ptr::detach_req(r), comm));
            return ptr::write(CALL, "request", request, h);
        }
        // SAFETY: the caller's contract; MPI_Iallreduce in place on the one
        // int at `flag` is the agreement (of the two groups of an
        // intercommunicator).
        let rc = unsafe {
            crate::coll::PMPI_Iallreduce(
                crate::abi::MPI_IN_PLACE as *const std::ffi::c_void,
                flag.cast(),
                1,
                crate::abi::MPI_INT,
                crate::abi::MPI_BAND,
                comm,
                request,
            )
        };
        check_code(CALL, rc)
    }
);

ulfm_fn!(
    /// `MPIX_Comm_shrink`: a communicator of the ranks that have not failed
    /// (all of them: a duplicate).
    PMPIX_Comm_shrink, MPIX_Comm_shrink, "MPIX_Comm_shrink",
    (comm: MPI_Comm, newcomm: *mut MPI_Comm) {
        crate::resolve::comm(CALL, comm)?;
        crate::errors::set_target(comm);
        // SAFETY: the caller's contract (`newcomm` is writable).
        check_code(CALL, unsafe { crate::comm::PMPI_Comm_dup(comm, newcomm) })
    }
);

ulfm_fn!(
    /// `MPIX_Comm_ishrink`: the non-blocking `MPIX_Comm_shrink`.
    PMPIX_Comm_ishrink, MPIX_Comm_ishrink, "MPIX_Comm_ishrink",
    (comm: MPI_Comm, newcomm: *mut MPI_Comm, request: *mut MPI_Request) {
        crate::resolve::comm(CALL, comm)?;
        crate::errors::set_target(comm);
        // SAFETY: the caller's contract (`newcomm` and `request` writable).
        check_code(CALL, unsafe { crate::comm::PMPI_Comm_idup(comm, newcomm, request) })
    }
);

ulfm_fn!(
    /// `MPIX_Comm_failure_ack`: acknowledge the failures seen (none).
    PMPIX_Comm_failure_ack, MPIX_Comm_failure_ack, "MPIX_Comm_failure_ack",
    (comm: MPI_Comm) {
        crate::resolve::comm(CALL, comm)?;
        Ok(())
    }
);

ulfm_fn!(
    /// `MPIX_Comm_failure_get_acked`: the acknowledged failed ranks (an
    /// empty group).
    PMPIX_Comm_failure_get_acked, MPIX_Comm_failure_get_acked, "MPIX_Comm_failure_get_acked",
    (comm: MPI_Comm, failedgrp: *mut MPI_Group) {
        crate::resolve::comm(CALL, comm)?;
        ptr::write(CALL, "failedgrp", failedgrp, crate::abi::MPI_GROUP_EMPTY)
    }
);

ulfm_fn!(
    /// `MPIX_Comm_get_failed`: the failed ranks (an empty group).
    PMPIX_Comm_get_failed, MPIX_Comm_get_failed, "MPIX_Comm_get_failed",
    (comm: MPI_Comm, failedgrp: *mut MPI_Group) {
        crate::resolve::comm(CALL, comm)?;
        ptr::write(CALL, "failedgrp", failedgrp, crate::abi::MPI_GROUP_EMPTY)
    }
);

ulfm_fn!(
    /// `MPIX_Comm_ack_failed`: acknowledge up to `num_to_ack` failures;
    /// `*num_acked` is how many are acknowledged (0).
    PMPIX_Comm_ack_failed, MPIX_Comm_ack_failed, "MPIX_Comm_ack_failed",
    (comm: MPI_Comm, num_to_ack: c_int, num_acked: *mut c_int) {
        crate::resolve::comm(CALL, comm)?;
        if num_to_ack < 0 {
            return Err(err(ErrorClass::Arg, CALL, format!("num_to_ack = {num_to_ack} is negative")));
        }
        ptr::write(CALL, "num_acked", num_acked, 0)
    }
);
