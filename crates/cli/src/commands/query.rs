//! `vmscale query DIR "SELECT ..."`: SQL over runs exported as Parquet tables, answered by
//! the embedded engine (`vmscale_query`).

use std::path::Path;

use vmscale_query::{ExportDir, QueryError};

use crate::failure::Failure;

pub fn query(dir: &Path, sql: &str, format: vmscale_report::Format) -> Result<(), Failure> {
    let export = ExportDir::open(dir).map_err(failure)?;
    let rows = export.rows(sql).map_err(failure)?;
    crate::console::out!("{}", rows.render(format))
}

/// A request that cannot be answered as asked (no such directory, not an export, SQL the
/// engine refuses) is exit 2; a directory that cannot be read, exit 1.
pub fn failure(e: QueryError) -> Failure {
    if e.is_usage() {
        Failure::usage(e.to_string())
    } else {
        Failure::runtime(e.to_string())
    }
}
