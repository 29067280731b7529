//! Staging through pinned host memory: a bounded pool of pinned slots, and
//! the asynchronous copies between device memory and a slot.
//!
//! The staged protocols (the pml's `rndv/staged`) move device memory that
//! no direct path reaches in chunks: the progress driver takes a slot
//! ([`Gpu::take_slot`]), issues the device→host (or host→device) copy on
//! the backend's stream for that device, direction and peer lane
//! ([`LANES`] per device and direction) with an event after it
//! ([`Gpu::copy_async`]), and polls the event from its progress loop
//! ([`Gpu::copy_poll`]): each chunk moves on as soon as its own copy has
//! ended, while the next ones are still on the copy engine. A slot is owned
//! by whoever holds its `Box` (the backend while a copy runs), so no byte
//! is read while the DMA engine writes it.
//!
//! At most [`MAX_SLOTS`] slots per direction are out at once: that bounds
//! the pinned memory (2 × `MAX_SLOTS` × the chunk) and is the staged
//! pipeline's back-pressure (`take_slot` answers `None`; the driver waits
//! until one comes back). The two directions have separate budgets because
//! they are freed differently: a slot staging a send out is freed when the
//! peer has pulled it, one staging a receive in when its local copy has
//! landed; with one budget, two ranks sending to each other could each
//! hold every slot for their sends and wait forever for the other's pulls.
//! Returned slots are kept for reuse and freed by [`Gpu::release`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::api::{CopyDir, GpuError, Landed, PinnedBuf, Ticket};
use crate::{bump, lock, Gpu};

/// Slots out at once per direction, every peer together.
pub const MAX_SLOTS: usize = 8;

/// Streams per device and direction: copies for peers in different lanes
/// (`peer % LANES`) may run on different copy engines at once.
pub const LANES: u32 = 4;

/// The pool of staging slots.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    free: Mutex<Vec<Box<dyn PinnedBuf>>>,
    /// Slots handed out and not yet returned: staging out, staging in.
    out: [AtomicUsize; 2],
}

fn lane(dir: CopyDir) -> usize {
    match dir {
        CopyDir::ToHost => 0,
        CopyDir::ToDevice => 1,
    }
}

/// The sizes of the kept slots, in order.
fn sizes(free: &mut [Box<dyn PinnedBuf>]) -> Vec<usize> {
    free.iter_mut().map(|b| b.as_mut_slice().len()).collect()
}

impl Slots {
    /// Free every kept slot.
    pub(crate) fn clear(&self) {
        lock(&self.free).clear();
    }
}

impl Gpu {
    /// A pinned slot of at least `len` bytes for staging in direction
    /// `dir`, or `None` when [`MAX_SLOTS`] of that direction are out (wait
    /// until one is returned).
    pub fn take_slot(
        &self,
        dir: CopyDir,
        len: usize,
    ) -> Result<Option<Box<dyn PinnedBuf>>, GpuError> {
        let api = self.need_api()?;
        let out = &self.slots.out[lane(dir)];
        if out.fetch_add(1, Ordering::AcqRel) >= MAX_SLOTS {
            out.fetch_sub(1, Ordering::AcqRel);
            return Ok(None);
        }
        let s = &self.slots;
        let kept = {
            // The smallest kept slot that fits, so that a small copy does
            // not take a chunk-sized slot the next chunk then lacks.
            let mut free = lock(&s.free);
            let i = sizes(&mut free)
                .into_iter()
                .enumerate()
                .filter(|&(_, n)| n >= len)
                .min_by_key(|&(_, n)| n)
                .map(|(i, _)| i);
            i.map(|i| free.swap_remove(i))
        };
        match kept {
            Some(b) => Ok(Some(b)),
            None => match api.alloc_pinned(len.max(64 << 10).next_power_of_two()) {
                Ok(b) => {
                    bump(&self.stats.slots_made);
                    Ok(Some(b))
                }
                Err(e) => {
                    out.fetch_sub(1, Ordering::AcqRel);
                    Err(e)
                }
            },
        }
    }

    /// Give back a slot that [`Gpu::take_slot`] gave for `dir` (kept for
    /// reuse).
    pub fn put_slot(&self, dir: CopyDir, mut b: Box<dyn PinnedBuf>) {
        let s = &self.slots;
        {
            let mut free = lock(&s.free);
            free.push(b);
            // Keep at most as many as can be out at once (both
            // directions); past that, free the smallest.
            if free.len() > 2 * MAX_SLOTS {
                let sizes = sizes(&mut free);
                if let Some(i) = (0..sizes.len()).min_by_key(|&i| sizes[i]) {
                    b = free.swap_remove(i);
                    drop(b);
                }
            }
        }
        s.out[lane(dir)].fetch_sub(1, Ordering::AcqRel);
    }

    /// Slots of `dir` out now (taken and not returned).
    pub fn slots_out(&self, dir: CopyDir) -> usize {
        self.slots.out[lane(dir)].load(Ordering::Acquire)
    }

    /// Issue an asynchronous copy of `len` bytes between device memory at
    /// `dev` and the slot `host` on the stream of `lane` (the peer the chunk
    /// is for: [`crate::CudaApi::copy_async`]).
    pub fn copy_async(
        &self,
        dir: CopyDir,
        dev: u64,
        host: Box<dyn PinnedBuf>,
        len: usize,
        lane: u32,
    ) -> Result<Ticket, (GpuError, Box<dyn PinnedBuf>)> {
        match self.need_api() {
            Ok(api) => api.copy_async(dir, dev, host, len, lane % LANES),
            Err(e) => Err((e, host)),
        }
    }

    /// Whether the copy of `t` has ended ([`crate::CudaApi::copy_poll`]).
    pub fn copy_poll(&self, t: Ticket) -> Option<Landed> {
        self.api.as_ref()?.copy_poll(t)
    }

    /// Issue a device-to-device copy on the stream of `lane` (e.g. the
    /// peer) and return at once ([`crate::CudaApi::copy_device_async`]):
    /// the copies of one stream queue back to back on the GPU instead of
    /// each waiting for the one before. Both ranges must stay valid until
    /// [`Gpu::device_poll`] says it ended.
    pub fn copy_device_async(
        &self,
        dst: u64,
        src: u64,
        len: usize,
        lane: u32,
    ) -> Result<Ticket, GpuError> {
        self.need_api()?
            .copy_device_async(dst, src, len, lane % LANES)
    }

    /// Whether the copy of `t` from [`Gpu::copy_device_async`] has ended,
    /// and how.
    pub fn device_poll(&self, t: Ticket) -> Option<Result<(), GpuError>> {
        self.api.as_ref()?.device_poll(t)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::double::{max_in_flight, TestCuda, Trace};
    use crate::GpuConfig;

    #[test]
    fn slots_are_bounded_reused_and_freed() {
        let d = Arc::new(TestCuda::new(1));
        let g = Gpu::with_api(d.clone(), GpuConfig::default());
        let up = CopyDir::ToHost;
        let mut out: Vec<_> = (0..MAX_SLOTS)
            .map(|_| g.take_slot(up, 1 << 19).unwrap().expect("a slot"))
            .collect();
        assert!(g.take_slot(up, 1).unwrap().is_none(), "back-pressure");
        assert_eq!(g.slots_out(up), MAX_SLOTS);
        // The other direction has its own budget.
        let down = g.take_slot(CopyDir::ToDevice, 1).unwrap().expect("a slot");
        g.put_slot(CopyDir::ToDevice, down);
        g.put_slot(up, out.pop().unwrap());
        let again = g.take_slot(up, 1 << 19).unwrap().expect("the returned one");
        assert_eq!(
            d.counts().pinned,
            MAX_SLOTS as u64 + 1,
            "reused, not allocated"
        );
        g.put_slot(up, again);
        out.into_iter().for_each(|b| g.put_slot(up, b));
        assert_eq!(g.slots_out(up), 0);
        g.release();
        assert!(lock(&g.slots.free).is_empty());
    }

    #[test]
    fn async_copies_overlap_and_may_be_seen_out_of_order() {
        let d = Arc::new(TestCuda::new(1));
        let g = Gpu::with_api(d.clone(), GpuConfig::default());
        let p = d.malloc(4 << 10, 0);
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 253) as u8).collect();
        d.poke(p, &data);
        let tickets: Vec<Ticket> = (0..4)
            .map(|i| {
                let s = g.take_slot(CopyDir::ToHost, 1024).unwrap().unwrap();
                g.copy_async(CopyDir::ToHost, p + i * 1024, s, 1024, 0)
                    .unwrap()
            })
            .collect();
        assert_eq!(d.copies_in_flight(), 4);
        // Not complete at once; then the last is seen complete before
        // anyone asked about the first (as with CUDA events): callers must
        // not take the order they see copies land in for their issue order.
        assert!(g.copy_poll(tickets[3]).is_none());
        let (mut last, res) = g.copy_poll(tickets[3]).expect("complete by now");
        res.unwrap();
        assert_eq!(&last.as_mut_slice()[..1024], &data[3072..]);
        g.put_slot(CopyDir::ToHost, last);
        assert_eq!(d.copies_in_flight(), 3);
        let mut got = Vec::new();
        for t in &tickets[..3] {
            let (mut b, res) = g.copy_poll(*t).expect("earlier ones complete too");
            res.unwrap();
            got.extend_from_slice(&b.as_mut_slice()[..1024]);
            g.put_slot(CopyDir::ToHost, b);
        }
        assert_eq!(got, data[..3072]);
        let trace = d.trace();
        assert_eq!(max_in_flight(&trace, CopyDir::ToHost), 4);
        let landed: Vec<Ticket> = trace
            .iter()
            .filter_map(|t| match t {
                Trace::Landed { ticket } => Some(*ticket),
                _ => None,
            })
            .collect();
        assert_eq!(landed, [tickets[3], tickets[0], tickets[1], tickets[2]]);
        // Into the device, and an error handing the slot back.
        let mut s = g.take_slot(CopyDir::ToDevice, 16).unwrap().unwrap();
        s.as_mut_slice()[..4].copy_from_slice(b"abcd");
        let t = g.copy_async(CopyDir::ToDevice, p, s, 4, 0).unwrap();
        let (b, res) = loop {
            if let Some(l) = g.copy_poll(t) {
                break l;
            }
        };
        res.unwrap();
        assert_eq!(d.peek(p, 4), b"abcd");
        let (e, b) = g
            .copy_async(CopyDir::ToHost, p + 4090, b, 64, 0)
            .unwrap_err();
        assert!(matches!(e, GpuError::BadRange { .. }), "{e}");
        g.put_slot(CopyDir::ToDevice, b);
        assert_eq!(g.slots_out(CopyDir::ToDevice), 0);
    }
}
