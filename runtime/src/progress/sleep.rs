//! How an idle rank sleeps when several btls can wake it.
//!
//! When the driver is built it picks one *sleeper*, a btl with a
//! [`Btl::waker`] (preferring one that cannot itself watch: shm), provided
//! every other btl can watch ([`Btl::can_watch`]). An idle rank then arms
//! the others ([`Btl::watch`], which may also shorten or cancel the sleep),
//! sleeps in the sleeper for the whole timeout and disarms them
//! ([`Btl::unwatch`]): a message on any transport wakes it at once, and an
//! idle rank wakes only at its timeout. Without such a sleeper
//! ([`Sleep::pick`] is `None` with several btls) it waits in each btl in
//! turn for a share of the timeout.

use std::sync::Arc;
use std::time::Duration;

use gmpi_btl::{Btl, Wake};

/// The sleeper and its watchers.
pub(crate) struct Sleep {
    /// The btl it sleeps in.
    sleeper: usize,
    /// Interrupts the sleeper's wait.
    wake: Arc<dyn Wake>,
    /// Every other btl: each watches while the rank sleeps.
    watchers: Vec<usize>,
}

impl Sleep {
    /// Pick the sleeper: a btl with a waker, preferring those that cannot
    /// watch; `None` with a single btl or when some other btl cannot watch.
    pub fn pick(btls: &[Box<dyn Btl>]) -> Option<Sleep> {
        if btls.len() < 2 {
            return None;
        }
        let watchable: Vec<bool> = btls.iter().map(|b| b.can_watch()).collect();
        if watchable.iter().filter(|w| !**w).count() > 1 {
            return None;
        }
        // At most one btl cannot watch: it must be the sleeper. Otherwise the
        // first with a waker. `waker` is asked once per btl at most.
        let (sleeper, wake) = match watchable.iter().position(|w| !*w) {
            Some(i) => (i, btls[i].waker()?),
            None => btls
                .iter()
                .enumerate()
                .find_map(|(i, b)| b.waker().map(|w| (i, w)))?,
        };
        Some(Sleep {
            sleeper,
            wake,
            watchers: (0..btls.len()).filter(|&i| i != sleeper).collect(),
        })
    }

    /// What interrupts the sleep.
    pub fn wake(&self) -> Arc<dyn Wake> {
        Arc::clone(&self.wake)
    }

    /// Sleep in the sleeper for at most `timeout` while the others watch.
    pub fn sleep(&self, btls: &mut [Box<dyn Btl>], timeout: Duration) {
        let mut t = timeout;
        let mut armed = 0;
        for &w in &self.watchers {
            t = t.min(btls[w].watch(&self.wake, t));
            armed += 1;
            if t.is_zero() {
                break;
            }
        }
        if !t.is_zero() {
            btls[self.sleeper].wait(t);
        }
        for &w in &self.watchers[..armed] {
            btls[w].unwatch();
        }
    }
}

/// Without a sleeper: a share of `timeout` in each btl in turn.
pub(crate) fn sleep_in_turn(btls: &mut [Box<dyn Btl>], timeout: Duration) {
    let n = btls.len().max(1) as u32;
    for b in btls {
        b.wait(timeout / n);
    }
}
