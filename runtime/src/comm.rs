//! Communicators and point-to-point operations.

use std::sync::Arc;

use gmpi_pml::{RecvArgs, SendArgs, SendMode};

use crate::buffer::{recv_buf, send_buf};
use crate::datatype::Equivalence;
use crate::engine::{self, Engine};
use crate::error::{Error, ErrorClass, Result};
use crate::request::{Request, Status};
use crate::{ANY_SOURCE, ANY_TAG, PROC_NULL, TAG_UB};

#[derive(Debug)]
struct CommInner {
    /// Context id of point-to-point traffic.
    ctx: u32,
    /// Context id of collective traffic (never matches user messages).
    coll_ctx: u32,
    rank: i32,
    size: i32,
    /// World rank of each rank of this communicator.
    world: Vec<u32>,
}

/// A communicator. Cloning is cheap and refers to the same communicator.
#[derive(Debug, Clone)]
pub struct Communicator {
    inner: Arc<CommInner>,
}

impl Communicator {
    pub(crate) fn world(e: &Engine) -> Self {
        Self {
            inner: Arc::new(CommInner {
                ctx: 0,
                coll_ctx: 1,
                rank: e.rank as i32,
                size: e.size as i32,
                world: (0..e.size).collect(),
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

    fn check_dest(&self, call: &str, dest: i32) -> Result<()> {
        if dest == PROC_NULL || (0..self.size()).contains(&dest) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorClass::Rank,
                call,
                self.rank(),
                format!(
                    "invalid destination rank {dest} (communicator size {})",
                    self.size()
                ),
            ))
        }
    }

    fn check_src(&self, call: &str, src: i32) -> Result<()> {
        if src == PROC_NULL || src == ANY_SOURCE || (0..self.size()).contains(&src) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorClass::Rank,
                call,
                self.rank(),
                format!(
                    "invalid source rank {src} (communicator size {})",
                    self.size()
                ),
            ))
        }
    }

    fn check_send_tag(&self, call: &str, tag: i32) -> Result<()> {
        if (0..=TAG_UB).contains(&tag) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorClass::Tag,
                call,
                self.rank(),
                format!("invalid tag {tag} (must be 0..={TAG_UB})"),
            ))
        }
    }

    fn check_recv_tag(&self, call: &str, tag: i32) -> Result<()> {
        if tag == ANY_TAG || (0..=TAG_UB).contains(&tag) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorClass::Tag,
                call,
                self.rank(),
                format!("invalid tag {tag} (must be 0..={TAG_UB} or ANY_TAG)"),
            ))
        }
    }

    // The argument list mirrors MPI_Isend's (plus the engine and the call name).
    #[allow(clippy::too_many_arguments)]
    fn post_send<T: Equivalence>(
        &self,
        e: &mut Engine,
        call: &str,
        ctx: u32,
        buf: &[T],
        dest: i32,
        tag: i32,
        mode: SendMode,
    ) -> Result<gmpi_pml::ReqId> {
        let args = self.send_args(e, ctx, buf, dest, tag, mode);
        let rank = self.rank();
        e.driver
            .post_send(args)
            .map_err(|err| Error::from_pml(err, call, rank))
    }

    fn post_recv<T: Equivalence>(
        &self,
        e: &mut Engine,
        call: &str,
        ctx: u32,
        buf: &mut [T],
        src: i32,
        tag: i32,
    ) -> Result<gmpi_pml::ReqId> {
        let kind = e
            .classifier
            .classify(buf.as_ptr() as u64, std::mem::size_of_val(buf));
        let b = recv_buf(buf, kind);
        let any = src == ANY_SOURCE;
        let args = RecvArgs {
            ctx,
            src: (!any).then_some(src as u32),
            src_world: (!any).then(|| self.inner.world[src as usize]),
            tag: (tag != ANY_TAG).then_some(tag),
            buf: b,
        };
        let rank = self.rank();
        e.driver
            .post_recv(args)
            .map_err(|err| Error::from_pml(err, call, rank))
    }

    fn send_args<T: Equivalence>(
        &self,
        e: &Engine,
        ctx: u32,
        buf: &[T],
        dest: i32,
        tag: i32,
        mode: SendMode,
    ) -> SendArgs {
        let len = std::mem::size_of_val(buf);
        SendArgs {
            ctx,
            src: self.inner.rank as u32,
            dest: self.inner.world[dest as usize],
            tag,
            buf: send_buf(buf, e.classifier.classify(buf.as_ptr() as u64, len)),
            mode,
        }
    }

    fn blocking_send<T: Equivalence>(
        &self,
        call: &'static str,
        buf: &[T],
        dest: i32,
        tag: i32,
        mode: SendMode,
    ) -> Result<()> {
        self.check_dest(call, dest)?;
        self.check_send_tag(call, tag)?;
        if dest == PROC_NULL {
            return Ok(());
        }
        engine::with(call, |e| {
            let args = self.send_args(e, self.inner.ctx, buf, dest, tag, mode);
            let rank = self.rank();
            match e
                .driver
                .send(args)
                .map_err(|err| Error::from_pml(err, call, rank))?
            {
                None => Ok(()),
                Some(id) => e.wait_req(call, id).map(|_| ()),
            }
        })
    }

    /// Send `buf` to `dest` with `tag` (`MPI_Send`).
    pub fn send<T: Equivalence>(&self, buf: &[T], dest: i32, tag: i32) -> Result<()> {
        self.blocking_send("MPI_Send", buf, dest, tag, SendMode::Standard)
    }

    /// Synchronous send: returns once the receiver has matched it (`MPI_Ssend`).
    pub fn ssend<T: Equivalence>(&self, buf: &[T], dest: i32, tag: i32) -> Result<()> {
        self.blocking_send("MPI_Ssend", buf, dest, tag, SendMode::Synchronous)
    }

    /// Receive into `buf` from `src` (a rank or [`ANY_SOURCE`]) with `tag` (or
    /// [`ANY_TAG`]) (`MPI_Recv`). A message longer than `buf` fails with
    /// `MPI_ERR_TRUNCATE` and writes nothing past `buf`.
    pub fn recv<T: Equivalence>(&self, buf: &mut [T], src: i32, tag: i32) -> Result<Status> {
        const CALL: &str = "MPI_Recv";
        self.check_src(CALL, src)?;
        self.check_recv_tag(CALL, tag)?;
        if src == PROC_NULL {
            return Ok(Status::empty());
        }
        engine::with(CALL, |e| {
            let id = self.post_recv(e, CALL, self.inner.ctx, buf, src, tag)?;
            e.wait_req(CALL, id).map(Status::from_pml)
        })
    }

    fn nonblocking_send<'a, T: Equivalence>(
        &self,
        call: &'static str,
        buf: &'a [T],
        dest: i32,
        tag: i32,
        mode: SendMode,
    ) -> Result<Request<'a>> {
        self.check_dest(call, dest)?;
        self.check_send_tag(call, tag)?;
        if dest == PROC_NULL {
            return Ok(Request::completed(call, Status::empty()));
        }
        let id = engine::with(call, |e| {
            let args = self.send_args(e, self.inner.ctx, buf, dest, tag, mode);
            let rank = self.rank();
            e.driver
                .send(args)
                .map_err(|err| Error::from_pml(err, call, rank))
        })?;
        Ok(match id {
            Some(id) => Request::new(id, call),
            None => Request::completed(call, Status::empty()),
        })
    }

    /// Start a send (`MPI_Isend`).
    pub fn isend<'a, T: Equivalence>(
        &self,
        buf: &'a [T],
        dest: i32,
        tag: i32,
    ) -> Result<Request<'a>> {
        self.nonblocking_send("MPI_Isend", buf, dest, tag, SendMode::Standard)
    }

    /// Start a synchronous send (`MPI_Issend`).
    pub fn issend<'a, T: Equivalence>(
        &self,
        buf: &'a [T],
        dest: i32,
        tag: i32,
    ) -> Result<Request<'a>> {
        self.nonblocking_send("MPI_Issend", buf, dest, tag, SendMode::Synchronous)
    }

    /// Start a receive (`MPI_Irecv`).
    pub fn irecv<'a, T: Equivalence>(
        &self,
        buf: &'a mut [T],
        src: i32,
        tag: i32,
    ) -> Result<Request<'a>> {
        const CALL: &str = "MPI_Irecv";
        self.check_src(CALL, src)?;
        self.check_recv_tag(CALL, tag)?;
        if src == PROC_NULL {
            return Ok(Request::completed(CALL, Status::empty()));
        }
        let id = engine::with(CALL, |e| {
            self.post_recv(e, CALL, self.inner.ctx, buf, src, tag)
        })?;
        Ok(Request::new(id, CALL))
    }

    /// Send and receive at once, deadlock-free (`MPI_Sendrecv`).
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<S: Equivalence, R: Equivalence>(
        &self,
        sbuf: &[S],
        dest: i32,
        stag: i32,
        rbuf: &mut [R],
        src: i32,
        rtag: i32,
    ) -> Result<Status> {
        const CALL: &str = "MPI_Sendrecv";
        self.check_dest(CALL, dest)?;
        self.check_send_tag(CALL, stag)?;
        self.check_src(CALL, src)?;
        self.check_recv_tag(CALL, rtag)?;
        engine::with(CALL, |e| {
            let r = if src == PROC_NULL {
                None
            } else {
                Some(self.post_recv(e, CALL, self.inner.ctx, rbuf, src, rtag)?)
            };
            let s = if dest == PROC_NULL {
                None
            } else {
                Some(self.post_send(
                    e,
                    CALL,
                    self.inner.ctx,
                    sbuf,
                    dest,
                    stag,
                    SendMode::Standard,
                )?)
            };
            let sres = s.map(|id| e.wait_req(CALL, id)).transpose();
            let rres = r.map(|id| e.wait_req(CALL, id)).transpose();
            sres?;
            Ok(rres?.map_or_else(Status::empty, Status::from_pml))
        })
    }

    /// Wait for a matching message without receiving it (`MPI_Probe`).
    pub fn probe(&self, src: i32, tag: i32) -> Result<Status> {
        const CALL: &str = "MPI_Probe";
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
            e.wait_until(CALL, |d| {
                found = d.pml.iprobe(ctx, s, t);
                found.is_some()
            })?;
            Ok(Status::from_pml(found.expect("loop ended on a match")))
        })
    }

    /// Check for a matching message without receiving it (`MPI_Iprobe`).
    pub fn iprobe(&self, src: i32, tag: i32) -> Result<Option<Status>> {
        const CALL: &str = "MPI_Iprobe";
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

    /// Block until every rank of the communicator has entered the barrier
    /// (`MPI_Barrier`): a dissemination barrier, ⌈log₂ n⌉ rounds of
    /// zero-byte messages on the communicator's collective context.
    pub fn barrier(&self) -> Result<()> {
        const CALL: &str = "MPI_Barrier";
        engine::with(CALL, |e| self.barrier_in(e, CALL))
    }

    pub(crate) fn barrier_in(&self, e: &mut Engine, call: &str) -> Result<()> {
        let n = self.size();
        if n <= 1 {
            return Ok(());
        }
        let me = self.rank();
        let ctx = self.inner.coll_ctx;
        let mut dist = 1;
        let mut round = 0;
        let empty: [u8; 0] = [];
        let mut sink: [u8; 0] = [];
        while dist < n {
            let to = (me + dist) % n;
            let from = (me - dist).rem_euclid(n);
            let r = self.post_recv(e, call, ctx, &mut sink, from, round)?;
            let s = self.post_send(e, call, ctx, &empty, to, round, SendMode::Standard)?;
            e.wait_req(call, s)?;
            e.wait_req(call, r)?;
            dist *= 2;
            round += 1;
        }
        tracing::debug!(target: "coll", "barrier: dissemination, {round} rounds over {n} ranks");
        Ok(())
    }

    /// End the whole job with `code` (`MPI_Abort`). Every rank is killed.
    pub fn abort(&self, code: i32) -> ! {
        crate::abort(
            code,
            &format!("MPI_Abort called on rank {} with code {code}", self.rank()),
        )
    }
}
