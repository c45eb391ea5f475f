//! `vmscale report RUN_DIR|FILE.dat`: render a recorded run again from its raw samples and
//! raw trace, or analyse a trace-cmd .dat recorded elsewhere.

use std::path::Path;

use vmscale_analysis::import::ImportError;
use vmscale_trace::input::Input;

use crate::failure::Failure;

pub fn report(
    run: &Path,
    format: vmscale_report::Format,
    deadline: Option<std::time::Duration>,
    margin_pct: f64,
    buffer: Option<&str>,
    details: bool,
) -> Result<(), Failure> {
    let options = vmscale_report::Options {
        deadline_ns: deadline.map(|d| d.as_nanos() as f64),
        brief: !details,
    };
    let input = if run.is_dir() {
        None
    } else {
        Some(check_input_file(run)?)
    };
    if input == Some(Input::Dat) {
        let record = vmscale_analysis::import::dat::import(run, buffer).map_err(|e| match e {
            ImportError::AmbiguousBuffer(why) => {
                Failure::runtime(format!("{why}, with --buffer NAME ({})", run.display()))
            }
            ImportError::Failed(why) => Failure::runtime(why),
        })?;
        crate::console::out!("{}", vmscale_report::render_with(&record, format, &options))?;
        return Ok(());
    }
    if buffer.is_some() {
        return Err(Failure::usage(format!(
            "--buffer names an instance of a trace-cmd .dat file; {} is not one",
            run.display()
        )));
    }
    if input == Some(Input::Text) {
        let record = vmscale_analysis::import::text::import(run)
            .map_err(|e| Failure::runtime(e.to_string()))?;
        crate::console::out!("{}", vmscale_report::render_with(&record, format, &options))?;
        return Ok(());
    }
    let mut record = vmscale_run::load_run(run)?;
    // The raw trace is kept so that analyses run again on it, with this build's analyses.
    let run_dir = if run.is_dir() {
        run
    } else {
        run.parent().unwrap_or(Path::new("."))
    };
    if let Some(section) = record.trace.as_mut() {
        let trace_dir = run_dir.join(&section.dir);
        if trace_dir.is_dir() {
            vmscale_analysis::run_section::reanalyse(
                run_dir,
                section,
                &record.points,
                &mut record.warnings,
            );
        } else {
            record.warnings.push(format!(
                "the run was traced but {} is missing: the trace findings below are the ones recorded when it ran, not analysed again by this build",
                trace_dir.display()
            ));
        }
    }
    record.judge_growth(Some(margin_pct / 100.0));
    let record = vmscale_analysis::run_section::concluded(record);
    crate::console::out!("{}", vmscale_report::render_with(&record, format, &options))?;
    Ok(())
}

/// A file given to `report` must be a regular file with something in it, and look like one
/// of the three inputs (the trace crate tells which); anything else is named in one line
/// before any parser sees it.
fn check_input_file(path: &Path) -> Result<Input, Failure> {
    use std::io::Read;
    let shown = path.display();
    let file = vmscale_run::bounded::open_regular(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Failure::runtime(format!("{shown}: no such run directory or file"))
        }
        _ => Failure::runtime(format!("{shown}: {e}")),
    })?;
    let mut head = Vec::with_capacity(vmscale_trace::input::HEAD_BYTES as usize);
    file.take(vmscale_trace::input::HEAD_BYTES)
        .read_to_end(&mut head)
        .map_err(|e| Failure::runtime(format!("{shown}: {e}")))?;
    match vmscale_trace::input::sniff_bytes(&head) {
        Input::Empty => Err(Failure::runtime(format!(
            "{shown}: empty file: expected a run directory, run.json, trace-cmd .dat or ftrace text"
        ))),
        Input::Unknown { starts_with } => Err(Failure::runtime(format!(
            "{shown}: not a run.json, trace-cmd .dat or ftrace text (it starts with {starts_with})"
        ))),
        input => Ok(input),
    }
}
