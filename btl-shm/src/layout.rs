//! Segment layout and record format: pure arithmetic, no memory access.
//!
//! ```text
//! offset 0                      segment header (one 64-byte line)
//! 64 + 128*r                    control block of local rank r (two lines)
//!                                 line 0: doorbell u32, sleeping u32   (futex word + flag)
//!                                 line 1: pid u64, probe addr u64, probe value u64
//! coop_off + 64*(r*S + i)        cooperative-copy slot i of local rank r (S = COOP_SLOTS,
//!                                 one line each; see `coop.rs`):
//!                                 claim u64 (gen | front | back), done u64, err u32
//! rings_off + k*(128+ring_bytes) ring k, for each ordered pair (s -> r), s != r:
//!                                 line 0: want-space u32 at +8         (producer writes, only when refused)
//!                                 line 1: head u64                     (consumer writes)
//!                                 ring_bytes of records
//! ```
//!
//! The rings a rank *receives* on are contiguous (`k = r*(n-1) + ...`), so a
//! rank's share of the segment is its own `n-1` incoming rings plus its control
//! block. There is no ring from a rank to itself (the loopback btl handles self).
//!
//! A record is an 8-byte header (`len: u32` little end, `kind: u32`) followed by
//! `len` payload bytes, padded to a multiple of 8. Its kind is a fragment for
//! the pml ([`Kind::Data`]), a message between the two btls themselves
//! ([`Kind::Ctrl`], never shown to the pml: the cooperative-copy requests of
//! `coop.rs`) or padding ([`Kind::Pad`]). A record never wraps: when
//! it does not fit before the end of the ring, a [`Kind::Pad`] record fills the
//! rest and the record starts at offset 0. The header word is also the
//! publication flag: 0 means "nothing here yet", and the producer zeroes the
//! word after each record before publishing it (the terminator), so the
//! consumer polls one cache line per message and never mistakes old bytes for
//! a header. There is no shared tail counter. After each publication the
//! producer also zeroes the first word of the line after its write position
//! (free space), so that a terminator crossing into the next line finds that
//! line already in the producer's cache (`TxRing::zero_ahead`).

#![forbid(unsafe_code)]

use std::fmt;

/// Cache-line size used for separating writers.
pub(crate) const LINE: usize = 64;
/// `"gmpishm1"`: written last by local rank 0 once the segment is initialised.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"gmpishm1");
/// Layout version; bumped on any incompatible change.
pub(crate) const VERSION: u32 = 2;

/// Header field offsets.
pub(crate) const HDR_MAGIC: usize = 0;
pub(crate) const HDR_VERSION: usize = 8;
pub(crate) const HDR_LOCAL_SIZE: usize = 12;
pub(crate) const HDR_RING_BYTES: usize = 16;
pub(crate) const HDR_MAX_FRAG: usize = 24;
pub(crate) const HDR_TOTAL: usize = 32;
pub(crate) const HDR_STATE: usize = 40;
pub(crate) const HEADER_BYTES: usize = LINE;

/// `HDR_STATE` values.
pub(crate) const STATE_READY: u32 = 1;
/// Written by a rank 0 that found a stale file of the same name, so that the
/// other ranks refuse it instead of attaching to a dead job's rings.
pub(crate) const STATE_POISONED: u32 = 0xdead;

/// Control block of one rank, relative offsets.
pub(crate) const CTRL_DOORBELL: usize = 0;
pub(crate) const CTRL_SLEEPING: usize = 4;
pub(crate) const CTRL_PID: usize = LINE;
pub(crate) const CTRL_PROBE_ADDR: usize = LINE + 8;
pub(crate) const CTRL_PROBE_VALUE: usize = LINE + 16;
pub(crate) const RANK_CTRL_BYTES: usize = 2 * LINE;

/// Cooperative-copy slots per rank (the most cooperative gets one rank has
/// in flight at once; more fall back to a plain get).
pub(crate) const COOP_SLOTS: usize = 64;
/// Cooperative-copy slot fields, relative offsets (one line per slot).
pub(crate) const COOP_CLAIM: usize = 0;
pub(crate) const COOP_DONE: usize = 8;
pub(crate) const COOP_ERR: usize = 16;

/// Ring control, relative offsets.
pub(crate) const RING_WANT: usize = 8;
pub(crate) const RING_HEAD: usize = LINE;
pub(crate) const RING_CTRL_BYTES: usize = 2 * LINE;

/// Record header size.
pub(crate) const REC_HDR: usize = 8;
const KIND_DATA: u32 = 0x5348_0001;
const KIND_PAD: u32 = 0x5348_0002;
const KIND_CTRL: u32 = 0x5348_0003;

/// Automatic ring sizing: a node's rings share this much per receiving rank.
pub(crate) const AUTO_BUDGET: usize = 16 << 20;
const AUTO_MIN: usize = 64 << 10;
const AUTO_MAX: usize = 1 << 20;
/// Largest `max_frag` accepted (record lengths are `u32`; keep far from it).
pub(crate) const MAX_FRAG_LIMIT: usize = 1 << 30;
/// Smallest `max_frag` accepted (a pml header must fit).
pub(crate) const MIN_FRAG: usize = 64;

/// A decoded record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A fragment of `len` payload bytes.
    Data(u32),
    /// A btl-to-btl message of `len` payload bytes (not a pml fragment).
    Ctrl(u32),
    /// Skip to the end of the ring.
    Pad,
}

/// Encode a record header word.
pub(crate) fn encode(kind: Kind) -> u64 {
    let (len, k) = match kind {
        Kind::Data(len) => (len, KIND_DATA),
        Kind::Ctrl(len) => (len, KIND_CTRL),
        Kind::Pad => (0, KIND_PAD),
    };
    u64::from(len) | (u64::from(k) << 32)
}

/// Decode a record header word; `None` for anything but a valid marker.
pub(crate) fn decode(word: u64) -> Option<Kind> {
    let len = word as u32;
    match (word >> 32) as u32 {
        KIND_DATA => Some(Kind::Data(len)),
        KIND_CTRL => Some(Kind::Ctrl(len)),
        KIND_PAD if len == 0 => Some(Kind::Pad),
        _ => None,
    }
}

/// Bytes a record of `len` payload bytes occupies in a ring.
pub(crate) const fn record_size(len: usize) -> usize {
    // 8-byte aligned. (Line-aligned records were measured slower: the
    // terminator then always lands in the next line, one more line moving
    // between the cores per message.)
    REC_HDR + len.next_multiple_of(8)
}

/// The smallest ring that always accepts a `max_frag` fragment once drained:
/// with `cap >= 2 * rec`, either the record fits before the end of the ring,
/// or the free space before it (`off > cap - rec >= rec`) is at least the record.
pub(crate) const fn min_ring_bytes(max_frag: usize) -> usize {
    (2 * record_size(max_frag) + LINE).next_multiple_of(LINE)
}

/// `clamp(16 MiB / local_size rounded down to 4 KiB, 64 KiB, 1 MiB)`, never
/// below [`min_ring_bytes`].
pub(crate) fn auto_ring_bytes(local_size: usize, max_frag: usize) -> usize {
    let share = (AUTO_BUDGET / local_size.max(1)) / 4096 * 4096;
    share
        .clamp(AUTO_MIN, AUTO_MAX)
        .max(min_ring_bytes(max_frag))
}

/// Where everything lives in one node's segment.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) local_size: usize,
    /// Data bytes of one ring (multiple of 64).
    pub(crate) ring_bytes: usize,
    pub(crate) max_frag: usize,
    coop_off: usize,
    rings_off: usize,
    /// Whole segment.
    pub(crate) total: usize,
}

impl fmt::Debug for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Layout")
            .field("local_size", &self.local_size)
            .field("ring_bytes", &self.ring_bytes)
            .field("max_frag", &self.max_frag)
            .field("total", &self.total)
            .finish()
    }
}

impl Layout {
    /// Compute the layout; `ring_bytes` `None` means automatic, an explicit
    /// value is rounded up to a multiple of 64 and to [`min_ring_bytes`].
    pub(crate) fn new(
        local_size: usize,
        ring_bytes: Option<usize>,
        max_frag: usize,
    ) -> Result<Self, String> {
        if local_size == 0 || local_size > u32::MAX as usize {
            return Err(format!("invalid local_size {local_size}"));
        }
        if !(MIN_FRAG..=MAX_FRAG_LIMIT).contains(&max_frag) {
            return Err(format!(
                "max_frag {max_frag} outside {MIN_FRAG}..={MAX_FRAG_LIMIT}"
            ));
        }
        let ring_bytes = match ring_bytes {
            None => auto_ring_bytes(local_size, max_frag),
            Some(b) => b
                .checked_next_multiple_of(LINE)
                .ok_or_else(|| format!("ring_bytes {b} too large"))?
                .max(min_ring_bytes(max_frag)),
        };
        let coop_off = HEADER_BYTES + local_size * RANK_CTRL_BYTES;
        let rings_off = coop_off + local_size * COOP_SLOTS * LINE;
        let total = (local_size * (local_size - 1))
            .checked_mul(RING_CTRL_BYTES + ring_bytes)
            .and_then(|r| r.checked_add(rings_off))
            .ok_or_else(|| "segment size overflows".to_string())?;
        Ok(Self {
            local_size,
            ring_bytes,
            max_frag,
            coop_off,
            rings_off,
            total,
        })
    }

    /// Offset of local rank `r`'s control block.
    pub(crate) fn rank_ctrl(&self, r: usize) -> usize {
        debug_assert!(r < self.local_size);
        HEADER_BYTES + r * RANK_CTRL_BYTES
    }

    /// Offset of cooperative-copy slot `i` of local rank `r`.
    pub(crate) fn coop_slot(&self, r: usize, i: usize) -> usize {
        debug_assert!(r < self.local_size && i < COOP_SLOTS);
        self.coop_off + (r * COOP_SLOTS + i) * LINE
    }

    /// Offset of the control lines of the ring `sender -> receiver`
    /// (its data follows at `+ RING_CTRL_BYTES`).
    pub(crate) fn ring(&self, sender: usize, receiver: usize) -> usize {
        debug_assert!(sender != receiver && sender.max(receiver) < self.local_size);
        let slot = if sender < receiver {
            sender
        } else {
            sender - 1
        };
        let k = receiver * (self.local_size - 1) + slot;
        self.rings_off + k * (RING_CTRL_BYTES + self.ring_bytes)
    }

    /// Bytes of the segment attributable to one rank: its incoming rings, its
    /// control block, its cooperative-copy slots and its share of the header
    /// (rounded up).
    pub(crate) fn memory_per_rank(&self) -> usize {
        self.total.div_ceil(self.local_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_rejects_garbage() {
        for k in [
            Kind::Pad,
            Kind::Data(0),
            Kind::Data(32 << 10),
            Kind::Data(u32::MAX),
            Kind::Ctrl(0),
            Kind::Ctrl(40),
        ] {
            assert_eq!(decode(encode(k)), Some(k));
        }
        assert_eq!(decode(0), None);
        assert_eq!(decode(u64::MAX), None);
        assert_eq!(decode(encode(Kind::Pad) | 5), None);
    }

    #[test]
    fn auto_ring_sizes_follow_the_formula() {
        assert_eq!(auto_ring_bytes(2, 32 << 10), 1 << 20);
        assert_eq!(auto_ring_bytes(16, 32 << 10), 1 << 20);
        assert_eq!(auto_ring_bytes(64, 32 << 10), 256 << 10);
        assert_eq!(auto_ring_bytes(3, 32 << 10), 1 << 20);
        assert_eq!(auto_ring_bytes(100, 32 << 10), 163_840);
        // 16 MiB / 1024 = 16 KiB -> 64 KiB, then raised to 2*max_frag + 64.
        assert_eq!(auto_ring_bytes(1024, 32 << 10), min_ring_bytes(32 << 10));
        assert!(min_ring_bytes(32 << 10) >= 2 * (32 << 10) + 64);
    }

    #[test]
    fn share_is_bounded_at_64_ranks() {
        let l = Layout::new(64, None, crate::DEFAULT_MAX_FRAG).unwrap();
        assert!(l.memory_per_rank() <= 16 << 20, "{}", l.memory_per_rank());
        let l = Layout::new(2, None, crate::DEFAULT_MAX_FRAG).unwrap();
        assert_eq!(
            l.total,
            64 + 2 * 128 + 2 * COOP_SLOTS * 64 + 2 * (128 + (1 << 20))
        );
        for n in 1..=127 {
            let l = Layout::new(n, None, crate::DEFAULT_MAX_FRAG).unwrap();
            assert!(l.memory_per_rank() <= 16 << 20, "{n} ranks: {l:?}");
        }
        // Beyond, every ring is at its floor: two largest records.
        let l = Layout::new(256, None, crate::DEFAULT_MAX_FRAG).unwrap();
        assert_eq!(l.ring_bytes, min_ring_bytes(crate::DEFAULT_MAX_FRAG));
        assert!(l.memory_per_rank() <= 33 << 20, "{l:?}");
    }

    #[test]
    fn rings_are_disjoint_and_grouped_by_receiver() {
        let l = Layout::new(5, Some(1000), 64).unwrap();
        assert_eq!(l.ring_bytes % LINE, 0);
        let mut seen = Vec::new();
        for r in 0..5 {
            for s in (0..5).filter(|&s| s != r) {
                let off = l.ring(s, r);
                assert_eq!(off % LINE, 0);
                assert!(off + RING_CTRL_BYTES + l.ring_bytes <= l.total);
                seen.push(off);
            }
        }
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, seen, "receiver-major order, no overlap");
        // The cooperative-copy slots lie between the control blocks and the
        // first ring, one line each.
        assert!(l.coop_slot(0, 0) >= l.rank_ctrl(4) + RANK_CTRL_BYTES);
        assert_eq!(l.coop_slot(4, COOP_SLOTS - 1) + LINE, l.ring(1, 0));
        assert_eq!(l.coop_slot(1, 0) - l.coop_slot(0, COOP_SLOTS - 1), LINE);
    }

    #[test]
    fn rejects_bad_parameters() {
        assert!(Layout::new(0, None, 4096).is_err());
        assert!(Layout::new(2, None, 8).is_err());
        assert!(Layout::new(2, Some(usize::MAX), 4096).is_err());
        assert!(Layout::new(1 << 31, None, 4096).is_err());
    }
}
