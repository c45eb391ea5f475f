//! What every `vmscale run <scenario>` shares: a run directory, tracing around the measured
//! phases, the run record, and writing and printing it. Each scenario turns its own flags
//! into its knobs ([`vmscale_scenario::Scenario::knobs`]) and does the rest.

use vmscale_run::dir::utc_now;
use vmscale_run::{HostFacts, HostWatch, Point, RunDir, RunRecord, ToolInfo, SCHEMA_VERSION};
use vmscale_scenario::{Cancel, Job, PhaseHook, Scenario, Syscalls, TraceNeeds};
use vmscale_trace::record::recorder::{default_events, RecordConfig};

use crate::args::{OutputArgs, SharedArgs};
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
    pub kvm: Option<vmscale_run::KvmFacts>,
    pub knobs: serde_json::Value,
    pub trace_config: RecordConfig,
    /// Whose time an aggregated recording splits by cause (a scenario's: nobody's).
    pub subject: vmscale_trace::record::bpf::Subject,
    pub on_signal: OnSignal,
}

/// What a run's measuring produced: its points, and for a recording the command it ran.
pub(crate) struct Measurement {
    pub points: Vec<Point>,
    pub command: Option<vmscale_run::findings::CommandUsage>,
}

impl From<Vec<Point>> for Measurement {
    fn from(points: Vec<Point>) -> Measurement {
        Measurement {
            points,
            command: None,
        }
    }
}

/// What SIGINT/SIGTERM mean for a run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnSignal {
    /// A scenario stops between samples, tears its VMs down and writes nothing: half a sweep
    /// is not the run that was asked for.
    DiscardRun,
    /// A recording ends; what was traced up to then is kept and marked by the command.
    KeepTrace,
}

/// Runs `measure` with tracing around its measured phases, in a fresh run directory under a
/// temporary name that is removed again if anything fails, so a failed or interrupted run
/// leaves nothing behind.
pub(crate) fn execute<M: Into<Measurement>>(
    plan: RunPlan,
    output: &OutputArgs,
    trace: &TraceArgs,
    measure: impl FnOnce(&mut dyn PhaseHook, &Bar, &Cancel) -> Result<M, vmscale_scenario::Error>,
) -> Result<(RunDir, RunRecord), Failure> {
    let RunPlan {
        scenario,
        sweep,
        kvm,
        knobs,
        trace_config,
        subject,
        on_signal,
    } = plan;
    preflight(trace)?;
    let started_utc = utc_now();
    remove_stale_partials(&output.out);
    let dir =
        RunDir::create(&output.out, scenario, &started_utc).map_err(|e| cannot_write(output, e))?;
    let recorded = (|| {
        let host = HostFacts::probe(kvm);
        let interrupted = crate::interrupt::cooperate();
        let mut session = TraceSession::start(trace, &dir.path, trace_config, subject)?;
        let bar = Bar::new(output.quiet);
        let watch = HostWatch::start();
        let points = measure(&mut session, &bar, &Cancel(interrupted.clone()));
        bar.finish();
        let Measurement { points, command } = points?.into();
        // A scenario that finished its last sample as the signal came is interrupted all
        // the same: the user asked it to stop, and exit 0 would say it ran as asked.
        if on_signal == OnSignal::DiscardRun {
            Cancel(interrupted.clone()).check()?;
        }
        let vmscale_run::Watched {
            background,
            foreign_tids,
        } = watch.finish(host.online_cpus);
        let finished = session.finish()?;
        let trace_meta = finished.trace;
        let mut warnings: Vec<String> = background
            .iter()
            .flat_map(|load| {
                load.warning()
                    .into_iter()
                    .chain(vmscale_run::neighbours::warnings(&load.neighbours))
            })
            .collect();
        warnings.extend(vmscale_run::runs::disagreements(scenario, sweep, &points));
        warnings.extend(finished.warnings);
        let trace = trace_meta.map(|meta| {
            warnings.extend(meta.lost_warnings());
            vmscale_analysis::run_section::analyse(
                &dir.path,
                &meta,
                foreign_tids,
                command,
                &points,
                &mut warnings,
            )
        });
        Ok(vmscale_analysis::run_section::concluded(RunRecord {
            schema_version: SCHEMA_VERSION,
            verdict: Vec::new(),
            scaling: Vec::new(),
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
        }))
    })();
    // On an error the directory goes with `dir`'s drop.
    recorded.map(|record| (dir, record))
}

/// Descriptors a run needs besides its scenario's own (which the scenario checks): stdio,
/// the signal thread, the cleanup reserve, the run directory's files, and when tracing two
/// per CPU (its ring buffer and its file) and the instance's control files.
pub(crate) fn needed_fds(trace: &TraceArgs) -> (u64, u64) {
    let base = 24 + vmscale_run::cleanup::RESERVED_FDS as u64;
    let tracing = if trace.no_trace {
        0
    } else {
        2 * vmscale_run::host::online_cpus() as u64 + 16
    };
    (base + tracing, tracing)
}

/// Refuses a run the descriptor limit cannot hold before anything is created (exit 2), and
/// reserves the descriptors its cleanup needs: removing an unfinished run directory when
/// descriptors ran out must not need one more.
pub(crate) fn preflight(trace: &TraceArgs) -> Result<(), Failure> {
    let (needed, tracing) = needed_fds(trace);
    let soft = vmscale_kvm::preflight::raise_fd_limit_for(needed);
    if needed > soft {
        let why = if tracing > 0 {
            format!(
                " ({tracing} of them to trace {} CPUs)",
                vmscale_run::host::online_cpus()
            )
        } else {
            String::new()
        };
        return Err(Failure::usage(format!(
            "this run needs about {needed} file descriptors{why} but RLIMIT_NOFILE is {soft} and cannot be raised (raise it with `ulimit -n`)"
        )));
    }
    vmscale_run::cleanup::reserve_fds().map_err(|e| {
        Failure::usage(format!(
            "cannot reserve file descriptors for the cleanup: {e} (raise `ulimit -n`)"
        ))
    })
}

/// Runs killed by SIGKILL leave their temporary directories in `out`; the next run there
/// removes them and says so.
pub(crate) fn remove_stale_partials(out: &std::path::Path) {
    if let Ok(removed) = vmscale_run::dir::remove_stale_partials(out) {
        if !removed.is_empty() {
            crate::console::note!(
                "vmscale: removed unfinished run directories of killed runs in {}: {}",
                out.display(),
                removed.join(", ")
            );
        }
    }
}

/// `vmscale run <scenario>`, whichever it is: its flags made knobs by the scenario, then
/// [`command`].
pub(crate) struct RunCommand;

impl vmscale_scenario::Runner<SharedArgs> for RunCommand {
    type Output = Result<(), Failure>;

    fn run<S: Scenario>(self, scenario: S, flags: &S::Flags, shared: &SharedArgs) -> Self::Output {
        let knobs = scenario.knobs(flags)?;
        command(scenario, knobs, &shared.output, &shared.trace)
    }
}

/// Runs `scenario` with `knobs` and prints the run.
pub(crate) fn command<S: Scenario>(
    scenario: S,
    knobs: S::Knobs,
    output: &OutputArgs,
    trace: &TraceArgs,
) -> Result<(), Failure> {
    let mut job = vmscale_scenario::job(scenario, knobs);
    show(&measure(job.as_mut(), output, trace)?, output)
}

/// Runs a scenario with its knobs through the path every scenario shares: checked and
/// prepared before anything is created, measured with tracing around its measured phases,
/// analysed, concluded, annotated by the scenario, saved.
pub(crate) fn measure(
    job: &mut dyn Job,
    output: &OutputArgs,
    trace: &TraceArgs,
) -> Result<Measured, Failure> {
    let kvm = job.prepare()?;
    let info = job.info();
    let plan = RunPlan {
        scenario: info.name,
        sweep: info.sweep,
        kvm,
        knobs: job.knobs(),
        trace_config: trace_config(job.tracing()),
        subject: vmscale_trace::record::bpf::Subject::None,
        on_signal: OnSignal::DiscardRun,
    };
    let run = |hook: &mut dyn PhaseHook, bar: &Bar, cancel: &Cancel| job.run(bar, cancel, hook);
    let (dir, mut record) = execute(plan, output, trace, run)?;
    // The scenario runs on this thread (see `trace_config`).
    job.annotate(&mut record, current_tid());
    save(Measured { dir, record }, output)
}

/// What a scenario needs traced, as the recorder's configuration: the contention set, with
/// the system calls the scenario names (its own run on the calling thread).
fn trace_config(needs: TraceNeeds) -> RecordConfig {
    let mut config = match needs.syscalls {
        Syscalls::MeasuringThread => RecordConfig {
            syscall_tids: vec![current_tid()],
            ..RecordConfig::default()
        },
        Syscalls::Off => RecordConfig {
            events: default_events()
                .into_iter()
                .filter(|e| !e.starts_with("raw_syscalls:"))
                .collect(),
            ..RecordConfig::default()
        },
        Syscalls::MeasuringThreadAnd(ids) => RecordConfig {
            syscall_tids: vec![current_tid()],
            syscall_ids: ids,
            ..RecordConfig::default()
        },
    };
    config
        .events
        .extend(needs.extra_events.into_iter().map(String::from));
    config
}

fn cannot_write(output: &OutputArgs, e: std::io::Error) -> Failure {
    Failure::runtime(format!(
        "cannot write the run under {}: {e}",
        output.out.display()
    ))
}

/// Writes summary.md, report.html and run.json into the run directory, then gives it its
/// final name: a run directory under its own name is always complete. On any error (a full
/// disk) nothing is left but the error.
pub(crate) fn save(mut measured: Measured, output: &OutputArgs) -> Result<Measured, Failure> {
    use vmscale_run::dir::write_atomically;
    let dir = &measured.dir.path;
    write_atomically(
        &dir.join(vmscale_run::dir::SUMMARY_FILE),
        vmscale_report::render(&measured.record, vmscale_report::Format::Md).as_bytes(),
    )
    .map_err(|e| cannot_write(output, e))?;
    write_atomically(
        &dir.join(vmscale_run::dir::REPORT_FILE),
        vmscale_report::html::render_html(&measured.record).as_bytes(),
    )
    .map_err(|e| cannot_write(output, e))?;
    measured
        .dir
        .write_record(&measured.record)
        .map_err(|e| cannot_write(output, e))?;
    measured
        .dir
        .publish()
        .map_err(|e| cannot_write(output, e))?;
    // Written from the published run, as `export --parquet` would: the run directory is
    // complete whatever happens to the tables.
    if let Some(tables) = &output.parquet {
        crate::commands::export_parquet::export_parquet(
            std::slice::from_ref(&measured.dir.path),
            Some(tables.clone()),
        )?;
    }
    Ok(measured)
}

/// Prints the run in the chosen format and, on stderr, where it is.
pub(crate) fn show(measured: &Measured, output: &OutputArgs) -> Result<(), Failure> {
    let options = vmscale_report::Options {
        brief: !output.details,
        ..vmscale_report::Options::default()
    };
    crate::console::out!(
        "{}",
        vmscale_report::render_with(&measured.record, output.format, &options)
    )?;
    crate::console::note!("run directory: {}", measured.dir.path.display());
    Ok(())
}
