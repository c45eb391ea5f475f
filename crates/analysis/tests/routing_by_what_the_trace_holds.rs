//! Each pass is handed only the events whose views it reads, and system calls only for
//! what the trace can hold: the IPI pass only where an IPI send has a format, the
//! breakdown only where a phase can be opened (ftrace:print). On the real recordings, and
//! on one trimmed of its phases, every finding must be what handing every event to every
//! pass finds, with and without the optional passes. (A real KVM run is checked the same
//! way in breakdown_on_real_kvm.rs.)

use std::path::{Path, PathBuf};

use vmscale_analysis::{Scope, ViewTags};
use vmscale_trace::{Decoder, ViewTag};

#[path = "support/fixture_copy.rs"]
mod fixture_copy;

/// The findings, as a run record holds them.
fn findings(analysis: vmscale_analysis::TraceAnalysis) -> String {
    let mut section = vmscale_run::TraceSection::default();
    analysis.fill(&mut section);
    serde_json::to_string(&section).unwrap()
}

/// A copy of a recording without the formats named (none: as recorded), removed when
/// dropped.
struct Recording(PathBuf);

impl Recording {
    fn without(fixture: &str, formats: &[&str]) -> Recording {
        let dir =
            std::env::temp_dir().join(format!("vmscale-routing-{fixture}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        fixture_copy::copy_dir(&fixture_copy::trace_fixture(fixture), &dir);
        for format in formats {
            std::fs::remove_file(dir.join("formats").join(format)).unwrap();
        }
        Recording(dir)
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every event's pid that is a task, and three windows across the trace.
fn tasks_and_windows(dir: &Path) -> (Vec<u32>, Vec<(u64, u64)>) {
    let decoder = Decoder::open(dir).unwrap();
    let mut pids = std::collections::BTreeSet::new();
    let (mut first, mut last) = (u64::MAX, 0);
    decoder
        .for_each(|e| {
            pids.insert(e.pid());
            first = first.min(e.ts());
            last = last.max(e.ts());
        })
        .unwrap();
    let step = (last - first) / 7;
    let windows = (0..3)
        .map(|i| (first + (2 * i + 1) * step, first + (2 * i + 2) * step))
        .collect();
    let pids = pids.into_iter().filter(|&p| p > 0).map(|p| p as u32);
    (pids.collect(), windows)
}

#[test]
fn routing_events_by_view_changes_no_finding() {
    let recordings =
        ["contention", "ipi-vectors", "overrun"].map(|name| Recording::without(name, &[]));
    // `overrun` holds system calls, sched_switch and phases, and no IPI events; without
    // ftrace:print it cannot open a phase either.
    let no_phases = Recording::without("overrun", &["ftrace/print"]);
    let holds = ViewTags::of(Decoder::open(&no_phases.0).unwrap().catalog());
    assert!(holds.holds(ViewTag::SysEnter) && !holds.holds(ViewTag::Print));
    assert!(!holds.holds(ViewTag::IpiSendCpu) && !holds.holds(ViewTag::IpiRaise));
    for recording in recordings.iter().chain([&no_phases]) {
        let dir = &recording.0;
        let (pids, windows) = tasks_and_windows(dir);
        let on_tasks: Vec<(u32, u64, u64)> = pids
            .iter()
            .take(4)
            .flat_map(|&pid| windows.iter().map(move |&(start, end)| (pid, start, end)))
            .collect();
        let scopes = [
            Scope::default(),
            Scope {
                every_task: true,
                ..Scope::default()
            },
            Scope {
                subject: pids.iter().copied().take(3).collect(),
                excluded_tids: pids.iter().copied().skip(3).take(2).collect(),
                ..Scope::default()
            },
            Scope {
                timed_windows: windows.clone(),
                timed_calls: on_tasks.clone(),
                vcpu_resume_windows: on_tasks,
                ..Scope::default()
            },
        ];
        for scope in scopes {
            let routed = vmscale_analysis::analyse_scoped(dir, &scope).unwrap();
            let reference = vmscale_analysis::analyse_scoped_unrouted(dir, &scope).unwrap();
            assert!(routed.decoded_events > 100, "{}", dir.display());
            assert_eq!(
                findings(routed),
                findings(reference),
                "{}: {scope:?}",
                dir.display()
            );
        }
    }
}
