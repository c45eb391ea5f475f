//! `vmscale run qemu-hotplug`, `qemu-start` and `qemu-migrate`: the scenarios that drive a
//! real QEMU. The scenarios own QEMU; this module only turns flags into their knobs.

use vmscale_scenario::qemu::QemuSweep;
use vmscale_scenario::qemu_hotplug::{QemuHotplug, QemuHotplugKnobs};
use vmscale_scenario::qemu_migrate::{QemuMigrate, QemuMigrateKnobs};
use vmscale_scenario::qemu_start::{QemuStart, QemuStartKnobs};

use crate::args::{QemuHotplugArgs, QemuMigrateArgs, QemuStartArgs};
use crate::commands::run::command;
use crate::failure::Failure;

pub fn hotplug(args: &QemuHotplugArgs) -> Result<(), Failure> {
    let knobs = QemuHotplugKnobs {
        sweep: QemuSweep {
            qemu: args.qemu.clone(),
            vcpus: args.vcpus.clone(),
            repeat: args.repeat,
            warmup: args.warmup,
        },
        dimm_mib: args.dimm_mib,
        mem_mib: args.mem_mib,
    };
    command(QemuHotplug, knobs, &args.output, &args.trace)
}

pub fn start(args: &QemuStartArgs) -> Result<(), Failure> {
    let knobs = QemuStartKnobs {
        qemu: args.qemu.clone(),
        vcpus: args.vcpus.clone(),
        mem_mib: args.mem_mib.clone(),
        vms: args.vms,
        repeat: args.repeat,
    };
    command(QemuStart, knobs, &args.output, &args.trace)
}

pub fn migrate(args: &QemuMigrateArgs) -> Result<(), Failure> {
    let knobs = QemuMigrateKnobs {
        sweep: QemuSweep {
            qemu: args.qemu.clone(),
            vcpus: args.vcpus.clone(),
            repeat: args.repeat,
            warmup: args.warmup,
        },
        mem_mib: args.mem_mib,
    };
    command(QemuMigrate, knobs, &args.output, &args.trace)
}
