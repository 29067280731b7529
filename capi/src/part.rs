//! Partitioned communication (MPI 4.0): `MPI_Psend_init`/`MPI_Precv_init`,
//! started by `MPI_Start`, with `MPI_Pready`, `MPI_Pready_range`,
//! `MPI_Pready_list` on the send side and `MPI_Parrived` on the receive
//! side.
//!
//! The transfer is one message of the whole buffer (`partitions × count`
//! elements) on the communicator's partitioned context, which neither
//! point-to-point nor collective traffic can match
//! ([`gmpi::Communicator::isend_partitioned`]). The receive is posted at
//! `MPI_Start`; the send once the last partition is marked ready. So
//! `MPI_Parrived` says a partition has arrived when the whole message has
//! (the standard lets an implementation deliver partitions together), and
//! the two sides may partition the buffer differently. As on MPICH,
//! `MPI_Parrived` on a request that is not active is `MPI_ERR_REQUEST`.
//!
//! A started send request is an operation (`Active`) whose primary request
//! completed at once and whose one further operation, the send, is added at
//! the last `MPI_Pready`; which partitions are ready rides along in the
//! operation's `keep`. Waiting on it before every partition is ready (which
//! the standard makes erroneous) returns at once.

use std::ffi::{c_int, c_void};

use gmpi::{Error, ErrorClass};

use crate::abi::*;
use crate::errors;
use crate::p2p::{new_persistent, recv_view, send_view};
use crate::ptr;
use crate::resolve;
use crate::tables::*;

/// Which partitions of a started send are ready.
struct Ready {
    ready: Vec<bool>,
    left: usize,
}

/// `MPI_Psend_init`/`MPI_Precv_init`.
#[allow(clippy::too_many_arguments)]
fn init(
    call: &str,
    kind: SpecKind,
    buf: *const c_void,
    partitions: c_int,
    count: MPI_Count,
    dt: MPI_Datatype,
    peer: c_int,
    tag: c_int,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    resolve::comm(call, comm)?;
    resolve::check_info(call, info)?;
    if partitions < 1 {
        return Err(err(
            ErrorClass::Arg,
            call,
            format!("partitions = {partitions}; it must be at least 1"),
        ));
    }
    ptr::count(call, "count", count)?;
    let total = count
        .checked_mul(MPI_Count::from(partitions))
        .ok_or_else(|| err(ErrorClass::Count, call, "partitions × count overflows"))?;
    // Check the buffer now (it is read or written at each start).
    let t = resolve::dtype(call, dt)?;
    ptr::buf(
        call,
        "buf",
        buf,
        total,
        &t,
        matches!(kind, SpecKind::Precv { .. }),
    )?;
    if request.is_null() {
        return Err(err(ErrorClass::Arg, call, "request is NULL"));
    }
    let spec = Spec {
        kind,
        buf: buf as usize,
        count: total,
        dt,
        peer,
        tag,
        comm,
    };
    new_persistent(call, spec, request)
}

/// `MPI_Start` of a partitioned send: nothing moves until every partition
/// is ready.
pub(crate) fn start_send(call: &'static str, s: &Spec, partitions: usize) -> Result<Active, Error> {
    let c = resolve::comm(call, s.comm)?;
    let done = ptr::detach_req(c.isend(&[0u8; 0][..], MPI_PROC_NULL, 0)?);
    let mut a = Active::new(done, s.comm);
    a.keep = Some(Box::new(Ready {
        ready: vec![false; partitions],
        left: partitions,
    }));
    Ok(a)
}

/// `MPI_Start` of a partitioned receive: the whole buffer's receive.
pub(crate) fn start_recv(
    call: &'static str,
    s: &Spec,
    _partitions: usize,
) -> Result<Active, Error> {
    let c = resolve::comm(call, s.comm)?;
    let mut v = recv_view(call, s.buf as *mut c_void, s.count, s.dt)?;
    let r = c.irecv_partitioned(call, &mut v, s.peer, s.tag)?;
    Ok(Active::new(ptr::detach_req(r), s.comm))
}

/// Mark `parts` of the started send `request` ready; the last one sends.
fn pready(call: &'static str, request: MPI_Request, parts: &[c_int]) -> Result<(), Error> {
    let slot = resolve::req_slot(call, request)?;
    let spec = {
        let mut st = state();
        let Some(ReqObj::Persistent { spec, active }) = st.reqs.get_mut(slot) else {
            return Err(err(
                ErrorClass::Request,
                call,
                format!("request = {request:#x} is not a partitioned send request"),
            ));
        };
        let SpecKind::Psend { partitions } = spec.kind else {
            return Err(err(
                ErrorClass::Request,
                call,
                format!("request = {request:#x} is not a partitioned send request"),
            ));
        };
        errors::set_target(spec.comm);
        let ready = active
            .as_mut()
            .and_then(|a| a.keep.as_mut())
            .and_then(|k| k.downcast_mut::<Ready>())
            .ok_or_else(|| {
                err(
                    ErrorClass::Request,
                    call,
                    format!("request = {request:#x} is not started (MPI_Start it first)"),
                )
            })?;
        for &p in parts {
            let i = usize::try_from(p)
                .ok()
                .filter(|&i| i < partitions)
                .ok_or_else(|| {
                    err(
                        ErrorClass::Arg,
                        call,
                        format!("partition {p} is not one of the request's 0..{partitions}"),
                    )
                })?;
            if ready.ready[i] {
                return Err(err(
                    ErrorClass::Arg,
                    call,
                    format!("partition {p} is already marked ready"),
                ));
            }
        }
        for &p in parts {
            ready.ready[p as usize] = true;
        }
        ready.left -= parts.len();
        if ready.left > 0 || parts.is_empty() {
            return Ok(());
        }
        (**spec).clone()
    };
    // Every partition is ready: send the buffer (no lock held meanwhile).
    let c = resolve::comm(call, spec.comm)?;
    let v = send_view(call, spec.buf as *const c_void, spec.count, spec.dt)?;
    let r = ptr::detach_req(c.isend_partitioned(call, &v, spec.peer, spec.tag)?);
    if let Some(ReqObj::Persistent {
        active: Some(a), ..
    }) = state().reqs.get_mut(slot)
    {
        a.more.push(r);
        return Ok(());
    }
    // The request went away meanwhile (freed by another call): finish the
    // send rather than lose it.
    r.wait().map(|_| ())
}

mpi_fn! {
    fn Psend_init(buf: *const c_void, partitions: c_int, count: MPI_Count, datatype: MPI_Datatype, dest: c_int,
        tag: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let n = partitions.max(1) as usize;
        init(CALL, SpecKind::Psend { partitions: n }, buf, partitions, count, datatype, dest, tag, comm, info, request)
    }
    fn Precv_init(buf: *mut c_void, partitions: c_int, count: MPI_Count, datatype: MPI_Datatype, source: c_int,
        tag: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let n = partitions.max(1) as usize;
        init(CALL, SpecKind::Precv { partitions: n }, buf, partitions, count, datatype, source, tag, comm, info, request)
    }
    safe fn Pready(partition: c_int, request: MPI_Request) {
        pready(CALL, request, &[partition])
    }
    safe fn Pready_range(partition_low: c_int, partition_high: c_int, request: MPI_Request) {
        if partition_low > partition_high {
            return Err(err(ErrorClass::Arg, CALL, format!(
                "partition_low = {partition_low} is above partition_high = {partition_high}")));
        }
        let parts: Vec<c_int> = (partition_low..=partition_high).collect();
        pready(CALL, request, &parts)
    }
    fn Pready_list(length: c_int, array_of_partitions: *const c_int, request: MPI_Request) {
        let n = ptr::len(CALL, "length", length)?;
        let parts = ptr::slice(CALL, "array_of_partitions", array_of_partitions, n)?.to_vec();
        pready(CALL, request, &parts)
    }
    fn Parrived(request: MPI_Request, partition: c_int, flag: *mut c_int) {
        let slot = resolve::req_slot(CALL, request)?;
        // Take the operation out of its slot while the runtime tests it.
        let a = {
            let mut st = state();
            let Some(ReqObj::Persistent { spec, active }) = st.reqs.get_mut(slot) else {
                return Err(err(ErrorClass::Request, CALL, format!(
                    "request = {request:#x} is not a partitioned receive request")));
            };
            let SpecKind::Precv { partitions } = spec.kind else {
                return Err(err(ErrorClass::Request, CALL, format!(
                    "request = {request:#x} is not a partitioned receive request")));
            };
            errors::set_target(spec.comm);
            if usize::try_from(partition).map_or(true, |i| i >= partitions) {
                return Err(err(ErrorClass::Arg, CALL, format!(
                    "partition {partition} is not one of the request's 0..{partitions}")));
            }
            active.take()
        };
        let Some(a) = a else {
            return Err(err(ErrorClass::Request, CALL, format!(
                "request = {request:#x} is not active (MPI_Start it first)")));
        };
        let arrived = a.test();
        if let Some(ReqObj::Persistent { active, .. }) = state().reqs.get_mut(slot) {
            *active = Some(a);
        }
        ptr::write(CALL, "flag", flag, c_int::from(arrived?.is_some()))
    }
}
