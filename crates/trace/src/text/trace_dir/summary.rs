//! What a conversion from text imported, left out and had to adjust, and the warnings a
//! report gives for it.

use std::collections::{BTreeMap, BTreeSet};

use vmscale_stats::units::{exact_duration, noun_for, plural};

use crate::text::import::{CallStart, Forms, GraphCall, SkipReason, Skipped, TextClock};

/// Line numbers kept per skip reason.
const FIRST_LINES: usize = 5;
/// Event names kept among those not converted; the rest are counted together.
const UNCONVERTED_NAMES: usize = 64;
/// Bytes kept of an event name not converted.
const UNCONVERTED_NAME_LEN: usize = 64;
/// Slowest function_graph calls kept.
pub const SLOWEST_CALLS: usize = 10;
/// Functions counted by name among function tracer calls; the rest are counted together.
const FUNCTION_NAMES: usize = 4096;
/// Most-called functions named in the notes.
const TOP_FUNCTIONS: usize = 10;

/// The lines skipped for one reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkipTally {
    pub count: u64,
    /// The first few, ascending.
    pub first_lines: Vec<usize>,
    /// What the first one was.
    pub first_detail: String,
}

/// The outcome of [`super::write_trace_dir`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TextDirSummary {
    /// The highest line number any item came from.
    pub last_line: usize,
    /// Events written, by `system:event`.
    pub events: BTreeMap<String, u64>,
    /// Kernel stacks written.
    pub stacks: u64,
    /// Events of types no analysis reads, by name (`(other)` past the first 64 names).
    pub unconverted: BTreeMap<String, u64>,
    pub skipped: BTreeMap<SkipReason, SkipTally>,
    /// Events the kernel said it lost (`CPU:N [LOST M EVENTS]`), per CPU.
    pub lost: BTreeMap<u32, u64>,
    pub clocks: BTreeSet<TextClock>,
    /// function_graph calls read, and the slowest of them, slowest first.
    pub calls: u64,
    pub slowest: Vec<GraphCall>,
    /// Function tracer calls read, and how often each function was called (`(other)` past
    /// the first 4096 names).
    pub function_calls: u64,
    pub functions: BTreeMap<String, u64>,
    /// CPUs with events, ascending.
    pub cpus: Vec<u32>,
    /// The highest CPU any event, stack, call or loss note named.
    pub highest_cpu: Option<u32>,
    /// Symbols given addresses, and names beyond the limit that share a stand-in.
    pub symbols: usize,
    pub symbols_dropped: u64,
    /// Events whose time was before the previous event of their CPU, moved up to it.
    pub reordered: u64,
    /// Stack frames beyond the per-stack limit.
    pub dropped_frames: u64,
    /// Stack frames printed as a bare name (options/sym-offset off).
    pub frames_without_offset: u64,
}

impl TextDirSummary {
    pub(crate) fn skip(&mut self, skipped: &Skipped) {
        self.last_line = self.last_line.max(skipped.line);
        let tally = self.skipped.entry(skipped.reason).or_default();
        tally.count += 1;
        // Lines mostly come in order, but the writer's own refusals and the entries found
        // never returned at the end come later: keep the earliest.
        if tally
            .first_lines
            .first()
            .is_none_or(|&first| skipped.line < first)
        {
            tally.first_detail = skipped.detail.clone();
        }
        tally.first_lines.push(skipped.line);
        tally.first_lines.sort_unstable();
        tally.first_lines.truncate(FIRST_LINES);
    }

    pub(crate) fn unconverted(&mut self, name: &str) {
        let mut end = name.len().min(UNCONVERTED_NAME_LEN);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let name = &name[..end];
        let key =
            if self.unconverted.contains_key(name) || self.unconverted.len() < UNCONVERTED_NAMES {
                name
            } else {
                "(other)"
            };
        *self.unconverted.entry(key.to_string()).or_default() += 1;
    }

    /// One function tracer call, counted by its function (the name without the offset).
    pub(crate) fn function(&mut self, ip: &str) {
        self.function_calls += 1;
        let name = ip.split(['+', ' ']).next().unwrap_or(ip);
        let mut end = name.len().min(UNCONVERTED_NAME_LEN);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let name = &name[..end];
        let key = if self.functions.contains_key(name) || self.functions.len() < FUNCTION_NAMES {
            name
        } else {
            "(other)"
        };
        *self.functions.entry(key.to_string()).or_default() += 1;
    }

    pub(crate) fn saw_cpu(&mut self, cpu: u32) {
        self.highest_cpu = self.highest_cpu.max(Some(cpu));
    }

    pub(crate) fn call(&mut self, call: GraphCall) {
        self.last_line = self.last_line.max(call.line);
        if let Some(cpu) = call.cpu {
            self.saw_cpu(cpu);
        }
        self.calls += 1;
        let slower = self
            .slowest
            .iter()
            .position(|c| call.duration_ns > c.duration_ns)
            .unwrap_or(self.slowest.len());
        if slower < SLOWEST_CALLS {
            self.slowest.insert(slower, call);
            self.slowest.truncate(SLOWEST_CALLS);
        }
    }

    /// Lines skipped for any reason.
    pub fn skipped_lines(&self) -> u64 {
        self.skipped.values().map(|t| t.count).sum()
    }

    /// Events written, stacks not counted.
    pub fn converted_events(&self) -> u64 {
        self.events.values().sum()
    }

    /// True when the text gave nothing to analyse or summarise: no event of an analysed
    /// type, no stack, no function_graph or function tracer call.
    pub fn is_empty(&self) -> bool {
        self.converted_events() == 0
            && self.stacks == 0
            && self.calls == 0
            && self.function_calls == 0
    }

    /// Why a text gave nothing to analyse, in one line: what it looks like (`forms`, from the
    /// reader), the trace lines of events no analysis reads with their names, and every
    /// reason lines were skipped with its count.
    pub fn nothing_to_analyse(&self, forms: Forms) -> String {
        let mut parts = vec![if forms.is_empty() {
            format!("it does not look like trace text ({})", forms.describe())
        } else {
            format!("it looks like {}", forms.describe())
        }];
        if !self.unconverted.is_empty() {
            let total: u64 = self.unconverted.values().sum();
            let mut names: Vec<(&String, &u64)> = self.unconverted.iter().collect();
            names.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let mut listed: Vec<String> = names
                .iter()
                .take(8)
                .map(|(name, count)| format!("{name} x{count}"))
                .collect();
            if names.len() > 8 {
                listed.push(format!("{} more", names.len() - 8));
            }
            parts.push(format!(
                "{} of events vmscale does not analyse: {}",
                plural(total, "trace line"),
                listed.join(", ")
            ));
        }
        let skipped = self.skipped_lines();
        if skipped > 0 {
            let mut reasons: Vec<(&SkipReason, &SkipTally)> = self.skipped.iter().collect();
            reasons.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
            let listed: Vec<String> = reasons
                .iter()
                .map(|(reason, tally)| format!("{} {reason}", tally.count))
                .collect();
            parts.push(format!(
                "{} skipped: {}",
                plural(skipped, "line"),
                listed.join(", ")
            ));
        }
        if parts.len() == 1 {
            parts.push("it holds no event lines".to_string());
        }
        parts.join("; ")
    }

    /// What a reader of the findings must know about where they come from, one sentence
    /// each: the time resolution, what was skipped and why, what was adjusted, what was lost.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for clock in &self.clocks {
            out.push(match clock {
                TextClock::Absolute { resolution_ns } if *resolution_ns >= 1000 => format!(
                    "times come from ftrace text and resolve only {}: waits and gaps are rounded to it, and events printed with the same time keep their text order",
                    exact_duration(u64::from(*resolution_ns))
                ),
                TextClock::Absolute { resolution_ns } => format!(
                    "times come from ftrace text with {} resolution",
                    exact_duration(u64::from(*resolution_ns))
                ),
                TextClock::SinceStart => "the text is in the latency format: times are microseconds since the trace buffer started, not the trace clock, and resolve only 1 us".to_string(),
                TextClock::Counter => "the text's clock is a counter (times printed as bare integers): its ticks are read as nanoseconds, so durations are in ticks".to_string(),
            });
        }
        for (reason, tally) in &self.skipped {
            let lines: Vec<String> = tally.first_lines.iter().map(usize::to_string).collect();
            let more = if tally.count > tally.first_lines.len() as u64 {
                ", ..."
            } else {
                ""
            };
            out.push(format!(
                "{} skipped: {reason} ({} {}{more}; first: {:?})",
                plural(tally.count, "line"),
                noun_for(tally.count, "line"),
                lines.join(", "),
                tally.first_detail
            ));
        }
        if !self.unconverted.is_empty() {
            let total: u64 = self.unconverted.values().sum();
            let mut names: Vec<(&String, &u64)> = self.unconverted.iter().collect();
            names.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let listed: Vec<String> = names
                .iter()
                .take(8)
                .map(|(name, count)| format!("{name} x{count}"))
                .collect();
            out.push(format!(
                "{} of types no analysis reads were read but not analysed: {}{}",
                plural(total, "event"),
                listed.join(", "),
                if names.len() > 8 { ", ..." } else { "" }
            ));
        }
        for (cpu, events) in &self.lost {
            out.push(format!(
                "cpu{cpu} lost {events} trace events (the text's LOST EVENTS notes): waits and counts from the trace are lower bounds"
            ));
        }
        if self.reordered > 0 {
            out.push(format!(
                "{} had a time before the previous event of their CPU and were moved up to it (text from several pastes, or not in time order?)",
                plural(self.reordered, "event")
            ));
        }
        if self.frames_without_offset > 0 {
            out.push(format!(
                "{} stack frames were printed without offsets (options/sym-offset off): they read name+0x0",
                self.frames_without_offset
            ));
        }
        if self.dropped_frames > 0 {
            out.push(format!(
                "{} stack frames are missing: beyond {} per stack, or past the 8 of each stack that trace-cmd report -R prints",
                self.dropped_frames,
                crate::text::import::MAX_FRAMES
            ));
        }
        if self.symbols_dropped > 0 {
            out.push(format!(
                "{} symbol names beyond the first {} share one stand-in name",
                self.symbols_dropped,
                super::symbols::MAX_SYMBOLS
            ));
        }
        out
    }

    /// The function_graph calls, one line each: how many, then the slowest; and the function
    /// tracer's calls: how many, and the functions called most.
    pub fn call_notes(&self) -> Vec<String> {
        let mut out = self.function_notes();
        if self.calls == 0 {
            return out;
        }
        out.push(format!(
            "function_graph: {} with durations; the {} slowest follow",
            plural(self.calls, "call"),
            self.slowest.len()
        ));
        for (rank, call) in self.slowest.iter().enumerate() {
            let mut line = format!(
                "function_graph slowest #{}: {} took {} (line {}",
                rank + 1,
                call.name,
                exact_duration(call.duration_ns),
                call.line
            );
            if let Some(cpu) = call.cpu {
                line.push_str(&format!(", cpu {cpu}"));
            }
            line.push_str(&format!(", depth {}", call.depth));
            if let (Some(comm), Some(pid)) = (&call.comm, call.pid) {
                line.push_str(&format!(", task {comm}-{pid}"));
            }
            match call.start {
                Some(CallStart::Absolute(ns)) => line.push_str(&format!(
                    ", started at {}.{:06}",
                    ns / 1_000_000_000,
                    ns % 1_000_000_000 / 1000
                )),
                Some(CallStart::SinceStart(ns)) => line.push_str(&format!(
                    ", started {} after the trace began",
                    exact_duration(ns)
                )),
                None => {}
            }
            line.push(')');
            out.push(line);
        }
        out
    }
}

impl TextDirSummary {
    fn function_notes(&self) -> Vec<String> {
        if self.function_calls == 0 {
            return Vec::new();
        }
        let mut names: Vec<(&String, &u64)> = self.functions.iter().collect();
        names.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let top: Vec<String> = names
            .iter()
            .take(TOP_FUNCTIONS)
            .map(|(name, count)| format!("{name} x{count}"))
            .collect();
        vec![format!(
            "function tracer: {} of {} (no durations: the function tracer records entries only); most called: {}",
            plural(self.function_calls, "call"),
            plural(names.len() as u64, "function"),
            top.join(", ")
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipped_lines_keep_the_earliest_few() {
        let mut summary = TextDirSummary::default();
        for line in [9, 4, 7, 8, 6, 5, 30] {
            summary.skip(&Skipped {
                line,
                reason: SkipReason::Body,
                detail: format!("at {line}"),
            });
        }
        let tally = &summary.skipped[&SkipReason::Body];
        assert_eq!(
            (tally.count, tally.first_lines.as_slice()),
            (7, &[4, 5, 6, 7, 8][..])
        );
        assert_eq!(tally.first_detail, "at 4");
        assert_eq!(
            summary.warnings(),
            ["7 lines skipped: of an unknown event format (lines 4, 5, 6, 7, 8, ...; first: \"at 4\")"]
        );
    }

    #[test]
    fn nothing_to_analyse_names_every_reason_and_every_event() {
        let mut summary = TextDirSummary::default();
        for (line, reason) in [
            (1, SkipReason::NotTrace),
            (2, SkipReason::Body),
            (3, SkipReason::Body),
            (4, SkipReason::LongLine),
        ] {
            summary.skip(&Skipped {
                line,
                reason,
                detail: String::new(),
            });
        }
        summary.unconverted("kvm_pio");
        summary.unconverted("kvm_pio");
        summary.unconverted("kmalloc");
        assert_eq!(
            summary.nothing_to_analyse(Forms::default()),
            "it does not look like trace text (no line has the columns of ftrace or trace-cmd output); \
             3 trace lines of events vmscale does not analyse: kvm_pio x2, kmalloc x1; \
             4 lines skipped: 2 of an unknown event format, 1 not trace lines, 1 truncated (longer than 64 KiB)"
        );
        assert!(summary.is_empty());
        assert_eq!(
            TextDirSummary::default().nothing_to_analyse(Forms::default()),
            "it does not look like trace text (no line has the columns of ftrace or trace-cmd output); it holds no event lines"
        );
    }

    #[test]
    fn the_slowest_calls_are_kept_in_order() {
        let mut summary = TextDirSummary::default();
        for (line, ns) in [5u64, 50, 1, 70, 70, 3, 9, 11, 12, 13, 14, 2, 100]
            .iter()
            .enumerate()
        {
            summary.call(GraphCall {
                line,
                cpu: Some(0),
                pid: None,
                comm: None,
                name: format!("f{line}"),
                depth: 0,
                duration_ns: *ns,
                start: None,
            });
        }
        let kept: Vec<u64> = summary.slowest.iter().map(|c| c.duration_ns).collect();
        assert_eq!(kept, [100, 70, 70, 50, 14, 13, 12, 11, 9, 5]);
        assert_eq!(summary.calls, 13);
        assert_eq!(summary.call_notes().len(), 11);
    }
}
