//! Layer 2 of the C ABI: every access to memory the C caller passed by
//! pointer, and every call of a C function pointer the caller registered.
//!
//! The MPI standard makes the caller responsible for its pointers: each
//! points to what the call's prototype says (an `int`, an array of the
//! stated length, a buffer holding `count` elements of the datatype) for the
//! duration of the call, and a non-blocking call's buffer stays valid until
//! the request completes. The helpers here check what can be checked — null,
//! the special values (`MPI_STATUS_IGNORE`, `MPI_IN_PLACE`), negative counts —
//! and then trust the rest. The helpers are safe functions because their
//! only callers are the bodies of the entry points, which pass on the
//! pointers their C caller gave them: each such entry point is an
//! `unsafe extern "C" fn` whose `# Safety` section is that contract (see
//! `frame.rs`), so the caller, not Rust code here, vouches for the pointer.
//!
//! This module knows the C types of [`crate::abi`] and nothing of handles:
//! its callers resolve a datatype ([`crate::resolve`]) before they view a
//! buffer of it.

use std::ffi::{c_char, c_int, c_void, CStr};

use gmpi::{Communicator, Datatype, Error, ErrorClass, Request, UserDatatype, View};

use crate::abi::{
    CommErrFn, CopyFn, DeleteFn, GreqCancelFn, GreqFreeFn, GreqQueryFn, MPI_Count, MPI_Datatype,
    MPI_Status, MPI_IN_PLACE, MPI_STATUS_IGNORE,
};
use crate::tables::{err, UserOpFn};

/// Store `v` through the out-parameter `p` (named `what`).
pub fn write<T>(call: &str, what: &str, p: *mut T, v: T) -> Result<(), Error> {
    if p.is_null() {
        return Err(err(ErrorClass::Arg, call, format!("{what} is NULL")));
    }
    // SAFETY: non-null, and the caller passed it as a `T *` out-parameter.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Read the value `p` points to.
pub fn read<T: Copy>(call: &str, what: &str, p: *const T) -> Result<T, Error> {
    if p.is_null() {
        return Err(err(ErrorClass::Arg, call, format!("{what} is NULL")));
    }
    // SAFETY: non-null, and the caller passed it as a `const T *`.
    Ok(unsafe { p.read_unaligned() })
}

/// The array of `n` elements at `p` (which may be NULL only if `n` is 0).
pub fn slice<'a, T>(call: &str, what: &str, p: *const T, n: usize) -> Result<&'a [T], Error> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(err(ErrorClass::Arg, call, format!("{what} is NULL")));
    }
    // SAFETY: non-null; the caller promises `n` elements (the length the
    // standard ties this array to, e.g. the group size or `count`).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The writable array of `n` elements at `p`.
pub fn slice_mut<'a, T>(call: &str, what: &str, p: *mut T, n: usize) -> Result<&'a mut [T], Error> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(err(ErrorClass::Arg, call, format!("{what} is NULL")));
    }
    // SAFETY: as `slice`, and the caller lends the array for writing.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// A C count argument, an `int` or an `MPI_Count` (the `_c` calls), as
/// `usize` (`MPI_ERR_COUNT` if negative).
pub fn count(call: &str, what: &str, n: impl Into<MPI_Count>) -> Result<usize, Error> {
    let n: MPI_Count = n.into();
    usize::try_from(n)
        .map_err(|_| err(ErrorClass::Count, call, format!("{what} = {n} is negative")))
}

/// An array length argument (`MPI_ERR_ARG` if negative).
pub fn len(call: &str, what: &str, n: c_int) -> Result<usize, Error> {
    usize::try_from(n).map_err(|_| err(ErrorClass::Arg, call, format!("{what} = {n} is negative")))
}

/// The NUL-terminated string at `p`.
pub fn cstr(call: &str, what: &str, p: *const c_char) -> Result<String, Error> {
    if p.is_null() {
        return Err(err(ErrorClass::Arg, call, format!("{what} is NULL")));
    }
    // SAFETY: non-null; the caller passes a NUL-terminated string.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Copy `s` (cut to `max - 1` bytes) with a NUL into the caller's `max`-byte
/// array at `p`, and its length into `len` if `len` is not NULL.
pub fn write_cstr(
    call: &str,
    what: &str,
    p: *mut c_char,
    max: usize,
    s: &str,
    len: *mut c_int,
) -> Result<(), Error> {
    let mut n = s.len().min(max - 1);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    let out = slice_mut(call, what, p.cast::<u8>(), n + 1)?;
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out[n] = 0;
    if !len.is_null() {
        write(call, "resultlen", len, n as c_int)?;
    }
    Ok(())
}

/// Whether a buffer argument is `MPI_IN_PLACE`.
#[inline]
pub fn in_place(p: *const c_void) -> bool {
    p as usize == MPI_IN_PLACE
}

/// The user buffer `(p, count, dt)` named `what`. A NULL pointer is allowed
/// when no byte is touched, and for `MPI_BOTTOM` with a datatype whose
/// displacements are absolute addresses.
pub fn buf(
    call: &str,
    what: &str,
    p: *const c_void,
    count: impl Into<MPI_Count>,
    dt: &UserDatatype,
    writable: bool,
) -> Result<View, Error> {
    let count: MPI_Count = count.into();
    let n = self::count(call, "count", count)?;
    let span = dt.size().max(dt.extent().unsigned_abs()) as u128;
    if n as u128 * span > isize::MAX as u128 {
        return Err(err(
            ErrorClass::Count,
            call,
            format!("count = {count} is too large: {what} would span more than the address space"),
        ));
    }
    if in_place(p) {
        return Err(err(
            ErrorClass::Buffer,
            call,
            format!("{what} is MPI_IN_PLACE, which this call does not accept there"),
        ));
    }
    if p.is_null() && n > 0 && dt.size() > 0 && dt.true_lb() == 0 {
        return Err(err(
            ErrorClass::Buffer,
            call,
            format!("{what} is NULL but count is {count}"),
        ));
    }
    if p.is_null() && n > 0 && dt.size() > 0 && dt.is_committed() {
        // MPI_BOTTOM: the data lies at absolute addresses from `lo` up. The
        // runtime's view spans the origin too, so view the same bytes as one
        // element of the type shifted down by `lo`, placed at address `lo`.
        let spread = (n as i128 - 1) * dt.extent() as i128;
        let lo = dt.true_lb() as i128 + spread.min(0);
        if lo > 0 {
            let lo = lo as isize;
            let whole = c_int::try_from(count).map_err(|_| {
                err(
                    ErrorClass::Count,
                    call,
                    format!("count = {count} is too large for a buffer at MPI_BOTTOM"),
                )
            })?;
            let shifted = shifted_type(whole, dt, -lo)?;
            // SAFETY: as below; these are the same bytes the caller lends.
            return unsafe { View::from_raw(call, lo as usize, 1, &shifted, writable) };
        }
    }
    // SAFETY: the caller lends `count` elements of `dt` at `p` for the call
    // (and, for a non-blocking call, until its request completes), as the
    // MPI standard requires.
    unsafe { View::from_raw(call, p as usize, n, dt, writable) }
}

/// The user buffer `(p, count, d)` when `d` is the basic type of a
/// predefined datatype (from [`crate::resolve::fast_dtype`]) and the buffer
/// passes [`buf`]'s checks outright (`count >= 0`, not `MPI_IN_PLACE`, not
/// NULL unless `count` is 0): the view [`buf`] would make, with no look-up.
/// `None` for anything else: the caller falls back to [`buf`], which checks
/// it in full.
#[inline]
pub fn fast_buf(
    p: *const c_void,
    count: impl Into<MPI_Count>,
    d: Datatype,
    writable: bool,
) -> Option<View> {
    let count: MPI_Count = count.into();
    if count < 0 || in_place(p) || (p.is_null() && count != 0) {
        return None;
    }
    if count as u128 * d.size() as u128 > isize::MAX as u128 {
        return None;
    }
    // SAFETY: as in `buf`: the caller lends `count` elements of `dt` at `p`
    // for the call (and until a non-blocking call's request completes).
    Some(unsafe { View::from_raw_basic(p as usize, count as usize, d, writable) })
}

/// The byte length of the user buffer `(p, count)` of elements of `size`
/// bytes (from [`crate::resolve::fast_size`]: a predefined datatype the
/// runtime views as a basic type) when the buffer passes [`buf`]'s checks
/// outright, as for [`fast_buf`]; `None` otherwise.
#[inline(always)]
pub fn fast_bytes(p: *const c_void, count: impl Into<MPI_Count>, size: usize) -> Option<usize> {
    let count: MPI_Count = count.into();
    if count < 0 || in_place(p) || (p.is_null() && count != 0) {
        return None;
    }
    (count as usize)
        .checked_mul(size)
        .filter(|&len| len <= isize::MAX as usize)
}

/// The `len` bytes at `p` (from [`fast_bytes`]) as a slice, if they are
/// host memory (`None` otherwise: the caller's general path reaches any
/// memory). The slice lives for the call only.
#[inline(always)]
pub fn fast_host<'a>(p: *const c_void, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    if !gmpi::is_host_memory(p as u64, len) {
        return None;
    }
    // SAFETY: `p` is not NULL (fast_bytes refuses NULL with bytes) and the
    // caller lends `len` bytes of host memory there for the call, as MPI
    // requires of a send-side buffer.
    Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// [`fast_host`] for a buffer the call writes (a result buffer, which MPI
/// forbids to overlap the call's other buffers).
#[inline(always)]
pub fn fast_host_mut<'a>(p: *mut c_void, len: usize) -> Option<&'a mut [u8]> {
    if len == 0 {
        return Some(&mut []);
    }
    if !gmpi::is_host_memory(p as u64, len) {
        return None;
    }
    // SAFETY: as `fast_host`, and the caller lends these bytes writable
    // and unaliased for the call.
    Some(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// `MPI_Send`/`MPI_Ssend` of the `len` bytes at `p` (from [`fast_bytes`]).
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn send_bytes(
    c: &Communicator,
    call: &'static str,
    p: *const c_void,
    len: usize,
    dest: c_int,
    tag: c_int,
    sync: bool,
) -> Result<(), Error> {
    // SAFETY: the caller lends the `len` bytes at `p` (`count` elements of a
    // contiguous predefined type) for the call.
    unsafe { c.send_bytes(call, p as usize, len, dest, tag, sync) }
}

/// `MPI_Recv` into the `len` bytes at `p` (from [`fast_bytes`]).
#[inline]
pub fn recv_bytes(
    c: &Communicator,
    call: &'static str,
    p: *mut c_void,
    len: usize,
    src: c_int,
    tag: c_int,
) -> Result<gmpi::Status, Error> {
    // SAFETY: the caller lends the `len` writable bytes at `p` for the call
    // and does not touch them meanwhile (the MPI contract of MPI_Recv).
    unsafe { c.recv_bytes(call, p as usize, len, src, tag) }
}

/// `MPI_Isend`/`MPI_Issend` of the `len` bytes at `p` (from [`fast_bytes`]).
#[inline]
pub fn isend_bytes(
    c: &Communicator,
    call: &'static str,
    p: *const c_void,
    len: usize,
    dest: c_int,
    tag: c_int,
    sync: bool,
) -> Result<Request<'static>, Error> {
    // SAFETY: the caller lends the `len` bytes at `p` until the request
    // completes (the MPI contract of a non-blocking send).
    unsafe { c.isend_bytes(call, p as usize, len, dest, tag, sync) }
}

/// `MPI_Irecv` into the `len` bytes at `p` (from [`fast_bytes`]).
#[inline]
pub fn irecv_bytes(
    c: &Communicator,
    call: &'static str,
    p: *mut c_void,
    len: usize,
    src: c_int,
    tag: c_int,
) -> Result<Request<'static>, Error> {
    // SAFETY: the caller lends the `len` writable bytes at `p` and does not
    // touch them until the request completes (the MPI contract of
    // MPI_Irecv).
    unsafe { c.irecv_bytes(call, p as usize, len, src, tag) }
}

/// [`isend_bytes`] with no request made: `None` if the send completed at
/// once, else its pml id (`gmpi`'s `isend_raw`).
#[inline]
pub fn isend_raw(
    c: &Communicator,
    call: &'static str,
    p: *const c_void,
    len: usize,
    dest: c_int,
    tag: c_int,
    sync: bool,
) -> Result<Option<u64>, Error> {
    // SAFETY: as in `isend_bytes`.
    unsafe { c.isend_raw(call, p as usize, len, dest, tag, sync) }
}

/// [`irecv_bytes`] with no request made: the receive's pml id, `None` for
/// a receive from `MPI_PROC_NULL` (`gmpi`'s `irecv_raw`).
#[inline]
pub fn irecv_raw(
    c: &Communicator,
    call: &'static str,
    p: *mut c_void,
    len: usize,
    src: c_int,
    tag: c_int,
) -> Result<Option<u64>, Error> {
    // SAFETY: as in `irecv_bytes`.
    unsafe { c.irecv_raw(call, p as usize, len, src, tag) }
}

/// `MPI_Win_create` over the `size` bytes at `base`.
pub fn win_create(
    c: &gmpi::Communicator,
    base: *mut c_void,
    size: usize,
    disp_unit: isize,
) -> Result<gmpi::Window, Error> {
    // SAFETY: the MPI contract of MPI_Win_create: the caller keeps the
    // `size` bytes at `base` valid (and lets other ranks read and write them
    // during their epochs) until MPI_Win_free.
    unsafe { gmpi::Window::create_raw(c, base as u64, size, disp_unit) }
}

/// `MPI_Win_attach` of the `size` bytes at `base`.
pub fn win_attach(w: &gmpi::Window, base: *mut c_void, size: usize) -> Result<(), Error> {
    // SAFETY: the MPI contract of MPI_Win_attach: the memory stays valid
    // until it is detached or the window freed.
    unsafe { w.attach(base as u64, size) }
}

/// Erase a request's borrow: its buffer is caller memory (a raw view) or a
/// copy owned beside it.
pub fn detach_req(r: Request<'_>) -> Request<'static> {
    // SAFETY: every request of the C ABI is on raw views, whose memory the C
    // caller keeps valid until completion (the MPI contract), or on a copy
    // stored beside the request in the same `Active` (dropped after it
    // completes).
    unsafe { r.detach() }
}

/// The `len` bytes at `p` named `what`: a byte range computed from
/// displacements (`MPI_Alltoallw`), which may be longer than a C `int`
/// counts, viewed as `len` elements of `byte` (`MPI_BYTE`). NULL is allowed
/// only when `len` is 0.
pub fn buf_bytes(
    call: &str,
    what: &str,
    p: *const c_void,
    len: usize,
    byte: &UserDatatype,
    writable: bool,
) -> Result<View, Error> {
    if in_place(p) {
        return Err(err(
            ErrorClass::Buffer,
            call,
            format!("{what} is MPI_IN_PLACE, which this call does not accept there"),
        ));
    }
    if p.is_null() && len > 0 {
        return Err(err(
            ErrorClass::Buffer,
            call,
            format!("{what} is NULL but spans {len} bytes"),
        ));
    }
    // SAFETY: the caller lends the bytes `p..p+len` for the call (and, for a
    // non-blocking call, until its request completes): the range covers
    // exactly the blocks its counts, displacements and datatypes name.
    unsafe { View::from_raw(call, p as usize, len, byte, writable) }
}

/// `count` elements of `dt` as one element of a committed type whose data
/// starts `disp` bytes from its origin. The runtime's views cannot start
/// their region after element 0's address, so data at absolute addresses
/// (`MPI_BOTTOM`) is re-expressed this way, placed at its lowest address.
pub fn shifted_type(count: c_int, dt: &UserDatatype, disp: isize) -> Result<UserDatatype, Error> {
    let whole = UserDatatype::contiguous(count, dt)?;
    Ok(UserDatatype::structured(&[1], &[disp], &[whole])?.committed())
}

/// Store `st` in the caller's status unless it passed `MPI_STATUS_IGNORE`
/// (or NULL).
pub fn status(p: *mut MPI_Status, st: &MPI_Status) {
    if p.is_null() || p as usize == MPI_STATUS_IGNORE {
        return;
    }
    // SAFETY: not NULL and not MPI_STATUS_IGNORE: the caller passed a status.
    unsafe { p.write_unaligned(*st) };
}

/// Store `st` as element `i` of the caller's status array unless it passed
/// `MPI_STATUSES_IGNORE`.
pub fn status_at(p: *mut MPI_Status, i: usize, st: &MPI_Status) {
    if p.is_null() || p as usize == MPI_STATUS_IGNORE {
        return;
    }
    // SAFETY: the caller passed an array with one status per request, and
    // `i` indexes a request of the call.
    unsafe { p.add(i).write_unaligned(*st) };
}

/// Read the caller's status (for calls that take one as input).
pub fn read_status(call: &str, p: *const MPI_Status) -> Result<MPI_Status, Error> {
    if p as usize == MPI_STATUS_IGNORE {
        return Err(err(ErrorClass::Arg, call, "status is MPI_STATUS_IGNORE"));
    }
    read(call, "status", p)
}

/// Call a C reduction function on `len` elements of `dt` (each at its
/// extent `ext` from the last). An `int` function gets more than `INT_MAX`
/// elements in several calls.
pub fn call_user_op(
    f: UserOpFn,
    inv: *mut u8,
    inout: *mut u8,
    len: usize,
    ext: usize,
    mut dt: MPI_Datatype,
) {
    match f {
        UserOpFn::Large(f) => {
            let mut n = len as MPI_Count;
            // SAFETY: `f` is the function the user registered with
            // MPI_Op_create_c; the buffers hold `len` elements of `dt` in
            // its own layout.
            unsafe { f(inv.cast(), inout.cast(), &mut n, &mut dt) }
        }
        UserOpFn::Int(f) => {
            let mut done = 0;
            while done < len || len == 0 {
                let k = (len - done).min(c_int::MAX as usize);
                let mut n = k as c_int;
                let off = done * ext;
                // SAFETY: `f` is the function the user registered with
                // MPI_Op_create; elements `done..done + k` of both buffers
                // are `k` elements of `dt` in its own layout.
                unsafe { f(inv.add(off).cast(), inout.add(off).cast(), &mut n, &mut dt) }
                done += k;
                if len == 0 {
                    break;
                }
            }
        }
    }
}

/// Call a C communicator error handler.
pub fn call_errhandler(f: CommErrFn, mut comm: c_int, mut code: c_int) {
    // SAFETY: `f` is the function the user registered with
    // MPI_Comm_create_errhandler; it takes the communicator and the code by
    // pointer (further variadic arguments are implementation-specific and
    // gmpi passes none).
    unsafe { f(&mut comm, &mut code) }
}

/// Call a generalized request's query callback: its code and the status
/// it filled.
pub fn call_greq_query(f: GreqQueryFn, extra: usize, st: &mut MPI_Status) -> c_int {
    // SAFETY: `f` is the query function the user gave MPI_Grequest_start
    // with this extra state; it writes one MPI_Status, ours.
    unsafe { f(extra as *mut c_void, st) }
}

/// Call a generalized request's free callback.
pub fn call_greq_free(f: GreqFreeFn, extra: usize) -> c_int {
    // SAFETY: the free function given to MPI_Grequest_start, with its extra
    // state, called once.
    unsafe { f(extra as *mut c_void) }
}

/// Call a generalized request's cancel callback.
pub fn call_greq_cancel(f: GreqCancelFn, extra: usize, complete: bool) -> c_int {
    // SAFETY: the cancel function given to MPI_Grequest_start, with its
    // extra state.
    unsafe { f(extra as *mut c_void, c_int::from(complete)) }
}

/// Call an attribute copy callback; `(flag, value out)` or its error code.
pub fn call_copy(
    f: CopyFn,
    old: c_int,
    key: c_int,
    extra: usize,
    val: usize,
) -> Result<(bool, usize), c_int> {
    let mut out: usize = 0;
    let mut flag: c_int = 0;
    // SAFETY: `f` is the copy function the user registered with the keyval;
    // `out` and `flag` are valid locals.
    let rc = unsafe {
        f(
            old,
            key,
            extra as *mut c_void,
            val as *mut c_void,
            (&mut out as *mut usize).cast(),
            &mut flag,
        )
    };
    if rc != 0 {
        return Err(rc);
    }
    Ok((flag != 0, out))
}

/// Call an attribute delete callback; its return code.
pub fn call_delete(f: DeleteFn, obj: c_int, key: c_int, val: usize, extra: usize) -> c_int {
    // SAFETY: `f` is the delete function the user registered with the keyval.
    unsafe { f(obj, key, val as *mut c_void, extra as *mut c_void) }
}

/// Copy `n` bytes between caller memory regions (`MPI_Sendrecv_replace`
/// staging, `MPI_Get_address`).
pub fn addr_of(p: *const c_void) -> isize {
    p as isize
}

/// `MPI_Alloc_mem`: `n` bytes from the C heap (never NULL for `n = 0`).
pub fn alloc(n: usize) -> Option<*mut c_void> {
    // SAFETY: malloc with a non-zero size; NULL is checked below.
    let p = unsafe { libc::malloc(n.max(1)) };
    (!p.is_null()).then_some(p)
}

/// `MPI_Free_mem`.
pub fn free(p: *mut c_void) {
    // SAFETY: the caller passes memory from MPI_Alloc_mem (or NULL).
    unsafe { libc::free(p) }
}
