//! The verdict of a run, from its findings: what the explained time went to, ranked.
//!
//! Two kinds of run, two subjects, each said in the evidence:
//! - A run whose scenario recorded its timed samples (memslot, zap, mlock): the subject is
//!   those windows of the measuring thread ([`crate::breakdown`] in timed mode), so every
//!   share is of the time the samples measured, and nothing outside them is blamed.
//! - Any other traced run (irqfd, teardown, `record`, imported traces): the trace does not
//!   say which waits were part of a measured operation, so the subject is lock waiting
//!   across every traced task, and shares are of that.
//!
//! A finding only restates an aggregate the analyses computed; where the trace cannot
//! tell (no stack for a sleep, a holder not seen), the sentence says so instead.

use std::collections::HashMap;

use vmscale_run::findings::{ComponentKind, LockHolders, TraceSection};
use vmscale_run::verdict::{Cause, Finding};
use vmscale_run::{LockContention, RunRecord};
use vmscale_stats::units::duration;

use crate::breakdown::TIMED_SAMPLE;

/// Findings shown; causes below [`MIN_SHARE`] are left to the details.
const MAX_FINDINGS: usize = 5;
const MIN_SHARE: f64 = 0.05;

/// The ranked findings of `record`.
pub fn verdict(record: &RunRecord) -> Vec<Finding> {
    let Some(trace) = &record.trace else {
        return vec![none(
            "not traced: the run has latencies but nothing that explains them (run without --no-trace)",
            Vec::new(),
        )];
    };
    let timed = timed_findings(record, trace);
    if !timed.is_empty() {
        return timed;
    }
    lock_findings(record, trace)
}

/// Lock waiting below this share of the traced CPU time (measured phases times online
/// CPUs) is the background of any busy kernel (runqueue locks, page-fault fallbacks), not a
/// bottleneck: nothing is blamed on a lock.
const LOCK_BLAME_FLOOR: f64 = 0.01;

fn none(summary: &str, evidence: Vec<String>) -> Finding {
    Finding {
        summary: summary.to_string(),
        cause: Cause::None,
        lock: None,
        holder: None,
        share: 0.0,
        evidence,
    }
}

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// The contention entry of a lock named `name` in the breakdown (which drops the address
/// suffix of per-CPU locks).
fn lock_entry<'a>(trace: &'a TraceSection, name: &str) -> Option<&'a LockContention> {
    trace
        .contention
        .iter()
        .find(|l| l.name == name || l.name.rsplit_once(" @0x").is_some_and(|(n, _)| n == name))
}

fn holders_of(trace: &TraceSection, addr: u64) -> Option<&LockHolders> {
    trace.holders.iter().find(|h| h.lock_addr == addr)
}

fn is_spinning(kind: &str) -> bool {
    kind == "spinlock" || kind == "rwlock"
}

/// The cause of waiting on a lock, and the holder as the trace shows it.
fn lock_cause(trace: &TraceSection, lock: Option<&LockContention>) -> (Cause, Option<String>) {
    let Some(lock) = lock else {
        return (Cause::LockWait, None);
    };
    if is_spinning(&lock.kind) {
        // A spinning waiter is never woken by its holder: the trace cannot name it.
        return (Cause::LockSpin, None);
    }
    let Some(holders) = holders_of(trace, lock.lock_addr) else {
        return (Cause::LockWait, None);
    };
    let across_sleep: u64 = holders
        .held_across_sleep
        .iter()
        .map(|h| h.waiter_wait_ns)
        .sum();
    if let Some(worst) = holders.held_across_sleep.first() {
        if holders.total_wait_ns > 0 && across_sleep * 2 >= holders.total_wait_ns {
            return (
                Cause::HeldAcrossSleep,
                Some(format!(
                    "{}/{} slept in {} while holding it ({} of {} waiters' time behind such holds)",
                    worst.holder_comm,
                    worst.holder_pid,
                    worst.function,
                    percent(across_sleep as f64 / holders.total_wait_ns as f64),
                    duration(holders.total_wait_ns)
                )),
            );
        }
    }
    let holder = holders.holders.first().map(|h| {
        let doing = h
            .activity
            .first()
            .map(|a| {
                let share = if h.waited_behind_ns > 0 {
                    a.wait_ns as f64 / h.waited_behind_ns as f64
                } else {
                    0.0
                };
                let what = match a.detail.as_str() {
                    "" => a.activity.label().to_string(),
                    detail => format!("{} ({detail})", a.activity.label()),
                };
                format!(", {what} for {} of the waiting behind it", percent(share))
            })
            .unwrap_or_default();
        if h.shared_holds > 0 {
            // A read hold is shared: other readers may have held it too, unseen.
            format!(
                "{}/{} was among the readers holding it ({} of {} holds shared), so no single holder is named{doing}",
                h.comm, h.pid, h.shared_holds, h.holds
            )
        } else {
            format!("{}/{} held it in {} holds{doing}", h.comm, h.pid, h.holds)
        }
    });
    (Cause::LockWait, holder)
}

/// How each timed series' median moved from the smallest to the largest point.
fn growth(record: &RunRecord) -> Vec<String> {
    let (Some(first), Some(last)) = (record.points.first(), record.points.last()) else {
        return Vec::new();
    };
    if record.points.len() < 2 {
        return Vec::new();
    }
    first
        .series
        .iter()
        .filter(|s| !s.sample_start_ns.is_empty())
        .filter_map(|s| {
            let a = s.summary.as_ref()?;
            let b = last
                .series
                .iter()
                .find(|l| l.name == s.name)?
                .summary
                .as_ref()?;
            Some(format!(
                "{}: p50 {} at {}={} -> {} at {}={}",
                s.name,
                duration(a.p50_ns),
                record.sweep,
                first.n,
                duration(b.p50_ns),
                record.sweep,
                last.n
            ))
        })
        .collect()
}

fn timed_findings(record: &RunRecord, trace: &TraceSection) -> Vec<Finding> {
    let mut total = 0u64;
    let mut samples = 0u64;
    let mut parts: HashMap<(ComponentKind, String), u64> = HashMap::new();
    for op in trace
        .breakdown
        .iter()
        .flat_map(|p| &p.operations)
        .filter(|op| op.syscall == TIMED_SAMPLE)
    {
        total += op.total_ns;
        samples += op.count;
        for c in &op.components {
            *parts.entry((c.kind, c.detail.clone())).or_default() += c.total_ns;
        }
    }
    if total == 0 {
        return Vec::new();
    }
    let mut ranked: Vec<((ComponentKind, String), u64)> = parts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let overcommit = record
        .points
        .iter()
        .map(|p| p.vcpus_per_host_cpu)
        .fold(0.0, f64::max);
    let subject = format!(
        "the time of {}'s {} timed samples ({})",
        record.scenario,
        samples,
        duration(total)
    );
    let mut findings: Vec<Finding> = ranked
        .into_iter()
        .filter(|((kind, _), _)| *kind != ComponentKind::Other)
        .map(|((kind, detail), ns)| (kind, detail, ns as f64 / total as f64))
        .filter(|&(_, _, share)| share >= MIN_SHARE)
        .take(MAX_FINDINGS)
        .map(|(kind, detail, share)| {
            let mut evidence = Vec::new();
            let pct = percent(share);
            let (cause, lock, holder, summary) = match kind {
                ComponentKind::Lock => {
                    let entry = lock_entry(trace, &detail);
                    let (cause, holder) = lock_cause(trace, entry);
                    let how = if cause == Cause::LockSpin { "spinning on" } else { "waiting for" };
                    if let Some(l) = entry {
                        evidence.push(format!(
                            "{}: {} contended waits by all tasks, {} in all",
                            l.name,
                            l.waits.as_ref().map_or(0, |w| w.n),
                            duration(l.total_wait_ns)
                        ));
                    }
                    let summary = format!("{pct} of {subject} went to {how} {detail}");
                    (cause, Some(detail.clone()), holder, summary)
                }
                ComponentKind::CrossCpu => (
                    Cause::Ipi,
                    None,
                    None,
                    format!("{pct} of {subject} went to waiting for other CPUs to run {detail} (IPIs)"),
                ),
                ComponentKind::Runnable => {
                    if overcommit > 1.0 {
                        evidence.push(format!(
                            "up to {overcommit:.1} running vCPUs per host CPU: overcommitted"
                        ));
                    }
                    if let Some(load) = &record.background {
                        evidence.push(format!(
                            "other processes used {} of all CPU time",
                            percent(load.other_busy_fraction)
                        ));
                    }
                    (
                        Cause::CpuStarvation,
                        None,
                        None,
                        format!("{pct} of {subject} was spent runnable but not on a CPU"),
                    )
                }
                ComponentKind::Asleep if detail.starts_with('(') => (
                    Cause::Sleep,
                    None,
                    None,
                    format!(
                        "{pct} of {subject} was spent asleep, where the trace does not say (--sleep-stacks records it)"
                    ),
                ),
                ComponentKind::Asleep => (
                    Cause::Sleep,
                    None,
                    None,
                    format!("{pct} of {subject} was spent asleep in {detail}"),
                ),
                _ => (
                    Cause::OnCpu,
                    None,
                    None,
                    format!("{pct} of {subject} was spent on a CPU, in its own work"),
                ),
            };
            Finding {
                summary,
                cause,
                lock,
                holder,
                share,
                evidence,
            }
        })
        .collect();
    if let Some(first) = findings.first_mut() {
        // Said once: what was explained, and how the cost grew.
        let mut head = growth(record);
        head.push(format!(
            "subject: the measuring thread during the {samples} timed samples ({} in all), nothing between them",
            duration(total)
        ));
        first.evidence.splice(0..0, head);
    }
    findings
}

fn lock_findings(record: &RunRecord, trace: &TraceSection) -> Vec<Finding> {
    let scope =
        "subject: lock waits of every traced task (this run did not record timed sample windows)"
            .to_string();
    let total: u64 = trace.contention.iter().map(|l| l.total_wait_ns).sum();
    // The measured phases when the run had them (tracing was on only then), else the whole
    // trace (an imported or a --duration recording).
    let phases_ns = trace
        .ipis
        .iter()
        .map(|p| p.duration_ns)
        .sum::<u64>()
        .max(trace.breakdown.iter().map(|p| p.duration_ns).sum());
    let traced_ns = if phases_ns > 0 {
        phases_ns
    } else {
        trace.span_ns
    };
    let capacity = traced_ns as f64 * record.host.online_cpus.max(1) as f64;
    if total > 0 && capacity > 0.0 && (total as f64) < LOCK_BLAME_FLOOR * capacity {
        return vec![none(
            &format!(
                "nothing is blamed on a lock: traced tasks waited {} on locks in {} of tracing on {} CPUs ({:.2}% of that CPU time)",
                duration(total),
                duration(traced_ns),
                record.host.online_cpus,
                total as f64 * 100.0 / capacity
            ),
            vec![scope],
        )];
    }
    if total == 0 {
        let summary = if trace.lock_format_missing {
            "lock contention unknown: the trace cannot decode lock:contention_begin"
        } else {
            "no lock contention recorded: nothing here is blamed on a lock"
        };
        return vec![none(summary, vec![scope])];
    }
    let mut locks: Vec<&LockContention> = trace.contention.iter().collect();
    locks.sort_by_key(|l| std::cmp::Reverse(l.total_wait_ns));
    locks
        .into_iter()
        .map(|l| (l, l.total_wait_ns as f64 / total as f64))
        .filter(|&(_, share)| share >= MIN_SHARE)
        .take(MAX_FINDINGS)
        .enumerate()
        .map(|(rank, (l, share))| {
            let (cause, holder) = lock_cause(trace, Some(l));
            let how = if cause == Cause::LockSpin {
                "spinning on"
            } else {
                "waiting for"
            };
            let waiters: Vec<String> = l
                .waiters
                .iter()
                .take(3)
                .map(|w| format!("{}/{}", w.comm, w.pid))
                .collect();
            // What was explained is said once, with the first finding.
            let mut evidence: Vec<String> =
                (rank == 0).then(|| scope.clone()).into_iter().collect();
            evidence.push(format!(
                "{} waits, {} in all, by {}",
                l.waits.as_ref().map_or(0, |w| w.n),
                duration(l.total_wait_ns),
                waiters.join(", ")
            ));
            if let Some(frames) = l.stacks.first() {
                evidence.push(format!(
                    "waited from: {}",
                    frames
                        .frames
                        .iter()
                        .take(6)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(" <- ")
                ));
            }
            Finding {
                summary: format!(
                    "{} of the {} that traced tasks spent waiting on locks went to {how} {} ({})",
                    percent(share),
                    duration(total),
                    l.name,
                    l.kind
                ),
                cause,
                lock: Some(l.name.clone()),
                holder,
                share,
                evidence,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscale_run::findings::{
        ActivityShare, Component, HeldAcrossSleep, Holder, HolderActivity, OperationBreakdown,
        PhaseBreakdown,
    };
    use vmscale_run::{HostFacts, ToolInfo, SCHEMA_VERSION};

    fn record(trace: Option<TraceSection>) -> RunRecord {
        RunRecord {
            schema_version: SCHEMA_VERSION,
            verdict: Vec::new(),
            tool: ToolInfo::current("test"),
            scenario: "memslot".into(),
            sweep: "vcpus".into(),
            command_line: Vec::new(),
            started_utc: String::new(),
            finished_utc: String::new(),
            host: HostFacts {
                hostname: String::new(),
                kernel_release: String::new(),
                kernel_version: String::new(),
                cpu_model: String::new(),
                online_cpus: 2,
                memory_bytes: 0,
                kvm: None,
            },
            knobs: serde_json::json!({}),
            background: None,
            points: Vec::new(),
            trace,
            warnings: Vec::new(),
        }
    }

    fn lock(name: &str, kind: &str, addr: u64, total_wait_ns: u64) -> LockContention {
        LockContention {
            lock_addr: addr,
            name: name.into(),
            kind: kind.into(),
            modes: Default::default(),
            waits: None,
            total_wait_ns,
            open_waits: 0,
            waiters: Vec::new(),
            stacks: Vec::new(),
        }
    }

    fn component(kind: ComponentKind, detail: &str, total_ns: u64) -> Component {
        Component {
            kind,
            detail: detail.into(),
            total_ns,
            operations: 1,
        }
    }

    fn timed(components: Vec<Component>, syscall: i64) -> TraceSection {
        let total_ns = components.iter().map(|c| c.total_ns).sum();
        TraceSection {
            breakdown: vec![PhaseBreakdown {
                label: "memslot vcpus=2 strategy=direct".into(),
                operations: vec![OperationBreakdown {
                    operation: "timed sample".into(),
                    syscall,
                    count: 10,
                    total_ns,
                    components,
                    ..OperationBreakdown::default()
                }],
                ..PhaseBreakdown::default()
            }],
            ..TraceSection::default()
        }
    }

    fn pipe_holders(across_sleep_ns: u64) -> LockHolders {
        LockHolders {
            lock_addr: 0x10,
            name: "pipe->mutex (in anon_pipe_write)".into(),
            kind: "mutex".into(),
            waits: 4,
            total_wait_ns: 1_000,
            waiter_count: 2,
            waiters: Vec::new(),
            holders: vec![Holder {
                comm: "writer".into(),
                pid: 7,
                holds: 4,
                shared_holds: 0,
                waited_behind_ns: 1_000,
                activity: vec![ActivityShare {
                    activity: HolderActivity::Running,
                    detail: String::new(),
                    wait_ns: 800,
                }],
            }],
            activity: Vec::new(),
            held_across_sleep: vec![HeldAcrossSleep {
                holder_comm: "writer".into(),
                holder_pid: 7,
                function: "handle_userfault".into(),
                stack: Vec::new(),
                holds: 1,
                slept_ns: across_sleep_ns,
                held_ns: across_sleep_ns,
                held_at_least: false,
                waiters: 2,
                waiter_wait_ns: across_sleep_ns,
            }],
        }
    }

    #[test]
    fn timed_samples_rank_causes_by_their_share_of_the_samples() {
        let trace = timed(
            vec![
                component(ComponentKind::Runnable, "", 600),
                component(
                    ComponentKind::Lock,
                    "kvm->mmu_lock (write, in kvm_mmu_free_roots)",
                    300,
                ),
                component(ComponentKind::OnCpu, "", 80),
                // Below the threshold: left to the details.
                component(ComponentKind::Asleep, "(no stack)", 20),
            ],
            TIMED_SAMPLE,
        );
        let trace = TraceSection {
            contention: vec![lock(
                "kvm->mmu_lock (write, in kvm_mmu_free_roots)",
                "rwlock",
                1,
                300,
            )],
            ..trace
        };
        let found = verdict(&record(Some(trace)));
        let causes: Vec<Cause> = found.iter().map(|f| f.cause).collect();
        assert_eq!(
            causes,
            [Cause::CpuStarvation, Cause::LockSpin, Cause::OnCpu]
        );
        assert!((found[0].share - 0.6).abs() < 1e-9);
        assert_eq!(
            found[1].lock.as_deref(),
            Some("kvm->mmu_lock (write, in kvm_mmu_free_roots)")
        );
        // A spinning waiter is never woken by its holder: no holder is claimed.
        assert_eq!(found[1].holder, None);
        assert!(found[0]
            .evidence
            .iter()
            .any(|e| e.starts_with("subject: the measuring thread")));
    }

    #[test]
    fn a_sleeping_lock_names_its_holder_and_a_holder_that_slept_is_held_across_sleep() {
        let name = "pipe->mutex (in anon_pipe_write)";
        let with = |across_sleep_ns| TraceSection {
            contention: vec![lock(name, "mutex", 0x10, 1_000)],
            holders: vec![pipe_holders(across_sleep_ns)],
            ..timed(
                vec![component(ComponentKind::Lock, name, 1_000)],
                TIMED_SAMPLE,
            )
        };
        let slept = verdict(&record(Some(with(700))));
        assert_eq!(slept[0].cause, Cause::HeldAcrossSleep);
        let holder = slept[0].holder.as_deref().unwrap();
        assert!(
            holder.starts_with("writer/7 slept in handle_userfault"),
            "{holder}"
        );
        let ran = verdict(&record(Some(with(100))));
        assert_eq!(ran[0].cause, Cause::LockWait);
        let holder = ran[0].holder.as_deref().unwrap();
        assert!(
            holder.contains("writer/7 held it in 4 holds, running for 80%"),
            "{holder}"
        );
    }

    #[test]
    fn untimed_runs_fall_back_to_lock_waits_and_say_so() {
        let trace = TraceSection {
            contention: vec![
                lock("kvm->irqfds.lock (in kvm_irqfd)", "spinlock", 1, 900),
                lock("spinlock in __queue_work", "spinlock", 2, 100),
            ],
            // A system call breakdown is not a timed window: it is not used.
            ..timed(
                vec![component(ComponentKind::Asleep, "do_nanosleep", 5_000)],
                230,
            )
        };
        let found = verdict(&record(Some(trace)));
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].cause, Cause::LockSpin);
        assert!((found[0].share - 0.9).abs() < 1e-9);
        assert!(
            found[0]
                .summary
                .starts_with("90% of the 1.0 us that traced tasks spent waiting on locks"),
            "{}",
            found[0].summary
        );
        assert!(found[0].evidence[0].starts_with("subject: lock waits of every traced task"));
    }

    #[test]
    fn nothing_to_blame_is_said_as_such() {
        let quiet = verdict(&record(Some(TraceSection::default())));
        assert_eq!(quiet.len(), 1);
        assert_eq!(quiet[0].cause, Cause::None);
        assert!(quiet[0].summary.starts_with("no lock contention recorded"));
        let untraced = verdict(&record(None));
        assert_eq!(untraced[0].cause, Cause::None);
        assert!(untraced[0].summary.starts_with("not traced"));
    }

    #[test]
    fn lock_waiting_that_is_a_sliver_of_the_traced_cpu_time_blames_no_lock() {
        use vmscale_run::IpiPhase;
        let trace = |wait_ns| TraceSection {
            contention: vec![lock("rq->__lock (in __schedule)", "spinlock", 1, wait_ns)],
            ipis: vec![IpiPhase {
                label: "record".into(),
                duration_ns: 1_000_000_000,
                ..IpiPhase::default()
            }],
            ..TraceSection::default()
        };
        // 2 CPUs for 1 s: 1 ms of waiting is 0.05%, nothing to blame.
        let quiet = verdict(&record(Some(trace(1_000_000))));
        assert_eq!(quiet.len(), 1);
        assert_eq!(quiet[0].cause, Cause::None);
        assert!(
            quiet[0].summary.starts_with("nothing is blamed on a lock"),
            "{}",
            quiet[0].summary
        );
        // 100 ms is 5%: the lock is named.
        let busy = verdict(&record(Some(trace(100_000_000))));
        assert_eq!(busy[0].cause, Cause::LockSpin);
    }
}
