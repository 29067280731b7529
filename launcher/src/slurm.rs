//! Slurm allocations: which hosts, and how many slots on each, a job may use.
//!
//! Inside `salloc` or `sbatch`, Slurm describes the allocation in compressed form:
//! `SLURM_JOB_NODELIST=node[01-03,07],gpu-a[1-2]` and `SLURM_TASKS_PER_NODE=2(x3),1`.
//! This module expands both with pure functions ([`expand_hostlist`],
//! [`expand_tasks_per_node`]) and pairs them as `(host, slots)` ([`allocation`],
//! [`allocation_from_env`]), so that gmpirun takes its hosts and slots from the
//! allocation (and starts its per-host proxies with `srun`: `agent::Starter::Srun`).
//!
//! The host-list syntax is Slurm's (`src/common/hostlist.c`): entries separated by
//! commas outside brackets; in an entry, any number of bracket groups, each a
//! comma-separated list of numbers and `lo-hi` ranges; a bound written with leading
//! zeros fixes the width of every number of its range (`[08-11]` gives `08 09 10 11`,
//! `[8-11]` gives `8 9 10 11`); several groups in one entry expand as a product, the
//! last group varying fastest. Malformed input is an error naming the list and what is
//! wrong, never a panic.

use std::fmt;

/// Most hosts one list may expand to (a guard against `n[0-999999999]`).
pub const MAX_HOSTS: usize = 1 << 20;

/// A host list or task count Slurm's syntax does not allow, with the text it was in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmError {
    /// The variable (or "host list") the text came from.
    pub what: String,
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for SlurmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} `{}`: {}", self.what, self.text, self.reason)
    }
}

impl std::error::Error for SlurmError {}

fn err(what: &str, text: &str, reason: impl Into<String>) -> SlurmError {
    SlurmError {
        what: what.to_owned(),
        text: text.to_owned(),
        reason: reason.into(),
    }
}

/// Splits `text` at commas that are not inside brackets.
fn split_top_level<'a>(what: &str, text: &'a str) -> Result<Vec<&'a str>, SlurmError> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '[' if depth > 0 => return Err(err(what, text, "nested `[`")),
            '[' => depth = 1,
            ']' if depth == 0 => return Err(err(what, text, "`]` without `[`")),
            ']' => depth = 0,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(err(what, text, "`[` without `]`"));
    }
    parts.push(&text[start..]);
    Ok(parts)
}

/// The numbers of one bracket group (`01-03,07`), formatted with their widths.
fn expand_group(what: &str, text: &str, group: &str) -> Result<Vec<String>, SlurmError> {
    let mut out = Vec::new();
    for item in group.split(',') {
        let (lo, hi) = item.split_once('-').unwrap_or((item, item));
        let number = |s: &str| -> Result<u64, SlurmError> {
            if s.is_empty() || s.len() > 18 || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err(
                    what,
                    text,
                    format!("`{item}` in `[{group}]` is not a number or a lo-hi range"),
                ));
            }
            Ok(s.parse().expect("at most 18 ASCII digits"))
        };
        let (l, h) = (number(lo)?, number(hi)?);
        if l > h {
            return Err(err(what, text, format!("range `{item}` runs backwards")));
        }
        if h - l >= MAX_HOSTS as u64 || out.len() + (h - l) as usize >= MAX_HOSTS {
            return Err(err(
                what,
                text,
                format!("expands to more than {MAX_HOSTS} hosts"),
            ));
        }
        // Slurm pads to the width of the low bound when it has leading zeros.
        let width = if lo.len() > 1 && lo.starts_with('0') {
            lo.len()
        } else {
            0
        };
        out.extend((l..=h).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

/// Expands one top-level entry (`rack[1-2]-n[01-02]`) into its host names.
fn expand_entry(what: &str, text: &str, entry: &str) -> Result<Vec<String>, SlurmError> {
    let mut names = vec![String::new()];
    let mut rest = entry;
    while !rest.is_empty() {
        let (literal, after) = match rest.find('[') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        for n in &mut names {
            n.push_str(literal);
        }
        let Some(after) = after else { break };
        let close = after
            .find(']')
            .ok_or_else(|| err(what, text, "`[` without `]`"))?;
        let numbers = expand_group(what, text, &after[..close])?;
        if names.len().saturating_mul(numbers.len()) > MAX_HOSTS {
            return Err(err(
                what,
                text,
                format!("expands to more than {MAX_HOSTS} hosts"),
            ));
        }
        names = names
            .iter()
            .flat_map(|n| numbers.iter().map(move |x| format!("{n}{x}")))
            .collect();
        rest = &after[close + 1..];
    }
    Ok(names)
}

/// Expands a Slurm host list (`node[01-03,07],gpu-a[1-2]`) into host names, in order.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, SlurmError> {
    const WHAT: &str = "host list";
    let list = list.trim();
    if list.is_empty() {
        return Err(err(WHAT, list, "no hosts"));
    }
    if let Some(c) = list.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(err(WHAT, list, format!("unexpected character {c:?}")));
    }
    let mut hosts = Vec::new();
    for entry in split_top_level(WHAT, list)? {
        if entry.is_empty() {
            return Err(err(WHAT, list, "empty entry between commas"));
        }
        for host in expand_entry(WHAT, list, entry)? {
            if host.is_empty() {
                return Err(err(WHAT, list, "empty host name"));
            }
            if hosts.len() == MAX_HOSTS {
                return Err(err(
                    WHAT,
                    list,
                    format!("expands to more than {MAX_HOSTS} hosts"),
                ));
            }
            hosts.push(host);
        }
    }
    Ok(hosts)
}

/// Expands a Slurm per-node count list (`2(x3),1`, as in `SLURM_TASKS_PER_NODE` and
/// `SLURM_JOB_CPUS_PER_NODE`) into one count per node.
pub fn expand_tasks_per_node(counts: &str) -> Result<Vec<u32>, SlurmError> {
    const WHAT: &str = "task count list";
    let text = counts.trim();
    if text.is_empty() {
        return Err(err(WHAT, text, "no counts"));
    }
    let mut out = Vec::new();
    for item in text.split(',') {
        let (count, repeat) = match item.split_once('(') {
            Some((c, r)) => {
                let r = r
                    .strip_prefix('x')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| err(WHAT, text, format!("`{item}` is not `N(xM)`")))?;
                (c, r)
            }
            None => (item, "1"),
        };
        let num = |s: &str| -> Result<u32, SlurmError> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err(WHAT, text, format!("`{item}` is not a count")));
            }
            s.parse()
                .map_err(|_| err(WHAT, text, format!("`{item}` is too large")))
        };
        let (count, repeat) = (num(count)?, num(repeat)?);
        if repeat == 0 {
            return Err(err(WHAT, text, format!("`{item}` repeats zero times")));
        }
        if out.len() + repeat as usize > MAX_HOSTS {
            return Err(err(
                WHAT,
                text,
                format!("describes more than {MAX_HOSTS} nodes"),
            ));
        }
        out.extend(std::iter::repeat_n(count, repeat as usize));
    }
    Ok(out)
}

/// Pairs a host list with its per-node counts: `(host, slots)` in allocation order.
/// The two must describe the same number of nodes.
pub fn allocation(nodelist: &str, tasks_per_node: &str) -> Result<Vec<(String, u32)>, SlurmError> {
    let hosts = expand_hostlist(nodelist)?;
    let slots = expand_tasks_per_node(tasks_per_node)?;
    if hosts.len() != slots.len() {
        return Err(err(
            "allocation",
            &format!("{nodelist} / {tasks_per_node}"),
            format!("{} hosts but counts for {} nodes", hosts.len(), slots.len()),
        ));
    }
    Ok(hosts.into_iter().zip(slots).collect())
}

/// The allocation this process runs in, from the variables `salloc`/`sbatch` set:
/// `SLURM_JOB_NODELIST` (or the older `SLURM_NODELIST`) with `SLURM_TASKS_PER_NODE`
/// (or, when no task count was asked for, `SLURM_JOB_CPUS_PER_NODE`).
///
/// `Ok(None)` outside an allocation; an error when the variables are there but
/// malformed or inconsistent.
pub fn allocation_from_env() -> Result<Option<Vec<(String, u32)>>, SlurmError> {
    allocation_from(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
}

/// [`allocation_from_env`] over any variable lookup (testable without touching the
/// process environment).
pub fn allocation_from(
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<Vec<(String, u32)>>, SlurmError> {
    let Some(nodes) = var("SLURM_JOB_NODELIST").or_else(|| var("SLURM_NODELIST")) else {
        return Ok(None);
    };
    let Some(counts) = var("SLURM_TASKS_PER_NODE").or_else(|| var("SLURM_JOB_CPUS_PER_NODE"))
    else {
        return Err(err(
            "allocation",
            &nodes,
            "SLURM_JOB_NODELIST is set but neither SLURM_TASKS_PER_NODE nor SLURM_JOB_CPUS_PER_NODE is",
        ));
    };
    allocation(&nodes, &counts).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &str) -> Vec<String> {
        expand_hostlist(list).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn plain_hosts_and_single_groups() {
        assert_eq!(hosts("vm"), ["vm"]);
        assert_eq!(hosts("a,b.example.org,c-1"), ["a", "b.example.org", "c-1"]);
        assert_eq!(
            hosts("node[01-03,07]"),
            ["node01", "node02", "node03", "node07"]
        );
        assert_eq!(hosts("n[8-11]"), ["n8", "n9", "n10", "n11"]);
        assert_eq!(hosts("n[08-11]"), ["n08", "n09", "n10", "n11"]);
        assert_eq!(hosts("n[0-2]"), ["n0", "n1", "n2"]);
        assert_eq!(hosts("n[098-101]"), ["n098", "n099", "n100", "n101"]);
        assert_eq!(hosts("n[5]"), ["n5"]);
        assert_eq!(hosts("[1-2]x"), ["1x", "2x"]);
    }

    #[test]
    fn several_entries_and_groups() {
        assert_eq!(
            hosts("node[01-03,07],gpu-a[1-2]"),
            ["node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2"]
        );
        assert_eq!(
            hosts("rack[1-2]-n[01-02],login"),
            ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02", "login"]
        );
        assert_eq!(hosts("a[1,3]b[7]c"), ["a1b7c", "a3b7c"]);
        assert_eq!(hosts(" x[1-2] "), ["x1", "x2"]);
    }

    #[test]
    fn malformed_lists_are_errors_naming_the_list() {
        for bad in [
            "",
            "a,,b",
            "a,",
            "n[1-3",
            "n1-3]",
            "n[[1-3]]",
            "n[3-1]",
            "n[a-b]",
            "n[1-]",
            "n[]",
            "n[1,,2]",
            "n[1-2-3]",
            "a b",
            "n[0-99999999999999999999]",
            "n[0-2000000]",
            "a[0-2000]b[0-2000]",
        ] {
            let e = expand_hostlist(bad).expect_err(bad);
            assert!(
                e.to_string().contains(bad.trim()),
                "{bad:?}: {e} does not name the list"
            );
        }
    }

    #[test]
    fn task_counts() {
        assert_eq!(expand_tasks_per_node("4").unwrap(), [4]);
        assert_eq!(expand_tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert_eq!(expand_tasks_per_node("1,16(x2),8").unwrap(), [1, 16, 16, 8]);
        for bad in [
            "",
            "x",
            "2(3)",
            "2(x0)",
            "2(x",
            "-1",
            "1,,2",
            "2(x3",
            "99999999999",
        ] {
            assert!(expand_tasks_per_node(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn allocations_pair_hosts_with_slots() {
        assert_eq!(
            allocation("node[01-03],gpu1", "2(x3),1").unwrap(),
            [
                ("node01".to_owned(), 2),
                ("node02".to_owned(), 2),
                ("node03".to_owned(), 2),
                ("gpu1".to_owned(), 1)
            ]
        );
        let e = allocation("n[1-3]", "2(x2)").unwrap_err();
        assert!(
            e.to_string().contains("3 hosts but counts for 2 nodes"),
            "{e}"
        );
    }

    #[test]
    fn allocation_from_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(allocation_from(env(&[])).unwrap(), None);
        assert_eq!(
            allocation_from(env(&[
                ("SLURM_JOB_NODELIST", "c[1-2]"),
                ("SLURM_TASKS_PER_NODE", "3(x2)"),
                ("SLURM_JOB_CPUS_PER_NODE", "8(x2)"),
            ]))
            .unwrap(),
            Some(vec![("c1".to_owned(), 3), ("c2".to_owned(), 3)])
        );
        assert_eq!(
            allocation_from(env(&[
                ("SLURM_NODELIST", "vm"),
                ("SLURM_JOB_CPUS_PER_NODE", "2"),
            ]))
            .unwrap(),
            Some(vec![("vm".to_owned(), 2)])
        );
        let e = allocation_from(env(&[("SLURM_JOB_NODELIST", "vm")])).unwrap_err();
        assert!(e.to_string().contains("SLURM_TASKS_PER_NODE"), "{e}");
    }
}
