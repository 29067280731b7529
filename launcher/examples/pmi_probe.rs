//! pmi_probe: a tiny PMI client for gmpirun's tests (and a first thing to run by hand).
//!
//! `gmpirun -np 4 pmi_probe [MODE]`: every rank connects with `PmiClient::from_env`,
//! puts `rank-<r>` (plus a 10 KB `big-<r>` that is split across keys), fences, reads
//! every other rank's keys back, checks them and prints `OK rank <r> of <n>`, then
//! finalizes. Modes:
//! - (none): as above.
//! - `abort N`: rank 1 calls PMI abort with code N after the put, then hangs (the
//!   launcher must end it); the other ranks wait in the fence.
//! - `nofinalize`: as normal, but rank 1 exits 0 without finalizing.
//! - `singleton`: expects to run without a PMI launcher (`from_env` gives `None`).

use gmpi_pmi::{PmiClient, PmiError};

fn big(rank: u32) -> String {
    (0..10_000)
        .map(|i| char::from(b'a' + ((i + rank as usize) % 26) as u8))
        .collect()
}

fn run(args: &[String]) -> Result<(), PmiError> {
    let mode = args.first().map(String::as_str).unwrap_or("");
    let Some(mut pmi) = PmiClient::from_env()? else {
        if mode == "singleton" {
            println!("OK singleton");
            return Ok(());
        }
        return Err(PmiError::Env("not started by a PMI launcher".to_owned()));
    };
    let (rank, size) = (pmi.rank(), pmi.size());
    pmi.put(&format!("rank-{rank}"), &format!("hello-from-{rank}"))?;
    pmi.put(&format!("big-{rank}"), &big(rank))?;
    if mode == "abort" && rank == 1 {
        let code = args.get(1).and_then(|c| c.parse().ok()).unwrap_or(1);
        pmi.abort(code, "pmi_probe was asked to abort")?;
        // Hang like a stuck rank would: gmpirun must end us.
        std::thread::sleep(std::time::Duration::from_secs(30));
        return Ok(());
    }
    pmi.fence()?;
    for peer in (0..size).filter(|&p| p != rank) {
        let got = pmi.get(&format!("rank-{peer}"))?;
        if got != format!("hello-from-{peer}") {
            return Err(PmiError::Protocol(format!("rank-{peer} holds {got}")));
        }
        if pmi.get(&format!("big-{peer}"))? != big(peer) {
            return Err(PmiError::Protocol(format!(
                "big-{peer} came back different"
            )));
        }
    }
    println!("OK rank {rank} of {size}");
    if mode == "nofinalize" && rank == 1 {
        return Ok(());
    }
    pmi.finalize()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("pmi_probe: {e}");
        std::process::exit(1);
    }
}
