//! Windows' RDMA transfers through the driver (`onesided.rs`) over the
//! simulated fabric: exposure, route, puts and gets whose completions come
//! as events among the pml's own (a rendezvous get in flight at the same
//! time), failures, and what a btl without put offers (nothing).

use gmpi_btl::loopback::Loopback;
use gmpi_btl::sim::Fabric;
use gmpi_btl::{Btl, Capabilities, LocalMem};
use gmpi_gpu::MemKind;
use gmpi_pml::{Buf, Pml, PmlConfig, RecvArgs, SendArgs, SendMode};

use super::{host_only, SimMem};
use crate::progress::Driver;

fn caps(put: bool) -> Capabilities {
    Capabilities {
        put,
        ..Fabric::shm_caps(256, 1024)
    }
}

fn world(f: &Fabric, put: bool) -> Vec<Driver<SimMem>> {
    (0..2)
        .map(|r| {
            let btls: Vec<Box<dyn Btl>> = vec![
                Box::new(Loopback::new(r)),
                Box::new(f.endpoint(r, 0, caps(put))),
            ];
            Driver::new(
                Pml::new(r, 2, PmlConfig::default()),
                btls,
                SimMem(f.memory(r)),
                host_only(),
            )
        })
        .collect()
}

/// Progress both ranks until transfer `token` of rank 1 has ended.
fn finish(d: &mut [Driver<SimMem>], token: u64) -> Result<(), String> {
    for _ in 0..10_000 {
        d[0].progress();
        d[1].progress();
        if let Some(res) = d[1].rdma_take(token) {
            return res;
        }
    }
    panic!("transfer {token:#x} never ended");
}

#[test]
fn window_transfers_end_by_their_own_tokens_among_the_pmls() {
    let f = Fabric::new(2, 1);
    f.set_queued(true);
    let mut d = world(&f, true);
    let win = f.memory(0).lock().unwrap().alloc(4096);
    let (btl, desc) = d[0]
        .expose_window(win, 4096)
        .expect("a btl with put exposes");
    assert_eq!(btl, 1, "the sim lane, not loopback");
    assert_eq!(f.registered(), 1);
    assert_eq!(d[1].rdma_route(0), Some(1));
    assert_eq!(d[1].rdma_route(1), None, "itself: loopback, no put");

    // A rendezvous (get protocol) from 0 to 1 in flight meanwhile: its
    // GetComplete must reach the pml, the window's its own table.
    let big: Vec<u8> = (0..5000).map(|i| (i % 251) as u8).collect();
    let src = f.memory(0).lock().unwrap().alloc_with(&big);
    let dst = f.memory(1).lock().unwrap().alloc(big.len());
    let buf = |addr, len| Buf {
        addr,
        len,
        kind: MemKind::Host,
    };
    let sid = d[0]
        .post_send(SendArgs {
            ctx: 0,
            src: 0,
            dest: 1,
            tag: 7,
            buf: buf(src, big.len()),
            mode: SendMode::Standard,
        })
        .unwrap();
    let rid = d[1]
        .post_recv(RecvArgs {
            ctx: 0,
            src: Some(0),
            src_world: Some(0),
            tag: Some(7),
            buf: buf(dst, big.len()),
            consumed: false,
        })
        .unwrap();

    let data: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    let from = f.memory(1).lock().unwrap().alloc_with(&data);
    let m = LocalMem {
        addr: from,
        len: data.len(),
    };
    // SAFETY: simulated memory: the sim reads it by address, never by
    // pointer.
    let put = unsafe { d[1].rdma_start(btl, 0, &desc, 100, m, true) }
        .unwrap()
        .expect("queued");
    finish(&mut d, put).unwrap();
    assert_eq!(f.memory(0).lock().unwrap().read(win + 100, 300), &data[..]);
    assert_eq!(f.memory(0).lock().unwrap().read(win, 100), &[0u8; 100][..]);

    let back = f.memory(1).lock().unwrap().alloc(200);
    let m = LocalMem {
        addr: back,
        len: 200,
    };
    // SAFETY: as above.
    let get = unsafe { d[1].rdma_start(btl, 0, &desc, 150, m, false) }
        .unwrap()
        .expect("queued");
    finish(&mut d, get).unwrap();
    assert_eq!(f.memory(1).lock().unwrap().read(back, 200), &data[50..250]);
    assert!(d[1].rdma_take(get).unwrap().is_err(), "taken once");

    for _ in 0..1000 {
        d[0].progress();
        d[1].progress();
    }
    d[0].test(sid).expect("send done").unwrap();
    d[1].test(rid).expect("receive done").unwrap();
    assert_eq!(f.memory(1).lock().unwrap().read(dst, big.len()), &big[..]);

    // Outside the window: refused at once, nothing to wait for.
    // SAFETY: as above.
    let far = unsafe { d[1].rdma_start(btl, 0, &desc, 4000, m, true) };
    assert!(far.is_err(), "{far:?}");
    // A transfer the transport fails ends in error.
    f.fail_gets(true);
    // SAFETY: as above.
    let bad = unsafe { d[1].rdma_start(btl, 0, &desc, 0, m, true) }
        .unwrap()
        .expect("queued");
    let res = finish(&mut d, bad);
    assert!(
        res.as_ref().is_err_and(|e| e.contains("injected")),
        "{res:?}"
    );
    assert!(d[0].fatal().is_none() && d[1].fatal().is_none());

    d[0].unexpose_window(btl, &desc);
    assert_eq!(f.registered(), 0);
}

#[test]
fn without_put_nothing_is_exposed_and_no_route_reads_windows() {
    let f = Fabric::new(2, 1);
    let mut d = world(&f, false);
    let win = f.memory(0).lock().unwrap().alloc(64);
    assert!(d[0].expose_window(win, 64).is_none());
    assert_eq!(d[1].rdma_route(0), None);
    assert_eq!(f.registered(), 0);
}
