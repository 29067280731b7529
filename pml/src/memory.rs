//! User memory as the pml sees it: addresses, lengths and kinds, never bytes.
//!
//! The pml holds a user buffer as a [`Buf`] and does no I/O on it. Bytes move
//! in two ways only:
//! - The driver reads and writes them while it executes an [`crate::Action`]
//!   (a send's payload, a get, a device copy, a streamed read).
//! - One callback, [`HostWrite`]: an eager payload (or a pipelined chunk)
//!   that arrives for a matched receive in *host* memory is written into it
//!   straight from the transport's fragment, during the input call that
//!   delivered the fragment. That is the zero-copy eager path (the fragment
//!   is only valid during the call, so turning it into an action would mean
//!   one more copy per small message). Device memory never goes through the
//!   callback: its copies are actions.

use gmpi_mem::MemKind;

/// A user buffer, by address (the pml never dereferences it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Buf {
    /// Base address.
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// Where it lives.
    pub kind: MemKind,
}

/// The one callback of the pml: copy `data` into the host memory at `addr`,
/// which the pml knows to be inside the buffer of a matched receive
/// ([`Buf::kind`] is [`MemKind::Host`]). The runtime implements it over real
/// memory, tests over simulated memory.
pub trait HostWrite {
    /// Copy `data` to `addr..addr + data.len()`.
    fn write(&mut self, addr: u64, data: &[u8]);
}
