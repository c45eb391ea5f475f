//! Sections as HTML: a top-level section in a `<section>` under an `<h2>`, lines and
//! findings as lists, tables with right-aligned numbers, stacks in `<pre>`, the timeline
//! and the charts as inline SVG, drawn by the page (`html`) that hands its drawer in: the
//! page assembles sections and these render them, and neither module needs the other's
//! insides. Every piece of text from the record is escaped.

use crate::document::{capitalized, Block, Entry, Figure, Ranked, Section, Span, Text};
use crate::grid::Grid;

/// What draws a section's figures, as SVG: the page's charts from the record the sections
/// were built from.
pub(crate) type Figures<'a> = &'a dyn Fn(&Figure) -> String;

/// `text` with the characters that HTML gives meaning to replaced by entities, safe both
/// as element content and inside a quoted attribute.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A top-level section of a page.
pub(crate) fn section(figures: Figures, section: &Section) -> String {
    let class = if section.id.is_empty() {
        String::new()
    } else {
        format!(" class=\"{}\"", section.id)
    };
    format!(
        "<section{class}>\n{}</section>\n",
        titled(figures, section, 2)
    )
}

/// The heading at `level` (2 for `<h2>`), the aside, then the blocks; an untitled section
/// (the run's context) is its blocks alone.
pub(crate) fn titled(figures: Figures, section: &Section, level: usize) -> String {
    if section.title.is_empty() {
        return blocks(figures, &section.blocks, level);
    }
    let heading = section.heading.as_deref().unwrap_or(&section.title);
    let id = if section.id.is_empty() {
        String::new()
    } else {
        format!(" id=\"{}\"", section.id)
    };
    let mut out = format!(
        "<h{level}{id}>{}</h{level}>\n",
        escape(&capitalized(heading))
    );
    if let Some(aside) = &section.aside {
        out.push_str(&format!(
            "<p class=\"muted\">{}.</p>\n",
            escape(&capitalized(aside))
        ));
    }
    out.push_str(&blocks(figures, &section.blocks, level));
    out
}

fn blocks(figures: Figures, blocks: &[Block], level: usize) -> String {
    blocks.iter().map(|b| block(figures, b, level)).collect()
}

fn block(figures: Figures, block: &Block, level: usize) -> String {
    match block {
        Block::Lines(lines) => format!("<ul class=\"lines\">\n{}</ul>\n", items(lines)),
        Block::Ranked(found) => ranked(found),
        Block::Table(grid) => table(grid),
        Block::Paragraph(text) => format!("<p>{}</p>\n", inline(text)),
        Block::List { label, items: list } => format!(
            "<p>{}:</p>\n<ul class=\"lines\">\n{}</ul>\n",
            escape(&capitalized(label)),
            items(list)
        ),
        Block::Code {
            label,
            detail,
            lines,
        } => format!(
            "<p>{}, {}:</p>\n<pre>{}</pre>\n",
            escape(&capitalized(label)),
            escape(detail),
            escape(&lines.join("\n"))
        ),
        Block::Entry(entry) => self::entry(figures, entry, level + 1),
        Block::Section(inner) => titled(figures, inner, level + 1),
        Block::Figure(figure) => figures(figure),
        Block::Facts(facts) => {
            let rows: String = facts
                .iter()
                .map(|fact| {
                    format!(
                        "<dt>{}</dt><dd>{}</dd>\n",
                        escape(fact.label),
                        inline(&fact.value)
                    )
                })
                .collect();
            format!("<dl class=\"facts\">\n{rows}</dl>\n")
        }
        Block::Warnings(warnings) => format!(
            "<div class=\"warnings\"><strong>Warnings</strong>\n<ul>\n{}</ul></div>\n",
            warnings
                .iter()
                .map(|w| format!("<li>{}</li>\n", escape(w)))
                .collect::<String>()
        ),
        Block::Notes(notes) => format!(
            "<ul class=\"lines\">\n{}</ul>\n",
            notes
                .iter()
                .map(|(place, note)| format!("<li>{}: {}</li>\n", escape(place), escape(note)))
                .collect::<String>()
        ),
    }
}

fn items(lines: &[Text]) -> String {
    lines
        .iter()
        .map(|line| format!("<li>{}</li>\n", inline(line)))
        .collect()
}

/// Every detail of every finding: the page is where the short renderings send readers.
fn ranked(found: &[Ranked]) -> String {
    let mut out = String::from("<ol class=\"findings\">\n");
    for item in found {
        out.push_str(&format!("<li>{}", inline(&item.text)));
        if !item.details.is_empty() {
            out.push_str(&format!("<ul>\n{}</ul>", items(&item.details)));
        }
        out.push_str("</li>\n");
    }
    out.push_str("</ol>\n");
    out
}

fn entry(figures: Figures, entry: &Entry, level: usize) -> String {
    let mut out = format!(
        "<h{level}>{}. {}</h{level}>\n",
        entry.rank,
        inline(&entry.title)
    );
    out.push_str(&blocks(figures, &entry.blocks, level));
    out
}

fn inline(text: &Text) -> String {
    text.0
        .iter()
        .map(|span| match span {
            Span::Plain(s) => escape(s),
            Span::Code(s) => format!("<code>{}</code>", escape(s)),
            Span::Tag(s) => format!("<strong>{}</strong>: ", escape(s)),
        })
        .collect()
}

/// A grid as an HTML table, numeric columns right-aligned, symbol columns as code.
pub(crate) fn table(grid: &Grid) -> String {
    let class = |index: usize| {
        if grid.numeric.get(index).copied().unwrap_or(false) {
            " class=\"num\""
        } else {
            ""
        }
    };
    let mut out = String::from("<table>\n<thead><tr>");
    for (index, header) in grid.headers.iter().enumerate() {
        out.push_str(&format!("<th{}>{}</th>", class(index), escape(header)));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &grid.rows {
        out.push_str("<tr>");
        for (index, cell) in row.iter().enumerate() {
            let cell = if grid.code.get(index).copied().unwrap_or(false) {
                format!("<code>{}</code>", escape(cell))
            } else {
                escape(cell)
            };
            out.push_str(&format!("<td{}>{cell}</td>", class(index)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    out
}
