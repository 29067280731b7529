//! Every `unsafe` operation of the crate: the shared mapping, raw ring memory,
//! atomics placed in shared memory, futex system calls and `process_vm_readv`.
//!
//! The rest of the crate sees safe types only:
//! - [`Mapping`]: an `mmap(MAP_SHARED)` of the segment file, unmapped on drop;
//!   hands out bounds- and alignment-checked `&AtomicU32`/`&AtomicU64`.
//! - [`TxRing`] / [`RxRing`]: the producer and consumer ends of one
//!   single-producer/single-consumer ring. Their methods are the only code
//!   that reads or writes record bytes, and they uphold the ring invariant
//!   that makes the raw accesses sound: the producer writes only the free
//!   region `[tail, head + cap)`, the consumer reads only the published region
//!   `[head, tail)`, and the two regions never overlap because `tail` is
//!   published with Release after the bytes are written and `head` with
//!   Release after the bytes are read (each side loads the other's counter
//!   with Acquire). Every counter and record header read from shared memory is
//!   validated before it is used to form an address, so a corrupt or hostile
//!   peer can make a ring report [`Corrupt`], never make us touch memory
//!   outside the ring.
//! - [`futex_wait`] / [`futex_wake`]: shared (not `FUTEX_PRIVATE`) futexes,
//!   since the waiter and the waker are different processes.
//! - [`vm_read`] / [`vm_write`]: one `process_vm_readv` / `process_vm_writev`
//!   call between a local address range and one of another process.
//! - [`Mapping::write_bytes`] / [`Mapping::bytes`]: bounds-checked raw byte
//!   access for the collective area's data slots (`coll.rs`), whose
//!   writer/reader separation is the epoch protocol documented there;
//!   `&mut self` for writes keeps this process's own slices out of the way.
//!
//! Caveat shared by every shared-memory transport: a peer process that
//! scribbles over a ring *while* we hold a record slice would race with us;
//! peers are processes of the same user and job, and the protocol never does
//! it. (Such a peer could as well write our memory with `process_vm_writev`,
//! which is how it helps a cooperative get of ours: see `coop.rs`.)

#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gmpi_btl::LocalMem;

use crate::layout::{self, Kind, RING_CTRL_BYTES, RING_HEAD, RING_WANT};

/// A shared, writable mapping of the whole segment file.
#[derive(Debug)]
pub(crate) struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value until drop; all
// access through it is either atomic or governed by the ring protocol, which
// does not depend on which thread performs it.
unsafe impl Send for Mapping {}
// SAFETY: shared references only expose atomics (`&AtomicU32/U64`) and the
// ring types, which need `&mut` for their own non-atomic accesses.
unsafe impl Sync for Mapping {}

/// From here on a one-sided copy is one `memcpy` again ([`copy_window`]).
const WINDOW_CHUNKED_MAX: usize = 32 << 10;

/// The pieces of [`copy_window`]: at 2 KiB one `memcpy` beats smaller
/// pieces (np 2 `gb_get_bw` at 2 KiB in 1 KiB pieces: 0.92 of one call).
const WINDOW_CHUNK: usize = 2048;

/// Copy `len` bytes from `src` to `dst` (not overlapping) for the one-sided
/// paths (`MPI_Put`/`MPI_Get` of window memory): `memcpy`, in
/// [`WINDOW_CHUNK`] pieces between it and [`WINDOW_CHUNKED_MAX`]. Above some
/// size glibc's `memcpy` takes `rep movsb`, which here moves a cached 4 KiB
/// at 0.7 times the speed of its vector loop (np 2 `gb_get_bw` at 4 KiB:
/// 109 GB/s, 153 GB/s with `x86_rep_movsb_threshold` raised by
/// `GLIBC_TUNABLES`, 145 GB/s in pieces). The trade: on data from DRAM (a
/// 256 MiB window read once) `rep movsb` is ahead, so cold copies lose up
/// to 6% (8 KiB; 4 KiB even, 16 KiB 2%) against 9-32% won on cached data
/// from 4 to 16 KiB.
///
/// # Safety
///
/// `src` is valid for reads and `dst` for writes of `len` bytes, and the
/// ranges do not overlap (as for `ptr::copy_nonoverlapping`).
#[inline]
unsafe fn copy_window(src: *const u8, dst: *mut u8, len: usize) {
    if len <= WINDOW_CHUNK || len >= WINDOW_CHUNKED_MAX {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let mut at = 0;
    while at < len {
        let n = WINDOW_CHUNK.min(len - at);
        // SAFETY: `at + n <= len`: inside both ranges (the caller's
        // contract), which do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), n) };
        at += n;
    }
}

impl Mapping {
    /// Create `path` exclusively (`O_CREAT|O_EXCL`, mode 0600), size it to
    /// `len` zero bytes (no page is touched) and map it.
    pub(crate) fn create(path: &Path, len: usize) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let mapped = file
            .set_len(len as u64)
            .and_then(|()| Self::map(&file, len));
        if mapped.is_err() {
            // We created it: do not leave a half-made segment behind.
            let _ = std::fs::remove_file(path);
        }
        mapped
    }

    /// Open and map an existing segment file, whatever its size.
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "segment too large"))?;
        if len < layout::HEADER_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("segment is {len} bytes, smaller than its header"),
            ));
        }
        Self::map(&file, len)
    }

    fn map(file: &File, len: usize) -> io::Result<Self> {
        // SAFETY: a fresh mapping chosen by the kernel (null hint), of a file
        // descriptor we own for the duration of the call; the result is
        // checked for MAP_FAILED. The file may be closed afterwards: the
        // mapping keeps the pages alive.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(Self { base, len })
    }

    /// Fault the pages of bytes `off..off + len` of the mapping in,
    /// writable, now, as a first write to each would (`MADV_POPULATE_WRITE`,
    /// Linux 5.14 and later), without touching their contents: allocated in
    /// the file if they were not, and mapped in this process. Best effort:
    /// `false` where the kernel refuses (older kernels), and then the pages
    /// fault in on first use as before.
    pub(crate) fn prefault(&self, off: usize, len: usize) -> bool {
        let page = 4096;
        let start = off / page * page;
        let end = (off + len).min(self.len);
        if end <= start {
            return true;
        }
        // SAFETY: `start..end` lies inside the mapping (clamped to its
        // length; `start` rounded down to a page stays at or after its
        // page-aligned base). MADV_POPULATE_WRITE neither reads nor writes
        // the bytes: it only allocates and maps the pages, so it cannot race
        // with the other ranks' accesses to them.
        let r = unsafe {
            libc::madvise(
                self.base.as_ptr().add(start).cast(),
                end - start,
                libc::MADV_POPULATE_WRITE,
            )
        };
        r == 0
    }

    /// Mapped length.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    // The accessors below run several times per collective and per ring
    // doorbell: they are inlined, with the bounds checks kept and only the
    // panic (message formatting) moved out of line, so a check costs a
    // compare and a branch instead of a call.
    #[inline]
    fn check(&self, off: usize, size: usize) {
        if !(off.is_multiple_of(size) && off.checked_add(size).is_some_and(|e| e <= self.len)) {
            self.out_of_bounds(off, size);
        }
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn out_of_bounds(&self, off: usize, size: usize) -> ! {
        panic!(
            "segment access at {off} (+{size}) outside {} bytes",
            self.len
        )
    }

    /// The `u64` at byte offset `off`, which must be 8-aligned and inside.
    #[inline]
    pub(crate) fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8);
        // SAFETY: in bounds and 8-aligned (checked; the mapping is
        // page-aligned); AtomicU64 has the layout of u64 and any bit pattern
        // is valid; the memory lives as long as `self`; concurrent access from
        // other processes is atomic too.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU64>() }
    }

    /// The `u32` at byte offset `off`, which must be 4-aligned and inside.
    #[inline]
    pub(crate) fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4);
        // SAFETY: as for `u64_at`, with 4-byte size and alignment.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU32>() }
    }

    #[inline]
    fn check_range(&self, off: usize, len: usize) {
        if off.checked_add(len).is_none_or(|e| e > self.len) {
            self.range_out_of_bounds(off, len);
        }
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn range_out_of_bounds(&self, off: usize, len: usize) -> ! {
        panic!("segment bytes {off}..+{len} outside {} bytes", self.len)
    }

    /// Copy `src` to byte offset `off` (bounds checked).
    ///
    /// For bytes whose sharing is governed by a protocol outside this module
    /// (the collective area's data slots, see `coll.rs`). `&mut self` rules
    /// out any slice of this mapping still borrowed in this process; the
    /// protocol (Release/Acquire epoch counters) guarantees that no peer
    /// reads these bytes while we write them — the same caveat as for the
    /// rings: a peer that broke the protocol would race with us.
    #[inline]
    pub(crate) fn write_bytes(&mut self, off: usize, src: &[u8]) {
        self.check_range(off, src.len());
        // SAFETY: `[off, off + len)` is inside the mapping (checked); no
        // slice of it is borrowed in this process (`&mut self`) and, by the
        // caller's protocol, no peer accesses it concurrently; `src` is
        // caller memory, never the mapping (it cannot be borrowed from it
        // while we hold `&mut self`), so the ranges do not overlap and the
        // slice made of them is the only reference to these bytes.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(off), src.len()) };
        // Inline for the few bytes of a collective's header and tiny data.
        gmpi_btl::copy_bytes(dst, src);
    }

    /// The `len` bytes at byte offset `off` (bounds checked). The caller's
    /// protocol guarantees that no peer writes them while the slice is used
    /// (see [`Mapping::write_bytes`]); writes from this process need
    /// `&mut self`, so they cannot happen while the slice lives.
    #[inline]
    pub(crate) fn bytes(&self, off: usize, len: usize) -> &[u8] {
        self.check_range(off, len);
        // SAFETY: in bounds (checked); the memory lives as long as `self`;
        // u8 has no alignment or validity requirement; concurrent writes are
        // excluded as documented above.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off), len) }
    }

    /// Copy the `dst.len()` bytes at byte offset `off` into `dst` (bounds
    /// checked), with no claim on the mapping: for the data of a one-sided
    /// window (`win.rs`), which the window's owner and every origin reach
    /// concurrently. MPI makes the program keep conflicting accesses apart
    /// (epochs, locks, the accumulate mutex); a program that does not gets
    /// torn bytes, as with load/store on any shared memory.
    #[inline]
    pub(crate) fn read_shared(&self, off: usize, dst: &mut [u8]) {
        self.check_range(off, dst.len());
        // SAFETY: `[off, off + len)` is inside the mapping (checked) and `dst`
        // is caller memory outside it (a `&mut` borrow cannot alias the
        // mapping, whose bytes are never handed out as `&mut`); concurrent
        // writers are other processes or raw pointers of the window's owner,
        // kept apart by the MPI synchronisation described above.
        unsafe { copy_window(self.base.as_ptr().add(off), dst.as_mut_ptr(), dst.len()) }
    }

    /// Copy `src` to byte offset `off` (bounds checked), with no claim on
    /// the mapping: the write side of [`Mapping::read_shared`].
    #[inline]
    pub(crate) fn write_shared(&self, off: usize, src: &[u8]) {
        self.check_range(off, src.len());
        // SAFETY: in bounds (checked); `src` cannot overlap a range of the
        // mapping borrowed as `&mut` (none is ever handed out for window
        // bytes); other accesses to these bytes are kept apart by MPI's
        // synchronisation, as for `read_shared`.
        unsafe { copy_window(src.as_ptr(), self.base.as_ptr().add(off), src.len()) }
    }

    /// Run `f` on bytes `[off, off + len)` of the mapping, writable in
    /// place (bounds checked): a one-sided accumulate into window memory
    /// (`win.rs`), under that window's accumulate mutex. The same caveat
    /// as [`Mapping::read_shared`]: other processes and the window's owner
    /// may touch these bytes only as MPI allows (not concurrently with an
    /// accumulate, except through the mutex).
    #[inline]
    pub(crate) fn with_shared_mut<R>(
        &self,
        off: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> R {
        self.check_range(off, len);
        if len == 0 {
            return f(&mut []);
        }
        // SAFETY: in bounds (checked); window bytes are never lent out as
        // slices by this process except here, for the duration of `f`, under
        // the accumulate mutex that every accumulate of every process takes
        // first; u8 has no validity requirement.
        let s = unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(off), len) };
        f(s)
    }

    /// The address of byte `off` of the mapping in this process (what
    /// `MPI_Win_allocate` returns as the window's base).
    pub(crate) fn addr_of(&self, off: usize) -> u64 {
        self.ptr_at(off).as_ptr() as u64
    }

    fn ptr_at(&self, off: usize) -> NonNull<u8> {
        assert!(off <= self.len);
        // SAFETY: `off` is within (or one past) the mapping, so the offset
        // pointer stays within the same allocation.
        unsafe { self.base.add(off) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what mmap returned; nothing
        // borrowed from the mapping outlives it (the ring ends hold an `Arc`).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// The ring's shared state is corrupt (a counter or record header that the
/// protocol cannot produce). The ring must not be used again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Corrupt(pub(crate) String);

/// Shared pointers of one ring.
#[derive(Debug)]
struct RingMem {
    map: Arc<Mapping>,
    ctrl: usize,
    data: NonNull<u8>,
    cap: u64,
}

impl RingMem {
    fn new(map: &Arc<Mapping>, ctrl: usize, ring_bytes: usize) -> Self {
        let data_off = ctrl + RING_CTRL_BYTES;
        assert!(
            ring_bytes.is_multiple_of(8) && ring_bytes > 0 && data_off + ring_bytes <= map.len(),
            "ring at {ctrl} does not fit the segment"
        );
        Self {
            map: Arc::clone(map),
            ctrl,
            data: map.ptr_at(data_off),
            cap: ring_bytes as u64,
        }
    }
    fn head(&self) -> &AtomicU64 {
        self.map.u64_at(self.ctrl + RING_HEAD)
    }
    fn want(&self) -> &AtomicU32 {
        self.map.u32_at(self.ctrl + RING_WANT)
    }
    /// The header word at ring offset `off` (8-aligned, `< cap`).
    fn word(&self, off: u64) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off < self.cap);
        // SAFETY: `off + 8 <= cap` (off is 8-aligned and below cap, cap is a
        // multiple of 8) and the data area is 64-aligned, so the pointer is
        // in bounds and aligned; see `Mapping::u64_at`.
        unsafe { &*self.data.as_ptr().add(off as usize).cast::<AtomicU64>() }
    }
}

/// Producer end of one ring (this process sends on it).
#[derive(Debug)]
pub(crate) struct TxRing {
    mem: RingMem,
    /// Our own tail (we are the only writer).
    tail: u64,
    /// `tail % cap`, maintained incrementally (no division on the hot path).
    tail_off: u64,
    /// Last head we loaded; refreshed only when it looks full.
    head_cache: u64,
    /// Space we were refused last time (0: not blocked).
    blocked_need: u64,
}

// SAFETY: the raw data pointer points into the `Arc<Mapping>` held alongside;
// the producer state is owned by this value and moves with it.
unsafe impl Send for TxRing {}

/// Result of [`TxRing::push`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Push {
    /// Written and published.
    Done,
    /// No room; nothing written; the consumer was asked to ring our doorbell
    /// when it frees space.
    Full,
}

impl TxRing {
    /// Producer end of the ring whose control lines are at `ctrl`.
    pub(crate) fn new(map: &Arc<Mapping>, ctrl: usize, ring_bytes: usize) -> Self {
        let mem = RingMem::new(map, ctrl, ring_bytes);
        // A fresh ring: the producer starts where the consumer's head is.
        let tail = mem.head().load(Ordering::Acquire);
        let head_cache = mem.head().load(Ordering::Acquire);
        Self {
            tail_off: tail % mem.cap,
            mem,
            tail,
            head_cache,
            blocked_need: 0,
        }
    }

    /// Bytes needed to append a record of `rec` bytes at our tail
    /// (including a pad record if it would cross the end).
    fn need(&self, rec: u64) -> u64 {
        let to_end = self.mem.cap - self.tail_off;
        if rec <= to_end {
            rec
        } else {
            to_end + rec
        }
    }

    fn free(&self, head: u64) -> Result<u64, Corrupt> {
        let used = self.tail.wrapping_sub(head);
        if used > self.mem.cap || !used.is_multiple_of(8) {
            return Err(Corrupt(format!(
                "consumer head {head} inconsistent with tail {}",
                self.tail
            )));
        }
        Ok(self.mem.cap - used)
    }

    /// Gather `parts` (`len` bytes in all, `record_size(len) <= cap / 2`)
    /// into one record and publish it (a SeqCst store: the caller may load
    /// the receiver's sleeping flag with SeqCst right after, no fence).
    ///
    /// Publication is the Release store of the record's header word; the
    /// consumer polls the header at its read position, so an arriving message
    /// costs it one cache line, not two (no separate tail counter). Before
    /// publishing, we zero the word right after the record (the
    /// *terminator*): the consumer's next read position then holds either 0
    /// or a header published later, never stale bytes of an older lap that
    /// could pass for a header. The terminator needs 8 more free bytes.
    /// After publishing, the next line is made ours ahead of need
    /// ([`TxRing::zero_ahead`]), so the next record's terminator seldom
    /// waits for a line to move between the cores.
    pub(crate) fn push(&mut self, parts: &[&[u8]], len: usize) -> Result<Push, Corrupt> {
        self.push_kind(parts, len, false)
    }

    /// [`TxRing::push`] of a btl-to-btl record ([`Kind::Ctrl`]), which the
    /// consumer's btl handles itself instead of handing it to the pml.
    pub(crate) fn push_ctrl(&mut self, parts: &[&[u8]], len: usize) -> Result<Push, Corrupt> {
        self.push_kind(parts, len, true)
    }

    #[inline]
    fn push_kind(&mut self, parts: &[&[u8]], len: usize, ctrl: bool) -> Result<Push, Corrupt> {
        let rec = layout::record_size(len) as u64;
        assert!(
            rec <= self.mem.cap / 2,
            "record larger than the ring allows"
        );
        let need = self.need(rec) + layout::REC_HDR as u64;
        if self.free(self.head_cache)? < need {
            self.head_cache = self.mem.head().load(Ordering::Acquire);
            if self.free(self.head_cache)? < need {
                // Ask the consumer for a wake-up, then look once more: either
                // we see the head it stores before its SeqCst fence, or it
                // sees our flag after its fence (see `RxRing::drain`).
                self.mem.want().store(1, Ordering::Relaxed);
                fence(Ordering::SeqCst);
                self.head_cache = self.mem.head().load(Ordering::Acquire);
                if self.free(self.head_cache)? < need {
                    self.blocked_need = need;
                    return Ok(Push::Full);
                }
            }
        }
        if self.blocked_need != 0 {
            self.blocked_need = 0;
            self.mem.want().store(0, Ordering::Relaxed);
        }
        let cap = self.mem.cap;
        let mut off = self.tail_off;
        if need != rec + layout::REC_HDR as u64 {
            // Pad to the end: terminate offset 0 first, then publish the pad,
            // so a consumer following the pad finds 0 at offset 0 until the
            // record there is published.
            // SeqCst like the record's header below: a sleeper whose read
            // position is this pad must see it once the record is published.
            self.mem.word(0).store(0, Ordering::Relaxed);
            self.mem
                .word(off)
                .store(layout::encode(Kind::Pad), Ordering::SeqCst);
            self.tail += cap - off;
            off = 0;
        }
        let next = if off + rec == cap { 0 } else { off + rec };
        let mut dst = off as usize + layout::REC_HDR;
        for p in parts {
            // SAFETY: `[off, off + rec)` lies inside the ring (`need` ensured
            // it does not cross the end) and inside the free region
            // `[tail, head + cap)` (checked against a head loaded with
            // Acquire), which the consumer does not read until we publish;
            // `dst + p.len() <= off + 8 + len <= off + rec`. `p` is our
            // caller's memory, never the ring, so the ranges do not overlap,
            // and no other reference to these ring bytes exists meanwhile.
            let to =
                unsafe { std::slice::from_raw_parts_mut(self.mem.data.as_ptr().add(dst), p.len()) };
            gmpi_btl::copy_bytes(to, p);
            dst += p.len();
        }
        // The terminator at `next` is in the free region too (`need`
        // counted its 8 bytes).
        self.mem.word(next).store(0, Ordering::Relaxed);
        let kind = if ctrl {
            Kind::Ctrl(len as u32)
        } else {
            Kind::Data(len as u32)
        };
        // SeqCst (one locked exchange on x86, cheaper than a Release store
        // and a full fence): it is both the publication and the store half
        // of the doorbell handshake, so the caller's following SeqCst load
        // of the receiver's sleeping flag needs no fence (see `Btl::wait`).
        self.mem
            .word(off)
            .store(layout::encode(kind), Ordering::SeqCst);
        self.tail += rec;
        self.tail_off = next;
        self.zero_ahead();
        Ok(Push::Done)
    }

    /// Write 0 to the first word of the cache line after the one our next
    /// record starts in, if that word is free space, so that line is in
    /// this core's cache, writable, before a record needs it.
    ///
    /// Called right after a publication, off the message's critical path.
    /// Without it, a record ending at a line's end wrote its terminator into
    /// a line this core did not own, and the publishing exchange waited for
    /// two ownership transfers in turn instead of one: measured on the
    /// 2-core VM, such pushes took about twice as long (~270 vs ~130 ns),
    /// every other message at 8 bytes. The consumer never reads past the
    /// terminator of the last published record, and the word lies inside
    /// `[tail, head + cap)` (checked with the cached head, which only lags),
    /// so the store cannot touch a record it has not consumed, and a 0 is
    /// what the word would hold as a terminator anyway.
    fn zero_ahead(&mut self) {
        let cap = self.mem.cap;
        let ahead = (self.tail_off | 63) + 1;
        let (ahead, dist) = if ahead >= cap {
            (0, cap - self.tail_off)
        } else {
            (ahead, ahead - self.tail_off)
        };
        // The cached head passed `free`'s check in this push; a wrapped
        // difference (never expected) only skips the store.
        let used = self.tail.wrapping_sub(self.head_cache);
        if cap.checked_sub(used).is_some_and(|f| f >= dist + 8) {
            self.mem.word(ahead).store(0, Ordering::Relaxed);
        }
    }

    /// After [`Push::Full`]: (re-)ask the consumer to ring our doorbell when
    /// it frees space. The caller issues a SeqCst fence before its next look
    /// at head ([`TxRing::unblocked`]), as in [`TxRing::push`].
    pub(crate) fn arm(&self) {
        if self.blocked_need != 0 {
            self.mem.want().store(1, Ordering::Relaxed);
        }
    }

    /// After [`Push::Full`]: whether the consumer has since freed enough
    /// space for the refused record (one Acquire load). `false` when not blocked.
    pub(crate) fn unblocked(&mut self) -> bool {
        if self.blocked_need == 0 {
            return false;
        }
        self.head_cache = self.mem.head().load(Ordering::Acquire);
        self.free(self.head_cache)
            .is_ok_and(|free| free >= self.blocked_need)
    }
}

/// Consumer end of one ring (this process receives on it).
#[derive(Debug)]
pub(crate) struct RxRing {
    mem: RingMem,
    /// Our own head (we are the only writer).
    head: u64,
    /// `head % cap`, maintained incrementally.
    head_off: u64,
    /// Largest payload a record may announce.
    max_len: u64,
}

// SAFETY: as for `TxRing`.
unsafe impl Send for RxRing {}

/// Result of [`RxRing::drain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Drained {
    /// Fragments handed to the callback.
    pub(crate) frags: usize,
    /// The producer had asked to be woken when space frees up.
    pub(crate) wake_producer: bool,
}

impl RxRing {
    /// Consumer end of the ring whose control lines are at `ctrl`.
    pub(crate) fn new(map: &Arc<Mapping>, ctrl: usize, ring_bytes: usize, max_len: usize) -> Self {
        let mem = RingMem::new(map, ctrl, ring_bytes);
        let head = mem.head().load(Ordering::Relaxed);
        Self {
            head_off: head % mem.cap,
            mem,
            head,
            max_len: max_len as u64,
        }
    }

    /// Whether a record may be waiting (one Acquire load of the header word
    /// at our read position; the empty-poll path).
    #[inline]
    pub(crate) fn has_data(&self) -> bool {
        self.mem.word(self.head_off).load(Ordering::Acquire) != 0
    }

    /// Hand up to `budget` records to `f` (each slice points into the ring
    /// and is valid during the call only; the flag says a [`Kind::Ctrl`]
    /// record), then release their space with one SeqCst store of head.
    /// A first record that ends on a cache-line boundary is handed up alone
    /// (see the loop), so a lone message never waits for the next line.
    ///
    /// A record is there when the header word at our read position is not 0
    /// (loaded with Acquire, pairing with the producer's Release store); the
    /// producer zeroed that word before publishing the record before it
    /// (see [`TxRing::push`]), so what we see is 0 or a real header.
    #[inline]
    pub(crate) fn drain(
        &mut self,
        budget: usize,
        f: &mut dyn FnMut(bool, &[u8]),
    ) -> (Drained, Result<(), Corrupt>) {
        let cap = self.mem.cap;
        let mut out = Drained::default();
        let mut pos = self.head;
        let mut off = self.head_off;
        let mut res = Ok(());
        while out.frags < budget {
            let word = self.mem.word(off).load(Ordering::Acquire);
            if word == 0 {
                break;
            }
            let step = match layout::decode(word) {
                // A pad at offset 0 cannot happen: every record fits there.
                Some(Kind::Pad) if off != 0 => cap - off,
                Some(k @ (Kind::Data(len) | Kind::Ctrl(len)))
                    if u64::from(len) <= self.max_len
                        && layout::record_size(len as usize) as u64 <= (cap - off).min(cap / 2) =>
                {
                    // SAFETY: the record `[off, off + 8 + len)` was checked to
                    // lie inside the ring; its header was loaded with Acquire
                    // after the producer's Release store, so its bytes are
                    // visible; the producer does not write there again until
                    // we advance head, which happens after `f` returns.
                    let data = unsafe {
                        std::slice::from_raw_parts(
                            self.mem.data.as_ptr().add(off as usize + layout::REC_HDR),
                            len as usize,
                        )
                    };
                    f(matches!(k, Kind::Ctrl(_)), data);
                    out.frags += 1;
                    layout::record_size(len as usize) as u64
                }
                _ => {
                    res = Err(Corrupt(format!(
                        "bad record header {word:#018x} at ring offset {off}"
                    )));
                    break;
                }
            };
            pos += step;
            off = if off + step == cap { 0 } else { off + step };
            // A lone record that ends on a line boundary: the next header
            // word is in a line the producer wrote last (its terminator),
            // so looking at it costs a transfer between the cores, and the
            // head store below would wait for it. A message that comes alone
            // (latency) is handed up without that wait; the next poll looks
            // there. A stream (more than one record per drain) goes on.
            if out.frags == 1 && (off as usize).is_multiple_of(layout::LINE) {
                break;
            }
        }
        if pos != self.head {
            self.head = pos;
            self.head_off = off;
            // SeqCst store, then SeqCst load: pairs with the fence in
            // `TxRing::push` (want store, fence, head load): either the
            // producer sees our new head, or we see its want-space flag.
            // One locked exchange on x86 instead of a store and a fence.
            self.mem.head().store(pos, Ordering::SeqCst);
            if self.mem.want().load(Ordering::SeqCst) != 0 {
                out.wake_producer = self.mem.want().swap(0, Ordering::Relaxed) != 0;
            }
        }
        (out, res)
    }
}

/// Sleep on the shared futex word `word` while it holds `expected`, for at
/// most `timeout`. Returns on wake-up, timeout, signal or value mismatch.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call;
    // FUTEX_WAIT (shared: the word lives in a MAP_SHARED mapping used by
    // several processes) only reads it; `ts` outlives the call; the unused
    // arguments are ignored by FUTEX_WAIT. Errors (EAGAIN, ETIMEDOUT, EINTR)
    // all mean "return to the caller", who re-checks its condition.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wake the waiters of the shared futex word `word`.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE does not access
    // memory through the pointer beyond using it as a key.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// Local memory that a cross-memory copy may write: a range of this process
/// lent to the btl for writing, either borrowed for the call ([`Dst::lent`] of
/// a `&mut [u8]`) or lent by the [`gmpi_btl::Btl::get`] contract until the get
/// completes ([`Dst::lend`]: for a `Queued` get, the caller keeps the memory
/// valid and does not touch it until `GetComplete`/`GetFailed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dst {
    addr: u64,
    len: usize,
}

impl Dst {
    /// The destination of a get, kept past the call that lent it (see the
    /// type's documentation for the contract that makes later writes sound).
    pub(crate) fn lent(dst: &mut [u8]) -> Self {
        Self {
            addr: dst.as_mut_ptr() as u64,
            len: dst.len(),
        }
    }

    /// The destination of a [`gmpi_btl::Btl::get`], lent for as long as the
    /// get runs: the only way a [`LocalMem`] becomes memory that
    /// [`vm_read`] (and a helping peer's `process_vm_writev`) may write.
    ///
    /// # Safety
    /// `mem` is lent as `Btl::get`'s `# Safety` requires: valid for writes of
    /// `mem.len` bytes, read or written by nothing else until the get
    /// completes (its `Done` or error, or for a queued get its
    /// `GetComplete`/`GetFailed`), and kept valid until then.
    pub(crate) unsafe fn lend(mem: LocalMem) -> Self {
        Self {
            addr: mem.addr,
            len: mem.len,
        }
    }

    /// Bytes `[off, off + len)` of this range (checked).
    pub(crate) fn sub(&self, off: usize, len: usize) -> Self {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len),
            "sub-range {off}+{len} outside {} bytes",
            self.len
        );
        Self {
            addr: self.addr + off as u64,
            len,
        }
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Start address (to tell a peer where to write).
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }
}

fn check_remote(remote: u64) -> io::Result<usize> {
    usize::try_from(remote).map_err(|_| io::Error::from_raw_os_error(libc::EFAULT))
}

/// One `process_vm_readv` of `dst.len()` bytes at `remote` in process `pid`
/// into our memory `dst`. Returns the number of bytes read (possibly fewer
/// than asked).
pub(crate) fn vm_read(pid: i32, remote: u64, dst: Dst) -> io::Result<usize> {
    let remote = check_remote(remote)?;
    let local = libc::iovec {
        iov_base: dst.addr as *mut libc::c_void,
        iov_len: dst.len,
    };
    let remote = libc::iovec {
        iov_base: remote as *mut libc::c_void,
        iov_len: dst.len,
    };
    // SAFETY: the local iovec describes `dst`, memory of this process lent
    // to us for writing (borrowed mutably for the call, or lent until the get
    // completes by `Btl::get`'s contract: see `Dst::lend`), so the kernel's
    // writes alias no live reference; the kernel checks that it is mapped and writable (EFAULT
    // otherwise). The remote iovec is only interpreted by the kernel in the
    // other process's address space (faults there are reported as EFAULT).
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One `process_vm_writev` of the `len` bytes of our memory at `local` to
/// `remote` in process `pid`. Returns the number of bytes written (possibly
/// fewer than asked).
///
/// Our memory is only *read*, by the kernel, which reports an unmapped
/// `local` as EFAULT (the worst a wrong `local` does is copy our bytes to the
/// peer, which may read our memory by CMA anyway). The written range belongs
/// to process `pid`: a peer's receive buffer, lent to its btl by the get
/// contract. `pid` is our own only where ranks are threads of one process
/// (tests) or in a self test writing a buffer the caller owns.
pub(crate) fn vm_write(pid: i32, local: u64, remote: u64, len: usize) -> io::Result<usize> {
    let remote = check_remote(remote)?;
    let local = check_remote(local)?;
    let local = libc::iovec {
        iov_base: local as *mut libc::c_void,
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: remote as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: the kernel only reads the local range (validating it: EFAULT
    // if unmapped) and writes the remote one in process `pid`'s address space
    // (validating it too), a range lent for writing as documented above.
    let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
