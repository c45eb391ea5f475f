//! A private tracefs instance: vmscale's only way of touching the kernel's tracing.
//!
//! Everything is configured inside `instances/vmscale-<pid>-<n>`, never in the top-level
//! (global) buffer another tool or person may be using. The instance is removed when the
//! [`Instance`] drops: on success, on error, on unwinding from a panic, and (through the
//! callers' signal flag) on Ctrl-C/SIGTERM. After a SIGKILL nothing can run, so every start
//! removes instances whose owning pid no longer exists ([`remove_stale_instances`]).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

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

/// The tracefs mount point, mounting tracefs at [`DEFAULT_MOUNT`] if it is not mounted
/// anywhere. Mounting adds a view of the tracing state; it changes no tracing setting.
pub fn mount_point() -> Result<PathBuf, Error> {
    if let Some(existing) = find_mount() {
        return Ok(existing);
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
    find_mount().ok_or_else(|| Error::NoTracefs("mounted tracefs but cannot find it".into()))
}

fn find_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
        (kind == "tracefs").then(|| PathBuf::from(point))
    })
}

/// Removes `vmscale-<pid>-*` instances whose pid is gone (a vmscale killed by SIGKILL).
/// Instances of live vmscale processes are left alone, so two runs never disturb each
/// other. Returns the names removed.
pub fn remove_stale_instances(mount: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(mount.join("instances")) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = owner_pid(&name) else {
            continue;
        };
        if Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        let instance = Instance {
            path: entry.path(),
            name: name.clone(),
        };
        if instance.remove().is_ok() {
            removed.push(name);
        }
    }
    removed
}

/// The pid in `vmscale-<pid>-<n>`, if the name has that shape.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(INSTANCE_PREFIX)?;
    let (pid, n) = rest.split_once('-')?;
    n.parse::<u32>().ok()?;
    pid.parse().ok()
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
}

impl Instance {
    /// Creates `instances/vmscale-<pid>-<n>` with tracing off, after removing stale
    /// instances of dead vmscale processes.
    pub fn create(mount: &Path) -> Result<Instance, Error> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        remove_stale_instances(mount);
        let name = format!(
            "{INSTANCE_PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = mount.join("instances").join(&name);
        std::fs::create_dir(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::PermissionDenied => {
                Error::NotRoot(format!("cannot create {}: {e}", path.display()))
            }
            _ => Error::Io {
                path: path.display().to_string(),
                source: e,
            },
        })?;
        let instance = Instance { path, name };
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

    /// `system:event` -> its directory, or a clear error when this kernel lacks it.
    pub fn event_dir(&self, event: &str) -> Result<PathBuf, Error> {
        let (system, name) = event
            .split_once(':')
            .ok_or_else(|| Error::NoSuchEvent(format!("'{event}' (expected system:event)")))?;
        let dir = self.path.join("events").join(system).join(name);
        if dir.join("format").exists() {
            Ok(dir)
        } else {
            Err(Error::NoSuchEvent(event.to_string()))
        }
    }

    /// Enables `system:event`, or every event of `system` when given a bare group name.
    pub fn enable_event(&self, event: &str) -> Result<(), Error> {
        let dir = if event.contains(':') {
            self.event_dir(event)?
        } else {
            let group = self.path.join("events").join(event);
            if !group.join("enable").exists() {
                return Err(Error::NoSuchEvent(format!("group '{event}'")));
            }
            group
        };
        let path = dir.join("enable");
        std::fs::write(&path, "1").map_err(io_error(&path))
    }

    /// `system:event` names a group or event stands for (a bare group expands to all of its
    /// events), so their formats can be saved.
    pub fn expand_events(&self, event: &str) -> Result<Vec<String>, Error> {
        if event.contains(':') {
            self.event_dir(event)?;
            return Ok(vec![event.to_string()]);
        }
        let group = self.path.join("events").join(event);
        let entries = std::fs::read_dir(&group)
            .map_err(|_| Error::NoSuchEvent(format!("group '{event}'")))?;
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().join("format").exists())
            .map(|e| format!("{event}:{}", e.file_name().to_string_lossy()))
            .collect();
        names.sort();
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
    fn remove(&self) -> Result<(), Error> {
        let _ = std::fs::write(self.path.join("tracing_on"), "0");
        // rmdir fails with EBUSY while a reader still holds a per-CPU file open; readers are
        // closed before the instance drops, but give a racing close a moment.
        let mut last = None;
        for _ in 0..50 {
            match std::fs::remove_dir(&self.path) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(Error::Io {
            path: self.path.display().to_string(),
            source: last.expect("loop ran"),
        })
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!(
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
    fn owner_pid_reads_only_vmscale_instance_names() {
        assert_eq!(owner_pid("vmscale-1234-0"), Some(1234));
        assert_eq!(owner_pid("vmscale-1234-doctor"), None);
        assert_eq!(owner_pid("vmscale-x-0"), None);
        assert_eq!(owner_pid("perf-1234-0"), None);
    }
}
