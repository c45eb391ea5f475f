//! The headline a latency tracer prints above its trace: which tracer, the worst latency it
//! caught, on which CPU, in which task, and where it started and ended.
//!
//! `print_trace_header` (kernel/trace/trace.c) writes it as `#` lines when the tracer keeps
//! a maximum latency (irqsoff, preemptoff, preemptirqsoff, wakeup, wakeup_rt, wakeup_dl):
//!
//! ```text
//! # tracer: irqsoff
//! # irqsoff latency trace v1.1.5 on 3.8.0-test+
//! # latency: 16 us, #4/4, CPU#0 | (M:preempt VP:0, KP:0, SP:0 HP:0 #P:4)
//! #    | task: swapper/0-0 (uid:0 nice:0 policy:0 rt_prio:0)
//! #  => started at: run_timer_softirq
//! #  => ended at:   run_timer_softirq
//! ```
//!
//! Only the tracers that keep a maximum latency make a headline: with `latency-format` on,
//! the kernel prints the same header for any tracer (the nop tracer's says `latency: 0 us`),
//! and its number then means nothing.

/// One latency tracer's headline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LatencyHeadline {
    /// The text line the header starts on.
    pub line: usize,
    pub tracer: String,
    pub kernel: Option<String>,
    pub latency_us: u64,
    pub cpu: Option<u32>,
    /// `comm-pid`, as printed.
    pub task: Option<String>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
}

impl LatencyHeadline {
    /// One sentence: "irqsoff: the worst latency was 16 us, on CPU 0, in swapper/0-0, from
    /// run_timer_softirq to run_timer_softirq (kernel 3.8.0-test+)".
    pub fn describe(&self) -> String {
        let mut out = format!(
            "{}: the worst latency was {} us",
            self.tracer, self.latency_us
        );
        if let Some(cpu) = self.cpu {
            out.push_str(&format!(", on CPU {cpu}"));
        }
        if let Some(task) = &self.task {
            out.push_str(&format!(", in {task}"));
        }
        match (&self.started_at, &self.ended_at) {
            (Some(start), Some(end)) => out.push_str(&format!(", from {start} to {end}")),
            (Some(start), None) => out.push_str(&format!(", from {start}")),
            (None, Some(end)) => out.push_str(&format!(", to {end}")),
            (None, None) => {}
        }
        if let Some(kernel) = &self.kernel {
            out.push_str(&format!(" (kernel {kernel})"));
        }
        out
    }
}

/// Reads headlines out of `#` lines, fed one at a time with the `#` still on.
#[derive(Debug, Default)]
pub(crate) struct HeadlineReader {
    current: Option<LatencyHeadline>,
    /// The current header had its `latency:` line.
    have_latency: bool,
    done: Vec<LatencyHeadline>,
}

/// The tracers that record their worst latency and the trace that shows it
/// (kernel/trace/trace_irqsoff.c, trace_sched_wakeup.c).
const LATENCY_TRACERS: &[&str] = &[
    "irqsoff",
    "preemptoff",
    "preemptirqsoff",
    "wakeup",
    "wakeup_rt",
    "wakeup_dl",
];

/// Headlines kept per text; more are dropped (a text of thousands of pasted headers says
/// no more with each).
const MAX_HEADLINES: usize = 16;

impl HeadlineReader {
    /// A `#` line of the text (trimmed), at `number`.
    pub(crate) fn comment(&mut self, number: usize, line: &str) {
        let Some(body) = line.strip_prefix('#') else {
            return;
        };
        let body = body.trim();
        if let Some(tracer) = body.strip_prefix("tracer:") {
            self.finish();
            if !LATENCY_TRACERS.contains(&tracer.trim()) {
                return;
            }
            self.current = Some(LatencyHeadline {
                line: number,
                tracer: tracer.trim().to_string(),
                ..LatencyHeadline::default()
            });
            return;
        }
        let Some(current) = self.current.as_mut() else {
            return;
        };
        let text = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        if let Some(rest) = body.strip_prefix("latency:") {
            // "16 us, #4/4, CPU#0 | (M:preempt ...)"
            let latency = rest
                .split(',')
                .next()
                .and_then(|p| p.trim().strip_suffix("us"))
                .and_then(|n| n.trim().parse().ok());
            let Some(latency) = latency else {
                return;
            };
            current.latency_us = latency;
            current.cpu = rest.split_once("CPU#").and_then(|(_, after)| {
                let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            });
            self.have_latency = true;
        } else if let Some(rest) = body.strip_prefix("| task:") {
            // "swapper/0-0 (uid:0 nice:0 policy:0 rt_prio:0)"
            current.task = text(rest.split(" (").next().unwrap_or(rest));
        } else if let Some(rest) = body.strip_prefix("=> started at:") {
            current.started_at = text(rest);
        } else if let Some(rest) = body.strip_prefix("=> ended at:") {
            current.ended_at = text(rest);
        } else if let Some((_, kernel)) = body
            .split_once(" latency trace v")
            .and_then(|(_, after)| after.split_once(" on "))
        {
            current.kernel = text(kernel);
        }
    }

    fn finish(&mut self) {
        let current = self.current.take();
        if std::mem::take(&mut self.have_latency) && self.done.len() < MAX_HEADLINES {
            self.done.extend(current);
        }
    }

    /// Every headline read, in text order; the header being read counts once it has its
    /// latency.
    pub(crate) fn headlines(&self) -> Vec<LatencyHeadline> {
        let mut out = self.done.clone();
        if self.have_latency && out.len() < MAX_HEADLINES {
            out.extend(self.current.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<LatencyHeadline> {
        let mut reader = HeadlineReader::default();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.starts_with('#') {
                reader.comment(index + 1, line);
            }
        }
        reader.headlines()
    }

    #[test]
    fn a_latency_tracers_header_gives_its_headline() {
        // From the kernel's Documentation/trace/ftrace.rst (irqsoff).
        let found = read(
            "# tracer: irqsoff\n#\n# irqsoff latency trace v1.1.5 on 3.8.0-test+\n\
             # latency: 16 us, #4/4, CPU#0 | (M:preempt VP:0, KP:0, SP:0 HP:0 #P:4)\n\
             #    -----------------\n#    | task: swapper/0-0 (uid:0 nice:0 policy:0 rt_prio:0)\n\
             #  => started at: run_timer_softirq\n#  => ended at:   run_timer_softirq\n",
        );
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].describe(),
            "irqsoff: the worst latency was 16 us, on CPU 0, in swapper/0-0, from \
             run_timer_softirq to run_timer_softirq (kernel 3.8.0-test+)"
        );
        assert_eq!(found[0].line, 1);
    }

    #[test]
    fn headers_without_a_latency_are_no_headline() {
        // The nop and function tracers print a header with no latency line.
        assert!(
            read("# tracer: nop\n#\n# entries-in-buffer/entries-written: 2/2   #P:8\n").is_empty()
        );
        assert!(read("# tracer: function\n# latency: many us\n").is_empty());
        // The kernel's latency format prints `latency: 0 us` for any tracer.
        assert!(
            read("# tracer: nop\n# latency: 0 us, #271/271, CPU#0 | (M:PREEMPT(none))\n")
                .is_empty()
        );
        assert!(read("# tracer: irqsoff\n# latency: many us\n").is_empty());
        // Damaged or partial lines read as far as they go, never panic.
        let found =
            read("# tracer: wakeup_rt\n# latency: 0 us, CPU#\n#    | task:\n# => started at:\n");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].describe(), "wakeup_rt: the worst latency was 0 us");
    }

    #[test]
    fn every_header_of_a_text_counts_up_to_a_limit() {
        let one = "# tracer: preemptoff\n# latency: 46 us, #4/4, CPU#1 | (M:preempt)\n";
        assert_eq!(read(&one.repeat(3)).len(), 3);
        assert_eq!(read(&one.repeat(100)).len(), MAX_HEADLINES);
    }
}
