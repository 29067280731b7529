//! The rank's end: a blocking PMI-1 client.
//!
//! [`PmiClient::from_env`] connects the way MPICH's simple PMI does: `PMI_FD` (an
//! inherited socket, with `PMI_RANK`/`PMI_SIZE`) or `PMI_PORT=host:port` with `PMI_ID`
//! (TCP, with the `initack` exchange that tells rank and size). Every request waits for its
//! reply except `abort`; a closed connection or an unexpected reply is an error, never a
//! hang or a panic.
//!
//! Values longer than the server's `vallen_max` are split transparently: the parts go to
//! `KEY#0` .. `KEY#N-1` and `KEY` holds the marker `gmpi-split:N`; [`PmiClient::get`]
//! reassembles them. So keys may not contain `#`, and a value that itself begins with the
//! marker is always stored split (so it reads back unchanged).
//!
//! The same client serves under every launcher, so it keeps to what the strictest PMI-1
//! server accepts: no request line over 1024 bytes (Slurm's `pmi2` plugin reads each
//! request with one 1024-byte `read`), no stored value of `vallen_max` bytes or more
//! (Hydra keeps `vallen_max - 1`), `init` spelled exactly `cmd=init pmi_version=1
//! pmi_subversion=1` (Slurm matches it with `sscanf`); and it accepts what they answer:
//! `appnum=-1` (Slurm), a `JOBID.STEPID` kvsname, `get_result rc=1` with no value for a
//! missing key, and a failed `barrier_out rc=N` (an error, not a silent success).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::PmiError;
use crate::wire::{is_valid_value, Command, MAX_LINE_LEN, PMI_SUBVERSION, PMI_VERSION};

/// Marker stored under a key whose value was split across several keys.
const SPLIT_MARKER: &str = "gmpi-split:";
/// Separator between a key and the index of one of its parts.
const PART_SEPARATOR: char = '#';
/// Smallest `vallen_max` the client works with (the split marker must fit).
const MIN_VALLEN: usize = 32;
/// Longest request line the client sends, newline included. MPICH's simple PMI reads
/// lines into buffers of this size (`PMIU_MAXLINE`), and Slurm's `pmi2` plugin reads each
/// PMI-1 request with one `read` of this many bytes: a longer line arrives cut in two and
/// its tail is taken for a malformed request (`src/plugins/mpi/pmi2/pmi1.c`).
pub(crate) const REQUEST_LINE_MAX: usize = 1024;
/// Room left in a `put` line for the part suffix of a split value (`#65535`) and slack.
const PART_SUFFIX_ROOM: usize = 8;
/// Most parts one value may be split into (bounds what a `get` will fetch).
const MAX_PARTS: usize = 1 << 16;

/// Set once `PMI_FD` has been adopted, so it is never owned twice.
static FD_ADOPTED: AtomicBool = AtomicBool::new(false);

/// The connection to the PMI server.
#[derive(Debug)]
enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(buf),
            Conn::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Unix(s) => s.write(buf),
            Conn::Tcp(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Unix(s) => s.flush(),
            Conn::Tcp(s) => s.flush(),
        }
    }
}

/// The limits the server announced in `cmd=maxes`.
#[derive(Debug, Clone, Copy)]
struct Maxes {
    keylen: usize,
    vallen: usize,
}

/// A connected, initialized PMI-1 client; see the module documentation.
#[derive(Debug)]
pub struct PmiClient {
    conn: BufReader<Conn>,
    rank: u32,
    size: u32,
    appnum: i32,
    universe_size: u32,
    kvsname: String,
    maxes: Maxes,
    finalized: bool,
}

impl PmiClient {
    /// Connects as the environment says. `Ok(None)` when neither `PMI_FD` nor `PMI_PORT`
    /// is set: the program was not started by a PMI launcher and runs as a singleton.
    ///
    /// `PMI_FD` may be adopted once per process; a second call fails.
    pub fn from_env() -> Result<Option<Self>, PmiError> {
        if let Some(fd) = env_var("PMI_FD")? {
            let fd: i32 = parse_env("PMI_FD", &fd)?;
            let rank = required_env_num("PMI_RANK")?;
            let size = required_env_num("PMI_SIZE")?;
            if FD_ADOPTED.swap(true, Ordering::SeqCst) {
                return Err(PmiError::Env(
                    "PMI_FD was already adopted by an earlier PmiClient::from_env".to_owned(),
                ));
            }
            let fd = crate::sys::adopt_inherited_fd(fd)?;
            return Self::from_fd(fd, rank, size).map(Some);
        }
        if let Some(port) = env_var("PMI_PORT")? {
            let id = required_env_num("PMI_ID")?;
            return Self::connect_tcp(&port, id).map(Some);
        }
        Ok(None)
    }

    /// Runs the PMI handshake over `fd`, a connected stream socket to the server, for
    /// rank `rank` of `size` (as `PMI_RANK`/`PMI_SIZE` tell in `PMI_FD` mode).
    pub fn from_fd(fd: OwnedFd, rank: u32, size: u32) -> Result<Self, PmiError> {
        check_rank(rank, size)?;
        Self::handshake(Conn::Unix(UnixStream::from(fd)), rank, size)
    }

    /// Connects to the server at `addr` (`host:port`, as `PMI_PORT` holds it), identifies
    /// as `pmiid` (`PMI_ID`), learns rank and size from the server, then runs the PMI
    /// handshake.
    pub fn connect_tcp(addr: &str, pmiid: u32) -> Result<Self, PmiError> {
        let stream = TcpStream::connect(addr).map_err(|e| {
            PmiError::Io(io::Error::new(
                e.kind(),
                format!("cannot connect to PMI_PORT={addr}: {e}"),
            ))
        })?;
        // Small request/reply lines: do not let Nagle delay them.
        stream.set_nodelay(true)?;
        let mut conn = BufReader::new(Conn::Tcp(stream));
        send(&mut conn, &Command::new("initack").arg("pmiid", pmiid))?;
        expect(&mut conn, "initack")?;
        let (mut size, mut rank) = (None, None);
        for _ in 0..3 {
            let set = expect(&mut conn, "set")?;
            if set.get("size").is_some() {
                size = Some(set.require_num::<u32>("size")?);
            } else if set.get("rank").is_some() {
                rank = Some(set.require_num::<u32>("rank")?);
            }
        }
        let (Some(rank), Some(size)) = (rank, size) else {
            return Err(PmiError::Protocol(
                "the initack exchange did not give both rank and size".to_owned(),
            ));
        };
        check_rank(rank, size)?;
        let Conn::Tcp(stream) = conn.into_inner() else {
            unreachable!("constructed as TCP above")
        };
        Self::handshake(Conn::Tcp(stream), rank, size)
    }

    /// `init`, `get_maxes`, `get_my_kvsname`, `get_appnum`, `get_universe_size`.
    fn handshake(conn: Conn, rank: u32, size: u32) -> Result<Self, PmiError> {
        let mut conn = BufReader::new(conn);
        send(
            &mut conn,
            &Command::new("init")
                .arg("pmi_version", PMI_VERSION)
                .arg("pmi_subversion", PMI_SUBVERSION),
        )?;
        let reply = expect(&mut conn, "response_to_init")?;
        check_rc(&reply, "init")?;

        send(&mut conn, &Command::new("get_maxes"))?;
        let reply = expect(&mut conn, "maxes")?;
        check_rc(&reply, "get_maxes")?;
        let maxes = Maxes {
            keylen: reply.require_num("keylen_max")?,
            vallen: reply.require_num("vallen_max")?,
        };
        let kvsname_max: usize = reply.require_num("kvsname_max")?;
        if maxes.vallen <= MIN_VALLEN || maxes.keylen < 2 {
            return Err(PmiError::Protocol(format!(
                "server limits too small to work with (keylen_max={}, vallen_max={})",
                maxes.keylen, maxes.vallen
            )));
        }

        send(&mut conn, &Command::new("get_my_kvsname"))?;
        let reply = expect(&mut conn, "my_kvsname")?;
        check_rc(&reply, "get_my_kvsname")?;
        let kvsname = reply.require("kvsname")?.to_owned();
        if kvsname.is_empty() || kvsname.len() > kvsname_max {
            return Err(PmiError::Protocol(format!(
                "kvsname {kvsname:?} is empty or longer than kvsname_max={kvsname_max}"
            )));
        }
        // Every put must leave room for a useful piece of value on one request line.
        if put_overhead(kvsname.len(), maxes.keylen.min(KEY_ROOM)) + MIN_VALLEN > REQUEST_LINE_MAX {
            return Err(PmiError::Protocol(format!(
                "kvsname {kvsname:?} is too long to leave room for values on a {REQUEST_LINE_MAX}-byte request line"
            )));
        }

        send(&mut conn, &Command::new("get_appnum"))?;
        let reply = expect(&mut conn, "appnum")?;
        check_rc(&reply, "get_appnum")?;
        let appnum = reply.require_num("appnum")?;

        send(&mut conn, &Command::new("get_universe_size"))?;
        let reply = expect(&mut conn, "universe_size")?;
        // Some servers cannot tell (rc!=0 or size=-1): the job size is the best answer.
        let universe_size = match (reply.get("rc"), reply.get("size")) {
            (Some(rc), _) if rc != "0" => size,
            (_, Some(s)) => s.parse::<u32>().ok().filter(|&u| u >= size).unwrap_or(size),
            (_, None) => size,
        };

        Ok(Self {
            conn,
            rank,
            size,
            appnum,
            universe_size,
            kvsname,
            maxes,
            finalized: false,
        })
    }

    /// This process's rank in the job, `0..size()`.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The application number (index of this executable in an MPMD launch).
    pub fn appnum(&self) -> i32 {
        self.appnum
    }

    /// The universe size (at least `size()`).
    pub fn universe_size(&self) -> u32 {
        self.universe_size
    }

    /// The name of the job's key-value space.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// Publishes `key=value` to the job's key-value space; it is visible to other ranks
    /// after the next [`PmiClient::fence`].
    ///
    /// Keys are non-empty, at most the server's `keylen_max` bytes, and contain no
    /// whitespace, control character, `=` or `#`. Values contain no whitespace, control
    /// character or `=` (portable across PMI servers), and may be of any length.
    pub fn put(&mut self, key: &str, value: &str) -> Result<(), PmiError> {
        self.check_open()?;
        self.check_key(key)?;
        if value.contains('=') || !is_valid_value(value) {
            return Err(PmiError::InvalidValue {
                key: key.to_owned(),
                reason: "values may not contain whitespace, control characters or `=`".to_owned(),
            });
        }
        let limit = self.value_limit(key);
        if limit < MIN_VALLEN {
            return Err(PmiError::InvalidKey {
                key: key.to_owned(),
                reason: format!(
                    "too long to leave room for a value on a {REQUEST_LINE_MAX}-byte request line"
                ),
            });
        }
        if value.len() <= limit && !value.starts_with(SPLIT_MARKER) {
            return self.put_raw(key, value);
        }
        let parts = split_at_char_boundaries(value, limit);
        if parts.len() > MAX_PARTS {
            return Err(PmiError::InvalidValue {
                key: key.to_owned(),
                reason: format!("value of {} bytes is too long", value.len()),
            });
        }
        let last_part_key = format!("{key}{PART_SEPARATOR}{}", parts.len() - 1);
        if last_part_key.len() > self.maxes.keylen {
            return Err(PmiError::InvalidKey {
                key: key.to_owned(),
                reason: format!(
                    "too long to hold a value of {} bytes split in {} parts (keylen_max={})",
                    value.len(),
                    parts.len(),
                    self.maxes.keylen
                ),
            });
        }
        for (i, part) in parts.iter().enumerate() {
            self.put_raw(&format!("{key}{PART_SEPARATOR}{i}"), part)?;
        }
        self.put_raw(key, &format!("{SPLIT_MARKER}{}", parts.len()))
    }

    /// Reads `key` from the job's key-value space (reassembling a split value).
    /// [`PmiError::NotFound`] when no rank has put it before the last fence.
    pub fn get(&mut self, key: &str) -> Result<String, PmiError> {
        self.check_open()?;
        self.check_key(key)?;
        let value = self.get_raw(key)?;
        let Some(count) = value.strip_prefix(SPLIT_MARKER) else {
            return Ok(value);
        };
        let count: usize = count
            .parse()
            .ok()
            .filter(|&n| (1..=MAX_PARTS).contains(&n))
            .ok_or_else(|| {
                PmiError::Protocol(format!("key `{key}` holds a bad split marker `{value}`"))
            })?;
        let mut whole = String::new();
        for i in 0..count {
            let part_key = format!("{key}{PART_SEPARATOR}{i}");
            match self.get_raw(&part_key) {
                Ok(part) => whole.push_str(&part),
                Err(PmiError::NotFound(_)) => {
                    return Err(PmiError::Protocol(format!(
                        "split value of `{key}` lacks part `{part_key}`"
                    )))
                }
                Err(e) => return Err(e),
            }
        }
        Ok(whole)
    }

    /// Waits until every rank of the job has called `fence` (PMI `barrier_in` /
    /// `barrier_out`); puts made before are then visible to every rank.
    pub fn fence(&mut self) -> Result<(), PmiError> {
        self.check_open()?;
        send(&mut self.conn, &Command::new("barrier_in"))?;
        let reply = expect(&mut self.conn, "barrier_out")?;
        // Slurm reports a failed exchange between its daemons here (rc and msg).
        check_rc(&reply, "barrier_in")
    }

    /// Asks the launcher to end the whole job with exit code `code`, reporting `msg`
    /// (percent-encoded on the wire, see [`crate::wire::escape_text`]). Does not wait: the caller should exit
    /// right after.
    pub fn abort(&mut self, code: i32, msg: &str) -> Result<(), PmiError> {
        self.check_open()?;
        let mut cmd = Command::new("abort").arg("exitcode", code);
        // The whole line must fit one request read (Slurm acts on no abort it cannot
        // parse): cut the escaped message at a character, never inside an escape.
        let room = REQUEST_LINE_MAX - cmd.encode().len() - " msg=".len();
        let mut escaped = String::new();
        for c in msg.chars() {
            let e = crate::wire::escape_text(c.encode_utf8(&mut [0u8; 4]));
            if escaped.len() + e.len() > room {
                break;
            }
            escaped.push_str(&e);
        }
        if !escaped.is_empty() {
            cmd = cmd.arg("msg", escaped);
        }
        send(&mut self.conn, &cmd)
    }

    /// Tells the launcher this rank is done with PMI and will exit normally. Further calls
    /// fail with [`PmiError::Finalized`].
    pub fn finalize(&mut self) -> Result<(), PmiError> {
        self.check_open()?;
        send(&mut self.conn, &Command::new("finalize"))?;
        expect(&mut self.conn, "finalize_ack")?;
        self.finalized = true;
        Ok(())
    }

    fn check_open(&self) -> Result<(), PmiError> {
        if self.finalized {
            Err(PmiError::Finalized)
        } else {
            Ok(())
        }
    }

    fn check_key(&self, key: &str) -> Result<(), PmiError> {
        let reason = if key.is_empty() {
            "keys may not be empty".to_owned()
        } else if key.len() > self.maxes.keylen {
            format!(
                "longer than the server's keylen_max={} bytes",
                self.maxes.keylen
            )
        } else if key.contains(['=', PART_SEPARATOR]) || !is_valid_value(key) {
            "keys may not contain whitespace, control characters, `=` or `#`".to_owned()
        } else {
            return Ok(());
        };
        Err(PmiError::InvalidKey {
            key: key.to_owned(),
            reason,
        })
    }

    /// Largest value (bytes) one `put` of `key` may carry: below the server's
    /// `vallen_max` (MPICH's Hydra keeps `vallen_max - 1` bytes: the limit counts C's
    /// terminating NUL), and never so long that the request line would exceed
    /// [`REQUEST_LINE_MAX`].
    fn value_limit(&self, key: &str) -> usize {
        (self.maxes.vallen - 1)
            .min(REQUEST_LINE_MAX.saturating_sub(put_overhead(self.kvsname.len(), key.len())))
    }

    fn put_raw(&mut self, key: &str, value: &str) -> Result<(), PmiError> {
        send(
            &mut self.conn,
            &Command::new("put")
                .arg("kvsname", &self.kvsname)
                .arg("key", key)
                .arg("value", value),
        )?;
        let reply = expect(&mut self.conn, "put_result")?;
        check_rc(&reply, "put")
    }

    fn get_raw(&mut self, key: &str) -> Result<String, PmiError> {
        send(
            &mut self.conn,
            &Command::new("get")
                .arg("kvsname", &self.kvsname)
                .arg("key", key),
        )?;
        let reply = expect(&mut self.conn, "get_result")?;
        if reply.get("rc") != Some("0") {
            return Err(PmiError::NotFound(key.to_owned()));
        }
        Ok(reply.require("value")?.to_owned())
    }
}

/// Longest key [`put_overhead`] is checked with at handshake: keys are at most
/// `keylen_max` bytes, and gmpi's own keys are far shorter than this.
const KEY_ROOM: usize = 64;

/// Bytes of a `put` request line other than the value:
/// `cmd=put kvsname=K key=KEY#NNNNN value=` and the newline.
fn put_overhead(kvsname_len: usize, key_len: usize) -> usize {
    "cmd=put kvsname= key= value=\n".len() + kvsname_len + key_len + PART_SUFFIX_ROOM
}

/// Writes one command.
fn send(conn: &mut BufReader<Conn>, cmd: &Command) -> Result<(), PmiError> {
    let conn = conn.get_mut();
    conn.write_all(cmd.encode().as_bytes())
        .map_err(|e| match e.kind() {
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
                PmiError::Closed("while sending a request")
            }
            _ => PmiError::Io(e),
        })?;
    conn.flush()?;
    Ok(())
}

/// Reads one line and checks that it is `cmd=name`.
fn expect(conn: &mut BufReader<Conn>, name: &str) -> Result<Command, PmiError> {
    let mut line = Vec::new();
    let limit = (MAX_LINE_LEN + 1) as u64;
    let n = match conn.by_ref().take(limit).read_until(b'\n', &mut line) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
            return Err(PmiError::Closed("while waiting for a reply"))
        }
        Err(e) => return Err(e.into()),
    };
    if n == 0 {
        return Err(PmiError::Closed("while waiting for a reply"));
    }
    if line.last() != Some(&b'\n') {
        if line.len() > MAX_LINE_LEN {
            return Err(PmiError::LineTooLong {
                len: line.len(),
                max: MAX_LINE_LEN,
            });
        }
        return Err(PmiError::Closed("in the middle of a reply"));
    }
    let cmd = Command::decode(&line)?;
    if cmd.name() != name {
        return Err(PmiError::Protocol(format!(
            "expected `cmd={name}`, got `{cmd}`"
        )));
    }
    Ok(cmd)
}

/// Fails with [`PmiError::Refused`] when the reply carries an `rc` other than 0.
fn check_rc(reply: &Command, request: &str) -> Result<(), PmiError> {
    match reply.get("rc") {
        None | Some("0") => Ok(()),
        Some(rc) => Err(PmiError::Refused {
            cmd: request.to_owned(),
            rc: rc.parse().unwrap_or(-1),
            msg: reply.get("msg").unwrap_or("").to_owned(),
        }),
    }
}

fn check_rank(rank: u32, size: u32) -> Result<(), PmiError> {
    if size == 0 || rank >= size {
        return Err(PmiError::Env(format!(
            "rank {rank} is not in a job of size {size}"
        )));
    }
    Ok(())
}

/// `Some(value)` of a set variable, `None` when unset or empty.
fn env_var(name: &str) -> Result<Option<String>, PmiError> {
    match std::env::var(name) {
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(PmiError::Env(format!("{name} is not valid UTF-8")))
        }
    }
}

fn parse_env<T: std::str::FromStr>(name: &str, raw: &str) -> Result<T, PmiError> {
    raw.trim()
        .parse()
        .map_err(|_| PmiError::Env(format!("{name}={raw} is not a valid number")))
}

fn required_env_num<T: std::str::FromStr>(name: &str) -> Result<T, PmiError> {
    let raw = env_var(name)?.ok_or_else(|| {
        PmiError::Env(format!(
            "{name} is not set (the launcher must set it along with PMI_FD / PMI_PORT)"
        ))
    })?;
    parse_env(name, &raw)
}

/// Splits `value` into pieces of at most `limit` bytes, never inside a character.
fn split_at_char_boundaries(value: &str, limit: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = value;
    while !rest.is_empty() {
        let mut end = limit.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (part, tail) = rest.split_at(end);
        parts.push(part);
        rest = tail;
    }
    if parts.is_empty() {
        parts.push("");
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{PmiServer, ServerOutput};
    use std::collections::HashMap;
    use std::sync::mpsc;
    use std::thread;

    /// A threaded harness: rank `r` talks over a real socketpair to a server thread.
    fn run_job<F>(size: u32, rank_main: F) -> (Vec<ServerEvent>, Vec<Result<(), PmiError>>)
    where
        F: Fn(PmiClient) -> Result<(), PmiError> + Send + Sync + Clone + 'static,
    {
        let (tx, rx) = mpsc::channel::<(u32, Option<Vec<u8>>)>();
        let mut server_ends = HashMap::new();
        let mut ranks = Vec::new();
        for r in 0..size {
            let (client, server) = UnixStream::pair().unwrap();
            let reader = BufReader::new(server.try_clone().unwrap());
            server_ends.insert(r, server);
            let tx = tx.clone();
            thread::spawn(move || {
                let mut reader = reader;
                loop {
                    let mut line = Vec::new();
                    match reader.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => {
                            let _ = tx.send((r, None));
                            return;
                        }
                        Ok(_) => {
                            let _ = tx.send((r, Some(line)));
                        }
                    }
                }
            });
            let f = rank_main.clone();
            ranks.push(thread::spawn(move || {
                f(PmiClient::from_fd(OwnedFd::from(client), r, size)?)
            }));
        }
        drop(tx);
        let mut server = PmiServer::new(size, "kvs_test".into(), 0, size);
        let mut events = Vec::new();
        let mut open = size;
        while open > 0 {
            let (r, line) = rx.recv().unwrap();
            let Some(line) = line else {
                open -= 1;
                server_ends.remove(&r);
                continue;
            };
            for o in server.handle(r, &line) {
                match o {
                    ServerOutput::Reply { rank, line } => {
                        if let Some(s) = server_ends.get_mut(&rank) {
                            let _ = s.write_all(line.as_bytes());
                        }
                    }
                    ServerOutput::Abort { rank, code, msg } => {
                        events.push(ServerEvent::Abort(rank, code, msg));
                        // Like the launcher: the job ends, connections close.
                        for (_, s) in server_ends.drain() {
                            let _ = s.shutdown(std::net::Shutdown::Both);
                        }
                    }
                    ServerOutput::Finalized { rank } => events.push(ServerEvent::Finalized(rank)),
                    ServerOutput::ProtocolError { rank, error } => {
                        events.push(ServerEvent::Error(rank, error.to_string()))
                    }
                    _ => {}
                }
            }
        }
        let results = ranks.into_iter().map(|h| h.join().unwrap()).collect();
        (events, results)
    }

    #[derive(Debug, PartialEq)]
    enum ServerEvent {
        Finalized(u32),
        Abort(u32, i32, String),
        Error(u32, String),
    }

    fn big_value(rank: u32) -> String {
        (0..10_240)
            .map(|i| char::from(b'a' + ((i + rank as usize) % 26) as u8))
            .collect()
    }

    #[test]
    fn put_fence_get_across_ranks() {
        let (events, results) = run_job(4, |mut c| {
            assert_eq!(c.kvsname(), "kvs_test");
            assert_eq!(c.size(), 4);
            assert_eq!(c.universe_size(), 4);
            assert_eq!(c.appnum(), 0);
            let r = c.rank();
            c.put(&format!("card-{r}"), &format!("addr:{r}"))?;
            c.put(&format!("big-{r}"), &big_value(r))?;
            c.put(&format!("marker-{r}"), "gmpi-split:3")?;
            c.fence()?;
            for p in 0..c.size() {
                assert_eq!(c.get(&format!("card-{p}"))?, format!("addr:{p}"));
                assert_eq!(c.get(&format!("big-{p}"))?, big_value(p));
                assert_eq!(c.get(&format!("marker-{p}"))?, "gmpi-split:3");
            }
            assert_eq!(c.get("PMI_process_mapping")?, "(vector,(0,1,4))");
            assert!(matches!(c.get("nope"), Err(PmiError::NotFound(k)) if k == "nope"));
            c.fence()?;
            c.finalize()?;
            assert!(matches!(c.fence(), Err(PmiError::Finalized)));
            Ok(())
        });
        for r in results {
            r.unwrap();
        }
        assert_eq!(events.len(), 4);
        assert!(events
            .iter()
            .all(|e| matches!(e, ServerEvent::Finalized(_))));
    }

    #[test]
    fn bad_keys_values_and_duplicates() {
        let (_, results) = run_job(1, |mut c| {
            for key in ["", "a b", "a=b", "a#1", "a\n", &"k".repeat(65)] {
                assert!(
                    matches!(c.put(key, "v"), Err(PmiError::InvalidKey { key: k, .. }) if k == key),
                    "{key:?}"
                );
            }
            for value in ["a b", "a=b", "x\ny"] {
                assert!(matches!(
                    c.put("k", value),
                    Err(PmiError::InvalidValue { key, .. }) if key == "k"
                ));
            }
            c.put("k", "")?;
            assert!(matches!(
                c.put("k", "again"),
                Err(PmiError::Refused { rc: -1, .. })
            ));
            c.fence()?;
            assert_eq!(c.get("k")?, "");
            // The split keys must fit keylen_max too.
            let long_key = "k".repeat(62);
            assert!(matches!(
                c.put(&long_key, &"v".repeat(20_000)),
                Err(PmiError::InvalidKey { .. })
            ));
            c.finalize()
        });
        results.into_iter().for_each(|r| r.unwrap());
    }

    #[test]
    fn abort_reaches_the_server_and_peers_see_a_closed_connection() {
        let (events, results) = run_job(2, |mut c| {
            if c.rank() == 1 {
                c.abort(7, "it broke = badly")?;
                return Ok(());
            }
            // Rank 0 waits in a barrier that never completes; the server then closes.
            match c.fence() {
                Err(PmiError::Closed(_)) => Ok(()),
                other => panic!("expected Closed, got {other:?}"),
            }
        });
        // Rank 0 may even see the close during its handshake.
        assert!(matches!(results[0], Ok(()) | Err(PmiError::Closed(_))));
        assert!(results[1].is_ok());
        assert_eq!(
            events,
            [ServerEvent::Abort(1, 7, "it broke = badly".to_owned())]
        );
    }

    #[test]
    fn closed_or_garbled_server_is_an_error() {
        let (client, server) = UnixStream::pair().unwrap();
        drop(server);
        assert!(matches!(
            PmiClient::from_fd(client.into(), 0, 1),
            Err(PmiError::Closed(_)) | Err(PmiError::Io(_))
        ));

        let (client, mut server) = UnixStream::pair().unwrap();
        server.write_all(b"cmd=barrier_out\n").unwrap();
        assert!(matches!(
            PmiClient::from_fd(client.into(), 0, 1),
            Err(PmiError::Protocol(_))
        ));

        let (client, mut server) = UnixStream::pair().unwrap();
        server.write_all(b"cmd=response_to_init rc=0").unwrap();
        drop(server);
        assert!(matches!(
            PmiClient::from_fd(client.into(), 0, 1),
            Err(PmiError::Closed(_))
        ));

        let (client, _) = UnixStream::pair().unwrap();
        assert!(matches!(
            PmiClient::from_fd(client.into(), 3, 2),
            Err(PmiError::Env(_))
        ));
    }

    #[test]
    fn tcp_initack_mode() {
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut writer = stream;
            let mut pmi = PmiServer::new(3, "kvs_tcp".into(), 0, 3);
            let mut rank = None;
            loop {
                let mut line = Vec::new();
                if reader.read_until(b'\n', &mut line).unwrap() == 0 {
                    return;
                }
                if rank.is_none() {
                    rank = PmiServer::identify(&line).unwrap();
                }
                for o in pmi.handle(rank.unwrap(), &line) {
                    if let ServerOutput::Reply { line, .. } = o {
                        writer.write_all(line.as_bytes()).unwrap();
                    }
                }
            }
        });
        let mut c = PmiClient::connect_tcp(&addr, 2).unwrap();
        assert_eq!((c.rank(), c.size(), c.kvsname()), (2, 3, "kvs_tcp"));
        c.put("x", "y").unwrap();
        assert_eq!(c.get("x").unwrap(), "y");
        c.finalize().unwrap();
        drop(c);
        server.join().unwrap();
    }

    /// A stand-in for Slurm's `mpi/pmi2` plugin serving PMI-1 (`agent.c`, `pmi1.c`,
    /// `client.c` of Slurm 22.05), down to how it reads: `init` with one 64-byte `read`
    /// matched by `sscanf`, every later request with one 1024-byte `read` that must hold
    /// the whole line. Its replies are Slurm's, byte for byte: `appnum=-1`, a
    /// `JOBID.STEPID` kvsname, `get_result rc=1` without a value for a missing key,
    /// `barrier_out rc=N`, `finalize_ack` then close, and no reply to `abort`.
    /// Returns the requests seen (`Err` for one Slurm would have rejected).
    fn slurm_pmi1_stub(mut conn: UnixStream, barrier_rc: i32) -> Vec<Result<String, String>> {
        let mut seen = Vec::new();
        let mut kvs: HashMap<String, String> = HashMap::new();
        let mut buf = [0u8; 64];
        let n = conn.read(&mut buf).unwrap();
        let init = String::from_utf8_lossy(&buf[..n]).into_owned();
        if init != "cmd=init pmi_version=1 pmi_subversion=1\n" {
            seen.push(Err(init));
            return seen;
        }
        conn.write_all(b"cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n")
            .unwrap();
        loop {
            let mut buf = vec![0u8; REQUEST_LINE_MAX];
            let n = match conn.read(&mut buf) {
                Ok(0) | Err(_) => return seen,
                Ok(n) => n,
            };
            let line = String::from_utf8_lossy(&buf[..n]).into_owned();
            // Slurm parses what one read gave; a line cut short or two lines glued
            // together are malformed requests there.
            if !line.ends_with('\n') || line.matches('\n').count() != 1 {
                seen.push(Err(line));
                return seen;
            }
            seen.push(Ok(line.clone()));
            let args: HashMap<&str, &str> = line
                .trim_end()
                .split(' ')
                .filter_map(|t| t.split_once('='))
                .collect();
            let reply = match args["cmd"] {
                "get_maxes" => {
                    "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n".to_owned()
                }
                "get_universe_size" => "cmd=universe_size rc=0 size=2\n".to_owned(),
                "get_appnum" => "cmd=appnum rc=0 appnum=-1\n".to_owned(),
                "get_my_kvsname" => "cmd=my_kvsname rc=0 kvsname=4242.7\n".to_owned(),
                "put" => {
                    kvs.insert(args["key"].to_owned(), args["value"].to_owned());
                    "cmd=put_result rc=0\n".to_owned()
                }
                "get" => match kvs.get(args["key"]) {
                    Some(v) => format!("cmd=get_result rc=0 value={v}\n"),
                    None => "cmd=get_result rc=1\n".to_owned(),
                },
                "barrier_in" if barrier_rc != 0 => {
                    format!(
                        "cmd=barrier_out rc={barrier_rc} msg=mpi/pmi2:_failed_to_send_temp_kvs\n"
                    )
                }
                "barrier_in" => "cmd=barrier_out rc=0\n".to_owned(),
                "finalize" => {
                    conn.write_all(b"cmd=finalize_ack rc=0\n").unwrap();
                    return seen;
                }
                "abort" => return seen,
                _ => {
                    seen.push(Err(format!("unknown command in {line:?}")));
                    return seen;
                }
            };
            conn.write_all(reply.as_bytes()).unwrap();
        }
    }

    #[test]
    fn speaks_slurms_pmi1_within_its_line_limit() {
        let (client, server) = UnixStream::pair().unwrap();
        let slurm = thread::spawn(move || slurm_pmi1_stub(server, 0));
        let mut c = PmiClient::from_fd(client.into(), 1, 2).unwrap();
        assert_eq!(
            (c.kvsname(), c.appnum(), c.universe_size()),
            ("4242.7", -1, 2)
        );
        let long = big_value(3);
        c.put("gmpi-card-1", &long).unwrap();
        c.put("exact", &"v".repeat(1023)).unwrap();
        c.put("over", &"w".repeat(1024)).unwrap();
        c.fence().unwrap();
        assert_eq!(c.get("gmpi-card-1").unwrap(), long);
        assert_eq!(c.get("exact").unwrap(), "v".repeat(1023));
        assert_eq!(c.get("over").unwrap(), "w".repeat(1024));
        assert!(matches!(c.get("gmpi-secret"), Err(PmiError::NotFound(_))));
        c.finalize().unwrap();
        drop(c);
        let seen = slurm.join().unwrap();
        for req in &seen {
            let line = req
                .as_ref()
                .unwrap_or_else(|bad| panic!("Slurm rejects {bad:?}"));
            assert!(line.len() <= REQUEST_LINE_MAX, "{} bytes", line.len());
        }
        // Hydra keeps vallen_max - 1 bytes, so no stored part is longer than that.
        for req in seen.iter().flatten() {
            if let Some(v) = req
                .trim_end()
                .split(' ')
                .find_map(|t| t.strip_prefix("value="))
            {
                assert!(v.len() < 1024, "a {}-byte value", v.len());
            }
        }
    }

    #[test]
    fn a_failed_slurm_fence_is_an_error() {
        let (client, server) = UnixStream::pair().unwrap();
        let slurm = thread::spawn(move || slurm_pmi1_stub(server, 5));
        let mut c = PmiClient::from_fd(client.into(), 0, 2).unwrap();
        match c.fence() {
            Err(PmiError::Refused { cmd, rc: 5, msg }) => {
                assert_eq!(cmd, "barrier_in");
                assert!(msg.contains("temp_kvs"), "{msg}");
            }
            other => panic!("expected a refused fence, got {other:?}"),
        }
        drop(c);
        slurm.join().unwrap();
    }

    #[test]
    fn a_long_abort_message_still_fits_one_request() {
        let (client, server) = UnixStream::pair().unwrap();
        let slurm = thread::spawn(move || slurm_pmi1_stub(server, 0));
        let mut c = PmiClient::from_fd(client.into(), 0, 2).unwrap();
        let msg = "rank 0: é = 100% wrong\n".repeat(200);
        c.abort(9, &msg).unwrap();
        drop(c);
        let seen = slurm.join().unwrap();
        let last = seen
            .last()
            .unwrap()
            .as_ref()
            .expect("Slurm would not parse the abort");
        let cmd = Command::parse(last).unwrap();
        assert_eq!((cmd.name(), cmd.get("exitcode")), ("abort", Some("9")));
        let sent = crate::wire::unescape_text(cmd.get("msg").unwrap());
        assert!(sent.len() > 500 && msg.starts_with(&sent), "{sent:?}");
    }

    #[test]
    fn splitting_respects_char_boundaries() {
        let v = "é".repeat(50);
        let parts = split_at_char_boundaries(&v, 33);
        assert!(parts.iter().all(|p| p.len() <= 33));
        assert_eq!(parts.concat(), v);
        assert_eq!(split_at_char_boundaries("", 10), [""]);
    }
}
