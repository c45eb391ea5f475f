//! A trace-cmd .dat file (any version trace-cmd writes, compressed or not) analysed like a
//! recorded run, decoded where it lies in the file: nothing is extracted, and memory does
//! not grow with the file.

use std::path::Path;
use std::sync::Arc;

use vmscale_run::{RunRecord, TraceSection};
use vmscale_trace::dat::{DatError, DatFile};
use vmscale_trace::{DecodeError, Decoder};

use super::{import_record, ImportError, ImportedHost};

/// Analyses the .dat's trace buffer like a recorded run, decoding it where it lies in the
/// file: nothing is extracted, and memory does not grow with the file.
///
/// `name` picks a buffer (an instance) of the file, which must be named where several hold
/// events.
pub fn import(path: &Path, name: Option<&str>) -> Result<RunRecord, ImportError> {
    let failed = |e: DatError| match e {
        DatError::AmbiguousBuffer(_) => ImportError::AmbiguousBuffer(e.to_string()),
        e => ImportError::Failed(format!("{}: {e}", path.display())),
    };
    let dat = Arc::new(DatFile::open(path).map_err(failed)?);
    let buffer = dat.decodable_buffer(name).map_err(failed)?;
    let analysed = Decoder::from_dat(Arc::clone(&dat), name).and_then(|decoder| {
        // A missing or unreadable snapshot only costs names, not the analysis.
        let symbols = decoder.kallsyms().unwrap_or_default();
        // A trace from elsewhere has no measured samples and no command: like a system-wide
        // recording, every task it shows is what it explains.
        let scope = crate::Scope {
            every_task: true,
            ..Default::default()
        };
        let analysis = crate::analyse_excluding(&decoder, &symbols, &scope)?;
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
            return Err(ImportError::Failed(format!(
                "{shown}: the trace cannot be decoded: {e}"
            )))
        }
    };
    if summary.events() == 0 {
        return Err(ImportError::Failed(format!(
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
    crate::run_section::fill_findings(analysis, &mut section, &mut warnings);
    // A .dat carries the format of every event its kernel had, enabled or not: what it
    // recorded is what it holds.
    section.events = section.events_seen.keys().cloned().collect();
    let record =
        crate::run_section::concluded(imported_record(path, &dat, &buffer.name, section, warnings));
    Ok(record)
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
