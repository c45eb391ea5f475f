//! Flyrecord buffers: where each CPU's ring-buffer pages are in the file.

use std::io::{Read, Write};

use super::compress::{self, Algorithm, ChunkReader};
use super::error::DatError;
use super::options::check_cpu_count;
use super::source::{dat_error, Cursor, Endian, Source, SourceRange};

/// Bytes copied per step when writing a CPU's pages out.
const COPY_BYTES: usize = 256 << 10;

/// One CPU's pages in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuData {
    pub cpu: u32,
    /// Where the data starts (page-aligned in the file).
    pub offset: u64,
    /// Bytes the data takes in the file (compressed size for compressed buffers).
    pub stored_size: u64,
    /// Bytes of ring-buffer pages it holds (after decompression).
    pub size: u64,
    /// Bytes of pages the file's table lists beyond its end: a version 6 file cut short
    /// keeps the whole pages it still holds (`size`), and these are lost.
    pub missing: u64,
}

/// The flyrecord data of one tracefs instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buffer {
    /// `""` for the top-level buffer, else the instance name.
    pub name: String,
    pub page_size: u32,
    /// The clock trace-cmd wrote next to the buffer (see [`super::DatFile::clock`]).
    pub clock: Option<String>,
    /// Version 7: the data is in compressed chunks.
    pub compression: Option<Algorithm>,
    /// CPUs with an entry, ascending.
    pub cpus: Vec<CpuData>,
}

impl Buffer {
    /// True when some CPU holds at least one page.
    pub fn has_data(&self) -> bool {
        self.cpus.iter().any(|c| c.size > 0)
    }

    pub fn cpu(&self, cpu: u32) -> Option<&CpuData> {
        self.cpus.iter().find(|c| c.cpu == cpu)
    }

    /// Sorts CPUs and rejects a CPU listed twice or numbered beyond [`MAX_CPUS`](super::options::MAX_CPUS).
    pub(super) fn normalize(&mut self) -> Result<(), DatError> {
        if let Some(highest) = self.cpus.iter().map(|c| c.cpu).max() {
            check_cpu_count(highest as u64 + 1)?;
        }
        self.cpus.sort_by_key(|c| c.cpu);
        if let Some(pair) = self.cpus.windows(2).find(|p| p[0].cpu == p[1].cpu) {
            return Err(DatError::DuplicateCpu {
                buffer: self.name.clone(),
                cpu: pair[0].cpu,
            });
        }
        Ok(())
    }
}

/// One CPU's pages as a byte stream: a range of the file as it is, or its compressed chunks
/// decompressed one at a time as the stream is read. Errors while reading are
/// [`DatError`]s inside the `io::Error` (see [`super::source::dat_error`]).
pub(super) fn cpu_reader<'s>(
    source: &'s Source,
    buffer: &Buffer,
    data: &CpuData,
    endian: Endian,
) -> Result<Box<dyn Read + Send + 's>, DatError> {
    if let Some(algorithm) = buffer.compression {
        let chunks = compress::chunks(source, data.offset, data.stored_size, endian)?;
        return Ok(Box::new(ChunkReader::new(source, algorithm, chunks)));
    }
    // An empty CPU's offset may point past the end of the file (see read_v6_table).
    if data.stored_size == 0 {
        return Ok(Box::new(std::io::empty()));
    }
    Ok(Box::new(SourceRange::new(
        source,
        "cpu data",
        data.offset,
        data.stored_size,
    )?))
}

/// Writes one CPU's pages, decompressing if needed. Returns the bytes written.
pub(super) fn copy_cpu_data(
    source: &Source,
    buffer: &Buffer,
    data: &CpuData,
    endian: Endian,
    out: &mut dyn Write,
) -> Result<u64, DatError> {
    let mut reader = cpu_reader(source, buffer, data, endian)?;
    let mut chunk = vec![0u8; COPY_BYTES];
    let mut done = 0u64;
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(done),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(dat_error(e)),
        };
        out.write_all(&chunk[..n])
            .map_err(|source| DatError::Write {
                what: "cpu data",
                source,
            })?;
        done += n as u64;
    }
}

/// A version 6 `flyrecord\0` table: `count` pairs of (u64 offset, u64 size), then the
/// clock as `u64 size, "[clock]"` when trace-cmd wrote one.
pub(super) fn read_v6_table(
    cursor: &mut Cursor<'_>,
    name: &str,
    count: u32,
    page_size: u32,
) -> Result<Buffer, DatError> {
    check_cpu_count(count as u64)?;
    let mut cpus = Vec::new();
    for cpu in 0..count {
        let offset = cursor.u64("flyrecord cpu offset")?;
        let listed = cursor.u64("flyrecord cpu size")?;
        // An empty CPU's offset may point past the end (trace-cmd aligns it to the next
        // page even when nothing follows), so only data that exists is checked. The data
        // comes last in the file: a file cut short keeps its CPUs' whole pages before the
        // cut, and what the table lists beyond it is counted as missing.
        let available = cursor.source.len().saturating_sub(offset);
        let size = if listed > available {
            available - available % page_size.max(1) as u64
        } else {
            listed
        };
        cpus.push(CpuData {
            cpu,
            offset,
            stored_size: size,
            size,
            missing: listed - size,
        });
    }
    let clock = read_v6_clock(cursor);
    let mut buffer = Buffer {
        name: name.to_string(),
        page_size,
        clock,
        compression: None,
        cpus,
    };
    buffer.normalize()?;
    Ok(buffer)
}

/// The `u64 size, "[clock]"` trace-cmd puts after a version 6 table. Older writers put
/// nothing there (the padding before the data follows), so anything that does not look
/// like a bracketed clock name is taken as absent rather than as an error.
fn read_v6_clock(cursor: &mut Cursor<'_>) -> Option<String> {
    let start = cursor.pos;
    let size = cursor.u64("clock size").ok()?;
    if size == 0 || size > 256 {
        cursor.pos = start;
        return None;
    }
    let text = cursor.bytes("clock", size).ok()?;
    let text = String::from_utf8(text).ok()?;
    super::options::selected_clock(&text)
}
