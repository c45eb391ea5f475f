//! The pprof export read back by an independent reader, Go's `go tool pprof`: its totals
//! must be the samples' own, for real samples taken on this machine and for a profile
//! with wait stacks and labels.
//!
//! Needs Go (scripts/test installs Debian's golang-go where no `go` is found) and, for the
//! real samples, perf_event_open (root): the test fails rather than skips without them.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vmscale_export::pprof::{run_profile, write_pprof};
use vmscale_sample::{FrameKind, Profile, SampleConfig, Sampler, StackFrame};

fn go() -> PathBuf {
    let on_path = Command::new("sh")
        .args(["-c", "command -v go"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    on_path
        .into_iter()
        .chain(["/usr/local/go/bin/go", "/usr/lib/go/bin/go"].map(PathBuf::from))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!("Go is missing: this test reads the pprof export with `go tool pprof` (apt-get install golang-go; scripts/test does)")
        })
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `go tool pprof -top` of `file` for `index`: the "of N total" figure.
fn pprof_total(file: &Path, index: &str, unit: &str) -> u64 {
    let out = Command::new(go())
        .args([
            "tool",
            "pprof",
            "-top",
            "-sample_index",
            index,
            "-unit",
            unit,
        ])
        .arg(file)
        // pprof keeps copies of what it reads under $PPROF_TMPDIR (default $HOME/pprof).
        .env("PPROF_TMPDIR", file.parent().unwrap())
        .output()
        .expect("go tool pprof runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "go tool pprof failed:\n{text}");
    let total = text
        .lines()
        .find_map(|l| {
            let rest = l.split(" of ").nth(1)?;
            let number = rest.strip_suffix(" total")?;
            number.trim_end_matches(unit).parse::<u64>().ok()
        })
        .unwrap_or_else(|| panic!("no total in:\n{text}"));
    total
}

#[inline(never)]
fn vmscale_pprof_test_spin(until: Instant) -> u64 {
    let mut x = 1u64;
    while Instant::now() < until {
        x = black_box(x.wrapping_mul(3).wrapping_add(7));
    }
    x
}

#[test]
fn go_tool_pprof_totals_match_real_samples() {
    let trace = scratch("pprof-real");
    std::fs::copy("/proc/kallsyms", trace.join("kallsyms")).unwrap();
    let mut sampler = Sampler::open(&trace.join("samples"), SampleConfig::default())
        .unwrap_or_else(|e| panic!("this test needs perf_event_open (run as root): {e}"));
    sampler.set_on(true);
    black_box(vmscale_pprof_test_spin(
        Instant::now() + Duration::from_millis(400),
    ));
    sampler.set_on(false);
    let meta = sampler.finish().unwrap();
    let profile = run_profile(&trace, &[]).unwrap();
    assert!(profile.samples > 200, "{} samples", profile.samples);
    let file = trace.join("profile.pb.gz");
    let summary = write_pprof(&profile, std::fs::File::create(&file).unwrap()).unwrap();
    assert_eq!(summary.samples, profile.samples);
    assert_eq!(summary.cpu_ns, profile.samples * meta.period_ns);
    assert_eq!(pprof_total(&file, "samples", ""), profile.samples);
    assert_eq!(pprof_total(&file, "cpu", "ns"), summary.cpu_ns);
    // The spinning function is there by name.
    let out = Command::new(go())
        .args(["tool", "pprof", "-top", "-sample_index", "samples"])
        .arg(&file)
        .env("PPROF_TMPDIR", &trace)
        .output()
        .unwrap();
    let top = String::from_utf8_lossy(&out.stdout);
    assert!(top.contains("vmscale_pprof_test_spin"), "{top}");
}

#[test]
fn go_tool_pprof_reads_wait_stacks_and_labels() {
    let dir = scratch("pprof-wait");
    let mut profile = Profile::new(1_003_009, 997);
    let frame = |name: &str, kind| StackFrame {
        name: name.into(),
        kind,
    };
    for i in 0..50u64 {
        let leaf = if i % 5 == 0 {
            "kvm_set_memslot"
        } else {
            "kvm_vcpu_ioctl"
        };
        profile.add_sample(
            vec![
                frame("vmscale", FrameKind::Task),
                frame("ioctl", FrameKind::User),
                frame(leaf, FrameKind::Kernel),
            ],
            1_003_009,
        );
    }
    profile.add(
        &[
            ("vmscale", FrameKind::Task),
            ("ioctl", FrameKind::User),
            ("__mutex_lock_slowpath", FrameKind::Kernel),
        ],
        7_000_000,
        &[("cause", "lock-wait"), ("lock", "kvm->slots_lock")],
    );
    let file = dir.join("profile.pb.gz");
    let summary = write_pprof(&profile, std::fs::File::create(&file).unwrap()).unwrap();
    assert_eq!(pprof_total(&file, "samples", ""), 50);
    assert_eq!(pprof_total(&file, "cpu", "ns"), 50 * 1_003_009);
    assert_eq!(pprof_total(&file, "wait", "ns"), 7_000_000);
    assert_eq!(summary.wait_ns, 7_000_000);
    // The labels are there to filter on.
    let out = Command::new(go())
        .args([
            "tool",
            "pprof",
            "-top",
            "-sample_index",
            "wait",
            "-tagfocus",
            "lock=kvm->slots_lock",
        ])
        .arg(&file)
        .env("PPROF_TMPDIR", &dir)
        .output()
        .unwrap();
    let top = String::from_utf8_lossy(&out.stdout);
    assert!(top.contains("__mutex_lock_slowpath"), "{top}");
}
