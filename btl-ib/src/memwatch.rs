//! The memory watch of the registration cache ([`crate::rcache`]): a
//! `userfaultfd` that reports every unmap, `mremap` and
//! `madvise(MADV_DONTNEED)` of the ranges the cache keeps registered.
//!
//! Why `userfaultfd`: a registration cache must hear of *every* release of
//! memory it keeps, glibc's own included (`free` calls its internal
//! `munmap` and `madvise`, which no symbol interposition reaches; UCX
//! patches the code of those functions instead). The kernel's
//! `UFFD_EVENT_UNMAP`, `UFFD_EVENT_REMOVE` and `UFFD_EVENT_REMAP` see them
//! all, whoever calls, and the thread that unmaps waits until the event is
//! read. libfabric's cache monitor works the same way.
//!
//! How it holds together:
//! - One helper thread (`gmpi-memwatch`) sleeps in `poll` on the
//!   userfaultfd and a stop eventfd. When events come it takes the lock,
//!   reads them all, notes their ranges, and lets go. The unmapping thread
//!   is released by the read, which happens under the lock, so by the time
//!   `munmap` returns, the range is in the list: the cache's next request
//!   ([`MemWatch::take_gone`], under the same lock) sees it. No stale entry
//!   can serve a request made after the memory went.
//! - Neither side allocates or frees memory while it holds the lock (the
//!   list has a fixed capacity, and `take_gone` swaps it out): a `free`
//!   under the lock could itself raise an event on watched memory and wait
//!   for a reader that waits for the lock. A full list marks everything
//!   gone instead of growing.
//! - `MADV_DONTNEED` leaves the range mapped but empty; the thread
//!   unregisters it at once, so that touching it again is an ordinary page
//!   fault. A fault that comes in between (the range is registered for
//!   missing-page faults, the only mode that carries these events) is
//!   answered the same way: the page is unregistered, which wakes the
//!   faulting thread.
//! - Without privilege (`vm.unprivileged_userfaultfd` = 0 and no
//!   `CAP_SYS_PTRACE`) the userfaultfd is opened for user-mode faults only
//!   (Linux 5.11 and later). Then a system call that writes into an emptied
//!   watched page in the instant before the thread unregisters it fails
//!   with `EFAULT`; set `GMPI_IB_RCACHE=off` if a program does that.
//! - No userfaultfd (an older kernel, a seccomp filter, a file-backed
//!   mapping the kernel will not watch): that memory is not cached.
//!
//! This file and `verbs.rs` hold the crate's system calls; each `unsafe`
//! block says why it is sound.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use linux_raw_sys::general as uffd;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::rcache::{MemWatch, PAGE};

/// Ranges the list holds before it marks everything gone instead.
const GONE_CAP: usize = 1024;
/// Events read at once.
const READ_BATCH: usize = 64;

/// What both threads share.
struct Shared {
    fd: OwnedFd,
    state: Mutex<State>,
    /// Something is in `state` (a look without the lock).
    pending: Arc<AtomicBool>,
}

#[derive(Debug)]
struct State {
    gone: Vec<(u64, u64)>,
    lost: bool,
}

impl Shared {
    /// `UFFDIO_UNREGISTER` of `[start, end)` (errors ignored: the range may
    /// be gone already).
    fn unregister(&self, start: u64, end: u64) {
        let mut r = uffd::uffdio_range {
            start,
            len: end - start,
        };
        // SAFETY: UFFDIO_UNREGISTER reads one uffdio_range, which `r` is;
        // it changes no memory of the process, only which ranges are
        // watched.
        unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                linux_raw_sys::ioctl::UFFDIO_UNREGISTER as _,
                &mut r,
            )
        };
    }
}

/// A userfaultfd and the thread that reads it.
pub struct Uffd {
    shared: Arc<Shared>,
    stop: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
    user_mode_only: bool,
}

impl std::fmt::Debug for Uffd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uffd")
            .field("fd", &self.shared.fd)
            .field("user_mode_only", &self.user_mode_only)
            .finish_non_exhaustive()
    }
}

/// `userfaultfd(flags)`.
fn open_fd(flags: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: the system call takes flags only and returns a new
    // descriptor, which the OwnedFd then owns alone.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else holds it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

impl Uffd {
    /// Open the userfaultfd, ask for the unmap, remove and remap events,
    /// and start the thread that reads them.
    pub fn open() -> Result<Self, String> {
        let base = libc::O_CLOEXEC | libc::O_NONBLOCK;
        let (fd, user_mode_only) = match open_fd(base) {
            Ok(fd) => (fd, false),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => (
                open_fd(base | uffd::UFFD_USER_MODE_ONLY as i32)
                    .map_err(|e| format!("userfaultfd: {e}"))?,
                true,
            ),
            Err(e) => return Err(format!("userfaultfd: {e}")),
        };
        let want = (uffd::UFFD_FEATURE_EVENT_UNMAP
            | uffd::UFFD_FEATURE_EVENT_REMOVE
            | uffd::UFFD_FEATURE_EVENT_REMAP) as u64;
        let mut api = uffd::uffdio_api {
            api: uffd::UFFD_API as u64,
            features: want,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API reads and writes one uffdio_api, which `api` is.
        let rc = unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                linux_raw_sys::ioctl::UFFDIO_API as _,
                &mut api,
            )
        };
        if rc != 0 {
            return Err(format!(
                "userfaultfd: UFFDIO_API: {}",
                std::io::Error::last_os_error()
            ));
        }
        if api.features & want != want {
            return Err(format!(
                "userfaultfd: this kernel lacks the unmap/remove/remap events (features {:#x})",
                api.features
            ));
        }
        let shared = Arc::new(Shared {
            fd,
            state: Mutex::new(State {
                gone: Vec::with_capacity(GONE_CAP),
                lost: false,
            }),
            pending: Arc::new(AtomicBool::new(false)),
        });
        let stop = Arc::new(
            EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .map_err(|e| format!("eventfd: {e}"))?,
        );
        let (s, st) = (shared.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("gmpi-memwatch".into())
            .spawn(move || read_events(&s, &st))
            .map_err(|e| format!("the memory-watch thread: {e}"))?;
        Ok(Self {
            shared,
            stop,
            thread: Some(thread),
            user_mode_only,
        })
    }

    /// How it watches, for the log.
    pub fn describe(&self) -> &'static str {
        if self.user_mode_only {
            "userfaultfd (user-mode faults only)"
        } else {
            "userfaultfd"
        }
    }
}

/// The helper thread: read events until told to stop.
fn read_events(s: &Shared, stop: &EventFd) {
    // SAFETY: uffd_msg is plain integers; all zeroes is a valid value.
    let mut msgs: Vec<uffd::uffd_msg> = vec![unsafe { std::mem::zeroed() }; READ_BATCH];
    loop {
        let (ready, stopped) = {
            let mut fds = [
                PollFd::new(s.fd.as_fd(), PollFlags::POLLIN),
                PollFd::new(stop.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!(target: "btl", "ib: the memory watch stopped (poll: {e}); registrations are no longer kept");
                    s.state.lock().expect("memwatch").lost = true;
                    s.pending.store(true, Ordering::Release);
                    return;
                }
            }
            let r = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
            (r(&fds[0]), r(&fds[1]))
        };
        if stopped {
            return;
        }
        if !ready {
            continue;
        }
        let mut st = s.state.lock().expect("memwatch");
        // Before the read that lets the unmapping thread go on, so that
        // once its call returns, `pending` is set too.
        s.pending.store(true, Ordering::Release);
        loop {
            let bytes = std::mem::size_of_val(msgs.as_slice());
            // SAFETY: `msgs` is `bytes` bytes of writable memory, and any
            // bytes are a valid uffd_msg.
            let n = unsafe { libc::read(s.fd.as_raw_fd(), msgs.as_mut_ptr().cast(), bytes) };
            if n <= 0 {
                break;
            }
            let n = n as usize / std::mem::size_of::<uffd::uffd_msg>();
            for m in &msgs[..n] {
                note(s, &mut st, m);
            }
        }
    }
}

/// The three 64-bit words of an event's argument.
fn words(m: &uffd::uffd_msg) -> [u64; 3] {
    // SAFETY: every member of the argument union is plain integers, so
    // its bytes read as the `reserved` member's three words whichever
    // member the kernel filled; the message is packed, so the member is
    // copied out, not referenced.
    let r = unsafe { m.arg.reserved };
    [r.reserved1, r.reserved2, r.reserved3]
}

/// Note one event (under the lock; allocates nothing). The argument's
/// words, by event: unmap and remove `[start, end)`; remap `from, to,
/// len`; page fault `flags, address`; fork the child's descriptor (low 32
/// bits of the first word).
fn note(s: &Shared, st: &mut State, m: &uffd::uffd_msg) {
    let mut push = |a: u64, b: u64| {
        if st.gone.len() < st.gone.capacity() {
            st.gone.push((a, b));
        } else {
            st.lost = true;
        }
    };
    let w = words(m);
    match m.event as u32 {
        uffd::UFFD_EVENT_UNMAP => push(w[0], w[1]),
        uffd::UFFD_EVENT_REMOVE => {
            s.unregister(w[0], w[1]);
            push(w[0], w[1]);
        }
        uffd::UFFD_EVENT_REMAP => {
            // The moved range keeps its registration: drop it there.
            s.unregister(w[1], w[1] + w[2]);
            push(w[0], w[0] + w[2]);
        }
        uffd::UFFD_EVENT_PAGEFAULT => {
            let a = w[1] & !(PAGE - 1);
            // Unregistering wakes the faulting thread; its fault is then
            // an ordinary one.
            s.unregister(a, a + PAGE);
            push(a, a + PAGE);
        }
        uffd::UFFD_EVENT_FORK => {
            // Not asked for; close the child's descriptor if one comes.
            // SAFETY: the kernel made this descriptor for us alone.
            drop(unsafe { OwnedFd::from_raw_fd(w[0] as u32 as i32) });
        }
        _ => {}
    }
}

impl MemWatch for Uffd {
    fn watch(&mut self, start: u64, end: u64) -> bool {
        let mut r = uffd::uffdio_register {
            range: uffd::uffdio_range {
                start,
                len: end - start,
            },
            mode: uffd::UFFDIO_REGISTER_MODE_MISSING as u64,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes one uffdio_register,
        // which `r` is; it changes no memory of the process (the range's
        // pages are registered with the NIC, so present: no fault of them
        // reaches the thread until they are emptied, which it handles).
        let rc = unsafe {
            libc::ioctl(
                self.shared.fd.as_raw_fd(),
                linux_raw_sys::ioctl::UFFDIO_REGISTER as _,
                &mut r,
            )
        };
        rc == 0
    }

    fn unwatch(&mut self, start: u64, end: u64) {
        self.shared.unregister(start, end);
    }

    fn take_gone(&mut self, out: &mut Vec<(u64, u64)>) -> bool {
        out.clear();
        // Room first, outside the lock (see the module header).
        out.reserve(GONE_CAP);
        let mut st = self.shared.state.lock().expect("memwatch");
        self.shared.pending.store(false, Ordering::Relaxed);
        std::mem::swap(&mut st.gone, out);
        std::mem::take(&mut st.lost)
    }

    fn pending_flag(&self) -> Option<Arc<AtomicBool>> {
        Some(self.shared.pending.clone())
    }
}

impl Drop for Uffd {
    fn drop(&mut self) {
        let _ = self.stop.write(1);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Closing the descriptor (with the last Arc) unregisters every
        // range and wakes any thread still waiting on an event.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::mman::{
        madvise, mmap_anonymous, mremap, munmap, MRemapFlags, MapFlags, MmapAdvise, ProtFlags,
    };
    use std::num::NonZeroUsize;
    use std::ptr::NonNull;

    /// `pages` fresh anonymous pages, never touched.
    fn map_untouched(pages: usize) -> NonNull<libc::c_void> {
        // SAFETY: a fresh private anonymous mapping aliases nothing.
        unsafe {
            mmap_anonymous(
                None,
                NonZeroUsize::new(pages * PAGE as usize).unwrap(),
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        }
        .expect("mmap")
    }

    /// `pages` fresh anonymous pages, each touched (as registration does).
    fn map(pages: usize) -> NonNull<libc::c_void> {
        let p = map_untouched(pages);
        // SAFETY: the mapping is ours and writable.
        unsafe { std::ptr::write_bytes(p.as_ptr().cast::<u8>(), 1, pages * PAGE as usize) };
        p
    }

    fn gone(w: &mut Uffd) -> (Vec<(u64, u64)>, bool) {
        let mut v = Vec::new();
        let lost = w.take_gone(&mut v);
        (v, lost)
    }

    #[test]
    fn every_way_memory_leaves_is_reported_before_the_call_returns() {
        let Ok(mut w) = Uffd::open() else {
            eprintln!("no userfaultfd here: skipped");
            return;
        };
        let p = map(4);
        let a = p.as_ptr() as u64;
        assert!(w.watch(a, a + 4 * PAGE));
        assert_eq!(gone(&mut w), (vec![], false));
        // MADV_DONTNEED of one page: reported, and the page is usable
        // again at once (no fault left waiting on the watch).
        // SAFETY: the page is ours; its contents may go.
        unsafe {
            madvise(
                NonNull::new((a + PAGE) as *mut _).unwrap(),
                PAGE as usize,
                MmapAdvise::MADV_DONTNEED,
            )
        }
        .unwrap();
        assert_eq!(gone(&mut w), (vec![(a + PAGE, a + 2 * PAGE)], false));
        // SAFETY: as above; the page reads as zero now.
        assert_eq!(unsafe { *((a + PAGE) as *const u8) }, 0);
        // mremap moves the last page away: the old range is reported.
        // SAFETY: the page is ours; nothing refers to it.
        let q = unsafe {
            mremap(
                NonNull::new((a + 3 * PAGE) as *mut _).unwrap(),
                PAGE as usize,
                PAGE as usize,
                MRemapFlags::MREMAP_MAYMOVE | MRemapFlags::MREMAP_FIXED,
                Some(NonNull::new((a + 64 * PAGE) as *mut _).unwrap()),
            )
        };
        if let Ok(q) = q {
            // (Some kernels report the move and the unmap of the old range.)
            let mut v = gone(&mut w).0;
            v.dedup();
            assert_eq!(v, vec![(a + 3 * PAGE, a + 4 * PAGE)]);
            // SAFETY: the moved page is ours.
            unsafe { munmap(q, PAGE as usize) }.unwrap();
        }
        // munmap of the rest.
        // SAFETY: the range is ours and nothing refers to it.
        unsafe { munmap(p, 3 * PAGE as usize) }.unwrap();
        let pending = w.pending_flag().unwrap();
        assert!(pending.load(Ordering::Acquire));
        assert_eq!(gone(&mut w).0, vec![(a, a + 3 * PAGE)]);
        assert!(!pending.load(Ordering::Acquire));
        // Unwatched memory raises nothing.
        let p = map(2);
        // SAFETY: as above.
        unsafe { munmap(p, 2 * PAGE as usize) }.unwrap();
        assert_eq!(gone(&mut w), (vec![], false));
    }

    #[test]
    fn a_file_mapping_is_not_watched_and_unwatch_stops_the_reports() {
        let Ok(mut w) = Uffd::open() else {
            eprintln!("no userfaultfd here: skipped");
            return;
        };
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        // SAFETY: a private read-only mapping of a file we opened.
        let p = unsafe {
            nix::sys::mman::mmap(
                None,
                NonZeroUsize::new(PAGE as usize).unwrap(),
                ProtFlags::PROT_READ,
                MapFlags::MAP_PRIVATE,
                &f,
                0,
            )
        }
        .unwrap();
        assert!(!w.watch(p.as_ptr() as u64, p.as_ptr() as u64 + PAGE));
        // A fault on an empty watched page (here: never touched) is
        // answered: the page is unwatched and the access goes on.
        let e = map_untouched(1);
        let ea = e.as_ptr() as u64;
        assert!(w.watch(ea, ea + PAGE));
        // SAFETY: the page is ours.
        assert_eq!(unsafe { std::ptr::read_volatile(ea as *const u8) }, 0);
        assert_eq!(gone(&mut w), (vec![(ea, ea + PAGE)], false));
        // SAFETY: ours, unused.
        unsafe { munmap(e, PAGE as usize) }.unwrap();
        assert_eq!(gone(&mut w), (vec![], false));
        // SAFETY: ours, unused.
        unsafe { munmap(p, PAGE as usize) }.unwrap();
        let p = map(2);
        let a = p.as_ptr() as u64;
        assert!(w.watch(a, a + 2 * PAGE));
        w.unwatch(a, a + 2 * PAGE);
        // SAFETY: ours, unused.
        unsafe { munmap(p, 2 * PAGE as usize) }.unwrap();
        assert_eq!(gone(&mut w), (vec![], false));
    }

    #[test]
    fn another_thread_that_unmaps_watched_memory_is_answered_by_the_helper() {
        let Ok(mut w) = Uffd::open() else {
            eprintln!("no userfaultfd here: skipped");
            return;
        };
        let addrs: Vec<u64> = (0..50).map(|_| map(1).as_ptr() as u64).collect();
        for &a in &addrs {
            assert!(w.watch(a, a + PAGE));
        }
        // This thread does not read; the helper does, or munmap would
        // wait for ever.
        let h = std::thread::spawn(move || {
            for a in addrs {
                // SAFETY: the pages are ours and nothing refers to them.
                unsafe { munmap(NonNull::new(a as *mut _).unwrap(), PAGE as usize) }.unwrap();
            }
        });
        h.join().unwrap();
        let (v, lost) = gone(&mut w);
        assert!(!lost);
        assert_eq!(v.len(), 50);
    }
}
