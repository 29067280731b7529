//! The driver's half of the staged pipeline (the pml's `rndv/staged`):
//! device memory moved in chunks through pinned slots of the gpu layer
//! (`gmpi_gpu::stage`), every copy asynchronous and polled here, so the copy
//! out of one GPU, the get between the ranks and the copy into the other
//! GPU of consecutive chunks overlap.
//!
//! - `StageOut`: waits for a slot of the outgoing budget, copies the chunk
//!   out of the GPU (`copy_async`, on the stream of the peer's lane), and
//!   when that copy's event completes registers the slot with the btl (to
//!   be pulled; else the pml sends it in FRAGs read from the slot,
//!   `Payload::Staged`) and answers `handle_staged`; the slot is kept until
//!   the pml's `Unstage` (the peer pulled it, or the btl took its FRAGs) or
//!   until the peer fails.
//! - `CopyIn` of a streamed chunk: into a slot of the incoming budget and
//!   on into the GPU by an asynchronous copy, answered with
//!   `handle_copy_done` when it lands.
//! - `StageIn`: gets the peer's chunk straight into host memory, or, for a
//!   device destination, into a slot of the incoming budget and on into
//!   the GPU by an asynchronous copy; answers `handle_staged_in` when the
//!   bytes are in place. A get the btl queues ends with its event
//!   (`GetComplete`/`GetFailed` with a token of this module's).
//!
//! - `IpcCopy` into device memory (`rndv/cuda-ipc`, from `execute.rs`): the
//!   device-to-device copy out of the peer's mapping is issued on the peer's
//!   stream and polled here, answered with `handle_get_done` when it ends,
//!   so the copies of a window of receives queue back to back on the GPU.
//!   Before a failed peer's mappings are closed its copies are waited for.
//!
//! Waiting for a slot or for the btl never holds up other actions: the
//! waiting work is kept here and retried on every progress pass (the
//! budgets are per direction, see `gmpi_gpu::stage`, so two ranks sending
//! to each other cannot each hold the slots the other needs).

use std::collections::{HashMap, VecDeque};

use gmpi_btl::{MemDesc, Rank, Submit};
use gmpi_gpu::{CopyDir, Landed, PinnedBuf, Ticket};
use gmpi_pml::{MemKind, PmlError};

use super::{Driver, HostMemory};

/// Tokens of this module's gets carry this bit (the pml's request ids
/// never reach it: their high half is a generation counted from 1).
const TOKEN_BIT: u64 = 1 << 63;

/// A chunk to stage out of the GPU (an `Action::StageOut`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Out {
    pub btl: usize,
    pub peer: Rank,
    /// Register the slot for the peer's get (else it is sent in FRAGs).
    pub expose: bool,
    pub src: u64,
    pub len: usize,
    pub token: u64,
    pub offset: u64,
}

/// A staged chunk to get (an `Action::StageIn`).
#[derive(Debug, Clone, Copy)]
pub(super) struct In {
    pub btl: usize,
    pub peer: Rank,
    pub desc: MemDesc,
    pub src_offset: u64,
    pub dst: u64,
    pub dst_kind: MemKind,
    pub len: usize,
    pub token: u64,
    pub offset: u64,
}

/// What a copy into the GPU ends: a pulled chunk (`handle_staged_in`) or
/// a streamed chunk's `CopyIn` (`handle_copy_done`, with its destination,
/// length and receive).
#[derive(Debug, Clone, Copy)]
pub(super) enum Landing {
    Pulled(In),
    Streamed { dst: u64, len: usize, token: u64 },
}

/// The staged pipeline's work in progress. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Staging {
    /// Chunks waiting for an outgoing slot, in order.
    out_wait: VecDeque<Out>,
    /// Copies out of the GPU in flight, in issue order, each with its
    /// landing once seen (held until every earlier chunk of its send has
    /// been reported: see `poll_outs`).
    out_copies: Vec<(Ticket, Out, Option<Landed>)>,
    /// Staged slots offered to peers, by (send token, offset).
    offered: HashMap<(u64, u64), (Rank, Box<dyn PinnedBuf>)>,
    /// The btl registrations of offered slots (btl index, descriptor),
    /// handed back (`Btl::deregister`) when the slot is freed.
    registered: HashMap<(u64, u64), (usize, gmpi_btl::MemDesc)>,
    /// Chunks waiting for an incoming slot or for the btl, in order.
    in_wait: VecDeque<In>,
    /// Gets the btl queued, by this module's token: the chunk, and its slot
    /// (a device destination).
    in_gets: HashMap<u64, (In, Option<Box<dyn PinnedBuf>>)>,
    /// Queued gets that ended (btl events), to finish on the next pump.
    gets_ended: Vec<(u64, Result<(), String>)>,
    /// Copies into the GPU in flight: a pulled chunk's, or a streamed
    /// chunk's.
    in_copies: Vec<(Ticket, Landing)>,
    /// Streamed chunks to copy into the GPU (`Action::CopyIn` with
    /// `overlap`), waiting for a slot: destination, bytes, receive.
    copy_in_wait: VecDeque<(u64, Vec<u8>, u64)>,
    /// Device-to-device copies out of a peer's IPC export in flight
    /// (`Action::IpcCopy` into device memory): the peer, the receive.
    ipc_copies: Vec<(Ticket, Rank, u64)>,
    next_token: u64,
}

impl Staging {
    /// Whether anything is waiting or in flight (the driver must keep
    /// polling rather than sleep in a btl).
    pub fn busy(&self) -> bool {
        !(self.out_wait.is_empty()
            && self.out_copies.is_empty()
            && self.in_wait.is_empty()
            && self.in_gets.is_empty()
            && self.gets_ended.is_empty()
            && self.in_copies.is_empty()
            && self.copy_in_wait.is_empty()
            && self.ipc_copies.is_empty())
    }

    /// Whether something ends by an event only polling sees (a copy's CUDA
    /// event, a get ended in a btl pass): the driver must not sleep in a
    /// btl meanwhile. Work waiting for a slot or for the btl is not: a slot
    /// comes back by a copy landing (polled) or by a peer's message (which
    /// wakes a sleeping rank).
    pub fn needs_polling(&self) -> bool {
        !(self.out_copies.is_empty()
            && self.in_copies.is_empty()
            && self.gets_ended.is_empty()
            && self.ipc_copies.is_empty())
    }

    /// An IPC receive's device-to-device copy was issued: `token`'s
    /// `handle_get_done` comes when it lands.
    pub fn ipc_copy(&mut self, t: Ticket, peer: Rank, token: u64) {
        self.ipc_copies.push((t, peer, token));
    }

    /// Whether there is anything to pump: work waiting or in flight, or
    /// slots offered (freed when their peer fails).
    #[inline]
    pub fn active(&self) -> bool {
        self.busy() || !self.offered.is_empty()
    }

    pub fn stage_out(&mut self, o: Out) {
        self.out_wait.push_back(o);
    }

    pub fn stage_in(&mut self, i: In) {
        self.in_wait.push_back(i);
    }

    /// A streamed chunk to copy into the GPU at `dst` for receive `token`.
    pub fn copy_in(&mut self, dst: u64, data: Vec<u8>, token: u64) {
        self.copy_in_wait.push_back((dst, data, token));
    }

    /// `len` bytes at `at` of the staged slot of chunk `offset` of send
    /// `token` (`None`: freed, its peer failed).
    pub fn offered_bytes(
        &mut self,
        token: u64,
        offset: u64,
        at: usize,
        len: usize,
    ) -> Option<&[u8]> {
        let (_, slot) = self.offered.get_mut(&(token, offset))?;
        slot.as_mut_slice().get(at..at + len)
    }

    /// Whether `token` is one of this module's gets.
    pub fn owns(&self, token: u64) -> bool {
        token & TOKEN_BIT != 0 && self.in_gets.contains_key(&token)
    }

    /// A queued get of this module's ended (from a btl event).
    pub fn get_ended(&mut self, token: u64, res: Result<(), String>) {
        self.gets_ended.push((token, res));
    }

    /// Slots offered and not yet freed (tests).
    #[cfg(test)]
    pub fn offered(&self) -> usize {
        self.offered.len()
    }
}

impl<H: HostMemory> Driver<H> {
    /// Advance the staged pipeline: start what waits, poll the copies'
    /// events, answer the pml. Returns how many steps ended.
    pub(super) fn pump_staging(&mut self) -> usize {
        let mut n = self.start_outs();
        n += self.poll_outs();
        n += self.start_ins();
        n += self.finish_gets();
        n += self.poll_ins();
        n += self.start_copy_ins();
        n += self.poll_ipc_copies();
        self.forget_failed_peers();
        n
    }

    /// Poll the IPC receives' copies; answer the pml for each that ended.
    fn poll_ipc_copies(&mut self) -> usize {
        let mut n = 0;
        let mut k = 0;
        while k < self.staging.ipc_copies.len() {
            let (t, _, token) = self.staging.ipc_copies[k];
            let Some(res) = self.gpu.device_poll(t) else {
                k += 1;
                continue;
            };
            self.staging.ipc_copies.remove(k);
            n += 1;
            match res {
                Ok(()) => self.pml.handle_get_done(token),
                Err(e) => self.pml.handle_get_failed(token, &e.to_string()),
            }
        }
        n
    }

    /// Wait until no copy out of `peer`'s IPC exports is in flight (before
    /// its mappings are closed).
    pub(super) fn drain_ipc_copies(&mut self, peer: Rank) {
        while self.staging.ipc_copies.iter().any(|c| c.1 == peer) {
            if self.poll_ipc_copies() == 0 {
                std::thread::yield_now();
            }
        }
    }

    fn start_copy_ins(&mut self) -> usize {
        let mut n = 0;
        while let Some((dst, data, token)) = self.staging.copy_in_wait.pop_front() {
            // A receive that ended meanwhile: its memory is no longer ours.
            if !self.pml.in_flight(token) {
                continue;
            }
            let len = data.len();
            let mut slot = match self.gpu.take_slot(CopyDir::ToDevice, len) {
                Ok(Some(s)) => s,
                Ok(None) => {
                    self.staging.copy_in_wait.push_front((dst, data, token));
                    break;
                }
                Err(e) => {
                    self.copy_in_done(token, Err(PmlError::device("writing", dst, len, e)));
                    continue;
                }
            };
            n += 1;
            slot.as_mut_slice()[..len].copy_from_slice(&data);
            // The receive's lane: copies into one receive stay in order.
            match self
                .gpu
                .copy_async(CopyDir::ToDevice, dst, slot, len, token as u32)
            {
                Ok(t) => self
                    .staging
                    .in_copies
                    .push((t, Landing::Streamed { dst, len, token })),
                Err((e, slot)) => {
                    self.gpu.put_slot(CopyDir::ToDevice, slot);
                    self.copy_in_done(token, Err(PmlError::device("writing", dst, len, e)));
                }
            }
        }
        n
    }

    fn copy_in_done(&mut self, token: u64, res: Result<(), PmlError>) {
        if let Err(e) = &res {
            tracing::error!(target: "pml", "{}", gmpi_pml::error::chain(e));
        }
        self.pml.handle_copy_done(token, res);
    }

    /// Free a staged slot the peer pulled (`Action::Unstage`).
    pub(super) fn unstage(&mut self, token: u64, offset: u64) {
        self.free_offered(token, offset);
    }

    /// Free offered slot (`token`, `offset`) and its registration.
    fn free_offered(&mut self, token: u64, offset: u64) {
        if let Some((btl, desc)) = self.staging.registered.remove(&(token, offset)) {
            self.btls[btl].deregister(&desc);
        }
        if let Some((_, slot)) = self.staging.offered.remove(&(token, offset)) {
            self.gpu.put_slot(CopyDir::ToHost, slot);
        }
    }

    fn start_outs(&mut self) -> usize {
        let mut n = 0;
        while let Some(o) = self.staging.out_wait.front().copied() {
            // A send that ended meanwhile (its peer failed): its buffer may
            // be freed already; nothing is read from it.
            if !self.pml.in_flight(o.token) {
                self.staging.out_wait.pop_front();
                continue;
            }
            let slot = match self.gpu.take_slot(CopyDir::ToHost, o.len) {
                Ok(Some(s)) => s,
                Ok(None) => break,
                Err(e) => {
                    self.staging.out_wait.pop_front();
                    self.out_failed(o, e);
                    continue;
                }
            };
            self.staging.out_wait.pop_front();
            n += 1;
            match self
                .gpu
                .copy_async(CopyDir::ToHost, o.src, slot, o.len, o.peer)
            {
                Ok(t) => self.staging.out_copies.push((t, o, None)),
                Err((e, slot)) => {
                    self.gpu.put_slot(CopyDir::ToHost, slot);
                    self.out_failed(o, e);
                }
            }
        }
        n
    }

    /// Poll the copies out of the GPU, and hand each staged chunk to the pml
    /// in the order its send issued them: the events of one stream complete
    /// in order, but polling may see a later one done before an earlier one
    /// is asked, and a send's FRAGs must go out chunk by chunk (the pml
    /// counts them in order).
    fn poll_outs(&mut self) -> usize {
        for (t, _, landed) in self.staging.out_copies.iter_mut() {
            if landed.is_none() {
                *landed = self.gpu.copy_poll(*t);
            }
        }
        let mut n = 0;
        let mut waiting: Vec<u64> = Vec::new();
        let mut i = 0;
        while i < self.staging.out_copies.len() {
            let (_, o, landed) = &self.staging.out_copies[i];
            if landed.is_none() || waiting.contains(&o.token) {
                waiting.push(o.token);
                i += 1;
                continue;
            }
            let (_, o, landed) = self.staging.out_copies.remove(i);
            let Some((mut slot, res)) = landed else {
                continue;
            };
            n += 1;
            if let Err(e) = res {
                self.gpu.put_slot(CopyDir::ToHost, slot);
                self.out_failed(o, e);
                continue;
            }
            if !o.expose {
                // Sent from the slot in FRAGs (`Payload::Staged`).
                self.staging
                    .offered
                    .insert((o.token, o.offset), (o.peer, slot));
                self.pml.handle_staged(o.token, o.offset, Ok(None));
                continue;
            }
            let addr = slot.as_mut_slice().as_mut_ptr() as u64;
            match self.btls[o.btl].register(addr, o.len as u64) {
                Some(desc) => {
                    self.quiet[o.btl] = false;
                    self.staging
                        .offered
                        .insert((o.token, o.offset), (o.peer, slot));
                    self.staging
                        .registered
                        .insert((o.token, o.offset), (o.btl, desc));
                    self.pml.handle_staged(o.token, o.offset, Ok(Some(desc)));
                }
                None => {
                    self.gpu.put_slot(CopyDir::ToHost, slot);
                    let e = gmpi_gpu::GpuError::Unsupported(format!(
                        "the {} transport cannot expose a staging slot",
                        self.btls[o.btl].caps().name
                    ));
                    self.out_failed(o, e);
                }
            }
        }
        n
    }

    fn start_ins(&mut self) -> usize {
        let mut n = 0;
        while let Some(i) = self.staging.in_wait.front().copied() {
            if self.pml.peer_failed(i.peer) || !self.pml.in_flight(i.token) {
                self.staging.in_wait.pop_front();
                continue;
            }
            let mut slot = None;
            if !i.dst_kind.is_host() {
                match self.gpu.take_slot(CopyDir::ToDevice, i.len) {
                    Ok(Some(s)) => slot = Some(s),
                    Ok(None) => break,
                    Err(e) => {
                        self.staging.in_wait.pop_front();
                        self.in_failed(i, PmlError::device("staging in", i.dst, i.len, e));
                        continue;
                    }
                }
            }
            self.staging.next_token += 1;
            let token = TOKEN_BIT | self.staging.next_token;
            let dst = match slot.as_mut() {
                Some(s) => s.as_mut_slice().as_mut_ptr() as u64,
                None => i.dst,
            };
            match self.stage_get(i.btl, i.peer, &i.desc, i.src_offset, dst, i.len, token) {
                Ok(Submit::Done) => {
                    self.staging.in_wait.pop_front();
                    n += 1;
                    self.got_chunk(i, slot);
                }
                Ok(Submit::Queued) => {
                    self.staging.in_wait.pop_front();
                    self.staging.in_gets.insert(token, (i, slot));
                }
                Ok(Submit::NoResource) => {
                    if let Some(s) = slot {
                        self.gpu.put_slot(CopyDir::ToDevice, s);
                    }
                    break;
                }
                Err(e) => {
                    self.staging.in_wait.pop_front();
                    if let Some(s) = slot {
                        self.gpu.put_slot(CopyDir::ToDevice, s);
                    }
                    self.in_failed(i, PmlError::transport(i.peer, e));
                }
            }
        }
        n
    }

    fn finish_gets(&mut self) -> usize {
        let ended = std::mem::take(&mut self.staging.gets_ended);
        let n = ended.len();
        for (token, res) in ended {
            let Some((i, slot)) = self.staging.in_gets.remove(&token) else {
                continue;
            };
            match res {
                Ok(()) => self.got_chunk(i, slot),
                Err(why) => {
                    if let Some(s) = slot {
                        self.gpu.put_slot(CopyDir::ToDevice, s);
                    }
                    let e = PmlError::transport(i.peer, gmpi_btl::BtlError::GetFailed(why));
                    self.in_failed(i, e);
                }
            }
        }
        n
    }

    /// The get of chunk `i` landed: in place (host memory), or in `slot`,
    /// to be copied on into the GPU.
    fn got_chunk(&mut self, i: In, slot: Option<Box<dyn PinnedBuf>>) {
        let Some(slot) = slot else {
            self.pml.handle_staged_in(i.token, i.offset, i.len, Ok(()));
            return;
        };
        match self
            .gpu
            .copy_async(CopyDir::ToDevice, i.dst, slot, i.len, i.peer)
        {
            Ok(t) => self.staging.in_copies.push((t, Landing::Pulled(i))),
            Err((e, slot)) => {
                self.gpu.put_slot(CopyDir::ToDevice, slot);
                self.in_failed(i, PmlError::device("writing", i.dst, i.len, e));
            }
        }
    }

    /// Poll the copies into the GPU; answer the pml for each that landed.
    fn poll_ins(&mut self) -> usize {
        let mut n = 0;
        let mut k = 0;
        while k < self.staging.in_copies.len() {
            let (t, landing) = self.staging.in_copies[k];
            let Some((slot, res)) = self.gpu.copy_poll(t) else {
                k += 1;
                continue;
            };
            self.staging.in_copies.remove(k);
            self.gpu.put_slot(CopyDir::ToDevice, slot);
            n += 1;
            match (landing, res) {
                (Landing::Pulled(i), Ok(())) => {
                    self.pml.handle_staged_in(i.token, i.offset, i.len, Ok(()))
                }
                (Landing::Pulled(i), Err(e)) => {
                    self.in_failed(i, PmlError::device("writing", i.dst, i.len, e))
                }
                (Landing::Streamed { dst, len, token }, res) => {
                    let res = res.map_err(|e| PmlError::device("writing", dst, len, e));
                    self.copy_in_done(token, res);
                }
            }
        }
        n
    }

    /// Free the slots offered to peers that failed (nobody will pull them).
    fn forget_failed_peers(&mut self) {
        if self.staging.offered.is_empty() {
            return;
        }
        let pml = &self.pml;
        let gone: Vec<(u64, u64)> = self
            .staging
            .offered
            .iter()
            .filter(|(_, (peer, _))| pml.peer_failed(*peer))
            .map(|(k, _)| *k)
            .collect();
        for (token, offset) in gone {
            self.free_offered(token, offset);
        }
    }

    /// Staging chunk `o` out of the GPU failed: its send fails, and since
    /// the receiver waits for that chunk, the job cannot go on (unless the
    /// send had ended already: then nobody waits for it).
    fn out_failed(&mut self, o: Out, e: gmpi_gpu::GpuError) {
        let err = PmlError::device("reading", o.src, o.len, e);
        if !self.pml.in_flight(o.token) {
            tracing::debug!(target: "pml", "{} (the send had ended)", gmpi_pml::error::chain(&err));
            return;
        }
        tracing::error!(target: "pml", "{}", gmpi_pml::error::chain(&err));
        self.pml.handle_staged(o.token, o.offset, Err(err.clone()));
        self.fatal.get_or_insert(err);
    }

    /// Getting chunk `i` failed: the pml decides (a failed get of a host
    /// sender's buffer falls back to the stream; otherwise the receive
    /// fails with `e`, and a staged chunk is still acknowledged so that the
    /// sender frees its slot and ends).
    fn in_failed(&mut self, i: In, e: PmlError) {
        tracing::debug!(target: "pml", "{}", gmpi_pml::error::chain(&e));
        self.pml.handle_staged_in(i.token, i.offset, i.len, Err(e));
    }
}
