//! `vmscale run teardown` (case 1).

use vmscale_scenario::teardown::{Mode, Teardown, TeardownKnobs};

use crate::args::TeardownArgs;
use crate::failure::Failure;

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
    crate::commands::run::command(Teardown, knobs, &args.output, &args.trace)
}
