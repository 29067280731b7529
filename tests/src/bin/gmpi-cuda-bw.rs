//! `gmpirun -np 2 gmpi-cuda-bw [MAX [VOLUME]]`: point-to-point bandwidth of the Rust
//! API between `cudarc` device slices, the Rust counterpart of
//! `gb_bw -d cuda D D`. Rank 0 sends a window of 8 `isend`s of a
//! `CudaSlice<u8>` view, rank 1 receives them with `irecv` into 8
//! `CudaViewMut`s, then sends a one-byte acknowledgement; sizes double from
//! 8 B to MAX bytes (default 64 MiB; `K`/`M`/`G` suffixes), about VOLUME
//! bytes timed per size (default 256 MiB; 4 to 200 windows) after two
//! warm-up windows. The last window's bytes are checked. Prints gb_bw's table
//! (`# Size Bandwidth(MB/s)`, one row per size, MB = 10^6 B) on rank 0, then
//! "gmpi-cuda-bw: OK"; exits 1 naming the failure otherwise. Other ranks
//! only take part in the barriers.

use gmpi::cudarc::driver::{CudaContext, CudaSlice, DriverError};
use gmpi::Communicator;
use gmpi_tests::pattern;

const WINDOW: usize = 8;

fn d(x: DriverError) -> String {
    format!("cuda: {x:?}")
}

fn e(x: gmpi::Error) -> String {
    x.to_string()
}

fn parse_size(s: &str) -> Option<usize> {
    let (num, shift) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 10),
        b'm' | b'M' => (&s[..s.len() - 1], 20),
        b'g' | b'G' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    num.parse::<usize>().ok().map(|n| n << shift)
}

/// Windows timed at `size`: about `volume` bytes, between 4 and 200 windows.
fn iterations(size: usize, volume: usize) -> usize {
    (volume / (size * WINDOW)).clamp(4, 200)
}

fn run(
    w: &Communicator,
    ctx: &std::sync::Arc<CudaContext>,
    max: usize,
    volume: usize,
) -> Result<(), String> {
    let r = w.rank();
    let s = ctx.default_stream();
    // Rank 0's send buffer, rank 1's WINDOW receive buffers, all of MAX bytes.
    let out: Option<CudaSlice<u8>> = if r == 0 {
        Some(s.clone_htod(&pattern(max, 0, 1)).map_err(d)?)
    } else {
        None
    };
    let mut bufs: Vec<CudaSlice<u8>> = Vec::new();
    if r == 1 {
        for _ in 0..WINDOW {
            bufs.push(s.alloc_zeros::<u8>(max).map_err(d)?);
        }
    }
    if r == 0 {
        println!(
            "# gmpi-cuda-bw: ranks {}, window {WINDOW}, CudaSlice<u8> -> CudaViewMut<u8>",
            w.size()
        );
        println!("# Size      Bandwidth(MB/s)");
    }
    let mut size = 8;
    while size <= max {
        w.barrier().map_err(e)?;
        let iters = iterations(size, volume);
        let mut t0 = std::time::Instant::now();
        for it in 0..iters + 2 {
            if it == 2 {
                t0 = std::time::Instant::now();
            }
            if r == 0 {
                let v = out.as_ref().expect("rank 0's buffer").slice(..size);
                let reqs = (0..WINDOW)
                    .map(|_| w.isend(&v, 1, 1))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(e)?;
                gmpi::wait_all(reqs).map_err(e)?;
                let mut ack = [0u8; 1];
                w.recv(&mut ack[..], 1, 2).map_err(e)?;
            } else if r == 1 {
                let mut views: Vec<_> = bufs.iter_mut().map(|b| b.slice_mut(..size)).collect();
                let reqs = views
                    .iter_mut()
                    .map(|v| w.irecv(v, 0, 1))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(e)?;
                gmpi::wait_all(reqs).map_err(e)?;
                w.send(&[0u8][..], 0, 2).map_err(e)?;
            }
        }
        let t = t0.elapsed().as_secs_f64();
        if r == 0 {
            let mb = (size * WINDOW * iters) as f64 / t / 1e6;
            println!("{size:<10} {mb:>14.2}");
        } else if r == 1 {
            let want = pattern(max, 0, 1);
            for (k, b) in bufs.iter().enumerate() {
                let got = s.clone_dtoh(&b.slice(..size)).map_err(d)?;
                if got[..] != want[..size] {
                    return Err(format!("{size} B: receive buffer {k} holds wrong bytes"));
                }
            }
        }
        size *= 2;
    }
    w.barrier().map_err(e)
}

fn main() {
    let arg = |i: usize, default: usize| match std::env::args().nth(i) {
        None => default,
        Some(a) => match parse_size(&a) {
            Some(n) if n >= 8 => n,
            _ => {
                eprintln!(
                    "usage: gmpi-cuda-bw [MAX [VOLUME]]   (bytes, at least 8; K/M/G suffixes)"
                );
                std::process::exit(2);
            }
        },
    };
    let (max, volume) = (arg(1, 64 << 20), arg(2, 256 << 20));
    let u = match gmpi::init() {
        Ok(u) => u,
        Err(x) => {
            eprintln!("gmpi-cuda-bw: init: {x}");
            std::process::exit(1);
        }
    };
    let w = u.world();
    let r = w.rank();
    if w.size() < 2 {
        eprintln!("gmpi-cuda-bw: needs at least 2 ranks");
        std::process::exit(1);
    }
    let res = CudaContext::new(0)
        .map_err(|x| format!("CudaContext::new(0): {x:?}"))
        .and_then(|ctx| run(&w, &ctx, max, volume));
    match res {
        Ok(()) => {
            if r == 0 {
                println!("gmpi-cuda-bw: OK");
            }
            drop(u);
        }
        Err(msg) => {
            eprintln!("gmpi-cuda-bw: FAILED on rank {r}: {msg}");
            std::process::exit(1);
        }
    }
}
