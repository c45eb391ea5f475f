//! Runs whose samples a VMM carried out (the QEMU scenarios): the KVM ioctls it spent them
//! in come first.

use std::collections::BTreeMap;

use vmscale_run::findings::VmmSamples;

/// The verdict of a run whose samples a VMM carried out: first the KVM ioctls the VMM spent
/// the samples in, as shares of the samples' time, then what the measuring thread's own
/// breakdown (`timed`) says, less its sleep: that sleep is the wait for the VMM's reply,
/// which the ioctl findings explain, not a cause of its own.
pub(super) fn findings(
    record: &vmscale_run::RunRecord,
    trace: &vmscale_run::TraceSection,
    timed: Vec<vmscale_run::verdict::Finding>,
) -> Vec<vmscale_run::verdict::Finding> {
    use vmscale_run::verdict::{Cause, Finding};
    use vmscale_stats::units::duration;

    let total: u64 = record
        .points
        .iter()
        .flat_map(|p| &p.series)
        .filter(|s| !s.vmm_tids.is_empty())
        .flat_map(|s| &s.samples_ns)
        .sum();
    let samples: u64 = trace.vmm.iter().map(|v| v.samples).sum();
    if total == 0 || samples == 0 {
        return timed;
    }
    let subject = format!(
        "the time of {}'s {samples} timed samples ({})",
        record.scenario,
        duration(total)
    );
    let mut by_name: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for ioctl in trace.vmm.iter().flat_map(|v| &v.ioctls) {
        let entry = by_name.entry(&ioctl.name).or_default();
        entry.0 += ioctl.calls;
        entry.1 += ioctl.total_ns;
    }
    let mut ranked: Vec<(&str, u64, u64)> = by_name
        .into_iter()
        .map(|(name, (calls, ns))| (name, calls, ns))
        .collect();
    ranked.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(b.0)));
    let in_ioctls: u64 = ranked.iter().map(|r| r.2).sum();
    let mut out: Vec<Finding> = ranked
        .iter()
        .filter(|r| r.2 as f64 / total as f64 >= 0.05)
        .take(3)
        .map(|&(name, calls, ns)| {
            let share = ns as f64 / total as f64;
            let evidence = trace
                .vmm
                .iter()
                .filter_map(|v| {
                    let ioctl = v.ioctls.iter().find(|i| i.name == name)?;
                    Some(format!(
                        "{}={} ({}): {:.1} {name} per sample, p50 {} each, {} in all",
                        record.sweep,
                        v.n,
                        v.series,
                        ioctl.calls as f64 / v.samples.max(1) as f64,
                        ioctl
                            .latency
                            .as_ref()
                            .map_or("?".into(), |l| duration(l.p50_ns)),
                        duration(ioctl.total_ns)
                    ))
                })
                .collect();
            Finding {
                summary: format!(
                    "{:.0}% of {subject} was the VMM in {name} ({:.1} calls per sample)",
                    share * 100.0,
                    calls as f64 / samples as f64
                ),
                cause: Cause::VmmIoctl,
                lock: None,
                holder: None,
                share,
                evidence,
                explained_by: Vec::new(),
                what_if: None,
                what_if_together: None,
            }
        })
        .collect();
    let rest = total.saturating_sub(in_ioctls);
    out.push(Finding {
        summary: format!(
            "{:.0}% of {subject} the VMM spent outside KVM ioctls (its own work: QMP, device model, memory, a migration stream; its main thread's system calls below)",
            rest as f64 / total as f64 * 100.0
        ),
        cause: Cause::None,
        lock: None,
        holder: None,
        share: rest as f64 / total as f64,
        evidence: trace
            .vmm
            .iter()
            .filter_map(|v| main_thread_evidence(&record.sweep, v))
            .chain(trace.vmm.iter().map(|v| vcpu_evidence(&record.sweep, v)))
            .collect(),
        explained_by: Vec::new(),
        what_if: None,
        what_if_together: None,
    });
    out.extend(timed.into_iter().filter(|f| f.cause != Cause::Sleep));
    out
}

/// One line on the main thread's system calls other than ioctl during a series' samples,
/// the three that took most of them.
fn main_thread_evidence(sweep: &str, v: &VmmSamples) -> Option<String> {
    use vmscale_stats::units::duration;
    if v.main_thread.is_empty() {
        return None;
    }
    let top: Vec<String> = v
        .main_thread
        .iter()
        .take(3)
        .map(|c| {
            format!(
                "{} {:.1} per sample, {} in all",
                c.name,
                c.calls as f64 / v.samples.max(1) as f64,
                duration(c.total_ns)
            )
        })
        .collect();
    Some(format!(
        "{sweep}={} ({}): the VMM's main thread in {}",
        v.n,
        v.series,
        top.join("; ")
    ))
}

/// One line on the vCPU threads of a series: how long they were held out of the guest.
fn vcpu_evidence(sweep: &str, v: &VmmSamples) -> String {
    use vmscale_stats::units::duration;
    let hold = &v.vcpus;
    if hold.threads == 0 {
        return format!(
            "{sweep}={} ({}): no vCPU thread left an event in the trace: each stayed in KVM_RUN (running or halted) throughout",
            v.n, v.series
        );
    }
    format!(
        "{sweep}={} ({}): {} vCPU thread{} in the trace, {} KVM_RUN exits to the VMM; out of the guest per sample (worst vCPU) p50 {}, max {}; waiting for locks {}, runnable {} in all",
        v.n,
        v.series,
        hold.threads,
        if hold.threads == 1 { "" } else { "s" },
        hold.exits,
        hold.worst_out_per_sample.as_ref().map_or("?".into(), |s| duration(s.p50_ns)),
        hold.worst_out_per_sample.as_ref().map_or("?".into(), |s| duration(s.max_ns)),
        duration(hold.lock_wait_ns),
        duration(hold.runnable_ns)
    )
}
