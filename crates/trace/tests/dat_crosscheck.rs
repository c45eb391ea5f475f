//! trace-cmd's .dat files, recorded on this machine by Debian's `trace-cmd record`, read by
//! `vmscale_trace::dat`, extracted into trace directories and decoded by
//! `vmscale_trace::Decoder`, then compared event by event with `trace-cmd report -R -t`
//! (raw field values, nanosecond timestamps) — an independent implementation of the same
//! ring-buffer format.
//!
//! Needs root, tracefs and trace-cmd; fails (never skips) without them.

#[path = "support/big_endian.rs"]
mod big_endian;
#[path = "support/dat_writer.rs"]
mod dat_writer;
#[path = "support/report.rs"]
mod report;
#[path = "support/trace_cmd.rs"]
mod trace_cmd;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use big_endian::big_endian_writer;
use dat_writer::{Codec, DatWriter};
use report::{compare, parse_report_of, symbol_addresses, Decoded, Value};
use trace_cmd::report_raw;
use vmscale_trace::dat::{extract_buffer_to_trace_dir, extract_to_trace_dir, DatError, DatFile};
use vmscale_trace::{Decoder, EventKind, PageAccess};

const TRACEFS: &str = "/sys/kernel/tracing";
const RECORD_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/support/record-with-trace-cmd.sh"
);
const STATE_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/support/tracefs-state.sh"
);
/// The events the recording script enables (plus the whole ipi system).
const NAMED_EVENTS: [&str; 4] = [
    "lock:contention_begin",
    "lock:contention_end",
    "sched:sched_switch",
    "sched:sched_waking",
];

// ---------------------------------------------------------------------------------------
// Allocation watch: the corrupt-input test proves that no size read from a file is
// allocated before it is checked, by recording the largest single allocation its thread
// makes while parsing; the in-place decode test proves that memory does not grow with the
// file, by recording the most bytes its thread held at once.

struct WatchedAlloc;

static LARGEST_WATCHED: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    /// Bytes allocated minus bytes freed while watching, and the highest it got.
    static HELD: Cell<(i64, i64)> = const { Cell::new((0, 0)) };
}

fn note(size: usize) {
    if WATCHING.with(Cell::get) {
        LARGEST_WATCHED.fetch_max(size, Ordering::Relaxed);
    }
}

fn hold(change: i64) {
    if WATCHING.with(Cell::get) {
        HELD.with(|held| {
            let (now, peak) = held.get();
            held.set((now + change, peak.max(now + change)));
        });
    }
}

// SAFETY: forwards every call to the system allocator unchanged; the bookkeeping touches
// only atomics and thread-locals without destructors, which never allocate.
unsafe impl GlobalAlloc for WatchedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        hold(layout.size() as i64);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        hold(layout.size() as i64);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        hold(new_size as i64 - layout.size() as i64);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        hold(-(layout.size() as i64));
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Runs `f` with this thread's allocations counted; returns its result and the most bytes
/// it held at once beyond what it started with.
fn peak_held<T>(f: impl FnOnce() -> T) -> (T, i64) {
    HELD.with(|held| held.set((0, 0)));
    WATCHING.with(|w| w.set(true));
    let result = f();
    WATCHING.with(|w| w.set(false));
    (result, HELD.with(Cell::get).1)
}

#[global_allocator]
static ALLOCATOR: WatchedAlloc = WatchedAlloc;

/// This process's resident file-backed memory (`RssFile`), in KiB.
fn file_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("RssFile:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("RssFile in /proc/self/status")
}

// ---------------------------------------------------------------------------------------
// Recording.

/// Recordings never overlap, so the tracefs snapshots around one see only that one.
static RECORDING: Mutex<()> = Mutex::new(());

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    V6,
    V7Uncompressed,
    V7Zstd,
    /// Version 6 with a kernel stack after every event (`-T`).
    V6Stacks,
    /// Version 7 zstd with a second instance beside the first (scheduler events only).
    V7TwoInstances,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::V6 => "v6",
            Kind::V7Uncompressed => "v7-none",
            Kind::V7Zstd => "v7-zstd",
            Kind::V6Stacks => "v6-stacks",
            Kind::V7TwoInstances => "v7-two-instances",
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Kind::V6 => &["--file-version", "6"],
            Kind::V7Uncompressed => &["--file-version", "7", "--compression", "none"],
            Kind::V7Zstd => &["--file-version", "7", "--compression", "zstd"],
            Kind::V6Stacks => &["--stacks", "--file-version", "6"],
            Kind::V7TwoInstances => &["--file-version", "7", "--compression", "zstd"],
        }
    }

    /// The events of a second instance, if the kind records one.
    fn second_instance(self) -> Option<&'static str> {
        (self == Kind::V7TwoInstances).then_some("-e sched:sched_switch -e sched:sched_waking")
    }
}

#[derive(Debug)]
struct Recorded {
    dat: PathBuf,
    /// CLOCK_MONOTONIC just before and after `trace-cmd record` ran.
    mono_before: u64,
    mono_after: u64,
}

/// This run's directory under target/tmp. The first call removes the directories of earlier
/// runs (whose process is gone): each holds tens of MiB of recordings and extractions.
fn scratch() -> PathBuf {
    static CLEANED: OnceLock<()> = OnceLock::new();
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    CLEANED.get_or_init(|| {
        for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.strip_prefix("dat-crosscheck-") else {
                continue;
            };
            if !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    root.join(format!("dat-crosscheck-{}", std::process::id()))
}

/// Runs the recording script; panics with its output when it fails.
fn record(name: &str, args: &[&str], second_instance: Option<&str>) -> Recorded {
    let dir = scratch();
    std::fs::create_dir_all(&dir).unwrap();
    let dat = dir.join(format!("{name}.dat"));
    let _ = std::fs::remove_file(&dat);
    let _serial = RECORDING.lock().unwrap_or_else(|e| e.into_inner());
    let mono_before = vmscale_sys::monotonic_ns();
    let mut command = Command::new("bash");
    command.arg(RECORD_SCRIPT).arg(&dat).args(args);
    if let Some(events) = second_instance {
        command.env("VMSCALE_XCHECK_SECOND_EVENTS", events);
    }
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {RECORD_SCRIPT}: {e}"));
    let mono_after = vmscale_sys::monotonic_ns();
    assert!(
        output.status.success(),
        "recording {name} failed ({}): trace-cmd and root are needed\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Recorded {
        dat,
        mono_before,
        mono_after,
    }
}

/// One recording per kind, shared by the tests that read it.
fn recording(kind: Kind) -> &'static Recorded {
    static CELLS: [OnceLock<Recorded>; 5] = [const { OnceLock::new() }; 5];
    let index = kind as usize;
    CELLS[index].get_or_init(|| record(kind.name(), kind.args(), kind.second_instance()))
}

fn tracefs_state() -> String {
    let output = Command::new("bash")
        .arg(STATE_SCRIPT)
        .arg(TRACEFS)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{STATE_SCRIPT} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn xcheck_instances() -> Vec<String> {
    std::fs::read_dir(Path::new(TRACEFS).join("instances"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("vmscale-xcheck-"))
        .collect()
}

// ---------------------------------------------------------------------------------------
// The container against what this machine's tracefs says.

fn sysconf(name: libc::c_int) -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let value = unsafe { libc::sysconf(name) };
    assert!(value > 0, "sysconf({name}) failed");
    value as u64
}

fn dir_names(path: &Path) -> BTreeSet<String> {
    std::fs::read_dir(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

fn check_container(kind: Kind) -> DatFile {
    let recorded = recording(kind);
    let dat =
        DatFile::open(&recorded.dat).unwrap_or_else(|e| panic!("{}: {e}", recorded.dat.display()));
    let label = kind.name();

    let (version, compression) = match kind {
        Kind::V6 => (6, None),
        Kind::V7Uncompressed => (7, None),
        Kind::V7Zstd => (7, Some("zstd")),
        Kind::V6Stacks => (6, None),
        Kind::V7TwoInstances => (7, Some("zstd")),
    };
    assert_eq!(dat.version, version, "{label}");
    assert_eq!(
        dat.compression.as_ref().map(|c| c.algorithm.name()),
        compression,
        "{label}"
    );
    assert_eq!(dat.endian, vmscale_trace::dat::Endian::Little, "{label}");
    assert_eq!(dat.long_size, 8, "{label}");
    assert_eq!(
        dat.page_size as u64,
        sysconf(libc::_SC_PAGESIZE),
        "{label}: page size"
    );
    assert_eq!(
        dat.cpu_count as u64,
        sysconf(libc::_SC_NPROCESSORS_CONF),
        "{label}: CPU count"
    );

    let header_page =
        String::from_utf8_lossy(dat.metadata.header_page.as_ref().unwrap()).into_owned();
    assert!(
        header_page.contains("commit"),
        "{label}: header_page {header_page:?}"
    );
    let header_event =
        String::from_utf8_lossy(dat.metadata.header_event.as_ref().unwrap()).into_owned();
    assert!(
        header_event.contains("type_len"),
        "{label}: header_event {header_event:?}"
    );

    // ftrace's own formats: all of them, as tracefs has them.
    let ftrace: BTreeSet<String> = dat
        .metadata
        .ftrace_formats
        .iter()
        .map(|f| f.name.clone())
        .collect();
    assert_eq!(
        ftrace,
        dir_names(&Path::new(TRACEFS).join("events/ftrace")),
        "{label}: ftrace formats"
    );
    for name in ["print", "kernel_stack"] {
        assert!(ftrace.contains(name), "{label}: no ftrace/{name} format");
    }
    // Event formats: exactly the enabled events, byte for byte as tracefs shows them now.
    let mut expected: BTreeSet<String> = NAMED_EVENTS.iter().map(|s| s.to_string()).collect();
    expected.extend(
        dir_names(&Path::new(TRACEFS).join("events/ipi"))
            .into_iter()
            .map(|e| format!("ipi:{e}")),
    );
    let found: BTreeSet<String> = dat
        .metadata
        .event_formats
        .iter()
        .map(|f| f.full_name())
        .collect();
    assert_eq!(found, expected, "{label}: event formats");
    assert_eq!(
        dat.metadata.event_formats.len(),
        expected.len(),
        "{label}: a format twice"
    );
    for format in dat
        .metadata
        .event_formats
        .iter()
        .chain(&dat.metadata.ftrace_formats)
    {
        let path =
            Path::new(TRACEFS).join(format!("events/{}/{}/format", format.system, format.name));
        let live = std::fs::read(&path).unwrap();
        assert_eq!(
            format.text,
            live,
            "{label}: {} differs from tracefs",
            format.full_name()
        );
        assert!(
            format.id.is_some(),
            "{label}: {} has no ID",
            format.full_name()
        );
    }

    let kallsyms = String::from_utf8_lossy(&dat.metadata.kallsyms);
    let first = kallsyms.lines().next().unwrap_or("");
    let address = first.split_whitespace().next().unwrap_or("");
    assert!(
        u64::from_str_radix(address, 16).is_ok(),
        "{label}: kallsyms starts {first:?}"
    );
    assert!(
        kallsyms.lines().count() > 10_000,
        "{label}: kallsyms too short"
    );
    let cmdlines = String::from_utf8_lossy(&dat.metadata.cmdlines);
    assert!(
        cmdlines
            .lines()
            .any(|l| l.ends_with(" bash") || l.ends_with(" true")),
        "{label}: the workload is not in saved_cmdlines"
    );

    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let uname = dat.options.uname.as_deref().unwrap_or("");
    assert!(uname.contains(release.trim()), "{label}: uname {uname:?}");
    let version = dat.options.version.as_deref().unwrap_or("");
    assert!(
        version.starts_with("3."),
        "{label}: trace-cmd version {version:?}"
    );
    assert_eq!(
        dat.options.selected_clock().as_deref(),
        Some("mono"),
        "{label}: TRACECLOCK"
    );

    let buffer = dat.data_buffer().unwrap_or_else(|e| panic!("{label}: {e}"));
    assert!(
        buffer.name.starts_with("vmscale-xcheck-"),
        "{label}: buffer {:?}",
        buffer.name
    );
    assert_eq!(dat.clock(buffer).as_deref(), Some("mono"), "{label}: clock");
    assert_eq!(buffer.page_size, dat.page_size, "{label}: buffer page size");
    assert!(buffer.has_data(), "{label}: no data");
    for data in &buffer.cpus {
        assert!(data.cpu < dat.cpu_count, "{label}: cpu{}", data.cpu);
        assert_eq!(
            data.size % buffer.page_size as u64,
            0,
            "{label}: cpu{} size",
            data.cpu
        );
        match buffer.compression {
            None => assert_eq!(data.stored_size, data.size, "{label}: cpu{}", data.cpu),
            Some(_) => assert!(
                data.stored_size < data.size,
                "{label}: cpu{} not compressed",
                data.cpu
            ),
        }
    }
    // Every other buffer (the top level, which the script leaves alone) is empty.
    for other in dat.buffers.iter().filter(|b| b.name != buffer.name) {
        assert!(
            !other.has_data(),
            "{label}: buffer {:?} has data",
            other.name
        );
    }
    let stats: BTreeSet<u32> = dat
        .options
        .cpu_stats
        .iter()
        .filter(|s| s.buffer == buffer.name)
        .map(|s| s.cpu)
        .collect();
    assert_eq!(stats, (0..dat.cpu_count).collect(), "{label}: CPU stats");
    dat
}

#[test]
fn v6_container_matches_this_machine() {
    check_container(Kind::V6);
}

#[test]
fn v7_uncompressed_container_matches_this_machine() {
    check_container(Kind::V7Uncompressed);
}

#[test]
fn v7_zstd_container_matches_this_machine() {
    check_container(Kind::V7Zstd);
}

// ---------------------------------------------------------------------------------------
// Event by event against `trace-cmd report -R -t`.

fn extract(recorded: &Recorded, label: &str) -> PathBuf {
    let out = scratch().join(format!("{label}-trace"));
    let _ = std::fs::remove_dir_all(&out);
    extract_to_trace_dir(&recorded.dat, &out).unwrap_or_else(|e| panic!("{label}: {e}"));
    out
}

fn decode(dir: &Path, label: &str) -> Vec<Decoded> {
    let decoder = Decoder::open(dir).unwrap_or_else(|e| panic!("{label}: {e}"));
    assert_eq!(decoder.clock(), Some("mono"), "{label}");
    let mut events = Vec::new();
    let summary = decoder
        .for_each(|event| {
            let decoded = Decoded::of(&event);
            check_view(&event, &decoded.fields);
            events.push(decoded);
        })
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    assert_eq!(summary.corrupt_pages(), 0, "{label}: {:?}", summary.errors);
    assert_eq!(summary.events(), events.len() as u64, "{label}");
    events
}

/// The typed views the analyses read agree with the raw fields.
fn check_view(event: &vmscale_trace::Event<'_>, fields: &[(String, Value)]) {
    let int = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| match v {
                Value::Int { value, .. } => *value,
                other => panic!("{name} is {other:?}"),
            })
    };
    match event.kind() {
        EventKind::ContentionBegin(begin) => {
            assert_eq!(Some(begin.lock_addr), int("lock_addr"));
            assert_eq!(Some(begin.flags as u64), int("flags"));
        }
        EventKind::ContentionEnd(end) => {
            assert_eq!(Some(end.lock_addr), int("lock_addr"));
            assert_eq!(Some(end.ret as u32 as u64), int("ret"));
        }
        EventKind::SchedSwitch(switch) => {
            assert_eq!(Some(switch.prev_pid as u32 as u64), int("prev_pid"));
            assert_eq!(Some(switch.next_pid as u32 as u64), int("next_pid"));
        }
        EventKind::SchedWaking(waking) => {
            assert_eq!(Some(waking.pid as u32 as u64), int("pid"));
            assert_eq!(Some(waking.target_cpu as u32 as u64), int("target_cpu"));
        }
        EventKind::IpiSendCpu(ipi) => {
            assert_eq!(Some(ipi.cpu as u64), int("cpu"));
        }
        EventKind::KernelStack(stack) => {
            let size = int("size").expect("kernel_stack size") as usize;
            assert!(stack.len() <= size, "{} frames, size {size}", stack.len());
            let Some((_, Value::Bytes { bytes, .. })) = fields.iter().find(|(n, _)| n == "caller")
            else {
                panic!("kernel_stack without caller");
            };
            for (index, frame) in bytes.chunks_exact(8).take(stack.len()).enumerate() {
                let frame = u64::from_le_bytes(frame.try_into().unwrap());
                assert_eq!(stack.get(index), Some(frame), "frame {index}");
            }
        }
        _ => {}
    }
}

fn crosscheck(kind: Kind) {
    let label = kind.name();
    let recorded = recording(kind);
    let dat = DatFile::open(&recorded.dat).unwrap();
    let buffer = dat.data_buffer().unwrap().name.clone();
    let dir = extract(recorded, label);
    let (decoded, result) = crosscheck_buffer(recorded, &dat, &buffer, &dir, label);
    // The workload forks processes on every CPU: all kinds of enabled event show up.
    for name in [
        "sched_switch",
        "sched_waking",
        "contention_begin",
        "contention_end",
    ] {
        assert!(
            result.by_name.contains_key(name),
            "{label}: no {name} recorded: {:?}",
            result.by_name
        );
    }
    assert!(
        result.by_name.keys().any(|n| n.starts_with("ipi_")),
        "{label}: no IPI recorded: {:?}",
        result.by_name
    );
    // Kernel stacks are found in the pages exactly when they were recorded.
    let stacks = kind == Kind::V6Stacks;
    assert_eq!(meta(&dir)["stacks"], stacks, "{label}: meta.json stacks");
    assert_eq!(
        result.by_name.contains_key("kernel_stack"),
        stacks,
        "{label}: kernel_stack events"
    );
    // `mono` is CLOCK_MONOTONIC: every event lies inside the recording.
    for event in &decoded {
        assert!(
            (recorded.mono_before..=recorded.mono_after).contains(&event.ts),
            "{label}: ts {} outside the recording [{}, {}]",
            event.ts,
            recorded.mono_before,
            recorded.mono_after
        );
    }
}

/// Decodes the extraction `dir` of `buffer` and compares it, event for event and field for
/// field, with trace-cmd report's lines for that buffer; any mismatch fails.
fn crosscheck_buffer(
    recorded: &Recorded,
    dat: &DatFile,
    buffer: &str,
    dir: &Path,
    label: &str,
) -> (Vec<Decoded>, report::Comparison) {
    let decoded = decode(dir, label);
    assert!(!decoded.is_empty(), "{label}: nothing decoded");

    let reported = parse_report_of(dat, &report_raw(&recorded.dat), buffer);
    let symbols = symbol_addresses(&dat.metadata.kallsyms);
    let result = compare(&decoded, &reported, &symbols);
    result.assert_agrees(label);
    (decoded, result)
}

#[test]
fn v6_events_match_trace_cmd_report() {
    crosscheck(Kind::V6);
}

#[test]
fn v7_uncompressed_events_match_trace_cmd_report() {
    crosscheck(Kind::V7Uncompressed);
}

#[test]
fn v7_zstd_events_match_trace_cmd_report() {
    crosscheck(Kind::V7Zstd);
}

#[test]
fn two_instances_match_trace_cmd_report_buffer_by_buffer() {
    let kind = Kind::V7TwoInstances;
    let recorded = recording(kind);
    let dat = DatFile::open(&recorded.dat).unwrap();
    let with_data: Vec<String> = dat
        .buffers
        .iter()
        .filter(|b| b.has_data())
        .map(|b| b.name.clone())
        .collect();
    assert_eq!(with_data.len(), 2, "{:?}", dat.buffers);
    let second = with_data
        .iter()
        .find(|n| n.ends_with("-b"))
        .expect("the second instance")
        .clone();
    // Without a name there is no one buffer to pick, and the error names both.
    match dat.data_buffer() {
        Err(e @ DatError::AmbiguousBuffer(_)) => {
            let message = e.to_string();
            assert!(
                with_data.iter().all(|n| message.contains(n.as_str())),
                "{message}"
            );
        }
        other => panic!("expected an ambiguous buffer, got {other:?}"),
    }
    let dat = Arc::new(dat);
    for buffer in &with_data {
        let label = format!("{}:{buffer}", kind.name());
        let dir = scratch().join(format!("{}-{buffer}-trace", kind.name()));
        let _ = std::fs::remove_dir_all(&dir);
        extract_buffer_to_trace_dir(&recorded.dat, buffer, &dir)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let (_, result) = crosscheck_buffer(recorded, &dat, buffer, &dir, &label);
        // Each buffer holds its own instance's events and no other's.
        let names: BTreeSet<&str> = result.by_name.keys().map(String::as_str).collect();
        if *buffer == second {
            assert_eq!(
                names,
                BTreeSet::from(["sched_switch", "sched_waking"]),
                "{label}"
            );
        } else {
            assert!(names.contains("contention_begin"), "{label}: {names:?}");
        }
        // Decoding that buffer in place gives the same events as its extraction.
        let in_place = Decoder::from_dat(Arc::clone(&dat), Some(buffer))
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let extracted = Decoder::open(&dir).unwrap();
        let events = same_events(&extracted, &in_place, &label);
        assert_eq!(events, result.events as u64, "{label}");
        println!("{label}: {events} events, the same in place");
    }
}

#[test]
fn kernel_stacks_match_trace_cmd_report() {
    check_container(Kind::V6Stacks);
    crosscheck(Kind::V6Stacks);
}

// ---------------------------------------------------------------------------------------
// One recording in every container: the same pages come out.

/// Every file of a trace directory but meta.json, by relative path.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let relative = path.strip_prefix(root).unwrap().display().to_string();
                if relative != "meta.json" {
                    out.insert(relative, std::fs::read(&path).unwrap());
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn meta(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap()
}

fn trace_cmd_convert(input: &Path, output: &Path, args: &[&str]) {
    let result = Command::new("trace-cmd")
        .arg("convert")
        .arg("-i")
        .arg(input)
        .arg("-o")
        .arg(output)
        .args(args)
        .output()
        .unwrap();
    assert!(
        result.status.success(),
        "trace-cmd convert {args:?} failed: {}",
        String::from_utf8_lossy(&result.stderr)
    );
}

/// The event lines of `trace-cmd report`, without the buffer-name prefix.
fn report_lines(dat: &Path, buffer: &str) -> Vec<String> {
    let prefix = format!("{buffer}:");
    report_raw(dat)
        .lines()
        .filter(|l| !l.starts_with("cpus="))
        .map(|l| match buffer.is_empty() {
            true => l.trim().to_string(),
            false => l
                .strip_prefix(prefix.as_str())
                .unwrap_or(l)
                .trim()
                .to_string(),
        })
        .collect()
}

#[test]
fn every_container_of_one_recording_yields_the_same_trace_directory() {
    let recorded = recording(Kind::V6);
    let base_dir = extract(recorded, "same-v6");
    let base = tree(&base_dir);
    let base_meta = meta(&base_dir);
    let original = DatFile::open(&recorded.dat).unwrap();
    let base_buffer = original.data_buffer().unwrap().name.clone();
    let base_report = report_lines(&recorded.dat, &base_buffer);

    let mut files: Vec<(String, PathBuf)> = Vec::new();
    // trace-cmd's own conversions.
    for (label, args) in [
        (
            "convert-v7-none",
            &["--file-version", "7", "--compression", "none"][..],
        ),
        (
            "convert-v7-zstd",
            &["--file-version", "7", "--compression", "zstd"][..],
        ),
    ] {
        let path = scratch().join(format!("{label}.dat"));
        trace_cmd_convert(&recorded.dat, &path, args);
        files.push((label.to_string(), path));
    }
    // Layouts and codecs this trace-cmd does not write: top-level data, compressed options
    // sections, zlib.
    let writer = DatWriter::from_dat(&original);
    let variants = [
        ("written-v6-top", 6, None, true),
        ("written-v6-instance", 6, None, false),
        ("written-v7-none", 7, None, false),
        ("written-v7-zlib", 7, Some(Codec::Zlib), false),
        ("written-v7-zstd", 7, Some(Codec::Zstd), true),
    ];
    for (label, version, codec, top) in variants {
        let mut variant = writer.clone();
        variant.version = version;
        variant.codec = codec;
        if top {
            variant.buffer_name.clear();
        }
        let path = scratch().join(format!("{label}.dat"));
        std::fs::write(&path, variant.to_bytes()).unwrap();
        files.push((label.to_string(), path));
    }

    for (label, path) in &files {
        let dir = scratch().join(format!("same-{label}"));
        let _ = std::fs::remove_dir_all(&dir);
        extract_to_trace_dir(path, &dir).unwrap_or_else(|e| panic!("{label}: {e}"));
        let got = tree(&dir);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            base.keys().collect::<Vec<_>>(),
            "{label}: files"
        );
        for (name, bytes) in &base {
            assert!(got[name] == *bytes, "{label}: {name} differs");
        }
        let got_meta = meta(&dir);
        for key in ["page_size", "cpus", "clock", "events", "stacks", "pages"] {
            assert_eq!(got_meta[key], base_meta[key], "{label}: meta.json {key}");
        }
        // The files written here read back in trace-cmd too (except zlib: Debian's
        // trace-cmd is built with zstd only), with the same events.
        if label.starts_with("written") && !label.contains("zlib") {
            let buffer = DatFile::open(path)
                .unwrap()
                .data_buffer()
                .unwrap()
                .name
                .clone();
            let report = report_lines(path, &buffer);
            assert_eq!(report, base_report, "{label}: trace-cmd report differs");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Decoding in place: `Decoder::from_dat` against the extraction of the same file.

/// Steps both decoders' streams together; every event (time, CPU, pid, type, record bytes)
/// and every page error must be the same. Returns the number of events.
fn same_events(extracted: &Decoder, in_place: &Decoder, label: &str) -> u64 {
    let mut a = extracted
        .events()
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let mut b = in_place.events().unwrap_or_else(|e| panic!("{label}: {e}"));
    let mut events = 0u64;
    loop {
        match (a.next_event(), b.next_event()) {
            (None, None) => break,
            (Some(Ok(x)), Some(Ok(y))) => {
                assert_eq!(
                    (x.ts(), x.cpu(), x.pid(), x.id(), x.name(), x.record()),
                    (y.ts(), y.cpu(), y.pid(), y.id(), y.name(), y.record()),
                    "{label}: event {events}"
                );
                events += 1;
            }
            (Some(Err(x)), Some(Err(y))) => {
                assert_eq!(
                    x.to_string(),
                    y.to_string(),
                    "{label}: after event {events}"
                )
            }
            (x, y) => panic!(
                "{label}: after event {events}: extracted {:?}, in place {:?}",
                x.map(|r| r.map(|e| e.ts())),
                y.map(|r| r.map(|e| e.ts()))
            ),
        }
    }
    assert_eq!(a.summaries(), b.summaries(), "{label}: summaries");
    events
}

/// The zlib file this machine's trace-cmd cannot write, made from the v6 recording.
fn written_zlib() -> PathBuf {
    let original = DatFile::open(&recording(Kind::V6).dat).unwrap();
    let mut writer = DatWriter::from_dat(&original);
    writer.version = 7;
    writer.codec = Some(Codec::Zlib);
    let path = scratch().join("in-place-v7-zlib.dat");
    std::fs::write(&path, writer.to_bytes()).unwrap();
    path
}

#[test]
fn decoding_in_place_equals_decoding_the_extraction() {
    let mut files: Vec<(String, PathBuf)> =
        [Kind::V6, Kind::V7Uncompressed, Kind::V7Zstd, Kind::V6Stacks]
            .into_iter()
            .map(|kind| (kind.name().to_string(), recording(kind).dat.clone()))
            .collect();
    files.push(("written-v7-zlib".into(), written_zlib()));
    for (label, path) in &files {
        let dir = scratch().join(format!("in-place-{label}"));
        let _ = std::fs::remove_dir_all(&dir);
        let extracted = extract_to_trace_dir(path, &dir).unwrap_or_else(|e| panic!("{label}: {e}"));
        let from_dir = Decoder::open(&dir).unwrap();
        let dat = Arc::new(DatFile::open(path).unwrap());
        let in_place =
            Decoder::from_dat(Arc::clone(&dat), None).unwrap_or_else(|e| panic!("{label}: {e}"));

        assert_eq!(in_place.cpus(), from_dir.cpus(), "{label}");
        assert_eq!(in_place.clock(), from_dir.clock(), "{label}");
        assert_eq!(in_place.page_layout(), from_dir.page_layout(), "{label}");
        let types = |d: &Decoder| -> Vec<(String, String, u16)> {
            d.catalog()
                .iter()
                .map(|t| (t.system.clone(), t.name().to_string(), t.format.id))
                .collect()
        };
        assert_eq!(types(&in_place), types(&from_dir), "{label}: event types");
        assert_eq!(
            in_place.kallsyms().unwrap().len(),
            from_dir.kallsyms().unwrap().len(),
            "{label}: kallsyms"
        );
        assert_eq!(in_place.dir(), path.as_path(), "{label}");
        assert_eq!(in_place.dat().unwrap().1.name, extracted.buffer, "{label}");

        let events = same_events(&from_dir, &in_place, label);
        assert!(events > 100, "{label}: {events} events");

        // What the import reports beside the findings: the meta.json an extraction writes,
        // with kernel stacks found by the decode itself.
        let summary = in_place.for_each(|_| {}).unwrap();
        assert_eq!(in_place.last_summary().unwrap().events(), summary.events());
        let stacks = summary.kernel_stacks() > 0;
        assert_eq!(stacks, extracted.meta.stacks, "{label}: stacks");
        assert_eq!(stacks, label.contains("stacks"), "{label}: stacks");
        let buffer = dat.decodable_buffer(None).unwrap();
        assert_eq!(
            serde_json::to_value(dat.trace_meta(buffer, stacks)).unwrap(),
            serde_json::to_value(&extracted.meta).unwrap(),
            "{label}: meta"
        );
        assert_eq!(dat.has_kernel_stacks(buffer).unwrap(), stacks, "{label}");
        println!("{label}: {events} events decoded in place, identical to the extraction");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn decoding_in_place_holds_a_bounded_amount_of_memory() {
    // Each CPU's recorded pages repeated to 24 MiB: the in-place decode must hold about the
    // same few MiB for this file as for the original, compressed or not.
    let original = DatFile::open(&recording(Kind::V6).dat).unwrap();
    let mut writer = DatWriter::from_dat(&original);
    const PER_CPU: usize = 24 << 20;
    for pages in &mut writer.cpus {
        if !pages.is_empty() {
            let copies = PER_CPU.div_ceil(pages.len());
            *pages = pages.repeat(copies);
        }
    }
    let data: usize = writer.cpus.iter().map(Vec::len).sum();
    for (label, version, codec) in [
        ("v6", 6, None),
        ("v7-zstd", 7, Some(Codec::Zstd)),
        ("v7-zlib", 7, Some(Codec::Zlib)),
    ] {
        writer.version = version;
        writer.codec = codec;
        let path = scratch().join(format!("big-{label}.dat"));
        std::fs::write(&path, writer.to_bytes()).unwrap();
        let dat = Arc::new(DatFile::open(&path).unwrap());
        for access in [PageAccess::Read, PageAccess::Mapped] {
            let decoder = Decoder::from_dat(Arc::clone(&dat), None)
                .unwrap()
                .with_page_access(access);
            let label = format!("{label}, {access:?}");
            // Mapped, uncompressed pages are decoded where they lie in the file: what the
            // decode keeps mapped must not grow with what it has read either.
            let file_rss_before = file_rss_kib();
            let mut file_rss_peak = 0;
            let mut seen = 0u64;
            let mut bytes = 0u64;
            let (summary, peak) = peak_held(|| {
                decoder
                    .for_each_overlapped(|event| {
                        // Read every record, as an analysis reads its fields, and take longer
                        // over each than the decode does, so that the reader lags behind it:
                        // pages are then given back only once the reader is past them.
                        for _ in 0..20 {
                            bytes += std::hint::black_box(event.record())
                                .iter()
                                .map(|&b| b as u64)
                                .sum::<u64>();
                        }
                        seen += 1;
                        if seen.is_multiple_of(20_000) {
                            file_rss_peak = file_rss_peak.max(file_rss_kib());
                        }
                    })
                    .unwrap()
            });
            let file_rss_growth = file_rss_peak.saturating_sub(file_rss_before);
            println!("{label}: file-backed resident memory grew by at most {file_rss_growth} KiB");
            // A few batches per CPU are mapped at once; the file system may map each of them
            // in folios of up to 2 MiB.
            assert!(
                file_rss_growth < 16 << 10,
                "{label}: {file_rss_growth} KiB of the file stayed mapped while decoding {} MiB",
                data >> 20
            );
            println!(
                "{label}: {} MiB of pages, {} events, at most {} KiB held while decoding",
                data >> 20,
                summary.events(),
                peak >> 10
            );
            assert!(summary.events() > 100_000, "{label}");
            assert!(bytes > 0, "{label}");
            assert_eq!(summary.corrupt_pages(), 0, "{label}");
            // Per CPU: a 256 KiB page buffer and one chunk's decoder state.
            let bound = writer.cpus.len() as i64 * (2 << 20);
            assert!(
                peak < bound,
                "{label}: {peak} bytes held for {data} bytes of pages (bound {bound})"
            );
        }
        let _ = std::fs::remove_file(&path);
    }
}

// ---------------------------------------------------------------------------------------
// Options that change what a trace directory says.

#[test]
fn cpu_stats_and_time_options_reach_meta_json() {
    let original = DatFile::open(&recording(Kind::V6).dat).unwrap();
    let mut writer = DatWriter::from_dat(&original);
    writer.cpu_stats = (0..writer.cpus.len())
        .map(|cpu| {
            format!(
                "CPU: {cpu}\nentries: 0\noverrun: {}\ncommit overrun: 2\nbytes: 0\noldest event ts: 1.000000\nnow ts: 2.000000\ndropped events: 3\nread events: 10\n",
                10 + cpu
            )
        })
        .collect();
    // OFFSET 12345 ns, DATE 0x10 µs, TSC2NSEC mult 3 shift 1 offset 5.
    writer.extra_options = vec![
        (7, b"12345\0".to_vec()),
        (1, b"0x10\0".to_vec()),
        (
            14,
            [3u32.to_le_bytes(), 1u32.to_le_bytes()]
                .concat()
                .into_iter()
                .chain(5u64.to_le_bytes())
                .collect(),
        ),
    ];
    for (version, codec) in [(6, None), (7, None), (7, Some(Codec::Zstd))] {
        writer.version = version;
        writer.codec = codec;
        let dat = DatFile::from_bytes(writer.to_bytes()).unwrap();
        let dir = scratch().join(format!("stats-v{version}-{codec:?}"));
        let _ = std::fs::remove_dir_all(&dir);
        let extracted = dat.extract(None, &dir).unwrap();
        for cpu in 0..writer.cpus.len() {
            let lost = &extracted.meta.lost[&cpu.to_string()];
            assert_eq!(
                (lost.overrun, lost.commit_overrun, lost.dropped_events),
                (10 + cpu as u64, 2, 3),
                "v{version} {codec:?}: cpu{cpu}"
            );
        }
        let json = meta(&dir);
        assert_eq!(json["dat"]["cpu_stats"], true);
        assert_eq!(json["dat"]["version"], version);
        assert_eq!(json["dat"]["ts_offset_ns"], 12345 + 16_000);
        assert_eq!(
            json["dat"]["tsc2nsec"],
            serde_json::json!({"mult": 3, "shift": 1, "offset": 5})
        );
    }
}

// ---------------------------------------------------------------------------------------
// Bad input.

#[test]
fn latency_traces_are_refused_with_a_clear_error() {
    let original = DatFile::open(&recording(Kind::V6).dat).unwrap();
    let mut writer = DatWriter::from_dat(&original);
    writer.latency = true;
    for version in [6, 7] {
        writer.version = version;
        let error = DatFile::from_bytes(writer.to_bytes()).unwrap_err();
        assert!(
            matches!(error, DatError::LatencyTrace),
            "v{version}: {error}"
        );
        assert!(error.to_string().contains("latency"), "{error}");
    }
}

#[test]
fn extraction_refuses_unknown_buffers_and_used_directories() {
    let (_, bytes) = small_files().remove(0);
    let dat = DatFile::from_bytes(bytes).unwrap();
    let dir = scratch().join("refusals");
    let _ = std::fs::remove_dir_all(&dir);
    let error = dat.extract(Some("no-such-instance"), &dir).unwrap_err();
    assert!(matches!(error, DatError::NoSuchBuffer(_)), "{error}");
    dat.extract(None, &dir).unwrap();
    let error = dat.extract(None, &dir).unwrap_err();
    assert!(matches!(error, DatError::OutputNotEmpty(_)), "{error}");
}

/// A small file of each layout: a few kallsyms lines, two pages per CPU.
fn small_files() -> Vec<(String, Vec<u8>)> {
    let original = DatFile::open(&recording(Kind::V6).dat).unwrap();
    let mut writer = DatWriter::from_dat(&original);
    let keep_lines = |bytes: &[u8], n: usize| -> Vec<u8> {
        let text = String::from_utf8_lossy(bytes);
        text.lines()
            .take(n)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
            .into_bytes()
    };
    writer.kallsyms = keep_lines(&writer.kallsyms, 20);
    writer.cmdlines = keep_lines(&writer.cmdlines, 5);
    writer.printk = keep_lines(&writer.printk, 5);
    writer.ftrace_formats.truncate(3);
    let page = writer.page_size as usize;
    for pages in &mut writer.cpus {
        pages.truncate(2 * page);
    }
    writer.cpu_stats = vec!["CPU: 0\noverrun: 1\n".into()];
    let mut files = Vec::new();
    for (label, version, codec, top) in [
        ("v6-top", 6, None, true),
        ("v6-instance", 6, None, false),
        ("v7-none", 7, None, false),
        ("v7-zlib", 7, Some(Codec::Zlib), false),
        ("v7-zstd", 7, Some(Codec::Zstd), true),
    ] {
        let mut variant = writer.clone();
        variant.version = version;
        variant.codec = codec;
        if top {
            variant.buffer_name.clear();
        }
        files.push((label.to_string(), variant.to_bytes()));
    }
    // Times in TSC ticks with trace-cmd's conversion and an offset (option ids 14 and 7).
    let mut tsc = writer.clone();
    tsc.version = 7;
    tsc.clock = "x86-tsc".into();
    let mut tsc2nsec = Vec::new();
    tsc2nsec.extend_from_slice(&(3u32 << 29).to_le_bytes());
    tsc2nsec.extend_from_slice(&30u32.to_le_bytes());
    tsc2nsec.extend_from_slice(&0u64.to_le_bytes());
    tsc.extra_options = vec![(14, tsc2nsec), (7, b"-2000000\0".to_vec())];
    files.push(("v7-tsc2nsec".to_string(), tsc.to_bytes()));
    // The same pages as a big-endian machine writes them.
    let little = DatFile::from_bytes(writer.to_bytes()).unwrap();
    for (label, version, codec) in [("v6-big", 6, None), ("v7-zstd-big", 7, Some(Codec::Zstd))] {
        let mut big = big_endian_writer(&little);
        big.version = version;
        big.codec = codec;
        files.push((label.to_string(), big.to_bytes()));
    }
    files
}

/// Damage that makes an extraction fail makes decoding in place fail with the same error
/// (so `vmscale report FILE.dat` refuses the same files it refused when it extracted them),
/// except damage inside one CPU's data, which decoding in place skips and reports for that
/// CPU where an extraction refuses the file; damage an extraction accepts never fails the
/// decode in place.
#[test]
fn decoding_in_place_fails_exactly_where_extraction_fails() {
    let dir = scratch().join("in-place-damage");
    let (mut cases, mut refused, mut salvaged, mut chunks_skipped) = (0, 0, 0, 0);
    for (label, bytes) in small_files() {
        for at in (0..bytes.len()).step_by(23) {
            for value in [0xffu8, bytes[at] ^ 0x80] {
                let mut damaged = bytes.clone();
                damaged[at] = value;
                let Ok(dat) = DatFile::from_bytes(damaged) else {
                    continue;
                };
                cases += 1;
                let _ = std::fs::remove_dir_all(&dir);
                let extracted = dat.extract(None, &dir).map_err(|e| e.to_string());
                let in_place = Decoder::from_dat(Arc::new(dat), None)
                    .and_then(|decoder| decoder.for_each(|_| {}));
                let case = format!("{label}: byte {at} = {value:#04x}");
                match (in_place, extracted) {
                    (Err(vmscale_trace::DecodeError::Dat(e)), extracted) => {
                        assert_eq!(Some(e.to_string()), extracted.err(), "{case}");
                        refused += 1;
                    }
                    (Ok(summary), extracted) => {
                        let damaged = summary.cpus.iter().any(|c| c.first_damage.is_some());
                        let skipped: u64 = summary.cpus.iter().map(|c| c.damaged_chunks).sum();
                        match extracted {
                            // Both skip exactly the chunks that do not decompress.
                            Ok(extracted) => {
                                assert_eq!(
                                    extracted.damaged_chunks.len() as u64,
                                    skipped,
                                    "{case}: {:?}",
                                    extracted.damaged_chunks
                                );
                                chunks_skipped += u64::from(skipped > 0);
                            }
                            Err(refusal) => assert!(
                                damaged,
                                "{case}: extraction refused ({refusal}), decoding in place saw no damage"
                            ),
                        }
                        salvaged += u64::from(damaged);
                    }
                    _ => {}
                }
            }
        }
    }
    println!(
        "{cases} damaged files, {refused} refused by both, {salvaged} salvaged in place, \
         {chunks_skipped} with damaged chunks that both skipped"
    );
    // Damage to the pages is salvaged in place; damage to the container is refused by
    // DatFile itself before either runs. A damaged compressed chunk costs both only its
    // pages.
    assert!(salvaged > 100, "{salvaged} of {cases} salvaged");
    assert!(
        chunks_skipped > 10,
        "{chunks_skipped} of {cases} with skipped chunks"
    );
}

/// The small files decode in place with events, and are the seeds of the `dat_reader`
/// fuzz target: crates/trace/fuzz/seed.sh runs this test with VMSCALE_DAT_SEEDS set to the
/// corpus directory to write them there.
#[test]
fn small_files_decode_in_place_and_seed_the_fuzzer() {
    let seeds = std::env::var_os("VMSCALE_DAT_SEEDS").map(PathBuf::from);
    let mut times: HashMap<String, Vec<u64>> = HashMap::new();
    for (label, bytes) in small_files() {
        let dat = Arc::new(DatFile::from_bytes(bytes.clone()).unwrap());
        let decoder =
            Decoder::from_dat(Arc::clone(&dat), None).unwrap_or_else(|e| panic!("{label}: {e}"));
        let mut ts = Vec::new();
        let summary = decoder.for_each(|e| ts.push(e.ts())).unwrap();
        assert!(summary.events() > 0, "{label}");
        assert_eq!(summary.corrupt_pages(), 0, "{label}: {:?}", summary.errors);
        // The extraction's meta.json carries the file's time conversion to Decoder::open.
        let dir = scratch().join(format!("small-{label}-trace"));
        let _ = std::fs::remove_dir_all(&dir);
        dat.extract(None, &dir)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let extracted = Decoder::open(&dir).unwrap();
        assert_eq!(
            extracted.time_conversion(),
            decoder.time_conversion(),
            "{label}"
        );
        same_events(&extracted, &decoder, &label);
        times.insert(label.clone(), ts);
        if let Some(dir) = &seeds {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("small-{label}.dat")), &bytes).unwrap();
            println!("{label}: {} bytes", bytes.len());
        }
    }
    // The same pages in TSC ticks come out as trace-cmd converts them: 1.5 ns per tick,
    // then 2 ms earlier.
    let raw = &times["v7-none"];
    let converted: Vec<u64> = raw.iter().map(|t| t * 3 / 2 - 2_000_000).collect();
    assert_eq!(times["v7-tsc2nsec"], converted);
    // Big-endian pages decode to the same times as the little-endian ones they were made of.
    assert_eq!(times["v6-big"], times["v6-instance"]);
    assert_eq!(times["v7-zstd-big"], times["v6-instance"]);
}

/// Parses `bytes`, decodes them in place (and extracts them when `extract_to` is given)
/// on this thread, with allocations watched; panics are caught and returned as text.
fn parse_watched(bytes: Vec<u8>, extract_to: Option<&Path>) -> Result<(), String> {
    WATCHING.with(|w| w.set(true));
    let result = catch_unwind(AssertUnwindSafe(|| {
        if let Ok(dat) = DatFile::from_bytes(bytes) {
            if let Some(dir) = extract_to {
                let _ = std::fs::remove_dir_all(dir);
                let _ = dat.extract(None, dir);
            }
            if let Ok(decoder) = Decoder::from_dat(Arc::new(dat), None) {
                let _ = decoder.for_each(|_| {});
            }
        }
    }));
    WATCHING.with(|w| w.set(false));
    result.map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

#[test]
fn corrupt_files_are_errors_not_panics_or_huge_allocations() {
    let files = small_files();
    let dir = scratch().join("corrupt");
    let mut cases = 0usize;
    let mut failures = Vec::new();
    for (label, bytes) in &files {
        let whole = DatFile::from_bytes(bytes.clone()).unwrap_or_else(|e| panic!("{label}: {e}"));
        whole
            .extract(None, &dir.join(label))
            .unwrap_or_else(|e| panic!("{label}: {e}"));

        let mut try_case = |what: String, mutated: Vec<u8>, extract: bool| {
            cases += 1;
            let target = dir.join("case");
            if let Err(panic) = parse_watched(mutated, extract.then_some(target.as_path())) {
                failures.push(format!("{label} {what}: panicked: {panic}"));
            }
        };
        // Every truncation of the first 4 KiB (the structure), then a stride over the rest.
        let stride = (bytes.len() / 512).max(1);
        for len in (0..bytes.len().min(4096)).chain((4096..bytes.len()).step_by(stride)) {
            try_case(
                format!("cut at {len}"),
                bytes[..len].to_vec(),
                len % 97 == 0,
            );
        }
        // Each position overwritten with values that break sizes, counts and tags.
        for (index, at) in (0..bytes.len()).step_by(3).enumerate() {
            for value in [0x00u8, 0xff, bytes[at] ^ 0x80] {
                let mut mutated = bytes.clone();
                mutated[at] = value;
                try_case(
                    format!("byte {at} = {value:#04x}"),
                    mutated,
                    index % 211 == 0,
                );
            }
        }
        // Huge 32- and 64-bit numbers wherever a size or count could be.
        for at in 0..bytes.len().saturating_sub(8) {
            let mut mutated = bytes.clone();
            mutated[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            try_case(format!("u32 max at {at}"), mutated, false);
            let mut mutated = bytes.clone();
            mutated[at..at + 8].copy_from_slice(&(u64::MAX / 3).to_le_bytes());
            try_case(format!("u64 huge at {at}"), mutated, at % 509 == 0);
        }
    }
    let largest = LARGEST_WATCHED.load(Ordering::Relaxed);
    println!("corrupt input: {cases} cases, largest single allocation {largest} bytes");
    assert!(
        failures.is_empty(),
        "{} of {cases} cases panicked:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The files are tens of KiB; nothing read from them may allocate much more.
    assert!(
        largest < 4 << 20,
        "a corrupt file made the reader allocate {largest} bytes at once"
    );
}

// ---------------------------------------------------------------------------------------
// The recording script.

#[test]
fn recording_script_leaves_tracefs_as_it_found_it() {
    // Hold the lock across the snapshots: no other recording may run in between.
    let dir = scratch();
    std::fs::create_dir_all(&dir).unwrap();
    let guard = RECORDING.lock().unwrap_or_else(|e| e.into_inner());
    let strip_instances = |state: String| -> String {
        state
            .lines()
            .filter(|l| !l.starts_with("instances:"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let scratch_dirs = || -> usize {
        std::fs::read_dir("/tmp")
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("vmscale-xcheck.")
            })
            .count()
    };
    let before = strip_instances(tracefs_state());
    let scratch_before = scratch_dirs();
    let dat = dir.join("leave-nothing.dat");
    let output = Command::new("bash")
        .arg(RECORD_SCRIPT)
        .arg(&dat)
        .args(["--file-version", "6"])
        .output()
        .unwrap();
    let after = strip_instances(tracefs_state());
    let instances_left = xcheck_instances();
    let scratch_after = scratch_dirs();
    drop(guard);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        instances_left.is_empty(),
        "instances left: {instances_left:?}"
    );
    assert_eq!(
        scratch_before, scratch_after,
        "placeholder directory left in /tmp"
    );
    assert_eq!(before, after, "the top-level tracefs settings changed");
    let temporaries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("leave-nothing.dat."))
        .collect();
    assert!(
        temporaries.is_empty(),
        "trace-cmd temporaries left: {temporaries:?}"
    );
    // No placeholder mount escaped the private namespace.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains("ftrace_enabled") && !mounts.contains("set_ftrace"),
        "placeholder mounts visible outside the recording"
    );
    assert!(DatFile::open(&dat).is_ok());
}
