//! What KVM and the guests did while a series was measured ([`crate::counters`]): the KVM
//! statistics that changed, per sample, and each point's guest progress.

use vmscale_run::RunRecord;

use crate::counters;
use crate::document::{Block, Section, Text};

/// The KVM statistics section and the vCPU progress section, each when there is any.
pub(crate) fn sections(record: &RunRecord) -> Vec<Section> {
    let mut out = Vec::new();
    if let Some(stats) = counters::kvm_stats(record) {
        out.push(Section {
            blocks: vec![Block::Table(stats)],
            ..Section::new("kvm-stats", "KVM statistics that changed, per sample")
        });
    }
    let progress = counters::vcpu_progress(record);
    if !progress.is_empty() {
        out.push(Section {
            aside: Some("guest loop iterations per vCPU while measuring".into()),
            blocks: vec![Block::Lines(progress.into_iter().map(Text::from).collect())],
            ..Section::new("progress", "vCPU progress")
        });
    }
    out
}
