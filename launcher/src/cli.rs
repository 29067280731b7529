//! Command line: the clap definition and the `-np` / program-boundary preprocessing.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::hosts::MapBy;

/// Start the ranks of a gmpi (MPI) job on this node or across hosts.
///
/// gmpirun starts N copies of PROGRAM, serves them the PMI-1 bootstrap protocol
/// (PMI_FD), forwards their output line by line and gmpirun's stdin to rank 0, and ends
/// the whole job as soon as one rank fails (non-zero exit, signal, PMI abort, exit
/// without PMI finalize). Its exit status is the first failing rank's status (128+N for
/// signal N), 124 after --timeout, 127 when PROGRAM cannot be started, 1 when a host
/// cannot be reached or is lost.
///
/// With -H or --hostfile the ranks run on those hosts: gmpirun starts a proxy on each
/// (itself, at the same path: a shared filesystem is assumed) through SSH, or directly
/// for this host (`localhost` or its own name). Ranks start in gmpirun's working
/// directory with the remote login environment plus gmpirun's PATH, LD_LIBRARY_PATH and
/// GMPI_* variables and the -x ones. Without -n the job has one rank per slot.
///
/// Inside a Slurm allocation (SLURM_JOB_NODELIST set) and without -H or --hostfile, the
/// hosts and slots are the allocation's (SLURM_TASKS_PER_NODE), and every host's proxy,
/// this host's included, is started as a Slurm step with `srun` (so Slurm accounts for
/// and cleans up every rank), unless --launcher ssh (or GMPI_LAUNCHER=ssh),
/// --launch-agent or GMPI_SSH says otherwise; -n, -N and --map-by apply as with -H.
#[derive(Debug, Parser)]
#[command(
    name = "gmpirun",
    version,
    about,
    long_about,
    override_usage = "gmpirun [OPTIONS] -n|-np N PROGRAM [ARGS...]\n       \
                      gmpirun [OPTIONS] [-n N] -H HOST[:SLOTS],... | --hostfile FILE PROGRAM [ARGS...]\n       \
                      gmpirun [OPTIONS] [-n N] PROGRAM [ARGS...]   (inside a Slurm allocation)"
)]
pub struct Cli {
    /// Number of ranks to start (also spelled -np). With hosts or inside a Slurm
    /// allocation: one per slot if omitted; required otherwise.
    #[arg(short = 'n', long = "np", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub np: Option<u32>,

    /// Hosts to run on, with their slots (1 if not given): `-H n1:4,n2:4`. Repeatable;
    /// a host named again gets more slots.
    #[arg(short = 'H', long = "host", value_name = "HOST[:SLOTS],...")]
    pub hosts: Vec<String>,

    /// File of hosts, one per line: `host`, `host:4` or `host slots=4`; `#` comments.
    #[arg(long, value_name = "FILE", conflicts_with = "hosts")]
    pub hostfile: Option<PathBuf>,

    /// How ranks are dealt to the hosts: `slot` fills each host's slots in order,
    /// `node` goes round-robin over the hosts.
    #[arg(long, value_name = "POLICY", value_enum, default_value_t = MapBy::Slot)]
    pub map_by: MapBy,

    /// Exactly N ranks on each host (slots are ignored); without -n, N per host.
    #[arg(short = 'N', long = "npernode", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub npernode: Option<u32>,

    /// The command that runs the proxies on other hosts, split on whitespace (default:
    /// $GMPI_SSH, else `ssh`). For ssh, `-o BatchMode=yes -o ConnectTimeout=5` are added.
    #[arg(long, value_name = "COMMAND")]
    pub launch_agent: Option<String>,

    /// How proxies are started on the hosts: `auto` is `srun` inside a Slurm allocation
    /// when no -H, --hostfile, --launch-agent or GMPI_SSH is given, else `ssh` (the
    /// launch agent); `srun` needs an allocation. Default: $GMPI_LAUNCHER, else `auto`.
    #[arg(long, value_name = "METHOD", value_enum)]
    pub launcher: Option<Launcher>,

    /// Most hosts one process starts; beyond, proxies start further proxies (a tree).
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub fanout: u32,

    /// Export NAME=VALUE to every rank, or NAME with its current value. Repeatable.
    #[arg(short = 'x', value_name = "NAME[=VALUE]")]
    pub export: Vec<String>,

    /// Prefix every output line with the rank that wrote it: `[1] hello`.
    #[arg(long)]
    pub tag_output: bool,

    /// End the job (exit status 124) if it runs longer than SECONDS.
    #[arg(long, value_name = "SECONDS", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,

    /// Accepted for compatibility: oversubscription is always allowed.
    #[arg(long)]
    pub oversubscribe: bool,

    /// Bind each rank to CPUs: the ranks of a host are mapped to its cores in order
    /// and bound to that core (`core`: all its hardware threads), the cores sharing its
    /// L3 cache (`l3cache`) or its NUMA node (`numa`); `none` leaves them unbound.
    /// Default: $GMPI_BIND_TO, else `core` where a host runs 2 to as many ranks as
    /// it has cores (those gmpirun may use), otherwise unbound.
    #[arg(long, value_name = "POLICY", value_enum)]
    pub bind_to: Option<crate::bind::BindTo>,

    /// Print each rank's binding on stderr as it starts:
    /// `gmpirun: rank 1 on HOST: bound to core 1 (cpus 1)`.
    #[arg(long)]
    pub report_bindings: bool,

    /// GPU per rank: `local-rank` makes GPU `local_rank % gpus` current in
    /// each rank at MPI_Init (other GPUs stay visible, so CUDA IPC between
    /// them works); `none` leaves the choice to the program.
    #[arg(long, value_name = "POLICY", value_enum, default_value_t = GpuBind::None)]
    pub gpu_bind: GpuBind,

    /// Print what gmpi finds on this machine (CUDA driver, GPUs, GDRCopy,
    /// nvidia_peermem, dma-buf, `ulimit -l`, the protocol it would pick for
    /// host/device pairs) and exit.
    #[arg(long)]
    pub doctor: bool,

    /// The program to start, then its arguments (passed verbatim).
    #[arg(value_name = "PROGRAM", required_unless_present = "doctor", num_args = 1..,
          trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

/// `--gpu-bind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum GpuBind {
    /// The program picks its GPU.
    #[default]
    None,
    /// GPU `local_rank % gpus`.
    LocalRank,
}

/// Options that take a separate value (`-n 4`), so the walk in [`preprocess_args`] knows
/// that the next word is not the program. Keep in sync with [`Cli`].
const OPTIONS_WITH_VALUE: &[&str] = &[
    "-n",
    "--np",
    "-x",
    "--timeout",
    "-H",
    "--host",
    "--hostfile",
    "--map-by",
    "-N",
    "--npernode",
    "--launch-agent",
    "--launcher",
    "--fanout",
    "--gpu-bind",
    "--bind-to",
];

/// `--launcher` / `GMPI_LAUNCHER`: how proxies are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Launcher {
    /// `srun` inside a Slurm allocation without host options or a launch agent, else ssh.
    #[default]
    Auto,
    /// Slurm steps, one per host (needs an allocation).
    Srun,
    /// The launch agent (`ssh`), this host's proxy directly.
    Ssh,
}

impl Launcher {
    /// `--launcher` if given, else `GMPI_LAUNCHER` (`auto`, `srun` or `ssh`), else auto.
    pub fn choose(cli: Option<Launcher>, env: Option<&str>) -> Result<Launcher, String> {
        use clap::ValueEnum;
        match (cli, env.map(str::trim).filter(|e| !e.is_empty())) {
            (Some(l), _) => Ok(l),
            (None, Some(e)) => Launcher::from_str(e, true).map_err(|_| {
                format!("GMPI_LAUNCHER={e}: not a launcher (expected auto, srun or ssh)")
            }),
            (None, None) => Ok(Launcher::Auto),
        }
    }
}

/// Rewrites gmpirun's argv for clap: `-np` (single dash, as every MPI spells it) becomes
/// `-n`, and a `--` is inserted before PROGRAM so nothing after it is read as a gmpirun
/// option. Only words before PROGRAM are looked at.
pub fn preprocess_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut args = args.into_iter();
    let mut out: Vec<OsString> = args.next().into_iter().collect();
    let mut expect_value = false;
    for arg in args.by_ref() {
        if expect_value {
            expect_value = false;
            out.push(arg);
            continue;
        }
        let Some(text) = arg.to_str() else {
            // Not UTF-8: cannot be one of our options, so it is the program.
            out.push("--".into());
            out.push(arg);
            break;
        };
        if text == "--" {
            out.push(arg);
            break;
        }
        if text == "-np" {
            out.push("-n".into());
            expect_value = true;
        } else if let Some(value) = text.strip_prefix("-np=") {
            out.push(format!("-n={value}").into());
        } else if OPTIONS_WITH_VALUE.contains(&text) {
            out.push(arg);
            expect_value = true;
        } else if text.starts_with('-') && text.len() > 1 {
            out.push(arg);
        } else {
            out.push("--".into());
            out.push(arg);
            break;
        }
    }
    out.extend(args);
    out
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(format!("timeout must be positive, got `{s}`"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())
}

/// Splits `-x` arguments into `(name, value)`; `NAME` alone takes gmpirun's own value,
/// and is skipped with a warning when gmpirun has none.
pub fn exports(specs: &[String]) -> Result<Vec<(String, OsString)>, String> {
    let mut out = Vec::new();
    for spec in specs {
        let (name, value) = match spec.split_once('=') {
            Some((name, value)) => (name, Some(OsString::from(value))),
            None => (spec.as_str(), None),
        };
        if name.is_empty() || name.contains('\0') {
            return Err(format!("-x {spec}: not a valid variable name"));
        }
        match value.or_else(|| std::env::var_os(name)) {
            Some(value) => out.push((name.to_owned(), value)),
            None => eprintln!("gmpirun: warning: -x {name}: {name} is not set, not exported"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pre(args: &[&str]) -> Vec<String> {
        preprocess_args(args.iter().map(OsString::from))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn np_is_rewritten_only_before_the_program() {
        assert_eq!(
            pre(&["gmpirun", "-np", "2", "prog", "-np", "5"]),
            ["gmpirun", "-n", "2", "--", "prog", "-np", "5"]
        );
        assert_eq!(
            pre(&[
                "gmpirun",
                "--tag-output",
                "-x",
                "A=b",
                "-np=3",
                "--",
                "p",
                "-x"
            ]),
            [
                "gmpirun",
                "--tag-output",
                "-x",
                "A=b",
                "-n=3",
                "--",
                "p",
                "-x"
            ]
        );
        assert_eq!(
            pre(&["gmpirun", "-n4", "--timeout", "3", "p"]),
            ["gmpirun", "-n4", "--timeout", "3", "--", "p"]
        );
    }

    #[test]
    fn trailing_args_are_verbatim() {
        let cli = Cli::try_parse_from(preprocess_args(
            ["gmpirun", "-np", "2", "prog", "-n", "5", "--foo"].map(OsString::from),
        ))
        .unwrap();
        assert_eq!(cli.np, Some(2));
        assert_eq!(
            cli.command,
            ["prog", "-n", "5", "--foo"].map(OsString::from)
        );
        let cli = Cli::try_parse_from(preprocess_args(
            ["gmpirun", "--timeout", "0.5", "-n", "1", "-x", "A", "p"].map(OsString::from),
        ))
        .unwrap();
        assert_eq!(cli.timeout, Some(Duration::from_millis(500)));
        assert_eq!(cli.export, ["A"]);
    }

    #[test]
    fn host_options() {
        let cli = Cli::try_parse_from(preprocess_args(
            [
                "gmpirun",
                "-H",
                "a:2,b",
                "--host",
                "c",
                "--map-by",
                "node",
                "-N",
                "2",
                "--launch-agent",
                "ssh -p 22",
                "--fanout",
                "4",
                "prog",
                "-H",
            ]
            .map(OsString::from),
        ))
        .unwrap();
        assert_eq!(cli.np, None);
        assert_eq!(cli.hosts, ["a:2,b", "c"]);
        assert_eq!(cli.map_by, MapBy::Node);
        assert_eq!(cli.npernode, Some(2));
        assert_eq!(cli.launch_agent.as_deref(), Some("ssh -p 22"));
        assert_eq!(cli.fanout, 4);
        assert_eq!(cli.launcher, None);
        assert_eq!(cli.command, ["prog", "-H"].map(OsString::from));
        let cli = Cli::try_parse_from(preprocess_args(
            ["gmpirun", "--hostfile", "hf", "-np", "3", "prog"].map(OsString::from),
        ))
        .unwrap();
        assert_eq!(cli.hostfile, Some(PathBuf::from("hf")));
        assert_eq!((cli.np, cli.map_by, cli.fanout), (Some(3), MapBy::Slot, 32));
        // Without -n (allowed by clap: inside an allocation the slots decide).
        let cli = Cli::try_parse_from(preprocess_args(
            ["gmpirun", "--launcher", "ssh", "prog", "--launcher"].map(OsString::from),
        ))
        .unwrap();
        assert_eq!((cli.np, cli.launcher), (None, Some(Launcher::Ssh)));
        assert_eq!(cli.command, ["prog", "--launcher"].map(OsString::from));
    }

    #[test]
    fn launcher_from_the_option_or_the_environment() {
        assert_eq!(Launcher::choose(None, None), Ok(Launcher::Auto));
        assert_eq!(Launcher::choose(None, Some(" ")), Ok(Launcher::Auto));
        assert_eq!(Launcher::choose(None, Some("SRUN")), Ok(Launcher::Srun));
        assert_eq!(
            Launcher::choose(Some(Launcher::Ssh), Some("srun")),
            Ok(Launcher::Ssh)
        );
        let e = Launcher::choose(None, Some("pbs")).unwrap_err();
        assert!(e.contains("GMPI_LAUNCHER=pbs"), "{e}");
    }

    #[test]
    fn bad_command_lines_are_refused() {
        for args in [
            &["gmpirun", "-n", "0", "prog"][..],
            &["gmpirun", "--launcher", "pbs", "prog"],
            &["gmpirun", "-n", "2"],
            &["gmpirun", "--bogus", "-n", "2", "prog"],
            &["gmpirun", "--timeout", "-1", "-n", "2", "prog"],
            &["gmpirun", "-H", "a", "--hostfile", "f", "prog"],
            &["gmpirun", "-H", "a", "--map-by", "core", "prog"],
            &["gmpirun", "-H", "a", "--fanout", "0", "prog"],
            &["gmpirun", "-N", "0", "prog"],
        ] {
            let argv = preprocess_args(args.iter().map(OsString::from));
            assert!(Cli::try_parse_from(argv).is_err(), "{args:?}");
        }
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
