//! Recording the kernel into a trace directory (docs/trace-dir.md).
//!
//! Life of a recording:
//! 1. [`Recording::prepare`]: a private instance, configured and with every event enabled
//!    while `tracing_on` is 0 (enabling patches kernel code and sends IPIs of its own, which
//!    must not land in the measurement), formats and kallsyms saved, one reader thread per
//!    CPU already draining `trace_pipe_raw`.
//! 2. [`Recording::set_on`] around each measured phase, [`Recording::mark`] for phase
//!    markers on the same clock as the samples.
//! 3. [`Recording::finish`]: tracing off, readers drain what is left, lost-event counters
//!    read, `meta.json` written, instance removed.
//!
//! Dropping a `Recording` without `finish` (an error or Ctrl-C path) still stops the readers
//! and removes the instance.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use vmscale_sys::monotonic_ns;

use serde::{Deserialize, Serialize};

use crate::record::tracefs::{Error, Instance};

/// What to record.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// `system:event` names to enable.
    pub events: Vec<String>,
    /// Events enabled too where this kernel has them, and left out where it does not.
    pub optional_events: Vec<String>,
    /// Events that get a kernel stack recorded right after them, each `system:event` or
    /// `system:event if FILTER` (tracefs filter syntax: a stack only when it holds).
    pub stack_events: Vec<String>,
    /// Per-CPU ring-buffer size.
    pub buffer_kib: u64,
    /// Thread ids whose raw_syscalls events are kept (empty, with `syscall_ids` empty too:
    /// all tasks).
    pub syscall_tids: Vec<u32>,
    /// System call numbers kept from every task whatever `syscall_tids` says: a VMM's
    /// threads, created after the filter is set, are found by what they call (ioctl).
    pub syscall_ids: Vec<i64>,
}

/// The trace directory's `pid tgid` lines: which process each task belongs to.
pub const TGIDS_FILE: &str = "tgids";

/// The default per-CPU buffer: 16 MiB held every run here without overruns; 2 MiB with
/// stacks on every event overran.
pub const DEFAULT_BUFFER_KIB: u64 = 16 * 1024;
/// Per-CPU buffer sizes vmscale asks for: below a few pages nothing useful fits; above 1 GiB
/// per CPU the kernel's allocation would eat the host.
pub const MIN_BUFFER_KIB: u64 = 64;
pub const MAX_BUFFER_KIB: u64 = 1 << 20;

/// Events every scenario records for the lock-contention analysis.
pub fn default_events() -> Vec<String> {
    [
        "lock:contention_begin",
        "lock:contention_end",
        "sched:sched_switch",
        "sched:sched_wakeup",
        "sched:sched_wakeup_new",
        "sched:sched_waking",
        "raw_syscalls:sys_enter",
        "raw_syscalls:sys_exit",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Events recorded where the kernel has them:
/// - who sends IPIs, from where, asking what (ipi_send_*: 6.5 and later), and the cross-CPU
///   calls senders wait for (csd:*: 6.3 and later);
/// - mmap_lock:* (5.10 and later), every acquisition and release of an mm's mmap_lock, so
///   its holders are known exactly rather than inferred from wakeups.
///
/// A kernel without the IPI events gets [`OLDER_IPI_EVENTS`] instead.
pub fn optional_events() -> Vec<String> {
    [
        "ipi:ipi_send_cpu",
        "ipi:ipi_send_cpumask",
        "csd:csd_queue_cpu",
        "csd:csd_function_entry",
        "csd:csd_function_exit",
        "mmap_lock:mmap_lock_start_locking",
        "mmap_lock:mmap_lock_acquire_returned",
        "mmap_lock:mmap_lock_released",
        // What kernel workers run, and on which workqueue: a task asleep in a flush is
        // woken by the worker that ran its work.
        "workqueue:workqueue_queue_work",
        "workqueue:workqueue_execute_start",
        "workqueue:workqueue_execute_end",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// What older kernels trace of IPIs, recorded where ipi_send_cpu or csd_function_entry is
/// missing: ARM's sender (ipi_raise) and handler (ipi_entry/exit) events, and x86's
/// function-call IPI handlers. They count IPIs and their handlers' time; they cannot tie a
/// sender's wait to the call it waits for, which only csd:* can.
pub const OLDER_IPI_EVENTS: &[&str] = &[
    "ipi:ipi_raise",
    "ipi:ipi_entry",
    "ipi:ipi_exit",
    "irq_vectors:call_function_entry",
    "irq_vectors:call_function_exit",
    "irq_vectors:call_function_single_entry",
    "irq_vectors:call_function_single_exit",
];

/// `optional`, plus [`OLDER_IPI_EVENTS`] when it asks for a newer IPI event the kernel
/// lacks (`exists` says whether the kernel has an event).
fn with_older_ipi_events(mut optional: Vec<String>, exists: impl Fn(&str) -> bool) -> Vec<String> {
    let newer = ["ipi:ipi_send_cpu", "csd:csd_function_entry"];
    if newer
        .iter()
        .any(|e| optional.iter().any(|o| o == e) && !exists(e))
    {
        optional.extend(OLDER_IPI_EVENTS.iter().map(|e| e.to_string()));
    }
    optional
}

impl Default for RecordConfig {
    fn default() -> Self {
        RecordConfig {
            events: default_events(),
            optional_events: optional_events(),
            stack_events: vec!["lock:contention_begin".into()],
            buffer_kib: DEFAULT_BUFFER_KIB,
            syscall_tids: Vec::new(),
            syscall_ids: Vec::new(),
        }
    }
}

/// Events lost on one CPU, from per_cpu/cpuN/stats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LostEvents {
    pub overrun: u64,
    pub commit_overrun: u64,
    pub dropped_events: u64,
}

impl LostEvents {
    pub fn total(&self) -> u64 {
        self.overrun + self.commit_overrun + self.dropped_events
    }
}

/// `meta.json` of a trace directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceMeta {
    pub page_size: usize,
    pub cpus: Vec<u32>,
    pub clock: String,
    pub events: Vec<String>,
    pub stacks: bool,
    pub buffer_kib: u64,
    /// CPU number (as a string, for JSON) -> what it lost.
    pub lost: BTreeMap<String, LostEvents>,
    pub started_ns: u64,
    pub stopped_ns: u64,
    /// CLOCK_MONOTONIC intervals during which tracing_on was 1.
    #[serde(default)]
    pub windows: Vec<(u64, u64)>,
    /// Pages each reader wrote, per CPU: `cpu<N>.raw` is exactly this many pages, so a file
    /// cut at a page boundary shows. Absent (empty) in a meta.json written before it was.
    #[serde(default)]
    pub pages: BTreeMap<String, u64>,
}

impl TraceMeta {
    /// A trace directory's meta.json, where it has a readable one.
    pub fn read(dir: &Path) -> Option<TraceMeta> {
        serde_json::from_slice(&std::fs::read(dir.join("meta.json")).ok()?).ok()
    }

    /// One warning per CPU that lost events, e.g. "cpu1 lost 2,345 events ...".
    pub fn lost_warnings(&self) -> Vec<String> {
        self.lost
            .iter()
            .filter(|(_, l)| l.total() > 0)
            .map(|(cpu, l)| {
                format!(
                    "cpu{cpu} lost {} trace events (overrun {}, commit overrun {}, dropped {}): waits and counts from the trace are lower bounds; raise --buffer-kib",
                    l.total(),
                    l.overrun,
                    l.commit_overrun,
                    l.dropped_events
                )
            })
            .collect()
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf only reads a system value.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

struct Reader {
    cpu: u32,
    handle: JoinHandle<std::io::Result<u64>>,
}

/// A recording in progress.
pub struct Recording {
    dir: PathBuf,
    config: RecordConfig,
    page_size: usize,
    cpus: Vec<u32>,
    readers: Vec<Reader>,
    stop: Arc<Stop>,
    marker: File,
    windows: Vec<(u64, u64)>,
    on_since: Option<u64>,
    started_ns: Option<u64>,
    /// Tasks whose system calls were added after setup ([`Recording::follow_syscalls_of`]).
    extra_syscall_tids: Vec<u32>,
    /// System calls of every task recorded through their own events
    /// ([`trace_calls_by_own_events`]), which raw_syscalls then leaves out.
    own_event_ids: Vec<i64>,
    // Last: dropped after the readers have closed their per-CPU files.
    instance: Instance,
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}

impl Recording {
    /// Sets up the instance and the reader threads; `dir` (created) receives the trace.
    pub fn prepare(mount: &Path, dir: &Path, config: RecordConfig) -> Result<Recording, Error> {
        std::fs::create_dir_all(dir).map_err(io_at(dir))?;
        let instance = Instance::create(mount)?;
        instance.write("buffer_size_kb", &config.buffer_kib.to_string())?;
        instance.write("trace_clock", "mono")?;
        // Readers are woken when a tenth of the buffer is full rather than reading a
        // nearly empty page at every poll timeout: whole pages, a tenth of the files.
        if instance.path().join("buffer_percent").exists() {
            instance.write("buffer_percent", "10")?;
        }
        // Real pointers in any text rendering; the binary records carry them regardless.
        if instance.path().join("options/hash-ptr").exists() {
            instance.write("options/hash-ptr", "0")?;
        }
        // The kernel then notes each task's thread group as it switches, so a system-wide
        // recording can group tasks by process (saved_tgids, read at the end).
        if instance.path().join("options/record-tgid").exists() {
            instance.write("options/record-tgid", "1")?;
        }
        let mut config = config;
        let own_event_ids = trace_calls_by_own_events(&instance, &mut config);
        for event in &config.events {
            instance.enable_event(event)?;
        }
        // What this kernel lacks is left out; the events list (meta.json, saved formats)
        // then says what was really recorded.
        let optional = with_older_ipi_events(std::mem::take(&mut config.optional_events), |e| {
            instance.event_dir(e).is_ok()
        });
        for event in optional {
            if instance.event_dir(&event).is_ok() && !config.events.contains(&event) {
                instance.enable_event(&event)?;
                config.events.push(event);
            }
        }
        for event in &config.stack_events {
            // "system:event if FILTER": a stack only when the filter holds.
            match event.split_once(" if ") {
                Some((event, filter)) => {
                    instance.add_stack_trigger_if(event.trim(), filter.trim())?
                }
                None => instance.add_stack_trigger(event)?,
            }
        }
        set_syscall_filter(&instance, &config, &own_event_ids, &[])?;
        save_formats(&instance, dir, &config)?;
        let kallsyms = dir.join("kallsyms");
        std::fs::copy("/proc/kallsyms", &kallsyms).map_err(io_at(&kallsyms))?;
        // What `const char *` fields point at (ipi_raise's reason): the root's listing,
        // read only. A kernel without it leaves such fields as addresses.
        let printk = dir.join(crate::decode::PRINTK_FORMATS_FILE);
        if let Ok(text) = std::fs::read(mount.join("printk_formats")) {
            std::fs::write(&printk, text).map_err(io_at(&printk))?;
        }

        let page_size = page_size();
        let cpus = instance.cpus()?;
        let stop = Arc::new(Stop::new().map_err(io_at(dir))?);
        let marker = instance.open_marker()?;
        let mut recording = Recording {
            dir: dir.to_path_buf(),
            config,
            page_size,
            cpus: cpus.clone(),
            readers: Vec::new(),
            stop,
            marker,
            windows: Vec::new(),
            on_since: None,
            started_ns: None,
            extra_syscall_tids: Vec::new(),
            own_event_ids,
            instance,
        };
        for cpu in cpus {
            let source = recording
                .instance
                .path()
                .join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
            let input = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&source)
                .map_err(io_at(&source))?;
            let target = dir.join(format!("cpu{cpu}.raw"));
            let output = File::create(&target).map_err(io_at(&target))?;
            let stop = Arc::clone(&recording.stop);
            let handle = std::thread::Builder::new()
                .name(format!("trace-cpu{cpu}"))
                .spawn(move || drain(input, output, page_size, &stop))
                .map_err(|source| Error::Io {
                    path: format!("a reader thread for cpu{cpu}"),
                    source,
                })?;
            recording.readers.push(Reader { cpu, handle });
        }
        Ok(recording)
    }

    /// The directory receiving the trace.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Switches recording on or off (the measured phases only).
    pub fn set_on(&mut self, on: bool) -> Result<(), Error> {
        match (on, self.on_since) {
            (true, None) => {
                let now = monotonic_ns();
                self.instance.set_tracing(true)?;
                self.started_ns.get_or_insert(now);
                self.on_since = Some(now);
            }
            (false, Some(since)) => {
                self.instance.set_tracing(false)?;
                self.windows.push((since, monotonic_ns()));
                self.on_since = None;
            }
            _ => {}
        }
        Ok(())
    }

    /// Keeps the system calls of `tids` too from now on, besides those the configuration
    /// named, in place of the tasks a previous call named: tasks that exist only once
    /// recording is set up (the VMM a scenario started for its next phases). Called while
    /// tracing is off, between measured phases.
    pub fn follow_syscalls_of(&mut self, tids: &[u32]) -> Result<(), Error> {
        if self.extra_syscall_tids == tids {
            return Ok(());
        }
        self.extra_syscall_tids = tids.to_vec();
        set_syscall_filter(
            &self.instance,
            &self.config,
            &self.own_event_ids,
            &self.extra_syscall_tids,
        )
    }

    /// Writes a phase marker into the trace (an ftrace:print event on the trace clock).
    pub fn mark(&self, text: &str) -> Result<(), Error> {
        (&self.marker)
            .write_all(text.as_bytes())
            .map_err(io_at(&self.instance.path().join("trace_marker")))
    }

    /// Stops recording, drains every buffer, and writes meta.json.
    pub fn finish(mut self) -> Result<TraceMeta, Error> {
        self.set_on(false)?;
        let mut pages = BTreeMap::new();
        for reader in self.stop_readers(false) {
            let (cpu, result) = reader;
            let count = result.map_err(io_at(&self.dir.join(format!("cpu{cpu}.raw"))))?;
            pages.insert(cpu.to_string(), count);
        }
        let mut lost = BTreeMap::new();
        for &cpu in &self.cpus {
            let stats = self.instance.read(&format!("per_cpu/cpu{cpu}/stats"))?;
            lost.insert(cpu.to_string(), parse_lost(&stats));
        }
        let meta = TraceMeta {
            page_size: self.page_size,
            cpus: self.cpus.clone(),
            clock: "mono".into(),
            events: self.config.events.clone(),
            stacks: !self.config.stack_events.is_empty(),
            buffer_kib: self.config.buffer_kib,
            lost,
            started_ns: self.started_ns.unwrap_or(0),
            stopped_ns: self.windows.last().map(|w| w.1).unwrap_or(0),
            windows: self.windows.clone(),
            pages,
        };
        self.save_tgids()?;
        let path = self.dir.join("meta.json");
        let json = serde_json::to_vec_pretty(&meta).map_err(|e| io_at(&path)(e.into()))?;
        std::fs::write(&path, json).map_err(io_at(&path))?;
        Ok(meta)
    }

    /// The kernel's `pid tgid` table (the tracefs root's saved_tgids, filled while
    /// record-tgid was on) as the trace directory's [`TGIDS_FILE`]. A kernel without it
    /// leaves none: grouping by process is then not possible, nothing else is lost.
    fn save_tgids(&self) -> Result<(), Error> {
        let Some(root) = self.instance.path().parent().and_then(Path::parent) else {
            return Ok(());
        };
        let Ok(table) = crate::record::tracefs::read_whole(&root.join("saved_tgids")) else {
            return Ok(());
        };
        let path = self.dir.join(TGIDS_FILE);
        std::fs::write(&path, table).map_err(io_at(&path))
    }

    /// Stops the readers: after a last pass over what the kernel still holds, or, when
    /// `abandon` (the recording is being thrown away), at once.
    fn stop_readers(&mut self, abandon: bool) -> Vec<(u32, std::io::Result<u64>)> {
        self.stop.stop(abandon);
        self.readers
            .drain(..)
            .map(|r| {
                let result = r
                    .handle
                    .join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("trace reader panicked")));
                (r.cpu, result)
            })
            .collect()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = self.instance.set_tracing(false);
        // Readers hold the per-CPU files open; the instance cannot be removed before they
        // exit. Field order then drops the instance last. What the buffers still hold is
        // not read: the trace is being thrown away (an error, a signal).
        self.stop_readers(true);
    }
}

/// The name of a system call whose own events (syscalls:sys_enter_NAME) vmscale records.
fn syscall_name(id: i64) -> Option<&'static str> {
    (id == libc::SYS_ioctl).then_some("ioctl")
}

/// Moves the configuration's system calls of every task (`syscall_ids`) to their own
/// events, syscalls:sys_enter_NAME and sys_exit_NAME, where the kernel has them, and
/// returns their ids. A raw_syscalls filter on an id runs after the kernel has written the
/// event, so every other system call of every task paid for an event thrown away: 190 ns
/// each here (a getppid loop: 132 ns a call untraced, 320 ns so, 168 ns with the ioctl
/// events only). raw_syscalls stays only for the named tasks, and goes when none is named.
fn trace_calls_by_own_events(instance: &Instance, config: &mut RecordConfig) -> Vec<i64> {
    let mut moved = Vec::new();
    for id in std::mem::take(&mut config.syscall_ids) {
        let events = syscall_name(id).map(|name| {
            [
                format!("syscalls:sys_enter_{name}"),
                format!("syscalls:sys_exit_{name}"),
            ]
        });
        match events.filter(|pair| pair.iter().all(|e| instance.event_dir(e).is_ok())) {
            Some(pair) => {
                config.events.extend(pair);
                moved.push(id);
            }
            None => config.syscall_ids.push(id),
        }
    }
    if !moved.is_empty() && config.syscall_tids.is_empty() && config.syscall_ids.is_empty() {
        config.events.retain(|e| !e.starts_with("raw_syscalls:"));
    }
    moved
}

/// Tasks named one by one in a raw_syscalls filter; more are named by their id range.
const MAX_FILTER_TIDS: usize = 64;

/// Filters raw_syscalls to the configured tasks plus `extra`, and the configured system
/// calls of any task; no filter when the configuration names no task.
fn set_syscall_filter(
    instance: &Instance,
    config: &RecordConfig,
    own_event_ids: &[i64],
    extra: &[u32],
) -> Result<(), Error> {
    let Some(filter) = syscall_filter(config, own_event_ids, extra) else {
        return Ok(());
    };
    for event in ["raw_syscalls:sys_enter", "raw_syscalls:sys_exit"] {
        if config.events.iter().any(|e| e == event) {
            instance.set_filter(event, &filter)?;
        }
    }
    Ok(())
}

/// The raw_syscalls filter [`set_syscall_filter`] writes. Calls recorded by their own
/// events (`own_event_ids`) are left out of it, or the named tasks' would come twice.
fn syscall_filter(config: &RecordConfig, own_event_ids: &[i64], extra: &[u32]) -> Option<String> {
    if config.syscall_tids.is_empty() && config.syscall_ids.is_empty() {
        return None;
    }
    let mut clauses: Vec<String> = config
        .syscall_tids
        .iter()
        .map(|tid| format!("common_pid == {tid}"))
        .collect();
    // The kernel takes a filter of less than a page: past a few dozen tasks (a VMM with
    // many vCPUs) their id range stands for them, which keeps a few other tasks' calls too.
    match (extra.iter().min(), extra.iter().max()) {
        (Some(low), Some(high)) if extra.len() > MAX_FILTER_TIDS => {
            clauses.push(format!("(common_pid >= {low} && common_pid <= {high})"))
        }
        _ => clauses.extend(extra.iter().map(|tid| format!("common_pid == {tid}"))),
    }
    clauses.extend(config.syscall_ids.iter().map(|id| format!("id == {id}")));
    let filter = clauses.join(" || ");
    if own_event_ids.is_empty() {
        return Some(filter);
    }
    let others: Vec<String> = own_event_ids
        .iter()
        .map(|id| format!("id != {id}"))
        .collect();
    Some(format!("({filter}) && {}", others.join(" && ")))
}

/// Copies header_page, header_event and the format of every event that can appear.
fn save_formats(instance: &Instance, dir: &Path, config: &RecordConfig) -> Result<(), Error> {
    for header in ["header_page", "header_event"] {
        let target = dir.join(header);
        std::fs::write(&target, instance.read(&format!("events/{header}"))?)
            .map_err(io_at(&target))?;
    }
    // The kernel emits these itself: stacks from triggers, prints from trace_marker.
    let mut events = vec![
        "ftrace:kernel_stack".to_string(),
        "ftrace:print".to_string(),
    ];
    for event in &config.events {
        events.extend(instance.expand_events(event)?);
    }
    for event in &events {
        let (system, name) = event
            .split_once(':')
            .expect("event_dir validated the shape");
        let source = instance.event_dir(event)?.join("format");
        let text = crate::record::tracefs::read_whole(&source).map_err(io_at(&source))?;
        let target_dir = dir.join("formats").join(system);
        std::fs::create_dir_all(&target_dir).map_err(io_at(&target_dir))?;
        let target = target_dir.join(name);
        std::fs::write(&target, text).map_err(io_at(&target))?;
    }
    Ok(())
}

/// How readers are told to stop: a flag, and an eventfd each of them polls beside its
/// per-CPU file, so a stop wakes them at once instead of at their next poll timeout.
struct Stop {
    stop: AtomicBool,
    /// Stop without the last pass: the recording is thrown away.
    abandon: AtomicBool,
    wake: std::os::fd::OwnedFd,
}

impl Stop {
    fn new() -> std::io::Result<Stop> {
        use std::os::fd::FromRawFd;
        // SAFETY: eventfd creates a new descriptor or fails; nothing else is touched.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Stop {
            stop: AtomicBool::new(false),
            abandon: AtomicBool::new(false),
            // SAFETY: a fresh descriptor this function just created and owns.
            wake: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
        })
    }

    fn stop(&self, abandon: bool) {
        self.abandon.store(abandon, Ordering::Release);
        self.stop.store(true, Ordering::Release);
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to the eventfd this owns. Never read
        // back, it stays readable: every later poll returns at once.
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }
}

/// Reads whole pages from one CPU's trace_pipe_raw until stopped, then drains the rest.
///
/// The file is non-blocking: an empty buffer answers EAGAIN, and poll() waits until the
/// buffer is `buffer_percent` full or the timeout passes, whichever is first. After `stop`
/// is seen, one more full drain runs, so events written just before tracing_on went to 0
/// are never left behind.
fn drain(input: File, output: File, page_size: usize, stop: &Stop) -> std::io::Result<u64> {
    use std::io::Read;
    let mut out = BufWriter::with_capacity(1 << 20, output);
    let mut page = vec![0u8; page_size];
    let mut pages = 0u64;
    let mut final_pass = false;
    let mut input = input;
    let mut whole_pages = PageSplicer::new(page_size);
    loop {
        // Whole pages go by splice, kernel to file; the page not yet full, by read.
        if let Some(splicer) = &mut whole_pages {
            if !out.buffer().is_empty() {
                // What was read before goes first: the file keeps the buffer's order.
                out.flush()?;
            }
            match splicer.move_pages(&input, out.get_ref()) {
                Ok(0) => {}
                Ok(moved) => {
                    pages += moved;
                    if splicer.file_refuses {
                        whole_pages = None;
                    }
                    if stop.abandon.load(Ordering::Acquire) {
                        break;
                    }
                    continue;
                }
                Err(e) if PageSplicer::unsupported(&e) => whole_pages = None,
                Err(e) => return Err(e),
            }
        }
        match input.read(&mut page) {
            Ok(0) => {}
            Ok(n) => {
                out.write_all(&page[..n])?;
                // A short read would misalign every later page; pad it to a whole page,
                // whose header still says how much of it is data.
                if n < page_size {
                    out.write_all(&vec![0u8; page_size - n])?;
                }
                pages += 1;
                if stop.abandon.load(Ordering::Acquire) {
                    break;
                }
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        // Nothing to read right now.
        if final_pass {
            break;
        }
        if stop.stop.load(Ordering::Acquire) {
            if stop.abandon.load(Ordering::Acquire) {
                break;
            }
            final_pass = true;
            continue;
        }
        let mut fds = [
            libc::pollfd {
                fd: input.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds for fds this thread can use (its input, and the stop
        // eventfd, which outlives every reader); the result is only a hint.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, POLL_TIMEOUT_MS) };
    }
    out.flush()?;
    Ok(pages)
}

/// Moves whole pages from a CPU's trace_pipe_raw into the trace file with splice(2): the
/// kernel hands its pages to a pipe and the pipe's to the file, and the reader copies
/// nothing and makes one call per many pages. Reading them one page per read(2), as
/// before, the readers of a dup/close storm on both CPUs (2.5 M events a second, 57 MB a
/// second per CPU) fell behind and the kernel overwrote 70-560 thousand events in about
/// half of the recordings here; trace-cmd, which splices, lost none. The kernel splices
/// only full pages (kernel/trace/trace.c, tracing_buffers_splice_read), so the page still
/// being written is read as before.
struct PageSplicer {
    pipe_read: std::os::fd::OwnedFd,
    pipe_write: std::os::fd::OwnedFd,
    /// Bytes asked for per call: a whole number of pages the pipe can hold.
    chunk: usize,
    page_size: usize,
    /// The trace file refused a spliced page (its file system cannot take them).
    file_refuses: bool,
}

impl PageSplicer {
    /// A pipe to splice through, or `None` where none can be made (the reader then reads).
    fn new(page_size: usize) -> Option<PageSplicer> {
        use std::os::fd::FromRawFd;
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two descriptors into the two-element array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: both descriptors were just created by pipe2 and are owned from here on.
        let (pipe_read, pipe_write) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        // A bigger pipe moves more pages per call; where the system refuses, the default
        // (16 pages) still works.
        // SAFETY: F_SETPIPE_SZ on a pipe this owns; failure changes nothing.
        let size = unsafe {
            libc::fcntl(
                pipe_write.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                SPLICE_PIPE_BYTES,
            )
        };
        // SAFETY: F_GETPIPE_SZ reads the pipe's capacity.
        let size = if size > 0 {
            size as usize
        } else {
            unsafe { libc::fcntl(pipe_write.as_raw_fd(), libc::F_GETPIPE_SZ) }.max(0) as usize
        };
        let chunk = size / page_size * page_size;
        (chunk > 0).then_some(PageSplicer {
            pipe_read,
            pipe_write,
            chunk,
            page_size,
            file_refuses: false,
        })
    }

    /// Moves the whole pages waiting in `input` to `output`: how many, 0 when none is
    /// full yet.
    fn move_pages(&mut self, input: &File, output: &File) -> std::io::Result<u64> {
        // SAFETY: splice between descriptors this reader owns, with null offsets (the
        // files' own positions); it touches no memory of ours.
        let taken = unsafe {
            libc::splice(
                input.as_raw_fd(),
                std::ptr::null_mut(),
                self.pipe_write.as_raw_fd(),
                std::ptr::null_mut(),
                self.chunk,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
            )
        };
        if taken < 0 {
            let e = std::io::Error::last_os_error();
            return match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let taken = taken as usize;
        let mut left = taken;
        while left > 0 {
            // SAFETY: as above, from the pipe this owns to the output file.
            let put = unsafe {
                libc::splice(
                    self.pipe_read.as_raw_fd(),
                    std::ptr::null_mut(),
                    output.as_raw_fd(),
                    std::ptr::null_mut(),
                    left,
                    libc::SPLICE_F_MOVE,
                )
            };
            if put < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                if !PageSplicer::unsupported(&e) {
                    return Err(e);
                }
                // The file takes no spliced pages: what the pipe already holds was taken
                // from the kernel's buffer, so it is copied out the ordinary way, and the
                // reader reads from here on.
                self.file_refuses = true;
                let mut held = vec![0u8; left];
                let mut got = 0;
                while got < left {
                    // SAFETY: reads into the live buffer `held`, within its length, from
                    // the pipe this owns.
                    let n = unsafe {
                        libc::read(
                            self.pipe_read.as_raw_fd(),
                            held[got..].as_mut_ptr().cast(),
                            left - got,
                        )
                    };
                    if n <= 0 {
                        let e = std::io::Error::last_os_error();
                        if n < 0 && e.kind() == std::io::ErrorKind::Interrupted {
                            continue;
                        }
                        return Err(e);
                    }
                    got += n as usize;
                }
                (&*output).write_all(&held)?;
                break;
            }
            if put == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    "the trace file took no more of a spliced page",
                ));
            }
            left -= put as usize;
        }
        // The kernel splices whole pages; were one cut short, padding keeps every later
        // page aligned, as a short read's does.
        let short = taken % self.page_size;
        if short != 0 {
            (&*output).write_all(&vec![0u8; self.page_size - short])?;
        }
        Ok(taken.div_ceil(self.page_size) as u64)
    }

    /// Errors that say this kernel or file system cannot splice here, not that reading
    /// failed: the reader goes on with read(2).
    fn unsupported(e: &std::io::Error) -> bool {
        matches!(
            e.raw_os_error(),
            Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP | libc::EBADF)
        )
    }
}

/// The pipe a reader splices through: 256 pages of 4 KiB.
const SPLICE_PIPE_BYTES: i32 = 1 << 20;

/// How long a reader waits for the buffer to fill before draining what there is; also the
/// longest a finish waits for a reader to notice the stop.
const POLL_TIMEOUT_MS: i32 = 200;

fn parse_lost(stats: &str) -> LostEvents {
    let field = |name: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    };
    LostEvents {
        overrun: field("overrun:"),
        commit_overrun: field("commit overrun:"),
        dropped_events: field("dropped events:"),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn older_ipi_events_only_where_the_newer_are_missing() {
        let optional = super::optional_events();
        let all = |_: &str| true;
        assert_eq!(
            super::with_older_ipi_events(optional.clone(), all),
            optional
        );
        // A 6.1 kernel: csd and ipi_send missing.
        let before_6_3 = |e: &str| !e.starts_with("csd:") && !e.starts_with("ipi:ipi_send");
        let got = super::with_older_ipi_events(optional.clone(), before_6_3);
        assert!(got.iter().any(|e| e == "ipi:ipi_raise"));
        assert!(got.iter().any(|e| e == "irq_vectors:call_function_entry"));
        // A 6.4 kernel: csd there, ipi_send missing: the senders come from ipi_raise.
        let before_6_5 = |e: &str| !e.starts_with("ipi:ipi_send");
        assert!(super::with_older_ipi_events(optional.clone(), before_6_5)
            .iter()
            .any(|e| e == "ipi:ipi_raise"));
        // Asked for no IPI events at all: none added.
        assert!(super::with_older_ipi_events(Vec::new(), before_6_3).is_empty());
    }

    use super::*;

    #[test]
    fn syscall_filters_name_tasks_then_calls_and_fold_many_tasks_into_a_range() {
        let config = RecordConfig {
            syscall_tids: vec![7],
            syscall_ids: vec![16],
            ..RecordConfig::default()
        };
        assert_eq!(
            syscall_filter(&config, &[], &[9, 10]).unwrap(),
            "common_pid == 7 || common_pid == 9 || common_pid == 10 || id == 16"
        );
        let many: Vec<u32> = (1000..1100).collect();
        let filter = syscall_filter(&config, &[], &many).unwrap();
        assert_eq!(
            filter,
            "common_pid == 7 || (common_pid >= 1000 && common_pid <= 1099) || id == 16"
        );
        assert!(syscall_filter(&RecordConfig::default(), &[], &[1]).is_none());
        // Some calls of every task, and no task's others.
        let ioctls = RecordConfig {
            syscall_ids: vec![16],
            ..RecordConfig::default()
        };
        assert_eq!(syscall_filter(&ioctls, &[], &[]).unwrap(), "id == 16");
        // Every task's ioctls by their own events: the named task's others only.
        let measuring = RecordConfig {
            syscall_tids: vec![7],
            ..RecordConfig::default()
        };
        assert_eq!(
            syscall_filter(&measuring, &[16], &[]).unwrap(),
            "(common_pid == 7) && id != 16"
        );
    }

    #[test]
    fn lost_counters_parse_from_the_kernel_stats_text() {
        let stats = "entries: 127\noverrun: 5\ncommit overrun: 1\nbytes: 8360\noldest event ts:   933.860593\nnow ts:   934.118936\ndropped events: 7\nread events: 0\n";
        let lost = parse_lost(stats);
        assert_eq!(
            lost,
            LostEvents {
                overrun: 5,
                commit_overrun: 1,
                dropped_events: 7
            }
        );
        assert_eq!(lost.total(), 13);
    }

    #[test]
    fn lost_events_become_one_warning_per_cpu() {
        let mut meta = TraceMeta {
            page_size: 4096,
            cpus: vec![0, 1],
            clock: "mono".into(),
            events: vec![],
            stacks: true,
            buffer_kib: 2048,
            lost: BTreeMap::new(),
            started_ns: 0,
            stopped_ns: 0,
            windows: vec![],
            pages: BTreeMap::new(),
        };
        meta.lost.insert("0".into(), LostEvents::default());
        meta.lost.insert(
            "1".into(),
            LostEvents {
                overrun: 2345,
                ..Default::default()
            },
        );
        let warnings = meta.lost_warnings();
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].starts_with("cpu1 lost 2345 trace events"),
            "{}",
            warnings[0]
        );
    }
}
