//! Version 7 (trace-cmd.dat.v7(5)): sections anywhere in the file, each with a 16-byte
//! header, found through a chain of options sections that starts at the offset in the
//! preamble.

use std::collections::HashSet;

use super::buffer::{Buffer, CpuData};
use super::compress;
use super::error::DatError;
use super::metadata::Metadata;
use super::options::{self, Options};
use super::preamble::{Layout, Preamble};
use super::source::{Cursor, Slice, Source};
use super::Contents;

/// Section flag: the section's data is compressed.
pub(crate) const FLAG_COMPRESSED: u16 = 1;

/// A section header: u16 id, u16 flags, u32 description (a string id), u64 size.
struct SectionHeader {
    id: u16,
    flags: u16,
    size: u64,
    /// Where the section's data starts.
    data: u64,
}

fn read_header(
    source: &Source,
    offset: u64,
    preamble: &Preamble,
) -> Result<SectionHeader, DatError> {
    let mut cursor = Cursor::new(source, offset, preamble.endian);
    let id = cursor.u16("section id")?;
    let flags = cursor.u16("section flags")?;
    cursor.u32("section description")?;
    let size = cursor.u64("section size")?;
    Ok(SectionHeader {
        id,
        flags,
        size,
        data: cursor.pos,
    })
}

/// Where a section's bytes in memory came from, to name the real offset of an error in
/// them: a copy of the file from `File(offset)` on, or the decompressed data of the block
/// whose compressed bytes start at `Decompressed(offset)`.
#[derive(Debug, Clone, Copy)]
enum Origin {
    File(u64),
    Decompressed(u64),
}

impl Origin {
    /// `e`, found reading the section's bytes in memory (offsets from 0), with its offsets
    /// made the file's where they are file offsets, or said to be in the decompressed data.
    fn locate(self, e: DatError) -> DatError {
        match self {
            Origin::File(base) => shift(e, base),
            Origin::Decompressed(section) => DatError::InSection {
                section,
                inner: Box::new(e),
            },
        }
    }
}

/// `e` with every file offset it names moved by `base`.
fn shift(e: DatError, base: u64) -> DatError {
    match e {
        DatError::Truncated {
            what,
            offset,
            len,
            end,
        } => DatError::Truncated {
            what,
            offset: offset + base,
            len,
            end: end + base,
        },
        DatError::Unterminated { what, offset } => DatError::Unterminated {
            what,
            offset: offset + base,
        },
        DatError::MissingTag { what, offset } => DatError::MissingTag {
            what,
            offset: offset + base,
        },
        DatError::Decompress {
            what,
            algorithm,
            offset,
        } => DatError::Decompress {
            what,
            algorithm,
            offset: offset + base,
        },
        DatError::Checksum { what, offset } => DatError::Checksum {
            what,
            offset: offset + base,
        },
        other => other,
    }
}

/// The section at `offset`, which must have id `expected`, as bytes in memory
/// (decompressed if it is compressed), and where they came from.
fn read_section(
    source: &Source,
    offset: u64,
    expected: u16,
    preamble: &Preamble,
    what: &'static str,
) -> Result<(Source, Origin), DatError> {
    let header = read_header(source, offset, preamble)?;
    if header.id != expected {
        return Err(DatError::SectionId {
            offset,
            found: header.id,
            expected,
        });
    }
    let raw = Source::Memory(source.bytes_at(what, header.data, header.size)?);
    if header.flags & FLAG_COMPRESSED == 0 {
        return Ok((raw, Origin::File(header.data)));
    }
    let compression = preamble
        .compression
        .as_ref()
        .ok_or(DatError::CompressedWithoutAlgorithm { what })?;
    // The block must lie inside the section: read it from the section's bytes, and name
    // the file's offsets in what goes wrong.
    let mut cursor = Cursor::new(&raw, 0, preamble.endian);
    let bytes = compress::read_block(&mut cursor, compression.algorithm, what)
        .map_err(|e| shift(e, header.data))?;
    // The compressed data starts after its two sizes.
    Ok((Source::Memory(bytes), Origin::Decompressed(header.data + 8)))
}

pub fn read(source: &Source, preamble: &Preamble) -> Result<Contents, DatError> {
    let options = read_options_chain(source, preamble)?;
    if options.latency && options.buffers.is_empty() {
        return Err(DatError::LatencyTrace);
    }

    let mut metadata = Metadata::default();
    for &(id, offset) in &options.sections {
        let read: fn(&mut Metadata, &mut Cursor<'_>) -> Result<(), DatError> = match id {
            options::HEADER_INFO => Metadata::read_header_info,
            options::FTRACE_EVENTS => Metadata::read_ftrace_formats,
            options::EVENT_FORMATS => Metadata::read_event_formats,
            options::KALLSYMS => Metadata::read_kallsyms,
            options::PRINTK => Metadata::read_printk_formats,
            options::CMDLINES => Metadata::read_cmdlines,
            // BTF and modules: not needed to decode the ring buffer.
            _ => continue,
        };
        let (section, origin) = read_section(source, offset, id, preamble, "metadata section")?;
        let mut cursor = Cursor::new(&section, 0, preamble.endian);
        read(&mut metadata, &mut cursor).map_err(|e| origin.locate(e))?;
    }

    let mut buffers = Vec::new();
    for option in &options.buffers {
        buffers.push(read_buffer(source, option, preamble)?);
    }
    let highest_cpu = buffers
        .iter()
        .flat_map(|b| &b.cpus)
        .map(|c| c.cpu + 1)
        .max();
    let cpu_count = options.cpu_count.or(highest_cpu).unwrap_or(0);
    Ok(Contents {
        metadata,
        cpu_count,
        options,
        buffers,
    })
}

/// Follows the DONE options' next-section offsets until one is 0.
fn read_options_chain(source: &Source, preamble: &Preamble) -> Result<Options, DatError> {
    let mut options = Options::default();
    let mut seen = HashSet::new();
    let mut offset = preamble.first_options;
    if offset == 0 {
        return Err(DatError::Missing("options section"));
    }
    while offset != 0 {
        if !seen.insert(offset) {
            return Err(DatError::OptionsLoop(offset));
        }
        let (section, origin) =
            read_section(source, offset, options::DONE, preamble, "options section")?;
        let mut cursor = Cursor::new(&section, 0, preamble.endian);
        let next = (|| loop {
            let id = cursor.u16("option id")?;
            let size = cursor.u32("option size")?;
            let data = cursor.bytes("option data", size as u64)?;
            if id == options::DONE {
                let next = Slice::new(&data, preamble.endian)
                    .u64()
                    .ok_or(DatError::BadOption {
                        id,
                        what: "shorter than 8 bytes",
                    })?;
                return Ok(next);
            }
            options.apply(id, &data, Layout::V7, preamble.endian)?;
        })();
        offset = next.map_err(|e| origin.locate(e))?;
    }
    Ok(options)
}

fn read_buffer(
    source: &Source,
    option: &options::BufferOption,
    preamble: &Preamble,
) -> Result<Buffer, DatError> {
    let header = read_header(source, option.offset, preamble)?;
    if header.id != options::BUFFER {
        return Err(DatError::SectionId {
            offset: option.offset,
            found: header.id,
            expected: options::BUFFER,
        });
    }
    let compression = if header.flags & FLAG_COMPRESSED != 0 {
        let compression =
            preamble
                .compression
                .as_ref()
                .ok_or(DatError::CompressedWithoutAlgorithm {
                    what: "flyrecord section",
                })?;
        Some(compression.algorithm)
    } else {
        None
    };
    let page_size = option.page_size.unwrap_or(preamble.page_size);
    super::preamble::check_page_size(page_size as u64)?;
    let mut cpus = Vec::new();
    for &(cpu, offset, stored_size) in &option.cpus {
        if stored_size > 0 {
            source.check("flyrecord cpu data", offset, stored_size)?;
        }
        let size = match compression {
            Some(_) => compress::chunks_size(compress::chunks(
                source,
                offset,
                stored_size,
                preamble.endian,
            )?),
            None => stored_size,
        };
        cpus.push(CpuData {
            cpu,
            offset,
            stored_size,
            size,
            missing: 0,
        });
    }
    let mut buffer = Buffer {
        name: option.name.clone(),
        page_size,
        clock: option.clock.clone(),
        compression,
        cpus,
    };
    buffer.normalize()?;
    Ok(buffer)
}
