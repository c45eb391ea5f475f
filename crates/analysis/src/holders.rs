//! Who made each waiter of a sleeping lock wait, and what that holder was doing meanwhile.
//!
//! A task blocked on a mutex or rwsem is woken by the task that released the lock: the last
//! sched_waking of the waiter before its contention_end, traced in the releaser's context,
//! names the holder it sat behind. The waiter, once it has the lock, is the next holder, so
//! a lock's holds form a chain of segments, each ending at the release that woke a waiter.
//! A wait is then split over the segments it overlaps and, inside each, by what the holder
//! was doing ([`crate::timeline`]): running, runnable, asleep (in which kernel function),
//! itself waiting on another lock; time between holders is a handoff, and time the trace
//! cannot explain is unknown, with the reason.
//!
//! Where the kernel traces every acquisition and release of a lock (mmap_lock:*, for each
//! mm's mmap_lock), the holds are those events' and nothing is inferred: a hold starts at
//! its acquire_returned and ends at its released, and a hold whose acquisition came before
//! the trace started is known only from its first traced event.
//!
//! Streaming: state is the open waits of each task (they nest, [`crate::open_waits`]), recent segments per lock, per-task spans back
//! to the oldest open wait, and aggregates per lock, holder and sleeping stack.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt, HashSet};

use vmscale_run::findings::{
    ActivityShare, HeldAcrossSleep, Holder, HolderActivity, HolderGroup, LockHolders,
};
use vmscale_run::LockContention;
use vmscale_trace::decode::event::Event;
use vmscale_trace::decode::views::{
    contention_flags as flag, EventKind, IpiSendCpu, IpiSendCpumask, MmapLock, MmapLockStep,
    ViewTag,
};

use crate::naming;
use crate::open_waits::{OpenWaits, Wait};
use crate::stacks::{StackId, StackTable};
use crate::symbols::Symbols;
use crate::timeline::{Activity, Gap, Timelines};

pub(crate) const TOP_HOLDERS: usize = 5;

/// Keeps the first [`TOP_HOLDERS`] of `holders` (sorted, most waiting behind first) and
/// returns the rest by name (a numbered name's kind) and activity, most waiting first.
pub(crate) fn fold_more_holders(holders: &mut Vec<Holder>) -> Vec<HolderGroup> {
    if holders.len() <= TOP_HOLDERS {
        return Vec::new();
    }
    let rest = holders.split_off(TOP_HOLDERS);
    // (name, activity, detail) -> (tasks, waiting)
    let mut groups: BTreeMap<(String, HolderActivity, String), (u64, u64)> = BTreeMap::new();
    for h in &rest {
        let name = crate::task_names::group_of(&h.comm);
        for a in &h.activity {
            let g = groups
                .entry((name.clone(), a.activity, a.detail.clone()))
                .or_default();
            g.0 += 1;
            g.1 += a.wait_ns;
        }
    }
    let mut out: Vec<HolderGroup> = groups
        .into_iter()
        .map(|((name, activity, detail), (tasks, wait_ns))| HolderGroup {
            name,
            tasks,
            activity,
            detail,
            wait_ns,
        })
        .collect();
    out.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then_with(|| a.name.cmp(&b.name)));
    out
}
pub(crate) const TOP_SLEEPS: usize = 5;
const MAX_FRAMES: usize = 16;

/// Why a piece of a wait has no known holder activity.
pub(crate) const NO_RELEASER: &str = "no wakeup names the releaser";
pub(crate) const NOT_PROVEN: &str = "the holder's acquisition was not traced";
pub(crate) const BEFORE_FIRST_EVENT: &str = "before the holder's first traced event";
pub(crate) const TRIMMED: &str = "older than the holder's kept history";
const INTERRUPTED: &str = "the wait ended without the lock (interrupted)";
pub(crate) const NO_STACK: &str = "no stack recorded";
/// Why a mutex waiter's spin proves its owner ran: `mutex_optimistic_spin` keeps spinning
/// only while the owner is on a CPU (`owner_on_cpu`), with preemption off, and gives up
/// (queueing, tracing a new begin) as soon as it is not.
pub const SPUN: &str =
    "a waiter spun on it, which a mutex's waiter does only while its owner is on a CPU";

/// Sleeping locks: the waiter blocks and is woken by the releaser. Spinning waits (spinlocks,
/// rwlocks, a mutex still spinning) end without a wakeup and name no holder.
pub(crate) fn is_sleeping(flags: u32) -> bool {
    flags & (flag::MUTEX | flag::RT | flag::PERCPU) != 0
        || (flags & (flag::READ | flag::WRITE) != 0 && flags & flag::SPIN == 0)
}

/// A wait that has entered the lock's wait queue. A mutex traces its first begin with SPIN
/// while it spins on the owner, outside the queue, and a second one without SPIN once it
/// has queued (the first waiter may spin again later, still queued); other sleeping locks
/// trace their begin as they queue.
fn enters_queue(flags: u32) -> bool {
    is_sleeping(flags) && (flags & flag::MUTEX == 0 || flags & flag::SPIN == 0)
}

/// A mutex: while a waiter is queued on one, the kernel traces every acquisition (the fast
/// path's compare-and-swap fails on the waiters flag, and the slow path traces a begin and
/// an end even when its first try succeeds) and every release wakes the first waiter, so a
/// release proves who held the lock since the queue formed. Rwsems steal (readers, and
/// writers spinning on the owner) without a trace, so only a traced acquisition proves theirs.
/// `mutex_trylock`, which the kernel never traces, is the one way around this.
fn holds_are_traced_while_queued(flags: u32) -> bool {
    flags & flag::MUTEX != 0
}

/// A mutex waiter spinning on the owner ([`SPUN`]): before queueing, or as the first waiter.
fn is_mutex_spin(flags: u32) -> bool {
    flags & flag::MUTEX != 0 && flags & flag::SPIN != 0
}

/// sched_switch's prev_state bit for 'D' (killable sleeps show as 'D' too).
const TASK_UNINTERRUPTIBLE: i64 = 0x2;

/// A runnable task switched out was preempted; any TASK_* bit in the low byte means it went
/// to sleep (the byte above is the tracepoint's "preempted" marker).
fn is_sleeping_state(prev_state: i64) -> bool {
    prev_state & 0xff != 0
}

/// One piece of attributed wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Piece {
    Running,
    Runnable,
    Asleep(Option<StackId>),
    Nested(u64),
    Handoff,
    /// The holder, unnamed, ran: the waiter was spinning on a mutex ([`SPUN`]).
    Spun,
    Unknown(&'static str),
}

impl From<Activity> for Piece {
    fn from(activity: Activity) -> Piece {
        match activity {
            Activity::Running => Piece::Running,
            Activity::Runnable => Piece::Runnable,
            Activity::Asleep(stack) => Piece::Asleep(stack),
            Activity::Waiting(lock) => Piece::Nested(lock),
            Activity::Unseen => Piece::Unknown(crate::timeline::UNSEEN),
        }
    }
}

impl From<Gap> for Piece {
    fn from(gap: Gap) -> Piece {
        match gap {
            Gap::BeforeFirstEvent => Piece::Unknown(BEFORE_FIRST_EVENT),
            Gap::Trimmed => Piece::Unknown(TRIMMED),
        }
    }
}

struct OpenWait {
    lock: u64,
    flags: u32,
    start: u64,
    /// The tasks that woke the waiter from an interruptible sleep while it was queued, and
    /// when, oldest first (at most [`MAX_WAKERS`], the latest kept): a release, unless the
    /// wait ends interrupted (a signal woke it), which only its end says.
    wakers: Vec<(i32, u64)>,
    /// Its latest sleep was uninterruptible ('D'): only the lock's release wakes it, so a
    /// wakeup is a release as it happens, and its hold is recorded then, while what the
    /// holder did just before is current (it may take the lock again before the waiter runs).
    uninterruptible: bool,
    /// It has entered the lock's wait queue ([`enters_queue`]).
    queued: bool,
    /// When it spun on a mutex's owner: from a begin with SPIN until the next begin without
    /// it (queueing, or giving up the spin as the first waiter) or the end (open: `u64::MAX`).
    spins: Vec<(u64, u64)>,
}

/// Wakers kept per wait ([`OpenWait::wakers`]).
const MAX_WAKERS: usize = 16;

/// Spin phases kept per wait; a first waiter spins again after each wakeup, and past this
/// many the last phase is stretched rather than a new one kept.
const MAX_SPINS: usize = 32;

impl OpenWait {
    fn spin_begins(&mut self, ts: u64) {
        let full = self.spins.len() >= MAX_SPINS;
        match self.spins.last_mut() {
            Some(last) if last.1 == u64::MAX => {}
            Some(last) if full => last.1 = u64::MAX,
            _ => self.spins.push((ts, u64::MAX)),
        }
    }

    fn spin_ends(&mut self, ts: u64) {
        if let Some(last) = self.spins.last_mut().filter(|l| l.1 == u64::MAX) {
            last.1 = ts;
        }
    }

    /// How much of `[from, to)` it spent spinning.
    fn spun_within(&self, from: u64, to: u64) -> u64 {
        self.spins
            .iter()
            .map(|&(a, b)| b.min(to).saturating_sub(a.max(from)))
            .sum()
    }
}

impl Wait for OpenWait {
    fn lock(&self) -> u64 {
        self.lock
    }

    fn flags(&self) -> u32 {
        self.flags
    }
}

/// One hold that ended by waking a waiter.
#[derive(Debug, Clone, Copy)]
struct Segment {
    holder: i32,
    /// Acquisition, or where it is known to have held the lock from.
    start: u64,
    start_known: bool,
    /// The release (the waking of the next holder).
    end: u64,
}

#[derive(Default)]
struct HolderAgg {
    holds: u64,
    shared_holds: u64,
    ipis: u64,
    behind_ns: u64,
    split: HashMap<Piece, u64>,
}

#[derive(Default)]
struct SleepAgg {
    holds: u64,
    slept_ns: u64,
    held_ns: u64,
    held_at_least: bool,
    waiters: HashSet<i32>,
    waiter_wait_ns: u64,
}

#[derive(Default)]
struct LockState {
    flags: Option<u32>,
    waits: u64,
    total_ns: u64,
    waiters: HashMap<i32, (u64, u64)>,
    segments: Vec<Segment>,
    /// Tasks that took the lock from a contended wait while others still queued: they will
    /// release it by waking one, so their hold starts here.
    acquired: HashMap<i32, u64>,
    /// Each task's latest sleeping wait on this lock: a wait proves the task did not hold
    /// the lock while it waited, and its successful end proves an acquisition.
    own: HashMap<i32, OwnWait>,
    split: HashMap<Piece, u64>,
    holders: HashMap<i32, HolderAgg>,
    sleeps: HashMap<(i32, Option<StackId>), SleepAgg>,
    /// Holds come from the kernel's acquire and release events, not from wakeups.
    exact: bool,
    /// Open waits in the lock's wait queue, and since when at least one has been
    /// ([`holds_are_traced_while_queued`]).
    queued: u32,
    queued_since: Option<u64>,
    /// Traced acquisitions (contention_end with the lock), back to the oldest queued wait:
    /// an acquisition by another task after the queue formed bounds a hold not traced.
    acquisitions: Vec<(u64, i32)>,
}

/// A task's latest sleeping wait on a lock.
#[derive(Debug, Clone, Copy)]
struct OwnWait {
    began: u64,
    /// Waited for read: the hold it led to is shared.
    read: bool,
    /// When it ended with the lock (ret 0).
    acquired: Option<u64>,
}

/// The pass; feed it every event in time order, then [`HoldersPass::finish`].
#[derive(Default)]
pub struct HoldersPass {
    timelines: Timelines,
    open: OpenWaits<OpenWait>,
    /// Starts of open sleeping waits (a multiset): the oldest is how far back holder
    /// activity may still be asked for.
    open_starts: BTreeMap<u64, u32>,
    /// Every lock's `acquired` times (a multiset), kept only when capturing: a hold still to
    /// be learnt may start at one of them.
    acquired_starts: Option<BTreeMap<u64, u32>>,
    /// CPU -> task switched out asleep whose stack should come next on that CPU.
    awaiting_stack: HashMap<u32, i32>,
    stacks: StackTable,
    locks: HashMap<u64, LockState>,
    comms: HashMap<i32, String>,
    capture: Option<HoldCapture>,
    /// Per task, when it sent IPIs, back to the oldest open wait (and at most
    /// [`MAX_IPI_TIMES`]): a hold learnt at its release counts those inside it.
    ipi_times: HashMap<i32, std::collections::VecDeque<u64>>,
    /// Per CPU, the last task seen there that the timelines already know: a task once
    /// known stays known, so its next events on that CPU need no lookup.
    known_on_cpu: Vec<i32>,
    /// Per CPU, the last event of the task in `known_on_cpu` there: where another task's
    /// event comes next without a switch between, that task's running ended then.
    seen_at: Vec<u64>,
    /// Per CPU, the task its last traced switch switched in (-1: none yet).
    switched_in: Vec<i32>,
    /// Tasks switched in whose switch out never came (the CPU's next switch came from
    /// another task): the trace misses their events. Per task, how often.
    untraced: HashMap<i32, u64>,
    /// Switches checked against the CPU's last one.
    switches_checked: u64,
    mmap: ExactMmapLocks,
    /// Where the kernel queues a remote wakeup as a cross-CPU call (`ttwu_queue_wakelist`):
    /// IPIs sent from there are the release waking the next waiter, not work the holder
    /// made other CPUs do.
    wakeup_sites: Vec<(u64, u64)>,
}

/// The share of switches missed from which the trace is said to miss them.
const MISSED_SWITCHES_SAID: f64 = 0.01;

/// Functions whose cross-CPU calls are wakeups ([`HoldersPass::with_wakeup_sites`]).
pub const WAKEUP_CALL_SITES: [&str; 1] = ["ttwu_queue_wakelist"];

/// mmap_lock holds as the kernel's mmap_lock events give them.
#[derive(Default)]
struct ExactMmapLocks {
    /// Task -> the mm whose lock it asked for and has not got yet.
    asking: HashMap<i32, u64>,
    /// (mm, task) -> when it got that mm's lock, and whether for writing.
    held: HashMap<(u64, i32), (u64, bool)>,
    /// mm -> the address contention events give its lock: learnt from a task that waited
    /// on a lock between asking for an mm's mmap_lock and getting it.
    lock_of: HashMap<u64, u64>,
    /// When the first mmap_lock event came: a release without a traced acquisition was
    /// held at least since then.
    first_event: Option<u64>,
}

/// CPUs [`HoldersPass::known_on_cpu`] covers (the kernel's most); events of others are
/// looked up every time.
const MAX_CACHED_CPUS: usize = 8192;

/// IPI send times kept per task; older ones are dropped (and go uncounted).
const MAX_IPI_TIMES: usize = 65_536;

/// One hold of a sleeping lock, as the pass inferred it (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub lock: u64,
    pub holder: i32,
    pub start: u64,
    /// False when the acquisition was not traced: it held the lock at least from `start`.
    pub start_known: bool,
    /// The release: the waking of the next holder.
    pub end: u64,
}

/// Holds overlapping a window, kept for a timeline; at most [`MAX_CAPTURED_HOLDS`].
struct HoldCapture {
    start: u64,
    end: u64,
    holds: Vec<Hold>,
}

const MAX_CAPTURED_HOLDS: usize = 4096;

impl HoldersPass {
    /// Leaves out of a holder's IPIs those sent from [`WAKEUP_CALL_SITES`] (located in
    /// `symbols`; without kallsyms nothing is left out). ipi_raise, which names no call
    /// site, is never counted: on ARM most function-call IPIs are remote wakeups (1,494 of
    /// 1,702 in a 6.12 recording), which it cannot tell apart.
    pub fn with_wakeup_sites(mut self, symbols: &vmscale_trace::Kallsyms) -> HoldersPass {
        self.wakeup_sites = WAKEUP_CALL_SITES
            .iter()
            .filter_map(|name| symbols.text_extent(name))
            .collect();
        self
    }

    /// A pass that also keeps every hold overlapping `[start, end]`.
    pub fn capturing(start: u64, end: u64) -> HoldersPass {
        HoldersPass {
            capture: Some(HoldCapture {
                start,
                end,
                holds: Vec::new(),
            }),
            acquired_starts: Some(BTreeMap::new()),
            ..HoldersPass::default()
        }
    }

    /// The holds kept by a [`HoldersPass::capturing`] pass so far.
    pub fn captured(&self) -> &[Hold] {
        self.capture.as_ref().map_or(&[], |c| c.holds.as_slice())
    }

    /// Takes the holds captured so far, for a consumer that streams them out. A hold that
    /// releases more waiters later comes again with the same start and a later end.
    pub fn drain_captured(&mut self) -> Vec<Hold> {
        self.capture
            .as_mut()
            .map(|c| std::mem::take(&mut c.holds))
            .unwrap_or_default()
    }

    fn capture_hold(&mut self, hold: Hold) {
        let Some(capture) = self.capture.as_mut() else {
            return;
        };
        if hold.end < capture.start || hold.start > capture.end {
            return;
        }
        // A hold that released several waiters grows in place.
        if let Some(same) = capture
            .holds
            .iter_mut()
            .rev()
            .find(|h| h.lock == hold.lock && h.holder == hold.holder && h.start == hold.start)
        {
            same.end = same.end.max(hold.end);
        } else if capture.holds.len() < MAX_CAPTURED_HOLDS {
            capture.holds.push(hold);
        }
    }

    /// Whether a capturing pass, now at `now`, can capture nothing more: past the window,
    /// with every sleeping wait that began in or before it over. A hold is only learnt at
    /// its release, which wakes a queued waiter, so a hold overlapping the window that is
    /// still to come needs such a wait.
    pub fn capture_complete(&self, now: u64) -> bool {
        // A holder that took the lock from a contended wait in or before the window is
        // known to hold it from then on: its hold, released later, overlaps the window
        // even when every waiter queued in the window has given up meanwhile.
        let acquired_since = self
            .acquired_starts
            .as_ref()
            .and_then(|starts| starts.keys().next().copied());
        self.capture.as_ref().is_none_or(|c| {
            now > c.end && self.floor() > c.end && acquired_since.is_none_or(|at| at > c.end)
        })
    }

    fn floor(&self) -> u64 {
        self.open_starts.keys().next().copied().unwrap_or(u64::MAX)
    }

    /// The views [`HoldersPass::observe`] reads. Every other event still shows its task
    /// running: pass it to [`HoldersPass::observe_other`].
    pub fn wants(tag: ViewTag) -> bool {
        use ViewTag::*;
        matches!(
            tag,
            ContentionBegin
                | ContentionEnd
                | SchedSwitch
                | KernelStack
                | SchedWaking
                | SchedWakeup
                | SchedWakeupNew
                | MmapLock
                | IpiSendCpu
                | IpiSendCpumask
        )
    }

    /// [`HoldersPass::observe`] for an event whose view it does not read: all such an
    /// event says is that its task runs, which is news only when the CPU last showed
    /// another task.
    #[inline]
    pub fn observe_other(&mut self, event: &Event<'_>) {
        self.on_cpu(event.pid(), event.cpu() as usize, event.ts());
    }

    /// `pid` has an event on `cpu`: it runs there.
    #[inline]
    fn on_cpu(&mut self, pid: i32, cpu: usize, ts: u64) {
        match self.known_on_cpu.get(cpu) {
            Some(&known) if known == pid => self.seen_at[cpu] = ts,
            None if pid == 0 => {}
            _ => {
                let floor = self.floor();
                self.cpu_changed_hands(pid, cpu, ts, floor);
            }
        }
    }

    /// `pid` shows on `cpu` where another task was last known to run, with no switch
    /// between: the trace misses that task's switch away (some hosts never trace their own
    /// housekeeping tasks, nor the switches to and from them), and its running ended with
    /// its last event there, not at its next traced switch.
    fn cpu_changed_hands(&mut self, pid: i32, cpu: usize, ts: u64, floor: u64) {
        if let (Some(&known), Some(&at)) = (self.known_on_cpu.get(cpu), self.seen_at.get(cpu)) {
            if known > 0 {
                self.timelines.switched_away_unseen(known, at, floor);
            }
        }
        match pid {
            0 => {
                if let Some(known) = self.known_on_cpu.get_mut(cpu) {
                    *known = 0;
                }
            }
            _ => self.running(pid, cpu, ts, floor),
        }
    }

    /// A switch on `cpu` from `prev`: where the CPU's last traced switch switched in
    /// another task, that task's switch out (and whatever ran after it) is missing.
    fn check_switch(&mut self, cpu: usize, prev: i32, next: i32) {
        if cpu >= MAX_CACHED_CPUS {
            return;
        }
        if self.switched_in.len() <= cpu {
            self.switched_in.resize(cpu + 1, -1);
        }
        let last = std::mem::replace(&mut self.switched_in[cpu], next);
        if last >= 0 {
            self.switches_checked += 1;
            if last != prev {
                *self.untraced.entry(last).or_default() += 1;
            }
        }
    }

    /// How often a CPU's next switch did not come from the task switched in last, and the
    /// tasks that happened after most ("tokio-rt-worker/70"), most first: the trace misses
    /// their context switches, and what ran after them is said as theirs. Nothing below
    /// [`MISSED_SWITCHES_SAID`] of the switches (and ten): a page lost or cut away costs a
    /// few, which the trace's own damage warnings already say.
    pub fn missed_switches(&self) -> (u64, Vec<String>) {
        let count: u64 = self.untraced.values().sum();
        if count < 10 || (count as f64) < self.switches_checked as f64 * MISSED_SWITCHES_SAID {
            return (0, Vec::new());
        }
        let mut tasks: Vec<(&i32, &u64)> = self.untraced.iter().collect();
        tasks.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        (
            tasks.iter().map(|t| *t.1).sum(),
            // The idle task is traced: after it, the switch to an untraced task went
            // missing too, and that task is not known by name.
            tasks
                .iter()
                .filter(|&&(&pid, _)| pid > 0)
                .take(3)
                .map(|&(&pid, _)| format!("{}/{pid}", self.comm(pid)))
                .collect(),
        )
    }

    /// `pid` shows it runs on `cpu` at `ts`.
    fn running(&mut self, pid: i32, cpu: usize, ts: u64, floor: u64) {
        self.timelines.seen_running(pid, ts, floor);
        if cpu < MAX_CACHED_CPUS {
            if self.known_on_cpu.len() <= cpu {
                self.known_on_cpu.resize(cpu + 1, 0);
                self.seen_at.resize(cpu + 1, 0);
            }
            self.known_on_cpu[cpu] = pid;
            self.seen_at[cpu] = ts;
        }
    }

    pub fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        let ts = event.ts();
        let pid = event.pid();
        let floor = self.floor();
        // The stack trigger's event comes after the switch, in the task switched out.
        if !matches!(kind, EventKind::KernelStack(_)) {
            self.on_cpu(pid, event.cpu() as usize, ts);
        }
        match *kind {
            EventKind::ContentionBegin(begin) => {
                self.awaiting_stack.remove(&event.cpu());
                self.begin(pid, ts, begin.lock_addr, begin.flags);
            }
            EventKind::ContentionEnd(end) => self.end(pid, ts, end.lock_addr, end.ret),
            EventKind::SchedSwitch(switch) => {
                self.check_switch(event.cpu() as usize, switch.prev_pid, switch.next_pid);
                self.remember(switch.prev_pid, switch.prev_comm.as_bytes());
                self.remember(switch.next_pid, switch.next_comm.as_bytes());
                let sleeping = is_sleeping_state(switch.prev_state);
                self.timelines
                    .switched_out(switch.prev_pid, ts, sleeping, floor);
                if sleeping {
                    for wait in self.open.of_mut(switch.prev_pid) {
                        wait.uninterruptible = switch.prev_state & TASK_UNINTERRUPTIBLE != 0;
                    }
                }
                if sleeping && switch.prev_pid != 0 {
                    self.awaiting_stack.insert(event.cpu(), switch.prev_pid);
                } else {
                    self.awaiting_stack.remove(&event.cpu());
                }
                self.timelines.switched_in(switch.next_pid, ts, floor);
                // The CPU is next's now: a later event of prev there means prev runs again,
                // even where its switch-in is missing from the trace.
                if let Some(known) = self.known_on_cpu.get_mut(event.cpu() as usize) {
                    *known = switch.next_pid;
                    self.seen_at[event.cpu() as usize] = ts;
                }
            }
            EventKind::KernelStack(stack) => {
                // The stacktrace trigger on sched_switch runs before the switch completes,
                // in the context of the task being switched out.
                let expected = self.awaiting_stack.remove(&event.cpu());
                self.stack_arrived(expected, pid, stack.iter());
            }
            EventKind::SchedWaking(w) => {
                self.remember(w.pid, w.comm.as_bytes());
                // The wakeup ends the sleep of whichever of its waits sleeps; one in an
                // interrupt is the interrupt's, never the interrupted task's release.
                if w.pid != pid && pid != 0 && !event.in_interrupt() {
                    let mut released = Vec::new();
                    for wait in self.open.of_mut(w.pid).iter_mut().filter(|w| w.queued) {
                        if wait.uninterruptible {
                            released.push((wait.lock, wait.flags));
                        } else {
                            if wait.wakers.len() >= MAX_WAKERS {
                                wait.wakers.remove(0);
                            }
                            wait.wakers.push((pid, ts));
                        }
                    }
                    for (lock, flags) in released {
                        if !self.locks.get(&lock).is_some_and(|s| s.exact) {
                            self.add_segment(lock, pid, ts, flags);
                        }
                    }
                }
                self.timelines.woken(w.pid, ts, floor);
            }
            EventKind::SchedWakeup(w) | EventKind::SchedWakeupNew(w) => {
                self.remember(w.pid, w.comm.as_bytes());
            }
            EventKind::MmapLock(step) if pid != 0 => self.mmap_lock(pid, ts, step),
            // A function call on other CPUs (a TLB shootdown, a cross-CPU call), not a
            // reschedule: waking the next waiter sends those, and every hold ends in one.
            EventKind::IpiSendCpu(IpiSendCpu {
                callback, callsite, ..
            })
            | EventKind::IpiSendCpumask(IpiSendCpumask {
                callback, callsite, ..
            }) if pid != 0
                && callback != 0
                && !self
                    .wakeup_sites
                    .iter()
                    .any(|&(start, end)| (start..end).contains(&callsite)) =>
            {
                self.ipi_sent(pid, ts, floor)
            }
            _ => {}
        }
    }

    /// `pid` sent a function-call IPI at `ts`.
    fn ipi_sent(&mut self, pid: i32, ts: u64, floor: u64) {
        let times = self.ipi_times.entry(pid).or_default();
        while times.front().is_some_and(|&t| t < floor) || times.len() >= MAX_IPI_TIMES {
            times.pop_front();
        }
        // Only a task that may hold a lock someone waits for needs them.
        if floor != u64::MAX {
            times.push_back(ts);
        }
    }

    /// IPIs `pid` sent in `[from, to]`.
    fn ipis_between(&self, pid: i32, from: u64, to: u64) -> u64 {
        self.ipi_times.get(&pid).map_or(0, |times| {
            let first = times.partition_point(|&t| t < from);
            let last = times.partition_point(|&t| t <= to);
            last.saturating_sub(first) as u64
        })
    }

    /// A kernel stack is the sleeping task's only when it follows that task's switch-out.
    fn stack_arrived(
        &mut self,
        expected: Option<i32>,
        pid: i32,
        frames: impl Iterator<Item = u64>,
    ) {
        if expected == Some(pid) {
            let id = self.stacks.intern(frames);
            self.timelines.slept_in(pid, id);
        }
    }

    /// The latest name wins: a new thread starts with its parent's name and renames itself.
    fn remember(&mut self, pid: i32, comm: &[u8]) {
        crate::task_names::remember(&mut self.comms, pid, comm);
    }

    fn begin(&mut self, pid: i32, ts: u64, lock: u64, flags: u32) {
        if pid == 0 {
            return;
        }
        // Waiting on an rwsem between asking for an mm's mmap_lock and getting it: that is
        // the mm's mmap_lock, and its holds are the mmap_lock events' from now on.
        if flags & (flag::READ | flag::WRITE) != 0 && flags & flag::SPIN == 0 {
            if let Some(&mm) = self.mmap.asking.get(&pid) {
                self.mmap.lock_of.insert(mm, lock);
                self.locks.entry(lock).or_default().exact = true;
            }
        }
        let floor = self.floor();
        match self.open.on(pid, lock) {
            // A mutex traces a second begin when it stops spinning and sleeps.
            Some(wait) => {
                if !is_sleeping(wait.flags) && is_sleeping(flags) {
                    multiset_add(&mut self.open_starts, wait.start);
                }
                wait.flags = flags;
                if is_mutex_spin(flags) {
                    wait.spin_begins(ts);
                } else {
                    wait.spin_ends(ts);
                }
                if !wait.queued && enters_queue(flags) {
                    wait.queued = true;
                    self.enqueue(lock, ts);
                }
            }
            None => {
                if is_sleeping(flags) {
                    multiset_add(&mut self.open_starts, ts);
                    self.locks.entry(lock).or_default().own.insert(
                        pid,
                        OwnWait {
                            began: ts,
                            read: flags & flag::READ != 0,
                            acquired: None,
                        },
                    );
                }
                let queued = enters_queue(flags);
                let replaced = self.open.open(
                    pid,
                    OpenWait {
                        lock,
                        flags,
                        start: ts,
                        wakers: Vec::new(),
                        uninterruptible: false,
                        queued,
                        spins: if is_mutex_spin(flags) {
                            vec![(ts, u64::MAX)]
                        } else {
                            Vec::new()
                        },
                    },
                );
                for old in &replaced {
                    self.forget_start(old);
                    self.dequeue(old);
                }
                if queued {
                    self.enqueue(lock, ts);
                }
            }
        }
        self.timelines.wait_begins(pid, ts, lock, flags, floor);
    }

    fn enqueue(&mut self, lock: u64, ts: u64) {
        let state = self.locks.entry(lock).or_default();
        state.queued += 1;
        state.queued_since.get_or_insert(ts);
    }

    fn dequeue(&mut self, wait: &OpenWait) {
        if !wait.queued {
            return;
        }
        if let Some(state) = self.locks.get_mut(&wait.lock) {
            state.queued = state.queued.saturating_sub(1);
            if state.queued == 0 {
                state.queued_since = None;
            }
        }
    }

    fn forget_start(&mut self, wait: &OpenWait) {
        if !is_sleeping(wait.flags) {
            return;
        }
        multiset_remove(&mut self.open_starts, wait.start);
    }

    fn end(&mut self, pid: i32, ts: u64, lock: u64, ret: i32) {
        // Without a begin on this lock the end is stray: what is open goes on.
        let Some((wait, lost)) = self.open.close(pid, lock) else {
            return;
        };
        for inner in &lost {
            self.forget_start(inner);
            self.dequeue(inner);
        }
        self.forget_start(&wait);
        if is_sleeping(wait.flags) {
            self.close(pid, &wait, ts, ret);
        }
        // Out of the queue only now: its own release proved a hold while it was queued.
        self.dequeue(&wait);
        let floor = self.floor();
        self.timelines.wait_ends(pid, ts, lock, floor);
    }

    /// Starts of the waits still open on `lock`.
    fn queued(&self, lock: u64) -> impl Iterator<Item = u64> + '_ {
        self.open
            .iter()
            .filter(move |w| w.lock == lock && is_sleeping(w.flags))
            .map(|w| w.start)
    }

    fn close(&mut self, pid: i32, wait: &OpenWait, end: u64, ret: i32) {
        let others_queued = self.queued(wait.lock).next().is_some();
        // Only a queued waiter is woken by a release (a spinning one is not woken at all),
        // and only one that got the lock: an interrupted wait's last wakeup may be a signal.
        let exact = self.locks.get(&wait.lock).is_some_and(|s| s.exact);
        if ret == 0 && !exact {
            for &(holder, released) in &wait.wakers {
                self.add_segment(wait.lock, holder, released, wait.flags);
            }
        }
        let tail = if ret != 0 {
            Piece::Unknown(INTERRUPTED)
        } else {
            Piece::Handoff
        };
        self.attribute(pid, wait, end, tail);

        let waited = end.saturating_sub(wait.start);
        let state = self.locks.entry(wait.lock).or_default();
        if ret == 0 {
            if let Some(own) = state.own.get_mut(&pid) {
                own.acquired = Some(end);
            }
            state.acquisitions.push((end, pid));
        }
        state.flags.get_or_insert(wait.flags);
        state.waits += 1;
        state.total_ns += waited;
        let w = state.waiters.entry(pid).or_default();
        w.0 += 1;
        w.1 += waited;
        let replaced = if ret == 0 && others_queued {
            if let Some(starts) = &mut self.acquired_starts {
                multiset_add(starts, end);
            }
            state.acquired.insert(pid, end)
        } else {
            state.acquired.remove(&pid)
        };
        if let Some(at) = replaced {
            forget_acquired(&mut self.acquired_starts, at);
        }
        // Segments that ended before every remaining waiter arrived can no longer be asked.
        let oldest = self.queued(wait.lock).min();
        let state = self.locks.get_mut(&wait.lock).expect("inserted above");
        match oldest {
            Some(oldest) => {
                state.segments.retain(|s| s.end >= oldest);
                // The latest acquisition before the oldest wait still bounds holds to come.
                let keep_from = state
                    .acquisitions
                    .iter()
                    .rposition(|&(at, _)| at < oldest)
                    .unwrap_or(0);
                state.acquisitions.drain(..keep_from);
            }
            None => {
                state.segments.clear();
                state.acquisitions.clear();
                for (_, at) in state.acquired.drain() {
                    forget_acquired(&mut self.acquired_starts, at);
                }
            }
        }
    }

    /// Records the hold `holder` ended at `released`, with its sleeps; `flags` are those of
    /// the wait it released.
    fn add_segment(&mut self, lock: u64, holder: i32, released: u64, flags: u32) {
        let state = self.locks.entry(lock).or_default();
        let last_end = state.segments.iter().map(|s| s.end).max();
        let own = state.own.get(&holder).copied();
        // A holder that wakes several waiters (an rwsem writer waking readers) releases once;
        // but one that waited on the lock itself since its last release let it go before
        // that wait: this is a new hold, never the old one extended.
        let rewaited = |after: u64| own.is_some_and(|o| o.began > after);
        if let Some(last) = state.segments.last_mut() {
            if last.holder == holder && !rewaited(last.end) {
                let from = last.end;
                last.end = last.end.max(released);
                let (start_known, to) = (last.start_known, last.end);
                let hold = Hold {
                    lock,
                    holder,
                    start: last.start,
                    start_known,
                    end: to,
                };
                self.capture_hold(hold);
                self.account_sleeps(lock, holder, from, to, start_known, false);
                let ipis = self.ipis_between(holder, from.saturating_add(1), to);
                if let Some(agg) = self
                    .locks
                    .get_mut(&lock)
                    .and_then(|s| s.holders.get_mut(&holder))
                {
                    agg.ipis += ipis;
                }
                return;
            }
        }
        let acquired = state.acquired.remove(&holder);
        if let Some(at) = acquired {
            forget_acquired(&mut self.acquired_starts, at);
        }
        // The holder's own wait on the lock, ended with it after the previous release,
        // proves the acquisition even when nobody else queued at that moment.
        let own_acquired = own
            .and_then(|o| o.acquired)
            .filter(|&at| at <= released && last_end.is_none_or(|e| at >= e));
        let shared = own.is_some_and(|o| o.read && o.acquired.is_some());
        let (start, start_known) = match acquired.or(own_acquired) {
            Some(at) if at <= released => (at, true),
            // The acquisition was not traced. A mutex's holder held it since the queue
            // formed, if nobody else acquired it since and it was not released before
            // ([`holds_are_traced_while_queued`]); for any other lock the trace proves only
            // the release.
            _ => {
                let proven_from = state
                    .queued_since
                    .filter(|_| holds_are_traced_while_queued(flags))
                    .map(|queued| {
                        let other_acquired = state
                            .acquisitions
                            .iter()
                            .filter(|&&(at, pid)| pid != holder && at <= released)
                            .map(|&(at, _)| at)
                            .max()
                            .unwrap_or(0);
                        let waited_until = own.map_or(0, |o| o.began);
                        let from = queued.max(last_end.unwrap_or(0)).max(waited_until);
                        // Another task took the lock after that, and its release went
                        // unseen: when this holder took it is not known.
                        (other_acquired <= from).then_some(from)
                    });
                (
                    proven_from.flatten().unwrap_or(released).min(released),
                    false,
                )
            }
        };
        self.new_hold(
            Hold {
                lock,
                holder,
                start,
                start_known,
                end: released,
            },
            shared,
        );
    }

    /// Records a hold that waiters queued behind: its segment, its holder's counts (with
    /// the cross-CPU calls it sent meanwhile), the capture, and its sleeps.
    fn new_hold(&mut self, hold: Hold, shared: bool) {
        let ipis = self.ipis_between(hold.holder, hold.start, hold.end);
        let state = self.locks.entry(hold.lock).or_default();
        state.segments.push(Segment {
            holder: hold.holder,
            start: hold.start,
            start_known: hold.start_known,
            end: hold.end,
        });
        let agg = state.holders.entry(hold.holder).or_default();
        agg.holds += 1;
        agg.shared_holds += u64::from(shared);
        agg.ipis += ipis;
        self.capture_hold(hold);
        self.account_sleeps(
            hold.lock,
            hold.holder,
            hold.start,
            hold.end,
            hold.start_known,
            true,
        );
    }

    fn mmap_lock(&mut self, pid: i32, ts: u64, event: MmapLock) {
        self.mmap.first_event.get_or_insert(ts);
        match event.step {
            MmapLockStep::StartLocking => {
                self.mmap.asking.insert(pid, event.mm);
            }
            MmapLockStep::AcquireReturned => {
                self.mmap.asking.remove(&pid);
                if event.success {
                    self.mmap.held.insert((event.mm, pid), (ts, event.write));
                }
            }
            MmapLockStep::Released => {
                let acquired = self.mmap.held.remove(&(event.mm, pid));
                let Some(&lock) = self.mmap.lock_of.get(&event.mm) else {
                    return;
                };
                let (start, start_known, write) = match acquired {
                    Some((at, write)) => (at, true, write),
                    None => (self.mmap.first_event.unwrap_or(ts), false, event.write),
                };
                self.exact_hold(lock, pid, start, start_known, ts, !write);
            }
        }
    }

    /// A hold the kernel's events prove, `[start, end]`; only holds someone queued behind
    /// are kept.
    fn exact_hold(
        &mut self,
        lock: u64,
        holder: i32,
        start: u64,
        start_known: bool,
        end: u64,
        shared: bool,
    ) {
        let queued_since = self.queued(lock).min();
        if queued_since.is_none_or(|since| since > end) {
            return;
        }
        self.new_hold(
            Hold {
                lock,
                holder,
                start,
                start_known,
                end,
            },
            shared,
        );
    }

    /// Adds the holder's sleeps during `[from, to)` of a hold to the lock's sleep table.
    fn account_sleeps(
        &mut self,
        lock: u64,
        holder: i32,
        from: u64,
        to: u64,
        start_known: bool,
        new_hold: bool,
    ) {
        let mut slept: HashMap<Option<StackId>, u64> = HashMap::new();
        self.timelines.split(holder, from, to, |piece, n| {
            if let Ok(Activity::Asleep(stack)) = piece {
                *slept.entry(stack).or_default() += n;
            }
        });
        let state = self.locks.entry(lock).or_default();
        for (stack, n) in slept {
            let agg = state.sleeps.entry((holder, stack)).or_default();
            if new_hold {
                agg.holds += 1;
            }
            agg.slept_ns += n;
            agg.held_ns += to.saturating_sub(from);
            agg.held_at_least |= !start_known;
        }
    }

    /// Splits the wait `[wait.start, end)` over the lock's holds and their holders' activity.
    fn attribute(&mut self, waiter: i32, wait: &OpenWait, end: u64, tail: Piece) {
        let mut segments = self
            .locks
            .get(&wait.lock)
            .map(|s| s.segments.clone())
            .unwrap_or_default();
        segments.sort_by_key(|s| (s.start, s.end));
        let mut pieces: Vec<(Option<i32>, Piece, u64)> = Vec::new();
        // Time no proven hold covers, while the waiter spun, had a running owner ([`SPUN`]).
        let gap = |pieces: &mut Vec<(Option<i32>, Piece, u64)>, from: u64, to: u64, piece| {
            let spun = wait.spun_within(from, to.min(end));
            if spun > 0 {
                pieces.push((None, Piece::Spun, spun));
            }
            if to > from + spun {
                pieces.push((None, piece, to - from - spun));
            }
        };
        let mut cursor = wait.start;
        // With every acquisition and release traced, time no hold covers is time the lock
        // was between holders.
        let exact = self.locks.get(&wait.lock).is_some_and(|s| s.exact);
        let released_by =
            |t: u64, segments: &[Segment]| exact || segments.iter().any(|s| s.end <= t);
        for segment in &segments {
            // A release the trace saw, of a hold it cannot date, is an empty segment: the
            // time up to it had a holder, and which one is not proven.
            if segment.end <= cursor || segment.start >= end {
                continue;
            }
            let a = segment.start.max(cursor);
            let b = segment.end.min(end);
            if a > cursor {
                let gap_piece = if exact || (segment.start_known && released_by(cursor, &segments))
                {
                    Piece::Handoff
                } else if segment.start_known {
                    Piece::Unknown(NO_RELEASER)
                } else {
                    Piece::Unknown(NOT_PROVEN)
                };
                gap(&mut pieces, cursor, a, gap_piece);
            }
            if b > a {
                self.timelines.split(segment.holder, a, b, |piece, n| {
                    let piece = match piece {
                        Ok(activity) => activity.into(),
                        Err(gap) => gap.into(),
                    };
                    pieces.push((Some(segment.holder), piece, n));
                });
            }
            cursor = cursor.max(b);
        }
        if end > cursor {
            let rest = if released_by(cursor, &segments) {
                tail
            } else {
                Piece::Unknown(NO_RELEASER)
            };
            gap(&mut pieces, cursor, end, rest);
        }

        let state = self.locks.entry(wait.lock).or_default();
        for (holder, piece, n) in pieces {
            *state.split.entry(piece).or_default() += n;
            let Some(holder) = holder else { continue };
            let agg = state.holders.entry(holder).or_default();
            agg.behind_ns += n;
            *agg.split.entry(piece).or_default() += n;
            if let Piece::Asleep(stack) = piece {
                let sleep = state.sleeps.entry((holder, stack)).or_default();
                sleep.waiters.insert(waiter);
                sleep.waiter_wait_ns += n;
            }
        }
    }

    /// The findings, worst lock first; `contention` gives the locks' names.
    pub fn finish(self, symbols: &dyn Symbols, contention: &[LockContention]) -> Vec<LockHolders> {
        let names: HashMap<u64, &LockContention> =
            contention.iter().map(|l| (l.lock_addr, l)).collect();
        let mut out: Vec<LockHolders> = self
            .locks
            .iter()
            .filter(|(_, s)| s.waits > 0)
            .map(|(&addr, state)| self.describe(addr, state, symbols, &names))
            .collect();
        out.sort_by(|a, b| {
            b.total_wait_ns
                .cmp(&a.total_wait_ns)
                .then(a.lock_addr.cmp(&b.lock_addr))
        });
        out
    }

    fn comm(&self, pid: i32) -> String {
        self.comms.get(&pid).cloned().unwrap_or_else(|| "?".into())
    }

    fn frames(&self, stack: StackId, symbols: &dyn Symbols) -> Vec<String> {
        self.stacks
            .frames(stack)
            .iter()
            .take(MAX_FRAMES)
            .map(|&a| symbols.frame(a))
            .collect()
    }

    fn share(
        &self,
        piece: Piece,
        symbols: &dyn Symbols,
        names: &HashMap<u64, &LockContention>,
    ) -> (HolderActivity, String) {
        match piece {
            Piece::Running => (HolderActivity::Running, String::new()),
            Piece::Runnable => (HolderActivity::Runnable, String::new()),
            Piece::Handoff => (HolderActivity::Handoff, String::new()),
            Piece::Spun => (HolderActivity::Running, SPUN.into()),
            Piece::Asleep(None) => (HolderActivity::Asleep, NO_STACK.into()),
            Piece::Asleep(Some(stack)) => (
                HolderActivity::Asleep,
                sleep_function(&self.frames(stack, symbols)).unwrap_or_else(|| NO_STACK.into()),
            ),
            Piece::Nested(lock) => (
                HolderActivity::NestedWait,
                names
                    .get(&lock)
                    .map_or_else(|| format!("{lock:#x}"), |l| l.name.clone()),
            ),
            Piece::Unknown(reason) => (HolderActivity::Unknown, reason.to_string()),
        }
    }

    fn shares(
        &self,
        split: &HashMap<Piece, u64>,
        symbols: &dyn Symbols,
        names: &HashMap<u64, &LockContention>,
    ) -> Vec<ActivityShare> {
        let mut merged: HashMap<(HolderActivity, String), u64> = HashMap::new();
        for (&piece, &n) in split {
            *merged.entry(self.share(piece, symbols, names)).or_default() += n;
        }
        activity_shares(merged)
    }

    fn describe(
        &self,
        addr: u64,
        state: &LockState,
        symbols: &dyn Symbols,
        names: &HashMap<u64, &LockContention>,
    ) -> LockHolders {
        let flags = state.flags.unwrap_or(0);
        let kind = naming::kind(flags);
        let name = names.get(&addr).map_or_else(
            || {
                format!(
                    "{} @{addr:#x}",
                    naming::stack_name(kind, naming::mode(flags), None)
                )
            },
            |l| l.name.clone(),
        );
        let waiters = crate::contention::top_waiters(&state.waiters, |pid| self.comm(pid));

        let mut holders: Vec<Holder> = state
            .holders
            .iter()
            .filter(|(_, h)| h.behind_ns > 0)
            .map(|(&pid, h)| Holder {
                comm: self.comm(pid),
                pid,
                holds: h.holds,
                shared_holds: h.shared_holds,
                waited_behind_ns: h.behind_ns,
                activity: self.shares(&h.split, symbols, names),
                ipis_sent: h.ipis,
            })
            .collect();
        holders.sort_by(|a, b| {
            b.waited_behind_ns
                .cmp(&a.waited_behind_ns)
                .then(a.pid.cmp(&b.pid))
        });
        let more_holders = fold_more_holders(&mut holders);

        LockHolders {
            lock_addr: addr,
            name,
            kind,
            waits: state.waits,
            total_wait_ns: state.total_ns,
            waiter_count: state.waiters.len() as u64,
            waiters,
            holders,
            activity: self.shares(&state.split, symbols, names),
            held_across_sleep: self.held_across_sleep(state, symbols),
            exact_holds: state.exact,
            more_holders,
        }
    }

    fn held_across_sleep(&self, state: &LockState, symbols: &dyn Symbols) -> Vec<HeldAcrossSleep> {
        let mut merged: HashMap<(i32, String), HeldAcrossSleep> = HashMap::new();
        let mut waiters: HashMap<(i32, String), HashSet<i32>> = HashMap::new();
        // The stack shown for a holder's sleeps in one function is that of the sleep with
        // the most waiting behind it (ties: the first stack in order), never whichever the
        // map yields first, so that the same trace always reads the same.
        let mut shown: HashMap<(i32, String), (u64, Vec<String>)> = HashMap::new();
        for (&(holder, stack), sleep) in &state.sleeps {
            if sleep.waiter_wait_ns == 0 {
                continue;
            }
            let frames = stack.map(|s| self.frames(s, symbols)).unwrap_or_default();
            let function = sleep_function(&frames).unwrap_or_else(|| NO_STACK.into());
            let key = (holder, function.clone());
            waiters
                .entry(key.clone())
                .or_default()
                .extend(sleep.waiters.iter().copied());
            let best = shown
                .entry(key.clone())
                .or_insert_with(|| (sleep.waiter_wait_ns, frames.clone()));
            if (sleep.waiter_wait_ns, std::cmp::Reverse(&frames))
                > (best.0, std::cmp::Reverse(&best.1))
            {
                *best = (sleep.waiter_wait_ns, frames.clone());
            }
            let entry = merged.entry(key).or_insert_with(|| HeldAcrossSleep {
                holder_comm: self.comm(holder),
                holder_pid: holder,
                function,
                stack: frames,
                holds: 0,
                slept_ns: 0,
                held_ns: 0,
                held_at_least: false,
                waiters: 0,
                waiter_wait_ns: 0,
            });
            entry.holds = entry.holds.max(sleep.holds);
            entry.slept_ns += sleep.slept_ns;
            entry.held_ns = entry.held_ns.max(sleep.held_ns);
            entry.held_at_least |= sleep.held_at_least;
            entry.waiter_wait_ns += sleep.waiter_wait_ns;
        }
        let mut out: Vec<HeldAcrossSleep> = merged
            .into_iter()
            .map(|(key, mut h)| {
                h.waiters = waiters.get(&key).map_or(0, |w| w.len() as u64);
                if let Some((_, frames)) = shown.remove(&key) {
                    h.stack = frames;
                }
                h
            })
            .collect();
        out.sort_by(|a, b| {
            b.waiter_wait_ns
                .cmp(&a.waiter_wait_ns)
                .then(a.holder_pid.cmp(&b.holder_pid))
                .then(a.function.cmp(&b.function))
        });
        out.truncate(TOP_SLEEPS);
        out
    }
}

/// Waiting time by holder activity as the findings list it: none empty, most first, in
/// the same order every run. The streamed pass and the aggregate maps both end here.
pub(crate) fn activity_shares(split: HashMap<(HolderActivity, String), u64>) -> Vec<ActivityShare> {
    let mut shares: Vec<ActivityShare> = split
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|((activity, detail), wait_ns)| ActivityShare {
            activity,
            detail,
            wait_ns,
        })
        .collect();
    shares.sort_by(|a, b| {
        b.wait_ns
            .cmp(&a.wait_ns)
            .then(a.activity.cmp(&b.activity))
            .then(a.detail.cmp(&b.detail))
    });
    shares
}

/// Where a sleeping stack slept ([`crate::waits::sleep_site`]).
pub fn sleep_function(frames: &[String]) -> Option<String> {
    crate::waits::sleep_site(frames)
}

fn multiset_add(set: &mut BTreeMap<u64, u32>, key: u64) {
    *set.entry(key).or_default() += 1;
}

fn forget_acquired(starts: &mut Option<BTreeMap<u64, u32>>, at: u64) {
    if let Some(starts) = starts {
        multiset_remove(starts, at);
    }
}

fn multiset_remove(set: &mut BTreeMap<u64, u32>, key: u64) {
    if let std::collections::btree_map::Entry::Occupied(mut n) = set.entry(key) {
        *n.get_mut() -= 1;
        if *n.get() == 0 {
            n.remove();
        }
    }
}

impl crate::pass::Pass for HoldersPass {
    fn reads(&self, tag: ViewTag, _: crate::ViewTags) -> crate::pass::Reads {
        crate::pass::view_if(Self::wants(tag))
    }

    #[inline(always)]
    fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        HoldersPass::observe(self, event, kind)
    }

    #[inline(always)]
    fn observe_other(&mut self, event: &Event<'_>) {
        HoldersPass::observe_other(self, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sleep_function_skips_scheduler_and_tracing_frames() {
        // The stack this kernel records for a pipe writer faulting on a userfaultfd page.
        let frames: Vec<String> = [
            "trace_event_raw_event_sched_switch+0x10e",
            "__traceiter_sched_switch+0x33",
            "__schedule+0x4a2",
            "schedule+0x27",
            "handle_userfault+0x33e",
            "__handle_mm_fault+0x8a1",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(sleep_function(&frames).as_deref(), Some("handle_userfault"));
        let timer: Vec<String> = ["schedule_hrtimeout_range+0x1", "do_nanosleep+0x5"]
            .map(String::from)
            .to_vec();
        assert_eq!(sleep_function(&timer).as_deref(), Some("do_nanosleep"));
        assert_eq!(sleep_function(&["0xffffffff81000000".to_string()]), None);
    }

    #[test]
    fn sleeping_locks_and_states() {
        assert!(is_sleeping(flag::MUTEX));
        assert!(is_sleeping(flag::MUTEX | flag::SPIN));
        assert!(is_sleeping(flag::READ));
        assert!(!is_sleeping(flag::READ | flag::SPIN));
        assert!(!is_sleeping(flag::SPIN));
        assert!(is_sleeping_state(2));
        assert!(!is_sleeping_state(0));
        // "R+": preempted.
        assert!(!is_sleeping_state(0x100));
    }
}

#[cfg(test)]
mod switch_checks {
    use super::*;

    #[test]
    fn a_switch_from_another_task_than_the_one_switched_in_is_counted() {
        let mut pass = HoldersPass::default();
        pass.comms.insert(70, "tokio-rt-worker".into());
        // CPU 0: 10 -> 70, then a switch from 2500 (70's switch out and 2500's switch in are
        // missing), then 2500 -> 11 and 11 -> 10, consistent.
        pass.check_switch(0, 1, 10);
        pass.check_switch(0, 10, 70);
        pass.check_switch(0, 2500, 11);
        pass.check_switch(0, 11, 10);
        // CPU 1's first switch: nothing to compare with.
        pass.check_switch(1, 5, 6);
        // One missed of three checked: a lost page's worth, not said.
        assert_eq!(pass.missed_switches(), (0, Vec::new()));
        for _ in 0..9 {
            pass.check_switch(0, 10, 70);
            pass.check_switch(0, 2500, 10);
        }
        assert_eq!(
            pass.missed_switches(),
            (10, vec!["tokio-rt-worker/70".to_string()])
        );
        assert_eq!(
            crate::integrity::missed_switches_warning(pass.missed_switches())
                .unwrap()
                .split(';')
                .next()
                .unwrap(),
            "the trace misses context switches: 10 times a CPU's next switch came from \
             another task than the one switched in last, most often after tokio-rt-worker/70"
        );
        assert_eq!(
            crate::integrity::missed_switches_warning((0, Vec::new())),
            None
        );
    }
}
