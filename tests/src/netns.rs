//! Several "hosts" on this machine for multi-host jobs, as `../shared/TESTING.md` describes.
//!
//! [`Cluster::start`] builds N hosts: each a network namespace with one interface on a
//! private bridge (the bridge lives in a namespace of its own, so nothing in the
//! machine's own network changes), and in it an `sshd` with test-generated host and user
//! keys, running in its own UTS namespace (its own hostname) and mount namespace (its
//! own `/dev/shm`, and a host-private directory at [`Cluster::local_dir`]). Everything a
//! test runs "on host i" ([`Cluster::command`]) enters exactly those namespaces, so it
//! sees what a process started there by `ssh` sees. Hosts reach each other by name
//! through the generated ssh configuration ([`Cluster::ssh_agent`]); names, addresses and
//! files are unique per cluster, so tests run in parallel. `Drop` kills every process
//! left in the namespaces and removes them, also when the test fails.
//!
//! Needs root, `ip` (iproute2), `sshd` (openssh-server), `ssh`, `ssh-keygen`, `nsenter`
//! and `unshare`: when one is missing, `start` prints `SKIPPED: <reason>` and returns
//! `None`. Set `GMPI_NETNS_KEEP=1` to keep the scratch directory for a post-mortem.
//!
//! This file is also compiled into gmpirun's own tests (`launcher/tests/hosts.rs`).

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long an `sshd` may take to listen.
const SSHD_START: Duration = Duration::from_secs(10);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// One host of a [`Cluster`].
#[derive(Debug)]
pub struct FakeHost {
    /// Its network namespace.
    pub ns: String,
    /// Its hostname (and the name ssh reaches it by).
    pub name: String,
    /// Its address on the bridge.
    pub addr: Ipv4Addr,
    sshd: Option<Child>,
}

/// N hosts on one machine; see the module documentation.
#[derive(Debug)]
pub struct Cluster {
    tag: String,
    dir: PathBuf,
    switch: String,
    hosts: Vec<FakeHost>,
    /// A name in the ssh configuration whose address nobody has.
    unreachable: String,
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `program args`, panicking with its output if it fails.
fn must(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether this process runs as root (effective uid 0, from `/proc/self/status`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Uid:"))?;
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false)
}

fn sshd_path() -> Option<PathBuf> {
    ["/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

impl Cluster {
    /// Builds `n` hosts, or says why it cannot (`SKIPPED: ...`) and returns `None`.
    pub fn start(n: usize) -> Option<Cluster> {
        if !is_root() {
            eprintln!("SKIPPED: multi-host tests need root (network namespaces, sshd)");
            return None;
        }
        for program in ["ip", "ssh", "ssh-keygen", "nsenter", "unshare"] {
            if !have(program) {
                eprintln!("SKIPPED: `{program}` is not installed (apt-get install openssh-server iproute2)");
                return None;
            }
        }
        let Some(sshd) = sshd_path() else {
            eprintln!("SKIPPED: sshd is not installed (apt-get install openssh-server)");
            return None;
        };
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("gt{pid}x{id}");
        let probe = format!("{tag}-probe");
        let made = Command::new("ip")
            .args(["netns", "add", &probe])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !made {
            eprintln!("SKIPPED: cannot create network namespaces here (`ip netns add` failed)");
            return None;
        }
        must("ip", &["netns", "del", &probe]);
        let dir = std::env::temp_dir().join(format!("gmpi-netns-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("local")).expect("scratch directory");
        let mut cluster = Cluster {
            switch: format!("{tag}-sw"),
            tag: tag.clone(),
            dir,
            hosts: Vec::new(),
            unreachable: format!("{tag}-ghost"),
        };
        // From here on, `Drop` cleans up whatever was made, even if a step panics.
        cluster.build(n, &sshd, pid, id);
        Some(cluster)
    }

    fn build(&mut self, n: usize, sshd: &Path, pid: u32, id: u32) {
        let net = [10, 100 + (pid % 100) as u8, (id % 250) as u8];
        let addr = |i: usize| Ipv4Addr::new(net[0], net[1], net[2], (i + 1) as u8);
        let d = self.dir.clone();
        let p = |name: &str| d.join(name).to_string_lossy().into_owned();
        must(
            "ssh-keygen",
            &["-q", "-t", "ed25519", "-N", "", "-f", &p("hostkey")],
        );
        must(
            "ssh-keygen",
            &["-q", "-t", "ed25519", "-N", "", "-f", &p("id")],
        );
        std::fs::copy(d.join("id.pub"), d.join("authorized_keys")).expect("authorized_keys");
        std::fs::create_dir_all("/run/sshd").expect("/run/sshd");

        must("ip", &["netns", "add", &self.switch]);
        must(
            "ip",
            &["-n", &self.switch, "link", "add", "br0", "type", "bridge"],
        );
        must("ip", &["-n", &self.switch, "link", "set", "br0", "up"]);
        let mut ssh_config = format!(
            "Host *\n  User root\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
             StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  \
             GlobalKnownHostsFile /dev/null\n  LogLevel ERROR\n  ConnectionAttempts 1\n",
            p("id")
        );
        for i in 0..n {
            let ns = format!("{}-{i}", self.tag);
            let name = format!("{}n{i}", self.tag);
            must("ip", &["netns", "add", &ns]);
            self.hosts.push(FakeHost {
                ns: ns.clone(),
                name: name.clone(),
                addr: addr(i),
                sshd: None,
            });
            let port = format!("p{i}");
            must(
                "ip",
                &[
                    "link",
                    "add",
                    "eth0",
                    "netns",
                    &ns,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &port,
                    "netns",
                    &self.switch,
                ],
            );
            must(
                "ip",
                &["-n", &self.switch, "link", "set", &port, "master", "br0"],
            );
            must("ip", &["-n", &self.switch, "link", "set", &port, "up"]);
            must(
                "ip",
                &[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("{}/24", addr(i)),
                    "dev",
                    "eth0",
                ],
            );
            must("ip", &["-n", &ns, "link", "set", "lo", "up"]);
            must("ip", &["-n", &ns, "link", "set", "eth0", "up"]);
            std::fs::create_dir_all(d.join(format!("host{i}"))).expect("host directory");
            let config = format!(
                "ListenAddress {}\nHostKey {}\nAuthorizedKeysFile {}\nPidFile none\n\
                 PermitRootLogin yes\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nMaxStartups 100\nMaxSessions 100\n\
                 PrintMotd no\nUseDNS no\n",
                addr(i),
                p("hostkey"),
                p("authorized_keys")
            );
            std::fs::write(d.join(format!("sshd{i}.conf")), config).expect("sshd config");
            ssh_config.push_str(&format!("Host {name}\n  HostName {}\n", addr(i)));
            let log = File::create(d.join(format!("sshd{i}.log"))).expect("sshd log");
            // ip netns exec, unshare and sh all exec: the child's pid is sshd's.
            let script = format!(
                "hostname {name} && mount -t tmpfs -o mode=1777 tmpfs /dev/shm && \
                 mount --bind {host_dir} {local} && exec {sshd} -D -e -f {conf}",
                host_dir = p(&format!("host{i}")),
                local = p("local"),
                sshd = sshd.display(),
                conf = p(&format!("sshd{i}.conf")),
            );
            let child = Command::new("ip")
                .args([
                    "netns", "exec", &ns, "unshare", "--uts", "--mount", "sh", "-c", &script,
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start sshd");
            self.hosts[i].sshd = Some(child);
        }
        // An address on the bridge that nobody has.
        ssh_config.push_str(&format!(
            "Host {}\n  HostName {}\n",
            self.unreachable,
            addr(200)
        ));
        std::fs::write(d.join("ssh_config"), ssh_config).expect("ssh config");
        let started = Instant::now();
        for i in 0..n {
            let log = d.join(format!("sshd{i}.log"));
            loop {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains("Server listening on") {
                    break;
                }
                let exited = self.hosts[i]
                    .sshd
                    .as_mut()
                    .is_some_and(|c| c.try_wait().ok().flatten().is_some());
                assert!(!exited, "sshd of {} exited: {text}", self.hosts[i].name);
                assert!(
                    started.elapsed() < SSHD_START,
                    "sshd of {} does not listen: {text}",
                    self.hosts[i].name
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether the cluster has no host.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// Host `i`.
    pub fn host(&self, i: usize) -> &FakeHost {
        &self.hosts[i]
    }

    /// Host `i`'s name (its hostname, and the name ssh reaches it by).
    pub fn name(&self, i: usize) -> &str {
        &self.hosts[i].name
    }

    /// A host name that ssh tries to reach at an address nobody answers.
    pub fn unreachable_name(&self) -> &str {
        &self.unreachable
    }

    /// A scratch directory every host sees (the shared filesystem).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path where each host sees its own private directory.
    pub fn local_dir(&self) -> PathBuf {
        self.dir.join("local")
    }

    /// Where host `i`'s private directory is, seen from the test.
    pub fn host_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("host{i}"))
    }

    /// The launch agent for gmpirun (`--launch-agent` / `GMPI_SSH`).
    pub fn ssh_agent(&self) -> String {
        format!("ssh -F {}", self.dir.join("ssh_config").display())
    }

    fn sshd_pid(&self, i: usize) -> u32 {
        self.hosts[i].sshd.as_ref().expect("sshd running").id()
    }

    /// A command that runs `program` on host `i` (its network, hostname and mounts).
    pub fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.sshd_pid(i).to_string(), "-n", "-u", "-m", "--"])
            .arg(program);
        cmd
    }

    /// Takes host `i`'s network link down (or up again).
    pub fn set_link(&self, i: usize, up: bool) {
        let state = if up { "up" } else { "down" };
        must(
            "ip",
            &["-n", &self.hosts[i].ns, "link", "set", "eth0", state],
        );
    }

    /// Processes in host `i`'s network namespace: `(pid, command line)`.
    pub fn processes(&self, i: usize) -> Vec<(u32, String)> {
        let out = Command::new("ip")
            .args(["netns", "pids", &self.hosts[i].ns])
            .output()
            .expect("ip netns pids");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter_map(|pid: u32| Some((pid, cmdline(pid)?)))
            .collect()
    }

    /// Processes of any host whose command line contains `needle`.
    pub fn processes_matching(&self, needle: &str) -> Vec<(u32, String)> {
        (0..self.len())
            .flat_map(|i| self.processes(i))
            .filter(|(_, c)| c.contains(needle))
            .collect()
    }

    /// Entries of host `i`'s `/dev/shm` whose names start with `prefix`.
    pub fn shm_files(&self, i: usize, prefix: &str) -> Vec<String> {
        let out: Output = self
            .command(i, "ls")
            .arg("/dev/shm")
            .output()
            .expect("ls /dev/shm");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    }
}

/// The command line of `pid`, arguments joined by spaces (`None` once it is gone).
pub fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" ")
            .trim_end()
            .to_owned(),
    )
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut namespaces: Vec<String> = self.hosts.iter().map(|h| h.ns.clone()).collect();
        namespaces.push(self.switch.clone());
        // Everything left in a namespace dies with it: sshd, sessions, strays.
        for _round in 0..3 {
            let mut any = false;
            for ns in &namespaces {
                let out = Command::new("ip").args(["netns", "pids", ns]).output();
                let Ok(out) = out else { continue };
                let pids: Vec<String> = String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect();
                if !pids.is_empty() {
                    any = true;
                    let _ = Command::new("kill")
                        .arg("-9")
                        .args(&pids)
                        .stderr(Stdio::null())
                        .status();
                }
            }
            for host in &mut self.hosts {
                if let Some(mut child) = host.sshd.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
            if !any {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for ns in &namespaces {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
        if std::env::var_os("GMPI_NETNS_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("GMPI_NETNS_KEEP: kept {}", self.dir.display());
        }
    }
}
