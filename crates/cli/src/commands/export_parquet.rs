//! `vmscale export --parquet RUN_DIR... -o DIR`: runs as Parquet tables, partitioned by
//! kernel, host and date, for DuckDB, DataFusion or Spark to query across runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use vmscale_export::parquet::{run_id, write_run, ParquetExportError};
use vmscale_run::RunRecord;

use crate::failure::Failure;

/// Every run is loaded (and refused, if it cannot be) before anything is written, so a
/// typo in the last argument does not leave half a fleet exported.
pub fn export_parquet(runs: &[PathBuf], out: Option<PathBuf>) -> Result<(), Failure> {
    let Some(out) = out else {
        return Err(Failure::usage(
            "--parquet needs -o DIR, the directory the tables go to",
        ));
    };
    let mut loaded: Vec<(String, RunRecord)> = Vec::with_capacity(runs.len());
    for run in runs {
        let record = vmscale_run::load_run(run)?;
        let id = run_id(&dir_name(run)?, &record);
        if loaded.iter().any(|(other, _)| *other == id) {
            return Err(Failure::usage(format!(
                "{} is given twice (run id {id})",
                run.display()
            )));
        }
        loaded.push((id, record));
    }
    let mut rows: BTreeMap<&'static str, usize> = BTreeMap::new();
    for (id, record) in &loaded {
        let written = write_run(&out, id, record).map_err(failure)?;
        for table in written {
            *rows.entry(table.table).or_default() += table.rows;
        }
    }
    let counts: Vec<String> = vmscale_export::parquet::TABLES
        .iter()
        .map(|t| format!("{} {}", t.name, rows.get(t.name).copied().unwrap_or(0)))
        .collect();
    crate::console::note!(
        "wrote {} run{} as Parquet tables under {} (rows: {}): read them with DuckDB's read_parquet('{}/<table>/**/*.parquet', hive_partitioning = true) or Spark's spark.read.parquet",
        loaded.len(),
        if loaded.len() == 1 { "" } else { "s" },
        out.display(),
        counts.join(", "),
        out.display(),
    );
    Ok(())
}

/// The run directory's name: given RUN_DIR/run.json, its directory's.
fn dir_name(run: &Path) -> Result<String, Failure> {
    let dir = if run.is_dir() {
        run
    } else {
        // `run.json` alone has the empty path as its parent.
        run.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    };
    let dir = dir
        .canonicalize()
        .map_err(|e| Failure::runtime(format!("{}: {e}", dir.display())))?;
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Failure::usage(format!("{}: a run directory has a name", dir.display())))
}

fn failure(e: ParquetExportError) -> Failure {
    if e.is_refusal() {
        Failure::usage(e.to_string())
    } else {
        Failure::runtime(e.to_string())
    }
}
