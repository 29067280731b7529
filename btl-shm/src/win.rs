//! The shared area of a one-sided (RMA) window whose ranks share a node:
//! the words every origin and the target synchronise on, and, for windows
//! whose memory gmpi allocates (`MPI_Win_allocate`, `MPI_Win_allocate_shared`),
//! the window memory itself.
//!
//! Layout (every offset 8-aligned; one 64-byte line per rank):
//! - header line: magic, rank count, total length, state;
//! - one control line per rank `r`: the lock word of `r`'s window (bit 63:
//!   held exclusively; the low bits count shared holders), the accumulate
//!   mutex of `r`'s memory (0 free, 1 held), and where `r`'s data lies;
//! - `posts[t][o]`: how many exposure epochs target `t` opened to origin `o`
//!   (`MPI_Win_post`); `completes[t][o]`: how many access epochs origin `o`
//!   closed towards `t` (`MPI_Win_complete`). Each side counts what it has
//!   consumed, so the counters never need resetting;
//! - the data regions, one per rank, back to back (`contiguous`: rank
//!   `r + 1`'s memory starts where rank `r`'s ends, as
//!   `MPI_Win_allocate_shared` promises by default) or each 64-aligned.
//!
//! Bootstrap is rank 0's `O_CREAT|O_EXCL` file of mode 0600, attached by
//! the others between two fences and unlinked after the second, so nothing
//! is left in `/dev/shm` whatever happens later. Whether every rank attached
//! is for the caller to agree on (one reduction), since a rank that failed
//! here cannot tell the others.
//!
//! [`cma_read`]/[`cma_write`] reach the memory of a window gmpi did not
//! allocate (`MPI_Win_create`, dynamic windows) in its owner's process.

#![forbid(unsafe_code)]

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use gmpi_btl::BtlError;

use crate::segment::{Dst, Mapping};

const LINE: usize = 64;
const MAGIC: u64 = u64::from_le_bytes(*b"gmpi-win");
const HDR_MAGIC: usize = 0;
const HDR_N: usize = 8;
const HDR_TOTAL: usize = 16;
const HDR_STATE: usize = 24;
const STATE_READY: u32 = 1;
const STATE_POISONED: u32 = 2;
const CTRL_LOCK: usize = 0;
const CTRL_ACC: usize = 8;
const CTRL_PRESENT: usize = 16;
/// Largest window area rank count (the post/complete matrices grow as n²).
pub const MAX_RANKS: usize = 4096;

/// Bit of the lock word that marks an exclusive holder.
pub const LOCK_EXCLUSIVE: u64 = 1 << 63;

fn os(msg: impl Into<String>) -> BtlError {
    BtlError::Os(msg.into())
}

/// Where everything lies, computed alike on every rank from `(n, sizes)`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layout {
    n: usize,
    posts: usize,
    completes: usize,
    data: Vec<(usize, usize)>,
    total: usize,
}

impl Layout {
    fn new(sizes: &[u64], contiguous: bool) -> Result<Layout, String> {
        let n = sizes.len();
        if n == 0 || n > MAX_RANKS {
            return Err(format!("{n} ranks (1 to {MAX_RANKS} allowed)"));
        }
        let posts = LINE * (1 + n);
        let completes = posts + 8 * n * n;
        let page = 4096;
        let mut at = (completes + 8 * n * n).div_ceil(page) * page;
        let mut data = Vec::with_capacity(n);
        for (r, &len) in sizes.iter().enumerate() {
            let len = usize::try_from(len).map_err(|_| format!("rank {r}'s size overflows"))?;
            if !contiguous {
                at = at.div_ceil(LINE) * LINE;
            }
            data.push((at, len));
            at = at
                .checked_add(len)
                .filter(|&e| e <= isize::MAX as usize / 2)
                .ok_or_else(|| {
                    "the window sizes add up to more than memory can hold".to_string()
                })?;
        }
        Ok(Layout {
            n,
            posts,
            completes,
            data,
            total: at.max(LINE),
        })
    }

    fn ctrl(&self, r: usize) -> usize {
        LINE * (1 + r)
    }
}

/// The mapped area of one window (see the module documentation).
#[derive(Debug)]
pub struct WinArea {
    map: Mapping,
    layout: Layout,
}

impl WinArea {
    /// Set up the area of a window over `sizes.len()` ranks (this one is
    /// `rank`), with `sizes[r]` bytes of memory for rank `r` (0 where the
    /// memory is the user's). `fence` is a barrier over those ranks; it is
    /// called exactly twice on every rank, whatever fails.
    pub fn bootstrap(
        path: &str,
        rank: usize,
        sizes: &[u64],
        contiguous: bool,
        fence: &mut dyn FnMut() -> Result<(), String>,
    ) -> Result<WinArea, BtlError> {
        let path = Path::new(path);
        let layout = Layout::new(sizes, contiguous);
        let mut created = false;
        let mut map: Result<Option<Mapping>, BtlError> = match &layout {
            Err(e) => Err(os(format!("window area: {e}"))),
            Ok(l) if rank == 0 => match Mapping::create(path, l.total) {
                Ok(m) => {
                    m.u64_at(HDR_N).store(l.n as u64, Ordering::Relaxed);
                    m.u64_at(HDR_TOTAL).store(l.total as u64, Ordering::Relaxed);
                    m.u32_at(HDR_STATE).store(STATE_READY, Ordering::Release);
                    m.u64_at(HDR_MAGIC).store(MAGIC, Ordering::Release);
                    created = true;
                    Ok(Some(m))
                }
                Err(e) => {
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        if let Ok(stale) = Mapping::open(path) {
                            if stale.len() >= LINE {
                                stale
                                    .u32_at(HDR_STATE)
                                    .store(STATE_POISONED, Ordering::Release);
                            }
                        }
                    }
                    Err(os(format!(
                        "cannot create the window area {} ({} bytes): {e}",
                        path.display(),
                        l.total
                    )))
                }
            },
            Ok(_) => Ok(None),
        };
        let first = fence().map_err(|e| os(format!("window area: first fence failed: {e}")));
        if let (Ok(l), Ok(None), Ok(())) = (&layout, &map, &first) {
            map = attach(path, l).map(Some);
        }
        if let (Ok(l), Ok(Some(m))) = (&layout, &map) {
            m.u64_at(l.ctrl(rank) + CTRL_PRESENT)
                .store(1, Ordering::Release);
        }
        let second = fence().map_err(|e| os(format!("window area: second fence failed: {e}")));
        if created {
            let _ = std::fs::remove_file(path);
        }
        let layout = layout.map_err(|e| os(format!("window area: {e}")))?;
        first?;
        second?;
        let map = map?.ok_or_else(|| os("window area not attached"))?;
        for r in 0..layout.n {
            if map
                .u64_at(layout.ctrl(r) + CTRL_PRESENT)
                .load(Ordering::Acquire)
                == 0
            {
                return Err(os(format!(
                    "window area {}: rank {r} did not attach",
                    path.display()
                )));
            }
        }
        Ok(WinArea { map, layout })
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.layout.n
    }

    /// The lock word of rank `r`'s window ([`LOCK_EXCLUSIVE`] or a count of
    /// shared holders).
    pub fn lock_word(&self, r: usize) -> &AtomicU64 {
        self.map.u64_at(self.layout.ctrl(r) + CTRL_LOCK)
    }

    /// The accumulate mutex of rank `r`'s memory.
    #[inline]
    pub fn acc_word(&self, r: usize) -> &AtomicU32 {
        self.map.u32_at(self.layout.ctrl(r) + CTRL_ACC)
    }

    /// How many exposure epochs `target` opened to `origin`.
    pub fn posts(&self, target: usize, origin: usize) -> &AtomicU64 {
        assert!(target < self.layout.n && origin < self.layout.n);
        self.map
            .u64_at(self.layout.posts + 8 * (target * self.layout.n + origin))
    }

    /// How many access epochs `origin` closed towards `target`.
    pub fn completes(&self, target: usize, origin: usize) -> &AtomicU64 {
        assert!(target < self.layout.n && origin < self.layout.n);
        self.map
            .u64_at(self.layout.completes + 8 * (target * self.layout.n + origin))
    }

    /// Address, in this process, of rank `r`'s memory in the area.
    pub fn base(&self, r: usize) -> u64 {
        self.map.addr_of(self.layout.data[r].0)
    }

    /// Bytes of rank `r`'s memory in the area.
    pub fn len(&self, r: usize) -> usize {
        self.layout.data[r].1
    }

    /// Whether rank `r` has no memory in the area.
    pub fn is_empty(&self, r: usize) -> bool {
        self.len(r) == 0
    }

    #[inline]
    fn range(&self, r: usize, off: usize, len: usize) -> Result<usize, String> {
        let (at, have) = self.layout.data[r];
        if off.checked_add(len).is_none_or(|e| e > have) {
            return Err(outside(r, off, len, have));
        }
        Ok(at + off)
    }

    /// Run `f` on `len` bytes at offset `off` of rank `r`'s memory, in
    /// place (for an accumulate, under the accumulate mutex of `r`).
    #[inline]
    pub fn modify<R>(
        &self,
        r: usize,
        off: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, String> {
        let at = self.range(r, off, len)?;
        Ok(self.map.with_shared_mut(at, len, f))
    }

    /// Copy `dst.len()` bytes at offset `off` of rank `r`'s memory.
    #[inline]
    pub fn read(&self, r: usize, off: usize, dst: &mut [u8]) -> Result<(), String> {
        let at = self.range(r, off, dst.len())?;
        self.map.read_shared(at, dst);
        Ok(())
    }

    /// Copy `src` to offset `off` of rank `r`'s memory.
    #[inline]
    pub fn write(&self, r: usize, off: usize, src: &[u8]) -> Result<(), String> {
        let at = self.range(r, off, src.len())?;
        self.map.write_shared(at, src);
        Ok(())
    }
}

/// The error of an access outside rank `r`'s `have` bytes.
#[cold]
#[inline(never)]
fn outside(r: usize, off: usize, len: usize, have: usize) -> String {
    format!(
        "bytes {off}..{} are outside rank {r}'s {have}-byte window",
        off.saturating_add(len)
    )
}

fn attach(path: &Path, l: &Layout) -> Result<Mapping, BtlError> {
    let m = Mapping::open(path).map_err(|e| {
        os(format!(
            "cannot open the window area {} (did rank 0 fail?): {e}",
            path.display()
        ))
    })?;
    let bad = |what: &str| {
        Err(os(format!(
            "window area {} is unusable: {what}",
            path.display()
        )))
    };
    if m.u32_at(HDR_STATE).load(Ordering::Acquire) != STATE_READY
        || m.u64_at(HDR_MAGIC).load(Ordering::Acquire) != MAGIC
    {
        return bad("not an initialised gmpi window area (a stale file?)");
    }
    let (n, total) = (
        m.u64_at(HDR_N).load(Ordering::Relaxed),
        m.u64_at(HDR_TOTAL).load(Ordering::Relaxed),
    );
    if n != l.n as u64 || total != l.total as u64 || m.len() != l.total {
        return bad(&format!(
            "{n} ranks and {total} bytes, expected {} and {}",
            l.n, l.total
        ));
    }
    Ok(m)
}

/// Read `dst.len()` bytes at `addr` in process `pid` (Cross Memory Attach).
pub fn cma_read(pid: u64, addr: u64, dst: &mut [u8]) -> Result<(), String> {
    if dst.is_empty() {
        return Ok(());
    }
    crate::cma::read_exact(pid, addr, Dst::lent(dst))
}

/// Write `src` at `addr` in process `pid` (Cross Memory Attach).
pub fn cma_write(pid: u64, addr: u64, src: &[u8]) -> Result<(), String> {
    if src.is_empty() {
        return Ok(());
    }
    crate::cma::write_exact(pid, src.as_ptr() as u64, addr, src.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_contiguous_and_aligned() {
        let l = Layout::new(&[3, 5, 0, 7], true).unwrap();
        assert_eq!(l.data[1].0, l.data[0].0 + 3);
        assert_eq!(l.data[3].0, l.data[1].0 + 5);
        let l = Layout::new(&[3, 5, 0, 7], false).unwrap();
        assert!(l.data.iter().all(|&(o, _)| o % LINE == 0));
        assert!(Layout::new(&[], true).is_err());
        assert!(Layout::new(&[u64::MAX], true).is_err());
    }

    #[test]
    fn one_rank_area_reads_writes_and_locks() {
        let path = format!("/dev/shm/gmpi-test-win-{}", std::process::id());
        let a = WinArea::bootstrap(&path, 0, &[16], false, &mut || Ok(())).unwrap();
        assert!(!Path::new(&path).exists(), "the file is unlinked");
        a.write(0, 4, &[1, 2, 3]).unwrap();
        let mut b = [0u8; 5];
        a.read(0, 3, &mut b).unwrap();
        assert_eq!(b, [0, 1, 2, 3, 0]);
        assert!(a.write(0, 14, &[0; 3]).is_err());
        assert_eq!(a.lock_word(0).fetch_add(1, Ordering::AcqRel), 0);
        assert_eq!(a.posts(0, 0).load(Ordering::Relaxed), 0);
    }

    /// Reads and writes of every length around the chunked copy's bounds
    /// (one piece, several, a short last piece, memcpy again from 32 KiB)
    /// at odd offsets move exactly their bytes.
    #[test]
    fn copies_of_every_size_class_move_their_bytes() {
        let path = format!("/dev/shm/gmpi-test-win-copy-{}", std::process::id());
        let size = 40 << 10;
        let a = WinArea::bootstrap(&path, 0, &[size as u64], false, &mut || Ok(())).unwrap();
        for len in [
            0, 1, 2047, 2048, 2049, 4096, 5000, 6143, 16384, 32767, 32768, 33000,
        ] {
            for off in [0, 3, 64] {
                let src: Vec<u8> = (0..len).map(|i| (i * 7 + len + off) as u8).collect();
                a.write(0, 0, &vec![0xee; size]).unwrap();
                a.write(0, off, &src).unwrap();
                let mut all = vec![0u8; size];
                a.read(0, 0, &mut all).unwrap();
                assert!(
                    all[..off].iter().all(|&b| b == 0xee),
                    "{len} at {off}: before"
                );
                assert_eq!(&all[off..off + len], &src[..], "{len} at {off}");
                assert!(
                    all[off + len..].iter().all(|&b| b == 0xee),
                    "{len} at {off}: after"
                );
                let mut back = vec![0u8; len];
                a.read(0, off, &mut back).unwrap();
                assert_eq!(back, src, "{len} at {off}: read");
            }
        }
    }

    #[test]
    fn cma_on_self() {
        let mut x = [0u8; 8];
        let addr = x.as_mut_ptr() as u64;
        let pid = u64::from(std::process::id());
        if cma_write(pid, addr, &[9; 8]).is_ok() {
            let mut y = [0u8; 8];
            cma_read(pid, addr, &mut y).unwrap();
            assert_eq!(y, [9; 8]);
        }
    }
}
