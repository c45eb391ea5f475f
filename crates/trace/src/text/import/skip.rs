//! Why a line was not imported: the import's error types, kept apart from the reader so that
//! the line parsers name them without importing the reader that drives them.

use std::fmt;

/// Bytes of the offending text kept in a [`Skipped`].
const DETAIL_LEN: usize = 120;

/// Why a line was not imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    NotTrace,
    LongLine,
    Task,
    Cpu,
    Time,
    EventName,
    Body,
    OrphanFrame,
    UserStack,
    /// [`import_text`](super::import_text) only: a stack with no event of its task on its CPU to attach to.
    StackOwner,
    GraphBody,
    GraphNoDuration,
    GraphUnmatched,
    GraphUnreturned,
    GraphTooDeep,
    GraphTooManyTasks,
    GraphEventNoTime,
    GraphEventNoTask,
    /// A known event whose field values cannot be read (raised when converting events).
    Field,
    /// An event too large for a ring-buffer page (raised when converting events).
    TooLarge,
}

impl SkipReason {
    /// What the lines skipped for this reason were, worded to follow a count of them
    /// ("12 truncated (longer than 64 KiB)", "3 lines skipped: not trace lines").
    pub fn describe(self) -> &'static str {
        match self {
            SkipReason::NotTrace => "not trace lines",
            SkipReason::LongLine => "truncated (longer than 64 KiB)",
            SkipReason::Task => "without a COMM-PID task column",
            SkipReason::Cpu => "with the CPU column missing or beyond the CPU limit",
            SkipReason::Time => "with the timestamp missing or out of range",
            SkipReason::EventName => "without an event name after the timestamp",
            SkipReason::Body => "of an unknown event format",
            SkipReason::OrphanFrame => "stack frames without a <stack trace> line before them",
            SkipReason::UserStack => "user-space stack lines (not analysed)",
            SkipReason::StackOwner => "<stack trace> lines with no earlier event of their task on their CPU",
            SkipReason::GraphBody => "function_graph lines not understood",
            SkipReason::GraphNoDuration => "function_graph calls without a duration (funcgraph-duration off)",
            SkipReason::GraphUnmatched => "function_graph returns whose entry is not in the text",
            SkipReason::GraphUnreturned => "function_graph entries whose return is not in the text",
            SkipReason::GraphTooDeep => "function_graph calls nested deeper than 128",
            SkipReason::GraphTooManyTasks => "function_graph calls in progress in more than 1024 tasks",
            SkipReason::GraphEventNoTime => "events in function_graph output without a time (funcgraph-abstime off)",
            SkipReason::GraphEventNoTask => "events in function_graph output without their task (funcgraph-proc off, no context switch seen yet)",
            SkipReason::Field => "events with a field value not understood",
            SkipReason::TooLarge => "events larger than a ring-buffer page",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A line that was not imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// 1-based, as editors count.
    pub line: usize,
    pub reason: SkipReason,
    /// The part of the line at fault, cut to a few dozen characters, on one line.
    pub detail: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {} ({:?})", self.line, self.reason, self.detail)
    }
}

/// A refusal before its line number is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reject {
    pub reason: SkipReason,
    pub detail: String,
}

impl Reject {
    pub(crate) fn new(reason: SkipReason, detail: &str) -> Reject {
        Reject {
            reason,
            detail: cut_to(detail, DETAIL_LEN).replace(['\n', '\r'], " "),
        }
    }

    pub(crate) fn at(self, line: usize) -> Skipped {
        Skipped {
            line,
            reason: self.reason,
            detail: self.detail,
        }
    }
}

/// `text` cut to at most `limit` bytes, on a character boundary.
pub(super) fn cut_to(text: &str, limit: usize) -> String {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}
