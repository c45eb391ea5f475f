//! IPIs as three generations of kernels trace them, on real recordings: the counts and the
//! targets' handler time the IPI pass gives must be what the kernel's own text of the same
//! recording shows, and a trace without the newer events (a kernel before 6.3) must still
//! give the handlers, and say it cannot name the senders, not that there were none.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use vmscale_run::IpiPhase;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../trace/tests/fixtures")
        .join(name)
}

/// Events per name in the kernel's text rendering of a fixture.
fn kernel_counts(dir: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(dir.join("expected.txt")).unwrap();
    let mut counts = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        // `comm-pid [cpu] flags time: name: body`
        let Some((_, rest)) = line.split_once("]") else {
            continue;
        };
        let mut parts = rest.splitn(3, ": ");
        let (Some(_), Some(name)) = (parts.next(), parts.next()) else {
            continue;
        };
        *counts.entry(name.trim().to_string()).or_default() += 1;
    }
    counts
}

fn only_phase(ipis: &[IpiPhase]) -> &IpiPhase {
    assert_eq!(ipis.len(), 1, "{ipis:#?}");
    assert_eq!(ipis[0].label, IpiPhase::WHOLE_TRACE);
    &ipis[0]
}

fn handler<'a>(phase: &'a IpiPhase, reason: &str) -> &'a vmscale_run::findings::IpiVictimWork {
    phase
        .handlers
        .iter()
        .find(|h| h.function == reason)
        .unwrap_or_else(|| panic!("no {reason} handlers in {:#?}", phase.handlers))
}

#[test]
fn x86_handlers_and_senders_agree_with_the_kernel_text() {
    let dir = fixture("ipi-vectors");
    let counts = kernel_counts(&dir);
    let analysis = vmscale_analysis::analyse(&dir).unwrap();
    let phase = only_phase(&analysis.ipis);
    // The fixture has no vmscale phases: the whole trace is the phase.
    assert!(phase.duration_ns > 0 && phase.duration_ns <= analysis.span_ns);
    assert_eq!(phase.counted_from, "ipi_send");
    assert_eq!(phase.ipis, counts["ipi_send_cpu"] + cpumask_targets(&dir));
    assert_eq!(phase.csd_queued, counts["csd_queue_cpu"]);
    let single = handler(phase, "Single function call interrupts");
    assert_eq!(single.calls, counts["call_function_single_exit"]);
    let reschedule = handler(phase, "Rescheduling interrupts");
    assert_eq!(reschedule.calls, counts["reschedule_exit"]);
    for h in &phase.handlers {
        assert!(h.total_ns > 0 && h.total_ns < phase.duration_ns, "{h:?}");
    }
    let csd_calls: u64 = phase.victim_work.iter().map(|w| w.calls).sum();
    assert_eq!(csd_calls, counts["csd_function_exit"]);
}

/// Targets of every ipi_send_cpumask line of the fixture's text (`cpumask=0-1`).
fn cpumask_targets(dir: &Path) -> u64 {
    let text = std::fs::read_to_string(dir.join("expected.txt")).unwrap();
    text.lines()
        .filter_map(|l| l.split_once("ipi_send_cpumask: cpumask=").map(|(_, r)| r))
        .map(|rest| {
            let list = rest.split_whitespace().next().unwrap();
            list.split(',')
                .map(|group| match group.split_once('-') {
                    Some((a, b)) => b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() + 1,
                    None => 1,
                })
                .sum::<u64>()
        })
        .sum()
}

/// The same recording as a kernel before 6.3 would give it: the ipi and csd formats gone,
/// so those events cannot be read. The handlers stay, and nothing is counted as sent.
#[test]
fn without_the_newer_events_the_handlers_remain_and_senders_are_unknown() {
    let root = std::env::temp_dir().join(format!("vmscale-ipi-older-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    copy_dir(&fixture("ipi-vectors"), &root);
    std::fs::remove_dir_all(root.join("formats/ipi")).unwrap();
    std::fs::remove_dir_all(root.join("formats/csd")).unwrap();
    let older = vmscale_analysis::analyse(&root).unwrap();
    let newer = vmscale_analysis::analyse(&fixture("ipi-vectors")).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    let (older, newer) = (only_phase(&older.ipis), only_phase(&newer.ipis));
    assert_eq!(older.counted_from, "");
    assert_eq!((older.ipis, older.csd_queued), (0, 0));
    assert!(older.by_site.is_empty() && older.victim_work.is_empty());
    let calls = |p: &IpiPhase| -> Vec<(String, u64, u64)> {
        p.handlers
            .iter()
            .map(|h| (h.function.clone(), h.calls, h.total_ns))
            .collect()
    };
    assert_eq!(calls(older), calls(newer));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
