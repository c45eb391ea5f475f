//! What each task was doing over time: on a CPU, runnable, asleep (with the stack it slept
//! in), or waiting on a lock, as spans between the scheduler and lock events that change it.
//!
//! A holder is only identified when it releases the lock, so its activity is read back over
//! a window that is already past. Spans are therefore kept, but only back to a floor the
//! caller moves forward (the start of the oldest wait still open) and at most
//! [`MAX_SPANS`] per task: memory is bounded by tasks, never by events.

use std::collections::VecDeque;

use foldhash::HashMap;

use crate::open_waits;

/// Spans kept per task; older ones are dropped and the time they covered becomes unknown.
pub(crate) const MAX_SPANS: usize = 4096;

/// Index into the pass's interned stacks.
pub(crate) use crate::stacks::StackId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Activity {
    Running,
    Runnable,
    /// Switched out in a sleeping state; the stack arrives just after the switch.
    Asleep(Option<StackId>),
    /// Between its contention_begin and contention_end on this lock.
    Waiting(u64),
    /// Switched away by a context switch the trace misses, until it is seen again: what it
    /// did then is not known ([`UNSEEN`]).
    Unseen,
}

/// What [`Activity::Unseen`] time is said as, wherever a pass says it.
pub(crate) const UNSEEN: &str = "not traced: switched away by a context switch the trace misses";

#[derive(Debug, Clone, Copy)]
struct Span {
    start: u64,
    activity: Activity,
}

/// Why part of a window has no activity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Gap {
    /// Before the task's first traced event.
    BeforeFirstEvent,
    /// Older than the spans a task may keep.
    Trimmed,
}

#[derive(Default)]
struct Task {
    spans: VecDeque<Span>,
    /// Spans were dropped for [`MAX_SPANS`]: time before the first span is lost, not unseen.
    trimmed: bool,
    /// The locks this task waits on and their flags, outermost first (waits nest,
    /// [`crate::open_waits`]): a switch-out keeps the task waiting on the innermost.
    waiting_on: Vec<(u64, u32)>,
}

#[derive(Default)]
pub(crate) struct Timelines {
    tasks: HashMap<i32, Task>,
}

impl Timelines {
    fn set(&mut self, pid: i32, ts: u64, activity: Activity, floor: u64) {
        if pid == 0 {
            return;
        }
        let task = self.tasks.entry(pid).or_default();
        if task.spans.back().is_some_and(|s| s.activity == activity) {
            return;
        }
        task.spans.push_back(Span {
            start: ts,
            activity,
        });
        // Keep the span that covers the floor; everything before it can no longer be asked.
        while task.spans.len() > 1 && task.spans[1].start <= floor {
            task.spans.pop_front();
        }
        if task.spans.len() > MAX_SPANS {
            task.spans.pop_front();
            task.trimmed = true;
        }
    }

    /// The task traced an event of its own: it is on a CPU. Before any switch of it was
    /// seen, from here on (what it did before is unknown); after one that left it runnable
    /// or asleep, its switch-in is missing from the trace (some hosts never trace events in
    /// the context of some of their own tasks, so a switch from one of them to this task
    /// is absent), and it runs from here, not from its next traced switch: otherwise all of
    /// that running reads as runnable time. A lock wait stays a wait (a spinning waiter
    /// runs). Once a task has a span it keeps at least one.
    pub(crate) fn seen_running(&mut self, pid: i32, ts: u64, floor: u64) {
        match self.current(pid) {
            None | Some(Activity::Runnable | Activity::Asleep(_) | Activity::Unseen) => {
                let activity = self
                    .waiting(pid)
                    .map_or(Activity::Running, Activity::Waiting);
                self.set(pid, ts, activity, floor);
            }
            Some(Activity::Running) | Some(Activity::Waiting(_)) => {}
        }
    }

    /// What the task is doing now, as far as its spans say.
    pub(crate) fn current(&self, pid: i32) -> Option<Activity> {
        self.tasks.get(&pid)?.spans.back().map(|s| s.activity)
    }

    /// The lock the task is waiting on now: the innermost of its open waits.
    fn waiting(&self, pid: i32) -> Option<u64> {
        self.tasks
            .get(&pid)?
            .waiting_on
            .last()
            .map(|&(lock, _)| lock)
    }

    /// Another task's event came on the CPU the task was running on, `at` being its own
    /// last there: its switch away is missing from the trace (a host that never traces some
    /// of its own tasks, or a lost page). Its running ends at `at`; a lock wait stays one.
    pub(crate) fn switched_away_unseen(&mut self, pid: i32, at: u64, floor: u64) {
        if self.current(pid) == Some(Activity::Running) {
            let since = self.tasks[&pid].spans.back().map_or(at, |s| s.start);
            self.set(pid, at.max(since), Activity::Unseen, floor);
        }
    }

    pub(crate) fn switched_in(&mut self, pid: i32, ts: u64, floor: u64) {
        let waiting = self.waiting(pid);
        self.set(
            pid,
            ts,
            waiting.map_or(Activity::Running, Activity::Waiting),
            floor,
        );
    }

    /// `sleeping`: switched out in a sleeping state (not preempted).
    pub(crate) fn switched_out(&mut self, pid: i32, ts: u64, sleeping: bool, floor: u64) {
        let waiting = self.waiting(pid);
        let activity = match (waiting, sleeping) {
            (Some(lock), _) => Activity::Waiting(lock),
            (None, true) => Activity::Asleep(None),
            (None, false) => Activity::Runnable,
        };
        self.set(pid, ts, activity, floor);
    }

    /// Woken by another task: runnable until it is switched in (a lock waiter stays waiting).
    pub(crate) fn woken(&mut self, pid: i32, ts: u64, floor: u64) {
        let Some(task) = self.tasks.get(&pid) else {
            return;
        };
        if matches!(
            task.spans.back().map(|s| s.activity),
            Some(Activity::Asleep(_))
        ) {
            self.set(pid, ts, Activity::Runnable, floor);
        }
    }

    /// The stack recorded right after the task's sleeping switch-out.
    pub(crate) fn slept_in(&mut self, pid: i32, stack: StackId) {
        if let Some(span) = self.tasks.get_mut(&pid).and_then(|t| t.spans.back_mut()) {
            if span.activity == Activity::Asleep(None) {
                span.activity = Activity::Asleep(Some(stack));
            }
        }
    }

    pub(crate) fn wait_begins(&mut self, pid: i32, ts: u64, lock: u64, flags: u32, floor: u64) {
        if pid == 0 {
            return;
        }
        let waits = &mut self.tasks.entry(pid).or_default().waiting_on;
        match open_waits::find(waits, lock) {
            Some(wait) => wait.1 = flags,
            None => {
                open_waits::open(waits, (lock, flags));
            }
        }
        self.set(pid, ts, Activity::Waiting(lock), floor);
    }

    /// The wait on `lock` is over, with any opened inside it (their ends were lost), and
    /// the task, which traced the end, is on a CPU: running, or back in the wait it nested
    /// in.
    pub(crate) fn wait_ends(&mut self, pid: i32, ts: u64, lock: u64, floor: u64) {
        let outer = self.tasks.get_mut(&pid).and_then(|task| {
            open_waits::close(&mut task.waiting_on, lock);
            task.waiting_on.last().map(|&(lock, _)| lock)
        });
        self.set(
            pid,
            ts,
            outer.map_or(Activity::Running, Activity::Waiting),
            floor,
        );
    }

    /// Splits `[from, to)` of the task's time by activity, calling `out` for every piece;
    /// time the spans do not cover comes as `Err` with the reason.
    pub(crate) fn split(
        &self,
        pid: i32,
        from: u64,
        to: u64,
        mut out: impl FnMut(Result<Activity, Gap>, u64),
    ) {
        if to <= from {
            return;
        }
        let Some(task) = self.tasks.get(&pid).filter(|t| !t.spans.is_empty()) else {
            out(Err(Gap::BeforeFirstEvent), to - from);
            return;
        };
        let first = task.spans[0].start;
        if from < first {
            let reason = if task.trimmed {
                Gap::Trimmed
            } else {
                Gap::BeforeFirstEvent
            };
            out(Err(reason), first.min(to) - from);
        }
        for (index, span) in task.spans.iter().enumerate() {
            let end = task.spans.get(index + 1).map_or(u64::MAX, |s| s.start);
            let a = span.start.max(from);
            let b = end.min(to);
            if b > a {
                out(Ok(span.activity), b - a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscale_trace::decode::views::contention_flags::{MUTEX, SPIN};

    fn pieces(t: &Timelines, pid: i32, from: u64, to: u64) -> Vec<(String, u64)> {
        let mut v = Vec::new();
        t.split(pid, from, to, |piece, n| match piece {
            Ok(a) => v.push((format!("{a:?}"), n)),
            Err(g) => v.push((format!("{g:?}"), n)),
        });
        v
    }

    #[test]
    fn a_window_splits_into_running_asleep_and_runnable() {
        let mut t = Timelines::default();
        t.switched_in(7, 100, 0);
        t.switched_out(7, 150, true, 0);
        t.slept_in(7, 3);
        t.woken(7, 400, 0);
        t.switched_in(7, 420, 0);
        assert_eq!(
            pieces(&t, 7, 50, 500),
            vec![
                ("BeforeFirstEvent".to_string(), 50),
                ("Running".to_string(), 50),
                ("Asleep(Some(3))".to_string(), 250),
                ("Runnable".to_string(), 20),
                ("Running".to_string(), 80),
            ]
        );
    }

    #[test]
    fn a_task_seen_running_after_a_switch_out_runs_from_then() {
        // Preempted, then an event of its own with no switch-in traced (the task that had
        // the CPU is one whose events the host never traces): running from that event.
        let mut t = Timelines::default();
        t.switched_in(7, 100, 0);
        t.switched_out(7, 150, false, 0);
        t.seen_running(7, 170, 0);
        t.switched_out(7, 300, true, 0);
        t.seen_running(7, 320, 0);
        t.seen_running(7, 330, 0);
        assert_eq!(
            pieces(&t, 7, 100, 400),
            vec![
                ("Running".to_string(), 50),
                ("Runnable".to_string(), 20),
                ("Running".to_string(), 130),
                ("Asleep(None)".to_string(), 20),
                ("Running".to_string(), 80),
            ]
        );
        // A lock wait stays a wait while the waiter spins.
        t.wait_begins(7, 400, 0xabc, 0, 0);
        t.switched_out(7, 410, false, 0);
        t.seen_running(7, 420, 0);
        assert_eq!(t.current(7), Some(Activity::Waiting(0xabc)));
    }

    #[test]
    fn a_lock_wait_outlasts_switches_and_the_floor_drops_old_spans() {
        let mut t = Timelines::default();
        t.switched_in(7, 100, 0);
        t.wait_begins(7, 110, 0xabc, MUTEX, 0);
        t.switched_out(7, 120, true, 0);
        t.woken(7, 200, 0);
        t.switched_in(7, 210, 0);
        t.wait_ends(7, 215, 0xabc, 0);
        assert_eq!(
            pieces(&t, 7, 100, 220),
            vec![
                ("Running".to_string(), 10),
                ("Waiting(2748)".to_string(), 105),
                ("Running".to_string(), 5),
            ]
        );
        t.switched_out(7, 300, false, 250);
        // Spans ending before the floor are gone; the one covering it stays.
        assert_eq!(pieces(&t, 7, 250, 310)[0], ("Running".to_string(), 50));
        assert_eq!(pieces(&t, 7, 100, 101)[0].0, "BeforeFirstEvent");
    }

    #[test]
    fn a_spinlock_wait_inside_a_mutex_wait_returns_to_the_mutex_wait() {
        let mut t = Timelines::default();
        t.switched_in(7, 100, 0);
        t.wait_begins(7, 110, 0xabc, MUTEX | SPIN, 0);
        t.wait_begins(7, 112, 0xabc, MUTEX, 0);
        t.wait_begins(7, 114, 0xdef, SPIN, 0);
        t.wait_ends(7, 118, 0xdef, 0);
        t.switched_out(7, 120, true, 0);
        t.woken(7, 200, 0);
        t.switched_in(7, 210, 0);
        t.wait_ends(7, 215, 0xabc, 0);
        assert_eq!(
            pieces(&t, 7, 100, 220),
            vec![
                ("Running".to_string(), 10),
                ("Waiting(2748)".to_string(), 4),
                ("Waiting(3567)".to_string(), 4),
                ("Waiting(2748)".to_string(), 97),
                ("Running".to_string(), 5),
            ]
        );
    }
}
