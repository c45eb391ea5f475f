//! Latency summaries.
//!
//! Every vmscale result is a set of raw samples in nanoseconds. A [`Summary`] condenses
//! them into the row every report prints: n, mean, stdev, min, p50, p90, p99, p99.9, max.
//!
//! Moments and extremes are computed exactly from the raw samples. Percentiles come from an
//! HdrHistogram with three significant digits, which keeps them within 0.1% of the exact
//! order statistic from 1 ns up to an hour, while costing a fixed amount of memory however
//! many samples a run produces (the histogram is what later streaming passes will reuse).
//!
//! [`linear_fit`] fits a straight line through (x, latency) pairs, for latencies that grow
//! with something the run counts (objects already registered, slots in use).
//!
//! - [`growth`]: how a statistic grows with N, claimed (grows, flat, falls, varies,
//!   inconclusive) from every sample with its interval; [`fit`] and [`knee`] give its shape
//!   where one fits.
//! - [`compare`]: whether B differs from A, judged between runs or blocks of a run.
//! - [`special`]: the normal, t, chi-square and binomial distributions those need.

pub mod compare;
pub mod fit;
pub mod growth;
pub mod knee;
pub mod special;
pub mod units;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The largest value the histogram tracks exactly (one hour); longer samples saturate.
const HIGHEST_TRACKABLE_NS: u64 = 3_600 * 1_000_000_000;
/// Three significant digits: 0.1% relative error on every percentile.
const SIGNIFICANT_DIGITS: u8 = 3;

/// An estimate with the ends of its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

/// Which statistic a change is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Statistic {
    P50,
    P99,
    Mean,
}

impl Statistic {
    pub fn name(self) -> &'static str {
        match self {
            Statistic::P50 => "p50",
            Statistic::P99 => "p99",
            Statistic::Mean => "mean",
        }
    }

    /// The statistic of `sorted` (ascending, not empty).
    pub fn of(self, sorted: &[u64]) -> f64 {
        match self {
            Statistic::P50 => quantile(sorted, 0.50),
            Statistic::P99 => quantile(sorted, 0.99),
            Statistic::Mean => sorted.iter().map(|&v| v as f64).sum::<f64>() / sorted.len() as f64,
        }
    }
}

/// The seed of every bootstrap ("vmscale" in ASCII), so the same run always prints the
/// same intervals.
pub const BOOTSTRAP_SEED: u64 = 0x0076_6d73_6361_6c65;

/// Nearest-rank quantile of an ascending, non-empty slice: always one of the samples, as
/// the bootstrap's resampled statistics must be.
pub fn quantile(sorted: &[u64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64
}

/// The distribution of one set of latency samples, all in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: u64,
    pub mean_ns: f64,
    /// Sample standard deviation (n - 1 in the denominator); 0 for a single sample.
    pub stdev_ns: f64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

impl Summary {
    /// Summarises `samples`; `None` when there are none, since an empty distribution has
    /// no percentiles and inventing zeros would read as a measurement.
    pub fn from_samples(samples: &[u64]) -> Option<Summary> {
        let mut streaming = StreamingSummary::default();
        samples.iter().for_each(|&v| streaming.record(v));
        streaming.summary()
    }

    /// Summarises values known only by their count, exact total, extremes and a log2
    /// histogram (`buckets[b]` values in [2^b, 2^(b+1)), bucket 0 holding 0 and 1), as a
    /// kernel-side aggregation keeps them. The mean is exact; the percentiles are
    /// interpolated within their bucket (so within a factor of 2, clamped to the
    /// extremes) and the deviation is taken from the buckets' midpoints.
    pub fn from_log2_histogram(
        count: u64,
        total: u64,
        min: u64,
        max: u64,
        buckets: &[u64],
    ) -> Option<Summary> {
        let n: u64 = buckets.iter().sum();
        if count == 0 || n == 0 {
            return None;
        }
        let (min, max) = (min.min(max), max.max(min));
        let edges = |b: usize| -> (f64, f64) {
            let low = if b == 0 { 0.0 } else { (1u128 << b) as f64 };
            (low, (1u128 << (b + 1)) as f64)
        };
        let quantile = |q: f64| -> u64 {
            let rank = q * n as f64;
            let mut below = 0u64;
            for (b, &in_bucket) in buckets.iter().enumerate() {
                if in_bucket == 0 {
                    continue;
                }
                if (below + in_bucket) as f64 >= rank {
                    let (low, high) = edges(b);
                    let within = ((rank - below as f64) / in_bucket as f64).clamp(0.0, 1.0);
                    let value = (low + within * (high - low)).round() as u64;
                    return value.clamp(min, max);
                }
                below += in_bucket;
            }
            max
        };
        let mean = total as f64 / count as f64;
        let m2: f64 = buckets
            .iter()
            .enumerate()
            .filter(|(_, &k)| k > 0)
            .map(|(b, &k)| {
                let (low, high) = edges(b);
                let mid = ((low + high) / 2.0).clamp(min as f64, max as f64);
                k as f64 * (mid - mean) * (mid - mean)
            })
            .sum();
        Some(Summary {
            n: count,
            mean_ns: mean,
            stdev_ns: if n > 1 {
                (m2 / (n - 1) as f64).sqrt()
            } else {
                0.0
            },
            min_ns: min,
            p50_ns: quantile(0.50),
            p90_ns: quantile(0.90),
            p99_ns: quantile(0.99),
            p999_ns: quantile(0.999),
            max_ns: max,
        })
    }
}

/// A summary built one value at a time in constant memory, for streaming analyses whose
/// memory must not grow with the number of events (one per lock, not one per wait).
#[derive(Debug, Clone)]
pub struct StreamingSummary {
    /// The values themselves while they are few (most locks of a trace are contended a
    /// handful of times), then a histogram of them: a thousand locks cost kilobytes each
    /// instead of a histogram each.
    values: Values,
    n: u64,
    mean: f64,
    m2: f64,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for StreamingSummary {
    fn default() -> Self {
        StreamingSummary {
            values: Values::Few(Vec::new()),
            n: 0,
            mean: 0.0,
            m2: 0.0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }
}

impl StreamingSummary {
    pub fn record(&mut self, value: u64) {
        match &mut self.values {
            Values::Few(few) if few.len() < FEW_VALUES => few.push(value),
            Values::Few(few) => {
                let mut histogram = new_histogram();
                few.iter().for_each(|&v| record_in(&mut histogram, v));
                record_in(&mut histogram, value);
                self.values = Values::Many(histogram);
            }
            Values::Many(histogram) => record_in(histogram, value),
        }
        // Welford's update: stable for millions of samples with a large common offset.
        self.n += 1;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        self.sum += value as u128;
        let delta = value as f64 - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (value as f64 - self.mean);
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    /// Exact sum of every recorded value.
    pub fn total(&self) -> u64 {
        self.sum.min(u64::MAX as u128) as u64
    }

    /// The same statistics [`Summary::from_samples`] gives for the same values.
    pub fn summary(&self) -> Option<Summary> {
        if self.n == 0 {
            return None;
        }
        // Few values go through a histogram too, so a summary does not depend on how many
        // values there were. The histogram reports a bucket's upper edge; the exact
        // extremes bound every percentile so that p99 can never print above max.
        let built;
        let histogram = match &self.values {
            Values::Many(histogram) => histogram,
            Values::Few(few) => {
                let mut h = new_histogram();
                few.iter().for_each(|&v| record_in(&mut h, v));
                built = h;
                &built
            }
        };
        let quantile = |q: f64| histogram.value_at_quantile(q).clamp(self.min, self.max);
        Some(Summary {
            n: self.n,
            mean_ns: self.mean,
            stdev_ns: if self.n > 1 {
                (self.m2 / (self.n - 1) as f64).sqrt()
            } else {
                0.0
            },
            min_ns: self.min,
            p50_ns: quantile(0.50),
            p90_ns: quantile(0.90),
            p99_ns: quantile(0.99),
            p999_ns: quantile(0.999),
            max_ns: self.max,
        })
    }
}

/// A straight line fitted by least squares: `y = intercept + slope * x`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearFit {
    pub slope: f64,
    pub intercept: f64,
    /// The share of the variance of y that the line explains: 1 when every point lies on
    /// it, near 0 when x says nothing about y. A constant y counts as 1, since the flat
    /// line through it misses no point.
    pub r_squared: f64,
    /// Points fitted.
    pub n: u64,
}

/// The least-squares line through the points `(xs[i], ys[i])`.
///
/// `None` when the slices differ in length (the points would be mispaired), when a value is
/// not finite, or when there are fewer than two distinct x: a single x fixes no slope.
pub fn linear_fit(xs: &[f64], ys: &[f64]) -> Option<LinearFit> {
    if xs.len() != ys.len() || xs.iter().chain(ys).any(|v| !v.is_finite()) {
        return None;
    }
    // Compared directly rather than through the spread around the mean: the mean of equal
    // values can round away from them and leave a tiny spread that would fit a huge slope.
    let first = *xs.first()?;
    if xs.iter().all(|&x| x == first) {
        return None;
    }
    let n = xs.len() as f64;
    let mean_x = xs.iter().sum::<f64>() / n;
    let mean_y = ys.iter().sum::<f64>() / n;
    // Sums of centred products (a second pass) instead of sum(x * y) - n * mean_x * mean_y,
    // which cancels catastrophically when the values are large and their spread small.
    let (mut sxx, mut sxy, mut syy) = (0.0, 0.0, 0.0);
    for (&x, &y) in xs.iter().zip(ys) {
        let (dx, dy) = (x - mean_x, y - mean_y);
        sxx += dx * dx;
        sxy += dx * dy;
        syy += dy * dy;
    }
    let slope = sxy / sxx;
    let r_squared = if syy == 0.0 {
        1.0
    } else {
        // Equal to 1 - residual / total sum of squares for a least-squares line; the clamp
        // only absorbs rounding.
        (sxy * sxy / (sxx * syy)).clamp(0.0, 1.0)
    };
    Some(LinearFit {
        slope,
        intercept: mean_y - slope * mean_x,
        r_squared,
        n: xs.len() as u64,
    })
}

/// Values a [`StreamingSummary`] keeps as they are before it switches to a histogram.
const FEW_VALUES: usize = 256;

#[derive(Debug, Clone)]
enum Values {
    Few(Vec<u64>),
    Many(Histogram<u64>),
}

/// `record` grows the histogram (auto-resize) where `saturating_record` would clamp to its
/// current range; the cap keeps the hour-long saturation point.
fn record_in(histogram: &mut Histogram<u64>, value: u64) {
    let capped = value.clamp(1, HIGHEST_TRACKABLE_NS);
    if histogram.record(capped).is_err() {
        histogram.saturating_record(capped);
    }
}

/// A histogram covering 1 ns to one hour at three significant digits.
pub fn new_histogram() -> Histogram<u64> {
    // Sized for values up to a millisecond and grown to the largest value recorded (up to
    // HIGHEST_TRACKABLE_NS, where `record` saturates): an analysis keeps one per lock, and
    // a trace with a thousand contended locks would otherwise hold 260 KiB for each, as
    // the full hour's range takes up front.
    let mut histogram = Histogram::new_with_bounds(1, INITIAL_TRACKABLE_NS, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid");
    histogram.auto(true);
    histogram
}

/// The range a histogram covers before it first grows.
const INITIAL_TRACKABLE_NS: u64 = 1_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log2_histogram_summarises_within_its_buckets() {
        // 90 waits of about 1 us (bucket 9: 512..1024) and 10 of about 1 ms (bucket 19).
        let mut buckets = vec![0u64; 40];
        buckets[9] = 90;
        buckets[19] = 10;
        let total = 90 * 800 + 10 * 900_000;
        let s = Summary::from_log2_histogram(100, total, 600, 1_000_000, &buckets).unwrap();
        assert_eq!(s.n, 100);
        assert_eq!(s.mean_ns, total as f64 / 100.0);
        assert!((512..1024).contains(&s.p50_ns), "{s:?}");
        assert!((524_288..=1_000_000).contains(&s.p99_ns), "{s:?}");
        assert!(s.p90_ns <= s.p99_ns && s.p99_ns <= s.max_ns && s.min_ns <= s.p50_ns);
        assert!(s.stdev_ns > 0.0);
        assert!(Summary::from_log2_histogram(0, 0, 0, 0, &buckets).is_none());
        assert!(Summary::from_log2_histogram(1, 5, 5, 5, &[0; 40]).is_none());
        // One value: every statistic is it (the extremes clamp the bucket).
        let mut one = vec![0u64; 40];
        one[2] = 1;
        let s = Summary::from_log2_histogram(1, 5, 5, 5, &one).unwrap();
        assert_eq!((s.p50_ns, s.p999_ns, s.stdev_ns), (5, 5, 0.0));
    }

    #[test]
    fn percentiles_are_the_histograms_whether_values_are_few_or_many() {
        for count in [1u64, 7, FEW_VALUES as u64, FEW_VALUES as u64 + 1, 5_000] {
            let values: Vec<u64> = (0..count)
                .map(|i| 1_000 + (i * 7_919) % 3_000_000)
                .collect();
            let mut streaming = StreamingSummary::default();
            let mut direct = new_histogram();
            for &v in &values {
                streaming.record(v);
                record_in(&mut direct, v);
            }
            let s = streaming.summary().unwrap();
            let (min, max) = (*values.iter().min().unwrap(), *values.iter().max().unwrap());
            let at = |q: f64| direct.value_at_quantile(q).clamp(min, max);
            assert_eq!(
                (s.p50_ns, s.p90_ns, s.p99_ns, s.p999_ns),
                (at(0.5), at(0.9), at(0.99), at(0.999)),
                "{count} values"
            );
            assert_eq!((s.n, s.min_ns, s.max_ns), (count, min, max));
        }
    }

    fn within_tenth_of_percent(actual: u64, expected: u64) -> bool {
        let tolerance = (expected as f64 * 0.001).max(1.0);
        (actual as f64 - expected as f64).abs() <= tolerance
    }

    #[test]
    fn empty_input_has_no_summary() {
        assert_eq!(Summary::from_samples(&[]), None);
    }

    #[test]
    fn single_sample_is_every_statistic() {
        let s = Summary::from_samples(&[12_345]).unwrap();
        assert_eq!(s.n, 1);
        assert_eq!(s.mean_ns, 12_345.0);
        assert_eq!(s.stdev_ns, 0.0);
        assert_eq!(
            [s.min_ns, s.p50_ns, s.p90_ns, s.p99_ns, s.p999_ns, s.max_ns],
            [12_345; 6]
        );
    }

    #[test]
    fn moments_match_hand_computation() {
        // 2, 4, 4, 4, 5, 5, 7, 9 (us): mean 5, sum of squared deviations 32,
        // sample variance 32 / 7.
        let us = [2u64, 4, 4, 4, 5, 5, 7, 9];
        let samples: Vec<u64> = us.iter().map(|v| v * 1_000).collect();
        let s = Summary::from_samples(&samples).unwrap();
        assert_eq!(s.n, 8);
        assert!((s.mean_ns - 5_000.0).abs() < 1e-9);
        let expected_stdev = (32.0f64 / 7.0).sqrt() * 1_000.0;
        assert!((s.stdev_ns - expected_stdev).abs() < 1e-6, "{}", s.stdev_ns);
        assert_eq!(s.min_ns, 2_000);
        assert_eq!(s.max_ns, 9_000);
        assert!(within_tenth_of_percent(s.p50_ns, 4_000), "{}", s.p50_ns);
    }

    #[test]
    fn percentiles_of_a_uniform_ramp() {
        // 1..=1000 us: the q-quantile is the ceil(q * 1000)-th value.
        let samples: Vec<u64> = (1..=1_000u64).map(|v| v * 1_000).collect();
        let s = Summary::from_samples(&samples).unwrap();
        assert!(within_tenth_of_percent(s.p50_ns, 500_000), "{}", s.p50_ns);
        assert!(within_tenth_of_percent(s.p90_ns, 900_000), "{}", s.p90_ns);
        assert!(within_tenth_of_percent(s.p99_ns, 990_000), "{}", s.p99_ns);
        assert!(within_tenth_of_percent(s.p999_ns, 999_000), "{}", s.p999_ns);
        assert_eq!(s.min_ns, 1_000);
        assert_eq!(s.max_ns, 1_000_000);
        assert!((s.mean_ns - 500_500.0).abs() < 1e-6);
    }

    #[test]
    fn one_slow_outlier_shows_only_in_the_tail() {
        // 999 samples of 100 ns and one of 10 s: the median stays at 100 ns and
        // p99.9 / max carry the outlier, as a latency tail should.
        let mut samples = vec![100u64; 999];
        samples.push(10_000_000_000);
        let s = Summary::from_samples(&samples).unwrap();
        assert_eq!(s.p50_ns, 100);
        assert_eq!(s.p99_ns, 100);
        assert_eq!(s.max_ns, 10_000_000_000);
        assert!(s.p999_ns <= s.max_ns);
    }

    #[test]
    fn percentiles_are_ordered_and_bounded() {
        let samples: Vec<u64> = (0..10_000u64).map(|i| (i * 7919) % 100_003 + 50).collect();
        let s = Summary::from_samples(&samples).unwrap();
        assert!(s.min_ns <= s.p50_ns);
        assert!(s.p50_ns <= s.p90_ns && s.p90_ns <= s.p99_ns && s.p99_ns <= s.p999_ns);
        assert!(s.p999_ns <= s.max_ns);
    }

    #[test]
    fn streaming_and_batch_summaries_agree() {
        let samples: Vec<u64> = (0..5_000u64)
            .map(|i| (i * 104_729) % 1_000_003 + 1)
            .collect();
        let mut streaming = StreamingSummary::default();
        samples.iter().for_each(|&v| streaming.record(v));
        let batch = Summary::from_samples(&samples).unwrap();
        let s = streaming.summary().unwrap();
        assert_eq!(s.n, batch.n);
        assert_eq!(
            (s.min_ns, s.p50_ns, s.p99_ns, s.max_ns),
            (batch.min_ns, batch.p50_ns, batch.p99_ns, batch.max_ns)
        );
        assert!((s.mean_ns - batch.mean_ns).abs() < 1e-6);
        assert!((s.stdev_ns - batch.stdev_ns).abs() < 1e-6);
        assert_eq!(streaming.total(), samples.iter().sum::<u64>());
        assert_eq!(StreamingSummary::default().summary(), None);
    }

    #[test]
    fn samples_beyond_an_hour_saturate_without_losing_the_exact_max() {
        let s = Summary::from_samples(&[1, 2 * HIGHEST_TRACKABLE_NS]).unwrap();
        assert_eq!(s.max_ns, 2 * HIGHEST_TRACKABLE_NS);
        assert_eq!(s.n, 2);
    }

    #[test]
    fn a_line_through_exact_points_is_recovered_exactly() {
        let xs: Vec<f64> = (0..10).map(f64::from).collect();
        let ys: Vec<f64> = xs.iter().map(|x| 3.0 * x + 5.0).collect();
        let fit = linear_fit(&xs, &ys).unwrap();
        assert!((fit.slope - 3.0).abs() < 1e-12, "{fit:?}");
        assert!((fit.intercept - 5.0).abs() < 1e-12, "{fit:?}");
        assert!((fit.r_squared - 1.0).abs() < 1e-12, "{fit:?}");
        assert_eq!(fit.n, 10);
    }

    #[test]
    fn a_noisy_line_keeps_its_slope_and_loses_some_r_squared() {
        // y = 2x + 1000 plus noise uniform in [-300, 300) from a fixed LCG: the slope's
        // standard error is about 0.02 here, so 0.1 is a wide margin.
        let mut state = 12_345u64;
        let mut noise = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as f64 / (1u64 << 31) as f64 * 600.0 - 300.0
        };
        let xs: Vec<f64> = (0..1_000).map(f64::from).collect();
        let ys: Vec<f64> = xs.iter().map(|x| 2.0 * x + 1_000.0 + noise()).collect();
        let fit = linear_fit(&xs, &ys).unwrap();
        assert!((fit.slope - 2.0).abs() < 0.1, "{fit:?}");
        assert!((fit.intercept - 1_000.0).abs() < 60.0, "{fit:?}");
        assert!(fit.r_squared > 0.8 && fit.r_squared < 0.99, "{fit:?}");
    }

    #[test]
    fn large_offsets_do_not_cancel_the_slope() {
        let xs: Vec<f64> = (0..100).map(|i| 1e9 + f64::from(i)).collect();
        let ys: Vec<f64> = xs.iter().map(|x| 1e9 - 0.5 * (x - 1e9)).collect();
        let fit = linear_fit(&xs, &ys).unwrap();
        assert!((fit.slope + 0.5).abs() < 1e-9, "{fit:?}");
    }

    #[test]
    fn no_line_without_two_distinct_x_or_with_mispaired_points() {
        assert_eq!(linear_fit(&[], &[]), None);
        assert_eq!(linear_fit(&[4.0], &[1.0]), None);
        assert_eq!(linear_fit(&[0.1; 3], &[1.0, 2.0, 3.0]), None);
        assert_eq!(linear_fit(&[1.0, 2.0], &[1.0]), None);
        assert_eq!(linear_fit(&[1.0, f64::NAN], &[1.0, 2.0]), None);
        let flat = linear_fit(&[1.0, 2.0, 3.0], &[7.0; 3]).unwrap();
        assert_eq!(
            (flat.slope, flat.intercept, flat.r_squared),
            (0.0, 7.0, 1.0)
        );
    }
}
