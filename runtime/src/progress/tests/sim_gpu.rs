//! Device memory through the pml, over the simulated fabric and the gpu
//! layer's test double: for every H/D combination and size, the protocol
//! chosen, the data delivered, and the number of device copies each side
//! made; CUDA IPC's caches when an address is freed and re-allocated;
//! memory legacy IPC cannot export (pool, VMM) through device staging
//! buffers, whose leases always come back; and the staged pipeline's chunk
//! order under back-pressure and reordering.

use std::sync::Arc;

use gmpi_btl::loopback::Loopback;
use gmpi_btl::sim::Fabric;
use gmpi_btl::{Btl, Capabilities};
use gmpi_gpu::double::{Counts, TestCuda};
use gmpi_gpu::{Gpu, GpuConfig, MemKind};
use gmpi_pml::{Buf, DeviceConfig, Pml, PmlConfig, Protocol, RecvArgs, ReqId, SendArgs, SendMode};

use super::SimMem;
use crate::progress::Driver;

const EAGER: usize = 256;
const FRAG: usize = 1024;
const DEV: MemKind = MemKind::Device { ordinal: 0 };

/// The staged chunk of these tests: neither the transport's fragment nor
/// a divisor of the sizes sent.
const STAGE: usize = 2_000;

/// The device protocols' settings of these tests: device messages up to
/// the host eager limit go eagerly, as `expected` assumes; staged chunks of
/// [`STAGE`] bytes.
fn device() -> DeviceConfig {
    DeviceConfig {
        eager_limit: EAGER,
        pipeline_chunk: STAGE,
        ..DeviceConfig::default()
    }
}

fn caps(ipc: bool) -> Capabilities {
    Capabilities {
        name: "sim",
        eager_limit: EAGER,
        max_send_size: FRAG,
        get: true,
        put: false,
        exclusivity: 10,
        get_threshold: EAGER,
        cuda_ipc: ipc,
        gpudirect: None,
    }
}

struct World {
    f: Fabric,
    cuda: Arc<TestCuda>,
    d: Vec<Driver<SimMem>>,
}

impl World {
    fn new(n: u32, ipc: bool, device: DeviceConfig) -> Self {
        Self::with_processes(n, ipc, device, |r| r)
    }

    /// Ranks that play process `pid(rank)` of the node: ranks of one
    /// process cannot open each other's IPC handles.
    fn with_processes(n: u32, ipc: bool, device: DeviceConfig, pid: impl Fn(u32) -> u32) -> Self {
        let cfg = PmlConfig {
            device,
            ..PmlConfig::default()
        };
        Self::with_config(n, ipc, cfg, pid)
    }

    /// As [`World::with_processes`], under the pml configuration `cfg`.
    fn with_config(n: u32, ipc: bool, cfg: PmlConfig, pid: impl Fn(u32) -> u32) -> Self {
        let f = Fabric::new(n, 1);
        let cuda = Arc::new(TestCuda::new(1));
        let d = (0..n)
            .map(|r| {
                let btls: Vec<Box<dyn Btl>> = vec![
                    Box::new(Loopback::new(r)),
                    Box::new(f.endpoint(r, 0, caps(ipc))),
                ];
                // One gpu layer per rank (its own caches), one driver for
                // all, each rank a process of its own (IPC opens only in
                // another process, as with CUDA).
                let g = Arc::new(Gpu::with_api(
                    Arc::new(cuda.process(pid(r))),
                    GpuConfig::default(),
                ));
                Driver::new(Pml::new(r, n, cfg.clone()), btls, SimMem(f.memory(r)), g)
            })
            .collect();
        Self { f, cuda, d }
    }

    /// A buffer of `kind` on rank `r` holding `data`.
    fn buffer(&self, r: u32, kind: MemKind, data: &[u8]) -> Buf {
        let addr = if kind.is_host() {
            self.f.memory(r).lock().unwrap().alloc_with(data)
        } else {
            let p = self.cuda.malloc(data.len(), 0);
            self.cuda.poke(p, data);
            p
        };
        Buf {
            addr,
            len: data.len(),
            kind,
        }
    }

    fn read(&self, r: u32, b: Buf) -> Vec<u8> {
        if b.kind.is_host() {
            self.f
                .memory(r)
                .lock()
                .unwrap()
                .read(b.addr, b.len)
                .to_vec()
        } else {
            self.cuda.peek(b.addr, b.len)
        }
    }

    fn send(&mut self, from: u32, to: u32, buf: Buf) -> ReqId {
        self.d[from as usize]
            .post_send(SendArgs {
                ctx: 0,
                src: from,
                dest: to,
                tag: 7,
                buf,
                mode: SendMode::Standard,
            })
            .expect("post_send")
    }

    fn recv(&mut self, at: u32, from: u32, buf: Buf) -> ReqId {
        self.d[at as usize]
            .post_recv(RecvArgs {
                ctx: 0,
                src: Some(from),
                src_world: Some(from),
                tag: Some(7),
                buf,
                consumed: false,
            })
            .expect("post_recv")
    }

    fn run(&mut self) {
        for _ in 0..100_000 {
            let mut n = 0;
            for d in &mut self.d {
                n += d.progress();
                assert!(d.fatal().is_none(), "fatal: {:?}", d.fatal());
            }
            if n == 0 && self.f.in_flight() == 0 && self.d.iter().all(|d| !d.has_pending()) {
                return;
            }
        }
        panic!("simulation did not go idle");
    }

    /// Send `len` bytes from `sk` memory on rank 0 to `rk` memory on rank 1;
    /// check the bytes; return the device calls the transfer made.
    fn transfer(&mut self, sk: MemKind, rk: MemKind, len: usize, seed: u8) -> Counts {
        let data = pattern(len, seed);
        let s = self.buffer(0, sk, &data);
        self.transfer_from(s, &data, rk)
    }

    /// Device memory from `alloc` (the double's `malloc`, `malloc_async`,
    /// …) on device 0 holding `data`.
    fn device_buffer(&self, alloc: Alloc, data: &[u8]) -> Buf {
        let p = alloc(&self.cuda, data.len(), 0);
        self.cuda.poke(p, data);
        Buf {
            addr: p,
            len: data.len(),
            kind: DEV,
        }
    }

    /// Send `s` (holding `data`) from rank 0 to `rk` memory on rank 1, as
    /// [`World::transfer`].
    fn transfer_from(&mut self, s: Buf, data: &[u8], rk: MemKind) -> Counts {
        let len = data.len();
        let r = self.buffer(1, rk, &vec![0u8; len]);
        let before = self.cuda.counts();
        let rid = self.recv(1, 0, r);
        let sid = self.send(0, 1, s);
        self.run();
        let st = self.d[1].test(rid).expect("receive done").expect("ok");
        assert_eq!(st.len, len as u64);
        self.d[0].test(sid).expect("send done").expect("ok");
        assert_eq!(self.read(1, r), data, "{:?} -> {rk:?}, {len} B", s.kind);
        diff(&self.cuda.counts(), &before)
    }

    /// Staging leases held by rank `r`'s driver, and by its gpu layer.
    fn leases(&self, r: u32) -> (usize, usize) {
        let d = &self.d[r as usize];
        (d.leases.len(), d.gpu.staging_stats().leased)
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn diff(a: &Counts, b: &Counts) -> Counts {
    Counts {
        queries: a.queries - b.queries,
        buffer_id_checks: a.buffer_id_checks - b.buffer_id_checks,
        dtoh: a.dtoh - b.dtoh,
        htod: a.htod - b.htod,
        dtod: a.dtod - b.dtod,
        bytes: a.bytes - b.bytes,
        ipc_handles: a.ipc_handles - b.ipc_handles,
        ipc_opens: a.ipc_opens - b.ipc_opens,
        ipc_closes: a.ipc_closes - b.ipc_closes,
        reduces: a.reduces - b.reduces,
        kernel_refusals: a.kernel_refusals - b.kernel_refusals,
        pinned: a.pinned - b.pinned,
        mallocs: a.mallocs - b.mallocs,
        frees: a.frees - b.frees,
        async_copies: a.async_copies - b.async_copies,
        async_dtod: a.async_dtod - b.async_dtod,
        dmabuf_exports: a.dmabuf_exports - b.dmabuf_exports,
        sync_memops: a.sync_memops - b.sync_memops,
    }
}

/// The copies each protocol must make: (device-to-host, host-to-device,
/// device-to-device, IPC opens).
fn expected(sk: MemKind, rk: MemKind, len: usize, ipc: bool) -> (u64, u64, u64, u64) {
    let (sd, rd) = (!sk.is_host(), !rk.is_host());
    if len == 0 {
        return (0, 0, 0, 0);
    }
    if len <= EAGER {
        // Eager: one copy out of the sender's GPU, one into the receiver's.
        return (sd as u64, rd as u64, 0, 0);
    }
    if sd && ipc {
        // CUDA IPC: the receiver copies straight from the mapping.
        return if rd { (0, 0, 1, 1) } else { (1, 0, 0, 1) };
    }
    // Staged: the transport can get, so the sender copies each chunk of
    // STAGE bytes out of its GPU and the receiver pulls it (and copies it
    // into its GPU); a host sender offers its buffer for the get, and a
    // device receiver pulls it in chunks of STAGE bytes.
    let staged = len.div_ceil(STAGE) as u64;
    (
        if sd { staged } else { 0 },
        if rd { staged } else { 0 },
        0,
        0,
    )
}

#[test]
fn every_combination_size_and_path() {
    for ipc in [false, true] {
        let mut w = World::new(2, ipc, device());
        for (i, &len) in [0usize, 1, 200, 256, 257, 5000, 100_000].iter().enumerate() {
            for sk in [MemKind::Host, DEV] {
                for rk in [MemKind::Host, DEV] {
                    let c = w.transfer(sk, rk, len, i as u8);
                    let (dtoh, htod, dtod, opens) = expected(sk, rk, len, ipc);
                    assert_eq!(
                        (c.dtoh, c.htod, c.dtod, c.ipc_opens),
                        (dtoh, htod, dtod, opens),
                        "{sk:?} -> {rk:?}, {len} B, ipc {ipc}: {c:?}"
                    );
                    let want = w.d[0]
                        .pml
                        .protocol_for(1, len, sk, SendMode::Standard)
                        .unwrap();
                    if !sk.is_host() && len > EAGER {
                        let p = if ipc {
                            Protocol::RndvIpc
                        } else {
                            Protocol::RndvPipelined
                        };
                        assert_eq!(want, p);
                    }
                }
            }
            // Every IPC descriptor maps the same allocation once per buffer:
            // the double frees nothing here, so each send is a new one.
        }
        assert!(w.cuda.counts().ipc_closes == 0);
    }
}

#[test]
fn managed_memory_is_staged_never_ipc() {
    let mut w = World::new(2, true, device());
    let data: Vec<u8> = (0..50_000u32).map(|i| i as u8).collect();
    let m = w.cuda.malloc_managed(data.len());
    w.cuda.poke(m, &data);
    let s = Buf {
        addr: m,
        len: data.len(),
        kind: MemKind::Managed,
    };
    let r = w.buffer(1, MemKind::Host, &vec![0u8; data.len()]);
    let rid = w.recv(1, 0, r);
    w.send(0, 1, s);
    w.run();
    w.d[1].test(rid).unwrap().unwrap();
    assert_eq!(w.read(1, r), data);
    let c = w.cuda.counts();
    assert_eq!(c.ipc_handles, 0);
    assert_eq!(
        c.dtoh,
        50_000u64.div_ceil(STAGE as u64),
        "staged in chunks: {c:?}"
    );
    assert_eq!(
        w.d[0].gpu.staging_stats(),
        gmpi_gpu::StagingStats::default(),
        "no device staging for managed memory"
    );
}

/// A device allocator of the double (`malloc`, `malloc_async`, …).
type Alloc = fn(&TestCuda, usize, i32) -> u64;

/// The allocators of device memory legacy CUDA IPC cannot export.
const NOT_IPC_CAPABLE: [(&str, Alloc); 2] = [
    ("pool", TestCuda::malloc_async),
    ("vmm", TestCuda::malloc_vmm),
];

#[test]
fn pool_and_vmm_memory_take_the_device_path_through_a_staging_buffer() {
    let mut w = World::new(2, true, device());
    let sizes = [
        EAGER + 1,
        5000,
        100_000,
        gmpi_gpu::MIN_STAGING,
        gmpi_gpu::MIN_STAGING + 1,
        1 << 20,
    ];
    // Staging buffers made so far, by size class: a new one costs one
    // allocation, one handle and one open at the receiver; later messages
    // reuse it (and the receiver's mapping).
    let mut made = std::collections::HashSet::new();
    for (what, alloc) in NOT_IPC_CAPABLE {
        for rk in [DEV, MemKind::Host] {
            for (i, &len) in sizes.iter().enumerate() {
                let data = pattern(len, i as u8);
                let s = w.device_buffer(alloc, &data);
                assert_eq!(
                    w.d[0].pml.protocol_for(1, len, DEV, SendMode::Standard),
                    Some(Protocol::RndvIpc)
                );
                let c = w.transfer_from(s, &data, rk);
                let new = u64::from(made.insert(gmpi_gpu::size_class(len)));
                // One device-to-device copy into the staging buffer; the
                // receiver copies out of it into its device (or host)
                // memory. Nothing is staged through the host.
                let (dtoh, dtod) = if rk.is_host() { (1, 1) } else { (0, 2) };
                assert_eq!(
                    (
                        c.dtoh,
                        c.htod,
                        c.dtod,
                        c.ipc_opens,
                        c.ipc_handles,
                        c.mallocs
                    ),
                    (dtoh, 0, dtod, new, new, new),
                    "{what} -> {rk:?}, {len} B: {c:?}"
                );
                assert_eq!(w.leases(0), (0, 0), "{what}, {len} B: lease returned");
            }
        }
    }
    assert_eq!(w.d[0].gpu.staging_stats().buffers, 3);
    assert_eq!(w.cuda.counts().ipc_closes, 0, "mappings stay cached");
}

#[test]
fn concurrent_pool_sends_to_one_peer_each_lease_a_buffer_of_their_own() {
    let mut w = World::new(2, true, device());
    let len = 30_000;
    let datas: Vec<Vec<u8>> = (0..3).map(|i| pattern(len, 10 + i)).collect();
    let srcs: Vec<Buf> = datas
        .iter()
        .map(|d| w.device_buffer(TestCuda::malloc_async, d))
        .collect();
    let before = w.cuda.counts();
    // All three are exported before the receiver matches any.
    let sids: Vec<ReqId> = srcs.iter().map(|&s| w.send(0, 1, s)).collect();
    w.run();
    assert_eq!(w.leases(0), (3, 3));
    let rbufs: Vec<Buf> = (0..3).map(|_| w.buffer(1, DEV, &vec![0u8; len])).collect();
    let rids: Vec<ReqId> = rbufs.iter().map(|&r| w.recv(1, 0, r)).collect();
    w.run();
    for i in 0..3 {
        w.d[1].test(rids[i]).expect("receive done").expect("ok");
        w.d[0].test(sids[i]).expect("send done").expect("ok");
        assert_eq!(w.read(1, rbufs[i]), datas[i], "message {i}");
    }
    let c = diff(&w.cuda.counts(), &before);
    assert_eq!((c.dtoh, c.htod, c.dtod, c.ipc_opens), (0, 0, 6, 3), "{c:?}");
    assert_eq!(w.leases(0), (0, 0));
    assert_eq!(w.d[0].gpu.staging_stats().buffers, 3);
}

#[test]
fn ipc_receives_into_device_memory_copy_asynchronously_and_overlap() {
    // A window of IPC messages: the receiver's device-to-device copies are
    // issued without waiting for each other and complete by polling.
    let mut w = World::new(2, true, device());
    let len = 50_000;
    let datas: Vec<Vec<u8>> = (0..8).map(|i| pattern(len, 40 + i)).collect();
    let rbufs: Vec<Buf> = (0..8).map(|_| w.buffer(1, DEV, &vec![0u8; len])).collect();
    let rids: Vec<ReqId> = rbufs.iter().map(|&r| w.recv(1, 0, r)).collect();
    let srcs: Vec<Buf> = datas.iter().map(|d| w.buffer(0, DEV, d)).collect();
    let before = w.cuda.counts();
    let sids: Vec<ReqId> = srcs.iter().map(|&s| w.send(0, 1, s)).collect();
    w.run();
    for i in 0..8 {
        w.d[1].test(rids[i]).expect("receive done").expect("ok");
        w.d[0].test(sids[i]).expect("send done").expect("ok");
        assert_eq!(w.read(1, rbufs[i]), datas[i], "message {i}");
    }
    let c = diff(&w.cuda.counts(), &before);
    assert_eq!(
        (c.dtoh, c.htod, c.dtod, c.async_dtod),
        (0, 0, 8, 8),
        "{c:?}"
    );
    assert!(
        w.cuda.most_device_copies_in_flight() >= 2,
        "copies overlap: {}",
        w.cuda.most_device_copies_in_flight()
    );
    assert_eq!(w.cuda.copies_in_flight(), 0);
}

#[test]
fn a_staging_buffer_the_receiver_cannot_open_is_released_and_the_message_staged() {
    // As on the fake driver: no rank can open another's handle (all play
    // one process), so the receiver falls back to `rndv/staged`.
    let mut w = World::with_processes(2, true, device(), |_| 0);
    let len = 100_000;
    let data = pattern(len, 3);
    let s = w.device_buffer(TestCuda::malloc_async, &data);
    let c = w.transfer_from(s, &data, DEV);
    // The staging copy, then the staged pipeline from the pool memory
    // itself: a chunk at a time out of the GPU and into the receiver's.
    let chunks = len.div_ceil(STAGE) as u64;
    assert_eq!(
        (c.dtod, c.ipc_opens, c.dtoh, c.htod),
        (1, 0, chunks, chunks),
        "{c:?}"
    );
    assert_eq!(w.leases(0), (0, 0), "released at the CTS");
}

#[test]
fn a_failed_peer_returns_the_lease_and_its_staging_buffers_and_mappings_go() {
    let mut w = World::new(2, true, device());
    let len = 50_000;
    // Rank 0 maps a staging buffer of rank 1's.
    let data = pattern(len, 5);
    let s1 = {
        let p = w.cuda.malloc_async(len, 0);
        w.cuda.poke(p, &data);
        Buf {
            addr: p,
            len,
            kind: DEV,
        }
    };
    let r0 = w.buffer(0, DEV, &vec![0u8; len]);
    let rid = w.recv(0, 1, r0);
    w.send(1, 0, s1);
    w.run();
    w.d[0].test(rid).expect("done").expect("ok");
    assert_eq!(w.read(0, r0), data);
    assert_eq!(w.cuda.open_mappings(), 1);
    // Rank 0's send to rank 1 waits for a receive that never comes.
    let s0 = w.device_buffer(TestCuda::malloc_async, &data);
    let sid = w.send(0, 1, s0);
    w.run();
    assert_eq!(w.leases(0), (1, 1));
    assert_eq!(w.d[0].gpu.staging_stats().buffers, 1);
    let frees = w.cuda.counts().frees;
    w.f.kill(1);
    w.run();
    assert_eq!(
        w.d[0].test(sid),
        Some(Err(gmpi_pml::PmlError::PeerFailed(1)))
    );
    assert_eq!(w.leases(0), (0, 0));
    assert_eq!(
        w.d[0].gpu.staging_stats().buffers,
        0,
        "rank 1's staging buffer freed"
    );
    assert_eq!(w.cuda.counts().frees - frees, 1);
    assert_eq!(w.cuda.open_mappings(), 0, "rank 1's memory unmapped");
}

#[test]
fn freed_and_reallocated_send_buffer_never_reuses_a_stale_mapping() {
    let mut w = World::new(2, true, device());
    let len = 10_000;
    let r = w.buffer(1, DEV, &vec![0u8; len]);
    let mut last = 0;
    for round in 0..4u8 {
        let data = vec![round.wrapping_add(1); len];
        let p = w.cuda.malloc(len, 0);
        if round > 0 {
            assert_eq!(p, last, "the double hands the same address back");
        }
        w.cuda.poke(p, &data);
        let s = Buf {
            addr: p,
            len,
            kind: DEV,
        };
        let rid = w.recv(1, 0, r);
        w.send(0, 1, s);
        w.run();
        w.d[1].test(rid).unwrap().unwrap();
        assert_eq!(w.read(1, r), data, "round {round}");
        w.cuda.free(p);
        last = p;
    }
    let c = w.cuda.counts();
    assert_eq!(c.ipc_opens, 4, "a new mapping per allocation: {c:?}");
    assert_eq!(c.ipc_closes, 3, "the stale ones closed: {c:?}");
    assert_eq!(c.ipc_handles, 4);
}

#[test]
fn ipc_failure_falls_back_to_staging() {
    let mut w = World::new(2, true, device());
    let len = 20_000;
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let s = w.buffer(0, DEV, &data);
    let r = w.buffer(1, DEV, &vec![0u8; len]);
    // The send is posted (handle exported), then the buffer is freed and
    // re-allocated before the receiver opens the handle: the open fails
    // and the receiver asks for the stream instead.
    let sid = w.send(0, 1, s);
    w.run();
    w.cuda.free(s.addr);
    let again = w.cuda.malloc(len, 0);
    assert_eq!(again, s.addr);
    w.cuda.poke(again, &data);
    let rid = w.recv(1, 0, r);
    w.run();
    w.d[1].test(rid).unwrap().unwrap();
    w.d[0].test(sid).unwrap().unwrap();
    assert_eq!(w.read(1, r), data);
    assert_eq!(w.cuda.counts().ipc_opens, 0);
}

#[test]
fn staged_pipeline_keeps_chunk_order_under_back_pressure() {
    let gpu = DeviceConfig {
        pipeline_chunk: 300,
        ..device()
    };
    for seed in 0..8 {
        let mut w = World::new(3, false, gpu.clone());
        w.f.set_capacity(2);
        w.f.set_seed(seed);
        w.f.set_queued(seed % 2 == 0);
        let len = 7_777;
        let a: Vec<u8> = (0..len).map(|i| (i * 7 + seed as usize) as u8).collect();
        let b: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
        let sa = w.buffer(0, DEV, &a);
        let sb = w.buffer(2, DEV, &b);
        let ra = w.buffer(1, DEV, &vec![0u8; len]);
        let rb = w.buffer(1, MemKind::Host, &vec![0u8; len]);
        let before = w.cuda.counts();
        let ida = w.recv(1, 0, ra);
        let idb = w.recv(1, 2, rb);
        w.send(0, 1, sa);
        w.send(2, 1, sb);
        w.run();
        w.d[1].test(ida).unwrap().unwrap();
        w.d[1].test(idb).unwrap().unwrap();
        assert_eq!(w.read(1, ra), a, "seed {seed}");
        assert_eq!(w.read(1, rb), b, "seed {seed}");
        let c = diff(&w.cuda.counts(), &before);
        // Each chunk is copied off the device once by its sender (a chunk
        // the transport refuses keeps its host copy for the retry) and onto
        // the device once by the receiver.
        let chunks = len.div_ceil(300) as u64;
        assert_eq!(c.htod, chunks, "seed {seed}: {c:?}");
        assert_eq!(c.dtoh, 2 * chunks, "seed {seed}: {c:?}");
    }
}

/// A copy into device memory that fails (here: the receive buffer was freed
/// under the pending receive) ends that receive with a device error, eager
/// or staged; nothing panics, the job goes on (no fatal error), and the
/// next message gets through.
#[test]
fn a_failed_copy_into_the_device_fails_the_receive_not_the_process() {
    for len in [100, 5_000] {
        let mut w = World::new(2, false, device());
        let data = vec![7u8; len];
        let r = w.buffer(1, DEV, &vec![0u8; len]);
        let rid = w.recv(1, 0, r);
        w.cuda.free(r.addr);
        let sid = w.send(0, 1, w.buffer(0, MemKind::Host, &data));
        w.run();
        match w.d[1].test(rid) {
            Some(Err(gmpi_pml::PmlError::Device(e))) => {
                assert_eq!((e.what, e.addr), ("writing", r.addr), "{len} B")
            }
            other => panic!("{len} B: {other:?}"),
        }
        w.d[0]
            .test(sid)
            .expect("send done")
            .expect("the sender saw nothing wrong");
        assert_eq!(w.d[1].pml.outstanding(), 0, "{len} B");
        let r2 = w.buffer(1, DEV, &vec![0u8; len]);
        let rid = w.recv(1, 0, r2);
        w.send(0, 1, w.buffer(0, MemKind::Host, &data));
        w.run();
        w.d[1].test(rid).expect("done").expect("ok");
        assert_eq!(w.read(1, r2), data, "{len} B");
    }
}

/// A send whose device payload cannot be read (freed before it was sent)
/// fails with a device error, which is also the driver's fatal error: the
/// peer would wait for a message that never comes, so the runtime ends the
/// job through the error handler. Never a panic.
#[test]
fn an_unreadable_device_payload_is_a_fatal_error_not_a_panic() {
    let mut w = World::new(2, false, device());
    let s = w.buffer(0, DEV, &[1u8; 100]);
    w.cuda.free(s.addr);
    let sid = w.send(0, 1, s);
    match w.d[0].fatal() {
        Some(gmpi_pml::PmlError::Device(e)) => assert_eq!((e.what, e.addr), ("reading", s.addr)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        w.d[0].test(sid),
        Some(Err(gmpi_pml::PmlError::Device(_)))
    ));
}

#[test]
fn a_device_self_send_is_one_device_copy() {
    // CUDA cannot open an IPC handle in its exporter: a rank sending device
    // memory to itself copies device-to-device once, with no handle made or
    // opened and nothing staged through the host.
    let mut w = World::new(1, true, device());
    let allocs = [
        ("cudaMalloc", TestCuda::malloc as Alloc),
        NOT_IPC_CAPABLE[0],
        NOT_IPC_CAPABLE[1],
    ];
    for (what, alloc) in allocs {
        for len in [EAGER + 1, 64 << 10, 1 << 20] {
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let s = w.device_buffer(alloc, &data);
            let r = w.buffer(0, DEV, &vec![0u8; len]);
            let before = w.cuda.counts();
            let rid = w.recv(0, 0, r);
            let sid = w.send(0, 0, s);
            w.run();
            w.d[0].test(rid).expect("receive done").expect("ok");
            w.d[0].test(sid).expect("send done").expect("ok");
            assert_eq!(w.read(0, r), data, "{what}, {len} B");
            let c = diff(&w.cuda.counts(), &before);
            assert_eq!(
                (c.dtod, c.dtoh, c.htod, c.ipc_handles, c.ipc_opens),
                (1, 0, 0, 0, 0),
                "{what}, {len} B: {c:?}"
            );
            assert_eq!(
                w.d[0].gpu.staging_stats().buffers,
                0,
                "no staging to itself"
            );
        }
    }
}

#[test]
fn staged_copies_overlap_and_every_slot_comes_back() {
    use gmpi_gpu::double::max_in_flight;
    use gmpi_gpu::CopyDir;
    // Device to device without IPC: every chunk is copied out of the
    // sender's GPU, pulled by the receiver's get and copied into its GPU,
    // several chunks at each stage at once (the pipeline depth), and the
    // three senders together want more pinned slots than the gpu layer
    // lends (back-pressure).
    for seed in 0..4 {
        let mut w = World::new(4, false, device());
        w.f.set_seed(seed);
        w.f.set_queued(seed % 2 == 1);
        let len = 41 * STAGE + 17;
        let datas: Vec<Vec<u8>> = (1..4u32)
            .map(|s| {
                (0..len)
                    .map(|i| (i as u32 * s + seed as u32) as u8)
                    .collect()
            })
            .collect();
        let mut recvs = Vec::new();
        for (k, d) in datas.iter().enumerate() {
            let src = k as u32 + 1;
            let sb = w.buffer(src, DEV, d);
            let rb = w.buffer(0, DEV, &vec![0u8; len]);
            recvs.push((w.recv(0, src, rb), rb));
            w.send(src, 0, sb);
        }
        let before = w.cuda.counts();
        w.run();
        for ((id, rb), d) in recvs.into_iter().zip(&datas) {
            w.d[0].test(id).expect("receive done").expect("ok");
            assert_eq!(&w.read(0, rb), d, "seed {seed}");
        }
        let c = diff(&w.cuda.counts(), &before);
        let chunks = 3 * len.div_ceil(STAGE) as u64;
        assert_eq!(
            (c.dtoh, c.htod, c.async_copies),
            (chunks, chunks, 2 * chunks),
            "{c:?}"
        );
        let trace = w.cuda.trace();
        let depth = DeviceConfig::default().pipeline_depth;
        assert!(
            max_in_flight(&trace, CopyDir::ToHost) >= 2,
            "copies out overlap"
        );
        assert!(max_in_flight(&trace, CopyDir::ToHost) <= 3 * depth);
        assert!(
            max_in_flight(&trace, CopyDir::ToDevice) >= 2,
            "copies in overlap"
        );
        assert!(
            max_in_flight(&trace, CopyDir::ToDevice) <= gmpi_gpu::stage::MAX_SLOTS,
            "bounded by the incoming slots"
        );
        for d in &w.d {
            assert_eq!(d.gpu.slots_out(CopyDir::ToHost), 0, "every slot back");
            assert_eq!(d.gpu.slots_out(CopyDir::ToDevice), 0);
            assert_eq!(d.staging.offered(), 0);
        }
        // Every slot a peer pulled was registered, and handed back.
        assert_eq!(w.f.registered(), 0, "registrations of staged slots");
    }
}

#[test]
fn a_host_buffer_offered_for_a_get_is_pulled_into_the_device_in_chunks() {
    use gmpi_gpu::double::max_in_flight;
    use gmpi_gpu::CopyDir;
    // The sender offers its host buffer for a get; the receiver's device
    // memory is not writable by the transport, so the receiver pulls the
    // buffer through pinned slots, several chunks at once, each copied on
    // into its GPU asynchronously, and a FIN ends the send.
    for queued in [false, true] {
        let mut w = World::new(2, false, device());
        w.f.set_queued(queued);
        let len = 23 * STAGE + 5;
        let c = w.transfer(MemKind::Host, DEV, len, 3);
        let chunks = len.div_ceil(STAGE) as u64;
        assert_eq!(
            (c.dtoh, c.htod, c.async_copies),
            (0, chunks, chunks),
            "{c:?}"
        );
        assert!(max_in_flight(&w.cuda.trace(), CopyDir::ToDevice) >= 2);
        assert_eq!(w.d[1].gpu.slots_out(CopyDir::ToDevice), 0);
    }
}

#[test]
fn without_a_get_staged_chunks_go_in_fragments_and_copy_in_asynchronously() {
    use gmpi_gpu::double::max_in_flight;
    use gmpi_gpu::CopyDir;
    // A transport without get (tcp): the sender still stages chunks of
    // STAGE bytes asynchronously and sends each from its slot in fragments
    // as soon as it is staged; the receiver copies each fragment into its
    // GPU asynchronously, overlapping the next ones.
    let cfg = PmlConfig {
        device: device(),
        use_get: false,
        ..PmlConfig::default()
    };
    let frag = (FRAG - gmpi_pml::wire::MAX_HDR) as u64;
    for (sk, rk) in [(DEV, DEV), (DEV, MemKind::Host), (MemKind::Host, DEV)] {
        let mut w = World::with_config(2, false, cfg.clone(), |r| r);
        let len = 9 * STAGE + 123;
        let c = w.transfer(sk, rk, len, 7);
        let chunks = len.div_ceil(STAGE) as u64;
        // The fragments: STAGE-byte chunks cut in fragments (device
        // sender), or the host sender's stream.
        let frags = if sk.is_host() {
            (len as u64).div_ceil(frag)
        } else {
            let full = (STAGE as u64).div_ceil(frag) * (len / STAGE) as u64;
            full + ((len % STAGE) as u64).div_ceil(frag)
        };
        let dtoh = if sk.is_host() { 0 } else { chunks };
        let htod = if rk.is_host() { 0 } else { frags };
        assert_eq!(
            (c.dtoh, c.htod, c.async_copies),
            (dtoh, htod, dtoh + htod),
            "{sk:?} -> {rk:?}: {c:?}"
        );
        let trace = w.cuda.trace();
        if !sk.is_host() {
            assert!(
                max_in_flight(&trace, CopyDir::ToHost) >= 2,
                "copies out overlap"
            );
        }
        if !rk.is_host() {
            assert!(
                max_in_flight(&trace, CopyDir::ToDevice) >= 2,
                "copies in overlap"
            );
        }
        for d in &w.d {
            assert_eq!(d.gpu.slots_out(CopyDir::ToHost), 0);
            assert_eq!(d.gpu.slots_out(CopyDir::ToDevice), 0);
            assert_eq!(d.staging.offered(), 0);
        }
    }
}

#[test]
fn a_failed_staged_pull_falls_back_to_the_stream() {
    // As a failed rndv/get does: the receiver's pulls of a host sender's
    // buffer fail (the transport cannot read it), so once the pulls in
    // flight have ended it asks for the stream, and the message arrives.
    for queued in [false, true] {
        let mut w = World::new(2, false, device());
        w.f.set_queued(queued);
        w.f.fail_gets(true);
        w.transfer(MemKind::Host, DEV, 7 * STAGE + 3, 9);
        assert_eq!(w.d[1].gpu.slots_out(gmpi_gpu::CopyDir::ToDevice), 0);
    }
}
