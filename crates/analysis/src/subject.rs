//! Where a recorded command's tasks spent their time.
//!
//! The subject is the command's process and every task it created (a task whose
//! sched_wakeup_new was traced by a subject task), each from its first traced event to its
//! exit or the end of the trace. Every nanosecond of a task is in exactly one state:
//! - waiting on a lock (between its contention_begin and contention_end, nested waits
//!   counting for the innermost), spinning or asleep alike;
//! - on a CPU while a cross-CPU call it queued has not run yet on its target: waiting for
//!   other CPUs (IPIs, TLB shootdowns);
//! - on a CPU; runnable (preempted, or woken and not yet on a CPU); asleep, in the
//!   function its sleeping stack names.
//!
//! A sleep that another subject task ended while exiting (a join, a wait for a child) is
//! the command waiting for its own work: it is counted apart, not as a cause.
//!
//! Streaming, with memory bounded by tasks, distinct stacks and locks: each task keeps its
//! current state and when it began, and the time is added up as states change.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use vmscale_run::findings::{
    ComponentKind, CpuHolder, LockHolders, SleepWaker, SubjectPart, SubjectTime, TaskTime,
    WakerMeanwhile, WorkRan,
};
use vmscale_run::LockContention;
use vmscale_trace::decode::event::Event;
use vmscale_trace::decode::views::{EventKind, ViewTag};

use crate::cause_names;
use crate::open_waits;
use crate::runqueue::{CpuHolders, Occupant, RunqueueWatch};
use crate::stacks::{StackId, StackTable};
use crate::symbols::Symbols;
use crate::task_names::remember;
use crate::workers::WorkHistory;

/// sched_switch's prev_state bits of a task that switched out for the last time
/// (EXIT_DEAD, EXIT_ZOMBIE as the kernel reports them).
const EXITED: i64 = 0x10 | 0x20;
/// A sleep ended by a subject task that exits within this long after is a join.
const JOIN_WINDOW_NS: u64 = 10_000_000;
/// Tasks named per part.
const TOP_TASKS: usize = 3;
/// Tasks named as holding the CPUs runnable tasks waited for.
const TOP_CPU_HOLDERS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Part {
    OnCpu,
    Runnable,
    Lock(u64),
    Asleep(Option<StackId>),
    /// Waiting for other CPUs to run this function.
    CrossCpu(u64),
    /// Asleep (in the sleep this stack names) while holding this contended lock, as the
    /// holders pass proved ([`SubjectPass::finish`] moves the time here).
    HoldingAsleep(u64, Option<StackId>),
    /// From its last own event before a switch the trace misses until it is seen again:
    /// time the trace does not explain, never any cause's.
    Unseen,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sched {
    Running,
    Runnable,
    Asleep(Option<StackId>),
    /// Switched away by a switch the trace does not show: another task's event came on its
    /// CPU. What it did until it is seen again is not known.
    Unseen,
}

/// A sleep that ended when another subject task woke it.
#[derive(Clone, Copy)]
struct EndedSleep {
    part: Part,
    ns: u64,
    waker: i32,
    woken_at: u64,
}

struct Task {
    sched: Sched,
    /// Open lock waits, outermost first ([`open_waits`]).
    waits: Vec<(u64, u32)>,
    /// Cross-CPU calls queued and not yet run, and the function of the first.
    pending: HashSet<u64>,
    cross_func: u64,
    part: Part,
    since: u64,
    last_sleep: Option<EndedSleep>,
    /// Its latest parts, (start, end, part), oldest first, at most [`HISTORY`]: when it
    /// wakes another task, their overlap with that task's sleep is what the waker did
    /// meanwhile.
    history: std::collections::VecDeque<(u64, u64, Part)>,
    /// Its latest own event or switch-in: the last time it is known to have run, and where.
    last_seen: u64,
    cpu: u32,
    /// The system call it is in, by the trace's raw_syscalls events: (id, entered at).
    syscall: Option<(i64, u64)>,
}

impl Task {
    fn new(sched: Sched, ts: u64) -> Task {
        let mut task = Task {
            sched,
            waits: Vec::new(),
            pending: HashSet::new(),
            cross_func: 0,
            part: Part::OnCpu,
            since: ts,
            last_sleep: None,
            history: std::collections::VecDeque::new(),
            last_seen: ts,
            cpu: u32::MAX,
            syscall: None,
        };
        task.part = task.current_part();
        task
    }

    fn current_part(&self) -> Part {
        if let Some(&(lock, _)) = self.waits.last() {
            return Part::Lock(lock);
        }
        match self.sched {
            Sched::Running if !self.pending.is_empty() => Part::CrossCpu(self.cross_func),
            Sched::Running => Part::OnCpu,
            Sched::Runnable => Part::Runnable,
            Sched::Asleep(stack) => Part::Asleep(stack),
            Sched::Unseen => Part::Unseen,
        }
    }
}

/// A part as the findings name it: kind, detail, and the lock a sleep was held under.
type PartKey = (ComponentKind, String, String);

/// A sleep's wakers (pid -> the sleeps it ended, and work function -> what it ran), and
/// what the sleep waited for.
#[derive(Default)]
struct SleepParts {
    /// waker -> (the sleep it ended, work function -> (time the waker ran it, of which
    /// on items other tasks queued, by queuer)).
    wakers: HashMap<i32, (u64, HashMap<u64, WorkTime>)>,
    /// waker -> its own part -> time of this sleep it overlapped.
    waker_did: HashMap<i32, HashMap<Part, u64>>,
    kinds: HashMap<&'static str, u64>,
    waits_for: &'static str,
}

/// Time in one work function, and of it, per task other than the sleeper, the time on
/// items that task queued.
type WorkTime = (u64, HashMap<i32, u64>);

/// Wakers named per sleep.
const TOP_WAKERS: usize = 5;

/// Parts kept per task for what a waker did meanwhile ([`Task::history`]).
const HISTORY: usize = 32;

/// The pass; feed it every event in time order, then [`SubjectPass::finish`].
pub struct SubjectPass {
    /// The tasks the subject starts with.
    roots: HashSet<i32>,
    tasks: HashMap<i32, Task>,
    /// Subject tasks that exited: a reused pid is not the subject unless a subject task
    /// creates it again.
    exited: HashSet<i32>,
    /// Queued cross-CPU calls -> the subject task waiting for them.
    csd_waiters: HashMap<u64, i32>,
    /// CPU -> subject task whose sleeping stack should come next there.
    awaiting_stack: HashMap<u32, i32>,
    stacks: StackTable,
    lock_flags: HashMap<u64, u32>,
    comms: HashMap<i32, String>,
    totals: HashMap<Part, u64>,
    by_task: HashMap<(i32, Part), u64>,
    joined: HashMap<i32, u64>,
    last_ts: u64,
    /// When given, only these windows of each task count: (start, end) per task, sorted,
    /// with the index of the first that may still overlap what comes.
    windows: HashMap<i32, (Vec<(u64, u64)>, usize)>,
    /// Cross-CPU functions nobody waits for ([`crate::cause_names::ASYNC_CROSS_CALLS`]).
    async_calls: HashSet<u64>,
    /// Every task is the subject, except these ([`SubjectPass::every_task`]).
    every_task: Option<HashSet<i32>>,
    /// Task -> its thread group, where the trace says.
    tgids: HashMap<i32, i32>,
    /// The windows are whole processes' ([`SubjectPass::of_processes`]): a sleep already
    /// going on when a window began is left out of it, and counted here, and joins count.
    process_windows: bool,
    asleep_from_before_ns: u64,
    /// A sched_switch was seen: without one, no task's time can be split (every task
    /// would read as running from its first event to the end).
    saw_switch: bool,
    /// Who ran on the CPUs runnable subject tasks were queued on.
    runqueue: RunqueueWatch,
    cpu_holders: CpuHolders,
    /// What kernel workers ran, for naming what a sleep waited for.
    work: WorkHistory,
    /// The task whose sched_waking is being applied (the waker).
    waking_by: Option<i32>,
    /// (sleep, waker) -> the sleeps it ended; (sleep, waker, work function) -> what the
    /// waker ran meanwhile.
    wakers: HashMap<(Part, i32), u64>,
    /// (sleep, waker, work function, queued by another task than the sleeper: its pid,
    /// else 0) -> the time of the sleep the waker spent in that work.
    waker_work: HashMap<(Part, i32, u64, i32), u64>,
    /// (sleep, waker, the waker's own part) -> how much of the sleep the part overlapped.
    waker_did: HashMap<(Part, i32, Part), u64>,
    /// Calls timed one window each (not whole processes'): each window's parts, for the
    /// what-if predictions; at most [`MAX_WHAT_IF_WINDOWS`] windows.
    window_parts: HashMap<(i32, u32), Vec<(Part, u64)>>,
    /// Each window is one call on one thread (no window is shared by several threads).
    per_call_windows: bool,
    /// CPU -> the subject task switched in there last, while it runs (-1: none).
    on_cpu: Vec<i32>,
    /// System call id -> on-CPU time spent inside it and calls that ended: indexed by id
    /// below [`SYSCALL_SLOTS`] (one store per call on a trace of millions), in the map
    /// beyond.
    syscalls: Vec<(u64, u64)>,
    syscalls_beyond: HashMap<i64, (u64, u64)>,
    /// The numbering the trace's system call ids are in.
    arch: crate::syscalls::Arch,
}

/// System calls named one by one in the on-CPU part; the rest are summed.
const TOP_SYSCALLS: usize = 8;
/// Every architecture's system call numbers are below this (x86-64's about 470).
const SYSCALL_SLOTS: usize = 1024;

/// CPUs followed for switches the trace misses; events of higher CPUs are not checked.
const MAX_CPUS: usize = 8192;

/// Windows kept part by part for the what-if predictions.
const MAX_WHAT_IF_WINDOWS: usize = 1 << 18;

impl SubjectPass {
    /// The subject is `roots` (a command's process, or a running process's threads) and
    /// every task they create.
    pub fn new(roots: Vec<i32>) -> SubjectPass {
        SubjectPass {
            roots: roots.into_iter().collect(),
            tasks: HashMap::new(),
            exited: HashSet::new(),
            csd_waiters: HashMap::new(),
            awaiting_stack: HashMap::new(),
            stacks: StackTable::default(),
            lock_flags: HashMap::new(),
            comms: HashMap::new(),
            totals: HashMap::new(),
            by_task: HashMap::new(),
            joined: HashMap::new(),
            last_ts: 0,
            windows: HashMap::new(),
            async_calls: HashSet::new(),
            every_task: None,
            tgids: HashMap::new(),
            process_windows: false,
            asleep_from_before_ns: 0,
            saw_switch: false,
            runqueue: RunqueueWatch::default(),
            cpu_holders: crate::runqueue::new_holders(),
            work: WorkHistory::default(),
            waking_by: None,
            wakers: HashMap::new(),
            waker_work: HashMap::new(),
            waker_did: HashMap::new(),
            window_parts: HashMap::new(),
            per_call_windows: false,
            on_cpu: Vec::new(),
            syscalls: Vec::new(),
            syscalls_beyond: HashMap::new(),
            arch: crate::syscalls::Arch::host(),
        }
    }

    /// The system call numbering of the trace ([`crate::syscalls::Arch::of`]).
    pub fn with_syscall_arch(mut self, arch: crate::syscalls::Arch) -> SubjectPass {
        self.arch = arch;
        self
    }

    /// In windowed mode, the windows are those of whole processes carrying out samples
    /// (teardown's holders: every thread of the process during a sample). Then:
    /// - a sleep (without a contended lock) that began before a window did is left out of
    ///   it: a thread with nothing to do when a sample began (a halted vCPU thread of a VM
    ///   torn down later in the sample) is idle until woken, no cost of the sample's work.
    ///   A sleep that begins inside a window still counts;
    /// - a sleep that another of the tasks ends by exiting is waiting for its own work
    ///   (a join), as for a command.
    pub fn of_processes(mut self) -> SubjectPass {
        self.process_windows = true;
        self
    }

    /// Every task the trace shows, from its first event to its exit, except `excluded`
    /// (another run's tasks): what a system-wide recording explains. A pid that is reused
    /// starts a new task.
    pub fn every_task(excluded: impl IntoIterator<Item = i32>) -> SubjectPass {
        let mut pass = SubjectPass::new(Vec::new());
        pass.every_task = Some(excluded.into_iter().collect());
        pass
    }

    /// Groups the subject's time by process too: task -> thread group id (the kernel's
    /// saved_tgids).
    pub fn with_processes(mut self, tgids: HashMap<i32, i32>) -> SubjectPass {
        self.tgids = tgids;
        self
    }

    /// Cross-CPU calls to these functions (addresses) are queued and not waited for.
    pub fn with_async_calls(mut self, funcs: &[u64]) -> SubjectPass {
        self.async_calls = funcs.iter().copied().collect();
        self
    }

    /// Only the given windows of the given tasks, (task, start, end) on the trace's clock:
    /// for threads whose time matters only then (a released vCPU thread until it entered
    /// KVM_RUN again). Tasks they create are not followed, and no sleep counts as a join.
    pub fn within(windows: Vec<(i32, u64, u64)>) -> SubjectPass {
        let mut by_task: HashMap<i32, (Vec<(u64, u64)>, usize)> = HashMap::new();
        for (pid, start, end) in windows.into_iter().filter(|w| w.2 > w.1) {
            by_task.entry(pid).or_default().0.push((start, end));
        }
        for (list, _) in by_task.values_mut() {
            list.sort_unstable();
        }
        let mut seen: HashSet<(u64, u64)> = HashSet::new();
        let per_call = by_task
            .values()
            .flat_map(|(list, _)| list.iter())
            .all(|&window| seen.insert(window));
        let mut pass = SubjectPass::new(by_task.keys().copied().collect());
        pass.windows = by_task;
        pass.per_call_windows = per_call;
        pass
    }

    /// Accounts `part` for the task's time from `from` to `to`: all of it, or in windowed
    /// mode the part inside its windows.
    /// Returns the time counted.
    fn account(&mut self, pid: i32, part: Part, from: u64, to: u64) -> u64 {
        let leave_out = self.process_windows && matches!(part, Part::Asleep(_));
        let (ns, left_out) = match self.windows.get_mut(&pid) {
            None => (to.saturating_sub(from), 0),
            Some((list, first)) => {
                // Time only moves forward per task, so windows ending before `from` are done.
                while *first < list.len() && list[*first].1 <= from {
                    *first += 1;
                }
                let (mut counted, mut left_out) = (0, 0);
                let per_window = self.per_call_windows;
                for (i, w) in list[*first..]
                    .iter()
                    .enumerate()
                    .take_while(|(_, w)| w.0 < to)
                {
                    let overlap = w.1.min(to).saturating_sub(w.0.max(from));
                    if leave_out && from < w.0 {
                        left_out += overlap;
                    } else {
                        counted += overlap;
                        if per_window && overlap > 0 {
                            let key = (pid, (*first + i) as u32);
                            if self.window_parts.len() < MAX_WHAT_IF_WINDOWS
                                || self.window_parts.contains_key(&key)
                            {
                                let parts = self.window_parts.entry(key).or_default();
                                match parts.iter_mut().find(|(p, _)| *p == part) {
                                    Some(entry) => entry.1 += overlap,
                                    None => parts.push((part, overlap)),
                                }
                            }
                        }
                    }
                }
                (counted, left_out)
            }
        };
        self.asleep_from_before_ns += left_out;
        self.add(pid, part, ns);
        ns
    }

    /// The part of `[from, to)` inside `pid`'s windows (all of it without windows).
    fn in_windows(&self, pid: i32, from: u64, to: u64) -> u64 {
        if self.windows.is_empty() {
            return to.saturating_sub(from);
        }
        match self.windows.get(&pid) {
            None => to.saturating_sub(from),
            Some((list, first)) => list[*first..]
                .iter()
                .take_while(|w| w.0 < to)
                .map(|w| w.1.min(to).saturating_sub(w.0.max(from)))
                .sum(),
        }
    }

    /// Credits the on-CPU stretch `[from, to)` of `pid`, as far as it was inside the
    /// system call `syscall` (entered when it says), to that call.
    fn credit_syscall(
        &mut self,
        pid: i32,
        syscall: Option<(i64, u64)>,
        part: Part,
        from: u64,
        to: u64,
    ) {
        let Some((id, entered)) = syscall else {
            return;
        };
        if part != Part::OnCpu {
            return;
        }
        let ns = self.in_windows(pid, from.max(entered), to);
        if ns > 0 {
            self.syscall_slot(id).0 += ns;
        }
    }

    /// The (time, calls) of system call `id`.
    #[inline]
    fn syscall_slot(&mut self, id: i64) -> &mut (u64, u64) {
        match usize::try_from(id) {
            Ok(slot) if slot < SYSCALL_SLOTS => {
                if slot >= self.syscalls.len() {
                    self.syscalls.resize(slot + 1, (0, 0));
                }
                &mut self.syscalls[slot]
            }
            _ => self.syscalls_beyond.entry(id).or_default(),
        }
    }

    /// Most events of a big trace: a plain event or a system call of the subject task
    /// this CPU was last switched to, which is running. All it says is that the task still
    /// runs, and where a system call begins or ends: done with one lookup of the task,
    /// with the same outcome as the general path below. False for any other event.
    #[inline]
    fn own_event_while_running(&mut self, event: &Event<'_>, kind: &EventKind<'_>) -> bool {
        let entered = match kind {
            EventKind::Other => None,
            EventKind::SysEnter(enter) => Some(Some(enter.id)),
            EventKind::SysExit(_) => Some(None),
            _ => return false,
        };
        let (pid, cpu, ts) = (event.pid(), event.cpu(), event.ts());
        if pid <= 0 || self.on_cpu.get(cpu as usize) != Some(&pid) {
            return false;
        }
        let Some(task) = self.tasks.get_mut(&pid) else {
            return false;
        };
        if task.sched != Sched::Running {
            return false;
        }
        task.last_seen = ts;
        task.cpu = cpu;
        if let Some(entered) = entered {
            let (left, part, since) = (task.syscall, task.part, task.since);
            task.syscall = entered.map(|id| (id, ts));
            self.credit_syscall(pid, left, part, since, ts);
            if let EventKind::SysExit(exit) = kind {
                self.syscall_slot(exit.id).1 += 1;
            }
        }
        true
    }

    /// `pid` entered (`Some(id)`) or left a system call at `ts`: the on-CPU time up to
    /// it is credited to the call it leaves, and the task is in the new one from here.
    fn syscall_boundary(&mut self, pid: i32, ts: u64, entered: Option<i64>) {
        let Some(task) = self.tasks.get_mut(&pid) else {
            return;
        };
        let (left, part, since) = (task.syscall, task.part, task.since);
        task.syscall = entered.map(|id| (id, ts));
        self.credit_syscall(pid, left, part, since, ts);
    }

    /// On-CPU time inside each system call, most first, the rest beyond
    /// [`TOP_SYSCALLS`] summed.
    fn syscall_times(&self) -> Vec<vmscale_run::findings::SyscallTime> {
        let mut calls: Vec<(i64, u64, u64)> = (self.syscalls.iter().enumerate())
            .map(|(id, &(ns, calls))| (id as i64, ns, calls))
            .chain(
                self.syscalls_beyond
                    .iter()
                    .map(|(&id, &(ns, calls))| (id, ns, calls)),
            )
            .filter(|&(_, ns, _)| ns > 0)
            .collect();
        calls.sort_by_key(|&(id, ns, _)| (std::cmp::Reverse(ns), id));
        let rest = calls.split_off(calls.len().min(TOP_SYSCALLS));
        let mut times: Vec<vmscale_run::findings::SyscallTime> = calls
            .into_iter()
            .map(|(id, ns, calls)| vmscale_run::findings::SyscallTime {
                name: self.arch.name(id),
                ns,
                calls,
            })
            .collect();
        if !rest.is_empty() {
            times.push(vmscale_run::findings::SyscallTime {
                name: format!("{} other system calls", rest.len()),
                ns: rest.iter().map(|r| r.1).sum(),
                calls: rest.iter().map(|r| r.2).sum(),
            });
        }
        times
    }

    /// Credits runnable stretches to who held the CPU, inside the tasks' windows.
    fn credit_cpu_holders(&mut self, credits: Vec<(i32, Occupant, u64, u64)>) {
        for (pid, occupant, from, to) in credits {
            // A runnable task still waiting on a lock (a woken mutex waiter) is counted as
            // that wait: only runnable time is what a CPU holder explains.
            if self
                .tasks
                .get(&pid)
                .is_none_or(|t| t.part != Part::Runnable)
            {
                continue;
            }
            let ns = self.in_windows(pid, from, to);
            if ns > 0 {
                *self.cpu_holders.entry(occupant).or_default() += ns;
            }
        }
    }

    fn runqueue_switch(&mut self, cpu: u32, ts: u64, prev: i32, next: i32) {
        let mut credits = Vec::new();
        self.runqueue
            .switch(cpu, ts, prev, next, |w, o, a, b| credits.push((w, o, a, b)));
        self.credit_cpu_holders(credits);
    }

    fn runqueue_leave(&mut self, pid: i32, ts: u64) {
        if self.runqueue.is_queued(pid) {
            let mut credits = Vec::new();
            self.runqueue
                .dequeue(pid, ts, |w, o, a, b| credits.push((w, o, a, b)));
            self.credit_cpu_holders(credits);
        }
    }

    /// The end of `pid`'s window that holds `ts`, in windowed mode.
    fn window_at(&self, pid: i32, ts: u64) -> Option<u64> {
        let (list, first) = self.windows.get(&pid)?;
        list[*first..]
            .iter()
            .take_while(|w| w.0 <= ts)
            .find(|w| w.1 > ts)
            .map(|w| w.1)
    }

    fn add(&mut self, pid: i32, part: Part, ns: u64) {
        if ns == 0 {
            return;
        }
        *self.totals.entry(part).or_default() += ns;
        *self.by_task.entry((pid, part)).or_default() += ns;
    }

    /// Applies `change` to a subject task and accounts the time of the state it leaves.
    fn update(&mut self, pid: i32, ts: u64, change: impl FnOnce(&mut Task)) {
        let Some(task) = self.tasks.get_mut(&pid) else {
            return;
        };
        let was_asleep = matches!(task.sched, Sched::Asleep(_));
        change(task);
        let part = task.current_part();
        if part == task.part {
            return;
        }
        let (old, since, syscall) = (task.part, task.since, task.syscall);
        task.part = part;
        task.since = ts;
        let woke = was_asleep && !matches!(task.sched, Sched::Asleep(_));
        // A whole command, or the threads of processes that carried out samples: a sleep
        // another of its tasks ends by exiting is waiting for its own work.
        let joins = self.windows.is_empty() || self.process_windows;
        let counted = self.account(pid, old, since, ts);
        self.credit_syscall(pid, syscall, old, since, ts);
        if let (true, Part::Asleep(_), Some(waker)) = (woke, old, self.waking_by) {
            *self.wakers.entry((old, waker)).or_default() += counted;
            if waker > 0 {
                for ran in self.work.ran(waker, since, ts) {
                    let other = if ran.queued_by == pid {
                        0
                    } else {
                        ran.queued_by
                    };
                    *self
                        .waker_work
                        .entry((old, waker, ran.function, other))
                        .or_default() += ran.ns.min(counted);
                }
                // What the waker did while this task slept, as far as its kept parts
                // reach back; the part it is in now runs up to the wakeup.
                if counted > 0 {
                    if let Some(w) = self.tasks.get(&waker) {
                        let now = (w.since, ts, w.part);
                        for &(from, to, did) in w.history.iter().chain(std::iter::once(&now)) {
                            let overlap = to.min(ts).saturating_sub(from.max(since));
                            if overlap > 0 {
                                *self.waker_did.entry((old, waker, did)).or_default() += overlap;
                            }
                        }
                    }
                }
            }
        }
        if let Some(task) = self.tasks.get_mut(&pid) {
            if task.history.len() >= HISTORY {
                task.history.pop_front();
            }
            task.history.push_back((since, ts, old));
        }
        if let (true, true, Part::Asleep(_)) = (joins, woke, old) {
            if let Some(task) = self.tasks.get_mut(&pid) {
                task.last_sleep = Some(EndedSleep {
                    part: old,
                    ns: counted,
                    waker: 0,
                    woken_at: ts,
                });
            }
        }
    }

    /// A subject task's events say it is on a CPU, whatever was last seen of it.
    fn seen_running(&mut self, pid: i32, ts: u64, cpu: u32) {
        let Some(task) = self.tasks.get_mut(&pid) else {
            return;
        };
        task.last_seen = ts;
        task.cpu = cpu;
        let running = task.sched == Sched::Running;
        if pid > 0 {
            self.set_on_cpu(cpu, pid);
        }
        if !running {
            self.runqueue_leave(pid, ts);
            self.update(pid, ts, |t| t.sched = Sched::Running);
        }
    }

    /// `pid` has an event on `cpu`. Where another subject task was switched in there last
    /// and is still taken to run, the switch away from it is missing: some hosts never
    /// trace their own housekeeping tasks, nor the switches to and from them, and a lost
    /// page drops switches too. Its running ended after its last own event; what it did
    /// from then until it is seen again is not known, and is not counted as any cause.
    #[inline]
    fn check_on_cpu(&mut self, cpu: u32, pid: i32) {
        let Some(&running) = self.on_cpu.get(cpu as usize) else {
            return;
        };
        if running < 0 || running == pid {
            return;
        }
        self.on_cpu[cpu as usize] = -1;
        let Some(task) = self.tasks.get(&running) else {
            return;
        };
        // It was seen running on another CPU since: it migrated, by switches not missed.
        if task.sched == Sched::Running && task.cpu == cpu {
            let at = task.last_seen.max(task.since);
            self.runqueue_leave(running, at);
            self.update(running, at, |t| t.sched = Sched::Unseen);
        }
    }

    /// The subject task switched in on `cpu`, or -1.
    fn set_on_cpu(&mut self, cpu: u32, pid: i32) {
        let cpu = cpu as usize;
        if cpu >= self.on_cpu.len() {
            if pid < 0 || cpu >= MAX_CPUS {
                return;
            }
            self.on_cpu.resize(cpu + 1, -1);
        }
        self.on_cpu[cpu] = pid;
    }

    fn join(&mut self, pid: i32, ts: u64, sched: Sched) {
        self.exited.remove(&pid);
        self.tasks.insert(pid, Task::new(sched, ts));
    }

    fn exit(&mut self, pid: i32, ts: u64) {
        self.runqueue_leave(pid, ts);
        let Some(task) = self.tasks.remove(&pid) else {
            return;
        };
        self.account(pid, task.part, task.since, ts);
        self.credit_syscall(pid, task.syscall, task.part, task.since, ts);
        for csd in task.pending {
            self.csd_waiters.remove(&csd);
        }
        self.exited.insert(pid);
        // Whoever it woke just before it went is joining it, not blocked by the kernel.
        let joiners: Vec<(i32, EndedSleep)> = self
            .tasks
            .iter_mut()
            .filter_map(|(&joiner, t)| {
                let sleep = t.last_sleep?;
                (sleep.waker == pid && ts.saturating_sub(sleep.woken_at) <= JOIN_WINDOW_NS)
                    .then(|| (joiner, t.last_sleep.take().expect("checked above")))
            })
            .collect();
        for (joiner, sleep) in joiners {
            for slot in [
                self.totals.get_mut(&sleep.part),
                self.by_task.get_mut(&(joiner, sleep.part)),
            ]
            .into_iter()
            .flatten()
            {
                *slot = slot.saturating_sub(sleep.ns);
            }
            *self.joined.entry(joiner).or_default() += sleep.ns;
            if let Some(slot) = self.wakers.get_mut(&(sleep.part, pid)) {
                *slot = slot.saturating_sub(sleep.ns);
            }
        }
    }

    /// The views [`SubjectPass::observe`] reads. Every other event still places its task:
    /// pass it with [`EventKind::Other`].
    pub fn wants(tag: ViewTag) -> bool {
        use ViewTag::*;
        matches!(
            tag,
            SchedSwitch
                | KernelStack
                | SchedWakeupNew
                | SchedWaking
                | SchedWakeup
                | ContentionBegin
                | ContentionEnd
                | CsdQueueCpu
                | CsdFunctionExit
                | Work
                | SysEnter
                | SysExit
        )
    }

    pub fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        let ts = event.ts();
        let pid = event.pid();
        self.last_ts = ts;
        // The stack trigger's event comes after the switch, in the task switched out.
        if !matches!(kind, EventKind::KernelStack(_)) {
            self.check_on_cpu(event.cpu(), pid);
        }
        if let EventKind::Work(work) = kind {
            self.work.observe(pid, ts, work);
            return;
        }
        if self.own_event_while_running(event, kind) {
            return;
        }
        match *kind {
            EventKind::SchedSwitch(s) => {
                self.saw_switch = true;
                remember(&mut self.comms, s.prev_pid, s.prev_comm.as_bytes());
                remember(&mut self.comms, s.next_pid, s.next_comm.as_bytes());
                self.awaiting_stack.remove(&event.cpu());
                // Who waited behind the task switched out is credited before anything moves.
                self.runqueue_switch(event.cpu(), ts, s.prev_pid, s.next_pid);
                if self.is_new_root(s.prev_pid) {
                    self.join(s.prev_pid, ts, Sched::Running);
                }
                if self.tasks.contains_key(&s.prev_pid) {
                    if s.prev_state & EXITED != 0 {
                        self.exit(s.prev_pid, ts);
                    } else {
                        let sleeping = s.prev_state & 0xff != 0;
                        if sleeping {
                            self.awaiting_stack.insert(event.cpu(), s.prev_pid);
                        }
                        if !sleeping {
                            self.runqueue.enqueue(s.prev_pid, event.cpu(), ts);
                        }
                        self.update(s.prev_pid, ts, |t| {
                            t.sched = if sleeping {
                                Sched::Asleep(None)
                            } else {
                                Sched::Runnable
                            };
                            // A caller that waits for its cross-CPU calls spins with
                            // preemption off; one that sleeps was not waiting for them.
                            if sleeping {
                                t.pending.clear();
                            }
                        });
                    }
                }
                if self.is_new_root(s.next_pid) {
                    self.join(s.next_pid, ts, Sched::Running);
                }
                self.runqueue_leave(s.next_pid, ts);
                self.update(s.next_pid, ts, |t| t.sched = Sched::Running);
                let next = match self.tasks.get_mut(&s.next_pid) {
                    Some(task) if s.next_pid > 0 => {
                        task.last_seen = ts;
                        task.cpu = event.cpu();
                        s.next_pid
                    }
                    _ => -1,
                };
                self.set_on_cpu(event.cpu(), next);
                return;
            }
            // The stacktrace trigger on sched_switch runs in the task switched out.
            EventKind::KernelStack(stack) => {
                if self.awaiting_stack.get(&event.cpu()) == Some(&pid) {
                    self.awaiting_stack.remove(&event.cpu());
                    let id = self.stacks.intern(stack.iter());
                    if let Some(task) = self.tasks.get_mut(&pid) {
                        if task.sched == Sched::Asleep(None) {
                            // The same sleep, now with its stack: not a new state.
                            task.sched = Sched::Asleep(Some(id));
                            task.part = task.current_part();
                        }
                    }
                }
                return;
            }
            EventKind::SchedWakeupNew(w) => {
                remember(&mut self.comms, w.pid, w.comm.as_bytes());
                let created_by_subject = self.windows.is_empty() && self.tasks.contains_key(&pid);
                // A windowed task's new thread (a holder's release threads) is followed
                // for the rest of the creator's window.
                if let Some(end) = self.window_at(pid, ts) {
                    self.windows.insert(w.pid, (vec![(ts, end)], 0));
                    self.roots.insert(w.pid);
                }
                if created_by_subject || self.is_new_root(w.pid) {
                    self.join(w.pid, ts, Sched::Runnable);
                    self.runqueue.enqueue(w.pid, w.target_cpu.max(0) as u32, ts);
                }
            }
            EventKind::SchedWakeup(w) if self.runqueue.is_queued(w.pid) => {
                let mut credits = Vec::new();
                self.runqueue
                    .requeue(w.pid, w.target_cpu.max(0) as u32, ts, |p, o, a, b| {
                        credits.push((p, o, a, b))
                    });
                self.credit_cpu_holders(credits);
            }
            EventKind::SchedWaking(w) | EventKind::SchedWakeup(w) => {
                let woken_by_subject = pid != w.pid && self.tasks.contains_key(&pid);
                if let Some(task) = self.tasks.get(&w.pid) {
                    if matches!(task.sched, Sched::Asleep(_)) {
                        self.runqueue.enqueue(w.pid, w.target_cpu.max(0) as u32, ts);
                        // A wakeup in interrupt context (a timer, a device) is the
                        // interrupt's, not the interrupted task's.
                        let by_task = pid != w.pid && !event.in_interrupt();
                        self.waking_by = Some(if by_task { pid } else { 0 });
                        self.update(w.pid, ts, |t| t.sched = Sched::Runnable);
                        self.waking_by = None;
                        if let Some(sleep) = self
                            .tasks
                            .get_mut(&w.pid)
                            .and_then(|t| t.last_sleep.as_mut())
                            .filter(|s| s.woken_at == ts)
                        {
                            sleep.waker = if woken_by_subject { pid } else { 0 };
                        }
                    }
                }
            }
            _ => {}
        }
        if self.is_new_root(pid) {
            self.join(pid, ts, Sched::Running);
        }
        if !self.tasks.contains_key(&pid) {
            if let EventKind::CsdFunctionExit(f) = *kind {
                self.csd_ran(f.csd, ts);
            }
            return;
        }
        self.seen_running(pid, ts, event.cpu());
        match *kind {
            EventKind::ContentionBegin(b) => {
                self.lock_flags.entry(b.lock_addr).or_insert(b.flags);
                self.update(pid, ts, |t| {
                    match open_waits::find(&mut t.waits, b.lock_addr) {
                        Some(wait) => wait.1 = b.flags,
                        None => {
                            open_waits::open(&mut t.waits, (b.lock_addr, b.flags));
                        }
                    }
                });
            }
            EventKind::ContentionEnd(end) => {
                self.update(pid, ts, |t| {
                    open_waits::close(&mut t.waits, end.lock_addr);
                });
            }
            EventKind::CsdQueueCpu(q) if !self.async_calls.contains(&q.func) => {
                self.csd_waiters.insert(q.csd, pid);
                self.update(pid, ts, |t| {
                    if t.pending.is_empty() {
                        t.cross_func = q.func;
                    }
                    t.pending.insert(q.csd);
                });
            }
            EventKind::CsdFunctionExit(f) => self.csd_ran(f.csd, ts),
            EventKind::SysEnter(enter) => self.syscall_boundary(pid, ts, Some(enter.id)),
            EventKind::SysExit(exit) => {
                self.syscall_boundary(pid, ts, None);
                self.syscall_slot(exit.id).1 += 1;
            }
            _ => {}
        }
    }

    /// Every task the subject has had (not in a system-wide recording, where it is every
    /// task).
    pub fn tids(&self) -> Vec<i32> {
        if self.every_task.is_some() {
            return Vec::new();
        }
        let mut tids: Vec<i32> = self
            .tasks
            .keys()
            .chain(self.exited.iter())
            .copied()
            .collect();
        tids.sort_unstable();
        tids
    }

    /// One of the tasks the subject starts with, not seen yet.
    fn is_new_root(&self, pid: i32) -> bool {
        match &self.every_task {
            Some(excluded) => pid > 0 && !excluded.contains(&pid) && !self.tasks.contains_key(&pid),
            None => {
                self.roots.contains(&pid)
                    && !self.tasks.contains_key(&pid)
                    && !self.exited.contains(&pid)
            }
        }
    }

    fn csd_ran(&mut self, csd: u64, ts: u64) {
        if let Some(waiter) = self.csd_waiters.remove(&csd) {
            self.update(waiter, ts, |t| {
                t.pending.remove(&csd);
            });
        }
    }

    fn comm(&self, pid: i32) -> String {
        self.comms.get(&pid).cloned().unwrap_or_else(|| "?".into())
    }

    /// The subject's time, closing every task still alive at the trace's last event; `None`
    /// without a subject, or when the trace has no sched_switch to place any task's time.
    /// `contention` names the locks; `holders` gives the sleeps the trace proves were taken
    /// holding a lock others waited for, which are that lock's cost and are counted so
    /// ([`ComponentKind::HoldingAsleep`]), never as sleeps of their own.
    pub fn finish(
        mut self,
        symbols: &dyn Symbols,
        contention: &[LockContention],
        holders: &[LockHolders],
    ) -> Option<SubjectTime> {
        let end = self.last_ts;
        let alive: Vec<i32> = self.tasks.keys().copied().collect();
        let seen = alive.len() + self.exited.len();
        if (self.roots.is_empty() && self.every_task.is_none()) || !self.saw_switch {
            return None;
        }
        let unseen = self
            .roots
            .iter()
            .filter(|r| !self.tasks.contains_key(r) && !self.exited.contains(r))
            .count() as u32;
        for pid in alive {
            self.runqueue_leave(pid, end);
            if let Some(task) = self.tasks.remove(&pid) {
                self.account(pid, task.part, task.since, end);
                self.credit_syscall(pid, task.syscall, task.part, task.since, end);
            }
        }
        let names: HashMap<u64, &str> = contention
            .iter()
            .map(|l| (l.lock_addr, l.name.as_str()))
            .collect();
        self.move_held_sleeps(holders, symbols);
        let every_task = self.every_task.is_some();
        let mut sleeps = self.sleeps_by_key(symbols, &names);
        let mut merged: HashMap<PartKey, (u64, HashMap<i32, u64>)> = HashMap::new();
        for (&(pid, part), &ns) in &self.by_task {
            if ns == 0 {
                continue;
            }
            let key = self.describe(part, symbols, &names);
            let entry = merged.entry(key).or_default();
            entry.0 += ns;
            *entry.1.entry(pid).or_default() += ns;
        }
        let mut parts: Vec<SubjectPart> = merged
            .into_iter()
            .map(|((kind, detail, lock), (total_ns, tasks))| {
                let key = (kind, detail, lock);
                let (waits_for, woken_by) = match sleeps.remove(&key) {
                    Some(sleep) => (
                        sleep.waits_for.to_string(),
                        self.sleep_wakers(sleep, symbols, &names),
                    ),
                    None => (String::new(), Vec::new()),
                };
                let what_if = self.what_if(&key, symbols, &names);
                let (kind, detail, lock) = key;
                SubjectPart {
                    what_if,
                    kind,
                    detail,
                    lock,
                    total_ns,
                    processes: self.top_processes(&tasks),
                    tasks: self.top(tasks),
                    cpu_holders: Vec::new(),
                    waits_for,
                    woken_by,
                    in_syscalls: Vec::new(),
                }
            })
            .collect();
        parts.sort_by(|a, b| {
            b.total_ns
                .cmp(&a.total_ns)
                .then(a.kind.cmp(&b.kind))
                .then(a.detail.cmp(&b.detail))
        });
        let holders = self.cpu_holders_list();
        if let Some(runnable) = parts.iter_mut().find(|p| p.kind == ComponentKind::Runnable) {
            runnable.cpu_holders = holders;
        }
        if let Some(on_cpu) = parts.iter_mut().find(|p| p.kind == ComponentKind::OnCpu) {
            on_cpu.in_syscalls = self.syscall_times();
        }
        let joined = std::mem::take(&mut self.joined);
        // Across every task of a host, a sleep without a contended lock is mostly a task
        // with nothing to do: no cost the trace can prove.
        let asleep_left_out_ns = if every_task {
            parts
                .iter()
                .filter(|p| p.kind == ComponentKind::Asleep)
                .map(|p| p.total_ns)
                .sum()
        } else {
            0
        };
        let unseen_left_out_ns = parts
            .iter()
            .filter(|p| p.kind == ComponentKind::Other && p.detail == crate::timeline::UNSEEN)
            .map(|p| p.total_ns)
            .sum::<u64>();
        Some(SubjectTime {
            tasks: seen as u32,
            unseen,
            total_ns: parts.iter().map(|p| p.total_ns).sum::<u64>()
                - asleep_left_out_ns
                - unseen_left_out_ns,
            unseen_left_out_ns,
            joined_ns: joined.values().sum(),
            joined: self.top(joined),
            parts,
            every_task,
            asleep_left_out_ns,
            asleep_from_before_ns: self.asleep_from_before_ns,
        })
    }

    /// Moves each subject task's sleep that the holders pass proved it took holding a lock
    /// others waited for (its held-across-sleep entries: holder, function slept in, time)
    /// from [`Part::Asleep`] to [`Part::HoldingAsleep`], at most the time the subject
    /// counted for that task in that function.
    fn move_held_sleeps(&mut self, holders: &[LockHolders], symbols: &dyn Symbols) {
        for lock in holders {
            for held in &lock.held_across_sleep {
                let mut left = held.slept_ns;
                let mut asleep: Vec<(Option<StackId>, u64)> = self
                    .by_task
                    .iter()
                    .filter_map(|(&(pid, part), &ns)| match part {
                        Part::Asleep(stack) if pid == held.holder_pid && ns > 0 => {
                            Some((stack, ns))
                        }
                        _ => None,
                    })
                    .filter(|&(stack, _)| {
                        cause_names::sleep_site(&self.stacks, stack, symbols) == held.function
                    })
                    .collect();
                // The same order every run: the map's is not.
                asleep.sort_by_key(|&(stack, ns)| (std::cmp::Reverse(ns), stack));
                for (stack, ns) in asleep {
                    let moved = ns.min(left);
                    if moved == 0 {
                        break;
                    }
                    left -= moved;
                    let pid = held.holder_pid;
                    for (part, delta) in [
                        (Part::Asleep(stack), -(moved as i128)),
                        (Part::HoldingAsleep(lock.lock_addr, stack), moved as i128),
                    ] {
                        for slot in [
                            self.totals.entry(part).or_default(),
                            self.by_task.entry((pid, part)).or_default(),
                        ] {
                            *slot = (*slot as i128 + delta).max(0) as u64;
                        }
                    }
                }
            }
        }
    }

    /// Per sleep as the findings name it: what its stacks say it waited for, who ended it
    /// and what those wakers ran meanwhile.
    fn sleeps_by_key(
        &self,
        symbols: &dyn Symbols,
        names: &HashMap<u64, &str>,
    ) -> HashMap<PartKey, SleepParts> {
        let mut out: HashMap<PartKey, SleepParts> = HashMap::new();
        let mut kinds: HashMap<Part, Option<&'static str>> = HashMap::new();
        for (&(part, waker), &ns) in &self.wakers {
            let Part::Asleep(stack) = part else { continue };
            let kind = *kinds
                .entry(part)
                .or_insert_with(|| crate::waits::stack_wait_kind(&self.stacks, stack, symbols));
            let entry = out.entry(self.describe(part, symbols, names)).or_default();
            let w = entry.wakers.entry(waker).or_default();
            w.0 += ns;
            if let Some(kind) = kind {
                *entry.kinds.entry(kind).or_default() += ns;
            }
        }
        for (&(part, waker, did), &ns) in &self.waker_did {
            let key = self.describe(part, symbols, names);
            if let Some(entry) = out.get_mut(&key) {
                *entry
                    .waker_did
                    .entry(waker)
                    .or_default()
                    .entry(did)
                    .or_default() += ns;
            }
        }
        for (&(part, waker, function, other), &ns) in &self.waker_work {
            let key = self.describe(part, symbols, names);
            if let Some(w) = out.get_mut(&key).and_then(|e| e.wakers.get_mut(&waker)) {
                let work = w.1.entry(function).or_default();
                work.0 += ns;
                if other != 0 {
                    *work.1.entry(other).or_default() += ns;
                }
            }
        }
        for entry in out.values_mut() {
            entry.waits_for = crate::waits::heaviest_kind(&entry.kinds).unwrap_or("");
        }
        out
    }

    /// The wakers of one sleep, most first, each with what it ran.
    fn sleep_wakers(
        &self,
        mut sleep: SleepParts,
        symbols: &dyn Symbols,
        names: &HashMap<u64, &str>,
    ) -> Vec<SleepWaker> {
        let mut waker_did = std::mem::take(&mut sleep.waker_did);
        let wakers: Vec<SleepWaker> = sleep
            .wakers
            .into_iter()
            .filter(|(_, (ns, _))| *ns > 0)
            .map(|(pid, (ns, work))| {
                let mut ran: Vec<WorkRan> = work
                    .into_iter()
                    .map(|(function, (ns, others))| {
                        let mut queuers: Vec<(i32, u64)> = others.into_iter().collect();
                        queuers.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                        WorkRan {
                            function: cause_names::function(symbols, function),
                            workqueue: self.work.queue_of(function).unwrap_or("").to_string(),
                            ns,
                            queued_by_others_ns: queuers.iter().map(|q| q.1).sum(),
                            queued_by_others: queuers
                                .iter()
                                .take(3)
                                .map(|&(pid, _)| format!("{}/{pid}", self.comm(pid)))
                                .collect(),
                        }
                    })
                    .collect();
                ran.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.function.cmp(&b.function)));
                ran.truncate(TOP_TASKS);
                let did = waker_did.remove(&pid).unwrap_or_default();
                SleepWaker {
                    meanwhile: self.waker_meanwhile(did, symbols, names),
                    comm: if pid == 0 {
                        "interrupt".into()
                    } else {
                        self.comm(pid)
                    },
                    pid,
                    tasks: 0,
                    ns,
                    ran,
                }
            })
            .collect();
        crate::waker_groups::fold(wakers, TOP_WAKERS)
    }

    /// What a waker did meanwhile, merged as the findings name parts, most time first.
    fn waker_meanwhile(
        &self,
        did: HashMap<Part, u64>,
        symbols: &dyn Symbols,
        names: &HashMap<u64, &str>,
    ) -> Vec<WakerMeanwhile> {
        let mut merged: HashMap<(ComponentKind, String, &'static str), u64> = HashMap::new();
        for (part, ns) in did {
            let (kind, detail, _) = self.describe(part, symbols, names);
            let waits_for = match part {
                Part::Asleep(stack) | Part::HoldingAsleep(_, stack) => {
                    crate::waits::stack_wait_kind(&self.stacks, stack, symbols).unwrap_or("")
                }
                _ => "",
            };
            *merged.entry((kind, detail, waits_for)).or_default() += ns;
        }
        let mut out: Vec<WakerMeanwhile> = merged
            .into_iter()
            .map(|((kind, detail, waits_for), ns)| WakerMeanwhile {
                kind,
                detail,
                waits_for: waits_for.to_string(),
                ns,
            })
            .collect();
        out.sort_by(|a, b| {
            b.ns.cmp(&a.ns)
                .then(a.kind.cmp(&b.kind))
                .then(a.detail.cmp(&b.detail))
        });
        out.truncate(TOP_WAKERS);
        out
    }

    /// The timed calls' latency with the part `key` removed (and halved), window by window.
    fn what_if(
        &self,
        key: &PartKey,
        symbols: &dyn Symbols,
        names: &HashMap<u64, &str>,
    ) -> Option<vmscale_run::findings::WhatIf> {
        if self.window_parts.is_empty() {
            return None;
        }
        let mut of_key: HashMap<Part, bool> = HashMap::new();
        let mut windows: Vec<&(i32, u32)> = self.window_parts.keys().collect();
        windows.sort_unstable();
        let mut samples = Vec::with_capacity(windows.len());
        for window in windows {
            let (pid, index) = *window;
            let Some(&(start, end)) = self
                .windows
                .get(&pid)
                .and_then(|(list, _)| list.get(index as usize))
            else {
                continue;
            };
            let cause: u64 = self.window_parts[window]
                .iter()
                .filter(|(part, _)| {
                    *of_key
                        .entry(*part)
                        .or_insert_with(|| self.describe(*part, symbols, names) == *key)
                })
                .map(|(_, ns)| ns)
                .sum();
            samples.push((end - start, cause));
        }
        crate::what_if::predict(samples.into_iter())
    }

    /// Who held the CPUs runnable subject tasks waited for, most first.
    fn cpu_holders_list(&self) -> Vec<CpuHolder> {
        let mut holders: Vec<CpuHolder> = self
            .cpu_holders
            .iter()
            .filter(|(_, &ns)| ns > 0)
            .map(|(&occupant, &ns)| match occupant {
                Occupant::Task(0) => CpuHolder {
                    comm: "idle".into(),
                    pid: 0,
                    ns,
                    subject: false,
                },
                Occupant::Task(pid) => CpuHolder {
                    comm: self.comm(pid),
                    pid,
                    ns,
                    subject: self.tasks.contains_key(&pid)
                        || self.exited.contains(&pid)
                        || self.roots.contains(&pid),
                },
                Occupant::Unknown => CpuHolder {
                    comm: "unknown".into(),
                    pid: -1,
                    ns,
                    subject: false,
                },
            })
            .collect();
        holders.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.pid.cmp(&b.pid)));
        crate::runqueue::fold_rest(holders, TOP_CPU_HOLDERS)
    }

    /// `tasks`' time by process, most first; empty when the trace names no process.
    fn top_processes(&self, tasks: &HashMap<i32, u64>) -> Vec<TaskTime> {
        if self.tgids.is_empty() {
            return Vec::new();
        }
        let mut by_process: HashMap<i32, (u64, (u64, i32))> = HashMap::new();
        for (&pid, &ns) in tasks {
            let tgid = self.tgids.get(&pid).copied().unwrap_or(pid);
            let entry = by_process.entry(tgid).or_default();
            entry.0 += ns;
            // Its busiest task names a process whose main thread left no name.
            entry.1 = entry.1.max((ns, pid));
        }
        let mut processes = self.top(
            by_process
                .iter()
                .map(|(&tgid, &(ns, _))| (tgid, ns))
                .collect(),
        );
        for process in &mut processes {
            if !self.comms.contains_key(&process.pid) {
                let busiest = by_process[&process.pid].1 .1;
                process.comm = self.comm(busiest);
            }
        }
        processes
    }

    fn top(&self, tasks: HashMap<i32, u64>) -> Vec<TaskTime> {
        let mut tasks: Vec<TaskTime> = tasks
            .into_iter()
            .filter(|&(_, ns)| ns > 0)
            .map(|(pid, ns)| TaskTime {
                comm: self.comm(pid),
                pid,
                ns,
            })
            .collect();
        tasks.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.pid.cmp(&b.pid)));
        tasks.truncate(TOP_TASKS);
        tasks
    }

    fn describe(&self, part: Part, symbols: &dyn Symbols, names: &HashMap<u64, &str>) -> PartKey {
        let (kind, detail) = match part {
            Part::OnCpu => (ComponentKind::OnCpu, String::new()),
            Part::Runnable => (ComponentKind::Runnable, String::new()),
            Part::Lock(lock) => (
                ComponentKind::Lock,
                cause_names::lock_site(lock, names, &self.lock_flags),
            ),
            Part::Asleep(stack) => (
                ComponentKind::Asleep,
                cause_names::sleep_site(&self.stacks, stack, symbols),
            ),
            Part::CrossCpu(func) => (
                ComponentKind::CrossCpu,
                cause_names::function(symbols, func),
            ),
            Part::Unseen => (ComponentKind::Other, crate::timeline::UNSEEN.to_string()),
            Part::HoldingAsleep(lock, stack) => {
                return (
                    ComponentKind::HoldingAsleep,
                    cause_names::sleep_site(&self.stacks, stack, symbols),
                    cause_names::lock_site(lock, names, &self.lock_flags),
                )
            }
        };
        (kind, detail, String::new())
    }
}

impl crate::pass::Pass for SubjectPass {
    fn reads(&self, tag: ViewTag, _: crate::ViewTags) -> crate::pass::Reads {
        crate::pass::view_if(Self::wants(tag))
    }

    #[inline(always)]
    fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        SubjectPass::observe(self, event, kind)
    }

    /// Every event places its task, whatever its view.
    #[inline(always)]
    fn observe_other(&mut self, event: &Event<'_>) {
        SubjectPass::observe(self, event, &EventKind::Other)
    }
}
