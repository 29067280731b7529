//! Wire format of the tcp transport (pure encoding and validation, no I/O).
//!
//! # Handshake (fixed-size messages)
//! Every message opens with a 12-byte prefix: the magic `gmpi-tcp`, the
//! version (u16, little-endian), the message kind (u8) and a zero byte.
//!
//! | message | from | after the prefix | bytes |
//! |---|---|---|---|
//! | `HELLO` | client | client rank u32, server rank u32, client nonce [32] | 52 |
//! | `CHALLENGE` | server | server nonce [32], server proof [32] | 76 |
//! | `PROOF` | client | client proof [32] | 44 |
//! | `VERDICT` | server | verdict u8 (1 welcome, 2 duplicate, 3 closed), 3 zero bytes | 16 |
//!
//! # Frames (after `VERDICT` = welcome)
//! An 8-byte header — payload length u32 (little-endian), kind u8
//! (1 `DATA`, 2 `GOODBYE`), three zero bytes — then the payload. A `DATA`
//! payload is one whole fragment (at most the transport's `max_send_size`);
//! `GOODBYE` has none and means "this rank is done and closes cleanly".
//! Anything else is a [`WireError`], which closes the connection.

use gmpi_btl::Rank;

use crate::auth::{Nonce, Proof, MAC_LEN, NONCE_LEN};

/// First bytes of every handshake message.
pub const MAGIC: [u8; 8] = *b"gmpi-tcp";
/// Wire version.
pub const VERSION: u16 = 1;
/// Bytes of the prefix common to every handshake message.
const PREFIX: usize = 12;
/// Bytes of a frame header.
pub const FRAME_HDR: usize = 8;
/// The largest handshake message.
pub const MAX_HANDSHAKE: usize = CHALLENGE_LEN;

/// Bytes of `HELLO`.
pub const HELLO_LEN: usize = PREFIX + 8 + NONCE_LEN;
/// Bytes of `CHALLENGE`.
pub const CHALLENGE_LEN: usize = PREFIX + NONCE_LEN + MAC_LEN;
/// Bytes of `PROOF`.
pub const PROOF_LEN: usize = PREFIX + MAC_LEN;
/// Bytes of `VERDICT`.
pub const VERDICT_LEN: usize = PREFIX + 4;

/// Handshake message kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum HsKind {
    /// Client: who I am, who I want, my nonce.
    Hello = 1,
    /// Server: my nonce and my proof.
    Challenge = 2,
    /// Client: my proof.
    Proof = 3,
    /// Server: whether the connection is kept.
    Verdict = 4,
}

impl HsKind {
    /// Encoded length of this message.
    pub fn wire_len(self) -> usize {
        match self {
            HsKind::Hello => HELLO_LEN,
            HsKind::Challenge => CHALLENGE_LEN,
            HsKind::Proof => PROOF_LEN,
            HsKind::Verdict => VERDICT_LEN,
        }
    }
}

/// The server's decision on an authenticated connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Kept: frames may flow.
    Welcome = 1,
    /// Refused because the server's own connection to the client wins (it
    /// comes from the lower rank); the client waits for that one.
    Duplicate = 2,
    /// Refused because the server considers the client failed or finished.
    Closed = 3,
}

/// A decoded handshake message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hs {
    /// See [`HsKind::Hello`].
    Hello {
        /// Rank of the connecting process.
        client: Rank,
        /// Rank it wants to reach.
        server: Rank,
        /// Its nonce.
        nonce: Nonce,
    },
    /// See [`HsKind::Challenge`].
    Challenge {
        /// The server's nonce.
        nonce: Nonce,
        /// The server's proof.
        proof: Proof,
    },
    /// See [`HsKind::Proof`].
    Proof {
        /// The client's proof.
        proof: Proof,
    },
    /// See [`HsKind::Verdict`].
    Verdict(Verdict),
}

/// A frame kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// One fragment.
    Data = 1,
    /// Clean close.
    Goodbye = 2,
    /// One fragment whose body the receiver may take as it arrives
    /// ([`gmpi_btl::Event::FragStream`]).
    Stream = 3,
}

/// Bad bytes on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Not a gmpi-tcp handshake.
    #[error("bad magic (not a gmpi tcp connection)")]
    BadMagic,
    /// Another wire version.
    #[error("wire version {0} (this build speaks {VERSION})")]
    BadVersion(u16),
    /// A handshake message out of turn.
    #[error("handshake message of kind {got} where kind {want:?} was expected")]
    UnexpectedKind {
        /// Expected.
        want: HsKind,
        /// Received.
        got: u8,
    },
    /// Unknown verdict.
    #[error("unknown verdict {0}")]
    BadVerdict(u8),
    /// Reserved bytes not zero.
    #[error("reserved bytes are not zero")]
    Reserved,
    /// Unknown frame kind.
    #[error("unknown frame kind {0}")]
    BadFrameKind(u8),
    /// A frame longer than allowed.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A goodbye with a payload.
    #[error("goodbye frame with {0} payload bytes")]
    GoodbyeWithPayload(usize),
    /// Wrong number of bytes for the message.
    #[error("handshake message of {got} bytes, {want} expected")]
    Length {
        /// Expected.
        want: usize,
        /// Given.
        got: usize,
    },
}

fn prefix(kind: HsKind, out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(kind as u8);
    out.push(0);
}

/// Encode a handshake message.
pub fn encode_hs(m: &Hs) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAX_HANDSHAKE);
    match m {
        Hs::Hello {
            client,
            server,
            nonce,
        } => {
            prefix(HsKind::Hello, &mut out);
            out.extend_from_slice(&client.to_le_bytes());
            out.extend_from_slice(&server.to_le_bytes());
            out.extend_from_slice(nonce);
        }
        Hs::Challenge { nonce, proof } => {
            prefix(HsKind::Challenge, &mut out);
            out.extend_from_slice(nonce);
            out.extend_from_slice(proof);
        }
        Hs::Proof { proof } => {
            prefix(HsKind::Proof, &mut out);
            out.extend_from_slice(proof);
        }
        Hs::Verdict(v) => {
            prefix(HsKind::Verdict, &mut out);
            out.extend_from_slice(&[*v as u8, 0, 0, 0]);
        }
    }
    out
}

/// Decode the handshake message of kind `want` from exactly `want.wire_len()` bytes.
pub fn decode_hs(want: HsKind, b: &[u8]) -> Result<Hs, WireError> {
    if b.len() != want.wire_len() {
        return Err(WireError::Length {
            want: want.wire_len(),
            got: b.len(),
        });
    }
    if b[..8] != MAGIC {
        return Err(WireError::BadMagic);
    }
    let version = u16::from_le_bytes([b[8], b[9]]);
    if version != VERSION {
        return Err(WireError::BadVersion(version));
    }
    if b[10] != want as u8 {
        return Err(WireError::UnexpectedKind { want, got: b[10] });
    }
    if b[11] != 0 {
        return Err(WireError::Reserved);
    }
    let body = &b[PREFIX..];
    let arr32 = |o: usize| -> [u8; 32] { body[o..o + 32].try_into().expect("32 bytes") };
    let u32_at = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().expect("4 bytes"));
    Ok(match want {
        HsKind::Hello => Hs::Hello {
            client: u32_at(0),
            server: u32_at(4),
            nonce: arr32(8),
        },
        HsKind::Challenge => Hs::Challenge {
            nonce: arr32(0),
            proof: arr32(32),
        },
        HsKind::Proof => Hs::Proof { proof: arr32(0) },
        HsKind::Verdict => {
            if body[1..4] != [0, 0, 0] {
                return Err(WireError::Reserved);
            }
            Hs::Verdict(match body[0] {
                1 => Verdict::Welcome,
                2 => Verdict::Duplicate,
                3 => Verdict::Closed,
                v => return Err(WireError::BadVerdict(v)),
            })
        }
    })
}

/// Encode a frame header.
pub fn frame_header(kind: FrameKind, len: usize) -> [u8; FRAME_HDR] {
    let l = u32::try_from(len).expect("frame length checked against max_send_size");
    let mut h = [0u8; FRAME_HDR];
    h[..4].copy_from_slice(&l.to_le_bytes());
    h[4] = kind as u8;
    h
}

/// Validate a frame header: its kind and payload length (at most `max` for
/// `DATA`, zero for `GOODBYE`).
pub fn decode_frame_header(
    h: &[u8; FRAME_HDR],
    max: usize,
) -> Result<(FrameKind, usize), WireError> {
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    if h[5..] != [0, 0, 0] {
        return Err(WireError::Reserved);
    }
    match h[4] {
        1 if len <= max => Ok((FrameKind::Data, len)),
        1 => Err(WireError::TooLong { len, max }),
        2 if len == 0 => Ok((FrameKind::Goodbye, 0)),
        2 => Err(WireError::GoodbyeWithPayload(len)),
        3 if len <= max => Ok((FrameKind::Stream, len)),
        3 => Err(WireError::TooLong { len, max }),
        k => Err(WireError::BadFrameKind(k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn handshake_round_trips() {
        let msgs = [
            Hs::Hello {
                client: 3,
                server: 9,
                nonce: [5; 32],
            },
            Hs::Challenge {
                nonce: [1; 32],
                proof: [2; 32],
            },
            Hs::Proof { proof: [4; 32] },
            Hs::Verdict(Verdict::Welcome),
            Hs::Verdict(Verdict::Duplicate),
            Hs::Verdict(Verdict::Closed),
        ];
        for m in msgs {
            let kind = match m {
                Hs::Hello { .. } => HsKind::Hello,
                Hs::Challenge { .. } => HsKind::Challenge,
                Hs::Proof { .. } => HsKind::Proof,
                Hs::Verdict(_) => HsKind::Verdict,
            };
            let b = encode_hs(&m);
            assert_eq!(b.len(), kind.wire_len());
            assert_eq!(decode_hs(kind, &b).unwrap(), m);
        }
    }

    #[test]
    fn handshake_rejects_bad_bytes() {
        let good = encode_hs(&Hs::Verdict(Verdict::Welcome));
        let mut b = good.clone();
        b[0] = b'G';
        assert_eq!(decode_hs(HsKind::Verdict, &b), Err(WireError::BadMagic));
        let mut b = good.clone();
        b[8] = 9;
        assert_eq!(
            decode_hs(HsKind::Verdict, &b),
            Err(WireError::BadVersion(9))
        );
        assert!(matches!(
            decode_hs(
                HsKind::Proof,
                &encode_hs(&Hs::Proof { proof: [0; 32] })[..40]
            ),
            Err(WireError::Length { .. })
        ));
        let mut b = good.clone();
        b[12] = 7;
        assert_eq!(
            decode_hs(HsKind::Verdict, &b),
            Err(WireError::BadVerdict(7))
        );
        let mut b = good.clone();
        b[15] = 1;
        assert_eq!(decode_hs(HsKind::Verdict, &b), Err(WireError::Reserved));
        let hello = encode_hs(&Hs::Hello {
            client: 0,
            server: 1,
            nonce: [0; 32],
        });
        assert!(matches!(
            decode_hs(HsKind::Proof, &hello[..PROOF_LEN]),
            Err(WireError::UnexpectedKind { .. })
        ));
    }

    #[test]
    fn frame_headers() {
        let h = frame_header(FrameKind::Data, 100);
        assert_eq!(decode_frame_header(&h, 100), Ok((FrameKind::Data, 100)));
        assert_eq!(
            decode_frame_header(&h, 99),
            Err(WireError::TooLong { len: 100, max: 99 })
        );
        let g = frame_header(FrameKind::Goodbye, 0);
        assert_eq!(decode_frame_header(&g, 10), Ok((FrameKind::Goodbye, 0)));
        let mut g2 = g;
        g2[0] = 1;
        assert_eq!(
            decode_frame_header(&g2, 10),
            Err(WireError::GoodbyeWithPayload(1))
        );
        let mut k = h;
        k[4] = 0;
        assert_eq!(
            decode_frame_header(&k, 100),
            Err(WireError::BadFrameKind(0))
        );
        let mut r = h;
        r[7] = 1;
        assert_eq!(decode_frame_header(&r, 100), Err(WireError::Reserved));
    }

    proptest! {
        #[test]
        fn any_frame_header_decodes_or_errors(h in any::<[u8; FRAME_HDR]>(), max in 0usize..1 << 20) {
            match decode_frame_header(&h, max) {
                Ok((FrameKind::Data, len)) => prop_assert!(len <= max && h[4] == 1),
                Ok((FrameKind::Goodbye, len)) => prop_assert!(len == 0 && h[4] == 2),
                Ok((FrameKind::Stream, len)) => prop_assert!(len <= max && h[4] == 3),
                Err(_) => {}
            }
        }

        #[test]
        fn any_handshake_bytes_decode_or_error(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            for k in [HsKind::Hello, HsKind::Challenge, HsKind::Proof, HsKind::Verdict] {
                if let Ok(m) = decode_hs(k, &b) {
                    prop_assert_eq!(encode_hs(&m), b.clone());
                }
            }
        }
    }
}
