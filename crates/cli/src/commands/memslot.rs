//! `vmscale run memslot` (case 3).

use vmscale_kvm::{GuestProgram, KvmSystem};
use vmscale_scenario::memslot::{self, MemslotKnobs, Strategy};
use vmscale_scenario::{Cancel, PhaseHook};

use crate::args::{MemslotArgs, OutputArgs};
use crate::commands::run::parse_pin;
use crate::commands::run::{
    execute, overcommit_warnings, save, scenario_trace_config, show, stalled_vcpu_warnings,
    Measured, OnSignal, RunPlan,
};
use crate::failure::Failure;
use crate::progress::Bar;
use crate::tracing::TraceArgs;

pub fn command(args: &MemslotArgs) -> Result<(), Failure> {
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
        pin: parse_pin(&args.repeatability)?,
        runs: args.repeatability.runs,
    };
    show(&measure(knobs, &args.output, &args.trace)?, &args.output)?;
    Ok(())
}

pub(crate) fn measure(
    knobs: MemslotKnobs,
    output: &OutputArgs,
    trace: &TraceArgs,
) -> Result<Measured, Failure> {
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
        on_signal: OnSignal::DiscardRun,
    };
    let (dir, mut record) = execute(plan, output, trace, measure)?;
    let mut warnings = overcommit_warnings(&record.points, record.host.online_cpus, guest);
    warnings.extend(stalled_vcpu_warnings(&record.points, guest));
    record.warnings.splice(0..0, warnings);
    save(Measured { dir, record }, output)
}
