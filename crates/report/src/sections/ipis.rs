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
pub(crate) fn section(trace: &vmscale_run::TraceSection) -> Option<Section> {
    let ipis = &trace.ipis;
    if ipis.is_empty() {
        return None;
    }
    // A count the trace could not have made is unknown, not 0.
    let count = |observable: bool, n: u64| {
        if observable {
            units::count(n)
        } else {
            "unknown".to_string()
        }
    };
    let senders = vmscale_run::findings::ipi_senders_observable(trace);
    let calls = vmscale_run::findings::cross_cpu_observable(trace);
    let mut grid = Grid::new(&[
        ("phase", false),
        ("duration", true),
        ("IPIs", true),
        ("cross-CPU calls", true),
        ("target CPUs", true),
        ("top sites (call site -> callback, or reason)", false),
        ("top senders", false),
        ("run on the targets", false),
    ]);
    for phase in ipis {
        grid.rows.push(vec![
            phase.label.clone(),
            units::duration(phase.duration_ns),
            count(senders, phase.ipis),
            count(calls, phase.csd_queued),
            targets(&phase.by_target),
            top_sites(phase),
            top_senders(phase),
            victim_work(phase),
        ]);
    }
    let mut section = Section::new("ipis", "IPIs per measured phase");
    section.blocks.push(Block::Table(grid));
    if !calls {
        section.blocks.push(Block::Paragraph(
            "cross-CPU calls unknown: they need csd:csd_queue_cpu (kernel 6.3 or later), and this trace has none"
                .into(),
        ));
    }
    if let Some(note) = sources_note(ipis) {
        section.blocks.push(Block::Paragraph(note.into()));
    }
    Some(section)
}

/// What the trace's IPI events could not say, when it has only the older ones.
fn sources_note(ipis: &[IpiPhase]) -> Option<String> {
    let raised = ipis.iter().any(|p| p.counted_from == "ipi_raise");
    let unsent = ipis.iter().all(|p| p.counted_from.is_empty())
        && ipis.iter().any(|p| !p.handlers.is_empty());
    if raised {
        Some(
            "IPIs counted from ipi_raise: this trace has no ipi_send_cpu/cpumask (kernel 6.5 or later), so call sites and callbacks are unknown and each IPI is named by its reason"
                .to_string(),
        )
    } else if unsent {
        Some(
            "who sent these IPIs is unknown: it needs ipi_send_cpu/cpumask (kernel 6.5 or later) or ipi_raise (ARM), and this trace has only the targets' handlers"
                .to_string(),
        )
    } else {
        None
    }
}

/// The functions the targets ran for the phase's cross-CPU calls (csd_function_*), else
/// the IPI handlers by reason (older kernels).
fn victim_work(phase: &IpiPhase) -> String {
    let work = if phase.victim_work.is_empty() {
        &phase.handlers
    } else {
        &phase.victim_work
    };
    let mut parts: Vec<String> = work
        .iter()
        .take(IPI_TOP)
        .map(|w| {
            format!(
                "{}: {} in {}",
                w.function,
                units::duration(w.total_ns),
                units::count(w.calls)
            )
        })
        .collect();
    if work.len() > IPI_TOP {
        parts.push(format!("{} more", work.len() - IPI_TOP));
    }
    parts.join("; ")
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
            if !site.reason.is_empty() {
                return format!("{}: {}", site.reason, units::count(site.ipis));
            }
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
