//! Recording: [`tracefs`] owns a private tracefs instance (never the global one) and
//! [`recorder`] drains its per-CPU binary ring buffers into a trace directory
//! (docs/trace-dir.md); [`bpf`] aggregates in the kernel instead (aggregate mode).

pub mod bpf;
pub mod recorder;
pub mod tracefs;
