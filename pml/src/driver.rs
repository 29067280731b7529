//! The progress driver: owns the btls, runs the pml's actions, feeds back the
//! btls' events. It is the only code that calls a btl.
//!
//! Ordering rule: actions are executed in the order the pml emitted them. When
//! a btl answers `NoResource`, that action and every later action for the
//! same peer wait in the peer's pending queue, retried on every
//! [`Driver::progress`] pass (never only from a completion callback — the
//! lesson of ob1's progress loop).
//!
//! User memory is reached through [`MemAccess`]; the runtime implements it
//! over real memory, tests over `gmpi_btl::sim::SimMemory`. [`WithGpu`]
//! adds device memory to either: device and managed bytes go through the gpu
//! layer's bounce buffers, and CUDA IPC descriptors are exported and mapped
//! there, so the runtime and the tests (over the gpu test double) run the
//! same device paths.
//!
//! Sleeping with several btls ([`Driver::wait`]): when the driver is built it
//! picks one *sleeper*, a btl with a [`Btl::waker`] (preferring one that
//! cannot itself watch: shm), provided every other btl can watch
//! ([`Btl::can_watch`]). An idle rank then arms the others
//! ([`Btl::watch`], which may also shorten or cancel the sleep), sleeps in
//! the sleeper for the whole timeout and disarms them ([`Btl::unwatch`]): a
//! message on any transport wakes it at once, and an idle rank wakes only at
//! its timeout. Without such a sleeper ([`Driver::wakes_across`] false) it
//! waits in each btl in turn for a share of the timeout, as before.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use gmpi_btl::{Btl, BtlError, Event, LocalMem, MemDesc, Rank, Submit, Wake};
use gmpi_gpu::{Gpu, IpcDesc, MemKind};

use crate::{
    Action, BtlId, Buf, Memory, Payload, Pml, PmlError, RecvArgs, ReqId, SendArgs, Status,
};

/// How the driver reads and writes user memory.
pub trait MemAccess {
    /// Run `f` over the `len` bytes at `addr`.
    fn with_read<R>(&self, addr: u64, len: usize, kind: MemKind, f: impl FnOnce(&[u8]) -> R) -> R;
    /// Run `f` over the `len` writable bytes at `addr`.
    fn with_write<R>(
        &mut self,
        addr: u64,
        len: usize,
        kind: MemKind,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> R;

    /// The CUDA IPC descriptor of the device bytes `addr..addr+len`; `None`
    /// where there is none (no CUDA, host, managed or pool memory).
    fn ipc_export(&mut self, addr: u64, len: usize) -> Option<IpcDesc> {
        let _ = (addr, len);
        None
    }

    /// Copy `len` bytes of `peer`'s IPC-exported memory `desc` into local
    /// memory at `dst`.
    fn ipc_get(
        &mut self,
        peer: Rank,
        desc: &IpcDesc,
        dst: u64,
        dst_kind: MemKind,
        len: usize,
    ) -> Result<(), String> {
        let _ = (peer, desc, dst, dst_kind, len);
        Err("CUDA is not available in this process".into())
    }

    /// Device memory exported as a dma-buf, for a GPUDirect btl.
    fn dmabuf(&mut self, addr: u64, len: usize) -> Option<OwnedFd> {
        let _ = (addr, len);
        None
    }

    /// How small device messages are copied (`"gdrcopy"`, `"cuda-copy"`).
    fn device_copy(&self) -> &'static str {
        "cuda-copy"
    }
}

/// Host memory `M` plus device memory through the gpu layer.
#[derive(Debug)]
pub struct WithGpu<M> {
    /// Host memory.
    pub host: M,
    /// The gpu layer (host-only without CUDA).
    pub gpu: Arc<Gpu>,
    copy: &'static str,
}

impl<M> WithGpu<M> {
    /// `host` plus the device memory `gpu` reaches.
    pub fn new(host: M, gpu: Arc<Gpu>) -> Self {
        let copy = gpu.eager_path().name();
        Self { host, gpu, copy }
    }
}

/// A device copy failed: the data cannot be delivered and the job cannot go
/// on (the launcher reports the rank's death and ends the job).
#[cold]
fn device_fault(what: &str, addr: u64, len: usize, e: gmpi_gpu::GpuError) -> ! {
    panic!("gmpi: {what} {len} bytes of device memory at {addr:#x} failed: {e}")
}

impl<M: MemAccess> MemAccess for WithGpu<M> {
    #[inline]
    fn with_read<R>(&self, addr: u64, len: usize, kind: MemKind, f: impl FnOnce(&[u8]) -> R) -> R {
        if kind.is_host() {
            return self.host.with_read(addr, len, kind, f);
        }
        match self.gpu.with_read(addr, len, f) {
            Ok((r, _)) => r,
            Err(e) => device_fault("reading", addr, len, e),
        }
    }

    #[inline]
    fn with_write<R>(
        &mut self,
        addr: u64,
        len: usize,
        kind: MemKind,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> R {
        if kind.is_host() {
            return self.host.with_write(addr, len, kind, f);
        }
        match self.gpu.with_write(addr, len, f) {
            Ok((r, _)) => r,
            Err(e) => device_fault("writing", addr, len, e),
        }
    }

    fn ipc_export(&mut self, addr: u64, len: usize) -> Option<IpcDesc> {
        self.gpu
            .ipc_export(addr, len)
            .map_err(|e| tracing::debug!(target: "pml", "no CUDA IPC for {addr:#x}+{len}: {e}; staging instead"))
            .ok()
    }

    fn ipc_get(
        &mut self,
        peer: Rank,
        desc: &IpcDesc,
        dst: u64,
        dst_kind: MemKind,
        len: usize,
    ) -> Result<(), String> {
        let src = self.gpu.ipc_map(peer, desc).map_err(|e| e.to_string())?;
        let gpu = &self.gpu;
        let res = if dst_kind.is_host() {
            self.host
                .with_write(dst, len, dst_kind, |d| gpu.copy_to_host(d, src).map(|_| ()))
        } else {
            gpu.copy_device(dst, src, len)
        };
        res.map_err(|e| e.to_string())
    }

    fn dmabuf(&mut self, addr: u64, len: usize) -> Option<OwnedFd> {
        self.gpu.export_dmabuf(addr, len).ok()
    }

    fn device_copy(&self) -> &'static str {
        self.copy
    }
}

struct PmlMem<'a, M> {
    mem: &'a mut M,
    btls: Option<&'a mut Vec<Box<dyn Btl>>>,
}

impl<M: MemAccess> Memory for PmlMem<'_, M> {
    #[inline]
    fn write(&mut self, addr: u64, kind: MemKind, data: &[u8]) {
        self.mem
            .with_write(addr, data.len(), kind, |d| gmpi_btl::copy_bytes(d, data));
    }

    fn fill(
        &mut self,
        addr: u64,
        len: usize,
        kind: MemKind,
        f: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> usize {
        if kind.is_host() {
            return self.mem.with_write(addr, len, kind, |d| f(d));
        }
        crate::fill_through_temporary(self, addr, len, kind, f)
    }

    fn register(&mut self, btl: BtlId, buf: Buf) -> Option<MemDesc> {
        let b = self.btls.as_mut().and_then(|b| b.get_mut(btl))?;
        if buf.kind.is_host() {
            return b.register(buf.addr, buf.len as u64);
        }
        let fd = self.mem.dmabuf(buf.addr, buf.len)?;
        b.register_device(buf.addr, buf.len as u64, fd.as_fd())
    }

    fn ipc_export(&mut self, buf: Buf) -> Option<IpcDesc> {
        self.mem.ipc_export(buf.addr, buf.len)
    }

    fn device_copy(&self) -> &'static str {
        self.mem.device_copy()
    }
}

/// The driver of one rank. See the module documentation.
pub struct Driver<M> {
    /// The pml it drives.
    pub pml: Pml,
    btls: Vec<Box<dyn Btl>>,
    mem: M,
    pending: Vec<VecDeque<Action>>,
    pending_count: usize,
    fatal: Option<PmlError>,
    sleep: Option<Sleep>,
    /// Per btl: passive ([`Btl::passive`]) and nothing submitted to it
    /// since a progress pass found it empty, so progress skips it.
    quiet: Vec<bool>,
    /// Per btl: [`Btl::passive`].
    passive: Vec<bool>,
}

/// How an idle rank with several btls sleeps (see the module documentation).
struct Sleep {
    /// The btl it sleeps in.
    sleeper: usize,
    /// Interrupts the sleeper's wait.
    wake: Arc<dyn Wake>,
    /// Every other btl: each watches while the rank sleeps.
    watchers: Vec<usize>,
}

/// Pick the sleeper: a btl with a waker, preferring those that cannot watch;
/// `None` with a single btl or when some other btl cannot watch.
fn pick_sleeper(btls: &[Box<dyn Btl>]) -> Option<Sleep> {
    if btls.len() < 2 {
        return None;
    }
    let watchable: Vec<bool> = btls.iter().map(|b| b.can_watch()).collect();
    if watchable.iter().filter(|w| !**w).count() > 1 {
        return None;
    }
    // At most one btl cannot watch: it must be the sleeper. Otherwise the
    // first with a waker. `waker` is asked once per btl at most.
    let (sleeper, wake) = match watchable.iter().position(|w| !*w) {
        Some(i) => (i, btls[i].waker()?),
        None => btls
            .iter()
            .enumerate()
            .find_map(|(i, b)| b.waker().map(|w| (i, w)))?,
    };
    Some(Sleep {
        sleeper,
        wake,
        watchers: (0..btls.len()).filter(|&i| i != sleeper).collect(),
    })
}

impl<M> std::fmt::Debug for Driver<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("pml", &self.pml)
            .field(
                "btls",
                &self.btls.iter().map(|b| b.caps().name).collect::<Vec<_>>(),
            )
            .field("pending", &self.pending_count)
            .finish()
    }
}

fn action_peer(a: &Action) -> Rank {
    match a {
        Action::Send { peer, .. } | Action::Get { peer, .. } | Action::IpcGet { peer, .. } => *peer,
    }
}

impl<M: MemAccess> Driver<M> {
    /// A driver over `btls` (registered with the pml in this order).
    pub fn new(mut pml: Pml, btls: Vec<Box<dyn Btl>>, mem: M, nprocs: u32) -> Self {
        for b in &btls {
            pml.add_btl(b.caps().clone(), &|p| b.reaches(p));
        }
        let passive: Vec<bool> = btls.iter().map(|b| b.passive()).collect();
        Self {
            pml,
            mem,
            pending: (0..nprocs).map(|_| VecDeque::new()).collect(),
            pending_count: 0,
            fatal: None,
            sleep: pick_sleeper(&btls),
            quiet: passive.clone(),
            passive,
            btls,
        }
    }

    /// Whether an idle rank sleeps in one btl while the others watch, so
    /// that a [`Driver::wait`] may be long whatever transport the next event
    /// comes from (trivially so with a single btl).
    pub fn wakes_across(&self) -> bool {
        self.btls.len() < 2 || self.sleep.is_some()
    }

    /// The btls, in registration order.
    pub fn btls(&self) -> &[Box<dyn Btl>] {
        &self.btls
    }

    /// The memory accessor.
    pub fn mem(&mut self) -> &mut M {
        &mut self.mem
    }

    /// A fatal transport or protocol error seen while progressing (a malformed
    /// fragment from a peer, a transport failure). The job cannot go on.
    pub fn fatal(&self) -> Option<&PmlError> {
        self.fatal.as_ref()
    }

    /// Post a send and start it.
    pub fn post_send(&mut self, a: SendArgs) -> Result<ReqId, PmlError> {
        let mut pm = PmlMem {
            mem: &mut self.mem,
            btls: Some(&mut self.btls),
        };
        let id = self.pml.post_send(a, &mut pm)?;
        self.flush();
        Ok(id)
    }

    /// Send, taking the inline fast path when the pml allows it. Returns
    /// `None` when the message is already on its way (nothing to wait for),
    /// else the request to wait on.
    pub fn send(&mut self, a: SendArgs) -> Result<Option<ReqId>, PmlError> {
        // An out-of-range destination falls through to `post_send`, which
        // reports it.
        if self
            .pending
            .get(a.dest as usize)
            .is_some_and(VecDeque::is_empty)
        {
            match self.pml.try_inline(&a) {
                None => {}
                Some(Err(e)) => return Err(e),
                Some(Ok((btl, header))) => {
                    self.quiet[btl] = false;
                    let b = &mut self.btls[btl];
                    let res = self.mem.with_read(a.buf.addr, a.buf.len, a.buf.kind, |d| {
                        b.send(a.dest, &[header.as_bytes(), d], 0)
                    });
                    return match res {
                        // Token 0 forbids `Queued` (btl contract): taken means done.
                        Ok(Submit::Done | Submit::Queued) => Ok(None),
                        Ok(Submit::NoResource) => {
                            let id = self.pml.inline_refused(&a, btl, header);
                            self.flush();
                            Ok(Some(id))
                        }
                        Err(e) => {
                            self.transport_error(a.dest, e);
                            Err(PmlError::PeerFailed(a.dest))
                        }
                    };
                }
            }
        }
        self.post_send(a).map(Some)
    }

    /// Post a receive (delivering a matching unexpected message at once).
    pub fn post_recv(&mut self, a: RecvArgs) -> Result<ReqId, PmlError> {
        let mut pm = PmlMem {
            mem: &mut self.mem,
            btls: None,
        };
        let id = self.pml.post_recv(a, &mut pm)?;
        self.flush();
        Ok(id)
    }

    /// Post a blocking call's receive ([`crate::Pml::post_recv_direct`]).
    pub fn post_recv_direct(&mut self, a: RecvArgs) -> Result<crate::Posted, PmlError> {
        let mut pm = PmlMem {
            mem: &mut self.mem,
            btls: None,
        };
        let p = self.pml.post_recv_direct(a, &mut pm)?;
        self.flush();
        Ok(p)
    }

    /// Receive a message matched by [`crate::Pml::improbe`].
    pub fn mrecv(&mut self, msg: u64, buf: crate::Buf) -> Option<ReqId> {
        let mut pm = PmlMem {
            mem: &mut self.mem,
            btls: None,
        };
        let id = self.pml.mrecv(msg, buf, &mut pm)?;
        self.flush();
        Some(id)
    }

    /// Cancel an unmatched receive.
    pub fn cancel(&mut self, id: ReqId) -> bool {
        self.pml.cancel(id)
    }

    /// Take a completed request's outcome.
    pub fn test(&mut self, id: ReqId) -> Option<Result<Status, PmlError>> {
        self.pml.test(id)
    }

    /// Whether work is queued in the driver (actions waiting for resources).
    pub fn has_pending(&self) -> bool {
        self.pending_count > 0 || self.pml.has_actions()
    }

    /// One progress pass over every btl. Returns the number of events handled
    /// (0 means: nothing happened, the caller may back off).
    #[inline]
    pub fn progress(&mut self) -> usize {
        let mut n = if self.pending_count > 0 {
            self.retry_pending()
        } else {
            0
        };
        for (i, btl) in self.btls.iter_mut().enumerate() {
            if self.quiet[i] {
                continue;
            }
            let pml = &mut self.pml;
            let mem = &mut self.mem;
            let fatal = &mut self.fatal;
            let got = btl.progress(&mut |ev| {
                let mut pm = PmlMem {
                    mem: &mut *mem,
                    btls: None,
                };
                match ev {
                    Event::Frag { peer, data } => {
                        if let Err(e) = pml.handle_frag(i, peer, data, &mut pm) {
                            tracing::error!(target: "pml", "fragment from rank {peer}: {e}");
                            fatal.get_or_insert(e);
                        }
                    }
                    Event::FragStream {
                        peer,
                        head,
                        len,
                        taken,
                        body,
                    } => {
                        if let Err(e) =
                            pml.handle_frag_stream(peer, head, len, taken, body, &mut pm)
                        {
                            tracing::error!(target: "pml", "fragment from rank {peer}: {e}");
                            fatal.get_or_insert(e);
                        }
                    }
                    Event::SendComplete { token } => pml.handle_send_done(token),
                    Event::GetComplete { token } => pml.handle_get_done(token),
                    Event::GetFailed { token, error } => {
                        pml.handle_get_failed(token, &error.to_string())
                    }
                    Event::PeerFailed { peer } => pml.handle_peer_failed(peer),
                }
            });
            if got == 0 && self.passive[i] {
                self.quiet[i] = true;
            }
            n += got;
        }
        if self.pml.has_actions() {
            self.flush();
        }
        n
    }

    /// Block until a btl may have an event, or `timeout`. Returns at once when
    /// the pml has actions not yet executed. Actions refused for lack of
    /// resources do not prevent sleeping: a btl's `wait` also returns when a
    /// refused peer has room again (the shm transport rings the refused
    /// sender's doorbell), and the timeout bounds the sleep for any btl that
    /// cannot tell.
    ///
    /// With several btls: one sleep in the sleeper while the others watch
    /// (see the module documentation), else a share of `timeout` in each.
    pub fn wait(&mut self, timeout: Duration) {
        if self.pml.has_actions() {
            return;
        }
        if let Some(s) = &self.sleep {
            let mut t = timeout;
            let mut armed = 0;
            for &w in &s.watchers {
                t = t.min(self.btls[w].watch(&s.wake, t));
                armed += 1;
                if t.is_zero() {
                    break;
                }
            }
            if !t.is_zero() {
                self.btls[s.sleeper].wait(t);
            }
            for &w in &s.watchers[..armed] {
                self.btls[w].unwatch();
            }
            return;
        }
        let n = self.btls.len().max(1) as u32;
        for b in &mut self.btls {
            b.wait(timeout / n);
        }
    }

    fn retry_pending(&mut self) -> usize {
        if self.pending_count == 0 {
            return 0;
        }
        let mut done = 0;
        for peer in 0..self.pending.len() {
            while let Some(a) = self.pending[peer].pop_front() {
                self.pending_count -= 1;
                match self.execute(a) {
                    None => done += 1,
                    Some(back) => {
                        self.pending[peer].push_front(back);
                        self.pending_count += 1;
                        break;
                    }
                }
            }
        }
        self.flush();
        done
    }

    /// Execute every action the pml has queued.
    ///
    /// Inlined test first: every posted receive and send flushes, and on
    /// the latency path (an eager message, a receive matched on arrival)
    /// the queue is empty, so that costs a load and a branch, not a call.
    #[inline]
    pub fn flush(&mut self) {
        if self.pml.has_actions() {
            self.flush_actions();
        }
    }

    #[inline(never)]
    fn flush_actions(&mut self) {
        while let Some(a) = self.pml.poll_action() {
            let peer = action_peer(&a) as usize;
            if !self.pending[peer].is_empty() {
                self.pending[peer].push_back(a);
                self.pending_count += 1;
                continue;
            }
            if let Some(back) = self.execute(a) {
                self.pending[peer].push_back(back);
                self.pending_count += 1;
            }
        }
    }

    fn transport_error(&mut self, peer: Rank, e: BtlError) {
        match e {
            BtlError::PeerFailed(p) => self.pml.handle_peer_failed(p),
            other => {
                tracing::error!(target: "pml", "transport error towards rank {peer}: {other}");
                self.fatal.get_or_insert(PmlError::Malformed(format!(
                    "transport error towards rank {peer}: {other}"
                )));
                self.pml.handle_peer_failed(peer);
            }
        }
    }

    /// Run one action; give it back if the btl had no resources.
    fn execute(&mut self, a: Action) -> Option<Action> {
        match a {
            Action::Send {
                btl,
                peer,
                header,
                payload,
                token,
            } => {
                self.quiet[btl] = false;
                let b = &mut self.btls[btl];
                // A staged chunk of device memory the btl refused: the host
                // copy just made, so that the retry sends it instead of
                // copying the chunk off the device again.
                let mut kept = None;
                // Rendezvous chunks go as streamed fragments: a btl that
                // reads a byte stream lets the receiver read them in place.
                let stream = header.is_frag();
                let submit = |b: &mut Box<dyn Btl>, parts: &[&[u8]]| {
                    if stream {
                        b.send_stream(peer, parts, token)
                    } else {
                        b.send(peer, parts, token)
                    }
                };
                let res = match &payload {
                    Payload::None => submit(b, &[header.as_bytes()]),
                    Payload::Bytes(v) => submit(b, &[header.as_bytes(), v]),
                    Payload::Mem { addr, len, kind } => {
                        self.mem.with_read(*addr, *len, *kind, |d| {
                            let r = submit(b, &[header.as_bytes(), d]);
                            if !kind.is_host() && matches!(r, Ok(Submit::NoResource)) {
                                kept = Some(d.to_vec());
                            }
                            r
                        })
                    }
                };
                match res {
                    Ok(Submit::Done) => {
                        if token != 0 {
                            self.pml.handle_send_done(token);
                        }
                        None
                    }
                    Ok(Submit::Queued) => None,
                    Ok(Submit::NoResource) => Some(Action::Send {
                        btl,
                        peer,
                        header,
                        payload: kept.map_or(payload, Payload::Bytes),
                        token,
                    }),
                    Err(e) => {
                        self.transport_error(peer, e);
                        None
                    }
                }
            }
            Action::Get {
                btl,
                peer,
                desc,
                offset,
                dst,
                len,
                token,
                alone,
                ..
            } => {
                self.quiet[btl] = false;
                let b = &mut self.btls[btl];
                let d = LocalMem { addr: dst, len };
                // SAFETY: `dst` is the buffer of a receive request in its
                // Pulling state (host memory, or device memory the btl
                // registered for GPUDirect), which the runtime keeps alive
                // and leaves alone until the request completes; the request
                // completes only after this get's Done, error, GetComplete
                // or GetFailed (the pml's `handle_get_*`).
                #[allow(unsafe_code)]
                let res = unsafe {
                    if alone {
                        b.get_alone(peer, &desc, offset, d, token)
                    } else {
                        b.get(peer, &desc, offset, d, token)
                    }
                };
                match res {
                    Ok(Submit::Done) => {
                        self.pml.handle_get_done(token);
                        None
                    }
                    Ok(Submit::Queued) => None,
                    Ok(Submit::NoResource) => Some(a),
                    Err(BtlError::PeerFailed(p)) => {
                        self.pml.handle_peer_failed(p);
                        None
                    }
                    Err(e) => {
                        self.pml.handle_get_failed(token, &e.to_string());
                        None
                    }
                }
            }
            Action::IpcGet {
                peer,
                desc,
                dst,
                dst_kind,
                len,
                token,
            } => {
                match self.mem.ipc_get(peer, &desc, dst, dst_kind, len) {
                    Ok(()) => self.pml.handle_get_done(token),
                    Err(why) => self.pml.handle_get_failed(token, &why),
                }
                None
            }
        }
    }
}
