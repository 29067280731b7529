//! gmpi-gpu: memory kinds and the buffer classifier.
//!
//! Every buffer handed to gmpi is classified before a protocol is chosen.
//! This build is host-only: CUDA support (pointer attributes through
//! `cudarc`, IPC, GDRCopy, staging) arrives with the GPU work, behind the same
//! API, so the pml and the runtime already ask the question in the right place.
//!
//! File map: `lib.rs` only — [`MemKind`] and [`Classifier`].

#![forbid(unsafe_code)]

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

    /// Short name for logs.
    pub fn name(self) -> &'static str {
        match self {
            MemKind::Host => "host",
            MemKind::Device { .. } => "device",
            MemKind::Managed => "managed",
        }
    }
}

/// Classifies buffers by address. Without CUDA every buffer is host memory,
/// and the answer costs nothing.
#[derive(Debug, Default, Clone)]
pub struct Classifier {
    _priv: (),
}

impl Classifier {
    /// A classifier for this process. Never creates a CUDA context.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether any device memory can exist in this process.
    pub fn cuda_available(&self) -> bool {
        false
    }

    /// The kind of the `len` bytes at `addr`.
    #[inline]
    pub fn classify(&self, addr: u64, len: usize) -> MemKind {
        let _ = (addr, len);
        MemKind::Host
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_only_build_answers_host() {
        let c = Classifier::new();
        let v = [1u8; 16];
        assert_eq!(c.classify(v.as_ptr() as u64, v.len()), MemKind::Host);
        assert!(!c.cuda_available());
        assert!(MemKind::Host.is_host_accessible());
        assert!(!MemKind::Device { ordinal: 0 }.is_host_accessible());
    }
}
