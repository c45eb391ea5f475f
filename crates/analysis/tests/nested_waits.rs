//! A waiter queued on a mutex goes on contending for spinlocks inside the slow path (the
//! runqueue lock in schedule(), the mutex's wait_lock), and those waits trace their own
//! begin and end inside the mutex wait. Under load that happens often; the inner begin
//! used to replace the mutex wait, so its end matched nothing: the wait, and the holder
//! that released it, were lost. held_across_sleep failed with "no mutex held by" the
//! faulting holder this way.

#[path = "support/text_trace.rs"]
mod text_trace;

use text_trace::{line, TextTraceDir};

const MUTEX: u64 = 0xffff_8881_042a_0780;
const RQ_LOCK: u64 = 0xffff_8886_27d2_ba80;

#[test]
fn a_spinlock_wait_inside_a_mutex_wait_leaves_the_mutex_wait_whole() {
    let (mutex, rq) = (format!("{MUTEX:x}"), format!("{RQ_LOCK:x}"));
    let (holder, waiter) = (("holder", 101), ("waiter", 102));
    let text = [
        line(
            waiter.0,
            waiter.1,
            1,
            10,
            "contention_begin",
            &format!("{mutex} (flags=SPIN|MUTEX)"),
        ),
        line(
            waiter.0,
            waiter.1,
            1,
            12,
            "contention_begin",
            &format!("{mutex} (flags=MUTEX)"),
        ),
        line(
            waiter.0,
            waiter.1,
            1,
            14,
            "contention_begin",
            &format!("{rq} (flags=SPIN)"),
        ),
        line(
            waiter.0,
            waiter.1,
            1,
            18,
            "contention_end",
            &format!("{rq} (ret=0)"),
        ),
        line(
            waiter.0,
            waiter.1,
            1,
            20,
            "sched_switch",
            "prev_comm=waiter prev_pid=102 prev_prio=120 prev_state=D ==> next_comm=swapper/1 \
             next_pid=0 next_prio=120",
        ),
        // The holder releases the mutex by waking the waiter.
        line(
            holder.0,
            holder.1,
            0,
            1000,
            "sched_waking",
            "comm=waiter pid=102 prio=120 target_cpu=001",
        ),
        line(
            "swapper/1",
            0,
            1,
            1005,
            "sched_switch",
            "prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=waiter \
             next_pid=102 next_prio=120",
        ),
        line(
            waiter.0,
            waiter.1,
            1,
            1010,
            "contention_end",
            &format!("{mutex} (ret=0)"),
        ),
    ]
    .concat();
    let dir = TextTraceDir::new("nested-waits", &text);
    let analysis = vmscale_analysis::analyse(dir.path()).unwrap();

    let contention = &analysis.contention;
    assert_eq!(contention.unmatched_ends, 0);
    let lock = |addr: u64| {
        contention
            .locks
            .iter()
            .find(|l| l.lock_addr == addr)
            .unwrap_or_else(|| panic!("lock {addr:#x} in {:#?}", contention.locks))
    };
    assert_eq!(lock(MUTEX).kind, vmscale_run::findings::LockKind::Mutex);
    assert_eq!(lock(MUTEX).waits.as_ref().map(|w| w.n), Some(1));
    assert_eq!(lock(MUTEX).total_wait_ns, 1_000_000);
    assert_eq!(lock(MUTEX).open_waits, 0);
    assert_eq!(
        lock(RQ_LOCK).kind,
        vmscale_run::findings::LockKind::Spinlock
    );
    assert_eq!(lock(RQ_LOCK).total_wait_ns, 4_000);

    let held = analysis
        .holders
        .iter()
        .find(|h| h.lock_addr == MUTEX)
        .unwrap_or_else(|| panic!("the mutex's holders: {:#?}", analysis.holders));
    assert_eq!(held.waits, 1);
    assert_eq!(held.total_wait_ns, 1_000_000);
    assert_eq!(held.holders.len(), 1, "{held:#?}");
    assert_eq!(held.holders[0].pid, holder.1);
    // The hold is proven from when the waiter queued (its second begin, at 12 us): while it
    // only spun on the owner, the mutex could have changed hands without a trace.
    assert_eq!(held.holders[0].waited_behind_ns, 988_000, "{held:#?}");

    // The timeline shows both waits, the spinlock's inside the mutex's.
    let timeline = analysis.timeline.expect("a timeline excerpt");
    let lane = timeline
        .tasks
        .iter()
        .find(|t| t.pid == waiter.1)
        .expect("the waiter's lane");
    let waits: Vec<(u64, u64)> = lane
        .locks
        .iter()
        .map(|l| (l.start_ns - text_trace::ns(0), l.end_ns - text_trace::ns(0)))
        .collect();
    assert_eq!(waits, [(10_000, 1_010_000), (14_000, 18_000)], "{lane:#?}");
}
