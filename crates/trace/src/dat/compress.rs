//! Compressed parts of a version 7 file.
//!
//! Two framings (trace-cmd.dat.v7(5), "COMPRESSION FORMAT"):
//! * a compressed section: `u32 compressed size, u32 uncompressed size, data` — one block;
//! * compressed trace data: `u32 chunk count`, then per chunk the same three fields.
//!
//! Each block is one zlib stream (zlib's `compress2`) or one zstd frame. Decompression is
//! streamed and stops at the size the file claims, so a corrupt size cannot make it
//! allocate more than the data really expands to, and metadata sections are capped.

use std::io::{Read, Write};

use super::error::DatError;
use super::source::{Cursor, Endian, Source};

/// The largest decompressed metadata section accepted (kallsyms of a large kernel with
/// modules is tens of MiB).
pub const METADATA_LIMIT: u64 = 256 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Zlib,
    Zstd,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Zlib => "zlib",
            Algorithm::Zstd => "zstd",
        }
    }
}

/// The algorithm named in a version 7 header, and the library version that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compression {
    pub algorithm: Algorithm,
    pub version: String,
}

impl Compression {
    /// `None` for "none" (an uncompressed version 7 file).
    pub fn from_header(name: &str, version: &str) -> Result<Option<Compression>, DatError> {
        let algorithm = match name {
            "none" => return Ok(None),
            "zlib" => Algorithm::Zlib,
            "zstd" => Algorithm::Zstd,
            other => return Err(DatError::UnknownCompression(other.to_string())),
        };
        Ok(Some(Compression {
            algorithm,
            version: version.to_string(),
        }))
    }
}

/// Reads one compressed block at the cursor and returns its decompressed bytes.
pub fn read_block(
    cursor: &mut Cursor<'_>,
    algorithm: Algorithm,
    what: &'static str,
) -> Result<Vec<u8>, DatError> {
    let compressed_size = cursor.u32(what)? as u64;
    let size = cursor.u32(what)? as u64;
    if size > METADATA_LIMIT {
        return Err(DatError::TooLarge {
            what,
            size,
            limit: METADATA_LIMIT,
        });
    }
    let compressed = cursor.bytes(what, compressed_size)?;
    let mut out = Vec::new();
    decompress(algorithm, &compressed, size, &mut out, what)?;
    Ok(out)
}

/// One compressed chunk of a CPU's trace data.
#[derive(Debug, Clone, Copy)]
pub struct Chunk {
    /// Where the compressed bytes start.
    pub offset: u64,
    pub compressed_size: u64,
    pub size: u64,
}

/// The chunks of one CPU's compressed trace data: `u32 count`, then per chunk `u32
/// compressed size, u32 size, data`. Only the headers are read.
///
/// The stored size in the BUFFER option leaves out the 4-byte count in files written by
/// trace-cmd 3.1 and includes it in later ones, so chunks may end up to 4 bytes past it.
pub fn list_chunks(
    source: &Source,
    offset: u64,
    stored_size: u64,
    endian: Endian,
) -> Result<Vec<Chunk>, DatError> {
    const WHAT: &str = "compressed cpu data";
    if stored_size == 0 {
        return Ok(Vec::new());
    }
    source.check(WHAT, offset, stored_size)?;
    let end = (offset + stored_size).saturating_add(4).min(source.len());
    let mut cursor = Cursor::new(source, offset, endian);
    let count = cursor.u32(WHAT)?;
    // Each chunk takes at least its 8 header bytes inside the CPU's data: the loop stops
    // there long before a corrupt count could make the list large.
    let mut chunks = Vec::new();
    for _ in 0..count {
        if cursor.pos.saturating_add(8) > end {
            return Err(DatError::Truncated {
                what: WHAT,
                offset: cursor.pos,
                len: 8,
                end,
            });
        }
        let compressed_size = cursor.u32(WHAT)? as u64;
        let size = cursor.u32(WHAT)? as u64;
        if cursor.pos.saturating_add(compressed_size) > end {
            return Err(DatError::Truncated {
                what: WHAT,
                offset: cursor.pos,
                len: compressed_size,
                end,
            });
        }
        chunks.push(Chunk {
            offset: cursor.pos,
            compressed_size,
            size,
        });
        cursor.pos += compressed_size;
    }
    Ok(chunks)
}

/// Decompresses the chunked trace data of one CPU into `out`. Returns the bytes written.
pub fn copy_chunks(
    source: &Source,
    chunks: &[Chunk],
    algorithm: Algorithm,
    out: &mut dyn Write,
) -> Result<u64, DatError> {
    let mut written = 0u64;
    for chunk in chunks {
        let compressed =
            source.bytes_at("compressed chunk", chunk.offset, chunk.compressed_size)?;
        written += decompress(algorithm, &compressed, chunk.size, out, "compressed chunk")?;
    }
    Ok(written)
}

/// Decompresses one block into `out`, which must come to exactly `expected` bytes.
fn decompress(
    algorithm: Algorithm,
    input: &[u8],
    expected: u64,
    out: &mut dyn Write,
    what: &'static str,
) -> Result<u64, DatError> {
    let failed = |message: String| DatError::Decompress {
        what,
        algorithm: algorithm.name(),
        message,
    };
    let mut zstd_input = input;
    let mut reader: Box<dyn Read + '_> = match algorithm {
        Algorithm::Zlib => Box::new(flate2::read::ZlibDecoder::new(input)),
        Algorithm::Zstd => Box::new(
            ruzstd::decoding::StreamingDecoder::new(&mut zstd_input)
                .map_err(|e| failed(e.to_string()))?,
        ),
    };
    // One byte more than claimed reveals data that runs past the stated size.
    let mut limited = (&mut reader).take(expected + 1);
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    loop {
        let n = match limited.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(failed(e.to_string())),
        };
        total += n as u64;
        if total > expected {
            break;
        }
        out.write_all(&buf[..n])
            .map_err(|source| DatError::Write { what, source })?;
    }
    if total != expected {
        return Err(DatError::DecompressedSize {
            what,
            found: total,
            expected,
        });
    }
    Ok(total)
}
