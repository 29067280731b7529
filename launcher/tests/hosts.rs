//! gmpirun across hosts: real jobs on 2, 3 and 8 "hosts" made of network namespaces with
//! their own sshd (the fixture of `tests/src/netns.rs`, see `../shared/TESTING.md`).
//! gmpirun runs on the first host; ranks print their rank and hostname, so placement is
//! checked by where each rank really ran. Failures (unreachable host, missing program,
//! killed rank, killed proxy, dropped link, Ctrl-C) must end the job with a message
//! naming the host or rank and leave no process of the job on any host.
//!
//! Needs root, iproute2 and openssh-server (`.ci/run` installs them); prints
//! `SKIPPED: <reason>` and passes when they are missing.

// Shared with gmpi-tests; not every helper is used here.
#[allow(dead_code)]
#[path = "../../tests/src/netns.rs"]
mod netns;

mod common;

use common::{gmpirun_path, probe, wait_output, Outcome};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use netns::Cluster;

/// Longest any job here may take before the test fails (a safety net, not a measure).
const HANG_LIMIT: Duration = Duration::from_secs(60);
/// How long a cut-off host may take to end its own ranks after gmpirun has exited.
const ORPHAN_LIMIT: Duration = Duration::from_secs(20);

static MARKS: AtomicU32 = AtomicU32::new(0);

/// A string unique to this test run, to find the job's processes by.
fn marker() -> String {
    format!(
        "gmpimark{}x{}",
        std::process::id(),
        MARKS.fetch_add(1, Ordering::Relaxed)
    )
}

/// Starts gmpirun on host 0 with the cluster's ssh as launch agent (`GMPI_SSH`).
fn spawn_on(c: &Cluster, args: &[&str], stdin: Stdio) -> Child {
    c.command(0, gmpirun_path())
        .args(args)
        .env("GMPI_SSH", c.ssh_agent())
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gmpirun")
}

/// Waits for `child` (at most [`HANG_LIMIT`]) and collects its output.
fn finish(child: Child, started: Instant) -> Outcome {
    wait_output(child, started, HANG_LIMIT)
}

fn run_on(c: &Cluster, args: &[&str]) -> Outcome {
    let started = Instant::now();
    finish(spawn_on(c, args, Stdio::null()), started)
}

/// Runs a job whose ranks print `RANK HOSTNAME LOCAL/LOCALSIZE NODE`; returns rank →
/// (host, local rank, local size, node id), after checking the job succeeded.
fn placement(c: &Cluster, options: &[&str]) -> BTreeMap<u32, String> {
    let mut args = options.to_vec();
    args.extend([
        "sh",
        "-c",
        "echo $GMPI_RANK $(hostname) $GMPI_LOCAL_RANK/$GMPI_LOCAL_SIZE $GMPI_NODE_ID",
    ]);
    let o = run_on(c, &args);
    assert_eq!(o.code(), 0, "{options:?}: {}", o.stderr);
    let mut map = BTreeMap::new();
    for line in o.stdout.lines() {
        let (rank, rest) = line.split_once(' ').expect("rank and host");
        assert!(
            map.insert(rank.parse().unwrap(), rest.to_owned()).is_none(),
            "rank {rank} twice: {}",
            o.stdout
        );
    }
    map
}

/// The expected placement: `(host index, ranks)` per host in node order.
fn expect(c: &Cluster, hosts: &[(usize, &[u32])]) -> BTreeMap<u32, String> {
    let mut map = BTreeMap::new();
    for (node, (h, ranks)) in hosts.iter().enumerate() {
        for (local, r) in ranks.iter().enumerate() {
            map.insert(*r, format!("{} {local}/{} {node}", c.name(*h), ranks.len()));
        }
    }
    map
}

/// Processes of the job (its marker, or gmpirun's proxy mode) still on any host,
/// waiting up to `patience` for them to go.
fn assert_nothing_left(c: &Cluster, marker: &str, patience: Duration) {
    let until = Instant::now() + patience;
    loop {
        let mut left = c.processes_matching(marker);
        left.extend(c.processes_matching("--internal-proxy"));
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < until,
            "processes of the job left behind: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A rank program: records its job secret in `dir/pids/s.RANK` and its pid in
/// `dir/pids/RANK`, creates a shared-memory file of the job on its host, then sleeps as
/// `MARKER-sleep` (a link to sleep) so it can be found by its command line.
fn sleeper(c: &Cluster, marker: &str) -> (PathBuf, String) {
    let pids = c.dir().join(format!("pids-{marker}"));
    std::fs::create_dir_all(&pids).unwrap();
    let sleep = c.dir().join(format!("{marker}-sleep"));
    let real = ["/usr/bin/sleep", "/bin/sleep"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("sleep");
    std::os::unix::fs::symlink(real, &sleep).unwrap();
    let script = format!(
        "touch /dev/shm/gmpi-$GMPI_JOBID-$GMPI_RANK; echo $GMPI_JOB_SECRET > {p}/s.$GMPI_RANK; \
         echo $$ > {p}/tmp.$GMPI_RANK && mv {p}/tmp.$GMPI_RANK {p}/$GMPI_RANK; exec {s} 60",
        p = pids.display(),
        s = sleep.display()
    );
    (pids, script)
}

/// Waits until `n` ranks have recorded their pids; returns rank → pid.
fn wait_for_ranks(pids: &Path, n: usize, started: Instant) -> BTreeMap<u32, u32> {
    loop {
        let mut map = BTreeMap::new();
        for entry in std::fs::read_dir(pids).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Ok(rank) = name.parse::<u32>() {
                let pid = std::fs::read_to_string(entry.path()).unwrap();
                map.insert(rank, pid.trim().parse().unwrap());
            }
        }
        if map.len() == n {
            return map;
        }
        assert!(started.elapsed() < HANG_LIMIT, "ranks did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_no_shm(c: &Cluster) {
    for i in 0..c.len() {
        let left = c.shm_files(i, "gmpi-");
        assert!(left.is_empty(), "{} kept {left:?}", c.name(i));
    }
}

#[test]
fn two_hosts_host_lists_hostfiles_and_mappings() {
    let Some(c) = Cluster::start(2) else { return };
    let (a, b) = (c.name(0).to_owned(), c.name(1).to_owned());
    // -H, map by slot (the default): each host's slots in turn.
    assert_eq!(
        placement(&c, &["-H", &format!("{a}:2,{b}:2")]),
        expect(&c, &[(0, &[0, 1]), (1, &[2, 3])])
    );
    // --host repeated, map by node; rank 0 on the remote host.
    assert_eq!(
        placement(
            &c,
            &[
                "--host",
                &format!("{b}:2"),
                "--host",
                &a,
                "--host",
                &a,
                "--map-by",
                "node"
            ]
        ),
        expect(&c, &[(1, &[0, 2]), (0, &[1, 3])])
    );
    // -N overrides the slots.
    assert_eq!(
        placement(&c, &["-H", &format!("{a}:4,{b}:4"), "-N", "1"]),
        expect(&c, &[(0, &[0]), (1, &[1])])
    );
    // A hostfile in both forms, with comments, blank and repeated lines; the launch
    // agent given on the command line this time.
    let hostfile = c.dir().join("hostfile2");
    std::fs::write(
        &hostfile,
        format!("# two hosts\n{a} slots=1\n\n{b}:2   # two slots\n{a}\n"),
    )
    .unwrap();
    let hf = hostfile.to_str().unwrap();
    let agent = c.ssh_agent();
    assert_eq!(
        placement(&c, &["--hostfile", hf, "--launch-agent", &agent]),
        expect(&c, &[(0, &[0, 1]), (1, &[2, 3])])
    );
    // More ranks than slots: spread evenly, blocks kept.
    assert_eq!(
        placement(&c, &["--hostfile", hf, "-n", "6"]),
        expect(&c, &[(0, &[0, 1, 2]), (1, &[3, 4, 5])])
    );

    // PMI across the hosts: puts, fences and gets of 10 KB values.
    let p = probe();
    let o = run_on(
        &c,
        &[
            "-H",
            &format!("{a}:2,{b}:2"),
            "--map-by",
            "node",
            p.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(
        o.stdout
            .lines()
            .filter(|l| l.starts_with("OK rank "))
            .count(),
        4,
        "{}",
        o.stdout
    );

    // stdin reaches rank 0 on the remote host; tagged output comes back whole; the
    // job's shared-memory files are gone from both hosts afterwards.
    let started = Instant::now();
    let mut child = spawn_on(
        &c,
        &[
            "--tag-output",
            "-H",
            &format!("{b},{a}"),
            "sh",
            "-c",
            "touch /dev/shm/gmpi-$GMPI_JOBID-$GMPI_RANK; if [ $GMPI_RANK = 0 ]; then cat; \
             else echo err >&2; printf partial; fi",
        ],
        Stdio::piped(),
    );
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\nworld\n").unwrap();
    drop(stdin);
    let o = finish(child, started);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    let mut out: Vec<&str> = o.stdout.lines().collect();
    out.sort_unstable();
    assert_eq!(out, ["[0] hello", "[0] world", "[1] partial"]);
    assert_eq!(o.stderr, "[1] err\n");
    assert_no_shm(&c);
}

#[test]
fn three_hosts_hostfile_mappings_and_pmi() {
    let Some(c) = Cluster::start(3) else { return };
    let n: Vec<String> = (0..3).map(|i| c.name(i).to_owned()).collect();
    let hostfile = c.dir().join("hostfile3");
    std::fs::write(
        &hostfile,
        format!(
            "{} slots=2 max_slots=4\n{}:1\n# {} is down for maintenance\n{} slots=2\n{}\n",
            n[0], n[1], n[2], n[2], n[1]
        ),
    )
    .unwrap();
    let hf = hostfile.to_str().unwrap();
    assert_eq!(
        placement(&c, &["--hostfile", hf]),
        expect(&c, &[(0, &[0, 1]), (1, &[2, 3]), (2, &[4, 5])])
    );
    assert_eq!(
        placement(&c, &["--hostfile", hf, "--map-by", "node", "-n", "5"]),
        expect(&c, &[(0, &[0, 3]), (1, &[1, 4]), (2, &[2])])
    );
    assert_eq!(
        placement(&c, &["--hostfile", hf, "-N", "1", "--map-by", "node"]),
        expect(&c, &[(0, &[0]), (1, &[1]), (2, &[2])])
    );
    // Fewer ranks than hosts: the last host is not used at all.
    assert_eq!(
        placement(
            &c,
            &["-H", &format!("{}:3,{}:3,{}", n[1], n[2], n[0]), "-n", "4"]
        ),
        expect(&c, &[(1, &[0, 1, 2]), (2, &[3])])
    );
    let p = probe();
    let o = run_on(
        &c,
        &["--hostfile", hf, "--map-by", "node", p.to_str().unwrap()],
    );
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(
        o.stdout
            .lines()
            .filter(|l| l.starts_with("OK rank "))
            .count(),
        6,
        "{}",
        o.stdout
    );
    // A PMI abort on a remote host ends the job with its code.
    let o = run_on(&c, &["--hostfile", hf, p.to_str().unwrap(), "abort", "7"]);
    assert_eq!(o.code(), 7, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "gmpirun: rank 1 on host {} called abort with code 7",
            n[0]
        )),
        "{}",
        o.stderr
    );
}

#[test]
fn eight_hosts_through_a_launch_tree() {
    let Some(c) = Cluster::start(8) else { return };
    let hosts: Vec<String> = (0..8).map(|i| format!("{}:2", c.name(i))).collect();
    let hosts = hosts.join(",");
    // Fan-out 2: gmpirun starts two proxies, which start the others (three levels).
    let mut want: Vec<(usize, Vec<u32>)> = Vec::new();
    for h in 0..8u32 {
        want.push((h as usize, vec![2 * h, 2 * h + 1]));
    }
    let want_ref: Vec<(usize, &[u32])> = want.iter().map(|(h, r)| (*h, &r[..])).collect();
    assert_eq!(
        placement(&c, &["-H", &hosts, "--fanout", "2"]),
        expect(&c, &want_ref)
    );
    let p = probe();
    let o = run_on(&c, &["-H", &hosts, "--fanout", "2", p.to_str().unwrap()]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(
        o.stdout
            .lines()
            .filter(|l| l.starts_with("OK rank "))
            .count(),
        16,
        "{}",
        o.stdout
    );
    eprintln!(
        "8 hosts x 2 ranks, fan-out 2: PMI job done in {:?}",
        o.elapsed
    );
    let o = run_on(&c, &["-H", &hosts, p.to_str().unwrap()]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    eprintln!(
        "8 hosts x 2 ranks, fan-out 32: PMI job done in {:?}",
        o.elapsed
    );

    // Who started whom: the ssh clients run on the parent's host. gmpirun (host 0, its
    // own ranks without ssh) starts 1 and 2; 1 starts 3 and 4; 2 starts 5 and 6; 3
    // starts 7.
    let mark = marker();
    let (child, started, _) = sleeping_job(&c, &mark, &["--fanout", "2"]);
    let starts = |i: usize| -> Vec<String> {
        let mut v: Vec<String> = c
            .processes(i)
            .into_iter()
            .filter(|(_, cmd)| cmd.starts_with("ssh ") && cmd.contains("--internal-proxy"))
            .filter_map(|(_, cmd)| {
                (0..8)
                    .map(|h| c.name(h).to_owned())
                    .find(|n| cmd.contains(&format!(" {n} ")))
            })
            .collect();
        v.sort();
        v
    };
    let names =
        |hs: &[usize]| -> Vec<String> { hs.iter().map(|&h| c.name(h).to_owned()).collect() };
    assert_eq!(starts(0), names(&[1, 2]));
    assert_eq!(starts(1), names(&[3, 4]));
    assert_eq!(starts(2), names(&[5, 6]));
    assert_eq!(starts(3), names(&[7]));
    for i in 4..8 {
        assert_eq!(starts(i), names(&[]));
    }
    // Ctrl-C ends the whole tree.
    kill(child.id(), "-INT");
    let o = finish(child, started);
    assert_eq!(o.code(), 130, "{}", o.stderr);
    assert_nothing_left(&c, &mark, Duration::ZERO);
    assert_no_shm(&c);
}

#[test]
fn unreachable_host_is_named() {
    let Some(c) = Cluster::start(2) else { return };
    let ghost = c.unreachable_name().to_owned();
    let mark = marker();
    let (_, script) = sleeper(&c, &mark);
    let o = run_on(
        &c,
        &[
            "-H",
            &format!("{},{},{ghost}", c.name(0), c.name(1)),
            "sh",
            "-c",
            &script,
        ],
    );
    assert_eq!(o.code(), 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "gmpirun: cannot start the proxy on host {ghost}: "
        )),
        "{}",
        o.stderr
    );
    eprintln!(
        "unreachable host reported after {:?}: {}",
        o.elapsed,
        o.stderr.trim()
    );
    assert_nothing_left(&c, &mark, Duration::ZERO);
    assert_no_shm(&c);
    // A name that does not resolve at all fails at once.
    let o = run_on(
        &c,
        &["-H", &format!("{},no-such-host-{mark}", c.name(1)), "true"],
    );
    assert_eq!(o.code(), 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "cannot start the proxy on host no-such-host-{mark}: ssh exited with status 255"
        )),
        "{}",
        o.stderr
    );
}

#[test]
fn program_missing_on_one_host_is_named() {
    let Some(c) = Cluster::start(3) else { return };
    // The same path on every host, but each host has its own copy (or none).
    let prog = c.local_dir().join("prog");
    for i in 0..2 {
        let p = c.host_dir(i).join("prog");
        std::fs::write(&p, "#!/bin/sh\necho ok $(hostname)\n").unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let hosts = format!("{},{},{}", c.name(0), c.name(1), c.name(2));
    let o = run_on(&c, &["-H", &hosts, prog.to_str().unwrap()]);
    assert_eq!(o.code(), 127, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "gmpirun: cannot start {} on host {}: No such file or directory",
            prog.display(),
            c.name(2)
        )),
        "{}",
        o.stderr
    );
    // Present but not executable on one host.
    let p = c.host_dir(2).join("prog");
    std::fs::write(&p, "#!/bin/sh\necho ok\n").unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let o = run_on(&c, &["-H", &hosts, prog.to_str().unwrap()]);
    assert_eq!(o.code(), 127, "{}", o.stderr);
    assert!(
        o.stderr
            .contains(&format!("on host {}: Permission denied", c.name(2))),
        "{}",
        o.stderr
    );
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = run_on(&c, &["-H", &hosts, prog.to_str().unwrap()]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(o.stdout.lines().count(), 3, "{}", o.stdout);
    assert_nothing_left(&c, "--internal-proxy", Duration::ZERO);
}

/// Starts 2 ranks on each host running [`sleeper`], with more gmpirun `options`;
/// returns gmpirun, its start time and rank → pid once every rank runs.
fn sleeping_job(c: &Cluster, mark: &str, options: &[&str]) -> (Child, Instant, BTreeMap<u32, u32>) {
    let (pids, script) = sleeper(c, mark);
    let hosts: Vec<String> = (0..c.len()).map(|i| format!("{}:2", c.name(i))).collect();
    let hosts = hosts.join(",");
    let mut args = vec!["-H", &hosts];
    args.extend_from_slice(options);
    args.extend(["sh", "-c", &script]);
    let started = Instant::now();
    let child = spawn_on(c, &args, Stdio::null());
    let ranks = wait_for_ranks(&pids, 2 * c.len(), started);
    (child, started, ranks)
}

/// The job secret every rank of a [`sleeping_job`] got (the same for all).
fn job_secret(c: &Cluster, mark: &str) -> String {
    let pids = c.dir().join(format!("pids-{mark}"));
    let secrets: Vec<String> = (0..6)
        .map(|r| {
            std::fs::read_to_string(pids.join(format!("s.{r}")))
                .unwrap()
                .trim()
                .to_owned()
        })
        .collect();
    assert!(secrets.iter().all(|s| *s == secrets[0]), "{secrets:?}");
    assert_eq!(secrets[0].len(), 64, "{}", secrets[0]);
    secrets[0].clone()
}

fn kill(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[test]
fn killed_remote_rank_ends_the_job_everywhere() {
    let Some(c) = Cluster::start(3) else { return };
    let mark = marker();
    let (child, started, ranks) = sleeping_job(&c, &mark, &[]);
    let killed_at = Instant::now();
    kill(ranks[&3], "-KILL");
    let o = finish(child, started);
    assert_eq!(o.code(), 137, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "gmpirun: rank 3 (pid {} on host {}) was killed by signal 9 (SIGKILL); ending the job",
            ranks[&3],
            c.name(1)
        )),
        "{}",
        o.stderr
    );
    eprintln!(
        "killed rank: job ended {:?} after the kill",
        killed_at.elapsed()
    );
    assert_nothing_left(&c, &mark, Duration::ZERO);
    assert_no_shm(&c);
}

#[test]
fn killed_proxy_ends_the_job_everywhere() {
    let Some(c) = Cluster::start(3) else { return };
    let mark = marker();
    let (child, started, _) = sleeping_job(&c, &mark, &[]);
    let proxy: Vec<(u32, String)> = c
        .processes(2)
        .into_iter()
        .filter(|(_, cmd)| cmd.contains("--internal-proxy") && !cmd.contains("ssh"))
        .collect();
    assert_eq!(proxy.len(), 1, "{proxy:?}");
    let killed_at = Instant::now();
    kill(proxy[0].0, "-KILL");
    let o = finish(child, started);
    assert_eq!(o.code(), 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "gmpirun: lost the proxy on host {} (ranks 4,5): ",
            c.name(2)
        )),
        "{}",
        o.stderr
    );
    eprintln!(
        "killed proxy: job ended {:?} after the kill",
        killed_at.elapsed()
    );
    assert_nothing_left(&c, &mark, Duration::ZERO);
}

#[test]
fn dropped_link_ends_the_job_everywhere() {
    let Some(c) = Cluster::start(3) else { return };
    let mark = marker();
    let (child, started, _) = sleeping_job(&c, &mark, &[]);
    let cut_at = Instant::now();
    c.set_link(1, false);
    let o = finish(child, started);
    assert_eq!(o.code(), 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "gmpirun: lost the proxy on host {} (ranks 2,3): nothing heard for",
            c.name(1)
        )),
        "{}",
        o.stderr
    );
    eprintln!(
        "dropped link: job ended {:?} after the cut",
        cut_at.elapsed()
    );
    // The cut-off host ends its own ranks when it stops hearing from gmpirun.
    assert_nothing_left(&c, &mark, ORPHAN_LIMIT);
    eprintln!(
        "dropped link: cut-off host clean {:?} after the cut",
        cut_at.elapsed()
    );
    assert_no_shm(&c);
}

#[test]
fn ctrl_c_on_gmpirun_cleans_every_host() {
    let Some(c) = Cluster::start(3) else { return };
    let mark = marker();
    let (child, started, _) = sleeping_job(&c, &mark, &[]);
    // The secret reached every rank, and no command line on any host shows it.
    let secret = job_secret(&c, &mark);
    let everywhere: Vec<(u32, String)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, netns::cmdline(pid)?)))
        .collect();
    assert!(
        everywhere
            .iter()
            .any(|(_, c)| c.contains("--internal-proxy")),
        "no proxy found: the scan sees nothing"
    );
    let shown: Vec<_> = everywhere
        .iter()
        .filter(|(_, c)| c.contains(&secret))
        .collect();
    assert!(
        shown.is_empty(),
        "the job secret is on a command line: {shown:?}"
    );
    kill(child.id(), "-INT");
    let o = finish(child, started);
    assert_eq!(o.code(), 130, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("gmpirun: received SIGINT; ending the job"),
        "{}",
        o.stderr
    );
    assert_nothing_left(&c, &mark, Duration::ZERO);
    assert_no_shm(&c);
}

#[test]
fn sigkill_of_gmpirun_leaves_nothing_on_any_host() {
    let Some(c) = Cluster::start(3) else { return };
    let mark = marker();
    let (mut child, _, _) = sleeping_job(&c, &mark, &[]);
    // No chance to clean up: the local proxy and the ssh clients die with gmpirun
    // (parent-death signal), the remote proxies see their stdin and connection close.
    kill(child.id(), "-KILL");
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    assert_nothing_left(&c, &mark, ORPHAN_LIMIT);
    // Each host's proxy removed the job's shared-memory files on its way out, except
    // on gmpirun's own host, whose proxy was killed with it.
    for i in 1..c.len() {
        let left = c.shm_files(i, "gmpi-");
        assert!(left.is_empty(), "{} kept {left:?}", c.name(i));
    }
}
