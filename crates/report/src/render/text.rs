//! Sections for the terminal: titles as plain lines, lines indented under them, tables with
//! plain ASCII borders and no styling, so the output reads the same on a terminal, in a file
//! and in an e-mail.

use comfy_table::presets::ASCII_FULL_CONDENSED;
use comfy_table::{CellAlignment, Table};

use crate::document::{Block, Entry, Ranked, Section, Span, Text};
use crate::grid::Grid;

/// Lines under a section's title.
const INDENT: usize = 2;
/// Lines under a numbered item, past its "1. ".
const ITEM_INDENT: usize = 3;

/// The section from its title line on, ending in a newline; a caller separating it from
/// what comes before adds the blank line.
///
/// An untitled section (the run's context) has no title line and its blocks start at the
/// margin.
pub(crate) fn section(section: &Section) -> String {
    if section.title.is_empty() {
        return blocks(&section.blocks, 0);
    }
    let mut out = section.title.clone();
    if let Some(aside) = &section.aside {
        out.push_str(&format!(" ({aside})"));
    }
    out.push('\n');
    out.push_str(&blocks(&section.blocks, INDENT));
    out
}

fn blocks(blocks: &[Block], indent: usize) -> String {
    blocks.iter().map(|b| block(b, indent)).collect()
}

fn block(block: &Block, indent: usize) -> String {
    let pad = " ".repeat(indent);
    match block {
        Block::Lines(lines) => lines
            .iter()
            .map(|line| format!("{pad}{}\n", plain(line)))
            .collect(),
        Block::Ranked(items) => ranked(items, &pad),
        Block::Table(grid) => layout(grid),
        Block::Paragraph(text) => format!("\n{pad}{}\n", plain(text)),
        Block::List { label, items } => {
            let mut out = format!("{pad}{label}:\n");
            for item in items {
                out.push_str(&format!("{pad}  {}\n", plain(item)));
            }
            out
        }
        Block::Code {
            label,
            detail,
            lines,
        } => {
            let mut out = format!("{pad}{label}: {detail}\n");
            for line in lines {
                out.push_str(&format!("{pad}  {line}\n"));
            }
            out
        }
        Block::Entry(entry) => self::entry(entry, indent),
        Block::Section(inner) if inner.is_drawing() => String::new(),
        Block::Section(inner) => format!("\n{}", section(inner)),
        // The terminal has the figure's numbers in its tables.
        Block::Figure(_) => String::new(),
        Block::Facts(facts) => {
            let width = facts.iter().map(|f| f.label.len() + 1).max().unwrap_or(0);
            facts
                .iter()
                .map(|fact| {
                    let label = format!("{}:", fact.label);
                    format!("{pad}{label:<width$}  {}\n", plain(&fact.value))
                })
                .collect()
        }
        Block::Warnings(warnings) => {
            let lines: String = warnings
                .iter()
                .map(|w| format!("{pad}warning: {w}\n"))
                .collect();
            format!("\n{lines}")
        }
        // Under the table they qualify, at its margin.
        Block::Notes(notes) => notes
            .iter()
            .map(|(place, note)| format!("note ({place}): {note}\n"))
            .collect(),
    }
}

fn ranked(items: &[Ranked], pad: &str) -> String {
    let mut out = String::new();
    for (index, item) in items.iter().enumerate() {
        let number = format!("{}. ", index + 1);
        out.push_str(&format!("{pad}{number}{}\n", plain(&item.text)));
        let under = " ".repeat(pad.len() + number.len() + 2);
        for detail in item.shown_details() {
            out.push_str(&format!("{under}{}\n", plain(detail)));
        }
        if item.hidden() > 0 {
            out.push_str(&format!(
                "{under}(+{} more in report.html and --format json)\n",
                item.hidden()
            ));
        }
    }
    out
}

fn entry(entry: &Entry, indent: usize) -> String {
    let mut out = format!(
        "\n{}{}. {}\n",
        " ".repeat(indent),
        entry.rank,
        plain(&entry.title)
    );
    out.push_str(&blocks(&entry.blocks, indent + ITEM_INDENT));
    out
}

/// The text as the terminal shows it: symbols as they are, a finding's category in brackets.
pub(crate) fn plain(text: &Text) -> String {
    text.0
        .iter()
        .map(|span| match span {
            Span::Plain(s) | Span::Code(s) => s.clone(),
            Span::Tag(s) => format!("[{s}] "),
        })
        .collect()
}

/// The grid as a bordered table, numbers right-aligned, ending in a newline.
pub(crate) fn layout(grid: &Grid) -> String {
    let mut table = Table::new();
    table
        .load_preset(ASCII_FULL_CONDENSED)
        .force_no_tty()
        .set_header(grid.headers.clone());
    for row in &grid.rows {
        table.add_row(row.clone());
    }
    for (index, numeric) in grid.numeric.iter().enumerate() {
        if let (true, Some(column)) = (*numeric, table.column_mut(index)) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    format!("{table}\n")
}
