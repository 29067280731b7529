//! gmpi ranks started, unchanged, by launchers other than gmpirun: MPICH's Hydra
//! (`mpiexec.hydra`) and Slurm (`srun --mpi=pmi2` on a one-node Slurm this test starts
//! itself: munged, slurmctld and slurmd with a configuration generated in a temporary
//! directory, stopped again by a drop guard). Both serve the PMI-1 wire protocol that
//! gmpi's runtime speaks.
//!
//! Checked under each: the PMI client against the real server (`gmpi-pmi-probe`: values
//! of every length, fences, a missing key); rings and collectives of the Rust scenario
//! programs at np 1..4; C programs built with `gmpicc`; a rank that calls `MPI_Abort`,
//! panics, exits early or is killed ends the job (for the last two, Slurm needs
//! `--kill-on-bad-exit`: it does not end a step for a task's exit by itself); no rank
//! survives and no `/dev/shm/gmpi-*` file of the job is left.
//!
//! `gmpirun` inside `salloc` takes its hosts and slots from the allocation (without -n:
//! one rank per allocated task) and starts its proxy as a Slurm step with `srun`: the
//! ranks see `SLURM_STEP_ID`; a killed rank ends the job; every allocation ends.
//!
//! Prerequisites come from `.ci/run` (Debian `mpich`, `slurm-wlm`, `munge`); without a
//! launcher, its test prints `SKIPPED: <reason>` and returns. Slurm's daemons run as
//! root, as in CI.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const CHECK: &str = env!("CARGO_BIN_EXE_gmpi-check");
const COLL: &str = env!("CARGO_BIN_EXE_gmpi-coll");
const PROBE: &str = env!("CARGO_BIN_EXE_gmpi-pmi-probe");

/// Longest any one job may take before the guard ends it and the test fails.
const JOB_LIMIT: Duration = Duration::from_secs(60);

/// `tool` on PATH or in the sbin directories (where Debian puts the daemons).
fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"])
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file());
    found
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A unique value put into every rank's environment, to find them afterwards.
fn new_mark(what: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{what}-{}-{n}", std::process::id())
}

/// Live (not zombie) processes whose environment holds `GMPI_TEST_MARK=mark`.
fn marked_processes(mark: &str) -> Vec<u32> {
    let needle = format!("GMPI_TEST_MARK={mark}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let live = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| !s.contains(") Z "));
            live && env.split(|&b| b == 0).any(|v| v == needle.as_bytes())
        })
        .collect()
}

/// Fails if a rank of the job marked `mark` is still alive a few seconds after the
/// launcher returned (the launcher reaps asynchronously on some paths).
fn assert_no_survivors(mark: &str, what: &str) {
    let t = Instant::now();
    loop {
        let left = marked_processes(mark);
        if left.is_empty() {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{what}: ranks {left:?} outlived the job"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `/dev/shm` entries whose name starts with `gmpi-{tag}`.
fn shm_files(tag: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("gmpi-{tag}")))
                .collect()
        })
        .unwrap_or_default()
}

/// How a guarded job ended.
struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// The guard had to end it.
    hung: bool,
}

impl Finished {
    fn text(&self) -> String {
        format!(
            "status {:?}{}\n--- stdout\n{}--- stderr\n{}",
            self.status,
            if self.hung {
                " (HUNG: ended by the guard)"
            } else {
                ""
            },
            self.stdout,
            self.stderr
        )
    }

    fn oks(&self, needle: &str) -> usize {
        self.stdout.lines().filter(|l| l.contains(needle)).count()
    }
}

fn reader(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Runs `cmd` (stdin from /dev/null, in its own process group) for at most
/// [`JOB_LIMIT`]; past it, runs `on_hang`, kills the group and reports `hung`.
fn run_guarded(mut cmd: Command, on_hang: &dyn Fn()) -> Finished {
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let out = reader(child.stdout.take().expect("piped"));
    let err = reader(child.stderr.take().expect("piped"));
    let t = Instant::now();
    let mut hung = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for the launcher") {
            break st;
        }
        if t.elapsed() > JOB_LIMIT {
            hung = true;
            on_hang();
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            break child.wait().expect("wait for the killed launcher");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Finished {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        hung,
    }
}

/// C programs of the C ABI suite built with the installed `gmpicc` (once per run).
fn c_programs() -> &'static [(String, PathBuf)] {
    static P: std::sync::OnceLock<Vec<(String, PathBuf)>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let prefix = gmpi_tests::capi_prefix();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capi/tests/c");
        let dir = gmpi_tests::target_dir()
            .join("launcher-tests")
            .join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).expect("scratch dir");
        ["p2p", "coll", "fatal"]
            .iter()
            .map(|name| {
                let exe = dir.join(name);
                let out = Command::new(prefix.join("bin/gmpicc"))
                    .arg("-o")
                    .arg(&exe)
                    .arg(src.join(format!("{name}.c")))
                    .output()
                    .expect("run gmpicc");
                assert!(
                    out.status.success(),
                    "gmpicc {name}.c failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                (name.to_string(), exe)
            })
            .collect()
    })
}

fn c_program(name: &str) -> PathBuf {
    c_programs()
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| p.clone())
        .expect("known C program")
}

/// The `ring` example, when this test run built it (`cargo test --workspace` does).
fn ring_example() -> Option<PathBuf> {
    let p = gmpi_tests::target_dir().join("ring");
    if p.exists() {
        Some(p)
    } else {
        eprintln!("note: the ring example is not built in this run; the rings of gmpi-check sweep stand in");
        None
    }
}

/// One job a launcher runs in these tests.
struct Job {
    np: u32,
    prog: PathBuf,
    args: Vec<&'static str>,
    /// Good jobs: the line each rank prints on success (or rank 0 alone, with
    /// `per_rank` false). Failing jobs: what stderr must mention.
    says: &'static str,
    per_rank: bool,
}

impl Job {
    fn new(np: u32, prog: impl Into<PathBuf>, args: &[&'static str], says: &'static str) -> Job {
        Job {
            np,
            prog: prog.into(),
            args: args.to_vec(),
            says,
            per_rank: true,
        }
    }

    fn rank0_only(mut self) -> Job {
        self.per_rank = false;
        self
    }

    /// How many lines must contain `says`.
    fn oks_wanted(&self) -> usize {
        if self.per_rank {
            self.np as usize
        } else {
            1
        }
    }

    fn describe(&self, launcher: &str) -> String {
        format!(
            "{launcher} -n {} {} {:?}",
            self.np,
            name_of(&self.prog),
            self.args
        )
    }
}

/// The jobs every launcher must run to success.
fn good_jobs() -> Vec<Job> {
    let mut jobs = Vec::new();
    for np in [1, 4] {
        jobs.push(Job::new(np, PROBE, &[], "gmpi-pmi-probe OK on rank"));
    }
    for np in [1, 2, 3, 4] {
        // Every rank sends to the next and receives from the previous, every size
        // class up to the rendezvous protocols.
        jobs.push(Job::new(np, CHECK, &["sweep", "300000"], " OK on rank "));
    }
    jobs.push(Job::new(4, COLL, &["all", "nobig"], " OK on rank "));
    if let Some(ring) = ring_example() {
        jobs.push(Job::new(4, ring, &["7"], "(correct)").rank0_only());
    }
    for np in [1, 2, 3, 4] {
        jobs.push(Job::new(np, c_program("p2p"), &[], "OK p2p").rank0_only());
    }
    jobs.push(Job::new(4, c_program("coll"), &[], "OK coll").rank0_only());
    jobs
}

/// The failures every launcher must turn into the end of the whole job, with what
/// stderr must mention under both. `MPI_Abort`, fatal MPI errors and panics reach the
/// launcher through PMI `abort`; a rank that exits early or is killed is noticed by
/// Hydra itself, and under Slurm (which ends a step for that only with
/// `--kill-on-bad-exit`, not given here) by its peers' watch, which then aborts.
fn failing_jobs() -> Vec<Job> {
    vec![
        Job::new(4, CHECK, &["crash", "abort"], "MPI_Abort"),
        Job::new(4, CHECK, &["crash", "panic"], "panicked"),
        Job::new(4, CHECK, &["crash", "exit3"], ""),
        Job::new(4, CHECK, &["crash", "kill"], ""),
        Job::new(2, c_program("fatal"), &[], ""),
    ]
}

/// Under Slurm, the rank that ends the job for a peer that exited early or was killed
/// is another rank of the node, and it names the one that is gone.
const SLURM_WATCH_SAYS: &[(&str, &str)] = &[("exit3", "rank 3 (pid"), ("kill", "rank 3 (pid")];

fn name_of(prog: &Path) -> String {
    prog.file_name()
        .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
}

// ------------------------------------------------------------------------ Hydra

/// Runs `mpiexec.hydra -n NP PROG ARGS` with `GMPI_TEST_MARK=mark` in every rank.
fn hydra(hydra: &Path, np: u32, prog: &Path, args: &[&str], mark: &str) -> Finished {
    let mut c = Command::new(hydra);
    c.args(["-n", &np.to_string()])
        .arg(prog)
        .args(args)
        .env("GMPI_TEST_MARK", mark)
        .env("LD_LIBRARY_PATH", gmpi_tests::capi_prefix().join("lib"));
    run_guarded(c, &|| {})
}

#[test]
fn hydra_runs_gmpi_jobs_and_ends_failed_ones() {
    let Some(mpiexec) = which("mpiexec.hydra") else {
        eprintln!(
            "SKIPPED: mpiexec.hydra is not installed (Debian package mpich); Hydra was not tested"
        );
        return;
    };
    let shm_before = shm_files("kvs_");
    for job in good_jobs() {
        let what = job.describe("mpiexec.hydra");
        let mark = new_mark("hydra");
        let f = hydra(&mpiexec, job.np, &job.prog, &job.args, &mark);
        assert!(f.status.success() && !f.hung, "{what}: {}", f.text());
        assert_eq!(f.oks(job.says), job.oks_wanted(), "{what}: {}", f.text());
        assert_no_survivors(&mark, &what);
    }
    for job in failing_jobs() {
        let what = job.describe("mpiexec.hydra");
        let mark = new_mark("hydra-fail");
        let f = hydra(&mpiexec, job.np, &job.prog, &job.args, &mark);
        assert!(
            !f.status.success() && !f.hung,
            "{what} must fail: {}",
            f.text()
        );
        assert!(
            f.stderr.contains(job.says),
            "{what}: no `{}` in {}",
            job.says,
            f.text()
        );
        assert_no_survivors(&mark, &what);
    }
    // Segments are unlinked by the ranks themselves once all have attached (Hydra's
    // kvsname, and so the files' job tag, is `kvs_<mpiexec pid>_...`).
    let left: Vec<String> = shm_files("kvs_")
        .into_iter()
        .filter(|f| !shm_before.contains(f))
        .collect();
    assert!(
        left.is_empty(),
        "shared-memory files left by Hydra jobs: {left:?}"
    );
}

// ------------------------------------------------------------------------ Slurm

/// A one-node Slurm cluster private to this test: its own munge key and socket, ports,
/// state and spool directories, logs and job-id range. Dropping it cancels its jobs and
/// stops the daemons.
struct Slurm {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<(String, Child)>,
    first_job: u32,
    nodes: Vec<SlurmNode>,
}

/// A node of a test [`Slurm`]: this machine (no namespace), or a fake host of
/// [`gmpi_tests::netns::Cluster`] given by its network namespace.
#[derive(Clone)]
struct SlurmNode {
    name: String,
    addr: String,
    netns: Option<String>,
}

impl SlurmNode {
    /// This machine, by its host name, at 127.0.0.1.
    fn this_machine() -> Result<SlurmNode, String> {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().split('.').next().unwrap_or("").to_owned())
            .unwrap_or_default();
        if host.is_empty() {
            return Err("this machine has no host name".into());
        }
        Ok(SlurmNode {
            name: host,
            addr: "127.0.0.1".into(),
            netns: None,
        })
    }

    /// `program` in this node's network namespace.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match &self.netns {
            None => Command::new(program),
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}"))
                    .arg("--")
                    .arg(program);
                c
            }
        }
    }
}

/// How many job ids one test run may use (its jobs are `first_job..first_job + this`).
const JOB_IDS: u32 = 1000;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free TCP port")
}

fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let t = Instant::now();
    while !ready() {
        if t.elapsed() > limit {
            return Err(format!("{what}: not ready after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

impl Slurm {
    /// Starts munged, slurmctld (on the first node) and a slurmd per node; `Err` says
    /// which step failed, with logs. A node in a network namespace gets its slurmd in
    /// its own UTS namespace (its host name) and mount namespace (its own `/dev/shm`),
    /// as a separate machine would have; the rest of the file system, `/sys` (cgroups)
    /// included, is this machine's.
    fn start(tools: &SlurmTools, nodes: Vec<SlurmNode>) -> Result<Slurm, String> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gmpi-slurm-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let spools = nodes.iter().map(|n| format!("spool-{}", n.name));
        for sub in ["munge", "state", "log"]
            .into_iter()
            .map(String::from)
            .chain(spools)
        {
            std::fs::create_dir_all(dir.join(sub)).map_err(|e| format!("mkdir: {e}"))?;
        }
        // Job ids unique to this run and cluster, so that its /dev/shm names are too.
        let first_job = 10_000_000 + ((std::process::id() % 25_000) * 2 + n % 2) * JOB_IDS;
        let mut me = Slurm {
            conf: dir.join("slurm.conf"),
            dir,
            daemons: Vec::new(),
            first_job,
            nodes,
        };
        let d = me.dir.clone();
        let mut key = vec![0u8; 128];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut r| r.read_exact(&mut key))
            .map_err(|e| format!("munge key from /dev/urandom: {e}"))?;
        std::fs::write(d.join("munge/key"), key).map_err(|e| format!("munge key: {e}"))?;
        set_mode(&d.join("munge/key"), 0o600)?;
        set_mode(&d.join("munge"), 0o700)?;
        let socket = d.join("munge/socket");
        me.spawn(
            "munged",
            Command::new(&tools.munged)
                .args(["--foreground", "--force", "--num-threads=2"])
                .arg(format!("--socket={}", socket.display()))
                .arg(format!("--key-file={}", d.join("munge/key").display()))
                .arg(format!("--pid-file={}", d.join("munge/pid").display()))
                .arg(format!("--seed-file={}", d.join("munge/seed").display()))
                .arg(format!("--log-file={}", d.join("log/munged.log").display())),
        )?;
        wait_for("munged", Duration::from_secs(10), || socket.exists())
            .map_err(|e| me.failed(&e))?;

        let cpus = Command::new(&tools.slurmd)
            .arg("-C")
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("CPUs=")?.parse::<u32>().ok())
            })
            .unwrap_or(1);
        let conf = format!(
            "# Generated by gmpi's tests/tests/launchers.rs: a one-node cluster for one test run.
ClusterName=gmpitest
SlurmctldHost={head}({head_addr})
SlurmctldPort={ctld}
SlurmdPort={slurmd}
AuthType=auth/munge
AuthInfo=socket={socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
FirstJobId={first_job}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
{node_lines}PartitionName=gmpi Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
",
            head = me.nodes[0].name,
            head_addr = me.nodes[0].addr,
            node_lines = me
                .nodes
                .iter()
                .map(|n| format!(
                    "NodeName={} NodeAddr={} CPUs={cpus} State=UNKNOWN\n",
                    n.name, n.addr
                ))
                .collect::<String>(),
            names = me
                .nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(","),
            ctld = free_port(),
            slurmd = free_port(),
            socket = socket.display(),
            d = d.display(),
        );
        std::fs::write(&me.conf, conf).map_err(|e| format!("slurm.conf: {e}"))?;
        let c = me.conf.clone();
        let head = me.nodes[0].clone();
        if head.netns.is_none() {
            me.spawn(
                "slurmctld",
                Command::new(&tools.slurmctld)
                    .arg("-D")
                    .arg("-i")
                    .arg("-f")
                    .arg(&c),
            )?;
        } else {
            // slurmctld runs only on the host named SlurmctldHost.
            let script = format!(
                "hostname {n} && exec {ctld} -D -i -f {conf}",
                n = head.name,
                ctld = tools.slurmctld.display(),
                conf = c.display(),
            );
            me.spawn(
                "slurmctld",
                head.command("unshare")
                    .args(["--uts", "sh", "-c"])
                    .arg(script),
            )?;
        }
        for node in me.nodes.clone() {
            let name = format!("slurmd-{}", node.name);
            if node.netns.is_none() {
                me.spawn(
                    &name,
                    Command::new(&tools.slurmd)
                        .args(["-D", "-N", &node.name, "-f"])
                        .arg(&c),
                )?;
                continue;
            }
            // unshare and sh exec: the child's pid is slurmd's.
            let script = format!(
                "hostname {n} && mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec {slurmd} -D -N {n} -f {conf}",
                n = node.name,
                slurmd = tools.slurmd.display(),
                conf = c.display(),
            );
            me.spawn(
                &name,
                node.command("unshare")
                    .args(["--uts", "--mount", "--propagation", "private", "sh", "-c"])
                    .arg(script),
            )?;
        }
        let want = me.nodes.len();
        let idle = wait_for(
            "every node (sinfo says idle)",
            Duration::from_secs(30),
            || {
                let mut sinfo = me.command(&tools.sinfo);
                sinfo
                    .args(["-h", "-N", "-o", "%t"])
                    .output()
                    .is_ok_and(|o| {
                        let out = String::from_utf8_lossy(&o.stdout).into_owned();
                        out.lines().filter(|l| l.trim() == "idle").count() == want
                    })
            },
        );
        idle.map_err(|e| me.failed(&e))?;
        Ok(me)
    }

    fn spawn(&mut self, name: &str, cmd: &mut Command) -> Result<(), String> {
        let log = std::fs::File::create(self.dir.join(format!("log/{name}.out")))
            .map_err(|e| format!("{name} log: {e}"))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .env("SLURM_CONF", &self.conf)
            .spawn()
            .map_err(|e| self.failed(&format!("cannot start {name}: {e}")))?;
        self.daemons.push((name.to_owned(), child));
        Ok(())
    }

    /// `what`, with the tail of every log, to explain a failure.
    fn failed(&self, what: &str) -> String {
        let mut s = format!("{what}\n");
        if let Ok(dir) = std::fs::read_dir(self.dir.join("log")) {
            for e in dir.flatten() {
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                s.push_str(&format!("--- {}\n", e.path().display()));
                for l in tail.into_iter().rev() {
                    s.push_str(l);
                    s.push('\n');
                }
            }
        }
        s
    }

    /// `tool` (a client: srun, salloc, squeue...) on the network of the first node,
    /// which stands for the login node.
    fn command(&self, tool: &Path) -> Command {
        let mut c = self.nodes[0].command(tool);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// `gmpi-*` files in node `i`'s `/dev/shm` (seen through its slurmd).
    fn node_shm_files(&self, i: usize) -> Vec<String> {
        let name = format!("slurmd-{}", self.nodes[i].name);
        let Some((_, d)) = self.daemons.iter().find(|(n, _)| *n == name) else {
            return Vec::new();
        };
        std::fs::read_dir(format!("/proc/{}/root/dev/shm", d.id()))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("gmpi-"))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn cancel_all(&self, tools: &SlurmTools) {
        let _ = self
            .command(&tools.scancel)
            .args(["--user=root", "--full"])
            .output();
    }
}

fn set_mode(p: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", p.display()))
}

impl Drop for Slurm {
    fn drop(&mut self) {
        if let Ok(tools) = SlurmTools::find() {
            self.cancel_all(&tools);
            let _ = wait_for("no jobs left", Duration::from_secs(10), || {
                self.command(&tools.squeue)
                    .args(["-h", "-o", "%i"])
                    .output()
                    .is_ok_and(|o| o.status.success() && o.stdout.is_empty())
            });
        }
        // Stop in reverse order: slurmd, slurmctld, munged.
        for (_, child) in self.daemons.iter_mut().rev() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let t = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if t.elapsed() > Duration::from_secs(5) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Keep the logs of a failed run for a look; remove them otherwise.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("Slurm test directory kept: {}", self.dir.display());
        }
    }
}

/// Paths of the Slurm and munge programs the test needs.
struct SlurmTools {
    munged: PathBuf,
    slurmctld: PathBuf,
    slurmd: PathBuf,
    srun: PathBuf,
    salloc: PathBuf,
    sinfo: PathBuf,
    squeue: PathBuf,
    scancel: PathBuf,
}

impl SlurmTools {
    fn find() -> Result<SlurmTools, String> {
        let get = |t: &str, pkg: &str| {
            which(t).ok_or_else(|| format!("{t} is not installed (Debian package {pkg})"))
        };
        Ok(SlurmTools {
            munged: get("munged", "munge")?,
            slurmctld: get("slurmctld", "slurm-wlm")?,
            slurmd: get("slurmd", "slurm-wlm")?,
            srun: get("srun", "slurm-wlm")?,
            salloc: get("salloc", "slurm-wlm")?,
            sinfo: get("sinfo", "slurm-wlm")?,
            squeue: get("squeue", "slurm-wlm")?,
            scancel: get("scancel", "slurm-wlm")?,
        })
    }
}

#[test]
fn srun_mpi_pmi2_runs_gmpi_jobs_and_ends_failed_ones() {
    let tools = match SlurmTools::find() {
        Ok(t) => t,
        Err(why) => {
            eprintln!("SKIPPED: {why}; Slurm was not tested");
            return;
        }
    };
    if !is_root() {
        eprintln!("SKIPPED: Slurm's daemons need root here; Slurm was not tested");
        return;
    }
    let node = SlurmNode::this_machine().unwrap_or_else(|e| panic!("{e}"));
    let slurm =
        Slurm::start(&tools, vec![node]).unwrap_or_else(|e| panic!("starting Slurm failed: {e}"));
    let srun = |job: &Job, mark: &str| {
        let mut c = slurm.command(&tools.srun);
        // -O: more tasks than the node's CPUs (the machine may have 2).
        c.args(["--mpi=pmi2", "-O", "-n", &job.np.to_string()])
            .arg(&job.prog)
            .args(&job.args)
            .env("GMPI_TEST_MARK", mark)
            .env("LD_LIBRARY_PATH", gmpi_tests::capi_prefix().join("lib"));
        run_guarded(c, &|| slurm.cancel_all(&tools))
    };
    for job in good_jobs() {
        let what = job.describe("srun --mpi=pmi2");
        let mark = new_mark("srun");
        let f = srun(&job, &mark);
        assert!(
            f.status.success() && !f.hung,
            "{what}: {}",
            slurm.failed(&f.text())
        );
        assert_eq!(f.oks(job.says), job.oks_wanted(), "{what}: {}", f.text());
        if job.prog == Path::new(PROBE) {
            // Slurm's kvsname is JOBID.STEPID: the shm names below rely on it.
            let kvs = f.stdout.lines().find_map(|l| l.split("(kvsname ").nth(1));
            let id: Option<u32> = kvs.and_then(|k| k.split('.').next()?.parse().ok());
            assert!(
                id.is_some_and(|j| (slurm.first_job..slurm.first_job + JOB_IDS).contains(&j)),
                "{what}: kvsname {kvs:?} is not JOBID.STEPID of this cluster"
            );
        }
        assert_no_survivors(&mark, &what);
    }
    for job in failing_jobs() {
        let what = job.describe("srun --mpi=pmi2");
        let mark = new_mark("srun-fail");
        let f = srun(&job, &mark);
        assert!(
            !f.status.success() && !f.hung,
            "{what} must fail: {}",
            slurm.failed(&f.text())
        );
        assert!(
            f.stderr.contains(job.says),
            "{what}: no `{}` in {}",
            job.says,
            f.text()
        );
        for (mode, says) in SLURM_WATCH_SAYS {
            if job.args.last() == Some(mode) {
                assert!(
                    f.stderr.contains(says) && f.stderr.contains("without calling MPI_Finalize"),
                    "{what}: the peer watch did not end the job: {}",
                    f.text()
                );
            }
        }
        assert_no_survivors(&mark, &what);
    }
    // gmpirun inside an allocation of this one node: hosts and slots from the
    // allocation, the proxy started as a Slurm step by srun.
    let salloc_gmpirun = |gmpirun_args: &[&str], mark: &str| {
        let mut c = slurm.command(&tools.salloc);
        c.args(["-O", "-n", "4"])
            .arg(gmpi_tests::gmpirun())
            .args(gmpirun_args)
            .env("GMPI_TEST_MARK", mark);
        run_guarded(c, &|| slurm.cancel_all(&tools))
    };
    // Each rank says which Slurm step it runs in (salloc sets no SLURM_STEP_ID: only a
    // step started by srun has one), then runs the sweep.
    let says_step = format!(
        "echo \"rank $PMI_RANK of $PMI_SIZE in job $SLURM_JOB_ID step ${{SLURM_STEP_ID:-none}}\"; exec {CHECK} sweep 300000"
    );
    for np in [None, Some("2")] {
        let what = format!(
            "salloc -n 4 gmpirun {}",
            np.map_or(String::new(), |n| format!("-n {n}"))
        );
        let mark = new_mark("salloc");
        let mut args: Vec<&str> = Vec::new();
        if let Some(n) = np {
            args.extend(["-n", n]);
        }
        args.extend(["/bin/sh", "-c", &says_step]);
        let f = salloc_gmpirun(&args, &mark);
        assert!(
            f.status.success() && !f.hung,
            "{what}: {}",
            slurm.failed(&f.text())
        );
        let want = np.map_or(4, |n| n.parse().unwrap());
        assert_eq!(f.oks(" OK on rank "), want, "{what}: {}", f.text());
        assert!(!f.stderr.contains("gmpirun: note"), "{what}: {}", f.text());
        // Every rank runs under a numbered step of one job of this cluster.
        let steps: Vec<(u32, u32)> = f
            .stdout
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("rank ")?;
                let job = rest
                    .split(" in job ")
                    .nth(1)?
                    .split(' ')
                    .next()?
                    .parse()
                    .ok()?;
                let step = rest.split(" step ").nth(1)?.trim().parse().ok()?;
                Some((job, step))
            })
            .collect();
        assert_eq!(
            steps.len(),
            want,
            "{what}: not every rank ran in a Slurm step: {}",
            f.text()
        );
        assert!(
            steps
                .iter()
                .all(|&(j, _)| (slurm.first_job..slurm.first_job + JOB_IDS).contains(&j)),
            "{what}: {}",
            f.text()
        );
        assert!(
            f.stdout.contains(&format!(" of {want} in job ")),
            "{what}: {}",
            f.text()
        );
        assert_no_survivors(&mark, &what);
    }
    if let Some(ring) = ring_example() {
        let mark = new_mark("salloc-ring");
        let f = salloc_gmpirun(&[ring.to_str().expect("UTF-8 path"), "7"], &mark);
        assert!(
            f.status.success() && !f.hung,
            "salloc gmpirun ring: {}",
            slurm.failed(&f.text())
        );
        assert_eq!(f.oks("(correct)"), 1, "salloc gmpirun ring: {}", f.text());
        assert_no_survivors(&mark, "salloc gmpirun ring");
    }
    // A rank killed under the srun-started proxy ends the whole job, naming it.
    let mark = new_mark("salloc-kill");
    let f = salloc_gmpirun(&[CHECK, "crash", "kill"], &mark);
    assert!(
        !f.status.success() && !f.hung,
        "salloc gmpirun crash kill must fail: {}",
        f.text()
    );
    assert!(
        f.stderr.contains("rank 3"),
        "salloc gmpirun crash kill: {}",
        f.text()
    );
    assert_no_survivors(&mark, "salloc gmpirun crash kill");
    // Every allocation (and so every step of it) ended with its salloc.
    let squeue = || {
        slurm
            .command(&tools.squeue)
            .args(["-h", "-o", "%i %T"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let ended = wait_for("the allocations to end", Duration::from_secs(10), || {
        squeue().trim().is_empty()
    });
    assert!(ended.is_ok(), "jobs left after salloc: {}", squeue());

    // No job of this cluster left a shared-memory file (names: gmpi-JOBID_STEPID-...).
    let ours = slurm.first_job..slurm.first_job + JOB_IDS;
    let left: Vec<String> = shm_files("")
        .into_iter()
        .filter(|n| {
            let job = n["gmpi-".len()..].split('_').next().unwrap_or("");
            job.parse::<u32>().is_ok_and(|j| ours.contains(&j))
        })
        .collect();
    assert!(
        left.is_empty(),
        "shared-memory files left by srun jobs: {left:?}"
    );
}

/// Slurm on two nodes (network namespaces of [`gmpi_tests::netns::Cluster`], each
/// slurmd with its own host name and `/dev/shm`; clients run on the first node's
/// network, as on a login node):
/// - `srun --mpi=pmi2 -N 2 -n 4`: every rank finds its node's peer through shared
///   memory and the other node's two through tcp, and sleeps in one transport while the
///   other can wake it; point-to-point sweeps and the collectives pass;
/// - a rank killed, or calling `MPI_Abort`, on either node ends the step;
/// - `gmpirun` in `salloc -N 2 -n 4` starts its proxies with `srun` on both nodes; each
///   rank sees its own `SLURM_PROCID`/`SLURM_NTASKS`/`SLURM_NODEID`/`SLURM_LOCALID`
///   (not those of the proxy's one-task step); a killed rank ends the job, naming it;
/// - no rank survives, no allocation is left, no `/dev/shm` file is left on a node.
#[test]
fn slurm_across_two_nodes() {
    let tools = match SlurmTools::find() {
        Ok(t) => t,
        Err(why) => {
            eprintln!("SKIPPED: {why}; Slurm across nodes was not tested");
            return;
        }
    };
    let Some(cluster) = gmpi_tests::netns::Cluster::start(2) else {
        return;
    };
    let nodes = (0..2)
        .map(|i| SlurmNode {
            name: cluster.name(i).to_owned(),
            addr: cluster.host(i).addr.to_string(),
            netns: Some(cluster.host(i).ns.clone()),
        })
        .collect();
    let slurm =
        Slurm::start(&tools, nodes).unwrap_or_else(|e| panic!("starting Slurm failed: {e}"));
    let names = [cluster.name(0).to_owned(), cluster.name(1).to_owned()];
    let srun = |args: &[&str], mark: &str| {
        let mut c = slurm.command(&tools.srun);
        c.args(["--mpi=pmi2", "-O", "-N", "2", "-n", "4"])
            .args(args)
            .env("GMPI_TEST_MARK", mark)
            .env("GMPI_LOG", "btl=debug,gmpi=debug")
            // Both "nodes" share this machine's cores (see hosts_mpi.rs).
            .env("GMPI_SPIN", "5")
            .env("GMPI_YIELDS", "4")
            .env("LD_LIBRARY_PATH", gmpi_tests::capi_prefix().join("lib"));
        run_guarded(c, &|| slurm.cancel_all(&tools))
    };
    let where_script =
        format!("echo \"task $SLURM_PROCID on $(hostname)\"; exec {CHECK} sweep 300000");
    let jobs: [(&str, Vec<&str>, &str); 3] = [
        (
            "sweep",
            vec!["/bin/sh", "-c", &where_script],
            "gmpi-check sweep OK on rank",
        ),
        ("coll", vec![COLL, "all", "nobig"], " OK on rank "),
        ("c-coll", vec![], "OK coll"),
    ];
    for (name, args, says) in jobs {
        let c_coll = c_program("coll");
        let args: Vec<&str> = if args.is_empty() {
            vec![c_coll.to_str().expect("UTF-8 path")]
        } else {
            args
        };
        let what = format!("srun --mpi=pmi2 -N 2 -n 4 ({name})");
        let mark = new_mark("srun2");
        let f = srun(&args, &mark);
        assert!(
            f.status.success() && !f.hung,
            "{what}: {}",
            slurm.failed(&f.text())
        );
        let want = if name == "c-coll" { 1 } else { 4 };
        assert_eq!(f.oks(says), want, "{what}: {}", f.text());
        for r in 0..4 {
            let said = |s: &str| f.stderr.contains(&format!("[gmpi rank {r}] DEBUG {s}"));
            assert!(
                said("btl: shm: 2 local ranks")
                    && said("btl: tcp: 2 peers")
                    && said("gmpi: idle sleep: one btl, woken across transports"),
                "{what}: rank {r} does not use shm for its node and tcp for the other: {}",
                f.text()
            );
        }
        if name == "sweep" {
            for (i, n) in names.iter().enumerate() {
                let here = f
                    .stdout
                    .lines()
                    .filter(|l| l.starts_with("task ") && l.ends_with(&format!(" on {n}")))
                    .count();
                assert_eq!(
                    here,
                    2,
                    "{what}: node {i} ({n}) ran {here} tasks: {}",
                    f.text()
                );
            }
        }
        assert_no_survivors(&mark, &what);
    }
    for (mode, says) in [("kill", ""), ("abort", "MPI_Abort")] {
        let what = format!("srun --mpi=pmi2 -N 2 -n 4 gmpi-check crash {mode}");
        let mark = new_mark("srun2-fail");
        let f = srun(&[CHECK, "crash", mode], &mark);
        assert!(
            !f.status.success() && !f.hung,
            "{what} must fail: {}",
            slurm.failed(&f.text())
        );
        assert!(
            f.stderr.contains(says),
            "{what}: no `{says}` in {}",
            f.text()
        );
        assert_no_survivors(&mark, &what);
    }

    let salloc_gmpirun = |gmpirun_args: &[&str], mark: &str| {
        let mut c = slurm.command(&tools.salloc);
        c.args(["-O", "-N", "2", "-n", "4"])
            .arg(gmpi_tests::gmpirun())
            .args(gmpirun_args)
            .env("GMPI_TEST_MARK", mark)
            .env("GMPI_SPIN", "5")
            .env("GMPI_YIELDS", "4");
        run_guarded(c, &|| slurm.cancel_all(&tools))
    };
    let says_task = format!(
        "echo \"rank $PMI_RANK task $SLURM_PROCID of $SLURM_NTASKS node $SLURM_NODEID local $SLURM_LOCALID on $(hostname)\"; exec {CHECK} sweep 300000"
    );
    let mark = new_mark("salloc2");
    let what = "salloc -N 2 -n 4 gmpirun";
    let f = salloc_gmpirun(&["/bin/sh", "-c", &says_task], &mark);
    assert!(
        f.status.success() && !f.hung,
        "{what}: {}",
        slurm.failed(&f.text())
    );
    assert_eq!(f.oks(" OK on rank "), 4, "{what}: {}", f.text());
    // By slot: ranks 0, 1 on the first node, 2, 3 on the second.
    for r in 0..4 {
        let line = format!(
            "rank {r} task {r} of 4 node {} local {} on {}",
            r / 2,
            r % 2,
            names[r / 2]
        );
        assert!(
            f.stdout.lines().any(|l| l == line),
            "{what}: no `{line}`: {}",
            f.text()
        );
    }
    assert_no_survivors(&mark, what);
    let mark = new_mark("salloc2-kill");
    let f = salloc_gmpirun(&[CHECK, "crash", "kill"], &mark);
    assert!(
        !f.status.success() && !f.hung,
        "salloc -N 2 gmpirun crash kill must fail: {}",
        f.text()
    );
    // gmpirun names the first failure it hears of: rank 3's death (reported by the
    // second node's proxy) or a rank that failed because of it (`rank 3 failed`).
    assert!(
        f.stderr.contains("rank 3 (pid") && f.stderr.contains(&names[1])
            || f.stderr.contains("rank 3 failed"),
        "salloc -N 2 gmpirun crash kill does not name rank 3 on {}: {}",
        names[1],
        f.text()
    );
    assert_no_survivors(&mark, "salloc -N 2 gmpirun crash kill");

    let squeue = || {
        slurm
            .command(&tools.squeue)
            .args(["-h", "-o", "%i %T"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let ended = wait_for("the allocations to end", Duration::from_secs(10), || {
        squeue().trim().is_empty()
    });
    assert!(ended.is_ok(), "jobs left: {}", squeue());
    for (i, name) in names.iter().enumerate() {
        let left = slurm.node_shm_files(i);
        assert!(
            left.is_empty(),
            "shared-memory files left on {name}: {left:?}"
        );
    }
    // Stop Slurm before the hosts go.
    drop(slurm);
    drop(cluster);
}
