//! `vmscale report RUN_DIR|FILE.dat`: render a recorded run again from its raw samples and
//! raw trace, or analyse a trace-cmd .dat recorded elsewhere.

use std::path::Path;
use std::sync::Arc;

use vmscale_run::{RunRecord, TraceSection};
use vmscale_trace::dat::{DatError, DatFile};
use vmscale_trace::input::Input;
use vmscale_trace::{DecodeError, Decoder};

use crate::commands::imported::{import_record, ImportedHost};
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
        return import_dat(run, format, buffer, &options);
    }
    if buffer.is_some() {
        return Err(Failure::usage(format!(
            "--buffer names an instance of a trace-cmd .dat file; {} is not one",
            run.display()
        )));
    }
    if input == Some(Input::Text) {
        return crate::commands::report_text::import_text(run, format, &options);
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

/// Analyses the .dat's trace buffer like a recorded run, decoding it where it lies in the
/// file: nothing is extracted, and memory does not grow with the file.
fn import_dat(
    path: &Path,
    format: vmscale_report::Format,
    name: Option<&str>,
    options: &vmscale_report::Options,
) -> Result<(), Failure> {
    let failed = |e: DatError| match e {
        DatError::AmbiguousBuffer(_) => {
            Failure::runtime(format!("{e}, with --buffer NAME ({})", path.display()))
        }
        e => Failure::runtime(format!("{}: {e}", path.display())),
    };
    let dat = Arc::new(DatFile::open(path).map_err(failed)?);
    let buffer = dat.decodable_buffer(name).map_err(failed)?;
    let analysed = Decoder::from_dat(Arc::clone(&dat), name).and_then(|decoder| {
        // A missing or unreadable snapshot only costs names, not the analysis.
        let symbols = decoder.kallsyms().unwrap_or_default();
        // A trace from elsewhere has no measured samples and no command: like a system-wide
        // recording, every task it shows is what it explains.
        let scope = vmscale_analysis::Scope {
            every_task: true,
            ..Default::default()
        };
        let analysis = vmscale_analysis::analyse_excluding(&decoder, &symbols, &scope)?;
        let summary = decoder.last_summary().unwrap_or_default();
        let ticks = (!decoder.times_in_ns()).then(|| decoder.clock().unwrap_or("?").to_string());
        Ok((analysis, summary, decoder.page_layout().page_size, ticks))
    });
    // A file whose trace cannot be decoded, or that holds no events, has nothing to
    // analyse: that is a failure, not an empty report.
    let shown = path.display();
    let (analysis, summary, page_size, ticks) = match analysed {
        Ok(analysed) => analysed,
        Err(DecodeError::Dat(e)) => return Err(failed(e)),
        Err(e) => {
            return Err(Failure::runtime(format!(
                "{shown}: the trace cannot be decoded: {e}"
            )))
        }
    };
    if summary.events() == 0 {
        return Err(Failure::runtime(format!(
            "{shown}: {}",
            no_events(&dat, buffer, &summary)
        )));
    }
    let stacks = summary.kernel_stacks() > 0;
    let analysis = Ok(analysis);
    let meta = dat.trace_meta(buffer, stacks);
    let mut section = TraceSection {
        dir: ".".into(),
        every_task: true,
        events: meta.events.clone(),
        stacks: meta.stacks,
        lost_per_cpu: meta
            .lost
            .iter()
            .map(|(c, l)| (c.clone(), l.total()))
            .collect(),
        ..TraceSection::default()
    };
    let mut warnings = meta.lost_warnings();
    warnings.extend(summary.damage_warnings(page_size));
    if let Some(clock) = ticks {
        warnings.push(format!(
            "the trace's clock is {clock}, which does not count nanoseconds, and the file has \
             no TSC2NSEC conversion: every time and duration below is in {clock} ticks"
        ));
    }
    vmscale_analysis::run_section::fill_findings(analysis, &mut section, &mut warnings);
    // A .dat carries the format of every event its kernel had, enabled or not: what it
    // recorded is what it holds.
    section.events = section.events_seen.keys().cloned().collect();
    let record = vmscale_analysis::run_section::concluded(imported_record(
        path,
        &dat,
        &buffer.name,
        section,
        warnings,
    ));
    crate::console::out!("{}", vmscale_report::render_with(&record, format, options))?;
    Ok(())
}

/// Why a buffer of a .dat file gave no events, in one line.
fn no_events(
    dat: &DatFile,
    buffer: &vmscale_trace::dat::Buffer,
    summary: &vmscale_trace::DecodeSummary,
) -> String {
    let which = if buffer.name.is_empty() {
        "the trace buffer".to_string()
    } else {
        format!("buffer `{}`", buffer.name)
    };
    if !buffer.has_data() {
        return format!(
            "no events: {which} holds no pages (the file has the formats of {} events but \
             no trace data was recorded into it)",
            dat.metadata.event_formats.len()
        );
    }
    let pages: u64 = summary.cpus.iter().map(|c| c.pages).sum();
    match summary.errors.first() {
        Some(first) => format!(
            "no events: none of the {pages} pages of {which} could be decoded (first: {first})"
        ),
        None => format!("no events: the {pages} pages of {which} hold no events"),
    }
}

/// A run record for a trace-cmd file: what the file says about its host, no samples, and
/// the analyses' findings.
fn imported_record(
    path: &Path,
    dat: &vmscale_trace::dat::DatFile,
    buffer: &str,
    trace: TraceSection,
    warnings: Vec<String>,
) -> RunRecord {
    let uname = dat.options.uname.clone().unwrap_or_default();
    let word = |n: usize| uname.split_whitespace().nth(n).map(str::to_string);
    let host = ImportedHost {
        hostname: word(1).unwrap_or_default(),
        kernel_release: word(2).unwrap_or_else(|| "unknown".into()),
        kernel_version: uname.clone(),
        online_cpus: dat.cpu_count as usize,
    };
    import_record(
        host,
        serde_json::json!({
            "file": path.display().to_string(),
            "dat_version": dat.version,
            "buffer": buffer,
        }),
        trace,
        warnings,
    )
}
