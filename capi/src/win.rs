//! One-sided communication in the C ABI: `MPI_Win_*`, `MPI_Put`,
//! `MPI_Get`, the accumulates, their request-based and large-count forms,
//! over [`gmpi::Window`] (see the runtime's `win.rs` for how windows work
//! and what they do not do yet).
//!
//! A window handle names a slot of the window table ([`WinObj`]: the
//! window, its name, error handler, attributes and info). Errors of a call
//! that names a live window go to the window's error handler
//! (`MPI_ERRORS_ARE_FATAL` unless `MPI_Win_set_errhandler` changed it);
//! window creation errors go to the communicator's. Request-based
//! operations complete before they return; their requests are complete
//! requests.

use std::cell::{RefCell, UnsafeCell};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use gmpi::{AccHow, Error, ErrorClass, LockType, Op, View, WinFlavor, Window};

use crate::abi::*;
use crate::cache::{self, Obj};
use crate::errors;
use crate::info;
use crate::ptr;
use crate::resolve;
use crate::tables::*;

// ---- the window table ----

/// The error of a handle `h` that names no window.
pub(crate) fn invalid(call: &str, h: MPI_Win) -> Error {
    err(
        ErrorClass::Win,
        call,
        if h == MPI_WIN_NULL {
            "win is MPI_WIN_NULL".to_string()
        } else {
            format!("win = {h:#x} is not a valid window")
        },
    )
}

/// The window `h`, with errors of the current call routed to its handler.
fn win(call: &str, h: MPI_Win) -> Result<Window, Error> {
    with_win(call, h, |w| Ok(w.clone()))
}

/// Bumped whenever a window leaves the table: a thread's cached look-up
/// ([`LAST`]) is good while this has not moved.
static WIN_GEN: AtomicU64 = AtomicU64::new(0);

/// A cached window look-up: handle, [`WIN_GEN`] then, window.
type Lookup = Option<(MPI_Win, u64, Window)>;

thread_local! {
    /// This thread's last window look-up under `MPI_THREAD_MULTIPLE`: the
    /// operations of an epoch name one window over and over, and this
    /// spares each the table's lock and a reference count.
    static LAST: RefCell<Lookup> = const { RefCell::new(None) };
}

/// The last window look-up of a program below `MPI_THREAD_MULTIPLE`: one
/// global, since its calls never overlap (a thread-local of a shared
/// library costs a `__tls_get_addr` call at every use: a fifth of a small
/// `MPI_Put` + `MPI_Win_flush`).
struct Serial(UnsafeCell<Lookup>);

// SAFETY: the cell is touched only while `errors::multithreaded()` is false,
// that is while the program makes its MPI calls one at a time (the contract
// of MPI_THREAD_SINGLE, _FUNNELED and _SERIALIZED, whose program orders its
// threads' calls with its own synchronisation); gmpi's own threads (the
// one-sided progress thread) never enter the C ABI.
unsafe impl Sync for Serial {}

static SERIAL_LAST: Serial = Serial(UnsafeCell::new(None));

/// Read the caller's cached look-up (its thread's, or the process's below
/// `MPI_THREAD_MULTIPLE`). `f` must not enter the C ABI.
#[inline(always)]
fn read_last<R>(f: impl FnOnce(&Lookup) -> Option<R>) -> Option<R> {
    if errors::multithreaded() {
        return LAST.with(|l| f(&*l.try_borrow().ok()?));
    }
    // SAFETY: see `Serial`: no other call runs meanwhile, and `f` does not
    // re-enter the C ABI, so nothing writes the cell while this borrow lives.
    f(unsafe { &*SERIAL_LAST.0.get() })
}

/// Replace the caller's cached look-up.
#[inline]
fn write_last(v: Lookup) {
    if errors::multithreaded() {
        LAST.with(|l| {
            if let Ok(mut b) = l.try_borrow_mut() {
                *b = v;
            }
        });
        return;
    }
    // SAFETY: see `Serial`; no borrow of the cell is alive here (readers'
    // borrows end with `read_last`).
    unsafe { *SERIAL_LAST.0.get() = v }
}

/// Run `f` on the window `h`, with errors of the current call routed to
/// its handler.
fn with_win<R>(
    call: &str,
    h: MPI_Win,
    f: impl FnOnce(&Window) -> Result<R, Error>,
) -> Result<R, Error> {
    let gen = WIN_GEN.load(Ordering::Acquire);
    // A clone: `f` may take long or call back (an error handler does not
    // run inside it, but keep the cache free of borrows anyway).
    let cached = read_last(|l| match l {
        Some((lh, lg, w)) if *lh == h && *lg == gen => Some(w.clone()),
        _ => None,
    });
    let w = match cached {
        Some(w) => w,
        None => {
            let w = decode(Kind::Win, h)
                .and_then(|i| state().wins.get(i).map(|o| o.win.clone()))
                .ok_or_else(|| invalid(call, h))?;
            write_last(Some((h, gen, w.clone())));
            w
        }
    };
    errors::set_target(h);
    f(&w)
}

/// Run `f` on window `h` if the caller's cached look-up has it (the hot
/// path: no lock, no check to repeat, no reference count); `None`
/// otherwise. `f` must not enter the C ABI.
///
/// Always inlined (as [`read_last`]): out of line, it took the hot paths'
/// closures by reference and copied them with 16-byte loads of the caller's
/// 8-byte stores, a store-forwarding stall that cost `MPI_Fetch_and_op` a
/// third of its time.
#[inline(always)]
fn cached_win<R>(h: MPI_Win, f: impl FnOnce(&Window) -> Option<R>) -> Option<R> {
    let gen = WIN_GEN.load(Ordering::Acquire);
    read_last(|l| match l {
        Some((lh, lg, w)) if *lh == h && *lg == gen => f(w),
        _ => None,
    })
}

/// `MPI_Put`/`MPI_Get` of contiguous elements of a predefined type in host
/// memory to the same elements at the target, in an open epoch of a cached
/// window with shared memory: [`Window::put_raw`] / [`Window::get_raw`]
/// with no look-up; `None` sends the call down the general path, which
/// checks everything.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn put_get_fast(
    call: &'static str,
    put: bool,
    o: *const c_void,
    ocount: c_int,
    odt: MPI_Datatype,
    trank: c_int,
    tdisp: MPI_Aint,
    tcount: c_int,
    tdt: MPI_Datatype,
    h: MPI_Win,
) -> Option<c_int> {
    if odt != tdt || ocount != tcount || !running() {
        return None;
    }
    let len = ptr::fast_bytes(o, ocount, resolve::fast_dtype(odt)?.size())?;
    let disp: isize = tdisp;
    if put {
        let data = ptr::fast_host(o, len)?;
        cached_win(h, |w| {
            let r = w.put_raw(call, data, trank, disp)?;
            Some(crate::frame::fast(call, h, || r))
        })
    } else {
        let out = ptr::fast_host_mut(o.cast_mut(), len)?;
        cached_win(h, |w| {
            let r = w.get_raw(call, out, trank, disp)?;
            Some(crate::frame::fast(call, h, || r))
        })
    }
}

/// The predefined operation `h` on the predefined datatype `dt` as the
/// accumulates' hot path takes it (`MPI_REPLACE`, `MPI_NO_OP` and the
/// operations without an extension kernel); `None` for anything else.
#[inline]
fn fast_acc_op(h: MPI_Op, dt: MPI_Datatype) -> Option<Op> {
    match h {
        MPI_REPLACE => Some(Op::Replace),
        MPI_NO_OP => Some(Op::NoOp),
        _ => resolve::fast_op(h, dt),
    }
}

/// `MPI_Accumulate` (`r` NULL, `rdt` ignored), `MPI_Get_accumulate` and
/// `MPI_Fetch_and_op` of contiguous elements of one predefined type to the
/// same elements at the target, on a cached window with shared memory
/// ([`Window::acc_raw`], on host memory classified here); `None` sends the
/// call down the general path.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn acc_fast(
    call: &'static str,
    o: *const c_void,
    r: Option<*mut c_void>,
    count: c_int,
    dt: MPI_Datatype,
    trank: c_int,
    tdisp: MPI_Aint,
    op: MPI_Op,
    h: MPI_Win,
) -> Option<c_int> {
    if !running() {
        return None;
    }
    let d = resolve::fast_dtype(dt)?;
    let gmpi::Datatype::Primitive(p) = d else {
        return None;
    };
    let how = AccHow::of(&fast_acc_op(op, dt)?, p)?;
    let src = if o.is_null() && matches!(how, AccHow::NoOp) {
        &[][..]
    } else {
        ptr::fast_host(o, ptr::fast_bytes(o, count, d.size())?)?
    };
    let old = match r {
        Some(r) => Some(ptr::fast_host_mut(r, ptr::fast_bytes(r, count, d.size())?)?),
        None => None,
    };
    let disp: isize = tdisp;
    cached_win(h, |w| {
        let res = w.acc_raw(call, trank, disp, src, old, how)?;
        Some(crate::frame::fast(call, h, || res))
    })
}

/// `MPI_Compare_and_swap` on a cached window with shared memory
/// ([`Window::cas_basic`]); `None` sends the call down the general path.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn cas_fast(
    call: &'static str,
    o: *const c_void,
    c: *const c_void,
    r: *mut c_void,
    dt: MPI_Datatype,
    trank: c_int,
    tdisp: MPI_Aint,
    h: MPI_Win,
) -> Option<c_int> {
    if !running() {
        return None;
    }
    let d = resolve::fast_dtype(dt)?;
    let (ov, cv, rv) = (
        ptr::fast_buf(o, 1, d, false)?,
        ptr::fast_buf(c, 1, d, false)?,
        ptr::fast_buf(r, 1, d, true)?,
    );
    let disp: isize = tdisp;
    cached_win(h, |w| {
        let res = w.cas_basic(call, &ov, &cv, &rv, trank, disp)?;
        Some(crate::frame::fast(call, h, || res))
    })
}

/// `MPI_Win_flush(_local)` of a cached window in a passive-target epoch
/// to `rank` ([`Window::flush_basic`]); `None` sends it down the general
/// path.
#[inline(always)]
fn flush_fast(rank: c_int, h: MPI_Win) -> Option<c_int> {
    if !running() {
        return None;
    }
    cached_win(h, |w| w.flush_basic(rank).then_some(MPI_SUCCESS))
}

/// Window `h` left the table: forget every cached look-up (this thread's
/// at once, so its memory goes now; other threads' on their next look-up).
fn forget_win() {
    WIN_GEN.fetch_add(1, Ordering::AcqRel);
    write_last(None);
}

fn with_obj<R>(call: &str, h: MPI_Win, f: impl FnOnce(&mut WinObj) -> R) -> Result<R, Error> {
    let mut st = state();
    match decode(Kind::Win, h).and_then(|i| st.wins.get_mut(i)) {
        Some(o) => Ok(f(o)),
        None => Err(invalid(call, h)),
    }
}

fn register(w: Window, info: InfoObj) -> MPI_Win {
    let vals = Box::new(WinVals {
        size: w.size() as MPI_Aint,
        disp_unit: w.disp_unit() as c_int,
        flavor: w.flavor() as c_int,
        model: MPI_WIN_UNIFIED,
    });
    let obj = WinObj {
        win: w,
        name: String::new(),
        errh: MPI_ERRORS_ARE_FATAL,
        attrs: BTreeMap::new(),
        info,
        vals,
    };
    encode(Kind::Win, state().wins.insert(obj))
}

fn info_of(call: &str, info: MPI_Info) -> Result<InfoObj, Error> {
    resolve::check_info(call, info)?;
    if info == MPI_INFO_NULL {
        Ok(InfoObj::default())
    } else {
        info::lookup(call, info)
    }
}

fn size_arg(call: &str, size: MPI_Aint) -> Result<usize, Error> {
    usize::try_from(size).map_err(|_| {
        err(
            ErrorClass::Size,
            call,
            format!("size = {size}; it must not be negative"),
        )
    })
}

fn disp_arg(call: &str, disp_unit: MPI_Aint) -> Result<isize, Error> {
    if disp_unit <= 0 || disp_unit > c_int::MAX as MPI_Aint {
        return Err(err(
            ErrorClass::Disp,
            call,
            format!("disp_unit = {disp_unit}; it must be positive"),
        ));
    }
    Ok(disp_unit)
}

fn out_win(call: &str, p: *mut MPI_Win) -> Result<(), Error> {
    if p.is_null() {
        return Err(err(ErrorClass::Arg, call, "win is NULL"));
    }
    Ok(())
}

fn create(
    call: &str,
    base: *mut c_void,
    size: MPI_Aint,
    disp_unit: MPI_Aint,
    info: MPI_Info,
    comm: MPI_Comm,
    out: *mut MPI_Win,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let info = info_of(call, info)?;
    let size = size_arg(call, size)?;
    let du = disp_arg(call, disp_unit)?;
    out_win(call, out)?;
    if base.is_null() && size > 0 {
        return Err(err(
            ErrorClass::Base,
            call,
            format!("base is NULL but size = {size}"),
        ));
    }
    let w = ptr::win_create(&c, base, size, du)?;
    ptr::write(call, "win", out, register(w, info))
}

#[allow(clippy::too_many_arguments)]
fn allocate(
    call: &str,
    shared: bool,
    size: MPI_Aint,
    disp_unit: MPI_Aint,
    info: MPI_Info,
    comm: MPI_Comm,
    baseptr: *mut c_void,
    out: *mut MPI_Win,
) -> Result<(), Error> {
    let c = resolve::comm(call, comm)?;
    let info = info_of(call, info)?;
    let size = size_arg(call, size)?;
    let du = disp_arg(call, disp_unit)?;
    out_win(call, out)?;
    if baseptr.is_null() {
        return Err(err(ErrorClass::Arg, call, "baseptr is NULL"));
    }
    let w = Window::allocate(&c, size, du, shared)?;
    let base = if size == 0 { 0 } else { w.base() };
    ptr::write(call, "baseptr", baseptr.cast::<u64>(), base)?;
    ptr::write(call, "win", out, register(w, info))
}

fn shared_query(
    call: &str,
    h: MPI_Win,
    rank: c_int,
    size: *mut MPI_Aint,
    baseptr: *mut c_void,
) -> Result<isize, Error> {
    let w = win(call, h)?;
    let (n, du, base) = w.shared_query(rank)?;
    ptr::write(call, "size", size, n as MPI_Aint)?;
    ptr::write(call, "baseptr", baseptr.cast::<u64>(), base)?;
    Ok(du)
}

// ---- operations ----

/// The origin buffer of an operation.
fn origin(
    call: &str,
    what: &str,
    p: *const c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    writable: bool,
) -> Result<View, Error> {
    // A predefined type: the view without look-ups or checks to repeat.
    if let Some(v) = resolve::fast_dtype(dt).and_then(|d| ptr::fast_buf(p, count, d, writable)) {
        return Ok(v);
    }
    let t = resolve::dtype(call, dt)?;
    ptr::buf(call, what, p, count, &t, writable)
}

/// Target rank, displacement, count and datatype.
struct Target {
    rank: c_int,
    disp: isize,
    count: usize,
    dt: MPI_Datatype,
}

impl Target {
    fn new(
        call: &str,
        rank: c_int,
        disp: MPI_Aint,
        count: MPI_Count,
        dt: MPI_Datatype,
    ) -> Result<Target, Error> {
        Ok(Target {
            rank,
            disp,
            count: ptr::count(call, "target_count", count)?,
            dt,
        })
    }
}

fn op_arg(call: &str, h: MPI_Op, t: &Target, dt: &gmpi::UserDatatype) -> Result<Op, Error> {
    if decode(Kind::Op, h).is_some() {
        return Err(err(
            ErrorClass::Op,
            call,
            "op is a user-defined operation; one-sided accumulates take predefined operations \
             only",
        ));
    }
    resolve::op(call, h, t.dt, dt)
}

#[allow(clippy::too_many_arguments)]
fn put_get(
    call: &str,
    put: bool,
    o: *const c_void,
    ocount: MPI_Count,
    odt: MPI_Datatype,
    t: Target,
    h: MPI_Win,
    request: Option<*mut MPI_Request>,
) -> Result<(), Error> {
    with_win(call, h, |w| {
        let v = origin(call, "origin_addr", o, ocount, odt, !put)?;
        let tdt = resolve::dtype(call, t.dt)?;
        if request.is_some() {
            w.check_request_epoch(call, t.rank)?;
        }
        if put {
            w.put(call, &v, t.rank, t.disp, t.count, &tdt)
        } else {
            w.get(call, &v, t.rank, t.disp, t.count, &tdt)
        }
    })?;
    done(call, h, request)
}

/// A request-based operation's request: complete already.
fn done(call: &str, h: MPI_Win, request: Option<*mut MPI_Request>) -> Result<(), Error> {
    match request {
        Some(r) => ptr::write(call, "request", r, new_done_request(h, MPI_Status::empty())),
        None => Ok(()),
    }
}

#[allow(clippy::too_many_arguments)]
fn accumulate(
    call: &str,
    o: *const c_void,
    ocount: MPI_Count,
    odt: MPI_Datatype,
    t: Target,
    op: MPI_Op,
    h: MPI_Win,
    request: Option<*mut MPI_Request>,
) -> Result<(), Error> {
    with_win(call, h, |w| {
        let tdt = resolve::dtype(call, t.dt)?;
        let op = op_arg(call, op, &t, &tdt)?;
        let v = origin(call, "origin_addr", o, ocount, odt, false)?;
        if request.is_some() {
            w.check_request_epoch(call, t.rank)?;
        }
        w.accumulate(call, &v, t.rank, t.disp, t.count, &tdt, &op)
    })?;
    done(call, h, request)
}

#[allow(clippy::too_many_arguments)]
fn get_accumulate(
    call: &str,
    o: *const c_void,
    ocount: MPI_Count,
    odt: MPI_Datatype,
    r: *mut c_void,
    rcount: MPI_Count,
    rdt: MPI_Datatype,
    t: Target,
    op: MPI_Op,
    h: MPI_Win,
    request: Option<*mut MPI_Request>,
) -> Result<(), Error> {
    with_win(call, h, |w| {
        let tdt = resolve::dtype(call, t.dt)?;
        let op = op_arg(call, op, &t, &tdt)?;
        let res = origin(call, "result_addr", r, rcount, rdt, true)?;
        let v = match op {
            // With MPI_NO_OP the origin buffer is ignored (it may be NULL).
            Op::NoOp => None,
            _ => Some(origin(call, "origin_addr", o, ocount, odt, false)?),
        };
        if request.is_some() {
            w.check_request_epoch(call, t.rank)?;
        }
        w.get_accumulate(call, v.as_ref(), &res, t.rank, t.disp, t.count, &tdt, &op)
    })?;
    done(call, h, request)
}

// ---- attributes ----

fn get_attr(
    call: &str,
    h: MPI_Win,
    key: c_int,
    out: *mut c_void,
    flag: *mut c_int,
) -> Result<(), Error> {
    win(call, h)?;
    if out.is_null() || flag.is_null() {
        return Err(err(ErrorClass::Arg, call, "attribute_val or flag is NULL"));
    }
    let val: Option<u64> = with_obj(call, h, |o| {
        let v = &o.vals;
        Some(match key {
            MPI_WIN_BASE => {
                if o.win.flavor() == WinFlavor::Dynamic || o.win.size() == 0 {
                    0
                } else {
                    o.win.base()
                }
            }
            MPI_WIN_SIZE => std::ptr::addr_of!(v.size) as u64,
            MPI_WIN_DISP_UNIT => std::ptr::addr_of!(v.disp_unit) as u64,
            MPI_WIN_CREATE_FLAVOR => std::ptr::addr_of!(v.flavor) as u64,
            MPI_WIN_MODEL => std::ptr::addr_of!(v.model) as u64,
            _ => return None,
        })
    })?;
    match val {
        Some(v) => {
            ptr::write(call, "attribute_val", out.cast::<u64>(), v)?;
            ptr::write(call, "flag", flag, 1)
        }
        None => cache::get(call, Obj::Win(h), key, out, flag),
    }
}

fn lock_type(call: &str, lt: c_int) -> Result<LockType, Error> {
    match lt {
        MPI_LOCK_EXCLUSIVE => Ok(LockType::Exclusive),
        MPI_LOCK_SHARED => Ok(LockType::Shared),
        _ => Err(err(
            ErrorClass::LockType,
            call,
            format!("lock_type = {lt}; it must be MPI_LOCK_EXCLUSIVE or MPI_LOCK_SHARED"),
        )),
    }
}

mpi_fn! {
    // ---- creation and destruction ----

    fn Win_create(base: *mut c_void, size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, win: *mut MPI_Win) {
        create(CALL, base, size, disp_unit as MPI_Aint, info, comm, win)
    }

    fn Win_create_c(base: *mut c_void, size: MPI_Aint, disp_unit: MPI_Aint, info: MPI_Info, comm: MPI_Comm, win: *mut MPI_Win) {
        create(CALL, base, size, disp_unit, info, comm, win)
    }

    fn Win_allocate(size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut MPI_Win) {
        allocate(CALL, false, size, disp_unit as MPI_Aint, info, comm, baseptr, win)
    }

    fn Win_allocate_c(size: MPI_Aint, disp_unit: MPI_Aint, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut MPI_Win) {
        allocate(CALL, false, size, disp_unit, info, comm, baseptr, win)
    }

    fn Win_allocate_shared(size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut MPI_Win) {
        allocate(CALL, true, size, disp_unit as MPI_Aint, info, comm, baseptr, win)
    }

    fn Win_allocate_shared_c(size: MPI_Aint, disp_unit: MPI_Aint, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut MPI_Win) {
        allocate(CALL, true, size, disp_unit, info, comm, baseptr, win)
    }

    fn Win_create_dynamic(info: MPI_Info, comm: MPI_Comm, win: *mut MPI_Win) {
        let c = resolve::comm(CALL, comm)?;
        let info = info_of(CALL, info)?;
        out_win(CALL, win)?;
        let w = Window::create_dynamic(&c)?;
        ptr::write(CALL, "win", win, register(w, info))
    }

    fn Win_free(win: *mut MPI_Win) {
        let h = ptr::read(CALL, "win", win)?;
        let w = self::win(CALL, h)?;
        w.free()?;
        cache::delete_all(CALL, Obj::Win(h))?;
        if let Some(i) = decode(Kind::Win, h) {
            state().wins.remove(i);
        }
        forget_win();
        ptr::write(CALL, "win", win, MPI_WIN_NULL)
    }

    fn Win_shared_query(win: MPI_Win, rank: c_int, size: *mut MPI_Aint, disp_unit: *mut c_int, baseptr: *mut c_void) {
        let du = shared_query(CALL, win, rank, size, baseptr)?;
        ptr::write(CALL, "disp_unit", disp_unit, du as c_int)
    }

    fn Win_shared_query_c(win: MPI_Win, rank: c_int, size: *mut MPI_Aint, disp_unit: *mut MPI_Aint, baseptr: *mut c_void) {
        let du = shared_query(CALL, win, rank, size, baseptr)?;
        ptr::write(CALL, "disp_unit", disp_unit, du as MPI_Aint)
    }

    fn Win_attach(win: MPI_Win, base: *mut c_void, size: MPI_Aint) {
        let w = self::win(CALL, win)?;
        let n = size_arg(CALL, size)?;
        if base.is_null() && n > 0 {
            return Err(err(ErrorClass::Base, CALL, "base is NULL"));
        }
        ptr::win_attach(&w, base, n)
    }

    fn Win_detach(win: MPI_Win, base: *const c_void) {
        let w = self::win(CALL, win)?;
        w.detach(base as u64)
    }

    // ---- names, groups, info, attributes, error handlers ----

    fn Win_get_group(win: MPI_Win, group: *mut MPI_Group) {
        let w = self::win(CALL, win)?;
        if group.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "group is NULL"));
        }
        ptr::write(CALL, "group", group, new_group(w.group()))
    }

    fn Win_set_name(win: MPI_Win, win_name: *const c_char) {
        self::win(CALL, win)?;
        let mut s = ptr::cstr(CALL, "win_name", win_name)?;
        let mut n = s.len().min(MPI_MAX_OBJECT_NAME - 1);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        s.truncate(n);
        with_obj(CALL, win, |o| o.name = s)
    }

    fn Win_get_name(win: MPI_Win, win_name: *mut c_char, resultlen: *mut c_int) {
        if win == MPI_WIN_NULL {
            // MPI 4.1: the null handle's name.
            return ptr::write_cstr(CALL, "win_name", win_name, MPI_MAX_OBJECT_NAME, "MPI_WIN_NULL", resultlen);
        }
        self::win(CALL, win)?;
        let name = with_obj(CALL, win, |o| o.name.clone())?;
        ptr::write_cstr(CALL, "win_name", win_name, MPI_MAX_OBJECT_NAME, &name, resultlen)
    }

    fn Win_get_info(win: MPI_Win, info_used: *mut MPI_Info) {
        let w = self::win(CALL, win)?;
        if info_used.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "info_used is NULL"));
        }
        let mut i = with_obj(CALL, win, |o| o.info.clone())?;
        // The hints in effect: the program's, and gmpi's defaults for the rest.
        for key in ["no_locks", "same_disp_unit"] {
            if i.get(key).is_none() {
                i.set(key, "false");
            }
        }
        i.set("accumulate_ordering", "rar,raw,war,waw");
        i.set("accumulate_ops", "same_op_no_op");
        if w.flavor() == WinFlavor::Shared {
            i.set("alloc_shared_noncontig", "false");
        }
        ptr::write(CALL, "info_used", info_used, new_info(i))
    }

    safe fn Win_set_info(win: MPI_Win, info: MPI_Info) {
        self::win(CALL, win)?;
        let new = info_of(CALL, info)?;
        with_obj(CALL, win, |o| {
            for (k, v) in new.entries {
                o.info.set(&k, &v);
            }
        })
    }

    fn Win_create_keyval(win_copy_attr_fn: Option<CopyFn>, win_delete_attr_fn: Option<DeleteFn>, win_keyval: *mut c_int, extra_state: *mut c_void) {
        cache::create_keyval(CALL, Kind::Win, win_copy_attr_fn, win_delete_attr_fn, win_keyval, extra_state)
    }

    fn Win_free_keyval(win_keyval: *mut c_int) {
        cache::free_keyval(CALL, Kind::Win, win_keyval)
    }

    fn Win_set_attr(win: MPI_Win, win_keyval: c_int, attribute_val: *mut c_void) {
        self::win(CALL, win)?;
        cache::set(CALL, Obj::Win(win), win_keyval, attribute_val as AttrVal)
    }

    fn Win_get_attr(win: MPI_Win, win_keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) {
        get_attr(CALL, win, win_keyval, attribute_val, flag)
    }

    safe fn Win_delete_attr(win: MPI_Win, win_keyval: c_int) {
        self::win(CALL, win)?;
        cache::delete(CALL, Obj::Win(win), win_keyval)
    }

    fn Win_create_errhandler(win_errhandler_fn: Option<CommErrFn>, errhandler: *mut MPI_Errhandler) {
        crate::env::create_errhandler(CALL, win_errhandler_fn, errhandler)
    }

    safe fn Win_set_errhandler(win: MPI_Win, errhandler: MPI_Errhandler) {
        self::win(CALL, win)?;
        errors::check_errhandler(CALL, errhandler)?;
        with_obj(CALL, win, |o| o.errh = errhandler)
    }

    fn Win_get_errhandler(win: MPI_Win, errhandler: *mut MPI_Errhandler) {
        self::win(CALL, win)?;
        let e = with_obj(CALL, win, |o| o.errh)?;
        ptr::write(CALL, "errhandler", errhandler, e)
    }

    safe fn Win_call_errhandler(win: MPI_Win, errorcode: c_int) {
        self::win(CALL, win)?;
        let msg = errors::string_of(errorcode).unwrap_or_else(|| format!("error code {errorcode}"));
        errors::invoke(win, errorcode, &format!("MPI_Win_call_errhandler: {msg} (on rank {})", world_rank()));
        Ok(())
    }

    // ---- synchronisation ----

    safe fn Win_fence(assert: c_int, win: MPI_Win) {
        self::win(CALL, win)?.fence(assert)
    }

    safe fn Win_lock(lock_type: c_int, rank: c_int, assert: c_int, win: MPI_Win) {
        let w = self::win(CALL, win)?;
        let lt = self::lock_type(CALL, lock_type)?;
        w.lock(lt, rank, assert)
    }

    safe fn Win_unlock(rank: c_int, win: MPI_Win) {
        self::win(CALL, win)?.unlock(rank)
    }

    safe fn Win_lock_all(assert: c_int, win: MPI_Win) {
        self::win(CALL, win)?.lock_all(assert)
    }

    safe fn Win_unlock_all(win: MPI_Win) {
        self::win(CALL, win)?.unlock_all()
    }

    fn Win_flush(rank: c_int, win: MPI_Win) fast {
        flush_fast(rank, win)
    } {
        with_win(CALL, win, |w| w.flush(CALL, Some(rank)))
    }

    fn Win_flush_local(rank: c_int, win: MPI_Win) fast {
        flush_fast(rank, win)
    } {
        with_win(CALL, win, |w| w.flush(CALL, Some(rank)))
    }

    safe fn Win_flush_all(win: MPI_Win) {
        with_win(CALL, win, |w| w.flush(CALL, None))
    }

    safe fn Win_flush_local_all(win: MPI_Win) {
        with_win(CALL, win, |w| w.flush(CALL, None))
    }

    safe fn Win_sync(win: MPI_Win) {
        self::win(CALL, win)?.sync()
    }

    safe fn Win_post(group: MPI_Group, assert: c_int, win: MPI_Win) {
        let w = self::win(CALL, win)?;
        let g = resolve::group(CALL, group)?;
        w.post(&g, assert)
    }

    safe fn Win_start(group: MPI_Group, assert: c_int, win: MPI_Win) {
        let w = self::win(CALL, win)?;
        let g = resolve::group(CALL, group)?;
        w.start(&g, assert)
    }

    safe fn Win_complete(win: MPI_Win) {
        self::win(CALL, win)?.complete()
    }

    safe fn Win_wait(win: MPI_Win) {
        self::win(CALL, win)?.wait()
    }

    fn Win_test(win: MPI_Win, flag: *mut c_int) {
        let w = self::win(CALL, win)?;
        if flag.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "flag is NULL"));
        }
        let done = w.test()?;
        ptr::write(CALL, "flag", flag, c_int::from(done))
    }

    // ---- operations ----

    fn Put(origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: MPI_Datatype, win: MPI_Win) fast {
        put_get_fast(CALL, true, origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win)
    } {
        let t = Target::new(CALL, target_rank, target_disp, target_count.into(), target_datatype)?;
        put_get(CALL, true, origin_addr, origin_count.into(), origin_datatype, t, win, None)
    }

    fn Put_c(origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: MPI_Datatype, win: MPI_Win) {
        let t = Target::new(CALL, target_rank, target_disp, target_count, target_datatype)?;
        put_get(CALL, true, origin_addr, origin_count, origin_datatype, t, win, None)
    }

    fn Get(origin_addr: *mut c_void, origin_count: c_int, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: MPI_Datatype, win: MPI_Win) fast {
        put_get_fast(CALL, false, origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win)
    } {
        let t = Target::new(CALL, target_rank, target_disp, target_count.into(), target_datatype)?;
        put_get(CALL, false, origin_addr, origin_count.into(), origin_datatype, t, win, None)
    }

    fn Get_c(origin_addr: *mut c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: MPI_Datatype, win: MPI_Win) {
        let t = Target::new(CALL, target_rank, target_disp, target_count, target_datatype)?;
        put_get(CALL, false, origin_addr, origin_count, origin_datatype, t, win, None)
    }

    fn Rput(origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request) {
        let t = Target::new(CALL, target_rank, target_disp, target_count.into(), target_datatype)?;
        put_get(CALL, true, origin_addr, origin_count.into(), origin_datatype, t, win, Some(request))
    }

    fn Rput_c(origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request) {
        let t = Target::new(CALL, target_rank, target_disp, target_count, target_datatype)?;
        put_get(CALL, true, origin_addr, origin_count, origin_datatype, t, win, Some(request))
    }

    fn Rget(origin_addr: *mut c_void, origin_count: c_int, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request) {
        let t = Target::new(CALL, target_rank, target_disp, target_count.into(), target_datatype)?;
        put_get(CALL, false, origin_addr, origin_count.into(), origin_datatype, t, win, Some(request))
    }

    fn Rget_c(origin_addr: *mut c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request) {
        let t = Target::new(CALL, target_rank, target_disp, target_count, target_datatype)?;
        put_get(CALL, false, origin_addr, origin_count, origin_datatype, t, win, Some(request))
    }

    fn Accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win) fast {
        if origin_datatype != target_datatype || origin_count != target_count {
            None
        } else {
            acc_fast(CALL, origin_addr, None, origin_count, origin_datatype, target_rank, target_disp, op, win)
        }
    } {
        let t = Target::new(CALL, target_rank, target_disp, target_count.into(), target_datatype)?;
        accumulate(CALL, origin_addr, origin_count.into(), origin_datatype, t, op, win, None)
    }

    fn Accumulate_c(origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win) {
        let t = Target::new(CALL, target_rank, target_disp, target_count, target_datatype)?;
        accumulate(CALL, origin_addr, origin_count, origin_datatype, t, op, win, None)
    }

    fn Raccumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request) {
        let t = Target::new(CALL, target_rank, target_disp, target_count.into(), target_datatype)?;
        accumulate(CALL, origin_addr, origin_count.into(), origin_datatype, t, op, win, Some(request))
    }

    fn Raccumulate_c(origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request) {
        let t = Target::new(CALL, target_rank, target_disp, target_count, target_datatype)?;
        accumulate(CALL, origin_addr, origin_count, origin_datatype, t, op, win, Some(request))
    }

    fn Get_accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype, result_addr: *mut c_void, result_count: c_int, result_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win) fast {
        if origin_datatype != target_datatype || result_datatype != target_datatype
            || origin_count != target_count || result_count != target_count {
            None
        } else {
            acc_fast(CALL, origin_addr, Some(result_addr), target_count, target_datatype, target_rank, target_disp, op, win)
        }
    } {
        let t = Target::new(CALL, target_rank, target_disp, target_count.into(), target_datatype)?;
        get_accumulate(CALL, origin_addr, origin_count.into(), origin_datatype, result_addr, result_count.into(), result_datatype, t, op, win, None)
    }

    fn Get_accumulate_c(origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype, result_addr: *mut c_void, result_count: MPI_Count, result_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win) {
        let t = Target::new(CALL, target_rank, target_disp, target_count, target_datatype)?;
        get_accumulate(CALL, origin_addr, origin_count, origin_datatype, result_addr, result_count, result_datatype, t, op, win, None)
    }

    fn Rget_accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype, result_addr: *mut c_void, result_count: c_int, result_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request) {
        let t = Target::new(CALL, target_rank, target_disp, target_count.into(), target_datatype)?;
        get_accumulate(CALL, origin_addr, origin_count.into(), origin_datatype, result_addr, result_count.into(), result_datatype, t, op, win, Some(request))
    }

    fn Rget_accumulate_c(origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype, result_addr: *mut c_void, result_count: MPI_Count, result_datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request) {
        let t = Target::new(CALL, target_rank, target_disp, target_count, target_datatype)?;
        get_accumulate(CALL, origin_addr, origin_count, origin_datatype, result_addr, result_count, result_datatype, t, op, win, Some(request))
    }

    fn Fetch_and_op(origin_addr: *const c_void, result_addr: *mut c_void, datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, op: MPI_Op, win: MPI_Win) fast {
        acc_fast(CALL, origin_addr, Some(result_addr), 1, datatype, target_rank, target_disp, op, win)
    } {
        let t = Target::new(CALL, target_rank, target_disp, 1, datatype)?;
        get_accumulate(CALL, origin_addr, 1, datatype, result_addr, 1, datatype, t, op, win, None)
    }

    fn Compare_and_swap(origin_addr: *const c_void, compare_addr: *const c_void, result_addr: *mut c_void, datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, win: MPI_Win) fast {
        cas_fast(CALL, origin_addr, compare_addr, result_addr, datatype, target_rank, target_disp, win)
    } {
        with_win(CALL, win, |w| {
            let dt = resolve::dtype(CALL, datatype)?;
            let o = origin(CALL, "origin_addr", origin_addr, 1, datatype, false)?;
            let c = origin(CALL, "compare_addr", compare_addr, 1, datatype, false)?;
            let r = origin(CALL, "result_addr", result_addr, 1, datatype, true)?;
            w.compare_and_swap(CALL, &o, &c, &r, target_rank, target_disp, &dt)
        })
    }
}
