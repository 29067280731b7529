//! The conformance suite (`gmpi_btl::conformance`) against the simulated
//! fabric, in several configurations, and against the loopback btl.

use std::sync::{Arc, Mutex};

use gmpi_btl::conformance::{Can, Fixture, Support};
use gmpi_btl::loopback::Loopback;
use gmpi_btl::sim::{Fabric, SimBtl, SimMemory};
use gmpi_btl::{Btl, BtlError, Capabilities, LocalMem, MemDesc, Pull, Rank, Submit};

/// How a simulated pair is set up.
#[derive(Debug, Clone, Copy, Default)]
struct SimCfg {
    /// Sends and gets answer `Queued`.
    queued: bool,
    /// At most this many undelivered fragments per direction.
    capacity: Option<usize>,
    /// Drain in a seeded pseudo-random number per pass.
    seed: Option<u64>,
    /// Endpoints without `get` (and `put`).
    no_get: bool,
}

/// Two ranks of a [`Fabric`], one lane.
struct SimFixture {
    cfg: SimCfg,
    fabric: Fabric,
    eps: Vec<SimBtl>,
}

impl SimFixture {
    fn new(cfg: SimCfg) -> Self {
        let fabric = Fabric::new(2, 1);
        let caps = Capabilities {
            get: !cfg.no_get,
            put: !cfg.no_get,
            ..Fabric::shm_caps(256, 1024)
        };
        let eps = (0..2)
            .map(|r| fabric.endpoint(r, 0, caps.clone()))
            .collect();
        fabric.set_queued(cfg.queued);
        if let Some(k) = cfg.capacity {
            fabric.set_capacity(k);
        }
        if let Some(s) = cfg.seed {
            fabric.set_seed(s);
        }
        Self { cfg, fabric, eps }
    }

    fn memory(&self, i: usize) -> Arc<Mutex<SimMemory>> {
        self.fabric.memory(i as Rank)
    }
}

impl Fixture for SimFixture {
    type Btl = SimBtl;

    fn name(&self) -> String {
        format!("sim {:?}", self.cfg)
    }

    fn support(&self) -> Support {
        Support {
            back_pressure: if self.cfg.capacity.is_some() {
                Can::Yes
            } else {
                Can::no("no capacity set: the simulated queues are unbounded")
            },
            get: if self.cfg.no_get {
                Can::no("endpoints built without get")
            } else {
                Can::Yes
            },
            peer_failure: Can::Yes,
            wait_sleeps: Can::no("everything happens on the caller's thread: wait returns at once"),
        }
    }

    fn endpoints(&self) -> usize {
        2
    }

    fn btl(&mut self, i: usize) -> &mut SimBtl {
        &mut self.eps[i]
    }

    fn rank(&self, i: usize) -> Rank {
        i as Rank
    }

    fn alloc(&mut self, i: usize, data: &[u8]) -> LocalMem {
        let addr = self.memory(i).lock().unwrap().alloc_with(data);
        LocalMem {
            addr,
            len: data.len(),
        }
    }

    fn read(&self, i: usize, mem: LocalMem) -> Vec<u8> {
        self.memory(i)
            .lock()
            .unwrap()
            .read(mem.addr, mem.len)
            .to_vec()
    }

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
        let b = &mut self.eps[i];
        // SAFETY: the simulated get reaches `dst` by address through the
        // rank's SimMemory (bounds-checked), never through a pointer.
        unsafe {
            if alone {
                b.get_as(peer, remote, offset, dst, token, Pull::Alone)
            } else {
                b.get(peer, remote, offset, dst, token)
            }
        }
    }

    fn kill(&mut self, i: usize) {
        self.fabric.kill(i as Rank);
    }
}

gmpi_btl::conformance_tests!(sim_plain, || SimFixture::new(SimCfg::default()));
gmpi_btl::conformance_tests!(sim_queued, || SimFixture::new(SimCfg {
    queued: true,
    ..SimCfg::default()
}));
gmpi_btl::conformance_tests!(sim_bounded, || SimFixture::new(SimCfg {
    capacity: Some(4),
    ..SimCfg::default()
}));
gmpi_btl::conformance_tests!(sim_bounded_queued_seeded, || SimFixture::new(SimCfg {
    queued: true,
    capacity: Some(3),
    seed: Some(0x5eed),
    ..SimCfg::default()
}));
gmpi_btl::conformance_tests!(sim_without_get, || SimFixture::new(SimCfg {
    no_get: true,
    ..SimCfg::default()
}));

/// One rank talking to itself; gets (refused) target real memory.
struct LoopbackFixture {
    btl: Loopback,
    mem: Vec<Box<[u8]>>,
}

impl Fixture for LoopbackFixture {
    type Btl = Loopback;

    fn name(&self) -> String {
        "loopback".into()
    }

    fn support(&self) -> Support {
        Support {
            back_pressure: Can::no("the loopback queue is unbounded"),
            get: Can::no("no get: a rank's messages to itself are copied"),
            peer_failure: Can::no("a rank has no peer to lose through loopback"),
            wait_sleeps: Can::no("nothing arrives from outside: wait returns at once"),
        }
    }

    fn endpoints(&self) -> usize {
        1
    }

    fn btl(&mut self, _: usize) -> &mut Loopback {
        &mut self.btl
    }

    fn rank(&self, _: usize) -> Rank {
        3
    }

    fn alloc(&mut self, _: usize, data: &[u8]) -> LocalMem {
        let mut b: Box<[u8]> = data.into();
        let mem = LocalMem::of(&mut b);
        self.mem.push(b);
        mem
    }

    fn read(&self, _: usize, mem: LocalMem) -> Vec<u8> {
        let b = self
            .mem
            .iter()
            .find(|b| b.as_ptr() as u64 == mem.addr && b.len() == mem.len)
            .expect("memory from alloc");
        b.to_vec()
    }

    fn get(
        &mut self,
        _: usize,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
        alone: bool,
    ) -> Result<Submit, BtlError> {
        // SAFETY: `dst` lies in a buffer of `self.mem`, kept until the
        // fixture is dropped, and the suite reads it only once the get is
        // over (`Fixture::get`).
        unsafe {
            if alone {
                self.btl
                    .get_as(peer, remote, offset, dst, token, Pull::Alone)
            } else {
                self.btl.get(peer, remote, offset, dst, token)
            }
        }
    }

    fn kill(&mut self, _: usize) {
        unreachable!("loopback has no peer to kill")
    }
}

gmpi_btl::conformance_tests!(loopback, || LoopbackFixture {
    btl: Loopback::new(3),
    mem: Vec::new(),
});
