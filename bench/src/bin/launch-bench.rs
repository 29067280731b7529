//! `launch-bench`: how long `gmpirun` takes to start a job across hosts.
//!
//! Builds N hosts on this machine (network namespaces with their own sshd, the
//! `gmpi_tests::netns` fixture: needs root, iproute2 and openssh-server) and runs, from the
//! first host, `gmpirun -H h0:P,...,hN-1:P [--fanout F] PROGRAM` several times. For each run
//! it reports when the last of the N×P ranks printed its first line (for `hello`: every
//! rank is past `MPI_Init`) and when gmpirun exited; then the medians. For reference it
//! also times the floor: plain `ssh HOST true` to every other host at once.
//!
//! ```sh
//! cargo build --release -p gmpi-launcher -p gmpi-examples -p gmpi-bench
//! sudo target/release/launch-bench                      # 8 hosts x 2 ranks of `hello`
//! sudo target/release/launch-bench --hosts 8 --per-host 2 --fanout 2 -- sh -c 'echo up'
//! ```

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use gmpi_tests::netns::Cluster;

struct Options {
    hosts: usize,
    per_host: usize,
    runs: usize,
    fanout: Option<String>,
    program: Vec<String>,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        hosts: 8,
        per_host: 2,
        runs: 5,
        fanout: None,
        program: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--hosts" => {
                o.hosts = value("--hosts")?
                    .parse()
                    .map_err(|e| format!("--hosts: {e}"))?
            }
            "--per-host" => {
                o.per_host = value("--per-host")?
                    .parse()
                    .map_err(|e| format!("--per-host: {e}"))?
            }
            "--runs" => {
                o.runs = value("--runs")?
                    .parse()
                    .map_err(|e| format!("--runs: {e}"))?
            }
            "--fanout" => o.fanout = Some(value("--fanout")?),
            "--" => {
                o.program = args.collect();
                break;
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    if o.program.is_empty() {
        let hello = gmpi_tests::target_dir().join("hello");
        o.program = vec![hello.to_string_lossy().into_owned()];
    }
    if o.hosts == 0 || o.per_host == 0 || o.runs == 0 {
        return Err("--hosts, --per-host and --runs must be positive".to_owned());
    }
    Ok(o)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("launch-bench: {e}");
            std::process::exit(2);
        }
    };
    let Some(c) = Cluster::start(o.hosts) else {
        std::process::exit(1);
    };
    let hosts: Vec<String> = (0..o.hosts)
        .map(|i| format!("{}:{}", c.name(i), o.per_host))
        .collect();
    let hosts = hosts.join(",");
    let ranks = o.hosts * o.per_host;
    let gmpirun = gmpi_tests::gmpirun();
    println!(
        "gmpirun start-up, {} hosts x {} ranks, fan-out {}: {}",
        o.hosts,
        o.per_host,
        o.fanout.as_deref().unwrap_or("32 (default)"),
        o.program.join(" ")
    );
    let (mut up, mut done) = (Vec::new(), Vec::new());
    for run in 0..o.runs {
        let mut cmd = c.command(0, &gmpirun);
        cmd.args(["-H", &hosts]);
        if let Some(f) = &o.fanout {
            cmd.args(["--fanout", f]);
        }
        let started = Instant::now();
        let mut child = cmd
            .args(&o.program)
            .env("GMPI_SSH", c.ssh_agent())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start gmpirun");
        let mut lines = 0;
        let mut all_up = None;
        for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
            if line.is_err() {
                break;
            }
            lines += 1;
            if lines == ranks {
                all_up = Some(started.elapsed());
            }
        }
        let status = child.wait().expect("wait for gmpirun");
        let total = started.elapsed();
        let Some(all_up) = all_up.filter(|_| status.success()) else {
            eprintln!("launch-bench: run {run} failed ({status}, {lines} lines of {ranks})");
            std::process::exit(1);
        };
        println!(
            "run {run}: all {ranks} ranks up after {:.1} ms, gmpirun done after {:.1} ms",
            all_up.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e3
        );
        up.push(all_up);
        done.push(total);
    }
    println!(
        "median: all ranks up {:.1} ms, gmpirun done {:.1} ms",
        median(up).as_secs_f64() * 1e3,
        median(done).as_secs_f64() * 1e3
    );
    let mut ssh = Vec::new();
    for _ in 0..o.runs {
        let started = Instant::now();
        let children: Vec<_> = (1..o.hosts)
            .map(|i| {
                let mut cmd = c.command(0, "sh");
                cmd.args([
                    "-c",
                    &format!("{} -o BatchMode=yes {} true", c.ssh_agent(), c.name(i)),
                ])
                .stdin(Stdio::null())
                .spawn()
                .expect("start ssh")
            })
            .collect();
        for mut child in children {
            let ok = child.wait().is_ok_and(|s| s.success());
            assert!(ok, "ssh failed");
        }
        ssh.push(started.elapsed());
    }
    if o.hosts > 1 {
        println!(
            "reference: `ssh HOST true` to the other {} hosts at once, median {:.1} ms",
            o.hosts - 1,
            median(ssh).as_secs_f64() * 1e3
        );
    }
}
