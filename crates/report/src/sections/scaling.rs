//! How latency scales with the swept value: (in HTML) the curves and each series' points
//! with their intervals and fit, and in every format the growth claim per series and
//! statistic.

use vmscale_run::RunRecord;

use crate::document::{Block, Figure, Section, Text};
use crate::scaling;

/// The section, `None` when the run measured nothing; with a `deadline` (ns), where each
/// fit crosses it.
pub(crate) fn section(record: &RunRecord, deadline: Option<f64>) -> Option<Section> {
    if record.points.is_empty() {
        return None;
    }
    let mut section = Section::new("scaling", "how it scales with N");
    section.aside = Some(format!(
        "claims at {}% confidence, intervals in brackets; flat: every point within the \
         margin of the smallest N; fits by weighted least squares within T1 > 0, \
         0 <= s <= 1, k >= 0 (s: contention, k: coherency), drawn only where they fit",
        vmscale_stats::growth::CONFIDENCE * 100.0
    ));
    section.blocks.push(Block::Figure(Figure::Scaling));
    let lines: Vec<Text> = scaling::lines(record, deadline)
        .into_iter()
        .map(Text::from)
        .collect();
    if !lines.is_empty() {
        section.blocks.push(Block::Lines(lines));
    }
    Some(section)
}
