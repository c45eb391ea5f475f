//! The breakdown and spinning-lock passes on traces of real KVM runs recorded in-process.
//!
//! A short memslot sweep (1 and 4 spinning vCPUs, direct and pause-all) is recorded with the
//! events a scenario run records, system calls filtered to this thread; every measured
//! KVM_SET_USER_MEMORY_REGION must appear as one operation whose parts add up to it. A short
//! zap run must show kvm->mmu_lock (an rwlock taken for write in kvm_mmu_free_roots) with its
//! waits by mode. Needs root, tracefs and /dev/kvm; fails (never skips) without.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use vmscale_kvm::{GuestProgram, KvmSystem};
use vmscale_run::findings::ComponentKind;
use vmscale_run::Point;
use vmscale_scenario::memslot::{MemslotKnobs, Strategy};
use vmscale_scenario::zap::ZapKnobs;
use vmscale_scenario::{Cancel, NoProgress, PhaseHook};
use vmscale_trace::record::recorder::{RecordConfig, Recording};
use vmscale_trace::record::tracefs;

const REPEAT: usize = 30;
/// Brief zap runs recorded at most, until one shows the mmu_lock contended.
const ATTEMPTS: usize = 5;

/// Both tests drive VMs and trace the whole kernel: one at a time, so neither sees the
/// other's locks.
static SERIAL: Mutex<()> = Mutex::new(());

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// Turns tracing on around each measured phase and marks it, as `vmscale run` does.
struct Hook<'a>(&'a mut Recording);

fn trace_error(e: tracefs::Error) -> vmscale_scenario::Error {
    vmscale_scenario::Error::Trace(e.to_string())
}

impl PhaseHook for Hook<'_> {
    fn measured_phase_begins(&mut self, label: &str) -> Result<(), vmscale_scenario::Error> {
        self.0.set_on(true).map_err(trace_error)?;
        self.0
            .mark(&format!("vmscale: begin {label}"))
            .map_err(trace_error)
    }

    fn measured_phase_ends(&mut self, label: &str) -> Result<(), vmscale_scenario::Error> {
        self.0
            .mark(&format!("vmscale: end {label}"))
            .map_err(trace_error)?;
        self.0.set_on(false).map_err(trace_error)
    }
}

/// Records `scenario` with a scenario run's events and analyses the trace.
fn record(
    name: &str,
    scenario: impl FnOnce(&KvmSystem, &mut dyn PhaseHook) -> Vec<Point>,
) -> (Vec<Point>, vmscale_analysis::TraceAnalysis) {
    let mount =
        tracefs::mount_point().unwrap_or_else(|e| panic!("this test needs tracefs as root: {e}"));
    let system = KvmSystem::open().unwrap_or_else(|e| panic!("this test needs /dev/kvm: {e}"));
    let dir: PathBuf = std::env::temp_dir().join(format!("vmscale-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = RecordConfig {
        syscall_tids: vec![gettid()],
        ..RecordConfig::default()
    };
    // Stacks at every switch too, as `--sleep-stacks` records them, so that the passes
    // that name sleep functions have them to read.
    config.stack_events.push("sched:sched_switch".into());
    let mut recording = Recording::prepare(&mount, &dir, config).unwrap();
    let points = scenario(&system, &mut Hook(&mut recording));
    recording.finish().unwrap();
    let analysis = vmscale_analysis::analyse(Path::new(&dir));
    routing_changes_nothing(&dir, &points);
    std::fs::remove_dir_all(&dir).unwrap();
    (points, analysis.unwrap())
}

/// The findings, as a run record holds them.
fn findings(analysis: vmscale_analysis::TraceAnalysis) -> String {
    let mut section = vmscale_run::TraceSection::default();
    analysis.fill(&mut section);
    serde_json::to_string_pretty(&section).unwrap()
}

/// Where two renderings of findings part: the line number and the lines around it, so a
/// difference is readable in a test log.
fn first_difference(a: &str, b: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let at = a
        .iter()
        .zip(&b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let around =
        |lines: &[&str]| lines[at.saturating_sub(12)..(at + 3).min(lines.len())].join("\n");
    format!(
        "line {at}:\n--- routed\n{}\n--- every event to every pass\n{}",
        around(&a),
        around(&b)
    )
}

/// Every pass is handed only the events whose views it reads; handing each of them every
/// event must find exactly the same, on this real run, with each optional pass in use:
/// the phases' breakdown, the run's own thread as a subject, every task, and windows
/// (the measured samples) on this thread.
fn routing_changes_nothing(dir: &Path, points: &[Point]) {
    let tid = gettid();
    let mut samples = vmscale_run::schema::timed_windows(points);
    samples.sort_unstable();
    let scopes = [
        vmscale_analysis::Scope::default(),
        vmscale_analysis::Scope {
            subject: vec![tid],
            ..Default::default()
        },
        vmscale_analysis::Scope {
            every_task: true,
            ..Default::default()
        },
        vmscale_analysis::Scope {
            timed_windows: samples.clone(),
            timed_calls: samples.iter().map(|&(s, e)| (tid, s, e)).collect(),
            vcpu_resume_windows: samples.iter().map(|&(s, e)| (tid, s, e)).collect(),
            ..Default::default()
        },
    ];
    for scope in scopes {
        let routed = vmscale_analysis::analyse_scoped(dir, &scope).unwrap();
        let reference = vmscale_analysis::analyse_scoped_unrouted(dir, &scope).unwrap();
        let (routed, reference) = (findings(routed), findings(reference));
        assert!(
            routed == reference,
            "{scope:?}: {}",
            first_difference(&routed, &reference)
        );
    }
}

#[test]
fn every_measured_memslot_ioctl_is_split_into_parts_that_add_up() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let knobs = MemslotKnobs {
        vcpus: vec![1, 4],
        repeat: REPEAT,
        strategies: vec![Strategy::Direct, Strategy::PauseAll],
        guest: GuestProgram::Spin,
        ..MemslotKnobs::default()
    };
    let tid = gettid() as i32;
    let (points, analysis) = record("breakdown", |system, hook| {
        vmscale_scenario::memslot::run(system, &knobs, &NoProgress, &Cancel::never(), hook).unwrap()
    });
    assert_eq!(analysis.missed_events, 0, "the trace lost events");

    let labels: Vec<&str> = analysis
        .breakdown
        .iter()
        .map(|p| p.label.as_str())
        .collect();
    assert_eq!(
        labels,
        [
            "memslot vcpus=1 strategy=direct",
            "memslot vcpus=1 strategy=pause-all",
            "memslot vcpus=4 strategy=direct",
            "memslot vcpus=4 strategy=pause-all",
        ]
    );
    let mut contended = 0;
    for phase in &analysis.breakdown {
        assert_eq!(phase.pid, tid, "{}", phase.label);
        let ioctl = phase
            .operations
            .iter()
            .find(|o| o.syscall == libc::SYS_ioctl)
            .unwrap_or_else(|| panic!("{}: no ioctl: {phase:#?}", phase.label));
        // One delete and one add per sample, nothing else on this thread is an ioctl.
        assert_eq!(ioctl.count, 2 * REPEAT as u64, "{}", phase.label);
        assert_eq!(ioctl.operation, "ioctl");

        let parts: u64 = ioctl.components.iter().map(|c| c.total_ns).sum();
        let diff = parts.abs_diff(ioctl.total_ns) as f64;
        assert!(
            diff <= ioctl.total_ns as f64 * 0.01,
            "{}: parts {parts} ns vs measured {} ns: {:#?}",
            phase.label,
            ioctl.total_ns,
            ioctl.components
        );

        // The scenario's own samples of the same loop: one update is two ioctls.
        let (n, strategy) = parse(&phase.label);
        let series = points
            .iter()
            .find(|p| p.n == n)
            .and_then(|p| p.series.iter().find(|s| s.name == strategy))
            .unwrap();
        let per_update = match strategy {
            // delete + add is the whole sample
            "direct" => series.summary.as_ref().unwrap().mean_ns,
            // the "update" phase is the two ioctls
            _ => {
                series
                    .phases
                    .iter()
                    .find(|p| p.name == "update")
                    .and_then(|p| p.summary.as_ref())
                    .unwrap()
                    .mean_ns
            }
        };
        let traced = 2.0 * ioctl.total_ns as f64 / ioctl.count as f64;
        let ratio = traced / per_update;
        eprintln!(
            "{}: {} ioctls, {:.1} us per update traced vs {:.1} us measured (ratio {ratio:.2}); \
             parts: {}; wakers: {:?}",
            phase.label,
            ioctl.count,
            traced / 1e3,
            per_update / 1e3,
            ioctl
                .components
                .iter()
                .map(|c| format!(
                    "{} {} {} ns in {} ops",
                    c.kind.label(),
                    c.detail,
                    c.total_ns,
                    c.operations
                ))
                .collect::<Vec<_>>()
                .join(", "),
            ioctl
                .wakers
                .iter()
                .map(|w| format!("{}/{} {} x{}", w.comm, w.pid, w.doing, w.wakeups))
                .collect::<Vec<_>>()
        );
        assert!(
            (0.3..=3.0).contains(&ratio),
            "{}: traced {traced} ns vs measured {per_update} ns per update",
            phase.label
        );
        if n == 4 {
            contended += ioctl
                .components
                .iter()
                .filter(|c| matches!(c.kind, ComponentKind::Runnable | ComponentKind::Lock))
                .map(|c| c.total_ns)
                .sum::<u64>();
        }
    }
    // 4 spinning vCPUs compete with this thread for the host's CPUs.
    assert!(
        contended > 0,
        "no runnable or lock time at 4 vCPUs: {:#?}",
        analysis.breakdown
    );
}

/// "memslot vcpus=4 strategy=direct" -> (4, "direct").
fn parse(label: &str) -> (u64, &str) {
    let mut n = 0;
    let mut strategy = "";
    for word in label.split_whitespace() {
        if let Some(v) = word.strip_prefix("vcpus=") {
            n = v.parse().unwrap();
        } else if let Some(s) = word.strip_prefix("strategy=") {
            strategy = s;
        }
    }
    (n, strategy)
}

#[test]
fn zap_shows_mmu_lock_write_waits_in_kvm_mmu_free_roots() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let knobs = ZapKnobs {
        vcpus: vec![2],
        repeat: 100,
        baseline: false,
        ..ZapKnobs::default()
    };
    // Whether a vCPU's root reload races the delete for the lock is up to the scheduler: a
    // brief run sees a few such waits most of the time, so a run without any is repeated.
    let mut attempts = 0;
    let analysis = loop {
        attempts += 1;
        let (_, analysis) = record("spinlocks", |system, hook| {
            vmscale_scenario::zap::run(system, &knobs, &NoProgress, &Cancel::never(), hook).unwrap()
        });
        let found = analysis
            .spinlocks
            .iter()
            .any(|l| l.name.contains("kvm_mmu_free_roots"));
        if found || attempts == ATTEMPTS {
            break analysis;
        }
    };
    eprintln!("after {attempts} attempt(s): {:#?}", analysis.spinlocks);
    let lock = analysis
        .spinlocks
        .iter()
        .find(|l| {
            l.kind == vmscale_run::findings::LockKind::Rwlock
                && l.name.contains("kvm_mmu_free_roots")
        })
        .unwrap_or_else(|| {
            panic!(
                "no rwlock in kvm_mmu_free_roots among {} decoded events: {:#?}\nphases: {:?}",
                analysis.decoded_events,
                analysis.contention.locks,
                analysis
                    .breakdown
                    .iter()
                    .map(|p| &p.label)
                    .collect::<Vec<_>>()
            )
        });
    let write = lock
        .modes
        .iter()
        .find(|m| m.mode == "write")
        .expect("write waits");
    let summary = write.waits.as_ref().expect("completed write waits");
    assert!(summary.n > 0);
    assert!(summary.p50_ns <= summary.p99_ns && summary.p99_ns <= summary.max_ns);
    let modes: u64 = lock
        .modes
        .iter()
        .map(|m| m.waits.as_ref().map_or(0, |s| s.n))
        .sum();
    assert_eq!(modes, lock.waits);
    let total: u64 = lock.modes.iter().map(|m| m.total_wait_ns).sum();
    assert_eq!(total, lock.total_wait_ns);
    // The same lock, by the same name, in the contention table.
    assert!(analysis
        .contention
        .locks
        .iter()
        .any(|l| l.lock_addr == lock.lock_addr && l.name == lock.name));
    // No spinning lock is ever a sleeping lock's.
    assert!(analysis.spinlocks.iter().all(|l| l.kind.is_spinning()));
}
