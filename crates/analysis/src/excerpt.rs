//! A short window of a trace around its worst lock wait, as lanes: the task on each CPU,
//! and for every task that waited on or held a lock in the window, its scheduler state and
//! its lock waits and holds. The HTML report draws it; the whole trace is the Perfetto
//! export's job.
//!
//! The window is only known once a first pass has found the wait, so this is a second
//! pass. It keeps one small state per CPU and per task, and slices only inside the window,
//! up to fixed caps, so memory stays bounded however long the trace is. Holds come from a
//! [`HoldersPass`] run alongside, so they are the same holds the explain section reports.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};

use vmscale_run::findings::{
    CpuLane, LockRole, LockSlice, RunSlice, StateSlice, TaskLane, TaskState, TimelineExcerpt,
};
use vmscale_trace::decode::event::Event;
use vmscale_trace::decode::views::EventKind;

use crate::holders::HoldersPass;
use crate::open_waits::{self, Wait};

/// Task lanes shown; more involved tasks than this set `truncated`.
const MAX_TASK_LANES: usize = 12;
/// Slices kept per lane, and in all, before `truncated` is set.
const MAX_SLICES_PER_LANE: usize = 2_000;
const MAX_SLICES: usize = 40_000;
/// Context on each side of the focused wait: a quarter of its length, within these bounds.
const MIN_PAD_NS: u64 = 100_000;
const MAX_PAD_NS: u64 = 50_000_000;

/// The wait a window is centred on.
#[derive(Debug, Clone)]
pub struct Focus {
    pub lock: u64,
    pub lock_name: String,
    pub pid: i32,
    pub comm: String,
    pub start: u64,
    pub end: u64,
}

impl Focus {
    /// The window around the wait: some context before and after it.
    pub fn window(&self) -> (u64, u64) {
        let pad = (self.end.saturating_sub(self.start) / 4).clamp(MIN_PAD_NS, MAX_PAD_NS);
        (self.start.saturating_sub(pad), self.end.saturating_add(pad))
    }
}

#[derive(Default)]
struct CpuTrack {
    /// The task on the CPU and since when (idle: none).
    current: Option<(i32, u64)>,
    /// The task the CPU's last traced switch took off it, until the CPU traces an event of
    /// another task. The sched_switch tracepoint fires before the context switch, so events
    /// traced on the way out (the ring buffer waking its reader through irq_work, say) still
    /// carry the old task's pid after its switch-out: they do not put it back on the CPU.
    leaving: Option<i32>,
    slices: Vec<RunSlice>,
}

/// A lock wait whose slice is still open.
#[derive(Clone, Copy)]
struct OpenSlice {
    lock: u64,
    flags: u32,
    since: u64,
}

impl Wait for OpenSlice {
    fn lock(&self) -> u64 {
        self.lock
    }

    fn flags(&self) -> u32 {
        self.flags
    }
}

#[derive(Default)]
struct TaskTrack {
    comm: String,
    state: Option<(TaskState, u64, Option<u32>)>,
    states: Vec<StateSlice>,
    /// Open lock waits, outermost first (they nest, [`crate::open_waits`]).
    open_waits: Vec<OpenSlice>,
    locks: Vec<LockSlice>,
}

/// The pass; feed it every event in time order, then [`ExcerptPass::finish`].
pub struct ExcerptPass {
    start: u64,
    end: u64,
    focus: Focus,
    lock_names: HashMap<u64, String>,
    holders: HoldersPass,
    cpus: BTreeMap<u32, CpuTrack>,
    tasks: HashMap<i32, TaskTrack>,
    slices: usize,
    truncated: bool,
    last_ts: u64,
}

impl ExcerptPass {
    /// `lock_names`: address to the name the contention table uses.
    pub fn new(focus: Focus, lock_names: impl IntoIterator<Item = (u64, String)>) -> ExcerptPass {
        let (start, end) = focus.window();
        ExcerptPass {
            start,
            end,
            focus,
            lock_names: lock_names.into_iter().collect(),
            holders: HoldersPass::capturing(start, end),
            cpus: BTreeMap::new(),
            tasks: HashMap::new(),
            slices: 0,
            truncated: false,
            last_ts: 0,
        }
    }

    /// `[from, to)` clipped to the window, if anything is left and the caps allow. The
    /// global cap counts run and state slices only: lock waits and holds, the point of the
    /// excerpt, are never crowded out by the scheduler noise of tasks that get no lane.
    fn clip(&mut self, from: u64, to: u64, lane_len: usize) -> Option<(u64, u64)> {
        let clipped = self.clip_lock(from, to, lane_len)?;
        if self.slices >= MAX_SLICES {
            self.truncated = true;
            return None;
        }
        self.slices += 1;
        Some(clipped)
    }

    /// [`ExcerptPass::clip`] for a lock slice: only the per-lane cap applies.
    fn clip_lock(&mut self, from: u64, to: u64, lane_len: usize) -> Option<(u64, u64)> {
        let (a, b) = (from.max(self.start), to.min(self.end));
        if a >= b {
            return None;
        }
        if lane_len >= MAX_SLICES_PER_LANE {
            self.truncated = true;
            return None;
        }
        Some((a, b))
    }

    /// Whether later events can change nothing: past the window, with no hold overlapping
    /// it still to be learnt.
    pub fn done(&self) -> bool {
        self.last_ts > self.end && self.holders.capture_complete(self.last_ts)
    }

    pub fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        self.holders.observe(event, kind);
        let ts = event.ts();
        self.last_ts = self.last_ts.max(ts);
        if ts > self.end {
            // Past the window nothing adds a slice; what is open is closed at its end.
            // Holds that started in the window and end later are still captured above.
            return;
        }
        let pid = event.pid();
        let cpu = event.cpu();
        let kind = *kind;
        // Every event is traced in the context of the task current on its CPU, so it
        // places that task there even when its switch-in was not traced (before the
        // trace, or while tracing was off between phases).
        let leaving = self.cpus.get(&cpu).and_then(|c| c.leaving);
        if leaving.is_some_and(|p| p != pid) {
            self.cpus.get_mut(&cpu).expect("has a switch").leaving = None;
        }
        let switching_out = leaving == Some(pid) && !matches!(kind, EventKind::SchedSwitch(_));
        if pid != 0 && !switching_out && !matches!(kind, EventKind::KernelStack(_)) {
            let running_here = self
                .tasks
                .get(&pid)
                .and_then(|t| t.state)
                .is_some_and(|(state, _, on)| state == TaskState::Running && on == Some(cpu));
            if !running_here {
                self.set_state(pid, ts, TaskState::Running, Some(cpu));
            }
            if self.cpus.get(&cpu).and_then(|c| c.current).map(|c| c.0) != Some(pid) {
                self.run_on(cpu, ts, Some(pid));
            }
        }
        match kind {
            EventKind::SchedSwitch(switch) => {
                self.run_on(cpu, ts, (switch.next_pid != 0).then_some(switch.next_pid));
                self.cpus.get_mut(&cpu).expect("run_on made it").leaving =
                    (switch.prev_pid != 0).then_some(switch.prev_pid);
                let asleep = switch.prev_state & 0xff != 0;
                let prev_state = if asleep {
                    TaskState::Asleep
                } else {
                    TaskState::Runnable
                };
                self.name(switch.prev_pid, switch.prev_comm.as_bytes());
                self.name(switch.next_pid, switch.next_comm.as_bytes());
                self.set_state(switch.prev_pid, ts, prev_state, None);
                self.set_state(switch.next_pid, ts, TaskState::Running, Some(cpu));
            }
            EventKind::SchedWaking(w) => {
                self.name(w.pid, w.comm.as_bytes());
                let asleep = self
                    .tasks
                    .get(&w.pid)
                    .and_then(|t| t.state)
                    .is_some_and(|(state, _, _)| state == TaskState::Asleep);
                if asleep {
                    self.set_state(w.pid, ts, TaskState::Runnable, None);
                }
            }
            EventKind::ContentionBegin(begin) if pid != 0 => {
                let waits = &mut self.tasks.entry(pid).or_default().open_waits;
                match open_waits::find(waits, begin.lock_addr) {
                    // A mutex's second begin (now sleeping) continues the same wait.
                    Some(wait) => wait.flags = begin.flags,
                    // What it replaces had its end lost: no slice, its end is unknown.
                    None => {
                        open_waits::open(
                            waits,
                            OpenSlice {
                                lock: begin.lock_addr,
                                flags: begin.flags,
                                since: ts,
                            },
                        );
                    }
                }
            }
            EventKind::ContentionEnd(end) if pid != 0 => {
                let closed = self
                    .tasks
                    .get_mut(&pid)
                    .and_then(|t| open_waits::close(&mut t.open_waits, end.lock_addr));
                if let Some((wait, _)) = closed {
                    self.wait_slice(pid, wait.lock, wait.since, ts);
                }
            }
            _ => {}
        }
    }

    /// `pid` (none: idle) is on `cpu` from `ts`; what ran there before ends. A task runs on
    /// one CPU at a time: where it was still shown running, its switch out was missed, and
    /// that ends there too.
    fn run_on(&mut self, cpu: u32, ts: u64, pid: Option<i32>) {
        if let Some(pid) = pid {
            let elsewhere = self
                .cpus
                .iter()
                .find(|(&c, t)| c != cpu && t.current.is_some_and(|(p, _)| p == pid))
                .map(|(&c, _)| c);
            if let Some(other) = elsewhere {
                self.run_on(other, ts, None);
            }
        }
        let track = self.cpus.entry(cpu).or_default();
        let previous = track.current.take();
        track.current = pid.map(|p| (p, ts));
        let len = track.slices.len();
        if let Some((running, since)) = previous {
            if let Some((a, b)) = self.clip(since, ts, len) {
                self.cpus
                    .get_mut(&cpu)
                    .expect("entry made above")
                    .slices
                    .push(RunSlice {
                        start_ns: a,
                        end_ns: b,
                        pid: running,
                    });
            }
        }
    }

    fn name(&mut self, pid: i32, comm: &[u8]) {
        if pid == 0 {
            return;
        }
        let task = self.tasks.entry(pid).or_default();
        if task.comm.as_bytes() != comm {
            task.comm = String::from_utf8_lossy(comm).into_owned();
        }
    }

    fn set_state(&mut self, pid: i32, ts: u64, state: TaskState, cpu: Option<u32>) {
        if pid == 0 {
            return;
        }
        let task = self.tasks.entry(pid).or_default();
        let previous = task.state.replace((state, ts, cpu));
        let len = task.states.len();
        if let Some((was, since, on)) = previous {
            if let Some((a, b)) = self.clip(since, ts, len) {
                self.tasks
                    .get_mut(&pid)
                    .expect("entry made above")
                    .states
                    .push(StateSlice {
                        start_ns: a,
                        end_ns: b,
                        state: was,
                        cpu: on,
                    });
            }
        }
    }

    fn wait_slice(&mut self, pid: i32, lock: u64, from: u64, to: u64) {
        let len = self.tasks.get(&pid).map_or(0, |t| t.locks.len());
        if let Some((a, b)) = self.clip_lock(from, to, len) {
            let name = self.lock_name(lock);
            self.tasks
                .get_mut(&pid)
                .expect("waiting task")
                .locks
                .push(LockSlice {
                    start_ns: a,
                    end_ns: b,
                    role: LockRole::Wait,
                    lock: name,
                    start_known: true,
                });
        }
    }

    fn lock_name(&self, lock: u64) -> String {
        self.lock_names
            .get(&lock)
            .cloned()
            .unwrap_or_else(|| format!("lock {lock:#x}"))
    }

    pub fn finish(mut self) -> TimelineExcerpt {
        let close_at = self.last_ts.min(self.end);
        // What is still open at the end of the window (or trace) runs to it.
        let open_cpus: Vec<(u32, i32, u64)> = self
            .cpus
            .iter()
            .filter_map(|(&cpu, track)| track.current.map(|(pid, since)| (cpu, pid, since)))
            .collect();
        for (cpu, pid, since) in open_cpus {
            let len = self.cpus[&cpu].slices.len();
            if let Some((a, b)) = self.clip(since, close_at, len) {
                self.cpus
                    .get_mut(&cpu)
                    .expect("listed above")
                    .slices
                    .push(RunSlice {
                        start_ns: a,
                        end_ns: b,
                        pid,
                    });
            }
        }
        let pids: Vec<i32> = self.tasks.keys().copied().collect();
        for pid in pids {
            let task = &self.tasks[&pid];
            let (state, waits) = (task.state, task.open_waits.clone());
            if let Some((state, since, cpu)) = state {
                let len = task.states.len();
                if let Some((a, b)) = self.clip(since, close_at, len) {
                    self.tasks
                        .get_mut(&pid)
                        .expect("listed above")
                        .states
                        .push(StateSlice {
                            start_ns: a,
                            end_ns: b,
                            state,
                            cpu,
                        });
                }
            }
            for wait in waits {
                self.wait_slice(pid, wait.lock, wait.since, close_at);
            }
        }
        let holds = self.holders.captured().to_vec();
        for hold in holds {
            let len = self.tasks.get(&hold.holder).map_or(0, |t| t.locks.len());
            if let Some((a, b)) = self.clip_lock(hold.start, hold.end, len) {
                let name = self.lock_name(hold.lock);
                self.tasks
                    .entry(hold.holder)
                    .or_default()
                    .locks
                    .push(LockSlice {
                        start_ns: a,
                        end_ns: b,
                        role: LockRole::Hold,
                        lock: name,
                        start_known: hold.start_known,
                    });
            }
        }
        self.lanes()
    }

    /// Tasks that waited on or held a lock in the window, the focused waiter first, then
    /// by lock time.
    fn lanes(self) -> TimelineExcerpt {
        let focus_pid = self.focus.pid;
        // The trace's latest name: a thread often renames itself after it starts.
        let focus_comm = self
            .tasks
            .get(&focus_pid)
            .map(|t| t.comm.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| self.focus.comm.clone());
        let all_comms: HashMap<i32, String> = self
            .tasks
            .iter()
            .filter(|(_, t)| !t.comm.is_empty())
            .map(|(&pid, t)| (pid, t.comm.clone()))
            .collect();
        let mut involved: Vec<(i32, TaskTrack)> = self
            .tasks
            .into_iter()
            .filter(|(_, t)| !t.locks.is_empty())
            .collect();
        let lock_time =
            |t: &TaskTrack| -> u64 { t.locks.iter().map(|l| l.end_ns - l.start_ns).sum() };
        involved.sort_by(|a, b| {
            (b.0 == focus_pid)
                .cmp(&(a.0 == focus_pid))
                .then(lock_time(&b.1).cmp(&lock_time(&a.1)))
                .then(a.0.cmp(&b.0))
        });
        let mut truncated = self.truncated;
        if involved.len() > MAX_TASK_LANES {
            involved.truncate(MAX_TASK_LANES);
            truncated = true;
        }
        // Names of every task in a lane, CPU lanes included.
        let mut comms: BTreeMap<i32, String> = BTreeMap::new();
        for slice in self.cpus.values().flat_map(|c| &c.slices) {
            if let Some(t) = all_comms.get(&slice.pid) {
                comms.insert(slice.pid, t.clone());
            }
        }
        let tasks = involved
            .into_iter()
            .map(|(pid, mut t)| {
                t.states.sort_by_key(|s| s.start_ns);
                t.locks.sort_by_key(|l| (l.start_ns, l.end_ns));
                TaskLane {
                    pid,
                    comm: t.comm,
                    states: t.states,
                    locks: t.locks,
                }
            })
            .collect();
        let focus = &self.focus;
        TimelineExcerpt {
            start_ns: self.start,
            end_ns: self.end,
            focus: format!(
                "the longest wait on {}: {} {} waited {:.1} us",
                focus.lock_name,
                focus_comm,
                focus.pid,
                focus.end.saturating_sub(focus.start) as f64 / 1e3
            ),
            cpus: self
                .cpus
                .into_iter()
                .map(|(cpu, track)| CpuLane {
                    cpu,
                    slices: track.slices,
                })
                .collect(),
            tasks,
            comms,
            truncated,
        }
    }
}
