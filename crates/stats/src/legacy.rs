//! The unweighted fits of the medians chosen by AIC, and the unweighted hinge, that the
//! report's scaling lines and the verdict's growth sentence used before growth claims
//! ([`crate::growth`]); kept only until both read the claims, then removed.

use serde::{Deserialize, Serialize};

use crate::fit::Model;

/// One fitted model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    pub model: Model,
    /// T(1), the cost at N = 1.
    pub t1: f64,
    /// Serialized share s (contention): 0 for the constant model.
    pub sigma: f64,
    /// Coherency k: 0 unless USL.
    pub kappa: f64,
    /// Residual sum of squares.
    pub rss: f64,
    /// Akaike information criterion, n ln(RSS/n) + 2k (lower is better).
    pub aic: f64,
}

impl Fit {
    pub fn predict(&self, n: f64) -> f64 {
        self.t1 * (1.0 + self.sigma * (n - 1.0) + self.kappa * n * (n - 1.0))
    }

    /// The cost added by each further unit of N at `n` (the local slope).
    pub fn slope_at(&self, n: f64) -> f64 {
        self.t1 * (self.sigma + self.kappa * (2.0 * n - 1.0))
    }

    /// The smallest integer N at which the predicted cost exceeds `deadline`, searching up
    /// to `limit`; None if it never does there.
    pub fn crosses(&self, deadline: f64, limit: u64) -> Option<u64> {
        (1..=limit).find(|&n| self.predict(n as f64) > deadline)
    }

    /// Where coherency starts to cost more than contention (k N (N-1) > s (N-1), so
    /// N > s / k): the knee where growth departs from linear. None without coherency.
    pub fn knee(&self) -> Option<f64> {
        (self.model == Model::Usl && self.kappa > 0.0).then(|| (self.sigma / self.kappa).max(1.0))
    }
}

/// Least-squares fit of `model` to (N, cost) points; None with too few distinct N. The
/// USL's coefficients are physical only when non-negative: a negative coherency means the
/// data are no more than linear (the linear model covers that: None), and a negative
/// contention term is refitted with contention fixed at 0.
pub fn fit(model: Model, points: &[(f64, f64)]) -> Option<Fit> {
    let free = fit_columns(model, points, &[0, 1, 2])?;
    // T1 is a cost at N = 1: a fit that needs it at or below zero (a steep line through
    // noisy points) describes no real system, and its s and k (ratios to T1) mean nothing.
    let physical = |f: Fit| (f.t1 > 0.0 && f.kappa >= 0.0).then_some(f);
    match model {
        Model::Constant => Some(free),
        Model::Linear => physical(free),
        Model::Usl if free.kappa < 0.0 || free.t1 <= 0.0 => None,
        Model::Usl if free.sigma < 0.0 => physical(fit_columns(model, points, &[0, 2])?),
        Model::Usl => Some(free),
    }
}

/// Least squares over the chosen basis columns of `model` (the others fixed at 0).
fn fit_columns(model: Model, points: &[(f64, f64)], columns: &[usize]) -> Option<Fit> {
    let k = model.parameters().min(columns.len());
    let columns = &columns[..k];
    let mut distinct: Vec<f64> = points.iter().map(|p| p.0).collect();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    // More distinct N than parameters: a model that passes through every point exactly
    // has nothing left to be judged on, so AIC would always prefer it.
    if distinct.len() <= k
        || points
            .iter()
            .any(|&(n, y)| !n.is_finite() || !y.is_finite())
    {
        return None;
    }
    // Normal equations (A^T A) c = A^T y for the model's k basis functions.
    let mut ata = [[0.0f64; 3]; 3];
    let mut aty = [0.0f64; 3];
    for &(n, y) in points {
        let full = model.basis(n);
        let b: Vec<f64> = columns.iter().map(|&c| full[c]).collect();
        for i in 0..k {
            aty[i] += b[i] * y;
            for j in 0..k {
                ata[i][j] += b[i] * b[j];
            }
        }
    }
    let solved = solve(&ata, &aty, k)?;
    let mut c = [0.0f64; 3];
    for (i, &column) in columns.iter().enumerate() {
        c[column] = solved[i];
    }
    let (t1, c1, c2) = (c[0], c[1], c[2]);
    let rss: f64 = points
        .iter()
        .map(|&(n, y)| {
            let b = model.basis(n);
            let predicted = b[0] * t1 + b[1] * c1 + b[2] * c2;
            (y - predicted).powi(2)
        })
        .sum();
    let count = points.len() as f64;
    // Below a part in 10^12 of the data's own size, residuals are rounding, not misfit:
    // without this floor a model with more parameters "wins" on floating-point noise.
    let floor = 1e-12
        * points
            .iter()
            .map(|p| p.1 * p.1)
            .sum::<f64>()
            .max(f64::MIN_POSITIVE);
    let aic = count * (rss.max(floor) / count).ln() + 2.0 * k as f64;
    let (sigma, kappa) = if t1 != 0.0 {
        (c1 / t1, c2 / t1)
    } else {
        (0.0, 0.0)
    };
    Some(Fit {
        model,
        t1,
        sigma,
        kappa,
        rss,
        aic,
    })
}

/// Gaussian elimination with partial pivoting on the leading k x k block.
pub(crate) fn solve(a: &[[f64; 3]; 3], b: &[f64; 3], k: usize) -> Option<[f64; 3]> {
    let mut m = [[0.0f64; 4]; 3];
    for i in 0..k {
        m[i][..k].copy_from_slice(&a[i][..k]);
        m[i][3] = b[i];
    }
    for col in 0..k {
        let pivot = (col..k).max_by(|&x, &y| m[x][col].abs().total_cmp(&m[y][col].abs()))?;
        if m[pivot][col].abs() < 1e-300 {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col];
        for (row, values) in m.iter_mut().enumerate().take(k) {
            if row != col {
                let f = values[col] / pivot_row[col];
                for (value, p) in values.iter_mut().zip(pivot_row.iter()).skip(col) {
                    *value -= f * p;
                }
            }
        }
    }
    let mut x = [0.0f64; 3];
    for i in 0..k {
        x[i] = m[i][3] / m[i][i];
    }
    Some(x)
}

/// Every model that could be fitted, best (lowest AIC) first, and whether the data can
/// tell the best from the runner-up (an AIC difference below 2 cannot).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    pub fits: Vec<Fit>,
    pub distinguishable: bool,
}

impl Selection {
    pub fn best(&self) -> Option<&Fit> {
        self.fits.first()
    }
}

pub fn select(points: &[(f64, f64)]) -> Selection {
    let mut fits: Vec<Fit> = Model::ALL.iter().filter_map(|&m| fit(m, points)).collect();
    fits.sort_by(|a, b| a.aic.total_cmp(&b.aic));
    let distinguishable = match fits.as_slice() {
        [best, next, ..] => next.aic - best.aic >= 2.0,
        _ => false,
    };
    Selection {
        fits,
        distinguishable,
    }
}

/// 95% bootstrap intervals of the chosen model's parameters: resample each point's raw
/// samples, recompute its statistic with `statistic`, refit. Seeded for repeatable output.
pub fn bootstrap_parameters(
    model: Model,
    groups: &[(f64, &[u64])],
    statistic: impl Fn(&mut [u64]) -> f64,
    iterations: usize,
    seed: u64,
) -> Option<ParameterIntervals> {
    let fits = bootstrap_fits(model, groups, statistic, iterations, seed)?;
    let of = |pick: fn(&Fit) -> f64| interval95(fits.iter().map(pick).collect());
    Some(ParameterIntervals {
        t1: of(|f| f.t1),
        sigma: of(|f| f.sigma),
        kappa: of(|f| f.kappa),
    })
}

/// 95% bootstrap band of the model's prediction at each of `xs`, from the same
/// resampling as [`bootstrap_parameters`]: (x, low, high) per x.
pub fn bootstrap_band(
    model: Model,
    groups: &[(f64, &[u64])],
    statistic: impl Fn(&mut [u64]) -> f64,
    iterations: usize,
    seed: u64,
    xs: &[f64],
) -> Option<Vec<(f64, f64, f64)>> {
    let fits = bootstrap_fits(model, groups, statistic, iterations, seed)?;
    Some(
        xs.iter()
            .map(|&x| {
                let (lo, hi) = interval95(fits.iter().map(|f| f.predict(x)).collect());
                (x, lo, hi)
            })
            .collect(),
    )
}

/// Resamples whose refit may be refused (as unphysical) before the intervals would
/// describe only the agreeable part of the data and are not given at all.
const MAX_REFUSED_SHARE: f64 = 0.05;

/// The model refitted to `iterations` resamples of each point's raw samples (each point's
/// statistic recomputed with `statistic`). Seeded for repeatable output. None when more
/// than [`MAX_REFUSED_SHARE`] of the refits were refused.
fn bootstrap_fits(
    model: Model,
    groups: &[(f64, &[u64])],
    statistic: impl Fn(&mut [u64]) -> f64,
    iterations: usize,
    seed: u64,
) -> Option<Vec<Fit>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut scratch = Vec::new();
    let mut fits = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let points: Vec<(f64, f64)> = groups
            .iter()
            .filter(|(_, s)| !s.is_empty())
            .map(|&(n, samples)| {
                scratch.clear();
                scratch.extend((0..samples.len()).map(|_| samples[rng.usize(..samples.len())]));
                (n, statistic(&mut scratch))
            })
            .collect();
        fits.extend(fit(model, &points));
    }
    let refused = iterations - fits.len();
    (!fits.is_empty() && refused as f64 <= MAX_REFUSED_SHARE * iterations as f64).then_some(fits)
}

/// The 2.5th and 97.5th percentiles of `values` (not empty).
fn interval95(mut values: Vec<f64>) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((q * values.len() as f64) as usize).min(values.len() - 1)];
    (at(0.025), at(0.975))
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ParameterIntervals {
    pub t1: (f64, f64),
    pub sigma: (f64, f64),
    pub kappa: (f64, f64),
}

// The hinge.

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
    let coefficients = solve(&ata, &aty, k)?;
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
