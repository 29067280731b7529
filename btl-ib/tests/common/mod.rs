//! What the model and verbs tests share: ranks connected by their cards,
//! and the conformance fixture over any [`Fabric`].

use gmpi_btl::conformance::{Fixture, HostBuffers, Support};
use gmpi_btl::{Btl, BtlError, LocalMem, MemDesc, Pull, Rank, Submit};
use gmpi_btl_ib::fabric::Fabric;
use gmpi_btl_ib::{IbBtl, IbConfig};

/// `n` ranks, rank r on `fabric(r)`, each connected to every other.
pub fn connect<F: Fabric>(
    n: u32,
    cfg: &IbConfig,
    mut fabric: impl FnMut(Rank) -> F,
) -> Vec<IbBtl<F>> {
    let mut btls: Vec<_> = (0..n)
        .map(|r| {
            let peers: Vec<Rank> = (0..n).filter(|&q| q != r).collect();
            IbBtl::new(r, n, fabric(r), cfg.clone(), &peers).expect("btl")
        })
        .collect();
    let cards: Vec<String> = btls.iter().map(|b| b.card()).collect();
    for (r, b) in btls.iter_mut().enumerate() {
        for (q, c) in cards.iter().enumerate() {
            if q != r {
                b.add_peer(q as Rank, c).expect("connect");
            }
        }
    }
    btls
}

/// Two connected endpoints; `kill` makes one fail the way its fabric can.
pub struct IbFixture<F: Fabric> {
    pub what: String,
    pub support: Support,
    /// Dropped before `mem` (fields drop in order): no get outlives it.
    pub btls: Vec<Option<IbBtl<F>>>,
    pub mem: HostBuffers,
    #[allow(clippy::type_complexity)]
    pub kill: Box<dyn FnMut(&mut Vec<Option<IbBtl<F>>>, usize)>,
}

impl<F: Fabric> Fixture for IbFixture<F> {
    type Btl = IbBtl<F>;

    fn name(&self) -> String {
        self.what.clone()
    }

    fn support(&self) -> Support {
        self.support.clone()
    }

    fn endpoints(&self) -> usize {
        2
    }

    fn btl(&mut self, i: usize) -> &mut Self::Btl {
        self.btls[i].as_mut().expect("a live endpoint")
    }

    fn rank(&self, i: usize) -> Rank {
        i as Rank
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
        let b = self.btl(i);
        // SAFETY: `dst` lies in a buffer of `self.mem`, freed only with the
        // fixture after the endpoints (field order), and the suite reads it
        // only once the get is over (`Fixture::get`).
        unsafe {
            if alone {
                b.get_as(peer, remote, offset, dst, token, Pull::Alone)
            } else {
                b.get(peer, remote, offset, dst, token)
            }
        }
    }

    fn kill(&mut self, i: usize) {
        (self.kill)(&mut self.btls, i);
    }
}
