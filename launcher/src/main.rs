//! gmpirun: starts the ranks of a gmpi job, on this node or across hosts, and sees the
//! job through.
//!
//! File map:
//! - `main.rs`: entry point: proxy mode or argv preprocessing, clap, hand-off to the job.
//! - `cli.rs`: the command line (`-n/-np`, `-x`, `--tag-output`, `--timeout`, `-H`,
//!   `--hostfile`, `--map-by`, `-N`, `--launch-agent`, `--fanout`, ...).
//! - `hosts.rs`: host lists and hostfiles, rank placement, `PMI_process_mapping`.
//! - `job.rs`: a job on this node (no host option): spawning the ranks and the
//!   single-threaded `poll` event loop: PMI serving, output forwarding, stdin to rank 0,
//!   reaping, failure handling, teardown and cleanup.
//! - `cluster.rs`: a job across hosts, the root's side: starting the per-host proxies
//!   (a launch tree), joining their PMI barriers, forwarding output, judging exits,
//!   detecting lost hosts, ending everything.
//! - `proxy.rs`: the hidden proxy mode run on each host: that host's ranks, their PMI,
//!   output and exits, child proxies; ends its ranks when the root says so or is lost.
//! - `control.rs`: the root ↔ proxy wire protocol: HMAC handshake on the job secret,
//!   framed messages, heartbeats.
//! - `agent.rs`: how a proxy is started on a host (directly, or `ssh` and alike).
//! - `rank.rs`: one rank's process (environment, spawning, PMI socket, output) and the
//!   judgement of its exit, shared by `job.rs` and `proxy.rs`/`cluster.rs`.
//! - `output.rs`: per-rank line forwarding (`[rank] ` tags, partial lines).
//! - `slurm.rs`: Slurm allocations (`SLURM_JOB_NODELIST`, `SLURM_TASKS_PER_NODE`)
//!   expanded into `(host, slots)`.
//! - `sys.rs`: signals, descriptors, process groups, `/proc`, `/dev/shm`, interfaces:
//!   the only `unsafe` (the `pre_exec` hook).
//!
//! Contract: exit status 0 when every rank exits 0 (after PMI finalize when it used PMI);
//! otherwise the first failure decides: the rank's exit status, 128+N for signal N, its
//! PMI abort code (1 for 0), 1 for a malformed PMI message or an exit without finalize,
//! 124 after `--timeout`, 128+N when gmpirun receives SIGINT/SIGTERM/SIGHUP, 127 when
//! PROGRAM cannot be started (on any host), 1 when a host cannot be reached or is lost,
//! 2 for a bad command line. One message on stderr names the failing rank (and host) and
//! the cause. In every case all processes of the job are ended and reaped and
//! `/dev/shm/gmpi-<jobid>*` is removed on every host before gmpirun exits (a host that
//! is cut off ends its own ranks once it notices, within a few seconds).

mod agent;
mod cli;
mod cluster;
mod control;
mod hosts;
mod job;
mod output;
mod proxy;
mod rank;
mod slurm;
mod sys;

use std::ffi::OsString;

use clap::Parser;

/// Prints a command-line error the way clap does and exits 2.
fn usage_error(msg: &str) -> ! {
    eprintln!("gmpirun: {msg}");
    std::process::exit(2);
}

/// The hosts of `-H` or `--hostfile`, or `None` for a job on this node.
fn host_list(cli: &cli::Cli) -> Result<Option<Vec<hosts::Host>>, String> {
    if !cli.hosts.is_empty() {
        return hosts::parse_host_list(&cli.hosts).map(Some);
    }
    let Some(path) = &cli.hostfile else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read hostfile {}: {e}", path.display()))?;
    hosts::parse_hostfile(&text, &path.display().to_string()).map(Some)
}

/// Inside a Slurm allocation that spans other hosts, says that a job without host
/// options stays on this one.
fn slurm_note() {
    match slurm::allocation_from_env() {
        Ok(Some(alloc)) => {
            if let Some(note) = slurm::other_hosts_note(&alloc, &sys::hostname()) {
                eprintln!("gmpirun: note: {note}");
            }
        }
        Ok(None) => {}
        Err(e) => eprintln!("gmpirun: warning: ignoring the Slurm allocation: {e}"),
    }
}

fn main() {
    sys::ensure_std_fds();
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == agent::PROXY_FLAG) {
        std::process::exit(proxy::main(&args[2..]));
    }
    let cli = cli::Cli::parse_from(cli::preprocess_args(args));
    let exports = cli::exports(&cli.export).unwrap_or_else(|msg| usage_error(&msg));
    let hosts = host_list(&cli).unwrap_or_else(|msg| usage_error(&msg));
    let _ = cli.oversubscribe; // Accepted for compatibility; always allowed.
    let mut command = cli.command.into_iter();
    let mut spec = job::JobSpec {
        program: command.next().expect("clap requires PROGRAM"),
        args: command.collect(),
        np: 0,
        exports,
        tag_output: cli.tag_output,
        timeout: cli.timeout,
    };
    let Some(hosts) = hosts else {
        spec.np = match (cli.np, cli.npernode) {
            (Some(n), Some(k)) if n > k => usage_error(&format!(
                "-n {n} is more than -N {k} ranks on this one node (give hosts with -H or --hostfile)"
            )),
            (Some(n), _) | (None, Some(n)) => n,
            (None, None) => unreachable!("clap requires -n without hosts or -N"),
        };
        slurm_note();
        std::process::exit(job::run(&spec));
    };
    let placement = hosts::place(&hosts, cli.np, cli.map_by, cli.npernode)
        .unwrap_or_else(|msg| usage_error(&msg));
    spec.np = placement.iter().map(|h| h.ranks.len() as u32).sum();
    let gmpi_ssh = std::env::var("GMPI_SSH").ok();
    let agent = agent::agent_argv(cli.launch_agent.as_deref(), gmpi_ssh.as_deref())
        .unwrap_or_else(|msg| usage_error(&msg));
    std::process::exit(cluster::run(cluster::ClusterSpec {
        job: &spec,
        placement,
        agent,
        fanout: cli.fanout as usize,
    }));
}
