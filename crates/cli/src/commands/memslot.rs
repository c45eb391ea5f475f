//! `vmscale run memslot` (case 3).

use vmscale_kvm::GuestProgram;
use vmscale_scenario::memslot::{Memslot, MemslotKnobs, Strategy};

use crate::args::MemslotArgs;
use crate::commands::run::parse_pin;
use crate::failure::Failure;

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
    crate::commands::run::command(Memslot, knobs, &args.output, &args.trace)
}
