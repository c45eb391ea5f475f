//! Trace directories written from a few lines of ftrace text, for tests that need an exact
//! sequence of events rather than whatever the kernel happened to do.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};

use vmscale_trace::text::import::TextReader;
use vmscale_trace::text::trace_dir::{write_trace_dir, DirSink};
use vmscale_trace::Decoder;

/// `comm-pid [cpu] secs: event: body`, the kernel's default event line, at `us` µs past
/// second 1000.
pub fn line(comm: &str, pid: i32, cpu: u32, us: u64, event: &str, body: &str) -> String {
    format!("{comm:>16}-{pid:<6} [{cpu:03}] d..2.  1000.{us:06}: {event}: {body}\n")
}

/// The trace time of `us` µs past second 1000.
pub fn ns(us: u64) -> u64 {
    1_000_000_000_000 + us * 1_000
}

/// A trace directory made from ftrace text, removed when dropped.
pub struct TextTraceDir(PathBuf);

impl TextTraceDir {
    /// Writes `text` (every line must be understood) into a directory named after `tag`.
    pub fn new(tag: &str, text: &str) -> TextTraceDir {
        let dir = std::env::temp_dir().join(format!("vmscale-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let removed = TextTraceDir(dir.clone());
        let mut sink = DirSink::new(&dir).unwrap();
        let summary = write_trace_dir(TextReader::new(text.as_bytes()), &mut sink).unwrap();
        assert_eq!(summary.skipped_lines(), 0, "{:?}", summary.warnings());
        removed
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn decoder(&self) -> Decoder {
        Decoder::open(&self.0).unwrap()
    }
}

impl Drop for TextTraceDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
