//! `gmpi-classify-bench [--cost-ns N] [--iters N]`
//!
//! What classifying a buffer costs per call (the work every send, receive
//! and collective does on each of its buffers when CUDA is loaded), over the
//! gpu layer's test double with a modelled driver call of `--cost-ns` (300
//! by default: a `cuPointerGetAttributes` takes a few hundred nanoseconds):
//!
//! - `off`: no CUDA (`GMPI_CUDA=off`): one branch, the floor;
//! - `host, cached`: a host buffer seen before (the lock-free host table);
//! - `host, no cache`: the same with `GMPI_GPU_HOST_CACHE=off` (one driver
//!   query per call: what every host buffer cost before the cache);
//! - `device, cached`: a device buffer seen before (the device table; no
//!   driver call);
//! - `device, re-checked`: [`gmpi_gpu::Gpu::info`], what an IPC export
//!   costs (a driver call re-checks the buffer id).
//!
//! The bound is host-memory latency with CUDA loaded within
//! 0.02 µs of `GMPI_CUDA=off`: compare `host, cached` with `off`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gmpi_gpu::double::TestCuda;
use gmpi_gpu::{Gpu, GpuConfig};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse().unwrap_or_else(|_| {
                eprintln!("gmpi-classify-bench: {name} wants a number, got {v:?}");
                std::process::exit(2)
            })
        })
        .unwrap_or(default)
}

/// Nanoseconds per call of `f`, the best of 5 rounds of `iters`.
fn per_call(iters: u64, mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let cost = Duration::from_nanos(arg("--cost-ns", 300));
    let iters = arg("--iters", 2_000_000);
    let slow_iters = (iters / 100).max(1000);
    let host = [0u8; 64];
    let h = host.as_ptr() as u64;

    let off = Gpu::host_only("GMPI_CUDA=off");
    let cuda = Arc::new(TestCuda::new(1).with_call_cost(cost));
    let cached = Gpu::with_api(cuda.clone(), GpuConfig::default());
    let uncached = Gpu::with_api(
        cuda.clone(),
        GpuConfig {
            host_cache: false,
            ..GpuConfig::default()
        },
    );
    let d = cuda.malloc(1 << 20, 0);

    let rows = [
        (
            "off",
            per_call(iters, || {
                black_box(off.classify(black_box(h), 8)).ok();
            }),
        ),
        (
            "host, cached",
            per_call(iters, || {
                black_box(cached.classify(black_box(h), 8)).ok();
            }),
        ),
        (
            "host, no cache",
            per_call(slow_iters, || {
                black_box(uncached.classify(black_box(h), 8)).ok();
            }),
        ),
        (
            "device, cached",
            per_call(iters, || {
                black_box(cached.classify(black_box(d + 64), 8)).ok();
            }),
        ),
        (
            "device, re-checked",
            per_call(slow_iters, || {
                black_box(cached.info(black_box(d + 64))).ok();
            }),
        ),
    ];
    println!(
        "# classification per call, driver call modelled at {} ns",
        cost.as_nanos()
    );
    println!("# {:<20} {:>10} {:>14}", "case", "ns/call", "vs off (ns)");
    let floor = rows[0].1;
    for (name, ns) in rows {
        println!("  {name:<20} {ns:>10.2} {:>+14.2}", ns - floor);
    }
}
