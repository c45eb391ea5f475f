//! The contention pass on a trace recorded from this kernel (the trace crate's fixture),
//! checked against an independent pairing of the kernel's own text rendering of the same
//! buffer (expected.txt, microsecond timestamps).

use std::collections::HashMap;
use std::path::PathBuf;

#[path = "support/early_stop.rs"]
mod early_stop;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../trace/tests/fixtures/contention")
}

/// lock address -> (completed waits, total wait in us) from the text, pairing each task's
/// contention_begin with its next contention_end.
fn pair_from_text(text: &str) -> HashMap<u64, (u64, f64)> {
    let mut open: HashMap<u32, (u64, f64)> = HashMap::new();
    let mut locks: HashMap<u64, (u64, f64)> = HashMap::new();
    for line in text.lines() {
        let Some((head, rest)) = line.split_once(": contention_") else {
            continue;
        };
        // "        comm-PID   [CPU] flags  SECONDS.USEC"
        let mut fields = head.split_whitespace().rev();
        let seconds: f64 = fields.next().unwrap().parse().unwrap();
        let task = head.split('[').next().unwrap().trim();
        let pid: u32 = task.rsplit('-').next().unwrap().parse().unwrap();
        let (kind, args) = rest.split_once(": ").unwrap();
        let lock = u64::from_str_radix(args.split_whitespace().next().unwrap(), 16).unwrap();
        match kind {
            // A second begin on the same lock continues the same wait.
            "begin" => {
                open.entry(pid)
                    .and_modify(|w| {
                        if w.0 != lock {
                            *w = (lock, seconds)
                        }
                    })
                    .or_insert((lock, seconds));
            }
            "end" => {
                if let Some((l, start)) = open.remove(&pid) {
                    if l == lock {
                        let e = locks.entry(lock).or_default();
                        e.0 += 1;
                        e.1 += (seconds - start) * 1e6;
                    } else {
                        open.insert(pid, (l, start));
                    }
                }
            }
            _ => {}
        }
    }
    locks
}

#[test]
fn waits_match_an_independent_pairing_of_the_kernel_text() {
    let analysis = vmscale_analysis::analyse(&fixture()).unwrap();
    let expected =
        pair_from_text(&std::fs::read_to_string(fixture().join("expected.txt")).unwrap());
    assert!(!expected.is_empty(), "fixture has no completed waits");
    let found: HashMap<u64, &vmscale_run::LockContention> = analysis
        .contention
        .locks
        .iter()
        .map(|l| (l.lock_addr, l))
        .collect();
    for (lock, (count, total_us)) in &expected {
        let l = found
            .get(lock)
            .unwrap_or_else(|| panic!("lock {lock:#x} missing from the analysis"));
        let waits = l.waits.as_ref().unwrap();
        assert_eq!(waits.n, *count, "{lock:#x}: wait count");
        // Text timestamps are rounded to 1 us: allow 1 us per wait.
        let total = l.total_wait_ns as f64 / 1e3;
        assert!(
            (total - total_us).abs() <= *count as f64 + 0.5,
            "{lock:#x}: total {total} us vs {total_us} us"
        );
    }
    let completed: u64 = analysis
        .contention
        .locks
        .iter()
        .filter_map(|l| l.waits.as_ref())
        .map(|w| w.n)
        .sum();
    assert_eq!(completed, expected.values().map(|v| v.0).sum::<u64>());
}

#[test]
fn locks_are_named_by_stack_and_stacks_cost_is_measured() {
    let analysis = vmscale_analysis::analyse(&fixture()).unwrap();
    let worst = &analysis.contention.locks[0];
    // This kernel exports no data symbols, so names come from the waiting stacks: the
    // kernel's name where the lock is a well-known one, and always where it was waited on.
    for lock in &analysis.contention.locks {
        let frame = vmscale_analysis::naming::distinctive_frame(&lock.stacks[0].frames).unwrap();
        assert!(lock.name.contains(&format!("in {frame}")), "{}", lock.name);
    }
    // The worst wait of this trace is on a CPU's runqueue lock, taken in __schedule.
    assert!(
        worst.name.starts_with("rq->__lock (in __schedule)"),
        "{}",
        worst.name
    );
    assert!(!worst.stacks.is_empty());
    assert!(
        worst.stacks[0].frames[0].starts_with("trace_event_raw_event_contention_begin"),
        "{:?}",
        worst.stacks[0].frames
    );
    let cost = analysis
        .contention
        .stack_cost
        .expect("stacks were recorded");
    assert!(cost.n > 0 && cost.p50_ns > 0);
    assert_eq!(analysis.corrupt_pages, 0);
}

#[test]
fn the_timeline_excerpt_centres_on_the_longest_wait_and_its_lanes_are_consistent() {
    use vmscale_run::findings::LockRole;
    let analysis = vmscale_analysis::analyse(&fixture()).unwrap();
    let timeline = analysis.timeline.expect("a contended trace has an excerpt");
    let top = vmscale_analysis::timeline_focus(&analysis.contention, &analysis.holders)
        .expect("a contended trace has a focus")
        .lock_name;
    assert!(timeline.focus.contains(&top), "{} vs {top}", timeline.focus);
    let lock = analysis
        .contention
        .locks
        .iter()
        .find(|l| l.name == top)
        .unwrap();
    let longest = lock.waits.as_ref().unwrap().max_ns;
    // The focused waiter's lane comes first and holds that very wait, whole.
    let first = &timeline.tasks[0];
    let wait = first
        .locks
        .iter()
        .filter(|l| l.role == LockRole::Wait && l.lock == top)
        .map(|l| l.end_ns - l.start_ns)
        .max()
        .expect("the focused wait");
    assert_eq!(wait, longest, "{first:?}");
    assert!(timeline.focus.contains(&first.pid.to_string()));

    let inside = |a: u64, b: u64| a < b && a >= timeline.start_ns && b <= timeline.end_ns;
    // A CPU runs one task at a time, and a task runs on one CPU at a time.
    let mut runs: Vec<(i32, u64, u64)> = Vec::new();
    for lane in &timeline.cpus {
        for pair in lane.slices.windows(2) {
            assert!(pair[0].end_ns <= pair[1].start_ns, "cpu {}", lane.cpu);
        }
        for s in &lane.slices {
            assert!(inside(s.start_ns, s.end_ns));
            runs.push((s.pid, s.start_ns, s.end_ns));
        }
    }
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            assert!(
                a.0 != b.0 || a.2 <= b.1 || b.2 <= a.1,
                "pid {} on two CPUs at once: {a:?} {b:?}",
                a.0
            );
        }
    }
    for task in &timeline.tasks {
        for pair in task.states.windows(2) {
            assert!(pair[0].end_ns <= pair[1].start_ns, "{task:?}");
        }
        assert!(task.states.iter().all(|s| inside(s.start_ns, s.end_ns)));
        assert!(task.locks.iter().all(|l| inside(l.start_ns, l.end_ns)));
        assert!(!task.locks.is_empty(), "a lane without a wait or hold");
    }
}

#[test]
fn the_timeline_pass_stops_early_and_loses_nothing_by_it() {
    let analysis = vmscale_analysis::analyse(&fixture()).unwrap();
    let early = early_stop::check(&fixture(), &analysis).unwrap();
    assert!(early.report_stopped_early, "{early:?}");
    assert!(early.windows_stopped_early >= 10, "{early:?}");
}
