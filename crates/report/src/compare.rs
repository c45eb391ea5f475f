//! Two runs of the same sweep compared (A = before, B = after): per sweep point and series,
//! how B differs from A, whether the difference is real, and whether it is a regression a
//! gate (`vmscale compare --fail-above`) should fail on.
//!
//! "Real" is judged between replicates (see `vmscale_stats::compare`): when each side
//! merged `--runs` 3 or more, the runs' own statistics (Welch's t on their logarithms);
//! otherwise each run's blocks (Hodges-Lehmann with its exact rank-sum interval). The change
//! printed is the one decided on, with its interval. A change inside that interval's noise
//! is never called "no change" unless the whole interval lies within the noise threshold:
//! when the replicates disagree by more, the row is undecidable. Two conditions no
//! statistic can see through make a regression undecidable too: a host that was busy during
//! either run, and runs traced differently (tracing adds cost to every sample).
//!
//! The comparison is built once as sections ([`sections`]) that the terminal, Markdown and
//! HTML renderings lay out; CSV and JSON carry its rows as data.

use std::collections::BTreeSet;

use serde::Serialize;
use vmscale_run::runs::{run_samples, run_spread};
use vmscale_run::{RunRecord, Series, TraceSection};
use vmscale_stats::compare::{
    block_bootstrap_change, bootstrap_change, judge_blocks, judge_runs, outliers, Change, Judgment,
    Replicates, Statistic, Unjudged, Verdict, MIN_RUNS, MIN_SAMPLES,
};
use vmscale_stats::BOOTSTRAP_SEED;

use crate::document::{Block, Fact, Section, Text};
use crate::grid::Grid;
use crate::render;
use crate::Format;

/// Confidence of every interval a verdict is decided on (two-sided p < 0.05).
pub const CONFIDENCE: f64 = 0.95;
const BOOTSTRAP_ITERATIONS: usize = 2_000;
/// The statistics a verdict or the gate rests on; p99 is shown but a tail is what a busy
/// host inflates first, and ten blocks of a few samples have no p99 worth testing.
const JUDGED: [Statistic; 2] = [Statistic::P50, Statistic::Mean];

/// Row verdicts others act on (`vmscale fleet --regressions` counts and overrides them).
pub const SLOWER: &str = "slower";
pub const FASTER: &str = "faster";
const UNDECIDABLE_BUSY: &str = "undecidable (busy host)";
pub const UNDECIDABLE_TRACING: &str = "undecidable (tracing differs)";
const UNDECIDABLE_RUNS: &str = "undecidable: the runs disagree among themselves";
const UNDECIDABLE_BLOCKS: &str = "undecidable: the blocks of a run disagree among themselves";
const TOO_FEW: &str = "too few samples to judge";

#[derive(Debug, Serialize)]
pub struct Row {
    pub n: u64,
    pub series: String,
    pub samples_a: usize,
    pub samples_b: usize,
    /// Independent runs each side merged (`--runs`); 1 for a single run.
    pub runs_a: usize,
    pub runs_b: usize,
    /// What was compared: each side's runs, or each run's blocks; None when neither could
    /// be (too few samples).
    pub replicates: Option<Replicates>,
    /// p of the p50 judgment's test, the one the verdict uses.
    pub p_value: Option<f64>,
    /// The change of each statistic with its 95% interval. For p50 and mean, the
    /// judgment's own estimate and interval, the ones the verdict is decided on; the p99 is
    /// shown only (a bootstrap of the whole-sample p99 over whole blocks, or over samples
    /// when there are too few for blocks).
    pub changes: Vec<Change>,
    /// The judgment of each judged statistic (p50, mean).
    pub judgments: Vec<Judgment>,
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
    if rows
        .iter()
        .any(|r| r.replicates == Some(Replicates::Blocks))
        && rows.iter().any(|r| r.runs_a.max(r.runs_b) == 1)
    {
        warnings.push(format!(
            "each side is one run, judged by its blocks: a difference between runs (the threads' placement, the host's state) looks like a change; --runs {MIN_RUNS} or more on both sides compares runs instead"
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
    /// Nothing got slower beyond the limit, as far as every row can tell.
    Pass,
    /// Something did; the sentence says what.
    Regression(String),
    /// A row cannot be decided: a regression a busy host or different tracing may have
    /// caused, a change beyond the limit that the replicates' spread leaves unproven, or
    /// too few samples to judge at all.
    Undecidable(String),
}

impl Comparison {
    /// The gate at `limit` (a fraction): a judged statistic got slower beyond it.
    pub fn gate(&self, limit: f64) -> Gate {
        let mut regressed = Vec::new();
        let mut unproven = Vec::new();
        let mut too_few = Vec::new();
        for r in &self.rows {
            if r.verdict == TOO_FEW {
                too_few.push(format!("{} n={}", r.series, r.n));
                continue;
            }
            for j in &r.judgments {
                let c = j.change;
                let what = format!(
                    "{} n={} {} {:+.1}% [{:+.1}%, {:+.1}%]",
                    r.series,
                    r.n,
                    j.statistic.name(),
                    c.estimate * 100.0,
                    c.low * 100.0,
                    c.high * 100.0
                );
                let verdict = j.verdict(self.noise_threshold);
                if c.low > limit && verdict != Verdict::Undecidable {
                    regressed.push(what);
                } else if c.estimate > limit {
                    unproven.push(what);
                }
            }
        }
        let limit_text = format!("{:.1}%", limit * 100.0);
        if !regressed.is_empty() {
            if !self.undecidable.is_empty() {
                return Gate::Undecidable(format!(
                    "undecidable: {} would fail --fail-above {limit_text}, but {}; rerun both on a quiet host with the same tracing",
                    regressed.join(", "),
                    self.undecidable.join("; ")
                ));
            }
            return Gate::Regression(format!(
                "significant regression above {limit_text}: {}",
                regressed.join(", ")
            ));
        }
        if !unproven.is_empty() {
            let by_runs = self
                .rows
                .iter()
                .any(|r| r.replicates == Some(Replicates::Runs));
            let rerun = if by_runs {
                "rerun both with more --runs"
            } else {
                "rerun with more samples, or --runs 3 or more on both sides"
            };
            return Gate::Undecidable(format!(
                "undecidable at --fail-above {limit_text}: changes beyond it whose intervals reach below it (the replicates disagree among themselves): {}; {rerun}",
                unproven.join(", ")
            ));
        }
        if !too_few.is_empty() {
            return Gate::Undecidable(format!(
                "undecidable: too few samples to judge {} (a verdict needs {MIN_SAMPLES} per run)",
                too_few.join(", ")
            ));
        }
        Gate::Pass
    }

    /// The comparison in `format`, ending with a newline.
    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Json => format!(
                "{}\n",
                serde_json::to_string_pretty(self).expect("comparison serializes")
            ),
            Format::Csv => render_csv(self),
            Format::Md => {
                let body: Vec<String> = sections(self)
                    .iter()
                    .map(|s| render::markdown::section(s, 3))
                    .collect();
                body.join("\n")
            }
            Format::Table => {
                let body: Vec<String> = sections(self).iter().map(render::text::section).collect();
                body.join("\n")
            }
        }
    }
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
            rows.push(judge_point(pa.n, sa, sb, noise));
        }
    }
    rows
}

/// Each independent run's samples of a series (the whole series for a single run).
fn runs_of(series: &Series) -> Vec<&[u64]> {
    if series.runs.len() >= 2 {
        run_samples(series)
    } else {
        vec![series.samples_ns.as_slice()]
    }
}

/// One (point, series). With `--runs` 3 or more on both sides the runs are the
/// replicates; otherwise each run's blocks, in the order the run stored its samples, which
/// is the order they were taken for every scenario but irqfd, whose calls are stored per
/// holder thread (each thread's in order): there a block is a stretch of one thread's
/// calls. Public so that series gathered from many runs (`vmscale fleet --regressions`,
/// each run one of `runs`) are judged by the same rules as two runs are.
pub fn judge_point(n: u64, sa: &Series, sb: &Series, noise: f64) -> Row {
    let (a, b) = (&sa.samples_ns, &sb.samples_ns);
    let (runs_a, runs_b) = (runs_of(sa), runs_of(sb));
    let by_runs = runs_a.len() >= MIN_RUNS && runs_b.len() >= MIN_RUNS;
    let judge = |statistic: Statistic| {
        if by_runs {
            judge_runs(&runs_a, &runs_b, statistic, CONFIDENCE)
        } else {
            judge_blocks(a, b, statistic, CONFIDENCE)
        }
    };
    let judged: Vec<Result<Judgment, Unjudged>> = JUDGED.iter().map(|&s| judge(s)).collect();
    let judgments: Vec<Judgment> = judged
        .iter()
        .filter_map(|j| j.as_ref().ok())
        .copied()
        .collect();
    let blocked = !judged
        .iter()
        .any(|j| matches!(j, Err(Unjudged::TooFewSamples)));
    // The p99, shown only.
    let p99 = if by_runs {
        judge_runs(&runs_a, &runs_b, Statistic::P99, CONFIDENCE)
            .ok()
            .map(|j| change_of(&j))
    } else if blocked {
        block_bootstrap_change(a, b, Statistic::P99, BOOTSTRAP_ITERATIONS, BOOTSTRAP_SEED)
    } else {
        bootstrap_change(a, b, Statistic::P99, BOOTSTRAP_ITERATIONS, BOOTSTRAP_SEED)
    };
    let mut changes: Vec<Change> = judgments.iter().map(change_of).collect();
    changes.extend(p99);
    changes.sort_by_key(|c| match c.statistic {
        Statistic::P50 => 0,
        Statistic::P99 => 1,
        Statistic::Mean => 2,
    });
    // With runs merged on one side but too few to compare runs, a change inside the range
    // their medians already span is one a configuration shows from run to run.
    let run_range = run_spread(sa)
        .into_iter()
        .chain(run_spread(sb))
        .fold(0.0, f64::max);
    let undecidable = if by_runs {
        UNDECIDABLE_RUNS
    } else {
        UNDECIDABLE_BLOCKS
    };
    let verdict = match &judged[0] {
        Err(Unjudged::TooFewSamples) => TOO_FEW,
        Err(Unjudged::ZeroBaseline) => "not comparable",
        Ok(j) => match j.verdict(noise) {
            Verdict::Slower | Verdict::Faster
                if !by_runs && j.change.estimate.abs() <= run_range =>
            {
                UNDECIDABLE_RUNS
            }
            Verdict::Slower => SLOWER,
            Verdict::Faster => FASTER,
            Verdict::WithinNoise => "different, within noise",
            Verdict::NoChange => "no significant change",
            Verdict::Undecidable => undecidable,
        },
    };
    Row {
        n,
        series: sa.name.clone(),
        samples_a: a.len(),
        samples_b: b.len(),
        runs_a: runs_a.len(),
        runs_b: runs_b.len(),
        replicates: judgments.first().map(|j| j.replicates),
        p_value: judgments.first().map(|j| j.p),
        changes,
        judgments,
        outliers_a: outliers(a),
        outliers_b: outliers(b),
        verdict,
    }
}

/// A judgment as a change: the side's centres and the relative change with its interval.
fn change_of(j: &Judgment) -> Change {
    Change {
        statistic: j.statistic,
        a: j.a,
        b: j.b,
        relative: j.change.estimate,
        low: j.change.low,
        high: j.change.high,
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

/// The larger side's spread of the p50 (blocks' interquartile range, or runs' range), as a
/// percentage of A's.
fn spread_cell(r: &Row) -> String {
    r.judgments
        .iter()
        .find(|j| j.statistic == Statistic::P50)
        .map(|j| format!("{:.1}%", j.spread() * 100.0))
        .unwrap_or_else(|| "-".into())
}

fn p_cell(r: &Row) -> String {
    r.p_value
        .map(|p| format!("{p:.2e}"))
        .unwrap_or_else(|| "-".into())
}

fn replicates_cell(r: &Row) -> String {
    match r.judgments.first() {
        Some(j) => format!(
            "{} {}+{}",
            match j.replicates {
                Replicates::Runs => "runs",
                Replicates::Blocks => "blocks",
            },
            j.count_a,
            j.count_b
        ),
        None => "-".into(),
    }
}

/// One row per (point, series, statistic), numbers as fractions, for scripts. `p_value`
/// and `spread` are the judgment's for that statistic (empty for p99, which is not
/// judged); `spread` and then `replicates` are the last columns so readers of the older
/// layout keep working.
fn render_csv(c: &Comparison) -> String {
    let mut out = String::from(
        "n,series,statistic,a,b,relative,low,high,p_value,verdict,spread,replicates\n",
    );
    for r in &c.rows {
        for ch in &r.changes {
            let j = r.judgments.iter().find(|j| j.statistic == ch.statistic);
            out.push_str(&format!(
                "{},\"{}\",{},{},{},{},{},{},{},\"{}\",{},{}\n",
                r.n,
                r.series.replace('"', "\"\""),
                ch.statistic.name(),
                ch.a,
                ch.b,
                ch.relative,
                ch.low,
                ch.high,
                j.map(|j| j.p.to_string()).unwrap_or_default(),
                r.verdict,
                j.map(|j| j.spread().to_string()).unwrap_or_default(),
                r.replicates
                    .map(|x| match x {
                        Replicates::Runs => "runs",
                        Replicates::Blocks => "blocks",
                    })
                    .unwrap_or_default(),
            ));
        }
    }
    out
}

/// How the verdicts were reached, printed under every table.
fn method(c: &Comparison) -> String {
    format!(
        "verdicts use the p50 and the change printed, with its {:.0}% interval. With --runs {MIN_RUNS} or more on both sides the replicates are the runs (Welch's t on the logarithms of their p50s); otherwise each run is cut into up to {} blocks in recorded order and the blocks are the replicates (the Hodges-Lehmann shift of their log p50s with its exact rank-sum interval). B is slower or faster when the interval excludes 0 and the change exceeds the {:.0}% noise threshold (and, between blocks, either run's own spread: the blocks' interquartile range); no significant change only when the whole interval lies within the noise threshold; otherwise undecidable: the replicates disagree among themselves",
        CONFIDENCE * 100.0,
        vmscale_stats::compare::MAX_BLOCKS,
        c.noise_threshold * 100.0
    )
}

/// The comparison as sections, built once for the terminal, Markdown and HTML.
pub(crate) fn sections(c: &Comparison) -> Vec<Section> {
    let mut section = Section::new("compare", format!("compare {}", c.scenario));
    section.heading = Some(format!("{}: A against B", c.scenario));
    section.blocks.push(Block::Facts(vec![
        Fact {
            label: "A",
            value: Text::code(c.a.clone()),
        },
        Fact {
            label: "B",
            value: Text::code(c.b.clone()),
        },
    ]));
    if !c.warnings.is_empty() {
        section.blocks.push(Block::Warnings(c.warnings.clone()));
    }
    let mut grid = Grid::new(&[
        ("n", true),
        ("series", false),
        ("n A", true),
        ("n B", true),
        ("replicates", false),
        ("p50 change [95% CI]", false),
        ("p99 change [95% CI]", false),
        ("mean change [95% CI]", false),
        ("p", true),
        ("spread", true),
        ("verdict", false),
    ]);
    grid.rows = c
        .rows
        .iter()
        .map(|r| {
            vec![
                r.n.to_string(),
                r.series.clone(),
                r.samples_a.to_string(),
                r.samples_b.to_string(),
                replicates_cell(r),
                change_cell(r, Statistic::P50),
                change_cell(r, Statistic::P99),
                change_cell(r, Statistic::Mean),
                p_cell(r),
                spread_cell(r),
                r.verdict.to_string(),
            ]
        })
        .collect();
    section.blocks.push(Block::Table(grid));
    let notes: Vec<(String, String)> = c
        .rows
        .iter()
        .filter(|r| r.outliers_a + r.outliers_b > 0)
        .map(|r| {
            (
                format!("n={}, {}", r.n, r.series),
                format!(
                    "outliers (median absolute deviation): {} in A, {} in B",
                    r.outliers_a, r.outliers_b
                ),
            )
        })
        .collect();
    if !notes.is_empty() {
        section.blocks.push(Block::Notes(notes));
    }
    section.blocks.push(Block::Paragraph(Text::from(method(c))));
    vec![section]
}
