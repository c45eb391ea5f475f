//! How a cost grows with N: constant, linear (Amdahl's serial fraction, in latency form) or
//! the Universal Scalability Law (contention plus coherency), fitted by least squares,
//! chosen by AIC, with bootstrap intervals and extrapolation.
//!
//! In latency form the models are
//!
//! ```text
//! constant  T(N) = T1
//! linear    T(N) = T1 (1 + s (N - 1))                 s: serialized share (Amdahl)
//! USL       T(N) = T1 (1 + s (N - 1) + k N (N - 1))    k: coherency (crosstalk)
//! ```
//!
//! All three are linear in their coefficients (c0 = T1, c1 = T1 s, c2 = T1 k), so they are
//! fitted exactly by linear least squares; no iterative solver (and no dependency) needed.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    Constant,
    Linear,
    Usl,
}

impl Model {
    pub const ALL: [Model; 3] = [Model::Constant, Model::Linear, Model::Usl];

    pub fn name(self) -> &'static str {
        match self {
            Model::Constant => "constant",
            Model::Linear => "linear (Amdahl)",
            Model::Usl => "USL",
        }
    }

    fn parameters(self) -> usize {
        match self {
            Model::Constant => 1,
            Model::Linear => 2,
            Model::Usl => 3,
        }
    }

    fn basis(self, n: f64) -> [f64; 3] {
        let m = n - 1.0;
        match self {
            Model::Constant => [1.0, 0.0, 0.0],
            Model::Linear => [1.0, m, 0.0],
            Model::Usl => [1.0, m, n * m],
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn usl(t1: f64, s: f64, k: f64) -> impl Fn(f64) -> f64 {
        move |n| t1 * (1.0 + s * (n - 1.0) + k * n * (n - 1.0))
    }

    #[test]
    fn known_usl_parameters_are_recovered_and_usl_wins() {
        let truth = usl(100.0, 0.05, 0.002);
        let points: Vec<(f64, f64)> = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
            .iter()
            .map(|&n| (n, truth(n)))
            .collect();
        let chosen = select(&points);
        let best = chosen.best().unwrap();
        assert_eq!(best.model, Model::Usl);
        assert!(
            (best.t1 - 100.0).abs() < 1e-6
                && (best.sigma - 0.05).abs() < 1e-9
                && (best.kappa - 0.002).abs() < 1e-9,
            "{best:?}"
        );
        assert!(chosen.distinguishable);
        assert!((best.knee().unwrap() - 25.0).abs() < 1e-6);
        assert_eq!(
            best.crosses((truth(40.0) + truth(41.0)) / 2.0, 1000),
            Some(41)
        );
    }

    #[test]
    fn a_straight_line_picks_linear_with_its_slope() {
        // 1.02 s per device, case 1's shape.
        let points: Vec<(f64, f64)> = (1..=16)
            .map(|n| (n as f64, 0.3 + 1.02 * n as f64))
            .collect();
        let best = *select(&points).best().unwrap();
        // USL fits a line exactly too (kappa 0); AIC's parameter penalty prefers linear.
        assert_eq!(best.model, Model::Linear, "{best:?}");
        assert!((best.slope_at(10.0) - 1.02).abs() < 1e-9);
        // 0.3 + 1.02 N passes 30 s between N = 29 (29.88 s) and N = 30 (30.9 s).
        assert_eq!(best.crosses(30.0, 100), Some(30));
    }

    #[test]
    fn case_3_published_table_is_fitted_and_printed() {
        // CASES.md case 3: memslot commit time (ms) versus vCPUs, 24-core EPYC.
        let ioctl = [
            (1.0, 2.1),
            (2.0, 2.5),
            (4.0, 2.2),
            (8.0, 2.4),
            (16.0, 3.6),
            (24.0, 12.5),
        ];
        let pause_all = [
            (1.0, 2.2),
            (2.0, 3.0),
            (4.0, 3.1),
            (8.0, 3.4),
            (16.0, 12.0),
            (24.0, 20.0),
        ];
        for (name, points) in [("ioctl", &ioctl[..]), ("pause-all", &pause_all[..])] {
            let s = select(points);
            for f in &s.fits {
                println!(
                    "case 3 {name}: {} T1 {:.3} ms sigma {:.5} kappa {:.6} AIC {:.2}",
                    f.model.name(),
                    f.t1,
                    f.sigma,
                    f.kappa,
                    f.aic
                );
            }
            let best = s.best().unwrap();
            // Both grow faster than linearly past 16 vCPUs: the quadratic term is needed.
            assert_eq!(best.model, Model::Usl, "{name}: {best:?}");
            assert!(best.kappa > 0.0, "{name}");
            assert!(best.predict(32.0) > best.predict(24.0));
        }
    }

    #[test]
    fn fits_that_need_a_cost_at_or_below_zero_at_n_1_are_refused() {
        // Flat, then a jump: the best straight line crosses zero before N = 1.
        let points = [
            (1.0, 1.0),
            (2.0, 1.0),
            (3.0, 1.0),
            (8.0, 100.0),
            (9.0, 101.0),
        ];
        let line = fit_columns(Model::Linear, &points, &[0, 1, 2]).unwrap();
        assert!(line.t1 < 0.0, "{line:?}");
        assert_eq!(fit(Model::Linear, &points), None);
        assert!(select(&points).fits.iter().all(|f| f.t1 > 0.0));
    }

    #[test]
    fn noise_around_a_constant_cannot_be_told_apart_reliably() {
        let points: Vec<(f64, f64)> = [(1.0, 10.0), (2.0, 10.2), (4.0, 9.9), (8.0, 10.1)].to_vec();
        let s = select(&points);
        assert_eq!(s.best().unwrap().model, Model::Constant);
        assert!(
            fit(Model::Usl, &[(1.0, 1.0), (2.0, 2.0), (3.0, 3.5)]).is_none(),
            "3 parameters need 4 N"
        );
    }

    #[test]
    fn bootstrap_intervals_cover_the_true_slope() {
        // Samples around 1000 + 50 (N - 1) with spread.
        let groups_owned: Vec<(f64, Vec<u64>)> = [1u64, 2, 4, 8]
            .iter()
            .map(|&n| {
                (
                    n as f64,
                    (0..200)
                        .map(|i| 1_000 + 50 * (n - 1) + (i * 37) % 40)
                        .collect(),
                )
            })
            .collect();
        let groups: Vec<(f64, &[u64])> = groups_owned
            .iter()
            .map(|(n, s)| (*n, s.as_slice()))
            .collect();
        let mean = |s: &mut [u64]| s.iter().sum::<u64>() as f64 / s.len() as f64;
        let ci = bootstrap_parameters(Model::Linear, &groups, mean, 500, 11).unwrap();
        // The band holds the truth at every N, and widens when extrapolating.
        let band =
            bootstrap_band(Model::Linear, &groups, mean, 500, 11, &[1.0, 8.0, 64.0]).unwrap();
        for &(n, lo, hi) in &band {
            let truth = 1_019.5 + 50.0 * (n - 1.0);
            assert!(lo <= truth && truth <= hi, "{band:?}");
        }
        assert!(band[2].2 - band[2].1 > band[1].2 - band[1].1, "{band:?}");
        let slope = |t1: f64, s: f64| t1 * s;
        assert!(ci.t1.0 < 1_020.0 && ci.t1.1 > 1_018.0, "{ci:?}");
        assert!(
            slope(1_019.5, ci.sigma.0) < 50.5 && slope(1_019.5, ci.sigma.1) > 49.5,
            "{ci:?}"
        );
    }
}
