//! GitHub-flavoured Markdown: a heading, the verdict, the run's context as a list, warnings
//! as a blockquote, then the latency table with the series' notes, how latency grows with
//! what each sample counted, the phase table and, for a traced run, the kernel trace.

use vmscale_run::RunRecord;

use crate::document::capitalized;
use crate::render::markdown::{self as md, code_span, table};
use crate::sections::trace;
use crate::sections::verdict::{self, Depth};
use crate::{facts, grid, growth, scaling};

/// `###`: the level of the sections under the title.
const SECTION_LEVEL: usize = 3;

pub(crate) fn render(record: &RunRecord, options: &crate::Options) -> String {
    let mut out = format!(
        "## {}: {} latency by {}\n\n",
        record.tool.name,
        record.scenario,
        grid::sweep_header(record)
    );
    if let Some(verdict) = verdict::section(record, Depth::Full) {
        out.push_str(&md::section(&verdict, SECTION_LEVEL));
        out.push('\n');
    }

    for fact in facts::facts(record) {
        // The command line goes in a code span so that quotes and `*` survive.
        let value = if fact.label == "command" {
            code_span(&fact.value)
        } else {
            fact.value
        };
        out.push_str(&format!("- **{}:** {value}\n", fact.label));
    }

    if !record.warnings.is_empty() {
        out.push_str("\n> **Warnings**\n>\n");
        for warning in &record.warnings {
            out.push_str(&format!("> - {warning}\n"));
        }
    }

    if !record.points.is_empty() {
        out.push_str("\n### Latency\n\n");
        out.push_str(&table(&grid::latency(record)));
        let notes = grid::notes(record);
        if !notes.is_empty() {
            out.push('\n');
            for (place, note) in notes {
                out.push_str(&format!("- {place}: {note}\n"));
            }
        }
    }

    for growth in growth::sections(record) {
        out.push_str(&format!("\n### {}\n", capitalized(&growth.title)));
        if let Some(bins) = &growth.bins {
            out.push('\n');
            out.push_str(&table(bins));
        }
        if !growth.lines.is_empty() {
            out.push('\n');
            for line in &growth.lines {
                out.push_str(&format!("- {line}\n"));
            }
        }
    }

    let scaling = scaling::lines(record, options.deadline_ns);
    if !scaling.is_empty() {
        out.push_str(
            "\n### How it scales with N\n\nBest model by AIC (s: contention, k: coherency).\n\n",
        );
        for line in scaling {
            out.push_str(&format!("- {line}\n"));
        }
    }

    if let Some(phases) = grid::phases(record) {
        out.push_str("\n### Where the time goes\n\n");
        out.push_str(&table(&phases));
    }

    if let Some(vmm) = crate::sections::vmm::section(record) {
        out.push('\n');
        out.push_str(&md::section(&vmm, SECTION_LEVEL));
    }
    if let Some(trace_section) = &record.trace {
        out.push('\n');
        out.push_str(&md::section(&trace::section(trace_section), SECTION_LEVEL));
    }
    out
}
