//! Rendezvous of device memory by CUDA IPC (`rndv/cuda-ipc`): ranks of one
//! node whose buffers are on GPUs.
//!
//! Sender: `Action::IpcExport` → [`Pml::handle_ipc_exported`] → RNDV_IPC
//! carrying the IPC descriptor the driver made (of the allocation itself,
//! or of a device staging buffer it copied the message into where the
//! allocation cannot be exported; or, if neither worked, a plain RNDV: the
//! receiver asks for the stream, staged from the device) → FIN ends the
//! send. Once the receiver no longer reads the export (FIN, a CTS asking
//! for the stream, or the receiver failed) the pml emits
//! `Action::IpcRelease`, so the driver can reuse its staging buffer.
//! Receiver: `Action::IpcCopy` (the driver opens the handle, cached, and
//! copies device to device or device to host) → `handle_get_done` /
//! `handle_get_failed` as any pull (`rndv/mod.rs`).

use gmpi_mem::IpcDesc;

use crate::action::{Action, Payload};
use crate::protocol::Protocol;
use crate::request::{Matched, SendReq, SendState};
use crate::wire::Hdr;
use crate::{Pml, ReqId, LOG};

impl Pml {
    /// The driver exported send `token`'s device buffer (`Some`: its
    /// descriptor) or could not (`None`: the message is staged instead).
    pub fn handle_ipc_exported(&mut self, token: u64, desc: Option<IpcDesc>) {
        let Some((id, m, sync)) = self.end_setup(token, desc.is_some()) else {
            if desc.is_some() {
                // The send ended meanwhile: nobody will read the export.
                self.release_export(token);
            }
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

    /// Whether send `s` holds an IPC export its receiver may still read:
    /// an IPC rendezvous whose descriptor went out and that has had no
    /// reply yet.
    pub(crate) fn holds_export(s: &SendReq) -> bool {
        s.plan.protocol == Protocol::RndvIpc && s.state == SendState::AwaitReply
    }

    /// The receiver of send `token` no longer reads its export.
    pub(crate) fn release_export(&mut self, token: u64) {
        self.actions.push_back(Action::IpcRelease { token });
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

#[cfg(test)]
mod tests {
    use gmpi_btl::Capabilities;
    use gmpi_mem::{IpcHandle, MemKind};

    use crate::{Action, Buf, Pml, PmlConfig, PmlError, SendArgs, SendMode};

    /// Rank 0 of two, reaching rank 1 over a node-local btl with CUDA IPC.
    fn pml() -> Pml {
        let mut p = Pml::new(0, 2, PmlConfig::default());
        let caps = Capabilities {
            name: "node",
            eager_limit: 4096,
            max_send_size: 1 << 16,
            get: true,
            put: false,
            exclusivity: 10,
            get_threshold: 4096,
            cuda_ipc: true,
            gpudirect: None,
        };
        p.add_btl(caps, &|r| r == 1);
        p
    }

    fn device_send(p: &mut Pml) -> u64 {
        let id = p
            .post_send(SendArgs {
                ctx: 0,
                src: 0,
                dest: 1,
                tag: 0,
                buf: Buf {
                    addr: 0x7a00_0000_0000,
                    len: 1 << 20,
                    kind: MemKind::Device { ordinal: 0 },
                },
                mode: SendMode::Standard,
            })
            .expect("post");
        match p.poll_action() {
            Some(Action::IpcExport { token, .. }) => assert_eq!(token, id.0),
            other => panic!("{other:?}"),
        }
        id.0
    }

    fn desc() -> gmpi_mem::IpcDesc {
        gmpi_mem::IpcDesc {
            handle: IpcHandle([1; 64]),
            base: 0x7a00_0000_0000,
            buffer_id: 1,
            offset: 0,
            len: 1 << 20,
        }
    }

    fn drain(p: &mut Pml) -> Vec<Action> {
        std::iter::from_fn(|| p.poll_action()).collect()
    }

    #[test]
    fn an_export_is_released_when_the_peer_fails_or_arrives_too_late() {
        // Exported, then the peer fails before replying.
        let mut p = pml();
        let token = device_send(&mut p);
        p.handle_ipc_exported(token, Some(desc()));
        assert!(matches!(drain(&mut p)[..], [Action::Send { .. }]));
        p.handle_peer_failed(1);
        assert!(matches!(
            drain(&mut p)[..],
            [Action::IpcRelease { token: t }, Action::ForgetPeer { peer: 1 }] if t == token
        ));
        assert_eq!(
            p.test(crate::ReqId(token)),
            Some(Err(PmlError::PeerFailed(1)))
        );

        // The peer fails while the export is being made: the late export
        // is handed back at once; a failed export has nothing to hand back.
        let mut p = pml();
        let token = device_send(&mut p);
        p.handle_peer_failed(1);
        assert!(matches!(
            drain(&mut p)[..],
            [Action::ForgetPeer { peer: 1 }]
        ));
        p.handle_ipc_exported(token, Some(desc()));
        assert!(matches!(
            drain(&mut p)[..],
            [Action::IpcRelease { token: t }] if t == token
        ));
        p.handle_ipc_exported(token, None);
        assert!(drain(&mut p).is_empty());
    }
}
