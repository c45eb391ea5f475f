//! A run's kernel trace for other tools.
//!
//! - [`perfetto`]: a Perfetto trace (tracks per CPU, lock waits and holds per task, IPIs as
//!   flows, the run's phases), for ui.perfetto.dev.
//! - [`dat`]: a trace-cmd .dat file (version 7), for `trace-cmd report` and KernelShark.
//!
//! Both read the raw trace directory a run recorded, never the rendered reports.

pub mod dat;
pub mod perfetto;
