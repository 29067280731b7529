//! The business card a rank publishes through PMI: its port's address and,
//! for every peer it reaches, the queue pair that peer should connect to.
//!
//! `ib1;<lid hex>;<gid, 32 hex digits>;<mtu>;<rank>@<qpn hex>.<psn hex>,...`
//! (no whitespace and no `=`: it travels as one PMI value)
//! (pure; every field of a peer's card is checked before it is used).

use crate::fabric::{LocalQp, PortInfo, RemoteQp};
use gmpi_btl::Rank;

/// Version tag at the front of every card.
const TAG: &str = "ib1";

/// Write the card of `port` with one queue pair per peer.
pub fn encode(port: &PortInfo, qps: &[(Rank, LocalQp)]) -> String {
    let mut s = format!("{TAG};{:x};", port.lid);
    for b in port.gid {
        s.push_str(&format!("{b:02x}"));
    }
    s.push_str(&format!(";{};", port.mtu));
    let list: Vec<String> = qps
        .iter()
        .map(|(r, q)| format!("{r}@{:x}.{:x}", q.qpn, q.psn))
        .collect();
    s.push_str(&list.join(","));
    s
}

/// What a card says to rank `me`: the address of the queue pair its owner
/// made for `me`.
pub fn decode_for(card: &str, me: Rank) -> Result<RemoteQp, String> {
    let bad = |why: &str| format!("malformed ib card ({why}): {card:?}");
    let f: Vec<&str> = card.split(';').collect();
    if f.len() != 5 || f[0] != TAG {
        return Err(bad("expected 5 fields after the tag ib1"));
    }
    let lid = u16::from_str_radix(f[1], 16).map_err(|_| bad("LID"))?;
    if f[2].len() != 32 {
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
    for e in f[4].split(',').filter(|e| !e.is_empty()) {
        let (r, q) = e.split_once('@').ok_or_else(|| bad("peer entry"))?;
        let r: Rank = r.parse().map_err(|_| bad("peer rank"))?;
        if r != me {
            continue;
        }
        let (qpn, psn) = q.split_once('.').ok_or_else(|| bad("queue pair"))?;
        let qpn = u32::from_str_radix(qpn, 16).map_err(|_| bad("QPN"))?;
        let psn = u32::from_str_radix(psn, 16).map_err(|_| bad("PSN"))?;
        if qpn >= 1 << 24 || psn >= 1 << 24 {
            return Err(bad("QPN or PSN wider than 24 bits"));
        }
        return Ok(RemoteQp {
            qpn,
            psn,
            lid,
            gid,
            mtu,
        });
    }
    Err(format!("ib card has no queue pair for rank {me}: {card:?}"))
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
    fn round_trip_and_only_my_entry() {
        let qps = [
            (
                1,
                LocalQp {
                    qpn: 0x11,
                    psn: 0xabc,
                },
            ),
            (
                7,
                LocalQp {
                    qpn: 0x12,
                    psn: 0xfff,
                },
            ),
        ];
        let c = encode(&port(), &qps);
        let r = decode_for(&c, 7).unwrap();
        assert_eq!((r.qpn, r.psn, r.mtu, r.gid), (0x12, 0xfff, 3, port().gid));
        assert!(decode_for(&c, 3)
            .unwrap_err()
            .contains("no queue pair for rank 3"));
    }

    #[test]
    fn garbage_is_refused() {
        for c in [
            "",
            "ib2;0;00;3;",
            "ib1;zz;00000000000000000000ffff0a090001;3;1@1.1",
            "ib1;0;0000;3;1@1.1",
            "ib1;0;00000000000000000000ffff0a090001;9;1@1.1",
            "ib1;0;00000000000000000000ffff0a090001;3;1@1",
            "ib1;0;00000000000000000000ffff0a090001;3;1@1000000.1",
            "ib1;0;00000000000000000000ffff0a090001;3;x@1.1",
        ] {
            assert!(decode_for(c, 1).is_err(), "{c:?} was accepted");
        }
    }
}
