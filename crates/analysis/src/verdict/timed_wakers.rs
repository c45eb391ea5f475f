//! Who ended a sleep of the timed samples, said as parts of it. Threads of one kind (a VM's
//! vCPU threads "vcpu0".."vcpu7", QEMU's "CPU 0/KVM".., a pool's workers) that did the same
//! thing are one waker: a pause-all wait is ended by whichever vCPU paused last, so which
//! one it was is an accident, and naming five of them at 10% each says less than "29 vcpuN
//! threads ended 97% of it". Past the first few, the rest are said together by what they
//! were doing.

use std::collections::{HashMap, HashSet};

use vmscale_run::verdict::ExplainedBy;

use crate::breakdown::without_whose_wake;
use crate::runqueue::REST_PID;
use crate::task_names::group_of;

/// Wakers (single tasks or kinds of thread) named one by one.
const NAMED_WAKERS: usize = 5;

/// The breakdown's wakers of one sleep site, merged over the phases: (pid, comm, what it
/// did) -> (the sleep they ended, how many tasks the entry stands for). Entries the
/// breakdown already said together have pid [`REST_PID`] and their first names in `comm`.
pub(super) type PhaseWakers = HashMap<(i32, String, String), (u64, u64)>;

/// One line of the answer before it is worded.
struct Entry {
    /// A task's "comm/pid", or a kind's "N vcpuN threads".
    who: Who,
    doing: String,
    ns: u64,
}

/// A member of a kind (numbered threads, or threads of one name): pid, comm, what it did,
/// the sleep it ended.
type Member<'a> = (i32, &'a str, &'a str, u64);

/// Wakers said together by what they did: the sleep they ended, how many tasks, first names.
type Group = (u64, u64, Vec<String>);

enum Who {
    Task {
        comm: String,
        pid: i32,
    },
    Kind {
        pattern: String,
        pids: HashSet<i32>,
        more: u64,
        names: Vec<String>,
    },
    Interrupt,
}

/// "woken by kworker/0:1/42, running cross-CPU call F", "woken by 29 vcpuN threads (vcpu3,
/// vcpu2, vcpu1), running", then "woken by 11 more tasks (a, b, c), running": shares of
/// `sleep_ns`, at least half a percent each.
pub(super) fn woken_by(wakers: Option<&PhaseWakers>, sleep_ns: u64) -> Vec<ExplainedBy> {
    let Some(wakers) = wakers else {
        return Vec::new();
    };
    let mut entries: Vec<Entry> = Vec::new();
    let mut kinds: HashMap<(String, String), Vec<Member>> = HashMap::new();
    let mut folded: Vec<(&str, &str, u64, u64)> = Vec::new();
    for ((pid, comm, doing), &(ns, tasks)) in wakers {
        match *pid {
            REST_PID => folded.push((comm, doing, ns, tasks)),
            0 => entries.push(Entry {
                who: Who::Interrupt,
                doing: doing.clone(),
                ns,
            }),
            // A kind of one task is said as that task, below.
            pid => kinds
                .entry((group_of(comm), without_whose_wake(doing).to_string()))
                .or_default()
                .push((pid, comm, doing, ns)),
        }
    }
    let mut kind_at: HashMap<(String, String), usize> = HashMap::new();
    for ((pattern, doing), mut members) in kinds {
        let pids: HashSet<i32> = members.iter().map(|m| m.0).collect();
        if pids.len() < 2 {
            entries.extend(members.into_iter().map(|(pid, comm, doing, ns)| Entry {
                who: Who::Task {
                    comm: comm.to_string(),
                    pid,
                },
                doing: doing.to_string(),
                ns,
            }));
            continue;
        }
        members.sort_by(|a, b| b.3.cmp(&a.3).then(a.0.cmp(&b.0)));
        // Said in full when every member did exactly the same, else without who woke each.
        let same = members.iter().all(|m| m.2 == members[0].2);
        let mut names: Vec<String> = Vec::new();
        for m in &members {
            if names.len() < 3 && !names.iter().any(|n| n == m.1) {
                names.push(m.1.to_string());
            }
        }
        kind_at.insert((pattern.clone(), doing.clone()), entries.len());
        entries.push(Entry {
            doing: if same {
                members[0].2.to_string()
            } else {
                doing
            },
            ns: members.iter().map(|m| m.3).sum(),
            who: Who::Kind {
                pattern,
                pids,
                more: 0,
                names,
            },
        });
    }
    // What the breakdown said together joins a kind when all its names are of that kind.
    let mut rest: Vec<(&str, &str, u64, u64)> = Vec::new();
    for (names, doing, ns, tasks) in folded {
        let patterns: HashSet<String> = names.split(", ").map(group_of).collect();
        let kind = match patterns.into_iter().collect::<Vec<_>>().as_slice() {
            [p] => kind_at.get(&(p.clone(), without_whose_wake(doing).to_string())),
            _ => None,
        };
        match kind.map(|&at| &mut entries[at]) {
            Some(Entry {
                who: Who::Kind { more, .. },
                ns: kind_ns,
                ..
            }) => {
                *more += tasks.max(1);
                *kind_ns += ns;
            }
            _ => rest.push((names, doing, ns, tasks)),
        }
    }
    entries.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.key().cmp(&b.key())));
    let share = |ns: u64| (ns as f64 / sleep_ns.max(1) as f64).min(1.0);
    let unnamed = entries.split_off(entries.len().min(NAMED_WAKERS));
    let mut out: Vec<ExplainedBy> = entries
        .iter()
        .map(|e| ExplainedBy {
            what: e.said(),
            share: share(e.ns),
        })
        .collect();
    // The rest, by what the wakers were doing, not by who woke each of them in turn.
    let mut groups: HashMap<&str, Group> = HashMap::new();
    for e in &unnamed {
        let group = groups.entry(without_whose_wake(&e.doing)).or_default();
        group.0 += e.ns;
        group.1 += e.tasks();
        for name in e.names() {
            if group.2.len() < 3 && !group.2.contains(&name) {
                group.2.push(name);
            }
        }
    }
    for &(names, doing, ns, tasks) in &rest {
        let group = groups.entry(without_whose_wake(doing)).or_default();
        group.0 += ns;
        group.1 += tasks.max(1);
        for name in names.split(", ").filter(|n| !n.is_empty()) {
            if group.2.len() < 3 && !group.2.iter().any(|n| n == name) {
                group.2.push(name.to_string());
            }
        }
    }
    let mut groups: Vec<(&str, Group)> = groups.into_iter().collect();
    groups.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
    out.extend(
        groups
            .into_iter()
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

impl Entry {
    fn said(&self) -> String {
        match &self.who {
            Who::Interrupt => "woken by an interrupt or timer (no task)".to_string(),
            Who::Task { comm, pid } => format!("woken by {comm}/{pid}, {}", self.doing),
            // One name for all ("cc1" of four compilers) is said as that name.
            Who::Kind { names, .. } if names.len() == 1 => {
                format!(
                    "woken by {} {} tasks, {}",
                    self.tasks(),
                    names[0],
                    self.doing
                )
            }
            Who::Kind { pattern, names, .. } => format!(
                "woken by {} {pattern} threads ({}), {}",
                self.tasks(),
                names.join(", "),
                self.doing
            ),
        }
    }

    /// How many tasks the entry stands for.
    fn tasks(&self) -> u64 {
        match &self.who {
            Who::Kind { pids, more, .. } => pids.len() as u64 + more,
            _ => 1,
        }
    }

    fn names(&self) -> Vec<String> {
        match &self.who {
            Who::Interrupt => Vec::new(),
            Who::Task { comm, .. } => vec![comm.clone()],
            Who::Kind { names, .. } => names.clone(),
        }
    }

    /// A stable order among equal shares.
    fn key(&self) -> (String, String) {
        (self.said(), self.doing.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wakers(list: &[(i32, &str, &str, u64, u64)]) -> PhaseWakers {
        list.iter()
            .map(|&(pid, comm, doing, ns, tasks)| ((pid, comm.into(), doing.into()), (ns, tasks)))
            .collect()
    }

    #[test]
    fn numbered_threads_that_did_the_same_are_one_waker() {
        let w = wakers(&[
            (11, "vcpu0", "running, itself woken by vmscale/10", 30, 0),
            (12, "vcpu1", "running, itself woken by vcpu0/11", 30, 0),
            (13, "vcpu2", "running, itself woken by vcpu1/12", 20, 0),
            (REST_PID, "vcpu3, vcpu4", "running", 15, 2),
            (20, "cc1", "running", 5, 0),
        ]);
        let said = woken_by(Some(&w), 100);
        assert_eq!(
            said[0].what,
            "woken by 5 vcpuN threads (vcpu0, vcpu1, vcpu2), running"
        );
        assert!((said[0].share - 0.95).abs() < 1e-9, "{said:?}");
        assert_eq!(said[1].what, "woken by cc1/20, running");
        assert_eq!(said.len(), 2);
    }

    #[test]
    fn threads_of_one_unnumbered_name_that_did_the_same_are_one_waker() {
        let w = wakers(&[
            (21, "vmscale", "running", 50, 0),
            (22, "vmscale", "running", 30, 0),
            (23, "vmscale", "asleep in do_nanosleep", 10, 0),
            (30, "kthreadd", "running", 10, 0),
        ]);
        let said = woken_by(Some(&w), 100);
        let what: Vec<&str> = said.iter().map(|e| e.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "woken by 2 vmscale tasks, running",
                "woken by kthreadd/30, running",
                "woken by vmscale/23, asleep in do_nanosleep",
            ]
        );
    }

    #[test]
    fn one_numbered_thread_is_named_and_a_mixed_rest_stays_apart() {
        let w = wakers(&[
            (11, "vcpu0", "running", 60, 0),
            (0, "", "an interrupt", 10, 0),
            (REST_PID, "kworker/0:1, vcpu9", "running", 20, 2),
        ]);
        let said = woken_by(Some(&w), 100);
        let what: Vec<&str> = said.iter().map(|e| e.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "woken by vcpu0/11, running",
                "woken by an interrupt or timer (no task)",
                "woken by 2 more tasks (kworker/0:1, vcpu9), running"
            ]
        );
    }

    #[test]
    fn wakers_past_the_fifth_are_said_together_by_what_they_did() {
        // Twelve unnumbered tasks each ended a twelfth of the sleep, all running.
        let names = [
            "ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay", "kid", "lark",
        ];
        let w: PhaseWakers = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    (100 + i as i32, n.to_string(), "running".to_string()),
                    (10, 0),
                )
            })
            .collect();
        let parts = woken_by(Some(&w), 120);
        assert_eq!(parts.len(), 6, "{parts:#?}");
        let said: f64 = parts.iter().map(|p| p.share).sum();
        assert!((said - 1.0).abs() < 1e-9, "{parts:#?}");
        assert!(
            parts[5].what.starts_with("woken by 7 more tasks ("),
            "{}",
            parts[5].what
        );
        assert!(parts[5].what.ends_with("), running"), "{}", parts[5].what);
        // Woken in turn by one another: still one group, not one per waker's waker.
        let w: PhaseWakers = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let doing = format!("running, itself woken by x/{}", 101 + i);
                ((100 + i as i32, n.to_string(), doing), (10, 0))
            })
            .collect();
        let parts = woken_by(Some(&w), 120);
        assert_eq!(parts.len(), 6, "{parts:#?}");
        assert!(
            parts[5].what.starts_with("woken by 7 more tasks ("),
            "{}",
            parts[5].what
        );
        assert!((parts.iter().map(|p| p.share).sum::<f64>() - 1.0).abs() < 1e-9);
    }
}
