//! `vmscale compare` on real runs: the same run against itself, a run whose samples were
//! scaled (a regression of known size), and runs that must not be compared.

mod common;

use common::*;
use serde_json::Value;

fn record(args: &[&str], out: &std::path::Path) -> std::path::PathBuf {
    let o = vmscale()
        .args(args)
        .args(["--quiet", "--no-trace", "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    only_run_dir(out)
}

#[test]
fn compare_finds_no_change_against_itself_and_gates_a_known_regression() {
    let base = scratch("compare");
    let a = record(
        &[
            "run",
            "memslot",
            "--vcpus",
            "1",
            "--repeat",
            "60",
            "--strategy",
            "direct",
            "--guest",
            "halt",
        ],
        &base.join("a"),
    );

    let same = vmscale()
        .args(["compare", "--fail-above", "1", "--format", "json"])
        .arg(&a)
        .arg(&a)
        .output()
        .unwrap();
    assert!(same.status.success(), "{}", stderr(&same));
    let same: Value = serde_json::from_slice(&same.stdout).unwrap();
    assert_eq!(same["rows"][0]["verdict"], "no significant change");
    assert!(same["rows"][0]["p_value"].as_f64().unwrap() > 0.5);

    // B: the same run with every sample slower by twice A's slowest sample, so every B
    // sample is slower than every A sample and even a bimodal distribution's resampled
    // medians cannot overlap: a regression of known size.
    let b = base.join("b");
    std::fs::create_dir_all(&b).unwrap();
    let mut run: Value =
        serde_json::from_slice(&std::fs::read(a.join("run.json")).unwrap()).unwrap();
    let samples = run["points"][0]["series"][0]["samples_ns"]
        .as_array_mut()
        .unwrap();
    let mut sorted: Vec<u64> = samples.iter().map(|s| s.as_u64().unwrap()).collect();
    sorted.sort_unstable();
    let shift = 2 * sorted[sorted.len() - 1];
    let p50_a = sorted[sorted.len().div_ceil(2) - 1] as f64;
    let expected = shift as f64 / p50_a;
    for s in samples.iter_mut() {
        *s = Value::from(s.as_u64().unwrap() + shift);
    }
    std::fs::write(b.join("run.json"), serde_json::to_vec(&run).unwrap()).unwrap();
    let slower = vmscale()
        .args(["compare", "--fail-above", "20", "--format", "json"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert_eq!(
        slower.status.code(),
        Some(3),
        "{}{}",
        stdout(&slower),
        stderr(&slower)
    );
    assert!(
        stderr(&slower).contains("significant regression above 20.0%"),
        "{}",
        stderr(&slower)
    );
    let slower: Value = serde_json::from_slice(&slower.stdout).unwrap();
    assert_eq!(slower["rows"][0]["verdict"], "slower");
    let p50 = &slower["rows"][0]["changes"][0];
    assert!(
        (p50["relative"].as_f64().unwrap() - expected).abs() < 0.01 * expected,
        "{p50} vs expected {expected}"
    );
    // With the gate far above the change it passes.
    let lenient = vmscale()
        .args(["compare", "--fail-above", &format!("{}", expected * 1000.0)])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert!(lenient.status.success(), "{}", stderr(&lenient));

    // The other formats, and the page with both runs overlaid.
    let page = base.join("compare.html");
    let md = vmscale()
        .args(["compare", "--format", "md", "--html"])
        .arg(&page)
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert!(md.status.success(), "{}", stderr(&md));
    let md = stdout(&md);
    let table_rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(table_rows.len(), 3, "header, rule and one row: {md}");
    assert!(
        table_rows.iter().all(|r| r.matches('|').count() == 8),
        "{md}"
    );
    let page = std::fs::read_to_string(&page).unwrap();
    assert!(
        page.matches("<svg").count() >= 2 && page.contains("A solid, B dashed"),
        "compare page lacks its charts"
    );
    let csv = vmscale()
        .args(["compare", "--format", "csv"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    let csv = stdout(&csv);
    assert!(csv.starts_with("n,series,statistic,"), "{csv}");
    assert_eq!(csv.lines().count(), 1 + 3, "one row per statistic: {csv}");

    // Different knobs or scenarios are refused.
    let c = record(
        &[
            "run",
            "memslot",
            "--vcpus",
            "1",
            "--repeat",
            "61",
            "--strategy",
            "direct",
            "--guest",
            "halt",
        ],
        &base.join("c"),
    );
    let o = vmscale().arg("compare").arg(&a).arg(&c).output().unwrap();
    one_line_failure(&o, 2, "different knobs");
    let d = record(
        &["run", "mlock", "--calls", "100", "--busy", "0"],
        &base.join("d"),
    );
    let o = vmscale().arg("compare").arg(&a).arg(&d).output().unwrap();
    one_line_failure(&o, 2, "cannot compare a memslot run with a mlock run");
    let _ = std::fs::remove_dir_all(&base);
}
