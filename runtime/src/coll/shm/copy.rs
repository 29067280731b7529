//! Single-copy collectives through the area ([`Algo::ShmCopy`]): bcast,
//! gather, scatter, allgather and alltoall too large for the area's slots
//! (in one, or in chunks) whose blocks are at least `coll_shm_copy_min`
//! (half of it for allgather), on areas whose every rank can read the
//! others' memory by Cross Memory Attach (`ShmColl::single_copy`).
//!
//! A rank's slot holds the usual header ([`wire`]: the same collective,
//! root and length as the other roads, so every mismatch is found and
//! named the same way) and, after it, where its data lies: its process id
//! and an address ([`DESC`] bytes). The readers copy each block straight
//! from the owner's memory into their own (`process_vm_readv`: one copy,
//! instead of a copy into the area and one out of it), inside the area's
//! operation, before they say they are done with it (`consumed`). An owner
//! lets go of its memory only once its readers are done
//! ([`ShmColl::wait_read`]): a bcast's or scatter's root waits for every
//! reader, a gather's sender for the root, every rank of an exchange for
//! every other.
//!
//! What a rank exposes is its own buffer when that is one contiguous run of
//! host memory, else a host copy of it (device memory, derived datatypes),
//! kept until its readers are done; what it reads lands in its buffer
//! directly when that is contiguous host memory, else in a host buffer
//! unpacked into it. A rank whose data could not be copied out of the
//! device still publishes (marked failed, [`wire::poison`]), so nobody waits
//! for it and nobody reads it. A failed read is the reader's error.
//!
//! Which road a call takes follows from its size and the area alone, the
//! same on every rank. A bcast reader that fails a root's header still
//! reads as many of its epochs as it publishes (one here,
//! [`pipeline::root_epochs`]), so both sides go on at the same epoch.
//!
//! [`Algo::ShmCopy`]: super::super::select::Algo::ShmCopy

use gmpi_btl_shm::cma_read;

use super::wire::{self, header, kind, mismatch, HDR};
use super::{bcast_mismatch, pipeline, scatter_block, short, ShmArea};
use crate::buffer::{HostMem, View};
use crate::comm::Communicator;
use crate::engine::{self, Locked};
use crate::error::{Error, ErrorClass, Result};
use crate::progress::HostMemory;

/// Bytes after the header of a single-copy contribution: the owner's
/// process id and the address of its data (`u64` LE each).
const DESC: usize = 16;

/// A contribution: `hdr`, then this process's id and `addr`.
fn contribution(hdr: [u8; HDR], addr: u64) -> [u8; HDR + DESC] {
    let mut c = [0u8; HDR + DESC];
    c[..HDR].copy_from_slice(&hdr);
    c[HDR..HDR + 8].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
    c[HDR + 8..].copy_from_slice(&addr.to_le_bytes());
    c
}

/// The owner's process id and data address in rank `r`'s contribution
/// `s` (whose header matched ours).
fn desc(call: &str, me: i32, r: usize, s: &[u8]) -> Result<(u64, u64)> {
    if s.len() != HDR + DESC {
        return Err(short(call, me, r, s.len()));
    }
    let word = |i: usize| u64::from_le_bytes(s[i..i + 8].try_into().expect("8 bytes"));
    Ok((word(HDR), word(HDR + 8)))
}

/// The memory this rank exposes to its readers: the user's, or a host
/// copy that lives as long as this.
pub(super) struct Exposed {
    pub(super) addr: u64,
    _copy: Vec<u8>,
    /// Whether the data could be copied out (a device copy may fail).
    pub(super) packed: Result<()>,
}

impl Exposed {
    /// `views` one after the other: in place when they are one contiguous
    /// run of host memory in that order, else packed into a host copy.
    pub(super) fn of(call: &str, me: i32, views: &[&View]) -> Self {
        let in_place = views.first().and_then(|f| f.contig_addr()).filter(|&base| {
            let mut at = base;
            views.iter().all(|v| {
                let here = v.contig_addr() == Some(at) && v.is_host();
                at += v.bytes() as u64;
                here
            })
        });
        if let Some(addr) = in_place {
            return Exposed {
                addr,
                _copy: Vec::new(),
                packed: Ok(()),
            };
        }
        let mut copy = vec![0u8; views.iter().map(|v| v.bytes()).sum()];
        let (mut off, mut packed) = (0, Ok(()));
        let g = engine::gpu();
        for v in views {
            let n = v.bytes();
            packed = packed.and_then(|()| v.pack_into_with(g, call, me, &mut copy[off..off + n]));
            off += n;
        }
        Exposed {
            addr: copy.as_ptr() as u64,
            _copy: copy,
            packed,
        }
    }

    /// The contribution that says where this lies (marked failed if its
    /// data could not be copied out).
    fn contribution(&self, hdr: [u8; HDR]) -> [u8; HDR + DESC] {
        let mut c = contribution(hdr, self.addr);
        if self.packed.is_err() {
            wire::poison(&mut c);
        }
        c
    }

    /// The end of an operation on this memory, once its readers are done:
    /// the packing error first, then the operation's own (`bad`), else this
    /// rank's own block, at `off` of what this exposes, copied into `dst`.
    pub(super) fn settle(
        &self,
        call: &str,
        me: i32,
        bad: Option<Error>,
        own: Option<(usize, &View)>,
    ) -> Result<()> {
        if let Err(err) = &self.packed {
            return Err(err.clone());
        }
        if let Some(err) = bad {
            return Err(err);
        }
        own.map_or(Ok(()), |(off, dst)| self.copy_own(call, me, off, dst))
    }

    /// Unpack `len` bytes from `off` of what this exposes into `dst` (this
    /// rank's own block), unless `dst` is that memory itself (in place).
    pub(super) fn copy_own(&self, call: &str, me: i32, off: usize, dst: &View) -> Result<()> {
        let (at, len) = (self.addr + off as u64, dst.bytes());
        if len == 0 || dst.contig_addr() == Some(at) {
            return Ok(());
        }
        HostMem.with_read(at, len, |d| dst.unpack(call, me, d))
    }
}

/// Read `dst.bytes()` bytes at `addr` in rank `r`'s process `pid` into
/// `dst`: straight into it when it is contiguous host memory, else through
/// a host buffer.
pub(super) fn read_block(
    call: &str,
    me: i32,
    r: usize,
    (pid, addr): (u64, u64),
    dst: &View,
) -> Result<()> {
    let len = dst.bytes();
    if len == 0 {
        return Ok(());
    }
    if let Some(read) = dst.write_contig(|out| cma_read(pid, addr, out)) {
        return read.map_err(|e| read_failed(call, me, r, len, e));
    }
    let mut tmp = vec![0u8; len];
    cma_read(pid, addr, &mut tmp).map_err(|e| read_failed(call, me, r, len, e))?;
    dst.unpack(call, me, &tmp)
}

/// Read `out.len()` bytes at `addr` in rank `r`'s process `pid` into
/// `out`.
pub(super) fn read_into(
    call: &str,
    me: i32,
    r: usize,
    (pid, addr): (u64, u64),
    out: &mut [u8],
) -> Result<()> {
    let len = out.len();
    if len == 0 {
        return Ok(());
    }
    cma_read(pid, addr, out).map_err(|e| read_failed(call, me, r, len, e))
}

/// Read `len` bytes at `addr` in rank `r`'s process `pid` into this
/// process's host memory at `at` (a buffer the call was lent, writable).
pub(super) fn read_host(
    call: &str,
    me: i32,
    r: usize,
    (pid, addr): (u64, u64),
    at: u64,
    len: usize,
) -> Result<()> {
    HostMem
        .with_write(at, len, |out| cma_read(pid, addr, out))
        .map_err(|e| read_failed(call, me, r, len, e))
}

#[cold]
fn read_failed(call: &str, me: i32, r: usize, len: usize, e: String) -> Error {
    Error::new(
        ErrorClass::Other,
        call,
        me,
        format!("reading rank {r}'s {len} bytes by process_vm_readv: {e}"),
    )
}

impl Communicator {
    /// A bcast by single copy: the root says where `v` lies and waits for
    /// every reader; each reader checks the root's header against its own
    /// and copies `v` from the root's memory. With `coll_check` every rank
    /// publishes its header (an exchange, as the other bcast roads do), so
    /// ranks of different sizes all fail alike.
    pub(super) fn shm_bcast_copy(
        &self,
        e: &mut Locked,
        call: &'static str,
        area: &mut ShmArea<'_>,
        v: &View,
        root: i32,
    ) -> Result<()> {
        let (me, len) = (self.rank(), v.bytes());
        let hdr = header(kind::BCAST, root, None, len);
        let (check, copies) = (e.cfg.coll_check, pipeline::copy_min(area.coll(), &e.coll));
        let a = area.coll();
        let room = a.slot_bytes() - HDR;
        let exposed = (me == root).then(|| Exposed::of(call, me, &[v]));
        let mine = exposed
            .as_ref()
            .map_or_else(|| contribution(hdr, 0), |x| x.contribution(hdr));
        let idle = &mut |k| e.idle_flags(call, k);
        if check {
            let mut bad = None;
            a.exchange(&mine, idle, |slots| {
                bad = match mismatch(call, me, &mine, slots) {
                    Some(err) => Some(err),
                    None if me != root => {
                        let r = root as usize;
                        desc(call, me, r, slots[r])
                            .and_then(|d| read_block(call, me, r, d, v))
                            .err()
                    }
                    None => None,
                };
            })?;
            if let Some(x) = exposed {
                a.wait_read(None, idle)?;
                x.packed?;
            }
            return bad.map_or(Ok(()), Err);
        }
        if let Some(x) = exposed {
            a.bcast_with(root as usize, &mine, idle, |_| ())?;
            a.wait_read(None, idle)?;
            return x.packed;
        }
        let mut more = 0;
        let got = a.bcast_with(root as usize, &[], idle, |s| {
            if let Some(err) = bcast_mismatch(call, me, root, &hdr, s) {
                more = pipeline::root_epochs(room, copies, s) - 1;
                return Err(err);
            }
            let r = root as usize;
            read_block(call, me, r, desc(call, me, r, s)?, v)
        })?;
        pipeline::skip_root(a, root, more, idle)?;
        got.unwrap_or(Ok(()))
    }

    /// A gather (`root`) or allgather (`None`) by single copy, every rank
    /// the same size: each rank says where `input` lies; the root, or every
    /// rank, checks every header against its own and copies each other
    /// rank's block into `blocks` from that rank's memory, its own block
    /// locally. A gather's senders wait for the root to be done, an
    /// allgather's ranks for every other.
    pub(super) fn shm_gather_copy(
        &self,
        e: &mut Locked,
        call: &'static str,
        area: &mut ShmArea<'_>,
        input: &View,
        blocks: &[View],
        root: Option<i32>,
    ) -> Result<()> {
        let (me, len) = (self.rank(), input.bytes());
        let hdr = header(kind::GATHER, root.unwrap_or(-1), None, len);
        let x = Exposed::of(call, me, &[input]);
        let mine = x.contribution(hdr);
        let a = area.coll();
        let idle = &mut |k| e.idle_flags(call, k);
        let reads = root.is_none_or(|r| r == me);
        let mut bad = None;
        let mut take = |slots: &[&[u8]]| {
            if let Some(err) = mismatch(call, me, &mine, slots) {
                bad = Some(err);
                return;
            }
            for (r, (b, s)) in blocks.iter().zip(slots).enumerate() {
                if r != me as usize {
                    let read = desc(call, me, r, s).and_then(|d| read_block(call, me, r, d, b));
                    if let Err(err) = read {
                        bad.get_or_insert(err);
                    }
                }
            }
        };
        match root {
            Some(root) => {
                a.gather_with(root as usize, &mine, idle, |slots| take(slots))?;
                a.wait_read(Some(root as usize), idle)?;
            }
            None => {
                a.exchange(&mine, idle, |slots| take(slots))?;
                a.wait_read(None, idle)?;
            }
        }
        x.settle(call, me, bad, reads.then(|| (0, &blocks[me as usize])))
    }

    /// A scatter by single copy: the root says where its send blocks lie
    /// (`blocks`, in rank order) and waits for every reader; each reader
    /// checks the root's header against its own and copies its block from
    /// the root's memory into `recv` (`None` at an in-place root).
    pub(super) fn shm_scatter_copy(
        &self,
        e: &mut Locked,
        call: &'static str,
        area: &mut ShmArea<'_>,
        blocks: &[View],
        recv: Option<&View>,
        root: i32,
    ) -> Result<()> {
        let me = self.rank();
        let len = scatter_block(call, me == root, blocks, recv, root);
        let hdr = header(kind::SCATTER, root, None, len);
        let a = area.coll();
        let idle = &mut |k| e.idle_flags(call, k);
        if me == root {
            let views: Vec<&View> = blocks.iter().collect();
            let x = Exposed::of(call, me, &views);
            a.bcast_with(root as usize, &x.contribution(hdr), idle, |_| ())?;
            let own = match recv {
                Some(r) if x.packed.is_ok() => x.copy_own(call, me, me as usize * len, r),
                _ => Ok(()),
            };
            a.wait_read(None, idle)?;
            x.packed?;
            return own;
        }
        let recv = recv.expect("a non-root receives");
        let got = a.bcast_with(root as usize, &[], idle, |s| {
            if let Some(err) = bcast_mismatch(call, me, root, &hdr, s) {
                return Err(err);
            }
            let r = root as usize;
            let (pid, addr) = desc(call, me, r, s)?;
            read_block(call, me, r, (pid, addr + (me as usize * len) as u64), recv)
        })?;
        got.unwrap_or(Ok(()))
    }

    /// An alltoall by single copy: every rank says where its send buffer
    /// lies (`input`, `n` blocks), checks every header against its own,
    /// copies its block of every other rank's from that rank's memory into
    /// `rblocks` and its own locally, and waits for every other rank to be
    /// done with its buffer. (Not in place: the selector sends an in-place
    /// alltoall elsewhere, its send buffer being overwritten as it is read.)
    pub(super) fn shm_alltoall_copy(
        &self,
        e: &mut Locked,
        call: &'static str,
        area: &mut ShmArea<'_>,
        input: &View,
        rblocks: &[View],
    ) -> Result<()> {
        let (me, total) = (self.rank(), input.bytes());
        let block = total / rblocks.len();
        let hdr = header(kind::ALLTOALL, -1, None, total);
        let x = Exposed::of(call, me, &[input]);
        let mine = x.contribution(hdr);
        let a = area.coll();
        let idle = &mut |k| e.idle_flags(call, k);
        let at = (me as usize * block) as u64;
        let mut bad = None;
        a.exchange(&mine, idle, |slots| {
            if let Some(err) = mismatch(call, me, &mine, slots) {
                bad = Some(err);
                return;
            }
            for (r, (b, s)) in rblocks.iter().zip(slots).enumerate() {
                if r != me as usize {
                    let read = desc(call, me, r, s)
                        .and_then(|(pid, addr)| read_block(call, me, r, (pid, addr + at), b));
                    if let Err(err) = read {
                        bad.get_or_insert(err);
                    }
                }
            }
        })?;
        a.wait_read(None, idle)?;
        x.settle(
            call,
            me,
            bad,
            Some((me as usize * block, &rblocks[me as usize])),
        )
    }
}
