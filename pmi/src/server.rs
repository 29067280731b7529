//! The launcher's end: a sans-IO PMI-1 server for one job.
//!
//! [`PmiServer`] performs no I/O and reads no clock. The launcher owns one connection per
//! rank; for every complete line read from rank `r` it calls [`PmiServer::handle`] and
//! carries out the returned [`ServerOutput`]s in order: write each `Reply` to its rank's
//! connection (a barrier release addresses every rank), and act on the events.
//!
//! State is kept in two clearly separated accounts so that a later multi-host launcher
//! can run one server per host and forward to a parent: the key-value space
//! ([`PmiServer::kvs_put`] / [`PmiServer::kvs_get`]) and the barrier
//! ([`PmiServer::barrier_enter`] / [`PmiServer::barrier_release`]).

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
}

/// Per-rank protocol state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RankState {
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
        Self {
            size,
            kvsname,
            appnum,
            universe_size,
            ranks: vec![RankState::default(); size as usize],
            kvs,
            barrier_count: 0,
        }
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
                    out.extend(self.barrier_release());
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
        Ok(self.barrier_count == self.size)
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
