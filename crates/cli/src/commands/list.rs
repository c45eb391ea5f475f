//! `vmscale list`: scenarios, their knobs and defaults.
//!
//! The knobs are read from the command line's own definitions (the same flags, defaults and
//! help `vmscale run <scenario> --help` prints, with each scenario's accepted range), so a
//! knob is described once and the list cannot drift from what the command accepts.

use clap::CommandFactory;

use crate::console::outln;
use crate::failure::Failure;

/// Options every scenario shares (where output goes, how to trace): said once in the
/// README, not per scenario.
const SHARED: [&str; 11] = [
    "out",
    "format",
    "quiet",
    "details",
    "no_trace",
    "buffer_kib",
    "no_stacks",
    "sleep_stacks",
    "no_sleep_stacks",
    "help",
    "version",
];

pub fn list() -> Result<(), Failure> {
    // The plain definitions give the knobs in the order they are declared; the ones with
    // ranges added (as --help shows them) give the help.
    let plain = crate::args::Cli::command();
    let ranged = crate::with_knob_ranges(crate::args::Cli::command());
    let (run, ranged_run) = (
        plain.find_subcommand("run").expect("a run subcommand"),
        ranged.find_subcommand("run").expect("a run subcommand"),
    );
    for scenario in vmscale_scenario::catalogue() {
        outln!("{}  ({})", scenario.name, scenario.case)?;
        outln!("    {}", scenario.summary)?;
        outln!("    sweeps: {}", scenario.sweep)?;
        if let (Some(command), Some(ranged)) = (
            run.find_subcommand(scenario.name),
            ranged_run.find_subcommand(scenario.name),
        ) {
            for arg in command
                .get_arguments()
                .filter(|a| !SHARED.contains(&a.get_id().as_str()))
            {
                let Some(flag) = arg.get_long() else {
                    continue;
                };
                let defaults: Vec<String> = arg
                    .get_default_values()
                    .iter()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect();
                let default = if !arg.get_action().takes_values() {
                    "off".to_string()
                } else if defaults.is_empty() {
                    "-".to_string()
                } else {
                    defaults.join(",")
                };
                let help = ranged
                    .get_arguments()
                    .find(|a| a.get_id() == arg.get_id())
                    .and_then(|a| a.get_help())
                    .map(|h| h.to_string())
                    .unwrap_or_default();
                // The first sentence: the rest is for --help.
                let help = help
                    .split_once('\n')
                    .map_or(help.as_str(), |(first, _)| first);
                outln!(
                    "    {:<14} {:<16} {}",
                    format!("--{flag}"),
                    format!("[{default}]"),
                    help
                )?;
            }
        }
        outln!("    run: vmscale run {} [knobs]", scenario.name)?;
    }
    Ok(())
}
