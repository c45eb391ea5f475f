//! `vmscale export --perfetto|--dat RUN_DIR`: the run's kernel trace for other tools.
//!
//! * `--perfetto`: a Perfetto trace, to open in ui.perfetto.dev (tracks per CPU, lock waits
//!   per task, IPIs as flows, phases);
//! * `--dat`: a trace-cmd .dat file (version 7), for `trace-cmd report` and KernelShark;
//! * `--pprof`: the on-CPU samples as a gzipped pprof profile (`go tool pprof`, speedscope,
//!   Pyroscope);
//! * `--folded`: the on-CPU samples as folded stacks (flamegraph.pl, speedscope);
//! * `--parquet`: runs as Parquet tables for SQL engines (`export_parquet`).

use std::path::{Path, PathBuf};

use vmscale_export::dat::{write_dat, Compression};
use vmscale_export::perfetto::write_perfetto;
use vmscale_run::output::{OutputError, OutputFile};
use vmscale_run::RunRecord;

use crate::failure::Failure;

/// The format flags of `export`.
pub struct Formats {
    pub perfetto: bool,
    pub dat: bool,
    pub pprof: bool,
    pub folded: bool,
    pub parquet: bool,
}

/// Dispatches on the format flags: exactly one of them.
pub fn export(
    formats: Formats,
    compression: Option<&str>,
    runs: &[PathBuf],
    out: Option<PathBuf>,
) -> Result<(), Failure> {
    let Formats {
        perfetto,
        dat,
        pprof,
        folded,
        parquet,
    } = formats;
    let chosen = [perfetto, dat, pprof, folded, parquet]
        .iter()
        .filter(|&&f| f)
        .count();
    if chosen != 1 {
        return Err(Failure::usage(
            "export needs exactly one of --perfetto, --dat, --pprof, --folded and --parquet",
        ));
    }
    if compression.is_some() && !dat {
        return Err(Failure::usage(
            "--compression applies to --dat only (the other formats are not compressed that way)",
        ));
    }
    if parquet {
        return super::export_parquet::export_parquet(runs, out);
    }
    let [run] = runs else {
        return Err(Failure::usage(
            "this format exports one run at a time (only --parquet takes several)",
        ));
    };
    let run = run.as_path();
    if perfetto {
        export_perfetto(run, out)
    } else if dat {
        export_dat(run, out, compression)
    } else {
        export_samples(run, out, pprof)
    }
}

/// `--pprof` (gzipped pprof profile: the on-CPU samples, and the time off a CPU by wait
/// chain) or `--folded` (folded stacks of the on-CPU samples).
fn export_samples(run: &Path, out: Option<PathBuf>, pprof: bool) -> Result<(), Failure> {
    let Traced {
        record,
        run_dir,
        trace_dir,
    } = traced(run)?;
    let excluded = record
        .trace
        .as_ref()
        .map(|t| t.excluded_tids.clone())
        .unwrap_or_default();
    let mut profile = vmscale_export::pprof::run_profile(&trace_dir, &excluded)
        .map_err(|e| Failure::runtime(e.to_string()))?;
    // Folded stacks count samples only; pprof carries the waiting as a second value.
    let waited = match (&record.trace, pprof) {
        (Some(trace), true) => vmscale_export::pprof::add_wait_chains(&mut profile, trace),
        _ => 0,
    };
    let name = if pprof {
        vmscale_run::dir::PPROF_FILE
    } else {
        vmscale_run::dir::FOLDED_FILE
    };
    let target = out.unwrap_or_else(|| run_dir.join(name));
    let cannot =
        |e: std::io::Error| Failure::runtime(format!("cannot write {}: {e}", target.display()));
    let lost = match profile.read.lost {
        0 => String::new(),
        n => format!("; {n} sample records were lost (see the run's warnings)"),
    };
    let (output, file) = OutputFile::create(&target).map_err(output_failure)?;
    let mut sink = std::io::BufWriter::new(file);
    if pprof {
        vmscale_export::pprof::write_pprof(&profile, &mut sink).map_err(cannot)?;
    } else {
        profile.write_folded(&mut sink).map_err(cannot)?;
    }
    let file = sink.into_inner().map_err(|e| cannot(e.into_error()))?;
    output.commit(file).map_err(output_failure)?;
    let open = if pprof {
        format!("open it with `go tool pprof -http=: {}`", target.display())
    } else {
        "open it with flamegraph.pl or speedscope".to_string()
    };
    let waited = match waited {
        0 => String::new(),
        ns => format!(", {:.6} s of waiting by wait chain", ns as f64 / 1e9),
    };
    crate::console::note!(
        "wrote {} ({} on-CPU samples, {:.3} s of CPU time{waited}, {} stacks{lost}): {open}",
        target.display(),
        profile.samples,
        profile.cpu_ns() as f64 / 1e9,
        profile.stacks.len(),
    );
    Ok(())
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

/// An output path that cannot be written: refused (not a regular file, exit 2) or failed.
pub(crate) fn output_failure(e: OutputError) -> Failure {
    if e.is_refusal() {
        Failure::usage(e.to_string())
    } else {
        Failure::runtime(e.to_string())
    }
}

fn export_perfetto(run: &Path, out: Option<PathBuf>) -> Result<(), Failure> {
    let Traced {
        record,
        run_dir,
        trace_dir,
    } = traced(run)?;
    let target = out.unwrap_or_else(|| run_dir.join("trace.perfetto-trace"));
    let (output, file) = OutputFile::create(&target).map_err(output_failure)?;
    let mut sink = std::io::BufWriter::new(file);
    let summary = write_perfetto(&trace_dir, Some(&record), &mut sink)
        .map_err(|e| Failure::runtime(format!("cannot export {}: {e}", trace_dir.display())))?;
    let file = sink.into_inner().map_err(|e| {
        Failure::runtime(format!("cannot write {}: {}", target.display(), e.error()))
    })?;
    output.commit(file).map_err(output_failure)?;
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
    // The .dat file copies every page of the CPU files: what is wrong with them (a file
    // grown to gigabytes of holes) is said before it is copied, as `report` says it.
    // A directory that cannot be opened is write_dat's to report.
    for warning in vmscale_analysis::trace_file_warnings(&trace_dir).unwrap_or_default() {
        crate::console::note!("vmscale: warning: {warning}");
    }
    let written = write_dat(&trace_dir, &target, compression).map_err(|e| match e {
        vmscale_trace::dat::write::DatWriteError::Output(e) => output_failure(e),
        e => Failure::runtime(format!("cannot export {}: {e}", trace_dir.display())),
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
