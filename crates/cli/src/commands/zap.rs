//! `vmscale run zap` (case 4).

use vmscale_kvm::{GuestProgram, KvmSystem};
use vmscale_scenario::zap::{self, ZapKnobs};
use vmscale_scenario::{Cancel, PhaseHook};

use crate::args::{OutputArgs, ZapArgs};
use crate::commands::run::parse_pin;
use crate::commands::run::{
    execute, overcommit_warnings, save, scenario_trace_config, show, Measured, OnSignal, RunPlan,
};
use crate::failure::Failure;
use crate::progress::Bar;
use crate::tracing::TraceArgs;

pub fn command(args: &ZapArgs) -> Result<(), Failure> {
    let knobs = ZapKnobs {
        vcpus: args.vcpus.clone(),
        repeat: args.repeat,
        threshold_ns: args.threshold_us.saturating_mul(1_000),
        baseline: !args.no_baseline,
        pin: parse_pin(&args.repeatability)?,
        runs: args.repeatability.runs,
    };
    show(&measure(knobs, &args.output, &args.trace)?, &args.output)?;
    Ok(())
}

pub(crate) fn measure(
    knobs: ZapKnobs,
    output: &OutputArgs,
    trace: &TraceArgs,
) -> Result<Measured, Failure> {
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
        on_signal: OnSignal::DiscardRun,
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
    record.warnings.splice(0..0, warnings);
    save(Measured { dir, record }, output)
}
