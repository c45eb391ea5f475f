//! A run's kernel trace for other tools.
//!
//! - [`perfetto`]: a Perfetto trace (tracks per CPU, lock waits and holds per task, IPIs as
//!   flows, the run's phases), for ui.perfetto.dev.
//! - [`dat`]: a trace-cmd .dat file (version 7), for `trace-cmd report` and KernelShark.
//! - [`pprof`]: the on-CPU samples as a pprof profile (gzipped protobuf), for `go tool
//!   pprof`, speedscope and Pyroscope; [`vmscale_sample::Profile::write_folded`] writes
//!   them as folded stacks.
//!
//! All read the raw trace directory a run recorded, never the rendered reports.

pub mod dat;
pub mod perfetto;
pub mod pprof;
