//! gmpi-mem: the memory vocabulary that the pml and the gpu layer share.
//!
//! The pml decides protocols from where a buffer lives ([`MemKind`]) and
//! carries a device allocation's CUDA IPC descriptor ([`IpcDesc`]) inside a
//! rendezvous; the gpu layer (`gmpi-gpu`) classifies buffers and makes and
//! opens those descriptors. Both depend on this crate, so the pml needs
//! neither `cudarc` nor the gpu layer: it names memory, it never touches it.
//!
//! Plain data only: no CUDA, no I/O, no `unsafe`.

#![forbid(unsafe_code)]

use std::fmt;

/// Where a buffer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MemKind {
    /// Ordinary host memory (pageable or pinned).
    #[default]
    Host,
    /// CUDA device memory on the given device ordinal.
    Device {
        /// CUDA device ordinal.
        ordinal: i32,
    },
    /// CUDA managed (unified) memory: always moved through host-visible copies.
    Managed,
}

impl MemKind {
    /// Whether the CPU may read and write this memory directly.
    pub fn is_host_accessible(self) -> bool {
        matches!(self, MemKind::Host | MemKind::Managed)
    }

    /// Whether this is plain host memory (the only kind the host protocols
    /// and the CPU copy paths touch directly).
    #[inline]
    pub fn is_host(self) -> bool {
        self == MemKind::Host
    }

    /// Short name for logs.
    pub fn name(self) -> &'static str {
        match self {
            MemKind::Host => "host",
            MemKind::Device { .. } => "device",
            MemKind::Managed => "managed",
        }
    }
}

/// A CUDA IPC memory handle (`CUipcMemHandle`, 64 opaque bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcHandle(pub [u8; 64]);

impl fmt::Debug for IpcHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpcHandle(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

/// The wire descriptor of a CUDA IPC rendezvous: the sender's allocation
/// handle plus where the message starts in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpcDesc {
    /// The allocation's IPC handle.
    pub handle: IpcHandle,
    /// Base address of the allocation in the sender.
    pub base: u64,
    /// The allocation's buffer id in the sender (for the receiver's cache).
    pub buffer_id: u64,
    /// Offset of the message in the allocation.
    pub offset: u64,
    /// Bytes the sender exposes from `offset`.
    pub len: u64,
}

impl IpcDesc {
    /// Encoded size on the wire.
    pub const WIRE_LEN: usize = 64 + 4 * 8;

    /// Write the little-endian wire form into the first [`Self::WIRE_LEN`]
    /// bytes of `out`.
    ///
    /// # Panics
    /// If `out` is shorter than [`Self::WIRE_LEN`].
    pub fn encode(&self, out: &mut [u8]) {
        out[..64].copy_from_slice(&self.handle.0);
        for (i, v) in [self.base, self.buffer_id, self.offset, self.len]
            .into_iter()
            .enumerate()
        {
            out[64 + 8 * i..72 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
    }

    /// Decode from the first [`Self::WIRE_LEN`] bytes; `None` if too short.
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < Self::WIRE_LEN {
            return None;
        }
        let f = |i: usize| {
            let o = 64 + 8 * i;
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(w)
        };
        let mut handle = [0u8; 64];
        handle.copy_from_slice(&b[..64]);
        Some(Self {
            handle: IpcHandle(handle),
            base: f(0),
            buffer_id: f(1),
            offset: f(2),
            len: f(3),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipc_desc_round_trips_and_refuses_short_input() {
        let mut h = [0u8; 64];
        h.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        let d = IpcDesc {
            handle: IpcHandle(h),
            base: 0x7f00_0000_0000,
            buffer_id: 42,
            offset: 4096,
            len: 1 << 30,
        };
        let mut w = [0u8; IpcDesc::WIRE_LEN];
        d.encode(&mut w);
        assert_eq!(IpcDesc::decode(&w), Some(d));
        assert_eq!(IpcDesc::decode(&w[..IpcDesc::WIRE_LEN - 1]), None);
    }

    #[test]
    fn kinds() {
        let dev = MemKind::Device { ordinal: 1 };
        assert!(MemKind::Host.is_host() && !dev.is_host() && !MemKind::Managed.is_host());
        assert!(MemKind::Managed.is_host_accessible() && !dev.is_host_accessible());
        assert_eq!(
            [MemKind::Host.name(), dev.name(), MemKind::Managed.name()],
            ["host", "device", "managed"]
        );
    }
}
