//! The contended waits each task has open.
//!
//! Waits nest: a task queued on a mutex, rwsem or other sleeping lock goes on contending
//! for spinlocks inside the slow path (the lock's wait_lock, the runqueue lock in
//! schedule()), and each inner wait traces its own begin and end between the outer wait's
//! begin and end. Replacing the outer wait with the inner one lost the outer wait, and with
//! it the holder that released it.
//!
//! Nothing else nests: a task cannot start waiting for a sleeping lock while it waits for
//! another, nor for anything while it spins (an interrupt contending while its task spins
//! is the exception, and rare). A begin that cannot nest in what is open therefore means
//! the open waits' ends were lost, and it replaces them, so a lost end never turns the
//! next wait on that lock into a much longer one.

use foldhash::HashMap;

use crate::spinlocks::is_spinning_lock;

/// A wait on one lock, with the flags its contention_begin gave.
pub(crate) trait Wait {
    fn lock(&self) -> u64;
    fn flags(&self) -> u32;
}

impl Wait for (u64, u32) {
    fn lock(&self) -> u64 {
        self.0
    }

    fn flags(&self) -> u32 {
        self.1
    }
}

/// Whether a wait with flags `inner` can begin while one with flags `outer` is open.
fn nests(outer: u32, inner: u32) -> bool {
    !is_spinning_lock(outer) && is_spinning_lock(inner)
}

/// The innermost of `waits` (one task's, outermost first) on `lock`: a mutex's second begin,
/// when it stops spinning and sleeps, continues that wait.
pub(crate) fn find<W: Wait>(waits: &mut [W], lock: u64) -> Option<&mut W> {
    waits.iter_mut().rev().find(|w| w.lock() == lock)
}

/// Opens `wait` in what `waits` holds; returns the waits it replaced (outermost first).
pub(crate) fn open<W: Wait>(waits: &mut Vec<W>, wait: W) -> Vec<W> {
    let keep = waits
        .iter()
        .rposition(|outer| nests(outer.flags(), wait.flags()))
        .map_or(0, |at| at + 1);
    let replaced = waits.split_off(keep);
    waits.push(wait);
    replaced
}

/// Closes the innermost of `waits` on `lock`, with the waits opened inside it whose ends
/// were lost (outermost first); `None` for an end without a begin.
pub(crate) fn close<W: Wait>(waits: &mut Vec<W>, lock: u64) -> Option<(W, Vec<W>)> {
    let at = waits.iter().rposition(|w| w.lock() == lock)?;
    let inner = waits.split_off(at + 1);
    let wait = waits.pop().expect("position found above");
    Some((wait, inner))
}

/// Every task's open waits.
pub(crate) struct OpenWaits<W> {
    tasks: HashMap<i32, Vec<W>>,
}

impl<W> Default for OpenWaits<W> {
    fn default() -> Self {
        OpenWaits {
            tasks: HashMap::default(),
        }
    }
}

impl<W: Wait> OpenWaits<W> {
    /// [`find`] in the task's waits.
    pub(crate) fn on(&mut self, pid: i32, lock: u64) -> Option<&mut W> {
        find(self.tasks.get_mut(&pid)?, lock)
    }

    /// [`open`] in the task's waits.
    pub(crate) fn open(&mut self, pid: i32, wait: W) -> Vec<W> {
        open(self.tasks.entry(pid).or_default(), wait)
    }

    /// [`close`] in the task's waits.
    pub(crate) fn close(&mut self, pid: i32, lock: u64) -> Option<(W, Vec<W>)> {
        let waits = self.tasks.get_mut(&pid)?;
        let closed = close(waits, lock);
        if waits.is_empty() {
            self.tasks.remove(&pid);
        }
        closed
    }

    /// The task's open waits, outermost first.
    pub(crate) fn of_mut(&mut self, pid: i32) -> &mut [W] {
        self.tasks
            .get_mut(&pid)
            .map_or(&mut [], |w| w.as_mut_slice())
    }

    /// Every open wait of every task.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &W> {
        self.tasks.values().flatten()
    }

    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (i32, W)> + '_ {
        self.tasks
            .drain()
            .flat_map(|(pid, waits)| waits.into_iter().map(move |w| (pid, w)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscale_trace::decode::views::contention_flags as flag;

    const MUTEX_SPINNING: u32 = flag::MUTEX | flag::SPIN;
    const RWSEM_WRITE: u32 = flag::WRITE;

    #[test]
    fn a_spinlock_wait_nests_in_a_sleeping_lock_wait_which_ends_later() {
        let mut waits: Vec<(u64, u32)> = Vec::new();
        assert!(open(&mut waits, (0x10, MUTEX_SPINNING)).is_empty());
        find(&mut waits, 0x10).unwrap().1 = flag::MUTEX;
        // The runqueue lock in schedule(), then the mutex's own wait_lock.
        assert!(open(&mut waits, (0x20, flag::SPIN)).is_empty());
        assert_eq!(close(&mut waits, 0x20), Some(((0x20, flag::SPIN), vec![])));
        assert!(open(&mut waits, (0x30, flag::SPIN)).is_empty());
        assert_eq!(close(&mut waits, 0x30), Some(((0x30, flag::SPIN), vec![])));
        assert_eq!(close(&mut waits, 0x10), Some(((0x10, flag::MUTEX), vec![])));
        assert_eq!(close(&mut waits, 0x10), None);
        assert!(waits.is_empty());
    }

    #[test]
    fn a_begin_that_cannot_nest_replaces_waits_whose_ends_were_lost() {
        let mut waits: Vec<(u64, u32)> = Vec::new();
        open(&mut waits, (0x10, flag::MUTEX));
        open(&mut waits, (0x20, flag::SPIN));
        // A spinning task waits for nothing else: the spinlock's end was lost.
        assert_eq!(
            open(&mut waits, (0x30, flag::SPIN)),
            vec![(0x20, flag::SPIN)]
        );
        assert_eq!(waits, vec![(0x10, flag::MUTEX), (0x30, flag::SPIN)]);
        // Nor does a task queued on a sleeping lock queue on another.
        assert_eq!(
            open(&mut waits, (0x40, RWSEM_WRITE)),
            vec![(0x10, flag::MUTEX), (0x30, flag::SPIN)]
        );
        assert_eq!(waits, vec![(0x40, RWSEM_WRITE)]);
    }

    #[test]
    fn an_outer_end_closes_inner_waits_whose_ends_were_lost() {
        let mut open_waits: OpenWaits<(u64, u32)> = OpenWaits::default();
        open_waits.open(7, (0x10, flag::MUTEX));
        open_waits.open(7, (0x20, flag::SPIN));
        assert_eq!(open_waits.close(7, 0x99), None);
        assert_eq!(
            open_waits.close(7, 0x10),
            Some(((0x10, flag::MUTEX), vec![(0x20, flag::SPIN)]))
        );
        assert_eq!(open_waits.iter().count(), 0);
        assert!(open_waits.of_mut(7).is_empty());
    }
}
