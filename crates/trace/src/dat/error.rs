//! Everything that can be wrong with a .dat file or with extracting it.

use std::path::PathBuf;

/// A .dat file that cannot be read, or a trace directory that cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum DatError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("not a trace-cmd .dat file (no \\x17\\x08\\x44tracing magic)")]
    BadMagic,
    #[error("trace-cmd file version {0} is not supported (6 and 7 are)")]
    UnsupportedVersion(String),
    #[error("endianness byte {0} is neither 0 (little) nor 1 (big)")]
    BadEndian(u8),
    #[error("long size {0} is neither 4 nor 8")]
    BadLongSize(u8),
    #[error("page size {0} is not a power of two of at least 64 bytes")]
    BadPageSize(u64),
    #[error("{what} at offset {offset} needs {len} bytes but the data ends at {end}")]
    Truncated {
        what: &'static str,
        offset: u64,
        len: u64,
        end: u64,
    },
    #[error("{what} at offset {offset} has no terminating NUL")]
    Unterminated { what: &'static str, offset: u64 },
    #[error("{0} is not UTF-8")]
    NotUtf8(&'static str),
    #[error("expected the {what} tag at offset {offset}")]
    MissingTag { what: &'static str, offset: u64 },
    #[error("latency traces (text from the `trace` file) are not supported, only flyrecord")]
    LatencyTrace,
    #[error("compression `{0}` is not supported (none, zlib and zstd are)")]
    UnknownCompression(String),
    #[error("{what} is compressed but the file names no compression")]
    CompressedWithoutAlgorithm { what: &'static str },
    #[error("{algorithm}: corrupt compressed data in the {what} at offset {offset}")]
    Decompress {
        what: &'static str,
        algorithm: &'static str,
        offset: u64,
    },
    /// One compressed chunk of a CPU's pages that did not decompress; the chunks after it
    /// still can, so only its pages are lost.
    #[error("damaged compressed chunk at offset {offset} ({size} bytes of pages): {reason}")]
    DamagedChunk {
        offset: u64,
        size: u64,
        /// What is wrong with it, in words.
        reason: String,
    },
    #[error("writing {what}: {source}")]
    Write {
        what: &'static str,
        source: std::io::Error,
    },
    /// A zstd frame whose output does not match the checksum it carries.
    #[error("{what} at offset {offset}: zstd checksum mismatch: the data is damaged")]
    Checksum { what: &'static str, offset: u64 },
    /// Something wrong inside a compressed section, at an offset of its decompressed
    /// bytes: the file offset is where the section's compressed data starts.
    #[error("{inner} (offset in the section decompressed from file offset {section})")]
    InSection { section: u64, inner: Box<DatError> },
    #[error("{what}: decompressed to {found} bytes, the file says {expected}")]
    DecompressedSize {
        what: &'static str,
        found: u64,
        expected: u64,
    },
    #[error("{what} would decompress to {size} bytes, more than the {limit}-byte limit")]
    TooLarge {
        what: &'static str,
        size: u64,
        limit: u64,
    },
    #[error("{what} claims {size} bytes, more than the {limit}-byte limit for metadata")]
    MetadataTooLarge {
        what: &'static str,
        size: u64,
        limit: u64,
    },
    #[error("{what}: a zstd frame with a {window}-byte window, more than the {limit} bytes a chunk of pages needs")]
    WindowTooLarge {
        what: &'static str,
        window: u64,
        limit: u64,
    },
    #[error("section at offset {offset} has id {found}, its option says {expected}")]
    SectionId {
        offset: u64,
        found: u16,
        expected: u16,
    },
    #[error("options sections loop back to offset {0}")]
    OptionsLoop(u64),
    #[error("option {id}: {what}")]
    BadOption { id: u16, what: &'static str },
    #[error("the file has no {0}")]
    Missing(&'static str),
    #[error("{count} CPUs is more than the {limit} any kernel supports")]
    TooManyCpus { count: u64, limit: u32 },
    #[error("cpu{cpu} appears twice in buffer `{buffer}`")]
    DuplicateCpu { buffer: String, cpu: u32 },
    #[error("`{0}` cannot name a file in a trace directory")]
    BadName(String),
    #[error("{what}: {message}")]
    BadFormat { what: String, message: String },
    #[error("{}: exists and is not empty; extract into a new directory", .0.display())]
    OutputNotEmpty(PathBuf),
    #[error("no buffer in the file holds trace data")]
    NoData,
    #[error("several buffers hold trace data ({0}): pick one by name")]
    AmbiguousBuffer(String),
    #[error("the file has no buffer named `{0}`")]
    NoSuchBuffer(String),
    #[error("cpu{cpu} holds {size} bytes, not a whole number of {page_size}-byte pages")]
    PartialPage { cpu: u32, size: u64, page_size: u32 },
    #[error("meta.json: {0}")]
    Json(#[from] serde_json::Error),
}
