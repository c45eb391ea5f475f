//! A private tracefs instance: vmscale's only way of touching the kernel's tracing.
//!
//! Everything is configured inside `instances/vmscale-<pid>-<start>-<n>`, never in the
//! top-level (global) buffer another tool or person may be using. The instance is removed
//! when the [`Instance`] drops: on success, on error, on unwinding from a panic, and
//! (through the callers' signal flag) on Ctrl-C/SIGTERM. After a SIGKILL nothing can run, so
//! the next run removes instances whose owner no longer runs ([`remove_stale_instances`])
//! and says so. User-given event names never become paths: they are checked and looked up
//! in the instance's own event list ([`Instance::event_dir`]).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use vmscale_sys::ProcessStamp;

/// Where tracefs is mounted when vmscale has to mount it itself.
pub const DEFAULT_MOUNT: &str = "/sys/kernel/tracing";
/// Every instance vmscale creates starts with this.
pub const INSTANCE_PREFIX: &str = "vmscale-";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("tracing needs root: {0}")]
    NotRoot(String),
    #[error("tracefs is not available: {0}")]
    NoTracefs(String),
    #[error("event {0} does not exist on this kernel (see /sys/kernel/tracing/available_events)")]
    NoSuchEvent(String),
    #[error(
        "'{0}' is not an event name (expected system:event or system, in letters, digits and _)"
    )]
    BadEventName(String),
    #[error("tracefs: {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Where kernels keep the tracing files under debugfs: tracefs mounted there on its own
/// since 4.1, debugfs itself before.
pub const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// Filesystem types (statfs's f_type, include/uapi/linux/magic.h).
const TRACEFS_MAGIC: i64 = 0x7472_6163;
const DEBUGFS_MAGIC: i64 = 0x6462_6720;
const SYSFS_MAGIC: i64 = 0x6265_6572;

/// What a path that should hold the tracing files holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TracingDir {
    /// tracefs (or, on kernels before tracefs, debugfs's `tracing/`).
    Tracefs,
    /// The empty sysfs directory tracefs is mounted on: nothing is mounted there.
    Unmounted,
    /// Another filesystem, named: something is mounted over (or instead of) tracefs.
    Other(String),
    /// The path cannot be looked at (missing, or not allowed).
    Unreachable(String),
}

/// What is at `path`, by the type of the filesystem there. /proc/mounts is not asked:
/// a filesystem mounted over tracefs hides it, and /proc/mounts still lists tracefs.
pub fn tracing_dir(path: &Path) -> TracingDir {
    let c_path = match std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) {
        Ok(p) => p,
        Err(_) => return TracingDir::Unreachable("a path with a NUL byte".into()),
    };
    let mut stat = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: statfs reads a NUL-terminated path and writes one struct statfs into the
    // buffer we pass; its result is checked before the struct is read.
    let rc = unsafe { libc::statfs(c_path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return TracingDir::Unreachable(std::io::Error::last_os_error().to_string());
    }
    // SAFETY: statfs succeeded, so it filled the struct.
    let stat = unsafe { stat.assume_init() };
    // f_type is an i64 on x86-64 and arm64, 32 bits on some other architectures.
    #[allow(clippy::unnecessary_cast)]
    let kind = stat.f_type as i64;
    match kind {
        TRACEFS_MAGIC => TracingDir::Tracefs,
        // Before 4.1 the tracing files are debugfs's own; debugfs elsewhere is not them.
        DEBUGFS_MAGIC if path.join("trace_pipe").exists() => TracingDir::Tracefs,
        SYSFS_MAGIC => TracingDir::Unmounted,
        other => TracingDir::Other(filesystem_name(other)),
    }
}

/// A filesystem type as `mount -t` names it, for the types found mounted where tracefs
/// should be; others by number.
fn filesystem_name(magic: i64) -> String {
    let name = match magic {
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        DEBUGFS_MAGIC => "debugfs",
        0x9fa0 => "proc",
        0xef53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683e => "btrfs",
        0x794c_7630 => "overlay",
        0x6573_5546 => "fuse",
        _ => return format!("a filesystem of type {magic:#x}"),
    };
    name.to_string()
}

/// The tracefs mount point, mounting tracefs at [`DEFAULT_MOUNT`] if it is not mounted
/// anywhere. Mounting adds a view of the tracing state; it changes no tracing setting.
/// Each place is taken by the filesystem found there ([`tracing_dir`]); something else
/// mounted at [`DEFAULT_MOUNT`] is refused rather than mounted over.
pub fn mount_point() -> Result<PathBuf, Error> {
    let mut places = vec![PathBuf::from(DEFAULT_MOUNT)];
    places.extend(listed_mounts());
    places.push(PathBuf::from(DEBUGFS_TRACING));
    if let Some(found) = places
        .into_iter()
        .find(|p| tracing_dir(p) == TracingDir::Tracefs)
    {
        return Ok(found);
    }
    match tracing_dir(Path::new(DEFAULT_MOUNT)) {
        TracingDir::Other(kind) => {
            return Err(Error::NoTracefs(format!(
                "{DEFAULT_MOUNT} is {kind}, not tracefs: something is mounted over it (unmount it, and vmscale mounts tracefs there)"
            )))
        }
        TracingDir::Tracefs | TracingDir::Unmounted | TracingDir::Unreachable(_) => {}
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::NotRoot(format!(
            "tracefs is not mounted and only root can mount it at {DEFAULT_MOUNT}"
        )));
    }
    let status = std::process::Command::new("mount")
        .args(["-t", "tracefs", "nodev", DEFAULT_MOUNT])
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| Error::NoTracefs(format!("cannot run mount: {e}")))?;
    if !status.status.success() {
        return Err(Error::NoTracefs(format!(
            "mount -t tracefs nodev {DEFAULT_MOUNT} failed: {}",
            String::from_utf8_lossy(&status.stderr).trim()
        )));
    }
    match tracing_dir(Path::new(DEFAULT_MOUNT)) {
        TracingDir::Tracefs => Ok(PathBuf::from(DEFAULT_MOUNT)),
        other => Err(Error::NoTracefs(format!(
            "mounted tracefs at {DEFAULT_MOUNT} but found {other:?} there"
        ))),
    }
}

/// Where /proc/self/mounts says tracefs is mounted: places to look, not proof.
fn listed_mounts() -> Vec<PathBuf> {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return Vec::new();
    };
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            (kind == "tracefs").then(|| PathBuf::from(point))
        })
        .collect()
}

/// Who made a `vmscale-...` instance, read from its name.
///
/// Names are `vmscale-<pid>-<start>-<n>` (see [`ProcessStamp`]), so a pid reused by another
/// process after a SIGKILL is not mistaken for the owner. Names of older builds,
/// `vmscale-<pid>-<n>`, carry no start time; their owner is taken to be alive while that
/// pid runs a `vmscale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceOwner {
    Process(ProcessStamp),
    Legacy { pid: u32 },
}

impl InstanceOwner {
    /// The owner of `name`, if it is a vmscale instance name.
    pub fn of(name: &str) -> Option<InstanceOwner> {
        let rest = name.strip_prefix(INSTANCE_PREFIX)?;
        let (owner, n) = rest.rsplit_once('-')?;
        n.parse::<u32>().ok()?;
        match ProcessStamp::parse(owner) {
            Some(stamp) => Some(InstanceOwner::Process(stamp)),
            None => Some(InstanceOwner::Legacy {
                pid: owner.parse().ok()?,
            }),
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            InstanceOwner::Process(stamp) => stamp.pid,
            InstanceOwner::Legacy { pid } => *pid,
        }
    }

    /// Whether the process that made the instance still runs.
    pub fn is_alive(&self) -> bool {
        match self {
            InstanceOwner::Process(stamp) => stamp.is_alive(),
            InstanceOwner::Legacy { pid } => std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end().starts_with("vmscale")),
        }
    }
}

/// A vmscale instance found under `instances/`.
#[derive(Debug, Clone)]
pub struct FoundInstance {
    pub name: String,
    pub owner: InstanceOwner,
    pub alive: bool,
}

/// Every vmscale instance under `mount`, with whether its owner still runs. An unreadable
/// `instances/` is an error: "none" must never stand for "could not look".
pub fn vmscale_instances(mount: &Path) -> Result<Vec<FoundInstance>, Error> {
    let dir = mount.join("instances");
    let entries = std::fs::read_dir(&dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            Error::NotRoot(format!("cannot read {}: {e}", dir.display()))
        }
        _ => io_error(&dir)(e),
    })?;
    let mut found: Vec<FoundInstance> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let owner = InstanceOwner::of(&name)?;
            let alive = owner.is_alive();
            Some(FoundInstance { name, owner, alive })
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// Removes the instances of vmscale processes that no longer run (killed with SIGKILL, so
/// their own cleanup never ran). Instances of live processes are left alone, so two runs
/// never disturb each other. Returns the names removed.
pub fn remove_stale_instances(mount: &Path) -> Result<Vec<String>, Error> {
    let mut removed = Vec::new();
    for found in vmscale_instances(mount)? {
        if found.alive {
            continue;
        }
        remove_instance_dir(&mount.join("instances").join(&found.name))?;
        removed.push(found.name);
    }
    Ok(removed)
}

/// Splits `system:event` or a bare `system` and checks that each part could be a kernel
/// event name (letters, digits, `_`), so that separators, `..` and absolute paths are
/// refused before the name is looked up.
pub fn parse_event_name(event: &str) -> Result<(&str, Option<&str>), Error> {
    let plausible = |part: &str| {
        !part.is_empty()
            && part.len() <= 128
            && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    let (system, name) = match event.split_once(':') {
        Some((system, name)) => (system, Some(name)),
        None => (event, None),
    };
    if plausible(system) && name.is_none_or(plausible) {
        Ok((system, name))
    } else {
        Err(Error::BadEventName(event.escape_debug().to_string()))
    }
}

/// Reads a tracefs file with large reads. Some tracefs files (events/header_page) regenerate
/// their text on every read() and answer a small first read, like the 32-byte probe
/// `std::fs::read` starts with, with a truncated text and then end-of-file.
pub fn read_whole(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = File::open(path)?;
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// One tracefs instance owned by this process; removed on drop.
#[derive(Debug)]
pub struct Instance {
    path: PathBuf,
    name: String,
    /// The kernel's events, listed once: they do not change while vmscale traces.
    events: std::sync::OnceLock<Vec<(String, String)>>,
    /// The instance, for an exit that skips `Drop` (an allocation failure).
    registered: Option<vmscale_sys::cleanup::Registered>,
}

impl Instance {
    /// Creates `instances/vmscale-<pid>-<start>-<n>` with tracing off. Stale instances of
    /// killed runs are the caller's to remove ([`remove_stale_instances`]), so that it can
    /// say so.
    pub fn create(mount: &Path) -> Result<Instance, Error> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{INSTANCE_PREFIX}{}-{}",
            ProcessStamp::current(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = mount.join("instances").join(&name);
        let ((), registered) =
            vmscale_sys::cleanup::create(vmscale_sys::cleanup::Kind::TraceInstance, &path, |p| {
                std::fs::create_dir(p)
            })
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    Error::NotRoot(format!("cannot create {}: {e}", path.display()))
                }
                _ => Error::Io {
                    path: path.display().to_string(),
                    source: e,
                },
            })?;
        let instance = Instance {
            path,
            name,
            events: std::sync::OnceLock::new(),
            registered: Some(registered),
        };
        // A new instance starts with tracing on; nothing is enabled yet, but switch it off
        // before anything is so no setup noise is ever recorded.
        instance.write("tracing_on", "0")?;
        Ok(instance)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `value` to the instance file `relative` (e.g. `trace_clock`).
    pub fn write(&self, relative: &str, value: &str) -> Result<(), Error> {
        let path = self.path.join(relative);
        let mut file = OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .map_err(io_error(&path))?;
        file.write_all(value.as_bytes()).map_err(io_error(&path))
    }

    pub fn read(&self, relative: &str) -> Result<String, Error> {
        let path = self.path.join(relative);
        let bytes = read_whole(&path).map_err(io_error(&path))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    pub fn set_tracing(&self, on: bool) -> Result<(), Error> {
        self.write("tracing_on", if on { "1" } else { "0" })
    }

    /// `system:event` -> its directory, or a clear error when this kernel lacks it. The
    /// path is built only from a name found in the kernel's own list of events, never from
    /// the caller's text, so no name can reach outside the instance's `events/`.
    pub fn event_dir(&self, event: &str) -> Result<PathBuf, Error> {
        let (system, name) = match parse_event_name(event)? {
            (system, Some(name)) => (system, name),
            (_, None) => {
                return Err(Error::NoSuchEvent(format!(
                    "'{event}' (expected system:event)"
                )))
            }
        };
        let known = self.available_events()?;
        if !known.iter().any(|(s, n)| s == system && n == name) {
            return Err(Error::NoSuchEvent(event.to_string()));
        }
        Ok(self.path.join("events").join(system).join(name))
    }

    /// A whole system's directory (`sched`), if the kernel has events in it.
    fn system_dir(&self, system: &str) -> Result<PathBuf, Error> {
        let known = self.available_events()?;
        if !known.iter().any(|(s, _)| s == system) {
            return Err(Error::NoSuchEvent(format!("group '{system}'")));
        }
        Ok(self.path.join("events").join(system))
    }

    /// The kernel's events, as `(system, event)`: the entries of the instance's `events/`
    /// (an instance has no `available_events` file of its own).
    fn available_events(&self) -> Result<&[(String, String)], Error> {
        if let Some(known) = self.events.get() {
            return Ok(known);
        }
        let events = self.path.join("events");
        let systems = std::fs::read_dir(&events).map_err(io_error(&events))?;
        let mut known = Vec::new();
        // A listing that fails (no descriptor left) is an error, never "no such event".
        for system in systems {
            let system = system.map_err(io_error(&events))?;
            if !system.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let system_name = system.file_name().to_string_lossy().into_owned();
            let path = system.path();
            for entry in std::fs::read_dir(&path).map_err(io_error(&path))? {
                let entry = entry.map_err(io_error(&path))?;
                if entry.path().join("format").exists() {
                    known.push((
                        system_name.clone(),
                        entry.file_name().to_string_lossy().into_owned(),
                    ));
                }
            }
        }
        Ok(self.events.get_or_init(|| known))
    }

    /// Enables `system:event`, or every event of `system` when given a bare group name.
    pub fn enable_event(&self, event: &str) -> Result<(), Error> {
        let dir = match parse_event_name(event)? {
            (_, Some(_)) => self.event_dir(event)?,
            (system, None) => self.system_dir(system)?,
        };
        let path = dir.join("enable");
        std::fs::write(&path, "1").map_err(io_error(&path))
    }

    /// `system:event` names a group or event stands for (a bare group expands to all of its
    /// events), so their formats can be saved.
    pub fn expand_events(&self, event: &str) -> Result<Vec<String>, Error> {
        let system = match parse_event_name(event)? {
            (_, Some(_)) => {
                self.event_dir(event)?;
                return Ok(vec![event.to_string()]);
            }
            (system, None) => system,
        };
        let mut names: Vec<String> = self
            .available_events()?
            .iter()
            .filter(|(s, _)| s == system)
            .map(|(s, n)| format!("{s}:{n}"))
            .collect();
        if names.is_empty() {
            return Err(Error::NoSuchEvent(format!("group '{event}'")));
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Only record `event` when `filter` (tracefs filter syntax) holds.
    pub fn set_filter(&self, event: &str, filter: &str) -> Result<(), Error> {
        let path = self.event_dir(event)?.join("filter");
        std::fs::write(&path, filter).map_err(io_error(&path))
    }

    /// Records a kernel stack right after every `event` (an ftrace:kernel_stack event on the
    /// same CPU).
    pub fn add_stack_trigger(&self, event: &str) -> Result<(), Error> {
        let path = self.event_dir(event)?.join("trigger");
        std::fs::write(&path, "stacktrace").map_err(io_error(&path))
    }

    /// Records a kernel stack right after every `event` for which `filter` holds.
    pub fn add_stack_trigger_if(&self, event: &str, filter: &str) -> Result<(), Error> {
        let path = self.event_dir(event)?.join("trigger");
        std::fs::write(&path, format!("stacktrace if {filter}")).map_err(io_error(&path))
    }

    /// The instance's trace_marker, open for writing: each write becomes an ftrace:print
    /// event stamped by the instance's clock.
    pub fn open_marker(&self) -> Result<File, Error> {
        let path = self.path.join("trace_marker");
        OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(io_error(&path))
    }

    /// Online CPUs that have a per-CPU buffer in this instance.
    pub fn cpus(&self) -> Result<Vec<u32>, Error> {
        let dir = self.path.join("per_cpu");
        let mut cpus: Vec<u32> = std::fs::read_dir(&dir)
            .map_err(io_error(&dir))?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok())
            .collect();
        cpus.sort_unstable();
        Ok(cpus)
    }

    /// Switches tracing off and removes the instance. The kernel tears down the instance's
    /// enabled events and triggers with it.
    fn remove(&mut self) -> Result<(), Error> {
        // Descriptors may be what ran out: switching tracing off opens a file.
        vmscale_sys::cleanup::release_fds();
        let path = &self.path;
        match self.registered.take() {
            Some(registered) => {
                vmscale_sys::cleanup::settle(registered, || remove_instance_dir(path))
            }
            None => remove_instance_dir(path),
        }
    }
}

/// Switches an instance's tracing off and removes it.
fn remove_instance_dir(path: &Path) -> Result<(), Error> {
    let _ = std::fs::write(path.join("tracing_on"), "0");
    // rmdir fails with EBUSY while a reader still holds a per-CPU file open; readers are
    // closed before the instance drops, but give a racing close a moment.
    let mut last = None;
    for _ in 0..50 {
        match std::fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(Error::Io {
        path: path.display().to_string(),
        source: last.expect("loop ran"),
    })
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            // A closed stderr must not turn a failed cleanup into a panic inside drop.
            let _ = writeln!(
                std::io::stderr(),
                "vmscale: warning: could not remove tracefs instance {}: {e}",
                self.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_read_only_from_vmscale_instance_names() {
        let owner = InstanceOwner::of;
        assert_eq!(
            owner("vmscale-1234-0"),
            Some(InstanceOwner::Legacy { pid: 1234 })
        );
        assert_eq!(
            owner("vmscale-1234-98765-3"),
            Some(InstanceOwner::Process(ProcessStamp {
                pid: 1234,
                start_ticks: 98765
            }))
        );
        assert_eq!(owner("vmscale-1234-doctor"), None);
        assert_eq!(owner("vmscale-1234-1-2-3"), None);
        assert_eq!(owner("vmscale-x-0"), None);
        assert_eq!(owner("perf-1234-0"), None);
    }

    #[test]
    fn event_names_that_could_leave_the_events_directory_are_refused() {
        assert_eq!(
            parse_event_name("sched:sched_switch").unwrap(),
            ("sched", Some("sched_switch"))
        );
        assert_eq!(parse_event_name("kvmmmu").unwrap(), ("kvmmmu", None));
        for bad in [
            "../../tracing_on",
            "/etc/passwd",
            "sched:../../../current_tracer",
            "sched:",
            ":x",
            "",
            "a b",
            "sched:sched_switch/enable",
            "sched:*",
            "lock:contention_begin\n",
        ] {
            assert!(
                matches!(parse_event_name(bad), Err(Error::BadEventName(_))),
                "{bad:?} accepted"
            );
        }
    }
}
