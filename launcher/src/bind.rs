//! Process binding: `--bind-to none|core|l3cache|numa` and `--report-bindings`.
//!
//! The ranks of a host are mapped to its cores in order (local rank `i` to the `i`-th
//! core of the CPUs gmpirun itself may use, wrapping when there are more ranks than
//! cores) and bound to the object of the policy that holds that core: the core (all its
//! hardware threads), the cores sharing its level-3 cache, or its NUMA node. Without
//! `--bind-to` (or `GMPI_BIND_TO`) the default is what the best peers do where it
//! helps: `core` when a host runs from 2 to as many ranks as it has cores; otherwise
//! unbound (a single rank is left to the scheduler, which moves it off a busy core; more
//! ranks than cores would only crowd each other). The mask is set in the child before
//! `exec` (`sys.rs`), so every thread the program starts inherits it.
//!
//! The topology comes from sysfs (`/sys/devices/system/cpu/cpuN/topology`,
//! `cache/indexK`, `/sys/devices/system/node/nodeN/cpulist`), restricted to gmpirun's
//! own affinity mask (which a cgroup cpuset, `taskset` or a Slurm step already
//! narrowed). Where a file is missing, a CPU is its own core and the whole allowed set
//! is one cache and one NUMA domain.
//!
//! gmpirun passes the choice to the hosts (and the ranks) as `GMPI_BIND_TO` and
//! `GMPI_REPORT_BINDINGS=1` in the job's variables; each host's launcher (the local job
//! or a proxy) applies them to its own ranks with [`Binder`].

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;

use nix::sched::CpuSet;

/// Variable carrying `--bind-to` to the hosts.
pub const BIND_VAR: &str = "GMPI_BIND_TO";
/// Variable carrying `--report-bindings` to the hosts.
pub const REPORT_VAR: &str = "GMPI_REPORT_BINDINGS";

/// `--bind-to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BindTo {
    /// Core when 2 ≤ ranks on the host ≤ its cores, else unbound.
    Auto,
    /// Not bound: the rank may run on any CPU gmpirun may use.
    None,
    /// The hardware threads of one core.
    Core,
    /// The cores sharing one level-3 cache.
    L3cache,
    /// One NUMA node.
    Numa,
}

impl BindTo {
    /// The policy's name, as `--bind-to` spells it.
    pub fn name(self) -> &'static str {
        match self {
            BindTo::Auto => "auto",
            BindTo::None => "none",
            BindTo::Core => "core",
            BindTo::L3cache => "l3cache",
            BindTo::Numa => "numa",
        }
    }

    /// Parses `GMPI_BIND_TO` (case-insensitive).
    pub fn parse(s: &str) -> Result<BindTo, String> {
        use clap::ValueEnum;
        BindTo::from_str(s.trim(), true).map_err(|_| {
            format!("{BIND_VAR}={s}: not a binding (expected auto, none, core, l3cache or numa)")
        })
    }
}

/// The CPUs gmpirun may use, grouped three ways; each domain's CPUs ascending, domains
/// in the order of their first CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Cores: the allowed hardware threads of each.
    pub cores: Vec<Vec<usize>>,
    /// Level-3 cache domains.
    pub l3: Vec<Vec<usize>>,
    /// NUMA nodes.
    pub numa: Vec<Vec<usize>>,
}

/// Parses a kernel CPU list (`0-3,8,10-11`); `None` if malformed.
pub fn parse_cpulist(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Writes CPUs (ascending) as a kernel CPU list: `0-3,8`.
pub fn format_cpulist(cpus: &[usize]) -> String {
    let mut s = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        if !s.is_empty() {
            s.push(',');
        }
        if j > i {
            let _ = write!(s, "{}-{}", cpus[i], cpus[j]);
        } else {
            let _ = write!(s, "{}", cpus[i]);
        }
        i = j + 1;
    }
    s
}

impl Topology {
    /// This machine's topology, restricted to `allowed`.
    pub fn read(allowed: &[usize]) -> Topology {
        Topology::read_from(Path::new("/sys/devices/system"), allowed)
    }

    /// As [`Topology::read`], with sysfs's `devices/system` at `root` (tests).
    pub fn read_from(root: &Path, allowed: &[usize]) -> Topology {
        let list = |p: &Path| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|s| parse_cpulist(&s))
        };
        let cpu_dir = |c: usize| root.join(format!("cpu/cpu{c}"));
        let core_of = |c: usize| {
            let t = cpu_dir(c).join("topology");
            list(&t.join("core_cpus_list")).or_else(|| list(&t.join("thread_siblings_list")))
        };
        let l3_of = |c: usize| {
            let cache = cpu_dir(c).join("cache");
            (0..8)
                .map(|k| cache.join(format!("index{k}")))
                .find(|d| std::fs::read_to_string(d.join("level")).is_ok_and(|l| l.trim() == "3"))
                .and_then(|d| list(&d.join("shared_cpu_list")))
        };
        let mut nodes: Vec<Vec<usize>> = Vec::new();
        if let Ok(dir) = std::fs::read_dir(root.join("node")) {
            let mut found: Vec<(usize, Vec<usize>)> = dir
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let id: usize = name.strip_prefix("node")?.parse().ok()?;
                    Some((id, list(&e.path().join("cpulist"))?))
                })
                .collect();
            found.sort();
            nodes = found.into_iter().map(|(_, c)| c).collect();
        }
        let numa_of = |c: usize| nodes.iter().find(|n| n.contains(&c)).cloned();
        Topology {
            cores: group(allowed, true, core_of),
            l3: group(allowed, false, l3_of),
            numa: group(allowed, false, numa_of),
        }
    }
}

/// Groups `allowed` by the domain `of` gives each CPU (intersected with `allowed`).
/// CPUs it knows nothing of stand alone (`alone`: cores) or form one domain together
/// (caches, nodes).
fn group(
    allowed: &[usize],
    alone: bool,
    of: impl Fn(usize) -> Option<Vec<usize>>,
) -> Vec<Vec<usize>> {
    let mut domains: Vec<Vec<usize>> = Vec::new();
    let mut orphans: Vec<usize> = Vec::new();
    for &c in allowed {
        if domains.iter().any(|d| d.contains(&c)) {
            continue;
        }
        match of(c) {
            Some(d) => {
                let mut d: Vec<usize> = d.into_iter().filter(|x| allowed.contains(x)).collect();
                if !d.contains(&c) {
                    d.push(c);
                    d.sort_unstable();
                }
                domains.push(d);
            }
            None => orphans.push(c),
        }
    }
    if alone {
        domains.extend(orphans.into_iter().map(|c| vec![c]));
    } else if !orphans.is_empty() {
        domains.push(orphans);
    }
    domains.sort();
    domains
}

/// The CPUs this process may run on, ascending.
pub fn own_cpus() -> Vec<usize> {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

/// One rank's binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// What it is bound to, for the report: `core 1`, `l3cache 0`, `numa 0`.
    pub object: String,
    /// Its CPUs, ascending.
    pub cpus: Vec<usize>,
}

/// The binding of one host's ranks.
#[derive(Debug)]
pub struct Binder {
    policy: BindTo,
    topo: Topology,
    local_size: u32,
    report: bool,
}

impl Binder {
    /// The policy `resolved` for `local_size` ranks on a host of topology `topo`.
    pub fn new(policy: BindTo, topo: Topology, local_size: u32, report: bool) -> Binder {
        let n = topo.cores.len() as u32;
        let policy = match policy {
            BindTo::Auto if (2..=n).contains(&local_size) => BindTo::Core,
            BindTo::Auto => BindTo::None,
            p => p,
        };
        Binder {
            policy,
            topo,
            local_size,
            report,
        }
    }

    /// The binder for a host's `local_size` ranks from the job's variables `env`
    /// (the last setting wins) or, failing them, gmpirun's environment; this machine's
    /// topology. A bad `GMPI_BIND_TO` is reported by the caller and leaves ranks unbound.
    pub fn from_env(env: &[(String, OsString)], local_size: u32) -> Result<Binder, String> {
        let var = |name: &str| {
            env.iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.to_string_lossy().into_owned())
                .or_else(|| std::env::var(name).ok())
        };
        let report = var(REPORT_VAR).is_some_and(|v| !matches!(v.trim(), "" | "0"));
        let policy = match var(BIND_VAR).filter(|v| !v.trim().is_empty()) {
            Some(v) => BindTo::parse(&v),
            None => Ok(BindTo::Auto),
        };
        let topo = Topology::read(&own_cpus());
        match policy {
            Ok(p) => Ok(Binder::new(p, topo, local_size, report)),
            Err(e) => Err(e),
        }
    }

    /// The effective policy (`auto` resolved).
    #[cfg(test)]
    pub fn policy(&self) -> BindTo {
        self.policy
    }

    /// Whether `--bind-to core` puts more ranks than cores on the host's cores (the
    /// wider objects are shared by design).
    pub fn overloaded(&self) -> bool {
        self.policy == BindTo::Core && self.local_size as usize > self.topo.cores.len()
    }

    /// Where local rank `local_rank` is bound (`None`: unbound).
    pub fn binding(&self, local_rank: u32) -> Option<Binding> {
        let cores = &self.topo.cores;
        if cores.is_empty() {
            return None;
        }
        let core_idx = local_rank as usize % cores.len();
        let first = cores[core_idx][0];
        let within = |domains: &[Vec<usize>], what: &str| {
            domains
                .iter()
                .position(|d| d.contains(&first))
                .map(|i| Binding {
                    object: format!("{what} {i}"),
                    cpus: domains[i].clone(),
                })
        };
        match self.policy {
            BindTo::None | BindTo::Auto => None,
            BindTo::Core => within(cores, "core"),
            BindTo::L3cache => within(&self.topo.l3, "l3cache"),
            BindTo::Numa => within(&self.topo.numa, "numa"),
        }
    }

    /// The mask for `binding`, to set in the child.
    pub fn cpuset(binding: &Binding) -> Result<CpuSet, String> {
        let mut set = CpuSet::new();
        for &c in &binding.cpus {
            set.set(c)
                .map_err(|e| format!("cannot bind to CPU {c}: {e}"))?;
        }
        Ok(set)
    }

    /// The `--report-bindings` line of a rank, if asked for.
    pub fn report_line(&self, rank: u32, host: &str, binding: Option<&Binding>) -> Option<String> {
        if !self.report {
            return None;
        }
        Some(match binding {
            Some(b) => format!(
                "gmpirun: rank {rank} on {host}: bound to {} (cpus {})",
                b.object,
                format_cpulist(&b.cpus)
            ),
            None => {
                let all: Vec<usize> = {
                    let mut v: Vec<usize> = self.topo.cores.iter().flatten().copied().collect();
                    v.sort_unstable();
                    v
                };
                format!(
                    "gmpirun: rank {rank} on {host}: not bound (cpus {})",
                    format_cpulist(&all)
                )
            }
        })
    }

    /// The binder of a host's launcher (the local job or a proxy) for its
    /// `local_size` ranks, from the job's variables; its warnings (a bad
    /// `GMPI_BIND_TO`, more ranks than cores) go to stderr, naming `host`.
    pub fn for_host(env: &[(String, OsString)], local_size: u32, host: &str) -> Binder {
        let binder = Binder::from_env(env, local_size).unwrap_or_else(|e| {
            eprintln!("gmpirun: warning: {e}: ranks on {host} are not bound");
            Binder::new(BindTo::None, Topology::read(&own_cpus()), local_size, false)
        });
        if let Some(w) = binder.overload_warning(host) {
            eprintln!("{w}");
        }
        binder
    }

    /// The mask of global rank `rank`, local rank `local_rank`, on `host`, for the
    /// spawn; its `--report-bindings` line is printed to stderr.
    pub fn apply(&self, rank: u32, local_rank: u32, host: &str) -> Option<CpuSet> {
        let binding = self.binding(local_rank);
        if let Some(line) = self.report_line(rank, host, binding.as_ref()) {
            eprintln!("{line}");
        }
        match Binder::cpuset(binding.as_ref()?) {
            Ok(set) => Some(set),
            Err(e) => {
                eprintln!("gmpirun: warning: rank {rank} on {host}: {e}: not bound");
                None
            }
        }
    }

    /// A warning for a host that binds more ranks than it has cores.
    pub fn overload_warning(&self, host: &str) -> Option<String> {
        self.overloaded().then(|| {
            let n = self.topo.cores.len();
            format!(
                "gmpirun: warning: {} ranks bound to {n} core{} on {host} (--bind-to core): ranks share cores",
                self.local_size,
                if n == 1 { "" } else { "s" },
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist(""), Some(vec![]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("x"), None);
        assert_eq!(format_cpulist(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpulist(&[5]), "5");
        assert_eq!(format_cpulist(&[]), "");
    }

    /// Two sockets × 2 cores × 2 threads (cpu c and c+4 are siblings), one L3 and one
    /// NUMA node per socket.
    fn fake_sysfs(dir: &Path) {
        let w = |p: &str, s: &str| {
            let p = dir.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, s).unwrap();
        };
        for c in 0..8 {
            let core = c % 4;
            let socket = core / 2;
            w(
                &format!("cpu/cpu{c}/topology/core_cpus_list"),
                &format!("{},{}\n", core, core + 4),
            );
            w(&format!("cpu/cpu{c}/cache/index0/level"), "1\n");
            w(
                &format!("cpu/cpu{c}/cache/index0/shared_cpu_list"),
                &format!("{c}\n"),
            );
            w(&format!("cpu/cpu{c}/cache/index3/level"), "3\n");
            let l3 = if socket == 0 { "0-1,4-5" } else { "2-3,6-7" };
            w(&format!("cpu/cpu{c}/cache/index3/shared_cpu_list"), l3);
        }
        w("node/node0/cpulist", "0-1,4-5\n");
        w("node/node1/cpulist", "2-3,6-7\n");
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("gmpi-bind-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn topology_from_sysfs() {
        let d = tmp("topo");
        fake_sysfs(&d);
        let all: Vec<usize> = (0..8).collect();
        let t = Topology::read_from(&d, &all);
        assert_eq!(
            t.cores,
            vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
        );
        assert_eq!(t.l3, vec![vec![0, 1, 4, 5], vec![2, 3, 6, 7]]);
        assert_eq!(t.numa, t.l3);
        // Restricted (taskset -c 1,2,5): only those threads count.
        let t = Topology::read_from(&d, &[1, 2, 5]);
        assert_eq!(t.cores, vec![vec![1, 5], vec![2]]);
        assert_eq!(t.l3, vec![vec![1, 5], vec![2]]);
        // No sysfs at all: each CPU a core, all in one cache and one node.
        let t = Topology::read_from(&d.join("missing"), &[0, 1]);
        assert_eq!(t.cores, vec![vec![0], vec![1]]);
        assert_eq!(t.l3, vec![vec![0, 1]]);
        assert_eq!(t.numa, vec![vec![0, 1]]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn policies() {
        let d = tmp("policy");
        fake_sysfs(&d);
        let all: Vec<usize> = (0..8).collect();
        let t = Topology::read_from(&d, &all);
        let _ = std::fs::remove_dir_all(&d);
        // Default: core for 2..=cores ranks, unbound for 1 or more than the cores.
        assert_eq!(
            Binder::new(BindTo::Auto, t.clone(), 4, false).policy(),
            BindTo::Core
        );
        assert_eq!(
            Binder::new(BindTo::Auto, t.clone(), 1, false).policy(),
            BindTo::None
        );
        assert_eq!(
            Binder::new(BindTo::Auto, t.clone(), 5, false).policy(),
            BindTo::None
        );
        let b = Binder::new(BindTo::Core, t.clone(), 6, true);
        let cpus: Vec<Vec<usize>> = (0..6).map(|r| b.binding(r).unwrap().cpus).collect();
        assert_eq!(cpus[0], vec![0, 4]);
        assert_eq!(cpus[3], vec![3, 7]);
        assert_eq!(cpus[4], vec![0, 4], "wraps when overloaded");
        assert!(b.overloaded());
        assert!(b
            .overload_warning("h")
            .unwrap()
            .contains("6 ranks bound to 4 cores"));
        assert_eq!(
            b.report_line(3, "h", b.binding(3).as_ref()).unwrap(),
            "gmpirun: rank 3 on h: bound to core 3 (cpus 3,7)"
        );
        let b = Binder::new(BindTo::L3cache, t.clone(), 4, false);
        assert_eq!(b.binding(1).unwrap().cpus, vec![0, 1, 4, 5]);
        assert_eq!(b.binding(2).unwrap().object, "l3cache 1");
        assert!(b.report_line(0, "h", None).is_none());
        let b = Binder::new(BindTo::Numa, t.clone(), 2, false);
        assert_eq!(b.binding(1).unwrap().object, "numa 0");
        let b = Binder::new(BindTo::None, t, 2, true);
        assert_eq!(b.binding(0), None);
        assert_eq!(
            b.report_line(0, "h", None).unwrap(),
            "gmpirun: rank 0 on h: not bound (cpus 0-7)"
        );
        assert!(!b.overloaded());
    }

    #[test]
    fn parse_policy() {
        assert_eq!(BindTo::parse("CORE"), Ok(BindTo::Core));
        assert_eq!(BindTo::parse("l3cache"), Ok(BindTo::L3cache));
        assert!(BindTo::parse("socket")
            .unwrap_err()
            .contains("GMPI_BIND_TO=socket"));
    }
}
