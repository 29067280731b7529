//! The typed Rust API of one-sided communication: [`Win`], a window over
//! memory of `T`s that keeps the borrow rules honest, and [`Epoch`], the
//! guard of an access epoch.
//!
//! - [`Communicator::win_create`] borrows the caller's slice mutably for
//!   the window's lifetime: nothing else in this process can touch it
//!   while other ranks may; it comes back when the window is freed
//!   ([`Win::free`], or dropping it: both collective).
//! - [`Communicator::win_allocate`] and
//!   [`Communicator::win_allocate_shared`] make windows over memory gmpi
//!   owns (zeroed); this rank reads and writes it through operations on
//!   itself, like any other rank's.
//! - Operations exist only on an [`Epoch`]: [`Win::fence`] (active
//!   target, every rank; the guard's [`Epoch::fence`] separates phases and
//!   dropping it ends the epoch with a last fence), [`Win::lock`] (passive
//!   target, one rank, shared or exclusive) and [`Win::lock_all`]; dropping
//!   a lock guard unlocks. Origin buffers are borrowed only for the call:
//!   every operation has completed when it returns.
//!
//! Displacements count elements of `T` (the window's displacement unit is
//! `size_of::<T>()`).

use std::marker::PhantomData;

use crate::buffer::View;
use crate::comm::Communicator;
use crate::datatype::Equivalence;
use crate::error::Result;
use crate::op::Op;
use crate::typemap::{AsDatatype, UserDatatype};
use crate::win::{LockType, Window, MODE_NOSUCCEED};

/// A window over memory of `T`s; `'a` is the memory it borrows (`'static`
/// for memory gmpi allocated). Dropping it frees it, which is collective:
/// prefer [`Win::free`], which reports errors.
#[derive(Debug)]
pub struct Win<'a, T: Equivalence> {
    raw: Window,
    _mem: PhantomData<&'a mut [T]>,
}

impl Communicator {
    /// `MPI_Win_create` over `mem`, which the window borrows until it is
    /// freed. Collective.
    pub fn win_create<'a, T: Equivalence>(&self, mem: &'a mut [T]) -> Result<Win<'a, T>> {
        let raw = Window::over(self, mem.as_mut_ptr() as u64, std::mem::size_of_val(mem), {
            std::mem::size_of::<T>().max(1) as isize
        })?;
        Ok(Win {
            raw,
            _mem: PhantomData,
        })
    }

    /// `MPI_Win_allocate`: a window over `len` zeroed `T`s gmpi allocates
    /// on this rank. Collective.
    pub fn win_allocate<T: Equivalence>(&self, len: usize) -> Result<Win<'static, T>> {
        self.win_alloc(len, false)
    }

    /// `MPI_Win_allocate_shared`: as [`Communicator::win_allocate`], in
    /// memory every rank of the node maps (contiguous across ranks).
    /// Collective.
    pub fn win_allocate_shared<T: Equivalence>(&self, len: usize) -> Result<Win<'static, T>> {
        self.win_alloc(len, true)
    }

    fn win_alloc<T: Equivalence>(&self, len: usize, shared: bool) -> Result<Win<'static, T>> {
        let size = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            crate::Error::new(
                crate::ErrorClass::Size,
                "MPI_Win_allocate",
                self.rank(),
                format!("{len} elements overflow the address space"),
            )
        })?;
        let raw = Window::allocate(self, size, std::mem::size_of::<T>().max(1) as isize, shared)?;
        Ok(Win {
            raw,
            _mem: PhantomData,
        })
    }
}

impl<'a, T: Equivalence> Win<'a, T> {
    /// The untyped window (what the C ABI uses).
    pub fn raw(&self) -> &Window {
        &self.raw
    }

    /// Start a fence epoch (`MPI_Win_fence`): every rank of the window
    /// calls it. Collective.
    pub fn fence(&self) -> Result<Epoch<'_, T>> {
        self.raw.fence(0)?;
        Ok(Epoch {
            win: &self.raw,
            kind: Kind::Fence,
            open: true,
            _t: PhantomData,
        })
    }

    /// Lock `rank`'s window (`MPI_Win_lock`), waiting for the lock; the
    /// guard unlocks on drop.
    pub fn lock(&self, rank: i32, lock: LockType) -> Result<Epoch<'_, T>> {
        self.raw.lock(lock, rank, 0)?;
        Ok(Epoch {
            win: &self.raw,
            kind: Kind::Lock(rank),
            open: true,
            _t: PhantomData,
        })
    }

    /// A shared lock on every rank (`MPI_Win_lock_all`); the guard unlocks
    /// on drop.
    pub fn lock_all(&self) -> Result<Epoch<'_, T>> {
        self.raw.lock_all(0)?;
        Ok(Epoch {
            win: &self.raw,
            kind: Kind::LockAll,
            open: true,
            _t: PhantomData,
        })
    }

    /// Free the window (`MPI_Win_free`; collective): the memory it borrowed
    /// is the caller's again.
    pub fn free(self) -> Result<()> {
        // Drop then finds it freed.
        self.raw.free()
    }
}

impl<T: Equivalence> Drop for Win<'_, T> {
    fn drop(&mut self) {
        if !self.raw.is_freed() {
            if let Err(e) = self.raw.free() {
                tracing::warn!(target: "rma", "freeing a window on drop: {e}");
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Fence,
    Lock(i32),
    LockAll,
}

/// An access epoch on a [`Win`]: the operations, and how it ends (a
/// fence, an unlock) when dropped or [closed](Epoch::close).
#[derive(Debug)]
pub struct Epoch<'w, T: Equivalence> {
    win: &'w Window,
    kind: Kind,
    open: bool,
    _t: PhantomData<T>,
}

fn dt<T: Equivalence>() -> UserDatatype {
    T::DATATYPE.as_user()
}

impl<T: Equivalence> Epoch<'_, T> {
    /// `MPI_Put`: write `data` at element `disp` of `rank`'s window.
    pub fn put(&self, rank: i32, disp: usize, data: &[T]) -> Result<()> {
        let v = View::of_slice(data);
        self.win
            .put("MPI_Put", &v, rank, disp as isize, data.len(), &dt::<T>())
    }

    /// `MPI_Get`: read `out.len()` elements at `disp` of `rank`'s window.
    pub fn get(&self, rank: i32, disp: usize, out: &mut [T]) -> Result<()> {
        let n = out.len();
        let v = View::of_slice_mut(out);
        self.win
            .get("MPI_Get", &v, rank, disp as isize, n, &dt::<T>())
    }

    /// `MPI_Accumulate`: combine `data` into `rank`'s window with `op`
    /// (atomically per element).
    pub fn accumulate(&self, rank: i32, disp: usize, data: &[T], op: Op) -> Result<()> {
        let v = View::of_slice(data);
        self.win.accumulate(
            "MPI_Accumulate",
            &v,
            rank,
            disp as isize,
            data.len(),
            &dt::<T>(),
            &op,
        )
    }

    /// `MPI_Get_accumulate`: as [`Epoch::accumulate`], the former values
    /// into `old` (`data.len() == old.len()`).
    pub fn get_accumulate(
        &self,
        rank: i32,
        disp: usize,
        data: &[T],
        old: &mut [T],
        op: Op,
    ) -> Result<()> {
        let n = old.len();
        let v = View::of_slice(data);
        let r = View::of_slice_mut(old);
        self.win.get_accumulate(
            "MPI_Get_accumulate",
            Some(&v),
            &r,
            rank,
            disp as isize,
            n,
            &dt::<T>(),
            &op,
        )
    }

    /// `MPI_Fetch_and_op` on one element: its former value.
    pub fn fetch_and_op(&self, rank: i32, disp: usize, value: T, op: Op) -> Result<T> {
        let mut old = [value];
        let v = [value];
        self.win.get_accumulate(
            "MPI_Fetch_and_op",
            Some(&View::of_slice(&v)),
            &View::of_slice_mut(&mut old),
            rank,
            disp as isize,
            1,
            &dt::<T>(),
            &op,
        )?;
        Ok(old[0])
    }

    /// `MPI_Compare_and_swap` on one element: if it equals `compare`, it
    /// becomes `value`; returns its former value.
    pub fn compare_and_swap(&self, rank: i32, disp: usize, value: T, compare: T) -> Result<T> {
        let (v, c, mut old) = ([value], [compare], [value]);
        self.win.compare_and_swap(
            "MPI_Compare_and_swap",
            &View::of_slice(&v),
            &View::of_slice(&c),
            &View::of_slice_mut(&mut old),
            rank,
            disp as isize,
            &dt::<T>(),
        )?;
        Ok(old[0])
    }

    /// `MPI_Win_flush`: complete the operations to `rank` (they complete
    /// as they are issued; this orders memory). Passive-target epochs.
    pub fn flush(&self, rank: i32) -> Result<()> {
        self.win.flush("MPI_Win_flush", Some(rank))
    }

    /// `MPI_Win_fence` inside a fence epoch: every rank's operations so far
    /// are complete, and a new phase starts. Collective.
    pub fn fence(&self) -> Result<()> {
        self.win.fence(0)
    }

    /// End the epoch now (the last fence, or the unlock), reporting errors
    /// that dropping the guard can only log.
    pub fn close(mut self) -> Result<()> {
        self.end()
    }

    fn end(&mut self) -> Result<()> {
        if !std::mem::replace(&mut self.open, false) {
            return Ok(());
        }
        match self.kind {
            Kind::Fence => self.win.fence(MODE_NOSUCCEED),
            Kind::Lock(r) => self.win.unlock(r),
            Kind::LockAll => self.win.unlock_all(),
        }
    }
}

impl<T: Equivalence> Drop for Epoch<'_, T> {
    fn drop(&mut self) {
        if let Err(e) = self.end() {
            tracing::warn!(target: "rma", "ending an epoch on drop: {e}");
        }
    }
}
