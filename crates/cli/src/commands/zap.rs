//! `vmscale run zap` (case 4).

use vmscale_scenario::zap::{Zap, ZapKnobs};

use crate::args::ZapArgs;
use crate::commands::run::parse_pin;
use crate::failure::Failure;

pub fn command(args: &ZapArgs) -> Result<(), Failure> {
    let knobs = ZapKnobs {
        vcpus: args.vcpus.clone(),
        repeat: args.repeat,
        threshold_ns: args.threshold_us.saturating_mul(1_000),
        baseline: !args.no_baseline,
        pin: parse_pin(&args.repeatability)?,
        runs: args.repeatability.runs,
    };
    crate::commands::run::command(Zap, knobs, &args.output, &args.trace)
}
