//! Protocol selection: the one place that decides how a message travels.
//!
//! [`select`] is a pure function of what is known of a message (memory
//! kinds, size, send mode), the transport's [`Capabilities`] and the
//! [`PmlConfig`]; it returns a [`Plan`]: the protocol the sender starts, the
//! protocol it falls back to when that one's set-up or pull fails, the
//! chunk of a streamed transfer and the name the log prints. The receiver's
//! half, [`receive`], says how a matched rendezvous is completed into the
//! receive buffer's memory; `select` with a destination kind applies it, so
//! the two halves cannot disagree.
//!
//! [`PlanTable`] is `select` tabulated by size for one transport, memory
//! kind and mode (the table is exact: `select` only changes at the
//! thresholds it is built from). The pml keeps one per btl, kind and mode
//! and looks each message up in it; `gmpirun --doctor` and
//! `GMPI_LOG=pml=debug` print the same tables.
//!
//! Nothing outside this module chooses a protocol: the send and receive
//! paths only carry out a plan (`send.rs`, `recv.rs`, `rndv/`).

use std::fmt;

use gmpi_btl::Capabilities;
use gmpi_mem::MemKind;

use crate::wire::MAX_HDR;

/// The send modes of MPI that change the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum SendMode {
    /// `MPI_Send`: may complete before the receive is matched.
    #[default]
    Standard,
    /// `MPI_Ssend`: completes only once the receive is matched.
    Synchronous,
}

/// How one message travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Header and payload in one fragment.
    Eager,
    /// Eager, and the receiver acknowledges the match.
    EagerSync,
    /// Request-to-send with a memory descriptor; the receiver pulls the bytes
    /// with the transport's single-copy `get`, then sends FIN (`rndv/get.rs`).
    RndvGet,
    /// Request-to-send; the receiver answers clear-to-send and the sender
    /// streams fragments (`rndv/pipelined.rs`; from or into device memory
    /// each chunk is staged through host memory, `rndv/staged.rs`).
    RndvPipelined,
    /// Device memory to a peer on this node: the request-to-send carries the
    /// allocation's CUDA IPC handle; the receiver maps it, copies device to
    /// device (or device to host), then sends FIN (`rndv/cuda_ipc.rs`).
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

    /// The protocol this one falls back to when its set-up (registration,
    /// IPC export) fails at the sender, its pull fails at the receiver, or
    /// the receiver cannot take it: every rendezvous falls back to the
    /// pipelined one, which any pair of ranks can do.
    pub fn fallback(self) -> Option<Protocol> {
        match self {
            Protocol::RndvGet | Protocol::RndvIpc => Some(Protocol::RndvPipelined),
            Protocol::Eager | Protocol::EagerSync | Protocol::RndvPipelined => None,
        }
    }

    /// Whether the message goes in one fragment with its header.
    pub fn is_eager(self) -> bool {
        matches!(self, Protocol::Eager | Protocol::EagerSync)
    }

    /// The name of this protocol for a message between memory of kinds
    /// `src` and `dst` (`None`: not known yet), as `GMPI_LOG=pml=debug`
    /// prints it: the device variants name how the bytes leave or enter the
    /// GPU (`eager/gdrcopy`, `eager/cuda-copy`, `rndv/gpudirect`,
    /// `rndv/staged`).
    pub fn describe(self, src: MemKind, dst: Option<MemKind>, gdrcopy: bool) -> &'static str {
        let device = !src.is_host() || dst.is_some_and(|d| !d.is_host());
        if !device {
            return self.name();
        }
        match self {
            Protocol::Eager | Protocol::EagerSync if gdrcopy => "eager/gdrcopy",
            Protocol::Eager | Protocol::EagerSync => "eager/cuda-copy",
            Protocol::RndvGet => "rndv/gpudirect",
            Protocol::RndvPipelined => "rndv/staged",
            Protocol::RndvIpc => "rndv/cuda-ipc",
        }
    }
}

/// Tunables of the device-memory protocols (`GMPI_GPU_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Largest device message sent eagerly (copied through a bounce buffer).
    /// Its own setting, independent of the host eager limit: capped only by
    /// what one send of the transport carries ([`device_eager_limit`]).
    pub eager_limit: usize,
    /// Smallest device message sent by CUDA IPC between ranks of one node.
    pub ipc_threshold: usize,
    /// Whether CUDA IPC may be used at all.
    pub ipc: bool,
    /// Chunk of the staged protocol for device memory: what each
    /// asynchronous copy through pinned memory moves. Pulled by the
    /// receiver's get where the transport has one (`rndv/staged.rs`), else
    /// streamed in the transport's fragments.
    pub pipeline_chunk: usize,
    /// Staged chunks of one message in flight at once (copying out, offered,
    /// being pulled).
    pub pipeline_depth: usize,
    /// Small device messages are copied by GDRCopy (else `cuMemcpy`): only
    /// the protocols' names depend on it.
    pub gdrcopy: bool,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            eager_limit: 8 << 10,
            ipc_threshold: 0,
            ipc: true,
            pipeline_chunk: 512 << 10,
            pipeline_depth: 4,
            gdrcopy: false,
        }
    }
}

/// Tunables of the pml. `None` means "the btl's own value".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmlConfig {
    /// Override of the eager limit.
    pub eager_limit: Option<usize>,
    /// Override of the smallest message sent by rendezvous `get`.
    pub get_threshold: Option<usize>,
    /// Whether rendezvous may use `get` at all.
    pub use_get: bool,
    /// Override of the pipelined fragment size.
    pub pipeline_chunk: Option<usize>,
    /// The device-memory protocols.
    pub device: DeviceConfig,
}

impl Default for PmlConfig {
    fn default() -> Self {
        Self {
            eager_limit: None,
            get_threshold: None,
            use_get: true,
            pipeline_chunk: None,
            device: DeviceConfig::default(),
        }
    }
}

/// What is known of a message when its protocol is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    /// Where the data is.
    pub src: MemKind,
    /// Where it goes: `None` at the sender, which does not know; given, the
    /// plan includes the receiver's half ([`receive`]).
    pub dst: Option<MemKind>,
    /// Bytes.
    pub len: usize,
    /// Send mode.
    pub mode: SendMode,
}

/// How a message travels: what [`select`] decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The protocol (at the sender: the one it starts).
    pub protocol: Protocol,
    /// What it becomes if the protocol's set-up or pull fails
    /// ([`Protocol::fallback`]).
    pub fallback: Option<Protocol>,
    /// Payload bytes per fragment when the message is streamed.
    pub chunk: usize,
    /// The name the log and the doctor print ([`Protocol::describe`]).
    pub name: &'static str,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)?;
        if let Some(fb) = self.fallback {
            write!(f, " (else {})", fb.name())?;
        }
        Ok(())
    }
}

/// What a matched rendezvous offers its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// A memory descriptor the receiver may `get` (RNDV with a descriptor).
    Get,
    /// Nothing to pull: the sender streams on clear-to-send (RNDV without).
    Stream,
    /// A CUDA IPC descriptor (RNDV_IPC).
    Ipc,
}

impl Offer {
    /// What a sender starting `p` offers (`None` for eager protocols).
    pub fn of(p: Protocol) -> Option<Offer> {
        match p {
            Protocol::RndvGet => Some(Offer::Get),
            Protocol::RndvPipelined => Some(Offer::Stream),
            Protocol::RndvIpc => Some(Offer::Ipc),
            Protocol::Eager | Protocol::EagerSync => None,
        }
    }
}

/// The eager limit in force for a transport under a configuration.
pub fn eager_limit(caps: &Capabilities, cfg: &PmlConfig) -> usize {
    cfg.eager_limit
        .unwrap_or(caps.eager_limit)
        .min(send_room(caps))
}

/// The eager limit for device and managed memory: `GMPI_GPU_EAGER_LIMIT`,
/// whatever the host eager limit is, as long as one send of the transport
/// carries it.
pub fn device_eager_limit(caps: &Capabilities, cfg: &PmlConfig) -> usize {
    cfg.device.eager_limit.min(send_room(caps))
}

/// Payload bytes one send of the transport carries after the largest header.
fn send_room(caps: &Capabilities) -> usize {
    caps.max_send_size.saturating_sub(MAX_HDR)
}

/// Payload bytes per pipelined fragment on a transport, for a message from
/// memory of `kind` (device memory is staged in `GMPI_GPU_PIPELINE_CHUNK`
/// pieces, or smaller where the transport's fragments are).
fn chunk_size(caps: &Capabilities, cfg: &PmlConfig, kind: MemKind) -> usize {
    let room = send_room(caps).max(1);
    let c = cfg.pipeline_chunk.map_or(room, |c| c.clamp(1, room));
    if kind.is_host() {
        c
    } else {
        c.min(cfg.device.pipeline_chunk.max(1))
    }
}

/// The sender's protocol for `q` (its destination kind ignored).
fn sender_protocol(q: &Query, caps: &Capabilities, cfg: &PmlConfig) -> Protocol {
    let eager = match q.mode {
        SendMode::Standard => Protocol::Eager,
        SendMode::Synchronous => Protocol::EagerSync,
    };
    if !q.src.is_host() {
        // Device and managed memory: small messages are copied out through
        // a bounce buffer and sent eagerly; large device buffers go by CUDA
        // IPC on one node or GPUDirect where the transport can register
        // GPU memory; everything else is staged in chunks.
        let d = &cfg.device;
        if q.len <= device_eager_limit(caps, cfg) {
            return eager;
        }
        let device = matches!(q.src, MemKind::Device { .. });
        if device && caps.cuda_ipc && d.ipc && q.len >= d.ipc_threshold {
            return Protocol::RndvIpc;
        }
        if device && caps.gpudirect.is_some() && caps.get && cfg.use_get {
            return Protocol::RndvGet;
        }
        return Protocol::RndvPipelined;
    }
    if q.len <= eager_limit(caps, cfg) {
        return eager;
    }
    let get_threshold = cfg.get_threshold.unwrap_or(caps.get_threshold);
    if caps.get && cfg.use_get && q.len >= get_threshold {
        Protocol::RndvGet
    } else {
        Protocol::RndvPipelined
    }
}

/// The receiver's half of a plan: how a matched rendezvous that offers
/// `offer` is completed into memory of kind `dst` over a transport with
/// `caps`. A get lands in host memory, or in device memory (not managed
/// memory, which no NIC registers) only where the transport registers it
/// for GPUDirect; a device destination otherwise asks for the stream and
/// copies each chunk in.
pub fn receive(offer: Offer, dst: MemKind, caps: &Capabilities, cfg: &PmlConfig) -> Protocol {
    match offer {
        Offer::Get
            if caps.get
                && cfg.use_get
                && (dst.is_host()
                    || (matches!(dst, MemKind::Device { .. }) && caps.gpudirect.is_some())) =>
        {
            Protocol::RndvGet
        }
        Offer::Get | Offer::Stream => Protocol::RndvPipelined,
        Offer::Ipc => Protocol::RndvIpc,
    }
}

/// Choose how the message `q` travels over a transport with `caps`.
pub fn select(q: Query, caps: &Capabilities, cfg: &PmlConfig) -> Plan {
    let mut protocol = sender_protocol(&q, caps, cfg);
    if let (Some(dst), Some(offer)) = (q.dst, Offer::of(protocol)) {
        protocol = receive(offer, dst, caps, cfg);
    }
    Plan {
        protocol,
        fallback: protocol.fallback(),
        chunk: chunk_size(caps, cfg, q.src),
        name: protocol.describe(q.src, q.dst, cfg.device.gdrcopy),
    }
}

/// [`select`] tabulated by size for one transport, source kind, destination
/// kind (or none) and mode: consecutive size ranges, each with its plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanTable {
    src: MemKind,
    dst: Option<MemKind>,
    mode: SendMode,
    /// `(first size, plan)`, by increasing first size; the first starts at 0.
    rows: Vec<(usize, Plan)>,
}

impl PlanTable {
    /// The table of `select` for messages from `src` (to `dst`) in `mode`.
    pub fn build(
        src: MemKind,
        dst: Option<MemKind>,
        mode: SendMode,
        caps: &Capabilities,
        cfg: &PmlConfig,
    ) -> Self {
        // `select` is a step function of the size that can only change
        // where a size crosses one of these thresholds.
        let get_threshold = cfg.get_threshold.unwrap_or(caps.get_threshold);
        let mut starts = vec![
            0,
            eager_limit(caps, cfg).saturating_add(1),
            device_eager_limit(caps, cfg).saturating_add(1),
            cfg.device.ipc_threshold,
            get_threshold,
        ];
        starts.sort_unstable();
        starts.dedup();
        let mut rows: Vec<(usize, Plan)> = Vec::new();
        for s in starts {
            let q = Query {
                src,
                dst,
                len: s,
                mode,
            };
            let p = select(q, caps, cfg);
            if rows.last().is_none_or(|(_, last)| *last != p) {
                rows.push((s, p));
            }
        }
        Self {
            src,
            dst,
            mode,
            rows,
        }
    }

    /// The plan of a message of `len` bytes.
    #[inline]
    pub fn plan(&self, len: usize) -> Plan {
        let mut p = self.rows[0].1;
        for &(start, plan) in &self.rows[1..] {
            if len < start {
                break;
            }
            p = plan;
        }
        p
    }

    /// The largest message sent eagerly (`None` if none is).
    pub fn eager_upto(&self) -> Option<usize> {
        let (_, first) = self.rows.first()?;
        if !first.protocol.is_eager() {
            return None;
        }
        Some(self.rows.get(1).map_or(usize::MAX, |(s, _)| s - 1))
    }

    /// The rows: `(first size, last size or None for unbounded, plan)`.
    pub fn rows(&self) -> impl Iterator<Item = (usize, Option<usize>, Plan)> + '_ {
        self.rows.iter().enumerate().map(|(i, &(s, p))| {
            let end = self.rows.get(i + 1).map(|&(n, _)| n - 1);
            (s, end, p)
        })
    }
}

/// A size as the tables print it (`0 B`, `8 KiB`, `8193 B`).
pub fn size_name(n: usize) -> String {
    const UNITS: [(usize, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (u, name) in UNITS {
        if n >= u && n.is_multiple_of(u) {
            return format!("{} {name}", n / u);
        }
    }
    format!("{n} B")
}

impl fmt::Display for PlanTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (s, e, p) in self.rows() {
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            match e {
                Some(e) => write!(f, "{}..{}: {p}", size_name(s), size_name(e))?,
                None => write!(f, "{}..: {p}", size_name(s))?,
            }
        }
        Ok(())
    }
}

impl PlanTable {
    /// One line naming what the table is for, then the table:
    /// `host -> device, standard: 0 B..8 KiB: eager/cuda-copy; …`.
    pub fn describe(&self) -> String {
        let dst = self.dst.map_or("?", |d| d.name());
        let mode = match self.mode {
            SendMode::Standard => "standard",
            SendMode::Synchronous => "synchronous",
        };
        format!("{} -> {dst}, {mode}: {self}", self.src.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: MemKind = MemKind::Device { ordinal: 0 };
    const STD: SendMode = SendMode::Standard;

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
            gpudirect: None,
        }
    }

    fn choose(
        len: usize,
        src: MemKind,
        mode: SendMode,
        c: &Capabilities,
        cfg: &PmlConfig,
    ) -> Protocol {
        select(
            Query {
                src,
                dst: None,
                len,
                mode,
            },
            c,
            cfg,
        )
        .protocol
    }

    #[test]
    fn device_eager_limit_is_its_own_setting() {
        // A transport whose host eager limit (4 KiB) is far below what one
        // send carries (64 KiB): GMPI_GPU_EAGER_LIMIT above the host limit
        // is honoured, and capped only by the send size.
        let mut c = caps(false);
        c.eager_limit = 4 << 10;
        c.max_send_size = 64 << 10;
        let mut cfg = PmlConfig::default();
        cfg.device.eager_limit = 32 << 10;
        assert_eq!(choose(32 << 10, DEV, STD, &c, &cfg), Protocol::Eager);
        assert_eq!(
            choose((32 << 10) + 1, DEV, STD, &c, &cfg),
            Protocol::RndvPipelined
        );
        assert_eq!(
            choose(32 << 10, MemKind::Host, STD, &c, &cfg),
            Protocol::RndvPipelined,
            "the host eager limit is unchanged"
        );
        cfg.device.eager_limit = 1 << 20;
        let room = (64 << 10) - MAX_HDR;
        assert_eq!(device_eager_limit(&c, &cfg), room);
        assert_eq!(choose(room, DEV, STD, &c, &cfg), Protocol::Eager);
        assert_eq!(
            choose(room + 1, DEV, STD, &c, &cfg),
            Protocol::RndvPipelined
        );
        let t = PlanTable::build(DEV, None, STD, &c, &cfg);
        assert_eq!(t.eager_upto(), Some(room));
    }

    #[test]
    fn device_memory() {
        let cfg = PmlConfig::default();
        let mut c = caps(true);
        c.eager_limit = 1 << 20;
        c.max_send_size = 2 << 20;
        let lim = cfg.device.eager_limit;
        assert_eq!(choose(lim, DEV, STD, &c, &cfg), Protocol::Eager);
        assert_eq!(choose(lim + 1, DEV, STD, &c, &cfg), Protocol::RndvPipelined);
        assert_eq!(
            choose(lim + 1, MemKind::Managed, STD, &c, &cfg),
            Protocol::RndvPipelined
        );
        c.cuda_ipc = true;
        assert_eq!(choose(lim + 1, DEV, STD, &c, &cfg), Protocol::RndvIpc);
        assert_eq!(
            choose(1 << 24, MemKind::Managed, STD, &c, &cfg),
            Protocol::RndvPipelined,
            "no IPC for managed memory"
        );
        let high = PmlConfig {
            device: DeviceConfig {
                ipc_threshold: 1 << 20,
                ..Default::default()
            },
            ..PmlConfig::default()
        };
        assert_eq!(
            choose(1 << 19, DEV, STD, &c, &high),
            Protocol::RndvPipelined
        );
        assert_eq!(choose(1 << 20, DEV, STD, &c, &high), Protocol::RndvIpc);
        c.cuda_ipc = false;
        c.gpudirect = Some(gmpi_btl::DeviceReg::DmaBuf);
        assert_eq!(choose(1 << 20, DEV, STD, &c, &cfg), Protocol::RndvGet);
        assert_eq!(
            Protocol::RndvGet.describe(DEV, None, false),
            "rndv/gpudirect"
        );
        assert_eq!(Protocol::Eager.describe(DEV, None, true), "eager/gdrcopy");
        assert_eq!(
            Protocol::EagerSync.describe(DEV, None, false),
            "eager/cuda-copy"
        );
        assert_eq!(
            Protocol::RndvPipelined.describe(DEV, None, false),
            "rndv/staged"
        );
        assert_eq!(
            Protocol::RndvPipelined.describe(MemKind::Host, None, false),
            "rndv/pipelined"
        );
        assert_eq!(
            Protocol::RndvPipelined.describe(MemKind::Host, Some(DEV), false),
            "rndv/staged",
            "a host sender streaming into device memory is staged on the receiver's side"
        );
        let p = select(
            Query {
                src: DEV,
                dst: None,
                len: 1 << 20,
                mode: STD,
            },
            &c,
            &cfg,
        );
        assert_eq!(p.chunk, cfg.device.pipeline_chunk);
    }

    #[test]
    fn thresholds() {
        let cfg = PmlConfig::default();
        let c = caps(true);
        let h = MemKind::Host;
        assert_eq!(choose(0, h, STD, &c, &cfg), Protocol::Eager);
        assert_eq!(choose(4096, h, STD, &c, &cfg), Protocol::Eager);
        assert_eq!(
            choose(10, h, SendMode::Synchronous, &c, &cfg),
            Protocol::EagerSync
        );
        assert_eq!(choose(4097, h, STD, &c, &cfg), Protocol::RndvPipelined);
        assert_eq!(choose(8192, h, STD, &c, &cfg), Protocol::RndvGet);
        assert_eq!(
            choose(1 << 20, h, STD, &caps(false), &cfg),
            Protocol::RndvPipelined
        );
        let nog = PmlConfig {
            use_get: false,
            ..PmlConfig::default()
        };
        assert_eq!(choose(1 << 20, h, STD, &c, &nog), Protocol::RndvPipelined);
        let small = PmlConfig {
            eager_limit: Some(16),
            ..PmlConfig::default()
        };
        assert_eq!(choose(17, h, STD, &c, &small), Protocol::RndvPipelined);
        let p = select(
            Query {
                src: h,
                dst: None,
                len: 1 << 20,
                mode: STD,
            },
            &c,
            &cfg,
        );
        assert_eq!(p.chunk, 32 * 1024 - MAX_HDR);
        assert_eq!(p.fallback, Some(Protocol::RndvPipelined));
    }

    /// (transport, configuration, src, dst, mode, size) -> (protocol,
    /// fallback, name).
    type Row<'a> = (
        &'a Capabilities,
        &'a PmlConfig,
        MemKind,
        Option<MemKind>,
        SendMode,
        usize,
        Protocol,
        Option<Protocol>,
        &'static str,
    );

    /// The selection table, row by row.
    #[test]
    fn selection_table() {
        let shm = Capabilities {
            name: "shm",
            eager_limit: 8 << 10,
            max_send_size: 32 << 10,
            get: true,
            put: false,
            exclusivity: 100,
            get_threshold: 8 << 10,
            cuda_ipc: true,
            gpudirect: None,
        };
        let tcp = Capabilities {
            name: "tcp",
            eager_limit: 64 << 10,
            max_send_size: 128 << 10,
            get: false,
            put: false,
            exclusivity: 10,
            get_threshold: usize::MAX,
            cuda_ipc: false,
            gpudirect: None,
        };
        let ib = Capabilities {
            name: "ib",
            gpudirect: Some(gmpi_btl::DeviceReg::DmaBuf),
            get: true,
            cuda_ipc: false,
            get_threshold: 16 << 10,
            ..tcp.clone()
        };
        let cfg = PmlConfig::default();
        let gdr = PmlConfig {
            device: DeviceConfig {
                gdrcopy: true,
                ..DeviceConfig::default()
            },
            ..PmlConfig::default()
        };
        use Protocol::*;
        let (h, d, m) = (MemKind::Host, DEV, MemKind::Managed);
        let sync = SendMode::Synchronous;
        let pl = Some(RndvPipelined);
        #[rustfmt::skip]
        let rows: Vec<Row<'_>> = vec![
            (&shm, &cfg, h, None, STD, 0, Eager, None, "eager"),
            (&shm, &cfg, h, None, STD, 8 << 10, Eager, None, "eager"),
            (&shm, &cfg, h, None, sync, 8 << 10, EagerSync, None, "eager/sync"),
            (&shm, &cfg, h, None, STD, (8 << 10) + 1, RndvGet, pl, "rndv/get"),
            (&shm, &cfg, h, None, sync, 1 << 20, RndvGet, pl, "rndv/get"),
            (&shm, &cfg, h, Some(h), STD, 1 << 20, RndvGet, pl, "rndv/get"),
            (&shm, &cfg, h, Some(d), STD, 1 << 20, RndvPipelined, None, "rndv/staged"),
            (&shm, &cfg, d, None, STD, 8, Eager, None, "eager/cuda-copy"),
            (&shm, &gdr, d, None, STD, 8, Eager, None, "eager/gdrcopy"),
            (&shm, &cfg, d, Some(h), STD, 8 << 10, Eager, None, "eager/cuda-copy"),
            (&shm, &cfg, d, None, STD, (8 << 10) + 1, RndvIpc, pl, "rndv/cuda-ipc"),
            (&shm, &cfg, d, Some(d), STD, 16 << 20, RndvIpc, pl, "rndv/cuda-ipc"),
            (&shm, &cfg, m, None, STD, 16 << 20, RndvPipelined, None, "rndv/staged"),
            (&tcp, &cfg, h, None, STD, 64 << 10, Eager, None, "eager"),
            (&tcp, &cfg, h, None, STD, (64 << 10) + 1, RndvPipelined, None, "rndv/pipelined"),
            (&tcp, &cfg, d, None, STD, 8 << 10, Eager, None, "eager/cuda-copy"),
            (&tcp, &cfg, d, None, STD, (8 << 10) + 1, RndvPipelined, None, "rndv/staged"),
            (&tcp, &cfg, h, Some(d), STD, 1 << 20, RndvPipelined, None, "rndv/staged"),
            (&ib, &cfg, h, None, STD, 16 << 10, Eager, None, "eager"),
            (&ib, &cfg, h, None, STD, (64 << 10) + 1, RndvGet, pl, "rndv/get"),
            (&ib, &cfg, d, None, STD, (8 << 10) + 1, RndvGet, pl, "rndv/gpudirect"),
            (&ib, &cfg, d, Some(d), STD, 1 << 20, RndvGet, pl, "rndv/gpudirect"),
            (&ib, &cfg, m, None, STD, 1 << 20, RndvPipelined, None, "rndv/staged"),
        ];
        for (c, cfg, src, dst, mode, len, proto, fallback, name) in rows {
            let q = Query {
                src,
                dst,
                len,
                mode,
            };
            let p = select(q, c, cfg);
            assert_eq!(
                (p.protocol, p.fallback, p.name),
                (proto, fallback, name),
                "{} {q:?}",
                c.name
            );
            // The table says the same as the function.
            let t = PlanTable::build(src, dst, mode, c, cfg);
            assert_eq!(t.plan(len), p, "{} {q:?} table {t}", c.name);
        }
    }

    #[test]
    fn receivers_half() {
        let mut c = caps(true);
        let cfg = PmlConfig::default();
        assert_eq!(
            receive(Offer::Get, MemKind::Host, &c, &cfg),
            Protocol::RndvGet
        );
        assert_eq!(receive(Offer::Get, DEV, &c, &cfg), Protocol::RndvPipelined);
        assert_eq!(
            receive(Offer::Get, MemKind::Managed, &c, &cfg),
            Protocol::RndvPipelined
        );
        c.gpudirect = Some(gmpi_btl::DeviceReg::DmaBuf);
        assert_eq!(receive(Offer::Get, DEV, &c, &cfg), Protocol::RndvGet);
        // No NIC registers managed memory: it is streamed even then.
        assert_eq!(
            receive(Offer::Get, MemKind::Managed, &c, &cfg),
            Protocol::RndvPipelined
        );
        c.gpudirect = Some(gmpi_btl::DeviceReg::Address);
        assert_eq!(receive(Offer::Get, DEV, &c, &cfg), Protocol::RndvGet);
        let nog = PmlConfig {
            use_get: false,
            ..PmlConfig::default()
        };
        assert_eq!(
            receive(Offer::Get, MemKind::Host, &c, &nog),
            Protocol::RndvPipelined
        );
        assert_eq!(
            receive(Offer::Stream, MemKind::Host, &c, &cfg),
            Protocol::RndvPipelined
        );
        assert_eq!(
            receive(Offer::Ipc, MemKind::Host, &c, &cfg),
            Protocol::RndvIpc
        );
    }

    /// Every size gets from the table what `select` says, across the
    /// thresholds of several configurations.
    #[test]
    fn tables_are_exact() {
        let mut c = caps(true);
        c.cuda_ipc = true;
        let cfgs = [
            PmlConfig::default(),
            PmlConfig {
                eager_limit: Some(100),
                get_threshold: Some(50),
                ..PmlConfig::default()
            },
            PmlConfig {
                device: DeviceConfig {
                    eager_limit: 1 << 20,
                    ipc_threshold: 10_000,
                    ..DeviceConfig::default()
                },
                ..PmlConfig::default()
            },
        ];
        let kinds = [MemKind::Host, DEV, MemKind::Managed];
        for cfg in &cfgs {
            for src in kinds {
                for dst in [None, Some(MemKind::Host), Some(DEV)] {
                    for mode in [STD, SendMode::Synchronous] {
                        let t = PlanTable::build(src, dst, mode, &c, cfg);
                        let mut lens: Vec<usize> = (0..20_000).step_by(7).collect();
                        for (s, _, _) in t.rows() {
                            lens.extend([s.saturating_sub(1), s, s + 1]);
                        }
                        lens.extend([1 << 20, 1 << 30, usize::MAX]);
                        for len in lens {
                            let q = Query {
                                src,
                                dst,
                                len,
                                mode,
                            };
                            assert_eq!(t.plan(len), select(q, &c, cfg), "{q:?} {t}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn tables_print_sizes_and_fallbacks() {
        let c = caps(true);
        let t = PlanTable::build(MemKind::Host, None, STD, &c, &PmlConfig::default());
        assert_eq!(
            t.to_string(),
            "0 B..4 KiB: eager; 4097 B..8191 B: rndv/pipelined; 8 KiB..: rndv/get (else rndv/pipelined)"
        );
        assert_eq!(t.eager_upto(), Some(4096));
        assert!(t
            .describe()
            .starts_with("host -> ?, standard: 0 B..4 KiB: eager"));
        // The device eager limit (8 KiB) is its own, above the host's.
        let t = PlanTable::build(DEV, None, STD, &c, &PmlConfig::default());
        assert_eq!(t.eager_upto(), Some(8192));
    }
}
