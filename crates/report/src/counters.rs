//! What KVM and the guests did while a series was measured: KVM statistics deltas per
//! sample and guest progress per vCPU. These explain the latency numbers rather than being
//! them, so the terminal table and the HTML page show them (in compact form, as the section
//! [`crate::sections::counters`]) and Markdown leaves them out.

use vmscale_run::{RunRecord, Series};

use crate::grid::{self, Grid};
use crate::units;

/// Counters shown per (point, series); the rest are summarised as "(N more)".
const TOP_COUNTERS: usize = 5;

/// One row per shown counter, the point and strategy written only on a group's first row,
/// or `None` when no series recorded a changed counter.
pub(crate) fn kvm_stats(record: &RunRecord) -> Option<Grid> {
    let sweep = grid::sweep_header(record);
    let mut grid = Grid::new(&[
        (sweep, true),
        ("strategy", false),
        ("counter", false),
        ("per sample", true),
    ]);
    for point in &record.points {
        for series in &point.series {
            let shown = top_counters(series);
            let hidden = changed(series).count().saturating_sub(shown.len());
            for (i, (name, value)) in shown.into_iter().enumerate() {
                let (n, strategy) = if i == 0 {
                    (point.n.to_string(), series.name.clone())
                } else {
                    (String::new(), String::new())
                };
                grid.rows.push(vec![n, strategy, name, value]);
            }
            if hidden > 0 {
                grid.rows.push(vec![
                    String::new(),
                    String::new(),
                    format!("({hidden} more)"),
                    String::new(),
                ]);
            }
        }
    }
    (!grid.rows.is_empty()).then_some(grid)
}

fn changed(series: &Series) -> impl Iterator<Item = (&String, &u64)> {
    series.kvm_stats.iter().filter(|(_, delta)| **delta > 0)
}

/// The counters most worth reading, with their per-sample value. Event counters (exits,
/// TLB flushes, IPIs) come before `_ns` time accumulators: the events explain a latency
/// while the times, being in nanoseconds, would otherwise always rank first.
fn top_counters(series: &Series) -> Vec<(String, String)> {
    let mut counters: Vec<(&String, &u64)> = changed(series).collect();
    counters.sort_by_key(|(name, delta)| (name.ends_with("_ns"), std::cmp::Reverse(**delta)));
    let samples = series.samples_ns.len();
    counters
        .into_iter()
        .take(TOP_COUNTERS)
        .map(|(name, &delta)| {
            let value = if samples == 0 {
                format!("{delta} (total)")
            } else {
                units::per_sample(delta as f64 / samples as f64)
            };
            (name.clone(), value)
        })
        .collect()
}

/// One line per point whose guests spin: the least and most iterations any vCPU made and
/// whether every vCPU advanced. A vCPU that made none while others did was starved.
pub(crate) fn vcpu_progress(record: &RunRecord) -> Vec<String> {
    record
        .points
        .iter()
        .filter_map(|point| {
            let parts: Vec<String> = point
                .series
                .iter()
                .filter_map(|series| progress(series).map(|p| format!("{}: {p}", series.name)))
                .collect();
            (!parts.is_empty()).then(|| {
                format!(
                    "{}={}  {}",
                    grid::sweep_header(record),
                    point.n,
                    parts.join("; ")
                )
            })
        })
        .collect()
}

/// `None` for halted guests, which report zero progress on every vCPU by design.
fn progress(series: &Series) -> Option<String> {
    let iterations = &series.vcpu_progress;
    let min = *iterations.iter().min()?;
    let max = *iterations.iter().max()?;
    if max == 0 {
        return None;
    }
    let stalled = iterations.iter().filter(|&&i| i == 0).count();
    let verdict = if stalled == 0 && iterations.len() == 1 {
        "the vCPU advanced".to_string()
    } else if stalled == 0 {
        format!("all {} vCPUs advanced", iterations.len())
    } else {
        format!("{stalled} of {} vCPUs made NO progress", iterations.len())
    };
    Some(format!(
        "min {} max {} iterations/vCPU, {verdict}",
        units::count(min),
        units::count(max)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series_with(stats: &[(&str, u64)], samples: usize, progress: Vec<u64>) -> Series {
        Series {
            name: "direct".into(),
            sample_is: String::new(),
            samples_ns: vec![1_000; samples],
            summary: None,
            phases: Vec::new(),
            kvm_stats: stats.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            vcpu_progress: progress,
            ..Series::default()
        }
    }

    #[test]
    fn counters_are_per_sample_events_first() {
        let series = series_with(
            &[
                ("vcpu.halt_wait_ns", 9_000_000),
                ("vm.remote_tlb_flush", 10),
                ("vcpu.exits", 40),
                ("vcpu.unchanged", 0),
            ],
            10,
            Vec::new(),
        );
        let top = top_counters(&series);
        let names: Vec<&str> = top.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["vcpu.exits", "vm.remote_tlb_flush", "vcpu.halt_wait_ns"]
        );
        assert_eq!(top[1].1, "1.0");
    }

    #[test]
    fn progress_flags_starved_vcpus_and_skips_halted_guests() {
        let starved = series_with(&[], 1, vec![1_500_000, 0, 2_000_000]);
        let line = progress(&starved).unwrap();
        assert!(line.contains("1 of 3 vCPUs made NO progress"), "{line}");
        assert!(line.contains("max 2.00M"), "{line}");
        assert_eq!(progress(&series_with(&[], 1, vec![0, 0])), None);
        assert_eq!(progress(&series_with(&[], 1, Vec::new())), None);
    }
}
