//! `vmscale report RUN_DIR` on a run whose trace directory was damaged after the run: every
//! gap is a warning of the report (one sentence naming the file and what is unknown), the
//! findings the rest of the trace supports are still there, and nothing panics.

mod common;

use std::path::{Path, PathBuf};

use common::{scratch, stderr, vmscale, RemovedOnDrop};
use serde_json::Value;
use vmscale_run::{HostFacts, RunRecord, ToolInfo, TraceSection, SCHEMA_VERSION};

const PAGE: usize = 4096;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../trace/tests/fixtures/contention")
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

/// A run directory holding the fixture as its trace, with `warnings` already recorded.
fn run_dir(name: &str, warnings: Vec<String>) -> (PathBuf, RemovedOnDrop) {
    let dir = scratch(name);
    let removed = RemovedOnDrop(dir.clone());
    copy_dir(&fixture(), &dir.join("trace"));
    let record = RunRecord {
        schema_version: SCHEMA_VERSION,
        verdict: Vec::new(),
        scaling: Vec::new(),
        tool: ToolInfo::current("test"),
        scenario: "memslot".into(),
        sweep: "vcpus".into(),
        command_line: vec!["vmscale".into()],
        started_utc: String::new(),
        finished_utc: String::new(),
        host: HostFacts {
            hostname: "test".into(),
            kernel_release: "test".into(),
            kernel_version: "test".into(),
            cpu_model: "test".into(),
            online_cpus: 2,
            memory_bytes: 0,
            kvm: None,
        },
        knobs: serde_json::json!({}),
        background: None,
        points: Vec::new(),
        trace: Some(TraceSection {
            dir: "trace".into(),
            stacks: true,
            buffer_kib: 2048,
            ..TraceSection::default()
        }),
        warnings,
    };
    std::fs::write(dir.join("run.json"), serde_json::to_vec(&record).unwrap()).unwrap();
    (dir, removed)
}

fn report(dir: &Path, format: &str) -> String {
    let o = vmscale()
        .args(["report", "--details", "--format", format])
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

fn warnings(json: &Value) -> Vec<&str> {
    json["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect()
}

#[test]
fn a_whole_trace_reports_without_warnings() {
    let (dir, _removed) = run_dir("damaged-none", Vec::new());
    let json: Value = serde_json::from_str(&report(&dir, "json")).unwrap();
    assert!(warnings(&json).is_empty(), "{:?}", warnings(&json));
    assert!(json["trace"]["decoded_events"].as_u64().unwrap() > 500);
    assert!(!json["trace"]["contention"].as_array().unwrap().is_empty());
}

#[test]
fn every_kind_of_damage_is_a_warning_and_the_rest_is_analysed() {
    let recorded =
        "trace/kallsyms is missing: stack frames and other kernel addresses are shown as \
         addresses, not symbols"
            .to_string();
    // The run already warned about the missing kallsyms: the report does not repeat it.
    let (dir, _removed) = run_dir("damaged-all", vec![recorded.clone()]);
    let trace = dir.join("trace");
    let cpu1 = std::fs::read(trace.join("cpu1.raw")).unwrap();
    std::fs::write(trace.join("cpu1.raw"), &cpu1[..3 * PAGE + 1234]).unwrap();
    let cpu0 = std::fs::read(trace.join("cpu0.raw")).unwrap();
    std::fs::write(trace.join("cpu0.raw"), &cpu0[..5 * PAGE]).unwrap();
    std::fs::remove_dir_all(trace.join("formats/csd")).unwrap();
    std::fs::remove_file(trace.join("kallsyms")).unwrap();

    let json: Value = serde_json::from_str(&report(&dir, "json")).unwrap();
    assert_eq!(
        warnings(&json),
        [
            recorded.as_str(),
            "trace/cpu0.raw holds 5 of the 7 pages the recorder wrote: the file was truncated \
             at a page boundary; CPU 0's last 2 pages (8 KiB) of events are missing",
            "trace/cpu1.raw ends 1,234 bytes into a page: the file was truncated; the partial \
             page was skipped; 2 more of the 6 pages the recorder wrote are missing too",
            "trace/formats/csd is missing: 57 events of 3 unknown types could not be decoded, \
             so cross-CPU function calls are unknown",
        ]
    );
    assert!(json["trace"]["decoded_events"].as_u64().unwrap() > 100);
    let locks = json["trace"]["contention"].as_array().unwrap();
    assert!(!locks.is_empty());

    // The terminal rendering shows them too.
    let text = report(&dir, "table");
    assert!(
        text.contains("trace/cpu0.raw holds 5 of the 7 pages"),
        "{text}"
    );
}

#[test]
fn a_run_without_lock_formats_does_not_read_as_uncontended() {
    let (dir, _removed) = run_dir("damaged-lock", Vec::new());
    std::fs::remove_dir_all(dir.join("trace/formats/lock")).unwrap();
    std::fs::write(dir.join("trace/meta.json"), "not json").unwrap();
    let json: Value = serde_json::from_str(&report(&dir, "json")).unwrap();
    let found = warnings(&json);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].starts_with("trace/meta.json is not valid (expected ident at line 1 column 2)"),
        "{}",
        found[0]
    );
    // Without meta.json the missing directory cannot be named, but the undecoded events
    // are counted.
    assert!(
        found[1].starts_with("74 events of 2 types have no format in trace/formats (type ids"),
        "{}",
        found[1]
    );
    assert!(json["trace"]["contention"].as_array().unwrap().is_empty());
    assert!(json["trace"]["decoded_events"].as_u64().unwrap() > 500);
    assert_eq!(json["trace"]["lock_format_missing"], true);
    let text = report(&dir, "table");
    assert!(
        text.contains("lock contention unknown: the trace has no format for lock:contention_begin"),
        "{text}"
    );
    assert!(!text.contains("no lock contention recorded"), "{text}");
}

#[test]
fn a_run_whose_trace_directory_is_gone_says_so() {
    let (dir, _removed) = run_dir("damaged-gone", Vec::new());
    std::fs::remove_dir_all(dir.join("trace")).unwrap();
    let json: Value = serde_json::from_str(&report(&dir, "json")).unwrap();
    let found = warnings(&json);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("the run was traced but ") && found[0].contains("trace is missing"),
        "{}",
        found[0]
    );
}

/// `report RUN_DIR` within 30 s, or the test fails: blocking is the bug looked for.
fn report_within_limit(dir: &Path) -> Value {
    let mut child = vmscale()
        .args(["report", "--format", "json"])
        .arg(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            panic!("report blocked on a special file in the trace directory");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn special_files_inside_a_trace_directory_are_refused_without_blocking() {
    let (dir, _removed) = run_dir("damaged-fifo", Vec::new());
    for name in ["kallsyms", "cpu0.raw"] {
        let path = dir.join("trace").join(name);
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let json = report_within_limit(&dir);
        let found = warnings(&json).join("\n");
        let named = found
            .lines()
            .any(|w| w.contains(name) && w.contains("a FIFO, not a regular file"));
        assert!(named, "{name}: {found}");
    }
}
