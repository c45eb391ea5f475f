//! `vmscale run <scenario>` and `vmscale tour`: run, record, render.

use vmscale_kvm::{GuestProgram, KvmSystem};
use vmscale_run::dir::utc_now;
use vmscale_run::{HostFacts, LoadMeter, Point, RunDir, RunRecord, ToolInfo, SCHEMA_VERSION};
use vmscale_scenario::irqfd::{self, IrqfdKnobs, Release};
use vmscale_scenario::memslot::{self, MemslotKnobs, Strategy};
use vmscale_scenario::mlock::{self, MlockKnobs};
use vmscale_scenario::teardown::{self, Mode, TeardownKnobs};
use vmscale_scenario::zap::{self, ZapKnobs};
use vmscale_scenario::{Cancel, PhaseHook};
use vmscale_trace::recorder::{default_events, RecordConfig};

use crate::args::{
    IrqfdArgs, MemslotArgs, MlockArgs, OutputArgs, TeardownArgs, TeardownHolderArgs, TourArgs,
    ZapArgs,
};
use crate::failure::Failure;
use crate::progress::Bar;
use crate::tracing::{current_tid, TraceArgs, TraceSession};

pub fn memslot(args: &MemslotArgs) -> Result<(), Failure> {
    let knobs = MemslotKnobs {
        vcpus: args.vcpus.clone(),
        repeat: args.repeat,
        warmup: args.warmup,
        strategies: Strategy::parse_list(&args.strategy)?,
        batch: args.batch,
        guest: match args.guest.as_str() {
            "halt" => GuestProgram::Halt,
            _ => GuestProgram::Spin,
        },
        fifo: args.fifo,
        slot_bytes: args.slot_mib.saturating_mul(1 << 20),
    };
    run_memslot(knobs, &args.output, &args.trace)
}

pub fn irqfd(args: &IrqfdArgs) -> Result<(), Failure> {
    let knobs = IrqfdKnobs {
        total: args.total.clone(),
        threads: args.threads,
        vms: args.vms,
        release: Release::parse(&args.release)?,
    };
    run_irqfd(knobs, &args.output, &args.trace)
}

fn run_irqfd(knobs: IrqfdKnobs, output: &OutputArgs, trace: &TraceArgs) -> Result<(), Failure> {
    knobs.validate()?;
    let system = KvmSystem::open()?;
    let plan = RunPlan {
        scenario: "irqfd",
        sweep: "total",
        kvm: Some(system.facts()),
        knobs: serde_json::to_value(&knobs).expect("knobs serialize"),
        // Holder threads are created by the scenario, so their system calls cannot be
        // filtered in advance; every task's would swamp the buffers.
        trace_config: RecordConfig {
            events: default_events()
                .into_iter()
                .filter(|e| !e.starts_with("raw_syscalls:"))
                .collect(),
            ..RecordConfig::default()
        },
    };
    let measure = |hook: &mut dyn PhaseHook, bar: &Bar, cancel: &Cancel| {
        irqfd::run(&system, &knobs, bar, cancel, hook)
    };
    let (dir, mut record) = execute(plan, output, trace, measure)?;
    record
        .warnings
        .extend(record.background.as_ref().and_then(|b| b.warning()));
    finish(&dir, &record, output)
}

pub fn teardown(args: &TeardownArgs) -> Result<(), Failure> {
    let knobs = TeardownKnobs {
        vms: args.vms.clone(),
        vcpus: args.vcpus,
        mem_mib: args.mem_mib,
        touch: !args.untouched,
        modes: Mode::parse_list(&args.mode)?,
        repeat: args.repeat,
    };
    run_teardown(knobs, &args.output, &args.trace)
}

fn run_teardown(
    knobs: TeardownKnobs,
    output: &OutputArgs,
    trace: &TraceArgs,
) -> Result<(), Failure> {
    knobs.validate()?;
    let system = KvmSystem::open()?;
    knobs.preflight(system.max_vcpus())?;
    let exe = std::env::current_exe().map_err(|e| {
        Failure::runtime(format!(
            "cannot find the vmscale binary to run holders: {e}"
        ))
    })?;
    let plan = RunPlan {
        scenario: "teardown",
        sweep: "vms",
        kvm: Some(system.facts()),
        knobs: serde_json::to_value(&knobs).expect("knobs serialize"),
        // The holders are other processes: every task's system calls would be recorded.
        trace_config: RecordConfig {
            events: default_events()
                .into_iter()
                .filter(|e| !e.starts_with("raw_syscalls:"))
                .collect(),
            ..RecordConfig::default()
        },
    };
    let measure = |hook: &mut dyn PhaseHook, bar: &Bar, cancel: &Cancel| {
        teardown::run(&exe, &knobs, bar, cancel, hook)
    };
    let (dir, mut record) = execute(plan, output, trace, measure)?;
    record
        .warnings
        .extend(record.background.as_ref().and_then(|b| b.warning()));
    finish(&dir, &record, output)
}

/// The hidden `teardown-holder` command: holds VMs for the teardown scenario.
pub fn teardown_holder(args: &TeardownHolderArgs) -> Result<(), Failure> {
    let system = KvmSystem::open()?;
    teardown::hold_and_release(
        &system,
        args.vms,
        args.vcpus,
        args.mem_mib,
        !args.untouched,
        &args.release,
    )?;
    Ok(())
}

pub fn mlock(args: &MlockArgs) -> Result<(), Failure> {
    let knobs = MlockKnobs {
        calls: args.calls,
        modes: mlock::Mode::parse_list(&args.mode)?,
        busy: args.busy.clone(),
        buffer_kib: args.size_kib,
    };
    run_mlock(knobs, &args.output, &args.trace)
}

fn run_mlock(knobs: MlockKnobs, output: &OutputArgs, trace: &TraceArgs) -> Result<(), Failure> {
    knobs.validate()?;
    let plan = RunPlan {
        scenario: "mlock",
        sweep: "busy",
        kvm: KvmSystem::open().ok().map(|s| s.facts()),
        knobs: serde_json::to_value(&knobs).expect("knobs serialize"),
        trace_config: scenario_trace_config(),
    };
    let measure = |hook: &mut dyn PhaseHook, bar: &Bar, cancel: &Cancel| {
        mlock::run(&knobs, bar, cancel, hook)
    };
    let (dir, mut record) = execute(plan, output, trace, measure)?;
    add_ipi_notes(&mut record, &knobs);
    record
        .warnings
        .extend(record.background.as_ref().and_then(|b| b.warning()));
    finish(&dir, &record, output)
}

/// Puts the trace's IPI count for each mode's phase beside the case's formula.
fn add_ipi_notes(record: &mut RunRecord, knobs: &MlockKnobs) {
    let cpus = record.host.online_cpus;
    let Some(trace) = record.trace.clone() else {
        for series in record.points.iter_mut().flat_map(|p| p.series.iter_mut()) {
            series.notes.push(format!(
                "IPIs not measured (no trace); the case's formula, calls x (CPUs - 1), predicts {}",
                knobs.calls * cpus.saturating_sub(1)
            ));
        }
        return;
    };
    let measuring = current_tid() as i32;
    for point in &mut record.points {
        for series in &mut point.series {
            let Ok(modes) = mlock::Mode::parse_list(std::slice::from_ref(&series.name)) else {
                continue;
            };
            let label = mlock::phase_label(modes[0], point.n as usize);
            let Some(phase) = trace.ipis.iter().find(|p| p.label == label) else {
                series
                    .notes
                    .push("the trace has no phase for these calls: IPIs unknown".into());
                continue;
            };
            let sent: u64 = phase
                .by_sender
                .iter()
                .filter(|s| s.pid == measuring)
                .map(|s| s.ipis)
                .sum();
            let calls = knobs.calls as f64;
            let top = phase
                .by_site
                .first()
                .map(|s| {
                    format!(
                        "; most from {} ({} IPIs, callback {})",
                        s.callsite,
                        s.ipis,
                        if s.callback.is_empty() {
                            "none"
                        } else {
                            &s.callback
                        }
                    )
                })
                .unwrap_or_default();
            series.notes.push(format!(
                "measured: the calling thread sent {sent} IPIs in {} calls ({:.3} per call; formula calls x (CPUs - 1) = {}); all tasks sent {} during the phase, {} cross-CPU calls queued{top}",
                knobs.calls,
                sent as f64 / calls,
                knobs.calls * cpus.saturating_sub(1),
                phase.ipis,
                phase.csd_queued,
            ));
        }
    }
}

pub fn zap(args: &ZapArgs) -> Result<(), Failure> {
    let knobs = ZapKnobs {
        vcpus: args.vcpus.clone(),
        repeat: args.repeat,
        threshold_ns: args.threshold_us.saturating_mul(1_000),
        baseline: !args.no_baseline,
    };
    run_zap(knobs, &args.output, &args.trace)
}

fn run_zap(knobs: ZapKnobs, output: &OutputArgs, trace: &TraceArgs) -> Result<(), Failure> {
    knobs.validate()?;
    let system = KvmSystem::open()?;
    knobs.preflight(&system)?;
    let facts = system.facts();
    let mut config = scenario_trace_config();
    // The MMU's own view of the storm: root zaps and the obsolete roots each vCPU frees.
    config.events.push("kvmmmu:kvm_mmu_zap_all_fast".into());
    let plan = RunPlan {
        scenario: "zap",
        sweep: "vcpus",
        kvm: Some(facts.clone()),
        knobs: serde_json::to_value(&knobs).expect("knobs serialize"),
        trace_config: config,
    };
    let measure = |hook: &mut dyn PhaseHook, bar: &Bar, cancel: &Cancel| {
        zap::run(&system, &knobs, bar, cancel, hook)
    };
    let (dir, mut record) = execute(plan, output, trace, measure)?;
    let mut warnings =
        overcommit_warnings(&record.points, record.host.online_cpus, GuestProgram::Spin);
    if !zap::tsc_matches_host(&facts.backend) {
        warnings.push(format!(
            "KVM backend {}: guest TSC values are not corrected for the vCPU's TSC offset and scaling, so stalls are lined up with host time only approximately",
            facts.backend
        ));
    }
    warnings.push(format!(
        "MMU: {} backend, {}; case 4's numbers come from the TDP MMU on VMX/SVM hosts",
        facts.backend,
        match facts.tdp_mmu {
            Some(true) => "TDP MMU",
            _ => "shadow paging",
        }
    ));
    warnings.extend(record.background.as_ref().and_then(|b| b.warning()));
    record.warnings.splice(0..0, warnings);
    finish(&dir, &record, output)
}

/// The tour: small sweeps that finish quickly and show each scenario's shape.
pub fn tour(args: &TourArgs) -> Result<(), Failure> {
    let knobs = MemslotKnobs {
        vcpus: vec![1, 2, 4, 8],
        repeat: 100,
        warmup: 5,
        strategies: vec![Strategy::Direct, Strategy::PauseAll],
        ..MemslotKnobs::default()
    };
    run_memslot(knobs, &args.output, &args.trace)
}

fn run_memslot(knobs: MemslotKnobs, output: &OutputArgs, trace: &TraceArgs) -> Result<(), Failure> {
    knobs.validate()?;
    let system = KvmSystem::open()?;
    memslot::preflight(&system, &knobs)?;
    let guest = knobs.guest;
    let knobs_json = serde_json::to_value(&knobs).expect("knobs serialize");
    let measure = |hook: &mut dyn PhaseHook, bar: &Bar, cancel: &Cancel| {
        memslot::run(&system, &knobs, bar, cancel, hook)
    };
    let plan = RunPlan {
        scenario: "memslot",
        sweep: "vcpus",
        kvm: Some(system.facts()),
        knobs: knobs_json,
        trace_config: scenario_trace_config(),
    };
    let (dir, mut record) = execute(plan, output, trace, measure)?;
    let mut warnings = overcommit_warnings(&record.points, record.host.online_cpus, guest);
    warnings.extend(stalled_vcpu_warnings(&record.points, guest));
    warnings.extend(record.background.as_ref().and_then(|b| b.warning()));
    record.warnings.splice(0..0, warnings);
    finish(&dir, &record, output)
}

/// Runs `measure` with tracing around its measured phases, in a fresh run directory that is
/// removed again if anything fails, so a failed or interrupted run leaves nothing behind.
/// What a run is, before it runs.
pub(crate) struct RunPlan {
    pub scenario: &'static str,
    /// The knob `Point::n` holds.
    pub sweep: &'static str,
    pub kvm: Option<vmscale_kvm::KvmFacts>,
    pub knobs: serde_json::Value,
    pub trace_config: RecordConfig,
}

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
fn scenario_trace_config() -> RecordConfig {
    RecordConfig {
        syscall_tids: vec![current_tid()],
        ..RecordConfig::default()
    }
}

fn cannot_write(output: &OutputArgs, e: std::io::Error) -> Failure {
    Failure::runtime(format!(
        "cannot write the run under {}: {e}",
        output.out.display()
    ))
}

/// Writes run.json and summary.md, prints the chosen format and where the run is.
pub(crate) fn finish(dir: &RunDir, record: &RunRecord, output: &OutputArgs) -> Result<(), Failure> {
    dir.write_record(record)
        .map_err(|e| cannot_write(output, e))?;
    std::fs::write(
        dir.path.join("summary.md"),
        vmscale_report::render(record, vmscale_report::Format::Md),
    )
    .map_err(|e| cannot_write(output, e))?;
    print!("{}", vmscale_report::render(record, output.format));
    eprintln!("run directory: {}", dir.path.display());
    Ok(())
}

/// vCPUs beyond the host's CPUs change what every number means; say so once per run.
fn overcommit_warnings(points: &[Point], host_cpus: usize, guest: GuestProgram) -> Vec<String> {
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
fn stalled_vcpu_warnings(points: &[Point], guest: GuestProgram) -> Vec<String> {
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
