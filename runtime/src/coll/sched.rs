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
//! (see [`gmpi_btl::Pull::Alone`]).
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
        P::F16 => ElemType::F16,
        P::BF16 => ElemType::BF16,
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
    /// The gpu layer it classifies, copies and reduces with (the process's;
    /// a test double's in unit tests).
    gpu: &'static Gpu,
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
            gpu: crate::engine::gpu(),
        }
    }

    /// The schedule over the gpu layer `g` instead of the process's (unit
    /// tests over the gpu layer's test double). Before any memory is
    /// registered, which `g` classifies.
    #[cfg(test)]
    pub fn on_gpu(mut self, g: &'static Gpu) -> Self {
        debug_assert!(
            self.mems.is_empty(),
            "memory registered on another gpu layer"
        );
        self.gpu = g;
        self
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
        Self::p2p_on(call, comm, comm.ctx, tag, mode)
    }

    /// [`Sched::p2p`] on context `ctx` (the partitioned one).
    pub fn p2p_on(
        call: &'static str,
        comm: &Arc<CommInner>,
        ctx: u32,
        tag: i32,
        mode: SendMode,
    ) -> Self {
        let mut s = Self::new(call, comm, tag);
        s.ctx = ctx;
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
    /// when contiguous, else a packed copy made now ([`Sched::packed`]).
    pub fn input(&mut self, v: &View) -> Region {
        match v.contig_addr() {
            Some(a) => self.user(a, v.bytes(), false),
            None => self.packed(v),
        }
    }

    /// A temporary holding the view's data packed now. If that fails (the
    /// memory cannot be classified, or a copy out of the device fails), the
    /// schedule fails before it runs a step, and the temporary holds zeros
    /// that no step reads.
    pub fn packed(&mut self, v: &View) -> Region {
        match v.pack_with(self.gpu, self.call, self.me()) {
            Ok(data) => self.temp_from(data),
            Err(e) => {
                self.fail(e);
                self.temp_from(vec![0u8; v.bytes()])
            }
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
        self.gpu
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

    /// Run `f` on the bytes of `r`; an error if staging them out of device
    /// memory fails (`f` then does not run).
    fn read<R>(&self, r: Region, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        read_mem(self.gpu, &self.mems[r.mem], r, f).map_err(|e| e.error(self.call, self.me()))
    }

    /// Let `f` write the bytes of `r`; an error if staging them into device
    /// memory fails.
    fn write<R>(&mut self, r: Region, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        let (call, me) = (self.call, self.me());
        write_mem(self.gpu, &mut self.mems[r.mem], r, f).map_err(|e| e.error(call, me))
    }

    /// Run `f` on the bytes of `src` (read) and `dst` (read and written: a
    /// reduction's inout). Device memory is written through a write-only
    /// staging buffer, so there its current bytes are read in first. An
    /// error if a staged copy fails (nothing is written after a failed
    /// read).
    fn reduce_into(
        &mut self,
        src: Region,
        dst: Region,
        f: impl FnOnce(&[u8], &mut [u8]),
    ) -> Result<()> {
        if self.mems[dst.mem].kind().is_host() {
            return self.read_write(src, dst, f);
        }
        let mut acc = self.read(dst, |d| d.to_vec())?;
        self.read(src, |s| f(s, &mut acc))?;
        self.write(dst, |d| d.copy_from_slice(&acc))
    }

    /// Run `f` on the bytes of `src` (read) and `dst` (written; its previous
    /// contents are not given where it is device memory). An error if a
    /// staged copy fails (nothing is written after a failed read).
    fn read_write(
        &mut self,
        src: Region,
        dst: Region,
        f: impl FnOnce(&[u8], &mut [u8]),
    ) -> Result<()> {
        if src.mem == dst.mem {
            // One memory: copy the source out to keep the borrows apart.
            let tmp = self.read(src, |s| s.to_vec())?;
            return self.write(dst, |d| f(&tmp, d));
        }
        // Take the destination out of the table so the borrows are disjoint.
        let g = self.gpu;
        let mut d = std::mem::replace(&mut self.mems[dst.mem], Mem::Temp(Vec::new()));
        let res = read_mem(g, &self.mems[src.mem], src, |s| {
            write_mem(g, &mut d, dst, |o| f(s, o))
        });
        self.mems[dst.mem] = d;
        res.and_then(|w| w)
            .map_err(|e| e.error(self.call, self.me()))
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
                                // A failed kernel, or a failed copy of the
                                // gpu layer's host fallback: the device's
                                // failure, not gmpi's.
                                Err(e) => {
                                    let what = format_args!(
                                        "reducing {} B of device memory at {a:#x} into {b:#x}",
                                        lo.len
                                    );
                                    self.fail(Error::device_copy(e, self.call, self.me(), what));
                                    true
                                }
                            }
                        }
                        _ => false,
                    };
                    if !on_gpu {
                        let res = self.reduce_into(lo, hi, |a, b| {
                            crate::op::apply_datatype(
                                &red.op,
                                red.dt,
                                a.len() / red.unit.max(1),
                                a,
                                b,
                            )
                        });
                        if let Err(e) = res {
                            self.fail(e);
                        }
                    }
                    true
                }
                Step::Copy { src, dst } => {
                    match self.on_device(*src, *dst) {
                        Some((a, b)) => {
                            if let Err(e) = self.gpu().copy_device(b, a, src.len) {
                                let what = format_args!(
                                    "copying {} B from device memory at {a:#x} to {b:#x}",
                                    src.len
                                );
                                self.fail(Error::device_copy(e, self.call, self.me(), what));
                            }
                        }
                        None => {
                            if let Err(e) = self.read_write(*src, *dst, |a, b| b.copy_from_slice(a))
                            {
                                self.fail(e);
                            }
                        }
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
                    let (g, call, me) = (self.gpu, self.call, self.me());
                    match self.read(src.sub(0, n), |s| view.unpack_with(g, call, me, s)) {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) | Err(e) => self.fail(e),
                    }
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

/// A staged access to device memory that failed: the gpu layer's error
/// and the bytes it was moving. The schedule fails with it
/// ([`Staging::error`]).
#[derive(Debug)]
struct Staging {
    e: GpuError,
    addr: u64,
    len: usize,
    /// Into device memory (a write), or out of it (a read).
    into: bool,
}

impl Staging {
    /// The schedule's error: `call` failed on `rank` (`MPI_ERR_OTHER`).
    #[cold]
    fn error(self, call: &str, rank: i32) -> Error {
        let dir = if self.into { "into" } else { "out of" };
        let what = format_args!(
            "staging {} B {dir} device memory at {:#x}",
            self.len, self.addr
        );
        Error::device_copy(self.e, call, rank, what)
    }
}

/// Says once per process that device reductions run on the CPU, and why.
fn host_reduce_fallback(e: &GpuError) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(target: "coll", "no device reduction kernels ({e}); reducing device buffers on the CPU through staged copies");
    });
}

/// Run `f` on the bytes of `r` in `m`: in place in host memory, on a
/// staged copy of device memory through `g` (`f` does not run if the copy
/// fails).
fn read_mem<R>(g: &Gpu, m: &Mem, r: Region, f: impl FnOnce(&[u8]) -> R) -> Result<R, Staging> {
    let at = m.addr() + r.off as u64;
    match m {
        Mem::User { kind, .. } if kind.is_host() => Ok(HostMem.with_read(at, r.len, f)),
        Mem::Temp(v) => Ok(f(&v[r.off..r.off + r.len])),
        _ => g
            .with_read(at, r.len, f)
            .map(|(x, _)| x)
            .map_err(|e| Staging {
                e,
                addr: at,
                len: r.len,
                into: false,
            }),
    }
}

/// Let `f` write the bytes of `r` in `m`: in place in host memory, through
/// a staging buffer copied into device memory by `g` (an error if that copy
/// fails).
fn write_mem<R>(
    g: &Gpu,
    m: &mut Mem,
    r: Region,
    f: impl FnOnce(&mut [u8]) -> R,
) -> Result<R, Staging> {
    let at = m.addr() + r.off as u64;
    match m {
        Mem::User { writable, kind, .. } => {
            assert!(*writable, "a schedule wrote a read-only buffer");
            if kind.is_host() {
                Ok(HostMem.with_write(at, r.len, f))
            } else {
                staged_write(g, at, r.len, f)
            }
        }
        Mem::Temp(v) => Ok(f(&mut v[r.off..r.off + r.len])),
        Mem::Dev(_) => staged_write(g, at, r.len, f),
    }
}

/// `f` fills a staging buffer that `g` copies into the `len` device bytes at
/// `at`.
fn staged_write<R>(
    g: &Gpu,
    at: u64,
    len: usize,
    f: impl FnOnce(&mut [u8]) -> R,
) -> Result<R, Staging> {
    g.with_write(at, len, f)
        .map(|(x, _)| x)
        .map_err(|e| Staging {
            e,
            addr: at,
            len,
            into: true,
        })
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

    /// Device copies that fail inside a schedule fail the schedule: its
    /// result is the error, and no later step runs.
    mod device {
        use std::sync::atomic::{AtomicBool, AtomicU32};
        use std::sync::{Arc, Mutex};

        use gmpi_btl::loopback::Loopback;
        use gmpi_gpu::double::TestCuda;
        use gmpi_gpu::{Gpu, GpuConfig, GpuError};
        use gmpi_pml::{Pml, PmlConfig};

        use super::super::*;
        use crate::buffer::Ty;
        use crate::comm::ShmState;
        use crate::datatype::Primitive;
        use crate::typemap::UserDatatype;

        const CALL: &str = "MPI_Allreduce";
        const I32: Datatype = Datatype::Primitive(Primitive::I32);
        const STICKY: &str = "CUDA_ERROR_ILLEGAL_ADDRESS: sticky";

        /// A one-rank world, its driver, and a gpu layer over a test
        /// double (the schedules' own; the driver is not asked to copy).
        struct World {
            comm: Arc<CommInner>,
            d: Driver<HostMem>,
            cuda: Arc<TestCuda>,
            g: &'static Gpu,
        }

        impl World {
            fn new() -> Self {
                Self::over(TestCuda::new(1))
            }

            fn over(cuda: TestCuda) -> Self {
                let comm = Arc::new(CommInner {
                    ctx: 0,
                    coll_ctx: 1,
                    rank: 0,
                    size: 1,
                    world: vec![0],
                    single_node: true,
                    coll_seq: AtomicU32::new(0),
                    nb_seq: AtomicU32::new(0),
                    freed: AtomicBool::new(false),
                    shm: Mutex::new(ShmState::Unavailable),
                    nb_area: Mutex::new(None),
                    remote: None,
                    agree: std::sync::OnceLock::new(),
                });
                let d = Driver::new(
                    Pml::new(0, 1, PmlConfig::default()),
                    vec![Box::new(Loopback::new(0))],
                    HostMem,
                    Arc::new(Gpu::host_only("test")),
                );
                let cuda = Arc::new(cuda);
                let g = Box::leak(Box::new(Gpu::with_api(cuda.clone(), GpuConfig::default())));
                Self { comm, d, cuda, g }
            }

            fn sched(&self) -> Sched {
                Sched::new(CALL, &self.comm, 0).on_gpu(self.g)
            }

            /// 64 B of device memory holding 1s.
            fn dev(&self) -> u64 {
                let p = self.cuda.malloc(64, 0);
                self.cuda.poke(p, &[1; 64]);
                p
            }

            /// Run `s` to its end: its result.
            fn run(&mut self, s: &mut Sched) -> Result<Option<Status>> {
                for _ in 0..10 {
                    s.advance(&mut self.d);
                    if s.is_done() {
                        return s.result();
                    }
                }
                panic!("the schedule never finished");
            }
        }

        /// `r`, the result of a schedule whose device copies failed: an
        /// `MPI_ERR_OTHER` naming the call, the rank, the driver call and
        /// what was copied, with the gpu layer's error as its source.
        fn check(r: Result<Option<Status>>, driver_call: &str, what: &str) {
            let e = r.expect_err("the schedule failed");
            assert_eq!(e.class(), ErrorClass::Other, "{e}");
            let m = e.message();
            for part in [CALL, "on rank 0", driver_call, STICKY, what] {
                assert!(m.contains(part), "{m:?} does not name {part:?}");
            }
            let src = std::error::Error::source(&e).expect("the gpu layer's error");
            assert!(
                matches!(src.downcast_ref::<GpuError>(), Some(GpuError::Driver { call, .. }) if *call == driver_call),
                "{src:?}"
            );
        }

        /// After the step under test, a copy of 9s into `out` that must not
        /// run once the schedule failed.
        fn then_copy_nines(s: &mut Sched, out: &mut [u8]) {
            let nines = s.temp_from(vec![9; out.len()]);
            let o = s.user(out.as_mut_ptr() as u64, out.len(), true);
            s.copy(nines, o);
        }

        #[test]
        fn a_failed_staged_read_fails_the_schedule() {
            let mut w = World::new();
            let (p, mut host, mut after) = (w.dev(), vec![0u8; 64], vec![0u8; 8]);
            let mut s = w.sched();
            let src = s.user(p, 64, false);
            let dst = s.user(host.as_mut_ptr() as u64, 64, true);
            s.copy(src, dst);
            then_copy_nines(&mut s, &mut after);
            w.cuda.fail_copies(Some(STICKY));
            let what = format!("staging 64 B out of device memory at {p:#x}");
            check(w.run(&mut s), "cuMemcpyDtoH_v2", &what);
            assert_eq!((host, after), (vec![0; 64], vec![0; 8]));
        }

        #[test]
        fn a_failed_staged_write_fails_the_schedule() {
            let mut w = World::new();
            let (p, mut after) = (w.dev(), vec![0u8; 8]);
            let mut s = w.sched();
            let src = s.temp_from(vec![5; 64]);
            let dst = s.user(p, 64, true);
            s.copy(src, dst);
            then_copy_nines(&mut s, &mut after);
            w.cuda.fail_copies(Some(STICKY));
            let what = format!("staging 64 B into device memory at {p:#x}");
            check(w.run(&mut s), "cuMemcpyHtoD_v2", &what);
            assert_eq!(w.cuda.peek(p, 64), vec![1; 64]);
            assert_eq!(after, vec![0; 8]);
        }

        #[test]
        fn a_failed_device_to_device_copy_fails_the_schedule() {
            let mut w = World::new();
            let (a, b, mut after) = (w.dev(), w.dev(), vec![0u8; 8]);
            let mut s = w.sched();
            let src = s.user(a, 64, false);
            let dst = s.user(b, 64, true);
            s.copy(src, dst);
            then_copy_nines(&mut s, &mut after);
            w.cuda.fail_copies(Some(STICKY));
            let what = format!("copying 64 B from device memory at {a:#x} to {b:#x}");
            check(w.run(&mut s), "cuMemcpyDtoD_v2", &what);
            assert_eq!(after, vec![0; 8]);
        }

        /// `MPIX_C_FLOAT16` on device memory reduces on the GPU (the
        /// double's kernel), with no copy to the host, and rounds as the
        /// host does.
        #[test]
        fn a_half_precision_reduction_of_device_memory_runs_a_kernel() {
            let mut w = World::new();
            let (a, b) = (w.dev(), w.dev());
            let h = |xs: &[f32]| -> Vec<u8> {
                xs.iter()
                    .flat_map(|&x| half::f16::from_f32(x).to_ne_bytes())
                    .collect()
            };
            w.cuda.poke(a, &h(&[0.5, 1.0, -3.0, 65504.0]));
            w.cuda.poke(b, &h(&[0.25, 2048.0, 1.5, 65504.0]));
            let mut s = w.sched();
            s.red = Some(Reduction {
                op: Op::Sum,
                dt: Datatype::Primitive(Primitive::F16),
                unit: 2,
            });
            let lo = s.user(a, 8, false);
            let hi = s.user(b, 8, true);
            s.reduce(lo, hi);
            let before = w.cuda.counts();
            w.run(&mut s).expect("the reduction ran");
            let c = w.cuda.counts();
            assert_eq!(c.reduces - before.reduces, 1, "one kernel");
            assert_eq!((c.dtoh - before.dtoh, c.htod - before.htod), (0, 0));
            assert_eq!(
                w.cuda.peek(b, 8),
                h(&[0.75, 2048.0, -1.5, f32::INFINITY]),
                "2048 + 1 rounds to even; 65504 + 65504 overflows"
            );
        }

        #[test]
        fn a_failed_device_reduction_fails_the_schedule() {
            // No kernels: the gpu layer reduces on host copies it makes
            // itself, and those fail.
            let mut w = World::over(TestCuda::new(1).without_kernels());
            let (a, b, mut after) = (w.dev(), w.dev(), vec![0u8; 8]);
            let mut s = w.sched();
            s.red = Some(Reduction {
                op: Op::Sum,
                dt: I32,
                unit: 4,
            });
            let lo = s.user(a, 64, false);
            let hi = s.user(b, 64, true);
            s.reduce(lo, hi);
            then_copy_nines(&mut s, &mut after);
            w.cuda.fail_copies(Some(STICKY));
            let what = format!("reducing 64 B of device memory at {a:#x} into {b:#x}");
            check(w.run(&mut s), "cuMemcpyDtoH_v2", &what);
            assert_eq!(w.cuda.peek(b, 64), vec![1; 64]);
            assert_eq!(after, vec![0; 8]);
        }

        #[test]
        fn a_failed_copy_of_a_host_reduction_fails_the_schedule() {
            let mut w = World::new();
            let (p, mut after) = (w.dev(), vec![0u8; 8]);
            let mut s = w.sched();
            s.red = Some(Reduction {
                op: Op::Sum,
                dt: I32,
                unit: 4,
            });
            // A host operand: the reduction runs on the CPU, through staged
            // copies of the device one.
            let lo = s.temp_from(vec![2; 64]);
            let hi = s.user(p, 64, true);
            s.reduce(lo, hi);
            then_copy_nines(&mut s, &mut after);
            w.cuda.fail_copies(Some(STICKY));
            let what = format!("staging 64 B out of device memory at {p:#x}");
            check(w.run(&mut s), "cuMemcpyDtoH_v2", &what);
            assert_eq!(w.cuda.peek(p, 64), vec![1; 64]);
            assert_eq!(after, vec![0; 8]);
        }

        /// Every other `i32` of the 60 B at `p`.
        fn strided(p: u64) -> View {
            View {
                base: p,
                len: 60,
                origin: 0,
                count: 1,
                ty: Ty::Derived(UserDatatype::vector(8, 1, 2, &I32).unwrap().committed()),
                writable: true,
            }
        }

        #[test]
        fn a_failed_unpack_into_device_memory_fails_the_schedule() {
            let mut w = World::new();
            let (p, mut after) = (w.dev(), vec![0u8; 8]);
            let mut s = w.sched();
            let src = s.temp_from(vec![3; 32]);
            s.push(Step::Unpack {
                src,
                view: strided(p),
                received: false,
            });
            then_copy_nines(&mut s, &mut after);
            w.cuda.fail_copies(Some(STICKY));
            let what = format!(
                "staging the 60 B region of a derived datatype out of device memory at {p:#x}"
            );
            check(w.run(&mut s), "cuMemcpyDtoH_v2", &what);
            assert_eq!(w.cuda.peek(p, 64), vec![1; 64]);
            assert_eq!(after, vec![0; 8]);
        }

        #[test]
        fn a_failed_pack_of_an_input_fails_the_schedule_before_it_runs() {
            let mut w = World::new();
            let (p, mut after) = (w.dev(), vec![0u8; 8]);
            let mut s = w.sched();
            w.cuda.fail_copies(Some(STICKY));
            let r = s.input(&strided(p));
            let mut out = vec![0u8; 32];
            let o = s.user(out.as_mut_ptr() as u64, 32, true);
            s.copy(r, o);
            then_copy_nines(&mut s, &mut after);
            let what = format!(
                "staging the 60 B region of a derived datatype out of device memory at {p:#x}"
            );
            check(w.run(&mut s), "cuMemcpyDtoH_v2", &what);
            assert_eq!((out, after), (vec![0; 32], vec![0; 8]));
        }
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
