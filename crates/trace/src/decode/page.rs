//! Decoding one ring-buffer page as `per_cpu/cpuN/trace_pipe_raw` hands it out.
//!
//! The format is the kernel's own (kernel/trace/ring_buffer.c), read the way its consuming
//! reader reads it; docs/ring-buffer.md describes it in full. In short:
//!
//! * Page header (`header_page`): `u64 timestamp`, `local_t commit`, then the data. The low
//!   bits of `commit` are the data length; bit 31 (`RB_MISSED_EVENTS`) says events were lost
//!   before this page and bit 30 (`RB_MISSED_STORED`) that their count is stored as an
//!   `unsigned long` right after the data (`ring_buffer_read_page`). Both flags are `int`
//!   constants added to a `long`, so bit 31 arrives sign-extended into bits 32..63.
//! * Each event starts with a u32: `type_len` in bits 0..5, `time_delta` in bits 5..32.
//!   Lengths follow `rb_event_length` / `rb_event_data_length` and the payload position
//!   follows `rb_event_data`:
//!   - `type_len` 1..=28: payload of `type_len * 4` bytes right after the header;
//!   - `type_len` 0: `array[0]` holds the length counted from `array[0]` itself (payload
//!     plus the 4 bytes of `array[0]`), the payload starts at `array[1]`;
//!   - 29, padding: `rb_null_event` (time_delta 0) ends the page's data; otherwise
//!     `array[0] + 4` bytes are skipped (discarded events, the tail of a page);
//!   - 30, time extend: 8 bytes, `array[0] << 27 | time_delta` is added to the time;
//!   - 31, absolute time stamp: 8 bytes, the time becomes `array[0] << 27 | time_delta`,
//!     with the 5 most significant bits restored from the running time (`rb_fix_abs_ts`).
//! * Time: the page timestamp, plus each data event's `time_delta` and each time extend,
//!   exactly as `rb_update_read_stamp` advances `read_stamp`; padding adds nothing.
//!
//! Every length read from the page is checked against the data the page holds: a corrupt
//! page gives a [`PageError`] and decoding of that page stops. Nothing here allocates.

use crate::decode::field::{read_u32, read_u64, read_uint};
use crate::decode::format::HeaderPage;

/// `type_len` values (`header_event`).
const TYPE_LEN_MAX_DATA: u32 = 28;
const TYPE_PADDING: u32 = 29;
const TYPE_TIME_EXTEND: u32 = 30;
const TYPE_TIME_STAMP: u32 = 31;
/// `TS_SHIFT`: time_delta is 27 bits wide.
const TS_SHIFT: u32 = 27;
/// `TS_MSB`: the absolute time stamp event keeps only 59 bits.
const TS_MSB: u64 = 0xf8 << 56;
/// Flags in the page's `commit` word.
const RB_MISSED_EVENTS: u64 = 1 << 31;
const RB_MISSED_STORED: u64 = 1 << 30;
/// The data length is below both flags.
const COMMIT_LENGTH_MASK: u64 = RB_MISSED_STORED - 1;

/// A page, or an event in it, that does not hold together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    #[error("page of {len} bytes is shorter than its {need}-byte header")]
    ShortPage { len: usize, need: usize },
    #[error("commit says {length} data bytes but the page holds {capacity}")]
    CommitBeyondPage { length: usize, capacity: usize },
    #[error("missed-events count at data offset {offset} lies past the page end")]
    MissedCountBeyondPage { offset: usize },
    #[error("event at data offset {offset} needs {need} header bytes, {left} left")]
    TruncatedHeader {
        offset: usize,
        need: usize,
        left: usize,
    },
    #[error("event at data offset {offset} claims {length} bytes, {left} left")]
    EventBeyondData {
        offset: usize,
        length: usize,
        left: usize,
    },
    #[error("event at data offset {offset} has length word {word}, below its own 4 bytes")]
    LengthWordTooSmall { offset: usize, word: u32 },
}

/// Where the header fields of a page are, from `header_page` and the page size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLayout {
    pub page_size: usize,
    pub timestamp_offset: usize,
    pub commit_offset: usize,
    /// Also the size of the stored missed-events count (both are `long`s).
    pub commit_size: usize,
    pub data_offset: usize,
}

impl PageLayout {
    /// The layout of this kernel's x86-64 pages of 4096 bytes.
    pub const X86_64: PageLayout = PageLayout {
        page_size: 4096,
        timestamp_offset: 0,
        commit_offset: 8,
        commit_size: 8,
        data_offset: 16,
    };

    /// A layout from `header_page`; `None` when its fields do not fit a page this size.
    pub fn new(header: &HeaderPage, page_size: usize) -> Option<PageLayout> {
        let layout = PageLayout {
            page_size,
            timestamp_offset: header.timestamp_offset,
            commit_offset: header.commit_offset,
            commit_size: header.commit_size,
            data_offset: header.data_offset,
        };
        let header_end = (header.timestamp_offset.checked_add(8)?)
            .max(header.commit_offset.checked_add(header.commit_size)?);
        (header_end <= header.data_offset && header.data_offset < page_size).then_some(layout)
    }
}

/// Whether, and how many, events the kernel dropped before this page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    None,
    /// `RB_MISSED_EVENTS` without a stored count (the page had no room for it).
    Unknown,
    Count(u64),
}

/// One page's header and the bytes of its event data.
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    pub timestamp: u64,
    pub missed: Missed,
    /// The committed event data (`commit` bytes after the header).
    pub data: &'a [u8],
}

impl<'a> Page<'a> {
    /// Reads the page header and bounds the event data by `commit`.
    pub fn parse(layout: &PageLayout, bytes: &'a [u8]) -> Result<Page<'a>, PageError> {
        let too_short = PageError::ShortPage {
            len: bytes.len(),
            need: layout.data_offset,
        };
        if bytes.len() < layout.data_offset {
            return Err(too_short);
        }
        let timestamp = read_u64(bytes, layout.timestamp_offset).ok_or(too_short.clone())?;
        let commit = read_uint(bytes, layout.commit_offset, layout.commit_size).ok_or(too_short)?;
        let data_area = &bytes[layout.data_offset..];
        let length = (commit & COMMIT_LENGTH_MASK) as usize;
        if length > data_area.len() {
            return Err(PageError::CommitBeyondPage {
                length,
                capacity: data_area.len(),
            });
        }
        let missed = if commit & RB_MISSED_EVENTS == 0 {
            Missed::None
        } else if commit & RB_MISSED_STORED == 0 {
            Missed::Unknown
        } else {
            let count = read_uint(data_area, length, layout.commit_size)
                .ok_or(PageError::MissedCountBeyondPage { offset: length })?;
            Missed::Count(count)
        };
        Ok(Page {
            timestamp,
            missed,
            data: &data_area[..length],
        })
    }

    /// The data events of this page, in order, with their absolute timestamps.
    pub fn records(&self) -> Records<'a> {
        Records {
            data: self.data,
            cursor: RecordCursor::new(self.timestamp),
        }
    }
}

/// A data event's place in the page data: payload bytes `start..end`, time `ts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSpan {
    pub ts: u64,
    pub start: usize,
    pub end: usize,
}

/// The decoding position in one page's data, kept apart from the data so a reader can hold
/// it next to the buffer the page lives in.
#[derive(Debug, Clone, Copy)]
pub struct RecordCursor {
    pos: usize,
    ts: u64,
    done: bool,
}

impl RecordCursor {
    /// A cursor at the start of a page whose header timestamp is `page_ts`.
    pub fn new(page_ts: u64) -> RecordCursor {
        RecordCursor {
            pos: 0,
            ts: page_ts,
            done: false,
        }
    }

    /// A data event of `length` bytes at `offset` whose payload follows a `header`-byte
    /// event header (4, or 8 when the length needed its own word).
    #[inline]
    fn data_record(
        &mut self,
        offset: usize,
        header: usize,
        length: usize,
        left: usize,
        time_delta: u64,
    ) -> Result<RecordSpan, PageError> {
        if length > left {
            return Err(PageError::EventBeyondData {
                offset,
                length,
                left,
            });
        }
        self.pos = offset + length;
        self.ts = self.ts.wrapping_add(time_delta);
        Ok(RecordSpan {
            ts: self.ts,
            start: offset + header,
            end: offset + length,
        })
    }

    /// The next data event of `data` (the page's committed data), or `None` at its end.
    /// After an error the cursor yields nothing more.
    #[inline]
    pub fn next_record(&mut self, data: &[u8]) -> Option<Result<RecordSpan, PageError>> {
        if self.done {
            return None;
        }
        let step = self.step(data);
        if !matches!(step, Some(Ok(_))) {
            self.done = true;
        }
        step
    }

    #[inline]
    fn step(&mut self, data: &[u8]) -> Option<Result<RecordSpan, PageError>> {
        loop {
            let offset = self.pos;
            let left = data.len().saturating_sub(offset);
            if left == 0 {
                return None;
            }
            let truncated = |need| Some(Err(PageError::TruncatedHeader { offset, need, left }));
            let Some(header) = read_u32(data, offset) else {
                return truncated(4);
            };
            let type_len = header & 0x1f;
            let time_delta = (header >> 5) as u64;
            match type_len {
                1..=TYPE_LEN_MAX_DATA => {
                    let length = 4 + 4 * type_len as usize;
                    return Some(self.data_record(offset, 4, length, left, time_delta));
                }
                0 => {
                    let Some(word) = read_u32(data, offset + 4) else {
                        return truncated(8);
                    };
                    // rb_event_data_length: array[0] counts itself, so the event is
                    // array[0] + 4 bytes and the payload starts after array[0].
                    if word < 4 {
                        return Some(Err(PageError::LengthWordTooSmall { offset, word }));
                    }
                    let length = word as usize + 4;
                    return Some(self.data_record(offset, 8, length, left, time_delta));
                }
                TYPE_PADDING => {
                    // rb_null_event: nothing valid follows on this page.
                    if time_delta == 0 {
                        return None;
                    }
                    let Some(word) = read_u32(data, offset + 4) else {
                        return truncated(8);
                    };
                    let length = word as usize + 4;
                    if length > left {
                        return Some(Err(PageError::EventBeyondData {
                            offset,
                            length,
                            left,
                        }));
                    }
                    self.pos = offset + length;
                }
                // The only values left in five bits.
                _ => {
                    debug_assert!(type_len == TYPE_TIME_EXTEND || type_len == TYPE_TIME_STAMP);
                    let Some(word) = read_u32(data, offset + 4) else {
                        return truncated(8);
                    };
                    // rb_event_time_stamp
                    let stamp = ((word as u64) << TS_SHIFT).wrapping_add(time_delta);
                    self.ts = if type_len == TYPE_TIME_EXTEND {
                        self.ts.wrapping_add(stamp)
                    } else {
                        fix_abs_ts(stamp, self.ts)
                    };
                    self.pos = offset + 8;
                }
            }
        }
    }
}

/// `rb_fix_abs_ts`: an absolute stamp has only 59 bits; restore the top five from the
/// previous time, carrying into them if the low bits wrapped.
fn fix_abs_ts(abs: u64, previous: u64) -> u64 {
    if previous & TS_MSB == 0 {
        return abs;
    }
    let fixed = abs | (previous & TS_MSB);
    if fixed < previous {
        fixed.wrapping_add(1 << 59)
    } else {
        fixed
    }
}

/// Iterator over the data events of one [`Page`].
#[derive(Debug, Clone)]
pub struct Records<'a> {
    data: &'a [u8],
    cursor: RecordCursor,
}

/// A data event: its time and payload (the event record, starting at `common_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub ts: u64,
    pub payload: &'a [u8],
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, PageError>;

    fn next(&mut self) -> Option<Self::Item> {
        let data = self.data;
        self.cursor.next_record(data).map(|step| {
            step.map(|span| Record {
                ts: span.ts,
                payload: &data[span.start..span.end],
            })
        })
    }
}

#[cfg(test)]
pub(crate) mod build {
    //! Writes pages the way the kernel does, for tests.

    pub struct PageBuilder {
        pub timestamp: u64,
        pub data: Vec<u8>,
        pub missed: Option<Option<u64>>,
    }

    impl PageBuilder {
        pub fn new(timestamp: u64) -> Self {
            PageBuilder {
                timestamp,
                data: Vec::new(),
                missed: None,
            }
        }

        fn header(&mut self, type_len: u32, delta: u32) {
            assert!(delta < 1 << 27);
            self.data
                .extend_from_slice(&(type_len | delta << 5).to_le_bytes());
        }

        /// A data event as rb_update_event writes it on x86-64.
        pub fn event(&mut self, delta: u32, payload: &[u8]) -> &mut Self {
            let aligned = payload.len().div_ceil(4) * 4;
            if aligned <= 112 && !payload.is_empty() {
                self.header((aligned / 4) as u32, delta);
            } else {
                self.header(0, delta);
                self.data
                    .extend_from_slice(&(aligned as u32 + 4).to_le_bytes());
            }
            self.data.extend_from_slice(payload);
            self.data
                .resize(self.data.len() + aligned - payload.len(), 0);
            self
        }

        pub fn time_extend(&mut self, delta: u64) -> &mut Self {
            self.header(30, (delta & ((1 << 27) - 1)) as u32);
            self.data
                .extend_from_slice(&((delta >> 27) as u32).to_le_bytes());
            self
        }

        pub fn time_stamp(&mut self, abs: u64) -> &mut Self {
            self.header(31, (abs & ((1 << 27) - 1)) as u32);
            self.data
                .extend_from_slice(&((abs >> 27) as u32).to_le_bytes());
            self
        }

        /// Padding whose `array[0]` is `length` (the bytes after the header, itself
        /// included, as rb_event_discard writes it); a null padding when `delta` is 0.
        pub fn padding(&mut self, delta: u32, length: u32) -> &mut Self {
            self.header(29, delta);
            self.data.extend_from_slice(&length.to_le_bytes());
            let filler = (length as usize).saturating_sub(4);
            self.data.resize(self.data.len() + filler, 0xaa);
            self
        }

        pub fn build(&self) -> Vec<u8> {
            let mut page = vec![0u8; 4096];
            page[..8].copy_from_slice(&self.timestamp.to_le_bytes());
            let mut commit = self.data.len() as u64;
            page[16..16 + self.data.len()].copy_from_slice(&self.data);
            match self.missed {
                None => {}
                Some(None) => commit += 0xffff_ffff_8000_0000,
                Some(Some(count)) => {
                    let at = 16 + self.data.len();
                    page[at..at + 8].copy_from_slice(&count.to_le_bytes());
                    commit += 0xffff_ffff_8000_0000 + (1 << 30);
                }
            }
            page[8..16].copy_from_slice(&commit.to_le_bytes());
            page
        }
    }
}

#[cfg(test)]
mod tests {
    use super::build::PageBuilder;
    use super::*;

    type Decoded = Vec<Result<(u64, Vec<u8>), PageError>>;

    fn decode(page: &[u8]) -> (Page<'_>, Decoded) {
        let page = Page::parse(&PageLayout::X86_64, page).unwrap();
        let records = page
            .records()
            .map(|r| r.map(|r| (r.ts, r.payload.to_vec())))
            .collect();
        (page, records)
    }

    #[test]
    fn small_and_large_events_carry_their_payload_and_deltas() {
        let big = vec![7u8; 200];
        let page = PageBuilder::new(1000)
            .event(5, b"abcd")
            .event(10, &big)
            .event(0, b"xy")
            .build();
        let (_, records) = decode(&page);
        assert_eq!(
            records,
            vec![
                Ok((1005, b"abcd".to_vec())),
                Ok((1015, big)),
                Ok((1015, b"xy\0\0".to_vec())),
            ]
        );
    }

    #[test]
    fn time_extend_adds_and_time_stamp_sets_the_time() {
        let extend = (5u64 << 27) + 3;
        let page = PageBuilder::new(1_000)
            .time_extend(extend)
            .event(0, b"aaaa")
            .time_stamp(77_000_000_000)
            .event(2, b"bbbb")
            .build();
        let (_, records) = decode(&page);
        let times: Vec<u64> = records.iter().map(|r| r.as_ref().unwrap().0).collect();
        assert_eq!(times, vec![1_000 + extend, 77_000_000_002]);
    }

    #[test]
    fn absolute_stamps_get_the_top_bits_of_the_running_time() {
        let msb = 0x08u64 << 56;
        assert_eq!(fix_abs_ts(5, 0), 5);
        assert_eq!(fix_abs_ts(100, msb | 50), msb | 100);
        // The low 59 bits wrapped: carry into the top bits.
        assert_eq!(
            fix_abs_ts(10, msb | ((1 << 59) - 5)),
            (msb | 10) + (1 << 59)
        );
    }

    #[test]
    fn padding_is_skipped_and_a_null_padding_ends_the_page() {
        let page = PageBuilder::new(0)
            .event(1, b"aaaa")
            .padding(9, 16)
            .event(1, b"bbbb")
            .padding(0, 0)
            .event(1, b"cccc")
            .build();
        let (_, records) = decode(&page);
        let times: Vec<u64> = records.iter().map(|r| r.as_ref().unwrap().0).collect();
        // Padding (a discarded event) adds no time, as in rb_update_read_stamp.
        assert_eq!(times, vec![1, 2]);
    }

    #[test]
    fn missed_events_flags_and_stored_count() {
        let mut builder = PageBuilder::new(0);
        builder.event(1, b"aaaa");
        builder.missed = Some(Some(12265));
        let page = builder.build();
        let (parsed, records) = decode(&page);
        assert_eq!(parsed.missed, Missed::Count(12265));
        assert_eq!(records.len(), 1);
        builder.missed = Some(None);
        let page = builder.build();
        assert_eq!(decode(&page).0.missed, Missed::Unknown);
    }

    #[test]
    fn corrupt_lengths_are_errors_not_panics() {
        let mut page = PageBuilder::new(0).event(1, &[1u8; 300]).build();
        // Length word claims more than the page data.
        page[20..24].copy_from_slice(&4000u32.to_le_bytes());
        let (_, records) = decode(&page);
        assert!(matches!(
            records[..],
            [Err(PageError::EventBeyondData { .. })]
        ));
        page[20..24].copy_from_slice(&2u32.to_le_bytes());
        let (_, records) = decode(&page);
        assert!(matches!(
            records[..],
            [Err(PageError::LengthWordTooSmall { .. })]
        ));

        let mut page = PageBuilder::new(0).event(1, b"aaaa").build();
        page[8..16].copy_from_slice(&5000u64.to_le_bytes());
        assert!(matches!(
            Page::parse(&PageLayout::X86_64, &page),
            Err(PageError::CommitBeyondPage { .. })
        ));
        assert!(matches!(
            Page::parse(&PageLayout::X86_64, &page[..10]),
            Err(PageError::ShortPage { .. })
        ));
        // A stored count that would lie past the page.
        let mut page = PageBuilder::new(0).build();
        page[8..16].copy_from_slice(&(4080u64 + 0xffff_ffff_c000_0000).to_le_bytes());
        assert!(matches!(
            Page::parse(&PageLayout::X86_64, &page),
            Err(PageError::MissedCountBeyondPage { .. })
        ));
        // Commit ending inside an event header.
        let mut page = PageBuilder::new(0).event(1, b"aaaa").time_extend(1).build();
        page[8..16].copy_from_slice(&14u64.to_le_bytes());
        let (_, records) = decode(&page);
        assert!(matches!(
            records[..],
            [Ok(_), Err(PageError::TruncatedHeader { .. })]
        ));
    }

    #[test]
    fn layout_follows_header_page() {
        let header = HeaderPage {
            timestamp_offset: 0,
            commit_offset: 8,
            commit_size: 8,
            data_offset: 16,
            data_size: 4080,
        };
        assert_eq!(PageLayout::new(&header, 4096), Some(PageLayout::X86_64));
        assert_eq!(PageLayout::new(&header, 16), None);
        let overlapping = HeaderPage {
            data_offset: 12,
            ..header
        };
        assert_eq!(PageLayout::new(&overlapping, 4096), None);
    }
}
