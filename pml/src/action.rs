//! What the pml asks its driver to do, and how each is answered.
//!
//! After any input, the driver drains [`crate::Pml::poll_action`] and
//! executes every action in order. Each action says which input reports its
//! end:
//!
//! | action | the driver | answered with |
//! |---|---|---|
//! | [`Action::Send`] | submits header + payload on the btl (reading device payloads through the gpu layer) | [`crate::Pml::handle_send_done`] (token ≠ 0), or [`crate::Pml::handle_refused`] when the btl has no resources |
//! | [`Action::Register`] | registers host memory with the btl, or device memory for GPUDirect | [`crate::Pml::handle_registered`] |
//! | [`Action::IpcExport`] | makes the CUDA IPC descriptor of device memory | [`crate::Pml::handle_ipc_exported`] |
//! | [`Action::Get`] | reads the peer's registered memory with the btl's get | [`crate::Pml::handle_get_done`] / [`crate::Pml::handle_get_failed`] (or `handle_refused`) |
//! | [`Action::IpcCopy`] | opens (cached) the peer's IPC handle and copies from it | [`crate::Pml::handle_get_done`] / [`crate::Pml::handle_get_failed`] |
//! | [`Action::IpcRelease`] | lets go of what it exported for the send (a device staging buffer) | — |
//! | [`Action::Deregister`] | hands a rendezvous send's registration back to its btl | — |
//! | [`Action::CopyIn`] | copies bytes into device memory | [`crate::Pml::handle_copy_done`] |
//! | [`Action::StageOut`] | copies a chunk of device memory into a pinned slot (asynchronously; waits for a free slot) and, to be pulled, registers the slot with the btl | [`crate::Pml::handle_staged`] |
//! | [`Action::Unstage`] | frees the slot of a staged chunk the peer pulled | — |
//! | [`Action::StageIn`] | gets a chunk of a peer's memory (into a pinned slot and on into device memory by an asynchronous copy, for a device destination) | [`crate::Pml::handle_staged_in`] |
//! | [`Action::ForgetPeer`] | drops what it keeps for a failed peer (IPC mappings, staging buffers) | — |
//!
//! A streamed fragment ([`gmpi_btl::Event::FragStream`]) is the one read
//! the driver makes on the pml's word without an action: the pml answers
//! [`crate::Pml::stream_target`] with a [`StreamTarget`], the driver reads
//! the body there and reports [`crate::Pml::handle_stream_read`].

use gmpi_btl::{MemDesc, Pull, Rank};
use gmpi_mem::{IpcDesc, MemKind};

use crate::wire::HdrBuf;
use crate::{BtlId, Buf};

/// Bytes that follow a header in a send action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Header only.
    None,
    /// User memory, read by the driver when it submits.
    Mem {
        /// Address.
        addr: u64,
        /// Length.
        len: usize,
        /// Kind.
        kind: MemKind,
    },
    /// Bytes the pml made (a CUDA IPC descriptor), or a device payload the
    /// driver already copied out before the btl refused it.
    Bytes(Vec<u8>),
    /// `len` bytes at `at` in the staged chunk at `offset` of send `token`
    /// (a pinned slot the driver holds until the pml's `Unstage`).
    Staged {
        /// The send request.
        token: u64,
        /// The chunk's offset in the message.
        offset: u64,
        /// Where the payload starts in the chunk.
        at: usize,
        /// Its length.
        len: usize,
    },
}

/// Something the driver must do. See the module documentation.
#[derive(Debug)]
pub enum Action {
    /// Submit `header` + `payload` on `btl` to `peer`.
    Send {
        /// Which btl.
        btl: BtlId,
        /// Destination.
        peer: Rank,
        /// Encoded header.
        header: HdrBuf,
        /// Payload.
        payload: Payload,
        /// Completion token (0: nobody waits for this one).
        token: u64,
    },
    /// Expose `buf` through `btl` so that `peer` can get it: host memory by
    /// the btl's registration, device memory by GPUDirect (a dma-buf export
    /// of the gpu layer, registered by the btl).
    Register {
        /// Which btl.
        btl: BtlId,
        /// Who will read it.
        peer: Rank,
        /// The memory.
        buf: Buf,
        /// The send request.
        token: u64,
    },
    /// Make the CUDA IPC descriptor of device memory `buf`.
    IpcExport {
        /// Who will open it.
        peer: Rank,
        /// The memory.
        buf: Buf,
        /// The send request.
        token: u64,
    },
    /// Read `len` bytes at `offset` in the peer's memory `desc` into local
    /// memory at `dst`.
    Get {
        /// Which btl.
        btl: BtlId,
        /// Owner of the memory.
        peer: Rank,
        /// Its descriptor.
        desc: MemDesc,
        /// Offset within it.
        offset: u64,
        /// Local destination address: the buffer of a receive request that
        /// stays untouched until the get is answered.
        dst: u64,
        /// Local destination kind.
        dst_kind: MemKind,
        /// Length.
        len: usize,
        /// The receive request.
        token: u64,
        /// How the copy is used ([`gmpi_btl::Btl::get_as`]):
        /// [`Pull::Unhelped`] where the peer is busy pulling messages of
        /// ours (two rendezvous sends of this rank to it or more await its
        /// reply), else [`Pull::Alone`] for a receive that is
        /// [`crate::RecvArgs::consumed`], else [`Pull::Helped`].
        pull: Pull,
    },
    /// Copy `len` bytes at the start of the peer's device allocation `desc`
    /// (opened by CUDA IPC) into local memory at `dst`.
    IpcCopy {
        /// Owner of the memory.
        peer: Rank,
        /// Its descriptor.
        desc: IpcDesc,
        /// Local destination address.
        dst: u64,
        /// Local destination kind.
        dst_kind: MemKind,
        /// Length.
        len: usize,
        /// The receive request.
        token: u64,
    },
    /// Copy `len` bytes of device (or managed) memory at `src` into a
    /// pinned slot, then (`expose`) register the slot with `btl` for
    /// `peer`'s get: the chunk at `offset` of send `token` (`rndv/staged`).
    /// Unexposed, the chunk is sent from the slot in FRAGs
    /// ([`Payload::Staged`]).
    StageOut {
        /// Which btl.
        btl: BtlId,
        /// Who it is for.
        peer: Rank,
        /// Register the slot for the peer's get.
        expose: bool,
        /// Device address of the chunk.
        src: u64,
        /// Its length.
        len: usize,
        /// The send request.
        token: u64,
        /// Offset of the chunk in the message.
        offset: u64,
    },
    /// The staged chunk at `offset` of send `token` was pulled: free its
    /// slot.
    Unstage {
        /// The send request.
        token: u64,
        /// Offset of the chunk in the message.
        offset: u64,
    },
    /// Get `len` bytes at `src_offset` in `peer`'s memory `desc` (a staged
    /// chunk, or a host sender's registered buffer) into local memory at
    /// `dst`: directly for host memory; into a pinned slot, then by an
    /// asynchronous copy, for device memory. The chunk at `offset` of
    /// receive `token`.
    StageIn {
        /// Which btl.
        btl: BtlId,
        /// Owner of the memory.
        peer: Rank,
        /// Where it is.
        desc: MemDesc,
        /// Offset of the chunk within `desc`.
        src_offset: u64,
        /// Local destination address.
        dst: u64,
        /// Local destination kind.
        dst_kind: MemKind,
        /// Length.
        len: usize,
        /// The receive request.
        token: u64,
        /// Offset of the chunk in the message.
        offset: u64,
    },
    /// The receiver no longer reads what [`Action::IpcExport`] exported
    /// for send `token` (it copied and sent FIN, asked for the stream
    /// instead, or failed): what the driver exported it from (a device
    /// staging buffer, where the memory itself could not be exported) may
    /// serve another send.
    IpcRelease {
        /// The send request.
        token: u64,
    },
    /// The rendezvous a registration was made for is over: hand `desc`
    /// back to btl `btl` (`Btl::deregister`).
    Deregister {
        /// The btl that registered it.
        btl: usize,
        /// What its `register` returned.
        desc: gmpi_btl::MemDesc,
    },
    /// Copy `data` into device (or managed) memory at `dst`.
    CopyIn {
        /// Destination address.
        dst: u64,
        /// Its kind.
        dst_kind: MemKind,
        /// The bytes.
        data: Vec<u8>,
        /// The receive request.
        token: u64,
        /// A chunk of a stream, whose copy may overlap what comes next
        /// (asynchronously, through a pinned slot), rather than an eager
        /// message, which is copied at once.
        overlap: bool,
    },
    /// `peer` failed: drop what the driver keeps for it (mappings of its
    /// device memory, staging buffers made for it).
    ForgetPeer {
        /// The failed peer.
        peer: Rank,
    },
}

impl Action {
    /// The peer whose queue this action belongs to: actions for one peer run
    /// in the order the pml emitted them. (The staging actions have none:
    /// the driver may hold them while it waits for a pinned slot, which
    /// must not hold up the peer's other traffic; local clean-up
    /// (`Unstage`, `IpcRelease`, `Deregister`, `ForgetPeer`) must run even when the peer
    /// has failed.)
    pub fn peer(&self) -> Option<Rank> {
        match self {
            Action::Send { peer, .. }
            | Action::Register { peer, .. }
            | Action::IpcExport { peer, .. }
            | Action::Get { peer, .. }
            | Action::IpcCopy { peer, .. } => Some(*peer),
            Action::CopyIn { .. }
            | Action::StageOut { .. }
            | Action::Unstage { .. }
            | Action::StageIn { .. }
            | Action::IpcRelease { .. }
            | Action::Deregister { .. }
            | Action::ForgetPeer { .. } => None,
        }
    }
}

/// Where the body of a streamed fragment goes
/// ([`crate::Pml::stream_target`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamTarget {
    /// Header bytes still to read and discard before the payload.
    pub skip: usize,
    /// Where the rest of the payload goes.
    pub addr: u64,
    /// How much is left of it.
    pub len: usize,
    /// Its kind (device memory: the driver reads into host memory and
    /// copies in).
    pub kind: MemKind,
    /// The receive request, for [`crate::Pml::handle_stream_read`].
    pub token: u64,
}
