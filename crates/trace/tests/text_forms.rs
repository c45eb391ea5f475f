//! Text as people paste it: `trace-cmd report` in its default, `-R` and `-l` forms, the
//! kernel's and trace-cmd's function tracer lines, mail-quoted text, and real traces from
//! public repositories (tests/fixtures/text/README.md).
//!
//! The trace-cmd fixtures are one recording of this kernel rendered four ways: the kernel's
//! own `trace` file of instance A, and `trace-cmd report`, `-R` and `-l` of the .dat that
//! `trace-cmd extract` made of instances A and B. Every form must give the events of the raw
//! fields (`-R`), and their trace directories must decode to the same events.

use std::path::{Path, PathBuf};

use vmscale_trace::text::import::{
    event_system, import_text, Form, SkipReason, TextEvent, TextImport, TextReader,
};
use vmscale_trace::text::trace_dir::{write_trace_dir, DirSink, MemorySink};
use vmscale_trace::{Decoder, EventKind};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/text")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

/// The lines of one instance's buffer in a trace-cmd report (each carries `NAME: `), with
/// the stack frames that follow them; the header lines too.
fn instance_lines(text: &str, instance: &str) -> String {
    let prefix = format!("{instance}:");
    let mut keep = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("=>") {
            if keep {
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        keep = line.starts_with(&prefix) || !line.starts_with("vmscale-");
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// An event as every form must give it: what the trace-cmd plugin forms and the latency
/// columns leave out is left out here too (the `+` of a preempted task's state, the size of
/// a symbol, comms past 8 characters in `-l`).
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    ts_ns: u64,
    cpu: u32,
    pid: i32,
    name: String,
    /// Fields of the events the analyses read; others differ between printers (trace-cmd's
    /// kvm plugin, `-R`'s raw values) and are compared by name and task only.
    fields: Vec<(String, String)>,
    stack_len: usize,
}

fn seen(event: &TextEvent) -> Seen {
    let analysed = event_system(&event.name).is_some();
    let fields = if analysed {
        event
            .fields
            .iter()
            .map(|(name, value)| {
                let value = match name.as_str() {
                    "prev_state" => value.trim_end_matches('+').to_string(),
                    // `%pS` prints `f+0x20/0x60`, libtraceevent `f+0x20`.
                    "callsite" | "callback" | "func" => {
                        value.split('/').next().unwrap_or(value).to_string()
                    }
                    _ => value.clone(),
                };
                (name.clone(), value)
            })
            .collect()
    } else {
        Vec::new()
    };
    Seen {
        ts_ns: event.ts_ns,
        cpu: event.cpu,
        pid: event.pid,
        name: event.name.clone(),
        fields,
        // `-R` prints kernel_stack's declared `caller[8]`, not the frames past it.
        stack_len: event.stack.len().min(8),
    }
}

fn clean(import: &TextImport, what: &str) {
    assert!(import.skipped.is_empty(), "{what}: {:#?}", import.skipped);
}

#[test]
fn every_trace_cmd_form_gives_the_events_of_its_raw_fields() {
    let raw = import_text(&instance_lines(
        &read("trace-cmd/report-raw.txt"),
        "vmscale-a",
    ));
    clean(&raw, "-R");
    let reference: Vec<Seen> = raw.events.iter().map(seen).collect();
    assert!(reference.len() > 100, "{}", reference.len());
    let count = |name: &str| reference.iter().filter(|e| e.name == name).count();
    for name in [
        "contention_begin",
        "contention_end",
        "sched_switch",
        "sched_wakeup",
        "ipi_send_cpu",
        "kvm_pio",
        "kvm_userspace_exit",
        "tracing_mark_write",
    ] {
        assert!(count(name) > 0, "no {name} in the recording");
    }
    // Every contention_begin carried a stack (the trigger), and -R gives its addresses.
    let begins: Vec<&TextEvent> = raw
        .events
        .iter()
        .filter(|e| e.name == "contention_begin")
        .collect();
    assert!(begins.iter().all(|e| e.stack.len() > 3), "{begins:#?}");
    assert!(begins[0].stack[0].starts_with("0xffffffff"));

    for (form, text) in [
        ("kernel", read("trace-cmd/kernel.txt")),
        (
            "report",
            instance_lines(&read("trace-cmd/report.txt"), "vmscale-a"),
        ),
        (
            "report -l",
            instance_lines(&read("trace-cmd/report-latency.txt"), "vmscale-a"),
        ),
    ] {
        let import = import_text(&text);
        clean(&import, form);
        let ours: Vec<Seen> = import.events.iter().map(seen).collect();
        assert_eq!(ours.len(), reference.len(), "{form}: event count");
        for (index, (a, b)) in ours.iter().zip(&reference).enumerate() {
            assert_eq!(a, b, "{form}: event #{index}");
        }
        for (a, b) in import.events.iter().zip(&raw.events) {
            // The latency columns cut the comm to 8 characters.
            assert!(b.comm.starts_with(&a.comm), "{form}: {} {}", a.comm, b.comm);
            match form {
                "report" => assert_eq!(a.irq_info, None),
                _ => assert!(a.irq_info.is_some(), "{form}"),
            }
        }
        // The kernel and trace-cmd name the frames alike.
        if form != "kernel" {
            let kernel = import_text(&read("trace-cmd/kernel.txt"));
            for (a, b) in import.events.iter().zip(&kernel.events) {
                let names = |stack: &[String]| -> Vec<String> {
                    stack
                        .iter()
                        .map(|f| f.split([' ', '+']).next().unwrap().to_string())
                        .collect()
                };
                assert_eq!(names(&a.stack), names(&b.stack), "{form}");
            }
        }
    }

    // A sample, field by field, as the kernel's print formats give it.
    let switch = raw
        .events
        .iter()
        .find(|e| e.name == "sched_switch" && e.field("prev_state") == Some("D"))
        .or_else(|| raw.events.iter().find(|e| e.name == "sched_switch"))
        .unwrap();
    let names: Vec<&str> = switch.fields.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "prev_comm",
            "prev_pid",
            "prev_prio",
            "prev_state",
            "next_comm",
            "next_pid",
            "next_prio"
        ]
    );
    let begin = begins[0];
    assert!(
        ["SPIN", "READ", "WRITE", "MUTEX"]
            .iter()
            .any(|f| begin.field("flags").unwrap().contains(f)),
        "{begin:?}"
    );
    let marker = raw
        .events
        .iter()
        .find(|e| e.name == "tracing_mark_write")
        .unwrap();
    assert_eq!(marker.field("text"), Some("vmscale fixture start"));
}

/// The events a trace directory decodes to, as the decoder sees them.
fn decoded(text: &str, name: &str) -> Vec<(u64, u32, i32, String, Option<u64>, usize)> {
    let dir =
        std::env::temp_dir().join(format!("vmscale-text-forms-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut sink = DirSink::new(&dir).unwrap();
    let summary = write_trace_dir(TextReader::new(text.as_bytes()), &mut sink).unwrap();
    assert_eq!(
        summary.skipped_lines(),
        0,
        "{name}: {:?}",
        summary.warnings()
    );
    let mut events: Vec<(u64, u32, i32, String, Option<u64>, usize)> = Vec::new();
    Decoder::open(&dir)
        .unwrap()
        .for_each(|event| {
            if let EventKind::KernelStack(stack) = event.kind() {
                let owner = events
                    .iter_mut()
                    .rev()
                    .find(|e| e.1 == event.cpu() && e.2 == event.pid())
                    .expect("a stack follows its event");
                // `-R` prints kernel_stack's declared `caller[8]`, not the frames past it.
                owner.5 = stack.len().min(8);
                return;
            }
            let lock = match event.kind() {
                EventKind::ContentionBegin(b) => Some(b.lock_addr),
                EventKind::SchedSwitch(s) => Some(s.prev_state as u64 & 0xff),
                _ => None,
            };
            events.push((
                event.ts() / 1000,
                event.cpu(),
                event.pid(),
                event.name().to_string(),
                lock,
                0,
            ));
        })
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    events
}

#[test]
fn every_form_writes_a_trace_directory_that_decodes_to_the_same_events() {
    let reference = decoded(&read("trace-cmd/kernel.txt"), "kernel");
    assert!(reference
        .iter()
        .any(|e| e.3 == "contention_begin" && e.5 > 3));
    for (form, file) in [
        ("report", "trace-cmd/report.txt"),
        ("raw", "trace-cmd/report-raw.txt"),
        ("latency", "trace-cmd/report-latency.txt"),
    ] {
        let ours = decoded(&instance_lines(&read(file), "vmscale-a"), form);
        assert_eq!(ours, reference, "{form}");
    }
}

#[test]
fn a_report_of_two_instances_reads_both_and_says_what_it_is() {
    for (file, option) in [
        ("trace-cmd/report.txt", ""),
        ("trace-cmd/report-raw.txt", " -R"),
        ("trace-cmd/report-latency.txt", " -l"),
    ] {
        let text = read(file);
        let a = import_text(&instance_lines(&text, "vmscale-a"))
            .events
            .len();
        let b = import_text(&instance_lines(&text, "vmscale-b"))
            .events
            .len();
        assert!(b > 0, "{file}");
        let mut reader = TextReader::new(text.as_bytes());
        let items: Vec<_> = reader.by_ref().collect();
        let events = items
            .iter()
            .filter(|i| matches!(i, vmscale_trace::text::import::Item::Event(_)))
            .count();
        assert_eq!(events, a + b, "{file}");
        assert_eq!(reader.header_cpus(), Some(2));
        let forms = reader.forms();
        assert!(forms.contains(Form::TraceCmd), "{file}: {forms:?}");
        assert_eq!(
            forms.describe(),
            format!("trace-cmd report{option} output"),
            "{file}"
        );
    }
    let kernel_text = read("trace-cmd/kernel.txt");
    let mut kernel = TextReader::new(kernel_text.as_bytes());
    kernel.by_ref().for_each(drop);
    assert_eq!(kernel.forms().describe(), "the kernel's trace text");
}

/// Every line quoted once or twice, as replies quote a report.
fn quote(text: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(index, line)| {
            let mark = if index % 3 == 2 { ">> " } else { "> " };
            format!("{mark}{line}\n")
        })
        .collect()
}

#[test]
fn mail_quoted_text_reads_like_the_text() {
    for file in [
        "trace-cmd/kernel.txt",
        "trace-cmd/report.txt",
        "trace-cmd/report-raw.txt",
        "trace-cmd/report-latency.txt",
        "events/default.txt",
        "events/latency-verbose.txt",
        "graph/abstime-proc.txt",
        "public/linux-ftrace-rst.txt",
        "public/trace-cmd-report-man.txt",
        "public/linux-ftrace-irqsoff-stacks.txt",
        "public/linux-ftrace-trace-options.txt",
        "public/linux-histogram-stack-offsets.txt",
        "public/perf-tools-kprobe-stack.txt",
        "public/catapult-trivial-systrace.html",
        "public/trace-cmd-record-funcgraph.txt",
    ] {
        let text = read(file);
        let plain = import_text(&text);
        let quoted = import_text(&quote(&text));
        assert_eq!(quoted.events, plain.events, "{file}");
        assert_eq!(quoted.calls, plain.calls, "{file}");
        assert_eq!(quoted.lost, plain.lost, "{file}");
        assert_eq!(quoted.skipped, plain.skipped, "{file}");
        assert!(
            !plain.events.is_empty() || !plain.calls.is_empty(),
            "{file}"
        );
    }
    // A reply as it was sent: prose around a quoted excerpt of the report.
    let reply = import_text(&read("trace-cmd/report-quoted.txt"));
    let excerpt: String = read("trace-cmd/report.txt")
        .lines()
        .take(40)
        .map(|l| format!("{l}\n"))
        .collect();
    let plain = import_text(&excerpt);
    // The reply has three lines before the report.
    let moved: Vec<TextEvent> = plain
        .events
        .iter()
        .map(|e| TextEvent {
            line: e.line + 3,
            ..e.clone()
        })
        .collect();
    assert_eq!(reply.events, moved);
    assert!(plain.events.len() > 10, "{}", plain.events.len());
    let skipped: Vec<SkipReason> = reply.skipped.iter().map(|s| s.reason).collect();
    assert!(
        skipped.iter().all(|r| *r == SkipReason::NotTrace),
        "{skipped:?}"
    );
    let reply_text = read("trace-cmd/report-quoted.txt");
    let mut reader = TextReader::new(reply_text.as_bytes());
    reader.by_ref().for_each(drop);
    assert_eq!(
        reader.forms().describe(),
        "trace-cmd report output, mail-quoted"
    );
}

/// What one public text gives: events by name, function tracer calls, stacks, and the
/// lines skipped by reason.
struct Expect {
    file: &'static str,
    events: usize,
    functions: usize,
    /// function_graph calls with durations.
    calls: usize,
    stacks: usize,
    analysed: u64,
    skipped: &'static [(SkipReason, usize)],
    forms: &'static str,
}

#[test]
fn public_texts_read_with_the_events_they_hold() {
    let expected = [
        Expect {
            // 8 + 6 + 5 function calls, then 2 calls and 8 events in the wakeup_rt trace,
            // whose two `0:120:R ==> [002] 5882: 94:R sleep` lines are the tracer's own
            // notes of the wakeup and the switch; `[...]`, `no pid`, `3111` are prose.
            file: "public/linux-ftrace-rst.txt",
            events: 8 + 6 + 5 + 2 + 8,
            functions: 8 + 6 + 5 + 2,
            calls: 0,
            stacks: 0,
            analysed: 1,
            skipped: &[(SkipReason::NotTrace, 3), (SkipReason::EventName, 2)],
            forms: "the kernel's trace text (latency-format) with function tracer lines",
        },
        Expect {
            // 13 + 11 + 11 + 8 event lines; the doc's `next_prio=1 20` is not a number, and
            // its prose (4 lines), two `[...]` and the average latency are no trace lines.
            file: "public/trace-cmd-report-man.txt",
            events: 13 + 11 + 11 + 8,
            functions: 11,
            calls: 0,
            stacks: 0,
            analysed: 19 - 1,
            skipped: &[(SkipReason::NotTrace, 7), (SkipReason::Field, 1)],
            forms: "trace-cmd report output with function tracer lines",
        },
        Expect {
            // The irqsoff and preemptoff examples: three function tracer lines each, and a
            // `<stack trace>` that belongs to the last of them.
            file: "public/linux-ftrace-irqsoff-stacks.txt",
            events: 3 + 3,
            functions: 3 + 3,
            calls: 0,
            stacks: 2,
            analysed: 0,
            skipped: &[],
            forms: "the kernel's trace text (latency-format) with function tracer lines",
        },
        Expect {
            // Four calls of simple_strtoul (print-parent, noprint-parent, sym-offset,
            // sym-addr); the four option names and the wrapped half of the sym-userobj line
            // are no trace lines, and its first half is a user stack, no function call.
            file: "public/linux-ftrace-trace-options.txt",
            events: 4,
            functions: 4,
            calls: 0,
            stacks: 0,
            analysed: 0,
            skipped: &[(SkipReason::NotTrace, 5), (SkipReason::EventName, 1)],
            forms: "the kernel's trace text with function tracer lines",
        },
        Expect {
            // Two synthetic block_lat events whose `stack=STACK:` field the kernel prints
            // as the ten ` => ` lines after each: frames of a field, not of a
            // `<stack trace>` event, so they are not taken for one.
            file: "public/linux-histogram-stack-offsets.txt",
            events: 2,
            functions: 0,
            calls: 0,
            stacks: 0,
            analysed: 0,
            skipped: &[(SkipReason::OrphanFrame, 20)],
            forms: "the kernel's trace text",
        },
        Expect {
            // Three kprobe events, each with its stack; the tool's banner is no trace line
            // (its command line is a `#` comment).
            file: "public/perf-tools-kprobe-stack.txt",
            events: 3,
            functions: 0,
            calls: 0,
            stacks: 3,
            analysed: 0,
            skipped: &[(SkipReason::NotTrace, 1)],
            forms: "the kernel's trace text",
        },
        Expect {
            // trace-cmd's function_graph form: five do_IRQ calls with their durations, an
            // irq_handler_entry inside each; then a sched_switch (the one event analysed)
            // with its kernel_stack. The two shell prompts are `#` lines.
            file: "public/trace-cmd-record-funcgraph.txt",
            events: 5 + 1,
            functions: 0,
            calls: 5,
            stacks: 1,
            analysed: 1,
            skipped: &[],
            forms: "trace-cmd report output with function_graph output",
        },
        Expect {
            // systrace HTML of 2012: the trace lines sit in a JavaScript string; the old
            // kernel named the marker event `0`. The HTML around them is no trace text.
            file: "public/catapult-trivial-systrace.html",
            events: 4,
            functions: 0,
            calls: 0,
            stacks: 0,
            analysed: 0,
            skipped: &[(SkipReason::NotTrace, 29)],
            forms: "the kernel's trace text",
        },
    ];
    for expect in expected {
        let text = read(expect.file);
        let import = import_text(&text);
        let what = expect.file;
        assert_eq!(import.events.len(), expect.events, "{what}");
        let functions = import
            .events
            .iter()
            .filter(|e| e.name == "function")
            .count();
        assert_eq!(functions, expect.functions, "{what}");
        assert_eq!(import.calls.len(), expect.calls, "{what}");
        let stacks = import.events.iter().filter(|e| !e.stack.is_empty()).count();
        assert_eq!(stacks, expect.stacks, "{what}");

        let mut sink = MemorySink::default();
        let mut reader = TextReader::new(text.as_bytes());
        let summary = write_trace_dir(&mut reader, &mut sink).unwrap();
        assert_eq!(summary.converted_events(), expect.analysed, "{what}");
        assert_eq!(summary.function_calls, expect.functions as u64, "{what}");
        assert_eq!(summary.stacks, expect.stacks as u64, "{what}");
        let skipped: Vec<(SkipReason, usize)> = summary
            .skipped
            .iter()
            .map(|(reason, tally)| (*reason, tally.count as usize))
            .collect();
        assert_eq!(skipped, expect.skipped, "{what}: {:?}", summary.warnings());
        assert_eq!(reader.forms().describe(), expect.forms, "{what}");
    }
}

/// The latency tracers' own findings in the kernel's documentation: each header's tracer,
/// worst latency, CPU, task and where it started and ended.
#[test]
fn latency_tracer_headlines_of_the_public_texts() {
    let headlines = |file: &str| -> Vec<String> {
        let text = read(file);
        let mut reader = TextReader::new(text.as_bytes());
        reader.by_ref().for_each(drop);
        reader
            .latency_headlines()
            .iter()
            .map(|h| h.describe())
            .collect()
    };
    assert_eq!(
        headlines("public/linux-ftrace-irqsoff-stacks.txt"),
        [
            "irqsoff: the worst latency was 16 us, on CPU 0, in swapper/0-0, from \
             run_timer_softirq to run_timer_softirq (kernel 3.8.0-test+)",
            "preemptoff: the worst latency was 46 us, on CPU 1, in sshd-1991, from do_IRQ to \
             do_IRQ (kernel 3.8.0-test+)",
        ]
    );
    // wakeup_rt prints no start and end; the function tracer's pastes have no headline.
    assert_eq!(
        headlines("public/linux-ftrace-rst.txt"),
        ["wakeup_rt: the worst latency was 6 us, on CPU 2, in sleep-5882 (kernel 3.8.0-test+)"]
    );
    // This machine's latency-format renderings of a nop-tracer buffer: no headline.
    assert!(headlines("events/latency.txt").is_empty());
    assert!(headlines("events/latency-verbose.txt").is_empty());
}
