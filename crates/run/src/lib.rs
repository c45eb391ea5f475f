//! A vmscale run as it is kept on disk.
//!
//! - [`verdict`]: what stops the run from scaling, first in every output.
//! - [`wait_chains`]: the time off a CPU as wait chains, for the off-CPU flame graph.
//! - [`schema`]: `run.json`, the one file every later command reads back.
//! - [`growth`]: how each series grows over the sweep, as claims with their intervals.
//! - [`host`]: the facts that make two runs comparable (kernel, CPU, cores, KVM backend).
//! - [`load`]: how busy the rest of the machine was while a run measured, watched by one
//!   [`HostWatch`].
//! - [`neighbours`]: which processes (other vmscale runs above all) shared the host.
//! - [`bounded`]: reading untrusted input files (regular files only, at most N bytes).
//! - [`dir`]: `vmscale-runs/<UTC>-<scenario>/` and loading a run from it.
//! - [`output`]: writing an output file without destroying what is at its path.
//! - [`cleanup`]: what must not outlive vmscale (temporaries, unfinished runs, tracefs
//!   instances) and the reserves its failure paths need.
//! - [`owner`]: which process made a run directory or tracefs instance, to tell a killed
//!   run's leftovers from a live run's work.

/// The operating-system helpers live in vmscale-sys; their old paths stay.
pub use vmscale_sys::{bounded, cleanup, output, owner};
pub mod dir;
pub mod findings;
pub mod growth;
pub mod host;
pub mod load;
pub mod neighbours;
pub mod runs;
pub mod schema;
pub mod verdict;
pub mod wait_chains;

pub use dir::{load_run, LoadError, RunDir};
pub use findings::{IpiPhase, IpiSender, IpiSite, LockContention, TraceSection, WaitStack, Waiter};
pub use findings::{VcpuHold, VmmIoctl, VmmSamples};
pub use host::{HostFacts, KvmFacts};
pub use load::{BackgroundLoad, HostWatch, Watched};
pub use owner::ProcessStamp;
pub use schema::{Phase, Point, RunPart, RunRecord, Series, ToolInfo, SCHEMA_VERSION};

pub use vmscale_sys::monotonic_ns;
