//! The samples' distribution per point and strategy: the latency table with the series'
//! notes under it, and (drawn only in HTML) each point's distribution.

use vmscale_run::RunRecord;

use crate::document::{Block, Figure, Section};
use crate::grid;

/// The latency table and its notes; `None` for a bare trace recording, which measures no
/// operation.
pub(crate) fn section(record: &RunRecord) -> Option<Section> {
    if record.points.is_empty() {
        return None;
    }
    let mut section = Section::new("latency", "latency");
    section.blocks.push(Block::Table(grid::latency(record)));
    let notes: Vec<(String, String)> = grid::notes(record)
        .into_iter()
        .map(|(place, note)| (place, note.to_string()))
        .collect();
    if !notes.is_empty() {
        section.blocks.push(Block::Notes(notes));
    }
    Some(section)
}

/// Each point's distribution as a chart; its numbers are the latency table's.
pub(crate) fn distributions(record: &RunRecord) -> Option<Section> {
    if record.points.is_empty() {
        return None;
    }
    Some(Section {
        aside: Some(
            "the share of samples at or below each latency (the empirical CDF); dots mark p50 and p99"
                .into(),
        ),
        blocks: vec![Block::Figure(Figure::Distributions)],
        ..Section::new("distributions", "latency distribution per point")
    })
}
