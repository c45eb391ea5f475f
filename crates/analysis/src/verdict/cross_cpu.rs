//! A wait for other CPUs said by where it was spent: each measured phase's share of the
//! timed samples' wait for one cross-CPU function, with the system calls its IPIs were
//! sent from. The breakdown times the wait per phase, not per sender, so the share is the
//! phase's and the senders are said as their share of the phase's IPIs, by count.

use vmscale_run::findings::{ComponentKind, TraceSection};
use vmscale_run::verdict::ExplainedBy;

use super::percent;
use crate::breakdown::TIMED_SAMPLE;

/// Phases with less of the wait than this are left to the details.
const MIN_PHASE_SHARE: f64 = 0.01;

/// The timed samples' wait for other CPUs to run `function`, by phase, largest first.
pub(super) fn explained_by(trace: &TraceSection, function: &str) -> Vec<ExplainedBy> {
    let by_phase: Vec<(&str, u64)> = trace
        .breakdown
        .iter()
        .map(|phase| {
            let ns = phase
                .operations
                .iter()
                .filter(|op| op.syscall == TIMED_SAMPLE)
                .flat_map(|op| &op.components)
                .filter(|c| c.kind == ComponentKind::CrossCpu && c.detail == function)
                .map(|c| c.total_ns)
                .sum();
            (phase.label.as_str(), ns)
        })
        .filter(|&(_, ns)| ns > 0)
        .collect();
    let total: u64 = by_phase.iter().map(|p| p.1).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut out: Vec<ExplainedBy> = by_phase
        .into_iter()
        .map(|(label, ns)| {
            let share = ns as f64 / total as f64;
            (label, share)
        })
        .filter(|&(_, share)| share >= MIN_PHASE_SHARE)
        .map(|(label, share)| ExplainedBy {
            what: format!("{label}{}", senders(trace, label)),
            share,
        })
        .collect();
    out.sort_by(|a, b| b.share.total_cmp(&a.share).then(a.what.cmp(&b.what)));
    out
}

/// ": its IPIs sent from munmap (87% of 452), mlock (5%)", where the phase's IPIs were
/// counted by the system call they were sent from.
fn senders(trace: &TraceSection, label: &str) -> String {
    let Some(ipis) = trace.ipis.iter().find(|p| p.label == label) else {
        return String::new();
    };
    let counted: u64 = ipis.by_syscall.iter().map(|s| s.ipis).sum();
    if counted == 0 {
        return String::new();
    }
    let mut syscalls: Vec<_> = ipis.by_syscall.iter().collect();
    syscalls.sort_by(|a, b| b.ipis.cmp(&a.ipis).then(a.syscall.cmp(&b.syscall)));
    // The second sender only where it sent at least one IPI in a hundred.
    let said: Vec<String> = syscalls
        .iter()
        .take(2)
        .enumerate()
        .filter(|(i, s)| *i == 0 || s.ipis * 100 >= counted)
        .map(|(i, s)| {
            let share = percent(s.ipis as f64 / counted as f64);
            match i {
                0 => format!("{} ({share} of {counted})", s.syscall),
                _ => format!("{} ({share})", s.syscall),
            }
        })
        .collect();
    format!(": its IPIs sent from {}", said.join(", "))
}
