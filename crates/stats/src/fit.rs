//! How a cost grows with N, as a shape: constant, linear (Amdahl's serial fraction, in
//! latency form) or the Universal Scalability Law (contention plus coherency), fitted to
//! each point's statistic by weighted least squares within the models' physical bounds.
//!
//! In latency form the models are
//!
//! ```text
//! constant  T(N) = T1
//! linear    T(N) = T1 (1 + s (N - 1))                 s: serialized share (Amdahl)
//! USL       T(N) = T1 (1 + s (N - 1) + k N (N - 1))    k: coherency (crosstalk)
//! ```
//!
//! All three are linear in their coefficients c0 = T1, c1 = T1 s, c2 = T1 k, and the bounds
//! T1 > 0, 0 <= s <= 1 and k >= 0 are linear in them too (c0 > 0, 0 <= c1 <= c0, c2 >= 0),
//! so the fit is a small quadratic program: the least-squares solution on every face of the
//! feasible region (each subset of bounds held as equalities), the best feasible one kept.
//! That is the constrained fit the R `usl` package makes, exactly rather than iteratively; a
//! fit is never refused for wanting T1 <= 0 or k < 0, and never printed with them.
//!
//! Each point weighs by the inverse variance of its statistic (from its confidence
//! interval, see [`crate::growth`]), so a point measured from ten samples counts for less
//! than one measured from a thousand. With the variances known, the weighted residual sum
//! is a chi-square: its tail probability is the goodness of fit ([`Fit::fit_p`]), and the
//! difference between two nested models is a likelihood-ratio test ([`usl_over_linear`]).

use serde::{Deserialize, Serialize};

use crate::special::{chi_square_sf, normal_quantile};
use crate::Interval;

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

    pub(crate) fn parameters(self) -> usize {
        match self {
            Model::Constant => 1,
            Model::Linear => 2,
            Model::Usl => 3,
        }
    }

    pub(crate) fn basis(self, n: f64) -> [f64; 3] {
        let m = n - 1.0;
        match self {
            Model::Constant => [1.0, 0.0, 0.0],
            Model::Linear => [1.0, m, 0.0],
            Model::Usl => [1.0, m, n * m],
        }
    }
}

/// One point to fit: the statistic `y` at `n` and its standard deviation `sd` (> 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeightedPoint {
    pub n: f64,
    pub y: f64,
    pub sd: f64,
}

impl WeightedPoint {
    /// Finite, with a positive finite sd: a point a fit can weigh.
    pub fn usable(&self) -> bool {
        self.n.is_finite() && self.y.is_finite() && self.sd > 0.0 && self.sd.is_finite()
    }
}

/// A goodness-of-fit p below this says the model misses the points: no model fits, and
/// nothing is extrapolated from it.
pub const MISFIT_P: f64 = 0.001;

/// One fitted model, always within T1 > 0, 0 <= s <= 1, k >= 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    pub model: Model,
    /// T(1), the cost at N = 1, in the statistic's unit (ns).
    pub t1: f64,
    /// Serialized share s (contention), 0 to 1; 0 for the constant model.
    pub sigma: f64,
    /// Coherency k, at least 0; 0 unless USL.
    pub kappa: f64,
    /// The weighted residual sum of squares, a chi-square when the model holds.
    pub chi_square: f64,
    /// Points fitted minus the model's parameters.
    pub df: usize,
    /// Goodness of fit: the chance of a chi-square this large if the model held.
    pub fit_p: f64,
    /// The bounds the fit rests on ("s = 1", "k = 0"): where the unconstrained fit would
    /// have left the model's physical range.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at_bounds: Vec<String>,
    /// Covariance of (T1, T1 s, T1 k), widened by the misfit when the points scatter more
    /// than their intervals say.
    #[serde(skip)]
    covariance: [[f64; 3]; 3],
}

impl Fit {
    pub fn predict(&self, n: f64) -> f64 {
        self.t1 * (1.0 + self.sigma * (n - 1.0) + self.kappa * n * (n - 1.0))
    }

    /// The cost added by each further unit of N at `n` (the local slope).
    pub fn slope_at(&self, n: f64) -> f64 {
        self.t1 * (self.sigma + self.kappa * (2.0 * n - 1.0))
    }

    /// Whether the model describes the points (goodness of fit at least [`MISFIT_P`]).
    pub fn fits(&self) -> bool {
        self.fit_p >= MISFIT_P
    }

    /// [`Fit::slope_at`] with its interval at `confidence`.
    pub fn slope_interval(&self, n: f64, confidence: f64) -> Interval {
        self.functional([0.0, 1.0, 2.0 * n - 1.0], confidence)
    }

    /// [`Fit::predict`] with its interval at `confidence`.
    pub fn predict_interval(&self, n: f64, confidence: f64) -> Interval {
        let mut interval = self.functional(Model::Usl.basis(n), confidence);
        // A cost is never negative, whatever the normal approximation says.
        interval.low = interval.low.max(0.0);
        interval
    }

    /// The linear function `g` of the coefficients with its normal-theory interval.
    fn functional(&self, g: [f64; 3], confidence: f64) -> Interval {
        let c = [self.t1, self.t1 * self.sigma, self.t1 * self.kappa];
        let estimate: f64 = (0..3).map(|i| g[i] * c[i]).sum();
        let variance: f64 = (0..3)
            .flat_map(|i| (0..3).map(move |j| (i, j)))
            .map(|(i, j)| g[i] * self.covariance[i][j] * g[j])
            .sum();
        let half = normal_quantile(0.5 + confidence / 2.0) * variance.max(0.0).sqrt();
        Interval {
            estimate,
            low: estimate - half,
            high: estimate + half,
        }
    }

    /// The smallest integer N at which the predicted cost exceeds `deadline`, searching up
    /// to `limit`; None if it never does there.
    pub fn crosses(&self, deadline: f64, limit: u64) -> Option<u64> {
        (1..=limit).find(|&n| self.predict(n as f64) > deadline)
    }

    /// Where coherency starts to cost more than contention (k N (N-1) > s (N-1), so
    /// N > s / k): where the USL departs from linear. None without coherency.
    pub fn knee(&self) -> Option<f64> {
        (self.model == Model::Usl && self.kappa > 0.0).then(|| (self.sigma / self.kappa).max(1.0))
    }
}

/// A bound of the coefficients: `row . c >= floor`.
struct Bound {
    row: [f64; 3],
    floor: f64,
    name: &'static str,
}

/// T1 is held above this share of the largest value: "T1 > 0" as a closed bound.
const T1_FLOOR: f64 = 1e-9;

/// The weighted least-squares fit of `model` within its bounds; None with too few distinct
/// N to leave a degree of freedom, or with a point that is not finite or has no positive sd.
pub fn fit(model: Model, points: &[WeightedPoint]) -> Option<Fit> {
    let p = model.parameters();
    let mut distinct: Vec<f64> = points.iter().map(|q| q.n).collect();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    if distinct.len() <= p || !points.iter().all(WeightedPoint::usable) {
        return None;
    }
    // Scaled so every column and the values are of order 1: N (N - 1) reaches 10^4 and
    // the values 10^9 ns, which the normal equations would square.
    let y_scale = points
        .iter()
        .map(|q| q.y.abs())
        .fold(0.0, f64::max)
        .max(1e-300);
    let mut column_scale = [1.0f64; 3];
    for q in points {
        let b = model.basis(q.n);
        for j in 0..p {
            column_scale[j] = column_scale[j].max(b[j].abs());
        }
    }
    let scaled = |q: &WeightedPoint| {
        let b = model.basis(q.n);
        let row: [f64; 3] = std::array::from_fn(|j| b[j] / column_scale[j]);
        (row, q.y / y_scale, (q.sd / y_scale).powi(-2))
    };
    let mut h = [[0.0f64; 3]; 3];
    let mut g = [0.0f64; 3];
    for q in points {
        let (row, y, w) = scaled(q);
        for i in 0..p {
            g[i] += w * row[i] * y;
            for j in 0..p {
                h[i][j] += w * row[i] * row[j];
            }
        }
    }
    // The bounds on the unscaled coefficients c_j = c'_j y_scale / column_scale_j, as rows
    // on the scaled ones.
    let unscale =
        |row: [f64; 3]| -> [f64; 3] { std::array::from_fn(|j| row[j] * y_scale / column_scale[j]) };
    let mut bounds = vec![Bound {
        row: unscale([1.0, 0.0, 0.0]),
        floor: T1_FLOOR * y_scale,
        name: "T1 > 0",
    }];
    if p >= 2 {
        bounds.push(Bound {
            row: unscale([0.0, 1.0, 0.0]),
            floor: 0.0,
            name: "s = 0",
        });
        bounds.push(Bound {
            row: unscale([1.0, -1.0, 0.0]),
            floor: 0.0,
            name: "s = 1",
        });
    }
    if p >= 3 {
        bounds.push(Bound {
            row: unscale([0.0, 0.0, 1.0]),
            floor: 0.0,
            name: "k = 0",
        });
    }
    let chi_square_of = |c: &[f64]| -> f64 {
        points
            .iter()
            .map(|q| {
                let (row, y, w) = scaled(q);
                let predicted: f64 = (0..p).map(|j| row[j] * c[j]).sum();
                w * (y - predicted).powi(2)
            })
            .sum()
    };
    let feasible = |c: &[f64]| {
        bounds.iter().all(|b| {
            let value: f64 = (0..p).map(|j| b.row[j] * c[j]).sum();
            let size: f64 = (0..p).map(|j| (b.row[j] * c[j]).abs()).sum::<f64>() + b.floor.abs();
            value >= b.floor - 1e-9 * size.max(1e-300)
        })
    };
    // Every face: each subset of the bounds held as equalities.
    let mut best: Option<(f64, Vec<f64>, Vec<usize>)> = None;
    for mask in 0u32..(1 << bounds.len()) {
        let active: Vec<usize> = (0..bounds.len()).filter(|i| mask & (1 << i) != 0).collect();
        if active.len() > p {
            continue;
        }
        let Some(solution) = solve_on_face(&h, &g, p, &active, &bounds) else {
            continue;
        };
        let c = &solution[..p];
        if !feasible(c) {
            continue;
        }
        let chi = chi_square_of(c);
        if best
            .as_ref()
            .is_none_or(|(b, _, _)| chi < *b - 1e-12 * b.abs())
        {
            best = Some((chi, solution, active));
        }
    }
    let (chi_square, solution, active) = best?;
    let c: [f64; 3] = std::array::from_fn(|j| {
        if j < p {
            solution[j] * y_scale / column_scale[j]
        } else {
            0.0
        }
    });
    let df = points.len() - p;
    let fit_p = chi_square_sf(chi_square, df as f64);
    // The covariance of the scaled coefficients is the leading block of the inverse of the
    // face's KKT matrix (the weights are inverse variances); unscaled, then widened by the
    // misfit when the points scatter more than their intervals allow.
    let inverse = kkt_inverse(&h, p, &active, &bounds);
    let dispersion = (chi_square / df as f64).max(1.0);
    let mut covariance = [[0.0f64; 3]; 3];
    if let Some(inverse) = inverse {
        for i in 0..p {
            for j in 0..p {
                covariance[i][j] = inverse[i][j] * dispersion * y_scale * y_scale
                    / (column_scale[i] * column_scale[j]);
            }
        }
    }
    let at_bounds = active
        .iter()
        .map(|&i| bounds[i].name)
        .filter(|name| *name != "T1 > 0")
        .map(String::from)
        .collect();
    Some(Fit {
        model,
        t1: c[0],
        // The clamps absorb rounding on a face such as s = 1, which leaves c1 / c0 a part
        // in 10^16 above 1.
        sigma: (c[1] / c[0]).clamp(0.0, 1.0),
        kappa: (c[2] / c[0]).max(0.0),
        chi_square,
        df,
        fit_p,
        at_bounds,
        covariance,
    })
}

/// The p of the likelihood-ratio test of the USL against the linear model it contains
/// (k = 0): the drop in chi-square, referred to the half-and-half mixture of 0 and a
/// chi-square with one degree of freedom, since k cannot go below its bound.
pub fn usl_over_linear(linear: &Fit, usl: &Fit) -> f64 {
    let drop = (linear.chi_square - usl.chi_square).max(0.0);
    if drop == 0.0 {
        return 1.0;
    }
    0.5 * chi_square_sf(drop, 1.0)
}

/// The KKT system of least squares on a face: [H A'; A 0] [c; l] = [g; floors].
fn kkt(h: &[[f64; 3]; 3], p: usize, active: &[usize], bounds: &[Bound]) -> (Vec<Vec<f64>>, usize) {
    let size = p + active.len();
    let mut m = vec![vec![0.0; size]; size];
    for i in 0..p {
        m[i][..p].copy_from_slice(&h[i][..p]);
    }
    for (k, &b) in active.iter().enumerate() {
        for (j, &value) in bounds[b].row.iter().enumerate().take(p) {
            m[p + k][j] = value;
            m[j][p + k] = value;
        }
    }
    (m, size)
}

fn solve_on_face(
    h: &[[f64; 3]; 3],
    g: &[f64; 3],
    p: usize,
    active: &[usize],
    bounds: &[Bound],
) -> Option<Vec<f64>> {
    let (m, size) = kkt(h, p, active, bounds);
    let mut rhs = vec![0.0; size];
    rhs[..p].copy_from_slice(&g[..p]);
    for (k, &b) in active.iter().enumerate() {
        rhs[p + k] = bounds[b].floor;
    }
    solve_dense(m, rhs)
}

fn kkt_inverse(
    h: &[[f64; 3]; 3],
    p: usize,
    active: &[usize],
    bounds: &[Bound],
) -> Option<Vec<Vec<f64>>> {
    let (m, size) = kkt(h, p, active, bounds);
    let columns: Option<Vec<Vec<f64>>> = (0..size)
        .map(|j| {
            let mut unit = vec![0.0; size];
            unit[j] = 1.0;
            solve_dense(m.clone(), unit)
        })
        .collect();
    let columns = columns?;
    Some(
        (0..size)
            .map(|i| (0..size).map(|j| columns[j][i]).collect())
            .collect(),
    )
}

/// Gaussian elimination with partial pivoting; None when the matrix is singular.
pub(crate) fn solve_dense(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    let scale = a
        .iter()
        .flatten()
        .map(|v| v.abs())
        .fold(0.0, f64::max)
        .max(1e-300);
    for col in 0..n {
        let pivot = (col..n).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[pivot][col].abs() <= 1e-13 * scale {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        let pivot_row = a[col].clone();
        let pivot_value = b[col];
        for (row, values) in a.iter_mut().enumerate() {
            if row != col {
                let f = values[col] / pivot_row[col];
                if f != 0.0 {
                    for (value, p) in values.iter_mut().zip(&pivot_row).skip(col) {
                        *value -= f * p;
                    }
                    b[row] -= f * pivot_value;
                }
            }
        }
    }
    Some((0..n).map(|i| b[i] / a[i][i]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usl(t1: f64, s: f64, k: f64) -> impl Fn(f64) -> f64 {
        move |n| t1 * (1.0 + s * (n - 1.0) + k * n * (n - 1.0))
    }

    fn points(ns: &[f64], cost: impl Fn(f64) -> f64, relative_sd: f64) -> Vec<WeightedPoint> {
        ns.iter()
            .map(|&n| WeightedPoint {
                n,
                y: cost(n),
                sd: relative_sd * cost(n),
            })
            .collect()
    }

    fn physical(f: &Fit) -> bool {
        f.t1 > 0.0 && (0.0..=1.0).contains(&f.sigma) && f.kappa >= 0.0
    }

    #[test]
    fn known_usl_parameters_are_recovered_and_fit() {
        let truth = usl(100.0, 0.05, 0.002);
        let ps = points(&[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0], &truth, 0.01);
        let f = fit(Model::Usl, &ps).unwrap();
        assert!(
            (f.t1 - 100.0).abs() < 1e-6
                && (f.sigma - 0.05).abs() < 1e-9
                && (f.kappa - 0.002).abs() < 1e-9,
            "{f:?}"
        );
        assert!(
            f.chi_square < 1e-9 && f.fits() && f.at_bounds.is_empty(),
            "{f:?}"
        );
        assert!((f.knee().unwrap() - 25.0).abs() < 1e-6);
        let line = fit(Model::Linear, &ps).unwrap();
        assert!(!line.fits(), "a line through a USL curve misses: {line:?}");
        assert!(usl_over_linear(&line, &f) < 1e-6);
        // The slope's interval holds the truth: 100 (0.05 + 0.002 (2 * 64 - 1)).
        let slope = f.slope_interval(64.0, 0.99);
        assert!((slope.estimate - 30.4).abs() < 1e-6, "{slope:?}");
        assert!(slope.low < 30.4 && slope.high > 30.4, "{slope:?}");
    }

    #[test]
    fn a_steep_line_through_noisy_points_is_bounded_not_refused() {
        // Flat, then a jump: the free line crosses zero before N = 1, and the free USL
        // wants k < 0. Both are fitted at their bounds instead.
        let ps = [
            (1.0, 1.0),
            (2.0, 1.0),
            (3.0, 1.0),
            (8.0, 100.0),
            (9.0, 101.0),
        ]
        .map(|(n, y)| WeightedPoint { n, y, sd: 1.0 });
        for model in Model::ALL {
            let f = fit(model, &ps).unwrap();
            assert!(physical(&f), "{f:?}");
        }
        let line = fit(Model::Linear, &ps).unwrap();
        assert!(line.at_bounds.contains(&"s = 1".to_string()), "{line:?}");
        assert!(!line.fits());
    }

    #[test]
    fn a_falling_cost_fits_no_growing_model_below_its_bounds() {
        let ps = points(&[1.0, 2.0, 4.0, 8.0], |n| 100.0 / n, 0.02);
        for model in Model::ALL {
            let f = fit(model, &ps).unwrap();
            assert!(physical(&f), "{f:?}");
        }
        assert!(fit(Model::Linear, &ps)
            .unwrap()
            .at_bounds
            .contains(&"s = 0".to_string()));
    }

    #[test]
    fn weights_let_precise_points_decide() {
        // Three precise points on 10 + 2 (N - 1) and one imprecise point far off it.
        let mut ps = points(&[1.0, 2.0, 4.0], |n| 10.0 + 2.0 * (n - 1.0), 0.001);
        ps.push(WeightedPoint {
            n: 8.0,
            y: 60.0,
            sd: 30.0,
        });
        let f = fit(Model::Linear, &ps).unwrap();
        assert!((f.slope_at(8.0) - 2.0).abs() < 0.01, "{f:?}");
        assert!(f.fits(), "{f:?}");
    }

    #[test]
    fn too_few_distinct_n_fit_nothing() {
        let ps = points(&[1.0, 2.0, 3.0], |n| n, 0.1);
        assert!(fit(Model::Usl, &ps).is_none(), "3 parameters need 4 N");
        assert!(fit(Model::Linear, &ps).is_some());
        let zero_sd = [WeightedPoint {
            n: 1.0,
            y: 1.0,
            sd: 0.0,
        }; 3];
        assert!(fit(Model::Constant, &zero_sd).is_none());
    }

    #[test]
    fn the_constant_is_the_weighted_mean() {
        let ps = [(1.0, 10.0, 1.0), (2.0, 20.0, 2.0)].map(|(n, y, sd)| WeightedPoint { n, y, sd });
        let f = fit(Model::Constant, &ps).unwrap();
        // Weights 1 and 1/4: (10 + 20/4) / 1.25 = 12.
        assert!((f.t1 - 12.0).abs() < 1e-9, "{f:?}");
        assert_eq!(f.df, 1);
        // chi-square (10 - 12)^2 + (20 - 12)^2 / 4 = 20.
        assert!((f.chi_square - 20.0).abs() < 1e-9, "{f:?}");
    }
}
