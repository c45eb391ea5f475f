//! The trace excerpt ([`TimelineExcerpt`]) as an inline SVG swim-lane chart: one lane per
//! CPU with the task running there, then one lane per task with its scheduler state on top
//! and its lock waits and holds underneath. Every bar carries a `<title>`, so hovering
//! names the task, lock and duration without any script.
//!
//! Written as SVG directly rather than through plotters: a lane chart is rectangles and
//! text on a time axis, and plotters has no categorical lanes to offer for it.

use std::collections::BTreeMap;
use std::fmt::Write;

use vmscale_run::findings::{LockRole, TaskState, TimelineExcerpt};

use crate::render::html::escape;
use crate::units::duration;

const WIDTH: f64 = 1160.0;
/// Left of the plot: lane labels.
const LABEL_WIDTH: f64 = 190.0;
const RIGHT_MARGIN: f64 = 20.0;
const AXIS_HEIGHT: f64 = 44.0;
const CPU_LANE: f64 = 20.0;
const TASK_LANE: f64 = 36.0;
const GROUP_GAP: f64 = 14.0;
const LEGEND_HEIGHT: f64 = 30.0;
/// Bars narrower than this get no text inside.
const MIN_LABEL_WIDTH: f64 = 60.0;

const RUNNING: &str = "#2e7d32";
const RUNNABLE: &str = "#f9a825";
const ASLEEP: &str = "#b0bec5";
const WAIT: &str = "#c62828";
const HOLD: &str = "#6a1b9a";
/// Tasks in the CPU lanes: blues, teals, browns and pinks, apart from the state and lock
/// colours above so a task on a CPU never reads as a state.
const TASK_COLOURS: [&str; 8] = [
    "#4e79a7", "#76b7b2", "#9c755f", "#d37295", "#1f5f8b", "#499894", "#7f6a5a", "#b07aa1",
];

/// Ticks at 1, 2 or 5 times a power of ten, about eight over the span.
fn tick_step(span_ns: f64) -> f64 {
    let raw = (span_ns / 8.0).max(1.0);
    let decade = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * decade)
        .find(|&step| step >= raw)
        .unwrap_or(10.0 * decade)
}

/// The unit the axis reads in: us for windows under 2 ms, else ms.
fn unit(span_ns: f64) -> (&'static str, f64) {
    if span_ns < 2e6 {
        ("us", 1e3)
    } else {
        ("ms", 1e6)
    }
}

struct Plot {
    start: u64,
    span: f64,
    plot_width: f64,
}

impl Plot {
    fn x(&self, ts: u64) -> f64 {
        LABEL_WIDTH + (ts.saturating_sub(self.start) as f64 / self.span) * self.plot_width
    }

    /// A bar from `a` to `b` at least half a pixel wide, so short slices stay visible.
    fn bar(&self, a: u64, b: u64) -> (f64, f64) {
        let x = self.x(a);
        (x, (self.x(b) - x).max(0.5))
    }
}

/// The excerpt as SVG, or why it cannot be drawn.
pub(crate) fn timeline_svg(excerpt: &TimelineExcerpt) -> Result<String, String> {
    if excerpt.end_ns <= excerpt.start_ns {
        return Err("the excerpt's window is empty".into());
    }
    if excerpt.cpus.is_empty() && excerpt.tasks.is_empty() {
        return Err("no lanes: nothing ran or waited in the window".into());
    }
    let span = (excerpt.end_ns - excerpt.start_ns) as f64;
    let plot = Plot {
        start: excerpt.start_ns,
        span,
        plot_width: WIDTH - LABEL_WIDTH - RIGHT_MARGIN,
    };
    let height = AXIS_HEIGHT
        + excerpt.cpus.len() as f64 * CPU_LANE
        + GROUP_GAP
        + excerpt.tasks.len() as f64 * TASK_LANE
        + LEGEND_HEIGHT;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" width=\"{WIDTH}\" \
         height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" \
         font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>"
    );
    axis(&mut svg, &plot, height - LEGEND_HEIGHT);

    // Each task keeps one colour in the CPU lanes, by first appearance.
    let mut colours: BTreeMap<i32, usize> = BTreeMap::new();
    let mut names: BTreeMap<i32, &str> = excerpt
        .comms
        .iter()
        .map(|(&pid, comm)| (pid, comm.as_str()))
        .collect();
    names.extend(excerpt.tasks.iter().map(|t| (t.pid, t.comm.as_str())));
    let mut y = AXIS_HEIGHT;
    for lane in &excerpt.cpus {
        label(&mut svg, y + CPU_LANE / 2.0, &format!("CPU {}", lane.cpu));
        for slice in &lane.slices {
            let next = colours.len();
            let index = *colours.entry(slice.pid).or_insert(next);
            let (x, w) = plot.bar(slice.start_ns, slice.end_ns);
            let name = names.get(&slice.pid).copied().unwrap_or("");
            let who = if name.is_empty() {
                format!("pid {}", slice.pid)
            } else {
                format!("{name} {}", slice.pid)
            };
            let c = TASK_COLOURS[index % TASK_COLOURS.len()];
            let _ = writeln!(
                svg,
                "<rect class=\"run\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" \
                 fill=\"{c}\"><title>CPU {}: {} ran {}</title></rect>",
                y + 2.0,
                CPU_LANE - 4.0,
                lane.cpu,
                escape(&who),
                duration(slice.end_ns.saturating_sub(slice.start_ns))
            );
            inside_text(&mut svg, x, w, y + CPU_LANE / 2.0 + 4.0, &who);
        }
        y += CPU_LANE;
    }
    y += GROUP_GAP;
    for task in &excerpt.tasks {
        let who = format!("{} {}", task.comm, task.pid);
        label(&mut svg, y + TASK_LANE / 2.0, &who);
        for state in &task.states {
            let (fill, word) = match state.state {
                TaskState::Running => (RUNNING, "running"),
                TaskState::Runnable => (RUNNABLE, "runnable"),
                TaskState::Asleep => (ASLEEP, "asleep"),
            };
            let on = state
                .cpu
                .map(|c| format!(" on CPU {c}"))
                .unwrap_or_default();
            let (x, w) = plot.bar(state.start_ns, state.end_ns);
            let _ = writeln!(
                svg,
                "<rect class=\"state\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"12\" \
                 fill=\"{fill}\"><title>{}: {word}{on} for {}</title></rect>",
                y + 3.0,
                escape(&who),
                duration(state.end_ns.saturating_sub(state.start_ns))
            );
        }
        for lock in &task.locks {
            let (fill, word) = match lock.role {
                LockRole::Wait => (WAIT, "waits for"),
                LockRole::Hold => (HOLD, "holds"),
            };
            let since = if lock.start_known {
                ""
            } else {
                " (at least; taking it was not traced)"
            };
            let (x, w) = plot.bar(lock.start_ns, lock.end_ns);
            let _ = writeln!(
                svg,
                "<rect class=\"{}\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"8\" \
                 fill=\"{fill}\" fill-opacity=\"{}\"><title>{}: {word} {} for {}{since}</title></rect>",
                if lock.role == LockRole::Wait { "wait" } else { "hold" },
                // Waits and holds get rows of their own: a holder often waits for another
                // lock while it holds one.
                if lock.role == LockRole::Wait { y + 17.0 } else { y + 26.0 },
                if lock.start_known { "0.9" } else { "0.55" },
                escape(&who),
                escape(&lock.lock),
                duration(lock.end_ns.saturating_sub(lock.start_ns))
            );
        }
        y += TASK_LANE;
    }
    legend(&mut svg, height - LEGEND_HEIGHT + 8.0);
    svg.push_str("</svg>");
    Ok(svg)
}

fn axis(svg: &mut String, plot: &Plot, bottom: f64) {
    let (unit, per) = unit(plot.span);
    let step = tick_step(plot.span);
    let _ = writeln!(
        svg,
        "<text x=\"{LABEL_WIDTH}\" y=\"14\" font-size=\"12\">time since the window's start ({unit})</text>"
    );
    let mut t = 0.0;
    while t <= plot.span + 0.5 {
        let x = LABEL_WIDTH + t / plot.span * plot.plot_width;
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\" stroke=\"#e0e0e0\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#444\">{}</text>",
            AXIS_HEIGHT - 6.0,
            AXIS_HEIGHT - 10.0,
            trim(t / per)
        );
        t += step;
    }
}

/// A tick value without trailing zeros.
fn trim(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn label(svg: &mut String, y: f64, text: &str) {
    let shown: String = if text.chars().count() > 28 {
        text.chars().take(27).chain(['…']).collect()
    } else {
        text.to_string()
    };
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#1a1a1a\">{}</text>",
        LABEL_WIDTH - 8.0,
        y + 4.0,
        escape(&shown)
    );
}

/// Text inside a bar when it fits, clipped to about the bar's width.
fn inside_text(svg: &mut String, x: f64, width: f64, y: f64, text: &str) {
    if width < MIN_LABEL_WIDTH {
        return;
    }
    let fits = ((width - 6.0) / 6.5) as usize;
    let shown: String = text.chars().take(fits).collect();
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{y:.1}\" fill=\"#fff\" font-size=\"10\">{}</text>",
        x + 3.0,
        escape(&shown)
    );
}

fn legend(svg: &mut String, y: f64) {
    let items = [
        (RUNNING, "running"),
        (RUNNABLE, "runnable (waiting for a CPU)"),
        (ASLEEP, "asleep"),
        (WAIT, "waiting for a lock"),
        (HOLD, "holding a lock (pale: since at least)"),
    ];
    let mut x = LABEL_WIDTH;
    for (fill, text) in items {
        let _ = writeln!(
            svg,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"12\" height=\"10\" fill=\"{fill}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 16.0,
            y + 9.0,
            escape(text)
        );
        x += 24.0 + text.len() as f64 * 6.2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscale_run::findings::{CpuLane, LockSlice, RunSlice, StateSlice, TaskLane};

    fn excerpt() -> TimelineExcerpt {
        TimelineExcerpt {
            start_ns: 1_000_000,
            end_ns: 5_000_000,
            focus: "the longest wait on mutex in anon_pipe_write".into(),
            cpus: vec![CpuLane {
                cpu: 0,
                slices: vec![RunSlice {
                    start_ns: 1_000_000,
                    end_ns: 3_000_000,
                    pid: 7,
                }],
            }],
            tasks: vec![TaskLane {
                pid: 7,
                comm: "fault-<holder>".into(),
                states: vec![StateSlice {
                    start_ns: 1_000_000,
                    end_ns: 3_000_000,
                    state: TaskState::Asleep,
                    cpu: None,
                }],
                locks: vec![LockSlice {
                    start_ns: 2_000_000,
                    end_ns: 4_000_000,
                    role: LockRole::Hold,
                    lock: "mutex in anon_pipe_write".into(),
                    start_known: false,
                }],
            }],
            comms: BTreeMap::new(),
            truncated: false,
        }
    }

    #[test]
    fn bars_sit_where_their_times_say_and_names_are_escaped() {
        let svg = timeline_svg(&excerpt()).unwrap();
        // The hold starts at a quarter of the window and lasts half of it.
        let plot_width = WIDTH - LABEL_WIDTH - RIGHT_MARGIN;
        let x = LABEL_WIDTH + plot_width / 4.0;
        let w = plot_width / 2.0;
        assert!(
            svg.contains(&format!("class=\"hold\" x=\"{x:.1}\""))
                && svg.contains(&format!("width=\"{w:.1}\" height=\"8\"")),
            "{svg}"
        );
        assert!(svg.contains(
            "fault-&lt;holder&gt; 7: holds mutex in anon_pipe_write for 2.0 ms (at least"
        ));
        assert!(!svg.contains("fault-<holder>"));
        // A 4 ms window reads in ms, ticks every 0.5 ms.
        assert!(svg.contains("time since the window's start (ms)"));
        assert!(svg.contains(">0.5</text>"), "{svg}");
    }

    #[test]
    fn an_empty_window_says_why() {
        let mut empty = excerpt();
        empty.end_ns = empty.start_ns;
        assert!(timeline_svg(&empty).is_err());
    }
}
