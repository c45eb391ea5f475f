//! A rich run (the report crate's golden run.json: a verdict, growth claims, a contended
//! lock with holders, IPIs, on-CPU stacks) exported as Parquet and read back with the
//! parquet crate's own reader: every table's file is where its partition says, with the
//! declared schema, the schema version, and the rows run.json implies.

mod support;

use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use serde_json::Value;
use support::parquet_rows::{expected_rows, len, read, walk};
use vmscale_export::parquet::{run_id, write_run, SCHEMA_VERSION, TABLES, VERSION_KEY};

const GOLDEN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../report/tests/golden/run.json"
);

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn export_golden(out: &Path) -> (String, Value) {
    let record = vmscale_run::load_run(Path::new(GOLDEN)).unwrap();
    let id = run_id("20260102T030405Z-pause", &record);
    write_run(out, &id, &record).unwrap();
    let json: Value = serde_json::from_slice(&std::fs::read(GOLDEN).unwrap()).unwrap();
    (id, json)
}

fn table_file(out: &Path, table: &str, id: &str) -> PathBuf {
    out.join(table)
        .join("kernel=6.8.0-test/host=testhost/date=2026-01-02")
        .join(format!("{id}.parquet"))
}

#[test]
fn every_table_reads_back_with_its_schema_version_and_run_json_rows() {
    let out = scratch("parquet-golden");
    let (id, run) = export_golden(&out);
    assert_eq!(id, "20260102T030405Z-pause@testhost");
    let expected = expected_rows(&run);
    for table in TABLES {
        let path = table_file(&out, table.name, &id);
        let (batch, metadata) = read(&path);
        assert_eq!(
            metadata.get(VERSION_KEY).map(String::as_str),
            Some(SCHEMA_VERSION.to_string().as_str()),
            "{}",
            table.name
        );
        assert_eq!(
            batch.schema().fields(),
            (table.schema)().fields(),
            "{}",
            table.name
        );
        assert_eq!(batch.num_rows(), expected[table.name], "{}", table.name);
        assert!(
            expected[table.name] > 0,
            "the golden run has no {} rows",
            table.name
        );
    }

    // The samples, in order, are run.json's.
    let (samples, _) = read(&table_file(&out, "samples", &id));
    let durations = samples["duration_ns"].as_primitive::<Int64Type>();
    let first_series = &run["points"][0]["series"][0]["samples_ns"];
    for (i, want) in first_series.as_array().unwrap().iter().enumerate() {
        assert_eq!(durations.value(i), want.as_i64().unwrap(), "sample {i}");
    }

    // The first finding is the verdict's.
    let (findings, _) = read(&table_file(&out, "findings", &id));
    let cause = findings["cause"].as_string::<i32>();
    assert_eq!(cause.value(0), run["verdict"][0]["cause"].as_str().unwrap());
    assert_eq!(findings["rank"].as_primitive::<Int64Type>().value(0), 1);
    let explained = findings["explained_by"].as_list::<i32>();
    assert_eq!(
        explained.value(0).len(),
        len(&run["verdict"][0]["explained_by"])
    );

    // The top lock's address is exact, as hex.
    let (locks, _) = read(&table_file(&out, "lock_waits", &id));
    let addr = run["trace"]["contention"][0]["lock_addr"].as_u64().unwrap();
    assert_eq!(
        locks["lock_addr"].as_string::<i32>().value(0),
        format!("{addr:#x}")
    );

    // Nothing but the tables is left: no temporaries.
    let leftovers: Vec<String> = walk(&out)
        .into_iter()
        .filter(|p| !p.ends_with(".parquet"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_run_without_a_trace_still_has_every_table_empty_with_its_schema() {
    let out = scratch("parquet-untraced");
    let mut record = vmscale_run::load_run(Path::new(GOLDEN)).unwrap();
    record.trace = None;
    record.verdict.clear();
    let id = run_id("untraced", &record);
    let written = write_run(&out, &id, &record).unwrap();
    assert_eq!(written.len(), TABLES.len());
    for table in ["lock_waits", "holds", "ipis", "stacks", "findings"] {
        let (batch, _) = read(&table_file(&out, table, &id));
        assert_eq!(batch.num_rows(), 0, "{table}");
        assert_eq!(batch.schema().fields().len(), {
            let t = TABLES.iter().find(|t| t.name == table).unwrap();
            (t.schema)().fields().len()
        });
    }
}

#[test]
fn exporting_again_replaces_the_files_and_non_regular_targets_are_refused() {
    let out = scratch("parquet-again");
    let (id, _) = export_golden(&out);
    let (id_again, _) = export_golden(&out);
    assert_eq!(id, id_again);
    assert_eq!(walk(&out).len(), TABLES.len());

    // A FIFO where a table's file goes: refused, left alone, and nothing of the run is
    // renamed into place (the tables already written stay as they were).
    let fifo = table_file(&out, "stacks", &id);
    std::fs::remove_file(&fifo).unwrap();
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let record = vmscale_run::load_run(Path::new(GOLDEN)).unwrap();
    let refused = write_run(&out, &id, &record).unwrap_err();
    assert!(refused.is_refusal(), "{refused}");
    assert!(refused.to_string().contains("a FIFO"), "{refused}");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(
        walk(&out).iter().all(|p| !p.contains(".tmp-")),
        "{:?}",
        walk(&out)
    );

    // A regular file where the directory goes.
    let file = out.join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let refused = write_run(&file, &id, &record).unwrap_err();
    assert!(refused.is_refusal(), "{refused}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}
