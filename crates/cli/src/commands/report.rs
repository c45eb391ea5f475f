//! `vmscale report RUN_DIR|FILE.dat`: render a recorded run again from its raw samples and
//! raw trace, or analyse a trace-cmd .dat recorded elsewhere.

use std::path::Path;

use vmscale_run::{HostFacts, RunRecord, ToolInfo, TraceSection, SCHEMA_VERSION};

use crate::failure::Failure;

/// The first bytes of every trace-cmd .dat file.
const DAT_MAGIC: &[u8] = b"\x17\x08\x44tracing";

pub fn report(
    run: &Path,
    format: vmscale_report::Format,
    deadline: Option<std::time::Duration>,
) -> Result<(), Failure> {
    if is_dat(run) {
        return import_dat(run, format);
    }
    let options = vmscale_report::Options {
        deadline_ns: deadline.map(|d| d.as_nanos() as f64),
    };
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
    print!("{}", vmscale_report::render_with(&record, format, &options));
    Ok(())
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

/// Extracts the .dat's trace buffer into a scratch trace directory, analyses it like a
/// recorded run, and removes the scratch directory again.
fn import_dat(path: &Path, format: vmscale_report::Format) -> Result<(), Failure> {
    let dat =
        vmscale_trace::dat::DatFile::open(path).map_err(|e| Failure::runtime(e.to_string()))?;
    let scratch = std::env::temp_dir().join(format!("vmscale-import-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let extracted = dat.extract(None, &scratch);
    let result = extracted
        .map_err(|e| Failure::runtime(e.to_string()))
        .map(|extracted| {
            let mut warnings = Vec::new();
            let mut section = TraceSection {
                dir: ".".into(),
                events: extracted.meta.events.clone(),
                stacks: extracted.meta.stacks,
                lost_per_cpu: extracted
                    .meta
                    .lost
                    .iter()
                    .map(|(c, l)| (c.clone(), l.total()))
                    .collect(),
                ..TraceSection::default()
            };
            warnings.extend(extracted.meta.lost_warnings());
            crate::trace_analysis::reanalyse(&scratch, &mut section, &mut warnings);
            imported_record(path, &dat, &extracted.buffer, section, warnings)
        });
    let _ = std::fs::remove_dir_all(&scratch);
    print!("{}", vmscale_report::render(&result?, format));
    Ok(())
}

/// A run record for a trace recorded elsewhere: what the file says about its host, no
/// samples, and the analyses' findings.
fn imported_record(
    path: &Path,
    dat: &vmscale_trace::dat::DatFile,
    buffer: &str,
    trace: TraceSection,
    warnings: Vec<String>,
) -> RunRecord {
    let uname = dat.options.uname.clone().unwrap_or_default();
    let host = HostFacts {
        hostname: uname.split_whitespace().nth(1).unwrap_or("").to_string(),
        kernel_release: uname
            .split_whitespace()
            .nth(2)
            .unwrap_or("unknown")
            .to_string(),
        kernel_version: uname,
        cpu_model: "unknown (imported trace)".into(),
        online_cpus: dat.cpu_count as usize,
        memory_bytes: 0,
        kvm: None,
    };
    RunRecord {
        schema_version: SCHEMA_VERSION,
        tool: ToolInfo::current(env!("CARGO_PKG_VERSION")),
        scenario: "import".into(),
        sweep: "none".into(),
        command_line: std::env::args().collect(),
        started_utc: String::new(),
        finished_utc: String::new(),
        host,
        knobs: serde_json::json!({
            "file": path.display().to_string(),
            "dat_version": dat.version,
            "buffer": buffer,
        }),
        background: None,
        points: Vec::new(),
        trace: Some(trace),
        warnings,
    }
}
