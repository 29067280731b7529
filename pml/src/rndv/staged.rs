//! Device memory staged through host memory (`rndv/staged`): the pipelined
//! rendezvous where either buffer is on a GPU and no direct path (CUDA IPC,
//! GPUDirect) exists or worked.
//!
//! Where the receiver's transport can `get` (its CTS says `PULL`), a sender
//! of device memory stages it chunk by chunk ([`crate::DeviceConfig`]'s
//! `pipeline_chunk`, not the transport's fragment):
//! - sender: [`Pml::start_staged_send`] keeps `pipeline_depth` chunks in
//!   flight, each an `Action::StageOut` (the driver copies it into a pinned
//!   slot asynchronously and registers the slot); [`Pml::handle_staged`]
//!   offers each staged chunk by a CHUNK as soon as its copy has ended;
//!   [`Pml::handle_chunk_ack`] frees the chunk's slot (`Action::Unstage`),
//!   stages the next one, and ends the send at the last;
//! - receiver: [`Pml::handle_chunk`] has the driver get the chunk
//!   (`Action::StageIn`: straight into host memory, or into a pinned slot
//!   and on into device memory by an asynchronous copy), and
//!   [`Pml::handle_staged_in`] acknowledges it (CHUNK_ACK) and ends the
//!   receive at the last byte.
//!
//! So the copy out of the sender's GPU, the get and the copy into the
//! receiver's GPU of consecutive chunks overlap.
//!
//! A host sender that offered its buffer for a get (`rndv/get`), matched by
//! a receive into device memory the transport cannot write, is pulled the
//! same way by the receiver alone ([`Pml::start_staged_pull`]): chunks of
//! the sender's buffer are got into pinned slots and copied on into the GPU,
//! `pipeline_depth` at once, and a FIN ends the send at the last.
//!
//! Otherwise (no get: tcp) the sender stages its chunks the same way and
//! sends each, as soon as it is staged, in FRAGs of the transport's
//! fragment from the slot ([`crate::action::Payload::Staged`]); a chunk is
//! done, and its slot freed, when the btl has taken its FRAGs
//! ([`Pml::staged_frag_taken`]). The receiver copies each chunk that lands
//! into device memory by an `Action::CopyIn` ([`Pml::copy_chunk_in`]), which
//! the driver runs asynchronously through a pinned slot, overlapping the
//! next FRAGs; the receive ends when every byte has arrived and every copy
//! has ended ([`Pml::handle_copy_done`], which also ends an eager message
//! into device memory, copied at once).

use gmpi_btl::{MemDesc, Rank};

use crate::action::{Action, Payload};
use crate::memory::HostWrite;
use crate::protocol::Protocol;
use crate::request::{outcome, Matched, RecvState, SendState};
use crate::wire::Hdr;
use crate::{MemKind, Pml, PmlError, ReqId, Status, Violation, LOG};

/// How the log names a streamed receive: `rndv/staged` where device memory
/// is staged through host buffers on either side (the sender's data is
/// device memory when it offered CUDA IPC), `rndv/pipelined` for host
/// memory.
pub(crate) fn streamed_name(m: &Matched, dst: MemKind) -> &'static str {
    let src = if m.from_device {
        MemKind::Device { ordinal: 0 }
    } else {
        MemKind::Host
    };
    Protocol::RndvPipelined.describe(src, Some(dst), false)
}

impl Pml {
    /// A chunk of receive `id` arrived for `addr`: written in place for host
    /// memory, copied in by the driver for device memory.
    pub(crate) fn deliver_chunk(
        &mut self,
        id: ReqId,
        addr: u64,
        payload: &[u8],
        w: &mut dyn HostWrite,
    ) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        if r.buf.kind.is_host() {
            w.write(addr, payload);
            self.count_chunk(id, payload.len() as u64);
        } else {
            self.copy_chunk_in(id, addr, payload.to_vec());
        }
    }

    /// Have the driver copy `data` into receive `id`'s device memory at
    /// `addr`; the bytes count as arrived now, the receive ends once the
    /// copy has.
    pub(crate) fn copy_chunk_in(&mut self, id: ReqId, addr: u64, data: Vec<u8>) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let kind = r.buf.kind;
        let RecvState::AwaitFrags { got, copies, .. } = &mut r.state else {
            return;
        };
        *got += data.len() as u64;
        *copies += 1;
        self.actions.push_back(Action::CopyIn {
            dst: addr,
            dst_kind: kind,
            data,
            token: id.0,
            overlap: true,
        });
    }

    /// A copy into the device memory of receive `token` ended.
    pub fn handle_copy_done(&mut self, token: u64, res: Result<(), PmlError>) {
        let id = ReqId(token);
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let cap = r.buf.len;
        match &mut r.state {
            RecvState::AwaitCopy { status, msg_len } => {
                let out = res.and(outcome(*status, *msg_len, cap));
                self.reqs.complete(id, out);
            }
            RecvState::AwaitFrags {
                m,
                got,
                copies,
                faulted,
            } => {
                *copies = copies.saturating_sub(1);
                let end = *got >= m.want && *copies == 0;
                if let Err(e) = res {
                    if !*faulted {
                        *faulted = true;
                        self.copy_faults.insert(id.0, e);
                    }
                }
                if end {
                    self.end_streamed(id);
                }
            }
            RecvState::AwaitMatch { .. }
            | RecvState::AwaitPull { .. }
            | RecvState::AwaitPulls { .. } => {}
        }
    }

    /// Every byte of streamed receive `id` is in place: complete it (with
    /// the first failed copy's error, if any).
    pub(crate) fn end_streamed(&mut self, id: ReqId) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let RecvState::AwaitFrags { m, faulted, .. } = r.state else {
            return;
        };
        match faulted.then(|| self.copy_faults.remove(&id.0)).flatten() {
            Some(e) => self.reqs.complete(id, Err(e)),
            None => self.finish_rndv_recv(id, &m),
        }
    }
}

/// Most staged chunks of one message in flight (the sender tracks their
/// acknowledgements in a 64-bit window).
pub const MAX_DEPTH: usize = 64;

impl Pml {
    /// Sender: a CTS for a send of device memory: stage its first `want`
    /// bytes chunk by chunk, for the receiver to pull (`pull`) or to send
    /// in FRAGs.
    pub(crate) fn start_staged_send(&mut self, id: ReqId, rreq: u64, want: u64, pull: bool) {
        let chunk = self.cfg.device.pipeline_chunk.max(1) as u64;
        let Some(s) = self.reqs.send_mut(id) else {
            return;
        };
        let frag = s.plan.chunk.max(1) as u64;
        s.state = SendState::AwaitChunks {
            rreq,
            want,
            chunk,
            next: 0,
            acked: 0,
            inflight: 0,
            pull,
            frag,
            frags: 0,
            mask: 0,
        };
        tracing::debug!(target: LOG, "CTS from rank {}: staging {want} B in {} chunks of {chunk} B {}",
            s.peer, want.div_ceil(chunk), if pull { "for its get".to_string() } else { format!("sent in fragments of {frag} B") });
        if want == 0 {
            self.reqs.complete(id, Ok(Status::default()));
            return;
        }
        self.stage_more(id);
    }

    /// Keep `pipeline_depth` chunks of staged send `id` in flight.
    fn stage_more(&mut self, id: ReqId) {
        let depth = self.cfg.device.pipeline_depth.clamp(1, MAX_DEPTH) as u32;
        while let Some(s) = self.reqs.send_mut(id) {
            let SendState::AwaitChunks {
                want,
                chunk,
                next,
                inflight,
                pull,
                ..
            } = &mut s.state
            else {
                return;
            };
            if *inflight >= depth || *next >= *want {
                return;
            }
            let offset = *next;
            let len = (*chunk).min(*want - offset);
            *next += len;
            *inflight += 1;
            let a = Action::StageOut {
                btl: s.btl,
                peer: s.peer,
                expose: *pull,
                src: s.buf.addr + offset,
                len: len as usize,
                token: id.0,
                offset,
            };
            self.actions.push_back(a);
        }
    }

    /// The driver staged the chunk at `offset` of send `token` into a
    /// pinned slot (exposed for the receiver's get as `desc`), or failed
    /// to: offer it, or send it in FRAGs.
    pub fn handle_staged(
        &mut self,
        token: u64,
        offset: u64,
        res: Result<Option<MemDesc>, PmlError>,
    ) {
        let id = ReqId(token);
        let live = self.reqs.send_mut(id).and_then(|s| match s.state {
            SendState::AwaitChunks {
                rreq,
                want,
                chunk,
                frag,
                ..
            } => Some((s.btl, s.peer, rreq, chunk.min(want - offset), frag)),
            _ => None,
        });
        let Some((btl, peer, rreq, len, frag)) = live else {
            // The send has ended (its peer failed): nobody will take it.
            if res.is_ok() {
                self.actions.push_back(Action::Unstage { token, offset });
            }
            return;
        };
        match res {
            Ok(Some(desc)) => {
                let hdr = Hdr::Chunk {
                    rreq,
                    offset,
                    len,
                    desc,
                };
                self.push_send(btl, peer, hdr, Payload::None, 0);
            }
            Ok(None) => {
                for at in (0..len).step_by(frag as usize) {
                    let hdr = Hdr::Frag {
                        rreq,
                        offset: offset + at,
                    };
                    let payload = Payload::Staged {
                        token,
                        offset,
                        at: at as usize,
                        len: frag.min(len - at) as usize,
                    };
                    self.push_send(btl, peer, hdr, payload, token);
                }
            }
            // The receiver waits for this chunk in vain: the driver keeps
            // the error as fatal to the job.
            Err(e) => self.reqs.complete(id, Err(e)),
        }
    }

    /// Sender, FRAG mode: the btl took one more FRAG of staged send `id`
    /// (they are taken in order, so the oldest chunk's FRAGs go first):
    /// free each chunk whose FRAGs are all taken, stage the next ones, end
    /// the send at the last.
    pub(crate) fn staged_frag_taken(&mut self, id: ReqId) {
        let Some(s) = self.reqs.send_mut(id) else {
            return;
        };
        let SendState::AwaitChunks {
            want,
            chunk,
            acked,
            inflight,
            pull: false,
            frag,
            frags,
            ..
        } = &mut s.state
        else {
            return;
        };
        *frags += 1;
        loop {
            let len = (*chunk).min(*want - *acked);
            let need = len.div_ceil(*frag);
            if *acked >= *want || *frags < need {
                break;
            }
            *frags -= need;
            self.actions.push_back(Action::Unstage {
                token: id.0,
                offset: *acked,
            });
            *acked += len;
            *inflight = inflight.saturating_sub(1);
        }
        if *acked >= *want {
            self.reqs.complete(id, Ok(Status::default()));
        } else {
            self.stage_more(id);
        }
    }

    /// Sender: the receiver pulled the chunk at `offset` of send `sreq`.
    pub(crate) fn handle_chunk_ack(
        &mut self,
        peer: Rank,
        sreq: u64,
        offset: u64,
    ) -> Result<(), PmlError> {
        let id = ReqId(sreq);
        let s = self.send_req_of(peer, id, "CHUNK_ACK")?;
        let SendState::AwaitChunks {
            want,
            chunk,
            next,
            acked,
            inflight,
            pull: true,
            mask,
            ..
        } = &mut s.state
        else {
            return Err(PmlError::peer(
                peer,
                Violation::OutOfPlace { what: "CHUNK_ACK" },
            ));
        };
        // The chunk's place in the window of chunks offered and not yet
        // acknowledged in order: each may be acknowledged once.
        let bit = (offset / *chunk).checked_sub(*acked / *chunk);
        let fresh = bit.filter(|&b| b < 64 && *mask & (1 << b) == 0);
        let Some(bit) = fresh.filter(|_| offset < *next && offset.is_multiple_of(*chunk)) else {
            return Err(PmlError::peer(
                peer,
                Violation::ChunkNotOffered {
                    offset,
                    chunk: *chunk,
                    offered: *next,
                },
            ));
        };
        *mask |= 1 << bit;
        while *mask & 1 == 1 {
            *mask >>= 1;
            *acked = (*acked + *chunk).min(*want);
        }
        *inflight -= 1;
        let done = *acked >= *want;
        self.actions.push_back(Action::Unstage {
            token: sreq,
            offset,
        });
        if done {
            self.reqs.complete(id, Ok(Status::default()));
        } else {
            self.stage_more(id);
        }
        Ok(())
    }

    /// Receiver: the sender offers its staged chunk at `offset` (`len`
    /// bytes, at `desc`): have the driver get it.
    pub(crate) fn handle_chunk(
        &mut self,
        peer: Rank,
        rreq: u64,
        offset: u64,
        len: u64,
        desc: MemDesc,
    ) -> Result<(), PmlError> {
        let id = ReqId(rreq);
        let r = self.frag_recv_of(peer, id, offset, len as usize)?;
        let (dst, dst_kind) = (r.buf.addr + offset, r.buf.kind);
        let RecvState::AwaitFrags { m, copies, .. } = &mut r.state else {
            return Ok(());
        };
        *copies += 1;
        let btl = m.btl;
        self.actions.push_back(Action::StageIn {
            btl,
            peer,
            desc,
            src_offset: 0,
            dst,
            dst_kind,
            len: len as usize,
            token: rreq,
            offset,
        });
        Ok(())
    }

    /// Receiver: pull host memory the sender offered (`desc`) into device
    /// receive `id`, chunk by chunk through pinned slots.
    pub(crate) fn start_staged_pull(&mut self, id: ReqId, m: Matched, desc: MemDesc) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        r.state = RecvState::AwaitPulls {
            m,
            desc,
            next: 0,
            got: 0,
            inflight: 0,
            faulted: false,
            stream: false,
        };
        tracing::debug!(target: LOG, "recv {} B from rank {}: rndv/staged (pulled in chunks of {} B)",
            m.want, m.peer, self.cfg.device.pipeline_chunk);
        if m.want == 0 {
            self.end_pulls(id);
            return;
        }
        self.pull_more(id);
    }

    /// Keep `pipeline_depth` chunks of pulled receive `id` in flight.
    fn pull_more(&mut self, id: ReqId) {
        let depth = self.cfg.device.pipeline_depth.clamp(1, MAX_DEPTH) as u32;
        let chunk = self.cfg.device.pipeline_chunk.max(1) as u64;
        while let Some(r) = self.reqs.recv_mut(id) {
            let (addr, kind) = (r.buf.addr, r.buf.kind);
            let RecvState::AwaitPulls {
                m,
                desc,
                next,
                inflight,
                stream,
                ..
            } = &mut r.state
            else {
                return;
            };
            if *stream || *inflight >= depth || *next >= m.want {
                return;
            }
            let offset = *next;
            let len = chunk.min(m.want - offset);
            *next += len;
            *inflight += 1;
            let a = Action::StageIn {
                btl: m.btl,
                peer: m.peer,
                desc: *desc,
                src_offset: offset,
                dst: addr + offset,
                dst_kind: kind,
                len: len as usize,
                token: id.0,
                offset,
            };
            self.actions.push_back(a);
        }
    }

    /// Every chunk of pulled receive `id` is in place (or one failed):
    /// release the sender (FIN) and complete.
    fn end_pulls(&mut self, id: ReqId) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let RecvState::AwaitPulls { m, faulted, .. } = r.state else {
            return;
        };
        self.push_send(m.btl, m.peer, Hdr::Fin { sreq: m.sreq }, Payload::None, 0);
        match faulted.then(|| self.copy_faults.remove(&id.0)).flatten() {
            Some(e) => self.reqs.complete(id, Err(e)),
            None => self.finish_rndv_recv(id, &m),
        }
    }

    /// The staged chunk at `offset` (`len` bytes) of receive `token` is in
    /// place (or failed): acknowledge it (a pulled receive: pull the next),
    /// and end the receive at the last.
    pub fn handle_staged_in(
        &mut self,
        token: u64,
        offset: u64,
        len: usize,
        res: Result<(), PmlError>,
    ) {
        let id = ReqId(token);
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        if let RecvState::AwaitPulls {
            m,
            got,
            inflight,
            faulted,
            stream,
            ..
        } = &mut r.state
        {
            *got += len as u64;
            *inflight = inflight.saturating_sub(1);
            match res {
                Ok(()) => {}
                // The get failed (the transport could not read the
                // sender's memory): as a failed `rndv/get` does, fall back
                // to the stream, once the pulls in flight have ended.
                Err(PmlError::Transport { .. }) if !*faulted => {
                    if !*stream {
                        tracing::debug!(target: LOG, "pull from rank {} failed; falling back to {}",
                            m.peer, streamed_name(m, r.buf.kind));
                    }
                    *stream = true;
                }
                Err(e) => {
                    if !*faulted {
                        *faulted = true;
                        self.copy_faults.insert(id.0, e);
                    }
                }
            }
            let (m, fall_back) = (*m, *stream && !*faulted);
            if *inflight > 0 {
                if !*stream {
                    self.pull_more(id);
                }
            } else if fall_back {
                self.start_streaming(id, m);
            } else if *got >= m.want || *faulted || *stream {
                self.end_pulls(id);
            } else {
                self.pull_more(id);
            }
            return;
        }
        let RecvState::AwaitFrags {
            m,
            got,
            copies,
            faulted,
        } = &mut r.state
        else {
            return;
        };
        *got += len as u64;
        *copies = copies.saturating_sub(1);
        if let Err(e) = res {
            if !*faulted {
                *faulted = true;
                self.copy_faults.insert(id.0, e);
            }
        }
        let end = *got >= m.want && *copies == 0;
        let (btl, peer, sreq) = (m.btl, m.peer, m.sreq);
        self.push_send(btl, peer, Hdr::ChunkAck { sreq, offset }, Payload::None, 0);
        if end {
            self.end_streamed(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use gmpi_btl::{Capabilities, MemDesc};

    use crate::action::Action;
    use crate::memory::{Buf, HostWrite};
    use crate::wire::Hdr;
    use crate::{MemKind, Pml, PmlConfig, PmlError, ReqId, SendArgs, SendMode, Violation};

    struct NoHost;
    impl HostWrite for NoHost {
        fn write(&mut self, _: u64, _: &[u8]) {}
    }

    /// A rank 0 sending `len` bytes of device memory to rank 1 over a btl
    /// with get, after rank 1's CTS with PULL: the pml and the send.
    fn staged_send(len: usize) -> (Pml, ReqId) {
        let mut cfg = PmlConfig::default();
        cfg.device.pipeline_chunk = 100;
        cfg.device.pipeline_depth = 4;
        cfg.device.eager_limit = 16;
        let mut p = Pml::new(0, 2, cfg);
        let caps = Capabilities {
            name: "t",
            eager_limit: 16,
            max_send_size: 4096,
            get: true,
            put: false,
            exclusivity: 1,
            get_threshold: 16,
            cuda_ipc: false,
            gpudirect: None,
        };
        p.add_btl(caps, &|r| r == 1);
        let buf = Buf {
            addr: 0x7a00_0000_0000,
            len,
            kind: MemKind::Device { ordinal: 0 },
        };
        let id = p
            .post_send(SendArgs {
                ctx: 0,
                src: 0,
                dest: 1,
                tag: 1,
                buf,
                mode: SendMode::Standard,
            })
            .expect("posted");
        while p.poll_action().is_some() {}
        let cts = Hdr::Cts {
            sreq: id.0,
            rreq: 99,
            want: len as u64,
            pull: true,
        };
        p.handle_frag(0, 1, cts.encode().as_bytes(), &mut NoHost)
            .expect("CTS");
        (p, id)
    }

    fn ack(p: &mut Pml, id: ReqId, offset: u64) -> Result<(), PmlError> {
        let h = Hdr::ChunkAck { sreq: id.0, offset };
        p.handle_frag(0, 1, h.encode().as_bytes(), &mut NoHost)
    }

    fn not_offered(r: Result<(), PmlError>) -> bool {
        matches!(r, Err(PmlError::Peer { ref source, .. }) if matches!(**source, Violation::ChunkNotOffered { .. }))
    }

    #[test]
    fn each_offered_chunk_is_acknowledged_once_in_any_order() {
        let (mut p, id) = staged_send(350);
        let mut staged = Vec::new();
        while let Some(a) = p.poll_action() {
            if let Action::StageOut { offset, token, .. } = a {
                staged.push((token, offset));
            }
        }
        assert_eq!(staged.len(), 4, "pipeline depth");
        let desc = MemDesc {
            addr: 1,
            len: 100,
            key: 0,
        };
        for &(token, offset) in &staged {
            p.handle_staged(token, offset, Ok(Some(desc)));
        }
        while p.poll_action().is_some() {}
        // Out of order is fine; twice is not; an unoffered one is not.
        ack(&mut p, id, 200).expect("chunk 2");
        assert!(not_offered(ack(&mut p, id, 200)), "a duplicate");
        assert!(not_offered(ack(&mut p, id, 50)), "not a chunk's offset");
        assert!(not_offered(ack(&mut p, id, 400)), "never offered");
        ack(&mut p, id, 0).expect("chunk 0");
        ack(&mut p, id, 100).expect("chunk 1");
        assert!(
            not_offered(ack(&mut p, id, 100)),
            "a duplicate below the window"
        );
        assert!(!p.is_complete(id));
        ack(&mut p, id, 300).expect("the last, partial chunk");
        assert!(p.is_complete(id), "every byte acknowledged");
        assert!(p.test(id).expect("done").is_ok());
    }
}
