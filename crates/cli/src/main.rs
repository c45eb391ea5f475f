//! vmscale's front end: parse the command line and dispatch. Everything else lives in the
//! library crates and in `commands/`.

mod args;
mod commands;
mod failure;
mod interrupt;
mod progress;

use clap::Parser;

use args::{Cli, Command, RunScenario};

fn main() {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Tour(output) => commands::run::tour(&output),
        Command::List => commands::list::list(),
        Command::Run(RunScenario::Memslot(args)) => commands::run::memslot(&args),
        Command::Report { run, format } => commands::report::report(&run, format),
        Command::Doctor => commands::doctor::doctor(),
    };
    if let Err(failure) = outcome {
        eprintln!("vmscale: error: {}", failure.message);
        std::process::exit(failure.exit_code);
    }
}
