//! The latency and phase tables as rows of text cells, before any layout. The terminal
//! table and the Markdown rendering lay out the same cells, so both show the same numbers.

use vmscale_run::{Point, RunRecord, Series};
use vmscale_stats::Summary;

use crate::units::{self, MISSING};

/// Rows of cells under a header; `numeric` marks the columns to right-align, `code` those
/// that hold symbols (lock names, tasks, system calls) for Markdown and HTML to set as code.
#[derive(Debug, Clone)]
pub(crate) struct Grid {
    pub headers: Vec<String>,
    pub numeric: Vec<bool>,
    pub code: Vec<bool>,
    pub rows: Vec<Vec<String>>,
}

impl Grid {
    pub(crate) fn new(columns: &[(&str, bool)]) -> Grid {
        Grid {
            headers: columns.iter().map(|(name, _)| name.to_string()).collect(),
            numeric: columns.iter().map(|(_, numeric)| *numeric).collect(),
            code: vec![false; columns.len()],
            rows: Vec::new(),
        }
    }

    /// The grid with column `index` marked as holding symbols.
    pub(crate) fn with_code_column(mut self, index: usize) -> Grid {
        self.code[index] = true;
        self
    }
}

/// Header of the column holding the swept value, e.g. "vcpus".
pub(crate) fn sweep_header(record: &RunRecord) -> &str {
    if record.sweep.is_empty() {
        "n"
    } else {
        &record.sweep
    }
}

/// Distinct series names in first-seen order, so that every section lists series, and every
/// chart colours them, the same way.
pub(crate) fn series_names(record: &RunRecord) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for series in record.points.iter().flat_map(|p| &p.series) {
        if !names.contains(&series.name.as_str()) {
            names.push(&series.name);
        }
    }
    names
}

/// One row per (point, series): the distribution of the series' samples.
///
/// The vCPU/CPU column is left out when every point ran no vCPU at all (a scenario that
/// only registers objects in a VM), where a column of "0x" would read as a measurement.
pub(crate) fn latency(record: &RunRecord) -> Grid {
    let ratio = record.points.iter().any(|p| p.vcpus_per_host_cpu != 0.0);
    let mut columns = vec![(sweep_header(record), true)];
    if ratio {
        columns.push(("vCPU/CPU", true));
    }
    columns.extend([
        ("strategy", false),
        ("n", true),
        ("mean (us)", true),
        ("stdev (us)", true),
        ("min (us)", true),
        ("p50 (us)", true),
        ("p90 (us)", true),
        ("p99 (us)", true),
        ("p99.9 (us)", true),
        ("max (us)", true),
    ]);
    let mut grid = Grid::new(&columns);
    for point in &record.points {
        for series in &point.series {
            let mut row = vec![point.n.to_string()];
            if ratio {
                row.push(units::ratio(point.vcpus_per_host_cpu));
            }
            row.extend([series.name.clone(), series.samples_ns.len().to_string()]);
            row.extend(distribution_cells(series.summary.as_ref()));
            grid.rows.push(row);
        }
    }
    grid
}

/// Where a series was measured, as its notes name it: "vcpus=4, direct".
fn point_and_series(record: &RunRecord, point: &Point, series: &Series) -> String {
    format!("{}={}, {}", sweep_header(record), point.n, series.name)
}

/// Every series' notes in record order, each with where it was measured: facts such as a
/// limit that applied, which belong beside the latencies they qualify.
pub(crate) fn notes(record: &RunRecord) -> Vec<(String, &str)> {
    record
        .points
        .iter()
        .flat_map(|p| p.series.iter().map(move |s| (p, s)))
        .flat_map(|(point, series)| {
            let place = point_and_series(record, point, series);
            series
                .notes
                .iter()
                .map(move |note| (place.clone(), note.as_str()))
        })
        .collect()
}

/// mean, stdev, min, p50, p90, p99, p99.9, max in microseconds, or "-" for each.
fn distribution_cells(summary: Option<&Summary>) -> Vec<String> {
    match summary {
        Some(s) => vec![
            units::micros(s.mean_ns),
            units::micros(s.stdev_ns),
            units::micros_u64(s.min_ns),
            units::micros_u64(s.p50_ns),
            units::micros_u64(s.p90_ns),
            units::micros_u64(s.p99_ns),
            units::micros_u64(s.p999_ns),
            units::micros_u64(s.max_ns),
        ],
        None => vec![MISSING.to_string(); 8],
    }
}

/// One row per (point, series, phase), or `None` when no series was split into phases.
pub(crate) fn phases(record: &RunRecord) -> Option<Grid> {
    let with_phases = || {
        record
            .points
            .iter()
            .flat_map(|p| p.series.iter().map(move |s| (p, s)))
            .filter(|(_, s)| !s.phases.is_empty())
    };
    with_phases().next()?;
    let mut grid = Grid::new(&[
        (sweep_header(record), true),
        ("strategy", false),
        ("phase", false),
        ("mean (us)", true),
        ("p50 (us)", true),
        ("p99 (us)", true),
        ("share of mean (%)", true),
    ]);
    for (point, series) in with_phases() {
        grid.rows.extend(phase_rows(point, series));
    }
    Some(grid)
}

fn phase_rows(point: &Point, series: &Series) -> Vec<Vec<String>> {
    let total_mean = series.summary.as_ref().map(|s| s.mean_ns);
    series
        .phases
        .iter()
        .map(|phase| {
            let mut row = vec![point.n.to_string(), series.name.clone(), phase.name.clone()];
            match &phase.summary {
                Some(s) => {
                    // Phases add up to the total, so shares of the mean add up to 100%.
                    let share = match total_mean {
                        Some(total) if total > 0.0 => units::percent(s.mean_ns / total),
                        _ => MISSING.to_string(),
                    };
                    row.extend([
                        units::micros(s.mean_ns),
                        units::micros_u64(s.p50_ns),
                        units::micros_u64(s.p99_ns),
                        share,
                    ]);
                }
                None => row.extend(vec![MISSING.to_string(); 4]),
            }
            row
        })
        .collect()
}
