//! `vmscale run qemu-hotplug`, `qemu-start` and `qemu-migrate`: the scenarios that drive a
//! real QEMU. The scenarios own QEMU; this module only wires them into a run.

use vmscale_scenario::qemu_hotplug::{self, QemuHotplugKnobs};
use vmscale_scenario::qemu_migrate::{self, QemuMigrateKnobs};
use vmscale_scenario::qemu_start::{self, QemuStartKnobs};
use vmscale_scenario::{Cancel, PhaseHook};
use vmscale_trace::record::recorder::{default_events, RecordConfig};

use crate::args::{OutputArgs, QemuHotplugArgs, QemuMigrateArgs, QemuStartArgs};
use crate::commands::run::{execute, save, show, Measured, OnSignal, RunPlan};
use crate::failure::Failure;
use crate::progress::Bar;
use crate::tracing::{current_tid, TraceArgs};

/// The ioctl system call (x86-64): kept from every task, since the threads QEMU creates
/// mid-run (a migration thread) cannot be named before they exist.
const SYS_IOCTL: i64 = 16;

/// The usual events, the system calls of the measuring thread (the QMP round trips) and of
/// QEMU's threads (added once QEMU runs), every ioctl (QEMU's later threads' KVM calls
/// among them; the analysis keeps QEMU's own), and thread creation, which ties threads QEMU
/// creates later to it.
pub(crate) fn qemu_trace_config() -> RecordConfig {
    let mut events = default_events();
    events.push("sched:sched_process_fork".into());
    RecordConfig {
        events,
        syscall_tids: vec![current_tid()],
        syscall_ids: vec![SYS_IOCTL],
        ..RecordConfig::default()
    }
}

pub fn hotplug(args: &QemuHotplugArgs) -> Result<(), Failure> {
    let knobs = QemuHotplugKnobs {
        qemu: args.qemu.clone(),
        vcpus: args.vcpus.clone(),
        repeat: args.repeat,
        warmup: args.warmup,
        dimm_mib: args.dimm_mib,
        mem_mib: args.mem_mib,
    };
    show(
        &measure_hotplug(knobs, &args.output, &args.trace)?,
        &args.output,
    )
}

pub fn start(args: &QemuStartArgs) -> Result<(), Failure> {
    let knobs = QemuStartKnobs {
        qemu: args.qemu.clone(),
        vcpus: args.vcpus.clone(),
        mem_mib: args.mem_mib.clone(),
        vms: args.vms,
        repeat: args.repeat,
    };
    show(
        &measure_start(knobs, &args.output, &args.trace)?,
        &args.output,
    )
}

pub fn migrate(args: &QemuMigrateArgs) -> Result<(), Failure> {
    let knobs = QemuMigrateKnobs {
        qemu: args.qemu.clone(),
        vcpus: args.vcpus.clone(),
        repeat: args.repeat,
        warmup: args.warmup,
        mem_mib: args.mem_mib,
    };
    show(
        &measure_migrate(knobs, &args.output, &args.trace)?,
        &args.output,
    )
}

/// The plan every QEMU scenario shares: checked before anything starts (a missing QEMU is
/// a usage error, exit 2), traced with QEMU's ioctls.
fn plan(scenario: &'static str, knobs: serde_json::Value) -> RunPlan {
    RunPlan {
        scenario,
        sweep: "vcpus",
        kvm: vmscale_kvm::KvmSystem::open().ok().map(|s| s.facts()),
        knobs,
        trace_config: qemu_trace_config(),
        on_signal: OnSignal::DiscardRun,
    }
}

/// Runs one QEMU scenario whose knobs have been validated: checks the QEMU binary, then
/// measures with the run machinery shared by every scenario.
fn measure_qemu<K: serde::Serialize>(
    scenario: &'static str,
    knobs: &K,
    qemu: Option<&std::path::Path>,
    output: &OutputArgs,
    trace: &TraceArgs,
    run: impl FnOnce(
        &K,
        &Bar,
        &Cancel,
        &mut dyn PhaseHook,
    ) -> Result<Vec<vmscale_run::Point>, vmscale_scenario::Error>,
) -> Result<Measured, Failure> {
    vmscale_scenario::qemu::binary(qemu)?;
    let plan = plan(
        scenario,
        serde_json::to_value(knobs).expect("knobs serialize"),
    );
    let measure =
        |hook: &mut dyn PhaseHook, bar: &Bar, cancel: &Cancel| run(knobs, bar, cancel, hook);
    let (dir, record) = execute(plan, output, trace, measure)?;
    save(Measured { dir, record }, output)
}

pub(crate) fn measure_hotplug(
    knobs: QemuHotplugKnobs,
    output: &OutputArgs,
    trace: &TraceArgs,
) -> Result<Measured, Failure> {
    knobs.validate()?;
    let qemu = knobs.qemu.clone();
    measure_qemu(
        "qemu-hotplug",
        &knobs,
        qemu.as_deref(),
        output,
        trace,
        |k, bar, cancel, hook| qemu_hotplug::run(k, bar, cancel, hook),
    )
}

pub(crate) fn measure_start(
    knobs: QemuStartKnobs,
    output: &OutputArgs,
    trace: &TraceArgs,
) -> Result<Measured, Failure> {
    knobs.validate()?;
    let qemu = knobs.qemu.clone();
    measure_qemu(
        "qemu-start",
        &knobs,
        qemu.as_deref(),
        output,
        trace,
        |k, bar, cancel, hook| qemu_start::run(k, bar, cancel, hook),
    )
}

pub(crate) fn measure_migrate(
    knobs: QemuMigrateKnobs,
    output: &OutputArgs,
    trace: &TraceArgs,
) -> Result<Measured, Failure> {
    knobs.validate()?;
    let qemu = knobs.qemu.clone();
    measure_qemu(
        "qemu-migrate",
        &knobs,
        qemu.as_deref(),
        output,
        trace,
        |k, bar, cancel, hook| qemu_migrate::run(k, bar, cancel, hook),
    )
}

/// One QEMU scenario of the tour.
pub(crate) type TourStep<'a> = (
    &'static str,
    Box<dyn Fn() -> Result<Measured, Failure> + 'a>,
);

/// The QEMU scenarios at a small sweep, when a QEMU is installed; otherwise none, and one
/// line saying how to get it.
pub(crate) fn tour_steps<'a>(output: &'a OutputArgs, trace: &'a TraceArgs) -> Vec<TourStep<'a>> {
    if !vmscale_scenario::qemu::installed() {
        crate::console::note!(
            "tour: no {} on PATH, so the qemu scenarios are left out ({})",
            vmscale_vmm::QEMU_BINARY,
            "apt-get install qemu-system-x86"
        );
        return Vec::new();
    }
    vec![
        (
            "qemu-hotplug",
            Box::new(move || {
                measure_hotplug(
                    QemuHotplugKnobs {
                        vcpus: vec![1, 2, 4],
                        repeat: 30,
                        ..QemuHotplugKnobs::default()
                    },
                    output,
                    trace,
                )
            }),
        ),
        (
            "qemu-start",
            Box::new(move || {
                measure_start(
                    QemuStartKnobs {
                        vcpus: vec![1, 2, 4],
                        vms: 2,
                        repeat: 3,
                        ..QemuStartKnobs::default()
                    },
                    output,
                    trace,
                )
            }),
        ),
        (
            "qemu-migrate",
            Box::new(move || {
                measure_migrate(
                    QemuMigrateKnobs {
                        vcpus: vec![1, 2, 4],
                        repeat: 3,
                        ..QemuMigrateKnobs::default()
                    },
                    output,
                    trace,
                )
            }),
        ),
    ]
}
