//! Which verbs port a rank uses: `GMPI_IB_DEVICES` parsing and the choice
//! among the ports `verbs::probe` found (pure, so the default build tests it).

use crate::fabric::PortInfo;

/// Parse `GMPI_IB_DEVICES` (`name[:port],...`).
pub fn parse_devices(s: &str) -> Result<Vec<(String, Option<u8>)>, String> {
    s.split(',')
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let e = e.trim();
            match e.split_once(':') {
                Some((d, p)) => p
                    .parse::<u8>()
                    .ok()
                    .filter(|&p| p >= 1)
                    .map(|p| (d.to_string(), Some(p)))
                    .ok_or_else(|| format!("GMPI_IB_DEVICES: bad port in {e:?}")),
                None => Ok((e.to_string(), None)),
            }
        })
        .collect()
}

/// A candidate port, as `verbs::probe` finds it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The port (`sq_depth`/`srq_depth`/`max_inline` are the device's limits).
    pub port: PortInfo,
    /// The network interface of its GID (RoCE), and whether this process's
    /// network namespace has it.
    pub netdev: Option<(String, bool)>,
    /// Why it cannot be used, if it cannot.
    pub unusable: Option<String>,
    /// The NUMA node of its device, if the system says.
    pub numa: Option<u32>,
}

/// Choose a port: the first usable one `devices` (`GMPI_IB_DEVICES`)
/// names; else, among the usable ones, one whose interface is in this
/// network namespace (RoCE), then one on NUMA node `near` (the rank's),
/// then the first.
pub fn choose(
    cands: &[Candidate],
    devices: Option<&[(String, Option<u8>)]>,
    near: Option<u32>,
) -> Result<Candidate, String> {
    let usable = |c: &&Candidate| c.unusable.is_none();
    if let Some(list) = devices {
        for (d, p) in list {
            if let Some(c) = cands
                .iter()
                .filter(usable)
                .find(|c| &c.port.device == d && p.is_none_or(|p| c.port.port == p))
            {
                return Ok(c.clone());
            }
        }
        return Err(format!(
            "GMPI_IB_DEVICES names no usable port; ports: {}",
            describe(cands)
        ));
    }
    let rank = |c: &Candidate| {
        (
            c.netdev.as_ref().is_some_and(|n| n.1),
            near.is_some() && c.numa == near,
        )
    };
    let mut best: Option<&Candidate> = None;
    for c in cands.iter().filter(usable) {
        if best.is_none_or(|b| rank(c) > rank(b)) {
            best = Some(c);
        }
    }
    best.cloned()
        .ok_or_else(|| format!("no usable verbs port; ports: {}", describe(cands)))
}

/// One line per port, for messages and `gmpirun --doctor`.
pub fn describe(cands: &[Candidate]) -> String {
    if cands.is_empty() {
        return "none".into();
    }
    cands
        .iter()
        .map(|c| {
            let what = match &c.unusable {
                Some(u) => u.clone(),
                None => format!(
                    "{:?}, MTU {} B, GID index {}{}",
                    c.port.link,
                    c.port.mtu_bytes(),
                    c.port.gid_index,
                    c.netdev
                        .as_ref()
                        .map(|(n, here)| format!(
                            " ({n}{})",
                            if *here { "" } else { ", another namespace" }
                        ))
                        .unwrap_or_default()
                ),
            };
            format!("{}:{} {what}", c.port.device, c.port.port)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::Link;

    fn cand(
        dev: &str,
        port: u8,
        netdev: Option<(&str, bool)>,
        unusable: Option<&str>,
    ) -> Candidate {
        Candidate {
            port: PortInfo {
                device: dev.into(),
                port,
                link: if netdev.is_some() {
                    Link::Ethernet
                } else {
                    Link::Infiniband
                },
                lid: 3,
                gid: [0; 16],
                gid_index: 1,
                mtu: 5,
                max_msg: 1 << 30,
                max_rd_atomic: 16,
                max_inline: 64,
                sq_depth: 256,
                srq_depth: 1024,
            },
            netdev: netdev.map(|(n, h)| (n.to_string(), h)),
            unusable: unusable.map(String::from),
            numa: None,
        }
    }

    #[test]
    fn devices_list_parses_and_refuses_bad_ports() {
        assert_eq!(
            parse_devices("mlx5_0:1, rxe0,").unwrap(),
            vec![("mlx5_0".to_string(), Some(1)), ("rxe0".to_string(), None)]
        );
        assert!(parse_devices("mlx5_0:0").is_err());
        assert!(parse_devices("mlx5_0:x").is_err());
    }

    #[test]
    fn the_named_port_wins_else_one_of_this_namespace() {
        let c = [
            cand("mlx5_0", 1, None, Some("port state 1 (not active)")),
            cand("rxe0", 1, Some(("eth9", false)), None),
            cand("rxe1", 1, Some(("veth1", true)), None),
            cand("mlx5_1", 1, None, None),
        ];
        assert_eq!(choose(&c, None, None).unwrap().port.device, "rxe1");
        let want = parse_devices("mlx5_0,mlx5_1:1").unwrap();
        assert_eq!(choose(&c, Some(&want), None).unwrap().port.device, "mlx5_1");
        let e = choose(&c, Some(&parse_devices("nosuch").unwrap()), None).unwrap_err();
        assert!(e.contains("mlx5_0:1 port state 1"), "{e}");
        let e = choose(&c[..1], None, None).unwrap_err();
        assert!(e.contains("no usable verbs port"), "{e}");
        assert_eq!(choose(&c[3..], None, None).unwrap().port.device, "mlx5_1");
    }

    #[test]
    fn the_port_of_the_ranks_numa_node_is_preferred() {
        let mut a = cand("mlx5_0", 1, None, None);
        let mut b = cand("mlx5_1", 1, None, None);
        a.numa = Some(0);
        b.numa = Some(1);
        let c = [a, b];
        assert_eq!(choose(&c, None, Some(1)).unwrap().port.device, "mlx5_1");
        assert_eq!(choose(&c, None, Some(0)).unwrap().port.device, "mlx5_0");
        assert_eq!(choose(&c, None, None).unwrap().port.device, "mlx5_0");
        assert_eq!(choose(&c, None, Some(7)).unwrap().port.device, "mlx5_0");
    }
}
