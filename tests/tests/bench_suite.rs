//! The C benchmark suite (`bench/suite`) built with gmpi's `gmpicc` and run
//! once per program at tiny iteration counts with `-c`, so that every byte of
//! every message is checked: a correctness smoke of the suite and of the
//! library under it, with no timing assertion. Also the suite's CUDA
//! plumbing (`-d cuda`, the driver API loaded with `dlopen`) against
//! `tests/c/fake_libcuda.c`, a host-memory stand-in for `libcuda.so.1`, and
//! its error paths (no driver, bad options).

use gmpi_tests::{output_text as text, repo};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The suite built once per test binary with the prefix's `gmpicc`.
fn suite() -> &'static Path {
    static S: OnceLock<PathBuf> = OnceLock::new();
    S.get_or_init(|| {
        let prefix = gmpi_tests::capi_prefix();
        let build = gmpi_tests::target_dir().join("bench-suite");
        let o = Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(repo().join("bench/suite"))
            .arg(format!("MPICC={}", prefix.join("bin/gmpicc").display()))
            .arg(format!("BUILD={}", build.display()))
            .output()
            .expect("run make");
        assert!(
            o.status.success(),
            "building bench/suite failed:\n{}",
            text(&o)
        );
        build
    })
}

/// `gmpirun -np NP gb_PROG ARGS...` with a time limit.
fn run(np: usize, prog: &str, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let bin = suite().join(format!("gb_{prog}"));
    let mut c = Command::new(gmpi_tests::capi_prefix().join("bin/gmpirun"));
    c.args(["--timeout", "120", "-np", &np.to_string()])
        .arg(&bin)
        .args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("spawn gmpirun")
}

/// The data rows (non-comment lines) of a benchmark's output, parsed.
fn rows(o: &Output) -> Vec<Vec<f64>> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .map(|w| {
                    w.parse::<f64>()
                        .unwrap_or_else(|_| panic!("not a number: {w:?} in {l:?}"))
                })
                .collect()
        })
        .collect()
}

/// Runs PROG with validation and checks the header, the size column and that
/// every figure is a finite number, times positive (a bandwidth of a few bytes
/// in a slow debug build may print as 0.00 MB/s).
fn smoke(np: usize, prog: &str, args: &[&str], sizes: &[f64], columns: usize) -> Output {
    let mut a = vec!["-c", "-i", "3:2", "-x", "1:1"];
    a.extend_from_slice(args);
    let o = run(np, prog, &a, &[]);
    assert!(
        o.status.success(),
        "gb_{prog} {a:?} at np {np}:\n{}",
        text(&o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with(&format!("# gmpi-bench {prog}\n# MPI: gmpi")),
        "gb_{prog}: header\n{out}"
    );
    assert!(
        out.contains(", validating"),
        "gb_{prog}: -c not echoed\n{out}"
    );
    let r = rows(&o);
    let got: Vec<f64> = r.iter().map(|row| row[0]).collect();
    assert_eq!(got, sizes, "gb_{prog} at np {np}: size column\n{out}");
    for row in &r {
        assert_eq!(row.len(), columns, "gb_{prog}: columns in {row:?}\n{out}");
        assert!(
            row[1..].iter().all(|v| v.is_finite() && *v >= 0.0)
                && (row[1] > 0.0 || prog.contains("bw") || prog == "mbw_mr"),
            "gb_{prog}: figures in {row:?}\n{out}"
        );
    }
    o
}

fn pow2(lo: u32, hi: u32) -> Vec<f64> {
    (lo..=hi).map(|k| f64::from(1u32 << k)).collect()
}

#[test]
fn point_to_point_programs_validate_every_byte() {
    let mut lat = vec![0.0];
    lat.extend(pow2(0, 17));
    smoke(2, "latency", &["-m", "0:131072"], &lat, 2);
    // A third rank only joins the barriers.
    smoke(3, "latency", &["-m", "1:64"], &pow2(0, 6), 2);
    smoke(2, "bw", &["-m", "1:131072", "-W", "8"], &pow2(0, 17), 2);
    smoke(2, "bibw", &["-m", "1:131072", "-W", "8"], &pow2(0, 17), 2);
    smoke(4, "mbw_mr", &["-m", "1:65536", "-W", "4"], &pow2(0, 16), 3);
}

#[test]
fn collective_programs_validate_every_byte() {
    for np in [2, 3] {
        smoke(np, "barrier", &[], &[0.0], 4);
        smoke(np, "bcast", &["-m", "1:65536"], &pow2(0, 16), 4);
        smoke(np, "reduce", &["-m", "4:65536"], &pow2(2, 16), 4);
        smoke(np, "allreduce", &["-m", "4:65536"], &pow2(2, 16), 4);
        smoke(np, "allgather", &["-m", "1:16384"], &pow2(0, 14), 4);
        smoke(np, "alltoall", &["-m", "1:16384"], &pow2(0, 14), 4);
        for v in [
            "gather",
            "gatherv",
            "scatter",
            "scatterv",
            "allgatherv",
            "alltoallv",
        ] {
            smoke(np, v, &["-m", "1:16384"], &pow2(0, 14), 4);
        }
        for v in ["reduce_scatter", "reduce_scatter_block"] {
            smoke(np, v, &["-m", "4:16384"], &pow2(2, 14), 4);
        }
        smoke(
            np,
            "iallreduce",
            &["-m", "4:16384", "-t", "2"],
            &pow2(2, 14),
            5,
        );
    }
}

#[test]
fn init_and_hello_report_every_rank() {
    let o = run(3, "init", &[], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let r = rows(&o);
    assert_eq!(r.len(), 1, "{}", text(&o));
    assert_eq!(r[0][0], 3.0);
    assert!(
        r[0][1] >= r[0][2] && r[0][2] >= r[0][3] && r[0][3] > 0.0,
        "{r:?}"
    );
    let o = run(3, "hello", &[], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for r in 0..3 {
        assert!(
            out.contains(&format!("hello from rank {r} of 3 on ")),
            "{out}"
        );
    }
}

/// `tests/c/fake_libcuda.c` built as a shared library (`gmpi_tests::fake_cuda_driver`).
fn fake_libcuda() -> &'static Path {
    static L: OnceLock<PathBuf> = OnceLock::new();
    L.get_or_init(|| {
        let dir = gmpi_tests::target_dir().join("bench-suite-fake-cuda");
        gmpi_tests::fake_cuda_driver(&dir);
        dir.join("libcuda.so.1")
    })
}

/// The fake driver's per-process report lines.
fn fake_reports(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.contains("fake-cuda: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn cuda_placement_goes_through_the_driver_api() {
    let lib = fake_libcuda().to_str().expect("utf-8 path").to_string();
    let env = [("GB_LIBCUDA", lib.as_str())];
    // (ranks, program, options, ranks whose buffers are on the "device")
    let cases: [(usize, &str, &[&str], usize); 4] = [
        (2, "latency", &["-d", "cuda", "-m", "1:4096"], 2),
        (
            2,
            "bw",
            &["-d", "cuda", "D", "H", "-m", "1:4096", "-W", "4"],
            1,
        ),
        (2, "latency", &["-d", "managed", "H", "M", "-m", "8:8"], 1),
        (3, "allreduce", &["-d", "cuda", "-m", "4:4096"], 3),
    ];
    for (np, prog, args, device_ranks) in cases {
        let mut a = vec!["-c", "-i", "3", "-x", "1"];
        a.extend_from_slice(args);
        let o = run(np, prog, &a, &env);
        assert!(o.status.success(), "gb_{prog} {a:?}:\n{}", text(&o));
        let reports = fake_reports(&o);
        assert!(
            reports
                .iter()
                .all(|l| !l.contains("ERROR") && l.ends_with("errors 0")),
            "gb_{prog} {a:?}: driver misuse\n{}",
            text(&o)
        );
        // Every rank loads the driver before MPI_Init (as applications set up
        // CUDA first); each rank with a device or managed side allocated
        // there, copied its data in and out for the checks, and freed it all.
        assert_eq!(reports.len(), np, "gb_{prog} {a:?}:\n{}", text(&o));
        let mut used = 0;
        for l in &reports {
            let n: Vec<u64> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            let [alloc, free, htod, dtoh, _memset, _errors] = n[..] else {
                panic!("report {l:?}");
            };
            assert_eq!(alloc, free, "{l}");
            if alloc > 0 {
                assert!(htod + dtoh > 0, "no copies through the driver: {l}");
                used += 1;
            }
        }
        assert_eq!(used, device_ranks, "gb_{prog} {a:?}:\n{}", text(&o));
    }
}

#[test]
fn cuda_placement_without_a_driver_fails_clearly() {
    let o = run(
        2,
        "latency",
        &["-d", "cuda", "-m", "8:8"],
        &[("GB_LIBCUDA", "/nonexistent/libcuda.so.1")],
    );
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("-d cuda: cannot load the CUDA driver (/nonexistent/libcuda.so.1)"),
        "{}",
        text(&o)
    );
}

#[test]
fn bad_options_are_refused_with_usage() {
    let bin = suite().join("gb_latency");
    for args in [
        &["-m", "64:8"][..],
        &["-i", "0"],
        &["-d", "gpu"],
        &["-d", "cuda", "X", "D"],
        &["-W", "4"],
        &["--bogus"],
    ] {
        let o = Command::new(&bin)
            .args(args)
            .output()
            .expect("run gb_latency");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("gb_latency: "),
            "{args:?}: {}",
            text(&o)
        );
    }
    let o = Command::new(&bin)
        .arg("-h")
        .output()
        .expect("run gb_latency");
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("usage: gb_latency"));
}
