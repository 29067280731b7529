//! The MPI-1 names that MPI-3.0 removed and MPICH's `libmpi.so.12` still
//! exports, because old codes still call them: `MPI_Address`,
//! `MPI_Errhandler_create/get/set`, `MPI_Type_extent`, `MPI_Type_lb`,
//! `MPI_Type_ub`, `MPI_Type_hvector`, `MPI_Type_hindexed` and
//! `MPI_Type_struct`. Each is its MPI-2 replacement under the old name (the
//! signatures MPICH declares: `MPI_Aint` displacements), with its errors
//! naming the old call. `mpi.h` declares them as MPICH's does.

use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::env;
use crate::ptr;
use crate::types;

mpi_fn! {
    noinit fn Address(location: *const c_void, address: *mut MPI_Aint) {
        ptr::write(CALL, "address", address, ptr::addr_of(location))
    }
    fn Errhandler_create(function: Option<CommErrFn>, errhandler: *mut MPI_Errhandler) {
        env::create_errhandler(CALL, function, errhandler)
    }
    safe fn Errhandler_set(comm: MPI_Comm, errhandler: MPI_Errhandler) {
        env::set_errhandler(CALL, comm, errhandler)
    }
    fn Errhandler_get(comm: MPI_Comm, errhandler: *mut MPI_Errhandler) {
        env::get_errhandler(CALL, comm, errhandler)
    }
    fn Type_extent(datatype: MPI_Datatype, extent: *mut MPI_Aint) {
        let (_, x) = types::lb_extent(CALL, datatype)?;
        ptr::write(CALL, "extent", extent, x)
    }
    fn Type_lb(datatype: MPI_Datatype, displacement: *mut MPI_Aint) {
        let (lb, _) = types::lb_extent(CALL, datatype)?;
        ptr::write(CALL, "displacement", displacement, lb)
    }
    fn Type_ub(datatype: MPI_Datatype, displacement: *mut MPI_Aint) {
        let (lb, x) = types::lb_extent(CALL, datatype)?;
        ptr::write(CALL, "displacement", displacement, lb + x)
    }
    fn Type_hvector(count: c_int, blocklength: c_int, stride: MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        types::hvector(CALL, count, blocklength, stride, oldtype, newtype)
    }
    fn Type_hindexed(count: c_int, array_of_blocklengths: *const c_int, array_of_displacements: *const MPI_Aint,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) {
        types::hindexed(CALL, count, array_of_blocklengths, array_of_displacements, oldtype, newtype)
    }
    fn Type_struct(count: c_int, array_of_blocklengths: *const c_int, array_of_displacements: *const MPI_Aint,
        array_of_types: *const MPI_Datatype, newtype: *mut MPI_Datatype) {
        types::struct_type(CALL, count, array_of_blocklengths, array_of_displacements, array_of_types, newtype)
    }
}
