//! Writing results and notes to the terminal without ever panicking.
//!
//! `print!` panics when stdout is a pipe whose reader has gone (`vmscale ... | head -1`) or
//! a full disk. A reader that stops early is normal use, as for any Unix filter: vmscale
//! then stops writing and finishes its work (removing its tracefs instance and VMs) with
//! its own exit code; so does a terminal that hangs up. A full or failing stdout is a real
//! error and says so in one line.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::failure::Failure;

/// Set once the reader of stdout has gone; later output is dropped silently.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout: a closed pipe ends output quietly, any other failure is an error.
pub fn write_out(text: &str) -> Result<(), Failure> {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe || terminal_hung_up(&e) => {
            STDOUT_GONE.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => Err(Failure::runtime(format!(
            "cannot write to standard output: {e}"
        ))),
    }
}

/// Whether `e`, from a write to stdout, says that stdout is a terminal that hung up (its
/// ssh session or window closed): the terminal's pipe gone, as quiet an end as a pipe's.
/// A hung-up terminal fails every write and every ioctl with EIO, where a file or a disk
/// that fails a write with EIO answers a terminal ioctl with ENOTTY.
fn terminal_hung_up(e: &std::io::Error) -> bool {
    if e.raw_os_error() != Some(libc::EIO) {
        return false;
    }
    let mut termios = std::mem::MaybeUninit::<libc::termios>::uninit();
    // SAFETY: TCGETS writes a termios into the buffer we pass, or fails; stdout is open.
    let rc = unsafe { libc::ioctl(1, libc::TCGETS, termios.as_mut_ptr()) };
    rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EIO)
}

/// A note or the path of a result on stderr. A closed or full stderr loses the note but
/// never the run. Nothing is said once an allocation failure is ending the process: its
/// own line is the error, and what fails meanwhile fails because of its cleanup.
pub fn write_note(text: &str) {
    if vmscale_run::cleanup::ending() {
        return;
    }
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(text.as_bytes());
    let _ = stderr.write_all(b"\n");
}

/// `print!` that returns a [`Failure`] instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => { $crate::console::write_out(&format!($($arg)*)) };
}

/// `println!` that returns a [`Failure`] instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::console::write_out(&format!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` that never panics.
macro_rules! note {
    ($($arg:tt)*) => { $crate::console::write_note(&format!($($arg)*)) };
}

pub(crate) use {note, out, outln};
