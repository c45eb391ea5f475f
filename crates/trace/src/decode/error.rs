//! What can go wrong while decoding: kept apart from the decoder so that the modules it
//! drives (the per-CPU streams, the merge) name their errors without importing it.

use crate::dat::DatError;
use crate::decode::catalog::CatalogError;
use crate::decode::format::FormatError;
use crate::decode::kallsyms::KallsymsError;
use crate::decode::page::PageError;

/// A trace directory that cannot be decoded, or a part of it that did not decode.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Meta {
        path: String,
        source: serde_json::Error,
    },
    #[error("meta.json: page_size {0} is not a power of two between 64 and 16 MiB")]
    PageSize(usize),
    #[error(
        "meta.json cannot be used and header_page gives a page size of {0} bytes, not a power \
         of two between 64 and 16 MiB"
    )]
    InferredPageSize(usize),
    #[error("meta.json: cpu {0} appears twice")]
    DuplicateCpu(u32),
    #[error("{path}: {source}")]
    Header { path: String, source: FormatError },
    #[error("header_page does not fit a page of {0} bytes")]
    HeaderPageDoesNotFit(usize),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("cpu {0} is not in this trace")]
    NoSuchCpu(u32),
    #[error("cpu{cpu}.raw page {page}: {source}")]
    Page {
        cpu: u32,
        page: u64,
        source: PageError,
    },
    #[error("cpu{cpu}.raw page {page}: record at data offset {offset} has {len} bytes, less than the common fields")]
    ShortRecord {
        cpu: u32,
        page: u64,
        offset: usize,
        len: usize,
    },
    #[error("cpu{cpu}.raw ends in a partial page of {bytes} bytes")]
    PartialPage { cpu: u32, bytes: usize },
    #[error("cpu{cpu}.raw: {source}")]
    Read { cpu: u32, source: std::io::Error },
    #[error(transparent)]
    Kallsyms(#[from] KallsymsError),
    /// A .dat file decoded in place: its container, or its pages as they are read.
    #[error(transparent)]
    Dat(#[from] DatError),
    /// Part of one CPU's pages in a .dat file could not be read: a damaged compressed
    /// chunk (the pages after it are still decoded), or damage after which nothing more
    /// of that CPU's data can be found (`rest_lost`). The other CPUs go on.
    #[error("cpu{cpu}: {source}{}", if *rest_lost { "; the rest of this CPU's data is lost" } else { "; its pages were skipped" })]
    CpuDataLost {
        cpu: u32,
        source: DatError,
        rest_lost: bool,
    },
    #[error(
        "{cpus} CPUs with {page_size}-byte pages need more than {limit} bytes of pages at once"
    )]
    TooManyPages {
        cpus: usize,
        page_size: usize,
        limit: usize,
    },
}

impl DecodeError {
    /// True when the stream cannot go on (a failed read); false for damage confined to a
    /// page, after which decoding continues.
    pub fn is_fatal(&self) -> bool {
        !matches!(
            self,
            DecodeError::Page { .. }
                | DecodeError::ShortRecord { .. }
                | DecodeError::PartialPage { .. }
                | DecodeError::CpuDataLost { .. }
        )
    }
}
