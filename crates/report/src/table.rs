//! The terminal rendering: the verdict, the run's context and warnings, then the tables and
//! the kernel trace, each section as built in `sections` laid out by `render::text`.

use vmscale_run::RunRecord;

use crate::render::text;
use crate::sections::verdict::{self, Depth};
use crate::sections::{context, vmm};

/// Warnings shown on the first screen; the rest are counted.
const BRIEF_WARNINGS: usize = 4;

/// The first screen: the verdict, the run in one line, its warnings, and where the rest is.
pub(crate) fn brief(record: &RunRecord) -> String {
    let mut out = verdict::section(record, Depth::Brief)
        .map(|v| text::section(&v))
        .unwrap_or_default();
    // A VMM's run says per point what the VMM did: that table is the run's evidence.
    if let Some(vmm) = vmm::section(record) {
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
    out.push_str(&text::section(&context::section(record)));
    for section in crate::sections::body(record, options.deadline_ns, true) {
        out.push('\n');
        out.push_str(&text::section(&section));
    }
    out
}
