//! The run directory: `vmscale-runs/<UTC timestamp>-<scenario>/run.json`.

use std::path::{Path, PathBuf};

use crate::schema::{RunRecord, SCHEMA_VERSION};

pub const RUN_FILE: &str = "run.json";

/// A created run directory.
pub struct RunDir {
    pub path: PathBuf,
}

/// `2026-11-22T09:05:07Z` -> `20261122T090507Z`: sorts by time and has no characters that
/// need quoting in a shell.
fn compact_utc(rfc3339: &str) -> String {
    rfc3339.chars().filter(|c| *c != '-' && *c != ':').collect()
}

pub fn utc_now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

impl RunDir {
    /// Creates a fresh directory under `base` (created if missing). Two runs started in the
    /// same second get `-2`, `-3`... rather than sharing a directory.
    pub fn create(base: &Path, scenario: &str, started_utc: &str) -> std::io::Result<RunDir> {
        std::fs::create_dir_all(base)?;
        let stem = format!("{}-{scenario}", compact_utc(started_utc));
        for attempt in 1..1000 {
            let name = if attempt == 1 {
                stem.clone()
            } else {
                format!("{stem}-{attempt}")
            };
            let path = base.join(name);
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(RunDir { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("too many runs in the same second"))
    }

    /// Writes run.json atomically (temporary file then rename), so a crash mid-write never
    /// leaves a half file that later commands would reject.
    pub fn write_record(&self, record: &RunRecord) -> std::io::Result<PathBuf> {
        let final_path = self.path.join(RUN_FILE);
        let tmp = self.path.join(".run.json.tmp");
        let json = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, json)?;
        std::fs::rename(&tmp, &final_path)?;
        Ok(final_path)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}: no such run directory or run.json")]
    Missing(String),
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

/// Loads a run from a run directory or a run.json path, recomputing summaries from the raw
/// samples.
pub fn load_run(path: &Path) -> Result<RunRecord, LoadError> {
    let file = if path.is_dir() {
        path.join(RUN_FILE)
    } else {
        path.to_path_buf()
    };
    let shown = file.display().to_string();
    let bytes = std::fs::read(&file).map_err(|e| match e.kind() {
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
        let a = RunDir::create(&base, "memslot", "2026-11-22T09:05:07Z").unwrap();
        let b = RunDir::create(&base, "memslot", "2026-11-22T09:05:07Z").unwrap();
        assert_ne!(a.path, b.path);
        assert!(b.path.ends_with("20261122T090507Z-memslot-2"));
        std::fs::remove_dir_all(&base).unwrap();
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
