//! Helpers shared by the integration tests: groups of `TcpBtl`s on
//! 127.0.0.1, deterministic payloads, a driver that pumps btls until a
//! condition holds (with a hang guard), and a raw handshake client.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use gmpi_btl::{Btl, Event, Rank};
use gmpi_btl_tcp::auth::{self, Side, Transcript};
use gmpi_btl_tcp::wire::{self, Hs, HsKind, Verdict};
use gmpi_btl_tcp::{Secret, TcpBtl, TcpConfig};

pub const KEY: [u8; 32] = [0x5a; 32];
pub const JOB: &str = "test-job";
/// Hang guard for every pump.
pub const GUARD: Duration = Duration::from_secs(60);

pub fn cfg() -> TcpConfig {
    let mut c = TcpConfig::new(Secret::from_bytes(KEY), JOB);
    c.interfaces = Some("127.0.0.0/8".into());
    c
}

/// `n` btls (ranks 0..n) that know each other's cards.
pub fn group(n: u32, cfg: &TcpConfig) -> Vec<TcpBtl> {
    let mut v: Vec<TcpBtl> = (0..n)
        .map(|r| TcpBtl::bind(r, n, cfg.clone()).unwrap())
        .collect();
    let cards: Vec<String> = v.iter().map(|b| b.card()).collect();
    for (r, b) in v.iter_mut().enumerate() {
        for (p, c) in cards.iter().enumerate() {
            if p != r {
                b.add_peer(p as Rank, c).unwrap();
            }
        }
    }
    v
}

/// Deterministic payload of `len` bytes for fragment `seq` from `src`; the
/// first 8 bytes (when they fit) carry `src` and `seq`.
pub fn payload(src: Rank, seq: u32, len: usize) -> Vec<u8> {
    let mut x = (u64::from(src) << 32 | u64::from(seq)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    if len >= 8 {
        v[..4].copy_from_slice(&src.to_le_bytes());
        v[4..8].copy_from_slice(&seq.to_le_bytes());
    }
    v
}

/// What one btl reported.
#[derive(Debug, Default)]
pub struct Got {
    pub frags: Vec<(Rank, Vec<u8>)>,
    pub failed: Vec<Rank>,
    /// A streamed fragment being read (`Event::FragStream`).
    pub partial: Option<(Rank, Vec<u8>)>,
}

impl Got {
    pub fn from(&self, peer: Rank) -> usize {
        self.frags.iter().filter(|f| f.0 == peer).count()
    }
}

pub fn progress_into(b: &mut TcpBtl, got: &mut Got) -> usize {
    b.progress(&mut |e| match e {
        Event::Frag { peer, data } => got.frags.push((peer, data.to_vec())),
        Event::FragStream {
            peer,
            len,
            taken,
            body,
            ..
        } => {
            let (from, v) = got.partial.get_or_insert_with(|| (peer, Vec::new()));
            assert_eq!((*from, v.len()), (peer, taken), "streamed fragment resumed");
            let at = v.len();
            v.resize(len, 0);
            let n = body.read(&mut v[at..]);
            v.truncate(at + n);
            if v.len() == len {
                let done = got.partial.take().expect("partial");
                got.frags.push(done);
            }
        }
        Event::PeerFailed { peer } => got.failed.push(peer),
        other => panic!("unexpected event {other:?}"),
    })
}

/// Progress every btl until `done` holds; panics after [`GUARD`].
pub fn pump(btls: &mut [TcpBtl], gots: &mut [Got], mut done: impl FnMut(&[Got]) -> bool) {
    let t = Instant::now();
    while !done(gots) {
        let mut n = 0;
        for (b, g) in btls.iter_mut().zip(gots.iter_mut()) {
            n += progress_into(b, g);
        }
        if n == 0 {
            std::thread::yield_now();
        }
        assert!(
            t.elapsed() < GUARD,
            "hang guard: condition not reached in {GUARD:?}"
        );
    }
}

/// Progress `b` while `busy` holds (e.g. a helper thread is running).
pub fn pump_while(b: &mut TcpBtl, got: &mut Got, mut busy: impl FnMut() -> bool) {
    let t = Instant::now();
    while busy() {
        progress_into(b, got);
        b.wait(Duration::from_millis(2));
        assert!(t.elapsed() < GUARD, "hang guard");
    }
}

/// A hand-driven client: connects to `to` as rank `me` asking for rank
/// `server`, proving with `key`. Returns the stream and the verdict, or
/// `None` when the server closed the connection during the handshake.
pub fn raw_handshake(
    to: SocketAddr,
    me: Rank,
    server: Rank,
    key: &Secret,
) -> std::io::Result<(TcpStream, Option<Verdict>)> {
    let mut s = TcpStream::connect(to)?;
    s.set_read_timeout(Some(GUARD))?;
    let nonce = auth::nonce().unwrap();
    s.write_all(&wire::encode_hs(&Hs::Hello {
        client: me,
        server,
        nonce,
    }))?;
    let mut ch = [0u8; wire::CHALLENGE_LEN];
    if s.read_exact(&mut ch).is_err() {
        return Ok((s, None));
    }
    let Hs::Challenge {
        nonce: theirs,
        proof: _,
    } = wire::decode_hs(HsKind::Challenge, &ch).unwrap()
    else {
        unreachable!()
    };
    let t = Transcript {
        client_nonce: &nonce,
        server_nonce: &theirs,
        client: me,
        server,
        job: JOB.as_bytes(),
    };
    let proof = auth::proof(key, Side::Client, &t);
    s.write_all(&wire::encode_hs(&Hs::Proof { proof }))?;
    let mut v = [0u8; wire::VERDICT_LEN];
    if s.read_exact(&mut v).is_err() {
        return Ok((s, None));
    }
    match wire::decode_hs(HsKind::Verdict, &v).unwrap() {
        Hs::Verdict(v) => Ok((s, Some(v))),
        _ => unreachable!(),
    }
}

/// Whether the server closed `s` (end of stream or reset), reading and
/// discarding whatever comes first.
pub fn closed_by_peer(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// Close every btl at once, each on its own thread, the way ranks finalize
/// together (a lone close waits for its peers' goodbyes up to the linger).
pub fn close_all(btls: Vec<TcpBtl>) {
    let hs: Vec<_> = btls
        .into_iter()
        .map(|mut b| std::thread::spawn(move || b.close()))
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}
