//! gmpirun: starts the ranks of a gmpi job, on this node or across hosts, and sees the
//! job through.
//!
//! File map:
//! - `main.rs`: entry point: proxy mode or argv preprocessing, clap, the choice of
//!   hosts and launch method (`-H`/`--hostfile`, a Slurm allocation, or this node;
//!   ssh or srun), hand-off to the job.
//! - `cli.rs`: the command line (`-n/-np`, `-x`, `--tag-output`, `--timeout`, `-H`,
//!   `--hostfile`, `--map-by`, `-N`, `--launch-agent`, `--launcher`, `--fanout`, ...).
//! - `bind.rs`: `--bind-to` and `--report-bindings`: the host's topology from sysfs, the
//!   CPUs of each rank.
//! - `hosts.rs`: host lists and hostfiles, rank placement, `PMI_process_mapping`.
//! - `job.rs`: a job on this node (no host option): the whole job's PMI server, stdin to
//!   rank 0, line forwarding of the ranks' output, judging what they do (the first
//!   failure decides), the end of the job.
//! - `cluster.rs`: a job across hosts, the root's side: starting the per-host proxies
//!   (a launch tree), their connections, joining their PMI barriers and broadcasting
//!   the keys, forwarding output, judging exits, detecting lost hosts, ending
//!   everything.
//! - `proxy.rs`: the hidden proxy mode run on each host: its link to the root (where it
//!   reports what its ranks do), child proxies; ends its ranks when the root says so or
//!   is lost.
//! - `local.rs`: the ranks of one host, for `job.rs` and `proxy.rs`: their processes and
//!   process groups, PMI connections, output pipes, rank 0's stdin, exits, and their
//!   ending (SIGTERM, SIGKILL after a grace, drain, `/dev/shm` cleanup).
//! - `reactor.rs`: the one event loop of `job.rs`, `cluster.rs` and `proxy.rs`: the
//!   `poll` set keyed by tokens, deadlines, the signalfd, reaping children.
//! - `control.rs`: the root ↔ proxy wire protocol: HMAC handshake on the job secret,
//!   framed messages, heartbeats.
//! - `agent.rs`: how a proxy is started on a host (directly, `ssh` and alike, `srun`),
//!   and the started agent (secret on its stdin, its stderr's tail), for `cluster.rs`
//!   and `proxy.rs`.
//! - `rank.rs`: one rank's process (environment, spawning, PMI socket) and the
//!   judgement of its exit, shared by `job.rs` and `cluster.rs`.
//! - `output.rs`: per-rank line forwarding (`[rank] ` tags, partial lines).
//! - `slurm.rs`: Slurm allocations (`SLURM_JOB_NODELIST`, `SLURM_TASKS_PER_NODE`)
//!   expanded into `(host, slots)`: the hosts of a job run inside `salloc`/`sbatch`.
//! - `sys.rs`: signals, `poll`, `waitpid`, descriptors, process groups, `/proc`,
//!   `/dev/shm`, interfaces: the only `unsafe` (the `pre_exec` hook).
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
mod bind;
mod cli;
mod cluster;
mod control;
mod doctor;
mod hosts;
mod job;
mod local;
mod output;
mod proxy;
mod rank;
mod reactor;
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

/// Where the ranks run and how their proxies start.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// Every rank on this node, no proxies: `np` ranks.
    Local { np: u32 },
    /// Across `hosts`, proxies started by `starter`.
    Cluster {
        hosts: Vec<hosts::Host>,
        starter: agent::Starter,
    },
}

/// What [`plan`] decides from.
struct PlanInput {
    /// `-n`, `-N`.
    np: Option<u32>,
    npernode: Option<u32>,
    /// The hosts of `-H` or `--hostfile`.
    given: Option<Vec<hosts::Host>>,
    /// `--launcher` / `GMPI_LAUNCHER`.
    launcher: cli::Launcher,
    /// `--launch-agent` or `GMPI_SSH` was given.
    explicit_agent: bool,
    /// The launch agent's words (`agent::agent_argv`).
    agent: Vec<String>,
    /// The Slurm allocation this gmpirun runs in, if any.
    alloc: Result<Option<Vec<(String, u32)>>, slurm::SlurmError>,
}

/// Chooses the hosts and the launch method. Host options win over an allocation; inside
/// an allocation without them, its hosts and slots are used and, unless the user chose
/// a launch agent or `--launcher ssh`, every proxy is a Slurm step started by `srun`.
/// `Err` is a command-line error; `Ok((plan, Some(warning)))` when a malformed
/// allocation was ignored.
fn plan(input: PlanInput) -> Result<(Plan, Option<String>), String> {
    use cli::Launcher;
    let PlanInput {
        np,
        npernode,
        given,
        launcher,
        explicit_agent,
        agent,
        alloc,
    } = input;
    let mut warning = None;
    let alloc_hosts = match alloc {
        Ok(Some(a)) => Some(
            a.into_iter()
                .map(|(name, slots)| hosts::Host { name, slots })
                .collect::<Vec<_>>(),
        ),
        Ok(None) => None,
        Err(e) if launcher == Launcher::Srun => {
            return Err(format!("--launcher srun: bad Slurm allocation: {e}"))
        }
        Err(e) => {
            warning = Some(format!("ignoring the Slurm allocation: {e}"));
            None
        }
    };
    let ssh = agent::Starter::RemoteShell(agent);
    let srun = agent::Starter::Srun(vec!["srun".to_owned()]);
    let cluster = |hosts, starter| Ok((Plan::Cluster { hosts, starter }, warning.clone()));
    match (launcher, given, alloc_hosts) {
        (Launcher::Srun, _, None) => Err(
            "--launcher srun: not inside a Slurm allocation (SLURM_JOB_NODELIST is not set)"
                .to_owned(),
        ),
        (Launcher::Srun, given, Some(alloc)) => cluster(given.unwrap_or(alloc), srun),
        (_, Some(given), _) => cluster(given, ssh),
        (Launcher::Auto, None, Some(alloc)) if !explicit_agent => cluster(alloc, srun),
        (_, None, Some(alloc)) => cluster(alloc, ssh),
        (_, None, None) => {
            let np = match (np, npernode) {
                (Some(n), Some(k)) if n > k => {
                    return Err(format!(
                        "-n {n} is more than -N {k} ranks on this one node (give hosts with -H or --hostfile)"
                    ))
                }
                (Some(n), _) | (None, Some(n)) => n,
                (None, None) => {
                    return Err(
                        "-n N is required (outside a Slurm allocation, and without -H or --hostfile)"
                            .to_owned(),
                    )
                }
            };
            Ok((Plan::Local { np }, warning))
        }
    }
}

fn main() {
    sys::ensure_std_fds();
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == agent::PROXY_FLAG) {
        std::process::exit(proxy::main(&args[2..]));
    }
    let cli = cli::Cli::parse_from(cli::preprocess_args(args));
    if cli.doctor {
        std::process::exit(doctor::run());
    }
    let mut exports = cli::exports(&cli.export).unwrap_or_else(|msg| usage_error(&msg));
    if cli.gpu_bind == cli::GpuBind::LocalRank {
        exports.push(("GMPI_GPU_BIND".into(), "local-rank".into()));
    }
    match cli.bind_to {
        Some(b) => exports.push((bind::BIND_VAR.into(), b.name().into())),
        None => {
            if let Ok(v) = std::env::var(bind::BIND_VAR) {
                if !v.trim().is_empty() {
                    bind::BindTo::parse(&v).unwrap_or_else(|msg| usage_error(&msg));
                }
            }
        }
    }
    if cli.report_bindings {
        exports.push((bind::REPORT_VAR.into(), "1".into()));
    }
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
    let gmpi_ssh = std::env::var("GMPI_SSH").ok();
    let explicit_agent =
        cli.launch_agent.is_some() || gmpi_ssh.as_deref().is_some_and(|s| !s.trim().is_empty());
    let agent = agent::agent_argv(cli.launch_agent.as_deref(), gmpi_ssh.as_deref())
        .unwrap_or_else(|msg| usage_error(&msg));
    let launcher =
        cli::Launcher::choose(cli.launcher, std::env::var("GMPI_LAUNCHER").ok().as_deref())
            .unwrap_or_else(|msg| usage_error(&msg));
    let (plan, warning) = plan(PlanInput {
        np: cli.np,
        npernode: cli.npernode,
        given: hosts,
        launcher,
        explicit_agent,
        agent,
        alloc: slurm::allocation_from_env(),
    })
    .unwrap_or_else(|msg| usage_error(&msg));
    if let Some(w) = warning {
        eprintln!("gmpirun: warning: {w}");
    }
    let (hosts, starter) = match plan {
        Plan::Local { np } => {
            spec.np = np;
            std::process::exit(job::run(&spec));
        }
        Plan::Cluster { hosts, starter } => (hosts, starter),
    };
    let placement = hosts::place(&hosts, cli.np, cli.map_by, cli.npernode)
        .unwrap_or_else(|msg| usage_error(&msg));
    spec.np = placement.iter().map(|h| h.ranks.len() as u32).sum();
    std::process::exit(cluster::run(cluster::ClusterSpec {
        job: &spec,
        placement,
        starter,
        fanout: cli.fanout as usize,
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent::Starter;
    use cli::Launcher;

    fn input() -> PlanInput {
        PlanInput {
            np: None,
            npernode: None,
            given: None,
            launcher: Launcher::Auto,
            explicit_agent: false,
            agent: vec!["ssh".into()],
            alloc: Ok(None),
        }
    }

    fn host(name: &str, slots: u32) -> hosts::Host {
        hosts::Host {
            name: name.into(),
            slots,
        }
    }

    fn alloc() -> Result<Option<Vec<(String, u32)>>, slurm::SlurmError> {
        slurm::allocation("n[1-2]", "2(x2)").map(Some)
    }

    fn cluster(hosts: Vec<hosts::Host>, starter: Starter) -> Plan {
        Plan::Cluster { hosts, starter }
    }

    #[test]
    fn outside_an_allocation() {
        let p = plan(PlanInput {
            np: Some(3),
            ..input()
        });
        assert_eq!(p, Ok((Plan::Local { np: 3 }, None)));
        let e = plan(input()).unwrap_err();
        assert!(e.contains("-n N is required"), "{e}");
        let e = plan(PlanInput {
            np: Some(3),
            npernode: Some(2),
            ..input()
        })
        .unwrap_err();
        assert!(e.contains("-n 3 is more than -N 2"), "{e}");
        let p = plan(PlanInput {
            given: Some(vec![host("a", 2)]),
            ..input()
        });
        let ssh = Starter::RemoteShell(vec!["ssh".into()]);
        assert_eq!(p, Ok((cluster(vec![host("a", 2)], ssh), None)));
        let e = plan(PlanInput {
            launcher: Launcher::Srun,
            np: Some(2),
            ..input()
        })
        .unwrap_err();
        assert!(e.contains("not inside a Slurm allocation"), "{e}");
    }

    #[test]
    fn inside_an_allocation() {
        let srun = Starter::Srun(vec!["srun".into()]);
        let ssh = Starter::RemoteShell(vec!["ssh".into()]);
        let from_alloc = vec![host("n1", 2), host("n2", 2)];
        // The allocation's hosts, by srun, with or without -n.
        for np in [None, Some(2)] {
            let p = plan(PlanInput {
                np,
                alloc: alloc(),
                ..input()
            });
            assert_eq!(p, Ok((cluster(from_alloc.clone(), srun.clone()), None)));
        }
        // The user's choices: a launch agent or --launcher ssh keep the allocation's
        // hosts but not srun; host options replace both.
        for (launcher, explicit_agent) in [(Launcher::Auto, true), (Launcher::Ssh, false)] {
            let p = plan(PlanInput {
                launcher,
                explicit_agent,
                alloc: alloc(),
                ..input()
            });
            assert_eq!(p, Ok((cluster(from_alloc.clone(), ssh.clone()), None)));
        }
        let p = plan(PlanInput {
            given: Some(vec![host("x", 1)]),
            alloc: alloc(),
            ..input()
        });
        assert_eq!(p, Ok((cluster(vec![host("x", 1)], ssh), None)));
        // --launcher srun with host options: those hosts, as Slurm steps.
        let p = plan(PlanInput {
            given: Some(vec![host("n2", 1)]),
            launcher: Launcher::Srun,
            alloc: alloc(),
            ..input()
        });
        assert_eq!(p, Ok((cluster(vec![host("n2", 1)], srun), None)));
    }

    #[test]
    fn a_malformed_allocation() {
        let bad = || slurm::allocation("n[1-2", "1").map(Some);
        let (p, warning) = plan(PlanInput {
            np: Some(2),
            alloc: bad(),
            ..input()
        })
        .unwrap();
        assert_eq!(p, Plan::Local { np: 2 });
        assert!(warning.unwrap().contains("n[1-2"));
        let e = plan(PlanInput {
            launcher: Launcher::Srun,
            alloc: bad(),
            ..input()
        })
        .unwrap_err();
        assert!(e.contains("bad Slurm allocation"), "{e}");
    }
}
