//! Connection messages: how two ranks set up their RC queue pair on first
//! use, as datagrams between their ports' UD queue pairs (whose addresses
//! the cards carry). Pure: the format and the retry schedule.
//!
//! A rank that has something for a peer it has no queue pair with makes
//! one (INIT) and sends **REQ** (its queue pair's number and first PSN). The
//! peer makes its own queue pair if it has none, connects it to the asker's
//! (INIT → RTR → RTS) and answers **REP** with its own. The asker connects,
//! may send from then on (the peer's queue pair is ready to receive), and
//! says so with **RTU**; the peer may send once it has the RTU or anything
//! that arrived on the queue pair (the asker's queue pair is then ready).
//! When both ask at once, each answers the other's REQ as above and each
//! takes the other's REP: one queue pair per pair of ranks all the same.
//!
//! Datagrams may be lost: an asker repeats REQ on a schedule
//! ([`retry_after`]), and every REQ is answered (REP is idempotent), so a
//! lost REP or RTU costs a repeat, never the connection. A rank that must
//! send but has neither RTU nor traffic asks again itself.
//!
//! Every message names its sender and receiver rank and carries the
//! sender's nonce from its card: a message from another job or an earlier
//! run of a rank (a stale datagram, a reused QPN) is dropped.

use std::time::Duration;

use gmpi_btl::Rank;

/// Bytes of a connection message.
pub const MSG_BYTES: usize = 32;

/// The first four bytes of every message ("gmCM", little-endian).
const MAGIC: u32 = 0x4d43_6d67;

/// What a connection message asks or says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Connect to my queue pair, and tell me yours.
    Req = 1,
    /// Mine is connected to yours: yours may send now.
    Rep = 2,
    /// Mine is connected too: yours may send now.
    Rtu = 3,
}

/// One connection message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg {
    /// What it is.
    pub kind: Kind,
    /// The sender's rank.
    pub from: Rank,
    /// The rank it is for.
    pub to: Rank,
    /// The sender's nonce (its card's).
    pub nonce: u64,
    /// The sender's RC queue pair for this pair of ranks.
    pub qpn: u32,
    /// That queue pair's first PSN.
    pub psn: u32,
}

impl Msg {
    /// Its bytes.
    pub fn encode(&self) -> [u8; MSG_BYTES] {
        let mut b = [0u8; MSG_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = self.kind as u8;
        b[8..12].copy_from_slice(&self.from.to_le_bytes());
        b[12..16].copy_from_slice(&self.to.to_le_bytes());
        b[16..24].copy_from_slice(&self.nonce.to_le_bytes());
        b[24..28].copy_from_slice(&self.qpn.to_le_bytes());
        b[28..32].copy_from_slice(&self.psn.to_le_bytes());
        b
    }

    /// Read a message (every field checked).
    pub fn decode(b: &[u8]) -> Result<Msg, String> {
        if b.len() != MSG_BYTES {
            return Err(format!("a datagram of {} bytes, not {MSG_BYTES}", b.len()));
        }
        let u32_at = |k: usize| u32::from_le_bytes(b[k..k + 4].try_into().expect("4 bytes"));
        if u32_at(0) != MAGIC {
            return Err("not a gmpi connection message".into());
        }
        let kind = match b[4] {
            1 => Kind::Req,
            2 => Kind::Rep,
            3 => Kind::Rtu,
            k => return Err(format!("unknown connection message kind {k}")),
        };
        let (qpn, psn) = (u32_at(24), u32_at(28));
        if qpn >= 1 << 24 || psn >= 1 << 24 {
            return Err("QPN or PSN wider than 24 bits".into());
        }
        Ok(Msg {
            kind,
            from: u32_at(8),
            to: u32_at(12),
            nonce: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
            qpn,
            psn,
        })
    }
}

/// The first wait for an answer to REQ.
pub const RETRY_FIRST: Duration = Duration::from_millis(20);

/// The longest wait between two REQs.
pub const RETRY_MAX: Duration = Duration::from_secs(1);

/// How long an asker waits for an answer before it asks again, after its
/// `tries`-th REQ (from 1): 20 ms, doubling, at most 1 s. It never gives up:
/// a peer computing outside MPI answers only at its next MPI call, and a
/// peer that died ends the job through the launcher.
pub fn retry_after(tries: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1 << tries.saturating_sub(1).min(16))
        .min(RETRY_MAX)
}

/// How long an asker waits before it says (once, as a warning) that a peer
/// has not answered.
pub const SLOW_ANSWER: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_refused() {
        for kind in [Kind::Req, Kind::Rep, Kind::Rtu] {
            let m = Msg {
                kind,
                from: 3,
                to: 70_000,
                nonce: 0x0123_4567_89ab_cdef,
                qpn: 0xab_cdef,
                psn: 0x12_3456,
            };
            assert_eq!(Msg::decode(&m.encode()), Ok(m));
        }
        let good = Msg {
            kind: Kind::Req,
            from: 1,
            to: 2,
            nonce: 9,
            qpn: 5,
            psn: 6,
        }
        .encode();
        assert!(Msg::decode(&good[..31]).is_err());
        let mut b = good;
        b[0] ^= 1;
        assert!(Msg::decode(&b).unwrap_err().contains("not a gmpi"));
        let mut b = good;
        b[4] = 9;
        assert!(Msg::decode(&b).unwrap_err().contains("kind 9"));
        let mut b = good;
        b[27] = 1;
        assert!(Msg::decode(&b).unwrap_err().contains("24 bits"));
    }

    #[test]
    fn retries_back_off_to_a_second() {
        assert_eq!(retry_after(1), Duration::from_millis(20));
        assert_eq!(retry_after(2), Duration::from_millis(40));
        assert_eq!(retry_after(6), Duration::from_millis(640));
        assert_eq!(retry_after(7), RETRY_MAX);
        assert_eq!(retry_after(u32::MAX), RETRY_MAX);
    }
}
