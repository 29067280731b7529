//! User buffers as raw memory: the one runtime module with `unsafe` besides
//! the `unsafe impl`s of `datatype.rs`.
//!
//! The pml holds user buffers by address. Every address it hands back comes
//! from a slice the runtime registered while a borrow of that slice is alive:
//! a blocking call holds the borrow for its whole duration, and a non-blocking
//! [`crate::Request`] holds it (lifetime `'a`) until it completes — dropping an
//! unfinished request waits for it. So the raw accesses below always land in
//! live memory the caller lent to gmpi. (As with any borrowed-request API,
//! `mem::forget` on an unfinished request is the one way to break this; the
//! `Request` documentation forbids it.)

use gmpi_gpu::MemKind;
use gmpi_pml::driver::MemAccess;
use gmpi_pml::Buf;

use crate::datatype::Equivalence;

/// A read-only user buffer as the pml sees it.
pub(crate) fn send_buf<T: Equivalence>(s: &[T], kind: MemKind) -> Buf {
    Buf {
        addr: s.as_ptr() as u64,
        len: std::mem::size_of_val(s),
        kind,
    }
}

/// A writable user buffer as the pml sees it.
pub(crate) fn recv_buf<T: Equivalence>(s: &mut [T], kind: MemKind) -> Buf {
    Buf {
        addr: s.as_mut_ptr() as u64,
        len: std::mem::size_of_val(s),
        kind,
    }
}

/// Host memory reached through raw addresses.
#[derive(Debug, Default)]
pub(crate) struct HostMem;

impl MemAccess for HostMem {
    fn with_read<R>(&self, addr: u64, len: usize, kind: MemKind, f: impl FnOnce(&[u8]) -> R) -> R {
        debug_assert!(
            kind.is_host_accessible(),
            "device memory in a host-only build"
        );
        if len == 0 {
            return f(&[]);
        }
        // SAFETY: (module docs) `addr..addr+len` lies within a buffer the user
        // lent to a live request or blocking call; the pml never hands out a
        // range beyond the registered length.
        let s = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        f(s)
    }

    fn with_write<R>(
        &mut self,
        addr: u64,
        len: usize,
        kind: MemKind,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> R {
        debug_assert!(
            kind.is_host_accessible(),
            "device memory in a host-only build"
        );
        if len == 0 {
            return f(&mut []);
        }
        // SAFETY: as above, and the buffer was lent mutably (a receive), so no
        // other reference to it exists while the request is in flight.
        let s = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
        f(s)
    }
}
