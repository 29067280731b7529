//! Buffered sends (`MPI_Bsend`, `MPI_Ibsend`, `MPI_Bsend_init`) and the
//! buffers they draw on: the process's (`MPI_Buffer_attach`), and MPI 4.1's
//! per communicator (`MPI_Comm_attach_buffer`) and per session
//! (`MPI_Session_attach_buffer`), with their flushes (`MPI_Buffer_flush`,
//! `_iflush`, `MPI_Comm_flush_buffer`, `MPI_Session_flush_buffer` and the
//! non-blocking forms) and `MPI_BUFFER_AUTOMATIC` (no size limit).
//!
//! A buffered send copies its data and sends the copy in the background;
//! the attached buffer is the budget the copies are charged against (each
//! message plus `MPI_BSEND_OVERHEAD`), so a program sees the same
//! `MPI_ERR_BUFFER` where its buffer is too small as with MPICH. A send on
//! a communicator uses that communicator's buffer if one is attached, else
//! that of the session its group came from (`MPI_Group_from_session_pset`
//! then `MPI_Comm_create_from_group`), else the process's.
//!
//! A flush waits for the owner's buffered sends to complete. A non-blocking
//! flush takes them over into its request, whose completion returns their
//! space to the buffer.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use gmpi::{Communicator, Error, ErrorClass, Request, View};

use crate::abi::*;
use crate::ptr;
use crate::tables::*;

/// Whose buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    Process,
    Comm(MPI_Comm),
    Session(MPI_Session),
}

impl Owner {
    fn what(self) -> String {
        match self {
            Owner::Process => "the process".into(),
            Owner::Comm(h) => format!("communicator {h:#x}"),
            Owner::Session(h) => format!("session {h:#x}"),
        }
    }
}

/// A buffered send in flight: the request, the copy it sends from, and the
/// bytes of the attached buffer it holds. Fields drop in order: dropping the
/// request waits for it before the copy is freed.
#[derive(Debug)]
struct Buffered {
    req: Request<'static>,
    _data: Box<[u8]>,
    charge: usize,
}

/// An attached buffer and the buffered sends in flight on it.
#[derive(Debug, Default)]
struct Pool {
    addr: usize,
    size: usize,
    /// `MPI_BUFFER_AUTOMATIC`: no limit.
    automatic: bool,
    inflight: Vec<Buffered>,
    /// Bytes charged to sends in flight here.
    used: usize,
    /// Bytes charged to sends a non-blocking flush took over, returned
    /// when its request is freed.
    flushing: Arc<AtomicUsize>,
}

impl Pool {
    fn attached(&self) -> bool {
        self.automatic || self.addr != 0 || self.size > 0
    }

    /// Give back the space of the sends that have completed.
    fn reap(&mut self) {
        let used = &mut self.used;
        self.inflight.retain(|s| match s.req.test() {
            Ok(Some(_)) | Err(_) => {
                *used -= s.charge;
                false
            }
            Ok(None) => true,
        });
    }
}

#[derive(Default)]
struct Pools {
    by_owner: HashMap<Owner, Pool>,
    /// The session each communicator made from a session's group belongs
    /// to, and the session each such group came from.
    comm_session: HashMap<MPI_Comm, MPI_Session>,
    group_session: HashMap<MPI_Group, MPI_Session>,
}

static POOLS: LazyLock<Mutex<Pools>> = LazyLock::new(Default::default);

fn pools() -> MutexGuard<'static, Pools> {
    POOLS.lock().unwrap_or_else(|p| p.into_inner())
}

/// `group` came from `session` (`MPI_Group_from_session_pset`).
pub(crate) fn note_session_group(group: MPI_Group, session: MPI_Session) {
    pools().group_session.insert(group, session);
}

/// `comm` was made from `group` (`MPI_Comm_create_from_group`): it
/// belongs to the group's session, if the group came from one.
pub(crate) fn note_comm_from_group(comm: MPI_Comm, group: MPI_Group) {
    let mut p = pools();
    if let Some(&s) = p.group_session.get(&group) {
        p.comm_session.insert(comm, s);
    }
}

/// `group` was freed.
pub(crate) fn forget_group(group: MPI_Group) {
    pools().group_session.remove(&group);
}

/// `comm` was freed: its buffer (if any) goes, its sends still in flight
/// go on under the process's (their space stays charged there until they
/// complete).
pub(crate) fn forget_comm(comm: MPI_Comm) {
    let mut p = pools();
    p.comm_session.remove(&comm);
    if let Some(old) = p.by_owner.remove(&Owner::Comm(comm)) {
        let proc = p.by_owner.entry(Owner::Process).or_default();
        proc.used += old.used;
        proc.inflight.extend(old.inflight);
    }
}

/// A buffered send on `c` (handle `comm`): copy the data (charged to the
/// buffer it uses) and send the copy in the background.
pub(crate) fn bsend(
    call: &'static str,
    comm: MPI_Comm,
    c: &Communicator,
    v: &View,
    dest: c_int,
    tag: c_int,
) -> Result<(), Error> {
    let n = v.packed_size();
    let mut data = vec![0u8; n];
    v.pack_to(call, c.rank(), &mut data)?;
    let data: Box<[u8]> = data.into_boxed_slice();
    // Charged before the send starts; MPI_BSEND_OVERHEAD covers the record.
    let charge = n + MPI_BSEND_OVERHEAD as usize;
    let mut p = pools();
    let owner = [
        Some(Owner::Comm(comm)),
        p.comm_session.get(&comm).map(|&s| Owner::Session(s)),
    ]
    .into_iter()
    .flatten()
    .find(|o| p.by_owner.get(o).is_some_and(Pool::attached))
    .unwrap_or(Owner::Process);
    let pool = p.by_owner.entry(owner).or_default();
    pool.reap();
    let flushing = pool.flushing.load(Ordering::Acquire);
    if !pool.automatic && pool.used + flushing + charge > pool.size {
        return Err(err(
            ErrorClass::Buffer,
            call,
            format!(
                "the buffer attached to {} ({} bytes, {} in use) cannot hold this {n}-byte \
                 message plus MPI_BSEND_OVERHEAD",
                owner.what(),
                pool.size,
                pool.used + flushing,
            ),
        ));
    }
    // The boxed copy moves into the pool beside its request and is freed
    // only after the request completes.
    let req = ptr::detach_req(c.isend(&data[..], dest, tag)?);
    pool.used += charge;
    pool.inflight.push(Buffered {
        req,
        _data: data,
        charge,
    });
    Ok(())
}

/// Attach `buffer` (`size` bytes, or `MPI_BUFFER_AUTOMATIC`) to `owner`.
pub(crate) fn attach(
    call: &str,
    owner: Owner,
    buffer: *mut c_void,
    size: MPI_Count,
) -> Result<(), Error> {
    let automatic = buffer == MPI_BUFFER_AUTOMATIC;
    let n = if automatic {
        0
    } else {
        ptr::count(call, "size", size)?
    };
    if buffer.is_null() && n > 0 {
        return Err(err(ErrorClass::Buffer, call, "buffer is NULL"));
    }
    let mut p = pools();
    let pool = p.by_owner.entry(owner).or_default();
    if pool.attached() {
        return Err(err(
            ErrorClass::Buffer,
            call,
            format!(
                "a buffer is already attached to {} (detach it first)",
                owner.what()
            ),
        ));
    }
    pool.addr = buffer as usize;
    pool.size = n;
    pool.automatic = automatic;
    Ok(())
}

/// Detach `owner`'s buffer once its buffered sends have completed: write
/// its address (`MPI_BUFFER_AUTOMATIC` for an automatic one) to
/// `buffer_addr`; its size (0 for an automatic one).
pub(crate) fn detach(call: &str, owner: Owner, buffer_addr: *mut c_void) -> Result<usize, Error> {
    flush(owner)?;
    let pool = pools().by_owner.remove(&owner).unwrap_or_default();
    let (addr, size) = if pool.automatic {
        (MPI_BUFFER_AUTOMATIC as usize, 0)
    } else {
        (pool.addr, pool.size)
    };
    // Nothing attached: NULL and 0, as MPICH (sends a non-blocking flush
    // took over keep their own accounting).
    ptr::write(call, "buffer_addr", buffer_addr.cast::<usize>(), addr)?;
    Ok(size)
}

/// Wait for `owner`'s buffered sends (`MPI_Buffer_flush` and friends).
pub(crate) fn flush(owner: Owner) -> Result<(), Error> {
    let inflight = {
        let mut p = pools();
        let Some(pool) = p.by_owner.get_mut(&owner) else {
            return Ok(());
        };
        std::mem::take(&mut pool.inflight)
    };
    let mut first = Ok(());
    let mut freed = 0;
    for s in inflight {
        freed += s.charge;
        if let (Err(e), Ok(())) = (s.req.wait(), &first) {
            first = Err(e);
        }
    }
    if let Some(pool) = pools().by_owner.get_mut(&owner) {
        pool.used -= freed.min(pool.used);
    }
    first.map(|_| ())
}

/// What a non-blocking flush's request keeps: the copies its sends read
/// from, and the space they hold in the buffer, given back when dropped
/// (after the sends completed: `Active::keep` drops last).
struct Flushing {
    _data: Vec<Box<[u8]>>,
    charge: usize,
    pool: Arc<AtomicUsize>,
}

impl Drop for Flushing {
    fn drop(&mut self) {
        self.pool.fetch_sub(self.charge, Ordering::AcqRel);
    }
}

/// Start flushing `owner`'s buffered sends: the request completes once
/// they have (`comm` names the request's error handler).
pub(crate) fn iflush(call: &'static str, owner: Owner, comm: MPI_Comm) -> Result<Active, Error> {
    let (inflight, pool_debt) = {
        let mut p = pools();
        let pool = p.by_owner.entry(owner).or_default();
        pool.reap();
        let taken = std::mem::take(&mut pool.inflight);
        let charge: usize = taken.iter().map(|s| s.charge).sum();
        pool.used -= charge;
        pool.flushing.fetch_add(charge, Ordering::AcqRel);
        (taken, Arc::clone(&pool.flushing))
    };
    let charge = inflight.iter().map(|s| s.charge).sum();
    let mut reqs = Vec::with_capacity(inflight.len());
    let mut data = Vec::with_capacity(inflight.len());
    for s in inflight {
        reqs.push(s.req);
        data.push(s._data);
    }
    let keep = Flushing {
        _data: data,
        charge,
        pool: pool_debt,
    };
    let first = match reqs.pop() {
        Some(r) => r,
        // Nothing in flight: a request that is complete already.
        None => ptr::detach_req(crate::resolve::comm(call, MPI_COMM_SELF)?.isend(
            &[0u8; 0][..],
            MPI_PROC_NULL,
            0,
        )?),
    };
    let mut a = Active::group(first, reqs, comm);
    a.keep = Some(Box::new(keep));
    Ok(a)
}
