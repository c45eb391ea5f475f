//! A recorded command's tasks, or the calls a scenario timed on several threads: their
//! time split by cause.

use vmscale_run::findings::{
    ComponentKind, CpuHolder, SubjectPart, SubjectTime, TaskTime, TraceSection,
};
use vmscale_run::verdict::{Cause, ExplainedBy, Finding};
use vmscale_run::RunRecord;
use vmscale_stats::units::{duration, grouped};

use super::growth::growth;
use super::{lock_entry, none, percent, MAX_FINDINGS, MIN_SHARE};

/// A share of a recorded command's time, with the tasks that spent most of it.
struct SubjectShare<'a> {
    kind: SubjectCause,
    detail: &'a str,
    ns: u64,
    tasks: &'a [TaskTime],
    processes: &'a [TaskTime],
    /// A lock's share: its holders' sleeps while holding it (function, time, who), which
    /// `ns` includes beside the waiters' waits.
    held_asleep: Vec<(&'a str, u64, &'a [TaskTime])>,
    /// Runnable time: who held the CPUs.
    cpu_holders: &'a [CpuHolder],
    /// Sleeps: the part itself (what it waited for, who ended it).
    part: Option<&'a SubjectPart>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SubjectCause {
    Part(ComponentKind),
    /// On-CPU time split by the command's rusage.
    Kernel,
    User,
    /// On-CPU time split by the trace's own system call events, where no rusage splits
    /// it: inside the system calls it shows, and outside them (user space, or the
    /// kernel's entry and exit paths, interrupts and faults, which such a trace does not
    /// tell apart).
    InSyscalls,
    OutsideSyscalls,
}

/// The command's own code in user space is no kernel cause: the kernel's causes come first,
/// unless the user-space share is most of the time and at least twice any kernel cause,
/// when that is the answer (a computation the kernel barely touches), whatever noise the
/// run had. `shares` are (user space?, time) pairs.
fn user_space_leads(shares: &[(bool, u64)]) -> bool {
    let total: u64 = shares.iter().map(|s| s.1).sum();
    let user: u64 = shares.iter().filter(|s| s.0).map(|s| s.1).sum();
    let kernel = shares
        .iter()
        .filter(|s| !s.0)
        .map(|s| s.1)
        .max()
        .unwrap_or(0);
    total > 0 && user * 2 > total && user >= 2 * kernel
}

fn shares_ns(shares: &[SubjectShare]) -> Vec<(bool, u64)> {
    shares
        .iter()
        .map(|s| (s.kind == SubjectCause::User, s.ns))
        .collect()
}

/// A lock's share: its waiters' time as the holders' activity splits it, and its holders'
/// own sleeps under it, each as a part of the whole share.
fn lock_parts(trace: &TraceSection, s: &SubjectShare) -> Vec<vmscale_run::verdict::ExplainedBy> {
    let held: u64 = s.held_asleep.iter().map(|h| h.1).sum();
    let total = s.ns.max(1) as f64;
    let waited = (s.ns.saturating_sub(held)) as f64 / total;
    let mut parts: Vec<vmscale_run::verdict::ExplainedBy> =
        super::lock_explained_by(trace, lock_entry(trace, s.detail))
            .into_iter()
            .map(|mut e| {
                e.what = format!("waiting: {}", e.what);
                e.share *= waited;
                e
            })
            .collect();
    for (function, ns, tasks) in &s.held_asleep {
        let who: Vec<String> = tasks
            .iter()
            .map(|t| format!("{}/{}", t.comm, t.pid))
            .collect();
        parts.push(vmscale_run::verdict::ExplainedBy {
            what: format!("holding it: {} asleep in {function}", who.join(", ")),
            share: *ns as f64 / total,
        });
    }
    parts.sort_by(|a, b| b.share.total_cmp(&a.share).then(a.what.cmp(&b.what)));
    parts
}

/// "qemu-system-x86 (pid 812) 1.2 s, ...": each process by its main thread's name.
fn processes_list(processes: &[TaskTime]) -> String {
    processes
        .iter()
        .map(|p| format!("{} (pid {}) {}", p.comm, p.pid, duration(p.ns)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn tasks_list(tasks: &[TaskTime]) -> String {
    tasks
        .iter()
        .map(|t| format!("{}/{} {}", t.comm, t.pid, duration(t.ns)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The command's name as given on the command line, or the attached process's name.
pub(super) fn command_name(record: &RunRecord) -> String {
    record.knobs["command"][0]
        .as_str()
        .map(|c| c.rsplit('/').next().unwrap_or(c).to_string())
        .or_else(|| record.knobs["comm"].as_str().map(str::to_string))
        .unwrap_or_else(|| "the command".into())
}

/// What a subject's time is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Explained {
    /// A recording's tasks: a command's, a process's, or every task.
    Recorded,
    /// The calls a scenario timed on several threads, each on its thread from its start
    /// to its end.
    TimedCalls,
}

pub(super) fn subject_findings(
    record: &RunRecord,
    trace: &TraceSection,
    subject: &SubjectTime,
    explained: Explained,
) -> Vec<Finding> {
    let total = subject.total_ns;
    let command = command_name(record);
    let calls: usize = record
        .points
        .iter()
        .flat_map(|p| &p.series)
        .map(|s| s.timed_calls.len())
        .sum();
    // A sample carried out by several threads at once (teardown's holder processes) has one
    // window per thread: count samples, not windows.
    let samples: usize = record
        .points
        .iter()
        .flat_map(|p| &p.series)
        .map(|s| {
            s.timed_calls
                .iter()
                .map(|w| (w.start_ns, w.end_ns))
                .collect::<std::collections::HashSet<_>>()
                .len()
        })
        .sum();
    let per_thread = samples == calls;
    let whose = if explained == Explained::TimedCalls && per_thread {
        format!(
            "the time of {}'s {calls} timed calls on {} threads ({})",
            record.scenario,
            subject.tasks,
            duration(total)
        )
    } else if explained == Explained::TimedCalls {
        format!(
            "the time of {}'s {samples} timed samples on {} threads ({})",
            record.scenario,
            subject.tasks,
            duration(total)
        )
    } else if subject.every_task {
        format!(
            "the time of all {} traced tasks, sleeps left out ({})",
            subject.tasks,
            duration(total)
        )
    } else {
        format!(
            "the time of {command}'s {} task{} ({})",
            subject.tasks,
            if subject.tasks == 1 { "" } else { "s" },
            duration(total)
        )
    };
    // Waiting for cross-CPU calls is spinning in the kernel: system time the trace already
    // placed. The rest of the charged system time is the kernel share of on-CPU time.
    let cross_ns: u64 = subject
        .parts
        .iter()
        .filter(|p| p.kind == ComponentKind::CrossCpu)
        .map(|p| p.total_ns)
        .sum();
    let kernel_fraction = trace.command.as_ref().and_then(|usage| {
        let system = usage.system_ns.saturating_sub(cross_ns);
        let all = system + usage.user_ns;
        (all > 0).then(|| system as f64 / all as f64)
    });
    let mut shares: Vec<SubjectShare> = Vec::new();
    for part in &subject.parts {
        match (part.kind, kernel_fraction) {
            // On-CPU time in two: by the command's rusage where the kernel charged it,
            // else by the trace's own system call events where it has them.
            (ComponentKind::OnCpu, kernel) if kernel.is_some() || !part.in_syscalls.is_empty() => {
                let (first, second, of) = match kernel {
                    Some(kernel) => (
                        (
                            SubjectCause::Kernel,
                            (part.total_ns as f64 * kernel).round() as u64,
                        ),
                        SubjectCause::User,
                        None,
                    ),
                    None => (
                        (
                            SubjectCause::InSyscalls,
                            part.in_syscalls.iter().map(|c| c.ns).sum::<u64>(),
                        ),
                        SubjectCause::OutsideSyscalls,
                        Some(part),
                    ),
                };
                let first_ns = first.1.min(part.total_ns);
                for (kind, ns) in [(first.0, first_ns), (second, part.total_ns - first_ns)] {
                    shares.push(SubjectShare {
                        kind,
                        detail: "",
                        ns,
                        tasks: &part.tasks,
                        processes: &part.processes,
                        held_asleep: Vec::new(),
                        cpu_holders: &[],
                        part: of,
                    });
                }
            }
            // Across every task of a host, a sleep without a lock is idle time, left out.
            (ComponentKind::Asleep, _) if subject.every_task => {}
            // Time the trace cannot say anything of is no cause's (left out of the total).
            (ComponentKind::Other, _) => {}
            // A sleep while holding a lock others waited for is that lock's cost: one share
            // with the waits, so no finding calls the same sleep two things.
            (ComponentKind::HoldingAsleep, _) => {
                let held = (part.detail.as_str(), part.total_ns, part.tasks.as_slice());
                match shares.iter_mut().find(|s| {
                    matches!(
                        s.kind,
                        SubjectCause::Part(ComponentKind::Lock | ComponentKind::HoldingAsleep)
                    ) && s.detail == part.lock
                }) {
                    Some(lock) => {
                        lock.ns += part.total_ns;
                        lock.held_asleep.push(held);
                    }
                    None => shares.push(SubjectShare {
                        kind: SubjectCause::Part(ComponentKind::HoldingAsleep),
                        detail: &part.lock,
                        ns: part.total_ns,
                        tasks: &part.tasks,
                        processes: &part.processes,
                        held_asleep: vec![held],
                        cpu_holders: &[],
                        part: None,
                    }),
                }
            }
            (ComponentKind::Lock, _) => {
                // The lock's holders' sleeps may have come first (parts are largest first).
                match shares.iter_mut().find(|s| {
                    s.kind == SubjectCause::Part(ComponentKind::HoldingAsleep)
                        && s.detail == part.detail
                }) {
                    Some(lock) => {
                        lock.kind = SubjectCause::Part(ComponentKind::Lock);
                        lock.ns += part.total_ns;
                        lock.tasks = &part.tasks;
                        lock.processes = &part.processes;
                        lock.part = Some(part);
                    }
                    None => shares.push(SubjectShare {
                        kind: SubjectCause::Part(ComponentKind::Lock),
                        detail: &part.detail,
                        ns: part.total_ns,
                        tasks: &part.tasks,
                        processes: &part.processes,
                        held_asleep: Vec::new(),
                        cpu_holders: &[],
                        part: Some(part),
                    }),
                }
            }
            (kind, _) => shares.push(SubjectShare {
                kind: SubjectCause::Part(kind),
                detail: &part.detail,
                ns: part.total_ns,
                tasks: &part.tasks,
                processes: &part.processes,
                held_asleep: Vec::new(),
                cpu_holders: &part.cpu_holders,
                part: Some(part),
            }),
        }
    }
    let user_leads = user_space_leads(&shares_ns(&shares));
    shares.sort_by_key(|s| {
        (
            s.kind == SubjectCause::User && !user_leads,
            std::cmp::Reverse(s.ns),
        )
    });
    let cpu_used = trace.command.as_ref().map(|u| u.user_ns + u.system_ns);
    let mut findings: Vec<Finding> = shares
        .iter()
        .map(|s| (s, s.ns as f64 / total as f64))
        .filter(|&(_, share)| share >= MIN_SHARE)
        .take(MAX_FINDINGS)
        .map(|(s, share)| {
            let pct = percent(share);
            let mut evidence = Vec::new();
            if !s.processes.is_empty() {
                evidence.push(format!("by process: {}", processes_list(s.processes)));
            }
            evidence.push(format!("most of it: {}", tasks_list(s.tasks)));
            let (cause, lock, holder, summary) = match s.kind {
                SubjectCause::Part(ComponentKind::Lock | ComponentKind::HoldingAsleep) => {
                    let super::LockAsCause {
                        cause,
                        holder,
                        how,
                        evidence: waits,
                    } = super::lock_as_cause(trace, s.detail);
                    evidence.extend(waits);
                    let held_ns: u64 = s.held_asleep.iter().map(|h| h.1).sum();
                    // A sleep under the lock too small to show is counted, not said.
                    let summary = if held_ns * 200 < total {
                        format!("{pct} of {whose} went to {how} {}", s.detail)
                    } else {
                        for (function, ns, tasks) in &s.held_asleep {
                            evidence.push(format!(
                                "asleep in {function} holding {} while others waited for it: {} ({})",
                                s.detail,
                                duration(*ns),
                                tasks_list(tasks)
                            ));
                        }
                        let functions: Vec<&str> = s.held_asleep.iter().map(|h| h.0).collect();
                        format!(
                            "{pct} of {whose} went to {}: {} {how} it, and {} its holders spent asleep in {} while holding it",
                            s.detail,
                            percent((s.ns - held_ns) as f64 / total as f64),
                            percent(held_ns as f64 / total as f64),
                            functions.join(", ")
                        )
                    };
                    (cause, Some(s.detail.to_string()), holder, summary)
                }
                SubjectCause::Part(ComponentKind::CrossCpu) => {
                    let ipis: u64 = trace.ipis.iter().map(|p| p.ipis).sum();
                    if ipis > 0 {
                        evidence.push(format!("{ipis} IPIs sent by all tasks while traced"));
                    }
                    (
                        Cause::Ipi,
                        None,
                        None,
                        format!(
                            "{pct} of {whose} went to waiting for other CPUs to run {} (IPIs)",
                            s.detail
                        ),
                    )
                }
                SubjectCause::Part(ComponentKind::Runnable) => {
                    if let Some(load) = &record.background {
                        evidence.push(format!(
                            "other processes used {} of all CPU time",
                            percent(load.other_busy_fraction)
                        ));
                    }
                    if let (Some(used), Some(wall)) = (
                        cpu_used,
                        record.background.as_ref().map(|b| b.wall_ns).filter(|&w| w > 0),
                    ) {
                        evidence.push(format!(
                            "{command} used {} of CPU time in {} on {} CPUs",
                            duration(used),
                            duration(wall),
                            record.host.online_cpus
                        ));
                    }
                    (
                        Cause::CpuStarvation,
                        None,
                        None,
                        format!(
                            "{pct} of {whose} was spent runnable but not on a CPU{}",
                            super::cpu_holders::summary(s.cpu_holders, s.ns)
                        ),
                    )
                }
                SubjectCause::Part(ComponentKind::Asleep) if s.detail.starts_with('(') => (
                    Cause::Sleep,
                    None,
                    None,
                    format!(
                        "{pct} of {whose} was spent asleep, where the trace does not say (its sleeps have no stack)"
                    ),
                ),
                SubjectCause::Part(ComponentKind::Asleep) => (
                    Cause::Sleep,
                    None,
                    None,
                    format!(
                        "{pct} of {whose} was spent asleep in {}, holding no contended lock{}",
                        s.detail,
                        s.part.map(super::wakers::summary).unwrap_or_default()
                    ),
                ),
                SubjectCause::Kernel => {
                    if let Some(usage) = &trace.command {
                        evidence.push(format!(
                            "the kernel charged {command} {} of system time and {} of user time",
                            duration(usage.system_ns),
                            duration(usage.user_ns)
                        ));
                    }
                    (
                        Cause::OnCpu,
                        None,
                        None,
                        format!(
                            "{pct} of {whose} was spent running in the kernel (system time){}{}",
                            super::code_paths::not_waiting(trace),
                            super::code_paths::summary(trace, super::code_paths::Side::Kernel)
                        ),
                    )
                }
                SubjectCause::InSyscalls => {
                    let calls: u64 = s
                        .part
                        .map_or(0, |p| p.in_syscalls.iter().map(|c| c.calls).sum());
                    evidence.push(format!(
                        "system calls: from the trace's raw_syscalls events, {} calls ended; time inside one counts only while its task was on a CPU",
                        grouped(calls)
                    ));
                    (
                        Cause::OnCpu,
                        None,
                        None,
                        format!(
                            "{pct} of {whose} was spent on a CPU inside system calls{}{}",
                            syscall_summary(s),
                            super::code_paths::summary(trace, super::code_paths::Side::Kernel)
                        ),
                    )
                }
                SubjectCause::OutsideSyscalls => (
                    Cause::OnCpu,
                    None,
                    None,
                    format!(
                        "{pct} of {whose} was spent on a CPU outside the system calls the trace shows (in user space, or in the kernel's system call entry and exit, interrupts and faults: the trace does not tell these apart){}",
                        super::code_paths::summary(trace, super::code_paths::Side::User)
                    ),
                ),
                SubjectCause::User => (
                    Cause::None,
                    None,
                    None,
                    format!(
                        "{pct} of {whose} ran its own code in user space: nothing in the kernel costs it that time{}",
                        super::code_paths::summary(trace, super::code_paths::Side::User)
                    ),
                ),
                SubjectCause::Part(_) => (
                    Cause::OnCpu,
                    None,
                    None,
                    format!(
                        "{pct} of {whose} was spent on a CPU{}",
                        match super::code_paths::summary(trace, super::code_paths::Side::Both) {
                            paths if paths.is_empty() => " (kernel and user space not told apart)".to_string(),
                            paths => paths,
                        }
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
                explained_by: match (s.kind, s.part) {
                    (SubjectCause::Part(ComponentKind::Runnable), _) => {
                        super::cpu_holders::explained_by(s.cpu_holders, s.ns)
                    }
                    (SubjectCause::Part(ComponentKind::Asleep), Some(part)) => {
                        super::wakers::explained_by(part)
                    }
                    (SubjectCause::Part(ComponentKind::CrossCpu), Some(part)) => {
                        super::cross_cpu::subject_explained_by(trace, part)
                    }
                    (SubjectCause::Part(ComponentKind::Lock | ComponentKind::HoldingAsleep), _) => {
                        lock_parts(trace, s)
                    }
                    (SubjectCause::Kernel, _) => {
                        super::code_paths::explained_by(trace, super::code_paths::Side::Kernel)
                    }
                    (SubjectCause::User, _) => {
                        super::code_paths::explained_by(trace, super::code_paths::Side::User)
                    }
                    (SubjectCause::InSyscalls, Some(part)) => syscalls_explained_by(part, s.ns),
                    (SubjectCause::OutsideSyscalls, _) => {
                        super::code_paths::explained_by(trace, super::code_paths::Side::User)
                    }
                    (SubjectCause::Part(ComponentKind::OnCpu), _) => {
                        super::code_paths::explained_by(trace, super::code_paths::Side::Both)
                    }
                    _ => Vec::new(),
                },
                what_if: s.part.and_then(|p| {
                    Some(super::finding_what_if(
                        p.kind,
                        &p.detail,
                        "the timed calls".into(),
                        p.what_if?,
                    ))
                }),
                what_if_together: None,
            }
        })
        .collect();
    if findings.is_empty() {
        findings.push(none(
            &format!("no single cause takes {} of {whose}", percent(MIN_SHARE)),
            Vec::new(),
        ));
    }
    let pid = trace.command.as_ref().map_or(0, |c| c.pid);
    let attached = record.knobs["pid"].is_u64();
    let mut head = vec![if explained == Explained::TimedCalls && per_thread {
        format!(
            "subject: each of the {calls} timed calls, on the thread that made it, from its start to its end ({}), nothing the threads did between calls",
            duration(total)
        )
    } else if explained == Explained::TimedCalls {
        format!(
            "subject: each of the {samples} timed samples, on every thread of the processes that carried it out and the threads they started meanwhile, from its start to its end ({}), nothing between samples",
            duration(total)
        )
    } else if subject.every_task {
        format!(
            "subject: every task the trace shows ({}), each from its first traced event to its exit or the end of the recording ({})",
            subject.tasks,
            duration(total)
        )
    } else if attached {
        format!(
            "subject: {command} (pid {pid}): its threads and every task they created, each from its first traced event to its exit or the end of the recording ({})",
            duration(total)
        )
    } else {
        format!(
            "subject: {command} (pid {pid}) and every task it created, from their first traced event to their exit ({})",
            duration(total)
        )
    }];
    if subject.unseen > 0 {
        head.push(format!(
            "not counted: {} of its threads left no event in the trace (asleep or on a CPU throughout: the trace cannot say which)",
            subject.unseen
        ));
    }
    if subject.asleep_left_out_ns > 0 {
        head.push(format!(
            "left out: {} asleep without a contended lock (tasks with nothing to do, or waiting for an event: the trace cannot tell which)",
            duration(subject.asleep_left_out_ns)
        ));
    }
    if subject.unseen_left_out_ns > 0 {
        let tasks = subject
            .parts
            .iter()
            .find(|p| p.kind == ComponentKind::Other && p.detail == crate::timeline::UNSEEN)
            .map(|p| tasks_list(&p.tasks))
            .unwrap_or_default();
        head.push(format!(
            "left out: {} the trace cannot say anything of: tasks switched away by context switches it misses, until their next traced event ({tasks})",
            duration(subject.unseen_left_out_ns)
        ));
    }
    if subject.asleep_from_before_ns > 0 {
        head.push(format!(
            "left out: {} asleep from before a sample began until woken in it (threads with nothing to do until their turn)",
            duration(subject.asleep_from_before_ns)
        ));
    }
    if subject.joined_ns > 0 {
        head.push(format!(
            "left out: {} asleep until another of its tasks exited (waiting for its own work: {})",
            duration(subject.joined_ns),
            tasks_list(&subject.joined)
        ));
    }
    if explained == Explained::TimedCalls {
        head.splice(0..0, growth(record));
    }
    findings[0].evidence.splice(0..0, head);
    findings
}

/// ": read 52%, write 48% of it": the system calls the most on-CPU time was spent in.
fn syscall_summary(share: &SubjectShare) -> String {
    let Some(part) = share.part else {
        return String::new();
    };
    let named: Vec<String> = part
        .in_syscalls
        .iter()
        .take(3)
        .map(|c| {
            format!(
                "{} {}",
                c.name,
                vmscale_stats::units::measured_share(c.ns as f64 / share.ns.max(1) as f64)
            )
        })
        .collect();
    if named.is_empty() {
        return String::new();
    }
    format!(" ({} of it)", named.join(", "))
}

/// Each system call's share of the time spent inside them (`inside_ns`).
fn syscalls_explained_by(part: &SubjectPart, inside_ns: u64) -> Vec<ExplainedBy> {
    part.in_syscalls
        .iter()
        .map(|c| ExplainedBy {
            what: format!("{} ({} calls)", c.name, grouped(c.calls)),
            share: c.ns as f64 / inside_ns.max(1) as f64,
        })
        .collect()
}
