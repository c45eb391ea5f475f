//! Nothing left behind: interrupted and killed runs, on the real kernel. Runs alone in its
//! own test binary, since it inspects tracefs instances by pid.

mod common;

use common::*;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const INSTANCES: &str = "/sys/kernel/tracing/instances";

fn instances_of(pid: u32) -> Vec<String> {
    let prefix = format!("vmscale-{pid}-");
    std::fs::read_dir(INSTANCES)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

fn holds_dev_kvm(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == Path::new("/dev/kvm")))
        })
        .unwrap_or(false)
}

/// A long traced run, started and waited for until its instance exists and it measures.
fn start_long_run(out: &Path) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_vmscale"))
        .args([
            "run",
            "memslot",
            "--vcpus",
            "2",
            "--repeat",
            "1000000",
            "--warmup",
            "0",
            "--strategy",
            "pause-all",
            "--quiet",
            "--out",
        ])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while instances_of(child.id()).is_empty() || !holds_dev_kvm(child.id()) {
        assert!(
            Instant::now() < deadline,
            "the run never started tracing with a VM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn interrupted_and_killed_runs_leave_nothing_behind() {
    assert!(
        Path::new(INSTANCES).exists() || vmscale_mounts_tracefs(),
        "tracefs unavailable"
    );

    for (signal, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        let out = scratch(name);
        let _removed = RemovedOnDrop(out.clone());
        let child = start_long_run(&out);
        let pid = child.id();
        // SAFETY: sends a signal to our own child, which is still running (not yet waited).
        assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(130), "{name}: {stderr}");
        assert!(stderr.contains("interrupted"), "{name}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{name}: {stderr}");
        assert!(
            instances_of(pid).is_empty(),
            "{name}: tracefs instance left"
        );
        let runs: Vec<_> = std::fs::read_dir(&out)
            .map(|d| d.flatten().collect())
            .unwrap_or_default();
        assert!(
            runs.is_empty(),
            "{name}: a partial run directory was left: {runs:?}"
        );
    }

    // SIGKILL runs no cleanup at all: its instance stays until the next vmscale starts.
    let out = scratch("SIGKILL");
    let mut child = start_long_run(&out);
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !instances_of(pid).is_empty(),
        "the killed run's instance should still be there"
    );
    let doctor = Command::new(env!("CARGO_BIN_EXE_vmscale"))
        .args(["doctor", "--cleanup"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        text.contains(&format!("vmscale-{pid}-")),
        "doctor --cleanup did not name it: {text}"
    );
    assert!(
        instances_of(pid).is_empty(),
        "stale instance survived doctor --cleanup"
    );
    let _ = std::fs::remove_dir_all(&out);
}

fn vmscale_mounts_tracefs() -> bool {
    Command::new(env!("CARGO_BIN_EXE_vmscale"))
        .arg("doctor")
        .status()
        .is_ok()
        && Path::new(INSTANCES).exists()
}
