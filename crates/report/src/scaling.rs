//! How each series' cost grows across the sweep: the best of the constant, linear (Amdahl)
//! and USL models by AIC, for p50, mean and p99 separately, with bootstrap intervals on the
//! raw samples, the knee, and an extrapolation to twice the largest N.

use vmscale_run::RunRecord;
use vmscale_stats::compare::Statistic;
use vmscale_stats::fit::Model;
use vmscale_stats::legacy::{
    bootstrap_band, bootstrap_parameters, distinct_n, knee, select, Fit, MIN_DISTINCT,
};
use vmscale_stats::BOOTSTRAP_SEED;

use crate::grid;
use crate::units::micros;

const BOOTSTRAP_ITERATIONS: usize = 300;

/// Statistics a fit is made for, in the order their lines are printed.
const STATISTICS: [Statistic; 3] = [Statistic::P50, Statistic::Mean, Statistic::P99];

fn p50(sorted: &[u64]) -> f64 {
    Statistic::P50.of(sorted)
}

/// What a chart of one series' p50 fit draws.
pub(crate) struct FitCurve {
    pub series: String,
    pub model: &'static str,
    /// Measured p50 per N.
    pub measured: Vec<(f64, f64)>,
    /// The best model's prediction, from N = 1 to twice the largest N measured.
    pub curve: Vec<(f64, f64)>,
    /// 95% bootstrap band of the prediction: (N, low, high).
    pub band: Vec<(f64, f64, f64)>,
    pub largest: f64,
    /// A change of slope the data support, or the USL's own knee.
    pub knee: Option<f64>,
}

/// Points along a curve: enough for a smooth USL, few for a small page.
const CURVE_POINTS: usize = 60;

/// The p50 fit of every series measured at three or more N, for the HTML chart.
pub(crate) fn p50_curves(record: &RunRecord) -> Vec<FitCurve> {
    series_groups(record)
        .into_iter()
        .filter_map(|(name, groups)| {
            let measured: Vec<(f64, f64)> = groups.iter().map(|(n, s)| (*n, p50(s))).collect();
            let selection = select(&measured);
            let best = *selection.best()?;
            let largest = groups.iter().map(|g| g.0).fold(0.0, f64::max);
            let xs: Vec<f64> = (0..=CURVE_POINTS)
                .map(|i| 1.0 + (2.0 * largest - 1.0) * i as f64 / CURVE_POINTS as f64)
                .collect();
            let borrowed: Vec<(f64, &[u64])> =
                groups.iter().map(|(n, s)| (*n, s.as_slice())).collect();
            let band = bootstrap_band(
                best.model,
                &borrowed,
                |s: &mut [u64]| {
                    s.sort_unstable();
                    p50(s)
                },
                BOOTSTRAP_ITERATIONS,
                BOOTSTRAP_SEED,
                &xs,
            )
            .unwrap_or_default();
            Some(FitCurve {
                series: name,
                model: best.model.name(),
                curve: xs.iter().map(|&x| (x, best.predict(x))).collect(),
                band,
                largest,
                knee: knee(&measured).map(|k| k.at).or_else(|| best.knee()),
                measured,
            })
        })
        .collect()
}

/// One series' sorted samples per N.
type Groups = Vec<(f64, Vec<u64>)>;

/// Each series' sorted samples per N, for series measured at three or more N.
fn series_groups(record: &RunRecord) -> Vec<(String, Groups)> {
    grid::series_names(record)
        .into_iter()
        .map(|name| (name.to_string(), groups_of(record, name)))
        .filter(|(_, groups)| groups.len() >= 3)
        .collect()
}

fn groups_of(record: &RunRecord, name: &str) -> Groups {
    record
        .points
        .iter()
        .filter_map(|p| {
            let series = p.series.iter().find(|s| s.name == name)?;
            let mut sorted = series.samples_ns.clone();
            sorted.sort_unstable();
            (!sorted.is_empty()).then_some((p.n as f64, sorted))
        })
        .collect()
}

/// Lines describing every series that was measured at three or more values of N; with a
/// `deadline` (ns), where each fit's prediction first exceeds it.
pub(crate) fn lines(record: &RunRecord, deadline: Option<f64>) -> Vec<String> {
    let mut out = Vec::new();
    for name in grid::series_names(record) {
        let groups = groups_of(record, name);
        if groups.len() < 3 {
            if record.points.len() > 1 {
                out.push(format!(
                    "{name}: measured at {} values of N; fitting how it grows needs at least 3",
                    groups.len()
                ));
            }
            continue;
        }
        let largest = groups.iter().map(|g| g.0).fold(0.0, f64::max);
        for statistic in STATISTICS {
            let points: Vec<(f64, f64)> =
                groups.iter().map(|(n, s)| (*n, statistic.of(s))).collect();
            let selection = select(&points);
            let Some(best) = selection.best() else {
                continue;
            };
            let borrowed: Vec<(f64, &[u64])> =
                groups.iter().map(|(n, s)| (*n, s.as_slice())).collect();
            let intervals = bootstrap_parameters(
                best.model,
                &borrowed,
                |s: &mut [u64]| {
                    s.sort_unstable();
                    statistic.of(s)
                },
                BOOTSTRAP_ITERATIONS,
                BOOTSTRAP_SEED,
            );
            let mut line = format!(
                "{name} {}: {} (AIC {:.1}{}): {}",
                statistic.name(),
                best.model.name(),
                best.aic,
                if selection.distinguishable {
                    String::new()
                } else {
                    let other = selection.fits.get(1).map(|f| f.model.name()).unwrap_or("-");
                    format!("; the data cannot tell it from {other}")
                },
                parameters(best)
            );
            if let Some(ci) = intervals {
                if best.model != Model::Constant {
                    line.push_str(&format!(
                        " [95%: s {:.4}..{:.4}{}]",
                        ci.sigma.0,
                        ci.sigma.1,
                        if best.model == Model::Usl {
                            format!(", k {:.6}..{:.6}", ci.kappa.0, ci.kappa.1)
                        } else {
                            String::new()
                        }
                    ));
                }
            }
            if best.model != Model::Constant {
                line.push_str(&format!(
                    "; {} us per unit of N at N={largest}; predicts {} us at N={}",
                    micros(best.slope_at(largest)),
                    micros(best.predict(2.0 * largest)),
                    2.0 * largest
                ));
            }
            if let (Some(deadline), true) = (deadline, best.model != Model::Constant) {
                match best.crosses(deadline, 1 << 20) {
                    Some(n) => line.push_str(&format!(
                        "; past the {} us deadline at N={n}",
                        micros(deadline)
                    )),
                    None => line.push_str(&format!(
                        "; stays under the {} us deadline",
                        micros(deadline)
                    )),
                }
            }
            line.push_str(&knee_clause(best, &points));
            out.push(line);
        }
    }
    out
}

/// Where growth departs from linear: a change of slope the data support (any model), else
/// the USL's own knee, else a plain statement that none shows.
fn knee_clause(best: &Fit, points: &[(f64, f64)]) -> String {
    if let Some(k) = knee(points) {
        return format!(
            "; knee at N={}: {} past it ({} -> {} us per unit of N)",
            k.at,
            if k.steepens() {
                "growth steepens"
            } else {
                "growth flattens"
            },
            micros(k.slope_before),
            micros(k.slope_after)
        );
    }
    if let Some(n) = best.knee() {
        return format!("; growth turns faster than linear past N={n:.1}");
    }
    match best.model {
        Model::Constant => String::new(),
        _ if distinct_n(points).len() < MIN_DISTINCT => {
            format!("; too few N to look for a knee (it takes {MIN_DISTINCT})")
        }
        _ => "; no knee: the slope holds over the measured N".into(),
    }
}

fn parameters(f: &Fit) -> String {
    match f.model {
        Model::Constant => format!("{} us", micros(f.t1)),
        Model::Linear => format!("T1 {} us, s {:.4}", micros(f.t1), f.sigma),
        Model::Usl => format!("T1 {} us, s {:.4}, k {:.6}", micros(f.t1), f.sigma, f.kappa),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscale_run::{HostFacts, Point, Series, ToolInfo, SCHEMA_VERSION};

    fn record(points: Vec<Point>) -> RunRecord {
        RunRecord {
            schema_version: SCHEMA_VERSION,
            verdict: Vec::new(),
            tool: ToolInfo::current("test"),
            scenario: "teardown".into(),
            sweep: "vms".into(),
            command_line: vec![],
            started_utc: String::new(),
            finished_utc: String::new(),
            host: HostFacts::probe(None),
            knobs: serde_json::json!({}),
            background: None,
            points,
            trace: None,
            warnings: vec![],
        }
    }

    fn point(n: u64, samples: Vec<u64>) -> Point {
        Point {
            n,
            vcpus_per_host_cpu: 0.0,
            series: vec![Series {
                name: "close".into(),
                samples_ns: samples,
                ..Series::default()
            }],
        }
    }

    #[test]
    fn a_per_vm_cost_reads_as_linear_with_its_slope() {
        // 8 ms per VM plus 2 ms, with a little spread: case 1's shape.
        let points = [1u64, 2, 4, 8, 16]
            .iter()
            .map(|&n| {
                point(
                    n,
                    (0..20)
                        .map(|i| 2_000_000 + 8_000_000 * n + i * 1_000)
                        .collect(),
                )
            })
            .collect();
        let lines = lines(&record(points), Some(130e6));
        let p50 = lines
            .iter()
            .find(|l| l.starts_with("close p50"))
            .expect("a p50 line");
        assert!(p50.contains("linear (Amdahl)"), "{p50}");
        // 8 ms = 8000 us per unit of N.
        assert!(
            p50.contains("8000 us per unit of N") || p50.contains("8.00e3"),
            "{p50}"
        );
        assert!(p50.contains("at N=32"), "{p50}");
        // 2 ms + 8 ms N passes 130 ms between N = 16 (130 ms + spread) and 17.
        assert!(
            p50.contains("deadline at N=16") || p50.contains("deadline at N=17"),
            "{p50}"
        );
        assert!(p50.contains("too few N to look for a knee"), "{p50}");
    }

    #[test]
    fn a_slope_that_steepens_is_shown_as_a_knee_whatever_model_wins() {
        // 10 us per vCPU up to 4, 200 us per vCPU after.
        let points = [1u64, 2, 3, 4, 6, 8, 12, 16]
            .iter()
            .map(|&n| {
                let base = 100_000 + 10_000 * n + 190_000 * n.saturating_sub(4);
                point(n, (0..20).map(|i| base + i * 100).collect())
            })
            .collect();
        let lines = lines(&record(points), None);
        let p50 = lines.iter().find(|l| l.starts_with("close p50")).unwrap();
        assert!(p50.contains("knee at N=4: growth steepens"), "{p50}");
    }

    #[test]
    fn fewer_than_three_points_are_not_fitted() {
        let points = vec![point(1, vec![10, 11]), point(2, vec![20, 21])];
        let lines = lines(&record(points), None);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("needs at least 3"), "{lines:?}");
    }
}
