//! A trace directory (docs/trace-dir.md) made from ftrace text, so that text goes through the
//! same decoder and analyses as a recording.
//!
//! The events the analyses read (lock contention, scheduler switches and wakeups, IPIs,
//! cross-CPU calls, raw syscalls, markers) and every `<stack trace>` are written as records
//! in formats of vmscale's choosing (`formats.rs`), in ring-buffer pages per CPU (`pages.rs`);
//! the symbols the text names get addresses and a kallsyms file (`symbols.rs`). Events of
//! other types are counted, function_graph calls are summarised (count and slowest calls),
//! function tracer calls are counted by function, and everything skipped is tallied by
//! reason ([`TextDirSummary`]).
//!
//! Times keep the text's order: events printed with the same microsecond get nanosecond
//! steps in text order (the kernel printed them in time order; the decoder's merge would
//! otherwise order them by CPU), and an event earlier than the one before it on its CPU is
//! moved up to it.
//!
//! Memory: one page per CPU plus pages awaiting the sink (at most [`FLUSH_BYTES`] in all),
//! the symbol table, and the summary's bounded tallies; the text is streamed.

mod formats;
mod pages;
mod records;
mod summary;
mod symbols;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub use summary::{SkipTally, TextDirSummary, SLOWEST_CALLS};
pub use symbols::MAX_SYMBOLS;

use crate::record::recorder::{LostEvents, TraceMeta};
use crate::text::import::{Item, Reject, SkipReason, TextClock, TextEvent, TextStack};
use pages::CpuPages;
use symbols::Symbols;

/// Complete pages held for all CPUs before they go to the sink.
pub const FLUSH_BYTES: usize = 1 << 20;

/// Where the files of the trace directory go, by path relative to the directory.
pub trait Sink {
    /// Creates or replaces a file.
    fn write(&mut self, name: &str, bytes: &[u8]) -> io::Result<()>;
    /// Appends to a file, creating it.
    fn append(&mut self, name: &str, bytes: &[u8]) -> io::Result<()>;
}

/// Files under a directory on disk.
pub struct DirSink {
    root: PathBuf,
}

impl DirSink {
    /// A sink into `root`, which must not exist or be empty (leftovers of another trace
    /// would be read as this one's).
    pub fn new(root: &Path) -> Result<DirSink, TextDirError> {
        let io = |source| TextDirError {
            path: root.to_path_buf(),
            source,
        };
        if std::fs::read_dir(root).is_ok_and(|mut entries| entries.next().is_some()) {
            return Err(io(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the directory is not empty",
            )));
        }
        std::fs::create_dir_all(root).map_err(io)?;
        Ok(DirSink {
            root: root.to_path_buf(),
        })
    }

    fn path(&self, name: &str) -> io::Result<PathBuf> {
        let path = self.root.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        Ok(path)
    }
}

impl Sink for DirSink {
    fn write(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        std::fs::write(self.path(name)?, bytes)
    }

    fn append(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path(name)?)?
            .write_all(bytes)
    }
}

/// Files in memory, for tests and fuzzing.
#[derive(Debug, Default)]
pub struct MemorySink {
    pub files: BTreeMap<String, Vec<u8>>,
}

impl Sink for MemorySink {
    fn write(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.files.insert(name.to_string(), bytes.to_vec());
        Ok(())
    }

    fn append(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.files
            .entry(name.to_string())
            .or_default()
            .extend_from_slice(bytes);
        Ok(())
    }
}

/// A file of the trace directory could not be written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct TextDirError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// The page size of the pages written (the x86-64 page).
pub const PAGE_SIZE: usize = pages::PAGE_SIZE;

/// Writes the trace directory of `items` (from [`crate::text::import::TextReader`]) into
/// `sink` and says what it holds.
pub fn write_trace_dir(
    items: impl Iterator<Item = Item>,
    sink: &mut dyn Sink,
) -> Result<TextDirSummary, TextDirError> {
    let mut writer = Writer {
        sink,
        cpus: BTreeMap::new(),
        pending: 0,
        symbols: Symbols::default(),
        summary: TextDirSummary::default(),
        last_ts: None,
        lost: BTreeMap::new(),
    };
    for item in items {
        writer.item(item)?;
    }
    writer.finish()
}

struct Writer<'s> {
    sink: &'s mut dyn Sink,
    cpus: BTreeMap<u32, CpuPages>,
    /// Bytes of complete pages held in `cpus`.
    pending: usize,
    symbols: Symbols,
    summary: TextDirSummary,
    /// The time given to the previous event in text order.
    last_ts: Option<u64>,
    lost: BTreeMap<u32, u64>,
}

impl Writer<'_> {
    fn item(&mut self, item: Item) -> Result<(), TextDirError> {
        match item {
            Item::Event(event) => self.event(&event),
            Item::Stack(stack) => self.stack(&stack),
            Item::Call(call) => {
                self.summary.call(call);
                Ok(())
            }
            Item::Lost(lost) => {
                self.summary.last_line = self.summary.last_line.max(lost.line);
                self.summary.saw_cpu(lost.cpu);
                let total = self.lost.entry(lost.cpu).or_default();
                *total = total.saturating_add(lost.events);
                Ok(())
            }
            Item::Skipped(skipped) => {
                self.summary.skip(&skipped);
                Ok(())
            }
        }
    }

    fn event(&mut self, event: &TextEvent) -> Result<(), TextDirError> {
        self.summary.last_line = self.summary.last_line.max(event.line);
        self.summary.saw_cpu(event.cpu);
        // No analysis reads single calls without durations; they are counted by function.
        if event.name == "function" {
            self.summary.function(event.field("ip").unwrap_or("?"));
            return Ok(());
        }
        match records::event_record(event, &mut self.symbols) {
            Ok(Some((kind, record))) => {
                let def = kind.def();
                let ts = self.time(event.ts_ns, event.clock);
                if self.record(event.cpu, ts, &record, event.line, &event.name)? {
                    *self
                        .summary
                        .events
                        .entry(format!("{}:{}", def.system, def.name))
                        .or_default() += 1;
                }
            }
            Ok(None) => self.summary.unconverted(&event.name),
            Err(field) => self.summary.skip(
                &Reject::new(SkipReason::Field, &format!("{}: {field}", event.name)).at(event.line),
            ),
        }
        Ok(())
    }

    fn stack(&mut self, stack: &TextStack) -> Result<(), TextDirError> {
        self.summary.last_line = self.summary.last_line.max(stack.line);
        self.summary.saw_cpu(stack.cpu);
        // A raw stack's `size=` is the text's claim: the sum must not overflow on it.
        self.summary.dropped_frames = self
            .summary
            .dropped_frames
            .saturating_add(stack.dropped_frames as u64);
        self.summary.frames_without_offset += stack
            .frames
            .iter()
            .filter(|frame| !frame.contains('+') && !frame.starts_with("0x"))
            .count() as u64;
        let record = records::stack_record(stack, &mut self.symbols);
        let ts = self.time(stack.ts_ns, stack.clock);
        if self.record(stack.cpu, ts, &record, stack.line, "<stack trace>")? {
            self.summary.stacks += 1;
        }
        Ok(())
    }

    /// The time an item gets: the text's, stepped a nanosecond past the previous item's
    /// when both were printed in the same microsecond (so the decoder keeps text order).
    fn time(&mut self, ts: u64, clock: TextClock) -> u64 {
        self.summary.clocks.insert(clock);
        let printed_in_us = match clock {
            TextClock::Absolute { resolution_ns } => resolution_ns >= 1000,
            TextClock::SinceStart => true,
            TextClock::Counter => false,
        };
        let ts = match self.last_ts {
            Some(last) if printed_in_us && ts / 1000 == last / 1000 && ts <= last => last
                .saturating_add(1)
                .min((ts / 1000 * 1000).saturating_add(999)),
            _ => ts,
        };
        self.last_ts = Some(self.last_ts.map_or(ts, |last| last.max(ts)));
        ts
    }

    /// Writes one record on `cpu`; false (and tallied as skipped) when it does not fit a page.
    fn record(
        &mut self,
        cpu: u32,
        ts: u64,
        record: &[u8],
        line: usize,
        name: &str,
    ) -> Result<bool, TextDirError> {
        let pages = self.cpus.entry(cpu).or_insert_with(CpuPages::new);
        if ts < pages.last_ts() {
            self.summary.reordered += 1;
        }
        let before = pages.pending_len();
        if !pages.push(ts, record) {
            self.summary.skip(
                &Reject::new(
                    SkipReason::TooLarge,
                    &format!("{name}: {} bytes", record.len()),
                )
                .at(line),
            );
            return Ok(false);
        }
        self.pending += pages.pending_len() - before;
        if self.pending > FLUSH_BYTES {
            self.flush()?;
        }
        Ok(true)
    }

    fn flush(&mut self) -> Result<(), TextDirError> {
        for (cpu, pages) in &mut self.cpus {
            let bytes = pages.take_pending();
            if !bytes.is_empty() {
                let name = format!("cpu{cpu}.raw");
                self.sink
                    .append(&name, &bytes)
                    .map_err(|source| TextDirError {
                        path: PathBuf::from(name),
                        source,
                    })?;
            }
        }
        self.pending = 0;
        Ok(())
    }

    fn put(&mut self, name: &str, bytes: &[u8]) -> Result<(), TextDirError> {
        self.sink.write(name, bytes).map_err(|source| TextDirError {
            path: PathBuf::from(name),
            source,
        })
    }

    fn finish(mut self) -> Result<TextDirSummary, TextDirError> {
        for pages in self.cpus.values_mut() {
            pages.close();
        }
        // A CPU of the text with only events too large for a page still gets its file.
        for cpu in self.cpus.keys() {
            self.sink
                .append(&format!("cpu{cpu}.raw"), &[])
                .map_err(|source| TextDirError {
                    path: PathBuf::from(format!("cpu{cpu}.raw")),
                    source,
                })?;
        }
        self.flush()?;
        for def in formats::EVENTS {
            let name = format!("formats/{}/{}", def.system, def.name);
            self.put(&name, formats::format_text(def).as_bytes())?;
        }
        self.put("header_page", formats::HEADER_PAGE.as_bytes())?;
        self.put("header_event", formats::HEADER_EVENT.as_bytes())?;
        self.put("kallsyms", self.symbols.kallsyms().as_bytes())?;
        self.put(
            crate::decode::PRINTK_FORMATS_FILE,
            self.symbols.printk_formats().as_bytes(),
        )?;

        let cpus: Vec<u32> = self.cpus.keys().copied().collect();
        let events: BTreeSet<String> = self
            .summary
            .events
            .keys()
            .filter(|name| *name != "ftrace:print")
            .cloned()
            .collect();
        let meta = TraceMeta {
            page_size: PAGE_SIZE,
            cpus: cpus.clone(),
            clock: "text".to_string(),
            events: events.into_iter().collect(),
            stacks: self.summary.stacks > 0,
            buffer_kib: 0,
            lost: cpus
                .iter()
                .chain(self.lost.keys())
                .map(|cpu| {
                    let lost = LostEvents {
                        overrun: self.lost.get(cpu).copied().unwrap_or(0),
                        ..LostEvents::default()
                    };
                    (cpu.to_string(), lost)
                })
                .collect(),
            started_ns: 0,
            stopped_ns: 0,
            windows: Vec::new(),
            pages: self
                .cpus
                .iter()
                .map(|(cpu, pages)| (cpu.to_string(), pages.pages))
                .collect(),
        };
        let json = serde_json::to_vec_pretty(&meta).map_err(|e| TextDirError {
            path: PathBuf::from("meta.json"),
            source: io::Error::other(e),
        })?;
        self.put("meta.json", &json)?;

        self.summary.cpus = cpus;
        self.summary.lost = self.lost;
        self.summary.symbols = self.symbols.len();
        self.summary.symbols_dropped = self.symbols.dropped;
        Ok(self.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::import::TextReader;

    #[test]
    fn a_small_text_becomes_a_directory_the_decoder_reads() {
        let text = "\
# tracer: nop
  bash-7 [001] d..3. 10.000001: contention_begin: ffff888100000000 (flags=MUTEX)
  bash-7 [001] d..3. 10.000001: <stack trace>
 => __mutex_lock.constprop.0+0x1/0x10
 => anon_pipe_write+0x2/0x20
  head-8 [000] d..2. 10.000001: sched_waking: comm=bash pid=7 prio=120 target_cpu=001
  bash-7 [001] d..3. 10.000005: contention_end: ffff888100000000 (ret=0)
  bash-7 [001] d..3. 10.000005: irq_handler_entry: irq=1 name=x
  bash-7 [001] d..3. 10.000005: contention_end: nonsense
";
        let mut sink = MemorySink::default();
        let summary = write_trace_dir(TextReader::new(text.as_bytes()), &mut sink).unwrap();
        assert_eq!(summary.converted_events(), 3);
        assert_eq!(summary.stacks, 1);
        assert_eq!(summary.cpus, [0, 1]);
        assert_eq!(summary.unconverted["irq_handler_entry"], 1);
        assert_eq!(summary.skipped[&SkipReason::Body].first_lines, [9]);
        assert_eq!(summary.last_line, 9);
        assert!(
            summary.warnings()[0].contains("1 us"),
            "{:?}",
            summary.warnings()
        );
        for name in [
            "meta.json",
            "header_page",
            "header_event",
            "kallsyms",
            "cpu0.raw",
        ] {
            assert!(sink.files.contains_key(name), "{name}");
        }
        assert_eq!(sink.files["cpu1.raw"].len(), PAGE_SIZE);
    }

    #[test]
    fn the_largest_time_a_text_can_print_does_not_overflow() {
        let text = "\
  a-1 [000] ..... 18446744073.709551: tracing_mark_write: x
  a-1 [000] ..... 18446744073.709551: tracing_mark_write: y
  a-1 [000] ..... 18446744073.709551615: tracing_mark_write: z
  a-1 [000] ..... 18446744073.709551615: tracing_mark_write: z
";
        let mut sink = MemorySink::default();
        let summary = write_trace_dir(TextReader::new(text.as_bytes()), &mut sink).unwrap();
        assert_eq!(summary.converted_events(), 4);
    }
}
