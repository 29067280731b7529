//! One local job: spawn the ranks, then a single-threaded `poll` loop until all is over.
//!
//! The loop watches a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP), every rank's PMI
//! socket (driving the sans-IO [`PmiServer`]), every rank's stdout and stderr pipe, and
//! gmpirun's stdin (forwarded to rank 0). It never spins: it blocks in `poll` until an
//! event or the next deadline, and never sleeps less than [`MIN_TICK`].
//!
//! Phases: `Running` until every rank has exited or one fails. The first failure prints
//! one message and fixes the exit status; then (and also after a clean finish, to sweep
//! up whatever the ranks left running) `Ending`: SIGTERM to every rank's process group,
//! SIGKILL after [`TERM_GRACE`], until every rank is reaped and every group is gone;
//! then the output pipes are drained (at most [`DRAIN_GRACE`]), partial lines flushed,
//! and the job's `/dev/shm/gmpi-<jobid>*` files removed.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{ChildStderr, ChildStdin, ChildStdout};
use std::time::{Duration, Instant};

use gmpi_pmi::wire::MAX_LINE_LEN;
use gmpi_pmi::{PmiServer, ServerOutput};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags};
use nix::sys::signal::Signal;
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::control::ExitKind;
use crate::output::LineForwarder;
use crate::rank::{self, forward, judge_exit, PmiConn, Verdict};
use crate::sys;

/// Time between SIGTERM and SIGKILL when ending a job.
pub const TERM_GRACE: Duration = Duration::from_millis(500);
/// How long to wait, once everything is reaped, for output pipes still held open by
/// processes that escaped their group.
pub const DRAIN_GRACE: Duration = Duration::from_millis(300);
/// After SIGKILL, how long to wait for the last processes before giving up on them.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// Shortest `poll` timeout, so gmpirun never busy-waits.
pub const MIN_TICK: Duration = Duration::from_millis(50);
/// Exit status when PROGRAM cannot be started.
pub const EXIT_CANNOT_START: i32 = 127;
/// Exit status after `--timeout`.
pub const EXIT_TIMEOUT: i32 = 124;

/// What to run.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// PROGRAM as given on the command line.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Number of ranks (at least 1).
    pub np: u32,
    /// `-x` variables, applied before the job's own variables.
    pub exports: Vec<(String, OsString)>,
    /// `--tag-output`.
    pub tag_output: bool,
    /// `--timeout`.
    pub timeout: Option<Duration>,
}

/// Runs the job to its end and returns gmpirun's exit status.
pub fn run(spec: &JobSpec) -> i32 {
    let path_env = spec
        .exports
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("PATH"));
    let program = match rank::resolve_program(&spec.program, path_env.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "gmpirun: cannot start {}: {e}",
                spec.program.to_string_lossy()
            );
            return EXIT_CANNOT_START;
        }
    };
    let (job_id, secret) = match crate::control::new_job_identity() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("gmpirun: {e}");
            return 1;
        }
    };
    let secret = secret.to_hex();
    let signals = match sys::signal_fd() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gmpirun: cannot set up signal handling: {e}");
            return 1;
        }
    };
    sys::become_subreaper();

    let mut job = Job::new(spec, job_id, secret, signals);
    job.spawn_all(&program);
    job.event_loop();
    job.finish()
}

/// One forwarded output pipe.
#[derive(Debug)]
struct OutPipe<P> {
    pipe: P,
    fwd: LineForwarder,
}

/// One rank's process and its connections.
#[derive(Debug)]
struct RankProc {
    pid: Pid,
    exited: bool,
    pmi: Option<PmiConn>,
    stdout: Option<OutPipe<ChildStdout>>,
    stderr: Option<OutPipe<ChildStderr>>,
}

/// gmpirun's stdin, forwarded to rank 0.
#[derive(Debug, Default)]
struct StdinFwd {
    /// Still reading gmpirun's stdin.
    open: bool,
    /// Rank 0's stdin pipe, while it is open.
    pipe: Option<ChildStdin>,
    /// Read but not yet written to the pipe.
    buf: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    Ending {
        kill_at: Instant,
        killed: bool,
        give_up_at: Option<Instant>,
    },
    Draining {
        until: Instant,
    },
    Done,
}

/// What a `poll` entry stands for.
#[derive(Debug, Clone, Copy)]
enum Token {
    Signal,
    Stdin,
    StdinPipe,
    Pmi(usize),
    Stdout(usize),
    Stderr(usize),
}

#[derive(Debug)]
struct Job<'a> {
    spec: &'a JobSpec,
    job_id: String,
    /// The job secret in hex (`GMPI_JOB_SECRET`).
    secret: String,
    signals: SignalFd,
    server: PmiServer,
    ranks: Vec<RankProc>,
    by_pid: HashMap<Pid, usize>,
    stdin: StdinFwd,
    phase: Phase,
    /// Exit status fixed by the first failure.
    failure: Option<i32>,
    /// The first rank that exited successfully without ever initializing
    /// MPI: fatal as soon as any rank initializes.
    exited_uninit: Option<u32>,
    started: Instant,
    /// No child process of gmpirun remains (waitpid said ECHILD).
    no_children: bool,
}

impl<'a> Job<'a> {
    fn new(spec: &'a JobSpec, job_id: String, secret: String, signals: SignalFd) -> Self {
        let kvsname = format!("gmpi_{job_id}");
        Self {
            spec,
            server: PmiServer::new(spec.np, kvsname, 0, spec.np),
            job_id,
            secret,
            signals,
            ranks: Vec::new(),
            by_pid: HashMap::new(),
            stdin: StdinFwd::default(),
            phase: Phase::Running,
            failure: None,
            exited_uninit: None,
            started: Instant::now(),
            no_children: false,
        }
    }

    // ---- start-up -------------------------------------------------------------------

    fn spawn_all(&mut self, program: &Path) {
        for r in 0..self.spec.np {
            if let Err(e) = self.spawn_rank(r, program) {
                self.fail(
                    EXIT_CANNOT_START,
                    format!("cannot start {}: {e}", self.spec.program.to_string_lossy()),
                );
                return;
            }
        }
        self.started = Instant::now();
    }

    fn spawn_rank(&mut self, r: u32, program: &Path) -> io::Result<()> {
        let n = self.spec.np;
        let prog = rank::Program {
            path: program,
            argv0: &self.spec.program,
            args: &self.spec.args,
            env: &self.spec.exports,
        };
        let place = rank::Placement {
            rank: r,
            size: n,
            local_rank: r,
            local_size: n,
            node_id: 0,
            job_id: &self.job_id,
            secret_hex: &self.secret,
        };
        let child = rank::spawn(&prog, &place, r == 0)?;
        if let Some(pipe) = child.stdin {
            self.stdin = StdinFwd {
                open: true,
                pipe: Some(pipe),
                buf: Vec::new(),
            };
        }
        let tag = self.spec.tag_output;
        self.by_pid.insert(child.pid, self.ranks.len());
        self.ranks.push(RankProc {
            pid: child.pid,
            exited: false,
            pmi: Some(child.pmi),
            stdout: Some(OutPipe {
                pipe: child.stdout,
                fwd: LineForwarder::new(r, tag),
            }),
            stderr: Some(OutPipe {
                pipe: child.stderr,
                fwd: LineForwarder::new(r, tag),
            }),
        });
        Ok(())
    }

    // ---- the loop -------------------------------------------------------------------

    fn event_loop(&mut self) {
        while self.phase != Phase::Done {
            let timeout = self.poll_timeout();
            let ready = match self.poll_once(timeout) {
                Ok(ready) => ready,
                Err(e) => {
                    eprintln!("gmpirun: poll failed: {e}; ending the job");
                    self.fail(1, String::new());
                    Vec::new()
                }
            };
            for (token, revents) in ready {
                self.dispatch(token, revents);
            }
            self.reap();
            self.advance(Instant::now());
        }
    }

    /// Polls every open descriptor; returns the ready ones.
    fn poll_once(&self, timeout: Option<Duration>) -> nix::Result<Vec<(Token, PollFlags)>> {
        let input = PollFlags::POLLIN;
        let mut tokens = vec![Token::Signal];
        let mut fds = vec![PollFd::new(self.signals.as_fd(), input)];
        let stdin = io::stdin();
        if let Some(pipe) = &self.stdin.pipe {
            if !self.stdin.buf.is_empty() {
                tokens.push(Token::StdinPipe);
                fds.push(PollFd::new(pipe.as_fd(), PollFlags::POLLOUT));
            } else if self.stdin.open && self.phase == Phase::Running {
                tokens.push(Token::Stdin);
                fds.push(PollFd::new(stdin.as_fd(), input));
            }
        }
        for (i, rank) in self.ranks.iter().enumerate() {
            if let Some(pmi) = &rank.pmi {
                let mut flags = input;
                if pmi.wants_write() {
                    flags |= PollFlags::POLLOUT;
                }
                tokens.push(Token::Pmi(i));
                fds.push(PollFd::new(pmi.sock.as_fd(), flags));
            }
            if let Some(out) = &rank.stdout {
                tokens.push(Token::Stdout(i));
                fds.push(PollFd::new(out.pipe.as_fd(), input));
            }
            if let Some(err) = &rank.stderr {
                tokens.push(Token::Stderr(i));
                fds.push(PollFd::new(err.pipe.as_fd(), input));
            }
        }
        sys::poll_tokens(tokens, &mut fds, timeout)
    }

    /// Time until the next deadline (never under [`MIN_TICK`]); `None` blocks.
    fn poll_timeout(&self) -> Option<Duration> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        match self.phase {
            Phase::Running => consider(self.spec.timeout.map(|t| self.started + t)),
            // Groups may empty without a SIGCHLD to us: look again every tick.
            Phase::Ending { .. } => consider(Some(now)),
            Phase::Draining { until } => consider(Some(until)),
            Phase::Done => {}
        }
        for rank in &self.ranks {
            consider(rank.stdout.as_ref().and_then(|o| o.fwd.flush_deadline()));
            consider(rank.stderr.as_ref().and_then(|o| o.fwd.flush_deadline()));
        }
        next.map(|t| t.saturating_duration_since(now).max(MIN_TICK))
    }

    fn dispatch(&mut self, token: Token, revents: PollFlags) {
        match token {
            Token::Signal => self.read_signals(),
            Token::Stdin => self.read_stdin(),
            Token::StdinPipe => self.write_stdin_pipe(),
            Token::Pmi(i) => {
                if revents.intersects(PollFlags::POLLOUT) {
                    self.flush_pmi(i);
                }
                if revents.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                    self.read_pmi(i);
                }
            }
            Token::Stdout(i) => self.read_stdout(i),
            Token::Stderr(i) => self.read_stderr(i),
        }
    }

    // ---- signals and children -------------------------------------------------------

    fn read_signals(&mut self) {
        while let Ok(Some(info)) = self.signals.read_signal() {
            let signo = info.ssi_signo as i32;
            match Signal::try_from(signo) {
                Ok(Signal::SIGCHLD) | Err(_) => {}
                Ok(sig) => {
                    if self.failure.is_none() {
                        self.fail(128 + signo, format!("received {}", sig.as_str()));
                    } else if let Phase::Ending { kill_at, .. } = &mut self.phase {
                        // Asked again: stop waiting politely.
                        *kill_at = Instant::now();
                    }
                }
            }
        }
    }

    /// Reaps every child that has exited.
    fn reap(&mut self) {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => return,
                Ok(status) => {
                    let Some(pid) = status.pid() else { return };
                    if let Some(&i) = self.by_pid.get(&pid) {
                        self.rank_exited(i, status);
                    }
                }
                Err(Errno::EINTR) => {}
                Err(_) => {
                    // ECHILD: nothing left to wait for.
                    self.no_children = true;
                    return;
                }
            }
        }
    }

    fn rank_exited(&mut self, i: usize, status: WaitStatus) {
        self.ranks[i].exited = true;
        // What the rank wrote before dying is all readable now: take it into account
        // before judging (an abort line, its last output).
        self.read_pmi(i);
        self.read_stdout(i);
        self.read_stderr(i);
        if self.failure.is_some() || self.phase != Phase::Running {
            return;
        }
        let Some(status) = ExitKind::from_wait(&status) else {
            return;
        };
        let rank = i as u32;
        let pid = self.ranks[i].pid.as_raw() as u32;
        let other = (0..self.server.size()).find(|&r| r != rank && self.server.is_initialized(r));
        match judge_exit(
            rank,
            Some(pid),
            None,
            status,
            self.server.is_initialized(rank),
            self.server.is_finalized(rank),
            other,
        ) {
            Verdict::Fine => {}
            Verdict::Uninitialized => {
                self.exited_uninit.get_or_insert(rank);
            }
            Verdict::Fail(code, msg) => self.fail(code, msg),
        }
    }

    /// Records the first failure: one message, the exit status, and the job starts ending.
    fn fail(&mut self, code: i32, what: String) {
        if self.failure.is_some() {
            return;
        }
        if !what.is_empty() {
            eprintln!("gmpirun: {what}; ending the job");
        }
        self.failure = Some(code);
        if self.phase == Phase::Running {
            self.start_ending(Instant::now());
        }
    }

    fn start_ending(&mut self, now: Instant) {
        self.stdin.pipe = None;
        self.stdin.open = false;
        for rank in &self.ranks {
            sys::signal_group(rank.pid, Signal::SIGTERM);
        }
        self.phase = Phase::Ending {
            kill_at: now + TERM_GRACE,
            killed: false,
            give_up_at: None,
        };
    }

    /// Moves between phases on time and on what is left.
    fn advance(&mut self, now: Instant) {
        for rank in &mut self.ranks {
            if let Some(o) = &mut rank.stdout {
                o.fwd.flush_if_quiet(now, &mut io::stdout());
            }
            if let Some(o) = &mut rank.stderr {
                o.fwd.flush_if_quiet(now, &mut io::stderr());
            }
        }
        match self.phase {
            Phase::Running => {
                if let Some(limit) = self.spec.timeout {
                    if now >= self.started + limit {
                        let running: Vec<String> = self
                            .ranks
                            .iter()
                            .enumerate()
                            .filter(|(_, r)| !r.exited)
                            .map(|(i, _)| i.to_string())
                            .collect();
                        eprintln!(
                            "gmpirun: job timed out after {} s; ranks still running: {}",
                            limit.as_secs_f64(),
                            running.join(",")
                        );
                        self.fail(EXIT_TIMEOUT, String::new());
                        return;
                    }
                }
                if self.ranks.iter().all(|r| r.exited) {
                    // Clean finish: still sweep up anything the ranks left behind.
                    self.start_ending(now);
                    self.advance(now);
                }
            }
            Phase::Ending {
                kill_at,
                killed,
                give_up_at,
            } => {
                let ranks_gone = self.ranks.iter().all(|r| r.exited);
                let groups_gone = !self.ranks.iter().any(|r| sys::group_exists(r.pid));
                if ranks_gone && groups_gone && self.no_children {
                    self.phase = Phase::Draining {
                        until: now + DRAIN_GRACE,
                    };
                    self.advance(now);
                } else if !killed && now >= kill_at {
                    for rank in &self.ranks {
                        sys::signal_group(rank.pid, Signal::SIGKILL);
                    }
                    sys::kill_children(Signal::SIGKILL);
                    self.phase = Phase::Ending {
                        kill_at,
                        killed: true,
                        give_up_at: Some(now + KILL_GRACE),
                    };
                } else if give_up_at.is_some_and(|t| now >= t) {
                    eprintln!("gmpirun: warning: some processes of the job could not be ended");
                    self.phase = Phase::Draining {
                        until: now + DRAIN_GRACE,
                    };
                }
            }
            Phase::Draining { until } => {
                let open = self
                    .ranks
                    .iter()
                    .any(|r| r.stdout.is_some() || r.stderr.is_some());
                if !open || now >= until {
                    self.phase = Phase::Done;
                }
            }
            Phase::Done => {}
        }
    }

    /// Flushes what is held, removes the job's shared-memory files, gives the status.
    fn finish(mut self) -> i32 {
        for rank in &mut self.ranks {
            if let Some(o) = &mut rank.stdout {
                o.fwd.finish(&mut io::stdout());
            }
            if let Some(o) = &mut rank.stderr {
                o.fwd.finish(&mut io::stderr());
            }
        }
        sys::remove_shm_segments(&format!("gmpi-{}", self.job_id));
        self.failure.unwrap_or(0)
    }

    // ---- PMI ------------------------------------------------------------------------

    fn read_pmi(&mut self, i: usize) {
        let Some(pmi) = &mut self.ranks[i].pmi else {
            return;
        };
        let input = pmi.read_lines();
        if input.closed || input.too_long {
            self.ranks[i].pmi = None;
        }
        for line in input.lines {
            self.handle_pmi_line(i, &line);
        }
        if input.too_long {
            self.fail(
                1,
                format!(
                    "rank {i} sent a malformed PMI message: line longer than {MAX_LINE_LEN} bytes"
                ),
            );
        }
    }

    fn handle_pmi_line(&mut self, i: usize, line: &[u8]) {
        if self.phase != Phase::Running {
            return;
        }
        for out in self.server.handle(i as u32, line) {
            match out {
                ServerOutput::Reply { rank, line } => {
                    if let Some(pmi) = &mut self.ranks[rank as usize].pmi {
                        pmi.send(&line);
                    }
                }
                ServerOutput::Abort { rank, code, msg } => {
                    let status = match code & 0xff {
                        0 => 1,
                        c => c,
                    };
                    let msg = if msg.is_empty() {
                        String::new()
                    } else {
                        format!(": {msg}")
                    };
                    self.fail(
                        status,
                        format!("rank {rank} called abort with code {code}{msg}"),
                    );
                }
                ServerOutput::ProtocolError { rank, error } => self.fail(
                    1,
                    format!("rank {rank} sent a malformed PMI message: {error}"),
                ),
                ServerOutput::Initialized { rank } => {
                    if let Some(gone) = self.exited_uninit {
                        self.fail(
                            1,
                            format!(
                                "rank {gone} exited without initializing MPI while rank {rank} did"
                            ),
                        );
                    }
                }
                // Kept in the server's state; judged when the rank exits.
                _ => {}
            }
        }
    }

    fn flush_pmi(&mut self, i: usize) {
        if let Some(pmi) = &mut self.ranks[i].pmi {
            pmi.flush();
        }
    }

    // ---- output and input -----------------------------------------------------------

    fn read_stdout(&mut self, i: usize) {
        if let Some(out) = &mut self.ranks[i].stdout {
            if forward(&mut out.pipe, &mut out.fwd, &mut io::stdout()) {
                self.ranks[i].stdout = None;
            }
        }
    }

    fn read_stderr(&mut self, i: usize) {
        if let Some(out) = &mut self.ranks[i].stderr {
            if forward(&mut out.pipe, &mut out.fwd, &mut io::stderr()) {
                self.ranks[i].stderr = None;
            }
        }
    }

    fn read_stdin(&mut self) {
        let mut chunk = vec![0u8; 65536];
        match nix::unistd::read(io::stdin().as_fd(), &mut chunk) {
            Ok(0) => self.stdin.open = false,
            Ok(n) => {
                self.stdin.buf.extend_from_slice(&chunk[..n]);
                self.write_stdin_pipe();
            }
            Err(Errno::EINTR | Errno::EAGAIN) => {}
            // Closed or unreadable stdin: rank 0 simply sees end of file.
            Err(_) => self.stdin.open = false,
        }
        if !self.stdin.open && self.stdin.buf.is_empty() {
            self.stdin.pipe = None;
        }
    }

    fn write_stdin_pipe(&mut self) {
        let Some(pipe) = &mut self.stdin.pipe else {
            return;
        };
        while !self.stdin.buf.is_empty() {
            match pipe.write(&self.stdin.buf) {
                Ok(n) => {
                    self.stdin.buf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    // Rank 0 closed its stdin: stop forwarding.
                    self.stdin = StdinFwd::default();
                    return;
                }
            }
        }
        if !self.stdin.open {
            self.stdin.pipe = None;
        }
    }
}
