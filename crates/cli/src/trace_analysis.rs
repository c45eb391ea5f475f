//! From a recorded trace directory to the trace section of a run.

use std::path::Path;

use vmscale_run::TraceSection;
use vmscale_trace::recorder::TraceMeta;

use crate::tracing::TRACE_DIR;

/// Summarises how the trace was recorded; the analyses fill in what they find.
pub fn analyse(_run_dir: &Path, meta: &TraceMeta) -> TraceSection {
    TraceSection {
        dir: TRACE_DIR.into(),
        events: meta.events.clone(),
        stacks: meta.stacks,
        buffer_kib: meta.buffer_kib,
        lost_per_cpu: meta
            .lost
            .iter()
            .map(|(cpu, l)| (cpu.clone(), l.total()))
            .collect(),
        ..TraceSection::default()
    }
}
