//! gmpirun's hidden proxy mode: the agent of one host in a multi-host job.
//!
//! `gmpirun --internal-proxy HOST_ID PORT ADDR[,ADDR...]` is started by the root (or by
//! a parent proxy) through the launch agent or `srun`. It reads the job secret from its
//! stdin (the SSH channel, or srun's forwarded stdin: never a command line), connects back to gmpirun at `ADDR:PORT`
//! (`SSH_CONNECTION`'s client address first), and both sides prove they hold the secret
//! (`control.rs`). Then it receives its job: it starts its child proxies (the launch
//! tree) and its ranks, in gmpirun's working directory, with the same environment and
//! process handling as local ranks (`rank.rs`: own process group, `PR_SET_PDEATHSIG`,
//! `PMI_FD` socketpair).
//!
//! While the job runs it serves PMI to its ranks with a `PmiServer::for_ranks` (every
//! request answered here except the end of a barrier, which goes through the root),
//! forwards their output and exits, writes forwarded stdin to rank 0, and reports the
//! launch agents of its children that fail.
//!
//! It ends its ranks (SIGTERM to their groups, SIGKILL after `TERM_GRACE`, orphans
//! included: it is their subreaper) when the root says `End`, and on its own when the
//! root is lost: the control connection closes or falls silent for `HEARTBEAT_TIMEOUT`,
//! or its stdin closes (the SSH connection dropped). Then it removes the job's
//! `/dev/shm` files on its host, answers `Done`, and once the root has closed the
//! connection stops its children's launch agents and exits.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::{ChildStderr, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use gmpi_pmi::wire::MAX_LINE_LEN;
use gmpi_pmi::{PmiServer, ServerOutput};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use crate::agent::{tail_text, Starter, PROXY_FLAG};
use crate::control::{
    self, auth_mac, auth_verify, Conn, ConnError, ExitKind, LaunchSpec, Secret, Side, Stream,
    ToProxy, ToRoot, HEARTBEAT_TIMEOUT,
};
use crate::job::{DRAIN_GRACE, MIN_TICK, TERM_GRACE};
use crate::rank::{self, PmiConn};
use crate::sys;

/// How long the root has to send the secret, complete the handshake and send the job.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Connect timeout for each address of the root.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// After `Done`, how long to wait for the root to close the connection.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// After SIGKILL, how long to wait for the last processes before giving up on them.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long the children's launch agents get between SIGTERM and SIGKILL.
const AGENT_GRACE: Duration = Duration::from_secs(1);
/// Stop reading the ranks' output while this much waits to go to the root.
const OUT_HIGH: usize = 8 << 20;
/// Last bytes of a child agent's stderr kept for messages.
const TAIL_MAX: usize = 2048;

/// Writes a line to stderr, ignoring failure: once gmpirun is gone, the SSH channel
/// behind stderr may be closed too, and the proxy must still end its ranks.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(io::stderr(), $($arg)*);
    }};
}

/// Runs proxy mode with the words after the flag; returns the exit status.
pub fn main(args: &[OsString]) -> i32 {
    let label = format!("gmpirun proxy on {}", sys::hostname());
    let (host_id, port, addrs) = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            say!("{label}: {e} (this mode is for gmpirun's own use)");
            return 2;
        }
    };
    let deadline = Instant::now() + START_TIMEOUT;
    let secret = match read_secret(deadline) {
        Ok(s) => s,
        Err(e) => {
            say!("{label}: {e}");
            return 1;
        }
    };
    let signals = match sys::signal_fd() {
        Ok(s) => s,
        Err(e) => {
            say!("{label}: cannot set up signal handling: {e}");
            return 1;
        }
    };
    sys::become_subreaper();
    let stream = match connect(&addrs, port) {
        Ok(s) => s,
        Err(e) => {
            say!("{label}: {e}");
            return 1;
        }
    };
    let spec = match Conn::new(stream)
        .map_err(|e| format!("cannot set up the connection to gmpirun: {e}"))
        .and_then(|mut conn| handshake(&mut conn, host_id, &secret, deadline).map(|s| (conn, s)))
    {
        Ok((conn, Some(spec))) => (conn, spec),
        Ok((_, None)) => return 0,
        Err(e) => {
            say!("{label}: {e}");
            return 1;
        }
    };
    let (conn, spec) = spec;
    let label = format!("gmpirun proxy on host {}", spec.host_name);
    let mut proxy = Proxy::new(*spec, conn, secret, signals, label);
    proxy.start_children();
    proxy.start_ranks();
    proxy.event_loop();
    i32::from(proxy.orphaned)
}

fn parse_args(args: &[OsString]) -> Result<(u32, u16, Vec<IpAddr>), String> {
    let text: Vec<&str> = args.iter().map(|a| a.to_str().unwrap_or("")).collect();
    let [host, port, addrs] = text[..] else {
        return Err(format!(
            "usage: gmpirun {PROXY_FLAG} HOST_ID PORT ADDR[,ADDR...]"
        ));
    };
    let host = host.parse().map_err(|_| format!("bad host id `{host}`"))?;
    let port = port.parse().map_err(|_| format!("bad port `{port}`"))?;
    let addrs = addrs
        .split(',')
        .map(|a| a.parse().map_err(|_| format!("bad address `{a}`")))
        .collect::<Result<Vec<IpAddr>, String>>()?;
    Ok((host, port, addrs))
}

/// Reads the job secret, one line of hex, from stdin.
fn read_secret(deadline: Instant) -> Result<Secret, String> {
    let stdin = io::stdin();
    let mut buf = Vec::new();
    loop {
        if let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&buf[..end]).into_owned();
            return Secret::from_hex(&line)
                .ok_or_else(|| "the job secret on stdin is malformed".to_owned());
        }
        if buf.len() > 256 {
            return Err("the job secret on stdin is malformed".to_owned());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err("no job secret on stdin in time".to_owned());
        }
        let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        let wait = PollTimeout::try_from(deadline - now).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, wait) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(format!("cannot read the job secret: {e}")),
        }
        let mut chunk = [0u8; 128];
        match nix::unistd::read(stdin.as_fd(), &mut chunk) {
            Ok(0) => return Err("stdin closed before the job secret arrived".to_owned()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(Errno::EINTR | Errno::EAGAIN) => {}
            Err(e) => return Err(format!("cannot read the job secret: {e}")),
        }
    }
}

/// Connects to the first root address that answers: the SSH client's address first
/// (the route the launch took), then the others in order.
fn connect(addrs: &[IpAddr], port: u16) -> Result<TcpStream, String> {
    let mut order = addrs.to_vec();
    let client = std::env::var("SSH_CONNECTION")
        .ok()
        .and_then(|c| c.split_whitespace().next()?.parse::<IpAddr>().ok());
    if let Some(pos) = client.and_then(|c| order.iter().position(|a| *a == c)) {
        let first = order.remove(pos);
        order.insert(0, first);
    }
    let mut errors = Vec::new();
    for addr in order {
        let sa = SocketAddr::new(addr, port);
        match TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => errors.push(format!("{sa} ({e})")),
        }
    }
    Err(format!(
        "cannot connect back to gmpirun at {}",
        errors.join(", ")
    ))
}

/// Proves the secret both ways, then waits for the job: `None` when the root ends the
/// job before sending it.
fn handshake(
    conn: &mut Conn,
    host: u32,
    secret: &Secret,
    deadline: Instant,
) -> Result<Option<Box<LaunchSpec>>, String> {
    let peer = conn.peer();
    let in_handshake = |e: ConnError| {
        match e {
        ConnError::Closed => format!(
            "gmpirun at {peer} closed the connection in the handshake (not the same gmpirun on every host?)"
        ),
        e => format!("handshake with gmpirun at {peer}: {e}"),
    }
    };
    let nonce_p = control::nonce().map_err(|e| format!("no random bytes: {e}"))?;
    conn.send(&ToRoot::Hello {
        version: control::PROTOCOL_VERSION,
        host,
        nonce: nonce_p,
    });
    let nonce_r = match conn.wait_one::<ToProxy>(deadline).map_err(in_handshake)? {
        ToProxy::Challenge { nonce, mac } => {
            if !auth_verify(secret, Side::Root, host, &nonce_p, &nonce, &mac) {
                return Err(format!(
                    "the process at {peer} does not hold the job secret: refused"
                ));
            }
            nonce
        }
        other => {
            return Err(format!(
                "unexpected {other:?} from gmpirun in the handshake"
            ))
        }
    };
    conn.send(&ToRoot::Proof {
        mac: auth_mac(secret, Side::Proxy, host, &nonce_p, &nonce_r),
    });
    let peer = conn.peer();
    match conn.wait_one::<ToProxy>(deadline) {
        Ok(ToProxy::Launch(spec)) => Ok(Some(spec)),
        Ok(ToProxy::End) => Ok(None),
        Ok(other) => Err(format!("unexpected {other:?} from gmpirun before the job")),
        // Refused (the job gave up on this host) or gone: nothing to do.
        Err(ConnError::Closed) => Ok(None),
        Err(e) => Err(format!("waiting for the job from gmpirun at {peer}: {e}")),
    }
}

/// One rank of this host.
#[derive(Debug)]
struct ProxyRank {
    rank: u32,
    pid: Pid,
    exited: bool,
    pmi: Option<PmiConn>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

/// The launch agent of one child proxy.
#[derive(Debug)]
struct ChildAgent {
    host: u32,
    pid: Pid,
    /// Kept open: its end tells the child that this proxy is gone.
    stdin: Option<ChildStdin>,
    stderr: Option<ChildStderr>,
    tail: Vec<u8>,
    status: Option<ExitKind>,
    what: String,
}

/// Forwarded stdin for rank 0 (when it runs here).
#[derive(Debug, Default)]
struct Rank0Stdin {
    pipe: Option<ChildStdin>,
    buf: Vec<u8>,
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
    /// `Done` sent; waiting for the root to close.
    Closing {
        until: Instant,
    },
    /// Stopping the children's launch agents.
    Stopping {
        kill_at: Instant,
        killed: bool,
    },
    Finished,
}

#[derive(Debug, Clone, Copy)]
enum Token {
    Signal,
    OwnStdin,
    Conn,
    Pmi(usize),
    Out(usize),
    Err(usize),
    Rank0Stdin,
    ChildErr(usize),
}

#[derive(Debug)]
struct Proxy {
    spec: LaunchSpec,
    secret: Secret,
    label: String,
    conn: Option<Conn>,
    signals: SignalFd,
    server: PmiServer,
    ranks: Vec<ProxyRank>,
    by_pid: HashMap<Pid, usize>,
    stdin: Rank0Stdin,
    children: Vec<ChildAgent>,
    /// Our own stdin (the launch channel) is still open.
    own_stdin_open: bool,
    phase: Phase,
    /// The root was lost: nothing more is reported, the exit status is 1.
    orphaned: bool,
    done_sent: bool,
}

impl Proxy {
    fn new(spec: LaunchSpec, conn: Conn, secret: Secret, signals: SignalFd, label: String) -> Self {
        let mut server = PmiServer::for_ranks(
            spec.size,
            format!("gmpi_{}", spec.job_id),
            0,
            spec.size,
            &spec.ranks,
        );
        server.set_process_mapping(spec.process_mapping.clone());
        Self {
            spec,
            secret,
            label,
            conn: Some(conn),
            signals,
            server,
            ranks: Vec::new(),
            by_pid: HashMap::new(),
            stdin: Rank0Stdin::default(),
            children: Vec::new(),
            own_stdin_open: true,
            phase: Phase::Running,
            orphaned: false,
            done_sent: false,
        }
    }

    fn send(&mut self, msg: &ToRoot) {
        if let Some(conn) = &mut self.conn {
            conn.send(msg);
        }
    }

    // ---- start-up -------------------------------------------------------------------

    /// Starts the child proxies first: their SSH connections take the longest.
    fn start_children(&mut self) {
        let exe = match std::env::current_exe() {
            Ok(p) => p,
            Err(e) => {
                for (id, _) in self.spec.children.clone() {
                    let msg = format!("cannot find gmpirun's executable: {e}");
                    self.send(&ToRoot::ChildFailed { host: id, msg });
                }
                return;
            }
        };
        let starter = Starter::RemoteShell(self.spec.agent.clone());
        for (id, name) in self.spec.children.clone() {
            let argv: Vec<OsString> = vec![
                exe.clone().into_os_string(),
                PROXY_FLAG.into(),
                id.to_string().into(),
                self.spec.root_port.to_string().into(),
                self.spec.root_addrs.clone().into(),
            ];
            let mut cmd = starter.command(&name, &argv);
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            sys::prepare_helper(&mut cmd);
            match cmd.spawn() {
                Ok(mut child) => {
                    let mut stdin = child.stdin.take();
                    if let Some(pipe) = &mut stdin {
                        let _ = pipe.write_all(format!("{}\n", self.secret.to_hex()).as_bytes());
                    }
                    let stderr = child.stderr.take();
                    if let Some(e) = &stderr {
                        let _ = sys::set_nonblocking(e);
                    }
                    self.children.push(ChildAgent {
                        host: id,
                        pid: Pid::from_raw(child.id() as i32),
                        stdin,
                        stderr,
                        tail: Vec::new(),
                        status: None,
                        what: starter.what(),
                    });
                }
                Err(e) => {
                    let msg = format!(
                        "cannot run {} on host {}: {e}",
                        starter.what(),
                        self.spec.host_name
                    );
                    self.send(&ToRoot::ChildFailed { host: id, msg });
                }
            }
        }
    }

    fn start_ranks(&mut self) {
        let program = OsStr::from_bytes(&self.spec.program).to_owned();
        let fail = |what: String| ToRoot::StartFailed {
            msg: format!(
                "cannot start {} on host {}: {what}",
                program.to_string_lossy(),
                self.spec.host_name
            ),
        };
        let cwd = PathBuf::from(OsStr::from_bytes(&self.spec.cwd));
        if let Err(e) = std::env::set_current_dir(&cwd) {
            let msg = fail(format!("cannot change to directory {}: {e}", cwd.display()));
            return self.send(&msg);
        }
        let env: Vec<(String, OsString)> = self
            .spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), OsStr::from_bytes(v).to_owned()))
            .collect();
        let path_env = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var_os("PATH"));
        let path = match rank::resolve_program(&program, path_env.as_deref()) {
            Ok(p) => p,
            Err(e) => {
                let msg = fail(e.to_string());
                return self.send(&msg);
            }
        };
        let args: Vec<OsString> = self
            .spec
            .args
            .iter()
            .map(|a| OsStr::from_bytes(a).to_owned())
            .collect();
        let prog = rank::Program {
            path: &path,
            argv0: &program,
            args: &args,
            env: &env,
        };
        let secret_hex = self.secret.to_hex();
        let local_size = self.spec.ranks.len() as u32;
        for (local_rank, &r) in self.spec.ranks.iter().enumerate() {
            let place = rank::Placement {
                rank: r,
                size: self.spec.size,
                local_rank: local_rank as u32,
                local_size,
                node_id: self.spec.node_id,
                job_id: &self.spec.job_id,
                secret_hex: &secret_hex,
            };
            let child = match rank::spawn(&prog, &place, r == 0) {
                Ok(c) => c,
                Err(e) => {
                    let msg = fail(e.to_string());
                    return self.send(&msg);
                }
            };
            if let Some(pipe) = child.stdin {
                self.stdin.pipe = Some(pipe);
            }
            self.by_pid.insert(child.pid, self.ranks.len());
            self.ranks.push(ProxyRank {
                rank: r,
                pid: child.pid,
                exited: false,
                pmi: Some(child.pmi),
                stdout: Some(child.stdout),
                stderr: Some(child.stderr),
            });
        }
        let pids = self.ranks.iter().map(|r| r.pid.as_raw() as u32).collect();
        self.send(&ToRoot::Started { pids });
    }

    // ---- the loop -------------------------------------------------------------------

    fn event_loop(&mut self) {
        while self.phase != Phase::Finished {
            let timeout = self.poll_timeout();
            let ready = match self.poll_once(timeout) {
                Ok(ready) => ready,
                Err(e) => {
                    say!("{}: poll failed: {e}", self.label);
                    self.lost("poll failed");
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

    fn poll_once(&self, timeout: Option<Duration>) -> nix::Result<Vec<(Token, PollFlags)>> {
        let input = PollFlags::POLLIN;
        let mut tokens = vec![Token::Signal];
        let mut fds = vec![PollFd::new(self.signals.as_fd(), input)];
        let stdin = io::stdin();
        if self.own_stdin_open {
            tokens.push(Token::OwnStdin);
            fds.push(PollFd::new(stdin.as_fd(), input));
        }
        if let Some(conn) = &self.conn {
            tokens.push(Token::Conn);
            fds.push(PollFd::new(conn.as_fd(), conn.poll_flags()));
        }
        // Back-pressure: while the root is slow to take output, let the ranks block.
        let read_output = self.conn.as_ref().is_none_or(|c| c.pending() < OUT_HIGH);
        for (i, rank) in self.ranks.iter().enumerate() {
            if let Some(pmi) = &rank.pmi {
                let mut flags = input;
                if pmi.wants_write() {
                    flags |= PollFlags::POLLOUT;
                }
                tokens.push(Token::Pmi(i));
                fds.push(PollFd::new(pmi.sock.as_fd(), flags));
            }
            if read_output {
                if let Some(out) = &rank.stdout {
                    tokens.push(Token::Out(i));
                    fds.push(PollFd::new(out.as_fd(), input));
                }
                if let Some(err) = &rank.stderr {
                    tokens.push(Token::Err(i));
                    fds.push(PollFd::new(err.as_fd(), input));
                }
            }
        }
        if let (Some(pipe), false) = (&self.stdin.pipe, self.stdin.buf.is_empty()) {
            tokens.push(Token::Rank0Stdin);
            fds.push(PollFd::new(pipe.as_fd(), PollFlags::POLLOUT));
        }
        for (j, child) in self.children.iter().enumerate() {
            if let Some(err) = &child.stderr {
                tokens.push(Token::ChildErr(j));
                fds.push(PollFd::new(err.as_fd(), input));
            }
        }
        sys::poll_tokens(tokens, &mut fds, timeout)
    }

    fn poll_timeout(&self) -> Option<Duration> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        match self.phase {
            Phase::Running => {}
            // Groups may empty without a SIGCHLD to us: look again every tick.
            Phase::Ending { .. } | Phase::Stopping { .. } => consider(Some(now)),
            Phase::Draining { until } | Phase::Closing { until } => consider(Some(until)),
            Phase::Finished => {}
        }
        if let Some(conn) = &self.conn {
            consider(Some(conn.next_heartbeat()));
            consider(Some(conn.last_recv + HEARTBEAT_TIMEOUT));
        }
        next.map(|t| t.saturating_duration_since(now).max(MIN_TICK))
    }

    fn dispatch(&mut self, token: Token, revents: PollFlags) {
        match token {
            Token::Signal => self.read_signals(),
            Token::OwnStdin => self.read_own_stdin(),
            Token::Conn => {
                if revents.contains(PollFlags::POLLOUT) {
                    if let Some(conn) = &mut self.conn {
                        let _ = conn.flush();
                    }
                }
                if revents.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                    self.read_conn();
                }
            }
            Token::Pmi(i) => {
                if revents.contains(PollFlags::POLLOUT) {
                    if let Some(pmi) = &mut self.ranks[i].pmi {
                        pmi.flush();
                    }
                }
                if revents.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                    self.read_pmi(i);
                }
            }
            Token::Out(i) => self.read_output(i, Stream::Stdout),
            Token::Err(i) => self.read_output(i, Stream::Stderr),
            Token::Rank0Stdin => self.write_rank0_stdin(),
            Token::ChildErr(j) => self.read_child_stderr(j),
        }
    }

    // ---- signals and children -------------------------------------------------------

    fn read_signals(&mut self) {
        while let Ok(Some(info)) = self.signals.read_signal() {
            let signo = info.ssi_signo as i32;
            match Signal::try_from(signo) {
                Ok(Signal::SIGCHLD) | Err(_) => {}
                Ok(sig) => match &mut self.phase {
                    Phase::Running => {
                        say!(
                            "{}: received {}; ending this host's ranks",
                            self.label,
                            sig.as_str()
                        );
                        self.start_ending(Instant::now());
                    }
                    Phase::Ending { kill_at, .. } => *kill_at = Instant::now(),
                    _ => {}
                },
            }
        }
    }

    fn reap(&mut self) {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(status) => {
                    let Some(pid) = status.pid() else { return };
                    let Some(kind) = ExitKind::from_wait(&status) else {
                        continue;
                    };
                    if let Some(&i) = self.by_pid.get(&pid) {
                        self.rank_exited(i, kind);
                    } else if let Some(j) = self.children.iter().position(|c| c.pid == pid) {
                        self.child_exited(j, kind);
                    }
                }
                Err(Errno::EINTR) => {}
                Err(_) => return,
            }
        }
    }

    fn rank_exited(&mut self, i: usize, status: ExitKind) {
        self.ranks[i].exited = true;
        // What the rank wrote before dying is all readable now: report it first.
        self.read_pmi(i);
        self.read_output(i, Stream::Stdout);
        self.read_output(i, Stream::Stderr);
        let rank = self.ranks[i].rank;
        self.send(&ToRoot::Exited { rank, status });
    }

    fn child_exited(&mut self, j: usize, status: ExitKind) {
        self.read_child_stderr(j);
        let child = &mut self.children[j];
        child.status = Some(status);
        child.stdin = None;
        if self.phase == Phase::Running {
            let msg = format!(
                "{} (started by host {}) {}{}",
                child.what,
                self.spec.host_name,
                status.describe(),
                tail_text(&child.tail)
            );
            let host = child.host;
            self.send(&ToRoot::ChildFailed { host, msg });
        }
    }

    fn read_child_stderr(&mut self, j: usize) {
        let child = &mut self.children[j];
        let Some(pipe) = &mut child.stderr else {
            return;
        };
        // Kept for the message if the child fails: the child's own messages and the
        // agent's (`ssh: connect to host ...`).
        let mut chunk = [0u8; 4096];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => {
                    child.stderr = None;
                    return;
                }
                Ok(n) => {
                    child.tail.extend_from_slice(&chunk[..n]);
                    if child.tail.len() > TAIL_MAX {
                        let cut = child.tail.len() - TAIL_MAX;
                        child.tail.drain(..cut);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    child.stderr = None;
                    return;
                }
            }
        }
    }

    // ---- the root -------------------------------------------------------------------

    fn read_own_stdin(&mut self) {
        let mut chunk = [0u8; 1024];
        match nix::unistd::read(io::stdin().as_fd(), &mut chunk) {
            // Nothing else is sent on stdin; anything is ignored.
            Ok(n) if n > 0 => {}
            Err(Errno::EINTR | Errno::EAGAIN) => {}
            _ => {
                self.own_stdin_open = false;
                self.lost("its launch connection closed");
            }
        }
    }

    fn read_conn(&mut self) {
        let Some(conn) = &mut self.conn else { return };
        let (msgs, err) = conn.receive::<ToProxy>();
        for msg in msgs {
            self.root_message(msg);
        }
        if let Some(e) = err {
            self.lost(&e.to_string());
        }
    }

    fn root_message(&mut self, msg: ToProxy) {
        match msg {
            ToProxy::FenceDone { puts } => {
                if self.phase != Phase::Running {
                    return;
                }
                match self.server.barrier_release_with(puts) {
                    Ok(outs) => self.pmi_outputs(outs),
                    Err(e) => {
                        let rank = self.spec.ranks[0];
                        self.send(&ToRoot::PmiError { rank, msg: e });
                    }
                }
            }
            ToProxy::Stdin { data } => {
                if self.stdin.pipe.is_some() {
                    self.stdin.buf.extend_from_slice(&data);
                    self.write_rank0_stdin();
                } else {
                    self.send(&ToRoot::StdinAck {
                        bytes: data.len() as u32,
                    });
                }
            }
            ToProxy::StdinEof => {
                self.stdin.eof = true;
                if self.stdin.buf.is_empty() {
                    self.stdin.pipe = None;
                }
            }
            ToProxy::End => match &mut self.phase {
                Phase::Running => self.start_ending(Instant::now()),
                // Asked again: stop waiting politely.
                Phase::Ending { kill_at, .. } => *kill_at = Instant::now(),
                _ => {}
            },
            ToProxy::Heartbeat => {}
            other => {
                let what: String = format!("{other:?}").chars().take(80).collect();
                self.lost(&format!("unexpected message {what}"));
            }
        }
    }

    /// The root is gone (or closed the connection after our `Done`).
    fn lost(&mut self, why: &str) {
        self.conn = None;
        let now = Instant::now();
        if self.done_sent {
            if let Phase::Closing { .. } = self.phase {
                self.start_stopping(now);
            }
            return;
        }
        if self.orphaned {
            return;
        }
        self.orphaned = true;
        say!(
            "{}: lost gmpirun ({why}); ending this host's ranks",
            self.label
        );
        if self.phase == Phase::Running {
            self.start_ending(now);
        }
    }

    // ---- PMI, output, stdin ---------------------------------------------------------

    fn read_pmi(&mut self, i: usize) {
        let Some(pmi) = &mut self.ranks[i].pmi else {
            return;
        };
        let input = pmi.read_lines();
        if input.closed || input.too_long {
            self.ranks[i].pmi = None;
        }
        let rank = self.ranks[i].rank;
        for line in input.lines {
            if self.phase != Phase::Running {
                break;
            }
            let outs = self.server.handle(rank, &line);
            self.pmi_outputs(outs);
        }
        if input.too_long {
            let msg = format!("line longer than {MAX_LINE_LEN} bytes");
            self.send(&ToRoot::PmiError { rank, msg });
        }
    }

    fn pmi_outputs(&mut self, outs: Vec<ServerOutput>) {
        for out in outs {
            match out {
                ServerOutput::Reply { rank, line } => {
                    if let Some(r) = self.ranks.iter_mut().find(|r| r.rank == rank) {
                        if let Some(pmi) = &mut r.pmi {
                            pmi.send(&line);
                        }
                    }
                }
                ServerOutput::Initialized { rank } => self.send(&ToRoot::Initialized { rank }),
                ServerOutput::Finalized { rank } => self.send(&ToRoot::Finalized { rank }),
                ServerOutput::BarrierReady { puts } => self.send(&ToRoot::Fence { puts }),
                ServerOutput::Abort { rank, code, msg } => {
                    self.send(&ToRoot::Abort { rank, code, msg })
                }
                ServerOutput::ProtocolError { rank, error } => self.send(&ToRoot::PmiError {
                    rank,
                    msg: error.to_string(),
                }),
                _ => {}
            }
        }
    }

    fn read_output(&mut self, i: usize, stream: Stream) {
        let rank = self.ranks[i].rank;
        let mut chunk = vec![0u8; 65536];
        // A bounded number of reads per call, so one chatty rank cannot starve the rest.
        for _ in 0..16 {
            let result = {
                let r = &mut self.ranks[i];
                let pipe: Option<&mut dyn Read> = match stream {
                    Stream::Stdout => r.stdout.as_mut().map(|p| p as &mut dyn Read),
                    Stream::Stderr => r.stderr.as_mut().map(|p| p as &mut dyn Read),
                };
                let Some(pipe) = pipe else { return };
                pipe.read(&mut chunk)
            };
            match result {
                Ok(n) if n > 0 => {
                    let data = chunk[..n].to_vec();
                    self.send(&ToRoot::Output { rank, stream, data });
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // End of file, or a broken pipe.
                _ => {
                    let r = &mut self.ranks[i];
                    match stream {
                        Stream::Stdout => r.stdout = None,
                        Stream::Stderr => r.stderr = None,
                    }
                    return;
                }
            }
        }
    }

    fn write_rank0_stdin(&mut self) {
        let Some(pipe) = &mut self.stdin.pipe else {
            return;
        };
        let mut written = 0usize;
        let mut closed = false;
        while written < self.stdin.buf.len() {
            match pipe.write(&self.stdin.buf[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    // Rank 0 closed its stdin: drop the rest and stop the root reading.
                    closed = true;
                    break;
                }
            }
        }
        if closed {
            written = self.stdin.buf.len();
            self.stdin.pipe = None;
        }
        self.stdin.buf.drain(..written);
        if written > 0 {
            self.send(&ToRoot::StdinAck {
                bytes: written as u32,
            });
        }
        if closed {
            self.send(&ToRoot::StdinClosed);
        } else if self.stdin.eof && self.stdin.buf.is_empty() {
            self.stdin.pipe = None;
        }
    }

    // ---- the end --------------------------------------------------------------------

    fn start_ending(&mut self, now: Instant) {
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

    /// Children of this process that are not launch agents: orphans of the ranks.
    fn stray_children(&self) -> Vec<Pid> {
        sys::child_pids()
            .into_iter()
            .filter(|p| !self.children.iter().any(|c| c.pid == *p))
            .collect()
    }

    fn start_stopping(&mut self, now: Instant) {
        for child in &mut self.children {
            child.stdin = None;
            if child.status.is_none() {
                sys::signal_group(child.pid, Signal::SIGTERM);
            }
        }
        self.phase = Phase::Stopping {
            kill_at: now + AGENT_GRACE,
            killed: false,
        };
    }

    fn advance(&mut self, now: Instant) {
        if let Some(conn) = &mut self.conn {
            conn.keep_alive(now, ToRoot::Heartbeat);
            if conn.silent(now) {
                let why = format!("nothing heard for {} s", HEARTBEAT_TIMEOUT.as_secs());
                self.lost(&why);
            }
        }
        match self.phase {
            Phase::Running => {}
            Phase::Ending {
                kill_at,
                killed,
                give_up_at,
            } => {
                let ranks_gone = self.ranks.iter().all(|r| r.exited);
                let groups_gone = !self.ranks.iter().any(|r| sys::group_exists(r.pid));
                let strays = self.stray_children();
                if ranks_gone && groups_gone && strays.is_empty() {
                    self.phase = Phase::Draining {
                        until: now + DRAIN_GRACE,
                    };
                    self.advance(now);
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
                    say!(
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
                    sys::remove_shm_segments(&format!("gmpi-{}", self.spec.job_id));
                    if self.conn.is_some() {
                        self.send(&ToRoot::Done);
                        self.done_sent = true;
                        self.phase = Phase::Closing {
                            until: now + CLOSE_WAIT,
                        };
                    } else {
                        self.start_stopping(now);
                    }
                }
            }
            Phase::Closing { until } => {
                if self.conn.is_none() || now >= until {
                    self.start_stopping(now);
                }
            }
            Phase::Stopping { kill_at, killed } => {
                let running: Vec<Pid> = self
                    .children
                    .iter()
                    .filter(|c| c.status.is_none())
                    .map(|c| c.pid)
                    .collect();
                if running.is_empty() {
                    self.phase = Phase::Finished;
                } else if now >= kill_at && !killed {
                    for pid in running {
                        sys::signal_group(pid, Signal::SIGKILL);
                    }
                    self.phase = Phase::Stopping {
                        kill_at: now + AGENT_GRACE,
                        killed: true,
                    };
                } else if now >= kill_at {
                    self.phase = Phase::Finished;
                }
            }
            Phase::Finished => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_arguments() {
        let args = ["3", "4242", "10.0.0.1,127.0.0.1"].map(OsString::from);
        let (h, p, a) = parse_args(&args).unwrap();
        assert_eq!((h, p), (3, 4242));
        assert_eq!(
            a,
            [
                "10.0.0.1".parse::<IpAddr>().unwrap(),
                "127.0.0.1".parse().unwrap()
            ]
        );
        assert!(parse_args(&args[..2]).is_err());
        assert!(parse_args(&["x", "1", "10.0.0.1"].map(OsString::from)).is_err());
        assert!(parse_args(&["1", "1", "nope"].map(OsString::from)).is_err());
    }
}
