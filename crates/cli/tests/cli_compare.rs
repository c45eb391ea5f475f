//! `vmscale compare` on real runs (the same run against itself, a run whose samples were
//! shifted, runs that must not be compared) and on synthetic runs whose noise is known: a
//! slow phase inside a run, a shift in every block, a busy host, a tracing difference, too
//! few samples.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;
use vmscale_run::{BackgroundLoad, HostFacts, Point, RunRecord, Series, ToolInfo, TraceSection};
use vmscale_stats::compare::{bootstrap_change, mann_whitney, Statistic, MIN_SAMPLES};

fn record(args: &[&str], out: &Path) -> PathBuf {
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
    // Never a difference: no change, or (when 60 samples' blocks spread wider than the
    // noise threshold) undecidable, with an estimate of exactly 0 that no gate fails on.
    assert!(
        [
            "no significant change",
            "undecidable: the blocks of a run disagree among themselves"
        ]
        .contains(&same["rows"][0]["verdict"].as_str().unwrap()),
        "{same}"
    );
    assert_eq!(same["rows"][0]["changes"][0]["relative"], 0.0);
    assert!(same["rows"][0]["p_value"].as_f64().unwrap() > 0.5);

    // The gate below is about arithmetic, not this host's load: A and B are given a quiet
    // background (a busy one makes any regression undecidable, tested on its own below).
    let mut run: Value =
        serde_json::from_slice(&std::fs::read(a.join("run.json")).unwrap()).unwrap();
    run["background"]["other_busy_fraction"] = Value::from(0.0);
    let a = base.join("a-quiet");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::write(a.join("run.json"), serde_json::to_vec(&run).unwrap()).unwrap();

    // B: the same run with every sample slower by twice A's slowest sample, so every B
    // sample is slower than every A sample and even a bimodal distribution's resampled
    // medians cannot overlap: a regression of known size.
    let b = base.join("b");
    std::fs::create_dir_all(&b).unwrap();
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
    // The change is decided on block medians, and shifting every sample by `shift` moves
    // each block's median, and so their median, by exactly `shift`: B's statistic is A's
    // plus the shift, and the relative change is about the shift over A's statistic (which, for
    // a bimodal run, need not be the plain median of A's samples).
    let p50 = &slower["rows"][0]["changes"][0];
    let (stat_a, stat_b) = (p50["a"].as_f64().unwrap(), p50["b"].as_f64().unwrap());
    assert!(
        (stat_b - stat_a - shift as f64).abs() <= 1.0,
        "{p50} vs a shift of {shift}"
    );
    // The relative change printed is the one decided on: the median of the log ratios of
    // B's block medians to A's, which an additive shift makes differ from block to block,
    // so it is near the shift over A's centre, not equal to it (1.5% apart in one CI run,
    // for a 2.6x change).
    assert!(
        (p50["relative"].as_f64().unwrap() - shift as f64 / stat_a).abs()
            < 0.05 * shift as f64 / stat_a,
        "{p50} vs {shift} / {stat_a}"
    );
    assert!(p50["low"].as_f64().unwrap() > 0.2, "{p50}");
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
        table_rows.iter().all(|r| r.matches('|').count() == 12),
        "{md}"
    );
    assert!(md.contains("| slower |"), "{md}");
    let page = std::fs::read_to_string(&page).unwrap();
    assert!(
        page.matches("<svg").count() >= 2 && page.contains("A solid, B dashed"),
        "compare page lacks its charts"
    );
    // The same table as the terminal's, as HTML.
    assert!(
        page.contains("<th>p50 change [95% CI]</th>") && page.contains("<td>slower</td>"),
        "compare page lacks its table"
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
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with(",verdict,spread,replicates"),
        "{csv}"
    );

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

/// A run's latencies: around 10 us (uniform +-40%, one in fifty a 5x outlier), every sample
/// in `slow` (sample indices: a phase when something else loaded the host) twice as long,
/// and everything scaled by `scale`. A fixed xorshift keeps every run the same each time.
fn latencies(n: usize, seed: u64, slow: std::ops::Range<usize>, scale: f64) -> Vec<u64> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|i| {
            let mut v = 6_000.0 + next() * 8_000.0;
            if next() < 0.02 {
                v *= 5.0;
            }
            if slow.contains(&i) {
                v *= 2.0;
            }
            (v * scale) as u64
        })
        .collect()
}

/// A memslot run record holding `samples` as its one (point, series), measured while other
/// processes used `other_busy` of the machine, traced or not.
fn synthetic(samples: Vec<u64>, other_busy: f64, trace: Option<TraceSection>) -> RunRecord {
    let host: HostFacts = serde_json::from_value(serde_json::json!({
        "hostname": "test",
        "kernel_release": "6.8.0",
        "kernel_version": "#1 SMP",
        "cpu_model": "Example CPU",
        "online_cpus": 2,
        "memory_bytes": 8u64 << 30,
        "kvm": null
    }))
    .unwrap();
    let wall_ns = 4_000_000_000u64;
    RunRecord {
        schema_version: vmscale_run::SCHEMA_VERSION,
        verdict: Vec::new(),
        scaling: Vec::new(),
        tool: ToolInfo::current("0.1.0"),
        scenario: "memslot".into(),
        sweep: "vcpus".into(),
        command_line: ["vmscale", "run", "memslot", "--vcpus", "1"]
            .map(String::from)
            .to_vec(),
        started_utc: "2026-01-02T03:04:05Z".into(),
        finished_utc: "2026-01-02T03:04:09Z".into(),
        host,
        knobs: serde_json::json!({"vcpus": [1], "repeat": samples.len()}),
        background: Some(BackgroundLoad {
            neighbours: Vec::new(),
            wall_ns,
            host_busy_ns: (wall_ns as f64 * 2.0 * other_busy) as u64 + wall_ns,
            own_ns: wall_ns,
            other_busy_fraction: other_busy,
        }),
        points: vec![Point {
            n: 1,
            vcpus_per_host_cpu: 0.5,
            series: vec![Series {
                name: "direct".into(),
                sample_is: "one memslot add or delete".into(),
                samples_ns: samples,
                ..Series::default()
            }],
        }],
        trace,
        warnings: Vec::new(),
    }
}

fn traced() -> Option<TraceSection> {
    Some(TraceSection {
        dir: "trace".into(),
        events: vec!["lock:contention_begin".into(), "lock:contention_end".into()],
        stacks: true,
        buffer_kib: 16_384,
        ..TraceSection::default()
    })
}

/// Writes `run` as `<base>/<name>/run.json` and returns the directory.
fn write(base: &Path, name: &str, mut run: RunRecord) -> PathBuf {
    run.resummarize();
    let dir = base.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("run.json"), serde_json::to_vec(&run).unwrap()).unwrap();
    dir
}

/// `vmscale compare --fail-above PCT --format json A B`.
fn gate(pct: &str, a: &Path, b: &Path) -> std::process::Output {
    vmscale()
        .args(["compare", "--fail-above", pct, "--format", "json"])
        .arg(a)
        .arg(b)
        .output()
        .unwrap()
}

fn printed(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

const QUIET: f64 = 0.02;

#[test]
fn a_slow_phase_inside_a_run_is_undecidable_not_a_regression() {
    let base = RemovedOnDrop(scratch("compare-phase"));
    // The same process twice; in each run something else loaded the host for a while and
    // every sample then took twice as long: a tenth of A, three tenths of B. Averaged over
    // the whole run the host was quiet, so only the samples show it.
    let (a_samples, b_samples) = (
        latencies(400, 1, 40..80, 1.0),
        latencies(400, 2, 200..320, 1.0),
    );
    // Taken one sample at a time, as compare used to, B is significantly slower by more
    // than the 5% gate (p < 0.05 and the bootstrap interval above 5%): exit 3.
    let raw = mann_whitney(&a_samples, &b_samples).unwrap();
    let per_sample = bootstrap_change(&a_samples, &b_samples, Statistic::P50, 2_000, 7).unwrap();
    assert!(
        raw.p < 0.05 && per_sample.low > 0.05,
        "{raw:?} {per_sample:?}"
    );

    let a = write(&base.0, "a", synthetic(a_samples, QUIET, None));
    let b = write(&base.0, "b", synthetic(b_samples, QUIET, None));
    let o = gate("5", &a, &b);
    let json = printed(&o);
    let row = &json["rows"][0];
    // B disagrees with itself (its slow tenths against its quiet ones) by more than it
    // differs from A: neither a regression nor no change.
    assert_eq!(
        row["verdict"], "undecidable: the blocks of a run disagree among themselves",
        "{row}"
    );
    let p50 = &row["judgments"][0];
    assert_eq!(p50["statistic"], "p50");
    assert_eq!(p50["replicates"], "blocks");
    assert_eq!(
        (p50["count_a"].as_u64(), p50["count_b"].as_u64()),
        (Some(10), Some(10))
    );
    assert!(
        p50["spread_b"].as_f64().unwrap() > p50["change"]["estimate"].as_f64().unwrap(),
        "{p50}"
    );
    assert!(json["undecidable"].as_array().unwrap().is_empty(), "{json}");
    // The gate cannot pass what the blocks leave open when the estimate is beyond it, nor
    // fail it: 4, naming the change and its interval.
    if p50["change"]["estimate"].as_f64().unwrap() > 0.05 {
        one_line_failure(&o, 4, "undecidable at --fail-above 5.0%: changes beyond it");
        assert!(stderr(&o).contains("the replicates disagree among themselves): direct n=1 p50 +"));
    } else {
        assert!(o.status.success(), "{}", stderr(&o));
    }
}

#[test]
fn a_shift_in_every_block_is_still_a_regression() {
    let base = RemovedOnDrop(scratch("compare-shift"));
    // B is 30% slower throughout; A even has a slow phase of its own.
    let a = write(
        &base.0,
        "a",
        synthetic(latencies(400, 3, 120..160, 1.0), QUIET, None),
    );
    let b = write(
        &base.0,
        "b",
        synthetic(latencies(400, 4, 0..0, 1.3), QUIET, None),
    );
    let o = gate("5", &a, &b);
    assert_eq!(o.status.code(), Some(3), "{}{}", stdout(&o), stderr(&o));
    one_line_failure(&o, 3, "significant regression above 5.0%: direct n=1 p50 +");
    let row = &printed(&o)["rows"][0];
    assert_eq!(row["verdict"], "slower", "{row}");
    let p50 = &row["changes"][0];
    assert_eq!(p50["statistic"], "p50");
    let relative = p50["relative"].as_f64().unwrap();
    assert!((relative - 0.3).abs() < 0.08, "{p50}");
    assert!(row["p_value"].as_f64().unwrap() < 0.01, "{row}");
    // Faster the other way round, and nothing to gate on.
    let back = gate("5", &b, &a);
    assert!(back.status.success(), "{}", stderr(&back));
    assert_eq!(printed(&back)["rows"][0]["verdict"], "faster");
}

#[test]
fn a_busy_host_makes_a_regression_undecidable() {
    let base = RemovedOnDrop(scratch("compare-busy"));
    let a_samples = latencies(400, 5, 0..0, 1.0);
    let b_samples = latencies(400, 6, 0..0, 1.3);
    let a = write(&base.0, "a", synthetic(a_samples.clone(), QUIET, None));
    let b = write(&base.0, "b", synthetic(b_samples.clone(), 0.4, None));
    let o = gate("5", &a, &b);
    one_line_failure(&o, 4, "undecidable: direct n=1 p50 +");
    let err = stderr(&o);
    assert!(
        err.contains(
            "run B's background load makes it undecidable (other processes used 40% of all CPU time over its 4.00 s"
        ),
        "{err}"
    );
    assert!(!err.contains("run A's"), "{err}");
    let json = printed(&o);
    assert_eq!(json["rows"][0]["verdict"], "undecidable (busy host)");
    assert_eq!(json["undecidable"].as_array().unwrap().len(), 1, "{json}");

    // Without the gate the exit is 0, and the table says the same.
    let table = vmscale().arg("compare").arg(&a).arg(&b).output().unwrap();
    assert!(table.status.success(), "{}", stderr(&table));
    assert!(
        stdout(&table).contains("undecidable (busy host)"),
        "{}",
        stdout(&table)
    );

    // A busy baseline is as undecidable: it is named instead.
    let a_busy = write(&base.0, "a-busy", synthetic(a_samples, 0.25, None));
    let b_quiet = write(&base.0, "b-quiet", synthetic(b_samples, QUIET, None));
    let o = gate("5", &a_busy, &b_quiet);
    one_line_failure(
        &o,
        4,
        "run A's background load makes it undecidable (other processes used 25%",
    );

    // A busy host with nothing to flag passes: the gate has nothing to decide.
    let same = gate("5", &a_busy, &a_busy);
    assert!(same.status.success(), "{}", stderr(&same));
}

#[test]
fn traced_against_untraced_says_tracing_differs() {
    let base = RemovedOnDrop(scratch("compare-traced"));
    let samples = latencies(400, 7, 0..0, 1.0);
    let untraced = write(&base.0, "untraced", synthetic(samples.clone(), QUIET, None));
    let traced_run = write(
        &base.0,
        "traced",
        synthetic(samples.clone(), QUIET, traced()),
    );
    let warning = "run A was traced and run B was not: tracing adds cost to every sample, so the difference includes it";
    let o = vmscale()
        .arg("compare")
        .arg(&traced_run)
        .arg(&untraced)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("warning: {warning}")),
        "{}",
        stdout(&o)
    );

    // Traced B 30% slower than untraced A: how much of that is tracing is unknown.
    let slower = write(
        &base.0,
        "traced-slower",
        synthetic(latencies(400, 8, 0..0, 1.3), QUIET, traced()),
    );
    let o = gate("5", &untraced, &slower);
    one_line_failure(
        &o,
        4,
        "run B was traced and run A was not: tracing adds cost to every sample",
    );
    assert_eq!(
        printed(&o)["rows"][0]["verdict"],
        "undecidable (tracing differs)"
    );

    // Both traced, one with a stack at every context switch: still different tracing.
    let mut sleep = synthetic(samples, QUIET, traced());
    sleep.command_line.push("--sleep-stacks".into());
    let sleep = write(&base.0, "sleep-stacks", sleep);
    let o = gate("5", &sleep, &slower);
    one_line_failure(
        &o,
        4,
        "runs A and B were traced differently (a stack at every context switch (--sleep-stacks): A yes, B no)",
    );
}

#[test]
fn too_few_samples_are_said_and_undecidable_under_the_gate() {
    let base = RemovedOnDrop(scratch("compare-few"));
    let n = MIN_SAMPLES - 1;
    // Twice as slow, every sample: the gate can neither pass nor fail it.
    let a = write(
        &base.0,
        "a",
        synthetic(latencies(n, 9, 0..0, 1.0), QUIET, None),
    );
    let b = write(
        &base.0,
        "b",
        synthetic(latencies(n, 10, 0..0, 2.0), QUIET, None),
    );
    let o = gate("5", &a, &b);
    one_line_failure(&o, 4, "undecidable: too few samples to judge direct n=1");
    let json = printed(&o);
    assert_eq!(json["rows"][0]["verdict"], "too few samples to judge");
    assert!(json["rows"][0]["p_value"].is_null());
    let warnings = json["warnings"].to_string();
    assert!(
        warnings.contains(&format!("a verdict needs {MIN_SAMPLES} per run"))
            && warnings.contains("n=1 direct"),
        "{warnings}"
    );
    // Without the gate it is said and the exit is 0.
    let table = vmscale().arg("compare").arg(&a).arg(&b).output().unwrap();
    assert!(table.status.success(), "{}", stderr(&table));
    assert!(stdout(&table).contains("too few samples to judge"));
}

/// A synthetic run merged from `runs` independent runs, each at its own level around
/// `scale` (a factor from `levels`), as `--runs` merges them.
fn merged(levels: &[f64], seed: u64, scale: f64) -> RunRecord {
    let parts: Vec<Vec<u64>> = levels
        .iter()
        .enumerate()
        .map(|(i, level)| latencies(200, seed * 10 + i as u64, 0..0, scale * level))
        .collect();
    let mut run = synthetic(parts.concat(), QUIET, None);
    let series = &mut run.points[0].series[0];
    series.runs = parts
        .iter()
        .map(|p| vmscale_run::RunPart {
            samples: p.len(),
            p50_ns: 0,
        })
        .collect();
    run
}

#[test]
fn runs_are_compared_as_runs_and_their_disagreement_is_said() {
    let base = RemovedOnDrop(scratch("compare-runs"));
    // Three runs a side, each at its own level (a placement that differs from run to run).
    let a = write(&base.0, "a", merged(&[0.8, 1.0, 1.3], 11, 1.0));
    let again = write(&base.0, "again", merged(&[1.25, 0.85, 1.0], 12, 1.0));
    let twice = write(&base.0, "twice", merged(&[0.8, 1.0, 1.3], 13, 2.0));
    // Against itself: no difference, exit 0.
    let o = gate("10", &a, &a);
    assert!(o.status.success(), "{}", stderr(&o));
    let row = &printed(&o)["rows"][0];
    assert_eq!(row["replicates"], "runs", "{row}");
    assert_eq!(
        (row["runs_a"].as_u64(), row["runs_b"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(row["changes"][0]["relative"], 0.0);
    // Another three runs of the same configuration: the runs disagree among themselves by
    // more than 10%, so it is not "no change", and the gate passes (the estimate is small).
    let o = gate("10", &a, &again);
    let row = &printed(&o)["rows"][0];
    let verdict = row["verdict"].as_str().unwrap();
    assert!(!["slower", "faster"].contains(&verdict), "{row}");
    // Twice the cost: slower, or undecidable where the runs' spread hides it; never no
    // change.
    let o = gate("10", &a, &twice);
    let row = &printed(&o)["rows"][0];
    let verdict = row["verdict"].as_str().unwrap();
    assert!(
        ["slower", "undecidable: the runs disagree among themselves"].contains(&verdict),
        "{row}"
    );
    assert!(
        matches!(o.status.code(), Some(3) | Some(4)),
        "{}",
        stderr(&o)
    );
    let relative = row["changes"][0]["relative"].as_f64().unwrap();
    assert!((relative - 1.0).abs() < 0.3, "{row}");
}

#[test]
fn help_documents_the_undecidable_exit_code() {
    let o = vmscale().args(["compare", "--help"]).output().unwrap();
    let help = stdout(&o);
    assert!(help.contains("4 undecidable"), "{help}");
    assert!(
        help.contains(&format!("fewer than {MIN_SAMPLES} samples per run")),
        "the help's sample count is not the one compare uses: {help}"
    );
    assert!(help.contains("tracing"), "{help}");
}
