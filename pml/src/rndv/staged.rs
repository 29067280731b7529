//! Device memory staged through host memory (`rndv/staged`): the pipelined
//! rendezvous where either buffer is on a GPU and no direct path (CUDA IPC,
//! GPUDirect) exists or worked.
//!
//! Sender: nothing differs in the pml. Its FRAG payloads name device memory
//! and the driver reads each chunk through the gpu layer's pinned bounce
//! buffers as it submits it (the chunk is `GMPI_GPU_PIPELINE_CHUNK`, capped
//! by the transport's fragment: `protocol.rs`).
//! Receiver: each chunk that lands is copied into device memory by an
//! `Action::CopyIn` ([`Pml::copy_chunk_in`]); the receive ends when every
//! byte has arrived and every copy has ended ([`Pml::handle_copy_done`],
//! which also ends an eager message into device memory).

use crate::action::Action;
use crate::memory::HostWrite;
use crate::protocol::Protocol;
use crate::request::{outcome, Matched, RecvState};
use crate::{MemKind, Pml, PmlError, ReqId};

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
            RecvState::AwaitMatch { .. } | RecvState::AwaitPull { .. } => {}
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
