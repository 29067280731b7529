//! The btl conformance suite (`gmpi_btl::conformance`) against this btl:
//! two ranks on threads of this process, in three configurations. It lives
//! in the crate (a test module) for one reason: [`Fixture::kill`] makes a
//! peer fail the only way this btl notices, by turning its ring to us into
//! garbage at our read position, as the crate's own failure tests do (a dead
//! process is not detected here: the launcher ends the job).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use gmpi_btl::conformance::{Can, Fixture, HostBuffers, Support};
use gmpi_btl::{Btl, BtlError, LocalMem, MemDesc, Pull, Rank, Submit};

use crate::{layout, ShmBtl, ShmConfig};

/// World ranks of the two endpoints.
const WORLD: [Rank; 2] = [10, 11];

/// Two ranks bootstrapped on threads, and the memory their gets write.
struct ShmFixture {
    what: &'static str,
    /// Dropped before `mem` (fields drop in order): no get outlives it.
    btls: Vec<ShmBtl>,
    mem: HostBuffers,
}

impl ShmFixture {
    fn new(what: &'static str, cfg: ShmConfig) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = format!(
            "/dev/shm/gmpi-conformance-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let barrier = Arc::new(Barrier::new(2));
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let (barrier, path, cfg) = (Arc::clone(&barrier), path.clone(), cfg.clone());
                std::thread::spawn(move || {
                    ShmBtl::bootstrap(&path, r, 2, &WORLD, &cfg, &mut || {
                        barrier.wait();
                        Ok(())
                    })
                })
            })
            .collect();
        let btls = hs
            .into_iter()
            .map(|h| h.join().unwrap().expect("bootstrap"))
            .collect();
        Self {
            what,
            btls,
            mem: HostBuffers::default(),
        }
    }
}

impl Fixture for ShmFixture {
    type Btl = ShmBtl;

    fn name(&self) -> String {
        format!("shm, {}", self.what)
    }

    fn support(&self) -> Support {
        let getter = &self.btls[1];
        Support {
            back_pressure: Can::Yes,
            get: if getter.cma_enabled() {
                Can::Yes
            } else {
                Can::no(format!("CMA {}", getter.cma_status()))
            },
            peer_failure: Can::Yes,
            wait_sleeps: Can::Yes,
        }
    }

    fn endpoints(&self) -> usize {
        2
    }

    fn btl(&mut self, i: usize) -> &mut ShmBtl {
        &mut self.btls[i]
    }

    fn rank(&self, i: usize) -> Rank {
        WORLD[i]
    }

    fn alloc(&mut self, _: usize, data: &[u8]) -> LocalMem {
        self.mem.alloc(data)
    }

    fn read(&self, _: usize, mem: LocalMem) -> Vec<u8> {
        self.mem.read(mem)
    }

    #[allow(unsafe_code)] // lends fixture memory to a get
    fn get(
        &mut self,
        i: usize,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
        alone: bool,
    ) -> Result<Submit, BtlError> {
        let b = &mut self.btls[i];
        // SAFETY: `dst` lies in a buffer of `self.mem`, which is freed only
        // after both endpoints are dropped (field order), and the suite
        // reads it only once the get is over (`Fixture::get`).
        unsafe {
            if alone {
                b.get_as(peer, remote, offset, dst, token, Pull::Alone)
            } else {
                b.get(peer, remote, offset, dst, token)
            }
        }
    }

    /// Garbage at the read position of the victim's ring to the survivor.
    fn kill(&mut self, i: usize) {
        let j = 1 - i;
        let survivor = &self.btls[j];
        let node = survivor.node.as_ref().expect("a segment");
        let ring = survivor.layout.ring(i, j);
        let head = node
            .map
            .u64_at(ring + layout::RING_HEAD)
            .load(Ordering::Acquire);
        let at =
            ring + layout::RING_CTRL_BYTES + (head % survivor.layout.ring_bytes as u64) as usize;
        node.map
            .u64_at(at)
            .store(0x0bad_0bad_0bad_0bad, Ordering::Release);
    }
}

gmpi_btl::conformance_tests!(default_config, || ShmFixture::new(
    "default configuration",
    ShmConfig::default()
));
gmpi_btl::conformance_tests!(small_ring_small_coop, || ShmFixture::new(
    "smallest ring, cooperative gets from 40 KiB",
    ShmConfig {
        ring_bytes: Some(0),
        coop_chunk: 16 << 10,
        coop_min: 40 << 10,
        ..ShmConfig::default()
    }
));
gmpi_btl::conformance_tests!(no_coop, || ShmFixture::new(
    "cooperative gets off",
    ShmConfig {
        coop: false,
        ..ShmConfig::default()
    }
));
gmpi_btl::conformance_tests!(no_cma, || ShmFixture::new(
    "CMA off",
    ShmConfig {
        cma: false,
        ..ShmConfig::default()
    }
));
