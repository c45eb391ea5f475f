//! Who held the CPU while a watched task was runnable.
//!
//! A runnable task waits on one CPU's run queue: the one it was preempted on, or the one
//! its wakeup targeted. Whoever runs on that CPU meanwhile is what it waits behind. The
//! watch keeps, per CPU, the task on it now, and per watched task the CPU it is queued on
//! and since when its time was last credited; each context switch on a CPU credits its
//! queued tasks' time to the task that ran there until then. Memory is one entry per CPU
//! and per runnable watched task, never per event.

use foldhash::{HashMap, HashMapExt};

/// Who ran on a CPU, as far as the trace says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Occupant {
    /// A task (pid 0 is the idle task: the CPU was waking up or about to pick the task).
    Task(i32),
    /// No switch on that CPU was seen yet.
    Unknown,
}

#[derive(Default)]
pub(crate) struct RunqueueWatch {
    /// Per CPU: the task switched in last.
    current: Vec<Option<i32>>,
    /// Watched runnable tasks: (CPU queued on, credited up to).
    queued: HashMap<i32, (u32, u64)>,
}

impl RunqueueWatch {
    fn occupant(&self, cpu: u32) -> Occupant {
        match self.current.get(cpu as usize).copied().flatten() {
            Some(pid) => Occupant::Task(pid),
            None => Occupant::Unknown,
        }
    }

    /// A context switch on `cpu` at `ts` from `prev` to `next`: every watched task queued
    /// there waited behind the task that ran until now (`credit(watched, occupant, from,
    /// to)`). On a CPU with no switch seen before, that is `prev`, which has run there since
    /// the trace began: on an idle host, the idle task a woken thread waited for.
    pub(crate) fn switch(
        &mut self,
        cpu: u32,
        ts: u64,
        prev: i32,
        next: i32,
        mut credit: impl FnMut(i32, Occupant, u64, u64),
    ) {
        let occupant = match self.occupant(cpu) {
            Occupant::Unknown => Occupant::Task(prev),
            known => known,
        };
        for (&pid, (on, mark)) in self.queued.iter_mut() {
            if *on == cpu {
                if ts > *mark {
                    credit(pid, occupant, *mark, ts);
                }
                *mark = ts;
            }
        }
        let at = cpu as usize;
        if self.current.len() <= at {
            self.current.resize(at + 1, None);
        }
        self.current[at] = Some(next);
    }

    /// A watched task became runnable on `cpu` at `ts` (preempted there, or woken to it).
    pub(crate) fn enqueue(&mut self, pid: i32, cpu: u32, ts: u64) {
        self.queued.insert(pid, (cpu, ts));
    }

    /// A watched task stopped being runnable (it runs, sleeps or exited) at `ts`: its last
    /// stretch waited behind whoever holds its CPU.
    pub(crate) fn dequeue(
        &mut self,
        pid: i32,
        ts: u64,
        mut credit: impl FnMut(i32, Occupant, u64, u64),
    ) {
        if let Some((cpu, mark)) = self.queued.remove(&pid) {
            if ts > mark {
                credit(pid, self.occupant(cpu), mark, ts);
            }
        }
    }

    /// sched_wakeup names the CPU the scheduler chose, where sched_waking named the one the
    /// task last ran on: the task waits there from now on.
    pub(crate) fn requeue(
        &mut self,
        pid: i32,
        cpu: u32,
        ts: u64,
        mut credit: impl FnMut(i32, Occupant, u64, u64),
    ) {
        if let Some(&(on, mark)) = self.queued.get(&pid) {
            if on != cpu {
                if ts > mark {
                    credit(pid, self.occupant(on), mark, ts);
                }
                self.queued.insert(pid, (cpu, ts));
            }
        }
    }

    pub(crate) fn is_queued(&self, pid: i32) -> bool {
        self.queued.contains_key(&pid)
    }
}

/// The watched tasks' runnable time by who held the CPU, summed.
pub(crate) type CpuHolders = HashMap<Occupant, u64>;

pub(crate) fn new_holders() -> CpuHolders {
    HashMap::new()
}

/// The pid of [`fold_rest`]'s groups: the holders past the first few, the subject's own
/// apart from the rest, so that every nanosecond of runnable time keeps an owner.
pub const REST_PID: i32 = -2;

/// Keeps the first `keep` of `holders` (sorted, most first) and folds the others into one
/// entry for the subject's own tasks and one for everyone else's ("312 more of its own
/// tasks").
pub(crate) fn fold_rest(
    mut holders: Vec<vmscale_run::findings::CpuHolder>,
    keep: usize,
) -> Vec<vmscale_run::findings::CpuHolder> {
    if holders.len() <= keep {
        return holders;
    }
    let rest = holders.split_off(keep);
    for subject in [true, false] {
        let group: Vec<&vmscale_run::findings::CpuHolder> =
            rest.iter().filter(|h| h.subject == subject).collect();
        if group.is_empty() {
            continue;
        }
        holders.push(vmscale_run::findings::CpuHolder {
            comm: if subject {
                format!("{} more of its own tasks", group.len())
            } else {
                format!("{} more tasks", group.len())
            },
            pid: REST_PID,
            ns: group.iter().map(|h| h.ns).sum(),
            subject,
        });
    }
    holders
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_task_waits_behind_each_task_its_cpu_runs() {
        let mut watch = RunqueueWatch::default();
        let mut credited: Vec<(i32, Occupant, u64, u64)> = Vec::new();
        let mut credit = |w, o, a, b| credited.push((w, o, a, b));
        watch.switch(0, 0, 1, 10, &mut credit);
        // Task 7 is preempted on CPU 1 by nobody we know yet, then queued on CPU 0.
        watch.enqueue(7, 0, 5);
        watch.switch(0, 20, 10, 11, &mut credit);
        watch.switch(1, 25, 98, 99, &mut credit);
        watch.switch(0, 30, 11, 7, &mut credit);
        watch.dequeue(7, 30, &mut credit);
        assert_eq!(
            credited,
            [
                (7, Occupant::Task(10), 5, 20),
                (7, Occupant::Task(11), 20, 30)
            ]
        );
        // Queued on a CPU no switch was seen on: the holder is unknown.
        credited.clear();
        watch.enqueue(8, 3, 40);
        watch.dequeue(8, 50, |w, o, a, b| credited.push((w, o, a, b)));
        assert_eq!(credited, [(8, Occupant::Unknown, 40, 50)]);
        assert!(!watch.is_queued(8));
        // Queued on a CPU whose first switch comes later: the task it switches away from
        // had the CPU all along (here the idle task).
        credited.clear();
        watch.enqueue(9, 4, 60);
        watch.switch(4, 70, 0, 9, |w, o, a, b| credited.push((w, o, a, b)));
        assert_eq!(credited, [(9, Occupant::Task(0), 60, 70)]);
    }
}
