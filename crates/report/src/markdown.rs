//! GitHub-flavoured Markdown: a heading, the run's context as a list, warnings as a
//! blockquote, then the latency and phase tables.

use vmscale_run::RunRecord;

use crate::facts;
use crate::grid::{self, Grid};

pub(crate) fn render(record: &RunRecord) -> String {
    let mut out = format!(
        "## {}: {} latency by {}\n\n",
        record.tool.name,
        record.scenario,
        grid::sweep_header(record)
    );

    for fact in facts::facts(record) {
        // The command line goes in a code span so that quotes and `*` survive.
        let value = if fact.label == "command" {
            code_span(&fact.value)
        } else {
            fact.value
        };
        out.push_str(&format!("- **{}:** {value}\n", fact.label));
    }

    if !record.warnings.is_empty() {
        out.push_str("\n> **Warnings**\n>\n");
        for warning in &record.warnings {
            out.push_str(&format!("> - {warning}\n"));
        }
    }

    if !record.points.is_empty() {
        out.push_str("\n### Latency\n\n");
        out.push_str(&table(&grid::latency(record)));
    }

    if let Some(phases) = grid::phases(record) {
        out.push_str("\n### Where the time goes\n\n");
        out.push_str(&table(&phases));
    }
    out
}

fn table(grid: &Grid) -> String {
    let mut out = row(&grid.headers);
    let alignment: Vec<String> = grid
        .numeric
        .iter()
        .map(|&numeric| if numeric { "---:" } else { ":---" }.to_string())
        .collect();
    out.push_str(&row(&alignment));
    for cells in &grid.rows {
        out.push_str(&row(cells));
    }
    out
}

fn row(cells: &[String]) -> String {
    let escaped: Vec<String> = cells.iter().map(|c| escape_cell(c)).collect();
    format!("| {} |\n", escaped.join(" | "))
}

/// A pipe would end the cell and a newline the row; both are written so they cannot.
fn escape_cell(text: &str) -> String {
    text.replace('|', r"\|").replace(['\r', '\n'], " ")
}

/// `text` as inline code, fenced with more backticks than it contains in a row.
fn code_span(text: &str) -> String {
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run + 1);
    // CommonMark strips one space on each side, which keeps a leading backtick apart from
    // the fence.
    if longest_run > 0 {
        format!("{fence} {text} {fence}")
    } else {
        format!("{fence}{text}{fence}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipes_in_cells_do_not_add_columns() {
        let line = row(&["a|b".to_string(), "c".to_string()]);
        let unescaped = line
            .char_indices()
            .filter(|&(i, c)| c == '|' && !line[..i].ends_with('\\'))
            .count();
        assert_eq!(unescaped, 3, "{line}");
    }

    #[test]
    fn code_spans_outfence_backticks_inside() {
        assert_eq!(code_span("vmscale run"), "`vmscale run`");
        assert_eq!(code_span("echo `x`"), "`` echo `x` ``");
    }
}
