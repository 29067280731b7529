//! [`Fabric`] over libibverbs (`rdma-sys`): the crate's unsafe module.
//!
//! Every verbs object has one owner here ([`VerbsFabric`]) that destroys it
//! in dependency order on drop: queue pairs (the datagram one too), address
//! handles, shared receive queue, completion queue, completion channel,
//! registrations, protection domain, device context. Nothing else in the crate touches a verbs pointer.
//!
//! Port selection ([`open`]): `GMPI_IB_DEVICES=mlx5_0:1,rxe0` names the
//! devices (and ports) to use, in order of preference; otherwise every
//! active port of every device is a candidate, preferring a RoCE port whose
//! network interface lives in this process's network namespace, then a device
//! on the NUMA node of the CPU the rank runs on. On RoCE the
//! GID is the port's RoCE v2 GID of an IPv4 address (the interface's
//! IPv4-mapped address); on InfiniBand, the LID and GID 0. Path MTU: the
//! port's active MTU (the lower of the two ends at connection).
//!
//! Queue-pair settings, as the common MPIs choose them: local ACK timeout
//! 20 (about 4 s; `GMPI_IB_TIMEOUT`) with 7 retries, RNR retry 7 (infinite) with a minimal
//! RNR timer of 12 (0.64 ms), `max_rd_atomic` the device's initiator depth,
//! the responder depth the device's maximum.

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use gmpi_btl::Wake;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use rdma_sys::*;
use rustc_hash::FxHashMap;

use crate::fabric::{
    Fabric, Link, LocalQp, Mr, PortInfo, RemoteQp, SendWr, Sge, UdAddr, Wc, WcKind, UD_QKEY,
};
pub use crate::select::{choose, describe, parse_devices, Candidate, Near};

/// What [`open`] is asked for.
#[derive(Debug, Clone)]
pub struct Want {
    /// `GMPI_IB_DEVICES`: (device, port) in order of preference.
    pub devices: Option<Vec<(String, Option<u8>)>>,
    /// Send-queue entries per queue pair.
    pub sq_depth: u32,
    /// Shared-receive-queue buffers wanted.
    pub srq_depth: u32,
    /// Inline bytes wanted per send.
    pub max_inline: u32,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout before a retry).
    pub timeout: u8,
}

impl Default for Want {
    fn default() -> Self {
        Self {
            devices: None,
            sq_depth: 256,
            srq_depth: 4096,
            max_inline: 128,
            timeout: 20,
        }
    }
}

fn sysfs(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Every port of every device, usable or not, with the reason.
pub fn probe() -> Result<Vec<Candidate>, String> {
    let mut out = Vec::new();
    let mut n = 0;
    // SAFETY: ibv_get_device_list returns a NULL-terminated array of `n`
    // devices (or NULL), freed below with ibv_free_device_list after the
    // last use of its entries; each opened context is closed before that.
    unsafe {
        let list = ibv_get_device_list(&mut n);
        if list.is_null() {
            let e = std::io::Error::last_os_error();
            return Err(format!("no verbs devices ({e})"));
        }
        for k in 0..n.max(0) as usize {
            let dev = *list.add(k);
            let name = CStr::from_ptr(ibv_get_device_name(dev))
                .to_string_lossy()
                .into_owned();
            let ctx = ibv_open_device(dev);
            if ctx.is_null() {
                let e = std::io::Error::last_os_error();
                out.push(Candidate {
                    port: blank_port(&name, 1),
                    netdev: None,
                    unusable: Some(format!("cannot open the device: {e}")),
                    numa: None,
                    pci: None,
                });
                continue;
            }
            let mut da: ibv_device_attr = std::mem::zeroed();
            if ibv_query_device(ctx, &mut da) == 0 {
                let numa = sysfs(&format!("/sys/class/infiniband/{name}/device/numa_node"))
                    .and_then(|n| n.parse::<u32>().ok());
                let pci =
                    std::fs::canonicalize(format!("/sys/class/infiniband/{name}/device")).ok();
                for p in 1..=da.phys_port_cnt {
                    let mut c = port_candidate(ctx, &name, p, &da);
                    c.numa = numa;
                    c.pci = pci.clone();
                    out.push(c);
                }
            }
            ibv_close_device(ctx);
        }
        ibv_free_device_list(list);
    }
    Ok(out)
}

fn blank_port(name: &str, port: u8) -> PortInfo {
    PortInfo {
        device: name.to_string(),
        port,
        link: Link::Infiniband,
        lid: 0,
        gid: [0; 16],
        gid_index: 0,
        mtu: 1,
        max_msg: 0,
        max_rd_atomic: 0,
        max_inline: 0,
        sq_depth: 0,
        srq_depth: 0,
    }
}

/// # Safety
/// `ctx` is an open device context.
unsafe fn port_candidate(
    ctx: *mut ibv_context,
    name: &str,
    p: u8,
    da: &ibv_device_attr,
) -> Candidate {
    let mut port = blank_port(name, p);
    port.max_msg = u64::from(u32::MAX);
    port.max_rd_atomic = da.max_qp_init_rd_atom.clamp(1, 255) as u8;
    port.sq_depth = da.max_qp_wr.max(1) as u32;
    port.srq_depth = da.max_srq_wr.max(0) as u32;
    // SAFETY: an all-zero port_attr is a valid out-parameter.
    let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is open (our caller's contract); `pa` is ours.
    if unsafe { ___ibv_query_port(ctx, p, &mut pa) } != 0 {
        return Candidate {
            port,
            netdev: None,
            unusable: Some("ibv_query_port failed".into()),
            numa: None,
            pci: None,
        };
    }
    port.max_msg = u64::from(pa.max_msg_sz);
    port.mtu = pa.active_mtu.clamp(1, 5) as u8;
    port.lid = pa.lid;
    port.link = if pa.link_layer == 2 {
        Link::Ethernet
    } else {
        Link::Infiniband
    };
    if pa.state != ibv_port_state::IBV_PORT_ACTIVE {
        return Candidate {
            port,
            netdev: None,
            unusable: Some(format!("port state {} (not active)", pa.state)),
            numa: None,
            pci: None,
        };
    }
    if da.max_srq_wr <= 0 {
        return Candidate {
            port,
            netdev: None,
            unusable: Some("no shared receive queue support".into()),
            numa: None,
            pci: None,
        };
    }
    let query = |i: i32| -> Option<[u8; 16]> {
        // SAFETY: a zeroed gid is a valid out-parameter; `ctx` is open.
        let mut g: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { ibv_query_gid(ctx, p, i, &mut g) } != 0 {
            return None;
        }
        // SAFETY: every bit pattern of the union is a valid `raw`.
        Some(unsafe { g.raw })
    };
    if port.link == Link::Infiniband {
        return match query(0) {
            Some(g) => {
                port.gid = g;
                port.gid_index = 0;
                Candidate {
                    port,
                    netdev: None,
                    unusable: None,
                    numa: None,
                    pci: None,
                }
            }
            None => Candidate {
                port,
                netdev: None,
                unusable: Some("no GID 0".into()),
                numa: None,
                pci: None,
            },
        };
    }
    // RoCE: the RoCE v2 GID of an IPv4 address, preferring one whose
    // interface is in our network namespace.
    let mut best: Option<(i32, [u8; 16], String, bool)> = None;
    for i in 0..pa.gid_tbl_len.clamp(0, 256) {
        let base = format!("/sys/class/infiniband/{name}/ports/{p}/gid_attrs");
        if sysfs(&format!("{base}/types/{i}")).as_deref() != Some("RoCE v2") {
            continue;
        }
        let Some(g) = query(i) else { continue };
        let v4 = g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff;
        if !v4 {
            continue;
        }
        let nd = sysfs(&format!("{base}/ndevs/{i}")).unwrap_or_default();
        let here = !nd.is_empty() && std::path::Path::new(&format!("/sys/class/net/{nd}")).exists();
        if best.as_ref().is_none_or(|b| here && !b.3) {
            best = Some((i, g, nd, here));
        }
    }
    match best {
        Some((i, g, nd, here)) => {
            port.gid = g;
            port.gid_index = i as u8;
            Candidate {
                port,
                netdev: Some((nd, here)),
                unusable: None,
                numa: None,
                pci: None,
            }
        }
        None => Candidate {
            port,
            netdev: None,
            unusable: Some("no RoCE v2 GID of an IPv4 address".into()),
            numa: None,
            pci: None,
        },
    }
}

/// The NUMA node of the CPU this thread runs on, if the system says.
pub fn this_numa_node() -> Option<u32> {
    let cpu = nix::sched::sched_getcpu().ok()?;
    std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}"))
        .ok()?
        .filter_map(|e| e.ok())
        .find_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
}

/// What the rank's port should be near: its GPU (by the PCI bus id CUDA
/// gives, if it uses one: [`Near::of_gpu`]), else the NUMA node of the CPU
/// it runs on.
pub fn near(gpu_bus_id: Option<&str>) -> Near {
    let sys = std::path::Path::new("/sys");
    match gpu_bus_id.and_then(|b| Near::of_gpu(sys, b)) {
        Some(n) => n,
        None => Near {
            numa: this_numa_node(),
            gpu: None,
        },
    }
}

/// Open the port [`choose`] picks, nearest `near`.
pub fn open(want: &Want, near: &Near) -> Result<VerbsFabric, String> {
    let cands = probe()?;
    let c = choose(&cands, want.devices.as_deref(), near)?;
    VerbsFabric::open(&c.port, want)
}

#[derive(Debug)]
struct EfdWake(EventFd);

impl Wake for EfdWake {
    fn wake(&self) {
        let _ = self.0.write(1);
    }
}

/// An opened port and every verbs object made on it.
pub struct VerbsFabric {
    port: PortInfo,
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    channel: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    srq: *mut ibv_srq,
    /// Queue pairs by number, with the PSN each sends from.
    qps: FxHashMap<u32, (*mut ibv_qp, u32)>,
    /// The datagram queue pair (connection messages), if made.
    ud: *mut ibv_qp,
    /// Address handles of datagram destinations, by their number.
    ahs: Vec<*mut ibv_ah>,
    mrs: HashMap<u64, *mut ibv_mr>,
    next_mr: u64,
    max_dest_rd: u8,
    timeout: u8,
    wake: Arc<EfdWake>,
    /// Completions found while arming the channel, handed out first.
    early: Vec<Wc>,
    /// Where `ibv_poll_cq` writes (kept, not zeroed on every poll: 3 KiB
    /// of memset per pass was half of an 8 B round trip's instructions).
    wc_buf: Box<[ibv_wc; POLL_MAX]>,
    /// Receive work requests being posted.
    chain: RecvChain,
    /// `wait` saw the asynchronous-event descriptor readable.
    async_ready: bool,
    /// `async_event` calls since it last read the descriptor.
    async_skipped: u32,
    unacked: u32,
}

/// `async_event` reads the descriptor (a system call) at least once in
/// this many calls: a rank that never sleeps learns of a port failure
/// within as many progress passes (microseconds), and an 8 B round trip no
/// longer pays a `read` per pass (~110 instructions and a kernel entry).
const ASYNC_EVERY: u32 = 256;

/// Completions one `poll` reads at most.
const POLL_MAX: usize = 64;

impl std::fmt::Debug for VerbsFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsFabric")
            .field("port", &self.port)
            .field("qps", &self.qps.len())
            .field("mrs", &self.mrs.len())
            .finish_non_exhaustive()
    }
}

// SAFETY: the verbs objects are used only through `&mut self` (one thread
// at a time); libibverbs objects may be used from any thread.
unsafe impl Send for VerbsFabric {}

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// What a failed `ibv_reg_dmabuf_mr` of fd −1 says about the device:
/// `EBADF` (the kernel looked for the buffer) means dma-bufs register;
/// anything else (`EOPNOTSUPP` from a provider without the verb, `ENOSYS`
/// or `EPROTONOSUPPORT` from a kernel without it) means they do not.
fn dmabuf_probe_answer(e: std::io::Error) -> Result<(), String> {
    if e.raw_os_error() == Some(nix::libc::EBADF) {
        Ok(())
    } else {
        Err(format!("ibv_reg_dmabuf_mr is not supported: {e}"))
    }
}

/// The verbs form of a scatter/gather element.
fn to_ibv(s: Sge) -> ibv_sge {
    ibv_sge {
        addr: s.addr,
        length: s.len,
        lkey: s.lkey,
    }
}

/// The outcome of an `ibv_post_*` call that returned `rc` (an errno).
fn posted(what: &str, rc: i32) -> Result<(), String> {
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("{what}: {}", std::io::Error::from_raw_os_error(rc)))
    }
}

/// Receive work requests chained for one post, kept between posts for
/// their capacity (a repost on every progress pass allocates nothing).
#[derive(Default)]
struct RecvChain {
    sges: Vec<ibv_sge>,
    wrs: Vec<ibv_recv_wr>,
}

impl RecvChain {
    /// The chain of receive work requests for `bufs` (ids and buffers):
    /// its head, valid until the next `fill` (the requests point into
    /// both vectors, which do not move while neither is touched).
    fn fill(&mut self, bufs: &[(u64, Sge)]) -> *mut ibv_recv_wr {
        self.sges.clear();
        self.sges.extend(bufs.iter().map(|&(_, s)| to_ibv(s)));
        self.wrs.clear();
        let sges = self.sges.as_mut_ptr();
        for (k, (id, _)) in bufs.iter().enumerate() {
            self.wrs.push(ibv_recv_wr {
                wr_id: *id,
                next: ptr::null_mut(),
                sg_list: sges.wrapping_add(k),
                num_sge: 1,
            });
        }
        let wrs = self.wrs.as_mut_ptr();
        for k in 1..self.wrs.len() {
            self.wrs[k - 1].next = wrs.wrapping_add(k);
        }
        wrs
    }
}

/// Move `qp` to the state `a` names (`state`, for the message).
///
/// # Safety
/// `qp` is a live queue pair.
unsafe fn modify_qp(
    qp: *mut ibv_qp,
    a: &mut ibv_qp_attr,
    mask: u32,
    state: &str,
) -> Result<(), String> {
    // SAFETY: `qp` is live (our caller's contract); `a` is a valid
    // attribute block, of which the device reads the masked fields.
    if unsafe { ibv_modify_qp(qp, a, mask as i32) } != 0 {
        return Err(os_err(&format!("ibv_modify_qp({state})")));
    }
    Ok(())
}

impl VerbsFabric {
    /// Own registration `mr` (of `len` bytes addressed from `addr`).
    fn keep_mr(&mut self, mr: *mut ibv_mr, addr: u64, len: u64, remote_read: bool) -> Mr {
        let h = self.next_mr;
        self.next_mr += 1;
        self.mrs.insert(h, mr);
        // SAFETY: `mr` is live (just registered, now owned by `mrs`).
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Mr {
            addr,
            len,
            lkey,
            rkey: if remote_read { rkey } else { 0 },
            handle: h,
        }
    }

    /// Open `port` (as [`probe`] described it).
    pub fn open(port: &PortInfo, want: &Want) -> Result<Self, String> {
        let mut f = Self {
            port: port.clone(),
            ctx: ptr::null_mut(),
            pd: ptr::null_mut(),
            channel: ptr::null_mut(),
            cq: ptr::null_mut(),
            srq: ptr::null_mut(),
            qps: FxHashMap::default(),
            ud: ptr::null_mut(),
            ahs: Vec::new(),
            mrs: HashMap::new(),
            next_mr: 1,
            max_dest_rd: 1,
            timeout: want.timeout.clamp(1, 31),
            wake: Arc::new(EfdWake(
                EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                    .map_err(|e| format!("eventfd: {e}"))?,
            )),
            early: Vec::new(),
            // SAFETY: zeroed completions are valid values (plain integers).
            wc_buf: Box::new(unsafe { std::mem::zeroed() }),
            chain: RecvChain::default(),
            async_ready: false,
            async_skipped: 0,
            unacked: 0,
        };
        // SAFETY: each object is created from the ones before it and stored
        // at once, so `Drop` destroys whatever was made if a later step fails.
        unsafe {
            let mut n = 0;
            let list = ibv_get_device_list(&mut n);
            if list.is_null() {
                return Err(os_err("ibv_get_device_list"));
            }
            for k in 0..n.max(0) as usize {
                let dev = *list.add(k);
                if CStr::from_ptr(ibv_get_device_name(dev)).to_string_lossy() == port.device {
                    f.ctx = ibv_open_device(dev);
                    break;
                }
            }
            ibv_free_device_list(list);
            if f.ctx.is_null() {
                return Err(format!("cannot open verbs device {}", port.device));
            }
            let mut da: ibv_device_attr = std::mem::zeroed();
            if ibv_query_device(f.ctx, &mut da) != 0 {
                return Err(os_err("ibv_query_device"));
            }
            f.max_dest_rd = da.max_qp_rd_atom.clamp(1, 255) as u8;
            f.port.sq_depth = want.sq_depth.min(da.max_qp_wr.max(1) as u32);
            f.port.srq_depth = want.srq_depth.min(da.max_srq_wr.max(1) as u32);
            f.pd = ibv_alloc_pd(f.ctx);
            if f.pd.is_null() {
                return Err(os_err("ibv_alloc_pd"));
            }
            f.channel = ibv_create_comp_channel(f.ctx);
            if f.channel.is_null() {
                return Err(os_err("ibv_create_comp_channel"));
            }
            for fd in [(*f.channel).fd, (*f.ctx).async_fd] {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
            }
            let cqe = (f.port.srq_depth + 64 * f.port.sq_depth).min(da.max_cqe.max(1) as u32);
            f.cq = ibv_create_cq(f.ctx, cqe as i32, ptr::null_mut(), f.channel, 0);
            if f.cq.is_null() {
                return Err(os_err("ibv_create_cq"));
            }
            let mut sa = ibv_srq_init_attr {
                srq_context: ptr::null_mut(),
                attr: ibv_srq_attr {
                    max_wr: f.port.srq_depth,
                    max_sge: 1,
                    srq_limit: 0,
                },
            };
            f.srq = ibv_create_srq(f.pd, &mut sa);
            if f.srq.is_null() {
                return Err(os_err("ibv_create_srq"));
            }
            f.port.srq_depth = sa.attr.max_wr.min(f.port.srq_depth);
            // What inline size the device grants: ask with a probe QP.
            f.port.max_inline = want.max_inline;
            let probe = f.create_qp()?;
            f.destroy_qp(probe.qpn);
        }
        Ok(f)
    }

    fn destroy_qp(&mut self, qpn: u32) {
        if let Some((qp, _)) = self.qps.remove(&qpn) {
            // SAFETY: `qp` was created by us and is dropped from the map.
            unsafe { ibv_destroy_qp(qp) };
        }
    }

    fn convert(&self, w: &ibv_wc) -> Wc {
        let kind = match w.opcode {
            ibv_wc_opcode::IBV_WC_RDMA_READ => WcKind::Read,
            ibv_wc_opcode::IBV_WC_RDMA_WRITE => WcKind::Write,
            o if o & ibv_wc_opcode::IBV_WC_RECV != 0 => WcKind::Recv {
                len: w.byte_len,
                imm: if w.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
                    // SAFETY: WITH_IMM says the union holds the immediate.
                    u32::from_be(unsafe { w.imm_data_invalidated_rkey_union.imm_data })
                } else {
                    0
                },
            },
            _ => WcKind::Send,
        };
        // A failed completion's opcode is undefined: receive buffers are
        // told apart by their wr_id (the protocol's), not by the kind.
        Wc {
            wr_id: w.wr_id,
            qpn: w.qp_num,
            kind,
            status: w.status,
        }
    }
}

impl Fabric for VerbsFabric {
    fn port(&self) -> &PortInfo {
        &self.port
    }

    fn create_qp(&mut self) -> Result<LocalQp, String> {
        let mut ia = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: self.srq,
            cap: ibv_qp_cap {
                max_send_wr: self.port.sq_depth,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: self.port.max_inline,
            },
            qp_type: ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: pd, cq and srq are live objects of this fabric.
        let qp = unsafe { ibv_create_qp(self.pd, &mut ia) };
        if qp.is_null() {
            return Err(os_err("ibv_create_qp"));
        }
        self.port.max_inline = self.port.max_inline.min(ia.cap.max_inline_data);
        // SAFETY: `qp` is live.
        let qpn = unsafe { (*qp).qp_num };
        let mut psn = [0u8; 4];
        getrandom::fill(&mut psn).map_err(|e| format!("random PSN: {e}"))?;
        let psn = u32::from_le_bytes(psn) & 0xff_ffff;
        self.qps.insert(qpn, (qp, psn));
        // SAFETY: a zeroed attr is valid; only the masked fields are read.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.port.port;
        // Remote writes land only in memory registered writable (a
        // window's: `reg_mr_window`); the queue pair lets them through.
        a.qp_access_flags = (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0) as _;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
            | ibv_qp_attr_mask::IBV_QP_PORT.0
            | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0;
        // SAFETY: `qp` was just created and is live.
        if let Err(e) = unsafe { modify_qp(qp, &mut a, mask, "INIT") } {
            self.destroy_qp(qpn);
            return Err(e);
        }
        Ok(LocalQp { qpn, psn })
    }

    fn create_ud(&mut self, recv_depth: u32) -> Result<u32, String> {
        if !self.ud.is_null() {
            return Err("this port already has its datagram queue pair".into());
        }
        let mut ia = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: 64,
                max_recv_wr: recv_depth.max(1),
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ibv_qp_type::IBV_QPT_UD,
            sq_sig_all: 0,
        };
        // SAFETY: pd and cq are live objects of this fabric.
        let qp = unsafe { ibv_create_qp(self.pd, &mut ia) };
        if qp.is_null() {
            return Err(os_err("ibv_create_qp(UD)"));
        }
        // Owned from here: `Drop` destroys it.
        self.ud = qp;
        // SAFETY: a zeroed attr is valid; only the masked fields are read.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.port.port;
        a.qkey = UD_QKEY;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
            | ibv_qp_attr_mask::IBV_QP_PORT.0
            | ibv_qp_attr_mask::IBV_QP_QKEY.0;
        // SAFETY: `qp` is live (just created, owned by `self.ud`).
        unsafe { modify_qp(qp, &mut a, mask, "UD INIT") }?;
        // SAFETY: as above.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        // SAFETY: as above.
        unsafe { modify_qp(qp, &mut a, ibv_qp_attr_mask::IBV_QP_STATE.0, "UD RTR") }?;
        // SAFETY: as above.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.sq_psn = 0;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0 | ibv_qp_attr_mask::IBV_QP_SQ_PSN.0;
        // SAFETY: as above.
        unsafe { modify_qp(qp, &mut a, mask, "UD RTS") }?;
        // SAFETY: `qp` is live.
        Ok(unsafe { (*qp).qp_num })
    }

    fn ud_ah(&mut self, to: &UdAddr) -> Result<u64, String> {
        // SAFETY: a zeroed attr is valid; the fields set below are the ones
        // an address handle reads.
        let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
        a.dlid = to.lid;
        a.port_num = self.port.port;
        if self.port.link == Link::Ethernet || to.lid == 0 {
            a.is_global = 1;
            a.grh.dgid = ibv_gid { raw: to.gid };
            a.grh.sgid_index = self.port.gid_index;
            a.grh.hop_limit = 64;
        }
        // SAFETY: pd is live; `a` outlives the call.
        let ah = unsafe { ibv_create_ah(self.pd, &mut a) };
        if ah.is_null() {
            return Err(os_err("ibv_create_ah"));
        }
        self.ahs.push(ah);
        Ok(self.ahs.len() as u64 - 1)
    }

    unsafe fn post_ud_send(
        &mut self,
        ah: u64,
        qpn: u32,
        wr_id: u64,
        sge: Sge,
    ) -> Result<(), String> {
        if self.ud.is_null() {
            return Err("no datagram queue pair".into());
        }
        let ah = *self.ahs.get(ah as usize).ok_or("no such address handle")?;
        let mut s = to_ibv(sge);
        // SAFETY: zeroed work requests are valid; the fields set below are
        // the ones a UD SEND reads.
        let mut w: ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr_id;
        w.opcode = ibv_wr_opcode::IBV_WR_SEND;
        w.num_sge = 1;
        w.sg_list = &mut s;
        w.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        w.wr.ud = ud_t {
            ah,
            remote_qpn: qpn,
            remote_qkey: UD_QKEY,
        };
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: `ud` and `ah` are live; `w` and `s` outlive the call; the
        // memory `s` names is the caller's duty (`Fabric::post_ud_send`).
        posted("ibv_post_send(UD)", unsafe {
            ibv_post_send(self.ud, &mut w, &mut bad)
        })
    }

    unsafe fn post_ud_recv(&mut self, bufs: &[(u64, Sge)]) -> Result<(), String> {
        if self.ud.is_null() {
            return Err("no datagram queue pair".into());
        }
        if bufs.is_empty() {
            return Ok(());
        }
        let head = self.chain.fill(bufs);
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: `ud` is live; the chain (in `self.chain`, untouched until
        // the next fill) outlives the call; the buffers are the caller's
        // duty (`Fabric::post_ud_recv`).
        posted("ibv_post_recv(UD)", unsafe {
            ibv_post_recv(self.ud, head, &mut bad)
        })
    }

    fn fail_qp(&mut self, qpn: u32) -> Result<(), String> {
        let (qp, _) = *self.qps.get(&qpn).ok_or("no such queue pair")?;
        // SAFETY: a zeroed attr is valid; only the state is read.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_ERR;
        // SAFETY: `qp` is live (in `self.qps`).
        unsafe { modify_qp(qp, &mut a, ibv_qp_attr_mask::IBV_QP_STATE.0, "ERR") }
    }

    fn connect(&mut self, qpn: u32, remote: &RemoteQp) -> Result<(), String> {
        let (qp, psn) = *self.qps.get(&qpn).ok_or("no such queue pair")?;
        // SAFETY: a zeroed attr is valid; only the masked fields are read.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = self.port.mtu.min(remote.mtu).clamp(1, 5) as _;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = self.max_dest_rd;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.sl = 0;
        a.ah_attr.src_path_bits = 0;
        a.ah_attr.port_num = self.port.port;
        if self.port.link == Link::Ethernet || remote.lid == 0 {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ibv_gid { raw: remote.gid };
            a.ah_attr.grh.sgid_index = self.port.gid_index;
            a.ah_attr.grh.hop_limit = 64;
        }
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_AV.0
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU.0
            | ibv_qp_attr_mask::IBV_QP_DEST_QPN.0
            | ibv_qp_attr_mask::IBV_QP_RQ_PSN.0
            | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0;
        // SAFETY: `qp` is live (in `self.qps`).
        unsafe { modify_qp(qp, &mut a, mask, "RTR") }?;
        // SAFETY: as above.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.timeout = self.timeout;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = psn;
        a.max_rd_atomic = self.port.max_rd_atomic;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT.0
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0
            | ibv_qp_attr_mask::IBV_QP_SQ_PSN.0
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0;
        // SAFETY: as above.
        unsafe { modify_qp(qp, &mut a, mask, "RTS") }
    }

    fn reg_mr(&mut self, addr: u64, len: u64, remote_read: bool) -> Result<Mr, String> {
        let mut access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        if remote_read {
            access |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        }
        // SAFETY: registration pins the range; it reads no memory itself.
        let mr = unsafe { ibv_reg_mr(self.pd, addr as *mut _, len as usize, access as i32) };
        if mr.is_null() {
            return Err(os_err("ibv_reg_mr"));
        }
        Ok(self.keep_mr(mr, addr, len, remote_read))
    }

    fn reg_mr_window(&mut self, addr: u64, len: u64) -> Result<Mr, String> {
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        // SAFETY: registration pins the range; it reads no memory itself.
        let mr = unsafe { ibv_reg_mr(self.pd, addr as *mut _, len as usize, access as i32) };
        if mr.is_null() {
            return Err(os_err("ibv_reg_mr"));
        }
        Ok(self.keep_mr(mr, addr, len, true))
    }

    fn reg_dmabuf_mr(
        &mut self,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        iova: u64,
        remote_read: bool,
    ) -> Result<Mr, String> {
        let mut access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        if remote_read {
            access |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        }
        // SAFETY: `fd` is open for the call (borrowed); the kernel takes its
        // own reference to the dma-buf behind it, which keeps the memory
        // mapped for the NIC until `ibv_dereg_mr` whatever the descriptor
        // does after; nothing is read or written here.
        let mr = unsafe {
            ibv_reg_dmabuf_mr(
                self.pd,
                offset,
                len as usize,
                iova,
                fd.as_raw_fd(),
                access as i32,
            )
        };
        if mr.is_null() {
            return Err(os_err("ibv_reg_dmabuf_mr"));
        }
        Ok(self.keep_mr(mr, iova, len, remote_read))
    }

    fn probe_dmabuf(&mut self) -> Result<(), String> {
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32;
        // SAFETY: fd -1 is never a dma-buf: the call fails before anything
        // is registered, and tells by its errno whether the provider and
        // the kernel know the operation (EBADF) or not.
        let mr = unsafe { ibv_reg_dmabuf_mr(self.pd, 0, 4096, 0, -1, access) };
        if !mr.is_null() {
            // SAFETY: a registration we own (it should not exist).
            unsafe { ibv_dereg_mr(mr) };
            return Ok(());
        }
        dmabuf_probe_answer(std::io::Error::last_os_error())
            .map_err(|e| format!("{}: {e}", self.port.device))
    }

    fn dereg_mr(&mut self, mr: Mr) {
        if let Some(m) = self.mrs.remove(&mr.handle) {
            // SAFETY: `m` is a live registration, dropped from the map.
            unsafe { ibv_dereg_mr(m) };
        }
    }

    unsafe fn post_send(&mut self, qpn: u32, wr: &SendWr) -> Result<(), String> {
        let (qp, _) = *self.qps.get(&qpn).ok_or("no such queue pair")?;
        // SAFETY: zeroed work requests are valid; the fields set below are
        // the ones the opcode reads.
        let mut w: ibv_send_wr = unsafe { std::mem::zeroed() };
        let mut sge: ibv_sge;
        match *wr {
            SendWr::Send {
                wr_id,
                sge: s,
                imm,
                inline,
                signaled,
            } => {
                sge = to_ibv(s);
                w.wr_id = wr_id;
                w.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
                w.num_sge = i32::from(s.len > 0);
                w.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
                let mut fl = 0;
                if signaled {
                    fl |= ibv_send_flags::IBV_SEND_SIGNALED.0;
                }
                if inline {
                    fl |= ibv_send_flags::IBV_SEND_INLINE.0;
                }
                w.send_flags = fl;
            }
            SendWr::Read {
                wr_id,
                local,
                remote_addr,
                rkey,
            }
            | SendWr::Write {
                wr_id,
                local,
                remote_addr,
                rkey,
            } => {
                sge = to_ibv(local);
                w.wr_id = wr_id;
                w.opcode = if matches!(wr, SendWr::Read { .. }) {
                    ibv_wr_opcode::IBV_WR_RDMA_READ
                } else {
                    ibv_wr_opcode::IBV_WR_RDMA_WRITE
                };
                w.num_sge = 1;
                w.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
                w.wr.rdma = rdma_t { remote_addr, rkey };
            }
        }
        w.sg_list = &mut sge;
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: `qp` is live; `w` and `sge` outlive the call (the device
        // copies the request); the memory `sge` names is the caller's duty
        // (`Fabric::post_send`).
        posted("ibv_post_send", unsafe {
            ibv_post_send(qp, &mut w, &mut bad)
        })
    }

    unsafe fn post_recv(&mut self, bufs: &[(u64, Sge)]) -> Result<(), String> {
        if bufs.is_empty() {
            return Ok(());
        }
        let head = self.chain.fill(bufs);
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: `srq` is live; the chain (in `self.chain`, untouched until
        // the next fill) outlives the call; the buffers are the caller's
        // duty (`Fabric::post_recv`).
        posted("ibv_post_srq_recv", unsafe {
            ibv_post_srq_recv(self.srq, head, &mut bad)
        })
    }

    fn poll(&mut self, out: &mut Vec<Wc>, max: usize) -> usize {
        let mut n = self.early.len();
        if n > 0 {
            out.append(&mut self.early);
            if n >= max {
                return n;
            }
        }
        let want = (max - n).min(POLL_MAX);
        // SAFETY: `cq` is live; `wc_buf` holds `want` entries, any bytes of
        // which are valid completions.
        let got = unsafe { ibv_poll_cq(self.cq, want as i32, self.wc_buf.as_mut_ptr()) };
        for k in 0..got.max(0) as usize {
            let w = self.convert(&self.wc_buf[k]);
            out.push(w);
            n += 1;
        }
        n
    }

    fn wait(&mut self, timeout: Duration) {
        // Arm, then look once more: a completion that came before the arm
        // raises no event.
        // SAFETY: `cq` is live.
        if unsafe { ibv_req_notify_cq(self.cq, 0) } != 0 {
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
            return;
        }
        // SAFETY: a zeroed completion is a valid out-parameter.
        let mut w: ibv_wc = unsafe { std::mem::zeroed() };
        // SAFETY: `cq` is live; room for one.
        if unsafe { ibv_poll_cq(self.cq, 1, &mut w) } > 0 {
            let w = self.convert(&w);
            self.early.push(w);
            return;
        }
        // SAFETY: the channel and the context outlive this call.
        let (cfd, afd) = unsafe {
            (
                BorrowedFd::borrow_raw((*self.channel).fd),
                BorrowedFd::borrow_raw((*self.ctx).async_fd),
            )
        };
        let mut fds = [
            PollFd::new(cfd, PollFlags::POLLIN),
            PollFd::new(self.wake.0.as_fd(), PollFlags::POLLIN),
            PollFd::new(afd, PollFlags::POLLIN),
        ];
        let ms = PollTimeout::try_from(timeout.as_millis().min(i32::MAX as u128) as i32)
            .unwrap_or(PollTimeout::MAX);
        let _ = nix::poll::poll(&mut fds, ms);
        if fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
        {
            let mut cq: *mut ibv_cq = ptr::null_mut();
            let mut ctx: *mut std::ffi::c_void = ptr::null_mut();
            // SAFETY: the channel is live and non-blocking.
            if unsafe { ibv_get_cq_event(self.channel, &mut cq, &mut ctx) } == 0 {
                self.unacked += 1;
                if self.unacked >= 64 {
                    // SAFETY: `cq` is live; these events were taken.
                    unsafe { ibv_ack_cq_events(self.cq, self.unacked) };
                    self.unacked = 0;
                }
            }
        }
        if fds[1]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
        {
            let _ = self.wake.0.read();
        }
        if fds[2]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
        {
            self.async_ready = true;
        }
    }

    fn waker(&self) -> Arc<dyn Wake> {
        self.wake.clone()
    }

    fn async_event(&mut self) -> Option<(Option<u32>, String)> {
        // Reading the descriptor is a system call: do it when `wait` saw it
        // readable, else once in ASYNC_EVERY calls (a progress pass each).
        if !self.async_ready {
            self.async_skipped += 1;
            if self.async_skipped < ASYNC_EVERY {
                return None;
            }
        }
        self.async_skipped = 0;
        self.async_ready = false;
        self.read_async_event()
    }

    fn async_event_now(&mut self) -> Option<(Option<u32>, String)> {
        self.read_async_event()
    }
}

impl VerbsFabric {
    /// The next fatal asynchronous event from the descriptor, skipping
    /// the others.
    fn read_async_event(&mut self) -> Option<(Option<u32>, String)> {
        // SAFETY: a zeroed event is a valid out-parameter; the async fd is
        // non-blocking; every event taken is acknowledged.
        unsafe {
            let mut e: ibv_async_event = std::mem::zeroed();
            if ibv_get_async_event(self.ctx, &mut e) != 0 {
                return None;
            }
            use ibv_event_type::*;
            let t = e.event_type;
            let qpn = match t {
                IBV_EVENT_QP_FATAL
                | IBV_EVENT_QP_REQ_ERR
                | IBV_EVENT_QP_ACCESS_ERR
                | IBV_EVENT_PATH_MIG_ERR => Some((*e.element.qp).qp_num),
                _ => None,
            };
            ibv_ack_async_event(&mut e);
            let fatal = matches!(
                t,
                IBV_EVENT_QP_FATAL
                    | IBV_EVENT_QP_REQ_ERR
                    | IBV_EVENT_QP_ACCESS_ERR
                    | IBV_EVENT_PATH_MIG_ERR
                    | IBV_EVENT_PORT_ERR
                    | IBV_EVENT_DEVICE_FATAL
                    | IBV_EVENT_CQ_ERR
                    | IBV_EVENT_SRQ_ERR
            );
            if !fatal {
                return self.read_async_event();
            }
            Some((
                qpn,
                format!(
                    "asynchronous event {t:?} on {} port {}",
                    self.port.device, self.port.port
                ),
            ))
        }
    }
}

impl Drop for VerbsFabric {
    fn drop(&mut self) {
        // SAFETY: every pointer is ours and live (or null), destroyed once,
        // children before parents.
        unsafe {
            if !self.cq.is_null() && self.unacked > 0 {
                ibv_ack_cq_events(self.cq, self.unacked);
            }
            for (_, (qp, _)) in self.qps.drain() {
                ibv_destroy_qp(qp);
            }
            if !self.ud.is_null() {
                ibv_destroy_qp(self.ud);
            }
            for ah in self.ahs.drain(..) {
                ibv_destroy_ah(ah);
            }
            if !self.srq.is_null() {
                ibv_destroy_srq(self.srq);
            }
            if !self.cq.is_null() {
                ibv_destroy_cq(self.cq);
            }
            if !self.channel.is_null() {
                ibv_destroy_comp_channel(self.channel);
            }
            for (_, mr) in self.mrs.drain() {
                ibv_dereg_mr(mr);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            if !self.ctx.is_null() {
                ibv_close_device(self.ctx);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::dmabuf_probe_answer;
    use std::io::Error;

    #[test]
    fn the_dma_buf_probe_reads_ebadf_as_support_and_anything_else_as_none() {
        assert_eq!(
            dmabuf_probe_answer(Error::from_raw_os_error(nix::libc::EBADF)),
            Ok(())
        );
        for e in [
            nix::libc::EOPNOTSUPP,
            nix::libc::ENOSYS,
            nix::libc::EPROTONOSUPPORT,
            nix::libc::EINVAL,
        ] {
            let why = dmabuf_probe_answer(Error::from_raw_os_error(e)).unwrap_err();
            assert!(
                why.starts_with("ibv_reg_dmabuf_mr is not supported: "),
                "{why}"
            );
        }
    }
}
