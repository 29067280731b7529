//! The `v` forms through the shared-memory area: gatherv, scatterv and
//! alltoallv, whose sizes differ by rank and are not all known to every
//! rank, so the selector cannot size the call the same way everywhere (it
//! sends every blocking `v` call of a single-node communicator here, and the
//! fit is decided inside, where the ranks that know it tell the others).
//!
//! A `v` header ([`vheader`]) carries the collective and the root and, in
//! its length field, `0` or [`BIG`]: "my data does not fit the slot, it
//! goes by point-to-point". Ranks compare the first 12 bytes (collective,
//! root, op) and check each block's length against the counts they were
//! given.
//!
//! - **gatherv** (one-way to the root): each rank publishes its block, or
//!   [`BIG`]; the root copies the blocks and the others return. Blocks
//!   marked [`BIG`] then move by point-to-point, the root receiving from
//!   exactly those ranks (its caller builds the schedule:
//!   [`Fallback`]).
//! - **scatterv** (one-way from the root): the root publishes an offset
//!   table and every block, or [`BIG`] when they do not fit together; each
//!   rank takes its own block, or, on [`BIG`], every rank takes part in the
//!   point-to-point scatter.
//! - **allgatherv** (an exchange, no fallback: every rank knows every
//!   count, so the selector sizes it by the whole result like the others).
//! - **alltoallv** (an exchange): each rank publishes an offset table and
//!   its blocks for every rank, or [`BIG`]; each takes its block of every
//!   slot, or, when any rank said [`BIG`] (every rank sees it), all of them
//!   run the point-to-point alltoallv.
//!
//! Where every rank can read the others' memory by CMA
//! (`ShmColl::single_copy`), data of `coll_shm_copy_min` or more need not
//! go by point-to-point: its owner marks its header [`COPY`] and says where
//! it lies instead (process id, then an address and length per block), its
//! readers copy it from there (`copy.rs`), and the owner waits until they
//! are done. A gatherv's sender decides so for its block, a scatterv's root
//! for its blocks (when their table fits a slot), an alltoallv's rank for
//! its blocks when they do not fit a slot and one is `coll_shm_copy_min`
//! (then no rank falls back to point-to-point); readers take whatever they
//! find. An allgatherv goes that way as a whole, by its mean block
//! (the selector's [`Algo::ShmCopy`]).
//!
//! Every `v` form of contiguous host memory of a predefined type also has
//! a tiny road ([`Communicator::gatherv_tiny`],
//! [`Communicator::scatterv_tiny`], [`Communicator::allgatherv_tiny`],
//! [`Communicator::alltoallv_tiny`]): a gatherv or scatterv whose own
//! block (and, at a scatterv's root, the table and every block), an
//! allgatherv whose whole result, an alltoallv whose table and blocks fit
//! a slot (these make no copy the general road does not, so they go as
//! far as it does). They
//! publish and read the same contributions as the roads above, so ranks
//! on either road agree; they make no view per block, read the counts and
//! displacements in place and copy between the slots and the user's
//! buffers directly. What does not fit still moves by point-to-point after
//! the area, as above.

use super::super::select::{Algo, Coll, Form, COPY_ROOTED_MAX, TINY};
use super::copy::{read_block, read_host, read_into, Exposed};
use super::wire::{self, header, kind, HDR};
use super::{bcast_mismatch, on_stack, short, tiny_gather, tiny_host, ShmArea};
use crate::buffer::{HostMem, Ty, View};
use crate::comm::Communicator;
use crate::engine::{self, Locked};
use crate::error::{Error, ErrorClass, Result};
use crate::progress::HostMemory;

/// The length field of a `v` header whose rank's data goes by
/// point-to-point.
const BIG: u32 = u32::MAX;

/// The length field of a `v` header whose rank says where its data lies,
/// for its readers to copy it from there by CMA (`copy.rs`): after the
/// header its process id (`u64` LE), then one [`COPY_ENTRY`] per block.
const COPY: u32 = u32::MAX - 1;

/// One block of a [`COPY`] contribution: address and length (`u64` LE
/// each).
const COPY_ENTRY: usize = 16;

/// What a `v` contribution holds for one reader.
enum VData<'s> {
    /// The block itself.
    Data(&'s [u8]),
    /// Nothing: it moves by point-to-point ([`BIG`]).
    Big,
    /// Where it lies: process id and address ([`COPY`]).
    Copy(u64, u64),
}

/// Whether a `v` contribution says [`COPY`].
fn is_copy(s: &[u8]) -> bool {
    s.len() >= HDR && s[12..16] == COPY.to_le_bytes()
}

/// A [`COPY`] contribution: `hdr`'s collective and root, this process's id
/// and the `(address, length)` of each block.
fn copy_contribution(kind: u32, root: i32, blocks: &[(u64, usize)], failed: bool) -> Vec<u8> {
    let mut c = Vec::with_capacity(HDR + 8 + blocks.len() * COPY_ENTRY);
    c.extend_from_slice(&header(kind, root, None, COPY as usize));
    c.extend_from_slice(&u64::from(std::process::id()).to_le_bytes());
    for &(addr, len) in blocks {
        c.extend_from_slice(&addr.to_le_bytes());
        c.extend_from_slice(&(len as u64).to_le_bytes());
    }
    if failed {
        wire::poison(&mut c);
    }
    c
}

/// Block `i` of rank `r`'s [`COPY`] contribution `s`, whose reader expects
/// `want` bytes: where it lies, or the error it makes.
fn copy_entry(
    call: &str,
    me: i32,
    r: usize,
    s: &[u8],
    i: usize,
    want: usize,
) -> Result<VData<'static>> {
    let word = |at: usize| {
        s.get(at..at + 8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
    };
    let at = HDR + 8 + i * COPY_ENTRY;
    let (Some(pid), Some(addr), Some(len)) = (word(HDR), word(at), word(at + 8)) else {
        return Err(short(call, me, r, s.len()));
    };
    if len != want as u64 {
        let got = usize::try_from(len).unwrap_or(usize::MAX);
        return Err(count_error(call, me, r, got, want));
    }
    Ok(VData::Copy(pid, addr))
}

/// Whether a [`COPY`] contribution of `n` blocks fits a slot of `a`.
fn copy_table_fits(a: &gmpi_btl_shm::ShmColl, n: usize) -> bool {
    HDR + 8 + n * COPY_ENTRY <= a.slot_bytes()
}

/// Each of `blocks` where it lies (or a host copy of it), the [`COPY`]
/// contribution that says so (`kind`, `root`; marked failed if a block
/// could not be copied out of the device) and that failure.
fn expose_blocks(
    call: &str,
    me: i32,
    kind: u32,
    root: i32,
    blocks: &[View],
) -> (Vec<Exposed>, Vec<u8>, Option<Error>) {
    let xs: Vec<Exposed> = blocks.iter().map(|b| Exposed::of(call, me, &[b])).collect();
    let table: Vec<(u64, usize)> = xs
        .iter()
        .zip(blocks)
        .map(|(x, b)| (x.addr, b.bytes()))
        .collect();
    let failed = xs.iter().find_map(|x| x.packed.as_ref().err()).cloned();
    let c = copy_contribution(kind, root, &table, failed.is_some());
    (xs, c, failed)
}

/// Whether this rank's `bytes` of a gatherv or scatterv go by single copy:
/// the area lets every rank read the others and they reach `copy_min`
/// (`coll_shm_copy_min`). The rank that publishes them decides; a reader
/// takes whatever it finds.
fn copies(a: &gmpi_btl_shm::ShmColl, copy_min: usize, bytes: usize) -> bool {
    a.single_copy() && bytes >= copy_min
}

/// One entry of an offset table: offset and length (`u32` each, LE) of a
/// block, from the start of the slot.
const ENTRY: usize = 8;

/// The most ranks whose alltoallv takes the tiny road
/// ([`Communicator::alltoallv_tiny`]), which makes its offset table on the
/// stack.
const TINY_TABLE: usize = 64;

/// What is left of a gatherv after the area: `None`, nothing; `Some(ranks)`,
/// move the blocks of `ranks` by point-to-point (the marked ranks, at the
/// root; itself, at a marked sender). (Scatterv and alltoallv fall back on
/// every rank or none: they answer whether.)
pub(crate) type Fallback = Option<Vec<usize>>;

/// The header of a `v` exchange: `big` marks data that goes by
/// point-to-point.
fn vheader(kind: u32, root: i32, big: bool) -> [u8; HDR] {
    header(kind, root, None, if big { BIG as usize } else { 0 })
}

/// Whether a `v` contribution says [`BIG`].
fn is_big(s: &[u8]) -> bool {
    s.len() >= HDR && s[12..16] == BIG.to_le_bytes()
}

/// A `v` contribution `s` of rank `r` against ours (`mine`): the same
/// collective, root and op (the length field differs by design).
fn vmismatch(call: &str, me: i32, mine: &[u8], r: usize, s: &[u8]) -> Option<Error> {
    if s.len() >= HDR && s[..12] == mine[..12] {
        return None;
    }
    wire::mismatch_of(call, me, mine, r, s).or_else(|| Some(short(call, me, r, s.len())))
}

/// A block of `got` bytes where `want` were expected: truncation when it
/// is longer (as a receive of it would say), a count mismatch when shorter.
fn count_error(call: &str, me: i32, r: usize, got: usize, want: usize) -> Error {
    let class = if got > want {
        ErrorClass::Truncate
    } else {
        ErrorClass::Count
    };
    Error::new(
        class,
        call,
        me,
        format!("rank {r} passed {got} bytes for this rank's block, which holds {want}"),
    )
}

/// Copy rank `r`'s block, the data of its contribution `s` after the
/// header, into `block`, if it has the block's length.
fn take_block(call: &str, me: i32, r: usize, s: &[u8], block: &View) -> Result<()> {
    let got = s.len() - HDR;
    if got != block.bytes() {
        return Err(count_error(call, me, r, got, block.bytes()));
    }
    block.unpack(call, me, &s[HDR..])
}

/// Rank `r`'s contribution `s` to a gatherv at the root, whose header is
/// `hdr` and whose block from `r` holds `want` bytes: the block's data,
/// [`VData::Big`] if `r` marked it [`BIG`], where it lies if [`COPY`], or
/// the error it makes.
fn gatherv_slot<'s>(
    call: &str,
    me: i32,
    hdr: &[u8],
    r: usize,
    s: &'s [u8],
    want: usize,
) -> Result<VData<'s>> {
    if let Some(err) = vmismatch(call, me, hdr, r, s) {
        return Err(err);
    }
    if is_big(s) {
        return Ok(VData::Big);
    }
    if is_copy(s) {
        return copy_entry(call, me, r, s, 0, want);
    }
    let got = s.len() - HDR;
    if got != want {
        return Err(count_error(call, me, r, got, want));
    }
    Ok(VData::Data(&s[HDR..]))
}

/// This rank's block of the root's scatterv contribution `s`, for a
/// receive buffer of `want` bytes (`hdr` is this rank's header): its data,
/// [`VData::Big`] if the root marked the blocks [`BIG`], where it lies if
/// [`COPY`], or the error it makes.
fn scatterv_block<'s>(
    call: &str,
    me: i32,
    root: i32,
    hdr: &[u8; HDR],
    s: &'s [u8],
    want: usize,
) -> Result<VData<'s>> {
    // An empty slot: the root is not scattering at all.
    let bad = if s.is_empty() {
        bcast_mismatch(call, me, root, hdr, s)
    } else {
        vmismatch(call, me, hdr, root as usize, s)
    };
    if let Some(err) = bad {
        return Err(err);
    }
    if is_big(s) {
        return Ok(VData::Big);
    }
    if is_copy(s) {
        return copy_entry(call, me, root as usize, s, me as usize, want);
    }
    let (off, len) =
        entry(s, me as usize).ok_or_else(|| short(call, me, root as usize, s.len()))?;
    if len != want {
        return Err(count_error(call, me, root as usize, len, want));
    }
    Ok(VData::Data(&s[off..off + len]))
}

/// Entry `i` of the offset table after the header of `s`, bounds-checked
/// against `s`.
fn entry(s: &[u8], i: usize) -> Option<(usize, usize)> {
    let at = HDR + i * ENTRY;
    let e = s.get(at..at + ENTRY)?;
    let off = u32::from_le_bytes(e[..4].try_into().ok()?) as usize;
    let len = u32::from_le_bytes(e[4..].try_into().ok()?) as usize;
    (off.checked_add(len)? <= s.len()).then_some((off, len))
}

/// A contribution of `hdr`, an offset table and `blocks` packed after it,
/// in order; a failed copy out of device memory poisons it
/// ([`wire::poison`]) and is returned with it.
fn packed_table(call: &str, me: i32, hdr: [u8; HDR], blocks: &[View]) -> (Vec<u8>, Result<()>) {
    let total: usize = blocks.iter().map(View::bytes).sum();
    let mut data = vec![0u8; HDR + blocks.len() * ENTRY + total];
    let mut off = write_table(&mut data, hdr, blocks.iter().map(View::bytes));
    let g = engine::gpu();
    let mut packed = Ok(());
    for b in blocks {
        let len = b.bytes();
        packed = packed.and_then(|()| b.pack_into_with(g, call, me, &mut data[off..off + len]));
        off += len;
    }
    if packed.is_err() {
        wire::poison(&mut data);
    }
    (data, packed)
}

/// Write `hdr` and the offset table of blocks of `lens` (placed one after
/// the other right after the table) at the start of `buf`; the table's
/// end, where the first block goes.
fn write_table(
    buf: &mut [u8],
    hdr: [u8; HDR],
    lens: impl ExactSizeIterator<Item = usize>,
) -> usize {
    let table = HDR + lens.len() * ENTRY;
    buf[..HDR].copy_from_slice(&hdr);
    let mut off = table;
    for (i, len) in lens.enumerate() {
        let e = HDR + i * ENTRY;
        buf[e..e + 4].copy_from_slice(&(off as u32).to_le_bytes());
        buf[e + 4..e + ENTRY].copy_from_slice(&(len as u32).to_le_bytes());
        off += len;
    }
    table
}

/// `f` over the parts of a table contribution published from the user's
/// memory: `head` (header and offset table), then the block of each of
/// the `n` ranks (at most [`TINY_TABLE`]), at `range(r)` (offset, length)
/// in `whole`; listed on the stack.
fn with_table_parts<R>(
    head: &[u8],
    whole: &[u8],
    n: usize,
    range: impl Fn(usize) -> (usize, usize),
    f: impl FnOnce(&[&[u8]]) -> R,
) -> R {
    let mut parts: [&[u8]; TINY_TABLE + 1] = [&[]; TINY_TABLE + 1];
    parts[0] = head;
    for (r, p) in parts[1..=n].iter_mut().enumerate() {
        let (o, len) = range(r);
        *p = &whole[o..o + len];
    }
    f(&parts[..=n])
}

/// Bytes of a table contribution of `blocks`.
fn table_bytes(blocks: &[View]) -> usize {
    HDR + blocks.len() * ENTRY + blocks.iter().map(View::bytes).sum::<usize>()
}

impl Communicator {
    /// A gatherv's area part (see the module header). `input` is this
    /// rank's block (the root's own block in place), `send` the root's send
    /// buffer when not in place, `blocks` the root's receive blocks. With
    /// the fallback comes the root's error, if it found one: the marked
    /// ranks send their blocks anyway, so the root receives them first.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::coll) fn shm_gatherv(
        &self,
        e: &mut Locked,
        call: &'static str,
        mut area: ShmArea<'_>,
        input: &View,
        send: Option<&View>,
        blocks: &[View],
        root: i32,
    ) -> Result<(Fallback, Option<Error>)> {
        let (me, copy_min) = (self.rank(), e.coll.shm_copy_min);
        let a = area.coll();
        let idle = &mut |k| e.idle_flags(call, k);
        // Below `COPY_ROOTED_MAX`, as a gather: from there the root reading
        // alone loses to point-to-point's cooperative copy.
        if me != root && copies(a, copy_min, input.bytes()) && input.bytes() < COPY_ROOTED_MAX {
            let x = Exposed::of(call, me, &[input]);
            let block = [(x.addr, input.bytes())];
            let c = copy_contribution(kind::GATHERV, root, &block, x.packed.is_err());
            a.gather_with(root as usize, &c, idle, |_| ())?;
            a.wait_read(Some(root as usize), idle)?;
            return x.packed.map(|()| (None, None));
        }
        if me != root {
            let big = HDR + input.bytes() > a.slot_bytes();
            let hdr = vheader(kind::GATHERV, root, big);
            if big {
                a.gather_with(root as usize, &hdr, idle, |_| ())?;
                return Ok((Some(vec![me as usize]), None));
            }
            return wire::with_contribution(engine::gpu(), call, me, hdr, Some(input), |data| {
                a.gather_with(root as usize, data, idle, |_| ())?;
                Ok((None, None))
            });
        }
        let hdr = vheader(kind::GATHERV, root, false);
        let mut big = Vec::new();
        let mut bad: Option<Error> = None;
        a.gather_with(root as usize, &hdr, idle, |slots| {
            for (r, s) in slots.iter().enumerate() {
                if r == me as usize {
                    continue;
                }
                let got = match gatherv_slot(call, me, &hdr, r, s, blocks[r].bytes()) {
                    Err(err) => Err(err),
                    Ok(VData::Big) => {
                        big.push(r);
                        Ok(())
                    }
                    Ok(VData::Data(d)) => blocks[r].unpack(call, me, d),
                    Ok(VData::Copy(pid, addr)) => read_block(call, me, r, (pid, addr), &blocks[r]),
                };
                if let Err(err) = got {
                    bad.get_or_insert(err);
                }
            }
        })?;
        if let Some(sv) = send {
            let mine = sv.pack(call, me)?;
            blocks[me as usize].unpack(call, me, &mine)?;
        }
        Ok(((!big.is_empty()).then_some(big), bad))
    }

    /// A scatterv's area part (see the module header). `blocks`: the root's
    /// send blocks; `recv`: this rank's receive buffer (`None` at an
    /// in-place root). `true`: the blocks did not fit, every rank falls back.
    pub(in crate::coll) fn shm_scatterv(
        &self,
        e: &mut Locked,
        call: &'static str,
        mut area: ShmArea<'_>,
        blocks: &[View],
        recv: Option<&View>,
        root: i32,
    ) -> Result<bool> {
        let (me, copy_min) = (self.rank(), e.coll.shm_copy_min);
        let a = area.coll();
        let idle = &mut |k| e.idle_flags(call, k);
        let total: usize = blocks.iter().map(View::bytes).sum();
        if me == root && copies(a, copy_min, total) && copy_table_fits(a, blocks.len()) {
            let (xs, c, failed) = expose_blocks(call, me, kind::SCATTERV, root, blocks);
            a.bcast_with(root as usize, &c, idle, |_| ())?;
            let own = match recv {
                Some(r) if failed.is_none() => xs[me as usize].copy_own(call, me, 0, r),
                _ => Ok(()),
            };
            a.wait_read(None, idle)?;
            return failed.map_or(own, Err).map(|()| false);
        }
        if me == root {
            if table_bytes(blocks) > a.slot_bytes() {
                let big = vheader(kind::SCATTERV, root, true);
                a.bcast_with(root as usize, &big, idle, |_| ())?;
                return Ok(true);
            }
            let (data, packed) =
                packed_table(call, me, vheader(kind::SCATTERV, root, false), blocks);
            a.bcast_with(root as usize, &data, idle, |_| ())?;
            packed?;
            if let (Some(r), Some((off, len))) = (recv, entry(&data, me as usize)) {
                r.unpack(call, me, &data[off..off + len])?;
            }
            return Ok(false);
        }
        let recv = recv.expect("a non-root receives");
        let hdr = vheader(kind::SCATTERV, root, false);
        let got = a.bcast_with(root as usize, &[], idle, |s| {
            match scatterv_block(call, me, root, &hdr, s, recv.bytes())? {
                VData::Big => Ok(true),
                VData::Data(d) => recv.unpack(call, me, d).map(|()| false),
                VData::Copy(pid, addr) => {
                    read_block(call, me, root as usize, (pid, addr), recv).map(|()| false)
                }
            }
        })?;
        got.unwrap_or(Ok(false))
    }

    /// An allgatherv through the area: one exchange of every rank's block.
    /// Unlike the other `v` forms every rank knows every count, so the
    /// selector sized it (by the whole result) and every block fits.
    pub(in crate::coll) fn shm_allgatherv(
        &self,
        e: &mut Locked,
        call: &'static str,
        mut area: ShmArea<'_>,
        input: &View,
        blocks: &[View],
    ) -> Result<()> {
        if area.copy {
            return self.shm_allgatherv_copy(e, call, &mut area, input, blocks);
        }
        let me = self.rank();
        let a = area.coll();
        let hdr = vheader(kind::ALLGATHERV, -1, false);
        wire::with_contribution(engine::gpu(), call, me, hdr, Some(input), |data| {
            let mut bad: Option<Error> = None;
            a.exchange(data, &mut |k| e.idle_flags(call, k), |slots| {
                for (r, s) in slots.iter().enumerate() {
                    if let Some(err) = vmismatch(call, me, &hdr, r, s) {
                        bad.get_or_insert(err);
                    } else if let Err(err) = take_block(call, me, r, s, &blocks[r]) {
                        bad.get_or_insert(err);
                    }
                }
            })?;
            bad.map_or(Ok(()), Err)
        })
    }

    /// An allgatherv by single copy (the selector chose it by the whole
    /// result, as it sizes the slot road): every rank says where its block
    /// lies, checks every header against its own and copies every other
    /// rank's block from that rank's memory (`copy.rs`), then waits for
    /// every other rank to be done with its own.
    fn shm_allgatherv_copy(
        &self,
        e: &mut Locked,
        call: &'static str,
        area: &mut ShmArea<'_>,
        input: &View,
        blocks: &[View],
    ) -> Result<()> {
        let me = self.rank();
        let a = area.coll();
        let idle = &mut |k| e.idle_flags(call, k);
        let x = Exposed::of(call, me, &[input]);
        let mine = [(x.addr, input.bytes())];
        let c = copy_contribution(kind::ALLGATHERV, -1, &mine, x.packed.is_err());
        let mut bad: Option<Error> = None;
        a.exchange(&c, idle, |slots| {
            for (r, s) in slots.iter().enumerate() {
                let got = match vmismatch(call, me, &c, r, s) {
                    Some(err) => Err(err),
                    None if r == me as usize => Ok(()),
                    None => match copy_entry(call, me, r, s, 0, blocks[r].bytes()) {
                        Ok(VData::Copy(pid, addr)) => {
                            read_block(call, me, r, (pid, addr), &blocks[r])
                        }
                        Ok(_) => Err(short(call, me, r, s.len())),
                        Err(err) => Err(err),
                    },
                };
                if let Err(err) = got {
                    bad.get_or_insert(err);
                }
            }
        })?;
        a.wait_read(None, idle)?;
        x.settle(call, me, bad, Some((0, &blocks[me as usize])))
    }

    /// An alltoallv's area part (see the module header): `send` this
    /// rank's send blocks (`None` in place: `rblocks` are sent, and are
    /// never read from where they lie, since they are overwritten while
    /// read), `rblocks` its receive blocks. `true`: some rank's blocks did
    /// not fit, every rank falls back.
    pub(in crate::coll) fn shm_alltoallv(
        &self,
        e: &mut Locked,
        call: &'static str,
        mut area: ShmArea<'_>,
        send: Option<&[View]>,
        rblocks: &[View],
    ) -> Result<bool> {
        let (me, copy_min) = (self.rank(), e.coll.shm_copy_min);
        let sblocks = send.unwrap_or(rblocks);
        let a = area.coll();
        let idle = &mut |k| e.idle_flags(call, k);
        let fits = table_bytes(sblocks) <= a.slot_bytes();
        // Where the ranks can read each other, blocks that do not fit the
        // slot go by single copy when one is `coll_shm_copy_min` (as an
        // alltoall's: smaller ones are faster by point-to-point).
        let largest = sblocks.iter().map(View::bytes).max().unwrap_or(0);
        let copy = !fits
            && a.single_copy()
            && send.is_some()
            && largest >= copy_min
            && copy_table_fits(a, sblocks.len());
        let hdr = vheader(kind::ALLTOALLV, -1, false);
        let mut xs = Vec::new();
        let (data, packed) = if copy {
            let (x, c, failed) = expose_blocks(call, me, kind::ALLTOALLV, -1, sblocks);
            xs = x;
            (c, failed.map_or(Ok(()), Err))
        } else if !fits {
            (vheader(kind::ALLTOALLV, -1, true).to_vec(), Ok(()))
        } else {
            packed_table(call, me, hdr, sblocks)
        };
        let mut fallback = false;
        let mut bad: Option<Error> = None;
        a.exchange(&data, idle, |slots| {
            for (r, s) in slots.iter().enumerate() {
                if let Some(err) = vmismatch(call, me, &hdr, r, s) {
                    bad.get_or_insert(err);
                }
                fallback |= is_big(s);
            }
            if bad.is_some() || fallback {
                return;
            }
            for (r, s) in slots.iter().enumerate() {
                let want = rblocks[r].bytes();
                let got = match alltoallv_block(call, me, r, s, want) {
                    // This rank's own block, from its own memory below.
                    _ if copy && r == me as usize => Ok(()),
                    Err(err) => Err(err),
                    Ok(VData::Data(d)) => rblocks[r].unpack(call, me, d),
                    Ok(VData::Copy(pid, addr)) => read_block(call, me, r, (pid, addr), &rblocks[r]),
                    Ok(VData::Big) => unreachable!("no rank said BIG"),
                };
                if let Err(err) = got {
                    bad.get_or_insert(err);
                }
            }
        })?;
        if copy {
            a.wait_read(None, idle)?;
        }
        packed?;
        if let Some(err) = bad {
            return Err(err);
        }
        if copy && !fallback {
            xs[me as usize].copy_own(call, me, 0, &rblocks[me as usize])?;
        }
        Ok(fallback)
    }
}

/// This rank's block (`want` bytes) of rank `r`'s alltoallv contribution
/// `s`, whose header matched: its data from the offset table, or where it
/// lies ([`COPY`]), or the error it makes. (Not for [`BIG`].)
fn alltoallv_block<'s>(
    call: &str,
    me: i32,
    r: usize,
    s: &'s [u8],
    want: usize,
) -> Result<VData<'s>> {
    if is_copy(s) {
        return copy_entry(call, me, r, s, me as usize, want);
    }
    let (off, len) = entry(s, me as usize).ok_or_else(|| short(call, me, r, s.len()))?;
    if len != want {
        return Err(count_error(call, me, r, len, want));
    }
    Ok(VData::Data(&s[off..off + len]))
}

/// The blocks of a tiny `v` road's root: `counts` and `displs` (elements
/// of `v`'s predefined type) over `v`, one contiguous run of host memory.
struct TinyBlocks<'a> {
    base: u64,
    /// Bytes of the whole view.
    bytes: usize,
    size: usize,
    counts: &'a [i32],
    displs: &'a [i32],
}

impl<'a> TinyBlocks<'a> {
    /// The blocks of `n` ranks over `v` (writable where `write`), if every
    /// one is in it; `None` when anything is off sends the call down the
    /// general road, which makes the checks and names the error.
    fn of(v: &View, counts: &'a [i32], displs: &'a [i32], n: usize, write: bool) -> Option<Self> {
        let Ty::Basic(d) = v.ty else { return None };
        if counts.len() != n || displs.len() != n || v.count == 0 {
            return None;
        }
        let base = tiny_host(v, v.bytes(), write)?;
        // Every block within the view's elements (what was classified).
        let count = v.count as i64;
        for (&c, &x) in counts.iter().zip(displs) {
            if c < 0 || x < 0 || c > 0 && x as i64 + c as i64 > count {
                return None;
            }
        }
        Some(TinyBlocks {
            base,
            bytes: v.bytes(),
            size: d.size(),
            counts,
            displs,
        })
    }

    /// Rank `r`'s block: host address and bytes.
    fn get(&self, r: usize) -> (u64, usize) {
        let (off, len) = self.range(r);
        (self.base + off as u64, len)
    }

    /// Rank `r`'s block: offset in the view and bytes.
    fn range(&self, r: usize) -> (usize, usize) {
        (
            self.displs[r] as usize * self.size,
            self.counts[r] as usize * self.size,
        )
    }

    /// Whether these blocks' view and `other`'s share no byte.
    fn apart(&self, other: &TinyBlocks<'_>) -> bool {
        self.base + self.bytes as u64 <= other.base || other.base + other.bytes as u64 <= self.base
    }

    /// Bytes of every block together.
    fn total(&self) -> usize {
        self.counts.iter().map(|&c| c as usize).sum::<usize>() * self.size
    }

    /// The contribution [`packed_table`] makes of these blocks (header
    /// `hdr`, the offset table, every block), written into `buf`: the
    /// caller checked that its table and blocks fit [`TINY`] bytes.
    fn table(&self, hdr: [u8; HDR], buf: &mut [u8]) {
        let mut off = self.write_table(hdr, buf);
        for r in 0..self.counts.len() {
            let (at, len) = self.get(r);
            if len > 0 {
                HostMem.with_read(at, len, |d| {
                    gmpi_btl::copy_bytes(&mut buf[off..off + len], d)
                });
            }
            off += len;
        }
    }

    /// [`write_table`] of these blocks into `buf`.
    fn write_table(&self, hdr: [u8; HDR], buf: &mut [u8]) -> usize {
        write_table(buf, hdr, (0..self.counts.len()).map(|r| self.range(r).1))
    }

    /// Write rank `r`'s `data` into its block, if it has the block's
    /// length ([`take_block`]'s check).
    fn put(&self, call: &str, me: i32, r: usize, data: &[u8]) -> Result<()> {
        let (at, want) = self.get(r);
        if data.len() != want {
            return Err(count_error(call, me, r, data.len(), want));
        }
        if want > 0 {
            HostMem.with_write(at, want, |out| gmpi_btl::copy_bytes(out, data));
        }
        Ok(())
    }
}

impl Communicator {
    /// The latency-bound gatherv: contiguous host buffers of a predefined
    /// type, 1 byte to a slot from this rank
    /// ([`tiny_road`](Self::tiny_road)). It is
    /// [`shm_gatherv`](Self::shm_gatherv) (same header, the same checks at
    /// the root, and blocks marked [`BIG`] moved by point-to-point after
    /// the area), without a view per block: a sender's contribution is
    /// built on the stack, the root copies each slot straight into its
    /// block of `recv`.
    pub(in crate::coll) fn gatherv_tiny(
        &self,
        send: &View,
        recv: &View,
        counts: &[i32],
        displs: &[i32],
        root: i32,
    ) -> Option<Result<()>> {
        const CALL: &str = "MPI_Gatherv";
        let (me, n, len) = (self.rank(), self.size() as usize, send.bytes());
        if len == 0 || !(0..n as i32).contains(&root) {
            return None;
        }
        let src = tiny_host(send, len, false)?;
        let blocks = match me == root {
            true => Some(TinyBlocks::of(recv, counts, displs, n, true)?),
            false => None,
        };
        if blocks.as_ref().is_some_and(|b| b.get(me as usize).1 != len) {
            return None;
        }
        let query = |c: &Self| c.query(Coll::Gather, Form::Blocking, len).vform(true);
        let got = self.tiny_road(CALL, query, |e, a, tag| {
            let hdr = vheader(kind::GATHERV, root, false);
            let idle = &mut |k| e.idle_flags(CALL, k);
            let Some(b) = &blocks else {
                tiny_gather(a, CALL, me, root, hdr, (src, len), idle, |_| ())?;
                return Ok(None);
            };
            let (mut big, mut bad) = (Vec::new(), None);
            a.gather_with(root as usize, &hdr, idle, |slots| {
                for (r, s) in slots.iter().enumerate() {
                    if r == me as usize {
                        continue;
                    }
                    let (at, want) = b.get(r);
                    let got = match gatherv_slot(CALL, me, &hdr, r, s, want) {
                        Err(err) => Err(err),
                        Ok(VData::Big) => {
                            big.push(r);
                            Ok(())
                        }
                        Ok(VData::Data(d)) => {
                            HostMem.with_write(at, want, |out| gmpi_btl::copy_bytes(out, d));
                            Ok(())
                        }
                        Ok(VData::Copy(pid, addr)) => read_host(CALL, me, r, (pid, addr), at, want),
                    };
                    if let Err(err) = got {
                        bad.get_or_insert(err);
                    }
                }
            })?;
            HostMem::copy(src, b.get(me as usize).0, len);
            Ok(Some((big, bad, tag)))
        })?;
        let Some((big, bad, tag)) = (match got {
            Ok(rest) => rest,
            Err(err) => return Some(Err(err)),
        }) else {
            return Some(Ok(()));
        };
        if !big.is_empty() {
            // Senders whose blocks did not fit the area (a count mismatch:
            // the root's fit) send them by point-to-point.
            let run = || {
                let v = self.vblocks(CALL, "the receive buffer", recv, counts, displs)?;
                let mut s = self.gatherv_rest(CALL, tag, send, &v, root, &big);
                engine::with(CALL, |e| e.drive(CALL, &mut s))
            };
            if let Err(err) = run() {
                return Some(Err(bad.unwrap_or(err)));
            }
        }
        Some(bad.map_or(Ok(()), Err))
    }

    /// The latency-bound scatterv: contiguous host buffers of a predefined
    /// type, 1 byte up to a slot for this rank and, at a root of up to
    /// [`TINY_TABLE`] ranks, the offset table and every block in one slot
    /// ([`tiny_road`](Self::tiny_road)). It is
    /// [`shm_scatterv`](Self::shm_scatterv) (same contribution, the same
    /// checks by the readers, and every rank falling back to point-to-point
    /// when the root's blocks do not fit), without a view per block or a
    /// packed copy: the root makes the table on the stack and publishes the
    /// blocks straight from the send buffer (up to [`TINY`] bytes in all it
    /// assembles the whole contribution on the stack, which measured
    /// cheaper there: 0.115 against 0.129 µs at np 2, 128 B a block), a
    /// reader copies its block straight into `recv`.
    pub(in crate::coll) fn scatterv_tiny(
        &self,
        send: &View,
        counts: &[i32],
        displs: &[i32],
        recv: &View,
        root: i32,
    ) -> Option<Result<()>> {
        const CALL: &str = "MPI_Scatterv";
        let (me, n, len) = (self.rank(), self.size() as usize, recv.bytes());
        if len == 0 || !(0..n as i32).contains(&root) {
            return None;
        }
        let dst = tiny_host(recv, len, true)?;
        let (blocks, bytes) = match me == root {
            true => {
                if n > TINY_TABLE {
                    return None;
                }
                let b = TinyBlocks::of(send, counts, displs, n, false)?;
                let bytes = n.checked_mul(ENTRY)?.checked_add(b.total())?;
                if b.get(me as usize).1 != len {
                    return None;
                }
                (Some(b), bytes)
            }
            false => (None, len),
        };
        let query = |c: &Self| c.query(Coll::Scatter, Form::Blocking, bytes).vform(true);
        let got = self.tiny_road(CALL, query, |e, a, tag| {
            let hdr = vheader(kind::SCATTERV, root, false);
            let idle = &mut |k| e.idle_flags(CALL, k);
            if let Some(b) = blocks.as_ref().filter(|_| bytes <= TINY) {
                return on_stack(HDR + bytes, |buf| {
                    b.table(hdr, buf);
                    a.bcast_with(root as usize, buf, idle, |_| ())?;
                    let (o, l) = entry(buf, me as usize).expect("the root's own entry");
                    HostMem.with_write(dst, len, |out| gmpi_btl::copy_bytes(out, &buf[o..o + l]));
                    Ok(None)
                });
            }
            if let Some(b) = &blocks {
                // Larger, the same contribution with the blocks published
                // straight from the send buffer (the table on the stack).
                let mut head = [0u8; HDR + TINY_TABLE * ENTRY];
                let table = b.write_table(hdr, &mut head);
                HostMem.with_read(b.base, b.bytes, |whole| {
                    with_table_parts(
                        &head[..table],
                        whole,
                        n,
                        |r| b.range(r),
                        |parts| a.bcast_parts(root as usize, parts, idle, |_| ()),
                    )
                })?;
                HostMem::copy(b.get(me as usize).0, dst, len);
                return Ok(None);
            }
            let got = a.bcast_with(root as usize, &[], idle, |s| {
                let block = scatterv_block(CALL, me, root, &hdr, s, len)?;
                match block {
                    VData::Big => Ok(Some(tag)),
                    VData::Data(d) => {
                        HostMem.with_write(dst, len, |out| gmpi_btl::copy_bytes(out, d));
                        Ok(None)
                    }
                    VData::Copy(pid, addr) => {
                        read_host(CALL, me, root as usize, (pid, addr), dst, len).map(|()| None)
                    }
                }
            })?;
            got.unwrap_or(Ok(None))
        })?;
        match got {
            Ok(None) => Some(Ok(())),
            // The root's blocks did not fit the area: every rank falls back.
            Ok(Some(tag)) => Some(engine::with(CALL, |e| {
                let mut s =
                    self.scatter_sched(CALL, tag, &[], Some(recv), root, Algo::ScatterLinear);
                e.drive(CALL, &mut s)
            })),
            Err(err) => Some(Err(err)),
        }
    }

    /// The latency-bound allgatherv: contiguous host buffers of a
    /// predefined type, 1 byte to a slot in the whole result
    /// ([`tiny_road`](Self::tiny_road)). It is
    /// [`shm_allgatherv`](Self::shm_allgatherv)'s exchange (same header,
    /// same checks of every block's length), without a view per block:
    /// this rank's block is published from its send buffer and every slot
    /// copied straight into its block of `recv`.
    pub(in crate::coll) fn allgatherv_tiny(
        &self,
        send: &View,
        recv: &View,
        counts: &[i32],
        displs: &[i32],
    ) -> Option<Result<()>> {
        const CALL: &str = "MPI_Allgatherv";
        let (me, n, len) = (self.rank(), self.size() as usize, send.bytes());
        let blocks = TinyBlocks::of(recv, counts, displs, n, true)?;
        if blocks.get(me as usize).1 != len {
            return None;
        }
        // A rank may contribute nothing (and pass no buffer).
        let src = match len {
            0 => 0,
            _ => tiny_host(send, len, false)?,
        };
        let total = blocks.total();
        let query = |c: &Self| c.query(Coll::Allgather, Form::Blocking, total).vform(true);
        self.tiny_road(CALL, query, |e, a, _| {
            let hdr = vheader(kind::ALLGATHERV, -1, false);
            let idle = &mut |k| e.idle_flags(CALL, k);
            let mut bad: Option<Error> = None;
            let take = |slots: &[&[u8]]| {
                for (r, s) in slots.iter().enumerate() {
                    let got = match vmismatch(CALL, me, &hdr, r, s) {
                        Some(err) => Err(err),
                        None => blocks.put(CALL, me, r, &s[HDR..]),
                    };
                    if let Err(err) = got {
                        bad.get_or_insert(err);
                    }
                }
            };
            match len {
                0 => a.exchange(&hdr, idle, take)?,
                _ => HostMem.with_read(src, len, |d| a.exchange_parts(&[&hdr, d], idle, take))?,
            }
            bad.map_or(Ok(()), Err)
        })
    }

    /// The latency-bound alltoallv: contiguous host buffers of a predefined
    /// type whose offset table and blocks for every rank fit a slot, for up
    /// to [`TINY_TABLE`] ranks ([`tiny_road`](Self::tiny_road)). It is
    /// [`shm_alltoallv`](Self::shm_alltoallv)'s exchange (same contribution,
    /// the same checks, and every rank falling back to the pairwise
    /// point-to-point exchange, on the call's tag, when some rank's blocks
    /// do not fit the area), without a view per block or a packed copy: the
    /// table is made on the stack, the blocks are published straight from
    /// the send buffer and every rank's block for this one copied straight
    /// into `recv`.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::coll) fn alltoallv_tiny(
        &self,
        send: &View,
        scounts: &[i32],
        sdispls: &[i32],
        recv: &View,
        rcounts: &[i32],
        rdispls: &[i32],
    ) -> Option<Result<()>> {
        const CALL: &str = "MPI_Alltoallv";
        let (me, n) = (self.rank() as usize, self.size() as usize);
        if n > TINY_TABLE {
            return None;
        }
        let sb = TinyBlocks::of(send, scounts, sdispls, n, false)?;
        let rb = TinyBlocks::of(recv, rcounts, rdispls, n, true)?;
        if sb.range(me).1 != rb.range(me).1 || !sb.apart(&rb) {
            return None;
        }
        let table = HDR + n * ENTRY;
        let bytes = (table - HDR).checked_add(sb.total())?;
        let query = |c: &Self| c.query(Coll::Alltoall, Form::Blocking, bytes).vform(true);
        let got = self.tiny_road(CALL, query, |e, a, tag| {
            let hdr = vheader(kind::ALLTOALLV, -1, false);
            let idle = &mut |k| e.idle_flags(CALL, k);
            // `packed_table`'s contribution: the header, the table, then
            // each block in rank order.
            let mut head = [0u8; HDR + TINY_TABLE * ENTRY];
            sb.write_table(hdr, &mut head);
            let (mut fallback, mut bad) = (false, None);
            let take = |slots: &[&[u8]]| {
                for (r, s) in slots.iter().enumerate() {
                    if let Some(err) = vmismatch(CALL, me as i32, &hdr, r, s) {
                        bad.get_or_insert(err);
                    }
                    fallback |= is_big(s);
                }
                if bad.is_some() || fallback {
                    return;
                }
                HostMem.with_write(rb.base, rb.bytes, |out| {
                    for (r, s) in slots.iter().enumerate() {
                        let (at, want) = rb.range(r);
                        let out = &mut out[at..at + want];
                        let got = match alltoallv_block(CALL, me as i32, r, s, want) {
                            Err(err) => Err(err),
                            Ok(VData::Data(d)) => {
                                gmpi_btl::copy_bytes(out, d);
                                Ok(())
                            }
                            Ok(VData::Copy(pid, addr)) => {
                                read_into(CALL, me as i32, r, (pid, addr), out)
                            }
                            Ok(VData::Big) => unreachable!("no rank said BIG"),
                        };
                        if let Err(err) = got {
                            bad.get_or_insert(err);
                        }
                    }
                });
            };
            HostMem.with_read(sb.base, sb.bytes, |whole| {
                with_table_parts(
                    &head[..table],
                    whole,
                    n,
                    |r| sb.range(r),
                    |parts| a.exchange_parts(parts, idle, take),
                )
            })?;
            bad.map_or(Ok(fallback.then_some(tag)), Err)
        })?;
        match got {
            Ok(None) => Some(Ok(())),
            // Some rank's blocks did not fit the area: every rank falls back.
            Ok(Some(tag)) => Some((|| {
                let (sv, rv) = (send, recv);
                let (sb, rb) =
                    self.alltoallv_args(CALL, sv, scounts, sdispls, rv, rcounts, rdispls)?;
                let mut s = self.alltoall_sched(CALL, tag, Some(&sb), &rb, Algo::AlltoallPairwise);
                engine::with(CALL, |e| e.drive(CALL, &mut s))
            })()),
            Err(err) => Some(Err(err)),
        }
    }
}
