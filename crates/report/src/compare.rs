//! Two runs of the same sweep compared (A = before, B = after): per sweep point and series,
//! how B differs from A, whether the difference is real, and whether it is a regression a
//! gate (`vmscale compare --fail-above`) should fail on.
//!
//! "Real" is judged from each run's own repetition (see `vmscale_stats::compare::repetition`):
//! a run whose background load came in phases disagrees with itself, and a difference no
//! larger than that disagreement is noise. Two conditions no statistic can see through make a
//! regression undecidable instead of failing the gate: a host that was busy during either
//! run, and runs traced differently (tracing adds cost to every sample).

use std::collections::BTreeSet;

use serde::Serialize;
use vmscale_run::{RunRecord, Series, TraceSection};
use vmscale_stats::compare::{
    block_bootstrap_change, bootstrap_change, outliers, repetition, Change, Repetition, Statistic,
    Unjudged, MIN_SAMPLES,
};
use vmscale_stats::BOOTSTRAP_SEED;

use crate::Format;

/// Two-sided significance level of the rank-sum test on block statistics.
const ALPHA: f64 = 0.05;
const BOOTSTRAP_ITERATIONS: usize = 2_000;
/// The statistics a verdict or the gate rests on; p99 is shown but a tail is what a busy
/// host inflates first, and ten blocks of a few samples have no p99 worth testing.
const JUDGED: [Statistic; 2] = [Statistic::P50, Statistic::Mean];

const SLOWER: &str = "slower";
const FASTER: &str = "faster";
const UNDECIDABLE_BUSY: &str = "undecidable (busy host)";
const UNDECIDABLE_TRACING: &str = "undecidable (tracing differs)";
const TOO_FEW: &str = "too few samples to judge";

#[derive(Debug, Serialize)]
pub struct Row {
    pub n: u64,
    pub series: String,
    pub samples_a: usize,
    pub samples_b: usize,
    /// p of the rank-sum test on block medians, the one the verdict uses; None when there
    /// are too few samples for blocks.
    pub p_value: Option<f64>,
    /// Changes with 95% intervals from a bootstrap that resamples whole blocks (single
    /// samples when there are too few for blocks).
    pub changes: Vec<Change>,
    /// The block comparison of each judged statistic (p50, mean).
    pub repetition: Vec<Repetition>,
    pub outliers_a: usize,
    pub outliers_b: usize,
    pub verdict: &'static str,
}

#[derive(Debug, Serialize)]
pub struct Comparison {
    pub scenario: String,
    pub a: String,
    pub b: String,
    pub noise_threshold: f64,
    pub warnings: Vec<String>,
    /// Why a slower or faster row cannot be decided, one reason each (a busy run, tracing
    /// that differs); empty when every row can be.
    pub undecidable: Vec<String>,
    pub rows: Vec<Row>,
}

/// Why two runs cannot be compared at all, in one line; `None` when they can.
pub fn incomparable(a: &RunRecord, b: &RunRecord) -> Option<String> {
    if a.scenario != b.scenario {
        return Some(format!(
            "cannot compare a {} run with a {} run",
            a.scenario, b.scenario
        ));
    }
    if a.knobs != b.knobs {
        return Some(format!(
            "the runs used different knobs ({} vs {}): compare runs of the same sweep",
            a.knobs, b.knobs
        ));
    }
    None
}

/// Compares run `b` with run `a` (named `a_name` and `b_name` in the output), calling
/// changes smaller than `noise` (a fraction) noise. The runs must be comparable (see
/// [`incomparable`]).
pub fn compare(
    a: &RunRecord,
    b: &RunRecord,
    a_name: String,
    b_name: String,
    noise: f64,
) -> Comparison {
    let mut warnings: Vec<String> = a
        .host
        .differences(&b.host)
        .into_iter()
        .map(|d| format!("the hosts differ: {d}"))
        .collect();
    let mut busy = Vec::new();
    for (name, run) in [("A", a), ("B", b)] {
        match &run.background {
            Some(load) => {
                if let Some(w) = load.warning() {
                    warnings.push(format!("run {name}: {w}"));
                    busy.push(format!(
                        "run {name}'s background load makes it undecidable (other processes used {:.0}% of all CPU time over its {:.2} s; a host is busy above {:.0}%)",
                        load.other_busy_fraction * 100.0,
                        load.wall_ns as f64 / 1e9,
                        vmscale_run::load::BUSY_THRESHOLD * 100.0
                    ));
                }
            }
            None => warnings.push(format!(
                "run {name} has no background load measurement: whether its host was busy is unknown"
            )),
        }
    }
    let tracing = tracing_difference(a, b);
    warnings.extend(tracing.clone());
    let mut rows = rows(a, b, noise);
    let too_few: Vec<String> = rows
        .iter()
        .filter(|r| r.verdict == TOO_FEW)
        .map(|r| format!("n={} {}", r.n, r.series))
        .collect();
    if !too_few.is_empty() {
        warnings.push(format!(
            "too few samples to judge (a verdict needs {MIN_SAMPLES} per run, cut into blocks): {}",
            too_few.join(", ")
        ));
    }
    // A busy host or a tracing difference can produce any change in either direction, so
    // neither direction is claimed.
    let overriding = if !busy.is_empty() {
        Some(UNDECIDABLE_BUSY)
    } else if tracing.is_some() {
        Some(UNDECIDABLE_TRACING)
    } else {
        None
    };
    if let Some(undecidable) = overriding {
        for r in rows
            .iter_mut()
            .filter(|r| matches!(r.verdict, SLOWER | FASTER))
        {
            r.verdict = undecidable;
        }
    }
    Comparison {
        scenario: a.scenario.clone(),
        a: a_name,
        b: b_name,
        noise_threshold: noise,
        warnings,
        undecidable: busy.into_iter().chain(tracing).collect(),
        rows,
    }
}

/// What `--fail-above` decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Nothing got significantly slower beyond the limit.
    Pass,
    /// Something did; the sentence says what.
    Regression(String),
    /// Something would have, but a busy host or different tracing leaves it undecided.
    Undecidable(String),
}

impl Comparison {
    /// The gate at `limit` (a fraction): a judged statistic got slower beyond it.
    pub fn gate(&self, limit: f64) -> Gate {
        let regressed: Vec<String> = self
            .rows
            .iter()
            .flat_map(|r| regressions(r, limit))
            .collect();
        if regressed.is_empty() {
            return Gate::Pass;
        }
        if !self.undecidable.is_empty() {
            return Gate::Undecidable(format!(
                "undecidable: {} would fail --fail-above {:.1}%, but {}; rerun both on a quiet host with the same tracing",
                regressed.join(", "),
                limit * 100.0,
                self.undecidable.join("; ")
            ));
        }
        Gate::Regression(format!(
            "significant regression above {:.1}%: {}",
            limit * 100.0,
            regressed.join(", ")
        ))
    }

    /// The comparison in `format`, ending with a newline.
    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Json => format!(
                "{}\n",
                serde_json::to_string_pretty(self).expect("comparison serializes")
            ),
            Format::Csv => render_csv(self),
            Format::Md => render_markdown(self),
            Format::Table => render_text(self),
        }
    }
}

/// The judged statistics of `r` that got slower beyond `limit`: the block test rejects "no
/// difference", the change exceeds both runs' block-to-block spread, and the block
/// bootstrap interval lies wholly above the limit.
fn regressions(r: &Row, limit: f64) -> impl Iterator<Item = String> + '_ {
    r.repetition
        .iter()
        .filter(|rep| rep.decided(ALPHA) && rep.relative > 0.0)
        .filter_map(move |rep| {
            let c = r.changes.iter().find(|c| c.statistic == rep.statistic)?;
            (c.low > limit).then(|| {
                format!(
                    "{} n={} {} +{:.1}%",
                    r.series,
                    r.n,
                    c.statistic.name(),
                    c.relative * 100.0
                )
            })
        })
}

/// How the two runs' kernel tracing differs, as the warning to print; None when it does
/// not. Tracing costs something on every sample (each event written, each stack walked),
/// so runs traced differently differ by that cost whatever else changed.
fn tracing_difference(a: &RunRecord, b: &RunRecord) -> Option<String> {
    const COST: &str = "tracing adds cost to every sample, so the difference includes it";
    let (ta, tb) = match (&a.trace, &b.trace) {
        (None, None) => return None,
        (Some(_), None) => return Some(format!("run A was traced and run B was not: {COST}")),
        (None, Some(_)) => return Some(format!("run B was traced and run A was not: {COST}")),
        (Some(ta), Some(tb)) => (ta, tb),
    };
    let (sa, sb) = (TraceSettings::of(a, ta), TraceSettings::of(b, tb));
    if sa == sb {
        return None;
    }
    let yes_no = |v: bool| if v { "yes" } else { "no" };
    let mut differences = Vec::new();
    if sa.stacks != sb.stacks {
        differences.push(format!(
            "a stack at each lock contention: A {}, B {}",
            yes_no(sa.stacks),
            yes_no(sb.stacks)
        ));
    }
    if sa.sleep_stacks != sb.sleep_stacks {
        differences.push(format!(
            "a stack at every context switch (--sleep-stacks): A {}, B {}",
            yes_no(sa.sleep_stacks),
            yes_no(sb.sleep_stacks)
        ));
    }
    for (name, mine, theirs) in [("A", &sa.events, &sb.events), ("B", &sb.events, &sa.events)] {
        let only: Vec<&str> = mine.difference(theirs).map(String::as_str).collect();
        if !only.is_empty() {
            differences.push(format!("events only run {name} traced: {}", only.join(" ")));
        }
    }
    Some(format!(
        "runs A and B were traced differently ({}): {COST}",
        differences.join("; ")
    ))
}

/// What decides how much tracing costs a sample.
#[derive(PartialEq)]
struct TraceSettings {
    stacks: bool,
    /// Only the command line records this one (the trace section keeps the event list, not
    /// which events carry a stack).
    sleep_stacks: bool,
    events: BTreeSet<String>,
}

impl TraceSettings {
    fn of(run: &RunRecord, trace: &TraceSection) -> TraceSettings {
        TraceSettings {
            stacks: trace.stacks,
            sleep_stacks: run.command_line.iter().any(|a| a == "--sleep-stacks"),
            events: trace.events.iter().cloned().collect(),
        }
    }
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

/// One (point, series). Samples are blocked in the order the run stored them, which is the
/// order they were taken for every scenario but irqfd, whose calls are stored per holder
/// thread (each thread's in order): there a block is a stretch of one thread's calls.
fn row(n: u64, sa: &Series, sb: &Series, noise: f64) -> Row {
    let (a, b) = (&sa.samples_ns, &sb.samples_ns);
    let judged: Vec<Result<Repetition, Unjudged>> =
        JUDGED.iter().map(|&s| repetition(a, b, s)).collect();
    let blocked = !judged
        .iter()
        .any(|j| matches!(j, Err(Unjudged::TooFewSamples)));
    let changes: Vec<Change> = [Statistic::P50, Statistic::P99, Statistic::Mean]
        .into_iter()
        .filter_map(|s| {
            if blocked {
                block_bootstrap_change(a, b, s, BOOTSTRAP_ITERATIONS, BOOTSTRAP_SEED)
            } else {
                bootstrap_change(a, b, s, BOOTSTRAP_ITERATIONS, BOOTSTRAP_SEED)
            }
        })
        .collect();
    let p50 = changes.iter().find(|c| c.statistic == Statistic::P50);
    // With independent runs (--runs), a change inside the range their medians already span
    // is a change one configuration shows from run to run: no regression.
    let run_spread = vmscale_run::runs::run_spread(sa)
        .into_iter()
        .chain(vmscale_run::runs::run_spread(sb))
        .fold(0.0, f64::max);
    // Real only when the block test says so, the change exceeds both runs' own spread, the
    // block interval excludes zero and the change is beyond the noise threshold.
    let verdict = match (&judged[0], p50) {
        (Err(Unjudged::TooFewSamples), _) => TOO_FEW,
        (Err(Unjudged::ZeroBaseline), _) | (_, None) => "not comparable",
        (Ok(rep), _) if rep.p >= ALPHA => "no significant change",
        (Ok(rep), _) if !rep.decided(ALPHA) => "noise (within the runs' own spread)",
        (Ok(rep), _) if rep.relative.abs() <= run_spread => "noise (within the run-to-run spread)",
        (Ok(rep), _) if rep.relative.abs() <= noise => "different, within noise",
        (Ok(rep), Some(c)) if rep.relative > 0.0 && c.low > 0.0 => SLOWER,
        (Ok(rep), Some(c)) if rep.relative < 0.0 && c.high < 0.0 => FASTER,
        (Ok(_), Some(_)) => "noise (block interval includes no change)",
    };
    Row {
        n,
        series: sa.name.clone(),
        samples_a: a.len(),
        samples_b: b.len(),
        p_value: judged[0].as_ref().ok().map(|r| r.p),
        changes,
        repetition: judged.into_iter().filter_map(Result::ok).collect(),
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

/// The larger run's block-to-block spread of the p50, as a percentage of A's.
fn spread_cell(r: &Row) -> String {
    r.repetition
        .iter()
        .find(|rep| rep.statistic == Statistic::P50)
        .map(|rep| format!("{:.1}%", rep.spread() * 100.0))
        .unwrap_or_else(|| "-".into())
}

fn p_cell(r: &Row) -> String {
    r.p_value
        .map(|p| format!("{p:.2e}"))
        .unwrap_or_else(|| "-".into())
}

/// One row per (point, series, statistic), numbers as fractions, for scripts. `p_value`
/// and `spread` are the block test's for that statistic (empty for p99, which is not
/// judged); `spread` is the last column so readers of the older layout keep working.
fn render_csv(c: &Comparison) -> String {
    let mut out = String::from("n,series,statistic,a,b,relative,low,high,p_value,verdict,spread\n");
    for r in &c.rows {
        for ch in &r.changes {
            let rep = r
                .repetition
                .iter()
                .find(|rep| rep.statistic == ch.statistic);
            out.push_str(&format!(
                "{},\"{}\",{},{},{},{},{},{},{},\"{}\",{}\n",
                r.n,
                r.series.replace('"', "\"\""),
                ch.statistic.name(),
                ch.a,
                ch.b,
                ch.relative,
                ch.low,
                ch.high,
                rep.map(|rep| rep.p.to_string()).unwrap_or_default(),
                r.verdict,
                rep.map(|rep| rep.spread().to_string()).unwrap_or_default(),
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
    out.push_str("| n | series | p50 change [95% CI] | p99 change [95% CI] | mean change [95% CI] | p (blocks) | spread | verdict |\n");
    out.push_str("|---:|---|---|---|---|---:|---:|---|\n");
    for r in &c.rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.n,
            r.series.replace('|', "\\|"),
            change_cell(r, Statistic::P50),
            change_cell(r, Statistic::P99),
            change_cell(r, Statistic::Mean),
            p_cell(r),
            spread_cell(r),
            r.verdict
        ));
    }
    out.push_str(&format!("\n{}\n", method(c)));
    out
}

/// How the verdicts were reached, printed under every table.
fn method(c: &Comparison) -> String {
    format!(
        "verdicts use the p50 and each run's own repetition: a run's samples are cut into up to {} blocks in recorded order; B is slower or faster when a rank-sum test on block medians gives p < {ALPHA}, the change exceeds the spread (interquartile range of block medians) of both runs and the {:.0}% noise threshold, and the interval from resampling whole blocks excludes 0",
        vmscale_stats::compare::MAX_BLOCKS,
        c.noise_threshold * 100.0
    )
}

fn render_text(c: &Comparison) -> String {
    let mut out = format!("compare {}: A = {}\n        B = {}\n", c.scenario, c.a, c.b);
    for w in &c.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out.push_str(&format!(
        "\n{:>6}  {:<16} {:>7} {:>7}  {:<34} {:<34} {:<34} {:>10} {:>7}  {}\n",
        "n",
        "series",
        "n A",
        "n B",
        "p50 change [95% CI]",
        "p99 change [95% CI]",
        "mean change [95% CI]",
        "p (blocks)",
        "spread",
        "verdict"
    ));
    for r in &c.rows {
        let cell = |s: Statistic| change_cell(r, s);
        out.push_str(&format!(
            "{:>6}  {:<16} {:>7} {:>7}  {:<34} {:<34} {:<34} {:>10} {:>7}  {}\n",
            r.n,
            r.series,
            r.samples_a,
            r.samples_b,
            cell(Statistic::P50),
            cell(Statistic::P99),
            cell(Statistic::Mean),
            p_cell(r),
            spread_cell(r),
            r.verdict
        ));
        if r.outliers_a + r.outliers_b > 0 {
            out.push_str(&format!(
                "        outliers (median absolute deviation): {} in A, {} in B\n",
                r.outliers_a, r.outliers_b
            ));
        }
    }
    out.push_str(&format!("\n{}\n", method(c)));
    out
}
