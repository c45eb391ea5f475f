//! Renders a vmscale run for people and for programs.
//!
//! - [`Format::Table`]: the terminal view: the verdict, context, warnings, latency
//!   distribution per point and strategy with the series' notes, how latency grows with
//!   what each sample counted beside it, where the time goes, KVM counters and guest
//!   progress; with [`Options::brief`], the verdict and the run in a line.
//! - [`Format::Json`]: the complete record, raw samples included.
//! - [`Format::Csv`]: one row per point, strategy and phase, in nanoseconds.
//! - [`Format::Md`]: the verdict, context, tables, notes and growth sections as Markdown,
//!   for a mailing-list post or a PR.
//! - [`html::render_html`]: one self-contained page with charts.
//!
//! Every section (the verdict, the run's context and warnings, the latency table, how it
//! scales, where the time goes, how it grows with what each sample counted, the KVM
//! counters, what a VMM did, and a traced run's kernel trace) is built once as data
//! (`sections`, in the terms of `document`) and laid out per format by `render`, so every
//! format says the same; charts are figures in those sections that only HTML draws, beside
//! the blocks that carry their numbers. [`render_contention_csv`] gives the locks as CSV.
//!
//! Every rendering works from the summaries stored in the record, except the growth
//! sections, which bin the raw samples by the x recorded beside them; a series without
//! samples shows as missing values rather than zeros.

pub mod compare;
mod counters;
mod csv;
mod document;
mod grid;
mod growth;
pub mod html;
mod json;
mod markdown;
mod render;
mod scaling;
mod sections;
mod table;
pub mod tabular;
use vmscale_stats::units;

use std::fmt;
use std::str::FromStr;

use vmscale_run::RunRecord;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Csv,
    Md,
}

impl Format {
    pub const ALL: [Format; 4] = [Format::Table, Format::Json, Format::Csv, Format::Md];

    /// The name [`Format::from_str`] accepts for this format.
    pub fn name(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Json => "json",
            Format::Csv => "csv",
            Format::Md => "md",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A format name that is not one of [`Format::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFormat(pub String);

impl fmt::Display for UnknownFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
        write!(
            f,
            "unknown output format {:?}: valid formats are {} (or markdown)",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownFormat {}

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(name: &str) -> Result<Format, UnknownFormat> {
        match name.trim().to_ascii_lowercase().as_str() {
            "table" => Ok(Format::Table),
            "json" => Ok(Format::Json),
            "csv" => Ok(Format::Csv),
            "md" | "markdown" => Ok(Format::Md),
            _ => Err(UnknownFormat(name.to_string())),
        }
    }
}

/// What a rendering may add beyond the record itself.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Options {
    /// A latency budget in ns: scaling fits say at which N the prediction crosses it.
    pub deadline_ns: Option<f64>,
    /// The terminal's first screen only (table format): the verdict, the run in one line and
    /// its warnings; everything else stays in the run directory and `--details`.
    pub brief: bool,
}

/// The record in `format`, ending in a newline.
pub fn render(record: &RunRecord, format: Format) -> String {
    render_with(record, format, &Options::default())
}

/// [`render`] with options.
pub fn render_with(record: &RunRecord, format: Format, options: &Options) -> String {
    match format {
        Format::Table if options.brief => table::brief(record),
        Format::Table => table::render(record, options),
        Format::Json => json::render(record),
        Format::Csv => csv::render(record),
        Format::Md => markdown::render(record, options),
    }
}

/// The run's contended locks as CSV, one row per lock, worst first, times in nanoseconds
/// and ending in a newline; `None` when the run has no kernel trace. A traced run without
/// contention gives the header alone.
pub fn render_contention_csv(record: &RunRecord) -> Option<String> {
    csv::contention(record)
}

#[cfg(test)]
mod tests;
