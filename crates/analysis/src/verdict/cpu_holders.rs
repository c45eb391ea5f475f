//! Runnable time said by who held the CPUs: the tasks that ran where the waiting tasks were
//! queued, the subject's own apart from everyone else's.

use vmscale_run::findings::CpuHolder;
use vmscale_run::verdict::ExplainedBy;

use super::percent;
use crate::runqueue::REST_PID;

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

/// The holders as parts of the runnable time, largest first.
pub(super) fn explained_by(holders: &[CpuHolder], runnable_ns: u64) -> Vec<ExplainedBy> {
    if runnable_ns == 0 {
        return Vec::new();
    }
    holders
        .iter()
        .map(|h| ExplainedBy {
            what: match h.pid {
                0 => "the CPU idle, waking up to run it".to_string(),
                -1 => "a CPU no switch was seen on".to_string(),
                REST_PID => format!("{} held the CPU", h.comm),
                _ if h.subject => format!("{}/{} (its own) held the CPU", h.comm, h.pid),
                _ => format!("{}/{} held the CPU", h.comm, h.pid),
            },
            share: (h.ns as f64 / runnable_ns as f64).min(1.0),
        })
        .collect()
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
}
