//! Kernel tracing for vmscale.
//!
//! Recording side: [`tracefs`] owns a private tracefs instance (never the global one) and
//! [`recorder`] drains its per-CPU binary ring buffers into a trace directory.
//! Decoding side: the trace directory (see docs/trace-dir.md) is decoded into typed,
//! time-ordered events by the decoder modules.

pub mod recorder;
pub mod tracefs;
