//! Writing one buffer of a .dat file as a trace directory (docs/trace-dir.md).
//!
//! The pages are copied byte for byte (decompressed if needed), so the decoder sees
//! exactly what the kernel handed trace-cmd. What a .dat file does not hold is written as
//! "unknown": `buffer_kib` 0, `started_ns`/`stopped_ns` 0, no `windows`. What only a .dat
//! file holds goes into extra meta.json fields under `dat` (see docs/trace-cmd-dat.md).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

use serde_json::json;

use super::buffer::Buffer;
use super::error::DatError;
use super::stack_scan::StackScan;
use super::DatFile;
use crate::record::recorder::{LostEvents, TraceMeta};

/// What an extraction wrote.
#[derive(Debug, Clone)]
pub struct Extracted {
    /// The buffer extracted (`""`: top level).
    pub buffer: String,
    /// The meta.json written, without the extra `dat` fields.
    pub meta: TraceMeta,
    /// Format files written under formats/.
    pub formats: usize,
    /// Compressed chunks that did not decompress, one line each naming the CPU: their
    /// pages are missing from the extracted CPU files (as they are from a decode in place),
    /// and every other page is there.
    pub damaged_chunks: Vec<String>,
}

/// Extracts the buffer that holds the trace data (see [`DatFile::data_buffer`]).
pub fn extract_to_trace_dir(dat: &Path, out: &Path) -> Result<Extracted, DatError> {
    DatFile::open(dat)?.extract(None, out)
}

/// Extracts the buffer called `buffer` (`""`: top level).
pub fn extract_buffer_to_trace_dir(
    dat: &Path,
    buffer: &str,
    out: &Path,
) -> Result<Extracted, DatError> {
    DatFile::open(dat)?.extract(Some(buffer), out)
}

impl DatFile {
    /// The buffer to extract when none is named: the only one with data, or the top-level
    /// one when no buffer has data.
    pub fn data_buffer(&self) -> Result<&Buffer, DatError> {
        let with_data: Vec<&Buffer> = self.buffers.iter().filter(|b| b.has_data()).collect();
        match with_data.as_slice() {
            [one] => Ok(one),
            [] => self.buffers.first().ok_or(DatError::NoData),
            several => Err(DatError::AmbiguousBuffer(
                several
                    .iter()
                    .map(|b| format!("`{}`", b.name))
                    .collect::<Vec<_>>()
                    .join(", "),
            )),
        }
    }

    /// The buffer called `name` (or [`DatFile::data_buffer`]), after the checks that every
    /// reader of its pages needs: both ring-buffer headers, and whole pages on every CPU.
    pub fn decodable_buffer(&self, name: Option<&str>) -> Result<&Buffer, DatError> {
        let buffer = match name {
            Some(name) => self
                .buffer(name)
                .ok_or_else(|| DatError::NoSuchBuffer(name.to_string()))?,
            None => self.data_buffer()?,
        };
        self.header_page()?;
        self.header_event()?;
        for data in &buffer.cpus {
            if data.size % buffer.page_size as u64 != 0 {
                return Err(DatError::PartialPage {
                    cpu: data.cpu,
                    size: data.size,
                    page_size: buffer.page_size,
                });
            }
        }
        Ok(buffer)
    }

    /// events/header_page of the recording machine.
    pub fn header_page(&self) -> Result<&[u8], DatError> {
        self.metadata
            .header_page
            .as_deref()
            .ok_or(DatError::Missing("header_page"))
    }

    /// events/header_event of the recording machine.
    pub fn header_event(&self) -> Result<&[u8], DatError> {
        self.metadata
            .header_event
            .as_deref()
            .ok_or(DatError::Missing("header_event"))
    }

    /// The CPUs of a trace of `buffer`: every CPU of the recording machine, and any other
    /// the buffer has data for, ascending.
    pub fn trace_cpus(&self, buffer: &Buffer) -> Vec<u32> {
        let mut cpus: Vec<u32> = (0..self.cpu_count)
            .chain(buffer.cpus.iter().map(|c| c.cpu))
            .collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }

    /// The id of `ftrace:kernel_stack` records, when the file has that format.
    pub(super) fn kernel_stack_id(&self) -> Option<u32> {
        self.metadata
            .ftrace_formats
            .iter()
            .find(|f| f.name == "kernel_stack")
            .and_then(|f| f.id)
    }

    /// What an extraction of `buffer` writes to meta.json, without the extra `dat` fields.
    /// `stacks` is whether an `ftrace:kernel_stack` record is among the pages, which only a
    /// pass over them tells.
    pub fn trace_meta(&self, buffer: &Buffer, stacks: bool) -> TraceMeta {
        let cpus = self.trace_cpus(buffer);
        let pages = cpus
            .iter()
            .map(|&cpu| {
                let size = buffer.cpu(cpu).map_or(0, |data| data.size);
                (cpu.to_string(), size / buffer.page_size as u64)
            })
            .collect();
        TraceMeta {
            page_size: buffer.page_size as usize,
            cpus: cpus.clone(),
            clock: self.clock(buffer).unwrap_or_else(|| "local".to_string()),
            events: self
                .metadata
                .event_formats
                .iter()
                .map(|f| f.full_name())
                .collect(),
            stacks,
            buffer_kib: 0,
            lost: self.lost_events(buffer, &cpus),
            started_ns: 0,
            stopped_ns: 0,
            windows: Vec::new(),
            pages,
        }
    }

    /// Writes `out` as a trace directory holding `buffer` (or [`DatFile::data_buffer`]).
    pub fn extract(&self, buffer: Option<&str>, out: &Path) -> Result<Extracted, DatError> {
        let buffer = self.decodable_buffer(buffer)?;
        let header_page = self.header_page()?;

        // Leftovers of another trace (format files above all) would be read as this one's.
        if std::fs::read_dir(out).is_ok_and(|mut entries| entries.next().is_some()) {
            return Err(DatError::OutputNotEmpty(out.to_path_buf()));
        }
        create_dir(out)?;
        write_file(&out.join("header_page"), header_page)?;
        write_file(&out.join("header_event"), self.header_event()?)?;
        let formats = self.write_formats(out)?;
        write_file(&out.join("kallsyms"), &self.metadata.kallsyms)?;
        if !self.metadata.printk_formats.is_empty() {
            write_file(
                &out.join(crate::decode::PRINTK_FORMATS_FILE),
                &self.metadata.printk_formats,
            )?;
        }

        let stack_id = self.kernel_stack_id();
        let mut stacks = false;
        let mut damaged_chunks = Vec::new();
        for cpu in self.trace_cpus(buffer) {
            let path = out.join(format!("cpu{cpu}.raw"));
            let file = File::create(&path).map_err(io_at(&path))?;
            let mut writer = StackScan::new(
                BufWriter::with_capacity(1 << 20, file),
                header_page,
                buffer.page_size as usize,
                stack_id.filter(|_| !stacks),
            );
            self.salvage_cpu_data(buffer, cpu, &mut writer, &mut damaged_chunks)?;
            stacks |= writer.found();
            writer.into_inner().flush().map_err(io_at(&path))?;
        }

        let meta = self.trace_meta(buffer, stacks);
        let mut json = serde_json::to_value(&meta)?;
        if let Some(map) = json.as_object_mut() {
            let mut facts = self.dat_facts(buffer);
            if !damaged_chunks.is_empty() {
                facts["damaged_chunks"] = json!(damaged_chunks);
            }
            map.insert("dat".into(), facts);
        }
        write_file(&out.join("meta.json"), &serde_json::to_vec_pretty(&json)?)?;
        Ok(Extracted {
            buffer: buffer.name.clone(),
            meta,
            formats,
            damaged_chunks,
        })
    }

    /// Writes one CPU's pages of `buffer` to `out`, decompressed and little-endian, as
    /// [`DatFile::copy_cpu_data`] does, except that a compressed chunk that does not
    /// decompress costs only its own pages, as in a decode in place: it is noted in
    /// `damaged` and the copy goes on with the next chunk, which is compressed on its own.
    fn salvage_cpu_data(
        &self,
        buffer: &Buffer,
        cpu: u32,
        out: &mut dyn Write,
        damaged: &mut Vec<String>,
    ) -> Result<u64, DatError> {
        let mut pages = self.cpu_pages(buffer, cpu)?;
        let mut chunk = vec![0u8; 256 << 10];
        let mut done = 0u64;
        loop {
            let n = match pages.read(&mut chunk) {
                Ok(0) => return Ok(done),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => match super::source::dat_error(e) {
                    error @ DatError::DamagedChunk { .. } => {
                        damaged.push(format!("cpu{cpu}: {error}"));
                        continue;
                    }
                    error => return Err(error),
                },
            };
            out.write_all(&chunk[..n])
                .map_err(|source| DatError::Write {
                    what: "cpu data",
                    source,
                })?;
            done += n as u64;
        }
    }

    /// formats/<system>/<event>, ftrace's own events under formats/ftrace.
    fn write_formats(&self, out: &Path) -> Result<usize, DatError> {
        let formats = out.join("formats");
        let all = self
            .metadata
            .ftrace_formats
            .iter()
            .chain(&self.metadata.event_formats);
        let mut count = 0;
        for format in all {
            let dir = formats.join(path_component(&format.system)?);
            create_dir(&dir)?;
            write_file(&dir.join(path_component(&format.name)?), &format.text)?;
            count += 1;
        }
        Ok(count)
    }

    /// Zero per CPU, overwritten by the CPUSTAT options of `buffer` where the file has them.
    fn lost_events(&self, buffer: &Buffer, cpus: &[u32]) -> BTreeMap<String, LostEvents> {
        let mut lost: BTreeMap<String, LostEvents> = cpus
            .iter()
            .map(|cpu| (cpu.to_string(), LostEvents::default()))
            .collect();
        for stat in self
            .options
            .cpu_stats
            .iter()
            .filter(|s| s.buffer == buffer.name)
        {
            lost.insert(
                stat.cpu.to_string(),
                LostEvents {
                    overrun: stat.overrun,
                    commit_overrun: stat.commit_overrun,
                    dropped_events: stat.dropped_events,
                },
            );
        }
        lost
    }

    /// The extra meta.json fields: where the directory came from, and the timestamp
    /// corrections trace-cmd would apply when reporting (the pages keep raw times).
    fn dat_facts(&self, buffer: &Buffer) -> serde_json::Value {
        let mut facts = serde_json::Map::new();
        let mut put = |key: &str, value: serde_json::Value| {
            facts.insert(key.to_string(), value);
        };
        put("file", json!(self.path.display().to_string()));
        put("version", json!(self.version));
        put("buffer", json!(buffer.name));
        put(
            "compression",
            json!(self.compression.as_ref().map(|c| c.algorithm.name())),
        );
        put("trace_cmd", json!(self.options.version));
        put("uname", json!(self.options.uname));
        put("cpu_stats", json!(!self.options.cpu_stats.is_empty()));
        if let Some(offset) = self.options.ts_offset_ns() {
            put("ts_offset_ns", json!(offset));
        }
        if let Some(tsc) = self.options.tsc2nsec {
            put("tsc2nsec", json!(tsc));
        }
        if let Some(shift) = &self.options.time_shift {
            put("time_shift", json!(shift));
        }
        serde_json::Value::Object(facts)
    }
}

/// A name from the file used as one path component: nothing that could leave the
/// directory or hide in it.
pub(super) fn path_component(name: &str) -> Result<&str, DatError> {
    let bad = name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']);
    if bad {
        return Err(DatError::BadName(name.to_string()));
    }
    Ok(name)
}

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> DatError + '_ {
    move |source| DatError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn create_dir(path: &Path) -> Result<(), DatError> {
    std::fs::create_dir_all(path).map_err(io_at(path))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), DatError> {
    std::fs::write(path, bytes).map_err(io_at(path))
}
