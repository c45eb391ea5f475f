//! pause-all's two clocks, `--pin` and `--runs`, on the host's real /dev/kvm.

mod common;

use common::*;

use serde_json::Value;

fn run(args: &[&str], name: &str) -> (Value, std::path::PathBuf) {
    let out = scratch(name);
    let o = vmscale()
        .args(args)
        .args(["--quiet", "--format", "json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "vmscale {args:?}: {}", stderr(&o));
    let run_dir = only_run_dir(&out);
    (serde_json::from_slice(&o.stdout).unwrap(), run_dir)
}

fn series<'a>(point: &'a Value, name: &str) -> &'a Value {
    point["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no series {name} in {point}"))
}

fn phase(s: &Value, name: &str) -> Vec<u64> {
    let phase = s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no phase {name}"));
    u64s(&phase["samples_ns"])
}

#[test]
fn pause_all_reports_the_vmms_clock_and_each_guests_stall_and_explains_the_gap() {
    let repeat = 40;
    let (run, dir) = run(
        &[
            "run",
            "memslot",
            "--vcpus",
            "2",
            "--strategy",
            "pause-all",
            "--repeat",
            "40",
            "--warmup",
            "2",
        ],
        "two-clocks",
    );
    let point = &run["points"][0];
    let vmm = series(point, "pause-all");
    let stall = series(point, "pause-all guest stall");
    let samples = u64s(&stall["samples_ns"]);
    // One stall per vCPU and sample, unless a vCPU's gap was not logged.
    assert!(
        samples.len() <= 2 * repeat && samples.len() >= 2 * repeat * 9 / 10,
        "{} stalls",
        samples.len()
    );
    let parts: Vec<Vec<u64>> = ["until release", "until thread ran", "into guest"]
        .iter()
        .map(|p| phase(stall, p))
        .collect();
    for (i, &total) in samples.iter().enumerate() {
        assert_eq!(parts.iter().map(|p| p[i]).sum::<u64>(), total);
    }
    // A vCPU is out of the guest for the whole update: its stall until the release covers
    // that sample's update phase (the two clocks agree to within a TSC conversion).
    let unmatched = stall["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("no logged gap"));
    if !unmatched {
        let update = phase(vmm, "update");
        for (i, &until_release) in parts[0].iter().enumerate() {
            assert!(
                until_release + 2_000 >= update[i / 2],
                "stall {i}: {until_release} ns until release, update took {} ns",
                update[i / 2]
            );
        }
    }
    // The trace explains the released threads' windows: two vCPU threads.
    let windows = stall["task_windows"].as_array().unwrap();
    assert_eq!(windows.len(), samples.len());
    let mut tids: Vec<u64> = windows.iter().map(|w| w["tid"].as_u64().unwrap()).collect();
    tids.sort_unstable();
    tids.dedup();
    assert_eq!(tids.len(), 2, "{tids:?}");
    let resume = &run["trace"]["vcpu_resume"];
    assert_eq!(resume["tasks"], 2, "{resume}");
    assert!(resume["total_ns"].as_u64().unwrap() > 0);
    let verdict = run["verdict"].as_array().unwrap();
    let clocks = verdict
        .iter()
        .find(|f| f["summary"].as_str().unwrap().starts_with("pause-all: "))
        .unwrap_or_else(|| panic!("no two-clock finding in {verdict:?}"));
    let summary = clocks["summary"].as_str().unwrap();
    assert!(
        summary.contains("VMM") && summary.contains("the trace"),
        "{summary}"
    );
    assert_ne!(clocks["cause"], "none", "{clocks}");
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn pinned_vcpus_run_only_where_they_were_put_and_the_pin_is_recorded() {
    let (run, dir) = run(
        &[
            "run",
            "memslot",
            "--vcpus",
            "2",
            "--strategy",
            "pause-all",
            "--repeat",
            "30",
            "--pin",
            "0:1",
        ],
        "pin",
    );
    assert_eq!(run["knobs"]["pin"]["main"], 0);
    assert_eq!(u64s(&run["knobs"]["pin"]["vcpus"]), [1]);
    let stall = series(&run["points"][0], "pause-all guest stall");
    let vcpu_tids: Vec<i32> = stall["task_windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["tid"].as_i64().unwrap() as i32)
        .collect();
    assert!(!vcpu_tids.is_empty());
    // Every time the scheduler put a vCPU thread on a CPU during the trace, it was CPU 1.
    let decoder = vmscale_trace::Decoder::open(dir.join("trace")).unwrap();
    let mut placements = std::collections::BTreeMap::<u32, usize>::new();
    decoder
        .for_each(|event| {
            if let vmscale_trace::EventKind::SchedSwitch(s) = event.kind() {
                if vcpu_tids.contains(&s.next_pid) {
                    *placements.entry(event.cpu()).or_default() += 1;
                }
            }
        })
        .unwrap();
    assert!(
        placements.get(&1).copied().unwrap_or(0) > 0,
        "{placements:?}"
    );
    assert_eq!(
        placements.keys().copied().collect::<Vec<_>>(),
        [1],
        "{placements:?}"
    );
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn independent_runs_are_merged_with_each_runs_part() {
    let (run, dir) = run(
        &[
            "run",
            "memslot",
            "--guest",
            "halt",
            "--vcpus",
            "1",
            "--strategy",
            "direct",
            "--repeat",
            "25",
            "--runs",
            "3",
            "--no-trace",
        ],
        "runs",
    );
    assert_eq!(run["knobs"]["runs"], 3);
    let direct = series(&run["points"][0], "direct");
    assert_eq!(u64s(&direct["samples_ns"]).len(), 75);
    let parts = direct["runs"].as_array().unwrap();
    assert_eq!(parts.len(), 3);
    assert!(parts
        .iter()
        .all(|p| p["samples"] == 25 && p["p50_ns"].as_u64().unwrap() > 0));
    assert!(
        direct["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("3 independent runs, p50 "),
        "{}",
        direct["notes"]
    );
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn a_pin_on_a_cpu_that_does_not_exist_is_refused_in_one_line() {
    let out = scratch("bad-pin");
    for (pin, needle) in [
        ("4095", "not one this process may run on"),
        ("x", "not a CPU number"),
    ] {
        let o = vmscale()
            .args([
                "run", "memslot", "--vcpus", "1", "--pin", pin, "--quiet", "--out",
            ])
            .arg(&out)
            .output()
            .unwrap();
        one_line_failure(&o, 2, needle);
    }
    let o = vmscale()
        .args([
            "run", "zap", "--vcpus", "1", "--runs", "0", "--quiet", "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    one_line_failure(&o, 2, "--runs must be between 1 and 1000");
    let _ = std::fs::remove_dir_all(&out);
}
