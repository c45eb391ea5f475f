//! `vmscale export --perfetto RUN_DIR`: the run's kernel trace as a Perfetto trace, to open
//! in ui.perfetto.dev (tracks per CPU, lock waits per task, IPIs as flows, phases).

use std::path::{Path, PathBuf};

use crate::failure::Failure;

pub fn perfetto(run: &Path, out: Option<PathBuf>) -> Result<(), Failure> {
    let record = vmscale_run::load_run(run)?;
    let run_dir = if run.is_dir() {
        run
    } else {
        run.parent().unwrap_or(Path::new("."))
    };
    let Some(section) = &record.trace else {
        return Err(Failure::runtime(format!(
            "{} has no kernel trace (it was run with --no-trace)",
            run.display()
        )));
    };
    let trace_dir = run_dir.join(&section.dir);
    let target = out.unwrap_or_else(|| run_dir.join("trace.perfetto-trace"));
    let file = std::fs::File::create(&target)
        .map_err(|e| Failure::runtime(format!("cannot write {}: {e}", target.display())))?;
    let summary = vmscale_report::perfetto::write_perfetto(
        &trace_dir,
        Some(&record),
        std::io::BufWriter::new(file),
    )
    .map_err(|e| {
        let _ = std::fs::remove_file(&target);
        Failure::runtime(format!("cannot export {}: {e}", trace_dir.display()))
    })?;
    eprintln!(
        "wrote {} ({} packets, {} tracks, {} slices, {} instants, {} flows): open it in ui.perfetto.dev",
        target.display(),
        summary.packets,
        summary.tracks,
        summary.slices,
        summary.instants,
        summary.flows
    );
    Ok(())
}
