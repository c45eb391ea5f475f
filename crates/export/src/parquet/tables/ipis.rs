//! `ipis`: per measured phase (or the whole trace of a recording), the IPIs and cross-CPU
//! calls sent, and lists of where they came from and what they cost their targets.

use std::collections::BTreeMap;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, DataType, Field, SchemaRef};
use serde::Serialize;
use vmscale_run::findings::{IpiSyscall, IpiVictimWork};
use vmscale_run::{IpiSender, IpiSite, RunRecord};

use crate::parquet::batch::*;

/// The lists are run.json's own entries: their fields are the columns of each list's items.
#[derive(Serialize)]
struct Row<'a> {
    run_id: &'a str,
    phase: &'a str,
    duration_ns: u64,
    ipis: u64,
    counted_from: Option<&'a str>,
    csd_queued: u64,
    by_target: &'a BTreeMap<String, u64>,
    by_site: &'a [IpiSite],
    by_sender: &'a [IpiSender],
    by_syscall: &'a [IpiSyscall],
    victim_work: &'a [IpiVictimWork],
    handlers: &'a [IpiVictimWork],
}

fn work_fields() -> Vec<Field> {
    vec![text("function"), int("calls"), int("total_ns")]
}

pub(super) fn schema() -> SchemaRef {
    schema_of(vec![
        text("run_id"),
        text("phase"),
        int("duration_ns"),
        int("ipis"),
        text_or_null("counted_from"),
        int("csd_queued"),
        map("by_target", DataType::Int64),
        list_of(
            "by_site",
            vec![
                text("callsite"),
                text("callback"),
                text_or_null("reason"),
                int("ipis"),
            ],
        ),
        list_of(
            "by_sender",
            vec![
                Field::new("pid", DataType::Int32, false),
                text("comm"),
                int("ipis"),
            ],
        ),
        list_of("by_syscall", vec![text("syscall"), int("ipis")]),
        list_of("victim_work", work_fields()),
        list_of("handlers", work_fields()),
    ])
}

pub(super) fn batch(id: &str, record: &RunRecord) -> Result<RecordBatch, ArrowError> {
    let rows: Vec<Row> = record
        .trace
        .iter()
        .flat_map(|t| &t.ipis)
        .map(|p| Row {
            run_id: id,
            phase: &p.label,
            duration_ns: p.duration_ns,
            ipis: p.ipis,
            counted_from: (!p.counted_from.is_empty()).then_some(p.counted_from.as_str()),
            csd_queued: p.csd_queued,
            by_target: &p.by_target,
            by_site: &p.by_site,
            by_sender: &p.by_sender,
            by_syscall: &p.by_syscall,
            victim_work: &p.victim_work,
            handlers: &p.handlers,
        })
        .collect();
    to_batch(schema(), &rows)
}
