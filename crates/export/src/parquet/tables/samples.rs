//! `samples`: every raw sample of every series at every swept value, with when it started
//! where the run timed it on the trace's clock.

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use serde::Serialize;
use vmscale_run::{RunRecord, Series};

use crate::parquet::batch::*;

#[derive(Serialize)]
struct Row<'a> {
    run_id: &'a str,
    scenario: &'a str,
    sweep: &'a str,
    n: u64,
    series: &'a str,
    sample_index: usize,
    run_part: Option<usize>,
    duration_ns: u64,
    start_ns: Option<u64>,
    x: Option<u64>,
    x_is: Option<&'a str>,
}

pub(super) fn schema() -> SchemaRef {
    schema_of(vec![
        text("run_id"),
        text("scenario"),
        text("sweep"),
        int("n"),
        text("series"),
        int("sample_index"),
        int_or_null("run_part"),
        int("duration_ns"),
        int_or_null("start_ns"),
        int_or_null("x"),
        text_or_null("x_is"),
    ])
}

/// Which of a merged series' independent runs (`--runs K`, numbered from 1) each sample
/// belongs to; all None for a single run.
fn run_parts(series: &Series) -> Vec<Option<usize>> {
    if series.runs.len() < 2 {
        return vec![None; series.samples_ns.len()];
    }
    let mut parts: Vec<Option<usize>> = series
        .runs
        .iter()
        .enumerate()
        .flat_map(|(i, part)| std::iter::repeat_n(Some(i + 1), part.samples))
        .collect();
    parts.resize(series.samples_ns.len(), None);
    parts
}

pub(super) fn batch(id: &str, record: &RunRecord) -> Result<RecordBatch, ArrowError> {
    let mut rows = Vec::new();
    for point in &record.points {
        for series in &point.series {
            let parts = run_parts(series);
            let x_is = (!series.sample_x_is.is_empty()).then_some(series.sample_x_is.as_str());
            for (i, &duration_ns) in series.samples_ns.iter().enumerate() {
                rows.push(Row {
                    run_id: id,
                    scenario: &record.scenario,
                    sweep: &record.sweep,
                    n: point.n,
                    series: &series.name,
                    sample_index: i,
                    run_part: parts[i],
                    duration_ns,
                    start_ns: series.sample_start_ns.get(i).copied(),
                    x: series.sample_x.get(i).copied(),
                    x_is: x_is.filter(|_| i < series.sample_x.len()),
                });
            }
        }
    }
    to_batch(schema(), &rows)
}
