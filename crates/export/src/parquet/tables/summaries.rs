//! `summaries`: each series' latency distribution per swept value, and each of its phases',
//! as every report prints them (recomputed from the raw samples when the run is loaded).

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use serde::Serialize;
use vmscale_run::RunRecord;
use vmscale_stats::Summary;

use crate::parquet::batch::*;

#[derive(Serialize)]
struct Row<'a> {
    run_id: &'a str,
    scenario: &'a str,
    sweep: &'a str,
    n: u64,
    series: &'a str,
    phase: Option<&'a str>,
    vcpus_per_host_cpu: Option<f64>,
    count: u64,
    min_ns: u64,
    p50_ns: u64,
    p90_ns: u64,
    p99_ns: u64,
    p999_ns: u64,
    max_ns: u64,
    mean_ns: Option<f64>,
    stdev_ns: Option<f64>,
}

pub(super) fn schema() -> SchemaRef {
    schema_of(vec![
        text("run_id"),
        text("scenario"),
        text("sweep"),
        int("n"),
        text("series"),
        text_or_null("phase"),
        float_or_null("vcpus_per_host_cpu"),
        int("count"),
        int("min_ns"),
        int("p50_ns"),
        int("p90_ns"),
        int("p99_ns"),
        int("p999_ns"),
        int("max_ns"),
        float_or_null("mean_ns"),
        float_or_null("stdev_ns"),
    ])
}

pub(super) fn batch(id: &str, record: &RunRecord) -> Result<RecordBatch, ArrowError> {
    let mut rows = Vec::new();
    for point in &record.points {
        for series in &point.series {
            let whole = std::iter::once((None, &series.summary));
            let phases = series
                .phases
                .iter()
                .map(|p| (Some(p.name.as_str()), &p.summary));
            for (phase, summary) in whole.chain(phases) {
                let Some(s): Option<&Summary> = summary.as_ref() else {
                    continue;
                };
                rows.push(Row {
                    run_id: id,
                    scenario: &record.scenario,
                    sweep: &record.sweep,
                    n: point.n,
                    series: &series.name,
                    phase,
                    vcpus_per_host_cpu: finite(point.vcpus_per_host_cpu),
                    count: s.n,
                    min_ns: s.min_ns,
                    p50_ns: s.p50_ns,
                    p90_ns: s.p90_ns,
                    p99_ns: s.p99_ns,
                    p999_ns: s.p999_ns,
                    max_ns: s.max_ns,
                    mean_ns: finite(s.mean_ns),
                    stdev_ns: finite(s.stdev_ns),
                });
            }
        }
    }
    to_batch(schema(), &rows)
}
