//! `LAUNCHER -n N gmpi-pmi-probe`: exercises gmpi's PMI-1 client against whatever PMI
//! server started it (gmpirun, MPICH's Hydra, Slurm's `srun --mpi=pmi2`), without the
//! rest of the runtime: the handshake, values of every length class (empty, one byte,
//! just under and over the server's `vallen_max` and the 1024-byte line limit of MPICH's
//! and Slurm's PMI-1 readers, many kilobytes: split transparently), several fences, a
//! missing key, finalize. Exits non-zero with a message naming the rank on any wrong
//! answer; prints `gmpi-pmi-probe OK on rank R of N (kvsname K)` otherwise.

use gmpi_pmi::{PmiClient, PmiError};

/// Value lengths tried: around every limit a server may have.
const LENGTHS: &[usize] = &[
    0, 1, 63, 64, 500, 900, 1000, 1023, 1024, 1025, 2000, 4096, 20_000,
];

/// The value rank `rank` publishes for length `len` (no `=`, no whitespace).
fn value(rank: u32, len: usize) -> String {
    (0..len)
        .map(|i| {
            let x = (i as u32).wrapping_mul(31).wrapping_add(rank * 7) % 62;
            char::from(match x {
                0..=9 => b'0' + x as u8,
                10..=35 => b'a' + (x - 10) as u8,
                _ => b'A' + (x - 36) as u8,
            })
        })
        .collect()
}

fn probe() -> Result<String, String> {
    let mut pmi = PmiClient::from_env()
        .map_err(|e| format!("PMI connect: {e}"))?
        .ok_or("not started by a PMI launcher (neither PMI_FD nor PMI_PORT is set)")?;
    let (rank, size) = (pmi.rank(), pmi.size());
    let ctx = |what: &str, e: PmiError| format!("rank {rank}: {what}: {e}");
    if pmi.kvsname().is_empty() || pmi.universe_size() < size {
        return Err(format!(
            "rank {rank}: bad job facts: kvsname {:?}, universe size {}",
            pmi.kvsname(),
            pmi.universe_size()
        ));
    }
    for round in 0..2u32 {
        for &len in LENGTHS {
            let key = format!("probe-{round}-{rank}-{len}");
            pmi.put(&key, &value(rank + round, len))
                .map_err(|e| ctx(&format!("put {key} ({len} B)"), e))?;
        }
        pmi.fence().map_err(|e| ctx("fence", e))?;
        for peer in 0..size {
            for &len in LENGTHS {
                let key = format!("probe-{round}-{peer}-{len}");
                let got = pmi.get(&key).map_err(|e| ctx(&format!("get {key}"), e))?;
                if got != value(peer + round, len) {
                    return Err(format!(
                        "rank {rank}: {key} read back wrong ({} B instead of {len})",
                        got.len()
                    ));
                }
            }
        }
    }
    match pmi.get("probe-never-put") {
        Err(PmiError::NotFound(_)) => {}
        other => return Err(format!("rank {rank}: missing key gave {other:?}")),
    }
    pmi.fence().map_err(|e| ctx("last fence", e))?;
    let kvs = pmi.kvsname().to_owned();
    pmi.finalize().map_err(|e| ctx("finalize", e))?;
    Ok(format!(
        "gmpi-pmi-probe OK on rank {rank} of {size} (kvsname {kvs})"
    ))
}

fn main() {
    match probe() {
        Ok(line) => println!("{line}"),
        Err(m) => {
            eprintln!("gmpi-pmi-probe FAILED: {m}");
            std::process::exit(1);
        }
    }
}
