//! Flame graphs: the on-CPU samples (the whole run's, and what grew from the smallest to
//! the largest swept value) and the time off a CPU by wait chain. Only HTML draws them;
//! `vmscale export --folded` and `--pprof` give the same stacks to other tools.

use vmscale_run::RunRecord;

use crate::document::{Block, Figure, Section};

/// The flame graphs' section, where the run was sampled or its trace explains time off a
/// CPU.
pub(crate) fn section(record: &RunRecord) -> Option<Section> {
    let trace = record.trace.as_ref()?;
    let off_cpu = off_cpu(trace);
    let Some(profile) = trace.on_cpu.as_ref() else {
        let mut section = Section::new("flame", "off-CPU flame graph");
        let sub = off_cpu?;
        section.aside = sub.aside;
        section.blocks = sub.blocks;
        return Some(section);
    };
    let mut section = Section::new("flame", "on-CPU flame graph");
    section.aside = Some(format!(
        "{} samples at {} Hz per CPU ({:.3} s of CPU time): {}",
        profile.samples,
        profile.hz,
        profile.samples as f64 * profile.period_ns as f64 / 1e9,
        profile.scope
    ));
    if profile.samples == 0 {
        section.blocks.push(Block::Paragraph(
            "No task other than the idle one was sampled on a CPU while the trace was on.".into(),
        ));
        section.blocks.extend(off_cpu.map(Block::Section));
        return Some(section);
    }
    section.blocks.push(Block::Figure(Figure::Flame));
    if let [small, large] = trace.on_cpu_by_n.as_slice() {
        if small.profile.samples > 0 && large.profile.samples > 0 {
            let mut diff = Section::new(
                "",
                format!(
                    "what grew from {} = {} to {}",
                    crate::grid::sweep_header(record),
                    small.n,
                    large.n
                ),
            );
            diff.aside = Some(format!(
                "{} samples over {:.1} ms at {} against {} over {:.1} ms at {}; widths are the larger value's, colours the change of each frame's share",
                large.profile.samples,
                large.span_ns as f64 / 1e6,
                large.n,
                small.profile.samples,
                small.span_ns as f64 / 1e6,
                small.n
            ));
            diff.blocks.push(Block::Figure(Figure::FlameDiff));
            section.blocks.push(Block::Section(diff));
        }
    }
    section.blocks.extend(off_cpu.map(Block::Section));
    Some(section)
}

/// The time off a CPU by wait chain, where the trace explains any.
fn off_cpu(trace: &vmscale_run::TraceSection) -> Option<Section> {
    let profile = vmscale_run::wait_chains::profile(trace)?;
    let mut section = Section::new("", "time off a CPU, by wait chain");
    section.aside = Some(format!(
        "{:.3} ms of waiting: whose time, what it waited in, who ended the wait or held the \
         CPU, then what that task did meanwhile",
        profile.samples as f64 / 1e3
    ));
    section.blocks.push(Block::Figure(Figure::FlameOffCpu));
    Some(section)
}
