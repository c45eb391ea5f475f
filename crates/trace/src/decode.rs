//! Opening a trace directory (docs/trace-dir.md), or one buffer of a trace-cmd .dat file
//! where it lies, and decoding it into one time-ordered event stream.
//!
//! ```no_run
//! # use std::path::Path;
//! # use vmscale_trace::{Decoder, EventKind};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let run_dir = Path::new("run");
//! let decoder = Decoder::open(run_dir.join("trace"))?;
//! // or: Decoder::from_dat(Arc::new(DatFile::open(path)?), None)?
//! let summary = decoder.for_each(|event| match event.kind() {
//!     EventKind::ContentionBegin(begin) => { /* begin.lock_addr, event.ts(), event.pid() */ }
//!     EventKind::SchedSwitch(switch) => { /* switch.next_pid */ }
//!     _ => {}
//! })?;
//! # let _ = summary;
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use vmscale_sys::bounded;

use serde::Deserialize;

pub mod catalog;
pub mod clock;
mod cpu_stream;
pub mod error;
pub mod event;
pub mod field;
pub mod format;
pub mod kallsyms;
pub mod merge;
pub mod page;
mod pipeline;
pub mod printk;
pub mod views;

pub use cpu_stream::{CpuSummary, LossPoint};
pub use error::DecodeError;

use crate::dat::{Buffer, DatError, DatFile, Tsc2Nsec};
use crate::mapped::MappedFile;
use catalog::{CatalogError, DamagedFormat, EventCatalog, EventType};
use clock::{counts_nanoseconds, TimeConversion};
use cpu_stream::{Batch, CpuStream, PageInput, StreamSetup};
use event::Event;
use format::{EventFormat, FormatError, HeaderEvent, HeaderPage};
use kallsyms::{Kallsyms, KallsymsError};
use merge::{EventStream, Lane};
use page::PageLayout;
pub use printk::PrintkStrings;

/// The trace directory's copy of tracefs' `printk_formats` ([`Decoder::printk_strings`]).
pub const PRINTK_FORMATS_FILE: &str = "printk_formats";

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
/// Bytes of mapped pages one batch covers: small enough that a batch's records and the
/// pages they point into are still in the cache when the merge reads them.
const MAPPED_BATCH_BYTES: usize = 256 << 10;
/// Batches a CPU decoded on its own thread may have ready before the merge reads them.
const BATCHES_IN_FLIGHT: usize = 2;
/// Read buffers a CPU decoded on its own thread holds at most ([`decode_ahead`]).
const BUFFERS_PER_THREAD: usize = BATCHES_IN_FLIGHT + 3;
/// The merge holds at least one whole page of every CPU with data; a trace that would need
/// more than this at once is refused rather than allocated.
const MAX_PAGES_IN_MEMORY: usize = 256 << 20;

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
    /// `system:event` names enabled: their formats should be in formats/.
    #[serde(default)]
    events: Vec<String>,
    #[serde(default)]
    stacks: bool,
    /// Pages the recorder wrote per CPU (absent in directories not written by it).
    #[serde(default)]
    pages: Option<BTreeMap<String, u64>>,
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
    /// Threads [`Decoder::for_each`] may use.
    threads: usize,
    /// How pages that could be mapped are read ([`PageAccess`]).
    access: PageAccess,
}

/// How a decode reaches pages that lie uncompressed in a file (a trace directory's
/// `cpu<N>.raw`, an uncompressed little-endian .dat); compressed and big-endian pages are
/// always read through their conversion.
///
/// Both keep memory flat in the trace's size. Which is faster depends on what the host
/// charges for page tables and on how the file lies in the page cache: `bench/decode`
/// measures both. Where this project is built (a nested host, each page-table update a
/// trap to the hypervisor), reading was never slower: `read(2)` copies through the
/// kernel's own mapping into a buffer that stays in cache for the decode, where a mapping
/// costs a page-table update per page to map it and another to give it back, and a cache
/// miss at the first touch of each line (docs/trace-dir.md has the numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageAccess {
    /// Read a chunk at a time into a buffer that is reused.
    #[default]
    Read,
    /// Decoded where they lie in a read-only mapping of the file ([`crate::mapped`]);
    /// with more than one thread, [`Decoder::for_each_overlapped`] then decodes and merges
    /// on one thread while the caller's work runs on its own.
    Mapped,
}

/// What a whole decode saw.
#[derive(Debug, Clone, Default)]
pub struct DecodeSummary {
    pub cpus: Vec<CpuSummary>,
    /// The first few page errors, as text (all of them are counted in `cpus`).
    pub errors: Vec<String>,
    /// Events whose type id has no format, so nothing of them but the id, time, CPU and
    /// pid could be read: how many of each id.
    pub unknown_types: BTreeMap<u16, u64>,
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

    /// Events of types without a format.
    pub fn unknown_events(&self) -> u64 {
        self.unknown_types.values().sum()
    }

    /// Records of `ftrace:kernel_stack`: nonzero exactly when kernel stacks were recorded.
    pub fn kernel_stacks(&self) -> u64 {
        self.cpus.iter().map(|c| c.kernel_stacks).sum()
    }

    /// Bytes of pages that never reached the decoder (damaged chunks, data cut short).
    pub fn lost_bytes(&self) -> u64 {
        self.cpus.iter().map(|c| c.lost_bytes).sum()
    }

    /// One line per CPU whose data was damaged: how many of its pages (and bytes) were
    /// lost or skipped, the first damage, and what was still decoded. `page_size` turns
    /// lost bytes into pages.
    pub fn damage_warnings(&self, page_size: usize) -> Vec<String> {
        let page_size = page_size.max(1) as u64;
        self.cpus
            .iter()
            .filter(|c| c.first_damage.is_some())
            .map(|c| {
                let lost_pages = c.lost_bytes.div_ceil(page_size);
                let damaged = lost_pages + c.corrupt_pages;
                let total = c.pages + lost_pages;
                let unknown = if c.rest_unknown {
                    ", and an unknown amount after them"
                } else {
                    ""
                };
                format!(
                    "cpu{}: {damaged} of {total} pages ({}) could not be read{unknown} \
                     (first: {}); {} events from the other pages were decoded",
                    c.cpu,
                    vmscale_stats::units::kib(damaged * page_size),
                    c.first_damage.as_deref().unwrap_or("unknown damage"),
                    c.events
                )
            })
            .collect()
    }
}

/// What [`Decoder::open_damaged`] found missing or damaged in a trace directory and
/// decoded around. For a whole directory: no `meta`, no formats listed, and every CPU's
/// file present.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirDamage {
    /// Why meta.json could not be used, if it could not: the page size and the CPUs were
    /// then inferred, and the enabled events and the pages written are unknown.
    pub meta: Option<MetaDamage>,
    /// Every CPU of the trace (meta.json's, else the files found), with its file's size.
    pub cpu_files: Vec<CpuFile>,
    /// Formats of enabled events that are not there, as paths in the directory:
    /// `formats/<system>` when the whole system is absent, else `formats/<system>/<event>`
    /// (`formats` when none is).
    pub missing_formats: Vec<String>,
    /// Format files that are there but could not be used.
    pub damaged_formats: Vec<DamagedFormat>,
}

/// Why meta.json could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaDamage {
    Missing,
    Unreadable(String),
    /// Not JSON, or not meta.json's fields.
    Invalid(String),
}

/// One CPU's `cpu<N>.raw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuFile {
    pub cpu: u32,
    /// Its size; `None` when the file is missing (the CPU is then left out).
    pub bytes: Option<u64>,
    /// Pages the recorder wrote to it, when meta.json says.
    pub recorded_pages: Option<u64>,
}

/// CPU numbers of the `cpu<N>.raw` files in `dir`.
fn cpu_files_in(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name();
            let name = name.to_str()?;
            name.strip_prefix("cpu")?.strip_suffix(".raw")?.parse().ok()
        })
        .collect()
}

/// The formats meta.json's events (and the kernel_stack of recorded stacks) call for that
/// are neither in the catalog nor among the damaged files, each once.
fn missing_formats(
    dir: &Path,
    meta: &DirMeta,
    catalog: &EventCatalog,
    damaged: &[DamagedFormat],
) -> Vec<String> {
    let stacks = meta.stacks.then(|| "ftrace:kernel_stack".to_string());
    let mut missing: Vec<String> = Vec::new();
    for event in meta.events.iter().chain(stacks.as_ref()) {
        let (system, name) = event.split_once(':').unwrap_or((event, "*"));
        let wildcard = name == "*";
        let present = if wildcard {
            catalog.iter().any(|t| t.system == system)
        } else {
            catalog.find(system, name).is_some()
        };
        let is_damaged = damaged
            .iter()
            .any(|d| d.system == system && (wildcard || d.event == name));
        if present || is_damaged {
            continue;
        }
        let path = if !dir.join("formats").is_dir() {
            "formats".to_string()
        } else if wildcard || !dir.join("formats").join(system).is_dir() {
            format!("formats/{system}")
        } else {
            format!("formats/{system}/{name}")
        };
        if !missing.contains(&path) {
            missing.push(path);
        }
    }
    missing
}

impl Decoder {
    /// Reads meta.json, header_page, header_event and formats/ of `dir`. The per-CPU files
    /// are opened by [`Decoder::events`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Decoder, DecodeError> {
        Decoder::open_dir(dir.as_ref(), false).map(|(decoder, _)| decoder)
    }

    /// [`Decoder::open`] for a directory that may be damaged: what can be done without is
    /// left out or inferred, and said in the [`DirDamage`]. Without a usable meta.json the
    /// page size comes from header_page and the CPUs from the `cpu<N>.raw` files present;
    /// a CPU whose file is missing is left out; a format file that is missing or does not
    /// parse leaves its events undecoded (`unknown`). header_page and header_event are
    /// still needed: nothing decodes without them.
    pub fn open_damaged(dir: impl AsRef<Path>) -> Result<(Decoder, DirDamage), DecodeError> {
        Decoder::open_dir(dir.as_ref(), true)
    }

    fn open_dir(dir: &Path, tolerate: bool) -> Result<(Decoder, DirDamage), DecodeError> {
        let dir = dir.to_path_buf();
        let read = |name: &str| {
            let path = dir.join(name);
            bounded::read_regular_string(&path, bounded::MAX_METADATA_BYTES).map_err(|source| {
                DecodeError::Io {
                    path: path.display().to_string(),
                    source,
                }
            })
        };
        let header_error = |name: &str| {
            let path = dir.join(name).display().to_string();
            move |source| DecodeError::Header { path, source }
        };
        let mut damage = DirDamage::default();
        let meta = match read("meta.json").and_then(|text| {
            serde_json::from_str::<DirMeta>(&text).map_err(|source| DecodeError::Meta {
                path: dir.join("meta.json").display().to_string(),
                source,
            })
        }) {
            Ok(meta) => Some(meta),
            Err(error) if tolerate => {
                damage.meta = Some(match error {
                    DecodeError::Io { source, .. }
                        if source.kind() == std::io::ErrorKind::NotFound =>
                    {
                        MetaDamage::Missing
                    }
                    DecodeError::Io { source, .. } => MetaDamage::Unreadable(source.to_string()),
                    DecodeError::Meta { source, .. } => MetaDamage::Invalid(source.to_string()),
                    other => MetaDamage::Unreadable(other.to_string()),
                });
                None
            }
            Err(error) => return Err(error),
        };
        let header_page =
            HeaderPage::parse(&read("header_page")?).map_err(header_error("header_page"))?;
        let page_size = match &meta {
            Some(meta) => {
                check_page_size(meta.page_size)?;
                meta.page_size
            }
            None => {
                let inferred = header_page.data_offset + header_page.data_size;
                check_page_size(inferred).map_err(|_| DecodeError::InferredPageSize(inferred))?;
                inferred
            }
        };
        let mut cpus = match &meta {
            Some(meta) => meta.cpus.clone(),
            None => cpu_files_in(&dir),
        };
        cpus.sort_unstable();
        if let Some(pair) = cpus.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(DecodeError::DuplicateCpu(pair[0]));
        }
        let layout = PageLayout::new(&header_page, page_size)
            .ok_or(DecodeError::HeaderPageDoesNotFit(page_size))?;
        HeaderEvent::parse(&read("header_event")?)
            .and_then(|header| header.check_supported())
            .map_err(header_error("header_event"))?;
        let formats = dir.join("formats");
        let catalog = if tolerate {
            let (catalog, damaged) = EventCatalog::load_damaged(&formats)?;
            damage.damaged_formats = damaged;
            catalog
        } else {
            EventCatalog::load(&formats)?
        };
        if tolerate {
            let recorded = meta.as_ref().and_then(|m| m.pages.as_ref());
            damage.cpu_files = cpus
                .iter()
                .map(|&cpu| CpuFile {
                    cpu,
                    bytes: std::fs::metadata(dir.join(format!("cpu{cpu}.raw")))
                        .ok()
                        .map(|m| m.len()),
                    recorded_pages: recorded.and_then(|pages| pages.get(&cpu.to_string()).copied()),
                })
                .collect();
            cpus.retain(|&cpu| {
                damage
                    .cpu_files
                    .iter()
                    .any(|f| f.cpu == cpu && f.bytes.is_some())
            });
            if let Some(meta) = &meta {
                damage.missing_formats =
                    missing_formats(&dir, meta, &catalog, &damage.damaged_formats);
            }
        }
        let time = meta
            .as_ref()
            .and_then(|meta| meta.dat.as_ref())
            .map_or_else(TimeConversion::default, |dat| {
                TimeConversion::new(dat.tsc2nsec, dat.ts_offset_ns.unwrap_or(0))
            });
        let decoder = Decoder {
            origin: Origin::Dir(dir),
            layout,
            cpus,
            clock: meta.and_then(|meta| meta.clock),
            time,
            catalog,
            last: Mutex::new(None),
            threads: available_threads(),
            access: PageAccess::default(),
        };
        Ok((decoder, damage))
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
            threads: available_threads(),
            access: PageAccess::default(),
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

    /// The trace's printk strings (what `const char *` fields point at): the directory's
    /// `printk_formats`, or the .dat's copy. Empty when the trace has none; a field that
    /// needs one then shows its address.
    pub fn printk_strings(&self) -> PrintkStrings {
        match &self.origin {
            Origin::Dir(dir) => bounded::read_regular_string(
                &dir.join(PRINTK_FORMATS_FILE),
                bounded::MAX_METADATA_BYTES,
            )
            .map(|text| PrintkStrings::parse(&text))
            .unwrap_or_default(),
            Origin::Dat { dat, .. } => {
                PrintkStrings::parse(&String::from_utf8_lossy(&dat.metadata.printk_formats))
            }
        }
    }

    /// All CPUs' events merged in time order.
    pub fn events(&self) -> Result<EventStream<'_>, DecodeError> {
        self.events_on(&self.cpus)
    }

    /// The events of some CPUs only, merged in time order.
    pub fn events_on(&self, cpus: &[u32]) -> Result<EventStream<'_>, DecodeError> {
        let streams = self.streams(cpus, 1)?;
        let lanes = streams.into_iter().map(|(stream, _)| Lane::here(stream));
        Ok(EventStream::new(&self.catalog, lanes.collect(), self.time))
    }

    /// One stream per CPU of `cpus`, each with whether it may hold data, each reading
    /// `batches` buffers at a time (the budget of read buffers is shared among them).
    fn streams(
        &self,
        cpus: &[u32],
        batches: usize,
    ) -> Result<Vec<(CpuStream<'_>, bool)>, DecodeError> {
        let mut wanted = cpus.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let inputs = wanted
            .into_iter()
            .map(|cpu| {
                if !self.cpus.contains(&cpu) {
                    return Err(DecodeError::NoSuchCpu(cpu));
                }
                let (input, expected) = self.pages_of(cpu)?;
                Ok((cpu, input, expected))
            })
            .collect::<Result<Vec<_>, DecodeError>>()?;
        let with_data = inputs
            .iter()
            .filter(|(_, _, expected)| expected.is_none_or(|bytes| bytes > 0))
            .count();
        let common = self.catalog.common();
        let setup = StreamSetup {
            layout: self.layout,
            common_len: common.len,
            common_type_offset: common.common_type.offset,
            common_pid_offset: common.common_pid.offset,
            buffer_bytes: self.buffer_bytes(with_data, batches)?,
            mapped_batch_bytes: MAPPED_BATCH_BYTES.max(self.layout.page_size),
            stack_id: self
                .catalog
                .find("ftrace", "kernel_stack")
                .map(|t| t.format.id),
        };
        Ok(inputs
            .into_iter()
            .map(|(cpu, input, expected)| {
                let data = expected.is_none_or(|bytes| bytes > 0);
                (CpuStream::new(input, cpu, expected, setup), data)
            })
            .collect())
    }

    /// One CPU's pages, mapped where they can be when [`PageAccess::Mapped`] asks, else as a
    /// byte stream, and how many bytes of pages they should yield (`None`: unknown, but
    /// some).
    fn pages_of(&self, cpu: u32) -> Result<(PageInput<'_>, Option<u64>), DecodeError> {
        match &self.origin {
            Origin::Dir(dir) => {
                let path = dir.join(format!("cpu{cpu}.raw"));
                let file = bounded::open_regular(&path).map_err(|source| DecodeError::Io {
                    path: path.display().to_string(),
                    source,
                })?;
                let bytes = file.metadata().ok().map(|m| m.len());
                let mapped = bytes
                    .filter(|_| self.access == PageAccess::Mapped)
                    .and_then(|len| MappedFile::map(&file, len)?.range(0, len))
                    .map(PageInput::Mapped);
                Ok((
                    mapped.unwrap_or_else(|| PageInput::Stream(Box::new(file))),
                    bytes,
                ))
            }
            Origin::Dat { dat, buffer } => {
                let buffer = dat.buffers.get(*buffer).ok_or(DatError::NoData)?;
                // What the file lists, including pages a cut took away: the stream that
                // ends short of it reports them.
                let bytes = buffer
                    .cpu(cpu)
                    .map_or(0, |data| data.size.saturating_add(data.missing));
                let mapped = match self.access {
                    PageAccess::Mapped => dat.cpu_pages_mapped(buffer, cpu),
                    PageAccess::Read => None,
                };
                let input = match mapped {
                    Some(mapped) => PageInput::Mapped(mapped),
                    None => PageInput::Stream(dat.cpu_pages(buffer, cpu)?),
                };
                Ok((input, Some(bytes)))
            }
        }
    }

    /// The read buffer of each CPU, when each holds `batches` of them at once:
    /// [`CHUNK_BYTES`] while the CPUs with data fit the budget, fewer whole pages each
    /// beyond it, never less than one page.
    fn buffer_bytes(&self, with_data: usize, batches: usize) -> Result<usize, DecodeError> {
        let page_size = self.layout.page_size;
        if with_data.saturating_mul(page_size) > MAX_PAGES_IN_MEMORY {
            return Err(DecodeError::TooManyPages {
                cpus: with_data,
                page_size,
                limit: MAX_PAGES_IN_MEMORY,
            });
        }
        let most = (CHUNK_BYTES / page_size).max(1);
        let buffers = with_data.max(1).saturating_mul(batches.max(1));
        let pages = (BUFFER_BUDGET / buffers / page_size).clamp(1, most);
        Ok(pages * page_size)
    }

    /// Calls `f` for every event in time order. Damaged pages are skipped and counted in
    /// the summary; a failed read ends the decode with an error.
    ///
    /// With more than one thread ([`Decoder::with_threads`]) each CPU's pages are read
    /// and decoded on a thread of their own, a few batches ahead of the merge, which runs
    /// `f` on the calling thread; the events, errors and summary are the same either way.
    /// For an `f` that does about as much work per event as the decode, use
    /// [`Decoder::for_each_overlapped`].
    pub fn for_each(&self, f: impl FnMut(Event<'_>)) -> Result<DecodeSummary, DecodeError> {
        if self.threads <= 1 {
            let stream = self.events()?;
            return self.drain(stream, f);
        }
        self.for_each_per_cpu(f)
    }

    /// [`Decoder::for_each`] for an `f` that works on every event about as long as the
    /// decode takes (an analysis): with more than one thread, when every CPU's pages are
    /// mapped, one thread decodes and merges them all while `f` runs on the calling thread
    /// (`pipeline`), so the two overlap; else as [`Decoder::for_each`]. Handing events to
    /// another thread costs more than a light `f` saves, hence two ways. The events,
    /// errors and summary are the same every way.
    pub fn for_each_overlapped(
        &self,
        f: impl FnMut(Event<'_>),
    ) -> Result<DecodeSummary, DecodeError> {
        if self.threads <= 1 {
            let stream = self.events()?;
            return self.drain(stream, f);
        }
        let streams = self.streams(&self.cpus, 1)?;
        let has_data: Vec<bool> = streams.iter().map(|(_, data)| *data).collect();
        let lanes = streams.into_iter().map(|(stream, _)| Lane::here(stream));
        let stream = EventStream::new(&self.catalog, lanes.collect(), self.time);
        if let Some(mappings) = pipeline::mappings_of(&stream, &has_data) {
            return self.drain_pipelined(stream, mappings, f);
        }
        drop(stream);
        self.for_each_per_cpu(f)
    }

    /// Each CPU with data decoded on a thread of its own, merged on the calling thread.
    fn for_each_per_cpu(&self, f: impl FnMut(Event<'_>)) -> Result<DecodeSummary, DecodeError> {
        let streams = self.streams(&self.cpus, BUFFERS_PER_THREAD)?;
        std::thread::scope(|scope| {
            let mut lanes = Vec::with_capacity(streams.len());
            for (stream, data) in streams {
                if !data {
                    lanes.push(Lane::here(stream));
                    continue;
                }
                let cpu = stream.cpu();
                let (batches, received) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
                let (spent, returned) = std::sync::mpsc::channel();
                std::thread::Builder::new()
                    .name(format!("decode-cpu{cpu}"))
                    .spawn_scoped(scope, move || decode_ahead(stream, batches, returned))
                    .map_err(|source| DecodeError::Read { cpu, source })?;
                lanes.push(Lane::threaded(cpu, received, spent));
            }
            self.drain(EventStream::new(&self.catalog, lanes, self.time), f)
        })
    }

    /// The decoder reaching pages that could be mapped as `access` says.
    pub fn with_page_access(mut self, access: PageAccess) -> Decoder {
        self.access = access;
        self
    }

    /// How many threads [`Decoder::for_each`] may use.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The decoder with [`Decoder::for_each`] using up to `threads` threads: 1 decodes
    /// everything on the calling thread; more decode each CPU with data on a thread of its
    /// own. The default is the machine's available parallelism.
    pub fn with_threads(mut self, threads: usize) -> Decoder {
        self.threads = threads.max(1);
        self
    }

    fn drain(
        &self,
        mut stream: EventStream<'_>,
        mut f: impl FnMut(Event<'_>),
    ) -> Result<DecodeSummary, DecodeError> {
        let mut errors = Vec::new();
        let mut unknown_types = BTreeMap::new();
        while let Some(next) = stream.next_event() {
            match next {
                Ok(event) => {
                    if self.catalog.is_unknown(event.event_type()) {
                        *unknown_types.entry(event.id()).or_default() += 1;
                    }
                    f(event)
                }
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
            unknown_types,
        };
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(summary.clone());
        Ok(summary)
    }

    /// [`Decoder::drain`] with the stream decoded on a thread of its own.
    fn drain_pipelined(
        &self,
        stream: EventStream<'_>,
        mappings: Vec<Option<crate::mapped::MappedRange>>,
        mut f: impl FnMut(Event<'_>),
    ) -> Result<DecodeSummary, DecodeError> {
        let mut errors = Vec::new();
        let mut unknown_types = BTreeMap::new();
        let mut fatal = None;
        let cpus = pipeline::run(
            stream,
            mappings,
            |event| {
                if self.catalog.is_unknown(event.event_type()) {
                    *unknown_types.entry(event.id()).or_default() += 1;
                }
                f(event)
            },
            |error| {
                if error.is_fatal() {
                    fatal = Some(error);
                    return false;
                }
                if errors.len() < KEPT_ERRORS {
                    errors.push(error.to_string());
                }
                true
            },
        )
        .map_err(|source| DecodeError::Read {
            cpu: self.cpus.first().copied().unwrap_or(0),
            source,
        })?;
        if let Some(error) = fatal {
            return Err(error);
        }
        let summary = DecodeSummary {
            cpus: cpus.unwrap_or_default(),
            errors,
            unknown_types,
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

/// The threads a decode uses unless told otherwise.
fn available_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Fills batches of `stream` and sends them to the merge until the stream ends or the
/// merge stops reading. Spent batches come back on `returned` to be filled again and a new
/// one is made only when none has come back, so there are at most [`BATCHES_IN_FLIGHT`]
/// waiting, the one being filled and the one being read, each with a buffer, plus the
/// buffer the stream reads into.
fn decode_ahead(
    mut stream: CpuStream<'_>,
    batches: std::sync::mpsc::SyncSender<Batch>,
    returned: std::sync::mpsc::Receiver<Batch>,
) {
    loop {
        let mut batch = returned.try_recv().unwrap_or_default();
        stream.fill(&mut batch);
        let last = batch.last;
        if last {
            batch.summary = Some(Box::new(stream.summary().clone()));
        }
        if batches.send(batch).is_err() || last {
            return;
        }
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
