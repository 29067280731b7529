//! Several ranks in one process (one thread each for bootstrap): ordering,
//! sizes, back-pressure, wrap-around, all-to-all, bootstrap hygiene, get.
//!
//! `unsafe` only to lend destination buffers to `Btl::get`, whose contract
//! each call site's `SAFETY` comment shows kept.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use gmpi_btl::{Btl, BtlError, Event, LocalMem, MemDesc, Pull, Rank, Submit};
use gmpi_btl_shm::{ShmBtl, ShmConfig, ALONE_MAX, MAX_FRAGS_PER_PROGRESS};

#[test]
fn caps_and_reachability() {
    let cfg = ShmConfig::default();
    let mut b = boot(&[10, 20], &cfg);
    let caps = b[0].caps().clone();
    assert_eq!(caps.name, "shm");
    assert_eq!(caps.eager_limit, cfg.eager_limit);
    assert_eq!(cfg.eager_limit, 64 << 10);
    assert_eq!(caps.max_send_size, gmpi_btl_shm::DEFAULT_MAX_FRAG);
    assert_eq!(caps.exclusivity, 100);
    assert_eq!(caps.get_threshold, 8 << 10);
    assert!(caps.get, "{}", b[0].cma_status());
    assert!(b[0].cma_enabled());
    assert!(b[0].reaches(20) && !b[0].reaches(10) && !b[0].reaches(0));
    assert!(b[1].reaches(10) && !b[1].reaches(20));
    assert_eq!(b[0].ring_bytes(), 1 << 20);
    // Two ranks: one incoming ring each, plus control, cooperative-copy
    // slots and header share.
    assert_eq!(b[0].memory_per_rank(), (1 << 20) + 128 + 128 + 4096 + 32);
    assert!(b[0].coop_enabled(), "{}", b[0].coop_status());
    assert_eq!(b[0].segment_bytes(), 2 * b[0].memory_per_rank());
    assert_eq!(b[0].send(30, &[b"x"], 0), Err(BtlError::Unreachable(30)));
    let big = vec![0u8; gmpi_btl_shm::DEFAULT_MAX_FRAG + 1];
    assert_eq!(
        b[0].send(20, &[&big], 0),
        Err(BtlError::TooLarge {
            len: gmpi_btl_shm::DEFAULT_MAX_FRAG + 1,
            max: gmpi_btl_shm::DEFAULT_MAX_FRAG
        })
    );
    // Exactly max_frag, split in parts, is fine.
    let (a, c) = big[..gmpi_btl_shm::DEFAULT_MAX_FRAG].split_at(1000);
    assert_eq!(b[0].send(20, &[a, &[], c], 0), Ok(Submit::Done));
    let got = poll(&mut b[1]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, 10);
    assert_eq!(got[0].1.len(), gmpi_btl_shm::DEFAULT_MAX_FRAG);
}

#[test]
fn every_size_in_fifo_order() {
    let cfg = ShmConfig {
        max_frag: 8192,
        eager_limit: 1024,
        ring_bytes: Some(64 << 10),
        ..ShmConfig::default()
    };
    let mut b = boot(&[0, 1], &cfg);
    let (left, right) = b.split_at_mut(1);
    let (tx, rx) = (&mut left[0], &mut right[0]);
    let mut got = Vec::new();
    for len in 0..=8192usize {
        let p = payload(0, len as u64, len);
        // Exercise the gather path with up to three parts.
        let (a, rest) = p.split_at(len / 3);
        let (m, z) = rest.split_at(rest.len() / 2);
        send_draining(tx, rx, 1, &[a, m, z], &mut got);
    }
    while got.len() < 8193 {
        got.extend(poll(rx));
    }
    for (len, (peer, data)) in got.iter().enumerate() {
        assert_eq!(*peer, 0);
        assert_eq!(data.len(), len, "fragment {len} arrived out of order");
        assert!(*data == payload(0, len as u64, len), "content of {len}");
    }
}

#[test]
fn sizes_around_boundaries_with_default_config() {
    let mut b = boot(&[0, 1], &ShmConfig::default());
    let (left, right) = b.split_at_mut(1);
    let (tx, rx) = (&mut left[0], &mut right[0]);
    let mut sizes: Vec<usize> = (0..=80).collect();
    for base in [4096usize, 16 << 10, gmpi_btl_shm::DEFAULT_MAX_FRAG] {
        sizes.extend(base - 9..=base + 9);
    }
    sizes.retain(|&s| s <= gmpi_btl_shm::DEFAULT_MAX_FRAG);
    let mut got = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        send_draining(tx, rx, 1, &[&payload(0, i as u64, len)], &mut got);
    }
    while got.len() < sizes.len() {
        got.extend(poll(rx));
    }
    for (i, (&len, (_, data))) in sizes.iter().zip(&got).enumerate() {
        assert!(
            *data == payload(0, i as u64, len),
            "message {i} of {len} bytes"
        );
    }
}

#[test]
fn back_pressure_then_success_after_drain() {
    let cfg = ShmConfig {
        ring_bytes: Some(0), // rounded up to the minimum: 2 * (max_frag + 8) + 64
        ..ShmConfig::default()
    };
    let mut b = boot(&[0, 1], &cfg);
    assert_eq!(
        b[0].ring_bytes(),
        (2 * (gmpi_btl_shm::DEFAULT_MAX_FRAG + 8) + 64usize).next_multiple_of(64)
    );
    let msg = vec![7u8; 1000];
    let mut sent = 0u64;
    loop {
        let p = payload(0, sent, 1000);
        match b[0].send(1, &[&p], 0).unwrap() {
            Submit::Done => sent += 1,
            Submit::NoResource => break,
            Submit::Queued => unreachable!(),
        }
    }
    // Records are 8 + 1000 bytes and the producer keeps 8 bytes for the
    // terminator after the last one.
    assert_eq!(sent as usize, (b[0].ring_bytes() - 8) / 1008);
    // Still full: refused again, nothing written.
    assert_eq!(b[0].send(1, &[&msg], 0), Ok(Submit::NoResource));
    let mut got = Vec::new();
    while got.len() < sent as usize {
        let batch = poll(&mut b[1]);
        assert!(batch.len() <= MAX_FRAGS_PER_PROGRESS);
        assert!(!batch.is_empty());
        got.extend(batch);
    }
    assert!(poll(&mut b[1]).is_empty(), "refused sends wrote nothing");
    for (i, (_, d)) in got.iter().enumerate() {
        assert!(*d == payload(0, i as u64, 1000));
    }
    assert_eq!(b[0].send(1, &[&msg], 0), Ok(Submit::Done));
    assert_eq!(poll(&mut b[1]), vec![(0, msg)]);
}

#[test]
fn wraps_around_many_times() {
    let cfg = ShmConfig {
        max_frag: 512,
        eager_limit: 256,
        ring_bytes: Some(4096),
        ..ShmConfig::default()
    };
    let mut b = boot(&[5, 6], &cfg);
    assert_eq!(b[0].ring_bytes(), 4096);
    let (left, right) = b.split_at_mut(1);
    let (tx, rx) = (&mut left[0], &mut right[0]);
    let mut got = Vec::new();
    let mut bytes = 0;
    let n = 20_000u64;
    for seq in 0..n {
        let len = (seq as usize * 37) % 513;
        bytes += len + 8;
        send_draining(tx, rx, 6, &[&payload(5, seq, len)], &mut got);
    }
    while got.len() < n as usize {
        got.extend(poll(rx));
    }
    assert!(bytes / 4096 > 1000, "wrapped {} times", bytes / 4096);
    for (seq, (peer, d)) in got.iter().enumerate() {
        assert_eq!(*peer, 5);
        let len = (seq * 37) % 513;
        assert!(*d == payload(5, seq as u64, len), "message {seq}");
    }
}

#[test]
fn all_to_all_four_ranks_on_threads() {
    let world: Vec<Rank> = vec![3, 1, 7, 2];
    let cfg = ShmConfig {
        ring_bytes: Some(0),
        ..ShmConfig::default()
    };
    let btls = boot(&world, &cfg);
    const N: u64 = 3000;
    let handles: Vec<_> = btls
        .into_iter()
        .enumerate()
        .map(|(i, mut btl)| {
            let world = world.clone();
            thread::spawn(move || {
                let me = world[i];
                let peers: Vec<Rank> = world.iter().copied().filter(|&w| w != me).collect();
                let mut next_send = vec![0u64; peers.len()];
                let mut next_recv = std::collections::HashMap::new();
                let mut received = 0u64;
                let deadline = Instant::now() + Duration::from_secs(60);
                while received < N * peers.len() as u64 || next_send.iter().any(|&s| s < N) {
                    assert!(Instant::now() < deadline, "rank {me} stuck");
                    let mut busy = false;
                    for (k, &p) in peers.iter().enumerate() {
                        while next_send[k] < N {
                            let seq = next_send[k];
                            let len = (seq as usize * 131 + p as usize) % 3000;
                            match btl.send(p, &[&payload(me, seq, len)], 0).unwrap() {
                                Submit::Done => next_send[k] += 1,
                                _ => break,
                            }
                            busy = true;
                        }
                    }
                    let n = btl.progress(&mut |e| {
                        let Event::Frag { peer, data } = e else {
                            panic!("unexpected {e:?}")
                        };
                        let seq = next_recv.entry(peer).or_insert(0u64);
                        let len = (*seq as usize * 131 + me as usize) % 3000;
                        assert!(data == payload(peer, *seq, len), "{peer}->{me} #{seq}");
                        *seq += 1;
                        received += 1;
                    });
                    if n == 0 && !busy {
                        btl.wait(Duration::from_millis(50));
                    }
                }
                btl
            })
        })
        .collect();
    // Keep every btl alive until all are done (a finished rank must not
    // unmap while others still send to it — harmless anyway, the segment
    // lives until the last mapping goes).
    let done: Vec<ShmBtl> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(done.len(), 4);
}

#[test]
fn progress_is_bounded_and_round_robin() {
    let mut b = boot(&[0, 1, 2], &ShmConfig::default());
    for seq in 0..100u64 {
        for src in [1usize, 2] {
            let p = payload(src as Rank, seq, 16);
            assert_eq!(b[src].send(0, &[&p], 0), Ok(Submit::Done));
        }
    }
    let first = poll(&mut b[0]);
    assert_eq!(first.len(), MAX_FRAGS_PER_PROGRESS);
    let second = poll(&mut b[0]);
    assert_eq!(second.len(), MAX_FRAGS_PER_PROGRESS);
    // The second pass starts at the other ring.
    assert_ne!(first[0].0, second[0].0);
    let mut all = first;
    all.extend(second);
    loop {
        let more = poll(&mut b[0]);
        if more.is_empty() {
            break;
        }
        all.extend(more);
    }
    assert_eq!(all.len(), 200);
    for src in [1, 2] {
        let seqs: Vec<u64> = all
            .iter()
            .filter(|(p, _)| *p == src)
            .map(|(_, d)| u64::from_le_bytes(d[..8].try_into().unwrap()))
            .collect();
        assert_eq!(seqs, (0..100).collect::<Vec<_>>());
    }
}

#[test]
fn segment_is_0600_during_bootstrap_and_gone_after() {
    let path = unique_path("mode");
    let checked = Arc::new(AtomicBool::new(false));
    let c2 = Arc::clone(&checked);
    let res = boot_with(
        &path,
        &[0, 1, 2],
        &[ShmConfig::default()],
        move |rank, call, path| {
            if rank == 0 && call == 0 {
                let meta = std::fs::metadata(path).expect("segment exists at the first fence");
                assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
                c2.store(true, Ordering::SeqCst);
            }
        },
    );
    assert!(res.iter().all(Result::is_ok));
    assert!(checked.load(Ordering::SeqCst));
    assert!(!Path::new(&path).exists(), "segment file left behind");
}

#[test]
fn stale_file_is_refused_by_every_rank() {
    let path = unique_path("stale");
    std::fs::write(&path, vec![0u8; 8192]).unwrap();
    let res = boot_with(&path, &[0, 1], &[ShmConfig::default()], |_, _, _| {});
    let errs: Vec<String> = res
        .into_iter()
        .map(|r| r.expect_err("stale file must be refused").to_string())
        .collect();
    assert!(
        errs[0].contains(&path) && errs[0].contains("already exists"),
        "{}",
        errs[0]
    );
    assert!(
        errs[1].contains(&path) && errs[1].contains("stale"),
        "{}",
        errs[1]
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn mismatched_configs_are_refused() {
    let path = unique_path("mismatch");
    let a = ShmConfig::default();
    let b = ShmConfig {
        max_frag: 128 << 10,
        ..ShmConfig::default()
    };
    let res = boot_with(&path, &[0, 1], &[a, b], |_, _, _| {});
    let e1 = res[1].as_ref().unwrap_err().to_string();
    assert!(e1.contains("same ShmConfig"), "{e1}");
    // Rank 0 notices that rank 1 never attached.
    let e0 = res[0].as_ref().unwrap_err().to_string();
    assert!(e0.contains("did not attach"), "{e0}");
    assert!(!Path::new(&path).exists());
}

#[test]
fn wait_returns_at_once_when_something_is_pending() {
    let mut b = boot(&[0, 1], &ShmConfig::default());
    b[0].send(1, &[b"hi"], 0).unwrap();
    let t = Instant::now();
    b[1].wait(Duration::from_secs(5));
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(poll(&mut b[1]).len(), 1);
    let t = Instant::now();
    b[1].wait(Duration::from_millis(30));
    assert!(
        t.elapsed() >= Duration::from_millis(25),
        "nothing pending: sleeps"
    );
}

#[test]
fn send_wakes_a_sleeping_thread() {
    let mut b = boot(&[0, 1], &ShmConfig::default());
    let mut rx = b.pop().unwrap();
    let mut tx = b.pop().unwrap();
    let h = thread::spawn(move || {
        let t = Instant::now();
        let mut got = Vec::new();
        while got.is_empty() && t.elapsed() < Duration::from_secs(5) {
            rx.wait(Duration::from_secs(5));
            got = poll(&mut rx);
        }
        (t.elapsed(), got)
    });
    thread::sleep(Duration::from_millis(100));
    tx.send(1, &[b"wake"], 0).unwrap();
    let (elapsed, got) = h.join().unwrap();
    assert_eq!(got, vec![(0, b"wake".to_vec())]);
    assert!(elapsed < Duration::from_secs(2), "woke after {elapsed:?}");
}

#[test]
fn blocked_sender_is_woken_when_space_frees() {
    let cfg = ShmConfig {
        ring_bytes: Some(0),
        ..ShmConfig::default()
    };
    let mut b = boot(&[0, 1], &cfg);
    let mut rx = b.pop().unwrap();
    let mut tx = b.pop().unwrap();
    let msg = vec![1u8; 4000];
    while tx.send(1, &[&msg], 0).unwrap() == Submit::Done {}
    let h = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        let n = poll(&mut rx).len();
        (n, rx)
    });
    let t = Instant::now();
    tx.wait(Duration::from_secs(5));
    let elapsed = t.elapsed();
    let (n, _rx) = h.join().unwrap();
    assert!(n > 0);
    assert!(elapsed < Duration::from_secs(2), "woke after {elapsed:?}");
    assert_eq!(tx.send(1, &[&msg], 0), Ok(Submit::Done));
}

#[test]
fn get_reads_registered_memory() {
    let mut b = boot(&[0, 1], &ShmConfig::default());
    let src: Vec<u8> = (0..(3 << 20)).map(|i: u32| (i % 253) as u8).collect();
    let desc = b[0]
        .register(src.as_ptr() as u64, src.len() as u64)
        .expect("CMA enabled");
    assert_eq!(desc.key, u64::from(std::process::id()));
    for (off, len) in [
        (0usize, 0usize),
        (0, 1),
        (1, 7),
        (4095, 4097),
        (12345, 1 << 20),
        (0, 3 << 20),
    ] {
        let mut dst = vec![0u8; len];
        let (owner, getter) = two(&mut b, 0, 1);
        assert_eq!(
            get_to_end(getter, owner, 0, &desc, off as u64, &mut dst, 9),
            Ok(())
        );
        assert!(dst == src[off..off + len], "offset {off} len {len}");
    }
    let mut buf = vec![0u8; 16];
    let dst = LocalMem::of(&mut buf);
    // Every get below fails at once (asserted): nothing writes `dst` after
    // the call, and `dst` outlives it.
    let end = src.len() as u64 - 8;
    // SAFETY: see above.
    let got = unsafe { b[1].get(0, &desc, end, dst, 0) };
    assert!(matches!(got, Err(BtlError::GetFailed(_))));
    // SAFETY: see above.
    let got = unsafe { b[1].get(0, &desc, u64::MAX, dst, 0) };
    assert!(matches!(got, Err(BtlError::GetFailed(_))));
    let bad = MemDesc {
        key: i32::MAX as u64,
        ..desc
    };
    // SAFETY: see above.
    let e = unsafe { b[1].get(0, &bad, 0, dst, 0) }.unwrap_err();
    assert!(
        matches!(e, BtlError::GetFailed(ref m) if m.contains("pid")),
        "{e}"
    );
    let unmapped = MemDesc {
        addr: 16,
        len: 64,
        key: desc.key,
    };
    // SAFETY: see above.
    let got = unsafe { b[1].get(0, &unmapped, 0, dst, 0) };
    assert!(matches!(got, Err(BtlError::GetFailed(_))));
    // SAFETY: see above.
    let got = unsafe { b[1].get(9, &desc, 0, dst, 0) };
    assert_eq!(got, Err(BtlError::Unreachable(9)));
}

#[test]
fn cma_off_by_configuration() {
    let cfg = ShmConfig {
        cma: false,
        ..ShmConfig::default()
    };
    let mut b = boot(&[0, 1], &cfg);
    assert!(!b[0].caps().get && !b[0].cma_enabled());
    assert!(
        b[0].cma_status().contains("configuration"),
        "{}",
        b[0].cma_status()
    );
    assert_eq!(b[0].register(0x1000, 10), None);
    let desc = MemDesc {
        addr: 0x1000,
        len: 10,
        key: 1,
    };
    let mut dst = [0u8; 4];
    // SAFETY: `dst` outlives the call, and the get fails at once (asserted).
    let got = unsafe { b[1].get(0, &desc, 0, LocalMem::of(&mut dst), 0) };
    assert!(matches!(got, Err(BtlError::GetFailed(_))));
}

/// Mutable references to two different ranks.
fn two(b: &mut [ShmBtl], x: usize, y: usize) -> (&mut ShmBtl, &mut ShmBtl) {
    assert_ne!(x, y);
    if x < y {
        let (l, r) = b.split_at_mut(y);
        (&mut l[x], &mut r[0])
    } else {
        let (l, r) = b.split_at_mut(x);
        (&mut r[0], &mut l[y])
    }
}

/// Run a get to its end: a synchronous one, or a cooperative one driven by
/// progress on the getter (and on `owner`, which may help) until its
/// completion event. Returns the failure, if any.
fn get_to_end(
    getter: &mut ShmBtl,
    owner: &mut ShmBtl,
    peer: Rank,
    desc: &MemDesc,
    off: u64,
    dst: &mut [u8],
    token: u64,
) -> Result<(), BtlError> {
    // SAFETY: `dst` is borrowed for this whole function, which returns only
    // once the get is over (at once, or at its completion event).
    match unsafe { getter.get(peer, desc, off, LocalMem::of(dst), token) }? {
        Submit::Done => Ok(()),
        Submit::Queued => {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                owner.progress(&mut |e| panic!("owner: unexpected {e:?}"));
                let mut end = None;
                getter.progress(&mut |e| match e {
                    Event::GetComplete { token: t } if t == token => end = Some(Ok(())),
                    Event::GetFailed { token: t, error } if t == token => end = Some(Err(error)),
                    other => panic!("getter: unexpected {other:?}"),
                });
                if let Some(r) = end {
                    return r;
                }
                assert!(Instant::now() < deadline, "get {token} never completed");
            }
        }
        Submit::NoResource => panic!("get refused"),
    }
}

fn coop_cfg() -> ShmConfig {
    ShmConfig {
        coop_chunk: 16 << 10,
        coop_min: 40 << 10,
        ..ShmConfig::default()
    }
}

/// Drain `b` until `n` gets have finished; returns (token, ok) in order.
fn finish_gets(b: &mut ShmBtl, n: usize) -> Vec<(u64, bool)> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < n {
        b.progress(&mut |e| match e {
            Event::GetComplete { token } => out.push((token, true)),
            Event::GetFailed { token, .. } => out.push((token, false)),
            other => panic!("unexpected {other:?}"),
        });
        assert!(
            Instant::now() < deadline,
            "{} of {n} gets finished",
            out.len()
        );
    }
    out
}

#[test]
fn cooperative_get_helped_first_alone_or_never() {
    let cfg = coop_cfg();
    let src: Vec<u8> = (0..(3 << 20) + 77).map(|i: u32| (i % 251) as u8).collect();
    for (off, len) in [
        (0usize, 40 << 10),
        (1, (40 << 10) + 1),
        (4095, 100_000),
        (12345, (1 << 20) + 7),
        (0, (3 << 20) + 77),
    ] {
        for order in ["helper first", "getter alone", "interleaved"] {
            let mut b = boot(&[0, 1], &cfg);
            let desc = b[0]
                .register(src.as_ptr() as u64, src.len() as u64)
                .unwrap();
            let mut dst = vec![0u8; len];
            let (owner, getter) = two(&mut b, 0, 1);
            // SAFETY: `dst` is next read after the get's completion event
            // (below), and lives to the end of the iteration.
            let got = unsafe { getter.get(0, &desc, off as u64, LocalMem::of(&mut dst), 5) };
            assert_eq!(got, Ok(Submit::Queued), "{len} bytes");
            assert!(getter.caps().get);
            // Nothing pending for the pml, but wait() must not sleep now.
            let t = Instant::now();
            getter.wait(Duration::from_secs(5));
            assert!(t.elapsed() < Duration::from_secs(2));
            let events = match order {
                // The owner takes every chunk before the getter looks.
                "helper first" => {
                    assert!(owner.progress(&mut |e| panic!("{e:?}")) > 0);
                    finish_gets(getter, 1)
                }
                // The owner is busy elsewhere: the getter copies it all,
                // and the owner's late look finds nothing left.
                "getter alone" => {
                    let ev = finish_gets(getter, 1);
                    assert_eq!(owner.progress(&mut |e| panic!("{e:?}")), 0);
                    ev
                }
                _ => {
                    let mut ev = Vec::new();
                    while ev.is_empty() {
                        owner.progress(&mut |e| panic!("{e:?}"));
                        getter.progress(&mut |e| match e {
                            Event::GetComplete { token } => ev.push((token, true)),
                            other => panic!("{other:?}"),
                        });
                    }
                    ev
                }
            };
            assert_eq!(events, vec![(5, true)], "{order}, {len} bytes");
            assert!(
                dst == src[off..off + len],
                "{order}: offset {off} len {len}"
            );
            assert_eq!(owner.progress(&mut |e| panic!("{e:?}")), 0);
            assert_eq!(getter.progress(&mut |e| panic!("{e:?}")), 0);
        }
    }
}

#[test]
fn cooperative_gets_on_two_threads_and_a_full_window() {
    let cfg = coop_cfg();
    let mut b = boot(&[0, 1], &cfg);
    let mut getter = b.pop().unwrap();
    let mut owner = b.pop().unwrap();
    // More gets at once than there are cooperative slots (64): the rest
    // are synchronous.
    let n = 80usize;
    let len = (200 << 10) + 3;
    let src: Vec<Vec<u8>> = (0..n).map(|k| payload(0, k as u64, len)).collect();
    let descs: Vec<MemDesc> = src
        .iter()
        .map(|s| owner.register(s.as_ptr() as u64, s.len() as u64).unwrap())
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let helper = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut work = 0;
            while !stop.load(Ordering::Relaxed) {
                work += owner.progress(&mut |e| panic!("owner: {e:?}"));
            }
            (owner, work)
        })
    };
    for round in 0..3 {
        let mut dst: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; len]).collect();
        let mut queued = 0;
        for (k, d) in dst.iter_mut().enumerate() {
            // SAFETY: `dst` is next read after every get has finished
            // (`finish_gets` below), and lives to the end of the round.
            match unsafe { getter.get(0, &descs[k], 0, LocalMem::of(d), 100 + k as u64) }.unwrap() {
                Submit::Queued => queued += 1,
                Submit::Done => {}
                Submit::NoResource => panic!("refused"),
            }
        }
        assert_eq!(queued, 64, "round {round}: one per cooperative slot");
        let mut done = finish_gets(&mut getter, queued);
        done.sort_unstable();
        assert_eq!(done, (100..164).map(|t| (t, true)).collect::<Vec<_>>());
        for k in 0..n {
            assert!(dst[k] == src[k], "round {round}, get {k}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (_owner, work) = helper.join().unwrap();
    eprintln!("the owner copied {work} chunks");
}

#[test]
fn get_alone_is_never_cooperative_below_alone_max() {
    let mut b = boot(&[0, 1], &coop_cfg());
    assert!(b[0].coop_enabled() && b[1].coop_enabled());
    let src = payload(0, 5, ALONE_MAX);
    let (owner, getter) = two(&mut b, 0, 1);
    let desc = owner
        .register(src.as_ptr() as u64, src.len() as u64)
        .unwrap();
    // Large enough to be cooperative, but the caller reduces it next: the
    // getter copies it all, at once, and asks the owner for nothing.
    let mut dst = vec![0u8; ALONE_MAX - 1];
    // SAFETY: `dst` outlives the call, and the get is synchronous (asserted).
    let got = unsafe { getter.get_as(0, &desc, 1, LocalMem::of(&mut dst), 3, Pull::Alone) };
    assert_eq!(got, Ok(Submit::Done));
    assert_eq!(dst, src[1..]);
    assert_eq!(owner.progress(&mut |e| panic!("{e:?}")), 0, "no request");
    assert_eq!(getter.progress(&mut |e| panic!("{e:?}")), 0);
    // The same get not alone, and one of ALONE_MAX bytes alone: cooperative.
    for (token, alone) in [(4, false), (5, true)] {
        let len = if alone { ALONE_MAX } else { ALONE_MAX - 1 };
        let mut dst = vec![0u8; len];
        let d = LocalMem::of(&mut dst);
        // SAFETY: `dst` is next read after the get's completion event
        // (`finish_gets` below), and lives to the end of the iteration.
        let got = unsafe {
            if alone {
                getter.get_as(0, &desc, 0, d, token, Pull::Alone)
            } else {
                getter.get(0, &desc, 0, d, token)
            }
        };
        assert_eq!(got, Ok(Submit::Queued), "alone: {alone}");
        assert!(
            owner.progress(&mut |e| panic!("{e:?}")) > 0,
            "the owner helps"
        );
        assert_eq!(finish_gets(getter, 1), vec![(token, true)]);
        assert_eq!(dst, src[..len]);
    }
}

#[test]
fn cooperative_get_of_unreadable_memory_fails_after_a_retry() {
    let mut b = boot(&[0, 1], &coop_cfg());
    let desc = b[0].register(16, 1 << 20).unwrap();
    let mut dst = vec![0u8; 1 << 20];
    let (owner, getter) = two(&mut b, 0, 1);
    // With and without the owner's (failing) help.
    for helped in [true, false] {
        // SAFETY: `dst` is not read; it lives past the get's completion
        // event (`finish_gets` below).
        let got = unsafe { getter.get(0, &desc, 0, LocalMem::of(&mut dst), 7) };
        assert_eq!(got, Ok(Submit::Queued));
        if helped {
            assert!(owner.progress(&mut |e| panic!("{e:?}")) > 0);
        }
        assert_eq!(finish_gets(getter, 1), vec![(7, false)], "helped: {helped}");
    }
    // Slots are reused after failures: a good get still works.
    let src = payload(0, 3, 300_000);
    let desc = owner
        .register(src.as_ptr() as u64, src.len() as u64)
        .unwrap();
    let mut dst = vec![0u8; src.len()];
    assert_eq!(get_to_end(getter, owner, 0, &desc, 0, &mut dst, 8), Ok(()));
    assert_eq!(dst, src);
}

#[test]
fn cooperative_gets_off_by_configuration_or_on_one_side() {
    let off = ShmConfig {
        coop: false,
        ..coop_cfg()
    };
    let src = payload(0, 1, 1 << 20);
    // Off on both: synchronous.
    let mut b = boot(&[0, 1], &off);
    assert!(!b[1].coop_enabled());
    assert!(
        b[1].coop_status().contains("configuration"),
        "{}",
        b[1].coop_status()
    );
    let desc = b[0]
        .register(src.as_ptr() as u64, src.len() as u64)
        .unwrap();
    let mut dst = vec![0u8; src.len()];
    // SAFETY: `dst` outlives the call, and the get is synchronous (asserted).
    let got = unsafe { b[1].get(0, &desc, 0, LocalMem::of(&mut dst), 1) };
    assert_eq!(got, Ok(Submit::Done));
    assert_eq!(dst, src);
    // On for the getter only: the owner ignores the request, the getter
    // copies everything.
    let path = unique_path("coop-one-side");
    let mut b: Vec<ShmBtl> = boot_with(&path, &[0, 1], &[off.clone(), coop_cfg()], |_, _, _| {})
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert!(!b[0].coop_enabled() && b[1].coop_enabled());
    let desc = b[0]
        .register(src.as_ptr() as u64, src.len() as u64)
        .unwrap();
    let mut dst = vec![0u8; src.len()];
    // SAFETY: `dst` is next read after the get's completion event
    // (`finish_gets` below), and lives to the end of the test.
    let got = unsafe { b[1].get(0, &desc, 0, LocalMem::of(&mut dst), 2) };
    assert_eq!(got, Ok(Submit::Queued));
    assert_eq!(
        b[0].progress(&mut |e| panic!("{e:?}")),
        0,
        "the request, ignored"
    );
    assert_eq!(finish_gets(&mut b[1], 1), vec![(2, true)]);
    assert_eq!(dst, src);
    // No CMA, no cooperation.
    let nocma = ShmConfig {
        cma: false,
        ..coop_cfg()
    };
    let b = boot(&[0, 1], &nocma);
    assert!(!b[0].coop_enabled());
    assert!(b[0].coop_status().contains("CMA"), "{}", b[0].coop_status());
}
