//! gmpi-tests: whole-job tests. `src/bin/gmpi-check.rs` is an MPI program
//! with one scenario per subcommand; `tests/jobs.rs` runs it through real
//! `gmpirun` jobs and checks outcomes, exit statuses, leftover processes and
//! shared-memory files. This library holds the helpers both share.

use std::path::PathBuf;
use std::process::{Command, Output};

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

/// Run `gmpirun ARGS...`, capturing output.
pub fn run(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(gmpirun());
    c.args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("spawn gmpirun")
}
