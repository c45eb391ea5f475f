//! A live recording by the recorder, decoded: the two halves of the crate agree on the trace
//! directory. Needs root and tracefs; fails (never skips) without.

use std::collections::HashSet;

use vmscale_trace::record::recorder::{RecordConfig, Recording};
use vmscale_trace::record::tracefs;
use vmscale_trace::{Decoder, EventKind};

const SYS_WAIT4: i64 = 61;

#[test]
fn a_live_recording_decodes_completely_and_on_the_monotonic_clock() {
    let mount =
        tracefs::mount_point().unwrap_or_else(|e| panic!("this test needs tracefs as root: {e}"));
    let dir = std::env::temp_dir().join(format!("vmscale-trace-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };

    let mut recording = Recording::prepare(&mount, &dir, RecordConfig::default()).unwrap();
    recording.set_on(true).unwrap();
    recording.mark("live start").unwrap();
    let mut children = HashSet::new();
    for _ in 0..3 {
        let spawned: Vec<_> = (0..20)
            .map(|_| std::process::Command::new("true").spawn().unwrap())
            .collect();
        for mut child in spawned {
            children.insert(child.id() as i64);
            child.wait().unwrap();
        }
    }
    recording.mark("live end").unwrap();
    recording.set_on(false).unwrap();
    let meta = recording.finish().unwrap();

    let decoder = Decoder::open(&dir).unwrap();
    let kallsyms = decoder.kallsyms().unwrap();
    // The recorder copies the whole /proc/kallsyms.
    let schedule = kallsyms
        .address_of("schedule")
        .expect("schedule in kallsyms");
    assert_eq!(
        kallsyms.symbolize(schedule + 5).unwrap().to_string(),
        "schedule+0x5"
    );
    let (mut last_ts, mut marks) = (0, Vec::new());
    let (mut begins, mut stacks, mut switches, mut reaped) = (0, 0, 0, HashSet::new());
    let (mut previous_on_cpu, mut stacks_after_begin) = (std::collections::HashMap::new(), 0);
    let (mut task_begins, mut task_stacks) = (0, 0);
    let (mut first_stacks, mut orphans) = (0, Vec::new());
    let begin_id = decoder
        .catalog()
        .find("lock", "contention_begin")
        .unwrap()
        .format
        .id;
    let summary = decoder
        .for_each(|event| {
            let ts = event.ts();
            assert!(ts >= last_ts, "time went back");
            last_ts = ts;
            // An interrupt may trace its own events between a contention_begin and the
            // stack its trigger records right after it, in the same context: the previous
            // event that counts is the previous one in the same context on that CPU
            // (common_flags: NMI 0x40, softirq 0x10, hardirq 0x08).
            let context = event.u64("common_flags").unwrap_or(0) & 0x58;
            let previous = previous_on_cpu.insert((event.cpu(), context), event.id());
            // The trace clock is CLOCK_MONOTONIC: every event lies inside the window in
            // which tracing was on, as the recorder measured it.
            assert!(
                (meta.started_ns..=meta.stopped_ns).contains(&ts),
                "{ts} outside {}..{}",
                meta.started_ns,
                meta.stopped_ns
            );
            match event.kind() {
                EventKind::Print(print) => marks.push(print.text().into_owned()),
                EventKind::ContentionBegin(_) => {
                    begins += 1;
                    if context == 0 {
                        task_begins += 1;
                    }
                }
                EventKind::KernelStack(stack) => {
                    stacks += 1;
                    if previous.is_none() {
                        // The first event of its CPU and context: its contention_begin
                        // came as tracing was switched on and found the buffer still off,
                        // while the trigger's stack, a moment later, found it on.
                        first_stacks += 1;
                    } else if previous != Some(begin_id) {
                        orphans.push(format!(
                            "cpu {} context {context:#x} at {}: after {:?}",
                            event.cpu(),
                            ts - meta.started_ns,
                            previous
                                .and_then(|id| decoder.catalog().get(id))
                                .map(|t| t.name())
                        ));
                    }
                    if previous == Some(begin_id) {
                        stacks_after_begin += 1;
                        if context == 0 {
                            task_stacks += 1;
                        }
                    }
                    for address in stack.iter() {
                        assert!(kallsyms.symbolize(address).is_some(), "{address:#x}");
                    }
                }
                EventKind::SchedSwitch(switch) => {
                    switches += 1;
                    assert_eq!(switch.prev_pid, event.pid());
                }
                EventKind::SysExit(exit) if event.pid() == tid && exit.id == SYS_WAIT4 => {
                    reaped.insert(exit.ret);
                }
                EventKind::Other => panic!("{}:{} without a view", event.system(), event.name()),
                _ => {}
            }
        })
        .unwrap();

    assert_eq!(summary.corrupt_pages(), 0, "{:?}", summary.errors);
    assert_eq!(marks, ["live start", "live end"]);
    assert!(switches > 0);
    // Stacks come only from the trigger on contention_begin, right after it in the same
    // context (or first on their CPU: a begin as tracing came on, whose write found the
    // buffer off and its stack's a moment later found it on; CI saw 57 stacks for 56
    // begins once). In task context every contention gets its stack; in interrupt context the
    // kernel now and then records none (a contention in softirq context with interrupts
    // off), so there only "at most one each" holds.
    assert!(
        stacks <= begins + first_stacks,
        "{stacks} stacks for {begins} contentions ({first_stacks} first on their CPU); stacks after no begin: {orphans:?}"
    );
    assert!(
        task_begins > 0,
        "no contention in task context: nothing was checked"
    );
    assert_eq!(
        task_stacks, task_begins,
        "contentions in task context without their stack ({stacks} stacks for {begins} contentions in all)"
    );
    assert_eq!(
        stacks_after_begin, stacks,
        "a stack not right after a contention_begin"
    );
    // This thread's wait4 calls returned exactly the children it spawned.
    assert_eq!(reaped, children);
    std::fs::remove_dir_all(&dir).unwrap();
}
