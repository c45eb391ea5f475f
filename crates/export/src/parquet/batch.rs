//! Rows (plain serde structs) into an Arrow batch of a declared schema, and the few column
//! types every table uses.
//!
//! Each table declares its schema once, by hand, because the schema is the published
//! contract (docs/parquet.md). The rows are built against it: a missing non-null value or
//! a value of the wrong type fails the export, and so does a row whose fields are not the
//! schema's columns, which the builder alone would drop without a word.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use serde::Serialize;

pub(super) fn to_batch<R: Serialize>(
    schema: SchemaRef,
    rows: &[R],
) -> Result<RecordBatch, ArrowError> {
    if let Some(first) = rows.first() {
        same_columns(&schema, first)?;
    }
    let batch = serde_arrow::to_record_batch(schema.fields(), &rows)
        .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
    // The builder names no schema metadata; the declared schema is the file's.
    batch.with_schema(schema)
}

/// The row's fields, by name and order, are the schema's columns.
fn same_columns<R: Serialize>(schema: &Schema, row: &R) -> Result<(), ArrowError> {
    let value = serde_json::to_value(row).map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
    let names: Vec<&str> = value
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let mut sorted_names = names.clone();
    let mut sorted_columns = columns.clone();
    sorted_names.sort_unstable();
    sorted_columns.sort_unstable();
    if sorted_names == sorted_columns {
        Ok(())
    } else {
        Err(ArrowError::SchemaError(format!(
            "row fields {names:?} are not the columns {columns:?}"
        )))
    }
}

pub(super) fn schema_of(fields: Vec<Field>) -> SchemaRef {
    Arc::new(Schema::new(fields))
}

/// Signed 64-bit: Spark has no unsigned 64-bit integer, and nanoseconds and counts stay
/// far below 2^63.
pub(super) fn int(name: &str) -> Field {
    Field::new(name, DataType::Int64, false)
}

pub(super) fn int_or_null(name: &str) -> Field {
    Field::new(name, DataType::Int64, true)
}

pub(super) fn float_or_null(name: &str) -> Field {
    Field::new(name, DataType::Float64, true)
}

pub(super) fn text(name: &str) -> Field {
    Field::new(name, DataType::Utf8, false)
}

pub(super) fn text_or_null(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

pub(super) fn boolean_or_null(name: &str) -> Field {
    Field::new(name, DataType::Boolean, true)
}

/// Microseconds: the finest timestamp Spark reads from Parquet.
pub(super) fn timestamp_or_null(name: &str) -> Field {
    Field::new(
        name,
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        true,
    )
}

pub(super) fn list(name: &str, item: DataType) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new("item", item, true))),
        false,
    )
}

pub(super) fn list_of(name: &str, fields: Vec<Field>) -> Field {
    list(name, DataType::Struct(Fields::from(fields)))
}

/// A list that is null where the run cannot say (not the same as an empty list).
pub(super) fn list_of_or_null(name: &str, fields: Vec<Field>) -> Field {
    list_of(name, fields).with_nullable(true)
}

/// A map from text keys, for knobs and per-target counts whose keys vary by run.
pub(super) fn map(name: &str, value: DataType) -> Field {
    let entries = Field::new(
        "entries",
        DataType::Struct(Fields::from(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("value", value, true),
        ])),
        false,
    );
    Field::new(name, DataType::Map(Arc::new(entries), false), false)
}

/// Non-finite numbers have no JSON form to decode from; they are unknown, so null.
pub(super) fn finite(value: f64) -> Option<f64> {
    value.is_finite().then_some(value)
}

/// An enum's name as run.json spells it (`nested_wait`), stable for queries where a
/// label for people may change.
pub(super) fn serde_name<T: Serialize>(value: T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}

/// A kernel address as hex text: it exceeds a signed 64-bit integer.
pub(super) fn address(addr: u64) -> String {
    format!("{addr:#x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Row {
        a: u64,
        b: Option<String>,
    }

    #[test]
    fn rows_decode_strictly_against_the_schema() {
        let good = schema_of(vec![int("a"), text_or_null("b")]);
        let rows = [
            Row { a: 1, b: None },
            Row {
                a: 2,
                b: Some("x".into()),
            },
        ];
        let decoded = to_batch(good.clone(), &rows).unwrap();
        assert_eq!(decoded.num_rows(), 2);
        assert_eq!(decoded.column(1).null_count(), 1);
        assert_eq!(to_batch::<Row>(good, &[]).unwrap().num_rows(), 0);
        // A row field the schema lacks is an error, not a dropped column, and so is a
        // missing value of a non-null column.
        assert!(to_batch(schema_of(vec![int("a")]), &rows).is_err());
        assert!(to_batch(schema_of(vec![int("a"), text("b")]), &rows).is_err());
    }
}
