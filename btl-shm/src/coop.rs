//! Cooperative single copy: a large [`gmpi_btl::Btl::get`] is copied by both
//! processes at once, the receiver reading with `process_vm_readv` while the
//! owner of the data (the sender, otherwise idle in its wait) writes with
//! `process_vm_writev`.
//!
//! # Protocol
//! The receiver (the rank calling `get`) splits the range into `n` chunks
//! (at most [`MAX_CHUNKS`], of [`crate::ShmConfig::coop_chunk`] bytes or more),
//! takes one of its own [`crate::layout::COOP_SLOTS`] slots in the segment, stores
//! `done = 0`, `err = 0`, then the *claim word* `gen | front = 0 | back = n`
//! (Release), sends the owner a [`Request`] as a btl-to-btl record
//! ([`crate::layout::Kind::Ctrl`], never shown to the pml; no doorbell: a sleeping
//! owner is not woken to help) and answers `Queued`.
//!
//! Chunks `[front, back)` are unclaimed. Whoever is inside MPI claims one by
//! a compare-and-swap of the claim word that checks the generation: the
//! receiver takes the front chunk (`front + 1`), the helper the back chunk
//! (`back - 1`), so each side keeps copying the same part of a buffer used
//! again and again (its cache stays warm) and they meet in the middle. The
//! helper, after writing its chunk (or failing to: then it first sets
//! `err`), adds 1 to `done` (Release). The receiver counts its own chunks.
//!
//! The receiver's get completes when nothing is left to claim and
//! `done + own == claimed` (Acquire): every byte is in place, and no helper
//! copy is in flight, so the helper can never touch the receive buffer
//! afterwards (a later claim fails: `front == back`, and a reused slot has a
//! new generation). The sender's request completes only on the pml's FIN,
//! which follows that completion, so the helper never reads the send buffer
//! after its request completed either. A helper busy outside MPI never
//! stalls the receiver, which takes every chunk left; the receiver waits
//! only for a chunk the helper already started.
//!
//! Failures: if one of the receiver's reads fails, it closes the slot
//! (`front = back`: nothing more can be claimed), waits for the helper's
//! chunks in flight, and then retries the whole range alone; so does it if
//! the helper set `err`. Only if that fails too is the get reported failed
//! (the pml then streams the message instead). A get whose peer is found
//! failed is reported failed at once; its slot is never reused.
//!
//! A rank without CMA, with `coop` off, or out of free slots gets
//! synchronously as before; a rank that does not help (coop off) leaves
//! every chunk to the receiver.

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use gmpi_btl::{BtlError, Event, MemDesc, Rank};

use crate::cma;
use crate::layout::{Layout, COOP_CLAIM, COOP_DONE, COOP_ERR, COOP_SLOTS};
use crate::segment::{Dst, Mapping};

/// Most chunks one cooperative get is split into (16-bit claim counters).
pub(crate) const MAX_CHUNKS: u64 = u16::MAX as u64;
/// Smallest chunk.
pub(crate) const MIN_CHUNK: u64 = 4096;
/// Encoded size of a [`Request`].
pub(crate) const REQ_LEN: usize = 48;
const REQ_TAG: u32 = u32::from_le_bytes(*b"coop");

fn pack(gen: u32, front: u16, back: u16) -> u64 {
    (u64::from(gen) << 32) | (u64::from(front) << 16) | u64::from(back)
}

fn unpack(w: u64) -> (u32, u16, u16) {
    ((w >> 32) as u32, (w >> 16) as u16, w as u16)
}

/// The chunk size and chunk count for `len` bytes with the configured chunk:
/// at most half the message (in whole [`MIN_CHUNK`]s), so that both sides
/// have a share of a get the size of one configured chunk or two (128 KiB
/// in 64 KiB chunks: one-way latency 10.4-12.8 -> 6.3-7.7 µs at np 2,
/// where one 128 KiB chunk left the race for it to one side).
pub(crate) fn geometry(len: u64, chunk: u64) -> (u64, u16) {
    let half = len.div_ceil(2).next_multiple_of(MIN_CHUNK);
    let chunk = chunk
        .min(half)
        .max(MIN_CHUNK)
        .max(len.div_ceil(MAX_CHUNKS).next_multiple_of(MIN_CHUNK));
    (chunk, len.div_ceil(chunk) as u16)
}

/// Bytes `(offset, len)` of chunk `k`.
fn range(k: u16, chunk: u64, len: u64) -> (u64, u64) {
    let off = u64::from(k) * chunk;
    (off, chunk.min(len - off))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Front,
    Back,
}

/// Claim the next chunk from `side` of generation `gen`, if any is left.
fn claim(word: &AtomicU64, gen: u32, side: Side) -> Option<u16> {
    let mut w = word.load(Ordering::Acquire);
    loop {
        let (g, f, b) = unpack(w);
        if g != gen || f >= b {
            return None;
        }
        let (next, k) = match side {
            Side::Front => (pack(g, f + 1, b), f),
            Side::Back => (pack(g, f, b - 1), b - 1),
        };
        match word.compare_exchange_weak(w, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(k),
            Err(seen) => w = seen,
        }
    }
}

/// Leave nothing to claim in generation `gen` of `n` chunks; returns how
/// many chunks were claimed in all (by both sides). Call it once per
/// generation: afterwards the word no longer tells.
fn close(word: &AtomicU64, gen: u32, n: u16) -> u16 {
    let mut w = word.load(Ordering::Acquire);
    loop {
        let (g, f, b) = unpack(w);
        if g != gen || b > n || f > b {
            // Only we write other generations into our slot and only the
            // protocol's moves into ours: a corrupt word. Claim "all" so
            // that completion waits for nothing more from the peer.
            return n;
        }
        if f == b {
            return f + (n - b);
        }
        match word.compare_exchange_weak(w, pack(g, b, b), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return f + (n - b),
            Err(seen) => w = seen,
        }
    }
}

/// What a receiver asks the owner of the data: help copying `len` bytes of
/// its memory at `src` to the receiver's memory at `dst`, in chunks of
/// `chunk` bytes claimed through slot `slot` (generation `gen`) of the
/// receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Request {
    pub slot: u32,
    pub gen: u32,
    pub chunk: u64,
    pub src: u64,
    pub dst: u64,
    pub len: u64,
}

impl Request {
    pub(crate) fn encode(&self) -> [u8; REQ_LEN] {
        let mut b = [0u8; REQ_LEN];
        b[0..4].copy_from_slice(&REQ_TAG.to_le_bytes());
        b[4..8].copy_from_slice(&self.slot.to_le_bytes());
        b[8..12].copy_from_slice(&self.gen.to_le_bytes());
        b[16..24].copy_from_slice(&self.chunk.to_le_bytes());
        b[24..32].copy_from_slice(&self.src.to_le_bytes());
        b[32..40].copy_from_slice(&self.dst.to_le_bytes());
        b[40..48].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decode and validate; the error names what is wrong.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, String> {
        if b.len() != REQ_LEN {
            return Err(format!("btl record of {} bytes", b.len()));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if u32_at(0) != REQ_TAG {
            return Err(format!("btl record with tag {:#x}", u32_at(0)));
        }
        let r = Self {
            slot: u32_at(4),
            gen: u32_at(8),
            chunk: u64_at(16),
            src: u64_at(24),
            dst: u64_at(32),
            len: u64_at(40),
        };
        if r.slot as usize >= COOP_SLOTS
            || r.chunk < MIN_CHUNK
            || r.len == 0
            || r.len.div_ceil(r.chunk) > MAX_CHUNKS
        {
            return Err(format!("invalid cooperative copy request {r:?}"));
        }
        Ok(r)
    }

    fn chunks(&self) -> u16 {
        self.len.div_ceil(self.chunk) as u16
    }
}

/// A cooperative get of ours in flight.
#[derive(Debug)]
struct Pull {
    token: u64,
    peer: Rank,
    local: usize,
    /// The data's owner (from its memory descriptor).
    pid: u64,
    slot: u32,
    gen: u32,
    src: u64,
    dst: Dst,
    chunk: u64,
    n: u16,
    /// Chunks we copied (or failed to).
    own: u16,
    /// Chunks claimed in all, once nothing is left to claim.
    claimed: Option<u16>,
    error: Option<String>,
}

/// A request to help, from local rank `local` (process `pid`).
#[derive(Debug)]
struct Help {
    local: usize,
    pid: u64,
    req: Request,
}

/// Cooperative-copy settings of one rank.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CoopCfg {
    /// Preferred chunk size.
    pub chunk: u64,
    /// Smallest get split cooperatively.
    pub min: u64,
}

/// The cooperative copies of one rank: its own gets and its help queue.
#[derive(Debug)]
pub(crate) struct Coop {
    cfg: CoopCfg,
    me: usize,
    /// Generation last used in each of our slots.
    gens: Vec<u32>,
    free: Vec<u32>,
    pulls: Vec<Pull>,
    helps: VecDeque<Help>,
}

/// What a cooperative get needs from the caller.
pub(crate) struct Start<'a> {
    pub map: &'a Mapping,
    pub layout: &'a Layout,
    pub token: u64,
    pub peer: Rank,
    pub local: usize,
    pub remote: &'a MemDesc,
    pub offset: u64,
    pub dst: Dst,
}

impl Coop {
    pub(crate) fn new(cfg: CoopCfg, me: usize) -> Self {
        Self {
            cfg,
            me,
            gens: vec![0; COOP_SLOTS],
            free: (0..COOP_SLOTS as u32).rev().collect(),
            pulls: Vec::new(),
            helps: VecDeque::new(),
        }
    }

    /// Whether a get of `len` bytes should be cooperative (and a slot is free).
    pub(crate) fn wants(&self, len: usize) -> bool {
        len as u64 >= self.cfg.min.max(2 * MIN_CHUNK) && !self.free.is_empty()
    }

    /// Something for progress to do.
    pub(crate) fn busy(&self) -> bool {
        !self.pulls.is_empty() || !self.helps.is_empty()
    }

    /// Open a slot for a get and return the request to send to its owner.
    /// The caller has checked [`Coop::wants`] and the range; the get is ours
    /// to complete from now on (through [`Coop::progress`]).
    pub(crate) fn start(&mut self, s: Start<'_>) -> Request {
        let slot = self.free.pop().expect("checked by wants()");
        let gen = self.gens[slot as usize].wrapping_add(1);
        self.gens[slot as usize] = gen;
        let len = s.dst.len() as u64;
        let (chunk, n) = geometry(len, self.cfg.chunk);
        let base = s.layout.coop_slot(self.me, slot as usize);
        s.map.u64_at(base + COOP_DONE).store(0, Ordering::Relaxed);
        s.map.u32_at(base + COOP_ERR).store(0, Ordering::Relaxed);
        // Publishes the two resets above to whoever claims in `gen`.
        s.map
            .u64_at(base + COOP_CLAIM)
            .store(pack(gen, 0, n), Ordering::Release);
        let src = s.remote.addr + s.offset; // checked by the caller
        self.pulls.push(Pull {
            token: s.token,
            peer: s.peer,
            local: s.local,
            pid: s.remote.key,
            slot,
            gen,
            src,
            dst: s.dst,
            chunk,
            n,
            own: 0,
            claimed: None,
            error: None,
        });
        Request {
            slot,
            gen,
            chunk,
            src,
            dst: s.dst.addr(),
            len,
        }
    }

    /// Queue a help request that arrived from local rank `local` (`pid`).
    pub(crate) fn push_help(&mut self, local: usize, pid: u64, req: Request) {
        self.helps.push_back(Help { local, pid, req });
    }

    /// Copy what we can of our gets and of the gets we were asked to help,
    /// and report the gets that finished. `dead[l]`: local rank `l` failed.
    /// Returns the number of events and chunks (0: nothing happened).
    pub(crate) fn progress(
        &mut self,
        map: &Mapping,
        layout: &Layout,
        dead: &[bool],
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> usize {
        let mut work = 0;
        let mut i = 0;
        while i < self.pulls.len() {
            let p = &mut self.pulls[i];
            let base = layout.coop_slot(self.me, p.slot as usize);
            let word = map.u64_at(base + COOP_CLAIM);
            if dead[p.local] {
                close(word, p.gen, p.n);
                // Its slot is never reused: a late increment from the failed
                // peer must not count for another get.
                let (token, peer) = (p.token, p.peer);
                self.pulls.remove(i);
                on_event(Event::GetFailed {
                    token,
                    error: BtlError::PeerFailed(peer),
                });
                work += 1;
                continue;
            }
            if p.claimed.is_none() {
                while let Some(k) = claim(word, p.gen, Side::Front) {
                    p.own += 1;
                    work += 1;
                    if k >= p.n {
                        p.error = Some(format!(
                            "corrupt claim word {:#x}",
                            word.load(Ordering::Relaxed)
                        ));
                        break;
                    }
                    let (off, len) = range(k, p.chunk, p.dst.len() as u64);
                    let to = p.dst.sub(off as usize, len as usize);
                    if let Err(e) = cma::read_exact(p.pid, p.src.wrapping_add(off), to) {
                        p.error = Some(e);
                        break;
                    }
                }
                p.claimed = Some(close(word, p.gen, p.n));
            }
            let claimed = u64::from(p.claimed.expect("set above"));
            let done = map.u64_at(base + COOP_DONE).load(Ordering::Acquire) + u64::from(p.own);
            if done < claimed {
                // A chunk the helper started is still being written.
                i += 1;
                continue;
            }
            let helper_failed =
                done > claimed || map.u32_at(base + COOP_ERR).load(Ordering::Relaxed) != 0;
            let p = self.pulls.remove(i);
            self.free.push(p.slot);
            let res = if p.error.is_some() || helper_failed {
                // Everything again, alone (the first error is the one worth
                // reporting if this fails too).
                cma::read_exact(p.pid, p.src, p.dst).map_err(|e| p.error.unwrap_or(e))
            } else {
                Ok(())
            };
            work += 1;
            on_event(match res {
                Ok(()) => Event::GetComplete { token: p.token },
                Err(e) => Event::GetFailed {
                    token: p.token,
                    error: BtlError::GetFailed(e),
                },
            });
        }
        while let Some(h) = self.helps.pop_front() {
            if dead[h.local] {
                continue;
            }
            let base = layout.coop_slot(h.local, h.req.slot as usize);
            let word = map.u64_at(base + COOP_CLAIM);
            let n = h.req.chunks();
            while let Some(k) = claim(word, h.req.gen, Side::Back) {
                if k >= n {
                    // Not the geometry the request announced: corrupt.
                    map.u32_at(base + COOP_ERR).store(1, Ordering::Relaxed);
                } else {
                    let (off, len) = range(k, h.req.chunk, h.req.len);
                    let res = cma::write_exact(
                        h.pid,
                        h.req.src.wrapping_add(off),
                        h.req.dst.wrapping_add(off),
                        len as usize,
                    );
                    if res.is_err() {
                        map.u32_at(base + COOP_ERR).store(1, Ordering::Relaxed);
                    }
                }
                map.u64_at(base + COOP_DONE).fetch_add(1, Ordering::Release);
                work += 1;
            }
        }
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_meet_in_the_middle_and_close() {
        let w = AtomicU64::new(pack(7, 0, 5));
        assert_eq!(claim(&w, 7, Side::Front), Some(0));
        assert_eq!(claim(&w, 7, Side::Back), Some(4));
        assert_eq!(claim(&w, 6, Side::Front), None, "stale generation");
        assert_eq!(claim(&w, 7, Side::Back), Some(3));
        assert_eq!(claim(&w, 7, Side::Front), Some(1));
        assert_eq!(claim(&w, 7, Side::Front), Some(2));
        assert_eq!(claim(&w, 7, Side::Back), None);
        assert_eq!(close(&w, 7, 5), 5);
        let w = AtomicU64::new(pack(1, 0, 5));
        assert_eq!(claim(&w, 1, Side::Front), Some(0));
        assert_eq!(claim(&w, 1, Side::Back), Some(4));
        assert_eq!(close(&w, 1, 5), 2, "chunks 1..4 never claimed");
        assert_eq!(claim(&w, 1, Side::Front), None);
        assert_eq!(claim(&w, 1, Side::Back), None);
        assert_eq!(unpack(pack(u32::MAX, 3, u16::MAX)), (u32::MAX, 3, u16::MAX));
    }

    #[test]
    fn geometry_bounds_the_chunk_count() {
        assert_eq!(geometry(1 << 20, 128 << 10), (128 << 10, 8));
        assert_eq!(geometry((1 << 20) + 1, 128 << 10), (128 << 10, 9));
        assert_eq!(geometry(100, 10), (MIN_CHUNK, 1));
        // Never a single chunk where two fit: each side has its half.
        assert_eq!(geometry(128 << 10, 128 << 10), (64 << 10, 2));
        assert_eq!(geometry(192 << 10, 128 << 10), (96 << 10, 2));
        assert_eq!(geometry(8 << 10, 128 << 10), (MIN_CHUNK, 2));
        let (c, n) = geometry(1 << 40, 64 << 10);
        assert!(u64::from(n) <= MAX_CHUNKS && c * u64::from(n) >= 1 << 40);
        assert_eq!(c % MIN_CHUNK, 0);
        for len in [1u64, 4095, 4096, 4097, 12345678, u64::MAX / 2] {
            let (c, n) = geometry(len, 128 << 10);
            assert!(n >= 1 && u64::from(n) <= MAX_CHUNKS, "{len}");
            assert!(
                c * u64::from(n) >= len && c * (u64::from(n) - 1) < len,
                "{len}"
            );
        }
    }

    #[test]
    fn requests_round_trip_and_bad_ones_are_refused() {
        let r = Request {
            slot: 3,
            gen: 9,
            chunk: 1 << 17,
            src: 0x7f00_0000_1000,
            dst: 0x5500_0000_2000,
            len: 5 << 20,
        };
        assert_eq!(Request::decode(&r.encode()), Ok(r));
        assert_eq!(r.chunks(), 40);
        assert!(Request::decode(&r.encode()[..40]).is_err());
        let mut b = r.encode();
        b[0] ^= 1;
        assert!(Request::decode(&b).is_err());
        for bad in [
            Request {
                slot: COOP_SLOTS as u32,
                ..r
            },
            Request { chunk: 100, ..r },
            Request { len: 0, ..r },
            Request {
                chunk: MIN_CHUNK,
                len: MIN_CHUNK * (MAX_CHUNKS + 1),
                ..r
            },
        ] {
            assert!(Request::decode(&bad.encode()).is_err(), "{bad:?}");
        }
    }
}
