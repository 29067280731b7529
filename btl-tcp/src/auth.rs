//! The job secret and the handshake proofs.
//!
//! Both ends of a connection prove that they hold the job's 32-byte secret
//! without sending it: each sends a fresh random nonce, and each answers with
//! HMAC-SHA256 keyed by the secret over a direction label, both nonces, both
//! ranks and the job id (see [`proof`]). A proof cannot be replayed on another
//! connection (the other side's nonce is fresh), reflected back (the label
//! names the direction) or moved to another pair of ranks or another job.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use gmpi_btl::Rank;

/// Bytes of the secret, of a nonce and of a proof.
pub const SECRET_LEN: usize = 32;
/// Bytes of a handshake nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of a proof (an HMAC-SHA256 tag).
pub const MAC_LEN: usize = 32;

/// A handshake nonce.
pub type Nonce = [u8; NONCE_LEN];
/// A handshake proof.
pub type Proof = [u8; MAC_LEN];

/// The per-job secret shared by every rank (32 bytes). Its `Debug` form
/// never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; SECRET_LEN]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A secret made of these bytes.
    pub fn from_bytes(b: [u8; SECRET_LEN]) -> Self {
        Self(b)
    }

    /// Parse the 64 hexadecimal digits of `GMPI_JOB_SECRET`.
    pub fn from_hex(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.len() != 2 * SECRET_LEN {
            return Err(format!(
                "expected {} hexadecimal digits, got {} characters",
                2 * SECRET_LEN,
                t.len()
            ));
        }
        let mut b = [0u8; SECRET_LEN];
        for (i, pair) in t.as_bytes().chunks(2).enumerate() {
            let digit = |c: u8| (c as char).to_digit(16);
            match (digit(pair[0]), digit(pair[1])) {
                (Some(h), Some(l)) => b[i] = (h * 16 + l) as u8,
                _ => return Err(format!("not a hexadecimal digit pair at offset {}", 2 * i)),
            }
        }
        Ok(Self(b))
    }

    /// 32 bytes from the operating system's random source.
    pub fn random() -> Result<Self, String> {
        let mut b = [0u8; SECRET_LEN];
        getrandom::fill(&mut b).map_err(|e| format!("cannot read random bytes: {e}"))?;
        Ok(Self(b))
    }

    /// The 64 lowercase hexadecimal digits (what `GMPI_JOB_SECRET` holds).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A fresh random nonce.
pub fn nonce() -> Result<Nonce, String> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).map_err(|e| format!("cannot read random bytes: {e}"))?;
    Ok(n)
}

/// Which side a proof comes from (part of what is signed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The rank that accepted the connection.
    Server,
    /// The rank that opened it.
    Client,
}

/// What both ends sign: the connection's identity.
#[derive(Debug, Clone, Copy)]
pub struct Transcript<'a> {
    /// The client's `HELLO` nonce.
    pub client_nonce: &'a Nonce,
    /// The server's `CHALLENGE` nonce.
    pub server_nonce: &'a Nonce,
    /// The connecting rank.
    pub client: Rank,
    /// The accepting rank.
    pub server: Rank,
    /// The job id.
    pub job: &'a [u8],
}

fn keyed(secret: &Secret, side: Side, t: &Transcript<'_>) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&secret.0).expect("HMAC takes any key");
    m.update(match side {
        Side::Server => b"gmpi-tcp v1 server proof\0",
        Side::Client => b"gmpi-tcp v1 client proof\0",
    });
    m.update(t.client_nonce);
    m.update(t.server_nonce);
    m.update(&t.client.to_le_bytes());
    m.update(&t.server.to_le_bytes());
    m.update(&(t.job.len() as u64).to_le_bytes());
    m.update(t.job);
    m
}

/// The proof `side` sends for this connection.
pub fn proof(secret: &Secret, side: Side, t: &Transcript<'_>) -> Proof {
    keyed(secret, side, t).finalize().into_bytes().into()
}

/// Whether `got` is the proof `side` must send (constant-time comparison).
pub fn verify(secret: &Secret, side: Side, t: &Transcript<'_>, got: &Proof) -> bool {
    keyed(secret, side, t).verify_slice(got).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_errors() {
        let s = Secret::random().unwrap();
        assert_eq!(Secret::from_hex(&s.to_hex()).unwrap(), s);
        assert_eq!(format!("{s:?}"), "Secret(..)");
        assert!(Secret::from_hex("abc").is_err());
        assert!(Secret::from_hex(&"g".repeat(64)).is_err());
        assert!(Secret::from_hex(&"é".repeat(32)).is_err());
        let upper = "AB".repeat(32);
        assert_eq!(Secret::from_hex(&upper).unwrap().0, [0xab; 32]);
    }

    #[test]
    fn proofs_bind_everything() {
        let k = Secret::from_bytes([7; 32]);
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let t = Transcript {
            client_nonce: &a,
            server_nonce: &b,
            client: 3,
            server: 5,
            job: b"job1",
        };
        let p = proof(&k, Side::Client, &t);
        assert!(verify(&k, Side::Client, &t, &p));
        assert!(!verify(&k, Side::Server, &t, &p), "direction is signed");
        assert!(!verify(&Secret::from_bytes([8; 32]), Side::Client, &t, &p));
        for t2 in [
            Transcript { client: 4, ..t },
            Transcript { server: 6, ..t },
            Transcript { job: b"job2", ..t },
            Transcript {
                client_nonce: &b,
                ..t
            },
            Transcript {
                server_nonce: &a,
                ..t
            },
        ] {
            assert!(!verify(&k, Side::Client, &t2, &p));
        }
    }
}
