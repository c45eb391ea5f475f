//! Where growth departs from a straight line, whatever model fits best overall.
//!
//! The USL has a knee of its own (where coherency overtakes contention), but a cost can
//! also bend without a quadratic term: a slope that steepens once vCPUs outnumber host
//! CPUs, or flattens once a cache is warm. A hinge ("broken stick") describes that:
//!
//! ```text
//! T(N) = a + b N + c max(0, N - K)
//! ```
//!
//! slope b up to the knee K, b + c past it. Each point weighs by the inverse variance of
//! its statistic, as in [`crate::fit`]. For each candidate K (a measured N with another on
//! each side) a, b and c are fitted by weighted least squares, and the best hinge is tested
//! against the straight line: the drop in chi-square is a likelihood ratio with one degree
//! of freedom, and its p is multiplied by the number of candidate K (Bonferroni), since the
//! best of several candidates drops it further by chance. A knee is claimed when that p is
//! below [`ALPHA`] and the hinge itself fits the points (goodness of fit at least
//! [`crate::fit::MISFIT_P`]).
//!
//! With the points' variances known the test needs no information criterion's penalty
//! and works from five points, where the unweighted AICc of medians needed seven: it
//! counts how precisely each point was measured, which a comparison of residual sums
//! cannot.

use serde::{Deserialize, Serialize};

use crate::fit::{solve_dense, WeightedPoint, MISFIT_P};
use crate::special::chi_square_sf;

/// A change of slope the data support.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// The N where the slope changes (one of the measured N).
    pub at: f64,
    /// Cost per unit of N before and after the knee.
    pub slope_before: f64,
    pub slope_after: f64,
    /// The likelihood-ratio p of the hinge against the line, multiplied by the number of
    /// candidate knees.
    pub p: f64,
}

impl Knee {
    /// Growth is faster past the knee than before it.
    pub fn steepens(&self) -> bool {
        self.slope_after > self.slope_before
    }
}

/// Distinct N a hinge needs: two parameters for the line, two more for the hinge (its
/// slope change and where it is), and one degree of freedom left to judge its fit.
pub const MIN_DISTINCT: usize = 5;
/// Significance of the hinge against the line, after the Bonferroni correction.
pub const ALPHA: f64 = 0.01;

/// The distinct N of `points`, ascending.
pub fn distinct_n(points: &[WeightedPoint]) -> Vec<f64> {
    let mut distinct: Vec<f64> = points.iter().map(|p| p.n).collect();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    distinct
}

/// The knee of `points`, if a hinge beats a straight line, fits, and changes the slope by
/// more than `min_change` of the steeper slope (a bend too slight to matter is none).
pub fn knee(points: &[WeightedPoint], min_change: f64) -> Option<Knee> {
    if !points.iter().all(WeightedPoint::usable) {
        return None;
    }
    let distinct = distinct_n(points);
    if distinct.len() < MIN_DISTINCT {
        return None;
    }
    let line = weighted(points, |n| vec![1.0, n])?;
    let candidates = &distinct[1..distinct.len() - 1];
    let (at, hinge) = candidates
        .iter()
        .filter_map(|&k| Some((k, weighted(points, |n| vec![1.0, n, (n - k).max(0.0)])?)))
        .min_by(|a, b| a.1.chi_square.total_cmp(&b.1.chi_square))?;
    let drop = (line.chi_square - hinge.chi_square).max(0.0);
    let p = (chi_square_sf(drop, 1.0) * candidates.len() as f64).min(1.0);
    let fit_p = chi_square_sf(hinge.chi_square, (points.len() - 4) as f64);
    let (before, after) = (
        hinge.coefficients[1],
        hinge.coefficients[1] + hinge.coefficients[2],
    );
    let bends = (after - before).abs() > min_change * before.abs().max(after.abs());
    (p < ALPHA && fit_p >= MISFIT_P && bends).then_some(Knee {
        at,
        slope_before: before,
        slope_after: after,
        p,
    })
}

struct Weighted {
    coefficients: Vec<f64>,
    chi_square: f64,
}

/// Weighted least squares over the columns of `basis` (values scaled to order 1).
fn weighted(points: &[WeightedPoint], basis: impl Fn(f64) -> Vec<f64>) -> Option<Weighted> {
    let scale = points
        .iter()
        .map(|p| p.y.abs())
        .fold(0.0, f64::max)
        .max(1e-300);
    let n_scale = points.iter().map(|p| p.n.abs()).fold(1.0, f64::max);
    let k = basis(1.0).len();
    let column = |j: usize| if j == 0 { 1.0 } else { n_scale };
    let mut h = vec![vec![0.0; k]; k];
    let mut g = vec![0.0; k];
    for p in points {
        let b = basis(p.n);
        let w = (p.sd / scale).powi(-2);
        for i in 0..k {
            g[i] += w * b[i] / column(i) * p.y / scale;
            for j in 0..k {
                h[i][j] += w * b[i] / column(i) * b[j] / column(j);
            }
        }
    }
    let solved = solve_dense(h, g)?;
    let coefficients: Vec<f64> = (0..k).map(|j| solved[j] * scale / column(j)).collect();
    let chi_square = points
        .iter()
        .map(|p| {
            let predicted: f64 = basis(p.n)
                .iter()
                .zip(&coefficients)
                .map(|(b, c)| b * c)
                .sum();
            ((p.y - predicted) / p.sd).powi(2)
        })
        .sum();
    Some(Weighted {
        coefficients,
        chi_square,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ns: &[f64], cost: impl Fn(f64) -> f64, relative_sd: f64) -> Vec<WeightedPoint> {
        ns.iter()
            .map(|&n| WeightedPoint {
                n,
                y: cost(n),
                sd: relative_sd * cost(n),
            })
            .collect()
    }

    /// Gaussian noise from a seeded generator, for repeatable trials.
    fn gaussian(rng: &mut fastrand::Rng) -> f64 {
        let (u, v) = (rng.f64().max(1e-300), rng.f64());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    #[test]
    fn a_slope_that_steepens_past_the_host_cpus_is_found() {
        // 10 us per vCPU up to 4 (the host's CPUs), 200 us per vCPU after: overcommit.
        let cost = |n: f64| 100.0 + 10.0 * n + 190.0 * (n - 4.0).max(0.0);
        let points = at(&[1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0], cost, 0.01);
        let knee = knee(&points, 0.2).expect("a knee at 4");
        assert_eq!(knee.at, 4.0, "{knee:?}");
        assert!(knee.steepens());
        assert!((knee.slope_before - 10.0).abs() < 1e-6, "{knee:?}");
        assert!((knee.slope_after - 200.0).abs() < 1e-6, "{knee:?}");
    }

    #[test]
    fn five_points_are_enough_for_a_clear_bend() {
        // Flat to 8, then steep: case 3's pause-all shape on a sweep of five.
        let cost = |n: f64| 3.0 + 0.05 * n + 1.0 * (n - 8.0).max(0.0);
        let points = at(&[1.0, 2.0, 4.0, 8.0, 16.0], cost, 0.03);
        let found = knee(&points, 0.2).expect("a knee at 8");
        assert_eq!(found.at, 8.0, "{found:?}");
        assert!(found.steepens());
        // Four points are not.
        assert_eq!(knee(&points[..4], 0.2), None);
    }

    #[test]
    fn straight_lines_with_noise_rarely_show_a_knee() {
        let mut rng = fastrand::Rng::with_seed(7);
        let ns = [1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 16.0];
        let trials = 2_000;
        let false_knees = (0..trials)
            .filter(|_| {
                let points: Vec<WeightedPoint> = ns
                    .iter()
                    .map(|&n| {
                        let truth = 10.0 + 2.0 * n;
                        let sd = 0.05 * truth;
                        WeightedPoint {
                            n,
                            y: truth + sd * gaussian(&mut rng),
                            sd,
                        }
                    })
                    .collect();
                knee(&points, 0.2).is_some()
            })
            .count();
        println!("false knees: {false_knees} of {trials}");
        assert!(false_knees * 100 <= trials, "{false_knees} of {trials}");
    }

    #[test]
    fn a_noisy_bend_is_still_found() {
        let mut rng = fastrand::Rng::with_seed(11);
        let ns: [f64; 6] = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0];
        let trials = 500;
        let found = (0..trials)
            .filter(|_| {
                let points: Vec<WeightedPoint> = ns
                    .iter()
                    .map(|&n| {
                        let truth = 100.0 + 10.0 * n + 190.0 * (n - 4.0).max(0.0);
                        let sd = 0.05 * truth;
                        WeightedPoint {
                            n,
                            y: truth + sd * gaussian(&mut rng),
                            sd,
                        }
                    })
                    .collect();
                knee(&points, 0.2).is_some_and(|k| (3.0..=6.0).contains(&k.at) && k.steepens())
            })
            .count();
        println!("bend near 4 found: {found} of {trials}");
        assert!(found * 5 >= trials * 4, "{found} of {trials}");
    }

    #[test]
    fn a_curve_no_hinge_fits_has_no_knee() {
        // Quadratic with tiny error bars: the hinge beats the line, but misses too.
        let points = at(&[1.0, 2.0, 4.0, 8.0, 16.0, 32.0], |n| 1.0 + n * n, 0.001);
        assert_eq!(knee(&points, 0.2), None);
        let nan = [WeightedPoint {
            n: 1.0,
            y: f64::NAN,
            sd: 1.0,
        }; 6];
        assert_eq!(knee(&nan, 0.2), None);
    }
}
