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
//! and c are fitted by linear least squares; the best K is kept if its AIC, counting K as
//! a fourth parameter, beats the single straight line by at least 2. Otherwise the data
//! show no knee and none is claimed.

use serde::{Deserialize, Serialize};

/// A change of slope the data support.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// The N where the slope changes (one of the measured N).
    pub at: f64,
    /// Cost per unit of N before and after the knee.
    pub slope_before: f64,
    pub slope_after: f64,
    /// AIC of the straight line minus the hinge's (at least 2).
    pub aic_gain: f64,
}

impl Knee {
    /// Growth is faster past the knee than before it.
    pub fn steepens(&self) -> bool {
        self.slope_after > self.slope_before
    }
}

/// Fewer distinct N than this leave no knee with two points on each side and a degree
/// of freedom to judge it by.
const MIN_DISTINCT: usize = 5;
/// Akaike's rule of thumb: a difference below 2 cannot tell two models apart.
const AIC_MARGIN: f64 = 2.0;

/// The knee of `points` (N, cost), if a hinge beats a straight line by the AIC margin.
pub fn knee(points: &[(f64, f64)]) -> Option<Knee> {
    if points
        .iter()
        .any(|&(n, y)| !n.is_finite() || !y.is_finite())
    {
        return None;
    }
    let mut distinct: Vec<f64> = points.iter().map(|p| p.0).collect();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
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

fn aic(count: usize, rss: f64, parameters: usize) -> f64 {
    let n = count as f64;
    n * (rss / n).ln() + 2.0 * parameters as f64
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
            .map(|&n| (n, cost(n) * if n as u64 % 2 == 0 { 1.01 } else { 0.99 }))
            .collect();
        let knee = knee(&points).expect("a knee at 4");
        assert_eq!(knee.at, 4.0, "{knee:?}");
        assert!(knee.steepens());
        assert!((knee.slope_before - 10.0).abs() < 5.0, "{knee:?}");
        assert!((knee.slope_after - 200.0).abs() < 10.0, "{knee:?}");
    }

    #[test]
    fn a_straight_line_has_no_knee() {
        let points: Vec<(f64, f64)> = (1..=16)
            .map(|n| {
                (
                    n as f64,
                    0.3 + 1.02 * n as f64 + if n % 2 == 0 { 0.01 } else { -0.01 },
                )
            })
            .collect();
        assert_eq!(knee(&points), None);
    }

    #[test]
    fn too_few_points_claim_nothing() {
        let points = [(1.0, 1.0), (2.0, 2.0), (4.0, 4.0), (8.0, 40.0)];
        assert_eq!(knee(&points), None);
        assert_eq!(knee(&[(1.0, f64::NAN); 6]), None);
    }

    #[test]
    fn case_3_pause_all_bends_at_8_vcpus() {
        // CASES.md case 3, pause-all commit time (ms): flat to 8 vCPUs, then steep.
        let points = [
            (1.0, 2.2),
            (2.0, 3.0),
            (4.0, 3.1),
            (8.0, 3.4),
            (16.0, 12.0),
            (24.0, 20.0),
        ];
        let found = knee(&points);
        println!("case 3 pause-all knee: {found:?}");
        let found = found.expect("case 3 bends");
        assert_eq!(found.at, 8.0);
        assert!(found.slope_after > 5.0 * found.slope_before.max(0.01));
    }
}
