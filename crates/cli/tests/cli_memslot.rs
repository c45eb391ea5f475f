//! `vmscale` end to end on the host's real /dev/kvm: the commands a user types, checked on
//! what they print and write. KVM is required; these tests fail without it.

mod common;

use common::*;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

#[test]
fn memslot_run_records_every_sample_and_a_sane_distribution() {
    let out = scratch("memslot");
    let o = vmscale()
        .args([
            "run", "memslot", "--vcpus", "1,4", "--repeat", "30", "--warmup", "2", "--batch", "3",
        ])
        .args(["--format", "json", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "vmscale failed: {}", stderr(&o));
    let printed: Value = serde_json::from_str(&stdout(&o)).expect("--format json prints JSON");
    let run_dir = only_run_dir(&out);
    assert!(run_dir
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .ends_with("-memslot"));
    assert!(
        stderr(&o).contains(run_dir.to_str().unwrap()),
        "run directory not named"
    );
    let written: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(printed, written, "printed JSON differs from run.json");
    assert!(run_dir.join("summary.md").exists());

    assert_eq!(written["schema_version"], 1);
    assert_eq!(written["scenario"], "memslot");
    let host = &written["host"];
    for field in ["kernel_release", "cpu_model"] {
        assert!(
            !host[field].as_str().unwrap().is_empty(),
            "host.{field} missing"
        );
    }
    assert!(host["online_cpus"].as_u64().unwrap() >= 1);
    assert!(host["memory_bytes"].as_u64().unwrap() > 0);
    assert!(host["kvm"]["max_vcpus"].as_u64().unwrap() >= 4);
    assert!(!host["kvm"]["backend"].as_str().unwrap().is_empty());
    assert!(written["tool"]["version"].as_str().is_some());
    let argv: Vec<&str> = written["command_line"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        argv.contains(&"--repeat") && argv.contains(&"1,4"),
        "{argv:?}"
    );
    assert_eq!(written["knobs"]["repeat"], 30);
    assert!(written["background"]["wall_ns"].as_u64().unwrap() > 0);

    let points = written["points"].as_array().unwrap();
    assert_eq!(
        points
            .iter()
            .map(|p| p["n"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 4]
    );
    for point in points {
        let n = point["n"].as_u64().unwrap() as usize;
        let series = point["series"].as_array().unwrap();
        let names: Vec<&str> = series.iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "direct",
                "pause-all",
                "pause-all guest stall",
                "batch-direct",
                "batch-pause-all",
                "batch-pause-all guest stall"
            ]
        );
        // The guests' clock has one sample per vCPU and pause (cli_pause_clocks checks it).
        for s in series
            .iter()
            .filter(|s| !s["name"].as_str().unwrap().ends_with("guest stall"))
        {
            let samples = u64s(&s["samples_ns"]);
            assert_eq!(
                samples.len(),
                30,
                "{n} vCPUs {}: warm-up counted?",
                s["name"]
            );
            assert!(samples.iter().all(|&v| v > 0));
            let sum = &s["summary"];
            let get = |k: &str| sum[k].as_u64().unwrap();
            assert!(get("min_ns") <= get("p50_ns"));
            assert!(get("p50_ns") <= get("p99_ns") && get("p99_ns") <= get("max_ns"));
            assert_eq!(get("max_ns"), *samples.iter().max().unwrap());
            // Phases are parts of each sample: they add up exactly.
            let phases = s["phases"].as_array().unwrap();
            if !phases.is_empty() {
                let parts: Vec<Vec<u64>> = phases.iter().map(|p| u64s(&p["samples_ns"])).collect();
                for (i, &sample) in samples.iter().enumerate() {
                    let total: u64 = parts.iter().map(|part| part[i]).sum();
                    assert_eq!(total, sample, "{}: phases do not add up", s["name"]);
                }
            }
            // Every spinning vCPU ran while this strategy was measured.
            let progress = u64s(&s["vcpu_progress"]);
            assert_eq!(progress.len(), n);
            assert!(
                progress.iter().all(|&p| p > 0),
                "{}: a vCPU never ran: {progress:?}",
                s["name"]
            );
        }
        let pause_all = &series[1];
        let phase_names: Vec<&str> = pause_all["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(phase_names, ["kick+wait", "update", "resume"]);
        // KVM's own counters saw the updates.
        assert!(
            !series[0]["kvm_stats"].as_object().unwrap().is_empty(),
            "no KVM statistics moved"
        );
    }
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn halted_guests_never_run_and_the_run_renders_again_from_disk() {
    let out = scratch("halt");
    let o = vmscale()
        .args([
            "run",
            "memslot",
            "--guest",
            "halt",
            "--vcpus",
            "2",
            "--repeat",
            "10",
            "--strategy",
            "pause-all",
            "--quiet",
            "--details",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("pause-all"),
        "table lacks the strategy:\n{}",
        stdout(&o)
    );
    let run_dir = only_run_dir(&out);
    let run: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        u64s(&run["points"][0]["series"][0]["vcpu_progress"]),
        [0, 0]
    );

    let csv = vmscale()
        .args(["report", "--format", "csv"])
        .arg(&run_dir)
        .output()
        .unwrap();
    assert!(csv.status.success(), "{}", stderr(&csv));
    // Header, the total row, and one row per pause-all phase.
    assert_eq!(stdout(&csv).lines().count(), 1 + 1 + 3, "{}", stdout(&csv));

    // The verdict comes first in every human-readable output.
    assert!(
        stdout(&o).starts_with("verdict for memslot: what the explained time went to"),
        "{}",
        stdout(&o)
    );
    let summary = std::fs::read_to_string(run_dir.join("summary.md")).unwrap();
    let after_title = summary.lines().nth(2).unwrap_or_default();
    assert_eq!(after_title, "### Verdict", "{summary}");
    let html = std::fs::read_to_string(run_dir.join("report.html")).unwrap();
    let verdict_at = html
        .find("<section class=\"verdict\">")
        .expect("no verdict in the HTML");
    assert!(verdict_at < html.find("<h2").unwrap_or(usize::MAX).max(verdict_at + 1));
    std::fs::remove_dir_all(&out).unwrap();
}

/// A bad request: exit code 2, exactly one line on stderr naming the problem, no run written.
fn assert_refused(o: &Output, out: &Path, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "want one line, got: {err}"
    );
    assert!(err.contains(needle), "'{needle}' not in: {err}");
    assert!(
        !out.exists() || std::fs::read_dir(out).unwrap().next().is_none(),
        "a run was written"
    );
}

#[test]
fn impossible_requests_are_refused_with_one_line() {
    let out = std::env::temp_dir().join(format!("vmscale-cli-refused-{}", std::process::id()));
    let run = |extra: &[&str]| {
        vmscale()
            .args(["run", "memslot", "--quiet", "--repeat", "5"])
            .args(extra)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap()
    };
    assert_refused(
        &run(&["--vcpus", "0"]),
        &out,
        "--vcpus must be between 1 and 4096 (got 0)",
    );
    // Within the knob's range, beyond what KVM allows here (1024 unless built with MAXSMP).
    assert_refused(&run(&["--vcpus", "2,4096"]), &out, "KVM_CAP_MAX_VCPUS");
    assert_refused(
        &run(&["--vcpus", "1", "--slot-mib", "4096", "--batch", "256"]),
        &out,
        "available on this host",
    );
    assert_refused(
        &run(&["--vcpus", "1", "--strategy", "fastest"]),
        &out,
        "unknown strategy",
    );
}

#[test]
fn too_few_file_descriptors_are_refused_before_any_vm_exists() {
    let out = std::env::temp_dir().join(format!("vmscale-cli-fds-{}", std::process::id()));
    let mut cmd = vmscale();
    cmd.args(["run", "memslot", "--quiet", "--vcpus", "64", "--out"])
        .arg(&out);
    // SAFETY: setrlimit is async-signal-safe and only affects the child about to exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 100,
                rlim_max: 100,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    assert_refused(&cmd.output().unwrap(), &out, "RLIMIT_NOFILE is 100");
}

#[test]
fn a_host_without_kvm_gets_a_clear_error() {
    // A private mount namespace with an empty /dev: /dev/kvm is missing only for the child.
    let o = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs none /dev && exec \"$0\" run memslot --quiet --vcpus 1 --out /tmp/vmscale-nokvm"])
        .arg(env!("CARGO_BIN_EXE_vmscale"))
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("/dev/kvm does not exist"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn report_refuses_a_corrupt_or_missing_run() {
    let dir = scratch("corrupt");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("run.json"),
        b"{\"schema_version\": 1, \"points\": [",
    )
    .unwrap();
    let o = vmscale().arg("report").arg(&dir).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("not a vmscale run.json"),
        "{}",
        stderr(&o)
    );
    let o = vmscale()
        .arg("report")
        .arg(dir.join("nothing-here"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no such run"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn list_shows_the_scenario_with_its_knobs_and_defaults() {
    let o = vmscale().arg("list").output().unwrap();
    assert!(o.status.success());
    let text = stdout(&o);
    for needle in [
        "memslot",
        "--vcpus",
        "1,2,4,8,16,32",
        "--strategy",
        "--guest",
        "--fifo",
        "--warmup",
    ] {
        assert!(text.contains(needle), "'{needle}' missing from:\n{text}");
    }
    // Each knob as `run <scenario> --help` describes it: default and the checked range.
    let memslot = text.split("\nzap ").next().unwrap();
    let runs = memslot
        .lines()
        .find(|l| l.trim_start().starts_with("--runs"))
        .unwrap_or_else(|| panic!("no --runs in:\n{memslot}"));
    assert!(
        runs.contains("[1]") && runs.ends_with("(1 to 1000)"),
        "{runs}"
    );
    let help = vmscale()
        .args(["run", "memslot", "--help"])
        .output()
        .unwrap();
    let help = stdout(&help);
    for knob in memslot
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
    {
        let flag = knob.split_whitespace().next().unwrap();
        assert!(
            help.contains(&format!("--{flag}")),
            "--{flag} not in --help:\n{help}"
        );
    }
    // Options every scenario shares are not listed as its knobs.
    assert!(!memslot.contains("--buffer-kib"), "{memslot}");
}

#[test]
fn doctor_passes_on_this_host_and_names_the_kvm_limits() {
    let o = vmscale().arg("doctor").output().unwrap();
    let text = stdout(&o);
    assert!(
        o.status.success(),
        "doctor failed here:\n{text}{}",
        stderr(&o)
    );
    for needle in [
        "/dev/kvm",
        "KVM_CAP_MAX_VCPUS",
        "tracefs",
        "kallsyms",
        "RLIMIT_NOFILE",
        "root",
    ] {
        assert!(text.contains(needle), "'{needle}' missing from:\n{text}");
    }
    // Doctor removes the instance it creates to prove tracefs works.
    let leftover = std::fs::read_dir("/sys/kernel/tracing/instances")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().contains("doctor"))
        })
        .unwrap_or(false);
    assert!(!leftover, "doctor left a tracefs instance behind");
}

#[test]
fn tour_runs_every_scenario_into_one_directory() {
    let out = scratch("tour");
    let o = vmscale()
        .args(["tour", "--quiet", "--format", "json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let runs: Vec<Value> = serde_json::from_str(&stdout(&o)).unwrap();
    let names: Vec<&str> = runs
        .iter()
        .map(|r| r["scenario"].as_str().unwrap())
        .collect();
    // The qemu scenarios run when QEMU is installed, as scripts/test makes sure it is.
    assert_eq!(
        names,
        [
            "memslot",
            "zap",
            "teardown",
            "mlock",
            "irqfd",
            "qemu-hotplug",
            "qemu-start",
            "qemu-migrate"
        ],
        "{}",
        stderr(&o)
    );
    for run in &runs {
        assert!(
            !run["points"].as_array().unwrap().is_empty(),
            "{} measured nothing",
            run["scenario"]
        );
        assert!(
            run["trace"]["decoded_events"].as_u64().unwrap() > 0,
            "{} was not traced",
            run["scenario"]
        );
    }
    // Each of the first three findings that is time on a CPU, asleep or runnable says what
    // makes up at least 70% of it: code paths, wakers, the tasks that held the CPUs.
    for run in &runs {
        for finding in run["verdict"].as_array().unwrap().iter().take(3) {
            if !["on-cpu", "sleep", "cpu-starvation"]
                .contains(&finding["cause"].as_str().unwrap_or(""))
            {
                continue;
            }
            let said: f64 = finding["explained_by"]
                .as_array()
                .map(|parts| parts.iter().filter_map(|p| p["share"].as_f64()).sum())
                .unwrap_or(0.0);
            assert!(
                said >= 0.7,
                "{}: only {:.0}% of a finding is said to be made of anything: {finding:#}",
                run["scenario"],
                said * 100.0
            );
        }
    }
    let tour_dir = only_run_dir(&out);
    assert!(tour_dir.join("summary.md").exists());
    let inside = std::fs::read_dir(&tour_dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count();
    assert_eq!(
        inside, 8,
        "one run directory per scenario inside the tour's"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn fifo_measuring_thread_completes_with_spinning_vcpus() {
    // A FIFO thread that busy-waited for vCPUs would starve them on a small host and hang;
    // this run finishing with every vCPU advanced is the check.
    let out = scratch("fifo");
    let o = vmscale()
        .args([
            "run",
            "memslot",
            "--fifo",
            "--vcpus",
            "3",
            "--repeat",
            "20",
            "--strategy",
            "direct,pause-all",
        ])
        .args(["--quiet", "--format", "json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(run["knobs"]["fifo"], true);
    for s in run["points"][0]["series"].as_array().unwrap() {
        assert!(
            u64s(&s["vcpu_progress"]).iter().all(|&p| p > 0),
            "{}",
            s["name"]
        );
    }
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn the_explanation_covers_the_timed_samples_and_nothing_between_them() {
    let run = json_run(
        &[
            "run",
            "memslot",
            "--vcpus",
            "1,2",
            "--repeat",
            "40",
            "--warmup",
            "2",
            "--strategy",
            "direct,pause-all",
            "--sleep-stacks",
        ],
        "memslot-windows",
    );
    let phases = run["trace"]["breakdown"].as_array().unwrap();
    assert_eq!(phases.len(), 4, "{phases:#?}");
    for phase in phases {
        let label = phase["label"].as_str().unwrap();
        let ops = phase["operations"].as_array().unwrap();
        // One operation: the timed sample; no system call of the measuring thread between
        // samples (pacing sleeps, futex waits for the vCPUs, marker writes) is explained.
        assert_eq!(ops.len(), 1, "{label}: {ops:#?}");
        assert_eq!(ops[0]["operation"], "timed sample", "{label}");
        assert_eq!(ops[0]["count"], 40, "{label}");
        // The explained time is the samples' own time, to the nanosecond.
        let (n, strategy) = label_point(label);
        let series = run["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["n"] == n)
            .unwrap()["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == strategy)
            .unwrap();
        let sampled: u64 = u64s(&series["samples_ns"]).iter().sum();
        assert_eq!(ops[0]["total_ns"].as_u64().unwrap(), sampled, "{label}");
        let explained: u64 = ops[0]["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["total_ns"].as_u64().unwrap())
            .sum();
        assert_eq!(explained, sampled, "{label}");
        let text = ops[0].to_string();
        assert!(!text.contains("nanosleep"), "{label}: {text}");
    }

    // The verdict restates those windows: known causes, shares of the samples' time.
    let verdict = run["verdict"]
        .as_array()
        .expect("a top-level verdict array");
    assert!(!verdict.is_empty());
    let mut shares = 0.0;
    // pause-all's two-clock finding speaks of the guests' stall, a subject of its own
    // (cli_pause_clocks checks it); every other finding shares the samples' time.
    for finding in verdict
        .iter()
        .filter(|f| !f["summary"].as_str().unwrap().starts_with("pause-all: "))
    {
        let cause = finding["cause"].as_str().unwrap();
        assert!(
            [
                "lock-wait",
                "lock-spin",
                "ipi",
                "cpu-starvation",
                "sleep",
                "on-cpu"
            ]
            .contains(&cause),
            "{finding}"
        );
        shares += finding["share"].as_f64().unwrap();
        assert!(
            finding["summary"]
                .as_str()
                .unwrap()
                .contains("of memslot's 160 timed samples"),
            "{finding}"
        );
    }
    assert!(shares <= 1.0 + 1e-9, "{shares}");
    assert!(verdict[0]["evidence"].as_array().unwrap().iter().any(|e| e
        .as_str()
        .unwrap()
        .starts_with("subject: the measuring thread during the 160 timed samples")));
}

/// `memslot vcpus=2 strategy=direct` -> (2, "direct").
fn label_point(label: &str) -> (u64, &str) {
    let n = label
        .split_whitespace()
        .find_map(|w| w.strip_prefix("vcpus="))
        .unwrap()
        .parse()
        .unwrap();
    let strategy = label
        .split_whitespace()
        .find_map(|w| w.strip_prefix("strategy="))
        .unwrap();
    (n, strategy)
}
