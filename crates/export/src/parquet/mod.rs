//! Runs as Parquet tables, for engines that answer questions across many runs (DuckDB,
//! DataFusion, Spark) rather than one run at a time.
//!
//! Each run becomes one file per table, at
//! `DIR/<table>/kernel=<release>/host=<name>/date=<yyyy-mm-dd>/<run id>.parquet`: Hive-style
//! partitions, so an engine or an object store lists only the kernels, hosts and days a
//! question names. Every table is written for every run, empty with its schema where the run
//! has no such data, so a reader never has to tell "nothing happened" from "not exported".
//! docs/parquet.md describes every column; [`SCHEMA_VERSION`] is in each file's key-value
//! metadata.

mod batch;
mod file;
mod partition;
mod tables;

use std::path::{Path, PathBuf};

use vmscale_run::output::OutputError;
use vmscale_run::RunRecord;

pub use partition::run_id;
pub use tables::TABLES;

/// The version of the tables' layout, bumped whenever a column changes meaning, is renamed
/// or removed; stored in every file as [`VERSION_KEY`].
pub const SCHEMA_VERSION: u32 = 1;

/// Key-value metadata keys every file carries.
pub const VERSION_KEY: &str = "vmscale.parquet_schema_version";
pub const TABLE_KEY: &str = "vmscale.table";
pub const RUN_KEY: &str = "vmscale.run_id";

#[derive(Debug, thiserror::Error)]
pub enum ParquetExportError {
    #[error(transparent)]
    Output(#[from] OutputError),
    /// Something other than a directory is where a directory of the tables must go.
    #[error("{}: {what}, not a directory; the Parquet tables need a directory there", path.display())]
    NotADirectory { path: PathBuf, what: &'static str },
    #[error("cannot create {}: {source}", path.display())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The rows do not fit the table's declared schema: a bug, said with the table's name.
    #[error("table {table}: {source}")]
    Rows {
        table: &'static str,
        #[source]
        source: arrow_schema::ArrowError,
    },
    #[error("cannot write {}: {source}", path.display())]
    Parquet {
        path: PathBuf,
        #[source]
        source: ::parquet::errors::ParquetError,
    },
}

impl ParquetExportError {
    /// A destination that cannot be written as asked (exit 2), rather than a write that
    /// failed.
    pub fn is_refusal(&self) -> bool {
        match self {
            ParquetExportError::Output(e) => e.is_refusal(),
            ParquetExportError::NotADirectory { .. } => true,
            _ => false,
        }
    }
}

/// One table file written for a run.
#[derive(Debug, Clone)]
pub struct TableWritten {
    pub table: &'static str,
    pub path: PathBuf,
    pub rows: usize,
}

/// Writes every table of `record` (whose id is `id`, see [`run_id`]) under `out`. The
/// files are renamed into place together once all are written, so an error or a signal
/// leaves all of this run's tables or none, and no temporary (earlier runs' tables stay).
pub fn write_run(
    out: &Path,
    id: &str,
    record: &RunRecord,
) -> Result<Vec<TableWritten>, ParquetExportError> {
    partition::check_out_dir(out)?;
    let keys = partition::Keys::of(record);
    let mut pending = Vec::with_capacity(TABLES.len());
    let mut counts = Vec::with_capacity(TABLES.len());
    for table in TABLES {
        let dir = out.join(table.name).join(keys.relative_dir());
        partition::ensure_dir(out, &dir)?;
        let path = dir.join(partition::file_name(id));
        let batch = (table.batch)(id, record).map_err(|source| ParquetExportError::Rows {
            table: table.name,
            source,
        })?;
        let rows = batch.num_rows();
        pending.push(file::write(&path, table.name, id, batch)?);
        counts.push((table.name, rows));
    }
    let paths = file::commit(pending)?;
    Ok(counts
        .into_iter()
        .zip(paths)
        .map(|((table, rows), path)| TableWritten { table, path, rows })
        .collect())
}
