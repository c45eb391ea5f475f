//! Writes .dat files (versions 6 and 7, uncompressed, zlib or zstd) from the parts of one
//! that was read, so the reader can be run over layouts and codecs that this machine's
//! trace-cmd does not produce (zlib, compressed options, data in the top-level buffer) and
//! over deliberately broken files. Little-endian by default; big-endian containers hold the
//! pages they are given, which the caller converts.

use std::io::Write;

use vmscale_trace::dat::{DatFile, FormatFile};

// Option and section ids (trace-cmd.dat.v7(5)).
const DONE: u16 = 0;
const CPUSTAT: u16 = 2;
const BUFFER: u16 = 3;
const TRACECLOCK: u16 = 4;
const CPUCOUNT: u16 = 8;
const HEADER_INFO: u16 = 16;
const FTRACE_EVENTS: u16 = 17;
const EVENT_FORMATS: u16 = 18;
const KALLSYMS: u16 = 19;
const PRINTK: u16 = 20;
const CMDLINES: u16 = 21;
const BUFFER_TEXT: u16 = 22;

/// Pages per compressed chunk (trace-cmd uses 10).
const PAGES_PER_CHUNK: usize = 10;

/// Appends one descriptive block to a buffer.
type WriteBlock = fn(&DatWriter, &mut Vec<u8>);

#[allow(dead_code)] // not every test that includes this file writes every codec
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Zlib,
    Zstd,
}

#[derive(Debug, Clone)]
pub struct DatWriter {
    pub version: u32,
    pub codec: Option<Codec>,
    pub page_size: u32,
    pub header_page: Vec<u8>,
    pub header_event: Vec<u8>,
    pub ftrace_formats: Vec<Vec<u8>>,
    /// (system, format files)
    pub systems: Vec<(String, Vec<Vec<u8>>)>,
    pub kallsyms: Vec<u8>,
    pub printk: Vec<u8>,
    pub cmdlines: Vec<u8>,
    /// `""`: the data goes into the top-level buffer; else into an instance of that name.
    pub buffer_name: String,
    pub clock: String,
    /// Each CPU's pages.
    pub cpus: Vec<Vec<u8>>,
    /// CPUSTAT texts ("CPU: N\n...").
    pub cpu_stats: Vec<String>,
    /// Write a latency (text) trace instead of flyrecord data.
    pub latency: bool,
    /// Write every number of the container big-endian (the pages are written as given).
    pub big_endian: bool,
    /// The `long` size the preamble states.
    pub long_size: u8,
    /// More options, as (id, data), written after the others.
    pub extra_options: Vec<(u16, Vec<u8>)>,
}

impl DatWriter {
    /// The parts of `dat`'s data buffer.
    pub fn from_dat(dat: &DatFile) -> DatWriter {
        let buffer = dat.data_buffer().expect("a buffer with data");
        let mut systems: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
        for FormatFile { system, text, .. } in &dat.metadata.event_formats {
            match systems.iter_mut().find(|(name, _)| name == system) {
                Some((_, files)) => files.push(text.clone()),
                None => systems.push((system.clone(), vec![text.clone()])),
            }
        }
        let cpus = (0..dat.cpu_count)
            .map(|cpu| {
                let mut pages = Vec::new();
                if let Some(data) = buffer.cpu(cpu) {
                    dat.copy_cpu_data(buffer, data, &mut pages)
                        .expect("cpu data");
                }
                pages
            })
            .collect();
        DatWriter {
            version: dat.version,
            codec: None,
            page_size: buffer.page_size,
            header_page: dat.metadata.header_page.clone().expect("header_page"),
            header_event: dat.metadata.header_event.clone().expect("header_event"),
            ftrace_formats: dat
                .metadata
                .ftrace_formats
                .iter()
                .map(|f| f.text.clone())
                .collect(),
            systems,
            kallsyms: dat.metadata.kallsyms.clone(),
            printk: dat.metadata.printk_formats.clone(),
            cmdlines: dat.metadata.cmdlines.clone(),
            buffer_name: buffer.name.clone(),
            clock: dat.clock(buffer).unwrap_or_else(|| "local".into()),
            cpus,
            cpu_stats: Vec::new(),
            latency: false,
            big_endian: false,
            long_size: dat.long_size,
            extra_options: Vec::new(),
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        match self.version {
            6 => self.v6(),
            7 => self.v7(),
            other => panic!("cannot write version {other}"),
        }
    }

    fn trace_clock_option(&self) -> Vec<u8> {
        format!("local global [{}] mono_raw\n\0", self.clock).into_bytes()
    }

    /// trace-cmd names the instance in a CPUSTAT option of its own before its CPUs' stats.
    fn cpu_stat_options(&self, out: &mut Vec<u8>) {
        if self.cpu_stats.is_empty() {
            return;
        }
        if !self.buffer_name.is_empty() {
            self.option(
                out,
                CPUSTAT,
                format!("\nBuffer: {}\n\n\0", self.buffer_name).as_bytes(),
            );
        }
        for stat in &self.cpu_stats {
            self.option(out, CPUSTAT, format!("{stat}\0").as_bytes());
        }
    }

    fn preamble(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"\x17\x08\x44tracing");
        out.extend_from_slice(format!("{}\0", self.version).as_bytes());
        out.push(self.big_endian as u8);
        out.push(self.long_size);
        out.extend_from_slice(&self.page_size.ordered(self.big_endian));
    }

    fn header_info(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"header_page\0");
        out.extend_from_slice(&(self.header_page.len() as u64).ordered(self.big_endian));
        out.extend_from_slice(&self.header_page);
        out.extend_from_slice(b"header_event\0");
        out.extend_from_slice(&(self.header_event.len() as u64).ordered(self.big_endian));
        out.extend_from_slice(&self.header_event);
    }

    fn ftrace_events(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.ftrace_formats.len() as u32).ordered(self.big_endian));
        for text in &self.ftrace_formats {
            out.extend_from_slice(&(text.len() as u64).ordered(self.big_endian));
            out.extend_from_slice(text);
        }
    }

    fn event_formats(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.systems.len() as u32).ordered(self.big_endian));
        for (system, files) in &self.systems {
            out.extend_from_slice(system.as_bytes());
            out.push(0);
            out.extend_from_slice(&(files.len() as u32).ordered(self.big_endian));
            for text in files {
                out.extend_from_slice(&(text.len() as u64).ordered(self.big_endian));
                out.extend_from_slice(text);
            }
        }
    }

    fn kallsyms(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.kallsyms.len() as u32).ordered(self.big_endian));
        out.extend_from_slice(&self.kallsyms);
    }

    fn printk(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.printk.len() as u32).ordered(self.big_endian));
        out.extend_from_slice(&self.printk);
    }

    fn cmdlines(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.cmdlines.len() as u64).ordered(self.big_endian));
        out.extend_from_slice(&self.cmdlines);
    }

    fn v6(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.preamble(&mut out);
        self.header_info(&mut out);
        self.ftrace_events(&mut out);
        self.event_formats(&mut out);
        self.kallsyms(&mut out);
        self.printk(&mut out);
        self.cmdlines(&mut out);
        out.extend_from_slice(&(self.cpus.len() as u32).ordered(self.big_endian));

        out.extend_from_slice(b"options  \0");
        self.option(&mut out, TRACECLOCK, &self.trace_clock_option());
        self.cpu_stat_options(&mut out);
        for (id, data) in &self.extra_options {
            self.option(&mut out, *id, data);
        }
        // The instance's BUFFER option points at its table, patched in below.
        let mut buffer_offset_at = None;
        if !self.buffer_name.is_empty() {
            let mut data = vec![0u8; 8];
            data.extend_from_slice(self.buffer_name.as_bytes());
            data.push(0);
            self.option(&mut out, BUFFER, &data);
            buffer_offset_at = Some(out.len() - data.len());
        }
        out.extend_from_slice(&DONE.ordered(self.big_endian));
        if self.latency {
            out.extend_from_slice(b"latency  \0");
            out.extend_from_slice(b"# tracer: nop\n");
            return out;
        }

        // Top-level table, then the instance's, then the page-aligned data.
        let top_table = self.v6_table(&mut out);
        let instance_table = buffer_offset_at.map(|at| {
            let table_offset = out.len() as u64;
            out[at..at + 8].copy_from_slice(&table_offset.ordered(self.big_endian));
            self.v6_table(&mut out)
        });
        let data_table = instance_table.unwrap_or(top_table);
        for (cpu, pages) in self.cpus.iter().enumerate() {
            pad_to(&mut out, self.page_size as usize);
            let offset = out.len() as u64;
            out.extend_from_slice(pages);
            let entry = data_table + cpu * 16;
            out[entry..entry + 8].copy_from_slice(&offset.ordered(self.big_endian));
            out[entry + 8..entry + 16]
                .copy_from_slice(&(pages.len() as u64).ordered(self.big_endian));
        }
        out
    }

    /// `flyrecord\0`, zeroed (offset, size) per CPU, the clock. Returns the table's start.
    fn v6_table(&self, out: &mut Vec<u8>) -> usize {
        out.extend_from_slice(b"flyrecord\0");
        let table = out.len();
        out.resize(out.len() + 16 * self.cpus.len(), 0);
        let clock = format!("[{}]", self.clock);
        out.extend_from_slice(&(clock.len() as u64).ordered(self.big_endian));
        out.extend_from_slice(clock.as_bytes());
        table
    }

    fn compress(&self, data: &[u8]) -> Vec<u8> {
        match self.codec.expect("a codec") {
            Codec::Zlib => {
                let mut encoder =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                encoder.write_all(data).unwrap();
                encoder.finish().unwrap()
            }
            Codec::Zstd => {
                ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
            }
        }
    }

    /// A section: header, then the data (as one compressed block when compressing).
    fn section(&self, out: &mut Vec<u8>, id: u16, data: &[u8]) -> u64 {
        let offset = out.len() as u64;
        let compressed = self.codec.is_some();
        let body = if compressed {
            let packed = self.compress(data);
            let mut body = Vec::new();
            body.extend_from_slice(&(packed.len() as u32).ordered(self.big_endian));
            body.extend_from_slice(&(data.len() as u32).ordered(self.big_endian));
            body.extend_from_slice(&packed);
            body
        } else {
            data.to_vec()
        };
        self.section_header(out, id, compressed as u16, body.len() as u64);
        out.extend_from_slice(&body);
        offset
    }

    fn v7(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.preamble(&mut out);
        let (name, version) = match self.codec {
            None => ("none", ""),
            Some(Codec::Zlib) => ("zlib", "1.2.13"),
            Some(Codec::Zstd) => ("zstd", "1.5.4"),
        };
        out.extend_from_slice(format!("{name}\0{version}\0").as_bytes());
        let first_options_at = out.len();
        out.extend_from_slice(&0u64.ordered(self.big_endian));

        let mut sections = Vec::new();
        let blocks: [(u16, WriteBlock); 6] = [
            (HEADER_INFO, DatWriter::header_info),
            (FTRACE_EVENTS, DatWriter::ftrace_events),
            (EVENT_FORMATS, DatWriter::event_formats),
            (KALLSYMS, DatWriter::kallsyms),
            (PRINTK, DatWriter::printk),
            (CMDLINES, DatWriter::cmdlines),
        ];
        for (id, write) in blocks {
            let mut data = Vec::new();
            write(self, &mut data);
            sections.push((id, self.section(&mut out, id, &data)));
        }

        // The flyrecord section: header, then each CPU's data page-aligned.
        let mut cpu_entries = Vec::new();
        let buffer_offset = out.len() as u64;
        if self.latency {
            self.section(&mut out, BUFFER_TEXT, b"# tracer: nop\n");
        } else {
            self.section_header(&mut out, BUFFER, self.codec.is_some() as u16, 0);
            let data_start = out.len();
            for (cpu, pages) in self.cpus.iter().enumerate() {
                if pages.is_empty() {
                    continue;
                }
                pad_to(&mut out, self.page_size as usize);
                let offset = out.len() as u64;
                match self.codec {
                    None => out.extend_from_slice(pages),
                    Some(_) => {
                        let chunks: Vec<&[u8]> = pages
                            .chunks(PAGES_PER_CHUNK * self.page_size as usize)
                            .collect();
                        out.extend_from_slice(&(chunks.len() as u32).ordered(self.big_endian));
                        for chunk in chunks {
                            let packed = self.compress(chunk);
                            out.extend_from_slice(&(packed.len() as u32).ordered(self.big_endian));
                            out.extend_from_slice(&(chunk.len() as u32).ordered(self.big_endian));
                            out.extend_from_slice(&packed);
                        }
                    }
                }
                cpu_entries.push((cpu as u32, offset, out.len() as u64 - offset));
            }
            let size = (out.len() - data_start) as u64;
            let size_at = buffer_offset as usize + 8;
            out[size_at..size_at + 8].copy_from_slice(&size.ordered(self.big_endian));
        }

        // Two chained options sections, as trace-cmd writes them: everything but the
        // buffer first, the buffer in the second.
        let mut first = Vec::new();
        for (id, offset) in &sections {
            self.option(&mut first, *id, &offset.ordered(self.big_endian));
        }
        self.option(&mut first, TRACECLOCK, &self.trace_clock_option());
        self.cpu_stat_options(&mut first);
        for (id, data) in &self.extra_options {
            self.option(&mut first, *id, data);
        }
        self.option(
            &mut first,
            CPUCOUNT,
            &(self.cpus.len() as u32).ordered(self.big_endian),
        );
        let mut second = Vec::new();
        let mut buffer = buffer_offset.ordered(self.big_endian).to_vec();
        buffer.extend_from_slice(format!("{}\0{}\0", self.buffer_name, self.clock).as_bytes());
        if self.latency {
            self.option(&mut second, BUFFER_TEXT, &buffer);
        } else {
            buffer.extend_from_slice(&self.page_size.ordered(self.big_endian));
            buffer.extend_from_slice(&(cpu_entries.len() as u32).ordered(self.big_endian));
            for (cpu, offset, size) in &cpu_entries {
                buffer.extend_from_slice(&cpu.ordered(self.big_endian));
                buffer.extend_from_slice(&offset.ordered(self.big_endian));
                buffer.extend_from_slice(&size.ordered(self.big_endian));
            }
            self.option(&mut second, BUFFER, &buffer);
        }
        self.option(&mut second, DONE, &0u64.ordered(self.big_endian));

        // Sections may lie anywhere: the second goes first so that the first's DONE can
        // name its offset even when the first is compressed.
        let second_offset = self.section(&mut out, DONE, &second);
        self.option(&mut first, DONE, &second_offset.ordered(self.big_endian));
        let first_offset = self.section(&mut out, DONE, &first);
        out[first_options_at..first_options_at + 8]
            .copy_from_slice(&first_offset.ordered(self.big_endian));
        out
    }
    fn option(&self, out: &mut Vec<u8>, id: u16, data: &[u8]) {
        out.extend_from_slice(&id.ordered(self.big_endian));
        out.extend_from_slice(&(data.len() as u32).ordered(self.big_endian));
        out.extend_from_slice(data);
    }

    fn section_header(&self, out: &mut Vec<u8>, id: u16, flags: u16, size: u64) {
        out.extend_from_slice(&id.ordered(self.big_endian));
        out.extend_from_slice(&flags.ordered(self.big_endian));
        out.extend_from_slice(&0u32.ordered(self.big_endian));
        out.extend_from_slice(&size.ordered(self.big_endian));
    }
}

/// A number in the byte order of the file being written.
trait Ordered {
    fn ordered(self, big_endian: bool) -> Vec<u8>;
}

macro_rules! ordered {
    ($($t:ty),*) => {$(
        impl Ordered for $t {
            fn ordered(self, big_endian: bool) -> Vec<u8> {
                if big_endian {
                    self.to_be_bytes().to_vec()
                } else {
                    self.to_le_bytes().to_vec()
                }
            }
        }
    )*};
}
ordered!(u16, u32, u64);

fn pad_to(out: &mut Vec<u8>, alignment: usize) {
    let padded = out.len().div_ceil(alignment) * alignment;
    out.resize(padded, 0);
}
