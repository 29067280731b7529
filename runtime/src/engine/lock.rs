//! The engine's lock, and its serial mode.
//!
//! The engine's state sits behind one process-wide lock ([`EngineLock`]).
//! Taken the ordinary way ([`EngineLock::lock`]), that is a mutex: two
//! locked instructions per call, about 26 cycles on the development VM, a
//! sixth of an 8-byte `MPI_Isend` and as much again for each message a
//! streaming receiver takes.
//!
//! A C program below `MPI_THREAD_MULTIPLE` promises that its MPI calls never
//! overlap (the thread levels' contract: its own synchronisation orders the
//! calls of its threads). While gmpi has no thread of its own that enters
//! the engine, that promise is all the exclusion the engine needs, so the C
//! ABI turns on *serial mode* ([`EngineLock::enter_serial`], an `unsafe fn`
//! whose contract is that promise) and every lock is then a relaxed load
//! and two relaxed stores of a flag that only catches a re-entrant lock
//! (a reduction or attribute callback that calls back into the engine),
//! which fails loudly instead of aliasing the state.
//!
//! Serial mode ends for good ([`EngineLock::leave_serial`]) before gmpi
//! starts a thread of its own (the one-sided progress thread) or a program
//! declares `MPI_THREAD_MULTIPLE`; the caller is then outside the engine
//! (no serial guard alive), and the new thread is spawned after, so from
//! then on every lock is the mutex. The Rust API never enters serial mode:
//! its communicators are `Send + Sync`, so safe code could overlap calls.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

/// A value behind the engine's lock (see the module header).
pub(crate) struct EngineLock<T> {
    mutex: Mutex<()>,
    value: UnsafeCell<T>,
    /// Serial mode is on.
    serial: AtomicBool,
    /// In serial mode: a guard is out (relaxed loads and stores only; it
    /// detects re-entrance on the one thread that may hold the lock, it
    /// does not exclude other threads).
    held: AtomicBool,
}

// SAFETY: `value` is reached only through a `Guard`. Outside serial mode a
// guard holds `mutex`, so guards of different threads never coexist. In
// serial mode the caller of `enter_serial` promised that no two threads
// call in at once, and `held` refuses a second guard on the same thread;
// `leave_serial` ends serial mode while no guard is out and before any
// other thread may call in.
unsafe impl<T: Send> Sync for EngineLock<T> {}

/// The engine's state, locked: it derefs to the value.
pub(crate) struct Guard<T: 'static> {
    lock: &'static EngineLock<T>,
    /// The mutex, outside serial mode.
    mutex: Option<MutexGuard<'static, ()>>,
    /// A guard stays on the thread that took it (as a `MutexGuard` does).
    _not_send: PhantomData<*const ()>,
}

impl<T> EngineLock<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self {
            mutex: Mutex::new(()),
            value: UnsafeCell::new(value),
            serial: AtomicBool::new(false),
            held: AtomicBool::new(false),
        }
    }

    /// Whether serial mode is on.
    #[inline]
    pub(crate) fn serial(&self) -> bool {
        self.serial.load(Ordering::Relaxed)
    }

    /// A guard in serial mode.
    #[inline]
    fn serial_guard(&'static self) -> Guard<T> {
        assert!(
            !self.held.load(Ordering::Relaxed),
            "gmpi was called again from inside one of its own calls (a callback \
             that makes an MPI call on the engine while the engine is busy)"
        );
        self.held.store(true, Ordering::Relaxed);
        Guard {
            lock: self,
            mutex: None,
            _not_send: PhantomData,
        }
    }

    /// Take the lock (serial mode: no wait; else the mutex). A poisoned
    /// mutex is taken anyway: the engine has no invariant a panicking call
    /// breaks that a later call could not detect.
    #[inline]
    pub(crate) fn lock(&'static self) -> Guard<T> {
        if self.serial() {
            return self.serial_guard();
        }
        let g = self.mutex.lock().unwrap_or_else(|p| p.into_inner());
        self.guard(g)
    }

    /// Take the lock if no other guard is out.
    #[inline]
    pub(crate) fn try_lock(&'static self) -> Option<Guard<T>> {
        if self.serial() {
            return (!self.held.load(Ordering::Relaxed)).then(|| self.serial_guard());
        }
        match self.mutex.try_lock() {
            Ok(g) => Some(self.guard(g)),
            Err(TryLockError::Poisoned(p)) => Some(self.guard(p.into_inner())),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    #[inline]
    fn guard(&'static self, g: MutexGuard<'static, ()>) -> Guard<T> {
        Guard {
            lock: self,
            mutex: Some(g),
            _not_send: PhantomData,
        }
    }

    /// Turn serial mode on; false (and nothing changes) if `refuse` (the
    /// process already runs threads of its own in the engine, or declared
    /// `MPI_THREAD_MULTIPLE`).
    ///
    /// # Safety
    /// From now on, until [`EngineLock::leave_serial`], the process's calls
    /// that take this lock never overlap: each happens before the next (the
    /// contract of `MPI_THREAD_SINGLE`, `_FUNNELED` and `_SERIALIZED`), and
    /// no other thread holds the lock now.
    pub(crate) unsafe fn enter_serial(&self, refuse: bool) -> bool {
        if refuse {
            return false;
        }
        self.serial.store(true, Ordering::SeqCst);
        true
    }

    /// End serial mode for good: from now on every lock is the mutex. Call
    /// with no guard out, before another thread may take the lock (before
    /// spawning it, or before the program may call from several threads).
    pub(crate) fn leave_serial(&self) {
        assert!(
            !self.held.load(Ordering::Relaxed),
            "serial mode ends while the engine is held"
        );
        self.serial.store(false, Ordering::SeqCst);
    }
}

impl<T> std::ops::Deref for Guard<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one out (see `EngineLock`'s Sync),
        // and the reference lives no longer than the guard's borrow.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for Guard<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; the mutable borrow of the guard makes this
        // the only reference through it.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<T> {
    #[inline]
    fn drop(&mut self) {
        if self.mutex.is_none() {
            self.lock.held.store(false, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_guards_are_exclusive_and_mode_ends_for_good() {
        static L: EngineLock<u32> = EngineLock::new(0);
        {
            let mut g = L.lock();
            *g += 1;
            assert!(L.try_lock().is_none(), "the mutex is held");
        }
        // SAFETY: this test is the lock's only user.
        assert!(unsafe { L.enter_serial(false) });
        {
            let mut g = L.lock();
            *g += 1;
            assert!(L.try_lock().is_none(), "a serial guard is out");
        }
        assert_eq!(*L.try_lock().expect("free again"), 2);
        L.leave_serial();
        assert!(!L.serial());
        let g = L.lock();
        assert!(g.mutex.is_some(), "the mutex again");
        drop(g);
        // SAFETY: as above.
        assert!(!unsafe { L.enter_serial(true) }, "refused");
        assert!(!L.serial());
    }

    #[test]
    fn a_re_entrant_serial_lock_fails_loudly() {
        static L: EngineLock<u32> = EngineLock::new(0);
        // SAFETY: this test is the lock's only user.
        assert!(unsafe { L.enter_serial(false) });
        let _g = L.lock();
        let again = std::panic::catch_unwind(|| drop(L.lock()));
        assert!(again.is_err());
    }
}
