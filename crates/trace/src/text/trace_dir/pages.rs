//! Ring-buffer pages for one CPU, encoded as the kernel hands them out (docs/ring-buffer.md):
//! a page header (`u64` time of the first event, `u64` commit = data length), then events,
//! each a `u32` header (`type_len` in bits 0..5, `time_delta` in bits 5..32) and its record.
//! A gap too long for 27 bits of delta gets a time-extend event before it, and a gap too
//! long even for that starts a new page, whose header carries the full time.

/// Bytes per page (x86-64), as `header_page` in [`super::formats`] says.
pub(crate) const PAGE_SIZE: usize = 4096;
const HEADER: usize = 16;
const CAPACITY: usize = PAGE_SIZE - HEADER;
const TYPE_LEN_MAX_DATA: usize = 28;
const TYPE_TIME_EXTEND: u32 = 30;
const DELTA_BITS: u32 = 27;
/// A time extend holds `array[0] << 27 | time_delta`: 59 bits.
const EXTEND_LIMIT: u64 = 1 << 59;
/// The largest record a page holds: the data area less a large event's two header words
/// and a time extend.
pub(crate) const MAX_RECORD: usize = CAPACITY - 16;

/// The pages of one CPU, filled in time order.
pub(crate) struct CpuPages {
    page: Vec<u8>,
    /// Data bytes used in `page`; `None` when no page is open.
    used: Option<usize>,
    last_ts: u64,
    /// Complete pages not yet handed to the sink.
    pending: Vec<u8>,
    pub pages: u64,
}

impl CpuPages {
    pub(crate) fn new() -> CpuPages {
        CpuPages {
            page: vec![0; PAGE_SIZE],
            used: None,
            last_ts: 0,
            pending: Vec::new(),
            pages: 0,
        }
    }

    /// The time of the last event written (events must come at or after it).
    pub(crate) fn last_ts(&self) -> u64 {
        self.last_ts
    }

    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Complete pages written since the last call.
    pub(crate) fn take_pending(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }

    /// Appends one record at `ts`, which must not be before [`CpuPages::last_ts`] (it is
    /// raised to it if it is). False when the record is larger than [`MAX_RECORD`].
    pub(crate) fn push(&mut self, ts: u64, record: &[u8]) -> bool {
        if record.len() > MAX_RECORD {
            return false;
        }
        let ts = ts.max(self.last_ts);
        let payload = record.len().div_ceil(4) * 4;
        let event_len = if payload == 0 || payload > TYPE_LEN_MAX_DATA * 4 {
            8 + payload
        } else {
            4 + payload
        };
        let mut delta = ts - self.last_ts;
        if self.used.is_some() && delta >= EXTEND_LIMIT {
            self.close();
        }
        let extend_len = if delta >= 1 << DELTA_BITS { 8 } else { 0 };
        if self
            .used
            .is_some_and(|used| used + extend_len + event_len > CAPACITY)
        {
            self.close();
        }
        let mut used = match self.used {
            Some(used) => used,
            None => {
                self.page.fill(0);
                self.page[..8].copy_from_slice(&ts.to_le_bytes());
                delta = 0;
                0
            }
        };
        let mask = (1u64 << DELTA_BITS) - 1;
        if delta > mask {
            let header = TYPE_TIME_EXTEND | (((delta & mask) as u32) << 5);
            self.put_u32(used, header);
            self.put_u32(used + 4, (delta >> DELTA_BITS) as u32);
            used += 8;
            delta = 0;
        }
        let delta_bits = (delta as u32) << 5;
        if event_len == 4 + payload {
            self.put_u32(used, (payload / 4) as u32 | delta_bits);
            used += 4;
        } else {
            // type_len 0: the length word counts itself (rb_event_data_length).
            self.put_u32(used, delta_bits);
            self.put_u32(used + 4, (payload + 4) as u32);
            used += 8;
        }
        let at = HEADER + used;
        self.page[at..at + record.len()].copy_from_slice(record);
        self.used = Some(used + payload);
        self.last_ts = ts;
        true
    }

    /// Closes the open page, if any, into the pending pages.
    pub(crate) fn close(&mut self) {
        if let Some(used) = self.used.take() {
            self.page[8..16].copy_from_slice(&(used as u64).to_le_bytes());
            self.pending.extend_from_slice(&self.page);
            self.pages += 1;
        }
    }

    fn put_u32(&mut self, data_offset: usize, value: u32) {
        let at = HEADER + data_offset;
        self.page[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::page::{Page, PageLayout};

    fn decode(bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
        bytes
            .chunks(PAGE_SIZE)
            .flat_map(|page| {
                let page = Page::parse(&PageLayout::X86_64, page).unwrap();
                page.records()
                    .map(|r| {
                        let r = r.unwrap();
                        (r.ts, r.payload.to_vec())
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn records_come_back_with_their_times_across_extends_and_pages() {
        let mut cpu = CpuPages::new();
        let mut expected = Vec::new();
        let mut ts = 1_000_000_000u64;
        for i in 0..500usize {
            // Small and large records, short and long gaps, a gap beyond 59 bits once.
            let record: Vec<u8> = (0..(8 + (i * 37) % 300)).map(|b| b as u8).collect();
            ts += match i % 7 {
                0 => 0,
                1 => 5,
                2 => 1 << 27,
                3 => (1 << 40) + 3,
                _ if i == 250 => 1 << 60,
                _ => 1000,
            };
            assert!(cpu.push(ts, &record));
            let padded = record.len().div_ceil(4) * 4;
            let mut stored = record.clone();
            stored.resize(padded, 0);
            expected.push((ts, stored));
        }
        cpu.close();
        let bytes = cpu.take_pending();
        assert_eq!(bytes.len() as u64, cpu.pages * PAGE_SIZE as u64);
        assert!(cpu.pages > 10);
        assert_eq!(decode(&bytes), expected);
    }

    #[test]
    fn too_large_records_are_refused_and_times_never_go_back() {
        let mut cpu = CpuPages::new();
        assert!(!cpu.push(1, &vec![0; MAX_RECORD + 1]));
        assert!(cpu.push(100, &vec![1; MAX_RECORD]));
        assert!(cpu.push(50, &[2; 8]));
        cpu.close();
        let records = decode(&cpu.take_pending());
        assert_eq!(records.len(), 2);
        assert_eq!((records[0].0, records[1].0), (100, 100));
    }
}
