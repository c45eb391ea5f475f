//! Two vmscale runs at once, on the real kernel: a tracefs instance records every task's
//! events, so each run's trace holds the other's too. The run must name the other run as a
//! confounder and leave its tasks out of the lock analyses. Its own test binary, so that no
//! other test's runs share the host meanwhile.

mod common;

use common::*;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_run_names_the_other_vmscale_run_and_leaves_its_tasks_out() {
    let other_out = scratch("concurrent-other");
    let _removed_other = RemovedOnDrop(other_out.clone());
    // The irqfd storm contends on KVM's irqfd spinlock from its own threads for as long as
    // it runs: the confounder of the reported case.
    let mut other = Command::new(env!("CARGO_BIN_EXE_vmscale"))
        .args([
            "run",
            "irqfd",
            "--total",
            "150000",
            "--threads",
            "4",
            "--quiet",
            "--no-trace",
            "--out",
        ])
        .arg(&other_out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until it has its threads registering (more than one thread in the process).
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_dir(format!("/proc/{}/task", other.id()))
        .map(|d| d.count())
        .unwrap_or(0)
        < 3
    {
        assert!(
            other.try_wait().unwrap().is_none(),
            "the other run ended early"
        );
        assert!(
            Instant::now() < deadline,
            "the other run never started its threads"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let out = scratch("concurrent-memslot");
    let _removed = RemovedOnDrop(out.clone());
    let o = vmscale()
        .args([
            "run",
            "memslot",
            "--vcpus",
            "1,2",
            "--repeat",
            "30",
            "--strategy",
            "direct",
        ])
        .args(["--quiet", "--format", "json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let record: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let still_running = other.try_wait().unwrap().is_none();
    let _ = other.kill();
    let _ = other.wait();
    assert!(
        still_running,
        "the other run ended before this one: nothing was concurrent"
    );

    let warnings = record["warnings"].to_string();
    assert!(
        warnings.contains(&format!(
            "another vmscale run shared this host (pid {}",
            other.id()
        )),
        "{warnings}"
    );
    let neighbours = record["background"]["neighbours"].to_string();
    assert!(
        neighbours.contains(&format!("\"pid\":{}", other.id())),
        "{neighbours}"
    );
    let excluded: Vec<u64> = u64s(&record["trace"]["excluded_tids"]);
    assert!(excluded.contains(&(other.id() as u64)), "{excluded:?}");
    let excluded_waiters = |record: &serde_json::Value| -> Vec<String> {
        let mut found = Vec::new();
        for lock in record["trace"]["contention"].as_array().unwrap() {
            for waiter in lock["waiters"].as_array().unwrap() {
                if excluded.contains(&waiter["pid"].as_u64().unwrap()) {
                    found.push(format!("{} on {}", waiter["comm"], lock["name"]));
                }
            }
        }
        found
    };
    // No waiter of any lock is one of the other run's tasks...
    assert_eq!(excluded_waiters(&record), Vec::<String>::new());
    // ...though the raw trace holds their waits: analysed again without the exclusion, the
    // other run's threads are among the waiters.
    let run = only_run_dir(&out);
    let mut raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    raw["trace"]["excluded_tids"] = serde_json::json!([]);
    std::fs::write(run.join("run.json"), serde_json::to_vec(&raw).unwrap()).unwrap();
    let o = vmscale()
        .args(["report", "--format", "json"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let unexcluded: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        !excluded_waiters(&unexcluded).is_empty(),
        "the other run's tasks never waited on a lock in this trace: the test proved nothing"
    );
}
