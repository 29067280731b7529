//! Watching the sockets for a rank asleep in another btl (see
//! [`gmpi_btl::Btl::watch`]).
//!
//! A helper thread, started on the first watch (so never in a rank whose only
//! blocking transport is tcp), waits in an epoll instance of its own (the
//! *outer* one) in which the btl's epoll descriptor (the *inner* one) is
//! registered edge-triggered. Each new readiness on a socket of the btl
//! (data, a new connection, room to write, a hang-up) adds to the inner
//! epoll's ready list and wakes whoever polls the inner descriptor, so the
//! thread gets one edge per new readiness whether or not the btl has drained
//! the earlier ones: it never spins on a descriptor that stays readable, and
//! it never has to be told that the btl drained.
//!
//! Arming is a store under a mutex ([`Watcher::arm`]: the sleeper's [`Wake`]
//! under a new number), with no system call and no thread wake-up; on an edge
//! the thread calls `wake` for the arming current then, at most once per
//! arming. [`Watcher::disarm`] clears it. The btl arms *before* draining its
//! epoll ([`crate::TcpBtl`]'s `watch`): readiness that comes after the drain
//! is an edge the armed thread sees, and readiness before it is found by the
//! drain, so no wake-up is lost (one that comes between arming and the drain
//! is both: a spurious wake, allowed).
//!
//! Shutdown ([`Drop`]): set `stop`, wake the outer epoll (a `mio::Waker`),
//! join. The btl drops the watcher before its clean shutdown, while the inner
//! epoll descriptor is still open.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use gmpi_btl::Wake;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

/// The inner epoll's token in the outer one.
const INNER: Token = Token(0);
/// The shutdown waker's token.
const STOP: Token = Token(1);

#[derive(Default)]
struct State {
    /// The current arming's number and the sleeper to wake.
    armed: Option<(u64, Arc<dyn Wake>)>,
    /// Armings so far.
    gen: u64,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The helper thread of one tcp btl. See the module documentation.
pub(crate) struct Watcher {
    shared: Arc<Shared>,
    stop: Waker,
    thread: Option<JoinHandle<()>>,
    armed: bool,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("armed", &self.armed)
            .finish_non_exhaustive()
    }
}

impl Watcher {
    /// Start the thread over `inner` (a duplicate of the btl's epoll
    /// descriptor).
    pub(crate) fn start(inner: OwnedFd) -> io::Result<Self> {
        let outer = Poll::new()?;
        outer
            .registry()
            .register(&mut SourceFd(&inner.as_raw_fd()), INNER, Interest::READABLE)?;
        let stop = Waker::new(outer.registry(), STOP)?;
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("gmpi-tcp-watch".into())
            .spawn(move || run(&s, outer, inner))?;
        Ok(Self {
            shared,
            stop,
            thread: Some(thread),
            armed: false,
        })
    }

    /// Wake `wake` on the next readiness. `false` when the thread has stopped
    /// (its epoll failed): nothing will wake the sleeper, whose timeout must
    /// then be short.
    pub(crate) fn arm(&mut self, wake: &Arc<dyn Wake>) -> bool {
        if self.thread.as_ref().is_none_or(JoinHandle::is_finished) {
            return false;
        }
        let mut s = lock(&self.shared.state);
        s.gen += 1;
        s.armed = Some((s.gen, Arc::clone(wake)));
        self.armed = true;
        true
    }

    /// Stop waking.
    pub(crate) fn disarm(&mut self) {
        if self.armed {
            lock(&self.shared.state).armed = None;
            self.armed = false;
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Err(e) = self.stop.wake() {
            tracing::warn!(target: "btl", "tcp: cannot stop the watcher thread: {e}");
            return;
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared, mut outer: Poll, _inner: OwnedFd) {
    let mut events = Events::with_capacity(4);
    let mut fired = 0u64;
    loop {
        if let Err(e) = outer.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // The sleeper falls back on its timeout from now on.
            tracing::warn!(target: "btl", "tcp: watcher thread: epoll_wait failed: {e}; it stops");
            if let Some((_, w)) = &lock(&shared.state).armed {
                w.wake();
            }
            return;
        }
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        if events.iter().any(|e| e.token() == INNER) {
            let s = lock(&shared.state);
            if let Some((g, w)) = &s.armed {
                if *g > fired {
                    w.wake();
                    fired = *g;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::AtomicUsize;
    use std::time::{Duration, Instant};

    #[derive(Default)]
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn wait_for(c: &Count, n: usize) -> bool {
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if c.0.load(Ordering::SeqCst) >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    /// Readiness after arming wakes once per arming, however long the inner
    /// epoll stays readable; disarmed, nothing is woken; dropping joins the
    /// thread.
    #[test]
    fn wakes_once_per_arming_and_stops() {
        let mut p = mio::Poll::new().unwrap();
        let (mut a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let mut src = mio::net::UnixStream::from_std(b);
        p.registry()
            .register(&mut src, mio::Token(0), mio::Interest::READABLE)
            .unwrap();
        let mut w = Watcher::start(p.registry().as_fd().try_clone_to_owned().unwrap()).unwrap();
        let c = Arc::new(Count::default());
        let wake: Arc<dyn Wake> = c.clone();
        assert!(w.arm(&wake));
        a.write_all(b"x").unwrap();
        assert!(wait_for(&c, 1));
        // Still readable (nothing drained), more data, same arming: no
        // second wake.
        a.write_all(b"x").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(c.0.load(Ordering::SeqCst), 1);
        w.disarm();
        // Readiness while disarmed wakes nobody.
        a.write_all(b"y").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(c.0.load(Ordering::SeqCst), 1);
        // Arm, then drain (as the btl does), then new readiness.
        assert!(w.arm(&wake));
        let mut ev = mio::Events::with_capacity(4);
        p.poll(&mut ev, Some(Duration::ZERO)).unwrap();
        a.write_all(b"z").unwrap();
        assert!(wait_for(&c, 2));
        w.disarm();
        let start = Instant::now();
        drop(w);
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(c.0.load(Ordering::SeqCst), 2);
    }
}
