//! Helpers shared by the whole-program tests of `gmpirun` (`gmpirun.rs`, `hosts.rs`):
//! what a finished gmpirun said, waiting for it with a hang limit, where the binaries are.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// What a finished gmpirun did and said.
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn code(&self) -> i32 {
        self.status.code().expect("gmpirun itself was killed")
    }
}

pub fn gmpirun_path() -> &'static str {
    env!("CARGO_BIN_EXE_gmpirun")
}

/// The PMI probe example (`cargo test` builds the crate's examples).
pub fn probe() -> PathBuf {
    let p = Path::new(gmpirun_path())
        .parent()
        .unwrap()
        .join("examples/pmi_probe");
    assert!(
        p.exists(),
        "{} not built (cargo test builds examples)",
        p.display()
    );
    p
}

/// Waits for `child` (at most `limit` after `started`; past it the test fails) and
/// collects its output.
pub fn wait_output(mut child: Child, started: Instant, limit: Duration) -> Outcome {
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("gmpirun hung for more than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    Outcome {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
        elapsed,
    }
}
