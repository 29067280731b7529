//! `gmpirun -np N gmpi-cuda-copyerr`, over `tests/c/fake_libcuda.c` with
//! `FAKE_CUDA_FAIL_DTOH_BYTES=1004` (and, optionally, `FAKE_CUDA_FAIL_RANK=R`):
//! an allreduce of 251 `u32`s (1004 B) of device memory, which takes the
//! shared-memory area, whose copy out of the GPU fails on every rank (or on
//! rank R alone). The call must return `MPI_ERR_OTHER` on every rank, not
//! panic and not hang: the rank whose copy failed names the call, itself,
//! the bytes and the driver call; the others name the rank that failed.
//! Then the communicator must still work: a host allreduce and a device
//! allreduce of another size, results checked.
//!
//! Prints "gmpi-cuda-copyerr: OK on rank R of N" on success; exits 1
//! naming what went wrong otherwise. Run under `tests/tests/cuda_fake.rs`.

use gmpi::cudarc::driver::{CudaContext, DriverError};
use gmpi::{Communicator, ErrorClass, Op};

type R = Result<(), String>;

/// Elements of the allreduce whose copy fails (1004 B, a size nothing else
/// copies).
const COUNT: usize = 251;

fn e(x: gmpi::Error) -> String {
    x.to_string()
}

fn d(x: DriverError) -> String {
    format!("cuda: {x:?}")
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

fn run(w: &Communicator) -> R {
    let bytes = std::env::var("FAKE_CUDA_FAIL_DTOH_BYTES").unwrap_or_default();
    ensure!(
        bytes == (COUNT * 4).to_string(),
        "FAKE_CUDA_FAIL_DTOH_BYTES must be {}, not {bytes:?}",
        COUNT * 4
    );
    let failing: Option<i32> = match std::env::var("FAKE_CUDA_FAIL_RANK") {
        Ok(v) => Some(
            v.parse()
                .map_err(|_| format!("FAKE_CUDA_FAIL_RANK={v:?}"))?,
        ),
        Err(_) => None,
    };
    let (r, n) = (w.rank(), w.size());
    let ctx = CudaContext::new(0).map_err(d)?;
    let s = ctx.default_stream();

    let sb = s.clone_htod(&vec![r as u32 + 1; COUNT]).map_err(d)?;
    let mut rb = s.alloc_zeros::<u32>(COUNT).map_err(d)?;
    let err = match w.allreduce(&sb, &mut rb, Op::Sum) {
        Ok(()) => return Err("the allreduce whose device copy failed succeeded".into()),
        Err(x) => x,
    };
    ensure!(err.class() == ErrorClass::Other, "not MPI_ERR_OTHER: {err}");
    let m = err.message();
    let parts = match failing {
        Some(f) if f != r => vec![
            "MPI_Allreduce".to_string(),
            format!("rank {f} could not copy its data out of device memory"),
            format!("on rank {r}"),
        ],
        _ => vec![
            "MPI_Allreduce".to_string(),
            "copying 1004 B out of device memory".to_string(),
            "cuMemcpyDtoH_v2".to_string(),
            format!("on rank {r}"),
        ],
    };
    for p in parts {
        ensure!(m.contains(&p), "the error does not name {p:?}: {err}");
    }

    // The communicator still works.
    let want = (1..=n as u32).sum::<u32>();
    let mut total = 0u32;
    w.allreduce(&(r as u32 + 1), &mut total, Op::Sum)
        .map_err(e)?;
    ensure!(
        total == want,
        "host allreduce after the error: {total}, expected {want}"
    );
    let sb = s.clone_htod(&vec![r as u32 + 1; COUNT + 1]).map_err(d)?;
    let mut rb = s.alloc_zeros::<u32>(COUNT + 1).map_err(d)?;
    w.allreduce(&sb, &mut rb, Op::Sum).map_err(e)?;
    let got = s.clone_dtoh(&rb).map_err(d)?;
    ensure!(
        got.iter().all(|&x| x == want),
        "device allreduce after the error: {:?}…, expected {want}",
        &got[..4]
    );
    w.barrier().map_err(e)
}

fn main() {
    let u = match gmpi::init() {
        Ok(u) => u,
        Err(x) => {
            eprintln!("gmpi-cuda-copyerr: init: {x}");
            std::process::exit(1);
        }
    };
    let w = u.world();
    let (r, n) = (w.rank(), w.size());
    match run(&w) {
        Ok(()) => {
            println!("gmpi-cuda-copyerr: OK on rank {r} of {n}");
            drop(u);
        }
        Err(msg) => {
            eprintln!("gmpi-cuda-copyerr: FAILED on rank {r} of {n}: {msg}");
            std::process::exit(1);
        }
    }
}
