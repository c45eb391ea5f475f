//! Reading `samples/` back: records per CPU in file order, or every CPU merged in time
//! order, with damage counted rather than fatal.
//!
//! ```no_run
//! # use std::path::Path;
//! # use vmscale_sample::read::{Sample, Samples};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let trace_dir = Path::new("run/trace");
//! let samples = Samples::open(trace_dir)?;          // trace_dir/samples
//! let summary = samples.for_each(|s: &Sample| {
//!     // s.ts, s.cpu, s.pid, s.tid, s.period_ns, s.kernel (leaf first), s.user
//! #   let _ = s;
//! })?;
//! # let _ = summary;
//! # Ok(())
//! # }
//! ```

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::format::{self, Chain, Header, Record, HEADER_LEN, SAMPLE_TYPE};
use crate::sampler::{SampleMeta, FORMAT_VERSION, META_FILE, PROCS_FILE, SAMPLES_DIR};

/// One on-CPU sample: the task on `cpu` at `ts` and where it was, leaf first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample<'a> {
    /// CLOCK_MONOTONIC ns, the trace's clock.
    pub ts: u64,
    pub cpu: u32,
    /// Thread group (process) and thread; 0 is the idle task.
    pub pid: u32,
    pub tid: u32,
    /// The CPU time this sample stands for.
    pub period_ns: u64,
    /// Kernel frames, leaf first (symbolize with the trace's kallsyms).
    pub kernel: &'a [u64],
    /// User frames, leaf first (symbolize with [`crate::Symbolizer`]).
    pub user: &'a [u64],
    /// The CPU was running a guest: its frames are the guest's and not kept.
    pub guest: bool,
}

/// Why samples cannot be read at all (damage inside a file is counted instead).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(
        "{0} has no on-CPU samples (recorded with --no-sample, or perf_event_open was not allowed)"
    )]
    Missing(String),
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("{0}: sample format {1} is not the {FORMAT_VERSION} this vmscale reads")]
    Version(String, u32),
    #[error("{0}: samples were recorded with sample_type {1:#x}, not {SAMPLE_TYPE:#x}")]
    SampleType(String, u64),
    #[error("{0}: samples are {1}-endian, this machine is not")]
    ByteOrder(String, String),
}

/// What reading found besides the records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadSummary {
    pub records: u64,
    pub samples: u64,
    /// Sum of PERF_RECORD_LOST counts: records the kernel could not store.
    pub lost: u64,
    pub throttled: u64,
    /// Records that could not be decoded (skipped), and files cut inside a record.
    pub damaged: u64,
    /// The first few damage descriptions, with their file.
    pub damage: Vec<String>,
}

impl ReadSummary {
    fn damaged(&mut self, file: &Path, what: impl std::fmt::Display) {
        self.damaged += 1;
        if self.damage.len() < 8 {
            self.damage.push(format!("{}: {what}", file.display()));
        }
    }

    /// Warnings a report shows: lost and damaged records.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.damaged > 0 {
            out.push(format!(
                "{} damaged on-CPU sample records were skipped (first: {})",
                self.damaged,
                self.damage.first().map(String::as_str).unwrap_or("?")
            ));
        }
        out
    }
}

/// The samples of a trace directory.
#[derive(Debug, Clone)]
pub struct Samples {
    dir: PathBuf,
    meta: SampleMeta,
}

impl Samples {
    /// The samples in `trace_dir/samples`, after checking meta.json says they are in the
    /// format this reader knows.
    pub fn open(trace_dir: &Path) -> Result<Samples, ReadError> {
        let dir = trace_dir.join(SAMPLES_DIR);
        let meta_path = dir.join(META_FILE);
        let name = meta_path.display().to_string();
        if !meta_path.exists() {
            return Err(ReadError::Missing(trace_dir.display().to_string()));
        }
        let meta = SampleMeta::read(&dir).map_err(|source| ReadError::Io {
            path: name.clone(),
            source,
        })?;
        if meta.format != FORMAT_VERSION {
            return Err(ReadError::Version(name, meta.format));
        }
        if meta.sample_type != SAMPLE_TYPE {
            return Err(ReadError::SampleType(name, meta.sample_type));
        }
        let ours = if cfg!(target_endian = "little") {
            "little"
        } else {
            "big"
        };
        if meta.byte_order != ours {
            return Err(ReadError::ByteOrder(name, meta.byte_order));
        }
        Ok(Samples { dir, meta })
    }

    /// Whether `trace_dir` has samples at all.
    pub fn exist(trace_dir: &Path) -> bool {
        trace_dir.join(SAMPLES_DIR).join(META_FILE).exists()
    }

    pub fn meta(&self) -> &SampleMeta {
        &self.meta
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// One CPU's records in file order (its time order).
    pub fn cpu(&self, cpu: u32) -> Result<RecordReader, ReadError> {
        RecordReader::open(&self.dir.join(format!("cpu{cpu}")))
    }

    /// The records written from /proc at the start (COMM and MMAP2 of running processes).
    pub fn procs(&self) -> Result<RecordReader, ReadError> {
        RecordReader::open(&self.dir.join(PROCS_FILE))
    }

    /// Every record of every CPU, merged in time order (equal times by CPU), after the
    /// /proc records.
    pub fn merged(&self) -> Result<Merged, ReadError> {
        let mut readers = vec![self.procs()?];
        for &cpu in &self.meta.cpus {
            match self.cpu(cpu) {
                Ok(r) => readers.push(r),
                // A missing CPU file leaves that CPU out; the summary says so.
                Err(ReadError::Io { .. }) => {
                    readers.push(RecordReader::missing(&self.dir.join(format!("cpu{cpu}"))))
                }
                Err(e) => return Err(e),
            }
        }
        Merged::new(readers)
    }

    /// Calls `f` with every sample in time order; returns what was read.
    pub fn for_each(&self, mut f: impl FnMut(&Sample<'_>)) -> Result<ReadSummary, ReadError> {
        let mut merged = self.merged()?;
        let mut chain = Chain::default();
        while let Some((_, record)) = merged.next_record() {
            if let Record::Sample(raw) = record {
                chain.fill(raw.callchain);
                f(&Sample {
                    ts: raw.time,
                    cpu: raw.cpu,
                    pid: raw.pid,
                    tid: raw.tid,
                    period_ns: raw.period,
                    kernel: &chain.kernel,
                    user: &chain.user,
                    guest: chain.guest || raw.guest,
                });
            }
        }
        Ok(merged.summary())
    }
}

/// Records of one file, one at a time, bounded memory (a 256 KiB read buffer and one
/// record). Damage is counted in [`RecordReader::summary`] and the file is followed as far
/// as its record sizes allow.
pub struct RecordReader {
    path: PathBuf,
    input: Option<BufReader<File>>,
    header: Option<Header>,
    body: Vec<u8>,
    summary: ReadSummary,
}

impl RecordReader {
    pub fn open(path: &Path) -> Result<RecordReader, ReadError> {
        let file = File::open(path).map_err(|source| ReadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(RecordReader::from_file(path, file))
    }

    fn from_file(path: &Path, file: File) -> RecordReader {
        RecordReader {
            path: path.to_path_buf(),
            input: Some(BufReader::with_capacity(256 << 10, file)),
            header: None,
            body: Vec::new(),
            summary: ReadSummary::default(),
        }
    }

    fn missing(path: &Path) -> RecordReader {
        let mut summary = ReadSummary::default();
        summary.damaged(path, "missing: that CPU's samples are not read");
        RecordReader {
            path: path.to_path_buf(),
            input: None,
            header: None,
            body: Vec::new(),
            summary,
        }
    }

    pub fn summary(&self) -> &ReadSummary {
        &self.summary
    }

    /// Reads the next record's bytes; false at the end or where the file cannot be
    /// followed any further.
    fn advance(&mut self) -> bool {
        let Some(input) = self.input.as_mut() else {
            return false;
        };
        let mut header = [0u8; HEADER_LEN];
        match read_full(input, &mut header) {
            Ok(0) => {
                self.input = None;
                return false;
            }
            Ok(n) if n < HEADER_LEN => {
                self.summary
                    .damaged(&self.path, format!("ends {n} bytes into a record header"));
                self.input = None;
                return false;
            }
            Ok(_) => {}
            Err(e) => {
                self.summary.damaged(&self.path, e);
                self.input = None;
                return false;
            }
        }
        let h = Header::parse(&header).expect("8 bytes");
        if (h.size as usize) < HEADER_LEN {
            // Sizes are how records are found: past a bad one nothing can be trusted.
            self.summary
                .damaged(&self.path, format::Damage::TooSmall(h.size));
            self.input = None;
            return false;
        }
        self.body.resize(h.size as usize - HEADER_LEN, 0);
        match read_full(input, &mut self.body) {
            Ok(n) if n == self.body.len() => {}
            Ok(n) => {
                self.summary.damaged(
                    &self.path,
                    format!("ends {n} bytes into a {}-byte record", h.size),
                );
                self.input = None;
                return false;
            }
            Err(e) => {
                self.summary.damaged(&self.path, e);
                self.input = None;
                return false;
            }
        }
        self.header = Some(h);
        true
    }

    /// The next decodable record; damaged ones are counted and skipped.
    pub fn next_record(&mut self) -> Option<Record<'_>> {
        loop {
            if !self.advance() {
                return None;
            }
            let h = self.header.expect("advance set it");
            // Decode once to check; the borrow checker wants the returned record to come
            // from a fresh borrow, so a good record is parsed again below (cheap).
            match format::parse(h, &self.body) {
                Ok(record) => {
                    count(&mut self.summary, &record);
                    break;
                }
                Err(damage) => self.summary.damaged(&self.path, damage),
            }
        }
        let h = self.header.expect("advance set it");
        format::parse(h, &self.body).ok()
    }
}

fn count(summary: &mut ReadSummary, record: &Record<'_>) {
    summary.records += 1;
    match record {
        Record::Sample(_) => summary.samples += 1,
        Record::Lost { lost, .. } => summary.lost += lost,
        Record::Throttle { on: true, .. } => summary.throttled += 1,
        _ => {}
    }
}

fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Several files' records merged by time: each file's next record waits in a heap.
pub struct Merged {
    readers: Vec<RecordReader>,
    /// (Reverse(time), Reverse(reader)) of each reader's pending record.
    heap: BinaryHeap<(std::cmp::Reverse<u64>, std::cmp::Reverse<usize>)>,
    /// The reader whose record was returned last, to advance on the next call.
    current: Option<usize>,
}

impl Merged {
    fn new(mut readers: Vec<RecordReader>) -> Result<Merged, ReadError> {
        let mut heap = BinaryHeap::new();
        for (i, reader) in readers.iter_mut().enumerate() {
            if let Some(time) = reader.next_record().map(|r| r.time()) {
                heap.push((std::cmp::Reverse(time), std::cmp::Reverse(i)));
            }
        }
        Ok(Merged {
            readers,
            heap,
            current: None,
        })
    }

    /// The next record in time order and the index of the file it came from (0: procs,
    /// then the CPUs in meta.json's order).
    pub fn next_record(&mut self) -> Option<(usize, Record<'_>)> {
        if let Some(i) = self.current.take() {
            if let Some(time) = self.readers[i].next_record().map(|r| r.time()) {
                self.heap
                    .push((std::cmp::Reverse(time), std::cmp::Reverse(i)));
            }
        }
        let (_, std::cmp::Reverse(i)) = self.heap.pop()?;
        self.current = Some(i);
        let reader = &self.readers[i];
        let h = reader.header?;
        format::parse(h, &reader.body).ok().map(|r| (i, r))
    }

    /// What every file held, added up.
    pub fn summary(&self) -> ReadSummary {
        let mut total = ReadSummary::default();
        for r in &self.readers {
            let s = &r.summary;
            total.records += s.records;
            total.samples += s.samples;
            total.lost += s.lost;
            total.throttled += s.throttled;
            total.damaged += s.damaged;
            for d in &s.damage {
                if total.damage.len() < 8 {
                    total.damage.push(d.clone());
                }
            }
        }
        total
    }
}

/// Records of an in-memory byte string, for tests and fuzzing: the same decoding as a
/// file's, damage counted.
pub fn records_of(bytes: &[u8], mut f: impl FnMut(&Record<'_>)) -> ReadSummary {
    let path = Path::new("<bytes>");
    let mut summary = ReadSummary::default();
    let mut at = 0usize;
    while at < bytes.len() {
        let Some(h) = Header::parse(&bytes[at..]) else {
            summary.damaged(
                path,
                format!("ends {} bytes into a record header", bytes.len() - at),
            );
            break;
        };
        if (h.size as usize) < HEADER_LEN {
            summary.damaged(path, format::Damage::TooSmall(h.size));
            break;
        }
        let Some(body) = bytes.get(at + HEADER_LEN..at + h.size as usize) else {
            summary.damaged(path, format!("ends inside a {}-byte record", h.size));
            break;
        };
        match format::parse(h, body) {
            Ok(record) => {
                count(&mut summary, &record);
                f(&record);
            }
            Err(damage) => summary.damaged(path, damage),
        }
        at += h.size as usize;
    }
    summary
}
