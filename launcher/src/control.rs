//! The control connection between gmpirun (the root) and its per-host proxies.
//!
//! Each proxy connects back over TCP to the root and both prove they hold the job secret
//! (which the proxy read from its stdin, the SSH channel, never from a command line):
//!
//! ```text
//! proxy → root   Hello { version, host, nonce_p }
//! root  → proxy  Challenge { nonce_r, mac_r = HMAC(secret, "gmpi-root"  | version | host | nonce_p | nonce_r) }
//! proxy → root   Proof { mac_p = HMAC(secret, "gmpi-proxy" | version | host | nonce_p | nonce_r) }
//! ```
//!
//! HMAC-SHA256 with fresh 32-byte nonces on both sides: neither the secret nor anything
//! replayable crosses the wire, and a proxy obeys nobody but its own root.
//!
//! Then messages flow both ways as frames: a big-endian `u32` length, a kind byte and
//! the payload (integers big-endian, byte strings and lists prefixed by a `u32` count).
//! Decoding is total: a bad frame is a [`ConnError::Malformed`], never a panic. Either
//! side sends a heartbeat when it has been quiet for [`HEARTBEAT_INTERVAL`] and declares
//! the other lost after [`HEARTBEAT_TIMEOUT`] of silence.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use nix::poll::PollFlags;
use sha2::Sha256;

use crate::sys::{self, ExitKind};

/// Version of this protocol; root and proxies are the same binary, so a mismatch means
/// the hosts do not share gmpirun's path after all.
pub const PROTOCOL_VERSION: u32 = 1;
/// Largest frame accepted (a fence of a large job carries every rank's keys).
pub const MAX_FRAME: usize = 64 << 20;
/// Send a heartbeat after this much time without sending anything.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// The other side is lost after this much time without hearing from it.
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);
/// Length of the job secret, in bytes.
pub const SECRET_LEN: usize = 32;

/// The job secret: 32 random bytes, hex-encoded in `GMPI_JOB_SECRET`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub [u8; SECRET_LEN]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A new job's identity: its id (the `/dev/shm` file prefix) and its secret; the
/// message says which could not be made.
pub fn new_job_identity() -> Result<(String, Secret), String> {
    let job_id = crate::sys::random_job_id()
        .map_err(|e| format!("cannot read /dev/urandom for a job id: {e}"))?;
    let secret =
        Secret::random().map_err(|e| format!("cannot get random bytes for the job secret: {e}"))?;
    Ok((job_id, secret))
}

impl Secret {
    /// A fresh secret from the operating system's random source.
    pub fn random() -> io::Result<Self> {
        let mut bytes = [0u8; SECRET_LEN];
        getrandom::fill(&mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Self(bytes))
    }

    /// Lowercase hex, as ranks and proxies receive it.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// Parses 64 hex digits (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Option<Self> {
        let text = text.trim();
        if text.len() != 2 * SECRET_LEN {
            return None;
        }
        let mut bytes = [0u8; SECRET_LEN];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Self(bytes))
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh random nonce.
pub fn nonce() -> io::Result<[u8; 32]> {
    let mut n = [0u8; 32];
    getrandom::fill(&mut n).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(n)
}

/// Which side a MAC proves.
#[derive(Debug, Clone, Copy)]
pub enum Side {
    /// The root's answer in the challenge.
    Root,
    /// The proxy's proof.
    Proxy,
}

fn mac_for(
    secret: &Secret,
    side: Side,
    host: u32,
    nonce_p: &[u8; 32],
    nonce_r: &[u8; 32],
) -> Hmac<Sha256> {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(&secret.0).expect("HMAC takes any key length");
    mac.update(match side {
        Side::Root => b"gmpi-root\0",
        Side::Proxy => b"gmpi-proxy",
    });
    mac.update(&PROTOCOL_VERSION.to_be_bytes());
    mac.update(&host.to_be_bytes());
    mac.update(nonce_p);
    mac.update(nonce_r);
    mac
}

/// The MAC `side` sends for `host` and the two nonces.
pub fn auth_mac(
    secret: &Secret,
    side: Side,
    host: u32,
    nonce_p: &[u8; 32],
    nonce_r: &[u8; 32],
) -> [u8; 32] {
    mac_for(secret, side, host, nonce_p, nonce_r)
        .finalize()
        .into_bytes()
        .into()
}

/// Checks (in constant time) a MAC received from `side`.
pub fn auth_verify(
    secret: &Secret,
    side: Side,
    host: u32,
    nonce_p: &[u8; 32],
    nonce_r: &[u8; 32],
    mac: &[u8; 32],
) -> bool {
    mac_for(secret, side, host, nonce_p, nonce_r)
        .verify_slice(mac)
        .is_ok()
}

// ---- messages ---------------------------------------------------------------------------

/// Which output stream of a rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// What the root tells a proxy to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// `GMPI_JOBID`.
    pub job_id: String,
    /// Ranks in the job.
    pub size: u32,
    /// This host's node id (`GMPI_NODE_ID`).
    pub node_id: u32,
    /// This host's name as given to gmpirun, for messages.
    pub host_name: String,
    /// The global ranks this host runs, in local-rank order.
    pub ranks: Vec<u32>,
    /// PROGRAM as given.
    pub program: Vec<u8>,
    /// Its arguments.
    pub args: Vec<Vec<u8>>,
    /// Variables set for the ranks, in order, before the job's own.
    pub env: Vec<(String, Vec<u8>)>,
    /// gmpirun's working directory.
    pub cwd: Vec<u8>,
    /// The `PMI_process_mapping` value of the job.
    pub process_mapping: String,
    /// Proxies this one starts: `(host id, host name)`.
    pub children: Vec<(u32, String)>,
    /// The launch agent for the children (`ssh` and its options).
    pub agent: Vec<String>,
    /// The root's port and addresses, for the children's command lines.
    pub root_port: u16,
    /// Comma-separated addresses of the root.
    pub root_addrs: String,
}

/// Proxy → root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToRoot {
    /// First message of a connection.
    Hello {
        /// [`PROTOCOL_VERSION`].
        version: u32,
        /// The host id from the proxy's command line.
        host: u32,
        /// The proxy's nonce.
        nonce: [u8; 32],
    },
    /// The proxy's answer to the challenge.
    Proof {
        /// See the module documentation.
        mac: [u8; 32],
    },
    /// Every rank of the host runs; their pids in local-rank order.
    Started {
        /// Process ids.
        pids: Vec<u32>,
    },
    /// The host's ranks could not be started; the message names host and cause.
    StartFailed {
        /// What went wrong.
        msg: String,
    },
    /// Bytes a rank wrote.
    Output {
        /// Global rank.
        rank: u32,
        /// Which stream.
        stream: Stream,
        /// The bytes, as read.
        data: Vec<u8>,
    },
    /// A rank completed PMI init.
    Initialized {
        /// Global rank.
        rank: u32,
    },
    /// A rank completed PMI finalize.
    Finalized {
        /// Global rank.
        rank: u32,
    },
    /// Every rank of the host is in the PMI barrier; the keys they put since the last.
    Fence {
        /// `(key, value)`.
        puts: Vec<(String, String)>,
    },
    /// A rank called PMI abort.
    Abort {
        /// Global rank.
        rank: u32,
        /// Its exit code.
        code: i32,
        /// Its message.
        msg: String,
    },
    /// A rank sent a malformed PMI line.
    PmiError {
        /// Global rank.
        rank: u32,
        /// What was wrong.
        msg: String,
    },
    /// A rank ended.
    Exited {
        /// Global rank.
        rank: u32,
        /// How.
        status: ExitKind,
    },
    /// This many bytes of forwarded stdin were written to rank 0 (or dropped).
    StdinAck {
        /// Byte count.
        bytes: u32,
    },
    /// Rank 0 closed its stdin: stop reading gmpirun's.
    StdinClosed,
    /// The launch agent for child proxy `host` ended before or without it.
    ChildFailed {
        /// The child's host id.
        host: u32,
        /// The agent's exit status and last words.
        msg: String,
    },
    /// Every rank of the host is gone and its shared-memory files are removed.
    Done,
    /// Nothing else to say.
    Heartbeat,
}

/// Root → proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToProxy {
    /// The root's answer to `Hello`.
    Challenge {
        /// The root's nonce.
        nonce: [u8; 32],
        /// See the module documentation.
        mac: [u8; 32],
    },
    /// Start the host's ranks (and child proxies).
    Launch(Box<LaunchSpec>),
    /// Every host reached the barrier: all keys put since the last, job-wide.
    FenceDone {
        /// `(key, value)`.
        puts: Vec<(String, String)>,
    },
    /// Bytes of gmpirun's stdin for rank 0.
    Stdin {
        /// The bytes.
        data: Vec<u8>,
    },
    /// gmpirun's stdin is at its end.
    StdinEof,
    /// End the job: stop the ranks (again: at once), clean up, answer `Done`.
    End,
    /// Nothing else to say.
    Heartbeat,
}

/// A message that travels in frames.
pub trait Message: Sized {
    /// Appends the kind byte and payload.
    fn encode(&self, w: &mut Writer);
    /// Decodes one frame's content (kind byte first).
    fn decode(r: &mut Reader<'_>) -> Result<Self, String>;
}

/// Payload encoder.
#[derive(Debug, Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
    }
    fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    fn fixed(&mut self, v: &[u8; 32]) {
        self.0.extend_from_slice(v);
    }
    fn pairs(&mut self, v: &[(String, String)]) {
        self.u32(v.len() as u32);
        for (k, val) in v {
            self.str(k);
            self.str(val);
        }
    }
}

/// Payload decoder: every read checks the remaining length.
#[derive(Debug)]
pub struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!(
                "frame cut short ({} bytes left, {n} needed)",
                self.0.len()
            ));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn i32(&mut self) -> Result<i32, String> {
        Ok(i32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn str(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?).map_err(|_| "string is not UTF-8".to_owned())
    }
    fn fixed(&mut self) -> Result<[u8; 32], String> {
        Ok(self.take(32)?.try_into().expect("32 bytes"))
    }
    /// A count of items that each take at least `min_item` bytes (bounds allocations by
    /// what the frame can really hold).
    fn count(&mut self, min_item: usize) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item) > self.0.len() {
            return Err(format!("list of {n} items does not fit in the frame"));
        }
        Ok(n)
    }
    fn pairs(&mut self) -> Result<Vec<(String, String)>, String> {
        let n = self.count(8)?;
        (0..n).map(|_| Ok((self.str()?, self.str()?))).collect()
    }
    fn u32s(&mut self) -> Result<Vec<u32>, String> {
        let n = self.count(4)?;
        (0..n).map(|_| self.u32()).collect()
    }
    fn end(&self) -> Result<(), String> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(format!("{n} unexpected bytes at the end of a frame")),
        }
    }
}

impl Message for ToRoot {
    fn encode(&self, w: &mut Writer) {
        match self {
            ToRoot::Hello {
                version,
                host,
                nonce,
            } => {
                w.u8(1);
                w.u32(*version);
                w.u32(*host);
                w.fixed(nonce);
            }
            ToRoot::Proof { mac } => {
                w.u8(2);
                w.fixed(mac);
            }
            ToRoot::Started { pids } => {
                w.u8(3);
                w.u32(pids.len() as u32);
                pids.iter().for_each(|p| w.u32(*p));
            }
            ToRoot::StartFailed { msg } => {
                w.u8(4);
                w.str(msg);
            }
            ToRoot::Output { rank, stream, data } => {
                w.u8(5);
                w.u32(*rank);
                w.u8(match stream {
                    Stream::Stdout => 1,
                    Stream::Stderr => 2,
                });
                w.bytes(data);
            }
            ToRoot::Initialized { rank } => {
                w.u8(6);
                w.u32(*rank);
            }
            ToRoot::Finalized { rank } => {
                w.u8(7);
                w.u32(*rank);
            }
            ToRoot::Fence { puts } => {
                w.u8(8);
                w.pairs(puts);
            }
            ToRoot::Abort { rank, code, msg } => {
                w.u8(9);
                w.u32(*rank);
                w.i32(*code);
                w.str(msg);
            }
            ToRoot::PmiError { rank, msg } => {
                w.u8(10);
                w.u32(*rank);
                w.str(msg);
            }
            ToRoot::Exited { rank, status } => {
                w.u8(11);
                w.u32(*rank);
                match status {
                    ExitKind::Code(c) => {
                        w.u8(0);
                        w.i32(*c);
                    }
                    ExitKind::Signal(s) => {
                        w.u8(1);
                        w.i32(*s);
                    }
                }
            }
            ToRoot::StdinAck { bytes } => {
                w.u8(12);
                w.u32(*bytes);
            }
            ToRoot::ChildFailed { host, msg } => {
                w.u8(13);
                w.u32(*host);
                w.str(msg);
            }
            ToRoot::Done => w.u8(14),
            ToRoot::Heartbeat => w.u8(15),
            ToRoot::StdinClosed => w.u8(16),
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, String> {
        let msg = match r.u8()? {
            1 => ToRoot::Hello {
                version: r.u32()?,
                host: r.u32()?,
                nonce: r.fixed()?,
            },
            2 => ToRoot::Proof { mac: r.fixed()? },
            3 => ToRoot::Started { pids: r.u32s()? },
            4 => ToRoot::StartFailed { msg: r.str()? },
            5 => ToRoot::Output {
                rank: r.u32()?,
                stream: match r.u8()? {
                    1 => Stream::Stdout,
                    2 => Stream::Stderr,
                    s => return Err(format!("unknown output stream {s}")),
                },
                data: r.bytes()?,
            },
            6 => ToRoot::Initialized { rank: r.u32()? },
            7 => ToRoot::Finalized { rank: r.u32()? },
            8 => ToRoot::Fence { puts: r.pairs()? },
            9 => ToRoot::Abort {
                rank: r.u32()?,
                code: r.i32()?,
                msg: r.str()?,
            },
            10 => ToRoot::PmiError {
                rank: r.u32()?,
                msg: r.str()?,
            },
            11 => ToRoot::Exited {
                rank: r.u32()?,
                status: match r.u8()? {
                    0 => ExitKind::Code(r.i32()?),
                    1 => ExitKind::Signal(r.i32()?),
                    k => return Err(format!("unknown exit kind {k}")),
                },
            },
            12 => ToRoot::StdinAck { bytes: r.u32()? },
            13 => ToRoot::ChildFailed {
                host: r.u32()?,
                msg: r.str()?,
            },
            14 => ToRoot::Done,
            15 => ToRoot::Heartbeat,
            16 => ToRoot::StdinClosed,
            k => return Err(format!("unknown message kind {k} from a proxy")),
        };
        r.end()?;
        Ok(msg)
    }
}

impl Message for ToProxy {
    fn encode(&self, w: &mut Writer) {
        match self {
            ToProxy::Challenge { nonce, mac } => {
                w.u8(1);
                w.fixed(nonce);
                w.fixed(mac);
            }
            ToProxy::Launch(s) => {
                w.u8(2);
                w.str(&s.job_id);
                w.u32(s.size);
                w.u32(s.node_id);
                w.str(&s.host_name);
                w.u32(s.ranks.len() as u32);
                s.ranks.iter().for_each(|r| w.u32(*r));
                w.bytes(&s.program);
                w.u32(s.args.len() as u32);
                s.args.iter().for_each(|a| w.bytes(a));
                w.u32(s.env.len() as u32);
                for (k, v) in &s.env {
                    w.str(k);
                    w.bytes(v);
                }
                w.bytes(&s.cwd);
                w.str(&s.process_mapping);
                w.u32(s.children.len() as u32);
                for (id, name) in &s.children {
                    w.u32(*id);
                    w.str(name);
                }
                w.u32(s.agent.len() as u32);
                s.agent.iter().for_each(|a| w.str(a));
                w.u32(u32::from(s.root_port));
                w.str(&s.root_addrs);
            }
            ToProxy::FenceDone { puts } => {
                w.u8(3);
                w.pairs(puts);
            }
            ToProxy::Stdin { data } => {
                w.u8(4);
                w.bytes(data);
            }
            ToProxy::StdinEof => w.u8(5),
            ToProxy::End => w.u8(6),
            ToProxy::Heartbeat => w.u8(7),
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, String> {
        let msg = match r.u8()? {
            1 => ToProxy::Challenge {
                nonce: r.fixed()?,
                mac: r.fixed()?,
            },
            2 => {
                let job_id = r.str()?;
                let size = r.u32()?;
                let node_id = r.u32()?;
                let host_name = r.str()?;
                let ranks = r.u32s()?;
                let program = r.bytes()?;
                let n = r.count(4)?;
                let args = (0..n).map(|_| r.bytes()).collect::<Result<_, _>>()?;
                let n = r.count(8)?;
                let env = (0..n)
                    .map(|_| Ok((r.str()?, r.bytes()?)))
                    .collect::<Result<_, String>>()?;
                let cwd = r.bytes()?;
                let process_mapping = r.str()?;
                let n = r.count(8)?;
                let children = (0..n)
                    .map(|_| Ok((r.u32()?, r.str()?)))
                    .collect::<Result<_, String>>()?;
                let n = r.count(4)?;
                let agent = (0..n).map(|_| r.str()).collect::<Result<_, _>>()?;
                let root_port = u16::try_from(r.u32()?).map_err(|_| "port out of range")?;
                let root_addrs = r.str()?;
                let mut distinct = ranks.clone();
                distinct.sort_unstable();
                distinct.dedup();
                if size == 0
                    || ranks.is_empty()
                    || distinct.len() != ranks.len()
                    || ranks.iter().any(|&x| x >= size)
                {
                    return Err(format!("launch of ranks {ranks:?} in a job of {size}"));
                }
                ToProxy::Launch(Box::new(LaunchSpec {
                    job_id,
                    size,
                    node_id,
                    host_name,
                    ranks,
                    program,
                    args,
                    env,
                    cwd,
                    process_mapping,
                    children,
                    agent,
                    root_port,
                    root_addrs,
                }))
            }
            3 => ToProxy::FenceDone { puts: r.pairs()? },
            4 => ToProxy::Stdin { data: r.bytes()? },
            5 => ToProxy::StdinEof,
            6 => ToProxy::End,
            7 => ToProxy::Heartbeat,
            k => return Err(format!("unknown message kind {k} from gmpirun")),
        };
        r.end()?;
        Ok(msg)
    }
}

/// Encodes `msg` as one frame.
pub fn frame<M: Message>(msg: &M) -> Vec<u8> {
    let mut w = Writer(vec![0; 4]);
    msg.encode(&mut w);
    let len = (w.0.len() - 4) as u32;
    w.0[..4].copy_from_slice(&len.to_be_bytes());
    w.0
}

/// Takes the complete frames at the start of `buf` and decodes them; what is left is an
/// incomplete frame. A frame that is too long or malformed is an error.
pub fn decode_frames<M: Message>(buf: &mut Vec<u8>) -> Result<Vec<M>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some((m, used)) = parse_first(&buf[at..])? {
        out.push(m);
        at += used;
    }
    buf.drain(..at);
    Ok(out)
}

/// Takes and decodes the first frame of `buf` if it is complete.
fn decode_first<M: Message>(buf: &mut Vec<u8>) -> Result<Option<M>, String> {
    Ok(parse_first(buf)?.map(|(m, used)| {
        buf.drain(..used);
        m
    }))
}

/// Decodes the frame at the start of `buf`, if complete: the message and its length.
fn parse_first<M: Message>(buf: &[u8]) -> Result<Option<(M, usize)>, String> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(format!("frame length {len} out of range"));
    }
    if buf.len() - 4 < len {
        return Ok(None);
    }
    let msg = M::decode(&mut Reader(&buf[4..4 + len]))?;
    Ok(Some((msg, 4 + len)))
}

// ---- the connection -------------------------------------------------------------------

/// Why a control connection stopped.
#[derive(Debug)]
pub enum ConnError {
    /// The other side closed it.
    Closed,
    /// The socket failed.
    Io(io::Error),
    /// The other side sent something that is not the protocol.
    Malformed(String),
    /// Nothing arrived in time.
    TimedOut,
}

impl std::fmt::Display for ConnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnError::Closed => f.write_str("connection closed"),
            ConnError::Io(e) => write!(f, "connection error: {e}"),
            ConnError::Malformed(e) => write!(f, "malformed message: {e}"),
            ConnError::TimedOut => f.write_str("timed out"),
        }
    }
}

/// One non-blocking control connection with its buffers and heartbeat clock.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    /// When something last arrived.
    pub last_recv: Instant,
    last_send: Instant,
}

impl Conn {
    /// Wraps a connected stream (made non-blocking, `TCP_NODELAY`).
    pub fn new(stream: TcpStream) -> io::Result<Self> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        let now = Instant::now();
        Ok(Self {
            stream,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            last_recv: now,
            last_send: now,
        })
    }

    /// The peer's address, for messages.
    pub fn peer(&self) -> String {
        self.stream
            .peer_addr()
            .map_or_else(|_| "an unknown address".to_owned(), |a| a.to_string())
    }

    /// Queues `msg` and writes what the socket takes now.
    pub fn send<M: Message>(&mut self, msg: &M) {
        self.outbuf.extend_from_slice(&frame(msg));
        self.last_send = Instant::now();
        let _ = self.flush();
    }

    /// Queues an already encoded frame (one encoding sent to many connections).
    pub fn send_frame(&mut self, frame: &[u8]) {
        self.outbuf.extend_from_slice(frame);
        self.last_send = Instant::now();
        let _ = self.flush();
    }

    /// Writes queued bytes until the socket would block. An error means the connection
    /// is broken (reading will tell the rest).
    pub fn flush(&mut self) -> io::Result<()> {
        while !self.outbuf.is_empty() {
            match self.stream.write(&self.outbuf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.outbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => {
                    self.outbuf.clear();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Bytes queued but not yet written.
    pub fn pending(&self) -> usize {
        self.outbuf.len()
    }

    /// The poll flags this connection needs.
    pub fn poll_flags(&self) -> PollFlags {
        if self.outbuf.is_empty() {
            PollFlags::POLLIN
        } else {
            PollFlags::POLLIN | PollFlags::POLLOUT
        }
    }

    /// Reads what the socket has into the input buffer; `Some` when the stream ended or
    /// failed (bytes read before are kept).
    fn read_available(&mut self) -> Option<ConnError> {
        let mut chunk = [0u8; 65536];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Some(ConnError::Closed),
                Ok(n) => {
                    self.inbuf.extend_from_slice(&chunk[..n]);
                    self.last_recv = Instant::now();
                    if self.inbuf.len() > 2 * MAX_FRAME {
                        // Let the caller decode before reading more.
                        return None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) => return Some(ConnError::Io(e)),
            }
        }
    }

    /// Reads what has arrived and decodes the complete messages. Messages that arrived
    /// before an end of stream are returned with the error; a malformed frame is an
    /// error at once.
    pub fn receive<M: Message>(&mut self) -> (Vec<M>, Option<ConnError>) {
        let error = self.read_available();
        match decode_frames(&mut self.inbuf) {
            Ok(msgs) => (msgs, error),
            Err(e) => (Vec::new(), Some(ConnError::Malformed(e))),
        }
    }

    /// Blocks (polling) until one message arrives or `deadline` passes; for the
    /// handshake, before the event loop runs. Later messages stay buffered.
    pub fn wait_one<M: Message>(&mut self, deadline: Instant) -> Result<M, ConnError> {
        loop {
            if let Some(m) = decode_first(&mut self.inbuf).map_err(ConnError::Malformed)? {
                return Ok(m);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ConnError::TimedOut);
            }
            if self.flush().is_err() {
                return Err(ConnError::Closed);
            }
            if let Err(e) = sys::wait_fd(self.stream.as_fd(), self.poll_flags(), deadline) {
                return Err(ConnError::Io(e.into()));
            }
            if let Some(e) = self.read_available() {
                if let Some(m) = decode_first(&mut self.inbuf).map_err(ConnError::Malformed)? {
                    return Ok(m);
                }
                return Err(e);
            }
        }
    }

    /// Sends a heartbeat if nothing was sent for [`HEARTBEAT_INTERVAL`].
    pub fn keep_alive<M: Message>(&mut self, now: Instant, heartbeat: M) {
        if now.duration_since(self.last_send) >= HEARTBEAT_INTERVAL {
            self.send(&heartbeat);
        }
    }

    /// When the next heartbeat is due.
    pub fn next_heartbeat(&self) -> Instant {
        self.last_send + HEARTBEAT_INTERVAL
    }

    /// Whether the other side has been silent for [`HEARTBEAT_TIMEOUT`].
    pub fn silent(&self, now: Instant) -> bool {
        now.duration_since(self.last_recv) >= HEARTBEAT_TIMEOUT
    }
}

impl AsFd for Conn {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip<M: Message + PartialEq + std::fmt::Debug + Clone>(msgs: &[M]) {
        let mut buf = Vec::new();
        for m in msgs {
            buf.extend_from_slice(&frame(m));
        }
        // Byte by byte: partial frames wait for the rest.
        let mut got = Vec::new();
        let mut acc = Vec::new();
        for b in buf {
            acc.push(b);
            got.extend(decode_frames::<M>(&mut acc).unwrap());
        }
        assert!(acc.is_empty());
        assert_eq!(got, msgs);
    }

    #[test]
    fn messages_roundtrip() {
        roundtrip(&[
            ToRoot::Hello {
                version: 1,
                host: 7,
                nonce: [3; 32],
            },
            ToRoot::Proof { mac: [9; 32] },
            ToRoot::Started { pids: vec![1, 2] },
            ToRoot::StartFailed { msg: "x".into() },
            ToRoot::Output {
                rank: 3,
                stream: Stream::Stderr,
                data: b"a\nb".to_vec(),
            },
            ToRoot::Initialized { rank: 1 },
            ToRoot::Finalized { rank: 1 },
            ToRoot::Fence {
                puts: vec![("k".into(), "v".into()), ("".into(), "".into())],
            },
            ToRoot::Abort {
                rank: 2,
                code: -5,
                msg: "boom".into(),
            },
            ToRoot::PmiError {
                rank: 0,
                msg: "bad".into(),
            },
            ToRoot::Exited {
                rank: 4,
                status: ExitKind::Signal(9),
            },
            ToRoot::Exited {
                rank: 4,
                status: ExitKind::Code(3),
            },
            ToRoot::StdinAck { bytes: 10 },
            ToRoot::StdinClosed,
            ToRoot::ChildFailed {
                host: 3,
                msg: "ssh".into(),
            },
            ToRoot::Done,
            ToRoot::Heartbeat,
        ]);
        roundtrip(&[
            ToProxy::Challenge {
                nonce: [1; 32],
                mac: [2; 32],
            },
            ToProxy::Launch(Box::new(LaunchSpec {
                job_id: "00ff".into(),
                size: 4,
                node_id: 1,
                host_name: "n1".into(),
                ranks: vec![1, 3],
                program: b"/bin/sh".to_vec(),
                args: vec![b"-c".to_vec(), vec![0xff, 0]],
                env: vec![("A".into(), b"b=c".to_vec())],
                cwd: b"/tmp".to_vec(),
                process_mapping: "(vector,(0,2,1))".into(),
                children: vec![(5, "n5".into())],
                agent: vec!["ssh".into(), "-i".into(), "/k".into()],
                root_port: 4242,
                root_addrs: "10.0.0.1,127.0.0.1".into(),
            })),
            ToProxy::FenceDone {
                puts: vec![("a".into(), "b".into())],
            },
            ToProxy::Stdin {
                data: b"input".to_vec(),
            },
            ToProxy::StdinEof,
            ToProxy::End,
            ToProxy::Heartbeat,
        ]);
    }

    #[test]
    fn exit_descriptions() {
        assert_eq!(ExitKind::Code(255).describe(), "exited with status 255");
        assert_eq!(
            ExitKind::Signal(9).describe(),
            "was killed by signal 9 (SIGKILL)"
        );
    }

    #[test]
    fn bad_frames_are_errors() {
        for bad in [
            &[0u8, 0, 0, 0][..],                                  // empty frame
            &[0xff, 0xff, 0xff, 0xff, 1],                         // too long
            &[0, 0, 0, 1, 99],                                    // unknown kind
            &[0, 0, 0, 2, 14, 0],                                 // trailing byte
            &[0, 0, 0, 3, 6, 0, 0],                               // cut short
            &[0, 0, 0, 9, 3, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0], // list too long
            &[0, 0, 0, 6, 5, 0, 0, 0, 0, 7],                      // bad stream
        ] {
            let mut buf = bad.to_vec();
            assert!(decode_frames::<ToRoot>(&mut buf).is_err(), "{bad:?}");
        }
        let mut buf = vec![0, 0, 0, 1, 42];
        assert!(decode_frames::<ToProxy>(&mut buf).is_err());
    }

    #[test]
    fn auth_needs_the_secret_and_the_side() {
        let s = Secret::random().unwrap();
        assert_eq!(Secret::from_hex(&s.to_hex()), Some(s.clone()));
        assert_eq!(Secret::from_hex("abc"), None);
        assert_eq!(Secret::from_hex(&"zz".repeat(32)), None);
        let (np, nr) = (nonce().unwrap(), nonce().unwrap());
        let mac = auth_mac(&s, Side::Proxy, 3, &np, &nr);
        assert!(auth_verify(&s, Side::Proxy, 3, &np, &nr, &mac));
        assert!(!auth_verify(&s, Side::Root, 3, &np, &nr, &mac));
        assert!(!auth_verify(&s, Side::Proxy, 4, &np, &nr, &mac));
        assert!(!auth_verify(&s, Side::Proxy, 3, &nr, &np, &mac));
        let other = Secret::random().unwrap();
        assert!(!auth_verify(&other, Side::Proxy, 3, &np, &nr, &mac));
        assert!(!format!("{s:?}").contains(&s.to_hex()[..8]));
    }

    proptest::proptest! {
        #[test]
        fn decoding_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let mut a = bytes.clone();
            let _ = decode_frames::<ToRoot>(&mut a);
            let mut b = bytes;
            let _ = decode_frames::<ToProxy>(&mut b);
        }

        #[test]
        fn any_frame_body_is_decoded_or_refused(kind in 0u8..20, body in proptest::collection::vec(proptest::num::u8::ANY, 0..120)) {
            let mut buf = ((body.len() + 1) as u32).to_be_bytes().to_vec();
            buf.push(kind);
            buf.extend_from_slice(&body);
            let mut a = buf.clone();
            let _ = decode_frames::<ToRoot>(&mut a);
            let _ = decode_frames::<ToProxy>(&mut buf);
        }
    }
}
