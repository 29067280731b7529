//! The local-peer watch: notices that a rank on this node is gone without finalizing.
//!
//! gmpirun and Hydra end the whole job when a rank dies; Slurm's `srun` does so only
//! with `--kill-on-bad-exit`. Without it, the ranks that wait for a dead peer would wait
//! forever. So, under launchers other than gmpirun, each rank learns the pids of the
//! ranks on its node at start-up (PMI keys `gmpi-pid-RANK`) and, while a wait of its own
//! has been idle for a while, looks at them in `/proc`; a peer that is gone (or a
//! zombie) while this rank has not started `MPI_Finalize` died or left without
//! finalizing, and the engine ends the job through PMI `abort`.
//!
//! Why "not finalizing" is the right test: `MPI_Finalize` ends with a barrier over the
//! world, so a peer can have returned from it, and exited, only after this rank entered
//! it. A peer's pid is watched only if `/proc/PID/environ` says `PMI_RANK=RANK` at
//! start-up (same pid namespace, same process), and its start time is kept, so a reused
//! pid is never mistaken for the peer.
//!
//! No I/O beyond reading `/proc`; no `unsafe`.

use std::time::{Duration, Instant};

/// How long a wait stays idle before the first look, and between looks.
const PERIOD: Duration = Duration::from_millis(500);

/// One watched peer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Peer {
    rank: u32,
    pid: u32,
    /// Field 22 of `/proc/PID/stat`: start time in clock ticks since boot.
    start: u64,
}

/// The local peers to watch and when to look next.
#[derive(Debug)]
pub(crate) struct PeerWatch {
    peers: Vec<Peer>,
    next: Option<Instant>,
}

/// A peer found gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gone {
    pub rank: u32,
    pub pid: u32,
}

impl PeerWatch {
    /// Watches each `(rank, pid)` whose process is visible here as that rank.
    pub fn new(candidates: &[(u32, u32)]) -> PeerWatch {
        let peers = candidates
            .iter()
            .filter(|&&(rank, pid)| environ_says_rank(pid, rank))
            .filter_map(|&(rank, pid)| {
                let (state, start) = proc_stat(pid)?;
                (state != 'Z' && state != 'X').then_some(Peer { rank, pid, start })
            })
            .collect();
        PeerWatch { peers, next: None }
    }

    /// How many peers are watched.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Called from a wait that is about to block: [`PERIOD`] after the first call (and
    /// every [`PERIOD`] after), the first watched peer that is gone. `now` is the
    /// caller's clock.
    pub fn poll(&mut self, now: Instant) -> Option<Gone> {
        if self.peers.is_empty() {
            return None;
        }
        let next = *self.next.get_or_insert(now + PERIOD);
        if now < next {
            return None;
        }
        self.next = Some(now + PERIOD);
        self.peers.iter().find_map(|p| {
            let alive = proc_stat(p.pid)
                .is_some_and(|(state, start)| start == p.start && state != 'Z' && state != 'X');
            (!alive).then_some(Gone {
                rank: p.rank,
                pid: p.pid,
            })
        })
    }
}

/// State letter and start time of `pid`, from `/proc/PID/stat`; `None` if there is no
/// such process (or `/proc` is not readable).
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// Parses a `/proc/PID/stat` line: the command name (field 2) is in parentheses and may
/// itself hold spaces and parentheses, so fields are counted after the last `)`.
fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state (field 3), field 22 is the 19th.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Whether the environment of `pid` holds `PMI_RANK=rank`.
fn environ_says_rank(pid: u32, rank: u32) -> bool {
    let want = format!("PMI_RANK={rank}");
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == want.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615";
        assert_eq!(parse_stat(line), Some(('S', 987_654)));
        assert_eq!(parse_stat("1 (x) Z 0"), None);
        assert_eq!(parse_stat("garbage"), None);
        let me = proc_stat(std::process::id()).expect("own stat");
        assert!(me.1 > 0 && me.0 != 'Z');
    }

    #[test]
    fn a_child_that_exits_is_seen_gone_only_after_an_idle_period() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("PMI_RANK", "3")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        // spawn returns as soon as the exec is under way, before the new
        // image's environment is in place: wait until it reads back.
        let t = Instant::now();
        while !environ_says_rank(pid, 3) {
            assert!(t.elapsed() < Duration::from_secs(10), "child environment");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Not watched: wrong rank, or a pid that does not exist.
        assert_eq!(PeerWatch::new(&[(2, pid)]).len(), 0);
        assert_eq!(PeerWatch::new(&[(3, u32::MAX)]).len(), 0);
        let mut w = PeerWatch::new(&[(3, pid), (1, std::process::id())]);
        assert_eq!(w.len(), 1, "only the child says PMI_RANK=3");
        let t0 = Instant::now();
        assert_eq!(w.poll(t0), None);
        assert_eq!(w.poll(t0 + PERIOD * 2), None, "alive");
        child.kill().unwrap();
        // Gone as soon as it is a zombie, before anyone reaps it.
        let t = Instant::now();
        while proc_stat(pid).is_some_and(|(state, _)| state != 'Z') {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "SIGKILL not delivered"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let t1 = t0 + PERIOD * 2;
        assert_eq!(w.poll(t1 + PERIOD / 2), None, "not due yet");
        assert_eq!(w.poll(t1 + PERIOD * 2), Some(Gone { rank: 3, pid }));
        child.wait().unwrap();
        assert_eq!(
            w.poll(t1 + PERIOD * 4),
            Some(Gone { rank: 3, pid }),
            "reaped"
        );
    }
}
