//! Starting a proxy on a host: the one step that differs between launch methods.
//!
//! [`Starter::command`] gives the command that runs gmpirun's hidden proxy mode on a
//! host: directly on this host, through a remote shell (`ssh` and its options from
//! `--launch-agent` / `GMPI_SSH`), or, inside a Slurm allocation, as a one-task Slurm
//! step on that host (`srun --nodelist=HOST --nodes=1 --ntasks=1 --overlap ...`, so that
//! Slurm accounts for every process of the job and cleans up after it). Everything
//! after it is the same, for the root and for a proxy that starts its children
//! ([`Agent::start`]): the command's stdin carries the job secret and then stays open
//! (its end tells the proxy that its starter is gone; srun forwards its stdin to the
//! task), its stderr is kept for error messages, and the proxy calls gmpirun back over
//! TCP.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::path::Path;
use std::process::{ChildStderr, ChildStdin, Command, Stdio};

use nix::unistd::Pid;

use crate::sys::{self, ExitKind};

/// The hidden first argument that puts gmpirun in proxy mode.
pub const PROXY_FLAG: &str = "--internal-proxy";
/// `ssh -o ConnectTimeout=` added by gmpirun: an unreachable host fails within this.
pub const SSH_CONNECT_TIMEOUT_S: u32 = 5;
/// Last bytes of an agent's stderr kept for messages.
pub const TAIL_MAX: usize = 2048;

/// How a proxy is started on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Starter {
    /// This host: run the proxy directly.
    Local,
    /// A remote shell: `AGENT... HOST 'COMMAND'`.
    RemoteShell(Vec<String>),
    /// A Slurm step of one task on the host: `SRUN [SRUN_OPTIONS] --nodelist=HOST ...
    /// COMMAND` (the words are srun's program, e.g. `["srun"]`).
    Srun(Vec<String>),
}

/// The options gmpirun gives `srun` for a proxy's step, before `--nodelist=HOST`:
/// - one task on one node, sharing the allocation's resources with every other step
///   (`--overlap`, Slurm 20.11+: the step never waits for CPUs or memory, however many
///   ranks the proxy starts) and bound to no CPU (`--cpu-bind=none`: the ranks are the
///   proxy's children and would inherit a binding to one core);
/// - `--kill-on-bad-exit=1`: a proxy that fails ends its step at once;
/// - `--mpi=none`: no PMI plugin for the proxy (the ranks get gmpirun's PMI);
/// - `--quiet`: no progress messages of srun's own mixed into gmpirun's stderr;
/// - `--input=0`: gmpirun's pipe (the secret, then the liveness of gmpirun) goes to
///   the task.
pub const SRUN_OPTIONS: &[&str] = &[
    "--nodes=1",
    "--ntasks=1",
    "--overlap",
    "--cpu-bind=none",
    "--kill-on-bad-exit=1",
    "--mpi=none",
    "--quiet",
    "--input=0",
];

impl Starter {
    /// The command that runs `proxy_argv` (gmpirun's absolute path first) on `host`.
    pub fn command(&self, host: &str, proxy_argv: &[OsString]) -> Command {
        match self {
            Starter::Local => {
                let mut cmd = Command::new(&proxy_argv[0]);
                cmd.args(&proxy_argv[1..]);
                cmd
            }
            Starter::RemoteShell(agent) => {
                let mut cmd = Command::new(&agent[0]);
                cmd.args(&agent[1..])
                    .arg(host)
                    .arg(remote_command(proxy_argv));
                cmd
            }
            Starter::Srun(srun) => {
                let mut cmd = Command::new(&srun[0]);
                cmd.args(&srun[1..])
                    .args(SRUN_OPTIONS)
                    .arg(format!("--nodelist={host}"))
                    .args(proxy_argv);
                cmd
            }
        }
    }

    /// What runs the proxy, for messages: `ssh`, `srun`, or `the proxy` itself.
    pub fn what(&self) -> String {
        match self {
            Starter::Local => "the proxy".to_owned(),
            Starter::RemoteShell(agent) | Starter::Srun(agent) => agent[0].clone(),
        }
    }
}

/// The words that run gmpirun's proxy mode for host `host_id`, calling back to `port` at
/// `addrs` (comma-separated): `exe --internal-proxy HOST_ID PORT ADDRS`.
pub fn proxy_argv(exe: &Path, host_id: usize, port: u16, addrs: &str) -> Vec<OsString> {
    vec![
        exe.as_os_str().to_owned(),
        PROXY_FLAG.into(),
        host_id.to_string().into(),
        port.to_string().into(),
        addrs.into(),
    ]
}

/// A started launch agent (or a proxy started directly).
#[derive(Debug)]
pub struct Agent {
    /// Its process id (leader of its own process group).
    pub pid: Pid,
    /// Kept open: its end tells the proxy that its starter is gone.
    pub stdin: Option<ChildStdin>,
    /// Its stderr (non-blocking), until its end.
    pub stderr: Option<ChildStderr>,
    /// The last [`TAIL_MAX`] bytes of its stderr.
    pub tail: Vec<u8>,
    /// How it ended, once reaped.
    pub status: Option<ExitKind>,
    /// What runs the proxy ([`Starter::what`]), for messages.
    pub what: String,
}

impl Agent {
    /// Runs `proxy_argv` on `host` as `starter` says, in its own process group, killed if
    /// gmpirun dies, and writes the job secret (`secret_hex`) on its stdin. `Err` names
    /// the program that could not be run.
    pub fn start(
        starter: &Starter,
        host: &str,
        proxy_argv: &[OsString],
        secret_hex: &str,
    ) -> Result<Self, (String, io::Error)> {
        let mut cmd = starter.command(host, proxy_argv);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        sys::prepare_helper(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| (cmd.get_program().to_string_lossy().into_owned(), e))?;
        let mut stdin = child.stdin.take();
        if let Some(pipe) = &mut stdin {
            // 65 bytes into a fresh pipe: never blocks. A failure shows as the agent's
            // exit or a missing call-back.
            let _ = pipe.write_all(format!("{secret_hex}\n").as_bytes());
        }
        let stderr = child.stderr.take();
        if let Some(e) = &stderr {
            let _ = sys::set_nonblocking(e);
        }
        // `child` is dropped without waiting: it is reaped by pid with waitpid.
        Ok(Self {
            pid: Pid::from_raw(child.id() as i32),
            stdin,
            stderr,
            tail: Vec::new(),
            status: None,
            what: starter.what(),
        })
    }

    /// Reads what its stderr has, keeps the tail, and hands each piece to `also`.
    pub fn read_stderr(&mut self, mut also: impl FnMut(&[u8])) {
        let Some(pipe) = &mut self.stderr else {
            return;
        };
        let mut chunk = [0u8; 4096];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    self.tail.extend_from_slice(&chunk[..n]);
                    if self.tail.len() > TAIL_MAX {
                        let cut = self.tail.len() - TAIL_MAX;
                        self.tail.drain(..cut);
                    }
                    also(&chunk[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => break,
            }
        }
        // End of file, or a broken pipe.
        self.stderr = None;
    }
}

/// The command line a remote shell runs: `exec 'arg' 'arg' ...`, each word quoted.
fn remote_command(argv: &[OsString]) -> String {
    let mut s = String::from("exec");
    for a in argv {
        s.push(' ');
        s.push_str(&shell_quote(&a.to_string_lossy()));
    }
    s
}

/// `word` as one POSIX shell word.
pub fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// The launch agent's words: `--launch-agent` if given, else `GMPI_SSH`, else `ssh`,
/// split on whitespace. For `ssh`, gmpirun adds `-o BatchMode=yes` (never a password
/// prompt) and a connect timeout (options given by the user come first and win).
pub fn agent_argv(cli: Option<&str>, env: Option<&str>) -> Result<Vec<String>, String> {
    let (text, from) = match (cli, env) {
        (Some(c), _) => (c, "--launch-agent"),
        (None, Some(e)) if !e.trim().is_empty() => (e, "GMPI_SSH"),
        _ => ("ssh", "the default"),
    };
    let mut argv: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
    if argv.is_empty() {
        return Err(format!("{from}: empty launch agent"));
    }
    let is_ssh = Path::new(&argv[0]).file_name().is_some_and(|n| n == "ssh");
    if is_ssh {
        argv.extend([
            "-o".to_owned(),
            "BatchMode=yes".to_owned(),
            "-o".to_owned(),
            format!("ConnectTimeout={SSH_CONNECT_TIMEOUT_S}"),
        ]);
    }
    Ok(argv)
}

/// `: last lines` of what a launch agent wrote on stderr (lines joined by ` / `), or
/// nothing when it said nothing.
pub fn tail_text(tail: &[u8]) -> String {
    let text = String::from_utf8_lossy(tail);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {}", text.lines().collect::<Vec<_>>().join(" / "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &Command) -> Vec<String> {
        std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn agents() {
        assert_eq!(
            agent_argv(None, None).unwrap(),
            ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
        );
        assert_eq!(
            agent_argv(
                None,
                Some("/usr/bin/ssh  -i /k/id\t-o StrictHostKeyChecking=no")
            )
            .unwrap(),
            [
                "/usr/bin/ssh",
                "-i",
                "/k/id",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=5"
            ]
        );
        assert_eq!(
            agent_argv(Some("rsh -l me"), Some("ssh")).unwrap(),
            ["rsh", "-l", "me"]
        );
        assert!(agent_argv(Some("  "), None).is_err());
    }

    #[test]
    fn commands() {
        let argv: Vec<OsString> = ["/opt/my dir/gmpirun", PROXY_FLAG, "3", "4242", "10.0.0.1"]
            .map(OsString::from)
            .to_vec();
        let ssh = Starter::RemoteShell(vec!["ssh".into(), "-x".into()]);
        assert_eq!(
            words(&ssh.command("n1", &argv)),
            [
                "ssh",
                "-x",
                "n1",
                "exec '/opt/my dir/gmpirun' '--internal-proxy' '3' '4242' '10.0.0.1'"
            ]
        );
        assert_eq!(ssh.what(), "ssh");
        assert_eq!(
            words(&Starter::Local.command("localhost", &argv)),
            ["/opt/my dir/gmpirun", PROXY_FLAG, "3", "4242", "10.0.0.1"]
        );
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(tail_text(b"  \n"), "");
        assert_eq!(tail_text(b"a\nb\n"), ": a / b");
    }

    #[test]
    fn srun_commands() {
        let argv: Vec<OsString> = ["/opt/my dir/gmpirun", PROXY_FLAG, "1", "4242", "10.0.0.1"]
            .map(OsString::from)
            .to_vec();
        let srun = Starter::Srun(vec!["/usr/bin/srun".into()]);
        // No shell in between: every word reaches srun as it is, and the secret is not
        // among them (it goes through stdin).
        assert_eq!(
            words(&srun.command("node07", &argv)),
            [
                "/usr/bin/srun",
                "--nodes=1",
                "--ntasks=1",
                "--overlap",
                "--cpu-bind=none",
                "--kill-on-bad-exit=1",
                "--mpi=none",
                "--quiet",
                "--input=0",
                "--nodelist=node07",
                "/opt/my dir/gmpirun",
                PROXY_FLAG,
                "1",
                "4242",
                "10.0.0.1"
            ]
        );
        assert_eq!(srun.what(), "/usr/bin/srun");
    }
}
