//! Setting up btl-ib at `MPI_Init`: open a verbs port (feature `ib`),
//! or say why there is none. Every rank publishes `gmpi-ib-<rank>`: its
//! card, or `none: <why>`; a pair of ranks on different nodes uses ib only
//! when both published a card (each side decides alike), otherwise tcp.
//! Once connected, the btl learns whether it registers GPU memory
//! (GPUDirect RDMA: `gmpi_btl_ib::gpudirect`, from the gpu layer's and the
//! NIC's answers and `GMPI_IB_GPUDIRECT`).

use gmpi_btl::Btl;
use gmpi_gpu::Gpu;

/// The card value of a rank without ib.
pub(crate) const NONE: &str = "none";

/// Whether a published value is a card.
pub(crate) fn is_card(v: &str) -> bool {
    v != NONE
}

/// A rank's ib transport before its peers' cards are known.
pub(crate) trait Pending {
    /// The card to publish.
    fn card(&self) -> String;
    /// Connect to `peer`.
    fn add_peer(&mut self, peer: u32, card: &str) -> Result<(), String>;
    /// Decide GPUDirect RDMA (`gmpi_btl_ib::gpudirect`) as `want`
    /// (`GMPI_IB_GPUDIRECT`) allows, from what `gpu` answers.
    fn gpudirect(&mut self, gpu: &Gpu, want: gmpi_btl_ib::gpudirect::Want);
    /// The btl, once connected.
    fn into_btl(self: Box<Self>) -> Box<dyn Btl>;
}

#[cfg(feature = "ib")]
impl Pending for gmpi_btl_ib::IbBtl<gmpi_btl_ib::verbs::VerbsFabric> {
    fn card(&self) -> String {
        gmpi_btl_ib::IbBtl::card(self)
    }
    fn add_peer(&mut self, peer: u32, card: &str) -> Result<(), String> {
        gmpi_btl_ib::IbBtl::add_peer(self, peer, card)
    }
    fn gpudirect(&mut self, gpu: &Gpu, want: gmpi_btl_ib::gpudirect::Want) {
        let d = self.decide_gpudirect(gpu.gpudirect_probe(), want, std::path::Path::new("/sys"));
        tracing::debug!(target: "btl", "ib: GPUDirect RDMA on {}: {}", self.port().device, d.describe());
    }
    fn into_btl(self: Box<Self>) -> Box<dyn Btl> {
        self
    }
}

/// Open ib for `rank` of `size`, reaching `peers` (ranks on other nodes),
/// on the port `devices` (`GMPI_IB_DEVICES`) names, else the one nearest
/// the GPU at `gpu_bus_id`, else nearest the CPU.
#[cfg(feature = "ib")]
pub(crate) fn open(
    rank: u32,
    size: u32,
    peers: &[u32],
    devices: Option<&str>,
    gpu_bus_id: Option<&str>,
) -> Result<Box<dyn Pending>, String> {
    use gmpi_btl_ib::verbs;
    let mut want = verbs::Want::default();
    if let Some(d) = devices {
        want.devices = Some(verbs::parse_devices(d)?);
    }
    if let Ok(v) = std::env::var("GMPI_IB_TIMEOUT") {
        want.timeout = v
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|t| (1..=31).contains(t))
            .ok_or_else(|| format!("GMPI_IB_TIMEOUT={v:?}: expected 1 to 31"))?;
    }
    let f = verbs::open(&want, &verbs::near(gpu_bus_id))?;
    let mut cfg = gmpi_btl_ib::IbConfig::default();
    let count = |k: &str| -> Result<Option<u32>, String> {
        match std::env::var(k) {
            Ok(v) => v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|&b| b > 0)
                .map(Some)
                .ok_or_else(|| format!("{k}={v:?}: expected a positive count")),
            Err(_) => Ok(None),
        }
    };
    cfg.recv_buffers = count("GMPI_IB_RECV_BUFFERS")?;
    if let Some(n) = count("GMPI_IB_MAX_READS")? {
        cfg.max_reads = n;
    }
    if let Some(n) = count("GMPI_IB_READ_CHUNK")? {
        cfg.read_chunk = n as usize;
    }
    let mut limits = gmpi_btl_ib::rcache::Limits::default();
    if let Some(mb) = count("GMPI_IB_RCACHE_MB")? {
        limits.bytes = u64::from(mb) << 20;
    }
    // GPU memory: a registration through a dma-buf may keep a freed
    // allocation's pages from going back to the driver until its entry is
    // evicted (nothing tells the cache about cudaFree), so fewer unused
    // bytes are kept than for host memory.
    let mut gpu_limits = gmpi_btl_ib::rcache::Limits {
        entries: 64,
        bytes: 256 << 20,
    };
    if let Ok(v) = std::env::var("GMPI_IB_RCACHE_GPU_MB") {
        gpu_limits.bytes = v.trim().parse::<u64>().map_err(|_| {
            format!("GMPI_IB_RCACHE_GPU_MB={v:?}: expected a count of MiB (0: none kept)")
        })? << 20;
    }
    let cache = match std::env::var("GMPI_IB_RCACHE").as_deref().map(str::trim) {
        Err(_) | Ok("on" | "auto" | "1" | "true") => true,
        Ok("off" | "0" | "false") => false,
        Ok(v) => return Err(format!("GMPI_IB_RCACHE={v:?}: expected on or off")),
    };
    let mut b = gmpi_btl_ib::IbBtl::new(rank, size, f, cfg, peers)?;
    if cache {
        // Device memory needs no watch: its entries are checked by buffer id.
        b.set_device_cache(gpu_limits);
        match gmpi_btl_ib::memwatch::Uffd::open() {
            Ok(w) => {
                tracing::debug!(target: "btl", "ib: registration cache on ({}, {} MiB unused at most)", w.describe(), limits.bytes >> 20);
                b.set_memwatch(Box::new(w), limits);
            }
            Err(e) => {
                tracing::debug!(target: "btl", "ib: registration cache of host memory off ({e}): each rendezvous registers its memory (GPU memory stays cached)")
            }
        }
    }
    Ok(Box::new(b))
}

/// Without feature `ib` there is no verbs transport.
#[cfg(not(feature = "ib"))]
pub(crate) fn open(
    _: u32,
    _: u32,
    _: &[u32],
    _: Option<&str>,
    _: Option<&str>,
) -> Result<Box<dyn Pending>, String> {
    Err("this gmpi was built without InfiniBand/RoCE support (cargo feature `ib`)".into())
}
