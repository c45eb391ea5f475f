//! `vmscale report RUN_DIR|FILE.dat`: render a recorded run again from its raw samples and
//! raw trace, or analyse a trace-cmd .dat recorded elsewhere.

use std::path::Path;
use std::sync::Arc;

use vmscale_run::{HostFacts, RunRecord, ToolInfo, TraceSection, SCHEMA_VERSION};
use vmscale_trace::dat::{DatError, DatFile};
use vmscale_trace::{DecodeError, Decoder};

use crate::failure::Failure;

/// The first bytes of every trace-cmd .dat file.
const DAT_MAGIC: &[u8] = b"\x17\x08\x44tracing";

pub fn report(
    run: &Path,
    format: vmscale_report::Format,
    deadline: Option<std::time::Duration>,
    buffer: Option<&str>,
    details: bool,
) -> Result<(), Failure> {
    let options = vmscale_report::Options {
        deadline_ns: deadline.map(|d| d.as_nanos() as f64),
        brief: !details,
    };
    if !run.is_dir() {
        check_input_file(run)?;
    }
    if is_dat(run) {
        return import_dat(run, format, buffer, &options);
    }
    if buffer.is_some() {
        return Err(Failure::usage(format!(
            "--buffer names an instance of a trace-cmd .dat file; {} is not one",
            run.display()
        )));
    }
    if crate::commands::report_text::is_text_trace(run) {
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
            crate::trace_analysis::reanalyse(
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
    let record = crate::trace_analysis::concluded(record);
    crate::console::out!("{}", vmscale_report::render_with(&record, format, &options))?;
    Ok(())
}

/// A file given to `report` must be a regular file with something in it, and look like one
/// of the three inputs; anything else is named in one line before any parser sees it.
fn check_input_file(path: &Path) -> Result<(), Failure> {
    use std::io::Read;
    let shown = path.display();
    let file = vmscale_run::bounded::open_regular(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Failure::runtime(format!("{shown}: no such run directory or file"))
        }
        _ => Failure::runtime(format!("{shown}: {e}")),
    })?;
    let mut head = Vec::with_capacity(512);
    file.take(512)
        .read_to_end(&mut head)
        .map_err(|e| Failure::runtime(format!("{shown}: {e}")))?;
    let looks_like_json = head.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if head.is_empty() {
        return Err(Failure::runtime(format!(
            "{shown}: empty file: expected a run directory, run.json, trace-cmd .dat or ftrace text"
        )));
    }
    if !looks_like_json
        && !head.starts_with(DAT_MAGIC)
        && !crate::commands::report_text::is_text_trace(path)
    {
        return Err(Failure::runtime(format!(
            "{shown}: not a run.json, trace-cmd .dat or ftrace text (it starts with {})",
            describe_bytes(&head)
        )));
    }
    Ok(())
}

/// The first bytes of an unknown file, as a user can recognise them.
fn describe_bytes(head: &[u8]) -> String {
    let shown: Vec<u8> = head.iter().copied().take(16).collect();
    if shown
        .iter()
        .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace())
    {
        format!("{:?}", String::from_utf8_lossy(&shown))
    } else {
        let hex: Vec<String> = shown.iter().map(|b| format!("{b:02x}")).collect();
        format!("bytes {}", hex.join(" "))
    }
}

fn is_dat(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 10];
    path.is_file()
        && std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut head))
            .is_ok()
        && head == DAT_MAGIC
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
        let analysis = vmscale_analysis::analyse_with(&decoder, &symbols)?;
        let stacks = decoder
            .last_summary()
            .is_some_and(|summary| summary.kernel_stacks() > 0);
        let ticks = (!decoder.times_in_ns()).then(|| decoder.clock().unwrap_or("?").to_string());
        Ok((analysis, stacks, ticks))
    });
    // A file whose pages cannot be read fails the import; a trace that does not decode
    // costs the findings, as it does for a recorded run.
    let (analysis, stacks, ticks) = match analysed {
        Ok((analysis, stacks, ticks)) => (Ok(analysis), stacks, ticks),
        Err(DecodeError::Dat(e)) => return Err(failed(e)),
        Err(e) => (Err(e), dat.has_kernel_stacks(buffer).map_err(failed)?, None),
    };
    let meta = dat.trace_meta(buffer, stacks);
    let mut section = TraceSection {
        dir: ".".into(),
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
    if let Some(clock) = ticks {
        warnings.push(format!(
            "the trace's clock is {clock}, which does not count nanoseconds, and the file has \
             no TSC2NSEC conversion: every time and duration below is in {clock} ticks"
        ));
    }
    crate::trace_analysis::fill_findings(analysis, &mut section, &mut warnings);
    let record = crate::trace_analysis::concluded(imported_record(
        path,
        &dat,
        &buffer.name,
        section,
        warnings,
    ));
    crate::console::out!("{}", vmscale_report::render_with(&record, format, options))?;
    Ok(())
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

/// What a trace from another machine tells of that machine.
pub(crate) struct ImportedHost {
    pub hostname: String,
    pub kernel_release: String,
    pub kernel_version: String,
    pub online_cpus: usize,
}

/// The run record of an imported trace: its host as far as the trace tells, the import's
/// knobs, no samples, and the analyses' findings.
pub(crate) fn import_record(
    host: ImportedHost,
    knobs: serde_json::Value,
    trace: TraceSection,
    warnings: Vec<String>,
) -> RunRecord {
    RunRecord {
        schema_version: SCHEMA_VERSION,
        verdict: Vec::new(),
        tool: ToolInfo::current(env!("CARGO_PKG_VERSION")),
        scenario: "import".into(),
        sweep: "none".into(),
        command_line: std::env::args().collect(),
        started_utc: String::new(),
        finished_utc: String::new(),
        host: HostFacts {
            hostname: host.hostname,
            kernel_release: host.kernel_release,
            kernel_version: host.kernel_version,
            cpu_model: "unknown (imported trace)".into(),
            online_cpus: host.online_cpus,
            memory_bytes: 0,
            kvm: None,
        },
        knobs,
        background: None,
        points: Vec::new(),
        trace: Some(trace),
        warnings,
    }
}
