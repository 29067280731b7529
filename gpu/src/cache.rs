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
//!   later call that stays within its pages, provided it lies where no
//!   device allocation can ever appear ([`Stable`]: the executable's data,
//!   the brk heap, the main stack); a host buffer elsewhere is asked about
//!   on every call.
//! - **device allocations**: a small fully associative table of slots
//!   (base, size, kind, buffer id) under a sequence lock each, replaced
//!   round-robin. The caller re-checks a hit's buffer id with one driver
//!   call before trusting it ([`crate::Gpu::classify`], [`crate::Gpu::info`]):
//!   a freed device range can come back as host memory (an H200 with driver
//!   580 gave a freed 16 MiB `cuMemAlloc` range to the next 16 MiB
//!   `malloc`), so the table saves the full attribute query, not the call.
//!
//! Invalidation: a device allocation learned from the driver drops every
//! host range and older device entry it overlaps; [`PtrCache::clear`]
//! forgets everything (`MPI_Finalize`). Host memory that the application
//! unmaps needs none: only stable ranges are kept, and nothing there is
//! ever unmapped. `GMPI_GPU_HOST_CACHE=off` turns the host table off.

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

/// Where a host answer may be kept: address ranges that the kernel never
/// gives to a new mapping, so never to a device allocation, while the
/// process runs. Read once from `/proc/self/maps`:
///
/// - the executable's image with its bss (static and Fortran common data);
/// - the brk heap (`malloc` below the mmap threshold on the main thread),
///   and up to 1 GiB past its end, so that it may grow;
/// - the main thread's stack, down to 8 MiB below its top (the kernel keeps
///   the mmap area at least 128 MiB below the stack).
///
/// Memory outside (large `malloc`s, which glibc maps and unmaps, thread
/// arenas, other threads' stacks, `mmap`) is asked about on every call: a
/// device allocation can take its addresses once it is unmapped (seen on an
/// H200 with driver 580, in both directions).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Stable {
    ranges: Vec<(u64, u64)>,
}

/// How far below the top of the main stack host answers are kept.
const STACK_SPAN: u64 = 8 << 20;
/// How far past its end at start-up the brk heap is trusted to grow: the
/// kernel places new mappings top-down from far above, never near the heap
/// unless the address space is nearly full.
const HEAP_GROWTH: u64 = 1 << 30;

impl Stable {
    /// This process's stable ranges (none if `/proc/self/maps` cannot be
    /// read: every host buffer is then asked about).
    pub(crate) fn of_process() -> Self {
        let exe = std::fs::read_link("/proc/self/exe").ok();
        let exe = exe.as_ref().and_then(|p| p.to_str()).unwrap_or("");
        std::fs::read_to_string("/proc/self/maps")
            .map(|m| Self::parse(&m, exe))
            .unwrap_or_default()
    }

    /// The stable ranges of a `/proc/PID/maps` text whose executable is
    /// `exe`.
    pub(crate) fn parse(maps: &str, exe: &str) -> Self {
        let maps: Vec<(u64, u64, &str)> = maps
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (lo, hi) = f.next()?.split_once('-')?;
                let path = f.nth(4).unwrap_or("");
                Some((
                    u64::from_str_radix(lo, 16).ok()?,
                    u64::from_str_radix(hi, 16).ok()?,
                    path,
                ))
            })
            .collect();
        let next_above = |end: u64| {
            maps.iter()
                .map(|m| m.0)
                .filter(|&lo| lo >= end)
                .min()
                .unwrap_or(end)
        };
        let mut ranges = Vec::new();
        let mut image_end = None;
        for (i, &(lo, hi, path)) in maps.iter().enumerate() {
            let image = !exe.is_empty() && path == exe;
            // The bss: anonymous, right after the image.
            let bss = path.is_empty() && image_end == Some(lo) && i > 0;
            if image || bss {
                ranges.push((lo, hi));
                image_end = Some(hi);
            } else {
                image_end = None;
            }
            if path == "[heap]" {
                ranges.push((lo, next_above(hi).min(hi.saturating_add(HEAP_GROWTH))));
            }
            if path == "[stack]" {
                let below = maps
                    .iter()
                    .map(|m| m.1)
                    .filter(|&end| end <= lo)
                    .max()
                    .unwrap_or(0);
                ranges.push((below.max(hi.saturating_sub(STACK_SPAN)).min(lo), hi));
            }
        }
        ranges.sort_unstable();
        Self { ranges }
    }

    /// Whether `addr..addr+len` lies in one stable range.
    pub(crate) fn contains(&self, addr: u64, len: usize) -> bool {
        let end = addr.saturating_add(len as u64);
        self.ranges.iter().any(|&(lo, hi)| lo <= addr && end <= hi)
    }
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct PtrCache {
    host: Box<[AtomicU64]>,
    dev: Box<[DevSlot]>,
    /// Where host answers are kept (`GMPI_GPU_HOST_CACHE=off`: nowhere).
    stable: Stable,
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
        Self::keeping_host_in(if keep_host {
            Stable::of_process()
        } else {
            Stable::default()
        })
    }

    /// An empty cache keeping host answers within `stable` only.
    pub(crate) fn keeping_host_in(stable: Stable) -> Self {
        Self {
            host: (0..HOST_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            dev: (0..DEV_SLOTS).map(|_| DevSlot::default()).collect(),
            stable,
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
        if !self.stable.contains(addr, len.max(1)) {
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

    /// A cache that keeps host answers anywhere (synthetic addresses).
    fn anywhere() -> PtrCache {
        PtrCache::keeping_host_in(Stable {
            ranges: vec![(0, u64::MAX)],
        })
    }

    const MAPS: &str = "\
55d0c0000000-55d0c0002000 r--p 00000000 fe:00 1 /opt/app/bin/solver
55d0c0002000-55d0c0008000 r-xp 00002000 fe:00 1 /opt/app/bin/solver
55d0c0008000-55d0c000a000 rw-p 00008000 fe:00 1 /opt/app/bin/solver
55d0c000a000-55d0c4000000 rw-p 00000000 00:00 0
55d0c5000000-55d0c5100000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0001000000 rw-p 00000000 00:00 0
7f0001000000-7f0001200000 r-xp 00000000 fe:00 2 /usr/lib/libc.so.6
7f0001200000-7f0001210000 rw-p 00000000 00:00 0
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]
7ffc00100000-7ffc00102000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn stable_ranges_are_image_bss_heap_and_main_stack() {
        let s = Stable::parse(MAPS, "/opt/app/bin/solver");
        assert!(s.contains(0x55d0_c000_8010, 64), "static data");
        assert!(s.contains(0x55d0_c100_0000, 1 << 20), "bss (common blocks)");
        assert!(s.contains(0x55d0_c500_0040, 64), "heap");
        assert!(s.contains(0x55d0_c600_0000, 64), "heap, once grown");
        assert!(
            !s.contains(0x55d1_0600_0000, 64),
            "more than 1 GiB past the heap"
        );
        assert!(s.contains(0x7ffc_0002_0f00, 64), "main stack");
        assert!(s.contains(0x7ffb_ffa0_0000, 64), "main stack, once grown");
        assert!(!s.contains(0x7f00_0000_1000, 64), "an mmap'd malloc");
        assert!(
            !s.contains(0x7f00_0120_0000, 64),
            "a library's anonymous data"
        );
        assert!(!s.contains(0x55d0_c000_9ff0, 1 << 30), "past the ranges");
        assert_eq!(
            Stable::parse(MAPS, ""),
            Stable::parse(&MAPS[MAPS.find("55d0c5").unwrap()..], "x")
        );
    }

    #[test]
    fn this_process_keeps_static_data_but_not_mapped_buffers() {
        static DATA: [u8; 64] = [0; 64];
        let s = Stable::of_process();
        assert!(s.contains(DATA.as_ptr() as u64, 64), "{s:?}");
        // Large enough that malloc maps it (and unmaps it when freed).
        let big = vec![1u8; 64 << 20];
        assert!(!s.contains(big.as_ptr() as u64, big.len()), "{s:?}");
        let c = PtrCache::new(true);
        c.insert_host(big.as_ptr() as u64, 64);
        assert!(!c.is_host(big.as_ptr() as u64, 64));
        c.insert_host(DATA.as_ptr() as u64, 64);
        assert!(c.is_host(DATA.as_ptr() as u64, 64));
    }

    #[test]
    fn host_ranges_hit_within_their_pages_only() {
        let c = anywhere();
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
        let c = anywhere();
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
