//! The named questions that are SQL alone, with how their numbers read on a terminal.

use crate::export_dir::ExportDir;
use crate::questions::{self, By};
use crate::rows::{Rows, Shown};
use crate::QueryError;

/// Which lock tops the verdict, per kernel, host or CPU model.
pub fn top_locks(dir: &ExportDir, by: By) -> Result<Rows, QueryError> {
    Ok(dir
        .rows(&questions::top_locks(by))?
        .shown("share_of_runs", Shown::Share)
        .shown("mean_share", Shown::Share))
}

/// The growth claims side by side, per kernel and host.
pub fn growth(dir: &ExportDir) -> Result<Rows, QueryError> {
    let mut rows = dir.rows(&questions::growth())?;
    for column in ["ratio_min", "ratio_mean", "ratio_max", "exponent_mean"] {
        rows = rows.shown(column, Shown::Decimals(2));
    }
    Ok(rows)
}
