//! gmpi-btl: the byte transfer layer contract.
//!
//! A *btl* moves opaque fragments between ranks. It knows nothing of tags,
//! matching or requests (that is the pml's job); the pml only ever sees this
//! trait. One progress driver per process owns every btl and is the only code
//! that calls them.
//!
//! File map:
//! - `lib.rs`: the [`Btl`] trait, [`Capabilities`], [`Submit`], [`Event`],
//!   [`MemDesc`] (a remote-memory descriptor carried inside rendezvous headers)
//!   and [`BtlError`].
//! - `loopback.rs`: the `self` transport (a rank sending to itself).
//! - `sim.rs`: a deterministic simulated fabric of N ranks for tests, with
//!   injectable back-pressure, reordering between transports and peer failure.
//! - `conformance.rs` (feature `conformance`): the checks every btl's tests
//!   run against it, through this trait only (`tests/conformance.rs` runs
//!   them against `sim` and `loopback`).
//!
//! Contract, in short:
//! - [`Btl::send`] takes a fragment as a gather list of byte slices and returns
//!   [`Submit::Done`] (the bytes are taken, the caller may reuse its memory),
//!   [`Submit::Queued`] (accepted; the caller keeps the memory valid until
//!   [`Event::SendComplete`] with the same token) or [`Submit::NoResource`]
//!   (nothing was taken; retry later, in order — back-pressure is a status, not
//!   an error). Token 0 means the caller cannot wait for a completion (the
//!   inline send path): the btl must then take the bytes now (`Done`) or
//!   refuse (`NoResource`), never answer `Queued`.
//! - Fragments between one pair of ranks on one btl arrive in the order they
//!   were submitted. Nothing is promised across two btls.
//! - [`Btl::get`] reads `dst.len` bytes from a peer's registered memory
//!   ([`MemDesc`], produced by the peer's [`Btl::register`]) into local
//!   memory ([`LocalMem`], an address and a length, not a borrow). It
//!   answers `Done` (the bytes are there) or `Queued`: the bytes then land
//!   until [`Event::GetComplete`] or [`Event::GetFailed`] with the same
//!   token, and the caller keeps `dst`'s memory valid and untouched until
//!   then (shm's cooperative gets, RDMA reads). That outlives any borrow the
//!   call could take, so `get` is an `unsafe fn` whose `# Safety` section is
//!   this contract. The owner of the memory may take part in a queued get
//!   from its own [`Btl::progress`] (shm: it writes part of it), so its
//!   registered memory must stay valid until the pml's FIN, as it does.
//! - One-sided (btls with [`Capabilities::put`], RDMA): a window's memory
//!   is exposed by [`Btl::register_window`] for the window's life; peers
//!   read it by [`Btl::get`] and write it by [`Btl::put`] (same contract,
//!   the other way: the source stays valid and unwritten until
//!   [`Event::PutComplete`] or [`Event::PutFailed`]), with no call of the
//!   owner.
//! - [`Btl::progress`] hands received fragments and completions to a callback;
//!   a fragment's bytes are only valid during that callback.
//! - Streamed fragments: a fragment submitted with [`Btl::send_stream`] (the
//!   pml's rendezvous chunks) may be delivered by a btl that reads a byte
//!   stream (tcp) as [`Event::FragStream`] before its body has arrived: the
//!   receiver reads the body through [`StreamBody`] straight into its
//!   destination, with no copy through the btl's buffer. Other btls deliver
//!   it as an ordinary [`Event::Frag`].
//! - [`Btl::wait`] blocks until an event may be ready or the timeout passes,
//!   and returns at once if one is already pending: idle ranks sleep instead of
//!   spinning.
//! - Sleeping across transports: a rank reached through several btls sleeps
//!   in one of them (the *sleeper*, whose [`Btl::waker`] interrupts its
//!   `wait` from any thread) while each other btl *watches* for it
//!   ([`Btl::watch`] … [`Btl::unwatch`]): it calls the sleeper's [`Wake`] as
//!   soon as it may have an event (btl-tcp: a helper thread blocked in
//!   `poll` on its epoll descriptor; a btl where nothing arrives from
//!   outside, such as `self`, has nothing to do). The driver picks the
//!   sleeper; a btl need not know which others exist.

// `unsafe` appears only where the trait's get and put methods are declared
// `unsafe fn` (and where the test double implements them), plus the one block
// with which the default `get_as` hands its caller's contract on to `get`.
#![deny(unsafe_code)]

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod loopback;
pub mod sim;

/// `dst.copy_from_slice(src)`, with copies of at most 32 bytes done inline
/// by (overlapping) fixed-size moves instead of a call to `memcpy`: on the
/// small-message path the call costs more than the copy.
///
/// # Panics
/// If the lengths differ (as `copy_from_slice`).
#[inline(always)]
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    assert_eq!(dst.len(), n, "copy_bytes: length mismatch");
    fn mv<const K: usize>(dst: &mut [u8], src: &[u8], at: usize) {
        let v: [u8; K] = src[at..at + K].try_into().expect("K bytes");
        dst[at..at + K].copy_from_slice(&v);
    }
    match n {
        0 => {}
        1..=3 => {
            // First, middle and last byte: every byte of 1, 2 or 3.
            dst[0] = src[0];
            dst[n / 2] = src[n / 2];
            dst[n - 1] = src[n - 1];
        }
        4..=7 => {
            mv::<4>(dst, src, 0);
            mv::<4>(dst, src, n - 4);
        }
        8..=15 => {
            mv::<8>(dst, src, 0);
            mv::<8>(dst, src, n - 8);
        }
        16..=32 => {
            mv::<16>(dst, src, 0);
            mv::<16>(dst, src, n - 16);
        }
        _ => dst.copy_from_slice(src),
    }
}

use std::sync::Arc;
use std::time::Duration;

/// A rank in the job (`MPI_COMM_WORLD` numbering).
pub type Rank = u32;

/// What a transport can do, computed at start-up from what actually works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Short name, used in logs (`"shm"`, `"self"`, `"tcp"`).
    pub name: &'static str,
    /// Largest payload the pml should send eagerly (header excluded).
    pub eager_limit: usize,
    /// Largest fragment (header and payload together) [`Btl::send`] accepts.
    pub max_send_size: usize,
    /// [`Btl::get`] is available (single-copy read of peer memory).
    pub get: bool,
    /// [`Btl::register_window`] and [`Btl::put`] are available: one-sided
    /// writes (and reads, by [`Btl::get`]) of memory a peer exposed for a
    /// window, with no call on the peer's side (RDMA WRITE and READ).
    pub put: bool,
    /// When several btls reach a peer, the highest exclusivity wins.
    pub exclusivity: u32,
    /// Smallest message for which a `get` rendezvous beats eager/pipelined.
    pub get_threshold: usize,
    /// The peers this btl reaches share this node's GPUs: device memory may
    /// travel by CUDA IPC (the pml's `rndv/cuda-ipc`).
    pub cuda_ipc: bool,
    /// How [`Btl::register_device`] and [`Btl::get_device`] register GPU
    /// memory, where the NIC can read and write it directly (GPUDirect
    /// RDMA): device memory then travels by `get` (`rndv/gpudirect`).
    /// `None`: this btl cannot reach device memory.
    pub gpudirect: Option<DeviceReg>,
}

/// How a btl registers device memory for GPUDirect RDMA
/// ([`Capabilities::gpudirect`]); it tells the driver whether to export a
/// dma-buf of the memory first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceReg {
    /// Through a dma-buf of the memory, exported by the gpu layer
    /// (`cuMemGetHandleForAddressRange`) and registered by the NIC
    /// (`ibv_reg_dmabuf_mr`): the upstream kernel path.
    DmaBuf,
    /// By the device address itself, where a kernel module lets the NIC
    /// driver pin GPU memory (`ibv_reg_mr` with `nvidia_peermem` loaded).
    Address,
}

impl DeviceReg {
    /// Its name in logs and the doctor's report.
    pub fn name(self) -> &'static str {
        match self {
            DeviceReg::DmaBuf => "dma-buf",
            DeviceReg::Address => "nvidia_peermem",
        }
    }
}

/// A dma-buf export of device memory, handed to a btl for one registration
/// (the NIC keeps its own reference to the buffer; the btl drops, and so
/// closes, the descriptor after registering).
#[derive(Debug)]
pub struct DmaBuf {
    /// The dma-buf.
    pub fd: std::os::fd::OwnedFd,
    /// Where the exported address lies in it (the export covers whole GPU
    /// pages around the range).
    pub offset: u64,
}

/// The device allocation (`cuMemAlloc`, a pool's or a VMM allocation) that
/// memory lent to [`Btl::register_device`] or [`Btl::get_device`] lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAlloc {
    /// Its first byte.
    pub base: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its buffer id (`CU_POINTER_ATTRIBUTE_BUFFER_ID`), checked against
    /// the driver for this call: unique to the allocation for the life of
    /// the process, so an address freed and allocated again comes with a
    /// new one. A btl that keeps a registration past its use (a cache)
    /// serves a later request from it only under the same id.
    pub buffer_id: u64,
}

/// Device memory lent to [`Btl::register_device`] or [`Btl::get_device`]:
/// the allocation it lies in and, for [`DeviceReg::DmaBuf`], a way to export
/// any part of that allocation as a dma-buf, called only when the btl
/// registers (a registration it kept serves without one).
pub struct DeviceMem<'a> {
    /// The allocation.
    pub alloc: DeviceAlloc,
    /// Exports `len` bytes at `addr` (inside [`DeviceMem::alloc`]) as a
    /// dma-buf; `None` where the memory is registered by address. An
    /// error says why the export failed.
    pub export: Option<&'a mut dyn FnMut(u64, u64) -> Result<DmaBuf, String>>,
}

impl std::fmt::Debug for DeviceMem<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMem")
            .field("alloc", &self.alloc)
            .field("export", &self.export.is_some())
            .finish()
    }
}

/// How the receiver of a [`Btl::get_as`] uses the copy, which decides
/// whether the owner of the memory should help with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pull {
    /// Nothing special: a plain [`Btl::get`], helped where the transport
    /// can.
    Helped,
    /// The caller reads the data as soon as it lands (a reduction's
    /// operand): copied alone, into this process's cache, rather than with
    /// the owner's help. (The shm btl's cooperative copy would leave the
    /// owner's share in the owner's cache, from where the reduction then
    /// pulls it line by line, and the owner's next share must pull those
    /// lines back: at 256 KiB that made `MPI_Reduce` twice as slow.)
    Alone,
    /// The owner is itself pulling messages of this rank (traffic both
    /// ways): neither side has idle time to lend, so the copy is made
    /// alone at every size. (The shm btl's cooperative copy only spreads
    /// both copies over both caches then: `gb_bibw` np 2, 256 KiB to 2 MiB,
    /// moved 10 % fewer bytes a second with it.)
    Unhelped,
}

/// Outcome of submitting an operation to a btl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submit {
    /// Finished: the btl has taken (or read) every byte.
    Done,
    /// Accepted; completion is reported later by an event with the same token.
    Queued,
    /// Nothing was taken because a resource is exhausted; retry later.
    NoResource,
}

/// A remote-memory descriptor: enough for a peer's [`Btl::get`] to read the
/// memory. Its meaning is the btl's own (for shared memory: address and pid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemDesc {
    /// Base address in the owner's address space.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Btl-specific key (pid for CMA, rkey for verbs).
    pub key: u64,
}

impl MemDesc {
    /// Encoded size on the wire.
    pub const WIRE_LEN: usize = 24;

    /// Append the little-endian wire form.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.addr.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.key.to_le_bytes());
    }

    /// Decode from the first [`Self::WIRE_LEN`] bytes; `None` if too short.
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < Self::WIRE_LEN {
            return None;
        }
        let f = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(Self {
            addr: f(0),
            len: f(8),
            key: f(16),
        })
    }
}

/// Local memory that a [`Btl::get`] writes: `len` bytes at `addr` in this
/// process's address space (in the simulated fabric, an address of the
/// rank's [`sim::SimMemory`]).
///
/// A plain description, not a borrow: building one is safe, lending it to a
/// get is not (see [`Btl::get`]'s `# Safety`). A queued get keeps writing
/// after the call returns, which no Rust borrow taken by the call could
/// express.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LocalMem {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
}

impl LocalMem {
    /// The memory of `buf` (its address and length; the borrow ends here).
    pub fn of(buf: &mut [u8]) -> Self {
        Self {
            addr: buf.as_mut_ptr() as u64,
            len: buf.len(),
        }
    }
}

/// Something a btl reports from [`Btl::progress`].
#[derive(Debug)]
pub enum Event<'a> {
    /// A fragment arrived from `peer`; the bytes are valid during the callback only.
    Frag {
        /// Sender.
        peer: Rank,
        /// The whole fragment as the sender submitted it (gather list joined).
        data: &'a [u8],
    },
    /// A fragment sent with [`Btl::send_stream`] whose body is still
    /// arriving. `head` holds its first `min(len, STREAM_HEAD)` bytes;
    /// `body` yields the body from byte `taken` on (`taken` is 0 at the
    /// first delivery, when at least `head.len()` bytes can be read at once,
    /// and the bytes read in earlier deliveries after that). The receiver
    /// reads until the body is complete or a read comes up short (nothing
    /// more has arrived yet: the btl delivers the fragment again, with the
    /// new `taken`, when more has). What a receiver leaves unread otherwise
    /// is discarded, and so is the rest of that fragment. Each fragment
    /// counts once, at its completion, in [`Btl::progress`]'s total.
    FragStream {
        /// Sender.
        peer: Rank,
        /// The body's first bytes.
        head: &'a [u8],
        /// The body's length.
        len: usize,
        /// Body bytes already read in earlier deliveries.
        taken: usize,
        /// The rest of the body.
        body: &'a mut dyn StreamBody,
    },
    /// A [`Submit::Queued`] send finished; its memory may be reused.
    SendComplete {
        /// The token given to [`Btl::send`].
        token: u64,
    },
    /// A [`Submit::Queued`] get finished; the bytes are in place.
    GetComplete {
        /// The token given to [`Btl::get`].
        token: u64,
    },
    /// A queued get failed; the pml falls back to a copy protocol.
    GetFailed {
        /// The token given to [`Btl::get`].
        token: u64,
        /// Why.
        error: BtlError,
    },
    /// A [`Submit::Queued`] put finished: the bytes are in the peer's
    /// memory (its transport acknowledged them), and the source may be
    /// reused.
    PutComplete {
        /// The token given to [`Btl::put`].
        token: u64,
    },
    /// A queued put failed; what reached the peer's memory is unknown.
    PutFailed {
        /// The token given to [`Btl::put`].
        token: u64,
        /// Why.
        error: BtlError,
    },
    /// The peer is gone (its process died or its link dropped).
    PeerFailed {
        /// The peer.
        peer: Rank,
    },
}

/// Bytes of [`Event::FragStream`] at the front of a streamed fragment.
pub const STREAM_HEAD: usize = 64;

/// The body of a streamed fragment ([`Event::FragStream`]).
pub trait StreamBody: std::fmt::Debug {
    /// Move the next bytes of the body into `dst` (at most what is left of
    /// it), without blocking. Returns how many; fewer than
    /// `min(dst.len(), left)` means nothing more has arrived yet.
    fn read(&mut self, dst: &mut [u8]) -> usize;
}

/// Errors of the transport layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BtlError {
    /// The peer is not reachable through this btl.
    #[error("rank {0} is not reachable through this transport")]
    Unreachable(Rank),
    /// The peer has failed.
    #[error("rank {0} has failed")]
    PeerFailed(Rank),
    /// The fragment exceeds `max_send_size`.
    #[error("fragment of {len} bytes exceeds the transport's limit of {max}")]
    TooLarge {
        /// Submitted size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The operation is not supported by this btl.
    #[error("operation not supported by the {0} transport")]
    Unsupported(&'static str),
    /// A single-copy read failed (for example ptrace permission denied).
    #[error("remote read failed: {0}")]
    GetFailed(String),
    /// A one-sided write ([`Btl::put`]) failed.
    #[error("remote write failed: {0}")]
    PutFailed(String),
    /// An operating-system error.
    #[error("{0}")]
    Os(String),
}

/// Interrupts a rank's sleep in a btl's [`Btl::wait`], from any thread
/// (see [`Btl::waker`]).
pub trait Wake: Send + Sync {
    /// Make a `wait` in progress return soon, or the next one return at
    /// once. Cheap enough to call spuriously; never blocks.
    fn wake(&self);
}

/// A transport. See the crate documentation for the contract.
pub trait Btl: Send {
    /// What this btl can do.
    fn caps(&self) -> &Capabilities;

    /// Whether `peer` is reachable through this btl.
    fn reaches(&self, peer: Rank) -> bool;

    /// Submit one fragment (the concatenation of `parts`) to `peer`.
    fn send(&mut self, peer: Rank, parts: &[&[u8]], token: u64) -> Result<Submit, BtlError>;

    /// [`Btl::send`] of a fragment whose receiver may take its body as it
    /// arrives ([`Event::FragStream`]); the default sends it as any other.
    fn send_stream(&mut self, peer: Rank, parts: &[&[u8]], token: u64) -> Result<Submit, BtlError> {
        self.send(peer, parts, token)
    }

    /// Describe local memory so that a peer can [`Btl::get`] it; `None` when
    /// this btl cannot expose it.
    fn register(&mut self, addr: u64, len: u64) -> Option<MemDesc> {
        let _ = (addr, len);
        None
    }

    /// Describe device memory so that a peer can [`Btl::get`] it straight
    /// from the GPU (GPUDirect RDMA). `dev` names the allocation; with
    /// [`DeviceReg::DmaBuf`] the driver lends the gpu layer's dma-buf
    /// export, for a verbs btl's `ibv_reg_dmabuf_mr`; with
    /// [`DeviceReg::Address`] it lends none and the btl registers the
    /// device address (`ibv_reg_mr` where `nvidia_peermem` is loaded).
    /// Only btls that set
    /// [`Capabilities::gpudirect`] implement it; `None` otherwise, or when
    /// the registration fails (the pml then stages the message). The
    /// descriptor is released by [`Btl::deregister`], like a host one.
    fn register_device(&mut self, addr: u64, len: u64, dev: DeviceMem<'_>) -> Option<MemDesc> {
        let _ = (addr, len, dev);
        None
    }

    /// The rendezvous that [`Btl::register`] described `desc` for is over
    /// (the peer's FIN came, or the send failed): the btl may let go of
    /// the registration. Called once per `Some` that `register` returned.
    /// The default does nothing (shm's descriptors hold nothing).
    fn deregister(&mut self, desc: &MemDesc) {
        let _ = desc;
    }

    /// Describe local memory that peers may both read ([`Btl::get`]) and
    /// write ([`Btl::put`]) until [`Btl::deregister`]: a one-sided
    /// window's memory, exposed for the window's life. Only btls that set
    /// [`Capabilities::put`] implement it; `None` otherwise or when the
    /// registration fails (the window then reaches this memory by active
    /// messages).
    fn register_window(&mut self, addr: u64, len: u64) -> Option<MemDesc> {
        let _ = (addr, len);
        None
    }

    /// Write the `src.len` bytes at `src` at `offset` within the peer's
    /// memory `remote` (which the peer described by
    /// [`Btl::register_window`]). Answers [`Submit::Done`] (the bytes are
    /// in the peer's memory), [`Submit::Queued`] (they are once
    /// [`Event::PutComplete`] with `token` comes, or not, with
    /// [`Event::PutFailed`]) or an error (nothing was written; a write
    /// outside `remote` is one). The default: [`BtlError::Unsupported`].
    ///
    /// # Safety
    /// `src` is valid for reads of `src.len` bytes, and nothing writes it
    /// from the call until the put completes: when the call returns for
    /// `Done` or an error; for `Queued`, when [`Btl::progress`] reports
    /// `PutComplete` or `PutFailed` with the same `token`, and the caller
    /// keeps the memory valid (allocated, not freed or unmapped) until
    /// then: the btl reads it meanwhile.
    #[allow(unsafe_code)]
    unsafe fn put(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        src: LocalMem,
        token: u64,
    ) -> Result<Submit, BtlError> {
        let _ = (peer, remote, offset, src, token);
        Err(BtlError::Unsupported(self.caps().name))
    }

    /// Read `dst.len` bytes at `offset` within the peer's memory `remote`
    /// into `dst`. Answers [`Submit::Done`] (the bytes are in place),
    /// [`Submit::Queued`] (they land until [`Event::GetComplete`] or
    /// [`Event::GetFailed`] with `token`) or an error (nothing to wait for;
    /// a read outside `remote` is one). The default: [`BtlError::Unsupported`].
    ///
    /// # Safety
    /// `dst` is valid for writes of `dst.len` bytes, and nothing else reads
    /// or writes it from the call until the get completes: when the call
    /// returns for `Done` or an error; for `Queued`, when [`Btl::progress`]
    /// reports `GetComplete` or `GetFailed` with the same `token`, and the
    /// caller keeps the memory valid (allocated, not freed or unmapped)
    /// until then. The btl, or the peer that owns `remote` (shm's
    /// cooperative get), writes it meanwhile.
    #[allow(unsafe_code)]
    unsafe fn get(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
    ) -> Result<Submit, BtlError> {
        let _ = (peer, remote, offset, dst, token);
        Err(BtlError::Unsupported(self.caps().name))
    }

    /// [`Btl::get`] into device memory (GPUDirect RDMA): `dst` is GPU
    /// memory, which the btl registers as [`Capabilities::gpudirect`] says
    /// (`dev`: its allocation, and the export for [`DeviceReg::DmaBuf`]).
    /// A registration that fails is an error, and the pml falls back to a
    /// copy protocol. The default: [`BtlError::Unsupported`].
    ///
    /// # Safety
    /// As for [`Btl::get`], for the device memory `dst`.
    #[allow(unsafe_code)]
    unsafe fn get_device(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        dev: DeviceMem<'_>,
        token: u64,
    ) -> Result<Submit, BtlError> {
        let _ = (peer, remote, offset, dst, dev, token);
        Err(BtlError::Unsupported(self.caps().name))
    }

    /// [`Btl::get`] with what the caller knows of how the copy is used
    /// ([`Pull`]), for a transport whose get can be helped by the owner of
    /// `remote` (the shm btl's cooperative copy). The default is
    /// [`Btl::get`], whatever `pull` says.
    ///
    /// # Safety
    /// As for [`Btl::get`].
    #[allow(unsafe_code)]
    unsafe fn get_as(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
        pull: Pull,
    ) -> Result<Submit, BtlError> {
        let _ = pull;
        // SAFETY: our caller's contract is the one `get` asks for.
        unsafe { self.get(peer, remote, offset, dst, token) }
    }

    /// Report what has happened since the last call. Returns how many events
    /// were delivered.
    fn progress(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> usize;

    /// Block until an event may be ready or `timeout` passes; return at once if
    /// one is pending. Spurious wake-ups are allowed.
    fn wait(&mut self, timeout: Duration);

    /// Whether this btl only ever has events because of this rank's own
    /// submissions on it (the loopback btl: a fragment to itself). The
    /// driver then skips its [`Btl::progress`] until something is submitted
    /// and again once a pass finds nothing. Default `false`. Asked once,
    /// when the driver is built.
    fn passive(&self) -> bool {
        false
    }

    /// A handle whose [`Wake::wake`], called from any thread, makes this
    /// btl's [`Btl::wait`] in progress return (or the next one return at
    /// once). `None` (the default): its wait cannot be interrupted, so a rank
    /// with several btls cannot sleep in it while others watch. Called at
    /// most once per btl, when the driver is built.
    fn waker(&self) -> Option<Arc<dyn Wake>> {
        None
    }

    /// Whether [`Btl::watch`] works (default `false`).
    fn can_watch(&self) -> bool {
        false
    }

    /// The rank is about to sleep for at most `timeout` in another btl's
    /// [`Btl::wait`], which `wake` interrupts. From now until
    /// [`Btl::unwatch`], call `wake` (from any thread) as soon as this btl
    /// may have an event, including failures and room again for a refused
    /// send. Returns how long the rank may sleep as far as this btl is
    /// concerned: zero when an event is already pending (the rank then does
    /// not sleep), less than `timeout` for a deadline of its own. Only
    /// called where [`Btl::can_watch`] holds; `unwatch` always follows.
    /// Spurious wakes are allowed; a lost one is not.
    fn watch(&mut self, wake: &Arc<dyn Wake>, timeout: Duration) -> Duration {
        let _ = (wake, timeout);
        Duration::ZERO
    }

    /// The sleep that [`Btl::watch`] was for is over (the rank may be about
    /// to spin); stop calling `wake`. Must be cheap: no system call.
    fn unwatch(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::copy_bytes;

    #[test]
    fn copy_bytes_copies_every_length_exactly() {
        let src: Vec<u8> = (1..=80u8).collect();
        for n in 0..=70 {
            for at in [0usize, 1, 3, 7] {
                let mut dst = [0xeeu8; 80];
                copy_bytes(&mut dst[at..at + n], &src[..n]);
                assert!(
                    dst[..at].iter().all(|&b| b == 0xee),
                    "before, n={n} at={at}"
                );
                assert_eq!(&dst[at..at + n], &src[..n], "n={n} at={at}");
                assert!(
                    dst[at + n..].iter().all(|&b| b == 0xee),
                    "after, n={n} at={at}"
                );
            }
        }
    }

    #[test]
    #[should_panic(expected = "length mismatch")]
    fn copy_bytes_refuses_different_lengths() {
        copy_bytes(&mut [0u8; 4], &[1u8; 5]);
    }
}
