//! Reading trace-cmd's `.dat` files (versions 6 and 7) and turning them into a trace
//! directory (docs/trace-dir.md) that [`crate::Decoder`] reads like vmscale's own; and, in
//! [`write`], writing a trace directory as a version 7 .dat file for trace-cmd and
//! KernelShark.
//!
//! The container is described in docs/trace-cmd-dat.md. In short: a preamble (magic,
//! version, byte order, long size, page size), descriptive blocks (ring-buffer headers,
//! event formats, kallsyms, printk formats, saved command lines), options, and per-CPU
//! ring-buffer pages exactly as the kernel's `trace_pipe_raw` handed them out.
//!
//! ```no_run
//! # use std::path::Path;
//! # use vmscale_trace::dat::{extract_to_trace_dir, DatFile};
//! # use vmscale_trace::Decoder;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dat = DatFile::open(Path::new("trace.dat"))?;
//! println!("{} CPUs, {} event formats", dat.cpu_count, dat.metadata.event_formats.len());
//! let extracted = extract_to_trace_dir(Path::new("trace.dat"), Path::new("trace"))?;
//! let decoder = Decoder::open("trace")?;
//! # let _ = (extracted, decoder);
//! # Ok(())
//! # }
//! ```
//!
//! A [`crate::Decoder`] can also read one buffer where it lies ([`crate::Decoder::from_dat`]):
//! each CPU's pages are streamed out of the file, decompressed a chunk at a time.
//!
//! Every size, count and offset read from the file is checked against the file (or the
//! decompressed section) before it is used: corrupt input gives a [`DatError`].

mod buffer;
pub mod byte_order;
mod compress;
mod error;
mod extract;
mod in_place;
mod metadata;
// The writer (crate::dat::write) shares the ids, flags and magic of the format.
pub(crate) mod options;
pub(crate) mod preamble;
mod source;
mod stack_scan;
mod v6;
mod v7;
pub mod write;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub use buffer::{Buffer, CpuData};
pub use compress::{Algorithm, Compression};
pub use error::DatError;
pub use extract::{extract_buffer_to_trace_dir, extract_to_trace_dir, Extracted};
pub use metadata::{FormatFile, Metadata};
pub use options::{BufferOption, CpuStat, Options, TimeShift, TimeShiftSample, Tsc2Nsec, MAX_CPUS};
pub use source::{Endian, METADATA_LIMIT};

pub(crate) use v7::FLAG_COMPRESSED;

use preamble::{Layout, Preamble};
use source::Source;

/// What the version-specific readers find.
struct Contents {
    metadata: Metadata,
    cpu_count: u32,
    options: Options,
    buffers: Vec<Buffer>,
}

/// An opened .dat file: everything but the trace data, which stays in the file until
/// [`DatFile::copy_cpu_data`] or an extraction reads it.
#[derive(Debug)]
pub struct DatFile {
    /// Where the file was read from (`(memory)` for [`DatFile::from_bytes`]).
    pub path: PathBuf,
    /// 6 or 7.
    pub version: u32,
    pub endian: Endian,
    /// Size of `long` in the recording machine's user space.
    pub long_size: u8,
    /// The recording machine's page size (version 7 buffers carry their own as well).
    pub page_size: u32,
    /// Version 7: the algorithm of the compressed sections; `None` when uncompressed.
    pub compression: Option<Compression>,
    pub metadata: Metadata,
    /// CPUs of the recording machine (the header's count, or the CPUCOUNT option).
    pub cpu_count: u32,
    pub options: Options,
    /// Flyrecord buffers: in version 6 the top-level one comes first, then one per
    /// instance; in version 7 one per BUFFER option.
    pub buffers: Vec<Buffer>,
    source: Source,
    /// The file mapped for decoding in place, made on first use (`None`: not mappable).
    mapping: std::sync::OnceLock<Option<std::sync::Arc<crate::mapped::MappedFile>>>,
}

impl DatFile {
    /// Reads the container of `path`; fails on anything but a version 6 or 7 flyrecord.
    pub fn open(path: &Path) -> Result<DatFile, DatError> {
        DatFile::read(Source::open(path)?, path.to_path_buf())
    }

    /// Reads a .dat file held in memory (`path` is then `(memory)`).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<DatFile, DatError> {
        DatFile::read(Source::Memory(bytes), PathBuf::from("(memory)"))
    }

    fn read(source: Source, path: PathBuf) -> Result<DatFile, DatError> {
        let preamble = Preamble::read(&source)?;
        let contents = match preamble.layout {
            Layout::V6 => v6::read(&source, &preamble)?,
            Layout::V7 => v7::read(&source, &preamble)?,
        };
        Ok(DatFile {
            path,
            version: preamble.version,
            endian: preamble.endian,
            long_size: preamble.long_size,
            page_size: preamble.page_size,
            compression: preamble.compression,
            metadata: contents.metadata,
            cpu_count: contents.cpu_count,
            options: contents.options,
            buffers: contents.buffers,
            source,
            mapping: std::sync::OnceLock::new(),
        })
    }

    /// The buffer called `name` (`""`: top level).
    pub fn buffer(&self, name: &str) -> Option<&Buffer> {
        self.buffers.iter().find(|b| b.name == name)
    }

    /// How trace-cmd turns this file's raw times into the times it reports (TSC2NSEC, then
    /// DATE and OFFSET); [`crate::Decoder::from_dat`] applies the same.
    pub fn time_conversion(&self) -> crate::decode::clock::TimeConversion {
        crate::decode::clock::TimeConversion::new(
            self.options.tsc2nsec,
            self.options.ts_offset_ns().unwrap_or(0),
        )
    }

    /// The trace clock of `buffer`.
    ///
    /// The TRACECLOCK option holds the `trace_clock` file of the recorded instance and
    /// comes first. The clock next to a buffer comes second: trace-cmd 3.1 writes the
    /// top-level buffer's clock there even for instances, so it is wrong whenever an
    /// instance used another clock. `None` means trace-cmd's default, `local`.
    pub fn clock(&self, buffer: &Buffer) -> Option<String> {
        self.options
            .selected_clock()
            .or_else(|| buffer.clock.clone())
    }

    /// Writes the ring-buffer pages of one CPU of `buffer` to `out`, decompressed, and
    /// converted to little-endian when the recording machine was big-endian (see
    /// [`byte_order`]). Returns the number of bytes written.
    pub fn copy_cpu_data(
        &self,
        buffer: &Buffer,
        data: &CpuData,
        out: &mut dyn Write,
    ) -> Result<u64, DatError> {
        if self.endian == Endian::Little {
            return buffer::copy_cpu_data(&self.source, buffer, data, self.endian, out);
        }
        let mut pages = self.cpu_pages(buffer, data.cpu)?;
        let mut chunk = vec![0u8; 256 << 10];
        let mut done = 0u64;
        loop {
            let n = match pages.read(&mut chunk) {
                Ok(0) => return Ok(done),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(source::dat_error(e)),
            };
            out.write_all(&chunk[..n])
                .map_err(|source| DatError::Write {
                    what: "cpu data",
                    source,
                })?;
            done += n as u64;
        }
    }
}
