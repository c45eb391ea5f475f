//! Ring-buffer pages of a big-endian machine, turned into the pages a little-endian kernel
//! would have written, so that the one page decoder and every field reader stay
//! little-endian.
//!
//! A page holds numbers in the recording kernel's byte order: the page header (`u64
//! timestamp`, `local_t commit`, the `unsigned long` missed count), each event header and
//! each field of each record. The event header is a C bitfield (`u32 type_len:5,
//! time_delta:27`), and bitfields are laid out from the most significant bit on big-endian
//! machines: `type_len` is the top five bits of the word there and the bottom five here.
//! Records are converted field by field from their formats: scalars by their size, arrays
//! by element, `__data_loc`/`__rel_loc` words and the elements they point at. Strings and
//! bytes stay as they are, and so do the `__le*`/`__be*` types, whose order is fixed.
//! A record of a type without a format gets only its common fields converted.
//!
//! The conversion goes either way ([`Convert::page`] takes the order it reads), so a test
//! can make a big-endian file out of a little-endian recording and have trace-cmd read it.
//! It never reads outside the page; where the page stops making sense it stops converting
//! and leaves the rest to the page decoder, which reports the page as damaged.

use std::collections::HashMap;
use std::io::Read;

use super::source::Endian;
use crate::decode::catalog::EventCatalog;
use crate::decode::format::{Field, FieldLayout};
use crate::decode::page::PageLayout;

/// `type_len` values with a meaning of their own (header_event).
const TYPE_PADDING: u32 = 29;
const TIME_DELTA_BITS: u32 = 27;
/// The flags in `commit` (see crate::decode::page).
const COMMIT_LENGTH_MASK: u64 = (1 << 30) - 1;
const RB_MISSED_EVENTS: u64 = 1 << 31;
const RB_MISSED_STORED: u64 = 1 << 30;

/// How one field's bytes are converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldSwap {
    /// `count` numbers of `size` bytes from `offset`.
    Numbers {
        offset: usize,
        size: usize,
        count: usize,
    },
    /// A `__data_loc` (or `__rel_loc`) word at `offset`, and the numbers of `size` bytes in
    /// the data it points at.
    Loc {
        offset: usize,
        size: usize,
        relative: bool,
    },
    /// Numbers of `size` bytes from `offset` to the end of the record.
    Rest { offset: usize, size: usize },
}

/// Everything a conversion needs to know about the trace: the page layout and each event
/// type's fields.
#[derive(Debug, Clone)]
pub struct Convert {
    layout: PageLayout,
    common_type_offset: usize,
    common: Vec<FieldSwap>,
    by_id: HashMap<u16, Vec<FieldSwap>>,
}

impl Convert {
    /// The conversion of pages of `layout` whose records are described by `catalog`;
    /// `long_size` is the recording kernel's `long` (header_page's `commit` size).
    pub fn new(layout: PageLayout, catalog: &EventCatalog) -> Convert {
        let long_size = layout.commit_size;
        let common = catalog.common();
        let common_fields: Vec<FieldSwap> = [common.common_type, common.common_pid]
            .iter()
            .filter_map(|field| scalar(field.offset, field.size))
            .collect();
        let by_id = catalog
            .iter()
            .map(|event_type| {
                let swaps = event_type
                    .format
                    .fields
                    .iter()
                    .filter_map(|field| field_swap(field, long_size))
                    .collect();
                (event_type.format.id, swaps)
            })
            .collect();
        Convert {
            layout,
            common_type_offset: common.common_type.offset,
            common: common_fields,
            by_id,
        }
    }

    /// The page size the conversion works in.
    pub fn page_size(&self) -> usize {
        self.layout.page_size
    }

    /// Converts one whole page in place from byte order `from` to the other one.
    pub fn page(&self, page: &mut [u8], from: Endian) {
        let layout = &self.layout;
        if page.len() != layout.page_size {
            return;
        }
        let Some(commit) = read(page, layout.commit_offset, layout.commit_size, from) else {
            return;
        };
        swap(page, layout.timestamp_offset, 8);
        swap(page, layout.commit_offset, layout.commit_size);
        let length = (commit & COMMIT_LENGTH_MASK) as usize;
        let Some(data) = page.get_mut(layout.data_offset..) else {
            return;
        };
        if length > data.len() {
            return;
        }
        if commit & RB_MISSED_EVENTS != 0 && commit & RB_MISSED_STORED != 0 {
            swap(data, length, layout.commit_size);
        }
        self.events(&mut data[..length], from);
    }

    /// Converts the event headers and records of a page's committed data.
    fn events(&self, data: &mut [u8], from: Endian) {
        let mut at = 0;
        while at + 4 <= data.len() {
            let Some(word) = read(data, at, 4, from) else {
                return;
            };
            let word = word as u32;
            let (type_len, delta) = match from {
                Endian::Little => (word & 0x1f, word >> 5),
                Endian::Big => (word >> TIME_DELTA_BITS, word & ((1 << TIME_DELTA_BITS) - 1)),
            };
            let converted = match from {
                Endian::Little => (type_len << TIME_DELTA_BITS | delta).to_be_bytes(),
                Endian::Big => (type_len | delta << 5).to_le_bytes(),
            };
            data[at..at + 4].copy_from_slice(&converted);
            let array = read(data, at + 4, 4, from).map(|w| w as usize);
            let next = match type_len {
                1..=28 => {
                    let end = at + 4 + 4 * type_len as usize;
                    self.record(data.get_mut(at + 4..end), from);
                    end
                }
                0 => {
                    let Some(word) = array.filter(|&w| w >= 4) else {
                        return;
                    };
                    swap(data, at + 4, 4);
                    let end = at + 4 + word;
                    self.record(data.get_mut(at + 8..end), from);
                    end
                }
                TYPE_PADDING if delta == 0 => return,
                TYPE_PADDING => {
                    let Some(word) = array else {
                        return;
                    };
                    swap(data, at + 4, 4);
                    at + 4 + word
                }
                // Time extend and absolute time stamp: one word of time.
                _ => {
                    swap(data, at + 4, 4);
                    at + 8
                }
            };
            if next > data.len() {
                return;
            }
            at = next;
        }
    }

    /// Converts one record's fields; `None` (a record past the data) is left alone.
    fn record(&self, record: Option<&mut [u8]>, from: Endian) {
        let Some(record) = record else {
            return;
        };
        let Some(id) = read(record, self.common_type_offset, 2, from) else {
            return;
        };
        let swaps = self.by_id.get(&(id as u16)).unwrap_or(&self.common);
        for &field in swaps {
            match field {
                FieldSwap::Numbers {
                    offset,
                    size,
                    count,
                } => {
                    for index in 0..count {
                        swap(record, offset + index * size, size);
                    }
                }
                FieldSwap::Loc {
                    offset,
                    size,
                    relative,
                } => {
                    let Some(loc) = read(record, offset, 4, from) else {
                        continue;
                    };
                    swap(record, offset, 4);
                    let mut start = (loc & 0xffff) as usize;
                    if relative {
                        start += offset + 4;
                    }
                    let len = (loc >> 16) as usize;
                    if size > 1 {
                        for index in 0..len / size {
                            swap(record, start + index * size, size);
                        }
                    }
                }
                FieldSwap::Rest { offset, size } => {
                    let len = record.len().saturating_sub(offset);
                    for index in 0..len / size {
                        swap(record, offset + index * size, size);
                    }
                }
            }
        }
    }
}

/// A scalar of `size` bytes, when it has a byte order.
fn scalar(offset: usize, size: usize) -> Option<FieldSwap> {
    matches!(size, 2 | 4 | 8).then_some(FieldSwap::Numbers {
        offset,
        size,
        count: 1,
    })
}

fn field_swap(field: &Field, long_size: usize) -> Option<FieldSwap> {
    let element = element_size(&field.type_text, long_size);
    let bytes = element == Some(1);
    match field.layout {
        // The location word is a u32 whatever the data it points at.
        FieldLayout::DataLoc | FieldLayout::RelLoc => Some(FieldSwap::Loc {
            offset: field.offset,
            // Data of an unknown type is left as it is.
            size: element.filter(|s| matches!(s, 2 | 4 | 8)).unwrap_or(1),
            relative: field.layout == FieldLayout::RelLoc,
        }),
        _ if bytes => None,
        FieldLayout::Scalar => scalar(field.offset, field.size),
        FieldLayout::Array { len } => {
            // The declared length says the element size whatever the type is called.
            let size = match element {
                Some(size) => size,
                None if len > 0 && field.size.is_multiple_of(len) => field.size / len,
                None => return None,
            };
            // `then`, not `then_some`: the count is only computed for a size that passed
            // the check (a format may declare an element of size 0).
            (matches!(size, 2 | 4 | 8) && field.size.is_multiple_of(size)).then(|| {
                FieldSwap::Numbers {
                    offset: field.offset,
                    size,
                    count: field.size / size,
                }
            })
        }
        FieldLayout::Trailing => {
            element
                .filter(|s| matches!(s, 2 | 4 | 8))
                .map(|size| FieldSwap::Rest {
                    offset: field.offset,
                    size,
                })
        }
    }
}

/// The size of one element of a field's C type, when the type says; 1 for bytes, strings
/// and fixed-order (`__le32`, `__be16`) types.
pub fn element_size(type_text: &str, long_size: usize) -> Option<usize> {
    if type_text.contains('*') {
        return Some(long_size);
    }
    let words: Vec<&str> = type_text
        .split(|c: char| c.is_whitespace() || c == '[' || c == ']')
        .filter(|w| {
            !w.is_empty()
                && !matches!(
                    *w,
                    "__data_loc"
                        | "__rel_loc"
                        | "const"
                        | "volatile"
                        | "signed"
                        | "unsigned"
                        | "struct"
                        | "enum"
                )
        })
        .collect();
    let name = match words.as_slice() {
        [] => "int",
        [.., "long", "long"] => "long long",
        [.., last] => last,
    };
    if name.starts_with("__le") || name.starts_with("__be") {
        return Some(1);
    }
    Some(match name {
        "char" | "u8" | "s8" | "__u8" | "__s8" | "bool" | "_Bool" | "uint8_t" | "int8_t" => 1,
        "short" | "u16" | "s16" | "__u16" | "__s16" | "uint16_t" | "int16_t" => 2,
        "int" | "u32" | "s32" | "__u32" | "__s32" | "uint32_t" | "int32_t" | "pid_t" => 4,
        "long long" | "u64" | "s64" | "__u64" | "__s64" | "uint64_t" | "int64_t" => 8,
        "long" | "cpumask_t" | "size_t" | "ssize_t" => long_size,
        _ => return None,
    })
}

/// The number of `size` bytes at `offset`, read in `order`.
fn read(bytes: &[u8], offset: usize, size: usize, order: Endian) -> Option<u64> {
    let b = bytes.get(offset..offset.checked_add(size)?)?;
    Some(match order {
        Endian::Little => b.iter().rev().fold(0u64, |acc, &x| acc << 8 | x as u64),
        Endian::Big => b.iter().fold(0u64, |acc, &x| acc << 8 | x as u64),
    })
}

/// Reverses the `size` bytes at `offset`, when they are inside `bytes`.
fn swap(bytes: &mut [u8], offset: usize, size: usize) {
    if let Some(b) = offset
        .checked_add(size)
        .and_then(|end| bytes.get_mut(offset..end))
    {
        b.reverse();
    }
}

/// A stream of big-endian pages read as little-endian ones, a page at a time. A partial
/// page at the end is handed on as it is (the decoder reports it); errors of the inner
/// stream pass through, and reading may go on after them as the inner stream allows.
pub struct LittleEndianPages<R> {
    inner: R,
    convert: std::sync::Arc<Convert>,
    page: Vec<u8>,
    filled: usize,
    handed: usize,
    /// The page in `page` is whole and converted.
    ready: bool,
}

impl<R: Read> LittleEndianPages<R> {
    pub fn new(inner: R, convert: std::sync::Arc<Convert>) -> LittleEndianPages<R> {
        let size = convert.page_size();
        LittleEndianPages {
            inner,
            convert,
            page: vec![0; size],
            filled: 0,
            handed: 0,
            ready: false,
        }
    }
}

impl<R: Read> Read for LittleEndianPages<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.ready && self.handed == self.filled {
            self.ready = false;
            self.filled = 0;
            self.handed = 0;
        }
        while !self.ready {
            let n = self.inner.read(&mut self.page[self.filled..])?;
            self.filled += n;
            if self.filled == self.page.len() {
                self.convert.page(&mut self.page, Endian::Big);
                self.ready = true;
            } else if n == 0 {
                // The end, inside a page or on its boundary.
                self.ready = true;
            }
        }
        let n = buf.len().min(self.filled - self.handed);
        buf[..n].copy_from_slice(&self.page[self.handed..self.handed + n]);
        self.handed += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_sizes_follow_the_c_type() {
        assert_eq!(element_size("unsigned long", 4), Some(4));
        assert_eq!(element_size("unsigned long", 8), Some(8));
        assert_eq!(element_size("long long", 4), Some(8));
        assert_eq!(element_size("unsigned long long", 4), Some(8));
        assert_eq!(element_size("void *", 4), Some(4));
        assert_eq!(element_size("const char *", 8), Some(8));
        assert_eq!(element_size("__data_loc char[]", 8), Some(1));
        assert_eq!(element_size("__data_loc cpumask_t", 4), Some(4));
        assert_eq!(element_size("__data_loc unsigned long[]", 8), Some(8));
        assert_eq!(element_size("__be32", 8), Some(1));
        assert_eq!(element_size("unsigned int", 8), Some(4));
        assert_eq!(element_size("unsigned", 8), Some(4));
        assert_eq!(element_size("dev_t", 8), None);
    }

    #[test]
    fn an_array_of_pointers_with_a_long_size_of_zero_is_left_alone() {
        // A damaged header can say `long` is 0 bytes: the pointers' element size is then 0,
        // which must not be divided by (found by the dat_reader fuzzer).
        let format = crate::decode::format::EventFormat::parse(
            "name: x\nID: 1\n\tfield:void * ptrs[4];\toffset:8;\tsize:32;\tsigned:0;\n",
        )
        .unwrap();
        assert_eq!(field_swap(&format.fields[0], 0), None);
        assert!(field_swap(&format.fields[0], 8).is_some());
    }

    #[test]
    fn a_string_location_word_is_converted_and_its_bytes_are_not() {
        let field = |text: &str| {
            let format = crate::decode::format::EventFormat::parse(&format!(
                "name: x\nID: 1\n\tfield:{text};\toffset:12;\tsize:4;\tsigned:0;\n"
            ))
            .unwrap();
            field_swap(&format.fields[0], 4)
        };
        assert_eq!(
            field("__data_loc char[] name"),
            Some(FieldSwap::Loc {
                offset: 12,
                size: 1,
                relative: false
            })
        );
        assert_eq!(
            field("__data_loc unsigned long[] mask"),
            Some(FieldSwap::Loc {
                offset: 12,
                size: 4,
                relative: false
            })
        );
        assert_eq!(field("char comm[4]"), None);
        assert_eq!(field("__be32 addr"), None);
    }

    #[test]
    fn event_headers_move_their_bitfields() {
        // type_len 2, time_delta 5, then an 8-byte record whose common_type is 7.
        let layout = PageLayout::X86_64;
        let catalog = EventCatalog::new(Vec::new()).unwrap();
        let convert = Convert::new(layout, &catalog);
        let mut page = vec![0u8; 4096];
        page[..8].copy_from_slice(&1000u64.to_be_bytes());
        page[8..16].copy_from_slice(&12u64.to_be_bytes());
        page[16..20].copy_from_slice(&(2u32 << 27 | 5).to_be_bytes());
        page[20..22].copy_from_slice(&7u16.to_be_bytes());
        page[24..28].copy_from_slice(&42i32.to_be_bytes());
        let original = page.clone();
        convert.page(&mut page, Endian::Big);
        assert_eq!(u64::from_le_bytes(page[..8].try_into().unwrap()), 1000);
        assert_eq!(u64::from_le_bytes(page[8..16].try_into().unwrap()), 12);
        assert_eq!(
            u32::from_le_bytes(page[16..20].try_into().unwrap()),
            2 | 5 << 5
        );
        assert_eq!(u16::from_le_bytes(page[20..22].try_into().unwrap()), 7);
        convert.page(&mut page, Endian::Little);
        assert_eq!(page, original, "the conversion goes both ways");
    }
}
