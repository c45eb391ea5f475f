//! `vmscale report RUN_DIR`: render a recorded run again, from its raw samples.

use std::path::Path;

use crate::failure::Failure;

pub fn report(run: &Path, format: vmscale_report::Format) -> Result<(), Failure> {
    let mut record = vmscale_run::load_run(run)?;
    // The raw trace is kept so that analyses run again on it, with this build's analyses.
    let run_dir = if run.is_dir() {
        run
    } else {
        run.parent().unwrap_or(Path::new("."))
    };
    if let Some(section) = record.trace.as_mut() {
        if run_dir.join(&section.dir).is_dir() {
            crate::trace_analysis::reanalyse(run_dir, section, &mut record.warnings);
        }
    }
    print!("{}", vmscale_report::render(&record, format));
    Ok(())
}
