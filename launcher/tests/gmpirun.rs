//! Whole-program tests of `gmpirun`: real jobs of real processes on this machine.
//!
//! `cargo test -p gmpi-launcher` builds the crate's examples too, so the PMI probe is
//! found next to the gmpirun binary, in `examples/pmi_probe`.

mod common;

use common::{gmpirun_path, probe, wait_output, Outcome};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest any single job in these tests may take before the test fails.
const HANG_LIMIT: Duration = Duration::from_secs(20);

fn spawn(args: &[&str], stdin: Stdio) -> Child {
    Command::new(gmpirun_path())
        .args(args)
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

fn run(args: &[&str]) -> Outcome {
    let started = Instant::now();
    finish(spawn(args, Stdio::null()), started)
}

fn sorted_lines(s: &str) -> Vec<&str> {
    let mut v: Vec<&str> = s.lines().collect();
    v.sort_unstable();
    v
}

/// A fresh empty directory under the system temp dir.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gmpirun-test-{name}-{}-{:?}",
        std::process::id(),
        Instant::now()
    ));
    let dir = PathBuf::from(dir.to_string_lossy().replace(
        |c: char| !c.is_ascii_alphanumeric() && c != '/' && c != '-',
        "_",
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn process_alive(pid: u32) -> bool {
    // A zombie would still show; gmpirun reaps its children, so none should.
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn every_rank_gets_its_environment() {
    let o = run(&["-np", "3", "sh", "-c", "echo $GMPI_RANK"]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(sorted_lines(&o.stdout), ["0", "1", "2"]);

    let o = run(&[
        "-n",
        "2",
        "sh",
        "-c",
        "echo $PMI_RANK/$PMI_SIZE $OMPI_COMM_WORLD_RANK/$OMPI_COMM_WORLD_SIZE \
         $MV2_COMM_WORLD_LOCAL_RANK $LOCAL_RANK/$LOCAL_SIZE $MPI_LOCALRANKID/$MPI_LOCALNRANKS \
         $GMPI_LOCAL_RANK/$GMPI_LOCAL_SIZE $GMPI_NODE_ID ${#GMPI_JOBID} ${PMI_FD:+fd}",
    ]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(
        sorted_lines(&o.stdout),
        [
            "0/2 0/2 0 0/2 0/2 0/2 0 16 fd",
            "1/2 1/2 1 1/2 1/2 1/2 0 16 fd"
        ]
    );
}

#[test]
fn tag_output_prefixes_lines_on_the_right_stream() {
    let o = run(&[
        "--tag-output",
        "-n",
        "2",
        "sh",
        "-c",
        "echo out; echo err >&2; printf tail",
    ]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(
        sorted_lines(&o.stdout),
        ["[0] out", "[0] tail", "[1] out", "[1] tail"]
    );
    assert_eq!(sorted_lines(&o.stderr), ["[0] err", "[1] err"]);
}

#[test]
fn lines_of_different_ranks_are_never_mixed() {
    let o = run(&[
        "-n",
        "4",
        "sh",
        "-c",
        "i=0; while [ $i -lt 300 ]; do \
         echo rank$GMPI_RANK-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-end; \
         i=$((i+1)); done",
    ]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 1200);
    for line in lines {
        assert!(
            (0..4).any(|r| line == format!("rank{r}-{}-end", "a".repeat(68))),
            "mixed line: {line:?}"
        );
    }
}

#[test]
fn partial_last_line_is_flushed() {
    let o = run(&["-n", "1", "printf", "no newline"]);
    assert_eq!(o.code(), 0);
    assert_eq!(o.stdout, "no newline");
}

#[test]
fn exported_variables_reach_the_ranks() {
    let started = Instant::now();
    let child = Command::new(gmpirun_path())
        .env("GMPIRUN_TEST_INHERITED", "inherited")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .args([
            "-x",
            "FOO=bar",
            "-x",
            "GMPIRUN_TEST_INHERITED",
            "-x",
            "EQ=a=b",
            "-n",
            "2",
            "sh",
            "-c",
            "echo $FOO $GMPIRUN_TEST_INHERITED $EQ",
        ])
        .spawn()
        .unwrap();
    let o = finish(child, started);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(
        sorted_lines(&o.stdout),
        ["bar inherited a=b", "bar inherited a=b"]
    );
}

#[test]
fn trailing_arguments_pass_through_verbatim() {
    let o = run(&[
        "-np",
        "2",
        "sh",
        "-c",
        "printf '%s\\n' \"$*\"",
        "sh",
        "-n",
        "5",
        "--foo",
        "-np",
        "3",
    ]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(
        sorted_lines(&o.stdout),
        ["-n 5 --foo -np 3", "-n 5 --foo -np 3"]
    );
}

#[test]
fn failing_rank_ends_the_job_quickly_and_leaves_nothing() {
    let dir = temp_dir("fail");
    let script = format!(
        "echo $$ > {d}/tmp.$GMPI_RANK && mv {d}/tmp.$GMPI_RANK {d}/pid.$GMPI_RANK; \
         if [ $GMPI_RANK = 1 ]; then \
           while [ $(ls {d} | grep -c pid) -lt 4 ]; do sleep 0.05; done; exit 3; \
         fi; exec sleep 30",
        d = dir.display()
    );
    let o = run(&["-n", "4", "sh", "-c", &script]);
    assert_eq!(o.code(), 3, "{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(5), "took {:?}", o.elapsed);
    assert!(
        o.stderr.contains("gmpirun: rank 1 (pid ")
            && o.stderr.contains(") exited with status 3; ending the job"),
        "{}",
        o.stderr
    );
    assert_eq!(o.stderr.matches("gmpirun:").count(), 1, "{}", o.stderr);
    for r in 0..4 {
        let pid: u32 = std::fs::read_to_string(dir.join(format!("pid.{r}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(!process_alive(pid), "rank {r} (pid {pid}) survived");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn background_children_of_ranks_are_ended() {
    let dir = temp_dir("bg");
    let script = format!(
        "sleep 30 & echo $! > {d}/bg.$GMPI_RANK; exit 0",
        d = dir.display()
    );
    let o = run(&["-n", "2", "sh", "-c", &script]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(5), "took {:?}", o.elapsed);
    for r in 0..2 {
        let pid: u32 = std::fs::read_to_string(dir.join(format!("bg.{r}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(!process_alive(pid), "background sleep of rank {r} survived");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn rank_killed_by_a_signal_fails_the_job() {
    let o = run(&["-n", "2", "sh", "-c", "kill -9 $$"]);
    assert_eq!(o.code(), 128 + 9, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("was killed by signal 9 (SIGKILL); ending the job"),
        "{}",
        o.stderr
    );
}

#[test]
fn timeout_ends_a_hung_job() {
    let o = run(&["--timeout", "1", "-n", "3", "sleep", "30"]);
    assert_eq!(o.code(), 124, "{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(5), "took {:?}", o.elapsed);
    assert!(
        o.stderr
            .contains("gmpirun: job timed out after 1 s; ranks still running: 0,1,2"),
        "{}",
        o.stderr
    );
}

#[test]
fn sigterm_to_gmpirun_ends_the_job() {
    let dir = temp_dir("sigterm");
    let script = format!("echo $$ > {}/pid.$GMPI_RANK; exec sleep 30", dir.display());
    let started = Instant::now();
    let child = spawn(&["-n", "2", "sh", "-c", &script], Stdio::null());
    while std::fs::read_dir(&dir).unwrap().count() < 2 {
        assert!(started.elapsed() < HANG_LIMIT, "ranks did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let o = finish(child, started);
    assert_eq!(o.code(), 143, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("gmpirun: received SIGTERM; ending the job"),
        "{}",
        o.stderr
    );
    assert!(o.elapsed < Duration::from_secs(5), "took {:?}", o.elapsed);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let pid: u32 = std::fs::read_to_string(entry.unwrap().path())
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(!process_alive(pid), "pid {pid} survived");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn missing_program_exits_127() {
    let o = run(&["-n", "2", "gmpi-no-such-program"]);
    assert_eq!(o.code(), 127);
    assert!(
        o.stderr
            .starts_with("gmpirun: cannot start gmpi-no-such-program: "),
        "{}",
        o.stderr
    );
    let o = run(&["-n", "2", "/etc/passwd"]);
    assert_eq!(o.code(), 127, "{}", o.stderr);
}

#[test]
fn bad_command_lines_are_usage_errors() {
    assert_eq!(run(&["-n", "0", "true"]).code(), 2);
    assert_eq!(run(&["true"]).code(), 2);
    assert_eq!(run(&["--no-such-option", "-n", "1", "true"]).code(), 2);
    let o = run(&["--version"]);
    assert_eq!(o.code(), 0);
    assert!(o.stdout.starts_with("gmpirun "), "{}", o.stdout);
    let o = run(&["--help"]);
    assert_eq!(o.code(), 0);
    assert!(o.stdout.contains("--tag-output") && o.stdout.contains("-np"));
    for option in [
        "--host",
        "--hostfile",
        "--map-by",
        "--npernode",
        "--launch-agent",
        "--fanout",
        "--bind-to",
        "--report-bindings",
    ] {
        assert!(o.stdout.contains(option), "--help lacks {option}");
    }
    assert!(!o.stdout.contains("--internal-proxy"));
    assert_eq!(run(&["--oversubscribe", "-n", "3", "true"]).code(), 0);
}

/// The CPUs this process may run on (`Cpus_allowed_list`).
fn allowed_cpus(status: &str) -> Vec<String> {
    status
        .lines()
        .filter_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|l| l.trim().to_owned())
        .collect()
}

#[test]
fn bind_to_sets_each_ranks_cpus_and_reports_them() {
    let ours = std::fs::read_to_string("/proc/self/status").unwrap();
    let ours = allowed_cpus(&ours).pop().unwrap();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let show = ["sh", "-c", "grep Cpus_allowed_list /proc/self/status"];
    let job = |extra: &[&str], np: &str| {
        let mut a: Vec<&str> = extra.to_vec();
        a.extend(["--tag-output", "-n", np]);
        a.extend(show);
        let o = run(&a);
        assert_eq!(o.code(), 0, "{}", o.stderr);
        o
    };
    // Unbound: every rank has gmpirun's CPUs; the report says so.
    let o = job(&["--bind-to", "none", "--report-bindings"], "2");
    assert_eq!(
        allowed_cpus(&o.stdout.replace("[0] ", "").replace("[1] ", "")),
        [ours.clone(), ours.clone()]
    );
    assert_eq!(
        o.stderr.matches(": not bound (cpus ").count(),
        2,
        "{}",
        o.stderr
    );
    // Larger objects than a core: every rank gets a whole domain (one here).
    let o = job(&["--bind-to", "numa", "--report-bindings"], "2");
    assert_eq!(
        o.stderr.matches(": bound to numa ").count(),
        2,
        "{}",
        o.stderr
    );
    if cpus < 2 {
        eprintln!("skipping the per-core part: {cpus} CPU");
        return;
    }
    // One core each, in order, the default included; what the report says is what
    // the rank has.
    for extra in [
        &["--bind-to", "core", "--report-bindings"][..],
        &["--report-bindings"],
    ] {
        let o = job(extra, "2");
        let mut seen = Vec::new();
        for r in 0..2 {
            let line = o
                .stdout
                .lines()
                .find(|l| l.starts_with(&format!("[{r}] ")))
                .unwrap_or_else(|| panic!("no line of rank {r}: {}", o.stdout));
            let got = allowed_cpus(line.split_once("] ").unwrap().1)
                .pop()
                .unwrap();
            let report = o
                .stderr
                .lines()
                .find(|l| l.starts_with(&format!("gmpirun: rank {r} on ")))
                .unwrap_or_else(|| panic!("no report for rank {r}: {}", o.stderr));
            assert!(
                report.contains(&format!("bound to core {r} (cpus {got})")),
                "{report}"
            );
            seen.push(got);
        }
        assert_ne!(seen[0], seen[1], "two ranks on one core: {seen:?}");
    }
    // More ranks than cores: unbound by default, shared cores (with a warning) on
    // request.
    let many = (cpus + 1).to_string();
    let o = job(&["--report-bindings"], &many);
    assert_eq!(
        o.stderr.matches(": not bound (cpus ").count(),
        cpus + 1,
        "{}",
        o.stderr
    );
    let o = job(&["--bind-to", "core"], &many);
    assert!(o.stderr.contains("ranks share cores"), "{}", o.stderr);
    // A bad policy is a usage error, from the flag or the variable.
    assert_eq!(run(&["--bind-to", "socket", "-n", "1", "true"]).code(), 2);
    let o = Command::new(gmpirun_path())
        .args(["-n", "1", "true"])
        .env("GMPI_BIND_TO", "sockets")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("GMPI_BIND_TO=sockets"));
}

#[test]
fn stdin_reaches_rank_0_only() {
    let started = Instant::now();
    let mut child = spawn(&["--tag-output", "-n", "3", "cat"], Stdio::piped());
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\nworld\n").unwrap();
    drop(stdin);
    let o = finish(child, started);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(o.stdout, "[0] hello\n[0] world\n");
}

#[test]
fn shm_files_of_the_job_are_removed() {
    if !Path::new("/dev/shm").is_dir() {
        eprintln!("SKIPPED: no /dev/shm on this machine");
        return;
    }
    let o = run(&[
        "-n",
        "2",
        "sh",
        "-c",
        "touch /dev/shm/gmpi-$GMPI_JOBID-x$GMPI_RANK && echo $GMPI_JOBID",
    ]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    let job_id = o.stdout.lines().next().unwrap();
    assert_eq!(job_id.len(), 16);
    for r in 0..2 {
        let p = format!("/dev/shm/gmpi-{job_id}-x{r}");
        assert!(!Path::new(&p).exists(), "{p} left behind");
    }
    // Also after a failure.
    let o = run(&[
        "-n",
        "2",
        "sh",
        "-c",
        "touch /dev/shm/gmpi-$GMPI_JOBID-y; echo $GMPI_JOBID; exit 4",
    ]);
    assert_eq!(o.code(), 4, "{}", o.stderr);
    let job_id = o.stdout.lines().next().unwrap();
    assert!(!Path::new(&format!("/dev/shm/gmpi-{job_id}-y")).exists());
}

#[test]
fn pmi_probe_exchanges_keys() {
    let probe = probe();
    let o = run(&["-np", "4", probe.to_str().unwrap()]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(
        sorted_lines(&o.stdout),
        [
            "OK rank 0 of 4",
            "OK rank 1 of 4",
            "OK rank 2 of 4",
            "OK rank 3 of 4"
        ]
    );
}

#[test]
fn pmi_abort_ends_the_job_with_its_code() {
    let probe = probe();
    let o = run(&["-np", "4", probe.to_str().unwrap(), "abort", "7"]);
    assert_eq!(o.code(), 7, "{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(5), "took {:?}", o.elapsed);
    assert!(
        o.stderr
            .contains("gmpirun: rank 1 called abort with code 7: "),
        "{}",
        o.stderr
    );
}

#[test]
fn exit_without_finalize_fails_the_job() {
    let probe = probe();
    let o = run(&["-np", "3", probe.to_str().unwrap(), "nofinalize"]);
    assert_ne!(o.code(), 0, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("gmpirun: rank 1 exited without calling finalize; ending the job"),
        "{}",
        o.stderr
    );
}

#[test]
fn probe_runs_as_a_singleton_without_launcher() {
    let o = Command::new(probe())
        .arg("singleton")
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout), "OK singleton\n");
}

#[test]
fn malformed_pmi_line_fails_the_job() {
    let o = run(&[
        "-n",
        "2",
        "sh",
        "-c",
        "if [ $GMPI_RANK = 1 ]; then echo 'not pmi' >&$PMI_FD; fi; exec sleep 30",
    ]);
    assert_eq!(o.code(), 1, "{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(5), "took {:?}", o.elapsed);
    assert!(
        o.stderr
            .contains("gmpirun: rank 1 sent a malformed PMI message: "),
        "{}",
        o.stderr
    );
}

#[test]
fn every_rank_of_a_job_gets_the_same_fresh_secret() {
    let secrets = || {
        let o = run(&["-n", "3", "sh", "-c", "echo $GMPI_JOB_SECRET"]);
        assert_eq!(o.code(), 0, "{}", o.stderr);
        let lines: Vec<String> = o.stdout.lines().map(str::to_owned).collect();
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| *l == lines[0]), "{lines:?}");
        assert_eq!(lines[0].len(), 64, "{}", lines[0]);
        assert!(lines[0].bytes().all(|b| b.is_ascii_hexdigit()));
        lines[0].clone()
    };
    assert_ne!(secrets(), secrets());
}

// ---- host options with this node as the hosts: the proxy path without ssh ----------

#[test]
fn hosts_on_this_node_run_through_proxies() {
    // Two names for this node: two hosts, each with its own (local) proxy.
    let o = run(&[
        "-H",
        "localhost:2,127.0.0.1",
        "sh",
        "-c",
        "echo $GMPI_RANK/$GMPI_SIZE $GMPI_LOCAL_RANK/$GMPI_LOCAL_SIZE $GMPI_NODE_ID \
         ${#GMPI_JOB_SECRET} $OMPI_COMM_WORLD_LOCAL_RANK ${PMI_FD:+fd}",
    ]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(
        sorted_lines(&o.stdout),
        [
            "0/3 0/2 0 64 0 fd",
            "1/3 1/2 0 64 1 fd",
            "2/3 0/1 1 64 0 fd"
        ]
    );
    let o = run(&[
        "-H",
        "localhost:2,127.0.0.1:2",
        "--map-by",
        "node",
        probe().to_str().unwrap(),
    ]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(
        sorted_lines(&o.stdout),
        [
            "OK rank 0 of 4",
            "OK rank 1 of 4",
            "OK rank 2 of 4",
            "OK rank 3 of 4"
        ]
    );
    // -N without hosts: that many ranks here, through the local job.
    let o = run(&["-N", "2", "sh", "-c", "echo $GMPI_RANK"]);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(sorted_lines(&o.stdout), ["0", "1"]);
    assert_eq!(run(&["-N", "2", "-n", "3", "true"]).code(), 2);
}

#[test]
fn failures_under_proxies_are_judged_as_locally() {
    let probe = probe();
    let probe = probe.to_str().unwrap();
    let o = run(&["-H", "localhost:2,127.0.0.1:2", probe, "abort", "7"]);
    assert_eq!(o.code(), 7, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("gmpirun: rank 1 on host localhost called abort with code 7: "),
        "{}",
        o.stderr
    );
    let o = run(&["-H", "localhost:3", probe, "nofinalize"]);
    assert_eq!(o.code(), 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(
            "gmpirun: rank 1 on host localhost exited without calling finalize; ending the job"
        ),
        "{}",
        o.stderr
    );
    let o = run(&[
        "-H",
        "localhost,127.0.0.1",
        "sh",
        "-c",
        "exit $((GMPI_RANK + 3))",
    ]);
    assert!([3, 4].contains(&o.code()), "{}", o.stderr);
    assert!(o.stderr.contains(") exited with status "), "{}", o.stderr);
    assert_eq!(o.stderr.matches("gmpirun:").count(), 1, "{}", o.stderr);
    let o = run(&["-H", "localhost", "-n", "2", "gmpi-no-such-program"]);
    assert_eq!(o.code(), 127, "{}", o.stderr);
    assert!(
        o.stderr
            .starts_with("gmpirun: cannot start gmpi-no-such-program on host localhost: "),
        "{}",
        o.stderr
    );
    let o = run(&["--timeout", "1", "-H", "localhost:2", "sleep", "30"]);
    assert_eq!(o.code(), 124, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("gmpirun: job timed out after 1 s; ranks still running: 0,1"),
        "{}",
        o.stderr
    );
    // Bad host options are usage errors.
    assert_eq!(run(&["-H", "a:0", "true"]).code(), 2);
    assert_eq!(
        run(&["--hostfile", "/nonexistent/gmpi-hostfile", "true"]).code(),
        2
    );
    assert_eq!(
        run(&["-H", "localhost", "-N", "1", "-n", "2", "true"]).code(),
        2
    );
}

#[test]
fn stdin_and_tagged_output_pass_through_proxies() {
    let started = Instant::now();
    let mut child = spawn(
        &[
            "--tag-output",
            "-H",
            "localhost,127.0.0.1",
            "sh",
            "-c",
            "cat; echo err >&2",
        ],
        Stdio::piped(),
    );
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\nworld\n").unwrap();
    drop(stdin);
    let o = finish(child, started);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(o.stdout, "[0] hello\n[0] world\n");
    assert_eq!(sorted_lines(&o.stderr), ["[0] err", "[1] err"]);
}

/// Sends one control frame (kind byte and payload) by hand.
fn send_frame(s: &mut std::net::TcpStream, kind: u8, payload: &[u8]) {
    let mut frame = ((payload.len() + 1) as u32).to_be_bytes().to_vec();
    frame.push(kind);
    frame.extend_from_slice(payload);
    s.write_all(&frame).unwrap();
}

/// Reads until the other side closes; `true` if it did within 10 s.
fn closed_by_peer(s: &mut std::net::TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn control_port_refuses_connections_without_the_secret() {
    // The rank records its proxy's pid; the proxy's command line has gmpirun's port.
    let dir = temp_dir("refuse");
    let script = format!(
        "echo $PPID > {d}/tmp && mv {d}/tmp {d}/ppid; sleep 3",
        d = dir.display()
    );
    let started = Instant::now();
    let child = spawn(
        &["-H", "localhost", "-n", "1", "sh", "-c", &script],
        Stdio::null(),
    );
    let ppid_file = dir.join("ppid");
    while !ppid_file.exists() {
        assert!(started.elapsed() < HANG_LIMIT, "the rank did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ppid = std::fs::read_to_string(&ppid_file).unwrap();
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", ppid.trim())).unwrap();
    let words: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    assert_eq!(words[1], "--internal-proxy", "{words:?}");
    let port: u16 = words[3].parse().unwrap();
    // A well-formed handshake with a proof made without the secret.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut hello = 1u32.to_be_bytes().to_vec();
    hello.extend_from_slice(&0u32.to_be_bytes());
    hello.extend_from_slice(&[7u8; 32]);
    send_frame(&mut s, 1, &hello);
    send_frame(&mut s, 2, &[0u8; 32]);
    assert!(closed_by_peer(&mut s), "a wrong proof was not refused");
    // Garbage.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    assert!(closed_by_peer(&mut s), "garbage was not refused");
    // The job itself goes on undisturbed.
    let o = finish(child, started);
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("gmpirun: warning: refused a control connection from 127.0.0.1:")
            && o.stderr.contains("it does not hold the job secret")
            && o.stderr.contains("malformed message"),
        "{}",
        o.stderr
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn stalled_stdout_reader_does_not_end_a_job_across_hosts() {
    // 24 MB of output into a pipe nobody reads for longer than the heartbeat timeout:
    // gmpirun must keep its proxies alive meanwhile, and lose nothing.
    let child = spawn(
        &[
            "-H",
            "localhost,127.0.0.1",
            "sh",
            "-c",
            "if [ $GMPI_RANK = 0 ]; then yes 0123456789abcdefghijklmnopqrstuvwxyz012345678 \
             | head -c 24000000; fi",
        ],
        Stdio::null(),
    );
    std::thread::sleep(Duration::from_secs(7));
    let o = finish(child, Instant::now());
    assert_eq!(o.code(), 0, "{}", o.stderr);
    assert_eq!(o.stdout.len(), 24_000_000, "{}", o.stderr);
    assert!(o
        .stdout
        .starts_with("0123456789abcdefghijklmnopqrstuvwxyz012345678\n"));
}
