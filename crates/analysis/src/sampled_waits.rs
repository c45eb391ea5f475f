//! Which on-CPU samples fell inside their task's traced lock wait.
//!
//! A waiter that spins is on a CPU while the trace counts it as waiting: a spinlock's
//! queue, a mutex's optimistic spin on its running owner (the kernel opens the wait with
//! `contention_begin` before it spins). Its samples are that lock's wait, which is a
//! finding of its own, and not the task's own work: an on-CPU finding made of them would
//! say "not waiting for anything: mostly mutex_spin_on_owner". The samples are matched to
//! the waits in the trace's own pass: sorted by time, each is classified at the first
//! contention event after it, by what its task waited on just before that event. Memory
//! grows with the samples (already a file of their own) and the sampled tasks, not with
//! the events.

use std::collections::HashMap;
use std::path::Path;

use vmscale_sample::Samples;
use vmscale_trace::{Event, EventKind, ViewTag};

/// The pass; [`SampledWaits::load`] reads the samples' times first.
pub struct SampledWaits {
    /// (time, thread, place in the samples' reading order), by time.
    samples: Vec<(u64, i32, u32)>,
    /// The first sample not yet classified.
    next: usize,
    /// Per sampled thread, the locks it waits on now with their flags (innermost last),
    /// kept by the rules every pass keeps open waits by ([`crate::open_waits`]): a begin
    /// that cannot nest replaces what a lost end left open.
    open: HashMap<i32, Vec<(u64, u32)>>,
    in_wait: SamplesInWaits,
}

/// The samples, by their place in [`Samples::for_each`]'s order, taken while their thread
/// waited for a lock as the trace shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SamplesInWaits {
    bits: Vec<u64>,
}

impl SamplesInWaits {
    /// Whether the sample at `index` of the reading order was taken inside a lock wait.
    pub fn contains(&self, index: usize) -> bool {
        self.bits
            .get(index / 64)
            .is_some_and(|word| word & (1 << (index % 64)) != 0)
    }

    fn insert(&mut self, index: usize) {
        if self.bits.len() <= index / 64 {
            self.bits.resize(index / 64 + 1, 0);
        }
        self.bits[index / 64] |= 1 << (index % 64);
    }

    pub fn len(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.bits.iter().all(|&w| w == 0)
    }
}

impl SampledWaits {
    /// The samples of `trace_dir`, or `None` where it has none (or they cannot be read:
    /// the on-CPU paths then have none either).
    pub fn load(trace_dir: &Path) -> Option<SampledWaits> {
        if !Samples::exist(trace_dir) {
            return None;
        }
        let samples = Samples::open(trace_dir).ok()?;
        Some(Self::from_samples(Self::times(&samples)?))
    }

    /// (time, thread) of each sample, in reading order.
    fn times(samples: &Samples) -> Option<Vec<(u64, i32)>> {
        let mut out = Vec::new();
        samples.for_each(|s| out.push((s.ts, s.tid as i32))).ok()?;
        Some(out)
    }

    fn from_samples(times: Vec<(u64, i32)>) -> SampledWaits {
        let mut samples: Vec<(u64, i32, u32)> = times
            .into_iter()
            .enumerate()
            .map(|(i, (ts, tid))| (ts, tid, i as u32))
            .collect();
        samples.sort_unstable();
        let open = samples
            .iter()
            .filter(|s| s.1 > 0)
            .map(|s| (s.1, Vec::new()))
            .collect();
        SampledWaits {
            samples,
            next: 0,
            open,
            in_wait: SamplesInWaits::default(),
        }
    }

    /// Classifies the samples taken before `ts` by their threads' waits now.
    fn classify_before(&mut self, ts: u64) {
        while let Some(&(at, tid, index)) = self.samples.get(self.next) {
            if at >= ts {
                break;
            }
            if self.open.get(&tid).is_some_and(|locks| !locks.is_empty()) {
                self.in_wait.insert(index as usize);
            }
            self.next += 1;
        }
    }

    pub fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        let (lock, begins) = match kind {
            EventKind::ContentionBegin(b) => (b.lock_addr, Some(b.flags)),
            EventKind::ContentionEnd(e) => (e.lock_addr, None),
            _ => return,
        };
        self.wait_changed(event.pid(), event.ts(), lock, begins);
    }

    /// `pid` began waiting for `lock` with `flags` at `ts`, or with `None` ended it.
    fn wait_changed(&mut self, pid: i32, ts: u64, lock: u64, begins: Option<u32>) {
        self.classify_before(ts);
        let Some(waits) = self.open.get_mut(&pid) else {
            return;
        };
        match begins {
            // A mutex's second begin (it stops spinning and sleeps) continues its wait.
            Some(flags) => match crate::open_waits::find(waits, lock) {
                Some(wait) => wait.1 = flags,
                None => {
                    crate::open_waits::open(waits, (lock, flags));
                }
            },
            None => {
                crate::open_waits::close(waits, lock);
            }
        }
    }

    /// The samples inside waits, the rest classified by the waits still open at the end.
    pub fn finish(mut self) -> SamplesInWaits {
        self.classify_before(u64::MAX);
        self.in_wait
    }
}

impl crate::pass::Pass for SampledWaits {
    fn reads(&self, tag: ViewTag, _: crate::ViewTags) -> crate::pass::Reads {
        crate::pass::view_if(matches!(
            tag,
            ViewTag::ContentionBegin | ViewTag::ContentionEnd
        ))
    }

    #[inline(always)]
    fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        SampledWaits::observe(self, event, kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_holds_what_was_inserted() {
        let mut set = SamplesInWaits::default();
        for i in [0, 63, 64, 200] {
            set.insert(i);
        }
        assert!(set.contains(0) && set.contains(63) && set.contains(64) && set.contains(200));
        assert!(!set.contains(1) && !set.contains(65) && !set.contains(10_000));
        assert_eq!(set.len(), 4);
    }

    #[test]
    fn samples_are_classified_by_their_threads_wait_at_that_time() {
        const MUTEX: u32 = 1 << 5 | 1;
        const SPIN: u32 = 1;
        // Thread 7 waits for a mutex from 10 to 30, on a spinlock inside it from 20 to 25.
        // A mutex's second begin (at 42, it stops spinning and sleeps) continues its wait,
        // ended at 50. The spinlock begun at 60 loses its end; the mutex begun at 70 cannot
        // nest in it, so it replaces it, and its end at 80 leaves nothing open. Thread 8 is
        // sampled inside 7's waits only; thread 9 waits but is never sampled.
        let mut pass = SampledWaits::from_samples(vec![
            (27, 7),
            (5, 7),
            (15, 7),
            (35, 7),
            (16, 8),
            (45, 7),
            (55, 7),
            (65, 7),
            (75, 7),
            (85, 7),
        ]);
        pass.wait_changed(7, 10, 1, Some(MUTEX));
        pass.wait_changed(9, 12, 1, Some(MUTEX));
        pass.wait_changed(7, 20, 2, Some(SPIN));
        pass.wait_changed(7, 25, 2, None);
        pass.wait_changed(7, 30, 1, None);
        pass.wait_changed(7, 40, 3, Some(MUTEX));
        pass.wait_changed(7, 42, 3, Some(MUTEX));
        pass.wait_changed(7, 50, 3, None);
        pass.wait_changed(7, 60, 4, Some(SPIN));
        pass.wait_changed(7, 70, 5, Some(MUTEX));
        pass.wait_changed(7, 80, 5, None);
        assert!(
            !pass.open.contains_key(&9),
            "an unsampled thread is not followed"
        );
        let set = pass.finish();
        // Reading order: 27 -> 0, 5 -> 1, 15 -> 2, 35 -> 3, 16 -> 4, 45 -> 5, 55 -> 6,
        // 65 -> 7, 75 -> 8, 85 -> 9.
        let inside: Vec<usize> = (0..10).filter(|&i| set.contains(i)).collect();
        assert_eq!(inside, vec![0, 2, 5, 7, 8]);
    }
}
