//! `vmscale tour`: every scenario at a small sweep, traced, in one directory with one
//! combined summary. Sized to finish in a few minutes on a 2-CPU host.

use vmscale_run::dir::utc_now;
use vmscale_run::dir::write_atomically;
use vmscale_run::RunDir;

use crate::args::{OutputArgs, SharedArgs};
use crate::commands::run::{measure, show, Measured};
use crate::failure::Failure;

pub fn tour(args: &SharedArgs) -> Result<(), Failure> {
    crate::commands::run::preflight(&args.trace)?;
    let started = utc_now();
    crate::commands::run::remove_stale_partials(&args.output.out);
    let mut tour_dir = RunDir::create(&args.output.out, "tour", &started)
        .map_err(|e| Failure::runtime(format!("cannot create the tour directory: {e}")))?;
    // Every scenario's run directory goes inside the tour's.
    let output = OutputArgs {
        out: tour_dir.path.clone(),
        format: args.output.format,
        quiet: args.output.quiet,
        details: args.output.details,
        parquet: args.output.parquet.clone(),
    };
    let trace = &args.trace;
    // Every registered scenario at its tour sweep; one line for each reason this host
    // leaves some out (the QEMU scenarios share one).
    let mut steps = Vec::new();
    let mut left_out: Vec<String> = Vec::new();
    for scenario in vmscale_scenario::registry() {
        match scenario.tour() {
            Ok(job) => steps.push((scenario.info().name, job)),
            Err(why) if !left_out.contains(&why) => left_out.push(why),
            Err(_) => {}
        }
    }
    for why in &left_out {
        crate::console::note!("tour: {why}");
    }
    let names: Vec<&str> = steps.iter().map(|(name, _)| *name).collect();
    let mut runs = Vec::new();
    for (index, (name, mut job)) in steps.into_iter().enumerate() {
        if !args.output.quiet {
            crate::console::note!("tour: {name}");
        }
        match measure(job.as_mut(), &output, trace) {
            Ok(measured) => runs.push(measured),
            Err(failure) => {
                // The tour keeps what it measured so far, marked as stopped, unless nothing
                // finished; the failure is still the result.
                let stopped = Stopped {
                    at: name,
                    interrupted: failure.exit_code == crate::failure::EXIT_INTERRUPTED,
                    not_run: &names[index + 1..],
                };
                let mut message = match stopped.interrupted {
                    true => format!("tour interrupted during {name}; its VMs were torn down"),
                    false => format!("tour stopped at {name}: {}", failure.message),
                };
                if !runs.is_empty() {
                    write_summary(&tour_dir, &runs, Some(&stopped))?;
                    tour_dir.publish().map_err(cannot_write)?;
                    rebase(&mut runs, &tour_dir);
                    message.push_str(&format!(
                        "; what finished is in {}",
                        tour_dir.path.display()
                    ));
                }
                return Err(Failure { message, ..failure });
            }
        }
    }
    write_summary(&tour_dir, &runs, None)?;
    tour_dir.publish().map_err(cannot_write)?;
    rebase(&mut runs, &tour_dir);
    match args.output.format {
        vmscale_report::Format::Json => {
            let records: Vec<_> = runs.iter().map(|m| &m.record).collect();
            crate::console::outln!(
                "{}",
                serde_json::to_string_pretty(&records).expect("records serialize")
            )?;
        }
        _ => runs.iter().try_for_each(|m| show(m, &args.output))?,
    }
    crate::console::note!("tour directory: {}", tour_dir.path.display());
    Ok(())
}

/// Where a tour that did not finish stopped, and what it never ran.
struct Stopped<'a> {
    at: &'a str,
    interrupted: bool,
    not_run: &'a [&'a str],
}

impl Stopped<'_> {
    fn sentence(&self, ran: &[&str]) -> String {
        let how = if self.interrupted {
            "interrupted"
        } else {
            "stopped by an error"
        };
        let not_run = match self.not_run {
            [] => String::new(),
            rest => format!("; never ran: {}", rest.join(", ")),
        };
        format!(
            "This tour did not finish: {how} during {}. Finished: {}{not_run}.",
            self.at,
            ran.join(", ")
        )
    }
}

/// The scenario runs moved with the tour directory when it got its final name.
fn rebase(runs: &mut [Measured], tour_dir: &RunDir) {
    for run in runs {
        if let Some(name) = run.dir.path.file_name() {
            run.dir.path = tour_dir.path.join(name);
        }
    }
}

/// A run's first finding, as its cause and sentence.
fn first_finding(record: &vmscale_run::RunRecord) -> (&'static str, String) {
    record
        .verdict
        .first()
        .map_or(("none", "no verdict".to_string()), |f| {
            (f.cause.label(), f.summary.clone())
        })
}

fn cannot_write(e: std::io::Error) -> Failure {
    Failure::runtime(format!("cannot write the tour directory: {e}"))
}

/// summary.md of the tour (every scenario's Markdown rendering, in order) and report.html,
/// a page linking each scenario's own self-contained report. A tour that stopped early says
/// so first in both.
fn write_summary(
    tour_dir: &RunDir,
    runs: &[Measured],
    stopped: Option<&Stopped>,
) -> Result<(), Failure> {
    let ran: Vec<&str> = runs.iter().map(|m| m.record.scenario.as_str()).collect();
    let banner = stopped.map(|s| s.sentence(&ran));
    let mut text: Vec<String> = banner.iter().map(|b| format!("**{b}**")).collect();
    // One verdict per scenario first, each linking to its own summary.
    let verdicts: Vec<String> = runs
        .iter()
        .map(|m| {
            let name = m
                .dir
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let (cause, summary) = first_finding(&m.record);
            format!(
                "- **{}** ({cause}): {summary} ([details]({name}/{}))",
                m.record.scenario,
                vmscale_run::dir::SUMMARY_FILE
            )
        })
        .collect();
    text.push(format!(
        "## vmscale tour: the verdicts\n\n{}",
        verdicts.join("\n")
    ));
    text.extend(
        runs.iter()
            .map(|m| vmscale_report::render(&m.record, vmscale_report::Format::Md)),
    );
    write_atomically(
        &tour_dir.path.join(vmscale_run::dir::SUMMARY_FILE),
        text.join("\n\n").as_bytes(),
    )
    .map_err(cannot_write)?;
    let linked: Vec<(&vmscale_run::RunRecord, String)> = runs
        .iter()
        .map(|m| {
            let name = m
                .dir
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (
                &m.record,
                format!("{name}/{}", vmscale_run::dir::REPORT_FILE),
            )
        })
        .collect();
    let page = vmscale_report::html::render_tour_html(&linked, banner.as_deref());
    write_atomically(
        &tour_dir.path.join(vmscale_run::dir::REPORT_FILE),
        page.as_bytes(),
    )
    .map_err(cannot_write)
}
