//! Which verbs port a rank uses: `GMPI_IB_DEVICES` parsing and the choice
//! among the ports `verbs::probe` found (pure, so the default build tests it):
//! the port nearest the rank's GPU in the PCI tree (the most sysfs path
//! components in common: same switch, then same root port, then same root
//! complex), else on its NUMA node.

use std::path::{Path, PathBuf};

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
    /// Its device's place in the PCI tree (the canonical sysfs path of
    /// `/sys/class/infiniband/<dev>/device`), if the system says.
    pub pci: Option<PathBuf>,
}

/// What a rank's port should be near.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Near {
    /// A NUMA node (the GPU's, else the CPU's the rank runs on).
    pub numa: Option<u32>,
    /// The rank's GPU in the PCI tree (its canonical sysfs path).
    pub gpu: Option<PathBuf>,
}

impl Near {
    /// Near the GPU whose PCI bus id CUDA gives as `bus_id`
    /// (`0000:3B:00.0`), found under the sysfs root `sys`: its place in the
    /// PCI tree and its NUMA node. `None` where sysfs does not have it.
    pub fn of_gpu(sys: &Path, bus_id: &str) -> Option<Near> {
        let id = pci_id(bus_id)?;
        let path = std::fs::canonicalize(sys.join("bus/pci/devices").join(id)).ok()?;
        let numa = std::fs::read_to_string(path.join("numa_node"))
            .ok()
            .and_then(|n| n.trim().parse::<u32>().ok());
        Some(Near {
            numa,
            gpu: Some(path),
        })
    }
}

/// A PCI bus id as sysfs names devices: `dddd:bb:dd.f`, lower case (CUDA
/// gives `0000:3B:00.0`, and some tools an 8-digit domain).
fn pci_id(bus_id: &str) -> Option<String> {
    let (dom, rest) = bus_id.trim().split_once(':')?;
    let dom = u32::from_str_radix(dom, 16).ok()?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let (bus, dev, func) = (
        u8::from_str_radix(bus, 16).ok()?,
        u8::from_str_radix(dev, 16).ok()?,
        u8::from_str_radix(func, 16).ok()?,
    );
    Some(format!("{dom:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

/// How near two devices are in the PCI tree: the path components their
/// canonical sysfs paths share.
fn closeness(a: &Path, b: &Path) -> usize {
    a.components()
        .zip(b.components())
        .take_while(|(x, y)| x == y)
        .count()
}

/// Choose a port: the first usable one `devices` (`GMPI_IB_DEVICES`)
/// names; else, among the usable ones, one whose interface is in this
/// network namespace (RoCE), then the one nearest the rank's GPU in the
/// PCI tree, then one on NUMA node `near.numa`, then the first.
pub fn choose(
    cands: &[Candidate],
    devices: Option<&[(String, Option<u8>)]>,
    near: &Near,
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
        let pci = match (&near.gpu, &c.pci) {
            (Some(g), Some(p)) => closeness(g, p),
            _ => 0,
        };
        (
            c.netdev.as_ref().is_some_and(|n| n.1),
            pci,
            near.numa.is_some() && c.numa == near.numa,
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
            pci: None,
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
        assert_eq!(
            choose(&c, None, &Near::default()).unwrap().port.device,
            "rxe1"
        );
        let want = parse_devices("mlx5_0,mlx5_1:1").unwrap();
        assert_eq!(
            choose(&c, Some(&want), &Near::default())
                .unwrap()
                .port
                .device,
            "mlx5_1"
        );
        let e = choose(
            &c,
            Some(&parse_devices("nosuch").unwrap()),
            &Near::default(),
        )
        .unwrap_err();
        assert!(e.contains("mlx5_0:1 port state 1"), "{e}");
        let e = choose(&c[..1], None, &Near::default()).unwrap_err();
        assert!(e.contains("no usable verbs port"), "{e}");
        assert_eq!(
            choose(&c[3..], None, &Near::default()).unwrap().port.device,
            "mlx5_1"
        );
    }

    #[test]
    fn the_port_of_the_ranks_numa_node_is_preferred() {
        let mut a = cand("mlx5_0", 1, None, None);
        let mut b = cand("mlx5_1", 1, None, None);
        a.numa = Some(0);
        b.numa = Some(1);
        let c = [a, b];
        let numa = |n| Near { numa: n, gpu: None };
        assert_eq!(
            choose(&c, None, &numa(Some(1))).unwrap().port.device,
            "mlx5_1"
        );
        assert_eq!(
            choose(&c, None, &numa(Some(0))).unwrap().port.device,
            "mlx5_0"
        );
        assert_eq!(choose(&c, None, &numa(None)).unwrap().port.device, "mlx5_0");
        assert_eq!(
            choose(&c, None, &numa(Some(7))).unwrap().port.device,
            "mlx5_0"
        );
    }

    #[test]
    fn the_port_nearest_the_gpu_in_the_pci_tree_wins_over_the_cpus_numa_node() {
        // Two root complexes; under the first, a switch with the GPU.
        let gpu = PathBuf::from(
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:04:00.0",
        );
        let mut same_switch = cand("mlx5_2", 1, None, None);
        same_switch.pci = Some(PathBuf::from(
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:05:00.0",
        ));
        same_switch.numa = Some(0);
        let mut same_root = cand("mlx5_1", 1, None, None);
        same_root.pci = Some(PathBuf::from(
            "/sys/devices/pci0000:00/0000:00:03.0/0000:07:00.0",
        ));
        same_root.numa = Some(0);
        let mut other_root = cand("mlx5_0", 1, None, None);
        other_root.pci = Some(PathBuf::from(
            "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0",
        ));
        other_root.numa = Some(1);
        let c = [other_root, same_root, same_switch];
        let near = Near {
            numa: Some(1),
            gpu: Some(gpu),
        };
        assert_eq!(choose(&c, None, &near).unwrap().port.device, "mlx5_2");
        assert_eq!(choose(&c[..2], None, &near).unwrap().port.device, "mlx5_1");
        // No GPU: the CPU's NUMA node decides.
        let cpu = Near {
            numa: Some(1),
            gpu: None,
        };
        assert_eq!(choose(&c, None, &cpu).unwrap().port.device, "mlx5_0");
    }

    #[test]
    fn a_gpus_bus_id_finds_its_place_in_sysfs() {
        assert_eq!(pci_id("0000:3B:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(pci_id("00000000:3B:00.1").as_deref(), Some("0000:3b:00.1"));
        assert_eq!(pci_id("nonsense"), None);
        let root = std::env::temp_dir().join(format!("gmpi-pci-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dev = root.join("devices/pci0000:00/0000:00:01.0/0000:3b:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("numa_node"), "1\n").unwrap();
        std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        std::os::unix::fs::symlink(&dev, root.join("bus/pci/devices/0000:3b:00.0")).unwrap();
        let n = Near::of_gpu(&root, "0000:3B:00.0").expect("found");
        assert_eq!(n.numa, Some(1));
        assert_eq!(n.gpu, Some(std::fs::canonicalize(&dev).unwrap()));
        assert_eq!(Near::of_gpu(&root, "0000:3c:00.0"), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
