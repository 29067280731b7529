//! MPI jobs across hosts: the `gmpi-check` point-to-point scenarios and every
//! `gmpi-coll` collective with ranks on 2, 3 and 8 "hosts" (network namespaces with
//! their own sshd, `gmpi_tests::netns`), so peers on one host use shm and the others
//! tcp; and the one-sided scenario (`gmpi-check rma`) with windows across 2 hosts. Needs root, iproute2 and openssh-server; prints `SKIPPED` otherwise.

use std::process::Stdio;

use gmpi_tests::netns::Cluster;

const CHECK: &str = env!("CARGO_BIN_EXE_gmpi-check");
const COLL: &str = env!("CARGO_BIN_EXE_gmpi-coll");

/// Runs `bin args` under gmpirun on host 0 with 2 ranks per host (`--map-by`
/// `map_by`) and asserts every rank reported OK.
///
/// Every "host" believes it has this machine's cores to itself, so with 2 ranks per
/// host no rank thinks it is oversubscribed, while 2 × hosts ranks share 2 cores: the
/// wait loop is given the oversubscribed settings (`GMPI_SPIN`, `GMPI_YIELDS`), as an
/// operator would, instead of spinning for a peer that cannot run meanwhile.
fn across(c: &Cluster, map_by: &str, bin: &str, args: &[&str]) {
    let hosts: Vec<String> = (0..c.len()).map(|i| format!("{}:2", c.name(i))).collect();
    let hosts = hosts.join(",");
    let out = c
        .command(0, gmpi_tests::gmpirun())
        .args(["--timeout", "120", "-H", &hosts, "--map-by", map_by, bin])
        .args(args)
        .env("GMPI_SSH", c.ssh_agent())
        .env("GMPI_SPIN", "5")
        .env("GMPI_YIELDS", "4")
        .stdin(Stdio::null())
        .output()
        .expect("run gmpirun");
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{bin} {args:?} on {} hosts failed ({:?})\nstdout:\n{so}\nstderr:\n{se}",
        c.len(),
        out.status
    );
    let oks = so.lines().filter(|l| l.contains(" OK on rank ")).count();
    assert_eq!(oks, 2 * c.len(), "{so}\n{se}");
}

#[test]
fn p2p_and_collectives_on_2_hosts() {
    let Some(c) = Cluster::start(2) else { return };
    across(&c, "slot", CHECK, &["sweep"]);
    across(&c, "node", CHECK, &["order"]);
    across(&c, "node", CHECK, &["wild"]);
    across(&c, "slot", COLL, &["all"]);
    // One-sided windows across the hosts (active messages over tcp).
    across(&c, "node", CHECK, &["rma"]);
}

#[test]
fn p2p_and_collectives_on_3_hosts() {
    let Some(c) = Cluster::start(3) else { return };
    across(&c, "node", CHECK, &["sweep", "5000000"]);
    across(&c, "slot", CHECK, &["many", "2000"]);
    across(&c, "node", COLL, &["all", "nobig"]);
}

#[test]
fn collectives_on_8_hosts() {
    let Some(c) = Cluster::start(8) else { return };
    across(&c, "slot", COLL, &["all", "nobig"]);
}
