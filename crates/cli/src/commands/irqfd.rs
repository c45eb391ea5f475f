//! `vmscale run irqfd` (case 5).

use vmscale_kvm::KvmSystem;
use vmscale_scenario::irqfd::{self, IrqfdKnobs, Release};
use vmscale_scenario::{Cancel, PhaseHook};

use crate::args::{IrqfdArgs, OutputArgs};
use crate::commands::run::{
    execute, save, show, untraced_syscalls_config, Measured, OnSignal, RunPlan,
};
use crate::failure::Failure;
use crate::progress::Bar;
use crate::tracing::TraceArgs;

pub fn command(args: &IrqfdArgs) -> Result<(), Failure> {
    let knobs = IrqfdKnobs {
        total: args.total.clone(),
        threads: args.threads,
        vms: args.vms,
        release: Release::parse(&args.release)?,
    };
    show(&measure(knobs, &args.output, &args.trace)?, &args.output)?;
    Ok(())
}

pub(crate) fn measure(
    knobs: IrqfdKnobs,
    output: &OutputArgs,
    trace: &TraceArgs,
) -> Result<Measured, Failure> {
    knobs.validate()?;
    let system = KvmSystem::open()?;
    let plan = RunPlan {
        scenario: "irqfd",
        sweep: "total",
        kvm: Some(system.facts()),
        knobs: serde_json::to_value(&knobs).expect("knobs serialize"),
        trace_config: untraced_syscalls_config(),
        on_signal: OnSignal::DiscardRun,
    };
    let measure = |hook: &mut dyn PhaseHook, bar: &Bar, cancel: &Cancel| {
        irqfd::run(&system, &knobs, bar, cancel, hook)
    };
    let (dir, record) = execute(plan, output, trace, measure)?;
    save(Measured { dir, record }, output)
}
