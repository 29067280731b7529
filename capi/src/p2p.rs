//! Point-to-point: sends and receives in every mode, requests and their
//! completion calls, statuses, persistent requests, buffered sends, probes
//! and matched probes.
//!
//! A request handle names a slot of the request table (what a slot holds:
//! [`ReqObj`]). A request being waited on or tested is taken out of its
//! slot (left `Busy`) while the runtime runs, so callbacks may use the
//! tables meanwhile. `MPI_Waitall`
//! (and a `MPI_Testall` that finds all ready) takes all its requests out
//! under one lock and waits for them together ([`gmpi::wait_set`]); a send
//! that completed when it started has the shared handle [`SENT`], which
//! names no slot, and the other sends and receives of the hot paths have
//! direct handles (`tables::direct`): their pml id, no slot, no lock.

use std::ffi::{c_int, c_void};

use gmpi::{Communicator, Error, ErrorClass, Request, View};

use crate::abi::*;
use crate::errors;
use crate::frame;
use crate::ptr;
use crate::resolve;
use crate::tables::*;

/// Hand out the request of a send: [`SENT`] if it already completed.
fn out_send_req(
    call: &str,
    request: *mut MPI_Request,
    r: Request<'_>,
    comm: MPI_Comm,
) -> Result<(), Error> {
    if r.is_complete() && !request.is_null() {
        return ptr::write(call, "request", request, SENT);
    }
    out_direct(call, request, ptr::detach_req(r), comm, true)
}

/// Hand out the request of a send (`send`) or receive just started on
/// `comm`: a direct handle where it can have one, else a table slot.
#[inline]
fn out_direct(
    call: &str,
    request: *mut MPI_Request,
    r: Request<'static>,
    comm: MPI_Comm,
    send: bool,
) -> Result<(), Error> {
    if request.is_null() {
        return out_req(call, request, Active::new(r, comm));
    }
    match direct::register(r, comm, send) {
        Ok(h) => ptr::write(call, "request", request, h),
        Err(r) => out_req(call, request, Active::new(r, comm)),
    }
}

/// Hand out the request of a send (`send`) or receive just started on
/// `comm` whose pml id is `raw`, to the non-NULL `request`: a direct
/// handle where it can have one, else a table slot.
#[inline]
fn out_raw(
    call: &'static str,
    request: *mut MPI_Request,
    raw: u64,
    comm: MPI_Comm,
    send: bool,
) -> Result<(), Error> {
    match direct::register_raw(raw, comm, send) {
        Some(h) => ptr::write(call, "request", request, h),
        None => out_req(
            call,
            request,
            Active::new(Request::from_raw(raw, call), comm),
        ),
    }
}

// ---- buffered sends ----

/// A view's data, packed, for `call` on `c` (an error if a copy out of
/// device memory fails).
fn gmpi_packed(call: &str, c: &Communicator, v: &View) -> Result<Vec<u8>, Error> {
    let n = v.packed_size();
    let mut out = vec![0u8; n];
    v.pack_to(call, c.rank(), &mut out)?;
    Ok(out)
}

// ---- sends and receives ----

pub(crate) fn send_view(
    call: &str,
    buf: *const c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
) -> Result<View, Error> {
    let t = resolve::dtype(call, dt)?;
    ptr::buf(call, "buf", buf, count, &t, false)
}

pub(crate) fn recv_view(
    call: &str,
    buf: *mut c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
) -> Result<View, Error> {
    let t = resolve::dtype(call, dt)?;
    ptr::buf(call, "buf", buf, count, &t, true)
}

fn blocking_send(
    call: &'static str,
    buf: *const c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    mode: Mode,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let v = send_view(call, buf, count, dt)?;
    match mode {
        Mode::Standard | Mode::Ready => c.send(&v, dest, tag),
        Mode::Sync => c.ssend(&v, dest, tag),
        Mode::Buffered if dest != MPI_PROC_NULL => {
            crate::bsend::bsend(call, comm, &c, &v, dest, tag)
        }
        Mode::Buffered => c.send(&v, dest, tag),
    }
}

fn nonblocking_send(
    call: &'static str,
    buf: *const c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    mode: Mode,
) -> Result<Active, Error> {
    let c = resolve::comm(call, comm)?;
    let v = send_view(call, buf, count, dt)?;
    if mode == Mode::Buffered && dest != MPI_PROC_NULL {
        // Complete as soon as the data is copied: the request is that of a
        // send to MPI_PROC_NULL, which completes at once.
        crate::bsend::bsend(call, comm, &c, &v, dest, tag)?;
        let done = c.isend(&[0u8; 0][..], MPI_PROC_NULL, tag)?;
        return Ok(Active::new(done, comm));
    }
    let r = match mode {
        Mode::Sync => c.issend(&v, dest, tag)?,
        _ => c.isend(&v, dest, tag)?,
    };
    Ok(Active::new(ptr::detach_req(r), comm))
}

fn nonblocking_recv(
    call: &'static str,
    buf: *mut c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> Result<Active, Error> {
    let c = resolve::comm(call, comm)?;
    let mut v = recv_view(call, buf, count, dt)?;
    let r = c.irecv(&mut v, src, tag)?;
    Ok(Active::new(ptr::detach_req(r), comm))
}

#[inline]
fn out_req(call: &str, request: *mut MPI_Request, a: Active) -> Result<(), Error> {
    if request.is_null() {
        // Complete it rather than leak an operation nobody can wait for.
        a.wait()?;
        return Err(err(ErrorClass::Arg, call, "request is NULL"));
    }
    ptr::write(call, "request", request, new_request(a))
}

// ---- the hot paths ----
//
// Sends and receives on `MPI_COMM_WORLD` or `MPI_COMM_SELF` of predefined
// datatypes, with buffers that pass `ptr::buf`'s checks outright, skip the
// look-ups (no lock, no reference count) and go straight to the runtime,
// which checks ranks and tags as on the full path; anything else (`None`
// from `fast_comm`/`fast_buf`, before any effect) takes the full path.

#[inline(always)]
fn send_fast(
    call: &'static str,
    buf: *const c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    mode: Mode,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    let len = ptr::fast_bytes(buf, count, resolve::fast_size(dt)?)?;
    Some(frame::fast(call, comm, || {
        ptr::send_bytes(c, call, buf, len, dest, tag, mode == Mode::Sync)
    }))
}

#[inline(always)]
fn recv_fast(
    call: &'static str,
    buf: *mut c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    let len = ptr::fast_bytes(buf, count, resolve::fast_size(dt)?)?;
    Some(frame::fast(call, comm, || {
        let st = ptr::recv_bytes(c, call, buf, len, src, tag)?;
        let mut s = MPI_Status::empty();
        s.set(&st);
        ptr::status(status, &s);
        Ok(())
    }))
}

#[inline(always)]
fn isend_fast(
    call: &'static str,
    buf: *const c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    mode: Mode,
    request: *mut MPI_Request,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    let len = ptr::fast_bytes(buf, count, resolve::fast_size(dt)?)?;
    let sync = mode == Mode::Sync;
    Some(frame::fast(call, comm, || {
        if request.is_null() {
            let r = ptr::isend_bytes(c, call, buf, len, dest, tag, sync)?;
            return out_send_req(call, request, r, comm);
        }
        match ptr::isend_raw(c, call, buf, len, dest, tag, sync)? {
            None => ptr::write(call, "request", request, SENT),
            Some(raw) => out_raw(call, request, raw, comm, true),
        }
    }))
}

#[inline(always)]
fn irecv_fast(
    call: &'static str,
    buf: *mut c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Option<c_int> {
    let c = resolve::fast_comm(comm)?;
    let len = ptr::fast_bytes(buf, count, resolve::fast_size(dt)?)?;
    Some(frame::fast(call, comm, || {
        if !request.is_null() && src != MPI_PROC_NULL {
            if let Some(raw) = ptr::irecv_raw(c, call, buf, len, src, tag)? {
                return out_raw(call, request, raw, comm, false);
            }
        }
        // A NULL request (an error, after the receive is done) or a
        // receive from MPI_PROC_NULL (complete, with its status).
        let r = ptr::irecv_bytes(c, call, buf, len, src, tag)?;
        out_direct(call, request, r, comm, false)
    }))
}

mpi_fn! {
    fn Send(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) fast {
        send_fast(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Standard)
    } {
        blocking_send(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Standard)
    }
    fn Ssend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) fast {
        send_fast(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Sync)
    } {
        blocking_send(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Sync)
    }
    fn Rsend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) fast {
        send_fast(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Ready)
    } {
        blocking_send(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Ready)
    }
    fn Bsend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) {
        blocking_send(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Buffered)
    }
    fn Isend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) fast {
        isend_fast(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Standard, request)
    } {
        let a = nonblocking_send(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Standard)?;
        out_req(CALL, request, a)
    }
    fn Issend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) fast {
        isend_fast(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Sync, request)
    } {
        let a = nonblocking_send(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Sync)?;
        out_req(CALL, request, a)
    }
    fn Irsend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) fast {
        isend_fast(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Ready, request)
    } {
        let a = nonblocking_send(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Ready)?;
        out_req(CALL, request, a)
    }
    fn Ibsend(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        let a = nonblocking_send(CALL, buf, count.into(), datatype, dest, tag, comm, Mode::Buffered)?;
        out_req(CALL, request, a)
    }
    fn Recv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, status: *mut MPI_Status) fast {
        recv_fast(CALL, buf, count.into(), datatype, source, tag, comm, status)
    } {
        let c = resolve::comm(CALL, comm)?;
        let mut v = recv_view(CALL, buf, count.into(), datatype)?;
        let st = c.recv(&mut v, source, tag)?;
        let mut s = MPI_Status::empty();
        s.set(&st);
        ptr::status(status, &s);
        Ok(())
    }
    fn Irecv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) fast {
        irecv_fast(CALL, buf, count.into(), datatype, source, tag, comm, request)
    } {
        let a = nonblocking_recv(CALL, buf, count.into(), datatype, source, tag, comm)?;
        out_req(CALL, request, a)
    }
    fn Sendrecv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, dest: c_int, sendtag: c_int,
        recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, source: c_int, recvtag: c_int,
        comm: MPI_Comm, status: *mut MPI_Status) {
        sendrecv(CALL, sendbuf, sendcount.into(), sendtype, dest, sendtag, recvbuf, recvcount.into(), recvtype, source, recvtag, comm, status)
    }
    fn Sendrecv_replace(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, sendtag: c_int,
        source: c_int, recvtag: c_int, comm: MPI_Comm, status: *mut MPI_Status) {
        sendrecv_replace(CALL, buf, count.into(), datatype, dest, sendtag, source, recvtag, comm, status)
    }
    fn Probe(source: c_int, tag: c_int, comm: MPI_Comm, status: *mut MPI_Status) {
        let c = resolve::comm(CALL, comm)?;
        let st = c.probe(source, tag)?;
        let mut s = MPI_Status::empty();
        s.set(&st);
        ptr::status(status, &s);
        Ok(())
    }
    fn Iprobe(source: c_int, tag: c_int, comm: MPI_Comm, flag: *mut c_int, status: *mut MPI_Status) {
        let c = resolve::comm(CALL, comm)?;
        if flag.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "flag is NULL"));
        }
        match c.iprobe(source, tag)? {
            Some(st) => {
                let mut s = MPI_Status::empty();
                s.set(&st);
                ptr::status(status, &s);
                ptr::write(CALL, "flag", flag, 1)
            }
            None => ptr::write(CALL, "flag", flag, 0),
        }
    }
    fn Mprobe(source: c_int, tag: c_int, comm: MPI_Comm, message: *mut MPI_Message, status: *mut MPI_Status) {
        let c = resolve::comm(CALL, comm)?;
        let (st, msg) = c.mprobe(source, tag)?;
        let m = message_handle(comm, msg);
        let mut s = MPI_Status::empty();
        s.set(&st);
        ptr::status(status, &s);
        ptr::write(CALL, "message", message, m)
    }
    fn Improbe(source: c_int, tag: c_int, comm: MPI_Comm, flag: *mut c_int, message: *mut MPI_Message, status: *mut MPI_Status) {
        let c = resolve::comm(CALL, comm)?;
        if flag.is_null() || message.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "flag or message is NULL"));
        }
        match c.improbe(source, tag)? {
            Some((st, msg)) => {
                let m = message_handle(comm, msg);
                let mut s = MPI_Status::empty();
                s.set(&st);
                ptr::status(status, &s);
                ptr::write(CALL, "message", message, m)?;
                ptr::write(CALL, "flag", flag, 1)
            }
            None => ptr::write(CALL, "flag", flag, 0),
        }
    }
    fn Mrecv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, message: *mut MPI_Message, status: *mut MPI_Status) {
        let (comm, msg) = take_message(CALL, message)?;
        let mut v = recv_view(CALL, buf, count.into(), datatype)?;
        let c = resolve::comm(CALL, comm)?;
        let st = c.mrecv(msg, &mut v)?;
        let mut s = MPI_Status::empty();
        s.set(&st);
        ptr::status(status, &s);
        Ok(())
    }
    fn Imrecv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, message: *mut MPI_Message, request: *mut MPI_Request) {
        let (comm, msg) = take_message(CALL, message)?;
        let mut v = recv_view(CALL, buf, count.into(), datatype)?;
        let c = resolve::comm(CALL, comm)?;
        let r = c.imrecv(msg, &mut v)?;
        out_req(CALL, request, Active::new(ptr::detach_req(r), comm))
    }
    fn Get_count(status: *const MPI_Status, datatype: MPI_Datatype, count: *mut c_int) {
        let n = count_of(CALL, status, datatype)?;
        ptr::write(CALL, "count", count, i32::try_from(n).unwrap_or(MPI_UNDEFINED))
    }
    fn Get_elements(status: *const MPI_Status, datatype: MPI_Datatype, count: *mut c_int) {
        let n = elements(CALL, status, datatype)?;
        ptr::write(CALL, "count", count, i32::try_from(n).unwrap_or(MPI_UNDEFINED))
    }
    fn Get_elements_x(status: *const MPI_Status, datatype: MPI_Datatype, count: *mut MPI_Count) {
        let n = elements(CALL, status, datatype)?;
        ptr::write(CALL, "count", count, n)
    }
    fn Status_set_elements(status: *mut MPI_Status, datatype: MPI_Datatype, count: c_int) {
        set_elements(CALL, status, datatype, count as MPI_Count)
    }
    fn Status_set_elements_x(status: *mut MPI_Status, datatype: MPI_Datatype, count: MPI_Count) {
        set_elements(CALL, status, datatype, count)
    }
    fn Status_set_cancelled(status: *mut MPI_Status, flag: c_int) {
        let mut s = ptr::read_status(CALL, status)?;
        s.set_bytes(s.bytes(), flag != 0);
        ptr::write(CALL, "status", status, s)
    }
    fn Test_cancelled(status: *const MPI_Status, flag: *mut c_int) {
        let s = ptr::read_status(CALL, status)?;
        ptr::write(CALL, "flag", flag, s.cancelled() as c_int)
    }
}

/// Where a request stands, seen without completing it
/// (`MPI_Request_get_status` and its MPI 4.1 `_any`/`_all`/`_some`).
pub(crate) enum Peek {
    /// `MPI_REQUEST_NULL` or an inactive persistent request.
    Inactive,
    Pending,
    Done(MPI_Status),
}

/// Look at `request` without completing or freeing it.
pub(crate) fn peek(call: &str, request: MPI_Request) -> Result<Peek, Error> {
    if request == MPI_REQUEST_NULL {
        return Ok(Peek::Inactive);
    }
    if request == SENT {
        return Ok(Peek::Done(MPI_Status::empty()));
    }
    if let Some(t) = direct::take(call, request) {
        let (slot, a) = t?;
        errors::set_target(a.comm);
        let r = a.req.peek();
        direct::keep(slot, a);
        return r.map(|o| match o {
            Some(st) => {
                let mut s = MPI_Status::empty();
                s.set(&st);
                Peek::Done(s)
            }
            None => Peek::Pending,
        });
    }
    let slot = resolve::req_slot(call, request)?;
    let taken = std::mem::replace(
        state().reqs.get_mut(slot).ok_or_else(|| {
            err(
                ErrorClass::Request,
                call,
                format!("request = {request:#x} is not a valid request"),
            )
        })?,
        ReqObj::Busy,
    );
    let res: Result<Peek, Error> = match &taken {
        ReqObj::Active(a)
        | ReqObj::Persistent {
            active: Some(a), ..
        } => {
            errors::set_target(a.comm);
            a.test().map(|o| match o {
                Some(st) => {
                    let mut s = MPI_Status::empty();
                    s.set(&st);
                    Peek::Done(s)
                }
                None => Peek::Pending,
            })
        }
        ReqObj::Done { st, .. } => Ok(Peek::Done(*st)),
        _ => Ok(Peek::Inactive),
    };
    if let Some(o) = state().reqs.get_mut(slot) {
        *o = taken;
    }
    res
}

/// The count of whole `dt`s the status's bytes make (`MPI_UNDEFINED` if
/// they make no whole number).
fn count_of(call: &str, status: *const MPI_Status, dt: MPI_Datatype) -> Result<MPI_Count, Error> {
    let s = ptr::read_status(call, status)?;
    let t = resolve::dtype(call, dt)?;
    Ok(match t.size() {
        0 => 0,
        sz if s.bytes() % sz as u64 == 0 => {
            MPI_Count::try_from(s.bytes() / sz as u64).unwrap_or(MPI_UNDEFINED as MPI_Count)
        }
        _ => MPI_UNDEFINED as MPI_Count,
    })
}

fn elements(call: &str, status: *const MPI_Status, dt: MPI_Datatype) -> Result<MPI_Count, Error> {
    let s = ptr::read_status(call, status)?;
    let t = resolve::dtype(call, dt)?;
    Ok(t.get_elements(s.bytes() as usize)
        .map_or(MPI_UNDEFINED as MPI_Count, |n| n as MPI_Count))
}

pub(crate) fn set_elements(
    call: &str,
    status: *mut MPI_Status,
    dt: MPI_Datatype,
    count: MPI_Count,
) -> Result<(), Error> {
    let t = resolve::dtype(call, dt)?;
    let n = usize::try_from(count).map_err(|_| {
        err(
            ErrorClass::Count,
            call,
            format!("count = {count} is negative"),
        )
    })?;
    // Bytes of `n` basic elements of the type: whole copies of the type,
    // then the leading elements of one more.
    let per = t.get_elements(t.size()).unwrap_or(1).max(1);
    let bytes = (n / per) * t.size() + (n % per) * t.size() / per;
    let mut s = ptr::read_status(call, status)?;
    s.set_bytes(bytes as u64, s.cancelled());
    ptr::write(call, "status", status, s)
}

/// The handle of a matched message.
fn message_handle(comm: MPI_Comm, msg: gmpi::Message) -> MPI_Message {
    if msg.is_no_proc() {
        return MPI_MESSAGE_NO_PROC;
    }
    encode(
        Kind::Request,
        state().reqs.insert(ReqObj::Message { comm, msg }),
    )
}

/// Take the matched message `*message` (and set it to `MPI_MESSAGE_NULL`).
fn take_message(call: &str, message: *mut MPI_Message) -> Result<(MPI_Comm, gmpi::Message), Error> {
    let m = ptr::read(call, "message", message)?;
    if m == MPI_MESSAGE_NO_PROC {
        ptr::write(call, "message", message, MPI_MESSAGE_NULL)?;
        return Ok((MPI_COMM_SELF, gmpi::Message::no_proc()));
    }
    let slot = resolve::req_slot(call, m)?;
    let mut st = state();
    if !matches!(st.reqs.get(slot), Some(ReqObj::Message { .. })) {
        return Err(err(
            ErrorClass::Request,
            call,
            format!("message = {m:#x} is not a matched message"),
        ));
    }
    let Some(ReqObj::Message { comm, msg }) = st.reqs.remove(slot) else {
        unreachable!("checked above")
    };
    drop(st);
    errors::set_target(comm);
    ptr::write(call, "message", message, MPI_MESSAGE_NULL)?;
    Ok((comm, msg))
}

// ---- persistent requests ----

fn persistent(
    call: &str,
    kind: SpecKind,
    buf: *const c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    peer: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    resolve::comm(call, comm)?;
    // Check the arguments now (the buffer is only read at each start).
    let t = resolve::dtype(call, dt)?;
    ptr::buf(call, "buf", buf, count, &t, matches!(kind, SpecKind::Recv))?;
    if request.is_null() {
        return Err(err(ErrorClass::Arg, call, "request is NULL"));
    }
    let spec = Spec {
        kind,
        buf: buf as usize,
        count,
        dt,
        peer,
        tag,
        comm,
    };
    new_persistent(call, spec, request)
}

/// Register an inactive persistent request of `spec` and write its handle
/// to `*request` (every `_init` call).
pub(crate) fn new_persistent(
    call: &str,
    spec: Spec,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let h = encode(
        Kind::Request,
        state().reqs.insert(ReqObj::Persistent {
            spec: Box::new(spec),
            active: None,
        }),
    );
    ptr::write(call, "request", request, h)
}

/// `MPI_<Coll>_init`: a persistent collective on `comm` that `start`
/// begins by calling `f`. The arguments `f` keeps are checked at each start
/// (the buffers are read then; the arrays were copied at init, [`Snap`]).
pub(crate) fn persistent_coll(
    call: &str,
    comm: MPI_Comm,
    info: MPI_Info,
    request: *mut MPI_Request,
    f: CollStart,
) -> Result<(), Error> {
    resolve::comm(call, comm)?;
    resolve::check_info(call, info)?;
    if request.is_null() {
        return Err(err(ErrorClass::Arg, call, "request is NULL"));
    }
    let spec = Spec {
        kind: SpecKind::Coll(f),
        buf: 0,
        count: 0,
        dt: MPI_DATATYPE_NULL,
        peer: MPI_PROC_NULL,
        tag: 0,
        comm,
    };
    new_persistent(call, spec, request)
}

/// An array argument of a persistent collective (counts, displacements,
/// datatypes): copied at init where it is significant, so that the caller
/// may reuse its array once `_init` returns (as MPICH, which builds its
/// schedule then, allows); elsewhere the caller's pointer, which the
/// collective does not read.
pub(crate) enum Snap<T> {
    Copy(Vec<T>),
    Ptr(usize),
}

impl<T: Copy> Snap<T> {
    /// `n` entries of `p` (`None`: not significant here).
    pub(crate) fn take(
        call: &str,
        what: &str,
        p: *const T,
        n: Option<usize>,
    ) -> Result<Self, Error> {
        Ok(match n {
            Some(n) => Snap::Copy(ptr::slice(call, what, p, n)?.to_vec()),
            None => Snap::Ptr(p as usize),
        })
    }

    /// The array to pass at a start.
    pub(crate) fn ptr(&self) -> *const T {
        match self {
            Snap::Copy(v) => v.as_ptr(),
            Snap::Ptr(p) => *p as *const T,
        }
    }
}

/// Start a persistent collective: its non-blocking collective makes a
/// request of its own, whose operation moves into the persistent one.
fn start_coll(call: &'static str, f: &CollStart) -> Result<Active, Error> {
    let mut h = MPI_REQUEST_NULL;
    (f.0)(call, &mut h)?;
    let slot = resolve::req_slot(call, h)?;
    match state().reqs.remove(slot) {
        Some(ReqObj::Active(a)) => Ok(a),
        other => Err(err(
            ErrorClass::Intern,
            call,
            format!("a persistent collective started as {other:?}, not as an operation"),
        )),
    }
}

fn start_spec(call: &'static str, s: &Spec) -> Result<Active, Error> {
    match &s.kind {
        SpecKind::Coll(f) => start_coll(call, f),
        &SpecKind::Psend { partitions } => crate::part::start_send(call, s, partitions),
        &SpecKind::Precv { partitions } => crate::part::start_recv(call, s, partitions),
        &SpecKind::Send(mode) => nonblocking_send(
            call,
            s.buf as *const c_void,
            s.count,
            s.dt,
            s.peer,
            s.tag,
            s.comm,
            mode,
        ),
        SpecKind::Recv => nonblocking_recv(
            call,
            s.buf as *mut c_void,
            s.count,
            s.dt,
            s.peer,
            s.tag,
            s.comm,
        ),
    }
}

fn start(call: &'static str, h: MPI_Request) -> Result<(), Error> {
    let slot = resolve::req_slot(call, h)?;
    let spec = match state().reqs.get(slot) {
        Some(ReqObj::Persistent { spec, active: None }) => (**spec).clone(),
        Some(ReqObj::Persistent { .. }) => {
            return Err(err(
                ErrorClass::Request,
                call,
                format!("request {h:#x} is already active"),
            ))
        }
        _ => {
            return Err(err(
                ErrorClass::Request,
                call,
                format!("request {h:#x} is not a persistent request"),
            ))
        }
    };
    errors::set_target(spec.comm);
    let a = start_spec(call, &spec)?;
    if let Some(ReqObj::Persistent { active, .. }) = state().reqs.get_mut(slot) {
        *active = Some(a);
    }
    Ok(())
}

mpi_fn! {
    fn Send_init(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        persistent(CALL, SpecKind::Send(Mode::Standard), buf, count.into(), datatype, dest, tag, comm, request)
    }
    fn Ssend_init(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        persistent(CALL, SpecKind::Send(Mode::Sync), buf, count.into(), datatype, dest, tag, comm, request)
    }
    fn Rsend_init(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        persistent(CALL, SpecKind::Send(Mode::Ready), buf, count.into(), datatype, dest, tag, comm, request)
    }
    fn Bsend_init(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        persistent(CALL, SpecKind::Send(Mode::Buffered), buf, count.into(), datatype, dest, tag, comm, request)
    }
    fn Recv_init(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        persistent(CALL, SpecKind::Recv, buf, count.into(), datatype, source, tag, comm, request)
    }
    fn Start(request: *mut MPI_Request) {
        let h = ptr::read(CALL, "request", request)?;
        start(CALL, h)
    }
    fn Startall(count: c_int, array_of_requests: *mut MPI_Request) {
        let n = ptr::count(CALL, "count", count)?;
        let reqs = ptr::slice(CALL, "array_of_requests", array_of_requests, n)?;
        for &h in reqs {
            start(CALL, h)?;
        }
        Ok(())
    }
}

// ---- completion ----

/// A request taken out of its slot for a completion call.
enum Taken {
    /// `MPI_REQUEST_NULL` or an inactive persistent request.
    Inactive,
    /// [`SENT`]: a send that completed when it started.
    Sent,
    Active {
        slot: usize,
        a: Active,
        persistent: bool,
    },
    Done {
        slot: usize,
        comm: MPI_Comm,
        st: MPI_Status,
    },
}

/// The handles that name no slot: `MPI_REQUEST_NULL` and [`SENT`].
fn slotless(h: MPI_Request) -> Option<Taken> {
    match h {
        MPI_REQUEST_NULL => Some(Taken::Inactive),
        SENT => Some(Taken::Sent),
        _ => None,
    }
}

fn take(call: &str, h: MPI_Request) -> Result<Taken, Error> {
    if let Some(t) = slotless(h) {
        return Ok(t);
    }
    if let Some(t) = take_direct(call, h) {
        return t;
    }
    take_in(&mut state(), call, h)
}

/// [`take`] of a direct handle (no lock); `None` for any other handle.
#[inline]
fn take_direct(call: &str, h: MPI_Request) -> Option<Result<Taken, Error>> {
    Some(direct::take(call, h)?.map(|(slot, a)| Taken::Active {
        slot,
        a,
        persistent: false,
    }))
}

/// [`take`] with the tables already locked.
fn take_in(st: &mut State, call: &str, h: MPI_Request) -> Result<Taken, Error> {
    if let Some(t) = slotless(h) {
        return Ok(t);
    }
    if let Some(t) = take_direct(call, h) {
        return t;
    }
    let slot = resolve::req_slot(call, h)?;
    let Some(obj) = st.reqs.get_mut(slot) else {
        return Err(err(
            ErrorClass::Request,
            call,
            format!("request = {h:#x} is not a valid request (freed or completed)"),
        ));
    };
    Ok(match std::mem::replace(obj, ReqObj::Busy) {
        ReqObj::Active(a) => Taken::Active {
            slot,
            a,
            persistent: false,
        },
        ReqObj::Done { comm, st } => Taken::Done { slot, comm, st },
        ReqObj::Persistent {
            spec,
            active: Some(a),
        } => {
            *obj = ReqObj::Persistent { spec, active: None };
            Taken::Active {
                slot,
                a,
                persistent: true,
            }
        }
        p @ ReqObj::Persistent { active: None, .. } => {
            *obj = p;
            Taken::Inactive
        }
        other @ (ReqObj::Message { .. } | ReqObj::Busy) => {
            *obj = other;
            return Err(err(
                ErrorClass::Request,
                call,
                format!("request = {h:#x} is not a request that can be completed"),
            ));
        }
    })
}

/// Put back a request that has not completed.
fn put_back(slot: usize, a: Active, persistent: bool) {
    if direct::is_slot(slot) {
        return direct::keep(slot, a);
    }
    put_back_in(&mut state(), slot, a, persistent);
}

/// [`put_back`] with the tables already locked.
fn put_back_in(st: &mut State, slot: usize, a: Active, persistent: bool) {
    if direct::is_slot(slot) {
        return direct::keep(slot, a);
    }
    match st.reqs.get_mut(slot) {
        Some(ReqObj::Persistent { active, .. }) if persistent => *active = Some(a),
        Some(o) => *o = ReqObj::Active(a),
        None => {}
    }
}

/// Put a taken request back as it was (nothing completed).
fn restore_in(st: &mut State, t: Taken) {
    match t {
        Taken::Active {
            slot,
            a,
            persistent,
        } => put_back_in(st, slot, a, persistent),
        Taken::Done { slot, comm, st: s } => {
            if let Some(o) = st.reqs.get_mut(slot) {
                *o = ReqObj::Done { comm, st: s };
            }
        }
        Taken::Inactive | Taken::Sent => {}
    }
}

/// Release the slot of a completed non-persistent request (a direct
/// request has none: its entry was emptied when it was taken).
fn release(slot: usize) {
    if !direct::is_slot(slot) {
        state().reqs.remove(slot);
    }
}

/// The outcome of completing one request: its status and handle after.
struct Completed {
    st: MPI_Status,
    handle: MPI_Request,
    err: Option<(MPI_Comm, Error)>,
}

fn status_of(r: &Result<gmpi::Status, Error>) -> MPI_Status {
    let mut s = MPI_Status::empty();
    match r {
        Ok(st) => s.set(st),
        Err(e) => s.MPI_ERROR = class_code(e.class()),
    }
    s
}

/// Finish a request that completed with `r`.
fn finish(
    h: MPI_Request,
    slot: usize,
    comm: MPI_Comm,
    persistent: bool,
    r: Result<gmpi::Status, Error>,
) -> Completed {
    finish_with(h, slot, comm, persistent, r, release)
}

/// [`finish`], freeing the slot (of a non-persistent request) with `free`.
fn finish_with(
    h: MPI_Request,
    slot: usize,
    comm: MPI_Comm,
    persistent: bool,
    r: Result<gmpi::Status, Error>,
    free: impl FnOnce(usize),
) -> Completed {
    let st = status_of(&r);
    let handle = if persistent {
        h
    } else {
        free(slot);
        MPI_REQUEST_NULL
    };
    Completed {
        st,
        handle,
        err: r.err().map(|e| (comm, e)),
    }
}

/// The completion of an inactive (persistent) or null request.
fn inactive(h: MPI_Request) -> Completed {
    Completed {
        st: MPI_Status::inactive(),
        handle: h,
        err: None,
    }
}

/// The completion of [`SENT`].
fn sent() -> Completed {
    Completed {
        st: MPI_Status::empty(),
        handle: MPI_REQUEST_NULL,
        err: None,
    }
}

/// The completion of a request that completed when it started.
fn done(call: &str, slot: usize, comm: MPI_Comm, st: MPI_Status) -> Completed {
    done_with(call, slot, comm, st, release)
}

/// [`done`], freeing the slot with `free`.
fn done_with(
    call: &str,
    slot: usize,
    comm: MPI_Comm,
    st: MPI_Status,
    free: impl FnOnce(usize),
) -> Completed {
    free(slot);
    let err = (st.MPI_ERROR != 0).then(|| {
        let class = runtime_class(st.MPI_ERROR).unwrap_or(ErrorClass::Other);
        (comm, err(class, call, "the operation failed"))
    });
    Completed {
        st,
        handle: MPI_REQUEST_NULL,
        err,
    }
}

/// Wait for request `h`.
fn wait_one(call: &str, h: MPI_Request) -> Result<Completed, Error> {
    reap();
    Ok(complete(call, h, take(call, h)?, release))
}

/// Complete `t`, taken out of handle `h`'s slot: wait for it if it is in
/// flight, and free its slot (unless persistent) with `free`.
fn complete(call: &str, h: MPI_Request, t: Taken, free: impl FnOnce(usize)) -> Completed {
    match t {
        Taken::Inactive => inactive(h),
        Taken::Sent => sent(),
        Taken::Done { slot, comm, st } => done_with(call, slot, comm, st, free),
        Taken::Active {
            slot,
            a,
            persistent,
        } => {
            let comm = a.comm;
            let r = a.wait();
            finish_with(h, slot, comm, persistent, r, free)
        }
    }
}

/// Complete every request of `reqs` (`MPI_Waitall`): take them all out of
/// their slots under one lock, wait for those in flight together
/// ([`gmpi::wait_set`]: one hold of the engine, however many there are),
/// complete them in order and free their slots under one lock. Each
/// status's `MPI_ERROR` is set; the errors are returned in order.
///
/// A handle that is not a request fails the call before anything completes.
/// If the wait together fails (a peer is gone), each request is waited for
/// on its own and reports its own outcome, as one by one.
fn wait_all(
    call: &'static str,
    reqs: &mut [MPI_Request],
    statuses: *mut MPI_Status,
) -> Result<Vec<(MPI_Comm, Error)>, Error> {
    reap();
    if let Some(r) = wait_all_direct(call, reqs, statuses) {
        return r;
    }
    if reqs.iter().all(|&h| slotless(h).is_some()) {
        // Sends that completed when they started, and nulls: nothing to
        // look up or wait for.
        for (i, h) in reqs.iter_mut().enumerate() {
            let t = slotless(*h).expect("checked above");
            let c = complete(call, *h, t, release);
            *h = c.handle;
            ptr::status_at(statuses, i, &c.st);
        }
        return Ok(Vec::new());
    }
    let mut taken = Vec::with_capacity(reqs.len());
    {
        // The tables are locked only for requests that have a slot.
        let mut st = None;
        for &h in reqs.iter() {
            let t = match slotless(h) {
                Some(t) => Ok(t),
                None => match take_direct(call, h) {
                    Some(t) => t,
                    None => take_in(st.get_or_insert_with(state), call, h),
                },
            };
            match t {
                Ok(t) => taken.push(t),
                Err(e) => {
                    let st = st.get_or_insert_with(state);
                    for t in taken {
                        restore_in(st, t);
                    }
                    return Err(e);
                }
            }
        }
    }
    {
        let mut refs: Vec<&Request<'static>> = Vec::with_capacity(taken.len());
        for t in &taken {
            if let Taken::Active { a, .. } = t {
                refs.push(&a.req);
                refs.extend(&a.more);
            }
        }
        // On failure the outcomes come from the waits one by one below.
        let _ = gmpi::wait_set(call, &refs);
    }
    let mut free = Vec::new();
    let mut errs = Vec::new();
    for (i, (t, h)) in taken.into_iter().zip(reqs.iter_mut()).enumerate() {
        let c = complete(call, *h, t, |s| {
            if !direct::is_slot(s) {
                free.push(s);
            }
        });
        *h = c.handle;
        let mut st = c.st;
        st.MPI_ERROR = c
            .err
            .as_ref()
            .map_or(MPI_SUCCESS, |e| class_code(e.1.class()));
        if let Some(e) = c.err {
            errs.push(e);
        }
        ptr::status_at(statuses, i, &st);
    }
    if !free.is_empty() {
        let mut st = state();
        for s in free {
            st.reqs.remove(s);
        }
    }
    Ok(errs)
}

/// [`wait_all`] of handles that are all direct or slotless (the sends and
/// receives of the hot paths, `MPI_REQUEST_NULL`, [`SENT`]): no table, no
/// lock of it, no request built; the pml ids are waited for together
/// ([`gmpi::wait_raw`]). `None` if any handle has a slot.
fn wait_all_direct(
    call: &'static str,
    reqs: &mut [MPI_Request],
    statuses: *mut MPI_Status,
) -> Option<Result<Vec<(MPI_Comm, Error)>, Error>> {
    if !reqs
        .iter()
        .all(|&h| direct::is_direct(h) || slotless(h).is_some())
    {
        return None;
    }
    // (index in reqs, pml id, communicator) of each direct request.
    let mut taken: Vec<(usize, u64, MPI_Comm)> = Vec::with_capacity(reqs.len());
    for (i, &h) in reqs.iter().enumerate() {
        if slotless(h).is_some() {
            continue;
        }
        match direct::take_raw(call, h) {
            Ok((raw, comm)) => taken.push((i, raw, comm)),
            Err(e) => {
                for &(_, raw, _) in &taken {
                    direct::keep_raw(raw);
                }
                return Some(Err(e));
            }
        }
    }
    let mut errs = Vec::new();
    let mut finish = |i: usize, comm: MPI_Comm, r: Result<gmpi::Status, Error>| {
        let mut st = status_of(&r);
        if let Err(e) = r {
            st.MPI_ERROR = class_code(e.class());
            errs.push((comm, e));
        }
        ptr::status_at(statuses, i, &st);
    };
    let together = gmpi::wait_raw(call, &taken, |t| t.1, |t, r| finish(t.0, t.2, r));
    if together.is_err() {
        // Each one on its own, for its own outcome (a peer is gone).
        for &(i, raw, comm) in &taken {
            finish(i, comm, Request::from_raw(raw, call).wait());
        }
    }
    for (i, h) in reqs.iter_mut().enumerate() {
        if let Some(t) = slotless(*h) {
            let c = complete(call, *h, t, release);
            ptr::status_at(statuses, i, &c.st);
        }
        *h = MPI_REQUEST_NULL;
    }
    Some(Ok(errs))
}

/// Test request `h`: `None` if it has not completed.
fn test_one(call: &str, h: MPI_Request) -> Result<Option<Completed>, Error> {
    Ok(match take(call, h)? {
        Taken::Inactive => Some(inactive(h)),
        Taken::Sent => Some(sent()),
        Taken::Done { slot, comm, st } => Some(done(call, slot, comm, st)),
        Taken::Active {
            slot,
            a,
            persistent,
        } => {
            let comm = a.comm;
            match a.test() {
                Ok(None) => {
                    put_back(slot, a, persistent);
                    None
                }
                Ok(Some(s)) => Some(finish(h, slot, comm, persistent, Ok(s))),
                Err(e) => Some(finish(h, slot, comm, persistent, Err(e))),
            }
        }
    })
}

/// Raise the error of a single completion through its communicator.
fn single(
    c: Completed,
    request: *mut MPI_Request,
    status: *mut MPI_Status,
    call: &str,
) -> Result<(), Error> {
    ptr::write(call, "request", request, c.handle)?;
    ptr::status(status, &c.st);
    match c.err {
        None => Ok(()),
        Some((comm, e)) => {
            errors::set_target(comm);
            Err(e)
        }
    }
}

/// For multiple completions: record per-request errors in the statuses and
/// fail with `MPI_ERR_IN_STATUS` if any failed.
fn multiple(call: &str, errs: Vec<(MPI_Comm, Error)>, statuses_ignored: bool) -> Result<(), Error> {
    let Some((comm, first)) = errs.into_iter().next() else {
        return Ok(());
    };
    errors::set_target(comm);
    if statuses_ignored {
        return Err(first);
    }
    errors::code_of(&first);
    Err(err(
        ErrorClass::InStatus,
        call,
        format!("a request failed (see its status): {}", first.message()),
    ))
}

fn ignored(p: *mut MPI_Status) -> bool {
    p.is_null() || p as usize == MPI_STATUSES_IGNORE
}

/// Index of the first active request among `reqs` that completes, waiting
/// (`block`) or not.
fn any(
    call: &'static str,
    reqs: &mut [MPI_Request],
    block: bool,
) -> Result<Option<(usize, Completed)>, Error> {
    reap();
    loop {
        let mut active = false;
        for (i, &h) in reqs.iter().enumerate() {
            if h == MPI_REQUEST_NULL || is_inactive(h) {
                continue;
            }
            active = true;
            if let Some(c) = test_one(call, h)? {
                return Ok(Some((i, c)));
            }
        }
        if !active || !block {
            return Ok(if active {
                None
            } else {
                Some((
                    usize::MAX,
                    Completed {
                        st: MPI_Status::inactive(),
                        handle: MPI_REQUEST_NULL,
                        err: None,
                    },
                ))
            });
        }
        wait_any(call, reqs)?;
    }
}

/// Whether `h` is an inactive persistent request.
fn is_inactive(h: MPI_Request) -> bool {
    if direct::is_direct(h) {
        return false;
    }
    decode(Kind::Request, h).is_some_and(|i| {
        matches!(
            state().reqs.get(i),
            Some(ReqObj::Persistent { active: None, .. })
        )
    })
}

/// Block until one of `reqs` can complete.
fn wait_any(call: &'static str, reqs: &[MPI_Request]) -> Result<(), Error> {
    // Take the active ones out, wait on them together, put them back.
    let mut out = Vec::new();
    for &h in reqs {
        if h == MPI_REQUEST_NULL {
            continue;
        }
        let t = match take(call, h) {
            Ok(t) => t,
            Err(e) => {
                for (slot, a, p) in out {
                    put_back(slot, a, p);
                }
                return Err(e);
            }
        };
        match t {
            Taken::Active {
                slot,
                a,
                persistent,
            } => out.push((slot, a, persistent)),
            Taken::Done { slot, comm, st } => {
                if let Some(o) = state().reqs.get_mut(slot) {
                    *o = ReqObj::Done { comm, st };
                }
                // One can complete now: put back what was taken (dropping
                // a request would wait for it).
                for (slot, a, p) in out.drain(..) {
                    put_back(slot, a, p);
                }
                break;
            }
            Taken::Sent => {
                for (slot, a, p) in out.drain(..) {
                    put_back(slot, a, p);
                }
                break;
            }
            Taken::Inactive => {}
        }
    }
    let r = {
        let refs: Vec<&Request<'static>> = out.iter().flat_map(|(_, a, _)| a.waitables()).collect();
        if refs.is_empty() {
            Ok(())
        } else {
            gmpi::wait_any_ready(call, &refs)
        }
    };
    for (slot, a, p) in out {
        put_back(slot, a, p);
    }
    r
}

mpi_fn! {
    fn Wait(request: *mut MPI_Request, status: *mut MPI_Status) {
        let h = ptr::read(CALL, "request", request)?;
        let c = wait_one(CALL, h)?;
        single(c, request, status, CALL)
    }
    fn Test(request: *mut MPI_Request, flag: *mut c_int, status: *mut MPI_Status) {
        let h = ptr::read(CALL, "request", request)?;
        if flag.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "flag is NULL"));
        }
        reap();
        match test_one(CALL, h)? {
            None => ptr::write(CALL, "flag", flag, 0),
            Some(c) => {
                ptr::write(CALL, "flag", flag, 1)?;
                single(c, request, status, CALL)
            }
        }
    }
    fn Waitall(count: c_int, array_of_requests: *mut MPI_Request, array_of_statuses: *mut MPI_Status) {
        let n = ptr::count(CALL, "count", count)?;
        let reqs = ptr::slice_mut(CALL, "array_of_requests", array_of_requests, n)?;
        let errs = wait_all(CALL, reqs, array_of_statuses)?;
        multiple(CALL, errs, ignored(array_of_statuses))
    }
    fn Testall(count: c_int, array_of_requests: *mut MPI_Request, flag: *mut c_int, array_of_statuses: *mut MPI_Status) {
        let n = ptr::count(CALL, "count", count)?;
        let reqs = ptr::slice_mut(CALL, "array_of_requests", array_of_requests, n)?;
        if flag.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "flag is NULL"));
        }
        reap();
        // Complete all or none: first see whether every one is ready.
        let mut all = true;
        for &h in reqs.iter() {
            if h == MPI_REQUEST_NULL {
                continue;
            }
            if !ready(CALL, h)? {
                all = false;
            }
        }
        if !all {
            return ptr::write(CALL, "flag", flag, 0);
        }
        let errs = wait_all(CALL, reqs, array_of_statuses)?;
        ptr::write(CALL, "flag", flag, 1)?;
        multiple(CALL, errs, ignored(array_of_statuses))
    }
    fn Waitany(count: c_int, array_of_requests: *mut MPI_Request, index: *mut c_int, status: *mut MPI_Status) {
        let n = ptr::count(CALL, "count", count)?;
        let reqs = ptr::slice_mut(CALL, "array_of_requests", array_of_requests, n)?;
        if index.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "index is NULL"));
        }
        let (i, c) = any(CALL, reqs, true)?.expect("a blocking wait returns a completion");
        if i == usize::MAX {
            ptr::status(status, &MPI_Status::inactive());
            return ptr::write(CALL, "index", index, MPI_UNDEFINED);
        }
        reqs[i] = c.handle;
        ptr::write(CALL, "index", index, i as c_int)?;
        ptr::status(status, &c.st);
        match c.err { None => Ok(()), Some((comm, e)) => { errors::set_target(comm); Err(e) } }
    }
    fn Testany(count: c_int, array_of_requests: *mut MPI_Request, index: *mut c_int, flag: *mut c_int, status: *mut MPI_Status) {
        let n = ptr::count(CALL, "count", count)?;
        let reqs = ptr::slice_mut(CALL, "array_of_requests", array_of_requests, n)?;
        if index.is_null() || flag.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "index or flag is NULL"));
        }
        match any(CALL, reqs, false)? {
            None => {
                ptr::write(CALL, "flag", flag, 0)?;
                ptr::write(CALL, "index", index, MPI_UNDEFINED)
            }
            Some((usize::MAX, _)) => {
                ptr::status(status, &MPI_Status::inactive());
                ptr::write(CALL, "flag", flag, 1)?;
                ptr::write(CALL, "index", index, MPI_UNDEFINED)
            }
            Some((i, c)) => {
                reqs[i] = c.handle;
                ptr::write(CALL, "flag", flag, 1)?;
                ptr::write(CALL, "index", index, i as c_int)?;
                ptr::status(status, &c.st);
                match c.err { None => Ok(()), Some((comm, e)) => { errors::set_target(comm); Err(e) } }
            }
        }
    }
    fn Waitsome(incount: c_int, array_of_requests: *mut MPI_Request, outcount: *mut c_int, array_of_indices: *mut c_int, array_of_statuses: *mut MPI_Status) {
        some(CALL, incount, array_of_requests, outcount, array_of_indices, array_of_statuses, true)
    }
    fn Testsome(incount: c_int, array_of_requests: *mut MPI_Request, outcount: *mut c_int, array_of_indices: *mut c_int, array_of_statuses: *mut MPI_Status) {
        some(CALL, incount, array_of_requests, outcount, array_of_indices, array_of_statuses, false)
    }
    fn Request_free(request: *mut MPI_Request) {
        let h = ptr::read(CALL, "request", request)?;
        if h == MPI_REQUEST_NULL {
            return Err(err(ErrorClass::Request, CALL, "request is MPI_REQUEST_NULL"));
        }
        if h == SENT {
            return ptr::write(CALL, "request", request, MPI_REQUEST_NULL);
        }
        if let Some(t) = direct::take(CALL, h) {
            detach(t?.1);
            return ptr::write(CALL, "request", request, MPI_REQUEST_NULL);
        }
        let slot = resolve::req_slot(CALL, h)?;
        let obj = state().reqs.remove(slot);
        match obj {
            None | Some(ReqObj::Busy) | Some(ReqObj::Message { .. }) => {
                return Err(err(ErrorClass::Request, CALL, format!("request = {h:#x} is not a valid request")));
            }
            Some(ReqObj::Active(a)) | Some(ReqObj::Persistent { active: Some(a), .. }) => detach(a),
            Some(_) => {}
        }
        ptr::write(CALL, "request", request, MPI_REQUEST_NULL)
    }
    fn Request_get_status(request: MPI_Request, flag: *mut c_int, status: *mut MPI_Status) {
        if flag.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "flag is NULL"));
        }
        match peek(CALL, request)? {
            Peek::Pending => ptr::write(CALL, "flag", flag, 0),
            Peek::Inactive => {
                ptr::status(status, &MPI_Status::inactive());
                ptr::write(CALL, "flag", flag, 1)
            }
            Peek::Done(s) => {
                ptr::status(status, &s);
                ptr::write(CALL, "flag", flag, 1)
            }
        }
    }
    fn Cancel(request: *mut MPI_Request) {
        let h = ptr::read(CALL, "request", request)?;
        if h == SENT {
            // A completed send: nothing to cancel.
            return Ok(());
        }
        if let Some(t) = direct::take(CALL, h) {
            let (slot, a) = t?;
            let r = a.req.cancel();
            direct::keep(slot, a);
            return r;
        }
        let slot = resolve::req_slot(CALL, h)?;
        let taken = std::mem::replace(state().reqs.get_mut(slot).ok_or_else(|| err(ErrorClass::Request, CALL, format!("request = {h:#x} is not a valid request")))?, ReqObj::Busy);
        let r = match &taken {
            ReqObj::Active(a) | ReqObj::Persistent { active: Some(a), .. } => {
                crate::greq::cancel(a).unwrap_or_else(|| a.req.cancel())
            }
            _ => Ok(()),
        };
        if let Some(o) = state().reqs.get_mut(slot) {
            *o = taken;
        }
        r
    }
}

/// Whether request `h` would complete now (progressing first).
fn ready(call: &str, h: MPI_Request) -> Result<bool, Error> {
    match take(call, h)? {
        Taken::Inactive | Taken::Sent => Ok(true),
        Taken::Done { slot, comm, st } => {
            if let Some(o) = state().reqs.get_mut(slot) {
                *o = ReqObj::Done { comm, st };
            }
            Ok(true)
        }
        Taken::Active {
            slot,
            a,
            persistent,
        } => {
            // A direct request is looked at, not completed: its handle
            // cannot keep a status.
            let r = if direct::is_slot(slot) {
                a.req.peek()
            } else {
                a.test()
            };
            put_back(slot, a, persistent);
            Ok(!matches!(r, Ok(None)))
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn some(
    call: &'static str,
    incount: c_int,
    array_of_requests: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
    block: bool,
) -> Result<(), Error> {
    let n = ptr::count(call, "incount", incount)?;
    let reqs = ptr::slice_mut(call, "array_of_requests", array_of_requests, n)?;
    if outcount.is_null() {
        return Err(err(ErrorClass::Arg, call, "outcount is NULL"));
    }
    reap();
    loop {
        let mut done = Vec::new();
        let mut active = false;
        for (i, h) in reqs.iter_mut().enumerate() {
            if *h == MPI_REQUEST_NULL || is_inactive(*h) {
                continue;
            }
            active = true;
            if let Some(c) = test_one(call, *h)? {
                *h = c.handle;
                done.push((i, c));
            }
        }
        if !active {
            return ptr::write(call, "outcount", outcount, MPI_UNDEFINED);
        }
        if !done.is_empty() || !block {
            let idx = ptr::slice_mut(call, "array_of_indices", indices, done.len())?;
            let mut errs = Vec::new();
            for (k, (i, c)) in done.into_iter().enumerate() {
                idx[k] = i as c_int;
                let mut st = c.st;
                st.MPI_ERROR = c
                    .err
                    .as_ref()
                    .map_or(MPI_SUCCESS, |e| class_code(e.1.class()));
                if let Some(e) = c.err {
                    errs.push(e);
                }
                ptr::status_at(statuses, k, &st);
            }
            ptr::write(call, "outcount", outcount, idx.len() as c_int)?;
            return multiple(call, errs, ignored(statuses));
        }
        wait_any(call, reqs)?;
    }
}

mpi_fn! {
    fn Isendrecv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, dest: c_int, sendtag: c_int,
        recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, source: c_int, recvtag: c_int,
        comm: MPI_Comm, request: *mut MPI_Request) {
        isendrecv(CALL, sendbuf, sendcount.into(), sendtype, dest, sendtag, recvbuf, recvcount.into(), recvtype, source, recvtag, comm, request)
    }
    fn Isendrecv_replace(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, sendtag: c_int,
        source: c_int, recvtag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        isendrecv_replace(CALL, buf, count.into(), datatype, dest, sendtag, source, recvtag, comm, request)
    }
}

/// `MPI_Sendrecv(_c)`.
#[allow(clippy::too_many_arguments)]
fn sendrecv(
    call: &'static str,
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let sv = send_view(call, sendbuf, sendcount, sendtype)?;
    let mut rv = recv_view(call, recvbuf, recvcount, recvtype)?;
    let st = c.sendrecv(&sv, dest, sendtag, &mut rv, source, recvtag)?;
    let mut s = MPI_Status::empty();
    s.set(&st);
    ptr::status(status, &s);
    Ok(())
}

/// `MPI_Sendrecv_replace(_c)`.
#[allow(clippy::too_many_arguments)]
fn sendrecv_replace(
    call: &'static str,
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let mut v = recv_view(call, buf, count, datatype)?;
    // Send a copy, receive in place.
    let copy = gmpi_packed(call, &c, &v)?;
    let st = c.sendrecv(&copy[..], dest, sendtag, &mut v, source, recvtag)?;
    let mut s = MPI_Status::empty();
    s.set(&st);
    ptr::status(status, &s);
    Ok(())
}

/// `MPI_Isendrecv(_c)`.
#[allow(clippy::too_many_arguments)]
fn isendrecv(
    call: &'static str,
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let sv = send_view(call, sendbuf, sendcount, sendtype)?;
    let mut rv = recv_view(call, recvbuf, recvcount, recvtype)?;
    // The receive is the request's status; the send completes with it.
    let r = ptr::detach_req(c.irecv(&mut rv, source, recvtag)?);
    let s = ptr::detach_req(c.isend(&sv, dest, sendtag)?);
    out_req(call, request, Active::group(r, vec![s], comm))
}

/// `MPI_Isendrecv_replace(_c)`.
#[allow(clippy::too_many_arguments)]
fn isendrecv_replace(
    call: &'static str,
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let mut v = recv_view(call, buf, count, datatype)?;
    // Send a copy (kept beside the request), receive in place.
    let copy: Box<Vec<u8>> = Box::new(gmpi_packed(call, &c, &v)?);
    let s = ptr::detach_req(c.isend(&copy[..], dest, sendtag)?);
    let r = ptr::detach_req(c.irecv(&mut v, source, recvtag)?);
    let mut a = Active::group(r, vec![s], comm);
    a.keep = Some(copy);
    out_req(call, request, a)
}

// ---- the large-count calls (MPI-4's `_c` variants) ----
//
// The same bodies as the `int` calls above, over `MPI_Count` counts: the
// helpers take `MPI_Count`, and `count` widens an `int` there.

mpi_fn! {
    fn Send_c(buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) fast {
        send_fast(CALL, buf, count, datatype, dest, tag, comm, Mode::Standard)
    } {
        blocking_send(CALL, buf, count, datatype, dest, tag, comm, Mode::Standard)
    }
    fn Ssend_c(buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) fast {
        send_fast(CALL, buf, count, datatype, dest, tag, comm, Mode::Sync)
    } {
        blocking_send(CALL, buf, count, datatype, dest, tag, comm, Mode::Sync)
    }
    fn Rsend_c(buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) fast {
        send_fast(CALL, buf, count, datatype, dest, tag, comm, Mode::Ready)
    } {
        blocking_send(CALL, buf, count, datatype, dest, tag, comm, Mode::Ready)
    }
    fn Bsend_c(buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) {
        blocking_send(CALL, buf, count, datatype, dest, tag, comm, Mode::Buffered)
    }
    fn Isend_c(buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) fast {
        isend_fast(CALL, buf, count, datatype, dest, tag, comm, Mode::Standard, request)
    } {
        let a = nonblocking_send(CALL, buf, count, datatype, dest, tag, comm, Mode::Standard)?;
        out_req(CALL, request, a)
    }
    fn Issend_c(buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) fast {
        isend_fast(CALL, buf, count, datatype, dest, tag, comm, Mode::Sync, request)
    } {
        let a = nonblocking_send(CALL, buf, count, datatype, dest, tag, comm, Mode::Sync)?;
        out_req(CALL, request, a)
    }
    fn Irsend_c(buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) fast {
        isend_fast(CALL, buf, count, datatype, dest, tag, comm, Mode::Ready, request)
    } {
        let a = nonblocking_send(CALL, buf, count, datatype, dest, tag, comm, Mode::Ready)?;
        out_req(CALL, request, a)
    }
    fn Ibsend_c(buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        let a = nonblocking_send(CALL, buf, count, datatype, dest, tag, comm, Mode::Buffered)?;
        out_req(CALL, request, a)
    }
    fn Recv_c(buf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, status: *mut MPI_Status) fast {
        recv_fast(CALL, buf, count, datatype, source, tag, comm, status)
    } {
        let c = resolve::comm(CALL, comm)?;
        let mut v = recv_view(CALL, buf, count, datatype)?;
        let st = c.recv(&mut v, source, tag)?;
        let mut s = MPI_Status::empty();
        s.set(&st);
        ptr::status(status, &s);
        Ok(())
    }
    fn Irecv_c(buf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) fast {
        irecv_fast(CALL, buf, count, datatype, source, tag, comm, request)
    } {
        let a = nonblocking_recv(CALL, buf, count, datatype, source, tag, comm)?;
        out_req(CALL, request, a)
    }
    fn Sendrecv_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, dest: c_int, sendtag: c_int,
        recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, source: c_int, recvtag: c_int,
        comm: MPI_Comm, status: *mut MPI_Status) {
        sendrecv(CALL, sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, comm, status)
    }
    fn Sendrecv_replace_c(buf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, sendtag: c_int,
        source: c_int, recvtag: c_int, comm: MPI_Comm, status: *mut MPI_Status) {
        sendrecv_replace(CALL, buf, count, datatype, dest, sendtag, source, recvtag, comm, status)
    }
    fn Isendrecv_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, dest: c_int, sendtag: c_int,
        recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, source: c_int, recvtag: c_int,
        comm: MPI_Comm, request: *mut MPI_Request) {
        isendrecv(CALL, sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, comm, request)
    }
    fn Isendrecv_replace_c(buf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, sendtag: c_int,
        source: c_int, recvtag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        isendrecv_replace(CALL, buf, count, datatype, dest, sendtag, source, recvtag, comm, request)
    }
    fn Mrecv_c(buf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, message: *mut MPI_Message, status: *mut MPI_Status) {
        let (comm, msg) = take_message(CALL, message)?;
        let mut v = recv_view(CALL, buf, count, datatype)?;
        let c = resolve::comm(CALL, comm)?;
        let st = c.mrecv(msg, &mut v)?;
        let mut s = MPI_Status::empty();
        s.set(&st);
        ptr::status(status, &s);
        Ok(())
    }
    fn Imrecv_c(buf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, message: *mut MPI_Message, request: *mut MPI_Request) {
        let (comm, msg) = take_message(CALL, message)?;
        let mut v = recv_view(CALL, buf, count, datatype)?;
        let c = resolve::comm(CALL, comm)?;
        let r = c.imrecv(msg, &mut v)?;
        out_req(CALL, request, Active::new(ptr::detach_req(r), comm))
    }
    fn Send_init_c(buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        persistent(CALL, SpecKind::Send(Mode::Standard), buf, count, datatype, dest, tag, comm, request)
    }
    fn Ssend_init_c(buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        persistent(CALL, SpecKind::Send(Mode::Sync), buf, count, datatype, dest, tag, comm, request)
    }
    fn Rsend_init_c(buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        persistent(CALL, SpecKind::Send(Mode::Ready), buf, count, datatype, dest, tag, comm, request)
    }
    fn Bsend_init_c(buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        persistent(CALL, SpecKind::Send(Mode::Buffered), buf, count, datatype, dest, tag, comm, request)
    }
    fn Recv_init_c(buf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) {
        persistent(CALL, SpecKind::Recv, buf, count, datatype, source, tag, comm, request)
    }
    fn Get_count_c(status: *const MPI_Status, datatype: MPI_Datatype, count: *mut MPI_Count) {
        let n = count_of(CALL, status, datatype)?;
        ptr::write(CALL, "count", count, n)
    }
    fn Get_elements_c(status: *const MPI_Status, datatype: MPI_Datatype, count: *mut MPI_Count) {
        let n = elements(CALL, status, datatype)?;
        ptr::write(CALL, "count", count, n)
    }
}
