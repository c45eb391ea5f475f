//! On-CPU time said by the code it ran: the subject's samples by path, with the contended
//! lock a path takes where the trace has one ("kvm_irqfd_deassign, which takes
//! kvm->irqfds.lock, waited on by others").

use vmscale_run::findings::{CodePath, LockContention, OnCpuPaths, TraceSection};
use vmscale_run::verdict::ExplainedBy;

use super::percent;

/// Which paths: the kernel's, user space's, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Kernel,
    User,
    Both,
}

fn chosen(paths: &OnCpuPaths, side: Side) -> (Vec<&CodePath>, u64) {
    match side {
        Side::Kernel => (paths.kernel.iter().collect(), paths.kernel_samples),
        Side::User => (paths.user.iter().collect(), paths.user_samples),
        Side::Both => {
            let mut all: Vec<&CodePath> = paths.kernel.iter().chain(&paths.user).collect();
            all.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.path.cmp(&b.path)));
            (all, paths.kernel_samples + paths.user_samples)
        }
    }
}

/// The contended lock a path's function takes, per the lock table.
fn lock_taken(contention: &[LockContention], path: &str) -> Option<String> {
    let function = crate::on_cpu::path_function(path);
    contention.iter().find_map(|lock| {
        let base = lock.name.split(" (").next().unwrap_or(&lock.name);
        crate::naming::known::takes(base, lock.kind, function).then(|| base.to_string())
    })
}

fn describe(trace: &TraceSection, path: &CodePath) -> String {
    match lock_taken(&trace.contention, &path.path) {
        Some(lock)
            if !path.path.starts_with("spinning")
                && !path.path.starts_with(crate::on_cpu::OPTIMISTIC_SPIN) =>
        {
            format!("{}, which takes {lock} (contended)", path.path)
        }
        // A sample with interrupts off is inside a section a spin_lock_irq opened: in a
        // function that takes one known spinlock, that lock's hold, contended or not.
        _ if path.path.contains(" with interrupts off") => {
            match crate::naming::known::only_spinlock_of(crate::on_cpu::path_function(&path.path)) {
                Some(lock) => format!("{}, holding {lock}", path.path),
                None => path.path.clone(),
            }
        }
        _ => path.path.clone(),
    }
}

/// The share of the on-CPU samples (kernel and user) spinning on sleeping locks before
/// the lock's events count a wait (an rwsem's optimistic spin): time on a CPU that is
/// still a wait for a lock.
fn optimistic_spin_share(trace: &TraceSection) -> f64 {
    let Some(paths) = &trace.on_cpu_paths else {
        return 0.0;
    };
    let total = paths.kernel_samples + paths.user_samples;
    let spinning: u64 = paths
        .kernel
        .iter()
        .filter(|p| p.path.starts_with(crate::on_cpu::OPTIMISTIC_SPIN))
        .map(|p| p.samples)
        .sum();
    if total == 0 {
        0.0
    } else {
        spinning as f64 / total as f64
    }
}

/// "N% of its samples spinning on sleeping locks before the lock events count a wait",
/// where that is a tenth of the samples or more: on-CPU time that is still a lock's wait.
pub(super) fn spinning_outside_waits(trace: &TraceSection) -> Option<String> {
    let share = optimistic_spin_share(trace);
    (share >= 0.1).then(|| {
        format!(
            "{} of its samples spinning on sleeping locks before the lock events count a wait",
            percent(share)
        )
    })
}

/// ", not waiting for anything", or the share spinning on sleeping locks instead
/// ([`spinning_outside_waits`]).
pub(super) fn not_waiting(trace: &TraceSection) -> String {
    match spinning_outside_waits(trace) {
        Some(spinning) => format!(", {spinning}"),
        None => ", not waiting for anything".into(),
    }
}

/// ": mostly in F (62%), G (20%)", or nothing without samples.
pub(super) fn summary(trace: &TraceSection, side: Side) -> String {
    let Some(paths) = &trace.on_cpu_paths else {
        return String::new();
    };
    let (list, total) = chosen(paths, side);
    if total == 0 || list.is_empty() {
        return String::new();
    }
    if side != Side::User && !paths.entries.is_empty() {
        let named: Vec<String> = paths
            .entries
            .iter()
            .take(2)
            .map(|e| match e.paths.first() {
                Some(p) => format!(
                    "{} ({}, mostly {})",
                    e.entry,
                    percent(e.samples as f64 / total as f64),
                    describe(trace, p)
                ),
                None => format!("{} ({})", e.entry, percent(e.samples as f64 / total as f64)),
            })
            .collect();
        return format!(": mostly in {}", named.join("; "));
    }
    let named: Vec<String> = list
        .iter()
        .take(2)
        .map(|p| {
            format!(
                "{} ({})",
                describe(trace, p),
                percent(p.samples as f64 / total as f64)
            )
        })
        .collect();
    format!(": mostly in {}", named.join(", "))
}

/// The paths as parts of the on-CPU time, with the samples they rest on: kernel time by
/// how the kernel was entered, each with its main paths, user time by its own functions.
pub(super) fn explained_by(trace: &TraceSection, side: Side) -> Vec<ExplainedBy> {
    let Some(paths) = &trace.on_cpu_paths else {
        return Vec::new();
    };
    let (list, total) = chosen(paths, side);
    if total == 0 {
        return Vec::new();
    }
    if side != Side::User && !paths.entries.is_empty() {
        let mut out: Vec<ExplainedBy> = paths
            .entries
            .iter()
            .map(|e| {
                let inside: Vec<String> = e
                    .paths
                    .iter()
                    .map(|p| {
                        format!(
                            "{} {}",
                            percent(p.samples as f64 / e.samples.max(1) as f64),
                            describe(trace, p)
                        )
                    })
                    .collect();
                ExplainedBy {
                    what: format!(
                        "in {} ({} samples): {}",
                        e.entry,
                        e.samples,
                        inside.join(", ")
                    ),
                    share: e.samples as f64 / total as f64,
                }
            })
            .collect();
        if side == Side::Both {
            out.extend(paths.user.iter().map(|p| ExplainedBy {
                what: format!("in {} (user space, {} samples)", p.path, p.samples),
                share: p.samples as f64 / total as f64,
            }));
            out.sort_by(|a, b| b.share.total_cmp(&a.share).then(a.what.cmp(&b.what)));
        }
        return out;
    }
    list.into_iter()
        .map(|p| ExplainedBy {
            what: format!("in {} ({} samples)", describe(trace, p), p.samples),
            share: p.samples as f64 / total as f64,
        })
        .collect()
}

/// For a spinning lock: where the subject's own samples put the code that takes it (its
/// holders, running with the lock held: a spinlock's holder never sleeps), as a share of
/// the subject's on-CPU samples; `None` without such samples.
pub(super) fn spin_holders(trace: &TraceSection, lock: &LockContention) -> Option<ExplainedBy> {
    let paths = trace.on_cpu_paths.as_ref()?;
    let base = lock.name.split(" (").next().unwrap_or(&lock.name);
    let total = paths.kernel_samples + paths.user_samples;
    let holding: Vec<&CodePath> = paths
        .kernel
        .iter()
        .filter(|p| {
            !p.path.starts_with("spinning") && !p.path.starts_with(crate::on_cpu::OPTIMISTIC_SPIN)
        })
        .filter(|p| {
            crate::naming::known::takes(base, lock.kind, crate::on_cpu::path_function(&p.path))
        })
        .collect();
    let samples: u64 = holding.iter().map(|p| p.samples).sum();
    if total == 0 || samples == 0 {
        return None;
    }
    let functions: Vec<&str> = holding
        .iter()
        .map(|p| crate::on_cpu::path_function(&p.path))
        .collect();
    Some(ExplainedBy {
        what: format!(
            "holders running in {} (the code that takes it): {} of the subject's on-CPU samples outside its lock waits ({samples}) are there",
            functions.join(", "),
            percent(samples as f64 / total as f64)
        ),
        share: 1.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_paths(spinning: u64, own: u64) -> TraceSection {
        TraceSection {
            on_cpu_paths: Some(OnCpuPaths {
                samples: spinning + own,
                period_ns: 1_000_000,
                kernel_samples: spinning + own,
                kernel: vec![
                    CodePath {
                        path: "unmap_page_range".into(),
                        samples: own,
                    },
                    CodePath {
                        path: format!("{} in __vm_munmap", crate::on_cpu::OPTIMISTIC_SPIN),
                        samples: spinning,
                    },
                ],
                ..OnCpuPaths::default()
            }),
            ..TraceSection::default()
        }
    }

    /// On-CPU time that spins on an rwsem's owner before the lock's events is not said to
    /// wait for nothing.
    #[test]
    fn spinning_outside_the_lock_events_is_not_waiting_for_nothing() {
        assert_eq!(
            not_waiting(&with_paths(5, 95)),
            ", not waiting for anything"
        );
        assert_eq!(
            not_waiting(&with_paths(30, 70)),
            ", 30% of its samples spinning on sleeping locks before the lock events count a wait"
        );
    }
}
