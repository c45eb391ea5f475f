//! `--runs K`: independent runs of one sweep, merged per point, as hyperfine repeats a
//! command. A run's samples share its VM, its threads' placement and whatever state the
//! host was in; samples from K runs show what a run-to-run change costs, which no number
//! of samples inside one run can (docs/repeatability.md).

use vmscale_stats::compare::{repetition, Statistic};
use vmscale_stats::Summary;

use crate::schema::{Phase, Point, RunPart, Series};

/// Significance at which two runs of one configuration are said to disagree.
const DISAGREE_ALPHA: f64 = 0.01;
/// And the least difference that is worth a warning, as `compare`'s default noise.
const DISAGREE_AT_LEAST: f64 = 0.05;

/// Merges the points of independent runs of the same sweep: per point and series, the
/// samples of every run in run order, each run's part recorded in [`Series::runs`]. A
/// series missing from some run keeps the runs that have it.
pub fn merge(mut runs: Vec<Vec<Point>>) -> Vec<Point> {
    if runs.len() <= 1 {
        return runs.pop().unwrap_or_default();
    }
    let mut merged = runs[0].clone();
    for point in &mut merged {
        for series in &mut point.series {
            let parts: Vec<&Series> = runs
                .iter()
                .filter_map(|run| run.iter().find(|p| p.n == point.n))
                .filter_map(|p| p.series.iter().find(|s| s.name == series.name))
                .collect();
            *series = merge_series(&parts);
        }
    }
    runs.clear();
    merged
}

fn merge_series(parts: &[&Series]) -> Series {
    let first = parts[0];
    let mut out = Series {
        name: first.name.clone(),
        sample_is: first.sample_is.clone(),
        sample_x_is: first.sample_x_is.clone(),
        vmm_tids: first.vmm_tids.clone(),
        ..Series::default()
    };
    let timed = parts
        .iter()
        .all(|s| s.sample_start_ns.len() == s.samples_ns.len());
    for part in parts {
        out.runs.push(RunPart {
            samples: part.samples_ns.len(),
            p50_ns: part.summary.as_ref().map_or(0, |s| s.p50_ns),
        });
        out.samples_ns.extend(&part.samples_ns);
        out.sample_x.extend(&part.sample_x);
        out.task_windows.extend(&part.task_windows);
        out.timed_calls.extend(&part.timed_calls);
        if timed {
            out.sample_start_ns.extend(&part.sample_start_ns);
        }
        for (name, value) in &part.kvm_stats {
            *out.kvm_stats.entry(name.clone()).or_default() += value;
        }
        if out.vcpu_progress.len() < part.vcpu_progress.len() {
            out.vcpu_progress.resize(part.vcpu_progress.len(), 0);
        }
        for (sum, v) in out.vcpu_progress.iter_mut().zip(&part.vcpu_progress) {
            *sum += v;
        }
        for note in &part.notes {
            if !out.notes.contains(note) {
                out.notes.push(note.clone());
            }
        }
    }
    if out.sample_x.len() != out.samples_ns.len() {
        out.sample_x.clear();
    }
    out.phases = first
        .phases
        .iter()
        .map(|phase| {
            let samples: Vec<u64> = parts
                .iter()
                .flat_map(|s| s.phases.iter().find(|p| p.name == phase.name))
                .flat_map(|p| p.samples_ns.iter().copied())
                .collect();
            Phase::new(&phase.name, samples)
        })
        .filter(|p| p.samples_ns.len() == out.samples_ns.len())
        .collect();
    out.summary = Summary::from_samples(&out.samples_ns);
    if let Some(spread) = run_spread(&out) {
        let p50s: Vec<String> = out
            .runs
            .iter()
            .map(|r| vmscale_stats::units::duration(r.p50_ns))
            .collect();
        out.notes.insert(
            0,
            format!(
                "{} independent runs, p50 {}: run-to-run spread {:.0}% of their median (the distribution above pools them)",
                out.runs.len(),
                p50s.join(", "),
                spread * 100.0
            ),
        );
    }
    out
}

/// Each run's samples of a merged series, in run order.
pub fn run_samples(series: &Series) -> Vec<&[u64]> {
    let mut at = 0;
    series
        .runs
        .iter()
        .map(|run| {
            let end = (at + run.samples).min(series.samples_ns.len());
            let part = &series.samples_ns[at.min(end)..end];
            at = end;
            part
        })
        .collect()
}

/// The run-to-run spread of a merged series: the range of its runs' p50s as a fraction of
/// their median. None for a single run.
pub fn run_spread(series: &Series) -> Option<f64> {
    if series.runs.len() < 2 {
        return None;
    }
    let mut p50s: Vec<u64> = series.runs.iter().map(|r| r.p50_ns).collect();
    p50s.sort_unstable();
    let middle = p50s.len() / 2;
    let median = if p50s.len().is_multiple_of(2) {
        (p50s[middle - 1] + p50s[middle]) as f64 / 2.0
    } else {
        p50s[middle] as f64
    };
    (median > 0.0).then(|| (p50s[p50s.len() - 1] - p50s[0]) as f64 / median)
}

/// Series whose runs disagree beyond their own noise: the fastest and the slowest run (by
/// p50) differ by more than either run's blocks differ among themselves, by the same block
/// test `compare` uses. One line each, for the run's warnings.
pub fn disagreements(scenario: &str, sweep: &str, points: &[Point]) -> Vec<String> {
    let mut warnings = Vec::new();
    for point in points {
        for series in &point.series {
            let parts = run_samples(series);
            if parts.len() < 2 {
                continue;
            }
            let by_p50 = |i: &usize| series.runs[*i].p50_ns;
            let (Some(low), Some(high)) = (
                (0..parts.len()).min_by_key(by_p50),
                (0..parts.len()).max_by_key(by_p50),
            ) else {
                continue;
            };
            let Ok(test) = repetition(parts[low], parts[high], Statistic::P50) else {
                continue;
            };
            if test.decided(DISAGREE_ALPHA) && test.relative.abs() > DISAGREE_AT_LEAST {
                warnings.push(format!(
                    "{scenario} {sweep}={} {}: its {} runs disagree beyond their own noise: p50 from {} (run {}) to {} (run {}), {:+.0}%, while each run's blocks vary by {:.0}% at most; the threads' placement may differ between runs (--pin, docs/repeatability.md)",
                    point.n,
                    series.name,
                    parts.len(),
                    vmscale_stats::units::duration(series.runs[low].p50_ns),
                    low + 1,
                    vmscale_stats::units::duration(series.runs[high].p50_ns),
                    high + 1,
                    test.relative * 100.0,
                    test.spread() * 100.0,
                ));
            }
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, samples: Vec<u64>) -> Series {
        Series {
            name: name.into(),
            summary: Summary::from_samples(&samples),
            phases: vec![Phase::new("only", samples.clone())],
            samples_ns: samples,
            ..Series::default()
        }
    }

    fn point(n: u64, s: Vec<Series>) -> Point {
        Point {
            n,
            vcpus_per_host_cpu: 1.0,
            series: s,
        }
    }

    /// A run's samples: a level plus up to 10% of pseudo-random noise (a fixed LCG seed per
    /// run, so runs at one level still differ sample by sample).
    fn level(ns: u64, count: u64, seed: u64) -> Vec<u64> {
        let mut x = seed;
        (0..count)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ns + (x >> 33) % (ns / 10)
            })
            .collect()
    }

    #[test]
    fn merged_runs_keep_every_sample_and_each_runs_part() {
        let a = vec![point(1, vec![series("direct", level(50_000, 200, 1))])];
        let b = vec![point(1, vec![series("direct", level(52_000, 300, 2))])];
        let merged = merge(vec![a, b]);
        let s = &merged[0].series[0];
        assert_eq!(s.samples_ns.len(), 500);
        assert_eq!(s.phases[0].samples_ns.len(), 500);
        assert_eq!(s.runs.len(), 2);
        assert_eq!(run_samples(s)[1].len(), 300);
        assert!(run_spread(s).unwrap() > 0.0);
    }

    #[test]
    fn runs_at_two_levels_are_a_disagreement_and_runs_at_one_level_are_not() {
        let same = merge(vec![
            vec![point(1, vec![series("direct", level(50_000, 400, 1))])],
            vec![point(1, vec![series("direct", level(50_000, 400, 2))])],
        ]);
        assert!(disagreements("memslot", "vcpus", &same).is_empty());
        let flipped = merge(vec![
            vec![point(1, vec![series("direct", level(50_000, 400, 3))])],
            vec![point(1, vec![series("direct", level(140_000, 400, 4))])],
        ]);
        let w = disagreements("memslot", "vcpus", &flipped);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("2 runs disagree"), "{}", w[0]);
    }
}
