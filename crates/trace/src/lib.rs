//! Kernel tracing for vmscale, in four rooms and a door:
//!
//! - [`record`]: a private tracefs instance (never the global one) and the recorder that
//!   drains its per-CPU binary ring buffers into a trace directory (docs/trace-dir.md);
//! - [`decode`]: event formats, ring-buffer pages, per-CPU streams merged into one
//!   time-ordered stream of typed events, with the catalog, clocks and kallsyms they need;
//! - [`dat`]: trace-cmd's .dat files, read in place or extracted, and written;
//! - [`text`]: ftrace and trace-cmd text, parsed, and the synthetic trace directory made
//!   from it;
//! - [`input`]: what is this file? (a run directory, a trace directory, a run.json, a .dat
//!   or text), told by content.
//!
//! Each room's errors live in the room: `record::tracefs::Error`, `decode::error`
//! (with the format, page, catalog and kallsyms errors in their own modules), `dat::DatError`
//! and `dat::write::DatWriteError`, `text::import::SkipReason` and `text::trace_dir::TextDirError`.

pub mod dat;
pub mod decode;
pub mod input;
pub mod mapped;
pub mod record;
pub mod text;

pub use decode::catalog::{EventCatalog, EventType};
pub use decode::event::Event;
pub use decode::kallsyms::{Kallsyms, Symbol};
pub use decode::merge::EventStream;
pub use decode::views::{EventKind, ViewTag};
pub use decode::{CpuFile, DecodeError, DecodeSummary, Decoder, DirDamage, MetaDamage, PageAccess};
pub use decode::{CpuSummary, LossPoint, PrintkStrings};
