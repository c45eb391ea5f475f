//! What each kernel worker ran, from the workqueue events: which work function a worker
//! executed when, and which workqueue each function is queued on.
//!
//! A task asleep in a workqueue flush is woken by the worker that finished the last work
//! item; what that worker ran while the task slept is the wait's mechanism ("the
//! kvm-irqfd-cleanup worker ran irqfd_shutdown for 80% of it"). Memory: the last
//! [`MAX_ITEMS`] work items of each worker and one name per work function.

use std::collections::VecDeque;

use foldhash::HashMap;

use vmscale_trace::decode::views::{Work, WorkStep};

/// Work items kept per worker; older ones are dropped.
const MAX_ITEMS: usize = 256;

#[derive(Default)]
struct Worker {
    /// The work item running now: (start, function).
    current: Option<(u64, u64)>,
    /// Finished items, oldest first: (start, end, function).
    done: VecDeque<(u64, u64, u64)>,
}

#[derive(Default)]
pub(crate) struct WorkHistory {
    workers: HashMap<i32, Worker>,
    /// Work function -> the workqueue it was last queued on.
    queues: HashMap<u64, String>,
}

impl WorkHistory {
    /// Feeds one workqueue event of task `pid` at `ts`.
    pub(crate) fn observe(&mut self, pid: i32, ts: u64, work: &Work<'_>) {
        match work.step {
            WorkStep::Start => {
                self.workers.entry(pid).or_default().current = Some((ts, work.function));
            }
            WorkStep::End => {
                let worker = self.workers.entry(pid).or_default();
                if let Some((start, function)) = worker.current.take() {
                    if worker.done.len() >= MAX_ITEMS {
                        worker.done.pop_front();
                    }
                    worker.done.push_back((start, ts, function));
                }
            }
            WorkStep::Queue => {
                self.queues
                    .entry(work.function)
                    .or_insert_with(|| work.workqueue());
            }
        }
    }

    /// The time `worker` spent in each work function within `[from, to)`, by function.
    pub(crate) fn ran(&self, worker: i32, from: u64, to: u64) -> Vec<(u64, u64)> {
        let Some(state) = self.workers.get(&worker) else {
            return Vec::new();
        };
        let mut by_function: Vec<(u64, u64)> = Vec::new();
        let items = state
            .done
            .iter()
            .rev()
            .take_while(|item| item.1 > from)
            .copied()
            .chain(state.current.map(|(start, f)| (start, to, f)));
        for (start, end, function) in items {
            let overlap = end.min(to).saturating_sub(start.max(from));
            if overlap == 0 {
                continue;
            }
            match by_function.iter_mut().find(|(f, _)| *f == function) {
                Some(entry) => entry.1 += overlap,
                None => by_function.push((function, overlap)),
            }
        }
        by_function
    }

    /// The workqueue a work function was queued on, where the trace saw it queued.
    pub(crate) fn queue_of(&self, function: u64) -> Option<&str> {
        self.queues.get(&function).map(String::as_str)
    }
}
