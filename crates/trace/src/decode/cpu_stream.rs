//! One CPU's pages, read a chunk of pages at a time and decoded a chunk at a time into a
//! [`Batch`] of records.
//!
//! The pages are decoded where they lie in the page cache when the decoder maps them
//! ([`crate::PageAccess::Mapped`], for a `cpu<N>.raw` file of a trace directory or an
//! uncompressed little-endian .dat): a batch is then a window of the mapping, given back
//! once it is used ([`crate::mapped`]). Otherwise they come from a byte stream (a file
//! read as it is, a .dat's compressed chunks decompressed as the stream advances,
//! big-endian pages converted, see `crate::dat`) read a chunk at a time.
//! Memory is a few chunks (those of the batches not yet consumed, and the one being read
//! into), whatever the stream's length.

use std::collections::VecDeque;
use std::io::Read;

use crate::decode::error::DecodeError;
use crate::decode::page::{Missed, Page, PageLayout, RecordCursor};
use crate::mapped::MappedRange;

/// Where one CPU's pages come from.
pub(crate) enum PageInput<'d> {
    /// Read a chunk at a time into the stream's buffer.
    Stream(Box<dyn Read + Send + 'd>),
    /// Decoded where they lie.
    Mapped(MappedRange),
}

/// The first read of a stream: the buffer grows from here (doubling) only while data keeps
/// filling it, so a CPU with little or no data costs little memory.
const FIRST_READ: usize = 4096;

/// Mapped bytes read before they are given back ([`CpuStream::release_to`], and
/// `decode::pipeline`).
pub(crate) const RELEASE_BYTES: usize = 1 << 20;

/// Mapped bytes populated at a time ahead of the decode ([`CpuStream::populate_ahead`]).
const POPULATE_BYTES: usize = 1 << 20;

/// Loss points kept per CPU (all of them are counted).
const KEPT_LOSSES: usize = 256;

/// A page after which the kernel reported lost events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossPoint {
    /// Index of the page in cpu<N>.raw.
    pub page: u64,
    /// The page's base time: the events were lost before it.
    pub ts: u64,
    /// How many, when the kernel could store the count on the page.
    pub missed: Option<u64>,
}

/// What one CPU's file held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuSummary {
    pub cpu: u32,
    pub pages: u64,
    pub events: u64,
    /// Pages whose header or events did not decode (the rest of such a page is skipped).
    pub corrupt_pages: u64,
    /// Pages flagged `RB_MISSED_EVENTS`: the kernel dropped events before them.
    pub pages_after_loss: u64,
    /// Sum of the missed-event counts the kernel stored on those pages.
    pub missed_events: u64,
    /// Where the losses were (the first 256 of them).
    pub losses: Vec<LossPoint>,
    /// Records of `ftrace:kernel_stack` (a stack the kernel recorded after an event).
    pub kernel_stacks: u64,
    /// Compressed chunks of a .dat file's pages that did not decompress and were skipped.
    pub damaged_chunks: u64,
    /// Bytes of pages that never reached the decoder: the stated size of the damaged
    /// chunks, and what the file said was left when the data ended in an error.
    pub lost_bytes: u64,
    /// The first damage this CPU's data had, in words.
    pub first_damage: Option<String>,
    /// The data ended in damage after which its size could not be known.
    pub rest_unknown: bool,
}

/// What every CPU stream of one decode shares.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamSetup {
    pub layout: PageLayout,
    /// Bytes a record needs to hold the common fields.
    pub common_len: usize,
    /// Where a record keeps its type id (2 bytes) and pid (4 bytes).
    pub common_type_offset: usize,
    pub common_pid_offset: usize,
    /// The buffer each stream reads pages into grows up to this many bytes (whole pages).
    pub buffer_bytes: usize,
    /// Bytes of mapped pages one batch covers at most.
    pub mapped_batch_bytes: usize,
    /// The type id of `ftrace:kernel_stack`, when the trace has that format.
    pub stack_id: Option<u16>,
}

struct PageCursor {
    index: u64,
    data_start: usize,
    data_end: usize,
    cursor: RecordCursor,
}

/// One record of a [`Batch`]: its time, where its bytes lie in the batch's buffer, and the
/// two common fields every event carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchRecord {
    pub ts: u64,
    pub start: u32,
    pub end: u32,
    pub pid: i32,
    pub id: u16,
}

/// What one CPU's stream decoded from one fill of its read buffer (or one window of its
/// mapping): the records in page order and the errors met between them. The bytes travel
/// with the records, so a batch can be decoded on one thread and read on another, and
/// handed back to be filled again.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// The bytes the records point into, when they were read.
    pub buf: Vec<u8>,
    /// The bytes the records point into, when they are mapped.
    pub mapped: Option<MappedRange>,
    /// Where those bytes end in the stream's mapping.
    pub mapped_end: usize,
    pub records: Vec<BatchRecord>,
    /// Each error with the number of this batch's records that came before it.
    pub errors: VecDeque<(usize, DecodeError)>,
    /// Nothing follows this batch: the stream ended, or failed.
    pub last: bool,
    /// The stream's summary, in the last batch of a stream decoded on another thread.
    pub summary: Option<Box<CpuSummary>>,
}

impl Batch {
    /// What the records' `start..end` index.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.mapped {
            Some(mapped) => mapped.bytes(),
            None => &self.buf,
        }
    }

    fn is_empty(&self) -> bool {
        self.records.is_empty() && self.errors.is_empty()
    }
}

pub(crate) struct CpuStream<'d> {
    cpu: u32,
    /// Bytes of pages the input should yield, when known (a .dat file says).
    expected: Option<u64>,
    /// Bytes the input yielded or skipped (damaged chunks) so far.
    consumed: u64,
    /// `None` once the stream ended or failed (or from the start, when mapped).
    input: Option<Box<dyn Read + Send + 'd>>,
    /// The pages, when they are mapped: `buf` is then unused, and `filled` and
    /// `next_page_at` are offsets into this.
    mapped: Option<MappedRange>,
    /// Where the part of the mapping given back ends ([`MappedRange::release`]).
    released_to: usize,
    /// Where the part of the mapping populated ahead of the decode ends
    /// ([`MappedRange::populate`]).
    populated_to: usize,
    /// The stream gives back what it has read; off when whoever reads the events after it
    /// does (`decode::pipeline`).
    gives_back: bool,
    /// The mapping has not been taken as read yet (it is, at the first refill).
    mapped_pending: bool,
    /// The mapping is used up (a refill found nothing more).
    mapped_ended: bool,
    /// Where the bytes of the batch being decoded begin (0 when read into `buf`).
    batch_start: usize,
    setup: StreamSetup,
    buf: Vec<u8>,
    filled: usize,
    next_page_at: usize,
    next_page_index: u64,
    page: Option<PageCursor>,
    summary: CpuSummary,
}

impl<'d> CpuStream<'d> {
    pub(crate) fn new(
        input: PageInput<'d>,
        cpu: u32,
        expected: Option<u64>,
        setup: StreamSetup,
    ) -> CpuStream<'d> {
        let (input, mapped) = match input {
            PageInput::Stream(stream) => (Some(stream), None),
            PageInput::Mapped(mapped) => (None, Some(mapped)),
        };
        CpuStream {
            cpu,
            expected,
            consumed: 0,
            input,
            released_to: 0,
            populated_to: 0,
            gives_back: true,
            mapped_pending: mapped.is_some(),
            mapped_ended: false,
            mapped,
            batch_start: 0,
            setup,
            buf: Vec::new(),
            filled: 0,
            next_page_at: 0,
            next_page_index: 0,
            page: None,
            summary: CpuSummary {
                cpu,
                ..CpuSummary::default()
            },
        }
    }

    pub(crate) fn cpu(&self) -> u32 {
        self.cpu
    }

    /// Leaves giving back the mapping to whoever reads the events' bytes later.
    pub(crate) fn keep_pages(&mut self) {
        self.gives_back = false;
    }

    /// All of this CPU's pages, when they are mapped.
    pub(crate) fn mapping(&self) -> Option<&MappedRange> {
        self.mapped.as_ref()
    }

    /// What the pages held so far: up to the end of the last batch filled.
    pub(crate) fn summary(&self) -> &CpuSummary {
        &self.summary
    }

    /// Decodes into `batch` (emptied first) every record up to the point where the read
    /// buffer must be refilled, which would overwrite the records' bytes; the buffer then
    /// moves into the batch and `batch`'s old buffer becomes the stream's. An error for a
    /// corrupt page is noted and decoding goes on with the next page; after a failed read,
    /// or at the end of the input, the batch is the last.
    pub(crate) fn fill(&mut self, batch: &mut Batch) {
        if batch.mapped.take().is_some() {
            // Batches come back in the order they were handed out: everything before
            // this one's end has been read.
            self.release_to(batch.mapped_end);
        }
        batch.records.clear();
        batch.errors.clear();
        batch.last = false;
        batch.summary = None;
        let (common_len, type_offset, pid_offset) = (
            self.setup.common_len,
            self.setup.common_type_offset,
            self.setup.common_pid_offset,
        );
        loop {
            if let Some(page) = &mut self.page {
                let bytes = pages(&self.mapped, &self.buf);
                let data = &bytes[page.data_start..page.data_end];
                // Record offsets count from the batch's first byte.
                let base = page.data_start - self.batch_start;
                let mut failure = None;
                while let Some(step) = page.cursor.next_record(data) {
                    let span = match step {
                        Ok(span) => span,
                        Err(source) => {
                            failure = Some(DecodeError::Page {
                                cpu: self.cpu,
                                page: page.index,
                                source,
                            });
                            break;
                        }
                    };
                    let record = &data[span.start..span.end];
                    if record.len() < common_len {
                        failure = Some(DecodeError::ShortRecord {
                            cpu: self.cpu,
                            page: page.index,
                            offset: span.start,
                            len: record.len(),
                        });
                        break;
                    }
                    // Always there: every record holds the common fields, and the catalog
                    // keeps common_type (2 bytes) and common_pid (4) among them. Read as
                    // one range each, so that each is one load and one bounds check.
                    let id = record
                        .get(type_offset..type_offset + 2)
                        .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
                    let pid = record
                        .get(pid_offset..pid_offset + 4)
                        .map_or(0, |b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    if self.setup.stack_id == Some(id) {
                        self.summary.kernel_stacks += 1;
                    }
                    // Offsets fit u32: the buffer is at most MAX_PAGES_IN_MEMORY bytes.
                    batch.records.push(BatchRecord {
                        ts: span.ts,
                        start: (base + span.start) as u32,
                        end: (base + span.end) as u32,
                        pid,
                        id,
                    });
                }
                self.page = None;
                if let Some(error) = failure {
                    self.summary.corrupt_pages += 1;
                    let error = self.noted(error);
                    batch.errors.push_back((batch.records.len(), error));
                }
            }
            // The next page needs a refill, which would overwrite what the batch's records
            // point into; or, mapped, the batch holds a chunk's worth of pages.
            let needs_refill = self.filled - self.next_page_at < self.setup.layout.page_size;
            let full = self.mapped.is_some()
                && self.next_page_at - self.batch_start >= self.setup.mapped_batch_bytes;
            if (needs_refill || full) && !batch.is_empty() {
                break;
            }
            match self.next_page() {
                Ok(true) => {}
                Ok(false) => {
                    batch.last = true;
                    break;
                }
                Err(error) => {
                    let fatal = error.is_fatal();
                    batch.errors.push_back((batch.records.len(), error));
                    if fatal {
                        batch.last = true;
                        break;
                    }
                }
            }
        }
        self.summary.events += batch.records.len() as u64;
        self.hand_over(batch);
    }

    /// Moves the read buffer into `batch` and takes the batch's old one (at the same
    /// size, so the stream reads as much at a time), with the unread tail copied over.
    fn hand_over(&mut self, batch: &mut Batch) {
        if let Some(mapped) = &self.mapped {
            // In range: batch_start <= next_page_at <= filled <= the mapping's length.
            batch.mapped = mapped.sub(self.batch_start, self.next_page_at);
            batch.mapped_end = self.next_page_at;
            self.batch_start = self.next_page_at;
            return;
        }
        let mut next = std::mem::take(&mut batch.buf);
        next.resize(self.buf.len(), 0);
        let tail = self.filled - self.next_page_at;
        next[..tail].copy_from_slice(&self.buf[self.next_page_at..self.filled]);
        batch.buf = std::mem::replace(&mut self.buf, next);
        self.filled = tail;
        self.next_page_at = 0;
    }

    /// Gives back the mapping up to `end` once a few MiB of it have been read: each release
    /// flushes TLBs on every CPU the process runs on, so it is not done per batch.
    fn release_to(&mut self, end: usize) {
        let Some(mapped) = self.mapped.as_ref().filter(|_| self.gives_back) else {
            return;
        };
        if end.saturating_sub(self.released_to) < RELEASE_BYTES {
            return;
        }
        if let Some(read) = mapped.sub(self.released_to, end) {
            read.release();
        }
        self.released_to = end;
    }

    /// Once the decode needs the mapping up to `to`, maps what it has not yet mapped up to
    /// [`POPULATE_BYTES`] beyond, in one call.
    #[inline]
    fn populate_ahead(&mut self, to: usize) {
        if to <= self.populated_to {
            return;
        }
        let Some(mapped) = &self.mapped else {
            return;
        };
        let end = (to + POPULATE_BYTES).min(mapped.len());
        if let Some(ahead) = mapped.sub(self.populated_to, end) {
            ahead.populate();
        }
        self.populated_to = end;
    }

    /// Loads the next page's header; false at the end of the stream.
    fn next_page(&mut self) -> Result<bool, DecodeError> {
        let layout = self.setup.layout;
        let page_size = layout.page_size;
        if self.filled - self.next_page_at < page_size {
            self.refill()?;
            let left = self.filled - self.next_page_at;
            if left == 0 {
                return Ok(false);
            }
            if left < page_size {
                self.input = None;
                self.next_page_at = self.filled;
                self.summary.lost_bytes = self.summary.lost_bytes.saturating_add(left as u64);
                return Err(self.noted(DecodeError::PartialPage {
                    cpu: self.cpu,
                    bytes: left,
                }));
            }
        }
        let start = self.next_page_at;
        self.populate_ahead(start + page_size);
        let index = self.next_page_index;
        self.next_page_at += page_size;
        self.next_page_index += 1;
        self.summary.pages += 1;
        let bytes = pages(&self.mapped, &self.buf);
        match Page::parse(&layout, &bytes[start..start + page_size]) {
            Ok(page) => {
                let missed = match page.missed {
                    Missed::None => None,
                    Missed::Unknown => Some(None),
                    Missed::Count(count) => Some(Some(count)),
                };
                if let Some(missed) = missed {
                    let summary = &mut self.summary;
                    summary.pages_after_loss += 1;
                    summary.missed_events =
                        summary.missed_events.saturating_add(missed.unwrap_or(0));
                    if summary.losses.len() < KEPT_LOSSES {
                        summary.losses.push(LossPoint {
                            page: index,
                            ts: page.timestamp,
                            missed,
                        });
                    }
                }
                let data_start = start + layout.data_offset;
                self.page = Some(PageCursor {
                    index,
                    data_start,
                    data_end: data_start + page.data.len(),
                    cursor: RecordCursor::new(page.timestamp),
                });
                Ok(true)
            }
            Err(source) => {
                self.summary.corrupt_pages += 1;
                Err(self.noted(DecodeError::Page {
                    cpu: self.cpu,
                    page: index,
                    source,
                }))
            }
        }
    }

    /// Moves the unread tail to the front and reads until the buffer is full or the stream
    /// ends; the buffer grows towards its full size while the data keeps coming.
    fn refill(&mut self) -> Result<(), DecodeError> {
        if let Some(mapped) = &self.mapped {
            // All of it is there at once; the next refill means it is used up.
            if self.mapped_pending {
                self.mapped_pending = false;
                self.filled = mapped.len();
                self.consumed += mapped.len() as u64;
                if self.filled - self.next_page_at >= self.setup.layout.page_size {
                    return Ok(());
                }
            }
            if !self.mapped_ended {
                self.mapped_ended = true;
                self.ended_short();
            }
            return Ok(());
        }
        self.buf.copy_within(self.next_page_at..self.filled, 0);
        self.filled -= self.next_page_at;
        self.next_page_at = 0;
        let full = self.setup.buffer_bytes;
        loop {
            if self.filled == self.buf.len() {
                if self.buf.len() >= full {
                    break;
                }
                let grown = (self.buf.len() * 2).clamp(FIRST_READ.min(full), full);
                self.buf.resize(grown, 0);
            }
            let Some(input) = self.input.as_mut() else {
                break;
            };
            match input.read(&mut self.buf[self.filled..]) {
                Ok(0) => {
                    self.input = None;
                    self.ended_short();
                    break;
                }
                Ok(n) => {
                    self.filled += n;
                    self.consumed += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    let error = self.read_failed(source);
                    return Err(self.noted(error));
                }
            }
        }
        Ok(())
    }

    /// At the end of the input: pages the file lists but does not hold (it was cut short)
    /// are lost.
    fn ended_short(&mut self) {
        let Some(expected) = self.expected else {
            return;
        };
        let missing = expected.saturating_sub(self.consumed);
        if missing == 0 {
            return;
        }
        self.summary.lost_bytes = self.summary.lost_bytes.saturating_add(missing);
        if self.summary.first_damage.is_none() {
            self.summary.first_damage = Some(format!(
                "cpu{}: the file ends {missing} bytes before this CPU's data does",
                self.cpu
            ));
        }
    }

    /// Keeps the first damage of this CPU's data for its summary.
    fn noted(&mut self, error: DecodeError) -> DecodeError {
        if self.summary.first_damage.is_none() {
            self.summary.first_damage = Some(error.to_string());
        }
        error
    }

    /// What a failed read means. A damaged compressed chunk costs its pages and the stream
    /// goes on; any other damage to a .dat file's data costs the rest of this CPU's pages
    /// but not the other CPUs'; only a failed read of the file itself ends the decode.
    fn read_failed(&mut self, source: std::io::Error) -> DecodeError {
        let dat = match source.downcast::<crate::dat::DatError>() {
            Ok(dat) => dat,
            Err(source) => {
                self.input = None;
                return DecodeError::Read {
                    cpu: self.cpu,
                    source,
                };
            }
        };
        match dat {
            crate::dat::DatError::DamagedChunk { size, .. } => {
                self.summary.damaged_chunks += 1;
                self.summary.lost_bytes = self.summary.lost_bytes.saturating_add(size);
                self.consumed = self.consumed.saturating_add(size);
                DecodeError::CpuDataLost {
                    cpu: self.cpu,
                    source: dat,
                    rest_lost: false,
                }
            }
            crate::dat::DatError::Io { .. } => {
                self.input = None;
                DecodeError::Dat(dat)
            }
            dat => {
                self.input = None;
                let left = self.expected.map_or(0, |e| e.saturating_sub(self.consumed));
                self.summary.lost_bytes = self.summary.lost_bytes.saturating_add(left);
                // A chunk header that does not hold together hides the size of the rest.
                self.summary.rest_unknown = left == 0;
                DecodeError::CpuDataLost {
                    cpu: self.cpu,
                    source: dat,
                    rest_lost: true,
                }
            }
        }
    }
}

/// What a stream's offsets index: its mapping, or the buffer it reads into.
#[inline]
fn pages<'a>(mapped: &'a Option<MappedRange>, buf: &'a [u8]) -> &'a [u8] {
    match mapped {
        Some(mapped) => mapped.bytes(),
        None => buf,
    }
}
