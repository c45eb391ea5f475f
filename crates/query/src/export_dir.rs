//! A directory written by `vmscale export --parquet`, opened for SQL: every table registered
//! under its own name (runs, samples, ...) over all of its files, with the Hive partition
//! keys `kernel`, `host` and `date` as text columns, as DuckDB and Spark read them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::MemTable;
use datafusion::execution::context::{SQLOptions, SessionContext};
use datafusion::functions::expr_fn::nullif;
use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
use datafusion::prelude::{ident, lit, Expr};
use vmscale_export::parquet::{SCHEMA_VERSION, TABLES, VERSION_KEY};

use crate::error::QueryError;
use crate::rows::Rows;

/// The partition keys, in the order of the directories.
pub const PARTITIONS: [&str; 3] = ["kernel", "host", "date"];
/// The value the exporter writes for an unknown key, which Hive, Spark and DuckDB read as
/// null; DataFusion reads it as text, so the views turn it into null.
const NULL_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// An export directory with its tables registered, and the runtime that answers on it.
pub struct ExportDir {
    ctx: SessionContext,
    runtime: tokio::runtime::Runtime,
}

impl ExportDir {
    pub fn open(dir: &Path) -> Result<ExportDir, QueryError> {
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(QueryError::NotAnExport {
                    path: dir.to_path_buf(),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(QueryError::Missing {
                    path: dir.to_path_buf(),
                })
            }
            Err(e) => return Err(io(dir, e)),
        }
        let dir = dir.canonicalize().map_err(|e| io(dir, e))?;
        if !dir.join("runs").is_dir() {
            return Err(QueryError::NotAnExport { path: dir });
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .build()
            .map_err(|e| io(&dir, e))?;
        let ctx = SessionContext::new();
        for table in &TABLES {
            let path = dir.join(table.name);
            check_version(&path)?;
            let provider = runtime.block_on(provider(&ctx, &path, (table.schema)()))?;
            ctx.register_table(table.name, provider)?;
        }
        Ok(ExportDir { ctx, runtime })
    }

    /// The answer to `sql` as Arrow batches with their schema. Only queries: statements
    /// that would create, change or drop anything are refused.
    pub fn batches(&self, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), QueryError> {
        let options = SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false);
        self.runtime.block_on(async {
            let frame = self.ctx.sql_with_options(sql, options).await?;
            let schema = Arc::new(frame.schema().as_arrow().clone());
            Ok((schema, frame.collect().await?))
        })
    }

    /// The answer to `sql` as rows of JSON values.
    pub fn rows(&self, sql: &str) -> Result<Rows, QueryError> {
        let (schema, batches) = self.batches(sql)?;
        Rows::from_batches(&schema, &batches)
    }
}

fn io(path: &Path, e: std::io::Error) -> QueryError {
    QueryError::Io {
        path: path.to_path_buf(),
        what: e.to_string(),
    }
}

/// One table as a view over its files: the file columns as declared by the exporter (a
/// file of the same version lacking a later-added column reads it as null), then the
/// partition keys, unknown ones as null. A table directory that is missing (an export of
/// an earlier version) is an empty table with the same columns.
async fn provider(
    ctx: &SessionContext,
    path: &Path,
    schema: SchemaRef,
) -> Result<Arc<dyn TableProvider>, QueryError> {
    let partitions: Vec<(String, DataType)> = PARTITIONS
        .iter()
        .map(|p| (p.to_string(), DataType::Utf8))
        .collect();
    let files: Arc<dyn TableProvider> = if path.is_dir() {
        let url = ListingTableUrl::parse(format!("{}/", path.display()))?;
        let options = ListingOptions::new(Arc::new(ParquetFormat::default()))
            .with_file_extension(".parquet")
            .with_table_partition_cols(partitions);
        let config = ListingTableConfig::new(url)
            .with_listing_options(options)
            .with_schema(schema.clone());
        Arc::new(ListingTable::try_new(config)?)
    } else {
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.extend(
            partitions
                .iter()
                .map(|(p, t)| Field::new(p, t.clone(), true)),
        );
        Arc::new(MemTable::try_new(
            Arc::new(Schema::new(fields)),
            vec![vec![]],
        )?)
    };
    let columns: Vec<Expr> = schema
        .fields()
        .iter()
        .map(|f| ident(f.name()))
        .chain(
            PARTITIONS
                .iter()
                .map(|p| nullif(ident(*p), lit(NULL_PARTITION)).alias(*p)),
        )
        .collect();
    Ok(ctx.read_table(files)?.select(columns)?.into_view())
}

/// The schema version of the first file found under `table` (every file of an export
/// carries it); a table without files has nothing to check.
fn check_version(table: &Path) -> Result<(), QueryError> {
    let Some(file) = first_parquet(table) else {
        return Ok(());
    };
    let opened = std::fs::File::open(&file).map_err(|e| io(&file, e))?;
    let reader = SerializedFileReader::new(opened).map_err(|e| QueryError::Io {
        path: file.clone(),
        what: format!("not a readable Parquet file: {e}"),
    })?;
    let found = reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|e| e.key == VERSION_KEY))
        .and_then(|e| e.value.clone());
    if found.as_deref() == Some(SCHEMA_VERSION.to_string().as_str()) {
        Ok(())
    } else {
        Err(QueryError::Version {
            path: file,
            found: found.unwrap_or_else(|| "none".to_string()),
            supported: SCHEMA_VERSION,
        })
    }
}

/// The first `.parquet` file under `dir`, depth first in name order, hidden entries (the
/// exporter's temporaries) left out as the engine leaves them out.
fn first_parquet(dir: &Path) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
        })
        .collect();
    entries.sort();
    entries.into_iter().find_map(|p| {
        if p.is_dir() {
            first_parquet(&p)
        } else {
            (p.extension().is_some_and(|e| e == "parquet")).then_some(p)
        }
    })
}
