//! The report's sections built as data ([`crate::document`]) from the run record, each once
//! for every format.
//!
//! - [`verdict`]: what the explained time went to, first in every output.
//! - [`context`]: what ran, where, how busy the host was, and the warnings.
//! - [`latency`]: the distribution per point and strategy, with the series' notes.
//! - [`scaling`]: how latency scales with the swept value, the best model per series.
//! - [`phases`]: where the time of a sample goes.
//! - [`growth`]: how latency grows with what each sample counted.
//! - [`counters`]: the KVM statistics that changed and the guests' progress.
//! - [`vmm`]: what a VMM the run drove did per sample (its ioctls, its vCPUs' holds).
//! - [`trace`]: the kernel trace: how it was recorded, [`contention`], [`ipis`] and
//!   [`explain`], and the timeline of the worst wait.
//!
//! Charts are [`crate::document::Figure`]s in these sections: HTML draws them, and the
//! blocks beside them carry their numbers for the other formats.

pub(crate) mod contention;
pub(crate) mod context;
pub(crate) mod counters;
pub(crate) mod explain;
pub(crate) mod flame;
pub(crate) mod growth;
pub(crate) mod ipis;
pub(crate) mod latency;
pub(crate) mod phases;
pub(crate) mod scaling;
pub(crate) mod trace;
pub(crate) mod verdict;
pub(crate) mod vmm;

/// The sections under the run's context, in the reading order of the terminal and Markdown
/// renderings, leaving out those that are only charts; `with_counters` keeps the KVM
/// counters, which Markdown leaves out.
pub(crate) fn body(
    record: &vmscale_run::RunRecord,
    deadline_ns: Option<f64>,
    with_counters: bool,
) -> Vec<crate::document::Section> {
    let counters_sections = if with_counters {
        counters::sections(record)
    } else {
        Vec::new()
    };
    latency::section(record)
        .into_iter()
        .chain(growth::sections(record))
        .chain(scaling::section(record, deadline_ns))
        .chain(phases::section(record))
        .chain(counters_sections)
        .chain(vmm::section(record))
        .chain(record.trace.as_ref().map(trace::section))
        .filter(|s| !s.is_drawing())
        .collect()
}
