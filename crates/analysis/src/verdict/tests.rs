use super::*;
use crate::breakdown::TIMED_SAMPLE;
use vmscale_run::findings::{
    ActivityShare, Component, ComponentKind, HeldAcrossSleep, Holder, HolderActivity, HolderGroup,
    OperationBreakdown, PhaseBreakdown, SubjectTime, TaskTime,
};
use vmscale_run::{HostFacts, ToolInfo, SCHEMA_VERSION};

fn record(trace: Option<TraceSection>) -> RunRecord {
    RunRecord {
        schema_version: SCHEMA_VERSION,
        verdict: Vec::new(),
        scaling: Vec::new(),
        tool: ToolInfo::current("test"),
        scenario: "memslot".into(),
        sweep: "vcpus".into(),
        command_line: Vec::new(),
        started_utc: String::new(),
        finished_utc: String::new(),
        host: HostFacts {
            hostname: String::new(),
            kernel_release: String::new(),
            kernel_version: String::new(),
            cpu_model: String::new(),
            online_cpus: 2,
            memory_bytes: 0,
            kvm: None,
        },
        knobs: serde_json::json!({}),
        background: None,
        points: Vec::new(),
        trace,
        warnings: Vec::new(),
    }
}

fn lock(name: &str, kind: &str, addr: u64, total_wait_ns: u64) -> LockContention {
    LockContention {
        lock_addr: addr,
        name: name.into(),
        kind: kind.into(),
        modes: Default::default(),
        waits: None,
        total_wait_ns,
        open_waits: 0,
        waiters: Vec::new(),
        stacks: Vec::new(),
    }
}

fn component(kind: ComponentKind, detail: &str, total_ns: u64) -> Component {
    Component {
        kind,
        detail: detail.into(),
        total_ns,
        operations: 1,
        cpu_holders: Vec::new(),
        what_if: None,
        wakers: Vec::new(),
        waits_for: String::new(),
    }
}

fn timed(components: Vec<Component>, syscall: i64) -> TraceSection {
    let total_ns = components.iter().map(|c| c.total_ns).sum();
    TraceSection {
        breakdown: vec![PhaseBreakdown {
            label: "memslot vcpus=2 strategy=direct".into(),
            operations: vec![OperationBreakdown {
                what_if_together: Vec::new(),
                operation: "timed sample".into(),
                syscall,
                count: 10,
                total_ns,
                components,
                ..OperationBreakdown::default()
            }],
            ..PhaseBreakdown::default()
        }],
        ..TraceSection::default()
    }
}

fn pipe_holders(across_sleep_ns: u64) -> LockHolders {
    LockHolders {
        lock_addr: 0x10,
        name: "pipe->mutex (in anon_pipe_write)".into(),
        kind: "mutex".into(),
        waits: 4,
        total_wait_ns: 1_000,
        waiter_count: 2,
        waiters: Vec::new(),
        holders: vec![Holder {
            comm: "writer".into(),
            pid: 7,
            holds: 4,
            shared_holds: 0,
            waited_behind_ns: 1_000,
            activity: vec![ActivityShare {
                activity: HolderActivity::Running,
                detail: String::new(),
                wait_ns: 800,
            }],
            ipis_sent: 0,
        }],
        activity: Vec::new(),
        held_across_sleep: vec![HeldAcrossSleep {
            holder_comm: "writer".into(),
            holder_pid: 7,
            function: "handle_userfault".into(),
            stack: Vec::new(),
            holds: 1,
            slept_ns: across_sleep_ns,
            held_ns: across_sleep_ns,
            held_at_least: false,
            waiters: 2,
            waiter_wait_ns: across_sleep_ns,
        }],
        exact_holds: false,
        more_holders: Vec::new(),
    }
}

#[test]
fn timed_samples_rank_causes_by_their_share_of_the_samples() {
    let trace = timed(
        vec![
            component(ComponentKind::Runnable, "", 600),
            component(
                ComponentKind::Lock,
                "kvm->mmu_lock (write, in kvm_mmu_free_roots)",
                300,
            ),
            component(ComponentKind::OnCpu, "", 80),
            // Below the threshold: left to the details.
            component(ComponentKind::Asleep, "(no stack)", 20),
        ],
        TIMED_SAMPLE,
    );
    let trace = TraceSection {
        contention: vec![lock(
            "kvm->mmu_lock (write, in kvm_mmu_free_roots)",
            "rwlock",
            1,
            300,
        )],
        ..trace
    };
    let found = verdict(&record(Some(trace)));
    let causes: Vec<Cause> = found.iter().map(|f| f.cause).collect();
    assert_eq!(
        causes,
        [Cause::CpuStarvation, Cause::LockSpin, Cause::OnCpu]
    );
    assert!((found[0].share - 0.6).abs() < 1e-9);
    assert_eq!(
        found[1].lock.as_deref(),
        Some("kvm->mmu_lock (write, in kvm_mmu_free_roots)")
    );
    // A spinning waiter is never woken by its holder: no holder is claimed.
    assert_eq!(found[1].holder, None);
    assert!(found[0]
        .evidence
        .iter()
        .any(|e| e.starts_with("subject: the measuring thread")));
}

#[test]
fn a_sleeping_lock_names_its_holder_and_a_holder_that_slept_holding_it_stays_a_lock_wait() {
    let name = "pipe->mutex (in anon_pipe_write)";
    let with = |across_sleep_ns| TraceSection {
        contention: vec![lock(name, "mutex", 0x10, 1_000)],
        holders: vec![pipe_holders(across_sleep_ns)],
        ..timed(
            vec![component(ComponentKind::Lock, name, 1_000)],
            TIMED_SAMPLE,
        )
    };
    // Holders asleep under it for 70% or 10% of the waiting: one lock, one cause.
    let slept = verdict(&record(Some(with(700))));
    assert_eq!(slept[0].cause, Cause::LockWait);
    let holder = slept[0].holder.as_deref().unwrap();
    assert!(
        holder.starts_with("writer/7 slept in handle_userfault"),
        "{holder}"
    );
    let ran = verdict(&record(Some(with(100))));
    assert_eq!(ran[0].cause, Cause::LockWait);
    let holder = ran[0].holder.as_deref().unwrap();
    assert!(
        holder.contains("writer/7 held it in 4 holds, running for 80%"),
        "{holder}"
    );
}

#[test]
fn untimed_runs_fall_back_to_lock_waits_and_say_so() {
    let trace = TraceSection {
        contention: vec![
            lock("kvm->irqfds.lock (in kvm_irqfd)", "spinlock", 1, 900),
            lock("spinlock in __queue_work", "spinlock", 2, 100),
        ],
        // A system call breakdown is not a timed window: it is not used.
        ..timed(
            vec![component(ComponentKind::Asleep, "do_nanosleep", 5_000)],
            230,
        )
    };
    let found = verdict(&record(Some(trace)));
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].cause, Cause::LockSpin);
    assert!((found[0].share - 0.9).abs() < 1e-9);
    assert!(
        found[0]
            .summary
            .starts_with("90% of the 1.0 us that traced tasks spent waiting on locks"),
        "{}",
        found[0].summary
    );
    assert!(found[0].evidence[0].starts_with("subject: lock waits of every traced task"));
}

fn subject(parts: Vec<(ComponentKind, &str, u64)>, user_ns: u64, system_ns: u64) -> TraceSection {
    use vmscale_run::findings::{CommandUsage, SubjectPart};
    let total_ns = parts.iter().map(|p| p.2).sum();
    TraceSection {
        command: Some(CommandUsage {
            pid: 42,
            threads: Vec::new(),
            user_ns,
            system_ns,
        }),
        subject: Some(SubjectTime {
            tasks: 3,
            unseen: 0,
            total_ns,
            joined_ns: 1_000,
            joined: vec![TaskTime {
                comm: "main".into(),
                pid: 42,
                ns: 1_000,
            }],
            parts: parts
                .into_iter()
                .map(|(kind, detail, total_ns)| SubjectPart {
                    in_syscalls: Vec::new(),
                    processes: Vec::new(),
                    kind,
                    // "function|lock" for a sleep holding a lock.
                    detail: detail.split('|').next().unwrap_or(detail).into(),
                    lock: detail.split_once('|').map_or("", |d| d.1).into(),
                    cpu_holders: Vec::new(),
                    waits_for: String::new(),
                    woken_by: Vec::new(),
                    what_if: None,
                    total_ns,
                    tasks: vec![TaskTime {
                        comm: "worker".into(),
                        pid: 43,
                        ns: total_ns,
                    }],
                })
                .collect(),
            every_task: false,
            asleep_left_out_ns: 0,
            asleep_from_before_ns: 0,
            unseen_left_out_ns: 0,
        }),
        ..TraceSection::default()
    }
}

#[test]
fn a_commands_on_cpu_time_is_split_by_what_the_kernel_charged_it() {
    // 900 on a CPU, 90 of it in the kernel by rusage: most of the time is the command's
    // own code and no kernel cause comes near it, so that is the answer and comes first.
    let found = verdict(&record(Some(subject(
        vec![
            (ComponentKind::OnCpu, "", 900),
            (ComponentKind::Runnable, "", 100),
        ],
        810,
        90,
    ))));
    let causes: Vec<Cause> = found.iter().map(|f| f.cause).collect();
    assert_eq!(causes, [Cause::None, Cause::CpuStarvation, Cause::OnCpu]);
    assert!((found[0].share - 0.81).abs() < 1e-9, "{}", found[0].share);
    // A kernel cause half the user-space share or more is comparable: the kernel's causes
    // come first, the user-space share after them.
    let found = verdict(&record(Some(subject(
        vec![
            (ComponentKind::OnCpu, "", 600),
            (ComponentKind::Runnable, "", 350),
            (ComponentKind::Asleep, "do_nanosleep", 50),
        ],
        600,
        0,
    ))));
    let causes: Vec<Cause> = found.iter().map(|f| f.cause).collect();
    assert_eq!(causes, [Cause::CpuStarvation, Cause::Sleep, Cause::None]);
    assert!(found[0].evidence[0].starts_with("subject: the command (pid 42)"));
    assert!(found[0].evidence[1].starts_with("left out: 1.0 us asleep"));
    // With no kernel cause worth a finding, the user-space share leads.
    let found = verdict(&record(Some(subject(
        vec![
            (ComponentKind::OnCpu, "", 990),
            (ComponentKind::Runnable, "", 10),
        ],
        990,
        0,
    ))));
    assert_eq!(found[0].cause, Cause::None);
    assert_eq!(found.len(), 1);
    // The same time charged to the kernel is on-CPU work in the kernel; waiting for
    // cross-CPU calls is kernel time already placed, not counted twice.
    let found = verdict(&record(Some(subject(
        vec![
            (ComponentKind::OnCpu, "", 600),
            (ComponentKind::CrossCpu, "flush_tlb_func", 300),
            (ComponentKind::Asleep, "do_nanosleep", 100),
        ],
        0,
        900,
    ))));
    let causes: Vec<Cause> = found.iter().map(|f| f.cause).collect();
    assert_eq!(causes, [Cause::OnCpu, Cause::Ipi, Cause::Sleep]);
    assert!((found[0].share - 0.6).abs() < 1e-9);
    assert!(found[1].summary.contains("flush_tlb_func (IPIs)"));
    assert!(found[2].summary.contains("asleep in do_nanosleep"));
}

#[test]
fn on_cpu_work_says_when_the_trace_cannot_show_waits_for_other_cpus() {
    let on_cpu = || subject(vec![(ComponentKind::OnCpu, "", 600)], 0, 600);
    let unknown = "waits for other CPUs unknown: they need csd:csd_queue_cpu";
    let without = verdict(&record(Some(on_cpu())));
    assert_eq!(without[0].cause, Cause::OnCpu);
    assert!(
        without[0].evidence.iter().any(|e| e.starts_with(unknown)),
        "{:?}",
        without[0].evidence
    );
    for csd in [
        TraceSection {
            events: vec!["csd:csd_function_entry".into()],
            ..on_cpu()
        },
        TraceSection {
            events_seen: [("csd:csd_function_entry".to_string(), 3)].into(),
            ..on_cpu()
        },
    ] {
        let with = verdict(&record(Some(csd)));
        assert!(
            !with[0].evidence.iter().any(|e| e.starts_with(unknown)),
            "{:?}",
            with[0].evidence
        );
    }
}

#[test]
fn a_commands_lock_wait_is_ranked_with_its_other_causes() {
    let name = "pipe->mutex (in anon_pipe_write)";
    let trace = TraceSection {
        contention: vec![lock(name, "mutex", 0x10, 1_000)],
        holders: vec![pipe_holders(100)],
        ..subject(
            vec![
                (ComponentKind::Lock, name, 700),
                (ComponentKind::OnCpu, "", 300),
            ],
            0,
            300,
        )
    };
    let found = verdict(&record(Some(trace)));
    assert_eq!(found[0].cause, Cause::LockWait);
    assert_eq!(found[0].lock.as_deref(), Some(name));
    assert!(found[0]
        .holder
        .as_deref()
        .unwrap()
        .contains("writer/7 held it in 4 holds, running"));
    assert_eq!(found[1].cause, Cause::OnCpu);
}

#[test]
fn growth_comes_from_the_claims_on_every_sample() {
    use vmscale_run::{Point, Series};
    let trace = timed(
        vec![component(ComponentKind::OnCpu, "", 1_000)],
        TIMED_SAMPLE,
    );
    let mut run = record(Some(trace));
    run.sweep = "vcpus".into();
    // 100 samples spread evenly +-5% around `centre` ns.
    let around = |centre: u64| -> Vec<u64> {
        (0..100u64)
            .map(|i| centre * (95 + i / 10) / 100 + i)
            .collect()
    };
    let series = |centre: u64| Series {
        name: "direct".into(),
        samples_ns: around(centre),
        sample_start_ns: vec![1],
        ..Series::default()
    };
    // 10 us plus 5 us per vCPU: linear.
    run.points = [1u64, 2, 4, 8]
        .iter()
        .map(|&n| Point {
            n,
            vcpus_per_host_cpu: 0.0,
            series: vec![series(10_000 + 5_000 * n)],
        })
        .collect();
    run.resummarize();
    let found = verdict(&run);
    let growth = &found[0].evidence[0];
    assert!(
        growth.starts_with("direct: p50 14.9 us [") && growth.contains("at vcpus=8; grows 3.3"),
        "{growth}"
    );
    assert!(growth.contains("from vcpus=1 to 8, as N^0.5"), "{growth}");
    assert!(growth.contains("; linear (Amdahl): T1 "), "{growth}");
    assert!(growth.contains("more per vcpus at vcpus=8"), "{growth}");
    assert!(growth.contains("; predicts "), "{growth}");
    assert!(
        growth.ends_with("at vcpus=16 (99% intervals in brackets)"),
        "{growth}"
    );
    // A cost that falls as N grows (a tour's memslot at 1 to 8 vCPUs on two loaded CPUs:
    // 458 us down to 120 us) is said to fall, with no model and nothing predicted.
    for (point, p50) in run
        .points
        .iter_mut()
        .zip([460_000u64, 300_000, 180_000, 120_000])
    {
        point.series[0] = series(p50);
    }
    run.resummarize();
    let found = verdict(&run);
    let falling = &found[0].evidence[0];
    assert!(falling.contains("; falls to 0.26"), "{falling}");
    assert!(
        !falling.contains("grows") && !falling.contains("predicts"),
        "{falling}"
    );
    // Two points: the ratio and exponent still, no shape.
    run.points.truncate(2);
    run.resummarize();
    let found = verdict(&run);
    let two = &found[0].evidence[0];
    assert!(
        two.starts_with("direct: p50 455 us [") && two.contains("; falls to 0.65"),
        "{two}"
    );
    assert!(!two.contains("fit"), "{two}");
}

#[test]
fn nothing_to_blame_is_said_as_such() {
    let recorded = TraceSection {
        events: vec!["lock:contention_begin".into(), "lock:contention_end".into()],
        ..TraceSection::default()
    };
    let quiet = verdict(&record(Some(recorded)));
    assert_eq!(quiet.len(), 1);
    assert_eq!(quiet[0].cause, Cause::None);
    assert!(quiet[0].summary.starts_with("no lock contention recorded"));
    // A trace that never had the lock events cannot clear the locks: unknown, not none.
    let blind = verdict(&record(Some(TraceSection {
        events: vec!["sched:sched_switch".into()],
        ..TraceSection::default()
    })));
    assert_eq!(blind[0].cause, Cause::None);
    assert!(
        blind[0].summary.starts_with("lock contention unknown"),
        "{}",
        blind[0].summary
    );
    let untraced = verdict(&record(None));
    assert_eq!(untraced[0].cause, Cause::None);
    assert!(untraced[0].summary.starts_with("not traced"));
}

#[test]
fn lock_waiting_that_is_a_sliver_of_the_traced_cpu_time_blames_no_lock() {
    use vmscale_run::IpiPhase;
    let trace = |wait_ns| TraceSection {
        contention: vec![lock("rq->__lock (in __schedule)", "spinlock", 1, wait_ns)],
        ipis: vec![IpiPhase {
            label: "record".into(),
            duration_ns: 1_000_000_000,
            ..IpiPhase::default()
        }],
        ..TraceSection::default()
    };
    // 2 CPUs for 1 s: 1 ms of waiting is 0.05%, nothing to blame.
    let quiet = verdict(&record(Some(trace(1_000_000))));
    assert_eq!(quiet.len(), 1);
    assert_eq!(quiet[0].cause, Cause::None);
    assert!(
        quiet[0].summary.starts_with("nothing is blamed on a lock"),
        "{}",
        quiet[0].summary
    );
    // 100 ms is 5%: the lock is named.
    let busy = verdict(&record(Some(trace(100_000_000))));
    assert_eq!(busy[0].cause, Cause::LockSpin);
}

#[test]
fn a_holders_sleep_under_a_contended_lock_is_that_locks_cost_and_nothing_else() {
    // The waiters waited 500 on the mutex; its holder slept 250 in handle_userfault holding
    // it; another task slept 250 in do_nanosleep holding nothing.
    let mut trace = subject(
        vec![
            (ComponentKind::Lock, "pipe->mutex", 500),
            (
                ComponentKind::HoldingAsleep,
                "handle_userfault|pipe->mutex",
                250,
            ),
            (ComponentKind::Asleep, "do_nanosleep", 250),
        ],
        0,
        0,
    );
    trace.contention = vec![lock("pipe->mutex", "mutex", 0x10, 500)];
    trace.holders = vec![pipe_holders(500)];
    let found = verdict(&record(Some(trace)));
    assert_eq!(found[0].cause, Cause::LockWait, "{found:#?}");
    assert!((found[0].share - 0.75).abs() < 1e-9, "{found:#?}");
    assert!(
        found[0]
            .summary
            .contains("50% waiting for it, and 25% its holders spent asleep in handle_userfault"),
        "{}",
        found[0].summary
    );
    // No other finding speaks of the holder's sleep in handle_userfault.
    for other in &found[1..] {
        assert!(!other.summary.contains("handle_userfault"), "{found:#?}");
    }
    assert_eq!(found[1].cause, Cause::Sleep);
    assert!(found[1].summary.contains("do_nanosleep"));
}

#[test]
fn a_holder_is_named_only_as_far_as_the_trace_proves_it() {
    let mut holders = pipe_holders(0);
    holders.total_wait_ns = 1_000;
    holders.activity = vec![
        ActivityShare {
            activity: HolderActivity::Unknown,
            detail: "the holder's acquisition was not traced".into(),
            wait_ns: 980,
        },
        ActivityShare {
            activity: HolderActivity::Running,
            detail: String::new(),
            wait_ns: 20,
        },
    ];
    let mut trace = subject(vec![(ComponentKind::Lock, "pipe->mutex", 1_000)], 0, 0);
    trace.contention = vec![lock("pipe->mutex", "mutex", 0x10, 1_000)];
    trace.holders = vec![holders.clone()];
    let found = verdict(&record(Some(trace.clone())));
    let holder = found[0].holder.as_deref().unwrap();
    assert!(
        holder.starts_with(
            "unknown: the trace proves a holder for 2% of the 1.0 us waited on it, and none for 98% (98% the holder's acquisition was not traced)"
        ),
        "{holder}"
    );
    // Proven for most of it: the coverage, then the holder.
    holders.activity[0].wait_ns = 200;
    holders.activity[1].wait_ns = 800;
    trace.holders = vec![holders];
    let found = verdict(&record(Some(trace)));
    let holder = found[0].holder.as_deref().unwrap();
    assert!(
        holder.starts_with("the trace proves a holder for 80%")
            && holder.contains("; where proven: "),
        "{holder}"
    );
}

const PREDICTION: vmscale_run::findings::WhatIf = vmscale_run::findings::WhatIf {
    samples: 10,
    p50_ns: 100,
    p99_ns: 200,
    removed_p50_ns: 10,
    removed_p99_ns: 20,
    halved_p50_ns: 55,
    halved_p99_ns: 110,
};

#[test]
fn the_second_cause_says_what_removing_both_would_do() {
    let mut trace = timed(
        vec![
            component(ComponentKind::Runnable, "", 600),
            component(ComponentKind::Asleep, "(no stack)", 300),
            component(ComponentKind::OnCpu, "", 100),
        ],
        TIMED_SAMPLE,
    );
    let op = &mut trace.breakdown[0].operations[0];
    // Only the pair the two first findings are: another pair is not theirs.
    for removed in [
        vec![
            (ComponentKind::Asleep, "(no stack)".to_string()),
            (ComponentKind::OnCpu, String::new()),
        ],
        vec![
            (ComponentKind::Asleep, "(no stack)".into()),
            (ComponentKind::Runnable, String::new()),
        ],
    ] {
        op.what_if_together
            .push(vmscale_run::findings::WhatIfTogether {
                removed: removed.clone(),
                prediction: vmscale_run::findings::WhatIf {
                    removed_p50_ns: if removed[1].0 == ComponentKind::Runnable {
                        10
                    } else {
                        90
                    },
                    ..PREDICTION
                },
            });
    }
    let found = verdict(&record(Some(trace)));
    assert_eq!(found[0].cause, Cause::CpuStarvation);
    assert!(found[0].what_if_together.is_none());
    let both = found[1].what_if_together.as_ref().expect("both removed");
    assert_eq!(both.prediction.removed_p50_ns, 10);
    assert!(!both.only_halved);
    assert!(
        both.change.contains("runnable") && both.change.contains(" and without its sleeps"),
        "{}",
        both.change
    );
}

/// An operation's own on-CPU work can be made faster, not removed: its what-if is the
/// halved prediction alone, and no pair removes all of it.
#[test]
fn own_on_cpu_work_is_only_halved_and_never_removed_in_a_pair() {
    let mut trace = timed(
        vec![
            Component {
                what_if: Some(PREDICTION),
                ..component(ComponentKind::OnCpu, "", 600)
            },
            Component {
                what_if: Some(PREDICTION),
                ..component(ComponentKind::Runnable, "", 300)
            },
        ],
        TIMED_SAMPLE,
    );
    trace.breakdown[0].operations[0]
        .what_if_together
        .push(vmscale_run::findings::WhatIfTogether {
            removed: vec![
                (ComponentKind::OnCpu, String::new()),
                (ComponentKind::Runnable, String::new()),
            ],
            prediction: PREDICTION,
        });
    let found = verdict(&record(Some(trace)));
    assert_eq!(found[0].cause, Cause::OnCpu);
    let own = found[0].what_if.as_ref().expect("a what-if");
    assert!(own.only_halved, "{own:?}");
    assert_eq!(own.change, "with its own on-CPU work twice as fast");
    let runnable = found[1].what_if.as_ref().expect("a what-if");
    assert!(!runnable.only_halved);
    assert!(found[1].what_if_together.is_none(), "{:?}", found[1]);
}

#[test]
fn holders_of_one_name_doing_the_same_are_one_part_and_unlisted_holders_keep_their_time() {
    let holder = |comm: &str, pid: i32, activity, detail: &str, wait_ns| Holder {
        comm: comm.into(),
        pid,
        holds: 1,
        shared_holds: 0,
        waited_behind_ns: wait_ns,
        activity: vec![ActivityShare {
            activity,
            detail: detail.into(),
            wait_ns,
        }],
        ipis_sent: 0,
    };
    let share = |activity, detail: &str, wait_ns| ActivityShare {
        activity,
        detail: detail.into(),
        wait_ns,
    };
    let mut holders = pipe_holders(0);
    holders.held_across_sleep.clear();
    holders.name = "mmap_lock (write, in __vm_munmap)".into();
    holders.kind = "rwsem".into();
    holders.total_wait_ns = 1_000;
    holders.holders = vec![
        holder("vmscale", 21, HolderActivity::Running, "", 300),
        holder("vmscale", 22, HolderActivity::Running, "", 250),
        holder(
            "kworker/0:1",
            5,
            HolderActivity::Asleep,
            "rwsem_down_read_slowpath",
            100,
        ),
        holder("vmscale", 23, HolderActivity::Running, "", 50),
    ];
    // Past the listed holders: two more vmscale tasks and a cc1 running, 150 of the 200
    // more running said by name (a record from before they were kept has none).
    holders.more_holders = vec![
        HolderGroup {
            name: "vmscale".into(),
            tasks: 2,
            activity: HolderActivity::Running,
            detail: String::new(),
            wait_ns: 100,
        },
        HolderGroup {
            name: "cc1".into(),
            tasks: 1,
            activity: HolderActivity::Running,
            detail: String::new(),
            wait_ns: 50,
        },
    ];
    // All holders, the unlisted ones too: 200 more running, and 100 between holders.
    holders.activity = vec![
        share(HolderActivity::Running, "", 800),
        share(HolderActivity::Asleep, "rwsem_down_read_slowpath", 100),
        share(HolderActivity::Handoff, "", 100),
    ];
    let trace = TraceSection {
        contention: vec![lock(
            "mmap_lock (write, in __vm_munmap)",
            "rwsem",
            0x10,
            1_000,
        )],
        holders: vec![holders],
        ..TraceSection::default()
    };
    let said: Vec<(String, f64)> = lock_explained_by(&trace, trace.contention.first())
        .into_iter()
        .map(|e| (e.what, e.share))
        .collect();
    assert_eq!(
        said,
        [
            (
                "5 vmscale tasks holding it, running (vmscale/21, vmscale/22, vmscale/23, ...)"
                    .to_string(),
                0.7
            ),
            (
                "between holders (released, the next not yet running)".to_string(),
                0.1
            ),
            (
                "kworker/0:1/5 holding it, asleep in rwsem_down_read_slowpath".to_string(),
                0.1
            ),
            ("a cc1 task holding it, running".to_string(), 0.05),
            ("more holders holding it, running".to_string(), 0.05),
        ]
    );
}

#[test]
fn a_wait_for_other_cpus_is_said_by_phase_with_the_calls_its_ipis_came_from() {
    use vmscale_run::findings::IpiSyscall;
    use vmscale_run::IpiPhase;
    let phase = |label: &str, ns| PhaseBreakdown {
        label: label.into(),
        operations: vec![OperationBreakdown {
            operation: "timed sample".into(),
            syscall: TIMED_SAMPLE,
            count: 10,
            total_ns: ns,
            components: vec![component(ComponentKind::CrossCpu, "flush_tlb_func", ns)],
            ..OperationBreakdown::default()
        }],
        ..PhaseBreakdown::default()
    };
    let ipis = |label: &str, by: &[(&str, u64)]| IpiPhase {
        label: label.into(),
        ipis: by.iter().map(|b| b.1).sum(),
        by_syscall: by
            .iter()
            .map(|&(syscall, ipis)| IpiSyscall {
                syscall: syscall.into(),
                ipis,
            })
            .collect(),
        ..IpiPhase::default()
    };
    let trace = TraceSection {
        breakdown: vec![phase("mlock busy=0", 100), phase("mlock busy=1", 900)],
        ipis: vec![
            ipis("mlock busy=0", &[("munmap", 87), ("mlock", 13)]),
            ipis("mlock busy=1", &[("munmap", 995), ("mlock", 5)]),
        ],
        ..TraceSection::default()
    };
    let said: Vec<(String, f64)> = cross_cpu::explained_by(&trace, "flush_tlb_func")
        .into_iter()
        .map(|e| (e.what, e.share))
        .collect();
    assert_eq!(
        said,
        [
            (
                "mlock busy=1: its IPIs sent from munmap (100% of 1000)".to_string(),
                0.9
            ),
            (
                "mlock busy=0: its IPIs sent from munmap (87% of 100), mlock (13%)".to_string(),
                0.1
            ),
        ]
    );
}

#[test]
fn a_subject_wait_for_other_cpus_is_said_by_who_waited_and_what_they_sent() {
    use vmscale_run::findings::{IpiSender, SubjectPart};
    use vmscale_run::IpiPhase;
    let part = SubjectPart {
        in_syscalls: Vec::new(),
        kind: ComponentKind::CrossCpu,
        detail: "flush_tlb_func".into(),
        lock: String::new(),
        total_ns: 1_000,
        tasks: vec![
            TaskTime {
                comm: "worker1".into(),
                pid: 11,
                ns: 600,
            },
            TaskTime {
                comm: "worker2".into(),
                pid: 12,
                ns: 300,
            },
            TaskTime {
                comm: "main".into(),
                pid: 10,
                ns: 100,
            },
        ],
        processes: Vec::new(),
        cpu_holders: Vec::new(),
        waits_for: String::new(),
        woken_by: Vec::new(),
        what_if: None,
    };
    let trace = TraceSection {
        ipis: vec![IpiPhase {
            ipis: 200,
            by_sender: vec![
                IpiSender {
                    pid: 11,
                    comm: "worker1".into(),
                    ipis: 120,
                },
                IpiSender {
                    pid: 12,
                    comm: "worker2".into(),
                    ipis: 60,
                },
            ],
            ..IpiPhase::default()
        }],
        ..TraceSection::default()
    };
    let said: Vec<(String, f64)> = cross_cpu::subject_explained_by(&trace, &part)
        .into_iter()
        .map(|e| (e.what, e.share))
        .collect();
    assert_eq!(
        said,
        [
            (
                "2 workerN tasks waiting (they sent 90% of the trace's 200 IPIs)".to_string(),
                0.9
            ),
            ("main/10 waiting".to_string(), 0.1),
        ]
    );
}

/// A timed sleep whose stacks say what it waited for (a grace period) says it too.
#[test]
fn a_timed_sleep_says_what_it_waited_for_where_its_stacks_tell() {
    let trace = timed(
        vec![
            Component {
                waits_for: "an RCU grace period".into(),
                ..component(
                    ComponentKind::Asleep,
                    "__synchronize_srcu in kvm_swap_active_memslots",
                    700,
                )
            },
            component(ComponentKind::Asleep, "some_driver_wait", 300),
        ],
        TIMED_SAMPLE,
    );
    let found = verdict(&record(Some(trace)));
    assert!(
        found[0]
            .summary
            .ends_with("asleep in __synchronize_srcu in kvm_swap_active_memslots, waiting for an RCU grace period"),
        "{}",
        found[0].summary
    );
    assert!(
        found[1].summary.ends_with("asleep in some_driver_wait"),
        "{}",
        found[1].summary
    );
}

/// A share the trace measured is never said as "0%": finer below 1%.
#[test]
fn small_shares_are_said_finer_than_whole_percents() {
    assert_eq!(super::percent(0.62), "62%");
    assert_eq!(super::percent(0.006), "1%");
    assert_eq!(super::percent(0.003), "0.3%");
    assert_eq!(super::percent(0.0001), "under 0.1%");
    assert_eq!(super::percent(0.0), "0%");
}

#[test]
fn without_rusage_on_cpu_time_is_split_by_the_traces_system_calls() {
    use vmscale_run::findings::SyscallTime;
    let with_calls = |command: bool| {
        let mut trace = subject(
            vec![
                (ComponentKind::OnCpu, "", 1_000),
                (ComponentKind::Runnable, "", 200),
            ],
            500,
            500,
        );
        if !command {
            trace.command = None;
        }
        let subject = trace.subject.as_mut().unwrap();
        subject.parts[0].in_syscalls = vec![
            SyscallTime {
                name: "read".into(),
                ns: 300,
                calls: 1_000,
            },
            SyscallTime {
                name: "write".into(),
                ns: 100,
                calls: 1_000,
            },
        ];
        verdict(&record(Some(trace)))
    };
    // An imported trace: 400 of the 1,000 on-CPU ns were inside system calls, most in read.
    let found = with_calls(false);
    let inside = found
        .iter()
        .find(|f| f.summary.contains("inside system calls"))
        .unwrap_or_else(|| panic!("{found:#?}"));
    assert!(
        (inside.share - 400.0 / 1_200.0).abs() < 1e-9,
        "{}",
        inside.share
    );
    assert!(
        inside.summary.contains("(read 75%, write 25% of it)"),
        "{}",
        inside.summary
    );
    assert_eq!(inside.explained_by[0].what, "read (1,000 calls)");
    let outside = found
        .iter()
        .find(|f| {
            f.summary
                .contains("outside the system calls the trace shows")
        })
        .unwrap_or_else(|| panic!("{found:#?}"));
    assert!((outside.share - 600.0 / 1_200.0).abs() < 1e-9);
    // Where the kernel charged the command system and user time, that split stands.
    let found = with_calls(true);
    assert!(
        found.iter().all(|f| !f.summary.contains("system calls")),
        "{found:#?}"
    );
    assert!(
        found.iter().any(|f| f.summary.contains("(system time)")),
        "{found:#?}"
    );
}
