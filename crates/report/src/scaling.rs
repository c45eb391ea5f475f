//! How each series' cost grows across the sweep, from the record's growth claims
//! (`RunRecord::scaling`, judged by `vmscale_stats::growth`): one line per series and
//! statistic with the claim and the numbers it was decided on, the shape where a model
//! fits, its cost per unit of N and prediction, a knee; and what the HTML chart draws for
//! each series' p50: every point with its interval, and the fitted curve only where the
//! model fits.

use vmscale_run::RunRecord;
use vmscale_stats::compare::Statistic;
use vmscale_stats::growth::{n_text, Growth, Shape};
use vmscale_stats::units::p_value;

use crate::grid;
use crate::units::duration;

/// What a chart of one series' p50 growth draws.
pub(crate) struct FitCurve {
    pub series: String,
    /// The claim in words, for the caption.
    pub claim: String,
    /// The model drawn, when one fits.
    pub model: Option<&'static str>,
    /// Each point's p50 with its interval: (N, estimate, low, high).
    pub measured: Vec<(f64, f64, f64, f64)>,
    /// The model's prediction from the smallest N to twice the largest (to the largest for
    /// a constant); empty when no model fits.
    pub curve: Vec<(f64, f64)>,
    /// The prediction's interval at the same N: (N, low, high).
    pub band: Vec<(f64, f64, f64)>,
    pub largest: f64,
    /// A change of slope the data support, or the USL's own knee.
    pub knee: Option<f64>,
    /// Why no curve is drawn where the claim is growth: "no model fits (linear (Amdahl)
    /// fit p 1.2e-14)".
    pub misfit: Option<String>,
    /// Confidence of the intervals, for the caption ("99%").
    pub confidence: f64,
}

/// Points along a curve: enough for a smooth USL, few for a small page.
const CURVE_POINTS: usize = 60;

/// The p50 chart of every series whose p50 growth was judged.
pub(crate) fn p50_curves(record: &RunRecord) -> Vec<FitCurve> {
    let sweep = grid::sweep_header(record);
    record
        .scaling
        .iter()
        .filter_map(|s| {
            let g = s.growth.iter().find(|g| g.statistic == Statistic::P50)?;
            Some(curve(&s.series, g, sweep))
        })
        .collect()
}

fn curve(series: &str, g: &Growth, sweep: &str) -> FitCurve {
    let smallest = g.points[0].n;
    let largest = g.points[g.points.len() - 1].n;
    let chosen = g.chosen();
    let end = match g.model {
        Shape::Linear | Shape::Usl => 2.0 * largest,
        _ => largest,
    };
    let xs: Vec<f64> = (0..=CURVE_POINTS)
        .map(|i| smallest + (end - smallest) * i as f64 / CURVE_POINTS as f64)
        .collect();
    let (curve, band) = match chosen {
        Some(f) => (
            xs.iter().map(|&x| (x, f.predict(x))).collect(),
            xs.iter()
                .map(|&x| {
                    let i = f.predict_interval(x, g.confidence);
                    (x, i.low, i.high)
                })
                .collect(),
        ),
        None => (Vec::new(), Vec::new()),
    };
    FitCurve {
        series: series.to_string(),
        claim: g.claim_text(sweep),
        model: chosen.map(|f| f.model.name()),
        measured: g
            .points
            .iter()
            .map(|p| (p.n, p.value.estimate, p.value.low, p.value.high))
            .collect(),
        curve,
        band,
        largest,
        knee: g.knee.map(|k| k.at).or_else(|| {
            chosen
                .and_then(|f| f.knee())
                .filter(|&k| k > smallest && k <= largest)
        }),
        misfit: g.misfit().map(|f| {
            format!(
                "no model fits ({} fit p {})",
                f.model.name(),
                p_value(f.fit_p)
            )
        }),
        confidence: g.confidence,
    }
}

/// Lines describing how every series grows, per statistic judged and per statistic that
/// could not be; with a `deadline` (ns), where each fitting model's prediction first
/// exceeds it.
pub(crate) fn lines(record: &RunRecord, deadline: Option<f64>) -> Vec<String> {
    let sweep = grid::sweep_header(record);
    let mut out = Vec::new();
    for s in &record.scaling {
        for g in &s.growth {
            let mut line = format!("{} {}: {}", s.series, g.statistic.name(), g.sentence(sweep));
            if let (Some(deadline), Some(f)) = (deadline, g.chosen()) {
                if matches!(g.model, Shape::Linear | Shape::Usl) {
                    match f.crosses(deadline, 1 << 20) {
                        Some(n) => line.push_str(&format!(
                            "; past the {} deadline at {sweep}={n}",
                            duration(deadline as u64)
                        )),
                        None => line.push_str(&format!(
                            "; stays under the {} deadline",
                            duration(deadline as u64)
                        )),
                    }
                }
            }
            out.push(line);
        }
        let confidence = s
            .growth
            .first()
            .map_or(vmscale_stats::growth::CONFIDENCE, |g| g.confidence);
        for u in &s.unjudged {
            out.push(format!(
                "{} {}",
                s.series,
                u.why.text(u.statistic, sweep, confidence)
            ));
        }
    }
    if record.points.len() > 1 {
        for name in grid::series_names(record) {
            if record.scaling.iter().any(|s| s.series == name) {
                continue;
            }
            let measured = record
                .points
                .iter()
                .filter(|p| {
                    p.series
                        .iter()
                        .any(|s| s.name == name && !s.samples_ns.is_empty())
                })
                .count();
            out.push(format!(
                "{name}: measured at {} {sweep}; how it grows needs 2",
                n_text(measured as f64)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscale_run::{HostFacts, Point, Series, ToolInfo, SCHEMA_VERSION};

    fn record(points: Vec<Point>) -> RunRecord {
        let mut record = RunRecord {
            schema_version: SCHEMA_VERSION,
            verdict: Vec::new(),
            scaling: Vec::new(),
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
        };
        record.resummarize();
        record
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

    /// `count` samples spread evenly by +-`spread` (a fraction) around `centre` ns.
    fn around(centre: u64, spread: f64, count: u64) -> Vec<u64> {
        (0..count)
            .map(|i| {
                let offset = (i as f64 / (count - 1) as f64 - 0.5) * 2.0 * spread;
                (centre as f64 * (1.0 + offset)) as u64
            })
            .collect()
    }

    #[test]
    fn a_per_vm_cost_reads_as_linear_growth_with_its_slope() {
        // 8 ms per VM plus 2 ms, each point spread +-5%: case 1's shape.
        let points = [1u64, 2, 4, 8, 16]
            .iter()
            .map(|&n| point(n, around(2_000_000 + 8_000_000 * n, 0.05, 200)))
            .collect();
        let lines = lines(&record(points), Some(130e6));
        let p50 = lines
            .iter()
            .find(|l| l.starts_with("close p50"))
            .expect("a p50 line");
        assert!(p50.starts_with("close p50: grows 13."), "{p50}");
        assert!(p50.contains("from vms=1 to 16, as N^0.9"), "{p50}");
        assert!(p50.contains("linear (Amdahl): T1 10.0 ms"), "{p50}");
        assert!(p50.contains("ms ["), "{p50}");
        assert!(p50.contains("more per vms at vms=16"), "{p50}");
        assert!(p50.contains("at vms=32"), "{p50}");
        // 2 ms + 8 ms N passes 130 ms between N = 16 (130 ms) and 17.
        assert!(
            p50.contains("deadline at vms=16") || p50.contains("deadline at vms=17"),
            "{p50}"
        );
        assert!(!p50.contains("cannot tell"), "{p50}");
        let p99 = lines.iter().find(|l| l.starts_with("close p99")).unwrap();
        assert!(
            p99.contains(
                "p99 not judged: its 99% interval needs 528 samples a point (200 at vms=1)"
            ),
            "{p99}"
        );
    }

    #[test]
    fn a_slope_that_steepens_is_shown_as_a_knee() {
        // 10 us per vCPU up to 4, 200 us per vCPU after.
        let points = [1u64, 2, 3, 4, 6, 8, 12, 16]
            .iter()
            .map(|&n| {
                let base = 100_000 + 10_000 * n + 190_000 * n.saturating_sub(4);
                point(n, around(base, 0.02, 200))
            })
            .collect();
        let lines = lines(&record(points), None);
        let p50 = lines.iter().find(|l| l.starts_with("close p50")).unwrap();
        assert!(
            p50.contains("knee at vms=4: growth steepens past it"),
            "{p50}"
        );
    }

    #[test]
    fn one_point_is_not_judged() {
        let mut two = record(vec![point(1, vec![10, 11]), point(2, vec![20, 21])]);
        two.points[1].series[0].name = "other".into();
        two.resummarize();
        let lines = lines(&two, None);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].contains("measured at 1 vms; how it grows needs 2"),
            "{lines:?}"
        );
    }
}
