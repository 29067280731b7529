//! Running the pml's actions, each answered with the pml input its table
//! names (`gmpi_pml::action`).
//!
//! - `Send`: header + payload to the btl. Host payloads are read in place;
//!   device payloads are copied out through the gpu layer's pinned bounce
//!   buffers (a copy the btl refuses is kept, so the retry sends it without
//!   copying the chunk off the device again). Rendezvous chunks (FRAG) go
//!   by `send_stream`, so a btl reading a byte stream lets the receiver read
//!   them in place.
//! - `Register`: the btl's registration of host memory, or GPUDirect
//!   registration of device memory (a dma-buf export of the gpu layer).
//! - `IpcExport` / `IpcCopy`: the gpu layer's CUDA IPC export, and its
//!   (cached) open of a peer's handle followed by the copy. Memory legacy
//!   IPC cannot export (pool, VMM) is copied into a device staging buffer
//!   of the peer's (`Gpu::ipc_export_to`) whose lease the driver keeps by
//!   send until `IpcRelease` (the receiver is done with it). Towards this
//!   rank itself (the `self` btl) there is no handle to make or open (CUDA
//!   refuses to open one in its exporter): the descriptor names our own
//!   address and the copy is one device-to-device copy from it.
//! - `ForgetPeer`: the gpu layer drops a failed peer's mappings and
//!   staging buffers.
//! - `Get`: the btl's single-copy get into the receive buffer.
//! - `CopyIn`: bytes into device memory.
//! - `StageOut` / `Unstage` / `StageIn`: the staged pipeline, run by
//!   `staging.rs` (its gets go through [`Driver::stage_get`] here).

use gmpi_btl::{Btl, BtlError, DeviceAlloc, DeviceMem, DeviceReg, DmaBuf, LocalMem, Rank, Submit};
use gmpi_pml::{Action, MemKind, Payload, PmlError};

use super::{Driver, HostMemory};

impl<H: HostMemory> Driver<H> {
    /// Run every action the pml has queued; returns how many ran (refused
    /// ones not counted).
    #[inline(never)]
    pub(super) fn flush_actions(&mut self) -> usize {
        let mut ran = 0;
        while let Some(a) = self.pml.poll_action() {
            match self.execute(a) {
                None => ran += 1,
                Some((peer, back)) => self.pml.handle_refused(peer, back),
            }
        }
        ran
    }

    /// A transport error towards `peer`: the peer is gone, or the transport
    /// failed here (fatal to the job).
    pub(super) fn transport_error(&mut self, peer: Rank, e: BtlError) {
        match e {
            BtlError::PeerFailed(p) => self.pml.handle_peer_failed(p),
            other => {
                let err = PmlError::transport(peer, other);
                tracing::error!(target: "pml", "{}", gmpi_pml::error::chain(&err));
                self.fatal.get_or_insert(err);
                self.pml.handle_peer_failed(peer);
            }
        }
    }

    /// Run `f` over btl `btl` with the device memory at `addr`: its
    /// allocation (buffer id checked with the driver now), and an export of
    /// dma-bufs from it when the btl registers device memory that way
    /// ([`DeviceReg::DmaBuf`]; the btl exports only when it registers),
    /// after making memory operations on the allocation synchronous. An
    /// error: the attribute failed, or the memory is not the GPU's.
    fn with_device<R>(
        &mut self,
        btl: usize,
        addr: u64,
        f: impl FnOnce(&mut dyn Btl, DeviceMem<'_>) -> R,
    ) -> Result<R, String> {
        // The NIC reads or writes the memory behind CUDA's back: no copy
        // or memset on it may still be in flight when it does.
        self.gpu.prepare_for_nic(addr).map_err(|e| e.to_string())?;
        let info = self
            .gpu
            .info(addr)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{addr:#x} is not device memory"))?;
        let alloc = DeviceAlloc {
            base: info.base,
            size: info.size,
            buffer_id: info.buffer_id,
        };
        let b = &mut self.btls[btl];
        if b.caps().gpudirect != Some(DeviceReg::DmaBuf) {
            return Ok(f(
                b.as_mut(),
                DeviceMem {
                    alloc,
                    export: None,
                },
            ));
        }
        let gpu = &self.gpu;
        let mut export = |at: u64, len: u64| {
            let e = gpu
                .export_dmabuf(at, len as usize)
                .map_err(|e| e.to_string())?;
            Ok(DmaBuf {
                fd: e.fd,
                offset: e.offset,
            })
        };
        Ok(f(
            b.as_mut(),
            DeviceMem {
                alloc,
                export: Some(&mut export),
            },
        ))
    }

    /// Hand the pml the outcome of get `a` (to `peer`, `token`); give the
    /// action back if the btl had no resources.
    fn get_outcome(
        &mut self,
        res: Result<Submit, BtlError>,
        peer: Rank,
        token: u64,
        a: Action,
    ) -> Option<(Rank, Action)> {
        match res {
            Ok(Submit::Done) => {
                self.pml.handle_get_done(token);
                None
            }
            Ok(Submit::Queued) => None,
            Ok(Submit::NoResource) => Some((peer, a)),
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

    /// Run one action; give it back, with its peer, if the btl had no
    /// resources (only sends and gets go to a btl that can refuse).
    fn execute(&mut self, a: Action) -> Option<(Rank, Action)> {
        match a {
            Action::Send {
                btl,
                peer,
                header,
                payload,
                token,
            } => self.execute_send(btl, peer, header, payload, token),
            Action::Register {
                btl,
                peer: _,
                buf,
                token,
            } => {
                let desc = if buf.kind.is_host() {
                    self.btls[btl].register(buf.addr, buf.len as u64)
                } else {
                    self.with_device(btl, buf.addr, |b, dev| {
                        b.register_device(buf.addr, buf.len as u64, dev)
                    })
                    .unwrap_or_else(|e| {
                        tracing::debug!(target: "pml", "no GPUDirect registration of {:#x}+{}: {e}", buf.addr, buf.len);
                        None
                    })
                };
                self.pml.handle_registered(token, desc);
                None
            }
            Action::IpcExport { peer, buf, token } => {
                let desc = if peer == self.pml.rank() {
                    self.gpu.self_desc(buf.addr, buf.len)
                } else {
                    self.gpu.ipc_export_to(peer, buf.addr, buf.len).map(|e| {
                        if let Some(lease) = e.lease {
                            tracing::debug!(target: "pml", "send {} B to rank {peer}: not legacy-IPC-capable memory, exported through a device staging buffer", buf.len);
                            self.leases.insert(token, lease);
                        }
                        e.desc
                    })
                };
                let desc = desc
                    .map_err(|e| tracing::debug!(target: "pml", "no CUDA IPC for {:#x}+{}: {e}; staging instead", buf.addr, buf.len))
                    .ok();
                self.pml.handle_ipc_exported(token, desc);
                None
            }
            Action::Deregister { btl, desc } => {
                self.btls[btl].deregister(&desc);
                None
            }
            Action::IpcRelease { token } => {
                // Dropping the lease hands its staging buffer back.
                self.leases.remove(&token);
                None
            }
            Action::ForgetPeer { peer } => {
                self.drain_ipc_copies(peer);
                self.gpu.ipc_forget_peer(peer);
                None
            }
            Action::Get {
                btl,
                peer,
                desc,
                offset,
                dst,
                dst_kind,
                len,
                token,
                pull,
            } => {
                self.quiet[btl] = false;
                let d = LocalMem { addr: dst, len };
                // Both gets below write `d`: the pml emits a get only into
                // the buffer of a receive request in its `AwaitPull` state
                // (host memory, or device memory the btl registers for
                // GPUDirect), which the runtime keeps alive and leaves alone
                // until the request completes (`buffer.rs`: a blocking call
                // holds the borrow, a `Request` holds it until done); the
                // request completes only after this get's `Done`, error,
                // `GetComplete` or `GetFailed` (the pml's `handle_get_*`).
                let res = if !dst_kind.is_host() {
                    // GPUDirect RDMA (`rndv/gpudirect`): the btl registers
                    // the device destination itself; an export that fails
                    // fails the get, and the pml falls back.
                    self.with_device(btl, dst, |b, dev| {
                        // SAFETY: `d` as said above.
                        unsafe { b.get_device(peer, &desc, offset, d, dev, token) }
                    })
                    .unwrap_or_else(|why| {
                        Err(BtlError::GetFailed(format!(
                            "preparing the device destination for the NIC: {why}"
                        )))
                    })
                } else {
                    let b = &mut self.btls[btl];
                    // SAFETY: `d` as said above.
                    unsafe { b.get_as(peer, &desc, offset, d, token, pull) }
                };
                self.get_outcome(res, peer, token, a)
            }
            Action::IpcCopy {
                peer,
                desc,
                dst,
                dst_kind,
                len,
                token,
            } => {
                match self.ipc_copy(peer, &desc, dst, dst_kind, len) {
                    Ok(None) => self.pml.handle_get_done(token),
                    Ok(Some(t)) => self.staging.ipc_copy(t, peer, token),
                    Err(why) => self.pml.handle_get_failed(token, &why),
                }
                None
            }
            Action::StageOut {
                btl,
                peer,
                expose,
                src,
                len,
                token,
                offset,
            } => {
                self.staging.stage_out(super::staging::Out {
                    btl,
                    peer,
                    expose,
                    src,
                    len,
                    token,
                    offset,
                });
                None
            }
            Action::Unstage { token, offset } => {
                self.unstage(token, offset);
                None
            }
            Action::StageIn {
                btl,
                peer,
                desc,
                src_offset,
                dst,
                dst_kind,
                len,
                token,
                offset,
            } => {
                self.staging.stage_in(super::staging::In {
                    btl,
                    peer,
                    desc,
                    src_offset,
                    dst,
                    dst_kind,
                    len,
                    token,
                    offset,
                });
                None
            }
            Action::CopyIn {
                dst,
                dst_kind: _,
                data,
                token,
                overlap: true,
            } => {
                self.staging.copy_in(dst, data, token);
                None
            }
            Action::CopyIn {
                dst,
                dst_kind: _,
                data,
                token,
                overlap: false,
            } => {
                let res = self
                    .gpu
                    .with_write(dst, data.len(), |d| d.copy_from_slice(&data))
                    .map(|_| ())
                    .map_err(|e| PmlError::device("writing", dst, data.len(), e));
                if let Err(e) = &res {
                    tracing::error!(target: "pml", "{}", gmpi_pml::error::chain(e));
                }
                self.pml.handle_copy_done(token, res);
                None
            }
        }
    }

    /// Submit a fragment; see the module documentation.
    fn execute_send(
        &mut self,
        btl: usize,
        peer: Rank,
        header: gmpi_pml::wire::HdrBuf,
        payload: Payload,
        token: u64,
    ) -> Option<(Rank, Action)> {
        self.quiet[btl] = false;
        let b = &mut self.btls[btl];
        let stream = header.is_frag();
        let submit = |b: &mut Box<dyn Btl>, parts: &[&[u8]]| {
            if stream {
                b.send_stream(peer, parts, token)
            } else {
                b.send(peer, parts, token)
            }
        };
        // A staged chunk of device memory the btl refused: the host copy
        // just made, so that the retry sends it instead.
        let mut kept = None;
        let res = match &payload {
            Payload::None => submit(b, &[header.as_bytes()]),
            Payload::Bytes(v) => submit(b, &[header.as_bytes(), v]),
            Payload::Staged {
                token: t,
                offset,
                at,
                len,
            } => match self.staging.offered_bytes(*t, *offset, *at, *len) {
                Some(d) => submit(b, &[header.as_bytes(), d]),
                // The chunk's slot is gone (its peer failed and the send
                // with it): nothing to send.
                None => return None,
            },
            Payload::Mem { addr, len, kind } if kind.is_host() => {
                self.host
                    .with_read(*addr, *len, |d| submit(b, &[header.as_bytes(), d]))
            }
            Payload::Mem { addr, len, kind } => {
                let read = self.gpu.with_read(*addr, *len, |d| {
                    let r = submit(b, &[header.as_bytes(), d]);
                    if matches!(r, Ok(Submit::NoResource)) {
                        kept = Some(d.to_vec());
                    }
                    r
                });
                match read {
                    Ok((r, _)) => r,
                    Err(e) => {
                        self.device_read_failed(*addr, *len, *kind, token, e);
                        return None;
                    }
                }
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
            Ok(Submit::NoResource) => Some((
                peer,
                Action::Send {
                    btl,
                    peer,
                    header,
                    payload: kept.map_or(payload, Payload::Bytes),
                    token,
                },
            )),
            Err(e) => {
                self.transport_error(peer, e);
                None
            }
        }
    }

    /// Copying a send's payload off the device failed: the message cannot
    /// go out, so its send fails and the job cannot go on (the peer would
    /// wait for it): the error is kept as fatal.
    fn device_read_failed(
        &mut self,
        addr: u64,
        len: usize,
        kind: MemKind,
        token: u64,
        e: gmpi_gpu::GpuError,
    ) {
        let err = PmlError::device("reading", addr, len, e);
        tracing::error!(target: "pml", "{} ({} memory)", gmpi_pml::error::chain(&err), kind.name());
        if token != 0 {
            self.pml.handle_send_failed(token, err.clone());
        }
        self.fatal.get_or_insert(err);
    }

    /// The staged pipeline's get of `len` bytes at `offset` in `peer`'s
    /// memory `desc` into `dst` (`staging.rs`), with `token` for a queued
    /// get's event.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn stage_get(
        &mut self,
        btl: usize,
        peer: Rank,
        desc: &gmpi_btl::MemDesc,
        offset: u64,
        dst: u64,
        len: usize,
        token: u64,
    ) -> Result<Submit, BtlError> {
        self.quiet[btl] = false;
        // SAFETY: `dst` is either a pinned slot `staging.rs` owns and keeps,
        // untouched, until the get ends (in its `in_gets` while queued), or
        // the host buffer of a receive request in `AwaitFrags`, which the
        // runtime keeps alive and leaves alone until the request completes;
        // it completes only after this chunk's `handle_staged_in`, which
        // `staging.rs` calls once the get has ended.
        unsafe { self.btls[btl].get(peer, desc, offset, LocalMem { addr: dst, len }, token) }
    }

    /// Copy `len` bytes of `peer`'s IPC-exported memory `desc` into local
    /// memory at `dst`: into host memory at once (`None`); into device
    /// memory asynchronously, on the peer's stream (`Some`: the copy's
    /// ticket, polled by `staging.rs`), so that the copies of a window of
    /// receives queue back to back on the GPU.
    fn ipc_copy(
        &mut self,
        peer: Rank,
        desc: &gmpi_gpu::IpcDesc,
        dst: u64,
        dst_kind: MemKind,
        len: usize,
    ) -> Result<Option<gmpi_gpu::Ticket>, String> {
        let src = if peer == self.pml.rank() {
            desc.base + desc.offset
        } else {
            self.gpu.ipc_map(peer, desc).map_err(|e| e.to_string())?
        };
        let gpu = &self.gpu;
        let res = if dst_kind.is_host() {
            self.host
                .with_write(dst, len, |d| gpu.copy_to_host(d, src).map(|_| ()))
                .map(|()| None)
        } else if len == 0 {
            Ok(None)
        } else {
            gpu.copy_device_async(dst, src, len, peer).map(Some)
        };
        res.map_err(|e| e.to_string())
    }
}
