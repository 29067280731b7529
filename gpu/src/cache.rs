//! The classification cache: which addresses are host memory and which lie
//! in device (or managed) allocations, answered on a hit with a few atomic
//! loads: no lock, no map, no driver call.
//!
//! Every buffer of every send, receive and collective is classified, so with
//! CUDA loaded this is on the path of host-memory latency. Two tables of
//! atomics, written only after a driver query (writers take a mutex, readers
//! never do):
//!
//! - **host ranges**: direct-mapped by the page of the address; a slot is
//!   one `AtomicU64` packing a range of pages (first page, page count), so a
//!   read is never torn. A host buffer classified once is host on every
//!   later call that stays within its pages.
//! - **device allocations**: a small fully associative table of slots
//!   (base, size, kind, buffer id) under a sequence lock each, replaced
//!   round-robin. A hit answers the kind without re-checking the buffer id:
//!   a freed device address stays in the driver's reserved range, so it is
//!   device memory again when reused. What depends on the allocation itself
//!   (IPC export, the allocation's base) re-checks the buffer id with one
//!   driver call ([`crate::Gpu::info`]).
//!
//! Invalidation: a device allocation learned from the driver drops every
//! host range and older device entry it overlaps; [`PtrCache::clear`]
//! forgets everything (`MPI_Finalize`). The one case this cache cannot see
//! is host memory unmapped by the application and whose addresses the
//! driver then gives to a new device allocation while the host entry is
//! still cached: CUDA reserves its device address ranges up front, so this
//! needs an unmapped host range to be taken by a later driver reservation;
//! `GMPI_GPU_HOST_CACHE=off` turns the host table off for such programs.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::{MemKind, PtrInfo};

/// Host-range slots (direct-mapped by page).
const HOST_SLOTS: usize = 256;
/// Device-allocation slots (fully associative).
const DEV_SLOTS: usize = 32;
/// Page size the host ranges are kept in.
const PAGE_SHIFT: u32 = 12;
/// Bits of a host slot holding the page count; the rest hold the first page.
const COUNT_BITS: u32 = 24;

/// One device allocation, under a sequence lock (odd: being written).
#[derive(Debug, Default)]
struct DevSlot {
    seq: AtomicU64,
    base: AtomicU64,
    size: AtomicU64,
    /// 0: empty; 1: managed; `1 << 32 | ordinal`: device.
    kind: AtomicU64,
    buffer_id: AtomicU64,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct PtrCache {
    host: Box<[AtomicU64]>,
    dev: Box<[DevSlot]>,
    /// Whether host answers are kept (`GMPI_GPU_HOST_CACHE`).
    keep_host: bool,
    /// Writers: the next device slot to replace.
    write: Mutex<usize>,
}

fn encode_kind(k: MemKind) -> u64 {
    match k {
        MemKind::Host => 0,
        MemKind::Managed => 1,
        MemKind::Device { ordinal } => 1 << 32 | u64::from(ordinal as u32),
    }
}

fn decode_kind(v: u64) -> Option<MemKind> {
    match v {
        0 => None,
        1 => Some(MemKind::Managed),
        v => Some(MemKind::Device {
            ordinal: v as u32 as i32,
        }),
    }
}

/// The pages `addr..addr+len` touch (a zero-length buffer touches one).
fn pages(addr: u64, len: usize) -> (u64, u64) {
    let last = addr.saturating_add((len as u64).max(1) - 1);
    (addr >> PAGE_SHIFT, last >> PAGE_SHIFT)
}

fn host_slot(page: u64) -> usize {
    (page ^ (page >> 8)) as usize % HOST_SLOTS
}

impl PtrCache {
    /// An empty cache; `keep_host` as `GMPI_GPU_HOST_CACHE` says.
    pub(crate) fn new(keep_host: bool) -> Self {
        Self {
            host: (0..HOST_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            dev: (0..DEV_SLOTS).map(|_| DevSlot::default()).collect(),
            keep_host,
            write: Mutex::new(0),
        }
    }

    /// Whether `addr..addr+len` is known host memory.
    #[inline]
    pub(crate) fn is_host(&self, addr: u64, len: usize) -> bool {
        let (first, last) = pages(addr, len);
        let v = self.host[host_slot(first)].load(Ordering::Relaxed);
        let (lo, n) = (v >> COUNT_BITS, v & ((1 << COUNT_BITS) - 1));
        n != 0 && lo <= first && last < lo + n
    }

    /// The cached device allocation holding `addr`, if any.
    #[inline]
    pub(crate) fn device(&self, addr: u64) -> Option<PtrInfo> {
        for s in self.dev.iter() {
            let seq = s.seq.load(Ordering::Acquire);
            if seq & 1 == 1 {
                continue;
            }
            let base = s.base.load(Ordering::Relaxed);
            let size = s.size.load(Ordering::Relaxed);
            if addr < base || addr - base >= size {
                continue;
            }
            let kind = s.kind.load(Ordering::Relaxed);
            let buffer_id = s.buffer_id.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if s.seq.load(Ordering::Relaxed) != seq {
                continue;
            }
            return decode_kind(kind).map(|kind| PtrInfo {
                kind,
                base,
                size,
                buffer_id,
            });
        }
        None
    }

    /// Remember that `addr..addr+len` is host memory.
    pub(crate) fn insert_host(&self, addr: u64, len: usize) {
        if !self.keep_host {
            return;
        }
        let (first, last) = pages(addr, len);
        let n = last - first + 1;
        if n >= 1 << COUNT_BITS || first >= 1 << (64 - COUNT_BITS) {
            return;
        }
        let _w = crate::lock(&self.write);
        self.host[host_slot(first)].store(first << COUNT_BITS | n, Ordering::Relaxed);
    }

    /// Remember a device allocation; forget the host ranges and older
    /// device entries it overlaps.
    pub(crate) fn insert_device(&self, info: &PtrInfo) {
        let mut next = crate::lock(&self.write);
        let end = info.base.saturating_add(info.size);
        let (first, last) = pages(info.base, info.size as usize);
        for h in self.host.iter() {
            let v = h.load(Ordering::Relaxed);
            let (lo, n) = (v >> COUNT_BITS, v & ((1 << COUNT_BITS) - 1));
            if n != 0 && lo <= last && first < lo + n {
                h.store(0, Ordering::Relaxed);
            }
        }
        let mut free = None;
        for (i, s) in self.dev.iter().enumerate() {
            let (b, sz) = (
                s.base.load(Ordering::Relaxed),
                s.size.load(Ordering::Relaxed),
            );
            let live = s.kind.load(Ordering::Relaxed) != 0;
            if live && b < end && info.base < b.saturating_add(sz) {
                Self::write_slot(s, None);
                free.get_or_insert(i);
            } else if !live {
                free.get_or_insert(i);
            }
        }
        let i = free.unwrap_or_else(|| {
            let i = *next;
            *next = (i + 1) % DEV_SLOTS;
            i
        });
        Self::write_slot(&self.dev[i], Some(info));
    }

    /// Forget the device entry of the allocation at `base` (it was freed).
    pub(crate) fn remove_device(&self, base: u64) {
        let _w = crate::lock(&self.write);
        for s in self.dev.iter() {
            if s.kind.load(Ordering::Relaxed) != 0 && s.base.load(Ordering::Relaxed) == base {
                Self::write_slot(s, None);
            }
        }
    }

    /// Forget everything.
    pub(crate) fn clear(&self) {
        let _w = crate::lock(&self.write);
        for h in self.host.iter() {
            h.store(0, Ordering::Relaxed);
        }
        for s in self.dev.iter() {
            Self::write_slot(s, None);
        }
    }

    /// Write a device slot (the caller holds the writers' mutex).
    fn write_slot(s: &DevSlot, info: Option<&PtrInfo>) {
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let (base, size, kind, id) = info.map_or((0, 0, 0, 0), |i| {
            (i.base, i.size, encode_kind(i.kind), i.buffer_id)
        });
        s.base.store(base, Ordering::Relaxed);
        s.size.store(size, Ordering::Relaxed);
        s.kind.store(kind, Ordering::Relaxed);
        s.buffer_id.store(id, Ordering::Relaxed);
        s.seq.store(seq + 2, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(base: u64, size: u64, id: u64) -> PtrInfo {
        PtrInfo {
            kind: MemKind::Device { ordinal: 1 },
            base,
            size,
            buffer_id: id,
        }
    }

    #[test]
    fn host_ranges_hit_within_their_pages_only() {
        let c = PtrCache::new(true);
        assert!(!c.is_host(0x10_0010, 8));
        c.insert_host(0x10_0010, 8);
        assert!(c.is_host(0x10_0010, 8));
        assert!(c.is_host(0x10_0000, 4096), "same page");
        assert!(!c.is_host(0x10_0ff0, 32), "crosses into the next page");
        c.insert_host(0x20_0000, 3 << 12);
        assert!(c.is_host(0x20_0000, 3 << 12));
        assert!(!PtrCache::new(false).is_host(0x10_0010, 8));
        let off = PtrCache::new(false);
        off.insert_host(0x10_0010, 8);
        assert!(!off.is_host(0x10_0010, 8), "GMPI_GPU_HOST_CACHE=off");
    }

    #[test]
    fn device_entries_replace_what_they_overlap() {
        let c = PtrCache::new(true);
        c.insert_host(0x40_0000, 16);
        c.insert_device(&dev(0x40_0000, 1 << 20, 7));
        assert!(!c.is_host(0x40_0000, 16), "host range dropped");
        assert_eq!(c.device(0x40_0100), Some(dev(0x40_0000, 1 << 20, 7)));
        assert_eq!(c.device(0x50_0000), None);
        // A new allocation over part of the old one replaces it.
        c.insert_device(&dev(0x48_0000, 1 << 20, 8));
        assert_eq!(c.device(0x40_0100), None);
        assert_eq!(c.device(0x48_0000).map(|i| i.buffer_id), Some(8));
        c.remove_device(0x48_0000);
        assert_eq!(c.device(0x48_0000), None);
        // More allocations than slots: the oldest go, the newest stay.
        for i in 0..(DEV_SLOTS as u64 + 5) {
            c.insert_device(&dev(0x1000_0000 + (i << 20), 1 << 16, 100 + i));
        }
        let last = DEV_SLOTS as u64 + 4;
        assert_eq!(
            c.device(0x1000_0000 + (last << 20)).map(|i| i.buffer_id),
            Some(100 + last)
        );
        c.clear();
        assert_eq!(c.device(0x1000_0000 + (last << 20)), None);
    }

    #[test]
    fn readers_never_see_a_torn_device_entry() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let c = Arc::new(PtrCache::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let w = {
            let (c, stop) = (c.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Base, size and id always agree: id == base >> 20.
                    let base = (1 + i % 4) << 20;
                    c.insert_device(&dev(base, 1 << 20, base >> 20));
                    i += 1;
                }
            })
        };
        for _ in 0..200_000 {
            for k in 1..=4u64 {
                if let Some(i) = c.device((k << 20) + 5) {
                    assert_eq!((i.base, i.size, i.buffer_id), (k << 20, 1 << 20, k));
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap();
    }
}
