//! What every `vmscale run <scenario>` shares: a run directory, tracing around the measured
//! phases, the run record, and writing and printing it. One module per scenario holds the
//! rest.

use vmscale_kvm::GuestProgram;
use vmscale_run::dir::utc_now;
use vmscale_run::{HostFacts, LoadMeter, Point, RunDir, RunRecord, ToolInfo, SCHEMA_VERSION};
use vmscale_scenario::{Cancel, PhaseHook};
use vmscale_trace::recorder::{default_events, RecordConfig};

use crate::args::OutputArgs;
use crate::failure::Failure;
use crate::progress::Bar;
use crate::tracing::{current_tid, TraceArgs, TraceSession};

/// A finished run: its directory (run.json and summary.md written) and its record.
pub(crate) struct Measured {
    pub dir: RunDir,
    pub record: RunRecord,
}

/// What a run is, before it runs.
pub(crate) struct RunPlan {
    pub scenario: &'static str,
    /// The knob `Point::n` holds.
    pub sweep: &'static str,
    pub kvm: Option<vmscale_kvm::KvmFacts>,
    pub knobs: serde_json::Value,
    pub trace_config: RecordConfig,
}

/// Runs `measure` with tracing around its measured phases, in a fresh run directory that is
/// removed again if anything fails, so a failed or interrupted run leaves nothing behind.
pub(crate) fn execute(
    plan: RunPlan,
    output: &OutputArgs,
    trace: &TraceArgs,
    measure: impl FnOnce(
        &mut dyn PhaseHook,
        &Bar,
        &Cancel,
    ) -> Result<Vec<Point>, vmscale_scenario::Error>,
) -> Result<(RunDir, RunRecord), Failure> {
    let RunPlan {
        scenario,
        sweep,
        kvm,
        knobs,
        trace_config,
    } = plan;
    let started_utc = utc_now();
    let dir =
        RunDir::create(&output.out, scenario, &started_utc).map_err(|e| cannot_write(output, e))?;
    let recorded = (|| {
        let host = HostFacts::probe(kvm);
        let interrupted = crate::interrupt::install();
        let mut session = TraceSession::start(trace, &dir.path, trace_config)?;
        let bar = Bar::new(output.quiet);
        let meter = LoadMeter::start();
        let points = measure(&mut session, &bar, &Cancel(&interrupted));
        bar.finish();
        let points = points?;
        let background = meter.finish(host.online_cpus);
        let trace_meta = session.finish()?;
        let mut warnings = Vec::new();
        let trace = trace_meta.map(|meta| {
            warnings.extend(meta.lost_warnings());
            crate::trace_analysis::analyse(&dir.path, &meta, &mut warnings)
        });
        Ok(RunRecord {
            schema_version: SCHEMA_VERSION,
            tool: ToolInfo::current(env!("CARGO_PKG_VERSION")),
            scenario: scenario.into(),
            sweep: sweep.into(),
            command_line: std::env::args().collect(),
            started_utc,
            finished_utc: utc_now(),
            host,
            knobs,
            background,
            points,
            trace,
            warnings,
        })
    })();
    match recorded {
        Ok(record) => Ok((dir, record)),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir.path);
            Err(e)
        }
    }
}

/// Events for scenario runs: the contention set, with system calls only from the thread
/// that measures (the scenario runs on the calling thread).
pub(crate) fn scenario_trace_config() -> RecordConfig {
    RecordConfig {
        syscall_tids: vec![current_tid()],
        ..RecordConfig::default()
    }
}

/// For scenarios whose measured calls come from threads or processes created later: their
/// system calls cannot be filtered in advance, and every task's would swamp the buffers.
pub(crate) fn untraced_syscalls_config() -> RecordConfig {
    RecordConfig {
        events: default_events()
            .into_iter()
            .filter(|e| !e.starts_with("raw_syscalls:"))
            .collect(),
        ..RecordConfig::default()
    }
}

fn cannot_write(output: &OutputArgs, e: std::io::Error) -> Failure {
    Failure::runtime(format!(
        "cannot write the run under {}: {e}",
        output.out.display()
    ))
}

/// Writes run.json, summary.md and report.html into the run directory.
pub(crate) fn save(measured: Measured, output: &OutputArgs) -> Result<Measured, Failure> {
    measured
        .dir
        .write_record(&measured.record)
        .map_err(|e| cannot_write(output, e))?;
    std::fs::write(
        measured.dir.path.join("summary.md"),
        vmscale_report::render(&measured.record, vmscale_report::Format::Md),
    )
    .map_err(|e| cannot_write(output, e))?;
    std::fs::write(
        measured.dir.path.join("report.html"),
        vmscale_report::html::render_html(&measured.record),
    )
    .map_err(|e| cannot_write(output, e))?;
    Ok(measured)
}

/// Prints the run in the chosen format and, on stderr, where it is.
pub(crate) fn show(measured: &Measured, output: &OutputArgs) -> Result<(), Failure> {
    crate::console::out!(
        "{}",
        vmscale_report::render(&measured.record, output.format)
    )?;
    crate::console::note!("run directory: {}", measured.dir.path.display());
    Ok(())
}

/// vCPUs beyond the host's CPUs change what every number means; say so once per run.
pub(crate) fn overcommit_warnings(
    points: &[Point],
    host_cpus: usize,
    guest: GuestProgram,
) -> Vec<String> {
    let over: Vec<String> = points
        .iter()
        .filter(|p| p.n as usize > host_cpus)
        .map(|p| p.n.to_string())
        .collect();
    if over.is_empty() {
        return Vec::new();
    }
    let consequence = match guest {
        GuestProgram::Spin => {
            "spinning vCPUs compete for the CPUs with the measuring thread, so latencies include waiting for a CPU (try --fifo, or --guest halt)"
        }
        GuestProgram::Halt => {
            "halted vCPUs mostly sleep, but every update wakes all of them at once"
        }
    };
    vec![format!(
        "overcommit: {} vCPUs on {host_cpus} host CPUs (points {}); {consequence}",
        over.last().expect("not empty"),
        over.join(", ")
    )]
}

/// A spinning vCPU that made no progress while measured did not run: its point is suspect.
pub(crate) fn stalled_vcpu_warnings(points: &[Point], guest: GuestProgram) -> Vec<String> {
    if guest != GuestProgram::Spin {
        return Vec::new();
    }
    points
        .iter()
        .flat_map(|p| p.series.iter().map(move |s| (p.n, s)))
        .filter_map(|(n, s)| {
            let stuck = s.vcpu_progress.iter().filter(|&&v| v == 0).count();
            (stuck > 0).then(|| {
                format!(
                    "{stuck} of {n} spinning vCPUs made no progress during {}: they never ran while it was measured",
                    s.name
                )
            })
        })
        .collect()
}
