//! Pipelined rendezvous (`rndv/pipelined`): clear-to-send, then fragments.
//!
//! The protocol every pair of ranks can do, and the fallback of every other
//! rendezvous. Receiver: [`Pml::start_streaming`] sends CTS granting `want`
//! bytes. Sender: [`Pml::handle_cts`] emits the message as FRAG fragments of
//! the plan's chunk, each an `Action::Send` that the driver submits with
//! `send_stream` (a btl reading a byte stream lets the receiver read the
//! body in place); the send ends when the btl has taken every one.
//! Receiver: each FRAG is written into the buffer as it arrives
//! ([`Pml::handle_frag_payload`], or, streamed, where
//! [`Pml::stream_target`] says, reported by [`Pml::handle_stream_read`]);
//! the receive ends when `want` bytes are in. From or into device memory
//! the same protocol is staged through host memory (`staged.rs`): a sender
//! of device memory stages its chunks through pinned slots and, where the
//! receiver's transport can `get` (its CTS says `PULL`), offers each to
//! pull instead of sending it in FRAGs.

use gmpi_btl::Rank;

use crate::action::{Payload, StreamTarget};
use crate::memory::HostWrite;
use crate::request::{Matched, RecvReq, RecvState, SendState};
use crate::wire::Hdr;
use crate::{Pml, PmlError, ReqId, Violation, LOG};

/// A FRAG header's fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frag {
    /// The receive request it is for.
    pub rreq: u64,
    /// Where its payload starts in the message.
    pub offset: u64,
}

impl Pml {
    /// Ask the sender of matched rendezvous `m` to stream it into receive
    /// `id`.
    pub(crate) fn start_streaming(&mut self, id: ReqId, m: Matched) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let kind = r.buf.kind;
        r.state = RecvState::AwaitFrags {
            m,
            got: 0,
            copies: 0,
            faulted: false,
        };
        tracing::debug!(target: LOG, "recv {} B from rank {}: {} (CTS)",
            m.want, m.peer, super::staged::streamed_name(&m, kind));
        let caps = &self.btls[m.btl].caps;
        let hdr = Hdr::Cts {
            sreq: m.sreq,
            rreq: id.0,
            want: m.want,
            pull: caps.get && self.cfg.use_get,
        };
        self.push_send(m.btl, m.peer, hdr, Payload::None, 0);
        if m.want == 0 {
            self.finish_rndv_recv(id, &m);
        }
    }

    /// CTS: the receiver grants `want` bytes of send `sreq` to its receive
    /// `rreq`: stream them (or, `pull` and device memory, stage them for
    /// the receiver's get: `staged.rs`).
    pub(crate) fn handle_cts(
        &mut self,
        peer: Rank,
        sreq: u64,
        rreq: u64,
        want: u64,
        pull: bool,
    ) -> Result<(), PmlError> {
        let id = ReqId(sreq);
        let s = self.send_req_of(peer, id, "CTS")?;
        if s.state != SendState::AwaitReply {
            return Err(PmlError::peer(peer, Violation::OutOfPlace { what: "CTS" }));
        }
        if want > s.buf.len as u64 {
            return Err(PmlError::peer(
                peer,
                Violation::CtsTooLong {
                    want,
                    len: s.buf.len,
                },
            ));
        }
        if Self::holds_export(s) {
            // The receiver gave up on the IPC copy: the stream (or the
            // staged chunks) read the send buffer itself.
            self.release_export(sreq);
        }
        // The stream reads the send buffer itself.
        self.release_registration(sreq);
        let Some(s) = self.reqs.send_mut(id) else {
            return Ok(());
        };
        if !s.buf.kind.is_host() {
            self.start_staged_send(id, rreq, want, pull);
            return Ok(());
        }
        let (btl, buf, chunk) = (s.btl, s.buf, s.plan.chunk.max(1));
        let want = want as usize;
        let n = want.div_ceil(chunk);
        s.state = SendState::AwaitStreamed { left: n as u32 };
        tracing::debug!(target: LOG, "CTS from rank {peer}: streaming {want} B in {n} fragments");
        for i in 0..n {
            let offset = i * chunk;
            let len = chunk.min(want - offset);
            let hdr = Hdr::Frag {
                rreq,
                offset: offset as u64,
            };
            let payload = Payload::Mem {
                addr: buf.addr + offset as u64,
                len,
                kind: buf.kind,
            };
            self.push_send(btl, peer, hdr, payload, sreq);
        }
        if n == 0 {
            self.reqs.complete(id, Ok(crate::Status::default()));
        }
        Ok(())
    }

    /// A FRAG that arrived whole: its payload goes into the receive.
    pub(crate) fn handle_frag_payload(
        &mut self,
        peer: Rank,
        f: Frag,
        payload: &[u8],
        w: &mut dyn HostWrite,
    ) -> Result<(), PmlError> {
        let id = ReqId(f.rreq);
        let r = self.frag_recv_of(peer, id, f.offset, payload.len())?;
        let addr = r.buf.addr + f.offset;
        self.deliver_chunk(id, addr, payload, w);
        Ok(())
    }

    /// Where the body of a streamed fragment from `peer` goes: `head` is its
    /// first bytes, `len` its whole length, `taken` the bytes of it read in
    /// earlier deliveries ([`gmpi_btl::Event::FragStream`]). Only FRAGs are
    /// streamed.
    pub fn stream_target(
        &mut self,
        peer: Rank,
        head: &[u8],
        len: usize,
        taken: usize,
    ) -> Result<StreamTarget, PmlError> {
        let (hdr, hlen) = Hdr::decode(head).map_err(|e| PmlError::peer(peer, e))?;
        let Hdr::Frag { rreq, offset } = hdr else {
            return Err(PmlError::peer(peer, Violation::StreamNotFrag));
        };
        let plen = len.checked_sub(hlen).ok_or(PmlError::peer(
            peer,
            crate::WireError::Length {
                what: "streamed FRAG",
                got: len,
                expected: hlen,
            },
        ))?;
        let id = ReqId(rreq);
        let r = self.frag_recv_of(peer, id, offset, plen)?;
        let done = taken.saturating_sub(hlen);
        Ok(StreamTarget {
            skip: hlen.saturating_sub(taken),
            addr: r.buf.addr + offset + done as u64,
            len: plen - done,
            kind: r.buf.kind,
            token: id.0,
        })
    }

    /// The driver read `n` bytes of a streamed fragment to `t`: straight
    /// into host memory (`staged` is `None`), or, for device memory, into
    /// `staged`, which is then copied in.
    pub fn handle_stream_read(&mut self, t: &StreamTarget, n: usize, staged: Option<Vec<u8>>) {
        let id = ReqId(t.token);
        match staged {
            Some(data) => self.copy_chunk_in(id, t.addr, data),
            None => self.count_chunk(id, n as u64),
        }
    }

    /// The receive that a FRAG of `plen` bytes at `offset` from `peer` is
    /// for: one streaming from that rank, with the bytes inside what it
    /// granted.
    pub(crate) fn frag_recv_of(
        &mut self,
        peer: Rank,
        id: ReqId,
        offset: u64,
        plen: usize,
    ) -> Result<&mut RecvReq, PmlError> {
        let Some(r) = self.reqs.recv_mut(id) else {
            return Err(PmlError::peer(
                peer,
                Violation::UnknownRequest {
                    what: "FRAG",
                    id: id.0,
                },
            ));
        };
        let RecvState::AwaitFrags { m, .. } = &r.state else {
            return Err(PmlError::peer(peer, Violation::OutOfPlace { what: "FRAG" }));
        };
        if m.peer != peer {
            return Err(PmlError::peer(peer, Violation::OutOfPlace { what: "FRAG" }));
        }
        if offset.checked_add(plen as u64).is_none_or(|e| e > m.want) {
            return Err(PmlError::peer(
                peer,
                Violation::FragOutOfBounds {
                    offset,
                    len: plen,
                    granted: m.want,
                },
            ));
        }
        Ok(r)
    }

    /// `n` more bytes of receive `id` are in place: complete it once all
    /// are (and every copy into device memory has ended).
    pub(crate) fn count_chunk(&mut self, id: ReqId, n: u64) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let RecvState::AwaitFrags { m, got, copies, .. } = &mut r.state else {
            return;
        };
        *got += n;
        if *got >= m.want && *copies == 0 {
            self.end_streamed(id);
        }
    }
}
