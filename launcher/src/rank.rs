//! One rank's process, for the ranks of a host (`local.rs`): finding PROGRAM, the rank's
//! environment, spawning it with its PMI socketpair and pipes, the launcher's end of the
//! PMI socket (lines in, replies out); and the judgement of a rank's exit and of the
//! job ([`Outcome`]: the first failure decides), shared by the local job (`job.rs`) and
//! the root of a multi-host job (`cluster.rs`).

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use gmpi_pmi::wire::MAX_LINE_LEN;
use nix::errno::Errno;
use nix::unistd::{access, AccessFlags, Pid};

use crate::sys::{self, ExitKind};

/// Finds the file `execvp` would run, or the error it would give.
pub fn resolve_program(program: &OsStr, path_env: Option<&OsStr>) -> io::Result<PathBuf> {
    let check = |p: &Path| -> io::Result<()> {
        let meta = std::fs::metadata(p)?;
        if meta.is_dir() {
            return Err(Errno::EACCES.into());
        }
        access(p, AccessFlags::X_OK).map_err(io::Error::from)
    };
    if program.is_empty() {
        return Err(Errno::ENOENT.into());
    }
    if program.as_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        check(&p)?;
        return Ok(p);
    }
    let path = path_env.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    let mut denied = None;
    for dir in std::env::split_paths(path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        match check(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => denied = Some(e),
            Err(_) => {}
        }
    }
    Err(denied.unwrap_or_else(|| Errno::ENOENT.into()))
}

/// Where a rank sits in the job, for its environment.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    /// Global rank.
    pub rank: u32,
    /// Ranks in the job.
    pub size: u32,
    /// Rank among those of its host.
    pub local_rank: u32,
    /// Ranks on its host.
    pub local_size: u32,
    /// Its host's index in the job.
    pub node_id: u32,
    /// `GMPI_JOBID`.
    pub job_id: &'a str,
    /// `GMPI_JOB_SECRET`: the job secret in hex.
    pub secret_hex: &'a str,
    /// The CPUs it is bound to (`--bind-to`); `None`: gmpirun's own.
    pub cpus: Option<nix::sched::CpuSet>,
}

/// The environment gmpirun gives a rank, besides its own and `-x`.
pub fn rank_env(p: &Placement<'_>, pmi_fd: i32) -> Vec<(&'static str, String)> {
    let (r, n) = (p.rank.to_string(), p.size.to_string());
    let (lr, ln) = (p.local_rank.to_string(), p.local_size.to_string());
    vec![
        ("PMI_RANK", r.clone()),
        ("PMI_SIZE", n.clone()),
        ("PMI_FD", pmi_fd.to_string()),
        ("GMPI_RANK", r.clone()),
        ("GMPI_SIZE", n.clone()),
        ("GMPI_LOCAL_RANK", lr.clone()),
        ("GMPI_LOCAL_SIZE", ln.clone()),
        ("GMPI_JOBID", p.job_id.to_owned()),
        ("GMPI_JOB_SECRET", p.secret_hex.to_owned()),
        ("GMPI_NODE_ID", p.node_id.to_string()),
        ("OMPI_COMM_WORLD_RANK", r.clone()),
        ("OMPI_COMM_WORLD_SIZE", n.clone()),
        ("OMPI_COMM_WORLD_LOCAL_RANK", lr.clone()),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", ln.clone()),
        ("MPI_LOCALRANKID", lr.clone()),
        ("MPI_LOCALNRANKS", ln.clone()),
        ("LOCAL_RANK", lr.clone()),
        ("LOCAL_SIZE", ln),
        ("MV2_COMM_WORLD_RANK", r),
        ("MV2_COMM_WORLD_SIZE", n),
        ("MV2_COMM_WORLD_LOCAL_RANK", lr),
    ]
}

/// The task variables of a Slurm step, with the rank's values: a proxy started by
/// `srun` (one task of its own step) would otherwise pass on `SLURM_PROCID=0`,
/// `SLURM_NTASKS=1` and the like, which a program reading them would take for its own.
/// Only the variables `is_set` in the proxy's environment are returned (outside Slurm:
/// none).
pub fn slurm_task_env(
    p: &Placement<'_>,
    is_set: impl Fn(&str) -> bool,
) -> Vec<(&'static str, String)> {
    let (r, n) = (p.rank.to_string(), p.size.to_string());
    [
        ("SLURM_PROCID", r),
        ("SLURM_LOCALID", p.local_rank.to_string()),
        ("SLURM_NODEID", p.node_id.to_string()),
        ("SLURM_NTASKS", n.clone()),
        ("SLURM_NPROCS", n.clone()),
        ("SLURM_STEP_NUM_TASKS", n),
    ]
    .into_iter()
    .filter(|(k, _)| is_set(k))
    .collect()
}

/// What to start: PROGRAM (resolved), how it was named, its arguments, and the
/// variables set before the rank's own (`-x`, and on remote hosts gmpirun's).
#[derive(Debug, Clone, Copy)]
pub struct Program<'a> {
    /// The file to execute.
    pub path: &'a Path,
    /// `argv[0]`: PROGRAM as given.
    pub argv0: &'a OsStr,
    /// The arguments.
    pub args: &'a [OsString],
    /// Variables, applied in order.
    pub env: &'a [(String, OsString)],
}

/// A started rank: its pid (leader of its own process group) and the launcher's ends.
#[derive(Debug)]
pub struct Spawned {
    /// Process id.
    pub pid: Pid,
    /// The launcher's end of the PMI socketpair (non-blocking).
    pub pmi: PmiConn,
    /// Its stdout (non-blocking).
    pub stdout: ChildStdout,
    /// Its stderr (non-blocking).
    pub stderr: ChildStderr,
    /// Its stdin, when asked for (non-blocking); else it reads `/dev/null`.
    pub stdin: Option<ChildStdin>,
}

/// Starts one rank: its own process group, killed if the launcher dies, `PMI_FD` its
/// only inherited descriptor besides the three pipes.
pub fn spawn(prog: &Program<'_>, place: &Placement<'_>, with_stdin: bool) -> io::Result<Spawned> {
    let (ours, theirs) = sys::pmi_socketpair()?;
    let mut cmd = Command::new(prog.path);
    cmd.arg0(prog.argv0).args(prog.args);
    // A launcher that started gmpirun itself must not confuse the ranks.
    for var in ["PMI_PORT", "PMI_ID", "PMI_SPAWNED"] {
        cmd.env_remove(var);
    }
    for (k, v) in prog.env {
        cmd.env(k, v);
    }
    for (k, v) in rank_env(place, sys::raw(&theirs)) {
        cmd.env(k, v);
    }
    for (k, v) in slurm_task_env(place, |k| std::env::var_os(k).is_some()) {
        cmd.env(k, v);
    }
    cmd.stdin(if with_stdin {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    sys::prepare_child(&mut cmd, sys::raw(&theirs), place.cpus);
    let mut child = cmd.spawn()?;
    drop(theirs);
    let pid = Pid::from_raw(child.id() as i32);
    let stdout = child.stdout.take().expect("stdout was piped");
    let stderr = child.stderr.take().expect("stderr was piped");
    sys::set_nonblocking(&stdout)?;
    sys::set_nonblocking(&stderr)?;
    let stdin = child.stdin.take();
    if let Some(pipe) = &stdin {
        sys::set_nonblocking(pipe)?;
    }
    let sock = UnixStream::from(ours);
    sock.set_nonblocking(true)?;
    // `child` is dropped without waiting: the launcher reaps by pid with waitpid.
    Ok(Spawned {
        pid,
        pmi: PmiConn {
            sock,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
        },
        stdout,
        stderr,
        stdin,
    })
}

/// The launcher's end of one rank's PMI connection.
#[derive(Debug)]
pub struct PmiConn {
    /// The socket (non-blocking).
    pub sock: UnixStream,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
}

/// What [`PmiConn::read_lines`] found.
#[derive(Debug, Default)]
pub struct PmiInput {
    /// Complete lines, newline included.
    pub lines: Vec<Vec<u8>>,
    /// The rank closed its end (or the socket failed).
    pub closed: bool,
    /// An unfinished line is longer than the protocol allows.
    pub too_long: bool,
}

impl PmiConn {
    /// Reads what the rank sent and splits it into lines.
    pub fn read_lines(&mut self) -> PmiInput {
        let mut chunk = [0u8; 8192];
        let mut input = PmiInput::default();
        loop {
            match self.sock.read(&mut chunk) {
                Ok(0) => {
                    input.closed = true;
                    break;
                }
                Ok(n) => self.inbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    input.closed = true;
                    break;
                }
            }
        }
        while let Some(end) = self.inbuf.iter().position(|&b| b == b'\n') {
            input.lines.push(self.inbuf.drain(..=end).collect());
        }
        input.too_long = self.inbuf.len() > MAX_LINE_LEN;
        input
    }

    /// Queues a reply and writes what the socket takes.
    pub fn send(&mut self, line: &str) {
        self.outbuf.extend_from_slice(line.as_bytes());
        self.flush();
    }

    /// Whether replies are waiting for the socket to take them.
    pub fn wants_write(&self) -> bool {
        !self.outbuf.is_empty()
    }

    /// Writes queued replies until the socket would block.
    pub fn flush(&mut self) {
        while !self.outbuf.is_empty() {
            match self.sock.write(&self.outbuf) {
                Ok(n) => {
                    self.outbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    // The rank closed its end; its exit status will tell why.
                    self.outbuf.clear();
                    return;
                }
            }
        }
    }
}

/// What a rank's end means for the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing wrong.
    Fine,
    /// It exited 0 without initializing MPI: fine for a program that never uses MPI,
    /// fatal as soon as another rank initializes (they would wait for it forever).
    Uninitialized,
    /// The job fails with this exit status and message.
    Fail(i32, String),
}

/// Judges the end of `rank` (`pid`, on `host` when the job spans hosts).
/// `other_initialized` is some other rank that has initialized MPI, if any.
pub fn judge_exit(
    rank: u32,
    pid: Option<u32>,
    host: Option<&str>,
    status: ExitKind,
    initialized: bool,
    finalized: bool,
    other_initialized: Option<u32>,
) -> Verdict {
    let on = host.map(|h| format!(" on host {h}")).unwrap_or_default();
    let short = format!("rank {rank}{on}");
    let long = match pid {
        Some(pid) => format!("rank {rank} (pid {pid}{on})"),
        None => short.clone(),
    };
    match status {
        ExitKind::Code(0) if initialized && !finalized => {
            Verdict::Fail(1, format!("{short} exited without calling finalize"))
        }
        ExitKind::Code(0) if !initialized => match other_initialized {
            Some(other) => Verdict::Fail(
                1,
                format!("{long} exited without initializing MPI while rank {other} did"),
            ),
            None => Verdict::Uninitialized,
        },
        ExitKind::Code(0) => Verdict::Fine,
        ExitKind::Code(code) => Verdict::Fail(code, format!("{long} exited with status {code}")),
        ExitKind::Signal(sig) => {
            let name = nix::sys::signal::Signal::try_from(sig).map_or("unknown", |s| s.as_str());
            Verdict::Fail(
                128 + sig,
                format!("{long} was killed by signal {sig} ({name})"),
            )
        }
    }
}

/// How a job goes, by what its ranks did: the first failure fixes the exit status.
/// Kept by the local job and by the root of a multi-host job; each prints the messages
/// its own way.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Exit status fixed by the first failure.
    failure: Option<i32>,
    /// The first rank that exited 0 without ever initializing MPI: fatal as soon as
    /// any rank initializes.
    exited_uninit: Option<u32>,
}

impl Outcome {
    /// Whether the job has failed.
    pub fn failed(&self) -> bool {
        self.failure.is_some()
    }

    /// gmpirun's exit status: the first failure's, else 0.
    pub fn status(&self) -> i32 {
        self.failure.unwrap_or(0)
    }

    /// Records the failure `code` if it is the first; whether it was.
    pub fn fail(&mut self, code: i32) -> bool {
        if self.failure.is_some() {
            return false;
        }
        self.failure = Some(code);
        true
    }

    /// Takes in the verdict on `rank`'s exit: the failure it makes, if any.
    pub fn judged(&mut self, rank: u32, verdict: Verdict) -> Option<(i32, String)> {
        match verdict {
            Verdict::Fine => None,
            Verdict::Uninitialized => {
                self.exited_uninit.get_or_insert(rank);
                None
            }
            Verdict::Fail(code, msg) => Some((code, msg)),
        }
    }

    /// Rank `rank` initialized MPI: the failure it makes when a rank exited before
    /// without doing so (the others would wait for that one forever).
    pub fn initialized(&self, rank: u32) -> Option<(i32, String)> {
        let gone = self.exited_uninit?;
        Some((
            1,
            format!("rank {gone} exited without initializing MPI while rank {rank} did"),
        ))
    }
}

/// The failure a PMI abort of `rank` makes (`on`: ` on host X`, or empty): the low byte
/// of its code as exit status (1 for 0), and the message.
pub fn abort_failure(rank: u32, on: &str, code: i32, msg: &str) -> (i32, String) {
    let status = match code & 0xff {
        0 => 1,
        c => c,
    };
    let msg = if msg.is_empty() {
        String::new()
    } else {
        format!(": {msg}")
    };
    (
        status,
        format!("rank {rank}{on} called abort with code {code}{msg}"),
    )
}

/// What `--timeout` says: the limit and the ranks still running.
pub fn timeout_message(limit: Duration, running: &[u32]) -> String {
    let running: Vec<String> = running.iter().map(u32::to_string).collect();
    format!(
        "job timed out after {} s; ranks still running: {}",
        limit.as_secs_f64(),
        running.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_resolution() {
        assert!(resolve_program(OsStr::new("sh"), None).is_ok());
        let e = resolve_program(OsStr::new("no-such-program-gmpi"), None).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        let e = resolve_program(OsStr::new("/etc/passwd"), None).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EACCES));
        let e = resolve_program(OsStr::new("/tmp"), None).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EACCES));
    }

    #[test]
    fn exits_are_judged() {
        let v = |status, init, fin, other| judge_exit(3, Some(42), None, status, init, fin, other);
        assert_eq!(v(ExitKind::Code(0), true, true, None), Verdict::Fine);
        assert_eq!(
            v(ExitKind::Code(0), false, false, None),
            Verdict::Uninitialized
        );
        assert_eq!(
            v(ExitKind::Code(0), false, false, Some(1)),
            Verdict::Fail(
                1,
                "rank 3 (pid 42) exited without initializing MPI while rank 1 did".into()
            )
        );
        assert_eq!(
            v(ExitKind::Code(0), true, false, None),
            Verdict::Fail(1, "rank 3 exited without calling finalize".into())
        );
        assert_eq!(
            v(ExitKind::Code(4), true, false, None),
            Verdict::Fail(4, "rank 3 (pid 42) exited with status 4".into())
        );
        assert_eq!(
            judge_exit(
                3,
                Some(42),
                Some("n1"),
                ExitKind::Signal(9),
                true,
                false,
                None
            ),
            Verdict::Fail(
                137,
                "rank 3 (pid 42 on host n1) was killed by signal 9 (SIGKILL)".into()
            )
        );
    }

    #[test]
    fn the_first_failure_decides() {
        let mut o = Outcome::default();
        assert_eq!((o.failed(), o.status()), (false, 0));
        assert_eq!(o.judged(2, Verdict::Fine), None);
        assert_eq!(o.initialized(1), None);
        assert_eq!(o.judged(2, Verdict::Uninitialized), None);
        assert_eq!(o.judged(3, Verdict::Uninitialized), None);
        assert_eq!(
            o.initialized(1),
            Some((
                1,
                "rank 2 exited without initializing MPI while rank 1 did".into()
            ))
        );
        assert_eq!(
            o.judged(4, Verdict::Fail(9, "x".into())),
            Some((9, "x".into()))
        );
        assert!(o.fail(9));
        assert!(!o.fail(1));
        assert_eq!((o.failed(), o.status()), (true, 9));
    }

    #[test]
    fn aborts_and_timeouts_are_told() {
        assert_eq!(
            abort_failure(3, "", 256, ""),
            (1, "rank 3 called abort with code 256".into())
        );
        assert_eq!(
            abort_failure(3, " on host n1", 7, "bad input"),
            (
                7,
                "rank 3 on host n1 called abort with code 7: bad input".into()
            )
        );
        assert_eq!(
            timeout_message(Duration::from_millis(1500), &[0, 2]),
            "job timed out after 1.5 s; ranks still running: 0,2"
        );
    }

    #[test]
    fn rank_env_is_complete() {
        let place = Placement {
            rank: 5,
            size: 8,
            local_rank: 1,
            local_size: 2,
            node_id: 2,
            job_id: "00ff",
            secret_hex: "ab",
            cpus: None,
        };
        let env = rank_env(&place, 7);
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).unwrap().1.as_str();
        assert_eq!(get("PMI_FD"), "7");
        assert_eq!(get("GMPI_JOBID"), "00ff");
        assert_eq!(get("GMPI_JOB_SECRET"), "ab");
        assert_eq!(get("GMPI_RANK"), "5");
        assert_eq!(get("GMPI_NODE_ID"), "2");
        assert_eq!(get("MV2_COMM_WORLD_LOCAL_RANK"), "1");
        assert_eq!(get("OMPI_COMM_WORLD_SIZE"), "8");
        assert_eq!(get("LOCAL_SIZE"), "2");
        assert_eq!(env.len(), 21);
    }

    #[test]
    fn slurm_task_env_overwrites_only_what_the_step_set() {
        let place = Placement {
            rank: 5,
            size: 8,
            local_rank: 1,
            local_size: 2,
            node_id: 2,
            job_id: "00ff",
            secret_hex: "ab",
            cpus: None,
        };
        assert!(slurm_task_env(&place, |_| false).is_empty());
        let env = slurm_task_env(&place, |k| k != "SLURM_NPROCS");
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("SLURM_PROCID"), Some("5"));
        assert_eq!(get("SLURM_LOCALID"), Some("1"));
        assert_eq!(get("SLURM_NODEID"), Some("2"));
        assert_eq!(get("SLURM_NTASKS"), Some("8"));
        assert_eq!(get("SLURM_STEP_NUM_TASKS"), Some("8"));
        assert_eq!(get("SLURM_NPROCS"), None);
    }
}
