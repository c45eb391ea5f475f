//! Reading input files without trusting them: only regular files, and never more than a
//! stated size. A FIFO would block forever and a device or a huge sparse file would grow
//! memory without end; each gets a one-line error instead.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `path` for reading if it is a regular file. O_NONBLOCK keeps the open itself from
/// blocking on a FIFO without a writer; the type is then checked on the opened file, so a
/// rename between the check and the open cannot swap in something else.
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else {
            use std::os::unix::fs::FileTypeExt;
            if kind.is_fifo() {
                "a FIFO"
            } else if kind.is_char_device() || kind.is_block_device() {
                "a device"
            } else if kind.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            }
        };
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what}, not a regular file"),
        ));
    }
    Ok(file)
}

/// Reads a whole regular file of at most `max` bytes.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let size = file.metadata()?.len();
    if size > max {
        return Err(too_big(max));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    // The size may change under us; the limit holds regardless.
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_big(max));
    }
    Ok(bytes)
}

/// [`read_regular`] of a text file.
pub fn read_regular_string(path: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_regular(path, max)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()))
}

/// Limits for the files of a trace directory: metadata and formats are small, a kallsyms
/// snapshot of a large kernel is tens of MiB.
pub const MAX_METADATA_BYTES: u64 = 16 << 20;
pub const MAX_KALLSYMS_BYTES: u64 = 512 << 20;

fn too_big(max: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("larger than the {} MiB vmscale reads", max >> 20),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("vmscale-bounded-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn special_files_are_refused_without_blocking() {
        let dir = scratch("special");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_regular(&fifo, 1024).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        let e = read_regular(Path::new("/dev/zero"), 1024).unwrap_err();
        assert!(e.to_string().contains("device"), "{e}");
        let e = read_regular(&dir, 1024).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_sparse_file_beyond_the_limit_is_refused_before_reading() {
        let dir = scratch("sparse");
        let big = dir.join("big");
        File::create(&big).unwrap().set_len(8 << 30).unwrap();
        let e = read_regular(&big, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
        std::fs::write(dir.join("small"), b"abc").unwrap();
        assert_eq!(read_regular(&dir.join("small"), 3).unwrap(), b"abc");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
