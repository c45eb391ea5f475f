//! On-CPU sampling through the command line: `record` samples by default and the run
//! record keeps the stacks, `--no-sample` leaves them out, a vmscale that may not use
//! perf_event_open records its trace all the same and says why it has no samples, and
//! `export --pprof|--folded` write the samples, which Go's pprof and speedscope (in
//! chromium) read back. Needs root, tracefs, capsh (to drop the capabilities
//! perf_event_open needs), Go, chromium and speedscope; fails without.

mod common;

use common::*;

use std::process::Command;

use serde_json::Value;

/// A shell loop that keeps a CPU busy in user space for about half a second.
const BUSY: &str = "i=0; end=$(($(date +%s%N) + 500000000)); while [ $(date +%s%N) -lt $end ]; do i=$((i+1)); done";

#[test]
fn record_samples_by_default_and_exports_them() {
    let out = scratch("sample-record");
    let o = vmscale()
        .args(["record", "--format", "json", "--out"])
        .arg(&out)
        .args(["--", "sh", "-c", BUSY])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    let profile = &run["trace"]["on_cpu"];
    let samples = profile["samples"].as_u64().unwrap_or(0);
    assert!(
        samples > 200,
        "{samples} samples in half a second of a busy shell"
    );
    assert_eq!(profile["hz"], 997);
    let names: Vec<&str> = profile["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"sh"),
        "the shell is a root frame: {names:?}"
    );
    let dir = only_run_dir(&out);
    assert!(dir.join("trace/samples/meta.json").exists());
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("id=\"flame-on-cpu\""));

    // Both exports, their numbers the record's.
    let o = vmscale()
        .args(["export", "--folded"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let folded = std::fs::read_to_string(dir.join("stacks.folded")).unwrap();
    let total: u64 = folded
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, samples);
    assert!(folded.lines().any(|l| l.starts_with("sh;")), "{folded}");
    let o = vmscale()
        .args(["export", "--pprof", "-o"])
        .arg(out.join("p.pb.gz"))
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("{samples} on-CPU samples")),
        "{}",
        stderr(&o)
    );
    let gz = std::fs::read(out.join("p.pb.gz")).unwrap();
    assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip");

    // speedscope opens it: its profile is the default sample type, the CPU time, whose
    // total is Go's reading of the same file, and the shell's frames are there by name.
    let read = speedscope_reading(&out.join("p.pb.gz"));
    let profile = &read["profiles"][0];
    assert_eq!(profile["unit"], "nanoseconds", "{profile}");
    let span = profile["endValue"].as_u64().unwrap() - profile["startValue"].as_u64().unwrap();
    assert_eq!(span, go_pprof_total_ns(&out.join("p.pb.gz"), "cpu"));
    assert_eq!(
        span,
        samples * run["trace"]["on_cpu"]["period_ns"].as_u64().unwrap(),
        "{profile}"
    );
    let frames: Vec<&str> = read["shared"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(frames.contains(&"sh"), "{frames:?}");

    // Exactly one format.
    let o = vmscale()
        .args(["export", "--pprof", "--folded"])
        .arg(&dir)
        .output()
        .unwrap();
    one_line_failure(&o, 2, "exactly one of");
}

#[test]
fn no_sample_records_no_samples() {
    let out = scratch("sample-off");
    let o = vmscale()
        .args([
            "record",
            "--no-sample",
            "--duration",
            "0.2",
            "--format",
            "json",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(run["trace"].get("on_cpu").is_none());
    let dir = only_run_dir(&out);
    assert!(!dir.join("trace/samples").exists());
    let o = vmscale()
        .args(["export", "--pprof"])
        .arg(&dir)
        .output()
        .unwrap();
    one_line_failure(&o, 1, "no on-CPU samples");
    // Out-of-range frequencies are refused when parsed.
    let o = vmscale()
        .args(["record", "--sample-hz", "0", "--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn a_vmscale_refused_perf_event_open_traces_without_samples_and_says_so() {
    let capsh = ["/usr/sbin/capsh", "/sbin/capsh", "/usr/bin/capsh"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("capsh is missing (apt-get install libcap2-bin): it drops perf_event_open's capabilities");
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        paranoid >= 1,
        "kernel.perf_event_paranoid is {paranoid}: anyone may sample every CPU, so no refusal can be provoked"
    );
    let out = scratch("sample-refused");
    let exe = env!("CARGO_BIN_EXE_vmscale");
    let o = Command::new(capsh)
        .arg("--drop=cap_perfmon,cap_sys_admin")
        .arg("--")
        .arg("-c")
        .arg(format!(
            "exec {exe} record --duration 0.2 --format json --quiet --out {}",
            out.display()
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("perf_event_open is not allowed here"), "{err}");
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        run["trace"]["decoded_events"].as_u64().unwrap() > 0,
        "the trace went on"
    );
    assert!(run["trace"].get("on_cpu").is_none());
    let warnings = run["warnings"].as_array().unwrap();
    let warning = warnings
        .iter()
        .filter_map(|w| w.as_str())
        .find(|w| w.contains("perf_event_open is not allowed"))
        .unwrap_or_else(|| panic!("no warning says why: {warnings:?}"));
    assert!(!warning.contains('\n'));
    assert!(warning.contains("perf_event_paranoid"), "{warning}");
}

/// `go tool pprof -top` of `file` for sample type `index` in nanoseconds: its "of N total".
fn go_pprof_total_ns(file: &std::path::Path, index: &str) -> u64 {
    let go = ["go", "/usr/local/go/bin/go", "/usr/lib/go/bin/go"]
        .into_iter()
        .find(|go| Command::new(go).arg("version").output().is_ok_and(|o| o.status.success()))
        .expect("Go is missing: this test reads the pprof export with `go tool pprof` (apt-get install golang-go; scripts/test does)");
    let out = Command::new(go)
        .args([
            "tool",
            "pprof",
            "-top",
            "-sample_index",
            index,
            "-unit",
            "ns",
        ])
        .arg(file)
        .env("PPROF_TMPDIR", file.parent().unwrap())
        .output()
        .unwrap();
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "go tool pprof failed:\n{text}");
    text.lines()
        .find_map(|l| {
            let total = l.split(" of ").nth(1)?.strip_suffix(" total")?;
            total.trim_end_matches("ns").parse().ok()
        })
        .unwrap_or_else(|| panic!("no total in:\n{text}"))
}

/// speedscope's reading of the profile in `file`: speedscope (its own pprof importer, in
/// headless chromium) opens it as its command line would, and its Export button's file,
/// speedscope's JSON format, is returned. scripts/test installs speedscope with npm.
fn speedscope_reading(file: &std::path::Path) -> Value {
    let app = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/speedscope/node_modules/speedscope/dist/release/index.html");
    assert!(
        app.exists(),
        "speedscope is missing: this test opens the pprof export in it \
         (npm ci --prefix crates/cli/tests/speedscope; scripts/test does)"
    );
    let name = file.file_name().unwrap().to_string_lossy();
    let loader = file.with_extension("speedscope.js");
    std::fs::write(
        &loader,
        format!(
            "speedscope.loadFileFromBase64({name:?}, {:?});\n{}",
            base64(&std::fs::read(file).unwrap()),
            include_str!("speedscope/export-on-load.js")
        ),
    )
    .unwrap();
    let profile_dir = file.with_extension("chromium");
    let o = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--virtual-time-budget=20000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile_dir.display()))
        .arg(format!(
            "file://{}#localProfilePath={}",
            app.display(),
            loader.display()
        ))
        .output()
        .expect("chromium runs (apt-get install chromium; scripts/test does)");
    let _ = std::fs::remove_dir_all(&profile_dir);
    let dom = stdout(&o);
    let exported = dom
        .split_once("<pre id=\"exported\">")
        .and_then(|(_, rest)| rest.split_once("</pre>"))
        .unwrap_or_else(|| panic!("speedscope exported nothing: {}", stderr(&o)))
        .0
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&");
    serde_json::from_str(&exported).unwrap_or_else(|e| panic!("{e}: {exported}"))
}

/// Standard base64 with padding, as speedscope's loader takes a profile.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let word = chunk
            .iter()
            .enumerate()
            .fold(0u32, |w, (i, &b)| w | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(word >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A command that sleeps: report.html draws its time off a CPU by wait chain (asleep in
/// the kernel's nanosleep, woken by the timer), and the pprof export carries the same
/// chains as its `wait` values, which Go's reader sums to the record's own total.
#[test]
fn the_time_off_a_cpu_is_drawn_and_exported_by_wait_chain() {
    let out = scratch("sample-waits");
    let o = vmscale()
        .args(["record", "--format", "json", "--out"])
        .arg(&out)
        .args(["--", "sh", "-c", "sleep 0.1; sleep 0.1"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let record: vmscale_run::RunRecord = serde_json::from_slice(&o.stdout).unwrap();
    let chains = vmscale_run::wait_chains::chains(record.trace.as_ref().unwrap());
    let waited: u64 = chains.iter().map(|c| c.ns).sum();
    assert!(
        waited >= 150_000_000,
        "two 100 ms sleeps, {waited} ns of waiting: {chains:#?}"
    );
    assert!(
        chains
            .iter()
            .any(|c| c.frames.iter().any(|f| f.contains("nanosleep"))
                && c.frames.iter().any(|f| f.starts_with("woken by"))),
        "no sleep in nanosleep with its waker: {chains:#?}"
    );
    let dir = only_run_dir(&out);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(
        html.contains("id=\"flame-off-cpu\""),
        "no off-CPU flame graph"
    );
    let file = out.join("waits.pb.gz");
    let o = vmscale()
        .args(["export", "--pprof", "-o"])
        .arg(&file)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("{:.6} s of waiting", waited as f64 / 1e9)),
        "{}",
        stderr(&o)
    );
    assert_eq!(go_pprof_total_ns(&file, "wait"), waited);
}
