//! `vmscale record --pid`: attaching to a process vmscale did not start, on the real kernel.
//! Its threads are the subject; the recording ends with it, or at --duration, and vmscale
//! never signals it.
//!
//! Needs root, tracefs and a C compiler (`cc`); fails, never skips, without.

mod common;

use common::*;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the attached-to process when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn build(case: &str, dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../corpus")
        .join(case)
        .join("repro.c");
    let binary = dir.join(case);
    let cc = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc ({e}): scripts/test installs gcc"));
    assert!(cc.status.success(), "{}", stderr(&cc));
    binary
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn attaching_explains_the_processs_threads_and_ends_when_it_exits() {
    let dir = scratch("record-pid");
    let _removed = RemovedOnDrop(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    // Two threads pass a token through pipes, with a 1 ms nanosleep before each pass, for
    // about a second: asleep nearly all the time, with nothing contended.
    let binary = build("sleep-no-lock", &dir);
    let mut target = Running(Command::new(&binary).stdout(Stdio::null()).spawn().unwrap());
    let pid = target.0.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    while threads(pid) < 3 {
        assert!(Instant::now() < deadline, "the threads never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    let o = vmscale()
        .args(["record", "--pid", &pid.to_string()])
        .args(["--quiet", "--format", "json", "--out"])
        .arg(dir.join("runs"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // It ended by itself, unharmed: vmscale waited for it without signalling it.
    let status = target.0.wait().unwrap();
    assert!(
        status.success(),
        "the process attached to ended with {status}"
    );
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(run["knobs"]["pid"], pid, "{}", run["knobs"]);
    let warnings = run["warnings"].to_string();
    assert!(
        warnings.contains(&format!("process {pid} (sleep-no-lock) exited after")),
        "{warnings}"
    );
    let trace = &run["trace"];
    assert_eq!(trace["command"]["pid"], pid);
    assert_eq!(
        trace["command"]["threads"].as_array().map(Vec::len),
        Some(2),
        "its two threads when the recording began: {}",
        trace["command"]
    );
    let subject = &trace["subject"];
    assert!(subject["tasks"].as_u64().unwrap() >= 2, "{subject:#}");
    let first = &run["verdict"][0];
    assert_eq!(first["cause"], "sleep", "{:#}", run["verdict"]);
    assert!(
        first["evidence"][0]
            .as_str()
            .unwrap()
            .starts_with(&format!("subject: sleep-no-lock (pid {pid}): its threads")),
        "{first:#}"
    );
    // Its threads' system calls were traced: nobody else's.
    assert!(
        trace["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "raw_syscalls:sys_enter"),
        "{}",
        trace["events"]
    );
}

#[test]
fn a_duration_ends_the_recording_and_leaves_the_process_running() {
    let dir = scratch("record-pid-duration");
    let _removed = RemovedOnDrop(dir.clone());
    let mut target = Running(Command::new("sleep").arg("60").spawn().unwrap());
    let pid = target.0.id();
    let started = Instant::now();
    let o = vmscale()
        .args(["record", "--pid", &pid.to_string(), "--duration", "0.5"])
        .args(["--quiet", "--format", "json", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        target.0.try_wait().unwrap().is_none(),
        "the process attached to did not outlive the recording"
    );
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // Asleep all along: no event of it, and the verdict says there is nothing to explain
    // rather than inventing a cause.
    let first = &run["verdict"][0];
    assert_eq!(first["cause"], "none", "{first:#}");
    assert!(
        first["summary"]
            .as_str()
            .unwrap()
            .starts_with("sleep left no event in the trace"),
        "{first:#}"
    );
}

#[test]
fn a_pid_that_is_not_there_or_not_alone_is_refused_in_one_line() {
    let o = vmscale()
        .args(["record", "--pid", "4194304", "--duration", "1"])
        .output()
        .unwrap();
    one_line_failure(&o, 2, "--pid 4194304: no such process");
    let o = vmscale()
        .args(["record", "--pid", "1", "--", "true"])
        .output()
        .unwrap();
    one_line_failure(&o, 2, "cannot be used with");
}
