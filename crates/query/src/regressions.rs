//! `--regressions --between A B`: per host, CPU model, scenario, series and n that both
//! kernels measured, B's samples judged against A's by `compare`'s own rules
//! (`vmscale_report::compare::judge_point`): with 3 or more runs a side the runs are the
//! replicates, otherwise each side's blocks in the order its runs took them; slower or
//! faster only beyond the noise threshold with an interval that excludes no change, no
//! significant change only when the whole interval lies within it, undecidable otherwise.
//!
//! Which rows exist and how many runs and samples each side has is SQL
//! ([`questions::regression_pairs`]), the same text Spark runs; the statistics are here.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use serde_json::Value;
use vmscale_report::compare::{judge_point, Row, FASTER, SLOWER, UNDECIDABLE_TRACING};
use vmscale_run::{RunPart, Series};
use vmscale_stats::compare::Statistic;
use vmscale_stats::Summary;

use crate::export_dir::ExportDir;
use crate::questions;
use crate::rows::{Column, Rows, Shown};
use crate::QueryError;

/// The rows compared, and how many got each verdict.
pub struct Answer {
    pub rows: Rows,
    pub verdicts: BTreeMap<&'static str, usize>,
    pub compared: usize,
}

/// A row's key: host, CPU model, scenario, series, n.
type Key = (Option<String>, Option<String>, String, String, i64);

/// One kernel's samples at a key, in order, cut into its runs (or `--runs` parts).
#[derive(Default)]
struct Side {
    samples: Vec<u64>,
    parts: Vec<usize>,
    last_part: Option<(String, Option<i64>)>,
    traced: BTreeSet<bool>,
}

/// Every row both kernels measured, judged; with `all` false only the slower ones are
/// kept (the counts still cover every row).
pub fn regressions(
    dir: &ExportDir,
    a: &str,
    b: &str,
    noise: f64,
    all: bool,
) -> Result<Answer, QueryError> {
    if a == b {
        return Err(QueryError::Usage(format!(
            "--between names {a} twice: give two kernels"
        )));
    }
    let mut rows = dir.rows(&questions::regression_pairs(a, b)?)?;
    let (_, batches) = dir.batches(&questions::regression_samples(a, b)?)?;
    let sides = gather(&batches, a)?;
    let mut judged: Vec<Option<Row>> = Vec::with_capacity(rows.values.len());
    for i in 0..rows.values.len() {
        let key = key_of(&rows, i);
        judged.push(sides.get(&key).map(|(sa, sb)| judge(key.4, sa, sb, noise)));
    }
    let mut verdicts = BTreeMap::new();
    for row in judged.iter().flatten() {
        *verdicts.entry(row.verdict).or_default() += 1;
    }
    let compared = judged.len();
    add_columns(&mut rows, &judged);
    if !all {
        let at = rows.columns.len() - 1;
        rows.retain(|r| r[at].as_str() == Some(SLOWER));
    }
    Ok(Answer {
        rows,
        verdicts,
        compared,
    })
}

fn key_of(rows: &Rows, i: usize) -> Key {
    let text = |name| rows.get(i, name).and_then(Value::as_str).map(String::from);
    (
        text("host"),
        text("cpu_model"),
        text("scenario").unwrap_or_default(),
        text("series").unwrap_or_default(),
        rows.get(i, "n").and_then(Value::as_i64).unwrap_or(0),
    )
}

/// The samples by key, (A's, B's).
fn gather(batches: &[RecordBatch], a: &str) -> Result<HashMap<Key, (Side, Side)>, QueryError> {
    let mut sides: HashMap<Key, (Side, Side)> = HashMap::new();
    for batch in batches {
        let text = |name: &str| column(batch, name, &DataType::Utf8);
        let (host, cpu, scenario, series, kernel, run_id) = (
            text("host")?,
            text("cpu_model")?,
            text("scenario")?,
            text("series")?,
            text("kernel")?,
            text("run_id")?,
        );
        let int = |name: &str| column(batch, name, &DataType::Int64);
        let (n, part, duration) = (int("n")?, int("run_part")?, int("duration_ns")?);
        let traced = column(batch, "traced", &DataType::Boolean)?;
        let (host, cpu, scenario, series, kernel, run_id) = (
            host.as_string::<i32>(),
            cpu.as_string::<i32>(),
            scenario.as_string::<i32>(),
            series.as_string::<i32>(),
            kernel.as_string::<i32>(),
            run_id.as_string::<i32>(),
        );
        let (n, part, duration) = (
            n.as_primitive::<Int64Type>(),
            part.as_primitive::<Int64Type>(),
            duration.as_primitive::<Int64Type>(),
        );
        let traced = traced.as_boolean();
        let maybe = |a: &datafusion::arrow::array::StringArray, i: usize| {
            a.is_valid(i).then(|| a.value(i).to_string())
        };
        for i in 0..batch.num_rows() {
            let key = (
                maybe(host, i),
                maybe(cpu, i),
                scenario.value(i).to_string(),
                series.value(i).to_string(),
                n.value(i),
            );
            let pair = sides.entry(key).or_default();
            let side = if kernel.value(i) == a {
                &mut pair.0
            } else {
                &mut pair.1
            };
            let this = (
                run_id.value(i).to_string(),
                part.is_valid(i).then(|| part.value(i)),
            );
            if side.last_part.as_ref() != Some(&this) {
                side.parts.push(0);
                side.last_part = Some(this);
            }
            *side.parts.last_mut().expect("a part was pushed") += 1;
            side.samples.push(duration.value(i).max(0) as u64);
            if traced.is_valid(i) {
                side.traced.insert(traced.value(i));
            }
        }
    }
    Ok(sides)
}

/// Column `name` of `batch` as `to` (the engine may hand text over as views or
/// dictionaries).
fn column(batch: &RecordBatch, name: &str, to: &DataType) -> Result<ArrayRef, QueryError> {
    let array = batch
        .column_by_name(name)
        .ok_or_else(|| QueryError::Sql(format!("the samples' answer has no column {name}")))?;
    cast(array, to).map_err(|e| QueryError::Sql(e.to_string()))
}

/// One side as the series `compare` judges: its samples in order, and its runs as the
/// series' run parts when there are several.
fn series(name: &str, side: &Side) -> Series {
    let mut at = 0;
    let runs = if side.parts.len() >= 2 {
        side.parts
            .iter()
            .map(|&count| {
                let part = &side.samples[at..at + count];
                at += count;
                RunPart {
                    samples: count,
                    p50_ns: Summary::from_samples(part).map_or(0, |s| s.p50_ns),
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    Series {
        name: name.to_string(),
        samples_ns: side.samples.clone(),
        summary: Summary::from_samples(&side.samples),
        runs,
        ..Series::default()
    }
}

/// The row's judgment; a slower or faster row whose sides were traced differently (or one
/// side both ways) is undecidable, as `compare` says of two such runs: tracing adds cost
/// to every sample.
fn judge(n: i64, a: &Side, b: &Side, noise: f64) -> Row {
    let mut row = judge_point(n.max(0) as u64, &series("", a), &series("", b), noise);
    let same_tracing = a.traced == b.traced && a.traced.len() <= 1;
    if !same_tracing && (row.verdict == SLOWER || row.verdict == FASTER) {
        row.verdict = UNDECIDABLE_TRACING;
    }
    row
}

/// The judgment's columns after the SQL's: what was compared, each judged statistic's
/// change with its interval, the p99's change (shown, not judged), the verdict.
fn add_columns(rows: &mut Rows, judged: &[Option<Row>]) {
    let number = |v: Option<f64>| {
        v.and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number)
    };
    let change = |r: &Row, s: Statistic| r.changes.iter().find(|c| c.statistic == s).copied();
    let mut push = |name: &str, shown: Shown, numeric: bool, f: &dyn Fn(&Row) -> Value| {
        let values = judged
            .iter()
            .map(|r| r.as_ref().map_or(Value::Null, f))
            .collect();
        let column = Column {
            name: name.to_string(),
            numeric,
            shown,
        };
        rows.push_column(column, values);
    };
    push("replicates", Shown::Plain, false, &|r| {
        r.replicates.map_or(Value::Null, |x| {
            serde_json::to_value(x).unwrap_or(Value::Null)
        })
    });
    for s in [Statistic::P50, Statistic::Mean] {
        let name = s.name();
        push(&format!("{name}_change"), Shown::Change, true, &|r| {
            number(change(r, s).map(|c| c.relative))
        });
        push(&format!("{name}_low"), Shown::Change, true, &|r| {
            number(change(r, s).map(|c| c.low))
        });
        push(&format!("{name}_high"), Shown::Change, true, &|r| {
            number(change(r, s).map(|c| c.high))
        });
    }
    push("p99_change", Shown::Change, true, &|r| {
        number(change(r, Statistic::P99).map(|c| c.relative))
    });
    push("p_value", Shown::Decimals(4), true, &|r| number(r.p_value));
    push("verdict", Shown::Plain, false, &|r| {
        Value::String(r.verdict.to_string())
    });
}
