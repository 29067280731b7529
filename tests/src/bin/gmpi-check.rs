//! `gmpirun -np N gmpi-check SCENARIO [ARGS]`: one whole-job scenario per
//! subcommand; exits non-zero (with a message) on any wrong result.
//!
//! Scenarios: `sweep [MAX]`, `many [N]`, `realloc` (rendezvous sends from
//! buffers freed and allocated again), `remap` (rendezvous messages from and
//! into mappings unmapped, emptied or moved between rounds), `self`, `order`, `wild`, `ssend`,
//! `errors`, `crash panic|exit3|kill|abort`, `pids DIR` (writes pid/jobid and
//! waits in a barrier), `hang DIR` (as `pids`, then waits forever), `stdin`,
//! `noinit` (the last rank exits 0 before initializing), `rma` (the typed
//! one-sided API: windows over borrowed and allocated memory, epochs as
//! guards).

use gmpi::{Communicator, ErrorClass, ANY_SOURCE, ANY_TAG};
use gmpi_tests::pattern;

type R = Result<(), String>;

fn e(x: gmpi::Error) -> String {
    x.to_string()
}

fn check(cond: bool, what: impl FnOnce() -> String) -> R {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

const SIZES: &[usize] = &[
    0,
    1,
    7,
    8,
    63,
    64,
    255,
    4095,
    4096,
    4097,
    8191,
    8192,
    8193,
    16383,
    16384,
    16385,
    32767,
    32768,
    32769,
    65536,
    65537,
    262_144,
    1 << 20,
    (4 << 20) + 3,
    16 << 20,
    64 << 20,
];

/// Every rank sends to the next and receives from the previous, every size.
fn sweep(w: &Communicator, max: usize) -> R {
    let (r, n) = (w.rank(), w.size());
    let next = (r + 1) % n;
    let prev = (r + n - 1) % n;
    for (i, &len) in SIZES.iter().filter(|&&s| s <= max).enumerate() {
        let out = pattern(len, r, i as u64);
        let mut inp = vec![0u8; len + 8];
        let tail = [0xA5u8; 8];
        inp[len..].copy_from_slice(&tail);
        let req = w.isend(&out[..], next, i as i32).map_err(e)?;
        let st = w.recv(&mut inp[..len], prev, i as i32).map_err(e)?;
        req.wait().map_err(e)?;
        check(
            st.source() == prev && st.tag() == i as i32 && st.count::<u8>() == len,
            || format!("size {len}: status {st:?}"),
        )?;
        check(inp[..len] == pattern(len, prev, i as u64)[..], || {
            format!("size {len}: content differs")
        })?;
        check(inp[len..] == tail, || {
            format!("size {len}: wrote past the buffer")
        })?;
    }
    // Typed data too.
    let v: Vec<f64> = (0..1000).map(|x| x as f64 * 0.5 + r as f64).collect();
    let mut got = vec![0f64; 1000];
    let st = w
        .sendrecv(&v[..], next, 99, &mut got[..], prev, 99)
        .map_err(e)?;
    check(
        st.count::<f64>() == 1000 && got[999] == 999.0 * 0.5 + prev as f64,
        || "f64 sendrecv".into(),
    )?;
    Ok(())
}

/// Rendezvous sends from a buffer freed and allocated again between sends
/// (large allocations are fresh mappings, often at the same address): a
/// transport that kept a registration of the old pages would send stale
/// bytes.
fn realloc(w: &Communicator) -> R {
    let (r, n) = (w.rank(), w.size());
    let next = (r + 1) % n;
    let prev = (r + n - 1) % n;
    let mut addrs = std::collections::HashSet::new();
    for k in 0..12u64 {
        let len = (1 << 20) + 4096 * (k as usize % 3);
        let out = pattern(len, r, 1000 + k);
        addrs.insert(out.as_ptr() as usize);
        let mut inp = vec![0u8; len];
        let req = w.isend(&out[..], next, k as i32).map_err(e)?;
        w.recv(&mut inp[..], prev, k as i32).map_err(e)?;
        req.wait().map_err(e)?;
        check(inp == pattern(len, prev, 1000 + k), || {
            format!("round {k}: stale or wrong bytes")
        })?;
        drop(out);
    }
    if r == 0 {
        println!(
            "realloc: 12 rounds, {} distinct send-buffer addresses",
            addrs.len()
        );
    }
    Ok(())
}

/// A mapping of `len` fresh zero bytes, at `hint` if that is free.
#[allow(unsafe_code)] // maps memory for `remap`
fn map_at(hint: usize, len: usize) -> Result<*mut u8, String> {
    // SAFETY: without MAP_FIXED the kernel maps only free addresses.
    let p = unsafe {
        libc::mmap(
            hint as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    check(p != libc::MAP_FAILED, || {
        format!("mmap: {}", std::io::Error::last_os_error())
    })?;
    Ok(p.cast())
}

/// Rendezvous messages from and into mappings that change under the same
/// addresses between rounds, every way memory can leave a process: kept
/// and rewritten in place, unmapped and mapped again at the same address,
/// emptied by `madvise(MADV_DONTNEED)`, moved away by `mremap` with a fresh
/// mapping put in its place. A transport that kept a registration of the
/// old pages (a registration cache that missed the change) would send
/// stale bytes, or receive into pages the program no longer sees.
#[allow(unsafe_code)] // maps, empties, moves and unmaps its own buffers
fn remap(w: &Communicator) -> R {
    const LEN: usize = 1 << 20;
    const ROUNDS: u64 = 16;
    let (r, n) = (w.rank(), w.size());
    let next = (r + 1) % n;
    let prev = (r + n - 1) % n;
    let mut out = map_at(0, LEN)?;
    let mut inp = map_at(0, LEN)?;
    let mut same = 0;
    for k in 0..ROUNDS {
        for b in [&mut out, &mut inp] {
            let old = *b;
            match k % 4 {
                0 => {}
                1 => {
                    // SAFETY: the mapping is this function's; no slice of it
                    // lives across rounds.
                    unsafe { libc::munmap(old.cast(), LEN) };
                    *b = map_at(old as usize, LEN)?;
                }
                2 => {
                    // SAFETY: as above; emptying it is the point.
                    let rc = unsafe { libc::madvise(old.cast(), LEN, libc::MADV_DONTNEED) };
                    check(rc == 0, || "madvise".into())?;
                }
                _ => {
                    let scratch = map_at(0, LEN)?;
                    // SAFETY: both mappings are this function's; the old
                    // one moves over the scratch one, which it replaces.
                    let moved = unsafe {
                        libc::mremap(
                            old.cast(),
                            LEN,
                            LEN,
                            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                            scratch.cast::<libc::c_void>(),
                        )
                    };
                    check(moved != libc::MAP_FAILED, || "mremap".into())?;
                    *b = map_at(old as usize, LEN)?;
                    // SAFETY: the moved mapping is this function's, unused.
                    unsafe { libc::munmap(moved, LEN) };
                }
            }
            same += usize::from(*b == old);
        }
        // SAFETY: `out` and `inp` are LEN-byte mappings of this function,
        // distinct, and these slices end with the round.
        let (o, i) = unsafe {
            (
                std::slice::from_raw_parts_mut(out, LEN),
                std::slice::from_raw_parts_mut(inp, LEN),
            )
        };
        o.copy_from_slice(&pattern(LEN, r, 2000 + k));
        let req = w.isend(&o[..], next, k as i32).map_err(e)?;
        w.recv(&mut i[..], prev, k as i32).map_err(e)?;
        req.wait().map_err(e)?;
        check(i[..] == pattern(LEN, prev, 2000 + k)[..], || {
            format!("round {k} (mode {}): stale or wrong bytes", k % 4)
        })?;
    }
    // SAFETY: the mappings are this function's and no slice of them lives.
    unsafe {
        libc::munmap(out.cast(), LEN);
        libc::munmap(inp.cast(), LEN);
    }
    if r == 0 {
        println!("remap: {ROUNDS} rounds, {same} of 32 changes kept the address");
    }
    Ok(())
}

/// `count` outstanding non-blocking messages each way between rank pairs.
fn many(w: &Communicator, count: usize) -> R {
    let (r, n) = (w.rank(), w.size());
    let peer = r ^ 1;
    if peer >= n {
        return Ok(());
    }
    let out: Vec<[u32; 2]> = (0..count).map(|i| [r as u32, i as u32]).collect();
    let mut inp = vec![[0u32; 2]; count];
    let mut reqs = Vec::with_capacity(2 * count);
    for (i, slot) in inp.iter_mut().enumerate() {
        reqs.push(
            w.irecv(std::slice::from_mut(slot), peer, (i % 1000) as i32)
                .map_err(e)?,
        );
    }
    for (i, m) in out.iter().enumerate() {
        reqs.push(
            w.isend(std::slice::from_ref(m), peer, (i % 1000) as i32)
                .map_err(e)?,
        );
    }
    gmpi::wait_all(reqs).map_err(e)?;
    for (i, m) in inp.iter().enumerate() {
        check(*m == [peer as u32, i as u32], || {
            format!("message {i} is {m:?}")
        })?;
    }
    Ok(())
}

fn self_send(w: &Communicator) -> R {
    let me = w.rank();
    for len in [0usize, 5, 5000, 200_000] {
        let out = pattern(len, me, 7);
        let mut inp = vec![0u8; len];
        let s = w.isend(&out[..], me, 3).map_err(e)?;
        w.recv(&mut inp[..], me, 3).map_err(e)?;
        s.wait().map_err(e)?;
        check(inp == out, || format!("self-send of {len} bytes differs"))?;
    }
    // Blocking eager self-send completes before the receive is posted.
    w.send(&[1u8, 2, 3][..], me, 4).map_err(e)?;
    let mut b = [0u8; 3];
    w.recv(&mut b[..], me, 4).map_err(e)?;
    check(b == [1, 2, 3], || "blocking self-send".into())
}

/// Messages of mixed protocols on one tag arrive in send order.
fn order(w: &Communicator) -> R {
    let (r, n) = (w.rank(), w.size());
    let lens: Vec<usize> = (0..60)
        .map(|i| [3usize, 5000, 70_000, 0, 17_000][i % 5] + i)
        .collect();
    if r == 0 {
        let bufs: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| pattern(l, 0, i as u64))
            .collect();
        for dest in 1..n {
            let reqs: Vec<_> = bufs
                .iter()
                .map(|b| w.isend(&b[..], dest, 5))
                .collect::<Result<_, _>>()
                .map_err(e)?;
            gmpi::wait_all(reqs).map_err(e)?;
        }
    } else {
        for (i, &l) in lens.iter().enumerate() {
            let mut b = vec![0u8; 80_000];
            let st = w.recv(&mut b[..], 0, ANY_TAG).map_err(e)?;
            check(
                st.count::<u8>() == l && b[..l] == pattern(l, 0, i as u64)[..],
                || format!("message {i} out of order"),
            )?;
        }
    }
    Ok(())
}

fn wild(w: &Communicator) -> R {
    let (r, n) = (w.rank(), w.size());
    if r == 0 {
        let mut seen = vec![false; n as usize];
        for _ in 1..n {
            let st = w.probe(ANY_SOURCE, ANY_TAG).map_err(e)?;
            check(
                st.tag() == 100 + st.source() && st.count::<i32>() == 2,
                || format!("probe {st:?}"),
            )?;
            let mut b = [0i32; 2];
            let st2 = w.recv(&mut b[..], st.source(), st.tag()).map_err(e)?;
            check(st2.source() == st.source() && b == [st.source(), 7], || {
                "probed message".into()
            })?;
            seen[st.source() as usize] = true;
        }
        check(seen[1..].iter().all(|&s| s), || {
            "not every rank was heard".into()
        })?;
        check(w.iprobe(ANY_SOURCE, ANY_TAG).map_err(e)?.is_none(), || {
            "iprobe found a phantom message".into()
        })?;
    } else {
        w.send(&[r, 7][..], 0, 100 + r).map_err(e)?;
    }
    w.barrier().map_err(e)
}

fn ssend(w: &Communicator) -> R {
    if w.size() < 2 || w.rank() > 1 {
        return w.barrier().map_err(e);
    }
    for len in [8usize, 100_000] {
        if w.rank() == 1 {
            let t = std::time::Instant::now();
            w.ssend(&vec![1u8; len][..], 0, 1).map_err(e)?;
            check(t.elapsed().as_millis() >= 150, || {
                format!("ssend of {len} B returned before the receive was posted")
            })?;
        } else {
            std::thread::sleep(std::time::Duration::from_millis(250));
            let mut b = vec![0u8; len];
            w.recv(&mut b[..], 1, 1).map_err(e)?;
        }
    }
    w.barrier().map_err(e)
}

fn errors(w: &Communicator) -> R {
    let (r, n) = (w.rank(), w.size());
    let err = w.send(&[1u8][..], n, 0).expect_err("send to rank == size");
    check(
        err.class() == ErrorClass::Rank
            && err.to_string().contains("MPI_Send")
            && err.to_string().contains(&format!("on rank {r}")),
        || err.to_string(),
    )?;
    let err = w.send(&[1u8][..], 0, -5).expect_err("negative tag");
    check(
        err.class() == ErrorClass::Tag && err.to_string().contains("-5"),
        || err.to_string(),
    )?;
    let mut b = [0u8; 4];
    let err = w.recv(&mut b[..], -7, 0).expect_err("bad source");
    check(err.class() == ErrorClass::Rank, || err.to_string())?;
    let st = w.recv(&mut b[..], gmpi::PROC_NULL, 0).map_err(e)?;
    check(
        st.source() == gmpi::PROC_NULL && st.count::<u8>() == 0,
        || "PROC_NULL".into(),
    )?;
    w.send(&b[..], gmpi::PROC_NULL, 0).map_err(e)?;
    // Truncation, eager and rendezvous: an error, nothing written past the buffer.
    if n >= 2 && r < 2 {
        for len in [100usize, 100_000] {
            if r == 0 {
                w.send(&vec![9u8; len][..], 1, 8).map_err(e)?;
            } else {
                let mut buf = [0u8; 60];
                let err = w.recv(&mut buf[..50], 0, 8).expect_err("truncation");
                check(err.class() == ErrorClass::Truncate, || err.to_string())?;
                check(
                    buf[..50].iter().all(|&x| x == 9) && buf[50..].iter().all(|&x| x == 0),
                    || "truncation wrote past the buffer".into(),
                )?;
            }
        }
    }
    // A truncated receive among others completed together (`wait_all`, which
    // waits for them under one hold of the engine): the error comes out,
    // once, and every other receive is complete and right.
    if n >= 2 && r < 2 {
        let peer = 1 - r;
        let mut small = [0u8; 4];
        let mut ok = [[0u32; 2]; 8];
        let mut reqs = vec![w.irecv(&mut small[..], peer, 20).map_err(e)?];
        for (i, m) in ok.iter_mut().enumerate() {
            reqs.push(
                w.irecv(std::slice::from_mut(m), peer, 21 + i as i32)
                    .map_err(e)?,
            );
        }
        w.send(&[7u8; 40][..], peer, 20).map_err(e)?;
        for i in 0..8u32 {
            w.send(&[r as u32, i][..], peer, 21 + i as i32).map_err(e)?;
        }
        let err = gmpi::wait_all(reqs).expect_err("truncation inside wait_all");
        check(err.class() == ErrorClass::Truncate, || err.to_string())?;
        for (i, m) in ok.iter().enumerate() {
            check(*m == [peer as u32, i as u32], || {
                format!("receive {i} beside a truncated one holds {m:?}")
            })?;
        }
    }
    // The job still works afterwards.
    w.barrier().map_err(e)
}

fn crash(w: &Communicator, how: &str) -> R {
    w.barrier().map_err(e)?;
    if w.rank() == w.size() - 1 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        match how {
            "panic" => panic!("gmpi-check: deliberate panic"),
            "exit3" => std::process::exit(3),
            // SAFETY-free: kill ourselves through the shell-free libc-less route.
            "kill" => {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &std::process::id().to_string()])
                    .status();
                std::thread::sleep(std::time::Duration::from_secs(10));
            }
            "abort" => w.abort(6),
            other => return Err(format!("unknown crash mode {other}")),
        }
    }
    // Everyone else waits for a message that never comes.
    let mut b = [0u8; 1];
    w.recv(&mut b[..], w.size() - 1, 0).map_err(e)?;
    Err("received a message from a dead rank".into())
}

fn pids(w: &Communicator, dir: &str) -> R {
    let jobid = std::env::var("GMPI_JOBID").unwrap_or_default();
    std::fs::write(
        format!("{dir}/{}", w.rank()),
        format!("{} {jobid}", std::process::id()),
    )
    .map_err(|x| x.to_string())?;
    w.barrier().map_err(e)
}

fn stdin(w: &Communicator) -> R {
    if w.rank() == 0 {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map_err(|x| x.to_string())?;
        let words = s.split_whitespace().count() as u64;
        for d in 1..w.size() {
            w.send(&[words][..], d, 0).map_err(e)?;
        }
        println!("rank 0 read {words} words");
    } else {
        let mut c = [0u64];
        w.recv(&mut c[..], 0, 0).map_err(e)?;
    }
    Ok(())
}

/// The typed one-sided API: a ring of puts under fences into borrowed
/// memory; accumulates, fetch-and-op and compare-and-swap under locks on an
/// allocated window; gets under lock_all; and the sync errors.
/// `threads`: four threads of each rank (`Threading::Multiple`), each on
/// its own duplicate of the world, exchange around a ring, with every
/// peer (non-blocking) and in allreduces at once; every value is checked.
fn threads(w: &Communicator) -> R {
    use gmpi::Op;
    const T: i32 = 4;
    let (me, n) = (w.rank(), w.size());
    let comms: Vec<Communicator> = (0..T)
        .map(|_| w.dup())
        .collect::<Result<_, _>>()
        .map_err(e)?;
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(t, c)| {
                s.spawn(move || -> R {
                    let t = t as i32;
                    for i in 0..40 {
                        let out = [me * 1000 + t * 100 + i];
                        let mut inn = [-1i32];
                        c.sendrecv(&out[..], (me + 1) % n, i, &mut inn[..], (me + n - 1) % n, i)
                            .map_err(e)?;
                        let left = (me + n - 1) % n;
                        check(inn[0] == left * 1000 + t * 100 + i, || {
                            format!("thread {t} ring got {}", inn[0])
                        })?;
                        let sends: Vec<[i32; 1]> =
                            (0..n).map(|p| [me * 100 + p * 10 + t]).collect();
                        let mut recvs = vec![[-1i32; 1]; n as usize];
                        let mut reqs = Vec::new();
                        for (p, r) in recvs.iter_mut().enumerate() {
                            reqs.push(c.irecv(&mut r[..], p as i32, 5).map_err(e)?);
                        }
                        for (p, b) in sends.iter().enumerate() {
                            reqs.push(c.isend(&b[..], p as i32, 5).map_err(e)?);
                        }
                        gmpi::wait_all(reqs).map_err(e)?;
                        for (p, r) in recvs.iter().enumerate() {
                            check(r[0] == p as i32 * 100 + me * 10 + t, || {
                                format!("thread {t} from {p} got {}", r[0])
                            })?;
                        }
                        let mut sum = [0i64];
                        c.allreduce(&[i64::from(me + t + i)][..], &mut sum[..], Op::Sum)
                            .map_err(e)?;
                        let want = i64::from(n * (n - 1) / 2 + n * (t + i));
                        check(sum[0] == want, || {
                            format!("thread {t} allreduce {}", sum[0])
                        })?;
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
    })
}

fn rma(w: &Communicator) -> R {
    use gmpi::{LockType, Op};
    let (me, n) = (w.rank(), w.size());
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    let mut mem = [-1i64; 4];
    {
        let win = w.win_create(&mut mem[..]).map_err(e)?;
        let ep = win.fence().map_err(e)?;
        ep.put(right, 1, &[i64::from(me) * 10, i64::from(me) * 10 + 1])
            .map_err(e)?;
        ep.fence().map_err(e)?;
        let mut back = [0i64; 2];
        ep.get(right, 1, &mut back).map_err(e)?;
        check(back == [i64::from(me) * 10, i64::from(me) * 10 + 1], || {
            format!("get back {back:?}")
        })?;
        ep.close().map_err(e)?;
        win.free().map_err(e)?;
    }
    check(
        mem == [-1, i64::from(left) * 10, i64::from(left) * 10 + 1, -1],
        || format!("window memory after the ring: {mem:?}"),
    )?;

    // Large transfers (between nodes over ib: RDMA WRITEs and READs of
    // several chunks): each rank writes a pattern of its own into its right
    // neighbour's window at an odd offset and reads it back; after the last
    // fence each finds its left neighbour's pattern, and nothing else
    // written, in its own memory.
    {
        const LEN: usize = (1 << 20) + 4099;
        const AT: usize = 33;
        let pat = |r: i32, i: usize| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8 ^ r as u8;
        let mut big = vec![0u8; AT + LEN + 64];
        {
            let win = w.win_create(&mut big[..]).map_err(e)?;
            let ep = win.fence().map_err(e)?;
            let data: Vec<u8> = (0..LEN).map(|i| pat(me, i)).collect();
            ep.put(right, AT, &data).map_err(e)?;
            ep.fence().map_err(e)?;
            let mut back = vec![0u8; LEN];
            ep.get(right, AT, &mut back).map_err(e)?;
            check(back == data, || {
                let at = back.iter().zip(&data).position(|(a, b)| a != b);
                format!(
                    "a {LEN}-byte get read back other bytes than the put wrote (first at {at:?})"
                )
            })?;
            ep.close().map_err(e)?;
            win.free().map_err(e)?;
        }
        let bad = (0..big.len()).find(|&i| {
            let want = if (AT..AT + LEN).contains(&i) {
                pat(left, i - AT)
            } else {
                0
            };
            big[i] != want
        });
        check(bad.is_none(), || {
            format!("window memory after the large ring differs at byte {bad:?}")
        })?;
    }
    // Passive target while the target computes: rank 0 sleeps, calling
    // nothing, while every other rank locks it, puts, reads back, unlocks.
    {
        let win = w.win_allocate::<u64>(n as usize).map_err(e)?;
        w.barrier().map_err(e)?;
        if me == 0 {
            std::thread::sleep(std::time::Duration::from_millis(300));
        } else {
            let g = win.lock(0, LockType::Exclusive).map_err(e)?;
            g.put(0, me as usize, &[me as u64 + 100]).map_err(e)?;
            let mut v = [0u64];
            g.get(0, me as usize, &mut v).map_err(e)?;
            check(v == [me as u64 + 100], || {
                format!("read back {v:?} from a sleeping target")
            })?;
            drop(g);
        }
        w.barrier().map_err(e)?;
        if me == 0 {
            let g = win.lock(0, LockType::Shared).map_err(e)?;
            let mut v = vec![0u64; n as usize];
            g.get(0, 0, &mut v).map_err(e)?;
            let want: Vec<u64> = (0..n as u64)
                .map(|r| if r == 0 { 0 } else { r + 100 })
                .collect();
            check(v == want, || {
                format!("the sleeping target's window {v:?}, want {want:?}")
            })?;
        }
        w.barrier().map_err(e)?;
        win.free().map_err(e)?;
    }

    let win = w.win_allocate::<u64>(4).map_err(e)?;
    for _ in 0..20 {
        let g = win.lock(0, LockType::Shared).map_err(e)?;
        g.accumulate(0, 0, &[1, 2], Op::Sum).map_err(e)?;
        let old = g.fetch_and_op(0, 2, 1, Op::Sum).map_err(e)?;
        check(old < 20 * n as u64, || format!("fetched {old}"))?;
    }
    // Each rank sets bit `me` of slot 3 by compare-and-swap.
    loop {
        let g = win.lock(0, LockType::Exclusive).map_err(e)?;
        let mut cur = [0u64];
        g.get(0, 3, &mut cur).map_err(e)?;
        let was = g
            .compare_and_swap(0, 3, cur[0] | 1 << me, cur[0])
            .map_err(e)?;
        if was == cur[0] {
            break;
        }
    }
    w.barrier().map_err(e)?;
    {
        let all = win.lock_all().map_err(e)?;
        let mut v = [0u64; 4];
        all.get(0, 0, &mut v).map_err(e)?;
        let k = n as u64;
        let want = [20 * k, 40 * k, 20 * k, (1u64 << n) - 1];
        check(v == want, || {
            format!("rank 0's window {v:?}, want {want:?}")
        })?;
        all.flush(0).map_err(e)?;
    }
    // (Operations exist only on epochs.) Unlocking what is not locked, and
    // a second lock of one rank, are MPI_ERR_RMA_SYNC.
    let raw = win.raw();
    match raw.unlock(0) {
        Err(x) if x.class() == ErrorClass::RmaSync => {}
        other => return Err(format!("unlock without a lock: {other:?}")),
    }
    let g = win.lock(right, LockType::Exclusive).map_err(e)?;
    match raw.lock(LockType::Shared, right, 0) {
        Err(x) if x.class() == ErrorClass::RmaSync => {}
        other => return Err(format!("locking twice: {other:?}")),
    }
    drop(g);
    w.barrier().map_err(e)?;
    win.free().map_err(e)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `noinit`: the last rank leaves before initializing (as after a failed
    // argument check); the others must not wait for it forever.
    if args.first().map(String::as_str) == Some("noinit")
        && std::env::var("GMPI_RANK").ok()
            == std::env::var("GMPI_SIZE")
                .ok()
                .and_then(|s| s.parse::<i32>().ok())
                .map(|n| (n - 1).to_string())
    {
        std::thread::sleep(std::time::Duration::from_millis(200));
        return;
    }
    let start = if args.first().map(String::as_str) == Some("threads") {
        gmpi::init_thread(gmpi::Threading::Multiple).map(|(u, _)| u)
    } else {
        gmpi::init()
    };
    let universe = match start {
        Ok(u) => u,
        Err(x) => {
            eprintln!("gmpi-check: init failed: {x}");
            std::process::exit(1);
        }
    };
    let w = universe.world();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let res = match arg(0).as_str() {
        "sweep" => sweep(&w, arg(1).parse().unwrap_or(usize::MAX)),
        "many" => many(&w, arg(1).parse().unwrap_or(10_000)),
        "realloc" => realloc(&w),
        "remap" => remap(&w),
        "self" => self_send(&w),
        "order" => order(&w),
        "wild" => wild(&w),
        "ssend" => ssend(&w),
        "errors" => errors(&w),
        "crash" => crash(&w, &arg(1)),
        "pids" => pids(&w, &arg(1)),
        "stdin" => stdin(&w),
        "noinit" => w.barrier().map_err(e),
        "rma" => rma(&w),
        "threads" => threads(&w),
        "hang" => pids(&w, &arg(1)).and_then(|()| {
            let mut b = [0u8; 1];
            w.recv(&mut b[..], (w.rank() + 1) % w.size(), 77)
                .map_err(e)?;
            Err("hang: a message arrived".into())
        }),
        other => Err(format!("unknown scenario {other:?}")),
    };
    match res.and_then(|()| universe.finalize().map_err(e)) {
        Ok(()) => println!(
            "gmpi-check {} OK on rank {} of {}",
            arg(0),
            w.rank(),
            w.size()
        ),
        Err(m) => {
            eprintln!("gmpi-check {} FAILED on rank {}: {m}", arg(0), w.rank());
            std::process::exit(1);
        }
    }
}
