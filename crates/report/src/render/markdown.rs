//! Sections as GitHub-flavoured Markdown: headings, lists, tables whose symbol columns are
//! code spans, and kernel stacks in fenced code blocks.

use crate::document::{capitalized, Block, Entry, Ranked, Section, Span, Text};
use crate::grid::Grid;

/// The section from its heading on, at `level` (3 for `###`); every block starts with the
/// blank line that separates it from what is above. An untitled section (the run's
/// context) has no heading and starts with its first block's first line.
pub(crate) fn section(section: &Section, level: usize) -> String {
    if section.title.is_empty() {
        let out: String = section.blocks.iter().map(|b| block(b, level)).collect();
        return out.trim_start_matches('\n').to_string();
    }
    let heading = section.heading.as_deref().unwrap_or(&section.title);
    let mut out = format!("{} {}\n", "#".repeat(level), capitalized(heading));
    if let Some(aside) = &section.aside {
        out.push_str(&format!("\n{}.\n", capitalized(aside)));
    }
    for block in &section.blocks {
        out.push_str(&self::block(block, level));
    }
    out
}

fn block(block: &Block, level: usize) -> String {
    match block {
        Block::Lines(lines) => {
            let items: String = lines
                .iter()
                .map(|line| format!("- {}\n", inline(line)))
                .collect();
            format!("\n{items}")
        }
        Block::Ranked(items) => format!("\n{}", ranked(items)),
        Block::Table(grid) => format!("\n{}", table(grid)),
        Block::Paragraph(text) => format!("\n{}\n", inline(text)),
        Block::List { label, items } => {
            let mut out = format!("\n{}:\n\n", capitalized(label));
            for item in items {
                out.push_str(&format!("- {}\n", inline(item)));
            }
            out
        }
        Block::Code {
            label,
            detail,
            lines,
        } => format!(
            "\n{}, {detail}:\n\n{}",
            capitalized(label),
            code_block(lines)
        ),
        Block::Entry(entry) => self::entry(entry, level + 1),
        Block::Section(inner) if inner.is_drawing() => String::new(),
        Block::Section(inner) => format!("\n{}", section(inner, level + 1)),
        // Markdown has the figure's numbers in its tables.
        Block::Figure(_) => String::new(),
        Block::Facts(facts) => {
            let lines: String = facts
                .iter()
                .map(|fact| format!("- **{}:** {}\n", fact.label, inline(&fact.value)))
                .collect();
            format!("\n{lines}")
        }
        Block::Warnings(warnings) => {
            let mut out = String::from("\n> **Warnings**\n>\n");
            for warning in warnings {
                out.push_str(&format!("> - {warning}\n"));
            }
            out
        }
        Block::Notes(notes) => {
            let lines: String = notes
                .iter()
                .map(|(place, note)| format!("- {place}: {note}\n"))
                .collect();
            format!("\n{lines}")
        }
    }
}

fn ranked(items: &[Ranked]) -> String {
    let mut out = String::new();
    for (index, item) in items.iter().enumerate() {
        out.push_str(&format!("{}. {}\n", index + 1, inline(&item.text)));
        for detail in item.shown_details() {
            out.push_str(&format!("   - {}\n", inline(detail)));
        }
        if item.hidden() > 0 {
            out.push_str(&format!(
                "   - (+{} more in report.html and `--format json`)\n",
                item.hidden()
            ));
        }
    }
    out
}

fn entry(entry: &Entry, level: usize) -> String {
    let mut out = format!(
        "\n{} {}. {}\n",
        "#".repeat(level),
        entry.rank,
        inline(&entry.title)
    );
    for block in &entry.blocks {
        out.push_str(&self::block(block, level));
    }
    out
}

/// Symbols as code spans, so that `__` and `*` in them do not become emphasis.
fn inline(text: &Text) -> String {
    text.0
        .iter()
        .map(|span| match span {
            Span::Plain(s) => s.clone(),
            Span::Code(s) => code_span(s),
            Span::Tag(s) => format!("**{s}**: "),
        })
        .collect()
}

/// The grid as a pipe table, numbers right-aligned, symbol columns as code spans.
pub(crate) fn table(grid: &Grid) -> String {
    let mut out = row(&grid.headers);
    let alignment: Vec<String> = grid
        .numeric
        .iter()
        .map(|&numeric| if numeric { "---:" } else { ":---" }.to_string())
        .collect();
    out.push_str(&row(&alignment));
    for cells in &grid.rows {
        let cells: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(index, cell)| {
                if grid.code.get(index).copied().unwrap_or(false) {
                    code_span(cell)
                } else {
                    cell.clone()
                }
            })
            .collect();
        out.push_str(&row(&cells));
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
pub(crate) fn code_span(text: &str) -> String {
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
