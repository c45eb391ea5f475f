//! A wait for other CPUs said by where it was spent: each measured phase's share of the
//! timed samples' wait for one cross-CPU function (or, for a subject, each waiting task's),
//! with the system calls its IPIs were sent from. The wait is timed per phase and task,
//! not per sender, so the share is the phase's or the task's, and the senders are said as
//! their share of the IPIs, by count.

use vmscale_run::findings::{ComponentKind, IpiSyscall, SubjectPart, TraceSection};
use vmscale_run::verdict::ExplainedBy;

use super::percent;
use crate::breakdown::TIMED_SAMPLE;
use crate::task_names::group_of;

/// Phases or tasks with less of the wait than this are left to the details.
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
    trace
        .ipis
        .iter()
        .find(|p| p.label == label)
        .map_or_else(String::new, |ipis| said_senders(&ipis.by_syscall))
}

/// [`senders`]' words for IPIs counted by system call.
fn said_senders(by_syscall: &[IpiSyscall]) -> String {
    let counted: u64 = by_syscall.iter().map(|s| s.ipis).sum();
    if counted == 0 {
        return String::new();
    }
    let mut syscalls: Vec<_> = by_syscall.iter().collect();
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

/// A subject's wait for other CPUs (`part`), by the tasks that waited (threads of one name
/// together), each with the system calls the trace's IPIs were sent from, by count.
pub(super) fn subject_explained_by(trace: &TraceSection, part: &SubjectPart) -> Vec<ExplainedBy> {
    if part.total_ns == 0 {
        return Vec::new();
    }
    let mut groups: Vec<Waiting> = Vec::new();
    for task in &part.tasks {
        let name = group_of(&task.comm);
        let named = (task.pid, format!("{}/{}", task.comm, task.pid));
        match groups.iter_mut().find(|g| g.0 == name) {
            Some(g) => {
                g.1.push(named);
                g.2 += task.ns;
            }
            None => groups.push((name, vec![named], task.ns)),
        }
    }
    let calls = all_senders(trace);
    let ipis: u64 = trace.ipis.iter().map(|p| p.ipis).sum();
    let mut out: Vec<ExplainedBy> = groups
        .into_iter()
        .map(|(name, tasks, ns)| {
            // What the waiting tasks sent themselves, where the trace names the senders.
            let sent: u64 = trace
                .ipis
                .iter()
                .flat_map(|p| &p.by_sender)
                .filter(|s| tasks.iter().any(|t| t.0 == s.pid))
                .map(|s| s.ipis)
                .sum();
            let (who, they) = match tasks.as_slice() {
                [(_, task)] => (task.clone(), "it"),
                _ => (format!("{} {name} tasks", tasks.len()), "they"),
            };
            let sent = match sent {
                0 => String::new(),
                _ => format!(
                    " ({they} sent {} of the trace's {ipis} IPIs)",
                    percent(sent as f64 / ipis.max(1) as f64)
                ),
            };
            ExplainedBy {
                what: format!("{who} waiting{sent}{calls}"),
                share: (ns as f64 / part.total_ns as f64).min(1.0),
            }
        })
        .filter(|e| e.share >= MIN_PHASE_SHARE)
        .collect();
    out.sort_by(|a, b| b.share.total_cmp(&a.share).then(a.what.cmp(&b.what)));
    out
}

/// Tasks of one name that waited: the name, each task's (pid, "name/pid"), their waiting.
type Waiting = (String, Vec<(i32, String)>, u64);

/// [`senders`] over every phase of the trace.
fn all_senders(trace: &TraceSection) -> String {
    let mut by_syscall: Vec<IpiSyscall> = Vec::new();
    for s in trace.ipis.iter().flat_map(|p| &p.by_syscall) {
        match by_syscall.iter_mut().find(|b| b.syscall == s.syscall) {
            Some(b) => b.ipis += s.ipis,
            None => by_syscall.push(s.clone()),
        }
    }
    said_senders(&by_syscall)
}
