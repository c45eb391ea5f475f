//! The text importer and the trace directory it writes, on the kernel's own text renderings
//! of real recordings (checked against the binary decode of the same buffers) and on
//! hand-written function_graph output (tests/fixtures/text/README.md).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Read;
use std::path::{Path, PathBuf};

use common::kernel_text;
use vmscale_trace::decode::views::contention_flags;
use vmscale_trace::text::import::{
    import_text, CallStart, GraphCall, Item, SkipReason, TextClock, TextEvent, TextReader,
};
use vmscale_trace::text::trace_dir::{write_trace_dir, DirSink, MemorySink, Sink};
use vmscale_trace::{Decoder, EventKind};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

/// What the binary decode says about one event, in the terms the text gives.
#[derive(Debug, PartialEq, Eq)]
struct Expected {
    usecs: u64,
    cpu: u32,
    pid: i32,
    name: String,
    lock: Option<(u64, u32)>,
    switch: Option<(i32, i32)>,
    stack_len: usize,
}

/// The binary decode, with each kernel_stack folded into the event before it on its CPU, as
/// the text shows it.
fn decode_binary(dir: &Path) -> Vec<Expected> {
    let mut events: Vec<Expected> = Vec::new();
    Decoder::open(dir)
        .unwrap()
        .for_each(|event| {
            let kind = event.kind();
            if let EventKind::KernelStack(stack) = kind {
                let owner = events
                    .iter_mut()
                    .rev()
                    .find(|e| e.cpu == event.cpu() && e.pid == event.pid())
                    .expect("a stack follows its event");
                owner.stack_len = stack.len();
                return;
            }
            events.push(Expected {
                // The kernel prints ns rounded to the nearest microsecond.
                usecs: (event.ts() + 500) / 1000,
                cpu: event.cpu(),
                pid: event.pid(),
                // The marker's event is ftrace:print, which the text names after the write.
                name: match event.name() {
                    "print" => "tracing_mark_write".to_string(),
                    name => name.to_string(),
                },
                lock: match kind {
                    EventKind::ContentionBegin(b) => Some((b.lock_addr, b.flags)),
                    _ => None,
                },
                switch: match kind {
                    EventKind::SchedSwitch(s) => Some((s.prev_pid, s.next_pid)),
                    _ => None,
                },
                stack_len: 0,
            });
        })
        .unwrap();
    events
}

fn flag_bits(flags: &str) -> u32 {
    flags
        .split('|')
        .map(|name| match name {
            "SPIN" => contention_flags::SPIN,
            "READ" => contention_flags::READ,
            "WRITE" => contention_flags::WRITE,
            "RT" => contention_flags::RT,
            "PERCPU" => contention_flags::PERCPU,
            "MUTEX" => contention_flags::MUTEX,
            other => panic!("unknown flag {other}"),
        })
        .fold(0, |bits, bit| bits | bit)
}

fn from_text(event: &TextEvent) -> Expected {
    let int = |name: &str| event.field(name).unwrap().parse::<i32>().unwrap();
    Expected {
        usecs: event.ts_ns / 1000,
        cpu: event.cpu,
        pid: event.pid,
        name: event.name.clone(),
        lock: (event.name == "contention_begin").then(|| {
            (
                u64::from_str_radix(event.field("lock_addr").unwrap(), 16).unwrap(),
                flag_bits(event.field("flags").unwrap()),
            )
        }),
        switch: (event.name == "sched_switch").then(|| (int("prev_pid"), int("next_pid"))),
        stack_len: event.stack.len(),
    }
}

#[test]
fn contention_text_matches_the_binary_decode() {
    let dir = fixture("contention");
    let import = import_text(&read("contention/expected.txt"));
    assert!(import.skipped.is_empty(), "{:#?}", import.skipped);

    let binary = decode_binary(&dir);
    let imported: Vec<Expected> = import.events.iter().map(from_text).collect();
    assert_eq!(imported.len(), binary.len());
    for (index, (ours, theirs)) in imported.iter().zip(&binary).enumerate() {
        assert_eq!(ours, theirs, "event #{index}");
    }

    // Every contention_begin carries its stack, named as the kernel symbolized it.
    let begins: Vec<&TextEvent> = import
        .events
        .iter()
        .filter(|e| e.name == "contention_begin")
        .collect();
    assert!(!begins.is_empty());
    for begin in begins {
        assert_eq!(
            begin.stack.first().map(String::as_str),
            Some("trace_event_raw_event_contention_begin")
        );
    }
    let marker = &import.events[0];
    assert_eq!(
        marker.field("text"),
        Some("vmscale fixture contention start")
    );
    assert_eq!(marker.irq_info.as_deref(), Some("...1."));
}

#[test]
fn text_without_irq_info_imports_the_same_events() {
    let text = read("contention/expected.txt");
    let with = import_text(&text);
    // Drop the irq-info column, as with `echo 0 > options/irq-info`.
    let without: String = text
        .lines()
        .map(|line| {
            let Some(close) = line.find("] ").filter(|_| !line.starts_with('#')) else {
                return format!("{line}\n");
            };
            let rest = line[close + 2..].trim_start();
            match rest.split_once(' ') {
                Some((_, after)) if !line.trim_start().starts_with("=>") => {
                    format!("{} {}\n", &line[..close + 1], after.trim_start())
                }
                _ => format!("{line}\n"),
            }
        })
        .collect();
    let without = import_text(&without);
    assert!(without.skipped.is_empty(), "{:#?}", without.skipped);
    assert_eq!(without.events.len(), with.events.len());
    for (a, b) in without.events.iter().zip(&with.events) {
        assert_eq!(a.irq_info, None);
        assert_eq!(
            (&a.name, a.ts_ns, a.pid, &a.fields, &a.stack),
            (&b.name, b.ts_ns, b.pid, &b.fields, &b.stack)
        );
    }
}

/// Stack frames without what sym-offset and sym-addr add: the function name.
fn frame_names(stack: &[String]) -> Vec<&str> {
    stack
        .iter()
        .map(|f| f.split(['+', ' ']).next().unwrap())
        .collect()
}

#[test]
fn every_rendering_of_one_recording_imports_the_same_events() {
    let reference = import_text(&read("text/events/default.txt"));
    assert!(reference.skipped.is_empty(), "{:#?}", reference.skipped);
    assert!(reference.events.len() > 200);
    assert!(reference
        .events
        .iter()
        .any(|e| e.name == "contention_begin"));
    for rendering in [
        "no-irq-info",
        "sym-addr",
        "tgid",
        "latency",
        "latency-verbose",
    ] {
        let import = import_text(&read(&format!("text/events/{rendering}.txt")));
        assert!(
            import.skipped.is_empty(),
            "{rendering}: {:#?}",
            import.skipped
        );
        assert_eq!(import.events.len(), reference.events.len(), "{rendering}");
        let first = &import.events[0];
        for (index, (ours, theirs)) in import.events.iter().zip(&reference.events).enumerate() {
            let at = format!("{rendering} event #{index} (line {})", ours.line);
            // The latency format cuts the comm to 8 characters.
            let comm_len = if rendering == "latency" { 8 } else { 16 };
            assert_eq!(
                (ours.cpu, ours.pid, &ours.name, &ours.fields),
                (theirs.cpu, theirs.pid, &theirs.name, &theirs.fields),
                "{at}"
            );
            assert!(theirs.comm.starts_with(&ours.comm), "{at}");
            assert!(ours.comm.len() <= comm_len, "{at}");
            assert_eq!(frame_names(&ours.stack), frame_names(&theirs.stack), "{at}");
            match rendering {
                // Microseconds since the buffer started: the gaps are the same, give or
                // take the rounding of each side.
                "latency" => {
                    assert_eq!(ours.clock, TextClock::SinceStart);
                    let ours_gap = (ours.ts_ns - first.ts_ns) as i64;
                    let theirs_gap = (theirs.ts_ns - reference.events[0].ts_ns) as i64;
                    assert!((ours_gap - theirs_gap).abs() <= 1000, "{at}");
                }
                _ => assert_eq!(ours.ts_ns, theirs.ts_ns, "{at}"),
            }
        }
        if rendering == "sym-addr" {
            let frame = &import
                .events
                .iter()
                .find(|e| !e.stack.is_empty())
                .unwrap()
                .stack[0];
            assert!(frame.contains("+0x") && frame.ends_with('>'), "{frame}");
        }
    }
}

/// Writes the trace directory of `text` into a fresh temporary directory.
fn trace_dir_of(
    text: &str,
    name: &str,
) -> (PathBuf, vmscale_trace::text::trace_dir::TextDirSummary) {
    let dir = std::env::temp_dir().join(format!(
        "vmscale-text-import-test-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let mut sink = DirSink::new(&dir).unwrap();
    let summary = write_trace_dir(TextReader::new(text.as_bytes()), &mut sink).unwrap();
    (dir, summary)
}

/// One decoded event rendered as the kernel prints it.
#[derive(Debug, PartialEq, Eq)]
struct Line {
    time: String,
    cpu: u32,
    pid: i32,
    name: String,
    body: String,
    stack: Vec<String>,
}

fn render_dir(dir: &Path) -> Vec<Line> {
    let decoder = Decoder::open(dir).unwrap();
    let kallsyms = decoder.kallsyms().unwrap();
    let printk = decoder.printk_strings();
    let mut lines = Vec::new();
    let summary = decoder
        .for_each(|event| {
            let (name, body, stack) = kernel_text::render(&event, &kallsyms, &printk);
            lines.push(Line {
                time: kernel_text::kernel_time(event.ts()),
                cpu: event.cpu(),
                pid: event.pid(),
                name,
                body,
                stack,
            });
        })
        .unwrap();
    assert_eq!(summary.corrupt_pages(), 0, "{:?}", summary.errors);
    lines
}

fn kernel_lines(text: &str) -> Vec<Line> {
    kernel_text::parse(text)
        .1
        .into_iter()
        .map(|e| Line {
            time: e.time,
            cpu: e.cpu,
            pid: e.pid,
            name: e.name,
            body: kernel_text::without_symbol_sizes(&e.body),
            stack: e.stack,
        })
        .collect()
}

fn assert_same_lines(ours: &[Line], theirs: &[Line], what: &str, compare_time: bool) {
    assert_eq!(ours.len(), theirs.len(), "{what}: event count");
    let mismatches: Vec<String> = ours
        .iter()
        .zip(theirs)
        .enumerate()
        .filter(|(_, (a, b))| {
            let time_ok = !compare_time || a.time == b.time;
            !(time_ok
                && (a.cpu, a.pid, &a.name, &a.body, &a.stack)
                    == (b.cpu, b.pid, &b.name, &b.body, &b.stack))
        })
        .take(5)
        .map(|(index, (a, b))| format!("#{index}:\n  ours   {a:?}\n  kernel {b:?}"))
        .collect();
    assert!(mismatches.is_empty(), "{what}:\n{}", mismatches.join("\n"));
}

/// Text -> trace directory -> decoder -> the kernel's rendering again: every event comes back
/// in the same order with the same CPU, pid, time to the microsecond, every printed field and
/// every stack frame's name. The recordings' own binary decodes render to the same lines
/// (decode_fixtures.rs), so the directory holds what the binary recording held.
#[test]
fn text_round_trips_through_a_trace_directory() {
    for (name, text) in [
        ("contention", read("contention/expected.txt")),
        ("overrun", read("overrun/expected.txt")),
        ("ipi-vectors", read("ipi-vectors/expected.txt")),
        ("events", read("text/events/default.txt")),
    ] {
        let (dir, summary) = trace_dir_of(&text, name);
        let rendered = render_dir(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            summary.skipped_lines(),
            0,
            "{name}: {:?}",
            summary.warnings()
        );
        assert!(summary.unconverted.is_empty(), "{name}");
        assert_eq!(summary.reordered, 0, "{name}");
        assert_same_lines(&rendered, &kernel_lines(&text), name, true);
    }

    // Every other rendering of the events recording gives the same directory.
    let reference = kernel_lines(&read("text/events/default.txt"));
    for rendering in [
        "no-irq-info",
        "sym-addr",
        "tgid",
        "latency-verbose",
        "latency",
    ] {
        let (dir, summary) =
            trace_dir_of(&read(&format!("text/events/{rendering}.txt")), rendering);
        let rendered = render_dir(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(summary.skipped_lines(), 0, "{rendering}");
        // The latency format's times count from the buffer's start.
        assert_same_lines(&rendered, &reference, rendering, rendering != "latency");
    }
}

#[test]
fn the_binary_recording_and_the_text_directory_agree_on_every_lock_wait() {
    let binary = decode_binary(&fixture("text/events"));
    let (dir, _) = trace_dir_of(&read("text/events/default.txt"), "agree");
    let text = decode_binary(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(text, binary);
    assert!(binary.iter().any(|e| e.lock.is_some() && e.stack_len > 5));
}

fn call(import: &[GraphCall], index: usize) -> (&str, Option<u32>, u32, u64) {
    let c = &import[index];
    (c.name.as_str(), c.cpu, c.depth, c.duration_ns)
}

#[test]
fn function_graph_defaults_give_calls_with_durations() {
    let import = import_text(&read("text/graph/default.txt"));
    let calls: Vec<(&str, Option<u32>, u32, u64)> = (0..import.calls.len())
        .map(|i| call(&import.calls, i))
        .collect();
    assert_eq!(
        calls,
        [
            ("kvm_mmu_commit_zap_page", Some(1), 3, 2_054),
            ("kvm_mmu_zap_all_fast", Some(1), 2, 31_226),
            ("_raw_write_lock", Some(1), 4, 342),
            ("kvm_mmu_unlink_parents", Some(1), 5, 187),
            ("kvm_mmu_page_unlink_children", Some(1), 5, 1_043),
            ("__kvm_mmu_prepare_zap_page", Some(1), 4, 4_871),
            ("hrtimer_interrupt", Some(1), 5, 8_021),
            ("__sysvec_apic_timer_interrupt", Some(1), 4, 9_310),
            ("_raw_read_lock", Some(0), 3, 1_795_244),
            ("kvm_mmu_zap_all", Some(1), 3, 1_843_115),
            ("kvm_arch_flush_shadow_all", Some(1), 2, 1_851_532),
            ("kvm_tdp_page_fault", Some(0), 2, 1_802_913),
            ("kvm_mmu_page_fault", Some(0), 1, 1_803_777),
            ("kvm_vm_release [kvm]", Some(0), 0, 14_791_992_000),
            ("process_one_work", Some(1), 0, 6_500),
        ]
    );
    // Before the context switch nobody was named on CPU 1; after it, the new task was.
    assert_eq!(import.calls[0].pid, None);
    let work = &import.calls[14];
    assert_eq!(
        (work.pid, work.comm.as_deref()),
        (Some(187), Some("kworker"))
    );
    assert!(import.calls.iter().all(|c| c.start.is_none()));
    let skipped: Vec<(usize, SkipReason)> =
        import.skipped.iter().map(|s| (s.line, s.reason)).collect();
    assert_eq!(
        skipped,
        [
            (21, SkipReason::GraphEventNoTime),
            (34, SkipReason::GraphUnmatched),
            (35, SkipReason::GraphUnreturned),
        ]
    );
    assert!(import.events.is_empty());
}

/// A call as the abstime-proc fixture checks it: name, depth, duration, start, pid.
type CallRow<'a> = (&'a str, u32, u64, Option<CallStart>, Option<i32>);

#[test]
fn function_graph_with_times_and_tasks_gives_events_too() {
    let import = import_text(&read("text/graph/abstime-proc.txt"));
    assert!(import.skipped.is_empty(), "{:#?}", import.skipped);
    let at = |us: u64| 9_099_024_151_000 + us * 1000;
    let calls: Vec<CallRow> = import
        .calls
        .iter()
        .map(|c| (c.name.as_str(), c.depth, c.duration_ns, c.start, c.pid))
        .collect();
    assert_eq!(
        calls,
        [
            (
                "_raw_write_lock",
                2,
                342,
                Some(CallStart::Absolute(at(21))),
                Some(14856)
            ),
            (
                "kvm_mmu_zap_all_fast",
                2,
                250_120,
                Some(CallStart::Absolute(at(29))),
                Some(14856)
            ),
            (
                "kvm_set_memslot",
                1,
                280_345,
                Some(CallStart::Absolute(at(10))),
                Some(14856)
            ),
            (
                "kvm_vm_ioctl",
                0,
                281_512,
                Some(CallStart::Absolute(at(9))),
                Some(14856)
            ),
        ]
    );
    let events: Vec<(&str, u64, u32, i32, &str)> = import
        .events
        .iter()
        .map(|e| (e.name.as_str(), e.ts_ns, e.cpu, e.pid, e.comm.as_str()))
        .collect();
    assert_eq!(
        events,
        [
            ("tracing_mark_write", at(0), 0, 14856, "bash"),
            ("contention_begin", at(19), 1, 14900, "CPU 0/K"),
            ("contention_end", at(280), 1, 14900, "CPU 0/K"),
            ("tracing_mark_write", at(300), 0, 14856, "bash"),
        ]
    );
    assert_eq!(import.events[0].field("text"), Some("vmscale: begin zap"));
    assert_eq!(import.events[1].field("flags"), Some("SPIN|READ"));
    // The <stack trace> between graph lines is in the event layout, with the full comm.
    assert_eq!(
        import.events[1].stack,
        [
            "trace_event_raw_event_contention_begin",
            "queued_read_lock_slowpath",
            "kvm_tdp_mmu_map",
            "kvm_tdp_page_fault"
        ]
    );
}

#[test]
fn function_graph_in_the_latency_format() {
    let import = import_text(&read("text/graph/latency.txt"));
    assert!(import.skipped.is_empty(), "{:#?}", import.skipped);
    let calls: Vec<(&str, Option<u32>, u32, u64)> = (0..import.calls.len())
        .map(|i| call(&import.calls, i))
        .collect();
    assert_eq!(
        calls,
        [
            ("_raw_spin_lock_irqsave", Some(0), 1, 291),
            ("pipe_write", Some(0), 1, 1_234_567),
            ("vfs_write", Some(0), 0, 1_240_125),
        ]
    );
}

/// Events and function_graph output in one text: both are imported, and the directory holds
/// the events, the summary the calls.
#[test]
fn events_and_function_graph_mixed_in_one_text() {
    let text = format!(
        "{}{}{}",
        read("text/graph/abstime-proc.txt"),
        read("text/graph/default.txt"),
        read("text/events/default.txt")
    );
    let events = import_text(&read("text/events/default.txt")).events.len();
    let mut sink = MemorySink::default();
    let summary = write_trace_dir(TextReader::new(text.as_bytes()), &mut sink).unwrap();
    // The graph's two markers and two lock events, plus every event of the recording.
    assert_eq!(summary.converted_events() as usize, events + 4);
    assert_eq!(summary.calls, 19);
    assert_eq!(summary.slowest[0].name, "kvm_vm_release [kvm]");
    assert_eq!(summary.slowest[0].duration_ns, 14_791_992_000);
    assert_eq!(summary.skipped_lines(), 3);
    let notes = summary.call_notes();
    assert_eq!(notes.len(), 11);
    assert!(
        notes[1].contains("kvm_vm_release [kvm] took 14.791992 s"),
        "{}",
        notes[1]
    );
    assert!(notes[1].contains("cpu 0, depth 0"), "{}", notes[1]);
    // The graph's times (9099.0241..) and the recording's overlap: the merge keeps each CPU
    // in order and reports what it had to move.
    assert!(summary.reordered > 0);
}

// ---- bounded memory while streaming ----

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// Counts the bytes this thread holds, so a test can bound what the importer keeps.
struct CountingAllocator;

fn track(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(-(layout.size() as isize));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        track(new_size as isize - layout.size() as isize);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// An endless paste: the recorded text's event lines again and again, later each time.
struct Repeat {
    lines: Vec<String>,
    next: usize,
    round: u64,
    rounds: u64,
    buffer: Vec<u8>,
    offset: usize,
}

impl Read for Repeat {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.offset == self.buffer.len() {
            if self.round == self.rounds {
                return Ok(0);
            }
            let line = &self.lines[self.next];
            // Shift every timestamp by a second a round: `9099.` -> `9100.` ...
            let shifted = line.replacen("9099.", &format!("{}.", 9099 + self.round), 1);
            self.buffer = format!("{shifted}\n").into_bytes();
            self.offset = 0;
            self.next += 1;
            if self.next == self.lines.len() {
                self.next = 0;
                self.round += 1;
            }
        }
        let n = out.len().min(self.buffer.len() - self.offset);
        out[..n].copy_from_slice(&self.buffer[self.offset..self.offset + n]);
        self.offset += n;
        Ok(n)
    }
}

/// Drops what it is given, keeping the count.
#[derive(Default)]
struct CountingSink {
    bytes: u64,
}

impl Sink for CountingSink {
    fn write(&mut self, _: &str, bytes: &[u8]) -> std::io::Result<()> {
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    fn append(&mut self, _: &str, bytes: &[u8]) -> std::io::Result<()> {
        self.bytes += bytes.len() as u64;
        Ok(())
    }
}

#[test]
fn a_large_text_streams_in_bounded_memory() {
    let lines: Vec<String> = read("text/events/default.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    let rounds = 1000;
    let source = Repeat {
        lines: lines.clone(),
        next: 0,
        round: 0,
        rounds,
        buffer: Vec::new(),
        offset: 0,
    };
    let before = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(before));
    let mut sink = CountingSink::default();
    let mut reader = TextReader::new(std::io::BufReader::new(source));
    let summary = write_trace_dir(&mut reader, &mut sink).unwrap();
    assert!(reader.take_error().is_none());
    let peak = PEAK.with(Cell::get) - before;
    let text_bytes: usize = lines.iter().map(|l| l.len() + 1).sum::<usize>() * rounds as usize;

    assert_eq!(reader.lines_read(), lines.len() * rounds as usize);
    assert_eq!(summary.skipped_lines(), 0);
    assert_eq!(summary.reordered, 0);
    assert!(sink.bytes > 4 << 20, "{} bytes of pages", sink.bytes);
    // Pages wait for the sink up to 1 MiB; everything else is a line, a stack and tallies.
    assert!(
        peak < 8 << 20,
        "the import held {peak} bytes at once for {text_bytes} bytes of text"
    );
    assert!(text_bytes > 40 << 20, "{text_bytes}");
    eprintln!("held at most {peak} bytes while importing {text_bytes} bytes of text");
}

#[test]
fn read_errors_end_the_text_and_are_kept() {
    struct Failing(usize);
    impl Read for Failing {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::Error::other("disk on fire"));
            }
            self.0 -= 1;
            let line = b"  bash-1 [000] ..... 1.000001: tracing_mark_write: hello\n";
            out[..line.len()].copy_from_slice(line);
            Ok(line.len())
        }
    }
    let mut reader = TextReader::new(std::io::BufReader::new(Failing(3)));
    let items: Vec<Item> = reader.by_ref().collect();
    assert_eq!(items.len(), 3);
    assert_eq!(reader.take_error().unwrap().to_string(), "disk on fire");
}

/// Texts built to make the importer allocate from their numbers, nest without end, overflow
/// its arithmetic or spread over every CPU: each costs only its own length and says what
/// it skipped.
#[test]
fn hostile_texts_cost_only_their_length() {
    // The largest time a line can print, twice within one microsecond: the step that keeps
    // text order must not overflow.
    let text = "  a-1 [000] ..... 18446744073.709551615: tracing_mark_write: x\n".repeat(3);
    let mut sink = MemorySink::default();
    let summary = write_trace_dir(TextReader::new(text.as_bytes()), &mut sink).unwrap();
    assert_eq!(summary.converted_events(), 3);

    // Entries that never return, far deeper than the kept depth, then a flood of tasks.
    let mut text = String::new();
    for depth in 0..1000 {
        text.push_str(&format!(
            " 0)               |  {}f{depth}() {{\n",
            " ".repeat(depth % 50)
        ));
    }
    for pid in 0..3000 {
        text.push_str(&format!(" 1)    t-{pid}    |               |  g() {{\n"));
    }
    let import = import_text(&text);
    let count = |reason| import.skipped.iter().filter(|s| s.reason == reason).count();
    assert_eq!(count(SkipReason::GraphTooDeep), 1000 - 128);
    assert_eq!(count(SkipReason::GraphTooManyTasks), 3000 - 1023);
    assert_eq!(count(SkipReason::GraphUnreturned), 128 + 1023);

    // Numbers that would size things: CPUs beyond the limit, a cpumask of every CPU over and
    // over, a lost-events count beyond u64, a 100 KiB line, bytes that are not UTF-8.
    let mask = vec!["0-8191"; 2000].join(",");
    let text = format!(
        "  a-1 [99999] ..... 1.000001: sched_waking: comm=a pid=1 prio=1 target_cpu=0\n\
         \x20 a-1 [001] ..... 1.000002: ipi_send_cpumask: cpumask={mask} callsite=f+0x1/0x2 callback=0x0\n\
         CPU:3 [LOST 99999999999999999999999 EVENTS]\n{}\n\x01\x02\0 [000]\n",
        "x".repeat(100 << 10)
    );
    let bytes: Vec<u8> = text
        .into_bytes()
        .into_iter()
        // Bytes no UTF-8 text has, where the placeholders are.
        .map(|b| match b {
            1 => 0xff,
            2 => 0xfe,
            b => b,
        })
        .collect();
    let mut sink = MemorySink::default();
    let summary = write_trace_dir(TextReader::new(&bytes[..]), &mut sink).unwrap();
    assert_eq!(summary.events["ipi:ipi_send_cpumask"], 1);
    assert_eq!(summary.lost[&3], u64::MAX);
    let reasons: Vec<SkipReason> = summary.skipped.keys().copied().collect();
    assert_eq!(
        reasons,
        [SkipReason::LongLine, SkipReason::Task, SkipReason::Cpu]
    );
    // The mask of every CPU is 1 KiB in the record, whatever the text repeats.
    assert_eq!(
        sink.files["cpu1.raw"].len(),
        vmscale_trace::text::trace_dir::PAGE_SIZE
    );
}
