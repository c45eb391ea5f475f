//! `vmscale fleet DIR --top-locks|--regressions|--growth`: the named questions over runs
//! exported as Parquet tables (`vmscale_query`), or with --sql the SQL they ask.

use vmscale_query::questions::{self, By};
use vmscale_query::{named, regressions, ExportDir};

use crate::args::{FleetArgs, GroupBy};
use crate::commands::query::failure;
use crate::failure::Failure;

pub fn fleet(args: &FleetArgs) -> Result<(), Failure> {
    let by = match args.by {
        GroupBy::Kernel => By::Kernel,
        GroupBy::Host => By::Host,
        GroupBy::Cpu => By::Cpu,
    };
    if args.sql {
        return print_sql(args, by);
    }
    let dir = args
        .dir
        .as_deref()
        .expect("clap requires DIR without --sql");
    let export = ExportDir::open(dir).map_err(failure)?;
    let rows = if args.top_locks {
        named::top_locks(&export, by).map_err(failure)?
    } else if args.growth {
        named::growth(&export).map_err(failure)?
    } else {
        let [a, b] = between(args)?;
        let answer = regressions::regressions(&export, a, b, args.noise / 100.0, args.all)
            .map_err(failure)?;
        let counts: Vec<String> = answer
            .verdicts
            .iter()
            .map(|(verdict, count)| format!("{count} {verdict}"))
            .collect();
        crate::console::note!(
            "{b} against {a}: {} rows measured on both kernels{}{}",
            answer.compared,
            if counts.is_empty() { "" } else { ": " },
            counts.join(", "),
        );
        answer.rows
    };
    crate::console::out!("{}", rows.render(args.format))
}

fn between(args: &FleetArgs) -> Result<[&str; 2], Failure> {
    match args.between.as_slice() {
        [a, b] => Ok([a.as_str(), b.as_str()]),
        _ => Err(Failure::usage(
            "--regressions needs --between KERNEL_A KERNEL_B",
        )),
    }
}

/// The question's SQL: for --regressions, the rows compared and the samples they rest on,
/// each ending in a semicolon.
fn print_sql(args: &FleetArgs, by: By) -> Result<(), Failure> {
    let texts = if args.top_locks {
        vec![questions::top_locks(by)]
    } else if args.growth {
        vec![questions::growth()]
    } else {
        let [a, b] = between(args)?;
        vec![
            questions::regression_pairs(a, b).map_err(failure)?,
            questions::regression_samples(a, b).map_err(failure)?,
        ]
    };
    for text in texts {
        crate::console::out!("{text};\n")?;
    }
    Ok(())
}
