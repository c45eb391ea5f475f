//! `vmscale run teardown` (case 1) and the hidden holder process it runs.

use vmscale_kvm::KvmSystem;
use vmscale_scenario::teardown::{self, Mode, TeardownKnobs};
use vmscale_scenario::{Cancel, PhaseHook};

use crate::args::{OutputArgs, TeardownArgs, TeardownHolderArgs};
use crate::commands::run::{
    execute, save, show, untraced_syscalls_config, Measured, OnSignal, RunPlan,
};
use crate::failure::Failure;
use crate::progress::Bar;
use crate::tracing::TraceArgs;

pub fn command(args: &TeardownArgs) -> Result<(), Failure> {
    let knobs = TeardownKnobs {
        vms: args.vms.clone(),
        vcpus: args.vcpus,
        mem_mib: args.mem_mib,
        touch: !args.untouched,
        modes: Mode::parse_list(&args.mode)?,
        repeat: args.repeat,
        vfio: args.vfio.clone(),
    };
    show(&measure(knobs, &args.output, &args.trace)?, &args.output)?;
    Ok(())
}

pub(crate) fn measure(
    knobs: TeardownKnobs,
    output: &OutputArgs,
    trace: &TraceArgs,
) -> Result<Measured, Failure> {
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
        trace_config: untraced_syscalls_config(),
        on_signal: OnSignal::DiscardRun,
    };
    let measure = |hook: &mut dyn PhaseHook, bar: &Bar, cancel: &Cancel| {
        teardown::run(&exe, &knobs, bar, cancel, hook)
    };
    let (dir, record) = execute(plan, output, trace, measure)?;
    save(Measured { dir, record }, output)
}

/// The hidden `teardown-holder` command: holds VMs for the teardown scenario.
pub fn holder(args: &TeardownHolderArgs) -> Result<(), Failure> {
    // A terminal's Ctrl-C reaches the whole process group. The parent decides what an
    // interruption means and ends its holders itself (SIGKILL, or closing their stdin), so
    // a holder dying first would only turn an interruption into a holder failure.
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: SIG_IGN installs no handler code; it only changes the disposition.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    if !args.vfio.is_empty() {
        teardown::hold_devices_and_release(&args.vfio, &args.release)?;
        return Ok(());
    }
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
