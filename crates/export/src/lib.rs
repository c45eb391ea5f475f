//! A run's kernel trace for other tools.
//!
//! - [`perfetto`]: a Perfetto trace (tracks per CPU, lock waits and holds per task, IPIs as
//!   flows, the run's phases), for ui.perfetto.dev.
//! - [`dat`]: a trace-cmd .dat file (version 7), for `trace-cmd report` and KernelShark.
//! - [`pprof`]: the on-CPU samples as a pprof profile (gzipped protobuf), for `go tool
//!   pprof`, speedscope and Pyroscope; [`vmscale_sample::Profile::write_folded`] writes
//!   them as folded stacks.
//! - [`parquet`]: runs as Parquet tables (runs, samples, summaries, growth, findings,
//!   lock_waits, holds, ipis, stacks), partitioned by kernel, host and date, for engines
//!   that query many runs at once.
//!
//! The trace exports read the raw trace directory a run recorded; the Parquet tables read
//! run.json. None reads a rendered report.

pub mod dat;
pub mod parquet;
pub mod perfetto;
pub mod pprof;
