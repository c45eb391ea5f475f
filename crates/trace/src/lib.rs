//! Kernel tracing for vmscale.
//!
//! Recording side: [`tracefs`] owns a private tracefs instance (never the global one) and
//! [`recorder`] drains its per-CPU binary ring buffers into a trace directory.
//! Decoding side: the trace directory (see docs/trace-dir.md) is decoded into typed,
//! time-ordered events by the decoder modules.

pub mod recorder;
pub mod tracefs;

pub mod catalog;
pub mod clock;
mod cpu_stream;
pub mod dat;
pub mod dat_write;
pub mod decode;
pub mod event;
pub mod field;
pub mod format;
pub mod input;
pub mod kallsyms;
pub mod merge;
pub mod page;
pub mod text_import;
pub mod text_trace_dir;
pub mod views;

pub use catalog::{EventCatalog, EventType};
pub use cpu_stream::{CpuSummary, LossPoint};
pub use decode::{CpuFile, DecodeError, DecodeSummary, Decoder, DirDamage, MetaDamage};
pub use event::Event;
pub use kallsyms::{Kallsyms, Symbol};
pub use merge::EventStream;
pub use views::EventKind;
