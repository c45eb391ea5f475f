//! Runs that timed their samples on one measuring thread (memslot, zap, mlock): the
//! subject is exactly those windows.

use std::collections::HashMap;

use vmscale_run::findings::{ComponentKind, CpuHolder, TraceSection};
use vmscale_run::verdict::{Cause, ExplainedBy, Finding, FindingWhatIf};
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
        .map(|(phase, _, prediction)| FindingWhatIf {
            change: super::change(kind, detail),
            phase: phase.label.clone(),
            prediction,
        })
}

/// Who ended a sleep of the timed samples, as parts of it: "woken by kworker/0:1/42,
/// running cross-CPU call F", the five that ended most of it by name, and the rest
/// together by what they were doing ("woken by 11 more tasks (vcpu2, vcpu1, vcpu3),
/// running"): a sleep ended by each of a VM's many vCPU threads in turn is still said in
/// full.
fn woken_by(
    wakers: Option<&HashMap<(i32, String, String), u64>>,
    sleep_ns: u64,
) -> Vec<ExplainedBy> {
    let Some(wakers) = wakers else {
        return Vec::new();
    };
    let mut wakers: Vec<(&(i32, String, String), &u64)> = wakers.iter().collect();
    wakers.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let share = |ns: u64| (ns as f64 / sleep_ns.max(1) as f64).min(1.0);
    let mut out: Vec<ExplainedBy> = wakers
        .iter()
        .take(NAMED_WAKERS)
        .map(|&((pid, comm, doing), &ns)| ExplainedBy {
            what: if *pid == 0 {
                "woken by an interrupt or timer (no task)".to_string()
            } else {
                format!("woken by {comm}/{pid}, {doing}")
            },
            share: share(ns),
        })
        .collect();
    // The rest, by what the wakers were doing.
    let mut rest: HashMap<&str, RestOfWakers> = HashMap::new();
    for &((_, comm, doing), &ns) in wakers.iter().skip(NAMED_WAKERS) {
        // By what they did, not by who woke each of them in turn ("running, itself woken
        // by vcpu3/12"): a VM's vCPUs waking one another would otherwise make one group per
        // vCPU, each too small to say.
        let doing = doing.split(", itself woken by ").next().unwrap_or(doing);
        let group = rest.entry(doing).or_default();
        group.0 += ns;
        group.1 += 1;
        if !comm.is_empty() && group.2.len() < 3 && !group.2.contains(&comm.as_str()) {
            group.2.push(comm);
        }
    }
    let mut rest: Vec<(&str, RestOfWakers)> = rest.into_iter().collect();
    rest.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
    out.extend(
        rest.into_iter()
            .map(|(doing, (ns, tasks, names))| ExplainedBy {
                what: match names.is_empty() {
                    true => format!(
                        "woken by {}, {doing}",
                        vmscale_stats::units::plural(tasks, "more waker")
                    ),
                    false => format!(
                        "woken by {} ({}), {doing}",
                        vmscale_stats::units::plural(tasks, "more task"),
                        names.join(", ")
                    ),
                },
                share: share(ns),
            }),
    );
    out.retain(|e| e.share >= 0.005);
    out
}

/// Wakers of a timed sleep named one by one; the rest are said by what they did.
const NAMED_WAKERS: usize = 5;

/// Wakers past the named ones that did one thing: the sleep they ended, how many they
/// are, and the first few of their names.
type RestOfWakers<'a> = (u64, u64, Vec<&'a str>);

pub(super) fn timed_findings(record: &RunRecord, trace: &TraceSection) -> Vec<Finding> {
    let mut total = 0u64;
    let mut samples = 0u64;
    let mut parts: HashMap<(ComponentKind, String), u64> = HashMap::new();
    let mut cpu_holders: HashMap<(i32, String, bool), u64> = HashMap::new();
    // Per sleep site: (waker, what it did) -> the sleeps it ended.
    let mut sleep_wakers: HashMap<String, HashMap<(i32, String, String), u64>> = HashMap::new();
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
                *sleep_wakers
                    .entry(c.detail.clone())
                    .or_default()
                    .entry((w.pid, w.comm.clone(), w.doing.clone()))
                    .or_default() += w.slept_ns;
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
                    format!(
                        "{pct} of {subject} was spent on a CPU, in its own work{}",
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
                        woken_by(sleep_wakers.get(&detail), (share * total as f64) as u64)
                    }
                    _ => Vec::new(),
                },
                what_if: what_if(trace, kind, &detail),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakers_past_the_fifth_are_said_together_by_what_they_did() {
        // Twelve vCPU threads each ended a twelfth of the sleep, all running.
        let wakers: HashMap<(i32, String, String), u64> = (0..12)
            .map(|i| ((100 + i, format!("vcpu{i}"), "running".to_string()), 10))
            .collect();
        let parts = woken_by(Some(&wakers), 120);
        assert_eq!(parts.len(), 6, "{parts:#?}");
        let said: f64 = parts.iter().map(|p| p.share).sum();
        assert!((said - 1.0).abs() < 1e-9, "{parts:#?}");
        let rest = &parts[5];
        assert!(
            rest.what.starts_with("woken by 7 more tasks ("),
            "{}",
            rest.what
        );
        assert!(rest.what.ends_with("), running"), "{}", rest.what);
        // Woken in turn by one another: still one group, not one per waker's waker.
        let wakers: HashMap<(i32, String, String), u64> = (0..40)
            .map(|i| {
                let doing = format!("running, itself woken by vcpu{}/{}", i + 1, 101 + i);
                ((100 + i, format!("vcpu{i}"), doing), 3)
            })
            .collect();
        let parts = woken_by(Some(&wakers), 120);
        assert_eq!(parts.len(), 6, "{parts:#?}");
        assert!(
            parts[5].what.starts_with("woken by 35 more tasks ("),
            "{}",
            parts[5].what
        );
        assert!((parts.iter().map(|p| p.share).sum::<f64>() - 1.0).abs() < 1e-9);
    }
}
