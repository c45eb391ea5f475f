//! Compressed parts of a version 7 file.
//!
//! Two framings (trace-cmd.dat.v7(5), "COMPRESSION FORMAT"):
//! * a compressed section: `u32 compressed size, u32 uncompressed size, data` — one block;
//! * compressed trace data: `u32 chunk count`, then per chunk the same three fields.
//!
//! Each block is one zlib stream (zlib's `compress2`) or one zstd frame, decompressed by
//! zlib (flate2) and libzstd. Decompression stops at the size the file claims, so a
//! corrupt size cannot make it hand out more than that, and metadata sections are capped.
//! Trace data is decompressed a chunk at a time as it is read ([`ChunkReader`]), so memory
//! does not grow with a CPU's data.

use std::io::Read;

use zstd::zstd_safe::zstd_sys::ZSTD_ErrorCode as ZstdCode;

use super::error::DatError;
use super::source::{Cursor, Endian, Source, SourceRange, METADATA_LIMIT};

/// The largest zstd window accepted. The decoder keeps up to a window of output in memory,
/// so the frame header would otherwise decide how much; trace-cmd compresses each chunk of a
/// few pages in one call that knows its size, so its frames' windows are at most a chunk.
pub const ZSTD_WINDOW_LIMIT: u64 = 16 << 20;

/// The zstd frame magic number (RFC 8878, "Zstandard Frames").
const ZSTD_MAGIC: u32 = 0xFD2F_B528;

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
    let chunk = Chunk {
        offset: cursor.pos,
        compressed_size,
        size,
    };
    let mut block = Block::open(cursor.source, chunk, algorithm, what)?;
    cursor.pos += compressed_size;
    // Grows with what the data really expands to, never with the size it claims.
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = block.read(&mut buf)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// One compressed chunk of a CPU's trace data.
#[derive(Debug, Clone, Copy)]
pub struct Chunk {
    /// Where the compressed bytes start.
    pub offset: u64,
    pub compressed_size: u64,
    pub size: u64,
}

/// The chunks of one CPU's compressed trace data (`u32 count`, then per chunk `u32
/// compressed size, u32 size, data`), their headers read one at a time.
///
/// The stored size in the BUFFER option leaves out the 4-byte count in files written by
/// trace-cmd 3.1 and includes it in later ones, so chunks may end up to 4 bytes past it.
#[derive(Debug)]
pub struct Chunks<'s> {
    cursor: Cursor<'s>,
    left: u32,
    end: u64,
    /// The file's bytes from `ahead_at`, read [`READ_AHEAD`] at a time: chunk headers and
    /// the compressed bytes of the chunks after them come from here. trace-cmd's chunks
    /// compress to a few KiB, and a read per header and per chunk cost a tenth of a
    /// decode.
    ahead: Vec<u8>,
    ahead_at: u64,
}

/// Bytes of compressed data read from the file at a time by [`Chunks`].
const READ_AHEAD: u64 = 64 << 10;

const CHUNKS: &str = "compressed cpu data";

/// The chunks of the compressed data at `offset`; nothing is read beyond the count yet.
pub fn chunks(
    source: &Source,
    offset: u64,
    stored_size: u64,
    endian: Endian,
) -> Result<Chunks<'_>, DatError> {
    let mut cursor = Cursor::new(source, offset, endian);
    let mut chunks = Chunks {
        cursor: Cursor::new(source, offset, endian),
        left: 0,
        end: offset,
        ahead: Vec::new(),
        ahead_at: offset,
    };
    if stored_size == 0 {
        return Ok(chunks);
    }
    source.check(CHUNKS, offset, stored_size)?;
    chunks.end = (offset + stored_size).saturating_add(4).min(source.len());
    chunks.left = cursor.u32(CHUNKS)?;
    chunks.cursor = cursor;
    Ok(chunks)
}

impl Chunks<'_> {
    fn read_header(&mut self) -> Result<Chunk, DatError> {
        let at = self.cursor.pos;
        if at.saturating_add(8) > self.end {
            return Err(DatError::Truncated {
                what: CHUNKS,
                offset: at,
                len: 8,
                end: self.end,
            });
        }
        let endian = self.cursor.endian;
        let mut sizes = super::source::Slice::new(self.bytes_at(at, 8)?, endian);
        // Both present: the slice holds exactly 8 bytes.
        let compressed_size = sizes.u32().unwrap_or(0) as u64;
        let size = sizes.u32().unwrap_or(0) as u64;
        let data = at + 8;
        if data.saturating_add(compressed_size) > self.end {
            return Err(DatError::Truncated {
                what: CHUNKS,
                offset: data,
                len: compressed_size,
                end: self.end,
            });
        }
        self.cursor.pos = data + compressed_size;
        Ok(Chunk {
            offset: data,
            compressed_size,
            size,
        })
    }

    /// The `len` bytes at `at`, which lie inside the data (the caller checked), read
    /// ahead with those after them up to [`READ_AHEAD`].
    fn bytes_at(&mut self, at: u64, len: u64) -> Result<&[u8], DatError> {
        let held = self.ahead_at..self.ahead_at + self.ahead.len() as u64;
        if !(held.contains(&at) && at + len <= held.end) {
            let n = len
                .max(READ_AHEAD)
                .min(self.end.saturating_sub(at))
                .max(len);
            // Only what the buffer grows by is zeroed: the read overwrites the rest.
            self.ahead.resize(n as usize, 0);
            self.ahead_at = at;
            if let Err(error) = self
                .cursor
                .source
                .read_exact_at(CHUNKS, at, &mut self.ahead)
            {
                self.ahead.clear();
                return Err(error);
            }
        }
        let start = (at - self.ahead_at) as usize;
        Ok(&self.ahead[start..start + len as usize])
    }

    /// The compressed bytes of `chunk`, one of these chunks.
    fn data(&mut self, chunk: Chunk) -> Result<&[u8], DatError> {
        self.bytes_at(chunk.offset, chunk.compressed_size)
    }
}

impl Iterator for Chunks<'_> {
    type Item = Result<Chunk, DatError>;

    /// Each chunk takes at least its 8 header bytes inside the CPU's data, so a corrupt
    /// count ends in an error at the end of the data rather than in a long walk.
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let chunk = self.read_header();
        if chunk.is_err() {
            self.left = 0;
        }
        Some(chunk)
    }
}

/// The decompressed size of compressed trace data: the sum of its chunks' stated sizes, up
/// to the first chunk header that does not hold together. What follows such a header
/// cannot be found; the reader of the pages meets the same header and reports the loss
/// there, against its CPU, so the chunks before it are still read.
pub fn chunks_size(chunks: Chunks<'_>) -> u64 {
    chunks
        .map_while(Result::ok)
        .fold(0u64, |total, chunk| total.saturating_add(chunk.size))
}

/// Chunks up to this size are decompressed whole before any of their bytes are handed
/// out: a damaged one is then skipped as a whole, and the bytes given out are only ever
/// pages that decompressed completely (corrupt input can decompress to wrong bytes before
/// the decoder notices). trace-cmd's chunks are a few pages; a larger chunk is streamed,
/// and damage to it ends the stream. A zstd chunk's output buffer is sized by its stated
/// size, so this also bounds what a damaged header can make the reader allocate.
pub const WHOLE_CHUNK_LIMIT: u64 = 16 << 20;

/// One CPU's compressed trace data as a byte stream, decompressed a chunk at a time as it
/// is read: memory is one chunk, whatever the size of the data.
///
/// A chunk that does not decompress is reported as [`DatError::DamagedChunk`] by the read
/// that reaches it, and the stream goes on with the next chunk, which is compressed on its
/// own. Any other error (a chunk table that runs past the data, a failed read of the file)
/// ends the stream.
pub struct ChunkReader<'s> {
    source: &'s Source,
    algorithm: Algorithm,
    chunks: Chunks<'s>,
    /// A chunk larger than [`WHOLE_CHUNK_LIMIT`], being streamed.
    current: Option<Block<'s>>,
    /// The chunk decompressed whole, and how much of it was handed out.
    whole: Vec<u8>,
    whole_at: usize,
    /// Made at the first zstd chunk and kept: making one costs more than decompressing a
    /// chunk of a few pages.
    zstd: Option<zstd::zstd_safe::DCtx<'static>>,
}

impl<'s> ChunkReader<'s> {
    pub fn new(source: &'s Source, algorithm: Algorithm, chunks: Chunks<'s>) -> ChunkReader<'s> {
        ChunkReader {
            source,
            algorithm,
            chunks,
            current: None,
            whole: Vec::new(),
            whole_at: 0,
            zstd: None,
        }
    }

    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, DatError> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.whole_at < self.whole.len() {
                let n = buf.len().min(self.whole.len() - self.whole_at);
                buf[..n].copy_from_slice(&self.whole[self.whole_at..self.whole_at + n]);
                self.whole_at += n;
                return Ok(n);
            }
            if let Some(block) = &mut self.current {
                let n = block.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                self.current = None;
            }
            let Some(chunk) = self.chunks.next() else {
                return Ok(0);
            };
            let chunk = chunk?;
            if chunk.size > WHOLE_CHUNK_LIMIT {
                let block = Block::open(self.source, chunk, self.algorithm, "compressed chunk")?;
                self.current = Some(block);
                continue;
            }
            self.whole.clear();
            self.whole_at = 0;
            // A zstd chunk that fits the caller's buffer with a byte to spare (the spare
            // byte reveals output past the stated size) is decompressed straight into it:
            // no copy through `whole`. Bytes written there before a failure are never
            // counted as read.
            let direct = self.algorithm == Algorithm::Zstd && (buf.len() as u64) > chunk.size;
            let done = if direct {
                self.decompress_zstd(chunk, Output::Caller(buf))
            } else {
                self.decompress_whole(chunk).map(|()| 0)
            };
            let reason = match done {
                // In `whole` (or an empty chunk): handed out from there.
                Ok(0) => continue,
                Ok(n) => return Ok(n),
                Err(reason) => reason,
            };
            self.whole.clear();
            if matches!(reason, DatError::Io { .. }) {
                return Err(reason);
            }
            let reason = match reason {
                DatError::Decompress { algorithm, .. } => {
                    format!("corrupt {algorithm} data")
                }
                DatError::Checksum { .. } => "zstd checksum mismatch".to_string(),
                other => other.to_string(),
            };
            return Err(DatError::DamagedChunk {
                // Where the chunk's header starts, as a dump of the file shows it.
                offset: chunk.offset.saturating_sub(8),
                size: chunk.size,
                reason,
            });
        }
    }

    /// Decompresses `chunk` into `self.whole`, which comes to exactly its stated size.
    fn decompress_whole(&mut self, chunk: Chunk) -> Result<(), DatError> {
        if self.algorithm == Algorithm::Zstd {
            return self.decompress_zstd(chunk, Output::Whole).map(|_| ());
        }
        let mut block = Block::open(self.source, chunk, self.algorithm, "compressed chunk")?;
        // Grows with what the data really expands to (Block stops one byte past the stated
        // size), never with the size a damaged header claims.
        let mut scratch = [0u8; 16 << 10];
        loop {
            let n = block.read(&mut scratch)?;
            if n == 0 {
                return Ok(());
            }
            self.whole.extend_from_slice(&scratch[..n]);
        }
    }

    /// Decompresses the zstd `chunk` in one call into `output`, which it must fill to
    /// exactly its stated size; returns that size.
    ///
    /// One call on the whole frame, with its compressed bytes in memory: libzstd's
    /// streaming interface would copy every byte through its window, and reading the
    /// frame piece by piece costs a system call per piece.
    fn decompress_zstd(&mut self, chunk: Chunk, output: Output<'_>) -> Result<usize, DatError> {
        const WHAT: &str = "compressed chunk";
        // Only a damaged header puts more compressed bytes than this in front of a chunk
        // small enough to be decompressed whole; the bytes are in the file either way, but
        // are not read into memory for nothing.
        let most = zstd::zstd_safe::compress_bound(WHOLE_CHUNK_LIMIT as usize) as u64;
        if chunk.compressed_size > most {
            return Err(failed(self.algorithm, WHAT, chunk.offset));
        }
        let packed = self.chunks.data(chunk)?;
        if let Some(window) = zstd_window(packed).filter(|&w| w > ZSTD_WINDOW_LIMIT) {
            return Err(DatError::WindowTooLarge {
                what: WHAT,
                window,
                limit: ZSTD_WINDOW_LIMIT,
            });
        }
        let dctx = match &mut self.zstd {
            Some(dctx) => dctx,
            None => {
                let made = zstd::zstd_safe::DCtx::try_create();
                self.zstd
                    .insert(made.ok_or_else(|| failed(Algorithm::Zstd, WHAT, chunk.offset))?)
            }
        };
        // One byte of room past the stated size, so that longer output shows as such.
        let room = chunk.size as usize + 1;
        let result = match output {
            Output::Caller(buf) => dctx.decompress(&mut buf[..room], packed),
            Output::Whole => {
                self.whole.clear();
                self.whole.reserve_exact(room);
                dctx.decompress(&mut self.whole, packed)
            }
        };
        let n = result.map_err(|code| {
            if is_zstd_error(code, ZstdCode::ZSTD_error_dstSize_tooSmall) {
                // The output ran past the byte of room beyond its stated size.
                DatError::DecompressedSize {
                    what: WHAT,
                    found: chunk.size + 1,
                    expected: chunk.size,
                }
            } else {
                zstd_error(code, WHAT, chunk.offset)
            }
        })?;
        if n as u64 != chunk.size {
            return Err(DatError::DecompressedSize {
                what: WHAT,
                // `whole` may have room for more than the byte past the stated size; say
                // what the other paths say, where a byte more is where reading stops.
                found: (n as u64).min(chunk.size + 1),
                expected: chunk.size,
            });
        }
        Ok(n)
    }
}

/// Where [`ChunkReader::decompress_zstd`] puts a chunk.
enum Output<'b> {
    /// The reader's buffer, longer than the chunk's stated size.
    Caller(&'b mut [u8]),
    /// `ChunkReader::whole`.
    Whole,
}

/// Whether libzstd's error `code` is `error`: libzstd returns an error as the negated
/// `ZSTD_ErrorCode`, whose values zstd_errors.h pins down.
fn is_zstd_error(code: usize, error: ZstdCode) -> bool {
    code == 0usize.wrapping_sub(error as usize)
}

/// libzstd's error `code` for the frame at `offset`: a checksum that disagrees is told
/// apart, since the data then decompressed but to other bytes.
fn zstd_error(code: usize, what: &'static str, offset: u64) -> DatError {
    if is_zstd_error(code, ZstdCode::ZSTD_error_checksum_wrong) {
        DatError::Checksum { what, offset }
    } else {
        failed(Algorithm::Zstd, what, offset)
    }
}

impl Read for ChunkReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.fill(buf).map_err(|error| {
            if !matches!(error, DatError::DamagedChunk { .. }) {
                // Nothing after this can be found: the stream ends here.
                self.current = None;
                self.chunks.left = 0;
            }
            std::io::Error::other(error)
        })
    }
}

/// A block's decoder.
enum Decoder<'s> {
    // Boxed, both: their sizes depend on the backends other crates choose for flate2 (the
    // query engine's Parquet reader makes the zlib decoder 224 bytes or more), and a
    // block's decoder is made once per block.
    Zlib(Box<flate2::read::ZlibDecoder<SourceRange<'s>>>),
    Zstd(Box<ZstdStream<'s>>),
}

impl Decoder<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Decoder::Zlib(d) => d.read(buf),
            Decoder::Zstd(d) => d.read(buf),
        }
    }
}

/// Compressed bytes read from the file at a time by [`ZstdStream`].
const ZSTD_INPUT: usize = 64 << 10;

/// One zstd frame decompressed as it is read, through libzstd's streaming interface: for
/// blocks too large to decompress whole. It ends at the end of the frame; bytes after it
/// are not looked at. libzstd checks the frame's checksum when it reaches it, so damaged
/// data that decompresses to the right number of bytes still ends in an error.
struct ZstdStream<'s> {
    dctx: zstd::zstd_safe::DCtx<'static>,
    input: SourceRange<'s>,
    buf: Vec<u8>,
    /// `buf[at..filled]` is read from the file and not yet decompressed.
    at: usize,
    filled: usize,
    /// The frame is complete.
    done: bool,
    what: &'static str,
    offset: u64,
}

impl<'s> ZstdStream<'s> {
    fn new(
        input: SourceRange<'s>,
        what: &'static str,
        offset: u64,
    ) -> Result<ZstdStream<'s>, DatError> {
        let fail = || failed(Algorithm::Zstd, what, offset);
        let mut dctx = zstd::zstd_safe::DCtx::try_create().ok_or_else(fail)?;
        // The frame header was checked against the same limit; this makes libzstd hold
        // to it too.
        let window_log = ZSTD_WINDOW_LIMIT.trailing_zeros();
        dctx.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(window_log))
            .map_err(|_| fail())?;
        let capacity = (input.left() as usize).min(ZSTD_INPUT);
        Ok(ZstdStream {
            dctx,
            input,
            buf: vec![0; capacity],
            at: 0,
            filled: 0,
            done: false,
            what,
            offset,
        })
    }

    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        use zstd::zstd_safe::{InBuffer, OutBuffer};
        if self.done || out.is_empty() {
            return Ok(0);
        }
        loop {
            if self.at == self.filled && self.input.left() > 0 {
                let n = self.input.read(&mut self.buf)?;
                self.at = 0;
                self.filled = n;
            }
            let mut input = InBuffer::around(&self.buf[self.at..self.filled]);
            let mut output = OutBuffer::around(&mut *out);
            let hint = self
                .dctx
                .decompress_stream(&mut output, &mut input)
                .map_err(|code| std::io::Error::other(zstd_error(code, self.what, self.offset)))?;
            let took = input.pos();
            self.at += took;
            let written = output.pos();
            // 0: the frame is complete and all of it is handed out.
            if hint == 0 {
                self.done = true;
            }
            if written > 0 || self.done {
                return Ok(written);
            }
            // The file's bytes of the block ended inside the frame, or (never seen, but a
            // loop must not depend on it) libzstd took nothing and gave nothing.
            let ended = self.at == self.filled && self.input.left() == 0;
            if ended || (took == 0 && self.at < self.filled) {
                return Err(std::io::Error::other(failed(
                    Algorithm::Zstd,
                    self.what,
                    self.offset,
                )));
            }
        }
    }
}

/// One compressed block (a metadata section or a chunk of trace data) as a byte stream
/// that must come to exactly the size the file states, and, for a zstd frame with a
/// checksum, to the bytes the checksum says (libzstd checks it).
pub struct Block<'s> {
    reader: Decoder<'s>,
    algorithm: Algorithm,
    what: &'static str,
    /// Where the compressed bytes start in the file, for errors.
    offset: u64,
    size: u64,
    done: u64,
}

impl<'s> Block<'s> {
    pub fn open(
        source: &'s Source,
        chunk: Chunk,
        algorithm: Algorithm,
        what: &'static str,
    ) -> Result<Block<'s>, DatError> {
        let input = SourceRange::new(source, what, chunk.offset, chunk.compressed_size)?;
        let reader = match algorithm {
            Algorithm::Zlib => Decoder::Zlib(Box::new(flate2::read::ZlibDecoder::new(input))),
            Algorithm::Zstd => {
                check_zstd_window(source, chunk, what)?;
                Decoder::Zstd(Box::new(ZstdStream::new(input, what, chunk.offset)?))
            }
        };
        Ok(Block {
            reader,
            algorithm,
            what,
            offset: chunk.offset,
            size: chunk.size,
            done: 0,
        })
    }

    /// Up to `buf.len()` decompressed bytes; 0 when the block is done, which is an error
    /// unless it came to exactly its stated size.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, DatError> {
        // One byte more than stated reveals data that runs past the stated size.
        let room = (self.size + 1 - self.done).min(buf.len() as u64) as usize;
        if room == 0 {
            return Ok(0);
        }
        let n = loop {
            match self.reader.read(&mut buf[..room]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // The decoders' own messages name their internal states, not what a reader
                // of the file can act on; where and in what the data is corrupt is.
                Err(e) => match e.downcast::<DatError>() {
                    Ok(dat) => return Err(dat),
                    Err(_) => return Err(failed(self.algorithm, self.what, self.offset)),
                },
            }
        };
        self.done += n as u64;
        if self.done > self.size || (n == 0 && self.done != self.size) {
            return Err(DatError::DecompressedSize {
                what: self.what,
                found: self.done,
                expected: self.size,
            });
        }
        Ok(n)
    }
}

fn failed(algorithm: Algorithm, what: &'static str, offset: u64) -> DatError {
    DatError::Decompress {
        what,
        algorithm: algorithm.name(),
        offset,
    }
}

/// Refuses a zstd frame whose header asks for a window beyond [`ZSTD_WINDOW_LIMIT`].
fn check_zstd_window(source: &Source, chunk: Chunk, what: &'static str) -> Result<(), DatError> {
    // A frame header is at most 14 bytes (RFC 8878, "Frame_Header").
    let mut header = [0u8; 14];
    let len = chunk.compressed_size.min(header.len() as u64) as usize;
    source.read_exact_at(what, chunk.offset, &mut header[..len])?;
    match zstd_window(&header[..len]) {
        Some(window) if window > ZSTD_WINDOW_LIMIT => Err(DatError::WindowTooLarge {
            what,
            window,
            limit: ZSTD_WINDOW_LIMIT,
        }),
        _ => Ok(()),
    }
}

/// The window a zstd frame header asks for: the window descriptor, or the content size of
/// a single-segment frame. `None` when the bytes are no frame header (the decoder then says
/// what is wrong).
fn zstd_window(header: &[u8]) -> Option<u64> {
    let magic = u32::from_le_bytes(header.get(..4)?.try_into().ok()?);
    if magic != ZSTD_MAGIC {
        return None;
    }
    let descriptor = *header.get(4)?;
    let single_segment = descriptor & 0x20 != 0;
    if !single_segment {
        let window = *header.get(5)?;
        let base = 1u64 << (10 + (window >> 3));
        return Some(base + base / 8 * (window & 7) as u64);
    }
    let dictionary_len = [0, 1, 2, 4][(descriptor & 3) as usize];
    let size_len = [1, 2, 4, 8][(descriptor >> 6) as usize];
    let start = 5 + dictionary_len;
    let bytes = header.get(start..start + size_len)?;
    let size = bytes.iter().rev().fold(0u64, |acc, &b| acc << 8 | b as u64);
    // A 2-byte content size counts from 256.
    Some(if size_len == 2 { size + 256 } else { size })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `u32 count`, then per chunk `u32 compressed size, u32 stated size, zlib data`.
    fn zlib_chunks(chunks: &[(&[u8], u32)]) -> Vec<u8> {
        use std::io::Write;
        let mut out = (chunks.len() as u32).to_le_bytes().to_vec();
        for (data, stated) in chunks {
            let mut encoder =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(data).unwrap();
            let packed = encoder.finish().unwrap();
            out.extend_from_slice(&(packed.len() as u32).to_le_bytes());
            out.extend_from_slice(&stated.to_le_bytes());
            out.extend_from_slice(&packed);
        }
        out
    }

    /// `u32 count`, then per chunk `u32 compressed size, u32 stated size, zstd frame` (with
    /// a checksum).
    fn zstd_chunks(chunks: &[(&[u8], u32)]) -> Vec<u8> {
        let mut out = (chunks.len() as u32).to_le_bytes().to_vec();
        for (data, stated) in chunks {
            let packed = ruzstd::encoding::compress_to_vec(
                *data,
                ruzstd::encoding::CompressionLevel::Fastest,
            );
            out.extend_from_slice(&(packed.len() as u32).to_le_bytes());
            out.extend_from_slice(&stated.to_le_bytes());
            out.extend_from_slice(&packed);
        }
        out
    }

    /// Everything the reader hands out, and the errors it reported on the way: a damaged
    /// chunk is reported and reading goes on; any other error ends the stream.
    fn read_all(bytes: Vec<u8>) -> (Vec<u8>, Vec<DatError>) {
        // Small reads: chunk boundaries fall inside them.
        read_all_with(bytes, Algorithm::Zlib, 7)
    }

    /// [`read_all`] with reads of `read` bytes. A zstd chunk shorter than a read is
    /// decompressed straight into the reader's buffer; a longer one through the reader's
    /// own, as every zlib chunk is.
    fn read_all_with(
        bytes: Vec<u8>,
        algorithm: Algorithm,
        read: usize,
    ) -> (Vec<u8>, Vec<DatError>) {
        let len = bytes.len() as u64;
        let source = Source::Memory(bytes);
        let chunks = chunks(&source, 0, len, Endian::Little).unwrap();
        let mut reader = ChunkReader::new(&source, algorithm, chunks);
        let mut out = Vec::new();
        let mut errors = Vec::new();
        let mut buf = vec![0u8; read];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => return (out, errors),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => {
                    let error = e.downcast::<DatError>().expect("a DatError");
                    let damaged_chunk = matches!(error, DatError::DamagedChunk { .. });
                    errors.push(error);
                    if !damaged_chunk {
                        // The stream ends after any other error.
                        assert_eq!(reader.read(&mut buf).unwrap(), 0);
                        return (out, errors);
                    }
                }
            }
        }
    }

    /// The reason of each damaged chunk among `errors`, with where its header starts.
    fn damage(errors: &[DatError]) -> Vec<(u64, String)> {
        errors
            .iter()
            .map(|error| match error {
                DatError::DamagedChunk { offset, reason, .. } => (*offset, reason.clone()),
                other => panic!("not a damaged chunk: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn zstd_chunks_read_the_same_into_any_buffer() {
        let first = b"lock:contention_begin ".repeat(300);
        let second = b"sched_switch".repeat(7);
        let bytes = zstd_chunks(&[
            (&first[..], first.len() as u32),
            (b"", 0),
            (&second[..], second.len() as u32),
        ]);
        let whole = [&first[..], &second[..]].concat();
        // Into the caller's buffer (every chunk fits), through the reader's own (none
        // does), and a mix with chunk boundaries inside reads.
        for read in [64 << 10, first.len() + 1, first.len(), 7, 1] {
            let (out, errors) = read_all_with(bytes.clone(), Algorithm::Zstd, read);
            assert!(errors.is_empty(), "{read}: {errors:?}");
            assert_eq!(out, whole, "{read}");
        }
    }

    #[test]
    fn a_zstd_chunk_that_is_not_its_stated_size_is_skipped_whole() {
        let first = b"first chunk ".repeat(50);
        let size = first.len() as u32;
        for stated in [size - 1, size + 1, 0] {
            for read in [64 << 10, 7] {
                let bytes = zstd_chunks(&[(&first[..], stated), (b"second", 6)]);
                let (out, errors) = read_all_with(bytes, Algorithm::Zstd, read);
                assert_eq!(out, b"second", "{stated} {read}");
                let found = (size as u64).min(stated as u64 + 1);
                let reason = format!(
                    "compressed chunk: decompressed to {found} bytes, the file says {stated}"
                );
                assert_eq!(damage(&errors), [(4, reason)], "{stated} {read}");
            }
        }
    }

    #[test]
    fn a_damaged_zstd_chunk_costs_only_itself() {
        let first = b"lock:contention_begin ".repeat(300);
        let size = first.len() as u32;
        let clean = zstd_chunks(&[(&first[..], size), (b"second", 6)]);
        let packed = u32::from_le_bytes(clean[4..8].try_into().unwrap()) as usize;
        let frame = 12..12 + packed;
        // The checksum (the frame's last 4 bytes), the magic number, a cut through the
        // middle (the bytes after it read as a frame of their own), and zeros.
        let mut checksum = clean.clone();
        checksum[frame.end - 1] ^= 0x5a;
        let mut magic = clean.clone();
        magic[frame.start] ^= 0xff;
        let mut zeros = clean.clone();
        zeros[frame.start + 8..frame.end - 4].fill(0);
        let mut cut = clean[..frame.start + packed / 2].to_vec();
        cut.extend_from_slice(&clean[frame.end..]);
        let half = (packed / 2) as u32;
        cut[4..8].copy_from_slice(&half.to_le_bytes());
        for (name, bytes, reason) in [
            ("checksum", checksum, "zstd checksum mismatch"),
            ("magic", magic, "corrupt zstd data"),
            ("zeros", zeros, ""),
            ("cut", cut, "corrupt zstd data"),
        ] {
            for read in [64 << 10, 7] {
                let (out, errors) = read_all_with(bytes.clone(), Algorithm::Zstd, read);
                assert_eq!(out, b"second", "{name} {read}");
                let found = damage(&errors);
                assert_eq!(found.len(), 1, "{name} {read}: {errors:?}");
                assert_eq!(found[0].0, 4, "{name} {read}");
                assert!(found[0].1.contains(reason), "{name} {read}: {}", found[0].1);
            }
        }
    }

    #[test]
    fn a_zstd_chunk_claiming_more_compressed_bytes_than_any_chunk_needs_is_refused() {
        let first = b"first chunk ".repeat(50);
        let bytes = zstd_chunks(&[(&first[..], first.len() as u32)]);
        let source = Source::Memory(bytes);
        let chunks = chunks(&source, 0, source.len(), Endian::Little).unwrap();
        let mut reader = ChunkReader::new(&source, Algorithm::Zstd, chunks);
        let huge = Chunk {
            offset: 12,
            compressed_size: 1 << 40,
            size: 4096,
        };
        let mut buf = vec![0u8; 8192];
        match reader.decompress_zstd(huge, Output::Caller(&mut buf)) {
            Err(DatError::Decompress { offset: 12, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn chunks_decompress_one_after_another() {
        let (out, errors) = read_all(zlib_chunks(&[(b"first chunk ", 12), (b"second", 6)]));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(out, b"first chunk second");
    }

    #[test]
    fn a_chunk_that_is_not_its_stated_size_is_skipped_whole() {
        for stated in [11, 13] {
            let (out, errors) = read_all(zlib_chunks(&[(b"first chunk ", stated), (b"second", 6)]));
            // None of the damaged chunk's bytes, all of the next chunk's.
            assert_eq!(out, b"second", "{stated}");
            match &errors[..] {
                [DatError::DamagedChunk {
                    offset,
                    size,
                    reason,
                }] => {
                    assert_eq!((*offset, *size), (4, stated as u64));
                    let found = 12.min(stated + 1);
                    assert_eq!(
                        reason,
                        &format!(
                            "compressed chunk: decompressed to {found} bytes, the file says {stated}"
                        )
                    );
                }
                other => panic!("{stated}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_zstd_frame_asking_for_a_huge_window_is_refused_before_decoding() {
        // Window descriptor exponent 20: a 1 GiB window.
        let frame = [&ZSTD_MAGIC.to_le_bytes()[..], &[0x00, 20 << 3], &[0; 8]].concat();
        let len = frame.len() as u64;
        let source = Source::Memory(frame);
        let chunk = Chunk {
            offset: 0,
            compressed_size: len,
            size: 4096,
        };
        let opened = Block::open(&source, chunk, Algorithm::Zstd, "chunk");
        match opened.err() {
            Some(DatError::WindowTooLarge { window, .. }) => assert_eq!(window, 1 << 30),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn zstd_windows_come_from_the_descriptor_or_the_content_size() {
        let magic = ZSTD_MAGIC.to_le_bytes();
        // Window descriptor: exponent 3, mantissa 2 -> 8 KiB + 2 KiB.
        let framed = [&magic[..], &[0x00, 3 << 3 | 2]].concat();
        assert_eq!(zstd_window(&framed), Some(10 << 10));
        // Single segment, 4-byte content size 40960.
        let single = [&magic[..], &[0xa0], &40960u32.to_le_bytes()].concat();
        assert_eq!(zstd_window(&single), Some(40960));
        // Single segment, 2-byte content size: counted from 256.
        let two = [&magic[..], &[0x60], &[0x00, 0x01]].concat();
        assert_eq!(zstd_window(&two), Some(256 + 256));
        // Single segment with a 1-byte dictionary id before a 1-byte content size.
        let dict = [&magic[..], &[0x21, 7, 200]].concat();
        assert_eq!(zstd_window(&dict), Some(200));
        assert_eq!(zstd_window(&magic[..]), None);
        assert_eq!(zstd_window(b"not zstd at all"), None);
    }

    #[test]
    fn a_streamed_zstd_block_cut_short_is_an_error() {
        let data = b"sched_switch prev_comm=dd ".repeat(2000);
        let frame = ruzstd::encoding::compress_to_vec(
            &data[..],
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        for len in [0, 3, 6, frame.len() / 2, frame.len() - 1] {
            let cut = &frame[..len];
            let mut bytes = (cut.len() as u32).to_le_bytes().to_vec();
            bytes.extend_from_slice(&(data.len() as u32).to_le_bytes());
            bytes.extend_from_slice(cut);
            let source = Source::Memory(bytes);
            let mut cursor = Cursor::new(&source, 0, Endian::Little);
            match read_block(&mut cursor, Algorithm::Zstd, "section") {
                Err(DatError::Decompress { offset: 8, .. }) => {}
                other => panic!("{len}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_zstd_block_damaged_anywhere_is_never_accepted() {
        // Text and noise: compressed blocks and raw ones, where a flipped byte comes out
        // as a wrong byte of the right count and only the frame checksum can tell.
        let mut data = b"lock:contention_begin ".repeat(100);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        data.extend((0..4096).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }));
        let frame = ruzstd::encoding::compress_to_vec(
            &data[..],
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        let block = |frame: &[u8]| {
            let mut bytes = (frame.len() as u32).to_le_bytes().to_vec();
            bytes.extend_from_slice(&(data.len() as u32).to_le_bytes());
            bytes.extend_from_slice(frame);
            let source = Source::Memory(bytes);
            let mut cursor = Cursor::new(&source, 0, Endian::Little);
            read_block(&mut cursor, Algorithm::Zstd, "section")
        };
        assert_eq!(block(&frame).unwrap(), data);
        let mut accepted = Vec::new();
        // Every eighth of the frame past its header, and its last (checksum) byte.
        let mut positions: Vec<usize> = (1..8).map(|i| 16 + (frame.len() - 16) * i / 8).collect();
        positions.push(frame.len() - 1);
        for at in positions {
            let mut damaged = frame.clone();
            damaged[at] ^= 0x20;
            match block(&damaged) {
                Ok(out) if out == data => {} // a byte the decoder never looks at
                Ok(_) => accepted.push(at),
                Err(DatError::Checksum { offset, .. } | DatError::Decompress { offset, .. }) => {
                    assert_eq!(offset, 8, "where the frame starts")
                }
                Err(_) => {}
            }
        }
        assert!(accepted.is_empty(), "wrong bytes accepted at {accepted:?}");
    }
}
