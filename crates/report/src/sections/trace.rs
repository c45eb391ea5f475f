//! The kernel-trace section: how the trace was recorded, the contended locks and who waited
//! on the worst of them, the IPIs per measured phase, what the lock holders were doing, and
//! the timeline around the worst wait.

use vmscale_run::TraceSection;

use crate::document::{Block, Figure, Section};
use crate::sections::{contention, explain, ipis};

pub(crate) fn section(trace: &TraceSection) -> Section {
    let mut section = Section::new("trace", "kernel trace");
    section.blocks.push(Block::Lines(
        contention::header(trace)
            .into_iter()
            .map(Into::into)
            .collect(),
    ));
    section.blocks.extend(contention::blocks(trace));
    section
        .blocks
        .extend(ipis::section(trace).map(Block::Section));
    section
        .blocks
        .extend(explain::sections(trace).into_iter().map(Block::Section));
    if let Some(excerpt) = &trace.timeline {
        let mut timeline = Section::new("timeline", "timeline of the worst wait");
        timeline
            .blocks
            .push(Block::Figure(Figure::Timeline(excerpt.clone())));
        section.blocks.push(Block::Section(timeline));
    }
    section
}
