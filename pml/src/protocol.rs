//! Protocol selection: one pure function of the message and the transport.
//!
//! Everything that decides *how* a message travels lives here, so it can be
//! read, traced (`GMPI_LOG=pml=debug`) and tested on its own.

use gmpi_btl::Capabilities;
use gmpi_gpu::MemKind;

use crate::PmlConfig;

/// The send modes of MPI that change the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SendMode {
    /// `MPI_Send`: may complete before the receive is matched.
    #[default]
    Standard,
    /// `MPI_Ssend`: completes only once the receive is matched.
    Synchronous,
}

/// How one message travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Header and payload in one fragment.
    Eager,
    /// Eager, and the receiver acknowledges the match.
    EagerSync,
    /// Request-to-send with a memory descriptor; the receiver pulls the bytes
    /// with the transport's single-copy `get`, then sends FIN.
    RndvGet,
    /// Request-to-send; the receiver answers clear-to-send and the sender
    /// streams fragments (from device memory: each chunk staged through a
    /// pinned host buffer, `rndv/staged`).
    RndvPipelined,
    /// Device memory to a peer on this node: the request-to-send carries the
    /// allocation's CUDA IPC handle; the receiver maps it, copies device to
    /// device (or device to host), then sends FIN.
    RndvIpc,
}

impl Protocol {
    /// Name used in logs.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Eager => "eager",
            Protocol::EagerSync => "eager/sync",
            Protocol::RndvGet => "rndv/get",
            Protocol::RndvPipelined => "rndv/pipelined",
            Protocol::RndvIpc => "rndv/cuda-ipc",
        }
    }

    /// The name of this protocol for a message from memory of `kind`, as
    /// `GMPI_LOG=pml=debug` prints it: the device variants name how the
    /// bytes leave the GPU (`eager/gdrcopy`, `eager/cuda-copy`,
    /// `rndv/gpudirect`, `rndv/staged`); `copy` is the gpu layer's copy path
    /// name for small messages.
    pub fn describe(self, kind: MemKind, copy: &'static str) -> &'static str {
        if kind.is_host() {
            return self.name();
        }
        match (self, copy) {
            (Protocol::Eager | Protocol::EagerSync, "gdrcopy") => "eager/gdrcopy",
            (Protocol::Eager | Protocol::EagerSync, _) => "eager/cuda-copy",
            (Protocol::RndvGet, _) => "rndv/gpudirect",
            (Protocol::RndvPipelined, _) => "rndv/staged",
            (Protocol::RndvIpc, _) => "rndv/cuda-ipc",
        }
    }
}

/// The eager limit in force for a transport under a configuration.
pub fn eager_limit(caps: &Capabilities, cfg: &PmlConfig) -> usize {
    let hdr = crate::header::MAX_HDR;
    let cap = caps.max_send_size.saturating_sub(hdr);
    cfg.eager_limit.unwrap_or(caps.eager_limit).min(cap)
}

/// Choose the protocol for a message of `len` bytes from memory of kind `src`
/// sent in `mode` over a transport with capabilities `caps`.
pub fn choose(
    len: usize,
    src: MemKind,
    mode: SendMode,
    caps: &Capabilities,
    cfg: &PmlConfig,
) -> Protocol {
    let sync = mode == SendMode::Synchronous;
    let eager = if sync {
        Protocol::EagerSync
    } else {
        Protocol::Eager
    };
    if !src.is_host() {
        // Device and managed memory: small messages are copied out through
        // a bounce buffer and sent eagerly; large device buffers go by CUDA
        // IPC on one node or GPUDirect where the transport can register
        // GPU memory; everything else is staged in chunks.
        let g = &cfg.gpu;
        if len <= eager_limit(caps, cfg).min(g.eager_limit) {
            return eager;
        }
        let device = matches!(src, MemKind::Device { .. });
        if device && caps.cuda_ipc && g.ipc && len >= g.ipc_threshold {
            return Protocol::RndvIpc;
        }
        if device && caps.gpudirect && caps.get && cfg.use_get {
            return Protocol::RndvGet;
        }
        return Protocol::RndvPipelined;
    }
    if len <= eager_limit(caps, cfg) {
        return eager;
    }
    let get_threshold = cfg.get_threshold.unwrap_or(caps.get_threshold);
    if caps.get && cfg.use_get && src == MemKind::Host && len >= get_threshold {
        Protocol::RndvGet
    } else {
        Protocol::RndvPipelined
    }
}

/// Payload bytes per pipelined fragment on a transport, for a message from
/// memory of `kind` (device memory is staged in `GMPI_GPU_PIPELINE_CHUNK`
/// pieces, or smaller where the transport's fragments are).
pub fn chunk_size(caps: &Capabilities, cfg: &PmlConfig, kind: MemKind) -> usize {
    let room = caps
        .max_send_size
        .saturating_sub(crate::header::MAX_HDR)
        .max(1);
    let c = cfg.pipeline_chunk.map_or(room, |c| c.clamp(1, room));
    if kind.is_host() {
        c
    } else {
        c.min(cfg.gpu.pipeline_chunk.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_memory() {
        let cfg = PmlConfig::default();
        let dev = MemKind::Device { ordinal: 0 };
        let std = SendMode::Standard;
        let mut c = caps(true);
        c.eager_limit = 1 << 20;
        c.max_send_size = 2 << 20;
        let lim = cfg.gpu.eager_limit;
        assert_eq!(choose(lim, dev, std, &c, &cfg), Protocol::Eager);
        assert_eq!(choose(lim + 1, dev, std, &c, &cfg), Protocol::RndvPipelined);
        assert_eq!(
            choose(lim + 1, MemKind::Managed, std, &c, &cfg),
            Protocol::RndvPipelined
        );
        c.cuda_ipc = true;
        assert_eq!(choose(lim + 1, dev, std, &c, &cfg), Protocol::RndvIpc);
        assert_eq!(
            choose(1 << 24, MemKind::Managed, std, &c, &cfg),
            Protocol::RndvPipelined,
            "no IPC for managed memory"
        );
        let high = PmlConfig {
            gpu: gmpi_gpu::GpuConfig {
                ipc_threshold: 1 << 20,
                ..Default::default()
            },
            ..PmlConfig::default()
        };
        assert_eq!(
            choose(1 << 19, dev, std, &c, &high),
            Protocol::RndvPipelined
        );
        assert_eq!(choose(1 << 20, dev, std, &c, &high), Protocol::RndvIpc);
        c.cuda_ipc = false;
        c.gpudirect = true;
        assert_eq!(choose(1 << 20, dev, std, &c, &cfg), Protocol::RndvGet);
        assert_eq!(
            Protocol::RndvGet.describe(dev, "cuda-copy"),
            "rndv/gpudirect"
        );
        assert_eq!(Protocol::Eager.describe(dev, "gdrcopy"), "eager/gdrcopy");
        assert_eq!(
            Protocol::EagerSync.describe(dev, "cuda-copy"),
            "eager/cuda-copy"
        );
        assert_eq!(Protocol::RndvPipelined.describe(dev, "x"), "rndv/staged");
        assert_eq!(
            Protocol::RndvPipelined.describe(MemKind::Host, "x"),
            "rndv/pipelined"
        );
        assert_eq!(chunk_size(&c, &cfg, dev), cfg.gpu.pipeline_chunk);
    }

    fn caps(get: bool) -> Capabilities {
        Capabilities {
            name: "t",
            eager_limit: 4096,
            max_send_size: 32 * 1024,
            get,
            put: false,
            exclusivity: 1,
            get_threshold: 8192,
            cuda_ipc: false,
            gpudirect: false,
        }
    }

    #[test]
    fn thresholds() {
        let cfg = PmlConfig::default();
        let c = caps(true);
        assert_eq!(
            choose(0, MemKind::Host, SendMode::Standard, &c, &cfg),
            Protocol::Eager
        );
        assert_eq!(
            choose(4096, MemKind::Host, SendMode::Standard, &c, &cfg),
            Protocol::Eager
        );
        assert_eq!(
            choose(10, MemKind::Host, SendMode::Synchronous, &c, &cfg),
            Protocol::EagerSync
        );
        assert_eq!(
            choose(4097, MemKind::Host, SendMode::Standard, &c, &cfg),
            Protocol::RndvPipelined
        );
        assert_eq!(
            choose(8192, MemKind::Host, SendMode::Standard, &c, &cfg),
            Protocol::RndvGet
        );
        assert_eq!(
            choose(
                1 << 20,
                MemKind::Host,
                SendMode::Standard,
                &caps(false),
                &cfg
            ),
            Protocol::RndvPipelined
        );
        let nog = PmlConfig {
            use_get: false,
            ..PmlConfig::default()
        };
        assert_eq!(
            choose(1 << 20, MemKind::Host, SendMode::Standard, &c, &nog),
            Protocol::RndvPipelined
        );
        let small = PmlConfig {
            eager_limit: Some(16),
            ..PmlConfig::default()
        };
        assert_eq!(
            choose(17, MemKind::Host, SendMode::Standard, &c, &small),
            Protocol::RndvPipelined
        );
        assert_eq!(
            chunk_size(&c, &cfg, MemKind::Host),
            32 * 1024 - crate::header::MAX_HDR
        );
    }
}
