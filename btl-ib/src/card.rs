//! The business card a rank publishes through PMI: its port's address, the
//! number of its datagram (UD) queue pair, through which peers ask for an
//! RC queue pair on first use, and a random nonce that names this run of
//! the rank (a connection message must carry it).
//!
//! `ib2;<lid hex>;<gid, 32 hex digits>;<mtu>;<ud qpn hex>;<nonce hex>`
//! (no whitespace and no `=`: it travels as one PMI value)
//! (pure; every field of a peer's card is checked before it is used).

use crate::fabric::{PortInfo, RemoteQp, UdAddr};

/// Version tag at the front of every card.
const TAG: &str = "ib2";

/// What a peer's card says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Card {
    /// Its datagram queue pair.
    pub ud: UdAddr,
    /// Its port's path MTU (verbs enum, 1..=5).
    pub mtu: u8,
    /// The nonce its connection messages carry.
    pub nonce: u64,
}

impl Card {
    /// The address of the RC queue pair `qpn` (first PSN `psn`) on the
    /// card's port.
    pub fn rc(&self, qpn: u32, psn: u32) -> RemoteQp {
        RemoteQp {
            qpn,
            psn,
            lid: self.ud.lid,
            gid: self.ud.gid,
            mtu: self.mtu,
        }
    }
}

/// Write the card of `port`, whose datagram queue pair is `ud_qpn`.
pub fn encode(port: &PortInfo, ud_qpn: u32, nonce: u64) -> String {
    let mut s = format!("{TAG};{:x};", port.lid);
    for b in port.gid {
        s.push_str(&format!("{b:02x}"));
    }
    s.push_str(&format!(";{};{ud_qpn:x};{nonce:x}", port.mtu));
    s
}

/// Read a card.
pub fn decode(card: &str) -> Result<Card, String> {
    let bad = |why: &str| format!("malformed ib card ({why}): {card:?}");
    let f: Vec<&str> = card.split(';').collect();
    if f.len() != 6 || f[0] != TAG {
        return Err(bad("expected 6 fields after the tag ib2"));
    }
    let lid = u16::from_str_radix(f[1], 16).map_err(|_| bad("LID"))?;
    if f[2].len() != 32 || !f[2].is_ascii() {
        return Err(bad("GID"));
    }
    let mut gid = [0u8; 16];
    for (i, g) in gid.iter_mut().enumerate() {
        *g = u8::from_str_radix(&f[2][2 * i..2 * i + 2], 16).map_err(|_| bad("GID"))?;
    }
    let mtu: u8 = f[3].parse().map_err(|_| bad("MTU"))?;
    if !(1..=5).contains(&mtu) {
        return Err(bad("MTU out of range"));
    }
    let qpn = u32::from_str_radix(f[4], 16).map_err(|_| bad("UD QPN"))?;
    if qpn >= 1 << 24 {
        return Err(bad("UD QPN wider than 24 bits"));
    }
    let nonce = u64::from_str_radix(f[5], 16).map_err(|_| bad("nonce"))?;
    Ok(Card {
        ud: UdAddr { qpn, lid, gid },
        mtu,
        nonce,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::Link;

    fn port() -> PortInfo {
        PortInfo {
            device: "rxe0".into(),
            port: 1,
            link: Link::Ethernet,
            lid: 0,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 0, 1],
            gid_index: 1,
            mtu: 3,
            max_msg: 1 << 31,
            max_rd_atomic: 16,
            max_inline: 64,
            sq_depth: 256,
            srq_depth: 1024,
        }
    }

    #[test]
    fn round_trip() {
        let c = encode(&port(), 0x1234, 0xdead_beef_0123);
        let d = decode(&c).unwrap();
        assert_eq!(
            d,
            Card {
                ud: UdAddr {
                    qpn: 0x1234,
                    lid: 0,
                    gid: port().gid
                },
                mtu: 3,
                nonce: 0xdead_beef_0123,
            }
        );
        let rc = d.rc(0x77, 0x55);
        assert_eq!(
            (rc.qpn, rc.psn, rc.gid, rc.mtu),
            (0x77, 0x55, port().gid, 3)
        );
    }

    #[test]
    fn garbage_is_refused() {
        for c in [
            "",
            "ib1;0;00000000000000000000ffff0a090001;3;1@1.1",
            "ib2;zz;00000000000000000000ffff0a090001;3;11;1",
            "ib2;0;0000;3;11;1",
            "ib2;0;00000000000000000000ffff0a090001;9;11;1",
            "ib2;0;00000000000000000000ffff0a090001;3;1000000;1",
            "ib2;0;00000000000000000000ffff0a090001;3;x;1",
            "ib2;0;00000000000000000000ffff0a090001;3;11;",
            "ib2;0;00000000000000000000ffff0a090001;3;11;1;2",
            "ib2;0;0000000000000000000é0ffff0a09000;3;11;1",
        ] {
            assert!(decode(c).is_err(), "{c:?} was accepted");
        }
    }
}
