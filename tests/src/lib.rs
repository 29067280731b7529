//! gmpi-tests: whole-job tests. `src/bin/gmpi-check.rs` is an MPI program
//! with one scenario per subcommand; `tests/jobs.rs` runs it through real
//! `gmpirun` jobs and checks outcomes, exit statuses, leftover processes and
//! shared-memory files. This library holds the helpers both share, and
//! `netns`: several hosts on this machine (network namespaces with their own
//! sshd) for multi-host jobs.

pub mod netns;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Deterministic content for a message of `len` bytes from `src` with `salt`.
pub fn pattern(len: usize, src: i32, salt: u64) -> Vec<u8> {
    let mut x = (src as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt ^ len as u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The `target/<profile>` directory of the running test or binary.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let mut d = exe.parent().expect("exe dir").to_path_buf();
    if d.ends_with("deps") {
        d.pop();
    }
    d
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// `tests/c/fake_libcuda.c` built as `dir/libcuda.so.1`, with `libcuda.so`
/// a link to it: a program that loads one name and gmpi (or cudarc) the
/// other then share one driver instance, as with a real driver.
pub fn fake_cuda_driver(dir: &Path) {
    std::fs::create_dir_all(dir).expect("fake driver dir");
    let lib = dir.join("libcuda.so.1");
    let o = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(repo().join("tests/c/fake_libcuda.c"))
        .output()
        .expect("run cc");
    assert!(
        o.status.success(),
        "building the fake libcuda:\n{}",
        output_text(&o)
    );
    let link = dir.join("libcuda.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("libcuda.so.1", &link).expect("symlink libcuda.so");
}

/// The command prefix that puts rank r of a gmpirun job on fake node
/// `r / per_node` (`GMPI_NODE_NAME`): `sh -c WRAPPER PROG ARGS...`, so that
/// one host runs a job of several nodes (tcp between them).
pub fn fake_node_wrapper(per_node: usize) -> [String; 3] {
    [
        "sh".into(),
        "-c".into(),
        format!("GMPI_NODE_NAME=fake$((GMPI_RANK / {per_node})) exec \"$0\" \"$@\""),
    ]
}

/// Fake nodes share this host's cores, but each rank sizes its spinning by
/// its own (fake) node: the oversubscribed back-off the real host calls
/// for, or they spin against each other.
pub const HOST_BACKOFF: [(&str, &str); 2] = [("GMPI_SPIN", "5"), ("GMPI_YIELDS", "4")];

/// A process's exit status, stdout and stderr, for assertion messages.
pub fn output_text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Path to `gmpirun`, building it if this test run did not.
pub fn gmpirun() -> PathBuf {
    let p = target_dir().join("gmpirun");
    if !p.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "-p", "gmpi-launcher"]);
        if target_dir().ends_with("release") {
            c.arg("--release");
        }
        let st = c.status().expect("run cargo build");
        assert!(st.success(), "building gmpirun failed");
    }
    p
}

/// The MPI prefix laid out (once per test binary) from this build with
/// `install.sh --no-build` at `target/<profile>/capi-prefix`: `bin/gmpicc`,
/// `bin/gmpirun`, `lib/libmpi.so.12`, `include/mpi.h`. Builds `gmpi-capi` and
/// `gmpi-launcher` first when this test run did not.
pub fn capi_prefix() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let repo = repo();
        let target = target_dir();
        let release = target.ends_with("release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut b = Command::new(cargo);
        b.args(["build", "-p", "gmpi-capi", "-p", "gmpi-launcher"]);
        if release {
            b.arg("--release");
        }
        assert!(
            b.status().expect("cargo build").success(),
            "building libmpi failed"
        );
        let dir = target.join("capi-prefix");
        let mut i = Command::new("bash");
        i.arg(repo.join("install.sh"))
            .args(["--no-build", "--prefix"])
            .arg(&dir)
            .env("CARGO_TARGET_DIR", target.parent().expect("target dir"));
        if !release {
            i.arg("--debug");
        }
        let out = i.output().expect("run install.sh");
        assert!(
            out.status.success(),
            "install.sh failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
}

/// Run `gmpirun ARGS...`, capturing output.
pub fn run(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(gmpirun());
    c.args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("spawn gmpirun")
}

/// Run the scenario program `bin ARGS...` at `np` ranks under `gmpirun
/// --timeout SECS` and assert that the job succeeded and every rank printed
/// its "OK on rank" line.
pub fn run_scenario(bin: &str, timeout_s: u32, np: usize, args: &[&str], envs: &[(&str, &str)]) {
    let (nps, ts) = (np.to_string(), timeout_s.to_string());
    let mut a = vec!["--timeout", &ts, "-np", &nps, bin];
    a.extend_from_slice(args);
    let out = run(&a, envs);
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    let name = Path::new(bin)
        .file_name()
        .map_or(bin.into(), |f| f.to_string_lossy());
    assert!(
        out.status.success(),
        "{name} {args:?} at np {np} with {envs:?} failed ({:?})\nstdout:\n{so}\nstderr:\n{se}",
        out.status
    );
    let oks = so.lines().filter(|l| l.contains(" OK on rank ")).count();
    assert_eq!(
        oks, np,
        "{name} {args:?} at np {np}: {oks} ranks reported OK\n{so}\n{se}"
    );
}
