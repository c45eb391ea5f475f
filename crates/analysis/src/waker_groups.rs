//! A sleep's wakers said by mechanism before by task: the kernel workers of one workqueue
//! that ran one work function are one waker ("4 kvm-irqfd-cleanup workers (kworker/1:442,
//! ...)"), because a workqueue hands each item to whichever of its workers is free, so the
//! pid that ended a given sleep is an accident; past the first few, the rest are said
//! together. Without this, a flush that a dozen short-lived workers ended in turn reads as
//! five unrelated tasks with a few percent each, and most of the sleep goes unsaid.

use std::collections::HashMap;

use vmscale_run::findings::{SleepWaker, WakerMeanwhile, WorkRan};

use crate::runqueue::REST_PID;

/// Workers merged by (workqueue, work function), then the `named` largest kept and the
/// rest folded into one "N more tasks" entry.
pub(crate) fn fold(wakers: Vec<SleepWaker>, named: usize) -> Vec<SleepWaker> {
    let mut out: Vec<SleepWaker> = Vec::new();
    let mut pools: HashMap<(String, String), Vec<SleepWaker>> = HashMap::new();
    for w in wakers {
        match w
            .ran
            .first()
            .filter(|r| !r.workqueue.is_empty() && w.pid > 0)
        {
            Some(r) => pools
                .entry((r.workqueue.clone(), r.function.clone()))
                .or_default()
                .push(w),
            None => out.push(w),
        }
    }
    for ((workqueue, _), mut pool) in pools {
        if pool.len() == 1 {
            out.extend(pool.pop());
            continue;
        }
        let label = format!("{} {workqueue} workers", pool.len());
        out.push(merge(pool, label));
    }
    out.sort_by(|a, b| {
        b.ns.cmp(&a.ns)
            .then(a.pid.cmp(&b.pid))
            .then(a.comm.cmp(&b.comm))
    });
    if out.len() > named + 1 {
        let rest = out.split_off(named);
        let label = format!("{} more tasks", rest.iter().map(tasks).sum::<u64>());
        out.push(merge(rest, label));
    }
    out
}

/// How many tasks an entry stands for.
fn tasks(w: &SleepWaker) -> u64 {
    w.tasks.max(1)
}

/// One entry for several wakers: "LABEL (a, b, c)", their sleeps, work and doings summed.
fn merge(mut group: Vec<SleepWaker>, label: String) -> SleepWaker {
    // The wakers come in whatever order the tasks were kept in: the names said, and the
    // queuers kept, are the largest wakers' and the same on every reading of a trace.
    group.sort_by(|a, b| {
        b.ns.cmp(&a.ns)
            .then(a.pid.cmp(&b.pid))
            .then(a.comm.cmp(&b.comm))
    });
    let mut names: Vec<&str> = Vec::new();
    for w in &group {
        let name = w.comm.as_str();
        if names.len() < 3 && w.pid > 0 && !names.contains(&name) {
            names.push(name);
        }
    }
    let comm = if names.is_empty() {
        label
    } else {
        format!("{label} ({})", names.join(", "))
    };
    let mut ran: HashMap<(String, String), WorkRan> = HashMap::new();
    let mut meanwhile: HashMap<(vmscale_run::findings::ComponentKind, String, String), u64> =
        HashMap::new();
    let (mut ns, mut count) = (0, 0);
    for w in &group {
        ns += w.ns;
        count += tasks(w);
        for r in &w.ran {
            let sum = ran
                .entry((r.function.clone(), r.workqueue.clone()))
                .or_insert_with(|| WorkRan {
                    function: r.function.clone(),
                    workqueue: r.workqueue.clone(),
                    ns: 0,
                    queued_by_others_ns: 0,
                    queued_by_others: Vec::new(),
                });
            sum.ns += r.ns;
            sum.queued_by_others_ns += r.queued_by_others_ns;
            for task in &r.queued_by_others {
                if sum.queued_by_others.len() < 3 && !sum.queued_by_others.contains(task) {
                    sum.queued_by_others.push(task.clone());
                }
            }
        }
        for m in &w.meanwhile {
            *meanwhile
                .entry((m.kind, m.detail.clone(), m.waits_for.clone()))
                .or_default() += m.ns;
        }
    }
    let mut ran: Vec<WorkRan> = ran.into_values().collect();
    ran.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.function.cmp(&b.function)));
    let mut meanwhile: Vec<WakerMeanwhile> = meanwhile
        .into_iter()
        .map(|((kind, detail, waits_for), ns)| WakerMeanwhile {
            kind,
            detail,
            waits_for,
            ns,
        })
        .collect();
    meanwhile.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.detail.cmp(&b.detail)));
    SleepWaker {
        comm,
        pid: REST_PID,
        tasks: count,
        ns,
        ran,
        meanwhile,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(pid: i32, ns: u64, function: &str, workqueue: &str) -> SleepWaker {
        SleepWaker {
            comm: format!("kworker/0:{pid}"),
            pid,
            tasks: 0,
            ns,
            ran: vec![WorkRan {
                function: function.into(),
                workqueue: workqueue.into(),
                ns: ns * 9 / 10,
                queued_by_others_ns: ns / 2,
                queued_by_others: vec![format!("t{pid}")],
            }],
            meanwhile: Vec::new(),
        }
    }

    fn task(pid: i32, ns: u64) -> SleepWaker {
        SleepWaker {
            comm: format!("t{pid}"),
            pid,
            tasks: 0,
            ns,
            ran: Vec::new(),
            meanwhile: Vec::new(),
        }
    }

    #[test]
    fn workers_of_one_queue_and_function_are_one_waker() {
        let mut wakers: Vec<SleepWaker> = (1..=6)
            .map(|pid| worker(pid, 10, "irqfd_shutdown", "kvm-irqfd-cleanup"))
            .collect();
        wakers.push(worker(7, 30, "other_fn", "events"));
        wakers.push(task(8, 25));
        let folded = fold(wakers, 5);
        assert_eq!(folded.len(), 3);
        assert_eq!(folded[0].ns, 60);
        assert_eq!(folded[0].tasks, 6);
        assert!(
            folded[0]
                .comm
                .starts_with("6 kvm-irqfd-cleanup workers (kworker/0:"),
            "{}",
            folded[0].comm
        );
        assert_eq!(folded[0].ran[0].function, "irqfd_shutdown");
        assert_eq!(folded[0].ran[0].ns, 54);
        assert_eq!(folded[0].ran[0].queued_by_others_ns, 30);
        assert_eq!(folded[0].ran[0].queued_by_others.len(), 3);
        // A lone worker keeps its own name.
        assert_eq!(folded[1].pid, 7);
        assert_eq!(folded.iter().map(|w| w.ns).sum::<u64>(), 115);
    }

    #[test]
    fn a_group_is_said_the_same_whatever_order_its_wakers_came_in() {
        let wakers: Vec<SleepWaker> = [(4, 10), (9, 40), (2, 20), (7, 40), (5, 30)]
            .iter()
            .map(|&(pid, ns)| worker(pid, ns, "process_srcu", "rcu_gp"))
            .collect();
        let mut reversed = wakers.clone();
        reversed.reverse();
        let (a, b) = (fold(wakers, 5), fold(reversed, 5));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        // The largest wakers are the ones named, ties by pid.
        assert_eq!(
            a[0].comm,
            "5 rcu_gp workers (kworker/0:7, kworker/0:9, kworker/0:5)"
        );
        assert_eq!(a[0].ran[0].queued_by_others, ["t7", "t9", "t5"]);
    }

    #[test]
    fn the_rest_past_the_named_is_said_together_and_nothing_is_lost() {
        let wakers: Vec<SleepWaker> = (1..=9).map(|pid| task(pid, 100 - pid as u64)).collect();
        let total: u64 = wakers.iter().map(|w| w.ns).sum();
        let folded = fold(wakers, 5);
        assert_eq!(folded.len(), 6);
        assert_eq!(folded[5].tasks, 4);
        assert!(
            folded[5].comm.starts_with("4 more tasks (t6, t7, t8)"),
            "{}",
            folded[5].comm
        );
        assert_eq!(folded.iter().map(|w| w.ns).sum::<u64>(), total);
        // One past the named is named, not folded into "1 more task".
        assert_eq!(fold((1..=6).map(|p| task(p, 10)).collect(), 5).len(), 6);
    }
}
