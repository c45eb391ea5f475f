//! Drives a real VMM: QEMU, started with exactly the options a scenario asks for and
//! spoken to over QMP on a private unix socket.
//!
//! - [`Qemu`]: one QEMU process that vmscale started. It dies with vmscale: SIGKILL on the
//!   parent's death (`PR_SET_PDEATHSIG`), its own process group (a terminal's Ctrl-C reaches
//!   vmscale, which decides), and on drop the whole group is killed and reaped. vmscale never
//!   signals a QEMU it did not start.
//! - [`qmp`]: a small blocking QMP client. It runs on the thread that measures, so a command's
//!   round trip is a write and a read on a socket, with no executor between them.
//!
//! Every error is one line naming the QEMU command line and the last line QEMU wrote on
//! stderr, which is where QEMU says what went wrong.

mod process;
pub mod qmp;

use std::path::{Path, PathBuf};

pub use process::{Qemu, QemuConfig};

/// The binary name Debian's `qemu-system-x86` installs.
pub const QEMU_BINARY: &str = "qemu-system-x86_64";

/// How to get QEMU where it is missing, in one sentence.
pub const INSTALL_HINT: &str =
    "install it with `apt-get install qemu-system-x86`, or name one with --qemu PATH";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable QEMU binary: the request cannot be met on this host as given.
    #[error("{0}")]
    NotFound(String),
    /// QEMU failed while running: exited early, answered a command with an error, did not
    /// answer in time, or the socket broke. The context names its command line and the last
    /// line it wrote on stderr.
    #[error("{what} (QEMU: {command_line}; {stderr})")]
    Qemu {
        what: String,
        command_line: String,
        /// "its last stderr line: ..." or "nothing on stderr".
        stderr: String,
    },
    /// A signal asked vmscale to stop while it waited for QEMU; the caller tears it down.
    #[error("interrupted")]
    Interrupted,
}

impl Error {
    /// A request this host cannot satisfy (exit 2), as opposed to a failure while running.
    pub fn is_usage(&self) -> bool {
        matches!(self, Error::NotFound(_))
    }
}

/// The QEMU to run: `explicit` (`--qemu PATH`) when given, else [`QEMU_BINARY`] on PATH.
pub fn find_qemu(explicit: Option<&Path>) -> Result<PathBuf, Error> {
    if let Some(path) = explicit {
        return if is_executable(path) {
            Ok(path.to_path_buf())
        } else {
            Err(Error::NotFound(format!(
                "--qemu {}: no executable file there ({INSTALL_HINT})",
                path.display()
            )))
        };
    }
    on_path(QEMU_BINARY).ok_or_else(|| {
        Error::NotFound(format!(
            "{QEMU_BINARY} is not on PATH: the qemu scenarios drive a real QEMU ({INSTALL_HINT})"
        ))
    })
}

/// `name` in the first PATH directory that has it as an executable file.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// CLOCK_MONOTONIC in ns, the clock of every vmscale sample and of the kernel trace.
pub use vmscale_sys::monotonic_ns;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_explicit_qemu_is_a_usage_error_naming_the_path() {
        let e = find_qemu(Some(Path::new("/nonexistent/qemu"))).unwrap_err();
        assert!(e.is_usage());
        let text = e.to_string();
        assert!(
            text.contains("/nonexistent/qemu") && !text.contains('\n'),
            "{text}"
        );
    }

    #[test]
    fn a_directory_is_not_a_qemu() {
        assert!(find_qemu(Some(Path::new("/tmp"))).unwrap_err().is_usage());
    }
}
