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
    /// streams fragments.
    RndvPipelined,
}

impl Protocol {
    /// Name used in logs.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Eager => "eager",
            Protocol::EagerSync => "eager/sync",
            Protocol::RndvGet => "rndv/get",
            Protocol::RndvPipelined => "rndv/pipelined",
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
    if len <= eager_limit(caps, cfg) && src.is_host_accessible() {
        return if sync {
            Protocol::EagerSync
        } else {
            Protocol::Eager
        };
    }
    let get_threshold = cfg.get_threshold.unwrap_or(caps.get_threshold);
    if caps.get && cfg.use_get && src == MemKind::Host && len >= get_threshold {
        Protocol::RndvGet
    } else {
        Protocol::RndvPipelined
    }
}

/// Payload bytes per pipelined fragment on a transport.
pub fn chunk_size(caps: &Capabilities, cfg: &PmlConfig) -> usize {
    let room = caps
        .max_send_size
        .saturating_sub(crate::header::MAX_HDR)
        .max(1);
    cfg.pipeline_chunk.map_or(room, |c| c.clamp(1, room))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(get: bool) -> Capabilities {
        Capabilities {
            name: "t",
            eager_limit: 4096,
            max_send_size: 32 * 1024,
            get,
            put: false,
            exclusivity: 1,
            get_threshold: 8192,
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
        assert_eq!(chunk_size(&c, &cfg), 32 * 1024 - crate::header::MAX_HDR);
    }
}
