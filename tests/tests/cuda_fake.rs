//! The Rust API on `cudarc` device buffers (`CudaSlice`, `CudaView`,
//! `CudaViewMut`) in real gmpirun jobs, over `tests/c/fake_libcuda.c` as
//! `libcuda.so` (host memory posing as device memory, every call checked):
//! `gmpi-cuda` at 2 and 4 ranks. Asserts that every rank passed, that the
//! fake saw no misuse or leak ("fake-cuda: ERROR"), and, from
//! `GMPI_LOG=pml=debug`, that the device protocols carried the messages.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use gmpi_tests::{output_text, repo, run, target_dir};

const BIN: &str = env!("CARGO_BIN_EXE_gmpi-cuda");

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
    let dir = fake_dir().to_str().expect("utf-8 path").to_string();
    let mut envs = vec![
        ("LD_LIBRARY_PATH", dir.as_str()),
        ("GMPI_CUDA", "on"),
        ("GMPI_LOG", "pml=debug"),
    ];
    envs.extend_from_slice(extra);
    let nps = np.to_string();
    let out = run(&["--timeout", "240", "-np", &nps, BIN], &envs);
    let text = output_text(&out);
    assert!(
        out.status.success(),
        "gmpi-cuda at np {np} {extra:?} failed:\n{text}"
    );
    let so = String::from_utf8_lossy(&out.stdout);
    let oks = so
        .lines()
        .filter(|l| l.contains("gmpi-cuda: OK on rank "))
        .count();
    assert_eq!(
        oks, np,
        "gmpi-cuda at np {np}: {oks} ranks reported OK\n{text}"
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
    // cudarc's event tracking ran on the second stream.
    assert!(
        log.contains("fake-cuda: streams 1 events"),
        "np {np}: no second stream"
    );
}

/// Same-node device messages above the eager limit try CUDA IPC first; the
/// fake's handles open only in the process that made them (as memory of
/// another process is unreachable), so every such message must fall back.
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

/// Without IPC, the staged (pipelined through pinned memory) protocol.
#[test]
fn cuda_slices_staged_without_ipc() {
    let log = job(2, &[("GMPI_GPU_IPC", "false")]);
    expect(2, &log, &["eager/cuda-copy", "rndv/staged"]);
    assert!(!log.contains("rndv/cuda-ipc"), "IPC was off");
}
