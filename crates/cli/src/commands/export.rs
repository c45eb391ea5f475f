//! `vmscale export --perfetto|--dat RUN_DIR`: the run's kernel trace for other tools.
//!
//! * `--perfetto`: a Perfetto trace, to open in ui.perfetto.dev (tracks per CPU, lock waits
//!   per task, IPIs as flows, phases);
//! * `--dat`: a trace-cmd .dat file (version 7), for `trace-cmd report` and KernelShark.

use std::path::{Path, PathBuf};

use vmscale_export::dat::{write_dat, Compression};
use vmscale_export::perfetto::write_perfetto;
use vmscale_run::dir::write_through_temp;
use vmscale_run::RunRecord;

use crate::failure::Failure;

/// Dispatches on the format flags: exactly one of them.
pub fn export(
    perfetto: bool,
    dat: bool,
    compression: Option<&str>,
    run: &Path,
    out: Option<PathBuf>,
) -> Result<(), Failure> {
    match (perfetto, dat) {
        (true, false) if compression.is_some() => Err(Failure::usage(
            "--compression applies to --dat only (a Perfetto trace is not compressed)",
        )),
        (true, false) => export_perfetto(run, out),
        (false, true) => export_dat(run, out, compression),
        _ => Err(Failure::usage(
            "export needs exactly one of --perfetto and --dat",
        )),
    }
}

/// A run, its directory, and the directory of its kernel trace.
struct Traced {
    record: RunRecord,
    run_dir: PathBuf,
    trace_dir: PathBuf,
}

fn traced(run: &Path) -> Result<Traced, Failure> {
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
    Ok(Traced {
        run_dir: run_dir.to_path_buf(),
        trace_dir,
        record,
    })
}

fn export_perfetto(run: &Path, out: Option<PathBuf>) -> Result<(), Failure> {
    let Traced {
        record,
        run_dir,
        trace_dir,
    } = traced(run)?;
    let target = out.unwrap_or_else(|| run_dir.join("trace.perfetto-trace"));
    let summary = write_through_temp(&target, |tmp| {
        let file = std::fs::File::create(tmp)
            .map_err(|e| Failure::runtime(format!("cannot write {}: {e}", target.display())))?;
        write_perfetto(&trace_dir, Some(&record), std::io::BufWriter::new(file))
            .map_err(|e| Failure::runtime(format!("cannot export {}: {e}", trace_dir.display())))
    })?;
    crate::console::note!(
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

fn export_dat(run: &Path, out: Option<PathBuf>, compression: Option<&str>) -> Result<(), Failure> {
    let compression = match compression {
        Some(name) => name
            .parse()
            .map_err(|e| Failure::usage(format!("--compression {e}")))?,
        None => Compression::default(),
    };
    let Traced {
        run_dir, trace_dir, ..
    } = traced(run)?;
    let target = out.unwrap_or_else(|| run_dir.join(vmscale_run::dir::DAT_FILE));
    let written = write_through_temp(&target, |tmp| {
        write_dat(&trace_dir, tmp, compression)
            .map_err(|e| Failure::runtime(format!("cannot export {}: {e}", trace_dir.display())))
    })?;
    let damaged = match written.corrupt_pages {
        0 => String::new(),
        n => format!(", {n} damaged pages copied as recorded"),
    };
    crate::console::note!(
        "wrote {} ({} bytes, {} events on {} CPUs, {} pages, {} task names{damaged}): open it with `trace-cmd report -i {}` or KernelShark",
        target.display(),
        written.bytes,
        written.events,
        written.cpus,
        written.pages,
        written.comms,
        target.display()
    );
    Ok(())
}
