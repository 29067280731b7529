//! Raw sockets that lie, stall or send garbage to a `TcpBtl`: each is
//! dropped (before authentication: silently, no event; after: one
//! `PeerFailed`), nothing panics, and real peers keep being served.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use common::*;
use gmpi_btl::{Btl, Rank};
use gmpi_btl_tcp::auth::{self, Side, Transcript};
use gmpi_btl_tcp::wire::{self, FrameKind, Hs, HsKind, Verdict};
use gmpi_btl_tcp::{Secret, TcpBtl, TcpConfig};
use proptest::prelude::*;

/// Ranks 0 and 2 are real btls; rank 1 is played by raw sockets (its card
/// points at a listener nobody serves).
fn server_and_peer(cfg: &TcpConfig) -> (TcpBtl, TcpBtl, TcpListener) {
    let fake1 = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut b0 = TcpBtl::bind(0, 3, cfg.clone()).unwrap();
    let mut b2 = TcpBtl::bind(2, 3, cfg.clone()).unwrap();
    b0.add_peer(1, &fake1.local_addr().unwrap().to_string())
        .unwrap();
    b0.add_peer(2, &b2.card()).unwrap();
    b2.add_peer(0, &b0.card()).unwrap();
    b2.add_peer(1, &fake1.local_addr().unwrap().to_string())
        .unwrap();
    (b0, b2, fake1)
}

fn addr_of(b: &TcpBtl) -> SocketAddr {
    b.listen_addrs()[0]
}

/// Rank 2 sends to rank 0, which must receive it: the btl still works.
fn still_serves(b0: &mut TcpBtl, g0: &mut Got, b2: &mut TcpBtl, what: &[u8]) {
    let before = g0.frags.len();
    b2.send(0, &[what], 0).unwrap();
    let mut g2 = Got::default();
    let t = std::time::Instant::now();
    while g0.frags.len() == before {
        progress_into(b0, g0);
        progress_into(b2, &mut g2);
        assert!(t.elapsed() < GUARD, "hang guard");
    }
    assert_eq!(g0.frags.last().unwrap(), &(2, what.to_vec()));
    assert!(g2.failed.is_empty());
}

/// Run `client` on a thread while pumping `b`; return its result.
fn with_server<T: Send + 'static>(
    b: &mut TcpBtl,
    g: &mut Got,
    client: impl FnOnce() -> T + Send + 'static,
) -> T {
    let h = std::thread::spawn(client);
    pump_while(b, g, || !h.is_finished());
    h.join().unwrap()
}

#[test]
fn a_client_with_the_wrong_secret_is_dropped_without_events() {
    let (mut b0, mut b2, _f) = server_and_peer(&cfg());
    let mut g0 = Got::default();
    let to = addr_of(&b0);
    let wrong = Secret::from_bytes([0x11; 32]);
    let (mut s, verdict) = with_server(&mut b0, &mut g0, move || {
        raw_handshake(to, 1, 0, &wrong).unwrap()
    });
    assert_eq!(verdict, None, "no verdict for a failed proof");
    assert!(closed_by_peer(&mut s));
    assert!(g0.frags.is_empty() && g0.failed.is_empty(), "{g0:?}");
    assert_eq!(b0.handshakes_in_progress(), 0);
    assert!(b0.connected_peers().is_empty());
    still_serves(&mut b0, &mut g0, &mut b2, b"after a wrong secret");
    // The right secret over the same path is welcomed (the check is real).
    let key = Secret::from_bytes(KEY);
    let (s, verdict) = with_server(&mut b0, &mut g0, move || {
        raw_handshake(to, 1, 0, &key).unwrap()
    });
    assert_eq!(verdict, Some(Verdict::Welcome));
    drop(s);
    close_all(vec![b0, b2]);
}

#[test]
fn a_server_with_the_wrong_secret_is_dropped_and_the_peer_reported() {
    let cfg = cfg();
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut b = TcpBtl::bind(0, 2, cfg).unwrap();
    b.add_peer(1, &fake.local_addr().unwrap().to_string())
        .unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = fake.accept().unwrap();
        s.set_read_timeout(Some(GUARD)).unwrap();
        let mut hello = [0u8; wire::HELLO_LEN];
        std::io::Read::read_exact(&mut s, &mut hello).unwrap();
        let Hs::Hello {
            client,
            server,
            nonce,
        } = wire::decode_hs(HsKind::Hello, &hello).unwrap()
        else {
            unreachable!()
        };
        assert_eq!((client, server), (0, 1));
        let mine = [9u8; 32];
        let t = Transcript {
            client_nonce: &nonce,
            server_nonce: &mine,
            client,
            server,
            job: JOB.as_bytes(),
        };
        let proof = auth::proof(&Secret::from_bytes([0x22; 32]), Side::Server, &t);
        s.write_all(&wire::encode_hs(&Hs::Challenge { nonce: mine, proof }))
            .unwrap();
        // The client must not answer with a proof of its own.
        closed_by_peer(&mut s)
    });
    b.send(1, &[b"secret data"], 0).unwrap();
    let mut g = Got::default();
    let t = std::time::Instant::now();
    while g.failed.is_empty() {
        progress_into(&mut b, &mut g);
        b.wait(Duration::from_millis(5));
        assert!(t.elapsed() < GUARD, "hang guard");
    }
    assert!(h.join().unwrap(), "the impostor was disconnected");
    assert_eq!(g.failed, vec![1]);
    assert!(g.frags.is_empty());
}

#[test]
fn silent_garbage_and_lying_connections_are_dropped() {
    let mut cfg = cfg();
    cfg.handshake_timeout = Duration::from_millis(400);
    let (mut b0, mut b2, _f) = server_and_peer(&cfg);
    let mut g0 = Got::default();
    let to = addr_of(&b0);
    let key = Secret::from_bytes(KEY);
    let mut raw: Vec<TcpStream> = Vec::new();
    // Silent.
    raw.push(TcpStream::connect(to).unwrap());
    // Garbage.
    let mut s = TcpStream::connect(to).unwrap();
    s.write_all(&[0xA5; 200]).unwrap();
    raw.push(s);
    // Half a HELLO, then silence.
    let mut s = TcpStream::connect(to).unwrap();
    s.write_all(
        &wire::encode_hs(&Hs::Hello {
            client: 1,
            server: 0,
            nonce: [0; 32],
        })[..20],
    )
    .unwrap();
    raw.push(s);
    // A HELLO for another rank, one from a rank that is no tcp peer, one
    // from an out-of-range rank.
    for (client, server) in [(1, 2), (0, 0), (77, 0)] {
        let mut s = TcpStream::connect(to).unwrap();
        s.write_all(&wire::encode_hs(&Hs::Hello {
            client,
            server,
            nonce: [0; 32],
        }))
        .unwrap();
        raw.push(s);
    }
    // A wrong wire version.
    let mut s = TcpStream::connect(to).unwrap();
    let mut h = wire::encode_hs(&Hs::Hello {
        client: 1,
        server: 0,
        nonce: [0; 32],
    });
    h[8] = 2;
    s.write_all(&h).unwrap();
    raw.push(s);
    // Meanwhile the real peer is served.
    still_serves(&mut b0, &mut g0, &mut b2, b"while under attack");
    let h = std::thread::spawn(move || raw.iter_mut().all(closed_by_peer));
    pump_while(&mut b0, &mut g0, || !h.is_finished());
    assert!(h.join().unwrap(), "every hostile connection was closed");
    let t = std::time::Instant::now();
    while b0.handshakes_in_progress() > 0 {
        progress_into(&mut b0, &mut g0);
        b0.wait(Duration::from_millis(5));
        assert!(t.elapsed() < GUARD, "hang guard");
    }
    assert_eq!(g0.frags.len(), 1);
    assert!(g0.failed.is_empty(), "{g0:?}");
    still_serves(&mut b0, &mut g0, &mut b2, b"after the attack");
    // An authenticated raw client still gets in.
    let (s, v) = with_server(&mut b0, &mut g0, move || {
        raw_handshake(to, 1, 0, &key).unwrap()
    });
    assert_eq!(v, Some(Verdict::Welcome));
    drop(s);
    close_all(vec![b0, b2]);
}

/// Authenticate as rank 1, then write `bytes`; with `eof`, end the stream
/// (no goodbye), else wait for the server to close the connection.
fn authenticated_then(b0: &mut TcpBtl, g0: &mut Got, bytes: Vec<u8>, eof: bool) {
    let to = addr_of(b0);
    let key = Secret::from_bytes(KEY);
    let (s, v) = with_server(b0, g0, move || raw_handshake(to, 1, 0, &key).unwrap());
    assert_eq!(v, Some(Verdict::Welcome));
    let h = std::thread::spawn(move || {
        let mut s = s;
        // The server may close (and reset) at the first bad byte.
        let _ = s.write_all(&bytes);
        if eof {
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
        closed_by_peer(&mut s)
    });
    pump_while(b0, g0, || !h.is_finished());
    assert!(h.join().unwrap(), "the server closed the connection");
    let t = std::time::Instant::now();
    while g0.failed.is_empty() {
        progress_into(b0, g0);
        b0.wait(Duration::from_millis(5));
        assert!(t.elapsed() < GUARD, "hang guard");
    }
}

fn frame(kind: FrameKind, payload: &[u8]) -> Vec<u8> {
    let mut v = wire::frame_header(kind, payload.len()).to_vec();
    v.extend_from_slice(payload);
    v
}

#[test]
fn malformed_frames_after_authentication_fail_only_that_peer() {
    let cfg = cfg();
    let max = cfg.max_frag;
    // (what, bytes, end the stream after them)
    let mut cases: Vec<(&str, Vec<u8>, bool)> = Vec::new();
    let mut too_long = frame(FrameKind::Data, b"ok");
    too_long.extend_from_slice(&((max + 1) as u32).to_le_bytes());
    too_long.extend_from_slice(&[1, 0, 0, 0]);
    cases.push(("length over max_frag", too_long, false));
    let mut bad_kind = frame(FrameKind::Data, b"ok");
    bad_kind.extend_from_slice(&[0, 0, 0, 0, 9, 0, 0, 0]);
    cases.push(("unknown kind", bad_kind, false));
    let mut reserved = frame(FrameKind::Data, b"ok");
    reserved.extend_from_slice(&[1, 0, 0, 0, 1, 0, 7, 0]);
    cases.push(("reserved bytes", reserved, false));
    let mut fat_goodbye = frame(FrameKind::Data, b"ok");
    fat_goodbye.extend_from_slice(&[3, 0, 0, 0, 2, 0, 0, 0, 1, 2, 3]);
    cases.push(("goodbye with payload", fat_goodbye, false));
    let mut truncated = frame(FrameKind::Data, b"ok");
    truncated.extend_from_slice(&frame(FrameKind::Data, &[5; 1000])[..500]);
    cases.push(("truncated frame then end of stream", truncated, true));
    // A streamed frame is handed up while it arrives: its end missing is
    // a failure all the same.
    let mut truncated_stream = frame(FrameKind::Data, b"ok");
    truncated_stream.extend_from_slice(&frame(FrameKind::Stream, &vec![6; 64 << 10])[..20 << 10]);
    cases.push((
        "truncated streamed frame then end of stream",
        truncated_stream,
        true,
    ));
    cases.push((
        "end of stream without goodbye",
        frame(FrameKind::Data, b"ok"),
        true,
    ));
    for (what, bytes, eof) in cases {
        let (mut b0, mut b2, _f) = server_and_peer(&cfg);
        let mut g0 = Got::default();
        authenticated_then(&mut b0, &mut g0, bytes, eof);
        assert_eq!(g0.failed, vec![1], "{what}");
        assert_eq!(
            g0.frags,
            vec![(1, b"ok".to_vec())],
            "{what}: the good frame came first"
        );
        assert!(
            b0.send(1, &[b"x"], 0).is_err(),
            "{what}: sends to the failed peer fail"
        );
        still_serves(&mut b0, &mut g0, &mut b2, what.as_bytes());
        assert_eq!(g0.failed, vec![1], "{what}: reported once");
        close_all(vec![b0, b2]);
    }
}

#[test]
fn goodbye_then_end_of_stream_is_not_a_failure() {
    let (mut b0, b2, _f) = server_and_peer(&cfg());
    let mut g0 = Got::default();
    let to = addr_of(&b0);
    let key = Secret::from_bytes(KEY);
    let (s, v) = with_server(&mut b0, &mut g0, move || {
        raw_handshake(to, 1, 0, &key).unwrap()
    });
    assert_eq!(v, Some(Verdict::Welcome));
    let mut bytes = frame(FrameKind::Data, b"bye now");
    bytes.extend_from_slice(&frame(FrameKind::Goodbye, &[]));
    let h = std::thread::spawn(move || {
        let mut s = s;
        s.write_all(&bytes).unwrap();
        drop(s);
    });
    let t = std::time::Instant::now();
    while !b0.peer_finished(1) || !h.is_finished() {
        progress_into(&mut b0, &mut g0);
        b0.wait(Duration::from_millis(5));
        assert!(t.elapsed() < GUARD, "hang guard");
    }
    h.join().unwrap();
    // Let the end of stream be read too.
    for _ in 0..20 {
        progress_into(&mut b0, &mut g0);
        b0.wait(Duration::from_millis(5));
    }
    assert_eq!(g0.frags, vec![(1, b"bye now".to_vec())]);
    assert!(g0.failed.is_empty(), "{g0:?}");
    close_all(vec![b0, b2]);
}

fn fuzz_case(bytes: Vec<u8>) -> Result<(), TestCaseError> {
    let cfg = cfg();
    let (mut b0, b2, _f) = server_and_peer(&cfg);
    let mut g0 = Got::default();
    authenticated_then(&mut b0, &mut g0, bytes.clone(), true);
    prop_assert_eq!(&g0.failed, &vec![1 as Rank]);
    // Whatever was delivered is a prefix of well-formed frames of the input.
    let mut off = 0;
    for (peer, data) in &g0.frags {
        prop_assert_eq!(*peer, 1);
        let h: [u8; 8] = bytes[off..off + 8].try_into().unwrap();
        let (kind, len) = wire::decode_frame_header(&h, cfg.max_frag).unwrap();
        prop_assert_eq!(kind, FrameKind::Data);
        prop_assert_eq!(&bytes[off + 8..off + 8 + len], &data[..]);
        off += 8 + len;
    }
    close_all(vec![b0, b2]);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_after_authentication_never_panic(
        good in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..4),
        tail in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = Vec::new();
        for g in &good {
            bytes.extend_from_slice(&frame(FrameKind::Data, g));
        }
        bytes.extend_from_slice(&tail);
        fuzz_case(bytes)?;
    }
}
