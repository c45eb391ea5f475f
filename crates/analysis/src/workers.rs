//! What each kernel worker ran, from the workqueue events: which work function a worker
//! executed when, and which workqueue each function is queued on.
//!
//! A task asleep in a workqueue flush is woken by the worker that finished the last work
//! item; what that worker ran while the task slept is the wait's mechanism ("the
//! kvm-irqfd-cleanup worker ran irqfd_shutdown for 80% of it"), and who queued each item
//! says whose work that was: a flush waits for every item queued before it, so a thread
//! can wait for work its sibling threads queued. Memory: the last [`MAX_ITEMS`] work items
//! of each worker, one name per work function, and the items queued and not yet started
//! (at most [`MAX_QUEUED`]).

use std::collections::VecDeque;

use foldhash::HashMap;

use vmscale_trace::decode::views::{Work, WorkStep};

/// Work items kept per worker; older ones are dropped.
const MAX_ITEMS: usize = 256;

/// Items queued and not yet started that are remembered with their queuer. Items a trace
/// saw queued but never run would otherwise pile up; past this, the oldest are forgotten
/// and the work they start is said with no queuer.
const MAX_QUEUED: usize = 1 << 16;

/// One work item a worker ran: when, which function, and who queued it (0: not seen).
#[derive(Clone, Copy)]
struct Item {
    start: u64,
    end: u64,
    function: u64,
    queued_by: i32,
}

#[derive(Default)]
struct Worker {
    /// The work item running now (its `end` unknown yet).
    current: Option<Item>,
    /// Finished items, oldest first.
    done: VecDeque<Item>,
}

#[derive(Default)]
pub(crate) struct WorkHistory {
    workers: HashMap<i32, Worker>,
    /// Work function -> the workqueue it was last queued on.
    queues: HashMap<u64, String>,
    /// Work item -> the task that queued it and the queueing's number, until a worker
    /// starts it.
    queued_by: HashMap<u64, (i32, u64)>,
    /// Queueings in order (item, number), to forget the oldest past [`MAX_QUEUED`].
    queue_order: VecDeque<(u64, u64)>,
    seq: u64,
}

/// Time a worker spent in one work function that one task queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ran {
    pub function: u64,
    /// The task that queued the items (0: not seen queued).
    pub queued_by: i32,
    pub ns: u64,
}

impl WorkHistory {
    /// Feeds one workqueue event of task `pid` at `ts`.
    pub(crate) fn observe(&mut self, pid: i32, ts: u64, work: &Work<'_>) {
        match work.step {
            WorkStep::Start => {
                let queued_by = match work.work {
                    0 => 0,
                    item => self.queued_by.remove(&item).map_or(0, |(pid, _)| pid),
                };
                self.workers.entry(pid).or_default().current = Some(Item {
                    start: ts,
                    end: ts,
                    function: work.function,
                    queued_by,
                });
            }
            WorkStep::End => {
                let worker = self.workers.entry(pid).or_default();
                if let Some(mut item) = worker.current.take() {
                    if worker.done.len() >= MAX_ITEMS {
                        worker.done.pop_front();
                    }
                    item.end = ts;
                    worker.done.push_back(item);
                }
            }
            WorkStep::Queue => {
                self.queues
                    .entry(work.function)
                    .or_insert_with(|| work.workqueue());
                if work.work != 0 {
                    self.seq += 1;
                    self.queued_by.insert(work.work, (pid, self.seq));
                    self.queue_order.push_back((work.work, self.seq));
                    // Forget the oldest queueings still waiting; an entry whose item was
                    // started (or queued again since) is only dropped from the order.
                    let queued_by = &mut self.queued_by;
                    let current = |&(item, seq): &(u64, u64)| {
                        queued_by.get(&item).is_some_and(|&(_, s)| s == seq)
                    };
                    if self.queue_order.len() > 2 * MAX_QUEUED {
                        self.queue_order.retain(current);
                    }
                    while self.queue_order.len() > MAX_QUEUED {
                        if let Some((item, seq)) = self.queue_order.pop_front() {
                            if queued_by.get(&item).is_some_and(|&(_, s)| s == seq) {
                                queued_by.remove(&item);
                            }
                        }
                    }
                }
            }
        }
    }

    /// The time `worker` spent within `[from, to)`, by work function and queuer.
    pub(crate) fn ran(&self, worker: i32, from: u64, to: u64) -> Vec<Ran> {
        let Some(state) = self.workers.get(&worker) else {
            return Vec::new();
        };
        let mut out: Vec<Ran> = Vec::new();
        let items = state
            .done
            .iter()
            .rev()
            .take_while(|item| item.end > from)
            .copied()
            .chain(state.current.map(|item| Item { end: to, ..item }));
        for item in items {
            let overlap = item.end.min(to).saturating_sub(item.start.max(from));
            if overlap == 0 {
                continue;
            }
            match out
                .iter_mut()
                .find(|r| r.function == item.function && r.queued_by == item.queued_by)
            {
                Some(entry) => entry.ns += overlap,
                None => out.push(Ran {
                    function: item.function,
                    queued_by: item.queued_by,
                    ns: overlap,
                }),
            }
        }
        out
    }

    /// The work function `worker` is running now, if any.
    pub(crate) fn running(&self, worker: i32) -> Option<u64> {
        self.workers.get(&worker)?.current.map(|item| item.function)
    }

    /// The workqueue a work function was queued on, where the trace saw it queued.
    pub(crate) fn queue_of(&self, function: u64) -> Option<&str> {
        self.queues.get(&function).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHUTDOWN: u64 = 0xffff_ffff_8100_0000;

    fn feed(history: &mut WorkHistory, pid: i32, ts: u64, step: WorkStep, item: u64) {
        history.observe(
            pid,
            ts,
            &Work::new(step, item, SHUTDOWN, b"kvm-irqfd-cleanup\0"),
        );
    }

    #[test]
    fn each_item_run_is_said_with_the_task_that_queued_it() {
        let mut h = WorkHistory::default();
        // Two threads queue an item each; one worker runs both, then one nobody was seen
        // queueing.
        feed(&mut h, 10, 0, WorkStep::Queue, 0xa);
        feed(&mut h, 11, 5, WorkStep::Queue, 0xb);
        feed(&mut h, 99, 10, WorkStep::Start, 0xb);
        feed(&mut h, 99, 30, WorkStep::End, 0xb);
        feed(&mut h, 99, 30, WorkStep::Start, 0xa);
        feed(&mut h, 99, 40, WorkStep::End, 0xa);
        feed(&mut h, 99, 40, WorkStep::Start, 0xc);
        let mut ran = h.ran(99, 0, 50);
        ran.sort_by_key(|r| r.queued_by);
        let by: Vec<(i32, u64)> = ran.iter().map(|r| (r.queued_by, r.ns)).collect();
        assert_eq!(by, [(0, 10), (10, 10), (11, 20)]);
        assert_eq!(h.queue_of(SHUTDOWN), Some("kvm-irqfd-cleanup"));
        // An item queued again after it ran belongs to its new queuer.
        feed(&mut h, 12, 50, WorkStep::Queue, 0xa);
        feed(&mut h, 98, 60, WorkStep::Start, 0xa);
        assert_eq!(h.ran(98, 60, 70)[0].queued_by, 12);
    }

    #[test]
    fn items_never_started_are_forgotten_past_the_bound() {
        let mut h = WorkHistory::default();
        for item in 0..(3 * MAX_QUEUED as u64) {
            feed(&mut h, 10, item, WorkStep::Queue, item + 1);
        }
        assert!(h.queued_by.len() <= MAX_QUEUED);
        assert!(h.queue_order.len() <= 2 * MAX_QUEUED);
        // The newest is still known.
        let last = 3 * MAX_QUEUED as u64;
        feed(&mut h, 99, last, WorkStep::Start, last);
        assert_eq!(h.ran(99, last, last + 1)[0].queued_by, 10);
    }
}
