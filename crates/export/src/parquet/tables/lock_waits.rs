//! `lock_waits`: every contended lock of the run's trace, worst first: its waits and their
//! distribution, who waited, and (for sleeping locks whose holders the trace shows) what
//! the holders were doing while it was waited for.

use std::collections::BTreeMap;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, DataType, SchemaRef};
use serde::Serialize;
use vmscale_run::findings::LockHolders;
use vmscale_run::RunRecord;

use super::holds::{activities, activity_fields, Activity};
use crate::parquet::batch::*;

#[derive(Serialize)]
struct Waiter<'a> {
    comm: &'a str,
    pid: i32,
    waits: u64,
    total_wait_ns: u64,
}

#[derive(Serialize)]
struct Row<'a> {
    run_id: &'a str,
    rank: usize,
    lock: &'a str,
    lock_addr: String,
    kind: &'a str,
    modes: &'a BTreeMap<String, u64>,
    waits: u64,
    total_wait_ns: u64,
    open_waits: u64,
    min_wait_ns: Option<u64>,
    p50_wait_ns: Option<u64>,
    p99_wait_ns: Option<u64>,
    max_wait_ns: Option<u64>,
    mean_wait_ns: Option<f64>,
    waiters: Vec<Waiter<'a>>,
    top_holder: Option<String>,
    exact_holds: Option<bool>,
    holder_activity: Option<Vec<Activity<'a>>>,
}

pub(super) fn schema() -> SchemaRef {
    schema_of(vec![
        text("run_id"),
        int("rank"),
        text("lock"),
        text("lock_addr"),
        text("kind"),
        map("modes", DataType::Int64),
        int("waits"),
        int("total_wait_ns"),
        int("open_waits"),
        int_or_null("min_wait_ns"),
        int_or_null("p50_wait_ns"),
        int_or_null("p99_wait_ns"),
        int_or_null("max_wait_ns"),
        float_or_null("mean_wait_ns"),
        list_of(
            "waiters",
            vec![
                text("comm"),
                arrow_schema::Field::new("pid", DataType::Int32, false),
                int("waits"),
                int("total_wait_ns"),
            ],
        ),
        text_or_null("top_holder"),
        boolean_or_null("exact_holds"),
        list_of_or_null("holder_activity", activity_fields()),
    ])
}

fn top_holder(holders: &LockHolders) -> Option<String> {
    holders
        .holders
        .iter()
        .max_by_key(|h| h.waited_behind_ns)
        .map(|h| format!("{}/{}", h.comm, h.pid))
}

pub(super) fn batch(id: &str, record: &RunRecord) -> Result<RecordBatch, ArrowError> {
    let Some(trace) = &record.trace else {
        return to_batch::<Row>(schema(), &[]);
    };
    let rows: Vec<Row> = trace
        .contention
        .iter()
        .enumerate()
        .map(|(i, lock)| {
            let held = trace.holders.iter().find(|h| h.lock_addr == lock.lock_addr);
            let waits = lock.waits.as_ref();
            Row {
                run_id: id,
                rank: i + 1,
                lock: &lock.name,
                lock_addr: address(lock.lock_addr),
                kind: lock.kind.as_str(),
                modes: &lock.modes,
                waits: waits.map_or(0, |w| w.n),
                total_wait_ns: lock.total_wait_ns,
                open_waits: lock.open_waits,
                min_wait_ns: waits.map(|w| w.min_ns),
                p50_wait_ns: waits.map(|w| w.p50_ns),
                p99_wait_ns: waits.map(|w| w.p99_ns),
                max_wait_ns: waits.map(|w| w.max_ns),
                mean_wait_ns: waits.and_then(|w| finite(w.mean_ns)),
                waiters: lock
                    .waiters
                    .iter()
                    .map(|w| Waiter {
                        comm: &w.comm,
                        pid: w.pid,
                        waits: w.waits,
                        total_wait_ns: w.total_wait_ns,
                    })
                    .collect(),
                top_holder: held.and_then(top_holder),
                exact_holds: held.map(|h| h.exact_holds),
                holder_activity: held.map(|h| activities(&h.activity)),
            }
        })
        .collect();
    to_batch(schema(), &rows)
}
