//! Real jobs over the tcp transport on one host: `GMPI_BTL=self,tcp` sends
//! every peer through tcp over this host's addresses, and `GMPI_NODE_NAME`
//! (set per rank by a shell wrapper) fakes several nodes so that one job
//! mixes shm (same fake node) and tcp (other fake nodes). Also the job
//! secret's paths: from gmpirun, through PMI without it, and malformed.

use gmpi_tests::{run, run_scenario};

const CHECK: &str = env!("CARGO_BIN_EXE_gmpi-check");
const COLL: &str = env!("CARGO_BIN_EXE_gmpi-coll");
const TCP: &[(&str, &str)] = &[("GMPI_BTL", "self,tcp")];

/// Thresholds low enough that every collective algorithm runs small.
const LOW: &[(&str, &str)] = &[
    ("GMPI_BTL", "self,tcp"),
    ("GMPI_ALLREDUCE_LARGE", "1K"),
    ("GMPI_BCAST_LARGE", "1K"),
    ("GMPI_ALLGATHER_LARGE", "512"),
    ("GMPI_ALLTOALL_LARGE", "64"),
];

/// Run `prog args` at `np` ranks, rank r on fake node `r / per_node`.
fn on_fake_nodes(per_node: usize, np: usize, prog: &str, args: &[&str], envs: &[(&str, &str)]) {
    let [sh, c, wrap] = gmpi_tests::fake_node_wrapper(per_node);
    let mut a = vec![c.as_str(), wrap.as_str(), prog];
    a.extend_from_slice(args);
    let mut e = gmpi_tests::HOST_BACKOFF.to_vec();
    e.extend_from_slice(envs);
    run_scenario(&sh, 120, np, &a, &e);
}

#[test]
fn p2p_size_sweep_over_tcp() {
    // Every threshold up to 64 MiB (pipelined rendezvous in 128 KiB chunks).
    run_scenario(CHECK, 120, 2, &["sweep"], TCP);
    run_scenario(CHECK, 120, 3, &["sweep", "5000000"], TCP);
    // Smaller fragments and eager limit: many more chunks in flight.
    run_scenario(
        CHECK,
        120,
        3,
        &["sweep", "1100000"],
        &[
            ("GMPI_BTL", "self,tcp"),
            ("GMPI_TCP_MAX_FRAG", "4K"),
            ("GMPI_EAGER_LIMIT", "100"),
        ],
    );
}

#[test]
fn p2p_scenarios_over_tcp() {
    run_scenario(CHECK, 120, 3, &["order"], TCP);
    run_scenario(CHECK, 120, 2, &["many", "3000"], TCP);
    run_scenario(CHECK, 120, 4, &["wild"], TCP);
    run_scenario(CHECK, 120, 2, &["ssend"], TCP);
    run_scenario(CHECK, 120, 3, &["self"], TCP);
}

#[test]
fn the_job_really_goes_through_tcp() {
    let out = run(
        &["--timeout", "60", "-np", "2", CHECK, "sweep", "100000"],
        &[("GMPI_BTL", "self,tcp"), ("GMPI_LOG", "btl=debug")],
    );
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{se}");
    assert!(se.contains("tcp: rank 0 connected to rank 1"), "{se}");
    assert!(se.contains("tcp: rank 1 connected to rank 0"), "{se}");
    assert!(!se.contains("WARN"), "{se}");
}

#[test]
fn collectives_over_tcp() {
    run_scenario(COLL, 120, 2, &["all"], TCP);
    run_scenario(COLL, 120, 3, &["all"], TCP);
    run_scenario(COLL, 120, 3, &["all", "nobig"], LOW);
    run_scenario(COLL, 120, 3, &["nonblocking"], TCP);
}

#[test]
fn mixed_shm_and_tcp_on_fake_nodes() {
    // Two fake nodes of two ranks: shm inside a node, tcp across.
    on_fake_nodes(2, 4, CHECK, &["sweep", "1100000"], &[]);
    on_fake_nodes(2, 4, COLL, &["all", "nobig"], &[]);
    // Three nodes of sizes 2, 2, 1.
    on_fake_nodes(2, 5, CHECK, &["order"], &[]);
    on_fake_nodes(2, 5, COLL, &["nonblocking"], &[]);
    // Without shm every peer goes through tcp even on one fake node.
    on_fake_nodes(2, 4, COLL, &["all", "nobig"], TCP);
}

#[test]
fn job_secret_travels_through_pmi_without_gmpirun_s() {
    // As under srun or Hydra: no GMPI_JOB_SECRET; rank 0 shares one.
    let wrap = "unset GMPI_JOB_SECRET; exec \"$0\" \"$@\"";
    run_scenario("sh", 120, 3, &["-c", wrap, CHECK, "sweep", "300000"], TCP);
}

#[test]
fn a_malformed_job_secret_is_a_clear_error() {
    let wrap = format!("GMPI_JOB_SECRET=12345 exec {CHECK} sweep 10");
    let out = run(&["--timeout", "60", "-np", "2", "sh", "-c", &wrap], TCP);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        se.contains("GMPI_JOB_SECRET") && se.contains("hexadecimal"),
        "{se}"
    );
}

#[test]
fn a_transport_selection_that_reaches_nobody_is_an_error() {
    let out = run(
        &["--timeout", "60", "-np", "2", CHECK, "sweep", "10"],
        &[("GMPI_BTL", "self")],
    );
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        se.contains("no allowed transport reaches rank") && se.contains("GMPI_BTL=self"),
        "{se}"
    );
    let out = run(
        &["--timeout", "60", "-np", "2", CHECK, "sweep", "10"],
        &[("GMPI_BTL", "self,udp")],
    );
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(se.contains("GMPI_BTL") && se.contains("udp"), "{se}");
}

/// Two network namespaces joined by a veth pair, removed on drop.
struct Netns {
    names: [String; 2],
}

impl Netns {
    /// `None` (after saying why) when this machine cannot make them.
    fn new() -> Option<Netns> {
        let root = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|st| {
                st.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
            })
            .unwrap_or(false);
        if !root {
            eprintln!("SKIPPED: network namespaces need root");
            return None;
        }
        let id = std::process::id() % 100_000;
        let n = Netns {
            names: [format!("gtcpA{id}"), format!("gtcpB{id}")],
        };
        let (a, b) = (&n.names[0], &n.names[1]);
        let (va, vb) = (format!("gta{id}"), format!("gtb{id}"));
        let sub = 1 + id % 200;
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), a.clone()],
            vec!["netns".into(), "add".into(), b.clone()],
            vec![
                "link".into(),
                "add".into(),
                va.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                vb.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                va.clone(),
                "netns".into(),
                a.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                vb.clone(),
                "netns".into(),
                b.clone(),
            ],
            vec![
                "-n".into(),
                a.clone(),
                "addr".into(),
                "add".into(),
                format!("10.232.{sub}.1/24"),
                "dev".into(),
                va.clone(),
            ],
            vec![
                "-n".into(),
                b.clone(),
                "addr".into(),
                "add".into(),
                format!("10.232.{sub}.2/24"),
                "dev".into(),
                vb.clone(),
            ],
            vec![
                "-n".into(),
                a.clone(),
                "link".into(),
                "set".into(),
                "lo".into(),
                "up".into(),
            ],
            vec![
                "-n".into(),
                b.clone(),
                "link".into(),
                "set".into(),
                "lo".into(),
                "up".into(),
            ],
            vec![
                "-n".into(),
                a.clone(),
                "link".into(),
                "set".into(),
                va,
                "up".into(),
            ],
            vec![
                "-n".into(),
                b.clone(),
                "link".into(),
                "set".into(),
                vb,
                "up".into(),
            ],
        ];
        for s in steps {
            match std::process::Command::new("ip").args(&s).output() {
                Ok(o) if o.status.success() => {}
                Ok(o) => {
                    eprintln!(
                        "SKIPPED: `ip {}` failed: {}",
                        s.join(" "),
                        String::from_utf8_lossy(&o.stderr)
                    );
                    return None;
                }
                Err(e) => {
                    eprintln!("SKIPPED: cannot run `ip` (install iproute2): {e}");
                    return None;
                }
            }
        }
        Some(n)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", n])
                .status();
        }
    }
}

#[test]
fn across_two_network_namespaces_mixing_shm_and_tcp() {
    let Some(ns) = Netns::new() else { return };
    // Ranks 0 and 1 on "host A", 2 and 3 on "host B": each rank enters its
    // namespace and a UTS namespace with that host's name (the PMI socket
    // to gmpirun is inherited, so one gmpirun serves both hosts).
    let wrap = format!(
        "if [ $GMPI_RANK -lt 2 ]; then N={a}; H=hostA; else N={b}; H=hostB; fi; \
         exec ip netns exec $N unshare --uts sh -c 'hostname $0; exec \"$@\"' $H \"$0\" \"$@\"",
        a = ns.names[0],
        b = ns.names[1]
    );
    let args = |prog: &'static str, rest: &[&'static str]| {
        let mut v = vec!["-c".to_string(), wrap.clone(), prog.to_string()];
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    };
    for (prog, rest) in [
        (CHECK, vec!["sweep", "5000000"]),
        (CHECK, vec!["order"]),
        (COLL, vec!["all", "nobig"]),
    ] {
        let a = args(prog, &rest);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run_scenario("sh", 120, 4, &a, &gmpi_tests::HOST_BACKOFF);
    }
    // The traffic really crossed the veth pair.
    let a = args(CHECK, &["sweep", "1000"]);
    let mut full = vec!["--timeout", "60", "-np", "4", "sh"];
    full.extend(a.iter().map(String::as_str));
    let out = run(&full, &[("GMPI_LOG", "btl=debug")]);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{se}");
    assert!(
        se.contains("connected to rank") && se.contains("10.232."),
        "{se}"
    );
    drop(ns);
}

/// The typed one-sided API (`gmpi-check rma`: every flavor, fence, locks,
/// accumulates, PSCW) with windows spanning fake nodes: active messages
/// over tcp, one rank per node and two per node.
#[test]
fn one_sided_typed_api_between_nodes() {
    on_fake_nodes(1, 2, CHECK, &["rma"], &[]);
    on_fake_nodes(1, 3, CHECK, &["rma"], &[]);
    on_fake_nodes(2, 4, CHECK, &["rma"], &[]);
}
