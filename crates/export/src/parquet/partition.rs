//! Where a run's table files go: Hive-style partition directories by kernel, host and
//! date, and a file name from the run's id.

use std::path::{Path, PathBuf};

use vmscale_run::RunRecord;

use super::ParquetExportError;

/// The partition value Hive, Spark and DuckDB read as null: a run that does not know its
/// kernel, host or start (an imported trace) still gets a place.
const NULL_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// A run's id in every table: its directory's name (the UTC start and the scenario) and the
/// host's name, so runs of many hosts gathered in one place stay apart.
pub fn run_id(run_dir_name: &str, record: &RunRecord) -> String {
    if record.host.hostname.is_empty() {
        run_dir_name.to_string()
    } else {
        format!("{run_dir_name}@{}", record.host.hostname)
    }
}

/// The partition keys of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Keys {
    kernel: String,
    host: String,
    date: String,
}

impl Keys {
    pub(super) fn of(record: &RunRecord) -> Keys {
        Keys {
            kernel: record.host.kernel_release.clone(),
            host: record.host.hostname.clone(),
            date: utc_date(&record.started_utc).unwrap_or_default(),
        }
    }

    /// `kernel=<k>/host=<h>/date=<d>`, each value escaped as Hive escapes it.
    pub(super) fn relative_dir(&self) -> PathBuf {
        [
            ("kernel", &self.kernel),
            ("host", &self.host),
            ("date", &self.date),
        ]
        .iter()
        .map(|(key, value)| format!("{key}={}", partition_value(value)))
        .collect()
    }
}

/// `2026-11-22` of `2026-11-22T09:05:07Z`; None for anything not shaped like a date.
fn utc_date(rfc3339: &str) -> Option<String> {
    let date = rfc3339.get(..10)?;
    let shaped = date.bytes().enumerate().all(|(i, b)| match i {
        4 | 7 => b == b'-',
        _ => b.is_ascii_digit(),
    });
    shaped.then(|| date.to_string())
}

/// Every byte outside a conservative set as `%XX`, which Hive, Spark and DuckDB decode;
/// a value can then never add a directory level, an `=` or a character an object store
/// mangles.
fn percent_encode(value: &str, also: &[u8]) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"._-+".contains(&b) || also.contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn partition_value(value: &str) -> String {
    if value.is_empty() {
        NULL_PARTITION.to_string()
    } else {
        percent_encode(value, b"")
    }
}

/// `<run id>.parquet`; the run id keeps its `@`.
pub(super) fn file_name(run_id: &str) -> String {
    format!("{}.parquet", percent_encode(run_id, b"@"))
}

/// The output directory must be a directory (or a link to one) or not exist yet.
pub(super) fn check_out_dir(out: &Path) -> Result<(), ParquetExportError> {
    match std::fs::metadata(out) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(meta) => Err(ParquetExportError::NotADirectory {
            path: out.to_path_buf(),
            what: vmscale_run::output::what_it_is(meta.file_type()),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ParquetExportError::Dir {
            path: out.to_path_buf(),
            source,
        }),
    }
}

/// Creates `dir` (under `out`) and its parents; a non-directory in the way is named as a
/// refusal rather than reported as the errno of the call that tripped over it.
pub(super) fn ensure_dir(out: &Path, dir: &Path) -> Result<(), ParquetExportError> {
    let Err(source) = std::fs::create_dir_all(dir) else {
        return Ok(());
    };
    for ancestor in dir.ancestors() {
        if let Ok(meta) = std::fs::metadata(ancestor) {
            if !meta.is_dir() {
                return Err(ParquetExportError::NotADirectory {
                    path: ancestor.to_path_buf(),
                    what: vmscale_run::output::what_it_is(meta.file_type()),
                });
            }
        }
        if ancestor == out {
            break;
        }
    }
    Err(ParquetExportError::Dir {
        path: dir.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_would_add_a_level_or_a_key_are_escaped() {
        assert_eq!(partition_value("6.1.0-27-amd64"), "6.1.0-27-amd64");
        assert_eq!(partition_value("a/b=c d"), "a%2Fb%3Dc%20d");
        assert_eq!(partition_value(""), NULL_PARTITION);
        assert_eq!(
            file_name("20261122T090507Z-zap@hv-1"),
            "20261122T090507Z-zap@hv-1.parquet"
        );
        assert_eq!(file_name("x/../y"), "x%2F..%2Fy.parquet");
    }

    #[test]
    fn the_date_is_the_start_in_utc_or_null() {
        assert_eq!(
            utc_date("2026-11-22T09:05:07Z").as_deref(),
            Some("2026-11-22")
        );
        assert_eq!(utc_date(""), None);
        assert_eq!(utc_date("yesterday at noon"), None);
        let keys = Keys {
            kernel: "6.1.0".into(),
            host: "hv1".into(),
            date: String::new(),
        };
        assert_eq!(
            keys.relative_dir(),
            PathBuf::from("kernel=6.1.0/host=hv1/date=__HIVE_DEFAULT_PARTITION__")
        );
    }
}
