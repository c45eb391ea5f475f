//! `vmscale run irqfd` (case 5).

use vmscale_scenario::irqfd::{Irqfd, IrqfdKnobs, Release};

use crate::args::IrqfdArgs;
use crate::failure::Failure;

pub fn command(args: &IrqfdArgs) -> Result<(), Failure> {
    let knobs = IrqfdKnobs {
        total: args.total.clone(),
        threads: args.threads,
        vms: args.vms,
        release: Release::parse(&args.release)?,
    };
    crate::commands::run::command(Irqfd, knobs, &args.output, &args.trace)
}
