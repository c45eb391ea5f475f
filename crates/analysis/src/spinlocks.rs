//! Contended spinning locks (spinlocks and rwlocks such as kvm->mmu_lock), by wait mode.
//!
//! A spinning waiter is never woken: it notices the release itself, so nothing in the trace
//! names the holder. What the trace does show is how long each mode waited, and whether
//! readers kept getting an rwlock while a writer waited (writer starvation). Only contended
//! acquisitions are traced, so readers that took the lock without waiting are invisible.
//!
//! Streaming: one open wait per task and one aggregate per lock.

use std::collections::BTreeMap;

use foldhash::HashMap;

use vmscale_run::findings::{ModeWaits, SpinLockWaits};
use vmscale_run::LockContention;
use vmscale_stats::StreamingSummary;
use vmscale_trace::decode::event::Event;
use vmscale_trace::decode::views::{contention_flags as flag, EventKind, ViewTag};

use crate::naming;

/// Locks kept in the findings, worst first.
const TOP_LOCKS: usize = 10;

/// Spinlocks and rwlocks: they spin, and nothing about them sleeps. A mutex's optimistic
/// spin (MUTEX | SPIN) is a sleeping lock's and belongs to the holders analysis.
pub fn is_spinning_lock(flags: u32) -> bool {
    flags & flag::SPIN != 0 && flags & (flag::MUTEX | flag::RT | flag::PERCPU) == 0
}

struct OpenWait {
    lock: u64,
    flags: u32,
    start: u64,
    /// Readers' contended waits on the lock that ended during this (writer's) wait.
    reads_seen: u64,
}

#[derive(Default)]
struct LockAgg {
    flags: Option<u32>,
    modes: BTreeMap<&'static str, StreamingSummary>,
    overtaken: u64,
    reads_during_writes: u64,
    open: u64,
}

/// The pass; feed it every event in time order, then [`SpinLocksPass::finish`].
#[derive(Default)]
pub struct SpinLocksPass {
    open: HashMap<i32, OpenWait>,
    locks: HashMap<u64, LockAgg>,
}

impl SpinLocksPass {
    /// The views [`SpinLocksPass::observe`] reads; other events change nothing.
    pub fn wants(tag: ViewTag) -> bool {
        matches!(tag, ViewTag::ContentionBegin | ViewTag::ContentionEnd)
    }

    pub fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        let pid = event.pid();
        match *kind {
            EventKind::ContentionBegin(begin) => {
                if !is_spinning_lock(begin.flags) {
                    // Another kind of wait replaces whatever this task had open.
                    self.open.remove(&pid);
                    return;
                }
                if self
                    .open
                    .get(&pid)
                    .is_some_and(|w| w.lock == begin.lock_addr)
                {
                    return;
                }
                self.open.insert(
                    pid,
                    OpenWait {
                        lock: begin.lock_addr,
                        flags: begin.flags,
                        start: event.ts(),
                        reads_seen: 0,
                    },
                );
            }
            EventKind::ContentionEnd(end) => {
                let Some(wait) = self.open.remove(&pid) else {
                    return;
                };
                if wait.lock != end.lock_addr {
                    self.open.insert(pid, wait);
                    return;
                }
                self.close(wait, event.ts());
            }
            _ => {}
        }
    }

    fn close(&mut self, wait: OpenWait, end: u64) {
        let waited = end.saturating_sub(wait.start);
        let is_reader = wait.flags & flag::READ != 0;
        if is_reader {
            // A reader got the lock: every writer still waiting on it was overtaken.
            let mut reads = 0;
            for other in self.open.values_mut() {
                if other.lock == wait.lock && other.flags & flag::WRITE != 0 {
                    other.reads_seen += 1;
                    reads = 1;
                }
            }
            self.locks.entry(wait.lock).or_default().reads_during_writes += reads;
        }
        let lock = self.locks.entry(wait.lock).or_default();
        lock.flags.get_or_insert(wait.flags);
        if wait.flags & flag::WRITE != 0 && wait.reads_seen > 0 {
            lock.overtaken += 1;
        }
        lock.modes
            .entry(naming::mode(wait.flags))
            .or_default()
            .record(waited);
    }

    /// The findings, worst lock first; `contention` gives the locks' names.
    pub fn finish(mut self, contention: &[LockContention]) -> Vec<SpinLockWaits> {
        for (_, wait) in self.open.drain() {
            let lock = self.locks.entry(wait.lock).or_default();
            lock.flags.get_or_insert(wait.flags);
            lock.open += 1;
        }
        let names: HashMap<u64, &str> = contention
            .iter()
            .map(|l| (l.lock_addr, l.name.as_str()))
            .collect();
        let mut out: Vec<SpinLockWaits> = self
            .locks
            .iter()
            .map(|(&addr, agg)| {
                let flags = agg.flags.unwrap_or(flag::SPIN);
                let kind = naming::kind(flags);
                let modes: Vec<ModeWaits> = agg
                    .modes
                    .iter()
                    .map(|(mode, waits)| ModeWaits {
                        mode: mode.to_string(),
                        waits: waits.summary(),
                        total_wait_ns: waits.total(),
                    })
                    .collect();
                SpinLockWaits {
                    lock_addr: addr,
                    name: names.get(&addr).map_or_else(
                        || format!("{} @{addr:#x}", naming::stack_name(kind, "", None)),
                        |n| n.to_string(),
                    ),
                    kind,
                    waits: agg.modes.values().map(|m| m.count()).sum(),
                    total_wait_ns: modes.iter().map(|m| m.total_wait_ns).sum(),
                    modes,
                    writer_waits_overtaken: agg.overtaken,
                    reads_during_writer_waits: agg.reads_during_writes,
                    open_waits: agg.open,
                }
            })
            .collect();
        out.sort_by(|a, b| {
            b.total_wait_ns
                .cmp(&a.total_wait_ns)
                .then(a.lock_addr.cmp(&b.lock_addr))
        });
        out.truncate(TOP_LOCKS);
        out
    }
}

impl crate::pass::Pass for SpinLocksPass {
    fn reads(&self, tag: ViewTag, _: crate::ViewTags) -> crate::pass::Reads {
        crate::pass::view_if(Self::wants(tag))
    }

    #[inline(always)]
    fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        SpinLocksPass::observe(self, event, kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_spinlocks_and_rwlocks_spin() {
        assert!(is_spinning_lock(flag::SPIN));
        assert!(is_spinning_lock(flag::SPIN | flag::WRITE));
        assert!(is_spinning_lock(flag::SPIN | flag::READ));
        assert!(!is_spinning_lock(flag::SPIN | flag::MUTEX));
        assert!(!is_spinning_lock(flag::READ));
    }

    #[test]
    fn a_reader_that_gets_the_lock_while_a_writer_waits_overtakes_it() {
        let mut pass = SpinLocksPass::default();
        let lock = 0x1000;
        pass.open.insert(
            1,
            OpenWait {
                lock,
                flags: flag::SPIN | flag::WRITE,
                start: 100,
                reads_seen: 0,
            },
        );
        pass.close(
            OpenWait {
                lock,
                flags: flag::SPIN | flag::READ,
                start: 110,
                reads_seen: 0,
            },
            150,
        );
        let writer = pass.open.remove(&1).unwrap();
        pass.close(writer, 400);
        let found = pass.finish(&[]);
        assert_eq!(found.len(), 1);
        let l = &found[0];
        assert_eq!(l.kind, vmscale_run::findings::LockKind::Rwlock);
        assert_eq!((l.waits, l.total_wait_ns), (2, 340));
        assert_eq!(
            (l.writer_waits_overtaken, l.reads_during_writer_waits),
            (1, 1)
        );
        let write = l.modes.iter().find(|m| m.mode == "write").unwrap();
        assert_eq!(write.waits.as_ref().unwrap().max_ns, 300);
    }
}
