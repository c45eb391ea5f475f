//! GitHub-flavoured Markdown: a heading, the run's context as a list, warnings as a
//! blockquote, then the latency table with the series' notes, how latency grows with what
//! each sample counted, the phase table and, for a traced run, the contended locks with
//! their waiting stacks in code blocks.

use vmscale_run::{RunRecord, TraceSection};

use crate::grid::{self, Grid};
use crate::{contention, explain, facts, growth, scaling};

pub(crate) fn render(record: &RunRecord, options: &crate::Options) -> String {
    let mut out = format!(
        "## {}: {} latency by {}\n\n",
        record.tool.name,
        record.scenario,
        grid::sweep_header(record)
    );
    out.push_str(&crate::verdict::markdown(record));

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
        let notes = grid::notes(record);
        if !notes.is_empty() {
            out.push('\n');
            for (place, note) in notes {
                out.push_str(&format!("- {place}: {note}\n"));
            }
        }
    }

    for growth in growth::sections(record) {
        out.push_str(&format!("\n### {}\n", capitalized(&growth.title)));
        if let Some(bins) = &growth.bins {
            out.push('\n');
            out.push_str(&table(bins));
        }
        if !growth.lines.is_empty() {
            out.push('\n');
            for line in &growth.lines {
                out.push_str(&format!("- {line}\n"));
            }
        }
    }

    let scaling = scaling::lines(record, options.deadline_ns);
    if !scaling.is_empty() {
        out.push_str(
            "\n### How it scales with N\n\nBest model by AIC (s: contention, k: coherency).\n\n",
        );
        for line in scaling {
            out.push_str(&format!("- {line}\n"));
        }
    }

    if let Some(phases) = grid::phases(record) {
        out.push_str("\n### Where the time goes\n\n");
        out.push_str(&table(&phases));
    }

    if let Some(trace) = &record.trace {
        out.push_str(&trace_section(trace));
    }
    out
}

fn trace_section(trace: &TraceSection) -> String {
    let mut out = String::from("\n### Kernel trace\n\n");
    for line in contention::header(trace) {
        out.push_str(&format!("- {line}\n"));
    }

    let Some((mut locks, more)) = contention::table(trace) else {
        out.push_str(&format!("\n{}\n", contention::empty_table_reason(trace)));
        return out;
    };
    // Lock names are symbols and frames: a code span keeps `__` and `*` from becoming
    // emphasis.
    for row in &mut locks.rows {
        row[0] = code_span(&row[0]);
    }
    out.push_str("\n#### Lock contention (worst first)\n\n");
    out.push_str(&table(&locks));
    if let Some(more) = more {
        out.push_str(&format!("\n{more}\n"));
    }

    for (rank, lock) in contention::details(trace).iter().enumerate() {
        out.push_str(&format!(
            "\n#### {}. {} ({})\n",
            rank + 1,
            code_span(&lock.name),
            lock.what
        ));
        if !lock.waiters.is_empty() {
            out.push_str("\nWaiters:\n\n");
            for (who, waited) in &lock.waiters {
                out.push_str(&format!("- {}: {waited}\n", code_span(who)));
            }
            if let Some(more) = &lock.more_waiters {
                out.push_str(&format!("- {more}\n"));
            }
        }
        for stack in &lock.stacks {
            out.push_str(&format!("\nStack, {}:\n\n", stack.title));
            out.push_str(&code_block(&stack.frames));
        }
        if let Some(more) = &lock.more_stacks {
            out.push_str(&format!("\n{more}\n"));
        }
    }
    if !trace.stacks {
        out.push_str("\nKernel stacks were not recorded.\n");
    }
    out.push_str(&explain::markdown(trace, table, code_span));
    out
}

/// A heading starts with a capital, the terminal's lower-case title notwithstanding.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
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

/// `lines` as a fenced code block, fenced with more backticks than any line holds in a row.
fn code_block(lines: &[String]) -> String {
    let longest_run = lines
        .iter()
        .flat_map(|line| line.split(|c| c != '`'))
        .map(str::len)
        .max()
        .unwrap_or(0);
    let fence = "`".repeat((longest_run + 1).max(3));
    let mut out = format!("{fence}text\n");
    for line in lines {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&fence);
    out.push('\n');
    out
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

    #[test]
    fn code_blocks_outfence_backtick_runs_in_their_lines() {
        let plain = code_block(&["__mutex_lock".to_string()]);
        assert_eq!(plain, "```text\n__mutex_lock\n```\n");
        let fenced = code_block(&["a ```` b".to_string()]);
        assert!(fenced.starts_with("`````text\n"), "{fenced}");
        assert!(fenced.ends_with("\n`````\n"), "{fenced}");
    }
}
