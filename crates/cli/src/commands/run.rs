//! `vmscale run <scenario>` and `vmscale tour`: run, record, render.

use vmscale_kvm::{GuestProgram, KvmSystem};
use vmscale_run::dir::utc_now;
use vmscale_run::{HostFacts, LoadMeter, Point, RunDir, RunRecord, ToolInfo, SCHEMA_VERSION};
use vmscale_scenario::memslot::{self, MemslotKnobs, Strategy};
use vmscale_scenario::Cancel;

use crate::args::{MemslotArgs, OutputArgs};
use crate::failure::Failure;
use crate::progress::Bar;

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
    run_memslot(knobs, &args.output)
}

/// The tour: small sweeps that finish quickly and show each scenario's shape.
pub fn tour(output: &OutputArgs) -> Result<(), Failure> {
    let knobs = MemslotKnobs {
        vcpus: vec![1, 2, 4, 8],
        repeat: 100,
        warmup: 5,
        strategies: vec![Strategy::Direct, Strategy::PauseAll],
        ..MemslotKnobs::default()
    };
    run_memslot(knobs, output)
}

fn run_memslot(knobs: MemslotKnobs, output: &OutputArgs) -> Result<(), Failure> {
    knobs.validate()?;
    let system = KvmSystem::open()?;
    memslot::preflight(&system, &knobs)?;

    let started_utc = utc_now();
    let host = HostFacts::probe(Some(system.facts()));
    let interrupted = crate::interrupt::install();
    let bar = Bar::new(output.quiet);
    let meter = LoadMeter::start();
    let points = memslot::run(&system, &knobs, &bar, &Cancel(&interrupted));
    bar.finish();
    let points = points?;
    let background = meter.finish(host.online_cpus);

    let mut warnings = overcommit_warnings(&points, host.online_cpus, knobs.guest);
    warnings.extend(stalled_vcpu_warnings(&points, knobs.guest));
    warnings.extend(background.as_ref().and_then(|b| b.warning()));

    let record = RunRecord {
        schema_version: SCHEMA_VERSION,
        tool: ToolInfo::current(env!("CARGO_PKG_VERSION")),
        scenario: "memslot".into(),
        sweep: "vcpus".into(),
        command_line: std::env::args().collect(),
        started_utc,
        finished_utc: utc_now(),
        host,
        knobs: serde_json::to_value(&knobs).expect("knobs serialize"),
        background,
        points,
        warnings,
    };
    write_and_print(&record, output)
}

fn write_and_print(record: &RunRecord, output: &OutputArgs) -> Result<(), Failure> {
    let cannot = |e: std::io::Error| {
        Failure::runtime(format!(
            "cannot write the run under {}: {e}",
            output.out.display()
        ))
    };
    let dir = RunDir::create(&output.out, &record.scenario, &record.started_utc).map_err(cannot)?;
    dir.write_record(record).map_err(cannot)?;
    std::fs::write(
        dir.path.join("summary.md"),
        vmscale_report::render(record, vmscale_report::Format::Md),
    )
    .map_err(cannot)?;
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
