//! Recording on-CPU stacks into a trace directory's `samples/`.
//!
//! One cpu-clock event per CPU, system-wide (`pid = -1, cpu = N`), opened disabled with
//! kernel and user call chains, times on CLOCK_MONOTONIC (the trace's clock) and the side
//! band (MMAP2 of executable file mappings, COMM, FORK/EXIT) that user frames are
//! symbolized from. One reader thread per CPU polls its event and copies what its ring
//! buffer holds into `samples/cpu<N>`; memory is the ring buffers plus one write buffer
//! per CPU, whatever the length of the recording.
//!
//! The events are enabled once, when the sampler opens, and stay enabled until
//! [`Sampler::finish`]: switching a CPU's event from another CPU costs an IPI and a wait
//! for it (on a nested host, `smp_call_function_single` was seen spinning for tens of
//! milliseconds per switch), which toggling them around every measured phase would add to
//! the run. [`Sampler::set_on`] instead records the windows during which the trace was on
//! (`meta.json`'s `windows`); readers keep the samples inside them
//! ([`crate::Filter::windows`]), the others stay in the files.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use perf_event_open_sys as perf;
use perf_event_open_sys::bindings as sys;
use serde::{Deserialize, Serialize};

use crate::format::{self, SampleId, SAMPLE_TYPE};
use crate::ring::{Counts, Ring};

/// The trace directory's folder of samples.
pub const SAMPLES_DIR: &str = "samples";
/// The records of processes that ran before sampling began, written from /proc.
pub const PROCS_FILE: &str = "procs";
pub const META_FILE: &str = "meta.json";
/// The format version meta.json declares; a reader refuses others.
pub const FORMAT_VERSION: u32 = 1;

/// Default sampling frequency: a prime, so the samples do not beat with the kernel's
/// periodic work (HZ is 100, 250, 300 or 1000).
pub const DEFAULT_HZ: u32 = 997;
pub const MIN_HZ: u32 = 1;
/// Above this the sampling itself becomes a measurable load (and the kernel throttles it
/// at its perf_event_max_sample_rate anyway).
pub const MAX_HZ: u32 = 20_000;
/// Data pages per CPU ring buffer (512 KiB with 4 KiB pages): about 1.5 s of samples at
/// 997 Hz with deep stacks before the reader must have drained it.
pub const DEFAULT_DATA_PAGES: usize = 128;
/// Call-chain depth kept per sample (the kernel's default limit is 127).
pub const MAX_STACK: u16 = 127;

/// How to sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleConfig {
    pub hz: u32,
    /// Data pages per CPU (a power of two).
    pub data_pages: usize,
}

impl Default for SampleConfig {
    fn default() -> Self {
        SampleConfig {
            hz: DEFAULT_HZ,
            data_pages: DEFAULT_DATA_PAGES,
        }
    }
}

/// Why sampling could not start or finish; always one line.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error("perf_event_open is not allowed here ({0}): no on-CPU samples; run as root, or lower kernel.perf_event_paranoid")]
    NotAllowed(String),
    #[error("perf_event_open is not available here ({0}): no on-CPU samples")]
    Unsupported(String),
    #[error("sampling CPU {cpu}: {source}")]
    Cpu { cpu: u32, source: io::Error },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("--sample-hz must be between {MIN_HZ} and {MAX_HZ}, not {0}")]
    Hz(u32),
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> SampleError + '_ {
    move |source| SampleError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// What one CPU's file holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuCounts {
    pub bytes: u64,
    pub records: u64,
    pub samples: u64,
    /// Records the kernel could not store (its PERF_RECORD_LOST counts): a full buffer.
    pub lost: u64,
    /// Times the kernel throttled the event (more samples per tick than it allows).
    pub throttled: u64,
}

impl From<Counts> for CpuCounts {
    fn from(c: Counts) -> Self {
        CpuCounts {
            bytes: c.bytes,
            records: c.records,
            samples: c.samples,
            lost: c.lost,
            throttled: c.throttled,
        }
    }
}

/// `samples/meta.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleMeta {
    pub format: u32,
    /// `cpu-clock`: a software timer per CPU, firing every `period_ns` of CPU time.
    pub event: String,
    pub hz: u32,
    pub period_ns: u64,
    /// `mono`: CLOCK_MONOTONIC, the trace's clock.
    pub clock: String,
    /// perf_event_attr.sample_type ([`crate::format::SAMPLE_TYPE`]).
    pub sample_type: u64,
    /// `little` or `big`: the byte order of every field.
    pub byte_order: String,
    pub max_stack: u16,
    pub data_pages: usize,
    pub cpus: Vec<u32>,
    /// CPU number (as a string, for JSON) -> what its file holds and what it lost.
    pub per_cpu: BTreeMap<String, CpuCounts>,
    /// Records written from /proc for the processes that ran before sampling began.
    pub procs_records: u64,
    /// CLOCK_MONOTONIC intervals the samples are read for (while the trace was on); the
    /// files also hold the samples taken between them, from the sampler's start to its
    /// finish.
    pub windows: Vec<(u64, u64)>,
}

impl SampleMeta {
    pub fn samples(&self) -> u64 {
        self.per_cpu.values().map(|c| c.samples).sum()
    }

    pub fn lost(&self) -> u64 {
        self.per_cpu.values().map(|c| c.lost).sum()
    }

    /// One warning per CPU that lost samples or was throttled.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (cpu, c) in &self.per_cpu {
            if c.lost > 0 {
                out.push(format!(
                    "cpu{cpu} lost {} on-CPU sample records (its {} KiB sample buffer was full): on-CPU shares from samples are from the {} kept",
                    c.lost,
                    self.data_pages * crate::ring::page_size() / 1024,
                    c.samples
                ));
            }
            if c.throttled > 0 {
                out.push(format!(
                    "cpu{cpu}'s sampling was throttled {} times by the kernel (kernel.perf_event_max_sample_rate): fewer samples than {} Hz",
                    c.throttled, self.hz
                ));
            }
        }
        out
    }

    pub fn read(samples_dir: &Path) -> io::Result<SampleMeta> {
        let text = std::fs::read(samples_dir.join(META_FILE))?;
        serde_json::from_slice(&text).map_err(io::Error::other)
    }
}

/// The CPUs the kernel has online, from /sys/devices/system/cpu/online ("0-3,6").
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || io::Error::other(format!("cannot read the online CPU list {text:?}"));
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    Ok(cpus)
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The attribute every CPU's event is opened with.
fn attr(hz: u32) -> sys::perf_event_attr {
    let mut attr = sys::perf_event_attr {
        type_: sys::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        config: sys::PERF_COUNT_SW_CPU_CLOCK as u64,
        sample_type: SAMPLE_TYPE,
        clockid: libc::CLOCK_MONOTONIC,
        sample_max_stack: MAX_STACK,
        ..Default::default()
    };
    // A fixed period of CPU time, not a target frequency: every sample then stands for
    // exactly period_ns of CPU time.
    attr.__bindgen_anon_1.sample_period = period_ns(hz);
    // Wake the reader when a quarter of the buffer is full, not at every record.
    attr.set_watermark(1);
    attr.set_disabled(1);
    attr.set_use_clockid(1);
    attr.set_sample_id_all(1);
    attr.set_mmap(1);
    attr.set_mmap2(1);
    attr.set_comm(1);
    attr.set_comm_exec(1);
    attr.set_task(1);
    attr
}

pub fn period_ns(hz: u32) -> u64 {
    1_000_000_000 / u64::from(hz.max(1))
}

fn open_event(attr: &mut sys::perf_event_attr, cpu: u32) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a fully initialised perf_event_attr whose `size` is its own size;
    // a system-wide software event on one CPU has no effect beyond sampling.
    let fd = unsafe {
        perf::perf_event_open(
            attr,
            -1,
            cpu as libc::c_int,
            -1,
            sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn paranoid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|t| format!("kernel.perf_event_paranoid is {}", t.trim()))
        .unwrap_or_else(|_| "no /proc/sys/kernel/perf_event_paranoid".into())
}

/// An open failure as the one-line error a user can act on.
fn open_error(cpu: u32, e: io::Error) -> SampleError {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => {
            SampleError::NotAllowed(format!("{e}; {}", paranoid()))
        }
        Some(libc::ENOSYS) => SampleError::NotAllowed(format!(
            "{e}: the system call is filtered (seccomp) or absent"
        )),
        Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => {
            SampleError::Unsupported(format!("cpu-clock on CPU {cpu}: {e}"))
        }
        _ => SampleError::Cpu { cpu, source: e },
    }
}

struct Reader {
    cpu: u32,
    handle: JoinHandle<io::Result<Counts>>,
}

/// On-CPU sampling in progress.
pub struct Sampler {
    dir: PathBuf,
    config: SampleConfig,
    cpus: Vec<u32>,
    readers: Vec<Reader>,
    stop: Arc<AtomicBool>,
    windows: Vec<(u64, u64)>,
    on_since: Option<u64>,
    procs_records: u64,
    // Last: closed after the readers, which poll them, have stopped.
    fds: Vec<OwnedFd>,
}

impl Sampler {
    /// Opens one disabled event per online CPU and starts its reader; `dir` (the trace
    /// directory's `samples/`, created) receives the records. The processes already
    /// running are written to `procs` first, so their frames can be symbolized.
    pub fn open(dir: &Path, config: SampleConfig) -> Result<Sampler, SampleError> {
        if !(MIN_HZ..=MAX_HZ).contains(&config.hz) {
            return Err(SampleError::Hz(config.hz));
        }
        let cpus = online_cpus().map_err(io_at(Path::new("/sys/devices/system/cpu/online")))?;
        let mut attr = attr(config.hz);
        attr.__bindgen_anon_2.wakeup_watermark =
            (config.data_pages * crate::ring::page_size() / 4) as u32;
        let mut fds = Vec::with_capacity(cpus.len());
        for &cpu in &cpus {
            fds.push(open_event(&mut attr, cpu).map_err(|e| open_error(cpu, e))?);
        }
        std::fs::create_dir_all(dir).map_err(io_at(dir))?;
        let procs = dir.join(PROCS_FILE);
        let procs_records = write_procs(&procs).map_err(io_at(&procs))?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut sampler = Sampler {
            dir: dir.to_path_buf(),
            config,
            cpus: cpus.clone(),
            readers: Vec::new(),
            stop,
            windows: Vec::new(),
            on_since: None,
            procs_records,
            fds: Vec::new(),
        };
        for (&cpu, fd) in cpus.iter().zip(fds) {
            let ring = Ring::map(fd.as_fd(), config.data_pages)
                .map_err(|source| SampleError::Cpu { cpu, source })?;
            let target = dir.join(format!("cpu{cpu}"));
            let output = File::create(&target).map_err(io_at(&target))?;
            let stop = Arc::clone(&sampler.stop);
            let raw = fd.as_raw_fd();
            let handle = std::thread::Builder::new()
                .name(format!("sample-cpu{cpu}"))
                .spawn(move || drain(ring, raw, output, &stop))
                .map_err(|source| SampleError::Cpu { cpu, source })?;
            sampler.fds.push(fd);
            sampler.readers.push(Reader { cpu, handle });
        }
        sampler.switch(true)?;
        Ok(sampler)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Enables (`true`) or disables every CPU's event.
    fn switch(&self, on: bool) -> Result<(), SampleError> {
        for (fd, &cpu) in self.fds.iter().zip(&self.cpus) {
            // SAFETY: an ioctl with an integer argument on a perf event fd we own.
            let done = unsafe {
                if on {
                    perf::ioctls::ENABLE(fd.as_raw_fd(), 0)
                } else {
                    perf::ioctls::DISABLE(fd.as_raw_fd(), 0)
                }
            };
            if done < 0 {
                let source = io::Error::last_os_error();
                return Err(SampleError::Cpu { cpu, source });
            }
        }
        Ok(())
    }

    /// Marks the start (`true`) or end of a window the samples are read for: the
    /// measured phases, while the trace is on. The events themselves stay enabled.
    pub fn set_on(&mut self, on: bool) {
        match (on, self.on_since) {
            (true, None) => self.on_since = Some(monotonic_ns()),
            (false, Some(since)) => {
                self.windows.push((since, monotonic_ns()));
                self.on_since = None;
            }
            _ => {}
        }
    }

    /// Disables the events, drains every buffer, writes meta.json.
    pub fn finish(mut self) -> Result<SampleMeta, SampleError> {
        self.set_on(false);
        self.switch(false)?;
        let mut per_cpu = BTreeMap::new();
        for (cpu, result) in self.stop_readers() {
            let counts = result.map_err(|source| SampleError::Cpu { cpu, source })?;
            per_cpu.insert(cpu.to_string(), CpuCounts::from(counts));
        }
        let meta = SampleMeta {
            format: FORMAT_VERSION,
            event: "cpu-clock".into(),
            hz: self.config.hz,
            period_ns: period_ns(self.config.hz),
            clock: "mono".into(),
            sample_type: SAMPLE_TYPE,
            byte_order: if cfg!(target_endian = "little") {
                "little"
            } else {
                "big"
            }
            .into(),
            max_stack: MAX_STACK,
            data_pages: self.config.data_pages,
            cpus: self.cpus.clone(),
            per_cpu,
            procs_records: self.procs_records,
            windows: self.windows.clone(),
        };
        let path = self.dir.join(META_FILE);
        let json = serde_json::to_vec_pretty(&meta).map_err(|e| io_at(&path)(e.into()))?;
        std::fs::write(&path, json).map_err(io_at(&path))?;
        Ok(meta)
    }

    fn stop_readers(&mut self) -> Vec<(u32, io::Result<Counts>)> {
        self.stop.store(true, Ordering::Release);
        self.readers
            .drain(..)
            .map(|r| {
                let result = r
                    .handle
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("sample reader panicked")));
                (r.cpu, result)
            })
            .collect()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        for fd in &self.fds {
            // SAFETY: as in set_on; failure leaves nothing to clean up.
            unsafe { perf::ioctls::DISABLE(fd.as_raw_fd(), 0) };
        }
        // The readers poll the fds: they stop before the fds close (field order).
        self.stop_readers();
    }
}

/// How long a reader waits for its watermark before draining what there is; also the
/// longest a finish waits for a reader to notice the stop.
const POLL_TIMEOUT_MS: i32 = 100;

/// Copies one CPU's ring buffer into its file until stopped, then drains the rest.
fn drain(mut ring: Ring, fd: RawFd, output: File, stop: &AtomicBool) -> io::Result<Counts> {
    let mut out = BufWriter::with_capacity(256 << 10, output);
    let mut total = Counts::default();
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let counts = ring.drain(&mut |bytes| out.write_all(bytes))?;
        total.add(counts);
        if stopping {
            break;
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for an fd the Sampler keeps open until this thread is
        // joined; the result is only a hint to drain.
        unsafe { libc::poll(&mut pfd, 1, POLL_TIMEOUT_MS) };
    }
    out.flush()?;
    Ok(total)
}

/// Writes a COMM per thread and an MMAP2 per executable file mapping of every process in
/// /proc, on the trace clock at this moment, and returns how many records it wrote.
/// Processes that vanish while being read are skipped.
fn write_procs(path: &Path) -> io::Result<u64> {
    let mut out = BufWriter::new(File::create(path)?);
    let now = monotonic_ns();
    let mut records = 0u64;
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    for pid in pids {
        let base = PathBuf::from(format!("/proc/{pid}"));
        let Ok(maps) = std::fs::read_to_string(base.join("maps")) else {
            continue;
        };
        if let Ok(tasks) = std::fs::read_dir(base.join("task")) {
            let mut tids: Vec<u32> = tasks
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect();
            tids.sort_unstable();
            for tid in tids {
                let Ok(comm) = std::fs::read_to_string(base.join(format!("task/{tid}/comm")))
                else {
                    continue;
                };
                let id = SampleId {
                    pid,
                    tid,
                    time: now,
                    cpu: u32::MAX,
                };
                out.write_all(&format::encode::comm(
                    pid,
                    tid,
                    comm.trim_end_matches('\n'),
                    false,
                    id,
                ))?;
                records += 1;
            }
        }
        for line in maps.lines() {
            let Some(m) = parse_maps_line(line) else {
                continue;
            };
            let id = SampleId {
                pid,
                tid: pid,
                time: now,
                cpu: u32::MAX,
            };
            let record = format::Mmap {
                pid,
                tid: pid,
                id,
                ..m
            };
            out.write_all(&format::encode::mmap2(&record))?;
            records += 1;
        }
    }
    out.flush()?;
    Ok(records)
}

/// An executable, file-backed line of /proc/PID/maps as a mapping (pid and time unset).
pub(crate) fn parse_maps_line(line: &str) -> Option<format::Mmap<'_>> {
    // 55d0c0a00000-55d0c0b00000 r-xp 00001000 08:01 1234   /usr/bin/qemu-system-x86_64
    let mut parts = line.splitn(6, ' ');
    let range = parts.next()?;
    let perms = parts.next()?;
    let offset = parts.next()?;
    let dev = parts.next()?;
    let inode = parts.next()?;
    let path = parts.next().unwrap_or("").trim_start();
    if !perms.contains('x') || !path.starts_with('/') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let (start, end) = (
        u64::from_str_radix(start, 16).ok()?,
        u64::from_str_radix(end, 16).ok()?,
    );
    let (maj, min) = dev.split_once(':')?;
    let mut prot = 0;
    for (c, bit) in [
        ('r', libc::PROT_READ),
        ('w', libc::PROT_WRITE),
        ('x', libc::PROT_EXEC),
    ] {
        if perms.contains(c) {
            prot |= bit as u32;
        }
    }
    let flags = if perms.ends_with('s') {
        libc::MAP_SHARED
    } else {
        libc::MAP_PRIVATE
    } as u32;
    Some(format::Mmap {
        pid: 0,
        tid: 0,
        addr: start,
        len: end.checked_sub(start)?,
        pgoff: u64::from_str_radix(offset, 16).ok()?,
        maj: u32::from_str_radix(maj, 16).ok()?,
        min: u32::from_str_radix(min, 16).ok()?,
        ino: inode.parse().ok()?,
        prot,
        flags,
        filename: path,
        id: SampleId::default(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn refusals_are_one_line_that_says_what_to_do() {
        for errno in [libc::EACCES, libc::EPERM, libc::ENOSYS] {
            let e = super::open_error(0, std::io::Error::from_raw_os_error(errno)).to_string();
            assert!(e.starts_with("perf_event_open is not allowed here"), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let e = super::open_error(1, std::io::Error::from_raw_os_error(libc::ENOENT)).to_string();
        assert!(e.contains("not available") && e.contains("CPU 1"), "{e}");
    }

    #[test]
    fn maps_lines_keep_executable_files_only() {
        let m = super::parse_maps_line(
            "55d0c0a00000-55d0c0b00000 r-xp 00001000 08:01 1234                       /usr/bin/qemu-system-x86_64",
        )
        .unwrap();
        assert_eq!(
            (m.addr, m.len, m.pgoff, m.maj, m.min, m.ino, m.filename),
            (
                0x55d0c0a00000,
                0x100000,
                0x1000,
                8,
                1,
                1234,
                "/usr/bin/qemu-system-x86_64"
            )
        );
        assert!(
            super::parse_maps_line("7ffd1000-7ffd2000 r-xp 00000000 00:00 0   [vdso]").is_none()
        );
        assert!(
            super::parse_maps_line("55d0c0a00000-55d0c0b00000 rw-p 00001000 08:01 1234 /x")
                .is_none()
        );
        assert!(super::parse_maps_line("garbage").is_none());
    }
}
