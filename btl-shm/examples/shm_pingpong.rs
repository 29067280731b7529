//! Two-process micro benchmark of the shared-memory btl.
//!
//! `cargo run --release -p gmpi-btl-shm --example shm_pingpong [iters]`
//!
//! The program re-executes itself as the second rank; the bootstrap fence is
//! a byte over a Unix socket. It prints:
//! - 8 B ping-pong over the rings, both sides polling: one-way latency;
//! - the same with both sides blocking in `wait` (futex wake-up per message);
//! - 32 KiB fragments streamed through one ring: bandwidth (one copy: the
//!   sender's gather into the ring; the receiver does not copy out);
//! - 1 MiB and 16 MiB `get` (CMA `process_vm_readv`; cooperative, the
//!   first rank writing part of it with `process_vm_writev` while it waits,
//!   unless `GMPI_SHM_COOP=0`): bandwidth.

// `unsafe` only to lend the destination buffer to `Btl::get` (in `get`).

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::Command;
use std::time::{Duration, Instant};

use gmpi_btl::{Btl, Event, LocalMem, MemDesc, Submit};
use gmpi_btl_shm::{ShmBtl, ShmConfig};

fn fence(s: &mut UnixStream) -> Result<(), String> {
    s.write_all(&[1]).map_err(|e| e.to_string())?;
    let mut b = [0u8];
    s.read_exact(&mut b).map_err(|e| e.to_string())
}

/// The second process's parent, once known: a child whose parent died (a
/// killed benchmark) exits instead of polling forever.
static PARENT: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// Exit if our parent is gone; cheap enough to call every few thousand polls.
fn check_parent(spins: &mut u32) {
    *spins = spins.wrapping_add(1);
    if spins.is_multiple_of(4096) {
        if let Some(&p) = PARENT.get() {
            if std::os::unix::process::parent_id() != p {
                eprintln!("shm_pingpong: parent exited; child leaving");
                std::process::exit(1);
            }
        }
    }
}

/// Poll (or sleep, if `block`) until one fragment arrives; copy it out.
fn recv(btl: &mut ShmBtl, block: bool) -> Vec<u8> {
    let mut got = None;
    let mut spins = 0;
    loop {
        check_parent(&mut spins);
        btl.progress(&mut |e| {
            if let Event::Frag { data, .. } = e {
                assert!(got.is_none(), "one message at a time");
                got = Some(data.to_vec());
            }
        });
        if let Some(g) = got {
            return g;
        }
        if block {
            btl.wait(Duration::from_secs(1));
        }
    }
}

/// Get all of `dst` from rank 0, driving a cooperative get to its end.
fn get(btl: &mut ShmBtl, desc: &MemDesc, dst: &mut [u8]) {
    // SAFETY: `dst` is borrowed for this whole function, which returns only
    // once the get is over (at once, or at its completion event).
    match unsafe { btl.get(0, desc, 0, LocalMem::of(dst), 1) }.expect("get") {
        Submit::Done => {}
        Submit::Queued => {
            let mut done = false;
            while !done {
                btl.progress(&mut |e| match e {
                    Event::GetComplete { token: 1 } => done = true,
                    other => panic!("unexpected {other:?}"),
                });
            }
        }
        Submit::NoResource => panic!("get refused"),
    }
}

/// Poll until one fragment arrives; only count it (no copy).
fn recv_len(btl: &mut ShmBtl) -> usize {
    let mut len = None;
    let mut spins = 0;
    while len.is_none() {
        check_parent(&mut spins);
        btl.progress(&mut |e| {
            if let Event::Frag { data, .. } = e {
                len = Some(data.len());
            }
        });
    }
    len.unwrap_or(0)
}

fn send(btl: &mut ShmBtl, to: u32, data: &[u8]) {
    let mut spins = 0;
    while btl.send(to, &[data], 0).expect("send") != Submit::Done {
        check_parent(&mut spins);
        btl.progress(&mut |_| {});
    }
}

const FRAG: usize = gmpi_btl_shm::DEFAULT_MAX_FRAG;
/// About 512 MiB, a whole number of fragments (the child counts bytes).
const STREAM_BYTES: usize = (512 << 20) / FRAG * FRAG;

fn config() -> ShmConfig {
    ShmConfig {
        coop: std::env::var("GMPI_SHM_COOP").map_or(true, |v| v != "0"),
        ..ShmConfig::default()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "child" {
        return child(&args[2], &args[3]);
    }
    let iters: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let path = format!("/dev/shm/gmpi-bench-{}", std::process::id());
    let sock_path = format!("/tmp/gmpi-bench-{}.sock", std::process::id());
    let listener = UnixListener::bind(&sock_path).expect("bind");
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .args(["child", &path, &sock_path])
        .spawn()
        .expect("spawn");
    let (mut sock, _) = listener.accept().expect("accept");
    let _ = std::fs::remove_file(&sock_path);
    let cfg = config();
    let mut btl =
        ShmBtl::bootstrap(&path, 0, 2, &[0, 1], &cfg, &mut || fence(&mut sock)).expect("bootstrap");
    println!(
        "shm: ring {} KiB, {} KiB of segment per rank, CMA {}",
        btl.ring_bytes() >> 10,
        btl.memory_per_rank() >> 10,
        btl.cma_status()
    );
    send(&mut btl, 1, &iters.to_le_bytes());
    recv(&mut btl, true);

    // 8 B ping-pong, polling.
    let msg = [7u8; 8];
    for _ in 0..iters / 10 {
        send(&mut btl, 1, &msg);
        recv_len(&mut btl);
    }
    let t = Instant::now();
    for _ in 0..iters {
        send(&mut btl, 1, &msg);
        recv_len(&mut btl);
    }
    let one_way = t.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64);
    println!("8 B ping-pong, polling:  {one_way:.3} us one-way ({iters} round trips)");

    // 8 B ping-pong, both sides sleeping in wait() between messages.
    let blocking = (iters / 20).max(100);
    let t = Instant::now();
    for _ in 0..blocking {
        send(&mut btl, 1, &msg);
        recv(&mut btl, true);
    }
    let one_way = t.elapsed().as_secs_f64() * 1e6 / (2.0 * blocking as f64);
    println!(
        "8 B ping-pong, blocking: {one_way:.3} us one-way ({blocking} round trips, futex wake-ups)"
    );

    // Streaming 32 KiB fragments through the ring.
    let frag = vec![3u8; FRAG];
    let t = Instant::now();
    for _ in 0..STREAM_BYTES / FRAG {
        send(&mut btl, 1, &frag);
    }
    recv(&mut btl, false);
    let gbs = STREAM_BYTES as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!("32 KiB fragments through the ring: {gbs:.2} GB/s (sender copies in; receiver reads the length in place)");

    // CMA get of 1 MiB and 16 MiB buffers.
    let buf: Vec<u8> = (0..16usize << 20).map(|i| i as u8).collect();
    let desc = btl.register(buf.as_ptr() as u64, buf.len() as u64);
    let mut m = Vec::new();
    desc.unwrap_or_default().encode(&mut m);
    send(&mut btl, 1, &m);
    let report = recv(&mut btl, true);
    println!("{}", String::from_utf8_lossy(&report));
    drop(buf);

    let status = child.wait().expect("wait");
    assert!(status.success(), "child failed: {status}");
}

fn child(path: &str, sock_path: &str) {
    let _ = PARENT.set(std::os::unix::process::parent_id());
    let mut sock = UnixStream::connect(sock_path).expect("connect");
    let cfg = config();
    let mut btl =
        ShmBtl::bootstrap(path, 1, 2, &[0, 1], &cfg, &mut || fence(&mut sock)).expect("bootstrap");
    let iters = usize::from_le_bytes(recv(&mut btl, true)[..8].try_into().expect("8 bytes"));
    send(&mut btl, 0, b"ready");
    let msg = [8u8; 8];
    for _ in 0..iters + iters / 10 {
        recv_len(&mut btl);
        send(&mut btl, 0, &msg);
    }
    for _ in 0..(iters / 20).max(100) {
        recv(&mut btl, true);
        send(&mut btl, 0, &msg);
    }
    let mut got = 0;
    let mut spins = 0;
    while got < STREAM_BYTES {
        check_parent(&mut spins);
        btl.progress(&mut |e| {
            if let Event::Frag { data, .. } = e {
                got += data.len();
            }
        });
    }
    send(&mut btl, 0, b"streamed");

    let desc = MemDesc::decode(&recv(&mut btl, true)).expect("descriptor");
    let mut report = String::new();
    if !btl.cma_enabled() {
        report = format!("get: CMA {}", btl.cma_status());
    } else {
        let how = if btl.coop_enabled() {
            "CMA, cooperative"
        } else {
            "CMA"
        };
        for (size, reps) in [(1usize << 20, 2000), (16 << 20, 100)] {
            let mut dst = vec![0u8; size];
            get(&mut btl, &desc, &mut dst);
            let t = Instant::now();
            for _ in 0..reps {
                get(&mut btl, &desc, &mut dst);
            }
            let gbs = (size * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
            assert!(dst.iter().enumerate().all(|(i, &b)| b == i as u8));
            report.push_str(&format!(
                "get {} MiB via {how}: {gbs:.2} GB/s\n",
                size >> 20
            ));
        }
        report.pop();
    }
    send(&mut btl, 0, report.as_bytes());
}
