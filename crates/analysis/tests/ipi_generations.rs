//! IPIs as three generations of kernels trace them, on real recordings: the counts and the
//! targets' handler time the IPI pass gives must be what the kernel's own text of the same
//! recording shows, and a trace without the newer events (a kernel before 6.3) must still
//! give the handlers, and say it cannot name the senders, not that there were none.

use std::collections::BTreeMap;
use std::path::Path;

use vmscale_run::IpiPhase;

#[path = "support/fixture_copy.rs"]
mod fixture_copy;

use fixture_copy::{copy_dir, trace_fixture as fixture};

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

fn corpus(file: &str) -> std::sync::Arc<vmscale_trace::dat::DatFile> {
    let path = fixture("dat-corpus").join(file);
    std::sync::Arc::new(
        vmscale_trace::dat::DatFile::open(&path).unwrap_or_else(|e| panic!("{file}: {e}")),
    )
}

/// Per reason: how many times the decoded trace has `event` (ipi_entry, ipi_exit), and the
/// targets of its ipi_raise events, named by the file's printk strings.
fn per_reason(
    decoder: &vmscale_trace::Decoder,
) -> (BTreeMap<(String, String), u64>, BTreeMap<String, u64>) {
    let printk = decoder.printk_strings();
    let mut handlers = BTreeMap::new();
    let mut raised = BTreeMap::new();
    decoder
        .for_each(|event| {
            use vmscale_trace::EventKind;
            match event.kind() {
                EventKind::IpiEntry(h) | EventKind::IpiExit(h) => {
                    *handlers
                        .entry((event.name().to_string(), printk.name(h.reason)))
                        .or_default() += 1;
                }
                EventKind::IpiRaise(r) => {
                    *raised.entry(printk.name(r.reason)).or_default() += r.targets.count() as u64;
                }
                _ => {}
            }
        })
        .unwrap();
    (handlers, raised)
}

/// A genuine kernel before 6.3 (Debian's arm64 6.1): IPIs are counted from ipi_raise and
/// named by reason, the targets' handlers are timed, and the two ends agree: per reason, the
/// targets the senders raised are the handlers the targets ran (one may be cut off at each
/// end of the trace).
#[test]
fn arm64_before_6_3_counts_ipi_raise_by_reason_and_times_the_handlers() {
    let dat = corpus("arm64-6.1-ipi-v7-zstd.dat");
    let decoder = vmscale_trace::Decoder::from_dat(dat, None).unwrap();
    let symbols = decoder.kallsyms().unwrap();
    let (handlers, raised) = per_reason(&decoder);
    let analysis = vmscale_analysis::analyse_with(&decoder, &symbols).unwrap();
    let phase = only_phase(&analysis.ipis);
    assert_eq!(phase.counted_from, "ipi_raise");
    assert_eq!(phase.ipis, raised.values().sum::<u64>());
    assert!(phase.ipis > 500, "{phase:?}");
    for site in &phase.by_site {
        assert!(
            site.callsite.is_empty() && site.callback.is_empty(),
            "{site:?}"
        );
        assert_eq!(site.ipis, raised[&site.reason], "{site:?}");
        assert!(!site.reason.starts_with("0x"), "named by printk: {site:?}");
    }
    assert!(phase
        .by_site
        .iter()
        .any(|s| s.reason == "Rescheduling interrupts"));
    assert!(phase
        .by_site
        .iter()
        .any(|s| s.reason == "Function call interrupts"));
    assert!(!phase.by_sender.is_empty());
    for h in &phase.handlers {
        let exits = handlers[&("ipi_exit".to_string(), h.function.clone())];
        let entries = handlers[&("ipi_entry".to_string(), h.function.clone())];
        assert!(
            h.calls <= exits && h.calls + 1 >= exits.min(entries),
            "{h:?}"
        );
        assert!(h.total_ns > 0 && h.total_ns < phase.duration_ns, "{h:?}");
        let sent = raised.get(&h.function).copied().unwrap_or(0);
        assert!(
            sent.abs_diff(entries) <= 2,
            "{}: {sent} raised, {entries} handled",
            h.function
        );
    }
    assert_eq!(phase.victim_work.len(), 0, "no csd events on 6.1");
    // What the trace cannot show is said, not read as "no cost".
    let mut section = vmscale_run::TraceSection::default();
    analysis.fill(&mut section);
    assert!(!vmscale_run::findings::cross_cpu_observable(&section));
}

/// A 6.12 kernel fires ipi_send_* and then ipi_raise for one IPI: the pass counts the
/// senders' events once, from ipi_send_*; and ipi_raise alone (the same trace without the
/// newer events) gives the same IPIs, to the same CPUs, from the same tasks, with each
/// reason matching the callbacks (a reschedule has none).
#[test]
fn arm64_with_both_generations_counts_each_ipi_once_and_raise_agrees_with_send() {
    use vmscale_trace::EventKind;
    let dat = corpus("arm64-6.12-ipi-all-v7-zstd.dat");
    let decoder = vmscale_trace::Decoder::from_dat(dat, None).unwrap();
    let symbols = decoder.kallsyms().unwrap();
    let printk = decoder.printk_strings();
    let analysis = vmscale_analysis::analyse_with(&decoder, &symbols).unwrap();
    let both = only_phase(&analysis.ipis).clone();
    assert_eq!(both.counted_from, "ipi_send");

    let mut older = vmscale_analysis::ipi::IpiPass::default();
    let mut resched_sent = 0;
    let mut span = (None, 0);
    decoder
        .for_each(|event| {
            span.0.get_or_insert(event.ts());
            span.1 = event.ts();
            let kind = event.kind();
            match kind {
                EventKind::IpiSendCpu(s) => resched_sent += u64::from(s.callback == 0),
                EventKind::IpiSendCpumask(s) => {
                    resched_sent += u64::from(s.callback == 0) * s.cpumask.count() as u64
                }
                _ => {}
            }
            if !matches!(
                kind,
                EventKind::IpiSendCpu(_)
                    | EventKind::IpiSendCpumask(_)
                    | EventKind::CsdQueueCpu(_)
                    | EventKind::CsdFunctionEntry(_)
                    | EventKind::CsdFunctionExit(_)
            ) {
                older.observe(&event, &kind);
            }
        })
        .unwrap();
    let older = older.finish(&symbols, &printk, (span.0.unwrap_or(0), span.1));
    let raised = only_phase(&older);
    assert_eq!(raised.counted_from, "ipi_raise");
    assert_eq!(
        raised.ipis, both.ipis,
        "each IPI once, whichever event counts it"
    );
    assert_eq!(raised.by_target, both.by_target);
    let senders = |p: &IpiPhase| -> Vec<(i32, u64)> {
        let mut s: Vec<_> = p.by_sender.iter().map(|s| (s.pid, s.ipis)).collect();
        s.sort();
        s
    };
    assert_eq!(senders(raised), senders(&both));
    let reschedules = raised
        .by_site
        .iter()
        .find(|s| s.reason == "Rescheduling interrupts")
        .map_or(0, |s| s.ipis);
    assert_eq!(reschedules, resched_sent);
    assert!(reschedules > 0 && reschedules < raised.ipis);
    // The handlers are the same events either way.
    assert_eq!(
        format!("{:?}", raised.handlers),
        format!("{:?}", both.handlers)
    );
}

/// A zstd-compressed text fixture, as text.
fn text_fixture(name: &str) -> String {
    use std::io::Read;
    let path = fixture("text/arm64").join(name);
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut text = String::new();
    ruzstd::decoding::StreamingDecoder::new(file)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    text
}

/// The IPIs of a text, imported as `vmscale report FILE.txt` imports it.
fn text_ipis(text: &str, tag: &str) -> Vec<IpiPhase> {
    use vmscale_trace::text::trace_dir::{write_trace_dir, DirSink};
    let dir = std::env::temp_dir().join(format!("vmscale-ipi-text-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut sink = DirSink::new(&dir).unwrap();
    let summary = write_trace_dir(
        vmscale_trace::text::import::TextReader::new(text.as_bytes()),
        &mut sink,
    )
    .unwrap();
    // irq_handler_* is read but not analysed; every IPI event is.
    assert!(
        summary.unconverted.keys().all(|name| !name.contains("ipi")),
        "{tag}: {:?}",
        summary.warnings()
    );
    assert_eq!(
        summary.skipped_lines(),
        0,
        "{tag}: {:?}",
        summary.warnings()
    );
    let analysis = vmscale_analysis::analyse(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    analysis.ipis
}

/// trace-cmd's renderings of the 6.1 file, default and raw, import to the IPIs the .dat
/// decodes to: the same counts, targets, senders and reasons, the same handlers, their time
/// to the text's microsecond.
#[test]
fn trace_cmd_text_of_arm64_ipis_imports_as_the_dat_decodes() {
    let dat = corpus("arm64-6.1-ipi-v7-zstd.dat");
    let decoder = vmscale_trace::Decoder::from_dat(dat, None).unwrap();
    let symbols = decoder.kallsyms().unwrap();
    let analysis = vmscale_analysis::analyse_with(&decoder, &symbols).unwrap();
    let from_dat = only_phase(&analysis.ipis);
    for (file, tag) in [
        ("arm64-6.1-report.txt.zst", "default"),
        ("arm64-6.1-report-raw.txt.zst", "raw"),
    ] {
        let ipis = text_ipis(&text_fixture(file), tag);
        let from_text = only_phase(&ipis);
        assert_eq!(from_text.counted_from, "ipi_raise", "{tag}");
        assert_eq!(from_text.ipis, from_dat.ipis, "{tag}");
        assert_eq!(from_text.by_target, from_dat.by_target, "{tag}");
        let sites = |p: &IpiPhase| -> Vec<(String, u64)> {
            p.by_site
                .iter()
                .map(|s| (s.reason.clone(), s.ipis))
                .collect()
        };
        assert_eq!(sites(from_text), sites(from_dat), "{tag}");
        let senders = |p: &IpiPhase| -> Vec<(i32, u64)> {
            p.by_sender.iter().map(|s| (s.pid, s.ipis)).collect()
        };
        assert_eq!(senders(from_text), senders(from_dat), "{tag}");
        assert_eq!(from_text.handlers.len(), from_dat.handlers.len(), "{tag}");
        for (t, d) in from_text.handlers.iter().zip(&from_dat.handlers) {
            assert_eq!((&t.function, t.calls), (&d.function, d.calls), "{tag}");
            // Each entry and exit time is cut to the microsecond.
            assert!(
                t.total_ns.abs_diff(d.total_ns) <= 2_000 * d.calls,
                "{tag}: {t:?} {d:?}"
            );
        }
    }
}

/// The kernel's own text of a 6.12 kernel with every IPI event: the ipi_send_* lines count
/// the IPIs (once, though ipi_raise repeats each), and the handlers are named by the reason
/// the text prints.
#[test]
fn kernel_text_of_arm64_ipis_counts_each_ipi_once() {
    let text = text_fixture("arm64-6.12-kernel-trace.txt.zst");
    let sent: u64 = text
        .lines()
        .filter(|l| l.contains(" ipi_send_cpu: "))
        .count() as u64;
    let raised: u64 = text.lines().filter(|l| l.contains(" ipi_raise: ")).count() as u64;
    let entries = |reason: &str| {
        text.lines()
            .filter(|l| l.contains(&format!(" ipi_entry: ({reason})")))
            .count() as u64
    };
    let ipis = text_ipis(&text, "kernel-6.12");
    let phase = only_phase(&ipis);
    assert_eq!(phase.counted_from, "ipi_send");
    assert!(sent > 100 && raised == sent, "{sent} sent, {raised} raised");
    assert!(
        !text.contains(" ipi_send_cpumask: "),
        "the count below assumes single targets"
    );
    assert_eq!(phase.ipis, sent);
    for reason in ["Function call interrupts", "Rescheduling interrupts"] {
        let h = handler(phase, reason);
        assert!(
            h.calls + 1 >= entries(reason) && h.calls <= entries(reason),
            "{h:?}"
        );
    }
}

/// A lock holder "sent IPIs" only where the trace says they were not wakeups: never from
/// ipi_raise, which names no call site (on ARM most function-call IPIs are remote wakeups),
/// and on 6.12 never from ttwu_queue_wakelist, the remote wakeup's own call site.
#[test]
fn holders_are_credited_only_with_ipis_the_trace_shows_are_not_wakeups() {
    use vmscale_trace::EventKind;
    let dat = corpus("arm64-6.1-ipi-v7-zstd.dat");
    let decoder = vmscale_trace::Decoder::from_dat(dat, None).unwrap();
    let symbols = decoder.kallsyms().unwrap();
    let analysis = vmscale_analysis::analyse_with(&decoder, &symbols).unwrap();
    assert!(
        !analysis.holders.is_empty(),
        "the 6.1 file has sleeping-lock holders"
    );
    for lock in &analysis.holders {
        for holder in &lock.holders {
            assert_eq!(holder.ipis_sent, 0, "{}: {holder:?}", lock.name);
        }
    }

    let dat = corpus("arm64-6.12-ipi-all-v7-zstd.dat");
    let decoder = vmscale_trace::Decoder::from_dat(dat, None).unwrap();
    let symbols = decoder.kallsyms().unwrap();
    let wakelist = symbols.text_extent("ttwu_queue_wakelist").unwrap();
    // Every function-call IPI a task sent, and those not from the wakeup's call site.
    let (mut all, mut not_wakeups) = (BTreeMap::<i32, u64>::new(), BTreeMap::<i32, u64>::new());
    decoder
        .for_each(|event| {
            let (callsite, callback) = match event.kind() {
                EventKind::IpiSendCpu(s) => (s.callsite, s.callback),
                EventKind::IpiSendCpumask(s) => (s.callsite, s.callback),
                _ => return,
            };
            if callback != 0 {
                *all.entry(event.pid()).or_default() += 1;
                if !(wakelist.0..wakelist.1).contains(&callsite) {
                    *not_wakeups.entry(event.pid()).or_default() += 1;
                }
            }
        })
        .unwrap();
    assert!(
        all.values().sum::<u64>() > 2 * not_wakeups.values().sum::<u64>(),
        "most function-call IPIs are wakeups here: {all:?} {not_wakeups:?}"
    );
    let analysis = vmscale_analysis::analyse_with(&decoder, &symbols).unwrap();
    for lock in &analysis.holders {
        for holder in &lock.holders {
            let bound = not_wakeups.get(&holder.pid).copied().unwrap_or(0);
            assert!(
                holder.ipis_sent <= bound,
                "{}: {holder:?} beyond {bound}",
                lock.name
            );
        }
    }
}
