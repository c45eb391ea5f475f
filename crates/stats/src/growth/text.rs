//! The claims in words: one wording for the report's scaling lines in every format and for
//! the verdict's growth sentence, so that each says the same numbers, the ones the claim
//! was decided on.

use super::{Claim, Growth, Shape, Unjudged};
use crate::compare::Statistic;
use crate::fit::Model;
use crate::units::{duration_interval, p_value, significant, times_interval};

/// A value of N as a sweep names it: "8", "2.5".
pub fn n_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        significant(n, 3, 1)
    }
}

/// A duration that may be negative (a slope that flattens): "-12.3 us", "1.05 ms".
fn signed_duration(ns: f64) -> String {
    let sign = if ns < 0.0 { "-" } else { "" };
    let v = ns.abs();
    let (unit, scale) = if v >= 1e9 {
        ("s", 1e9)
    } else if v >= 1e6 {
        ("ms", 1e6)
    } else {
        ("us", 1e3)
    };
    format!("{sign}{} {unit}", significant(v / scale, 3, 3))
}

fn percent_of(confidence: f64) -> String {
    let pct = confidence * 100.0;
    if pct.fract() == 0.0 {
        format!("{pct:.0}%")
    } else {
        format!("{}%", significant(pct, 3, 1))
    }
}

impl Growth {
    /// "N^0.49 [0.42, 0.55]".
    pub fn exponent_text(&self) -> String {
        format!(
            "N^{:.2} [{:.2}, {:.2}]",
            self.exponent.estimate, self.exponent.low, self.exponent.high
        )
    }

    fn span(&self, sweep: &str) -> String {
        let (first, last) = (self.points[0].n, self.points[self.points.len() - 1].n);
        format!("from {sweep}={} to {}", n_text(first), n_text(last))
    }

    fn margin_text(&self) -> String {
        format!("+-{}", percent_of(self.margin))
    }

    /// The claim with the numbers it was decided on: "grows 2.75x [2.41, 3.12] from
    /// vcpus=1 to 8, as N^0.49 [0.42, 0.55]".
    pub fn claim_text(&self, sweep: &str) -> String {
        let r = self.ratio;
        let ratio = times_interval(r.estimate, r.low, r.high);
        let span = self.span(sweep);
        let first = n_text(self.points[0].n);
        match self.claim {
            Claim::Grows => format!("grows {ratio} {span}, as {}", self.exponent_text()),
            Claim::Falls => format!("falls to {ratio} {span}, as {}", self.exponent_text()),
            Claim::Flat => format!(
                "flat within {}: every {sweep} up to {} within {:+.0}%..{:+.0}% of {sweep}={first}",
                self.margin_text(),
                n_text(self.points[self.points.len() - 1].n),
                (self.range.0 - 1.0) * 100.0,
                (self.range.1 - 1.0) * 100.0
            ),
            Claim::Varies => {
                let moves: Vec<String> = self
                    .steps
                    .iter()
                    .map(|s| {
                        let (word, to) = if s.ratio.low > 1.0 {
                            ("up", "")
                        } else {
                            ("down", "to ")
                        };
                        format!(
                            "{word} {to}{} from {sweep}={} to {}",
                            times_interval(s.ratio.estimate, s.ratio.low, s.ratio.high),
                            n_text(s.from),
                            n_text(s.to)
                        )
                    })
                    .collect();
                format!("varies: {}; {ratio} {span} overall", moves.join(", "))
            }
            Claim::Inconclusive => format!(
                "inconclusive: {ratio} {span}, as {}; neither growth nor flat within {} is established",
                self.exponent_text(),
                self.margin_text()
            ),
        }
    }

    /// The shape the claim rests on, when one is fitted: the model, its parameters and
    /// goodness of fit, the cost per unit of N and the prediction at twice the largest N;
    /// or that no model fits and nothing is extrapolated.
    pub fn shape_text(&self, sweep: &str) -> Option<String> {
        let largest = n_text(self.points[self.points.len() - 1].n);
        match self.model {
            Shape::None => None,
            Shape::NoModelFits => self.misfit().map(|f| {
                format!(
                    "no model fits ({} fit p {}): nothing extrapolated",
                    f.model.name(),
                    p_value(f.fit_p)
                )
            }),
            Shape::Constant => self.chosen().map(|f| {
                format!(
                    "constant {} (fit p {})",
                    signed_duration(f.t1),
                    p_value(f.fit_p)
                )
            }),
            Shape::Linear | Shape::Usl => {
                let f = self.chosen()?;
                let mut text = format!(
                    "{}: T1 {}, s {}",
                    f.model.name(),
                    signed_duration(f.t1),
                    significant(f.sigma, 3, 4)
                );
                if f.model == Model::Usl {
                    text.push_str(&format!(", k {}", significant(f.kappa, 3, 8)));
                }
                if !f.at_bounds.is_empty() {
                    text.push_str(&format!(" (at the bound {})", f.at_bounds.join(", ")));
                }
                text.push_str(&format!(", fit p {}", p_value(f.fit_p)));
                if let Some(per) = self.per_unit {
                    text.push_str(&format!(
                        "; {} more per {sweep} at {sweep}={largest}",
                        duration_interval(per.estimate, per.low, per.high)
                    ));
                }
                if let Some(at) = self.prediction {
                    text.push_str(&format!(
                        "; predicts {} at {sweep}={}",
                        duration_interval(at.value.estimate, at.value.low, at.value.high),
                        n_text(at.n)
                    ));
                }
                // Only where the sweep measured: beyond it the bend is the model's guess.
                let (first, last) = (self.points[0].n, self.points[self.points.len() - 1].n);
                if let Some(knee) = f.knee().filter(|&k| k > first && k <= last) {
                    text.push_str(&format!(
                        "; faster than linear past {sweep}={}",
                        significant(knee, 3, 1)
                    ));
                }
                Some(text)
            }
        }
    }

    /// "knee at vcpus=8: 150 us -> 1.05 ms per vcpus past it (p 0.002)".
    pub fn knee_text(&self, sweep: &str) -> Option<String> {
        self.knee.map(|k| {
            format!(
                "knee at {sweep}={}: growth {} past it, {} -> {} per {sweep} (p {})",
                n_text(k.at),
                if k.steepens() { "steepens" } else { "flattens" },
                signed_duration(k.slope_before),
                signed_duration(k.slope_after),
                p_value(k.p)
            )
        })
    }

    /// "flat within +-20% up to vcpus=8", when the sweep starts flat and then leaves it.
    pub fn flat_to_text(&self, sweep: &str) -> Option<String> {
        self.flat_to.map(|n| {
            format!(
                "flat within {} up to {sweep}={}",
                self.margin_text(),
                n_text(n)
            )
        })
    }

    /// The statistic at the smallest and largest N with their intervals: "p50 128 us
    /// [120, 135] at vcpus=1 -> 7.90 ms [7.51, 8.32] at vcpus=8".
    pub fn endpoints_text(&self, sweep: &str) -> String {
        let at = |i: usize| {
            let p = &self.points[i];
            format!(
                "{} at {sweep}={}",
                duration_interval(p.value.estimate, p.value.low, p.value.high),
                n_text(p.n)
            )
        };
        format!(
            "{} {} -> {}",
            self.statistic.name(),
            at(0),
            at(self.points.len() - 1)
        )
    }

    /// Every clause, in reading order: the claim, then where it is flat, the shape and
    /// the knee.
    pub fn sentence(&self, sweep: &str) -> String {
        let mut parts = vec![self.claim_text(sweep)];
        parts.extend(self.flat_to_text(sweep));
        parts.extend(self.shape_text(sweep));
        parts.extend(self.knee_text(sweep));
        parts.join("; ")
    }

    /// "99% intervals in brackets", for a line that stands alone.
    pub fn confidence_text(&self) -> String {
        format!("{} intervals in brackets", percent_of(self.confidence))
    }
}

impl Unjudged {
    /// Why `statistic` was not judged, as a clause: "not judged: its 99% interval needs 528
    /// samples a point (200 at vcpus=1)".
    pub fn text(&self, statistic: Statistic, sweep: &str, confidence: f64) -> String {
        match *self {
            Unjudged::TooFewSamples { n, samples, needed } => format!(
                "{} not judged: its {} interval needs {needed} samples a point ({samples} at {sweep}={})",
                statistic.name(),
                percent_of(confidence),
                n_text(n)
            ),
            Unjudged::TooFewPoints { points } => format!(
                "{} not judged: measured at {points} {sweep}; growth needs 2",
                statistic.name()
            ),
            Unjudged::NotAQuantile => format!(
                "{} not judged: growth is judged for quantiles",
                statistic.name()
            ),
        }
    }
}
