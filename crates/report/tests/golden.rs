//! Every report format of one fixed run record, compared byte for byte with the files
//! under tests/golden: a change to what a report says shows as a diff to review, not only
//! as a substring test that still passes.
//!
//! After an intended change, regenerate them with
//! `VMSCALE_UPDATE_GOLDEN=1 cargo test -p vmscale-report --test golden` and review the diff.

#[path = "support/fixture.rs"]
mod fixture;

use std::path::PathBuf;

use vmscale_report::{render_contention_csv, render_with, Format, Options};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Compares `text` with the golden file `name`, or writes it when asked to.
fn check(name: &str, text: &str, failures: &mut Vec<String>) {
    let path = golden_dir().join(name);
    if std::env::var_os("VMSCALE_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (VMSCALE_UPDATE_GOLDEN=1 writes it)",
            path.display()
        )
    });
    if want == text {
        return;
    }
    let line = want
        .lines()
        .zip(text.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| want.lines().count().min(text.lines().count()));
    failures.push(format!(
        "{name} differs from line {}:\n  golden: {:?}\n  now:    {:?}",
        line + 1,
        want.lines().nth(line).unwrap_or("<end>"),
        text.lines().nth(line).unwrap_or("<end>")
    ));
}

#[test]
fn every_format_matches_its_golden_file() {
    let record = fixture::record();
    let mut failures = Vec::new();
    let full = Options::default();
    let brief = Options {
        brief: true,
        ..Options::default()
    };
    let deadline = Options {
        deadline_ns: Some(1_000_000.0),
        ..Options::default()
    };
    check(
        "table.txt",
        &render_with(&record, Format::Table, &full),
        &mut failures,
    );
    check(
        "brief.txt",
        &render_with(&record, Format::Table, &brief),
        &mut failures,
    );
    check(
        "table-deadline.txt",
        &render_with(&record, Format::Table, &deadline),
        &mut failures,
    );
    check(
        "summary.md",
        &render_with(&record, Format::Md, &full),
        &mut failures,
    );
    check(
        "run.json",
        &render_with(&record, Format::Json, &full),
        &mut failures,
    );
    check(
        "samples.csv",
        &render_with(&record, Format::Csv, &full),
        &mut failures,
    );
    check(
        "contention.csv",
        &render_contention_csv(&record).expect("the fixture is traced"),
        &mut failures,
    );
    check(
        "report.html",
        &vmscale_report::html::render_html(&record),
        &mut failures,
    );
    assert!(
        failures.is_empty(),
        "{}\n(an intended change: VMSCALE_UPDATE_GOLDEN=1 cargo test -p vmscale-report --test golden, then review the diff)",
        failures.join("\n")
    );
}
