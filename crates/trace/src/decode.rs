//! Opening a trace directory (docs/trace-dir.md) and decoding it into one time-ordered
//! event stream.
//!
//! ```ignore
//! let decoder = Decoder::open(run_dir.join("trace"))?;
//! let summary = decoder.for_each(|event| match event.kind() {
//!     EventKind::ContentionBegin(begin) => { /* begin.lock_addr, event.ts(), event.pid() */ }
//!     EventKind::SchedSwitch(switch) => { /* switch.next_pid */ }
//!     _ => {}
//! })?;
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::catalog::{CatalogError, EventCatalog};
use crate::cpu_stream::{CpuStream, CpuSummary};
use crate::event::Event;
use crate::format::{FormatError, HeaderEvent, HeaderPage};
use crate::kallsyms::{Kallsyms, KallsymsError};
use crate::merge::EventStream;
use crate::page::{PageError, PageLayout};

/// Largest page size accepted from meta.json (the kernel's sub-buffers are at most a few
/// hundred KiB); it sizes a buffer, so it is bounded before use.
const MAX_PAGE_SIZE: usize = 16 << 20;
/// Page errors kept in a [`DecodeSummary`] (the rest are only counted).
const KEPT_ERRORS: usize = 16;

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
        )
    }
}

/// The part of meta.json decoding needs; the rest belongs to the recorder.
#[derive(Debug, Clone, Deserialize)]
struct DirMeta {
    page_size: usize,
    cpus: Vec<u32>,
    #[serde(default)]
    clock: Option<String>,
}

/// An opened trace directory: its layout, event types and CPUs.
#[derive(Debug)]
pub struct Decoder {
    dir: PathBuf,
    layout: PageLayout,
    cpus: Vec<u32>,
    clock: Option<String>,
    catalog: EventCatalog,
}

/// What a whole decode saw.
#[derive(Debug, Clone, Default)]
pub struct DecodeSummary {
    pub cpus: Vec<CpuSummary>,
    /// The first few page errors, as text (all of them are counted in `cpus`).
    pub errors: Vec<String>,
}

impl DecodeSummary {
    pub fn events(&self) -> u64 {
        self.cpus.iter().map(|c| c.events).sum()
    }

    pub fn corrupt_pages(&self) -> u64 {
        self.cpus.iter().map(|c| c.corrupt_pages).sum()
    }

    /// Events the kernel reported dropping (stored counts on pages after a loss).
    pub fn missed_events(&self) -> u64 {
        self.cpus.iter().map(|c| c.missed_events).sum()
    }
}

impl Decoder {
    /// Reads meta.json, header_page, header_event and formats/ of `dir`. The per-CPU files
    /// are opened by [`Decoder::events`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Decoder, DecodeError> {
        let dir = dir.as_ref().to_path_buf();
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| DecodeError::Io {
                path: path.display().to_string(),
                source,
            })
        };
        let header_error = |name: &str| {
            let path = dir.join(name).display().to_string();
            move |source| DecodeError::Header { path, source }
        };
        let meta: DirMeta =
            serde_json::from_str(&read("meta.json")?).map_err(|source| DecodeError::Meta {
                path: dir.join("meta.json").display().to_string(),
                source,
            })?;
        if !meta.page_size.is_power_of_two() || !(64..=MAX_PAGE_SIZE).contains(&meta.page_size) {
            return Err(DecodeError::PageSize(meta.page_size));
        }
        let mut cpus = meta.cpus.clone();
        cpus.sort_unstable();
        if let Some(pair) = cpus.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(DecodeError::DuplicateCpu(pair[0]));
        }
        let header_page =
            HeaderPage::parse(&read("header_page")?).map_err(header_error("header_page"))?;
        let layout = PageLayout::new(&header_page, meta.page_size)
            .ok_or(DecodeError::HeaderPageDoesNotFit(meta.page_size))?;
        HeaderEvent::parse(&read("header_event")?)
            .and_then(|header| header.check_supported())
            .map_err(header_error("header_event"))?;
        let catalog = EventCatalog::load(&dir.join("formats"))?;
        Ok(Decoder {
            dir,
            layout,
            cpus,
            clock: meta.clock,
            catalog,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// CPUs with a `cpu<N>.raw`, ascending.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// The trace clock (`mono`), if meta.json names it.
    pub fn clock(&self) -> Option<&str> {
        self.clock.as_deref()
    }

    pub fn page_layout(&self) -> &PageLayout {
        &self.layout
    }

    /// The event types of this trace.
    pub fn catalog(&self) -> &EventCatalog {
        &self.catalog
    }

    /// The trace's kallsyms snapshot.
    pub fn kallsyms(&self) -> Result<Kallsyms, DecodeError> {
        Ok(Kallsyms::load(&self.dir.join("kallsyms"))?)
    }

    /// All CPUs' events merged in time order.
    pub fn events(&self) -> Result<EventStream<'_>, DecodeError> {
        self.events_on(&self.cpus)
    }

    /// The events of some CPUs only, merged in time order.
    pub fn events_on(&self, cpus: &[u32]) -> Result<EventStream<'_>, DecodeError> {
        let mut wanted = cpus.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let streams = wanted
            .into_iter()
            .map(|cpu| {
                if !self.cpus.contains(&cpu) {
                    return Err(DecodeError::NoSuchCpu(cpu));
                }
                let path = self.dir.join(format!("cpu{cpu}.raw"));
                CpuStream::open(&path, cpu, self.layout, self.catalog.common().len)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EventStream::new(&self.catalog, streams))
    }

    /// Calls `f` for every event in time order. Damaged pages are skipped and counted in
    /// the summary; a failed read ends the decode with an error.
    pub fn for_each(&self, mut f: impl FnMut(Event<'_>)) -> Result<DecodeSummary, DecodeError> {
        let mut stream = self.events()?;
        let mut errors = Vec::new();
        while let Some(next) = stream.next_event() {
            match next {
                Ok(event) => f(event),
                Err(error) if error.is_fatal() => return Err(error),
                Err(error) => {
                    if errors.len() < KEPT_ERRORS {
                        errors.push(error.to_string());
                    }
                }
            }
        }
        Ok(DecodeSummary {
            cpus: stream.summaries(),
            errors,
        })
    }
}
