//! vmscale's own recordings written as trace-cmd .dat files (version 7) by
//! `vmscale_trace::dat::write`, then read back three ways: by vmscale's `DatFile` reader (the
//! events must equal the directory's, byte for byte) and by Debian's `trace-cmd report`
//! (every event's time, CPU, pid, name and fields must equal vmscale's decode of the
//! directory, its task names must come from the written command lines, its clock must be
//! `mono`), and by KernelShark's library (every event loads, with its task name).
//!
//! Needs root, tracefs, trace-cmd, a C compiler and KernelShark's library (libkshark-dev);
//! fails (never skips) without them.

#[path = "support/report.rs"]
mod report;
#[path = "support/trace_cmd.rs"]
mod trace_cmd;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use report::{
    compare, decode_all, fields_of, parse_report, symbol_addresses, Decoded, Reported, Value,
};
use trace_cmd::trace_cmd;
use vmscale_trace::dat::write::{write_dat, DatWriteError, DatWriteOptions, Written};
use vmscale_trace::dat::{extract_to_trace_dir, Algorithm, DatFile};
use vmscale_trace::record::recorder::{RecordConfig, Recording, TraceMeta};
use vmscale_trace::record::tracefs;
use vmscale_trace::{Decoder, EventKind, Kallsyms};

const OVERRUN_FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/overrun");

/// This run's directory under target/tmp; directories of earlier runs whose process is
/// gone are removed first.
fn scratch() -> PathBuf {
    static CLEANED: OnceLock<PathBuf> = OnceLock::new();
    CLEANED
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
            for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name.strip_prefix("dat-write-") {
                    if !Path::new("/proc").join(pid).exists() {
                        let _ = std::fs::remove_dir_all(entry.path());
                    }
                }
            }
            let dir = root.join(format!("dat-write-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            dir
        })
        .clone()
}

// ---------------------------------------------------------------------------------------
// A live recording by vmscale's recorder.

struct Live {
    dir: PathBuf,
    meta: TraceMeta,
    /// Pids of the children the workload ran (all called `true`).
    children: Vec<i32>,
}

/// One recording shared by the tests: the scenarios' events (with stacks on lock
/// contention and system calls of this thread only, as a scenario records them) while
/// this thread forks short processes.
fn live() -> &'static Live {
    static LIVE: OnceLock<Live> = OnceLock::new();
    LIVE.get_or_init(|| {
        let mount = tracefs::mount_point()
            .unwrap_or_else(|e| panic!("this test needs tracefs as root: {e}"));
        let dir = scratch().join("live");
        let _ = std::fs::remove_dir_all(&dir);
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let config = RecordConfig {
            syscall_tids: vec![tid as u32],
            ..RecordConfig::default()
        };
        let mut recording = Recording::prepare(&mount, &dir, config).unwrap();
        recording.set_on(true).unwrap();
        recording.mark("dat write start").unwrap();
        let mut children = Vec::new();
        for _ in 0..3 {
            let spawned: Vec<_> = (0..20)
                .map(|_| Command::new("true").spawn().unwrap())
                .collect();
            for mut child in spawned {
                children.push(child.id() as i32);
                child.wait().unwrap();
            }
        }
        recording.mark("dat write end").unwrap();
        recording.set_on(false).unwrap();
        let meta = recording.finish().unwrap();
        Live {
            dir,
            meta,
            children,
        }
    })
}

fn write(dir: &Path, label: &str, compression: Option<Algorithm>) -> (PathBuf, Written) {
    let out = scratch().join(format!("{label}.dat"));
    let written = write_dat(dir, &out, &DatWriteOptions { compression })
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    assert_eq!(
        std::fs::metadata(&out).unwrap().len(),
        written.bytes,
        "{label}"
    );
    (out, written)
}

// ---------------------------------------------------------------------------------------
// Decoding a directory.

/// An event exactly as it was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RawEvent {
    ts: u64,
    cpu: u32,
    pid: i32,
    id: u16,
    record: Vec<u8>,
}

fn raw_events(dir: &Path) -> Vec<RawEvent> {
    let decoder = Decoder::open(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut events = Vec::new();
    decoder
        .for_each(|e| {
            events.push(RawEvent {
                ts: e.ts(),
                cpu: e.cpu(),
                pid: e.pid(),
                id: e.id(),
                record: e.record().to_vec(),
            })
        })
        .unwrap();
    events
}

/// Every event with its non-common fields, the way `trace-cmd report -R` prints them.
fn decoded_events(dir: &Path) -> Vec<Decoded> {
    decode_all(&Decoder::open(dir).unwrap(), &dir.display().to_string()).0
}

/// The latest comm of every pid that sched events name, as the writer collects them.
fn comms_in(dir: &Path) -> HashMap<i32, String> {
    let mut comms = HashMap::new();
    Decoder::open(dir)
        .unwrap()
        .for_each(|event| match event.kind() {
            EventKind::SchedSwitch(s) => {
                comms.insert(s.prev_pid, s.prev_comm.to_string());
                comms.insert(s.next_pid, s.next_comm.to_string());
            }
            EventKind::SchedWaking(w)
            | EventKind::SchedWakeup(w)
            | EventKind::SchedWakeupNew(w) => {
                comms.insert(w.pid, w.comm.to_string());
            }
            _ => {}
        })
        .unwrap();
    comms.remove(&0);
    comms
}

// ---------------------------------------------------------------------------------------
// trace-cmd.

// ---------------------------------------------------------------------------------------
// KernelShark.

const KSHARK_READ: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/kshark-read.c");

/// tests/support/kshark-read.c built against KernelShark's library (Debian's libkshark-dev
/// and libjson-c-dev), once per test run.
fn kshark_read() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = scratch().join("kshark-read");
        let output = Command::new("cc")
            .args([
                "-O1",
                "-Wall",
                "-Werror",
                "-I/usr/include/kernelshark",
                "-o",
            ])
            .arg(&out)
            .arg(KSHARK_READ)
            .arg("-lkshark")
            .output()
            .unwrap_or_else(|e| panic!("cannot run cc: {e}"));
        assert!(
            output.status.success(),
            "building kshark-read failed (KernelShark's library is needed: apt-get install \
             libkshark-dev libjson-c-dev):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        out
    })
}

/// One entry as KernelShark loaded it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct KsEntry {
    ts: u64,
    cpu: u32,
    pid: i32,
    /// Negative for KernelShark's marks of lost events.
    event_id: i32,
    event: String,
    task: String,
}

fn kernelshark_entries(dat: &Path) -> Vec<KsEntry> {
    let output = Command::new(kshark_read())
        .arg(dat)
        .output()
        .unwrap_or_else(|e| panic!("cannot run kshark-read: {e}"));
    assert!(
        output.status.success(),
        "KernelShark could not load {}: {}",
        dat.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let mut words = line.splitn(6, ' ');
            let mut next = || {
                words
                    .next()
                    .unwrap_or_else(|| panic!("short line {line:?}"))
            };
            KsEntry {
                ts: next().parse().unwrap(),
                cpu: next().parse().unwrap(),
                pid: next().parse().unwrap(),
                event_id: next().parse().unwrap(),
                event: next().to_string(),
                task: next().to_string(),
            }
        })
        .collect()
}

/// Lines trace-cmd prints where the kernel reported lost events, and the rest.
fn split_dropped(report: &str) -> (Vec<String>, String) {
    let (dropped, rest): (Vec<&str>, Vec<&str>) =
        report.lines().partition(|l| l.contains("EVENTS DROPPED]"));
    (
        dropped.into_iter().map(str::to_string).collect(),
        rest.join("\n"),
    )
}

/// trace-cmd prints some pointers as a bare symbol name (`%ps`: csd's `func`, print's
/// `ip`) and NULL as `(nil)`, which `report::compare` does not read. A bare name is taken
/// when the decoded address lies inside a symbol of that name, and is then compared as
/// that address; events pair per CPU in order, as `compare` pairs them.
fn resolve_bare_symbols(decoded: &[Decoded], reported: &mut [Reported], kallsyms: &Kallsyms) {
    let cpus: BTreeSet<u32> = decoded.iter().map(|e| e.cpu).collect();
    for cpu in cpus {
        let ours = decoded.iter().filter(|e| e.cpu == cpu);
        let theirs = reported.iter_mut().filter(|e| e.cpu == cpu);
        for (d, r) in ours.zip(theirs) {
            for ((_, value), (_, text)) in d.fields.iter().zip(&mut r.fields) {
                let Value::Int { value, .. } = value else {
                    continue;
                };
                let inside = |name: &str| {
                    kallsyms
                        .symbolize(*value)
                        .is_some_and(|s| s.name == name && !name.contains("+0x"))
                };
                if text == "(nil)" || inside(text) {
                    *text = format!("{value:#x}");
                }
            }
        }
    }
}

/// `trace-cmd report -R -t` of `dat` against vmscale's decode of `dir`; returns the events
/// per name and the lost-events lines.
fn crosscheck(dir: &Path, dat: &Path, label: &str) -> (BTreeMap<String, usize>, Vec<String>) {
    let file = DatFile::open(dat).unwrap();
    let (dropped, report) = split_dropped(&trace_cmd(&["report", "-R", "-t"], dat));
    let symbols = symbol_addresses(&file.metadata.kallsyms);
    let mut reported = parse_report(&report, "", &[], &fields_of(&file));
    let mut decoded = decoded_events(dir);
    for event in &mut decoded {
        for (_, value) in &mut event.fields {
            // trace_marker's text ends in the newline that ends trace-cmd's line.
            if let Value::Str(text) = value {
                if let Some(line) = text.strip_suffix('\n') {
                    *text = line.to_string();
                }
            }
        }
    }
    let kallsyms = Decoder::open(dir).unwrap().kallsyms().unwrap();
    resolve_bare_symbols(&decoded, &mut reported, &kallsyms);
    let result = compare(&decoded, &reported, &symbols);
    result.assert_agrees(label);
    assert!(result.events > 0, "{label}: no events");
    (result.by_name, dropped)
}

// ---------------------------------------------------------------------------------------
// The tests.

#[test]
fn written_files_read_back_in_vmscale_with_the_same_events_and_pages() {
    let live = live();
    let original = raw_events(&live.dir);
    assert!(original.len() > 100, "only {} events", original.len());
    let comms = comms_in(&live.dir);
    for (label, compression) in [
        ("live-none", None),
        ("live-zstd", Some(Algorithm::Zstd)),
        ("live-zlib", Some(Algorithm::Zlib)),
    ] {
        let (path, written) = write(&live.dir, label, compression);
        println!(
            "{label}: {} bytes, {} pages, {} events, {} comms",
            written.bytes, written.pages, written.events, written.comms
        );
        assert_eq!(written.events, original.len() as u64, "{label}");
        assert_eq!(written.comms, comms.len(), "{label}");
        assert_eq!(written.corrupt_pages, 0, "{label}");
        assert_eq!(written.cpus, live.meta.cpus.len(), "{label}");
        assert_eq!(
            written.pages,
            live.meta.pages.values().sum::<u64>(),
            "{label}"
        );

        let dat = DatFile::open(&path).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(dat.version, 7, "{label}");
        assert_eq!(
            dat.compression.as_ref().map(|c| c.algorithm),
            compression,
            "{label}"
        );
        assert_eq!(dat.page_size as usize, live.meta.page_size, "{label}");
        assert_eq!(
            dat.cpu_count,
            live.meta.cpus.iter().max().unwrap() + 1,
            "{label}"
        );
        assert_eq!(dat.options.selected_clock().as_deref(), Some("mono"));
        let buffer = dat.data_buffer().unwrap();
        assert_eq!(buffer.name, "", "{label}: data in the top-level buffer");
        assert_eq!(dat.clock(buffer).as_deref(), Some("mono"), "{label}");
        assert_eq!(buffer.compression, compression, "{label}");
        if compression.is_some() {
            for data in &buffer.cpus {
                assert!(
                    data.size == 0 || data.stored_size < data.size,
                    "{label}: cpu{} not compressed",
                    data.cpu
                );
            }
        }
        // The command lines are the pids and names the sched events carry.
        let cmdlines = String::from_utf8(dat.metadata.cmdlines.clone()).unwrap();
        let parsed: HashMap<i32, String> = cmdlines
            .lines()
            .map(|l| {
                let (pid, comm) = l.split_once(' ').unwrap();
                (pid.parse().unwrap(), comm.to_string())
            })
            .collect();
        assert_eq!(parsed, comms, "{label}: command lines");

        // Extracted again, the directory holds the same files and the same events.
        let back = scratch().join(format!("{label}-back"));
        let _ = std::fs::remove_dir_all(&back);
        let extracted = extract_to_trace_dir(&path, &back).unwrap();
        assert_eq!(extracted.meta.cpus, live.meta.cpus, "{label}");
        assert_eq!(extracted.meta.lost, live.meta.lost, "{label}: CPUSTAT");
        assert_eq!(extracted.meta.clock, "mono", "{label}");
        assert_eq!(extracted.meta.stacks, live.meta.stacks, "{label}");
        assert_eq!(extracted.meta.pages, live.meta.pages, "{label}");
        let mut events = extracted.meta.events.clone();
        let mut expected = live.meta.events.clone();
        events.sort();
        expected.sort();
        assert_eq!(events, expected, "{label}: event formats");
        for name in ["header_page", "header_event", "kallsyms"] {
            assert!(
                std::fs::read(back.join(name)).unwrap()
                    == std::fs::read(live.dir.join(name)).unwrap(),
                "{label}: {name} differs"
            );
        }
        for cpu in &live.meta.cpus {
            let name = format!("cpu{cpu}.raw");
            assert!(
                std::fs::read(back.join(&name)).unwrap()
                    == std::fs::read(live.dir.join(&name)).unwrap(),
                "{label}: {name} differs"
            );
        }
        assert_eq!(
            tree(&back.join("formats")),
            tree(&live.dir.join("formats")),
            "{label}: formats"
        );
        assert!(raw_events(&back) == original, "{label}: events differ");
    }
}

/// Relative path -> bytes of every file under `dir`.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                files.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

#[test]
fn trace_cmd_reports_every_event_of_a_written_recording() {
    let live = live();
    for (label, compression) in [
        ("report-none", None),
        ("report-zstd", Some(Algorithm::Zstd)),
    ] {
        let (path, _) = write(&live.dir, label, compression);
        // trace-cmd's own validation of the container, where it can give one: in a
        // compressed options section, `trace-cmd dump` (3.1 to 3.4) reads the BUFFER
        // option's section header through the decompressed stream after seeking the file
        // (dump_option_buffer uses lseek, not do_lseek), so whether it gets through depends
        // on the bytes that follow. trace-cmd report reads the same file with libtracecmd,
        // and the cross-check below compares every event.
        if compression.is_none() {
            trace_cmd(&["dump", "-v"], &path);
        }
        let (by_name, dropped) = crosscheck(&live.dir, &path, label);
        assert!(dropped.is_empty(), "{label}: {dropped:?}");
        // The recording's kinds of events all reach trace-cmd.
        for name in [
            "sched_switch",
            "sched_waking",
            "sys_enter",
            "sys_exit",
            "print",
        ] {
            assert!(
                by_name.contains_key(name),
                "{label}: no {name}: {by_name:?}"
            );
        }
    }
}

#[test]
fn trace_cmd_shows_task_names_and_mono_time_from_a_written_recording() {
    let live = live();
    let (path, _) = write(&live.dir, "names", None);
    assert!(
        trace_cmd(&["dump", "--clock"], &path).contains("mono"),
        "the file's clock is not mono"
    );

    let comms = comms_in(&live.dir);
    // Where the recording lost events trace-cmd prints a line of its own.
    let (_, report) = split_dropped(&trace_cmd(&["report", "-t"], &path));
    let (mut named, mut unknown, mut children_seen) = (0, 0, 0);
    let mut times = Vec::new();
    // Kernel stacks print their frames as `=> symbol` lines of their own.
    for line in report
        .lines()
        .filter(|l| !l.starts_with("cpus=") && !l.trim_start().starts_with("=>"))
    {
        let (comm, pid, ts) =
            comm_pid_time(line).unwrap_or_else(|| panic!("unparsed report line {line:?}"));
        times.push(ts);
        match comms.get(&pid) {
            Some(expected) => {
                assert_eq!(&comm, expected, "pid {pid} in {line:?}");
                named += 1;
                if live.children.contains(&pid) {
                    assert_eq!(comm, "true", "{line:?}");
                    children_seen += 1;
                }
            }
            None if pid == 0 => assert_eq!(comm, "<idle>", "{line:?}"),
            None => {
                assert_eq!(comm, "<...>", "pid {pid} without a name: {line:?}");
                unknown += 1;
            }
        }
    }
    println!("names: {named} events named from the command lines, {unknown} unnamed");
    assert!(named > 0 && children_seen > 0, "no names from CMDLINES");

    // The clock: trace-cmd shows the raw mono nanoseconds, every one inside the window in
    // which tracing was on, in the same order vmscale decodes them.
    let mut decoded: Vec<u64> = raw_events(&live.dir).iter().map(|e| e.ts).collect();
    assert!(times
        .iter()
        .all(|ts| (live.meta.started_ns..=live.meta.stopped_ns).contains(ts)));
    times.sort_unstable();
    decoded.sort_unstable();
    assert_eq!(
        times, decoded,
        "trace-cmd's timestamps differ from vmscale's"
    );

    // Without -t trace-cmd prints microseconds, rounded as the kernel prints them.
    let first = raw_events(&live.dir)[0].ts;
    let usecs = (first + 500) / 1000;
    let expected = format!("{}.{:06}:", usecs / 1_000_000, usecs % 1_000_000);
    let report = trace_cmd(&["report"], &path);
    let line = report.lines().find(|l| !l.starts_with("cpus=")).unwrap();
    assert!(line.contains(&expected), "{expected} not in {line:?}");
}

/// `comm-pid [cpu] secs.nsecs: ...` -> (comm, pid, ns).
fn comm_pid_time(line: &str) -> Option<(String, i32, u64)> {
    let open = line.match_indices(" [").find_map(|(i, _)| {
        let close = line[i + 2..].find(']')?;
        line[i + 2..i + 2 + close]
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then_some((i, i + 2 + close))
    })?;
    let (comm, pid) = line[..open.0].trim_start().rsplit_once('-')?;
    let rest = line[open.1 + 1..].trim_start();
    let (time, _) = rest.split_once(": ")?;
    let (secs, nanos) = time.split_once('.')?;
    let ts = secs.parse::<u64>().ok()? * 1_000_000_000 + nanos.parse::<u64>().ok()?;
    Some((comm.to_string(), pid.trim().parse().ok()?, ts))
}

#[test]
fn a_recording_that_lost_events_keeps_its_losses_in_trace_cmd() {
    // Pages after an overrun, with the count the kernel stored in them.
    let fixture = Path::new(OVERRUN_FIXTURE);
    let meta: TraceMeta =
        serde_json::from_slice(&std::fs::read(fixture.join("meta.json")).unwrap()).unwrap();
    for (label, compression) in [
        ("overrun-none", None),
        ("overrun-zstd", Some(Algorithm::Zstd)),
    ] {
        let (path, written) = write(fixture, label, compression);
        assert_eq!(written.pages, 6, "{label}");
        let (by_name, dropped) = crosscheck(fixture, &path, label);
        assert!(by_name.contains_key("sched_switch"), "{label}: {by_name:?}");
        // One line per page that starts after a loss.
        assert!(!dropped.is_empty(), "{label}: no losses reported");
        // The CPUSTAT options carry the counters of meta.json.
        let stats = trace_cmd(&["report", "--stat"], &path);
        for (cpu, lost) in &meta.lost {
            assert!(
                stats.contains(&format!("CPU: {cpu}\noverrun: {}\n", lost.overrun)),
                "{label}: cpu{cpu} overrun {} not in:\n{stats}",
                lost.overrun
            );
        }
    }
}

#[test]
fn a_broken_directory_is_an_error_and_leaves_no_file() {
    let fixture = Path::new(OVERRUN_FIXTURE);
    let broken = scratch().join("broken");
    let _ = std::fs::remove_dir_all(&broken);
    copy_dir(fixture, &broken);
    // Half a page at the end of cpu1.raw.
    let mut pages = std::fs::read(broken.join("cpu1.raw")).unwrap();
    pages.truncate(pages.len() - 2048);
    std::fs::write(broken.join("cpu1.raw"), pages).unwrap();

    let out = scratch().join("broken.dat");
    let _ = std::fs::remove_file(&out);
    let error = write_dat(&broken, &out, &DatWriteOptions::default()).unwrap_err();
    assert!(
        matches!(
            error,
            DatWriteError::PartialPage {
                cpu: 1,
                size: 10240,
                page_size: 4096
            }
        ),
        "{error}"
    );
    assert!(!error.to_string().contains('\n'), "{error}");
    let leftovers: Vec<_> = std::fs::read_dir(scratch())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("broken.dat"))
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");

    // Not a trace directory at all.
    let error = write_dat(
        &scratch().join("no-such-dir"),
        &out,
        &DatWriteOptions::default(),
    )
    .unwrap_err();
    assert!(error.to_string().contains("meta.json"), "{error}");
    assert!(!out.exists());
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn a_tsc_conversion_and_time_offset_apply_as_trace_cmd_applies_them() {
    use vmscale_trace::dat::Tsc2Nsec;
    use vmscale_trace::decode::clock::TimeConversion;
    let live = live();
    // The recording as an extraction of `trace-cmd record --tsc2nsec --ts-offset` would
    // leave it: raw times in the pages, the conversion in meta.json. This machine's TSC
    // has no kernel conversion (trace-cmd says "TSC to nanosecond is not supported"), so
    // the factors are made up: 1.5 ns per tick, and 2 ms earlier.
    let conversion = TimeConversion {
        tsc2nsec: Some(Tsc2Nsec {
            mult: 3 << 29,
            shift: 30,
            offset: 0,
        }),
        offset_ns: -2_000_000,
    };
    let dir = scratch().join("tsc-dir");
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&live.dir, &dir);
    let meta_path = dir.join("meta.json");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    meta["dat"] = serde_json::json!({
        "tsc2nsec": conversion.tsc2nsec,
        "ts_offset_ns": conversion.offset_ns,
    });
    std::fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();

    let raw = raw_events(&live.dir);
    let expected: Vec<u64> = raw.iter().map(|e| conversion.apply(e.ts)).collect();
    assert!(expected.iter().zip(&raw).all(|(t, e)| *t > e.ts));
    let times = |events: Vec<RawEvent>| events.into_iter().map(|e| e.ts).collect::<Vec<_>>();
    assert_eq!(times(raw_events(&dir)), expected, "the directory's decode");

    // The written file carries the conversion as TSC2NSEC and OFFSET options.
    let (path, _) = write(&dir, "tsc", None);
    let decoder =
        Decoder::from_dat(std::sync::Arc::new(DatFile::open(&path).unwrap()), None).unwrap();
    assert_eq!(decoder.time_conversion(), conversion);
    let mut in_place = Vec::new();
    decoder.for_each(|e| in_place.push(e.ts())).unwrap();
    assert_eq!(in_place, expected, "the written file's decode");

    // trace-cmd's own reader converts the same times to the same nanoseconds.
    let (_, report) = split_dropped(&trace_cmd(&["report", "-t"], &path));
    let mut reported: Vec<u64> = report
        .lines()
        .filter(|l| !l.starts_with("cpus=") && !l.trim_start().starts_with("=>"))
        .map(|line| {
            comm_pid_time(line)
                .unwrap_or_else(|| panic!("unparsed report line {line:?}"))
                .2
        })
        .collect();
    let mut expected = expected;
    reported.sort_unstable();
    expected.sort_unstable();
    assert_eq!(
        reported, expected,
        "trace-cmd's times differ from vmscale's"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kernelshark_loads_every_event_of_a_written_recording() {
    let live = live();
    for compression in [None, Some(Algorithm::Zstd)] {
        let (events, marks) = kernelshark_matches(&live.dir, "kshark", compression);
        assert!(
            events > 0 && marks == 0,
            "{events} events, {marks} loss marks"
        );
    }
    // A recording that lost events: KernelShark marks each page that follows a loss.
    let (events, marks) = kernelshark_matches(Path::new(OVERRUN_FIXTURE), "kshark-overrun", None);
    assert!(
        events > 0 && marks > 0,
        "{events} events, {marks} loss marks"
    );
}

/// Writes `dir` as a .dat file and checks that KernelShark loads exactly vmscale's events
/// (time, CPU, pid, `system/name`), names every task the trace names, and marks lost
/// events after exactly the pages vmscale found losses after. Returns (events, marks).
fn kernelshark_matches(dir: &Path, label: &str, compression: Option<Algorithm>) -> (usize, usize) {
    let label = format!("{label}-{}", compression.map_or("none", |c| c.name()));
    let mut decoded = Vec::new();
    let summary = Decoder::open(dir)
        .unwrap()
        .for_each(|e| {
            let event = format!("{}/{}", e.system(), e.name());
            decoded.push((e.ts(), e.cpu(), e.pid(), event));
        })
        .unwrap();
    decoded.sort();
    let loss_pages: usize = summary.cpus.iter().map(|c| c.losses.len()).sum();
    let comms = comms_in(dir);

    let (path, _) = write(dir, &label, compression);
    // KernelShark marks where the kernel lost events with entries of its own.
    let (entries, marks): (Vec<KsEntry>, Vec<KsEntry>) = kernelshark_entries(&path)
        .into_iter()
        .partition(|e| e.event_id >= 0);
    assert_eq!(
        marks.len(),
        loss_pages,
        "{label}: KernelShark's loss marks against the pages after lost events"
    );
    let mut loaded: Vec<(u64, u32, i32, String)> = entries
        .iter()
        .map(|e| (e.ts, e.cpu, e.pid, e.event.clone()))
        .collect();
    loaded.sort();
    assert_eq!(
        loaded.len(),
        decoded.len(),
        "{label}: KernelShark loaded another number of entries"
    );
    assert_eq!(loaded, decoded, "{label}: KernelShark's entries differ");
    // Task names come from the written command lines.
    let with_comm: Vec<&KsEntry> = entries
        .iter()
        .filter(|e| comms.contains_key(&e.pid))
        .collect();
    let misnamed: Vec<&&KsEntry> = with_comm
        .iter()
        .filter(|e| comms[&e.pid] != e.task)
        .collect();
    assert!(
        !with_comm.is_empty() && misnamed.is_empty(),
        "{label}: {} of {} misnamed, first {:?}",
        misnamed.len(),
        with_comm.len(),
        misnamed.first()
    );
    println!(
        "{label}: KernelShark loaded all {} events, {} loss marks",
        entries.len(),
        marks.len()
    );
    (entries.len(), marks.len())
}
