//! The registration cache: host memory stays registered after the
//! rendezvous that needed it, so that the next message from or into the
//! same buffer costs no `ibv_reg_mr` (Open MPI's "leave pinned", UCX's
//! rcache).
//!
//! A registration covers the pages of its buffer (the page-aligned range,
//! which is the whole allocation for a buffer that `malloc` mapped by
//! itself). An entry serves every later request that lies inside it, as
//! the local key of a get's destination and as the remote key peers read
//! a send buffer by. A request that shares pages with unused entries
//! registers their union instead, so an array sent in parts ends up as one
//! registration of the whole. Entries are counted while in use; unused
//! ones are kept, least recently used first out, up to [`Limits`].
//!
//! A registration pins the pages it found: once the program unmaps the
//! memory (`free` of a large buffer, `munmap`, `mremap`, or
//! `madvise(MADV_DONTNEED)` that `free` uses to return memory) and the
//! address is mapped again, the entry would point at the old pages, and a
//! peer would read stale bytes. So an entry is kept only while a
//! [`MemWatch`] watches its range: the watch reports every range that
//! leaves the process ([`MemWatch::take_gone`]), and the cache drops the
//! entries that overlap it before it answers the next request. Memory the
//! watch cannot watch (or no watch at all: [`NoWatch`]) is registered per
//! use and released when its last user ends, as without a cache; device
//! memory never comes here (freeing it raises no event a watch could see:
//! [`crate::devcache`] keeps it by the allocation's buffer id).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::fabric::{Fabric, Mr};

/// The page size registrations are aligned to.
pub const PAGE: u64 = 4096;

/// Reports the ranges of memory that leave the process.
pub trait MemWatch: Send {
    /// Start watching the page-aligned range `[start, end)`; `false` if it
    /// cannot be watched (then it is not cached).
    fn watch(&mut self, start: u64, end: u64) -> bool;
    /// Stop watching `[start, end)`.
    fn unwatch(&mut self, start: u64, end: u64);
    /// Move the ranges gone since the last call into `out` (emptied
    /// first); `true` when some were lost, so that every range is to be
    /// taken as gone.
    fn take_gone(&mut self, out: &mut Vec<(u64, u64)>) -> bool;
    /// A flag set while [`MemWatch::take_gone`] has something, if the
    /// watch keeps one: every progress pass looks at it (one load), so that
    /// pinned pages of memory the program freed are released at the next
    /// pass, not at the next registration.
    fn pending_flag(&self) -> Option<Arc<AtomicBool>> {
        None
    }
}

/// No watch: nothing is cached beyond its users.
#[derive(Debug, Default)]
pub struct NoWatch;

impl MemWatch for NoWatch {
    fn watch(&mut self, _: u64, _: u64) -> bool {
        false
    }
    fn unwatch(&mut self, _: u64, _: u64) {}
    fn take_gone(&mut self, out: &mut Vec<(u64, u64)>) -> bool {
        out.clear();
        false
    }
}

/// How much the cache keeps registered while unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Unused entries at most.
    pub entries: usize,
    /// Bytes of unused entries at most.
    pub bytes: u64,
}

impl Limits {
    /// Nothing kept unused.
    pub const NONE: Limits = Limits {
        entries: 0,
        bytes: 0,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            entries: 512,
            bytes: 1 << 30,
        }
    }
}

/// What the cache has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests an entry served.
    pub hits: u64,
    /// Requests that registered memory.
    pub misses: u64,
    /// Entries dropped because their memory left the process.
    pub invalidated: u64,
    /// Unused entries dropped to stay within the limits.
    pub evicted: u64,
    /// Unused entries folded into a new, larger registration.
    pub merged: u64,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    start: u64,
    end: u64,
    mr: Mr,
    users: u32,
    /// Watched, so kept while unused.
    watched: bool,
    /// Its memory left the process: serves no new request.
    stale: bool,
    last_use: u64,
}

/// A use of the cache: give it back with [`Rcache::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Use {
    /// The entry.
    pub id: u64,
    /// Its registration (the keys to use).
    pub mr: Mr,
}

/// The cache (see the module header).
pub struct Rcache {
    watch: Box<dyn MemWatch>,
    /// The watch's [`MemWatch::pending_flag`].
    pending: Option<Arc<AtomicBool>>,
    limits: Limits,
    entries: Vec<Entry>,
    next_id: u64,
    clock: u64,
    gone: Vec<(u64, u64)>,
    stats: Stats,
}

impl std::fmt::Debug for Rcache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rcache")
            .field("entries", &self.entries.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Rcache {
    /// A cache that keeps what `watch` watches, within `limits`.
    pub fn new(watch: Box<dyn MemWatch>, limits: Limits) -> Self {
        Self {
            pending: watch.pending_flag(),
            watch,
            limits,
            entries: Vec::new(),
            next_id: 1,
            clock: 0,
            gone: Vec::new(),
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

    /// A registration covering `len` bytes at `addr` (peers may read it),
    /// from an entry or registered now through `fabric`.
    pub fn acquire<F: Fabric>(
        &mut self,
        fabric: &mut F,
        addr: u64,
        len: u64,
    ) -> Result<Use, String> {
        self.invalidate_gone(fabric);
        self.clock += 1;
        let end = addr
            .checked_add(len.max(1))
            .ok_or_else(|| format!("{len} bytes at {addr:#x} wrap around"))?;
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| !e.stale && e.start <= addr && end <= e.end)
        {
            e.users += 1;
            e.last_use = self.clock;
            self.stats.hits += 1;
            return Ok(Use { id: e.id, mr: e.mr });
        }
        let own = (addr & !(PAGE - 1), end.div_ceil(PAGE).saturating_mul(PAGE));
        // Unused entries sharing a page with this range (other parts of
        // the same array, sent before): one registration of their union
        // serves them all from now on, so an allocation sent piece by
        // piece ends up registered whole, once.
        let (mut start, mut end) = own;
        let mut merge: Vec<u64> = Vec::new();
        loop {
            let before = merge.len();
            for e in &self.entries {
                if e.users == 0
                    && !e.stale
                    && e.watched
                    && e.start < end
                    && start < e.end
                    && !merge.contains(&e.id)
                {
                    start = start.min(e.start);
                    end = end.max(e.end);
                    merge.push(e.id);
                }
            }
            if merge.len() == before {
                break;
            }
        }
        let mr = match fabric.reg_mr(start, end - start, true) {
            Ok(mr) => mr,
            // Pinned memory may be what ran out: the request's own pages
            // alone, after giving back what is unused.
            Err(e) => {
                if merge.is_empty() && self.entries.iter().all(|e| e.users > 0) {
                    return Err(e);
                }
                (start, end) = own;
                merge.clear();
                self.drop_unused(fabric, 0, 0);
                fabric.reg_mr(start, end - start, true)?
            }
        };
        let watched = self.watch.watch(start, end);
        let id = self.next_id;
        self.next_id += 1;
        self.stats.misses += 1;
        self.entries.push(Entry {
            id,
            start,
            end,
            mr,
            users: 1,
            watched,
            stale: false,
            last_use: self.clock,
        });
        // After the new entry is in: its pages stay watched.
        for old in merge {
            if let Some(i) = self.entries.iter().position(|e| e.id == old) {
                self.stats.merged += 1;
                self.remove(fabric, i);
            }
        }
        Ok(Use { id, mr })
    }

    /// Give back a use of entry `id`.
    pub fn release<F: Fabric>(&mut self, fabric: &mut F, id: u64) {
        let Some(i) = self.entries.iter().position(|e| e.id == id) else {
            return;
        };
        let e = &mut self.entries[i];
        e.users = e.users.saturating_sub(1);
        if e.users == 0 && (e.stale || !e.watched) {
            self.remove(fabric, i);
        }
        self.invalidate_gone(fabric);
        self.drop_unused(fabric, self.limits.entries, self.limits.bytes);
    }

    /// The entry in use whose registration peers read by `rkey`, if any.
    pub fn by_rkey(&self, rkey: u32) -> Option<u64> {
        self.entries
            .iter()
            .find(|e| e.users > 0 && e.mr.rkey == rkey)
            .map(|e| e.id)
    }

    /// Drop the entries whose memory left, if the watch says any did.
    #[inline]
    pub fn sweep<F: Fabric>(&mut self, fabric: &mut F) {
        if self
            .pending
            .as_ref()
            .is_some_and(|p| p.load(Ordering::Acquire))
        {
            self.invalidate_gone(fabric);
        }
    }

    /// Release every unused entry (the rest go when their users end).
    pub fn flush<F: Fabric>(&mut self, fabric: &mut F) {
        self.drop_unused(fabric, 0, 0);
    }

    /// Drop the entries whose memory the watch saw leave.
    fn invalidate_gone<F: Fabric>(&mut self, fabric: &mut F) {
        let mut gone = std::mem::take(&mut self.gone);
        let all = self.watch.take_gone(&mut gone);
        for i in (0..self.entries.len()).rev() {
            let e = &self.entries[i];
            if e.stale || !e.watched {
                continue;
            }
            if all || gone.iter().any(|&(s, t)| s < e.end && e.start < t) {
                self.stats.invalidated += 1;
                self.entries[i].stale = true;
                if self.entries[i].users == 0 {
                    self.remove(fabric, i);
                }
            }
        }
        gone.clear();
        self.gone = gone;
    }

    /// Drop unused entries, least recently used first, until at most
    /// `entries` of them holding at most `bytes` remain.
    fn drop_unused<F: Fabric>(&mut self, fabric: &mut F, entries: usize, bytes: u64) {
        while let Some(i) = lru_over_limits(
            self.entries
                .iter()
                .map(|e| (e.users, e.end - e.start, e.last_use)),
            Limits { entries, bytes },
        ) {
            self.stats.evicted += 1;
            self.remove(fabric, i);
        }
    }

    /// Remove entry `i`: deregister it, and stop watching what no other
    /// watched entry covers.
    fn remove<F: Fabric>(&mut self, fabric: &mut F, i: usize) {
        let e = self.entries.swap_remove(i);
        fabric.dereg_mr(e.mr);
        if !e.watched {
            return;
        }
        // The parts of [start, end) no other watched entry covers.
        let mut covers: Vec<(u64, u64)> = self
            .entries
            .iter()
            .filter(|o| o.watched && !o.stale && o.start < e.end && e.start < o.end)
            .map(|o| (o.start.max(e.start), o.end.min(e.end)))
            .collect();
        covers.sort_unstable();
        let mut at = e.start;
        for (s, t) in covers {
            if s > at {
                self.watch.unwatch(at, s);
            }
            at = at.max(t);
        }
        if at < e.end {
            self.watch.unwatch(at, e.end);
        }
    }

    /// Release everything (the btl is going away): entries still in use
    /// are deregistered too.
    pub fn clear<F: Fabric>(&mut self, fabric: &mut F) {
        while !self.entries.is_empty() {
            let i = self.entries.len() - 1;
            self.remove(fabric, i);
        }
    }
}

/// Of entries given as (users, bytes, last use), the index of the least
/// recently used unused one while the unused ones exceed `limits`; `None`
/// once they do not.
pub(crate) fn lru_over_limits(
    entries: impl Iterator<Item = (u32, u64, u64)>,
    limits: Limits,
) -> Option<usize> {
    let (mut n, mut held, mut oldest) = (0usize, 0u64, None::<(u64, usize)>);
    for (i, (users, bytes, last_use)) in entries.enumerate() {
        if users == 0 {
            n += 1;
            held += bytes;
            if oldest.is_none_or(|(t, _)| last_use < t) {
                oldest = Some((last_use, i));
            }
        }
    }
    oldest
        .filter(|_| n > limits.entries || held > limits.bytes)
        .map(|(_, i)| i)
}
