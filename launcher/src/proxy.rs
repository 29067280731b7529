//! gmpirun's hidden proxy mode: the agent of one host in a multi-host job.
//!
//! `gmpirun --internal-proxy HOST_ID PORT ADDR[,ADDR...]` is started by the root (or by
//! a parent proxy) through the launch agent or `srun`. It reads the job secret from its
//! stdin (the SSH channel, or srun's forwarded stdin: never a command line), connects
//! back to gmpirun at `ADDR:PORT` (`SSH_CONNECTION`'s client address first), and both
//! sides prove they hold the secret (`control.rs`). Then it receives its job: it starts
//! its child proxies (the launch tree) and its ranks, in gmpirun's working directory.
//!
//! Its ranks are [`LocalRanks`] (`local.rs`), run as in a local job: their own process
//! groups, PMI served here by a `PmiServer::for_ranks` (every request answered here
//! except the end of a barrier, which goes through the root), the same ending. What is
//! the proxy's own: its link to the root ([`RootLink`]), where everything the ranks do
//! is reported (output, PMI events, exits) and whence rank 0's stdin and the barriers'
//! keys come; and the launch agents of its children, whose failures it reports.
//!
//! It ends its ranks when the root says `End`, and on its own when the root is lost:
//! the control connection closes or falls silent for `HEARTBEAT_TIMEOUT`, or its stdin
//! closes (the SSH connection dropped). Once they are ended (and the job's `/dev/shm`
//! files on its host removed) it answers `Done`, and once the root has closed the
//! connection it stops its children's launch agents and exits. The loop is the
//! reactor's (`reactor.rs`).

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gmpi_pmi::wire::MAX_LINE_LEN;
use gmpi_pmi::{PmiServer, ServerOutput};
use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::agent::{self, tail_text, Agent, Starter, PROXY_FLAG};
use crate::control::{
    self, auth_mac, auth_verify, Conn, ConnError, LaunchSpec, Secret, Side, Stream, ToProxy,
    ToRoot, HEARTBEAT_TIMEOUT,
};
use crate::local::{self, LocalRanks, Owner};
use crate::rank;
use crate::reactor::{Deadlines, Handler, PollSet, Reactor};
use crate::sys::{self, ExitKind};

/// How long the root has to send the secret, complete the handshake and send the job.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Connect timeout for each address of the root.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// After `Done`, how long to wait for the root to close the connection.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// How long the children's launch agents get between SIGTERM and SIGKILL.
const AGENT_GRACE: Duration = Duration::from_secs(1);
/// Stop reading the ranks' output while this much waits to go to the root.
const OUT_HIGH: usize = 8 << 20;

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
    let mut reactor = match Reactor::new() {
        Ok(r) => r,
        Err(e) => {
            say!("{label}: cannot set up signal handling: {e}");
            return 1;
        }
    };
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
    let mut proxy = Proxy::new(*spec, conn, secret, label);
    proxy.start_children();
    proxy.start_ranks();
    reactor.run(&mut proxy);
    i32::from(proxy.root.orphaned)
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
        match sys::wait_fd(stdin.as_fd(), PollFlags::POLLIN, deadline) {
            Ok(false) => continue,
            Ok(true) => {}
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

/// The launch agent of one child proxy.
#[derive(Debug)]
struct ChildAgent {
    host: u32,
    agent: Agent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The ranks run, or end.
    Ranks,
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
    OwnStdin,
    Conn,
    Ranks(local::Token),
    ChildErr(usize),
}

/// The proxy's link to the root: the control connection, where all that this host's
/// ranks do is reported (the [`Owner`] of its [`LocalRanks`]).
#[derive(Debug)]
struct RootLink {
    conn: Option<Conn>,
    /// The root was lost: nothing more is reported, the exit status is 1.
    orphaned: bool,
    done_sent: bool,
}

impl RootLink {
    fn send(&mut self, msg: &ToRoot) {
        if let Some(conn) = &mut self.conn {
            conn.send(msg);
        }
    }
}

impl Owner for RootLink {
    fn pmi(&mut self, event: ServerOutput) {
        match event {
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

    fn pmi_too_long(&mut self, rank: u32) {
        let msg = format!("line longer than {MAX_LINE_LEN} bytes");
        self.send(&ToRoot::PmiError { rank, msg });
    }

    fn output(&mut self, rank: u32, stream: Stream, data: &[u8]) {
        let data = data.to_vec();
        self.send(&ToRoot::Output { rank, stream, data });
    }

    fn stdin_taken(&mut self, bytes: usize, closed: bool) {
        if bytes > 0 {
            self.send(&ToRoot::StdinAck {
                bytes: bytes as u32,
            });
        }
        if closed {
            // Rank 0 closed its stdin: the root stops reading.
            self.send(&ToRoot::StdinClosed);
        }
    }

    fn exited(&mut self, rank: u32, _pid: Pid, how: ExitKind, _server: &PmiServer) {
        self.send(&ToRoot::Exited { rank, status: how });
    }
}

#[derive(Debug)]
struct Proxy {
    spec: LaunchSpec,
    secret: Secret,
    label: String,
    ranks: LocalRanks,
    root: RootLink,
    children: Vec<ChildAgent>,
    own_stdin: io::Stdin,
    /// Our own stdin (the launch channel) is still open.
    own_stdin_open: bool,
    phase: Phase,
}

impl Proxy {
    fn new(spec: LaunchSpec, conn: Conn, secret: Secret, label: String) -> Self {
        let mut server = PmiServer::for_ranks(
            spec.size,
            format!("gmpi_{}", spec.job_id),
            0,
            spec.size,
            &spec.ranks,
        );
        server.set_process_mapping(spec.process_mapping.clone());
        Self {
            ranks: LocalRanks::new(label.clone(), spec.job_id.clone(), server),
            spec,
            secret,
            label,
            root: RootLink {
                conn: Some(conn),
                orphaned: false,
                done_sent: false,
            },
            children: Vec::new(),
            own_stdin: io::stdin(),
            own_stdin_open: true,
            phase: Phase::Ranks,
        }
    }

    fn send(&mut self, msg: &ToRoot) {
        self.root.send(msg);
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
        let secret_hex = self.secret.to_hex();
        for (id, name) in self.spec.children.clone() {
            let (port, addrs) = (self.spec.root_port, &self.spec.root_addrs);
            let argv = agent::proxy_argv(&exe, id as usize, port, addrs);
            match Agent::start(&starter, &name, &argv, &secret_hex) {
                Ok(agent) => self.children.push(ChildAgent { host: id, agent }),
                Err((_, e)) => {
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
            return self.root.send(&msg);
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
                return self.root.send(&msg);
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
        let binder = crate::bind::Binder::for_host(&env, local_size, &self.spec.host_name);
        for (local_rank, &r) in self.spec.ranks.iter().enumerate() {
            let place = rank::Placement {
                rank: r,
                size: self.spec.size,
                local_rank: local_rank as u32,
                local_size,
                node_id: self.spec.node_id,
                job_id: &self.spec.job_id,
                secret_hex: &secret_hex,
                cpus: binder.apply(r, local_rank as u32, &self.spec.host_name),
            };
            if let Err(e) = self.ranks.spawn(&prog, &place) {
                let msg = fail(e.to_string());
                return self.root.send(&msg);
            }
        }
        let pids = self.ranks.pids();
        self.root.send(&ToRoot::Started { pids });
    }

    // ---- children -------------------------------------------------------------------

    fn child_exited(&mut self, j: usize, status: ExitKind) {
        // Kept for the message: the child's own messages and the agent's (`ssh: connect
        // to host ...`).
        self.children[j].agent.read_stderr(|_| {});
        let ChildAgent { host, agent } = &mut self.children[j];
        agent.status = Some(status);
        agent.stdin = None;
        if self.phase == Phase::Ranks && self.ranks.running() {
            let msg = format!(
                "{} (started by host {}) {}{}",
                agent.what,
                self.spec.host_name,
                status.describe(),
                tail_text(&agent.tail)
            );
            let host = *host;
            self.root.send(&ToRoot::ChildFailed { host, msg });
        }
    }

    fn start_stopping(&mut self, now: Instant) {
        for ChildAgent { agent, .. } in &mut self.children {
            agent.stdin = None;
            if agent.status.is_none() {
                sys::signal_group(agent.pid, Signal::SIGTERM);
            }
        }
        self.phase = Phase::Stopping {
            kill_at: now + AGENT_GRACE,
            killed: false,
        };
    }

    // ---- the root -------------------------------------------------------------------

    fn read_own_stdin(&mut self) {
        let mut chunk = [0u8; 1024];
        match nix::unistd::read(self.own_stdin.as_fd(), &mut chunk) {
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
        let Some(conn) = &mut self.root.conn else {
            return;
        };
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
                if !self.ranks.running() {
                    return;
                }
                if let Err(msg) = self.ranks.release_barrier(puts, &mut self.root) {
                    let rank = self.spec.ranks[0];
                    self.root.send(&ToRoot::PmiError { rank, msg });
                }
            }
            ToProxy::Stdin { data } => self.ranks.stdin_data(&data, &mut self.root),
            ToProxy::StdinEof => self.ranks.stdin_end(),
            ToProxy::End => self.ranks.end(Instant::now()),
            ToProxy::Heartbeat => {}
            other => {
                let what: String = format!("{other:?}").chars().take(80).collect();
                self.lost(&format!("unexpected message {what}"));
            }
        }
    }

    /// The root is gone (or closed the connection after our `Done`).
    fn lost(&mut self, why: &str) {
        self.root.conn = None;
        let now = Instant::now();
        if self.root.done_sent {
            if let Phase::Closing { .. } = self.phase {
                self.start_stopping(now);
            }
            return;
        }
        if self.root.orphaned {
            return;
        }
        self.root.orphaned = true;
        say!(
            "{}: lost gmpirun ({why}); ending this host's ranks",
            self.label
        );
        if self.ranks.running() {
            self.ranks.start_ending(now);
        }
    }
}

impl Handler for Proxy {
    type Token = Token;

    fn finished(&self) -> bool {
        self.phase == Phase::Finished
    }

    fn watch<'a>(&'a self, set: &mut PollSet<'a, Token>) {
        if self.own_stdin_open {
            set.read(Token::OwnStdin, self.own_stdin.as_fd());
        }
        if let Some(conn) = &self.root.conn {
            set.watch(Token::Conn, conn.as_fd(), conn.poll_flags());
        }
        // Back-pressure: while the root is slow to take output, let the ranks block.
        let read_output = self
            .root
            .conn
            .as_ref()
            .is_none_or(|c| c.pending() < OUT_HIGH);
        self.ranks.watch(set, Token::Ranks, read_output);
        for (j, child) in self.children.iter().enumerate() {
            if let Some(err) = &child.agent.stderr {
                set.read(Token::ChildErr(j), err.as_fd());
            }
        }
    }

    fn deadlines(&self, next: &mut Deadlines) {
        match self.phase {
            Phase::Ranks => self.ranks.deadlines(next),
            Phase::Closing { until } => next.at(until),
            // Agents may exit without a SIGCHLD we can attribute: look every tick.
            Phase::Stopping { .. } => next.tick(),
            Phase::Finished => {}
        }
        if let Some(conn) = &self.root.conn {
            next.at(conn.next_heartbeat());
            next.at(conn.last_recv + HEARTBEAT_TIMEOUT);
        }
    }

    fn signal(&mut self, sig: Signal) {
        if self.phase != Phase::Ranks {
            return;
        }
        if self.ranks.running() {
            say!(
                "{}: received {}; ending this host's ranks",
                self.label,
                sig.as_str()
            );
        }
        self.ranks.end(Instant::now());
    }

    fn ready(&mut self, token: Token, events: PollFlags) {
        match token {
            Token::OwnStdin => self.read_own_stdin(),
            Token::Conn => {
                if events.contains(PollFlags::POLLOUT) {
                    if let Some(conn) = &mut self.root.conn {
                        let _ = conn.flush();
                    }
                }
                if events.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                    self.read_conn();
                }
            }
            Token::Ranks(t) => self.ranks.ready(t, events, &mut self.root),
            Token::ChildErr(j) => self.children[j].agent.read_stderr(|_| {}),
        }
    }

    fn reaped(&mut self, pid: Pid, how: ExitKind) {
        if self.ranks.reaped(pid, how, &mut self.root) {
            return;
        }
        if let Some(j) = self.children.iter().position(|c| c.agent.pid == pid) {
            self.child_exited(j, how);
        }
    }

    fn poll_failed(&mut self, error: Errno) {
        say!("{}: poll failed: {error}", self.label);
        self.lost("poll failed");
    }

    fn advance(&mut self, now: Instant) {
        if let Some(conn) = &mut self.root.conn {
            conn.keep_alive(now, ToRoot::Heartbeat);
            if conn.silent(now) {
                let why = format!("nothing heard for {} s", HEARTBEAT_TIMEOUT.as_secs());
                self.lost(&why);
            }
        }
        match self.phase {
            Phase::Ranks => {
                let agents: Vec<Pid> = self.children.iter().map(|c| c.agent.pid).collect();
                self.ranks.advance(now, &agents);
                if !self.ranks.done() {
                    return;
                }
                if self.root.conn.is_some() {
                    self.root.send(&ToRoot::Done);
                    self.root.done_sent = true;
                    self.phase = Phase::Closing {
                        until: now + CLOSE_WAIT,
                    };
                } else {
                    self.start_stopping(now);
                }
            }
            Phase::Closing { until } => {
                if self.root.conn.is_none() || now >= until {
                    self.start_stopping(now);
                }
            }
            Phase::Stopping { kill_at, killed } => {
                let running: Vec<Pid> = self
                    .children
                    .iter()
                    .filter(|c| c.agent.status.is_none())
                    .map(|c| c.agent.pid)
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
