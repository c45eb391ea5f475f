//! How each series grows over the sweep, as claims with their intervals
//! ([`vmscale_stats::growth`]), kept in the record as `scaling` so that run.json, `report
//! --format json` and every rendering carry the same claims. Recomputed from the raw
//! samples whenever a run is loaded or concluded, as the summaries are.

use vmscale_stats::compare::Statistic;
use vmscale_stats::growth::{growth, Options, PointSamples};

use crate::runs::run_samples;
use crate::schema::{Point, RunRecord};
pub use crate::schema::{SeriesGrowth, UnjudgedStatistic};

/// The statistics whose growth is judged, in the order they are printed.
pub const STATISTICS: [Statistic; 2] = [Statistic::P50, Statistic::P99];

impl RunRecord {
    /// Judges how each series grows ([`judge`]) with `margin` (a fraction) for flat;
    /// without one, with the margin the record was judged with before, else the default.
    pub fn judge_growth(&mut self, margin: Option<f64>) {
        let margin = margin
            .or_else(|| self.growth_margin())
            .unwrap_or(vmscale_stats::growth::DEFAULT_MARGIN);
        let options = Options {
            margin,
            ..Options::default()
        };
        self.scaling = judge(&self.points, options);
    }
}

/// Every series measured at two or more points, in first-seen order, judged with
/// `options`.
pub fn judge(points: &[Point], options: Options) -> Vec<SeriesGrowth> {
    let mut names: Vec<&str> = Vec::new();
    for series in points.iter().flat_map(|p| &p.series) {
        if !names.contains(&series.name.as_str()) {
            names.push(&series.name);
        }
    }
    names
        .into_iter()
        .filter_map(|name| {
            let samples: Vec<PointSamples> = points
                .iter()
                .filter_map(|p| {
                    let series = p.series.iter().find(|s| s.name == name)?;
                    if series.samples_ns.is_empty() {
                        return None;
                    }
                    let runs = if series.runs.len() >= 2 {
                        run_samples(series)
                    } else {
                        vec![series.samples_ns.as_slice()]
                    };
                    Some(PointSamples {
                        n: p.n as f64,
                        runs,
                    })
                })
                .collect();
            if samples.len() < 2 {
                return None;
            }
            let mut judged = SeriesGrowth {
                series: name.to_string(),
                growth: Vec::new(),
                unjudged: Vec::new(),
            };
            for statistic in STATISTICS {
                match growth(&samples, statistic, options) {
                    Ok(g) => judged.growth.push(g),
                    Err(why) => judged.unjudged.push(UnjudgedStatistic { statistic, why }),
                }
            }
            Some(judged)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Series;
    use vmscale_stats::growth::Claim;

    fn point(n: u64, name: &str, samples: Vec<u64>) -> Point {
        Point {
            n,
            vcpus_per_host_cpu: 0.0,
            series: vec![Series {
                name: name.into(),
                samples_ns: samples,
                ..Series::default()
            }],
        }
    }

    #[test]
    fn series_at_two_or_more_points_are_judged_per_statistic() {
        let points: Vec<Point> = [1u64, 2, 4, 8]
            .iter()
            .map(|&n| point(n, "direct", (0..100).map(|i| 10_000 * n + i * 10).collect()))
            .collect();
        let judged = judge(&points, Options::default());
        assert_eq!(judged.len(), 1);
        let direct = &judged[0];
        assert_eq!(direct.growth.len(), 1, "{direct:?}");
        assert_eq!(direct.growth[0].claim, Claim::Grows);
        assert_eq!(direct.unjudged[0].statistic, Statistic::P99);
        // The record's JSON names the claim and why the p99 was not judged.
        let json = serde_json::to_value(&judged).unwrap();
        assert_eq!(json[0]["growth"][0]["claim"], "grows");
        assert_eq!(json[0]["growth"][0]["statistic"], "p50");
        assert_eq!(json[0]["unjudged"][0]["reason"], "too_few_samples");
        assert_eq!(json[0]["unjudged"][0]["needed"], 528);
        let back: Vec<SeriesGrowth> = serde_json::from_value(json).unwrap();
        assert_eq!(back[0].unjudged, direct.unjudged);
        assert!(judge(&points[..1], Options::default()).is_empty());
    }
}
