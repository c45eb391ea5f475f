//! How a series' latency grows with the quantity its samples record beside them
//! (`Series::sample_x`, e.g. irqfds already registered in the VM): the samples binned by x,
//! then a straight line through them.
//!
//! Two slopes are given because they answer differently to a slow tail. The least-squares
//! line goes through every raw sample, so a few very slow samples at high x can tilt it;
//! the line through the bins' medians ignores them. When both agree, either is the growth;
//! when they do not, the section says which one to read.
//!
//! Built here as cells and lines; [`crate::sections::growth`] makes them a section every
//! format lays out, so all show the same numbers.

use std::collections::BTreeSet;

use vmscale_run::{Point, RunRecord, Series};
use vmscale_stats::{linear_fit, LinearFit, Summary};

use crate::grid::{self, Grid};
use crate::units::{self, MISSING};

/// Bins per series when x takes at least this many values: enough to see a curve, few
/// enough that each bin holds a useful number of samples.
const BINS: usize = 10;

/// The slopes disagree when one is more than this many times the other (or their signs
/// differ).
const DISAGREEMENT: f64 = 2.0;

/// Two lines that part by less than this share of the median latency over the whole x
/// range describe the same (flat) series; without this floor, two slopes of pure noise
/// around zero would "disagree" by any ratio.
const NEGLIGIBLE_SHARE: f64 = 0.01;

/// One series' growth section.
pub(crate) struct Growth {
    /// Where the series is in the record: `record.points[point].series[series]`.
    pub point: usize,
    pub series: usize,
    /// "how direct grows with irqfds already registered in this VM (x), at vcpus=4".
    pub title: String,
    /// One row per non-empty bin, lowest x first; `None` when x and samples do not pair up.
    pub bins: Option<Grid>,
    /// The fitted lines and what to make of them.
    pub lines: Vec<String>,
}

/// A section for every series that recorded an x per sample, in record order.
pub(crate) fn sections(record: &RunRecord) -> Vec<Growth> {
    record
        .points
        .iter()
        .enumerate()
        .flat_map(|(i, p)| p.series.iter().enumerate().map(move |(j, s)| (i, p, j, s)))
        .filter(|(_, _, _, s)| !s.sample_x.is_empty())
        .map(|(i, point, j, series)| Growth {
            point: i,
            series: j,
            ..section(record, point, series)
        })
        .collect()
}

fn section(record: &RunRecord, point: &Point, series: &Series) -> Growth {
    let what = if series.sample_x_is.is_empty() {
        "x".to_string()
    } else {
        format!("{} (x)", series.sample_x_is)
    };
    let title = format!(
        "how {} grows with {what}, at {}={}",
        series.name,
        grid::sweep_header(record),
        point.n
    );
    let (xs, ys) = (&series.sample_x, &series.samples_ns);
    if xs.len() != ys.len() {
        // Pairing them anyway would bin latencies under the wrong x.
        return Growth {
            point: 0,
            series: 0,
            title,
            bins: None,
            lines: vec![format!(
                "not binned: {} x values for {} samples",
                xs.len(),
                ys.len()
            )],
        };
    }

    let bins = bin(xs, ys);
    let mut table = Grid::new(&[
        ("x", true),
        ("n", true),
        ("mean (us)", true),
        ("p50 (us)", true),
        ("p99 (us)", true),
        ("max (us)", true),
    ]);
    table.rows = bins.iter().map(Bin::row).collect();
    Growth {
        point: 0,
        series: 0,
        title,
        bins: Some(table),
        lines: fits(xs, ys, &bins),
    }
}

/// Samples whose x falls in `lo..=hi`.
pub(crate) struct Bin {
    lo: u64,
    hi: u64,
    /// The median x of the bin's samples, where its p50 belongs on the x axis. The middle
    /// of `lo..=hi` is the same for densely spread x but wrong for sparse x: samples at
    /// x = 0 and 10 fall in bins 0-5 and 6-10, whose middles are 5.5 apart, not 10. For
    /// latency that grows steadily with x, the median latency is the latency at the median x.
    pub median_x: f64,
    pub summary: Summary,
}

impl Bin {
    fn row(&self) -> Vec<String> {
        let range = if self.lo == self.hi {
            self.lo.to_string()
        } else {
            format!("{}-{}", self.lo, self.hi)
        };
        let s = &self.summary;
        vec![
            range,
            s.n.to_string(),
            units::micros(s.mean_ns),
            units::micros_u64(s.p50_ns),
            units::micros_u64(s.p99_ns),
            units::micros_u64(s.max_ns),
        ]
    }
}

/// The samples in up to [`BINS`] bins of equal width over `min x..=max x`, lowest first,
/// empty bins left out. Fewer bins when x takes fewer values, so that no bin is empty only
/// because it falls between two of them.
///
/// x is a count, so bins cover whole numbers: the `span` values from min to max split into
/// `count` runs whose lengths differ by at most one.
pub(crate) fn bin(xs: &[u64], ys: &[u64]) -> Vec<Bin> {
    let (Some(&min), Some(&max)) = (xs.iter().min(), xs.iter().max()) else {
        return Vec::new();
    };
    let count = distinct_up_to(xs, BINS) as u128;
    // u128: `max - min + 1` overflows u64 for the full range, and so would `offset * count`.
    let span = u128::from(max - min) + 1;
    let index = |x: u64| (u128::from(x - min) * count / span) as usize;
    // Bin k holds the x with k * span <= (x - min) * count < (k + 1) * span, that is the
    // offsets from edge(k) to edge(k + 1) - 1. edge(count) is span, which may not fit a u64,
    // so the subtraction happens before the conversion.
    let edge = |k: u128| (k * span).div_ceil(count);

    let mut members: Vec<(Vec<u64>, Vec<u64>)> = vec![(Vec::new(), Vec::new()); count as usize];
    for (&x, &y) in xs.iter().zip(ys) {
        let (bin_xs, bin_ys) = &mut members[index(x)];
        bin_xs.push(x);
        bin_ys.push(y);
    }
    members
        .into_iter()
        .enumerate()
        .filter_map(|(k, (mut bin_xs, bin_ys))| {
            let k = k as u128;
            let summary = Summary::from_samples(&bin_ys)?;
            bin_xs.sort_unstable();
            Some(Bin {
                lo: min + edge(k) as u64,
                hi: min + (edge(k + 1) - 1) as u64,
                median_x: median(&bin_xs),
                summary,
            })
        })
        .collect()
}

/// The median of sorted, non-empty `values`; the mean of the middle two for an even count.
fn median(values: &[u64]) -> f64 {
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid] as f64
    } else {
        (values[mid - 1] as f64 + values[mid] as f64) / 2.0
    }
}

/// How many distinct values `xs` holds, counting no further than `limit`.
fn distinct_up_to(xs: &[u64], limit: usize) -> usize {
    let mut seen = BTreeSet::new();
    for &x in xs {
        seen.insert(x);
        if seen.len() == limit {
            break;
        }
    }
    seen.len()
}

/// The least-squares line over every sample, the line through the bin medians, and which
/// to trust when they disagree.
fn fits(xs: &[u64], ys: &[u64], bins: &[Bin]) -> Vec<String> {
    let as_f64 = |values: &[u64]| values.iter().map(|&v| v as f64).collect::<Vec<f64>>();
    let Some(raw) = linear_fit(&as_f64(xs), &as_f64(ys)) else {
        let x = xs.first().map_or(MISSING.to_string(), u64::to_string);
        return vec![format!("every sample has x = {x}: no slope to fit")];
    };
    let mut lines = vec![format!(
        "least squares over all {} samples: {} ns per x, intercept {} us, R^2 {:.2}",
        raw.n,
        signed(raw.slope),
        units::micros(raw.intercept),
        raw.r_squared
    )];

    let median_xs: Vec<f64> = bins.iter().map(|b| b.median_x).collect();
    let medians: Vec<f64> = bins.iter().map(|b| b.summary.p50_ns as f64).collect();
    // With two distinct x there are at least two bins (min and max fill the first and the
    // last), so this line exists; the check keeps that an assumption rather than a panic.
    let Some(robust) = linear_fit(&median_xs, &medians) else {
        return lines;
    };
    lines.push(format!(
        "slope of the bin medians: {} ns per x",
        signed(robust.slope)
    ));
    // The first and last bins are never empty, so they span min x to max x.
    let span = match (bins.first(), bins.last()) {
        (Some(first), Some(last)) => (last.hi - first.lo) as f64,
        _ => 0.0,
    };
    let median = Summary::from_samples(ys).map_or(0.0, |s| s.p50_ns as f64);
    if disagree(&raw, &robust, span, median) {
        lines.push(format!(
            "the two slopes differ by more than {DISAGREEMENT}x: the mean is driven by \
             outliers, so trust the slope of the bin medians"
        ));
    }
    lines
}

/// Whether the slopes differ by more than [`DISAGREEMENT`] times, or in sign, by enough
/// to matter over the x range at the series' median latency.
fn disagree(raw: &LinearFit, robust: &LinearFit, span: f64, median: f64) -> bool {
    let (a, b) = (raw.slope, robust.slope);
    if (a - b).abs() * span < NEGLIGIBLE_SHARE * median {
        return false;
    }
    let (small, large) = (a.abs().min(b.abs()), a.abs().max(b.abs()));
    a.signum() != b.signum() || large > DISAGREEMENT * small
}

/// A slope with its sign always shown: "+2.01", "-0.0031", "+1234".
fn signed(slope: f64) -> String {
    let sign = if slope < 0.0 { '-' } else { '+' };
    format!("{sign}{}", units::significant(slope.abs(), 3, 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(xs: &[u64]) -> Vec<(u64, u64, u64)> {
        let ys = vec![1_000; xs.len()];
        bin(xs, &ys)
            .iter()
            .map(|b| (b.lo, b.hi, b.summary.n))
            .collect()
    }

    #[test]
    fn ten_bins_of_whole_numbers_cover_the_range() {
        let xs: Vec<u64> = (0..1_000).collect();
        let bins = ranges(&xs);
        assert_eq!(bins.len(), 10);
        assert_eq!(bins[0], (0, 99, 100));
        assert_eq!(bins[9], (900, 999, 100));
        for pair in bins.windows(2) {
            assert_eq!(pair[0].1 + 1, pair[1].0, "{bins:?}");
        }
    }

    #[test]
    fn few_distinct_x_give_few_bins_and_empty_bins_are_left_out() {
        assert_eq!(ranges(&[0, 5, 10, 10]), [(0, 3, 1), (4, 7, 1), (8, 10, 2)]);
        // Three values, three bins, the middle one empty.
        assert_eq!(ranges(&[0, 1, 10]), [(0, 3, 2), (8, 10, 1)]);
        assert_eq!(ranges(&[7, 7]), [(7, 7, 2)]);
    }

    #[test]
    fn the_full_u64_range_does_not_overflow() {
        let bins = ranges(&[0, u64::MAX / 2, u64::MAX]);
        assert_eq!(bins.len(), 3);
        assert_eq!(bins[0].0, 0);
        assert_eq!(bins[2].1, u64::MAX);
    }

    #[test]
    fn a_bin_sits_at_the_median_x_of_its_samples() {
        let bins = bin(&[0, 0, 1, 10, 10], &[1; 5]);
        let at: Vec<f64> = bins.iter().map(|b| b.median_x).collect();
        assert_eq!(at, [0.0, 10.0]);
        let bins = bin(&(0..100).collect::<Vec<u64>>(), &[1; 100]);
        assert_eq!(bins[0].median_x, 4.5, "the middle of 0-9 for dense x");
    }

    #[test]
    fn slopes_show_their_sign() {
        assert_eq!(signed(2.0123), "+2.01");
        assert_eq!(signed(-0.00312), "-0.0031");
        assert_eq!(signed(1_234.4), "+1234");
        assert_eq!(signed(0.0), "+0");
    }

    #[test]
    fn near_flat_slopes_of_noise_do_not_disagree() {
        let fit = |slope| LinearFit {
            slope,
            intercept: 0.0,
            r_squared: 0.0,
            n: 2,
        };
        // Opposite signs, but 0.2 ns apart over 1000 x is nothing at 10 us.
        assert!(!disagree(&fit(1e-4), &fit(-1e-4), 1_000.0, 10_000.0));
        assert!(disagree(&fit(5.0), &fit(2.0), 1_000.0, 10_000.0));
        assert!(!disagree(&fit(3.0), &fit(2.0), 1_000.0, 10_000.0));
        assert!(disagree(&fit(-2.0), &fit(2.0), 1_000.0, 10_000.0));
    }
}
