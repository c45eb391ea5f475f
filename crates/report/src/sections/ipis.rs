//! The IPIs each measured phase sent: how many, to how many CPUs, from which call sites
//! asking for which callbacks, and from which tasks.

use std::collections::BTreeMap;

use vmscale_run::IpiPhase;

use crate::document::{Block, Section};
use crate::grid::Grid;
use crate::units;

/// Sites and senders named per phase; the rest are left to run.json.
const IPI_TOP: usize = 3;

/// One row per measured phase: how many IPIs and cross-CPU calls it sent, to how many
/// CPUs, and from where.
pub(crate) fn section(ipis: &[IpiPhase]) -> Option<Section> {
    if ipis.is_empty() {
        return None;
    }
    let mut grid = Grid::new(&[
        ("phase", false),
        ("duration", true),
        ("IPIs", true),
        ("cross-CPU calls", true),
        ("target CPUs", true),
        ("top sites (call site -> callback)", false),
        ("top senders", false),
    ]);
    for phase in ipis {
        grid.rows.push(vec![
            phase.label.clone(),
            units::duration(phase.duration_ns),
            units::count(phase.ipis),
            units::count(phase.csd_queued),
            targets(&phase.by_target),
            top_sites(phase),
            top_senders(phase),
        ]);
    }
    let mut section = Section::new("ipis", "IPIs per measured phase");
    section.blocks.push(Block::Table(grid));
    Some(section)
}

/// CPUs that received IPIs during the phase.
fn targets(by_target: &BTreeMap<String, u64>) -> String {
    by_target.values().filter(|&&n| n > 0).count().to_string()
}

fn top_sites(phase: &IpiPhase) -> String {
    let mut parts: Vec<String> = phase
        .by_site
        .iter()
        .take(IPI_TOP)
        .map(|site| {
            let callback = if site.callback.is_empty() {
                "reschedule"
            } else {
                &site.callback
            };
            format!(
                "{} -> {callback}: {}",
                site.callsite,
                units::count(site.ipis)
            )
        })
        .collect();
    if phase.by_site.len() > IPI_TOP {
        parts.push(format!("{} more", phase.by_site.len() - IPI_TOP));
    }
    parts.join("; ")
}

fn top_senders(phase: &IpiPhase) -> String {
    let mut parts: Vec<String> = phase
        .by_sender
        .iter()
        .take(IPI_TOP)
        .map(|s| format!("{}/{}: {}", s.comm, s.pid, units::count(s.ipis)))
        .collect();
    if phase.by_sender.len() > IPI_TOP {
        parts.push(format!("{} more", phase.by_sender.len() - IPI_TOP));
    }
    parts.join("; ")
}
