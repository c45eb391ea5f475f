//! The decoder on real traces of this kernel (tests/fixtures/, made by record.sh), checked
//! against the kernel's own text rendering of the same buffers (expected.txt).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::kernel_text::{self, TextEvent};
use vmscale_trace::{Decoder, EventKind, Kallsyms, ViewTag};

/// Recorded directories between them holding lock contention, scheduling, IPI, cross-CPU
/// call, system call, stack and x86 vector events.
const FIXTURES_WITH_VIEWS: [&str; 3] = ["contention", "ipi-vectors", "overrun"];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// One decoded event, rendered as the kernel would print it.
struct Rendered {
    ts: u64,
    cpu: u32,
    pid: i32,
    name: String,
    body: String,
    stack: Vec<String>,
    common_flags: u64,
    preempt_count: u64,
}

struct Decoded {
    summary: vmscale_trace::DecodeSummary,
    events: Vec<Rendered>,
}

fn decode(name: &str) -> Decoded {
    let decoder = Decoder::open(fixture(name)).unwrap();
    let kallsyms = decoder.kallsyms().unwrap();
    let printk = decoder.printk_strings();
    let mut events = Vec::new();
    let summary = decoder
        .for_each(|event| {
            let (name, body, stack) = kernel_text::render(&event, &kallsyms, &printk);
            events.push(Rendered {
                ts: event.ts(),
                cpu: event.cpu(),
                pid: event.pid(),
                name,
                body,
                stack,
                common_flags: event.u64("common_flags").unwrap(),
                preempt_count: event.u64("common_preempt_count").unwrap(),
            });
        })
        .unwrap();
    Decoded { summary, events }
}

/// Every decoded event equals the kernel's line for it: same order, CPU, pid, time to the
/// microsecond, latency flags, event name, every printed field, and every stack frame's
/// symbol.
fn compare_with_kernel_text(name: &str) -> (Decoded, Vec<TextEvent>) {
    let decoded = decode(name);
    let text = std::fs::read_to_string(fixture(name).join("expected.txt")).unwrap();
    let (entries, expected) = kernel_text::parse(&text);
    assert_eq!(decoded.events.len() as u64, entries, "entries-in-buffer");
    assert_eq!(decoded.events.len(), expected.len());
    let mut mismatches = Vec::new();
    for (index, (ours, theirs)) in decoded.events.iter().zip(&expected).enumerate() {
        let time = kernel_text::kernel_time(ours.ts);
        let same = time == theirs.time
            && ours.cpu == theirs.cpu
            && ours.pid == theirs.pid
            && ours.name == theirs.name
            && ours.body == kernel_text::without_symbol_sizes(&theirs.body)
            && ours.stack == theirs.stack
            && kernel_text::check_flags(ours.common_flags, ours.preempt_count, &theirs.flags)
                .is_ok();
        if !same {
            mismatches.push(format!(
                "#{index}: decoded {time} [{:03}] {} {:#x}/{:#x} {}: {} {:?}\n     kernel  {} [{:03}] {} {} {}: {} {:?}",
                ours.cpu,
                ours.pid,
                ours.common_flags,
                ours.preempt_count,
                ours.name,
                ours.body,
                ours.stack,
                theirs.time,
                theirs.cpu,
                theirs.pid,
                theirs.flags,
                theirs.name,
                theirs.body,
                theirs.stack
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} events differ from the kernel's text:\n{}",
        mismatches.len(),
        expected.len(),
        mismatches[..mismatches.len().min(10)].join("\n")
    );
    (decoded, expected)
}

fn count_by_name(events: &[TextEvent]) -> BTreeMap<&str, usize> {
    let mut counts = BTreeMap::new();
    for event in events {
        *counts.entry(event.name.as_str()).or_default() += 1;
    }
    counts
}

#[test]
fn contention_fixture_matches_the_kernel_text_event_for_event() {
    let (decoded, expected) = compare_with_kernel_text("contention");
    assert_eq!(
        decoded.summary.corrupt_pages(),
        0,
        "{:?}",
        decoded.summary.errors
    );
    assert_eq!(decoded.summary.missed_events(), 0);
    let counts = count_by_name(&expected);
    // The workload produced every kind the fixture is for.
    for kind in [
        "contention_begin",
        "contention_end",
        "<stack trace>",
        "sched_switch",
        "sched_waking",
        "sched_wakeup",
        "sched_wakeup_new",
        "ipi_send_cpu",
        "csd_queue_cpu",
        "csd_function_entry",
        "csd_function_exit",
        "tracing_mark_write",
    ] {
        assert!(
            counts.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} in {counts:?}"
        );
    }
    // The stacktrace trigger adds one stack to every contention_begin.
    assert_eq!(counts["<stack trace>"], counts["contention_begin"]);
}

#[test]
fn ipi_vectors_fixture_matches_the_kernel_text_and_views_each_handler() {
    let (decoded, expected) = compare_with_kernel_text("ipi-vectors");
    assert_eq!(decoded.summary.corrupt_pages(), 0);
    let counts = count_by_name(&expected);
    for kind in [
        "ipi_send_cpu",
        "call_function_single_entry",
        "call_function_single_exit",
        "reschedule_entry",
        "reschedule_exit",
    ] {
        assert!(
            counts.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} in {counts:?}"
        );
    }
    // Every handler event gets its typed view, with the vector its name says.
    let decoder = Decoder::open(fixture("ipi-vectors")).unwrap();
    let mut viewed: BTreeMap<String, usize> = BTreeMap::new();
    decoder
        .for_each(|event| {
            use vmscale_trace::decode::views::IpiVector;
            let (vector, exit) = match event.kind() {
                EventKind::IpiVectorEntry(v) => (v, false),
                EventKind::IpiVectorExit(v) => (v, true),
                _ => return,
            };
            let number = event.i64("vector").unwrap();
            let expected_number = match vector {
                IpiVector::Reschedule => 0xfd,
                IpiVector::CallFunction => 0xfc,
                IpiVector::CallFunctionSingle => 0xfb,
            };
            assert_eq!(number, expected_number, "{}", event.name());
            assert_eq!(event.name().ends_with("_exit"), exit);
            *viewed.entry(event.name().to_string()).or_default() += 1;
        })
        .unwrap();
    for (name, n) in &viewed {
        assert_eq!(counts[name.as_str()], *n, "{name}");
    }
    assert_eq!(
        viewed.values().sum::<usize>(),
        counts
            .iter()
            .filter(|(name, _)| name.starts_with("reschedule_") || name.starts_with("call_function"))
            .map(|(_, n)| n)
            .sum::<usize>()
    );
}

#[test]
fn overrun_fixture_matches_the_kernel_text_and_reports_the_loss() {
    let (decoded, expected) = compare_with_kernel_text("overrun");
    let counts = count_by_name(&expected);
    assert!(
        counts["sys_enter"] > 100 && counts["sys_exit"] > 100,
        "{counts:?}"
    );
    // The writer lapped the reader: the first page of each CPU says how many events the
    // kernel dropped, which is the overrun its stats counted (nothing ran after the read).
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("overrun").join("meta.json")).unwrap(),
    )
    .unwrap();
    for cpu in &decoded.summary.cpus {
        let overrun = meta["lost"][cpu.cpu.to_string()]["overrun"]
            .as_u64()
            .unwrap();
        assert!(overrun > 0);
        assert_eq!(cpu.pages_after_loss, 1, "cpu{}", cpu.cpu);
        assert_eq!(cpu.missed_events, overrun, "cpu{}", cpu.cpu);
        assert_eq!(cpu.losses.len(), 1);
        assert_eq!(cpu.losses[0].page, 0);
        assert_eq!(cpu.losses[0].missed, Some(overrun));
        assert!(cpu.losses[0].ts > 0);
        assert_eq!(cpu.corrupt_pages, 0);
    }
}

#[test]
fn merged_stream_never_goes_back_in_time_and_keeps_every_cpus_order() {
    for name in ["contention", "overrun"] {
        let decoder = Decoder::open(fixture(name)).unwrap();
        let mut merged = Vec::new();
        decoder
            .for_each(|e| merged.push((e.ts(), e.cpu(), e.record().to_vec())))
            .unwrap();
        assert!(
            merged.windows(2).all(|w| w[0].0 <= w[1].0),
            "{name}: time went back"
        );
        assert!(
            merged
                .windows(2)
                .all(|w| w[0].0 < w[1].0 || w[0].1 <= w[1].1),
            "{name}: equal times not in CPU order"
        );
        // Each CPU alone gives the same records in the same order.
        for &cpu in decoder.cpus() {
            let mut alone = Vec::new();
            let mut stream = decoder.events_on(&[cpu]).unwrap();
            while let Some(event) = stream.next_event() {
                let event = event.unwrap();
                alone.push((event.ts(), event.cpu(), event.record().to_vec()));
            }
            let from_merge: Vec<_> = merged.iter().filter(|e| e.1 == cpu).cloned().collect();
            assert!(!alone.is_empty());
            assert_eq!(alone, from_merge, "{name} cpu{cpu}");
        }
        assert!(decoder.events_on(&[99]).is_err());
    }
}

/// Routing by a type's tag before reading its records sends each event where its view
/// would: every record's view has its type's tag.
#[test]
fn every_view_has_its_types_tag() {
    for name in FIXTURES_WITH_VIEWS {
        let decoder = Decoder::open(fixture(name)).unwrap();
        let mut tagged = 0u64;
        decoder
            .for_each(|event| {
                let tag = event.event_type().view_tag();
                assert_eq!(event.kind().tag(), tag, "{name}: {}", event.name());
                if tag != ViewTag::Other {
                    tagged += 1;
                }
            })
            .unwrap();
        assert!(tagged > 0, "{name}");
    }
}

#[test]
fn typed_views_and_generic_fields_agree() {
    let decoder = Decoder::open(fixture("contention")).unwrap();
    let catalog = decoder.catalog();
    for event_type in catalog.iter() {
        assert!(
            event_type.has_view(),
            "{}:{} has no view",
            event_type.system,
            event_type.name()
        );
    }
    let prev_pid = catalog
        .find("sched", "sched_switch")
        .unwrap()
        .field("prev_pid")
        .unwrap();
    let mut checked = BTreeMap::<&str, usize>::new();
    decoder
        .for_each(|event| {
            let kind = event.kind();
            let name = match kind {
                EventKind::SchedSwitch(s) => {
                    assert_eq!(prev_pid.i64(event.record()), Some(s.prev_pid as i64));
                    assert_eq!(event.str("next_comm"), Some(s.next_comm.as_bytes()));
                    assert_eq!(event.i64("next_prio"), Some(s.next_prio as i64));
                    // The task switched out is the one running.
                    assert_eq!(s.prev_pid, event.pid());
                    "switch"
                }
                EventKind::ContentionBegin(b) => {
                    assert_eq!(event.u64("lock_addr"), Some(b.lock_addr));
                    assert!(b.lock_addr >= 0xffff_8000_0000_0000, "{:#x}", b.lock_addr);
                    "begin"
                }
                EventKind::IpiSendCpumask(m) => {
                    assert!(m.cpumask.count() > 0);
                    assert_eq!(event.bytes("cpumask"), Some(m.cpumask.0));
                    "cpumask"
                }
                EventKind::Print(p) => {
                    assert!(p.text().starts_with("vmscale fixture contention"));
                    assert_eq!(event.str("buf").map(|b| b.len()), Some(p.message.len() + 1));
                    "print"
                }
                EventKind::KernelStack(s) => {
                    assert!(!s.is_empty());
                    // `size` counts the addresses present, which may exceed the 8 declared.
                    assert_eq!(event.i64("size"), Some(s.len() as i64));
                    assert_eq!(event.record().len(), 16 + 8 * s.len());
                    "stack"
                }
                _ => "other",
            };
            *checked.entry(name).or_default() += 1;
        })
        .unwrap();
    for name in ["switch", "begin", "print", "stack"] {
        assert!(checked.get(name).copied().unwrap_or(0) > 0, "{checked:?}");
    }
}

#[test]
fn some_stacks_are_deeper_than_the_eight_declared_slots() {
    let decoder = Decoder::open(fixture("contention")).unwrap();
    let mut deepest = 0;
    decoder
        .for_each(|event| {
            if let EventKind::KernelStack(stack) = event.kind() {
                deepest = deepest.max(stack.len());
            }
        })
        .unwrap();
    assert!(deepest > 8, "deepest stack {deepest}");
}

#[test]
fn stack_frames_symbolize_to_the_functions_the_kernel_printed() {
    let decoder = Decoder::open(fixture("contention")).unwrap();
    let kallsyms: Kallsyms = decoder.kallsyms().unwrap();
    let mut frames = 0;
    decoder
        .for_each(|event| {
            if let EventKind::KernelStack(stack) = event.kind() {
                for address in stack.iter() {
                    let symbol = kallsyms.symbolize(address).expect("frame in kernel text");
                    // Return addresses: past the call, or at the next function after a
                    // call that does not return (start_kernel -> __pfx_clear_bss+0x0).
                    assert!(
                        symbol.offset > 0 || symbol.name.starts_with("__pfx_"),
                        "{symbol}"
                    );
                    assert_eq!(symbol.module, None);
                    frames += 1;
                }
            }
        })
        .unwrap();
    assert!(frames > 50, "{frames} frames");
    let name = kallsyms
        .symbolize(kallsyms.address_of("_raw_spin_lock").unwrap() + 4)
        .unwrap();
    assert_eq!(name.to_string(), "_raw_spin_lock+0x4");
}

#[test]
fn fixture_meta_is_what_the_recorder_writes() {
    for name in ["contention", "overrun"] {
        let text = std::fs::read_to_string(fixture(name).join("meta.json")).unwrap();
        let meta: vmscale_trace::record::recorder::TraceMeta = serde_json::from_str(&text).unwrap();
        let decoder = Decoder::open(fixture(name)).unwrap();
        assert_eq!(decoder.cpus(), meta.cpus.as_slice());
        assert_eq!(decoder.page_layout().page_size, meta.page_size);
        assert_eq!(decoder.clock(), Some("mono"));
        for (cpu, pages) in &meta.pages {
            let size = std::fs::metadata(fixture(name).join(format!("cpu{cpu}.raw")))
                .unwrap()
                .len();
            assert_eq!(size, pages * meta.page_size as u64);
        }
    }
}

#[test]
fn equal_times_come_out_in_cpu_order_then_buffer_order() {
    // Both CPUs hold the very same pages: every time appears once per CPU.
    let dir = std::env::temp_dir().join(format!("vmscale-trace-ties-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("formats/raw_syscalls")).unwrap();
    std::fs::create_dir_all(dir.join("formats/sched")).unwrap();
    std::fs::create_dir_all(dir.join("formats/ftrace")).unwrap();
    let source = fixture("overrun");
    for file in [
        "meta.json",
        "header_page",
        "header_event",
        "kallsyms",
        "formats/raw_syscalls/sys_enter",
        "formats/raw_syscalls/sys_exit",
        "formats/sched/sched_switch",
        "formats/ftrace/print",
        "formats/ftrace/kernel_stack",
    ] {
        std::fs::copy(source.join(file), dir.join(file)).unwrap();
    }
    std::fs::copy(source.join("cpu0.raw"), dir.join("cpu0.raw")).unwrap();
    std::fs::copy(source.join("cpu0.raw"), dir.join("cpu1.raw")).unwrap();

    let mut merged = Vec::new();
    Decoder::open(&dir)
        .unwrap()
        .for_each(|e| merged.push((e.ts(), e.cpu(), e.record().to_vec())))
        .unwrap();
    let alone: Vec<_> = merged.iter().filter(|e| e.1 == 0).collect();
    assert!(alone.len() > 100);
    // Runs of equal times: all of cpu0's records of that time, then cpu1's, each in its
    // buffer order.
    let mut index = 0;
    while index < merged.len() {
        let ts = merged[index].0;
        let run: Vec<_> = merged[index..].iter().take_while(|e| e.0 == ts).collect();
        let half = run.len() / 2;
        assert_eq!(run.len() % 2, 0);
        assert!(run[..half].iter().all(|e| e.1 == 0) && run[half..].iter().all(|e| e.1 == 1));
        for (a, b) in run[..half].iter().zip(&run[half..]) {
            assert_eq!(a.2, b.2);
        }
        index += run.len();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
