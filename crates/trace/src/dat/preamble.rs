//! The first bytes of every .dat file: magic, version, byte order, long size, page size,
//! and in version 7 the compression algorithm and where the first options section is.

use super::compress::Compression;
use super::error::DatError;
use super::source::{Cursor, Endian, Source};

pub(crate) const MAGIC: &[u8] = b"\x17\x08\x44tracing";

/// Which of the two layouts the file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Version 6: fixed order of blocks, options, then the flyrecord table.
    V6,
    /// Version 7: sections placed anywhere, found through options sections.
    V7,
}

#[derive(Debug, Clone)]
pub struct Preamble {
    pub version: u32,
    pub layout: Layout,
    pub endian: Endian,
    /// Size of `long` in the recording machine's user space.
    pub long_size: u8,
    pub page_size: u32,
    /// Version 7 only: the algorithm the compressed sections use (`None` for "none").
    pub compression: Option<Compression>,
    /// Version 7 only: the offset of the first options section.
    pub first_options: u64,
    /// Where the v6 blocks start (just after the page size).
    pub end: u64,
}

impl Preamble {
    pub fn read(source: &Source) -> Result<Preamble, DatError> {
        let mut cursor = Cursor::new(source, 0, Endian::Little);
        let magic = match source.bytes_at("magic", 0, MAGIC.len() as u64) {
            Err(DatError::Truncated { .. }) => return Err(DatError::BadMagic),
            other => other?,
        };
        if magic != MAGIC {
            return Err(DatError::BadMagic);
        }
        cursor.pos = MAGIC.len() as u64;
        let version_text = cursor.c_string("version")?;
        let (version, layout) = match version_text.as_str() {
            "6" => (6, Layout::V6),
            "7" => (7, Layout::V7),
            _ => return Err(DatError::UnsupportedVersion(version_text)),
        };
        cursor.endian = match cursor.u8("endianness")? {
            0 => Endian::Little,
            1 => Endian::Big,
            other => return Err(DatError::BadEndian(other)),
        };
        let long_size = cursor.u8("long size")?;
        if long_size != 4 && long_size != 8 {
            return Err(DatError::BadLongSize(long_size));
        }
        let page_size = cursor.u32("page size")?;
        check_page_size(page_size as u64)?;
        let mut preamble = Preamble {
            version,
            layout,
            endian: cursor.endian,
            long_size,
            page_size,
            compression: None,
            first_options: 0,
            end: cursor.pos,
        };
        if layout == Layout::V7 {
            let name = cursor.c_string("compression name")?;
            let algorithm_version = cursor.c_string("compression version")?;
            preamble.compression = Compression::from_header(&name, &algorithm_version)?;
            preamble.first_options = cursor.u64("options offset")?;
            preamble.end = cursor.pos;
        }
        Ok(preamble)
    }
}

/// Ring-buffer pages are powers of two; anything else means a corrupt header.
pub fn check_page_size(page_size: u64) -> Result<(), DatError> {
    if page_size < 64 || !page_size.is_power_of_two() || page_size > 1 << 30 {
        return Err(DatError::BadPageSize(page_size));
    }
    Ok(())
}
