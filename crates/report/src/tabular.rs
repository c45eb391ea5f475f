//! Rows of text cells that come from elsewhere (an SQL answer over exported runs) laid out
//! as a run's own tables are: the bordered terminal table, Markdown, CSV. JSON is the
//! caller's, since only it knows each value's type.

use crate::grid::Grid;
use crate::Format;

/// Rows of cells under a header; `numeric` marks the columns to right-align.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub headers: Vec<String>,
    pub numeric: Vec<bool>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// The table in `format` (terminal table, Markdown or CSV), ending in a newline. JSON
    /// is not a layout of text cells: asked for it, this gives CSV's rows.
    pub fn render(&self, format: Format) -> String {
        let grid = Grid {
            headers: self.headers.clone(),
            numeric: self.numeric.clone(),
            code: vec![false; self.headers.len()],
            rows: self.rows.clone(),
        };
        match format {
            Format::Table => crate::render::text::layout(&grid),
            Format::Md => crate::render::markdown::table(&grid),
            Format::Csv | Format::Json => {
                let mut out = crate::csv::line(self.headers.iter().cloned());
                for row in &self.rows {
                    out.push_str(&crate::csv::line(row.iter().cloned()));
                }
                out
            }
        }
    }
}
