//! Collectives and reduction operations: the C entry points over the
//! runtime's collectives (one implementation each; the runtime picks the
//! algorithm), `MPI_IN_PLACE`, the non-blocking forms, user operations.
//!
//! Not yet in the runtime, so failing with `MPI_ERR_UNSUPPORTED_OPERATION`:
//! the non-blocking vector forms (`MPI_Igatherv`, `MPI_Iscatterv`,
//! `MPI_Iallgatherv`, `MPI_Ialltoallv`, `MPI_Ialltoallw`,
//! `MPI_Ireduce_scatter`, `MPI_Ireduce_scatter_block`, `MPI_Iexscan`) and
//! `MPI_IN_PLACE` in the non-blocking forms other than `MPI_Iallreduce`.

use std::ffi::{c_int, c_void};

use gmpi::{Communicator, Error, ErrorClass, Op, UserDatatype, View};

use crate::handles::{self, *};
use crate::p2p::{self, Active};
use crate::ptr;

/// A user operation as the runtime calls it, `(invec, inoutvec, count)` on
/// packed data: the C function gets the data in the datatype's own layout
/// (unpacked into temporaries when the type has holes) and the handle.
pub fn wrap_user_op(o: OpObj, dt_h: MPI_Datatype, dt: UserDatatype) -> Op {
    let dense =
        dt.true_lb() == 0 && dt.extent() == dt.size() as isize && dt.true_extent() == dt.extent();
    let f = o.f;
    Op::user(
        move |a: &[u8], b: &mut [u8], n: usize| {
            let len = n as c_int;
            if dense || n == 0 {
                ptr::call_user_op(f, a.as_ptr() as *mut u8, b.as_mut_ptr(), len, dt_h);
                return;
            }
            // Lay both operands out as `n` elements of the type.
            let ext = dt.extent().unsigned_abs();
            let origin = (-dt.true_lb()).max(0) as usize;
            let span = origin + (dt.true_lb() + dt.true_extent()).max(0) as usize + (n - 1) * ext;
            let mut ta = vec![0u8; span];
            let mut tb = vec![0u8; span];
            let ok = dt.unpack(n, a, &mut ta, origin).is_ok()
                && dt.unpack(n, b, &mut tb, origin).is_ok();
            if !ok {
                return;
            }
            ptr::call_user_op(
                f,
                ta[origin..].as_mut_ptr(),
                tb[origin..].as_mut_ptr(),
                len,
                dt_h,
            );
            if let Ok(packed) = dt.pack(n, &tb, origin) {
                b.copy_from_slice(&packed);
            }
        },
        o.commutative,
    )
}

/// A send-side buffer argument.
fn sview(
    call: &str,
    what: &str,
    p: *const c_void,
    count: c_int,
    dt: MPI_Datatype,
) -> Result<View, Error> {
    let t = handles::dtype(call, dt)?;
    ptr::buf(call, what, p, count, &t, false)
}

/// A receive-side buffer argument.
fn rview(
    call: &str,
    what: &str,
    p: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
) -> Result<View, Error> {
    let t = handles::dtype(call, dt)?;
    ptr::buf(call, what, p, count, &t, true)
}

/// `count × size` as a C count (`MPI_ERR_COUNT` on overflow or negative).
fn times(call: &str, what: &str, count: c_int, n: c_int) -> Result<c_int, Error> {
    ptr::count(call, what, count)?;
    count.checked_mul(n).ok_or_else(|| {
        handles::err(
            ErrorClass::Count,
            call,
            format!("{what} × communicator size overflows"),
        )
    })
}

fn is_root(c: &Communicator, root: c_int) -> bool {
    c.rank() == root
}

/// The op for `dt`.
fn op_for(call: &str, op: MPI_Op, dt: MPI_Datatype) -> Result<Op, Error> {
    let t = handles::dtype(call, dt)?;
    handles::op(call, op, dt, &t)
}

/// Hand out the request of a started collective.
fn out(
    call: &str,
    comm: MPI_Comm,
    r: gmpi::Request<'_>,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let a = Active::new(p2p::detach_req(r), comm);
    if request.is_null() {
        a.req.wait()?;
        return Err(handles::err(ErrorClass::Arg, call, "request is NULL"));
    }
    ptr::write(call, "request", request, p2p::register(a))
}

fn in_place_unsupported(call: &str) -> Error {
    handles::err(
        ErrorClass::Unsupported,
        call,
        "MPI_IN_PLACE is not supported by gmpi in this non-blocking collective yet",
    )
}

fn unsupported(call: &str) -> Error {
    handles::err(
        ErrorClass::Unsupported,
        call,
        "this non-blocking collective is not supported by gmpi yet (use the blocking form)",
    )
}

/// Count and displacement arrays of a vector collective, one entry per rank.
fn arrays<'a>(
    call: &str,
    n: usize,
    counts: (&str, *const c_int),
    displs: (&str, *const c_int),
) -> Result<(&'a [c_int], &'a [c_int]), Error> {
    Ok((
        ptr::slice(call, counts.0, counts.1, n)?,
        ptr::slice(call, displs.0, displs.1, n)?,
    ))
}

/// The smallest receive view that covers `counts[i]` elements at
/// `displs[i]` for every `i` (elements of `dt`).
fn vview(
    call: &str,
    what: &str,
    p: *const c_void,
    counts: &[c_int],
    displs: &[c_int],
    dt: MPI_Datatype,
    writable: bool,
) -> Result<View, Error> {
    let t = handles::dtype(call, dt)?;
    let mut hi: i64 = 0;
    for (i, (&c, &d)) in counts.iter().zip(displs).enumerate() {
        if c < 0 {
            return Err(handles::err(
                ErrorClass::Count,
                call,
                format!("{what} count[{i}] = {c} is negative"),
            ));
        }
        if d < 0 {
            return Err(handles::err(
                ErrorClass::Arg,
                call,
                format!("{what} displacement[{i}] = {d} is negative"),
            ));
        }
        if c > 0 {
            hi = hi.max(d as i64 + c as i64);
        }
    }
    let n = c_int::try_from(hi).map_err(|_| {
        handles::err(
            ErrorClass::Count,
            call,
            format!("{what} spans more than 2^31 elements"),
        )
    })?;
    ptr::buf(call, what, p, n, &t, writable)
}

mpi_fn! {
    fn Barrier(comm: MPI_Comm) {
        handles::comm(CALL, comm)?.barrier()
    }
    fn Ibarrier(comm: MPI_Comm, request: *mut MPI_Request) {
        let c = handles::comm(CALL, comm)?;
        let r = c.ibarrier()?;
        out(CALL, comm, r, request)
    }
    fn Bcast(buffer: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let mut v = rview(CALL, "buffer", buffer, count, datatype)?;
        c.bcast(&mut v, root)
    }
    fn Ibcast(buffer: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        let c = handles::comm(CALL, comm)?;
        let mut v = rview(CALL, "buffer", buffer, count, datatype)?;
        let r = c.ibcast(&mut v, root)?;
        out(CALL, comm, r, request)
    }
    fn Reduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let o = op_for(CALL, op, datatype)?;
        if ptr::in_place(sendbuf) {
            if !is_root(&c, root) {
                return Err(handles::err(ErrorClass::Buffer, CALL, "sendbuf is MPI_IN_PLACE on a rank that is not the root"));
            }
            let mut v = rview(CALL, "recvbuf", recvbuf, count, datatype)?;
            return c.reduce_in_place(&mut v, o, root);
        }
        let sv = sview(CALL, "sendbuf", sendbuf, count, datatype)?;
        let mut rv = if is_root(&c, root) {
            rview(CALL, "recvbuf", recvbuf, count, datatype)?
        } else {
            rview(CALL, "recvbuf", std::ptr::null_mut(), 0, datatype)?
        };
        c.reduce(&sv, &mut rv, o, root)
    }
    fn Ireduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        let c = handles::comm(CALL, comm)?;
        let o = op_for(CALL, op, datatype)?;
        if ptr::in_place(sendbuf) {
            return Err(in_place_unsupported(CALL));
        }
        let sv = sview(CALL, "sendbuf", sendbuf, count, datatype)?;
        let mut rv = if is_root(&c, root) {
            rview(CALL, "recvbuf", recvbuf, count, datatype)?
        } else {
            rview(CALL, "recvbuf", std::ptr::null_mut(), 0, datatype)?
        };
        let r = c.ireduce(&sv, &mut rv, o, root)?;
        out(CALL, comm, r, request)
    }
    fn Allreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let o = op_for(CALL, op, datatype)?;
        let mut rv = rview(CALL, "recvbuf", recvbuf, count, datatype)?;
        if ptr::in_place(sendbuf) {
            return c.allreduce_in_place(&mut rv, o);
        }
        let sv = sview(CALL, "sendbuf", sendbuf, count, datatype)?;
        c.allreduce(&sv, &mut rv, o)
    }
    fn Iallreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request) {
        let c = handles::comm(CALL, comm)?;
        let o = op_for(CALL, op, datatype)?;
        let mut rv = rview(CALL, "recvbuf", recvbuf, count, datatype)?;
        if ptr::in_place(sendbuf) {
            let r = c.iallreduce_in_place(&mut rv, o)?;
            return out(CALL, comm, r, request);
        }
        let sv = sview(CALL, "sendbuf", sendbuf, count, datatype)?;
        let r = c.iallreduce(&sv, &mut rv, o)?;
        out(CALL, comm, r, request)
    }
    fn Reduce_local(inbuf: *const c_void, inoutbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op) {
        let o = op_for(CALL, op, datatype)?;
        let iv = sview(CALL, "inbuf", inbuf, count, datatype)?;
        let mut io = rview(CALL, "inoutbuf", inoutbuf, count, datatype)?;
        gmpi::reduce_local(&iv, &mut io, o)
    }
    fn Gather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let root_here = is_root(&c, root);
        if ptr::in_place(sendbuf) {
            if !root_here {
                return Err(handles::err(ErrorClass::Buffer, CALL, "sendbuf is MPI_IN_PLACE on a rank that is not the root"));
            }
            let mut v = rview(CALL, "recvbuf", recvbuf, times(CALL, "recvcount", recvcount, c.size())?, recvtype)?;
            return c.gather_in_place(&mut v, root);
        }
        let sv = sview(CALL, "sendbuf", sendbuf, sendcount, sendtype)?;
        let mut rv = if root_here {
            rview(CALL, "recvbuf", recvbuf, times(CALL, "recvcount", recvcount, c.size())?, recvtype)?
        } else {
            rview(CALL, "recvbuf", std::ptr::null_mut(), 0, MPI_BYTE)?
        };
        c.gather(&sv, &mut rv, root)
    }
    fn Igather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        let c = handles::comm(CALL, comm)?;
        if ptr::in_place(sendbuf) {
            return Err(in_place_unsupported(CALL));
        }
        let sv = sview(CALL, "sendbuf", sendbuf, sendcount, sendtype)?;
        let mut rv = if is_root(&c, root) {
            rview(CALL, "recvbuf", recvbuf, times(CALL, "recvcount", recvcount, c.size())?, recvtype)?
        } else {
            rview(CALL, "recvbuf", std::ptr::null_mut(), 0, MPI_BYTE)?
        };
        let r = c.igather(&sv, &mut rv, root)?;
        out(CALL, comm, r, request)
    }
    fn Gatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let root_here = is_root(&c, root);
        let n = c.size() as usize;
        let (counts, ds) = if root_here { arrays(CALL, n, ("recvcounts", recvcounts), ("displs", displs))? } else { (&[][..], &[][..]) };
        if ptr::in_place(sendbuf) {
            if !root_here {
                return Err(handles::err(ErrorClass::Buffer, CALL, "sendbuf is MPI_IN_PLACE on a rank that is not the root"));
            }
            let mut v = vview(CALL, "recvbuf", recvbuf, counts, ds, recvtype, true)?;
            return c.gatherv_in_place(&mut v, counts, ds, root);
        }
        let sv = sview(CALL, "sendbuf", sendbuf, sendcount, sendtype)?;
        let mut rv = if root_here {
            vview(CALL, "recvbuf", recvbuf, counts, ds, recvtype, true)?
        } else {
            rview(CALL, "recvbuf", std::ptr::null_mut(), 0, MPI_BYTE)?
        };
        c.gatherv(&sv, &mut rv, counts, ds, root)
    }
    fn Scatter(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let root_here = is_root(&c, root);
        if ptr::in_place(recvbuf) {
            if !root_here {
                return Err(handles::err(ErrorClass::Buffer, CALL, "recvbuf is MPI_IN_PLACE on a rank that is not the root"));
            }
            let mut v = rview(CALL, "sendbuf", sendbuf as *mut c_void, times(CALL, "sendcount", sendcount, c.size())?, sendtype)?;
            return c.scatter_in_place(&mut v, root);
        }
        let sv = if root_here {
            sview(CALL, "sendbuf", sendbuf, times(CALL, "sendcount", sendcount, c.size())?, sendtype)?
        } else {
            sview(CALL, "sendbuf", std::ptr::null(), 0, MPI_BYTE)?
        };
        let mut rv = rview(CALL, "recvbuf", recvbuf, recvcount, recvtype)?;
        c.scatter(&sv, &mut rv, root)
    }
    fn Iscatter(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        let c = handles::comm(CALL, comm)?;
        if ptr::in_place(recvbuf) {
            return Err(in_place_unsupported(CALL));
        }
        let sv = if is_root(&c, root) {
            sview(CALL, "sendbuf", sendbuf, times(CALL, "sendcount", sendcount, c.size())?, sendtype)?
        } else {
            sview(CALL, "sendbuf", std::ptr::null(), 0, MPI_BYTE)?
        };
        let mut rv = rview(CALL, "recvbuf", recvbuf, recvcount, recvtype)?;
        let r = c.iscatter(&sv, &mut rv, root)?;
        out(CALL, comm, r, request)
    }
    fn Scatterv(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let root_here = is_root(&c, root);
        let n = c.size() as usize;
        let (counts, ds) = if root_here { arrays(CALL, n, ("sendcounts", sendcounts), ("displs", displs))? } else { (&[][..], &[][..]) };
        if ptr::in_place(recvbuf) {
            if !root_here {
                return Err(handles::err(ErrorClass::Buffer, CALL, "recvbuf is MPI_IN_PLACE on a rank that is not the root"));
            }
            let mut v = vview(CALL, "sendbuf", sendbuf, counts, ds, sendtype, true)?;
            return c.scatterv_in_place(&mut v, counts, ds, root);
        }
        let sv = if root_here {
            vview(CALL, "sendbuf", sendbuf, counts, ds, sendtype, false)?
        } else {
            sview(CALL, "sendbuf", std::ptr::null(), 0, MPI_BYTE)?
        };
        let mut rv = rview(CALL, "recvbuf", recvbuf, recvcount, recvtype)?;
        c.scatterv(&sv, counts, ds, &mut rv, root)
    }
    fn Allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let mut rv = rview(CALL, "recvbuf", recvbuf, times(CALL, "recvcount", recvcount, c.size())?, recvtype)?;
        if ptr::in_place(sendbuf) {
            return c.allgather_in_place(&mut rv);
        }
        let sv = sview(CALL, "sendbuf", sendbuf, sendcount, sendtype)?;
        c.allgather(&sv, &mut rv)
    }
    fn Iallgather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        let c = handles::comm(CALL, comm)?;
        if ptr::in_place(sendbuf) {
            return Err(in_place_unsupported(CALL));
        }
        let mut rv = rview(CALL, "recvbuf", recvbuf, times(CALL, "recvcount", recvcount, c.size())?, recvtype)?;
        let sv = sview(CALL, "sendbuf", sendbuf, sendcount, sendtype)?;
        let r = c.iallgather(&sv, &mut rv)?;
        out(CALL, comm, r, request)
    }
    fn Allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let (counts, ds) = arrays(CALL, c.size() as usize, ("recvcounts", recvcounts), ("displs", displs))?;
        let mut rv = vview(CALL, "recvbuf", recvbuf, counts, ds, recvtype, true)?;
        if ptr::in_place(sendbuf) {
            return c.allgatherv_in_place(&mut rv, counts, ds);
        }
        let sv = sview(CALL, "sendbuf", sendbuf, sendcount, sendtype)?;
        c.allgatherv(&sv, &mut rv, counts, ds)
    }
    fn Alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let mut rv = rview(CALL, "recvbuf", recvbuf, times(CALL, "recvcount", recvcount, c.size())?, recvtype)?;
        if ptr::in_place(sendbuf) {
            return c.alltoall_in_place(&mut rv);
        }
        let sv = sview(CALL, "sendbuf", sendbuf, times(CALL, "sendcount", sendcount, c.size())?, sendtype)?;
        c.alltoall(&sv, &mut rv)
    }
    fn Ialltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        let c = handles::comm(CALL, comm)?;
        if ptr::in_place(sendbuf) {
            return Err(in_place_unsupported(CALL));
        }
        let mut rv = rview(CALL, "recvbuf", recvbuf, times(CALL, "recvcount", recvcount, c.size())?, recvtype)?;
        let sv = sview(CALL, "sendbuf", sendbuf, times(CALL, "sendcount", sendcount, c.size())?, sendtype)?;
        let r = c.ialltoall(&sv, &mut rv)?;
        out(CALL, comm, r, request)
    }
    fn Alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let n = c.size() as usize;
        let (rc, rd) = arrays(CALL, n, ("recvcounts", recvcounts), ("rdispls", rdispls))?;
        let mut rv = vview(CALL, "recvbuf", recvbuf, rc, rd, recvtype, true)?;
        if ptr::in_place(sendbuf) {
            return c.alltoallv_in_place(&mut rv, rc, rd);
        }
        let (sc, sd) = arrays(CALL, n, ("sendcounts", sendcounts), ("sdispls", sdispls))?;
        let sv = vview(CALL, "sendbuf", sendbuf, sc, sd, sendtype, false)?;
        c.alltoallv(&sv, sc, sd, &mut rv, rc, rd)
    }
    fn Alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const MPI_Datatype, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let n = c.size() as usize;
        if ptr::in_place(sendbuf) {
            return Err(handles::err(ErrorClass::Unsupported, CALL, "MPI_IN_PLACE is not supported by gmpi in MPI_Alltoallw yet"));
        }
        let w = |counts: *const c_int, displs: *const c_int, types: *const MPI_Datatype, side: &str| -> Result<(Vec<c_int>, Vec<isize>, Vec<UserDatatype>, isize, isize), Error> {
            let cs = ptr::slice(CALL, &format!("{side}counts"), counts, n)?;
            let ds = ptr::slice(CALL, &format!("{side}displs"), displs, n)?;
            let ts = ptr::slice(CALL, &format!("{side}types"), types, n)?;
            let mut tys = Vec::with_capacity(n);
            let (mut lo, mut hi) = (0isize, 0isize);
            for i in 0..n {
                let t = handles::dtype(CALL, ts[i])?;
                let cnt = ptr::count(CALL, &format!("{side}counts[{i}]"), cs[i])?;
                if cnt > 0 && t.size() > 0 {
                    let d = ds[i] as isize;
                    let (a, b) = (d + t.true_lb() + t.extent().min(0) * (cnt as isize - 1), d + t.true_lb() + t.true_extent() + t.extent().max(0) * (cnt as isize - 1));
                    lo = lo.min(a);
                    hi = hi.max(b);
                }
                tys.push(t.into_owned());
            }
            Ok((cs.to_vec(), ds.iter().map(|&d| d as isize).collect(), tys, lo, hi))
        };
        let (sc, sd, st, slo, shi) = w(sendcounts, sdispls, sendtypes, "send")?;
        let (rc, rd, rt, rlo, rhi) = w(recvcounts, rdispls, recvtypes, "recv")?;
        // The buffers as bytes covering every block; displacements are bytes.
        let byte = handles::dtype(CALL, MPI_BYTE)?;
        let sv = ptr::buf(CALL, "sendbuf", (sendbuf as isize + slo) as *const c_void, (shi - slo) as c_int, &byte, false)?;
        let mut rv = ptr::buf(CALL, "recvbuf", (recvbuf as isize + rlo) as *const c_void, (rhi - rlo) as c_int, &byte, true)?;
        let sd: Vec<isize> = sd.iter().map(|d| d - slo).collect();
        let rd: Vec<isize> = rd.iter().map(|d| d - rlo).collect();
        c.alltoallw(&sv, &sc, &sd, &st, &mut rv, &rc, &rd, &rt)
    }
    fn Reduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let o = op_for(CALL, op, datatype)?;
        let total = times(CALL, "recvcount", recvcount, c.size())?;
        if ptr::in_place(sendbuf) {
            let mut v = rview(CALL, "recvbuf", recvbuf, total, datatype)?;
            return c.reduce_scatter_block_in_place(&mut v, o);
        }
        let sv = sview(CALL, "sendbuf", sendbuf, total, datatype)?;
        let mut rv = rview(CALL, "recvbuf", recvbuf, recvcount, datatype)?;
        c.reduce_scatter_block(&sv, &mut rv, o)
    }
    fn Reduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let o = op_for(CALL, op, datatype)?;
        let counts = ptr::slice(CALL, "recvcounts", recvcounts, c.size() as usize)?;
        let mut total: c_int = 0;
        for (i, &k) in counts.iter().enumerate() {
            ptr::count(CALL, &format!("recvcounts[{i}]"), k)?;
            total = total.checked_add(k).ok_or_else(|| handles::err(ErrorClass::Count, CALL, "the sum of recvcounts overflows"))?;
        }
        if ptr::in_place(sendbuf) {
            let mut v = rview(CALL, "recvbuf", recvbuf, total, datatype)?;
            return c.reduce_scatter_in_place(&mut v, counts, o);
        }
        let sv = sview(CALL, "sendbuf", sendbuf, total, datatype)?;
        let me = counts[c.rank() as usize];
        let mut rv = rview(CALL, "recvbuf", recvbuf, me, datatype)?;
        c.reduce_scatter(&sv, &mut rv, counts, o)
    }
    fn Scan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let o = op_for(CALL, op, datatype)?;
        let mut rv = rview(CALL, "recvbuf", recvbuf, count, datatype)?;
        if ptr::in_place(sendbuf) {
            return c.scan_in_place(&mut rv, o);
        }
        let sv = sview(CALL, "sendbuf", sendbuf, count, datatype)?;
        c.scan(&sv, &mut rv, o)
    }
    fn Iscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request) {
        let c = handles::comm(CALL, comm)?;
        let o = op_for(CALL, op, datatype)?;
        if ptr::in_place(sendbuf) {
            return Err(in_place_unsupported(CALL));
        }
        let mut rv = rview(CALL, "recvbuf", recvbuf, count, datatype)?;
        let sv = sview(CALL, "sendbuf", sendbuf, count, datatype)?;
        let r = c.iscan(&sv, &mut rv, o)?;
        out(CALL, comm, r, request)
    }
    fn Exscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        let c = handles::comm(CALL, comm)?;
        let o = op_for(CALL, op, datatype)?;
        let mut rv = rview(CALL, "recvbuf", recvbuf, count, datatype)?;
        if ptr::in_place(sendbuf) {
            return c.exscan_in_place(&mut rv, o);
        }
        let sv = sview(CALL, "sendbuf", sendbuf, count, datatype)?;
        c.exscan(&sv, &mut rv, o)
    }
    fn Igatherv(_sendbuf: *const c_void, _sendcount: c_int, _sendtype: MPI_Datatype, _recvbuf: *mut c_void, _recvcounts: *const c_int, _displs: *const c_int, _recvtype: MPI_Datatype, _root: c_int, comm: MPI_Comm, _request: *mut MPI_Request) {
        handles::comm(CALL, comm)?;
        Err(unsupported(CALL))
    }
    fn Iscatterv(_sendbuf: *const c_void, _sendcounts: *const c_int, _displs: *const c_int, _sendtype: MPI_Datatype, _recvbuf: *mut c_void, _recvcount: c_int, _recvtype: MPI_Datatype, _root: c_int, comm: MPI_Comm, _request: *mut MPI_Request) {
        handles::comm(CALL, comm)?;
        Err(unsupported(CALL))
    }
    fn Iallgatherv(_sendbuf: *const c_void, _sendcount: c_int, _sendtype: MPI_Datatype, _recvbuf: *mut c_void, _recvcounts: *const c_int, _displs: *const c_int, _recvtype: MPI_Datatype, comm: MPI_Comm, _request: *mut MPI_Request) {
        handles::comm(CALL, comm)?;
        Err(unsupported(CALL))
    }
    fn Ialltoallv(_sendbuf: *const c_void, _sendcounts: *const c_int, _sdispls: *const c_int, _sendtype: MPI_Datatype, _recvbuf: *mut c_void, _recvcounts: *const c_int, _rdispls: *const c_int, _recvtype: MPI_Datatype, comm: MPI_Comm, _request: *mut MPI_Request) {
        handles::comm(CALL, comm)?;
        Err(unsupported(CALL))
    }
    fn Ialltoallw(_sendbuf: *const c_void, _sendcounts: *const c_int, _sdispls: *const c_int, _sendtypes: *const MPI_Datatype, _recvbuf: *mut c_void, _recvcounts: *const c_int, _rdispls: *const c_int, _recvtypes: *const MPI_Datatype, comm: MPI_Comm, _request: *mut MPI_Request) {
        handles::comm(CALL, comm)?;
        Err(unsupported(CALL))
    }
    fn Ireduce_scatter(_sendbuf: *const c_void, _recvbuf: *mut c_void, _recvcounts: *const c_int, _datatype: MPI_Datatype, _op: MPI_Op, comm: MPI_Comm, _request: *mut MPI_Request) {
        handles::comm(CALL, comm)?;
        Err(unsupported(CALL))
    }
    fn Ireduce_scatter_block(_sendbuf: *const c_void, _recvbuf: *mut c_void, _recvcount: c_int, _datatype: MPI_Datatype, _op: MPI_Op, comm: MPI_Comm, _request: *mut MPI_Request) {
        handles::comm(CALL, comm)?;
        Err(unsupported(CALL))
    }
    fn Iexscan(_sendbuf: *const c_void, _recvbuf: *mut c_void, _count: c_int, _datatype: MPI_Datatype, _op: MPI_Op, comm: MPI_Comm, _request: *mut MPI_Request) {
        handles::comm(CALL, comm)?;
        Err(unsupported(CALL))
    }
    fn Op_create(user_fn: Option<UserFn>, commute: c_int, op: *mut MPI_Op) {
        let Some(f) = user_fn else {
            return Err(handles::err(ErrorClass::Arg, CALL, "user_fn is NULL"));
        };
        if op.is_null() {
            return Err(handles::err(ErrorClass::Arg, CALL, "op is NULL"));
        }
        let h = encode(Kind::Op, state().ops.insert(OpObj { f, commutative: commute != 0 }));
        ptr::write(CALL, "op", op, h)
    }
    fn Op_free(op: *mut MPI_Op) {
        let h = ptr::read(CALL, "op", op)?;
        let Some(i) = decode(Kind::Op, h) else {
            return Err(handles::err(ErrorClass::Op, CALL, format!("op = {h:#x} is not a user-defined operation (predefined operations cannot be freed)")));
        };
        if state().ops.remove(i).is_none() {
            return Err(handles::err(ErrorClass::Op, CALL, format!("op = {h:#x} is not a valid operation")));
        }
        ptr::write(CALL, "op", op, MPI_OP_NULL)
    }
    fn Op_commutative(op: MPI_Op, commute: *mut c_int) {
        let c = match handles::user_op(op) {
            Some(o) => o.commutative,
            None => {
                // Predefined: every one is commutative.
                handles::op(CALL, op, MPI_BYTE, &*handles::dtype(CALL, MPI_BYTE)?)?;
                true
            }
        };
        ptr::write(CALL, "commute", commute, c as c_int)
    }
}
