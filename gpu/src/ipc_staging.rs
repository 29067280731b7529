//! Device staging buffers: how device memory that legacy CUDA IPC cannot
//! export still reaches a peer on this node device to device.
//!
//! Legacy CUDA IPC (`cuIpcGetMemHandle`) exports only `cuMemAlloc` memory.
//! Stream-ordered pool memory (`cudaMallocAsync`, and so every `cudarc`
//! `CudaSlice` on a device with memory pools) and VMM memory
//! (`cuMemCreate` + `cuMemMap`) classify as device memory but cannot be
//! exported ([`CudaApi::ipc_capable`] is false). [`Gpu::ipc_export_to`]
//! sends such memory through a staging buffer instead: it leases one of
//! the buffers this process keeps for that peer (allocated with
//! [`CudaApi::alloc_device`], i.e. `cuMemAlloc`, on the source's device),
//! copies the message into it device to device, and exports the staging
//! buffer. The receiver is unchanged: it opens the staging buffer's handle
//! (once: its mapping cache keeps it, since the buffer is reused) and copies
//! out of it device to device. So a pool → device transfer is one
//! device-to-device copy on each side, and never touches host memory.
//!
//! Why not export the pool memory itself (`cuMemPoolExportPointer`): that
//! works only for pools created with a shareable handle type
//! (`cuMemPoolCreate` with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`), and
//! the pool's handle must travel to the peer as a file descriptor
//! (`SCM_RIGHTS` or `pidfd_getfd`), which gmpi's transports do not carry.
//! The device's default pool, which `cudaMallocAsync` and `cudarc` use, has
//! no shareable handle type, and VMM allocations would need their own
//! export (`cuMemExportToShareableHandle`) of the same kind. The staging
//! buffer works for all of them at the price of one device-to-device copy
//! at device bandwidth.
//!
//! The lease ([`Lease`]) is held until the peer has copied: the progress
//! driver keeps it by send request and drops it when the pml says the
//! receiver no longer reads the export (`Action::IpcRelease`: after its FIN,
//! after a CTS that gives up on IPC, or when the peer failed). Dropping a
//! lease hands the buffer back; nothing else can lose it.
//!
//! Bounds: buffers come in size classes (four per power of two, at least
//! [`MIN_STAGING`]); a peer keeps at most [`KEEP_PER_PEER`] buffers and
//! the process at most [`KEEP_BYTES`] of them. A message that fits no
//! free buffer of its peer gets a new one, for which the peer's (then
//! anyone's) least recently used free buffers give way; when they cannot
//! (all busy: that many concurrent sends), the new buffer is freed when
//! its send ends. Concurrent sends to one peer each get a buffer of their
//! own. Everything is freed by [`Gpu::release`] (at `MPI_Finalize`), and a
//! failed peer's buffers by [`Gpu::ipc_forget_peer`]; a buffer leased at
//! that moment is freed when its lease ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::api::{CudaApi, GpuError, PtrInfo};
use crate::{lock, Gpu, IpcDesc, MemKind, LOG};

/// The smallest staging buffer.
pub const MIN_STAGING: usize = 256 << 10;

/// Staging buffers kept per peer.
pub const KEEP_PER_PEER: usize = 4;

/// Staging memory kept by one process (per GPU layer), all peers together.
pub const KEEP_BYTES: usize = 256 << 20;

/// Allocations whose IPC capability is remembered before the memory of it
/// is cleared.
const CAPABLE_ENTRIES: usize = 1024;

/// The size class of a `len`-byte message: at least [`MIN_STAGING`], then
/// four classes per power of two, so a buffer is at most a quarter larger
/// than the message that made it.
pub fn size_class(len: usize) -> usize {
    let len = len.max(MIN_STAGING);
    let top = 1usize << (usize::BITS - 1 - len.leading_zeros());
    len.next_multiple_of(top / 4)
}

#[derive(Debug)]
struct Slot {
    peer: u32,
    ordinal: i32,
    ptr: u64,
    size: usize,
    busy: bool,
    /// Kept when its lease ends (else freed then).
    keep: bool,
    /// When it was last leased (a counter), for eviction.
    used: u64,
}

#[derive(Debug, Default)]
struct Pool {
    slots: Vec<Slot>,
    tick: u64,
    /// Legacy IPC capability by allocation base: (buffer id, capable).
    capable: HashMap<u64, (u64, bool)>,
}

impl Pool {
    /// The least recently used free slot (of `peer`, if given).
    fn lru_free(&self, peer: Option<u32>) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.busy && peer.is_none_or(|p| s.peer == p))
            .min_by_key(|(_, s)| s.used)
            .map(|(i, _)| i)
    }

    fn bytes(&self) -> usize {
        self.slots.iter().map(|s| s.size).sum()
    }

    fn count(&self, peer: u32) -> usize {
        self.slots.iter().filter(|s| s.peer == peer).count()
    }

    /// Drop the slots `which` selects: the free ones are returned (to be
    /// freed), the leased ones are freed when their lease ends.
    fn drain(&mut self, which: impl Fn(&Slot) -> bool) -> Vec<u64> {
        let mut gone = Vec::new();
        self.slots.retain_mut(|s| {
            if !which(s) {
                return true;
            }
            if s.busy {
                s.keep = false;
                return true;
            }
            gone.push(s.ptr);
            false
        });
        gone
    }
}

#[derive(Debug)]
struct Inner {
    api: Arc<dyn CudaApi>,
    pool: Mutex<Pool>,
}

impl Inner {
    fn free(&self, ptrs: Vec<u64>) {
        for p in ptrs {
            if let Err(e) = self.api.free_device(p) {
                tracing::warn!(target: LOG, "freeing a staging buffer at {p:#x}: {e}");
            }
        }
    }
}

/// The staging buffers of one GPU layer (none without CUDA).
#[derive(Debug, Default)]
pub(crate) struct Staging {
    inner: Option<Arc<Inner>>,
}

impl Staging {
    pub(crate) fn new(api: &Arc<dyn CudaApi>) -> Self {
        Self {
            inner: Some(Arc::new(Inner {
                api: Arc::clone(api),
                pool: Mutex::default(),
            })),
        }
    }

    /// Free every buffer (leased ones when their lease ends) and forget
    /// what is known of allocations.
    pub(crate) fn release(&self) {
        if let Some(i) = &self.inner {
            let gone = {
                let mut p = lock(&i.pool);
                p.capable.clear();
                p.drain(|_| true)
            };
            i.free(gone);
        }
    }

    /// Free `peer`'s buffers (leased ones when their lease ends).
    pub(crate) fn forget_peer(&self, peer: u32) {
        if let Some(i) = &self.inner {
            let gone = lock(&i.pool).drain(|s| s.peer == peer);
            i.free(gone);
        }
    }

    /// Whether legacy IPC can export allocation `info` (asked once per
    /// allocation). Where the driver cannot tell, the handle is tried.
    fn legacy_ipc(&self, i: &Inner, info: &PtrInfo) -> bool {
        let known = lock(&i.pool)
            .capable
            .get(&info.base)
            .filter(|(id, _)| *id == info.buffer_id)
            .map(|(_, c)| *c);
        if let Some(c) = known {
            return c;
        }
        match i.api.ipc_capable(info.base) {
            Ok(c) => {
                let mut p = lock(&i.pool);
                if p.capable.len() >= CAPABLE_ENTRIES {
                    p.capable.clear();
                }
                p.capable.insert(info.base, (info.buffer_id, c));
                c
            }
            Err(e) => {
                tracing::debug!(target: LOG, "is {:#x} legacy-IPC-capable? {e}; trying its handle", info.base);
                true
            }
        }
    }

    /// A free buffer of at least `len` bytes for `peer` on device
    /// `ordinal` (`near`: an address there), allocating one if none.
    fn take(
        &self,
        i: &Arc<Inner>,
        peer: u32,
        ordinal: i32,
        len: usize,
        near: u64,
    ) -> Result<Lease, GpuError> {
        let lease = |ptr| Lease {
            inner: Arc::clone(i),
            ptr,
        };
        {
            let mut p = lock(&i.pool);
            p.tick += 1;
            let tick = p.tick;
            let fit = p
                .slots
                .iter_mut()
                .filter(|s| !s.busy && s.peer == peer && s.ordinal == ordinal && s.size >= len)
                .min_by_key(|s| s.size);
            if let Some(s) = fit {
                s.busy = true;
                s.used = tick;
                return Ok(lease(s.ptr));
            }
        }
        let size = size_class(len);
        let ptr = i.api.alloc_device(size, near)?;
        let (gone, keep) = {
            let mut p = lock(&i.pool);
            let mut gone = Vec::new();
            // Room for the new buffer: this peer's least recently used free
            // buffers give way to stay within the per-peer count, anyone's
            // to stay within the bytes.
            while p.count(peer) >= KEEP_PER_PEER {
                let Some(v) = p.lru_free(Some(peer)) else {
                    break;
                };
                gone.push(p.slots.swap_remove(v).ptr);
            }
            while p.bytes() + size > KEEP_BYTES {
                let Some(v) = p.lru_free(None) else { break };
                gone.push(p.slots.swap_remove(v).ptr);
            }
            let keep = p.count(peer) < KEEP_PER_PEER && p.bytes() + size <= KEEP_BYTES;
            let used = p.tick;
            p.slots.push(Slot {
                peer,
                ordinal,
                ptr,
                size,
                busy: true,
                keep,
                used,
            });
            (gone, keep)
        };
        tracing::debug!(target: LOG, "staging buffer for rank {peer}: {size} B at {ptr:#x} on device {ordinal}{}; {} freed",
            if keep { "" } else { " (not kept: the limits are reached)" }, gone.len());
        i.free(gone);
        Ok(lease(ptr))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        self.release();
    }
}

/// A staging buffer leased for one send; dropping it hands the buffer back
/// (or frees it, if it is not to be kept). See the module documentation.
#[derive(Debug)]
#[must_use = "dropping the lease hands the staging buffer back at once"]
pub struct Lease {
    inner: Arc<Inner>,
    ptr: u64,
}

impl Lease {
    /// The staging buffer's device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let free = {
            let mut p = lock(&self.inner.pool);
            match p.slots.iter().position(|s| s.ptr == self.ptr) {
                Some(i) if p.slots[i].keep => {
                    p.slots[i].busy = false;
                    false
                }
                Some(i) => {
                    p.slots.swap_remove(i);
                    true
                }
                // A leased slot is never removed before its lease ends.
                None => false,
            }
        };
        if free {
            self.inner.free(vec![self.ptr]);
        }
    }
}

/// What [`Gpu::ipc_export_to`] made for a peer.
#[derive(Debug)]
pub struct Export {
    /// The descriptor the peer opens and copies from.
    pub desc: IpcDesc,
    /// The staging buffer `desc` points into, where the memory itself could
    /// not be exported: hold it until the peer has copied.
    pub lease: Option<Lease>,
}

/// The staging buffers of a GPU layer ([`Gpu::staging_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StagingStats {
    /// Buffers allocated (free and leased).
    pub buffers: usize,
    /// Buffers leased now.
    pub leased: usize,
    /// Their bytes.
    pub bytes: usize,
}

impl Gpu {
    /// The IPC descriptor of `len` device bytes at `addr` for `peer`, a
    /// rank of this node: the allocation's own handle where legacy CUDA IPC
    /// can export it ([`Gpu::ipc_export`]), else a copy in one of `peer`'s
    /// staging buffers and that buffer's handle, with the [`Lease`] to hold
    /// until the peer has copied. Fails for host and managed memory, a range
    /// crossing its allocation's end, and where the driver refuses (no
    /// device memory for a staging buffer).
    pub fn ipc_export_to(&self, peer: u32, addr: u64, len: usize) -> Result<Export, GpuError> {
        self.need_api()?;
        let info = self.allocation(addr, len, true)?;
        let MemKind::Device { ordinal } = info.kind else {
            unreachable!("allocation(.., true) answers device memory only");
        };
        let i = match &self.ipc_staging.inner {
            Some(i) if !self.ipc_staging.legacy_ipc(i, &info) => i,
            _ => {
                return Ok(Export {
                    desc: self.ipc_export(addr, len)?,
                    lease: None,
                })
            }
        };
        let lease = self.ipc_staging.take(i, peer, ordinal, len, addr)?;
        self.copy_device(lease.ptr, addr, len)?;
        let desc = self.ipc_export(lease.ptr, len)?;
        tracing::trace!(target: LOG, "{len} B at {addr:#x} for rank {peer}: not legacy-IPC-capable, staged in {:#x}", lease.ptr);
        Ok(Export {
            desc,
            lease: Some(lease),
        })
    }

    /// The staging buffers now.
    pub fn staging_stats(&self) -> StagingStats {
        let Some(i) = &self.ipc_staging.inner else {
            return StagingStats::default();
        };
        let p = lock(&i.pool);
        StagingStats {
            buffers: p.slots.len(),
            leased: p.slots.iter().filter(|s| s.busy).count(),
            bytes: p.bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::double::TestCuda;
    use crate::GpuConfig;

    /// A sender (process 0) and a receiver (process 1) of one node.
    fn pair() -> (Arc<TestCuda>, Gpu, Gpu) {
        let d = Arc::new(TestCuda::new(2));
        let s = Gpu::with_api(Arc::new(d.process(0)), GpuConfig::default());
        let r = Gpu::with_api(Arc::new(d.process(1)), GpuConfig::default());
        (d, s, r)
    }

    #[test]
    fn size_classes_are_four_per_power_of_two() {
        assert_eq!(size_class(0), MIN_STAGING);
        assert_eq!(size_class(MIN_STAGING), MIN_STAGING);
        assert_eq!(size_class(MIN_STAGING + 1), MIN_STAGING + MIN_STAGING / 4);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), 5 << 18);
        assert_eq!(size_class(7 << 18), 7 << 18);
        assert_eq!(size_class((7 << 18) + 1), 2 << 20);
        for len in [1usize, 4095, 300_000, 3 << 20, 100_000_007] {
            let c = size_class(len);
            assert!(c >= len && c >= MIN_STAGING, "{len}");
            assert!(len < MIN_STAGING || c - len <= len / 4, "{len} -> {c}");
        }
    }

    #[test]
    fn pool_and_vmm_memory_go_through_a_reused_device_staging_buffer() {
        let (d, s, r) = pair();
        for (what, p) in [
            ("pool", d.malloc_async(100_000, 1)),
            ("vmm", d.malloc_vmm(100_000, 1)),
        ] {
            let mut base = None;
            for round in 0..3u8 {
                let data: Vec<u8> = (0..50_000u32).map(|i| i as u8 ^ round).collect();
                d.poke(p + 1000, &data);
                let before = d.counts();
                let e = s.ipc_export_to(1, p + 1000, data.len()).unwrap();
                let lease = e.lease.expect("staged");
                assert_eq!((e.desc.base, e.desc.offset), (lease.ptr(), 0), "{what}");
                assert_ne!(lease.ptr(), p);
                assert_eq!(
                    s.info(lease.ptr()).unwrap().unwrap().kind,
                    MemKind::Device { ordinal: 1 },
                    "on the source's device"
                );
                assert_eq!(*base.get_or_insert(lease.ptr()), lease.ptr(), "reused");
                let at = r.ipc_map(0, &e.desc).unwrap();
                let out = r.alloc_device(data.len(), 0).unwrap();
                r.copy_device(out.ptr, at, data.len()).unwrap();
                assert_eq!(d.peek(out.ptr, data.len()), data, "{what} round {round}");
                drop(out);
                let c = d.counts();
                assert_eq!((c.dtoh, c.htod), (before.dtoh, before.htod), "no host copy");
                assert_eq!(c.dtod - before.dtod, 2, "{what}: one copy each side");
                // One handle and one open per staging buffer, then cached.
                let first = u64::from(round == 0 && what == "pool");
                assert_eq!(c.ipc_handles - before.ipc_handles, first, "{what} {round}");
                assert_eq!(c.ipc_opens - before.ipc_opens, first, "{what} {round}");
                assert_eq!(s.staging_stats().leased, 1);
                drop(lease);
                assert_eq!(s.staging_stats().leased, 0);
            }
        }
        assert_eq!(s.staging_stats().buffers, 1, "one buffer served both");

        // Legacy-IPC-capable memory is exported itself.
        let m = d.malloc(100_000, 0);
        let e = s.ipc_export_to(1, m + 8, 50_000).unwrap();
        assert!(e.lease.is_none());
        assert_eq!((e.desc.base, e.desc.offset), (m, 8));
        // Managed and host memory are not exported at all; a range past its
        // allocation's end neither.
        let mm = d.malloc_managed(100_000);
        assert!(s.ipc_export_to(1, mm, 50_000).is_err());
        let h = [0u8; 64];
        assert!(s.ipc_export_to(1, h.as_ptr() as u64, 64).is_err());
        let p = d.malloc_async(100_000, 0);
        assert!(matches!(
            s.ipc_export_to(1, p + 60_000, 50_000),
            Err(GpuError::BadRange { .. })
        ));
        assert_eq!(s.staging_stats().leased, 0);
    }

    #[test]
    fn concurrent_sends_to_one_peer_lease_buffers_of_their_own() {
        let (d, s, _r) = pair();
        let len = 40_000;
        let srcs: Vec<u64> = (0..6).map(|_| d.malloc_async(len, 0)).collect();
        for (i, &p) in srcs.iter().enumerate() {
            d.poke(p, &vec![i as u8; len]);
        }
        let before = d.counts();
        let e: Vec<Export> = srcs
            .iter()
            .map(|&p| s.ipc_export_to(2, p, len).unwrap())
            .collect();
        let mut bases: Vec<u64> = e.iter().map(|x| x.desc.base).collect();
        for (i, x) in e.iter().enumerate() {
            assert_eq!(d.peek(x.desc.base, len), vec![i as u8; len]);
        }
        bases.sort_unstable();
        bases.dedup();
        assert_eq!(bases.len(), 6, "no two leases share a buffer");
        assert_eq!(
            s.staging_stats(),
            StagingStats {
                buffers: 6,
                leased: 6,
                bytes: 6 * MIN_STAGING
            }
        );
        drop(e);
        // Beyond the per-peer limit, buffers are freed when their sends end.
        let st = s.staging_stats();
        assert_eq!((st.buffers, st.leased), (KEEP_PER_PEER, 0));
        assert_eq!(d.counts().frees - before.frees, (6 - KEEP_PER_PEER) as u64);
        // Another peer has buffers of its own.
        let mallocs = d.counts().mallocs;
        let x = s.ipc_export_to(3, srcs[0], len).unwrap();
        assert_eq!(d.counts().mallocs, mallocs + 1);
        drop(x);
        assert_eq!(s.staging_stats().buffers, KEEP_PER_PEER + 1);
    }

    #[test]
    fn a_larger_message_grows_the_peer_s_buffers_least_recently_used_first() {
        let (d, s, _r) = pair();
        let small = d.malloc_async(MIN_STAGING, 0);
        let big = d.malloc_async(3 << 20, 0);
        // Fill the peer's buffers with small ones, then lease the first
        // again: the second is now the least recently used.
        let leases: Vec<Export> = (0..KEEP_PER_PEER)
            .map(|_| s.ipc_export_to(1, small, 1000).unwrap())
            .collect();
        let (first, oldest) = (leases[0].desc.base, leases[1].desc.base);
        drop(leases);
        let again = s.ipc_export_to(1, small, 1000).unwrap();
        assert_eq!(again.desc.base, first);
        drop(again);
        let before = d.counts();
        let e = s.ipc_export_to(1, big, 3 << 20).unwrap();
        assert_eq!(
            d.counts().frees - before.frees,
            1,
            "one small buffer gave way"
        );
        assert!(
            s.info(oldest).unwrap().is_none_or(|i| i.base != oldest),
            "the least recently used one"
        );
        drop(e);
        let st = s.staging_stats();
        assert_eq!(st.buffers, KEEP_PER_PEER);
        assert_eq!(st.bytes, (KEEP_PER_PEER - 1) * MIN_STAGING + (3 << 20));
        // The big buffer now serves big and small messages alike.
        let again = s.ipc_export_to(1, big, 3 << 20).unwrap();
        assert_eq!(d.counts().mallocs, before.mallocs + 1, "reused");
        drop(again);
    }

    #[test]
    fn release_and_a_failed_peer_free_the_buffers_leased_ones_when_done() {
        let (d, s, _r) = pair();
        let p = d.malloc_async(50_000, 0);
        let mallocs = d.counts().mallocs;
        let to1 = s.ipc_export_to(1, p, 50_000).unwrap();
        drop(s.ipc_export_to(1, p, 50_000).unwrap());
        let to2 = s.ipc_export_to(2, p, 50_000).unwrap();
        drop(to2);
        assert_eq!(s.staging_stats().buffers, 3);
        let frees = d.counts().frees;
        s.ipc_forget_peer(1);
        assert_eq!(d.counts().frees - frees, 1, "the free one of rank 1");
        assert_eq!(s.staging_stats().buffers, 2);
        drop(to1);
        assert_eq!(
            d.counts().frees - frees,
            2,
            "the leased one when its send ended"
        );
        let held = s.ipc_export_to(2, p, 50_000).unwrap();
        s.release();
        assert_eq!(
            s.staging_stats(),
            StagingStats {
                buffers: 1,
                leased: 1,
                bytes: MIN_STAGING
            }
        );
        drop(held);
        assert_eq!(s.staging_stats(), StagingStats::default());
        let c = d.counts();
        assert_eq!(
            c.mallocs - mallocs,
            c.frees - frees,
            "every staging buffer freed"
        );
        // The layer's drop frees what it still keeps.
        drop(s.ipc_export_to(4, p, 50_000).unwrap());
        drop(s);
        let c = d.counts();
        assert_eq!(c.mallocs - mallocs, c.frees - frees);
    }
}
