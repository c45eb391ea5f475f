//! Opening a trace directory (docs/trace-dir.md), or one buffer of a trace-cmd .dat file
//! where it lies, and decoding it into one time-ordered event stream.
//!
//! ```ignore
//! let decoder = Decoder::open(run_dir.join("trace"))?;
//! // or: Decoder::from_dat(Arc::new(DatFile::open(path)?), None)?
//! let summary = decoder.for_each(|event| match event.kind() {
//!     EventKind::ContentionBegin(begin) => { /* begin.lock_addr, event.ts(), event.pid() */ }
//!     EventKind::SchedSwitch(switch) => { /* switch.next_pid */ }
//!     _ => {}
//! })?;
//! ```

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use crate::catalog::{CatalogError, EventCatalog, EventType};
use crate::clock::{counts_nanoseconds, TimeConversion};
use crate::cpu_stream::{CpuStream, CpuSummary, StreamSetup};
use crate::dat::{Buffer, DatError, DatFile, Tsc2Nsec};
use crate::event::Event;
use crate::format::{EventFormat, FormatError, HeaderEvent, HeaderPage};
use crate::kallsyms::{Kallsyms, KallsymsError};
use crate::merge::EventStream;
use crate::page::{PageError, PageLayout};

/// Largest page size accepted from meta.json (the kernel's sub-buffers are at most a few
/// hundred KiB); it sizes a buffer, so it is bounded before use.
const MAX_PAGE_SIZE: usize = 16 << 20;
/// Page errors kept in a [`DecodeSummary`] (the rest are only counted).
const KEPT_ERRORS: usize = 16;
/// Bytes each CPU reads at a time: large enough that reads cost little per event.
const CHUNK_BYTES: usize = 256 << 10;
/// The read buffers of all CPUs together: every CPU reads [`CHUNK_BYTES`] at a time up to
/// 256 CPUs with data, fewer pages each beyond.
const BUFFER_BUDGET: usize = 64 << 20;
/// The merge holds at least one whole page of every CPU with data; a trace that would need
/// more than this at once is refused rather than allocated.
const MAX_PAGES_IN_MEMORY: usize = 256 << 20;

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
    /// A .dat file decoded in place: its container, or its pages as they are read.
    #[error(transparent)]
    Dat(#[from] DatError),
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
    /// What an extraction from a .dat file recorded about its times.
    #[serde(default)]
    dat: Option<DatTimes>,
}

/// The `dat` facts of an extracted directory's meta.json that change reported times.
#[derive(Debug, Clone, Deserialize)]
struct DatTimes {
    #[serde(default)]
    tsc2nsec: Option<Tsc2Nsec>,
    #[serde(default)]
    ts_offset_ns: Option<i64>,
}

/// Where the pages are.
#[derive(Debug)]
enum Origin {
    /// A trace directory: `cpu<N>.raw` files.
    Dir(PathBuf),
    /// `dat.buffers[buffer]` of a .dat file, read in place.
    Dat { dat: Arc<DatFile>, buffer: usize },
}

/// An opened trace: its layout, event types and CPUs.
#[derive(Debug)]
pub struct Decoder {
    origin: Origin,
    layout: PageLayout,
    cpus: Vec<u32>,
    clock: Option<String>,
    time: TimeConversion,
    catalog: EventCatalog,
    /// What the last complete [`Decoder::for_each`] saw.
    last: Mutex<Option<DecodeSummary>>,
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

    /// Records of `ftrace:kernel_stack`: nonzero exactly when kernel stacks were recorded.
    pub fn kernel_stacks(&self) -> u64 {
        self.cpus.iter().map(|c| c.kernel_stacks).sum()
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
        check_page_size(meta.page_size)?;
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
        let time = meta.dat.map_or_else(TimeConversion::default, |dat| {
            TimeConversion::new(dat.tsc2nsec, dat.ts_offset_ns.unwrap_or(0))
        });
        Ok(Decoder {
            origin: Origin::Dir(dir),
            layout,
            cpus,
            clock: meta.clock,
            time,
            catalog,
            last: Mutex::new(None),
        })
    }

    /// Decodes one buffer of a trace-cmd .dat file where it lies: `buffer` by name, or the
    /// one that holds data ([`DatFile::data_buffer`]). It decodes exactly what an
    /// extraction of the buffer into a trace directory would ([`DatFile::extract`]), but
    /// each CPU's pages are read out of the file as the stream advances, compressed ones
    /// decompressed a chunk at a time, so neither disk nor memory grows with the file.
    /// Headers, formats and kallsyms come from the file's metadata.
    pub fn from_dat(dat: Arc<DatFile>, buffer: Option<&str>) -> Result<Decoder, DecodeError> {
        let selected = dat.decodable_buffer(buffer)?;
        // An extraction refuses these before it writes a page, so they come first here too.
        let formats = dat.trace_formats()?;
        let page_size = selected.page_size as usize;
        check_page_size(page_size)?;
        let header_page = HeaderPage::parse(utf8("header_page", dat.header_page()?)?)
            .map_err(header_error("header_page"))?;
        let layout = PageLayout::new(&header_page, page_size)
            .ok_or(DecodeError::HeaderPageDoesNotFit(page_size))?;
        HeaderEvent::parse(utf8("header_event", dat.header_event()?)?)
            .and_then(|header| header.check_supported())
            .map_err(header_error("header_event"))?;
        let mut types = Vec::with_capacity(formats.len());
        for format in formats {
            let path = format!("formats/{}/{}", format.system, format.name);
            let text = std::str::from_utf8(&format.text).map_err(|_| CatalogError::Io {
                path: path.clone(),
                source: not_utf8(),
            })?;
            let parsed =
                EventFormat::parse(text).map_err(|source| CatalogError::Format { path, source })?;
            types.push(EventType::new(&format.system, parsed));
        }
        let catalog = EventCatalog::new(types)?;
        let cpus = dat.trace_cpus(selected);
        let clock = dat.clock(selected).unwrap_or_else(|| "local".to_string());
        let index = dat
            .buffers
            .iter()
            .position(|b| std::ptr::eq(b, selected))
            .ok_or(DatError::NoData)?;
        let time = dat.time_conversion();
        Ok(Decoder {
            origin: Origin::Dat { dat, buffer: index },
            layout,
            cpus,
            clock: Some(clock),
            time,
            catalog,
            last: Mutex::new(None),
        })
    }

    /// The trace directory, or the .dat file the trace is read from.
    pub fn dir(&self) -> &Path {
        match &self.origin {
            Origin::Dir(dir) => dir,
            Origin::Dat { dat, .. } => &dat.path,
        }
    }

    /// The .dat file and its buffer, for a decoder made by [`Decoder::from_dat`].
    pub fn dat(&self) -> Option<(&DatFile, &Buffer)> {
        match &self.origin {
            Origin::Dir(_) => None,
            Origin::Dat { dat, buffer } => Some((dat, dat.buffers.get(*buffer)?)),
        }
    }

    /// CPUs with a `cpu<N>.raw`, ascending.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// The trace clock (`mono`), if meta.json names it.
    pub fn clock(&self) -> Option<&str> {
        self.clock.as_deref()
    }

    /// What the decoder does to the pages' times before handing events out.
    pub fn time_conversion(&self) -> TimeConversion {
        self.time
    }

    /// Whether event times are nanoseconds: the clock counts them, or a TSC2NSEC
    /// conversion makes them. Unknown (no clock recorded) counts as nanoseconds.
    pub fn times_in_ns(&self) -> bool {
        self.time.tsc2nsec.is_some() || self.clock.as_deref().is_none_or(counts_nanoseconds)
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
        match &self.origin {
            Origin::Dir(dir) => Ok(Kallsyms::load(&dir.join("kallsyms"))?),
            Origin::Dat { dat, .. } => {
                let text =
                    std::str::from_utf8(&dat.metadata.kallsyms).map_err(|_| KallsymsError::Io {
                        path: "kallsyms".into(),
                        source: not_utf8(),
                    })?;
                Ok(Kallsyms::parse(text)?)
            }
        }
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
        let inputs = wanted
            .into_iter()
            .map(|cpu| {
                if !self.cpus.contains(&cpu) {
                    return Err(DecodeError::NoSuchCpu(cpu));
                }
                let (input, has_data) = self.pages_of(cpu)?;
                Ok((cpu, input, has_data))
            })
            .collect::<Result<Vec<_>, DecodeError>>()?;
        let with_data = inputs.iter().filter(|(_, _, has_data)| *has_data).count();
        let setup = StreamSetup {
            layout: self.layout,
            common_len: self.catalog.common().len,
            common_type_offset: self.catalog.common().common_type.offset,
            buffer_bytes: self.buffer_bytes(with_data)?,
            stack_id: self
                .catalog
                .find("ftrace", "kernel_stack")
                .map(|t| t.format.id),
        };
        let streams = inputs
            .into_iter()
            .map(|(cpu, input, _)| CpuStream::new(input, cpu, setup))
            .collect();
        Ok(EventStream::new(&self.catalog, streams, self.time))
    }

    /// One CPU's pages as a byte stream, and whether there are any.
    fn pages_of(&self, cpu: u32) -> Result<(Box<dyn Read + Send + '_>, bool), DecodeError> {
        match &self.origin {
            Origin::Dir(dir) => {
                let path = dir.join(format!("cpu{cpu}.raw"));
                let file = std::fs::File::open(&path).map_err(|source| DecodeError::Io {
                    path: path.display().to_string(),
                    source,
                })?;
                let has_data = file.metadata().map_or(true, |m| m.len() > 0);
                Ok((Box::new(file), has_data))
            }
            Origin::Dat { dat, buffer } => {
                let buffer = dat.buffers.get(*buffer).ok_or(DatError::NoData)?;
                let has_data = buffer.cpu(cpu).is_some_and(|data| data.size > 0);
                Ok((dat.cpu_pages(buffer, cpu)?, has_data))
            }
        }
    }

    /// The read buffer of each CPU: [`CHUNK_BYTES`] while the CPUs with data fit the
    /// budget, fewer whole pages each beyond it, never less than one page.
    fn buffer_bytes(&self, with_data: usize) -> Result<usize, DecodeError> {
        let page_size = self.layout.page_size;
        if with_data.saturating_mul(page_size) > MAX_PAGES_IN_MEMORY {
            return Err(DecodeError::TooManyPages {
                cpus: with_data,
                page_size,
                limit: MAX_PAGES_IN_MEMORY,
            });
        }
        let most = (CHUNK_BYTES / page_size).max(1);
        let pages = (BUFFER_BUDGET / with_data.max(1) / page_size).clamp(1, most);
        Ok(pages * page_size)
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
        let summary = DecodeSummary {
            cpus: stream.summaries(),
            errors,
        };
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(summary.clone());
        Ok(summary)
    }

    /// What the last complete [`Decoder::for_each`] saw, for a caller that decoded through
    /// a function that keeps the summary to itself.
    pub fn last_summary(&self) -> Option<DecodeSummary> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn check_page_size(page_size: usize) -> Result<(), DecodeError> {
    if !page_size.is_power_of_two() || !(64..=MAX_PAGE_SIZE).contains(&page_size) {
        return Err(DecodeError::PageSize(page_size));
    }
    Ok(())
}

fn header_error(name: &'static str) -> impl Fn(FormatError) -> DecodeError {
    move |source| DecodeError::Header {
        path: name.to_string(),
        source,
    }
}

/// Text from a .dat's metadata, refused when not UTF-8 as reading the extracted file
/// would refuse it.
fn utf8<'a>(name: &str, bytes: &'a [u8]) -> Result<&'a str, DecodeError> {
    std::str::from_utf8(bytes).map_err(|_| DecodeError::Io {
        path: name.to_string(),
        source: not_utf8(),
    })
}

fn not_utf8() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "stream did not contain valid UTF-8",
    )
}
