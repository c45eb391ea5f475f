//! Comparing two sets of samples: is B different from A, by how much, and how sure.
//!
//! - [`judge_runs`] and [`judge_blocks`]: the judgment a verdict rests on, one estimate
//!   with one interval, which decide the verdict together ([`Judgment::verdict`]). Runs of
//!   one configuration differ by more than the samples of one run suggest (the threads'
//!   placement, the host's state), so when each side has [`MIN_RUNS`] independent runs
//!   (`--runs`) the runs' own statistics are compared, by Welch's t on their logarithms.
//!   Otherwise each run's blocks stand in for runs, compared by the Hodges-Lehmann shift of
//!   their logarithms with its exact rank-sum interval.
//! - [`repetition`]: the block test itself. Samples of one run are not
//!   independent: background load, frequency changes and cache state come in phases lasting
//!   many samples, so two runs of the same thing differ by more than their per-sample
//!   scatter suggests, and a test on raw samples calls that difference "significant". Each
//!   run is therefore cut into [`MAX_BLOCKS`] contiguous blocks in recorded order, each
//!   block condensed to one statistic, and the runs are compared block against block: a
//!   slow phase moves one or two block values, not hundreds of samples. See [`repetition`]
//!   for why blocks, how many, and which test.
//! - [`block_bootstrap_change`]: the relative change of a statistic (p50, p99, mean) from
//!   A to B with a percentile bootstrap interval that resamples whole blocks, so the
//!   interval is as wide as the run-to-run variation, not the per-sample scatter.
//! - [`mann_whitney`] and [`bootstrap_change`]: the same test and interval on raw samples,
//!   valid only for independent samples (kept for that case, and to show what the block
//!   versions guard against).
//! - [`outliers`]: samples far from the median by the modified z-score (median absolute
//!   deviation), the robust rule for flagging a noisy measurement.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::quantile;
use crate::special::{normal_sf, t_cdf, t_quantile};
use crate::Interval;
pub use crate::Statistic;

/// The result of a Mann-Whitney U test of A against B.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MannWhitney {
    /// U of sample A.
    pub u: f64,
    pub z: f64,
    /// Two-sided p-value.
    pub p: f64,
}

/// Mann-Whitney U test; None when either side has fewer than 2 samples.
pub fn mann_whitney(a: &[u64], b: &[u64]) -> Option<MannWhitney> {
    let (n1, n2) = (a.len(), b.len());
    if n1 < 2 || n2 < 2 {
        return None;
    }
    let mut all: Vec<(u64, bool)> = a
        .iter()
        .map(|&v| (v, true))
        .chain(b.iter().map(|&v| (v, false)))
        .collect();
    all.sort_unstable_by_key(|&(v, _)| v);
    // Average ranks over ties, and the tie correction term sum(t^3 - t).
    let (mut rank_sum_a, mut ties) = (0.0f64, 0.0f64);
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j < all.len() && all[j].0 == all[i].0 {
            j += 1;
        }
        let average_rank = (i + 1 + j) as f64 / 2.0;
        let t = (j - i) as f64;
        ties += t * t * t - t;
        rank_sum_a += average_rank * all[i..j].iter().filter(|(_, from_a)| *from_a).count() as f64;
        i = j;
    }
    let (n1f, n2f) = (n1 as f64, n2 as f64);
    let n = n1f + n2f;
    let u = rank_sum_a - n1f * (n1f + 1.0) / 2.0;
    let mean = n1f * n2f / 2.0;
    let variance = n1f * n2f / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)));
    if variance <= 0.0 {
        // Every value identical: no evidence of any difference.
        return Some(MannWhitney { u, z: 0.0, p: 1.0 });
    }
    // Continuity correction toward the mean.
    let z = (u - mean - 0.5 * (u - mean).signum()) / variance.sqrt();
    let p = (2.0 * normal_sf(z.abs())).min(1.0);
    Some(MannWhitney { u, z, p })
}

/// B's statistic relative to A's, with a bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub statistic: Statistic,
    pub a: f64,
    pub b: f64,
    /// (b - a) / a.
    pub relative: f64,
    /// 95% percentile-bootstrap interval of `relative`.
    pub low: f64,
    pub high: f64,
}

/// Relative change of `statistic` from A to B with a 95% bootstrap interval over
/// `iterations` resamples of single samples; None when a side is empty or A's statistic
/// is 0. The interval assumes independent samples: see [`block_bootstrap_change`].
pub fn bootstrap_change(
    a: &[u64],
    b: &[u64],
    statistic: Statistic,
    iterations: usize,
    seed: u64,
) -> Option<Change> {
    let singles = |n: usize| (0..n).map(|i| i..i + 1).collect::<Vec<_>>();
    bootstrap(
        a,
        &singles(a.len()),
        b,
        &singles(b.len()),
        statistic,
        iterations,
        seed,
    )
}

/// Relative change of `statistic` from A to B with a 95% bootstrap interval that resamples
/// each run's contiguous blocks ([`block_ranges`]) rather than its samples: a resampled run
/// keeps each block's slow or fast phase whole, so the interval spreads as far as phases
/// move the statistic (a non-overlapping block bootstrap, Carlstein 1986). None when a side
/// has too few samples for blocks or A's statistic is 0.
pub fn block_bootstrap_change(
    a: &[u64],
    b: &[u64],
    statistic: Statistic,
    iterations: usize,
    seed: u64,
) -> Option<Change> {
    bootstrap(
        a,
        &block_ranges(a.len())?,
        b,
        &block_ranges(b.len())?,
        statistic,
        iterations,
        seed,
    )
}

fn bootstrap(
    a: &[u64],
    a_units: &[Range<usize>],
    b: &[u64],
    b_units: &[Range<usize>],
    statistic: Statistic,
    iterations: usize,
    seed: u64,
) -> Option<Change> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let (mut sa, mut sb) = (a.to_vec(), b.to_vec());
    sa.sort_unstable();
    sb.sort_unstable();
    let (va, vb) = (statistic.of(&sa), statistic.of(&sb));
    if va == 0.0 {
        return None;
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut ra, mut rb) = (Resampler::new(a, a_units), Resampler::new(b, b_units));
    let mut changes: Vec<f64> = (0..iterations.max(1))
        .filter_map(|_| {
            let base = ra.resample(&mut rng, statistic);
            let other = rb.resample(&mut rng, statistic);
            (base != 0.0).then(|| (other - base) / base)
        })
        .collect();
    if changes.is_empty() {
        return None;
    }
    changes.sort_by(f64::total_cmp);
    let at = |q: f64| changes[((q * changes.len() as f64) as usize).min(changes.len() - 1)];
    Some(Change {
        statistic,
        a: va,
        b: vb,
        relative: (vb - va) / va,
        low: at(0.025),
        high: at(0.975),
    })
}

/// Draws resamples of one run's units (with replacement, as many as there are units) and
/// returns their statistic.
///
/// Units of one sample each are copied and sorted per resample. Blocks (units of many
/// samples) are sorted once instead, and a resample is only how often each block was drawn:
/// its quantile is found by counting below a value in the drawn blocks (a binary search on
/// the value), its mean from the blocks' sums. That gives the same numbers (the nearest-rank
/// quantile is one of the samples either way, and the integer sum is the f64 sum's exact
/// value while it stays below 2^53 ns) without building and sorting a copy of every sample
/// per resample, which made `compare` cost 0.1 ms per sample (300,000 samples: 52 s).
enum Resampler<'a> {
    Singles {
        samples: &'a [u64],
        units: &'a [Range<usize>],
        resample: Vec<u64>,
    },
    Blocks {
        /// The samples, each unit's range sorted.
        sorted: Vec<u64>,
        units: &'a [Range<usize>],
        sums: Vec<u128>,
        /// How often each unit was drawn in the current resample.
        counts: Vec<u64>,
    },
}

impl<'a> Resampler<'a> {
    fn new(samples: &'a [u64], units: &'a [Range<usize>]) -> Resampler<'a> {
        if units.len() >= samples.len() {
            return Resampler::Singles {
                samples,
                units,
                resample: Vec::with_capacity(samples.len()),
            };
        }
        let mut sorted = samples.to_vec();
        for unit in units {
            sorted[unit.clone()].sort_unstable();
        }
        let sums = units
            .iter()
            .map(|unit| sorted[unit.clone()].iter().map(|&v| v as u128).sum())
            .collect();
        Resampler::Blocks {
            sorted,
            units,
            sums,
            counts: vec![0; units.len()],
        }
    }

    /// Draws one resample (as many units as there are, each uniformly, in the order the
    /// random numbers come) and returns its statistic.
    fn resample(&mut self, rng: &mut fastrand::Rng, statistic: Statistic) -> f64 {
        match self {
            Resampler::Singles {
                samples,
                units,
                resample,
            } => {
                resample.clear();
                for _ in 0..units.len() {
                    resample.extend_from_slice(&samples[units[rng.usize(..units.len())].clone()]);
                }
                resample.sort_unstable();
                statistic.of(resample)
            }
            Resampler::Blocks {
                sorted,
                units,
                sums,
                counts,
            } => {
                counts.fill(0);
                for _ in 0..units.len() {
                    counts[rng.usize(..units.len())] += 1;
                }
                let drawn = || {
                    units
                        .iter()
                        .zip(counts.iter())
                        .filter(|(unit, &c)| c > 0 && !unit.is_empty())
                        .map(|(unit, &c)| (&sorted[unit.clone()], c))
                };
                let total: u64 = drawn().map(|(unit, c)| unit.len() as u64 * c).sum();
                let q = match statistic {
                    Statistic::Mean => {
                        let sum: u128 = units
                            .iter()
                            .zip(sums.iter())
                            .zip(counts.iter())
                            .map(|((_, &s), &c)| s * c as u128)
                            .sum();
                        return sum as f64 / total as f64;
                    }
                    Statistic::P50 => 0.50,
                    Statistic::P99 => 0.99,
                };
                // As `quantile`: the sample at this rank (1-based) of the resample sorted.
                let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
                let below_or_at = |value: u64| -> u64 {
                    drawn()
                        .map(|(unit, c)| unit.partition_point(|&v| v <= value) as u64 * c)
                        .sum()
                };
                // The smallest value with at least `rank` samples at or below it.
                let (mut low, mut high) = drawn().fold((u64::MAX, 0), |(lo, hi), (unit, _)| {
                    (lo.min(unit[0]), hi.max(unit[unit.len() - 1]))
                });
                while low < high {
                    let mid = low + (high - low) / 2;
                    if below_or_at(mid) >= rank {
                        high = mid;
                    } else {
                        low = mid + 1;
                    }
                }
                low as f64
            }
        }
    }
}

/// Blocks a run is cut into, at most. Ten keeps each block a tenth of the run long, so a
/// phase shorter than that is averaged inside one block and a longer one shows up as
/// block-to-block spread, while ten against ten blocks still lets the exact rank-sum test
/// reach p = 1.1e-5 for a change every block agrees on.
pub const MAX_BLOCKS: usize = 10;
/// Fewer blocks than this per run and no verdict is given: with four against four the
/// smallest possible two-sided p is 0.029, so one odd block decides; five against five
/// gets to 0.008.
pub const MIN_BLOCKS: usize = 5;
/// Samples a block holds at least, so its median is a median and not one sample.
pub const MIN_BLOCK_SAMPLES: usize = 5;
/// The fewest samples per run a repetition-aware judgment needs.
pub const MIN_SAMPLES: usize = MIN_BLOCKS * MIN_BLOCK_SAMPLES;

/// `n` samples in recorded order cut into contiguous blocks of near-equal size (sizes
/// differ by at most one); None when fewer than [`MIN_SAMPLES`].
pub fn block_ranges(n: usize) -> Option<Vec<Range<usize>>> {
    let k = (n / MIN_BLOCK_SAMPLES).min(MAX_BLOCKS);
    (k >= MIN_BLOCKS).then(|| (0..k).map(|i| i * n / k..(i + 1) * n / k).collect())
}

/// `statistic` of each block of `samples`, in block order.
pub fn block_statistics(samples: &[u64], statistic: Statistic) -> Option<Vec<f64>> {
    Some(
        block_ranges(samples.len())?
            .into_iter()
            .map(|r| {
                let mut block = samples[r].to_vec();
                block.sort_unstable();
                statistic.of(&block)
            })
            .collect(),
    )
}

/// How B's blocks compare with A's for one statistic.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Repetition {
    pub statistic: Statistic,
    pub blocks_a: usize,
    pub blocks_b: usize,
    /// Median over each run's blocks of the block statistic.
    pub a: f64,
    pub b: f64,
    /// (b - a) / a.
    pub relative: f64,
    /// Two-sided p of the exact rank-sum test of A's block statistics against B's.
    pub p: f64,
    /// Each run's interquartile range of block statistics, as a fraction of A's `a`: how
    /// far the run disagrees with itself, in the same unit as `relative`.
    pub spread_a: f64,
    pub spread_b: f64,
}

impl Repetition {
    /// Whether the runs differ by more than their own repetition explains: the block test
    /// rejects "no difference" at `alpha`, and the change is larger than the block-to-block
    /// spread either run shows on its own.
    pub fn decided(&self, alpha: f64) -> bool {
        self.p < alpha && self.relative.abs() > self.spread()
    }

    /// The larger run's block-to-block spread: a change inside it is a change one run
    /// already shows between its own phases.
    pub fn spread(&self) -> f64 {
        self.spread_a.max(self.spread_b)
    }
}

/// Why [`repetition`] could not judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unjudged {
    /// A run has fewer than [`MIN_SAMPLES`] samples.
    TooFewSamples,
    /// A's statistic is 0, so no relative change exists.
    ZeroBaseline,
}

/// Compares A and B through their own repetition: each run cut into blocks in recorded
/// order, `statistic` taken per block, and the two sets of block values compared with an
/// exact rank-sum test.
///
/// Why this and not a test on raw samples: the samples of a run are a time series, and its
/// noise (another process's burst, a frequency change) lasts many samples; treating them
/// as independent makes the effective sample size hundreds of times too large, and any two
/// runs differ "significantly". A block is long enough to contain such a phase, so block
/// values are close to independent replicates of the run, and the test's sample size is
/// the number of replicates, not of samples. Rank-sum rather than Welch on block values
/// because one block caught in a burst is an outlier, which moves one rank but inflates a
/// mean and a variance; exact rather than the normal approximation because ten against
/// ten is small.
pub fn repetition(a: &[u64], b: &[u64], statistic: Statistic) -> Result<Repetition, Unjudged> {
    let (Some(va), Some(vb)) = (
        block_statistics(a, statistic),
        block_statistics(b, statistic),
    ) else {
        return Err(Unjudged::TooFewSamples);
    };
    let (ca, cb) = (center(&va), center(&vb));
    if ca == 0.0 {
        return Err(Unjudged::ZeroBaseline);
    }
    let test = rank_sum_exact(&va, &vb).expect("block counts are within the exact test's range");
    Ok(Repetition {
        statistic,
        blocks_a: va.len(),
        blocks_b: vb.len(),
        a: ca,
        b: cb,
        relative: (cb - ca) / ca,
        p: test.p,
        spread_a: interquartile_range(&va) / ca,
        spread_b: interquartile_range(&vb) / ca,
    })
}

/// Median with interpolation between the middle two.
fn center(values: &[f64]) -> f64 {
    interpolated_quantile(values, 0.5)
}

fn interquartile_range(values: &[f64]) -> f64 {
    interpolated_quantile(values, 0.75) - interpolated_quantile(values, 0.25)
}

/// Quantile by linear interpolation between order statistics (Hyndman and Fan's type 7):
/// with ten block values the nearest-rank quantile jumps a whole block at a time.
fn interpolated_quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = q * (sorted.len() - 1) as f64;
    let (low, high) = (at.floor() as usize, at.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (at - low as f64)
}

/// Mann-Whitney rank-sum test with the exact permutation distribution, ties included (mid
/// ranks, enumerated as doubled integers); None when a side is empty or there are more than
/// 64 values in all, where the count table grows large and [`mann_whitney`]'s normal
/// approximation is good anyway.
pub fn rank_sum_exact(a: &[f64], b: &[f64]) -> Option<MannWhitney> {
    let (m, n) = (a.len(), b.len());
    let total = m + n;
    if m == 0 || n == 0 || total > 64 {
        return None;
    }
    let mut all: Vec<(f64, bool)> = a
        .iter()
        .map(|&v| (v, true))
        .chain(b.iter().map(|&v| (v, false)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    // Twice each mid rank, so ties stay integers: a tie over positions i..j (0-based) has
    // mid rank (i + 1 + j) / 2.
    let mut doubled = vec![0usize; total];
    let mut i = 0;
    while i < total {
        let mut j = i;
        while j < total && all[j].0 == all[i].0 {
            j += 1;
        }
        doubled[i..j].fill(i + 1 + j);
        i = j;
    }
    let observed: usize = doubled
        .iter()
        .zip(&all)
        .filter(|(_, (_, from_a))| *from_a)
        .map(|(r, _)| r)
        .sum();
    let max_sum: usize = doubled.iter().sum();
    // ways[j][s]: subsets of j values whose doubled ranks sum to s. Under no difference
    // every subset of m values is equally likely to be A's.
    let mut ways = vec![vec![0f64; max_sum + 1]; m + 1];
    ways[0][0] = 1.0;
    for &r in &doubled {
        for j in (1..=m).rev() {
            let (before, after) = ways.split_at_mut(j);
            for s in (r..=max_sum).rev() {
                after[0][s] += before[j - 1][s - r];
            }
        }
    }
    let subsets: f64 = ways[m].iter().sum();
    // Doubled expected rank sum of A: m (N + 1) / 2, twice.
    let expected = (m * (total + 1)) as f64;
    let distance = (observed as f64 - expected).abs();
    let extreme: f64 = ways[m]
        .iter()
        .enumerate()
        .filter(|(s, _)| (*s as f64 - expected).abs() >= distance)
        .map(|(_, w)| w)
        .sum();
    let (mf, nf) = (m as f64, n as f64);
    let u = observed as f64 / 2.0 - mf * (mf + 1.0) / 2.0;
    let sd = (mf * nf * (mf + nf + 1.0) / 12.0).sqrt();
    Some(MannWhitney {
        u,
        z: (u - mf * nf / 2.0) / sd,
        p: (extreme / subsets).min(1.0),
    })
}

/// Independent runs each side needs before runs, not blocks, are compared.
pub const MIN_RUNS: usize = 3;

/// What a comparison's replicates are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Replicates {
    /// Contiguous blocks of each run's samples ([`block_ranges`]).
    Blocks,
    /// Each side's independent runs.
    Runs,
}

/// How B's statistic compares with A's, judged from their replicates: the change printed
/// is the one the verdict is decided on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Judgment {
    pub statistic: Statistic,
    pub replicates: Replicates,
    pub count_a: usize,
    pub count_b: usize,
    /// Each side's centre: the median of its block statistics, or the geometric mean of its
    /// runs' statistics.
    pub a: f64,
    pub b: f64,
    /// B relative to A as a fraction (0.3: 30% slower), with its interval: the
    /// Hodges-Lehmann shift of the log block statistics and its exact rank-sum interval,
    /// or the difference of the runs' mean logs and its Welch interval.
    pub change: Interval,
    /// Two-sided p of the same test.
    pub p: f64,
    /// How far each side disagrees with itself, as a fraction of A's centre: the
    /// interquartile range of the block statistics, or the range of the runs'.
    pub spread_a: f64,
    pub spread_b: f64,
}

/// What a judgment says, given the change below which a difference is noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The interval lies above no change, and the change is beyond the noise threshold
    /// (and, between blocks, beyond either run's own spread).
    Slower,
    Faster,
    /// The interval excludes no change, but the change is within the noise threshold.
    WithinNoise,
    /// The interval lies within the noise threshold on both sides: an equivalence test.
    NoChange,
    /// The interval holds no change and reaches beyond the noise threshold, or a run's
    /// blocks spread as wide as the change: the replicates disagree among themselves by
    /// more than the difference could show.
    Undecidable,
}

impl Judgment {
    pub fn verdict(&self, noise: f64) -> Verdict {
        let c = self.change;
        if c.low > 0.0 || c.high < 0.0 {
            if c.estimate.abs() <= noise {
                Verdict::WithinNoise
            } else if self.replicates == Replicates::Blocks && c.estimate.abs() <= self.spread() {
                // A run's blocks disagree among themselves by more than the runs differ: a
                // slow phase, which the blocks' interval does not see as a spread because
                // it sits in few of them. Runs' intervals already span the runs' spread.
                Verdict::Undecidable
            } else if c.low > 0.0 {
                Verdict::Slower
            } else {
                Verdict::Faster
            }
        } else if c.low >= -noise && c.high <= noise {
            Verdict::NoChange
        } else {
            Verdict::Undecidable
        }
    }

    /// The larger side's spread.
    pub fn spread(&self) -> f64 {
        self.spread_a.max(self.spread_b)
    }
}

/// B against A through their runs' statistics, for [`MIN_RUNS`] or more non-empty runs a
/// side: Welch's t on the logarithms, so the change is the ratio of geometric means and its
/// interval at `confidence` is as wide as the runs disagree.
pub fn judge_runs(
    a: &[&[u64]],
    b: &[&[u64]],
    statistic: Statistic,
    confidence: f64,
) -> Result<Judgment, Unjudged> {
    let logs = |runs: &[&[u64]]| -> Vec<f64> {
        runs.iter()
            .filter(|r| !r.is_empty())
            .map(|r| {
                let mut sorted = r.to_vec();
                sorted.sort_unstable();
                statistic.of(&sorted).max(1.0).ln()
            })
            .collect()
    };
    let (la, lb) = (logs(a), logs(b));
    if la.len() < MIN_RUNS || lb.len() < MIN_RUNS {
        return Err(Unjudged::TooFewSamples);
    }
    let moments = |v: &[f64]| {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var / n)
    };
    let ((ma, va), (mb, vb)) = (moments(&la), moments(&lb));
    let d = mb - ma;
    let se = (va + vb).sqrt();
    let (half, p) = if se > 0.0 {
        // Welch-Satterthwaite degrees of freedom.
        let df = (va + vb).powi(2)
            / (va * va / (la.len() as f64 - 1.0) + vb * vb / (lb.len() as f64 - 1.0));
        let t = d.abs() / se;
        (
            t_quantile(0.5 + confidence / 2.0, df) * se,
            (2.0 * (1.0 - t_cdf(t, df))).min(1.0),
        )
    } else {
        (0.0, if d == 0.0 { 1.0 } else { 0.0 })
    };
    let (ca, cb) = (ma.exp(), mb.exp());
    let range = |v: &[f64]| {
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max).exp();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min).exp();
        (hi - lo) / ca
    };
    Ok(Judgment {
        statistic,
        replicates: Replicates::Runs,
        count_a: la.len(),
        count_b: lb.len(),
        a: ca,
        b: cb,
        change: Interval {
            estimate: d.exp() - 1.0,
            low: (d - half).exp() - 1.0,
            high: (d + half).exp() - 1.0,
        },
        p,
        spread_a: range(&la),
        spread_b: range(&lb),
    })
}

/// B against A through each run's blocks ([`block_statistics`]): the Hodges-Lehmann shift
/// of the log block statistics (the median of every difference between a block of B and a
/// block of A) with its exact interval at `confidence` from the rank-sum distribution
/// (Bauer 1972), whose test is [`rank_sum_exact`].
pub fn judge_blocks(
    a: &[u64],
    b: &[u64],
    statistic: Statistic,
    confidence: f64,
) -> Result<Judgment, Unjudged> {
    let (Some(va), Some(vb)) = (
        block_statistics(a, statistic),
        block_statistics(b, statistic),
    ) else {
        return Err(Unjudged::TooFewSamples);
    };
    let (ca, cb) = (center(&va), center(&vb));
    if ca == 0.0 {
        return Err(Unjudged::ZeroBaseline);
    }
    let ln = |v: &[f64]| v.iter().map(|x| x.max(1.0).ln()).collect::<Vec<f64>>();
    let (la, lb) = (ln(&va), ln(&vb));
    let mut differences: Vec<f64> = lb
        .iter()
        .flat_map(|y| la.iter().map(move |x| y - x))
        .collect();
    differences.sort_by(f64::total_cmp);
    let count = differences.len();
    let shift = interpolated_quantile(&differences, 0.5);
    // The k-th smallest and largest differences bound the shift, k the largest with
    // P(U <= k - 1) <= (1 - confidence) / 2 under no shift. With too few blocks for that
    // the interval is the whole range of differences.
    let cdf = rank_sum_null_cdf(la.len(), lb.len());
    let tail = (1.0 - confidence) / 2.0;
    let k = (1..=count)
        .take_while(|&k| cdf[k - 1] <= tail)
        .last()
        .unwrap_or(1);
    let test = rank_sum_exact(&va, &vb).expect("block counts are within the exact test's range");
    Ok(Judgment {
        statistic,
        replicates: Replicates::Blocks,
        count_a: va.len(),
        count_b: vb.len(),
        a: ca,
        b: cb,
        change: Interval {
            estimate: shift.exp() - 1.0,
            low: differences[k - 1].exp() - 1.0,
            high: differences[count - k].exp() - 1.0,
        },
        p: test.p,
        spread_a: interquartile_range(&va) / ca,
        spread_b: interquartile_range(&vb) / ca,
    })
}

/// P(U <= u) for u = 0..=m n, U the Mann-Whitney count of (a, b) pairs with b below a,
/// under no difference and without ties: the number of ways to interleave m and n values
/// with that many inversions, over C(m + n, m).
fn rank_sum_null_cdf(m: usize, n: usize) -> Vec<f64> {
    // table[i][j][u]: orderings of i values of A and j of B with u pairs where B's value
    // is below A's. The largest value is either A's, above all j of B's (u - j pairs
    // remain), or B's, above none of A's: f(i, j, u) = f(i - 1, j, u - j) + f(i, j - 1, u).
    let max = m * n;
    let mut table = vec![vec![vec![0f64; max + 1]; n + 1]; m + 1];
    for (i, row) in table.iter_mut().enumerate() {
        for (j, cell) in row.iter_mut().enumerate() {
            if i == 0 || j == 0 {
                cell[0] = 1.0;
            }
        }
    }
    for i in 1..=m {
        for j in 1..=n {
            for u in 0..=i * j {
                let with_a_last = if u >= j { table[i - 1][j][u - j] } else { 0.0 };
                table[i][j][u] = with_a_last + table[i][j - 1][u];
            }
        }
    }
    let ways = &table[m][n];
    let total: f64 = ways.iter().sum();
    let mut cumulative = 0.0;
    ways.iter()
        .map(|w| {
            cumulative += w;
            cumulative / total
        })
        .collect()
}

/// Samples whose modified z-score |0.6745 (x - median) / MAD| exceeds 3.5 (Iglewicz and
/// Hoaglin's rule). With MAD 0 (over half the samples equal), any other value counts.
pub fn outliers(samples: &[u64]) -> usize {
    if samples.len() < 3 {
        return 0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let median = quantile(&sorted, 0.5);
    let mut deviations: Vec<u64> = sorted
        .iter()
        .map(|&v| (v as f64 - median).abs() as u64)
        .collect();
    deviations.sort_unstable();
    let mad = quantile(&deviations, 0.5);
    samples
        .iter()
        .filter(|&&v| {
            let d = (v as f64 - median).abs();
            if mad == 0.0 {
                d > 0.0
            } else {
                0.6745 * d / mad > 3.5
            }
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mann_whitney_matches_a_hand_computed_example() {
        // A = 1..=5, B = 6..=10: A's ranks 1..5 sum to 15, U = 15 - 15 = 0. With n1 = n2 = 5,
        // mean 12.5, variance 25*11/12 = 22.917, z = (0 - 12.5 + 0.5)/4.787 = -2.507,
        // two-sided p = 0.0122.
        let a = [1, 2, 3, 4, 5];
        let b = [6, 7, 8, 9, 10];
        let r = mann_whitney(&a, &b).unwrap();
        assert_eq!(r.u, 0.0);
        assert!((r.z + 2.507).abs() < 0.01, "{}", r.z);
        assert!((r.p - 0.0122).abs() < 0.0005, "{}", r.p);
    }

    #[test]
    fn identical_distributions_are_not_significant_and_shifted_ones_are() {
        let a: Vec<u64> = (0..400).map(|i| 1_000 + (i * 7919) % 500).collect();
        let same: Vec<u64> = (0..400).map(|i| 1_000 + (i * 104_729) % 500).collect();
        assert!(mann_whitney(&a, &same).unwrap().p > 0.05);
        let shifted: Vec<u64> = a.iter().map(|v| v + 100).collect();
        assert!(mann_whitney(&a, &shifted).unwrap().p < 1e-6);
        let flat = [5u64; 10];
        assert_eq!(mann_whitney(&flat, &flat).unwrap().p, 1.0);
    }

    #[test]
    fn bootstrap_interval_brackets_a_known_change_and_is_reproducible() {
        let a: Vec<u64> = (0..500).map(|i| 10_000 + (i * 7919) % 2_000).collect();
        let b: Vec<u64> = a.iter().map(|v| v * 12 / 10).collect(); // +20%
        let c = bootstrap_change(&a, &b, Statistic::P50, 2_000, 7).unwrap();
        assert!((c.relative - 0.2).abs() < 0.01, "{}", c.relative);
        assert!(c.low < 0.2 && c.high > 0.2 && c.low > 0.1, "{c:?}");
        assert_eq!(
            c,
            bootstrap_change(&a, &b, Statistic::P50, 2_000, 7).unwrap()
        );
        let none = bootstrap_change(&a, &a, Statistic::Mean, 2_000, 7).unwrap();
        assert!(
            none.low < 0.0 && none.high > 0.0,
            "no change must straddle 0: {none:?}"
        );
    }

    #[test]
    fn exact_rank_sum_matches_the_permutation_count() {
        // A = 1..=5 below B = 6..=10: only this arrangement and its mirror are as extreme
        // out of C(10, 5) = 252, so p = 2/252.
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let b = [6.0, 7.0, 8.0, 9.0, 10.0];
        let r = rank_sum_exact(&a, &b).unwrap();
        assert_eq!(r.u, 0.0);
        assert!((r.p - 2.0 / 252.0).abs() < 1e-12, "{}", r.p);
        // Interleaved: nothing to see.
        let r = rank_sum_exact(&[1.0, 4.0, 5.0, 8.0], &[2.0, 3.0, 6.0, 7.0]).unwrap();
        assert_eq!(r.p, 1.0);
        // Ties: A = {1, 2}, B = {2, 3}, mid ranks 1, 2.5, 2.5, 4. Of the six ways to pick
        // A's two values, rank sums are 3.5, 3.5, 5, 5, 6.5, 6.5 (expected 5); A's is 3.5,
        // so four of six are as far from 5: p = 4/6.
        let r = rank_sum_exact(&[1.0, 2.0], &[2.0, 3.0]).unwrap();
        assert!((r.p - 4.0 / 6.0).abs() < 1e-12, "{}", r.p);
        let flat = [7.0; 6];
        assert_eq!(rank_sum_exact(&flat, &flat).unwrap().p, 1.0);
    }

    #[test]
    fn blocks_are_contiguous_near_equal_and_need_enough_samples() {
        assert_eq!(block_ranges(MIN_SAMPLES - 1), None);
        assert_eq!(block_ranges(MIN_SAMPLES).unwrap().len(), MIN_BLOCKS);
        let r = block_ranges(103).unwrap();
        assert_eq!(r.len(), MAX_BLOCKS);
        assert_eq!((r[0].start, r[9].end), (0, 103));
        assert!(r.windows(2).all(|w| w[0].end == w[1].start));
        assert!(r.iter().all(|b| b.len() == 10 || b.len() == 11), "{r:?}");
        assert_eq!(
            repetition(&[1_000; 24], &[1_000; 100], Statistic::P50),
            Err(Unjudged::TooFewSamples)
        );
        assert_eq!(
            repetition(&[0; 100], &[1_000; 100], Statistic::P50),
            Err(Unjudged::ZeroBaseline)
        );
    }

    /// A run of `n` latencies around 10 us (uniform +-40%, one in fifty a 5x outlier), with
    /// every sample in `slow` (a range of sample indices: a phase when the host was busy)
    /// `factor` times longer.
    fn run(n: usize, seed: u64, slow: Range<usize>, factor: f64) -> Vec<u64> {
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..n)
            .map(|i| {
                let mut v = 6_000.0 + rng.f64() * 8_000.0;
                if rng.usize(..50) == 0 {
                    v *= 5.0;
                }
                if slow.contains(&i) {
                    v *= factor;
                }
                v as u64
            })
            .collect()
    }

    #[test]
    fn a_slow_phase_in_one_run_is_noise_to_blocks_but_a_regression_to_raw_samples() {
        // The same process twice; each run has a phase where something else loaded the
        // host and every sample took twice as long: a tenth of A, three tenths of B.
        let a = run(400, 1, 40..80, 2.0);
        let b = run(400, 2, 200..320, 2.0);

        // Taken one sample at a time, B is "significantly" slower, by more than a 5% gate.
        let raw = mann_whitney(&a, &b).unwrap();
        assert!(raw.p < 1e-3, "{raw:?}");
        let per_sample = bootstrap_change(&a, &b, Statistic::P50, 2_000, 7).unwrap();
        assert!(per_sample.low > 0.05, "{per_sample:?}");

        // Block against block, the slow phase is three blocks of ten: B disagrees with
        // itself by more than it differs from A, so nothing is decided, and the interval
        // that resamples blocks reaches below the gate.
        let blocks = repetition(&a, &b, Statistic::P50).unwrap();
        assert_eq!((blocks.blocks_a, blocks.blocks_b), (10, 10));
        assert!(!blocks.decided(0.05), "{blocks:?}");
        let by_block = block_bootstrap_change(&a, &b, Statistic::P50, 2_000, 7).unwrap();
        assert!(by_block.low < 0.05, "{by_block:?}");
        let mean = repetition(&a, &b, Statistic::Mean).unwrap();
        assert!(!mean.decided(0.05), "{mean:?}");
    }

    #[test]
    fn a_shift_in_every_block_is_decided_with_its_size() {
        // B is 30% slower throughout, and A has a slow phase of its own: the shift must
        // still show.
        let a = run(400, 3, 120..160, 1.6);
        let b: Vec<u64> = run(400, 4, 0..0, 1.0)
            .iter()
            .map(|&v| v * 13 / 10)
            .collect();
        let blocks = repetition(&a, &b, Statistic::P50).unwrap();
        assert!(blocks.decided(0.05), "{blocks:?}");
        assert!(blocks.p < 0.01, "{blocks:?}");
        assert!((blocks.relative - 0.3).abs() < 0.08, "{blocks:?}");
        let c = block_bootstrap_change(&a, &b, Statistic::P50, 2_000, 7).unwrap();
        assert!(c.low > 0.1 && c.low < 0.3 && c.high > 0.3, "{c:?}");
        assert_eq!(
            c,
            block_bootstrap_change(&a, &b, Statistic::P50, 2_000, 7).unwrap()
        );
        // And the same the other way round.
        let back = repetition(&b, &a, Statistic::P50).unwrap();
        assert!(back.decided(0.05) && back.relative < -0.2, "{back:?}");
    }

    #[test]
    fn the_rank_sum_null_distribution_counts_interleavings() {
        // m = n = 5: C(10, 5) = 252 orderings; U = 0 once, U <= 2 in four (0, 1, 2, 2).
        let cdf = rank_sum_null_cdf(5, 5);
        assert_eq!(cdf.len(), 26);
        assert!((cdf[0] - 1.0 / 252.0).abs() < 1e-12);
        assert!((cdf[2] - 4.0 / 252.0).abs() < 1e-12);
        assert!((cdf[25] - 1.0).abs() < 1e-12);
    }

    /// A run of `n` latencies around `level` ns: lognormal (sigma 0.3) per sample.
    fn lognormal_run(rng: &mut fastrand::Rng, n: usize, level: f64) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let (u, v) = (rng.f64().max(1e-300), rng.f64());
                let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
                (level * (0.3 * z).exp()) as u64
            })
            .collect()
    }

    #[test]
    fn a_run_against_itself_never_differs() {
        let mut rng = fastrand::Rng::with_seed(51);
        for n in [25, 60, 400, 2_000] {
            for _ in 0..200 {
                let a = lognormal_run(&mut rng, n, 20_000.0);
                for statistic in [Statistic::P50, Statistic::Mean] {
                    let j = judge_blocks(&a, &a, statistic, 0.95).unwrap();
                    assert_eq!(j.change.estimate, 0.0, "{j:?}");
                    assert!(
                        matches!(j.verdict(0.05), Verdict::NoChange | Verdict::Undecidable),
                        "{j:?}"
                    );
                }
            }
        }
        let runs: Vec<Vec<u64>> = (0..3)
            .map(|_| lognormal_run(&mut rng, 100, 20_000.0))
            .collect();
        let slices: Vec<&[u64]> = runs.iter().map(Vec::as_slice).collect();
        let j = judge_runs(&slices, &slices, Statistic::P50, 0.95).unwrap();
        assert_eq!((j.change.estimate, j.p), (0.0, 1.0));
        assert_ne!(j.verdict(0.05), Verdict::Slower);
    }

    #[test]
    fn twice_the_cost_is_slower_or_undecidable_never_no_change() {
        let mut rng = fastrand::Rng::with_seed(53);
        for n in [25, 60, 400] {
            for _ in 0..500 {
                let a = lognormal_run(&mut rng, n, 20_000.0);
                let b = lognormal_run(&mut rng, n, 40_000.0);
                let j = judge_blocks(&a, &b, Statistic::P50, 0.95).unwrap();
                assert!(
                    matches!(j.verdict(0.05), Verdict::Slower | Verdict::Undecidable),
                    "{j:?}"
                );
            }
        }
        // Runs that disagree wildly: each at its own level, spread by a factor of two.
        let mut slower = 0;
        for _ in 0..500 {
            let side = |rng: &mut fastrand::Rng, level: f64| -> Vec<Vec<u64>> {
                (0..3)
                    .map(|_| {
                        let (u, v) = (rng.f64().max(1e-300), rng.f64());
                        let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
                        lognormal_run(rng, 200, level * (0.7 * z).exp())
                    })
                    .collect()
            };
            let (a, b) = (side(&mut rng, 20_000.0), side(&mut rng, 40_000.0));
            let (a, b): (Vec<&[u64]>, Vec<&[u64]>) = (
                a.iter().map(Vec::as_slice).collect(),
                b.iter().map(Vec::as_slice).collect(),
            );
            let j = judge_runs(&a, &b, Statistic::P50, 0.95).unwrap();
            let v = j.verdict(0.05);
            assert!(
                matches!(v, Verdict::Slower | Verdict::Undecidable | Verdict::Faster),
                "{j:?}"
            );
            assert!(!matches!(v, Verdict::NoChange | Verdict::WithinNoise));
            slower += usize::from(v == Verdict::Slower);
        }
        println!("2x with runs spread 0.7: slower in {slower} of 500");
    }

    #[test]
    fn separate_runs_of_one_configuration_rarely_differ_when_runs_are_compared() {
        // Each run at its own level (sd 0.2 on the log scale): what a different placement
        // of the threads does. Blocks inside one run cannot see that; three runs a side can.
        let mut rng = fastrand::Rng::with_seed(57);
        let trials = 2_000;
        let (mut by_runs, mut by_blocks) = (0, 0);
        for _ in 0..trials {
            let run = |rng: &mut fastrand::Rng| {
                let (u, v) = (rng.f64().max(1e-300), rng.f64());
                let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
                lognormal_run(rng, 200, 20_000.0 * (0.2 * z).exp())
            };
            let a: Vec<Vec<u64>> = (0..3).map(|_| run(&mut rng)).collect();
            let b: Vec<Vec<u64>> = (0..3).map(|_| run(&mut rng)).collect();
            let sa: Vec<&[u64]> = a.iter().map(Vec::as_slice).collect();
            let sb: Vec<&[u64]> = b.iter().map(Vec::as_slice).collect();
            let j = judge_runs(&sa, &sb, Statistic::P50, 0.95).unwrap();
            by_runs += usize::from(matches!(j.verdict(0.05), Verdict::Slower | Verdict::Faster));
            let j = judge_blocks(&a[0], &b[0], Statistic::P50, 0.95).unwrap();
            by_blocks += usize::from(matches!(j.verdict(0.05), Verdict::Slower | Verdict::Faster));
        }
        println!("different: {by_runs} of {trials} by runs, {by_blocks} by one run's blocks");
        assert!(by_runs * 100 <= trials * 5, "{by_runs} of {trials}");
        assert!(by_blocks > 5 * by_runs.max(1), "{by_blocks} of {trials}");
    }

    #[test]
    fn a_slow_phase_is_undecidable_and_a_shift_is_decided_with_its_size() {
        let a = run(400, 1, 40..80, 2.0);
        let b = run(400, 2, 200..320, 2.0);
        let j = judge_blocks(&a, &b, Statistic::P50, 0.95).unwrap();
        assert_eq!(j.verdict(0.05), Verdict::Undecidable, "{j:?}");
        let a = run(400, 3, 120..160, 1.6);
        let b: Vec<u64> = run(400, 4, 0..0, 1.0)
            .iter()
            .map(|&v| v * 13 / 10)
            .collect();
        let j = judge_blocks(&a, &b, Statistic::P50, 0.95).unwrap();
        assert_eq!(j.verdict(0.05), Verdict::Slower, "{j:?}");
        assert!(
            j.change.low < 0.3 && 0.3 < j.change.high && j.change.low > 0.1,
            "{j:?}"
        );
        assert!(j.p < 0.05);
    }

    #[test]
    fn outliers_are_flagged_by_median_absolute_deviation() {
        let mut samples: Vec<u64> = (0..100).map(|i| 1_000 + i % 10).collect();
        assert_eq!(outliers(&samples), 0);
        samples.extend([50_000, 80_000]);
        assert_eq!(outliers(&samples), 2);
    }

    #[test]
    fn resampling_sorted_blocks_gives_what_sorting_each_resample_gives() {
        // The reference: each resample built from whole units and sorted, as the bootstrap
        // did before it counted draws over blocks sorted once.
        fn reference(
            a: &[u64],
            a_units: &[Range<usize>],
            b: &[u64],
            b_units: &[Range<usize>],
            statistic: Statistic,
            iterations: usize,
            seed: u64,
        ) -> Vec<f64> {
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut resample = |from: &[u64], units: &[Range<usize>]| {
                let mut into = Vec::new();
                for _ in 0..units.len() {
                    into.extend_from_slice(&from[units[rng.usize(..units.len())].clone()]);
                }
                into.sort_unstable();
                into
            };
            (0..iterations)
                .map(|_| {
                    let ra = resample(a, a_units);
                    let rb = resample(b, b_units);
                    statistic.of(&ra) - statistic.of(&rb)
                })
                .collect()
        }
        for (n, seed) in [(25, 1), (57, 2), (1_000, 3), (20_011, 4)] {
            let a = run(n, seed, 0..0, 1.0);
            let b = run(n + 7, seed + 100, n / 3..n / 2, 3.0);
            let (ua, ub) = (
                block_ranges(a.len()).unwrap(),
                block_ranges(b.len()).unwrap(),
            );
            for statistic in [Statistic::P50, Statistic::P99, Statistic::Mean] {
                let want = reference(&a, &ua, &b, &ub, statistic, 200, seed);
                let mut rng = fastrand::Rng::with_seed(seed);
                let (mut ra, mut rb) = (Resampler::new(&a, &ua), Resampler::new(&b, &ub));
                let got: Vec<f64> = (0..200)
                    .map(|_| ra.resample(&mut rng, statistic) - rb.resample(&mut rng, statistic))
                    .collect();
                assert_eq!(got, want, "n={n} {statistic:?}");
            }
        }
    }
}
