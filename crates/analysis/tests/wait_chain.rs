//! A wait chain of two hops: a reader asleep until a writer wakes it, and what that writer
//! did meanwhile (asleep on a timer, then runnable, then on a CPU), named from the trace.

#[path = "support/text_trace.rs"]
mod text_trace;

use text_trace::{line, TextTraceDir};
use vmscale_analysis::Scope;
use vmscale_run::findings::ComponentKind;

fn switch(from: (&str, i32, &str), to: (&str, i32), cpu: u32, us: u64) -> String {
    let (comm, pid, state) = from;
    line(
        comm,
        pid,
        cpu,
        us,
        "sched_switch",
        &format!(
            "prev_comm={comm} prev_pid={pid} prev_prio=120 prev_state={state} ==> \
             next_comm={} next_pid={} next_prio=120",
            to.0, to.1
        ),
    )
}

fn waking(by: (&str, i32), cpu: u32, us: u64, woken: (&str, i32)) -> String {
    line(
        by.0,
        by.1,
        cpu,
        us,
        "sched_waking",
        &format!(
            "comm={} pid={} prio=120 target_cpu=00{cpu}",
            woken.0, woken.1
        ),
    )
}

#[test]
fn a_sleep_names_what_its_waker_did_meanwhile() {
    let (reader, writer) = (("reader", 701), ("writer", 702));
    let idle0 = ("swapper/0", 0);
    let idle1 = ("swapper/1", 0);
    let text = [
        // Both run; the reader sleeps at 10 us (on the pipe), the writer at 20 us (a timer).
        switch(("swapper/0", 0, "R"), reader, 0, 1),
        switch(("swapper/1", 0, "R"), writer, 1, 2),
        switch(("reader", 701, "S"), idle0, 0, 10),
        switch(("writer", 702, "S"), idle1, 1, 20),
        // A timer wakes the writer at 80 us; it waits for the CPU until 90 us, runs, and
        // wakes the reader at 100 us.
        line(
            "swapper/1",
            0,
            1,
            80,
            "sched_waking",
            "comm=writer pid=702 prio=120 target_cpu=001",
        ),
        switch(("swapper/1", 0, "R"), writer, 1, 90),
        waking(writer, 1, 100, reader),
        switch(("swapper/0", 0, "R"), reader, 0, 101),
        switch(("reader", 701, "S"), idle0, 0, 110),
        switch(("writer", 702, "S"), idle1, 1, 120),
    ]
    .concat();
    let dir = TextTraceDir::new("wait-chain", &text);
    let scope = Scope {
        subject: vec![701, 702],
        ..Scope::default()
    };
    let analysis = vmscale_analysis::analyse_scoped(dir.path(), &scope).unwrap();
    let subject = analysis.subject.expect("a subject");
    let asleep = subject
        .parts
        .iter()
        .find(|p| p.kind == ComponentKind::Asleep && p.tasks.iter().any(|t| t.pid == reader.1))
        .unwrap_or_else(|| panic!("the reader's sleep: {:#?}", subject.parts));
    let waker = asleep
        .woken_by
        .iter()
        .find(|w| w.pid == writer.1)
        .unwrap_or_else(|| panic!("the writer woke the reader: {asleep:#?}"));
    // The reader slept 10-100 us; meanwhile the writer ran until 20, slept until 80 (a
    // timer woke it), was runnable until 90 and ran until it woke the reader at 100.
    let did = |kind: ComponentKind| -> u64 {
        waker
            .meanwhile
            .iter()
            .filter(|m| m.kind == kind)
            .map(|m| m.ns)
            .sum()
    };
    assert_eq!(did(ComponentKind::Asleep), 60_000, "{waker:#?}");
    assert_eq!(did(ComponentKind::Runnable), 10_000, "{waker:#?}");
    assert_eq!(did(ComponentKind::OnCpu), 20_000, "{waker:#?}");
    assert_eq!(waker.meanwhile[0].kind, ComponentKind::Asleep, "{waker:#?}");
}
