//! The protocol over the in-crate verbs model: the btl conformance suite,
//! then what the model can see that the suite cannot (credits, RNR,
//! receive-buffer reposting, selective signalling, pipelined reads,
//! registration lifetimes, the registration cache).

mod common;

use common::{connect, IbFixture};
use gmpi_btl::conformance::{Can, HostBuffers, Support};
use gmpi_btl::{Btl, Event, LocalMem, MemDesc, Submit};
use gmpi_btl_ib::model::{ModelFabric, ModelNet};
use gmpi_btl_ib::rcache::{Limits, MemWatch, PAGE};
use gmpi_btl_ib::{IbBtl, IbConfig};

/// `n` ranks on one model network, all connected.
fn ranks(
    n: u32,
    cfg: &IbConfig,
    max_inline: u32,
    sq: u32,
    srq: u32,
) -> (ModelNet, Vec<IbBtl<ModelFabric>>) {
    let net = ModelNet::new();
    let btls = connect(n, cfg, |_| net.fabric(max_inline, sq, srq));
    (net, btls)
}

struct ModelFixture;

impl ModelFixture {
    #[allow(clippy::new_ret_no_self)]
    fn new(what: &str, cfg: IbConfig, max_inline: u32) -> IbFixture<ModelFabric> {
        let (net, btls) = ranks(2, &cfg, max_inline, 128, 1024);
        IbFixture {
            what: format!("ib over the verbs model, {what}"),
            support: Support {
                back_pressure: Can::Yes,
                get: Can::Yes,
                peer_failure: Can::Yes,
                wait_sleeps: Can::Yes,
            },
            btls: btls.into_iter().map(Some).collect(),
            mem: HostBuffers::default(),
            kill: Box::new(move |_, i| net.kill(i)),
        }
    }
}

gmpi_btl::conformance_tests!(default_config, || ModelFixture::new(
    "default configuration",
    IbConfig::default(),
    64
));
gmpi_btl::conformance_tests!(tight, || ModelFixture::new(
    "2 credits, 8 send slots, 64 KiB reads, no inline",
    IbConfig {
        credits: 2,
        send_slots: 8,
        signal_every: 4,
        read_chunk: 64 << 10,
        ..IbConfig::default()
    },
    0
));

/// Drive every btl until `done` or a bound of passes.
fn drive(
    btls: &mut [IbBtl<ModelFabric>],
    got: &mut [Vec<Vec<u8>>],
    mut done: impl FnMut(&[Vec<Vec<u8>>]) -> bool,
) {
    for _ in 0..100_000 {
        if done(got) {
            return;
        }
        for (r, b) in btls.iter_mut().enumerate() {
            b.progress(&mut |e| {
                if let Event::Frag { data, .. } = e {
                    got[r].push(data.to_vec());
                }
            });
        }
    }
    panic!("not done after 100000 passes");
}

/// A flood from several senders into one receiver that sometimes does not
/// progress: the senders are held back by credits (NoResource), never by
/// RNR, and everything arrives in order.
#[test]
fn credits_keep_the_receive_queue_from_running_dry() {
    let cfg = IbConfig {
        credits: 4,
        send_slots: 16,
        signal_every: 3,
        ..IbConfig::default()
    };
    let (net, mut btls) = ranks(4, &cfg, 32, 64, 4 * 3 * 8);
    let mut got = vec![Vec::new(); 4];
    let per = 500u32;
    let mut next = [0u32; 4];
    let mut refused = 0;
    while next[1..].iter().any(|&k| k < per) {
        for s in 1..4 {
            for _ in 0..10 {
                if next[s] == per {
                    break;
                }
                let len = [0usize, 5, 31, 32, 33, 700, 16 << 10][next[s] as usize % 7];
                let mut m = vec![s as u8; len];
                if len >= 4 {
                    m[..4].copy_from_slice(&next[s].to_le_bytes());
                }
                match btls[s].send(0, &[&m], 0).expect("send") {
                    Submit::Done => next[s] += 1,
                    Submit::NoResource => {
                        refused += 1;
                        break;
                    }
                    Submit::Queued => panic!("ib never queues"),
                }
            }
            btls[s].progress(&mut |_| {});
        }
        // The receiver progresses one pass in three.
        if refused % 3 == 0 {
            let g = &mut got[0];
            btls[0].progress(&mut |e| {
                if let Event::Frag { data, .. } = e {
                    g.push(data.to_vec());
                }
            });
        }
        refused += 1;
    }
    drive(&mut btls, &mut got, |g| g[0].len() == 3 * per as usize);
    assert_eq!(net.rnr_naks(), 0, "credits let the receive queue run dry");
    // Per sender, in order.
    for s in 1..4u8 {
        let mine: Vec<&Vec<u8>> = got[0].iter().filter(|m| m.len() > 4 && m[4] == s).collect();
        let mut last = None;
        for m in mine {
            let k = u32::from_le_bytes(m[..4].try_into().unwrap());
            assert!(last.is_none_or(|l| k > l), "sender {s}: {k} after {last:?}");
            last = Some(k);
        }
    }
}

/// One-way traffic: the receiver never sends, so its credits go back in
/// credit messages, and the sender never stalls for good.
#[test]
fn one_way_traffic_returns_credits_by_credit_messages() {
    let cfg = IbConfig {
        credits: 3,
        ..IbConfig::default()
    };
    let (net, mut btls) = ranks(2, &cfg, 64, 64, 64);
    let mut got = vec![Vec::new(); 2];
    let mut sent = 0;
    let mut passes = 0;
    while sent < 1000 {
        match btls[0].send(1, &[b"x", &[sent as u8]], 0).expect("send") {
            Submit::Done => sent += 1,
            Submit::NoResource => {}
            Submit::Queued => unreachable!(),
        }
        for (r, b) in btls.iter_mut().enumerate() {
            b.progress(&mut |e| {
                if let Event::Frag { data, .. } = e {
                    got[r].push(data.to_vec());
                }
            });
        }
        passes += 1;
        assert!(passes < 100_000, "stalled at {sent}");
    }
    drive(&mut btls, &mut got, |g| g[1].len() == 1000);
    for _ in 0..4 {
        for b in btls.iter_mut() {
            b.progress(&mut |_| {});
        }
    }
    for (k, m) in got[1].iter().enumerate() {
        assert_eq!(m, &[b'x', k as u8]);
    }
    assert!(got[0].is_empty());
    assert_eq!(net.rnr_naks(), 0);
    // At most half the credits stay owed (below the credit message's mark).
    assert!(
        btls[0].credits_to(1) >= Some(2),
        "{:?}",
        btls[0].credits_to(1)
    );
}

/// A 5 MiB get in 256 KiB reads (more chunks than `max_rd_atomic` lets
/// out at once) lands byte-exact, and every registration it took is gone
/// afterwards; a registration for a rendezvous lives until its last
/// `deregister`.
#[test]
fn pipelined_get_and_registration_lifetimes() {
    let cfg = IbConfig {
        read_chunk: 256 << 10,
        ..IbConfig::default()
    };
    let (net, mut btls) = ranks(2, &cfg, 64, 64, 256);
    // Connected first: a connection registers its receive buffers.
    send_when_ready(&mut btls, 1, 0, b"hello");
    let base = net.registrations(0);
    let src: Vec<u8> = (0..5 << 20)
        .map(|i: u32| (i * 7 + i / 4096) as u8)
        .collect();
    let d1 = btls[0]
        .register(src.as_ptr() as u64, src.len() as u64)
        .expect("register");
    let d2 = btls[0]
        .register(src.as_ptr() as u64, src.len() as u64)
        .expect("register");
    assert_eq!(d1, d2, "one registration for one range, counted");
    assert_eq!(net.registrations(0), base + 1);
    let mut dst = vec![0u8; src.len() - 3];
    let base1 = net.registrations(1);
    // SAFETY: `dst` outlives the get, which the loop below drives to its end.
    let r = unsafe { btls[1].get(0, &d1, 3, LocalMem::of(&mut dst), 9) };
    assert_eq!(r, Ok(Submit::Queued));
    let mut done = 0;
    for _ in 0..10_000 {
        btls[1].progress(&mut |e| match e {
            Event::GetComplete { token: 9 } => done += 1,
            Event::GetFailed { error, .. } => panic!("get failed: {error}"),
            _ => {}
        });
        btls[0].progress(&mut |_| {});
        if done > 0 {
            break;
        }
    }
    assert_eq!(done, 1);
    assert!(dst == src[3..], "the get read the wrong bytes");
    assert_eq!(
        net.registrations(1),
        base1,
        "the get's destination is still registered"
    );
    btls[0].deregister(&d1);
    assert_eq!(
        net.registrations(0),
        base + 1,
        "released while still in use"
    );
    btls[0].deregister(&d2);
    assert_eq!(
        net.registrations(0),
        base,
        "not released after the last use"
    );
}

/// A bad card is refused with a message naming the peer.
#[test]
fn bad_cards_are_refused() {
    let net = ModelNet::new();
    let mut b = IbBtl::new(0, 2, net.fabric(64, 64, 64), IbConfig::default(), &[1]).unwrap();
    let e = b.add_peer(1, "ib2;0;nonsense").unwrap_err();
    assert!(e.contains("rank 1"), "{e}");
    assert!(b.add_peer(5, "x").is_err());
}

/// Send `data` from rank `from` to rank `to`, progressing every rank while
/// the btl answers `NoResource` (a connection on its way, or credits),
/// for at most 5 s.
fn send_when_ready(btls: &mut [IbBtl<ModelFabric>], from: usize, to: u32, data: &[u8]) {
    let t = std::time::Instant::now();
    loop {
        match btls[from].send(to, &[data], 0) {
            Ok(Submit::Done) => return,
            Ok(Submit::NoResource) => {}
            other => panic!("send from {from} to {to}: {other:?}"),
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "rank {from} could not send to rank {to} in 5 s"
        );
        for b in btls.iter_mut() {
            b.progress(&mut |_| {});
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// Progress every rank, keeping the fragments, until `done` (at most 5 s).
fn drive_for(
    btls: &mut [IbBtl<ModelFabric>],
    got: &mut [Vec<Vec<u8>>],
    mut done: impl FnMut(&[Vec<Vec<u8>>]) -> bool,
) {
    let t = std::time::Instant::now();
    while !done(got) {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "not done in 5 s"
        );
        for (r, b) in btls.iter_mut().enumerate() {
            b.progress(&mut |e| {
                if let Event::Frag { data, .. } = e {
                    got[r].push(data.to_vec());
                }
            });
        }
    }
}

/// `MPI_Init` makes no RC queue pair: the first send towards a peer makes
/// one on each side of that pair only, and nothing is sent to a queue pair
/// before it is connected.
#[test]
fn queue_pairs_are_made_on_first_use_only() {
    let (net, mut btls) = ranks(4, &IbConfig::default(), 64, 64, 1024);
    for (r, b) in btls.iter().enumerate() {
        assert_eq!((net.queue_pairs(r), b.queue_pairs()), (0, 0));
    }
    let mut got = vec![Vec::new(); 4];
    send_when_ready(&mut btls, 0, 2, b"first");
    drive_for(&mut btls, &mut got, |g| g[2].len() == 1);
    assert_eq!(got[2], [b"first".to_vec()]);
    // The answer goes without another connection.
    send_when_ready(&mut btls, 2, 0, b"back");
    drive_for(&mut btls, &mut got, |g| g[0].len() == 1);
    assert_eq!(got[0], [b"back".to_vec()]);
    let made: Vec<usize> = (0..4).map(|r| net.queue_pairs(r)).collect();
    assert_eq!(made, [1, 0, 1, 0]);
    // Receive buffers too: a peer's share (credits and reserve) per peer
    // connected, none before.
    let share = (IbConfig::default().credits + gmpi_btl_ib::CREDIT_RESERVE) as usize;
    let bufs: Vec<usize> = btls.iter().map(|b| b.receive_buffers()).collect();
    assert_eq!(bufs, [share, 0, share, 0]);
    send_when_ready(&mut btls, 0, 1, b"third");
    drive_for(&mut btls, &mut got, |g| g[1].len() == 1);
    assert_eq!(btls[0].receive_buffers(), 2 * share);
    assert_eq!(net.rnr_naks(), 0);
    assert_eq!(btls[0].queue_pairs(), 2);
    assert_eq!(net.early_sends(), 0, "a SEND reached a queue pair in INIT");
}

/// Two ranks whose first sends cross: each asks, each answers the other,
/// and they end with one queue pair each, everything delivered in order.
#[test]
fn crossing_first_sends_make_one_queue_pair_each() {
    let (net, mut btls) = ranks(2, &IbConfig::default(), 64, 64, 1024);
    for (from, to) in [(0usize, 1u32), (1, 0)] {
        assert_eq!(btls[from].send(to, &[b"x"], 0), Ok(Submit::NoResource));
    }
    let mut got = vec![Vec::new(); 2];
    for k in 0..20u8 {
        send_when_ready(&mut btls, 0, 1, &[k]);
        send_when_ready(&mut btls, 1, 0, &[100 + k]);
    }
    drive_for(&mut btls, &mut got, |g| {
        g[0].len() == 20 && g[1].len() == 20
    });
    assert_eq!(got[1], (0..20u8).map(|k| vec![k]).collect::<Vec<_>>());
    assert_eq!(got[0], (0..20u8).map(|k| vec![100 + k]).collect::<Vec<_>>());
    assert_eq!((net.queue_pairs(0), net.queue_pairs(1)), (1, 1));
    assert_eq!(net.early_sends(), 0);
}

/// Lost datagrams (a REQ, its repeats, an RTU) cost repeats, not the
/// connection.
#[test]
fn lost_connection_messages_are_repeated() {
    let (net, mut btls) = ranks(2, &IbConfig::default(), 64, 64, 1024);
    net.drop_datagrams(3);
    let mut got = vec![Vec::new(); 2];
    send_when_ready(&mut btls, 0, 1, b"despite");
    drive_for(&mut btls, &mut got, |g| g[1].len() == 1);
    assert!(net.datagrams().1 >= 3, "{:?}", net.datagrams());

    // Rank 1's RTU is lost and rank 0 sends nothing more: rank 1, which
    // has not seen its peer ready, asks again itself before it sends.
    let (net, mut btls) = ranks(2, &IbConfig::default(), 64, 64, 1024);
    assert_eq!(btls[0].send(1, &[b"x"], 0), Ok(Submit::NoResource));
    btls[1].progress(&mut |_| {}); // REQ in, REP out
    net.drop_datagrams(1);
    btls[0].progress(&mut |_| {}); // REP in (ready), RTU lost
    assert_eq!(net.datagrams().1, 1);
    let mut got = vec![Vec::new(); 2];
    send_when_ready(&mut btls, 1, 0, b"later");
    drive_for(&mut btls, &mut got, |g| g[0].len() == 1);
    assert_eq!(got[0], [b"later".to_vec()]);
    assert_eq!((net.queue_pairs(0), net.queue_pairs(1)), (1, 1));
    assert_eq!(net.early_sends(), 0);
}

/// A connection message whose nonce is not the sender's card's (another
/// run of that rank, another job) is dropped: no queue pair is made for it.
#[test]
fn a_request_with_another_nonce_is_dropped() {
    let net = ModelNet::new();
    let cfg = IbConfig::default();
    let mut a = IbBtl::new(0, 2, net.fabric(64, 64, 64), cfg.clone(), &[1]).unwrap();
    let mut b = IbBtl::new(1, 2, net.fabric(64, 64, 64), cfg, &[0]).unwrap();
    let card = b.card();
    let (head, nonce) = card.rsplit_once(';').unwrap();
    let other = u64::from_str_radix(nonce, 16).unwrap() ^ 1;
    a.add_peer(1, &format!("{head};{other:x}")).unwrap();
    b.add_peer(0, &a.card()).unwrap();
    assert_eq!(b.send(0, &[b"x"], 0), Ok(Submit::NoResource));
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_millis(100) {
        a.progress(&mut |_| {});
        b.progress(&mut |_| {});
    }
    assert_eq!(net.queue_pairs(0), 0, "rank 0 answered a stranger");
    assert!(net.datagrams().0 >= 2, "rank 1 did not ask again");
    assert_eq!(b.send(0, &[b"x"], 0), Ok(Submit::NoResource));
}

/// A get towards a peer nothing was sent to yet waits for the connection,
/// then reads.
#[test]
#[allow(unsafe_code)] // lends a test buffer to a get
fn a_first_get_connects_then_reads() {
    let (net, mut btls) = ranks(2, &IbConfig::default(), 64, 64, 1024);
    let src: Vec<u8> = (0..100_000u32).map(|k| (k * 7) as u8).collect();
    let desc = btls[1]
        .register(src.as_ptr() as u64, src.len() as u64)
        .expect("registered");
    let mut dst = vec![0u8; src.len()];
    let local = LocalMem {
        addr: dst.as_mut_ptr() as u64,
        len: dst.len(),
    };
    // SAFETY: `dst` outlives the get, which ends below (GetComplete) before
    // `dst` is read or dropped.
    let r = unsafe { btls[0].get(1, &desc, 0, local, 7) };
    assert_eq!(r, Ok(Submit::Queued));
    let mut done = false;
    let t = std::time::Instant::now();
    while !done {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "get not done"
        );
        btls[0].progress(&mut |e| {
            if let Event::GetComplete { token: 7 } = e {
                done = true;
            }
        });
        btls[1].progress(&mut |_| {});
    }
    assert_eq!(dst, src);
    assert_eq!((net.queue_pairs(0), net.queue_pairs(1)), (1, 1));
    btls[1].deregister(&desc);
}

/// Three ranks, rank 0 connected to ranks 1 and 2 by a message each.
fn rank_0_talking_to_1_and_2() -> (ModelNet, Vec<IbBtl<ModelFabric>>) {
    let (net, mut btls) = ranks(3, &IbConfig::default(), 64, 64, 1024);
    let mut got = vec![Vec::new(); 3];
    send_when_ready(&mut btls, 0, 1, b"a");
    drive_for(&mut btls, &mut got, |g| g[1].len() == 1);
    send_when_ready(&mut btls, 0, 2, b"b");
    drive_for(&mut btls, &mut got, |g| g[2].len() == 1);
    (net, btls)
}

/// The peers one progress pass of `b` reports failed.
fn failed_of(b: &mut IbBtl<ModelFabric>) -> Vec<u32> {
    let mut f = Vec::new();
    b.progress(&mut |e| {
        if let Event::PeerFailed { peer } = e {
            f.push(peer);
        }
    });
    f
}

/// A fatal asynchronous event fails the peer of the queue pair it names;
/// one that names none (the port went down) fails every peer, and each is
/// reported once, with sends to it refused.
#[test]
fn asynchronous_events_fail_their_peers() {
    let (net, mut btls) = rank_0_talking_to_1_and_2();
    // Rank 2's queue pair to rank 0 goes fatal: rank 0 only fails for it.
    let qpn = btls[2].queue_pair_of(0).expect("made by the first message");
    net.async_event(2, Some(qpn), "asynchronous event IBV_EVENT_QP_FATAL");
    assert_eq!(failed_of(&mut btls[2]), [0]);
    // A port error on rank 0 fails every peer it reaches.
    net.async_event(
        0,
        None,
        "asynchronous event IBV_EVENT_PORT_ERR on model0 port 1",
    );
    let mut failed = failed_of(&mut btls[0]);
    failed.sort();
    assert_eq!(failed, [1, 2]);
    assert!(failed_of(&mut btls[0]).is_empty(), "reported twice");
    assert!(matches!(
        btls[0].send(2, &[b"c"], 0),
        Err(gmpi_btl::BtlError::PeerFailed(2))
    ));
    assert!(!btls[0].reaches(1));
}

/// A port that goes down shows first as a completion error when its event
/// has not been read yet (verbs reads the event descriptor only now and
/// then): the error makes the btl read it at once, so every peer behind the
/// port fails in that pass, for the event, not only the peer whose queue
/// pair completed in error.
#[test]
fn a_completion_error_reads_a_pending_port_event_at_once() {
    let (net, mut btls) = rank_0_talking_to_1_and_2();
    net.defer_async_events(true);
    net.async_event(
        0,
        None,
        "asynchronous event IBV_EVENT_PORT_ERR on model0 port 1",
    );
    assert!(
        failed_of(&mut btls[0]).is_empty(),
        "the event is not read by a pass"
    );
    // Rank 1 stops answering: rank 0's next send to it completes in error.
    net.kill(1);
    assert!(matches!(btls[0].send(1, &[b"c"], 0), Ok(Submit::Done)));
    let mut failed = failed_of(&mut btls[0]);
    failed.sort();
    assert_eq!(failed, [1, 2], "every peer behind the port, in one pass");
}

/// A failed peer's queue pair goes to the error state at once: sends that
/// wait for the peer's receive buffers (RNR, retried by the queue pair) are
/// flushed then, not retried towards a peer that is gone, and later ones
/// are refused.
#[test]
fn a_failed_peer_s_queue_pair_is_flushed_at_once() {
    // Credits beyond the receiver's 4 buffers: sends wait (RNR).
    let cfg = IbConfig {
        recv_buffers: Some(4),
        ..IbConfig::default()
    };
    let (net, mut btls) = ranks(2, &cfg, 64, 64, 1024);
    send_when_ready(&mut btls, 0, 1, b"a");
    let qpn = btls[0].queue_pair_of(1).expect("made by the first message");
    for k in 0..16u8 {
        let _ = btls[0].send(1, &[&[k]], 0);
    }
    assert!(net.waiting_sends(qpn) > 0, "no send waits for a buffer");
    assert!(!net.in_error(qpn));
    net.async_event(
        0,
        None,
        "asynchronous event IBV_EVENT_PORT_ERR on model0 port 1",
    );
    assert_eq!(failed_of(&mut btls[0]), [1]);
    assert!(
        net.in_error(qpn),
        "the failed peer's queue pair is not in the error state"
    );
    assert_eq!(net.waiting_sends(qpn), 0, "sends still wait");
    assert!(matches!(
        btls[0].send(1, &[b"z"], 0),
        Err(gmpi_btl::BtlError::PeerFailed(1))
    ));
}

/// A memory watch the test drives: it records what is watched and reports
/// the ranges the test says are gone.
#[derive(Debug, Clone, Default)]
struct Manual(std::sync::Arc<std::sync::Mutex<ManualState>>);

#[derive(Debug, Default)]
struct ManualState {
    watched: Vec<(u64, u64)>,
    gone: Vec<(u64, u64)>,
    lost: bool,
    refuse: bool,
    pending: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Manual {
    fn gone(&self, start: u64, end: u64) {
        let mut st = self.0.lock().unwrap();
        st.gone.push((start, end));
        st.pending.store(true, std::sync::atomic::Ordering::Release);
    }
    /// Pages watched now (the union of what is watched).
    fn watched_pages(&self) -> usize {
        let mut pages = std::collections::BTreeSet::new();
        for &(s, e) in &self.0.lock().unwrap().watched {
            pages.extend((s..e).step_by(PAGE as usize));
        }
        pages.len()
    }
}

impl MemWatch for Manual {
    fn watch(&mut self, start: u64, end: u64) -> bool {
        let mut st = self.0.lock().unwrap();
        assert_eq!((start % PAGE, end % PAGE), (0, 0), "unaligned watch");
        if st.refuse {
            return false;
        }
        st.watched.push((start, end));
        true
    }
    fn unwatch(&mut self, start: u64, end: u64) {
        // Cut [start, end) out of every watched range.
        let mut st = self.0.lock().unwrap();
        let mut out = Vec::new();
        for &(s, e) in &st.watched {
            if e <= start || end <= s {
                out.push((s, e));
                continue;
            }
            if s < start {
                out.push((s, start));
            }
            if end < e {
                out.push((end, e));
            }
        }
        st.watched = out;
    }
    fn take_gone(&mut self, out: &mut Vec<(u64, u64)>) -> bool {
        let mut st = self.0.lock().unwrap();
        out.clear();
        out.append(&mut st.gone);
        st.pending
            .store(false, std::sync::atomic::Ordering::Release);
        std::mem::take(&mut st.lost)
    }
    fn pending_flag(&self) -> Option<std::sync::Arc<std::sync::atomic::AtomicBool>> {
        Some(self.0.lock().unwrap().pending.clone())
    }
}

/// Two connected ranks whose registrations are cached within `limits`.
fn cached(limits: Limits) -> (ModelNet, Vec<IbBtl<ModelFabric>>, Manual) {
    let (net, mut btls) = ranks(2, &IbConfig::default(), 64, 64, 256);
    let w = Manual::default();
    for b in &mut btls {
        b.set_memwatch(Box::new(w.clone()), limits);
    }
    // Connected first: a connection registers its receive buffers.
    send_when_ready(&mut btls, 1, 0, b"hello");
    (net, btls, w)
}

/// Drive `btls[1]`'s get of `len` bytes at `offset` of `desc` into `dst`.
#[allow(unsafe_code)] // lends a test buffer to a get
fn get_all(btls: &mut [IbBtl<ModelFabric>], desc: &MemDesc, offset: u64, dst: &mut [u8]) {
    // SAFETY: `dst` outlives the get, which the loop below drives to its end.
    let r = unsafe { btls[1].get(0, desc, offset, LocalMem::of(dst), 5) };
    assert_eq!(r, Ok(Submit::Queued));
    let mut done = false;
    for _ in 0..10_000 {
        btls[1].progress(&mut |e| match e {
            Event::GetComplete { token: 5 } => done = true,
            Event::GetFailed { error, .. } => panic!("get failed: {error}"),
            _ => {}
        });
        btls[0].progress(&mut |_| {});
        if done {
            return;
        }
    }
    panic!("get not done");
}

/// A send buffer's and a get destination's registrations outlive their
/// rendezvous and serve the next ones (any range inside them) until the
/// watch says their memory went; then the next request registers afresh.
#[test]
fn cached_registrations_serve_later_rendezvous_until_their_memory_goes() {
    let (net, mut btls, w) = cached(Limits::default());
    let (base0, base1) = (net.registrations(0), net.registrations(1));
    let src: Vec<u8> = (0..3 << 20)
        .map(|i: u32| (i * 13 + i / 4096) as u8)
        .collect();
    let (a, n) = (src.as_ptr() as u64, src.len() as u64);
    let mut dst = vec![0u8; src.len()];
    for round in 0..3 {
        let d = btls[0].register(a, n).expect("register");
        get_all(&mut btls, &d, 0, &mut dst);
        assert!(dst == src, "round {round}: wrong bytes");
        btls[0].deregister(&d);
        assert_eq!(
            net.registrations(0),
            base0 + 1,
            "round {round}: the send buffer's registration"
        );
        assert_eq!(
            net.registrations(1),
            base1 + 1,
            "round {round}: the destination's registration"
        );
    }
    // A range inside the send buffer: the same registration.
    let whole = btls[0].register(a, n).unwrap();
    let part = btls[0].register(a + 5000, 70_000).unwrap();
    assert_eq!(part.key, whole.key);
    assert_eq!((part.addr, part.len), (a + 5000, 70_000));
    let s = btls[0].rcache_stats();
    assert_eq!((s.misses, s.hits), (1, 4));
    btls[0].deregister(&part);
    btls[0].deregister(&whole);
    // The pages it covers are watched: the buffer's, rounded out to pages.
    let pages = ((a + n).div_ceil(PAGE) - a / PAGE) as usize;
    assert!(w.watched_pages() >= pages);
    // Part of the buffer goes (say, free returned a page): the next
    // request registers afresh, and the old registration is released.
    w.gone(a + PAGE * 7, a + PAGE * 8);
    let fresh = btls[0].register(a, n).unwrap();
    assert_ne!(fresh.key, whole.key);
    assert_eq!(net.registrations(0), base0 + 1);
    btls[0].deregister(&fresh);
    assert_eq!(btls[0].rcache_stats().invalidated, 1);
    // The get destination's memory goes: the next get registers it afresh.
    w.gone(dst.as_ptr() as u64, dst.as_ptr() as u64 + 1);
    let before = net.registered().host;
    let d = btls[0].register(a, n).unwrap();
    get_all(&mut btls, &d, 0, &mut dst);
    btls[0].deregister(&d);
    assert_eq!(
        net.registered().host,
        before + 1,
        "one new registration: the destination's"
    );
    assert_eq!(net.registrations(1), base1 + 1);
}

/// Parts of one array sent one after the other: a part that overlaps or
/// touches unused registrations registers their union, and later parts
/// inside it register nothing.
#[test]
fn overlapping_parts_of_an_array_end_up_registered_once() {
    let (net, mut btls, w) = cached(Limits::default());
    let base = net.registrations(0);
    let arr = vec![9u8; 1 << 20];
    let a = arr.as_ptr() as u64;
    let part = |b: &mut IbBtl<ModelFabric>, off: u64, len: u64| {
        let d = b.register(a + off, len).unwrap();
        b.deregister(&d);
    };
    part(&mut btls[0], 0, 300_000);
    part(&mut btls[0], 200_000, 300_000); // overlaps the first
    assert_eq!(net.registrations(0), base + 1);
    part(&mut btls[0], 500_000, 100_000); // shares a page with it
    part(&mut btls[0], 700_000, 100_000); // apart: its own
    assert_eq!(net.registrations(0), base + 2);
    let s = btls[0].rcache_stats();
    assert_eq!((s.misses, s.merged), (4, 2));
    // Inside the merged one: a hit.
    part(&mut btls[0], 10_000, 550_000);
    assert_eq!(btls[0].rcache_stats().hits, 1);
    // A registration in use is not folded into another one.
    let held = btls[0].register(a + 700_000, 100_000).unwrap();
    part(&mut btls[0], 690_000, 100_000);
    assert_eq!(btls[0].rcache_stats().merged, 2);
    assert_eq!(net.registrations(0), base + 3);
    btls[0].deregister(&held);
    let pages = ((a + 800_000).div_ceil(PAGE) - a / PAGE) as usize;
    assert!(w.watched_pages() <= pages + 1);
}

/// Memory that goes while a rendezvous still uses its registration: no
/// later request gets that registration, and it is released when its last
/// user ends, not kept.
#[test]
fn a_registration_whose_memory_goes_in_use_serves_nobody_new() {
    let (net, mut btls, w) = cached(Limits::default());
    let base = net.registrations(0);
    let src = vec![3u8; 200_000];
    let (a, n) = (src.as_ptr() as u64, src.len() as u64);
    let old = btls[0].register(a, n).unwrap();
    w.gone(a, a + n);
    let new = btls[0].register(a, n).unwrap();
    assert_ne!(old.key, new.key);
    assert_eq!(net.registrations(0), base + 2);
    btls[0].deregister(&old);
    assert_eq!(
        net.registrations(0),
        base + 1,
        "the stale registration is kept"
    );
    btls[0].deregister(&new);
    assert_eq!(net.registrations(0), base + 1, "the fresh one is cached");
    // The stale entry's pages are no longer watched for it; the fresh
    // entry's are.
    let pages = ((a + n).div_ceil(PAGE) - a / PAGE) as usize;
    assert_eq!(w.watched_pages(), pages);
}

/// Memory that leaves while its registration is unused is unpinned at the
/// next progress pass, without waiting for another registration.
#[test]
fn a_progress_pass_releases_registrations_of_memory_that_left() {
    let (net, mut btls, w) = cached(Limits::default());
    let base = net.registrations(0);
    let src = vec![3u8; 200_000];
    let (a, n) = (src.as_ptr() as u64, src.len() as u64);
    let d = btls[0].register(a, n).unwrap();
    btls[0].deregister(&d);
    assert_eq!(net.registrations(0), base + 1);
    btls[0].progress(&mut |_| {});
    assert_eq!(net.registrations(0), base + 1, "nothing left: kept");
    w.gone(a + n - 1, a + n);
    btls[0].progress(&mut |_| {});
    assert_eq!(net.registrations(0), base);
    assert_eq!(w.watched_pages(), 0);
}

/// Unused registrations are kept within the limits, least recently used
/// first out, and unwatched when they go.
#[test]
fn unused_registrations_are_evicted_least_recently_used_first() {
    let (net, mut btls, w) = cached(Limits {
        entries: 2,
        bytes: 1 << 30,
    });
    let base = net.registrations(0);
    // Three buffers 100 KB apart: no page in common (that would merge them).
    let mem = vec![0u8; 600_000];
    let at = |k: usize| mem.as_ptr() as u64 + 200_000 * k as u64;
    let use_once = |b: &mut IbBtl<ModelFabric>, k: usize| {
        let d = b.register(at(k), 100_000).unwrap();
        b.deregister(&d);
    };
    use_once(&mut btls[0], 0);
    use_once(&mut btls[0], 1);
    use_once(&mut btls[0], 0); // 1 is now the oldest
    use_once(&mut btls[0], 2);
    assert_eq!(net.registrations(0), base + 2);
    assert_eq!(btls[0].rcache_stats().evicted, 1);
    let misses = btls[0].rcache_stats().misses;
    use_once(&mut btls[0], 0);
    use_once(&mut btls[0], 2);
    assert_eq!(btls[0].rcache_stats().misses, misses, "0 and 2 are kept");
    use_once(&mut btls[0], 1);
    assert_eq!(btls[0].rcache_stats().misses, misses + 1, "1 was evicted");
    // Two entries' pages watched (1 and 2: 0 went last), not three.(buffers may share a page).
    let pages = |k: usize| {
        let a = at(k);
        ((a + 100_000).div_ceil(PAGE) - a / PAGE) as usize
    };
    assert!(w.watched_pages() <= pages(1) + pages(2));
    // A byte limit: one 100 000-byte entry does not fit in 64 KiB.
    let (net, mut btls, _w) = cached(Limits {
        entries: 100,
        bytes: 64 << 10,
    });
    let base = net.registrations(0);
    use_once(&mut btls[0], 0);
    assert_eq!(net.registrations(0), base);
}

/// Memory the watch will not watch, or no watch at all, is registered per
/// use: released with its last user, as without a cache.
#[test]
fn unwatched_memory_is_released_after_its_last_use() {
    let (net, mut btls, w) = cached(Limits::default());
    w.0.lock().unwrap().refuse = true;
    let base = net.registrations(0);
    let src = vec![1u8; 50_000];
    let d1 = btls[0].register(src.as_ptr() as u64, 50_000).unwrap();
    let d2 = btls[0].register(src.as_ptr() as u64, 50_000).unwrap();
    assert_eq!(d1.key, d2.key, "shared while in use");
    btls[0].deregister(&d1);
    assert_eq!(net.registrations(0), base + 1);
    btls[0].deregister(&d2);
    assert_eq!(net.registrations(0), base);
}

/// A watch that lost reports drops every unused entry.
#[test]
fn lost_reports_drop_every_cached_registration() {
    let (net, mut btls, w) = cached(Limits::default());
    let base = net.registrations(0);
    let bufs: Vec<Vec<u8>> = (0..4).map(|k| vec![k as u8; 30_000]).collect();
    for b in &bufs {
        let d = btls[0].register(b.as_ptr() as u64, 30_000).unwrap();
        btls[0].deregister(&d);
    }
    assert!(net.registrations(0) > base);
    w.0.lock().unwrap().lost = true;
    let d = btls[0].register(bufs[0].as_ptr() as u64, 30_000).unwrap();
    assert_eq!(net.registrations(0), base + 1);
    btls[0].deregister(&d);
}

/// At the locked-memory limit, registering gives back the unused cached
/// registrations and tries again.
#[test]
fn the_locked_memory_limit_empties_the_cache_before_failing() {
    let (net, mut btls, _w) = cached(Limits::default());
    let held: u64 = 4 << 20; // the slabs and buffers, roughly
    net.set_pin_limit(held + (3 << 20));
    let a = vec![1u8; 2 << 20];
    let b = vec![2u8; 2 << 20];
    let da = btls[0].register(a.as_ptr() as u64, a.len() as u64).unwrap();
    btls[0].deregister(&da);
    let db = btls[0]
        .register(b.as_ptr() as u64, b.len() as u64)
        .expect("the cached registration of `a` was given back");
    // Both in use: the limit is real.
    assert!(btls[0]
        .register(a.as_ptr() as u64, a.len() as u64)
        .is_none());
    btls[0].deregister(&db);
}
