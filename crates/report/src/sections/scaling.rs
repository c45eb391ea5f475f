//! How latency scales with the swept value: (in HTML) the curves and each series' fit, and
//! in every format the best model per series and statistic.

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
    section.aside = Some("best model by AIC; s: contention, k: coherency".into());
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
