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

use std::collections::HashMap;

use vmscale_run::findings::{ComponentKind, LockHolders, SubjectTime, TaskTime, TraceSection};
use vmscale_run::verdict::{Cause, Finding};
use vmscale_run::{LockContention, RunRecord};
use vmscale_stats::units::duration;

use vmscale_stats::fit::Model;

use crate::breakdown::TIMED_SAMPLE;

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
        return crate::vmm::findings(record, trace, timed);
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

/// Where an operation has two clocks, the VMM's (the caller's time) and the guests' (each
/// vCPU's stall from its TSC log), the difference is said and attributed: per pausing
/// series with a `<name> guest stall` sibling, at the largest N, the stall's part after
/// the VMM's resume returned, and where the released vCPU threads spent it (the trace's
/// [`TraceSection::vcpu_resume`]).
fn two_clocks(record: &RunRecord) -> Vec<Finding> {
    let Some(point) = record.points.last() else {
        return Vec::new();
    };
    let sweep = &record.sweep;
    let mut findings = Vec::new();
    for stall in point
        .series
        .iter()
        .filter(|s| s.name.ends_with(" guest stall"))
    {
        let name = stall.name.trim_end_matches(" guest stall");
        let (Some(vmm), Some(guest)) = (
            point
                .series
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| s.summary.as_ref()),
            stall.summary.as_ref(),
        ) else {
            continue;
        };
        let phase_p50 = |phase: &str| {
            stall
                .phases
                .iter()
                .find(|p| p.name == phase)
                .and_then(|p| p.summary.as_ref())
                .map_or(0, |s| s.p50_ns)
        };
        let phase_mean = |phase: &str| {
            stall
                .phases
                .iter()
                .find(|p| p.name == phase)
                .and_then(|p| p.summary.as_ref())
                .map_or(0.0, |s| s.mean_ns)
        };
        let whole = ["until release", "until thread ran", "into guest"]
            .iter()
            .map(|p| phase_mean(p))
            .sum::<f64>();
        let after = phase_mean("until thread ran") + phase_mean("into guest");
        let share = if whole > 0.0 { after / whole } else { 0.0 };
        let resume = record.trace.as_ref().and_then(|t| t.vcpu_resume.as_ref());
        let (cause, attributed) = match resume.filter(|r| r.total_ns > 0) {
            Some(r) => {
                let cause = match r.parts.first().map(|p| p.kind) {
                    Some(ComponentKind::Runnable) => Cause::CpuStarvation,
                    Some(ComponentKind::Lock) => Cause::LockWait,
                    Some(ComponentKind::Asleep) => Cause::Sleep,
                    Some(ComponentKind::CrossCpu) => Cause::Ipi,
                    Some(_) => Cause::OnCpu,
                    None => Cause::None,
                };
                let parts: Vec<String> = r
                    .parts
                    .iter()
                    .take(3)
                    .map(|p| {
                        let what = match p.kind {
                            ComponentKind::Runnable => "runnable without a CPU".to_string(),
                            ComponentKind::OnCpu => "on a CPU".to_string(),
                            ComponentKind::Asleep if p.detail.starts_with('(') => {
                                "asleep, not yet woken".to_string()
                            }
                            ComponentKind::Asleep => format!("asleep in {}", p.detail),
                            ComponentKind::Lock => format!("waiting for {}", p.detail),
                            ComponentKind::CrossCpu => {
                                format!("waiting for other CPUs to run {}", p.detail)
                            }
                            ComponentKind::Other => p.detail.clone(),
                        };
                        format!("{} {what}", percent(p.total_ns as f64 / r.total_ns as f64))
                    })
                    .collect();
                (
                    cause,
                    format!(" (the trace, over every point: {})", parts.join(", ")),
                )
            }
            None => (Cause::None, String::new()),
        };
        let mut evidence = vec![
            format!(
                "{name} at {sweep}={}: VMM clock p50 {} (the caller, from the kick until its resume returned), guest clock p50 {} per vCPU ({} vCPU stalls)",
                point.n,
                duration(vmm.p50_ns),
                duration(guest.p50_ns),
                guest.n
            ),
            format!(
                "guest stall p50 by part: {} until the release, {} until the vCPU thread entered KVM_RUN, {} into the guest",
                duration(phase_p50("until release")),
                duration(phase_p50("until thread ran")),
                duration(phase_p50("into guest"))
            ),
        ];
        if let Some(r) = resume {
            evidence.push(format!(
                "released vCPU threads traced until KVM_RUN: {} in all, over {} threads",
                duration(r.total_ns),
                r.tasks
            ));
        }
        if point.vcpus_per_host_cpu >= 1.0 {
            evidence.push(format!(
                "{:.1} vCPUs per host CPU, and the VMM's thread competes with them",
                point.vcpus_per_host_cpu
            ));
        }
        let tail = format!(
            "{} of the stall came after the release, on average {} waking and getting a CPU{attributed} and {} re-entering the guest",
            percent(share),
            duration(phase_mean("until thread ran") as u64),
            duration(phase_mean("into guest") as u64),
        );
        let summary = if guest.p50_ns > vmm.p50_ns {
            format!(
                "{name}: the guests stay stalled after the VMM's resume returns: at {sweep}={} each vCPU lost p50 {} against the VMM's p50 {}; {tail}",
                point.n,
                duration(guest.p50_ns),
                duration(vmm.p50_ns),
            )
        } else {
            format!(
                "{name}: the VMM's clock runs longer than the guests' stall: at {sweep}={} its resume returned after p50 {} while each vCPU lost p50 {}, so the caller's own time after the release (its causes above) is what differs; {tail}",
                point.n,
                duration(vmm.p50_ns),
                duration(guest.p50_ns),
            )
        };
        findings.push(Finding {
            summary,
            cause,
            lock: None,
            holder: None,
            share,
            evidence,
        });
    }
    findings
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
    }
}

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

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

fn is_spinning(kind: &str) -> bool {
    kind == "spinlock" || kind == "rwlock"
}

/// The cause of waiting on a lock, and the holder as the trace shows it.
fn lock_cause(trace: &TraceSection, lock: Option<&LockContention>) -> (Cause, Option<String>) {
    let Some(lock) = lock else {
        return (Cause::LockWait, None);
    };
    if is_spinning(&lock.kind) {
        // A spinning waiter is never woken by its holder: the trace cannot name it.
        return (Cause::LockSpin, None);
    }
    let Some(holders) = holders_of(trace, lock.lock_addr) else {
        return (Cause::LockWait, None);
    };
    let across_sleep: u64 = holders
        .held_across_sleep
        .iter()
        .map(|h| h.waiter_wait_ns)
        .sum();
    if let Some(worst) = holders.held_across_sleep.first() {
        if holders.total_wait_ns > 0 && across_sleep * 2 >= holders.total_wait_ns {
            return (
                Cause::HeldAcrossSleep,
                Some(format!(
                    "{}/{} slept in {} while holding it ({} of {} waiters' time behind such holds)",
                    worst.holder_comm,
                    worst.holder_pid,
                    worst.function,
                    percent(across_sleep as f64 / holders.total_wait_ns as f64),
                    duration(holders.total_wait_ns)
                )),
            );
        }
    }
    let holder = holders.holders.first().map(|h| {
        let doing = h
            .activity
            .first()
            .map(|a| {
                let share = if h.waited_behind_ns > 0 {
                    a.wait_ns as f64 / h.waited_behind_ns as f64
                } else {
                    0.0
                };
                let what = match a.detail.as_str() {
                    "" => a.activity.label().to_string(),
                    detail => format!("{} ({detail})", a.activity.label()),
                };
                format!(", {what} for {} of the waiting behind it", percent(share))
            })
            .unwrap_or_default();
        let doing = if h.ipis_sent > 0 {
            format!(
                "{doing}, and sent {} while waiters queued",
                vmscale_stats::units::plural(h.ipis_sent, "IPI")
            )
        } else {
            doing
        };
        if holders.exact_holds {
            // Every acquisition and release was traced: the holds are the kernel's.
            let holds = vmscale_stats::units::plural(h.holds, "hold");
            let how = match h.shared_holds {
                0 => format!("for writing in {holds}"),
                n if n == h.holds => {
                    format!("for reading (shared with any other readers) in {holds}")
                }
                n => format!("in {holds}, {n} of them for reading (shared)"),
            };
            format!(
                "{}/{} held it {how}; every acquisition and release was traced (mmap_lock events){doing}",
                h.comm, h.pid
            )
        } else if h.shared_holds > 0 {
            // A read hold is shared: other readers may have held it too, unseen.
            format!(
                "{}/{} was among the readers holding it ({} of {} holds shared), so no single holder is named{doing}",
                h.comm, h.pid, h.shared_holds, h.holds
            )
        } else {
            format!("{}/{} held it in {} holds{doing}", h.comm, h.pid, h.holds)
        }
    });
    // Another holder that sent cross-CPU calls while waiters queued is part of the story
    // even when its holds were not the longest.
    let senders = holders
        .holders
        .iter()
        .skip(1)
        .filter(|h| h.ipis_sent > 0)
        .max_by_key(|h| h.ipis_sent)
        .map(|h| {
            format!(
                "{}/{} sent {} in its {} while waiters queued",
                h.comm,
                h.pid,
                vmscale_stats::units::plural(h.ipis_sent, "IPI"),
                vmscale_stats::units::plural(h.holds, "hold")
            )
        });
    let holder = match (holder, senders) {
        (Some(first), Some(sender)) => Some(format!("{first}; {sender}")),
        (first, sender) => first.or(sender),
    };
    (Cause::LockWait, holder)
}

/// How each timed series' median grows with N: the best-fitting model (constant, linear,
/// USL) when the run measured three or more N, with the cost of one more unit of N at the
/// largest and the fit's prediction at twice it; else the two medians it has.
fn growth(record: &RunRecord) -> Vec<String> {
    let Some(first) = record.points.first() else {
        return Vec::new();
    };
    if record.points.len() < 2 {
        return Vec::new();
    }
    let sweep = &record.sweep;
    first
        .series
        .iter()
        .filter(|s| !s.sample_start_ns.is_empty() || !s.timed_calls.is_empty())
        .filter_map(|s| {
            let medians: Vec<(f64, f64)> = record
                .points
                .iter()
                .filter_map(|p| {
                    let summary = p.series.iter().find(|l| l.name == s.name)?.summary.as_ref()?;
                    Some((p.n as f64, summary.p50_ns as f64))
                })
                .collect();
            let (&(n0, p0), &(n1, p1)) = (medians.first()?, medians.last()?);
            let measured = format!(
                "p50 {} at {sweep}={n0} -> {} at {sweep}={n1}",
                duration(p0 as u64),
                duration(p1 as u64)
            );
            if medians.len() < 3 {
                return Some(format!("{}: {measured}", s.name));
            }
            let selection = vmscale_stats::fit::select(&medians);
            let best = selection.best()?;
            let unsure = if selection.distinguishable {
                ""
            } else {
                "; the data barely tell it from the next model"
            };
            let twice = 2.0 * n1;
            let slope = best.slope_at(n1);
            let per = duration(slope.abs() as u64);
            let fit = match best.model {
                Model::Constant => "constant",
                Model::Linear => "Amdahl",
                Model::Usl => "USL",
            };
            // The words follow the fitted curve's shape at the largest N, so a cost that
            // falls as N grows is never called growth.
            let how = match best.model {
                Model::Constant => format!("does not grow with {sweep} (constant fit{unsure})"),
                _ if slope < 0.0 => format!(
                    "falls as {sweep} grows ({fit} fit{unsure}), {per} less per {sweep} at {n1}"
                ),
                Model::Usl if best.kappa > 0.0 => format!(
                    "grows faster than linearly with {sweep} (USL fit{unsure}), {per} more per {sweep} at {n1}"
                ),
                Model::Usl => format!(
                    "grows slower than linearly with {sweep} (USL fit{unsure}), {per} more per {sweep} at {n1}"
                ),
                Model::Linear => format!(
                    "grows linearly with {sweep} (Amdahl fit{unsure}), {per} more per {sweep} at {n1}"
                ),
            };
            let predicted = best.predict(twice);
            let prediction = if predicted > 0.0 {
                format!("{} predicted at {sweep}={twice}", duration(predicted as u64))
            } else {
                format!("the fit does not extrapolate to {sweep}={twice} (it falls below zero)")
            };
            Some(format!("{}: {measured}; {how}; {prediction}", s.name))
        })
        .collect()
}

fn timed_findings(record: &RunRecord, trace: &TraceSection) -> Vec<Finding> {
    let mut total = 0u64;
    let mut samples = 0u64;
    let mut parts: HashMap<(ComponentKind, String), u64> = HashMap::new();
    for op in trace
        .breakdown
        .iter()
        .flat_map(|p| &p.operations)
        .filter(|op| op.syscall == TIMED_SAMPLE)
    {
        total += op.total_ns;
        samples += op.count;
        for c in &op.components {
            *parts.entry((c.kind, c.detail.clone())).or_default() += c.total_ns;
        }
    }
    if total == 0 {
        return Vec::new();
    }
    let mut ranked: Vec<((ComponentKind, String), u64)> = parts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let overcommit = record
        .points
        .iter()
        .map(|p| p.vcpus_per_host_cpu)
        .fold(0.0, f64::max);
    let subject = format!(
        "the time of {}'s {} timed samples ({})",
        record.scenario,
        samples,
        duration(total)
    );
    let mut findings: Vec<Finding> = ranked
        .into_iter()
        .filter(|((kind, _), _)| *kind != ComponentKind::Other)
        .map(|((kind, detail), ns)| (kind, detail, ns as f64 / total as f64))
        .filter(|&(_, _, share)| share >= MIN_SHARE)
        .take(MAX_FINDINGS)
        .map(|(kind, detail, share)| {
            let mut evidence = Vec::new();
            let pct = percent(share);
            let (cause, lock, holder, summary) = match kind {
                ComponentKind::Lock => {
                    let entry = lock_entry(trace, &detail);
                    let (cause, holder) = lock_cause(trace, entry);
                    let how = if cause == Cause::LockSpin { "spinning on" } else { "waiting for" };
                    if let Some(l) = entry {
                        evidence.push(format!(
                            "{}: {} contended waits by all tasks, {} in all",
                            l.name,
                            l.waits.as_ref().map_or(0, |w| w.n),
                            duration(l.total_wait_ns)
                        ));
                    }
                    let summary = format!("{pct} of {subject} went to {how} {detail}");
                    (cause, Some(detail.clone()), holder, summary)
                }
                ComponentKind::CrossCpu => (
                    Cause::Ipi,
                    None,
                    None,
                    format!("{pct} of {subject} went to waiting for other CPUs to run {detail} (IPIs)"),
                ),
                ComponentKind::Runnable => {
                    if overcommit > 1.0 {
                        evidence.push(format!(
                            "up to {overcommit:.1} running vCPUs per host CPU: overcommitted"
                        ));
                    }
                    if let Some(load) = &record.background {
                        evidence.push(format!(
                            "other processes used {} of all CPU time",
                            percent(load.other_busy_fraction)
                        ));
                    }
                    (
                        Cause::CpuStarvation,
                        None,
                        None,
                        format!("{pct} of {subject} was spent runnable but not on a CPU"),
                    )
                }
                ComponentKind::Asleep if detail.starts_with('(') => (
                    Cause::Sleep,
                    None,
                    None,
                    format!(
                        "{pct} of {subject} was spent asleep, where the trace does not say (--sleep-stacks records it)"
                    ),
                ),
                ComponentKind::Asleep => (
                    Cause::Sleep,
                    None,
                    None,
                    format!("{pct} of {subject} was spent asleep in {detail}"),
                ),
                _ => (
                    Cause::OnCpu,
                    None,
                    None,
                    format!("{pct} of {subject} was spent on a CPU, in its own work"),
                ),
            };
            Finding {
                summary,
                cause,
                lock,
                holder,
                share,
                evidence,
            }
        })
        .collect();
    if let Some(first) = findings.first_mut() {
        // Said once: what was explained, and how the cost grew.
        let mut head = growth(record);
        head.push(format!(
            "subject: the measuring thread during the {samples} timed samples ({} in all), nothing between them",
            duration(total)
        ));
        first.evidence.splice(0..0, head);
    }
    findings
}

/// A share of a recorded command's time, with the tasks that spent most of it.
struct SubjectShare<'a> {
    kind: SubjectCause,
    detail: &'a str,
    ns: u64,
    tasks: &'a [TaskTime],
    processes: &'a [TaskTime],
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SubjectCause {
    Part(ComponentKind),
    /// On-CPU time split by the command's rusage.
    Kernel,
    User,
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
fn command_name(record: &RunRecord) -> String {
    record.knobs["command"][0]
        .as_str()
        .map(|c| c.rsplit('/').next().unwrap_or(c).to_string())
        .or_else(|| record.knobs["comm"].as_str().map(str::to_string))
        .unwrap_or_else(|| "the command".into())
}

/// What a subject's time is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Explained {
    /// A recording's tasks: a command's, a process's, or every task.
    Recorded,
    /// The calls a scenario timed on several threads, each on its thread from its start
    /// to its end.
    TimedCalls,
}

fn subject_findings(
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
            (ComponentKind::OnCpu, Some(kernel)) => {
                let in_kernel = (part.total_ns as f64 * kernel).round() as u64;
                for (kind, ns) in [
                    (SubjectCause::Kernel, in_kernel),
                    (
                        SubjectCause::User,
                        part.total_ns - in_kernel.min(part.total_ns),
                    ),
                ] {
                    shares.push(SubjectShare {
                        kind,
                        detail: "",
                        ns,
                        tasks: &part.tasks,
                        processes: &part.processes,
                    });
                }
            }
            // Across every task of a host, a sleep without a lock is idle time, left out.
            (ComponentKind::Asleep, _) if subject.every_task => {}
            (kind, _) => shares.push(SubjectShare {
                kind: SubjectCause::Part(kind),
                detail: &part.detail,
                ns: part.total_ns,
                tasks: &part.tasks,
                processes: &part.processes,
            }),
        }
    }
    // What the kernel costs the command comes first, largest first; the command's own code
    // in user space is no kernel cause, so it follows as context (and leads only when no
    // kernel cause is worth a finding).
    shares.sort_by_key(|s| (s.kind == SubjectCause::User, std::cmp::Reverse(s.ns)));
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
                SubjectCause::Part(ComponentKind::Lock) => {
                    let entry = lock_entry(trace, s.detail);
                    let (cause, holder) = lock_cause(trace, entry);
                    let how = if cause == Cause::LockSpin { "spinning on" } else { "waiting for" };
                    if let Some(l) = entry {
                        evidence.push(format!(
                            "{}: {} contended waits by all tasks, {} in all",
                            l.name,
                            l.waits.as_ref().map_or(0, |w| w.n),
                            duration(l.total_wait_ns)
                        ));
                    }
                    (
                        cause,
                        Some(s.detail.to_string()),
                        holder,
                        format!("{pct} of {whose} went to {how} {}", s.detail),
                    )
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
                        format!("{pct} of {whose} was spent runnable but not on a CPU"),
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
                    format!("{pct} of {whose} was spent asleep in {}, holding no contended lock", s.detail),
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
                        format!("{pct} of {whose} was spent running in the kernel (system time), not waiting for anything"),
                    )
                }
                SubjectCause::User => (
                    Cause::None,
                    None,
                    None,
                    format!("{pct} of {whose} ran its own code in user space: nothing in the kernel costs it that time"),
                ),
                SubjectCause::Part(_) => (
                    Cause::OnCpu,
                    None,
                    None,
                    format!("{pct} of {whose} was spent on a CPU (kernel and user space not told apart)"),
                ),
            };
            Finding {
                summary,
                cause,
                lock,
                holder,
                share,
                evidence,
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

fn lock_findings(record: &RunRecord, trace: &TraceSection) -> Vec<Finding> {
    let scope = if trace.every_task && trace.subject.is_none() {
        "subject: lock waits of every traced task (the trace has no sched:sched_switch, so no task's time can be split by cause)"
    } else {
        "subject: lock waits of every traced task (this run did not record timed sample windows)"
    }
    .to_string();
    let total: u64 = trace.contention.iter().map(|l| l.total_wait_ns).sum();
    // The measured phases when the run had them (tracing was on only then), else the whole
    // trace (an imported or a --duration recording).
    let phases_ns = trace
        .ipis
        .iter()
        .map(|p| p.duration_ns)
        .sum::<u64>()
        .max(trace.breakdown.iter().map(|p| p.duration_ns).sum());
    let traced_ns = if phases_ns > 0 {
        phases_ns
    } else {
        trace.span_ns
    };
    let capacity = traced_ns as f64 * record.host.online_cpus.max(1) as f64;
    if total > 0 && capacity > 0.0 && (total as f64) < LOCK_BLAME_FLOOR * capacity {
        return vec![none(
            &format!(
                "nothing is blamed on a lock: traced tasks waited {} on locks in {} of tracing on {} CPUs ({:.2}% of that CPU time)",
                duration(total),
                duration(traced_ns),
                record.host.online_cpus,
                total as f64 * 100.0 / capacity
            ),
            vec![scope],
        )];
    }
    if total == 0 {
        let summary = if vmscale_run::findings::contention_observable(trace) {
            "no lock contention recorded: nothing here is blamed on a lock"
        } else if trace.lock_format_missing {
            "lock contention unknown: the trace cannot decode lock:contention_begin"
        } else {
            "lock contention unknown: it needs lock:contention_begin/end (kernel 5.19 or later), and this trace has none, so nothing can be blamed on a lock or cleared of it"
        };
        return vec![none(summary, vec![scope])];
    }
    let mut locks: Vec<&LockContention> = trace.contention.iter().collect();
    locks.sort_by_key(|l| std::cmp::Reverse(l.total_wait_ns));
    locks
        .into_iter()
        .map(|l| (l, l.total_wait_ns as f64 / total as f64))
        .filter(|&(_, share)| share >= MIN_SHARE)
        .take(MAX_FINDINGS)
        .enumerate()
        .map(|(rank, (l, share))| {
            let (cause, holder) = lock_cause(trace, Some(l));
            let how = if cause == Cause::LockSpin {
                "spinning on"
            } else {
                "waiting for"
            };
            let waiters: Vec<String> = l
                .waiters
                .iter()
                .take(3)
                .map(|w| format!("{}/{}", w.comm, w.pid))
                .collect();
            // What was explained is said once, with the first finding.
            let mut evidence: Vec<String> =
                (rank == 0).then(|| scope.clone()).into_iter().collect();
            evidence.push(format!(
                "{}, {} in all, by {}",
                vmscale_stats::units::plural(l.waits.as_ref().map_or(0, |w| w.n), "wait"),
                duration(l.total_wait_ns),
                waiters.join(", ")
            ));
            if let Some(frames) = l.stacks.first() {
                evidence.push(format!(
                    "waited from: {}",
                    frames
                        .frames
                        .iter()
                        .take(6)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(" <- ")
                ));
            }
            Finding {
                summary: format!(
                    "{} of the {} that traced tasks spent waiting on locks went to {how} {} ({})",
                    percent(share),
                    duration(total),
                    l.name,
                    l.kind
                ),
                cause,
                lock: Some(l.name.clone()),
                holder,
                share,
                evidence,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscale_run::findings::{
        ActivityShare, Component, HeldAcrossSleep, Holder, HolderActivity, OperationBreakdown,
        PhaseBreakdown,
    };
    use vmscale_run::{HostFacts, ToolInfo, SCHEMA_VERSION};

    fn record(trace: Option<TraceSection>) -> RunRecord {
        RunRecord {
            schema_version: SCHEMA_VERSION,
            verdict: Vec::new(),
            tool: ToolInfo::current("test"),
            scenario: "memslot".into(),
            sweep: "vcpus".into(),
            command_line: Vec::new(),
            started_utc: String::new(),
            finished_utc: String::new(),
            host: HostFacts {
                hostname: String::new(),
                kernel_release: String::new(),
                kernel_version: String::new(),
                cpu_model: String::new(),
                online_cpus: 2,
                memory_bytes: 0,
                kvm: None,
            },
            knobs: serde_json::json!({}),
            background: None,
            points: Vec::new(),
            trace,
            warnings: Vec::new(),
        }
    }

    fn lock(name: &str, kind: &str, addr: u64, total_wait_ns: u64) -> LockContention {
        LockContention {
            lock_addr: addr,
            name: name.into(),
            kind: kind.into(),
            modes: Default::default(),
            waits: None,
            total_wait_ns,
            open_waits: 0,
            waiters: Vec::new(),
            stacks: Vec::new(),
        }
    }

    fn component(kind: ComponentKind, detail: &str, total_ns: u64) -> Component {
        Component {
            kind,
            detail: detail.into(),
            total_ns,
            operations: 1,
        }
    }

    fn timed(components: Vec<Component>, syscall: i64) -> TraceSection {
        let total_ns = components.iter().map(|c| c.total_ns).sum();
        TraceSection {
            breakdown: vec![PhaseBreakdown {
                label: "memslot vcpus=2 strategy=direct".into(),
                operations: vec![OperationBreakdown {
                    operation: "timed sample".into(),
                    syscall,
                    count: 10,
                    total_ns,
                    components,
                    ..OperationBreakdown::default()
                }],
                ..PhaseBreakdown::default()
            }],
            ..TraceSection::default()
        }
    }

    fn pipe_holders(across_sleep_ns: u64) -> LockHolders {
        LockHolders {
            lock_addr: 0x10,
            name: "pipe->mutex (in anon_pipe_write)".into(),
            kind: "mutex".into(),
            waits: 4,
            total_wait_ns: 1_000,
            waiter_count: 2,
            waiters: Vec::new(),
            holders: vec![Holder {
                comm: "writer".into(),
                pid: 7,
                holds: 4,
                shared_holds: 0,
                waited_behind_ns: 1_000,
                activity: vec![ActivityShare {
                    activity: HolderActivity::Running,
                    detail: String::new(),
                    wait_ns: 800,
                }],
                ipis_sent: 0,
            }],
            activity: Vec::new(),
            held_across_sleep: vec![HeldAcrossSleep {
                holder_comm: "writer".into(),
                holder_pid: 7,
                function: "handle_userfault".into(),
                stack: Vec::new(),
                holds: 1,
                slept_ns: across_sleep_ns,
                held_ns: across_sleep_ns,
                held_at_least: false,
                waiters: 2,
                waiter_wait_ns: across_sleep_ns,
            }],
            exact_holds: false,
        }
    }

    #[test]
    fn timed_samples_rank_causes_by_their_share_of_the_samples() {
        let trace = timed(
            vec![
                component(ComponentKind::Runnable, "", 600),
                component(
                    ComponentKind::Lock,
                    "kvm->mmu_lock (write, in kvm_mmu_free_roots)",
                    300,
                ),
                component(ComponentKind::OnCpu, "", 80),
                // Below the threshold: left to the details.
                component(ComponentKind::Asleep, "(no stack)", 20),
            ],
            TIMED_SAMPLE,
        );
        let trace = TraceSection {
            contention: vec![lock(
                "kvm->mmu_lock (write, in kvm_mmu_free_roots)",
                "rwlock",
                1,
                300,
            )],
            ..trace
        };
        let found = verdict(&record(Some(trace)));
        let causes: Vec<Cause> = found.iter().map(|f| f.cause).collect();
        assert_eq!(
            causes,
            [Cause::CpuStarvation, Cause::LockSpin, Cause::OnCpu]
        );
        assert!((found[0].share - 0.6).abs() < 1e-9);
        assert_eq!(
            found[1].lock.as_deref(),
            Some("kvm->mmu_lock (write, in kvm_mmu_free_roots)")
        );
        // A spinning waiter is never woken by its holder: no holder is claimed.
        assert_eq!(found[1].holder, None);
        assert!(found[0]
            .evidence
            .iter()
            .any(|e| e.starts_with("subject: the measuring thread")));
    }

    #[test]
    fn a_sleeping_lock_names_its_holder_and_a_holder_that_slept_is_held_across_sleep() {
        let name = "pipe->mutex (in anon_pipe_write)";
        let with = |across_sleep_ns| TraceSection {
            contention: vec![lock(name, "mutex", 0x10, 1_000)],
            holders: vec![pipe_holders(across_sleep_ns)],
            ..timed(
                vec![component(ComponentKind::Lock, name, 1_000)],
                TIMED_SAMPLE,
            )
        };
        let slept = verdict(&record(Some(with(700))));
        assert_eq!(slept[0].cause, Cause::HeldAcrossSleep);
        let holder = slept[0].holder.as_deref().unwrap();
        assert!(
            holder.starts_with("writer/7 slept in handle_userfault"),
            "{holder}"
        );
        let ran = verdict(&record(Some(with(100))));
        assert_eq!(ran[0].cause, Cause::LockWait);
        let holder = ran[0].holder.as_deref().unwrap();
        assert!(
            holder.contains("writer/7 held it in 4 holds, running for 80%"),
            "{holder}"
        );
    }

    #[test]
    fn untimed_runs_fall_back_to_lock_waits_and_say_so() {
        let trace = TraceSection {
            contention: vec![
                lock("kvm->irqfds.lock (in kvm_irqfd)", "spinlock", 1, 900),
                lock("spinlock in __queue_work", "spinlock", 2, 100),
            ],
            // A system call breakdown is not a timed window: it is not used.
            ..timed(
                vec![component(ComponentKind::Asleep, "do_nanosleep", 5_000)],
                230,
            )
        };
        let found = verdict(&record(Some(trace)));
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].cause, Cause::LockSpin);
        assert!((found[0].share - 0.9).abs() < 1e-9);
        assert!(
            found[0]
                .summary
                .starts_with("90% of the 1.0 us that traced tasks spent waiting on locks"),
            "{}",
            found[0].summary
        );
        assert!(found[0].evidence[0].starts_with("subject: lock waits of every traced task"));
    }

    fn subject(
        parts: Vec<(ComponentKind, &str, u64)>,
        user_ns: u64,
        system_ns: u64,
    ) -> TraceSection {
        use vmscale_run::findings::{CommandUsage, SubjectPart};
        let total_ns = parts.iter().map(|p| p.2).sum();
        TraceSection {
            command: Some(CommandUsage {
                pid: 42,
                threads: Vec::new(),
                user_ns,
                system_ns,
            }),
            subject: Some(SubjectTime {
                tasks: 3,
                unseen: 0,
                total_ns,
                joined_ns: 1_000,
                joined: vec![TaskTime {
                    comm: "main".into(),
                    pid: 42,
                    ns: 1_000,
                }],
                parts: parts
                    .into_iter()
                    .map(|(kind, detail, total_ns)| SubjectPart {
                        processes: Vec::new(),
                        kind,
                        detail: detail.into(),
                        total_ns,
                        tasks: vec![TaskTime {
                            comm: "worker".into(),
                            pid: 43,
                            ns: total_ns,
                        }],
                    })
                    .collect(),
                every_task: false,
                asleep_left_out_ns: 0,
                asleep_from_before_ns: 0,
            }),
            ..TraceSection::default()
        }
    }

    #[test]
    fn a_commands_on_cpu_time_is_split_by_what_the_kernel_charged_it() {
        // 900 on a CPU, 90 of it in the kernel by rusage: the kernel's causes come first,
        // the user-space share (no kernel cause) after them.
        let found = verdict(&record(Some(subject(
            vec![
                (ComponentKind::OnCpu, "", 900),
                (ComponentKind::Runnable, "", 100),
            ],
            810,
            90,
        ))));
        let causes: Vec<Cause> = found.iter().map(|f| f.cause).collect();
        assert_eq!(causes, [Cause::CpuStarvation, Cause::OnCpu, Cause::None]);
        assert!((found[2].share - 0.81).abs() < 1e-9, "{}", found[2].share);
        assert!(found[0].evidence[0].starts_with("subject: the command (pid 42)"));
        assert!(found[0].evidence[1].starts_with("left out: 1.0 us asleep"));
        // With no kernel cause worth a finding, the user-space share leads.
        let found = verdict(&record(Some(subject(
            vec![
                (ComponentKind::OnCpu, "", 990),
                (ComponentKind::Runnable, "", 10),
            ],
            990,
            0,
        ))));
        assert_eq!(found[0].cause, Cause::None);
        assert_eq!(found.len(), 1);
        // The same time charged to the kernel is on-CPU work in the kernel; waiting for
        // cross-CPU calls is kernel time already placed, not counted twice.
        let found = verdict(&record(Some(subject(
            vec![
                (ComponentKind::OnCpu, "", 600),
                (ComponentKind::CrossCpu, "flush_tlb_func", 300),
                (ComponentKind::Asleep, "do_nanosleep", 100),
            ],
            0,
            900,
        ))));
        let causes: Vec<Cause> = found.iter().map(|f| f.cause).collect();
        assert_eq!(causes, [Cause::OnCpu, Cause::Ipi, Cause::Sleep]);
        assert!((found[0].share - 0.6).abs() < 1e-9);
        assert!(found[1].summary.contains("flush_tlb_func (IPIs)"));
        assert!(found[2].summary.contains("asleep in do_nanosleep"));
    }

    #[test]
    fn on_cpu_work_says_when_the_trace_cannot_show_waits_for_other_cpus() {
        let on_cpu = || subject(vec![(ComponentKind::OnCpu, "", 600)], 0, 600);
        let unknown = "waits for other CPUs unknown: they need csd:csd_queue_cpu";
        let without = verdict(&record(Some(on_cpu())));
        assert_eq!(without[0].cause, Cause::OnCpu);
        assert!(
            without[0].evidence.iter().any(|e| e.starts_with(unknown)),
            "{:?}",
            without[0].evidence
        );
        for csd in [
            TraceSection {
                events: vec!["csd:csd_function_entry".into()],
                ..on_cpu()
            },
            TraceSection {
                events_seen: [("csd:csd_function_entry".to_string(), 3)].into(),
                ..on_cpu()
            },
        ] {
            let with = verdict(&record(Some(csd)));
            assert!(
                !with[0].evidence.iter().any(|e| e.starts_with(unknown)),
                "{:?}",
                with[0].evidence
            );
        }
    }

    #[test]
    fn a_commands_lock_wait_is_ranked_with_its_other_causes() {
        let name = "pipe->mutex (in anon_pipe_write)";
        let trace = TraceSection {
            contention: vec![lock(name, "mutex", 0x10, 1_000)],
            holders: vec![pipe_holders(100)],
            ..subject(
                vec![
                    (ComponentKind::Lock, name, 700),
                    (ComponentKind::OnCpu, "", 300),
                ],
                0,
                300,
            )
        };
        let found = verdict(&record(Some(trace)));
        assert_eq!(found[0].cause, Cause::LockWait);
        assert_eq!(found[0].lock.as_deref(), Some(name));
        assert!(found[0]
            .holder
            .as_deref()
            .unwrap()
            .contains("writer/7 held it in 4 holds, running"));
        assert_eq!(found[1].cause, Cause::OnCpu);
    }

    #[test]
    fn growth_comes_from_the_fit_of_the_medians() {
        use vmscale_run::{Point, Series};
        let trace = timed(
            vec![component(ComponentKind::OnCpu, "", 1_000)],
            TIMED_SAMPLE,
        );
        let mut run = record(Some(trace));
        run.sweep = "vcpus".into();
        // 10 us plus 5 us per vCPU: linear.
        run.points = [1u64, 2, 4, 8]
            .iter()
            .map(|&n| Point {
                n,
                vcpus_per_host_cpu: 0.0,
                series: vec![Series {
                    name: "direct".into(),
                    summary: vmscale_stats::Summary::from_samples(&[10_000 + 5_000 * n; 9]),
                    sample_start_ns: vec![1],
                    ..Series::default()
                }],
            })
            .collect();
        let found = verdict(&run);
        let growth = &found[0].evidence[0];
        assert!(
            growth.starts_with(
                "direct: p50 15.0 us at vcpus=1 -> 50.0 us at vcpus=8; grows linearly with vcpus"
            ),
            "{growth}"
        );
        assert!(growth.contains("5.0 us more per vcpus at 8"), "{growth}");
        assert!(
            growth.ends_with("90.0 us predicted at vcpus=16"),
            "{growth}"
        );
        // A cost that falls as N grows (a tour's memslot at 1 to 8 vCPUs on two loaded CPUs:
        // 458 us down to 120 us) is never called growth, and a fit that extrapolates below
        // zero predicts nothing.
        for (point, p50) in run
            .points
            .iter_mut()
            .zip([460_000u64, 300_000, 180_000, 120_000])
        {
            point.series[0].summary = vmscale_stats::Summary::from_samples(&[p50; 9]);
        }
        let found = verdict(&run);
        let falling = &found[0].evidence[0];
        assert!(falling.contains("; falls as vcpus grows ("), "{falling}");
        assert!(!falling.contains("grows linearly"), "{falling}");
        assert!(falling.contains("less per vcpus at 8"), "{falling}");
        assert!(
            falling.ends_with("predicted at vcpus=16")
                || falling
                    .ends_with("the fit does not extrapolate to vcpus=16 (it falls below zero)"),
            "{falling}"
        );
        // Two points are no fit: the medians are all it says.
        run.points.truncate(2);
        let found = verdict(&run);
        assert_eq!(
            found[0].evidence[0],
            "direct: p50 460 us at vcpus=1 -> 300 us at vcpus=2"
        );
    }

    #[test]
    fn nothing_to_blame_is_said_as_such() {
        let recorded = TraceSection {
            events: vec!["lock:contention_begin".into(), "lock:contention_end".into()],
            ..TraceSection::default()
        };
        let quiet = verdict(&record(Some(recorded)));
        assert_eq!(quiet.len(), 1);
        assert_eq!(quiet[0].cause, Cause::None);
        assert!(quiet[0].summary.starts_with("no lock contention recorded"));
        // A trace that never had the lock events cannot clear the locks: unknown, not none.
        let blind = verdict(&record(Some(TraceSection {
            events: vec!["sched:sched_switch".into()],
            ..TraceSection::default()
        })));
        assert_eq!(blind[0].cause, Cause::None);
        assert!(
            blind[0].summary.starts_with("lock contention unknown"),
            "{}",
            blind[0].summary
        );
        let untraced = verdict(&record(None));
        assert_eq!(untraced[0].cause, Cause::None);
        assert!(untraced[0].summary.starts_with("not traced"));
    }

    #[test]
    fn lock_waiting_that_is_a_sliver_of_the_traced_cpu_time_blames_no_lock() {
        use vmscale_run::IpiPhase;
        let trace = |wait_ns| TraceSection {
            contention: vec![lock("rq->__lock (in __schedule)", "spinlock", 1, wait_ns)],
            ipis: vec![IpiPhase {
                label: "record".into(),
                duration_ns: 1_000_000_000,
                ..IpiPhase::default()
            }],
            ..TraceSection::default()
        };
        // 2 CPUs for 1 s: 1 ms of waiting is 0.05%, nothing to blame.
        let quiet = verdict(&record(Some(trace(1_000_000))));
        assert_eq!(quiet.len(), 1);
        assert_eq!(quiet[0].cause, Cause::None);
        assert!(
            quiet[0].summary.starts_with("nothing is blamed on a lock"),
            "{}",
            quiet[0].summary
        );
        // 100 ms is 5%: the lock is named.
        let busy = verdict(&record(Some(trace(100_000_000))));
        assert_eq!(busy[0].cause, Cause::LockSpin);
    }
}
