//! A mutex held across a sleep, built on the real kernel and explained from its trace.
//!
//! One thread write()s to a pipe from a page registered with userfaultfd and not populated:
//! anon_pipe_write takes pipe->mutex, faults in copy_page_from_iter and sleeps in
//! handle_userfault with the mutex held. Other writers of the same pipe queue on the mutex.
//! After a known delay the test resolves the fault, everyone completes, and the analysis must
//! name the lock, the faulting thread as the holder, where it slept, and the waiters' time.
//! Needs root, tracefs and userfaultfd; fails (never skips) without.

use std::time::Duration;

#[path = "support/early_stop.rs"]
mod early_stop;
#[path = "support/userfault.rs"]
mod userfault;

use vmscale_run::findings::{HolderActivity, LockRole, TaskState};
use vmscale_trace::record::recorder::{default_events, RecordConfig, Recording};
use vmscale_trace::record::tracefs;

/// How long the holder sleeps in the fault with the waiters queued.
const HOLD: Duration = Duration::from_millis(200);
const WAITERS: usize = 3;

fn within(found: u64, expected: u64, fraction: f64) -> bool {
    (found as f64 - expected as f64).abs() <= expected as f64 * fraction
}

#[test]
fn a_pipe_mutex_held_across_a_userfault_names_its_holder_and_where_it_slept() {
    let mount =
        tracefs::mount_point().unwrap_or_else(|e| panic!("this test needs tracefs as root: {e}"));
    let dir =
        std::env::temp_dir().join(format!("vmscale-held-across-sleep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = RecordConfig {
        events: default_events(),
        stack_events: vec!["lock:contention_begin".into(), "sched:sched_switch".into()],
        ..RecordConfig::default()
    };
    let mut recording = Recording::prepare(&mount, &dir, config).unwrap();
    recording.set_on(true).unwrap();
    let outcome = userfault::pipe_writers_behind_a_userfault(HOLD, WAITERS);
    recording.set_on(false).unwrap();
    recording.finish().unwrap();
    let analysis = vmscale_analysis::analyse(&dir);
    let early = analysis
        .as_ref()
        .map_err(|e| e.to_string())
        .and_then(|analysis| early_stop::check(&dir, analysis));
    std::fs::remove_dir_all(&dir).unwrap();
    let analysis = analysis.unwrap();
    // The timeline pass stops once its window is complete. Here holds outlive short
    // windows (the holder keeps the mutex for the whole fault), so stopping at the window's
    // end would lose them. The report's own window may run to the trace's end: the trace
    // stops soon after the longest wait.
    let early = early.unwrap();
    eprintln!("early stop: {early:?}");
    assert!(early.windows_stopped_early >= 1, "{early:?}");
    assert!(early.holds_released_after_the_window >= 1, "{early:?}");

    let measured: u64 = outcome
        .waiter_waits
        .iter()
        .map(|d| d.as_nanos() as u64)
        .sum();
    let lock = analysis
        .holders
        .iter()
        .find(|l| {
            l.holders.iter().any(|h| h.pid == outcome.holder_tid)
                && l.kind == vmscale_run::findings::LockKind::Mutex
        })
        .unwrap_or_else(|| {
            panic!(
                "no mutex held by {}: {:#?}",
                outcome.holder_tid, analysis.holders
            )
        });
    eprintln!(
        "measured: holder {} fault held {:?}, waiters {:?} waited {:?} ({} ns in total)\nfound: {lock:#?}",
        outcome.holder_tid, outcome.fault_held, outcome.waiter_tids, outcome.waiter_waits, measured
    );

    assert!(lock.name.contains("pipe_write"), "{}", lock.name);
    // The writers waited; the reader may also have waited briefly for the mutex while the
    // writers took turns, which is why the lock can list one more waiter.
    let writers: Vec<&vmscale_run::Waiter> = lock
        .waiters
        .iter()
        .filter(|w| outcome.waiter_tids.contains(&w.pid))
        .collect();
    assert_eq!(writers.len(), WAITERS, "{:?}", lock.waiters);
    assert!(writers.iter().all(|w| w.comm.starts_with("pipe-writer-")));
    let traced: u64 = writers.iter().map(|w| w.total_wait_ns).sum();
    assert!(
        within(traced, measured, 0.10),
        "writers' traced wait {traced} ns vs measured {measured} ns"
    );
    assert!(
        within(lock.total_wait_ns, measured, 0.10),
        "lock wait {} ns vs measured {measured} ns",
        lock.total_wait_ns
    );

    // Most of the wait was spent while the holder slept in the fault.
    let top = &lock.activity[0];
    assert_eq!(top.activity, HolderActivity::Asleep, "{:?}", lock.activity);
    assert_eq!(top.detail, "handle_userfault");
    assert!(
        within(top.wait_ns, measured, 0.10),
        "{} vs {measured}",
        top.wait_ns
    );

    let sleep = &lock.held_across_sleep[0];
    assert_eq!(sleep.holder_pid, outcome.holder_tid);
    assert_eq!(sleep.holder_comm, "fault-holder");
    assert_eq!(sleep.function, "handle_userfault");
    assert_eq!(sleep.waiters, WAITERS as u64);
    assert!(
        within(sleep.waiter_wait_ns, measured, 0.10),
        "{} vs {measured}",
        sleep.waiter_wait_ns
    );
    let held = outcome.fault_held.as_nanos() as u64;
    assert!(
        within(sleep.slept_ns, held, 0.10),
        "slept {} ns vs fault held {held} ns",
        sleep.slept_ns
    );
    assert!(
        sleep.stack.iter().any(|f| f.contains("pipe_write")),
        "{:?}",
        sleep.stack
    );

    // The timeline excerpt centres on the longest writer's wait and shows the chain: the
    // holder holding the mutex across its sleep in the fault, the writers waiting.
    let timeline = analysis.timeline.as_ref().expect("a timeline excerpt");
    eprintln!(
        "timeline: {} ({} us), {} cpu lanes, tasks {:?}",
        timeline.focus,
        (timeline.end_ns - timeline.start_ns) / 1_000,
        timeline.cpus.len(),
        timeline
            .tasks
            .iter()
            .map(|t| (t.pid, t.comm.as_str(), t.states.len(), t.locks.len()))
            .collect::<Vec<_>>()
    );
    assert!(timeline.focus.contains("pipe_write"), "{}", timeline.focus);
    let lane = |pid: i32| timeline.tasks.iter().find(|t| t.pid == pid);
    let holder = lane(outcome.holder_tid).expect("the holder has a lane");
    let hold = holder
        .locks
        .iter()
        .find(|l| l.role == LockRole::Hold && l.lock == lock.name)
        .expect("the holder's hold of the mutex");
    // It held the mutex across most of the fault, and slept in it meanwhile.
    assert!(
        hold.end_ns - hold.start_ns >= held * 8 / 10,
        "hold {} ns vs fault {held} ns",
        hold.end_ns - hold.start_ns
    );
    let asleep: u64 = holder
        .states
        .iter()
        .filter(|s| s.state == TaskState::Asleep)
        .map(|s| {
            s.end_ns
                .min(hold.end_ns)
                .saturating_sub(s.start_ns.max(hold.start_ns))
        })
        .sum();
    assert!(
        asleep >= (hold.end_ns - hold.start_ns) * 8 / 10,
        "asleep {asleep} ns of a {} ns hold",
        hold.end_ns - hold.start_ns
    );
    let waiting_writers = outcome
        .waiter_tids
        .iter()
        .filter(|&&tid| {
            lane(tid).is_some_and(|t| {
                t.locks
                    .iter()
                    .any(|l| l.role == LockRole::Wait && l.lock == lock.name)
            })
        })
        .count();
    assert_eq!(waiting_writers, WAITERS);
    // Slices are inside the window and each lane's states do not overlap.
    for t in &timeline.tasks {
        for pair in t.states.windows(2) {
            assert!(pair[0].end_ns <= pair[1].start_ns, "{t:?}");
        }
        assert!(t
            .states
            .iter()
            .all(|s| s.start_ns >= timeline.start_ns && s.end_ns <= timeline.end_ns));
    }
    assert!(!timeline.cpus.is_empty());
}
