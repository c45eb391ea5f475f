//! Where growth departs from a straight line, whatever model fits best overall.
//!
//! The USL has a knee of its own (where coherency overtakes contention), but a cost can
//! also bend without a quadratic term: a slope that steepens once vCPUs outnumber host
//! CPUs, or flattens once a cache is warm. A hinge ("broken stick") model describes that:
//!
//! ```text
//! T(N) = a + b N + c max(0, N - K)
//! ```
//!
//! slope b up to the knee K, b + c past it. For each candidate K (a measured N with at
//! least two distinct N on each side, so neither segment is fixed by a single point) a, b
//! and c are fitted by linear least squares; the best K is kept if its AICc, counting K as
//! a fourth parameter, beats the single straight line by at least 2. Otherwise the data
//! show no knee and none is claimed.
//!
//! AICc rather than AIC: a sweep has a handful of N, and with so few points plain AIC let
//! a four-parameter hinge "find" a knee in one straight line out of five (simulated with
//! Gaussian noise); the small-sample correction brings that under one in a hundred, at the
//! price of needing more points (seven distinct N at least) before any knee is claimed.

use serde::{Deserialize, Serialize};

/// A change of slope the data support.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// The N where the slope changes (one of the measured N).
    pub at: f64,
    /// Cost per unit of N before and after the knee.
    pub slope_before: f64,
    pub slope_after: f64,
    /// AICc of the straight line minus the hinge's (at least 2).
    pub aic_gain: f64,
}

impl Knee {
    /// Growth is faster past the knee than before it.
    pub fn steepens(&self) -> bool {
        self.slope_after > self.slope_before
    }
}

/// Below this many distinct N the small-sample correction leaves no room for a hinge to
/// win, so none is looked for.
pub const MIN_DISTINCT: usize = 7;
/// Akaike's rule of thumb: a difference below 2 cannot tell two models apart.
const AIC_MARGIN: f64 = 2.0;

/// The knee of `points` (N, cost), if a hinge beats a straight line by the AIC margin.
/// The distinct N of `points`, ascending: a knee needs [`MIN_DISTINCT`] of them.
pub fn distinct_n(points: &[(f64, f64)]) -> Vec<f64> {
    let mut distinct: Vec<f64> = points.iter().map(|p| p.0).collect();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    distinct
}

pub fn knee(points: &[(f64, f64)]) -> Option<Knee> {
    if points
        .iter()
        .any(|&(n, y)| !n.is_finite() || !y.is_finite())
    {
        return None;
    }
    let distinct = distinct_n(points);
    if distinct.len() < MIN_DISTINCT {
        return None;
    }
    let floor = rss_floor(points);
    let line = least_squares(points, |n| [1.0, n, 0.0], 2)?;
    let line_aic = aic(points.len(), line.rss.max(floor), 2);
    let best = distinct[1..distinct.len() - 2]
        .iter()
        .filter_map(|&k| {
            let fit = least_squares(points, |n| [1.0, n, (n - k).max(0.0)], 3)?;
            Some((k, fit))
        })
        .min_by(|a, b| a.1.rss.total_cmp(&b.1.rss))?;
    let (at, hinge) = best;
    let gain = line_aic - aic(points.len(), hinge.rss.max(floor), 4);
    (gain >= AIC_MARGIN).then_some(Knee {
        at,
        slope_before: hinge.coefficients[1],
        slope_after: hinge.coefficients[1] + hinge.coefficients[2],
        aic_gain: gain,
    })
}

/// Below a part in 10^12 of the data's own size, residuals are rounding, not misfit.
fn rss_floor(points: &[(f64, f64)]) -> f64 {
    1e-12
        * points
            .iter()
            .map(|p| p.1 * p.1)
            .sum::<f64>()
            .max(f64::MIN_POSITIVE)
}

/// Akaike's criterion with the small-sample correction 2k(k+1)/(n-k-1).
fn aic(count: usize, rss: f64, parameters: usize) -> f64 {
    let (n, k) = (count as f64, parameters as f64);
    let correction = if count > parameters + 1 {
        2.0 * k * (k + 1.0) / (n - k - 1.0)
    } else {
        f64::INFINITY
    };
    n * (rss / n).ln() + 2.0 * k + correction
}

struct LeastSquares {
    coefficients: [f64; 3],
    rss: f64,
}

/// Least squares over the first `k` columns of `basis`.
fn least_squares(
    points: &[(f64, f64)],
    basis: impl Fn(f64) -> [f64; 3],
    k: usize,
) -> Option<LeastSquares> {
    let mut ata = [[0.0f64; 3]; 3];
    let mut aty = [0.0f64; 3];
    for &(n, y) in points {
        let b = basis(n);
        for i in 0..k {
            aty[i] += b[i] * y;
            for j in 0..k {
                ata[i][j] += b[i] * b[j];
            }
        }
    }
    let coefficients = crate::fit::solve(&ata, &aty, k)?;
    let rss = points
        .iter()
        .map(|&(n, y)| {
            let b = basis(n);
            let predicted: f64 = (0..k).map(|i| b[i] * coefficients[i]).sum();
            (y - predicted).powi(2)
        })
        .sum();
    Some(LeastSquares { coefficients, rss })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slope_that_steepens_past_the_host_cpus_is_found() {
        // 10 us per vCPU up to 4 (the host's CPUs), 200 us per vCPU after: overcommit.
        let cost = |n: f64| 100.0 + 10.0 * n + 190.0 * (n - 4.0).max(0.0);
        let points: Vec<(f64, f64)> = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0]
            .iter()
            .map(|&n| {
                let wobble = if (n as u64).is_multiple_of(2) {
                    1.01
                } else {
                    0.99
                };
                (n, cost(n) * wobble)
            })
            .collect();
        let knee = knee(&points).expect("a knee at 4");
        assert_eq!(knee.at, 4.0, "{knee:?}");
        assert!(knee.steepens());
        assert!((knee.slope_before - 10.0).abs() < 5.0, "{knee:?}");
        assert!((knee.slope_after - 200.0).abs() < 10.0, "{knee:?}");
    }

    /// Gaussian noise from a seeded generator (Box-Muller), for repeatable trials.
    fn noise(state: &mut u64) -> f64 {
        let mut uniform = || {
            *state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            ((*state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let (u, v) = (uniform(), uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    #[test]
    fn straight_lines_with_noise_rarely_show_a_knee() {
        let mut state = 7;
        let ns: [f64; 8] = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0];
        let trials = 2_000;
        let false_knees = (0..trials)
            .filter(|_| {
                let points: Vec<(f64, f64)> = ns
                    .iter()
                    .map(|&n| (n, 10.0 + 2.0 * n + 3.0 * noise(&mut state)))
                    .collect();
                knee(&points).is_some()
            })
            .count();
        println!("false knees: {false_knees} of {trials}");
        assert!(false_knees * 100 < trials * 2, "{false_knees} of {trials}");
    }

    #[test]
    fn a_noisy_bend_is_still_found() {
        let mut state = 11;
        let ns: [f64; 8] = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0];
        let trials = 500;
        let found = (0..trials)
            .filter(|_| {
                let points: Vec<(f64, f64)> = ns
                    .iter()
                    .map(|&n| {
                        let cost = 100.0 + 10.0 * n + 190.0 * (n - 4.0).max(0.0);
                        (n, cost * (1.0 + 0.05 * noise(&mut state)))
                    })
                    .collect();
                // Noise may move the best hinge to a neighbouring N.
                knee(&points).is_some_and(|k| (3.0..=6.0).contains(&k.at) && k.steepens())
            })
            .count();
        println!("bend near 4 found: {found} of {trials}");
        assert!(found * 5 >= trials * 4, "{found} of {trials}");
    }

    #[test]
    fn too_few_points_claim_nothing() {
        let points = [(1.0, 1.0), (2.0, 2.0), (4.0, 4.0), (8.0, 40.0)];
        assert_eq!(knee(&points), None);
        assert_eq!(knee(&[(1.0, f64::NAN); 6]), None);
    }

    #[test]
    fn case_3_has_too_few_points_for_a_hinge() {
        // CASES.md case 3, pause-all commit time (ms): flat to 8 vCPUs, then steep. Six N
        // cannot carry four parameters under AICc; the USL's own knee describes it instead.
        let points = [
            (1.0, 2.2),
            (2.0, 3.0),
            (4.0, 3.1),
            (8.0, 3.4),
            (16.0, 12.0),
            (24.0, 20.0),
        ];
        assert_eq!(knee(&points), None);
    }
}
