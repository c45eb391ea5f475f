//! A report section as data: what it says, in the order it says it, with no layout.
//!
//! The builders in [`crate::sections`] make these once from the run record; the renderers in
//! [`crate::render`] lay the same sections out as a terminal table, Markdown or HTML, so
//! every format shows the same numbers and words and none can forget a part.

use crate::grid::Grid;

/// A piece of running text whose symbols are marked, so that Markdown and HTML can set
/// them as code while the terminal prints them as they are.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Text(pub Vec<Span>);

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Span {
    Plain(String),
    /// A kernel symbol, lock name, task or command: kept verbatim.
    Code(String),
    /// The category a finding falls in, set before its sentence.
    Tag(String),
}

impl Text {
    pub(crate) fn code(text: impl Into<String>) -> Text {
        Text(vec![Span::Code(text.into())])
    }

    pub(crate) fn tag(text: impl Into<String>) -> Text {
        Text(vec![Span::Tag(text.into())])
    }

    /// This text followed by plain `text`.
    pub(crate) fn then(mut self, text: impl Into<String>) -> Text {
        self.0.push(Span::Plain(text.into()));
        self
    }
}

impl From<String> for Text {
    fn from(text: String) -> Text {
        Text(vec![Span::Plain(text)])
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Text {
        Text::from(text.to_string())
    }
}

/// One titled part of a report.
#[derive(Debug, Clone, Default)]
pub(crate) struct Section {
    /// The HTML anchor (and class of a top-level section); empty for none.
    pub id: &'static str,
    /// Lower-case, as the terminal prints it; headings capitalize it.
    pub title: String,
    /// A shorter title for headings, where the terminal's line says more than a heading
    /// should ("Verdict" for "verdict for memslot: what the explained time went to").
    pub heading: Option<String>,
    /// A remark on the whole section: beside the terminal's title, under a heading.
    pub aside: Option<String>,
    pub blocks: Vec<Block>,
}

impl Section {
    pub(crate) fn new(id: &'static str, title: impl Into<String>) -> Section {
        Section {
            id,
            title: title.into(),
            ..Section::default()
        }
    }

    /// True when the section is only pictures, which the text formats leave out whole
    /// rather than print a title with nothing under it.
    pub(crate) fn is_drawing(&self) -> bool {
        self.blocks.iter().all(|b| matches!(b, Block::Figure(_)))
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Block {
    /// Facts, one line each.
    Lines(Vec<Text>),
    /// Numbered findings, the first the most important.
    Ranked(Vec<Ranked>),
    Table(Grid),
    /// A sentence standing alone: why a table is missing, how many rows were left out.
    Paragraph(Text),
    /// Items under a label: "waiters" and who waited.
    List {
        label: String,
        items: Vec<Text>,
    },
    /// Lines to keep verbatim, such as a kernel stack, under a label and what it counts.
    Code {
        label: String,
        detail: String,
        lines: Vec<String>,
    },
    /// One numbered item that needs more than a line: a lock with its waiters and stacks.
    Entry(Entry),
    Section(Section),
    /// A picture only HTML draws; the other formats have its numbers in their tables.
    Figure(Figure),
    /// Labelled facts, one a line: what ran, where, and how busy the host was.
    Facts(Vec<Fact>),
    /// What the reader must know before trusting the numbers, set apart from them.
    Warnings(Vec<String>),
    /// Remarks on rows of the table above, each with where it applies ("vcpus=4, direct").
    Notes(Vec<(String, String)>),
}

/// One labelled fact of [`Block::Facts`].
#[derive(Debug, Clone)]
pub(crate) struct Fact {
    pub label: &'static str,
    pub value: Text,
}

/// A numbered finding and the lines under it.
#[derive(Debug, Clone)]
pub(crate) struct Ranked {
    pub text: Text,
    /// Everything known in support, most telling first.
    pub details: Vec<Text>,
    /// How many of `details` the text and Markdown renderings show; they count the rest
    /// and point to the HTML page and JSON, which show them all.
    pub shown: usize,
}

impl Ranked {
    /// A finding said in one sentence.
    pub(crate) fn sentence(text: impl Into<Text>) -> Ranked {
        Ranked {
            text: text.into(),
            details: Vec::new(),
            shown: 0,
        }
    }

    /// The details a short rendering shows.
    pub(crate) fn shown_details(&self) -> &[Text] {
        &self.details[..self.shown.min(self.details.len())]
    }

    /// How many details a short rendering leaves out.
    pub(crate) fn hidden(&self) -> usize {
        self.details.len().saturating_sub(self.shown)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub rank: usize,
    pub title: Text,
    pub blocks: Vec<Block>,
}

/// A chart of the run the section was built from, drawn by the HTML renderer from that
/// record; the other formats leave it out, and the blocks beside it carry its numbers.
#[derive(Debug, Clone)]
pub(crate) enum Figure {
    /// The trace around its worst wait.
    Timeline(vmscale_run::findings::TimelineExcerpt),
    /// Every series' p50, p99 and mean against the swept value, then each series' fit.
    Scaling,
    /// The distribution of every point's samples.
    Distributions,
    /// The mean time of each phase, stacked, per phased series.
    Phases,
    /// How one series' latency grows with its x: `record.points[point].series[series]`.
    Growth { point: usize, series: usize },
    /// The on-CPU samples' flame graph (`trace.on_cpu`).
    Flame,
    /// What grew between the smallest and the largest swept value (`trace.on_cpu_by_n`).
    FlameDiff,
    /// The time off a CPU by wait chain (`vmscale_run::wait_chains`).
    FlameOffCpu,
}

/// `text` with its first letter in upper case, for headings; a first word already in mixed
/// case ("vCPU") is a name and stays as it is.
pub(crate) fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    if chars.clone().nth(1).is_some_and(char::is_uppercase) {
        return text.to_string();
    }
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
