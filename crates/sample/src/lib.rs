//! On-CPU stack sampling with perf_event_open, stored in a run's trace directory, and the
//! API that reads it back.
//!
//! - [`sampler`]: [`Sampler`] records a cpu-clock sample per CPU every `1/hz` s of CPU time,
//!   with kernel and user call chains, on CLOCK_MONOTONIC (the trace's clock), into
//!   `trace/samples/` (layout in docs/trace-dir.md, records in [`format`]).
//! - [`read`]: [`Samples`] iterates the samples, per CPU or merged in time order, as
//!   [`Sample`]s (`ts, cpu, pid, tid, period_ns, kernel, user`).
//! - [`symbolize`]: [`Symbolizer`] names kernel frames (the trace's kallsyms) and user
//!   frames (the recorded mappings, ELF symbols, DWARF).
//! - [`profile`]: [`Profile`] aggregates samples by symbolized stack, for flame graphs,
//!   folded stacks and pprof; an analysis adds its wait stacks with [`Profile::add`].
//!
//! A reading of every sample of a trace, symbolized:
//!
//! ```no_run
//! # use std::path::Path;
//! # use vmscale_sample::{Samples, Symbolizer};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let trace_dir = Path::new("run/trace");
//! let samples = Samples::open(trace_dir)?;
//! let mut symbols = Symbolizer::load(&samples, trace_dir)?;
//! samples.for_each(|s| {
//!     let leaf = s.kernel.first().map(|&ip| symbols.kernel(ip))
//!         .or_else(|| s.user.first().map(|&ip| symbols.user(s.pid, s.ts, ip)));
//! #   let _ = leaf;
//! })?;
//! # Ok(())
//! # }
//! ```

pub mod for_run;
pub mod format;
pub mod profile;
pub mod read;
mod ring;
pub mod sampler;
pub mod symbolize;

pub use profile::{Filter, FrameKind, Profile, Stack, StackFrame};
pub use read::{ReadError, ReadSummary, Sample, Samples};
pub use sampler::{SampleConfig, SampleError, SampleMeta, Sampler, DEFAULT_HZ, SAMPLES_DIR};
pub use symbolize::{Frame, Symbolizer};
