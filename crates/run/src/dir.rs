//! The run directory: `vmscale-runs/<UTC timestamp>-<scenario>/run.json`, written under a
//! temporary name and renamed when complete.

use std::path::{Path, PathBuf};

use crate::owner::ProcessStamp;
use crate::schema::{RunRecord, SCHEMA_VERSION};

// What a run directory holds, named once here for every crate that writes or reads one.
/// The run record.
pub const RUN_FILE: &str = "run.json";
/// The raw kernel trace (per-CPU ring-buffer pages, formats, kallsyms, meta.json).
pub const TRACE_DIR: &str = "trace";
/// The report as Markdown.
pub const SUMMARY_FILE: &str = "summary.md";
/// The report as one HTML page.
pub const REPORT_FILE: &str = "report.html";
/// Where `vmscale export --dat` writes the trace by default.
pub const DAT_FILE: &str = "trace.dat";
/// Where `vmscale export --pprof` writes the on-CPU samples by default.
pub const PPROF_FILE: &str = "profile.pb.gz";
/// Where `vmscale export --folded` writes the on-CPU samples by default.
pub const FOLDED_FILE: &str = "stacks.folded";

/// Run directories are built under this hidden prefix and renamed to their final name only
/// when complete, so a directory with a plain name is always a finished run. The owner is
/// part of the name: `.partial-<pid>-<start ticks>-<final name>`.
pub const PARTIAL_PREFIX: &str = ".partial-";

/// A run directory being written. Until [`RunDir::publish`] it lives under a hidden
/// temporary name and is removed when dropped (an error, a panic, an interrupted run);
/// after a SIGKILL the next run in the same place removes it ([`remove_stale_partials`]).
#[derive(Debug)]
pub struct RunDir {
    /// Where the directory is now: the temporary name until published, then the final one.
    pub path: PathBuf,
    base: PathBuf,
    stem: String,
    published: bool,
    /// The directory under its temporary name, for an exit that skips `Drop`.
    registered: Option<crate::cleanup::Registered>,
}

/// `2026-11-22T09:05:07Z` -> `20261122T090507Z`: sorts by time and has no characters that
/// need quoting in a shell.
fn compact_utc(rfc3339: &str) -> String {
    rfc3339.chars().filter(|c| *c != '-' && *c != ':').collect()
}

pub fn utc_now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// `base` must be a directory or not exist yet; anything else is said plainly rather than
/// as the errno of the first call that trips over it.
fn check_base(base: &Path) -> std::io::Result<()> {
    match std::fs::metadata(base) {
        Ok(meta) if !meta.is_dir() => Err(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            format!("{} exists and is not a directory", base.display()),
        )),
        _ => Ok(()),
    }
}

impl RunDir {
    /// Creates the temporary directory of a new run under `base` (created if missing).
    pub fn create(base: &Path, scenario: &str, started_utc: &str) -> std::io::Result<RunDir> {
        check_base(base)?;
        std::fs::create_dir_all(base)?;
        let stem = format!("{}-{scenario}", compact_utc(started_utc));
        let owner = ProcessStamp::current();
        for attempt in 1..1000 {
            let path = base.join(format!("{PARTIAL_PREFIX}{owner}-{stem}-{attempt}"));
            match crate::cleanup::create(crate::cleanup::Kind::Tree, &path, |p| {
                std::fs::create_dir(p)
            }) {
                Ok(((), registered)) => {
                    return Ok(RunDir {
                        path,
                        base: base.to_path_buf(),
                        stem,
                        published: false,
                        registered: Some(registered),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("too many runs in the same second"))
    }

    /// Gives the finished directory its final name, `<UTC>-<scenario>`; two runs finished
    /// with the same name get `-2`, `-3`... rather than one replacing the other.
    pub fn publish(&mut self) -> std::io::Result<()> {
        if self.published {
            return Ok(());
        }
        for attempt in 1..1000 {
            let name = if attempt == 1 {
                self.stem.clone()
            } else {
                format!("{}-{attempt}", self.stem)
            };
            let target = self.base.join(name);
            // Under the registry's lock, and forgotten there once renamed: an exit path
            // never removes a published run.
            let from = &self.path;
            let renamed = crate::cleanup::settle_on_success(&mut self.registered, || {
                rename_no_replace(from, &target)
            });
            match renamed {
                Ok(()) => {
                    self.path = target;
                    self.published = true;
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("too many runs with the same name"))
    }

    /// Writes run.json; with the rest of the directory it becomes visible at
    /// [`RunDir::publish`].
    pub fn write_record(&self, record: &RunRecord) -> std::io::Result<PathBuf> {
        let json = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        let path = self.path.join(RUN_FILE);
        write_atomically(&path, &json)?;
        Ok(path)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.published {
            // Descriptors may be what ran out: removing a tree needs some.
            crate::cleanup::release_fds();
            let remove = || {
                let _ = std::fs::remove_dir_all(&self.path);
            };
            match self.registered.take() {
                Some(registered) => crate::cleanup::settle(registered, remove),
                None => remove(),
            }
        }
    }
}

/// rename(2) that fails with `AlreadyExists` instead of replacing an empty directory.
fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::other(format!("{}: NUL in path", p.display())))
    };
    let (from_c, to_c) = (c(from)?, c(to)?);
    // SAFETY: both strings are NUL-terminated and outlive the call; renameat2 reads them only.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from_c.as_ptr(),
            libc::AT_FDCWD,
            to_c.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() != Some(libc::EINVAL) {
        return Err(error);
    }
    // A filesystem without RENAME_NOREPLACE: check, then rename (a race only between two
    // runs finishing in the same second with the same name).
    if to.exists() {
        return Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists));
    }
    std::fs::rename(from, to)
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename
/// ([`crate::output::write_file`]), so a crash or a full disk never leaves a half-written
/// file under the final name, and nothing but a regular file is ever replaced.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    match crate::output::write_file(path, bytes) {
        Ok(_) => Ok(()),
        Err(crate::output::OutputError::Io { source, .. }) => Err(source),
        Err(refused) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            refused.to_string(),
        )),
    }
}

/// The owner of a temporary run directory name, if it is one.
pub fn partial_owner(name: &str) -> Option<ProcessStamp> {
    let rest = name.strip_prefix(PARTIAL_PREFIX)?;
    let mut fields = rest.splitn(3, '-');
    let (pid, start) = (fields.next()?, fields.next()?);
    fields.next()?;
    ProcessStamp::parse(&format!("{pid}-{start}"))
}

/// Removes the temporary run directories under `base` whose owner no longer runs (killed
/// with SIGKILL, or a panic that could not unwind). Returns their names. A live run's
/// directory is left alone.
pub fn remove_stale_partials(base: &Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(base) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        match partial_owner(&name) {
            Some(owner) if !owner.is_alive() => {
                std::fs::remove_dir_all(entry.path())?;
                removed.push(name);
            }
            _ => {}
        }
    }
    removed.sort();
    Ok(removed)
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}: no such run directory or run.json")]
    Missing(String),
    #[error("{path}: not a finished run ({reason})")]
    Unfinished { path: String, reason: String },
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a vmscale run.json ({reason})")]
    Corrupt { path: String, reason: String },
    #[error("{path}: written by a newer vmscale (schema {found}, this build reads up to {SCHEMA_VERSION}); upgrade vmscale")]
    TooNew { path: String, found: u64 },
}

/// run.json holds samples, not traces: far below this even for millions of samples.
pub const MAX_RUN_FILE_BYTES: u64 = 256 << 20;

/// A directory still under its temporary name, or one without run.json, is not a run to
/// report: say which and why instead of "no such file".
fn check_finished(dir: &Path) -> Result<(), LoadError> {
    let shown = dir.display().to_string();
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    if let Some(owner) = partial_owner(&name) {
        let reason = if owner.is_alive() {
            format!("vmscale pid {} is still writing it", owner.pid)
        } else {
            format!(
                "vmscale pid {} stopped before finishing it; the next run in this directory or `vmscale doctor --cleanup --out {}` removes it",
                owner.pid,
                dir.parent().map_or_else(|| ".".into(), |p| p.display().to_string())
            )
        };
        return Err(LoadError::Unfinished {
            path: shown,
            reason,
        });
    }
    if !dir.join(RUN_FILE).exists() && dir.join(TRACE_DIR).is_dir() {
        return Err(LoadError::Unfinished {
            path: shown,
            reason: "a trace/ directory without run.json: the run was killed before it ended"
                .into(),
        });
    }
    Ok(())
}

/// Loads a run from a run directory or a run.json path, recomputing summaries from the raw
/// samples.
pub fn load_run(path: &Path) -> Result<RunRecord, LoadError> {
    if path.is_dir() {
        check_finished(path)?;
    }
    let file = if path.is_dir() {
        path.join(RUN_FILE)
    } else {
        path.to_path_buf()
    };
    let shown = file.display().to_string();
    let bytes =
        crate::bounded::read_regular(&file, MAX_RUN_FILE_BYTES).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => LoadError::Missing(shown.clone()),
            _ => LoadError::Io {
                path: shown.clone(),
                source: e,
            },
        })?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| LoadError::Corrupt {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
    let version = value
        .get("schema_version")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| LoadError::Corrupt {
            path: shown.clone(),
            reason: "no schema_version".into(),
        })?;
    if version > SCHEMA_VERSION as u64 {
        return Err(LoadError::TooNew {
            path: shown,
            found: version,
        });
    }
    let mut record: RunRecord = serde_json::from_value(value).map_err(|e| LoadError::Corrupt {
        path: shown,
        reason: e.to_string(),
    })?;
    record.resummarize();
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_timestamp_sorts_and_needs_no_quoting() {
        assert_eq!(compact_utc("2026-11-22T09:05:07Z"), "20261122T090507Z");
    }

    #[test]
    fn same_second_runs_get_distinct_directories() {
        let base = std::env::temp_dir().join(format!("vmscale-dir-test-{}", std::process::id()));
        let mut a = RunDir::create(&base, "memslot", "2026-11-22T09:05:07Z").unwrap();
        let mut b = RunDir::create(&base, "memslot", "2026-11-22T09:05:07Z").unwrap();
        assert_ne!(a.path, b.path);
        a.publish().unwrap();
        b.publish().unwrap();
        assert!(a.path.ends_with("20261122T090507Z-memslot"));
        assert!(b.path.ends_with("20261122T090507Z-memslot-2"));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_run_is_visible_under_its_name_only_when_published() {
        let base = std::env::temp_dir().join(format!("vmscale-publish-{}", std::process::id()));
        let dropped = RunDir::create(&base, "zap", "2026-11-22T09:05:07Z").unwrap();
        std::fs::write(dropped.path.join("run.json"), b"{}").unwrap();
        let partial = dropped.path.clone();
        let e = load_run(&partial).unwrap_err();
        assert!(matches!(e, LoadError::Unfinished { .. }), "{e}");
        assert!(e.to_string().contains("still writing"), "{e}");
        drop(dropped);
        assert!(
            !partial.exists(),
            "an unpublished run directory survived its drop"
        );
        assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn partial_directories_of_dead_owners_are_removed_and_live_ones_kept() {
        let base = std::env::temp_dir().join(format!("vmscale-stale-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let me = ProcessStamp::current();
        let dead = ProcessStamp {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        let stale = base.join(format!("{PARTIAL_PREFIX}{dead}-20261122T090507Z-zap-1"));
        std::fs::create_dir_all(stale.join("trace")).unwrap();
        let live = RunDir::create(&base, "zap", "2026-11-22T09:05:07Z").unwrap();
        let e = load_run(&stale).unwrap_err();
        assert!(e.to_string().contains("stopped before finishing"), "{e}");
        let removed = remove_stale_partials(&base).unwrap();
        assert_eq!(removed.len(), 1, "{removed:?}");
        assert!(!stale.exists() && live.path.exists());
        drop(live);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_file_where_the_base_directory_should_be_is_named() {
        let file = std::env::temp_dir().join(format!("vmscale-base-file-{}", std::process::id()));
        std::fs::write(&file, b"x").unwrap();
        let e = RunDir::create(&file, "zap", "2026-11-22T09:05:07Z").unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
        std::fs::remove_file(&file).unwrap();
    }

    #[test]
    fn a_killed_runs_trace_without_run_json_is_unfinished() {
        let dir = std::env::temp_dir().join(format!("vmscale-killed-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("trace")).unwrap();
        let e = load_run(&dir).unwrap_err();
        assert!(matches!(e, LoadError::Unfinished { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_files_give_clear_errors() {
        let base = std::env::temp_dir().join(format!("vmscale-load-test-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        assert!(matches!(
            load_run(&base.join("nope")),
            Err(LoadError::Missing(_))
        ));
        let corrupt = base.join("corrupt.json");
        std::fs::write(&corrupt, b"{\"schema_version\": 1, \"points\": [").unwrap();
        assert!(matches!(load_run(&corrupt), Err(LoadError::Corrupt { .. })));
        let newer = base.join("newer.json");
        std::fs::write(&newer, b"{\"schema_version\": 999}").unwrap();
        let e = load_run(&newer).unwrap_err();
        assert!(matches!(e, LoadError::TooNew { found: 999, .. }), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
