//! One-sided communication between nodes: active messages over the pml.
//!
//! A window whose ranks do not all share a node cannot reach its targets
//! by load/store or Cross Memory Attach. Its operations become messages on
//! the window's private communicator (its point-to-point context, which no
//! user message can match), carried by whatever btl joins each pair of
//! ranks: tcp between nodes, shm or loopback within one. Every target of
//! such a window, this rank included, is reached this way.
//!
//! (Puts and gets to a target joined by a btl with RDMA skip all this:
//! `mod.rs` reads and writes its memory directly.)
//!
//! **Origin** ([`call`]): an operation is one request (tag [`TAG_REQ`]:
//! header, target byte runs, data) and waits for the target's reply (on a
//! tag of its own, posted before the request leaves). So every operation
//! has completed at the target when its call returns, as it has on one
//! node: a fence is a barrier, a flush only orders memory, an unlock
//! releases the lock after everything done under it landed.
//!
//! **Target** ([`Agent`], owned by the engine): every progress pass
//! ([`serve`]) takes the requests that arrived on each window's context
//! (`improbe`, then `mrecv`), applies them to this rank's window memory in
//! the order they arrived, and sends the replies. One agent applies every
//! request of a process one at a time, so concurrent accumulates on one
//! target are atomic per element whatever their datatype, and those of one
//! origin are applied in its order. Wire input is checked: a malformed
//! request is answered with an error (or dropped with a warning when it
//! cannot even name its reply), never applied.
//!
//! **Passive-target progress** needs no call from the target: the first
//! such window of a process starts a progress thread (`gmpi-rma`), which
//! runs one progress pass (and so [`serve`]) whenever no other thread is
//! in gmpi: it only tries the engine lock, so it never waits for a call of
//! the program, never wakes one that sleeps in the transports, and leaves
//! the work to the program's own waits while it is in MPI. Between passes
//! it naps, 20 µs after a pass that served a request, doubling up to 1 ms
//! while none comes (so a request to a computing target waits at most
//! about 1 ms, and an idle process wakes 1000 times a second). It makes the
//! process multithreaded as far as the engine is concerned (waits let go
//! of the engine lock), and stops when the last such window is freed or at
//! `MPI_Finalize`.
//!
//! **Locks** live at the target: a lock request is answered when granted
//! (shared locks together, an exclusive one alone, waiters in arrival
//! order). **Accumulates** whose operation the target cannot name (the C
//! ABI's kernels of predefined operations on complex and long double
//! types, which are functions of the origin's process) take the target's
//! accumulate lock, read, combine at the origin, write, and release; the
//! agent holds back every other accumulate to that target meanwhile.
//! **Post/start/complete/wait** are plain messages ([`TAG_POST`],
//! [`TAG_COMPLETE`]) on the private communicator, one per epoch and pair.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use gmpi_pml::{Buf, MemKind, ReqId, SendMode};

use super::WinFlavor;
use crate::comm::{CommInner, Communicator};
use crate::datatype::{Datatype, Primitive};
use crate::engine::{self, Engine};
use crate::error::{Error, ErrorClass, Result};
use crate::op::Op;

/// Requests to a target's agent.
pub(crate) const TAG_REQ: i32 = 1;
/// `MPI_Win_post`: a target to each origin of its group.
pub(crate) const TAG_POST: i32 = 2;
/// `MPI_Win_complete`: an origin to each target of its group.
pub(crate) const TAG_COMPLETE: i32 = 3;
/// Replies: `TAG_REPLY + (sequence % TAG_REPLY)`, one tag per request in
/// flight from a window.
const TAG_REPLY: i32 = 1 << 20;

/// Request header: kind, primitive, operation, flags, reply tag, run count,
/// then the runs (offset i64, length u64), then the data.
const HDR: usize = 16;
const RUN: usize = 16;
/// Reply header: status (0: done, else 1 + the error class's index in
/// [`ErrorClass::ALL`]), then the data or the error's message.
const REPLY_HDR: usize = 8;
/// Longest error message a reply carries.
const MSG_MAX: usize = 400;

/// What a request asks of its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// Write the data to the runs.
    Put = 1,
    /// Reply with the runs' bytes.
    Get = 2,
    /// Combine the data into the runs; reply with the former bytes when
    /// the flag asks for them.
    Acc = 3,
    /// Data = new value then compare value; reply with the former value.
    Cas = 4,
    /// Lock shared (primitive byte 0) or exclusive (1); replied when granted.
    Lock = 5,
    /// Release the lock (same encoding).
    Unlock = 6,
    /// Take the target's accumulate lock; replied when granted.
    AccLock = 7,
    /// Release it.
    AccUnlock = 8,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Put,
            2 => Kind::Get,
            3 => Kind::Acc,
            4 => Kind::Cas,
            5 => Kind::Lock,
            6 => Kind::Unlock,
            7 => Kind::AccLock,
            8 => Kind::AccUnlock,
            _ => return None,
        })
    }

    /// Whether the accumulate lock holds it back.
    fn is_acc(self) -> bool {
        matches!(self, Kind::Acc | Kind::Cas | Kind::AccLock)
    }
}

/// Flag: the reply carries the target's former bytes.
const WANT_OLD: u8 = 1;

/// Every primitive, by its wire index.
const PRIMS: [Primitive; 24] = [
    Primitive::I8,
    Primitive::I16,
    Primitive::I32,
    Primitive::I64,
    Primitive::U8,
    Primitive::U16,
    Primitive::U32,
    Primitive::U64,
    Primitive::F32,
    Primitive::F64,
    Primitive::F16,
    Primitive::BF16,
    Primitive::Bool,
    Primitive::I128,
    Primitive::U128,
    Primitive::ISize,
    Primitive::USize,
    Primitive::Byte,
    Primitive::Char,
    Primitive::FloatInt,
    Primitive::DoubleInt,
    Primitive::LongInt,
    Primitive::TwoInt,
    Primitive::ShortInt,
];

fn prim_code(p: Primitive) -> u8 {
    PRIMS.iter().position(|&q| q == p).unwrap_or(16) as u8
}

/// A request, built by the origin.
pub(crate) struct Request {
    bytes: Vec<u8>,
}

impl Request {
    /// A request of `kind` on `runs` (target offsets, absolute addresses
    /// for dynamic windows), with room for `data` bytes after them.
    pub fn new(kind: Kind, runs: &[(i128, usize)], data: usize) -> Request {
        let mut bytes = Vec::with_capacity(HDR + RUN * runs.len() + data);
        bytes.extend_from_slice(&[kind as u8, 0, 0, 0]);
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&(runs.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        for &(o, l) in runs {
            bytes.extend_from_slice(&(o as i64).to_le_bytes());
            bytes.extend_from_slice(&(l as u64).to_le_bytes());
        }
        Request { bytes }
    }

    /// An accumulate: `el`'s primitive and `op`'s code, and whether the
    /// reply carries the former bytes.
    pub fn acc(mut self, el: Datatype, op: u8, want_old: bool) -> Request {
        self.bytes[1] = match el {
            Datatype::Primitive(p) => prim_code(p),
            _ => prim_code(Primitive::Byte),
        };
        self.bytes[2] = op;
        self.bytes[3] = if want_old { WANT_OLD } else { 0 };
        self
    }

    /// A lock request's type.
    pub fn exclusive(mut self, exclusive: bool) -> Request {
        self.bytes[1] = u8::from(exclusive);
        self
    }

    /// Append data.
    pub fn data(mut self, d: &[u8]) -> Request {
        self.bytes.extend_from_slice(d);
        self
    }
}

/// A request, as the target reads it.
struct Parsed<'a> {
    kind: Kind,
    prim: u8,
    op: u8,
    flags: u8,
    runs: Vec<(i64, u64)>,
    data: &'a [u8],
}

/// The reply tag of a request (readable even where the rest is not).
fn reply_tag(msg: &[u8]) -> Option<i32> {
    let t = i32::from_le_bytes(msg.get(4..8)?.try_into().ok()?);
    (TAG_REPLY..2 * TAG_REPLY).contains(&t).then_some(t)
}

fn parse(msg: &[u8]) -> std::result::Result<Parsed<'_>, String> {
    if msg.len() < HDR {
        return Err(format!(
            "a {}-byte request is shorter than its header",
            msg.len()
        ));
    }
    let kind = Kind::from_u8(msg[0]).ok_or_else(|| format!("unknown request kind {}", msg[0]))?;
    let n = u32::from_le_bytes(msg[8..12].try_into().expect("4 bytes")) as usize;
    let end = n
        .checked_mul(RUN)
        .and_then(|b| b.checked_add(HDR))
        .filter(|&e| e <= msg.len())
        .ok_or_else(|| format!("{n} runs do not fit a {}-byte request", msg.len()))?;
    let runs = msg[HDR..end]
        .chunks_exact(RUN)
        .map(|c| {
            (
                i64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(c[8..].try_into().expect("8 bytes")),
            )
        })
        .collect();
    Ok(Parsed {
        kind,
        prim: msg[1],
        op: msg[2],
        flags: msg[3],
        runs,
        data: &msg[end..],
    })
}

// ---- the origin ----

/// The origin's side of a window: the sequence of its reply tags.
#[derive(Debug, Default)]
pub(crate) struct Origin {
    seq: AtomicU32,
}

/// Send `req` to rank `t` of the window's communicator and wait for the
/// reply; its data (exactly `out.len()` bytes) lands in `out`. A target's
/// error comes back as that error, naming the target.
pub(crate) fn call(
    comm: &Communicator,
    origin: &Origin,
    call: &str,
    t: usize,
    mut req: Request,
    out: &mut [u8],
) -> Result<()> {
    use crate::comm::Handle;
    let tag = TAG_REPLY + (origin.seq.fetch_add(1, Ordering::Relaxed) % TAG_REPLY as u32) as i32;
    req.bytes[4..8].copy_from_slice(&tag.to_le_bytes());
    let mut reply = vec![0u8; REPLY_HDR + out.len().max(MSG_MAX)];
    let (rank, dest) = (comm.rank(), t as i32);
    let host = |addr: *const u8, len: usize| Buf {
        addr: addr as u64,
        len,
        kind: MemKind::Host,
    };
    let ctx = comm.inner.ctx;
    let got = engine::with(call, |e| {
        let pml = |err| Error::from_pml(err, call, rank);
        let r = comm
            .inner
            .recv_args(ctx, host(reply.as_mut_ptr(), reply.len()), dest, tag);
        let rh = e.driver.post_recv(r).map_err(pml)?;
        let s = comm.inner.send_args(
            ctx,
            host(req.bytes.as_ptr(), req.bytes.len()),
            dest,
            TAG_REQ,
            SendMode::Standard,
        );
        // The reply buffer is the receive's until it completes or is
        // cancelled: on every way out.
        let drop_reply = |e: &mut crate::engine::Locked| {
            if !e.driver.cancel(rh) {
                let _ = e.wait_handle(call, Handle::Pml(rh));
            }
            let _ = e.driver.test(rh);
        };
        match e.driver.send(s) {
            Ok(Some(sh)) => {
                if let Err(err) = e.wait_handle(call, Handle::Pml(sh)) {
                    drop_reply(e);
                    return Err(err);
                }
            }
            Ok(None) => {}
            Err(err) => {
                drop_reply(e);
                return Err(pml(err));
            }
        }
        e.wait_handle(call, Handle::Pml(rh)).map(|st| st.bytes)
    })?;
    if got < REPLY_HDR {
        return Err(Error::new(
            ErrorClass::Intern,
            call,
            rank,
            format!("rank {t} sent a {got}-byte reply, shorter than its header"),
        ));
    }
    match reply[0] {
        0 if got == REPLY_HDR + out.len() => {
            out.copy_from_slice(&reply[REPLY_HDR..got]);
            Ok(())
        }
        0 => Err(Error::new(
            ErrorClass::Intern,
            call,
            rank,
            format!(
                "rank {t} replied with {} bytes where {} were asked for",
                got - REPLY_HDR,
                out.len()
            ),
        )),
        c => {
            let class = ErrorClass::ALL
                .get(c as usize - 1)
                .copied()
                .unwrap_or(ErrorClass::Intern);
            let msg = String::from_utf8_lossy(&reply[REPLY_HDR..got]);
            Err(Error::new(
                class,
                call,
                rank,
                format!("at target rank {t}: {msg}"),
            ))
        }
    }
}

// ---- the target ----

/// This rank's memory of a window, as its agent applies requests to it.
#[derive(Debug)]
pub(crate) struct Target {
    comm: Arc<CommInner>,
    flavor: WinFlavor,
    base: u64,
    size: u64,
    on_device: bool,
    /// gmpi's own allocation (`MPI_Win_allocate`), kept alive while the
    /// agent may write it.
    _own: Option<Arc<OwnMem>>,
    /// Regions attached to a dynamic window: (base, size).
    pub attached: Vec<(u64, u64)>,
    /// Lock state: an exclusive holder, the shared holders' count, and the
    /// lock requests waiting (source, request).
    exclusive: bool,
    shared: u32,
    lock_wait: VecDeque<(u32, Vec<u8>)>,
    /// The origin holding the accumulate lock, and the accumulates held
    /// back meanwhile.
    acc_holder: Option<u32>,
    acc_wait: VecDeque<(u32, Vec<u8>)>,
}

/// Memory gmpi allocated for a window (`MPI_Win_allocate` between nodes):
/// zeroed, 16-byte aligned, reached only through its address.
#[derive(Debug)]
pub(crate) struct OwnMem {
    _mem: Vec<u128>,
}

impl OwnMem {
    /// `size` bytes, zeroed, and their address.
    pub fn new(size: usize) -> (Arc<OwnMem>, u64) {
        let mut v = vec![0u128; size.div_ceil(16).max(1)];
        let addr = v.as_mut_ptr() as u64;
        (Arc::new(OwnMem { _mem: v }), addr)
    }
}

impl Target {
    pub fn new(
        comm: &Communicator,
        flavor: WinFlavor,
        base: u64,
        size: u64,
        on_device: bool,
        own: Option<Arc<OwnMem>>,
    ) -> Target {
        Target {
            comm: comm.inner.clone(),
            flavor,
            base,
            size,
            on_device,
            _own: own,
            attached: Vec::new(),
            exclusive: false,
            shared: 0,
            lock_wait: VecDeque::new(),
            acc_holder: None,
            acc_wait: VecDeque::new(),
        }
    }

    /// The address of `len` bytes at `off` (an absolute address for a
    /// dynamic window), checked against the window.
    fn addr(&self, off: i64, len: u64) -> std::result::Result<u64, (ErrorClass, String)> {
        if self.flavor == WinFlavor::Dynamic {
            let a = off as u64;
            let end = a.checked_add(len);
            let inside = |&(b, s): &(u64, u64)| a >= b && end.is_some_and(|e| e <= b + s);
            if len == 0 || self.attached.iter().any(inside) {
                return Ok(a);
            }
            return Err((
                ErrorClass::RmaRange,
                format!("{len} bytes at {a:#x} are not inside a region attached to the window"),
            ));
        }
        if off < 0 || (off as u64).checked_add(len).is_none_or(|e| e > self.size) {
            return Err((
                ErrorClass::RmaRange,
                format!(
                    "the access touches bytes {off}..{} of a window of {} bytes",
                    off as i128 + len as i128,
                    self.size
                ),
            ));
        }
        Ok(self.base + off as u64)
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> std::result::Result<(), (ErrorClass, String)> {
        if out.is_empty() {
            return Ok(());
        }
        if self.on_device {
            return engine::gpu()
                .copy_to_host(out, addr)
                .map(|_| ())
                .map_err(|e| (ErrorClass::Other, format!("a device copy failed: {e}")));
        }
        crate::buffer::window_read(addr, out);
        Ok(())
    }

    fn write(&self, addr: u64, data: &[u8]) -> std::result::Result<(), (ErrorClass, String)> {
        if data.is_empty() {
            return Ok(());
        }
        if self.on_device {
            return engine::gpu()
                .copy_to_device(addr, data)
                .map(|_| ())
                .map_err(|e| (ErrorClass::Other, format!("a device copy failed: {e}")));
        }
        crate::buffer::window_write(addr, data);
        Ok(())
    }

    /// The runs' addresses, every one checked first.
    fn addrs(
        &self,
        runs: &[(i64, u64)],
    ) -> std::result::Result<Vec<(u64, usize)>, (ErrorClass, String)> {
        runs.iter()
            .map(|&(o, l)| self.addr(o, l).map(|a| (a, l as usize)))
            .collect()
    }

    fn read_runs(
        &self,
        runs: &[(u64, usize)],
        out: &mut [u8],
    ) -> std::result::Result<(), (ErrorClass, String)> {
        let mut pos = 0;
        for &(a, l) in runs {
            self.read(a, &mut out[pos..pos + l])?;
            pos += l;
        }
        Ok(())
    }

    fn write_runs(
        &self,
        runs: &[(u64, usize)],
        data: &[u8],
    ) -> std::result::Result<(), (ErrorClass, String)> {
        let mut pos = 0;
        for &(a, l) in runs {
            self.write(a, &data[pos..pos + l])?;
            pos += l;
        }
        Ok(())
    }

    /// Apply a data request (put, get, accumulate, compare-and-swap): the
    /// reply's data.
    fn apply(&self, p: &Parsed<'_>) -> std::result::Result<Vec<u8>, (ErrorClass, String)> {
        let runs = self.addrs(&p.runs)?;
        let total: usize = runs.iter().map(|r| r.1).sum();
        let short = |what: &str, want: usize| {
            (
                ErrorClass::Intern,
                format!(
                    "the request's {what} holds {} bytes, not {want}",
                    p.data.len()
                ),
            )
        };
        match p.kind {
            Kind::Put => {
                if p.data.len() != total {
                    return Err(short("data", total));
                }
                self.write_runs(&runs, p.data)?;
                Ok(Vec::new())
            }
            Kind::Get => {
                let mut out = vec![0u8; total];
                self.read_runs(&runs, &mut out)?;
                Ok(out)
            }
            Kind::Acc => {
                let op = crate::op::from_code(p.op)
                    .ok_or_else(|| (ErrorClass::Intern, format!("unknown operation {}", p.op)))?;
                let prim = *PRIMS
                    .get(p.prim as usize)
                    .ok_or_else(|| (ErrorClass::Intern, format!("unknown type {}", p.prim)))?;
                let el = Datatype::Primitive(prim);
                if !matches!(op, Op::NoOp) && p.data.len() != total {
                    return Err(short("data", total));
                }
                if !matches!(op, Op::Replace | Op::NoOp) {
                    crate::op::check_datatype(&op, el).map_err(|e| (ErrorClass::Op, e))?;
                }
                let mut cur = vec![0u8; total];
                self.read_runs(&runs, &mut cur)?;
                let old = (p.flags & WANT_OLD != 0).then(|| cur.clone());
                match op {
                    Op::NoOp => {}
                    Op::Replace => self.write_runs(&runs, p.data)?,
                    _ => {
                        let n = total / el.size().max(1);
                        crate::op::apply_datatype(&op, el, n, p.data, &mut cur);
                        self.write_runs(&runs, &cur)?;
                    }
                }
                Ok(old.unwrap_or_default())
            }
            Kind::Cas => {
                if p.data.len() != 2 * total {
                    return Err(short("new and compare values", 2 * total));
                }
                let (new, cmp) = p.data.split_at(total);
                let mut cur = vec![0u8; total];
                self.read_runs(&runs, &mut cur)?;
                if cur == cmp {
                    self.write_runs(&runs, new)?;
                }
                Ok(cur)
            }
            _ => Ok(Vec::new()),
        }
    }
}

/// A request being received.
#[derive(Debug)]
struct Arrival {
    ctx: u32,
    src: u32,
    id: ReqId,
    buf: Vec<u8>,
}

/// The target side of every window between nodes in this process (the
/// engine's): their memory and lock state, the requests being received,
/// the replies being sent.
#[derive(Debug, Default)]
pub(crate) struct Agent {
    /// By the window's point-to-point context.
    wins: HashMap<u32, Target>,
    arriving: VecDeque<Arrival>,
    replies: Vec<(ReqId, Vec<u8>)>,
    /// Requests applied so far (the progress thread naps longer while this
    /// does not move).
    served: u64,
}

impl Agent {
    /// Nothing to serve: no window, nothing in flight.
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.wins.is_empty() && self.arriving.is_empty() && self.replies.is_empty()
    }

    /// Serve a new window (its context id `ctx`).
    pub fn add(&mut self, ctx: u32, t: Target) {
        self.wins.insert(ctx, t);
    }

    /// Stop serving the window of `ctx`; whether any window is left.
    pub fn remove(&mut self, ctx: u32) -> bool {
        self.wins.remove(&ctx);
        !self.wins.is_empty()
    }

    /// The window of `ctx`.
    pub fn target(&mut self, ctx: u32) -> Option<&mut Target> {
        self.wins.get_mut(&ctx)
    }

    /// Requests applied so far.
    pub fn served(&self) -> u64 {
        self.served
    }
}

/// One pass of the agent, from the engine's progress: take what arrived,
/// apply it, reply. Returns how much happened.
pub(crate) fn serve(e: &mut Engine) -> usize {
    let Engine { driver, rma, .. } = e;
    let mut n = 0;
    rma.replies.retain(|&(id, _)| {
        if !driver.pml.is_complete(id) {
            return true;
        }
        let _ = driver.test(id);
        n += 1;
        false
    });
    for &ctx in rma.wins.keys() {
        while let Some((st, msg)) = driver.pml.improbe(ctx, None, Some(TAG_REQ)) {
            let mut buf = vec![0u8; st.len as usize];
            let b = Buf {
                addr: buf.as_mut_ptr() as u64,
                len: buf.len(),
                kind: MemKind::Host,
            };
            if let Some(id) = driver.mrecv(msg, b) {
                rma.arriving.push_back(Arrival {
                    ctx,
                    src: st.source,
                    id,
                    buf,
                });
            }
            n += 1;
        }
    }
    // In arrival order: a request is applied only after those before it.
    while rma
        .arriving
        .front()
        .is_some_and(|a| driver.pml.is_complete(a.id))
    {
        let a = rma.arriving.pop_front().expect("front exists");
        n += 1;
        match driver.test(a.id) {
            Some(Ok(_)) => {
                rma.served += 1;
                handle(driver, rma, a.ctx, a.src, a.buf)
            }
            Some(Err(err)) => {
                tracing::warn!(target: "rma", "a one-sided request from rank {} failed to arrive: {err}", a.src)
            }
            None => {}
        }
    }
    n
}

type Driver = crate::progress::Driver<crate::buffer::HostMem>;

/// Apply one request from `src` to the window of `ctx`, or hold it back.
fn handle(driver: &mut Driver, rma: &mut Agent, ctx: u32, src: u32, msg: Vec<u8>) {
    let Some(t) = rma.wins.get_mut(&ctx) else {
        tracing::warn!(target: "rma", "a one-sided request from rank {src} for a freed window was dropped");
        return;
    };
    let Some(tag) = reply_tag(&msg) else {
        tracing::warn!(
            target: "rma",
            "a malformed one-sided request from rank {src} (no reply tag) was dropped"
        );
        return;
    };
    let p = match parse(&msg) {
        Ok(p) => p,
        Err(why) => {
            let r = error_reply(ErrorClass::Intern, &format!("malformed request: {why}"));
            return reply(driver, rma, ctx, src, tag, r);
        }
    };
    if p.kind.is_acc() && t.acc_holder.is_some_and(|h| h != src) {
        t.acc_wait.push_back((src, msg));
        return;
    }
    let mut released = false;
    let out = match p.kind {
        Kind::Lock => {
            let excl = p.prim != 0;
            let free = !t.exclusive && (!excl || t.shared == 0) && t.lock_wait.is_empty();
            if !free {
                t.lock_wait.push_back((src, msg));
                return;
            }
            grant(t, excl);
            Ok(Vec::new())
        }
        Kind::Unlock => {
            if p.prim != 0 {
                t.exclusive = false;
            } else {
                t.shared = t.shared.saturating_sub(1);
            }
            released = true;
            Ok(Vec::new())
        }
        Kind::AccLock => {
            t.acc_holder = Some(src);
            Ok(Vec::new())
        }
        Kind::AccUnlock => {
            if t.acc_holder == Some(src) {
                t.acc_holder = None;
            }
            Ok(Vec::new())
        }
        _ => t.apply(&p),
    };
    let r = match out {
        Ok(mut d) => {
            let mut r = vec![0u8; REPLY_HDR];
            r.append(&mut d);
            r
        }
        Err((class, why)) => error_reply(class, &why),
    };
    let acc_free = p.kind == Kind::AccUnlock;
    reply(driver, rma, ctx, src, tag, r);
    if released {
        grant_waiting(driver, rma, ctx);
    }
    if acc_free {
        // What was held back, in its order, until someone takes the lock.
        let held = rma
            .wins
            .get_mut(&ctx)
            .map(|t| std::mem::take(&mut t.acc_wait))
            .unwrap_or_default();
        for (s, m) in held {
            handle(driver, rma, ctx, s, m);
        }
    }
}

fn grant(t: &mut Target, excl: bool) {
    if excl {
        t.exclusive = true;
    } else {
        t.shared += 1;
    }
}

/// After a release: grant the waiting lock requests that now can be, in
/// their order (several shared ones together).
fn grant_waiting(driver: &mut Driver, rma: &mut Agent, ctx: u32) {
    loop {
        let Some(t) = rma.wins.get_mut(&ctx) else {
            return;
        };
        let Some((src, msg)) = t.lock_wait.front() else {
            return;
        };
        let excl = msg[1] != 0;
        if t.exclusive || (excl && t.shared > 0) {
            return;
        }
        let (src, msg) = (*src, t.lock_wait.pop_front().expect("front exists").1);
        grant(t, excl);
        let tag = reply_tag(&msg).expect("checked when it arrived");
        reply(driver, rma, ctx, src, tag, vec![0u8; REPLY_HDR]);
    }
}

fn error_reply(class: ErrorClass, why: &str) -> Vec<u8> {
    let code = ErrorClass::ALL
        .iter()
        .position(|&c| c == class)
        .map_or(0, |i| i + 1) as u8;
    let mut r = vec![code.max(1), 0, 0, 0, 0, 0, 0, 0];
    let mut end = why.len().min(MSG_MAX);
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    r.extend_from_slice(&why.as_bytes()[..end]);
    r
}

fn reply(driver: &mut Driver, rma: &mut Agent, ctx: u32, src: u32, tag: i32, r: Vec<u8>) {
    let Some(t) = rma.wins.get(&ctx) else {
        return;
    };
    let buf = Buf {
        addr: r.as_ptr() as u64,
        len: r.len(),
        kind: MemKind::Host,
    };
    let args = t
        .comm
        .send_args(ctx, buf, src as i32, tag, SendMode::Standard);
    match driver.send(args) {
        Ok(None) => {}
        Ok(Some(id)) => rma.replies.push((id, r)),
        Err(err) => {
            tracing::warn!(target: "rma", "the reply to rank {src}'s one-sided request failed: {err}")
        }
    }
}

// ---- the progress thread ----

/// The progress thread's nap after a pass that moved something, and its
/// longest nap.
const NAP_MIN: std::time::Duration = std::time::Duration::from_micros(20);
const NAP_MAX: std::time::Duration = std::time::Duration::from_millis(1);

/// The progress thread and its stop flag.
static THREAD: Mutex<Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>> = Mutex::new(None);

/// Start the progress thread unless it runs.
pub(crate) fn start_progress_thread() -> std::io::Result<()> {
    engine::set_multithreaded();
    // The thread takes the engine's lock: never while calls skip it.
    assert!(
        !engine::serial_calls(),
        "serial calls while gmpi starts a thread"
    );
    let mut g = THREAD.lock().unwrap_or_else(|p| p.into_inner());
    if g.as_ref().is_some_and(|(_, h)| !h.is_finished()) {
        return Ok(());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let h = std::thread::Builder::new()
        .name("gmpi-rma".into())
        .spawn(move || {
            const CALL: &str = "gmpi's one-sided progress thread";
            let mut nap = NAP_MIN;
            while !s.load(Ordering::Acquire) {
                let pass = |e: &mut engine::Locked| {
                    let before = e.rma.served();
                    e.progress_all(CALL)?;
                    Ok(e.rma.served() != before)
                };
                match engine::try_with(CALL, pass) {
                    Some(Ok(true)) => nap = NAP_MIN,
                    // No request, or another thread is in gmpi and serves
                    // them in its own progress passes.
                    None | Some(Ok(false)) => nap = (nap * 2).min(NAP_MAX),
                    Some(Err(err)) => {
                        tracing::debug!(target: "rma", "progress thread ends: {err}");
                        return;
                    }
                }
                std::thread::park_timeout(nap);
            }
        })?;
    *g = Some((stop, h));
    tracing::debug!(target: "rma", "progress thread started");
    Ok(())
}

/// Stop the progress thread (if it runs) and wait for it. Call without
/// the engine lock.
pub(crate) fn stop_progress_thread() {
    let t = THREAD.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some((stop, h)) = t {
        stop.store(true, Ordering::Release);
        h.thread().unpark();
        let _ = h.join();
        tracing::debug!(target: "rma", "progress thread stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_back() {
        let r = Request::new(Kind::Acc, &[(8, 4), (-16, 2)], 6)
            .acc(Datatype::Primitive(Primitive::I16), 0, true)
            .data(&[1, 2, 3, 4, 5, 6]);
        let p = parse(&r.bytes).expect("well formed");
        assert_eq!(p.kind, Kind::Acc);
        assert_eq!(PRIMS[p.prim as usize], Primitive::I16);
        assert_eq!(p.flags, WANT_OLD);
        assert_eq!(p.runs, vec![(8, 4), (-16, 2)]);
        assert_eq!(p.data, &[1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn malformed_requests_are_refused() {
        assert!(parse(&[1, 0, 0]).is_err());
        let mut r = Request::new(Kind::Put, &[(0, 4)], 0).bytes;
        r[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse(&r).is_err(), "a run count past the end");
        let mut r = Request::new(Kind::Put, &[], 0).bytes;
        r[0] = 99;
        assert!(parse(&r).is_err(), "an unknown kind");
        assert_eq!(reply_tag(&r), None, "no reply tag set");
    }

    #[test]
    fn every_predefined_operation_and_primitive_has_a_code() {
        for c in 0..14 {
            let op = crate::op::from_code(c).expect("a code");
            assert_eq!(crate::op::code(&op), Some(c));
        }
        for (i, &p) in PRIMS.iter().enumerate() {
            assert_eq!(prim_code(p) as usize, i, "{p:?}");
        }
    }

    #[test]
    fn error_replies_carry_their_class() {
        let r = error_reply(ErrorClass::RmaRange, "out of range");
        assert_eq!(ErrorClass::ALL[r[0] as usize - 1], ErrorClass::RmaRange);
        assert_eq!(&r[REPLY_HDR..], b"out of range");
        let long = "é".repeat(MSG_MAX);
        assert!(error_reply(ErrorClass::Other, &long).len() <= REPLY_HDR + MSG_MAX);
    }
}
