//! A deterministic simulated fabric for tests (test double; never used in jobs).
//!
//! [`Fabric::new`] builds N ranks; [`Fabric::endpoint`] gives rank `r` a
//! [`SimBtl`] on a *lane* (a lane stands for one transport: two lanes between
//! the same ranks model shm and tcp side by side). Memory that `get` reads is
//! simulated too: each rank owns a [`SimMemory`] (an address space of byte
//! vectors), so the whole pml can be exercised with no `unsafe` and no
//! processes.
//!
//! Knobs, all deterministic:
//! - [`Fabric::set_capacity`]: at most K undelivered fragments per (lane, src,
//!   dst) queue; beyond that `send` answers [`Submit::NoResource`].
//! - [`Fabric::hold_lane`] / [`Fabric::release_lane`]: a held lane delivers
//!   nothing, so fragments on another lane overtake it (reordering between
//!   transports).
//! - [`Fabric::set_seed`]: the receiver drains its queues in a pseudo-random
//!   interleaving (per-queue FIFO order always holds) and a random number per pass.
//! - [`Fabric::set_queued`]: sends and gets answer [`Submit::Queued`] and
//!   complete on the caller's next progress.
//! - [`Fabric::fail_gets`]: gets fail, so the pml must fall back.
//! - [`Fabric::kill`]: a rank dies; others see [`Event::PeerFailed`] once and
//!   sends to it fail.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::{Btl, BtlError, Capabilities, Event, LocalMem, MemDesc, Pull, Rank, Submit};

/// A simulated address space: disjoint byte vectors at fake addresses.
#[derive(Debug, Default)]
pub struct SimMemory {
    regions: BTreeMap<u64, Vec<u8>>,
    next: u64,
}

impl SimMemory {
    /// Allocate `len` zeroed bytes; returns the base address (never 0).
    pub fn alloc(&mut self, len: usize) -> u64 {
        if self.next == 0 {
            self.next = 0x1000;
        }
        let addr = self.next;
        // Leave a gap so an overrun never lands in the next region.
        self.next += (len as u64).max(1) + 0x1000;
        self.regions.insert(addr, vec![0; len]);
        addr
    }

    /// Allocate and fill with `data`.
    pub fn alloc_with(&mut self, data: &[u8]) -> u64 {
        let a = self.alloc(data.len());
        self.write(a, data);
        a
    }

    fn locate(&self, addr: u64, len: usize) -> (u64, usize) {
        let (&base, region) = self
            .regions
            .range(..=addr)
            .next_back()
            .unwrap_or_else(|| panic!("sim memory: address {addr:#x} is not allocated"));
        let off = (addr - base) as usize;
        assert!(
            off + len <= region.len(),
            "sim memory: access of {len} bytes at {addr:#x} overruns a region of {} bytes",
            region.len()
        );
        (base, off)
    }

    /// Whether `len` bytes at `addr` lie inside one allocated region.
    fn contains(&self, addr: u64, len: u64) -> bool {
        let Some((&base, region)) = self.regions.range(..=addr).next_back() else {
            return false;
        };
        (addr - base)
            .checked_add(len)
            .is_some_and(|end| end <= region.len() as u64)
    }

    /// Borrow `len` bytes at `addr`. Panics on an access outside a region:
    /// in tests that is exactly the bug to catch.
    pub fn read(&self, addr: u64, len: usize) -> &[u8] {
        if len == 0 {
            return &[];
        }
        let (base, off) = self.locate(addr, len);
        &self.regions[&base][off..off + len]
    }

    /// Mutably borrow `len` bytes at `addr`.
    pub fn slice_mut(&mut self, addr: u64, len: usize) -> &mut [u8] {
        if len == 0 {
            return &mut [];
        }
        let (base, off) = self.locate(addr, len);
        &mut self.regions.get_mut(&base).expect("region")[off..off + len]
    }

    /// Copy `data` to `addr`.
    pub fn write(&mut self, addr: u64, data: &[u8]) {
        self.slice_mut(addr, data.len()).copy_from_slice(data);
    }
}

/// What a pending completion ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Send,
    Get,
    Put,
}

impl Op {
    /// The error a get or put fails with, for `why`.
    fn failed(self, why: &str) -> BtlError {
        if self == Op::Put {
            BtlError::PutFailed(why.into())
        } else {
            BtlError::GetFailed(why.into())
        }
    }
}

/// A pending completion: (what it ends, token, failure).
type Completion = (Op, u64, Option<BtlError>);

#[derive(Debug)]
struct State {
    n: u32,
    lanes: u32,
    /// Undelivered fragments per (lane, src, dst).
    queues: BTreeMap<(u32, Rank, Rank), VecDeque<Vec<u8>>>,
    capacity: usize,
    held: Vec<bool>,
    rng: Option<u64>,
    queued: bool,
    fail_gets: bool,
    dead: Vec<bool>,
    /// Per (lane, rank): peers whose failure was already reported.
    reported: BTreeMap<(u32, Rank), Vec<Rank>>,
    /// Per (lane, rank): completions to report on the next progress.
    completions: BTreeMap<(u32, Rank), Vec<Completion>>,
    memories: Vec<Arc<Mutex<SimMemory>>>,
    sends: u64,
    /// Gets asked for as [`Pull::Alone`] and [`Pull::Unhelped`].
    alone_gets: u64,
    unhelped_gets: u64,
    /// Registrations handed out and not yet handed back.
    registered: i64,
}

impl State {
    fn next_rand(&mut self) -> Option<u64> {
        let s = self.rng.as_mut()?;
        // xorshift64*: deterministic, good enough for schedules.
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        Some(s.wrapping_mul(0x2545_F491_4F6C_DD1D))
    }
}

trait Lk<T> {
    fn lk(&self) -> MutexGuard<'_, T>;
}

impl<T> Lk<T> for Mutex<T> {
    fn lk(&self) -> MutexGuard<'_, T> {
        // A test that panicked while holding the lock already failed.
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The simulated fabric shared by every simulated endpoint.
#[derive(Debug, Clone)]
pub struct Fabric {
    st: Arc<Mutex<State>>,
}

impl Fabric {
    /// `n` ranks connected by `lanes` transports.
    pub fn new(n: u32, lanes: u32) -> Self {
        let memories = (0..n).map(|_| Arc::default()).collect();
        Self {
            st: Arc::new(Mutex::new(State {
                n,
                lanes,
                queues: BTreeMap::new(),
                capacity: usize::MAX,
                held: vec![false; lanes as usize],
                rng: None,
                queued: false,
                fail_gets: false,
                dead: vec![false; n as usize],
                reported: BTreeMap::new(),
                completions: BTreeMap::new(),
                memories,
                sends: 0,
                alone_gets: 0,
                unhelped_gets: 0,
                registered: 0,
            })),
        }
    }

    /// Rank `me`'s endpoint on `lane`, with the given capabilities.
    pub fn endpoint(&self, me: Rank, lane: u32, caps: Capabilities) -> SimBtl {
        {
            let st = self.st.lk();
            assert!(me < st.n && lane < st.lanes);
        }
        SimBtl {
            me,
            lane,
            caps,
            st: self.st.clone(),
        }
    }

    /// Capabilities typical of a shared-memory transport with `get`.
    pub fn shm_caps(eager_limit: usize, max_send: usize) -> Capabilities {
        Capabilities {
            name: "sim",
            eager_limit,
            max_send_size: max_send,
            get: true,
            put: false,
            exclusivity: 100,
            get_threshold: eager_limit,
            cuda_ipc: false,
            gpudirect: None,
        }
    }

    /// Rank `r`'s simulated memory.
    pub fn memory(&self, r: Rank) -> Arc<Mutex<SimMemory>> {
        self.st.lk().memories[r as usize].clone()
    }

    /// At most `k` undelivered fragments per (lane, src, dst).
    pub fn set_capacity(&self, k: usize) {
        self.st.lk().capacity = k.max(1);
    }

    /// Stop delivering on `lane`.
    pub fn hold_lane(&self, lane: u32) {
        self.st.lk().held[lane as usize] = true;
    }

    /// Resume delivering on `lane`.
    pub fn release_lane(&self, lane: u32) {
        self.st.lk().held[lane as usize] = false;
    }

    /// Drain receive queues in a pseudo-random order seeded by `seed`.
    pub fn set_seed(&self, seed: u64) {
        self.st.lk().rng = Some(seed | 1);
    }

    /// Make sends and gets complete asynchronously.
    pub fn set_queued(&self, on: bool) {
        self.st.lk().queued = on;
    }

    /// Make every get fail.
    pub fn fail_gets(&self, on: bool) {
        self.st.lk().fail_gets = on;
    }

    /// Kill rank `r`.
    pub fn kill(&self, r: Rank) {
        let mut st = self.st.lk();
        st.dead[r as usize] = true;
        st.queues.retain(|&(_, s, d), _| s != r && d != r);
    }

    /// Fragments not yet delivered, on every lane.
    pub fn in_flight(&self) -> usize {
        self.st.lk().queues.values().map(VecDeque::len).sum()
    }

    /// Fragments submitted so far, on every lane.
    pub fn sends(&self) -> u64 {
        self.st.lk().sends
    }

    /// Registrations [`Btl::register`] handed out that no
    /// [`Btl::deregister`] has handed back yet, on every lane.
    pub fn registered(&self) -> i64 {
        self.st.lk().registered
    }

    /// Gets asked for as [`Pull::Alone`] so far (they copy as any get).
    pub fn alone_gets(&self) -> u64 {
        self.st.lk().alone_gets
    }

    /// Gets asked for as [`Pull::Unhelped`] so far (they copy as any
    /// get).
    pub fn unhelped_gets(&self) -> u64 {
        self.st.lk().unhelped_gets
    }
}

/// One rank's endpoint on one lane of a [`Fabric`].
#[derive(Debug)]
pub struct SimBtl {
    me: Rank,
    lane: u32,
    caps: Capabilities,
    st: Arc<Mutex<State>>,
}

impl SimBtl {
    /// [`Btl::get`] as a safe call: the simulated fabric reaches `dst`
    /// through this rank's [`SimMemory`], by address, never by pointer
    /// (an address outside its regions panics, as any bad local access in
    /// the simulation does). A read outside `remote`, or of peer memory that
    /// is not allocated, fails with [`BtlError::GetFailed`].
    pub fn get_into(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
    ) -> Result<Submit, BtlError> {
        self.get_via(peer, remote, offset, dst, token, None)
    }

    /// [`Btl::put`] as a safe call: `src` is read from this rank's
    /// [`SimMemory`] by address and written into `peer`'s, inside `remote`
    /// (which [`Btl::register_window`] described). A write outside
    /// `remote`, or of memory that is not simulated, fails with
    /// [`BtlError::PutFailed`]; [`Fabric::fail_gets`] fails puts too.
    pub fn put_from(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        src: LocalMem,
        token: u64,
    ) -> Result<Submit, BtlError> {
        let mut st = self.st.lk();
        let len = src.len as u64;
        let own = st.memories[self.me as usize].clone();
        let mem = self.admit(&st, Op::Put, peer, remote, offset, len, |simulated| {
            simulated && own.lk().contains(src.addr, len)
        })?;
        if st.fail_gets {
            return self.end(&mut st, Op::Put, token, Some(Op::Put.failed("injected")));
        }
        // Through a copy: `peer` may be this rank (one lock at a time).
        let bytes = own.lk().read(src.addr, src.len).to_vec();
        mem.lk().write(remote.addr + offset, &bytes);
        self.end(&mut st, Op::Put, token, None)
    }

    /// What every get and put (`op`) of `len` bytes at `offset` in
    /// `peer`'s `remote` checks first: the capability, a live peer in
    /// range, a span inside `remote`, `peer`'s key, and `memory_ok`
    /// (given whether the peer's span is simulated memory). `peer`'s
    /// memory, or the error the transfer fails with.
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        st: &State,
        op: Op,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        len: u64,
        memory_ok: impl FnOnce(bool) -> bool,
    ) -> Result<Arc<Mutex<SimMemory>>, BtlError> {
        let able = if op == Op::Put {
            self.caps.put
        } else {
            self.caps.get
        };
        if !able {
            return Err(BtlError::Unsupported(self.caps.name));
        }
        if peer >= st.n {
            return Err(BtlError::Unreachable(peer));
        }
        if st.dead[peer as usize] {
            return Err(BtlError::PeerFailed(peer));
        }
        let in_desc = offset.checked_add(len).is_some_and(|end| end <= remote.len);
        let mem = st.memories[peer as usize].clone();
        let simulated = remote
            .addr
            .checked_add(offset)
            .is_some_and(|a| mem.lk().contains(a, len));
        if !in_desc || remote.key != u64::from(peer) || !memory_ok(simulated) {
            return Err(op.failed(&format!(
                "bad descriptor for rank {peer}: {remote:?} + {offset}"
            )));
        }
        Ok(mem)
    }

    /// How get or put `token` ends: at once (`Done`, or `err`), or, on a
    /// queued fabric, `Queued` with its completion (or failure) on this
    /// endpoint's next progress.
    fn end(
        &self,
        st: &mut State,
        op: Op,
        token: u64,
        err: Option<BtlError>,
    ) -> Result<Submit, BtlError> {
        if st.queued {
            st.completions
                .entry((self.lane, self.me))
                .or_default()
                .push((op, token, err));
            return Ok(Submit::Queued);
        }
        err.map_or(Ok(Submit::Done), Err)
    }

    /// Whether `remote + offset` (of `peer`) and `dst` both lie in the
    /// simulated memories.
    fn simulated(&self, peer: Rank, remote: &MemDesc, offset: u64, dst: LocalMem) -> (bool, bool) {
        let st = self.st.lk();
        let Some(mem) = st.memories.get(peer as usize) else {
            return (true, true);
        };
        let src = remote.addr.checked_add(offset);
        let r = src.is_some_and(|a| mem.lk().contains(a, dst.len as u64));
        let d = st.memories[self.me as usize]
            .lk()
            .contains(dst.addr, dst.len as u64);
        (r, d)
    }

    /// The get, reading or writing through `raw` where an address is not
    /// simulated memory (see [`Btl::get`] on this type).
    fn get_via(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
        mut raw: Option<&mut dyn FnMut(Raw<'_>)>,
    ) -> Result<Submit, BtlError> {
        let mut st = self.st.lk();
        let len = dst.len as u64;
        let mut simulated = false;
        let has_raw = raw.is_some();
        let mem = self.admit(&st, Op::Get, peer, remote, offset, len, |sim| {
            simulated = sim;
            sim || has_raw
        })?;
        if st.fail_gets {
            return self.end(&mut st, Op::Get, token, Some(Op::Get.failed("injected")));
        }
        // Through a copy: `peer` may be this rank (one lock at a time).
        let mut bytes = vec![0u8; dst.len];
        match (simulated, raw.as_deref_mut()) {
            (true, _) | (false, None) => {
                bytes.copy_from_slice(mem.lk().read(remote.addr + offset, dst.len))
            }
            (false, Some(f)) => f(Raw::Read(remote.addr + offset, &mut bytes)),
        }
        let own = st.memories[self.me as usize].clone();
        let local = own.lk().contains(dst.addr, dst.len as u64);
        match (local, raw) {
            (true, _) | (false, None) => own.lk().write(dst.addr, &bytes),
            (false, Some(f)) => f(Raw::Write(dst.addr, &bytes)),
        }
        self.end(&mut st, Op::Get, token, None)
    }
}

/// An access of real memory of this process by the simulated get.
enum Raw<'a> {
    /// Read `.1.len()` bytes at address `.0` into `.1`.
    Read(u64, &'a mut [u8]),
    /// Write `.1` at address `.0`.
    Write(u64, &'a [u8]),
}

impl Btl for SimBtl {
    fn caps(&self) -> &Capabilities {
        &self.caps
    }

    fn reaches(&self, peer: Rank) -> bool {
        let st = self.st.lk();
        peer < st.n && peer != self.me
    }

    fn send(&mut self, peer: Rank, parts: &[&[u8]], token: u64) -> Result<Submit, BtlError> {
        let mut st = self.st.lk();
        if peer >= st.n || peer == self.me {
            return Err(BtlError::Unreachable(peer));
        }
        if st.dead[peer as usize] {
            return Err(BtlError::PeerFailed(peer));
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.caps.max_send_size {
            return Err(BtlError::TooLarge {
                len,
                max: self.caps.max_send_size,
            });
        }
        let cap = st.capacity;
        let q = st.queues.entry((self.lane, self.me, peer)).or_default();
        if q.len() >= cap {
            return Ok(Submit::NoResource);
        }
        let mut v = Vec::with_capacity(len);
        for p in parts {
            v.extend_from_slice(p);
        }
        q.push_back(v);
        st.sends += 1;
        if st.queued && token != 0 {
            st.completions
                .entry((self.lane, self.me))
                .or_default()
                .push((Op::Send, token, None));
            return Ok(Submit::Queued);
        }
        Ok(Submit::Done)
    }

    fn register(&mut self, addr: u64, len: u64) -> Option<MemDesc> {
        if !self.caps.get {
            return None;
        }
        self.st.lk().registered += 1;
        Some(MemDesc {
            addr,
            len,
            key: u64::from(self.me),
        })
    }

    fn deregister(&mut self, desc: &MemDesc) {
        assert_eq!(
            desc.key,
            u64::from(self.me),
            "deregister of another rank's descriptor"
        );
        self.st.lk().registered -= 1;
    }

    /// [`Btl::get`]: reads the peer's [`SimMemory`] and writes `dst` in
    /// this rank's own, by address. An address outside the simulated
    /// memories is real memory of this process (the progress driver's
    /// pinned staging slots, which a rank registers and a peer gets from):
    /// read and written by pointer, under the trait's contract for `dst`
    /// and the registering rank's for `remote` (it keeps registered memory
    /// valid and unwritten until the peer's get has ended).
    #[allow(unsafe_code)]
    unsafe fn get(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
    ) -> Result<Submit, BtlError> {
        if self.simulated(peer, remote, offset, dst) == (true, true) {
            return self.get_into(peer, remote, offset, dst, token);
        }
        let mut raw = |r: Raw<'_>| match r {
            // SAFETY: real memory a rank of this process registered for
            // this get (see above): valid for reads of these bytes.
            Raw::Read(a, out) => out
                .copy_from_slice(unsafe { std::slice::from_raw_parts(a as *const u8, out.len()) }),
            // SAFETY: `dst`, which the caller keeps valid for writes of
            // `dst.len` bytes and untouched until the get ends (the trait's
            // contract).
            Raw::Write(a, data) => unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), a as *mut u8, data.len())
            },
        };
        self.get_via(peer, remote, offset, dst, token, Some(&mut raw))
    }

    /// [`Btl::register_window`]: a descriptor as [`Btl::register`]'s, for
    /// endpoints whose capabilities offer `put`.
    fn register_window(&mut self, addr: u64, len: u64) -> Option<MemDesc> {
        if !self.caps.put {
            return None;
        }
        self.register(addr, len)
    }

    /// [`Btl::put`]: [`SimBtl::put_from`] (simulated memory only, so
    /// nothing real is read).
    #[allow(unsafe_code)]
    unsafe fn put(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        src: LocalMem,
        token: u64,
    ) -> Result<Submit, BtlError> {
        self.put_from(peer, remote, offset, src, token)
    }

    /// [`Btl::get_as`]: counted by its [`Pull`] ([`Fabric::alone_gets`],
    /// [`Fabric::unhelped_gets`]), then as `get`.
    #[allow(unsafe_code)]
    unsafe fn get_as(
        &mut self,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
        pull: Pull,
    ) -> Result<Submit, BtlError> {
        match pull {
            Pull::Helped => {}
            Pull::Alone => self.st.lk().alone_gets += 1,
            Pull::Unhelped => self.st.lk().unhelped_gets += 1,
        }
        self.get_into(peer, remote, offset, dst, token)
    }

    fn progress(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> usize {
        let mut n = 0;
        // Completions first.
        let comps = self
            .st
            .lk()
            .completions
            .remove(&(self.lane, self.me))
            .unwrap_or_default();
        for (what, token, err) in comps {
            n += 1;
            match (what, err) {
                (Op::Send, _) => on_event(Event::SendComplete { token }),
                (Op::Get, None) => on_event(Event::GetComplete { token }),
                (Op::Get, Some(error)) => on_event(Event::GetFailed { token, error }),
                (Op::Put, None) => on_event(Event::PutComplete { token }),
                (Op::Put, Some(error)) => on_event(Event::PutFailed { token, error }),
            }
        }
        // Failures.
        let newly_dead: Vec<Rank> = {
            let mut st = self.st.lk();
            let dead: Vec<Rank> = (0..st.n)
                .filter(|&r| st.dead[r as usize] && r != self.me)
                .collect();
            let rep = st.reported.entry((self.lane, self.me)).or_default();
            let fresh: Vec<Rank> = dead.into_iter().filter(|r| !rep.contains(r)).collect();
            rep.extend(&fresh);
            fresh
        };
        for peer in newly_dead {
            n += 1;
            on_event(Event::PeerFailed { peer });
        }
        // Fragments.
        let budget = {
            let mut st = self.st.lk();
            match st.next_rand() {
                Some(r) => 1 + (r % 4) as usize,
                None => usize::MAX,
            }
        };
        for _ in 0..budget {
            let frag = {
                let mut st = self.st.lk();
                if st.held[self.lane as usize] {
                    break;
                }
                let keys: Vec<(u32, Rank, Rank)> = st
                    .queues
                    .iter()
                    .filter(|(&(l, _, d), q)| l == self.lane && d == self.me && !q.is_empty())
                    .map(|(k, _)| *k)
                    .collect();
                if keys.is_empty() {
                    break;
                }
                let pick = match st.next_rand() {
                    Some(r) => keys[(r % keys.len() as u64) as usize],
                    None => keys[0],
                };
                let f = st.queues.get_mut(&pick).and_then(VecDeque::pop_front);
                f.map(|f| (pick.1, f))
            };
            let Some((peer, data)) = frag else { break };
            n += 1;
            on_event(Event::Frag { peer, data: &data });
        }
        n
    }

    fn wait(&mut self, _timeout: Duration) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(b: &mut SimBtl) -> Vec<(Rank, Vec<u8>)> {
        let mut v = Vec::new();
        b.progress(&mut |e| {
            if let Event::Frag { peer, data } = e {
                v.push((peer, data.to_vec()));
            }
        });
        v
    }

    #[test]
    fn fifo_backpressure_hold_and_kill() {
        let f = Fabric::new(3, 2);
        let mut a0 = f.endpoint(0, 0, Fabric::shm_caps(64, 256));
        let mut a1 = f.endpoint(1, 0, Fabric::shm_caps(64, 256));
        let mut b0 = f.endpoint(0, 1, Fabric::shm_caps(64, 256));
        let mut b1 = f.endpoint(1, 1, Fabric::shm_caps(64, 256));
        f.set_capacity(2);
        assert_eq!(a0.send(1, &[b"1"], 0), Ok(Submit::Done));
        assert_eq!(a0.send(1, &[b"2"], 0), Ok(Submit::Done));
        assert_eq!(a0.send(1, &[b"3"], 0), Ok(Submit::NoResource));
        f.hold_lane(0);
        b0.send(1, &[b"x"], 0).unwrap();
        assert!(drain(&mut a1).is_empty());
        assert_eq!(drain(&mut b1), vec![(0, b"x".to_vec())]);
        f.release_lane(0);
        assert_eq!(drain(&mut a1), vec![(0, b"1".to_vec()), (0, b"2".to_vec())]);
        f.kill(2);
        assert_eq!(a0.send(2, &[b"z"], 0), Err(BtlError::PeerFailed(2)));
        let mut failed = Vec::new();
        a0.progress(&mut |e| {
            if let Event::PeerFailed { peer } = e {
                failed.push(peer)
            }
        });
        a0.progress(&mut |e| {
            if let Event::PeerFailed { peer } = e {
                failed.push(peer)
            }
        });
        assert_eq!(failed, vec![2]);
    }

    #[test]
    fn get_reads_peer_memory() {
        let f = Fabric::new(2, 1);
        let mut a0 = f.endpoint(0, 0, Fabric::shm_caps(64, 256));
        let mut a1 = f.endpoint(1, 0, Fabric::shm_caps(64, 256));
        let addr = f.memory(0).lock().unwrap().alloc_with(b"hello world");
        let d = a0.register(addr, 11).unwrap();
        let buf = f.memory(1).lock().unwrap().alloc(5);
        let dst = LocalMem { addr: buf, len: 5 };
        assert_eq!(a1.get_into(0, &d, 6, dst, 1), Ok(Submit::Done));
        assert_eq!(f.memory(1).lock().unwrap().read(buf, 5), b"world");
        assert!(a1.get_into(0, &d, 8, dst, 1).is_err());
    }
}
