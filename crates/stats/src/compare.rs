//! Comparing two sets of samples: is B different from A, by how much, and how sure.
//!
//! - [`mann_whitney`]: the rank-sum test on raw samples (no normality assumed; latency
//!   distributions are skewed and multi-modal), two-sided p-value from the normal
//!   approximation with tie correction.
//! - [`bootstrap_change`]: the relative change of a statistic (p50, p99, mean) from A to B
//!   with a percentile bootstrap confidence interval, resampling each side independently,
//!   seeded so a comparison prints the same interval every time.
//! - [`outliers`]: samples far from the median by the modified z-score (median absolute
//!   deviation), the robust rule for flagging a noisy measurement.

use serde::{Deserialize, Serialize};

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

/// Upper tail of the standard normal, P(Z > z), via the complementary error function.
fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// erfc with relative error below 1.2e-7 (Numerical Recipes' Chebyshev fit), plenty for
/// p-values compared against 0.05 or 0.01.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
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

    /// The statistic of `sorted` (ascending).
    fn of(self, sorted: &[u64]) -> f64 {
        match self {
            Statistic::P50 => quantile(sorted, 0.50),
            Statistic::P99 => quantile(sorted, 0.99),
            Statistic::Mean => sorted.iter().map(|&v| v as f64).sum::<f64>() / sorted.len() as f64,
        }
    }
}

/// Nearest-rank quantile of an ascending slice.
fn quantile(sorted: &[u64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64
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
/// `iterations` resamples; None when a side is empty or A's statistic is 0.
pub fn bootstrap_change(
    a: &[u64],
    b: &[u64],
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
    let mut resample = |from: &[u64], into: &mut Vec<u64>| {
        into.clear();
        into.extend((0..from.len()).map(|_| from[rng.usize(..from.len())]));
        into.sort_unstable();
    };
    let (mut ra, mut rb) = (Vec::with_capacity(a.len()), Vec::with_capacity(b.len()));
    let mut changes: Vec<f64> = (0..iterations.max(1))
        .filter_map(|_| {
            resample(a, &mut ra);
            resample(b, &mut rb);
            let base = statistic.of(&ra);
            (base != 0.0).then(|| (statistic.of(&rb) - base) / base)
        })
        .collect();
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
    fn outliers_are_flagged_by_median_absolute_deviation() {
        let mut samples: Vec<u64> = (0..100).map(|i| 1_000 + i % 10).collect();
        assert_eq!(outliers(&samples), 0);
        samples.extend([50_000, 80_000]);
        assert_eq!(outliers(&samples), 2);
    }
}
