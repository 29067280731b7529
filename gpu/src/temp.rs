//! Device temporaries (the collectives' scratch buffers on the GPU), pooled.
//!
//! A collective schedule over device buffers makes its temporaries on the
//! GPU (`runtime/src/coll/sched.rs`), so its sends, receives and reductions
//! stay there. Allocating one per call costs a `cuMemAlloc`/`cuMemFree`
//! pair (both synchronize the device), and since each allocation has a new
//! buffer id, a new CUDA IPC handle ([`Gpu::ipc_export`]) and, at every
//! peer, a new mapping (`cuIpcOpenMemHandle`, [`Gpu::ipc_map`]). So a
//! [`DeviceBuf`] dropped goes back to a pool in its [`Gpu`] and the next
//! request of its size class on its device takes it again: a collective
//! called in a loop allocates its temporaries once, and its peers map them
//! once.
//!
//! One pool per [`Gpu`] (that is, per process), keyed by device ordinal
//! and size class, rather than one per communicator: temporaries are
//! scratch whose contents never outlive a schedule, so any communicator's
//! call may reuse any other's, which keeps fewer buffers alive for the same
//! reuse; and the IPC caches that make reuse pay are the [`Gpu`]'s, keyed
//! by allocation, not by communicator. Size classes are powers of two from
//! [`MIN_CLASS`] (the driver's own granularity is coarser still), so a
//! stream of slightly different sizes reuses one buffer.
//!
//! Bounded: the pool keeps at most [`KEEP_ENTRIES`] buffers and
//! [`KEEP_BYTES`] bytes; returning one past either bound frees the buffers
//! returned longest ago (a buffer larger than [`KEEP_BYTES`] is freed at
//! once). [`Gpu::release`] (at `MPI_Finalize`) and dropping the [`Gpu`]
//! free every pooled buffer.

use std::sync::Mutex;

use crate::{lock, CudaApi, Gpu, GpuError, MemKind, LOG};

/// The smallest size class.
pub const MIN_CLASS: usize = 64 << 10;
/// The most bytes of device memory the pool keeps.
pub const KEEP_BYTES: usize = 64 << 20;
/// The most buffers the pool keeps.
pub const KEEP_ENTRIES: usize = 16;

/// The size class of a request for `len` bytes: the bytes allocated.
fn class_of(len: usize) -> usize {
    let len = len.max(MIN_CLASS);
    len.checked_next_power_of_two().unwrap_or(len)
}

/// A pooled buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    ptr: u64,
    /// Bytes allocated.
    class: usize,
    /// The device it was asked for ([`ordinal_near`]).
    ordinal: i32,
}

/// The pool of one [`Gpu`]: free buffers, the one returned last at the end.
#[derive(Debug, Default)]
pub(crate) struct Temps {
    free: Mutex<Vec<Entry>>,
}

impl Temps {
    fn take(&self, class: usize, ordinal: i32) -> Option<Entry> {
        let mut free = lock(&self.free);
        let i = free
            .iter()
            .rposition(|e| e.class == class && e.ordinal == ordinal)?;
        Some(free.remove(i))
    }

    /// Keep `e`, then free the buffers returned longest ago while the pool
    /// is past a bound.
    fn give(&self, api: &dyn CudaApi, e: Entry) {
        if e.class > KEEP_BYTES {
            return free_all(api, vec![e]);
        }
        let gone: Vec<Entry> = {
            let mut free = lock(&self.free);
            free.push(e);
            let mut bytes: usize = free.iter().map(|e| e.class).sum();
            let mut n = 0;
            while free.len() - n > KEEP_ENTRIES || bytes > KEEP_BYTES {
                bytes -= free[n].class;
                n += 1;
            }
            free.drain(..n).collect()
        };
        free_all(api, gone);
    }

    /// Free every pooled buffer.
    pub(crate) fn release(&self, api: &dyn CudaApi) {
        let gone = std::mem::take(&mut *lock(&self.free));
        free_all(api, gone);
    }

    /// Buffers and bytes pooled.
    fn held(&self) -> (usize, usize) {
        let free = lock(&self.free);
        (free.len(), free.iter().map(|e| e.class).sum())
    }
}

fn free_all(api: &dyn CudaApi, gone: Vec<Entry>) {
    for e in gone {
        if let Err(err) = api.free_device(e.ptr) {
            tracing::warn!(target: LOG, "freeing a device temporary: {err}");
        }
    }
}

/// The pool's key for a temporary near `near`: the ordinal of the device
/// holding it, -1 where that is not one device's memory (the backend then
/// allocates on its fallback device, the same one every time).
fn ordinal_near(gpu: &Gpu, near: u64) -> i32 {
    match gpu.classify(near, 1) {
        Ok(MemKind::Device { ordinal }) => ordinal,
        _ => -1,
    }
}

impl Gpu {
    /// Device memory of `len` bytes on the device of `near` (a collective's
    /// temporary): a pooled buffer of its size class if there is one, else
    /// a new allocation of the class. Its contents are unspecified.
    pub fn alloc_device(&self, len: usize, near: u64) -> Result<DeviceBuf<'_>, GpuError> {
        let api = self.need_api()?;
        let (class, ordinal) = (class_of(len), ordinal_near(self, near));
        let ptr = match self.temps.take(class, ordinal) {
            Some(e) => e.ptr,
            None => api.alloc_device(class, near)?,
        };
        Ok(DeviceBuf {
            gpu: self,
            ptr,
            len,
            class,
            ordinal,
        })
    }

    /// Device temporaries pooled for reuse: (buffers, bytes).
    pub fn pooled_temporaries(&self) -> (usize, usize) {
        self.temps.held()
    }
}

/// Device memory owned by gmpi (a collective's temporary), returned to its
/// [`Gpu`]'s pool on drop.
#[derive(Debug)]
pub struct DeviceBuf<'a> {
    gpu: &'a Gpu,
    /// Device address.
    pub ptr: u64,
    /// Length in bytes (the allocation may be larger).
    pub len: usize,
    class: usize,
    ordinal: i32,
}

impl Drop for DeviceBuf<'_> {
    fn drop(&mut self) {
        if let Some(api) = self.gpu.api() {
            let e = Entry {
                ptr: self.ptr,
                class: self.class,
                ordinal: self.ordinal,
            };
            self.gpu.temps.give(api.as_ref(), e);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::double::TestCuda;
    use crate::GpuConfig;

    fn gpu(devices: usize) -> (Arc<TestCuda>, Gpu) {
        let d = Arc::new(TestCuda::new(devices));
        let g = Gpu::with_api(d.clone(), GpuConfig::default());
        (d, g)
    }

    #[test]
    fn size_classes() {
        assert_eq!(class_of(0), MIN_CLASS);
        assert_eq!(class_of(1), MIN_CLASS);
        assert_eq!(class_of(MIN_CLASS), MIN_CLASS);
        assert_eq!(class_of(MIN_CLASS + 1), 2 * MIN_CLASS);
        assert_eq!(class_of(3 << 20), 4 << 20);
        assert_eq!(class_of(usize::MAX), usize::MAX);
    }

    /// A collective's temporaries made and dropped in a loop: allocated
    /// once, the same buffers (so the same buffer ids and IPC handles) every
    /// time, with the data written each time read back; all freed by
    /// `release`.
    #[test]
    fn repeated_temporaries_are_allocated_once() {
        let (d, g) = gpu(1);
        let user = d.malloc(1 << 20, 0);
        let mut first = None;
        for k in 0..100u8 {
            // Two temporaries of one class and one of another, as a ring
            // allreduce might make.
            let a = g.alloc_device(100 << 10, user).unwrap();
            let b = g.alloc_device(120 << 10, user).unwrap();
            let c = g.alloc_device(1 << 20, user).unwrap();
            assert_ne!(a.ptr, b.ptr);
            let ptrs = (a.ptr, b.ptr, c.ptr);
            assert_eq!(*first.get_or_insert(ptrs), ptrs, "call {k}");
            g.copy_to_device(c.ptr + 1000, &[k; 64]).unwrap();
            assert_eq!(d.peek(c.ptr + 1000, 64), [k; 64]);
            assert_eq!(g.classify(b.ptr, b.len), Ok(MemKind::Device { ordinal: 0 }));
        }
        let c = d.counts();
        assert_eq!((c.mallocs, c.frees), (1 + 3, 0), "{c:?}");
        assert_eq!(g.pooled_temporaries(), (3, (256 << 10) + (1 << 20)));
        g.release();
        assert_eq!(g.pooled_temporaries(), (0, 0));
        assert_eq!(d.counts().frees, 3);
        // Usable after release: allocates again.
        drop(g.alloc_device(10, user).unwrap());
        assert_eq!(d.counts().mallocs, 5);
    }

    /// Buffers of one class on different devices are not mixed up.
    #[test]
    fn temporaries_stay_on_their_device() {
        let (d, g) = gpu(2);
        let (on0, on1) = (d.malloc(64, 0), d.malloc(64, 1));
        let p0 = g.alloc_device(10, on0).unwrap().ptr;
        let t1 = g.alloc_device(10, on1).unwrap();
        assert_ne!(t1.ptr, p0, "a device-0 buffer given for device 1");
        assert_eq!(g.classify(t1.ptr, 1), Ok(MemKind::Device { ordinal: 1 }));
        drop(t1);
        assert_eq!(g.alloc_device(10, on0).unwrap().ptr, p0);
        assert_eq!(d.counts().mallocs, 2 + 2);
    }

    /// The pool keeps at most KEEP_ENTRIES buffers and KEEP_BYTES bytes,
    /// freeing those returned longest ago.
    #[test]
    fn the_pool_is_bounded() {
        let (d, g) = gpu(1);
        let user = d.malloc(64, 0);
        let many: Vec<DeviceBuf<'_>> = (0..KEEP_ENTRIES + 4)
            .map(|_| g.alloc_device(1, user).unwrap())
            .collect();
        let mut ptrs: Vec<u64> = many.iter().map(|b| b.ptr).collect();
        drop(many);
        assert_eq!(
            g.pooled_temporaries(),
            (KEEP_ENTRIES, KEEP_ENTRIES * MIN_CLASS)
        );
        assert_eq!(d.counts().frees, 4);
        // The four returned first were freed; the others are taken again.
        let again: Vec<DeviceBuf<'_>> = (0..KEEP_ENTRIES)
            .map(|_| g.alloc_device(1, user).unwrap())
            .collect();
        let mut kept: Vec<u64> = again.iter().map(|b| b.ptr).collect();
        kept.sort_unstable();
        let mut rest = ptrs.split_off(4);
        rest.sort_unstable();
        assert_eq!(kept, rest);
        assert_eq!(d.counts().mallocs, 1 + KEEP_ENTRIES as u64 + 4);
        drop(again);
        // Bytes: two buffers of half the bound push the small ones out.
        let big: Vec<DeviceBuf<'_>> = (0..2)
            .map(|_| g.alloc_device(KEEP_BYTES / 2, user).unwrap())
            .collect();
        drop(big);
        assert_eq!(g.pooled_temporaries(), (2, KEEP_BYTES));
        // One larger than the bound is not kept at all.
        let frees = d.counts().frees;
        drop(g.alloc_device(KEEP_BYTES + 1, user).unwrap());
        assert_eq!(d.counts().frees, frees + 1);
        assert_eq!(g.pooled_temporaries(), (2, KEEP_BYTES));
        drop(g);
        let c = d.counts();
        assert_eq!(
            c.mallocs,
            c.frees + 1,
            "dropping the gpu layer frees the pool: {c:?}"
        );
    }
}
