//! A sleep said by what it waited for and who ended it: "waiting for a workqueue's workers
//! to finish queued work: woken by kworker/0:2, which ran irqfd_shutdown (kvm-irqfd-cleanup)
//! for 80% of it"; where the waker is one of the subject's tasks and was itself asleep
//! meanwhile, that next link of the chain too ("woken by writer/12, itself asleep in
//! do_nanosleep (waiting for a timer) for 95% of it").

use vmscale_run::findings::{ComponentKind, SleepWaker, SubjectPart, WakerMeanwhile};
use vmscale_run::verdict::ExplainedBy;

use super::percent;

/// ", waiting for X: woken by W, which ran F for N% of it", or what of it the trace says.
pub(super) fn summary(part: &SubjectPart) -> String {
    let mut out = String::new();
    if !part.waits_for.is_empty() {
        out.push_str(&format!(", waiting for {}", part.waits_for));
    }
    if let Some(first) = part.woken_by.first() {
        let share = first.ns as f64 / part.total_ns.max(1) as f64;
        out.push_str(&format!(
            "{} {} ended {} of it",
            if part.waits_for.is_empty() { ":" } else { ";" },
            who(first),
            percent(share.min(1.0))
        ));
        if let Some(ran) = first.ran.first() {
            out.push_str(&format!(
                ", running {}{} for {} of the sleeps {} ended",
                ran.function,
                on_queue(&ran.workqueue),
                percent((ran.ns as f64 / first.ns.max(1) as f64).min(1.0)),
                if first.tasks > 1 { "they" } else { "it" }
            ));
        }
        out.push_str(&itself_asleep(first));
    }
    out
}

/// ", itself asleep in S (waiting for K) for N% and runnable for M% of it": what the
/// waker, one of the subject's tasks, did while the sleeps it ended went on, its two main
/// activities where each is at least a tenth of those sleeps.
fn itself_asleep(waker: &SleepWaker) -> String {
    let said: Vec<String> = waker
        .meanwhile
        .iter()
        .map(|m| (m, (m.ns as f64 / waker.ns.max(1) as f64).min(1.0)))
        .filter(|(_, share)| *share >= 0.1)
        .take(2)
        .map(|(m, share)| format!("{} for {}", doing(m), percent(share)))
        .collect();
    if said.is_empty() {
        return String::new();
    }
    format!(", itself {} of it", said.join(" and "))
}

/// One activity of a waker, as a phrase after "itself".
fn doing(m: &WakerMeanwhile) -> String {
    let waiting_for = if m.waits_for.is_empty() {
        String::new()
    } else {
        format!(" (waiting for {})", m.waits_for)
    };
    match m.kind {
        ComponentKind::Asleep => format!("asleep in {}{waiting_for}", m.detail),
        ComponentKind::HoldingAsleep => {
            format!(
                "asleep in {}{waiting_for} holding a contended lock",
                m.detail
            )
        }
        ComponentKind::Runnable => "runnable (waiting for a CPU)".to_string(),
        ComponentKind::OnCpu => "on a CPU".to_string(),
        ComponentKind::Lock => format!("waiting for {}", m.detail),
        ComponentKind::CrossCpu => format!("waiting for other CPUs to run {}", m.detail),
        other => other.label().to_string(),
    }
}

fn on_queue(workqueue: &str) -> String {
    if workqueue.is_empty() {
        String::new()
    } else {
        format!(" (workqueue {workqueue})")
    }
}

fn who(waker: &SleepWaker) -> String {
    if waker.tasks > 1 {
        waker.comm.clone()
    } else if waker.pid == 0 {
        "an interrupt or timer (no task)".to_string()
    } else {
        format!("{}/{}", waker.comm, waker.pid)
    }
}

/// The wakers as parts of the sleep, each with its main work item.
pub(super) fn explained_by(part: &SubjectPart) -> Vec<ExplainedBy> {
    part.woken_by
        .iter()
        .map(|w| ExplainedBy {
            what: match w.ran.first() {
                Some(ran) => format!(
                    "woken by {}, which ran {}{}{}",
                    who(w),
                    ran.function,
                    on_queue(&ran.workqueue),
                    itself_asleep(w)
                ),
                None => format!("woken by {}{}", who(w), itself_asleep(w)),
            },
            share: (w.ns as f64 / part.total_ns.max(1) as f64).min(1.0),
        })
        .collect()
}
