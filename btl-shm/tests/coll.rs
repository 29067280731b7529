//! The shared-memory collective area: participants are threads of this
//! process, each attaching the same file under `/dev/shm`, with a
//! `std::sync::Barrier` as the bootstrap fence.

#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::convert::Infallible;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

use gmpi_btl::BtlError;
use gmpi_btl_shm::{CollConfig, ShmColl};

/// A path no other test (or test process) uses; the file is removed on drop,
/// also when the test fails.
struct TmpPath(String);

impl TmpPath {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        Self(format!(
            "/dev/shm/gmpi-test-coll-{}-{}-{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ))
    }
}

impl Drop for TmpPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

thread_local! {
    /// Set by [`run`]: raised when any participant of the run panics.
    static ABORT: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// Raises the run's abort flag if its thread unwinds.
struct PanicFlag(Arc<AtomicBool>);

impl Drop for PanicFlag {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// Spin a little, then yield (threads may outnumber cores); give up once
/// another participant panicked, so that a failing test fails instead of
/// hanging.
fn idle(k: u32) -> Result<(), &'static str> {
    if k < 32 {
        std::hint::spin_loop();
        return Ok(());
    }
    thread::yield_now();
    let aborted = ABORT.with(|a| {
        a.borrow()
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
    });
    if aborted {
        Err("another participant panicked")
    } else {
        Ok(())
    }
}

/// Bootstrap `n` participants on threads (participant `r` uses
/// `cfgs[min(r, len-1)]`; `fence_result(r, call)` decides what its fence
/// returns, after waiting at the barrier), then run `body` on each with its
/// handle. Returns, in rank order, `body`'s result and the number of fence
/// calls.
fn run<T, B, F>(
    path: &str,
    n: usize,
    cfgs: &[CollConfig],
    fence_result: F,
    body: B,
) -> Vec<(T, usize)>
where
    T: Send + 'static,
    B: Fn(usize, Result<ShmColl, BtlError>) -> T + Send + Sync + 'static,
    F: Fn(usize, usize) -> Result<(), String> + Send + Sync + 'static,
{
    let barrier = Arc::new(Barrier::new(n));
    let body = Arc::new(body);
    let fence_result = Arc::new(fence_result);
    let abort = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (barrier, body, fence_result, abort) = (
                Arc::clone(&barrier),
                Arc::clone(&body),
                Arc::clone(&fence_result),
                Arc::clone(&abort),
            );
            let path = path.to_string();
            let cfg = cfgs[r.min(cfgs.len() - 1)].clone();
            thread::spawn(move || {
                ABORT.with(|a| *a.borrow_mut() = Some(Arc::clone(&abort)));
                let _flag = PanicFlag(abort);
                let mut calls = 0;
                let coll = ShmColl::bootstrap(&path, r, n, &cfg, &mut || {
                    barrier.wait();
                    calls += 1;
                    fence_result(r, calls)
                });
                (body(r, coll), calls)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn ok_fence(_: usize, _: usize) -> Result<(), String> {
    Ok(())
}

/// Contribution of `rank` to operation `op`: rank and op, then a pattern.
fn contribution(rank: usize, op: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (i as u64 ^ op.wrapping_mul(31) ^ (rank as u64 * 7)) as u8)
        .collect();
    if len >= 16 {
        v[..8].copy_from_slice(&(rank as u64).to_le_bytes());
        v[8..16].copy_from_slice(&op.to_le_bytes());
    }
    v
}

/// Barriers, exchanges of varying length checked byte for byte,
/// broadcasts from rotating roots (two in a row, so a root runs ahead), and
/// one-way gathers to rotating roots (two in a row, so the non-roots run
/// ahead).
fn hammer(n: usize, cfg: CollConfig, iters: u64) {
    let path = TmpPath::new(&format!("hammer{n}"));
    let slot = cfg.slot_bytes;
    let out = run(&path.0, n, &[cfg], ok_fence, move |rank, coll| {
        let mut coll = coll.unwrap();
        assert_eq!(
            (coll.rank(), coll.size(), coll.slot_bytes()),
            (rank, n, slot)
        );
        let mut op = 0u64;
        for i in 0..iters {
            op += 1;
            coll.barrier(&mut idle).unwrap();

            op += 1;
            let len = 16 + (i as usize * 7) % (slot - 15);
            let mine = contribution(rank, op, len);
            let sum = coll
                .exchange(&mine, &mut idle, |parts| {
                    assert_eq!(parts.len(), n);
                    let mut sum = 0u64;
                    for (r, p) in parts.iter().enumerate() {
                        assert_eq!(*p, &contribution(r, op, len)[..], "op {op} rank {r}");
                        sum += u64::from_le_bytes(p[..8].try_into().unwrap());
                    }
                    sum
                })
                .unwrap();
            assert_eq!(sum, (n * (n - 1) / 2) as u64);

            for root in [i as usize % n, (i as usize + 1) % n] {
                op += 1;
                let blen = 16 + (i as usize * 13) % (slot - 15);
                let mut buf = if rank == root {
                    contribution(root, op, blen)
                } else {
                    vec![0; blen]
                };
                coll.bcast(root, &mut buf, &mut idle).unwrap();
                assert_eq!(buf, contribution(root, op, blen), "bcast op {op}");
            }

            for root in [(i as usize + 2) % n, (i as usize + 3) % n] {
                op += 1;
                let len = 16 + (i as usize * 5) % (slot - 15);
                let mine = contribution(rank, op, len);
                let got = coll
                    .gather_with(root, &mine, &mut idle, |parts| {
                        for (r, p) in parts.iter().enumerate() {
                            assert_eq!(
                                *p,
                                &contribution(r, op, len)[..],
                                "gather op {op} rank {r}"
                            );
                        }
                        parts.len()
                    })
                    .unwrap();
                assert_eq!(got, (rank == root).then_some(n), "gather op {op}");
            }
        }
        assert!(!coll.is_broken());
        op
    });
    assert!(out
        .iter()
        .all(|&(ops, fences)| ops == 6 * iters && fences == 2));
    assert!(!Path::new(&path.0).exists(), "unlinked after bootstrap");
}

fn small(depth: usize) -> CollConfig {
    CollConfig {
        slot_bytes: 256,
        depth,
        single_copy: false,
    }
}

#[test]
fn hammer_1() {
    hammer(1, small(2), 10_000);
}

#[test]
fn hammer_2() {
    hammer(2, small(2), 10_000);
}

#[test]
fn hammer_3() {
    hammer(3, small(2), 10_000);
}

#[test]
fn hammer_4() {
    hammer(4, small(2), 10_000);
}

#[test]
fn hammer_7() {
    hammer(7, small(2), 10_000);
}

#[test]
fn hammer_other_depths() {
    hammer(3, small(1), 3_000);
    hammer(4, small(3), 3_000);
    hammer(2, CollConfig::default(), 1_000);
}

/// A root broadcasting many times in a row runs up to `depth` epochs ahead
/// of a slow reader and never overwrites a slot still being read.
#[test]
fn root_runs_ahead_of_slow_readers() {
    let path = TmpPath::new("ahead");
    run(&path.0, 3, &[small(3)], ok_fence, |rank, coll| {
        let mut coll = coll.unwrap();
        for op in 1..=2_000u64 {
            let mut buf = if rank == 0 {
                contribution(0, op, 64)
            } else {
                vec![0; 64]
            };
            if rank == 2 && op % 100 == 0 {
                thread::sleep(std::time::Duration::from_millis(1));
            }
            coll.bcast(0, &mut buf, &mut idle).unwrap();
            assert_eq!(buf, contribution(0, op, 64));
        }
        coll.barrier(&mut idle).unwrap();
    });
}

/// A contribution made of parts reaches the others as one, with the length
/// of all of them, in exchanges and bcasts (and a part may be empty).
#[test]
fn parts_arrive_as_one_contribution() {
    let path = TmpPath::new("parts");
    run(&path.0, 3, &[small(2)], ok_fence, |rank, coll| {
        let mut coll = coll.unwrap();
        for op in 1..=50u64 {
            let head = [rank as u8, op as u8];
            let body = contribution(rank, op, 40);
            let whole = [&head[..], &body[..]].concat();
            coll.exchange_parts(&[&head, &[], &body], &mut idle, |parts| {
                for (r, p) in parts.iter().enumerate() {
                    let want = [&[r as u8, op as u8][..], &contribution(r, op, 40)].concat();
                    assert_eq!(*p, &want[..], "rank {r}'s contribution at op {op}");
                }
            })
            .unwrap();
            let root = (op % 3) as usize;
            let got = coll
                .bcast_parts(root, &[&head, &body], &mut idle, |s| s.to_vec())
                .unwrap();
            match got {
                None => assert_eq!(rank, root),
                Some(s) => {
                    let want = [&[root as u8, op as u8][..], &contribution(root, op, 40)].concat();
                    assert_eq!(s, want);
                    assert_ne!(s, whole);
                }
            }
        }
        coll.barrier(&mut idle).unwrap();
    });
}

/// Contributions of different lengths are handed over with their own length;
/// an empty exchange works; a short receive buffer gets a prefix.
#[test]
fn lengths_are_per_rank() {
    let path = TmpPath::new("lens");
    run(&path.0, 3, &[small(2)], ok_fence, |rank, coll| {
        let mut coll = coll.unwrap();
        let mine = vec![rank as u8; rank * 10];
        let lens = coll
            .exchange(&mine, &mut idle, |parts| {
                for (r, p) in parts.iter().enumerate() {
                    assert!(p.iter().all(|&b| b == r as u8));
                }
                parts.iter().map(|p| p.len()).collect::<Vec<_>>()
            })
            .unwrap();
        assert_eq!(lens, [0, 10, 20]);
        let none = coll.exchange(&[], &mut idle, |parts| parts.len()).unwrap();
        assert_eq!(none, 3);
        let mut buf = if rank == 1 {
            vec![9u8; 256]
        } else {
            vec![0; 5]
        };
        coll.bcast(1, &mut buf, &mut idle).unwrap();
        assert!(buf.iter().all(|&b| b == 9));
    });
}

/// `single_copy` holds where every rank said it can read the others by CMA,
/// and not where one rank did not.
#[test]
fn single_copy_needs_every_rank() {
    let cma = CollConfig {
        single_copy: true,
        ..small(2)
    };
    for (cfgs, want) in [
        (vec![cma.clone()], true),
        (vec![cma.clone(), small(2), cma.clone()], false),
        (vec![small(2)], false),
    ] {
        let path = TmpPath::new("single-copy");
        run(&path.0, 3, &cfgs, ok_fence, move |_, coll| {
            assert_eq!(coll.unwrap().single_copy(), want);
        });
    }
}

/// `wait_read` returns only once the readers of the last operation are
/// done with it: a bcast's root waits for every reader, a gather's sender
/// for the root, every rank of an exchange for every other, even when the
/// readers are slow; and it starts no epoch (the operations that follow
/// still line up).
#[test]
fn owners_wait_until_their_readers_are_done() {
    const N: usize = 3;
    const OPS: usize = 30;
    let path = TmpPath::new("wait-read");
    let done: Arc<Vec<AtomicUsize>> = Arc::new((0..3 * OPS).map(|_| AtomicUsize::new(0)).collect());
    let cfg = CollConfig {
        single_copy: true,
        ..small(2)
    };
    run(&path.0, N, &[cfg], ok_fence, move |rank, coll| {
        let mut coll = coll.unwrap();
        let slow = |op: usize| {
            if op % 4 == rank % 4 {
                thread::sleep(std::time::Duration::from_millis(2));
            }
        };
        for op in 0..OPS {
            let root = op % N;
            let (b, g, x) = (&done[3 * op], &done[3 * op + 1], &done[3 * op + 2]);
            coll.bcast_parts(root, &[b"b"], &mut idle, |_| {
                slow(op);
                b.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
            if rank == root {
                coll.wait_read(None, &mut idle).unwrap();
                assert_eq!(
                    b.load(Ordering::SeqCst),
                    N - 1,
                    "bcast {op}: readers not done"
                );
            }
            coll.gather_with(root, b"g", &mut idle, |_| {
                slow(op + 1);
                g.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
            coll.wait_read(Some(root), &mut idle).unwrap();
            assert_eq!(
                g.load(Ordering::SeqCst),
                1,
                "gather {op}: the root is not done"
            );
            coll.exchange(b"x", &mut idle, |_| {
                slow(op + 2);
                x.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
            coll.wait_read(None, &mut idle).unwrap();
            assert_eq!(
                x.load(Ordering::SeqCst),
                N,
                "exchange {op}: not everyone is done"
            );
        }
        coll.barrier(&mut idle).unwrap();
    });
}

/// `idle` is never called before the first check, and then with 1, 2, ...
#[test]
fn idle_is_called_only_after_a_failed_poll() {
    let path = TmpPath::new("idlecount");
    let go = Arc::new(Barrier::new(2));
    run(&path.0, 2, &[small(2)], ok_fence, move |rank, coll| {
        let mut coll = coll.unwrap();
        let mut never = |k: u32| -> Result<(), Infallible> { panic!("idle({k}) called") };
        // Root 1 publishes without waiting; rank 0 looks only afterwards.
        let mut buf = [rank as u8; 8];
        if rank == 1 {
            coll.bcast(1, &mut buf, &mut never).unwrap();
            go.wait();
        } else {
            go.wait();
            coll.bcast(1, &mut buf, &mut never).unwrap();
            assert_eq!(buf, [1; 8]);
        }
        // Rank 1 arrives late: rank 0 sees idle(1), idle(2), ... in order.
        if rank == 1 {
            thread::sleep(std::time::Duration::from_millis(20));
            coll.barrier(&mut idle).unwrap();
        } else {
            let mut expect = 1;
            coll.barrier(&mut |k: u32| -> Result<(), Infallible> {
                assert_eq!(k, expect);
                expect += 1;
                thread::yield_now();
                Ok(())
            })
            .unwrap();
            assert!(expect > 1);
        }
    });
    // Alone: nothing to wait for.
    let path = TmpPath::new("idlealone");
    run(&path.0, 1, &[small(2)], ok_fence, |_, coll| {
        let mut coll = coll.unwrap();
        let mut never = |k: u32| -> Result<(), Infallible> { panic!("idle({k}) called") };
        for _ in 0..10 {
            coll.barrier(&mut never).unwrap();
            let x = coll
                .exchange(&[1, 2, 3], &mut never, |p| p.concat())
                .unwrap();
            assert_eq!(x, [1, 2, 3]);
            coll.bcast(0, &mut [0u8; 4], &mut never).unwrap();
        }
    });
}

/// Ranks that disagree on who publishes at an epoch do not wait for each
/// other forever: a rank that entered the epoch without publishing (a bcast
/// reader, a barrier) is absent to those waiting for its slot, which see its
/// contribution as empty; the area stays usable after.
#[test]
fn ranks_that_publish_nothing_are_absent_not_waited_for() {
    let path = TmpPath::new("absent");
    run(&path.0, 3, &[small(2)], ok_fence, |rank, coll| {
        let mut coll = coll.unwrap();
        // Ranks 0 and 1 each read a bcast from the other; rank 2 roots one.
        let root = [1, 0, 2][rank];
        let got = coll
            .bcast_with(root, &[7; 4], &mut idle, |s| s.len())
            .unwrap();
        assert_eq!(got, (rank != 2).then_some(0), "rank {rank}: root absent");
        // A one-way gather to 0, which rank 2 takes for a bcast it reads
        // from 0: rank 0 sees rank 2 absent, rank 2 sees 0's slot.
        if rank == 2 {
            let got = coll.bcast_with(0, &[], &mut idle, |s| s.to_vec()).unwrap();
            assert_eq!(got, Some(vec![10; 8]));
        } else {
            let got = coll
                .gather_with(0, &[10 + rank as u8; 8], &mut idle, |p| {
                    p.iter().map(|s| s.len()).collect::<Vec<_>>()
                })
                .unwrap();
            assert_eq!(got, (rank == 0).then(|| vec![8, 8, 0]));
        }
        // An exchange against a barrier: the barrier rank is absent to the
        // others; it waits for their `arrived`, which the next barrier
        // stores, so line them up with one.
        if rank == 1 {
            coll.barrier(&mut idle).unwrap();
            coll.barrier(&mut idle).unwrap();
        } else {
            let lens = coll
                .exchange(&[1; 3], &mut idle, |p| {
                    p.iter().map(|s| s.len()).collect::<Vec<_>>()
                })
                .unwrap();
            assert_eq!(lens, [3, 0, 3]);
            coll.barrier(&mut idle).unwrap();
        }
        assert!(!coll.is_broken());
        let all = coll
            .exchange(&[rank as u8], &mut idle, |p| p.concat())
            .unwrap();
        assert_eq!(all, [0, 1, 2], "in step again");
    });
}

/// An `Err` from `idle` ends the wait with that error (whichever rank and
/// operation waits); the area is then broken and refuses further use.
#[test]
fn idle_error_aborts_the_wait() {
    for waiter in [0, 1] {
        for op in ["barrier", "exchange", "bcast"] {
            let path = TmpPath::new("abort");
            run(&path.0, 2, &[small(2)], ok_fence, move |rank, coll| {
                let mut coll = coll.unwrap();
                if rank == waiter {
                    // The peer never joins: give up after 1000 polls.
                    let mut dead = |k: u32| if k >= 1000 { Err(k) } else { Ok(()) };
                    let r = match op {
                        "barrier" => coll.barrier(&mut dead),
                        "exchange" => coll.exchange(&[1; 8], &mut dead, |_| {
                            unreachable!("the peer never contributed")
                        }),
                        _ => coll.bcast(1 - waiter, &mut [0; 8], &mut dead),
                    };
                    assert_eq!(r, Err(1000), "{op}");
                    assert!(coll.is_broken());
                    let again = catch_unwind(AssertUnwindSafe(|| coll.barrier(&mut idle)));
                    assert!(again.is_err(), "a broken area must refuse further use");
                }
                // The peer simply leaves: the waiter's mapping stays valid.
            });
        }
    }
}

fn assert_all_fail(out: &[(Result<(), String>, usize)], what: &str) {
    for (r, (res, fences)) in out.iter().enumerate() {
        assert!(res.is_err(), "rank {r} succeeded despite {what}");
        assert_eq!(*fences, 2, "rank {r}: fence must be called exactly twice");
    }
}

fn boot_result(_: usize, coll: Result<ShmColl, BtlError>) -> Result<(), String> {
    coll.map(drop).map_err(|e| e.to_string())
}

#[test]
fn stale_garbage_file_fails_every_rank() {
    for garbage_len in [4096usize, 10, 0] {
        let path = TmpPath::new("garbage");
        std::fs::write(&path.0, vec![0xa5u8; garbage_len]).unwrap();
        let out = run(&path.0, 3, &[CollConfig::default()], ok_fence, boot_result);
        assert_all_fail(&out, "a stale file");
        let e = out[0].0.as_ref().unwrap_err();
        assert!(e.contains("already exists") && e.contains(&path.0), "{e}");
        assert!(Path::new(&path.0).exists(), "not ours to remove");
    }
}

/// A stale file that looks like a valid area (same configuration, ranks
/// marked present) is poisoned by rank 0 and refused by the others.
#[test]
fn stale_valid_area_fails_every_rank() {
    let path = TmpPath::new("stalevalid");
    let copy = TmpPath::new("stalecopy");
    let (src, dst) = (path.0.clone(), copy.0.clone());
    // Capture a fully attached area: copy the file at the second fence.
    run(
        &path.0,
        2,
        &[small(2)],
        move |r, call| {
            if r == 0 && call == 2 {
                std::fs::copy(&src, &dst).unwrap();
            }
            Ok(())
        },
        boot_result,
    );
    std::fs::rename(&copy.0, &path.0).unwrap();
    let out = run(&path.0, 2, &[small(2)], ok_fence, boot_result);
    assert_all_fail(&out, "a stale valid area");
    assert!(out[1].0.as_ref().unwrap_err().contains("stale"), "{out:?}");
}

#[test]
fn configuration_mismatch_fails_every_rank() {
    for cfgs in [
        vec![
            small(2),
            CollConfig {
                slot_bytes: 1024,
                depth: 2,
                ..small(2)
            },
            small(2),
        ],
        vec![small(2), small(2), small(3)],
    ] {
        let path = TmpPath::new("mismatch");
        let out = run(&path.0, 3, &cfgs, ok_fence, boot_result);
        assert_all_fail(&out, "a configuration mismatch");
        assert!(!Path::new(&path.0).exists());
    }
}

#[test]
fn bad_arguments_fail_every_rank() {
    // Rank 0 rejects its configuration: the others must not attach to
    // anything (there is no file, or a stale one is poisoned).
    for cfgs in [
        vec![
            CollConfig {
                slot_bytes: 64,
                depth: 0,
                ..small(2)
            },
            small(2),
        ],
        vec![
            small(2),
            CollConfig {
                slot_bytes: usize::MAX,
                depth: 2,
                ..small(2)
            },
        ],
    ] {
        let path = TmpPath::new("badargs");
        let out = run(&path.0, 2, &cfgs, ok_fence, boot_result);
        assert_all_fail(&out, "bad arguments");
        assert!(!Path::new(&path.0).exists());
    }
    // Rank not below size, alone.
    for (rank, n) in [(0, 0), (1, 1)] {
        let path = TmpPath::new("badrank");
        let mut fences = 0;
        let e = ShmColl::bootstrap(&path.0, rank, n, &CollConfig::default(), &mut || {
            fences += 1;
            Ok(())
        })
        .unwrap_err();
        assert!(e.to_string().contains("not below"), "{e}");
        assert_eq!(fences, 2);
        assert!(!Path::new(&path.0).exists());
    }
}

#[test]
fn failing_fences_fail_every_rank() {
    // Every fence fails.
    let path = TmpPath::new("fenceall");
    let out = run(
        &path.0,
        3,
        &[small(2)],
        |_, _| Err("pmi gone".into()),
        boot_result,
    );
    assert_all_fail(&out, "failing fences");
    assert!(out[0].0.as_ref().unwrap_err().contains("pmi gone"));
    assert!(!Path::new(&path.0).exists());
    // Only one rank's first fence fails (it still waits at the barrier).
    for culprit in [0, 2] {
        let path = TmpPath::new("fenceone");
        let out = run(
            &path.0,
            3,
            &[small(2)],
            move |r, call| {
                if r == culprit && call == 1 {
                    Err("timeout".into())
                } else {
                    Ok(())
                }
            },
            boot_result,
        );
        assert_all_fail(&out, "one failing fence");
        assert!(!Path::new(&path.0).exists());
    }
}

fn bench(n: usize, spin: u32, iters: u64) {
    let path = TmpPath::new("bench");
    let out = run(
        &path.0,
        n,
        &[CollConfig::default()],
        ok_fence,
        move |rank, coll| {
            let mut coll = coll.unwrap();
            let mut idle = |k: u32| -> Result<(), Infallible> {
                if k <= spin {
                    std::hint::spin_loop();
                } else {
                    thread::yield_now();
                }
                Ok(())
            };
            for _ in 0..iters / 10 {
                coll.barrier(&mut idle).unwrap();
            }
            let t = Instant::now();
            for _ in 0..iters {
                coll.barrier(&mut idle).unwrap();
            }
            let barrier = t.elapsed().as_nanos() as f64 / iters as f64;
            let x = (rank as f64 + 0.5).to_le_bytes();
            let t = Instant::now();
            let mut acc = 0.0;
            for _ in 0..iters {
                acc += coll
                    .exchange(&x, &mut idle, |parts| {
                        parts
                            .iter()
                            .map(|p| f64::from_le_bytes((*p).try_into().unwrap()))
                            .sum::<f64>()
                    })
                    .unwrap();
            }
            let allreduce = t.elapsed().as_nanos() as f64 / iters as f64;
            assert!(acc > 0.0);
            let mut buf = [rank as u8; 8];
            let t = Instant::now();
            for _ in 0..iters {
                coll.bcast(0, &mut buf, &mut idle).unwrap();
            }
            coll.barrier(&mut idle).unwrap();
            let bcast = t.elapsed().as_nanos() as f64 / iters as f64;
            (barrier, allreduce, bcast)
        },
    );
    let (b, a, c) = out[0].0;
    println!(
        "{n} threads (spin {spin} polls, then yield): barrier {b:.0} ns, \
         8-byte allreduce {a:.0} ns, 8-byte bcast {c:.0} ns"
    );
}

/// `cargo test -p gmpi-btl-shm --release --test coll -- --ignored --nocapture`
#[test]
#[ignore = "micro benchmark"]
fn bench_ns_per_op() {
    bench(2, 1000, 1_000_000);
    bench(2, 16, 1_000_000);
    bench(4, 16, 100_000);
    bench(4, 2, 100_000);
}

/// Non-blocking exchanges: every rank starts the same runs of exchanges,
/// more at a time than the area is deep (so some wait here to be
/// published), and finishes them in its own rhythm (polls between starts,
/// polls in a loop, blocking finishes); every contribution is checked byte
/// for byte in epoch order, and blocking operations follow once none is
/// pending.
fn nb_hammer(n: usize, cfg: CollConfig, iters: u64) {
    let path = TmpPath::new(&format!("nb{n}"));
    let slot = cfg.slot_bytes;
    let depth = cfg.depth as u64;
    run(&path.0, n, &[cfg], ok_fence, move |rank, coll| {
        let mut coll = coll.unwrap();
        let mut op = 0u64;
        let mut next_check = 1u64;
        for i in 0..iters {
            let runs = 1 + (i * 7 + 3) % (2 * depth + 2);
            let mut started = Vec::new();
            let mut finish = |e: u64, parts: &[&[u8]], started: &[(u64, usize)]| {
                let (want_op, len) = started
                    .iter()
                    .copied()
                    .find(|&(o, _)| o == e)
                    .expect("an epoch this rank started");
                assert_eq!(e, next_check, "finished in epoch order");
                next_check += 1;
                assert_eq!(parts.len(), n);
                for (r, p) in parts.iter().enumerate() {
                    assert_eq!(
                        *p,
                        &contribution(r, want_op, len)[..],
                        "nb op {want_op} rank {r}"
                    );
                }
            };
            for j in 0..runs {
                op += 1;
                let len = 16 + ((i + j) as usize * 11) % (slot - 15);
                let e = coll.nb_start(&[&contribution(rank, op, len)]);
                assert_eq!(e, op, "epochs count the operations");
                started.push((op, len));
                if (rank as u64 + j).is_multiple_of(3) {
                    coll.nb_try_finish(|e, parts| finish(e, parts, &started));
                }
            }
            match (i + rank as u64) % 3 {
                0 => {
                    while coll.nb_pending().is_some() {
                        if coll
                            .nb_try_finish(|e, parts| finish(e, parts, &started))
                            .is_none()
                        {
                            idle(64).unwrap();
                        }
                    }
                }
                _ => {
                    while let Some(()) = coll
                        .nb_finish(&mut idle, |e, parts| finish(e, parts, &started))
                        .unwrap()
                    {}
                }
            }
            assert_eq!(coll.nb_pending(), None);
            op += 1;
            next_check = op + 1;
            if i % 2 == 0 {
                coll.barrier(&mut idle).unwrap();
            } else {
                let mine = contribution(rank, op, 16);
                coll.exchange(&mine, &mut idle, |parts| {
                    for (r, p) in parts.iter().enumerate() {
                        assert_eq!(*p, &contribution(r, op, 16)[..], "op {op} rank {r}");
                    }
                })
                .unwrap();
            }
        }
        assert!(!coll.is_broken());
    });
}

#[test]
fn nb_hammer_2() {
    nb_hammer(2, small(2), 3_000);
}

#[test]
fn nb_hammer_3_deep_and_shallow() {
    nb_hammer(3, small(1), 1_000);
    nb_hammer(3, small(4), 1_000);
}

#[test]
fn nb_hammer_5() {
    nb_hammer(5, small(2), 500);
}

/// Starting a non-blocking exchange never waits for the other ranks, even
/// many more than the area is deep while another rank has started none
/// (an MPI program may post several non-blocking collectives and then send
/// what the other rank waits for before it posts its own).
#[test]
fn nb_start_never_waits() {
    let path = TmpPath::new("nbstart");
    let posted = Arc::new(AtomicBool::new(false));
    run(&path.0, 2, &[small(1)], ok_fence, move |rank, coll| {
        let mut coll = coll.unwrap();
        let many = 5u64;
        if rank == 1 {
            while !posted.load(Ordering::Acquire) {
                idle(64).unwrap();
            }
        }
        for op in 1..=many {
            coll.nb_start(&[&contribution(rank, op, 32)]);
        }
        if rank == 0 {
            posted.store(true, Ordering::Release);
        }
        let mut op = 0;
        while let Some(()) = coll
            .nb_finish(&mut idle, |e, parts| {
                op += 1;
                assert_eq!(e, op);
                for (r, p) in parts.iter().enumerate() {
                    assert_eq!(*p, &contribution(r, op, 32)[..]);
                }
            })
            .unwrap()
        {}
        assert_eq!(op, many);
    });
}
