//! The launcher's end: a sans-IO PMI-1 server for one job.
//!
//! [`PmiServer`] performs no I/O and reads no clock. The launcher owns one connection per
//! rank; for every complete line read from rank `r` it calls [`PmiServer::handle`] and
//! carries out the returned [`ServerOutput`]s in order: write each `Reply` to its rank's
//! connection (a barrier release addresses every rank), and act on the events.
//!
//! State is kept in two clearly separated accounts: the key-value space
//! ([`PmiServer::kvs_put`] / [`PmiServer::kvs_get`]) and the barrier
//! ([`PmiServer::barrier_enter`] / [`PmiServer::barrier_release`]).
//!
//! A multi-host launcher runs one server per host, made by [`PmiServer::for_ranks`] for
//! that host's ranks only. Such a server answers every request locally except the end of
//! a barrier: once all its ranks have entered, it returns [`ServerOutput::BarrierReady`]
//! with the keys put since the previous barrier; the launcher joins every host's keys
//! and hands the union back with [`PmiServer::barrier_release_with`], which releases the
//! host's ranks. Gets are then served from the local copy, as Hydra's proxies do.

use std::collections::HashMap;

use crate::error::PmiError;
use crate::wire::{Command, PMI_SUBVERSION, PMI_VERSION};

/// Longest kvsname the server advertises (`kvsname_max`).
pub const KVSNAME_MAX: usize = 256;
/// Longest key the server accepts (`keylen_max`).
pub const KEYLEN_MAX: usize = 64;
/// Longest value the server accepts (`vallen_max`).
pub const VALLEN_MAX: usize = 1024;
/// The key Hydra serves with the node mapping of the job.
pub const PROCESS_MAPPING_KEY: &str = "PMI_process_mapping";
/// Longest abort message kept (longer ones are cut at a character boundary).
const ABORT_MSG_MAX: usize = 1024;

/// What the launcher must do after [`PmiServer::handle`].
#[derive(Debug)]
#[non_exhaustive]
pub enum ServerOutput {
    /// Write `line` (newline included) to rank `rank`'s connection.
    Reply {
        /// The destination rank.
        rank: u32,
        /// The encoded line.
        line: String,
    },
    /// Rank `rank` completed `cmd=init`.
    Initialized {
        /// The rank.
        rank: u32,
    },
    /// Rank `rank` completed `cmd=finalize`; it may now exit.
    Finalized {
        /// The rank.
        rank: u32,
    },
    /// Rank `rank` asked to abort the job. No reply is sent.
    Abort {
        /// The rank.
        rank: u32,
        /// Its `exitcode` (1 when absent or not a number).
        code: i32,
        /// Its message (`msg=` or `message=`), empty when none was given.
        msg: String,
    },
    /// Rank `rank` sent a line that is malformed or not allowed; the job should end.
    ProtocolError {
        /// The rank.
        rank: u32,
        /// What was wrong.
        error: PmiError,
    },
    /// Only from a [`PmiServer::for_ranks`] server: every rank it serves has entered the
    /// barrier. `puts` are the keys its ranks put since the previous barrier; join them
    /// with the other hosts' and call [`PmiServer::barrier_release_with`].
    BarrierReady {
        /// `(key, value)` in the order they were put.
        puts: Vec<(String, String)>,
    },
}

/// Per-rank protocol state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RankState {
    /// This server answers for the rank (all ranks, unless made by `for_ranks`).
    served: bool,
    initialized: bool,
    finalized: bool,
    in_barrier: bool,
}

/// Job-level PMI-1 server state machine; see the module documentation.
#[derive(Debug)]
pub struct PmiServer {
    size: u32,
    kvsname: String,
    appnum: i32,
    universe_size: u32,
    ranks: Vec<RankState>,
    kvs: HashMap<String, String>,
    barrier_count: u32,
    /// How many ranks this server answers for: the barrier completes at this count.
    served_count: u32,
    /// Keys put since the last barrier, kept by `for_ranks` servers only.
    journal: Option<Vec<(String, String)>>,
}

impl PmiServer {
    /// A server for a job of `size` ranks (ranks `0..size`), whose key-value space is named
    /// `kvsname` (must be a valid token of at most [`KVSNAME_MAX`] bytes).
    ///
    /// The key [`PROCESS_MAPPING_KEY`] is pre-set to `(vector,(0,1,size))`: one node
    /// holding every rank, the way Hydra describes it.
    ///
    /// # Panics
    ///
    /// When `size` is 0 or `kvsname` is empty, too long, or not a valid PMI token: these
    /// come from the launcher, never from a rank.
    pub fn new(size: u32, kvsname: String, appnum: i32, universe_size: u32) -> Self {
        assert!(size >= 1, "a PMI job has at least one rank");
        assert!(
            crate::wire::is_valid_value(&kvsname) && !kvsname.is_empty(),
            "kvsname {kvsname:?} is not a valid PMI token"
        );
        assert!(kvsname.len() <= KVSNAME_MAX, "kvsname too long");
        let mut kvs = HashMap::new();
        kvs.insert(
            PROCESS_MAPPING_KEY.to_owned(),
            format!("(vector,(0,1,{size}))"),
        );
        let state = RankState {
            served: true,
            ..RankState::default()
        };
        Self {
            size,
            kvsname,
            appnum,
            universe_size,
            ranks: vec![state; size as usize],
            kvs,
            barrier_count: 0,
            served_count: size,
            journal: None,
        }
    }

    /// A server for `ranks`, one host's share of a job of `size` ranks whose other ranks
    /// are served elsewhere: see the module documentation. Lines from any other rank are
    /// protocol errors.
    ///
    /// # Panics
    ///
    /// As [`PmiServer::new`], and when `ranks` is empty, repeats a rank or names one
    /// outside `0..size`.
    pub fn for_ranks(
        size: u32,
        kvsname: String,
        appnum: i32,
        universe_size: u32,
        ranks: &[u32],
    ) -> Self {
        let mut server = Self::new(size, kvsname, appnum, universe_size);
        assert!(!ranks.is_empty(), "a host serves at least one rank");
        for state in &mut server.ranks {
            state.served = false;
        }
        for &r in ranks {
            let state = &mut server.ranks[r as usize];
            assert!(!state.served, "rank {r} listed twice");
            state.served = true;
        }
        server.served_count = ranks.len() as u32;
        server.journal = Some(Vec::new());
        server
    }

    /// Replaces the value served under [`PROCESS_MAPPING_KEY`] (the launcher knows the
    /// real rank-to-node map of a multi-host job).
    pub fn set_process_mapping(&mut self, mapping: String) {
        self.kvs.insert(PROCESS_MAPPING_KEY.to_owned(), mapping);
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The job's key-value space name.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// Whether `rank` has completed `cmd=init`.
    pub fn is_initialized(&self, rank: u32) -> bool {
        self.ranks.get(rank as usize).is_some_and(|r| r.initialized)
    }

    /// Whether `rank` has completed `cmd=finalize`.
    pub fn is_finalized(&self, rank: u32) -> bool {
        self.ranks.get(rank as usize).is_some_and(|r| r.finalized)
    }

    /// For a connection whose rank is not known yet (TCP mode): the `pmiid` of a first
    /// line `cmd=initack pmiid=N`, `None` for any other well-formed line.
    pub fn identify(line: &[u8]) -> Result<Option<u32>, PmiError> {
        let cmd = Command::decode(line)?;
        if cmd.name() == "initack" {
            Ok(Some(cmd.require_num("pmiid")?))
        } else {
            Ok(None)
        }
    }

    /// Handles one line received from `rank` (with or without its newline) and returns
    /// what to do, in order.
    pub fn handle(&mut self, rank: u32, line: &[u8]) -> Vec<ServerOutput> {
        let mut out = Vec::new();
        if rank >= self.size {
            out.push(ServerOutput::ProtocolError {
                rank,
                error: PmiError::Protocol(format!(
                    "line from rank {rank}, but the job has {} ranks",
                    self.size
                )),
            });
            return out;
        }
        if !self.ranks[rank as usize].served {
            out.push(ServerOutput::ProtocolError {
                rank,
                error: PmiError::Protocol(format!("line from rank {rank}, not served here")),
            });
            return out;
        }
        match Command::decode(line) {
            Ok(cmd) => {
                if let Err(error) = self.dispatch(rank, &cmd, &mut out) {
                    out.push(ServerOutput::ProtocolError { rank, error });
                }
            }
            Err(error) => out.push(ServerOutput::ProtocolError { rank, error }),
        }
        out
    }

    fn dispatch(
        &mut self,
        rank: u32,
        cmd: &Command,
        out: &mut Vec<ServerOutput>,
    ) -> Result<(), PmiError> {
        let reply = |out: &mut Vec<ServerOutput>, c: Command| {
            out.push(ServerOutput::Reply {
                rank,
                line: c.encode(),
            });
        };
        if self.ranks[rank as usize].finalized {
            return Err(PmiError::Protocol(format!(
                "`cmd={}` after finalize",
                cmd.name()
            )));
        }
        match cmd.name() {
            "initack" => {
                let id: u32 = cmd.require_num("pmiid")?;
                if id != rank {
                    return Err(PmiError::Protocol(format!(
                        "initack with pmiid={id} on the connection of rank {rank}"
                    )));
                }
                reply(out, Command::new("initack"));
                reply(out, Command::new("set").arg("size", self.size));
                reply(out, Command::new("set").arg("rank", rank));
                reply(out, Command::new("set").arg("debug", 0));
            }
            "init" => {
                let version = cmd.get("pmi_version");
                let ok = version == Some("1");
                reply(
                    out,
                    Command::new("response_to_init")
                        .arg("pmi_version", PMI_VERSION)
                        .arg("pmi_subversion", PMI_SUBVERSION)
                        .arg("rc", if ok { 0 } else { -1 }),
                );
                if !ok {
                    return Err(PmiError::Protocol(format!(
                        "unsupported pmi_version {}",
                        version.unwrap_or("(none)")
                    )));
                }
                self.ranks[rank as usize].initialized = true;
                out.push(ServerOutput::Initialized { rank });
            }
            "get_maxes" => reply(
                out,
                Command::new("maxes")
                    .arg("kvsname_max", KVSNAME_MAX)
                    .arg("keylen_max", KEYLEN_MAX)
                    .arg("vallen_max", VALLEN_MAX)
                    .arg("rc", 0),
            ),
            "get_appnum" => reply(out, Command::new("appnum").arg("appnum", self.appnum)),
            "get_universe_size" => reply(
                out,
                Command::new("universe_size").arg("size", self.universe_size),
            ),
            "get_my_kvsname" => reply(
                out,
                Command::new("my_kvsname").arg("kvsname", &self.kvsname),
            ),
            "put" => {
                let result = self.check_kvsname(cmd).and_then(|()| {
                    let key = cmd.require("key").map_err(|e| e.to_string())?;
                    let value = cmd.require("value").map_err(|e| e.to_string())?;
                    self.kvs_put(key, value)
                });
                if let (Ok(()), Some(journal)) = (&result, &mut self.journal) {
                    let key = cmd.require("key")?;
                    let value = cmd.require("value")?;
                    journal.push((key.to_owned(), value.to_owned()));
                }
                let c = match result {
                    Ok(()) => Command::new("put_result")
                        .arg("rc", 0)
                        .arg("msg", "success"),
                    Err(msg) => Command::new("put_result")
                        .arg("rc", -1)
                        .arg("msg", token(&msg)),
                };
                reply(out, c);
            }
            "get" => {
                let key = cmd.require("key")?;
                let result = self
                    .check_kvsname(cmd)
                    .and_then(|()| self.kvs_get(key).ok_or(format!("key_{key}_not_found")));
                let c = match result {
                    Ok(value) => Command::new("get_result")
                        .arg("rc", 0)
                        .arg("msg", "success")
                        .arg("value", value),
                    Err(msg) => Command::new("get_result")
                        .arg("rc", -1)
                        .arg("msg", token(&msg)),
                };
                reply(out, c);
            }
            "barrier_in" => {
                if self.barrier_enter(rank)? {
                    match &mut self.journal {
                        Some(journal) => out.push(ServerOutput::BarrierReady {
                            puts: std::mem::take(journal),
                        }),
                        None => out.extend(self.barrier_release()),
                    }
                }
            }
            "finalize" => {
                reply(out, Command::new("finalize_ack"));
                self.ranks[rank as usize].finalized = true;
                out.push(ServerOutput::Finalized { rank });
            }
            "abort" => {
                let code = cmd
                    .get("exitcode")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(1);
                let mut msg = crate::wire::unescape_text(
                    cmd.get("msg").or_else(|| cmd.get("message")).unwrap_or(""),
                );
                truncate_at_char(&mut msg, ABORT_MSG_MAX);
                out.push(ServerOutput::Abort { rank, code, msg });
            }
            other => {
                return Err(PmiError::Protocol(format!(
                    "unsupported PMI command `{other}`"
                )))
            }
        }
        Ok(())
    }

    /// Refuses requests naming another key-value space (`kvsname` absent means ours).
    fn check_kvsname(&self, cmd: &Command) -> Result<(), String> {
        match cmd.get("kvsname") {
            Some(name) if name != self.kvsname => Err(format!("kvsname_{name}_not_found")),
            _ => Ok(()),
        }
    }

    // ---- key-value space accounting ---------------------------------------------------

    /// Stores `key=value` in the job's key-value space. A key is written once; the error
    /// is the `msg=` token sent back.
    pub fn kvs_put(&mut self, key: &str, value: &str) -> Result<(), String> {
        if key.len() > KEYLEN_MAX {
            return Err(format!("key_too_long_(max_{KEYLEN_MAX})"));
        }
        if value.len() > VALLEN_MAX {
            return Err(format!("value_too_long_(max_{VALLEN_MAX})"));
        }
        if self.kvs.contains_key(key) {
            return Err(format!("duplicate_key_{key}"));
        }
        self.kvs.insert(key.to_owned(), value.to_owned());
        Ok(())
    }

    /// Adds keys put elsewhere in the job (a [`PmiServer::for_ranks`] server's barrier
    /// exchange). A key already held with the same value is skipped (the union of every
    /// host's keys includes this host's own); with another value it is an error naming
    /// the key, and nothing after it is added.
    pub fn kvs_merge(
        &mut self,
        puts: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(), String> {
        for (key, value) in puts {
            match self.kvs.get(&key) {
                Some(held) if *held == value => {}
                Some(_) => return Err(format!("PMI key `{key}` was put twice")),
                None => {
                    self.kvs.insert(key, value);
                }
            }
        }
        Ok(())
    }

    /// The value stored under `key`, if any.
    pub fn kvs_get(&self, key: &str) -> Option<&str> {
        self.kvs.get(key).map(String::as_str)
    }

    // ---- barrier accounting -----------------------------------------------------------

    /// Records that `rank` entered the barrier; `Ok(true)` once every rank has.
    pub fn barrier_enter(&mut self, rank: u32) -> Result<bool, PmiError> {
        let state = &mut self.ranks[rank as usize];
        if state.in_barrier {
            return Err(PmiError::Protocol(
                "barrier_in while already in the barrier".to_owned(),
            ));
        }
        state.in_barrier = true;
        self.barrier_count += 1;
        Ok(self.barrier_count == self.served_count)
    }

    /// Ends the barrier of a [`PmiServer::for_ranks`] server once the launcher has joined
    /// every host's keys: adds `puts` (see [`PmiServer::kvs_merge`]), then releases the
    /// ranks. On a conflicting key nothing is released and the error names the key.
    pub fn barrier_release_with(
        &mut self,
        puts: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Vec<ServerOutput>, String> {
        self.kvs_merge(puts)?;
        Ok(self.barrier_release())
    }

    /// Ends the current barrier: a `barrier_out` for every rank, and a fresh count.
    pub fn barrier_release(&mut self) -> Vec<ServerOutput> {
        self.barrier_count = 0;
        let line = Command::new("barrier_out").encode();
        let mut out = Vec::new();
        for (rank, state) in self.ranks.iter_mut().enumerate() {
            if std::mem::take(&mut state.in_barrier) {
                out.push(ServerOutput::Reply {
                    rank: rank as u32,
                    line: line.clone(),
                });
            }
        }
        out
    }
}

/// Makes `msg` a legal value token (spaces and control characters become `_`).
fn token(msg: &str) -> String {
    msg.chars()
        .map(|c| {
            if c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// Cuts `s` to at most `max` bytes, at a character boundary.
fn truncate_at_char(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replies(out: &[ServerOutput]) -> Vec<(u32, &str)> {
        out.iter()
            .filter_map(|o| match o {
                ServerOutput::Reply { rank, line } => Some((*rank, line.as_str())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn init_and_queries() {
        let mut s = PmiServer::new(2, "kvs_x".into(), 0, 2);
        let out = s.handle(1, b"cmd=init pmi_version=1 pmi_subversion=1\n");
        assert_eq!(
            replies(&out),
            [(
                1,
                "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"
            )]
        );
        assert!(matches!(out[1], ServerOutput::Initialized { rank: 1 }));
        assert!(s.is_initialized(1) && !s.is_initialized(0));
        let out = s.handle(1, b"cmd=get_maxes\n");
        assert_eq!(
            replies(&out),
            [(
                1,
                "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024 rc=0\n"
            )]
        );
        let out = s.handle(0, b"cmd=get kvsname=kvs_x key=PMI_process_mapping\n");
        assert_eq!(
            replies(&out),
            [(
                0,
                "cmd=get_result rc=0 msg=success value=(vector,(0,1,2))\n"
            )]
        );
        let out = s.handle(0, b"cmd=initack pmiid=0\n");
        assert_eq!(
            replies(&out),
            [
                (0, "cmd=initack\n"),
                (0, "cmd=set size=2\n"),
                (0, "cmd=set rank=0\n"),
                (0, "cmd=set debug=0\n")
            ]
        );
        assert_eq!(
            PmiServer::identify(b"cmd=initack pmiid=7\n").unwrap(),
            Some(7)
        );
        assert_eq!(PmiServer::identify(b"cmd=init\n").unwrap(), None);
    }

    #[test]
    fn put_get_barrier() {
        let mut s = PmiServer::new(3, "k".into(), 0, 3);
        let out = s.handle(0, b"cmd=put kvsname=k key=a value=1\n");
        assert_eq!(replies(&out), [(0, "cmd=put_result rc=0 msg=success\n")]);
        let out = s.handle(1, b"cmd=put kvsname=k key=a value=2\n");
        assert_eq!(
            replies(&out),
            [(1, "cmd=put_result rc=-1 msg=duplicate_key_a\n")]
        );
        let out = s.handle(1, b"cmd=get kvsname=k key=b\n");
        assert_eq!(
            replies(&out),
            [(1, "cmd=get_result rc=-1 msg=key_b_not_found\n")]
        );
        assert!(replies(&s.handle(2, b"cmd=barrier_in\n")).is_empty());
        assert!(replies(&s.handle(0, b"cmd=barrier_in\n")).is_empty());
        assert!(matches!(
            s.handle(0, b"cmd=barrier_in\n")[0],
            ServerOutput::ProtocolError { rank: 0, .. }
        ));
        let out = s.handle(1, b"cmd=barrier_in\n");
        assert_eq!(
            replies(&out),
            [
                (0, "cmd=barrier_out\n"),
                (1, "cmd=barrier_out\n"),
                (2, "cmd=barrier_out\n")
            ]
        );
        // A second barrier starts from zero.
        assert!(replies(&s.handle(1, b"cmd=barrier_in\n")).is_empty());
    }

    #[test]
    fn host_share_reports_its_barrier_and_takes_the_others_keys() {
        // Ranks 0 and 2 here, 1 and 3 on another host.
        let mut a = PmiServer::for_ranks(4, "k".into(), 0, 4, &[0, 2]);
        let mut b = PmiServer::for_ranks(4, "k".into(), 0, 4, &[1, 3]);
        a.set_process_mapping("(vector,(0,2,1))".into());
        assert!(matches!(
            a.handle(1, b"cmd=get_maxes\n")[0],
            ServerOutput::ProtocolError { rank: 1, .. }
        ));
        a.handle(0, b"cmd=put kvsname=k key=a0 value=x\n");
        a.handle(2, b"cmd=put kvsname=k key=a2 value=y\n");
        b.handle(3, b"cmd=put kvsname=k key=b3 value=z\n");
        assert!(a.handle(0, b"cmd=barrier_in\n").is_empty());
        let out = a.handle(2, b"cmd=barrier_in\n");
        let [ServerOutput::BarrierReady { puts: pa }] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(pa, &[("a0".into(), "x".into()), ("a2".into(), "y".into())]);
        b.handle(1, b"cmd=barrier_in\n");
        let out = b.handle(3, b"cmd=barrier_in\n");
        let [ServerOutput::BarrierReady { puts: pb }] = &out[..] else {
            panic!("{out:?}")
        };
        let union: Vec<(String, String)> = pa.iter().chain(pb).cloned().collect();
        let out = a.barrier_release_with(union.clone()).unwrap();
        assert_eq!(
            replies(&out),
            [(0, "cmd=barrier_out\n"), (2, "cmd=barrier_out\n")]
        );
        b.barrier_release_with(union).unwrap();
        let out = a.handle(2, b"cmd=get kvsname=k key=b3\n");
        assert_eq!(
            replies(&out),
            [(2, "cmd=get_result rc=0 msg=success value=z\n")]
        );
        let out = b.handle(1, b"cmd=get kvsname=k key=PMI_process_mapping\n");
        assert_eq!(
            replies(&out),
            [(
                1,
                "cmd=get_result rc=0 msg=success value=(vector,(0,1,4))\n"
            )]
        );
        let out = a.handle(0, b"cmd=get kvsname=k key=PMI_process_mapping\n");
        assert_eq!(
            replies(&out),
            [(
                0,
                "cmd=get_result rc=0 msg=success value=(vector,(0,2,1))\n"
            )]
        );
        // The next barrier journals only the new keys; a conflicting key is refused.
        a.handle(0, b"cmd=put kvsname=k key=n value=1\n");
        a.handle(0, b"cmd=barrier_in\n");
        let out = a.handle(2, b"cmd=barrier_in\n");
        assert!(
            matches!(&out[..], [ServerOutput::BarrierReady { puts }] if puts.len() == 1),
            "{out:?}"
        );
        let e = a
            .barrier_release_with([("b3".to_owned(), "other".to_owned())])
            .unwrap_err();
        assert!(e.contains("b3"), "{e}");
    }

    #[test]
    fn abort_finalize_and_errors() {
        let mut s = PmiServer::new(2, "k".into(), 0, 2);
        let out = s.handle(1, b"cmd=abort exitcode=5 msg=boom\n");
        assert!(matches!(
            &out[..],
            [ServerOutput::Abort { rank: 1, code: 5, msg }] if msg == "boom"
        ));
        let out = s.handle(0, b"cmd=finalize\n");
        assert_eq!(replies(&out), [(0, "cmd=finalize_ack\n")]);
        assert!(s.is_finalized(0));
        for (rank, bad) in [
            (0, &b"cmd=get_maxes\n"[..]),
            (1, b"garbage\n"),
            (1, b"cmd=spawn\n"),
            (1, b"cmd=initack pmiid=0\n"),
            (1, b"cmd=init pmi_version=2\n"),
            (5, b"cmd=init\n"),
        ] {
            let out = s.handle(rank, bad);
            assert!(
                out.iter()
                    .any(|o| matches!(o, ServerOutput::ProtocolError { .. })),
                "{bad:?}"
            );
        }
    }
}
