//! Real sampling on this machine: a child process that spins in a function of its own and
//! then reads /dev/zero must show up in that function, and its kernel time in the kernel's
//! read path, symbolized with kallsyms.
//!
//! Needs root (or a perf_event_paranoid that allows system-wide sampling): without it the
//! test fails with the sampler's one-line error, it never skips.

use std::collections::HashSet;
use std::hint::black_box;
use std::io::Read;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use vmscale_sample::{Filter, FrameKind, Profile, SampleConfig, Sampler, Samples, Symbolizer};

const CHILD_ENV: &str = "VMSCALE_SAMPLE_TEST_CHILD";

#[inline(never)]
fn vmscale_test_spin_in_user_space(until: Instant) -> u64 {
    let mut x = 1u64;
    while Instant::now() < until {
        for _ in 0..10_000 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

#[inline(never)]
fn vmscale_test_read_zeroes(until: Instant) -> usize {
    let mut file = std::fs::File::open("/dev/zero").expect("/dev/zero");
    let mut buf = vec![1u8; 1 << 20];
    let mut total = 0;
    while Instant::now() < until {
        total += file.read(&mut buf).expect("read /dev/zero");
    }
    total
}

/// The child's body: run as this test binary with CHILD_ENV set.
#[test]
fn child_body() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let start = Instant::now();
    black_box(vmscale_test_spin_in_user_space(
        start + Duration::from_millis(600),
    ));
    black_box(vmscale_test_read_zeroes(
        start + Duration::from_millis(1200),
    ));
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_busy_child_is_found_in_its_own_functions_and_the_kernel_read_path() {
    let trace_dir = scratch("real-sampling");
    std::fs::copy("/proc/kallsyms", trace_dir.join("kallsyms")).unwrap();
    let mut sampler = Sampler::open(&trace_dir.join("samples"), SampleConfig::default())
        .unwrap_or_else(|e| panic!("this test needs perf_event_open (run as root): {e}"));
    sampler.set_on(true);
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_body",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, "1")
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    sampler.set_on(false);
    let meta = sampler.finish().unwrap();
    assert_eq!(meta.clock, "mono");
    assert!(meta.samples() > 0, "{meta:?}");
    assert_eq!(meta.lost(), 0, "lost samples at 997 Hz: {meta:?}");

    // Sample times are on the trace clock: the child's are inside the window around it.
    let samples = Samples::open(&trace_dir).unwrap();
    let (on, off) = meta.windows[0];
    let mut child_samples = 0u64;
    let mut last_per_cpu = std::collections::HashMap::new();
    let mut previous = 0;
    samples
        .for_each(|s| {
            assert!(s.ts >= previous, "merged samples out of time order");
            previous = s.ts;
            let last = last_per_cpu.entry(s.cpu).or_insert(0);
            assert!(s.ts >= *last);
            *last = s.ts;
            // The window is the child's life as the parent saw it.
            if s.pid == pid && (on..off).contains(&s.ts) {
                child_samples += 1;
            }
        })
        .unwrap();
    // 1.2 s on one CPU at 997 Hz: about 1,200 samples; allow for a busy shared machine.
    assert!(
        child_samples > 500,
        "only {child_samples} samples of the child"
    );

    let mut symbols = Symbolizer::load(&samples, &trace_dir).unwrap();
    assert!(
        symbols.comm_at(pid, u64::MAX).is_some(),
        "no name for the child"
    );
    let filter = Filter {
        windows: meta.windows.clone(),
        pids: Some(HashSet::from([pid])),
        ..Filter::default()
    };
    let profile = Profile::on_cpu(&trace_dir, &filter).unwrap();
    assert_eq!(profile.samples, child_samples);
    assert_eq!(profile.cpu_ns(), child_samples * meta.period_ns);
    let share = |pred: &dyn Fn(&vmscale_sample::StackFrame) -> bool| {
        let hits: u64 = profile
            .stacks
            .iter()
            .filter(|s| s.frames.iter().any(pred))
            .map(|s| s.samples)
            .sum();
        hits as f64 / profile.samples as f64
    };
    let spin =
        share(&|f| f.kind == FrameKind::User && f.name.contains("vmscale_test_spin_in_user_space"));
    let read_path = share(&|f| {
        f.kind == FrameKind::Kernel
            && [
                "read_zero",
                "vfs_read",
                "ksys_read",
                "__x64_sys_read",
                "iov_iter_zero",
            ]
            .iter()
            .any(|n| &*f.name == *n)
    });
    let mut folded = Vec::new();
    profile.write_folded(&mut folded).unwrap();
    let folded = String::from_utf8(folded).unwrap();
    let head: String = folded.lines().take(15).collect::<Vec<_>>().join("\n");
    eprintln!("{head}");
    assert!(
        spin > 0.25,
        "spin function in {spin:.2} of the child's samples:\n{head}"
    );
    assert!(
        read_path > 0.15,
        "kernel read path in {read_path:.2}:\n{head}"
    );
    // The kernel's entry is named, not an address.
    assert!(
        folded.contains("do_syscall_64_[k]") || folded.contains("entry_SYSCALL_64_[k]"),
        "{head}"
    );
    // Symbolizing the leaf of a spin sample directly gives the function and its file.
    let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
    let mut found = false;
    samples
        .for_each(|s| {
            if s.pid == pid && s.kernel.is_empty() && !found {
                if let Some(&ip) = s.user.first() {
                    let frame = symbols.user(s.pid, s.ts, ip);
                    if frame
                        .function
                        .as_deref()
                        .is_some_and(|f| f.contains("vmscale_test_spin_in_user_space"))
                    {
                        assert_eq!(frame.object.as_deref(), exe.to_str());
                        found = true;
                    }
                }
            }
        })
        .unwrap();
    assert!(found);
}
