//! A sleep said by what it waited for and who ended it: "waiting for a workqueue's workers
//! to finish queued work: woken by kworker/0:2, which ran irqfd_shutdown (kvm-irqfd-cleanup)
//! for 80% of it"; where the waker is one of the subject's tasks and was itself asleep
//! meanwhile, that next link of the chain too ("woken by writer/12, itself asleep in
//! do_nanosleep (waiting for a timer) for 95% of it").

use vmscale_run::findings::{ComponentKind, SleepWaker, SubjectPart, WakerMeanwhile, WorkRan};
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
            out.push_str(&others_work(ran, first.ns));
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

/// ", 52% of it on items other tasks queued (irqfd1/12)": a flush waits for everything
/// queued before it, so a thread can wait for its siblings' work; said from a tenth of the
/// sleeps the waker ended.
fn others_work(ran: &WorkRan, ended_ns: u64) -> String {
    let share = (ran.queued_by_others_ns as f64 / ended_ns.max(1) as f64).min(1.0);
    if share < 0.1 {
        return String::new();
    }
    format!(
        ", {} of it on items other tasks queued ({})",
        percent(share),
        ran.queued_by_others.join(", ")
    )
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
            // The work's share of the sleeps it ended: a grace period's worker runs for a
            // sliver of the wait it ends (the rest is the grace period itself).
            what: match w.ran.first() {
                Some(ran) => format!(
                    "woken by {}, which ran {}{} for {} of it{}{}",
                    who(w),
                    ran.function,
                    on_queue(&ran.workqueue),
                    percent((ran.ns as f64 / w.ns.max(1) as f64).min(1.0)),
                    others_work(ran, w.ns),
                    itself_asleep(w)
                ),
                None => format!("woken by {}{}", who(w), itself_asleep(w)),
            },
            share: (w.ns as f64 / part.total_ns.max(1) as f64).min(1.0),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flush(others_ns: u64) -> SubjectPart {
        SubjectPart {
            in_syscalls: Vec::new(),
            kind: ComponentKind::Asleep,
            detail: "__flush_workqueue in kvm_irqfd".into(),
            lock: String::new(),
            total_ns: 100,
            tasks: Vec::new(),
            processes: Vec::new(),
            cpu_holders: Vec::new(),
            waits_for: "a workqueue's workers to finish queued work".into(),
            woken_by: vec![SleepWaker {
                comm: "2 kvm-irqfd-cleanup workers (kworker/0:1, kworker/1:2)".into(),
                pid: -2,
                tasks: 2,
                ns: 80,
                ran: vec![WorkRan {
                    function: "irqfd_shutdown".into(),
                    workqueue: "kvm-irqfd-cleanup".into(),
                    ns: 76,
                    queued_by_others_ns: others_ns,
                    queued_by_others: vec!["irqfd1/12".into()],
                }],
                meanwhile: Vec::new(),
            }],
            what_if: None,
        }
    }

    #[test]
    fn a_flush_says_whose_work_it_waited_for() {
        let said = summary(&flush(40));
        assert!(
            said.ends_with(
                "; 2 kvm-irqfd-cleanup workers (kworker/0:1, kworker/1:2) ended 80% of it, \
                 running irqfd_shutdown (workqueue kvm-irqfd-cleanup) for 95% of the sleeps \
                 they ended, 50% of it on items other tasks queued (irqfd1/12)"
            ),
            "{said}"
        );
        let made_of = &explained_by(&flush(40))[0].what;
        assert!(
            made_of.contains(
                "which ran irqfd_shutdown (workqueue kvm-irqfd-cleanup) for 95% of it, 50% of it on items other tasks queued"
            ),
            "{made_of}"
        );
        // Below a tenth, the sleeper's own work: not said.
        assert!(!summary(&flush(7)).contains("other tasks queued"));
    }
}
