//! The pml over the simulated fabric: protocols, ordering, wildcards,
//! unexpected messages, back-pressure, reordering between transports, peer
//! failure, truncation — and a property test against a reference model.

use std::sync::{Arc, Mutex};

use gmpi_btl::loopback::Loopback;
use gmpi_btl::sim::{Fabric, SimMemory};
use gmpi_btl::{Btl, Capabilities};
use gmpi_gpu::MemKind;

use super::{host_only, SimMem};
use crate::progress::Driver;
use gmpi_pml::{
    Buf, DirectEnd, Pml, PmlConfig, PmlError, Posted, RecvArgs, ReqId, SendArgs, SendMode, Status,
};
use proptest::prelude::*;

const EAGER: usize = 256;
const FRAG: usize = 1024;

fn caps(get: bool, excl: u32) -> Capabilities {
    Capabilities {
        name: "sim",
        eager_limit: EAGER,
        max_send_size: FRAG,
        get,
        put: false,
        exclusivity: excl,
        get_threshold: EAGER,
        cuda_ipc: false,
        gpudirect: None,
    }
}

struct World {
    f: Fabric,
    d: Vec<Driver<SimMem>>,
}

impl World {
    /// `n` ranks, `lanes` transports of equal exclusivity, `get` on or off.
    fn new(n: u32, lanes: u32, get: bool) -> Self {
        Self::with_cfg(n, lanes, get, PmlConfig::default())
    }

    fn with_cfg(n: u32, lanes: u32, get: bool, cfg: PmlConfig) -> Self {
        let f = Fabric::new(n, lanes);
        let d = (0..n)
            .map(|r| {
                let mut btls: Vec<Box<dyn Btl>> = vec![Box::new(Loopback::new(r))];
                for l in 0..lanes {
                    btls.push(Box::new(f.endpoint(r, l, caps(get, 10))));
                }
                Driver::new(
                    Pml::new(r, n, cfg.clone()),
                    btls,
                    SimMem(f.memory(r)),
                    host_only(),
                )
            })
            .collect();
        Self { f, d }
    }

    fn mem(&self, r: u32) -> Arc<Mutex<SimMemory>> {
        self.f.memory(r)
    }

    fn alloc(&self, r: u32, data: &[u8]) -> u64 {
        self.mem(r).lock().unwrap().alloc_with(data)
    }

    fn read(&self, r: u32, addr: u64, len: usize) -> Vec<u8> {
        self.mem(r).lock().unwrap().read(addr, len).to_vec()
    }

    fn send(&mut self, from: u32, to: u32, tag: i32, data: &[u8], mode: SendMode) -> ReqId {
        let addr = self.alloc(from, data);
        self.d[from as usize]
            .post_send(SendArgs {
                ctx: 0,
                src: from,
                dest: to,
                tag,
                buf: Buf {
                    addr,
                    len: data.len(),
                    kind: MemKind::Host,
                },
                mode,
            })
            .expect("post_send")
    }

    /// Post a receive into a fresh buffer of `cap` bytes followed by 16
    /// sentinel bytes (0xEE) that must never be written.
    fn recv(&mut self, at: u32, src: Option<u32>, tag: Option<i32>, cap: usize) -> (ReqId, u64) {
        let a = self.recv_args(at, src, tag, cap);
        let addr = a.buf.addr;
        (self.d[at as usize].post_recv(a).expect("post_recv"), addr)
    }

    /// [`World::recv`] through the direct slot of a blocking receive.
    fn recv_direct(
        &mut self,
        at: u32,
        src: Option<u32>,
        tag: Option<i32>,
        cap: usize,
    ) -> (Posted, u64) {
        let a = self.recv_args(at, src, tag, cap);
        let addr = a.buf.addr;
        let p = self.d[at as usize]
            .post_recv_direct(a)
            .expect("post_recv_direct");
        (p, addr)
    }

    /// A receive at rank `at` into a fresh buffer of `cap` bytes followed by
    /// the 16 sentinel bytes.
    fn recv_args(&self, at: u32, src: Option<u32>, tag: Option<i32>, cap: usize) -> RecvArgs {
        let mut init = vec![0u8; cap];
        init.extend_from_slice(&[0xEE; 16]);
        RecvArgs {
            ctx: 0,
            src,
            src_world: src,
            tag,
            buf: Buf {
                addr: self.alloc(at, &init),
                len: cap,
                kind: MemKind::Host,
            },
            consumed: false,
        }
    }

    /// Progress every rank until nothing moves.
    fn run(&mut self) {
        for _ in 0..100_000 {
            let mut n = 0;
            for d in &mut self.d {
                n += d.progress();
                assert!(d.fatal().is_none(), "fatal: {:?}", d.fatal());
            }
            if n == 0 && self.f.in_flight() == 0 && self.d.iter().all(|d| !d.has_pending()) {
                return;
            }
        }
        panic!("simulation did not go idle");
    }

    fn done(&mut self, r: u32, id: ReqId) -> Result<Status, PmlError> {
        self.d[r as usize]
            .test(id)
            .expect("request should be complete")
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn every_size_every_protocol() {
    for get in [true, false] {
        let mut w = World::new(2, 1, get);
        for &len in &[
            0usize,
            1,
            7,
            EAGER - 1,
            EAGER,
            EAGER + 1,
            FRAG,
            3 * FRAG + 5,
            64 * 1024,
        ] {
            let data = pattern(len, len as u8);
            let (r, addr) = w.recv(1, Some(0), Some(5), len);
            let s = w.send(0, 1, 5, &data, SendMode::Standard);
            w.run();
            let st = w.done(1, r).unwrap();
            assert_eq!((st.source, st.tag, st.len), (0, 5, len as u64));
            assert_eq!(w.read(1, addr, len), data, "len {len} get {get}");
            assert_eq!(w.read(1, addr + len as u64, 16), vec![0xEE; 16]);
            w.done(0, s).unwrap();
        }
        assert_eq!(w.d[0].pml.outstanding() + w.d[1].pml.outstanding(), 0);
    }
}

#[test]
fn protocol_choice_is_traceable() {
    let w = World::new(2, 1, true);
    let p = &w.d[0].pml;
    use gmpi_pml::Protocol::*;
    assert_eq!(
        p.protocol_for(1, 8, MemKind::Host, SendMode::Standard),
        Some(Eager)
    );
    assert_eq!(
        p.protocol_for(1, 8, MemKind::Host, SendMode::Synchronous),
        Some(EagerSync)
    );
    assert_eq!(
        p.protocol_for(1, 100_000, MemKind::Host, SendMode::Standard),
        Some(RndvGet)
    );
    // Small device messages go eager through a bounce buffer; large ones,
    // without CUDA IPC or GPUDirect on this transport, are staged (never
    // by CMA).
    assert_eq!(
        p.protocol_for(1, 8, MemKind::Device { ordinal: 0 }, SendMode::Standard),
        Some(Eager)
    );
    assert_eq!(
        p.protocol_for(
            1,
            100_000,
            MemKind::Device { ordinal: 0 },
            SendMode::Standard
        ),
        Some(RndvPipelined)
    );
    // Self traffic goes through loopback (no get).
    assert_eq!(
        p.protocol_for(0, 100_000, MemKind::Host, SendMode::Standard),
        Some(RndvPipelined)
    );
}

#[test]
fn unexpected_messages_then_receives() {
    for get in [true, false] {
        let mut w = World::new(2, 1, get);
        let a = pattern(10, 1);
        let b = pattern(5000, 2);
        w.send(0, 1, 1, &a, SendMode::Standard);
        w.send(0, 1, 2, &b, SendMode::Standard);
        w.run();
        let st = w.d[1]
            .pml
            .iprobe(0, Some(0), Some(2))
            .expect("probe sees rndv");
        assert_eq!(st.len, 5000);
        let (r2, a2) = w.recv(1, Some(0), Some(2), 5000);
        let (r1, a1) = w.recv(1, Some(0), Some(1), 10);
        w.run();
        assert_eq!(w.done(1, r1).unwrap().len, 10);
        assert_eq!(w.done(1, r2).unwrap().len, 5000);
        assert_eq!(w.read(1, a1, 10), a);
        assert_eq!(w.read(1, a2, 5000), b);
    }
}

#[test]
fn non_overtaking_and_wildcards() {
    let mut w = World::new(3, 1, true);
    for i in 0..20u8 {
        w.send(0, 2, 7, &[i; 3], SendMode::Standard);
    }
    w.run();
    for i in 0..20u8 {
        let (r, a) = w.recv(2, None, None, 3);
        w.run();
        let st = w.done(2, r).unwrap();
        assert_eq!((st.source, st.tag), (0, 7));
        assert_eq!(w.read(2, a, 3), vec![i; 3]);
    }
    // ANY_SOURCE takes the first arrival; specific tag filters.
    let (r_any, _) = w.recv(2, None, Some(9), 4);
    w.send(1, 2, 8, b"skip", SendMode::Standard);
    w.run();
    assert!(!w.d[2].pml.is_complete(r_any));
    w.send(0, 2, 9, b"take", SendMode::Standard);
    w.run();
    assert_eq!(w.done(2, r_any).unwrap().source, 0);
    let (r8, a8) = w.recv(2, Some(1), None, 4);
    w.run();
    assert_eq!(w.done(2, r8).unwrap().tag, 8);
    assert_eq!(w.read(2, a8, 4), b"skip");
}

#[test]
fn contexts_never_cross_match() {
    let mut w = World::new(2, 1, true);
    let addr = w.alloc(0, b"ctx1");
    w.d[0]
        .post_send(SendArgs {
            ctx: 1,
            src: 0,
            dest: 1,
            tag: 0,
            buf: Buf {
                addr,
                len: 4,
                kind: MemKind::Host,
            },
            mode: SendMode::Standard,
        })
        .unwrap();
    let (r0, _) = w.recv(1, None, None, 4);
    w.run();
    assert!(
        !w.d[1].pml.is_complete(r0),
        "ctx 0 receive took a ctx 1 message"
    );
    assert!(w.d[1].pml.iprobe(1, None, None).is_some());
}

#[test]
fn back_pressure_keeps_order() {
    let mut w = World::new(2, 1, false);
    w.f.set_capacity(1);
    let msgs: Vec<Vec<u8>> = (0..50).map(|i| pattern(i * 37 % 3000, i as u8)).collect();
    let sends: Vec<ReqId> = msgs
        .iter()
        .map(|m| w.send(0, 1, 3, m, SendMode::Standard))
        .collect();
    let recvs: Vec<(ReqId, u64)> = msgs
        .iter()
        .map(|m| w.recv(1, Some(0), Some(3), m.len()))
        .collect();
    w.run();
    for ((r, a), m) in recvs.iter().zip(&msgs) {
        assert_eq!(w.done(1, *r).unwrap().len, m.len() as u64);
        assert_eq!(&w.read(1, *a, m.len()), m);
    }
    for s in sends {
        w.done(0, s).unwrap();
    }
}

/// Two peers blocked at once, with sends to both interleaved and many
/// waiting: each peer's messages arrive whole and in order (a refusal ends
/// only its own peer's turn in a retry round).
#[test]
fn back_pressure_towards_two_peers_keeps_each_order() {
    let mut w = World::new(3, 1, false);
    w.f.set_capacity(1);
    let msgs: Vec<Vec<u8>> = (0..400).map(|i| pattern(i * 53 % 2000, i as u8)).collect();
    let sends: Vec<ReqId> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| w.send(0, 1 + (i % 2) as u32, 3, m, SendMode::Standard))
        .collect();
    // Rank 0 alone first: both peers stay full, every later send waits.
    for _ in 0..20 {
        w.d[0].progress();
    }
    let recvs: Vec<(ReqId, u64)> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| w.recv(1 + (i % 2) as u32, Some(0), Some(3), m.len()))
        .collect();
    w.run();
    for (i, ((r, a), m)) in recvs.iter().zip(&msgs).enumerate() {
        let at = 1 + (i % 2) as u32;
        assert_eq!(w.done(at, *r).unwrap().len, m.len() as u64, "message {i}");
        assert_eq!(&w.read(at, *a, m.len()), m, "message {i}");
    }
    for s in sends {
        w.done(0, s).unwrap();
    }
}

#[test]
fn reordering_between_transports() {
    // Two lanes of equal exclusivity: messages are striped across them, and
    // lane 0 is held back so later messages overtake on the wire.
    let mut w = World::new(2, 2, true);
    w.f.hold_lane(0);
    let msgs: Vec<Vec<u8>> = (0..10).map(|i| pattern(8 + i, i as u8)).collect();
    for m in &msgs {
        w.send(0, 1, 1, m, SendMode::Standard);
    }
    let recvs: Vec<(ReqId, u64)> = (0..10).map(|i| w.recv(1, Some(0), None, 8 + i)).collect();
    for _ in 0..5 {
        for d in &mut w.d {
            d.progress();
        }
    }
    // Lane 1's messages arrived but must wait for lane 0's.
    assert!(!w.d[1].pml.is_complete(recvs[0].0));
    assert!(!w.d[1].pml.is_complete(recvs[1].0));
    w.f.release_lane(0);
    w.run();
    for (i, (r, a)) in recvs.iter().enumerate() {
        w.done(1, *r).unwrap();
        assert_eq!(w.read(1, *a, 8 + i), msgs[i]);
    }
}

#[test]
fn random_interleavings_and_queued_completions() {
    for seed in 1..20 {
        let mut w = World::new(3, 2, seed % 2 == 0);
        w.f.set_seed(seed);
        w.f.set_queued(seed % 3 == 0);
        w.f.set_capacity(2 + seed as usize % 3);
        let mut expect = Vec::new();
        for i in 0..30usize {
            let from = (i % 2) as u32;
            let len = (i * 397 + seed as usize) % 4000;
            let data = pattern(len, i as u8);
            w.send(from, 2, 4, &data, SendMode::Standard);
            expect.push((from, data));
        }
        let mut recvs = Vec::new();
        for (from, data) in &expect {
            recvs.push(w.recv(2, Some(*from), Some(4), data.len()));
        }
        w.run();
        for ((r, a), (_, data)) in recvs.iter().zip(&expect) {
            w.done(2, *r).unwrap();
            assert_eq!(&w.read(2, *a, data.len()), data, "seed {seed}");
        }
    }
}

#[test]
fn consumed_receives_get_alone() {
    let mut w = World::new(2, 1, true);
    let data = pattern(100_000, 3);
    // A reduction's operand: the get is copied by the receiver alone.
    let mut a = w.recv_args(1, Some(0), Some(0), 100_000);
    a.consumed = true;
    let at = a.buf.addr;
    let r = w.d[1].post_recv(a).unwrap();
    let s = w.send(0, 1, 0, &data, SendMode::Standard);
    w.run();
    w.done(1, r).unwrap();
    w.done(0, s).unwrap();
    assert_eq!(w.read(1, at, 100_000), data);
    assert_eq!(w.f.alone_gets(), 1);
    // Matched as an unexpected message, too.
    let s = w.send(0, 1, 1, &data, SendMode::Standard);
    w.run();
    let mut a = w.recv_args(1, Some(0), Some(1), 100_000);
    a.consumed = true;
    let at = a.buf.addr;
    let r = w.d[1].post_recv(a).unwrap();
    w.run();
    w.done(1, r).unwrap();
    w.done(0, s).unwrap();
    assert_eq!(w.read(1, at, 100_000), data);
    assert_eq!(w.f.alone_gets(), 2);
    // An ordinary receive: a plain get.
    let (r, at) = w.recv(1, Some(0), Some(2), 100_000);
    let s = w.send(0, 1, 2, &data, SendMode::Standard);
    w.run();
    w.done(1, r).unwrap();
    w.done(0, s).unwrap();
    assert_eq!(w.read(1, at, 100_000), data);
    assert_eq!(w.f.alone_gets(), 2);
    // Every rendezvous handed its registration back after its FIN.
    assert_eq!(w.f.registered(), 0);
}

/// A get from a peer that is busy pulling two messages of ours or more
/// goes unhelped (`Pull::Unhelped`); with one of ours in its hands, or
/// none, it is a plain get the owner may help with.
#[test]
fn gets_from_a_peer_busy_pulling_ours_go_unhelped() {
    let mut w = World::new(2, 1, true);
    let data = pattern(100_000, 5);
    // Rank 0 has two rendezvous sends to rank 1 waiting for its reply.
    let s1 = w.send(0, 1, 1, &data, SendMode::Standard);
    let s2 = w.send(0, 1, 2, &data, SendMode::Standard);
    w.run();
    // Rank 1's message to rank 0: rank 0's get of it goes unhelped.
    let (r, at) = w.recv(0, Some(1), Some(3), 100_000);
    let s3 = w.send(1, 0, 3, &data, SendMode::Standard);
    w.run();
    w.done(0, r).unwrap();
    w.done(1, s3).unwrap();
    assert_eq!(w.read(0, at, 100_000), data);
    assert_eq!(w.f.unhelped_gets(), 1);
    // Rank 1 takes one of them; with one left, rank 0's next get is plain.
    let (r1, at1) = w.recv(1, Some(0), Some(1), 100_000);
    w.run();
    w.done(1, r1).unwrap();
    w.done(0, s1).unwrap();
    assert_eq!(w.read(1, at1, 100_000), data);
    let (r, at) = w.recv(0, Some(1), Some(4), 100_000);
    let s4 = w.send(1, 0, 4, &data, SendMode::Standard);
    w.run();
    w.done(0, r).unwrap();
    w.done(1, s4).unwrap();
    assert_eq!(w.read(0, at, 100_000), data);
    assert_eq!(w.f.unhelped_gets(), 1);
    // Rank 1 has no send waiting for rank 0: its gets are plain too.
    let (r2, at2) = w.recv(1, Some(0), Some(2), 100_000);
    w.run();
    w.done(1, r2).unwrap();
    w.done(0, s2).unwrap();
    assert_eq!(w.read(1, at2, 100_000), data);
    assert_eq!(w.f.unhelped_gets(), 1);
    assert_eq!(w.f.registered(), 0);
}

#[test]
fn get_failure_falls_back_to_pipelined() {
    let mut w = World::new(2, 1, true);
    w.f.fail_gets(true);
    let data = pattern(10_000, 9);
    let (r, a) = w.recv(1, Some(0), Some(0), 10_000);
    let s = w.send(0, 1, 0, &data, SendMode::Standard);
    w.run();
    w.done(1, r).unwrap();
    w.done(0, s).unwrap();
    assert_eq!(w.read(1, a, 10_000), data);
    // The stream that replaced the get handed the registration back.
    assert_eq!(w.f.registered(), 0);
}

#[test]
fn truncation_writes_nothing_past_the_buffer() {
    for (get, len) in [(true, 100), (true, 5000), (false, 5000)] {
        let mut w = World::new(2, 1, get);
        let data = pattern(len, 3);
        let (r, a) = w.recv(1, Some(0), Some(0), 50);
        let s = w.send(0, 1, 0, &data, SendMode::Standard);
        w.run();
        assert_eq!(
            w.done(1, r),
            Err(PmlError::Truncated {
                len: len as u64,
                cap: 50
            })
        );
        assert_eq!(w.read(1, a, 50), data[..50].to_vec());
        assert_eq!(w.read(1, a + 50, 16), vec![0xEE; 16]);
        w.done(0, s)
            .expect("the sender does not see the receiver's truncation");
    }
}

#[test]
fn synchronous_send_waits_for_the_match() {
    for len in [8usize, 5000] {
        let mut w = World::new(2, 1, true);
        let s = w.send(0, 1, 0, &pattern(len, 1), SendMode::Synchronous);
        w.run();
        assert!(
            !w.d[0].pml.is_complete(s),
            "ssend of {len} completed before a receive was posted"
        );
        let (r, _) = w.recv(1, Some(0), Some(0), len);
        w.run();
        w.done(1, r).unwrap();
        w.done(0, s).unwrap();
    }
}

#[test]
fn self_sends_and_zero_bytes() {
    let mut w = World::new(1, 0, false);
    let data = pattern(70_000, 4);
    let s = w.send(0, 0, 1, &data, SendMode::Standard);
    let z = w.send(0, 0, 2, &[], SendMode::Standard);
    // A synchronous one: its ACK comes back through the loopback btl,
    // which the driver skips while nothing was submitted to it.
    let y = w.send(0, 0, 3, b"sync", SendMode::Synchronous);
    let (r, a) = w.recv(0, Some(0), Some(1), 70_000);
    let (rz, _) = w.recv(0, Some(0), Some(2), 0);
    w.run();
    let (ry, ay) = w.recv(0, Some(0), Some(3), 4);
    w.run();
    w.done(0, r).unwrap();
    assert_eq!(w.done(0, rz).unwrap().len, 0);
    w.done(0, s).unwrap();
    w.done(0, z).unwrap();
    assert_eq!(w.done(0, ry).unwrap().len, 4);
    w.done(0, y).unwrap();
    assert_eq!(w.read(0, a, 70_000), data);
    assert_eq!(w.read(0, ay, 4), b"sync");
}

#[test]
fn cancel_unmatched_receive() {
    let mut w = World::new(2, 1, true);
    let (r, _) = w.recv(1, Some(0), Some(0), 8);
    assert!(w.d[1].cancel(r));
    assert!(w.done(1, r).unwrap().cancelled);
    // A later message is not swallowed by the cancelled receive.
    w.send(0, 1, 0, b"12345678", SendMode::Standard);
    w.run();
    assert!(w.d[1].pml.iprobe(0, Some(0), Some(0)).is_some());
}

#[test]
fn peer_failure_fails_dependent_requests() {
    let mut w = World::new(3, 1, true);
    let (r_from2, _) = w.recv(0, Some(2), None, 8);
    let (r_any, _) = w.recv(0, None, None, 8);
    let big = w.send(0, 2, 0, &pattern(10_000, 1), SendMode::Standard);
    w.run();
    w.f.kill(2);
    w.run();
    assert_eq!(w.done(0, r_from2), Err(PmlError::PeerFailed(2)));
    assert_eq!(w.done(0, big), Err(PmlError::PeerFailed(2)));
    assert!(
        !w.d[0].pml.is_complete(r_any),
        "ANY_SOURCE may still be satisfied by rank 1"
    );
    w.send(1, 0, 0, b"alive", SendMode::Standard);
    w.run();
    w.done(0, r_any).unwrap();
    let err = w.d[0].post_send(SendArgs {
        ctx: 0,
        src: 0,
        dest: 2,
        tag: 0,
        buf: Buf::default(),
        mode: SendMode::Standard,
    });
    assert_eq!(err.unwrap_err(), PmlError::PeerFailed(2));
}

#[test]
fn malformed_fragments_are_errors_not_panics() {
    struct Nop;
    impl gmpi_pml::HostWrite for Nop {
        fn write(&mut self, _: u64, _: &[u8]) {}
    }
    let mut p = Pml::new(0, 2, PmlConfig::default());
    p.add_btl(caps(true, 1), &|r| r == 1);
    use gmpi_pml::wire::Hdr;
    let cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![1, 0, 1],
        Hdr::Fin { sreq: 12345 }.encode().as_bytes().to_vec(),
        Hdr::Cts {
            sreq: 1 << 32,
            rreq: 1,
            want: 5,
            pull: false,
        }
        .encode()
        .as_bytes()
        .to_vec(),
        Hdr::Frag {
            rreq: 1 << 32,
            offset: 0,
        }
        .encode()
        .as_bytes()
        .to_vec(),
        Hdr::Ack { sreq: 99 }.encode().as_bytes().to_vec(),
    ];
    for c in cases {
        assert!(p.handle_frag(0, 1, &c, &mut Nop).is_err(), "{c:?} accepted");
    }
    // An eager header whose length disagrees with its payload.
    let m = gmpi_pml::wire::MatchHdr {
        ctx: 0,
        src: 1,
        tag: 0,
        seq: 0,
        len: 10,
        sreq: 1,
    };
    let f = Hdr::Match { flags: 0, m }.encode().as_bytes().to_vec();
    assert!(p.handle_frag(0, 1, &f, &mut Nop).is_err());
}

// ---------------------------------------------------------------------------
// Property test: random schedules against a reference model.
//
// Each rank sends a random list of messages (random destination, tag, size)
// and each rank posts, per source, receives with a specific source and a
// random tag or ANY_TAG. MPI's matching with a fixed source is deterministic,
// so the reference is: take every message in send order, then for each
// receive in posting order the earliest unmatched message from that source
// whose tag it accepts. Posting is interleaved with delivery at random.

#[derive(Debug, Clone)]
struct Msg {
    from: u32,
    to: u32,
    tag: i32,
    len: usize,
}

fn schedule() -> impl Strategy<Value = (u64, Vec<Msg>, Vec<Option<i32>>, Vec<u8>)> {
    let msg = (
        0u32..3,
        0u32..3,
        0i32..3,
        prop_oneof![0usize..40, 200usize..300, 1000usize..3000],
    )
        .prop_map(|(from, to, tag, len)| Msg { from, to, tag, len });
    (
        any::<u64>(),
        proptest::collection::vec(msg, 1..25),
        proptest::collection::vec(proptest::option::weighted(0.7, 0i32..3), 25),
        proptest::collection::vec(0u8..4, 60),
    )
}

proptest! {
    // 96 schedules by default; PROPTEST_CASES=N runs more.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96),
        ..ProptestConfig::default()
    })]
    #[test]
    fn matches_reference_model((seed, msgs, tags, steps) in schedule()) {
        let mut w = World::new(3, 2, seed % 2 == 0);
        w.f.set_seed(seed);
        w.f.set_capacity(1 + (seed % 4) as usize);
        // Receives: for each message, one receive at its destination for its
        // source; the tag is the message's own or ANY_TAG at random, but the
        // set of receives per (src, dst) is a permutation-free list in send
        // order, so every message is matched by exactly one receive.
        let mut recv_plan: Vec<(u32, u32, Option<i32>)> = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            let t = tags[i % tags.len()].map(|_| m.tag);
            recv_plan.push((m.to, m.from, t));
        }
        // Reference model.
        let mut model: Vec<Option<usize>> = vec![None; recv_plan.len()];
        let mut taken = vec![false; msgs.len()];
        for (ri, &(to, from, tag)) in recv_plan.iter().enumerate() {
            for (mi, m) in msgs.iter().enumerate() {
                if !taken[mi] && m.to == to && m.from == from && tag.is_none_or(|t| t == m.tag) {
                    taken[mi] = true;
                    model[ri] = Some(mi);
                    break;
                }
            }
        }
        let data: Vec<Vec<u8>> = msgs.iter().enumerate().map(|(i, m)| pattern(m.len, i as u8)).collect();
        let cap = 3000;
        let mut sends = Vec::new();
        let mut recvs: Vec<(u32, ReqId, u64)> = Vec::new();
        let (mut si, mut ri) = (0, 0);
        let mut step = 0;
        while si < msgs.len() || ri < recv_plan.len() {
            let s = steps[step % steps.len()];
            step += 1;
            match s {
                0 | 1 if si < msgs.len() => {
                    let m = &msgs[si];
                    sends.push((m.from, w.send(m.from, m.to, m.tag, &data[si], SendMode::Standard)));
                    si += 1;
                }
                2 if ri < recv_plan.len() => {
                    let (to, from, tag) = recv_plan[ri];
                    let (id, a) = w.recv(to, Some(from), tag, cap);
                    recvs.push((to, id, a));
                    ri += 1;
                }
                _ => {
                    for d in &mut w.d { d.progress(); }
                    if si >= msgs.len() && ri < recv_plan.len() && s == 3 {
                        let (to, from, tag) = recv_plan[ri];
                        let (id, a) = w.recv(to, Some(from), tag, cap);
                        recvs.push((to, id, a));
                        ri += 1;
                    } else if ri >= recv_plan.len() && si < msgs.len() {
                        let m = &msgs[si];
                        sends.push((m.from, w.send(m.from, m.to, m.tag, &data[si], SendMode::Standard)));
                        si += 1;
                    }
                }
            }
        }
        w.run();
        for (i, (to, id, a)) in recvs.iter().enumerate() {
            let st = w.done(*to, *id).unwrap();
            let mi = model[i].expect("model matches every receive");
            prop_assert_eq!(st.tag, msgs[mi].tag);
            prop_assert_eq!(st.len as usize, msgs[mi].len);
            prop_assert_eq!(w.read(*to, *a, msgs[mi].len), data[mi].clone());
        }
        for (from, s) in sends {
            w.done(from, s).unwrap();
        }
        for d in &w.d {
            prop_assert_eq!(d.pml.outstanding(), 0);
        }
    }
}

/// A blocking receive waits in the pml's direct slot while nothing else is
/// posted or unexpected, keeps its place in matching order, and ends like a
/// request would: eager data, truncation, a synchronous sender's ACK, a
/// rendezvous (as a request), a failed peer.
#[test]
fn direct_receives_match_in_order_and_end_like_requests() {
    let mut w = World::new(3, 1, true);
    // Posted first, so it takes the first matching message even though a
    // request for the same envelope is posted after it.
    let (p, a) = w.recv_direct(1, None, Some(5), 8);
    assert_eq!(p, Posted::Direct);
    let (later, b) = w.recv(1, Some(0), Some(5), 8);
    // A second blocking receive cannot use the busy slot.
    let Posted::Req(second) = w.recv_direct(1, Some(2), Some(9), 8).0 else {
        panic!("the slot is taken");
    };
    w.send(0, 1, 5, b"first!", SendMode::Standard);
    let s2 = w.send(0, 1, 5, b"second", SendMode::Synchronous);
    w.run();
    assert_eq!(
        w.d[1].pml.take_direct(),
        Some(DirectEnd::Done(Ok(Status {
            source: 0,
            tag: 5,
            len: 6,
            cancelled: false
        })))
    );
    assert_eq!(w.read(1, a, 6 + 2 + 16)[..6], *b"first!");
    assert!(w.read(1, a + 8, 16).iter().all(|&x| x == 0xEE));
    assert_eq!(w.done(1, later).unwrap().len, 6);
    assert_eq!(w.read(1, b, 6), b"second");
    w.done(0, s2).unwrap();
    assert_eq!(w.d[1].pml.take_direct(), None, "the slot is free again");
    assert!(w.d[1].cancel(second));
    assert!(w.done(1, second).unwrap().cancelled);

    // Truncated: the end says so, nothing is written past the buffer; a
    // synchronous sender is released by the ACK.
    let (p, a) = w.recv_direct(1, Some(0), None, 4);
    assert_eq!(p, Posted::Direct);
    let s = w.send(0, 1, 7, b"12345678", SendMode::Synchronous);
    w.run();
    assert_eq!(
        w.d[1].pml.take_direct(),
        Some(DirectEnd::Done(Err(PmlError::Truncated { len: 8, cap: 4 })))
    );
    assert_eq!(w.read(1, a, 4), b"1234");
    assert!(w.read(1, a + 4, 16).iter().all(|&x| x == 0xEE));
    w.done(0, s).unwrap();

    // A rendezvous turns it into a request.
    let data = pattern(5000, 3);
    let (p, a) = w.recv_direct(1, Some(2), Some(1), 6000);
    assert_eq!(p, Posted::Direct);
    let s = w.send(2, 1, 1, &data, SendMode::Standard);
    w.run();
    let Some(DirectEnd::Promoted(id)) = w.d[1].pml.take_direct() else {
        panic!("a rendezvous should promote the direct receive");
    };
    assert_eq!(w.done(1, id).unwrap().len, 5000);
    assert_eq!(w.read(1, a, 5000), data);
    w.done(2, s).unwrap();

    // Something unexpected waits: a plain request, matched at once.
    w.send(0, 1, 3, b"early", SendMode::Standard);
    w.run();
    let (p, a) = w.recv_direct(1, Some(0), Some(3), 8);
    let Posted::Req(id) = p else {
        panic!("an unexpected message should make it a request");
    };
    assert_eq!(w.done(1, id).unwrap().len, 5);
    assert_eq!(w.read(1, a, 5), b"early");

    // Forgotten by its caller: later messages go to the unexpected queue.
    assert_eq!(w.recv_direct(1, Some(0), Some(4), 8).0, Posted::Direct);
    w.d[1].pml.drop_direct();
    w.send(0, 1, 4, b"kept", SendMode::Standard);
    w.run();
    assert_eq!(w.d[1].pml.take_direct(), None);
    assert!(w.d[1].pml.iprobe(0, Some(0), Some(4)).is_some());
    let (id, _) = w.recv(1, Some(0), Some(4), 8);
    assert_eq!(w.done(1, id).unwrap().len, 4);

    // Its source fails: it ends with the failure.
    assert_eq!(w.recv_direct(1, Some(2), Some(6), 8).0, Posted::Direct);
    w.run();
    w.f.kill(2);
    w.run();
    assert_eq!(
        w.d[1].pml.take_direct(),
        Some(DirectEnd::Done(Err(PmlError::PeerFailed(2))))
    );
    // And a new one from the dead rank fails at once.
    let e = w.d[1].post_recv_direct(RecvArgs {
        ctx: 0,
        src: Some(2),
        src_world: Some(2),
        tag: None,
        buf: Buf {
            addr: a,
            len: 8,
            kind: MemKind::Host,
        },
        consumed: false,
    });
    assert_eq!(e, Err(PmlError::PeerFailed(2)));
}
