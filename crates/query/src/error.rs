//! What can go wrong opening an export or asking it something, each said in one line.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{}: no such directory", path.display())]
    Missing { path: PathBuf },
    #[error("{}: {what}", path.display())]
    Io { path: PathBuf, what: String },
    /// A directory that holds no `runs` table: not what `export --parquet` writes.
    #[error("{}: not a directory of Parquet tables from vmscale export --parquet (no runs/ table in it)", path.display())]
    NotAnExport { path: PathBuf },
    #[error("{}: schema version {found}, and this vmscale reads version {supported} (docs/parquet.md); export the runs again with this version", path.display())]
    Version {
        path: PathBuf,
        found: String,
        supported: u32,
    },
    /// The engine refused or failed the SQL: its own message, on one line.
    #[error("{0}")]
    Sql(String),
    /// A request that cannot be asked as given (an argument the SQL cannot hold).
    #[error("{0}")]
    Usage(String),
}

impl QueryError {
    /// A request that cannot work as asked (exit 2), rather than one that failed running.
    pub fn is_usage(&self) -> bool {
        !matches!(self, QueryError::Io { .. })
    }
}

impl From<datafusion::error::DataFusionError> for QueryError {
    fn from(e: datafusion::error::DataFusionError) -> QueryError {
        // DataFusion's messages may span lines (a plan, a backtrace's hint).
        let text = e.to_string();
        QueryError::Sql(text.split_whitespace().collect::<Vec<_>>().join(" "))
    }
}
