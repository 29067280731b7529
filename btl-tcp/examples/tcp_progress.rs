//! `cargo run --release -p gmpi-btl-tcp --example tcp_progress`: what an idle
//! `progress` costs (no connection, then one established connection), and a
//! btl-level ping-pong of 8-byte fragments between two threads over
//! 127.0.0.1 (one-way latency, half the round trip).

use std::time::Instant;

use gmpi_btl::{Btl, Event};
use gmpi_btl_tcp::{Secret, TcpBtl, TcpConfig};

fn idle_cost(b: &mut TcpBtl) -> f64 {
    let n = 200_000;
    let t = Instant::now();
    for _ in 0..n {
        b.progress(&mut |_| {});
    }
    t.elapsed().as_secs_f64() * 1e9 / f64::from(n)
}

fn recv_one(b: &mut TcpBtl) {
    let mut got = false;
    while !got {
        b.progress(&mut |e| {
            if let Event::Frag { .. } = e {
                got = true;
            }
        });
    }
}

fn main() {
    let mut cfg = TcpConfig::new(Secret::from_bytes([3; 32]), "example");
    cfg.interfaces = Some("127.0.0.0/8".into());
    let mut a = TcpBtl::bind(0, 2, cfg.clone()).expect("bind rank 0");
    let mut b = TcpBtl::bind(1, 2, cfg).expect("bind rank 1");
    a.add_peer(1, &b.card()).expect("card");
    b.add_peer(0, &a.card()).expect("card");
    println!("idle progress, no connection: {:.0} ns", idle_cost(&mut a));
    a.send(1, &[b"hello"], 0).expect("send");
    // Both ends take part in the handshake.
    let mut got = false;
    while !got {
        a.progress(&mut |_| {});
        b.progress(&mut |e| got |= matches!(e, Event::Frag { .. }));
    }
    println!("idle progress, one connection: {:.0} ns", idle_cost(&mut a));
    let iters = 20_000u32;
    let h = std::thread::spawn(move || {
        for _ in 0..iters + 1000 {
            recv_one(&mut b);
            while b.send(0, &[&[0u8; 8]], 0) != Ok(gmpi_btl::Submit::Done) {}
        }
        b
    });
    let mut t = Instant::now();
    for i in 0..iters + 1000 {
        if i == 1000 {
            t = Instant::now();
        }
        while a.send(1, &[&[0u8; 8]], 0) != Ok(gmpi_btl::Submit::Done) {}
        recv_one(&mut a);
    }
    let one_way = t.elapsed().as_secs_f64() * 1e6 / f64::from(iters) / 2.0;
    println!("btl ping-pong 8 B: {one_way:.2} us one-way (mean of {iters})");
    let b = h.join().expect("peer thread");
    // Both close together.
    let h = std::thread::spawn(move || drop(b));
    drop(a);
    h.join().expect("close");
}
