//! The tables, one module each: its schema (the columns docs/parquet.md documents) and the
//! rows one run gives it.

mod findings;
mod growth;
mod holds;
mod ipis;
mod lock_waits;
mod runs;
mod samples;
mod stacks;
mod summaries;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use vmscale_run::RunRecord;

/// One table: its directory's name, its schema, and the batch of one run's rows.
pub struct Table {
    pub name: &'static str,
    pub schema: fn() -> SchemaRef,
    pub(super) batch: fn(&str, &RunRecord) -> Result<RecordBatch, ArrowError>,
}

macro_rules! table {
    ($name:ident) => {
        Table {
            name: stringify!($name),
            schema: $name::schema,
            batch: $name::batch,
        }
    };
}

/// Every table, in the order docs/parquet.md describes them.
pub const TABLES: [Table; 9] = [
    table!(runs),
    table!(samples),
    table!(summaries),
    table!(growth),
    table!(findings),
    table!(lock_waits),
    table!(holds),
    table!(ipis),
    table!(stacks),
];
