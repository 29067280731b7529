//! Helpers shared by the integration tests: bootstrapping several ranks on
//! threads of this process, draining events, deterministic payloads.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use gmpi_btl::{Btl, Event, Rank, Submit};
use gmpi_btl_shm::{ShmBtl, ShmConfig};

/// A segment path no other test (or test process) uses.
pub fn unique_path(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "/dev/shm/gmpi-test-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Bootstrap `world.len()` ranks, one per thread, with a `Barrier` fence;
/// `on_fence(local_rank, call_index, path)` runs before each barrier wait.
pub fn boot_with<F>(
    path: &str,
    world: &[Rank],
    cfgs: &[ShmConfig],
    on_fence: F,
) -> Vec<Result<ShmBtl, gmpi_btl::BtlError>>
where
    F: Fn(usize, usize, &str) + Send + Sync + 'static,
{
    let n = world.len();
    let barrier = Arc::new(Barrier::new(n));
    let on_fence = Arc::new(on_fence);
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let barrier = Arc::clone(&barrier);
            let on_fence = Arc::clone(&on_fence);
            let path = path.to_string();
            let world = world.to_vec();
            let cfg = cfgs[r.min(cfgs.len() - 1)].clone();
            thread::spawn(move || {
                let mut calls = 0;
                ShmBtl::bootstrap(&path, r, n, &world, &cfg, &mut || {
                    on_fence(r, calls, &path);
                    calls += 1;
                    barrier.wait();
                    Ok(())
                })
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Bootstrap and unwrap.
pub fn boot(world: &[Rank], cfg: &ShmConfig) -> Vec<ShmBtl> {
    let path = unique_path("boot");
    boot_with(&path, world, std::slice::from_ref(cfg), |_, _, _| {})
        .into_iter()
        .map(|r| r.expect("bootstrap"))
        .collect()
}

/// Payload of message `seq` of `len` bytes from `src`: checkable bytes.
pub fn payload(src: Rank, seq: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (i as u64 ^ seq.wrapping_mul(0x9e37) ^ u64::from(src) << 3) as u8)
        .collect();
    let head = seq.to_le_bytes();
    let k = len.min(8);
    v[..k].copy_from_slice(&head[..k]);
    v
}

/// Collect all fragments one progress call delivers.
pub fn poll(btl: &mut ShmBtl) -> Vec<(Rank, Vec<u8>)> {
    let mut got = Vec::new();
    btl.progress(&mut |e| match e {
        Event::Frag { peer, data } => got.push((peer, data.to_vec())),
        other => panic!("unexpected event {other:?}"),
    });
    got
}

/// Send, driving `receiver` (and only it) while the ring is full.
pub fn send_draining(
    tx: &mut ShmBtl,
    rx: &mut ShmBtl,
    to: Rank,
    parts: &[&[u8]],
    sink: &mut Vec<(Rank, Vec<u8>)>,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match tx.send(to, parts, 0).unwrap() {
            Submit::Done => return,
            Submit::NoResource => sink.extend(poll(rx)),
            Submit::Queued => panic!("shm never queues"),
        }
        assert!(Instant::now() < deadline, "ring never drained");
    }
}
