//! The timeline pass stops once nothing later can change its window. A hold is only learnt
//! when it is released, so the pass must go on while a hold that overlaps the window may
//! still be released. This builds, as ftrace text turned into a trace directory, the case
//! where the only thing left is a holder that took the lock from a contended wait inside
//! the window: every waiter queued in the window has given up by the time the holder
//! finally wakes the next one.

#[path = "support/text_trace.rs"]
mod text_trace;

use text_trace::{line, ns, TextTraceDir};
use vmscale_analysis::excerpt::{ExcerptPass, Focus};
use vmscale_run::findings::{LockRole, TimelineExcerpt};

const LOCK: u64 = 0xffff_8881_0000_1000;

#[test]
fn a_hold_taken_in_the_window_is_kept_until_its_release() {
    let lock = format!("{LOCK:x}");
    let mutex = format!("{lock} (flags=MUTEX)");
    let text = [
        // W2 queues; H queues behind it and takes the lock at 55 µs while W2 still waits.
        line("w2", 102, 1, 20, "contention_begin", &mutex),
        line("h", 101, 0, 30, "contention_begin", &mutex),
        line(
            "h",
            101,
            0,
            55,
            "contention_end",
            &format!("{lock} (ret=0)"),
        ),
        // Long after the window W3 queues, W2 gives up, and H at last wakes W3.
        line("w3", 103, 1, 1150, "contention_begin", &mutex),
        line(
            "w2",
            102,
            1,
            1160,
            "contention_end",
            &format!("{lock} (ret=-4)"),
        ),
        line(
            "h",
            101,
            0,
            1200,
            "sched_waking",
            "comm=w3 pid=103 prio=120 target_cpu=001",
        ),
        line(
            "w3",
            103,
            1,
            1201,
            "contention_end",
            &format!("{lock} (ret=0)"),
        ),
        line(
            "w2",
            102,
            1,
            2000,
            "sched_waking",
            "comm=h pid=101 prio=120 target_cpu=000",
        ),
    ]
    .concat();
    let dir = TextTraceDir::new("early-stop", &text);
    let decoder = dir.decoder();

    // H's own wait, 30 to 55 µs: the window runs to 155 µs.
    let focus = Focus {
        lock: LOCK,
        lock_name: "the lock".into(),
        pid: 101,
        comm: "h".into(),
        start: ns(30),
        end: ns(55),
    };
    assert_eq!(focus.window().1, ns(155));
    let mut whole = ExcerptPass::new(focus.clone(), [(LOCK, "the lock".to_string())]);
    let mut events = Vec::new();
    let mut done_after = None;
    decoder
        .for_each(|event| {
            whole.observe(&event, &event.kind());
            events.push(event.ts());
            if done_after.is_none() && whole.done() {
                done_after = Some(events.len());
            }
        })
        .unwrap();
    assert_eq!(events.len(), 8);
    let whole = whole.finish();
    let holds: Vec<_> = whole
        .tasks
        .iter()
        .filter(|t| t.pid == 101)
        .flat_map(|t| &t.locks)
        .filter(|l| l.role == LockRole::Hold)
        .collect();
    // The hold from 55 µs to its release at 1200 µs, clipped to the window.
    assert_eq!(holds.len(), 1, "{whole:?}");
    assert_eq!((holds[0].start_ns, holds[0].end_ns), (ns(55), ns(155)));
    // The pass may stop only after the release (the 6th event), and does before the last.
    let done_after = done_after.expect("the pass says it is done");
    assert!(
        (6..8).contains(&done_after),
        "done after {done_after} events"
    );

    let mut stopped = ExcerptPass::new(focus, [(LOCK, "the lock".to_string())]);
    let mut fed = 0;
    let mut stream = decoder.events().unwrap();
    while let Some(event) = stream.next_event() {
        let event = event.unwrap();
        stopped.observe(&event, &event.kind());
        fed += 1;
        if stopped.done() {
            break;
        }
    }
    assert_eq!(fed, done_after);
    let json = |t: &TimelineExcerpt| serde_json::to_string(t).unwrap();
    assert_eq!(json(&stopped.finish()), json(&whole));
}
