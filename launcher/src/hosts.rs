//! Hosts and placement: `-H` lists and hostfiles in, the hosts each rank runs on out.
//!
//! Pure functions (the caller reads the hostfile). A host is a name and a number of
//! slots; naming a host again adds its slots to the first entry, which keeps its place.
//! [`place`] follows Open MPI's rules: without `-n` the job has one rank per slot (or
//! `-N` per host); `--map-by slot` fills each host's slots in turn, `--map-by node`
//! deals ranks round-robin over the hosts with free slots; ranks beyond the slots are
//! spread evenly (oversubscription is always allowed, as on one node).

use std::net::IpAddr;

/// One host of the job and its slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The name given on the command line or in the hostfile.
    pub name: String,
    /// How many ranks it takes before it counts as oversubscribed.
    pub slots: u32,
}

/// `--map-by`: how ranks are dealt to the hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MapBy {
    /// Fill each host's slots in order (block placement: neighbours share a host).
    #[default]
    Slot,
    /// One rank per host in turn (round-robin).
    Node,
}

/// The ranks one host runs, in local-rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRanks {
    /// The host's name as given.
    pub name: String,
    /// Global ranks, ascending.
    pub ranks: Vec<u32>,
}

/// Adds `slots` to host `name`, appending it if it is new.
fn add(hosts: &mut Vec<Host>, name: &str, slots: u32) -> Result<(), String> {
    match hosts.iter_mut().find(|h| h.name == name) {
        Some(h) => {
            h.slots = h
                .slots
                .checked_add(slots)
                .ok_or_else(|| format!("host {name}: too many slots"))?;
        }
        None => hosts.push(Host {
            name: name.to_owned(),
            slots,
        }),
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty host name".to_owned());
    }
    // The name goes to the launch agent as one argument; refuse what no host is called
    // and what could be read as an option or split by a remote shell.
    if name.starts_with('-')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._:[]%@".contains(c))
    {
        return Err(format!("`{name}` is not a valid host name"));
    }
    Ok(())
}

fn parse_slots(text: &str, what: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(0) => Err(format!("{what}: slots must be at least 1")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{what}: `{text}` is not a number of slots")),
    }
}

/// Splits `host:slots` (or `[v6addr]:slots`); `None` slots when there is no count.
fn split_host_slots(word: &str) -> Result<(String, Option<u32>), String> {
    if let Some(rest) = word.strip_prefix('[') {
        let (addr, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("`{word}`: missing `]`"))?;
        return match after {
            "" => Ok((addr.to_owned(), None)),
            _ => match after.strip_prefix(':') {
                Some(n) => Ok((addr.to_owned(), Some(parse_slots(n, word)?))),
                None => Err(format!("`{word}`: unexpected text after `]`")),
            },
        };
    }
    match word.rsplit_once(':') {
        // A bare IPv6 address has several colons: no slot count then.
        Some((host, _)) if host.contains(':') => Ok((word.to_owned(), None)),
        Some((host, n)) => Ok((host.to_owned(), Some(parse_slots(n, word)?))),
        None => Ok((word.to_owned(), None)),
    }
}

/// Parses `-H` values: comma-separated `host[:slots]`, 1 slot when no count is given.
/// Several values (repeated `-H`) are read in order.
pub fn parse_host_list<S: AsRef<str>>(specs: &[S]) -> Result<Vec<Host>, String> {
    let mut hosts = Vec::new();
    for spec in specs {
        for word in spec.as_ref().split(',') {
            let word = word.trim();
            let (name, slots) = split_host_slots(word).map_err(|e| format!("-H {word}: {e}"))?;
            check_name(&name).map_err(|e| format!("-H: {e}"))?;
            add(&mut hosts, &name, slots.unwrap_or(1))?;
        }
    }
    if hosts.is_empty() {
        return Err("-H: no host given".to_owned());
    }
    Ok(hosts)
}

/// Parses a hostfile: one host per line as `host`, `host:N` or `host slots=N`
/// (`max_slots=M` is accepted and ignored: oversubscription is always allowed); `#`
/// starts a comment; blank lines are skipped. `file` names the file in messages.
pub fn parse_hostfile(text: &str, file: &str) -> Result<Vec<Host>, String> {
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = || format!("{file} line {}", i + 1);
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        let (name, mut slots) = split_host_slots(first).map_err(|e| format!("{}: {e}", at()))?;
        check_name(&name).map_err(|e| format!("{}: {e}", at()))?;
        for word in words {
            if let Some(n) = word.strip_prefix("slots=") {
                if slots.is_some() {
                    return Err(format!("{}: slots given twice", at()));
                }
                slots = Some(parse_slots(n, &at())?);
            } else if let Some(n) = word.strip_prefix("max_slots=") {
                parse_slots(n, &at())?;
            } else {
                return Err(format!(
                    "{}: unexpected `{word}` (expected `host`, `host:N` or `host slots=N`)",
                    at()
                ));
            }
        }
        add(&mut hosts, &name, slots.unwrap_or(1))?;
    }
    if hosts.is_empty() {
        return Err(format!("{file}: no host in the hostfile"));
    }
    Ok(hosts)
}

/// Deals `np` ranks (default: one per slot, or `npernode` per host) to `hosts`. Returns
/// the hosts that got ranks, in host order; a host's position in it is its node id.
pub fn place(
    hosts: &[Host],
    np: Option<u32>,
    map_by: MapBy,
    npernode: Option<u32>,
) -> Result<Vec<HostRanks>, String> {
    assert!(!hosts.is_empty(), "callers refuse an empty host list");
    let nhosts = hosts.len() as u64;
    // Capacity of each host: its slots, or exactly `npernode`.
    let caps: Vec<u64> = match npernode {
        Some(n) => vec![u64::from(n); hosts.len()],
        None => hosts.iter().map(|h| u64::from(h.slots)).collect(),
    };
    let total: u64 = caps.iter().sum();
    let np = u64::from(match np {
        Some(n) => n,
        None => u32::try_from(total).map_err(|_| format!("{total} slots are too many ranks"))?,
    });
    if let Some(n) = npernode {
        if np > total {
            return Err(format!(
                "-n {np} is more than -N {n} ranks on each of {nhosts} host(s)"
            ));
        }
    }
    let mut counts = vec![0u64; hosts.len()];
    let mut host_of = Vec::with_capacity(np as usize);
    match map_by {
        MapBy::Slot => {
            // Each host's share: its capacity, plus an even part of what is beyond all
            // capacities (the first hosts take one more when it does not divide).
            let extra = np.saturating_sub(total);
            let mut left = np;
            for (h, &cap) in caps.iter().enumerate() {
                let share = cap + extra / nhosts + u64::from((h as u64) < extra % nhosts);
                let share = share.min(left);
                counts[h] = share;
                left -= share;
                host_of.extend(std::iter::repeat_n(h as u32, share as usize));
            }
        }
        MapBy::Node => {
            let mut next = 0usize;
            for _ in 0..np {
                let free = (0..hosts.len())
                    .map(|i| (next + i) % hosts.len())
                    .find(|&h| counts[h] < caps[h]);
                let h = free.unwrap_or(next);
                counts[h] += 1;
                host_of.push(h as u32);
                next = (h + 1) % hosts.len();
            }
        }
    }
    let mut out: Vec<HostRanks> = Vec::new();
    let mut slot_of_host = vec![usize::MAX; hosts.len()];
    for (rank, &h) in host_of.iter().enumerate() {
        let h = h as usize;
        if slot_of_host[h] == usize::MAX {
            slot_of_host[h] = out.len();
            out.push(HostRanks {
                name: hosts[h].name.clone(),
                ranks: Vec::new(),
            });
        }
        out[slot_of_host[h]].ranks.push(rank as u32);
    }
    // Node ids follow the host list, not the first rank.
    out.sort_by_key(|hr| hosts.iter().position(|h| h.name == hr.name));
    Ok(out)
}

/// The PMI-1 `PMI_process_mapping` value (Hydra's format) of `node_of[rank]`: runs of
/// consecutive ranks on one node, runs of equal length on consecutive nodes merged,
/// e.g. `(vector,(0,2,2))` for 2 nodes × 2 ranks in blocks.
pub fn process_mapping(node_of: &[u32]) -> String {
    // (node, ranks in a row)
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &n in node_of {
        match runs.last_mut() {
            Some((node, count)) if *node == n => *count += 1,
            _ => runs.push((n, 1)),
        }
    }
    // (first node, node count, ranks per node)
    let mut blocks: Vec<(u32, u32, u32)> = Vec::new();
    for (node, count) in runs {
        match blocks.last_mut() {
            Some((first, nodes, per)) if *per == count && *first + *nodes == node => *nodes += 1,
            _ => blocks.push((node, 1, count)),
        }
    }
    let mut s = String::from("(vector");
    for (first, nodes, per) in blocks {
        s.push_str(&format!(",({first},{nodes},{per})"));
    }
    s.push(')');
    s
}

/// Whether `name` means this host: `localhost`, a loopback address, this host's name
/// (with or without its domain), or one of `my_addrs` written as an address.
pub fn is_local(name: &str, my_hostname: &str, my_addrs: &[IpAddr]) -> bool {
    let lower = name.to_ascii_lowercase();
    if lower == "localhost" || lower.starts_with("localhost.") {
        return true;
    }
    if let Ok(ip) = name.parse::<IpAddr>() {
        return ip.is_loopback() || my_addrs.contains(&ip);
    }
    let me = my_hostname.to_ascii_lowercase();
    if lower == me {
        return true;
    }
    let short = |s: &str| s.split('.').next().unwrap_or("").to_owned();
    // `node1` and `node1.cluster` are one host; `node1.a` and `node1.b` are not.
    (!lower.contains('.') || !me.contains('.')) && short(&lower) == short(&me)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &str, slots: u32) -> Host {
        Host {
            name: name.into(),
            slots,
        }
    }

    fn placed(
        hosts: &[Host],
        np: Option<u32>,
        by: MapBy,
        n: Option<u32>,
    ) -> Vec<(String, Vec<u32>)> {
        place(hosts, np, by, n)
            .unwrap()
            .into_iter()
            .map(|hr| (hr.name, hr.ranks))
            .collect()
    }

    fn p(name: &str, ranks: &[u32]) -> (String, Vec<u32>) {
        (name.to_owned(), ranks.to_vec())
    }

    #[test]
    fn host_lists() {
        assert_eq!(
            parse_host_list(&["a:4,b:2", "c", "a"]).unwrap(),
            [h("a", 5), h("b", 2), h("c", 1)]
        );
        assert_eq!(
            parse_host_list(&["10.0.0.1:2,[fe80::1]:3,::1"]).unwrap(),
            [h("10.0.0.1", 2), h("fe80::1", 3), h("::1", 1)]
        );
        for bad in [
            "",
            "a:0",
            "a:x",
            "a,,b",
            "-oProxyCommand=x",
            "a b",
            "a;b:2",
            "[::1]x",
        ] {
            assert!(parse_host_list(&[bad]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hostfiles() {
        let text = "# cluster\n\nn1 slots=4\nn2:2   # two\n  n3\nn1 slots=1 max_slots=8\n";
        assert_eq!(
            parse_hostfile(text, "hf").unwrap(),
            [h("n1", 5), h("n2", 2), h("n3", 1)]
        );
        for (bad, what) in [
            ("n1 slots=x\n", "hf line 1"),
            ("ok\nn1 slots=2 cpus=3\n", "hf line 2: unexpected `cpus=3`"),
            ("n1:2 slots=2\n", "slots given twice"),
            ("# nothing\n", "no host"),
            ("n1 slots=0\n", "at least 1"),
        ] {
            let e = parse_hostfile(bad, "hf").unwrap_err();
            assert!(e.contains(what), "{bad:?}: {e}");
        }
    }

    #[test]
    fn map_by_slot_fills_hosts_in_order() {
        let hosts = [h("a", 2), h("b", 3)];
        assert_eq!(
            placed(&hosts, None, MapBy::Slot, None),
            [p("a", &[0, 1]), p("b", &[2, 3, 4])]
        );
        assert_eq!(
            placed(&hosts, Some(2), MapBy::Slot, None),
            [p("a", &[0, 1])]
        );
        assert_eq!(
            placed(&hosts, Some(3), MapBy::Slot, None),
            [p("a", &[0, 1]), p("b", &[2])]
        );
        // Beyond the slots: spread evenly, blocks kept.
        assert_eq!(
            placed(&hosts, Some(8), MapBy::Slot, None),
            [p("a", &[0, 1, 2, 3]), p("b", &[4, 5, 6, 7])]
        );
    }

    #[test]
    fn map_by_node_deals_round_robin() {
        let hosts = [h("a", 2), h("b", 1), h("c", 2)];
        assert_eq!(
            placed(&hosts, None, MapBy::Node, None),
            [p("a", &[0, 3]), p("b", &[1]), p("c", &[2, 4])]
        );
        assert_eq!(
            placed(&hosts, Some(8), MapBy::Node, None),
            [p("a", &[0, 3, 5]), p("b", &[1, 6]), p("c", &[2, 4, 7])]
        );
    }

    #[test]
    fn npernode_overrides_slots() {
        let hosts = [h("a", 4), h("b", 1), h("c", 1)];
        assert_eq!(
            placed(&hosts, None, MapBy::Slot, Some(2)),
            [p("a", &[0, 1]), p("b", &[2, 3]), p("c", &[4, 5])]
        );
        assert_eq!(
            placed(&hosts, None, MapBy::Node, Some(2)),
            [p("a", &[0, 3]), p("b", &[1, 4]), p("c", &[2, 5])]
        );
        assert_eq!(
            placed(&hosts, Some(3), MapBy::Slot, Some(2)),
            [p("a", &[0, 1]), p("b", &[2])]
        );
        let e = place(&hosts, Some(7), MapBy::Slot, Some(2)).unwrap_err();
        assert!(e.contains("-n 7 is more than -N 2"), "{e}");
    }

    #[test]
    fn mappings_in_hydra_format() {
        assert_eq!(process_mapping(&[0, 0, 0, 0]), "(vector,(0,1,4))");
        assert_eq!(process_mapping(&[0, 0, 1, 1]), "(vector,(0,2,2))");
        assert_eq!(process_mapping(&[0, 1, 0, 1]), "(vector,(0,2,1),(0,2,1))");
        assert_eq!(process_mapping(&[0, 0, 1, 2]), "(vector,(0,1,2),(1,2,1))");
    }

    #[test]
    fn local_names() {
        let addrs = ["10.1.2.3".parse().unwrap()];
        for name in [
            "localhost",
            "LOCALHOST.localdomain",
            "127.0.0.1",
            "::1",
            "10.1.2.3",
            "node7",
            "node7.cluster",
        ] {
            assert!(is_local(name, "node7", &addrs), "{name}");
        }
        assert!(is_local("node7", "node7.cluster", &addrs));
        for name in ["node8", "10.1.2.4", "node7.other", "node"] {
            assert!(!is_local(name, "node7.cluster", &addrs), "{name}");
        }
    }
}
