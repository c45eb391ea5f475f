//! Runs that timed their samples on one measuring thread (memslot, zap, mlock): the
//! subject is exactly those windows.

use std::collections::HashMap;

use vmscale_run::findings::{ComponentKind, CpuHolder, TraceSection};
use vmscale_run::verdict::{Cause, Finding, FindingWhatIf};
use vmscale_run::RunRecord;
use vmscale_stats::units::duration;

use crate::breakdown::TIMED_SAMPLE;

use super::growth::growth;
use super::{lock_entry, percent, MAX_FINDINGS, MIN_SHARE};

/// The prediction for the phase where the component weighs most: the timed samples with
/// its time removed (or halved), sample by sample.
fn what_if(trace: &TraceSection, kind: ComponentKind, detail: &str) -> Option<FindingWhatIf> {
    trace
        .breakdown
        .iter()
        .filter_map(|phase| {
            let op = phase
                .operations
                .iter()
                .find(|op| op.syscall == TIMED_SAMPLE)?;
            let c = op
                .components
                .iter()
                .find(|c| c.kind == kind && c.detail == detail)?;
            Some((phase, c.total_ns, c.what_if?))
        })
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.label.cmp(&a.0.label)))
        .map(|(phase, _, prediction)| {
            super::finding_what_if(kind, detail, phase.label.clone(), prediction)
        })
}

/// What the timed samples' sleeps at `site` waited for, as their stacks say.
fn waits_for<'a>(trace: &'a TraceSection, site: &str) -> Option<&'a str> {
    trace
        .breakdown
        .iter()
        .flat_map(|phase| &phase.operations)
        .filter(|op| op.syscall == TIMED_SAMPLE)
        .flat_map(|op| &op.components)
        .find(|c| c.kind == ComponentKind::Asleep && c.detail == site && !c.waits_for.is_empty())
        .map(|c| c.waits_for.as_str())
}

/// The two causes removed together, predicted for the phase where together they weigh
/// most.
fn what_if_together(
    trace: &TraceSection,
    keys: [(ComponentKind, &str); 2],
) -> Option<FindingWhatIf> {
    trace
        .breakdown
        .iter()
        .filter_map(|phase| {
            let op = phase
                .operations
                .iter()
                .find(|op| op.syscall == TIMED_SAMPLE)?;
            let both = op.what_if_together.iter().find(|w| {
                w.removed.len() == 2
                    && keys.iter().all(|k| {
                        w.removed
                            .iter()
                            .any(|(kind, detail)| *kind == k.0 && detail == k.1)
                    })
            })?;
            let weight: u64 = op
                .components
                .iter()
                .filter(|c| keys.iter().any(|k| c.kind == k.0 && c.detail == k.1))
                .map(|c| c.total_ns)
                .sum();
            Some((phase, weight, both))
        })
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.label.cmp(&a.0.label)))
        .map(|(phase, _, both)| FindingWhatIf {
            change: format!(
                "{} and {}",
                super::change(keys[0].0, keys[0].1),
                super::change(keys[1].0, keys[1].1)
            ),
            phase: phase.label.clone(),
            prediction: both.prediction,
            only_halved: false,
        })
}

pub(super) fn timed_findings(record: &RunRecord, trace: &TraceSection) -> Vec<Finding> {
    let mut total = 0u64;
    let mut samples = 0u64;
    let mut parts: HashMap<(ComponentKind, String), u64> = HashMap::new();
    let mut cpu_holders: HashMap<(i32, String, bool), u64> = HashMap::new();
    // Per sleep site: (waker, what it did) -> the sleeps it ended, and how many tasks it is.
    let mut sleep_wakers: HashMap<String, super::timed_wakers::PhaseWakers> = HashMap::new();
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
            for h in &c.cpu_holders {
                // The folded rest of each point's holders, merged over the points (whose
                // counts overlap: the same tasks at several points).
                let comm = match (h.pid, h.subject) {
                    (crate::runqueue::REST_PID, true) => "more of its own tasks".to_string(),
                    (crate::runqueue::REST_PID, false) => "more tasks".to_string(),
                    _ => h.comm.clone(),
                };
                *cpu_holders.entry((h.pid, comm, h.subject)).or_default() += h.ns;
            }
            for w in &c.wakers {
                let e = sleep_wakers
                    .entry(c.detail.clone())
                    .or_default()
                    .entry((w.pid, w.comm.clone(), w.doing.clone()))
                    .or_default();
                e.0 += w.slept_ns;
                e.1 += w.tasks;
            }
        }
    }
    if total == 0 {
        return Vec::new();
    }
    let mut holders: Vec<CpuHolder> = cpu_holders
        .into_iter()
        .map(|((pid, comm, subject), ns)| CpuHolder {
            comm,
            pid,
            ns,
            subject,
        })
        .collect();
    holders.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.pid.cmp(&b.pid)));
    let mut ranked: Vec<((ComponentKind, String), u64)> = parts.into_iter().collect();
    let runnable_ns: u64 = ranked
        .iter()
        .filter(|((kind, _), _)| *kind == ComponentKind::Runnable)
        .map(|(_, ns)| ns)
        .sum();
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
    let said: Vec<(ComponentKind, String, f64)> = ranked
        .into_iter()
        .filter(|((kind, _), _)| *kind != ComponentKind::Other)
        .map(|((kind, detail), ns)| (kind, detail, ns as f64 / total as f64))
        .filter(|&(_, _, share)| share >= MIN_SHARE)
        .take(MAX_FINDINGS)
        .collect();
    // Removing all of the operation's own on-CPU work leaves no operation to predict: the
    // pair is predicted only where both causes are waits.
    let together = match said.as_slice() {
        [a, b, ..] if a.0 != ComponentKind::OnCpu && b.0 != ComponentKind::OnCpu => {
            what_if_together(trace, [(a.0, a.1.as_str()), (b.0, b.1.as_str())])
        }
        _ => None,
    };
    let mut findings: Vec<Finding> = said
        .into_iter()
        .map(|(kind, detail, share)| {
            let mut evidence = Vec::new();
            let pct = percent(share);
            let (cause, lock, holder, summary) = match kind {
                ComponentKind::Lock => {
                    let lock = super::lock_as_cause(trace, &detail);
                    evidence.extend(lock.evidence);
                    let summary = format!("{pct} of {subject} went to {} {detail}", lock.how);
                    (lock.cause, Some(detail.clone()), lock.holder, summary)
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
                        format!(
                            "{pct} of {subject} was spent runnable but not on a CPU{}",
                            super::cpu_holders::summary(&holders, runnable_ns)
                        ),
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
                ComponentKind::Asleep => {
                    let waiting = match waits_for(trace, &detail) {
                        Some(kind) => format!(", waiting for {kind}"),
                        None => String::new(),
                    };
                    (
                        Cause::Sleep,
                        None,
                        None,
                        format!("{pct} of {subject} was spent asleep in {detail}{waiting}"),
                    )
                }
                _ => (
                    Cause::OnCpu,
                    None,
                    None,
                    format!(
                        "{pct} of {subject} was spent on a CPU, in its own work{}{}",
                        super::code_paths::spinning_outside_waits(trace)
                            .map(|spinning| format!(" ({spinning})"))
                            .unwrap_or_default(),
                        super::code_paths::summary(trace, super::code_paths::Side::Both)
                    ),
                ),
            };
            Finding {
                summary,
                cause,
                lock,
                holder,
                share,
                evidence,
                explained_by: match kind {
                    ComponentKind::Runnable => super::cpu_holders::explained_by(&holders, runnable_ns),
                    ComponentKind::Lock => {
                        super::lock_explained_by(trace, lock_entry(trace, &detail))
                    }
                    ComponentKind::OnCpu => {
                        super::code_paths::explained_by(trace, super::code_paths::Side::Both)
                    }
                    ComponentKind::Asleep => {
                        super::timed_wakers::woken_by(sleep_wakers.get(&detail), (share * total as f64) as u64)
                    }
                    ComponentKind::CrossCpu => super::cross_cpu::explained_by(trace, &detail),
                    _ => Vec::new(),
                },
                what_if: what_if(trace, kind, &detail),
                what_if_together: None,
            }
        })
        .collect();
    if let Some(second) = findings.get_mut(1) {
        second.what_if_together = together;
    }
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
