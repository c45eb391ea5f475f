//! Reading one field out of an event record, bounds-checked.
//!
//! Records are little-endian (x86-64 and every other machine this tool records on). A field
//! that does not fit inside the record reads as `None`; nothing here panics or allocates.

use crate::decode::format::{Field, FieldLayout};

/// A field resolved once from its format, for cheap reads from many records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldRef {
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
    pub layout: FieldLayout,
}

impl FieldRef {
    pub fn new(field: &Field) -> FieldRef {
        FieldRef {
            offset: field.offset,
            size: field.size,
            signed: field.signed,
            layout: field.layout,
        }
    }

    /// The field as an unsigned integer (scalars of 1, 2, 4 or 8 bytes, zero-extended).
    #[inline]
    pub fn u64(&self, record: &[u8]) -> Option<u64> {
        read_uint(record, self.offset, self.size)
    }

    /// The field as a signed integer (sign-extended from its size).
    #[inline]
    pub fn i64(&self, record: &[u8]) -> Option<i64> {
        read_int(record, self.offset, self.size)
    }

    /// The field's own bytes: the inline bytes of scalars and arrays, the referenced bytes
    /// of `__data_loc`/`__rel_loc` fields, the rest of the record for trailing arrays.
    #[inline]
    pub fn bytes<'r>(&self, record: &'r [u8]) -> Option<&'r [u8]> {
        match self.layout {
            FieldLayout::Scalar | FieldLayout::Array { .. } => {
                record.get(self.offset..self.offset.checked_add(self.size)?)
            }
            FieldLayout::Trailing => record.get(self.offset..),
            FieldLayout::DataLoc | FieldLayout::RelLoc => {
                let loc = read_uint(record, self.offset, 4)? as usize;
                let mut start = loc & 0xffff;
                if self.layout == FieldLayout::RelLoc {
                    start = start.checked_add(self.offset + 4)?;
                }
                let len = loc >> 16;
                record.get(start..start.checked_add(len)?)
            }
        }
    }

    /// A C string field: its bytes up to the first NUL.
    #[inline]
    pub fn c_str<'r>(&self, record: &'r [u8]) -> Option<&'r [u8]> {
        self.bytes(record).map(until_nul)
    }

    /// Element `index` of an integer array field (elements of `element_size` bytes).
    #[inline]
    pub fn element(&self, record: &[u8], element_size: usize, index: usize) -> Option<u64> {
        let bytes = self.bytes(record)?;
        let start = index.checked_mul(element_size)?;
        read_uint(bytes, start, element_size)
    }
}

/// The bytes before the first NUL (all of them when there is none).
#[inline]
pub fn until_nul(bytes: &[u8]) -> &[u8] {
    match bytes.iter().position(|&b| b == 0) {
        Some(end) => &bytes[..end],
        None => bytes,
    }
}

/// An unsigned little-endian integer of 1, 2, 4 or 8 bytes at `offset`.
#[inline(always)]
pub fn read_uint(bytes: &[u8], offset: usize, size: usize) -> Option<u64> {
    let end = offset.checked_add(size)?;
    let b = bytes.get(offset..end)?;
    Some(match size {
        1 => b[0] as u64,
        2 => u16::from_le_bytes([b[0], b[1]]) as u64,
        4 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64,
        8 => u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        _ => return None,
    })
}

/// A signed little-endian integer of 1, 2, 4 or 8 bytes at `offset`, sign-extended.
#[inline(always)]
pub fn read_int(bytes: &[u8], offset: usize, size: usize) -> Option<i64> {
    let raw = read_uint(bytes, offset, size)?;
    let shift = 64 - 8 * size as u32;
    Some(((raw << shift) as i64) >> shift)
}

/// A little-endian u32 at `offset`.
#[inline]
pub fn read_u32(bytes: &[u8], offset: usize) -> Option<u32> {
    let b = bytes.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// A little-endian u64 at `offset`.
#[inline]
pub fn read_u64(bytes: &[u8], offset: usize) -> Option<u64> {
    let b = bytes.get(offset..offset.checked_add(8)?)?;
    Some(u64::from_le_bytes([
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(offset: usize, size: usize, signed: bool, layout: FieldLayout) -> FieldRef {
        FieldRef {
            offset,
            size,
            signed,
            layout,
        }
    }

    #[test]
    fn integers_are_little_endian_and_sign_extended_from_their_size() {
        let record = [0xfe, 0xff, 0xff, 0xff, 0x01, 0x02, 0x03, 0x04, 0x80];
        assert_eq!(read_uint(&record, 0, 4), Some(0xffff_fffe));
        assert_eq!(read_int(&record, 0, 4), Some(-2));
        assert_eq!(read_int(&record, 8, 1), Some(-128));
        assert_eq!(read_uint(&record, 4, 2), Some(0x0201));
        assert_eq!(read_uint(&record, 1, 8), Some(0x8004_0302_01ff_ffff));
        assert_eq!(read_uint(&record, 2, 8), None);
        assert_eq!(read_uint(&record, 0, 3), None);
        assert_eq!(read_uint(&record, usize::MAX, 8), None);
    }

    #[test]
    fn data_loc_points_into_the_record_and_is_bounds_checked() {
        // u32 at 0: offset 8, length 3.
        let mut record = vec![8, 0, 3, 0, 0, 0, 0, 0, b'a', b'b', 0];
        let loc = field(0, 4, false, FieldLayout::DataLoc);
        assert_eq!(loc.bytes(&record), Some(&b"ab\0"[..]));
        assert_eq!(loc.c_str(&record), Some(&b"ab"[..]));
        record[2] = 4; // length past the end
        assert_eq!(loc.bytes(&record), None);
        // __rel_loc: offset counted from the end of the u32 at 0.
        let rel = field(0, 4, false, FieldLayout::RelLoc);
        let record = [4, 0, 2, 0, 0, 0, 0, 0, b'x', b'y'];
        assert_eq!(rel.bytes(&record), Some(&b"xy"[..]));
    }

    #[test]
    fn arrays_and_trailing_arrays() {
        let record = [1, 0, 0, 0, 2, 0, 0, 0, b'h', b'i', 0, b'!'];
        let array = field(0, 8, false, FieldLayout::Array { len: 2 });
        assert_eq!(array.element(&record, 4, 1), Some(2));
        assert_eq!(array.element(&record, 4, 2), None);
        let trailing = field(8, 0, false, FieldLayout::Trailing);
        assert_eq!(trailing.c_str(&record), Some(&b"hi"[..]));
        let past_end = field(13, 0, false, FieldLayout::Trailing);
        assert_eq!(past_end.bytes(&record), None);
    }
}
