//! One module per subcommand; `run` holds what every scenario run shares (the scenarios
//! themselves, with their flags, live in the scenario crate).

pub mod compare;
pub mod doctor;
pub mod export;
pub mod export_parquet;
pub mod fleet;
pub mod list;
pub mod query;
pub mod record;
pub mod report;
pub mod run;
pub mod tour;
