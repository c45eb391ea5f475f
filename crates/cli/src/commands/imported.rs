//! The run record of a trace imported from a file (.dat or ftrace text), which both
//! `report` readers build: its own file, so that neither reader imports the other.

use vmscale_run::{HostFacts, RunRecord, ToolInfo, TraceSection, SCHEMA_VERSION};

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
