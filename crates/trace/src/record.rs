//! Recording: [`tracefs`] owns a private tracefs instance (never the global one) and
//! [`recorder`] drains its per-CPU binary ring buffers into a trace directory
//! (docs/trace-dir.md).

pub mod recorder;
pub mod tracefs;
