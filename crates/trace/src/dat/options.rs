//! The options of a .dat file: `u16 id, u32 size, data` records (trace-cmd.dat.v7(5),
//! "OPTIONS SECTION"; the same ids appear in version 6's options block).
//!
//! Options this reader does not know are skipped, as the format intends; malformed data
//! in an option it does know is an error.

use super::error::DatError;
use super::preamble::Layout;
use super::source::{option_text, Endian, Slice};

/// More CPUs than any kernel configuration has (NR_CPUS is at most 8192): a larger count
/// read from a file is corruption, and would otherwise size tables and create files.
pub const MAX_CPUS: u32 = 8192;

/// Fails unless `count` CPUs (or a CPU numbered `count - 1`) can exist.
pub fn check_cpu_count(count: u64) -> Result<(), DatError> {
    if count > MAX_CPUS as u64 {
        return Err(DatError::TooManyCpus {
            count,
            limit: MAX_CPUS,
        });
    }
    Ok(())
}

pub const DONE: u16 = 0;
pub const DATE: u16 = 1;
pub const CPUSTAT: u16 = 2;
pub const BUFFER: u16 = 3;
pub const TRACECLOCK: u16 = 4;
pub const UNAME: u16 = 5;
pub const OFFSET: u16 = 7;
pub const CPUCOUNT: u16 = 8;
pub const VERSION: u16 = 9;
pub const TRACEID: u16 = 11;
pub const TIME_SHIFT: u16 = 12;
pub const TSC2NSEC: u16 = 14;
/// A section of strings (section descriptions); found by scanning the sections, no option
/// points to it.
pub const STRINGS: u16 = 15;
pub const HEADER_INFO: u16 = 16;
pub const FTRACE_EVENTS: u16 = 17;
pub const EVENT_FORMATS: u16 = 18;
pub const KALLSYMS: u16 = 19;
pub const PRINTK: u16 = 20;
pub const CMDLINES: u16 = 21;
pub const BUFFER_TEXT: u16 = 22;
pub const BTF_FILE: u16 = 23;
pub const MODULES_FILE: u16 = 25;

/// A BUFFER option: where one instance's flyrecord data is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferOption {
    /// `""` for the top-level buffer.
    pub name: String,
    /// Version 6: the offset of this buffer's `flyrecord\0` table. Version 7: the offset of
    /// its flyrecord section.
    pub offset: u64,
    /// Version 7 only: the clock trace-cmd wrote for this buffer.
    pub clock: Option<String>,
    /// Version 7 only: the buffer's page (sub-buffer) size.
    pub page_size: Option<u32>,
    /// Version 7 only: (cpu, offset, stored size) of each CPU that has data.
    pub cpus: Vec<(u32, u64, u64)>,
}

/// The TSC2NSEC option's factors: a clock conversion, so it lives with the decoder's clock.
pub use crate::decode::clock::Tsc2Nsec;

/// One sample of a guest/host clock correction (TIME_SHIFT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TimeShiftSample {
    pub time: u64,
    pub offset: i64,
    pub scaling: u64,
}

/// TIME_SHIFT: per-CPU corrections mapping this (guest) trace onto its host's clock.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TimeShift {
    pub peer_trace_id: u64,
    pub flags: u32,
    /// Samples of each CPU, in file order.
    pub cpus: Vec<Vec<TimeShiftSample>>,
}

/// The kernel's per-CPU buffer statistics at the end of the recording (CPUSTAT).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuStat {
    /// The buffer the statistics belong to (`""`: top level).
    pub buffer: String,
    pub cpu: u32,
    pub entries: u64,
    pub overrun: u64,
    pub commit_overrun: u64,
    pub dropped_events: u64,
    pub read_events: u64,
    /// The option's text as the kernel wrote it.
    pub text: String,
}

/// Everything the options say, gathered over all options sections.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// DATE: the text trace-cmd stored (µs between trace time and wall-clock time).
    pub date: Option<String>,
    /// OFFSET: the text trace-cmd stored (ns added to every timestamp).
    pub offset: Option<String>,
    /// TRACECLOCK: the `trace_clock` file of the recorded instance, current clock in [].
    pub trace_clock: Option<String>,
    pub uname: Option<String>,
    /// VERSION: the trace-cmd that wrote the file.
    pub version: Option<String>,
    pub cpu_count: Option<u32>,
    pub trace_id: Option<u64>,
    pub tsc2nsec: Option<Tsc2Nsec>,
    pub time_shift: Option<TimeShift>,
    pub cpu_stats: Vec<CpuStat>,
    pub buffers: Vec<BufferOption>,
    /// Version 7: (section id, offset) of every section an option points to.
    pub sections: Vec<(u16, u64)>,
    /// True when the file holds latency (text) data instead of ring-buffer pages.
    pub latency: bool,
    /// Ids of options that were skipped (known but unused here, or unknown).
    pub skipped: Vec<u16>,
    /// The buffer CPUSTAT options currently describe (a "Buffer: name" option switches).
    stats_buffer: String,
}

impl Options {
    /// Adds one option.
    pub fn apply(
        &mut self,
        id: u16,
        data: &[u8],
        layout: Layout,
        endian: Endian,
    ) -> Result<(), DatError> {
        let bad = |what| DatError::BadOption { id, what };
        match id {
            DATE => self.date = Some(option_text(data)),
            OFFSET => self.offset = Some(option_text(data)),
            TRACECLOCK => {
                // Version 6 files from some trace-cmd versions store an empty option and
                // put the clock after the flyrecord table instead.
                let text = option_text(data);
                if !text.trim().is_empty() {
                    self.trace_clock = Some(text);
                }
            }
            UNAME => self.uname = Some(option_text(data)),
            VERSION => self.version = Some(option_text(data)),
            CPUCOUNT => {
                let mut slice = Slice::new(data, endian);
                let count = slice.u32().ok_or(bad("shorter than 4 bytes"))?;
                check_cpu_count(count as u64)?;
                self.cpu_count = Some(count);
            }
            TRACEID => {
                let mut slice = Slice::new(data, endian);
                self.trace_id = Some(slice.u64().ok_or(bad("shorter than 8 bytes"))?);
            }
            TSC2NSEC => {
                let mut slice = Slice::new(data, endian);
                let short = || bad("shorter than 16 bytes");
                self.tsc2nsec = Some(Tsc2Nsec {
                    mult: slice.u32().ok_or_else(short)?,
                    shift: slice.u32().ok_or_else(short)?,
                    offset: slice.u64().ok_or_else(short)?,
                });
            }
            TIME_SHIFT => {
                self.time_shift = Some(parse_time_shift(data, endian).ok_or(bad("truncated"))?)
            }
            CPUSTAT => self.add_cpu_stat(data),
            BUFFER => {
                let buffer = parse_buffer(data, layout, endian).ok_or(bad("truncated"))?;
                self.buffers.push(buffer);
            }
            BUFFER_TEXT => self.latency = true,
            HEADER_INFO | FTRACE_EVENTS | EVENT_FORMATS | KALLSYMS | PRINTK | CMDLINES
            | BTF_FILE | MODULES_FILE
                if layout == Layout::V7 =>
            {
                let mut slice = Slice::new(data, endian);
                let offset = slice.u64().ok_or(bad("shorter than 8 bytes"))?;
                self.sections.push((id, offset));
            }
            _ => self.skipped.push(id),
        }
        Ok(())
    }

    /// The clock name selected in the TRACECLOCK option (`mono` out of `... [mono] ...`).
    pub fn selected_clock(&self) -> Option<String> {
        self.trace_clock.as_deref().and_then(selected_clock)
    }

    /// Nanoseconds trace-cmd adds to every timestamp when it reports (DATE in µs and
    /// OFFSET in ns, parsed as C's `strtoll(text, NULL, 0)`); `None` when neither is set.
    pub fn ts_offset_ns(&self) -> Option<i64> {
        let date = self
            .date
            .as_deref()
            .map(|d| parse_c_integer(d).saturating_mul(1000));
        let offset = self.offset.as_deref().map(parse_c_integer);
        match (date, offset) {
            (None, None) => None,
            (d, o) => Some(d.unwrap_or(0).saturating_add(o.unwrap_or(0))),
        }
    }

    /// CPUSTAT options come as a "\nBuffer: <name>\n\n" marker followed by one option per
    /// CPU; statistics before any marker belong to the top-level buffer.
    fn add_cpu_stat(&mut self, data: &[u8]) {
        let text = option_text(data);
        if let Some(rest) = text.trim_start().strip_prefix("Buffer:") {
            self.stats_buffer = rest.trim().to_string();
            return;
        }
        let mut stat = CpuStat {
            buffer: self.stats_buffer.clone(),
            text: text.clone(),
            ..CpuStat::default()
        };
        let mut has_cpu = false;
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            // Counters are integers; the timestamps ("oldest event ts") are not needed.
            let Ok(number) = value.trim().parse::<u64>() else {
                continue;
            };
            match key.trim() {
                "CPU" => {
                    stat.cpu = number.min(u32::MAX as u64) as u32;
                    has_cpu = true;
                }
                "entries" => stat.entries = number,
                "overrun" => stat.overrun = number,
                "commit overrun" => stat.commit_overrun = number,
                "dropped events" => stat.dropped_events = number,
                "read events" => stat.read_events = number,
                _ => {}
            }
        }
        if has_cpu {
            self.cpu_stats.push(stat);
        }
    }
}

/// `clock` out of a trace_clock file's "local global [mono] ...".
pub fn selected_clock(trace_clock: &str) -> Option<String> {
    let start = trace_clock.find('[')? + 1;
    let end = start + trace_clock[start..].find(']')?;
    let clock = trace_clock[start..end].trim();
    (!clock.is_empty()).then(|| clock.to_string())
}

/// C's `strtoll(text, NULL, 0)`: optional sign, then 0x hex, 0 octal or decimal; stops at
/// the first character that does not fit, and saturates like strtoll.
pub fn parse_c_integer(text: &str) -> i64 {
    let text = text.trim_start();
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (radix, digits) =
        if let Some(hex) = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X")) {
            (16, hex)
        } else if rest.len() > 1 && rest.starts_with('0') {
            (8, &rest[1..])
        } else {
            (10, rest)
        };
    let mut value: i128 = 0;
    for c in digits.chars() {
        let Some(digit) = c.to_digit(radix) else {
            break;
        };
        value = (value * radix as i128 + digit as i128).min(i64::MAX as i128 + 1);
    }
    let value = if negative { -value } else { value };
    value.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn parse_buffer(data: &[u8], layout: Layout, endian: Endian) -> Option<BufferOption> {
    let mut slice = Slice::new(data, endian);
    let offset = slice.u64()?;
    let name = slice.c_string()?;
    let mut buffer = BufferOption {
        name,
        offset,
        clock: None,
        page_size: None,
        cpus: Vec::new(),
    };
    if layout == Layout::V6 {
        return Some(buffer);
    }
    buffer.clock = Some(slice.c_string()?);
    buffer.page_size = Some(slice.u32()?);
    let count = slice.u32()? as usize;
    // 20 bytes per CPU: check before reserving anything for a count read from the file.
    if count.checked_mul(20)? > slice.left() {
        return None;
    }
    for _ in 0..count {
        buffer.cpus.push((slice.u32()?, slice.u64()?, slice.u64()?));
    }
    Some(buffer)
}

/// u64 peer id, u32 flags, u32 cpu count; per CPU: u32 count, then `count` times,
/// `count` offsets, `count` scaling ratios (u64 each). Fraction bits may follow; they
/// are not needed to describe the samples and are left out.
fn parse_time_shift(data: &[u8], endian: Endian) -> Option<TimeShift> {
    let mut slice = Slice::new(data, endian);
    let peer_trace_id = slice.u64()?;
    let flags = slice.u32()?;
    let cpu_count = slice.u32()? as usize;
    // At least 4 bytes per CPU.
    if cpu_count.checked_mul(4)? > slice.left() {
        return None;
    }
    let mut cpus = Vec::with_capacity(cpu_count);
    for _ in 0..cpu_count {
        let count = slice.u32()? as usize;
        if count.checked_mul(24)? > slice.left() {
            return None;
        }
        let times: Vec<u64> = (0..count).map(|_| slice.u64()).collect::<Option<_>>()?;
        let offsets: Vec<u64> = (0..count).map(|_| slice.u64()).collect::<Option<_>>()?;
        let scalings: Vec<u64> = (0..count).map(|_| slice.u64()).collect::<Option<_>>()?;
        cpus.push(
            times
                .into_iter()
                .zip(offsets)
                .zip(scalings)
                .map(|((time, offset), scaling)| TimeShiftSample {
                    time,
                    offset: offset as i64,
                    scaling,
                })
                .collect(),
        );
    }
    Some(TimeShift {
        peer_trace_id,
        flags,
        cpus,
    })
}
