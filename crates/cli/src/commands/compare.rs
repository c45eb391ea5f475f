//! `vmscale compare RUN_A RUN_B`: per sweep point and series, how B differs from A, whether
//! the difference is real, and (with --fail-above) a non-zero exit on a real regression, so
//! a CI job can gate on it.

use std::path::Path;

use serde::Serialize;
use vmscale_run::{RunRecord, Series};
use vmscale_stats::compare::{bootstrap_change, mann_whitney, outliers, Change, Statistic};

use crate::failure::Failure;

/// Exit code when --fail-above finds a significant regression (1 and 2 mean errors).
pub const EXIT_REGRESSION: i32 = 3;
/// Two-sided significance level of the rank-sum test.
const ALPHA: f64 = 0.05;
const BOOTSTRAP_ITERATIONS: usize = 2_000;
/// A fixed seed ("vmscale" in ASCII), so the same two runs always print the same intervals.
const BOOTSTRAP_SEED: u64 = 0x0076_6d73_6361_6c65;

#[derive(Debug, Serialize)]
struct Row {
    n: u64,
    series: String,
    samples_a: usize,
    samples_b: usize,
    p_value: Option<f64>,
    changes: Vec<Change>,
    outliers_a: usize,
    outliers_b: usize,
    verdict: &'static str,
}

#[derive(Debug, Serialize)]
struct Comparison {
    scenario: String,
    a: String,
    b: String,
    noise_threshold: f64,
    warnings: Vec<String>,
    rows: Vec<Row>,
}

pub fn compare(
    a_path: &Path,
    b_path: &Path,
    noise_pct: f64,
    fail_above_pct: Option<f64>,
    format: vmscale_report::Format,
    html: Option<&Path>,
) -> Result<(), Failure> {
    let a = vmscale_run::load_run(a_path)?;
    let b = vmscale_run::load_run(b_path)?;
    if a.scenario != b.scenario {
        return Err(Failure::usage(format!(
            "cannot compare a {} run with a {} run",
            a.scenario, b.scenario
        )));
    }
    if a.knobs != b.knobs {
        return Err(Failure::usage(format!(
            "the runs used different knobs ({} vs {}): compare runs of the same sweep",
            a.knobs, b.knobs
        )));
    }
    let mut warnings: Vec<String> = a
        .host
        .differences(&b.host)
        .into_iter()
        .map(|d| format!("the hosts differ: {d}"))
        .collect();
    for (name, run) in [("A", &a), ("B", &b)] {
        if let Some(w) = run.background.as_ref().and_then(|l| l.warning()) {
            warnings.push(format!("run {name}: {w}"));
        }
    }
    let noise = noise_pct / 100.0;
    let rows = rows(&a, &b, noise);
    let comparison = Comparison {
        scenario: a.scenario.clone(),
        a: a_path.display().to_string(),
        b: b_path.display().to_string(),
        noise_threshold: noise,
        warnings,
        rows,
    };
    match format {
        vmscale_report::Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&comparison).expect("comparison serializes")
        ),
        vmscale_report::Format::Csv => print!("{}", render_csv(&comparison)),
        vmscale_report::Format::Md => print!("{}", render_markdown(&comparison)),
        vmscale_report::Format::Table => print!("{}", render_text(&comparison)),
    }
    if let Some(path) = html {
        let page = vmscale_report::html::render_compare_html(&a, &b, &render_text(&comparison));
        std::fs::write(path, page)
            .map_err(|e| Failure::runtime(format!("cannot write {}: {e}", path.display())))?;
        eprintln!("comparison page: {}", path.display());
    }
    if let Some(limit) = fail_above_pct {
        let limit = limit / 100.0;
        let regressed: Vec<String> = comparison
            .rows
            .iter()
            .filter(|r| r.p_value.is_some_and(|p| p < ALPHA))
            .flat_map(|r| {
                r.changes
                    .iter()
                    .filter(move |c| c.statistic != Statistic::P99 && c.low > limit)
                    .map(move |c| {
                        format!(
                            "{} n={} {} +{:.1}%",
                            r.series,
                            r.n,
                            c.statistic.name(),
                            c.relative * 100.0
                        )
                    })
            })
            .collect();
        if !regressed.is_empty() {
            return Err(Failure {
                message: format!(
                    "significant regression above {:.1}%: {}",
                    limit * 100.0,
                    regressed.join(", ")
                ),
                exit_code: EXIT_REGRESSION,
            });
        }
    }
    Ok(())
}

fn rows(a: &RunRecord, b: &RunRecord, noise: f64) -> Vec<Row> {
    let mut rows = Vec::new();
    for pa in &a.points {
        let Some(pb) = b.points.iter().find(|p| p.n == pa.n) else {
            continue;
        };
        for sa in &pa.series {
            let Some(sb) = pb.series.iter().find(|s| s.name == sa.name) else {
                continue;
            };
            rows.push(row(pa.n, sa, sb, noise));
        }
    }
    rows
}

fn row(n: u64, sa: &Series, sb: &Series, noise: f64) -> Row {
    let (a, b) = (&sa.samples_ns, &sb.samples_ns);
    let test = mann_whitney(a, b);
    let changes: Vec<Change> = [Statistic::P50, Statistic::P99, Statistic::Mean]
        .into_iter()
        .filter_map(|s| bootstrap_change(a, b, s, BOOTSTRAP_ITERATIONS, BOOTSTRAP_SEED))
        .collect();
    let p50 = changes.iter().find(|c| c.statistic == Statistic::P50);
    let significant = test.is_some_and(|t| t.p < ALPHA);
    // Real only when the rank test says so, the interval excludes zero and the change is
    // beyond the noise threshold.
    let verdict = match p50 {
        Some(c) if significant && c.low > 0.0 && c.relative > noise => "slower",
        Some(c) if significant && c.high < 0.0 && c.relative < -noise => "faster",
        Some(_) if significant => "different, within noise",
        Some(_) => "no significant change",
        None => "not comparable",
    };
    Row {
        n,
        series: sa.name.clone(),
        samples_a: a.len(),
        samples_b: b.len(),
        p_value: test.map(|t| t.p),
        changes,
        outliers_a: outliers(a),
        outliers_b: outliers(b),
        verdict,
    }
}

fn change_cell(r: &Row, s: Statistic) -> String {
    r.changes
        .iter()
        .find(|c| c.statistic == s)
        .map(|c| {
            format!(
                "{:+.1}% [{:+.1}%, {:+.1}%]",
                c.relative * 100.0,
                c.low * 100.0,
                c.high * 100.0
            )
        })
        .unwrap_or_else(|| "-".into())
}

/// One row per (point, series, statistic), numbers as fractions, for scripts.
fn render_csv(c: &Comparison) -> String {
    let mut out = String::from("n,series,statistic,a,b,relative,low,high,p_value,verdict\n");
    for r in &c.rows {
        for ch in &r.changes {
            out.push_str(&format!(
                "{},\"{}\",{},{},{},{},{},{},{},\"{}\"\n",
                r.n,
                r.series.replace('"', "\"\""),
                ch.statistic.name(),
                ch.a,
                ch.b,
                ch.relative,
                ch.low,
                ch.high,
                r.p_value.map(|p| p.to_string()).unwrap_or_default(),
                r.verdict
            ));
        }
    }
    out
}

/// The comparison as a Markdown table, for a mailing-list post or a pull request.
fn render_markdown(c: &Comparison) -> String {
    let mut out = format!("### {}: A = `{}`, B = `{}`\n\n", c.scenario, c.a, c.b);
    for w in &c.warnings {
        out.push_str(&format!("> warning: {w}\n"));
    }
    if !c.warnings.is_empty() {
        out.push('\n');
    }
    out.push_str("| n | series | p50 change [95% CI] | p99 change [95% CI] | mean change [95% CI] | p | verdict |\n");
    out.push_str("|---:|---|---|---|---|---:|---|\n");
    for r in &c.rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.n,
            r.series.replace('|', "\\|"),
            change_cell(r, Statistic::P50),
            change_cell(r, Statistic::P99),
            change_cell(r, Statistic::Mean),
            r.p_value
                .map(|p| format!("{p:.2e}"))
                .unwrap_or_else(|| "-".into()),
            r.verdict
        ));
    }
    out
}

fn render_text(c: &Comparison) -> String {
    let mut out = format!("compare {}: A = {}\n        B = {}\n", c.scenario, c.a, c.b);
    for w in &c.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out.push_str(&format!(
        "\n{:>6}  {:<16} {:>7} {:>7}  {:<34} {:<34} {:<34} {:>8}  {}\n",
        "n",
        "series",
        "n A",
        "n B",
        "p50 change [95% CI]",
        "p99 change [95% CI]",
        "mean change [95% CI]",
        "p",
        "verdict"
    ));
    for r in &c.rows {
        let cell = |s: Statistic| change_cell(r, s);
        out.push_str(&format!(
            "{:>6}  {:<16} {:>7} {:>7}  {:<34} {:<34} {:<34} {:>8}  {}\n",
            r.n,
            r.series,
            r.samples_a,
            r.samples_b,
            cell(Statistic::P50),
            cell(Statistic::P99),
            cell(Statistic::Mean),
            r.p_value
                .map(|p| format!("{p:.2e}"))
                .unwrap_or_else(|| "-".into()),
            r.verdict
        ));
        if r.outliers_a + r.outliers_b > 0 {
            out.push_str(&format!(
                "        outliers (median absolute deviation): {} in A, {} in B\n",
                r.outliers_a, r.outliers_b
            ));
        }
    }
    out.push_str(&format!(
        "\nverdicts use the p50: a Mann-Whitney test on the raw samples (p < {ALPHA}), a bootstrap interval that excludes 0, and a change beyond the {:.0}% noise threshold\n",
        c.noise_threshold * 100.0
    ));
    out
}
