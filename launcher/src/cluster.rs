//! gmpirun across hosts: the root of a job whose ranks run under per-host proxies.
//!
//! Start-up. The root listens on an ephemeral TCP port and starts one proxy per host
//! (gmpirun's own binary in its hidden proxy mode, see `proxy.rs`): directly for this
//! host, through the launch agent (`ssh`) for the others. It starts the first
//! `--fanout` remote hosts itself; each of those starts its share of the rest, and so
//! on (a tree: launch time grows with the logarithm of the host count). Inside a Slurm
//! allocation the root instead starts every host's proxy, this host's included, as a
//! Slurm step (`srun`, one per host, all from the root: srun only asks slurmd to start
//! the task, so there is no tree). Every proxy
//! reads the job secret from its stdin, connects back to the root, and both prove they
//! hold the secret (`control.rs`); then the root sends it its ranks and the job.
//!
//! Running. The proxies serve PMI to their ranks locally and report to the root: output
//! (forwarded line-wise here, `--tag-output` as on one node), PMI init/finalize, the end
//! of each host's share of a barrier with the keys put (the root joins them and sends
//! the union to every host: `PmiServer::for_ranks`), aborts, and exits, which the root
//! judges exactly as the local job does. gmpirun's stdin goes to rank 0's proxy.
//!
//! Failures. A host whose proxy has not called back within [`CALLBACK_TIMEOUT`] (or
//! whose launch agent fails first: `ssh` gives up after its connect timeout), a proxy
//! connection that closes or falls silent for `HEARTBEAT_TIMEOUT`, a failing rank, a
//! signal or `--timeout` end the job: one message naming the host or rank, then `End`
//! to every proxy, which stops its ranks, removes the job's `/dev/shm` files on its
//! host and answers `Done`. The root then closes the connections and reaps the launch
//! agents. Exit status as for a local job; 1 when a host cannot be reached or is lost.
//!
//! The loop is the reactor's (`reactor.rs`); what is the root's own: the proxies'
//! connections and launch agents, the barriers joined across hosts and the broadcast
//! of their keys, the judgement of the whole job.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::agent::{self, tail_text, Agent, Starter, TAIL_MAX};
use crate::control::{
    self, auth_mac, auth_verify, Conn, ConnError, LaunchSpec, Secret, Side, Stream, ToProxy,
    ToRoot, HEARTBEAT_TIMEOUT,
};
use crate::hosts::{self, HostRanks};
use crate::job::{JobSpec, EXIT_CANNOT_START, EXIT_TIMEOUT};
use crate::output::{LineForwarder, Sink};
use crate::rank::{self, Outcome};
use crate::reactor::{Deadlines, Handler, PollSet, Reactor};
use crate::sys::{self, ExitKind};

/// How long a host's proxy has to call back once its launch was asked for.
pub const CALLBACK_TIMEOUT: Duration = Duration::from_secs(8);
/// How long an accepted connection has to complete the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the proxies have, after `End`, to report their ranks gone.
const END_TIMEOUT: Duration = Duration::from_secs(6);
/// How long launch agents have to exit by themselves once the connections are closed.
const AGENT_GRACE: Duration = Duration::from_secs(2);
/// Most bytes of stdin in flight to rank 0's proxy.
const STDIN_WINDOW: usize = 1 << 20;
/// Stop reading the proxies while this much output waits for gmpirun's stdout/stderr.
const OUT_PAUSE: usize = 16 << 20;
/// Exit status when a host cannot be reached or is lost.
pub const EXIT_HOST_FAILED: i32 = 1;

/// A job across hosts.
#[derive(Debug)]
pub struct ClusterSpec<'a> {
    /// Program, arguments, `-x`, `--tag-output`, `--timeout`; `np` is the total.
    pub job: &'a JobSpec,
    /// The hosts that run ranks, in node-id order.
    pub placement: Vec<HostRanks>,
    /// How proxies are started: [`Starter::RemoteShell`] (the launch agent's words, see
    /// `agent::agent_argv`) for the hosts other than this one, which is started
    /// directly; or [`Starter::Srun`] for every host.
    pub starter: Starter,
    /// Most proxies one process starts.
    pub fanout: usize,
}

/// Runs the job to its end and returns gmpirun's exit status.
pub fn run(spec: ClusterSpec<'_>) -> i32 {
    let (job_id, secret) = match crate::control::new_job_identity() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("gmpirun: {e}");
            return 1;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gmpirun: cannot find its own executable for the proxies: {e}");
            return 1;
        }
    };
    let listener = match TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("gmpirun: cannot listen for the proxies' connections: {e}");
            return 1;
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    // Before the output thread starts: it must not take the signals.
    let mut reactor = match Reactor::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gmpirun: cannot set up signal handling: {e}");
            return 1;
        }
    };

    let mut root = Root::new(spec, job_id, secret, exe, listener, port);
    root.start();
    reactor.run(&mut root);
    root.finish()
}

/// Where one host stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostState {
    /// Its proxy has not called back; `deadline` once its launch was asked for.
    Waiting { deadline: Option<Instant> },
    /// Its proxy is connected and runs the ranks.
    Up,
    /// Its proxy reported every rank gone.
    Done,
    /// Lost, never started, or given up on.
    Gone,
}

#[derive(Debug)]
struct Host {
    name: String,
    ranks: Vec<u32>,
    local: bool,
    /// Hosts whose proxies this host's proxy starts.
    children: Vec<usize>,
    /// The launch agent (or local proxy) the root started for it.
    agent: Option<Agent>,
    /// Partial line of the agent's stderr, printed once complete (after the call-back).
    line: Vec<u8>,
    conn: Option<Conn>,
    state: HostState,
    /// Its share of the current PMI barrier is complete.
    fenced: bool,
    /// Its ranks' pids, in local-rank order (once started).
    pids: Vec<u32>,
}

/// An accepted connection still in its handshake.
#[derive(Debug)]
struct Pending {
    conn: Conn,
    deadline: Instant,
    /// After `Hello`: the host it claims, both nonces.
    hello: Option<(u32, [u8; 32], [u8; 32])>,
}

#[derive(Debug, Clone, Copy, Default)]
struct RankInfo {
    host: usize,
    initialized: bool,
    finalized: bool,
    exited: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// `End` sent; waiting for every proxy's `Done`.
    Ending {
        deadline: Instant,
    },
    /// Connections closed; waiting for the launch agents to exit.
    Closing {
        term_at: Instant,
        killed: bool,
    },
    Done,
}

#[derive(Debug, Clone, Copy)]
enum Token {
    Stdin,
    Listener,
    Pending(usize),
    Host(usize),
    AgentErr(usize),
}

#[derive(Debug)]
struct Root<'a> {
    spec: &'a JobSpec,
    job_id: String,
    secret: Secret,
    exe: PathBuf,
    listener: TcpListener,
    port: u16,
    /// gmpirun's non-loopback addresses, comma-separated, for remote proxies.
    addrs: String,
    /// How proxies are started (see [`ClusterSpec::starter`]).
    starter: Starter,
    fanout: usize,
    hosts: Vec<Host>,
    pending: Vec<Pending>,
    ranks: Vec<RankInfo>,
    out: Vec<(LineForwarder, LineForwarder)>,
    /// gmpirun's stdout and stderr: the ranks' output and gmpirun's messages, in order.
    sink: Sink,
    /// Keys put in the current barrier, and which host put each key ever.
    fence_puts: Vec<(String, String)>,
    key_host: HashMap<String, usize>,
    process_mapping: String,
    /// gmpirun's stdin, for rank 0's proxy: whether it is still open, and the bytes
    /// sent but not yet acknowledged.
    stdin: io::Stdin,
    stdin_open: bool,
    stdin_in_flight: usize,
    phase: Phase,
    outcome: Outcome,
    started: Instant,
}

impl<'a> Root<'a> {
    fn new(
        spec: ClusterSpec<'a>,
        job_id: String,
        secret: Secret,
        exe: PathBuf,
        listener: TcpListener,
        port: u16,
    ) -> Self {
        let me = sys::hostname();
        let my_addrs = sys::local_addresses();
        let srun = matches!(spec.starter, Starter::Srun(_));
        // Remote proxies try these in order; a proxy on this host uses loopback.
        let mut reachable: Vec<String> = my_addrs
            .iter()
            .filter(|a| !a.is_loopback())
            .map(|a| a.to_string())
            .collect();
        if reachable.is_empty() {
            reachable.push(Ipv4Addr::LOCALHOST.to_string());
        }
        let addrs = reachable.join(",");
        let mut hosts: Vec<Host> = spec
            .placement
            .iter()
            .map(|hr| Host {
                name: hr.name.clone(),
                ranks: hr.ranks.clone(),
                // Under srun, this host's proxy is a Slurm step like the others.
                local: !srun && hosts::is_local(&hr.name, &me, &my_addrs),
                children: Vec::new(),
                agent: None,
                line: Vec::new(),
                conn: None,
                state: HostState::Waiting { deadline: None },
                fenced: false,
                pids: Vec::new(),
            })
            .collect();
        // The launch tree over the remote hosts: the root starts the first `fanout`,
        // remote host k (k ≥ fanout) is started by remote host (k - fanout) / fanout.
        let remote: Vec<usize> = (0..hosts.len()).filter(|&h| !hosts[h].local).collect();
        let fanout = if srun { usize::MAX } else { spec.fanout.max(1) };
        for (k, &h) in remote.iter().enumerate().skip(fanout) {
            let parent = remote[(k - fanout) / fanout];
            hosts[parent].children.push(h);
        }
        let np = spec.job.np as usize;
        let mut ranks = vec![RankInfo::default(); np];
        for (h, host) in hosts.iter().enumerate() {
            for &r in &host.ranks {
                ranks[r as usize].host = h;
            }
        }
        let node_of: Vec<u32> = ranks.iter().map(|r| r.host as u32).collect();
        let tag = spec.job.tag_output;
        Self {
            spec: spec.job,
            job_id,
            secret,
            exe,
            listener,
            port,
            addrs,
            starter: spec.starter,
            fanout,
            hosts,
            pending: Vec::new(),
            ranks,
            out: (0..np as u32)
                .map(|r| (LineForwarder::new(r, tag), LineForwarder::new(r, tag)))
                .collect(),
            sink: Sink::new(),
            fence_puts: Vec::new(),
            key_host: HashMap::new(),
            process_mapping: hosts::process_mapping(&node_of),
            stdin: io::stdin(),
            stdin_open: true,
            stdin_in_flight: 0,
            phase: Phase::Running,
            outcome: Outcome::default(),
            started: Instant::now(),
        }
    }

    // ---- start-up -------------------------------------------------------------------

    /// Starts the proxies the root starts itself: local hosts and the first remote ones.
    fn start(&mut self) {
        let mut remote_started = 0;
        for h in 0..self.hosts.len() {
            if self.phase != Phase::Running {
                return;
            }
            if self.hosts[h].local {
                self.start_host(h, Starter::Local);
            } else if remote_started < self.fanout {
                remote_started += 1;
                self.start_host(h, self.starter.clone());
            }
        }
        self.started = Instant::now();
    }

    fn start_host(&mut self, h: usize, starter: Starter) {
        let addrs = match starter {
            Starter::Local => Ipv4Addr::LOCALHOST.to_string(),
            Starter::RemoteShell(_) | Starter::Srun(_) => self.addrs.clone(),
        };
        let argv = agent::proxy_argv(&self.exe, h, self.port, &addrs);
        let name = self.hosts[h].name.clone();
        let agent = match Agent::start(&starter, &name, &argv, &self.secret.to_hex()) {
            Ok(a) => a,
            Err((program, e)) => {
                self.hosts[h].state = HostState::Gone;
                self.fail(
                    EXIT_HOST_FAILED,
                    format!("cannot start the proxy on host {name}: cannot run {program}: {e}"),
                );
                return;
            }
        };
        let host = &mut self.hosts[h];
        host.agent = Some(agent);
        host.state = HostState::Waiting {
            deadline: Some(Instant::now() + CALLBACK_TIMEOUT),
        };
    }

    /// The variables every rank gets before `-x` and its own: gmpirun's `PATH`,
    /// `LD_LIBRARY_PATH` and `GMPI_*` (remote ranks start from their login environment,
    /// where these may differ).
    fn forwarded_env(&self) -> Vec<(String, Vec<u8>)> {
        let mut env: Vec<(String, Vec<u8>)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_vec())))
            .filter(|(k, _)| k == "PATH" || k == "LD_LIBRARY_PATH" || k.starts_with("GMPI_"))
            .collect();
        env.sort();
        env.extend(
            self.spec
                .exports
                .iter()
                .map(|(k, v)| (k.clone(), v.as_bytes().to_vec())),
        );
        env
    }

    fn launch_spec(&self, h: usize) -> LaunchSpec {
        let host = &self.hosts[h];
        LaunchSpec {
            job_id: self.job_id.clone(),
            size: self.spec.np,
            node_id: h as u32,
            host_name: host.name.clone(),
            ranks: host.ranks.clone(),
            program: self.spec.program.as_bytes().to_vec(),
            args: self
                .spec
                .args
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect(),
            env: self.forwarded_env(),
            cwd: std::env::current_dir()
                .map(|d| d.into_os_string().into_vec())
                .unwrap_or_else(|_| b"/".to_vec()),
            process_mapping: self.process_mapping.clone(),
            children: host
                .children
                .iter()
                .map(|&c| (c as u32, self.hosts[c].name.clone()))
                .collect(),
            // Children are only started through a remote shell (under srun the root
            // starts every host, and none has children).
            agent: match &self.starter {
                Starter::RemoteShell(agent) => agent.clone(),
                Starter::Local | Starter::Srun(_) => Vec::new(),
            },
            root_port: self.port,
            root_addrs: self.addrs.clone(),
        }
    }

    /// Whether to read gmpirun's stdin now: rank 0's proxy is up and has room.
    fn stdin_wanted(&self) -> bool {
        let host0 = &self.hosts[self.ranks[0].host];
        self.stdin_open
            && self.phase == Phase::Running
            && host0.state == HostState::Up
            && self.stdin_in_flight < STDIN_WINDOW
    }

    // ---- launch agents --------------------------------------------------------------

    fn agent_exited(&mut self, h: usize, status: ExitKind) {
        self.read_agent_stderr(h);
        let Some(agent) = &mut self.hosts[h].agent else {
            return;
        };
        agent.status = Some(status);
        agent.stdin = None;
        // What its proxy said before the end is in the socket: take it first.
        if self.hosts[h].conn.is_some() {
            self.read_host(h);
        }
        let host = &self.hosts[h];
        let Some(agent) = &host.agent else { return };
        let why = format!(
            "{} {}{}",
            agent.what,
            status.describe(),
            tail_text(&agent.tail)
        );
        match host.state {
            HostState::Waiting { .. } => {
                let name = host.name.clone();
                self.hosts[h].state = HostState::Gone;
                self.fail(
                    EXIT_HOST_FAILED,
                    format!("cannot start the proxy on host {name}: {why}"),
                );
            }
            HostState::Up => self.lose_host(h, &why),
            HostState::Done | HostState::Gone => {}
        }
    }

    fn read_agent_stderr(&mut self, h: usize) {
        let up = !matches!(self.hosts[h].state, HostState::Waiting { .. });
        let host = &mut self.hosts[h];
        let Some(agent) = host.agent.as_mut().filter(|a| a.stderr.is_some()) else {
            return;
        };
        let line = &mut host.line;
        agent.read_stderr(|bytes| line.extend_from_slice(bytes));
        // Once the proxy runs, what the agent or the proxy says goes to our stderr;
        // before, it is kept for the message if the start fails.
        if up {
            while let Some(end) = line.iter().position(|&b| b == b'\n') {
                let text: Vec<u8> = line.drain(..=end).collect();
                let text = String::from_utf8_lossy(&text);
                let msg = format!("gmpirun: host {}: {}\n", host.name, text.trim_end());
                let _ = self.sink.err().write_all(msg.as_bytes());
            }
        }
        if line.len() > TAIL_MAX {
            line.clear();
        }
    }

    // ---- connections ----------------------------------------------------------------

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => match Conn::new(stream) {
                    Ok(conn) => self.pending.push(Pending {
                        conn,
                        deadline: Instant::now() + HANDSHAKE_TIMEOUT,
                        hello: None,
                    }),
                    Err(e) => self.note(format!("warning: cannot set up a connection: {e}")),
                },
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    fn refuse(&mut self, i: usize, why: &str) {
        let p = self.pending.swap_remove(i);
        self.note(format!(
            "warning: refused a control connection from {}: {why}",
            p.conn.peer()
        ));
    }

    fn pending_ready(&mut self, i: usize) {
        // Earlier refusals may have moved the entries: a stale index is skipped.
        if i >= self.pending.len() {
            return;
        }
        let _ = self.pending[i].conn.flush();
        let (msgs, err) = self.pending[i].conn.receive::<ToRoot>();
        for msg in msgs {
            let p = &mut self.pending[i];
            match (msg, p.hello) {
                (
                    ToRoot::Hello {
                        version,
                        host,
                        nonce,
                    },
                    None,
                ) => {
                    if version != control::PROTOCOL_VERSION {
                        return self.refuse(
                            i,
                            &format!(
                                "protocol version {version}, this gmpirun speaks {}",
                                control::PROTOCOL_VERSION
                            ),
                        );
                    }
                    let nonce_r = match control::nonce() {
                        Ok(n) => n,
                        Err(e) => return self.refuse(i, &format!("no random bytes: {e}")),
                    };
                    let mac = auth_mac(&self.secret, Side::Root, host, &nonce, &nonce_r);
                    p.hello = Some((host, nonce, nonce_r));
                    p.conn.send(&ToProxy::Challenge {
                        nonce: nonce_r,
                        mac,
                    });
                }
                (ToRoot::Proof { mac }, Some((host, nonce_p, nonce_r))) => {
                    if !auth_verify(&self.secret, Side::Proxy, host, &nonce_p, &nonce_r, &mac) {
                        return self.refuse(i, "it does not hold the job secret");
                    }
                    let h = host as usize;
                    let waiting = self.hosts.get(h).is_some_and(|x| {
                        matches!(x.state, HostState::Waiting { .. }) && x.conn.is_none()
                    });
                    if !waiting {
                        // A proxy the job has given up on: it ends when refused.
                        let _ = self.pending.swap_remove(i);
                        return;
                    }
                    let p = self.pending.swap_remove(i);
                    self.host_up(h, p.conn);
                    return;
                }
                _ => return self.refuse(i, "unexpected message in the handshake"),
            }
        }
        if let Some(e) = err {
            self.refuse(i, &e.to_string());
        }
    }

    /// Host `h`'s proxy proved itself: give it its job and its children a deadline.
    /// (Hosts only wait while the job runs: ending gives up on the others.)
    fn host_up(&mut self, h: usize, mut conn: Conn) {
        let now = Instant::now();
        conn.send(&ToProxy::Launch(Box::new(self.launch_spec(h))));
        for c in self.hosts[h].children.clone() {
            if let HostState::Waiting { deadline: None } = self.hosts[c].state {
                self.hosts[c].state = HostState::Waiting {
                    deadline: Some(now + CALLBACK_TIMEOUT),
                };
            }
        }
        let host = &mut self.hosts[h];
        host.conn = Some(conn);
        host.state = HostState::Up;
        // Its agent's words so far were start-up noise or nothing; later ones are shown.
        host.line.clear();
    }

    fn read_host(&mut self, h: usize) {
        let Some(conn) = &mut self.hosts[h].conn else {
            return;
        };
        let (msgs, err) = conn.receive::<ToRoot>();
        for msg in msgs {
            self.host_message(h, msg);
            if self.hosts[h].conn.is_none() {
                return;
            }
        }
        if let Some(e) = err {
            match (self.hosts[h].state, &e) {
                (HostState::Done, ConnError::Closed) => self.hosts[h].conn = None,
                _ => self.lose_host(h, &e.to_string()),
            }
        }
    }

    /// Host `h`'s proxy is gone before reporting its ranks gone.
    fn lose_host(&mut self, h: usize, why: &str) {
        let host = &mut self.hosts[h];
        if matches!(host.state, HostState::Done | HostState::Gone) {
            host.conn = None;
            return;
        }
        host.state = HostState::Gone;
        host.conn = None;
        let msg = format!(
            "lost the proxy on host {} (ranks {}): {why}",
            host.name,
            rank_list(&host.ranks)
        );
        if !self.outcome.failed() {
            self.fail(EXIT_HOST_FAILED, msg);
        } else {
            self.note(format!("warning: {msg}"));
        }
    }

    fn host_message(&mut self, h: usize, msg: ToRoot) {
        let owns =
            |root: &Self, rank: u32| root.ranks.get(rank as usize).is_some_and(|r| r.host == h);
        match msg {
            ToRoot::Started { pids } => {
                if pids.len() == self.hosts[h].ranks.len() {
                    self.hosts[h].pids = pids;
                }
            }
            ToRoot::StartFailed { msg } => self.fail(EXIT_CANNOT_START, msg),
            ToRoot::Output { rank, stream, data } if owns(self, rank) => {
                let (o, e) = &mut self.out[rank as usize];
                match stream {
                    Stream::Stdout => o.push(&data, &mut self.sink.out()),
                    Stream::Stderr => e.push(&data, &mut self.sink.err()),
                }
            }
            ToRoot::Initialized { rank } if owns(self, rank) => {
                self.ranks[rank as usize].initialized = true;
                if self.phase == Phase::Running {
                    if let Some((code, what)) = self.outcome.initialized(rank) {
                        self.fail(code, what);
                    }
                }
            }
            ToRoot::Finalized { rank } if owns(self, rank) => {
                self.ranks[rank as usize].finalized = true;
            }
            ToRoot::Fence { puts } => self.fence(h, puts),
            ToRoot::Abort { rank, code, msg } if owns(self, rank) => {
                let on = format!(" on host {}", self.hosts[h].name);
                let (code, what) = rank::abort_failure(rank, &on, code, &msg);
                self.fail(code, what);
            }
            ToRoot::PmiError { rank, msg } if owns(self, rank) => {
                let name = &self.hosts[h].name;
                self.fail(
                    1,
                    format!("rank {rank} on host {name} sent a malformed PMI message: {msg}"),
                );
            }
            ToRoot::Exited { rank, status } if owns(self, rank) => self.rank_exited(rank, status),
            ToRoot::StdinAck { bytes } => {
                self.stdin_in_flight = self.stdin_in_flight.saturating_sub(bytes as usize);
            }
            ToRoot::StdinClosed => self.stdin_open = false,
            ToRoot::ChildFailed { host, msg } => {
                let c = host as usize;
                let is_child = self.hosts[h].children.contains(&c);
                if is_child && matches!(self.hosts[c].state, HostState::Waiting { .. }) {
                    self.hosts[c].state = HostState::Gone;
                    let name = self.hosts[c].name.clone();
                    if !self.outcome.failed() {
                        self.fail(
                            EXIT_HOST_FAILED,
                            format!("cannot start the proxy on host {name}: {msg}"),
                        );
                    }
                }
            }
            ToRoot::Done => self.hosts[h].state = HostState::Done,
            ToRoot::Heartbeat => {}
            other => {
                let what = format!("{other:?}");
                let what: String = what.chars().take(80).collect();
                self.lose_host(h, &format!("unexpected message {what}"));
            }
        }
    }

    /// Host `h`'s ranks are all in the PMI barrier.
    fn fence(&mut self, h: usize, puts: Vec<(String, String)>) {
        if self.phase != Phase::Running {
            return;
        }
        if self.hosts[h].fenced {
            return self.lose_host(h, "entered the PMI barrier twice");
        }
        for (key, value) in puts {
            if let Some(&other) = self.key_host.get(&key) {
                let (a, b) = (self.hosts[other].name.clone(), self.hosts[h].name.clone());
                return self.fail(
                    1,
                    format!("PMI key `{key}` was put by ranks on host {a} and on host {b}"),
                );
            }
            self.key_host.insert(key.clone(), h);
            self.fence_puts.push((key, value));
        }
        self.hosts[h].fenced = true;
        if self.hosts.iter().all(|x| x.fenced) {
            let puts = std::mem::take(&mut self.fence_puts);
            for host in &mut self.hosts {
                host.fenced = false;
            }
            self.broadcast(&ToProxy::FenceDone { puts });
        }
    }

    fn broadcast(&mut self, msg: &ToProxy) {
        let frame = control::frame(msg);
        for host in &mut self.hosts {
            if host.state == HostState::Up {
                if let Some(conn) = &mut host.conn {
                    conn.send_frame(&frame);
                }
            }
        }
    }

    fn rank_exited(&mut self, rank: u32, status: ExitKind) {
        self.ranks[rank as usize].exited = true;
        if self.outcome.failed() || self.phase != Phase::Running {
            return;
        }
        let info = self.ranks[rank as usize];
        let host = &self.hosts[info.host];
        let pid = host
            .ranks
            .iter()
            .position(|&r| r == rank)
            .and_then(|i| host.pids.get(i).copied());
        let other = self
            .ranks
            .iter()
            .enumerate()
            .find(|(r, x)| *r as u32 != rank && x.initialized)
            .map(|(r, _)| r as u32);
        let verdict = rank::judge_exit(
            rank,
            pid,
            Some(&host.name),
            status,
            info.initialized,
            info.finalized,
            other,
        );
        if let Some((code, what)) = self.outcome.judged(rank, verdict) {
            self.fail(code, what);
        }
    }

    // ---- stdin ----------------------------------------------------------------------

    fn read_stdin(&mut self) {
        let mut chunk = vec![0u8; 65536];
        let h = self.ranks[0].host;
        match nix::unistd::read(self.stdin.as_fd(), &mut chunk) {
            Ok(0) => {
                self.stdin_open = false;
                if let Some(conn) = &mut self.hosts[h].conn {
                    conn.send(&ToProxy::StdinEof);
                }
            }
            Ok(n) => {
                self.stdin_in_flight += n;
                if let Some(conn) = &mut self.hosts[h].conn {
                    conn.send(&ToProxy::Stdin {
                        data: chunk[..n].to_vec(),
                    });
                }
            }
            Err(Errno::EINTR | Errno::EAGAIN) => {}
            // Closed or unreadable stdin: rank 0 simply sees end of file.
            Err(_) => {
                self.stdin_open = false;
                if let Some(conn) = &mut self.hosts[h].conn {
                    conn.send(&ToProxy::StdinEof);
                }
            }
        }
    }

    // ---- failure and the end --------------------------------------------------------

    /// A message of gmpirun's own, in order with the ranks' output on stderr.
    fn note(&self, msg: String) {
        let _ = self
            .sink
            .err()
            .write_all(format!("gmpirun: {msg}\n").as_bytes());
    }

    /// Records the first failure: one message, the exit status, and the job starts ending.
    fn fail(&mut self, code: i32, what: String) {
        if !self.outcome.fail(code) {
            return;
        }
        if !what.is_empty() {
            self.note(format!("{what}; ending the job"));
        }
        if self.phase == Phase::Running {
            self.start_ending(Instant::now());
        }
    }

    fn start_ending(&mut self, now: Instant) {
        self.stdin_open = false;
        self.phase = Phase::Ending {
            deadline: now + END_TIMEOUT,
        };
        self.broadcast(&ToProxy::End);
        for host in &mut self.hosts {
            if let HostState::Waiting { .. } = host.state {
                // Not called back: stop its agent (a child of another proxy is stopped
                // by that proxy).
                host.state = HostState::Gone;
                if let Some(agent) = &host.agent {
                    sys::signal_group(agent.pid, Signal::SIGTERM);
                }
            }
        }
    }

    /// Every proxy is done: close the connections and the agents' stdin, so proxies
    /// and agents exit by themselves.
    fn start_closing(&mut self, now: Instant) {
        self.pending.clear();
        for host in &mut self.hosts {
            if let Some(conn) = &mut host.conn {
                let _ = conn.flush();
            }
            host.conn = None;
            if let Some(agent) = &mut host.agent {
                agent.stdin = None;
                // The agent of a lost host may wait on a dead network: do not wait.
                if host.state == HostState::Gone && agent.status.is_none() {
                    sys::signal_group(agent.pid, Signal::SIGTERM);
                }
            }
        }
        self.phase = Phase::Closing {
            term_at: now + AGENT_GRACE,
            killed: false,
        };
    }

    fn finish(mut self) -> i32 {
        for (o, e) in &mut self.out {
            o.finish(&mut self.sink.out());
            e.finish(&mut self.sink.err());
        }
        for h in 0..self.hosts.len() {
            self.read_agent_stderr(h);
        }
        sys::remove_shm_segments(&format!("gmpi-{}", self.job_id));
        self.sink.close();
        self.outcome.status()
    }
}

impl Handler for Root<'_> {
    type Token = Token;

    fn finished(&self) -> bool {
        self.phase == Phase::Done
    }

    fn watch<'a>(&'a self, set: &mut PollSet<'a, Token>) {
        if self.stdin_wanted() {
            set.read(Token::Stdin, self.stdin.as_fd());
        }
        if self.phase == Phase::Running || matches!(self.phase, Phase::Ending { .. }) {
            set.read(Token::Listener, self.listener.as_fd());
        }
        for (i, p) in self.pending.iter().enumerate() {
            set.watch(Token::Pending(i), p.conn.as_fd(), p.conn.poll_flags());
        }
        // Back-pressure: while gmpirun's own output is backed up, leave the proxies'
        // messages in their sockets (their senders then stop reading the ranks).
        let paused = self.sink.queued() > OUT_PAUSE;
        for (h, host) in self.hosts.iter().enumerate() {
            if let Some(conn) = &host.conn {
                let mut events = conn.poll_flags();
                if paused {
                    events.remove(PollFlags::POLLIN);
                }
                set.watch(Token::Host(h), conn.as_fd(), events);
            }
            if let Some(err) = host.agent.as_ref().and_then(|a| a.stderr.as_ref()) {
                set.read(Token::AgentErr(h), err.as_fd());
            }
        }
    }

    fn deadlines(&self, next: &mut Deadlines) {
        match self.phase {
            Phase::Running => next.at_opt(self.spec.timeout.map(|t| self.started + t)),
            Phase::Ending { deadline } => next.at(deadline),
            // Agents may exit without a SIGCHLD we can attribute: look every tick.
            Phase::Closing { .. } => next.tick(),
            Phase::Done => {}
        }
        for p in &self.pending {
            next.at(p.deadline);
        }
        for host in &self.hosts {
            if let HostState::Waiting { deadline } = host.state {
                next.at_opt(deadline);
            }
            if let Some(conn) = &host.conn {
                next.at(conn.next_heartbeat());
                next.at(conn.last_recv + HEARTBEAT_TIMEOUT);
            }
        }
        for (o, e) in &self.out {
            next.at_opt(o.flush_deadline());
            next.at_opt(e.flush_deadline());
        }
        if self.sink.queued() > OUT_PAUSE {
            // Look again soon whether the output has drained.
            next.tick();
        }
    }

    fn signal(&mut self, sig: Signal) {
        if !self.outcome.failed() {
            self.fail(128 + sig as i32, format!("received {}", sig.as_str()));
        } else if let Phase::Ending { .. } = self.phase {
            // Asked again: the proxies stop waiting politely.
            self.broadcast(&ToProxy::End);
        }
    }

    fn ready(&mut self, token: Token, events: PollFlags) {
        match token {
            Token::Stdin => self.read_stdin(),
            Token::Listener => self.accept(),
            Token::Pending(i) => self.pending_ready(i),
            Token::Host(h) => {
                if events.contains(PollFlags::POLLOUT) {
                    if let Some(conn) = &mut self.hosts[h].conn {
                        let _ = conn.flush();
                    }
                }
                if events.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                    self.read_host(h);
                }
            }
            Token::AgentErr(h) => self.read_agent_stderr(h),
        }
    }

    fn reaped(&mut self, pid: Pid, how: ExitKind) {
        let found = self
            .hosts
            .iter()
            .position(|host| host.agent.as_ref().is_some_and(|a| a.pid == pid));
        if let Some(h) = found {
            self.agent_exited(h, how);
        }
    }

    fn poll_failed(&mut self, error: Errno) {
        self.note(format!("poll failed: {error}; ending the job"));
        self.fail(1, String::new());
    }

    fn advance(&mut self, now: Instant) {
        for (o, e) in &mut self.out {
            o.flush_if_quiet(now, &mut self.sink.out());
            e.flush_if_quiet(now, &mut self.sink.err());
        }
        let paused = self.sink.queued() > OUT_PAUSE;
        if let Phase::Ending { deadline } = &mut self.phase {
            if paused {
                // The proxies' confirmations wait behind output we are not
                // reading yet: the time to confirm starts once we read again.
                *deadline = (*deadline).max(now + END_TIMEOUT);
            }
        }
        for host in &mut self.hosts {
            if let Some(conn) = &mut host.conn {
                conn.keep_alive(now, ToProxy::Heartbeat);
                if paused {
                    // Not reading is our choice, not their silence.
                    conn.last_recv = now;
                }
            }
        }
        // Stale handshakes.
        let mut i = 0;
        while i < self.pending.len() {
            if now >= self.pending[i].deadline {
                self.refuse(i, "no handshake in time");
            } else {
                i += 1;
            }
        }
        // Call-backs and heartbeats.
        for h in 0..self.hosts.len() {
            match self.hosts[h].state {
                HostState::Waiting {
                    deadline: Some(deadline),
                } if now >= deadline => {
                    let host = &mut self.hosts[h];
                    host.state = HostState::Gone;
                    let tail = host
                        .agent
                        .as_ref()
                        .map_or(String::new(), |a| tail_text(&a.tail));
                    if let Some(agent) = &host.agent {
                        sys::signal_group(agent.pid, Signal::SIGTERM);
                    }
                    let msg = format!(
                        "cannot start the proxy on host {}: no call-back within {} s{tail}",
                        host.name,
                        CALLBACK_TIMEOUT.as_secs()
                    );
                    self.fail(EXIT_HOST_FAILED, msg);
                }
                HostState::Up | HostState::Done
                    if self.hosts[h].conn.as_ref().is_some_and(|c| c.silent(now)) =>
                {
                    let why = format!(
                        "nothing heard for {} s (host down or network lost)",
                        HEARTBEAT_TIMEOUT.as_secs()
                    );
                    self.lose_host(h, &why);
                }
                _ => {}
            }
        }
        match self.phase {
            Phase::Running => {
                if let Some(limit) = self.spec.timeout {
                    if now >= self.started + limit {
                        let running: Vec<u32> = (0..self.ranks.len() as u32)
                            .filter(|&r| !self.ranks[r as usize].exited)
                            .collect();
                        self.note(rank::timeout_message(limit, &running));
                        self.fail(EXIT_TIMEOUT, String::new());
                        return;
                    }
                }
                if self.ranks.iter().all(|r| r.exited) {
                    // Clean finish: the proxies still sweep up what the ranks left.
                    self.start_ending(now);
                }
            }
            Phase::Ending { deadline } => {
                let settled = |x: &Host| matches!(x.state, HostState::Done | HostState::Gone);
                if self.hosts.iter().all(settled) || now >= deadline {
                    let unsettled: Vec<String> = self
                        .hosts
                        .iter()
                        .filter(|x| !settled(x))
                        .map(|x| x.name.clone())
                        .collect();
                    for name in unsettled {
                        self.note(format!(
                            "warning: host {name} did not confirm the end of its ranks"
                        ));
                    }
                    self.start_closing(now);
                }
            }
            Phase::Closing { term_at, killed } => {
                let running: Vec<Pid> = self
                    .hosts
                    .iter()
                    .filter_map(|x| x.agent.as_ref())
                    .filter(|a| a.status.is_none())
                    .map(|a| a.pid)
                    .collect();
                if running.is_empty() {
                    self.phase = Phase::Done;
                } else if now >= term_at + AGENT_GRACE && killed {
                    // They die with gmpirun anyway (parent-death signal).
                    for pid in running {
                        sys::signal_group(pid, Signal::SIGKILL);
                    }
                    self.phase = Phase::Done;
                } else if now >= term_at && !killed {
                    for pid in running {
                        sys::signal_group(pid, Signal::SIGTERM);
                    }
                    self.phase = Phase::Closing {
                        term_at,
                        killed: true,
                    };
                }
            }
            Phase::Done => {}
        }
    }
}

/// `0,1,4-7` style list of ranks.
fn rank_list(ranks: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if j > i + 1 {
            format!("{}-{}", ranks[i], ranks[j])
        } else if j == i + 1 {
            format!("{},{}", ranks[i], ranks[j])
        } else {
            ranks[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lists() {
        assert_eq!(rank_list(&[0, 1, 2, 3, 5, 7, 8]), "0-3,5,7,8");
        assert_eq!(rank_list(&[4]), "4");
    }
}
