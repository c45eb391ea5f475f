//! Traces recorded elsewhere, made run records: a trace-cmd .dat file ([`dat`]) or ftrace
//! text ([`text`]), analysed like a recording of every task they show. `vmscale report`
//! prints them; anything else that reads traces from other hosts (an export, a fleet
//! table) gets the same record.

pub mod dat;
pub mod text;

use vmscale_run::{HostFacts, RunRecord, ToolInfo, TraceSection, SCHEMA_VERSION};

/// Why a file could not be imported, in one line that names the file.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A .dat file with several buffers that hold events, none of them named.
    #[error("{0}")]
    AmbiguousBuffer(String),
    #[error("{0}")]
    Failed(String),
}

/// What a trace from another machine tells of that machine.
struct ImportedHost {
    pub hostname: String,
    pub kernel_release: String,
    pub kernel_version: String,
    pub online_cpus: usize,
}

/// The run record of an imported trace: its host as far as the trace tells, the import's
/// knobs, no samples, and the analyses' findings.
fn import_record(
    host: ImportedHost,
    knobs: serde_json::Value,
    trace: TraceSection,
    warnings: Vec<String>,
) -> RunRecord {
    RunRecord {
        schema_version: SCHEMA_VERSION,
        verdict: Vec::new(),
        scaling: Vec::new(),
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
