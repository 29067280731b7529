//! One local job: every rank on this node, no proxies.
//!
//! The ranks are [`LocalRanks`] (`local.rs`: their processes, PMI sockets, output pipes
//! and their ending), served the whole job's PMI (`PmiServer::new`); the loop is the
//! reactor's (`reactor.rs`). What is the job's own: gmpirun's stdin, forwarded to rank
//! 0; the ranks' output, forwarded line by line to gmpirun's stdout and stderr
//! (`output.rs`); and the judgement of what they do. The first failure (a failing exit,
//! an abort, a malformed PMI message, a signal, `--timeout`) prints one message, fixes
//! the exit status and ends the ranks; a clean finish (every rank exited) ends them too,
//! to sweep up whatever they left running. Once they are ended and their output
//! drained, partial lines are flushed.

use std::ffi::OsString;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use gmpi_pmi::wire::MAX_LINE_LEN;
use gmpi_pmi::{PmiServer, ServerOutput};
use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::control::Stream;
use crate::local::{self, LocalRanks, Owner};
use crate::output::LineForwarder;
use crate::rank::{self, Outcome};
use crate::reactor::{Deadlines, Handler, PollSet, Reactor};
use crate::sys::ExitKind;

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
    let mut reactor = match Reactor::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gmpirun: cannot set up signal handling: {e}");
            return 1;
        }
    };
    let mut job = Job::new(spec, job_id, secret.to_hex());
    job.spawn_all(&program);
    reactor.run(&mut job);
    job.finish()
}

/// What a `poll` entry stands for.
#[derive(Debug, Clone, Copy)]
enum Token {
    /// gmpirun's stdin.
    Stdin,
    Ranks(local::Token),
}

#[derive(Debug)]
struct Job<'a> {
    spec: &'a JobSpec,
    job_id: String,
    /// The job secret in hex (`GMPI_JOB_SECRET`).
    secret: String,
    ranks: LocalRanks,
    listener: Listener,
    stdin: io::Stdin,
    started: Instant,
}

/// What the job makes of what its ranks do: their output, line by line, and how the
/// job goes.
#[derive(Debug)]
struct Listener {
    /// Per rank: stdout and stderr.
    out: Vec<(LineForwarder, LineForwarder)>,
    outcome: Outcome,
}

impl Listener {
    /// Records the first failure: one message (unless `what` is empty) and the exit
    /// status.
    fn fail(&mut self, code: i32, what: String) {
        if self.outcome.fail(code) && !what.is_empty() {
            eprintln!("gmpirun: {what}; ending the job");
        }
    }
}

impl Owner for Listener {
    fn serving(&self) -> bool {
        !self.outcome.failed()
    }

    fn pmi(&mut self, event: ServerOutput) {
        let (code, what) = match event {
            ServerOutput::Abort { rank, code, msg } => rank::abort_failure(rank, "", code, &msg),
            ServerOutput::ProtocolError { rank, error } => (
                1,
                format!("rank {rank} sent a malformed PMI message: {error}"),
            ),
            ServerOutput::Initialized { rank } => match self.outcome.initialized(rank) {
                Some(failure) => failure,
                None => return,
            },
            // Kept in the server's state; judged when the rank exits.
            _ => return,
        };
        self.fail(code, what);
    }

    fn pmi_too_long(&mut self, rank: u32) {
        self.fail(
            1,
            format!(
                "rank {rank} sent a malformed PMI message: line longer than {MAX_LINE_LEN} bytes"
            ),
        );
    }

    fn output(&mut self, rank: u32, stream: Stream, data: &[u8]) {
        let (o, e) = &mut self.out[rank as usize];
        match stream {
            Stream::Stdout => o.push(data, &mut io::stdout()),
            Stream::Stderr => e.push(data, &mut io::stderr()),
        }
    }

    fn output_closed(&mut self, rank: u32, stream: Stream) {
        let (o, e) = &mut self.out[rank as usize];
        match stream {
            Stream::Stdout => o.finish(&mut io::stdout()),
            Stream::Stderr => e.finish(&mut io::stderr()),
        }
    }

    fn exited(&mut self, rank: u32, pid: Pid, how: ExitKind, server: &PmiServer) {
        if self.outcome.failed() {
            return;
        }
        let verdict = local::judge(server, rank, pid, how);
        if let Some((code, what)) = self.outcome.judged(rank, verdict) {
            self.fail(code, what);
        }
    }
}

impl<'a> Job<'a> {
    fn new(spec: &'a JobSpec, job_id: String, secret: String) -> Self {
        let server = PmiServer::new(spec.np, format!("gmpi_{job_id}"), 0, spec.np);
        let tag = spec.tag_output;
        Self {
            spec,
            ranks: LocalRanks::new("gmpirun".to_owned(), job_id.clone(), server),
            job_id,
            secret,
            listener: Listener {
                out: (0..spec.np)
                    .map(|r| (LineForwarder::new(r, tag), LineForwarder::new(r, tag)))
                    .collect(),
                outcome: Outcome::default(),
            },
            stdin: io::stdin(),
            started: Instant::now(),
        }
    }

    fn spawn_all(&mut self, program: &Path) {
        let n = self.spec.np;
        let prog = rank::Program {
            path: program,
            argv0: &self.spec.program,
            args: &self.spec.args,
            env: &self.spec.exports,
        };
        let host = crate::sys::hostname();
        let binder = crate::bind::Binder::for_host(&self.spec.exports, n, &host);
        for r in 0..n {
            let place = rank::Placement {
                rank: r,
                size: n,
                local_rank: r,
                local_size: n,
                node_id: 0,
                job_id: &self.job_id,
                secret_hex: &self.secret,
                cpus: binder.apply(r, r, &host),
            };
            if let Err(e) = self.ranks.spawn(&prog, &place) {
                self.fail(
                    EXIT_CANNOT_START,
                    format!("cannot start {}: {e}", self.spec.program.to_string_lossy()),
                );
                return;
            }
        }
        self.started = Instant::now();
    }

    /// Records the first failure, and the ranks start ending.
    fn fail(&mut self, code: i32, what: String) {
        self.listener.fail(code, what);
        self.settle();
    }

    /// After a failure (however it was found), the ranks end.
    fn settle(&mut self) {
        if self.listener.outcome.failed() && self.ranks.running() {
            self.ranks.start_ending(Instant::now());
        }
    }

    fn read_stdin(&mut self) {
        let mut chunk = vec![0u8; 65536];
        match nix::unistd::read(self.stdin.as_fd(), &mut chunk) {
            Ok(0) => self.ranks.stdin_end(),
            Ok(n) => self.ranks.stdin_data(&chunk[..n], &mut self.listener),
            Err(Errno::EINTR | Errno::EAGAIN) => {}
            // Closed or unreadable stdin: rank 0 simply sees end of file.
            Err(_) => self.ranks.stdin_end(),
        }
    }

    /// Flushes what is held and gives the exit status.
    fn finish(mut self) -> i32 {
        for (o, e) in &mut self.listener.out {
            o.finish(&mut io::stdout());
            e.finish(&mut io::stderr());
        }
        self.listener.outcome.status()
    }
}

impl Handler for Job<'_> {
    type Token = Token;

    fn finished(&self) -> bool {
        self.ranks.done()
    }

    fn watch<'a>(&'a self, set: &mut PollSet<'a, Token>) {
        if self.ranks.stdin_wanted() {
            set.read(Token::Stdin, self.stdin.as_fd());
        }
        self.ranks.watch(set, Token::Ranks, true);
    }

    fn deadlines(&self, next: &mut Deadlines) {
        if self.ranks.running() {
            next.at_opt(self.spec.timeout.map(|t| self.started + t));
        }
        self.ranks.deadlines(next);
        for (o, e) in &self.listener.out {
            next.at_opt(o.flush_deadline());
            next.at_opt(e.flush_deadline());
        }
    }

    fn signal(&mut self, sig: Signal) {
        if !self.listener.outcome.failed() {
            self.fail(128 + sig as i32, format!("received {}", sig.as_str()));
        } else {
            // Asked again: stop waiting politely.
            self.ranks.end(Instant::now());
        }
    }

    fn ready(&mut self, token: Token, events: PollFlags) {
        match token {
            Token::Stdin => self.read_stdin(),
            Token::Ranks(t) => self.ranks.ready(t, events, &mut self.listener),
        }
        self.settle();
    }

    fn reaped(&mut self, pid: Pid, how: ExitKind) {
        self.ranks.reaped(pid, how, &mut self.listener);
        self.settle();
    }

    fn poll_failed(&mut self, error: Errno) {
        eprintln!("gmpirun: poll failed: {error}; ending the job");
        self.fail(1, String::new());
    }

    fn advance(&mut self, now: Instant) {
        for (o, e) in &mut self.listener.out {
            o.flush_if_quiet(now, &mut io::stdout());
            e.flush_if_quiet(now, &mut io::stderr());
        }
        if self.ranks.running() {
            let limit = self.spec.timeout;
            if let Some(limit) = limit.filter(|&l| now >= self.started + l) {
                let running = self.ranks.not_exited();
                eprintln!("gmpirun: {}", rank::timeout_message(limit, &running));
                self.fail(EXIT_TIMEOUT, String::new());
            } else if self.ranks.all_exited() {
                // Clean finish: still sweep up anything the ranks left behind.
                self.ranks.start_ending(now);
            }
        }
        self.ranks.advance(now, &[]);
    }
}
