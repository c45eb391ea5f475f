//! One run record, deterministic and rich enough to exercise every section of every
//! report format: the HTML test renders it in a browser, the golden test compares each
//! format's text with the files under tests/golden.
#![allow(dead_code)] // each test binary uses its own subset

use std::collections::BTreeMap;

use vmscale_run::findings::{
    ActivityShare, CpuLane, Holder, HolderActivity, LockHolders, LockRole, LockSlice, PointProfile,
    ProfileStack, RunSlice, StackProfile, StateSlice, TaskLane, TaskState, TimelineExcerpt,
};
use vmscale_run::verdict::{Cause, ExplainedBy, Finding};
use vmscale_run::{
    HostFacts, IpiPhase, IpiSender, IpiSite, LockContention, Phase, Point, RunRecord, Series,
    ToolInfo, TraceSection, WaitStack, Waiter,
};
use vmscale_stats::Summary;

/// A deterministic spread of `n` samples around `base_ns` with a slow tail.
pub fn samples(n: usize, base_ns: u64, seed: u64) -> Vec<u64> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|i| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let jitter = (state >> 33) % (base_ns / 2 + 1);
            let tail = if i % 97 == 0 { base_ns * 8 } else { 0 };
            base_ns + jitter + tail
        })
        .collect()
}

pub fn series(name: &str, samples_ns: Vec<u64>) -> Series {
    Series {
        name: name.into(),
        sample_is: "one pause of every vCPU".into(),
        summary: Summary::from_samples(&samples_ns),
        samples_ns,
        kvm_stats: BTreeMap::from([("vcpu.exits".to_string(), 4_000)]),
        vcpu_progress: vec![1_000_000, 1_100_000],
        ..Series::default()
    }
}

/// pause-all, whose three phases add up to every sample.
pub fn phased(n: u64) -> Series {
    let kick = samples(400, 2_000 * n, n);
    let update = samples(400, 5_000, n + 1);
    let resume = samples(400, 800 * n, n + 2);
    let total = (0..400).map(|i| kick[i] + update[i] + resume[i]).collect();
    let mut s = series("pause-all", total);
    s.phases = vec![
        Phase::new("kick+wait", kick),
        Phase::new("update", update),
        Phase::new("resume", resume),
    ];
    s
}

/// irqfd assignment, growing with the irqfds already registered.
pub fn growing(n: u64) -> Series {
    let xs: Vec<u64> = (0..400).collect();
    let ys: Vec<u64> = samples(400, 3_000, n + 7)
        .iter()
        .zip(&xs)
        .map(|(y, x)| y + 40 * x * n)
        .collect();
    let mut s = series("<script>alert(1)</script>", ys);
    s.sample_x = xs;
    s.sample_x_is = "irqfds already registered".into();
    s.notes = vec!["limited to 400 irqfds".into()];
    s
}

pub fn host() -> HostFacts {
    serde_json::from_value(serde_json::json!({
        "hostname": "testhost",
        "kernel_release": "6.8.0-test",
        "kernel_version": "#1 SMP",
        "cpu_model": "Example CPU @ 2.00GHz",
        "online_cpus": 8,
        "memory_bytes": 16u64 << 30,
        "kvm": null
    }))
    .expect("test host facts match the schema")
}

pub fn trace() -> TraceSection {
    let waits: Vec<u64> = samples(200, 20_000, 3);
    TraceSection {
        dir: "trace".into(),
        events: vec!["lock:contention_begin".into(), "ipi:ipi_send_cpu".into()],
        stacks: true,
        buffer_kib: 8192,
        decoded_events: 123_456,
        contention: vec![LockContention {
            lock_addr: 0xffff_8881_04a3_c0d8,
            name: "kvm->slots_lock".into(),
            kind: "mutex".into(),
            modes: BTreeMap::from([(String::new(), 200)]),
            total_wait_ns: waits.iter().sum(),
            waits: Summary::from_samples(&waits),
            open_waits: 1,
            waiters: vec![Waiter {
                comm: "vmscale".into(),
                pid: 42,
                waits: 200,
                total_wait_ns: waits.iter().sum(),
            }],
            stacks: vec![WaitStack {
                frames: vec![
                    "__mutex_lock_slowpath".into(),
                    "kvm_set_memory_region".into(),
                    "kvm_vm_ioctl".into(),
                ],
                waits: 200,
                total_wait_ns: waits.iter().sum(),
            }],
        }],
        ipis: vec![IpiPhase {
            label: "pause-all n=8".into(),
            duration_ns: 12_000_000,
            ipis: 640,
            csd_queued: 320,
            by_target: (0..8).map(|cpu| (cpu.to_string(), 80)).collect(),
            by_site: vec![IpiSite {
                callsite: "kvm_make_all_cpus_request".into(),
                callback: String::new(),
                reason: String::new(),
                ipis: 640,
            }],
            by_sender: vec![IpiSender {
                pid: 42,
                comm: "vmscale".into(),
                ipis: 640,
            }],
            ..IpiPhase::default()
        }],
        holders: vec![LockHolders {
            lock_addr: 0xffff_8881_04a3_c0d8,
            name: "kvm->slots_lock".into(),
            kind: "mutex".into(),
            waits: 200,
            total_wait_ns: 4_000_000,
            waiter_count: 3,
            waiters: Vec::new(),
            holders: vec![Holder {
                comm: "vmscale".into(),
                pid: 43,
                holds: 50,
                shared_holds: 0,
                waited_behind_ns: 4_000_000,
                activity: vec![ActivityShare {
                    activity: HolderActivity::Running,
                    detail: String::new(),
                    wait_ns: 4_000_000,
                }],
                ipis_sent: 0,
            }],
            activity: vec![ActivityShare {
                activity: HolderActivity::Running,
                detail: String::new(),
                wait_ns: 4_000_000,
            }],
            held_across_sleep: Vec::new(),
            exact_holds: false,
            more_holders: Vec::new(),
        }],
        timeline: Some(timeline()),
        on_cpu: Some(stacks(1)),
        on_cpu_by_n: vec![
            PointProfile {
                n: 1,
                span_ns: 400_000_000,
                profile: stacks(1),
            },
            PointProfile {
                n: 16,
                span_ns: 900_000_000,
                profile: stacks(16),
            },
        ],
        ..TraceSection::default()
    }
}

/// On-CPU samples by stack; the memslot update's share grows with `n`.
pub fn stacks(n: u64) -> StackProfile {
    let names: Vec<String> = [
        "vmscale",
        "vcpu0",
        "[guest]",
        "ioctl",
        "kvm_vm_ioctl",
        "kvm_set_memslot",
        "kvm_mmu_zap_all_fast",
        "<b>not markup</b>",
        "main",
    ]
    .map(String::from)
    .to_vec();
    let stack = |frames: &[u32], user_from: u32, kernel_from: u32, samples: u64| ProfileStack {
        frames: frames.to_vec(),
        user_from,
        kernel_from,
        samples,
    };
    let stacks = vec![
        stack(&[0, 1, 2], 2, 2, 600),
        stack(&[0, 8, 3, 4, 5, 6], 2, 4, 40 * n),
        stack(&[0, 8, 3, 4, 5], 2, 4, 10 * n),
        stack(&[0, 8, 7], 2, 3, 30),
    ];
    StackProfile {
        scope: "every task's samples".into(),
        hz: 997,
        period_ns: 1_003_009,
        samples: stacks.iter().map(|s| s.samples).sum(),
        names,
        stacks,
        ..StackProfile::default()
    }
}

/// A 2 ms window: the holder runs, then sleeps holding the mutex while two tasks wait.
pub fn timeline() -> TimelineExcerpt {
    let at = |us: u64| 5_000_000_000 + us * 1_000;
    let state = |from: u64, to: u64, state: TaskState, cpu: Option<u32>| StateSlice {
        start_ns: at(from),
        end_ns: at(to),
        state,
        cpu,
    };
    let lock = |from: u64, to: u64, role: LockRole| LockSlice {
        start_ns: at(from),
        end_ns: at(to),
        role,
        lock: "kvm->slots_lock".into(),
        start_known: true,
    };
    TimelineExcerpt {
        start_ns: at(0),
        end_ns: at(2_000),
        focus: "the longest wait on kvm->slots_lock: vmscale 42 waited 1500.0 us".into(),
        cpus: vec![
            CpuLane {
                cpu: 0,
                slices: vec![RunSlice {
                    start_ns: at(0),
                    end_ns: at(300),
                    pid: 43,
                }],
            },
            CpuLane {
                cpu: 1,
                slices: vec![RunSlice {
                    start_ns: at(100),
                    end_ns: at(250),
                    pid: 42,
                }],
            },
        ],
        tasks: vec![
            TaskLane {
                pid: 42,
                comm: "vmscale".into(),
                states: vec![
                    state(100, 250, TaskState::Running, Some(1)),
                    state(250, 1_750, TaskState::Asleep, None),
                    state(1_750, 2_000, TaskState::Running, Some(1)),
                ],
                locks: vec![lock(200, 1_700, LockRole::Wait)],
            },
            TaskLane {
                pid: 43,
                comm: "holder".into(),
                states: vec![
                    state(0, 300, TaskState::Running, Some(0)),
                    state(300, 1_650, TaskState::Asleep, None),
                    state(1_650, 2_000, TaskState::Runnable, None),
                ],
                locks: vec![lock(0, 1_690, LockRole::Hold)],
            },
        ],
        comms: BTreeMap::new(),
        truncated: false,
    }
}

pub fn verdict() -> Vec<Finding> {
    vec![
        Finding {
            summary: "pause-all grows linearly with N: 62% of its time went to waiting for kvm->slots_lock".into(),
            cause: Cause::LockWait,
            lock: Some("kvm->slots_lock".into()),
            holder: Some("vmscale/43 held it in 400 holds, asleep (synchronize_srcu) for 91% of the waiting behind it".into()),
            share: 0.62,
            evidence: vec![
                "subject: the timed windows of 2,000 samples".into(),
                "waited from: __mutex_lock <- kvm_set_memory_region".into(),
                "the fourth evidence line, which only JSON and HTML show".into(),
            ],
            // A part under 1% is still said as measured, never as "0%".
            explained_by: vec![
                ExplainedBy {
                    what: "asleep in synchronize_srcu".into(),
                    share: 0.97,
                },
                ExplainedBy {
                    what: "woken by kworker/0:1".into(),
                    share: 0.003,
                },
            ],
            what_if: None,
            what_if_together: None,
        },
        Finding {
            summary: "21% of its time was spent runnable but not on a CPU".into(),
            cause: Cause::CpuStarvation,
            lock: None,
            holder: None,
            share: 0.21,
            evidence: vec!["16 vCPUs on 8 host CPUs".into()],
            explained_by: Vec::new(),
            what_if: None,
            what_if_together: None,
        },
    ]
}

pub fn record() -> RunRecord {
    let point = |n: u64| Point {
        n,
        vcpus_per_host_cpu: n as f64 / 8.0,
        series: vec![
            series("direct", samples(1_000, 1_500 * n * n, n)),
            phased(n),
            growing(n),
        ],
    };
    let mut record = RunRecord {
        schema_version: vmscale_run::SCHEMA_VERSION,
        verdict: verdict(),
        scaling: Vec::new(),
        tool: ToolInfo::current("0.1.0"),
        scenario: "pause".into(),
        sweep: "vcpus".into(),
        command_line: ["vmscale", "run", "pause", "--vcpus", "1,2,4,8,16"]
            .map(String::from)
            .to_vec(),
        started_utc: "2026-01-02T03:04:05Z".into(),
        finished_utc: "2026-01-02T03:05:00Z".into(),
        host: host(),
        knobs: serde_json::json!({"iterations": 400, "vcpus": [1, 2, 4, 8, 16]}),
        background: None,
        points: [1, 2, 4, 8, 16].map(point).to_vec(),
        trace: Some(trace()),
        warnings: vec!["16 vCPUs on 8 host CPUs: overcommitted".into()],
    };
    record.judge_growth(None);
    record
}
