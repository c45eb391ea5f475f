//! The terminal rendering: a header block, the warnings, then the tables.
//!
//! Plain ASCII borders and no styling, so the output reads the same on a terminal, in a
//! file, and in an e-mail.

use comfy_table::presets::ASCII_FULL_CONDENSED;
use comfy_table::{CellAlignment, Table};
use vmscale_run::{RunRecord, TraceSection};

use crate::grid::{self, Grid};
use crate::{contention, counters, explain, facts, growth, scaling};

/// Warnings shown on the first screen; the rest are counted.
const BRIEF_WARNINGS: usize = 4;

/// The first screen: the verdict, the run in one line, its warnings, and where the rest is.
pub(crate) fn brief(record: &RunRecord) -> String {
    let mut out = crate::verdict::text(record, crate::verdict::BRIEF_DETAILS);
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
    let mut out = crate::verdict::text(record, usize::MAX);
    if !out.is_empty() {
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

    if let Some(trace) = &record.trace {
        out.push_str(&trace_section(trace));
    }
    out
}

/// The kernel trace: how it was recorded, the contended locks, then who waited on the worst
/// of them and from where.
fn trace_section(trace: &TraceSection) -> String {
    let mut out = String::from("\nkernel trace\n");
    for line in contention::header(trace) {
        out.push_str(&format!("  {line}\n"));
    }

    let Some((locks, more)) = contention::table(trace) else {
        out.push_str(&format!("\n{}\n", contention::empty_table_reason(trace)));
        return out;
    };
    out.push_str("\nlock contention (worst first)\n");
    out.push_str(&layout(&locks));
    if let Some(more) = more {
        out.push_str(&format!("{more}\n"));
    }

    out.push_str(&format!("\n{}\n", contention::details_title(trace)));
    for (rank, lock) in contention::details(trace).iter().enumerate() {
        out.push_str(&format!("  {}. {} ({})\n", rank + 1, lock.name, lock.what));
        if !lock.waiters.is_empty() {
            out.push_str("     waiters:\n");
        }
        for (who, waited) in &lock.waiters {
            out.push_str(&format!("       {who}: {waited}\n"));
        }
        if let Some(more) = &lock.more_waiters {
            out.push_str(&format!("       {more}\n"));
        }
        for stack in &lock.stacks {
            out.push_str(&format!("     stack: {}\n", stack.title));
            for frame in &stack.frames {
                out.push_str(&format!("       {frame}\n"));
            }
        }
        if let Some(more) = &lock.more_stacks {
            out.push_str(&format!("     {more}\n"));
        }
    }
    out.push_str(&explain::terminal(trace, layout));
    out
}

/// The grid as a bordered table, numbers right-aligned, ending in a newline.
fn layout(grid: &Grid) -> String {
    let mut table = Table::new();
    table
        .load_preset(ASCII_FULL_CONDENSED)
        .force_no_tty()
        .set_header(grid.headers.clone());
    for row in &grid.rows {
        table.add_row(row.clone());
    }
    for (index, numeric) in grid.numeric.iter().enumerate() {
        if let (true, Some(column)) = (*numeric, table.column_mut(index)) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    format!("{table}\n")
}
