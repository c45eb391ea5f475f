//! An answer as rows of JSON values, whatever the SQL asked for, and its layouts: JSON
//! keeps each value's type (numbers stay numbers, lists and maps stay nested) for scripts
//! and for checking one engine against another; the table, Markdown and CSV lay out text.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::json::writer::JsonArray;
use datafusion::arrow::json::WriterBuilder;
use serde_json::{Map, Value};
use vmscale_report::tabular::Table;
use vmscale_report::Format;
use vmscale_stats::units::MISSING;

use crate::error::QueryError;

/// How a column's numbers read on a terminal (JSON and CSV keep them as they are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    Plain,
    /// A fraction, as a percentage.
    Share,
    /// A relative change, as a signed percentage.
    Change,
    /// With this many decimals.
    Decimals(usize),
}

#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub numeric: bool,
    pub shown: Shown,
}

#[derive(Debug, Clone, Default)]
pub struct Rows {
    pub columns: Vec<Column>,
    pub values: Vec<Vec<Value>>,
}

impl Rows {
    pub fn from_batches(schema: &Schema, batches: &[RecordBatch]) -> Result<Rows, QueryError> {
        let columns: Vec<Column> = schema
            .fields()
            .iter()
            .map(|f| Column {
                name: f.name().clone(),
                numeric: f.data_type().is_numeric(),
                shown: Shown::Plain,
            })
            .collect();
        // Values are looked up by name in each row's object.
        for (i, c) in columns.iter().enumerate() {
            if columns[..i].iter().any(|o| o.name == c.name) {
                return Err(QueryError::Usage(format!(
                    "the answer has two columns named {:?}: name them apart with AS",
                    c.name
                )));
            }
        }
        let mut writer = WriterBuilder::new()
            .with_explicit_nulls(true)
            .build::<_, JsonArray>(Vec::new());
        for batch in batches {
            writer
                .write(batch)
                .map_err(|e| QueryError::Sql(e.to_string()))?;
        }
        writer
            .finish()
            .map_err(|e| QueryError::Sql(e.to_string()))?;
        let text = writer.into_inner();
        let objects: Vec<Map<String, Value>> = if text.iter().all(u8::is_ascii_whitespace) {
            Vec::new()
        } else {
            serde_json::from_slice(&text).map_err(|e| QueryError::Sql(e.to_string()))?
        };
        let values = objects
            .into_iter()
            .map(|mut object| {
                columns
                    .iter()
                    .map(|c| object.remove(&c.name).unwrap_or(Value::Null))
                    .collect()
            })
            .collect();
        Ok(Rows { columns, values })
    }

    /// The column `name` shown as `shown` on a terminal.
    pub fn shown(mut self, name: &str, shown: Shown) -> Rows {
        if let Some(c) = self.columns.iter_mut().find(|c| c.name == name) {
            c.shown = shown;
        }
        self
    }

    /// The value of column `name` in row `row`.
    pub fn get(&self, row: usize, name: &str) -> Option<&Value> {
        let at = self.columns.iter().position(|c| c.name == name)?;
        self.values.get(row)?.get(at)
    }

    /// Appends a column, its values one per row.
    pub fn push_column(&mut self, column: Column, values: Vec<Value>) {
        self.columns.push(column);
        for (row, value) in self.values.iter_mut().zip(values) {
            row.push(value);
        }
    }

    /// Keeps the rows `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&[Value]) -> bool) {
        self.values.retain(|row| keep(row));
    }

    /// The rows in `format`, ending in a newline.
    pub fn render(&self, format: Format) -> String {
        if format == Format::Json {
            return self.json();
        }
        let table = Table {
            headers: self.columns.iter().map(|c| c.name.clone()).collect(),
            numeric: self.columns.iter().map(|c| c.numeric).collect(),
            rows: self
                .values
                .iter()
                .map(|row| {
                    self.columns
                        .iter()
                        .zip(row)
                        .map(|(c, v)| cell(v, c.shown, format))
                        .collect()
                })
                .collect(),
        };
        table.render(format)
    }

    /// An array of objects, one row a line, keys in the columns' order.
    fn json(&self) -> String {
        let rows: Vec<String> = self
            .values
            .iter()
            .map(|row| {
                let fields: Vec<String> = self
                    .columns
                    .iter()
                    .zip(row)
                    .map(|(c, v)| format!("{}: {v}", Value::String(c.name.clone())))
                    .collect();
                format!("  {{{}}}", fields.join(", "))
            })
            .collect();
        if rows.is_empty() {
            "[]\n".to_string()
        } else {
            format!("[\n{}\n]\n", rows.join(",\n"))
        }
    }
}

/// One value as text: CSV keeps numbers as they are, empty for null; a terminal table and
/// Markdown show them as the column says.
fn cell(value: &Value, shown: Shown, format: Format) -> String {
    let raw = format == Format::Csv;
    match value {
        Value::Null if raw => String::new(),
        Value::Null => MISSING.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) if !raw => match (shown, n.as_f64()) {
            (Shown::Share, Some(f)) => format!("{:.1}%", f * 100.0),
            (Shown::Change, Some(f)) => format!("{:+.1}%", f * 100.0),
            (Shown::Decimals(d), Some(f)) => format!("{f:.d$}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}
