//! `vmscale run mlock` (case 2).

use vmscale_scenario::mlock::{Mlock, MlockKnobs, Mode};

use crate::args::MlockArgs;
use crate::failure::Failure;

pub fn command(args: &MlockArgs) -> Result<(), Failure> {
    let knobs = MlockKnobs {
        calls: args.calls,
        modes: Mode::parse_list(&args.mode)?,
        busy: args.busy.clone(),
        buffer_kib: args.size_kib,
    };
    crate::commands::run::command(Mlock, knobs, &args.output, &args.trace)
}
