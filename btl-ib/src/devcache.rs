//! Registrations of GPU memory kept past their rendezvous (GPUDirect RDMA),
//! as [`crate::rcache`] keeps host memory's.
//!
//! Registering device memory takes an export (`cuMemGetHandleForAddressRange`)
//! and an `ibv_reg_dmabuf_mr`, or an `ibv_reg_mr` through `nvidia_peermem`,
//! and the NIC maps every GPU page of the range: far more than reading a
//! few hundred KiB. So a registration is made once for the whole allocation
//! the buffer lies in, and serves every later request inside it.
//!
//! Freeing device memory raises no event a process can watch (no `munmap`
//! reaches a `userfaultfd`). What keeps this cache honest instead is the
//! allocation's buffer id ([`DeviceAlloc::buffer_id`]), which the driver
//! checks for every request: an entry serves only requests made under its
//! allocation's id, so an address freed and allocated again (a new id)
//! never meets the old registration. An old entry, unused, is dropped as
//! soon as a new allocation is seen over its range, or when it is the least
//! recently used beyond the [`Limits`]. Until then its registration may
//! keep the freed pages from going back to the driver (a dma-buf importer
//! holds a reference to the buffer): the limits bound that.
//!
//! With limits of zero entries or bytes (the default of
//! [`crate::IbBtl::new`]; `GMPI_IB_RCACHE=off` or `GMPI_IB_RCACHE_GPU_MB=0`)
//! nothing is kept: each request registers its own
//! range, shared only by requests for the same range while in use, and
//! released with its last user. An allocation larger than the byte limit is
//! never registered whole either (one such entry would exceed the limit as
//! soon as it is unused): its requests register their own ranges, kept
//! while the limits allow.

use gmpi_btl::DeviceAlloc;

use crate::fabric::{Fabric, Mr};
use crate::rcache::{lru_over_limits, Limits, Stats, Use};

#[derive(Debug)]
struct Entry {
    id: u64,
    /// The allocation's buffer id when registered.
    buffer_id: u64,
    start: u64,
    end: u64,
    mr: Mr,
    users: u32,
    /// Kept while unused (within the limits).
    keep: bool,
    last_use: u64,
}

/// The cache (see the module header).
#[derive(Debug)]
pub struct DevCache {
    limits: Limits,
    entries: Vec<Entry>,
    next_id: u64,
    clock: u64,
    stats: Stats,
}

impl DevCache {
    /// A cache that keeps unused registrations within `limits` (zero
    /// entries: none).
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            entries: Vec::new(),
            next_id: 1,
            clock: 0,
            stats: Stats::default(),
        }
    }

    /// What it has done so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Entries held (in use or not).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A registration covering `len` bytes at `addr` of allocation `alloc`
    /// (peers may read it), from an entry or made now by `reg` (given the
    /// fabric and the range to register: the whole allocation, or the
    /// request's own bytes).
    pub fn acquire<F: Fabric>(
        &mut self,
        fabric: &mut F,
        alloc: DeviceAlloc,
        addr: u64,
        len: u64,
        mut reg: impl FnMut(&mut F, u64, u64) -> Result<Mr, String>,
    ) -> Result<Use, String> {
        self.clock += 1;
        let end = addr
            .checked_add(len.max(1))
            .ok_or_else(|| format!("{len} bytes at {addr:#x} wrap around"))?;
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.buffer_id == alloc.buffer_id && e.start <= addr && end <= e.end)
        {
            e.users += 1;
            e.last_use = self.clock;
            self.stats.hits += 1;
            return Ok(Use { id: e.id, mr: e.mr });
        }
        let a_end = alloc.base.saturating_add(alloc.size);
        // Two live allocations never overlap: an entry of another buffer
        // id over this allocation's range belongs to memory freed since.
        // Unused, it goes now; in use (memory freed under a transfer), it
        // serves nothing new and goes with its last user.
        let old =
            |e: &Entry| e.buffer_id != alloc.buffer_id && e.start < a_end && alloc.base < e.end;
        self.stats.invalidated += self.drop_unused_where(fabric, old);
        for e in self.entries.iter_mut().filter(|e| old(e) && e.keep) {
            e.keep = false;
            self.stats.invalidated += 1;
        }
        let inside = alloc.base <= addr && end <= a_end;
        let caching = self.limits.entries > 0 && self.limits.bytes > 0;
        let whole = caching && inside && alloc.size <= self.limits.bytes;
        let own = (addr, len.max(1));
        let (start, span) = if whole { (alloc.base, alloc.size) } else { own };
        let mut made = reg(fabric, start, span).map(|mr| (start, span, mr));
        if made.is_err() && whole {
            // The whole allocation refused (its export, say): the request's
            // own bytes, the cache left as it is.
            made = reg(fabric, own.0, own.1).map(|mr| (own.0, own.1, mr));
        }
        if made.is_err() && self.entries.iter().any(|e| e.users == 0) {
            // What the NIC can map may be what ran out: again after giving
            // back what is unused.
            self.flush(fabric);
            made = reg(fabric, own.0, own.1).map(|mr| (own.0, own.1, mr));
        }
        let (start, span, mr) = made?;
        if start == alloc.base && span == alloc.size {
            // Now covered whole: the allocation's unused parts go.
            self.stats.merged += self.drop_unused_where(fabric, |e| e.buffer_id == alloc.buffer_id);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.stats.misses += 1;
        self.entries.push(Entry {
            id,
            buffer_id: alloc.buffer_id,
            start,
            end: start + span,
            mr,
            users: 1,
            keep: caching && span <= self.limits.bytes,
            last_use: self.clock,
        });
        Ok(Use { id, mr })
    }

    /// Give back a use of entry `id`.
    pub fn release<F: Fabric>(&mut self, fabric: &mut F, id: u64) {
        let Some(i) = self.entries.iter().position(|e| e.id == id) else {
            return;
        };
        let e = &mut self.entries[i];
        e.users = e.users.saturating_sub(1);
        if e.users == 0 && !e.keep {
            let e = self.entries.swap_remove(i);
            fabric.dereg_mr(e.mr);
        }
        self.evict(fabric, self.limits);
    }

    /// The entry in use whose registration peers read by `rkey`, if any.
    pub fn by_rkey(&self, rkey: u32) -> Option<u64> {
        self.entries
            .iter()
            .find(|e| e.users > 0 && e.mr.rkey == rkey)
            .map(|e| e.id)
    }

    /// Release every unused entry (the rest go when their users end).
    pub fn flush<F: Fabric>(&mut self, fabric: &mut F) {
        self.evict(fabric, Limits::NONE);
    }

    /// Release everything (the btl is going away): entries still in use
    /// are deregistered too.
    pub fn clear<F: Fabric>(&mut self, fabric: &mut F) {
        for e in self.entries.drain(..) {
            fabric.dereg_mr(e.mr);
        }
    }

    /// Drop the unused entries `pick` picks; how many.
    fn drop_unused_where<F: Fabric>(
        &mut self,
        fabric: &mut F,
        pick: impl Fn(&Entry) -> bool,
    ) -> u64 {
        let (mut n, mut i) = (0, 0);
        while i < self.entries.len() {
            if self.entries[i].users == 0 && pick(&self.entries[i]) {
                let e = self.entries.swap_remove(i);
                fabric.dereg_mr(e.mr);
                n += 1;
            } else {
                i += 1;
            }
        }
        n
    }

    /// Drop unused entries, least recently used first, until `limits`
    /// hold.
    fn evict<F: Fabric>(&mut self, fabric: &mut F, limits: Limits) {
        while let Some(i) = lru_over_limits(
            self.entries
                .iter()
                .map(|e| (e.users, e.end - e.start, e.last_use)),
            limits,
        ) {
            self.stats.evicted += 1;
            let e = self.entries.swap_remove(i);
            fabric.dereg_mr(e.mr);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{DeviceMemory, GpuNic, ModelFabric, ModelNet};

    /// "GPU memory" from 1 TiB up, which the model's NIC maps by address
    /// (peermem); the cache is driven here with explicit buffer ids.
    #[derive(Debug)]
    struct Gpu;

    const BASE: u64 = 1 << 40;

    impl DeviceMemory for Gpu {
        fn contains(&self, addr: u64, _: u64) -> bool {
            addr >= BASE
        }
        fn read(&self, _: u64, len: usize) -> Vec<u8> {
            vec![0; len]
        }
        fn write(&self, _: u64, _: &[u8]) {}
    }

    fn setup() -> (ModelNet, ModelFabric) {
        let net = ModelNet::with_gpu(
            Arc::new(Gpu),
            GpuNic {
                dmabuf: false,
                peermem: true,
            },
        );
        let f = net.fabric(64, 64, 64);
        (net, f)
    }

    fn alloc(k: u64, size: u64, buffer_id: u64) -> DeviceAlloc {
        DeviceAlloc {
            base: BASE + (k << 32),
            size,
            buffer_id,
        }
    }

    /// Acquire `len` bytes at `off` in `a`; the range registered, if any.
    fn get(
        c: &mut DevCache,
        f: &mut ModelFabric,
        a: DeviceAlloc,
        off: u64,
        len: u64,
    ) -> (Use, Option<(u64, u64)>) {
        let mut made = None;
        let u = c
            .acquire(f, a, a.base + off, len, |f, start, span| {
                made = Some((start, span));
                f.reg_mr(start, span, true)
            })
            .expect("registered");
        (u, made)
    }

    #[test]
    fn whole_allocations_serve_every_part_under_their_buffer_id() {
        let (net, mut f) = setup();
        let mut c = DevCache::new(Limits::default());
        let a = alloc(0, 8 << 20, 11);
        let (u, made) = get(&mut c, &mut f, a, 4096 + 40, 1000);
        assert_eq!(made, Some((a.base, a.size)), "the whole allocation");
        let (v, made) = get(&mut c, &mut f, a, 5 << 20, 3 << 20);
        assert_eq!((made, v.mr), (None, u.mr), "another part: a hit");
        c.release(&mut f, u.id);
        c.release(&mut f, v.id);
        assert_eq!((c.len(), net.registrations(0)), (1, 1), "kept unused");
        let (w, made) = get(&mut c, &mut f, a, 0, 1);
        assert!(made.is_none());
        c.release(&mut f, w.id);

        // Freed, and a new allocation at the same address (a new id).
        let b = alloc(0, 4 << 20, 12);
        let (x, made) = get(&mut c, &mut f, b, 100, 100);
        assert_eq!(made, Some((b.base, b.size)), "registered afresh");
        assert_ne!(x.mr, u.mr);
        assert_eq!(net.registrations(0), 1, "the old entry went");
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.invalidated), (2, 2, 1), "{s:?}");
        c.release(&mut f, x.id);
        c.clear(&mut f);
        assert_eq!(net.registrations(0), 0);
    }

    #[test]
    fn an_old_entry_in_use_serves_nothing_new_and_goes_with_its_user() {
        let (net, mut f) = setup();
        let mut c = DevCache::new(Limits::default());
        let a = alloc(0, 1 << 20, 1);
        let (u, _) = get(&mut c, &mut f, a, 0, 10);
        let b = alloc(0, 1 << 20, 2);
        let (v, made) = get(&mut c, &mut f, b, 0, 10);
        assert!(made.is_some(), "never the old allocation's");
        assert_ne!(u.mr, v.mr);
        assert_eq!(net.registrations(0), 2);
        c.release(&mut f, u.id);
        c.release(&mut f, v.id);
        // The old entry is unused now; the next request under the new id
        // drops it.
        let (w, made) = get(&mut c, &mut f, b, 20, 10);
        assert!(made.is_none());
        assert_eq!(net.registrations(0), 1);
        c.release(&mut f, w.id);
    }

    #[test]
    fn without_limits_each_use_registers_its_own_range_and_releases_it() {
        // GMPI_IB_RCACHE=off, and GMPI_IB_RCACHE_GPU_MB=0.
        for (entries, bytes) in [(0, 0), (64, 0)] {
            let (net, mut f) = setup();
            let mut c = DevCache::new(Limits { entries, bytes });
            let a = alloc(0, 8 << 20, 1);
            let (u, made) = get(&mut c, &mut f, a, 100, 1000);
            assert_eq!(made, Some((a.base + 100, 1000)), "its own range");
            let (v, made) = get(&mut c, &mut f, a, 100, 1000);
            assert_eq!((made, v.mr), (None, u.mr), "shared while in use");
            c.release(&mut f, u.id);
            assert_eq!(net.registrations(0), 1);
            c.release(&mut f, v.id);
            assert_eq!((c.len(), net.registrations(0)), (0, 0));
        }
    }

    #[test]
    fn a_whole_allocation_refused_registers_the_request_and_keeps_the_cache() {
        let (net, mut f) = setup();
        let mut c = DevCache::new(Limits::default());
        let kept = alloc(1, 1 << 20, 1);
        let (u, _) = get(&mut c, &mut f, kept, 0, 10);
        c.release(&mut f, u.id);
        let a = alloc(0, 8 << 20, 2);
        let mut tried = Vec::new();
        let u = c
            .acquire(&mut f, a, a.base + 100, 1000, |f, start, span| {
                tried.push((start, span));
                if span == a.size {
                    Err("cuMemGetHandleForAddressRange: CUDA_ERROR_INVALID_VALUE".into())
                } else {
                    f.reg_mr(start, span, true)
                }
            })
            .expect("its own bytes");
        assert_eq!(tried, [(a.base, a.size), (a.base + 100, 1000)]);
        assert_eq!((c.len(), net.registrations(0)), (2, 2), "nothing flushed");
        c.release(&mut f, u.id);
        let (v, made) = get(&mut c, &mut f, a, 100, 1000);
        assert!(made.is_none(), "the request's range is kept");
        c.release(&mut f, v.id);
        // Nothing registers: unused entries are given back before failing.
        let b = alloc(2, 1 << 20, 3);
        let e = c.acquire(&mut f, b, b.base, 10, |_, _, _| {
            Err("out of resources".into())
        });
        assert_eq!(e.map(|u| u.id), Err("out of resources".to_string()));
        assert_eq!((c.len(), net.registrations(0)), (0, 0));
    }

    #[test]
    fn allocations_above_the_byte_limit_register_their_parts() {
        let (net, mut f) = setup();
        let mut c = DevCache::new(Limits {
            entries: 8,
            bytes: 4 << 20,
        });
        let big = alloc(0, 1 << 30, 1);
        let (u, made) = get(&mut c, &mut f, big, 1 << 20, 1 << 20);
        assert_eq!(made, Some((big.base + (1 << 20), 1 << 20)));
        c.release(&mut f, u.id);
        assert_eq!(net.registrations(0), 1, "a part within the limit is kept");
        let (v, made) = get(&mut c, &mut f, big, (1 << 20) + 10, 100);
        assert!(made.is_none());
        c.release(&mut f, v.id);
        let (w, made) = get(&mut c, &mut f, big, 100 << 20, 8 << 20);
        assert!(made.is_some());
        c.release(&mut f, w.id);
        assert_eq!(net.registrations(0), 1, "a part above it is not");
    }

    #[test]
    fn unused_entries_beyond_the_limits_go_least_recently_used_first() {
        let (net, mut f) = setup();
        let mut c = DevCache::new(Limits {
            entries: 2,
            bytes: 1 << 30,
        });
        let allocs: Vec<DeviceAlloc> = (0..3).map(|k| alloc(k, 1 << 20, 100 + k)).collect();
        for a in &allocs[..2] {
            let (u, _) = get(&mut c, &mut f, *a, 0, 10);
            c.release(&mut f, u.id);
        }
        // Allocation 0 used again: allocation 1 is the oldest now.
        let (u, made) = get(&mut c, &mut f, allocs[0], 0, 10);
        assert!(made.is_none());
        c.release(&mut f, u.id);
        let (u, _) = get(&mut c, &mut f, allocs[2], 0, 10);
        c.release(&mut f, u.id);
        assert_eq!(
            (c.len(), net.registrations(0), c.stats().evicted),
            (2, 2, 1)
        );
        let (u, made) = get(&mut c, &mut f, allocs[0], 0, 10);
        assert!(made.is_none(), "allocation 0 stayed");
        c.release(&mut f, u.id);
        let (u, made) = get(&mut c, &mut f, allocs[1], 0, 10);
        assert!(made.is_some(), "allocation 1 went");
        c.release(&mut f, u.id);
    }
}
