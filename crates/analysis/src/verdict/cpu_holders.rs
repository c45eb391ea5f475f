//! Runnable time said by who held the CPUs: the tasks that ran where the waiting tasks were
//! queued, the subject's own apart from everyone else's.

use std::collections::HashMap;

use vmscale_run::findings::CpuHolder;
use vmscale_run::verdict::ExplainedBy;

use super::percent;
use crate::runqueue::REST_PID;
use crate::task_names::group_of;

/// ": its CPUs ran its own tasks for 80% of it (vcpu0, vcpu3, ...) and other tasks for
/// 15% (rustc, cc1)", or nothing when no holder was seen.
pub(super) fn summary(holders: &[CpuHolder], runnable_ns: u64) -> String {
    let seen: u64 = holders.iter().map(|h| h.ns).sum();
    if seen == 0 || runnable_ns == 0 {
        return String::new();
    }
    let of = |subject: bool| -> (u64, Vec<&str>) {
        let group: Vec<&CpuHolder> = holders
            .iter()
            .filter(|h| h.subject == subject && (h.pid > 0 || h.pid == REST_PID))
            .collect();
        // Each name once: several processes' vcpu0 threads are one name here.
        let mut names: Vec<&str> = Vec::new();
        for h in group.iter().filter(|h| h.pid > 0) {
            if names.len() < 3 && !names.contains(&h.comm.as_str()) {
                names.push(h.comm.as_str());
            }
        }
        (group.iter().map(|h| h.ns).sum(), names)
    };
    let (own, own_names) = of(true);
    let (other, other_names) = of(false);
    let idle: u64 = holders.iter().filter(|h| h.pid == 0).map(|h| h.ns).sum();
    let share = |ns: u64| percent(ns as f64 / runnable_ns as f64);
    let mut parts = Vec::new();
    // " (a, b)", or nothing where only the folded rest held the CPUs.
    let listed = |names: Vec<&str>| match names.is_empty() {
        true => String::new(),
        false => format!(" ({})", names.join(", ")),
    };
    if own > 0 {
        parts.push(format!(
            "its own tasks for {} of it{}",
            share(own),
            listed(own_names)
        ));
    }
    if other > 0 {
        parts.push(format!(
            "other tasks for {}{}",
            share(other),
            listed(other_names)
        ));
    }
    if idle * 20 >= runnable_ns {
        parts.push(format!("nothing for {} (the CPU waking up)", share(idle)));
    }
    if parts.is_empty() {
        return String::new();
    }
    format!(": the CPUs it waited for ran {}", parts.join(", "))
}

/// Holders of one numbered kind: their pids, their time and their first names.
type Kind<'a> = (Vec<i32>, u64, Vec<&'a str>);

/// The holders as parts of the runnable time, largest first. Threads of one name, or
/// numbered threads of one kind (a VM's "vcpu0".."vcpu7"), are one part: which of a VM's
/// vCPU threads held the CPU at a given moment is the scheduler's accident; that the VM's
/// vCPUs held it is the mechanism.
pub(super) fn explained_by(holders: &[CpuHolder], runnable_ns: u64) -> Vec<ExplainedBy> {
    if runnable_ns == 0 {
        return Vec::new();
    }
    // (kind, its own?) -> the pids, their time and their first names.
    let mut kinds: HashMap<(String, bool), Kind> = HashMap::new();
    for h in holders.iter().filter(|h| h.pid > 0) {
        let e = kinds.entry((group_of(&h.comm), h.subject)).or_default();
        if !e.0.contains(&h.pid) {
            e.0.push(h.pid);
        }
        e.1 += h.ns;
        if e.2.len() < 3 && !e.2.contains(&h.comm.as_str()) {
            e.2.push(&h.comm);
        }
    }
    kinds.retain(|_, (pids, _, _)| pids.len() > 1);
    let share = |ns: u64| (ns as f64 / runnable_ns as f64).min(1.0);
    let mut out: Vec<(u64, ExplainedBy)> = holders
        .iter()
        .filter(|h| h.pid <= 0 || !kinds.contains_key(&(group_of(&h.comm), h.subject)))
        .map(|h| {
            let what = match h.pid {
                0 => "the CPU idle, waking up to run it".to_string(),
                -1 => "a CPU no switch was seen on".to_string(),
                REST_PID => format!("{} held the CPU", h.comm),
                _ if h.subject => format!("{}/{} (its own) held the CPU", h.comm, h.pid),
                _ => format!("{}/{} held the CPU", h.comm, h.pid),
            };
            (
                h.ns,
                ExplainedBy {
                    what,
                    share: share(h.ns),
                },
            )
        })
        .collect();
    out.extend(
        kinds
            .into_iter()
            .map(|((kind, subject), (pids, ns, names))| {
                // One name for all ("cc1" of four compilers) is said as that name.
                let what = match (names.as_slice(), subject) {
                    ([name], true) => format!("{} {name} tasks (its own) held the CPU", pids.len()),
                    ([name], false) => format!("{} {name} tasks held the CPU", pids.len()),
                    (_, true) => format!(
                        "{} {kind} threads (its own) held the CPU ({})",
                        pids.len(),
                        names.join(", ")
                    ),
                    (_, false) => format!(
                        "{} {kind} threads held the CPU ({})",
                        pids.len(),
                        names.join(", ")
                    ),
                };
                (
                    ns,
                    ExplainedBy {
                        what,
                        share: share(ns),
                    },
                )
            }),
    );
    // Under half a percent is left to the details, as a lock's holders are ("0% x held
    // the CPU" on the first screen says nothing).
    out.retain(|(_, e)| e.share >= 0.005);
    out.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.what.cmp(&b.1.what)));
    out.into_iter().map(|(_, e)| e).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(comm: &str, pid: i32, ns: u64, subject: bool) -> CpuHolder {
        CpuHolder {
            comm: comm.into(),
            pid,
            ns,
            subject,
        }
    }

    #[test]
    fn each_name_is_said_once_and_a_folded_rest_has_no_empty_list() {
        let holders = [
            held("vcpu0", 10, 40, true),
            held("kvm-nx-lpage-re", 11, 30, true),
            held("vcpu0", 12, 20, true),
            held("5 more tasks", REST_PID, 10, false),
        ];
        assert_eq!(
            summary(&holders, 100),
            ": the CPUs it waited for ran its own tasks for 90% of it (vcpu0, kvm-nx-lpage-re), \
             other tasks for 10%"
        );
    }

    #[test]
    fn numbered_threads_of_one_kind_hold_the_cpu_as_one_part() {
        let holders = [
            held("vcpu0", 10, 30, true),
            held("vcpu1", 11, 25, true),
            held("cc1", 20, 20, false),
            held("vcpu2", 12, 15, true),
            held("kworker/0:1", 30, 5, false),
            held("cc1", 21, 5, false),
        ];
        let said: Vec<(String, f64)> = explained_by(&holders, 100)
            .into_iter()
            .map(|e| (e.what, e.share))
            .collect();
        assert_eq!(
            said,
            [
                (
                    "3 vcpuN threads (its own) held the CPU (vcpu0, vcpu1, vcpu2)".to_string(),
                    0.7
                ),
                ("2 cc1 tasks held the CPU".to_string(), 0.25),
                ("kworker/0:1/30 held the CPU".to_string(), 0.05),
            ]
        );
    }

    #[test]
    fn threads_of_one_unnumbered_name_hold_the_cpu_as_one_part() {
        let holders = [
            held("storm-writer", 10, 48, false),
            held("storm-writer", 12, 47, false),
            held("trace-cpu0", 30, 5, true),
        ];
        let said: Vec<(String, f64)> = explained_by(&holders, 100)
            .into_iter()
            .map(|e| (e.what, e.share))
            .collect();
        assert_eq!(
            said,
            [
                ("2 storm-writer tasks held the CPU".to_string(), 0.95),
                ("trace-cpu0/30 (its own) held the CPU".to_string(), 0.05),
            ]
        );
    }
}
