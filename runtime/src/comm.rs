//! Communicators: point-to-point operations, and making, comparing and
//! freeing communicators. (Collectives are in `coll/`.)
//!
//! Context ids: every communicator owns two (point-to-point and collective).
//! A new communicator's ids are the maximum of the parent's ranks' next free
//! id, agreed by a collective over the parent, and each rank's next free id
//! moves past them; ids only grow, so no two live communicators sharing a
//! process ever share an id, and a message can never match a receive on
//! another communicator.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use gmpi_pml::{Buf, MemKind, RecvArgs, SendArgs, SendMode};

use crate::buffer::{Buffer, BufferMut, View};
use crate::coll::sched::{Sched, Step};
use crate::engine::{self, Engine, Locked};
use crate::error::{Error, ErrorClass, Result};
use crate::group::{Comparison, Group, UNDEFINED};
use crate::request::{Request, Status};
use crate::{ANY_SOURCE, ANY_TAG, PROC_NULL, TAG_UB};

/// The bit that makes a communicator's context id its partitioned context
/// (`MPI_Psend_init`/`MPI_Precv_init` traffic), distinct from its
/// point-to-point and collective ones: context ids stay below it.
pub(crate) const PART_CTX: u32 = 1 << 31;

/// The bit that makes a communicator's context the context of its
/// agreement shadow ([`Communicator::agreement`]). Ordinary context ids
/// stay below it (the context-id agreements check).
pub(crate) const AGREE_CTX: u32 = 1 << 30;

/// What a communicator is, shared by its clones (and by schedules running on
/// it).
#[derive(Debug)]
pub(crate) struct CommInner {
    /// Context id of point-to-point traffic.
    pub ctx: u32,
    /// Context id of collective traffic (never matches user messages).
    pub coll_ctx: u32,
    pub rank: i32,
    pub size: i32,
    /// World rank of each rank of this communicator.
    pub world: Vec<u32>,
    /// Whether every member lives on this node.
    pub single_node: bool,
    /// Sequence number of the next blocking collective (its tag: even).
    pub coll_seq: AtomicU32,
    /// Sequence number of the next non-blocking (or persistent) collective
    /// (its tag: odd). Two sequences, as MPICH keeps them: a program that
    /// starts a non-blocking collective while the others are in a blocking
    /// one (mpi4py's agreement fallback does) still matches.
    pub nb_seq: AtomicU32,
    /// Set by [`Communicator::free`]: every later call fails.
    pub freed: AtomicBool,
    /// The shared-memory collective area, made at the first collective that
    /// wants it.
    pub shm: Mutex<ShmState>,
    /// The shared-memory area of the non-blocking collectives, apart from
    /// [`shm`](Self::shm) (their epochs are ordered apart from the blocking
    /// ones'): set up with the communicator where every rank agrees on it
    /// without a wait (`MPI_COMM_WORLD`, at `MPI_Init`), else `None` and
    /// they take their schedules (`coll/shm/nb.rs`).
    pub nb_area: Mutex<Option<Box<crate::coll::shm::nb::Ready>>>,
    /// The remote group of an intercommunicator (`None`: an intracommunicator).
    pub remote: Option<Remote>,
    /// The agreement shadow ([`Communicator::agreement`]), made on first use.
    pub agree: std::sync::OnceLock<Communicator>,
}

/// What makes a communicator an intercommunicator: the group on the other
/// side, which its point-to-point ranks name, and a private
/// intracommunicator over the local group for the local phases of its
/// collectives and constructors.
#[derive(Debug)]
pub(crate) struct Remote {
    /// World rank of each rank of the remote group.
    pub world: Vec<u32>,
    /// The local group, on contexts `ctx + 2` and `ctx + 3` of the
    /// intercommunicator (both groups use the same pair; they share no
    /// process).
    pub local: Communicator,
}

impl CommInner {
    /// World ranks of the ranks point-to-point calls name: the group's own,
    /// or the remote group's on an intercommunicator.
    #[inline]
    pub fn peers(&self) -> &[u32] {
        match &self.remote {
            Some(r) => &r.world,
            None => &self.world,
        }
    }

    /// A send of `buf` on context `ctx` to rank `dest` of this communicator.
    pub fn send_args(&self, ctx: u32, buf: Buf, dest: i32, tag: i32, mode: SendMode) -> SendArgs {
        SendArgs {
            ctx,
            src: self.rank as u32,
            dest: self.peers()[dest as usize],
            tag,
            buf,
            mode,
        }
    }

    /// A receive into `buf` on context `ctx` from rank `src` (or
    /// `ANY_SOURCE`) with `tag` (or `ANY_TAG`).
    pub fn recv_args(&self, ctx: u32, buf: Buf, src: i32, tag: i32) -> RecvArgs {
        let any = src == ANY_SOURCE;
        RecvArgs {
            ctx,
            src: (!any).then_some(src as u32),
            src_world: (!any).then(|| self.peers()[src as usize]),
            tag: (tag != ANY_TAG).then_some(tag),
            buf,
            consumed: false,
        }
    }
}

#[cold]
#[inline(never)]
fn freed(call: &str) -> Error {
    Error::new(
        ErrorClass::Comm,
        call,
        -1,
        "the communicator has been freed",
    )
}

/// Whether a communicator has a shared-memory collective area.
#[derive(Debug, Default)]
pub(crate) enum ShmState {
    #[default]
    NotTried,
    Unavailable,
    /// The area, and the last call's [`Query`](crate::coll::select::Query)
    /// that took the tiny road on it (`tiny_road` in `coll/shm/mod.rs`):
    /// the same query again takes it again, without a second selection.
    Ready(
        Box<gmpi_btl_shm::ShmColl>,
        Option<crate::coll::select::Query>,
    ),
}

/// A communicator. Cloning is cheap and refers to the same communicator;
/// the communicator is freed when the last clone is dropped (or at once by
/// [`Communicator::free`]).
#[derive(Debug, Clone)]
pub struct Communicator {
    pub(crate) inner: Arc<CommInner>,
}

impl Communicator {
    pub(crate) fn world(e: &Engine) -> Self {
        Self::from_parts(e, 0, (0..e.size).collect())
    }

    /// A communicator over `world` (world ranks in order) with contexts
    /// `ctx` and `ctx + 1`; this process must be a member.
    pub(crate) fn from_parts(e: &Engine, ctx: u32, world: Vec<u32>) -> Self {
        let rank = world
            .iter()
            .position(|&w| w == e.rank)
            .expect("a member of its own communicator") as i32;
        let mine = e.node_of[e.rank as usize];
        let single_node = world.iter().all(|&w| e.node_of[w as usize] == mine);
        Self {
            inner: Arc::new(CommInner {
                ctx,
                coll_ctx: ctx + 1,
                rank,
                size: world.len() as i32,
                world,
                single_node,
                coll_seq: AtomicU32::new(0),
                nb_seq: AtomicU32::new(0),
                freed: AtomicBool::new(false),
                shm: Mutex::new(ShmState::NotTried),
                nb_area: Mutex::new(None),
                remote: None,
                agree: std::sync::OnceLock::new(),
            }),
        }
    }

    /// An intercommunicator from the local group `local` (this process a
    /// member) to the disjoint group `remote`, on contexts `ctx`, `ctx + 1`
    /// (and `ctx + 2`, `ctx + 3` for its local group).
    pub(crate) fn inter_from_parts(
        e: &Engine,
        ctx: u32,
        local: Vec<u32>,
        remote: Vec<u32>,
    ) -> Self {
        let local = Self::from_parts(e, ctx + 2, local);
        Self {
            inner: Arc::new(CommInner {
                ctx,
                coll_ctx: ctx + 1,
                rank: local.inner.rank,
                size: local.inner.size,
                world: local.inner.world.clone(),
                // Never a shared-memory area: collectives cross groups.
                single_node: false,
                coll_seq: AtomicU32::new(0),
                nb_seq: AtomicU32::new(0),
                freed: AtomicBool::new(false),
                shm: Mutex::new(ShmState::Unavailable),
                nb_area: Mutex::new(None),
                agree: std::sync::OnceLock::new(),
                remote: Some(Remote {
                    world: remote,
                    local,
                }),
            }),
        }
    }

    /// This process's rank in the communicator.
    pub fn rank(&self) -> i32 {
        self.inner.rank
    }

    /// Number of ranks in the communicator.
    pub fn size(&self) -> i32 {
        self.inner.size
    }

    /// Number of ranks point-to-point calls can name (the remote group's on
    /// an intercommunicator).
    #[inline]
    fn peer_count(&self) -> i32 {
        self.inner.peers().len() as i32
    }

    /// "communicator size N" or "remote group size N", for messages.
    pub(crate) fn peers_desc(&self) -> String {
        match &self.inner.remote {
            Some(r) => format!("remote group size {}", r.world.len()),
            None => format!("communicator size {}", self.size()),
        }
    }

    // The argument checks of every point-to-point call: the test inlined,
    // the error (formatting) out of line, so a valid call pays a compare or
    // two.

    #[inline]
    pub(crate) fn check_dest(&self, call: &str, dest: i32) -> Result<()> {
        if dest == PROC_NULL || (0..self.peer_count()).contains(&dest) {
            Ok(())
        } else {
            Err(self.bad_rank(call, "destination", dest))
        }
    }

    #[inline]
    pub(crate) fn check_src(&self, call: &str, src: i32) -> Result<()> {
        if src == PROC_NULL || src == ANY_SOURCE || (0..self.peer_count()).contains(&src) {
            Ok(())
        } else {
            Err(self.bad_rank(call, "source", src))
        }
    }

    #[cold]
    #[inline(never)]
    fn bad_rank(&self, call: &str, what: &str, r: i32) -> Error {
        Error::new(
            ErrorClass::Rank,
            call,
            self.rank(),
            format!("invalid {what} rank {r} ({})", self.peers_desc()),
        )
    }

    #[inline]
    pub(crate) fn check_send_tag(&self, call: &str, tag: i32) -> Result<()> {
        if (0..=TAG_UB).contains(&tag) {
            Ok(())
        } else {
            Err(self.bad_tag(call, tag, ""))
        }
    }

    #[inline]
    pub(crate) fn check_recv_tag(&self, call: &str, tag: i32) -> Result<()> {
        if tag == ANY_TAG || (0..=TAG_UB).contains(&tag) {
            Ok(())
        } else {
            Err(self.bad_tag(call, tag, " or ANY_TAG"))
        }
    }

    #[cold]
    #[inline(never)]
    fn bad_tag(&self, call: &str, tag: i32, or: &str) -> Error {
        Error::new(
            ErrorClass::Tag,
            call,
            self.rank(),
            format!("invalid tag {tag} (must be 0..={TAG_UB}{or})"),
        )
    }

    /// Fail `call` if the communicator was freed.
    #[inline]
    pub(crate) fn check_live(&self, call: &str) -> Result<()> {
        if self.inner.freed.load(Ordering::Relaxed) {
            Err(freed(call))
        } else {
            Ok(())
        }
    }

    /// A point-to-point send's checks (live communicator, destination,
    /// tag): `Ok(false)` for a send to `PROC_NULL`, which does nothing.
    #[inline]
    pub(crate) fn send_checked(&self, call: &str, dest: i32, tag: i32) -> Result<bool> {
        self.check_live(call)?;
        self.check_dest(call, dest)?;
        self.check_send_tag(call, tag)?;
        Ok(dest != PROC_NULL)
    }

    /// A point-to-point receive's checks (live communicator, source, tag):
    /// `Ok(false)` for a receive from `PROC_NULL`, which completes at once.
    #[inline]
    pub(crate) fn recv_checked(&self, call: &str, src: i32, tag: i32) -> Result<bool> {
        self.check_live(call)?;
        self.check_src(call, src)?;
        self.check_recv_tag(call, tag)?;
        Ok(src != PROC_NULL)
    }

    /// Start a send of the `len` contiguous bytes at `addr`: `Ok(None)` if
    /// it already completed.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn start_send_bytes(
        &self,
        e: &mut Engine,
        call: &'static str,
        addr: u64,
        len: usize,
        dest: i32,
        tag: i32,
        mode: SendMode,
    ) -> Result<Option<gmpi_pml::ReqId>> {
        self.start_send_bytes_on(e, call, self.inner.ctx, addr, len, dest, tag, mode)
    }

    /// [`Communicator::start_send_bytes`] on context `ctx`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn start_send_bytes_on(
        &self,
        e: &mut Engine,
        call: &'static str,
        ctx: u32,
        addr: u64,
        len: usize,
        dest: i32,
        tag: i32,
        mode: SendMode,
    ) -> Result<Option<gmpi_pml::ReqId>> {
        let buf = Buf {
            addr,
            len,
            kind: self.classify(e, call, addr, len)?,
        };
        let args = self.inner.send_args(ctx, buf, dest, tag, mode);
        e.driver
            .send(args)
            .map_err(|err| Error::from_pml(err, call, self.rank()))
    }

    /// Start a receive into the `len` contiguous bytes at `addr`.
    #[inline]
    pub(crate) fn start_recv_bytes(
        &self,
        e: &mut Engine,
        call: &'static str,
        addr: u64,
        len: usize,
        src: i32,
        tag: i32,
    ) -> Result<gmpi_pml::ReqId> {
        self.start_recv_bytes_on(e, call, self.inner.ctx, addr, len, src, tag)
    }

    /// [`Communicator::start_recv_bytes`] on context `ctx`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn start_recv_bytes_on(
        &self,
        e: &mut Engine,
        call: &'static str,
        ctx: u32,
        addr: u64,
        len: usize,
        src: i32,
        tag: i32,
    ) -> Result<gmpi_pml::ReqId> {
        let args = self.recv_args_bytes(e, call, ctx, addr, len, src, tag)?;
        e.driver
            .post_recv(args)
            .map_err(|err| Error::from_pml(err, call, self.rank()))
    }

    /// The pml's arguments for a receive on context `ctx` into the `len`
    /// contiguous bytes at `addr` (host or device, as the gpu layer
    /// classifies them).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn recv_args_bytes(
        &self,
        e: &Engine,
        call: &'static str,
        ctx: u32,
        addr: u64,
        len: usize,
        src: i32,
        tag: i32,
    ) -> Result<RecvArgs> {
        let buf = Buf {
            addr,
            len,
            kind: self.classify(e, call, addr, len)?,
        };
        Ok(self.inner.recv_args(ctx, buf, src, tag))
    }

    /// Where the `len` bytes at `addr` live; a failed driver query is an
    /// error of `call`, never host memory.
    #[inline(always)]
    fn classify(&self, e: &Engine, call: &'static str, addr: u64, len: usize) -> Result<MemKind> {
        match e.gpu.classify(addr, len) {
            Ok(k) => Ok(k),
            Err(err) => Err(self.classify_failed(err, call, addr)),
        }
    }

    /// [`Communicator::classify`]'s error.
    #[cold]
    #[inline(never)]
    fn classify_failed(&self, err: gmpi_gpu::GpuError, call: &'static str, addr: u64) -> Error {
        Error::classify_failed(err, call, self.rank(), addr)
    }

    /// A blocking receive into the `len` contiguous bytes at `addr`: posted
    /// through the pml's direct slot when it can be, then waited for.
    pub(crate) fn recv_wait_bytes(
        &self,
        e: &mut Locked,
        call: &'static str,
        addr: u64,
        len: usize,
        src: i32,
        tag: i32,
    ) -> Result<Status> {
        let args = self.recv_args_bytes(e, call, self.inner.ctx, addr, len, src, tag)?;
        if engine::multithreaded() {
            // The direct slot is one per process: threads would share it.
            let id = e
                .driver
                .post_recv(args)
                .map_err(|err| Error::from_pml(err, call, self.rank()))?;
            return e.wait_handle(call, Handle::Pml(id));
        }
        match e.driver.post_recv_direct(args) {
            Ok(gmpi_pml::Posted::Direct) => e.wait_direct(call),
            Ok(gmpi_pml::Posted::Req(id)) => e.wait_handle(call, Handle::Pml(id)),
            Err(err) => Err(Error::from_pml(err, call, self.rank())),
        }
    }

    /// Start a send of `v`: `Ok(None)` if it already completed, else the
    /// request (a pml request for contiguous data, a schedule owning the
    /// packed copy otherwise).
    fn start_send(
        &self,
        e: &mut Locked,
        call: &'static str,
        v: &View,
        dest: i32,
        tag: i32,
        mode: SendMode,
    ) -> Result<Option<Handle>> {
        self.start_send_on(e, call, self.inner.ctx, v, dest, tag, mode)
    }

    /// [`Communicator::start_send`] on context `ctx`.
    #[allow(clippy::too_many_arguments)]
    fn start_send_on(
        &self,
        e: &mut Locked,
        call: &'static str,
        ctx: u32,
        v: &View,
        dest: i32,
        tag: i32,
        mode: SendMode,
    ) -> Result<Option<Handle>> {
        if let Some(addr) = v.contig_addr() {
            return self
                .start_send_bytes_on(&mut *e, call, ctx, addr, v.bytes(), dest, tag, mode)
                .map(|o| o.map(Handle::Pml));
        }
        let data = v.pack(call, self.rank())?;
        let mut s = Sched::p2p_on(call, &self.inner, ctx, tag, mode);
        let r = s.temp_from(data);
        s.push(Step::Send(r, dest));
        s.push(Step::Wait);
        Ok(Some(e.park(s)))
    }

    /// Start a receive into `v`.
    fn start_recv(
        &self,
        e: &mut Locked,
        call: &'static str,
        v: &View,
        src: i32,
        tag: i32,
    ) -> Result<Handle> {
        self.start_recv_on(e, call, self.inner.ctx, v, src, tag)
    }

    /// [`Communicator::start_recv`] on context `ctx`.
    fn start_recv_on(
        &self,
        e: &mut Locked,
        call: &'static str,
        ctx: u32,
        v: &View,
        src: i32,
        tag: i32,
    ) -> Result<Handle> {
        if let Some(addr) = v.contig_addr() {
            return self
                .start_recv_bytes_on(&mut *e, call, ctx, addr, v.bytes(), src, tag)
                .map(Handle::Pml);
        }
        let mut s = Sched::p2p_on(call, &self.inner, ctx, tag, SendMode::Standard);
        let r = s.temp(v.bytes());
        s.push(Step::RecvAny(r, src, tag));
        s.push(Step::Wait);
        s.push(Step::Unpack {
            src: r,
            view: v.clone(),
            received: true,
        });
        Ok(e.park(s))
    }

    fn blocking_send<B: Buffer + ?Sized>(
        &self,
        call: &'static str,
        buf: &B,
        dest: i32,
        tag: i32,
        mode: SendMode,
    ) -> Result<()> {
        if !self.send_checked(call, dest, tag)? {
            return Ok(());
        }
        let v = buf.view();
        engine::with(call, |e| {
            match self.start_send(e, call, &v, dest, tag, mode)? {
                None => Ok(()),
                Some(h) => e.wait_handle(call, h).map(|_| ()),
            }
        })
    }

    /// Send `buf` to `dest` with `tag` (`MPI_Send`).
    pub fn send<B: Buffer + ?Sized>(&self, buf: &B, dest: i32, tag: i32) -> Result<()> {
        self.blocking_send("MPI_Send", buf, dest, tag, SendMode::Standard)
    }

    /// Synchronous send: returns once the receiver has matched it (`MPI_Ssend`).
    pub fn ssend<B: Buffer + ?Sized>(&self, buf: &B, dest: i32, tag: i32) -> Result<()> {
        self.blocking_send("MPI_Ssend", buf, dest, tag, SendMode::Synchronous)
    }

    /// Receive into `buf` from `src` (a rank or [`ANY_SOURCE`]) with `tag` (or
    /// [`ANY_TAG`]) (`MPI_Recv`). A message longer than `buf` fails with
    /// `MPI_ERR_TRUNCATE` and writes nothing past `buf`.
    pub fn recv<B: BufferMut + ?Sized>(&self, buf: &mut B, src: i32, tag: i32) -> Result<Status> {
        const CALL: &str = "MPI_Recv";
        if !self.recv_checked(CALL, src, tag)? {
            return Ok(Status::empty());
        }
        let v = buf.view_mut();
        engine::with(CALL, |e| {
            if let Some(addr) = v.contig_addr() {
                return self.recv_wait_bytes(e, CALL, addr, v.bytes(), src, tag);
            }
            let h = self.start_recv(e, CALL, &v, src, tag)?;
            e.wait_handle(CALL, h)
        })
    }

    fn nonblocking_send<'a, B: Buffer + ?Sized>(
        &self,
        call: &'static str,
        buf: &'a B,
        dest: i32,
        tag: i32,
        mode: SendMode,
    ) -> Result<Request<'a>> {
        if !self.send_checked(call, dest, tag)? {
            return Ok(Request::completed(call, Status::empty()));
        }
        let v = buf.view();
        let h = engine::with(call, |e| self.start_send(e, call, &v, dest, tag, mode))?;
        Ok(match h {
            Some(h) => Request::new(h, call),
            None => Request::completed(call, Status::empty()),
        })
    }

    /// Start a send (`MPI_Isend`).
    pub fn isend<'a, B: Buffer + ?Sized>(
        &self,
        buf: &'a B,
        dest: i32,
        tag: i32,
    ) -> Result<Request<'a>> {
        self.nonblocking_send("MPI_Isend", buf, dest, tag, SendMode::Standard)
    }

    /// Start a synchronous send (`MPI_Issend`).
    pub fn issend<'a, B: Buffer + ?Sized>(
        &self,
        buf: &'a B,
        dest: i32,
        tag: i32,
    ) -> Result<Request<'a>> {
        self.nonblocking_send("MPI_Issend", buf, dest, tag, SendMode::Synchronous)
    }

    /// Start a receive (`MPI_Irecv`).
    pub fn irecv<'a, B: BufferMut + ?Sized>(
        &self,
        buf: &'a mut B,
        src: i32,
        tag: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Irecv";
        if !self.recv_checked(CALL, src, tag)? {
            return Ok(Request::completed(CALL, Status::empty()));
        }
        let v = buf.view_mut();
        let h = engine::with(CALL, |e| self.start_recv(e, CALL, &v, src, tag))?;
        Ok(Request::new(h, CALL))
    }

    /// Start the send of a partitioned communication (`MPI_Psend_init`'s
    /// transfer, once every partition is ready): like [`Communicator::isend`]
    /// but on this communicator's partitioned context, which point-to-point
    /// and collective traffic never match.
    pub fn isend_partitioned<'a, B: Buffer + ?Sized>(
        &self,
        call: &'static str,
        buf: &'a B,
        dest: i32,
        tag: i32,
    ) -> Result<Request<'a>> {
        if !self.send_checked(call, dest, tag)? {
            return Ok(Request::completed(call, Status::empty()));
        }
        let v = buf.view();
        let ctx = self.inner.ctx | PART_CTX;
        let h = engine::with(call, |e| {
            self.start_send_on(e, call, ctx, &v, dest, tag, SendMode::Standard)
        })?;
        Ok(match h {
            Some(h) => Request::new(h, call),
            None => Request::completed(call, Status::empty()),
        })
    }

    /// Start the receive of a partitioned communication, on the
    /// partitioned context ([`Communicator::isend_partitioned`]).
    pub fn irecv_partitioned<'a, B: BufferMut + ?Sized>(
        &self,
        call: &'static str,
        buf: &'a mut B,
        src: i32,
        tag: i32,
    ) -> Result<Request<'a>> {
        if !self.recv_checked(call, src, tag)? {
            return Ok(Request::completed(call, Status::empty()));
        }
        let v = buf.view_mut();
        let ctx = self.inner.ctx | PART_CTX;
        let h = engine::with(call, |e| self.start_recv_on(e, call, ctx, &v, src, tag))?;
        Ok(Request::new(h, call))
    }

    /// Send and receive at once, deadlock-free (`MPI_Sendrecv`).
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        sbuf: &S,
        dest: i32,
        stag: i32,
        rbuf: &mut R,
        src: i32,
        rtag: i32,
    ) -> Result<Status> {
        const CALL: &str = "MPI_Sendrecv";
        self.check_live(CALL)?;
        self.check_dest(CALL, dest)?;
        self.check_send_tag(CALL, stag)?;
        self.check_src(CALL, src)?;
        self.check_recv_tag(CALL, rtag)?;
        let (sv, rv) = (sbuf.view(), rbuf.view_mut());
        engine::with(CALL, |e| {
            let r = if src == PROC_NULL {
                None
            } else {
                Some(self.start_recv(e, CALL, &rv, src, rtag)?)
            };
            let s = if dest == PROC_NULL {
                None
            } else {
                self.start_send(e, CALL, &sv, dest, stag, SendMode::Standard)?
            };
            let sres = s.map(|h| e.wait_handle(CALL, h)).transpose();
            let rres = r.map(|h| e.wait_handle(CALL, h)).transpose();
            sres?;
            Ok(rres?.unwrap_or_else(Status::empty))
        })
    }

    /// Wait for a matching message without receiving it (`MPI_Probe`).
    pub fn probe(&self, src: i32, tag: i32) -> Result<Status> {
        const CALL: &str = "MPI_Probe";
        self.check_live(CALL)?;
        self.check_src(CALL, src)?;
        self.check_recv_tag(CALL, tag)?;
        if src == PROC_NULL {
            return Ok(Status::empty());
        }
        let (s, t) = (
            (src != ANY_SOURCE).then_some(src as u32),
            (tag != ANY_TAG).then_some(tag),
        );
        let ctx = self.inner.ctx;
        engine::with(CALL, |e| {
            let mut found = None;
            e.wait_until(CALL, |e| {
                found = e.driver.pml.iprobe(ctx, s, t);
                Ok(found.is_some())
            })?;
            Ok(Status::from_pml(found.expect("loop ended on a match")))
        })
    }

    /// Check for a matching message without receiving it (`MPI_Iprobe`).
    pub fn iprobe(&self, src: i32, tag: i32) -> Result<Option<Status>> {
        const CALL: &str = "MPI_Iprobe";
        self.check_live(CALL)?;
        self.check_src(CALL, src)?;
        self.check_recv_tag(CALL, tag)?;
        if src == PROC_NULL {
            return Ok(Some(Status::empty()));
        }
        let (s, t) = (
            (src != ANY_SOURCE).then_some(src as u32),
            (tag != ANY_TAG).then_some(tag),
        );
        let ctx = self.inner.ctx;
        engine::with(CALL, |e| {
            e.poke(CALL)?;
            Ok(e.driver.pml.iprobe(ctx, s, t).map(Status::from_pml))
        })
    }

    /// Wait for a matching message and take it out of matching (`MPI_Mprobe`):
    /// only [`Communicator::mrecv`] with the returned [`Message`] receives
    /// it. From `PROC_NULL`: `Message::no_proc()`.
    pub fn mprobe(&self, src: i32, tag: i32) -> Result<(Status, Message)> {
        const CALL: &str = "MPI_Mprobe";
        self.check_live(CALL)?;
        self.check_src(CALL, src)?;
        self.check_recv_tag(CALL, tag)?;
        if src == PROC_NULL {
            return Ok((Status::empty(), Message::no_proc()));
        }
        let (s, t) = (
            (src != ANY_SOURCE).then_some(src as u32),
            (tag != ANY_TAG).then_some(tag),
        );
        let ctx = self.inner.ctx;
        engine::with(CALL, |e| {
            let mut found = None;
            e.wait_until(CALL, |e| {
                found = e.driver.pml.improbe(ctx, s, t);
                Ok(found.is_some())
            })?;
            let (st, id) = found.expect("loop ended on a match");
            Ok((Status::from_pml(st), Message { id: Some(id) }))
        })
    }

    /// [`Communicator::mprobe`] without waiting (`MPI_Improbe`).
    pub fn improbe(&self, src: i32, tag: i32) -> Result<Option<(Status, Message)>> {
        const CALL: &str = "MPI_Improbe";
        self.check_live(CALL)?;
        self.check_src(CALL, src)?;
        self.check_recv_tag(CALL, tag)?;
        if src == PROC_NULL {
            return Ok(Some((Status::empty(), Message::no_proc())));
        }
        let (s, t) = (
            (src != ANY_SOURCE).then_some(src as u32),
            (tag != ANY_TAG).then_some(tag),
        );
        let ctx = self.inner.ctx;
        engine::with(CALL, |e| {
            e.poke(CALL)?;
            Ok(e.driver
                .pml
                .improbe(ctx, s, t)
                .map(|(st, id)| (Status::from_pml(st), Message { id: Some(id) })))
        })
    }

    /// Receive the message `msg` that [`Communicator::mprobe`] matched
    /// (`MPI_Mrecv`).
    pub fn mrecv<B: BufferMut + ?Sized>(&self, msg: Message, buf: &mut B) -> Result<Status> {
        const CALL: &str = "MPI_Mrecv";
        let v = buf.view_mut();
        match self.start_mrecv(CALL, msg, &v)? {
            Err(st) => Ok(st),
            Ok(h) => engine::with(CALL, |e| e.wait_handle(CALL, h)),
        }
    }

    /// Start receiving the matched message `msg` (`MPI_Imrecv`).
    pub fn imrecv<'a, B: BufferMut + ?Sized>(
        &self,
        msg: Message,
        buf: &'a mut B,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Imrecv";
        let v = buf.view_mut();
        Ok(match self.start_mrecv(CALL, msg, &v)? {
            Err(st) => Request::completed(CALL, st),
            Ok(h) => Request::new(h, CALL),
        })
    }

    /// Start receiving a matched message: the request, or (as `Err`) the
    /// status of a receive already complete.
    fn start_mrecv(
        &self,
        call: &'static str,
        msg: Message,
        v: &View,
    ) -> Result<Result<Handle, Status>> {
        self.check_live(call)?;
        let Some(id) = msg.id else {
            return Ok(Err(Status::empty()));
        };
        let rank = self.rank();
        let bad = || {
            Error::new(
                ErrorClass::Request,
                call,
                rank,
                "the message was already received or is not a matched message",
            )
        };
        if let Some(addr) = v.contig_addr() {
            let buf = Buf {
                addr,
                len: v.bytes(),
                kind: engine::with(call, |e| self.classify(e, call, addr, v.bytes()))?,
            };
            return engine::with(call, |e| {
                e.driver
                    .mrecv(id, buf)
                    .map(|r| Ok(Handle::Pml(r)))
                    .ok_or_else(bad)
            });
        }
        // A derived datatype: receive into a packed temporary, then unpack.
        let mut tmp = vec![0u8; v.bytes()];
        let buf = Buf {
            addr: tmp.as_mut_ptr() as u64,
            len: tmp.len(),
            kind: gmpi_gpu::MemKind::Host,
        };
        let st = engine::with(call, |e| {
            let h = e.driver.mrecv(id, buf).map(Handle::Pml).ok_or_else(bad)?;
            e.wait_handle(call, h)
        })?;
        v.unpack(call, rank, &tmp[..st.bytes.min(tmp.len())])?;
        Ok(Err(st))
    }

    /// End the whole job with `code` (`MPI_Abort`). Every rank is killed.
    pub fn abort(&self, code: i32) -> ! {
        crate::abort(
            code,
            &format!("MPI_Abort called on rank {} with code {code}", self.rank()),
        )
    }

    // ---- communicator management ----

    /// The group of the communicator (`MPI_Comm_group`).
    pub fn group(&self) -> Group {
        Group::new(
            self.inner.world.clone(),
            self.inner.world[self.inner.rank as usize],
        )
    }

    /// Compare with another communicator (`MPI_Comm_compare`).
    pub fn compare(&self, other: &Communicator) -> Comparison {
        if Arc::ptr_eq(&self.inner, &other.inner)
            || self.inner.ctx == other.inner.ctx
                && self.inner.world == other.inner.world
                && self.inner.peers() == other.inner.peers()
        {
            return Comparison::Ident;
        }
        if self.is_inter() || other.is_inter() {
            return self.inter_compare(other);
        }
        match self.group().compare(&other.group()) {
            Comparison::Ident => Comparison::Congruent,
            c => c,
        }
    }

    /// One round of context-id agreement over this intracommunicator (a
    /// max-allreduce of each rank's next free id and of its busy flag, see
    /// [`crate::engine::Engine::ctx_round`]): the largest id, whether any
    /// rank was busy (the round then claims nothing), and whether this
    /// thread owns the agreement. Collective.
    pub(crate) fn ctx_round(
        &self,
        e: &mut Locked,
        call: &'static str,
    ) -> Result<(u32, bool, bool)> {
        let (cand, busy, owned) = e.ctx_round();
        let mine = [cand, busy];
        let mut out = [0u32; 2];
        if let Err(err) = self.allreduce_in(e, call, &mine[..], &mut out[..], &crate::op::Op::Max) {
            e.ctx_round_end(owned, None, 0);
            return Err(err);
        }
        Ok((out[0], out[1] != 0, owned))
    }

    /// Agree on a fresh context id with every rank of this communicator (a
    /// max-allreduce of each rank's next free id), and move past it.
    fn agree_ctx(&self, e: &mut Locked, call: &'static str) -> Result<u32> {
        loop {
            let (ctx, busy, owned) = self.ctx_round(e, call)?;
            if busy {
                e.ctx_round_end(owned, None, 0);
                e.ctx_retry(call)?;
                continue;
            }
            if ctx > AGREE_CTX - 8 {
                e.ctx_round_end(owned, None, 0);
                return Err(Error::new(
                    ErrorClass::Intern,
                    call,
                    self.rank(),
                    "out of context ids",
                ));
            }
            e.ctx_round_end(owned, Some(ctx), 2);
            return Ok(ctx);
        }
    }

    /// The agreement shadow of this intracommunicator: the same group on
    /// contexts of their own (made locally, with no communication, the same
    /// on every rank), whose collectives are ordered among themselves only.
    /// Fault-tolerance agreements (`MPIX_Comm_agree`, `_iagree`) run on it,
    /// so they never match the communicator's own collectives, as ULFM
    /// requires (a rank may start an agreement while the others are in a
    /// barrier).
    #[doc(hidden)]
    pub fn agreement(&self) -> Result<Communicator> {
        if let Some(c) = self.inner.agree.get() {
            return Ok(c.clone());
        }
        self.check_intra("MPIX_Comm_agree", "MPIX_Comm_agree")?;
        let c = engine::with("MPIX_Comm_agree", |e| {
            Ok(Communicator::from_parts(
                e,
                self.inner.ctx | AGREE_CTX,
                self.inner.world.clone(),
            ))
        })?;
        Ok(self.inner.agree.get_or_init(|| c).clone())
    }

    /// A new communicator over the same group (`MPI_Comm_dup`). Collective.
    pub fn dup(&self) -> Result<Communicator> {
        const CALL: &str = "MPI_Comm_dup";
        self.check_live(CALL)?;
        if self.is_inter() {
            return self.inter_dup(CALL);
        }
        engine::with(CALL, |e| {
            let ctx = self.agree_ctx(e, CALL)?;
            tracing::debug!(target: "coll", "{CALL}: context {ctx}, {} ranks", self.size());
            Ok(Communicator::from_parts(e, ctx, self.inner.world.clone()))
        })
    }

    /// Split into disjoint communicators, one per `color`, ranked by `key`
    /// then by rank here (`MPI_Comm_split`). A rank passing
    /// [`crate::UNDEFINED`] as its color gets `None`. Collective.
    pub fn split(&self, color: i32, key: i32) -> Result<Option<Communicator>> {
        const CALL: &str = "MPI_Comm_split";
        self.check_live(CALL)?;
        if color < 0 && color != UNDEFINED {
            return Err(Error::new(
                ErrorClass::Arg,
                CALL,
                self.rank(),
                format!("invalid color {color} (must be ≥ 0 or UNDEFINED)"),
            ));
        }
        if self.is_inter() {
            return self.inter_split(CALL, color, key);
        }
        engine::with(CALL, |e| self.split_in(e, CALL, color, key))
    }

    fn split_in(
        &self,
        e: &mut Locked,
        call: &'static str,
        color: i32,
        key: i32,
    ) -> Result<Option<Communicator>> {
        let n = self.size() as usize;
        // One allgather of (color, key, next free context id, busy flag),
        // again while some rank was busy (see Engine::ctx_round).
        let mut all = vec![0i32; 4 * n];
        let ctx = loop {
            let (cand, busy, owned) = e.ctx_round();
            let mine = [color, key, cand as i32, busy as i32];
            if let Err(err) = self.allgather_in(e, call, &mine[..], &mut all[..]) {
                e.ctx_round_end(owned, None, 0);
                return Err(err);
            }
            if (0..n).any(|i| all[4 * i + 3] != 0) {
                e.ctx_round_end(owned, None, 0);
                e.ctx_retry(call)?;
                continue;
            }
            let ctx = (0..n).map(|i| all[4 * i + 2] as u32).max().unwrap_or(cand);
            e.ctx_round_end(owned, Some(ctx), 2);
            break ctx;
        };
        if color == UNDEFINED {
            return Ok(None);
        }
        let mut members: Vec<(i32, usize)> = (0..n)
            .filter(|&i| all[4 * i] == color)
            .map(|i| (all[4 * i + 1], i))
            .collect();
        members.sort();
        let world = members.iter().map(|&(_, i)| self.inner.world[i]).collect();
        tracing::debug!(target: "coll", "{call}: color {color} → context {ctx}, {} ranks", members.len());
        Ok(Some(Communicator::from_parts(e, ctx, world)))
    }

    /// Split into one communicator per node: the ranks that share memory with
    /// this one, ranked by `key` (`MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`
    /// with key = rank). Collective.
    pub fn split_shared(&self) -> Result<Communicator> {
        self.split_shared_key(self.rank())
    }

    /// [`Communicator::split_shared`] with an explicit ordering key.
    pub fn split_shared_key(&self, key: i32) -> Result<Communicator> {
        const CALL: &str = "MPI_Comm_split_type";
        self.check_live(CALL)?;
        self.check_intra(CALL, "split_shared_key (use split_shared_opt)")?;
        engine::with(CALL, |e| {
            let node = e.node_of[e.rank as usize] as i32;
            Ok(self
                .split_in(e, CALL, node, key)?
                .expect("a node color is never UNDEFINED"))
        })
    }

    /// [`Communicator::split_shared_key`] where a rank may stay out
    /// (`join = false`: `MPI_Comm_split_type` with `MPI_UNDEFINED`), getting
    /// `None`. Collective: every rank calls it, joining or not.
    pub fn split_shared_opt(&self, key: i32, join: bool) -> Result<Option<Communicator>> {
        const CALL: &str = "MPI_Comm_split_type";
        self.check_live(CALL)?;
        if self.is_inter() {
            // The ranks of each node in this group, joined to the remote
            // group's ranks on the same node.
            let color = if join {
                engine::with(CALL, |e| Ok(e.node_of[e.rank as usize] as i32))?
            } else {
                UNDEFINED
            };
            return self.inter_split(CALL, color, key);
        }
        engine::with(CALL, |e| {
            let color = if join {
                e.node_of[e.rank as usize] as i32
            } else {
                UNDEFINED
            };
            self.split_in(e, CALL, color, key)
        })
    }

    /// The communicator of the members of `group` (a subgroup of this
    /// communicator's group), ranked in group order; `None` on ranks outside
    /// it (`MPI_Comm_create`). Collective over this communicator.
    pub fn create(&self, group: &Group) -> Result<Option<Communicator>> {
        const CALL: &str = "MPI_Comm_create";
        self.check_live(CALL)?;
        if self.is_inter() {
            return self.inter_create(CALL, group);
        }
        if let Some(w) = group.world.iter().find(|w| !self.inner.world.contains(w)) {
            return Err(Error::new(
                ErrorClass::Group,
                CALL,
                self.rank(),
                format!("world rank {w} of the group is not in the communicator"),
            ));
        }
        engine::with(CALL, |e| {
            let ctx = self.agree_ctx(e, CALL)?;
            if !group.world.contains(&e.rank) {
                return Ok(None);
            }
            Ok(Some(Communicator::from_parts(e, ctx, group.world.to_vec())))
        })
    }

    /// The communicator of the members of `group` (a subgroup of this
    /// communicator's group), ranked in group order (`MPI_Comm_create_group`).
    /// Collective over the members of `group` only: they agree on a context
    /// id with point-to-point messages among themselves, on this
    /// communicator's collective context with a negative tag derived from
    /// `tag` (collectives use non-negative tags there, so the two never
    /// match; calls with different tags never match each other). A process
    /// outside `group` gets `None` at once.
    pub fn create_group(&self, group: &Group, tag: i32) -> Result<Option<Communicator>> {
        const CALL: &str = "MPI_Comm_create_group";
        self.check_live(CALL)?;
        self.check_intra(CALL, "MPI_Comm_create_group")?;
        if !(0..=TAG_UB).contains(&tag) {
            return Err(Error::new(
                ErrorClass::Tag,
                CALL,
                self.rank(),
                format!("invalid tag {tag} (must be 0..={TAG_UB})"),
            ));
        }
        // The rank in this communicator of each member, in group order.
        let mut members = Vec::with_capacity(group.world.len());
        for w in group.world.iter() {
            match self.inner.world.iter().position(|x| x == w) {
                Some(r) => members.push(r as i32),
                None => {
                    return Err(Error::new(
                        ErrorClass::Group,
                        CALL,
                        self.rank(),
                        format!("world rank {w} of the group is not in the communicator"),
                    ))
                }
            }
        }
        let me = self.rank();
        if !members.contains(&me) {
            return Ok(None);
        }
        let wire_tag = -1 - tag;
        engine::with(CALL, |e| {
            let leader = members[0];
            // (next free id, busy) from every member to the leader, the
            // maximum of each back; again while some member was busy (see
            // Engine::ctx_round).
            let round = |e: &mut Locked, mine: [u32; 2]| -> Result<[u32; 2]> {
                let mut ctx = mine;
                if me == leader {
                    let others: Vec<i32> = members[1..].to_vec();
                    let mut ids = vec![0u32; 2 * others.len()];
                    let mut s = Sched::new(CALL, &self.inner, wire_tag);
                    for (i, &r) in others.iter().enumerate() {
                        let reg = s.user(ids[2 * i..].as_mut_ptr() as u64, 8, true);
                        s.push(Step::Recv(reg, r));
                    }
                    s.push(Step::Wait);
                    e.drive(CALL, &mut s)?;
                    for p in ids.chunks(2) {
                        ctx = [ctx[0].max(p[0]), ctx[1].max(p[1])];
                    }
                    let mut s = Sched::new(CALL, &self.inner, wire_tag);
                    let reg = s.user(ctx.as_ptr() as u64, 8, false);
                    for &r in &others {
                        s.push(Step::Send(reg, r));
                    }
                    s.push(Step::Wait);
                    e.drive(CALL, &mut s)?;
                } else {
                    let mut s = Sched::new(CALL, &self.inner, wire_tag);
                    let out = s.user(mine.as_ptr() as u64, 8, false);
                    let back = s.user(ctx.as_mut_ptr() as u64, 8, true);
                    s.push(Step::Send(out, leader));
                    s.push(Step::Recv(back, leader));
                    s.push(Step::Wait);
                    e.drive(CALL, &mut s)?;
                }
                Ok(ctx)
            };
            let ctx = loop {
                let (cand, busy, owned) = e.ctx_round();
                let got = match round(e, [cand, busy]) {
                    Ok(g) => g,
                    Err(err) => {
                        e.ctx_round_end(owned, None, 0);
                        return Err(err);
                    }
                };
                if got[1] != 0 {
                    e.ctx_round_end(owned, None, 0);
                    e.ctx_retry(CALL)?;
                    continue;
                }
                if got[0] > AGREE_CTX - 8 {
                    e.ctx_round_end(owned, None, 0);
                    return Err(Error::new(
                        ErrorClass::Intern,
                        CALL,
                        me,
                        "out of context ids",
                    ));
                }
                e.ctx_round_end(owned, Some(got[0]), 2);
                break got[0];
            };
            tracing::debug!(target: "coll", "{CALL}: tag {tag} → context {ctx}, {} ranks", members.len());
            Ok(Some(Communicator::from_parts(e, ctx, group.world.to_vec())))
        })
    }

    /// Free the communicator now (`MPI_Comm_free`): every later call on it
    /// or any clone fails with `MPI_ERR_COMM`. Dropping the last clone frees
    /// it too. The world communicator cannot be freed.
    pub fn free(&self) -> Result<()> {
        const CALL: &str = "MPI_Comm_free";
        self.check_live(CALL)?;
        if self.inner.ctx == 0 {
            return Err(Error::new(
                ErrorClass::Comm,
                CALL,
                self.rank(),
                "MPI_COMM_WORLD cannot be freed",
            ));
        }
        self.inner.freed.store(true, Ordering::Relaxed);
        *self.inner.shm.lock().unwrap_or_else(|p| p.into_inner()) = ShmState::Unavailable;
        Ok(())
    }

    /// Whether [`Communicator::free`] was called.
    pub fn is_freed(&self) -> bool {
        self.inner.freed.load(Ordering::Relaxed)
    }

    /// A predefined attribute (`MPI_Comm_get_attr`): `None` if the attribute
    /// has no value.
    pub fn get_attr(&self, attr: Attr) -> Option<i64> {
        match attr {
            Attr::TagUb => Some(TAG_UB as i64),
            Attr::WtimeIsGlobal => Some(0),
            Attr::UniverseSize => engine::with("MPI_Comm_get_attr", |e| Ok(e.size as i64)).ok(),
            Attr::AppNum => Some(0),
            Attr::Host => Some(PROC_NULL as i64),
            Attr::IoRank => Some(crate::ANY_SOURCE as i64),
        }
    }
}

/// A message matched by [`Communicator::mprobe`] or
/// [`Communicator::improbe`], to be received with [`Communicator::mrecv`] or
/// [`Communicator::imrecv`] (`MPI_Message`).
#[derive(Debug, PartialEq, Eq)]
pub struct Message {
    /// The pml's handle; `None` for a message from `PROC_NULL`.
    id: Option<u64>,
}

impl Message {
    /// The message of a probe of `PROC_NULL` (`MPI_MESSAGE_NO_PROC`):
    /// receiving it completes at once with an empty status.
    pub fn no_proc() -> Self {
        Self { id: None }
    }

    /// Whether this is `MPI_MESSAGE_NO_PROC`.
    pub fn is_no_proc(&self) -> bool {
        self.id.is_none()
    }
}

/// Predefined communicator attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attr {
    /// `MPI_TAG_UB`: the largest tag.
    TagUb,
    /// `MPI_WTIME_IS_GLOBAL`: whether clocks are synchronized (0: no).
    WtimeIsGlobal,
    /// `MPI_UNIVERSE_SIZE`: how many processes the job can hold.
    UniverseSize,
    /// `MPI_APPNUM`: which executable of the command line this is.
    AppNum,
    /// `MPI_HOST`: the host process (`PROC_NULL`: none).
    Host,
    /// `MPI_IO`: a rank that can do I/O (`ANY_SOURCE`: every rank).
    IoRank,
}

/// What a request refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handle {
    /// A point-to-point request of the pml.
    Pml(gmpi_pml::ReqId),
    /// A schedule parked in the engine.
    Sched(u64),
    /// A non-blocking exchange on a communicator's area, parked in the
    /// engine (`coll/shm/nb.rs`).
    Area(u64),
    /// A request the program completes itself (a generalized request):
    /// its flag in the engine's table.
    User(u64),
}
