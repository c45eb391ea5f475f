//! GitHub-flavoured Markdown: a heading, the verdict, the run's context as a list, warnings
//! as a blockquote, then the latency table with the series' notes, how latency grows with
//! what each sample counted, how it scales, the phase table and, for a traced run, the
//! kernel trace: the sections of `sections` laid out by `render::markdown`.

use vmscale_run::RunRecord;

use crate::grid;
use crate::render::markdown as md;
use crate::sections::context;
use crate::sections::verdict::{self, Depth};

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

    out.push_str(&md::section(&context::section(record), SECTION_LEVEL));
    // The KVM counters stay in the terminal and HTML renderings: they explain the numbers
    // rather than being them, and a post shows the numbers.
    for section in crate::sections::body(record, options.deadline_ns, false) {
        out.push('\n');
        out.push_str(&md::section(&section, SECTION_LEVEL));
    }
    out
}
