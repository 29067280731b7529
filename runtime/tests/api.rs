//! The Rust API exactly as the core issue names it, run as a singleton job
//! (no launcher: every message goes to self). One test function, because
//! `init` may run once per process.

use gmpi::{Equivalence, ErrorClass, ANY_SOURCE, ANY_TAG};

#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[repr(C)]
struct Particle {
    pos: [f64; 3],
    id: u64,
}

// SAFETY: repr(C), four 8-byte fields, no padding; any bit pattern is valid.
unsafe impl Equivalence for Particle {}

#[test]
fn the_api_as_named_in_the_issue() -> Result<(), gmpi::Error> {
    assert!(!gmpi::is_initialized());
    let universe = gmpi::init()?;
    assert!(gmpi::init().is_err(), "second init must fail");
    let world = universe.world();
    assert_eq!((world.rank(), world.size()), (0, 1));
    let (dest, src, tag) = (0, 0, 5);

    let buf = [1u32, 2, 3];
    world.send(&buf[..], dest, tag)?;
    let mut got = [0u32; 3];
    let status = world.recv(&mut got[..], src, tag)?;
    assert_eq!(
        (status.source(), status.tag(), status.count::<u32>()),
        (0, 5, 3)
    );
    assert_eq!(got, buf);

    // Non-blocking, with the shapes of the issue (r2 is not `mut`).
    let sbuf = [9i64; 4];
    let mut rbuf = [0i64; 4];
    let r2 = world.irecv(&mut rbuf[..], ANY_SOURCE, ANY_TAG)?;
    let r = world.isend(&sbuf[..], dest, tag)?;
    r.wait()?;
    let mut polls = 0;
    while r2.test()?.is_none() {
        polls += 1;
        assert!(polls < 1_000_000, "irecv never completed");
    }
    assert_eq!(r2.test()?.map(|s| s.count::<i64>()), Some(4));
    drop(r2);
    assert_eq!(rbuf, sbuf);

    // wait_all over a Vec of requests, every primitive width.
    let a = [1u8, 2];
    let b = [1.5f32];
    let c = [u128::MAX];
    let (mut ra, mut rb, mut rc) = ([0u8; 2], [0f32; 1], [0u128; 1]);
    let reqs = vec![
        world.irecv(&mut ra[..], src, 1)?,
        world.irecv(&mut rb[..], src, 2)?,
        world.irecv(&mut rc[..], src, 3)?,
        world.isend(&a[..], dest, 1)?,
        world.isend(&b[..], dest, 2)?,
        world.isend(&c[..], dest, 3)?,
    ];
    let statuses = gmpi::wait_all(reqs)?;
    assert_eq!(statuses.len(), 6);
    assert_eq!((ra, rb, rc), (a, b, c));

    // A #[repr(C)] struct.
    let ps = [Particle {
        pos: [1.0, 2.0, 3.0],
        id: 7,
    }; 2];
    let mut pr = [Particle::default(); 2];
    let st = world.sendrecv(&ps[..], dest, 8, &mut pr[..], src, 8)?;
    assert_eq!(st.count::<Particle>(), 2);
    assert_eq!(pr, ps);

    // probe / iprobe / ssend to self through isend.
    assert!(world.iprobe(src, 9)?.is_none());
    let s = world.isend(&[42u16][..], dest, 9)?;
    let p = world.probe(src, 9)?;
    assert_eq!((p.source(), p.tag(), p.count::<u16>()), (0, 9, 1));
    assert_eq!(world.iprobe(ANY_SOURCE, ANY_TAG)?.map(|s| s.tag()), Some(9));
    let mut one = [0u16];
    world.recv(&mut one[..], src, 9)?;
    s.wait()?;
    let mut sink = [0u8; 4];
    let r = world.irecv(&mut sink[..], src, 10)?;
    world.ssend(&[1u8, 2, 3, 4][..], dest, 10)?;
    r.wait()?;
    world.barrier()?;

    // Errors: class and message naming the call, the argument and the rank.
    let e = world.send(&buf[..], 1, 0).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Rank);
    assert!(
        e.to_string().contains("MPI_Send") && e.to_string().contains("destination rank 1"),
        "{e}"
    );
    let e = world.recv(&mut got[..], 0, -3).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Tag);
    world.send(&[0u8; 10][..], dest, 11)?;
    let e = world.recv(&mut sink[..], src, 11).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Truncate);

    // Cancel an unmatched receive.
    let r = world.irecv(&mut sink[..], src, 12)?;
    r.cancel()?;
    assert!(r.wait()?.is_cancelled());

    universe.finalize()?;
    assert!(!gmpi::is_initialized());
    assert!(gmpi::init().is_err(), "init after finalize must fail");
    Ok(())
}
