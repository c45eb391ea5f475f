//! Reading back `vmscale export --parquet` tables with the parquet crate, and what
//! run.json says each table should hold; shared by the export crate's tests and the
//! command line's.
#![allow(dead_code)] // each test binary uses its own subset

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;

/// The tables an export writes, as a reader names them (written out here, not taken from
/// the exporter, so a table the exporter stops writing fails the tests).
#[allow(dead_code)]
pub const TABLES: [&str; 9] = [
    "runs",
    "samples",
    "summaries",
    "growth",
    "findings",
    "lock_waits",
    "holds",
    "ipis",
    "stacks",
];

/// The file's rows as one batch (the reader clamps the batch size to the file's rows), and
/// its key-value metadata.
pub fn read(path: &Path) -> (RecordBatch, HashMap<String, String>) {
    let file = File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let metadata = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .into_iter()
        .flatten()
        .map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default()))
        .collect();
    let schema = builder.schema().clone();
    let mut batches = builder.with_batch_size(1 << 30).build().unwrap();
    let batch = match batches.next() {
        Some(batch) => batch.unwrap(),
        None => RecordBatch::new_empty(schema),
    };
    assert!(
        batches.next().is_none(),
        "{}: more than one batch",
        path.display()
    );
    (batch, metadata)
}

pub fn len(v: &Value) -> usize {
    items(v).len()
}

/// An array's items; none where run.json leaves the array out (a recording has no
/// `scaling`, a run without a trace no `trace`).
pub fn items(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// What run.json says each table should hold.
pub fn expected_rows(run: &Value) -> HashMap<&'static str, usize> {
    let series: Vec<&Value> = items(&run["points"])
        .iter()
        .flat_map(|p| items(&p["series"]))
        .collect();
    let nonempty = |v: &Value| usize::from(len(&v["samples_ns"]) > 0);
    let trace = &run["trace"];
    HashMap::from([
        ("runs", 1),
        (
            "samples",
            series.iter().map(|s| len(&s["samples_ns"])).sum(),
        ),
        (
            "summaries",
            series
                .iter()
                .map(|s| nonempty(s) + items(&s["phases"]).iter().map(nonempty).sum::<usize>())
                .sum(),
        ),
        (
            "growth",
            items(&run["scaling"])
                .iter()
                .map(|g| len(&g["growth"]) + len(&g["unjudged"]))
                .sum(),
        ),
        ("findings", len(&run["verdict"])),
        ("lock_waits", len(&trace["contention"])),
        (
            "holds",
            items(&trace["holders"])
                .iter()
                .map(|h| len(&h["holders"]))
                .sum(),
        ),
        ("ipis", len(&trace["ipis"])),
        (
            "stacks",
            len(&trace["on_cpu"]["stacks"])
                + items(&trace["on_cpu_by_n"])
                    .iter()
                    .map(|p| len(&p["profile"]["stacks"]))
                    .sum::<usize>()
                + items(&trace["contention"])
                    .iter()
                    .map(|c| len(&c["stacks"]))
                    .sum::<usize>(),
        ),
    ])
}

/// Every file under `dir`, recursively.
pub fn walk(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path.display().to_string());
        }
    }
    files
}
