//! How a series' latency grows with what each sample counted beside it: a section per
//! series with an x, its chart (HTML), the samples binned by x and the fitted lines.

use vmscale_run::RunRecord;

use crate::document::{Block, Figure, Section, Text};
use crate::growth;

/// One section per series that recorded an x per sample, in record order.
pub(crate) fn sections(record: &RunRecord) -> Vec<Section> {
    growth::sections(record)
        .into_iter()
        .map(|growth| {
            let mut section = Section::new("", growth.title);
            section.blocks.push(Block::Figure(Figure::Growth {
                point: growth.point,
                series: growth.series,
            }));
            section.blocks.extend(growth.bins.map(Block::Table));
            if !growth.lines.is_empty() {
                section.blocks.push(Block::Lines(
                    growth.lines.into_iter().map(Text::from).collect(),
                ));
            }
            section
        })
        .collect()
}
