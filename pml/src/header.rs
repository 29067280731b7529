//! The wire format of pml fragments (one place, like ob1's `pml_ob1_hdr.h`).
//!
//! Every fragment starts with a 4-byte preamble `[type, flags, version, 0]`.
//! Integers are little-endian. Fields are appended in later versions, never
//! reordered; a receiver rejects a version it does not know.
//!
//! | type  | after the preamble                                          | then        |
//! |-------|-------------------------------------------------------------|-------------|
//! | MATCH | ctx u32, src u32, tag i32, seq u32, len u64, sreq u64       | payload     |
//! | RNDV  | the MATCH fields, then a [`MemDesc`] if flag `HAS_DESC`     | —           |
//! | ACK   | sreq u64                                                    | —           |
//! | CTS   | sreq u64, rreq u64, want u64                                | —           |
//! | FRAG  | rreq u64, offset u64                                        | payload     |
//! | FIN   | sreq u64                                                    | —           |

use gmpi_btl::MemDesc;

use crate::PmlError;

/// Wire version written by this build.
pub const VERSION: u8 = 1;

/// Largest header this module encodes.
pub const MAX_HDR: usize = 72;

const T_MATCH: u8 = 1;
const T_RNDV: u8 = 2;
const T_ACK: u8 = 3;
const T_CTS: u8 = 4;
const T_FRAG: u8 = 5;
const T_FIN: u8 = 6;

/// Flag: the sender wants an ACK when the message is matched (synchronous mode).
pub const F_SYNC: u8 = 1;
/// Flag: a RNDV header carries a memory descriptor for `get`.
pub const F_HAS_DESC: u8 = 2;

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
    /// Clear to send: stream `want` bytes as FRAGs to `rreq`.
    Cts {
        /// Sender request.
        sreq: u64,
        /// Receiver request.
        rreq: u64,
        /// Bytes the receiver accepts.
        want: u64,
    },
    /// A chunk of a pipelined rendezvous.
    Frag {
        /// Receiver request.
        rreq: u64,
        /// Offset of the payload in the message.
        offset: u64,
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
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    fn put(&mut self, b: &[u8]) {
        let l = self.len as usize;
        self.buf[l..l + b.len()].copy_from_slice(b);
        self.len += b.len() as u8;
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], PmlError> {
        let end = self.pos + N;
        let s = self
            .b
            .get(self.pos..end)
            .ok_or_else(|| PmlError::Malformed(format!("header truncated at byte {}", self.pos)))?;
        self.pos = end;
        Ok(s.try_into().expect("length checked"))
    }
    fn u32(&mut self) -> Result<u32, PmlError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn i32(&mut self) -> Result<i32, PmlError> {
        Ok(i32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, PmlError> {
        Ok(u64::from_le_bytes(self.take()?))
    }
}

impl Hdr {
    /// Encode into an inline buffer.
    pub fn encode(&self) -> HdrBuf {
        let mut h = HdrBuf {
            buf: [0; MAX_HDR],
            len: 0,
        };
        let (ty, flags) = match self {
            Hdr::Match { flags, .. } => (T_MATCH, *flags),
            Hdr::Rndv { flags, desc, .. } => (
                T_RNDV,
                (*flags & !F_HAS_DESC) | if desc.is_some() { F_HAS_DESC } else { 0 },
            ),
            Hdr::Ack { .. } => (T_ACK, 0),
            Hdr::Cts { .. } => (T_CTS, 0),
            Hdr::Frag { .. } => (T_FRAG, 0),
            Hdr::Fin { .. } => (T_FIN, 0),
        };
        h.put(&[ty, flags, VERSION, 0]);
        let put_m = |h: &mut HdrBuf, m: &MatchHdr| {
            h.put(&m.ctx.to_le_bytes());
            h.put(&m.src.to_le_bytes());
            h.put(&m.tag.to_le_bytes());
            h.put(&m.seq.to_le_bytes());
            h.put(&m.len.to_le_bytes());
            h.put(&m.sreq.to_le_bytes());
        };
        match self {
            Hdr::Match { m, .. } => put_m(&mut h, m),
            Hdr::Rndv { m, desc, .. } => {
                put_m(&mut h, m);
                if let Some(d) = desc {
                    let mut v = Vec::with_capacity(MemDesc::WIRE_LEN);
                    d.encode(&mut v);
                    h.put(&v);
                }
            }
            Hdr::Ack { sreq } | Hdr::Fin { sreq } => h.put(&sreq.to_le_bytes()),
            Hdr::Cts { sreq, rreq, want } => {
                h.put(&sreq.to_le_bytes());
                h.put(&rreq.to_le_bytes());
                h.put(&want.to_le_bytes());
            }
            Hdr::Frag { rreq, offset } => {
                h.put(&rreq.to_le_bytes());
                h.put(&offset.to_le_bytes());
            }
        }
        h
    }

    /// Decode a fragment's header; returns it and the payload offset.
    /// Malformed input is an error, never a panic.
    pub fn decode(b: &[u8]) -> Result<(Hdr, usize), PmlError> {
        let mut r = Reader { b, pos: 0 };
        let [ty, flags, version, _] = r.take::<4>()?;
        if version != VERSION {
            return Err(PmlError::Malformed(format!(
                "wire version {version}, this build speaks {VERSION}"
            )));
        }
        let read_m = |r: &mut Reader<'_>| -> Result<MatchHdr, PmlError> {
            Ok(MatchHdr {
                ctx: r.u32()?,
                src: r.u32()?,
                tag: r.i32()?,
                seq: r.u32()?,
                len: r.u64()?,
                sreq: r.u64()?,
            })
        };
        let h = match ty {
            T_MATCH => Hdr::Match {
                flags,
                m: read_m(&mut r)?,
            },
            T_RNDV => {
                let m = read_m(&mut r)?;
                let desc = if flags & F_HAS_DESC != 0 {
                    let raw = r.take::<{ MemDesc::WIRE_LEN }>()?;
                    MemDesc::decode(&raw)
                } else {
                    None
                };
                Hdr::Rndv {
                    flags: flags & !F_HAS_DESC,
                    m,
                    desc,
                }
            }
            T_ACK => Hdr::Ack { sreq: r.u64()? },
            T_FIN => Hdr::Fin { sreq: r.u64()? },
            T_CTS => Hdr::Cts {
                sreq: r.u64()?,
                rreq: r.u64()?,
                want: r.u64()?,
            },
            T_FRAG => Hdr::Frag {
                rreq: r.u64()?,
                offset: r.u64()?,
            },
            other => {
                return Err(PmlError::Malformed(format!(
                    "unknown fragment type {other}"
                )))
            }
        };
        let carries_payload = matches!(h, Hdr::Match { .. } | Hdr::Frag { .. });
        if !carries_payload && r.pos != b.len() {
            return Err(PmlError::Malformed(format!(
                "{} trailing bytes after a control header",
                b.len() - r.pos
            )));
        }
        Ok((h, r.pos))
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
            },
            Hdr::Frag { rreq: 4, offset: 5 },
            Hdr::Fin { sreq: 6 },
        ] {
            let e = h.encode();
            let (back, off) = Hdr::decode(e.as_bytes()).unwrap();
            assert_eq!(back, h);
            assert_eq!(off, e.as_bytes().len());
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

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = Hdr::decode(&b);
        }

        #[test]
        fn decode_survives_mutation(pos in 0usize..64, val in any::<u8>(), cut in 0usize..72) {
            let d = MemDesc { addr: 1, len: 2, key: 3 };
            let mut b = Hdr::Rndv { flags: 0, m: m(), desc: Some(d) }.encode().as_bytes().to_vec();
            if pos < b.len() { b[pos] = val; }
            b.truncate(cut);
            let _ = Hdr::decode(&b);
        }
    }
}
