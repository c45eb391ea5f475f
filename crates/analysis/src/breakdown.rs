//! Where one measured operation's time goes.
//!
//! The scenario's measuring thread writes `vmscale: begin <label>` / `vmscale: end <label>`
//! around each measured loop, and its system calls are traced (filtered to that thread).
//! Every system call it makes inside a phase, sys_enter to sys_exit, is split by what the
//! thread was doing ([`crate::timeline`]): on a CPU, runnable (preempted or woken and not
//! yet running), waiting on a lock, asleep in some kernel function; the on-CPU time spent
//! waiting for other CPUs to run a function it asked them to run (csd_queue_cpu until the
//! targets' csd_function_exit) is cross-CPU work. Each sleep that ended during an operation
//! names its waker and what the waker was doing just before (one hop). A phase with no
//! traced system call is one operation from marker to marker.
//!
//! When the run says when each sample started and how long it took (the timed windows, on
//! the trace's clock), the operations are those windows and nothing else: what the thread
//! did between samples (pacing sleeps, waiting for vCPUs, writing markers) is never part
//! of an explanation ([`BreakdownPass::timed`]).
//!
//! Streaming: the measuring thread's spans back to its open operation, one note per task
//! (for wakers), one aggregate per phase and system call.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use vmscale_run::findings::{
    Component, ComponentKind, CpuHolder, OperationBreakdown, PhaseBreakdown, Waker,
};
use vmscale_run::LockContention;
use vmscale_stats::StreamingSummary;
use vmscale_trace::decode::event::Event;
use vmscale_trace::decode::views::{EventKind, ViewTag};

use crate::cause_names;
use crate::cause_names::function;
use crate::naming;
use crate::runqueue::{CpuHolders, Occupant, RunqueueWatch};
use crate::stacks::{StackId, StackTable};
use crate::symbols::Symbols;
use crate::timeline::{Activity, Gap, Timelines};

const BEGIN: &str = "vmscale: begin ";
const END: &str = "vmscale: end ";
const TOP_WAKERS: usize = 5;
/// A sleep site's wakers kept one by one, before the rest are said together.
const KEPT_WAKERS: usize = 64;
/// Cross-CPU windows kept per operation; more are merged into the last one.
const MAX_WINDOWS: usize = 64;
/// The pseudo system call numbers are part of the run record, which reports read.
pub use vmscale_run::findings::{TIMED_SAMPLE, WHOLE_PHASE};

const BEFORE_FIRST_EVENT: &str = "before the thread's first traced event";
const TRIMMED: &str = "older than the thread's kept history";

fn syscall_name(id: i64) -> String {
    if id == WHOLE_PHASE {
        return "phase".into();
    }
    if id == TIMED_SAMPLE {
        return "timed sample".into();
    }
    crate::syscalls::name(id)
}

/// A piece of an operation's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Part {
    OnCpu,
    Runnable,
    Lock(u64),
    Asleep(Option<StackId>),
    /// Waiting for other CPUs to run this function.
    CrossCpu(u64),
    Other(&'static str),
}

/// What a waker was doing when it woke the measuring thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Doing {
    /// Running a cross-CPU function call (in interrupt context on its CPU).
    Csd(u64),
    /// An interrupt on an idle CPU.
    Interrupt,
    /// It had just acquired this lock after waiting for it.
    AfterLock(u64),
    /// It had itself been woken by this task (the second hop).
    WokenBy(i32),
    /// A kernel worker running this work function when it woke the thread.
    Work(u64),
    Running,
}

/// Per task, what is needed to say what it was doing when it woke someone.
#[derive(Default)]
struct TaskNote {
    switched_in: u64,
    /// Lock and when its contended wait for it ended.
    acquired: Option<(u64, u64)>,
    woken_by: Option<i32>,
}

struct OpenOp {
    id: i64,
    start: u64,
    /// Closed cross-CPU windows and the function each waited for.
    windows: Vec<(u64, u64, u64)>,
    /// The window still open: start and function.
    window: Option<(u64, u64)>,
    /// csd addresses queued by the thread whose function has not run yet.
    pending: HashSet<u64>,
    /// (waker, what it did), the sleep it ended (its part), and how long that sleep was.
    wakes: Vec<((i32, Doing), Part, u64)>,
}

impl OpenOp {
    fn close_window(&mut self, ts: u64) {
        if let Some((start, func)) = self.window.take() {
            if self.windows.len() >= MAX_WINDOWS {
                if let Some(last) = self.windows.last_mut() {
                    last.1 = ts;
                }
            } else {
                self.windows.push((start, ts, func));
            }
        }
        self.pending.clear();
    }
}

#[derive(Default)]
struct OpAgg {
    latency: StreamingSummary,
    /// Part -> (total ns, operations with some of it).
    parts: HashMap<Part, (u64, u64)>,
    wakers: HashMap<(i32, Doing), (u64, u64)>,
    /// The same per sleep: (sleep, waker, doing) -> (wakeups, slept ns).
    sleep_wakers: HashMap<(Part, i32, Doing), (u64, u64)>,
}

struct PhaseState {
    label: String,
    pid: i32,
    start: u64,
    end: u64,
    saw_syscall: bool,
    ops: BTreeMap<i64, OpAgg>,
    /// Inside timed samples: who held the CPU while the thread was runnable.
    cpu_holders: CpuHolders,
    /// Each timed sample's latency and its parts, for what-if predictions; at most
    /// [`MAX_WHAT_IF_SAMPLES`].
    samples: Vec<(u64, Vec<(Part, u64)>)>,
}

/// Timed samples per phase kept sample by sample for the what-if predictions.
const MAX_WHAT_IF_SAMPLES: usize = 1 << 18;

/// The pass; feed it every event in time order, then [`BreakdownPass::finish`].
#[derive(Default)]
pub struct BreakdownPass {
    /// The measuring thread: whoever wrote the last begin marker.
    thread: Option<i32>,
    phase: Option<PhaseState>,
    done: Vec<PhaseState>,
    op: Option<OpenOp>,
    timelines: Timelines,
    /// The CPU the thread runs on as far as the trace says, and its last event there: where
    /// another task's event comes next on that CPU with no switch between, the switch away
    /// from the thread is missing ([`BreakdownPass::on_cpu`]).
    thread_cpu: Option<u32>,
    thread_seen_at: u64,
    /// The thread's last sleeping switch-out, while it sleeps.
    asleep_since: Option<u64>,
    /// CPU on which the thread's sleeping stack should come next.
    awaiting_stack: Option<u32>,
    stacks: StackTable,
    /// Flags of the locks the thread waited on, for naming those the contention pass lacks.
    lock_flags: HashMap<u64, u32>,
    notes: HashMap<i32, TaskNote>,
    /// What each kernel worker ran, to say what a waking worker did during the sleep.
    work: crate::workers::WorkHistory,
    /// CPU -> function of the cross-CPU call running there.
    csd_running: HashMap<u32, u64>,
    comms: HashMap<i32, String>,
    /// The measuring thread's timed samples as (start, end), sorted; empty when the run did
    /// not say, and the thread's system calls are the operations instead.
    windows: Vec<(u64, u64)>,
    /// The first window not yet closed.
    next_window: usize,
    /// Cross-CPU functions nobody waits for ([`crate::cause_names::ASYNC_CROSS_CALLS`]).
    async_calls: HashSet<u64>,
    /// Who runs where, for the thread's runnable time in timed samples.
    runqueue: RunqueueWatch,
    /// Task -> thread group, to tell the run's own threads from others'.
    tgids: HashMap<i32, i32>,
}

/// Holders named per timed phase.
const TOP_CPU_HOLDERS: usize = 8;

impl BreakdownPass {
    /// Tells the run's own threads (the measuring thread's process) from other tasks.
    pub fn with_processes(mut self, tgids: std::collections::HashMap<i32, i32>) -> BreakdownPass {
        self.tgids = tgids.into_iter().collect();
        self
    }

    /// Credits the thread's runnable stretches, inside timed samples, to who held its CPU.
    fn credit(&mut self, credits: Vec<(i32, Occupant, u64, u64)>) {
        // A runnable stretch inside a lock wait (a woken waiter not yet on a CPU) is
        // counted as the wait.
        if let Some(thread) = self.thread {
            if self.timelines.current(thread) != Some(Activity::Runnable) {
                return;
            }
        }
        let Some(phase) = &mut self.phase else { return };
        for (_, occupant, from, to) in credits {
            let first = self.windows.partition_point(|w| w.1 <= from);
            let ns: u64 = self.windows[first..]
                .iter()
                .take_while(|w| w.0 < to)
                .map(|w| w.1.min(to).saturating_sub(w.0.max(from)))
                .sum();
            if ns > 0 {
                *phase.cpu_holders.entry(occupant).or_default() += ns;
            }
        }
    }

    fn runqueue_leave(&mut self, pid: i32, ts: u64) {
        if self.runqueue.is_queued(pid) {
            let mut credits = Vec::new();
            self.runqueue
                .dequeue(pid, ts, |w, o, a, b| credits.push((w, o, a, b)));
            self.credit(credits);
        }
    }
    /// A pass whose operations are the timed samples `windows` (start, end on the trace's
    /// clock) of the thread that writes the phase markers.
    pub fn timed(mut windows: Vec<(u64, u64)>) -> BreakdownPass {
        windows.retain(|(start, end)| end >= start);
        windows.sort_unstable();
        BreakdownPass {
            windows,
            ..BreakdownPass::default()
        }
    }

    /// Cross-CPU calls to these functions (addresses) are queued and not waited for.
    pub fn with_async_calls(mut self, funcs: &[u64]) -> BreakdownPass {
        self.async_calls = funcs.iter().copied().collect();
        self
    }

    /// How far back the thread's activity may still be asked for.
    fn floor(&self, ts: u64) -> u64 {
        if !self.windows.is_empty() {
            return self
                .windows
                .get(self.next_window)
                .map_or(ts, |&(start, _)| start.min(ts));
        }
        match (&self.op, &self.phase) {
            (Some(op), _) => op.start,
            (None, Some(phase)) if !phase.saw_syscall => phase.start,
            _ => ts,
        }
    }

    /// Opens and closes the timed windows that began or ended before `ts`. A window with no
    /// event of the thread inside is split by the state the thread was in all along.
    fn advance_windows(&mut self, ts: u64) {
        while let Some(&(start, end)) = self.windows.get(self.next_window) {
            if self.op.is_none() {
                if ts < start {
                    return;
                }
                self.op = Some(OpenOp {
                    id: TIMED_SAMPLE,
                    start,
                    windows: Vec::new(),
                    window: None,
                    pending: HashSet::new(),
                    wakes: Vec::new(),
                });
            }
            if ts < end {
                return;
            }
            if let Some(op) = self.op.take() {
                if let Some(phase) = &mut self.phase {
                    phase.saw_syscall = true;
                }
                self.close_op(op, end);
            }
            self.next_window += 1;
        }
    }

    /// The views [`BreakdownPass::observe`] reads, but for system calls
    /// ([`BreakdownPass::reads_syscalls`]). Every other event may still end a timed window
    /// or show the measuring thread running: pass it to [`BreakdownPass::observe_other`].
    pub fn wants(tag: ViewTag) -> bool {
        use ViewTag::*;
        matches!(
            tag,
            Print
                | SchedSwitch
                | KernelStack
                | SchedWaking
                | SchedWakeup
                | ContentionBegin
                | ContentionEnd
                | CsdQueueCpu
                | CsdFunctionEntry
                | CsdFunctionExit
                | Work
        )
    }

    /// Whether events with view `tag` are system calls the pass reads, in a trace that can
    /// hold the views `trace` holds: then pass them to [`BreakdownPass::observe_syscall`].
    /// Only the measuring thread's are read, and only in a phase, which a begin marker
    /// (ftrace:print) opens.
    pub fn reads_syscalls(tag: ViewTag, trace: crate::ViewTags) -> bool {
        matches!(tag, ViewTag::SysEnter | ViewTag::SysExit) && trace.holds(ViewTag::Print)
    }

    /// [`BreakdownPass::observe`] for a system call: its view is read only when it is the
    /// measuring thread's, which most system calls of a big trace are not.
    #[inline(always)]
    pub fn observe_syscall(&mut self, event: &Event<'_>) {
        if self.thread == Some(event.pid()) && self.windows.is_empty() {
            return self.observe_own_syscall(event);
        }
        self.observe_other(event)
    }

    /// Kept out of line: [`BreakdownPass::observe_syscall`] runs for every system call of
    /// a trace, and this for few of them.
    #[inline(never)]
    fn observe_own_syscall(&mut self, event: &Event<'_>) {
        self.observe_view(event, &event.kind())
    }

    /// [`BreakdownPass::observe`] for an event whose view it does not read.
    #[inline]
    pub fn observe_other(&mut self, event: &Event<'_>) {
        let Some(thread) = self.thread else {
            return;
        };
        let ts = event.ts();
        self.on_cpu(thread, event.pid(), event.cpu(), ts);
        if !self.windows.is_empty() {
            self.advance_windows(ts);
        }
        if event.pid() == thread {
            let floor = self.floor(ts);
            // As in observe: credited while the timeline still says runnable.
            self.runqueue_leave(thread, ts);
            self.timelines.seen_running(thread, ts, floor);
        }
    }

    #[inline]
    pub fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        // Only the measuring thread's own system calls, outside timed windows, are read;
        // for every other task's (most events of a big trace) nothing else happens.
        if matches!(kind, EventKind::SysEnter(_) | EventKind::SysExit(_))
            && (self.thread != Some(event.pid()) || !self.windows.is_empty())
        {
            return self.observe_other(event);
        }
        self.observe_view(event, kind)
    }

    fn observe_view(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        let ts = event.ts();
        let pid = event.pid();
        let kind = *kind;
        self.note(event, &kind);
        if let Some(thread) = self.thread {
            // The stack trigger's event comes after the switch, in the task switched out.
            if !matches!(kind, EventKind::KernelStack(_)) {
                self.on_cpu(thread, pid, event.cpu(), ts);
            }
        }
        if !self.windows.is_empty() && self.thread.is_some() {
            self.advance_windows(ts);
        }
        if let EventKind::Print(print) = kind {
            let text = print.text();
            let text = text.trim_end();
            if let Some(label) = text.strip_prefix(BEGIN) {
                self.close_phase(ts);
                self.thread = Some(pid);
                (self.thread_cpu, self.thread_seen_at) = (Some(event.cpu()), ts);
                self.phase = Some(PhaseState {
                    label: label.to_string(),
                    pid,
                    start: ts,
                    end: ts,
                    saw_syscall: false,
                    ops: BTreeMap::new(),
                    cpu_holders: crate::runqueue::new_holders(),
                    samples: Vec::new(),
                });
            } else if text.starts_with(END) {
                self.close_phase(ts);
            }
            return;
        }
        let Some(thread) = self.thread else {
            return;
        };
        let floor = self.floor(ts);
        if pid == thread && !matches!(kind, EventKind::KernelStack(_) | EventKind::SchedSwitch(_)) {
            // Credited before the timeline learns it runs: the stretch up to now was
            // runnable time, and crediting checks that the timeline still says so.
            self.runqueue_leave(pid, ts);
            self.timelines.seen_running(pid, ts, floor);
        }
        match kind {
            EventKind::SchedSwitch(s) => {
                if !self.windows.is_empty() {
                    let mut credits = Vec::new();
                    self.runqueue
                        .switch(event.cpu(), ts, s.prev_pid, s.next_pid, |w, o, a, b| {
                            credits.push((w, o, a, b))
                        });
                    self.credit(credits);
                }
                if s.next_pid == thread {
                    self.runqueue_leave(thread, ts);
                }
                if s.prev_pid == thread {
                    let sleeping = s.prev_state & 0xff != 0;
                    if !sleeping && !self.windows.is_empty() {
                        self.runqueue.enqueue(thread, event.cpu(), ts);
                    }
                    self.timelines.switched_out(thread, ts, sleeping, floor);
                    self.asleep_since = sleeping.then_some(ts);
                    self.awaiting_stack = sleeping.then_some(event.cpu());
                } else if self.awaiting_stack == Some(event.cpu()) {
                    self.awaiting_stack = None;
                }
                if s.prev_pid == thread {
                    self.thread_cpu = None;
                }
                if s.next_pid == thread {
                    self.timelines.switched_in(thread, ts, floor);
                    self.asleep_since = None;
                    (self.thread_cpu, self.thread_seen_at) = (Some(event.cpu()), ts);
                }
            }
            // The stacktrace trigger on sched_switch runs in the switched-out task.
            EventKind::KernelStack(stack)
                if pid == thread && self.awaiting_stack.take() == Some(event.cpu()) =>
            {
                let id = self.stacks.intern(stack.iter());
                self.timelines.slept_in(thread, id);
            }
            EventKind::SchedWakeup(w) if w.pid == thread && self.runqueue.is_queued(thread) => {
                let mut credits = Vec::new();
                self.runqueue
                    .requeue(thread, w.target_cpu.max(0) as u32, ts, |p, o, a, b| {
                        credits.push((p, o, a, b))
                    });
                self.credit(credits);
            }
            EventKind::SchedWaking(w) if w.pid == thread => {
                if !self.windows.is_empty() && self.asleep_since.is_some() {
                    self.runqueue
                        .enqueue(thread, w.target_cpu.max(0) as u32, ts);
                }
                if let (Some(since), Some(op)) = (self.asleep_since.take(), &mut self.op) {
                    // In interrupt context the waker is the interrupt, not the task it hit.
                    let waker = if event.in_interrupt() { 0 } else { pid };
                    let mut doing = doing(&self.notes, &self.csd_running, waker, event.cpu());
                    // A worker that wakes the thread from inside a work item: that work
                    // ended the sleep (a flush's last item, a grace period's callbacks).
                    if waker > 0 && !matches!(doing, Doing::Csd(_)) {
                        if let Some(function) = self.work.running(waker) {
                            doing = Doing::Work(function);
                        }
                    }
                    let sleep = match self.timelines.current(thread) {
                        Some(Activity::Asleep(stack)) => Part::Asleep(stack),
                        _ => Part::Asleep(None),
                    };
                    op.wakes
                        .push(((waker, doing), sleep, ts.saturating_sub(since)));
                }
                self.timelines.woken(thread, ts, floor);
            }
            EventKind::ContentionBegin(b) if pid == thread => {
                self.lock_flags.entry(b.lock_addr).or_insert(b.flags);
                self.timelines
                    .wait_begins(thread, ts, b.lock_addr, b.flags, floor);
            }
            EventKind::ContentionEnd(end) if pid == thread => {
                self.timelines.wait_ends(thread, ts, end.lock_addr, floor);
            }
            EventKind::CsdQueueCpu(q) if pid == thread && !self.async_calls.contains(&q.func) => {
                if let Some(op) = &mut self.op {
                    op.pending.insert(q.csd);
                    op.window.get_or_insert((ts, q.func));
                }
            }
            EventKind::CsdFunctionExit(f) => {
                if let Some(op) = &mut self.op {
                    if op.pending.remove(&f.csd) && op.pending.is_empty() {
                        op.close_window(ts);
                    }
                }
            }
            EventKind::SysEnter(enter) if pid == thread && self.windows.is_empty() => {
                if let Some(phase) = &mut self.phase {
                    phase.saw_syscall = true;
                    self.op = Some(OpenOp {
                        id: enter.id,
                        start: ts,
                        windows: Vec::new(),
                        window: None,
                        pending: HashSet::new(),
                        wakes: Vec::new(),
                    });
                }
            }
            EventKind::SysExit(exit) if pid == thread && self.windows.is_empty() => {
                if let Some(op) = self.op.take() {
                    if op.id == exit.id {
                        self.close_op(op, ts);
                    }
                }
            }
            _ => {}
        }
    }

    /// An event of `pid` on `cpu`. Another task's, on the CPU the thread was last seen
    /// running on with no switch between, means the trace misses the thread's switch away
    /// (some hosts never trace their own housekeeping tasks, nor the switches to and from
    /// them): its running ended with its last event there, and what it did until it is seen
    /// again is not known.
    #[inline]
    fn on_cpu(&mut self, thread: i32, pid: i32, cpu: u32, ts: u64) {
        if pid == thread {
            (self.thread_cpu, self.thread_seen_at) = (Some(cpu), ts);
        } else if self.thread_cpu == Some(cpu) {
            self.thread_cpu = None;
            let floor = self.floor(ts);
            self.timelines
                .switched_away_unseen(thread, self.thread_seen_at, floor);
        }
    }

    /// What every task did recently, for naming wakers.
    fn note(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        let pid = event.pid();
        match kind {
            EventKind::Work(work) => self.work.observe(pid, event.ts(), work),
            EventKind::SchedSwitch(s) => {
                self.notes.entry(s.next_pid).or_default().switched_in = event.ts();
                remember(&mut self.comms, s.prev_pid, s.prev_comm.as_bytes());
                remember(&mut self.comms, s.next_pid, s.next_comm.as_bytes());
            }
            EventKind::SchedWaking(w) => {
                remember(&mut self.comms, w.pid, w.comm.as_bytes());
                if w.pid != pid {
                    self.notes.entry(w.pid).or_default().woken_by = Some(pid);
                }
            }
            EventKind::ContentionEnd(end) if end.ret == 0 && pid != 0 => {
                self.notes.entry(pid).or_default().acquired = Some((end.lock_addr, event.ts()));
            }
            EventKind::CsdFunctionEntry(f) => {
                self.csd_running.insert(event.cpu(), f.func);
            }
            EventKind::CsdFunctionExit(_) => {
                self.csd_running.remove(&event.cpu());
            }
            _ => {}
        }
    }

    fn close_op(&mut self, mut op: OpenOp, end: u64) {
        op.close_window(end);
        let Some(thread) = self.thread else { return };
        let mut parts: HashMap<Part, u64> = HashMap::new();
        split_into(
            &self.timelines,
            thread,
            op.start,
            end,
            &op.windows,
            &mut parts,
        );
        let Some(phase) = &mut self.phase else { return };
        if op.id == TIMED_SAMPLE && phase.samples.len() < MAX_WHAT_IF_SAMPLES {
            phase.samples.push((
                end - op.start,
                parts.iter().map(|(&p, &n)| (p, n)).collect(),
            ));
        }
        let agg = phase.ops.entry(op.id).or_default();
        agg.latency.record(end - op.start);
        for (part, n) in parts {
            let e = agg.parts.entry(part).or_default();
            e.0 += n;
            e.1 += 1;
        }
        for (key, sleep, slept) in op.wakes {
            let e = agg.wakers.entry(key).or_default();
            e.0 += 1;
            e.1 += slept;
            let e = agg.sleep_wakers.entry((sleep, key.0, key.1)).or_default();
            e.0 += 1;
            e.1 += slept;
        }
    }

    fn close_phase(&mut self, ts: u64) {
        // A call still open at the end marker is the marker's own write: not measured. (A
        // timed window never spans a marker: markers are written outside the samples.)
        if self.op.as_ref().is_some_and(|op| op.id == TIMED_SAMPLE) {
            if let Some(op) = self.op.take() {
                self.close_op(op, ts);
                self.next_window += 1;
            }
        }
        self.op = None;
        let Some(mut phase) = self.phase.take() else {
            return;
        };
        phase.end = ts;
        // With timed windows, a phase that timed nothing (zap's no-delete baseline) has no
        // operation to explain.
        if !phase.saw_syscall && self.windows.is_empty() {
            let mut parts = HashMap::new();
            split_into(&self.timelines, phase.pid, phase.start, ts, &[], &mut parts);
            let agg = phase.ops.entry(WHOLE_PHASE).or_default();
            agg.latency.record(ts - phase.start);
            agg.parts = parts.into_iter().map(|(p, n)| (p, (n, 1))).collect();
        }
        self.done.push(phase);
    }

    /// The findings in phase order; `contention` names the locks.
    pub fn finish(
        mut self,
        symbols: &dyn Symbols,
        contention: &[LockContention],
    ) -> Vec<PhaseBreakdown> {
        // A phase without its end marker (trace cut short) ends at its last event.
        if let Some(phase) = self.phase.take() {
            let end = self.op.as_ref().map_or(phase.start, |op| op.start);
            self.op = None;
            self.phase = Some(phase);
            self.close_phase(end);
        }
        let names: HashMap<u64, &str> = contention
            .iter()
            .map(|l| (l.lock_addr, l.name.as_str()))
            .collect();
        self.done
            .iter()
            .map(|phase| self.describe(phase, symbols, &names))
            .collect()
    }

    fn comm(&self, pid: i32) -> String {
        if pid == 0 {
            return "swapper".into();
        }
        self.comms.get(&pid).cloned().unwrap_or_else(|| "?".into())
    }

    fn lock_name(&self, lock: u64, names: &HashMap<u64, &str>) -> String {
        names.get(&lock).map_or_else(
            || {
                let flags = self.lock_flags.get(&lock).copied().unwrap_or(0);
                format!(
                    "{} @{lock:#x}",
                    naming::stack_name(naming::kind(flags), naming::mode(flags), None)
                )
            },
            |n| n.to_string(),
        )
    }

    fn describe_part(
        &self,
        part: Part,
        symbols: &dyn Symbols,
        names: &HashMap<u64, &str>,
    ) -> (ComponentKind, String) {
        match part {
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
            Part::CrossCpu(func) => (ComponentKind::CrossCpu, function(symbols, func)),
            Part::Other(why) => (ComponentKind::Other, why.to_string()),
        }
    }

    fn describe_doing(
        &self,
        doing: Doing,
        symbols: &dyn Symbols,
        names: &HashMap<u64, &str>,
    ) -> String {
        match doing {
            Doing::Csd(func) => format!("running cross-CPU call {}", function(symbols, func)),
            Doing::Interrupt => "an interrupt on an idle CPU".into(),
            Doing::AfterLock(lock) => format!("had just acquired {}", self.lock_name(lock, names)),
            Doing::WokenBy(pid) => format!("running, itself woken by {}/{pid}", self.comm(pid)),
            Doing::Work(func) => match self.work.queue_of(func) {
                Some(queue) => format!("running {} (workqueue {queue})", function(symbols, func)),
                None => format!("running {}", function(symbols, func)),
            },
            Doing::Running => "running".into(),
        }
    }

    /// Who ended the operations' sleeps at the site `detail`, most sleep first.
    fn sleep_wakers(
        &self,
        agg: &OpAgg,
        detail: &str,
        symbols: &dyn Symbols,
        names: &HashMap<u64, &str>,
    ) -> Vec<Waker> {
        let mut merged: HashMap<(i32, Doing), (u64, u64)> = HashMap::new();
        for (&(sleep, pid, doing), &(wakeups, slept)) in &agg.sleep_wakers {
            if self.describe_part(sleep, symbols, names).1 == detail {
                let e = merged.entry((pid, doing)).or_default();
                e.0 += wakeups;
                e.1 += slept;
            }
        }
        let mut wakers: Vec<Waker> = merged
            .into_iter()
            .map(|((pid, doing), (wakeups, slept_ns))| Waker {
                comm: self.comm(pid),
                pid,
                doing: self.describe_doing(doing, symbols, names),
                wakeups,
                slept_ns,
                tasks: 0,
            })
            .collect();
        wakers.sort_by(|a, b| {
            b.slept_ns
                .cmp(&a.slept_ns)
                .then(b.wakeups.cmp(&a.wakeups))
                .then(a.pid.cmp(&b.pid))
        });
        fold_rest_of_wakers(wakers)
    }

    /// The phase's timed samples with the components `keys` removed, and halved.
    fn what_if(
        &self,
        phase: &PhaseState,
        keys: &[(ComponentKind, &str)],
        symbols: &dyn Symbols,
        names: &HashMap<u64, &str>,
    ) -> Option<vmscale_run::findings::WhatIf> {
        if phase.samples.is_empty() {
            return None;
        }
        let mut of_key: HashMap<Part, bool> = HashMap::new();
        let samples: Vec<(u64, u64)> = phase
            .samples
            .iter()
            .map(|(latency, parts)| {
                let cause = parts
                    .iter()
                    .filter(|&&(part, _)| {
                        *of_key.entry(part).or_insert_with(|| {
                            let (kind, detail) = self.describe_part(part, symbols, names);
                            keys.iter().any(|k| kind == k.0 && detail == k.1)
                        })
                    })
                    .map(|(_, ns)| ns)
                    .sum();
                (*latency, cause)
            })
            .collect();
        crate::what_if::predict(samples.into_iter())
    }

    /// The timed samples with several of the largest causes removed together: each pair
    /// of the three largest components that are waits, and all three. A sample's time in
    /// two causes is removed once, where adding two single predictions would remove it
    /// twice, and a change that removes two causes (pinning, say: no preemption and no
    /// cross-CPU wait) is predicted as such.
    fn what_ifs_together(
        &self,
        phase: &PhaseState,
        components: &[Component],
        symbols: &dyn Symbols,
        names: &HashMap<u64, &str>,
    ) -> Vec<vmscale_run::findings::WhatIfTogether> {
        // The operation's own on-CPU work is never removed: without it there is no
        // operation (its what-if halves it instead).
        let causes: Vec<(ComponentKind, &str)> = components
            .iter()
            .filter(|c| c.kind != ComponentKind::Other && c.kind != ComponentKind::OnCpu)
            .take(3)
            .map(|c| (c.kind, c.detail.as_str()))
            .collect();
        let mut sets: Vec<Vec<(ComponentKind, &str)>> = Vec::new();
        for i in 0..causes.len() {
            for j in i + 1..causes.len() {
                sets.push(vec![causes[i], causes[j]]);
            }
        }
        if causes.len() == 3 {
            sets.push(causes.clone());
        }
        sets.into_iter()
            .filter_map(|keys| {
                let prediction = self.what_if(phase, &keys, symbols, names)?;
                Some(vmscale_run::findings::WhatIfTogether {
                    removed: keys.iter().map(|&(k, d)| (k, d.to_string())).collect(),
                    prediction,
                })
            })
            .collect()
    }

    /// Who held the CPU while the thread was runnable in the phase's timed samples.
    fn cpu_holders_list(&self, phase: &PhaseState) -> Vec<CpuHolder> {
        let own = self.tgids.get(&phase.pid).copied();
        let mut holders: Vec<CpuHolder> = phase
            .cpu_holders
            .iter()
            .filter(|(_, &ns)| ns > 0)
            .map(|(&occupant, &ns)| {
                let pid = match occupant {
                    Occupant::Task(pid) => pid,
                    Occupant::Unknown => -1,
                };
                CpuHolder {
                    comm: match pid {
                        0 => "idle".into(),
                        -1 => "unknown".into(),
                        _ => self.comm(pid),
                    },
                    pid,
                    ns,
                    subject: pid > 0
                        && (pid == phase.pid
                            || own.is_some_and(|own| self.tgids.get(&pid) == Some(&own))),
                }
            })
            .collect();
        holders.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.pid.cmp(&b.pid)));
        crate::runqueue::fold_rest(holders, TOP_CPU_HOLDERS)
    }

    fn describe(
        &self,
        phase: &PhaseState,
        symbols: &dyn Symbols,
        names: &HashMap<u64, &str>,
    ) -> PhaseBreakdown {
        let mut operations: Vec<OperationBreakdown> = phase
            .ops
            .iter()
            .map(|(&id, agg)| {
                let mut merged: HashMap<(ComponentKind, String), (u64, u64)> = HashMap::new();
                // Per sleep site, what its stacks say it waited for, by the time each
                // stack weighs.
                let mut kinds: HashMap<String, HashMap<&'static str, u64>> = HashMap::new();
                for (&part, &(n, ops)) in &agg.parts {
                    let key = self.describe_part(part, symbols, names);
                    if let Part::Asleep(stack) = part {
                        if let Some(kind) =
                            crate::waits::stack_wait_kind(&self.stacks, stack, symbols)
                        {
                            *kinds
                                .entry(key.1.clone())
                                .or_default()
                                .entry(kind)
                                .or_default() += n;
                        }
                    }
                    let e = merged.entry(key).or_default();
                    e.0 += n;
                    e.1 += ops;
                }
                let mut components: Vec<Component> = merged
                    .into_iter()
                    .filter(|(_, (n, _))| *n > 0)
                    .map(|((kind, detail), (total_ns, operations))| Component {
                        cpu_holders: if kind == ComponentKind::Runnable && id == TIMED_SAMPLE {
                            self.cpu_holders_list(phase)
                        } else {
                            Vec::new()
                        },
                        what_if: (id == TIMED_SAMPLE)
                            .then(|| self.what_if(phase, &[(kind, &detail)], symbols, names))
                            .flatten(),
                        wakers: if kind == ComponentKind::Asleep {
                            self.sleep_wakers(agg, &detail, symbols, names)
                        } else {
                            Vec::new()
                        },
                        waits_for: match kind {
                            ComponentKind::Asleep => kinds
                                .get(&detail)
                                .and_then(crate::waits::heaviest_kind)
                                .unwrap_or("")
                                .to_string(),
                            _ => String::new(),
                        },
                        kind,
                        detail,
                        total_ns,
                        operations: operations.min(agg.latency.count()),
                    })
                    .collect();
                components.sort_by(|a, b| {
                    b.total_ns
                        .cmp(&a.total_ns)
                        .then(a.kind.cmp(&b.kind))
                        .then(a.detail.cmp(&b.detail))
                });
                let mut wakers: Vec<Waker> = agg
                    .wakers
                    .iter()
                    .map(|(&(pid, doing), &(wakeups, slept_ns))| Waker {
                        comm: self.comm(pid),
                        pid,
                        doing: self.describe_doing(doing, symbols, names),
                        wakeups,
                        slept_ns,
                        tasks: 0,
                    })
                    .collect();
                wakers.sort_by(|a, b| {
                    b.slept_ns
                        .cmp(&a.slept_ns)
                        .then(b.wakeups.cmp(&a.wakeups))
                        .then(a.pid.cmp(&b.pid))
                });
                wakers.truncate(TOP_WAKERS);
                let what_if_together = match id {
                    TIMED_SAMPLE => self.what_ifs_together(phase, &components, symbols, names),
                    _ => Vec::new(),
                };
                OperationBreakdown {
                    operation: syscall_name(id),
                    syscall: id,
                    count: agg.latency.count(),
                    latency: agg.latency.summary(),
                    total_ns: agg.latency.total(),
                    components,
                    wakers,
                    what_if_together,
                }
            })
            .collect();
        operations.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.syscall.cmp(&b.syscall)));
        PhaseBreakdown {
            label: phase.label.clone(),
            pid: phase.pid,
            comm: self.comm(phase.pid),
            duration_ns: phase.end.saturating_sub(phase.start),
            operations,
        }
    }
}

/// The idle task is named where it is shown ("swapper"), never from its per-CPU names.
fn remember(comms: &mut HashMap<i32, String>, pid: i32, comm: &[u8]) {
    if pid != 0 {
        crate::task_names::remember(comms, pid, comm);
    }
}

/// What `waker` was doing when it woke someone on `cpu`.
fn doing(notes: &HashMap<i32, TaskNote>, csd: &HashMap<u32, u64>, waker: i32, cpu: u32) -> Doing {
    if let Some(&func) = csd.get(&cpu) {
        return Doing::Csd(func);
    }
    if waker == 0 {
        return Doing::Interrupt;
    }
    let Some(note) = notes.get(&waker) else {
        return Doing::Running;
    };
    match (note.acquired, note.woken_by) {
        (Some((lock, at)), _) if at >= note.switched_in => Doing::AfterLock(lock),
        (_, Some(by)) => Doing::WokenBy(by),
        _ => Doing::Running,
    }
}

/// Splits `[from, to)` of the thread's time into parts; on-CPU time inside a cross-CPU
/// window (`windows`: start, end, function; in time order) is waiting for other CPUs.
fn split_into(
    timelines: &Timelines,
    thread: i32,
    from: u64,
    to: u64,
    windows: &[(u64, u64, u64)],
    parts: &mut HashMap<Part, u64>,
) {
    let mut cursor = from;
    timelines.split(thread, from, to, |piece, n| {
        let (a, b) = (cursor, cursor + n);
        cursor = b;
        let part = match piece {
            Ok(Activity::Running) => {
                let mut inside = 0;
                for &(ws, we, func) in windows {
                    let overlap = we.min(b).saturating_sub(ws.max(a));
                    if overlap > 0 {
                        *parts.entry(Part::CrossCpu(func)).or_default() += overlap;
                        inside += overlap;
                    }
                }
                *parts.entry(Part::OnCpu).or_default() += n - inside.min(n);
                return;
            }
            Ok(Activity::Runnable) => Part::Runnable,
            Ok(Activity::Asleep(stack)) => Part::Asleep(stack),
            Ok(Activity::Waiting(lock)) => Part::Lock(lock),
            Ok(Activity::Unseen) => Part::Other(crate::timeline::UNSEEN),
            Err(Gap::BeforeFirstEvent) => Part::Other(BEFORE_FIRST_EVENT),
            Err(Gap::Trimmed) => Part::Other(TRIMMED),
        };
        *parts.entry(part).or_default() += n;
    });
}

/// The wakers of one sleep site past the first [`KEPT_WAKERS`] said together, by what they
/// were doing (without who woke each of them in turn). A VM's vCPU threads end a pause-all
/// wait in turn, each woken by another: keeping only five of those (task, doing) pairs left
/// 40% of the sleep with no waker said. The verdict names few of them; it needs them all to
/// say them by kind ("24 vcpuN threads") and to count each task once.
fn fold_rest_of_wakers(mut wakers: Vec<Waker>) -> Vec<Waker> {
    if wakers.len() <= KEPT_WAKERS + 1 {
        return wakers;
    }
    let rest = wakers.split_off(KEPT_WAKERS);
    let kept: HashSet<i32> = wakers.iter().map(|w| w.pid).collect();
    let mut groups: Vec<(Waker, Vec<i32>)> = Vec::new();
    for w in rest {
        let doing = without_whose_wake(&w.doing).to_string();
        let at = match groups.iter().position(|(g, _)| g.doing == doing) {
            Some(at) => at,
            None => {
                groups.push((
                    Waker {
                        comm: String::new(),
                        pid: crate::runqueue::REST_PID,
                        doing,
                        wakeups: 0,
                        slept_ns: 0,
                        tasks: 0,
                    },
                    Vec::new(),
                ));
                groups.len() - 1
            }
        };
        let (group, pids) = &mut groups[at];
        group.wakeups += w.wakeups;
        group.slept_ns += w.slept_ns;
        if !pids.contains(&w.pid) && !kept.contains(&w.pid) {
            pids.push(w.pid);
            group.tasks += 1;
            let names = group.comm.split(", ").filter(|n| !n.is_empty()).count();
            if names < 3 && !w.comm.is_empty() && !group.comm.split(", ").any(|n| n == w.comm) {
                if !group.comm.is_empty() {
                    group.comm.push_str(", ");
                }
                group.comm.push_str(&w.comm);
            }
        }
    }
    wakers.extend(groups.into_iter().map(|(g, _)| g));
    wakers
}

/// What a waker did, without who had woken it in turn ("running, itself woken by
/// vcpu3/12" is "running"): the part that says what kind of waker it was.
pub(crate) fn without_whose_wake(doing: &str) -> &str {
    doing.split(", itself woken by ").next().unwrap_or(doing)
}

impl crate::pass::Pass for BreakdownPass {
    fn reads(&self, tag: ViewTag, trace: crate::ViewTags) -> crate::pass::Reads {
        use crate::pass::Reads;
        if Self::wants(tag) {
            Reads::View
        } else if Self::reads_syscalls(tag, trace) {
            Reads::Syscall
        } else {
            Reads::Nothing
        }
    }

    #[inline(always)]
    fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        BreakdownPass::observe(self, event, kind)
    }

    #[inline(always)]
    fn observe_other(&mut self, event: &Event<'_>) {
        BreakdownPass::observe_other(self, event)
    }

    #[inline(always)]
    fn observe_syscall(&mut self, event: &Event<'_>) {
        BreakdownPass::observe_syscall(self, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakers_past_those_kept_are_said_together_and_their_sleep_still_counts() {
        let wakers: Vec<Waker> = (0..70)
            .map(|i| Waker {
                comm: format!("vcpu{i}"),
                pid: 100 + i,
                doing: format!("running, itself woken by vcpu{}/{}", i + 1, 101 + i),
                wakeups: 1,
                slept_ns: 1_000 - i as u64,
                tasks: 0,
            })
            .collect();
        let folded = fold_rest_of_wakers(wakers);
        assert_eq!(folded.len(), KEPT_WAKERS + 1);
        let rest = folded.last().unwrap();
        assert_eq!(
            (rest.pid, rest.tasks, rest.doing.as_str()),
            (crate::runqueue::REST_PID, 6, "running")
        );
        assert_eq!(rest.comm, "vcpu64, vcpu65, vcpu66");
        let slept: u64 = folded.iter().map(|w| w.slept_ns).sum();
        assert_eq!(slept, (0..70).map(|i| 1_000 - i as u64).sum::<u64>());
    }

    #[test]
    fn on_cpu_time_inside_a_cross_cpu_window_is_waiting_for_other_cpus() {
        let mut t = Timelines::default();
        t.switched_in(7, 100, 0);
        t.switched_out(7, 200, false, 0);
        t.switched_in(7, 250, 0);
        t.wait_begins(7, 300, 0xabc, 0, 0);
        t.wait_ends(7, 320, 0xabc, 0);
        let mut parts = HashMap::new();
        split_into(&t, 7, 150, 400, &[(180, 260, 0xf00)], &mut parts);
        assert_eq!(parts[&Part::CrossCpu(0xf00)], 30);
        assert_eq!(parts[&Part::Runnable], 50);
        assert_eq!(parts[&Part::Lock(0xabc)], 20);
        assert_eq!(parts[&Part::OnCpu], 150);
        assert_eq!(parts.values().sum::<u64>(), 250);
    }

    #[test]
    fn a_waker_is_described_by_what_it_did_last() {
        let mut notes = HashMap::new();
        let csd: HashMap<u32, u64> = [(3, 0xf00)].into_iter().collect();
        assert_eq!(doing(&notes, &csd, 5, 3), Doing::Csd(0xf00));
        assert_eq!(doing(&notes, &csd, 0, 1), Doing::Interrupt);
        notes.insert(
            5,
            TaskNote {
                switched_in: 100,
                acquired: Some((0xabc, 150)),
                woken_by: Some(9),
            },
        );
        assert_eq!(doing(&notes, &csd, 5, 1), Doing::AfterLock(0xabc));
        notes.get_mut(&5).unwrap().switched_in = 200;
        assert_eq!(doing(&notes, &csd, 5, 1), Doing::WokenBy(9));
        assert_eq!(syscall_name(16), "ioctl");
        assert_eq!(syscall_name(999), "syscall 999");
    }
}
