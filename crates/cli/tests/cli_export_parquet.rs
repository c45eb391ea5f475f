//! `vmscale export --parquet` on real runs made here with the built binary (a traced
//! memslot sweep and a recording), read back twice: with the parquet crate, and with DuckDB
//! through `parquet_check.py`, a reader independent of the writer. Both compare with the
//! runs' run.json. Needs root, /dev/kvm, tracefs, and python3 with DuckDB's package
//! (scripts/test installs it); fails (never skips) without them.

mod common;
#[path = "../../export/tests/support/parquet_rows.rs"]
mod parquet_rows;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use common::*;
use parquet_rows::{expected_rows, read, walk, TABLES};
use serde_json::Value;

const CHECK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/parquet_check.py");
const GOLDEN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../report/tests/golden/run.json"
);

fn made(o: std::process::Output, what: &str) {
    assert!(o.status.success(), "{what} failed: {}", stderr(&o));
}

fn run_dirs(out: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    dirs
}

fn load(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap()
}

fn id_of(dir: &Path, run: &Value) -> String {
    format!(
        "{}@{}",
        dir.file_name().unwrap().to_string_lossy(),
        run["host"]["hostname"].as_str().unwrap()
    )
}

/// Rows per run id over every file of `table`.
fn rows_by_run(pq: &Path, table: &str) -> HashMap<String, usize> {
    let mut rows = HashMap::new();
    for file in walk(&pq.join(table)) {
        let (batch, metadata) = read(Path::new(&file));
        assert_eq!(
            metadata
                .get("vmscale.parquet_schema_version")
                .map(String::as_str),
            Some("1"),
            "{file}"
        );
        let ids = batch["run_id"].as_string::<i32>();
        for id in ids.iter().flatten() {
            *rows.entry(id.to_string()).or_default() += 1;
        }
    }
    rows
}

#[test]
fn real_runs_export_and_read_back_with_the_parquet_crate_and_with_duckdb() {
    let base = scratch("export-parquet");
    let _removed = RemovedOnDrop(base.clone());
    let runs = base.join("runs");
    // The runs also write their own tables as they finish (--parquet on run and record).
    let direct = base.join("parquet-direct");
    made(
        vmscale()
            .args([
                "run", "memslot", "--vcpus", "1,2", "--repeat", "20", "--warmup", "2",
            ])
            .arg("--parquet")
            .arg(&direct)
            .args(["--quiet", "--format", "json", "--out"])
            .arg(&runs)
            .output()
            .unwrap(),
        "memslot",
    );
    made(
        vmscale()
            .args(["record", "--quiet", "--format", "json", "--out"])
            .arg(&runs)
            .arg("--parquet")
            .arg(&direct)
            .args([
                "--",
                "sh",
                "-c",
                "for i in $(seq 30); do /bin/true & done; wait",
            ])
            .output()
            .unwrap(),
        "record",
    );
    let dirs = run_dirs(&runs);
    assert_eq!(dirs.len(), 2, "{dirs:?}");

    let pq = base.join("parquet");
    let o = vmscale()
        .args(["export", "--parquet"])
        .args(&dirs)
        .arg("-o")
        .arg(&pq)
        .output()
        .unwrap();
    made(o.clone(), "export --parquet");
    let message = stderr(&o);
    assert_eq!(message.trim_end().lines().count(), 1, "{message}");
    assert!(message.contains("wrote 2 runs"), "{message}");

    // The parquet crate: every run has a file in every table, at its partition, and the
    // rows run.json implies.
    let counts: HashMap<&str, HashMap<String, usize>> =
        TABLES.iter().map(|&t| (t, rows_by_run(&pq, t))).collect();
    // What the runs wrote themselves is what export writes of them, row for row.
    for table in TABLES {
        assert_eq!(
            rows_by_run(&direct, table),
            counts[table],
            "{table}: --parquet on the runs and export --parquet disagree"
        );
    }
    for dir in &dirs {
        let run = load(dir);
        let id = id_of(dir, &run);
        let partition = format!(
            "kernel={}/host={}/date={}",
            run["host"]["kernel_release"].as_str().unwrap(),
            run["host"]["hostname"].as_str().unwrap(),
            &run["started_utc"].as_str().unwrap()[..10]
        );
        for (table, want) in expected_rows(&run) {
            let file = pq
                .join(table)
                .join(&partition)
                .join(format!("{id}.parquet"));
            assert!(file.is_file(), "{} missing", file.display());
            let got = counts[table].get(&id).copied().unwrap_or(0);
            assert_eq!(got, want, "{id}: {table}");
        }
    }

    // The memslot run's samples, in order, and its first finding.
    let memslot = dirs
        .iter()
        .find(|d| d.to_string_lossy().ends_with("-memslot"))
        .unwrap();
    let run = load(memslot);
    let id = id_of(memslot, &run);
    let files: Vec<String> = walk(&pq.join("samples"))
        .into_iter()
        .filter(|f| f.ends_with(&format!("{id}.parquet")))
        .collect();
    let (samples, _) = read(Path::new(&files[0]));
    let durations = samples["duration_ns"].as_primitive::<Int64Type>();
    let want: Vec<i64> = run["points"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["series"].as_array().unwrap())
        .flat_map(|s| s["samples_ns"].as_array().unwrap())
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(durations.values().to_vec(), want);
    assert!(
        !run["verdict"].as_array().unwrap().is_empty(),
        "a traced memslot run has a verdict"
    );

    // Exported again: the same files, replaced, no temporaries.
    let before = walk(&pq);
    made(
        vmscale()
            .args(["export", "--parquet"])
            .args(&dirs)
            .arg("-o")
            .arg(&pq)
            .output()
            .unwrap(),
        "export --parquet again",
    );
    let mut after = walk(&pq);
    let mut before = before;
    before.sort();
    after.sort();
    assert_eq!(before, after);
    assert_eq!(after.len(), TABLES.len() * 2);

    // DuckDB, an independent reader, agrees with run.json too.
    let o = Command::new("python3")
        .arg(CHECK)
        .arg(&pq)
        .args(&dirs)
        .output()
        .unwrap_or_else(|e| panic!("python3 is needed to run {CHECK}: {e}"));
    assert!(
        o.status.success(),
        "parquet_check.py (DuckDB) disagrees: {}{}",
        stdout(&o),
        stderr(&o)
    );
    assert_eq!(stdout(&o).lines().count(), 2, "{}", stdout(&o));
}

#[test]
fn bad_requests_are_one_line_and_write_nothing() {
    let base = scratch("export-parquet-refused");
    let _removed = RemovedOnDrop(base.clone());
    std::fs::create_dir_all(&base).unwrap();
    let pq = base.join("pq");
    let export = |args: &[&str]| vmscale().arg("export").args(args).output().unwrap();

    one_line_failure(&export(&["--parquet", GOLDEN]), 2, "--parquet needs -o DIR");
    let file = base.join("file");
    std::fs::write(&file, b"x").unwrap();
    one_line_failure(
        &export(&["--parquet", GOLDEN, "-o", file.to_str().unwrap()]),
        2,
        "not a directory",
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
    one_line_failure(
        &export(&["--parquet", GOLDEN, "-o", "/dev/null"]),
        2,
        "a character device, not a directory",
    );
    let fifo = base.join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    one_line_failure(
        &export(&["--parquet", GOLDEN, "-o", fifo.to_str().unwrap()]),
        2,
        "a FIFO, not a directory",
    );
    one_line_failure(
        &export(&["--parquet", "--compression", "zstd", GOLDEN, "-o", "x"]),
        2,
        "--compression applies to --dat only",
    );
    one_line_failure(&export(&["--dat", GOLDEN, GOLDEN]), 2, "one run at a time");
    one_line_failure(
        &export(&["--parquet", GOLDEN, GOLDEN, "-o", pq.to_str().unwrap()]),
        2,
        "given twice",
    );
    // A run that cannot be loaded is refused before any other run is written.
    let missing = base.join("no-such-run");
    let o = export(&[
        "--parquet",
        GOLDEN,
        missing.to_str().unwrap(),
        "-o",
        pq.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert_eq!(stderr(&o).trim_end().lines().count(), 1, "{}", stderr(&o));
    assert!(!pq.exists(), "something was written");

    // The checked-in run exports on its own (no KVM needed), also named as a bare
    // `run.json` in its directory: the id is the directory's name either way.
    let o = export(&["--parquet", GOLDEN, "-o", pq.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(walk(&pq).len(), TABLES.len());
    let o = vmscale()
        .current_dir(Path::new(GOLDEN).parent().unwrap())
        .args(["export", "--parquet", "run.json", "-o"])
        .arg(&pq)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let files = walk(&pq);
    assert_eq!(files.len(), TABLES.len(), "{files:?}");
    assert!(
        files
            .iter()
            .all(|f| f.ends_with("/golden@testhost.parquet")),
        "{files:?}"
    );
}
