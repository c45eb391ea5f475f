//! The `run.json` schema.
//!
//! Raw samples are always kept (every statistic can be recomputed later); summaries are
//! stored beside them for scripts that only want the numbers. A reader refuses a
//! `schema_version` newer than its own instead of misreading it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use vmscale_stats::Summary;

use crate::host::HostFacts;
use crate::load::BackgroundLoad;

/// Bumped whenever a field changes meaning or a required field is added.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    pub name: String,
    pub version: String,
}

impl ToolInfo {
    pub fn current(version: &str) -> ToolInfo {
        ToolInfo {
            name: "vmscale".into(),
            version: version.into(),
        }
    }
}

/// One run of one scenario over its sweep.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub schema_version: u32,
    /// What stops this run from scaling, most explained time first; derived from the
    /// trace's findings and the samples, and recomputed whenever the run is analysed again.
    #[serde(default)]
    pub verdict: Vec<crate::verdict::Finding>,
    pub tool: ToolInfo,
    pub scenario: String,
    /// The knob the sweep varies (`vcpus` for memslot), which `Point::n` holds.
    pub sweep: String,
    /// argv exactly as given.
    pub command_line: Vec<String>,
    pub started_utc: String,
    pub finished_utc: String,
    pub host: HostFacts,
    /// Every knob with the value it had, defaults included.
    pub knobs: serde_json::Value,
    pub background: Option<BackgroundLoad>,
    pub points: Vec<Point>,
    /// How each series grows over the sweep: per series and statistic, the claim with its
    /// ratio, exponent and fits; recomputed from the samples whenever the run is loaded or
    /// concluded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scaling: Vec<SeriesGrowth>,
    /// The kernel trace recorded during the measured phases, when tracing was on.
    #[serde(default)]
    pub trace: Option<crate::findings::TraceSection>,
    /// Conditions that change what the numbers mean (overcommit, a busy machine, lost
    /// data); printed with every rendering of the run.
    pub warnings: Vec<String>,
}

/// One value of the swept knob.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    pub n: u64,
    /// vCPUs running during this point divided by online host CPUs (above 1: overcommit).
    pub vcpus_per_host_cpu: f64,
    pub series: Vec<Series>,
}

/// One measured operation at one point: a strategy of the scenario.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    /// What one sample is, in words ("one memslot add or delete").
    pub sample_is: String,
    pub samples_ns: Vec<u64>,
    pub summary: Option<Summary>,
    /// Parts of each sample, in order; phase `i` of every phase sums to sample `i`.
    pub phases: Vec<Phase>,
    /// KVM binary statistics that changed during the measured iterations (`vm.` and
    /// `vcpu.` prefixes; vCPU values summed over vCPUs).
    pub kvm_stats: BTreeMap<String, u64>,
    /// Guest loop iterations each vCPU made during the measured iterations.
    pub vcpu_progress: Vec<u64>,
    /// Per sample, the quantity it may grow with (e.g. irqfds already registered), so
    /// latency can be binned and fitted against it; empty when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sample_x: Vec<u64>,
    /// What `sample_x` counts.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sample_x_is: String,
    /// When each sample started, CLOCK_MONOTONIC ns (the trace's clock), for samples timed
    /// by the thread that writes the phase markers; sample `i` is the window
    /// `[sample_start_ns[i], sample_start_ns[i] + samples_ns[i]]`. Empty when the samples
    /// come from other threads or processes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sample_start_ns: Vec<u64>,
    /// Facts about this measurement that are not samples (limits that applied, counts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The VMM process that carried out each sample (a QEMU the scenario drove): its pid
    /// first, then its threads as they were before the samples. Threads it creates later
    /// count as its own from their fork in the trace. Empty when the samples are vmscale's
    /// own calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vmm_tids: Vec<u32>,
    /// With `--runs K` (K > 1): each independent run's part of the samples, in run order;
    /// the samples above are theirs concatenated. Empty for a single run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunPart>,
    /// Windows of other threads the trace should explain, on the trace's clock: for a
    /// pause's guest stall, each vCPU thread from its release until it entered KVM_RUN.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task_windows: Vec<TaskWindow>,
    /// Samples timed on several threads at once (irqfd's holders), or carried out by other
    /// processes' threads (teardown's holders, one window per thread and sample): each
    /// window's thread, start and end on the trace's clock, so the trace explains those
    /// calls and nothing the threads did between them. Empty when the measuring thread
    /// timed every sample.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timed_calls: Vec<TaskWindow>,
}

/// One thread's window, CLOCK_MONOTONIC ns.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct TaskWindow {
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Every task window of the run, (task, start, end).
pub fn task_windows(points: &[Point]) -> Vec<(u32, u64, u64)> {
    points
        .iter()
        .flat_map(|p| &p.series)
        .flat_map(|s| &s.task_windows)
        .map(|w| (w.tid, w.start_ns, w.end_ns))
        .collect()
}

/// Every timed call of the run, (thread, start, end).
pub fn timed_calls(points: &[Point]) -> Vec<(u32, u64, u64)> {
    points
        .iter()
        .flat_map(|p| &p.series)
        .flat_map(|s| &s.timed_calls)
        .map(|w| (w.tid, w.start_ns, w.end_ns))
        .collect()
}

/// One independent run's part of a merged series.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunPart {
    /// How many of the series' samples are this run's (they follow the previous run's).
    pub samples: usize,
    pub p50_ns: u64,
}

/// Every timed sample window of the run, (start, end) on the trace's clock, in no order.
pub fn timed_windows(points: &[Point]) -> Vec<(u64, u64)> {
    points
        .iter()
        .flat_map(|p| &p.series)
        .flat_map(|s| {
            s.sample_start_ns
                .iter()
                .zip(&s.samples_ns)
                .map(|(&start, &ns)| (start, start + ns))
        })
        .collect()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Phase {
    pub name: String,
    pub samples_ns: Vec<u64>,
    pub summary: Option<Summary>,
}

impl Phase {
    pub fn new(name: &str, samples_ns: Vec<u64>) -> Phase {
        Phase {
            name: name.to_string(),
            summary: Summary::from_samples(&samples_ns),
            samples_ns,
        }
    }
}

impl RunRecord {
    /// Recomputes every summary and growth claim from the raw samples, so a rendering
    /// never trusts a stale or hand-edited one.
    pub fn resummarize(&mut self) {
        for series in self.points.iter_mut().flat_map(|p| p.series.iter_mut()) {
            series.summary = Summary::from_samples(&series.samples_ns);
            for phase in &mut series.phases {
                phase.summary = Summary::from_samples(&phase.samples_ns);
            }
        }
        self.judge_growth(None);
    }

    /// The margin the record's growth claims were judged with, if it has any.
    pub fn growth_margin(&self) -> Option<f64> {
        self.scaling
            .iter()
            .flat_map(|s| &s.growth)
            .map(|g| g.margin)
            .next()
    }
}

/// One series' growth over the sweep, per statistic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesGrowth {
    pub series: String,
    /// One per statistic judged: {statistic, claim, ratio, exponent, model, fits, ...}.
    pub growth: Vec<vmscale_stats::growth::Growth>,
    /// The statistics that could not be judged, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unjudged: Vec<UnjudgedStatistic>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UnjudgedStatistic {
    pub statistic: vmscale_stats::Statistic,
    #[serde(flatten)]
    pub why: vmscale_stats::growth::Unjudged,
}
