//! Helpers every command-line test binary shares.
#![allow(dead_code)] // each test binary uses its own subset

pub mod corpus;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub fn vmscale() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vmscale"))
}

/// A fresh, empty-or-absent directory under the temp dir, unique to this test process.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vmscale-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Removes its directory when dropped, so a failing test leaves nothing behind either.
pub struct RemovedOnDrop(pub PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs vmscale with `args` plus `--quiet --format json --out <scratch>`, requires
/// success, removes the output and returns the printed JSON.
pub fn json_run(args: &[&str], name: &str) -> Value {
    let out = scratch(name);
    let o = vmscale()
        .args(args)
        .args(["--quiet", "--format", "json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "vmscale {args:?} failed: {}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&out);
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `vmscale report --format json PATH` (a run directory, trace directory or .dat file),
/// which must succeed: the run record it prints.
pub fn json_report(path: &Path) -> Value {
    let o = vmscale()
        .args(["report", "--format", "json"])
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A refused command: exit `code`, exactly one line on stderr, containing `needle`.
pub fn one_line_failure(o: &Output, code: i32, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "want one line: {err}");
    assert!(err.contains(needle), "'{needle}' not in: {err}");
}

/// The single run directory `out` holds.
pub fn only_run_dir(out: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "expected one run directory in {}: {dirs:?}",
        out.display()
    );
    dirs.into_iter().next().unwrap()
}

pub fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}
