//! Addresses: which local addresses a rank listens on, its card, and the
//! order in which a connector tries a peer's addresses.
//!
//! - Selection (`GMPI_TCP_IF`): a comma list of interface names (`eth1`) and
//!   CIDR blocks (`10.1.0.0/16`, `fd00::/64`). Without one: every IPv4
//!   address of every interface that is up, loopback excluded, or the
//!   loopback addresses when there is nothing else.
//! - Card: `ip:port` pairs joined by commas (`10.0.0.1:41234,[fd00::1]:41235`),
//!   one per listening socket; it travels as one PMI value.
//! - Order: a peer's addresses on a subnet this rank shares come first,
//!   otherwise the card's order is kept.

use std::net::{IpAddr, SocketAddr};

use nix::net::if_::InterfaceFlags;

/// Most addresses a card may hold.
pub const MAX_CARD_ADDRS: usize = 32;

/// One address of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalAddr {
    /// Interface name.
    pub ifname: String,
    /// The address.
    pub ip: IpAddr,
    /// Prefix length of its subnet.
    pub prefix: u8,
}

/// An address block (`10.1.0.0/16`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// Network address.
    pub net: IpAddr,
    /// Prefix length.
    pub prefix: u8,
}

impl Cidr {
    /// Parse `a.b.c.d/n` or `v6addr/n`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a CIDR block"))?;
        let net: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: {a:?} is not an IP address"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = p
            .trim()
            .parse()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("{s:?}: prefix length must be 0..={max}"))?;
        Ok(Self { net, prefix })
    }

    /// Whether `ip` lies in this block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        same_subnet(self.net, ip, self.prefix)
    }
}

/// Whether `a` and `b` agree on their first `prefix` bits (false across families).
pub fn same_subnet(a: IpAddr, b: IpAddr, prefix: u8) -> bool {
    let bits = |x: &[u8], y: &[u8]| {
        let full = usize::from(prefix / 8);
        let rest = prefix % 8;
        if full > x.len() {
            return false;
        }
        if x[..full] != y[..full] {
            return false;
        }
        rest == 0 || {
            let mask = 0xffu8 << (8 - rest);
            x[full] & mask == y[full] & mask
        }
    };
    match (a, b) {
        (IpAddr::V4(x), IpAddr::V4(y)) => bits(&x.octets(), &y.octets()),
        (IpAddr::V6(x), IpAddr::V6(y)) => bits(&x.octets(), &y.octets()),
        _ => false,
    }
}

fn prefix_of(mask: IpAddr) -> u8 {
    let ones = |b: &[u8]| b.iter().map(|x| x.count_ones()).sum::<u32>() as u8;
    match mask {
        IpAddr::V4(m) => ones(&m.octets()),
        IpAddr::V6(m) => ones(&m.octets()),
    }
}

/// Every address of every interface that is up.
pub fn host_addresses() -> Result<Vec<LocalAddr>, String> {
    let list = nix::ifaddrs::getifaddrs().map_err(|e| format!("getifaddrs: {e}"))?;
    let mut out = Vec::new();
    for ifa in list {
        if !ifa.flags.contains(InterfaceFlags::IFF_UP) {
            continue;
        }
        let Some(a) = ifa.address else { continue };
        let mask = ifa.netmask;
        let (ip, prefix) = if let Some(v4) = a.as_sockaddr_in() {
            let p = mask
                .as_ref()
                .and_then(|m| m.as_sockaddr_in())
                .map_or(32, |m| prefix_of(IpAddr::V4(m.ip())));
            (IpAddr::V4(v4.ip()), p)
        } else if let Some(v6) = a.as_sockaddr_in6() {
            let p = mask
                .as_ref()
                .and_then(|m| m.as_sockaddr_in6())
                .map_or(128, |m| prefix_of(IpAddr::V6(m.ip())));
            (IpAddr::V6(v6.ip()), p)
        } else {
            continue;
        };
        out.push(LocalAddr {
            ifname: ifa.interface_name,
            ip,
            prefix,
        });
    }
    Ok(out)
}

fn usable_v6(ip: IpAddr) -> bool {
    // Link-local IPv6 addresses need a scope id to connect to; not carried.
    match ip {
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
        IpAddr::V4(_) => true,
    }
}

/// The addresses to listen on, from `spec` (`GMPI_TCP_IF`) over `all`.
pub fn select(spec: Option<&str>, all: &[LocalAddr]) -> Result<Vec<LocalAddr>, String> {
    let spec = spec.map(str::trim).filter(|s| !s.is_empty());
    let mut out: Vec<LocalAddr> = Vec::new();
    fn push(out: &mut Vec<LocalAddr>, a: &LocalAddr) {
        if !out.iter().any(|o| o.ip == a.ip) {
            out.push(a.clone());
        }
    }
    match spec {
        None => {
            for a in all {
                if a.ip.is_ipv4() && !a.ip.is_loopback() {
                    push(&mut out, a);
                }
            }
            if out.is_empty() {
                for a in all {
                    if a.ip.is_ipv4() && a.ip.is_loopback() {
                        push(&mut out, a);
                    }
                }
            }
            if out.is_empty() {
                return Err(format!(
                    "no IPv4 address on this host to listen on (addresses: {}); set GMPI_TCP_IF",
                    describe(all)
                ));
            }
        }
        Some(s) => {
            for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                let before = out.len();
                if item.contains('/') {
                    let c = Cidr::parse(item).map_err(|e| format!("GMPI_TCP_IF: {e}"))?;
                    all.iter()
                        .filter(|a| c.contains(a.ip) && usable_v6(a.ip))
                        .for_each(|a| push(&mut out, a));
                } else {
                    all.iter()
                        .filter(|a| a.ifname == item && usable_v6(a.ip))
                        .for_each(|a| push(&mut out, a));
                }
                if out.len() == before && !all.iter().any(|a| matches(item, a)) {
                    return Err(format!(
                        "GMPI_TCP_IF={s}: no address of this host matches {item:?} (addresses: {})",
                        describe(all)
                    ));
                }
            }
            if out.is_empty() {
                return Err(format!(
                    "GMPI_TCP_IF={s}: no usable address matches (addresses: {})",
                    describe(all)
                ));
            }
        }
    }
    Ok(out)
}

fn matches(item: &str, a: &LocalAddr) -> bool {
    if item.contains('/') {
        Cidr::parse(item).is_ok_and(|c| c.contains(a.ip))
    } else {
        a.ifname == item
    }
}

fn describe(all: &[LocalAddr]) -> String {
    if all.is_empty() {
        return "none".into();
    }
    all.iter()
        .map(|a| format!("{} {}/{}", a.ifname, a.ip, a.prefix))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The card of a rank listening on `addrs`.
pub fn encode_card(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Parse a peer's card.
pub fn decode_card(card: &str) -> Result<Vec<SocketAddr>, String> {
    let addrs = card
        .split(',')
        .map(|a| {
            a.parse::<SocketAddr>()
                .map_err(|_| format!("{a:?} is not an ip:port pair"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if addrs.len() > MAX_CARD_ADDRS {
        return Err(format!(
            "{} addresses (at most {MAX_CARD_ADDRS})",
            addrs.len()
        ));
    }
    if addrs.iter().any(|a| a.port() == 0) {
        return Err("port 0".into());
    }
    Ok(addrs)
}

/// `peer`'s addresses in the order to try them from a host with addresses
/// `local`: those on a shared subnet first, the card's order otherwise.
pub fn connect_order(peer: &[SocketAddr], local: &[LocalAddr]) -> Vec<SocketAddr> {
    let shared = |a: &SocketAddr| {
        local
            .iter()
            .any(|l| same_subnet(l.ip, a.ip(), l.prefix) && !l.ip.is_loopback())
            || (a.ip().is_loopback() && local.iter().any(|l| l.ip.is_loopback()))
    };
    let (mut near, far): (Vec<_>, Vec<_>) = peer.iter().copied().partition(shared);
    near.extend(far);
    near
}

#[cfg(test)]
mod tests {
    use super::*;

    fn la(ifname: &str, ip: &str, prefix: u8) -> LocalAddr {
        LocalAddr {
            ifname: ifname.into(),
            ip: ip.parse().unwrap(),
            prefix,
        }
    }

    fn host() -> Vec<LocalAddr> {
        vec![
            la("lo", "127.0.0.1", 8),
            la("eth0", "192.0.2.2", 24),
            la("eth1", "10.1.3.4", 16),
            la("eth1", "fd00::2", 64),
            la("eth1", "fe80::1", 64),
        ]
    }

    #[test]
    fn cidr() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(!c.contains("fd00::1".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("10.0.0/8").is_err());
        assert!(Cidr::parse("fd00::/7")
            .unwrap()
            .contains("fd12::1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        assert!(same_subnet(
            "10.1.2.3".parse().unwrap(),
            "10.1.2.200".parse().unwrap(),
            24
        ));
        assert!(!same_subnet(
            "10.1.2.3".parse().unwrap(),
            "10.1.2.200".parse().unwrap(),
            25
        ));
    }

    #[test]
    fn default_selection_is_non_loopback_ipv4() {
        let s = select(None, &host()).unwrap();
        let ips: Vec<String> = s.iter().map(|a| a.ip.to_string()).collect();
        assert_eq!(ips, ["192.0.2.2", "10.1.3.4"]);
        let only_lo = select(Some(" "), &host()[..1]).unwrap();
        assert_eq!(only_lo[0].ip.to_string(), "127.0.0.1");
        assert!(select(None, &[]).is_err());
    }

    #[test]
    fn interface_and_cidr_selection() {
        let s = select(Some("eth1"), &host()).unwrap();
        let ips: Vec<String> = s.iter().map(|a| a.ip.to_string()).collect();
        assert_eq!(ips, ["10.1.3.4", "fd00::2"], "link-local skipped");
        let s = select(Some("10.1.0.0/16, 127.0.0.0/8"), &host()).unwrap();
        let ips: Vec<String> = s.iter().map(|a| a.ip.to_string()).collect();
        assert_eq!(ips, ["10.1.3.4", "127.0.0.1"]);
        let e = select(Some("eth9"), &host()).unwrap_err();
        assert!(e.contains("eth9") && e.contains("eth0 192.0.2.2/24"), "{e}");
        assert!(select(Some("10.0.0.0/99"), &host()).is_err());
    }

    #[test]
    fn cards() {
        let a: Vec<SocketAddr> = vec![
            "10.0.0.1:4000".parse().unwrap(),
            "[fd00::1]:5".parse().unwrap(),
        ];
        let c = encode_card(&a);
        assert_eq!(c, "10.0.0.1:4000,[fd00::1]:5");
        assert_eq!(decode_card(&c).unwrap(), a);
        assert!(decode_card("").is_err());
        assert!(decode_card("10.0.0.1").is_err());
        assert!(decode_card("10.0.0.1:0").is_err());
        assert!(decode_card(&vec!["1.2.3.4:5"; 40].join(",")).is_err());
    }

    #[test]
    fn shared_subnet_first() {
        let peer: Vec<SocketAddr> = vec![
            "192.168.9.9:1".parse().unwrap(),
            "10.1.7.7:2".parse().unwrap(),
            "192.0.2.3:3".parse().unwrap(),
        ];
        let o = connect_order(&peer, &host());
        let ports: Vec<u16> = o.iter().map(|a| a.port()).collect();
        assert_eq!(ports, [2, 3, 1]);
    }

    #[test]
    fn this_host_has_addresses() {
        let all = host_addresses().unwrap();
        assert!(all.iter().any(|a| a.ip.is_loopback()), "{all:?}");
        assert!(!select(None, &all).unwrap().is_empty());
    }
}
