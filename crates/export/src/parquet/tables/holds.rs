//! `holds`: for each contended sleeping lock whose holders the trace shows, one row per
//! holder: the holds that made someone wait, the waiting behind them, and what the holder
//! was doing meanwhile.

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, DataType, Field, SchemaRef};
use serde::Serialize;
use vmscale_run::findings::ActivityShare;
use vmscale_run::RunRecord;

use crate::parquet::batch::*;

/// Waiter time spent while the holder did one thing.
#[derive(Serialize)]
pub(super) struct Activity<'a> {
    activity: String,
    detail: &'a str,
    wait_ns: u64,
}

pub(super) fn activity_fields() -> Vec<Field> {
    vec![text("activity"), text("detail"), int("wait_ns")]
}

pub(super) fn activities(shares: &[ActivityShare]) -> Vec<Activity<'_>> {
    shares
        .iter()
        .map(|a| Activity {
            activity: serde_name(a.activity),
            detail: &a.detail,
            wait_ns: a.wait_ns,
        })
        .collect()
}

#[derive(Serialize)]
struct Row<'a> {
    run_id: &'a str,
    lock: &'a str,
    lock_addr: String,
    kind: &'a str,
    exact_holds: bool,
    holder_comm: &'a str,
    holder_pid: i32,
    holds: u64,
    shared_holds: u64,
    waited_behind_ns: u64,
    ipis_sent: u64,
    activity: Vec<Activity<'a>>,
}

pub(super) fn schema() -> SchemaRef {
    schema_of(vec![
        text("run_id"),
        text("lock"),
        text("lock_addr"),
        text("kind"),
        Field::new("exact_holds", DataType::Boolean, false),
        text("holder_comm"),
        Field::new("holder_pid", DataType::Int32, false),
        int("holds"),
        int("shared_holds"),
        int("waited_behind_ns"),
        int("ipis_sent"),
        list_of("activity", activity_fields()),
    ])
}

pub(super) fn batch(id: &str, record: &RunRecord) -> Result<RecordBatch, ArrowError> {
    let mut rows = Vec::new();
    for lock in record.trace.iter().flat_map(|t| &t.holders) {
        for holder in &lock.holders {
            rows.push(Row {
                run_id: id,
                lock: &lock.name,
                lock_addr: address(lock.lock_addr),
                kind: lock.kind.as_str(),
                exact_holds: lock.exact_holds,
                holder_comm: &holder.comm,
                holder_pid: holder.pid,
                holds: holder.holds,
                shared_holds: holder.shared_holds,
                waited_behind_ns: holder.waited_behind_ns,
                ipis_sent: holder.ipis_sent,
                activity: activities(&holder.activity),
            });
        }
    }
    to_batch(schema(), &rows)
}
