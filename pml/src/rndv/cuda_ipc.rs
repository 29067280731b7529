//! Rendezvous of device memory by CUDA IPC (`rndv/cuda-ipc`): ranks of one
//! node whose buffers are on GPUs.
//!
//! Sender: `Action::IpcExport` → [`Pml::handle_ipc_exported`] → RNDV_IPC
//! carrying the allocation's IPC descriptor (or, if the memory cannot be
//! exported, a plain RNDV: the receiver asks for the stream, staged from the
//! device) → FIN ends the send.
//! Receiver: `Action::IpcCopy` (the driver opens the handle, cached, and
//! copies device to device or device to host) → `handle_get_done` /
//! `handle_get_failed` as any pull (`rndv/mod.rs`).

use gmpi_mem::IpcDesc;

use crate::action::{Action, Payload};
use crate::request::Matched;
use crate::wire::Hdr;
use crate::{Pml, ReqId, LOG};

impl Pml {
    /// The driver exported send `token`'s device buffer (`Some`: its
    /// descriptor) or could not (`None`: the message is staged instead).
    pub fn handle_ipc_exported(&mut self, token: u64, desc: Option<IpcDesc>) {
        let Some((id, m, sync)) = self.end_setup(token, desc.is_some()) else {
            return;
        };
        let Some(d) = desc else {
            self.send_rts(id, m, sync, None, true);
            return;
        };
        let Some(s) = self.reqs.send_mut(id) else {
            return;
        };
        let (btl, peer) = (s.btl, s.peer);
        let mut b = vec![0u8; IpcDesc::WIRE_LEN];
        d.encode(&mut b);
        // The request-to-send of an IPC rendezvous never asks for an ACK:
        // its FIN already says the receive matched.
        self.push_rts(
            btl,
            peer,
            Hdr::RndvIpc { flags: 0, m },
            Payload::Bytes(b),
            true,
        );
    }

    /// Copy matched rendezvous `m` out of the sender's device allocation `d`
    /// into receive `id`.
    pub(crate) fn start_ipc_copy(&mut self, id: ReqId, m: Matched, d: IpcDesc) {
        let Some(buf) = self.begin_pull(id, m) else {
            return;
        };
        tracing::debug!(target: LOG, "recv {} B into {} memory from rank {}: rndv/cuda-ipc",
            m.want, buf.kind.name(), m.peer);
        self.actions.push_back(Action::IpcCopy {
            peer: m.peer,
            desc: d,
            dst: buf.addr,
            dst_kind: buf.kind,
            len: m.want as usize,
            token: id.0,
        });
    }
}
