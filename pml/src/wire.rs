//! The wire format of pml fragments (one place, like ob1's `pml_ob1_hdr.h`):
//! encoding, and decoding that turns any malformed input into a [`WireError`].
//!
//! Every fragment starts with a 4-byte preamble `[type, flags, version, 0]`.
//! Integers are little-endian. Fields are appended in later versions, never
//! reordered; a receiver rejects a version it does not know.
//!
//! | type  | after the preamble                                          | then        |
//! |-------|-------------------------------------------------------------|-------------|
//! | MATCH | ctx u32, src u32, tag i32, seq u32, len u64, sreq u64       | payload     |
//! | SHORT | ctx u32, src u32, tag i32, seq u32, len u32                 | payload     |
//! | TINY  | ctx u16, src u16, tag i32, seq u32                          | payload     |
//! | RNDV  | the MATCH fields, then a [`MemDesc`] if flag `HAS_DESC`     | —           |
//! | RNDV_IPC | the MATCH fields                                         | CUDA IPC descriptor (`IpcDesc`, 96 bytes) |
//! | ACK   | sreq u64                                                    | —           |
//! | CTS   | sreq u64, rreq u64, want u64 (flag `PULL`)                  | —           |
//! | FRAG  | rreq u64, offset u64                                        | payload     |
//! | FIN   | sreq u64                                                    | —           |
//! | CHUNK | rreq u64, offset u64, len u64, then a [`MemDesc`]           | —           |
//! | CHUNK_ACK | sreq u64, offset u64                                    | —           |
//!
//! CTS with flag `PULL`: the receiver's transport can `get`, so a sender
//! whose data is device memory stages it chunk by chunk into pinned host
//! memory and offers each chunk by a CHUNK (where to get it) instead of
//! streaming FRAGs; the receiver answers each pulled chunk with a
//! CHUNK_ACK, which frees its staging memory (`rndv/staged.rs`).
//!
//! SHORT (version 2) is the MATCH of a plain eager message, the latency
//! path: no flags, no sender request to answer (`sreq` 0) and a length that
//! fits in 32 bits. Its 24 bytes instead of 36 make an 8-byte message a
//! 40-byte shared-memory ring record instead of 56 (with the 8-byte
//! terminator after it, 48 bytes instead of 64 per message: fewer cache
//! lines moving between the cores). It decodes to the same [`Hdr::Match`]
//! (flags 0, `sreq` 0), so nothing above the codec tells the two apart.
//!
//! TINY (version 3) is SHORT where the context id and the sender's rank fit
//! in 16 bits (a job's first 32,768 communicators, ranks below 65,536): 16
//! bytes, and no length field, because a MATCH always travels in one
//! fragment with its whole payload, so the payload's length is the
//! fragment's length less the header. An 8-byte message is then a 32-byte
//! ring record: two per cache line, never one straddling two lines. It also
//! decodes to the same [`Hdr::Match`].

use gmpi_btl::MemDesc;

use crate::error::WireError;
use gmpi_mem::IpcDesc;

/// Wire version written by this build.
pub const VERSION: u8 = 3;

/// Largest header this module encodes.
pub const MAX_HDR: usize = 72;

const T_MATCH: u8 = 1;
const T_RNDV: u8 = 2;
const T_ACK: u8 = 3;
const T_CTS: u8 = 4;
const T_FRAG: u8 = 5;
const T_FIN: u8 = 6;
const T_RNDV_IPC: u8 = 7;
const T_SHORT: u8 = 8;
const T_TINY: u8 = 9;
const T_CHUNK: u8 = 10;
const T_CHUNK_ACK: u8 = 11;

/// Flag: the sender wants an ACK when the message is matched (synchronous mode).
pub const F_SYNC: u8 = 1;
/// Flag: a RNDV header carries a memory descriptor for `get`.
pub const F_HAS_DESC: u8 = 2;
/// Flag: a CTS's receiver can `get` staged chunks (CHUNK) instead of FRAGs.
pub const F_PULL: u8 = 4;

/// The envelope and identity of a message, shared by MATCH and RNDV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchHdr {
    /// Context id of the communicator.
    pub ctx: u32,
    /// Sender's rank in that communicator.
    pub src: u32,
    /// Tag.
    pub tag: i32,
    /// Per-peer sequence number.
    pub seq: u32,
    /// Total message length in bytes.
    pub len: u64,
    /// Sender's request id (for ACK / CTS / FIN).
    pub sreq: u64,
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hdr {
    /// Eager message; the payload follows the header.
    Match {
        /// Flags (`F_SYNC`).
        flags: u8,
        /// Envelope.
        m: MatchHdr,
    },
    /// Rendezvous request-to-send.
    Rndv {
        /// Flags (`F_SYNC`, `F_HAS_DESC`).
        flags: u8,
        /// Envelope.
        m: MatchHdr,
        /// Where the receiver may `get` the data from.
        desc: Option<MemDesc>,
    },
    /// Synchronous eager message was matched.
    Ack {
        /// Sender request.
        sreq: u64,
    },
    /// Clear to send: stream `want` bytes as FRAGs to `rreq` (or, `pull`,
    /// offer staged chunks by CHUNK).
    Cts {
        /// Sender request.
        sreq: u64,
        /// Receiver request.
        rreq: u64,
        /// Bytes the receiver accepts.
        want: u64,
        /// The receiver can get staged chunks (flag `F_PULL`).
        pull: bool,
    },
    /// A staged chunk of the message is ready for the receiver's get.
    Chunk {
        /// Receiver request.
        rreq: u64,
        /// Offset of the chunk in the message.
        offset: u64,
        /// Its length.
        len: u64,
        /// Where to get it (the sender's pinned staging memory).
        desc: MemDesc,
    },
    /// The chunk at `offset` was pulled: its staging memory is free.
    ChunkAck {
        /// Sender request.
        sreq: u64,
        /// Offset of the chunk in the message.
        offset: u64,
    },
    /// A chunk of a pipelined rendezvous.
    Frag {
        /// Receiver request.
        rreq: u64,
        /// Offset of the payload in the message.
        offset: u64,
    },
    /// Rendezvous request-to-send of device memory by CUDA IPC: the
    /// descriptor (an [`IpcDesc`]) follows as the payload.
    RndvIpc {
        /// Flags (`F_SYNC`).
        flags: u8,
        /// Envelope.
        m: MatchHdr,
    },
    /// The receiver has finished reading the sender's memory.
    Fin {
        /// Sender request.
        sreq: u64,
    },
}

/// An encoded header, kept inline (no allocation per message).
#[derive(Clone, Copy)]
pub struct HdrBuf {
    buf: [u8; MAX_HDR],
    len: u8,
}

impl std::fmt::Debug for HdrBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HdrBuf({:?})", Hdr::decode(self.as_bytes()).map(|h| h.0))
    }
}

impl HdrBuf {
    /// The encoded bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    /// Whether this is a FRAG (a rendezvous chunk, whose receiver may read
    /// the payload as it arrives: [`gmpi_btl::Btl::send_stream`]).
    #[inline]
    pub fn is_frag(&self) -> bool {
        self.buf[0] == T_FRAG
    }
}

// Fixed offsets of the layout in the module table.
const MATCH_LEN: usize = 36;
const SHORT_LEN: usize = 24;
const TINY_LEN: usize = 16;
const RNDV_DESC_LEN: usize = MATCH_LEN + MemDesc::WIRE_LEN;
const ONE_U64_LEN: usize = 12;
const CTS_LEN: usize = 28;
const FRAG_LEN: usize = 20;
const CHUNK_LEN: usize = 28 + MemDesc::WIRE_LEN;
const CHUNK_ACK_LEN: usize = 20;

#[inline]
fn put32(b: &mut [u8; MAX_HDR], o: usize, v: [u8; 4]) {
    b[o..o + 4].copy_from_slice(&v);
}

#[inline]
fn put64(b: &mut [u8; MAX_HDR], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// Four bytes at `o`; the caller checked the length, so the conversion
/// cannot fail (an out-of-range `o` panics in the slice index, never UB).
#[inline]
fn get32(b: &[u8], o: usize) -> [u8; 4] {
    b[o..o + 4].try_into().unwrap_or([0; 4])
}

#[inline]
fn get64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]))
}

fn truncated(what: &'static str, need: usize, got: usize) -> WireError {
    WireError::Truncated { what, need, got }
}

impl MatchHdr {
    #[inline]
    fn write(&self, b: &mut [u8; MAX_HDR]) {
        put32(b, 4, self.ctx.to_le_bytes());
        put32(b, 8, self.src.to_le_bytes());
        put32(b, 12, self.tag.to_le_bytes());
        put32(b, 16, self.seq.to_le_bytes());
        put64(b, 20, self.len);
        put64(b, 28, self.sreq);
    }

    /// Whether this envelope goes out as a TINY header under `flags`.
    #[inline]
    fn fits_tiny(&self, flags: u8) -> bool {
        self.fits_short(flags) && self.ctx <= u32::from(u16::MAX) && self.src <= u32::from(u16::MAX)
    }

    /// Read a TINY header from a fragment `b` known to hold at least
    /// `TINY_LEN` bytes: the payload is the rest of the fragment.
    #[inline]
    fn read_tiny(b: &[u8]) -> Self {
        let get16 = |o: usize| u32::from(u16::from_le_bytes([b[o], b[o + 1]]));
        MatchHdr {
            ctx: get16(4),
            src: get16(6),
            tag: i32::from_le_bytes(get32(b, 8)),
            seq: u32::from_le_bytes(get32(b, 12)),
            len: (b.len() - TINY_LEN) as u64,
            sreq: 0,
        }
    }

    /// Whether this envelope goes out as a SHORT header under `flags`.
    #[inline]
    fn fits_short(&self, flags: u8) -> bool {
        flags == 0 && self.sreq == 0 && self.len <= u64::from(u32::MAX)
    }

    /// Read a SHORT header from a buffer known to hold at least
    /// `SHORT_LEN` bytes.
    #[inline]
    fn read_short(b: &[u8]) -> Self {
        MatchHdr {
            ctx: u32::from_le_bytes(get32(b, 4)),
            src: u32::from_le_bytes(get32(b, 8)),
            tag: i32::from_le_bytes(get32(b, 12)),
            seq: u32::from_le_bytes(get32(b, 16)),
            len: u64::from(u32::from_le_bytes(get32(b, 20))),
            sreq: 0,
        }
    }

    /// Read from a buffer known to hold at least `MATCH_LEN` bytes.
    #[inline]
    fn read(b: &[u8]) -> Self {
        MatchHdr {
            ctx: u32::from_le_bytes(get32(b, 4)),
            src: u32::from_le_bytes(get32(b, 8)),
            tag: i32::from_le_bytes(get32(b, 12)),
            seq: u32::from_le_bytes(get32(b, 16)),
            len: get64(b, 20),
            sreq: get64(b, 28),
        }
    }
}

impl Hdr {
    /// Encode into an inline buffer.
    #[inline]
    pub fn encode(&self) -> HdrBuf {
        let mut b = [0u8; MAX_HDR];
        b[2] = VERSION;
        let len = match self {
            Hdr::Match { flags, m } if m.fits_tiny(*flags) => {
                b[0] = T_TINY;
                // `fits_tiny` checked that both fit in 16 bits.
                b[4..6].copy_from_slice(&(m.ctx as u16).to_le_bytes());
                b[6..8].copy_from_slice(&(m.src as u16).to_le_bytes());
                put32(&mut b, 8, m.tag.to_le_bytes());
                put32(&mut b, 12, m.seq.to_le_bytes());
                TINY_LEN
            }
            Hdr::Match { flags, m } if m.fits_short(*flags) => {
                b[0] = T_SHORT;
                put32(&mut b, 4, m.ctx.to_le_bytes());
                put32(&mut b, 8, m.src.to_le_bytes());
                put32(&mut b, 12, m.tag.to_le_bytes());
                put32(&mut b, 16, m.seq.to_le_bytes());
                put32(&mut b, 20, (m.len as u32).to_le_bytes());
                SHORT_LEN
            }
            Hdr::Match { flags, m } => {
                b[0] = T_MATCH;
                b[1] = *flags;
                m.write(&mut b);
                MATCH_LEN
            }
            Hdr::Rndv { flags, m, desc } => {
                b[0] = T_RNDV;
                b[1] = (*flags & !F_HAS_DESC) | if desc.is_some() { F_HAS_DESC } else { 0 };
                m.write(&mut b);
                match desc {
                    Some(d) => {
                        put64(&mut b, MATCH_LEN, d.addr);
                        put64(&mut b, MATCH_LEN + 8, d.len);
                        put64(&mut b, MATCH_LEN + 16, d.key);
                        RNDV_DESC_LEN
                    }
                    None => MATCH_LEN,
                }
            }
            Hdr::RndvIpc { flags, m } => {
                b[0] = T_RNDV_IPC;
                b[1] = *flags;
                m.write(&mut b);
                MATCH_LEN
            }
            Hdr::Ack { sreq } | Hdr::Fin { sreq } => {
                b[0] = if matches!(self, Hdr::Ack { .. }) {
                    T_ACK
                } else {
                    T_FIN
                };
                put64(&mut b, 4, *sreq);
                ONE_U64_LEN
            }
            Hdr::Cts {
                sreq,
                rreq,
                want,
                pull,
            } => {
                b[0] = T_CTS;
                b[1] = if *pull { F_PULL } else { 0 };
                put64(&mut b, 4, *sreq);
                put64(&mut b, 12, *rreq);
                put64(&mut b, 20, *want);
                CTS_LEN
            }
            Hdr::Frag { rreq, offset } => {
                b[0] = T_FRAG;
                put64(&mut b, 4, *rreq);
                put64(&mut b, 12, *offset);
                FRAG_LEN
            }
            Hdr::Chunk {
                rreq,
                offset,
                len,
                desc,
            } => {
                b[0] = T_CHUNK;
                put64(&mut b, 4, *rreq);
                put64(&mut b, 12, *offset);
                put64(&mut b, 20, *len);
                put64(&mut b, 28, desc.addr);
                put64(&mut b, 36, desc.len);
                put64(&mut b, 44, desc.key);
                CHUNK_LEN
            }
            Hdr::ChunkAck { sreq, offset } => {
                b[0] = T_CHUNK_ACK;
                put64(&mut b, 4, *sreq);
                put64(&mut b, 12, *offset);
                CHUNK_ACK_LEN
            }
        };
        HdrBuf {
            buf: b,
            len: len as u8,
        }
    }

    /// The common case of [`Hdr::decode`], read straight into its fields: an
    /// eager MATCH of this wire version, as `(flags, envelope, payload
    /// offset)`. `None` for anything else, which [`Hdr::decode`] handles
    /// (and reports if malformed); where this returns `Some`, `decode`
    /// returns the same `Hdr::Match`.
    #[inline]
    pub fn decode_match(b: &[u8]) -> Option<(u8, MatchHdr, usize)> {
        if b.len() >= TINY_LEN && b[0] == T_TINY && b[1] == 0 && b[2] == VERSION {
            return Some((0, MatchHdr::read_tiny(b), TINY_LEN));
        }
        if b.len() >= SHORT_LEN && b[0] == T_SHORT && b[1] == 0 && b[2] == VERSION {
            return Some((0, MatchHdr::read_short(b), SHORT_LEN));
        }
        (b.len() >= MATCH_LEN && b[0] == T_MATCH && b[2] == VERSION)
            .then(|| (b[1], MatchHdr::read(b), MATCH_LEN))
    }

    /// Decode a fragment's header; returns it and the payload offset.
    /// Malformed input is an error, never a panic.
    #[inline]
    pub fn decode(b: &[u8]) -> Result<(Hdr, usize), WireError> {
        if b.len() < 4 {
            return Err(truncated("fragment", 4, b.len()));
        }
        let (ty, flags, version) = (b[0], b[1], b[2]);
        if version != VERSION {
            return Err(WireError::Version {
                got: version,
                speaks: VERSION,
            });
        }
        let need = |n: usize, what: &'static str| {
            if b.len() < n {
                Err(truncated(what, n, b.len()))
            } else {
                Ok(())
            }
        };
        let (h, end) = match ty {
            T_MATCH => {
                need(MATCH_LEN, "MATCH")?;
                (
                    Hdr::Match {
                        flags,
                        m: MatchHdr::read(b),
                    },
                    MATCH_LEN,
                )
            }
            // The two compact MATCH forms: no flags, no sender request.
            T_TINY | T_SHORT => {
                let (len, what) = if ty == T_TINY {
                    (TINY_LEN, "TINY")
                } else {
                    (SHORT_LEN, "SHORT")
                };
                need(len, what)?;
                if flags != 0 {
                    return Err(WireError::Flags { what, flags });
                }
                let m = if ty == T_TINY {
                    MatchHdr::read_tiny(b)
                } else {
                    MatchHdr::read_short(b)
                };
                (Hdr::Match { flags: 0, m }, len)
            }
            T_RNDV => {
                need(MATCH_LEN, "RNDV")?;
                let m = MatchHdr::read(b);
                if flags & F_HAS_DESC != 0 {
                    need(RNDV_DESC_LEN, "RNDV")?;
                    let desc = MemDesc {
                        addr: get64(b, MATCH_LEN),
                        len: get64(b, MATCH_LEN + 8),
                        key: get64(b, MATCH_LEN + 16),
                    };
                    (
                        Hdr::Rndv {
                            flags: flags & !F_HAS_DESC,
                            m,
                            desc: Some(desc),
                        },
                        RNDV_DESC_LEN,
                    )
                } else {
                    (
                        Hdr::Rndv {
                            flags,
                            m,
                            desc: None,
                        },
                        MATCH_LEN,
                    )
                }
            }
            T_RNDV_IPC => {
                need(MATCH_LEN + IpcDesc::WIRE_LEN, "RNDV_IPC")?;
                (
                    Hdr::RndvIpc {
                        flags,
                        m: MatchHdr::read(b),
                    },
                    MATCH_LEN,
                )
            }
            T_ACK | T_FIN => {
                need(ONE_U64_LEN, "ACK/FIN")?;
                let sreq = get64(b, 4);
                (
                    if ty == T_ACK {
                        Hdr::Ack { sreq }
                    } else {
                        Hdr::Fin { sreq }
                    },
                    ONE_U64_LEN,
                )
            }
            T_CTS => {
                need(CTS_LEN, "CTS")?;
                if flags & !F_PULL != 0 {
                    return Err(WireError::Flags { what: "CTS", flags });
                }
                (
                    Hdr::Cts {
                        sreq: get64(b, 4),
                        rreq: get64(b, 12),
                        want: get64(b, 20),
                        pull: flags & F_PULL != 0,
                    },
                    CTS_LEN,
                )
            }
            T_CHUNK => {
                need(CHUNK_LEN, "CHUNK")?;
                (
                    Hdr::Chunk {
                        rreq: get64(b, 4),
                        offset: get64(b, 12),
                        len: get64(b, 20),
                        desc: MemDesc {
                            addr: get64(b, 28),
                            len: get64(b, 36),
                            key: get64(b, 44),
                        },
                    },
                    CHUNK_LEN,
                )
            }
            T_CHUNK_ACK => {
                need(CHUNK_ACK_LEN, "CHUNK_ACK")?;
                (
                    Hdr::ChunkAck {
                        sreq: get64(b, 4),
                        offset: get64(b, 12),
                    },
                    CHUNK_ACK_LEN,
                )
            }
            T_FRAG => {
                need(FRAG_LEN, "FRAG")?;
                (
                    Hdr::Frag {
                        rreq: get64(b, 4),
                        offset: get64(b, 12),
                    },
                    FRAG_LEN,
                )
            }
            other => return Err(WireError::UnknownType(other)),
        };
        let carries_payload = match h {
            Hdr::Match { .. } | Hdr::Frag { .. } => true,
            Hdr::RndvIpc { .. } => {
                if b.len() != end + IpcDesc::WIRE_LEN {
                    return Err(WireError::Length {
                        what: "RNDV_IPC",
                        got: b.len(),
                        expected: end + IpcDesc::WIRE_LEN,
                    });
                }
                true
            }
            _ => false,
        };
        if !carries_payload && end != b.len() {
            return Err(WireError::Trailing(b.len() - end));
        }
        Ok((h, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m() -> MatchHdr {
        MatchHdr {
            ctx: 7,
            src: 3,
            tag: -5,
            seq: 9,
            len: 1 << 40,
            sreq: 0xdead_beef_0000_0001,
        }
    }

    #[test]
    fn round_trips() {
        let d = MemDesc {
            addr: 1,
            len: 2,
            key: 3,
        };
        for h in [
            Hdr::Match {
                flags: F_SYNC,
                m: m(),
            },
            Hdr::Rndv {
                flags: 0,
                m: m(),
                desc: Some(d),
            },
            Hdr::Rndv {
                flags: F_SYNC,
                m: m(),
                desc: None,
            },
            Hdr::Ack { sreq: 5 },
            Hdr::Cts {
                sreq: 1,
                rreq: 2,
                want: 3,
                pull: false,
            },
            Hdr::Cts {
                sreq: 1,
                rreq: 2,
                want: 3,
                pull: true,
            },
            Hdr::Frag { rreq: 4, offset: 5 },
            Hdr::Fin { sreq: 6 },
            Hdr::Chunk {
                rreq: 7,
                offset: 1 << 33,
                len: 512 << 10,
                desc: d,
            },
            Hdr::ChunkAck {
                sreq: 8,
                offset: 1 << 33,
            },
        ] {
            let e = h.encode();
            let (back, off) = Hdr::decode(e.as_bytes()).unwrap();
            assert_eq!(back, h);
            assert_eq!(off, e.as_bytes().len());
        }
    }

    /// A plain eager envelope (no flags, no sender request, a 32-bit
    /// length) goes out as the 16-byte TINY header when its context id and
    /// source fit in 16 bits, else as the 24-byte SHORT header, and decodes
    /// to the same `Hdr::Match` (TINY's length is the payload's); anything
    /// else keeps the full MATCH.
    #[test]
    fn tiny_and_short_match_round_trip_and_fall_back() {
        let plain = MatchHdr {
            sreq: 0,
            len: 8,
            ..m()
        };
        for (m, len, ty) in [
            (plain, TINY_LEN, T_TINY),
            (
                MatchHdr {
                    ctx: 65_535,
                    src: 65_535,
                    ..plain
                },
                TINY_LEN,
                T_TINY,
            ),
            (
                MatchHdr {
                    ctx: 65_536,
                    ..plain
                },
                SHORT_LEN,
                T_SHORT,
            ),
            (
                MatchHdr {
                    src: 1 << 20,
                    ..plain
                },
                SHORT_LEN,
                T_SHORT,
            ),
        ] {
            let h = Hdr::Match { flags: 0, m };
            let mut b = h.encode().as_bytes().to_vec();
            assert_eq!((b.len(), b[0]), (len, ty), "{m:?}");
            b.extend_from_slice(b"8 bytes!");
            assert_eq!(Hdr::decode(&b), Ok((h, len)));
            assert_eq!(Hdr::decode_match(&b), Some((0, m, len)));
            agrees_with_decode(&b);
            // A TINY header's length is what follows it.
            b.truncate(len + 3);
            let got = Hdr::decode_match(&b).map(|(_, m, _)| m.len);
            assert_eq!(got, if ty == T_TINY { Some(3) } else { Some(8) });
            agrees_with_decode(&b);
        }
        for (flags, m) in [
            (F_SYNC, plain),
            (0, MatchHdr { sreq: 1, ..plain }),
            (
                0,
                MatchHdr {
                    len: u64::from(u32::MAX) + 1,
                    ..plain
                },
            ),
        ] {
            let e = Hdr::Match { flags, m }.encode();
            assert_eq!(e.as_bytes().len(), MATCH_LEN);
            assert_eq!(
                Hdr::decode(e.as_bytes()),
                Ok((Hdr::Match { flags, m }, MATCH_LEN))
            );
        }
        // Malformed TINY and SHORT headers are errors, never a match.
        for m in [
            plain,
            MatchHdr {
                ctx: 1 << 17,
                ..plain
            },
        ] {
            let mut b = Hdr::Match { flags: 0, m }.encode().as_bytes().to_vec();
            let len = b.len();
            b[1] = F_SYNC;
            assert!(Hdr::decode(&b).is_err());
            agrees_with_decode(&b);
            b[1] = 0;
            assert!(Hdr::decode(&b[..len - 1]).is_err());
            agrees_with_decode(&b[..len - 1]);
        }
    }

    #[test]
    fn rejects_bad_version_and_type() {
        let mut e = Hdr::Fin { sreq: 1 }.encode().as_bytes().to_vec();
        e[2] = 99;
        assert!(Hdr::decode(&e).is_err());
        e[2] = VERSION;
        e[0] = 42;
        assert!(Hdr::decode(&e).is_err());
        assert!(Hdr::decode(&[]).is_err());
    }

    /// `decode_match`, the receive fast path, is `decode` restricted to
    /// eager MATCH headers: same header, same payload offset.
    fn agrees_with_decode(b: &[u8]) {
        match Hdr::decode_match(b) {
            Some((flags, m, off)) => {
                assert_eq!(Hdr::decode(b), Ok((Hdr::Match { flags, m }, off)));
            }
            None => assert!(!matches!(Hdr::decode(b), Ok((Hdr::Match { .. }, _)))),
        }
    }

    #[test]
    fn decode_match_is_decode_of_a_match() {
        let mut b = Hdr::Match {
            flags: F_SYNC,
            m: m(),
        }
        .encode()
        .as_bytes()
        .to_vec();
        b.extend_from_slice(b"payload");
        assert_eq!(Hdr::decode_match(&b), Some((F_SYNC, m(), MATCH_LEN)));
        agrees_with_decode(&b);
        for other in [
            Hdr::Rndv {
                flags: 0,
                m: m(),
                desc: None,
            },
            Hdr::Ack { sreq: 1 },
            Hdr::Frag { rreq: 1, offset: 2 },
        ] {
            let e = other.encode();
            assert_eq!(Hdr::decode_match(e.as_bytes()), None);
            agrees_with_decode(e.as_bytes());
        }
        b[2] = 99;
        assert_eq!(Hdr::decode_match(&b), None);
        assert_eq!(Hdr::decode_match(&b[..MATCH_LEN - 1]), None);
    }

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = Hdr::decode(&b);
            agrees_with_decode(&b);
        }

        #[test]
        fn decode_survives_mutation(pos in 0usize..64, val in any::<u8>(), cut in 0usize..72) {
            let d = MemDesc { addr: 1, len: 2, key: 3 };
            let mut b = Hdr::Rndv { flags: 0, m: m(), desc: Some(d) }.encode().as_bytes().to_vec();
            if pos < b.len() { b[pos] = val; }
            b.truncate(cut);
            let _ = Hdr::decode(&b);
            let mut b = Hdr::Match { flags: 0, m: m() }.encode().as_bytes().to_vec();
            if pos < b.len() { b[pos] = val; }
            b.truncate(cut);
            agrees_with_decode(&b);
        }
    }
}
