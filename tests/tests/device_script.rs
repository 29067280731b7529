//! The GPU check of `tests/device` (the programs and `run.sh` the device
//! machine runs) in its quick form (np 2, sizes up to 1 MiB, no performance
//! part) against `tests/c/fake_libcuda.c`, a host-memory stand-in for
//! `libcuda.so.1` that gmpi's real CUDA backend and the test programs both
//! load through `LD_LIBRARY_PATH`. gmpi then classifies the fake's pointers
//! as device memory, so its device paths run: eager through pinned bounce
//! buffers, CUDA IPC above the limit and the fallback when the peer cannot
//! open the handle (the fake's memory is private to a process), the staged
//! rendezvous with IPC off, collectives with device
//! temporaries and CPU reductions (the fake has no kernels). Every byte is
//! checked by the programs; here every step must pass (the mixed host/device
//! collectives with `GMPI_COLL_SHM=false`, every reduction type and op, the
//! Rust bandwidth program), the fake must report no misuse (unknown pointers,
//! leaks of allocations, pinned buffers, streams, contexts or IPC mappings),
//! and `$OUT` must hold the three files the device machine can return.

use gmpi_tests::{output_text as text, repo};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fake driver (`gmpi_tests::fake_cuda_driver`) in its own directory.
fn fake_driver_dir() -> PathBuf {
    let dir = gmpi_tests::target_dir().join("device-script-fake");
    gmpi_tests::fake_cuda_driver(&dir);
    dir
}

/// A carry folder as `tests/device/build.sh` makes it, from the test
/// prefix: `prefix` (a link), `bin/dt_*` built with its `gmpicc`, and the
/// Rust API scenario `bin/gmpi-cuda` and bandwidth `bin/gmpi-cuda-bw`.
fn carry() -> PathBuf {
    let prefix = gmpi_tests::capi_prefix();
    let carry = gmpi_tests::target_dir().join("device-script-carry");
    let _ = std::fs::remove_dir_all(&carry);
    std::fs::create_dir_all(carry.join("bin")).expect("carry dir");
    std::os::unix::fs::symlink(prefix, carry.join("prefix")).expect("link prefix");
    let src = repo().join("tests/device");
    for p in [
        "p2p",
        "coll",
        "ops",
        "realloc",
        "kinds",
        "ctx_first",
        "bufid",
    ] {
        let o = Command::new(prefix.join("bin/gmpicc"))
            .args(["-O1", "-Wall", "-Wextra", "-Werror"])
            .args(["-Wno-unused-parameter", "-Wno-unused-function"])
            .arg(src.join(format!("{p}.c")))
            .arg("-o")
            .arg(carry.join(format!("bin/dt_{p}")))
            .arg("-ldl")
            .output()
            .expect("run gmpicc");
        assert!(o.status.success(), "building {p}.c:\n{}", text(&o));
    }
    // One-sided communication on device memory, as build.sh builds it.
    let capi_c = repo().join("capi/tests/c");
    let o = Command::new(prefix.join("bin/gmpicc"))
        .args(["-O1", "-std=c99", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", capi_c.display()))
        .arg(capi_c.join("rma_device.c"))
        .arg("-o")
        .arg(carry.join("bin/dt_rma_device"))
        .output()
        .expect("run gmpicc");
    assert!(o.status.success(), "building rma_device.c:\n{}", text(&o));
    // The Rust API scenario and bandwidth, as build.sh copies them.
    std::fs::copy(env!("CARGO_BIN_EXE_gmpi-cuda"), carry.join("bin/gmpi-cuda"))
        .expect("copy gmpi-cuda");
    std::fs::copy(
        env!("CARGO_BIN_EXE_gmpi-cuda-bw"),
        carry.join("bin/gmpi-cuda-bw"),
    )
    .expect("copy gmpi-cuda-bw");
    carry
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn quick_device_check_passes_against_the_fake_driver() {
    let fake = fake_driver_dir();
    let carry = carry();
    let out = gmpi_tests::target_dir().join("device-script-out");
    let _ = std::fs::remove_dir_all(&out);
    let o = Command::new("bash")
        .arg(repo().join("tests/device/run.sh"))
        .arg(&carry)
        .arg("1")
        .env("OUT", &out)
        .env("LD_LIBRARY_PATH", &fake)
        .env("DEVICE_BUDGET_S", "240")
        .env_remove("GMPI_LOG")
        .output()
        .expect("run run.sh");
    let steps = read(&out.join("steps.tsv"));
    // The device machine returns at most 8 files: run.sh leaves three, the
    // logs in one archive.
    let mut files: Vec<String> = std::fs::read_dir(&out)
        .expect("out")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["logs.tar.gz", "steps.tsv", "summary.md"], "{steps}");
    let unpacked = gmpi_tests::target_dir().join("device-script-logs");
    let _ = std::fs::remove_dir_all(&unpacked);
    std::fs::create_dir_all(&unpacked).expect("logs dir");
    let x = Command::new("tar")
        .arg("-xzf")
        .arg(out.join("logs.tar.gz"))
        .arg("-C")
        .arg(&unpacked)
        .output()
        .expect("run tar");
    assert!(x.status.success(), "unpacking the logs: {}", text(&x));
    let logs: Vec<(String, String)> = std::fs::read_dir(unpacked.join("logs"))
        .expect("logs")
        .map(|e| {
            let p = e.expect("entry").path();
            (p.display().to_string(), read(&p))
        })
        .filter(|(p, _)| !p.ends_with("machine.txt"))
        .collect();
    let all_logs = || {
        logs.iter()
            .map(|(p, l)| format!("=== {p}\n{l}"))
            .collect::<String>()
    };
    assert!(
        o.status.success(),
        "run.sh:\n{}\n{steps}\n{}",
        text(&o),
        all_logs()
    );
    // Every step ran and passed: the doctor, and the correctness steps.
    let rows: Vec<Vec<&str>> = steps
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect())
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    for want in [
        "info-doctor",
        "p2p-np2",
        "p2p-np2-staged",
        "p2p-np2-mixed",
        "coll-np2",
        "coll-np2-mixed-noshm",
        "ops-np2",
        "realloc-np2",
        "kinds-np2",
        "ctx-first-np2",
        "bufid-np2",
        "rust-api-np2",
        "rust-bw-np2",
        "protocols",
        "protocols-staged",
        "rma-device-np2",
    ] {
        assert!(names.contains(&want), "no step {want}:\n{steps}");
    }
    for r in &rows {
        assert_eq!(r[1], "ok", "step {}:\n{steps}\n{}", r[0], all_logs());
        if r[0] == "rust-api-np2" {
            // The Rust scenario prints its own verdict, one line per rank.
            let l = read(&unpacked.join("logs/rust-api-np2.log"));
            assert_eq!(l.matches("gmpi-cuda: OK on rank ").count(), 2, "{l}");
        } else if r[0] == "rust-bw-np2" {
            // A bandwidth row for every size 8 B .. 1 MiB, then the verdict.
            let l = read(&unpacked.join("logs/rust-bw-np2.log"));
            let rows = l
                .lines()
                .filter(|x| x.starts_with(|c: char| c.is_ascii_digit()))
                .count();
            assert!(rows == 18 && l.contains("gmpi-cuda-bw: OK"), "{l}");
        } else if r[0] != "info-doctor" {
            assert!(
                r[3].contains("np=2:")
                    && r[3].ends_with(" 0 failed")
                    && !r[3].contains(" 0 passed"),
                "step {}: {:?}",
                r[0],
                r[3]
            );
        }
    }
    for (p, l) in &logs {
        assert!(
            !l.contains("fake-cuda: ERROR") && !l.contains("panicked"),
            "{p}:\n{l}"
        );
        if !p.ends_with("info-doctor.log") {
            // Each rank loaded the fake (gmpi and the program share it) and
            // reported, with everything freed.
            let reports = l
                .lines()
                .filter(|x| x.starts_with("fake-cuda: alloc"))
                .count();
            assert_eq!(reports, 2, "{p}:\n{l}");
        }
    }
    // gmpi really took its device paths: the eager copy through pinned
    // memory below the limit; above it CUDA IPC, which the fake cannot open
    // in another process, so the receiver falls back to the streamed
    // rendezvous, staged from device memory; with IPC off, the staged
    // rendezvous from the start.
    let protocols = read(&unpacked.join("logs/protocols.log"));
    for want in [
        "eager/cuda-copy",
        "rndv/cuda-ipc",
        "falling back to rndv/staged",
    ] {
        assert!(protocols.contains(want), "no {want}:\n{protocols}");
    }
    let staged = read(&unpacked.join("logs/protocols-staged.log"));
    assert!(
        staged.contains("rndv/staged") && !staged.contains("rndv/cuda-ipc"),
        "{staged}"
    );
    let summary = read(&out.join("summary.md"));
    assert!(
        summary.contains("| p2p-np2 | ok |")
            && summary.contains("Correctness steps failed: 0; skipped or cut for time: 0")
            && summary.contains("\nGPU: "),
        "{summary}"
    );
}
