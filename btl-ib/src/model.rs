//! An in-memory verbs model: several [`ModelFabric`]s (one per rank, each a
//! port of its own device) on one [`ModelNet`], in one process. It keeps
//! what the protocol depends on from RC verbs:
//! - a SEND takes the next buffer of the receiver's shared receive queue;
//!   with none posted the receiver answers RNR and the sender retries
//!   (counted in [`ModelNet::rnr_naks`]), keeping the queue pair's order;
//! - a SEND longer than the buffer is a receive error;
//! - an RDMA READ is checked against the owner's registrations (key, range,
//!   remote-read access), an RDMA WRITE likewise (remote-write access, host
//!   memory: [`Fabric::reg_mr_window`]), and fails with a remote access error otherwise,
//!   which, as on real RC, moves the reader's queue pair to the error state
//!   (every later request of it is flushed);
//! - completions of one send queue come in order, unsignalled requests
//!   complete silently;
//! - local memory must lie in a registration with the key given;
//! - a killed fabric ([`ModelNet::kill`]) stops answering: its peers' sends
//!   end with "retry counter exceeded";
//! - a SEND towards a queue pair not yet connected (still INIT) is not
//!   taken (real RC drops it and retransmits): it waits, like RNR, and is
//!   counted ([`ModelNet::early_sends`]: the connection protocol must keep
//!   it at zero);
//! - datagrams (UD) reach the port whose datagram queue pair and GID the
//!   address names, land [`GRH_BYTES`] into the next UD receive buffer,
//!   and are lost, silently, without one, towards a dead port, or when the
//!   test says so ([`ModelNet::drop_datagrams`]);
//! - GPU memory ([`ModelNet::with_gpu`]: a [`DeviceMemory`] and what the
//!   "NIC" can do with it, [`GpuNic`]) is registered as on a real host:
//!   `reg_mr` of a device address fails with "Bad address" unless
//!   `nvidia_peermem` is "loaded"; `reg_dmabuf_mr` works only on a NIC
//!   with dma-buf support, checks the descriptor and that the range lies in
//!   the buffer (its size is `fstat`'s), and addresses the memory by its
//!   iova; RDMA READs from and into such registrations move the bytes
//!   through the [`DeviceMemory`], never as host pointers;
//! - host registrations count against a locked-memory limit when the test
//!   sets one ([`ModelNet::set_pin_limit`]): beyond it `reg_mr` fails with
//!   ENOMEM.
//!
//! Registrations read the memory as it is when the request runs, not the
//! pages pinned at `reg_mr`: the model cannot show a stale registration
//! (the Soft-RoCE guest's `realloc` check does).
//!
//! Requests execute when posted (or when the receiver next polls, after
//! RNR). The copies are the model's only `unsafe`: the protocol's posting
//! rules ([`Fabric`]'s `# Safety`) make the memory valid.

use std::collections::{HashMap, VecDeque};
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use gmpi_btl::Wake;

use crate::fabric::{
    Fabric, Link, LocalQp, Mr, PortInfo, RemoteQp, SendWr, Sge, UdAddr, Wc, WcKind, GRH_BYTES,
    WC_FLUSH_ERR,
};

/// Verbs status: local protection error (memory outside a registration).
const LOC_PROT_ERR: u32 = 4;
/// Verbs status: local length error (a SEND longer than the buffer).
const LOC_LEN_ERR: u32 = 1;
/// Verbs status: remote access error.
const REM_ACCESS_ERR: u32 = 10;
/// Verbs status: transport retry counter exceeded.
const RETRY_EXC_ERR: u32 = 12;

/// GPU memory as the model's "NIC" reaches it (a test implements it over
/// the gpu layer's test double).
pub trait DeviceMemory: Send + Sync + std::fmt::Debug {
    /// Whether `len` bytes at `addr` are device memory.
    fn contains(&self, addr: u64, len: u64) -> bool;
    /// Read `len` bytes of device memory at `addr`.
    fn read(&self, addr: u64, len: usize) -> Vec<u8>;
    /// Write device memory at `addr`.
    fn write(&self, addr: u64, data: &[u8]);
    /// The device address at which dma-buf `fd` starts, where known: a
    /// registration of `offset` in it must then name iova `start + offset`.
    fn dmabuf_start(&self, fd: BorrowedFd<'_>) -> Option<u64> {
        let _ = fd;
        None
    }
    /// The buffer id of the allocation holding `addr`, where known: a
    /// registration is of the allocation there when it was made, and an
    /// access through it after that allocation was freed and another made
    /// at its address fails (see [`ModelNet::stale_device_accesses`]).
    fn buffer_id(&self, addr: u64) -> Option<u64> {
        let _ = addr;
        None
    }
}

/// What the model's NIC can do with GPU memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuNic {
    /// `ibv_reg_dmabuf_mr` works (the provider and the kernel have it).
    pub dmabuf: bool,
    /// `nvidia_peermem` is loaded: `ibv_reg_mr` accepts device addresses.
    pub peermem: bool,
}

/// Registrations made so far, by kind (see [`ModelNet::registered`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Registered {
    /// Of host memory, by `reg_mr`.
    pub host: u64,
    /// Of device memory by its address (`reg_mr`, peermem).
    pub device_address: u64,
    /// Of device memory through a dma-buf (`reg_dmabuf_mr`).
    pub dmabuf: u64,
}

#[derive(Debug, Clone, Copy)]
struct ModelMr {
    mr: Mr,
    remote_read: bool,
    /// Peers may write it too ([`Fabric::reg_mr_window`]).
    remote_write: bool,
    /// GPU memory (reached through [`DeviceMemory`]).
    device: bool,
    /// The buffer id of the device allocation registered, where known.
    buffer_id: Option<u64>,
}

#[derive(Debug, Default)]
struct Dev {
    /// The port's GID (how datagrams find it).
    gid: [u8; 16],
    /// Asynchronous events to hand out (tests).
    events: VecDeque<(Option<u32>, String)>,
    /// Its datagram queue pair, and that queue pair's receive buffers.
    ud: Option<u32>,
    ud_rq: VecDeque<(u64, Sge)>,
    /// Address handles made on it.
    ahs: Vec<UdAddr>,
    /// RC queue pairs made on it.
    qps_made: usize,
    srq: VecDeque<(u64, Sge)>,
    cq: VecDeque<Wc>,
    mrs: HashMap<u32, ModelMr>,
    dead: bool,
    woken: bool,
}

#[derive(Debug)]
struct Qp {
    dev: usize,
    remote: Option<u32>,
    error: bool,
    /// Sends waiting for a receive buffer (RNR), in order.
    waiting: VecDeque<(SendWr, Vec<u8>)>,
}

#[derive(Debug, Default)]
struct Net {
    devs: Vec<Dev>,
    qps: HashMap<u32, Qp>,
    next_qpn: u32,
    next_key: u32,
    rnr_naks: u64,
    early_sends: u64,
    /// Datagrams still to lose (tests).
    drop_datagrams: u32,
    /// Datagrams delivered, and lost.
    datagrams: (u64, u64),
    gpu: Option<(Arc<dyn DeviceMemory>, GpuNic)>,
    registered: Registered,
    /// Bytes of host memory each port may hold registered (the
    /// locked-memory limit), if any.
    pin_limit: Option<u64>,
    /// RDMA through a device registration whose allocation was freed and
    /// replaced since (each failed with an access error).
    stale_device: u64,
    /// Asynchronous events reach [`Fabric::async_event_now`] only.
    defer_async: bool,
    /// RDMA WRITEs that landed.
    writes: u64,
}

/// The shared state of a model network.
#[derive(Debug, Clone, Default)]
pub struct ModelNet {
    inner: Arc<(Mutex<Net>, Condvar)>,
}

/// One rank's port on a [`ModelNet`].
#[derive(Debug)]
pub struct ModelFabric {
    net: ModelNet,
    dev: usize,
    port: PortInfo,
}

#[derive(Debug)]
struct ModelWaker {
    net: ModelNet,
    dev: usize,
}

impl Wake for ModelWaker {
    fn wake(&self) {
        let (m, c) = &*self.net.inner;
        m.lock().expect("model").devs[self.dev].woken = true;
        c.notify_all();
    }
}

impl ModelNet {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new port, with `max_inline` bytes of inline data, `sq_depth` send
    /// queue entries and `srq_depth` receive buffers at most.
    pub fn fabric(&self, max_inline: u32, sq_depth: u32, srq_depth: u32) -> ModelFabric {
        let mut n = self.inner.0.lock().expect("model");
        let dev = n.devs.len();
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..16].copy_from_slice(&(dev as u32 + 1).to_be_bytes());
        n.devs.push(Dev {
            gid,
            ..Dev::default()
        });
        ModelFabric {
            net: self.clone(),
            dev,
            port: PortInfo {
                device: format!("model{dev}"),
                port: 1,
                link: Link::Ethernet,
                lid: 0,
                gid,
                gid_index: 1,
                mtu: 3,
                max_msg: 1 << 31,
                max_rd_atomic: 4,
                max_inline,
                sq_depth,
                srq_depth,
            },
        }
    }

    /// A network whose NICs reach GPU memory `mem` as `nic` says.
    pub fn with_gpu(mem: Arc<dyn DeviceMemory>, nic: GpuNic) -> Self {
        let n = Self::new();
        n.inner.0.lock().expect("model").gpu = Some((mem, nic));
        n
    }

    /// Registrations made so far on every port, by kind.
    pub fn registered(&self) -> Registered {
        self.inner.0.lock().expect("model").registered
    }

    /// RDMA accesses, so far, through a registration of device memory that
    /// was freed and allocated again since it was made: on a real NIC they
    /// would move the old allocation's pages (dma-buf) or fail (peermem
    /// invalidates); the model fails them with a remote or local access
    /// error. A correct cache never makes one.
    pub fn stale_device_accesses(&self) -> u64 {
        self.inner.0.lock().expect("model").stale_device
    }

    /// RDMA WRITEs that landed in a peer's memory, so far.
    pub fn rdma_writes(&self) -> u64 {
        self.inner.0.lock().expect("model").writes
    }

    /// SENDs that reached a queue pair not yet connected, so far.
    pub fn early_sends(&self) -> u64 {
        self.inner.0.lock().expect("model").early_sends
    }

    /// Raise a fatal asynchronous event on `dev`'s port, naming queue pair
    /// `qpn` or none (a port error).
    pub fn async_event(&self, dev: usize, qpn: Option<u32>, what: &str) {
        let (m, c) = &*self.inner;
        m.lock().expect("model").devs[dev]
            .events
            .push_back((qpn, what.to_string()));
        c.notify_all();
    }

    /// Asynchronous events are seen only by [`Fabric::async_event_now`],
    /// not by the progress pass's [`Fabric::async_event`]: as with verbs,
    /// whose descriptor is read only now and then, an event raised just
    /// before a completion error is not yet seen when the error is.
    pub fn defer_async_events(&self, on: bool) {
        self.inner.0.lock().expect("model").defer_async = on;
    }

    /// Lose the next `n` datagrams, whatever their port.
    pub fn drop_datagrams(&self, n: u32) {
        self.inner.0.lock().expect("model").drop_datagrams = n;
    }

    /// Datagrams delivered and lost so far.
    pub fn datagrams(&self) -> (u64, u64) {
        self.inner.0.lock().expect("model").datagrams
    }

    /// RC queue pairs `dev`'s port has made.
    pub fn queue_pairs(&self, dev: usize) -> usize {
        self.inner.0.lock().expect("model").devs[dev].qps_made
    }

    /// Receivers that had no buffer posted for an arriving SEND, so far.
    pub fn rnr_naks(&self) -> u64 {
        self.inner.0.lock().expect("model").rnr_naks
    }

    /// Let each port hold at most `bytes` of host memory registered, as
    /// `ulimit -l` does: `reg_mr` beyond it fails with ENOMEM.
    pub fn set_pin_limit(&self, bytes: u64) {
        self.inner.0.lock().expect("model").pin_limit = Some(bytes);
    }

    /// Registrations of `dev`'s port still held.
    pub fn registrations(&self, dev: usize) -> usize {
        self.inner.0.lock().expect("model").devs[dev].mrs.len()
    }

    /// Whether queue pair `qpn` is in the error state.
    pub fn in_error(&self, qpn: u32) -> bool {
        let n = self.inner.0.lock().expect("model");
        n.qps.get(&qpn).is_some_and(|q| q.error)
    }

    /// Sends of queue pair `qpn` waiting for a receive buffer (RNR).
    pub fn waiting_sends(&self, qpn: u32) -> usize {
        let n = self.inner.0.lock().expect("model");
        n.qps.get(&qpn).map_or(0, |q| q.waiting.len())
    }

    /// Kill `dev`'s port: it answers nothing from now on.
    pub fn kill(&self, dev: usize) {
        let (m, c) = &*self.inner;
        let mut n = m.lock().expect("model");
        n.devs[dev].dead = true;
        c.notify_all();
    }
}

impl Net {
    fn key(&mut self) -> u32 {
        self.next_key += 1;
        // Spread keys so that a forged one rarely matches.
        self.next_key.wrapping_mul(0x9e37_79b1) | 1
    }

    /// Whether `len` bytes at `addr` lie in `dev`'s registration `key`
    /// (remote access asked for when `remote`): `Some(device memory?)`.
    fn covered(&mut self, dev: usize, addr: u64, len: u64, key: u32, remote: bool) -> Option<bool> {
        let Some(m) = self.devs[dev].mrs.get(&key) else {
            return (len == 0 && !remote).then_some(false);
        };
        let mr = &m.mr;
        if remote && (!m.remote_read || mr.rkey != key) {
            return None;
        }
        if !remote && mr.lkey != key {
            return None;
        }
        if !(addr >= mr.addr && addr.checked_add(len).is_some_and(|e| e <= mr.addr + mr.len)) {
            return None;
        }
        let (device, registered) = (m.device, m.buffer_id);
        if device && registered.is_some() {
            let now = self.gpu.as_ref().and_then(|(g, _)| g.buffer_id(addr));
            if now != registered {
                self.stale_device += 1;
                return None;
            }
        }
        Some(device)
    }

    /// Record a registration of `dev` and hand it out.
    fn register(&mut self, dev: usize, addr: u64, len: u64, remote_read: bool, device: bool) -> Mr {
        let k = self.key();
        let buffer_id = device
            .then(|| self.gpu.as_ref().and_then(|(g, _)| g.buffer_id(addr)))
            .flatten();
        let mr = Mr {
            addr,
            len,
            lkey: k,
            rkey: if remote_read { k } else { 0 },
            handle: k as u64,
        };
        self.devs[dev].mrs.insert(
            k,
            ModelMr {
                mr,
                remote_read,
                remote_write: false,
                device,
                buffer_id,
            },
        );
        mr
    }

    /// The GPU memory the NICs reach, if `len` bytes at `addr` are in it.
    fn gpu_at(&self, addr: u64, len: u64) -> Option<(&Arc<dyn DeviceMemory>, GpuNic)> {
        self.gpu
            .as_ref()
            .filter(|(m, _)| m.contains(addr, len.max(1)))
            .map(|(m, nic)| (m, *nic))
    }

    fn complete(&mut self, dev: usize, wr_id: u64, qpn: u32, kind: WcKind, status: u32) {
        self.devs[dev].cq.push_back(Wc {
            wr_id,
            qpn,
            kind,
            status,
        });
    }

    /// Complete a send-queue request with `status`; one that failed moves
    /// its queue pair to the error state, as on real RC.
    fn finish(&mut self, dev: usize, wr_id: u64, qpn: u32, kind: WcKind, status: u32) {
        self.complete(dev, wr_id, qpn, kind, status);
        if status != 0 {
            self.qp_error(qpn);
        }
    }

    fn qp_error(&mut self, qpn: u32) {
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.error = true;
            let dev = q.dev;
            let flushed: Vec<_> = q.waiting.drain(..).collect();
            for (wr, _) in flushed {
                let id = match wr {
                    SendWr::Send { wr_id, .. }
                    | SendWr::Read { wr_id, .. }
                    | SendWr::Write { wr_id, .. } => wr_id,
                };
                self.complete(dev, id, qpn, WcKind::Send, WC_FLUSH_ERR);
            }
        }
    }

    /// Retry the sends of every queue pair that has some waiting.
    fn drain_all(&mut self) {
        let qpns: Vec<u32> = self
            .qps
            .iter()
            .filter(|(_, q)| !q.waiting.is_empty())
            .map(|(&k, _)| k)
            .collect();
        for q in qpns {
            self.drain_waiting(q);
        }
    }

    /// Deliver the sends that wait on `qpn`, in order, while buffers last.
    fn drain_waiting(&mut self, qpn: u32) {
        loop {
            let Some(q) = self.qps.get_mut(&qpn) else {
                return;
            };
            let Some((wr, bytes)) = q.waiting.pop_front() else {
                return;
            };
            if !self.deliver(qpn, wr, &bytes) {
                let q = self.qps.get_mut(&qpn).expect("qp");
                q.waiting.push_front((wr, bytes));
                return;
            }
        }
    }

    /// Deliver a SEND of `qpn`: `false` when the receiver had no buffer.
    fn deliver(&mut self, qpn: u32, wr: SendWr, bytes: &[u8]) -> bool {
        let SendWr::Send {
            wr_id,
            imm,
            signaled,
            ..
        } = wr
        else {
            return true;
        };
        let q = &self.qps[&qpn];
        let dev = q.dev;
        let Some(rq) = q.remote else { return true };
        let rdev = self.qps.get(&rq).map(|r| r.dev);
        let gone = match self.qps.get(&rq) {
            Some(r) => self.devs[r.dev].dead || r.error,
            None => true,
        };
        if gone {
            self.complete(dev, wr_id, qpn, WcKind::Send, RETRY_EXC_ERR);
            self.qp_error(qpn);
            return true;
        }
        let rdev = rdev.expect("live");
        if self.qps[&rq].remote.is_none() {
            self.early_sends += 1;
            return false;
        }
        let Some((rid, buf)) = self.devs[rdev].srq.pop_front() else {
            self.rnr_naks += 1;
            return false;
        };
        if bytes.len() > buf.len as usize {
            self.complete(rdev, rid, rq, WcKind::Recv { len: 0, imm }, LOC_LEN_ERR);
            return true;
        }
        // SAFETY: `buf` was posted by `post_recv`, whose caller keeps it
        // valid and unused until this completion; `bytes` is our own copy.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.addr as *mut u8, bytes.len());
        }
        self.complete(
            rdev,
            rid,
            rq,
            WcKind::Recv {
                len: bytes.len() as u32,
                imm,
            },
            0,
        );
        if signaled {
            self.complete(dev, wr_id, qpn, WcKind::Send, 0);
        }
        true
    }
}

impl Fabric for ModelFabric {
    fn port(&self) -> &PortInfo {
        &self.port
    }

    fn create_qp(&mut self) -> Result<LocalQp, String> {
        let mut n = self.net.inner.0.lock().expect("model");
        n.next_qpn += 1;
        let qpn = n.next_qpn + 0x10;
        n.qps.insert(
            qpn,
            Qp {
                dev: self.dev,
                remote: None,
                error: false,
                waiting: VecDeque::new(),
            },
        );
        n.devs[self.dev].qps_made += 1;
        Ok(LocalQp {
            qpn,
            psn: qpn * 7 % (1 << 24),
        })
    }

    fn connect(&mut self, qpn: u32, remote: &RemoteQp) -> Result<(), String> {
        let mut n = self.net.inner.0.lock().expect("model");
        if !n.qps.contains_key(&remote.qpn) {
            return Err(format!("no queue pair {:#x} on the network", remote.qpn));
        }
        let q = n.qps.get_mut(&qpn).ok_or("no such local queue pair")?;
        if q.remote.is_some() {
            return Err("queue pair already connected (RTS)".into());
        }
        q.remote = Some(remote.qpn);
        // Sends that reached this queue pair early are retransmitted.
        n.drain_all();
        Ok(())
    }

    fn fail_qp(&mut self, qpn: u32) -> Result<(), String> {
        let mut n = self.net.inner.0.lock().expect("model");
        match n.qps.get(&qpn) {
            Some(q) if q.dev == self.dev => {
                n.qp_error(qpn);
                Ok(())
            }
            _ => Err(format!("no local queue pair {qpn:#x}")),
        }
    }

    fn create_ud(&mut self, recv_depth: u32) -> Result<u32, String> {
        let mut n = self.net.inner.0.lock().expect("model");
        if n.devs[self.dev].ud.is_some() {
            return Err("this port already has its datagram queue pair".into());
        }
        let _ = recv_depth;
        n.next_qpn += 1;
        let qpn = n.next_qpn + 0x10;
        n.devs[self.dev].ud = Some(qpn);
        Ok(qpn)
    }

    fn ud_ah(&mut self, to: &UdAddr) -> Result<u64, String> {
        let mut n = self.net.inner.0.lock().expect("model");
        let d = &mut n.devs[self.dev];
        d.ahs.push(*to);
        Ok(d.ahs.len() as u64 - 1)
    }

    unsafe fn post_ud_send(
        &mut self,
        ah: u64,
        qpn: u32,
        wr_id: u64,
        sge: Sge,
    ) -> Result<(), String> {
        let (m, c) = &*self.net.inner;
        let mut n = m.lock().expect("model");
        let Some(ud) = n.devs[self.dev].ud else {
            return Err("no datagram queue pair".into());
        };
        let to = *n.devs[self.dev]
            .ahs
            .get(ah as usize)
            .ok_or("no such address handle")?;
        if n.covered(self.dev, sge.addr, sge.len as u64, sge.lkey, false) != Some(false) {
            n.complete(self.dev, wr_id, ud, WcKind::Send, LOC_PROT_ERR);
            return Ok(());
        }
        let mut bytes = vec![0u8; sge.len as usize];
        // SAFETY: the caller keeps the send's memory valid until its
        // completion (`Fabric::post_ud_send`); the model reads it now.
        unsafe {
            std::ptr::copy_nonoverlapping(sge.addr as *const u8, bytes.as_mut_ptr(), bytes.len());
        }
        n.complete(self.dev, wr_id, ud, WcKind::Send, 0);
        let dest = n
            .devs
            .iter()
            .position(|d| d.gid == to.gid && d.ud == Some(qpn) && qpn == to.qpn && !d.dead);
        let lose = n.drop_datagrams > 0;
        n.drop_datagrams = n.drop_datagrams.saturating_sub(1);
        let buf = match dest {
            Some(d) if !lose => n.devs[d].ud_rq.pop_front().map(|b| (d, b)),
            _ => None,
        };
        let Some((d, (rid, buf))) =
            buf.filter(|(_, (_, b))| b.len as usize >= GRH_BYTES + bytes.len())
        else {
            n.datagrams.1 += 1;
            return Ok(());
        };
        // SAFETY: `buf` was posted by `post_ud_recv`, whose caller keeps it
        // valid and unused until this completion (and it is long enough).
        unsafe {
            std::ptr::write_bytes(buf.addr as *mut u8, 0, GRH_BYTES);
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                (buf.addr as *mut u8).add(GRH_BYTES),
                bytes.len(),
            );
        }
        n.datagrams.0 += 1;
        let len = (GRH_BYTES + bytes.len()) as u32;
        n.complete(d, rid, qpn, WcKind::Recv { len, imm: 0 }, 0);
        c.notify_all();
        Ok(())
    }

    unsafe fn post_ud_recv(&mut self, bufs: &[(u64, Sge)]) -> Result<(), String> {
        let mut n = self.net.inner.0.lock().expect("model");
        if n.devs[self.dev].ud.is_none() {
            return Err("no datagram queue pair".into());
        }
        for &(id, sge) in bufs {
            if n.covered(self.dev, sge.addr, sge.len as u64, sge.lkey, false) != Some(false) {
                return Err("datagram buffer outside its host registration".into());
            }
            n.devs[self.dev].ud_rq.push_back((id, sge));
        }
        Ok(())
    }

    fn reg_mr(&mut self, addr: u64, len: u64, remote_read: bool) -> Result<Mr, String> {
        let mut n = self.net.inner.0.lock().expect("model");
        let device = match n.gpu_at(addr, len) {
            // What ibv_reg_mr of a GPU address answers without a peer
            // memory client: get_user_pages() fails on it.
            Some((_, nic)) if !nic.peermem => return Err("Bad address (os error 14)".into()),
            Some(_) => {
                n.registered.device_address += 1;
                true
            }
            None => {
                let held: u64 = n.devs[self.dev]
                    .mrs
                    .values()
                    .filter(|m| !m.device)
                    .map(|m| m.mr.len)
                    .sum();
                if n.pin_limit.is_some_and(|l| held + len > l) {
                    return Err("Cannot allocate memory (os error 12)".into());
                }
                n.registered.host += 1;
                false
            }
        };
        Ok(n.register(self.dev, addr, len, remote_read, device))
    }

    fn reg_mr_window(&mut self, addr: u64, len: u64) -> Result<Mr, String> {
        let mut n = self.net.inner.0.lock().expect("model");
        if n.gpu_at(addr, len).is_some() {
            return Err("Bad address (os error 14)".into());
        }
        n.registered.host += 1;
        let mr = n.register(self.dev, addr, len, true, false);
        if let Some(m) = n.devs[self.dev].mrs.get_mut(&mr.lkey) {
            m.remote_write = true;
        }
        Ok(mr)
    }

    fn reg_dmabuf_mr(
        &mut self,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        iova: u64,
        remote_read: bool,
    ) -> Result<Mr, String> {
        let mut n = self.net.inner.0.lock().expect("model");
        if !n.gpu.as_ref().is_some_and(|(_, nic)| nic.dmabuf) {
            return Err("Operation not supported (os error 95)".into());
        }
        let size = fd
            .try_clone_to_owned()
            .map(std::fs::File::from)
            .and_then(|f| f.metadata())
            .map_err(|e| e.to_string())?
            .len();
        // The kernel's checks: the range lies in the buffer, and the
        // offset and the iova agree within a page. The model's own: the
        // iova is where that offset of the buffer lies in GPU memory.
        let start = n.gpu.as_ref().and_then(|(m, _)| m.dmabuf_start(fd));
        if offset.checked_add(len).is_none_or(|e| e > size)
            || (offset ^ iova) & 0xfff != 0
            || start.is_some_and(|s| s.checked_add(offset) != Some(iova))
            || n.gpu_at(iova, len).is_none()
        {
            return Err("Invalid argument (os error 22)".into());
        }
        n.registered.dmabuf += 1;
        Ok(n.register(self.dev, iova, len, remote_read, true))
    }

    fn probe_dmabuf(&mut self) -> Result<(), String> {
        let n = self.net.inner.0.lock().expect("model");
        if n.gpu.as_ref().is_some_and(|(_, nic)| nic.dmabuf) {
            Ok(())
        } else {
            Err("ibv_reg_dmabuf_mr: Operation not supported (os error 95)".into())
        }
    }

    fn dereg_mr(&mut self, mr: Mr) {
        let mut n = self.net.inner.0.lock().expect("model");
        n.devs[self.dev].mrs.remove(&(mr.handle as u32));
    }

    unsafe fn post_send(&mut self, qpn: u32, wr: &SendWr) -> Result<(), String> {
        let (m, c) = &*self.net.inner;
        let mut n = m.lock().expect("model");
        let q = n.qps.get(&qpn).ok_or("no such queue pair")?;
        if q.dev != self.dev {
            return Err("queue pair of another device".into());
        }
        if q.remote.is_none() {
            return Err("queue pair not connected".into());
        }
        let (wr_id, kind) = match wr {
            SendWr::Send { wr_id, .. } => (*wr_id, WcKind::Send),
            SendWr::Read { wr_id, .. } => (*wr_id, WcKind::Read),
            SendWr::Write { wr_id, .. } => (*wr_id, WcKind::Write),
        };
        if q.error {
            n.complete(self.dev, wr_id, qpn, kind, WC_FLUSH_ERR);
            return Ok(());
        }
        match *wr {
            SendWr::Send { sge, inline, .. } => {
                if !inline
                    && n.covered(self.dev, sge.addr, sge.len as u64, sge.lkey, false) != Some(false)
                {
                    n.finish(self.dev, wr_id, qpn, kind, LOC_PROT_ERR);
                    return Ok(());
                }
                if inline && sge.len > self.port.max_inline {
                    return Err(format!(
                        "{} bytes inline, the limit is {}",
                        sge.len, self.port.max_inline
                    ));
                }
                let mut bytes = vec![0u8; sge.len as usize];
                // SAFETY: the caller keeps the send's memory valid until its
                // completion (`Fabric::post_send`); the model reads it now.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        sge.addr as *const u8,
                        bytes.as_mut_ptr(),
                        bytes.len(),
                    );
                }
                let blocked = !n.qps[&qpn].waiting.is_empty();
                if blocked || !n.deliver(qpn, *wr, &bytes) {
                    n.qps
                        .get_mut(&qpn)
                        .expect("qp")
                        .waiting
                        .push_back((*wr, bytes));
                }
            }
            SendWr::Read {
                local,
                remote_addr,
                rkey,
                ..
            } => {
                let rq = q.remote.expect("connected");
                let rdev = n.qps.get(&rq).map(|r| r.dev);
                let len = local.len as usize;
                let Some(local_dev) =
                    n.covered(self.dev, local.addr, len as u64, local.lkey, false)
                else {
                    n.finish(self.dev, wr_id, qpn, kind, LOC_PROT_ERR);
                    return Ok(());
                };
                let (status, remote_dev) = match rdev {
                    Some(d) if n.devs[d].dead => (RETRY_EXC_ERR, false),
                    Some(d) => match n.covered(d, remote_addr, len as u64, rkey, true) {
                        Some(dev) => (0, dev),
                        None => (REM_ACCESS_ERR, false),
                    },
                    None => (REM_ACCESS_ERR, false),
                };
                if status == 0 {
                    let gpu = n.gpu.as_ref().map(|(m, _)| m);
                    match (remote_dev, local_dev, gpu) {
                        (false, false, _) => {
                            // SAFETY: the source lies in a live registration
                            // of the owner (checked above; its owner keeps
                            // registered memory valid until it
                            // deregisters), the destination in the
                            // reader's, which the caller keeps valid and
                            // unused until this completion.
                            unsafe {
                                std::ptr::copy(
                                    remote_addr as *const u8,
                                    local.addr as *mut u8,
                                    len,
                                );
                            }
                        }
                        (true, true, Some(g)) => g.write(local.addr, &g.read(remote_addr, len)),
                        (true, false, Some(g)) => {
                            let bytes = g.read(remote_addr, len);
                            // SAFETY: as above, for the reader's host
                            // registration.
                            unsafe {
                                std::ptr::copy_nonoverlapping(
                                    bytes.as_ptr(),
                                    local.addr as *mut u8,
                                    len,
                                );
                            }
                        }
                        (false, true, Some(g)) => {
                            let mut bytes = vec![0u8; len];
                            // SAFETY: as above, for the owner's host
                            // registration.
                            unsafe {
                                std::ptr::copy_nonoverlapping(
                                    remote_addr as *const u8,
                                    bytes.as_mut_ptr(),
                                    len,
                                );
                            }
                            g.write(local.addr, &bytes);
                        }
                        (_, _, None) => unreachable!("device registrations need a GPU"),
                    }
                }
                n.finish(self.dev, wr_id, qpn, kind, status);
            }
            SendWr::Write {
                local,
                remote_addr,
                rkey,
                ..
            } => {
                let rq = q.remote.expect("connected");
                let rdev = n.qps.get(&rq).map(|r| r.dev);
                let len = local.len as u64;
                // Windows are host memory: a device registration on either
                // side is a protection error here.
                if n.covered(self.dev, local.addr, len, local.lkey, false) != Some(false) {
                    n.finish(self.dev, wr_id, qpn, kind, LOC_PROT_ERR);
                    return Ok(());
                }
                let status = match rdev {
                    Some(d) if n.devs[d].dead => RETRY_EXC_ERR,
                    Some(d)
                        if n.covered(d, remote_addr, len, rkey, true) == Some(false)
                            && n.devs[d].mrs.get(&rkey).is_some_and(|m| m.remote_write) =>
                    {
                        0
                    }
                    _ => REM_ACCESS_ERR,
                };
                if status == 0 {
                    n.writes += 1;
                    // SAFETY: the destination lies in a live writable
                    // registration of the owner (checked above; its owner
                    // keeps registered memory valid until it deregisters),
                    // the source in the writer's, which the caller keeps
                    // valid and unwritten until this completion.
                    unsafe {
                        std::ptr::copy(
                            local.addr as *const u8,
                            remote_addr as *mut u8,
                            len as usize,
                        );
                    }
                }
                n.finish(self.dev, wr_id, qpn, kind, status);
            }
        }
        c.notify_all();
        Ok(())
    }

    unsafe fn post_recv(&mut self, bufs: &[(u64, Sge)]) -> Result<(), String> {
        let (m, c) = &*self.net.inner;
        let mut n = m.lock().expect("model");
        for &(id, sge) in bufs {
            if n.covered(self.dev, sge.addr, sge.len as u64, sge.lkey, false) != Some(false) {
                return Err("receive buffer outside its host registration".into());
            }
            n.devs[self.dev].srq.push_back((id, sge));
        }
        // Senders held back by RNR retry now.
        n.drain_all();
        c.notify_all();
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<Wc>, max: usize) -> usize {
        let mut n = self.net.inner.0.lock().expect("model");
        let d = &mut n.devs[self.dev];
        let k = d.cq.len().min(max);
        out.extend(d.cq.drain(..k));
        k
    }

    fn wait(&mut self, timeout: Duration) {
        let (m, c) = &*self.net.inner;
        let n = m.lock().expect("model");
        let dev = self.dev;
        let mut n = c
            .wait_timeout_while(n, timeout, |n| {
                n.devs[dev].cq.is_empty() && !n.devs[dev].woken && n.devs[dev].events.is_empty()
            })
            .expect("model")
            .0;
        n.devs[dev].woken = false;
    }

    fn async_event(&mut self) -> Option<(Option<u32>, String)> {
        let mut n = self.net.inner.0.lock().expect("model");
        if n.defer_async {
            return None;
        }
        n.devs[self.dev].events.pop_front()
    }

    fn async_event_now(&mut self) -> Option<(Option<u32>, String)> {
        self.net.inner.0.lock().expect("model").devs[self.dev]
            .events
            .pop_front()
    }

    fn waker(&self) -> Arc<dyn Wake> {
        Arc::new(ModelWaker {
            net: self.net.clone(),
            dev: self.dev,
        })
    }
}

impl Drop for ModelFabric {
    fn drop(&mut self) {
        let mut n = self.net.inner.0.lock().expect("model");
        let dev = self.dev;
        n.devs[dev].srq.clear();
        n.devs[dev].ud_rq.clear();
        n.devs[dev].mrs.clear();
        n.devs[dev].dead = true;
        let mine: Vec<u32> = n
            .qps
            .iter()
            .filter(|(_, q)| q.dev == dev)
            .map(|(&k, _)| k)
            .collect();
        for q in mine {
            n.qps.remove(&q);
        }
    }
}
