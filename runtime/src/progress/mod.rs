//! The progress driver: the I/O half of point-to-point messaging. It owns
//! the btls and reaches user memory (host memory and, through the gpu layer,
//! device memory); the pml (`gmpi-pml`) owns every protocol decision and
//! state. The driver feeds the pml inputs, executes the actions it asks for
//! and reports how each ended — the shape of quinn's driver around
//! quinn-proto. It is the only code that calls a btl.
//!
//! Files:
//! - `mod.rs`: [`Driver`]: posting sends and receives (with the inline send
//!   path), one progress pass, waiting.
//! - `execute.rs`: running the pml's actions (sends, registrations, IPC
//!   export and its release, gets, IPC copies, device copies, a failed
//!   peer's clean-up) and answering each.
//! - `events.rs`: the btls' events turned into pml inputs (fragments,
//!   streamed fragments read straight into the receive buffer, completions,
//!   failures).
//! - `sleep.rs`: how an idle rank sleeps across several btls.
//! - `memory.rs`: [`HostMemory`], host memory by address.
//! - `onesided.rs`: one-sided windows' RDMA reads and writes, issued on a
//!   btl outside the pml (their exposure, start and end).
//!
//! Ordering: actions run in the order the pml emits them. An action a btl
//! refuses (`NoResource`) goes back to the pml (`handle_refused`), which
//! holds it and every later action for that peer until
//! [`gmpi_pml::Pml::retry_refused`], called at the start of every progress
//! pass — never only from a completion callback (the lesson of ob1's
//! progress loop).
//!
//! Failures: a transport error or a device copy that fails while sending is
//! kept as the driver's [`Driver::fatal`] error (the runtime then raises it
//! through the error handler: by default the job ends with the message),
//! never a panic; a failed device copy into a receive fails that receive.

mod events;
mod execute;
pub(crate) mod memory;
mod onesided;
mod sleep;
mod staging;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gmpi_btl::{Btl, Submit};
use gmpi_gpu::{Gpu, Lease};
use gmpi_pml::{Buf, Pml, PmlError, Posted, RecvArgs, ReqId, SendArgs, Status};

pub(crate) use memory::HostMemory;
use sleep::Sleep;

/// The driver of one rank. See the module documentation.
pub(crate) struct Driver<H> {
    /// The pml it drives.
    pub pml: Pml,
    btls: Vec<Box<dyn Btl>>,
    host: H,
    gpu: Arc<Gpu>,
    /// Device staging buffers leased by IPC sends, by send request, until
    /// the pml's `IpcRelease` (`execute.rs`).
    leases: HashMap<u64, Lease>,
    fatal: Option<PmlError>,
    sleep: Option<Sleep>,
    /// Per btl: passive ([`Btl::passive`]) and nothing submitted to it
    /// since a progress pass found it empty, so progress skips it.
    quiet: Vec<bool>,
    /// Per btl: [`Btl::passive`].
    passive: Vec<bool>,
    /// The staged pipeline's work in progress (`staging.rs`).
    staging: staging::Staging,
    /// Windows' RDMA transfers in flight and ended (`onesided.rs`).
    onesided: onesided::OneSided,
}

impl<H> std::fmt::Debug for Driver<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("pml", &self.pml)
            .field(
                "btls",
                &self.btls.iter().map(|b| b.caps().name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl<H: HostMemory> Driver<H> {
    /// A driver over `btls` (registered with the pml in this order), host
    /// memory `host` and the gpu layer `gpu` (host-only without CUDA).
    pub fn new(mut pml: Pml, btls: Vec<Box<dyn Btl>>, host: H, gpu: Arc<Gpu>) -> Self {
        for b in &btls {
            pml.add_btl(b.caps().clone(), &|p| b.reaches(p));
        }
        let passive: Vec<bool> = btls.iter().map(|b| b.passive()).collect();
        Self {
            pml,
            host,
            gpu,
            leases: HashMap::new(),
            fatal: None,
            sleep: Sleep::pick(&btls),
            quiet: passive.clone(),
            passive,
            btls,
            staging: staging::Staging::default(),
            onesided: onesided::OneSided::default(),
        }
    }

    /// Whether an idle rank sleeps in one btl while the others watch, so
    /// that a [`Driver::wait`] may be long whatever transport the next event
    /// comes from (trivially so with a single btl).
    pub fn wakes_across(&self) -> bool {
        self.btls.len() < 2 || self.sleep.is_some()
    }

    /// Interrupts [`Driver::wait`] from another thread: the sleeper's
    /// waker, or the single btl's; `None` where no btl has one.
    pub fn waker(&self) -> Option<std::sync::Arc<dyn gmpi_btl::Wake>> {
        match (&self.sleep, self.btls.as_slice()) {
            (Some(s), _) => Some(s.wake()),
            (None, [b]) => b.waker(),
            _ => None,
        }
    }

    /// The host memory (tests read what arrived).
    #[cfg(test)]
    pub fn host(&mut self) -> &mut H {
        &mut self.host
    }

    /// The btls, in registration order.
    pub fn btls(&self) -> &[Box<dyn Btl>] {
        &self.btls
    }

    /// A fatal transport, device or protocol error seen while progressing (a
    /// malformed fragment from a peer, a transport failure, a device copy
    /// that failed while sending). The job cannot go on.
    pub fn fatal(&self) -> Option<&PmlError> {
        self.fatal.as_ref()
    }

    /// Post a send and start it.
    pub fn post_send(&mut self, a: SendArgs) -> Result<ReqId, PmlError> {
        let id = self.pml.post_send(a)?;
        self.flush();
        Ok(id)
    }

    /// Send, taking the inline fast path when the pml allows it. Returns
    /// `None` when the message is already on its way (nothing to wait for),
    /// else the request to wait on.
    pub fn send(&mut self, a: SendArgs) -> Result<Option<ReqId>, PmlError> {
        match self.pml.try_inline(&a) {
            None => {}
            Some(Err(e)) => return Err(e),
            Some(Ok((btl, header))) => {
                self.quiet[btl] = false;
                let b = &mut self.btls[btl];
                let res = self.host.with_read(a.buf.addr, a.buf.len, |d| {
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
        self.post_send(a).map(Some)
    }

    /// Post a receive (delivering a matching unexpected message at once).
    pub fn post_recv(&mut self, a: RecvArgs) -> Result<ReqId, PmlError> {
        let id = self.pml.post_recv(a, &mut self.host)?;
        self.flush();
        Ok(id)
    }

    /// Post a blocking call's receive ([`gmpi_pml::Pml::post_recv_direct`]).
    pub fn post_recv_direct(&mut self, a: RecvArgs) -> Result<Posted, PmlError> {
        let p = self.pml.post_recv_direct(a, &mut self.host)?;
        self.flush();
        Ok(p)
    }

    /// Receive a message matched by [`gmpi_pml::Pml::improbe`].
    pub fn mrecv(&mut self, msg: u64, buf: Buf) -> Option<ReqId> {
        let id = self.pml.mrecv(msg, buf, &mut self.host)?;
        self.flush();
        Some(id)
    }

    /// Cancel an unmatched receive.
    pub fn cancel(&mut self, id: ReqId) -> bool {
        self.pml.cancel(id)
    }

    /// Take a completed request's outcome.
    #[inline]
    pub fn test(&mut self, id: ReqId) -> Option<Result<Status, PmlError>> {
        self.pml.test(id)
    }

    /// Whether work is queued (actions not run yet, or refused for now, or
    /// staged copies and gets in flight).
    pub fn has_pending(&self) -> bool {
        self.pml.has_refused() || self.pml.has_actions() || self.staging.busy()
    }

    /// One progress pass: refused actions again, then every btl. Returns the
    /// number of events handled and refused actions run (0 means: nothing
    /// happened, the caller may back off).
    #[inline]
    pub fn progress(&mut self) -> usize {
        let mut n = 0;
        if self.pml.has_refused() {
            self.pml.retry_refused();
            n += self.flush_actions();
        }
        n += self.poll_btls();
        self.flush();
        if self.staging.active() {
            n += self.pump_staging();
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
    pub fn wait(&mut self, timeout: Duration) {
        // Staged copies end by events only polling sees.
        if self.pml.has_actions() || self.staging.needs_polling() {
            return;
        }
        match &self.sleep {
            Some(s) => s.sleep(&mut self.btls, timeout),
            None => sleep::sleep_in_turn(&mut self.btls, timeout),
        }
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
}
