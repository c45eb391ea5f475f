//! An aggregated recording's kernel maps (`aggregate.json`, written by
//! `vmscale_trace::record::bpf`) made into the same findings a traced recording gives:
//! contended locks named by the same code ([`crate::contention::describe_lock`],
//! [`crate::naming`]), spinning locks, sleeping locks' holders and what they did, a
//! recorded command's time by cause, and IPIs. The verdict then reads them unchanged.
//!
//! What the maps cannot give is left empty rather than guessed: the breakdown of a
//! scenario's timed samples, who held the CPU a runnable task waited for, cross-CPU call
//! waits, timelines. Percentiles of waits come from log2 histograms.

use std::collections::BTreeMap;
use std::path::Path;

use foldhash::{HashMap, HashMapExt};

use vmscale_run::findings::{
    AggregateFacts, ComponentKind, HeldAcrossSleep, Holder, HolderActivity, LockHolders, ModeWaits,
    SleepWaker, SpinLockWaits, SubjectPart, SubjectTime, TaskTime,
};
use vmscale_run::{IpiPhase, IpiSender, IpiSite, LockContention, TraceSection};
use vmscale_stats::Summary;
use vmscale_trace::record::bpf::dump::{
    activity, part, stack_of_detail, unknown, AggregateDump, WaitAggregate,
};
use vmscale_trace::Kallsyms;

use crate::contention::{describe_lock, rank, top_waiters, LockWaits};
use crate::holders::{
    is_sleeping, sleep_function, BEFORE_FIRST_EVENT, NOT_PROVEN, NO_RELEASER, NO_STACK, SPUN,
    TOP_SLEEPS, TRIMMED,
};
use crate::naming;
use crate::spinlocks::is_spinning_lock;
use crate::stacks::{StackId, StackTable};
use crate::symbols::Symbols;

/// Spinning locks kept, as the tracefs path keeps them.
const TOP_SPINLOCKS: usize = 10;
const TOP_TASKS: usize = 3;
const TOP_WAKERS: usize = 5;
const TOP_IPI_SITES: usize = 8;
const TOP_IPI_SENDERS: usize = 8;

/// Who the findings are about, besides what the maps say.
#[derive(Debug, Clone, Default)]
pub struct AggregateScope {
    /// Another vmscale run's tasks: left out of waiters, holders and the subject.
    pub excluded_tids: Vec<u32>,
    /// When tracing was on, (start, end): the traced time.
    pub windows: Vec<(u64, u64)>,
}

/// Frames the BPF program's own invocation puts on top of every stack it takes.
fn is_bpf_plumbing(name: &str) -> bool {
    name.starts_with("bpf_prog_")
        || name.starts_with("bpf_trace_run")
        || name.starts_with("__bpf_trace_")
        || name.starts_with("__traceiter_")
}

/// The maps' stacks, without the program's own frames, interned.
struct Stacks {
    table: StackTable,
    ids: HashMap<u32, StackId>,
}

impl Stacks {
    fn new(dump: &AggregateDump, symbols: &Kallsyms) -> Stacks {
        let mut table = StackTable::default();
        let mut ids = HashMap::new();
        for (&id, frames) in &dump.stacks {
            let skip = frames
                .iter()
                .take_while(|&&a| {
                    symbols
                        .symbolize(a)
                        .is_some_and(|s| is_bpf_plumbing(s.name))
                })
                .count();
            ids.insert(id, table.intern(frames[skip..].iter().copied()));
        }
        Stacks { table, ids }
    }

    fn id(&self, bpf_id: Option<u32>) -> Option<StackId> {
        bpf_id.and_then(|id| self.ids.get(&id).copied())
    }

    fn frames(&self, id: Option<StackId>, symbols: &dyn Symbols) -> Vec<String> {
        id.map(|id| {
            self.table
                .frames(id)
                .iter()
                .take(16)
                .map(|&a| symbols.frame(a))
                .collect()
        })
        .unwrap_or_default()
    }
}

/// Fills `section` from `dump` (the trace directory `dir`'s maps), with warnings for what
/// the maps dropped.
pub fn fill(
    dump: &AggregateDump,
    dir: &Path,
    scope: &AggregateScope,
    section: &mut TraceSection,
    warnings: &mut Vec<String>,
) {
    let (symbols, problem) = crate::integrity::load_kallsyms(dir);
    if let Some(problem) = problem {
        let why = match problem {
            crate::integrity::KallsymsProblem::Missing => "missing".to_string(),
            crate::integrity::KallsymsProblem::Unreadable(why) => format!("unreadable ({why})"),
            crate::integrity::KallsymsProblem::Damaged { lines, .. } => {
                format!("{lines} damaged lines")
            }
            crate::integrity::KallsymsProblem::Empty => "empty".to_string(),
        };
        warnings.push(format!(
            "{}/kallsyms is {why}: stack frames and locks stay unnamed addresses",
            section.dir
        ));
    }
    let stacks = Stacks::new(dump, &symbols);
    let excluded: Vec<i32> = scope.excluded_tids.iter().map(|&t| t as i32).collect();
    let comms: HashMap<i32, String> = dump.tasks.iter().map(|t| (t.pid, t.comm.clone())).collect();
    let tgids: HashMap<i32, i32> = dump.tasks.iter().map(|t| (t.pid, t.tgid)).collect();
    let comm = |pid: i32| comms.get(&pid).cloned().unwrap_or_else(|| "?".into());

    let mut by_lock: BTreeMap<u64, Vec<&WaitAggregate>> = BTreeMap::new();
    for wait in &dump.waits {
        by_lock.entry(wait.lock).or_default().push(wait);
    }
    let mut contention: Vec<LockContention> = by_lock
        .iter()
        .map(|(&addr, waits)| {
            let agg = lock_waits(addr, waits, dump, &stacks, &excluded);
            describe_lock(addr, &agg, &stacks.table, comm, &symbols)
        })
        .collect();
    rank(&mut contention);
    let names: HashMap<u64, &str> = contention
        .iter()
        .map(|l| (l.lock_addr, l.name.as_str()))
        .collect();
    let first_flags: HashMap<u64, u32> = by_lock
        .iter()
        .filter_map(|(&addr, waits)| Some((addr, main_flags(waits)?)))
        .collect();

    section.spinlocks = spinlocks(&by_lock, &names);
    section.holders = holders(dump, &by_lock, &names, &stacks, &symbols, &excluded, &comm);
    section.subject = subject(
        dump,
        &stacks,
        &symbols,
        &names,
        &first_flags,
        &section.holders,
        &excluded,
        &comm,
        &tgids,
    );
    let traced_ns: u64 = scope.windows.iter().map(|w| w.1.saturating_sub(w.0)).sum();
    section.ipis = ipis(dump, &symbols, &comm, traced_ns);
    section.contention = contention;
    section.events_seen = dump
        .seen
        .iter()
        .filter(|(name, _)| name.contains(':'))
        .map(|(name, &n)| (name.clone(), n))
        .collect();
    section.decoded_events = section.events_seen.values().sum();
    section.span_ns = match (scope.windows.first(), scope.windows.last()) {
        (Some(first), Some(last)) => last.1.saturating_sub(first.0),
        _ => 0,
    };
    section.lock_format_missing = false;
    section.stack_cost = None;
    let stacks_taken = dump.seen.get("stacks").copied().unwrap_or(0);
    let facts = AggregateFacts {
        drops: dump.drops.clone(),
        dropped: dump.dropped(),
        seen: section.events_seen.clone(),
        map_bytes: dump.map_bytes,
        map_fill: dump.map_fill.clone(),
        stacks_taken,
        stack_mean_ns: if stacks_taken > 0 {
            dump.seen.get("stack_ns").copied().unwrap_or(0) as f64 / stacks_taken as f64
        } else {
            0.0
        },
        stacks_reused: dump.seen.get("stacks_reused").copied().unwrap_or(0),
        sleep_stacks_reused: dump.seen.get("sleep_stacks_reused").copied().unwrap_or(0),
    };
    if let Some(warning) = drop_warning(&facts, dump.recursion_misses) {
        warnings.push(warning);
    }
    section.aggregate = Some(facts);
}

/// One line saying what the maps did not count, or nothing when they counted everything.
fn drop_warning(facts: &AggregateFacts, recursion_misses: u64) -> Option<String> {
    if facts.dropped == 0 {
        return None;
    }
    let mut reasons: Vec<(String, u64)> = facts
        .drops
        .iter()
        .map(|(reason, &n)| (reason.replace('_', " "), n))
        .collect();
    if recursion_misses > 0 {
        reasons.push(("program runs the kernel skipped".into(), recursion_misses));
    }
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let said: Vec<String> = reasons
        .iter()
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect();
    Some(format!(
        "aggregate mode did not count {} events ({}): counts and waits are lower bounds",
        facts.dropped,
        said.join(", ")
    ))
}

/// The flags of a lock's waits that name its type: the most frequent entry's (they all
/// name the same type), ties by the smaller flags, so the choice is the same every time.
fn main_flags(waits: &[&WaitAggregate]) -> Option<u32> {
    waits
        .iter()
        .max_by(|a, b| a.count.cmp(&b.count).then(b.flags.cmp(&a.flags)))
        .map(|w| w.flags)
}

fn summary_of<'a>(waits: impl Iterator<Item = &'a WaitAggregate>) -> (Option<Summary>, u64) {
    let (mut count, mut total, mut min, mut max) = (0u64, 0u64, u64::MAX, 0u64);
    let mut buckets: Vec<u64> = Vec::new();
    for w in waits {
        count += w.count;
        total += w.total_ns;
        min = min.min(w.min_ns);
        max = max.max(w.max_ns);
        if buckets.len() < w.log2_hist.len() {
            buckets.resize(w.log2_hist.len(), 0);
        }
        for (b, n) in buckets.iter_mut().zip(&w.log2_hist) {
            *b += n;
        }
    }
    (
        Summary::from_log2_histogram(count, total, min, max, &buckets),
        total,
    )
}

fn lock_waits(
    addr: u64,
    waits: &[&WaitAggregate],
    dump: &AggregateDump,
    stacks: &Stacks,
    excluded: &[i32],
) -> LockWaits {
    let mut modes: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut by_stack: HashMap<(StackId, &'static str), (u64, u64)> = HashMap::new();
    let mut contexts: HashMap<(StackId, &'static str, Option<u64>), u64> = HashMap::new();
    for w in waits {
        let mode = naming::mode(w.flags);
        *modes.entry(mode).or_default() += w.count;
        if let Some(id) = stacks.id(w.stack) {
            let s = by_stack.entry((id, mode)).or_default();
            s.0 += w.count;
            s.1 += w.total_ns;
            *contexts.entry((id, mode, w.ioctl)).or_default() += w.total_ns;
        }
    }
    let waiters = dump
        .waiters
        .iter()
        .filter(|w| w.lock == addr && !excluded.contains(&w.pid))
        .map(|w| (w.pid, (w.count, w.total_ns)))
        .collect();
    let (summary, total_ns) = summary_of(waits.iter().copied());
    LockWaits {
        first_flags: main_flags(waits),
        modes,
        summary,
        total_ns,
        open_waits: 0,
        waiters,
        stacks: by_stack,
        contexts,
    }
}

fn spinlocks(
    by_lock: &BTreeMap<u64, Vec<&WaitAggregate>>,
    names: &HashMap<u64, &str>,
) -> Vec<SpinLockWaits> {
    let mut out: Vec<SpinLockWaits> = by_lock
        .iter()
        .filter(|(_, waits)| main_flags(waits).is_some_and(is_spinning_lock))
        .map(|(&addr, waits)| {
            let flags = main_flags(waits).unwrap_or(0);
            let kind = naming::kind(flags);
            let mut by_mode: BTreeMap<&'static str, Vec<&WaitAggregate>> = BTreeMap::new();
            for w in waits.iter().filter(|w| is_spinning_lock(w.flags)) {
                by_mode.entry(naming::mode(w.flags)).or_default().push(w);
            }
            let modes: Vec<ModeWaits> = by_mode
                .iter()
                .map(|(mode, waits)| {
                    let (summary, total) = summary_of(waits.iter().copied());
                    ModeWaits {
                        mode: mode.to_string(),
                        waits: summary,
                        total_wait_ns: total,
                    }
                })
                .collect();
            SpinLockWaits {
                lock_addr: addr,
                name: names.get(&addr).map_or_else(
                    || format!("{} @{addr:#x}", naming::stack_name(kind, "", None)),
                    |n| n.to_string(),
                ),
                kind,
                waits: modes
                    .iter()
                    .filter_map(|m| m.waits.as_ref())
                    .map(|s| s.n)
                    .sum(),
                total_wait_ns: modes.iter().map(|m| m.total_wait_ns).sum(),
                modes,
                // Which waits overlapped which is not kept in the maps.
                writer_waits_overtaken: 0,
                reads_during_writer_waits: 0,
                open_waits: 0,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.total_wait_ns
            .cmp(&a.total_wait_ns)
            .then(a.lock_addr.cmp(&b.lock_addr))
    });
    out.truncate(TOP_SPINLOCKS);
    out
}

/// What a holder was doing, as the findings say it.
fn share_of(
    kind: u32,
    detail: u64,
    stacks: &Stacks,
    symbols: &dyn Symbols,
    names: &HashMap<u64, &str>,
) -> (HolderActivity, String) {
    match kind {
        activity::RUNNING => (HolderActivity::Running, String::new()),
        activity::RUNNABLE => (HolderActivity::Runnable, String::new()),
        activity::ASLEEP => {
            let frames = stacks.frames(stacks.id(stack_of_detail(detail)), symbols);
            (
                HolderActivity::Asleep,
                sleep_function(&frames).unwrap_or_else(|| NO_STACK.into()),
            )
        }
        activity::NESTED => (
            HolderActivity::NestedWait,
            names
                .get(&detail)
                .map_or_else(|| format!("{detail:#x}"), |n| n.to_string()),
        ),
        activity::HANDOFF => (HolderActivity::Handoff, String::new()),
        _ => (
            HolderActivity::Unknown,
            match detail {
                unknown::NOT_PROVEN => NOT_PROVEN,
                unknown::BEFORE_FIRST_EVENT => BEFORE_FIRST_EVENT,
                unknown::TRIMMED => TRIMMED,
                _ => NO_RELEASER,
            }
            .to_string(),
        ),
    }
}

/// A mutex waiter's spin proves its owner ran ([`SPUN`]), where the tracefs path counts it
/// in the time no proven hold covers (between holders, or no hold proven). The maps keep
/// how long waiters spun, not when, so the spin takes an equal part of each such gap, up
/// to all of them; proven holds keep what their holders did.
fn spin_fills_gaps(lock_split: &mut HashMap<(HolderActivity, String), u64>, spun: u64) {
    let is_gap = |(activity, detail): &(HolderActivity, String)| match activity {
        HolderActivity::Handoff => true,
        HolderActivity::Unknown => detail == NO_RELEASER || detail == NOT_PROVEN,
        _ => false,
    };
    let gaps: u64 = lock_split
        .iter()
        .filter(|(key, _)| is_gap(key))
        .map(|(_, &ns)| ns)
        .sum();
    let fill = spun.min(gaps);
    if fill == 0 {
        return;
    }
    let mut taken = 0;
    for (key, ns) in lock_split.iter_mut() {
        if is_gap(key) {
            let part = (*ns as u128 * fill as u128 / gaps as u128) as u64;
            *ns -= part;
            taken += part;
        }
    }
    *lock_split
        .entry((HolderActivity::Running, SPUN.to_string()))
        .or_default() += taken;
}

#[allow(clippy::too_many_arguments)]
fn holders(
    dump: &AggregateDump,
    by_lock: &BTreeMap<u64, Vec<&WaitAggregate>>,
    names: &HashMap<u64, &str>,
    stacks: &Stacks,
    symbols: &Kallsyms,
    excluded: &[i32],
    comm: &dyn Fn(i32) -> String,
) -> Vec<LockHolders> {
    let mut out = Vec::new();
    for (&addr, waits) in by_lock {
        let sleeping: Vec<&WaitAggregate> = waits
            .iter()
            .copied()
            .filter(|w| is_sleeping(w.flags))
            .collect();
        if sleeping.is_empty() {
            continue;
        }
        let flags = main_flags(&sleeping).unwrap_or(0);
        let kind = naming::kind(flags);
        let wait_count: u64 = sleeping.iter().map(|w| w.count).sum();
        let total: u64 = sleeping.iter().map(|w| w.total_ns).sum();
        let waiter_map: HashMap<i32, (u64, u64)> = dump
            .waiters
            .iter()
            .filter(|w| w.lock == addr && !excluded.contains(&w.pid))
            .map(|w| (w.pid, (w.count, w.total_ns)))
            .collect();
        // The waiting the maps attributed: by holder, and for the whole lock. More than
        // the completed waits (waits still open at the end were integrated too) is scaled
        // down to them, so the split sums to the lock's total.
        let entries: Vec<_> = dump
            .holder_time
            .iter()
            .filter(|h| h.lock == addr && !excluded.contains(&h.holder))
            .filter(|h| h.activity != activity::SPUN)
            .collect();
        let spun: u64 = dump
            .holder_time
            .iter()
            .filter(|h| h.lock == addr && h.activity == activity::SPUN)
            .map(|h| h.ns)
            .sum();
        let attributed: u64 = entries.iter().map(|h| h.ns).sum();
        let scale = |ns: u64| -> u64 {
            if attributed > total && attributed > 0 {
                (ns as u128 * total as u128 / attributed as u128) as u64
            } else {
                ns
            }
        };
        let mut lock_split: HashMap<(HolderActivity, String), u64> = HashMap::new();
        let mut per_holder: HashMap<i32, HashMap<(HolderActivity, String), u64>> = HashMap::new();
        for h in &entries {
            let key = share_of(h.activity, h.detail, stacks, symbols, names);
            let ns = scale(h.ns);
            *lock_split.entry(key.clone()).or_default() += ns;
            if h.holder != 0 {
                *per_holder
                    .entry(h.holder)
                    .or_default()
                    .entry(key)
                    .or_default() += ns;
            }
        }
        let explained: u64 = lock_split.values().sum();
        if total > explained {
            *lock_split
                .entry((HolderActivity::Unknown, NO_RELEASER.to_string()))
                .or_default() += total - explained;
        }
        spin_fills_gaps(&mut lock_split, spun);
        let mut holders: Vec<Holder> = per_holder
            .into_iter()
            .map(|(pid, split)| {
                let counts = dump
                    .holds
                    .iter()
                    .find(|h| h.lock == addr && h.holder == pid);
                let behind: u64 = split.values().sum();
                Holder {
                    comm: comm(pid),
                    pid,
                    holds: counts.map_or(0, |c| c.holds),
                    shared_holds: counts.map_or(0, |c| c.shared),
                    waited_behind_ns: behind,
                    activity: crate::holders::activity_shares(split),
                    ipis_sent: counts.map_or(0, |c| c.ipis),
                }
            })
            .filter(|h| h.waited_behind_ns > 0)
            .collect();
        holders.sort_by(|a, b| {
            b.waited_behind_ns
                .cmp(&a.waited_behind_ns)
                .then(a.pid.cmp(&b.pid))
        });
        let more_holders = crate::holders::fold_more_holders(&mut holders);
        if wait_count == 0 {
            continue;
        }
        out.push(LockHolders {
            lock_addr: addr,
            name: names.get(&addr).map_or_else(
                || {
                    format!(
                        "{} @{addr:#x}",
                        naming::stack_name(kind, naming::mode(flags), None)
                    )
                },
                |n| n.to_string(),
            ),
            kind,
            waits: wait_count,
            total_wait_ns: total,
            waiter_count: waiter_map.len() as u64,
            waiters: top_waiters(&waiter_map, comm),
            holders,
            activity: crate::holders::activity_shares(lock_split),
            held_across_sleep: held_across_sleep(dump, addr, stacks, symbols, excluded, comm),
            exact_holds: false,
            more_holders,
        });
    }
    out.sort_by(|a, b| {
        b.total_wait_ns
            .cmp(&a.total_wait_ns)
            .then(a.lock_addr.cmp(&b.lock_addr))
    });
    out
}

fn held_across_sleep(
    dump: &AggregateDump,
    addr: u64,
    stacks: &Stacks,
    symbols: &Kallsyms,
    excluded: &[i32],
    comm: &dyn Fn(i32) -> String,
) -> Vec<HeldAcrossSleep> {
    let mut merged: HashMap<(i32, String), HeldAcrossSleep> = HashMap::new();
    for sleep in dump
        .held_asleep
        .iter()
        .filter(|s| s.lock == addr && s.waiter_wait_ns > 0 && !excluded.contains(&s.holder))
    {
        let frames = stacks.frames(stacks.id(sleep.stack), symbols);
        let function = sleep_function(&frames).unwrap_or_else(|| NO_STACK.into());
        let entry = merged
            .entry((sleep.holder, function.clone()))
            .or_insert_with(|| HeldAcrossSleep {
                holder_comm: comm(sleep.holder),
                holder_pid: sleep.holder,
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
        entry.waiters += sleep.releases;
        entry.waiter_wait_ns += sleep.waiter_wait_ns;
    }
    let mut out: Vec<HeldAcrossSleep> = merged.into_values().collect();
    out.sort_by(|a, b| {
        b.waiter_wait_ns
            .cmp(&a.waiter_wait_ns)
            .then(a.holder_pid.cmp(&b.holder_pid))
            .then(a.function.cmp(&b.function))
    });
    out.truncate(TOP_SLEEPS);
    out
}

/// A part of the subject's time as the findings name it.
type PartKey = (ComponentKind, String, String);

#[allow(clippy::too_many_arguments)]
fn subject(
    dump: &AggregateDump,
    stacks: &Stacks,
    symbols: &Kallsyms,
    names: &HashMap<u64, &str>,
    flags: &HashMap<u64, u32>,
    holders: &[LockHolders],
    excluded: &[i32],
    comm: &dyn Fn(i32) -> String,
    tgids: &HashMap<i32, i32>,
) -> Option<SubjectTime> {
    if !dump.every_task && dump.subject_roots.is_empty() {
        return None;
    }
    // Per task: (part, stack for sleeps) -> ns.
    let mut by_task: HashMap<(i32, PartKey), u64> = HashMap::new();
    let mut asleep: HashMap<i32, Vec<(Option<StackId>, String, u64)>> = HashMap::new();
    let sleep_site = |stack: Option<StackId>| -> String {
        crate::cause_names::sleep_site(&stacks.table, stack, symbols)
    };
    let lock_site = |lock: u64| crate::cause_names::lock_site(lock, names, flags);
    for p in dump
        .parts
        .iter()
        .filter(|p| p.ns > 0 && !excluded.contains(&p.pid))
    {
        let key: PartKey = match p.kind {
            part::ON_CPU => (ComponentKind::OnCpu, String::new(), String::new()),
            part::RUNNABLE => (ComponentKind::Runnable, String::new(), String::new()),
            part::LOCK => (ComponentKind::Lock, lock_site(p.detail), String::new()),
            _ => {
                let stack = stacks.id(stack_of_detail(p.detail));
                let site = sleep_site(stack);
                asleep
                    .entry(p.pid)
                    .or_default()
                    .push((stack, site.clone(), p.ns));
                (ComponentKind::Asleep, site, String::new())
            }
        };
        *by_task.entry((p.pid, key)).or_default() += p.ns;
    }
    // A holder's sleep while holding a lock others waited for is that lock's cost.
    for lock in holders {
        for held in &lock.held_across_sleep {
            let mut left = held.slept_ns;
            let Some(sleeps) = asleep.get_mut(&held.holder_pid) else {
                continue;
            };
            sleeps.sort_by_key(|s| (std::cmp::Reverse(s.2), s.0));
            for sleep in sleeps.iter_mut().filter(|s| s.1 == held.function) {
                let moved = sleep.2.min(left);
                if moved == 0 {
                    break;
                }
                left -= moved;
                sleep.2 -= moved;
                let from = (ComponentKind::Asleep, sleep.1.clone(), String::new());
                if let Some(ns) = by_task.get_mut(&(held.holder_pid, from)) {
                    *ns = ns.saturating_sub(moved);
                }
                let to = (
                    ComponentKind::HoldingAsleep,
                    sleep.1.clone(),
                    lock_site(lock.lock_addr),
                );
                *by_task.entry((held.holder_pid, to)).or_default() += moved;
            }
        }
    }
    let seen: std::collections::BTreeSet<i32> = by_task.keys().map(|(pid, _)| *pid).collect();
    let mut merged: HashMap<PartKey, (u64, HashMap<i32, u64>)> = HashMap::new();
    for ((pid, key), ns) in by_task {
        if ns == 0 {
            continue;
        }
        let entry = merged.entry(key).or_default();
        entry.0 += ns;
        *entry.1.entry(pid).or_default() += ns;
    }
    // Who ended the sleeps, and what they waited for, per sleep as named.
    let mut wakers: HashMap<String, HashMap<i32, u64>> = HashMap::new();
    let mut kinds: HashMap<String, HashMap<&'static str, u64>> = HashMap::new();
    for w in dump.sleep_wakers.iter().filter(|w| w.ns > 0) {
        let stack = stacks.id(stack_of_detail(w.stack));
        let site = sleep_site(stack);
        *wakers
            .entry(site.clone())
            .or_default()
            .entry(w.waker)
            .or_default() += w.ns;
        if let Some(kind) = crate::waits::wait_kind(&stacks.frames(stack, symbols)) {
            *kinds.entry(site).or_default().entry(kind).or_default() += w.ns;
        }
    }
    let top = |tasks: HashMap<i32, u64>| -> Vec<TaskTime> {
        let mut list: Vec<TaskTime> = tasks
            .into_iter()
            .filter(|&(_, ns)| ns > 0)
            .map(|(pid, ns)| TaskTime {
                comm: comm(pid),
                pid,
                ns,
            })
            .collect();
        list.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.pid.cmp(&b.pid)));
        list.truncate(TOP_TASKS);
        list
    };
    let processes = |tasks: &HashMap<i32, u64>| -> Vec<TaskTime> {
        if tgids.is_empty() {
            return Vec::new();
        }
        let mut by_process: HashMap<i32, u64> = HashMap::new();
        for (&pid, &ns) in tasks {
            *by_process
                .entry(tgids.get(&pid).copied().unwrap_or(pid))
                .or_default() += ns;
        }
        top(by_process)
    };
    let mut parts: Vec<SubjectPart> = merged
        .into_iter()
        .map(|((kind, detail, lock), (total_ns, tasks))| {
            let (waits_for, woken_by) = if kind == ComponentKind::Asleep {
                let waits_for = kinds
                    .get(&detail)
                    .and_then(crate::waits::heaviest_kind)
                    .unwrap_or("")
                    .to_string();
                let woken_by: Vec<SleepWaker> = wakers
                    .get(&detail)
                    .map(|w| {
                        w.iter()
                            .map(|(&pid, &ns)| SleepWaker {
                                comm: if pid == 0 {
                                    "interrupt".into()
                                } else {
                                    comm(pid)
                                },
                                pid,
                                tasks: 0,
                                ns,
                                ran: Vec::new(),
                                // The maps keep who ended a sleep, not what the waker did
                                // meanwhile: the chain stops at one hop here.
                                meanwhile: Vec::new(),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let woken_by = crate::waker_groups::fold(woken_by, TOP_WAKERS);
                (waits_for, woken_by)
            } else {
                (String::new(), Vec::new())
            };
            SubjectPart {
                in_syscalls: Vec::new(),
                kind,
                detail,
                lock,
                total_ns,
                processes: processes(&tasks),
                tasks: top(tasks),
                cpu_holders: Vec::new(),
                waits_for,
                woken_by,
                what_if: None,
            }
        })
        .collect();
    parts.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then(a.kind.cmp(&b.kind))
            .then(a.detail.cmp(&b.detail))
    });
    let asleep_left_out_ns = if dump.every_task {
        parts
            .iter()
            .filter(|p| p.kind == ComponentKind::Asleep)
            .map(|p| p.total_ns)
            .sum()
    } else {
        0
    };
    let joined: HashMap<i32, u64> = dump
        .joined
        .iter()
        .filter(|(pid, _)| !excluded.contains(pid))
        .map(|(&pid, &ns)| (pid, ns))
        .collect();
    let unseen = dump
        .subject_roots
        .iter()
        .filter(|&&r| !seen.contains(&(r as i32)))
        .count() as u32;
    Some(SubjectTime {
        tasks: seen.len() as u32,
        unseen,
        total_ns: parts.iter().map(|p| p.total_ns).sum::<u64>() - asleep_left_out_ns,
        joined_ns: joined.values().sum(),
        joined: top(joined),
        parts,
        every_task: dump.every_task,
        asleep_left_out_ns,
        asleep_from_before_ns: 0,
        unseen_left_out_ns: 0,
    })
}

fn ipis(
    dump: &AggregateDump,
    symbols: &Kallsyms,
    comm: &dyn Fn(i32) -> String,
    traced_ns: u64,
) -> Vec<IpiPhase> {
    let mut by_site: HashMap<(u64, u64), u64> = HashMap::new();
    let mut by_sender: HashMap<i32, u64> = HashMap::new();
    let mut total = 0;
    for ipi in &dump.ipis {
        total += ipi.ipis;
        *by_site.entry((ipi.callsite, ipi.callback)).or_default() += ipi.ipis;
        *by_sender.entry(ipi.sender).or_default() += ipi.ipis;
    }
    let mut sites: Vec<IpiSite> = by_site
        .into_iter()
        .map(|((site, callback), ipis)| IpiSite {
            callsite: symbols.frame(site),
            callback: if callback == 0 {
                String::new()
            } else {
                symbols.frame(callback)
            },
            reason: String::new(),
            ipis,
        })
        .collect();
    sites.sort_by(|a, b| {
        b.ipis
            .cmp(&a.ipis)
            .then(a.callsite.cmp(&b.callsite))
            .then(a.callback.cmp(&b.callback))
    });
    sites.truncate(TOP_IPI_SITES);
    let mut senders: Vec<IpiSender> = by_sender
        .into_iter()
        .map(|(pid, ipis)| IpiSender {
            pid,
            comm: if pid == 0 {
                "interrupt".into()
            } else {
                comm(pid)
            },
            ipis,
        })
        .collect();
    senders.sort_by(|a, b| b.ipis.cmp(&a.ipis).then(a.pid.cmp(&b.pid)));
    senders.truncate(TOP_IPI_SENDERS);
    vec![IpiPhase {
        label: IpiPhase::WHOLE_TRACE.into(),
        duration_ns: traced_ns,
        ipis: total,
        counted_from: "ipi_send".into(),
        by_site: sites,
        by_sender: senders,
        ..IpiPhase::default()
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscale_trace::record::bpf::dump::{HoldCount, HolderTime, PartTime, TaskName, WaiterTime};

    const MUTEX: u32 = 1 << 5;
    const WRITE: u32 = 1 << 2;
    const READ: u32 = 1 << 1;

    fn kallsyms() -> &'static str {
        "ffffffff81000000 T _text\n\
         ffffffff81000100 T bpf_trace_run2\n\
         ffffffff81000200 T __traceiter_contention_begin\n\
         ffffffff81000300 T __mutex_lock\n\
         ffffffff81000400 T anon_pipe_write\n\
         ffffffff81000500 T down_write\n\
         ffffffff81000600 T __vm_munmap\n\
         ffffffff81000700 T down_read\n\
         ffffffff81000800 T __x64_sys_mincore\n\
         ffffffff81000900 T handle_userfault\n\
         ffffffff81000a00 T schedule\n\
         ffffffffa0000000 t bpf_prog_0123456789abcdef_on_contention_begin\t[bpf]\n"
    }

    fn wait(lock: u64, stack: u32, flags: u32, count: u64, each: u64) -> WaitAggregate {
        let mut hist = vec![0; 40];
        hist[63 - each.leading_zeros() as usize] = count;
        WaitAggregate {
            lock,
            ioctl: None,
            stack: Some(stack),
            flags,
            count,
            total_ns: count * each,
            min_ns: each,
            max_ns: each,
            log2_hist: hist,
        }
    }

    fn dump() -> AggregateDump {
        let mut stacks = BTreeMap::new();
        // The program's own frames first, as bpf_get_stackid records them.
        stacks.insert(
            1,
            vec![
                0xffff_ffff_a000_0010,
                0xffff_ffff_8100_0110,
                0xffff_ffff_8100_0210,
                0xffff_ffff_8100_0310,
                0xffff_ffff_8100_0410,
            ],
        );
        stacks.insert(2, vec![0xffff_ffff_8100_0510, 0xffff_ffff_8100_0610]);
        stacks.insert(3, vec![0xffff_ffff_8100_0710, 0xffff_ffff_8100_0810]);
        stacks.insert(4, vec![0xffff_ffff_8100_0a10, 0xffff_ffff_8100_0910]);
        let pipe = 0xffff_8881_0000_1000;
        let mm = 0xffff_8881_0000_2000;
        AggregateDump {
            version: 1,
            waits: vec![
                wait(pipe, 1, MUTEX, 10, 100_000_000),
                wait(mm, 2, WRITE, 5, 1000),
                wait(mm, 3, READ, 50, 2000),
            ],
            waiters: vec![
                WaiterTime {
                    lock: pipe,
                    pid: 11,
                    count: 10,
                    total_ns: 1_000_000_000,
                },
                WaiterTime {
                    lock: mm,
                    pid: 12,
                    count: 55,
                    total_ns: 105_000,
                },
            ],
            stacks,
            holder_time: vec![
                HolderTime {
                    lock: pipe,
                    holder: 10,
                    activity: activity::ASLEEP,
                    detail: 4,
                    ns: 900_000_000,
                },
                HolderTime {
                    lock: pipe,
                    holder: 0,
                    activity: activity::HANDOFF,
                    detail: 0,
                    ns: 50_000_000,
                },
            ],
            holds: vec![HoldCount {
                lock: pipe,
                holder: 10,
                holds: 6,
                shared: 0,
                ipis: 0,
            }],
            held_asleep: vec![vmscale_trace::record::bpf::dump::HeldAsleep {
                lock: pipe,
                holder: 10,
                stack: Some(4),
                holds: 6,
                slept_ns: 600_000_000,
                held_ns: 650_000_000,
                waiter_wait_ns: 900_000_000,
                releases: 10,
                held_at_least: true,
            }],
            parts: vec![
                PartTime {
                    pid: 11,
                    kind: part::LOCK,
                    detail: pipe,
                    ns: 1_000_000_000,
                },
                PartTime {
                    pid: 10,
                    kind: part::ASLEEP,
                    detail: 4,
                    ns: 700_000_000,
                },
                PartTime {
                    pid: 10,
                    kind: part::ON_CPU,
                    detail: 0,
                    ns: 100_000_000,
                },
            ],
            tasks: vec![
                TaskName {
                    pid: 10,
                    tgid: 10,
                    comm: "repro-holder".into(),
                },
                TaskName {
                    pid: 11,
                    tgid: 10,
                    comm: "repro-writer".into(),
                },
            ],
            subject_roots: vec![10],
            ..AggregateDump::default()
        }
    }

    #[test]
    fn maps_become_the_tracefs_paths_findings() {
        let dir = std::env::temp_dir().join(format!("vmscale-aggregate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("kallsyms"), kallsyms()).unwrap();
        let mut section = TraceSection {
            dir: "trace".into(),
            ..TraceSection::default()
        };
        let mut warnings = Vec::new();
        fill(
            &dump(),
            &dir,
            &AggregateScope::default(),
            &mut section,
            &mut warnings,
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        // Named as the tracefs path names them, from the stack without the program's frames.
        let pipe = &section.contention[0];
        assert_eq!(pipe.name, "pipe->mutex (in anon_pipe_write)");
        assert_eq!(pipe.stacks[0].frames[0], "__mutex_lock+0x10");
        assert_eq!(pipe.waits.as_ref().unwrap().n, 10);
        assert_eq!(pipe.waiters[0].comm, "repro-writer");
        let mm = &section.contention[1];
        assert!(mm.name.starts_with("mmap_lock ("), "{}", mm.name);
        assert_eq!(mm.modes["read"], 50);
        // The holder, asleep in the userfault for most of the waiting, held it across it.
        let holders = &section.holders[0];
        assert_eq!(holders.lock_addr, pipe.lock_addr);
        assert_eq!(holders.holders[0].comm, "repro-holder");
        assert_eq!(holders.holders[0].holds, 6);
        assert_eq!(holders.held_across_sleep[0].function, "handle_userfault");
        let activity: u64 = holders.activity.iter().map(|a| a.wait_ns).sum();
        assert_eq!(
            activity, holders.total_wait_ns,
            "the split sums to the waiting"
        );
        // The subject: the writer waited on the mutex; the holder's sleep under it is
        // the lock's.
        let subject = section.subject.as_ref().unwrap();
        assert_eq!(subject.parts[0].kind, ComponentKind::Lock);
        assert_eq!(subject.parts[0].detail, "pipe->mutex (in anon_pipe_write)");
        let held = subject
            .parts
            .iter()
            .find(|p| p.kind == ComponentKind::HoldingAsleep)
            .unwrap();
        assert_eq!(held.detail, "handle_userfault");
        assert_eq!(held.total_ns, 600_000_000);
        assert!(section.spinlocks.is_empty());
        assert!(section.aggregate.is_some());
    }

    #[test]
    fn a_spin_fills_the_time_no_proven_hold_covers() {
        let split = |spun: u64| {
            let mut split: HashMap<(HolderActivity, String), u64> = HashMap::new();
            split.insert((HolderActivity::Running, String::new()), 100);
            split.insert((HolderActivity::Handoff, String::new()), 300);
            split.insert((HolderActivity::Unknown, NO_RELEASER.into()), 100);
            split.insert((HolderActivity::Unknown, TRIMMED.into()), 50);
            spin_fills_gaps(&mut split, spun);
            let get = |a: HolderActivity, d: &str| split.get(&(a, d.to_string())).copied();
            assert_eq!(
                split.values().sum::<u64>(),
                550,
                "the split still sums to the waiting"
            );
            // A proven hold, and a holder's own unknown history, keep their time.
            assert_eq!(get(HolderActivity::Running, ""), Some(100));
            assert_eq!(get(HolderActivity::Unknown, TRIMMED), Some(50));
            (
                get(HolderActivity::Running, SPUN),
                get(HolderActivity::Handoff, ""),
                get(HolderActivity::Unknown, NO_RELEASER),
            )
        };
        // Half the gaps' time spun: half of each gap.
        assert_eq!(split(200), (Some(200), Some(150), Some(50)));
        // More spinning than gaps (it overlapped proven holds): every gap, no more.
        assert_eq!(split(1000), (Some(400), Some(0), Some(0)));
        assert_eq!(split(0), (None, Some(300), Some(100)));
    }

    #[test]
    fn drops_are_said_in_one_line() {
        let facts = AggregateFacts {
            drops: [("stack".to_string(), 3), ("waits_full".to_string(), 7)].into(),
            dropped: 12,
            ..AggregateFacts::default()
        };
        let line = drop_warning(&facts, 2).unwrap();
        assert!(line.starts_with("aggregate mode did not count 12 events (waits full 7, stack 3, program runs the kernel skipped 2)"), "{line}");
        assert!(drop_warning(&AggregateFacts::default(), 0).is_none());
    }
}
