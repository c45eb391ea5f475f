//! The verdict of a run, from its findings: what the explained time went to, ranked.
//!
//! Three kinds of run, three subjects, each said in the evidence:
//! - A run whose scenario recorded its timed samples (memslot, zap, mlock): the subject is
//!   those windows of the measuring thread ([`crate::breakdown`] in timed mode), so every
//!   share is of the time the samples measured, and nothing outside them is blamed.
//! - A recorded command (`record -- CMD`): the subject is the command's tasks from their
//!   first traced event to their exit ([`crate::subject`]), and shares are of their time;
//!   on-CPU time is split into kernel and user space by the CPU time the kernel charged,
//!   and the kernel's causes are ranked before the command's own code in user space.
//! - Any other traced run (irqfd, teardown, `record --duration`, imported traces): the
//!   trace does not say which waits were part of a measured operation, so the subject is
//!   lock waiting across every traced task, and shares are of that.
//!
//! A finding only restates an aggregate the analyses computed; where the trace cannot
//! tell (no stack for a sleep, a holder not seen), the sentence says so instead.

mod code_paths;
mod cpu_holders;
mod cross_cpu;
mod growth;
mod lock_cause;
mod locks_only;
mod subject;
#[cfg(test)]
mod tests;
mod timed;
mod timed_wakers;
mod two_clocks;
mod vmm;
mod wakers;

use vmscale_run::findings::{LockHolders, TraceSection};
use vmscale_run::verdict::{Cause, Finding};
use vmscale_run::{LockContention, RunRecord};

pub(crate) use lock_cause::{lock_cause, lock_explained_by};
use locks_only::lock_findings;
use subject::{command_name, subject_findings, Explained};
use timed::timed_findings;
use two_clocks::two_clocks;

/// Findings shown; causes below [`MIN_SHARE`] are left to the details.
const MAX_FINDINGS: usize = 5;
const MIN_SHARE: f64 = 0.05;

/// The ranked findings of `record`.
pub fn verdict(record: &RunRecord) -> Vec<Finding> {
    let mut findings = findings_of(record);
    if let Some(trace) = &record.trace {
        say_cross_cpu_waits_unknown(trace, &mut findings);
    }
    findings
}

/// On-CPU time may hide a wait for other CPUs (a sender spins until its cross-CPU call has
/// run) that only csd:* events tell apart: a trace without them says so where it blames a
/// CPU's own work, rather than let it read as "no IPI cost".
fn say_cross_cpu_waits_unknown(trace: &TraceSection, findings: &mut [Finding]) {
    if vmscale_run::findings::cross_cpu_observable(trace) {
        return;
    }
    for finding in findings.iter_mut().filter(|f| f.cause == Cause::OnCpu) {
        finding.evidence.push(
            "waits for other CPUs unknown: they need csd:csd_queue_cpu and csd_function_entry/exit (kernel 6.3 or later), and this trace has none, so such a wait counts as on-CPU time here"
                .to_string(),
        );
    }
}

fn findings_of(record: &RunRecord) -> Vec<Finding> {
    let clocks = two_clocks(record);
    let Some(trace) = &record.trace else {
        let mut untraced = vec![none(
            "not traced: the run has latencies but nothing that explains them (run without --no-trace)",
            Vec::new(),
        )];
        untraced.extend(clocks);
        return untraced;
    };
    let mut timed = timed_findings(record, trace);
    if !trace.vmm.is_empty() && !record.points.is_empty() {
        return vmm::findings(record, trace, timed);
    }
    if !timed.is_empty() {
        // Right after the caller's main cause: what the vCPUs saw of the same operation.
        let at = timed.len().min(1);
        timed.splice(at..at, clocks);
        return timed;
    }
    // Samples timed on several threads (irqfd's holders): exactly those calls.
    if let Some(calls) = trace.timed_calls.as_ref().filter(|c| c.total_ns > 0) {
        return subject_findings(record, trace, calls, Explained::TimedCalls);
    }
    // A system-wide trace without scheduler events places no task's time: only its lock
    // waits can speak.
    if let Some(subject) = trace
        .subject
        .as_ref()
        .filter(|s| s.total_ns > 0 || !s.every_task)
    {
        if subject.total_ns > 0 {
            return subject_findings(record, trace, subject, Explained::Recorded);
        }
        return vec![none(
            &format!(
                "{} left no event in the trace: its {} thread{} slept (or ran without interruption) throughout, and there is nothing to explain",
                command_name(record),
                subject.unseen,
                if subject.unseen == 1 { "" } else { "s" }
            ),
            Vec::new(),
        )];
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
        explained_by: Vec::new(),
        what_if: None,
        what_if_together: None,
    }
}

/// Shares in the verdict's words: whole percents, finer below 1%.
use vmscale_stats::units::measured_share as percent;

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

/// A finding's what-if for removing the component `(kind, detail)` in `phase`.
pub(crate) fn finding_what_if(
    kind: vmscale_run::findings::ComponentKind,
    detail: &str,
    phase: String,
    prediction: vmscale_run::findings::WhatIf,
) -> vmscale_run::verdict::FindingWhatIf {
    let only_halved = kind == vmscale_run::findings::ComponentKind::OnCpu;
    vmscale_run::verdict::FindingWhatIf {
        change: if only_halved {
            "with its own on-CPU work twice as fast".into()
        } else {
            change(kind, detail)
        },
        phase,
        prediction,
        only_halved,
    }
}

/// The change that removes a component, in words.
pub(crate) fn change(kind: vmscale_run::findings::ComponentKind, detail: &str) -> String {
    match kind {
        vmscale_run::findings::ComponentKind::Lock => format!("without waits on {detail}"),
        vmscale_run::findings::ComponentKind::Runnable => {
            "with a free CPU whenever it was runnable".into()
        }
        vmscale_run::findings::ComponentKind::CrossCpu => {
            format!("without waiting for other CPUs to run {detail}")
        }
        vmscale_run::findings::ComponentKind::Asleep if detail.starts_with('(') => {
            "without its sleeps".into()
        }
        vmscale_run::findings::ComponentKind::Asleep => format!("without the sleep in {detail}"),
        vmscale_run::findings::ComponentKind::HoldingAsleep => {
            format!("without holders asleep in {detail}")
        }
        vmscale_run::findings::ComponentKind::OnCpu => "without its own on-CPU work".into(),
        vmscale_run::findings::ComponentKind::Other => {
            format!("without the unexplained time ({detail})")
        }
    }
}

/// What every strategy says of a lock as a cause: its cause (wait, spin, held across a
/// sleep), the holder line, how it was waited ("spinning on", "waiting for"), and the
/// line of evidence with its waits.
pub(crate) struct LockAsCause {
    pub cause: Cause,
    pub holder: Option<String>,
    pub how: &'static str,
    pub evidence: Option<String>,
}

pub(crate) fn lock_as_cause(trace: &TraceSection, name: &str) -> LockAsCause {
    let entry = lock_entry(trace, name);
    let (cause, holder) = lock_cause(trace, entry);
    LockAsCause {
        cause,
        holder,
        how: if cause == Cause::LockSpin {
            "spinning on"
        } else {
            "waiting for"
        },
        evidence: entry.map(|l| {
            format!(
                "{}: {} contended waits by all tasks, {} in all",
                l.name,
                l.waits.as_ref().map_or(0, |w| w.n),
                vmscale_stats::units::duration(l.total_wait_ns)
            )
        }),
    }
}
