//! The operation's two clocks: the VMM's and the guests'.

use vmscale_run::findings::{ComponentKind, SubjectPart};
use vmscale_run::verdict::{Cause, ExplainedBy, Finding};
use vmscale_run::RunRecord;
use vmscale_stats::units::duration;

use super::percent;

/// Where an operation has two clocks, the VMM's (the caller's time) and the guests' (each
/// vCPU's stall from its TSC log), the difference is said and attributed: per pausing
/// series with a `<name> guest stall` sibling, at the largest N, the stall's part after
/// the VMM's resume returned, and where the released vCPU threads spent it (the trace's
/// [`TraceSection::vcpu_resume`]).
pub(super) fn two_clocks(record: &RunRecord) -> Vec<Finding> {
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
        // What the time after the release is made of: the released threads' way to
        // KVM_RUN, split as the trace saw it, and re-entering the guest.
        let mut explained_by: Vec<ExplainedBy> = Vec::new();
        let (waking, entering) = (phase_mean("until thread ran"), phase_mean("into guest"));
        if after > 0.0 {
            if let Some(r) = resume.filter(|r| r.total_ns > 0) {
                for p in &r.parts {
                    explained_by.push(ExplainedBy {
                        what: format!("released vCPU threads {}", part_phrase(p)),
                        share: p.total_ns as f64 / r.total_ns as f64 * waking / after,
                    });
                }
            }
            explained_by.push(ExplainedBy {
                what: "re-entering the guest once in KVM_RUN".into(),
                share: entering / after,
            });
            explained_by.retain(|e| e.share >= 0.005);
            explained_by.sort_by(|a, b| b.share.total_cmp(&a.share).then(a.what.cmp(&b.what)));
        }
        let (cause, attributed) = match resume.filter(|r| r.total_ns > 0) {
            Some(r) => {
                let cause = match r.parts.first().map(|p| p.kind) {
                    Some(ComponentKind::Runnable) => Cause::CpuStarvation,
                    Some(ComponentKind::Lock | ComponentKind::HoldingAsleep) => Cause::LockWait,
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
                        format!(
                            "{} {}",
                            percent(p.total_ns as f64 / r.total_ns as f64),
                            part_phrase(p)
                        )
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
            explained_by,
            what_if: None,
            what_if_together: None,
        });
    }
    findings
}

/// What released vCPU threads did in one part of their way back to KVM_RUN.
fn part_phrase(p: &SubjectPart) -> String {
    match p.kind {
        ComponentKind::Runnable => "runnable without a CPU".to_string(),
        ComponentKind::OnCpu => "on a CPU".to_string(),
        ComponentKind::Asleep if p.detail.starts_with('(') => "asleep, not yet woken".to_string(),
        ComponentKind::Asleep => format!("asleep in {}", p.detail),
        ComponentKind::Lock => format!("waiting for {}", p.detail),
        ComponentKind::HoldingAsleep => format!("asleep in {} holding {}", p.detail, p.lock),
        ComponentKind::CrossCpu => format!("waiting for other CPUs to run {}", p.detail),
        ComponentKind::Other => p.detail.clone(),
    }
}
