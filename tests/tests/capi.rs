//! The C ABI (`libmpi.so.12`) with real clients nobody here wrote against
//! gmpi: C programs built by MPICH's own `mpicc` and run unmodified on
//! gmpi's library, the same programs built with `gmpicc`, Fortran through
//! `gmpif90`, mpi4py's wheel, rsmpi, CMake's FindMPI, and the header/export
//! checks against MPICH's header.
//!
//! Every test lays out (once) a prefix with `install.sh --no-build` from the
//! build tree. The external tools come from `.ci/run` (Debian's
//! `libmpich-dev`, `gfortran`, `cmake`, `libclang-dev`; a Python venv with
//! mpi4py and numpy at `$GMPI_PYTHON`). A test whose tool is missing fails,
//! saying what to install, unless `GMPI_CAPI_ALLOW_MISSING=1` (then it says
//! loudly that it was skipped).

use gmpi_tests::{output_text as text, repo};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The prefix laid out from this build (`target/<profile>/capi-prefix`).
fn prefix() -> &'static Path {
    gmpi_tests::capi_prefix()
}

/// Whether `tool` is on PATH; if not, fail (or skip loudly when allowed).
fn have(tool: &str, package: &str) -> bool {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    present(ok, tool, package)
}

/// `ok`; if `what` (from `package`) is missing, fail, or skip loudly when
/// `GMPI_CAPI_ALLOW_MISSING=1`.
fn present(ok: bool, what: &str, package: &str) -> bool {
    if !ok {
        assert!(
            std::env::var("GMPI_CAPI_ALLOW_MISSING").as_deref() == Ok("1"),
            "{what} is missing: install {package} (as .ci/run does), or set GMPI_CAPI_ALLOW_MISSING=1 to skip"
        );
        eprintln!("SKIPPED: {what} is not installed ({package}); this test did not run");
    }
    ok
}

/// A scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = gmpi_tests::target_dir()
        .join("capi-tests")
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn compile(cc: &str, src: &Path, out: &Path, extra: &[&str]) {
    // In the output's directory: gfortran writes module files to the cwd.
    let o = Command::new(cc)
        .current_dir(out.parent().expect("output directory"))
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg(src)
        .output()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(
        o.status.success(),
        "{cc} {} failed:\n{}",
        src.display(),
        text(&o)
    );
}

/// Run `prog` on `np` ranks under gmpirun with the prefix's library first.
fn run(prog: &Path, np: usize, envs: &[(&str, &str)]) -> Output {
    let lib = prefix().join("lib");
    let mut c = Command::new(prefix().join("bin/gmpirun"));
    c.args(["--timeout", "120", "-np", &np.to_string()])
        .arg(prog)
        .env("LD_LIBRARY_PATH", &lib);
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("spawn gmpirun")
}

const C_TESTS: [&str; 14] = [
    "p2p",
    "coll",
    "types",
    "comms",
    "errors",
    "largecount",
    "largecount_coll",
    "largecount_type",
    "persistent_coll",
    "partitioned",
    "rma",
    "sessions",
    "threads",
    "serialized",
];

/// Build the C test programs with `cc` and run each at every `nps`.
fn c_suite(cc: &str, flags: &[&str], tag: &str, nps: &[usize]) {
    let dir = scratch(tag);
    let src = repo().join("capi/tests/c");
    for t in C_TESTS {
        let exe = dir.join(t);
        compile(cc, &src.join(format!("{t}.c")), &exe, flags);
        for &np in nps {
            let o = run(&exe, np, &[]);
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success() && out.contains(&format!("OK {t} np={np}")),
                "{t} built by {cc} at np {np}:\n{}",
                text(&o)
            );
        }
    }
}

#[test]
fn c_programs_built_by_mpich_mpicc_run_on_gmpi() {
    if !have("mpicc.mpich", "libmpich-dev") {
        return;
    }
    // The binaries ask for libmpich.so.12; gmpi's lib/ provides it first.
    c_suite(
        "mpicc.mpich",
        &["-std=c99", "-O2"],
        "mpich-cc",
        &[1, 2, 3, 4],
    );
}

#[test]
fn c_programs_built_by_gmpicc() {
    let cc = prefix().join("bin/gmpicc");
    c_suite(
        cc.to_str().expect("utf-8 path"),
        &["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror"],
        "gmpicc",
        &[1, 3],
    );
}

#[test]
fn c_unit_programs_of_each_area() {
    let dir = scratch("unit");
    let cc = prefix().join("bin/gmpicc");
    let src = repo().join("capi/tests/c");
    let mut files: Vec<PathBuf> = std::fs::read_dir(src.join("unit"))
        .expect("capi/tests/c/unit")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "unit programs: {files:?}");
    let inc = format!("-I{}", src.display());
    for f in files {
        let name = f.file_stem().unwrap().to_string_lossy().into_owned();
        let exe = dir.join(&name);
        compile(cc.to_str().unwrap(), &f, &exe, &["-std=c99", "-O1", &inc]);
        for np in [1, 3] {
            let o = run(&exe, np, &[]);
            assert!(
                o.status.success() && String::from_utf8_lossy(&o.stdout).contains("OK"),
                "{name} at np {np}:\n{}",
                text(&o)
            );
        }
    }
}

/// `type_layout.c` prints the size, bounds, struct padding, packed size
/// and received count/elements of every predefined C datatype: gmpi's lines
/// must be MPICH's (built with `mpicc.mpich`, run on MPICH by
/// `mpiexec.hydra -n 1`, then on gmpi), and its MINLOC/MAXLOC checks on the
/// padded pair types must pass.
#[test]
fn datatype_layout_matches_mpich() {
    if !have("mpicc.mpich", "libmpich-dev") || !have("mpiexec.hydra", "mpich") {
        return;
    }
    let dir = scratch("type-layout");
    let exe = dir.join("type_layout");
    let src = repo().join("capi/tests/c/type_layout.c");
    compile("mpicc.mpich", &src, &exe, &["-std=c99", "-O1"]);
    let m = Command::new("timeout")
        .args(["120", "mpiexec.hydra", "-n", "1"])
        .arg(&exe)
        .output()
        .expect("run mpiexec.hydra");
    assert!(m.status.success(), "on MPICH:\n{}", text(&m));
    let g = run(&exe, 1, &[]);
    assert!(g.status.success(), "on gmpi:\n{}", text(&g));
    let (m, g) = (
        String::from_utf8_lossy(&m.stdout),
        String::from_utf8_lossy(&g.stdout),
    );
    assert!(g.contains("OK type_layout"), "on gmpi:\n{g}");
    // Known gap: gmpi counts the basic elements of the types it moves as
    // bytes (long double, complex, the padded pairs) in bytes, so
    // MPI_Get_elements is compared only for the others.
    const BYTE_SIGNATURE: [&str; 9] = [
        "MPI_LONG_DOUBLE ",
        "MPI_C_FLOAT_COMPLEX",
        "MPI_C_DOUBLE_COMPLEX",
        "MPI_C_LONG_DOUBLE_COMPLEX",
        "MPI_C_COMPLEX",
        "MPI_DOUBLE_INT",
        "MPI_LONG_INT",
        "MPI_SHORT_INT",
        "MPI_LONG_DOUBLE_INT",
    ];
    let strip = |l: &str| -> String {
        if BYTE_SIGNATURE.iter().any(|n| l.starts_with(n)) {
            l.split(" elements ").next().unwrap_or(l).to_string()
        } else {
            l.to_string()
        }
    };
    let diff: Vec<String> = m
        .lines()
        .zip(g.lines())
        .filter(|(a, b)| strip(a) != strip(b))
        .map(|(a, b)| format!("mpich: {a}\ngmpi:  {b}"))
        .collect();
    assert!(
        diff.is_empty() && m.lines().count() == g.lines().count(),
        "gmpi's datatype layout differs from MPICH's:\n{}",
        diff.join("\n")
    );
}

#[test]
fn fatal_error_ends_the_job_with_a_message() {
    let dir = scratch("fatal");
    let exe = dir.join("fatal");
    let cc = prefix().join("bin/gmpicc");
    compile(
        cc.to_str().unwrap(),
        &repo().join("capi/tests/c/fatal.c"),
        &exe,
        &[],
    );
    let o = run(&exe, 2, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the job must fail:\n{}", text(&o));
    assert!(
        err.contains("MPI_Send") && err.contains("rank") && err.contains("MPI_ERR_RANK"),
        "the message names the call, the rank and the class:\n{}",
        text(&o)
    );
}

/// One-sided communication on GPU memory (`capi/tests/c/rma_device.c`:
/// windows of `MPI_Win_create` over device buffers, host and device origin
/// buffers, fence, locks, accumulate, fetch-and-op, compare-and-swap) over
/// the fake driver in its shared-IPC mode, where CUDA IPC maps device
/// memory across processes as on a GPU: every rank's window on the device
/// at np 1 to 3, even ranks' only at np 2 and 3; and without cross-process
/// IPC, the creation fails on every rank, saying why.
#[test]
fn rma_on_device_memory_over_the_fake_driver() {
    let dir = scratch("rma-device");
    let fake = dir.join("fake-cuda");
    // One driver instance for the program's dlopen and gmpi's.
    gmpi_tests::fake_cuda_driver(&fake);
    let exe = dir.join("rma_device");
    let src = repo().join("capi/tests/c");
    compile(
        prefix().join("bin/gmpicc").to_str().expect("utf-8 path"),
        &src.join("rma_device.c"),
        &exe,
        &[
            "-std=c99",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            &format!("-I{}", src.display()),
        ],
    );
    let path = format!("{}:{}", prefix().join("lib").display(), fake.display());
    for (mixed, nps) in [("0", &[1, 2, 3][..]), ("1", &[2, 3][..])] {
        for &np in nps {
            let o = run(
                &exe,
                np,
                &[
                    ("LD_LIBRARY_PATH", &path),
                    ("GMPI_CUDA", "on"),
                    ("FAKE_CUDA_SHARED_IPC", "1"),
                    ("RMA_DEVICE_MIXED", mixed),
                ],
            );
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                o.status.success()
                    && String::from_utf8_lossy(&o.stdout)
                        .contains(&format!("OK rma_device np={np}"))
                    && !err.contains("fake-cuda: ERROR"),
                "rma_device (mixed={mixed}) at np {np}:\n{}",
                text(&o)
            );
        }
    }
    let o = run(&exe, 2, &[("LD_LIBRARY_PATH", &path), ("GMPI_CUDA", "on")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("MPI_Win_create: windows on GPU memory need CUDA IPC")
            && err.contains("MPI_ERR_UNSUPPORTED_OPERATION"),
        "a device window without CUDA IPC must fail, saying why:\n{}",
        text(&o)
    );
}

/// Run `prog` on `np` ranks with rank r on fake node `r / per_node`
/// (`GMPI_NODE_NAME`): every window spanning fake nodes then goes by
/// active messages over tcp (`runtime/src/win/am.rs`). The fake nodes
/// share this host's cores, so they get its oversubscribed back-off.
fn run_on_fake_nodes(prog: &Path, np: usize, per_node: usize, envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(prefix().join("bin/gmpirun"));
    c.args(["--timeout", "120", "-np", &np.to_string()])
        .args(gmpi_tests::fake_node_wrapper(per_node))
        .arg(prog)
        .env("LD_LIBRARY_PATH", prefix().join("lib"))
        .envs(gmpi_tests::HOST_BACKOFF)
        .envs(envs.iter().copied());
    c.output().expect("spawn gmpirun")
}

/// One-sided communication between nodes: `rma.c` (every flavor and
/// synchronisation mode, contention on one counter, passive-target progress
/// while the target computes, the errors), built by MPICH's mpicc, with one
/// rank per fake node at np 2 and 3 and two per node at np 4 (windows mix
/// ranks of one node and of others); and `rma_device.c` on device windows
/// over the fake driver without cross-process CUDA IPC, which windows
/// between nodes do not need (each target's agent copies to and from its
/// own GPU). The debug log proves the path.
#[test]
fn rma_between_nodes() {
    let dir = scratch("rma-nodes");
    let src = repo().join("capi/tests/c");
    let exe = dir.join("rma");
    let cc = if have("mpicc.mpich", "libmpich-dev") {
        "mpicc.mpich".to_string()
    } else {
        prefix().join("bin/gmpicc").display().to_string()
    };
    compile(&cc, &src.join("rma.c"), &exe, &["-std=c99", "-O2"]);
    for (np, per_node) in [(2, 1), (3, 1), (4, 2)] {
        let o = run_on_fake_nodes(&exe, np, per_node, &[("GMPI_LOG", "rma=debug")]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).contains(&format!("OK rma np={np}"))
                && err.contains("active messages")
                && err.contains("progress thread started"),
            "rma between nodes at np {np} ({per_node} per node):\n{}",
            text(&o)
        );
    }
    let fake = dir.join("fake-cuda");
    gmpi_tests::fake_cuda_driver(&fake);
    let exe = dir.join("rma_device");
    compile(
        prefix().join("bin/gmpicc").to_str().expect("utf-8 path"),
        &src.join("rma_device.c"),
        &exe,
        &["-std=c99", "-O2", &format!("-I{}", src.display())],
    );
    let path = format!("{}:{}", prefix().join("lib").display(), fake.display());
    for (mixed, np) in [("0", 2), ("1", 3)] {
        let o = run_on_fake_nodes(
            &exe,
            np,
            1,
            &[
                ("LD_LIBRARY_PATH", &path),
                ("GMPI_CUDA", "on"),
                ("RMA_DEVICE_MIXED", mixed),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).contains(&format!("OK rma_device np={np}"))
                && !err.contains("fake-cuda: ERROR"),
            "rma_device between nodes (mixed={mixed}) at np {np}:\n{}",
            text(&o)
        );
    }
}

/// `MPIX_Query_cuda_support` and `MPIX_GPU_query_support`
/// (`capi/tests/c/gpu_support.c`) answer from the loaded driver, before
/// `MPI_Init`, after it and after `MPI_Finalize`: 0 under `GMPI_CUDA=off`
/// although a driver (the fake) is there, which is then never loaded; 1
/// over the fake under `GMPI_CUDA=on` and `auto`. Built by `gmpicc` with
/// `<mpi-ext.h>` (`MPIX_CUDA_AWARE_SUPPORT`), and by MPICH's `mpicc`
/// against MPICH's header.
#[test]
fn mpix_gpu_support_queries() {
    let dir = scratch("gpu-support");
    let fake = dir.join("fake-cuda");
    gmpi_tests::fake_cuda_driver(&fake);
    let path = format!("{}:{}", prefix().join("lib").display(), fake.display());
    let src = repo().join("capi/tests/c");
    let inc = format!("-I{}", src.display());
    let gmpicc = prefix().join("bin/gmpicc");
    let mut builds = vec![(
        "gmpicc",
        gmpicc.to_str().expect("utf-8 path").to_string(),
        vec!["-std=c99", "-Wall", "-Wextra", "-Werror", "-DWITH_MPI_EXT"],
    )];
    if have("mpicc.mpich", "libmpich-dev") {
        builds.push(("mpich", "mpicc.mpich".into(), vec!["-std=c99"]));
    }
    for (tag, cc, mut flags) in builds {
        flags.push(&inc);
        let exe = dir.join(format!("gpu_support-{tag}"));
        compile(&cc, &src.join("gpu_support.c"), &exe, &flags);
        for (mode, expect) in [("off", "0"), ("on", "1"), ("auto", "1")] {
            let np = 2;
            let o = run(
                &exe,
                np,
                &[
                    ("LD_LIBRARY_PATH", &path),
                    ("GMPI_CUDA", mode),
                    ("GPU_SUPPORT_EXPECT", expect),
                ],
            );
            let what = format!("gpu_support built by {tag}, GMPI_CUDA={mode}");
            let out = String::from_utf8_lossy(&o.stdout);
            let err = String::from_utf8_lossy(&o.stderr);
            let oks = (0..np)
                .filter(|r| out.contains(&format!("OK gpu_support rank {r} cuda={expect}")))
                .count();
            assert!(
                o.status.success() && oks == np,
                "{what}: {oks} of {np} ranks OK:\n{}",
                text(&o)
            );
            assert!(
                !err.contains("fake-cuda: ERROR"),
                "{what}: driver misuse:\n{}",
                text(&o)
            );
            // The fake reports at exit in each process that initialised it.
            let loaded = err.matches("fake-cuda: alloc ").count();
            let want = if mode == "off" { 0 } else { np };
            assert_eq!(
                loaded,
                want,
                "{what}: processes that loaded the driver:\n{}",
                text(&o)
            );
        }
    }
}

#[test]
fn fortran_use_mpi_and_mpif_h() {
    if !have("gfortran", "gfortran") {
        return;
    }
    let dir = scratch("fortran");
    let fc = prefix().join("bin/gmpif90");
    let src = repo().join("capi/tests/fortran");
    for (file, name) in [("use_mpi.f90", "use_mpi"), ("mpif_h.f", "mpif_h")] {
        let exe = dir.join(name);
        compile(fc.to_str().unwrap(), &src.join(file), &exe, &[]);
        for np in [1, 3] {
            let o = run(&exe, np, &[]);
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success() && out.matches("OK ").count() >= np,
                "{name} at np {np}:\n{}",
                text(&o)
            );
        }
    }
}

#[test]
fn header_and_exports_match_the_mpich_abi() {
    if !have("mpicc.mpich", "libmpich-dev") {
        return;
    }
    let abi = repo().join("capi/tests/abi");
    let mut c = Command::new("bash");
    c.arg(abi.join("abi_check.sh"))
        .env("ABI_CHECK_REQUIRE_MPICH", "1");
    // MPI 4.1's names (not in Debian's MPICH 4.0.2 header) are checked
    // against the MPICH 5 wheel's header (.ci/run fetches it).
    if let Ok(lib) = std::env::var("GMPI_MPICH5_LIB") {
        let inc = Path::new(&lib)
            .parent()
            .and_then(Path::parent)
            .map(|d| d.join("include"));
        if let Some(inc) = inc {
            c.env("MPICH_NEXT_INC", inc);
        }
    }
    let o = c.output().expect("abi_check.sh");
    assert!(o.status.success(), "abi_check.sh:\n{}", text(&o));
    let o = Command::new("bash")
        .arg(abi.join("exports.sh"))
        .arg(prefix().join("lib/libmpi.so.12"))
        .output()
        .expect("exports.sh");
    assert!(o.status.success(), "exports.sh:\n{}", text(&o));
}

/// Every `MPI_`/`PMPI_` symbol of an MPICH `libmpi.so.12` is exported by
/// gmpi's, so any binary built against that MPICH loads: Debian's MPICH 4
/// (`libmpich.so.12`, or `$GMPI_MPICH_LIB`) always, and the MPICH 5 wheel's
/// `libmpi.so.12` when `$GMPI_MPICH5_LIB` names one (`pip download mpich`
/// and unzip the wheel; not installed here, and MPI-5's additions are not
/// all in gmpi yet).
#[test]
fn exports_every_symbol_mpich_exports() {
    if !have("mpicc.mpich", "libmpich-dev") {
        return;
    }
    let mut mpich = vec![std::env::var("GMPI_MPICH_LIB")
        .unwrap_or_else(|_| "/usr/lib/x86_64-linux-gnu/libmpich.so.12".into())];
    if let Ok(wheel) = std::env::var("GMPI_MPICH5_LIB") {
        mpich.push(wheel);
    } else {
        eprintln!("GMPI_MPICH5_LIB is not set: the MPICH 5 wheel's exports are not checked");
    }
    let mut c = Command::new("bash");
    c.arg(repo().join("capi/tests/abi/exports.sh"));
    for m in &mpich {
        c.args(["--mpich", m]);
    }
    let o = c
        .arg(prefix().join("lib/libmpi.so.12"))
        .output()
        .expect("exports.sh");
    assert!(o.status.success(), "exports.sh:\n{}", text(&o));
}

/// The MPI 4.1 calls and MPI 5.0's handle and ABI queries MPICH >= 4.1
/// exports (`capi/tests/c/mpi41.c`: status fields, error removal,
/// `MPI_Request_get_status_any/all/some`, buffers per communicator and per
/// session, flushes, `MPI_BUFFER_AUTOMATIC`, toint/fromint, the ABI
/// queries) at np 1 to 3: built by `gmpicc` (gmpi's MPI 4.0 header declares
/// none of them; the program declares them, as a binary built against a
/// newer MPICH has them), and against the MPICH 5 wheel's header and
/// library when `$GMPI_MPICH5_LIB` names its `libmpi.so.12` (`.ci/run`
/// fetches it), then run on gmpi.
#[test]
fn mpi41_calls_and_abi_queries() {
    let dir = scratch("mpi41");
    let src = repo().join("capi/tests/c");
    let inc = format!("-I{}", src.display());
    let gmpicc = prefix().join("bin/gmpicc");
    let mut builds = vec![(
        "gmpicc",
        gmpicc.to_str().expect("utf-8 path").to_string(),
        vec![
            "-std=c99".to_string(),
            "-O2".into(),
            "-Wall".into(),
            "-Wextra".into(),
            "-Werror".into(),
            inc.clone(),
        ],
    )];
    match std::env::var("GMPI_MPICH5_LIB") {
        Ok(lib) => {
            let lib = PathBuf::from(lib);
            let libdir = lib.parent().expect("the wheel's lib/").to_path_buf();
            let wheel_inc = libdir.parent().expect("the wheel's data/").join("include");
            builds.push((
                "mpich5",
                "cc".into(),
                vec![
                    "-std=c99".to_string(),
                    "-O2".into(),
                    inc.clone(),
                    format!("-I{}", wheel_inc.display()),
                    format!("-L{}", libdir.display()),
                    "-lmpi".into(),
                ],
            ));
        }
        Err(_) => eprintln!("GMPI_MPICH5_LIB is not set: mpi41.c is not built against MPICH 5"),
    }
    for (tag, cc, flags) in builds {
        let exe = dir.join(format!("mpi41-{tag}"));
        // The library comes last on the command line.
        let (libs, cflags): (Vec<&String>, Vec<&String>) = flags
            .iter()
            .partition(|f| f.starts_with("-l") || f.starts_with("-L"));
        let o = Command::new(&cc)
            .args(cflags)
            .arg("-o")
            .arg(&exe)
            .arg(src.join("mpi41.c"))
            .args(libs)
            .output()
            .unwrap_or_else(|e| panic!("run {cc}: {e}"));
        assert!(
            o.status.success(),
            "building mpi41.c ({tag}):\n{}",
            text(&o)
        );
        for np in [1, 2, 3] {
            let o = run(&exe, np, &[]);
            assert!(
                o.status.success()
                    && String::from_utf8_lossy(&o.stdout).contains(&format!("OK mpi41 np={np}")),
                "mpi41 ({tag}) at np {np}:\n{}",
                text(&o)
            );
        }
    }
}

/// Calls gmpi does not implement yet, in a program MPICH's `mpicc` built:
/// each fails with `MPI_ERR_UNSUPPORTED_OPERATION` through the right error
/// handler (`MPI_T_*` with `MPI_T_ERR_NOT_SUPPORTED`), and each process
/// names each call on stderr exactly once, though the program calls it
/// twice.
#[test]
fn unsupported_calls_fail_and_say_so_once() {
    if !have("mpicc.mpich", "libmpich-dev") {
        return;
    }
    let dir = scratch("unsupported");
    let exe = dir.join("unsupported_mpich");
    compile(
        "mpicc.mpich",
        &repo().join("capi/tests/c/unsupported_mpich.c"),
        &exe,
        &["-std=c99", "-O1"],
    );
    let np = 2;
    let o = run(&exe, np, &[]);
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("OK unsupported_mpich"),
        "unsupported_mpich at np {np}:\n{}",
        text(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    for name in [
        "MPI_T_init_thread",
        "MPI_Comm_accept",
        "MPI_Comm_connect",
        "MPI_File_read_c",
        "MPI_File_write_c",
        "MPI_Comm_spawn",
        "MPI_T_finalize",
    ] {
        let line = format!("gmpi: {name} is not supported yet (");
        let n = err.lines().filter(|l| l.contains(&line)).count();
        assert_eq!(
            n,
            np,
            "lines naming {name} (one per process):\n{}",
            text(&o)
        );
    }
}

/// The Python with mpi4py and numpy (`.ci/run` makes it).
fn python() -> Option<PathBuf> {
    let p = std::env::var_os("GMPI_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/gmpi-py/bin/python"));
    let ok = Command::new(&p)
        .args(["-c", "import mpi4py, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(p);
    }
    assert!(
        std::env::var("GMPI_CAPI_ALLOW_MISSING").as_deref() == Ok("1"),
        "no Python with mpi4py and numpy at {} (set GMPI_PYTHON; .ci/run makes one)",
        p.display()
    );
    eprintln!("SKIPPED: mpi4py is not installed; this test did not run");
    None
}

#[test]
fn mpi4py_wheel_runs_on_gmpi() {
    let Some(py) = python() else { return };
    let lib = prefix().join("lib/libmpi.so.12");
    let script = repo().join("capi/tests/mpi4py/basic.py");
    for np in [1, 2, 3] {
        let mut c = Command::new(prefix().join("bin/gmpirun"));
        c.args(["--timeout", "120", "-np", &np.to_string()])
            .arg(&py)
            .arg(&script)
            .env("MPI4PY_LIBMPI", &lib)
            .env("LD_LIBRARY_PATH", prefix().join("lib"));
        let o = c.output().expect("gmpirun");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.matches("OK mpi4py").count() == np,
            "mpi4py at np {np}:\n{}",
            text(&o)
        );
    }
}

/// Run mpi4py's own test files `files` (from its sdist, through
/// `capi/tests/mpi4py/run_suite.sh`) at each `np`, and require `expect` in
/// the summary (e.g. "228 ok, 0 failed, 0 errors").
fn mpi4py_files(tag: &str, files: &[&str], nps: &[usize], expect: &str) {
    mpi4py_files_with(tag, files, nps, expect, &[]);
}

/// [`mpi4py_files`] with `envs` for run_suite.sh (e.g. its `LAUNCHER`).
fn mpi4py_files_with(
    tag: &str,
    files: &[&str],
    nps: &[usize],
    expect: &str,
    envs: &[(&str, &str)],
) {
    let Some(py) = python() else { return };
    for &np in nps {
        let o = Command::new("bash")
            .arg(repo().join("capi/tests/mpi4py/run_suite.sh"))
            .arg(prefix())
            .arg(np.to_string())
            .args(files.iter().flat_map(|f| ["-i", f]))
            .env("GMPI_PYTHON", &py)
            .env("SUITE_TIMEOUT", "300")
            .env("LOG_DIR", scratch(&format!("mpi4py-{tag}-np{np}")))
            .envs(envs.iter().copied())
            .output()
            .expect("run_suite.sh");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains(expect),
            "mpi4py {files:?} at np {np}:\n{}",
            text(&o)
        );
    }
}

/// mpi4py's own test files for intercommunicators (collectives over both
/// groups with `MPI_ROOT`, create/merge/split/dup) at np 2 and 3 (the whole
/// core suite takes minutes and is run by hand, see the README).
#[test]
fn mpi4py_suite_intercommunicator_files() {
    let files = [
        "test_comm_inter",
        "test_cco_buf_inter",
        "test_cco_obj_inter",
        "test_cco_vec_inter",
    ];
    mpi4py_files("inter", &files, &[2, 3], "0 failed, 0 errors");
}

/// mpi4py's own one-sided files (`test_rma`, `test_rma_nb`: every
/// operation on every typecode under fence and lock; `test_win`: creation,
/// flavors, attributes, info, shared query, dynamic windows, PSCW, locks;
/// `test_util_sync`: mpi4py.util.sync's counters, mutexes and condition
/// variables built on fetch-and-op and passive-target locks) at np 1 and 3.
#[test]
fn mpi4py_suite_one_sided_files() {
    let files = ["test_rma", "test_rma_nb", "test_win", "test_util_sync"];
    mpi4py_files("rma", &files, &[1, 3], "228 ok, 0 failed, 0 errors");
}

/// The same one-sided files with every rank on a fake node of its own
/// (`capi/tests/mpi4py/fake_nodes.sh`): windows between nodes, by active
/// messages over tcp, at np 2.
#[test]
fn mpi4py_suite_one_sided_files_between_nodes() {
    let files = ["test_rma", "test_rma_nb", "test_win", "test_util_sync"];
    let launcher = repo().join("capi/tests/mpi4py/fake_nodes.sh");
    let gmpirun = prefix().join("bin/gmpirun");
    mpi4py_files_with(
        "rma-nodes",
        &files,
        &[2],
        "228 ok, 0 failed, 0 errors",
        &[
            ("LAUNCHER", launcher.to_str().expect("utf-8 path")),
            ("GMPIRUN", gmpirun.to_str().expect("utf-8 path")),
        ],
    );
}

/// mpi4py's `test_session` (sessions, process sets, groups from them),
/// `test_exceptions` (every call's error class, sessions' included) and
/// `test_grequest` (generalized requests, errors of their callbacks) and
/// `test_threads` (MPI_THREAD_MULTIPLE, which mpi4py asks for by default:
/// every mpi4py test runs with it) at np 1 and 2.
#[test]
fn mpi4py_suite_session_exception_grequest_threads_files() {
    let files = [
        "test_session",
        "test_exceptions",
        "test_grequest",
        "test_threads",
    ];
    mpi4py_files("session", &files, &[1, 2], "74 ok, 0 failed, 0 errors");
}

/// mpi4py's files that reach the MPI 4.1 and MPI 5.0 calls gmpi exports
/// (mpi4py looks them up at run time): `test_mpiabi` (the ABI and Fortran
/// info queries), `test_status` (status fields), `test_errorcode` (error
/// class, code and string removal), `test_request` (`get_status_any/all/
/// some`), `test_p2p_buf` (buffered sends, buffers per communicator and
/// session, flushes), `test_environ`, at np 1 and 2.
#[test]
fn mpi4py_suite_mpi41_files() {
    let files = [
        "test_mpiabi",
        "test_status",
        "test_errorcode",
        "test_request",
        "test_p2p_buf",
        "test_environ",
    ];
    mpi4py_files("mpi41", &files, &[1, 2], "121 ok, 0 failed, 0 errors");
}

/// mpi4py's `test_ulfm` at np 2 and 3: agreement, shrink and the failed
/// groups (`MPIX_Comm_agree` …), and its fallback for a non-blocking
/// agreement, which starts a non-blocking collective while the other ranks
/// are in a barrier (blocking and non-blocking collectives have separate
/// sequences, as in MPICH).
#[test]
fn mpi4py_suite_ulfm_file() {
    mpi4py_files("ulfm", &["test_ulfm"], &[2, 3], "21 ok, 0 failed, 0 errors");
}

/// OpenCoarrays' own test programs (Debian's MPICH build: coarray Fortran
/// over one-sided communication) at np 2 and 4, and at np 4 on two fake
/// nodes
/// (`capi/tests/opencoarrays/run.sh`, which lists them and why the others
/// are left out).
#[test]
fn opencoarrays_programs_run_on_gmpi() {
    let dir = Path::new("/usr/lib/x86_64-linux-gnu/open-coarrays/mpich/bin");
    if !present(dir.is_dir(), "OpenCoarrays", "libcoarrays-mpich-dev") {
        return;
    }
    for np in [2, 4] {
        let o = Command::new("bash")
            .arg(repo().join("capi/tests/opencoarrays/run.sh"))
            .arg(prefix())
            .arg(np.to_string())
            .output()
            .expect("opencoarrays run.sh");
        assert!(o.status.success(), "OpenCoarrays at np {np}:\n{}", text(&o));
    }
    // Between nodes: two images per fake node, windows by active messages.
    let o = Command::new("bash")
        .arg(repo().join("capi/tests/opencoarrays/run.sh"))
        .arg(prefix())
        .arg("4")
        .env("OC_PER_NODE", "2")
        .output()
        .expect("opencoarrays run.sh");
    assert!(
        o.status.success(),
        "OpenCoarrays at np 4 on two fake nodes:\n{}",
        text(&o)
    );
    // sync_team needs 8 images (teams of teams).
    let o = Command::new("bash")
        .arg(repo().join("capi/tests/opencoarrays/run.sh"))
        .arg(prefix())
        .args(["8", "sync_team"])
        .output()
        .expect("opencoarrays run.sh");
    assert!(
        o.status.success(),
        "OpenCoarrays sync_team at np 8:\n{}",
        text(&o)
    );
}

/// An MPICH-built application's energy check (`capi/tests/<dir>/run.sh
/// PREFIX 2 3`: the energies on gmpi at np 2 and 3 against MPICH's at np 1),
/// when the application (`tool`, from Debian's `package`) and MPICH's
/// launcher are installed.
fn app_energies_match_mpich(dir: &str, tool: &str, package: &str) {
    if !have(tool, package) || !have("mpiexec.mpich", "mpich") {
        return;
    }
    let o = Command::new("bash")
        .arg(repo().join(format!("capi/tests/{dir}/run.sh")))
        .arg(prefix())
        .args(["2", "3"])
        .output()
        .expect("run.sh");
    assert!(o.status.success(), "{tool}:\n{}", text(&o));
}

/// NWChem's SCF energy of water (Debian's `nwchem.mpich`: Global Arrays
/// over MPI one-sided communication) on gmpi at np 2 and 3 equals MPICH's
/// at np 1 (`capi/tests/nwchem/run.sh`).
#[test]
fn nwchem_scf_energy_matches_mpich() {
    app_energies_match_mpich("nwchem", "nwchem.mpich", "nwchem-mpich");
}

/// BAGEL (Debian's `bagel`, built against MPICH), which stops unless
/// `MPI_Init_thread` provides `MPI_THREAD_MULTIPLE`: water's RHF, MP2 and
/// CASSCF energies on gmpi at np 2 and 3 equal MPICH's at np 1
/// (`capi/tests/bagel/run.sh`).
#[test]
fn bagel_energies_match_mpich() {
    app_energies_match_mpich("bagel", "BAGEL", "bagel");
}

#[test]
fn rsmpi_program_builds_and_runs() {
    if !have("clang", "clang libclang-dev") {
        return;
    }
    let o = Command::new("bash")
        .arg(repo().join("capi/tests/rsmpi/run.sh"))
        .arg(prefix())
        .arg("2")
        .env(
            "CARGO_TARGET_DIR",
            gmpi_tests::target_dir().join("capi-rsmpi"),
        )
        .output()
        .expect("rsmpi run.sh");
    assert!(o.status.success(), "rsmpi:\n{}", text(&o));
}

#[test]
fn cmake_find_mpi_with_gmpicc() {
    if !have("cmake", "cmake") {
        return;
    }
    let o = Command::new("bash")
        .arg(repo().join("capi/tests/cmake/run.sh"))
        .arg(prefix())
        .arg("2")
        .output()
        .expect("cmake run.sh");
    assert!(o.status.success(), "cmake:\n{}", text(&o));
}
