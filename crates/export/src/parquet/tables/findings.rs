//! `findings`: the verdict, one row per finding in rank order, with what explains each
//! finding's time (a list of parts) and its what-if prediction where it has one.

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, DataType, SchemaRef};
use serde::Serialize;
use vmscale_run::RunRecord;

use crate::parquet::batch::*;

#[derive(Serialize)]
struct Part<'a> {
    what: &'a str,
    share: Option<f64>,
}

#[derive(Serialize)]
struct Row<'a> {
    run_id: &'a str,
    rank: usize,
    cause: &'a str,
    lock: Option<&'a str>,
    holder: Option<&'a str>,
    share: Option<f64>,
    summary: &'a str,
    evidence: &'a [String],
    explained_by: Vec<Part<'a>>,
    what_if_change: Option<&'a str>,
    what_if_phase: Option<&'a str>,
    what_if_samples: Option<u64>,
    p50_ns: Option<u64>,
    p99_ns: Option<u64>,
    removed_p50_ns: Option<u64>,
    removed_p99_ns: Option<u64>,
    halved_p50_ns: Option<u64>,
    halved_p99_ns: Option<u64>,
}

pub(super) fn schema() -> SchemaRef {
    schema_of(vec![
        text("run_id"),
        int("rank"),
        text("cause"),
        text_or_null("lock"),
        text_or_null("holder"),
        float_or_null("share"),
        text("summary"),
        list("evidence", DataType::Utf8),
        list_of("explained_by", vec![text("what"), float_or_null("share")]),
        text_or_null("what_if_change"),
        text_or_null("what_if_phase"),
        int_or_null("what_if_samples"),
        int_or_null("p50_ns"),
        int_or_null("p99_ns"),
        int_or_null("removed_p50_ns"),
        int_or_null("removed_p99_ns"),
        int_or_null("halved_p50_ns"),
        int_or_null("halved_p99_ns"),
    ])
}

pub(super) fn batch(id: &str, record: &RunRecord) -> Result<RecordBatch, ArrowError> {
    let rows: Vec<Row> = record
        .verdict
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let what_if = f.what_if.as_ref();
            let predicted = what_if.map(|w| &w.prediction);
            let removable = what_if.filter(|w| !w.only_halved).map(|w| &w.prediction);
            Row {
                run_id: id,
                rank: i + 1,
                cause: f.cause.label(),
                lock: f.lock.as_deref(),
                holder: f.holder.as_deref(),
                share: finite(f.share),
                summary: &f.summary,
                evidence: &f.evidence,
                explained_by: f
                    .explained_by
                    .iter()
                    .map(|e| Part {
                        what: &e.what,
                        share: finite(e.share),
                    })
                    .collect(),
                what_if_change: what_if.map(|w| w.change.as_str()),
                what_if_phase: what_if.map(|w| w.phase.as_str()),
                what_if_samples: predicted.map(|p| p.samples),
                p50_ns: predicted.map(|p| p.p50_ns),
                p99_ns: predicted.map(|p| p.p99_ns),
                // Own on-CPU work is only made faster, never removed: no claim to store.
                removed_p50_ns: removable.map(|p| p.removed_p50_ns),
                removed_p99_ns: removable.map(|p| p.removed_p99_ns),
                halved_p50_ns: predicted.map(|p| p.halved_p50_ns),
                halved_p99_ns: predicted.map(|p| p.halved_p99_ns),
            }
        })
        .collect();
    to_batch(schema(), &rows)
}
