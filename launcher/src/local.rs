//! The ranks of this host: every rank of a local job (`job.rs`), or a host's share of a
//! multi-host job under its proxy (`proxy.rs`).
//!
//! [`LocalRanks`] owns each rank's process (spawned by `rank.rs`: leader of its own
//! process group), the launcher's end of its PMI socket, its stdout and stderr pipes and
//! rank 0's stdin pipe. It serves PMI with one `PmiServer` (the whole job's on one node,
//! this host's share under a proxy) and writes the replies itself; the rest goes to its
//! [`Owner`]: the other PMI events, output as it is read (a bounded amount per turn, so
//! one chatty rank cannot starve the others), what rank 0 took of its stdin, and each
//! exit, once the rank's last PMI lines and output have been taken in. What the owner
//! makes of it differs: the local job forwards output line by line and judges exits
//! ([`judge`]); a proxy reports everything to the root.
//!
//! The ending ([`LocalRanks::start_ending`]): PMI is no longer served and rank 0's stdin
//! is closed; SIGTERM to every rank's process group, SIGKILL to the groups and to the
//! stray children (orphans of the ranks: gmpirun is their subreaper) after
//! [`TERM_GRACE`], a warning if some are still there [`KILL_GRACE`] later. Once every
//! rank is reaped, every group is empty and no stray child is left, the output pipes are
//! drained (at most [`DRAIN_GRACE`]: processes that escaped their group may hold them
//! open), and the job's `/dev/shm/gmpi-<jobid>*` files on this host are removed.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::process::{ChildStderr, ChildStdin, ChildStdout};
use std::time::{Duration, Instant};

use gmpi_pmi::{PmiServer, ServerOutput};
use nix::poll::PollFlags;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::control::Stream;
use crate::rank::{self, judge_exit, PmiConn, Verdict};
use crate::reactor::{Deadlines, PollSet};
use crate::sys::{self, ExitKind};

/// Time between SIGTERM and SIGKILL when ending the ranks.
pub const TERM_GRACE: Duration = Duration::from_millis(500);
/// How long to wait, once everything is reaped, for output pipes still held open by
/// processes that escaped their group.
pub const DRAIN_GRACE: Duration = Duration::from_millis(300);
/// After SIGKILL, how long to wait for the last processes before giving up on them.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// Reads of one output pipe per event, and their size.
const READS_PER_EVENT: usize = 16;
const READ_CHUNK: usize = 65536;

/// What the ranks do, for whoever runs them (see the module documentation).
pub trait Owner {
    /// Whether PMI requests are still served; an owner may stop them at once (its
    /// first failure), before it ends the ranks.
    fn serving(&self) -> bool {
        true
    }

    /// A PMI event other than a reply (replies go straight to the ranks).
    fn pmi(&mut self, event: ServerOutput);

    /// Rank `rank` sent a PMI line longer than the protocol allows; its PMI connection
    /// is closed.
    fn pmi_too_long(&mut self, rank: u32);

    /// Rank `rank` wrote `data` to `stream`.
    fn output(&mut self, rank: u32, stream: Stream, data: &[u8]);

    /// Rank `rank`'s `stream` ended.
    fn output_closed(&mut self, _rank: u32, _stream: Stream) {}

    /// Rank 0's stdin took `bytes` (or they were dropped: no rank 0 here, or its stdin
    /// closed); `closed` when it closed its stdin now.
    fn stdin_taken(&mut self, _bytes: usize, _closed: bool) {}

    /// Rank `rank` (process `pid`) ended `how`; `server` tells how far it got with PMI.
    fn exited(&mut self, rank: u32, pid: Pid, how: ExitKind, server: &PmiServer);
}

/// Judges the end of `rank` as a job on one node does: by what `server` (the whole
/// job's) saw of it and of the others.
pub fn judge(server: &PmiServer, rank: u32, pid: Pid, how: ExitKind) -> Verdict {
    let other = (0..server.size()).find(|&r| r != rank && server.is_initialized(r));
    judge_exit(
        rank,
        Some(pid.as_raw() as u32),
        None,
        how,
        server.is_initialized(rank),
        server.is_finalized(rank),
        other,
    )
}

/// A descriptor of the ranks, for the owner's poll set.
#[derive(Debug, Clone, Copy)]
pub enum Token {
    /// The PMI socket of the rank at this index.
    Pmi(usize),
    /// An output pipe of the rank at this index.
    Output(usize, Stream),
    /// Rank 0's stdin pipe, while bytes wait for it.
    Stdin,
}

/// One rank of this host.
#[derive(Debug)]
struct Rank {
    rank: u32,
    pid: Pid,
    exited: bool,
    pmi: Option<PmiConn>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

impl Rank {
    fn output(&mut self, stream: Stream) -> Option<&mut dyn Read> {
        match stream {
            Stream::Stdout => self.stdout.as_mut().map(|p| p as &mut dyn Read),
            Stream::Stderr => self.stderr.as_mut().map(|p| p as &mut dyn Read),
        }
    }

    fn close_output(&mut self, stream: Stream) {
        match stream {
            Stream::Stdout => self.stdout = None,
            Stream::Stderr => self.stderr = None,
        }
    }
}

/// Rank 0's stdin (when it runs here).
#[derive(Debug, Default)]
struct Rank0Stdin {
    pipe: Option<ChildStdin>,
    /// Given but not yet written.
    buf: Vec<u8>,
    /// Its end was given: the pipe closes once `buf` is written.
    eof: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// Stopping the ranks.
    Ending {
        kill_at: Instant,
        killed: bool,
        give_up_at: Option<Instant>,
    },
    /// Ranks gone; reading the rest of their output.
    Draining {
        until: Instant,
    },
    /// Ended, and the job's shared-memory files removed.
    Done,
}

/// The ranks of this host; see the module documentation.
#[derive(Debug)]
pub struct LocalRanks {
    /// Who speaks in messages (`gmpirun`, `gmpirun proxy on host X`).
    label: String,
    job_id: String,
    server: PmiServer,
    ranks: Vec<Rank>,
    by_pid: HashMap<Pid, usize>,
    stdin: Rank0Stdin,
    phase: Phase,
}

impl LocalRanks {
    /// No ranks yet, for job `job_id`, served by `server`.
    pub fn new(label: String, job_id: String, server: PmiServer) -> Self {
        Self {
            label,
            job_id,
            server,
            ranks: Vec::new(),
            by_pid: HashMap::new(),
            stdin: Rank0Stdin::default(),
            phase: Phase::Running,
        }
    }

    /// Starts one rank (rank 0 with a stdin pipe).
    pub fn spawn(
        &mut self,
        prog: &rank::Program<'_>,
        place: &rank::Placement<'_>,
    ) -> io::Result<()> {
        let child = rank::spawn(prog, place, place.rank == 0)?;
        if let Some(pipe) = child.stdin {
            self.stdin.pipe = Some(pipe);
        }
        self.by_pid.insert(child.pid, self.ranks.len());
        self.ranks.push(Rank {
            rank: place.rank,
            pid: child.pid,
            exited: false,
            pmi: Some(child.pmi),
            stdout: Some(child.stdout),
            stderr: Some(child.stderr),
        });
        Ok(())
    }

    /// The ranks' process ids, in the order they were started.
    pub fn pids(&self) -> Vec<u32> {
        self.ranks.iter().map(|r| r.pid.as_raw() as u32).collect()
    }

    /// Whether the ranks run (the ending has not started).
    pub fn running(&self) -> bool {
        self.phase == Phase::Running
    }

    /// Whether the ending is complete.
    pub fn done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Whether every rank started has exited.
    pub fn all_exited(&self) -> bool {
        self.ranks.iter().all(|r| r.exited)
    }

    /// The ranks that have not exited.
    pub fn not_exited(&self) -> Vec<u32> {
        self.ranks
            .iter()
            .filter(|r| !r.exited)
            .map(|r| r.rank)
            .collect()
    }

    // ---- the loop -------------------------------------------------------------------

    /// Adds the ranks' descriptors to `set`, as `token` makes them; the output pipes only
    /// when `read_output` (else the ranks block on a full pipe: back-pressure).
    pub fn watch<'a, T>(
        &'a self,
        set: &mut PollSet<'a, T>,
        token: impl Fn(Token) -> T,
        read_output: bool,
    ) {
        for (i, rank) in self.ranks.iter().enumerate() {
            if let Some(pmi) = &rank.pmi {
                let mut events = PollFlags::POLLIN;
                if pmi.wants_write() {
                    events |= PollFlags::POLLOUT;
                }
                set.watch(token(Token::Pmi(i)), pmi.sock.as_fd(), events);
            }
            if read_output {
                if let Some(out) = &rank.stdout {
                    set.read(token(Token::Output(i, Stream::Stdout)), out.as_fd());
                }
                if let Some(err) = &rank.stderr {
                    set.read(token(Token::Output(i, Stream::Stderr)), err.as_fd());
                }
            }
        }
        if let (Some(pipe), false) = (&self.stdin.pipe, self.stdin.buf.is_empty()) {
            set.watch(token(Token::Stdin), pipe.as_fd(), PollFlags::POLLOUT);
        }
    }

    /// The ending's deadlines.
    pub fn deadlines(&self, next: &mut Deadlines) {
        match self.phase {
            // Groups may empty without a SIGCHLD to us: look again every tick.
            Phase::Ending { .. } => next.tick(),
            Phase::Draining { until } => next.at(until),
            Phase::Running | Phase::Done => {}
        }
    }

    /// One of the ranks' descriptors has `events`.
    pub fn ready(&mut self, token: Token, events: PollFlags, owner: &mut impl Owner) {
        match token {
            Token::Pmi(i) => {
                if events.contains(PollFlags::POLLOUT) {
                    if let Some(pmi) = &mut self.ranks[i].pmi {
                        pmi.flush();
                    }
                }
                if events.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                    self.read_pmi(i, owner);
                }
            }
            Token::Output(i, stream) => self.read_output(i, stream, owner),
            Token::Stdin => self.write_stdin(owner),
        }
    }

    /// Child `pid` ended: if it is a rank, takes in what it wrote before dying (all
    /// readable now: an abort line, its last output), then tells the owner. Whether it
    /// was a rank.
    pub fn reaped(&mut self, pid: Pid, how: ExitKind, owner: &mut impl Owner) -> bool {
        let Some(&i) = self.by_pid.get(&pid) else {
            return false;
        };
        self.ranks[i].exited = true;
        self.read_pmi(i, owner);
        self.read_output(i, Stream::Stdout, owner);
        self.read_output(i, Stream::Stderr, owner);
        let rank = self.ranks[i].rank;
        owner.exited(rank, pid, how, &self.server);
        true
    }

    // ---- PMI ------------------------------------------------------------------------

    fn read_pmi(&mut self, i: usize, owner: &mut impl Owner) {
        let Some(pmi) = &mut self.ranks[i].pmi else {
            return;
        };
        let input = pmi.read_lines();
        if input.closed || input.too_long {
            self.ranks[i].pmi = None;
        }
        let rank = self.ranks[i].rank;
        for line in input.lines {
            if !self.running() || !owner.serving() {
                break;
            }
            let events = self.server.handle(rank, &line);
            self.pmi_events(events, owner);
        }
        if input.too_long {
            owner.pmi_too_long(rank);
        }
    }

    /// Writes the replies, hands the rest to the owner.
    fn pmi_events(&mut self, events: Vec<ServerOutput>, owner: &mut impl Owner) {
        for event in events {
            match event {
                ServerOutput::Reply { rank, line } => {
                    let conn = self.ranks.iter_mut().find(|r| r.rank == rank);
                    if let Some(pmi) = conn.and_then(|r| r.pmi.as_mut()) {
                        pmi.send(&line);
                    }
                }
                event => owner.pmi(event),
            }
        }
    }

    /// Ends the current PMI barrier of a proxy's server with the keys every host put
    /// (see `PmiServer::barrier_release_with`); `Err` names a conflicting key.
    pub fn release_barrier(
        &mut self,
        puts: Vec<(String, String)>,
        owner: &mut impl Owner,
    ) -> Result<(), String> {
        let events = self.server.barrier_release_with(puts)?;
        self.pmi_events(events, owner);
        Ok(())
    }

    // ---- output ---------------------------------------------------------------------

    fn read_output(&mut self, i: usize, stream: Stream, owner: &mut impl Owner) {
        let rank = self.ranks[i].rank;
        let mut chunk = vec![0u8; READ_CHUNK];
        for _ in 0..READS_PER_EVENT {
            let Some(pipe) = self.ranks[i].output(stream) else {
                return;
            };
            match pipe.read(&mut chunk) {
                Ok(n) if n > 0 => owner.output(rank, stream, &chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // End of file, or a broken pipe.
                _ => {
                    self.ranks[i].close_output(stream);
                    owner.output_closed(rank, stream);
                    return;
                }
            }
        }
    }

    // ---- rank 0's stdin -------------------------------------------------------------

    /// Whether rank 0 takes more stdin now: its pipe is open (the ranks run), nothing
    /// waits to be written and its end was not given.
    pub fn stdin_wanted(&self) -> bool {
        self.stdin.pipe.is_some() && self.stdin.buf.is_empty() && !self.stdin.eof
    }

    /// Gives rank 0 `data` and writes what its pipe takes; without the pipe, the bytes
    /// are dropped (and counted as taken).
    pub fn stdin_data(&mut self, data: &[u8], owner: &mut impl Owner) {
        if self.stdin.pipe.is_none() {
            return owner.stdin_taken(data.len(), false);
        }
        self.stdin.buf.extend_from_slice(data);
        self.write_stdin(owner);
    }

    /// The end of rank 0's stdin: its pipe closes once what waits is written.
    pub fn stdin_end(&mut self) {
        self.stdin.eof = true;
        if self.stdin.buf.is_empty() {
            self.stdin.pipe = None;
        }
    }

    fn write_stdin(&mut self, owner: &mut impl Owner) {
        let stdin = &mut self.stdin;
        let Some(pipe) = &mut stdin.pipe else {
            return;
        };
        let mut written = 0usize;
        let mut closed = false;
        while written < stdin.buf.len() {
            match pipe.write(&stdin.buf[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    // Rank 0 closed its stdin: drop the rest, stop forwarding.
                    closed = true;
                    break;
                }
            }
        }
        if closed {
            written = stdin.buf.len();
            stdin.pipe = None;
        }
        stdin.buf.drain(..written);
        if stdin.eof && stdin.buf.is_empty() {
            stdin.pipe = None;
        }
        if written > 0 || closed {
            owner.stdin_taken(written, closed);
        }
    }

    // ---- the end --------------------------------------------------------------------

    /// Starts the ending: rank 0's stdin closes, SIGTERM to every rank's group.
    pub fn start_ending(&mut self, now: Instant) {
        self.stdin = Rank0Stdin::default();
        for rank in &self.ranks {
            sys::signal_group(rank.pid, Signal::SIGTERM);
        }
        self.phase = Phase::Ending {
            kill_at: now + TERM_GRACE,
            killed: false,
            give_up_at: None,
        };
    }

    /// Ends the ranks: starts the ending, or, asked again while it runs, stops waiting
    /// politely (SIGKILL at once).
    pub fn end(&mut self, now: Instant) {
        match &mut self.phase {
            Phase::Running => self.start_ending(now),
            Phase::Ending { kill_at, .. } => *kill_at = now,
            Phase::Draining { .. } | Phase::Done => {}
        }
    }

    /// Moves the ending on, by time and by what is left. `spared` are children of this
    /// process that are not the ranks' (a proxy's launch agents): never strays.
    pub fn advance(&mut self, now: Instant, spared: &[Pid]) {
        match self.phase {
            Phase::Running | Phase::Done => {}
            Phase::Ending {
                kill_at,
                killed,
                give_up_at,
            } => {
                let ranks_gone = self.all_exited();
                let groups_gone = !self.ranks.iter().any(|r| sys::group_exists(r.pid));
                let strays: Vec<Pid> = sys::child_pids()
                    .into_iter()
                    .filter(|p| !spared.contains(p))
                    .collect();
                if ranks_gone && groups_gone && strays.is_empty() {
                    self.phase = Phase::Draining {
                        until: now + DRAIN_GRACE,
                    };
                    self.advance(now, spared);
                } else if !killed && now >= kill_at {
                    for rank in &self.ranks {
                        sys::signal_group(rank.pid, Signal::SIGKILL);
                    }
                    for pid in strays {
                        let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
                    }
                    self.phase = Phase::Ending {
                        kill_at,
                        killed: true,
                        give_up_at: Some(now + KILL_GRACE),
                    };
                } else if give_up_at.is_some_and(|t| now >= t) {
                    // Ignoring failure: a proxy's stderr may be gone with gmpirun.
                    let _ = writeln!(
                        io::stderr(),
                        "{}: warning: some processes of the job could not be ended",
                        self.label
                    );
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
                    sys::remove_shm_segments(&format!("gmpi-{}", self.job_id));
                    self.phase = Phase::Done;
                }
            }
        }
    }
}
