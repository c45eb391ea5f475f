//! What the analyses found in a run's kernel trace, as stored in run.json.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use vmscale_stats::Summary;

/// The trace part of a run: how it was recorded and what the analyses found.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TraceSection {
    /// Directory of the raw trace, relative to the run directory.
    pub dir: String,
    pub events: Vec<String>,
    pub stacks: bool,
    pub buffer_kib: u64,
    /// Events the kernel could not store, per CPU (see the run's warnings).
    pub lost_per_cpu: BTreeMap<String, u64>,
    /// Events decoded from the raw trace.
    pub decoded_events: u64,
    /// Time between a contention_begin and the kernel stack recorded for it: what recording
    /// a stack adds to every contended wait it is attached to.
    pub stack_cost: Option<Summary>,
    pub contention: Vec<LockContention>,
    /// IPIs per measured phase.
    #[serde(default)]
    pub ipis: Vec<IpiPhase>,
}

/// One contended lock (one address), worst first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LockContention {
    pub lock_addr: u64,
    /// A kallsyms data symbol, or type, mode and the distinctive frame that waits on it.
    pub name: String,
    /// spinlock, rwlock, mutex, rwsem, percpu-rwsem, rt-mutex...
    pub kind: String,
    /// Contended acquisitions per mode (read, write, or "" for exclusive locks).
    pub modes: BTreeMap<String, u64>,
    /// Completed waits (contention_begin .. contention_end of the same task).
    pub waits: Option<Summary>,
    pub total_wait_ns: u64,
    /// Waits still open when the trace ended (no contention_end): counted apart.
    pub open_waits: u64,
    pub waiters: Vec<Waiter>,
    pub stacks: Vec<WaitStack>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Waiter {
    pub comm: String,
    pub pid: i32,
    pub waits: u64,
    pub total_wait_ns: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitStack {
    /// Symbolized frames, innermost first.
    pub frames: Vec<String>,
    pub waits: u64,
    pub total_wait_ns: u64,
}

/// IPIs and cross-CPU calls sent during one measured phase (between the scenario's
/// `vmscale: begin <label>` and `vmscale: end <label>` markers).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IpiPhase {
    pub label: String,
    pub duration_ns: u64,
    /// IPIs sent, one per target CPU (a cpumask IPI to 3 CPUs counts 3).
    pub ipis: u64,
    /// Cross-CPU function calls queued (csd_queue_cpu).
    pub csd_queued: u64,
    /// Target CPU (as a string, for JSON) -> IPIs.
    pub by_target: BTreeMap<String, u64>,
    /// Worst first.
    pub by_site: Vec<IpiSite>,
    /// Worst first.
    pub by_sender: Vec<IpiSender>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IpiSite {
    /// The kernel function that sent the IPI, symbolized.
    pub callsite: String,
    /// The function the target CPU was asked to run, symbolized ("" for a bare
    /// rescheduling IPI).
    pub callback: String,
    pub ipis: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IpiSender {
    pub pid: i32,
    pub comm: String,
    pub ipis: u64,
}
