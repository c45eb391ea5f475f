//! Lock contention: every wait between a task's lock:contention_begin and its
//! lock:contention_end, aggregated per lock address.
//!
//! Streaming: state is the open waits of each task (they nest, [`crate::open_waits`]), one
//! aggregate per lock, one entry per
//! distinct stack and per task name, never one per event. A wait still open when the trace
//! ends is counted apart (its length is unknown), and an end without a begin (the wait
//! started before tracing did) is ignored and counted.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};

use vmscale_run::{LockContention, WaitStack, Waiter};
use vmscale_stats::{StreamingSummary, Summary};
use vmscale_trace::decode::event::Event;
use vmscale_trace::decode::views::{EventKind, ViewTag};

use crate::naming;
use crate::open_waits::{OpenWaits, Wait};
use crate::stacks::{StackId, StackTable};
use crate::symbols::Symbols;

/// How many waiters and stacks each lock keeps in the findings.
const TOP_WAITERS: usize = 5;
const TOP_STACKS: usize = 3;
/// Frames kept per stack in the findings.
const MAX_FRAMES: usize = 16;

struct OpenWait {
    lock: u64,
    flags: u32,
    start: u64,
    stack: Option<StackId>,
    /// The ioctl the waiter was in, when its system calls were traced.
    ioctl: Option<u64>,
}

impl Wait for OpenWait {
    fn lock(&self) -> u64 {
        self.lock
    }

    fn flags(&self) -> u32 {
        self.flags
    }
}

#[derive(Default)]
struct LockAggregate {
    first_flags: Option<u32>,
    modes: BTreeMap<&'static str, u64>,
    waits: StreamingSummary,
    open_waits: u64,
    /// pid -> (waits, total ns)
    waiters: HashMap<i32, (u64, u64)>,
    /// (stack, mode) -> (waits, total ns)
    stacks: HashMap<(StackId, &'static str), (u64, u64)>,
    /// (stack, mode, the waiter's ioctl) -> total ns: what names the lock.
    contexts: HashMap<(StackId, &'static str, Option<u64>), u64>,
    longest: Option<LongestWait>,
}

/// The longest completed wait on a lock: where a timeline of it should look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongestWait {
    pub pid: i32,
    pub start: u64,
    pub end: u64,
}

/// The pass; feed it every event in time order, then [`ContentionPass::finish`].
#[derive(Default)]
pub struct ContentionPass {
    open: OpenWaits<OpenWait>,
    /// CPU -> (pid, lock, begin timestamp) of a contention_begin whose stack has not arrived
    /// yet. The stacktrace trigger records the stack on the same CPU right after the event.
    awaiting_stack: HashMap<u32, (i32, u64, u64)>,
    stacks: StackTable,
    locks: HashMap<u64, LockAggregate>,
    comms: HashMap<i32, String>,
    stack_cost: StreamingSummary,
    unmatched_ends: u64,
    /// Task -> the ioctl command it is in (raw_syscalls traced for it).
    ioctls: HashMap<i32, u64>,
    /// The trace's system call number of ioctl.
    sys_ioctl: i64,
}

/// What the pass found.
pub struct ContentionFindings {
    /// Worst (largest total wait) first.
    pub locks: Vec<LockContention>,
    /// Time from a contention_begin to its recorded stack: what capturing a stack adds.
    pub stack_cost: Option<Summary>,
    pub unmatched_ends: u64,
    /// Per lock address: its longest completed wait.
    pub longest_waits: HashMap<u64, LongestWait>,
    /// Task names seen, by pid.
    pub comms: HashMap<i32, String>,
}

impl ContentionPass {
    /// A pass for a trace whose system call numbers are `arch`'s.
    pub fn new(arch: crate::syscalls::Arch) -> ContentionPass {
        ContentionPass {
            sys_ioctl: arch.ioctl(),
            ..ContentionPass::default()
        }
    }

    /// The system call views it reads in a trace that holds `trace`'s views: only what
    /// names a lock (the ioctl a waiter is in), so only where locks are contended.
    pub fn wants_syscalls(tag: ViewTag, trace: crate::ViewTags) -> bool {
        matches!(tag, ViewTag::SysEnter | ViewTag::SysExit) && trace.holds(ViewTag::ContentionBegin)
    }

    /// The views [`ContentionPass::observe`] reads; other events change nothing.
    pub fn wants(tag: ViewTag) -> bool {
        use ViewTag::*;
        matches!(
            tag,
            ContentionBegin
                | ContentionEnd
                | KernelStack
                | SchedSwitch
                | SchedWaking
                | SchedWakeup
                | SchedWakeupNew
        )
    }

    pub fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        match *kind {
            EventKind::ContentionBegin(begin) => {
                let pid = event.pid();
                match self.open.on(pid, begin.lock_addr) {
                    // A mutex traces a second begin when it stops spinning and sleeps: the
                    // same wait goes on, now in its sleeping mode.
                    Some(wait) => wait.flags = begin.flags,
                    // What it replaces had its end lost: the length is unknown, so it is
                    // not counted.
                    None => {
                        self.open.open(
                            pid,
                            OpenWait {
                                lock: begin.lock_addr,
                                flags: begin.flags,
                                start: event.ts(),
                                stack: None,
                                ioctl: self.ioctls.get(&pid).copied(),
                            },
                        );
                    }
                }
                self.awaiting_stack
                    .insert(event.cpu(), (pid, begin.lock_addr, event.ts()));
            }
            EventKind::KernelStack(stack) => {
                let Some((pid, lock, begin_ts)) = self.awaiting_stack.remove(&event.cpu()) else {
                    return;
                };
                if pid != event.pid() {
                    return;
                }
                if let Some(wait) = self.open.on(pid, lock) {
                    if wait.stack.is_none() {
                        wait.stack = Some(self.stacks.intern(stack.iter()));
                        self.stack_cost.record(event.ts().saturating_sub(begin_ts));
                    }
                }
            }
            EventKind::ContentionEnd(end) => {
                let pid = event.pid();
                match self.open.close(pid, end.lock_addr) {
                    // Waits opened inside it whose ends were lost are left uncounted, as
                    // their length is unknown.
                    Some((wait, _)) => self.close(pid, wait, event.ts()),
                    None => self.unmatched_ends += 1,
                }
            }
            EventKind::SysEnter(enter) if enter.id == self.sys_ioctl => {
                self.ioctls.insert(event.pid(), enter.args()[1]);
            }
            EventKind::SysExit(exit) if exit.id == self.sys_ioctl => {
                self.ioctls.remove(&event.pid());
            }
            EventKind::SchedSwitch(switch) => {
                self.remember(switch.prev_pid, switch.prev_comm.as_bytes());
                self.remember(switch.next_pid, switch.next_comm.as_bytes());
            }
            EventKind::SchedWaking(w)
            | EventKind::SchedWakeup(w)
            | EventKind::SchedWakeupNew(w) => {
                self.remember(w.pid, w.comm.as_bytes());
            }
            _ => {}
        }
    }

    fn remember(&mut self, pid: i32, comm: &[u8]) {
        crate::task_names::remember(&mut self.comms, pid, comm);
    }

    fn close(&mut self, pid: i32, wait: OpenWait, end: u64) {
        let waited = end.saturating_sub(wait.start);
        let lock = self.locks.entry(wait.lock).or_default();
        lock.first_flags.get_or_insert(wait.flags);
        *lock.modes.entry(naming::mode(wait.flags)).or_default() += 1;
        lock.waits.record(waited);
        if lock
            .longest
            .is_none_or(|l| waited > l.end.saturating_sub(l.start))
        {
            lock.longest = Some(LongestWait {
                pid,
                start: wait.start,
                end,
            });
        }
        let waiter = lock.waiters.entry(pid).or_default();
        waiter.0 += 1;
        waiter.1 += waited;
        if let Some(stack) = wait.stack {
            let mode = naming::mode(wait.flags);
            let s = lock.stacks.entry((stack, mode)).or_default();
            s.0 += 1;
            s.1 += waited;
            *lock.contexts.entry((stack, mode, wait.ioctl)).or_default() += waited;
        }
    }

    pub fn finish(mut self, symbols: &dyn Symbols) -> ContentionFindings {
        for (_, wait) in self.open.drain() {
            let lock = self.locks.entry(wait.lock).or_default();
            lock.first_flags.get_or_insert(wait.flags);
            lock.open_waits += 1;
        }
        let comms = &self.comms;
        let mut locks: Vec<LockContention> = self
            .locks
            .iter()
            .map(|(&addr, agg)| {
                describe_lock(
                    addr,
                    &agg.waits(),
                    &self.stacks,
                    |pid| comms.get(&pid).cloned().unwrap_or_else(|| "?".into()),
                    symbols,
                )
            })
            .collect();
        rank(&mut locks);
        ContentionFindings {
            locks,
            stack_cost: self.stack_cost.summary(),
            unmatched_ends: self.unmatched_ends,
            longest_waits: self
                .locks
                .iter()
                .filter_map(|(&addr, agg)| Some((addr, agg.longest?)))
                .collect(),
            comms: std::mem::take(&mut self.comms),
        }
    }
}

impl LockAggregate {
    /// What [`describe_lock`] reads of it.
    fn waits(&self) -> LockWaits {
        LockWaits {
            first_flags: self.first_flags,
            modes: self.modes.clone(),
            summary: self.waits.summary(),
            total_ns: self.waits.total(),
            open_waits: self.open_waits,
            waiters: self.waiters.clone(),
            stacks: self.stacks.clone(),
            contexts: self.contexts.clone(),
        }
    }
}

/// One lock's contended waits, however they were gathered (a trace's events, or the
/// aggregate mode's kernel maps): what its contention entry and its name are made of.
pub(crate) struct LockWaits {
    /// The flags of a wait on it (they all name the same type).
    pub first_flags: Option<u32>,
    /// Completed waits per mode.
    pub modes: BTreeMap<&'static str, u64>,
    pub summary: Option<Summary>,
    pub total_ns: u64,
    pub open_waits: u64,
    /// pid -> (waits, total ns)
    pub waiters: HashMap<i32, (u64, u64)>,
    /// (stack, mode) -> (waits, total ns)
    pub stacks: HashMap<(StackId, &'static str), (u64, u64)>,
    /// (stack, mode, the waiter's ioctl) -> total ns: what names the lock.
    pub contexts: HashMap<(StackId, &'static str, Option<u64>), u64>,
}

/// The contention entry of the lock at `addr`: its type, modes, waits, worst waiters and
/// stacks, and its name (a data symbol, the kernel's name for it, or its type and where
/// it was waited on).
pub(crate) fn describe_lock(
    addr: u64,
    agg: &LockWaits,
    table: &StackTable,
    comm: impl Fn(i32) -> String,
    symbols: &dyn Symbols,
) -> LockContention {
    let flags = agg.first_flags.unwrap_or(0);
    let kind = naming::kind(flags);
    let waiters = top_waiters(&agg.waiters, comm);

    let mut stacks: Vec<(&'static str, WaitStack)> = agg
        .stacks
        .iter()
        .map(|(&(id, mode), &(waits, total))| {
            let stack = WaitStack {
                frames: table
                    .frames(id)
                    .iter()
                    .take(MAX_FRAMES)
                    .map(|&a| symbols.frame(a))
                    .collect(),
                waits,
                total_wait_ns: total,
            };
            (mode, stack)
        })
        .collect();
    // Ties broken by the frames, so two reports of one trace agree.
    stacks.sort_by(|(_, a), (_, b)| {
        b.total_wait_ns
            .cmp(&a.total_wait_ns)
            .then(b.waits.cmp(&a.waits))
            .then_with(|| a.frames.cmp(&b.frames))
    });
    stacks.truncate(TOP_STACKS);

    // The name says where the longest-waited stack waited, so its mode is that stack's
    // (a lock waited on for reading in one place and writing in another must not be
    // called "write, in" the reading place); without stacks, the mode most waits used.
    let mode = stacks.first().map(|(mode, _)| *mode).unwrap_or_else(|| {
        agg.modes
            .iter()
            .max_by_key(|(_, &n)| n)
            .map(|(m, _)| *m)
            .unwrap_or_else(|| naming::mode(flags))
    });
    let stacks: Vec<WaitStack> = stacks.into_iter().map(|(_, stack)| stack).collect();
    let name = symbols
        .data_symbol(addr)
        .or_else(|| known_name(addr, agg, kind, table, symbols))
        .unwrap_or_else(|| {
            let frames = stacks.first().map(|s| s.frames.as_slice()).unwrap_or(&[]);
            naming::stack_name(kind, mode, naming::distinctive_frame(frames))
        });
    LockContention {
        lock_addr: addr,
        name,
        kind,
        modes: agg.modes.iter().map(|(m, n)| (m.to_string(), *n)).collect(),
        waits: agg.summary.clone(),
        total_wait_ns: agg.total_ns,
        open_waits: agg.open_waits,
        waiters,
        stacks,
    }
}

/// The kernel's name for the lock at `addr`, from any of its waits whose stack (and
/// context) names it: a lock is one lock, so once one wait names it every wait carries
/// the name. Where waits name it differently (which a correct table never does), the
/// name with the most waiting wins. The place shown is the stack with the most waiting
/// that gave that name.
fn known_name(
    addr: u64,
    agg: &LockWaits,
    kind: vmscale_run::findings::LockKind,
    table: &StackTable,
    symbols: &dyn Symbols,
) -> Option<String> {
    let is_static = symbols.is_static(addr);
    let mut best: Option<(&'static str, String, &'static str, u64)> = None;
    let mut by_name: HashMap<&'static str, u64> = HashMap::new();
    let mut contexts: Vec<_> = agg.contexts.iter().collect();
    // Ties by stack id and context: the same name every run of one trace.
    contexts
        .sort_by_key(|(&(stack, mode, ioctl), &ns)| (std::cmp::Reverse(ns), stack, mode, ioctl));
    let mut places: Vec<(&'static str, String, &'static str, u64)> = Vec::new();
    for (&(stack, mode, ioctl), &ns) in contexts {
        let frames: Vec<String> = table
            .frames(stack)
            .iter()
            .take(MAX_FRAMES)
            .map(|&a| symbols.frame(a))
            .collect();
        let context = naming::WaitContext { is_static, ioctl };
        if let Some((known, at)) = naming::well_known(kind, &frames, context) {
            *by_name.entry(known).or_default() += ns;
            places.push((known, at.to_string(), mode, ns));
        }
    }
    let winner = by_name
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(&name, _)| name)?;
    for place in places.into_iter().filter(|p| p.0 == winner) {
        if best.as_ref().is_none_or(|b| place.3 > b.3) {
            best = Some(place);
        }
    }
    let (known, at, mode, _) = best?;
    Some(naming::known_name(known, mode, &at))
}

/// Worst first, ties by address (a map's order changes from process to process, and two
/// reports of one trace must list the same locks in the same order), and locks named alike
/// told apart.
pub(crate) fn rank(locks: &mut [LockContention]) {
    locks.sort_by(|a, b| {
        b.total_wait_ns
            .cmp(&a.total_wait_ns)
            .then(b.open_waits.cmp(&a.open_waits))
            .then(a.lock_addr.cmp(&b.lock_addr))
    });
    disambiguate(locks);
}

/// Two locks named alike (each CPU's runqueue lock waited on from `__schedule`) get their
/// address appended, so the table never shows one name for two locks.
fn disambiguate(locks: &mut [LockContention]) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for lock in locks.iter() {
        *seen.entry(lock.name.clone()).or_default() += 1;
    }
    for lock in locks.iter_mut() {
        if seen[&lock.name] > 1 {
            lock.name = format!("{} @{:#x}", lock.name, lock.lock_addr);
        }
    }
}

/// The waiters that waited longest (ties by pid), at most TOP_WAITERS, from pid -> (waits,
/// total ns): the same ranking in every pass that names waiters.
pub(crate) fn top_waiters(
    waiters: &HashMap<i32, (u64, u64)>,
    comm: impl Fn(i32) -> String,
) -> Vec<Waiter> {
    let mut out: Vec<Waiter> = waiters
        .iter()
        .map(|(&pid, &(waits, total))| Waiter {
            comm: comm(pid),
            pid,
            waits,
            total_wait_ns: total,
        })
        .collect();
    out.sort_by(|a, b| {
        b.total_wait_ns
            .cmp(&a.total_wait_ns)
            .then(a.pid.cmp(&b.pid))
    });
    out.truncate(TOP_WAITERS);
    out
}

impl crate::pass::Pass for ContentionPass {
    fn reads(&self, tag: ViewTag, trace: crate::ViewTags) -> crate::pass::Reads {
        crate::pass::view_if(Self::wants(tag) || Self::wants_syscalls(tag, trace))
    }

    #[inline(always)]
    fn observe(&mut self, event: &Event<'_>, kind: &EventKind<'_>) {
        ContentionPass::observe(self, event, kind)
    }
}
