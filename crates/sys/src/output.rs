//! Writing an output file (an exported trace, a comparison page, a run's own files) without
//! destroying what is at its path, and without leaving anything half-written.
//!
//! The path must be absent or a regular file (a symbolic link to one is followed, and the
//! file it names is replaced, not the link); a directory, FIFO, device or socket is refused
//! before anything is written. The file is written beside its final name under a hidden
//! temporary one, `.<name>.tmp-<pid>-<start>` ([`crate::ProcessStamp`]), registered with
//! [`crate::cleanup`] so no exit leaves it, and renamed into place only when complete. A
//! SIGKILLed writer's temporary file is removed by the next writer in the same directory,
//! or by `vmscale doctor --cleanup` ([`remove_stale_temporaries`]).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::cleanup::{self, Kind, Registered};
use crate::owner::ProcessStamp;

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// Something other than a regular file is at the path: nothing was written.
    #[error("{}: {what}, not a regular file; vmscale writes only to a new file or over a regular one", path.display())]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl OutputError {
    /// A path that cannot be written as asked (exit 2), rather than a write that failed.
    pub fn is_refusal(&self) -> bool {
        matches!(self, OutputError::NotRegular { .. })
    }
}

/// What a file type is, in words for an error ("a FIFO").
pub fn what_it_is(kind: std::fs::FileType) -> &'static str {
    if kind.is_file() {
        "a regular file"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "something else"
    }
}

/// Where an output for `path` really goes: `path` itself when absent or a regular file, the
/// file a symbolic link names when it names a regular one. Anything else is refused.
pub fn check_target(path: &Path) -> Result<PathBuf, OutputError> {
    let refused = |what| OutputError::NotRegular {
        path: path.to_path_buf(),
        what,
    };
    let io = |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let link = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(path.to_path_buf()),
        Err(e) => return Err(io(e)),
    };
    if link.file_type().is_file() {
        return Ok(path.to_path_buf());
    }
    if !link.file_type().is_symlink() {
        return Err(refused(what_it_is(link.file_type())));
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => path.canonicalize().map_err(io),
        Ok(meta) => Err(refused(match what_it_is(meta.file_type()) {
            "a directory" => "a symbolic link to a directory",
            "a FIFO" => "a symbolic link to a FIFO",
            "a character device" => "a symbolic link to a character device",
            "a block device" => "a symbolic link to a block device",
            "a socket" => "a symbolic link to a socket",
            _ => "a symbolic link to something else",
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(refused("a symbolic link to nothing"))
        }
        Err(e) => Err(io(e)),
    }
}

/// The hidden temporary name beside `target` that this process writes it under.
pub fn temporary_name(target: &Path) -> Result<PathBuf, OutputError> {
    let name = target.file_name().ok_or_else(|| OutputError::Io {
        path: target.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
    })?;
    Ok(target.with_file_name(format!(
        ".{}{TEMP_MARK}{}",
        name.to_string_lossy(),
        ProcessStamp::current()
    )))
}

const TEMP_MARK: &str = ".tmp-";

/// An output being written under its temporary name. [`OutputFile::commit`] renames it into
/// place; dropped without that (an error, a panic), the temporary file is removed.
#[derive(Debug)]
pub struct OutputFile {
    /// The final path (a symbolic link's target when the path was a link).
    target: PathBuf,
    temp: PathBuf,
    registered: Option<Registered>,
}

impl OutputFile {
    /// Checks `path` ([`check_target`]) and creates the temporary file beside it. A stale
    /// temporary file of a killed writer in the same directory is removed first.
    pub fn create(path: &Path) -> Result<(OutputFile, File), OutputError> {
        let target = check_target(path)?;
        let temp = temporary_name(&target)?;
        if let Some(dir) = target.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            let _ = remove_stale_temporaries(dir);
        }
        // A file replaced keeps its permissions.
        let mode = std::fs::metadata(&target)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o666);
        let (file, registered) = cleanup::create(Kind::File, &temp, |temp| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(temp)
        })
        .map_err(|source| OutputError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok((
            OutputFile {
                target,
                temp,
                registered: Some(registered),
            },
            file,
        ))
    }

    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The temporary file, for writers that open it themselves.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Flushes the written file to disk and renames it over the target, which is checked
    /// again first (it may have been replaced by something that is not a regular file
    /// while this one was written).
    pub fn commit(mut self, file: File) -> Result<PathBuf, OutputError> {
        let target = self.target.clone();
        let io = |source| OutputError::Io {
            path: target.clone(),
            source,
        };
        file.sync_all().map_err(io)?;
        drop(file);
        check_target(&self.target)?;
        // On failure the temporary file stays registered, and goes with the drop.
        let (temp, to) = (&self.temp, &self.target);
        cleanup::settle_on_success(&mut self.registered, || std::fs::rename(temp, to))
            .map_err(io)?;
        Ok(target)
    }
}

/// Commits outputs that belong together, as [`OutputFile::commit`] does each, but renamed
/// under one hold of the cleanup registry: a signal's cleanup, which takes the registry
/// first, finds all of them under their final names or none (their temporaries removed).
/// A rename that fails leaves the ones before it in place and removes the rest.
pub fn commit_together(outputs: Vec<(OutputFile, File)>) -> Result<Vec<PathBuf>, OutputError> {
    let mut pending = Vec::with_capacity(outputs.len());
    for (output, file) in outputs {
        let io = |source| OutputError::Io {
            path: output.target.clone(),
            source,
        };
        file.sync_all().map_err(io)?;
        drop(file);
        check_target(&output.target)?;
        pending.push(output);
    }
    let names: Vec<(PathBuf, PathBuf)> = pending
        .iter()
        .map(|o| (o.temp.clone(), o.target.clone()))
        .collect();
    let mut registered: Vec<Option<Registered>> =
        pending.iter_mut().map(|o| o.registered.take()).collect();
    let renamed = cleanup::settle_all_on_success(&mut registered, |i| {
        let (temp, target) = &names[i];
        std::fs::rename(temp, target).map_err(|source| OutputError::Io {
            path: target.clone(),
            source,
        })
    });
    // What stayed registered (after a failed rename) goes back to its owner, whose drop
    // removes it.
    for (output, slot) in pending.iter_mut().zip(registered) {
        output.registered = slot;
    }
    renamed?;
    Ok(names.into_iter().map(|(_, target)| target).collect())
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let Some(registered) = self.registered.take() {
            cleanup::settle(registered, || {
                let _ = std::fs::remove_file(&self.temp);
            });
        }
    }
}

/// Writes `bytes` to `path` through [`OutputFile`]: the path is checked, and a crash or a
/// full disk never leaves a half-written file under the final name.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<PathBuf, OutputError> {
    let (output, mut file) = OutputFile::create(path)?;
    file.write_all(bytes).map_err(|source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    output.commit(file)
}

/// The owner of a temporary output file name, if it is one and names its owner: the
/// current `.<name>.tmp-<pid>-<start>`, or `..<name>.tmp-<pid>.partial-<pid>` of builds that
/// wrote an export through two temporary names (pid only).
fn temporary_owner(name: &str) -> Option<Owner> {
    let rest = name.strip_prefix('.')?;
    if let Some((_, after)) = rest.rsplit_once(TEMP_MARK) {
        if let Some(stamp) = ProcessStamp::parse(after) {
            return Some(Owner::Stamp(stamp));
        }
        let (pid, partial) = after.split_once(".partial-")?;
        if rest.starts_with('.') && pid == partial {
            return Some(Owner::Pid(pid.parse().ok()?));
        }
    }
    None
}

enum Owner {
    Stamp(ProcessStamp),
    /// An older name: its owner runs while that pid runs a vmscale.
    Pid(u32),
}

impl Owner {
    fn is_alive(&self) -> bool {
        match self {
            Owner::Stamp(stamp) => stamp.is_alive(),
            Owner::Pid(pid) => std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end().starts_with("vmscale")),
        }
    }
}

/// The temporary output files in `dir` whose writer no longer runs (killed with SIGKILL).
/// Only regular files with a temporary name count.
pub fn stale_temporaries(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut stale: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            temporary_owner(&name).is_some_and(|owner| !owner.is_alive())
                && entry.file_type().is_ok_and(|t| t.is_file())
        })
        .map(|entry| entry.path())
        .collect();
    stale.sort();
    Ok(stale)
}

/// Removes [`stale_temporaries`] of `dir`; returns their names.
pub fn remove_stale_temporaries(dir: &Path) -> std::io::Result<Vec<String>> {
    Ok(stale_temporaries(dir)?
        .into_iter()
        .filter(|path| std::fs::remove_file(path).is_ok())
        .filter_map(|path| Some(path.file_name()?.to_string_lossy().into_owned()))
        .collect())
}

/// Where outputs land under a runs directory: `out` itself (compare pages), each run
/// directory in it (an export's default target) and each run of a tour directory.
pub fn output_dirs(out: &Path) -> Vec<PathBuf> {
    let subdirs = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut dirs = vec![out.to_path_buf()];
    for run in subdirs(out) {
        dirs.extend(subdirs(&run));
        dirs.push(run);
    }
    dirs.sort();
    dirs
}

/// Scratch directories are `<temp dir>/vmscale-scratch-<pid>-<start>-<n>`.
const SCRATCH_PREFIX: &str = "vmscale-scratch-";

/// A directory of this process's own under the system's temporary directory (a text trace
/// converted for analysis), registered so no exit leaves it, and removed on drop. A
/// SIGKILLed owner's is removed by the next one made, or by `vmscale doctor --cleanup`.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
    registered: Option<Registered>,
}

impl ScratchDir {
    pub fn create() -> std::io::Result<ScratchDir> {
        use std::os::unix::fs::DirBuilderExt;
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let base = std::env::temp_dir();
        let _ = remove_stale_scratch_dirs();
        loop {
            let path = base.join(format!(
                "{SCRATCH_PREFIX}{}-{}",
                ProcessStamp::current(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            // Only a directory this call makes is used (never one that was there), and only
            // its owner can enter it.
            match cleanup::create(Kind::Tree, &path, |p| {
                std::fs::DirBuilder::new().mode(0o700).create(p)
            }) {
                Ok(((), registered)) => {
                    return Ok(ScratchDir {
                        path,
                        registered: Some(registered),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Some(registered) = self.registered.take() {
            cleanup::settle(registered, || {
                let _ = std::fs::remove_dir_all(&self.path);
            });
        }
    }
}

/// The scratch directories of processes that no longer run.
pub fn stale_scratch_dirs() -> std::io::Result<Vec<PathBuf>> {
    let mut stale: Vec<PathBuf> = std::fs::read_dir(std::env::temp_dir())?
        .flatten()
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let owner = name
                .strip_prefix(SCRATCH_PREFIX)
                .and_then(|rest| rest.rsplit_once('-'))
                .filter(|(_, n)| n.parse::<u32>().is_ok())
                .and_then(|(owner, _)| ProcessStamp::parse(owner));
            owner.is_some_and(|o| !o.is_alive()) && entry.file_type().is_ok_and(|t| t.is_dir())
        })
        .map(|entry| entry.path())
        .collect();
    stale.sort();
    Ok(stale)
}

/// Removes [`stale_scratch_dirs`]; returns their paths.
pub fn remove_stale_scratch_dirs() -> std::io::Result<Vec<String>> {
    Ok(stale_scratch_dirs()?
        .into_iter()
        .filter(|path| std::fs::remove_dir_all(path).is_ok())
        .map(|path| path.display().to_string())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("vmscale-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn outputs_committed_together_all_appear_and_leave_no_temporary() {
        let dir = scratch("together");
        let mut outputs = Vec::new();
        for name in ["a", "b", "c"] {
            let (output, mut file) = OutputFile::create(&dir.join(name)).unwrap();
            file.write_all(name.as_bytes()).unwrap();
            outputs.push((output, file));
        }
        let written = commit_together(outputs).unwrap();
        assert_eq!(written.len(), 3);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(std::fs::read(dir.join("b")).unwrap(), b"b");

        // A target replaced by a directory while the others were written: nothing of the
        // set is renamed, and no temporary stays.
        let mut outputs = Vec::new();
        for name in ["d", "e"] {
            outputs.push(OutputFile::create(&dir.join(name)).unwrap());
        }
        std::fs::create_dir(dir.join("e")).unwrap();
        let refused = commit_together(outputs).unwrap_err();
        assert!(refused.is_refusal(), "{refused}");
        assert!(!dir.join("d").exists());
        let left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(TEMP_MARK))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn only_absent_paths_and_regular_files_are_written() {
        let dir = scratch("targets");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/null", dir.join("to-device")).unwrap();
        std::os::unix::fs::symlink(&dir, dir.join("to-dir")).unwrap();
        std::os::unix::fs::symlink(dir.join("nothing"), dir.join("dangling")).unwrap();
        for (path, what) in [
            (dir.clone(), "a directory"),
            (fifo.clone(), "a FIFO"),
            (PathBuf::from("/dev/null"), "a character device"),
            (
                dir.join("to-device"),
                "a symbolic link to a character device",
            ),
            (dir.join("to-dir"), "a symbolic link to a directory"),
            (dir.join("dangling"), "a symbolic link to nothing"),
        ] {
            let e = write_file(&path, b"x").unwrap_err();
            assert!(e.is_refusal(), "{e}");
            assert!(e.to_string().contains(what), "{e}");
        }
        assert!(!dir.join("nothing").exists());
        // /dev/null is still a device.
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());

        // Absent, a regular file (its mode kept), and a link to one (the file replaced).
        write_file(&dir.join("new"), b"new").unwrap();
        assert_eq!(std::fs::read(dir.join("new")).unwrap(), b"new");
        std::fs::set_permissions(dir.join("new"), std::fs::Permissions::from_mode(0o600)).unwrap();
        write_file(&dir.join("new"), b"again").unwrap();
        assert_eq!(std::fs::read(dir.join("new")).unwrap(), b"again");
        let mode = std::fs::metadata(dir.join("new"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::os::unix::fs::symlink(dir.join("new"), dir.join("link")).unwrap();
        write_file(&dir.join("link"), b"through").unwrap();
        assert!(std::fs::symlink_metadata(dir.join("link"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(dir.join("new")).unwrap(), b"through");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unfinished_output_leaves_nothing() {
        let dir = scratch("unfinished");
        let target = dir.join("out.dat");
        std::fs::write(&target, b"old").unwrap();
        let (output, mut file) = OutputFile::create(&target).unwrap();
        file.write_all(b"half").unwrap();
        assert!(output.temp_path().exists());
        drop(output);
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn scratch_directories_are_private_and_go_with_their_owner() {
        let scratch = ScratchDir::create().unwrap();
        let path = scratch.path().to_path_buf();
        std::fs::write(path.join("f"), b"x").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        drop(scratch);
        assert!(!path.exists());
        let me = ProcessStamp::current();
        let dead = ProcessStamp {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        let stale = std::env::temp_dir().join(format!("{SCRATCH_PREFIX}{dead}-0"));
        std::fs::create_dir_all(stale.join("sub")).unwrap();
        let live = ScratchDir::create().unwrap();
        assert!(!stale.exists(), "a dead owner's scratch directory stayed");
        assert!(live.path().exists());
    }

    #[test]
    fn temporaries_of_dead_writers_are_removed_and_live_ones_kept() {
        let dir = scratch("stale");
        let me = ProcessStamp::current();
        let dead = ProcessStamp {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        let stale = [
            format!(".trace.dat.tmp-{dead}"),
            // The two-level name older builds gave an export; pid 0 never runs vmscale.
            "..trace.dat.tmp-0.partial-0".to_string(),
        ];
        for name in &stale {
            std::fs::write(dir.join(name), b"x").unwrap();
        }
        let live = format!(".report.html.tmp-{me}");
        std::fs::write(dir.join(&live), b"x").unwrap();
        std::fs::write(dir.join(".keep.tmp-notapid"), b"x").unwrap();
        std::fs::create_dir(dir.join(format!(".dir.tmp-{dead}"))).unwrap();
        let mut removed = remove_stale_temporaries(&dir).unwrap();
        removed.sort();
        let mut expected = stale.to_vec();
        expected.sort();
        assert_eq!(removed, expected);
        assert!(dir.join(&live).exists());
        assert!(dir.join(".keep.tmp-notapid").exists());
        assert!(dir.join(format!(".dir.tmp-{dead}")).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
