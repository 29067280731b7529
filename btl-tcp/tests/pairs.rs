//! Several `TcpBtl`s in one process over 127.0.0.1: ordering, large
//! fragments under back-pressure, lazy and simultaneous connects, clean
//! shutdown, and `wait` sleeping until data arrives.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::*;
use gmpi_btl::{Btl, BtlError, Rank, Submit};
use gmpi_btl_tcp::TcpBtl;

/// Send `frags[next..]` from `b` to `peer` until the btl refuses; returns
/// whether it refused at least once.
fn push_some(b: &mut TcpBtl, peer: Rank, frags: &[Vec<u8>], next: &mut usize) -> bool {
    while *next < frags.len() {
        let f = &frags[*next];
        // Split the fragment in two parts to exercise gather lists.
        let cut = f.len() / 3;
        match b.send(peer, &[&f[..cut], &f[cut..]], 0).unwrap() {
            Submit::Done => *next += 1,
            Submit::NoResource => return true,
            Submit::Queued => panic!("token 0 must never be queued"),
        }
    }
    false
}

fn sizes(seed: u32, n: u32, max: usize) -> Vec<usize> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            match i % 7 {
                0 => 0,
                1 => max,
                2 | 3 => (x as usize) % 64,
                _ => (x as usize) % max,
            }
        })
        .collect()
}

fn check_stream(got: &Got, from: Rank, want: &[Vec<u8>]) {
    let mine: Vec<&Vec<u8>> = got
        .frags
        .iter()
        .filter(|f| f.0 == from)
        .map(|f| &f.1)
        .collect();
    assert_eq!(mine.len(), want.len(), "fragments from rank {from}");
    for (i, (g, w)) in mine.iter().zip(want).enumerate() {
        assert!(
            g == &w,
            "fragment {i} from rank {from} differs (len {} vs {})",
            g.len(),
            w.len()
        );
    }
}

#[test]
fn ordered_delivery_of_mixed_sizes_both_ways() {
    let cfg = cfg();
    let max = cfg.max_frag;
    let mut b = group(3, &cfg);
    let n = 600u32;
    // frags[src][dst]
    let frags: Vec<Vec<Vec<Vec<u8>>>> = (0..3u32)
        .map(|s| {
            (0..3u32)
                .map(|d| {
                    if s == d {
                        return Vec::new();
                    }
                    sizes(s * 10 + d, n, max)
                        .into_iter()
                        .enumerate()
                        .map(|(i, len)| payload(s, i as u32, len))
                        .collect()
                })
                .collect()
        })
        .collect();
    let mut next = vec![vec![0usize; 3]; 3];
    let mut gots: Vec<Got> = (0..3).map(|_| Got::default()).collect();
    let total = 2 * n as usize;
    let t = std::time::Instant::now();
    while gots.iter().any(|g| g.frags.len() < total) {
        for s in 0..3 {
            for d in 0..3 {
                if s != d {
                    push_some(&mut b[s], d as Rank, &frags[s][d], &mut next[s][d]);
                }
            }
        }
        for (bt, g) in b.iter_mut().zip(gots.iter_mut()) {
            progress_into(bt, g);
            assert!(g.failed.is_empty(), "{:?}", g.failed);
        }
        assert!(t.elapsed() < GUARD, "hang guard");
    }
    for (d, g) in gots.iter().enumerate() {
        for (s, to) in frags.iter().enumerate() {
            if s != d {
                check_stream(g, s as Rank, &to[d]);
            }
        }
    }
    close_all(b);
}

#[test]
fn big_fragments_under_back_pressure() {
    let mut cfg = cfg();
    cfg.queue_bytes = 512 << 10;
    let max = cfg.max_frag;
    let mut b = group(2, &cfg);
    // 48 MiB one way, far more than socket buffers and the queue hold.
    let frags: Vec<Vec<u8>> = (0..384u32).map(|i| payload(0, i, max)).collect();
    let mut next = 0;
    let mut gots = vec![Got::default(), Got::default()];
    // Connect first, then push without letting rank 1 read.
    b[0].send(1, &[b"hi"], 0).unwrap();
    pump(&mut b, &mut gots, |g| g[1].frags.len() == 1);
    gots[1].frags.clear();
    let mut refused = false;
    for _ in 0..10_000 {
        refused |= push_some(&mut b[0], 1, &frags, &mut next);
        let mut g0 = Got::default();
        progress_into(&mut b[0], &mut g0);
        if refused {
            break;
        }
    }
    assert!(
        refused,
        "a full queue must answer NoResource ({next} fragments taken)"
    );
    assert!(next < frags.len());
    let t = std::time::Instant::now();
    while gots[1].frags.len() < frags.len() {
        push_some(&mut b[0], 1, &frags, &mut next);
        for (bt, g) in b.iter_mut().zip(gots.iter_mut()) {
            progress_into(bt, g);
        }
        assert!(t.elapsed() < GUARD, "hang guard");
    }
    check_stream(&gots[1], 0, &frags);
    assert!(gots.iter().all(|g| g.failed.is_empty()));
    close_all(b);
}

#[test]
fn connections_are_made_on_first_use_only() {
    let mut b = group(4, &cfg());
    let mut gots: Vec<Got> = (0..4).map(|_| Got::default()).collect();
    pump(&mut b, &mut gots, |_| true);
    for bt in &b {
        assert!(bt.connected_peers().is_empty());
    }
    b[2].send(0, &[b"lazy"], 0).unwrap();
    pump(&mut b, &mut gots, |g| g[0].frags.len() == 1);
    assert_eq!(gots[0].frags[0], (2, b"lazy".to_vec()));
    // The server side is up once the frame arrived; the client's too.
    assert_eq!(b[0].connected_peers(), vec![2]);
    assert_eq!(b[2].connected_peers(), vec![0]);
    assert!(b[1].connected_peers().is_empty() && b[3].connected_peers().is_empty());
    // The reply reuses the same connection.
    b[0].send(2, &[b"back"], 0).unwrap();
    pump(&mut b, &mut gots, |g| g[2].frags.len() == 1);
    assert_eq!(b[0].connected_peers(), vec![2]);
    assert_eq!(b[2].connected_peers(), vec![0]);
    close_all(b);
}

/// Every rank sends first to every other at the same moment, from its own
/// thread; each pair must end with one connection and every stream intact.
fn all_send_first_at_once(n: u32, per_peer: u32) {
    let cfg = cfg();
    let btls = group(n, &cfg);
    let go = Arc::new(Barrier::new(n as usize));
    let hs: Vec<_> = btls
        .into_iter()
        .enumerate()
        .map(|(r, mut b)| {
            let go = Arc::clone(&go);
            std::thread::spawn(move || {
                let me = r as Rank;
                let frags: Vec<Vec<Vec<u8>>> = (0..n)
                    .map(|d| {
                        (0..per_peer)
                            .map(|i| payload(me, i, 8 + ((i * 997 + d * 31) as usize % 3000)))
                            .collect()
                    })
                    .collect();
                let mut next = vec![0usize; n as usize];
                let mut got = Got::default();
                go.wait();
                let want = (per_peer * (n - 1)) as usize;
                let t = std::time::Instant::now();
                while got.frags.len() < want
                    || next
                        .iter()
                        .enumerate()
                        .any(|(d, &k)| d != r && k < per_peer as usize)
                {
                    for d in 0..n {
                        if d != me {
                            push_some(&mut b, d, &frags[d as usize], &mut next[d as usize]);
                        }
                    }
                    progress_into(&mut b, &mut got);
                    assert!(got.failed.is_empty(), "rank {me}: {:?}", got.failed);
                    assert!(t.elapsed() < GUARD, "hang guard");
                }
                let mut peers = b.connected_peers();
                // Close together, as ranks finalize together.
                go.wait();
                b.close();
                peers.sort_unstable();
                (peers, got)
            })
        })
        .collect();
    let done: Vec<(Vec<Rank>, Got)> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    for (r, (peers, got)) in done.iter().enumerate() {
        for s in 0..n {
            if s as usize == r {
                continue;
            }
            let want: Vec<Vec<u8>> = (0..per_peer)
                .map(|i| payload(s, i, 8 + ((i * 997 + r as u32 * 31) as usize % 3000)))
                .collect();
            check_stream(got, s, &want);
        }
        let others: Vec<Rank> = (0..n).filter(|&p| p as usize != r).collect();
        assert_eq!(peers, &others, "rank {r}: one connection per peer");
    }
}

#[test]
fn simultaneous_connect_keeps_one_connection_and_every_fragment() {
    for _ in 0..40 {
        all_send_first_at_once(2, 20);
    }
    for _ in 0..5 {
        all_send_first_at_once(5, 10);
    }
}

#[test]
fn clean_close_says_goodbye_and_reports_no_failure() {
    let mut b = group(3, &cfg());
    let mut gots: Vec<Got> = (0..3).map(|_| Got::default()).collect();
    b[0].send(1, &[b"a"], 0).unwrap();
    b[1].send(0, &[b"b"], 0).unwrap();
    b[2].send(1, &[b"c"], 0).unwrap();
    pump(&mut b, &mut gots, |g| {
        g[0].frags.len() == 1 && g[1].frags.len() == 2
    });
    let mut b2 = b.pop().unwrap();
    let mut b1 = b.pop().unwrap();
    let b0 = b.pop().unwrap();
    // Rank 0 shuts down cleanly while rank 1 keeps running; something
    // queued at close time must still arrive. Its close waits for rank 1's
    // goodbye, so it runs on its own thread.
    let h0 = std::thread::spawn(move || {
        let mut b0 = b0;
        b0.send(1, &[b"last words"], 0).unwrap();
        b0.close();
    });
    let mut g1 = Got::default();
    let t = std::time::Instant::now();
    while !b1.peer_finished(0) {
        progress_into(&mut b1, &mut g1);
        b1.wait(Duration::from_millis(2));
        assert!(t.elapsed() < GUARD, "hang guard");
    }
    assert_eq!(g1.frags, vec![(0, b"last words".to_vec())]);
    assert!(g1.failed.is_empty(), "a goodbye is not a failure");
    assert_eq!(b1.send(0, &[b"x"], 0), Err(BtlError::PeerFailed(0)));
    // Rank 1 closes too (rank 2 answers from this thread); both closes end.
    let h1 = std::thread::spawn(move || b1.close());
    let mut g2 = Got::default();
    let t = std::time::Instant::now();
    while !b2.peer_finished(1) {
        progress_into(&mut b2, &mut g2);
        b2.wait(Duration::from_millis(2));
        assert!(t.elapsed() < GUARD, "hang guard");
    }
    // Rank 2 answers the goodbye while it keeps progressing.
    pump_while(&mut b2, &mut g2, || !h1.is_finished());
    assert!(g2.failed.is_empty(), "a goodbye is not a failure");
    h1.join().unwrap();
    h0.join().unwrap();
    b2.close();
}

#[test]
fn dropping_a_btl_without_close_is_clean_too() {
    let mut b = group(2, &cfg());
    let mut gots = vec![Got::default(), Got::default()];
    b[1].send(0, &[b"x"], 0).unwrap();
    pump(&mut b, &mut gots, |g| g[0].frags.len() == 1);
    let b1 = b.pop().unwrap();
    let h = std::thread::spawn(move || drop(b1));
    let mut g = Got::default();
    let t = std::time::Instant::now();
    while !b[0].peer_finished(1) {
        progress_into(&mut b[0], &mut g);
        assert!(t.elapsed() < GUARD);
    }
    drop(b);
    h.join().unwrap();
    assert!(g.failed.is_empty());
}

#[test]
fn wait_sleeps_until_data_arrives() {
    let mut b = group(2, &cfg());
    let mut gots = vec![Got::default(), Got::default()];
    b[0].send(1, &[b"connect"], 0).unwrap();
    pump(&mut b, &mut gots, |g| g[1].frags.len() == 1);
    let mut b1 = b.pop().unwrap();
    let go = Arc::new(Barrier::new(2));
    let go2 = Arc::clone(&go);
    let h = std::thread::spawn(move || {
        let mut g = Got::default();
        let mut wakeups = 0u32;
        go2.wait();
        loop {
            progress_into(&mut b1, &mut g);
            if !g.frags.is_empty() {
                break;
            }
            b1.wait(Duration::from_secs(30));
            wakeups += 1;
            assert!(wakeups < 1000, "wait() does not block");
        }
        (b1, g, wakeups)
    });
    go.wait();
    std::thread::sleep(Duration::from_millis(300));
    b[0].send(1, &[b"wake up"], 0).unwrap();
    let (b1, g, wakeups) = h.join().unwrap();
    assert_eq!(g.frags, vec![(0, b"wake up".to_vec())]);
    // A spinning wait would have looped thousands of times in 300 ms.
    assert!(wakeups <= 20, "{wakeups} wake-ups while idle");
    let mut all = b;
    all.push(b1);
    close_all(all);
}

#[test]
fn unreachable_peer_is_reported_failed() {
    let mut cfg = cfg();
    cfg.handshake_timeout = Duration::from_secs(5);
    let mut b = TcpBtl::bind(0, 2, cfg).unwrap();
    // A port nobody listens on (bound then closed).
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    drop(l);
    b.add_peer(1, &a.to_string()).unwrap();
    assert_eq!(b.send(1, &[b"x"], 0), Ok(Submit::Done));
    let mut g = Got::default();
    let t = std::time::Instant::now();
    while g.failed.is_empty() {
        progress_into(&mut b, &mut g);
        b.wait(Duration::from_millis(10));
        assert!(t.elapsed() < GUARD);
    }
    assert_eq!(g.failed, vec![1]);
    assert_eq!(b.send(1, &[b"x"], 0), Err(BtlError::PeerFailed(1)));
}

#[test]
fn a_burst_from_several_peers_beyond_the_per_pass_budget_is_all_delivered() {
    // Three peers each have more fragments waiting than one progress pass
    // delivers (MAX_FRAGS_PER_PROGRESS); the budget runs out in the middle
    // of the first connection, and every connection must still be drained
    // by later passes with no new data arriving to wake it up.
    let per_peer = 3 * gmpi_btl_tcp::MAX_FRAGS_PER_PROGRESS as u32 + 5;
    let mut b = group(4, &cfg());
    let mut gots: Vec<Got> = (0..4).map(|_| Got::default()).collect();
    for q in 1..4 {
        b[q as usize].send(0, &[b"hello"], 0).unwrap();
    }
    pump(&mut b, &mut gots, |g| g[0].frags.len() == 3);
    let want: Vec<Vec<Vec<u8>>> = (0..4)
        .map(|q| (0..per_peer).map(|s| payload(q, s, 16)).collect())
        .collect();
    for q in 1..4usize {
        for f in &want[q] {
            assert_eq!(b[q].send(0, &[f], 0).unwrap(), Submit::Done);
        }
    }
    // Let the bytes reach rank 0's sockets before it looks.
    std::thread::sleep(Duration::from_millis(200));
    let mut got = Got::default();
    let t = std::time::Instant::now();
    while got.frags.len() < 3 * per_peer as usize {
        progress_into(&mut b[0], &mut got);
        b[0].wait(Duration::from_millis(5));
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "only {} of {} fragments delivered: a connection was left behind",
            got.frags.len(),
            3 * per_peer
        );
    }
    for (q, w) in want.iter().enumerate().skip(1) {
        check_stream(&got, q as Rank, w);
    }
    close_all(b);
}

/// Streamed fragments (`send_stream`): the large ones whose body has not all
/// arrived come as `FragStream` and are read in place, in pieces, over as
/// many deliveries as the socket needs; small ones come whole. A fragment
/// whose receiver stops reading is dropped whole, and the ones after it
/// arrive intact.
#[test]
fn streamed_fragments_are_read_in_place_and_in_pieces() {
    use gmpi_btl::Event;
    let cfg = cfg();
    let max = cfg.max_frag;
    let mut b = group(2, &cfg);
    let sizes: Vec<usize> = (0..96u32)
        .map(|i| match i % 4 {
            0 => 100 + i as usize,
            1 => 16 << 10,
            2 => max,
            _ => (i as usize * 7919) % max,
        })
        .collect();
    let frags: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| payload(0, i as u32, n.max(8)))
        .collect();
    // The first fragment from the 40th on that comes streamed is refused
    // by the receiver after its first 4 KiB.
    let mut drop: Option<u32> = None;
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut cur: Option<Vec<u8>> = None;
    let (mut streamed, mut redelivered) = (0, 0);
    let mut next = 0;
    let t = std::time::Instant::now();
    while got.len() + usize::from(drop.is_some()) < frags.len() {
        while next < frags.len() {
            let f = &frags[next];
            match b[0].send_stream(1, &[&f[..8], &f[8..]], 0).unwrap() {
                Submit::Done => next += 1,
                Submit::NoResource => break,
                Submit::Queued => panic!("token 0 is never queued"),
            }
        }
        b[0].progress(&mut |e| panic!("rank 0 got {e:?}"));
        b[1].progress(&mut |e| match e {
            Event::Frag { data, .. } => got.push(data.to_vec()),
            Event::FragStream {
                head,
                len,
                taken,
                body,
                ..
            } => {
                assert!(len >= 16 << 10 && head.len() == 64);
                let seq = u32::from_le_bytes(head[4..8].try_into().unwrap());
                if taken == 0 {
                    if seq >= 40 && drop.is_none() {
                        drop = Some(seq);
                    }
                    streamed += 1;
                    assert!(cur.is_none(), "a new fragment before the last ended");
                    cur = Some(Vec::with_capacity(len));
                } else {
                    redelivered += 1;
                    assert_eq!(cur.as_ref().map(Vec::len), Some(taken));
                }
                let v = cur.as_mut().unwrap();
                if Some(seq) == drop && taken > 0 {
                    // Stop reading: the rest of this fragment is dropped.
                    cur = None;
                    return;
                }
                let mut piece = [0u8; 1000];
                loop {
                    let want = piece.len().min(len - v.len());
                    let k = body.read(&mut piece[..want]);
                    v.extend_from_slice(&piece[..k]);
                    if v.len() == len {
                        got.push(cur.take().unwrap());
                        return;
                    }
                    if k < want {
                        return;
                    }
                    if Some(seq) == drop && v.len() >= 4096 {
                        cur = None;
                        return;
                    }
                }
            }
            other => panic!("unexpected {other:?}"),
        });
        assert!(
            t.elapsed() < GUARD,
            "hang guard ({} of {})",
            got.len(),
            frags.len()
        );
    }
    let want: Vec<&Vec<u8>> = frags
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i as u32) != drop)
        .map(|(_, f)| f)
        .collect();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g == *w,
            "fragment {i} differs (len {} vs {})",
            g.len(),
            w.len()
        );
    }
    assert!(drop.is_some(), "no fragment from the 40th on was streamed");
    eprintln!("{streamed} streamed, {redelivered} redeliveries");
    close_all(b);
}
