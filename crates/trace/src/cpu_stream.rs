//! One CPU's pages, read a chunk of pages at a time and decoded record by record.
//!
//! The pages come from any byte stream: a `cpu<N>.raw` file of a trace directory, a range
//! of a .dat file, or a .dat's compressed chunks decompressed as the stream advances
//! (`crate::dat`). Memory is one chunk buffer, whatever the stream's length.

use std::io::Read;

use crate::catalog::EventCatalog;
use crate::decode::DecodeError;
use crate::event::Event;
use crate::field::read_uint;
use crate::page::{Missed, Page, PageLayout, RecordCursor, RecordSpan};

/// The first read of a stream: the buffer grows from here (doubling) only while data keeps
/// filling it, so a CPU with little or no data costs little memory.
const FIRST_READ: usize = 4096;

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
    /// Where a record keeps its type id.
    pub common_type_offset: usize,
    /// The buffer each stream reads pages into grows up to this many bytes (whole pages).
    pub buffer_bytes: usize,
    /// The type id of `ftrace:kernel_stack`, when the trace has that format.
    pub stack_id: Option<u16>,
}

struct PageCursor {
    index: u64,
    data_start: usize,
    data_end: usize,
    cursor: RecordCursor,
}

pub(crate) struct CpuStream<'d> {
    cpu: u32,
    /// Bytes of pages the input should yield, when known (a .dat file says).
    expected: Option<u64>,
    /// Bytes the input yielded or skipped (damaged chunks) so far.
    consumed: u64,
    /// `None` once the stream ended or failed.
    input: Option<Box<dyn Read + Send + 'd>>,
    setup: StreamSetup,
    buf: Vec<u8>,
    filled: usize,
    next_page_at: usize,
    next_page_index: u64,
    page: Option<PageCursor>,
    /// The record the stream stands on: payload `start..end` of `buf`.
    current: RecordSpan,
    summary: CpuSummary,
}

impl<'d> CpuStream<'d> {
    pub(crate) fn new(
        input: Box<dyn Read + Send + 'd>,
        cpu: u32,
        expected: Option<u64>,
        setup: StreamSetup,
    ) -> CpuStream<'d> {
        CpuStream {
            cpu,
            expected,
            consumed: 0,
            input: Some(input),
            setup,
            buf: Vec::new(),
            filled: 0,
            next_page_at: 0,
            next_page_index: 0,
            page: None,
            current: RecordSpan {
                ts: 0,
                start: 0,
                end: 0,
            },
            summary: CpuSummary {
                cpu,
                ..CpuSummary::default()
            },
        }
    }

    pub(crate) fn summary(&self) -> &CpuSummary {
        &self.summary
    }

    /// Time of the record the stream stands on.
    #[inline]
    pub(crate) fn ts(&self) -> u64 {
        self.current.ts
    }

    /// The record the stream stands on (after `advance` returned `Some(Ok(()))`).
    #[inline]
    pub(crate) fn event<'a>(&'a self, catalog: &'a EventCatalog) -> Event<'a> {
        let record = &self.buf[self.current.start..self.current.end];
        let common = catalog.common();
        // advance() checked the record holds the common fields.
        let id = read_uint(record, common.common_type.offset, 2).unwrap_or(0) as u16;
        let pid = read_uint(record, common.common_pid.offset, 4).unwrap_or(0) as u32 as i32;
        Event::new(
            self.current.ts,
            self.cpu,
            pid,
            id,
            record,
            catalog.get_or_unknown(id),
        )
    }

    /// Moves to the next record. `None` at the end of the file; an error for a corrupt page
    /// (the stream goes on with the next page) or a failed read (the stream ends).
    #[inline]
    pub(crate) fn advance(&mut self) -> Option<Result<(), DecodeError>> {
        loop {
            if let Some(page) = &mut self.page {
                let data = &self.buf[page.data_start..page.data_end];
                match page.cursor.next_record(data) {
                    Some(Ok(span)) => {
                        if span.end - span.start < self.setup.common_len {
                            let error = DecodeError::ShortRecord {
                                cpu: self.cpu,
                                page: page.index,
                                offset: span.start,
                                len: span.end - span.start,
                            };
                            self.page = None;
                            self.summary.corrupt_pages += 1;
                            return Some(Err(self.noted(error)));
                        }
                        self.current = RecordSpan {
                            ts: span.ts,
                            start: page.data_start + span.start,
                            end: page.data_start + span.end,
                        };
                        self.summary.events += 1;
                        if let Some(stack_id) = self.setup.stack_id {
                            let at = self.current.start + self.setup.common_type_offset;
                            if self.buf.get(at..at + 2) == Some(&stack_id.to_le_bytes()[..]) {
                                self.summary.kernel_stacks += 1;
                            }
                        }
                        return Some(Ok(()));
                    }
                    Some(Err(source)) => {
                        let error = DecodeError::Page {
                            cpu: self.cpu,
                            page: page.index,
                            source,
                        };
                        self.page = None;
                        self.summary.corrupt_pages += 1;
                        return Some(Err(self.noted(error)));
                    }
                    None => self.page = None,
                }
            }
            match self.next_page() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(error) => return Some(Err(error)),
            }
        }
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
        let index = self.next_page_index;
        self.next_page_at += page_size;
        self.next_page_index += 1;
        self.summary.pages += 1;
        match Page::parse(&layout, &self.buf[start..start + page_size]) {
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
