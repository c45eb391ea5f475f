//! The timeline pass stops once its window is complete; this checks that stopping loses
//! nothing, by comparing with the same pass fed the whole trace.

use std::collections::HashMap;
use std::path::Path;

use vmscale_analysis::excerpt::{ExcerptPass, Focus};
use vmscale_analysis::TraceAnalysis;
use vmscale_run::findings::{LockRole, TimelineExcerpt};
use vmscale_trace::Decoder;

#[derive(Debug, Default)]
pub struct EarlyStop {
    /// The report's own excerpt came from a pass that stopped before the last event.
    pub report_stopped_early: bool,
    /// Windows tried, and those whose pass could stop before the last event.
    pub windows: u32,
    pub windows_stopped_early: u32,
    /// Holds in early-stopped windows that were released after their window ended: the
    /// holds a pass stopping at the window's end would have lost.
    pub holds_released_after_the_window: u32,
}

/// Compares, for the report's window and for two windows around every lock's longest wait
/// (the whole wait, and a short one at its start, where queued waiters still have holds to
/// come), the excerpt of a pass stopped where it said it was done with the excerpt of the
/// whole trace. An error names the first difference.
pub fn check(dir: &Path, analysis: &TraceAnalysis) -> Result<EarlyStop, String> {
    let decoder = Decoder::open(dir).map_err(|e| e.to_string())?;
    let names: HashMap<u64, String> = analysis
        .contention
        .locks
        .iter()
        .map(|l| (l.lock_addr, l.name.clone()))
        .collect();
    let json = |t: &TimelineExcerpt| serde_json::to_string(t).unwrap();
    let mut early = EarlyStop::default();

    let focus = vmscale_analysis::timeline_focus(&analysis.contention, &analysis.holders)
        .ok_or("a contended trace has a focus")?;
    let (whole, done_after, seen) = whole_trace(&decoder, &focus, &names)?;
    early.report_stopped_early = done_after.is_some_and(|after| after < seen);
    let reported = analysis
        .timeline
        .as_ref()
        .ok_or("the analysis has no excerpt")?;
    if json(reported) != json(&whole) {
        return Err(format!(
            "the report's excerpt (stopped after {done_after:?} of {seen} events) differs \
             from the whole trace's"
        ));
    }

    for (&lock, longest) in &analysis.contention.longest_waits {
        for end in [longest.end, longest.start + 1] {
            let focus = Focus {
                lock,
                lock_name: names.get(&lock).cloned().unwrap_or_default(),
                pid: longest.pid,
                comm: String::new(),
                start: longest.start,
                end,
            };
            early.windows += 1;
            let (whole, done_after, seen) = whole_trace(&decoder, &focus, &names)?;
            let Some(after) = done_after.filter(|&after| after < seen) else {
                continue;
            };
            early.windows_stopped_early += 1;
            let stopped = stopped_after(&decoder, &focus, &names, after)?;
            if json(&stopped) != json(&whole) {
                return Err(format!(
                    "lock {lock:#x}: stopping after {after} of {seen} events changed the excerpt"
                ));
            }
            let (_, window_end) = focus.window();
            early.holds_released_after_the_window += whole
                .tasks
                .iter()
                .flat_map(|t| &t.locks)
                .filter(|l| l.role == LockRole::Hold && l.end_ns == window_end)
                .count() as u32;
        }
    }
    Ok(early)
}

/// The excerpt around `focus` from every event, and after how many events the pass first
/// said it was done.
fn whole_trace(
    decoder: &Decoder,
    focus: &Focus,
    names: &HashMap<u64, String>,
) -> Result<(TimelineExcerpt, Option<u64>, u64), String> {
    let mut pass = ExcerptPass::new(focus.clone(), names.clone());
    let (mut seen, mut done_after) = (0u64, None);
    decoder
        .for_each(|event| {
            pass.observe(&event, &event.kind());
            seen += 1;
            if done_after.is_none() && pass.done() {
                done_after = Some(seen);
            }
        })
        .map_err(|e| e.to_string())?;
    Ok((pass.finish(), done_after, seen))
}

fn stopped_after(
    decoder: &Decoder,
    focus: &Focus,
    names: &HashMap<u64, String>,
    after: u64,
) -> Result<TimelineExcerpt, String> {
    let mut pass = ExcerptPass::new(focus.clone(), names.clone());
    let mut events = decoder.events().map_err(|e| e.to_string())?;
    let mut fed = 0;
    while fed < after {
        match events.next_event() {
            Some(Ok(event)) => {
                pass.observe(&event, &event.kind());
                fed += 1;
            }
            Some(Err(e)) if e.is_fatal() => return Err(e.to_string()),
            Some(Err(_)) => {}
            None => break,
        }
    }
    Ok(pass.finish())
}
