//! One-sided transfers a window issues on a btl itself: RDMA READs and
//! WRITEs of a peer's window memory (`win/mod.rs` decides when), outside
//! the pml, which has no request for them.
//!
//! A window's memory is exposed once, at creation ([`Driver::expose_window`]:
//! the btl that offers [`gmpi_btl::Capabilities::put`] registers it readable
//! and writable by peers) and given back when the window is freed. An
//! operation is started here ([`Driver::rdma_start`]) with a token of this
//! module's ([`TOKEN_BIT`]); its end, reported by the btl's
//! `GetComplete`/`GetFailed`/`PutComplete`/`PutFailed`, is kept until the
//! window takes it ([`Driver::rdma_take`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use gmpi_btl::{LocalMem, MemDesc, Rank, Submit};

use super::{Driver, HostMemory};

/// Tokens of one-sided transfers carry this bit (the pml's request ids and
/// the staging module's tokens never do: theirs are below 2^62 and carry
/// bit 63).
const TOKEN_BIT: u64 = 1 << 62;

/// The one-sided transfers in flight and ended, by token.
#[derive(Debug, Default)]
pub(super) struct OneSided {
    next: u64,
    /// `None` while in flight; how it ended once it has.
    ops: HashMap<u64, Option<Result<(), String>>>,
}

impl OneSided {
    /// Whether `token` is one of this module's transfers.
    pub fn owns(&self, token: u64) -> bool {
        token & TOKEN_BIT != 0 && token & (1 << 63) == 0 && self.ops.contains_key(&token)
    }

    /// Transfer `token` ended.
    pub fn ended(&mut self, token: u64, res: Result<(), String>) {
        if let Some(slot) = self.ops.get_mut(&token) {
            *slot = Some(res);
        }
    }
}

impl<H: HostMemory> Driver<H> {
    /// Expose `len` bytes of host memory at `addr` (a window's) to peers'
    /// one-sided reads and writes, through the first btl that offers them:
    /// that btl's index and the descriptor peers use, or `None` where no
    /// btl can ([`Driver::unexpose_window`] gives it back).
    pub fn expose_window(&mut self, addr: u64, len: u64) -> Option<(usize, MemDesc)> {
        let i = self.btls.iter().position(|b| b.caps().put)?;
        self.btls[i].register_window(addr, len).map(|d| (i, d))
    }

    /// Give back what [`Driver::expose_window`] registered.
    pub fn unexpose_window(&mut self, btl: usize, desc: &MemDesc) {
        if let Some(b) = self.btls.get_mut(btl) {
            b.deregister(desc);
        }
    }

    /// The btl that carries this rank's messages to `peer`, where it also
    /// reads and writes peers' windows (offers `put`).
    pub fn rdma_route(&self, peer: Rank) -> Option<usize> {
        self.pml
            .route(peer)
            .filter(|&b| self.btls.get(b).is_some_and(|b| b.caps().put))
    }

    /// Start reading (`write` false) `local.len` bytes at `offset` of
    /// `peer`'s window memory `desc` into `local`, or writing them from
    /// `local` (`write`), on btl `btl`. `Ok(None)`: done already;
    /// `Ok(Some(token))`: in flight until [`Driver::rdma_take`] of `token`
    /// answers; `Err`: nothing was moved, and why.
    ///
    /// # Safety
    /// `local` is valid for writes (a read) or reads (a write) of
    /// `local.len` bytes, and nothing else writes it (or, for a read, reads
    /// it) until the transfer has ended: when this returns `Ok(None)` or
    /// `Err`, else when [`Driver::rdma_take`] of the token answers `Some`;
    /// the caller keeps it allocated until then.
    pub unsafe fn rdma_start(
        &mut self,
        btl: usize,
        peer: Rank,
        desc: &MemDesc,
        offset: u64,
        local: LocalMem,
        write: bool,
    ) -> Result<Option<u64>, String> {
        let token = TOKEN_BIT | self.onesided.next;
        self.onesided.next = (self.onesided.next + 1) % TOKEN_BIT;
        self.quiet[btl] = false;
        let b = &mut self.btls[btl];
        // SAFETY: our caller's contract is the one `get` and `put` ask for.
        let res = unsafe {
            if write {
                b.put(peer, desc, offset, local, token)
            } else {
                b.get(peer, desc, offset, local, token)
            }
        };
        match res {
            Ok(Submit::Done) => Ok(None),
            Ok(Submit::Queued) => {
                self.onesided.ops.insert(token, None);
                Ok(Some(token))
            }
            Ok(Submit::NoResource) => Err(format!(
                "the {} transport has no room for a one-sided transfer",
                b.caps().name
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Wait, by polling the btls alone (whatever error the caller's own
    /// wait met), until every transfer of `tokens` has ended: their local
    /// memory is then the caller's again. A transfer the transport never
    /// ends within `limit` (its queue pair's retries give up long before)
    /// would write memory its owner may free: the process ends instead.
    pub fn rdma_drain(&mut self, tokens: &mut Vec<u64>, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            tokens.retain(|&t| self.rdma_take(t).is_none());
            if tokens.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                tracing::error!(target: "rma", "{} one-sided RDMA transfers did not end within {limit:?}; ending the process rather than let them write memory that is no longer theirs", tokens.len());
                std::process::abort();
            }
            if self.progress() == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// How transfer `token` ended (`None`: still in flight). Taken once.
    pub fn rdma_take(&mut self, token: u64) -> Option<Result<(), String>> {
        match self.onesided.ops.get(&token) {
            Some(Some(_)) => self.onesided.ops.remove(&token).flatten(),
            Some(None) => None,
            None => Some(Err(format!("no one-sided transfer {token:#x}"))),
        }
    }
}
