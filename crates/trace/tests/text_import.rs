//! The text importer on the kernel's own text rendering of the contention fixture, checked
//! against the binary decode of the same recording.

use std::path::{Path, PathBuf};

use vmscale_trace::text_import::{import_text, TextEvent};
use vmscale_trace::views::contention_flags;
use vmscale_trace::{Decoder, EventKind};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
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
    let text = std::fs::read_to_string(dir.join("expected.txt")).unwrap();
    let import = import_text(&text);
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
    let text = std::fs::read_to_string(fixture("contention").join("expected.txt")).unwrap();
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
