//! The terminal rendering: the verdict, a header block, the warnings, then the tables and
//! the kernel trace.

use vmscale_run::RunRecord;

use crate::render::text::{self, layout};
use crate::sections::trace;
use crate::sections::verdict::{self, Depth};
use crate::{counters, facts, grid, growth, scaling};

/// Warnings shown on the first screen; the rest are counted.
const BRIEF_WARNINGS: usize = 4;

/// The first screen: the verdict, the run in one line, its warnings, and where the rest is.
pub(crate) fn brief(record: &RunRecord) -> String {
    let mut out = verdict::section(record, Depth::Brief)
        .map(|v| text::section(&v))
        .unwrap_or_default();
    // A VMM's run says per point what the VMM did: that table is the run's evidence.
    if let Some(vmm) = crate::sections::vmm::section(record) {
        out.push('\n');
        out.push_str(&text::section(&vmm));
    }
    let host = &record.host;
    let points: Vec<String> = record.points.iter().map(|p| p.n.to_string()).collect();
    let sweep = if points.is_empty() {
        String::new()
    } else {
        format!(", {} {}", record.sweep, points.join(","))
    };
    out.push_str(&format!(
        "\n{}{sweep}: kernel {}, {} online CPUs{}\n",
        record.scenario,
        host.kernel_release,
        host.online_cpus,
        record
            .background
            .as_ref()
            .map(|b| format!(
                ", others used {:.0}% of the CPUs",
                b.other_busy_fraction * 100.0
            ))
            .unwrap_or_default()
    ));
    for warning in record.warnings.iter().take(BRIEF_WARNINGS) {
        out.push_str(&format!("warning: {warning}\n"));
    }
    if record.warnings.len() > BRIEF_WARNINGS {
        out.push_str(&format!(
            "(+{} more warnings)\n",
            record.warnings.len() - BRIEF_WARNINGS
        ));
    }
    out.push_str(
        "details: --details prints every section, as a run directory's summary.md and report.html do\n",
    );
    out
}

pub(crate) fn render(record: &RunRecord, options: &crate::Options) -> String {
    // The answer first; everything after it is its evidence.
    let mut out = String::new();
    if let Some(verdict) = verdict::section(record, Depth::Full) {
        out.push_str(&text::section(&verdict));
        out.push('\n');
    }

    let facts = facts::facts(record);
    let width = facts.iter().map(|f| f.label.len() + 1).max().unwrap_or(0);
    for fact in &facts {
        let label = format!("{}:", fact.label);
        out.push_str(&format!("{label:<width$}  {}\n", fact.value));
    }

    if !record.warnings.is_empty() {
        out.push('\n');
        for warning in &record.warnings {
            out.push_str(&format!("warning: {warning}\n"));
        }
    }

    // A bare trace recording (`vmscale record`) measures no operation.
    if !record.points.is_empty() {
        out.push_str("\nlatency\n");
        out.push_str(&layout(&grid::latency(record)));
        for (place, note) in grid::notes(record) {
            out.push_str(&format!("note ({place}): {note}\n"));
        }
    }

    for growth in growth::sections(record) {
        out.push_str(&format!("\n{}\n", growth.title));
        if let Some(bins) = &growth.bins {
            out.push_str(&layout(bins));
        }
        for line in &growth.lines {
            out.push_str(&format!("  {line}\n"));
        }
    }

    let scaling = scaling::lines(record, options.deadline_ns);
    if !scaling.is_empty() {
        out.push_str("\nhow it scales with N (best model by AIC; s: contention, k: coherency)\n");
        for line in scaling {
            out.push_str(&format!("  {line}\n"));
        }
    }

    if let Some(phases) = grid::phases(record) {
        out.push_str("\nwhere the time goes\n");
        out.push_str(&layout(&phases));
    }

    if let Some(stats) = counters::kvm_stats(record) {
        out.push_str("\nKVM statistics that changed, per sample\n");
        out.push_str(&layout(&stats));
    }

    let progress = counters::vcpu_progress(record);
    if !progress.is_empty() {
        out.push_str("\nvCPU progress (guest loop iterations per vCPU while measuring)\n");
        for line in progress {
            out.push_str(&format!("  {line}\n"));
        }
    }

    if let Some(vmm) = crate::sections::vmm::section(record) {
        out.push('\n');
        out.push_str(&text::section(&vmm));
    }
    if let Some(trace_section) = &record.trace {
        out.push('\n');
        out.push_str(&text::section(&trace::section(trace_section)));
    }
    out
}
