//! Trace text as people paste it, and the trace directory made from it.
//!
//! [`import`] reads the kernel's `trace` file, `trace-cmd report` in its forms, the function
//! and function_graph tracers and systrace, line by line into events, stacks and calls;
//! [`trace_dir`] writes what it reads as a synthetic trace directory (docs/trace-dir.md) that
//! the decoder reads like a recording.

pub mod import;
pub mod trace_dir;
