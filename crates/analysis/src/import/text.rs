//! Trace text (a pasted `trace` or `trace_pipe`, `trace-cmd
//! report` in any of its forms, events, function tracer or function_graph output, quoted in
//! a mail or not) analysed like a recording.
//!
//! Whatever the file is called, its content decides: any text that is neither JSON nor
//! binary goes to the text importer, which says what the text looks like and why it could
//! not be read when it gives nothing to analyse. The text is streamed into a scratch trace
//! directory (`vmscale_trace::text::trace_dir`), which the same decoder and analyses as every
//! recorded run read; the report says what the text could not give (time resolution,
//! skipped lines and why) and lists the slowest function_graph calls and the functions the
//! function tracer saw most.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use vmscale_run::{RunRecord, TraceSection};
use vmscale_trace::text::import::TextReader;
use vmscale_trace::text::trace_dir::{write_trace_dir, DirSink, TextDirSummary};

use super::{import_record, ImportError, ImportedHost};

/// How much of a file is looked at to tell whether it is ftrace text.
const HEAD: usize = 64 * 1024;

/// The file's first bytes, up to [`HEAD`].
fn head(path: &Path) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    File::open(path)
        .ok()?
        .take(HEAD as u64)
        .read_to_end(&mut head)
        .ok()?;
    Some(head)
}

/// What the text's header says about the machine: the kernel release (`# ... latency trace
/// v1.1.5 on RELEASE`) and the CPU count (`#P:N`).
fn header_facts(path: &Path) -> (Option<String>, Option<usize>) {
    let head = head(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&head);
    let mut release = None;
    let mut cpus = None;
    for line in text.lines().filter(|l| l.starts_with('#')) {
        if let Some((_, after)) = line.split_once(" latency trace v") {
            release = after
                .split_once(" on ")
                .map(|(_, release)| release.trim().to_string());
        }
        if let Some((_, after)) = line.split_once("#P:") {
            cpus = after
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok());
        }
    }
    (release, cpus)
}

/// Converts the text into a scratch trace directory, analyses it and removes the
/// directory.
pub fn import(path: &Path) -> Result<RunRecord, ImportError> {
    let scratch = vmscale_sys::output::ScratchDir::create()
        .map_err(|e| ImportError::Failed(format!("cannot create a scratch directory: {e}")))?;
    analyse(path, &scratch.path().join("trace"))
}

fn analyse(path: &Path, scratch: &Path) -> Result<RunRecord, ImportError> {
    let shown = path.display();
    let file = File::open(path).map_err(|e| ImportError::Failed(format!("{shown}: {e}")))?;
    let mut reader = TextReader::new(BufReader::with_capacity(1 << 16, file));
    let mut sink = DirSink::new(scratch).map_err(|e| ImportError::Failed(e.to_string()))?;
    let summary =
        write_trace_dir(&mut reader, &mut sink).map_err(|e| ImportError::Failed(e.to_string()))?;
    if let Some(e) = reader.take_error() {
        return Err(ImportError::Failed(format!(
            "{shown}: read failed after line {}: {e}",
            reader.lines_read()
        )));
    }
    if summary.is_empty() {
        return Err(ImportError::Failed(format!(
            "{shown}: nothing vmscale can analyse: {}",
            summary.nothing_to_analyse(reader.forms())
        )));
    }

    // A latency tracer's own finding comes first: the worst latency it caught, and where.
    let mut warnings: Vec<String> = reader
        .latency_headlines()
        .iter()
        .map(|headline| format!("latency tracer {}", headline.describe()))
        .collect();
    warnings.extend(summary.warnings());
    let mut section = TraceSection {
        dir: ".".into(),
        // No samples and no command: every task the text shows is what it explains.
        every_task: true,
        // As a recording lists them: the events asked for, not the markers ftrace adds.
        events: summary
            .events
            .keys()
            .filter(|name| *name != "ftrace:print")
            .cloned()
            .collect(),
        stacks: summary.stacks > 0,
        lost_per_cpu: summary
            .lost
            .iter()
            .map(|(cpu, lost)| (cpu.to_string(), *lost))
            .collect(),
        ..TraceSection::default()
    };
    crate::run_section::reanalyse(scratch, &mut section, &[], &mut warnings);
    warnings.extend(summary.call_notes());
    Ok(crate::run_section::concluded(imported_record(
        path, &reader, &summary, section, warnings,
    )))
}

/// A run record for a text trace: what its header says about the machine, no samples, the
/// analyses' findings, and what the import counted.
fn imported_record<R: std::io::BufRead>(
    path: &Path,
    reader: &TextReader<R>,
    summary: &TextDirSummary,
    trace: TraceSection,
    warnings: Vec<String>,
) -> RunRecord {
    let (release, cpus) = header_facts(path);
    let cpus = cpus.or(reader.header_cpus().map(|n| n as usize));
    let host = ImportedHost {
        hostname: String::new(),
        kernel_release: release.unwrap_or_else(|| "unknown".into()),
        kernel_version: String::new(),
        online_cpus: cpus.unwrap_or_else(|| summary.highest_cpu.map_or(0, |c| c as usize + 1)),
    };
    let knobs = serde_json::json!({
        "file": path.display().to_string(),
        "format": reader.forms().describe(),
        "lines": reader.lines_read(),
        "events": summary.converted_events(),
        "stacks": summary.stacks,
        "skipped_lines": summary.skipped_lines(),
        "function_graph_calls": summary.calls,
        "function_tracer_calls": summary.function_calls,
    });
    import_record(host, knobs, trace, warnings)
}
