//! The sched_switch tracepoint fires before the context switch, so a task can still trace
//! events after its own switch-out, on the way out of the CPU. On a recording that happens
//! whenever the ring buffer wakes its reader: irq_work_queue sends a self IPI
//! (ipi_send_cpu with callback rb_wake_up_waiters) with the old task still current. Such an
//! event must not put the task back on the CPU: a holder asleep across its hold was shown
//! running for all of it.

#[path = "support/text_trace.rs"]
mod text_trace;

use text_trace::{line, ns, TextTraceDir};
use vmscale_run::findings::{LockRole, TaskState};

const LOCK: u64 = 0xffff_8881_0000_2000;

#[test]
fn an_event_traced_on_the_way_out_of_a_switch_leaves_the_task_asleep() {
    let lock = format!("{LOCK:x}");
    let switch = |prev: (&str, i32), state: &str, next: (&str, i32)| {
        format!(
            "prev_comm={} prev_pid={} prev_prio=120 prev_state={state} ==> next_comm={} \
             next_pid={} next_prio=120",
            prev.0, prev.1, next.0, next.1
        )
    };
    let (holder, waiter, other, idle) = (
        ("holder", 101),
        ("waiter", 102),
        ("other", 200),
        ("swapper/1", 0),
    );
    let text = [
        // The holder, with the mutex taken (untraced), sleeps at 30 µs; the ring buffer's
        // wakeup of its reader is traced just after, still in the holder's context.
        line(
            holder.0,
            holder.1,
            0,
            30,
            "sched_switch",
            &switch(holder, "S", other),
        ),
        line(
            holder.0,
            holder.1,
            0,
            31,
            "ipi_send_cpu",
            "cpu=0 callsite=irq_work_queue+0x29/0x60 callback=rb_wake_up_waiters+0x0/0x80",
        ),
        line(
            other.0,
            other.1,
            0,
            35,
            "sys_enter",
            "NR 0 (3, 7f00, 20, 0, 0, 0)",
        ),
        // The waiter queues on the mutex and sleeps.
        line(
            waiter.0,
            waiter.1,
            1,
            40,
            "contention_begin",
            &format!("{lock} (flags=MUTEX)"),
        ),
        line(
            waiter.0,
            waiter.1,
            1,
            45,
            "sched_switch",
            &switch(waiter, "D", idle),
        ),
        // Much later the holder is woken, runs, and releases the mutex to the waiter.
        line(
            other.0,
            other.1,
            0,
            1000,
            "sched_waking",
            "comm=holder pid=101 prio=120 target_cpu=000",
        ),
        line(
            other.0,
            other.1,
            0,
            1010,
            "sched_switch",
            &switch(other, "R", holder),
        ),
        line(
            holder.0,
            holder.1,
            0,
            1020,
            "sched_waking",
            "comm=waiter pid=102 prio=120 target_cpu=001",
        ),
        line(
            idle.0,
            idle.1,
            1,
            1030,
            "sched_switch",
            &switch(idle, "R", waiter),
        ),
        line(
            waiter.0,
            waiter.1,
            1,
            1031,
            "contention_end",
            &format!("{lock} (ret=0)"),
        ),
    ]
    .concat();
    let dir = TextTraceDir::new("switch-out", &text);
    let analysis = vmscale_analysis::analyse(dir.path()).unwrap();
    let timeline = analysis.timeline.expect("a timeline excerpt");
    assert_eq!(
        (timeline.start_ns, timeline.end_ns),
        (ns(40) - 247_750, ns(1031) + 247_750)
    );

    let lane = timeline
        .tasks
        .iter()
        .find(|t| t.pid == holder.1)
        .unwrap_or_else(|| panic!("the holder has a lane: {timeline:#?}"));
    assert!(
        lane.locks
            .iter()
            .any(|l| l.role == LockRole::Hold && l.end_ns == ns(1020)),
        "{lane:#?}"
    );
    // Its first traced event is its switch-out: before that its state is unknown.
    let states: Vec<(u64, u64, TaskState)> = lane
        .states
        .iter()
        .map(|s| (s.start_ns, s.end_ns, s.state))
        .collect();
    assert_eq!(
        states,
        [
            (ns(30), ns(1000), TaskState::Asleep),
            (ns(1000), ns(1010), TaskState::Runnable),
            (ns(1010), timeline.end_ns.min(ns(1031)), TaskState::Running),
        ],
        "{lane:#?}"
    );
    // CPU 0 ran the other task from the holder's switch-out to its switch-in.
    let cpu0 = timeline
        .cpus
        .iter()
        .find(|c| c.cpu == 0)
        .expect("CPU 0's lane");
    let runs: Vec<(u64, u64, i32)> = cpu0
        .slices
        .iter()
        .map(|s| (s.start_ns, s.end_ns, s.pid))
        .collect();
    assert_eq!(
        runs,
        [(ns(30), ns(1010), other.1), (ns(1010), ns(1031), holder.1),],
        "{cpu0:#?}"
    );
}
