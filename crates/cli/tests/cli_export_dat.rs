//! `vmscale export --dat`: a recorded run's kernel trace as a trace-cmd .dat file that
//! Debian's `trace-cmd report` opens, and the one-line refusals. Needs root, tracefs and
//! trace-cmd; fails (never skips) without.

mod common;
#[path = "../../trace/tests/support/trace_cmd.rs"]
mod trace_cmd;

use common::*;

use serde_json::Value;
use trace_cmd::trace_cmd;

fn event_lines(report: &str) -> Vec<&str> {
    report
        .lines()
        .filter(|l| !l.starts_with("cpus=") && !l.trim_start().starts_with("=>"))
        .collect()
}

#[test]
fn a_recorded_run_exports_to_a_dat_file_that_trace_cmd_reports() {
    let out = scratch("export-dat");
    let o = vmscale()
        .args(["record", "--format", "json", "--quiet", "--out"])
        .arg(&out)
        .args([
            "--",
            "sh",
            "-c",
            "for i in $(seq 30); do /bin/true & done; wait",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    let decoded = run["trace"]["decoded_events"].as_u64().unwrap();
    let run_dir = only_run_dir(&out);

    // Uncompressed, at the default place.
    let e = vmscale()
        .args(["export", "--dat"])
        .arg(&run_dir)
        .output()
        .unwrap();
    assert!(e.status.success(), "{}", stderr(&e));
    let dat = run_dir.join("trace.dat");
    let message = stderr(&e);
    assert_eq!(message.trim_end().lines().count(), 1, "{message}");
    assert!(
        message.contains(&dat.display().to_string())
            && message.contains(&format!("{decoded} events")),
        "{message}"
    );
    let report = trace_cmd(&["report"], &dat);
    let lines = event_lines(&report);
    assert_eq!(
        lines.len() as u64,
        decoded,
        "trace-cmd reports another number of events than the run decoded"
    );
    // The forked children are named from the file's command lines.
    assert!(
        lines.iter().any(|l| l.trim_start().starts_with("true-")),
        "no event of a `true` child named"
    );
    assert!(trace_cmd(&["dump", "--clock"], &dat).contains("mono"));

    // zstd, elsewhere: the same events.
    let zstd = out.join("zstd.dat");
    let e = vmscale()
        .args(["export", "--dat", "--compression", "zstd", "-o"])
        .arg(&zstd)
        .arg(&run_dir)
        .output()
        .unwrap();
    assert!(e.status.success(), "{}", stderr(&e));
    let zstd_report = trace_cmd(&["report"], &zstd);
    assert_eq!(event_lines(&zstd_report), lines);
    assert!(
        std::fs::metadata(&zstd).unwrap().len() < std::fs::metadata(&dat).unwrap().len(),
        "the zstd file is not smaller"
    );

    // Refusals of the flags: one line, exit 2 (usage).
    for (args, needle) in [
        (
            &["export"][..],
            "exactly one of --perfetto, --dat, --pprof, --folded and --parquet",
        ),
        (&["export", "--dat", "--perfetto"][..], "exactly one"),
        (&["export", "--dat", "--compression", "zlib"][..], "zlib"),
        (
            &["export", "--perfetto", "--compression", "zstd"][..],
            "--dat only",
        ),
    ] {
        let e = vmscale().args(args).arg(&run_dir).output().unwrap();
        one_line_failure(&e, 2, needle);
    }
    // A run without a trace, and a run whose trace directory is gone.
    let mut record: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    let untraced = out.join("untraced");
    std::fs::create_dir_all(&untraced).unwrap();
    let traced = record.clone();
    record["trace"] = Value::Null;
    std::fs::write(untraced.join("run.json"), record.to_string()).unwrap();
    let e = vmscale()
        .args(["export", "--dat"])
        .arg(&untraced)
        .output()
        .unwrap();
    one_line_failure(&e, 1, "has no kernel trace");
    let moved = out.join("moved");
    std::fs::create_dir_all(&moved).unwrap();
    std::fs::write(moved.join("run.json"), traced.to_string()).unwrap();
    let e = vmscale()
        .args(["export", "--dat"])
        .arg(&moved)
        .output()
        .unwrap();
    one_line_failure(&e, 1, "meta.json");
    assert!(!moved.join("trace.dat").exists(), "a file after a failure");
    let _ = std::fs::remove_dir_all(&out);
}
