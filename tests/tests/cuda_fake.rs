//! The Rust API on `cudarc` device buffers (`CudaSlice`, `CudaView`,
//! `CudaViewMut`) in real gmpirun jobs, over `tests/c/fake_libcuda.c` as
//! `libcuda.so` (host memory posing as device memory, every call checked):
//! `gmpi-cuda` at 2 and 4 ranks; `gmpi-cuda-mixed` (every collective with
//! device memory on some ranks and host memory on the others) at 2, 3 and 4
//! ranks, and its repeated device collectives, whose device allocations
//! must not grow with the number of calls; `gmpi-cuda-copyerr`, whose
//! device copy the fake fails, at 2 and 3 ranks. Asserts that every rank passed,
//! that the fake saw no misuse or leak ("fake-cuda: ERROR"), and, from
//! `GMPI_LOG=pml=debug`, that the device protocols carried the messages.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use gmpi_tests::{output_text, repo, run, target_dir};

const BIN: &str = env!("CARGO_BIN_EXE_gmpi-cuda");
const MIXED: &str = env!("CARGO_BIN_EXE_gmpi-cuda-mixed");
const COPYERR: &str = env!("CARGO_BIN_EXE_gmpi-cuda-copyerr");

/// A directory holding the fake driver as `libcuda.so` and `libcuda.so.1`
/// (the names `cudarc` tries), built once per test binary.
fn fake_dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let dir = target_dir().join("fake-cuda-rust-api");
        std::fs::create_dir_all(&dir).expect("create the fake driver's directory");
        for name in ["libcuda.so", "libcuda.so.1"] {
            let o = Command::new("cc")
                .args(["-shared", "-fPIC", "-O1", "-o"])
                .arg(dir.join(name))
                .arg(repo().join("tests/c/fake_libcuda.c"))
                .output()
                .expect("run cc");
            assert!(
                o.status.success(),
                "building the fake libcuda failed:\n{}",
                output_text(&o)
            );
        }
        dir
    })
}

fn job(np: usize, extra: &[(&str, &str)]) -> String {
    job_of(BIN, 240, np, &[], extra)
}

/// Run `bin ARGS` at `np` ranks over the fake driver with `GMPI_CUDA=on`,
/// `GMPI_LOG=pml=debug` and `extra`, ended by gmpirun after `timeout` s;
/// assert that every rank passed and the fake saw no misuse; the job's
/// stderr.
fn job_of(bin: &str, timeout: u32, np: usize, args: &[&str], extra: &[(&str, &str)]) -> String {
    let dir = fake_dir().to_str().expect("utf-8 path").to_string();
    let mut envs = vec![
        ("LD_LIBRARY_PATH", dir.as_str()),
        ("GMPI_CUDA", "on"),
        ("GMPI_LOG", "pml=debug"),
    ];
    envs.extend_from_slice(extra);
    let (nps, ts) = (np.to_string(), timeout.to_string());
    let mut argv = vec!["--timeout", &ts, "-np", &nps, bin];
    argv.extend_from_slice(args);
    let out = run(&argv, &envs);
    let text = output_text(&out);
    let name = Path::new(bin)
        .file_name()
        .map_or(bin.into(), |f| f.to_string_lossy());
    assert!(
        out.status.success(),
        "{name} {args:?} at np {np} {extra:?} failed:\n{text}"
    );
    let so = String::from_utf8_lossy(&out.stdout);
    let ok = format!("{name}: OK on rank ");
    let oks = so.lines().filter(|l| l.contains(&ok)).count();
    assert_eq!(
        oks, np,
        "{name} {args:?} at np {np}: {oks} ranks reported OK\n{text}"
    );
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !se.contains("fake-cuda: ERROR"),
        "the fake driver saw misuse:\n{text}"
    );
    let reports = se
        .lines()
        .filter(|l| l.contains("fake-cuda: alloc "))
        .count();
    assert_eq!(
        reports, np,
        "every rank loaded the fake driver and reported:\n{text}"
    );
    se
}

fn expect(np: usize, log: &str, paths: &[&str]) {
    for path in paths {
        assert!(log.contains(path), "np {np}: the log never names {path:?}");
    }
    // cudarc's event tracking ran on a second stream (and gmpi's staging
    // copies on streams of their own).
    let streams = log
        .lines()
        .filter_map(|l| l.split("fake-cuda: streams ").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .max();
    assert!(streams.is_some_and(|n| n >= 1), "np {np}: no second stream");
}

/// Same-node device messages above the eager limit try CUDA IPC first; the
/// fake's handles open in no process (not in their exporter, as with CUDA,
/// and its memory is unreachable from another), so every such message must
/// fall back.
#[test]
fn cuda_slices_through_the_rust_api_np2_np4() {
    for np in [2, 4] {
        let log = job(np, &[]);
        expect(
            np,
            &log,
            &[
                "eager/cuda-copy",
                "rndv/cuda-ipc",
                "falling back to rndv/staged",
            ],
        );
    }
}

/// Where the device has memory pools, `cudarc` allocates every `CudaSlice`
/// with `cuMemAllocAsync`, which legacy CUDA IPC cannot export: the sender
/// copies it device to device into a staging buffer of its own (`cuMemAlloc`)
/// and exports that. The fake cannot open a handle in another process, so
/// the receiver still falls back to the stream; the fake's exit report
/// checks that every staging buffer was freed (at `MPI_Finalize`).
#[test]
fn cuda_slices_from_memory_pools_export_through_a_staging_buffer() {
    let log = job(2, &[("FAKE_CUDA_MEMORY_POOLS", "1")]);
    expect(
        2,
        &log,
        &[
            "rndv/cuda-ipc",
            "exported through a device staging buffer",
            "falling back to rndv/staged",
        ],
    );
}

/// Without IPC, the staged (pipelined through pinned memory) protocol:
/// over shared memory the receiver pulls each staged chunk by get.
#[test]
fn cuda_slices_staged_without_ipc() {
    let log = job(2, &[("GMPI_GPU_IPC", "false")]);
    expect(
        2,
        &log,
        &[
            "eager/cuda-copy",
            "rndv/staged",
            "staging 1048576 B in 2 chunks of 524288 B for its get",
        ],
    );
    assert!(!log.contains("rndv/cuda-ipc"), "IPC was off");
}

/// Over tcp (no get) the staged chunks go in the transport's fragments,
/// each chunk as soon as it is staged.
#[test]
fn cuda_slices_staged_over_tcp() {
    let log = job(2, &[("GMPI_BTL", "self,tcp")]);
    expect(
        2,
        &log,
        &[
            "rndv/staged",
            "staging 1048576 B in 2 chunks of 524288 B sent in fragments of",
        ],
    );
}

/// Collectives whose ranks pass different memory kinds (device on the even
/// ranks and host on the odd ones, then the reverse): every rank must take
/// the same road (a rank whose choice went by its own buffers alone sent
/// its peers down different paths, and the job hung in its first small
/// collective). At 2, 3 and 4 ranks, every collective, every root.
#[test]
fn collectives_with_host_and_device_ranks_np2_np3_np4() {
    for np in [2, 3, 4] {
        job_of(MIXED, 120, np, &[], &[]);
    }
}

/// Device allocations a job made, per rank, from the fake's exit reports
/// ("fake-cuda: alloc A free F ...").
fn allocs(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.split("fake-cuda: alloc ").nth(1))
        .map(|rest| {
            rest.split_whitespace()
                .next()
                .and_then(|a| a.parse().ok())
                .expect("an allocation count")
        })
        .collect()
}

/// Collectives on device buffers make their device temporaries once and
/// reuse them: 5 and 60 calls make the same number of device allocations
/// (each call allocated its own before), all freed by the end (the fake
/// reports a leak as an ERROR).
#[test]
fn repeated_device_collectives_reuse_their_temporaries() {
    let np = 2;
    let few = allocs(&job_of(MIXED, 120, np, &["repeat", "5"], &[]));
    let many = allocs(&job_of(MIXED, 120, np, &["repeat", "60"], &[]));
    assert_eq!(few.len(), np, "a report per rank: {few:?}");
    assert_eq!(
        few, many,
        "device allocations per rank grew with the number of collectives: 5 calls {few:?}, 60 calls {many:?}"
    );
}

/// A copy out of device memory that fails inside a collective
/// (`FAKE_CUDA_FAIL_DTOH_BYTES`: the fake's `cuMemcpyDtoH_v2` of that size
/// fails) is the call's `MPI_ERR_OTHER` on every rank, not a panic that
/// ends the job: on every rank at once, then on rank 1 alone, whose peers
/// fail naming it instead of waiting for it or using its missing data. The
/// job goes on after it (the binary checks all of that and reports OK).
#[test]
fn a_failed_device_copy_is_an_mpi_error_not_a_panic() {
    let fail = ("FAKE_CUDA_FAIL_DTOH_BYTES", "1004");
    for np in [2, 3] {
        job_of(COPYERR, 60, np, &[], &[fail]);
        job_of(COPYERR, 60, np, &[], &[fail, ("FAKE_CUDA_FAIL_RANK", "1")]);
    }
}
