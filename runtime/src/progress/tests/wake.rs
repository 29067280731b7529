//! Sleeping across transports: a driver with a shm-like btl (a sleeper with
//! a waker, like btl-shm) and a real tcp btl sleeps in the first while the
//! tcp btl's watcher thread wakes it on socket readiness. Nothing here times
//! work: the assertions count wake-ups and waits that ran to their timeout.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use gmpi_btl::loopback::Loopback;
use gmpi_btl::sim::SimMemory;
use gmpi_btl::{Btl, BtlError, Capabilities, Event, Rank, Submit, Wake};
use gmpi_btl_tcp::{Secret, TcpBtl, TcpConfig};
use gmpi_gpu::MemKind;
use gmpi_pml::{Buf, HostWrite, Pml, PmlConfig, RecvArgs, SendArgs, SendMode};

use super::host_only;
use crate::progress::{Driver, HostMemory};

/// A safety timeout no wait in these tests should reach.
const LONG: Duration = Duration::from_secs(5);
/// Hang guard.
const GUARD: Duration = Duration::from_secs(60);

struct Mem(SimMemory);

impl HostWrite for Mem {
    fn write(&mut self, addr: u64, data: &[u8]) {
        self.0.write(addr, data);
    }
}

impl HostMemory for Mem {
    fn with_read<R>(&self, addr: u64, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self.0.read(addr, len))
    }
    fn with_write<R>(&mut self, addr: u64, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        f(self.0.slice_mut(addr, len))
    }
}

/// The doorbell of [`ShmLike`], with counters.
#[derive(Default)]
struct Bell {
    rung: Mutex<bool>,
    cv: Condvar,
    /// `wake` calls.
    wakes: AtomicUsize,
    /// Waits that slept.
    sleeps: AtomicUsize,
    /// Waits that ran to their timeout.
    timeouts: AtomicUsize,
}

impl Wake for Bell {
    fn wake(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        *self.rung.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

/// A btl that reaches nobody and sleeps on a condition variable its waker
/// signals (as btl-shm sleeps on its futex doorbell).
struct ShmLike {
    caps: Capabilities,
    bell: Arc<Bell>,
}

impl ShmLike {
    fn new(bell: &Arc<Bell>) -> Self {
        Self {
            caps: Capabilities {
                name: "shm-like",
                eager_limit: 256,
                max_send_size: 1024,
                get: false,
                put: false,
                exclusivity: 100,
                get_threshold: usize::MAX,
                cuda_ipc: false,
                gpudirect: None,
            },
            bell: Arc::clone(bell),
        }
    }
}

impl Btl for ShmLike {
    fn caps(&self) -> &Capabilities {
        &self.caps
    }
    fn reaches(&self, _peer: Rank) -> bool {
        false
    }
    fn send(&mut self, peer: Rank, _parts: &[&[u8]], _token: u64) -> Result<Submit, BtlError> {
        Err(BtlError::Unreachable(peer))
    }
    fn progress(&mut self, _on_event: &mut dyn FnMut(Event<'_>)) -> usize {
        0
    }
    fn wait(&mut self, timeout: Duration) {
        let b = &self.bell;
        let g = b.rung.lock().unwrap();
        let (mut g, r) = b.cv.wait_timeout_while(g, timeout, |rung| !*rung).unwrap();
        if r.timed_out() {
            b.timeouts.fetch_add(1, Ordering::SeqCst);
        }
        *g = false;
        b.sleeps.fetch_add(1, Ordering::SeqCst);
    }
    fn waker(&self) -> Option<Arc<dyn Wake>> {
        Some(Arc::clone(&self.bell) as Arc<dyn Wake>)
    }
}

fn tcp_pair() -> (TcpBtl, TcpBtl) {
    let mut cfg = TcpConfig::new(Secret::from_bytes([0x42; 32]), "wake-test");
    cfg.interfaces = Some("127.0.0.0/8".into());
    cfg.linger = Duration::from_secs(2);
    let mut a = TcpBtl::bind(0, 2, cfg.clone()).unwrap();
    let mut b = TcpBtl::bind(1, 2, cfg).unwrap();
    a.add_peer(1, &b.card()).unwrap();
    b.add_peer(0, &a.card()).unwrap();
    (a, b)
}

fn host(addr: u64, len: usize) -> Buf {
    Buf {
        addr,
        len,
        kind: MemKind::Host,
    }
}

/// Rank 1: tcp and self only (so it sleeps in tcp itself, with self
/// watching trivially). Sends up to `msgs` messages of tag 7 to rank 0, one
/// each time `go` yields, until `done` yields.
fn rank1(
    tcp: TcpBtl,
    go: mpsc::Receiver<()>,
    done: mpsc::Receiver<()>,
    msgs: usize,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut mem = SimMemory::default();
        let addr = mem.alloc_with(b"hello across transports");
        let btls: Vec<Box<dyn Btl>> = vec![Box::new(Loopback::new(1)), Box::new(tcp)];
        let mut d = Driver::new(
            Pml::new(1, 2, PmlConfig::default()),
            btls,
            Mem(mem),
            host_only(),
        );
        assert!(d.wakes_across(), "tcp sleeps, self watches");
        // Progress all along (a tcp send is taken at once, before the
        // connection is up: the handshake needs this rank's progress).
        let mut sent = 0;
        let end = Instant::now() + GUARD;
        while done.try_recv().is_err() {
            assert!(Instant::now() < end, "rank 1 hangs");
            if sent < msgs && go.try_recv().is_ok() {
                d.send(SendArgs {
                    ctx: 0,
                    src: 1,
                    dest: 0,
                    tag: 7,
                    buf: host(addr, 23),
                    mode: SendMode::Standard,
                })
                .unwrap();
                sent += 1;
            }
            if d.progress() == 0 {
                d.wait(Duration::from_millis(10));
            }
        }
    })
}

struct Rank0 {
    d: Driver<Mem>,
    bell: Arc<Bell>,
}

fn rank0(tcp: TcpBtl) -> Rank0 {
    let bell = Arc::new(Bell::default());
    let btls: Vec<Box<dyn Btl>> = vec![
        Box::new(Loopback::new(0)),
        Box::new(ShmLike::new(&bell)),
        Box::new(tcp),
    ];
    let d = Driver::new(
        Pml::new(0, 2, PmlConfig::default()),
        btls,
        Mem(SimMemory::default()),
        host_only(),
    );
    assert!(d.wakes_across(), "the shm-like btl sleeps, tcp watches");
    Rank0 { d, bell }
}

impl Rank0 {
    /// Receive one message from rank 1, sleeping `LONG` whenever idle.
    /// Returns how many waits ran to their timeout.
    fn recv_one(&mut self) -> usize {
        let dst = self.d.host().0.alloc(64);
        let id = self
            .d
            .post_recv(RecvArgs {
                ctx: 0,
                src: Some(1),
                src_world: Some(1),
                tag: Some(7),
                buf: host(dst, 64),
                consumed: false,
            })
            .unwrap();
        let before = self.bell.timeouts.load(Ordering::SeqCst);
        let end = Instant::now() + GUARD;
        loop {
            if let Some(st) = self.d.test(id) {
                let st = st.unwrap();
                assert_eq!(st.len, 23);
                assert_eq!(self.d.host().0.read(dst, 23), b"hello across transports");
                break;
            }
            assert!(Instant::now() < end, "receive hangs");
            if self.d.progress() == 0 {
                self.d.wait(LONG);
            }
        }
        self.bell.timeouts.load(Ordering::SeqCst) - before
    }
}

/// A tcp message (the connection set-up included) wakes a rank asleep in
/// another btl: no wait runs to its long timeout, and the sleeper was woken
/// through its waker.
#[test]
fn tcp_message_wakes_a_rank_asleep_in_shm() {
    let (a, b) = tcp_pair();
    let (go_tx, go) = mpsc::channel();
    let (done_tx, done) = mpsc::channel();
    let t = rank1(b, go, done, 2);
    let mut r0 = rank0(a);
    // Rank 0 is asleep (or about to be) when rank 1 starts: first message
    // opens the connection, the second one travels on it.
    for _ in 0..2 {
        let sender = std::thread::spawn({
            let go_tx = go_tx.clone();
            move || {
                std::thread::sleep(Duration::from_millis(100));
                go_tx.send(()).unwrap();
            }
        });
        let timeouts = r0.recv_one();
        sender.join().unwrap();
        assert_eq!(timeouts, 0, "a wait ran to its {LONG:?} timeout");
    }
    let wakes = r0.bell.wakes.load(Ordering::SeqCst);
    let sleeps = r0.bell.sleeps.load(Ordering::SeqCst);
    assert!(wakes >= 1 && sleeps >= 1, "wakes {wakes}, sleeps {sleeps}");
    done_tx.send(()).unwrap();
    drop(r0);
    t.join().unwrap();
}

/// An idle rank with a live tcp connection and a shm-like btl returns from
/// `wait` about once per timeout, not once per millisecond.
#[test]
fn idle_rank_with_mixed_peers_rarely_wakes() {
    let (a, b) = tcp_pair();
    let (go_tx, go) = mpsc::channel();
    let (done_tx, done) = mpsc::channel();
    let t = rank1(b, go, done, 1);
    let mut r0 = rank0(a);
    go_tx.send(()).unwrap();
    assert_eq!(r0.recv_one(), 0);
    let wakes_before = r0.bell.wakes.load(Ordering::SeqCst);
    let mut returns = 0u32;
    let end = Instant::now() + Duration::from_millis(300);
    while Instant::now() < end {
        r0.d.progress();
        r0.d.wait(Duration::from_millis(100));
        returns += 1;
    }
    let wakes = r0.bell.wakes.load(Ordering::SeqCst) - wakes_before;
    eprintln!("idle 300 ms: {returns} returns from wait, {wakes} wakes by the tcp watcher");
    assert!(
        returns < 30,
        "{returns} returns from wait in 300 ms (the 1 ms cap gave ~300)"
    );
    done_tx.send(()).unwrap();
    drop(r0);
    t.join().unwrap();
}

/// Dropping a driver whose tcp btl started its watcher thread joins it
/// promptly (clean shutdown, no hang), even while armed nowhere.
#[test]
fn watcher_thread_is_joined_at_shutdown() {
    let (a, b) = tcp_pair();
    let mut r0 = rank0(a);
    // One idle wait starts the watcher.
    r0.d.progress();
    r0.d.wait(Duration::from_millis(20));
    let start = Instant::now();
    drop(r0);
    drop(b);
    assert!(start.elapsed() < GUARD);
}
