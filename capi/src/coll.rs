//! Collectives and reduction operations: the C entry points over the
//! runtime's collectives (one implementation each; the runtime picks the
//! algorithm), `MPI_IN_PLACE`, the non-blocking forms, user operations.
//!
//! Each blocking entry point and its non-blocking twin turn their C
//! arguments into buffers through one shared helper (`*_io`), which also
//! handles `MPI_IN_PLACE` the same way for both; the non-blocking forms
//! hand the runtime's request out as an `MPI_Request`. The runtime copies
//! the count, displacement and datatype arrays when a collective starts, so
//! only the data buffers must outlive the call. `MPI_Alltoallw` views each
//! side as the byte range its blocks cover (which may exceed a C `int`), so
//! datatypes holding absolute addresses (`MPI_BOTTOM`) work too.
//!
//! Each body is shared by the classic entry point and its MPI-4 `_c` twin
//! (`MPI_Count` counts, `MPI_Count`/`MPI_Aint` arrays): the twin's counts and
//! displacements are narrowed to the `int`s the classic path takes, where
//! and as far as that path reads them, and one that has no `int` fails with
//! `MPI_ERR_COUNT` (alltoallw's byte displacements are taken whole). As the
//! runtime copies the arrays, the converted ones need not outlive the call.

use std::ffi::{c_int, c_void};

use gmpi::{Communicator, Error, ErrorClass, Op, UserDatatype, View};

use crate::abi::*;
use crate::p2p::{persistent_coll, Snap};
use crate::ptr;
use crate::resolve;
use crate::tables::*;

/// A send-side buffer argument.
fn sview(
    call: &str,
    what: &str,
    p: *const c_void,
    count: c_int,
    dt: MPI_Datatype,
) -> Result<View, Error> {
    let t = resolve::dtype(call, dt)?;
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
    let t = resolve::dtype(call, dt)?;
    ptr::buf(call, what, p, count, &t, true)
}

/// `count × size` as a C count (`MPI_ERR_COUNT` on overflow or negative).
fn times(call: &str, what: &str, count: c_int, n: c_int) -> Result<c_int, Error> {
    ptr::count(call, what, count)?;
    count.checked_mul(n).ok_or_else(|| {
        err(
            ErrorClass::Count,
            call,
            format!("{what} × communicator size overflows"),
        )
    })
}

/// Whether this rank is the root: on an intercommunicator, the one that
/// passed `MPI_ROOT`.
fn is_root(c: &Communicator, root: c_int) -> bool {
    if c.is_inter() {
        root == MPI_ROOT
    } else {
        c.rank() == root
    }
}

/// How many blocks the per-rank buffers of a collective hold: the
/// communicator size, or the remote group's on an intercommunicator.
fn peers(c: &Communicator) -> c_int {
    c.remote_size().unwrap_or_else(|| c.size())
}

/// Whether this rank takes no part in a rooted intercommunicator
/// collective (it passed `MPI_PROC_NULL`): its buffer arguments are not
/// significant.
fn idle(c: &Communicator, root: c_int) -> bool {
    c.is_inter() && root == MPI_PROC_NULL
}

/// A buffer argument that is not significant here.
fn none(call: &str) -> Result<View, Error> {
    rview(call, "buf", std::ptr::null_mut(), 0, MPI_BYTE)
}

/// The buffers of a rank that takes no part.
fn idle_io(call: &str) -> Result<Io, Error> {
    Ok(Io {
        send: Some(none(call)?),
        buf: none(call)?,
    })
}

/// The op for `dt`.
fn op_for(call: &str, op: MPI_Op, dt: MPI_Datatype) -> Result<Op, Error> {
    let t = resolve::dtype(call, dt)?;
    resolve::op(call, op, dt, &t)
}

/// The hot path of `MPI_Allgather` and (`alltoall`, whose send buffer holds
/// one block per rank) `MPI_Alltoall`, as [`allreduce_fast`] is
/// `MPI_Allreduce`'s: predefined datatypes on `MPI_COMM_WORLD`/`MPI_COMM_SELF`
/// get their views with no handle-table look-up; anything else (`None`,
/// before any effect) takes the full path and its checks.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn all_fast(
    call: &'static str,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    alltoall: bool,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    let n = c.size();
    let mut rv = ptr::fast_buf(
        recvbuf,
        recvcount.checked_mul(n)?,
        resolve::fast_dtype(recvtype)?,
        true,
    )?;
    if ptr::in_place(sendbuf) {
        return Some(crate::frame::fast(call, comm, || {
            if alltoall {
                c.alltoall_in_place(&mut rv)
            } else {
                c.allgather_in_place(&mut rv)
            }
        }));
    }
    let total = if alltoall {
        sendcount.checked_mul(n)?
    } else {
        sendcount
    };
    let sv = ptr::fast_buf(sendbuf, total, resolve::fast_dtype(sendtype)?, false)?;
    Some(crate::frame::fast(call, comm, || {
        if alltoall {
            c.alltoall(&sv, &mut rv)
        } else {
            c.allgather(&sv, &mut rv)
        }
    }))
}

/// The hot path of `MPI_Allreduce`, as `send_fast` is `MPI_Send`'s: on
/// `MPI_COMM_WORLD`/`MPI_COMM_SELF`, with a predefined datatype the runtime
/// views as a basic type and a predefined arithmetic or logical op, the
/// views and the op are made with no handle-table lock or reference count
/// (small allreduces are dominated by those look-ups, not by the data
/// exchange). The runtime call and all its checks are the full path's;
/// anything not recognised here (`None`, before any effect) takes the full
/// path, so no argument escapes a check.
#[inline(always)]
fn allreduce_fast(
    call: &'static str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> Option<c_int> {
    let (c, o, sv, mut rv) = allreduce_fast_args(sendbuf, recvbuf, count, dt, op, comm)?;
    Some(crate::frame::fast(call, comm, || match &sv {
        None => c.allreduce_in_place(&mut rv, o),
        Some(sv) => c.allreduce(sv, &mut rv, o),
    }))
}

/// What the hot paths of `MPI_Allreduce` and `MPI_Iallreduce` resolve
/// without a lock: the communicator, the op, the send buffer (`None` in
/// place) and the receive buffer; `None` for anything else.
#[inline(always)]
fn allreduce_fast_args(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> Option<(&'static Communicator, Op, Option<View>, View)> {
    let c = resolve::fast_comm(comm)?;
    let o = resolve::fast_op(op, dt)?;
    let d = resolve::fast_dtype(dt)?;
    let rv = ptr::fast_buf(recvbuf, count, d, true)?;
    let sv = match ptr::in_place(sendbuf) {
        true => None,
        false => Some(ptr::fast_buf(sendbuf, count, d, false)?),
    };
    Some((c, o, sv, rv))
}

/// The hot path of `MPI_Reduce_scatter_block` (not in place), as
/// [`allreduce_fast`] is `MPI_Allreduce`'s.
#[inline(always)]
fn reduce_scatter_block_fast(
    call: &'static str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    if ptr::in_place(sendbuf) {
        return None;
    }
    let (o, d) = (resolve::fast_op(op, dt)?, resolve::fast_dtype(dt)?);
    let total = recvcount.checked_mul(c.size())?;
    let sv = ptr::fast_buf(sendbuf, total, d, false)?;
    let mut rv = ptr::fast_buf(recvbuf, recvcount, d, true)?;
    Some(crate::frame::fast(call, comm, || {
        c.reduce_scatter_block(&sv, &mut rv, o)
    }))
}

/// The hot path of `MPI_Iallreduce`, as [`allreduce_fast`] is
/// `MPI_Allreduce`'s (a NULL `request` takes the full path, which says so).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn iallreduce_fast(
    call: &'static str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Option<c_int> {
    if request.is_null() {
        return None;
    }
    let (c, o, sv, mut rv) = allreduce_fast_args(sendbuf, recvbuf, count, dt, op, comm)?;
    Some(crate::frame::fast(call, comm, || {
        let r = match &sv {
            None => c.iallreduce_in_place(&mut rv, o)?,
            Some(sv) => c.iallreduce(sv, &mut rv, o)?,
        };
        out(call, comm, r, request)
    }))
}

/// The hot path of `MPI_Bcast`, as [`allreduce_fast`] is `MPI_Allreduce`'s.
#[inline(always)]
fn bcast_fast(
    call: &'static str,
    buffer: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    let mut v = ptr::fast_buf(buffer, count, resolve::fast_dtype(dt)?, true)?;
    Some(crate::frame::fast(call, comm, || c.bcast(&mut v, root)))
}

/// An empty receive (or send) buffer of a rank where MPI says the
/// argument is not significant (a rooted collective's non-root).
#[inline(always)]
fn not_significant() -> Option<View> {
    ptr::fast_buf(std::ptr::null(), 0, resolve::fast_dtype(MPI_BYTE)?, true)
}

/// The hot path of `MPI_Reduce`, as [`allreduce_fast`] (`recvbuf` only at
/// the root).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn reduce_fast(
    call: &'static str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    let o = resolve::fast_op(op, dt)?;
    let d = resolve::fast_dtype(dt)?;
    let at_root = c.rank() == root;
    let mut rv = if at_root {
        ptr::fast_buf(recvbuf, count, d, true)?
    } else {
        not_significant()?
    };
    if ptr::in_place(sendbuf) {
        // Elsewhere than at the root, the full path says what is wrong.
        return at_root
            .then(|| crate::frame::fast(call, comm, || c.reduce_in_place(&mut rv, o, root)));
    }
    let sv = ptr::fast_buf(sendbuf, count, d, false)?;
    Some(crate::frame::fast(call, comm, || {
        c.reduce(&sv, &mut rv, o, root)
    }))
}

/// The hot path of `MPI_Gather` (`scatter`: `MPI_Scatter`), as
/// [`all_fast`]: the root's whole buffer of `n` blocks, a non-root's
/// nothing where MPI says the argument is not significant there; the in
/// place forms take the full path.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn rooted_fast(
    call: &'static str,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    scatter: bool,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    let at_root = c.rank() == root;
    let n = c.size();
    if scatter {
        let sv = if at_root {
            ptr::fast_buf(
                sendbuf,
                sendcount.checked_mul(n)?,
                resolve::fast_dtype(sendtype)?,
                false,
            )?
        } else {
            not_significant()?
        };
        let mut rv = ptr::fast_buf(recvbuf, recvcount, resolve::fast_dtype(recvtype)?, true)?;
        return Some(crate::frame::fast(call, comm, || {
            c.scatter(&sv, &mut rv, root)
        }));
    }
    let sv = ptr::fast_buf(sendbuf, sendcount, resolve::fast_dtype(sendtype)?, false)?;
    let mut rv = if at_root {
        ptr::fast_buf(
            recvbuf,
            recvcount.checked_mul(n)?,
            resolve::fast_dtype(recvtype)?,
            true,
        )?
    } else {
        not_significant()?
    };
    Some(crate::frame::fast(call, comm, || {
        c.gather(&sv, &mut rv, root)
    }))
}

/// The counts and displacements of `n` ranks (a `v` call's arrays, in
/// elements) and the extent they cover, as [`vview`] computes it, when
/// every entry is non-negative; `None` otherwise (the full path names the
/// bad entry).
#[inline(always)]
fn fast_v<'a>(
    n: usize,
    counts: *const c_int,
    displs: *const c_int,
) -> Option<(&'a [c_int], &'a [c_int], c_int)> {
    let c = ptr::slice("", "", counts, n).ok()?;
    let d = ptr::slice("", "", displs, n).ok()?;
    let mut hi: i64 = 0;
    for (&k, &x) in c.iter().zip(d) {
        if k < 0 || x < 0 {
            return None;
        }
        if k > 0 {
            hi = hi.max(x as i64 + k as i64);
        }
    }
    Some((c, d, c_int::try_from(hi).ok()?))
}

/// The hot path of `MPI_Gatherv`, as [`rooted_fast`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gatherv_fast(
    call: &'static str,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    let sv = ptr::fast_buf(sendbuf, sendcount, resolve::fast_dtype(sendtype)?, false)?;
    let (counts, ds, mut rv): (&[c_int], &[c_int], View) = if c.rank() == root {
        let (counts, ds, hi) = fast_v(c.size() as usize, recvcounts, displs)?;
        let rv = ptr::fast_buf(recvbuf, hi, resolve::fast_dtype(recvtype)?, true)?;
        (counts, ds, rv)
    } else {
        (&[], &[], not_significant()?)
    };
    Some(crate::frame::fast(call, comm, || {
        c.gatherv(&sv, &mut rv, counts, ds, root)
    }))
}

/// The hot path of `MPI_Scatterv`, as [`rooted_fast`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn scatterv_fast(
    call: &'static str,
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    let mut rv = ptr::fast_buf(recvbuf, recvcount, resolve::fast_dtype(recvtype)?, true)?;
    let (counts, ds, sv): (&[c_int], &[c_int], View) = if c.rank() == root {
        let (counts, ds, hi) = fast_v(c.size() as usize, sendcounts, displs)?;
        let sv = ptr::fast_buf(sendbuf, hi, resolve::fast_dtype(sendtype)?, false)?;
        (counts, ds, sv)
    } else {
        (&[], &[], not_significant()?)
    };
    Some(crate::frame::fast(call, comm, || {
        c.scatterv(&sv, counts, ds, &mut rv, root)
    }))
}

/// The hot path of `MPI_Allgatherv`, as [`all_fast`] (not in place).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn allgatherv_fast(
    call: &'static str,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    let sv = ptr::fast_buf(sendbuf, sendcount, resolve::fast_dtype(sendtype)?, false)?;
    let (counts, ds, hi) = fast_v(c.size() as usize, recvcounts, displs)?;
    let mut rv = ptr::fast_buf(recvbuf, hi, resolve::fast_dtype(recvtype)?, true)?;
    Some(crate::frame::fast(call, comm, || {
        c.allgatherv(&sv, &mut rv, counts, ds)
    }))
}

/// The hot path of `MPI_Alltoallv`, as [`all_fast`] (not in place).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn alltoallv_fast(
    call: &'static str,
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    let n = c.size() as usize;
    let (scounts, sds, shi) = fast_v(n, sendcounts, sdispls)?;
    let (rcounts, rds, rhi) = fast_v(n, recvcounts, rdispls)?;
    let sv = ptr::fast_buf(sendbuf, shi, resolve::fast_dtype(sendtype)?, false)?;
    let mut rv = ptr::fast_buf(recvbuf, rhi, resolve::fast_dtype(recvtype)?, true)?;
    Some(crate::frame::fast(call, comm, || {
        c.alltoallv(&sv, scounts, sds, &mut rv, rcounts, rds)
    }))
}

/// Hand out the request of a started collective.
fn out(
    call: &str,
    comm: MPI_Comm,
    r: gmpi::Request<'_>,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let a = Active::new(ptr::detach_req(r), comm);
    if request.is_null() {
        a.req.wait()?;
        return Err(err(ErrorClass::Arg, call, "request is NULL"));
    }
    ptr::write(call, "request", request, new_request(a))
}

/// An element of a count or displacement array: `int` for the classic
/// calls, `MPI_Count`/`MPI_Aint` for the `_c` ones.
trait Wide: Copy {
    fn wide(self) -> i128;
}
impl Wide for c_int {
    fn wide(self) -> i128 {
        self as i128
    }
}
impl Wide for MPI_Count {
    fn wide(self) -> i128 {
        self as i128
    }
}
impl Wide for MPI_Aint {
    fn wide(self) -> i128 {
        self as i128
    }
}

/// A `_c` call's scalar count as the `int` the classic call's code path
/// takes (`MPI_ERR_COUNT` if it has none; a negative one that fits is left
/// for that path's own check).
fn int(call: &str, what: &str, n: impl Wide) -> Result<c_int, Error> {
    let n = n.wide();
    c_int::try_from(n).map_err(|_| {
        err(
            ErrorClass::Count,
            call,
            format!("{what} = {n} does not fit in an int (large counts are not supported here)"),
        )
    })
}

/// The array of `n` counts or displacements at `p`, as `int`s.
fn ints<T: Wide>(call: &str, what: &str, p: *const T, n: usize) -> Result<Vec<c_int>, Error> {
    ptr::slice(call, what, p, n)?
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            // The entry's name only for the error: formatting it for every
            // entry of every call cost a v-form more than its data did.
            c_int::try_from(v.wide()).or_else(|_| int(call, &format!("{what}[{i}]"), v))
        })
        .collect()
}

/// Count and displacement arrays of a vector collective, one entry per rank.
fn arrays<C: Wide, D: Wide>(
    call: &str,
    n: usize,
    counts: (&str, *const C),
    displs: (&str, *const D),
) -> Result<(Vec<c_int>, Vec<c_int>), Error> {
    Ok((
        ints(call, counts.0, counts.1, n)?,
        ints(call, displs.0, displs.1, n)?,
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
    let t = resolve::dtype(call, dt)?;
    let mut hi: i64 = 0;
    for (i, (&c, &d)) in counts.iter().zip(displs).enumerate() {
        if c < 0 {
            return Err(err(
                ErrorClass::Count,
                call,
                format!("{what} count[{i}] = {c} is negative"),
            ));
        }
        if d < 0 {
            return Err(err(
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
        err(
            ErrorClass::Count,
            call,
            format!("{what} spans more than 2^31 elements"),
        )
    })?;
    ptr::buf(call, what, p, n, &t, writable)
}

/// `MPI_IN_PLACE` where only the root may pass it.
fn not_root(call: &str, what: &str) -> Error {
    err(
        ErrorClass::Buffer,
        call,
        format!("{what} is MPI_IN_PLACE on a rank that is not the root"),
    )
}

/// The buffers of one collective call, shared by its blocking and
/// non-blocking entry points: `send` is `None` for `MPI_IN_PLACE`, and then
/// `buf` is the one buffer the runtime's `_in_place` form takes.
struct Io {
    send: Option<View>,
    buf: View,
}

/// `MPI_Reduce`/`MPI_Ireduce`: the receive buffer only at the root, which
/// alone may pass `MPI_IN_PLACE`.
fn reduce_io(
    call: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    root: c_int,
) -> Result<Io, Error> {
    if idle(c, root) {
        return idle_io(call);
    }
    if ptr::in_place(sendbuf) {
        if !is_root(c, root) {
            return Err(not_root(call, "sendbuf"));
        }
        let buf = rview(call, "recvbuf", recvbuf, count, dt)?;
        return Ok(Io { send: None, buf });
    }
    if c.is_inter() && is_root(c, root) {
        // The intercommunicator root sends nothing.
        let buf = rview(call, "recvbuf", recvbuf, count, dt)?;
        return Ok(Io {
            send: Some(none(call)?),
            buf,
        });
    }
    let send = Some(sview(call, "sendbuf", sendbuf, count, dt)?);
    let buf = if is_root(c, root) {
        rview(call, "recvbuf", recvbuf, count, dt)?
    } else {
        rview(call, "recvbuf", std::ptr::null_mut(), 0, dt)?
    };
    Ok(Io { send, buf })
}

/// Send and receive buffers of the same size (allreduce, scan, exscan).
fn same_io(
    call: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
) -> Result<Io, Error> {
    let buf = rview(call, "recvbuf", recvbuf, count, dt)?;
    let send = if ptr::in_place(sendbuf) {
        None
    } else {
        Some(sview(call, "sendbuf", sendbuf, count, dt)?)
    };
    Ok(Io { send, buf })
}

/// `MPI_Gather`/`MPI_Igather`.
#[allow(clippy::too_many_arguments)]
fn gather_io(
    call: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
) -> Result<Io, Error> {
    if idle(c, root) {
        return idle_io(call);
    }
    let root_here = is_root(c, root);
    let rv = |p| {
        rview(
            call,
            "recvbuf",
            p,
            times(call, "recvcount", recvcount, peers(c))?,
            recvtype,
        )
    };
    if c.is_inter() && root_here && !ptr::in_place(sendbuf) {
        return Ok(Io {
            send: Some(none(call)?),
            buf: rv(recvbuf)?,
        });
    }
    if ptr::in_place(sendbuf) {
        if !root_here {
            return Err(not_root(call, "sendbuf"));
        }
        return Ok(Io {
            send: None,
            buf: rv(recvbuf)?,
        });
    }
    let send = Some(sview(call, "sendbuf", sendbuf, sendcount, sendtype)?);
    let buf = if root_here {
        rv(recvbuf)?
    } else {
        rview(call, "recvbuf", std::ptr::null_mut(), 0, MPI_BYTE)?
    };
    Ok(Io { send, buf })
}

/// `MPI_Gatherv`/`MPI_Igatherv`, with the root's counts and displacements.
#[allow(clippy::too_many_arguments)]
fn gatherv_io<C: Wide, D: Wide>(
    call: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    displs: *const D,
    recvtype: MPI_Datatype,
    root: c_int,
) -> Result<(Io, Vec<c_int>, Vec<c_int>), Error> {
    if idle(c, root) {
        return Ok((idle_io(call)?, vec![], vec![]));
    }
    let root_here = is_root(c, root);
    let (counts, ds) = if root_here {
        arrays(
            call,
            peers(c) as usize,
            ("recvcounts", recvcounts),
            ("displs", displs),
        )?
    } else {
        (vec![], vec![])
    };
    if c.is_inter() && root_here && !ptr::in_place(sendbuf) {
        let buf = vview(call, "recvbuf", recvbuf, &counts, &ds, recvtype, true)?;
        return Ok((
            Io {
                send: Some(none(call)?),
                buf,
            },
            counts,
            ds,
        ));
    }
    if ptr::in_place(sendbuf) {
        if !root_here {
            return Err(not_root(call, "sendbuf"));
        }
        let buf = vview(call, "recvbuf", recvbuf, &counts, &ds, recvtype, true)?;
        return Ok((Io { send: None, buf }, counts, ds));
    }
    let send = Some(sview(call, "sendbuf", sendbuf, sendcount, sendtype)?);
    let buf = if root_here {
        vview(call, "recvbuf", recvbuf, &counts, &ds, recvtype, true)?
    } else {
        rview(call, "recvbuf", std::ptr::null_mut(), 0, MPI_BYTE)?
    };
    Ok((Io { send, buf }, counts, ds))
}

/// `MPI_Scatter`/`MPI_Iscatter`: in place (`recvbuf` is `MPI_IN_PLACE` at
/// the root), `buf` is the send buffer.
#[allow(clippy::too_many_arguments)]
fn scatter_io(
    call: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
) -> Result<Io, Error> {
    if idle(c, root) {
        return idle_io(call);
    }
    let root_here = is_root(c, root);
    let total = |c: &Communicator| times(call, "sendcount", sendcount, peers(c));
    if c.is_inter() && root_here && !ptr::in_place(recvbuf) {
        // The intercommunicator root receives nothing.
        let send = Some(sview(call, "sendbuf", sendbuf, total(c)?, sendtype)?);
        return Ok(Io {
            send,
            buf: none(call)?,
        });
    }
    if ptr::in_place(recvbuf) {
        if !root_here {
            return Err(not_root(call, "recvbuf"));
        }
        let buf = rview(call, "sendbuf", sendbuf as *mut c_void, total(c)?, sendtype)?;
        return Ok(Io { send: None, buf });
    }
    let send = Some(if root_here {
        sview(call, "sendbuf", sendbuf, total(c)?, sendtype)?
    } else {
        sview(call, "sendbuf", std::ptr::null(), 0, MPI_BYTE)?
    });
    let buf = rview(call, "recvbuf", recvbuf, recvcount, recvtype)?;
    Ok(Io { send, buf })
}

/// `MPI_Scatterv`/`MPI_Iscatterv`, with the root's counts and
/// displacements; in place, `buf` is the send buffer.
#[allow(clippy::too_many_arguments)]
fn scatterv_io<C: Wide, D: Wide>(
    call: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    sendcounts: *const C,
    displs: *const D,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
) -> Result<(Io, Vec<c_int>, Vec<c_int>), Error> {
    if idle(c, root) {
        return Ok((idle_io(call)?, vec![], vec![]));
    }
    let root_here = is_root(c, root);
    let (counts, ds) = if root_here {
        arrays(
            call,
            peers(c) as usize,
            ("sendcounts", sendcounts),
            ("displs", displs),
        )?
    } else {
        (vec![], vec![])
    };
    if c.is_inter() && root_here && !ptr::in_place(recvbuf) {
        let send = Some(vview(
            call, "sendbuf", sendbuf, &counts, &ds, sendtype, false,
        )?);
        return Ok((
            Io {
                send,
                buf: none(call)?,
            },
            counts,
            ds,
        ));
    }
    if ptr::in_place(recvbuf) {
        if !root_here {
            return Err(not_root(call, "recvbuf"));
        }
        let buf = vview(call, "sendbuf", sendbuf, &counts, &ds, sendtype, true)?;
        return Ok((Io { send: None, buf }, counts, ds));
    }
    let send = Some(if root_here {
        vview(call, "sendbuf", sendbuf, &counts, &ds, sendtype, false)?
    } else {
        sview(call, "sendbuf", std::ptr::null(), 0, MPI_BYTE)?
    });
    let buf = rview(call, "recvbuf", recvbuf, recvcount, recvtype)?;
    Ok((Io { send, buf }, counts, ds))
}

/// `MPI_Allgather` and `MPI_Alltoall` (and their `I` forms): the send
/// buffer holds `sendcount × blocks` elements (1 block for allgather, the
/// communicator size for alltoall), the receive buffer
/// `recvcount × size`.
#[allow(clippy::too_many_arguments)]
fn all_io(
    call: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    send_blocks: c_int,
) -> Result<Io, Error> {
    let buf = rview(
        call,
        "recvbuf",
        recvbuf,
        times(call, "recvcount", recvcount, peers(c))?,
        recvtype,
    )?;
    if ptr::in_place(sendbuf) {
        return Ok(Io { send: None, buf });
    }
    let total = times(call, "sendcount", sendcount, send_blocks)?;
    let send = Some(sview(call, "sendbuf", sendbuf, total, sendtype)?);
    Ok(Io { send, buf })
}

/// `MPI_Allgatherv`/`MPI_Iallgatherv`.
#[allow(clippy::too_many_arguments)]
fn allgatherv_io<C: Wide, D: Wide>(
    call: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    displs: *const D,
    recvtype: MPI_Datatype,
) -> Result<(Io, Vec<c_int>, Vec<c_int>), Error> {
    let (counts, ds) = arrays(
        call,
        peers(c) as usize,
        ("recvcounts", recvcounts),
        ("displs", displs),
    )?;
    let buf = vview(call, "recvbuf", recvbuf, &counts, &ds, recvtype, true)?;
    let send = if ptr::in_place(sendbuf) {
        None
    } else {
        Some(sview(call, "sendbuf", sendbuf, sendcount, sendtype)?)
    };
    Ok((Io { send, buf }, counts, ds))
}

/// Counts and displacements of both sides of an alltoallv (the send side's
/// are empty in place).
struct VArgs {
    sc: Vec<c_int>,
    sd: Vec<c_int>,
    rc: Vec<c_int>,
    rd: Vec<c_int>,
}

/// `MPI_Alltoallv`/`MPI_Ialltoallv`.
#[allow(clippy::too_many_arguments)]
fn alltoallv_io<C: Wide, D: Wide>(
    call: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtype: MPI_Datatype,
) -> Result<(Io, VArgs), Error> {
    let n = peers(c) as usize;
    let (rc, rd) = arrays(call, n, ("recvcounts", recvcounts), ("rdispls", rdispls))?;
    let buf = vview(call, "recvbuf", recvbuf, &rc, &rd, recvtype, true)?;
    if ptr::in_place(sendbuf) {
        return Ok((
            Io { send: None, buf },
            VArgs {
                sc: vec![],
                sd: vec![],
                rc,
                rd,
            },
        ));
    }
    let (sc, sd) = arrays(call, n, ("sendcounts", sendcounts), ("sdispls", sdispls))?;
    let send = Some(vview(call, "sendbuf", sendbuf, &sc, &sd, sendtype, false)?);
    Ok((Io { send, buf }, VArgs { sc, sd, rc, rd }))
}

/// One side of an alltoallw: counts, byte displacements (relative to the
/// side's view) and datatypes.
#[derive(Default)]
struct WSide {
    counts: Vec<c_int>,
    displs: Vec<isize>,
    types: Vec<UserDatatype>,
}

/// One side of an alltoallw as a byte view that covers exactly its blocks
/// (from the lowest byte any block touches to the highest), so absolute
/// displacements from `MPI_BOTTOM` work as well as small ones from a buffer.
#[allow(clippy::too_many_arguments)]
fn wside<C: Wide, D: Wide>(
    call: &str,
    n: usize,
    side: &str,
    p: *const c_void,
    counts: *const C,
    displs: *const D,
    types: *const MPI_Datatype,
    writable: bool,
) -> Result<(View, WSide), Error> {
    let cs = ints(call, &format!("{side}counts"), counts, n)?;
    let ds: Vec<i128> = ptr::slice(call, &format!("{side}displs"), displs, n)?
        .iter()
        .map(|d| d.wide())
        .collect();
    let ts = ptr::slice(call, &format!("{side}types"), types, n)?;
    // Each non-empty block's type and the byte range it touches, relative
    // to `p`.
    let mut blocks = Vec::with_capacity(n);
    let mut span: Option<(i128, i128)> = None;
    for i in 0..n {
        let t = resolve::dtype(call, ts[i])?.into_owned();
        let cnt = match usize::try_from(cs[i]) {
            Ok(c) => c as i128,
            Err(_) => ptr::count(call, &format!("{side}counts[{i}]"), cs[i])? as i128,
        };
        let mut range = None;
        if cnt > 0 && t.size() > 0 {
            let (d, lb, ext) = (ds[i], t.true_lb() as i128, t.extent() as i128);
            let lo = d + lb + ext.min(0) * (cnt - 1);
            let hi = d + lb + t.true_extent() as i128 + ext.max(0) * (cnt - 1);
            span = Some(span.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
            range = Some(lo);
        }
        blocks.push((t, range));
    }
    let (lo, hi) = span.unwrap_or((0, 0));
    let len = usize::try_from(hi - lo).map_err(|_| {
        err(
            ErrorClass::Arg,
            call,
            format!("the {side} blocks span an impossible byte range"),
        )
    })?;
    let base = (p as isize as i128 + lo) as isize as *const c_void;
    let byte = resolve::dtype(call, MPI_BYTE)?;
    let view = ptr::buf_bytes(call, &format!("{side}buf"), base, len, &byte, writable)?;
    // Displacements relative to the view's start. An empty block's does not
    // matter; a block whose displacement lies below the view (a datatype
    // holding absolute addresses, from `MPI_BOTTOM`) is re-expressed as one
    // element of a type shifted to start at its data.
    let mut counts = cs.clone();
    let mut displs = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    for (i, (t, range)) in blocks.into_iter().enumerate() {
        let d = ds[i];
        match range {
            None => {
                displs.push(0);
                types.push(t);
            }
            // (An uncommitted type is passed on for the runtime to reject.)
            Some(a) if d < lo && t.is_committed() => {
                let shifted = ptr::shifted_type(cs[i], &t, (d - a) as isize)?;
                counts[i] = 1;
                displs.push((a - lo) as isize);
                types.push(shifted);
            }
            Some(_) => {
                displs.push((d - lo) as isize);
                types.push(t);
            }
        }
    }
    Ok((
        view,
        WSide {
            counts,
            displs,
            types,
        },
    ))
}

/// `MPI_Alltoallw`/`MPI_Ialltoallw`: in place, the receive side alone.
#[allow(clippy::too_many_arguments)]
fn alltoallw_io<C: Wide, D: Wide>(
    call: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtypes: *const MPI_Datatype,
) -> Result<(Io, WSide, WSide), Error> {
    let n = peers(c) as usize;
    let (buf, r) = wside(
        call, n, "recv", recvbuf, recvcounts, rdispls, recvtypes, true,
    )?;
    if ptr::in_place(sendbuf) {
        return Ok((Io { send: None, buf }, WSide::default(), r));
    }
    let (sv, s) = wside(
        call, n, "send", sendbuf, sendcounts, sdispls, sendtypes, false,
    )?;
    Ok((
        Io {
            send: Some(sv),
            buf,
        },
        s,
        r,
    ))
}

/// `MPI_Reduce_scatter_block`/`MPI_Ireduce_scatter_block`: in place, `buf`
/// holds all `size` blocks.
fn reduce_scatter_block_io(
    call: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    dt: MPI_Datatype,
) -> Result<Io, Error> {
    let total = times(call, "recvcount", recvcount, c.size())?;
    if ptr::in_place(sendbuf) {
        let buf = rview(call, "recvbuf", recvbuf, total, dt)?;
        return Ok(Io { send: None, buf });
    }
    let send = Some(sview(call, "sendbuf", sendbuf, total, dt)?);
    let buf = rview(call, "recvbuf", recvbuf, recvcount, dt)?;
    Ok(Io { send, buf })
}

/// `MPI_Reduce_scatter`/`MPI_Ireduce_scatter`, with the counts: in place,
/// `buf` holds the whole input.
fn reduce_scatter_io<C: Wide>(
    call: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    dt: MPI_Datatype,
) -> Result<(Io, Vec<c_int>), Error> {
    let counts = ints(call, "recvcounts", recvcounts, c.size() as usize)?;
    let mut total: c_int = 0;
    for (i, &k) in counts.iter().enumerate() {
        if k < 0 {
            ptr::count(call, &format!("recvcounts[{i}]"), k)?;
        }
        total = total
            .checked_add(k)
            .ok_or_else(|| err(ErrorClass::Count, call, "the sum of recvcounts overflows"))?;
    }
    if ptr::in_place(sendbuf) {
        let buf = rview(call, "recvbuf", recvbuf, total, dt)?;
        return Ok((Io { send: None, buf }, counts));
    }
    let send = Some(sview(call, "sendbuf", sendbuf, total, dt)?);
    let buf = rview(call, "recvbuf", recvbuf, counts[c.rank() as usize], dt)?;
    Ok((Io { send, buf }, counts))
}

// The bodies of the collectives, each shared by the classic (`int`) entry
// point and its `_c` (`MPI_Count`) twin: scalar counts are narrowed to
// `int` once the communicator is known, count and displacement arrays
// where (and as far as) the classic path reads them (`arrays`, `ints`).

fn bcast(
    call: &str,
    buffer: *mut c_void,
    count: impl Wide,
    datatype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let mut v = if idle(&c, root) {
        none(call)?
    } else {
        rview(call, "buffer", buffer, int(call, "count", count)?, datatype)?
    };
    c.bcast(&mut v, root)
}
fn ibcast(
    call: &str,
    buffer: *mut c_void,
    count: impl Wide,
    datatype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let mut v = if idle(&c, root) {
        none(call)?
    } else {
        rview(call, "buffer", buffer, int(call, "count", count)?, datatype)?
    };
    let r = c.ibcast(&mut v, root)?;
    out(call, comm, r, request)
}
#[allow(clippy::too_many_arguments)]
fn reduce(
    call: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: impl Wide,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    // (Nothing is significant at a rank that takes no part.)
    let o = if idle(&c, root) {
        Op::Sum
    } else {
        op_for(call, op, datatype)?
    };
    let count = if idle(&c, root) {
        0
    } else {
        int(call, "count", count)?
    };
    let mut io = reduce_io(call, &c, sendbuf, recvbuf, count, datatype, root)?;
    match &io.send {
        None => c.reduce_in_place(&mut io.buf, o, root),
        Some(sv) => c.reduce(sv, &mut io.buf, o, root),
    }
}
#[allow(clippy::too_many_arguments)]
fn ireduce(
    call: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: impl Wide,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    // (Nothing is significant at a rank that takes no part.)
    let o = if idle(&c, root) {
        Op::Sum
    } else {
        op_for(call, op, datatype)?
    };
    let count = if idle(&c, root) {
        0
    } else {
        int(call, "count", count)?
    };
    let mut io = reduce_io(call, &c, sendbuf, recvbuf, count, datatype, root)?;
    let r = match &io.send {
        None => c.ireduce_in_place(&mut io.buf, o, root)?,
        Some(sv) => c.ireduce(sv, &mut io.buf, o, root)?,
    };
    out(call, comm, r, request)
}
fn allreduce(
    call: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: impl Wide,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let o = op_for(call, op, datatype)?;
    let mut io = same_io(call, sendbuf, recvbuf, int(call, "count", count)?, datatype)?;
    match &io.send {
        None => c.allreduce_in_place(&mut io.buf, o),
        Some(sv) => c.allreduce(sv, &mut io.buf, o),
    }
}
#[allow(clippy::too_many_arguments)]
fn iallreduce(
    call: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: impl Wide,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let o = op_for(call, op, datatype)?;
    let mut io = same_io(call, sendbuf, recvbuf, int(call, "count", count)?, datatype)?;
    let r = match &io.send {
        None => c.iallreduce_in_place(&mut io.buf, o)?,
        Some(sv) => c.iallreduce(sv, &mut io.buf, o)?,
    };
    out(call, comm, r, request)
}
fn reduce_local(
    call: &str,
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: impl Wide,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> Result<(), Error> {
    let o = op_for(call, op, datatype)?;
    let count = int(call, "count", count)?;
    let iv = sview(call, "inbuf", inbuf, count, datatype)?;
    let mut io = rview(call, "inoutbuf", inoutbuf, count, datatype)?;
    gmpi::reduce_local(&iv, &mut io, o)
}
/// The scalar counts of a rooted collective, narrowed only where
/// significant (elsewhere 0, which the classic path ignores there too).
fn rooted_counts(
    call: &str,
    c: &Communicator,
    root: c_int,
    sendbuf: *const c_void,
    send: (&str, impl Wide),
    recv: (&str, impl Wide),
) -> Result<(c_int, c_int), Error> {
    if idle(c, root) {
        return Ok((0, 0));
    }
    let s = if ptr::in_place(sendbuf) || (c.is_inter() && is_root(c, root)) {
        0
    } else {
        int(call, send.0, send.1)?
    };
    let r = if is_root(c, root) {
        int(call, recv.0, recv.1)?
    } else {
        0
    };
    Ok((s, r))
}
#[allow(clippy::too_many_arguments)]
fn gather(
    call: &str,
    sendbuf: *const c_void,
    sendcount: impl Wide,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: impl Wide,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (sendcount, recvcount) = rooted_counts(
        call,
        &c,
        root,
        sendbuf,
        ("sendcount", sendcount),
        ("recvcount", recvcount),
    )?;
    let mut io = gather_io(
        call, &c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
    )?;
    match &io.send {
        None => c.gather_in_place(&mut io.buf, root),
        Some(sv) => c.gather(sv, &mut io.buf, root),
    }
}
#[allow(clippy::too_many_arguments)]
fn igather(
    call: &str,
    sendbuf: *const c_void,
    sendcount: impl Wide,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: impl Wide,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (sendcount, recvcount) = rooted_counts(
        call,
        &c,
        root,
        sendbuf,
        ("sendcount", sendcount),
        ("recvcount", recvcount),
    )?;
    let mut io = gather_io(
        call, &c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
    )?;
    let r = match &io.send {
        None => c.igather_in_place(&mut io.buf, root)?,
        Some(sv) => c.igather(sv, &mut io.buf, root)?,
    };
    out(call, comm, r, request)
}
#[allow(clippy::too_many_arguments)]
fn gatherv(
    call: &str,
    sendbuf: *const c_void,
    sendcount: impl Wide,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const impl Wide,
    displs: *const impl Wide,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (sendcount, _) = rooted_counts(call, &c, root, sendbuf, ("sendcount", sendcount), ("", 0))?;
    let (mut io, counts, ds) = gatherv_io(
        call, &c, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root,
    )?;
    match &io.send {
        None => c.gatherv_in_place(&mut io.buf, &counts, &ds, root),
        Some(sv) => c.gatherv(sv, &mut io.buf, &counts, &ds, root),
    }
}
#[allow(clippy::too_many_arguments)]
fn igatherv(
    call: &str,
    sendbuf: *const c_void,
    sendcount: impl Wide,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const impl Wide,
    displs: *const impl Wide,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (sendcount, _) = rooted_counts(call, &c, root, sendbuf, ("sendcount", sendcount), ("", 0))?;
    let (mut io, counts, ds) = gatherv_io(
        call, &c, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root,
    )?;
    let r = match &io.send {
        None => c.igatherv_in_place(&mut io.buf, &counts, &ds, root)?,
        Some(sv) => c.igatherv(sv, &mut io.buf, &counts, &ds, root)?,
    };
    out(call, comm, r, request)
}
/// As [`rooted_counts`], for the scatters (`MPI_IN_PLACE` is `recvbuf`).
fn scatter_counts(
    call: &str,
    c: &Communicator,
    root: c_int,
    recvbuf: *mut c_void,
    send: (&str, impl Wide),
    recv: (&str, impl Wide),
) -> Result<(c_int, c_int), Error> {
    if idle(c, root) {
        return Ok((0, 0));
    }
    let s = if is_root(c, root) {
        int(call, send.0, send.1)?
    } else {
        0
    };
    let r = if ptr::in_place(recvbuf) || (c.is_inter() && is_root(c, root)) {
        0
    } else {
        int(call, recv.0, recv.1)?
    };
    Ok((s, r))
}
#[allow(clippy::too_many_arguments)]
fn scatter(
    call: &str,
    sendbuf: *const c_void,
    sendcount: impl Wide,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: impl Wide,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (sendcount, recvcount) = scatter_counts(
        call,
        &c,
        root,
        recvbuf,
        ("sendcount", sendcount),
        ("recvcount", recvcount),
    )?;
    let mut io = scatter_io(
        call, &c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
    )?;
    match &io.send {
        None => c.scatter_in_place(&mut io.buf, root),
        Some(sv) => c.scatter(sv, &mut io.buf, root),
    }
}
#[allow(clippy::too_many_arguments)]
fn iscatter(
    call: &str,
    sendbuf: *const c_void,
    sendcount: impl Wide,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: impl Wide,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (sendcount, recvcount) = scatter_counts(
        call,
        &c,
        root,
        recvbuf,
        ("sendcount", sendcount),
        ("recvcount", recvcount),
    )?;
    let mut io = scatter_io(
        call, &c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
    )?;
    let r = match &io.send {
        None => c.iscatter_in_place(&mut io.buf, root)?,
        Some(sv) => c.iscatter(sv, &mut io.buf, root)?,
    };
    out(call, comm, r, request)
}
#[allow(clippy::too_many_arguments)]
fn scatterv(
    call: &str,
    sendbuf: *const c_void,
    sendcounts: *const impl Wide,
    displs: *const impl Wide,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: impl Wide,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (_, recvcount) =
        scatter_counts(call, &c, root, recvbuf, ("", 0), ("recvcount", recvcount))?;
    let (mut io, counts, ds) = scatterv_io(
        call, &c, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root,
    )?;
    match &io.send {
        None => c.scatterv_in_place(&mut io.buf, &counts, &ds, root),
        Some(sv) => c.scatterv(sv, &counts, &ds, &mut io.buf, root),
    }
}
#[allow(clippy::too_many_arguments)]
fn iscatterv(
    call: &str,
    sendbuf: *const c_void,
    sendcounts: *const impl Wide,
    displs: *const impl Wide,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: impl Wide,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (_, recvcount) =
        scatter_counts(call, &c, root, recvbuf, ("", 0), ("recvcount", recvcount))?;
    let (mut io, counts, ds) = scatterv_io(
        call, &c, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root,
    )?;
    let r = match &io.send {
        None => c.iscatterv_in_place(&mut io.buf, &counts, &ds, root)?,
        Some(sv) => c.iscatterv(sv, &counts, &ds, &mut io.buf, root)?,
    };
    out(call, comm, r, request)
}
/// The scalar counts of an allgather or alltoall (`sendcount` is not
/// significant in place).
fn all_counts(
    call: &str,
    sendbuf: *const c_void,
    sendcount: impl Wide,
    recvcount: impl Wide,
) -> Result<(c_int, c_int), Error> {
    let s = if ptr::in_place(sendbuf) {
        0
    } else {
        int(call, "sendcount", sendcount)?
    };
    Ok((s, int(call, "recvcount", recvcount)?))
}
/// `MPI_Allgather` (`alltoall` false) and `MPI_Alltoall`.
#[allow(clippy::too_many_arguments)]
fn allgather_alltoall(
    call: &str,
    sendbuf: *const c_void,
    sendcount: impl Wide,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: impl Wide,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    alltoall: bool,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (sendcount, recvcount) = all_counts(call, sendbuf, sendcount, recvcount)?;
    let blocks = if alltoall { peers(&c) } else { 1 };
    let mut io = all_io(
        call, &c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, blocks,
    )?;
    match (&io.send, alltoall) {
        (None, false) => c.allgather_in_place(&mut io.buf),
        (Some(sv), false) => c.allgather(sv, &mut io.buf),
        (None, true) => c.alltoall_in_place(&mut io.buf),
        (Some(sv), true) => c.alltoall(sv, &mut io.buf),
    }
}
/// `MPI_Iallgather` (`alltoall` false) and `MPI_Ialltoall`.
#[allow(clippy::too_many_arguments)]
fn iallgather_alltoall(
    call: &str,
    sendbuf: *const c_void,
    sendcount: impl Wide,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: impl Wide,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    alltoall: bool,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (sendcount, recvcount) = all_counts(call, sendbuf, sendcount, recvcount)?;
    let blocks = if alltoall { peers(&c) } else { 1 };
    let mut io = all_io(
        call, &c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, blocks,
    )?;
    let r = match (&io.send, alltoall) {
        (None, false) => c.iallgather_in_place(&mut io.buf)?,
        (Some(sv), false) => c.iallgather(sv, &mut io.buf)?,
        (None, true) => c.ialltoall_in_place(&mut io.buf)?,
        (Some(sv), true) => c.ialltoall(sv, &mut io.buf)?,
    };
    out(call, comm, r, request)
}
#[allow(clippy::too_many_arguments)]
fn allgatherv(
    call: &str,
    sendbuf: *const c_void,
    sendcount: impl Wide,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const impl Wide,
    displs: *const impl Wide,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (sendcount, _) = all_counts(call, sendbuf, sendcount, 0)?;
    let (mut io, counts, ds) = allgatherv_io(
        call, &c, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
    )?;
    match &io.send {
        None => c.allgatherv_in_place(&mut io.buf, &counts, &ds),
        Some(sv) => c.allgatherv(sv, &mut io.buf, &counts, &ds),
    }
}
#[allow(clippy::too_many_arguments)]
fn iallgatherv(
    call: &str,
    sendbuf: *const c_void,
    sendcount: impl Wide,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const impl Wide,
    displs: *const impl Wide,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (sendcount, _) = all_counts(call, sendbuf, sendcount, 0)?;
    let (mut io, counts, ds) = allgatherv_io(
        call, &c, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
    )?;
    let r = match &io.send {
        None => c.iallgatherv_in_place(&mut io.buf, &counts, &ds)?,
        Some(sv) => c.iallgatherv(sv, &mut io.buf, &counts, &ds)?,
    };
    out(call, comm, r, request)
}
#[allow(clippy::too_many_arguments)]
fn alltoallv<C: Wide, D: Wide>(
    call: &str,
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (mut io, a) = alltoallv_io(
        call, &c, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
    )?;
    match &io.send {
        None => c.alltoallv_in_place(&mut io.buf, &a.rc, &a.rd),
        Some(sv) => c.alltoallv(sv, &a.sc, &a.sd, &mut io.buf, &a.rc, &a.rd),
    }
}
#[allow(clippy::too_many_arguments)]
fn ialltoallv<C: Wide, D: Wide>(
    call: &str,
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (mut io, a) = alltoallv_io(
        call, &c, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
    )?;
    let r = match &io.send {
        None => c.ialltoallv_in_place(&mut io.buf, &a.rc, &a.rd)?,
        Some(sv) => c.ialltoallv(sv, &a.sc, &a.sd, &mut io.buf, &a.rc, &a.rd)?,
    };
    out(call, comm, r, request)
}
#[allow(clippy::too_many_arguments)]
fn alltoallw<C: Wide, D: Wide>(
    call: &str,
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (mut io, s, r) = alltoallw_io(
        call, &c, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
    )?;
    match &io.send {
        None => c.alltoallw_in_place(&mut io.buf, &r.counts, &r.displs, &r.types),
        Some(sv) => c.alltoallw(
            sv,
            &s.counts,
            &s.displs,
            &s.types,
            &mut io.buf,
            &r.counts,
            &r.displs,
            &r.types,
        ),
    }
}
#[allow(clippy::too_many_arguments)]
fn ialltoallw<C: Wide, D: Wide>(
    call: &str,
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let (mut io, s, rw) = alltoallw_io(
        call, &c, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
    )?;
    let r = match &io.send {
        None => c.ialltoallw_in_place(&mut io.buf, &rw.counts, &rw.displs, &rw.types)?,
        Some(sv) => c.ialltoallw(
            sv,
            &s.counts,
            &s.displs,
            &s.types,
            &mut io.buf,
            &rw.counts,
            &rw.displs,
            &rw.types,
        )?,
    };
    out(call, comm, r, request)
}
fn reduce_scatter_block(
    call: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: impl Wide,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let o = op_for(call, op, datatype)?;
    let mut io = reduce_scatter_block_io(
        call,
        &c,
        sendbuf,
        recvbuf,
        int(call, "recvcount", recvcount)?,
        datatype,
    )?;
    match &io.send {
        None => c.reduce_scatter_block_in_place(&mut io.buf, o),
        Some(sv) => c.reduce_scatter_block(sv, &mut io.buf, o),
    }
}
#[allow(clippy::too_many_arguments)]
fn ireduce_scatter_block(
    call: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: impl Wide,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let o = op_for(call, op, datatype)?;
    let mut io = reduce_scatter_block_io(
        call,
        &c,
        sendbuf,
        recvbuf,
        int(call, "recvcount", recvcount)?,
        datatype,
    )?;
    let r = match &io.send {
        None => c.ireduce_scatter_block_in_place(&mut io.buf, o)?,
        Some(sv) => c.ireduce_scatter_block(sv, &mut io.buf, o)?,
    };
    out(call, comm, r, request)
}
fn reduce_scatter(
    call: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const impl Wide,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let o = op_for(call, op, datatype)?;
    let (mut io, counts) = reduce_scatter_io(call, &c, sendbuf, recvbuf, recvcounts, datatype)?;
    match &io.send {
        None => c.reduce_scatter_in_place(&mut io.buf, &counts, o),
        Some(sv) => c.reduce_scatter(sv, &mut io.buf, &counts, o),
    }
}
#[allow(clippy::too_many_arguments)]
fn ireduce_scatter(
    call: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const impl Wide,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let o = op_for(call, op, datatype)?;
    let (mut io, counts) = reduce_scatter_io(call, &c, sendbuf, recvbuf, recvcounts, datatype)?;
    let r = match &io.send {
        None => c.ireduce_scatter_in_place(&mut io.buf, &counts, o)?,
        Some(sv) => c.ireduce_scatter(sv, &mut io.buf, &counts, o)?,
    };
    out(call, comm, r, request)
}
/// `MPI_Scan` (`ex` false) and `MPI_Exscan`.
#[allow(clippy::too_many_arguments)]
fn scan(
    call: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: impl Wide,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    ex: bool,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let o = op_for(call, op, datatype)?;
    let mut io = same_io(call, sendbuf, recvbuf, int(call, "count", count)?, datatype)?;
    match (&io.send, ex) {
        (None, false) => c.scan_in_place(&mut io.buf, o),
        (Some(sv), false) => c.scan(sv, &mut io.buf, o),
        (None, true) => c.exscan_in_place(&mut io.buf, o),
        (Some(sv), true) => c.exscan(sv, &mut io.buf, o),
    }
}
/// `MPI_Iscan` (`ex` false) and `MPI_Iexscan`.
#[allow(clippy::too_many_arguments)]
fn iscan(
    call: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: impl Wide,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    ex: bool,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let o = op_for(call, op, datatype)?;
    let mut io = same_io(call, sendbuf, recvbuf, int(call, "count", count)?, datatype)?;
    let r = match (&io.send, ex) {
        (None, false) => c.iscan_in_place(&mut io.buf, o)?,
        (Some(sv), false) => c.iscan(sv, &mut io.buf, o)?,
        (None, true) => c.iexscan_in_place(&mut io.buf, o)?,
        (Some(sv), true) => c.iexscan(sv, &mut io.buf, o)?,
    };
    out(call, comm, r, request)
}

/// `MPI_Op_create(_c)`.
fn op_create(
    call: &str,
    f: Option<UserOpFn>,
    commute: c_int,
    op: *mut MPI_Op,
) -> Result<(), Error> {
    let Some(f) = f else {
        return Err(err(ErrorClass::Arg, call, "user_fn is NULL"));
    };
    if op.is_null() {
        return Err(err(ErrorClass::Arg, call, "op is NULL"));
    }
    let h = encode(
        Kind::Op,
        state().ops.insert(OpObj {
            f,
            commutative: commute != 0,
        }),
    );
    ptr::write(call, "op", op, h)
}

mpi_fn! {
    safe fn Barrier(comm: MPI_Comm) {
        resolve::comm(CALL, comm)?.barrier()
    }
    fn Ibarrier(comm: MPI_Comm, request: *mut MPI_Request) {
        let c = resolve::comm(CALL, comm)?;
        let r = c.ibarrier()?;
        out(CALL, comm, r, request)
    }
    fn Bcast(buffer: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm) fast {
        bcast_fast(CALL, buffer, count, datatype, root, comm)
    } {
        bcast(CALL, buffer, count, datatype, root, comm)
    }
    fn Ibcast(buffer: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        ibcast(CALL, buffer, count, datatype, root, comm, request)
    }
    fn Reduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm) fast {
        reduce_fast(CALL, sendbuf, recvbuf, count, datatype, op, root, comm)
    } {
        reduce(CALL, sendbuf, recvbuf, count, datatype, op, root, comm)
    }
    fn Ireduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        ireduce(CALL, sendbuf, recvbuf, count, datatype, op, root, comm, request)
    }
    fn Allreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) fast {
        allreduce_fast(CALL, sendbuf, recvbuf, count, datatype, op, comm)
    } {
        allreduce(CALL, sendbuf, recvbuf, count, datatype, op, comm)
    }
    fn Iallreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request) fast {
        iallreduce_fast(CALL, sendbuf, recvbuf, count, datatype, op, comm, request)
    } {
        iallreduce(CALL, sendbuf, recvbuf, count, datatype, op, comm, request)
    }
    fn Reduce_local(inbuf: *const c_void, inoutbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op) {
        reduce_local(CALL, inbuf, inoutbuf, count, datatype, op)
    }
    fn Gather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) fast {
        rooted_fast(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, false)
    } {
        gather(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)
    }
    fn Igather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        igather(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
    }
    fn Gatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) fast {
        gatherv_fast(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm)
    } {
        gatherv(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm)
    }
    fn Igatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        igatherv(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, request)
    }
    fn Scatter(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) fast {
        rooted_fast(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, true)
    } {
        scatter(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)
    }
    fn Iscatter(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        iscatter(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
    }
    fn Scatterv(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) fast {
        scatterv_fast(CALL, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm)
    } {
        scatterv(CALL, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm)
    }
    fn Iscatterv(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        iscatterv(CALL, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
    }
    fn Allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm) fast {
        all_fast(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, false)
    } {
        allgather_alltoall(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, false)
    }
    fn Iallgather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        iallgather_alltoall(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, false, request)
    }
    fn Allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm) fast {
        allgatherv_fast(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm)
    } {
        allgatherv(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm)
    }
    fn Iallgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        iallgatherv(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, request)
    }
    fn Alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm) fast {
        all_fast(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, true)
    } {
        allgather_alltoall(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, true)
    }
    fn Ialltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        iallgather_alltoall(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, true, request)
    }
    fn Alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm) fast {
        alltoallv_fast(CALL, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)
    } {
        alltoallv(CALL, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)
    }
    fn Ialltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        ialltoallv(CALL, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request)
    }
    fn Alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const MPI_Datatype, comm: MPI_Comm) {
        alltoallw(CALL, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)
    }
    fn Ialltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        ialltoallw(CALL, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, request)
    }
    fn Reduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) fast {
        reduce_scatter_block_fast(CALL, sendbuf, recvbuf, recvcount, datatype, op, comm)
    } {
        reduce_scatter_block(CALL, sendbuf, recvbuf, recvcount, datatype, op, comm)
    }
    fn Ireduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request) {
        ireduce_scatter_block(CALL, sendbuf, recvbuf, recvcount, datatype, op, comm, request)
    }
    fn Reduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        reduce_scatter(CALL, sendbuf, recvbuf, recvcounts, datatype, op, comm)
    }
    fn Ireduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request) {
        ireduce_scatter(CALL, sendbuf, recvbuf, recvcounts, datatype, op, comm, request)
    }
    fn Scan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        scan(CALL, sendbuf, recvbuf, count, datatype, op, comm, false)
    }
    fn Iscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request) {
        iscan(CALL, sendbuf, recvbuf, count, datatype, op, comm, false, request)
    }
    fn Exscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        scan(CALL, sendbuf, recvbuf, count, datatype, op, comm, true)
    }
    fn Iexscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request) {
        iscan(CALL, sendbuf, recvbuf, count, datatype, op, comm, true, request)
    }
    // The large-count (`MPI_Count`) twins.
    fn Bcast_c(buffer: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm) {
        bcast(CALL, buffer, count, datatype, root, comm)
    }
    fn Ibcast_c(buffer: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        ibcast(CALL, buffer, count, datatype, root, comm, request)
    }
    fn Reduce_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm) {
        reduce(CALL, sendbuf, recvbuf, count, datatype, op, root, comm)
    }
    fn Ireduce_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        ireduce(CALL, sendbuf, recvbuf, count, datatype, op, root, comm, request)
    }
    fn Allreduce_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        allreduce(CALL, sendbuf, recvbuf, count, datatype, op, comm)
    }
    fn Iallreduce_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request) {
        iallreduce(CALL, sendbuf, recvbuf, count, datatype, op, comm, request)
    }
    fn Reduce_local_c(inbuf: *const c_void, inoutbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op) {
        reduce_local(CALL, inbuf, inoutbuf, count, datatype, op)
    }
    fn Gather_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) {
        gather(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)
    }
    fn Igather_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        igather(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
    }
    fn Gatherv_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, displs: *const MPI_Aint, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) {
        gatherv(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm)
    }
    fn Igatherv_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, displs: *const MPI_Aint, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        igatherv(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, request)
    }
    fn Scatter_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) {
        scatter(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)
    }
    fn Iscatter_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        iscatter(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
    }
    fn Scatterv_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, displs: *const MPI_Aint, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) {
        scatterv(CALL, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm)
    }
    fn Iscatterv_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, displs: *const MPI_Aint, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        iscatterv(CALL, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
    }
    fn Allgather_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm) {
        allgather_alltoall(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, false)
    }
    fn Iallgather_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        iallgather_alltoall(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, false, request)
    }
    fn Allgatherv_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, displs: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm) {
        allgatherv(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm)
    }
    fn Iallgatherv_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, displs: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        iallgatherv(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, request)
    }
    fn Alltoall_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm) {
        allgather_alltoall(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, true)
    }
    fn Ialltoall_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        iallgather_alltoall(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, true, request)
    }
    fn Alltoallv_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm) {
        alltoallv(CALL, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)
    }
    fn Ialltoallv_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        ialltoallv(CALL, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request)
    }
    fn Alltoallw_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm) {
        alltoallw(CALL, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)
    }
    fn Ialltoallw_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        ialltoallw(CALL, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, request)
    }
    fn Reduce_scatter_block_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        reduce_scatter_block(CALL, sendbuf, recvbuf, recvcount, datatype, op, comm)
    }
    fn Ireduce_scatter_block_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request) {
        ireduce_scatter_block(CALL, sendbuf, recvbuf, recvcount, datatype, op, comm, request)
    }
    fn Reduce_scatter_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        reduce_scatter(CALL, sendbuf, recvbuf, recvcounts, datatype, op, comm)
    }
    fn Ireduce_scatter_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request) {
        ireduce_scatter(CALL, sendbuf, recvbuf, recvcounts, datatype, op, comm, request)
    }
    fn Scan_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        scan(CALL, sendbuf, recvbuf, count, datatype, op, comm, false)
    }
    fn Iscan_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request) {
        iscan(CALL, sendbuf, recvbuf, count, datatype, op, comm, false, request)
    }
    fn Exscan_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) {
        scan(CALL, sendbuf, recvbuf, count, datatype, op, comm, true)
    }
    fn Iexscan_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: *mut MPI_Request) {
        iscan(CALL, sendbuf, recvbuf, count, datatype, op, comm, true, request)
    }
    fn Op_create(user_fn: Option<UserFn>, commute: c_int, op: *mut MPI_Op) {
        op_create(CALL, user_fn.map(UserOpFn::Int), commute, op)
    }
    fn Op_create_c(user_fn: Option<UserFnC>, commute: c_int, op: *mut MPI_Op) {
        op_create(CALL, user_fn.map(UserOpFn::Large), commute, op)
    }
    fn Op_free(op: *mut MPI_Op) {
        let h = ptr::read(CALL, "op", op)?;
        let Some(i) = decode(Kind::Op, h) else {
            return Err(err(ErrorClass::Op, CALL, format!("op = {h:#x} is not a user-defined operation (predefined operations cannot be freed)")));
        };
        if state().ops.remove(i).is_none() {
            return Err(err(ErrorClass::Op, CALL, format!("op = {h:#x} is not a valid operation")));
        }
        ptr::write(CALL, "op", op, MPI_OP_NULL)
    }
    fn Op_commutative(op: MPI_Op, commute: *mut c_int) {
        let c = match resolve::user_op(op) {
            Some(o) => o.commutative,
            None => {
                // Predefined: every one is commutative.
                resolve::op(CALL, op, MPI_BYTE, &*resolve::dtype(CALL, MPI_BYTE)?)?;
                true
            }
        };
        ptr::write(CALL, "commute", commute, c as c_int)
    }
}

// ---- persistent collectives (MPI 4.0) ----
//
// `MPI_<Coll>_init` records the non-blocking collective with its arguments;
// each `MPI_Start` runs it again (buffers and count arrays are read then).

mpi_fn! {
    fn Barrier_init(comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let c = resolve::comm(call, comm)?;
            let r = c.ibarrier()?;
            out(call, comm, r, request)
        }))
    }
    fn Bcast_init(buffer: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (buffer,) = (buffer as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (buffer,) = (buffer as *mut c_void,);
            ibcast(call, buffer, count, datatype, root, comm, request)
        }))
    }
    fn Reduce_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        // The operation fits the datatype (everything else is checked at
        // each start, when the buffers are read).
        op_for(CALL, op, datatype)?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            ireduce(call, sendbuf, recvbuf, count, datatype, op, root, comm, request)
        }))
    }
    fn Allreduce_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        // The operation fits the datatype (everything else is checked at
        // each start, when the buffers are read).
        op_for(CALL, op, datatype)?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            iallreduce(call, sendbuf, recvbuf, count, datatype, op, comm, request)
        }))
    }
    fn Gather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            igather(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
        }))
    }
    fn Gatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let c_ = resolve::comm(CALL, comm)?;
        let n_ = peers(&c_) as usize;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, is_root(&c_, root).then_some(n_))?;
        let displs = Snap::take(CALL, "displs", displs, is_root(&c_, root).then_some(n_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let recvcounts = recvcounts.ptr();
            let displs = displs.ptr();
            igatherv(call, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, request)
        }))
    }
    fn Scatter_init(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            iscatter(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
        }))
    }
    fn Scatterv_init(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let c_ = resolve::comm(CALL, comm)?;
        let n_ = peers(&c_) as usize;
        let sendcounts = Snap::take(CALL, "sendcounts", sendcounts, is_root(&c_, root).then_some(n_))?;
        let displs = Snap::take(CALL, "displs", displs, is_root(&c_, root).then_some(n_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let sendcounts = sendcounts.ptr();
            let displs = displs.ptr();
            iscatterv(call, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
        }))
    }
    fn Allgather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            iallgather_alltoall(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, false, request)
        }))
    }
    fn Allgatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let c_ = resolve::comm(CALL, comm)?;
        let n_ = peers(&c_) as usize;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(n_))?;
        let displs = Snap::take(CALL, "displs", displs, Some(n_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let recvcounts = recvcounts.ptr();
            let displs = displs.ptr();
            iallgatherv(call, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, request)
        }))
    }
    fn Alltoall_init(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            iallgather_alltoall(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, true, request)
        }))
    }
    fn Alltoallv_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let c_ = resolve::comm(CALL, comm)?;
        let n_ = peers(&c_) as usize;
        let sendcounts = Snap::take(CALL, "sendcounts", sendcounts, (!ptr::in_place(sendbuf)).then_some(n_))?;
        let sdispls = Snap::take(CALL, "sdispls", sdispls, (!ptr::in_place(sendbuf)).then_some(n_))?;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(n_))?;
        let rdispls = Snap::take(CALL, "rdispls", rdispls, Some(n_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let sendcounts = sendcounts.ptr();
            let sdispls = sdispls.ptr();
            let recvcounts = recvcounts.ptr();
            let rdispls = rdispls.ptr();
            ialltoallv(call, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request)
        }))
    }
    fn Alltoallw_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let c_ = resolve::comm(CALL, comm)?;
        let n_ = peers(&c_) as usize;
        let sendcounts = Snap::take(CALL, "sendcounts", sendcounts, (!ptr::in_place(sendbuf)).then_some(n_))?;
        let sdispls = Snap::take(CALL, "sdispls", sdispls, (!ptr::in_place(sendbuf)).then_some(n_))?;
        let sendtypes = Snap::take(CALL, "sendtypes", sendtypes, (!ptr::in_place(sendbuf)).then_some(n_))?;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(n_))?;
        let rdispls = Snap::take(CALL, "rdispls", rdispls, Some(n_))?;
        let recvtypes = Snap::take(CALL, "recvtypes", recvtypes, Some(n_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let sendcounts = sendcounts.ptr();
            let sdispls = sdispls.ptr();
            let sendtypes = sendtypes.ptr();
            let recvcounts = recvcounts.ptr();
            let rdispls = rdispls.ptr();
            let recvtypes = recvtypes.ptr();
            ialltoallw(call, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, request)
        }))
    }
    fn Reduce_scatter_block_init(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        // The operation fits the datatype (everything else is checked at
        // each start, when the buffers are read).
        op_for(CALL, op, datatype)?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            ireduce_scatter_block(call, sendbuf, recvbuf, recvcount, datatype, op, comm, request)
        }))
    }
    fn Reduce_scatter_init(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        // The operation fits the datatype (everything else is checked at
        // each start, when the buffers are read).
        op_for(CALL, op, datatype)?;
        let c_ = resolve::comm(CALL, comm)?;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(c_.size() as usize))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let recvcounts = recvcounts.ptr();
            ireduce_scatter(call, sendbuf, recvbuf, recvcounts, datatype, op, comm, request)
        }))
    }
    fn Scan_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        // The operation fits the datatype (everything else is checked at
        // each start, when the buffers are read).
        op_for(CALL, op, datatype)?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            iscan(call, sendbuf, recvbuf, count, datatype, op, comm, false, request)
        }))
    }
    fn Exscan_init(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        // The operation fits the datatype (everything else is checked at
        // each start, when the buffers are read).
        op_for(CALL, op, datatype)?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            iscan(call, sendbuf, recvbuf, count, datatype, op, comm, true, request)
        }))
    }
    fn Bcast_init_c(buffer: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (buffer,) = (buffer as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (buffer,) = (buffer as *mut c_void,);
            ibcast(call, buffer, count, datatype, root, comm, request)
        }))
    }
    fn Reduce_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        // The operation fits the datatype (everything else is checked at
        // each start, when the buffers are read).
        op_for(CALL, op, datatype)?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            ireduce(call, sendbuf, recvbuf, count, datatype, op, root, comm, request)
        }))
    }
    fn Allreduce_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        // The operation fits the datatype (everything else is checked at
        // each start, when the buffers are read).
        op_for(CALL, op, datatype)?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            iallreduce(call, sendbuf, recvbuf, count, datatype, op, comm, request)
        }))
    }
    fn Gather_init_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            igather(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
        }))
    }
    fn Gatherv_init_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, displs: *const MPI_Aint, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let c_ = resolve::comm(CALL, comm)?;
        let n_ = peers(&c_) as usize;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, is_root(&c_, root).then_some(n_))?;
        let displs = Snap::take(CALL, "displs", displs, is_root(&c_, root).then_some(n_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let recvcounts = recvcounts.ptr();
            let displs = displs.ptr();
            igatherv(call, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, request)
        }))
    }
    fn Scatter_init_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            iscatter(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
        }))
    }
    fn Scatterv_init_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, displs: *const MPI_Aint, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let c_ = resolve::comm(CALL, comm)?;
        let n_ = peers(&c_) as usize;
        let sendcounts = Snap::take(CALL, "sendcounts", sendcounts, is_root(&c_, root).then_some(n_))?;
        let displs = Snap::take(CALL, "displs", displs, is_root(&c_, root).then_some(n_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let sendcounts = sendcounts.ptr();
            let displs = displs.ptr();
            iscatterv(call, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, request)
        }))
    }
    fn Allgather_init_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            iallgather_alltoall(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, false, request)
        }))
    }
    fn Allgatherv_init_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, displs: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let c_ = resolve::comm(CALL, comm)?;
        let n_ = peers(&c_) as usize;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(n_))?;
        let displs = Snap::take(CALL, "displs", displs, Some(n_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let recvcounts = recvcounts.ptr();
            let displs = displs.ptr();
            iallgatherv(call, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, request)
        }))
    }
    fn Alltoall_init_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            iallgather_alltoall(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, true, request)
        }))
    }
    fn Alltoallv_init_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let c_ = resolve::comm(CALL, comm)?;
        let n_ = peers(&c_) as usize;
        let sendcounts = Snap::take(CALL, "sendcounts", sendcounts, (!ptr::in_place(sendbuf)).then_some(n_))?;
        let sdispls = Snap::take(CALL, "sdispls", sdispls, (!ptr::in_place(sendbuf)).then_some(n_))?;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(n_))?;
        let rdispls = Snap::take(CALL, "rdispls", rdispls, Some(n_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let sendcounts = sendcounts.ptr();
            let sdispls = sdispls.ptr();
            let recvcounts = recvcounts.ptr();
            let rdispls = rdispls.ptr();
            ialltoallv(call, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request)
        }))
    }
    fn Alltoallw_init_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let c_ = resolve::comm(CALL, comm)?;
        let n_ = peers(&c_) as usize;
        let sendcounts = Snap::take(CALL, "sendcounts", sendcounts, (!ptr::in_place(sendbuf)).then_some(n_))?;
        let sdispls = Snap::take(CALL, "sdispls", sdispls, (!ptr::in_place(sendbuf)).then_some(n_))?;
        let sendtypes = Snap::take(CALL, "sendtypes", sendtypes, (!ptr::in_place(sendbuf)).then_some(n_))?;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(n_))?;
        let rdispls = Snap::take(CALL, "rdispls", rdispls, Some(n_))?;
        let recvtypes = Snap::take(CALL, "recvtypes", recvtypes, Some(n_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let sendcounts = sendcounts.ptr();
            let sdispls = sdispls.ptr();
            let sendtypes = sendtypes.ptr();
            let recvcounts = recvcounts.ptr();
            let rdispls = rdispls.ptr();
            let recvtypes = recvtypes.ptr();
            ialltoallw(call, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, request)
        }))
    }
    fn Reduce_scatter_block_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        // The operation fits the datatype (everything else is checked at
        // each start, when the buffers are read).
        op_for(CALL, op, datatype)?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            ireduce_scatter_block(call, sendbuf, recvbuf, recvcount, datatype, op, comm, request)
        }))
    }
    fn Reduce_scatter_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        // The operation fits the datatype (everything else is checked at
        // each start, when the buffers are read).
        op_for(CALL, op, datatype)?;
        let c_ = resolve::comm(CALL, comm)?;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(c_.size() as usize))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let recvcounts = recvcounts.ptr();
            ireduce_scatter(call, sendbuf, recvbuf, recvcounts, datatype, op, comm, request)
        }))
    }
    fn Scan_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        // The operation fits the datatype (everything else is checked at
        // each start, when the buffers are read).
        op_for(CALL, op, datatype)?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            iscan(call, sendbuf, recvbuf, count, datatype, op, comm, false, request)
        }))
    }
    fn Exscan_init_c(sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        // The operation fits the datatype (everything else is checked at
        // each start, when the buffers are read).
        op_for(CALL, op, datatype)?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            iscan(call, sendbuf, recvbuf, count, datatype, op, comm, true, request)
        }))
    }

}
