//! GPUDirect RDMA through the whole stack without a GPU or a NIC: two ranks
//! "on two nodes", each a driver over btl-ib's verbs model
//! (`gmpi_btl_ib::model`, whose NIC reaches the gpu layer's test double as
//! GPU memory) and the double. For each way the NIC may register GPU memory
//! (dma-buf, `nvidia_peermem`, none) and each host/device pair: the protocol
//! chosen, the bytes delivered, the registrations and exports made, and no
//! host copy of device data where GPUDirect applies; every registration
//! comes back at the end of each message, so a freed and reallocated buffer
//! can never meet a stale one. With the device registration cache on,
//! registrations stay, whole allocations, until a new allocation (a new
//! buffer id) is seen at their address.

use std::path::PathBuf;
use std::sync::Arc;

use gmpi_btl::loopback::Loopback;
use gmpi_btl::{Btl, DeviceReg};
use gmpi_btl_ib::gpudirect::Want;
use gmpi_btl_ib::model::{DeviceMemory, GpuNic, ModelFabric, ModelNet, Registered};
use gmpi_btl_ib::{IbBtl, IbConfig};
use gmpi_gpu::double::{Counts, TestCuda};
use gmpi_gpu::{Gpu, GpuConfig, MemKind};
use gmpi_pml::{
    Buf, Pml, PmlConfig, PmlError, Protocol, RecvArgs, ReqId, SendArgs, SendMode, Status,
};

use crate::buffer::HostMem;
use crate::progress::Driver;

const DEV: MemKind = MemKind::Device { ordinal: 0 };

/// The double's device memory, as the model's NIC reaches it.
#[derive(Debug)]
struct DoubleMem(Arc<TestCuda>);

impl DeviceMemory for DoubleMem {
    fn contains(&self, addr: u64, len: u64) -> bool {
        self.0.is_device_range(addr, len as usize)
    }
    fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        self.0.peek(addr, len)
    }
    fn write(&self, addr: u64, data: &[u8]) {
        self.0.poke(addr, data)
    }
    fn dmabuf_start(&self, fd: std::os::fd::BorrowedFd<'_>) -> Option<u64> {
        self.0.dmabuf_start(fd)
    }
    fn buffer_id(&self, addr: u64) -> Option<u64> {
        self.0.buffer_id_at(addr)
    }
}

/// A sysfs root with `nvidia_peermem` loaded, or without.
struct Sys(PathBuf);

impl Sys {
    fn new(peermem: bool) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "gmpi-ib-gpu-sys-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(root.join("module/ib_core")).unwrap();
        if peermem {
            std::fs::create_dir_all(root.join("module/nvidia_peermem")).unwrap();
        }
        Sys(root)
    }
}

impl Drop for Sys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct World {
    net: ModelNet,
    cuda: Arc<TestCuda>,
    d: Vec<Driver<HostMem>>,
    /// Host buffers, kept alive while the drivers may touch them.
    host: Vec<Vec<u8>>,
    /// The registrations each rank's port holds between messages (its
    /// send slots and receive buffers).
    idle_regs: Vec<usize>,
}

impl World {
    /// Two ranks on two "nodes" whose NICs can do `nic`, on GPUs that
    /// export dma-bufs where `gpu_dmabuf` says (rank 0, rank 1).
    fn new(nic: GpuNic, gpu_dmabuf: [bool; 2], want: Want) -> (Self, Vec<Option<DeviceReg>>) {
        Self::build(nic, gpu_dmabuf, want, |_, _| {})
    }

    /// [`World::new`], with `adjust` run over each rank's btl after its
    /// decision (to force a mode its GPU cannot serve).
    fn build(
        nic: GpuNic,
        gpu_dmabuf: [bool; 2],
        want: Want,
        adjust: impl Fn(usize, &mut IbBtl<ModelFabric>),
    ) -> (Self, Vec<Option<DeviceReg>>) {
        let cuda = Arc::new(TestCuda::new(1));
        let net = ModelNet::with_gpu(Arc::new(DoubleMem(cuda.clone())), nic);
        let sys = Sys::new(nic.peermem);
        let mut ibs: Vec<IbBtl<ModelFabric>> = (0..2u32)
            .map(|r| {
                IbBtl::new(
                    r,
                    2,
                    net.fabric(128, 256, 1024),
                    IbConfig::default(),
                    &[1 - r],
                )
                .expect("ib over the model")
            })
            .collect();
        let cards: Vec<String> = ibs.iter().map(|b| b.card()).collect();
        let mut d = Vec::new();
        let mut via = Vec::new();
        for (r, mut b) in ibs.drain(..).enumerate() {
            b.add_peer(1 - r as u32, &cards[1 - r]).expect("connect");
            let mut view = cuda.process(r as u32);
            if gpu_dmabuf[r] {
                view = view.with_dmabuf();
            }
            let g = Arc::new(Gpu::with_api(Arc::new(view), GpuConfig::default()));
            let decision = b.decide_gpudirect(g.gpudirect_probe(), want, &sys.0);
            via.push(decision.via);
            adjust(r, &mut b);
            let btls: Vec<Box<dyn Btl>> = vec![Box::new(Loopback::new(r as u32)), Box::new(b)];
            d.push(Driver::new(
                Pml::new(r as u32, 2, PmlConfig::default()),
                btls,
                HostMem,
                g,
            ));
        }
        let mut w = Self {
            net,
            cuda,
            d,
            host: Vec::new(),
            idle_regs: Vec::new(),
        };
        w.connect();
        w.idle_regs = (0..2).map(|r| w.net.registrations(r)).collect();
        (w, via)
    }

    /// One byte from rank 0 to rank 1: the two ranks' queue pairs are made
    /// (and their receive buffers registered) on first use.
    fn connect(&mut self) {
        let (s, r) = (
            self.buffer(MemKind::Host, &[1]),
            self.buffer(MemKind::Host, &[0]),
        );
        let (sent, got) = self.message(s, r, 1);
        assert!(sent.is_ok() && got.is_ok(), "the first message failed");
    }

    /// Send `s` from rank 0 into `r` on rank 1 with `tag`, progressing both
    /// ranks until both ends are done (no rank may fail meanwhile); their
    /// outcomes.
    fn message(
        &mut self,
        s: Buf,
        r: Buf,
        tag: i32,
    ) -> (Result<Status, PmlError>, Result<Status, PmlError>) {
        let rid = self.recv(1, 0, tag, r);
        let sid = self.send(0, 1, tag, s);
        let (mut sent, mut got) = (None, None);
        for _ in 0..1_000_000 {
            for d in &mut self.d {
                d.progress();
                assert!(d.fatal().is_none(), "fatal: {:?}", d.fatal());
            }
            sent = sent.or_else(|| self.d[0].test(sid));
            got = got.or_else(|| self.d[1].test(rid));
            if let (Some(s), Some(g)) = (sent.clone(), got.clone()) {
                return (s, g);
            }
        }
        panic!("the message did not arrive");
    }

    /// Post on rank `at` a receive of `buf` from rank `from` with `tag`.
    fn recv(&mut self, at: usize, from: u32, tag: i32, buf: Buf) -> ReqId {
        self.d[at]
            .post_recv(RecvArgs {
                ctx: 0,
                src: Some(from),
                src_world: Some(from),
                tag: Some(tag),
                buf,
                consumed: false,
            })
            .expect("post_recv")
    }

    /// Post on rank `from` a standard send of `buf` to rank `to` with `tag`.
    fn send(&mut self, from: usize, to: u32, tag: i32, buf: Buf) -> ReqId {
        self.d[from]
            .post_send(SendArgs {
                ctx: 0,
                src: from as u32,
                dest: to,
                tag,
                buf,
                mode: SendMode::Standard,
            })
            .expect("post_send")
    }

    fn buffer(&mut self, kind: MemKind, data: &[u8]) -> Buf {
        let addr = if kind.is_host() {
            let mut v = data.to_vec();
            let a = v.as_mut_ptr() as u64;
            self.host.push(v);
            a
        } else {
            // Inside an allocation, off its GPU pages' boundaries: a dma-buf
            // registration then has an offset that matters.
            let p = self.cuda.malloc(data.len() + (128 << 10), 0) + (68 << 10) + 40;
            self.cuda.poke(p, data);
            p
        };
        Buf {
            addr,
            len: data.len(),
            kind,
        }
    }

    fn read(&self, b: Buf) -> Vec<u8> {
        if b.kind.is_host() {
            let v = self
                .host
                .iter()
                .find(|v| v.as_ptr() as u64 == b.addr)
                .expect("a buffer of this world");
            v.clone()
        } else {
            self.cuda.peek(b.addr, b.len)
        }
    }

    /// Send `len` bytes of `sk` memory from rank 0 into `rk` memory on
    /// rank 1; check them and that every registration came back; return
    /// the double's and the NIC's counts of the transfer and the protocol.
    fn transfer(&mut self, sk: MemKind, rk: MemKind, len: usize) -> (Counts, Registered, Protocol) {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        let s = self.buffer(sk, &data);
        let r = self.buffer(rk, &vec![0u8; len]);
        let protocol = self.d[0]
            .pml
            .protocol_for(1, len, sk, SendMode::Standard)
            .expect("a route");
        let (c0, n0) = (self.cuda.counts(), self.net.registered());
        let (sent, got) = self.message(s, r, 3);
        sent.expect("send ok");
        let st = got.expect("receive ok");
        assert_eq!(st.len, len as u64);
        assert!(
            self.read(r) == data,
            "{sk:?} -> {rk:?}, {len} B: bytes differ"
        );
        // The FIN's deregistration runs when rank 0 next progresses.
        for _ in 0..100 {
            for d in &mut self.d {
                d.progress();
            }
        }
        for rank in 0..2 {
            assert_eq!(
                self.net.registrations(rank),
                self.idle_regs[rank],
                "rank {rank} still holds a registration after {sk:?} -> {rk:?}, {len} B"
            );
        }
        let c1 = self.cuda.counts();
        let n1 = self.net.registered();
        let counts = Counts {
            dtoh: c1.dtoh - c0.dtoh,
            htod: c1.htod - c0.htod,
            dtod: c1.dtod - c0.dtod,
            dmabuf_exports: c1.dmabuf_exports - c0.dmabuf_exports,
            sync_memops: c1.sync_memops - c0.sync_memops,
            ..Counts::default()
        };
        let regs = Registered {
            host: n1.host - n0.host,
            device_address: n1.device_address - n0.device_address,
            dmabuf: n1.dmabuf - n0.dmabuf,
        };
        (counts, regs, protocol)
    }
}

/// Sizes across the get threshold and the NIC's 1 MiB read chunk.
const SIZES: [usize; 3] = [64 << 10, 1 << 20, (3 << 20) + 5];

#[test]
fn dma_buf_gpudirect_reads_gpu_memory_with_no_host_copy() {
    let nic = GpuNic {
        dmabuf: true,
        peermem: true,
    };
    let (mut w, via) = World::new(nic, [true, true], Want::Auto);
    assert_eq!(via, vec![Some(DeviceReg::DmaBuf); 2], "dma-buf comes first");
    for len in SIZES {
        let (c, regs, p) = w.transfer(DEV, DEV, len);
        assert_eq!(p, Protocol::RndvGet, "{len} B");
        assert_eq!((c.dtoh, c.htod, c.dtod), (0, 0, 0), "{len} B: {c:?}");
        assert_eq!(c.dmabuf_exports, 2, "the sender's and the receiver's");
        assert_eq!(
            c.sync_memops, 2,
            "both buffers made synchronous for the NIC"
        );
        assert_eq!((regs.dmabuf, regs.device_address), (2, 0), "{regs:?}");

        // A host sender: its buffer registered as usual, the receiver's
        // GPU memory through its dma-buf.
        let (c, regs, p) = w.transfer(MemKind::Host, DEV, len);
        assert_eq!(p, Protocol::RndvGet);
        assert_eq!((c.dtoh, c.htod, c.dmabuf_exports), (0, 0, 1), "{c:?}");
        assert_eq!((regs.dmabuf, regs.host), (1, 1), "{regs:?}");

        // A host receiver reads the sender's GPU memory.
        let (c, regs, p) = w.transfer(DEV, MemKind::Host, len);
        assert_eq!(p, Protocol::RndvGet);
        assert_eq!((c.dtoh, c.htod, c.dmabuf_exports), (0, 0, 1), "{c:?}");
        assert_eq!((regs.dmabuf, regs.host), (1, 1), "{regs:?}");
    }
}

#[test]
fn without_nic_dma_buf_peermem_registers_device_addresses() {
    let nic = GpuNic {
        dmabuf: false,
        peermem: true,
    };
    let (mut w, via) = World::new(nic, [true, true], Want::Auto);
    assert_eq!(via, vec![Some(DeviceReg::Address); 2]);
    for len in SIZES {
        let (c, regs, p) = w.transfer(DEV, DEV, len);
        assert_eq!(p, Protocol::RndvGet);
        assert_eq!((c.dtoh, c.htod, c.dmabuf_exports), (0, 0, 0), "{c:?}");
        assert_eq!((regs.device_address, regs.dmabuf), (2, 0), "{regs:?}");
        assert_eq!(
            c.sync_memops, 2,
            "both buffers made synchronous for the NIC"
        );
    }
}

#[test]
fn without_gpudirect_device_data_is_staged_and_nothing_registers_gpu_memory() {
    for (nic, gpu, want) in [
        // Neither path on the host.
        (GpuNic::default(), [true, true], Want::Auto),
        // The NIC could, but the GPU does not export and peermem is absent.
        (
            GpuNic {
                dmabuf: true,
                peermem: false,
            },
            [false, false],
            Want::Auto,
        ),
        // Everything could, but the user said no.
        (
            GpuNic {
                dmabuf: true,
                peermem: true,
            },
            [true, true],
            Want::Off,
        ),
    ] {
        let (mut w, via) = World::new(nic, gpu, want);
        assert_eq!(via, vec![None, None], "{nic:?} {gpu:?} {want:?}");
        let len = 1 << 20;
        let (c, regs, p) = w.transfer(DEV, DEV, len);
        assert_eq!(p, Protocol::RndvPipelined);
        assert!(c.dtoh > 0 && c.htod > 0, "staged through the host: {c:?}");
        assert_eq!((regs.dmabuf, regs.device_address), (0, 0), "{regs:?}");
        assert_eq!(c.dmabuf_exports, 0);
    }
}

#[test]
fn a_receiver_without_gpudirect_pulls_the_senders_gpu_memory_through_host_slots() {
    // Rank 0 registers its GPU memory by dma-buf and offers a get; rank 1's
    // GPU exports nothing, so its transport has no GPUDirect: it reads the
    // sender's GPU memory by RDMA into pinned host slots and copies them
    // into its GPU (the staged pull). No copy out of rank 0's GPU is made,
    // the message arrives whole, and rank 0's registration is released
    // (`transfer` checks).
    let nic = GpuNic {
        dmabuf: true,
        peermem: false,
    };
    let (mut w, via) = World::new(nic, [true, false], Want::Auto);
    assert_eq!(via, vec![Some(DeviceReg::DmaBuf), None]);
    let (c, regs, p) = w.transfer(DEV, DEV, 1 << 20);
    assert_eq!(p, Protocol::RndvGet, "the sender's choice");
    assert_eq!(c.dtoh, 0, "the NIC read rank 0's GPU memory: {c:?}");
    assert!(
        c.htod > 0,
        "copied into rank 1's GPU from host slots: {c:?}"
    );
    assert_eq!((regs.dmabuf, regs.device_address), (1, 0), "{regs:?}");
    assert!(
        regs.host > 0,
        "rank 1's slots, registered for the reads: {regs:?}"
    );
}

#[test]
fn a_failed_export_at_the_receiver_fails_the_get_and_falls_back_to_the_stream() {
    // Rank 1's transport is told to register by dma-buf, but its GPU cannot
    // export: the get fails before anything is posted, and the pml takes
    // the stream instead.
    let nic = GpuNic {
        dmabuf: true,
        peermem: false,
    };
    let (mut w, via) = World::build(nic, [true, false], Want::Auto, |r, b| {
        if r == 1 {
            b.set_gpudirect(Some(DeviceReg::DmaBuf));
        }
    });
    assert_eq!(via, vec![Some(DeviceReg::DmaBuf), None]);
    let (c, regs, _) = w.transfer(DEV, DEV, 1 << 20);
    assert!(c.htod > 0, "copied into rank 1's GPU from the host: {c:?}");
    assert_eq!(c.dmabuf_exports, 1, "rank 0's only");
    assert_eq!(regs.dmabuf, 1, "{regs:?}");
}

/// A port that goes down (a fatal asynchronous event naming no queue pair)
/// under messages in flight both ways: every send and receive towards the
/// peer behind it ends with `PeerFailed` on both ranks, none hangs.
#[test]
fn a_port_error_ends_every_request_towards_the_peers_behind_it() {
    let (mut w, _) = World::new(GpuNic::default(), [false, false], Want::Off);
    let mut reqs: Vec<(usize, ReqId)> = Vec::new();
    for r in 0..2usize {
        let peer = 1 - r as u32;
        for k in 0..200 {
            // Receives never matched (tags nobody sends), and sends, eager
            // and by rendezvous.
            let rb = w.buffer(MemKind::Host, &[0u8; 64]);
            let id = w.recv(r, peer, 1000 + k, rb);
            reqs.push((r, id));
            let len = if k % 10 == 0 { 100_000 } else { 64 };
            let sb = w.buffer(MemKind::Host, &vec![7u8; len]);
            let id = w.send(r, peer, k, sb);
            reqs.push((r, id));
        }
    }
    for _ in 0..50 {
        for d in &mut w.d {
            d.progress();
        }
    }
    for dev in 0..2 {
        w.net.async_event(
            dev,
            None,
            "asynchronous event IBV_EVENT_PORT_ERR on model port 1",
        );
    }
    let mut open: Vec<(usize, ReqId)> = reqs;
    for _ in 0..10_000 {
        for d in &mut w.d {
            d.progress();
        }
        open.retain(|&(r, id)| match w.d[r].test(id) {
            None => true,
            Some(res) => {
                // A send may have finished before the port went down; a
                // receive of an unsent tag can only fail.
                if let Err(e) = res {
                    assert!(
                        matches!(e, gmpi_pml::PmlError::PeerFailed(_)),
                        "rank {r}: {e}"
                    );
                }
                false
            }
        });
        if open.is_empty() {
            return;
        }
    }
    panic!("{} requests still open after the port error", open.len());
}

/// Rank 0's and rank 1's device buffers, sent from one into the other:
/// whole allocations registered on first use and kept (the device cache, as
/// `GMPI_IB_RCACHE=on` sets it), serving every later message inside them
/// with no export and no registration; once both allocations are freed and
/// allocated again at the same addresses (new buffer ids), the next message
/// registers them afresh and never reads or writes through the old
/// registrations (the model fails any access through a registration whose
/// allocation was replaced), and the old entries are released.
#[test]
fn device_registrations_are_kept_per_allocation_and_never_outlive_it() {
    for (nic, dmabuf) in [
        (
            GpuNic {
                dmabuf: true,
                peermem: false,
            },
            true,
        ),
        (
            GpuNic {
                dmabuf: false,
                peermem: true,
            },
            false,
        ),
    ] {
        let (mut w, via) = World::build(nic, [dmabuf; 2], Want::Auto, |_, b| {
            b.set_device_cache(gmpi_btl_ib::rcache::Limits::default());
        });
        assert!(via.iter().all(Option::is_some), "{via:?}");
        let len = (1 << 20) + 3;
        let s = w.buffer(DEV, &vec![0u8; len]);
        let r = w.buffer(DEV, &vec![0u8; len]);
        let registered = |w: &World| {
            let n = w.net.registered();
            n.dmabuf + n.device_address
        };
        let exports = |w: &World| w.cuda.counts().dmabuf_exports;
        let round = |w: &mut World, s: Buf, r: Buf, seed: usize| {
            let data: Vec<u8> = (0..s.len).map(|i| (i * 13 + seed) as u8).collect();
            w.cuda.poke(s.addr, &data);
            let (sent, got) = w.message(s, r, 7);
            sent.expect("send ok");
            assert_eq!(got.expect("receive ok").len, s.len as u64);
            assert!(
                w.cuda.peek(r.addr, s.len) == data,
                "round {seed}: bytes differ"
            );
            for _ in 0..100 {
                for d in &mut w.d {
                    d.progress();
                }
            }
        };
        let (reg0, exp0) = (registered(&w), exports(&w));
        round(&mut w, s, r, 1);
        assert_eq!(registered(&w) - reg0, 2, "one allocation on each side");
        let expected_exports = if dmabuf { 2 } else { 0 };
        assert_eq!(exports(&w) - exp0, expected_exports);
        // One registration kept on each side (no old one left over).
        let one_kept = |w: &World| {
            for rank in 0..2 {
                assert_eq!(
                    w.net.registrations(rank),
                    w.idle_regs[rank] + 1,
                    "rank {rank} holds its allocation's registration, and only it"
                );
            }
        };
        one_kept(&w);
        // Later messages, and other parts of the same allocations: served
        // from the cache.
        round(&mut w, s, r, 2);
        let part = |b: Buf, off: u64, len: usize| Buf {
            addr: b.addr + off,
            len,
            kind: b.kind,
        };
        round(&mut w, part(s, 4096, 300_000), part(r, 40_000, 300_000), 3);
        round(&mut w, s, r, 4);
        assert_eq!(registered(&w) - reg0, 2, "no registration after the first");
        assert_eq!(
            exports(&w) - exp0,
            expected_exports,
            "no export after the first"
        );

        // Freed and allocated again, at the same addresses.
        let base = |b: Buf| b.addr - (68 << 10) - 40;
        let size = len + (128 << 10);
        let ids = (w.cuda.buffer_id_at(s.addr), w.cuda.buffer_id_at(r.addr));
        w.cuda.free(base(s));
        w.cuda.free(base(r));
        assert_eq!(
            w.cuda.malloc(size, 0),
            base(s),
            "the double reuses the address"
        );
        assert_eq!(
            w.cuda.malloc(size, 0),
            base(r),
            "the double reuses the address"
        );
        assert_ne!(
            (w.cuda.buffer_id_at(s.addr), w.cuda.buffer_id_at(r.addr)),
            ids
        );
        round(&mut w, s, r, 5);
        assert_eq!(
            w.net.stale_device_accesses(),
            0,
            "an old registration was used"
        );
        assert_eq!(registered(&w) - reg0, 4, "the new allocations registered");
        one_kept(&w);
        round(&mut w, s, r, 6);
        assert_eq!(registered(&w) - reg0, 4);
        assert_eq!(w.net.stale_device_accesses(), 0);
    }
}
