//! The verbs the transport needs, as a trait: [`Fabric`] is one opened port
//! of one device (its protection domain, completion queue, shared receive
//! queue and queue pairs). `verbs.rs` implements it over libibverbs (feature
//! `ib`); `model.rs` implements it in memory for the protocol's tests.
//!
//! Everything here is plain data: addresses are numbers, not borrows. What
//! a posted work request may touch, and for how long, is [`Fabric`]'s
//! `# Safety` contract.

use std::sync::Arc;
use std::time::Duration;

use gmpi_btl::Wake;

/// The link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// InfiniBand: addressed by LID.
    Infiniband,
    /// RoCE: addressed by GID (RoCE v2: UDP/IP).
    Ethernet,
}

/// What a port is, as the transport uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Device name (`mlx5_0`, `rxe0`).
    pub device: String,
    /// Port number (from 1).
    pub port: u8,
    /// Link layer.
    pub link: Link,
    /// LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The GID this rank is addressed by, and its table index.
    pub gid: [u8; 16],
    /// Index of [`PortInfo::gid`] in the port's GID table.
    pub gid_index: u8,
    /// Active path MTU, as the verbs enum (1 = 256 B … 5 = 4096 B).
    pub mtu: u8,
    /// Largest message the device sends (`max_msg_sz`).
    pub max_msg: u64,
    /// RDMA READs one queue pair may have outstanding as initiator
    /// (`max_qp_init_rd_atom`).
    pub max_rd_atomic: u8,
    /// Inline data a send may carry (what the queue pairs were created with).
    pub max_inline: u32,
    /// Work requests a send queue holds.
    pub sq_depth: u32,
    /// Buffers the shared receive queue holds.
    pub srq_depth: u32,
}

impl PortInfo {
    /// The path MTU in bytes.
    pub fn mtu_bytes(&self) -> usize {
        128 << self.mtu.clamp(1, 5)
    }
}

/// The address of a queue pair as its peer needs it (the card's content).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteQp {
    /// Queue pair number.
    pub qpn: u32,
    /// First packet sequence number the peer sends with.
    pub psn: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// GID (RoCE, or InfiniBand across subnets).
    pub gid: [u8; 16],
    /// Path MTU (verbs enum).
    pub mtu: u8,
}

/// Where a port's datagram (UD) queue pair is reached: what a rank's card
/// says, for the connection messages that set up RC queue pairs on first
/// use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdAddr {
    /// The UD queue pair's number.
    pub qpn: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// GID (RoCE, or InfiniBand across subnets).
    pub gid: [u8; 16],
}

/// The Q_Key of every gmpi datagram queue pair.
pub const UD_QKEY: u32 = 0x474d_5049;

/// Bytes a UD receive buffer holds before the datagram: room for the
/// Global Routing Header, which verbs always reserves there.
pub const GRH_BYTES: usize = 40;

/// A local queue pair, as [`Fabric::create_qp`] made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalQp {
    /// Its number.
    pub qpn: u32,
    /// The first packet sequence number it sends with.
    pub psn: u32,
}

/// A memory registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Key for local work requests.
    pub lkey: u32,
    /// Key a peer reads it with (remote read was asked for), else 0.
    pub rkey: u32,
    /// The fabric's handle, for [`Fabric::dereg_mr`].
    pub handle: u64,
}

/// A scatter/gather element: local registered memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// The registration's local key (ignored for inline data).
    pub lkey: u32,
}

/// A work request on a send queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendWr {
    /// A SEND with immediate data.
    Send {
        /// Reported back in the completion.
        wr_id: u64,
        /// The bytes (copied at post time when `inline`).
        sge: Sge,
        /// The immediate data.
        imm: u32,
        /// Carry the bytes in the work request itself.
        inline: bool,
        /// Ask for a completion (unsignalled ones complete silently, in
        /// order, before the next signalled one).
        signaled: bool,
    },
    /// An RDMA READ of the peer's memory into `local` (always signalled).
    Read {
        /// Reported back in the completion.
        wr_id: u64,
        /// Where the bytes land.
        local: Sge,
        /// Where they are read from, in the peer's address space.
        remote_addr: u64,
        /// The peer's registration key.
        rkey: u32,
    },
    /// An RDMA WRITE of `local` into the peer's memory (always signalled;
    /// its completion means the peer's port acknowledged the bytes).
    Write {
        /// Reported back in the completion.
        wr_id: u64,
        /// The bytes written.
        local: Sge,
        /// Where they land, in the peer's address space.
        remote_addr: u64,
        /// The peer's registration key (of memory registered writable:
        /// [`Fabric::reg_mr_window`]).
        rkey: u32,
    },
}

/// What a completion says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcKind {
    /// A SEND finished.
    Send,
    /// An RDMA READ finished.
    Read,
    /// An RDMA WRITE finished.
    Write,
    /// A SEND arrived into a shared-receive-queue buffer.
    Recv {
        /// Bytes written into the buffer.
        len: u32,
        /// Its immediate data.
        imm: u32,
    },
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The work request's id.
    pub wr_id: u64,
    /// The local queue pair it belongs to.
    pub qpn: u32,
    /// What finished (meaningless when `status` is an error: the kind of a
    /// failed completion is not reported by every device).
    pub kind: WcKind,
    /// 0 for success, else the verbs status (`ibv_wc_status`).
    pub status: u32,
}

/// The verbs status of a work request flushed because its queue pair went
/// to the error state (`IBV_WC_WR_FLUSH_ERR`).
pub const WC_FLUSH_ERR: u32 = 5;

/// The name of a verbs completion status, for messages.
pub fn wc_status_str(s: u32) -> &'static str {
    match s {
        0 => "success",
        1 => "local length error",
        2 => "local QP operation error",
        3 => "local EE context operation error",
        4 => "local protection error",
        5 => "work request flushed",
        6 => "memory window bind error",
        7 => "bad response",
        8 => "local access error",
        9 => "remote invalid request",
        10 => "remote access error",
        11 => "remote operation error",
        12 => "transport retry counter exceeded",
        13 => "RNR retry counter exceeded",
        14 => "local RDD violation",
        15 => "remote invalid RD request",
        16 => "remote aborted",
        17 => "invalid EE context number",
        18 => "invalid EE context state",
        19 => "fatal error",
        20 => "response timeout",
        _ => "general error",
    }
}

/// One opened port: protection domain, one completion queue, one shared
/// receive queue and its queue pairs.
///
/// # Safety
/// An implementation reads and writes the memory that posted work requests
/// name, until their completion (a SEND's `sge` until the send completes,
/// or at post time when inline; a READ's `local` until it completes; a
/// receive buffer until its completion). The unsafe methods below pass
/// that duty to their callers.
pub trait Fabric: Send + std::fmt::Debug {
    /// The port.
    fn port(&self) -> &PortInfo;

    /// Create an RC queue pair on the shared receive queue (state INIT).
    fn create_qp(&mut self) -> Result<LocalQp, String>;

    /// Create this port's datagram (UD) queue pair, ready to send and
    /// receive, with a receive queue of its own of `recv_depth` buffers
    /// ([`Fabric::post_ud_recv`]) and its completions on the common
    /// completion queue; its number. At most one per fabric.
    fn create_ud(&mut self, recv_depth: u32) -> Result<u32, String>;

    /// An address handle for datagrams to `to` (a number for
    /// [`Fabric::post_ud_send`], freed with the fabric).
    fn ud_ah(&mut self, to: &UdAddr) -> Result<u64, String>;

    /// Send the bytes of `sge` as one datagram, signalled, to UD queue pair
    /// `qpn` through address handle `ah`, with Q_Key [`UD_QKEY`]. Datagrams
    /// may be lost.
    ///
    /// # Safety
    /// As [`Fabric::post_send`]: `sge`'s memory stays valid until the
    /// completion.
    unsafe fn post_ud_send(
        &mut self,
        ah: u64,
        qpn: u32,
        wr_id: u64,
        sge: Sge,
    ) -> Result<(), String>;

    /// Post receive buffers to the UD queue pair; a datagram lands
    /// [`GRH_BYTES`] into its buffer, and its completion's length counts
    /// those bytes too.
    ///
    /// # Safety
    /// As [`Fabric::post_recv`].
    unsafe fn post_ud_recv(&mut self, bufs: &[(u64, Sge)]) -> Result<(), String>;

    /// Move queue pair `qpn` to ready-to-send towards `remote`
    /// (INIT → RTR → RTS).
    fn connect(&mut self, qpn: u32, remote: &RemoteQp) -> Result<(), String>;

    /// Move queue pair `qpn` to the error state: its outstanding work
    /// requests complete flushed (`IBV_WC_WR_FLUSH_ERR`) at once instead of
    /// being retried towards a peer that is gone, and nothing more leaves
    /// it (a later post completes flushed too).
    fn fail_qp(&mut self, qpn: u32) -> Result<(), String>;

    /// Register `len` bytes at `addr`; readable by peers when `remote_read`.
    fn reg_mr(&mut self, addr: u64, len: u64, remote_read: bool) -> Result<Mr, String>;

    /// Register `len` bytes of host memory at `addr` that peers may read
    /// and write (RDMA READ and WRITE): a one-sided window's memory.
    fn reg_mr_window(&mut self, addr: u64, len: u64) -> Result<Mr, String>;

    /// Register `len` bytes at `offset` in dma-buf `fd` (device memory the
    /// gpu layer exported), addressed in work requests and by peers as
    /// `iova` (the device address, so a device registration is used like a
    /// host one); readable by peers when `remote_read`
    /// (`ibv_reg_dmabuf_mr`). The default: not supported.
    fn reg_dmabuf_mr(
        &mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: u64,
        iova: u64,
        remote_read: bool,
    ) -> Result<Mr, String> {
        let _ = (fd, offset, len, iova, remote_read);
        Err("this fabric cannot register dma-bufs".into())
    }

    /// Whether this device registers dma-bufs: `Ok` where
    /// [`Fabric::reg_dmabuf_mr`] can work, else why not. (Over verbs,
    /// `ibv_reg_dmabuf_mr` with fd −1 answers `EBADF` where the provider
    /// and the kernel support it, `EOPNOTSUPP` or `ENOSYS` where not.)
    fn probe_dmabuf(&mut self) -> Result<(), String> {
        Err("this fabric cannot register dma-bufs".into())
    }

    /// Deregister.
    fn dereg_mr(&mut self, mr: Mr);

    /// Post one work request on queue pair `qpn`'s send queue.
    ///
    /// # Safety
    /// The memory the request names stays valid, and (for a READ) is not
    /// otherwise used, until its completion (a signalled one, or the next
    /// signalled one of that queue pair).
    unsafe fn post_send(&mut self, qpn: u32, wr: &SendWr) -> Result<(), String>;

    /// Post receive buffers to the shared receive queue (`wr_id` and memory).
    ///
    /// # Safety
    /// Each buffer stays valid and unused until its completion, or until
    /// the fabric is dropped.
    unsafe fn post_recv(&mut self, bufs: &[(u64, Sge)]) -> Result<(), String>;

    /// Append at most `max` completions to `out`; how many.
    fn poll(&mut self, out: &mut Vec<Wc>, max: usize) -> usize;

    /// Block until a completion may be ready, [`Fabric::waker`] is woken, or
    /// `timeout` passes. Returns at once if a completion is already there
    /// (spurious returns are allowed).
    fn wait(&mut self, timeout: Duration);

    /// Interrupts [`Fabric::wait`] from any thread.
    fn waker(&self) -> Arc<dyn Wake>;

    /// The next fatal asynchronous event (port down, queue pair fatal,
    /// device fatal), as a sentence, and the queue pair it names (if any).
    /// [`Fabric::wait`] returns when one is pending.
    fn async_event(&mut self) -> Option<(Option<u32>, String)> {
        None
    }

    /// [`Fabric::async_event`], reading the event source now even where
    /// that is otherwise done only now and then (a completion error may be
    /// the first sign of a port going down, whose event says more).
    fn async_event_now(&mut self) -> Option<(Option<u32>, String)> {
        self.async_event()
    }
}
