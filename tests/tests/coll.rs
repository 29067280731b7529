//! Collectives, communicators and derived datatypes in real gmpirun jobs:
//! every scenario of `gmpi-coll` at several rank counts, and `all` again
//! with every algorithm threshold lowered so each algorithm runs at small
//! sizes.

use gmpi_tests::run_scenario;

const COLL: &str = env!("CARGO_BIN_EXE_gmpi-coll");

/// Thresholds low enough that every algorithm runs with small buffers.
const LOW: &[(&str, &str)] = &[
    ("GMPI_ALLREDUCE_LARGE", "1K"),
    ("GMPI_BCAST_LARGE", "1K"),
    ("GMPI_ALLGATHER_LARGE", "512"),
    ("GMPI_ALLTOALL_LARGE", "64"),
];

/// Run a scenario at `np` ranks with a hang guard; assert every rank passed.
fn scenario(np: usize, args: &[&str], envs: &[(&str, &str)]) {
    run_scenario(COLL, 90, np, args, envs);
}

#[test]
fn all_collectives_np1_to_np8() {
    for np in [1, 2, 3, 4] {
        scenario(np, &["all"], &[]);
    }
    // 4 MiB cases only up to 4 ranks (8 ranks share 2 cores in CI).
    for np in [5, 8] {
        scenario(np, &["all", "nobig"], &[]);
    }
}

#[test]
fn all_collectives_with_low_thresholds() {
    for np in [1, 2, 3, 4, 5, 8] {
        scenario(np, &["all", "nobig"], LOW);
    }
}

#[test]
fn all_collectives_without_shared_memory_collectives() {
    let mut env = LOW.to_vec();
    env.push(("GMPI_COLL_SHM", "0"));
    for np in [2, 3, 5] {
        scenario(np, &["all", "nobig"], &env);
    }
}

#[test]
fn all_collectives_with_a_low_pipeline_limit() {
    // Sizes around the end of the chunked roads (64 MiB by default, too
    // large to try in every job), and single copy past it.
    let env = [("GMPI_COLL_SHM_PIPELINE_MAX", "128K")];
    for np in [2, 3, 4] {
        scenario(np, &["all", "nobig"], &env);
    }
}

#[test]
fn all_collectives_with_small_shared_memory_slots() {
    let mut env = LOW.to_vec();
    env.push(("GMPI_COLL_SHM_MAX", "256"));
    for np in [2, 3, 4, 8] {
        scenario(np, &["all", "nobig"], &env);
    }
    scenario(3, &["all", "nobig"], &[("GMPI_COLL_SHM_MAX", "100")]);
}

#[test]
fn communicators_groups_and_isolation() {
    for np in [1, 2, 3, 4, 5] {
        scenario(np, &["comms"], &[]);
    }
}

#[test]
fn derived_datatypes() {
    for np in [1, 2, 3, 4] {
        scenario(np, &["types"], &[]);
    }
    scenario(3, &["types"], LOW);
}

#[test]
fn nonblocking_collectives_overlap() {
    for np in [1, 2, 3, 4] {
        scenario(np, &["nonblocking"], &[]);
    }
    scenario(3, &["nonblocking"], LOW);
}

#[test]
fn errors_have_the_right_class() {
    for np in [1, 3, 4] {
        scenario(np, &["errors"], &[]);
    }
    for np in [2, 3] {
        scenario(np, &["errors"], &[("GMPI_COLL_CHECK", "1")]);
    }
    scenario(3, &["all", "nobig"], &[("GMPI_COLL_CHECK", "1")]);
}

#[test]
fn intercommunicators() {
    for np in [2, 3, 4, 5] {
        scenario(np, &["inter"], &[]);
    }
}
