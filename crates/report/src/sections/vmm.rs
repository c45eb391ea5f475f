//! What the VMM did per sample, for runs whose samples a VMM carried out (the QEMU
//! scenarios): the samples' distribution per point beside the KVM ioctls the VMM made and
//! how long its vCPU threads were held out of the guest, then every ioctl per point.

use vmscale_run::{RunRecord, VmmSamples};

use crate::document::{Block, Section};
use crate::grid::Grid;
use crate::units;

pub(crate) fn section(record: &RunRecord) -> Option<Section> {
    let trace = record.trace.as_ref()?;
    if trace.vmm.is_empty() {
        return None;
    }
    let sweep = crate::grid::sweep_header(record).to_string();
    let mut per_point = Grid::new(&[
        (&sweep, true),
        ("series", false),
        ("n", true),
        ("p50", true),
        ("p90", true),
        ("p99", true),
        ("max", true),
        ("ioctls/sample", true),
        ("vCPU out of guest p50 (worst vCPU)", true),
        ("max", true),
    ]);
    let mut per_ioctl = Grid::new(&[
        (&sweep, true),
        ("series", false),
        ("ioctl", false),
        ("calls/sample", true),
        ("p50", true),
        ("p99", true),
        ("max", true),
        ("total", true),
    ])
    .with_code_column(2);
    let mut main_thread = Grid::new(&[
        (&sweep, true),
        ("series", false),
        ("system call", false),
        ("calls/sample", true),
        ("p50", true),
        ("max", true),
        ("total", true),
    ])
    .with_code_column(2);
    for v in &trace.vmm {
        for call in &v.main_thread {
            let at = |f: fn(&vmscale_stats::Summary) -> u64| {
                call.latency
                    .as_ref()
                    .map_or(units::MISSING.to_string(), |l| units::duration(f(l)))
            };
            main_thread.rows.push(vec![
                v.n.to_string(),
                v.series.clone(),
                call.name.clone(),
                per_sample(call.calls, v),
                at(|l| l.p50_ns),
                at(|l| l.max_ns),
                units::duration(call.total_ns),
            ]);
        }
    }
    for v in &trace.vmm {
        let summary = record
            .points
            .iter()
            .filter(|p| p.n == v.n)
            .flat_map(|p| &p.series)
            .find(|s| s.name == v.series)
            .and_then(|s| s.summary.as_ref());
        let stat = |f: fn(&vmscale_stats::Summary) -> u64| {
            summary.map_or(units::MISSING.to_string(), |s| units::duration(f(s)))
        };
        let calls: u64 = v.ioctls.iter().map(|i| i.calls).sum();
        let hold = v.vcpus.worst_out_per_sample.as_ref();
        per_point.rows.push(vec![
            v.n.to_string(),
            v.series.clone(),
            v.samples.to_string(),
            stat(|s| s.p50_ns),
            stat(|s| s.p90_ns),
            stat(|s| s.p99_ns),
            stat(|s| s.max_ns),
            per_sample(calls, v),
            hold.map_or(units::MISSING.to_string(), |h| units::duration(h.p50_ns)),
            hold.map_or(units::MISSING.to_string(), |h| units::duration(h.max_ns)),
        ]);
        for ioctl in &v.ioctls {
            let latency = ioctl.latency.as_ref();
            let at = |f: fn(&vmscale_stats::Summary) -> u64| {
                latency.map_or(units::MISSING.to_string(), |l| units::duration(f(l)))
            };
            per_ioctl.rows.push(vec![
                v.n.to_string(),
                v.series.clone(),
                ioctl.name.clone(),
                per_sample(ioctl.calls, v),
                at(|l| l.p50_ns),
                at(|l| l.p99_ns),
                at(|l| l.max_ns),
                units::duration(ioctl.total_ns),
            ]);
        }
    }
    // An attached recording is one window, the whole recording: no distribution, and the
    // counts are totals.
    let recording = record.points.is_empty();
    let mut section = if recording {
        let mut section = Section::new("vmm", "what the VMM did while recorded");
        section.blocks.push(Block::Lines(
            trace.vmm.iter().map(|v| vcpu_line(v).into()).collect(),
        ));
        for grid in [&mut per_ioctl, &mut main_thread] {
            grid.headers[3] = "calls".into();
            grid.headers.drain(..2);
            grid.numeric.drain(..2);
            grid.code.drain(..2);
            for row in &mut grid.rows {
                row.drain(..2);
            }
        }
        section
    } else {
        let mut section = Section::new("vmm", "what the VMM did per sample");
        section.blocks.push(Block::Table(per_point));
        section
    };
    section.aside = Some(
        "ioctls its threads entered, KVM_RUN apart; a vCPU is out of the guest from a KVM_RUN return to its next call".into(),
    );
    if per_ioctl.rows.is_empty() {
        section.blocks.push(Block::Paragraph(
            "The VMM made no ioctl during the samples.".into(),
        ));
    } else {
        section.blocks.push(Block::Table(per_ioctl));
    }
    if !main_thread.rows.is_empty() {
        section.blocks.push(Block::Paragraph(
            "The VMM's main thread (which runs QMP commands): its other system calls, each cut at the end of its sample or of the recording.".into(),
        ));
        section.blocks.push(Block::Table(main_thread));
    }
    Some(section)
}

fn per_sample(calls: u64, v: &VmmSamples) -> String {
    match v.samples {
        0 | 1 => calls.to_string(),
        n => format!("{:.1}", calls as f64 / n as f64),
    }
}

/// The vCPU threads of an attached recording, in a line.
fn vcpu_line(v: &VmmSamples) -> String {
    let hold = &v.vcpus;
    format!(
        "vCPU threads in the trace: {}, {} KVM_RUN exits to the VMM, {} out of the guest, {} waiting for locks, {} runnable (summed over vCPUs)",
        hold.threads,
        hold.exits,
        units::duration(hold.out_ns),
        units::duration(hold.lock_wait_ns),
        units::duration(hold.runnable_ns)
    )
}
