//! vmscale's front end: parse the command line and dispatch. Everything else lives in the
//! library crates and in `commands/`.
//!
//! Two programs share it. `vmscale` does everything but SQL; `vmscale query` and `vmscale
//! fleet` run `vmscale-sql`, beside it, which holds the embedded SQL engine: DataFusion's
//! code is eight times the rest of vmscale, and every run would load it (and a run under
//! `ulimit -v` below its size would die at exec, before any message could be printed).

mod args;
mod commands;
mod console;
mod failure;
mod interrupt;
mod progress;
mod sql_engine;
mod tracing;

use args::{Cli, Command};

/// A failed allocation ends the run with its cleanup and one line, not Rust's abort.
#[global_allocator]
static ALLOC: vmscale_run::cleanup::GuardedAlloc = vmscale_run::cleanup::GuardedAlloc;

/// `vmscale`.
pub fn main() {
    let cli = parse_or_exit();
    // The teardown holder is vmscale's own child, ended by its parent; it keeps the
    // default actions.
    if !matches!(cli.command, Command::TeardownHolder(_)) {
        // Under `ulimit -v`, room for the cleanup after an allocation fails, and for the
        // signal thread beside it; without them, nothing may start.
        if let Err(why) = vmscale_run::cleanup::reserve_memory() {
            eprintln!("vmscale: error: {why}");
            std::process::exit(2);
        }
        vmscale_run::cleanup::install_thread_stack_hook();
        vmscale_run::cleanup::install_release_handler();
        vmscale_run::cleanup::install_abort_handler();
        interrupt::install();
    }
    let outcome = match cli.command {
        Command::Tour(args) => commands::tour::tour(&args),
        Command::List => commands::list::list(),
        Command::Run(scenario) => scenario.dispatch(commands::run::RunCommand),
        Command::TeardownHolder(args) => {
            vmscale_scenario::teardown::holder(&args).map_err(failure::Failure::from)
        }
        Command::Record(args) => commands::record::record(&args),
        Command::Compare {
            a,
            b,
            noise,
            fail_above,
            format,
            html,
        } => commands::compare::compare(&a, &b, noise, fail_above, format, html.as_deref()),
        Command::Export {
            perfetto,
            dat,
            pprof,
            folded,
            parquet,
            compression,
            runs,
            output,
        } => commands::export::export(
            commands::export::Formats {
                perfetto,
                dat,
                pprof,
                folded,
                parquet,
            },
            compression.as_deref(),
            &runs,
            output,
        ),
        Command::Report {
            run,
            format,
            deadline,
            margin,
            buffer,
            details,
        } => commands::report::report(&run, format, deadline, margin, buffer.as_deref(), details),
        Command::Doctor { cleanup, out } => commands::doctor::doctor(cleanup, &out),
        Command::Query { .. } | Command::Fleet(_) => sql_engine::exec(),
    };
    exit_on(outcome);
}

/// `vmscale-sql`: `vmscale query` and `vmscale fleet`, run by `vmscale` with its own
/// command line.
pub fn sql_main() {
    let cli = parse_or_exit();
    if let Err(why) = vmscale_run::cleanup::reserve_memory() {
        eprintln!("vmscale: error: {why}");
        std::process::exit(2);
    }
    vmscale_run::cleanup::install_thread_stack_hook();
    interrupt::install();
    let outcome = match cli.command {
        Command::Query { dir, sql, format } => commands::query::query(&dir, &sql, format),
        Command::Fleet(args) => commands::fleet::fleet(&args),
        _ => Err(failure::Failure::usage(
            "vmscale-sql answers vmscale query and vmscale fleet; run vmscale for the rest",
        )),
    };
    exit_on(outcome);
}

/// Ends the process with the failure's one line and exit code, if it failed.
fn exit_on(outcome: Result<(), failure::Failure>) {
    if let Err(failure) = outcome.map_err(failure::Failure::named_limits) {
        console::note!("vmscale: error: {}", failure.message);
        std::process::exit(failure.exit_code);
    }
}

/// Each scenario knob's help ends with the values it accepts, taken from the scenario's own
/// declaration (the one its validation checks), so --help and the check cannot disagree.
pub(crate) fn with_knob_ranges(cli: clap::Command) -> clap::Command {
    cli.mut_subcommand("run", |run| {
        vmscale_scenario::catalogue()
            .into_iter()
            .fold(run, |run, scenario| {
                run.mut_subcommand(scenario.name, |mut command| {
                    for knob in &scenario.knobs {
                        let (Some(range), Some(id)) = (knob.range, knob.flag.strip_prefix("--"))
                        else {
                            continue;
                        };
                        let id = id.replace('-', "_");
                        // mut_arg panics on an unknown id; a knob named differently from its
                        // flag keeps its plain help instead.
                        if !command.get_arguments().any(|a| a.get_id() == id.as_str()) {
                            continue;
                        }
                        command = command.mut_arg(id, |arg| {
                            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                            arg.help(format!("{help} ({} to {})", range.min, range.max))
                        });
                    }
                    command
                })
            })
    })
}

/// The command line, or one line saying what is wrong with it (exit 2). Help and version
/// print as clap writes them.
fn parse_or_exit() -> Cli {
    use clap::error::ErrorKind;
    use clap::{CommandFactory, FromArgMatches};
    let parsed = with_knob_ranges(Cli::command())
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches));
    match parsed {
        Ok(cli) => cli,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            console::note!("vmscale: error: {}", one_line(&e.render().to_string()));
            std::process::exit(failure::EXIT_USAGE);
        }
    }
}

/// clap's error is a paragraph (the error, a tip, the usage, a pointer to --help); the
/// first line says what is wrong, and the tip, when there is one, how to mend it.
fn one_line(rendered: &str) -> String {
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("invalid command line");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    // "the following required arguments were not provided:" lists them on the next lines.
    let first = match first.strip_suffix(':') {
        Some(head) => {
            let listed: Vec<&str> = rendered
                .lines()
                .skip_while(|l| !l.trim_end().ends_with(':'))
                .skip(1)
                .take_while(|l| l.starts_with("  ") && !l.trim().is_empty())
                .map(str::trim)
                .collect();
            format!("{head}: {}", listed.join(", "))
        }
        None => first.to_string(),
    };
    match lines.find_map(|l| l.strip_prefix("tip: ")) {
        Some(tip) => format!("{first} ({tip}; see --help)"),
        None => format!("{first} (see --help)"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn clap_errors_become_one_line_with_the_tip() {
        let rendered = "error: unexpected argument '--repat' found\n\n  tip: a similar argument exists: '--repeat'\n\nUsage: vmscale run memslot --repeat <REPEAT>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            super::one_line(rendered),
            "unexpected argument '--repat' found (a similar argument exists: '--repeat'; see --help)"
        );
        assert_eq!(
            super::one_line("error: the following required arguments were not provided:\n  --between <KERNEL_A> <KERNEL_B>\n\nUsage: vmscale fleet --regressions --between <KERNEL_A> <KERNEL_B> [DIR]\n"),
            "the following required arguments were not provided: --between <KERNEL_A> <KERNEL_B> (see --help)"
        );
        assert_eq!(
            super::one_line("error: invalid value 'x' for '--repeat <N>'\n"),
            "invalid value 'x' for '--repeat <N>' (see --help)"
        );
    }
}
