//! Runs whose trace says which tasks waited but not which waits were part of a measured
//! operation: the subject is the lock waiting of every traced task.

use vmscale_run::findings::TraceSection;
use vmscale_run::verdict::{Cause, Finding};
use vmscale_run::{LockContention, RunRecord};
use vmscale_stats::units::duration;

use super::{lock_cause, none, percent, LOCK_BLAME_FLOOR, MAX_FINDINGS, MIN_SHARE};

pub(super) fn lock_findings(record: &RunRecord, trace: &TraceSection) -> Vec<Finding> {
    let scope = if trace.every_task && trace.subject.is_none() {
        "subject: lock waits of every traced task (the trace has no sched:sched_switch, so no task's time can be split by cause)"
    } else {
        "subject: lock waits of every traced task (this run did not record timed sample windows)"
    }
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
        let summary = if vmscale_run::findings::contention_observable(trace) {
            "no lock contention recorded: nothing here is blamed on a lock"
        } else if trace.lock_format_missing {
            "lock contention unknown: the trace cannot decode lock:contention_begin"
        } else {
            "lock contention unknown: it needs lock:contention_begin/end (kernel 5.19 or later), and this trace has none, so nothing can be blamed on a lock or cleared of it"
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
                "{}, {} in all, by {}",
                vmscale_stats::units::plural(l.waits.as_ref().map_or(0, |w| w.n), "wait"),
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
                explained_by: super::lock_explained_by(trace, Some(l)),
                what_if: None,
                what_if_together: None,
            }
        })
        .collect()
}
