//! gmpirun: starts the ranks of a gmpi job on this node and sees the job through.
//!
//! File map:
//! - `main.rs`: entry point: argv preprocessing, clap, hand-off to the job.
//! - `cli.rs`: the command line (`-n/-np`, `-x`, `--tag-output`, `--timeout`, ...).
//! - `job.rs`: spawning the ranks (environment, PMI socketpair, pipes, process groups)
//!   and the single-threaded `poll` event loop: PMI serving, output forwarding, stdin to
//!   rank 0, reaping, failure handling, teardown and cleanup.
//! - `output.rs`: per-rank line forwarding (`[rank] ` tags, partial lines).
//! - `slurm.rs`: Slurm allocations (`SLURM_JOB_NODELIST`, `SLURM_TASKS_PER_NODE`)
//!   expanded into `(host, slots)`.
//! - `sys.rs`: signals, descriptors, process groups, `/proc` and `/dev/shm`: the only
//!   `unsafe` (the `pre_exec` hook).
//!
//! Contract: exit status 0 when every rank exits 0 (after PMI finalize when it used PMI);
//! otherwise the first failure decides: the rank's exit status, 128+N for signal N, its
//! PMI abort code (1 for 0), 1 for a malformed PMI message or an exit without finalize,
//! 124 after `--timeout`, 128+N when gmpirun receives SIGINT/SIGTERM/SIGHUP, 127 when
//! PROGRAM cannot be started, 2 for a bad command line. One message on stderr names the
//! failing rank and the cause. In every case all processes of the job are ended and
//! reaped and `/dev/shm/gmpi-<jobid>*` is removed before gmpirun exits.

mod cli;
mod job;
mod output;
mod slurm;
mod sys;

use clap::Parser;

fn main() {
    sys::ensure_std_fds();
    let cli = cli::Cli::parse_from(cli::preprocess_args(std::env::args_os()));
    let exports = match cli::exports(&cli.export) {
        Ok(e) => e,
        Err(msg) => {
            eprintln!("gmpirun: {msg}");
            std::process::exit(2);
        }
    };
    let mut command = cli.command.into_iter();
    let spec = job::JobSpec {
        program: command.next().expect("clap requires PROGRAM"),
        args: command.collect(),
        np: cli.np,
        exports,
        tag_output: cli.tag_output,
        timeout: cli.timeout,
    };
    let _ = cli.oversubscribe; // Accepted for compatibility; always allowed.
    match slurm::allocation_from_env() {
        Ok(Some(alloc)) => {
            let here = nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default();
            if let Some(note) = slurm::other_hosts_note(&alloc, &here) {
                eprintln!("gmpirun: note: {note}");
            }
        }
        Ok(None) => {}
        Err(e) => eprintln!("gmpirun: warning: ignoring the Slurm allocation: {e}"),
    }
    std::process::exit(job::run(&spec));
}
