//! Configuration: `gmpi.toml` (the current directory first, then
//! `$XDG_CONFIG_HOME/gmpi/gmpi.toml`, else `~/.config/gmpi/gmpi.toml`), then
//! `GMPI_*` environment variables, which win. Sizes accept `K`, `M`, `G`
//! suffixes (powers of two).
//!
//! | key (`gmpi.toml`) | environment | meaning | default |
//! |---|---|---|---|
//! | `eager_limit` | `GMPI_EAGER_LIMIT` | largest message sent eagerly | the transport's (shm: 64 KiB) |
//! | `get_threshold` | `GMPI_GET_THRESHOLD` | smallest message sent by single-copy get | the transport's (shm: 8 KiB) |
//! | `pipeline_chunk` | `GMPI_PIPELINE_CHUNK` | fragment size of the pipelined rendezvous | the transport's largest fragment |
//! | `cma` | `GMPI_CMA` | use `process_vm_readv` single copy (`true`/`false`) | `true` |
//! | `rma_rdma` | `GMPI_RMA_RDMA` | one-sided windows between nodes: put and get by RDMA WRITE and READ where a transport offers them (ib), straight into the target's memory with no call of the target; off: every operation is an active message to the target's agent | `true` |
//! | `shm_ring_bytes` | `GMPI_SHM_RING_BYTES` | bytes per shared-memory ring | automatic (memory bound) |
//! | `shm_max_frag` | `GMPI_SHM_MAX_FRAG` | largest shared-memory fragment | 64 KiB + 120 (the eager limit and any pml header) |
//! | `shm_coop` | `GMPI_SHM_COOP` | cooperative single copy: from `shm_coop_min` bytes the sender, while inside MPI, writes part of a message (`process_vm_writev`) as the receiver reads the rest (below 1 MiB, not for a collective's receive that is reduced right away) | `true`, `false` when oversubscribed (more local ranks than the CPUs in the union of their affinity masks) |
//! | `shm_coop_min` | `GMPI_SHM_COOP_MIN` | smallest message copied cooperatively | 128 KiB |
//! | `shm_coop_chunk` | `GMPI_SHM_COOP_CHUNK` | the unit sender and receiver of a cooperative copy claim | 128 KiB |
//! | `spin` | `GMPI_SPIN` | empty polls before yielding | 2000 (5 when oversubscribed) |
//! | `yields` | `GMPI_YIELDS` | yields before blocking (skipped for 20 ms after a yield that took 20 µs or more, unless oversubscribed) | 100 (4 when oversubscribed) |
//! | `block_ms` | `GMPI_BLOCK_MS` | longest single sleep while idle | 100; a rank with both shm and tcp peers sleeps in shm while a tcp watcher thread wakes it on socket readiness (capped at 1 only where that thread cannot start) |
//! | `log` | `GMPI_LOG` | tracing filter, e.g. `pml=debug`, `coll=debug` | off (warnings) |
//! | `coll_shm` | `GMPI_COLL_SHM` | barrier, bcast and small reductions of single-node communicators through shared memory | `true` |
//! | `coll_shm_max` | `GMPI_COLL_SHM_MAX` | largest message those shared-memory collectives carry in one slot | 16 KiB |
//! | `coll_shm_pipeline_max` | `GMPI_COLL_SHM_PIPELINE_MAX` | bcast, reduce, allreduce, allgather (per rank) and reduce-scatter (the whole input) above `coll_shm_max` go through shared memory in chunks up to this size (0: never) | 64 MiB |
//! | `coll_shm_copy_min` | `GMPI_COLL_SHM_COPY_MIN` | bcast, gather, scatter, alltoall and alltoallv of single-node communicators too large for the area's slots (`coll_shm_max`, or in chunks up to `coll_shm_pipeline_max`) whose blocks are at least this size (bcast and gather below 128 KiB), allgather whose blocks are at least half of it: each rank says in shared memory where its data lies and the others copy it straight from there (`process_vm_readv`; where every rank can, see `cma`) | 16 KiB |
//! | `bcast_large` | `GMPI_BCAST_LARGE` | bcast: binomial tree below, scatter + ring allgather from here | 128 KiB |
//! | `allreduce_large` | `GMPI_ALLREDUCE_LARGE` | allreduce: recursive doubling below, ring reduce-scatter + allgather from here | 64 KiB |
//! | `allgather_large` | `GMPI_ALLGATHER_LARGE` | allgather: Bruck below (total bytes), ring from here | 64 KiB |
//! | `alltoall_large` | `GMPI_ALLTOALL_LARGE` | alltoall: all exchanges at once below (bytes per peer), pairwise from here | 8 KiB |
//! | `simd` | `GMPI_SIMD` | widest vector unit of the reduction kernels: `auto` (the widest this processor has), `avx512`, `avx2` or `base` (SSE2 on x86-64); `avx2` suits processors that lower their clock for 512-bit work | `auto` |
//! | `coll_check` | `GMPI_COLL_CHECK` | check that every rank passed the same root, op and size to each collective (one extra exchange per call) | `false` |
//! | `btl` | `GMPI_BTL` | transports allowed, comma-separated (`self,tcp` sends even same-node peers over tcp; `shm` off also turns off the shared-memory collectives; `ib` is used between nodes where both ranks have a verbs port, in a build with feature `ib`) | `self,shm,tcp,ib` |
//! | `ib_devices` | `GMPI_IB_DEVICES` | ib: verbs ports to use, in order of preference (`mlx5_0:1,rxe0`) | an active port, a RoCE one of this network namespace first |
//! | `tcp_if` | `GMPI_TCP_IF` | tcp: interface names and/or CIDR blocks to listen on, comma-separated (`eth1`, `10.1.0.0/16`) | every non-loopback IPv4 address (loopback if none) |
//! | `tcp_max_frag` | `GMPI_TCP_MAX_FRAG` | tcp: largest fragment, and so the pipelined rendezvous chunk | 128 KiB |
//! | `node_name` | `GMPI_NODE_NAME` | the node identity ranks compare to find same-node peers (for tests: fake several nodes on one host) | the hostname |
//! | `cuda` | `GMPI_CUDA` | `auto`: use CUDA when `libcuda` loads and has a device; `on`: fail at `MPI_Init` if it cannot; `off`: never load it (every buffer is host memory) | `auto` |
//! | `gpu_eager_limit` | `GMPI_GPU_EAGER_LIMIT` | largest device message sent eagerly (copied through a pinned bounce buffer, or GDRCopy) | 8 KiB |
//! | `gpu_ipc_threshold` | `GMPI_GPU_IPC_THRESHOLD` | smallest device message sent by CUDA IPC to a rank of the same node | 0 (every device message above the eager limit) |
//! | `gpu_ipc` | `GMPI_GPU_IPC` | use CUDA IPC at all | `true` |
//! | `gpu_host_cache` | `GMPI_GPU_HOST_CACHE` | remember buffers the CUDA driver called host memory, so they cost no driver call again, where they lie in static data, the `malloc` heap or the main stack (addresses that never become device memory); off: every host buffer is asked about | `true` |
//! | `gpu_pipeline_chunk` | `GMPI_GPU_PIPELINE_CHUNK` | chunk of the staged protocol (device memory where neither IPC nor GPUDirect applies): each asynchronous copy through pinned memory, pulled by the receiver's get where the transport has one (shm); streamed in the transport's fragments where not (tcp) | 512 KiB |
//! | `gpu_pipeline_depth` | `GMPI_GPU_PIPELINE_DEPTH` | staged chunks of one message in flight at once (1 to 64) | 4 |
//! | — | `GMPI_GPU_BIND` | `none` or `local-rank`: at `MPI_Init`, make GPU `local_rank % gpus` current (set by `gmpirun --gpu-bind`) | `none` |
//! | — | `GMPI_JOB_SECRET` | 64 hex digits: the per-job secret tcp connections prove they hold; `gmpirun` sets it; without it (ranks started by `srun` or Hydra) rank 0 makes one and shares it through PMI | from `gmpirun` |

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

/// A size in `gmpi.toml`: an integer, or a string with a `K`/`M`/`G` suffix.
fn de_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Int(u64),
        Text(String),
    }
    match Option::<Size>::deserialize(d)? {
        None => Ok(None),
        Some(Size::Int(n)) => usize::try_from(n)
            .map(Some)
            .map_err(serde::de::Error::custom),
        Some(Size::Text(t)) => parse_size(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

/// The configuration in force.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Largest eager message.
    #[serde(deserialize_with = "de_size")]
    pub eager_limit: Option<usize>,
    /// Smallest single-copy message.
    #[serde(deserialize_with = "de_size")]
    pub get_threshold: Option<usize>,
    /// Pipelined fragment size.
    #[serde(deserialize_with = "de_size")]
    pub pipeline_chunk: Option<usize>,
    /// Allow CMA single copy.
    pub cma: bool,
    /// Windows between nodes: put and get by RDMA where a transport can.
    pub rma_rdma: bool,
    /// Shared-memory ring size.
    #[serde(deserialize_with = "de_size")]
    pub shm_ring_bytes: Option<usize>,
    /// Largest shared-memory fragment.
    #[serde(deserialize_with = "de_size")]
    pub shm_max_frag: Option<usize>,
    /// Cooperative single copy (`None`: on unless oversubscribed).
    pub shm_coop: Option<bool>,
    /// Smallest cooperatively copied message.
    #[serde(deserialize_with = "de_size")]
    pub shm_coop_min: Option<usize>,
    /// Chunk of a cooperative copy.
    #[serde(deserialize_with = "de_size")]
    pub shm_coop_chunk: Option<usize>,
    /// Empty polls before yielding.
    pub spin: Option<u32>,
    /// Yields before blocking.
    pub yields: Option<u32>,
    /// Longest sleep when idle, in milliseconds.
    pub block_ms: u64,
    /// Tracing filter.
    pub log: Option<String>,
    /// Shared-memory collectives for single-node communicators.
    pub coll_shm: bool,
    /// Largest shared-memory collective message.
    #[serde(deserialize_with = "de_size")]
    pub coll_shm_max: Option<usize>,
    /// Largest bcast, reduce, allreduce or allgather (per rank) through
    /// shared memory in chunks.
    #[serde(deserialize_with = "de_size")]
    pub coll_shm_pipeline_max: Option<usize>,
    /// Smallest block of a bcast, gather, scatter, allgather or alltoall
    /// copied straight from its owner's memory (CMA).
    #[serde(deserialize_with = "de_size")]
    pub coll_shm_copy_min: Option<usize>,
    /// Bcast: scatter + allgather from this size.
    #[serde(deserialize_with = "de_size")]
    pub bcast_large: Option<usize>,
    /// Allreduce: ring from this size.
    #[serde(deserialize_with = "de_size")]
    pub allreduce_large: Option<usize>,
    /// Allgather: ring from this total size.
    #[serde(deserialize_with = "de_size")]
    pub allgather_large: Option<usize>,
    /// Alltoall: pairwise from this size per peer.
    #[serde(deserialize_with = "de_size")]
    pub alltoall_large: Option<usize>,
    /// Widest vector unit of the reduction kernels (`auto`, `avx512`,
    /// `avx2`, `base`).
    pub simd: String,
    /// Check collective arguments across ranks.
    pub coll_check: bool,
    /// Transports allowed (`self`, `shm`, `tcp`, `ib`).
    #[serde(deserialize_with = "de_btls")]
    pub btl: Vec<String>,
    /// tcp: interfaces and CIDR blocks to listen on.
    pub tcp_if: Option<String>,
    /// ib: ports to use (`GMPI_IB_DEVICES`).
    pub ib_devices: Option<String>,
    /// tcp: largest fragment.
    #[serde(deserialize_with = "de_size")]
    pub tcp_max_frag: Option<usize>,
    /// Node identity override.
    pub node_name: Option<String>,
    /// `auto`, `on` or `off`.
    pub cuda: String,
    /// Largest device message sent eagerly.
    #[serde(deserialize_with = "de_size")]
    pub gpu_eager_limit: Option<usize>,
    /// Smallest device message sent by CUDA IPC.
    #[serde(deserialize_with = "de_size")]
    pub gpu_ipc_threshold: Option<usize>,
    /// Whether CUDA IPC may be used.
    pub gpu_ipc: bool,
    /// Whether host answers of the CUDA driver are cached.
    pub gpu_host_cache: bool,
    /// Chunk of the staged device protocol.
    #[serde(deserialize_with = "de_size")]
    pub gpu_pipeline_chunk: Option<usize>,
    /// Staged chunks of one message in flight.
    pub gpu_pipeline_depth: Option<usize>,
}

impl Config {
    /// The gpu layer's configuration.
    pub fn gpu(&self) -> Result<gmpi_gpu::GpuConfig, String> {
        Ok(gmpi_gpu::GpuConfig {
            mode: self.cuda.parse().map_err(|e| format!("cuda: {e}"))?,
            host_cache: self.gpu_host_cache,
        })
    }

    /// The device protocols' configuration (`GMPI_GPU_*`); `gdrcopy`: the
    /// gpu layer copies small messages by GDRCopy.
    pub fn device(&self, gdrcopy: bool) -> gmpi_pml::DeviceConfig {
        let d = gmpi_pml::DeviceConfig::default();
        gmpi_pml::DeviceConfig {
            eager_limit: self.gpu_eager_limit.unwrap_or(d.eager_limit),
            ipc_threshold: self.gpu_ipc_threshold.unwrap_or(d.ipc_threshold),
            ipc: self.gpu_ipc,
            pipeline_chunk: self.gpu_pipeline_chunk.unwrap_or(d.pipeline_chunk).max(1),
            pipeline_depth: self.gpu_pipeline_depth.unwrap_or(d.pipeline_depth).max(1),
            gdrcopy,
        }
    }
}

/// The transports `GMPI_BTL` may name.
pub const BTLS: [&str; 4] = ["self", "shm", "tcp", "ib"];

/// Parse a transport list (`self,tcp`): known names, `self` included.
pub fn parse_btls(s: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = s
        .split(',')
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    if let Some(bad) = list.iter().find(|t| !BTLS.contains(&t.as_str())) {
        return Err(format!(
            "unknown transport {bad:?} in {s:?} (known: {})",
            BTLS.join(", ")
        ));
    }
    if !list.iter().any(|t| t == "self") {
        return Err(format!(
            "{s:?} lacks \"self\" (a rank sends to itself through it)"
        ));
    }
    Ok(list)
}

fn de_btls<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum List {
        Text(String),
        Items(Vec<String>),
    }
    let text = match List::deserialize(d)? {
        List::Text(t) => t,
        List::Items(v) => v.join(","),
    };
    parse_btls(&text).map_err(serde::de::Error::custom)
}

impl Default for Config {
    fn default() -> Self {
        Self {
            eager_limit: None,
            get_threshold: None,
            pipeline_chunk: None,
            cma: true,
            rma_rdma: true,
            shm_ring_bytes: None,
            shm_max_frag: None,
            shm_coop: None,
            shm_coop_min: None,
            shm_coop_chunk: None,
            spin: None,
            yields: None,
            block_ms: 100,
            cuda: "auto".into(),
            gpu_eager_limit: None,
            gpu_ipc_threshold: None,
            gpu_ipc: true,
            gpu_host_cache: true,
            gpu_pipeline_chunk: None,
            gpu_pipeline_depth: None,
            log: None,
            coll_shm: true,
            coll_shm_max: None,
            coll_shm_pipeline_max: None,
            coll_shm_copy_min: None,
            bcast_large: None,
            allreduce_large: None,
            allgather_large: None,
            alltoall_large: None,
            simd: "auto".into(),
            coll_check: false,
            btl: BTLS.iter().map(|s| s.to_string()).collect(),
            tcp_if: None,
            ib_devices: None,
            tcp_max_frag: None,
            node_name: None,
        }
    }
}

/// Parse a size: a number with an optional `K`, `M` or `G` suffix (KiB...).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix in {s:?} (use K, M or G)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    num.trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("not a size: {s:?}"))
}

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("not a boolean: {s:?}")),
    }
}

impl Config {
    /// The file that would be read, if any exists.
    pub fn file() -> Option<PathBuf> {
        let cwd = PathBuf::from("gmpi.toml");
        if cwd.is_file() {
            return Some(cwd);
        }
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))?;
        let p = base.join("gmpi").join("gmpi.toml");
        p.is_file().then_some(p)
    }

    /// Parse a `gmpi.toml` text.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Load: defaults, then the file, then the environment.
    pub fn load() -> Result<Self, String> {
        let mut c = match Self::file() {
            Some(p) => {
                let text =
                    std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                Self::from_toml(&text).map_err(|e| format!("{}: {e}", p.display()))?
            }
            None => Self::default(),
        };
        c.apply_env(|k| std::env::var(k).ok())?;
        Ok(c)
    }

    /// Apply `GMPI_*` overrides read through `get`.
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), String> {
        let size = |k: &str| -> Result<Option<usize>, String> {
            get(k)
                .map(|v| parse_size(&v).map_err(|e| format!("{k}: {e}")))
                .transpose()
        };
        let num = |k: &str| -> Result<Option<u64>, String> {
            get(k)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("{k}: not a number: {v:?}"))
                })
                .transpose()
        };
        if let Some(v) = size("GMPI_EAGER_LIMIT")? {
            self.eager_limit = Some(v);
        }
        if let Some(v) = size("GMPI_GET_THRESHOLD")? {
            self.get_threshold = Some(v);
        }
        if let Some(v) = size("GMPI_PIPELINE_CHUNK")? {
            self.pipeline_chunk = Some(v);
        }
        if let Some(v) = size("GMPI_SHM_RING_BYTES")? {
            self.shm_ring_bytes = Some(v);
        }
        if let Some(v) = size("GMPI_SHM_MAX_FRAG")? {
            self.shm_max_frag = Some(v);
        }
        if let Some(v) = size("GMPI_SHM_COOP_MIN")? {
            self.shm_coop_min = Some(v);
        }
        if let Some(v) = size("GMPI_SHM_COOP_CHUNK")? {
            self.shm_coop_chunk = Some(v);
        }
        if let Some(v) = get("GMPI_SHM_COOP") {
            self.shm_coop = Some(parse_bool(&v).map_err(|e| format!("GMPI_SHM_COOP: {e}"))?);
        }
        if let Some(v) = get("GMPI_CMA") {
            self.cma = parse_bool(&v).map_err(|e| format!("GMPI_CMA: {e}"))?;
        }
        if let Some(v) = get("GMPI_RMA_RDMA") {
            self.rma_rdma = parse_bool(&v).map_err(|e| format!("GMPI_RMA_RDMA: {e}"))?;
        }
        if let Some(v) = num("GMPI_SPIN")? {
            self.spin = Some(v.min(u64::from(u32::MAX)) as u32);
        }
        if let Some(v) = num("GMPI_YIELDS")? {
            self.yields = Some(v.min(u64::from(u32::MAX)) as u32);
        }
        if let Some(v) = num("GMPI_BLOCK_MS")? {
            self.block_ms = v.max(1);
        }
        for (k, slot) in [
            ("GMPI_COLL_SHM_MAX", &mut self.coll_shm_max),
            (
                "GMPI_COLL_SHM_PIPELINE_MAX",
                &mut self.coll_shm_pipeline_max,
            ),
            ("GMPI_COLL_SHM_COPY_MIN", &mut self.coll_shm_copy_min),
            ("GMPI_BCAST_LARGE", &mut self.bcast_large),
            ("GMPI_ALLREDUCE_LARGE", &mut self.allreduce_large),
            ("GMPI_ALLGATHER_LARGE", &mut self.allgather_large),
            ("GMPI_ALLTOALL_LARGE", &mut self.alltoall_large),
        ] {
            if let Some(v) = size(k)? {
                *slot = Some(v);
            }
        }
        for (k, slot) in [
            ("GMPI_GPU_EAGER_LIMIT", &mut self.gpu_eager_limit),
            ("GMPI_GPU_IPC_THRESHOLD", &mut self.gpu_ipc_threshold),
            ("GMPI_GPU_PIPELINE_CHUNK", &mut self.gpu_pipeline_chunk),
        ] {
            if let Some(v) = size(k)? {
                *slot = Some(v);
            }
        }
        if let Some(v) = get("GMPI_CUDA") {
            v.parse::<gmpi_gpu::CudaMode>()
                .map_err(|e| format!("GMPI_CUDA: {e}"))?;
            self.cuda = v;
        }
        if let Some(v) = get("GMPI_GPU_IPC") {
            self.gpu_ipc = parse_bool(&v).map_err(|e| format!("GMPI_GPU_IPC: {e}"))?;
        }
        if let Some(v) = get("GMPI_GPU_PIPELINE_DEPTH") {
            let n = v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=gmpi_pml::MAX_DEPTH).contains(n))
                .ok_or_else(|| {
                    format!(
                        "GMPI_GPU_PIPELINE_DEPTH: expected a count from 1 to {}, got {v:?}",
                        gmpi_pml::MAX_DEPTH
                    )
                })?;
            self.gpu_pipeline_depth = Some(n);
        }
        if let Some(v) = get("GMPI_GPU_HOST_CACHE") {
            self.gpu_host_cache =
                parse_bool(&v).map_err(|e| format!("GMPI_GPU_HOST_CACHE: {e}"))?;
        }
        if let Some(v) = get("GMPI_COLL_SHM") {
            self.coll_shm = parse_bool(&v).map_err(|e| format!("GMPI_COLL_SHM: {e}"))?;
        }
        if let Some(v) = get("GMPI_SIMD") {
            v.parse::<crate::op::SimdLimit>()
                .map_err(|e| format!("GMPI_SIMD: {e}"))?;
            self.simd = v;
        }
        if let Some(v) = get("GMPI_COLL_CHECK") {
            self.coll_check = parse_bool(&v).map_err(|e| format!("GMPI_COLL_CHECK: {e}"))?;
        }
        if let Some(v) = get("GMPI_LOG") {
            self.log = Some(v);
        }
        if let Some(v) = get("GMPI_BTL") {
            self.btl = parse_btls(&v).map_err(|e| format!("GMPI_BTL: {e}"))?;
        }
        if let Some(v) = get("GMPI_TCP_IF") {
            self.tcp_if = Some(v).filter(|v| !v.trim().is_empty());
        }
        if let Some(v) = get("GMPI_IB_DEVICES") {
            self.ib_devices = Some(v).filter(|v| !v.trim().is_empty());
        }
        if let Some(v) = size("GMPI_TCP_MAX_FRAG")? {
            self.tcp_max_frag = Some(v);
        }
        if let Some(v) = get("GMPI_NODE_NAME") {
            self.node_name = Some(v).filter(|v| !v.trim().is_empty());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("16k"), Ok(16384));
        assert_eq!(parse_size(" 2M "), Ok(2 << 20));
        assert!(parse_size("3x").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn file_then_env() {
        let mut c =
            Config::from_toml("eager_limit = 1024\ncma = false\nlog = \"pml=debug\"\n").unwrap();
        assert_eq!(c.eager_limit, Some(1024));
        assert!(!c.cma);
        c.apply_env(|k| match k {
            "GMPI_EAGER_LIMIT" => Some("8K".into()),
            "GMPI_CMA" => Some("on".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.eager_limit, Some(8192));
        assert!(c.cma);
        assert_eq!(
            (c.shm_coop, c.shm_coop_min, c.shm_coop_chunk),
            (None, None, None)
        );
        let mut c = Config::from_toml(
            "shm_coop = false
shm_coop_min = \"1M\"
",
        )
        .unwrap();
        assert_eq!((c.shm_coop, c.shm_coop_min), (Some(false), Some(1 << 20)));
        c.apply_env(|k| match k {
            "GMPI_SHM_COOP" => Some("yes".into()),
            "GMPI_SHM_COOP_CHUNK" => Some("64K".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!((c.shm_coop, c.shm_coop_chunk), (Some(true), Some(64 << 10)));
        assert!(c
            .apply_env(|k| (k == "GMPI_SHM_COOP").then(|| "maybe".into()))
            .is_err());
        assert!(
            Config::from_toml("eager_limt = 3").is_err(),
            "typos are reported"
        );
        assert!(c
            .apply_env(|k| (k == "GMPI_SPIN").then(|| "lots".into()))
            .is_err());
        assert_eq!(c.simd, "auto");
        c.apply_env(|k| (k == "GMPI_SIMD").then(|| "avx2".into()))
            .unwrap();
        assert_eq!(c.simd, "avx2");
        let err = c
            .apply_env(|k| (k == "GMPI_SIMD").then(|| "avx9".into()))
            .unwrap_err();
        assert!(err.contains("GMPI_SIMD"), "{err}");
    }

    #[test]
    fn transport_selection() {
        let mut c = Config::default();
        assert_eq!(c.btl, ["self", "shm", "tcp", "ib"]);
        c.apply_env(|k| (k == "GMPI_BTL").then(|| " self, TCP ".into()))
            .unwrap();
        assert_eq!(c.btl, ["self", "tcp"]);
        let e = c
            .apply_env(|k| (k == "GMPI_BTL").then(|| "self,udp".into()))
            .unwrap_err();
        assert!(e.contains("GMPI_BTL") && e.contains("udp"), "{e}");
        assert!(c
            .apply_env(|k| (k == "GMPI_BTL").then(|| "shm,tcp".into()))
            .unwrap_err()
            .contains("self"));
        let f =
            Config::from_toml("btl = \"self,shm\"\ntcp_if = \"eth1\"\ntcp_max_frag = \"64K\"\n")
                .unwrap();
        assert_eq!(f.btl, ["self", "shm"]);
        assert_eq!(f.tcp_if.as_deref(), Some("eth1"));
        assert_eq!(f.tcp_max_frag, Some(64 << 10));
        assert_eq!(
            Config::from_toml("btl = [\"self\", \"tcp\"]").unwrap().btl,
            ["self", "tcp"]
        );
        assert!(Config::from_toml("btl = \"tcp\"").is_err());
        c.apply_env(|k| (k == "GMPI_NODE_NAME").then(|| "fake-a".into()))
            .unwrap();
        assert_eq!(c.node_name.as_deref(), Some("fake-a"));
    }
}
