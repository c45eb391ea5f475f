//! Writing a trace directory (docs/trace-dir.md) as a trace-cmd `.dat` file, version 7, so
//! that `trace-cmd report` and KernelShark open vmscale's own recordings.
//!
//! ```no_run
//! # use std::path::Path;
//! # use vmscale_trace::dat::write::{write_dat, DatWriteOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let written = write_dat(Path::new("run/trace"), Path::new("run/trace.dat"), &DatWriteOptions::default())?;
//! # let _ = written;
//! # Ok(())
//! # }
//! ```
//!
//! The layout is described in docs/trace-cmd-dat.md ("Writing"). In short: the preamble,
//! then sections back to back (header info, ftrace formats, event formats, kallsyms, printk
//! formats, command lines, the flyrecord data of the top-level buffer, one options section,
//! the strings section). The ring-buffer pages are copied byte for byte; timestamps stay the
//! recording's raw clock values, which the TRACECLOCK option names.
//!
//! Little-endian only: the page decoder, and therefore every trace directory, is.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::dat::options::{
    BUFFER, CMDLINES, CPUCOUNT, CPUSTAT, DONE, EVENT_FORMATS, FTRACE_EVENTS, HEADER_INFO, KALLSYMS,
    OFFSET, PRINTK, STRINGS, TRACECLOCK, TSC2NSEC,
};
use crate::dat::preamble::MAGIC;
use crate::dat::{Algorithm, FLAG_COMPRESSED, MAX_CPUS, METADATA_LIMIT};
use crate::decode::error::DecodeError;
use crate::decode::views::EventKind;
use crate::decode::Decoder;
use crate::record::recorder::LostEvents;

/// Pages per compressed chunk of trace data: small enough that a reader decompresses little
/// to reach one page, large enough for the codec to find repetition.
const PAGES_PER_CHUNK: u64 = 10;

/// The clocks a kernel's `trace_clock` file lists on every architecture; the TRACECLOCK
/// option is that file, with the recording's clock in brackets.
const GENERIC_CLOCKS: [&str; 9] = [
    "local", "global", "counter", "uptime", "perf", "mono", "mono_raw", "boot", "tai",
];

/// How to write the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DatWriteOptions {
    /// `None` (the default): uncompressed, which every trace-cmd 3 reads. Debian's
    /// trace-cmd reads zstd but not zlib.
    pub compression: Option<Algorithm>,
}

/// What a write produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// Size of the .dat file.
    pub bytes: u64,
    pub cpus: usize,
    pub pages: u64,
    /// Events decoded while collecting command names.
    pub events: u64,
    /// Damaged pages the decoder skipped (they are still copied, as recorded).
    pub corrupt_pages: u64,
    /// Format files written (ftrace's and the events').
    pub formats: usize,
    /// pid -> comm entries in the command-lines section.
    pub comms: usize,
}

/// A trace directory that cannot be written as a .dat file.
#[derive(Debug, thiserror::Error)]
pub enum DatWriteError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Meta {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} has {size} bytes, more than the {limit} a .dat file can hold there")]
    TooLarge { what: String, size: u64, limit: u64 },
    #[error("cpu{cpu}.raw has {size} bytes, not a whole number of {page_size}-byte pages")]
    PartialPage { cpu: u32, size: u64, page_size: u64 },
    #[error("cpu{cpu}.raw changed while it was copied ({expected} bytes expected, {found} read)")]
    Changed { cpu: u32, expected: u64, found: u64 },
    #[error("trace clock `{0}` cannot be named in a .dat file")]
    BadClock(String),
    #[error("cpu {0} is beyond the {MAX_CPUS} CPUs a .dat file may describe")]
    TooManyCpus(u32),
    /// The output path: refused (not a regular file) or not writable.
    #[error(transparent)]
    Output(#[from] vmscale_sys::output::OutputError),
}

/// Writes the trace directory `dir` as a .dat file at `out`, which must be absent or a
/// regular file. The file appears only when it is complete: it is written beside `out`
/// under a temporary name that no exit leaves behind, and renamed
/// ([`vmscale_sys::output::OutputFile`]).
pub fn write_dat(
    dir: &Path,
    out: &Path,
    options: &DatWriteOptions,
) -> Result<Written, DatWriteError> {
    let (output, file) = vmscale_sys::output::OutputFile::create(out)?;
    let mut sink = BufWriter::with_capacity(1 << 20, file);
    let written = write_dat_to(dir, &mut sink, options).map_err(|e| match e {
        // Name the file the user asked for, not the temporary one.
        DatWriteError::Write { source, .. } => DatWriteError::Write {
            path: out.to_path_buf(),
            source,
        },
        other => other,
    })?;
    let file = sink.into_inner().map_err(|e| DatWriteError::Write {
        path: out.to_path_buf(),
        source: e.into_error(),
    })?;
    output.commit(file)?;
    Ok(written)
}

/// Writes the trace directory `dir` as a .dat file into `out`, from its current position
/// (which becomes offset 0 of the file).
pub fn write_dat_to<W: Write + Seek>(
    dir: &Path,
    out: &mut W,
    options: &DatWriteOptions,
) -> Result<Written, DatWriteError> {
    let decoder = Decoder::open(dir)?;
    let layout = *decoder.page_layout();
    let page_size = layout.page_size as u64;
    let clock = decoder.clock().unwrap_or("local").to_string();
    check_clock(&clock)?;
    let cpus = decoder.cpus().to_vec();
    if let Some(&cpu) = cpus.iter().find(|&&cpu| cpu >= MAX_CPUS) {
        return Err(DatWriteError::TooManyCpus(cpu));
    }
    let lost = read_lost(dir)?;
    let names = collect_comms(&decoder)?;
    let formats = read_formats(dir)?;

    let start = out.stream_position().map_err(output_error)?;
    let mut file = Sections::new(out, start, options.compression);
    file.preamble(page_size as u32, layout.commit_size as u8)?;

    let mut sections = Vec::new();
    let metadata: [(u16, &str, Vec<u8>); 6] = [
        (HEADER_INFO, "headers", header_info(dir)?),
        (
            FTRACE_EVENTS,
            "ftrace event formats",
            formats.ftrace_block(),
        ),
        (EVENT_FORMATS, "event formats", formats.events_block()),
        (KALLSYMS, "kallsyms", kallsyms_block(dir)?),
        (PRINTK, "printk formats", printk_block(dir)?),
        (CMDLINES, "command lines", cmdlines_block(&names)),
    ];
    for (id, description, data) in &metadata {
        sections.push((*id, file.section(*id, description, data)?));
    }

    let buffer_offset = file.pos;
    let cpu_data = file.flyrecord(dir, &cpus, page_size)?;

    let mut opts = Options::default();
    for (id, offset) in &sections {
        opts.add(*id, &offset.to_le_bytes());
    }
    let cpu_count = cpus.iter().max().map_or(0, |&c| c + 1);
    opts.add(CPUCOUNT, &cpu_count.to_le_bytes());
    opts.add(TRACECLOCK, trace_clock_text(&clock).as_bytes());
    // A directory extracted from a trace-cmd file keeps its raw times and the conversion
    // trace-cmd applies to them; the written file carries that conversion on.
    let time = decoder.time_conversion();
    if let Some(tsc) = time.tsc2nsec {
        let mut data = Vec::with_capacity(16);
        data.extend_from_slice(&tsc.mult.to_le_bytes());
        data.extend_from_slice(&tsc.shift.to_le_bytes());
        data.extend_from_slice(&tsc.offset.to_le_bytes());
        opts.add(TSC2NSEC, &data);
    }
    if time.offset_ns != 0 {
        // trace-cmd reads OFFSET as text, with strtoll.
        opts.add(OFFSET, format!("{}\0", time.offset_ns).as_bytes());
    }
    for &cpu in &cpus {
        let stats = lost.get(&cpu.to_string()).cloned().unwrap_or_default();
        opts.add(CPUSTAT, cpu_stat_text(cpu, &stats).as_bytes());
    }
    opts.add(
        BUFFER,
        &buffer_option(buffer_offset, &clock, page_size, &cpu_data),
    );
    opts.add(DONE, &0u64.to_le_bytes());
    let options_offset = file.section(DONE, "options", &opts.0)?;
    file.strings_section()?;
    file.patch(file.first_options_at, options_offset)?;
    let bytes = file.pos;
    file.out.flush().map_err(output_error)?;

    let summary = names.summary;
    Ok(Written {
        bytes,
        cpus: cpus.len(),
        pages: cpu_data.iter().map(|c| c.pages).sum(),
        events: summary.events,
        corrupt_pages: summary.corrupt_pages,
        formats: formats.count(),
        comms: names.comms.len(),
    })
}

fn output_error(source: std::io::Error) -> DatWriteError {
    DatWriteError::Write {
        path: PathBuf::from("(output)"),
        source,
    }
}

fn read_error(path: &Path) -> impl Fn(std::io::Error) -> DatWriteError + '_ {
    move |source| DatWriteError::Read {
        path: path.to_path_buf(),
        source,
    }
}

/// A clock name goes between brackets in a space-separated list and into a C string.
fn check_clock(clock: &str) -> Result<(), DatWriteError> {
    let bad = clock.is_empty()
        || clock
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '[' | ']'));
    if bad {
        return Err(DatWriteError::BadClock(clock.to_string()));
    }
    Ok(())
}

/// The `trace_clock` file as the kernel shows it, the recording's clock selected.
fn trace_clock_text(clock: &str) -> String {
    let mut names: Vec<String> = GENERIC_CLOCKS
        .iter()
        .map(|name| match *name == clock {
            true => format!("[{name}]"),
            false => name.to_string(),
        })
        .collect();
    if !GENERIC_CLOCKS.contains(&clock) {
        names.push(format!("[{clock}]"));
    }
    format!("{}\n\0", names.join(" "))
}

/// The counters of per_cpu/cpuN/stats that meta.json keeps, under the `CPU: N` line
/// trace-cmd puts first. Counters meta.json does not keep are left out rather than
/// invented.
fn cpu_stat_text(cpu: u32, lost: &LostEvents) -> String {
    format!(
        "CPU: {cpu}\noverrun: {}\ncommit overrun: {}\ndropped events: {}\n\0",
        lost.overrun, lost.commit_overrun, lost.dropped_events
    )
}

/// meta.json's per-CPU loss counters (absent in directories that predate them).
fn read_lost(dir: &Path) -> Result<BTreeMap<String, LostEvents>, DatWriteError> {
    #[derive(Deserialize)]
    struct Lost {
        #[serde(default)]
        lost: BTreeMap<String, LostEvents>,
    }
    let path = dir.join("meta.json");
    let text = read_bounded(&path, METADATA_LIMIT)?;
    let meta: Lost = serde_json::from_slice(&text).map_err(|source| DatWriteError::Meta {
        path: path.clone(),
        source,
    })?;
    Ok(meta.lost)
}

/// A file of at most `limit` bytes; its size is checked before anything is allocated, and
/// the read stops at the limit even if the file grows meanwhile.
fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, DatWriteError> {
    let file = vmscale_sys::bounded::open_regular(path).map_err(read_error(path))?;
    let size = file.metadata().map_err(read_error(path))?.len();
    let too_large = |size| DatWriteError::TooLarge {
        what: path.display().to_string(),
        size,
        limit,
    };
    if size > limit {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error(path))?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// `header_page\0`, u64 size, text; `header_event\0`, u64 size, text.
fn header_info(dir: &Path) -> Result<Vec<u8>, DatWriteError> {
    let mut block = Vec::new();
    for name in ["header_page", "header_event"] {
        let text = read_bounded(&dir.join(name), METADATA_LIMIT)?;
        block.extend_from_slice(name.as_bytes());
        block.push(0);
        block.extend_from_slice(&(text.len() as u64).to_le_bytes());
        block.extend_from_slice(&text);
    }
    Ok(block)
}

/// u32 size, text. The size field limits kallsyms to 4 GiB, METADATA_LIMIT (what the
/// reader accepts) to far less.
fn kallsyms_block(dir: &Path) -> Result<Vec<u8>, DatWriteError> {
    Ok(size_prefixed(read_bounded(
        &dir.join("kallsyms"),
        METADATA_LIMIT,
    )?))
}

/// u32 size, the directory's printk_formats (empty when it has none: directories written
/// before it was kept, or from a kernel without it).
fn printk_block(dir: &Path) -> Result<Vec<u8>, DatWriteError> {
    let path = dir.join(crate::decode::PRINTK_FORMATS_FILE);
    let text = if path.exists() {
        read_bounded(&path, METADATA_LIMIT)?
    } else {
        Vec::new()
    };
    Ok(size_prefixed(text))
}

/// `text` after its length as a u32, as the kallsyms and printk sections keep it.
fn size_prefixed(text: Vec<u8>) -> Vec<u8> {
    let mut block = (text.len() as u32).to_le_bytes().to_vec();
    block.extend_from_slice(&text);
    block
}

/// The format files of a trace directory, by system, in name order.
struct Formats {
    ftrace: Vec<Vec<u8>>,
    systems: Vec<(String, Vec<Vec<u8>>)>,
}

impl Formats {
    fn count(&self) -> usize {
        self.ftrace.len() + self.systems.iter().map(|(_, f)| f.len()).sum::<usize>()
    }

    /// u32 count; per format u64 size, text.
    fn ftrace_block(&self) -> Vec<u8> {
        let mut block = (self.ftrace.len() as u32).to_le_bytes().to_vec();
        push_formats(&mut block, &self.ftrace);
        block
    }

    /// u32 system count; per system: name NUL, u32 count; per format u64 size, text.
    fn events_block(&self) -> Vec<u8> {
        let mut block = (self.systems.len() as u32).to_le_bytes().to_vec();
        for (system, files) in &self.systems {
            block.extend_from_slice(system.as_bytes());
            block.push(0);
            block.extend_from_slice(&(files.len() as u32).to_le_bytes());
            push_formats(&mut block, files);
        }
        block
    }
}

fn push_formats(block: &mut Vec<u8>, files: &[Vec<u8>]) {
    for text in files {
        block.extend_from_slice(&(text.len() as u64).to_le_bytes());
        block.extend_from_slice(text);
    }
}

/// Sorted names of the entries of `dir` for which `keep` holds.
fn sorted_entries(
    dir: &Path,
    keep: fn(&std::fs::FileType) -> bool,
) -> Result<Vec<String>, DatWriteError> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_error(dir))? {
        let entry = entry.map_err(read_error(dir))?;
        let kind = entry.file_type().map_err(read_error(&entry.path()))?;
        if keep(&kind) {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// formats/<system>/<event>: ftrace's own events go to their section, the rest by system.
/// The Decoder has already parsed every file, so they are known to be formats.
fn read_formats(dir: &Path) -> Result<Formats, DatWriteError> {
    let root = dir.join("formats");
    let mut formats = Formats {
        ftrace: Vec::new(),
        systems: Vec::new(),
    };
    // Limits each file and the total to what one metadata section may hold.
    let mut total = 0u64;
    for system in sorted_entries(&root, std::fs::FileType::is_dir)? {
        let mut files = Vec::new();
        for event in sorted_entries(&root.join(&system), std::fs::FileType::is_file)? {
            let text = read_bounded(&root.join(&system).join(&event), METADATA_LIMIT)?;
            total += text.len() as u64;
            if total > METADATA_LIMIT {
                return Err(DatWriteError::TooLarge {
                    what: "the format files".into(),
                    size: total,
                    limit: METADATA_LIMIT,
                });
            }
            files.push(text);
        }
        match system.as_str() {
            "ftrace" => formats.ftrace = files,
            _ if files.is_empty() => {}
            _ => formats.systems.push((system, files)),
        }
    }
    Ok(formats)
}

/// Task names seen in the trace, and what decoding it saw.
struct Comms {
    comms: BTreeMap<i32, Vec<u8>>,
    summary: CommSummary,
}

struct CommSummary {
    events: u64,
    corrupt_pages: u64,
}

/// pid -> comm from the events that name tasks (sched_switch both sides, the wakeups), the
/// latest name winning as in the kernel's saved_cmdlines. The idle task (pid 0) is left
/// out, as the kernel does; readers call it `<idle>`.
fn collect_comms(decoder: &Decoder) -> Result<Comms, DatWriteError> {
    let mut comms: BTreeMap<i32, Vec<u8>> = BTreeMap::new();
    let mut note = |pid: i32, comm: &[u8]| {
        if pid > 0 && !comm.is_empty() && comms.get(&pid).map(Vec::as_slice) != Some(comm) {
            comms.insert(pid, comm.to_vec());
        }
    };
    let summary = decoder.for_each(|event| match event.kind() {
        EventKind::SchedSwitch(switch) => {
            note(switch.prev_pid, switch.prev_comm.as_bytes());
            note(switch.next_pid, switch.next_comm.as_bytes());
        }
        EventKind::SchedWaking(wake)
        | EventKind::SchedWakeup(wake)
        | EventKind::SchedWakeupNew(wake) => note(wake.pid, wake.comm.as_bytes()),
        _ => {}
    })?;
    Ok(Comms {
        comms,
        summary: CommSummary {
            events: summary.events(),
            corrupt_pages: summary.corrupt_pages(),
        },
    })
}

/// u64 size, then `pid comm` lines as in saved_cmdlines. A newline in a name would end its
/// line early, so it is shown as `?`.
fn cmdlines_block(names: &Comms) -> Vec<u8> {
    let mut text = Vec::new();
    for (pid, comm) in &names.comms {
        text.extend_from_slice(format!("{pid} ").as_bytes());
        text.extend(comm.iter().map(|&b| if b == b'\n' { b'?' } else { b }));
        text.push(b'\n');
    }
    let mut block = (text.len() as u64).to_le_bytes().to_vec();
    block.extend_from_slice(&text);
    block
}

/// Where one CPU's pages went.
struct CpuPlaced {
    cpu: u32,
    offset: u64,
    /// Bytes in the file (with compression: the chunk count and the chunks).
    stored: u64,
    pages: u64,
}

/// The BUFFER option of the top-level buffer: u64 section offset, name `""`, clock, u32
/// page size, u32 CPU count, per CPU u32 cpu, u64 offset, u64 size.
fn buffer_option(section: u64, clock: &str, page_size: u64, cpus: &[CpuPlaced]) -> Vec<u8> {
    let mut data = section.to_le_bytes().to_vec();
    data.push(0);
    data.extend_from_slice(clock.as_bytes());
    data.push(0);
    data.extend_from_slice(&(page_size as u32).to_le_bytes());
    data.extend_from_slice(&(cpus.len() as u32).to_le_bytes());
    for placed in cpus {
        data.extend_from_slice(&placed.cpu.to_le_bytes());
        data.extend_from_slice(&placed.offset.to_le_bytes());
        data.extend_from_slice(&placed.stored.to_le_bytes());
    }
    data
}

/// `u16 id, u32 size, data` records.
#[derive(Default)]
struct Options(Vec<u8>);

impl Options {
    fn add(&mut self, id: u16, data: &[u8]) {
        self.0.extend_from_slice(&id.to_le_bytes());
        self.0.extend_from_slice(&(data.len() as u32).to_le_bytes());
        self.0.extend_from_slice(data);
    }
}

/// The output, written front to back; `pos` counts the bytes so far (the offset in the
/// .dat file), so no seek is needed until the two fields patched at the end.
struct Sections<'w, W: Write + Seek> {
    out: &'w mut W,
    /// Where the file starts in `out`.
    start: u64,
    pos: u64,
    compression: Option<Algorithm>,
    /// Section descriptions; a section names its own by the offset of the string here.
    strings: Vec<u8>,
    first_options_at: u64,
}

impl<'w, W: Write + Seek> Sections<'w, W> {
    fn new(out: &'w mut W, start: u64, compression: Option<Algorithm>) -> Sections<'w, W> {
        Sections {
            out,
            start,
            pos: 0,
            compression,
            strings: Vec::new(),
            first_options_at: 0,
        }
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), DatWriteError> {
        self.out.write_all(bytes).map_err(output_error)?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Overwrites 8 bytes at offset `at` with `value`, then returns to the end.
    fn patch(&mut self, at: u64, value: u64) -> Result<(), DatWriteError> {
        self.out
            .seek(SeekFrom::Start(self.start + at))
            .map_err(output_error)?;
        self.out
            .write_all(&value.to_le_bytes())
            .map_err(output_error)?;
        self.out
            .seek(SeekFrom::Start(self.start + self.pos))
            .map_err(output_error)?;
        Ok(())
    }

    /// Magic, version 7, little-endian, long size, page size, the compression's name and
    /// version, and a placeholder for the offset of the options section.
    fn preamble(&mut self, page_size: u32, long_size: u8) -> Result<(), DatWriteError> {
        self.put(MAGIC)?;
        self.put(b"7\0")?;
        self.put(&[0, long_size])?;
        self.put(&page_size.to_le_bytes())?;
        // The version is the major version of the library whose stream format the data
        // follows: readers compare at most that (zlib's must not exceed their own).
        let (name, version) = match self.compression {
            None => ("none", ""),
            Some(Algorithm::Zstd) => ("zstd", "1"),
            Some(Algorithm::Zlib) => ("zlib", "1"),
        };
        self.put(format!("{name}\0{version}\0").as_bytes())?;
        self.first_options_at = self.pos;
        self.put(&0u64.to_le_bytes())
    }

    fn string(&mut self, text: &str) -> u32 {
        let id = self.strings.len() as u32;
        self.strings.extend_from_slice(text.as_bytes());
        self.strings.push(0);
        id
    }

    fn header(&mut self, id: u16, description: &str, size: u64) -> Result<(), DatWriteError> {
        let flags = if self.compression.is_some() {
            FLAG_COMPRESSED
        } else {
            0
        };
        let description = self.string(description);
        self.put(&id.to_le_bytes())?;
        self.put(&flags.to_le_bytes())?;
        self.put(&description.to_le_bytes())?;
        self.put(&size.to_le_bytes())
    }

    /// One section holding `data` (as one compressed block when compressing). Returns its
    /// offset.
    fn section(&mut self, id: u16, description: &str, data: &[u8]) -> Result<u64, DatWriteError> {
        let offset = self.pos;
        let body = match self.compression {
            None => data.to_vec(),
            Some(algorithm) => block(algorithm, data, description)?,
        };
        self.header(id, description, body.len() as u64)?;
        self.put(&body)?;
        Ok(offset)
    }

    /// The strings every section header named, as the last section.
    fn strings_section(&mut self) -> Result<(), DatWriteError> {
        // Its own description is among the strings it holds.
        let id = self.string("strings");
        let strings = std::mem::take(&mut self.strings);
        let body = match self.compression {
            None => strings,
            Some(algorithm) => block(algorithm, &strings, "strings")?,
        };
        let flags = if self.compression.is_some() {
            FLAG_COMPRESSED
        } else {
            0
        };
        self.put(&STRINGS.to_le_bytes())?;
        self.put(&flags.to_le_bytes())?;
        self.put(&id.to_le_bytes())?;
        self.put(&(body.len() as u64).to_le_bytes())?;
        self.put(&body)
    }

    fn pad_to_page(&mut self, page_size: u64) -> Result<(), DatWriteError> {
        let padding = (page_size - self.pos % page_size) % page_size;
        self.put(&vec![0u8; padding as usize])
    }

    /// The flyrecord section of the top-level buffer: each CPU's pages at a page-aligned
    /// offset (readers may map them), padding included in the section. Its size is patched
    /// in at the end.
    fn flyrecord(
        &mut self,
        dir: &Path,
        cpus: &[u32],
        page_size: u64,
    ) -> Result<Vec<CpuPlaced>, DatWriteError> {
        self.header(BUFFER, "flyrecord", 0)?;
        let size_at = self.pos - 8;
        let data_start = self.pos;
        let mut placed = Vec::with_capacity(cpus.len());
        for &cpu in cpus {
            self.pad_to_page(page_size)?;
            let path = dir.join(format!("cpu{cpu}.raw"));
            let file = vmscale_sys::bounded::open_regular(&path).map_err(read_error(&path))?;
            let size = file.metadata().map_err(read_error(&path))?.len();
            if size % page_size != 0 {
                return Err(DatWriteError::PartialPage {
                    cpu,
                    size,
                    page_size,
                });
            }
            let offset = self.pos;
            match self.compression {
                None => self.copy_pages(file, &path, cpu, size)?,
                Some(algorithm) => {
                    self.copy_chunks(file, &path, cpu, size, page_size, algorithm)?
                }
            }
            placed.push(CpuPlaced {
                cpu,
                offset,
                stored: self.pos - offset,
                pages: size / page_size,
            });
        }
        let section_size = self.pos - data_start;
        self.patch(size_at, section_size)?;
        Ok(placed)
    }

    fn copy_pages(
        &mut self,
        file: File,
        path: &Path,
        cpu: u32,
        size: u64,
    ) -> Result<(), DatWriteError> {
        // One byte more than expected reveals a file that grew.
        let mut reader = file.take(size + 1);
        let mut buf = vec![0u8; (1 << 20).min(size as usize + 1)];
        let mut copied = 0u64;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(read_error(path)(e)),
            };
            copied += n as u64;
            if copied > size {
                break;
            }
            self.put(&buf[..n])?;
        }
        if copied != size {
            return Err(DatWriteError::Changed {
                cpu,
                expected: size,
                found: copied,
            });
        }
        Ok(())
    }

    /// u32 chunk count, then per chunk of up to PAGES_PER_CHUNK pages: u32 compressed size,
    /// u32 size, one compressed block.
    fn copy_chunks(
        &mut self,
        mut file: File,
        path: &Path,
        cpu: u32,
        size: u64,
        page_size: u64,
        algorithm: Algorithm,
    ) -> Result<(), DatWriteError> {
        let chunk_bytes = PAGES_PER_CHUNK * page_size;
        let count = size.div_ceil(chunk_bytes);
        let too_many = || DatWriteError::TooLarge {
            what: format!("cpu{cpu}.raw"),
            size,
            limit: u32::MAX as u64 * chunk_bytes,
        };
        self.put(&u32::try_from(count).map_err(|_| too_many())?.to_le_bytes())?;
        let mut buf = vec![0u8; chunk_bytes.min(size) as usize];
        let mut left = size;
        while left > 0 {
            let n = chunk_bytes.min(left) as usize;
            file.read_exact(&mut buf[..n]).map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => DatWriteError::Changed {
                    cpu,
                    expected: size,
                    found: size - left,
                },
                _ => read_error(path)(e),
            })?;
            let packed = compress(algorithm, &buf[..n]);
            let packed_size = u32::try_from(packed.len()).map_err(|_| too_many())?;
            self.put(&packed_size.to_le_bytes())?;
            self.put(&(n as u32).to_le_bytes())?;
            self.put(&packed)?;
            left -= n as u64;
        }
        Ok(())
    }
}

/// A compressed section body: u32 compressed size, u32 size, the data.
fn block(algorithm: Algorithm, data: &[u8], what: &str) -> Result<Vec<u8>, DatWriteError> {
    let too_large = |size: usize| DatWriteError::TooLarge {
        what: format!("the {what} section"),
        size: size as u64,
        limit: u32::MAX as u64,
    };
    let size = u32::try_from(data.len()).map_err(|_| too_large(data.len()))?;
    let packed = compress(algorithm, data);
    let packed_size = u32::try_from(packed.len()).map_err(|_| too_large(packed.len()))?;
    let mut body = Vec::with_capacity(8 + packed.len());
    body.extend_from_slice(&packed_size.to_le_bytes());
    body.extend_from_slice(&size.to_le_bytes());
    body.extend_from_slice(&packed);
    Ok(body)
}

/// One zlib stream or one zstd frame, as a reader decompresses one block.
fn compress(algorithm: Algorithm, data: &[u8]) -> Vec<u8> {
    match algorithm {
        Algorithm::Zstd => {
            ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
        }
        Algorithm::Zlib => {
            let mut encoder =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            // Writing into a Vec cannot fail.
            let _ = encoder.write_all(data);
            encoder.finish().unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_clock_option_selects_the_recording_clock() {
        assert_eq!(
            trace_clock_text("mono"),
            "local global counter uptime perf [mono] mono_raw boot tai\n\0"
        );
        assert!(trace_clock_text("x86-tsc").ends_with(" tai [x86-tsc]\n\0"));
        for bad in ["", "mo no", "[mono]", "mono\n"] {
            assert!(check_clock(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cpu_stats_read_back_as_the_counts_written() {
        let lost = LostEvents {
            overrun: 7,
            commit_overrun: 2,
            dropped_events: 3,
        };
        let mut options = crate::dat::Options::default();
        options
            .apply(
                CPUSTAT,
                cpu_stat_text(5, &lost).as_bytes(),
                crate::dat::preamble::Layout::V7,
                crate::dat::Endian::Little,
            )
            .unwrap();
        let stat = &options.cpu_stats[0];
        assert_eq!(
            (
                stat.cpu,
                stat.overrun,
                stat.commit_overrun,
                stat.dropped_events
            ),
            (5, 7, 2, 3)
        );
    }

    #[test]
    fn a_file_written_after_other_bytes_is_the_same_file() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/overrun");
        let options = DatWriteOptions::default();
        let mut alone = std::io::Cursor::new(Vec::new());
        write_dat_to(&fixture, &mut alone, &options).unwrap();
        let mut after = std::io::Cursor::new(vec![0xa5u8; 100]);
        after.set_position(100);
        let written = write_dat_to(&fixture, &mut after, &options).unwrap();
        let alone = alone.into_inner();
        assert_eq!(written.bytes as usize, alone.len());
        assert!(after.into_inner()[100..] == alone[..]);
        let dat = crate::dat::DatFile::from_bytes(alone).unwrap();
        assert_eq!(dat.version, 7);
        assert_eq!(dat.data_buffer().unwrap().cpus.len(), 2);
    }

    #[test]
    fn command_lines_keep_one_line_per_pid() {
        let mut comms = BTreeMap::new();
        comms.insert(12, b"sh".to_vec());
        comms.insert(3, b"bad\nname".to_vec());
        let names = Comms {
            comms,
            summary: CommSummary {
                events: 0,
                corrupt_pages: 0,
            },
        };
        let block = cmdlines_block(&names);
        let size = u64::from_le_bytes(block[..8].try_into().unwrap());
        assert_eq!(size as usize, block.len() - 8);
        assert_eq!(&block[8..], b"3 bad?name\n12 sh\n");
    }
}
