//! Real jobs through gmpirun: every scenario of `gmpi-check` at several rank
//! counts, thresholds moved by configuration, crash handling, clean-up.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use gmpi_tests::{run, run_scenario};

const CHECK: &str = env!("CARGO_BIN_EXE_gmpi-check");

/// Run a scenario at `np` ranks with a hang guard; assert every rank passed.
fn scenario(np: usize, args: &[&str], envs: &[(&str, &str)]) {
    run_scenario(CHECK, 120, np, args, envs);
}

#[test]
fn size_sweep_np2_crosses_every_threshold_to_64mib() {
    scenario(2, &["sweep"], &[]);
}

#[test]
fn size_sweep_without_cma_uses_the_pipelined_fallback() {
    scenario(2, &["sweep", "5000000"], &[("GMPI_CMA", "0")]);
}

#[test]
fn size_sweep_with_moved_thresholds() {
    scenario(
        3,
        &["sweep", "300000"],
        &[
            ("GMPI_EAGER_LIMIT", "64"),
            ("GMPI_GET_THRESHOLD", "100000"),
            ("GMPI_PIPELINE_CHUNK", "1000"),
        ],
    );
    // A fragment far below the default eager limit lowers the eager limit
    // with it (it used to fail init), and the smallest legal fragment works.
    scenario(
        2,
        &["sweep", "300000"],
        &[("GMPI_SHM_MAX_FRAG", "100"), ("GMPI_EAGER_LIMIT", "50")],
    );
    scenario(2, &["sweep", "70000"], &[("GMPI_SHM_MAX_FRAG", "64")]);
}

/// Buffers unmapped, emptied or moved between rendezvous messages, over
/// shared memory (single copy) and tcp: no transport may keep a view of
/// the old pages (btl-ib's registration cache runs this in the Soft-RoCE
/// guest).
#[test]
fn rendezvous_from_and_into_remapped_buffers() {
    scenario(2, &["remap"], &[]);
    scenario(3, &["remap"], &[("GMPI_BTL", "self,tcp")]);
}

#[test]
fn size_sweep_np1_to_np8() {
    for np in [1, 3, 4, 5, 6, 7, 8] {
        scenario(np, &["sweep", "1100000"], &[]);
    }
}

#[test]
fn one_sided_typed_api_np1_to_np4() {
    for np in [1, 2, 3, 4] {
        scenario(np, &["rma"], &[]);
    }
}

#[test]
fn threads_of_every_rank_call_at_once_np1_to_np4() {
    for np in [1, 2, 3, 4] {
        scenario(np, &["threads"], &[]);
    }
    scenario(3, &["threads"], &[("GMPI_BTL", "self,tcp")]);
}

#[test]
fn ten_thousand_outstanding_messages() {
    scenario(2, &["many", "10000"], &[]);
    scenario(4, &["many", "10000"], &[]);
}

#[test]
fn small_rings_apply_back_pressure() {
    scenario(4, &["many", "3000"], &[("GMPI_SHM_RING_BYTES", "65536")]);
    scenario(4, &["order"], &[("GMPI_SHM_RING_BYTES", "65536")]);
}

#[test]
fn self_sends() {
    scenario(1, &["self"], &[]);
    scenario(3, &["self"], &[]);
}

#[test]
fn non_overtaking_across_protocols() {
    scenario(3, &["order"], &[]);
    scenario(2, &["order"], &[("GMPI_CMA", "0")]);
}

#[test]
fn wildcards_probe_and_iprobe() {
    scenario(5, &["wild"], &[]);
}

#[test]
fn synchronous_send() {
    scenario(2, &["ssend"], &[]);
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    scenario(1, &["errors"], &[]);
    scenario(3, &["errors"], &[]);
}

#[test]
fn stdin_goes_to_rank_zero() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut c = Command::new(gmpi_tests::gmpirun())
        .args(["-np", "3", CHECK, "stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(b"one two three four\n")
        .unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("rank 0 read 4 words"));
}

#[test]
fn singleton_without_gmpirun() {
    let out = std::process::Command::new(CHECK)
        .args(["sweep", "100000"])
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("OK on rank 0 of 1"));
}

/// The shm files of one job, by job id.
fn shm_files(jobid: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !jobid.is_empty() && n.starts_with(&format!("gmpi-{jobid}")))
                .collect()
        })
        .unwrap_or_default()
}

fn crash_case(mode: &str, want: Option<i32>, msg: &str) {
    let np = 4;
    let t = Instant::now();
    let out = run(
        &[
            "--timeout",
            "60",
            "-np",
            &np.to_string(),
            CHECK,
            "crash",
            mode,
        ],
        &[],
    );
    let took = t.elapsed();
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{mode}: job succeeded");
    if let Some(code) = want {
        assert_eq!(out.status.code(), Some(code), "{mode}: {se}");
    }
    assert!(
        took < Duration::from_secs(5),
        "{mode}: took {took:?} to end the job"
    );
    assert!(
        se.contains("gmpirun: rank 3") && se.contains(msg),
        "{mode}: message missing:\n{se}"
    );
}

#[test]
fn a_crashing_rank_ends_the_job_quickly() {
    crash_case("exit3", Some(3), "status 3");
    crash_case("panic", Some(101), "status 101");
    crash_case("kill", Some(137), "SIGKILL");
    crash_case("abort", Some(6), "abort");
}

#[test]
fn no_process_or_shm_file_is_left_behind() {
    let dir = std::env::temp_dir().join(format!("gmpi-pids-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let out = run(&["--timeout", "60", "-np", "4", CHECK, "pids", d], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut jobid = String::new();
    for r in 0..4 {
        let s = std::fs::read_to_string(dir.join(r.to_string())).unwrap();
        let mut it = s.split_whitespace();
        let pid = it.next().unwrap();
        jobid = it.next().unwrap_or_default().to_string();
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "rank {r} (pid {pid}) survived"
        );
    }
    assert!(!jobid.is_empty());
    assert!(
        shm_files(&jobid).is_empty(),
        "leftover shm: {:?}",
        shm_files(&jobid)
    );

    // And after a crash: the survivors are killed, the segment is gone.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!("{CHECK} pids {d} && {CHECK} crash kill");
    let out = run(&["--timeout", "60", "-np", "4", "sh", "-c", &script], &[]);
    assert!(!out.status.success());
    for r in 0..4 {
        let s = std::fs::read_to_string(dir.join(r.to_string())).unwrap();
        let mut it = s.split_whitespace();
        let pid = it.next().unwrap();
        jobid = it.next().unwrap_or_default().to_string();
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "rank {r} (pid {pid}) survived the crash"
        );
    }
    assert!(
        shm_files(&jobid).is_empty(),
        "leftover shm after a crash: {:?}",
        shm_files(&jobid)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn eight_ranks_on_two_cores_finish() {
    // Oversubscribed: the wait loop must yield and block, not spin.
    let t = Instant::now();
    scenario(8, &["order"], &[]);
    scenario(8, &["wild"], &[]);
    eprintln!("np 8 order + wild took {:?}", t.elapsed());
}

/// The node's CPU count is the union of its ranks' affinity masks: ranks pinned
/// one per CPU (as `srun --cpu-bind` or `gmpirun --bind-to core` pin them) are
/// not taken for oversubscribed, ranks pinned onto one CPU are.
#[test]
fn pinned_ranks_count_the_cpus_of_the_node_not_their_own() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 || Command::new("taskset").arg("-V").output().is_err() {
        eprintln!("skipping: {cpus} CPU, or no taskset");
        return;
    }
    let job = |args: &[&str]| {
        let mut a = vec!["--timeout", "60"];
        a.extend_from_slice(args);
        a.extend([CHECK, "order"]);
        let o = run(&a, &[("GMPI_LOG", "gmpi=debug")]);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{args:?}: {err}");
        err
    };
    // Each rank pins itself to its own CPU before MPI_Init.
    let own = "exec taskset -c $GMPI_RANK \"$0\" \"$@\"";
    let err = job(&["--bind-to", "none", "-np", "2", "sh", "-c", own]);
    assert!(
        err.contains("2 local ranks on 2 CPUs") && !err.contains("oversubscribed"),
        "{err}"
    );
    // gmpirun binds them (the default for 2 ranks on 2 or more cores).
    let err = job(&["-np", "2"]);
    assert!(
        err.contains("2 local ranks on 2 CPUs") && !err.contains("oversubscribed"),
        "{err}"
    );
    // Both on CPU 0.
    let one = "exec taskset -c 0 \"$0\" \"$@\"";
    let err = job(&["--bind-to", "none", "-np", "2", "sh", "-c", one]);
    assert!(
        err.contains("2 local ranks on 1 CPUs: oversubscribed"),
        "{err}"
    );
}

#[test]
fn examples_run() {
    let dir = gmpi_tests::target_dir();
    for (np, prog, args) in [
        (4, "hello", vec![]),
        (4, "ring", vec!["20"]),
        (
            2,
            "pingpong",
            vec!["--max", "65536", "--iters", "20", "--check"],
        ),
    ] {
        let p = dir.join(prog);
        if !p.exists() {
            // `cargo test --workspace` builds every binary; a narrower run may not.
            eprintln!("skipping {prog}: not built in this run");
            continue;
        }
        let nps = np.to_string();
        let mut a = vec!["--timeout", "120", "-np", &nps, p.to_str().unwrap()];
        a.extend(args.iter().copied());
        let out = run(&a, &[]);
        assert!(
            out.status.success(),
            "{prog}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_rank_that_never_initializes_ends_the_job() {
    let t = Instant::now();
    let out = run(&["--timeout", "60", "-np", "3", CHECK, "noinit"], &[]);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "job succeeded:\n{se}");
    assert_ne!(
        out.status.code(),
        Some(124),
        "ended by the timeout, not by gmpirun:\n{se}"
    );
    assert!(
        se.contains("rank 2") && se.contains("without initializing"),
        "{se}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
}

#[test]
fn ranks_die_with_a_killed_gmpirun() {
    use std::process::{Command, Stdio};
    let dir = std::env::temp_dir().join(format!("gmpi-hang-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut job = Command::new(gmpi_tests::gmpirun())
        .args([
            "--timeout",
            "60",
            "-np",
            "3",
            CHECK,
            "hang",
            dir.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while (0..3).any(|r| !dir.join(r.to_string()).exists()) {
        assert!(t.elapsed() < Duration::from_secs(30), "ranks did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    job.kill().unwrap(); // SIGKILL: gmpirun gets no chance to clean up
    job.wait().unwrap();
    let pids: Vec<String> = (0..3)
        .map(|r| {
            std::fs::read_to_string(dir.join(r.to_string()))
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    let t = Instant::now();
    loop {
        let alive: Vec<&String> = pids
            .iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .map(|s| !s.contains(") Z "))
                    .unwrap_or(false)
            })
            .collect();
        if alive.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "ranks {alive:?} outlived a SIGKILLed gmpirun"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gmpi_toml_in_the_working_directory_configures_the_job() {
    let dir = std::env::temp_dir().join(format!("gmpi-cfg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let job = |dir: &Path| {
        std::process::Command::new(gmpi_tests::gmpirun())
            .args(["--timeout", "60", "-np", "2", CHECK, "self"])
            .current_dir(dir)
            .env_remove("GMPI_LOG")
            .env_remove("GMPI_EAGER_LIMIT")
            .env("XDG_CONFIG_HOME", dir.join("no-such-dir"))
            .output()
            .unwrap()
    };
    // Without a file: a 5000-byte self-send is eager and nothing is logged.
    let out = job(&dir);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("pml"));
    // With one: the eager limit drops to 16 bytes and every message logs its protocol.
    std::fs::write(
        dir.join("gmpi.toml"),
        "eager_limit = 16\nlog = \"pml=debug\"\n",
    )
    .unwrap();
    let out = job(&dir);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{se}");
    assert!(
        se.contains("send 5000 B") && se.contains("rndv/pipelined"),
        "{se}"
    );
    assert!(se.contains("send 5 B") && se.contains("eager"), "{se}");
    // A typo is an error naming the file, not a silent default.
    std::fs::write(dir.join("gmpi.toml"), "eager_limt = 16\n").unwrap();
    let out = job(&dir);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        se.contains("gmpi.toml") && se.contains("eager_limt"),
        "{se}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
