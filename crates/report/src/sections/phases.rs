//! Where the time of a sample goes: each phase's share, as (in HTML) stacked bars and in
//! every format the phase table.

use vmscale_run::RunRecord;

use crate::document::{Block, Figure, Section};
use crate::grid;

/// The section, `None` when no series was split into phases.
pub(crate) fn section(record: &RunRecord) -> Option<Section> {
    let table = grid::phases(record)?;
    Some(Section {
        blocks: vec![Block::Figure(Figure::Phases), Block::Table(table)],
        ..Section::new("phases", "where the time goes")
    })
}
