//! gmpirun's one event loop, run by the local job (`job.rs`), the root of a multi-host
//! job (`cluster.rs`) and the per-host proxy (`proxy.rs`): each is a [`Handler`].
//!
//! Every turn the handler names the descriptors to watch, each with a token of its own
//! ([`PollSet`]), and the times it must look again ([`Deadlines`]). The [`Reactor`]
//! blocks in `poll` until an event or the earliest deadline, but never less than
//! [`MIN_TICK`] (so the loop never spins), then hands over, in this order: the signals
//! read from its signalfd (SIGINT, SIGTERM, SIGHUP; SIGCHLD only wakes it up), the
//! ready descriptors, every child that has ended (reaped with `waitpid`, whoever it
//! was), and finally the time, to `advance` timers and phases. It stops once the
//! handler says it is finished.
//!
//! Single-threaded: the handler's state is only touched between waits.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags};
use nix::sys::signal::Signal;
use nix::sys::signalfd::SignalFd;
use nix::unistd::Pid;

use crate::sys::{self, ExitKind};

/// Shortest wait in `poll`, so gmpirun never busy-waits.
pub const MIN_TICK: Duration = Duration::from_millis(50);

/// One event loop's own part: what to watch, and what to do with what happens.
pub trait Handler {
    /// What a watched descriptor stands for.
    type Token: Copy;

    /// Whether the loop is over.
    fn finished(&self) -> bool;

    /// The descriptors to watch in this turn.
    fn watch<'a>(&'a self, set: &mut PollSet<'a, Self::Token>);

    /// When to look again at the latest, even if nothing happens; none blocks.
    fn deadlines(&self, next: &mut Deadlines);

    /// SIGINT, SIGTERM or SIGHUP arrived.
    fn signal(&mut self, sig: Signal);

    /// A watched descriptor has `events`.
    fn ready(&mut self, token: Self::Token, events: PollFlags);

    /// Child `pid` has ended and was reaped.
    fn reaped(&mut self, pid: Pid, how: ExitKind);

    /// `poll` itself failed (the turn goes on with no events).
    fn poll_failed(&mut self, error: Errno);

    /// The end of every turn: act on time and on what is left.
    fn advance(&mut self, now: Instant);
}

/// The descriptors of one turn, each with its handler's token.
#[derive(Debug)]
pub struct PollSet<'a, T> {
    /// `None` is the reactor's signalfd.
    tokens: Vec<Option<T>>,
    fds: Vec<PollFd<'a>>,
}

impl<'a, T> PollSet<'a, T> {
    fn new(signals: BorrowedFd<'a>) -> Self {
        Self {
            tokens: vec![None],
            fds: vec![PollFd::new(signals, PollFlags::POLLIN)],
        }
    }

    /// Watches `fd` for `events` (`POLLHUP` and `POLLERR` are always reported).
    pub fn watch(&mut self, token: T, fd: BorrowedFd<'a>, events: PollFlags) {
        self.tokens.push(Some(token));
        self.fds.push(PollFd::new(fd, events));
    }

    /// Watches `fd` for input.
    pub fn read(&mut self, token: T, fd: BorrowedFd<'a>) {
        self.watch(token, fd, PollFlags::POLLIN);
    }
}

/// The earliest time a handler must look again.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    now: Instant,
    next: Option<Instant>,
}

impl Deadlines {
    fn new(now: Instant) -> Self {
        Self { now, next: None }
    }

    /// Look again at `t`.
    pub fn at(&mut self, t: Instant) {
        self.next = Some(self.next.map_or(t, |n| n.min(t)));
    }

    /// Look again at `t`, if any.
    pub fn at_opt(&mut self, t: Option<Instant>) {
        if let Some(t) = t {
            self.at(t);
        }
    }

    /// Look again next tick (what may change without an event: process groups that
    /// empty, children gone without a signal we can attribute).
    pub fn tick(&mut self) {
        self.at(self.now);
    }

    /// How long `poll` may wait: until the earliest deadline, at least [`MIN_TICK`].
    fn timeout(&self) -> Option<Duration> {
        self.next
            .map(|t| t.saturating_duration_since(self.now).max(MIN_TICK))
    }
}

/// The signalfd and the loop; see the module documentation.
#[derive(Debug)]
pub struct Reactor {
    signals: SignalFd,
}

impl Reactor {
    /// Takes SIGCHLD, SIGINT, SIGTERM and SIGHUP through a signalfd (they stay blocked
    /// in gmpirun from now on) and makes gmpirun the reaper of its descendants'
    /// orphans.
    pub fn new() -> io::Result<Self> {
        let signals = sys::signal_fd()?;
        sys::become_subreaper();
        Ok(Self { signals })
    }

    /// Runs `handler` until it is finished.
    pub fn run<H: Handler>(&mut self, handler: &mut H) {
        while !handler.finished() {
            let mut next = Deadlines::new(Instant::now());
            handler.deadlines(&mut next);
            let ready = {
                let mut set = PollSet::new(self.signals.as_fd());
                handler.watch(&mut set);
                sys::poll_tokens(set.tokens, &mut set.fds, next.timeout())
            };
            match ready {
                Ok(ready) => {
                    for (token, events) in ready {
                        match token {
                            None => self.read_signals(handler),
                            Some(token) => handler.ready(token, events),
                        }
                    }
                }
                Err(e) => handler.poll_failed(e),
            }
            while let Some((pid, how)) = sys::reap_one() {
                handler.reaped(pid, how);
            }
            handler.advance(Instant::now());
        }
    }

    fn read_signals<H: Handler>(&mut self, handler: &mut H) {
        while let Ok(Some(info)) = self.signals.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                // Children are reaped every turn anyway.
                Ok(Signal::SIGCHLD) | Err(_) => {}
                Ok(sig) => handler.signal(sig),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_deadline_but_never_below_a_tick() {
        let now = Instant::now();
        let mut next = Deadlines::new(now);
        assert_eq!(next.timeout(), None);
        next.at_opt(None);
        assert_eq!(next.timeout(), None);
        next.at(now + Duration::from_secs(3));
        next.at_opt(Some(now + Duration::from_secs(1)));
        next.at(now + Duration::from_secs(2));
        assert_eq!(next.timeout(), Some(Duration::from_secs(1)));
        next.at(now);
        assert_eq!(next.timeout(), Some(MIN_TICK));
        let mut next = Deadlines::new(now);
        next.tick();
        assert_eq!(next.timeout(), Some(MIN_TICK));
    }
}
