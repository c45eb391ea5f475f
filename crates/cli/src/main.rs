//! vmscale's front end: parse the command line and dispatch. Everything else lives in the
//! library crates and in `commands/`.

mod args;
mod commands;
mod failure;
mod interrupt;
mod progress;
mod trace_analysis;
mod tracing;

use clap::Parser;

use args::{Cli, Command, RunScenario};

fn main() {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Tour(args) => commands::tour::tour(&args),
        Command::List => commands::list::list(),
        Command::Run(RunScenario::Memslot(args)) => commands::memslot::command(&args),
        Command::Run(RunScenario::Irqfd(args)) => commands::irqfd::command(&args),
        Command::Run(RunScenario::Teardown(args)) => commands::teardown::command(&args),
        Command::Run(RunScenario::Zap(args)) => commands::zap::command(&args),
        Command::Run(RunScenario::Mlock(args)) => commands::mlock::command(&args),
        Command::TeardownHolder(args) => commands::teardown::holder(&args),
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
            compression,
            run,
            output,
        } => commands::export::export(perfetto, dat, compression.as_deref(), &run, output),
        Command::Report {
            run,
            format,
            deadline,
            buffer,
        } => commands::report::report(&run, format, deadline, buffer.as_deref()),
        Command::Doctor { cleanup } => commands::doctor::doctor(cleanup),
    };
    if let Err(failure) = outcome {
        eprintln!("vmscale: error: {}", failure.message);
        std::process::exit(failure.exit_code);
    }
}
