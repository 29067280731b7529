//! The btl conformance suite over real verbs: two endpoints of this process
//! on one device (`GMPI_IB_TEST_DEVICE`, default: the chosen port), whose
//! queue pairs talk to each other through the device's loopback. Ignored
//! by default, it needs a verbs device: `btl-ib/tests/rxe/run.sh` runs it
//! inside the Soft-RoCE guest with `--ignored`.
#![cfg(feature = "ib")]

mod common;

use common::{connect, IbFixture};
use gmpi_btl::conformance::{self, Can, Fixture, HostBuffers, Support};
use gmpi_btl::Btl;
use gmpi_btl_ib::verbs::{self, VerbsFabric, Want};
use gmpi_btl_ib::IbConfig;

type VerbsFixture = IbFixture<VerbsFabric>;

fn want() -> Want {
    let mut w = Want::default();
    if let Ok(d) = std::env::var("GMPI_IB_TEST_DEVICE") {
        w.devices = Some(verbs::parse_devices(&d).expect("GMPI_IB_TEST_DEVICE"));
    }
    w
}

/// Two endpoints on one device; killing one drops it, which destroys its
/// queue pairs.
fn fixture(cfg: IbConfig) -> VerbsFixture {
    let btls = connect(2, &cfg, |_| {
        verbs::open(&want(), &verbs::Near::default()).expect("a verbs port")
    });
    let device = btls[0].port().device.clone();
    IbFixture {
        what: format!("ib over {device}"),
        support: Support {
            back_pressure: Can::Yes,
            get: Can::Yes,
            // Measured in the guest (`peer_death_probe`): Soft-RoCE keeps
            // retrying sends to a destroyed queue pair past 30 s without an
            // error completion. The model checks the failure path; a
            // killed rank ends the job through the launcher.
            peer_failure: if device.starts_with("rxe") {
                Can::no("Soft-RoCE reports no error for a destroyed peer queue pair within 30 s")
            } else {
                Can::Yes
            },
            wait_sleeps: Can::Yes,
        },
        btls: btls.into_iter().map(Some).collect(),
        mem: HostBuffers::default(),
        kill: Box::new(|btls, i| btls[i] = None),
    }
}

fn run(cfg: IbConfig) {
    let mut new = || fixture(cfg.clone());
    for (name, check) in [
        (
            "ordering",
            conformance::ordering::<VerbsFixture>
                as fn(&mut dyn FnMut() -> VerbsFixture) -> conformance::Outcome,
        ),
        ("gather_lists", conformance::gather_lists::<VerbsFixture>),
        ("back_pressure", conformance::back_pressure::<VerbsFixture>),
        ("too_large", conformance::too_large::<VerbsFixture>),
        ("get_bounds", conformance::get_bounds::<VerbsFixture>),
        ("put_bounds", conformance::put_bounds::<VerbsFixture>),
        ("wait", conformance::wait::<VerbsFixture>),
        ("peer_failure", conformance::peer_failure::<VerbsFixture>),
    ] {
        let t = std::time::Instant::now();
        let outcome = check(&mut new);
        conformance::report(name, &outcome);
        eprintln!(
            "verbs conformance: {name}: {outcome:?} in {:?}",
            t.elapsed()
        );
    }
}

#[test]
#[ignore = "needs a verbs device (the Soft-RoCE guest: btl-ib/tests/rxe/run.sh)"]
fn conformance_default() {
    run(IbConfig::default());
}

#[test]
#[ignore = "needs a verbs device (the Soft-RoCE guest: btl-ib/tests/rxe/run.sh)"]
fn conformance_tight() {
    run(IbConfig {
        credits: 2,
        send_slots: 8,
        signal_every: 4,
        read_chunk: 64 << 10,
        ..IbConfig::default()
    });
}

/// How long a dead peer takes to show, for one send and for a burst.
#[test]
#[ignore = "needs a verbs device (the Soft-RoCE guest: btl-ib/tests/rxe/run.sh)"]
fn peer_death_probe() {
    for burst in [1usize, 40] {
        let mut f = fixture(IbConfig::default());
        let _ = f.btl(0).send(1, &[b"hi"], 0);
        let mut got = 0;
        while got == 0 {
            f.btl(1).progress(&mut |e| {
                if let gmpi_btl::Event::Frag { .. } = e {
                    got += 1
                }
            });
            f.btl(0).progress(&mut |_| {});
        }
        f.kill(1);
        let t = std::time::Instant::now();
        for _ in 0..burst {
            let r = f.btl(0).send(1, &[b"are you there?"], 0);
            eprintln!("burst {burst}: send -> {r:?}");
        }
        let mut seen = false;
        while t.elapsed() < std::time::Duration::from_secs(30) && !seen {
            f.btl(0).progress(&mut |e| {
                eprintln!("burst {burst}: {:?} after {:?}", e, t.elapsed());
                if let gmpi_btl::Event::PeerFailed { .. } = e {
                    seen = true;
                }
            });
            f.btl(0).wait(std::time::Duration::from_millis(10));
        }
        eprintln!(
            "burst {burst}: failure seen: {seen} after {:?}",
            t.elapsed()
        );
    }
}
