//! Claims about how a cost grows with N, decided from every sample and said with their
//! uncertainty.
//!
//! # Each point
//!
//! For each N the statistic (the median, or the p99 where there are samples enough) is the
//! nearest-rank quantile of all the point's samples ([`crate::quantile`]), and its
//! confidence interval is distribution-free: two order statistics whose ranks come from
//! the binomial distribution of how many samples fall below the true quantile (David and
//! Nagaraja, *Order Statistics*, 2.5). Nothing is assumed about the shape of the latency
//! distribution, so a heavy tail or two modes cost width, not coverage. A quantile has an
//! interval only when both ranks fall inside the sample: the median from 8 samples at
//! 99%, the p99 from 528 ([`samples_needed`]). A point with fewer is not estimated, and a
//! statistic is judged only where every point has one.
//!
//! When a point merges several independent runs (`--runs`), its samples are not one sample
//! of one distribution: each run has its own placement and state. The interval then also
//! spans the runs' own statistics, through a t interval on their logarithms (K runs,
//! K - 1 degrees of freedom), and the point's interval is the wider of the two.
//!
//! # The claims
//!
//! The headline is the ratio of the statistic at the largest N to the one at the smallest,
//! with an interval from the two points' intervals by the method of variance estimates
//! recovery (MOVER; Zou and Donner 2008), on the log scale where a ratio is a difference.
//! At the same confidence (99% by default, [`CONFIDENCE`]) the claim is:
//!
//! - **flat** when every point's ratio to the smallest N, interval and all, stays within
//!   the margin (+-20% by default): an equivalence test (two one-sided tests), never the
//!   mere failure to find growth;
//! - **varies** when neighbouring points move both ways, each move's interval excluding 1;
//! - **grows** when the headline ratio's interval lies above 1;
//! - **falls** when it lies below 1;
//! - **inconclusive** otherwise.
//!
//! A 99% interval keeps a constant cost from being called growing or falling in more than
//! about 1% of sweeps, however many points and samples it has; the tests measure it on
//! thousands of seeded synthetic sweeps. The printed ratio is the number the claim was
//! decided on.
//!
//! # Shape, only where it fits
//!
//! Beside the ratio, the scaling exponent b of T ~ N^b, from a weighted line through the
//! logarithms of the points (its interval widened when the points scatter about the line
//! more than their own intervals allow). For growth from three points on, the linear and
//! USL models are fitted within their bounds ([`crate::fit`]) and the USL kept only when a
//! likelihood-ratio test prefers it; when the kept model misses the points (goodness of
//! fit p < 0.001, each point's uncertainty taken as its interval plus a
//! [`MODEL_TOLERANCE`] of 5%) no model fits and nothing is extrapolated. From five points a
//! hinge test looks for a knee ([`crate::knee`]) whose slopes differ by more than the
//! margin.

use serde::{Deserialize, Serialize};

use crate::fit::{self, Fit, Model, WeightedPoint};
use crate::knee::{self, Knee};
use crate::special::{binomial_cdf, normal_quantile, t_quantile};
pub use crate::Interval;
use crate::Statistic;

/// How far every point may stay from the smallest N's value for the cost to be called
/// flat: +-20%.
pub const DEFAULT_MARGIN: f64 = 0.20;
/// The confidence of every interval a claim is decided on.
pub const CONFIDENCE: f64 = 0.99;
/// Significance at which the likelihood-ratio test prefers the USL to a line.
pub const SHAPE_ALPHA: f64 = 0.01;
/// The narrowest half-width an interval is given on the log scale (0.1%): below it,
/// identical samples would make a point infinitely precise.
const MIN_LOG_HALF_WIDTH: f64 = 1e-3;
/// How far a model may miss a point, as a share of its value, beyond what the point's own
/// interval allows, and still be said to fit: no model of a real system is exact, and with
/// a thousand samples a point the intervals alone reject a line that describes every point
/// within 2%. Added in quadrature to each point's standard deviation for the fits and the
/// knee (not for the claims, which rest on the intervals alone).
pub const MODEL_TOLERANCE: f64 = 0.05;
/// A flat stretch at the start of a sweep is named from this many points on.
const FLAT_STRETCH: usize = 3;

/// An interval on the log scale of `value`, with ends at least [`MIN_LOG_HALF_WIDTH`] from
/// its centre.
fn log_interval(value: Interval) -> LogInterval {
    let at = |v: f64| v.max(1.0).ln();
    let centre = at(value.estimate);
    LogInterval {
        centre,
        below: (centre - at(value.low)).max(MIN_LOG_HALF_WIDTH),
        above: (at(value.high) - centre).max(MIN_LOG_HALF_WIDTH),
    }
}

/// An interval on the log scale, as its centre and the distances to its ends.
#[derive(Debug, Clone, Copy)]
struct LogInterval {
    centre: f64,
    below: f64,
    above: f64,
}

/// What growth is judged with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Flat means within this fraction of the smallest N's value at every N.
    pub margin: f64,
    /// Confidence of every interval, 0 to 1.
    pub confidence: f64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            margin: DEFAULT_MARGIN,
            confidence: CONFIDENCE,
        }
    }
}

/// One point of a sweep: N and its samples, one slice per independent run (a single slice
/// for one run).
#[derive(Debug, Clone)]
pub struct PointSamples<'a> {
    pub n: f64,
    pub runs: Vec<&'a [u64]>,
}

/// One point's statistic with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PointEstimate {
    pub n: f64,
    pub samples: usize,
    /// Independent runs merged in the point; above 1 the interval spans their spread.
    pub runs: usize,
    pub value: Interval,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Claim {
    Grows,
    Flat,
    Falls,
    Varies,
    Inconclusive,
}

impl Claim {
    pub fn name(self) -> &'static str {
        match self {
            Claim::Grows => "grows",
            Claim::Flat => "flat",
            Claim::Falls => "falls",
            Claim::Varies => "varies",
            Claim::Inconclusive => "inconclusive",
        }
    }
}

/// The shape the claim rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    Constant,
    Linear,
    Usl,
    /// The best growing model misses the points: nothing is extrapolated.
    NoModelFits,
    /// No shape is claimed: two points, or a claim that is not growth or flat.
    None,
}

/// A prediction beyond the measured N, made only from a model that fits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub n: f64,
    pub value: Interval,
}

/// A move between neighbouring points whose interval excludes no change.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub from: f64,
    pub to: f64,
    /// The statistic at `to` over the one at `from`.
    pub ratio: Interval,
}

/// How one statistic of one series grows over the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Growth {
    pub statistic: Statistic,
    pub claim: Claim,
    /// The statistic at the largest N over the one at the smallest.
    pub ratio: Interval,
    /// b of T ~ N^b.
    pub exponent: Interval,
    pub model: Shape,
    /// The models fitted for the claim, each within its bounds and with its goodness of fit.
    pub fits: Vec<Fit>,
    /// Cost per unit of N at the largest N (ns), from the model when it fits.
    pub per_unit: Option<Interval>,
    /// At twice the largest N, from the model when it fits.
    pub prediction: Option<Prediction>,
    pub knee: Option<Knee>,
    /// The lowest and highest ends of every point's ratio to the smallest N: flat when
    /// both lie within the margin.
    pub range: (f64, f64),
    /// The largest N up to which the points stay flat, when that is a stretch of at least
    /// three points but not the whole sweep.
    pub flat_to: Option<f64>,
    /// Moves between neighbouring points that their intervals establish.
    pub steps: Vec<Step>,
    pub margin: f64,
    pub confidence: f64,
    pub points: Vec<PointEstimate>,
}

/// Why a statistic's growth is not judged.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum Unjudged {
    /// Fewer than two points.
    TooFewPoints { points: usize },
    /// A point has too few samples for the statistic's interval.
    TooFewSamples {
        n: f64,
        samples: usize,
        needed: usize,
    },
    /// Growth is judged for quantiles (p50, p99), not the mean.
    NotAQuantile,
}

/// The quantile a statistic is, if it is one.
pub fn quantile_of(statistic: Statistic) -> Option<f64> {
    match statistic {
        Statistic::P50 => Some(0.5),
        Statistic::P99 => Some(0.99),
        Statistic::Mean => None,
    }
}

/// The 1-based ranks of the order statistics that bound the `q` quantile of `n` samples
/// with at least `confidence`, each tail at most half the rest; None when a rank would
/// fall outside the sample.
fn ranks(n: usize, q: f64, confidence: f64) -> Option<(usize, usize)> {
    if n == 0 {
        return None;
    }
    let tail = (1.0 - confidence) / 2.0;
    let nn = n as u64;
    // X_(l) lies above the quantile when fewer than l samples do not: P(B <= l - 1).
    let above = |l: usize| binomial_cdf(l as u64 - 1, nn, q);
    // X_(u) lies below it when at least u samples do: P(B >= u) = P(n - B <= n - u).
    let below = |u: usize| binomial_cdf((n - u) as u64, nn, 1.0 - q);
    if above(1) > tail || below(n) > tail {
        return None;
    }
    // The largest l with above(l) <= tail (above grows with l).
    let (mut lo, mut hi) = (1, n);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if above(mid) <= tail {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let l = lo;
    // The smallest u with below(u) <= tail (below falls as u grows).
    let (mut lo, mut hi) = (1, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if below(mid) <= tail {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some((l, lo))
}

/// The fewest samples whose order statistics bound the `q` quantile at `confidence`.
pub fn samples_needed(q: f64, confidence: f64) -> usize {
    let mut n = 1;
    while ranks(n, q, confidence).is_none() {
        n += 1;
    }
    n
}

/// [`ranks`], remembered: a sweep asks for the same few sample counts at every point.
fn ranks_cached(n: usize, q: f64, confidence: f64) -> Option<(usize, usize)> {
    type Key = (usize, u64, u64);
    thread_local! {
        static KNOWN: std::cell::RefCell<std::collections::HashMap<Key, Option<(usize, usize)>>> =
            std::cell::RefCell::new(std::collections::HashMap::new());
    }
    let key = (n, q.to_bits(), confidence.to_bits());
    if let Some(known) = KNOWN.with(|k| k.borrow().get(&key).copied()) {
        return known;
    }
    let found = ranks(n, q, confidence);
    KNOWN.with(|k| {
        let mut known = k.borrow_mut();
        // A bound on memory for a process that judges many different counts.
        if known.len() > 4_096 {
            known.clear();
        }
        known.insert(key, found);
    });
    found
}

/// The `q` quantile of ascending `sorted` with its distribution-free interval at
/// `confidence`; None with too few samples for one.
pub fn quantile_interval(sorted: &[u64], q: f64, confidence: f64) -> Option<Interval> {
    let (l, u) = ranks_cached(sorted.len(), q, confidence)?;
    Some(Interval {
        estimate: crate::quantile(sorted, q),
        low: sorted[l - 1] as f64,
        high: sorted[u - 1] as f64,
    })
}

/// [`quantile_interval`] of `samples` in any order, which it reorders: three selections
/// instead of a sort.
fn quantile_interval_unsorted(samples: &mut [u64], q: f64, confidence: f64) -> Option<Interval> {
    let n = samples.len();
    let (l, u) = ranks_cached(n, q, confidence)?;
    // The nearest rank, as crate::quantile takes it.
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    let (below, &mut estimate, above) = samples.select_nth_unstable(rank - 1);
    let low = if l < rank {
        *below.select_nth_unstable(l - 1).1
    } else {
        estimate
    };
    let high = if u > rank {
        *above.select_nth_unstable(u - rank - 1).1
    } else {
        estimate
    };
    Some(Interval {
        estimate: estimate as f64,
        low: low.min(estimate) as f64,
        high: high.max(estimate) as f64,
    })
}

/// The point's statistic with its interval: order statistics of all its samples, widened
/// to the runs' own spread when it merges several.
pub fn estimate_point(
    point: &PointSamples,
    q: f64,
    confidence: f64,
) -> Result<PointEstimate, Unjudged> {
    let mut pooled: Vec<u64> = point.runs.iter().flat_map(|r| r.iter().copied()).collect();
    let Some(mut value) = quantile_interval_unsorted(&mut pooled, q, confidence) else {
        return Err(Unjudged::TooFewSamples {
            n: point.n,
            samples: pooled.len(),
            needed: samples_needed(q, confidence),
        });
    };
    let runs: Vec<&[u64]> = point
        .runs
        .iter()
        .copied()
        .filter(|r| !r.is_empty())
        .collect();
    if runs.len() >= 2 {
        let logs: Vec<f64> = runs
            .iter()
            .map(|r| {
                let mut run = r.to_vec();
                let n = run.len();
                let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
                (*run.select_nth_unstable(rank - 1).1 as f64).max(1.0).ln()
            })
            .collect();
        let k = logs.len() as f64;
        let mean = logs.iter().sum::<f64>() / k;
        let sd = (logs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (k - 1.0)).sqrt();
        let half = t_quantile(0.5 + confidence / 2.0, k - 1.0) * sd / k.sqrt();
        value.low = value.low.min((mean - half).exp());
        value.high = value.high.max((mean + half).exp());
    }
    Ok(PointEstimate {
        n: point.n,
        samples: pooled.len(),
        runs: point.runs.len(),
        value,
    })
}

/// The ratio of `b`'s statistic to `a`'s with its interval (MOVER on the log scale).
pub fn ratio_between(a: &PointEstimate, b: &PointEstimate) -> Interval {
    let (a, b) = (log_interval(a.value), log_interval(b.value));
    let d = b.centre - a.centre;
    Interval {
        estimate: d.exp(),
        low: (d - b.below.hypot(a.above)).exp(),
        high: (d + b.above.hypot(a.below)).exp(),
    }
}

/// How `statistic` grows over `points` (any order), judged with `options`.
pub fn growth(
    points: &[PointSamples],
    statistic: Statistic,
    options: Options,
) -> Result<Growth, Unjudged> {
    let q = quantile_of(statistic).ok_or(Unjudged::NotAQuantile)?;
    if points.len() < 2 {
        return Err(Unjudged::TooFewPoints {
            points: points.len(),
        });
    }
    let mut estimates = points
        .iter()
        .map(|p| estimate_point(p, q, options.confidence))
        .collect::<Result<Vec<_>, _>>()?;
    estimates.sort_by(|a, b| a.n.total_cmp(&b.n));
    Ok(judge(statistic, estimates, options))
}

/// The claim, ratio, exponent and shape of points already estimated (ascending N, at least
/// two).
pub fn judge(statistic: Statistic, points: Vec<PointEstimate>, options: Options) -> Growth {
    let first = points[0];
    let last = points[points.len() - 1];
    let ratio = ratio_between(&first, &last);
    let (low_margin, high_margin) = (1.0 - options.margin, 1.0 + options.margin);
    let to_first: Vec<Interval> = points[1..]
        .iter()
        .map(|p| ratio_between(&first, p))
        .collect();
    let within = |r: &Interval| r.low >= low_margin && r.high <= high_margin;
    let range = (
        to_first.iter().map(|r| r.low).fold(f64::INFINITY, f64::min),
        to_first
            .iter()
            .map(|r| r.high)
            .fold(f64::NEG_INFINITY, f64::max),
    );
    let flat_prefix = to_first.iter().take_while(|r| within(r)).count() + 1;
    let steps: Vec<Step> = points
        .windows(2)
        .map(|w| Step {
            from: w[0].n,
            to: w[1].n,
            ratio: ratio_between(&w[0], &w[1]),
        })
        .filter(|s| s.ratio.low > 1.0 || s.ratio.high < 1.0)
        .collect();
    let up = steps.iter().any(|s| s.ratio.low > 1.0);
    let down = steps.iter().any(|s| s.ratio.high < 1.0);
    let claim = if flat_prefix == points.len() {
        Claim::Flat
    } else if up && down {
        Claim::Varies
    } else if ratio.low > 1.0 {
        Claim::Grows
    } else if ratio.high < 1.0 {
        Claim::Falls
    } else {
        Claim::Inconclusive
    };
    let z = normal_quantile(0.5 + options.confidence / 2.0);
    let weighted: Vec<WeightedPoint> = points
        .iter()
        .map(|p| {
            let l = log_interval(p.value);
            let y = p.value.estimate.max(1.0);
            WeightedPoint {
                n: p.n,
                y,
                sd: y * ((l.below + l.above) / (2.0 * z)).hypot(MODEL_TOLERANCE),
            }
        })
        .collect();
    let exponent = exponent(&points, &ratio, options.confidence);
    let largest = last.n;
    let mut growth = Growth {
        statistic,
        claim,
        ratio,
        exponent,
        model: Shape::None,
        fits: Vec::new(),
        per_unit: None,
        prediction: None,
        knee: None,
        range,
        flat_to: (flat_prefix >= FLAT_STRETCH && flat_prefix < points.len())
            .then(|| points[flat_prefix - 1].n),
        steps,
        margin: options.margin,
        confidence: options.confidence,
        points,
    };
    match claim {
        Claim::Grows => {
            let linear = fit::fit(Model::Linear, &weighted);
            let usl = fit::fit(Model::Usl, &weighted);
            let chosen = match (&linear, &usl) {
                (Some(l), Some(u)) if fit::usl_over_linear(l, u) < SHAPE_ALPHA => Some(u),
                (Some(l), _) => Some(l),
                _ => None,
            }
            .cloned();
            if let Some(chosen) = chosen {
                if chosen.fits() {
                    growth.model = match chosen.model {
                        Model::Usl => Shape::Usl,
                        _ => Shape::Linear,
                    };
                    growth.per_unit = Some(chosen.slope_interval(largest, options.confidence));
                    growth.prediction = Some(Prediction {
                        n: 2.0 * largest,
                        value: chosen.predict_interval(2.0 * largest, options.confidence),
                    });
                } else {
                    growth.model = Shape::NoModelFits;
                }
            }
            growth.fits = linear.into_iter().chain(usl).collect();
            growth.knee = knee::knee(&weighted, options.margin);
        }
        Claim::Flat => {
            if let Some(constant) = fit::fit(Model::Constant, &weighted) {
                if constant.fits() {
                    growth.model = Shape::Constant;
                }
                growth.fits.push(constant);
            }
        }
        Claim::Falls | Claim::Varies | Claim::Inconclusive => {}
    }
    growth
}

impl Growth {
    /// The fit the shape names, when one does.
    pub fn chosen(&self) -> Option<&Fit> {
        let model = match self.model {
            Shape::Constant => Model::Constant,
            Shape::Linear => Model::Linear,
            Shape::Usl => Model::Usl,
            Shape::NoModelFits | Shape::None => return None,
        };
        self.fits.iter().find(|f| f.model == model)
    }

    /// The fit that was kept and misses the points, when no model fits: the USL when the
    /// likelihood-ratio test preferred it, else the line.
    pub fn misfit(&self) -> Option<&Fit> {
        if self.model != Shape::NoModelFits {
            return None;
        }
        let linear = self.fits.iter().find(|f| f.model == Model::Linear);
        let usl = self.fits.iter().find(|f| f.model == Model::Usl);
        match (linear, usl) {
            (Some(l), Some(u)) if fit::usl_over_linear(l, u) < SHAPE_ALPHA => Some(u),
            (l, _) => l,
        }
    }
}

/// b of T ~ N^b: for two points, the headline ratio's interval over the log distance; for
/// more, a weighted line through (ln N, ln T), its interval widened by the misfit.
fn exponent(points: &[PointEstimate], ratio: &Interval, confidence: f64) -> Interval {
    let (first, last) = (points[0], points[points.len() - 1]);
    let span = last.n.max(1e-300).ln() - first.n.max(1e-300).ln();
    if points.len() == 2 || span <= 0.0 {
        let per = |r: f64| if span > 0.0 { r.ln() / span } else { 0.0 };
        return Interval {
            estimate: per(ratio.estimate),
            low: per(ratio.low),
            high: per(ratio.high),
        };
    }
    let z = normal_quantile(0.5 + confidence / 2.0);
    let rows: Vec<(f64, f64, f64)> = points
        .iter()
        .map(|p| {
            let l = log_interval(p.value);
            let se = (l.below + l.above) / (2.0 * z);
            (p.n.ln(), l.centre, se.powi(-2))
        })
        .collect();
    let total: f64 = rows.iter().map(|r| r.2).sum();
    let mean_x = rows.iter().map(|r| r.2 * r.0).sum::<f64>() / total;
    let mean_y = rows.iter().map(|r| r.2 * r.1).sum::<f64>() / total;
    let sxx: f64 = rows.iter().map(|r| r.2 * (r.0 - mean_x).powi(2)).sum();
    let sxy: f64 = rows
        .iter()
        .map(|r| r.2 * (r.0 - mean_x) * (r.1 - mean_y))
        .sum();
    let b = sxy / sxx;
    let chi_square: f64 = rows
        .iter()
        .map(|r| r.2 * (r.1 - mean_y - b * (r.0 - mean_x)).powi(2))
        .sum();
    let df = (rows.len() - 2) as f64;
    let se = sxx.powf(-0.5);
    let half = if chi_square > df {
        t_quantile(0.5 + confidence / 2.0, df) * se * (chi_square / df).sqrt()
    } else {
        z * se
    };
    Interval {
        estimate: b,
        low: b - half,
        high: b + half,
    }
}

mod text;
pub use text::n_text;

#[cfg(test)]
mod tests;
