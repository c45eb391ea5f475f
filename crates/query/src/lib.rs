//! Questions over many runs: SQL over the Parquet tables `vmscale export --parquet` writes,
//! answered in-process by an embedded engine (DataFusion), and the fleet's named questions
//! (which lock tops the verdict, which hosts regressed between two kernels, how growth
//! claims compare) as SQL over the same tables.
//!
//! The named questions' SQL is plain enough for Spark SQL to run unchanged
//! ([`questions`]), so a fleet too large for one machine asks Spark the same thing; only
//! the per-row statistics of a regression are computed here, by `compare`'s rules.

mod error;
mod export_dir;
pub mod named;
pub mod questions;
pub mod regressions;
mod rows;

pub use error::QueryError;
pub use export_dir::ExportDir;
pub use rows::{Column, Rows, Shown};
