//! Schedules: a collective (or a derived-datatype receive) as a list of steps
//! — post a send, post a receive, wait for what was posted, reduce, copy,
//! unpack — that [`Sched::advance`] moves along as far as it can without
//! blocking. A blocking collective builds a schedule and drives it to the
//! end; a non-blocking one parks it in the engine, and every progress pass
//! (any `wait`, `test` or other call that progresses) advances it.
//!
//! Memory a schedule touches is either user memory (addresses of buffers the
//! call or the request borrows, see `buffer.rs`) or temporaries the schedule
//! owns; a step names a byte range of one of them ([`Region`]).
//!
//! A receive whose data the next reduce step uses is posted as consumed
//! ([`gmpi_pml::RecvArgs::consumed`]): the transport then copies a large
//! one with this rank alone, so the reduction finds it in this core's cache
//! (see [`gmpi_btl::Btl::get_alone`]).
//!
//! Device memory: user buffers are classified when registered. A schedule
//! with a device user buffer makes its temporaries on that GPU too (taken
//! from and given back to the gpu layer's pool, `gmpi_gpu::DeviceBuf`), so its
//! sends and receives take the pml's device paths (CUDA IPC on one node),
//! its copies are device-to-device, and its reductions of predefined ops on
//! basic types run as GPU kernels: the data never round-trips through the
//! host. Mixed steps (a host temporary packed from a derived datatype and a
//! device buffer, a user-defined op) stage through host copies.

use std::sync::Arc;

use gmpi_gpu::{DeviceBuf, ElemType, Gpu, GpuError, MemKind, ReduceOp};
use gmpi_pml::{Buf, ReqId, SendMode};

use crate::buffer::{HostMem, View};
use crate::comm::CommInner;
use crate::datatype::Datatype;
use crate::error::{Error, ErrorClass, Result};
use crate::op::Op;
use crate::progress::{Driver, HostMemory};
use crate::request::Status;

/// Memory a schedule reads or writes.
#[derive(Debug)]
pub(crate) enum Mem {
    /// A user buffer (read-only unless `writable`).
    User {
        addr: u64,
        writable: bool,
        kind: MemKind,
    },
    /// A temporary the schedule owns.
    Temp(Vec<u8>),
    /// A device temporary the schedule owns (back to the gpu layer's pool
    /// on drop).
    Dev(DeviceBuf<'static>),
}

impl Mem {
    fn kind(&self) -> MemKind {
        match self {
            Mem::User { kind, .. } => *kind,
            Mem::Temp(_) => MemKind::Host,
            Mem::Dev(_) => MemKind::Device { ordinal: -1 },
        }
    }

    fn addr(&self) -> u64 {
        match self {
            Mem::User { addr, .. } => *addr,
            Mem::Temp(v) => v.as_ptr() as u64,
            Mem::Dev(b) => b.ptr,
        }
    }
}

/// The GPU kernel for `op` on `dt`, if there is one.
fn device_op(op: &Op, dt: Datatype) -> Option<(ReduceOp, ElemType)> {
    use crate::datatype::Primitive as P;
    let Datatype::Primitive(p) = dt else {
        return None;
    };
    let ty = match p {
        P::I8 | P::Char => ElemType::I8,
        P::U8 => ElemType::U8,
        P::I16 => ElemType::I16,
        P::U16 => ElemType::U16,
        P::I32 => ElemType::I32,
        P::U32 => ElemType::U32,
        P::I64 => ElemType::I64,
        P::U64 => ElemType::U64,
        P::ISize if std::mem::size_of::<isize>() == 8 => ElemType::I64,
        P::USize if std::mem::size_of::<usize>() == 8 => ElemType::U64,
        P::F32 => ElemType::F32,
        P::F64 => ElemType::F64,
        P::Bool => ElemType::Bool,
        _ => return None,
    };
    let op = match op {
        Op::Sum => ReduceOp::Sum,
        Op::Prod => ReduceOp::Prod,
        Op::Min => ReduceOp::Min,
        Op::Max => ReduceOp::Max,
        Op::Land => ReduceOp::Land,
        Op::Lor => ReduceOp::Lor,
        Op::Lxor => ReduceOp::Lxor,
        Op::Band => ReduceOp::Band,
        Op::Bor => ReduceOp::Bor,
        Op::Bxor => ReduceOp::Bxor,
        _ => return None,
    };
    op.supports(ty).then_some((op, ty))
}

/// A byte range of one of the schedule's memories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    pub mem: usize,
    pub off: usize,
    pub len: usize,
}

impl Region {
    /// Whether the two share a byte.
    pub fn overlaps(self, o: Region) -> bool {
        self.mem == o.mem && self.off < o.off + o.len && o.off < self.off + self.len
    }

    /// The sub-range `off..off+len` of this region.
    pub fn sub(self, off: usize, len: usize) -> Region {
        debug_assert!(off + len <= self.len, "sub-region out of range");
        Region {
            mem: self.mem,
            off: self.off + off,
            len,
        }
    }
}

/// The reduction a schedule's `Reduce` steps apply.
#[derive(Debug, Clone)]
pub(crate) struct Reduction {
    pub op: Op,
    /// The element type the op works on: a primitive for predefined ops, the
    /// user's datatype as opaque bytes for user ops.
    pub dt: Datatype,
    /// Bytes per counted element (what a user function's `count` counts).
    pub unit: usize,
}

#[derive(Debug)]
pub(crate) enum Step {
    /// Post a send of the region to a rank of the communicator.
    Send(Region, i32),
    /// Post a receive into the region from a rank; the message must fill it.
    Recv(Region, i32),
    /// Like `Recv`, but any length up to the region's is fine and the status
    /// is kept (derived-datatype receives).
    RecvAny(Region, i32, i32),
    /// Wait until everything posted so far has completed.
    Wait,
    /// `hi = lo ∘ hi` (MPI's `inoutvec = invec ∘ inoutvec`, `invec` from the
    /// lower ranks).
    Reduce { lo: Region, hi: Region },
    /// Copy bytes.
    Copy { src: Region, dst: Region },
    /// Unpack a region into a (non-contiguous) user view; with `received`,
    /// only the bytes the last `RecvAny` delivered.
    Unpack {
        src: Region,
        view: View,
        received: bool,
    },
    /// On an intercommunicator: sends and receives posted after this name
    /// ranks of the local group (`true`, on its private intracommunicator)
    /// or of the remote group (`false`, the default).
    Local(bool),
}

/// A schedule in progress.
#[derive(Debug)]
pub(crate) struct Sched {
    pub call: &'static str,
    comm: Arc<CommInner>,
    ctx: u32,
    tag: i32,
    mode: SendMode,
    mems: Vec<Mem>,
    steps: Vec<Step>,
    pos: usize,
    /// Posted and not yet completed: (request, receive whose length must
    /// equal this, peer).
    inflight: Vec<(ReqId, Option<usize>, i32)>,
    pub red: Option<Reduction>,
    /// Status of the last `RecvAny`.
    pub status: Option<Status>,
    error: Option<Error>,
    /// An intercommunicator's local group and the tag its local phases use
    /// (see [`Step::Local`]), and whether they are on now.
    local: Option<(Arc<CommInner>, i32)>,
    in_local: bool,
    /// A device user buffer's address: temporaries go on its GPU.
    device_near: Option<u64>,
    /// Index of the `Wait` that ends the group of steps being posted, once
    /// [`Sched::reduced_next`] has looked for it: every receive of a group
    /// shares it, so a group of n receives is scanned once, not n times.
    group_wait: Option<usize>,
}

impl Sched {
    /// An empty schedule of `call` on the communicator's collective context
    /// with `tag`.
    pub fn new(call: &'static str, comm: &Arc<CommInner>, tag: i32) -> Self {
        Self {
            call,
            ctx: comm.coll_ctx,
            comm: comm.clone(),
            tag,
            mode: SendMode::Standard,
            mems: Vec::new(),
            steps: Vec::new(),
            pos: 0,
            inflight: Vec::new(),
            red: None,
            status: None,
            error: None,
            local: None,
            in_local: false,
            device_near: None,
            group_wait: None,
        }
    }

    /// A schedule on an intercommunicator whose [`Step::Local`] phases run
    /// on `local` (its local group's intracommunicator) with `local_tag`.
    pub fn inter(
        call: &'static str,
        comm: &Arc<CommInner>,
        tag: i32,
        local: &Arc<CommInner>,
        local_tag: i32,
    ) -> Self {
        let mut s = Self::new(call, comm, tag);
        s.local = Some((local.clone(), local_tag));
        s
    }

    /// Switch later sends and receives to the local group (`true`) or the
    /// remote group (`false`) of an intercommunicator schedule.
    pub fn local(&mut self, on: bool) {
        debug_assert!(self.local.is_some(), "local phases need Sched::inter");
        self.push(Step::Local(on));
    }

    /// The communicator, context and tag sends and receives post on now.
    fn target(&self) -> (&CommInner, u32, i32) {
        match &self.local {
            Some((l, tag)) if self.in_local => (l, l.coll_ctx, *tag),
            _ => (&self.comm, self.ctx, self.tag),
        }
    }

    /// A schedule on the point-to-point context (derived-datatype sends and
    /// receives).
    pub fn p2p(call: &'static str, comm: &Arc<CommInner>, tag: i32, mode: SendMode) -> Self {
        let mut s = Self::new(call, comm, tag);
        s.ctx = comm.ctx;
        s.mode = mode;
        s
    }

    fn me(&self) -> i32 {
        self.comm.rank
    }

    /// Register a user buffer range.
    pub fn user(&mut self, addr: u64, len: usize, writable: bool) -> Region {
        let kind = match self.gpu().classify(addr, len) {
            Ok(k) => k,
            Err(e) => {
                // The schedule fails before it runs a step, so the kind
                // recorded here is never used.
                self.fail(Error::classify_failed(e, self.call, self.me(), addr));
                MemKind::Host
            }
        };
        if matches!(kind, MemKind::Device { .. }) && self.device_near.is_none() {
            self.device_near = Some(addr);
        }
        self.mems.push(Mem::User {
            addr,
            writable,
            kind,
        });
        Region {
            mem: self.mems.len() - 1,
            off: 0,
            len,
        }
    }

    /// Scratch memory of `len` bytes whose contents are unspecified (every
    /// caller writes before it reads). Large host ones come from a
    /// per-thread pool, so a collective called in a loop neither page-faults
    /// fresh memory in nor zeroes it every time; device ones from the gpu
    /// layer's pool (`gpu/src/temp.rs`), so it neither allocates them nor
    /// has its peers map them anew.
    pub fn temp(&mut self, len: usize) -> Region {
        let dev = self
            .device_near
            .and_then(|near| match self.gpu().alloc_device(len, near) {
                Ok(b) => Some(b),
                Err(e) => {
                    tracing::warn!(target: "coll", "{}: no device temporary of {len} B ({e}); staging through host memory", self.call);
                    None
                }
            });
        self.mems.push(match dev {
            Some(b) => Mem::Dev(b),
            None => Mem::Temp(pool_take(len)),
        });
        Region {
            mem: self.mems.len() - 1,
            off: 0,
            len,
        }
    }

    /// A temporary holding `data`.
    pub fn temp_from(&mut self, data: Vec<u8>) -> Region {
        let len = data.len();
        self.mems.push(Mem::Temp(data));
        Region {
            mem: self.mems.len() - 1,
            off: 0,
            len,
        }
    }

    /// A region holding the data of a view to read: the user memory itself
    /// when contiguous, else a packed copy made now.
    pub fn input(&mut self, v: &View) -> Region {
        match v.contig_addr() {
            Some(a) => self.user(a, v.bytes(), false),
            None => self.temp_from(v.pack()),
        }
    }

    /// A region to write a view's data into: the user memory itself when
    /// contiguous, else a temporary the caller unpacks at the end.
    pub fn output(&mut self, v: &View) -> (Region, bool) {
        match v.contig_addr() {
            Some(a) => (self.user(a, v.bytes(), true), false),
            None => (self.temp_from(vec![0u8; v.bytes()]), true),
        }
    }

    pub fn push(&mut self, s: Step) {
        // Zero-length transfers and copies are no-ops; skip them, and skip a
        // wait with nothing before it since the last one.
        match &s {
            Step::Copy { src, dst } if src.len == 0 || src == dst => return,
            Step::Reduce { lo, .. } if lo.len == 0 => return,
            Step::Wait if matches!(self.steps.last(), None | Some(Step::Wait)) => return,
            _ => {}
        }
        self.steps.push(s);
    }

    pub fn send(&mut self, r: Region, peer: i32) {
        self.push(Step::Send(r, peer));
    }

    pub fn recv(&mut self, r: Region, peer: i32) {
        self.push(Step::Recv(r, peer));
    }

    pub fn wait(&mut self) {
        self.push(Step::Wait);
    }

    pub fn copy(&mut self, src: Region, dst: Region) {
        debug_assert_eq!(src.len, dst.len);
        self.push(Step::Copy { src, dst });
    }

    pub fn reduce(&mut self, lo: Region, hi: Region) {
        debug_assert_eq!(lo.len, hi.len);
        self.push(Step::Reduce { lo, hi });
    }

    /// Whether every step has run.
    pub fn is_done(&self) -> bool {
        // After an error, still wait for what was posted: the transports may
        // be writing into the schedule's memory.
        self.inflight.is_empty() && (self.error.is_some() || self.pos == self.steps.len())
    }

    /// The outcome once done.
    pub fn result(&mut self) -> Result<Option<Status>> {
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(self.status),
        }
    }

    fn gpu(&self) -> &'static Gpu {
        crate::engine::gpu()
    }

    fn buf(&self, r: Region) -> Buf {
        let m = &self.mems[r.mem];
        let kind = match m {
            // Classify a device temporary for its ordinal.
            Mem::Dev(b) => self
                .gpu()
                .classify(b.ptr, 1)
                .unwrap_or(MemKind::Device { ordinal: -1 }),
            other => other.kind(),
        };
        Buf {
            addr: m.addr() + r.off as u64,
            len: r.len,
            kind,
        }
    }

    /// Both regions in device memory: their addresses.
    fn on_device(&self, a: Region, b: Region) -> Option<(u64, u64)> {
        let (ma, mb) = (&self.mems[a.mem], &self.mems[b.mem]);
        let dev = |k: MemKind| matches!(k, MemKind::Device { .. } | MemKind::Managed);
        (dev(ma.kind()) && dev(mb.kind()))
            .then(|| (ma.addr() + a.off as u64, mb.addr() + b.off as u64))
    }

    fn read<R>(&self, r: Region, f: impl FnOnce(&[u8]) -> R) -> R {
        read_mem(&self.mems[r.mem], r, f)
    }

    /// Run `f` on the bytes of `src` (read) and `dst` (read and written: a
    /// reduction's inout). Device memory is written through a write-only
    /// staging buffer, so there its current bytes are read in first.
    fn reduce_into(&mut self, src: Region, dst: Region, f: impl FnOnce(&[u8], &mut [u8])) {
        if self.mems[dst.mem].kind().is_host() {
            return self.read_write(src, dst, f);
        }
        let mut acc = self.read(dst, |d| d.to_vec());
        self.read(src, |s| f(s, &mut acc));
        write_mem(&mut self.mems[dst.mem], dst, |d| d.copy_from_slice(&acc));
    }

    /// Run `f` on the bytes of `src` (read) and `dst` (written; its previous
    /// contents are not given where it is device memory).
    fn read_write(&mut self, src: Region, dst: Region, f: impl FnOnce(&[u8], &mut [u8])) {
        if src.mem == dst.mem {
            // One memory: copy the source out to keep the borrows apart.
            let tmp = self.read(src, |s| s.to_vec());
            write_mem(&mut self.mems[dst.mem], dst, |d| f(&tmp, d));
            return;
        }
        // Take the destination out of the table so the borrows are disjoint.
        let mut d = std::mem::replace(&mut self.mems[dst.mem], Mem::Temp(Vec::new()));
        read_mem(&self.mems[src.mem], src, |s| {
            write_mem(&mut d, dst, |o| f(s, o))
        });
        self.mems[dst.mem] = d;
    }

    fn fail(&mut self, e: Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// Run as many steps as possible without blocking. Returns how many
    /// steps ran (0 = stuck waiting for messages, or done).
    pub fn advance(&mut self, d: &mut Driver<HostMem>) -> usize {
        let mut ran = 0;
        loop {
            if self.error.is_some() || self.pos == self.steps.len() {
                if !self.inflight.is_empty() && self.complete_inflight(d) {
                    ran += 1;
                }
                break;
            }
            let step = std::mem::replace(&mut self.steps[self.pos], Step::Wait);
            let keep = match &step {
                Step::Send(r, peer) => {
                    self.post_send(d, *r, *peer);
                    true
                }
                Step::Recv(r, peer) => {
                    let consumed = self.reduced_next(*r);
                    self.post_recv(d, *r, *peer, None, Some(r.len), consumed);
                    true
                }
                Step::RecvAny(r, peer, tag) => {
                    self.post_recv(d, *r, *peer, Some(*tag), None, false);
                    true
                }
                Step::Local(on) => {
                    self.in_local = *on;
                    true
                }
                Step::Wait => {
                    if !self.complete_inflight(d) {
                        // Put it back and stop here.
                        self.steps[self.pos] = step;
                        break;
                    }
                    true
                }
                Step::Reduce { lo, hi } => {
                    let red = self.red.clone().expect("a reducing schedule has an op");
                    let (lo, hi) = (*lo, *hi);
                    let kernel = device_op(&red.op, red.dt);
                    let on_gpu = match (self.on_device(lo, hi), kernel) {
                        (Some((a, b)), Some((op, ty))) => {
                            let n = lo.len / ty.size();
                            match self.gpu().reduce(op, ty, b, a, n) {
                                Ok(()) => true,
                                // No kernels here (no NVRTC, or a driver that
                                // cannot load them): reduce on the CPU through
                                // staged copies, as for other ops.
                                Err(e @ (GpuError::Unavailable(_) | GpuError::Unsupported(_))) => {
                                    host_reduce_fallback(&e);
                                    false
                                }
                                Err(e) => {
                                    let msg = format!("device reduction failed: {e}");
                                    self.fail(Error::new(
                                        ErrorClass::Intern,
                                        self.call,
                                        self.me(),
                                        msg,
                                    ));
                                    true
                                }
                            }
                        }
                        _ => false,
                    };
                    if !on_gpu {
                        self.reduce_into(lo, hi, |a, b| {
                            crate::op::apply_datatype(
                                &red.op,
                                red.dt,
                                a.len() / red.unit.max(1),
                                a,
                                b,
                            )
                        });
                    }
                    true
                }
                Step::Copy { src, dst } => {
                    match self.on_device(*src, *dst) {
                        Some((a, b)) => {
                            if let Err(e) = self.gpu().copy_device(b, a, src.len) {
                                let msg = format!("device copy failed: {e}");
                                self.fail(Error::new(
                                    ErrorClass::Intern,
                                    self.call,
                                    self.me(),
                                    msg,
                                ));
                            }
                        }
                        None => self.read_write(*src, *dst, |a, b| b.copy_from_slice(a)),
                    }
                    true
                }
                Step::Unpack {
                    src,
                    view,
                    received,
                } => {
                    let n = if *received {
                        self.status.map_or(0, |s| s.bytes).min(src.len)
                    } else {
                        src.len
                    };
                    self.read(src.sub(0, n), |s| view.unpack(s));
                    true
                }
            };
            debug_assert!(keep);
            self.pos += 1;
            ran += 1;
        }
        ran
    }

    fn post_send(&mut self, d: &mut Driver<HostMem>, r: Region, peer: i32) {
        let buf = self.buf(r);
        let (comm, ctx, tag) = self.target();
        let args = comm.send_args(ctx, buf, peer, tag, self.mode);
        match d.send(args) {
            Ok(Some(id)) => self.inflight.push((id, None, peer)),
            Ok(None) => {}
            Err(e) => {
                let e = Error::from_pml(e, self.call, self.me());
                self.fail(e)
            }
        }
    }

    /// Whether the data a receive at the current step puts in `r` is reduced
    /// as soon as it is there: a `Reduce` step right after the wait that
    /// completes the receive reads or writes `r`. Such a receive is posted
    /// [`gmpi_pml::RecvArgs::consumed`], so that a large one is copied by
    /// this rank alone, into its own cache.
    fn reduced_next(&mut self, r: Region) -> bool {
        let w = match self.group_wait.filter(|&w| w > self.pos) {
            Some(w) => w,
            None => match next_wait(&self.steps[self.pos + 1..]) {
                Some(w) => {
                    self.group_wait = Some(self.pos + 1 + w);
                    self.pos + 1 + w
                }
                None => return false,
            },
        };
        reduced_right_after(&self.steps[w + 1..], r)
    }

    fn post_recv(
        &mut self,
        d: &mut Driver<HostMem>,
        r: Region,
        peer: i32,
        tag: Option<i32>,
        want: Option<usize>,
        consumed: bool,
    ) {
        let buf = self.buf(r);
        let (comm, ctx, own) = self.target();
        let mut args = comm.recv_args(ctx, buf, peer, tag.unwrap_or(own));
        args.consumed = consumed;
        match d.post_recv(args) {
            Ok(id) => self.inflight.push((id, want, peer)),
            Err(e) => {
                let e = Error::from_pml(e, self.call, self.me());
                self.fail(e)
            }
        }
    }

    /// Whether everything posted has completed (collecting outcomes).
    fn complete_inflight(&mut self, d: &mut Driver<HostMem>) -> bool {
        if self
            .inflight
            .iter()
            .any(|(id, _, _)| !d.pml.is_complete(*id))
        {
            return false;
        }
        for (id, want, peer) in std::mem::take(&mut self.inflight) {
            match d.test(id) {
                Some(Ok(st)) => {
                    let st = Status::from_pml(st);
                    match want {
                        Some(w) if st.bytes != w => {
                            let msg = format!(
                                "rank {peer} sent {} bytes where {w} were expected: the ranks passed different counts or datatypes",
                                st.bytes
                            );
                            self.fail(Error::new(ErrorClass::Truncate, self.call, self.me(), msg));
                        }
                        Some(_) => {}
                        None => self.status = Some(st),
                    }
                }
                Some(Err(e)) => {
                    let e = Error::from_pml(e, self.call, self.me());
                    self.fail(e)
                }
                None => {
                    self.fail(Error::new(
                        ErrorClass::Intern,
                        self.call,
                        self.me(),
                        "request vanished",
                    ));
                }
            }
        }
        true
    }
}

/// Temporaries at least this large are recycled.
const POOL_MIN: usize = 32 << 10;
/// ... and at most this large.
const POOL_MAX: usize = 16 << 20;
/// How many the pool keeps (so at most 64 MiB stay allocated).
const POOL_ENTRIES: usize = 4;

thread_local! {
    static POOL: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A buffer of at least `len` bytes, recycled if one is pooled.
fn pool_take(len: usize) -> Vec<u8> {
    if len >= POOL_MIN {
        let hit = POOL.with(|p| {
            let mut p = p.borrow_mut();
            // The smallest pooled buffer that fits.
            let i = p
                .iter()
                .enumerate()
                .filter(|(_, v)| v.len() >= len)
                .min_by_key(|(_, v)| v.len())
                .map(|(i, _)| i)?;
            Some(p.swap_remove(i))
        });
        if let Some(v) = hit {
            return v;
        }
    }
    vec![0u8; len]
}

impl Drop for Sched {
    fn drop(&mut self) {
        // Only finished schedules are dropped (a request waits for its
        // schedule), so nothing still reads or writes these buffers (device
        // temporaries go back to the gpu layer's pool as they drop).
        for m in self.mems.drain(..) {
            if let Mem::Temp(v) = m {
                if (POOL_MIN..=POOL_MAX).contains(&v.len()) {
                    POOL.with(|p| {
                        let mut p = p.borrow_mut();
                        if p.len() == POOL_ENTRIES {
                            // Keep the larger buffers.
                            if let Some((i, _)) = p.iter().enumerate().min_by_key(|(_, b)| b.len())
                            {
                                if p[i].len() < v.len() {
                                    p[i] = v;
                                }
                            }
                        } else {
                            p.push(v);
                        }
                    });
                }
            }
        }
    }
}

/// A staged device access failed: the collective's data is lost and the job
/// cannot go on (as for the pml's device copies).
#[cold]
fn staging_failed(e: GpuError) -> ! {
    panic!("gmpi: staging a collective's device buffer failed: {e}")
}

/// Says once per process that device reductions run on the CPU, and why.
fn host_reduce_fallback(e: &GpuError) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(target: "coll", "no device reduction kernels ({e}); reducing device buffers on the CPU through staged copies");
    });
}

fn read_mem<R>(m: &Mem, r: Region, f: impl FnOnce(&[u8]) -> R) -> R {
    let at = m.addr() + r.off as u64;
    match m {
        Mem::User { kind, .. } if kind.is_host() => HostMem.with_read(at, r.len, f),
        Mem::Temp(v) => f(&v[r.off..r.off + r.len]),
        _ => match crate::engine::gpu().with_read(at, r.len, f) {
            Ok((x, _)) => x,
            Err(e) => staging_failed(e),
        },
    }
}

fn write_mem<R>(m: &mut Mem, r: Region, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let at = m.addr() + r.off as u64;
    match m {
        Mem::User { writable, kind, .. } => {
            assert!(*writable, "a schedule wrote a read-only buffer");
            if kind.is_host() {
                HostMem.with_write(at, r.len, f)
            } else {
                match crate::engine::gpu().with_write(at, r.len, f) {
                    Ok((x, _)) => x,
                    Err(e) => staging_failed(e),
                }
            }
        }
        Mem::Temp(v) => f(&mut v[r.off..r.off + r.len]),
        Mem::Dev(_) => match crate::engine::gpu().with_write(at, r.len, f) {
            Ok((x, _)) => x,
            Err(e) => staging_failed(e),
        },
    }
}

/// Position of the first `Wait` in `steps`: the end of the group of
/// transfers that a receive is posted with.
fn next_wait(steps: &[Step]) -> Option<usize> {
    steps.iter().position(|s| matches!(s, Step::Wait))
}

/// Whether one of the reduces at the start of `after` (the steps after a
/// group's wait) reads or writes `r`. The look stops at the first step that
/// is not a reduce.
fn reduced_right_after(after: &[Step], r: Region) -> bool {
    for s in after {
        match s {
            Step::Reduce { lo, hi } if lo.overlaps(r) || hi.overlaps(r) => return true,
            Step::Reduce { .. } => {}
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Sched::reduced_next`] for a receive followed by `steps`.
    fn reduced_next(steps: &[Step], r: Region) -> bool {
        next_wait(steps).is_some_and(|w| reduced_right_after(&steps[w + 1..], r))
    }

    fn reg(mem: usize, off: usize, len: usize) -> Region {
        Region { mem, off, len }
    }

    #[test]
    fn regions_overlap_only_in_the_same_memory() {
        assert!(reg(0, 0, 8).overlaps(reg(0, 4, 8)));
        assert!(reg(0, 4, 8).overlaps(reg(0, 0, 8)));
        assert!(!reg(0, 0, 8).overlaps(reg(0, 8, 8)));
        assert!(!reg(0, 0, 8).overlaps(reg(1, 0, 8)));
        assert!(reg(2, 0, 64).overlaps(reg(2, 16, 1)));
    }

    #[test]
    fn a_receive_is_consumed_when_the_next_reduce_uses_it() {
        let (got, input, other) = (reg(1, 0, 64), reg(0, 0, 64), reg(2, 0, 64));
        // Binomial reduce: receive, wait, reduce into it.
        let steps = [Step::Wait, Step::Reduce { lo: input, hi: got }];
        assert!(reduced_next(&steps, got));
        // Recursive doubling: a send in between, the partner's half as `lo`.
        let steps = [
            Step::Send(input, 1),
            Step::Wait,
            Step::Reduce { lo: got, hi: input },
        ];
        assert!(reduced_next(&steps, got));
        // A ring chunk: only part of the received region is reduced.
        let steps = [
            Step::Wait,
            Step::Reduce {
                lo: input.sub(0, 16),
                hi: got.sub(0, 16),
            },
        ];
        assert!(reduced_next(&steps, got));
        // The next reduce is about other memory, or a copy comes first, or
        // nothing is reduced (an allgather).
        let steps = [
            Step::Wait,
            Step::Reduce {
                lo: input,
                hi: other,
            },
        ];
        assert!(!reduced_next(&steps, got));
        let steps = [
            Step::Wait,
            Step::Copy {
                src: got,
                dst: other,
            },
            Step::Reduce { lo: input, hi: got },
        ];
        assert!(!reduced_next(&steps, got));
        assert!(!reduced_next(&[Step::Wait, Step::Send(got, 0)], got));
        assert!(!reduced_next(&[], got));
    }
}
