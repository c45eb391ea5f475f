//! One table's rows of one run as a Parquet file, written under a temporary name by
//! [`OutputFile`] so that the path's safety rules and the cleanup on errors and signals are
//! the same as every other vmscale output's.

use std::fs::File;
use std::path::{Path, PathBuf};

use ::parquet::arrow::ArrowWriter;
use ::parquet::basic::Compression;
use ::parquet::file::metadata::KeyValue;
use ::parquet::file::properties::WriterProperties;
use arrow_array::RecordBatch;
use vmscale_run::output::{commit_together, OutputError, OutputFile};

use super::{ParquetExportError, RUN_KEY, SCHEMA_VERSION, TABLE_KEY, VERSION_KEY};

/// A table file complete under its temporary name.
pub(super) struct Pending {
    output: OutputFile,
    file: File,
}

/// Renames a run's table files into place together: a signal meanwhile leaves all of them
/// or none, never part of a run.
pub(super) fn commit(files: Vec<Pending>) -> Result<Vec<PathBuf>, OutputError> {
    commit_together(files.into_iter().map(|p| (p.output, p.file)).collect())
}

pub(super) fn write(
    path: &Path,
    table: &'static str,
    run_id: &str,
    batch: RecordBatch,
) -> Result<Pending, ParquetExportError> {
    let (output, file) = OutputFile::create(path)?;
    let failed = |source| ParquetExportError::Parquet {
        path: path.to_path_buf(),
        source,
    };
    let metadata = [
        (VERSION_KEY, SCHEMA_VERSION.to_string()),
        (TABLE_KEY, table.to_string()),
        (RUN_KEY, run_id.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| KeyValue::new(k.to_string(), v))
    .collect();
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_key_value_metadata(Some(metadata))
        .set_created_by(format!("vmscale {}", env!("CARGO_PKG_VERSION")))
        .build();
    let mut writer =
        ArrowWriter::try_new(file, batch.schema(), Some(properties)).map_err(failed)?;
    if batch.num_rows() > 0 {
        writer.write(&batch).map_err(failed)?;
    }
    let file = writer.into_inner().map_err(failed)?;
    Ok(Pending { output, file })
}
