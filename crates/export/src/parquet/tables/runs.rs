//! `runs`: one row per run, with what makes two runs comparable (host, kernel, CPU, KVM
//! backend, tool version, knobs) and how it was started.

use std::collections::BTreeMap;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, DataType, SchemaRef};
use serde::Serialize;
use vmscale_run::RunRecord;

use crate::parquet::batch::*;

#[derive(Serialize)]
struct Row<'a> {
    run_id: &'a str,
    scenario: &'a str,
    sweep: &'a str,
    hostname: &'a str,
    kernel_release: &'a str,
    kernel_version: &'a str,
    cpu_model: &'a str,
    online_cpus: usize,
    memory_bytes: u64,
    kvm_backend: Option<&'a str>,
    kvm_max_vcpus: Option<usize>,
    tdp_mmu: Option<bool>,
    halt_poll_ns: Option<u64>,
    tool: &'a str,
    tool_version: &'a str,
    run_schema_version: u32,
    knobs: BTreeMap<String, String>,
    command_line: &'a [String],
    started_utc: Option<&'a str>,
    finished_utc: Option<&'a str>,
    points: usize,
    traced: bool,
    warnings: &'a [String],
}

pub(super) fn schema() -> SchemaRef {
    schema_of(vec![
        text("run_id"),
        text("scenario"),
        text("sweep"),
        text("hostname"),
        text("kernel_release"),
        text("kernel_version"),
        text("cpu_model"),
        int("online_cpus"),
        int("memory_bytes"),
        text_or_null("kvm_backend"),
        int_or_null("kvm_max_vcpus"),
        boolean_or_null("tdp_mmu"),
        int_or_null("halt_poll_ns"),
        text("tool"),
        text("tool_version"),
        int("run_schema_version"),
        map("knobs", DataType::Utf8),
        list("command_line", DataType::Utf8),
        timestamp_or_null("started_utc"),
        timestamp_or_null("finished_utc"),
        int("points"),
        arrow_schema::Field::new("traced", DataType::Boolean, false),
        list("warnings", DataType::Utf8),
    ])
}

/// A knob's value as text: strings as they are, anything else as its JSON.
fn knob_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn present(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

pub(super) fn batch(id: &str, record: &RunRecord) -> Result<RecordBatch, ArrowError> {
    let knobs = match &record.knobs {
        serde_json::Value::Object(map) => {
            map.iter().map(|(k, v)| (k.clone(), knob_text(v))).collect()
        }
        _ => BTreeMap::new(),
    };
    let kvm = record.host.kvm.as_ref();
    let row = Row {
        run_id: id,
        scenario: &record.scenario,
        sweep: &record.sweep,
        hostname: &record.host.hostname,
        kernel_release: &record.host.kernel_release,
        kernel_version: &record.host.kernel_version,
        cpu_model: &record.host.cpu_model,
        online_cpus: record.host.online_cpus,
        memory_bytes: record.host.memory_bytes,
        kvm_backend: kvm.map(|k| k.backend.as_str()),
        kvm_max_vcpus: kvm.map(|k| k.max_vcpus),
        tdp_mmu: kvm.and_then(|k| k.tdp_mmu),
        halt_poll_ns: kvm.and_then(|k| k.halt_poll_ns),
        tool: &record.tool.name,
        tool_version: &record.tool.version,
        run_schema_version: record.schema_version,
        knobs,
        command_line: &record.command_line,
        started_utc: present(&record.started_utc),
        finished_utc: present(&record.finished_utc),
        points: record.points.len(),
        traced: record.trace.is_some(),
        warnings: &record.warnings,
    };
    to_batch(schema(), &[row])
}
