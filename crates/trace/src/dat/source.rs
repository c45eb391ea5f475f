//! Bounds-checked reading of the bytes of a .dat file or of a decompressed section.
//!
//! Every length and offset read from the file is checked against the end of what is there
//! before anything is allocated or sliced, so a corrupt file gives
//! [`DatError::Truncated`] instead of a panic or an allocation of the size it claims.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::error::DatError;

/// The largest metadata section accepted in memory, as stored or decompressed (kallsyms of
/// a large kernel with modules is tens of MiB).
pub const METADATA_LIMIT: u64 = 256 << 20;

/// Byte order of the numbers in the file (its first bytes say which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endian {
    Little,
    Big,
}

/// Where bytes come from: the file itself (read on demand, so multi-gigabyte trace data
/// is never held in memory) or a decompressed section held in memory.
#[derive(Debug)]
pub enum Source {
    File { file: File, len: u64, path: PathBuf },
    Memory(Vec<u8>),
}

impl Source {
    pub fn open(path: &Path) -> Result<Source, DatError> {
        let io = |source| DatError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Ok(Source::File {
            file,
            len,
            path: path.to_path_buf(),
        })
    }

    /// The file mapped read-only, when it is a file that can be.
    pub fn map(&self) -> Option<std::sync::Arc<crate::mapped::MappedFile>> {
        match self {
            Source::File { file, len, .. } => crate::mapped::MappedFile::map(file, *len),
            Source::Memory(_) => None,
        }
    }

    pub fn len(&self) -> u64 {
        match self {
            Source::File { len, .. } => *len,
            Source::Memory(bytes) => bytes.len() as u64,
        }
    }

    /// Fails unless `len` bytes exist at `offset`.
    pub fn check(&self, what: &'static str, offset: u64, len: u64) -> Result<(), DatError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(DatError::Truncated {
                what,
                offset,
                len,
                end: self.len(),
            }),
        }
    }

    /// Fills `buf` from `offset`.
    pub fn read_exact_at(
        &self,
        what: &'static str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), DatError> {
        self.check(what, offset, buf.len() as u64)?;
        match self {
            Source::File { file, path, .. } => {
                file.read_exact_at(buf, offset)
                    .map_err(|source| DatError::Io {
                        path: path.clone(),
                        source,
                    })
            }
            Source::Memory(bytes) => {
                // In range: checked above.
                let start = offset as usize;
                buf.copy_from_slice(&bytes[start..start + buf.len()]);
                Ok(())
            }
        }
    }

    /// `len` bytes at `offset`, allocated only once they are known to exist. Only metadata
    /// is read this way (trace data is streamed, see [`SourceRange`]), so a size beyond
    /// [`METADATA_LIMIT`] is corruption even in a file large enough to hold it.
    pub fn bytes_at(&self, what: &'static str, offset: u64, len: u64) -> Result<Vec<u8>, DatError> {
        self.check(what, offset, len)?;
        if len > METADATA_LIMIT {
            return Err(DatError::MetadataTooLarge {
                what,
                size: len,
                limit: METADATA_LIMIT,
            });
        }
        let mut buf = vec![0; len as usize];
        self.read_exact_at(what, offset, &mut buf)?;
        Ok(buf)
    }
}

/// A byte range of a [`Source`] read front to back, a piece at a time: how trace data and
/// compressed chunks are read without holding them in memory.
#[derive(Debug)]
pub struct SourceRange<'s> {
    source: &'s Source,
    what: &'static str,
    pos: u64,
    end: u64,
}

impl<'s> SourceRange<'s> {
    /// Fails unless the whole range exists, so a read never comes up short.
    pub fn new(
        source: &'s Source,
        what: &'static str,
        offset: u64,
        len: u64,
    ) -> Result<SourceRange<'s>, DatError> {
        source.check(what, offset, len)?;
        Ok(SourceRange {
            source,
            what,
            pos: offset,
            end: offset + len,
        })
    }

    /// Bytes not read yet.
    pub fn left(&self) -> u64 {
        self.end - self.pos
    }
}

impl Read for SourceRange<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf
            .len()
            .min(usize::try_from(self.left()).unwrap_or(usize::MAX));
        self.source
            .read_exact_at(self.what, self.pos, &mut buf[..n])
            .map_err(std::io::Error::other)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// A read position in a [`Source`], reading numbers in the file's byte order.
#[derive(Debug)]
pub struct Cursor<'s> {
    pub source: &'s Source,
    pub pos: u64,
    pub endian: Endian,
}

impl<'s> Cursor<'s> {
    pub fn new(source: &'s Source, pos: u64, endian: Endian) -> Cursor<'s> {
        Cursor {
            source,
            pos,
            endian,
        }
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DatError> {
        let mut buf = [0u8; N];
        self.source.read_exact_at(what, self.pos, &mut buf)?;
        self.pos += N as u64;
        Ok(buf)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, DatError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, DatError> {
        let b = self.array(what)?;
        Ok(match self.endian {
            Endian::Little => u16::from_le_bytes(b),
            Endian::Big => u16::from_be_bytes(b),
        })
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, DatError> {
        let b = self.array(what)?;
        Ok(match self.endian {
            Endian::Little => u32::from_le_bytes(b),
            Endian::Big => u32::from_be_bytes(b),
        })
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, DatError> {
        let b = self.array(what)?;
        Ok(match self.endian {
            Endian::Little => u64::from_le_bytes(b),
            Endian::Big => u64::from_be_bytes(b),
        })
    }

    /// `len` bytes, after checking they exist.
    pub fn bytes(&mut self, what: &'static str, len: u64) -> Result<Vec<u8>, DatError> {
        let bytes = self.source.bytes_at(what, self.pos, len)?;
        self.pos += len;
        Ok(bytes)
    }

    pub fn skip(&mut self, what: &'static str, len: u64) -> Result<(), DatError> {
        self.source.check(what, self.pos, len)?;
        self.pos += len;
        Ok(())
    }

    /// A NUL-terminated string; the NUL is consumed, not returned.
    pub fn c_string(&mut self, what: &'static str) -> Result<String, DatError> {
        // Strings in the header are short names; read in small steps so a missing NUL costs
        // no more than the rest of the file.
        let mut out = Vec::new();
        let mut chunk = [0u8; 64];
        loop {
            let left = self.source.len().saturating_sub(self.pos);
            if left == 0 {
                return Err(DatError::Unterminated {
                    what,
                    offset: self.pos,
                });
            }
            let take = left.min(chunk.len() as u64) as usize;
            self.source
                .read_exact_at(what, self.pos, &mut chunk[..take])?;
            if let Some(nul) = chunk[..take].iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..nul]);
                self.pos += nul as u64 + 1;
                return String::from_utf8(out).map_err(|_| DatError::NotUtf8(what));
            }
            out.extend_from_slice(&chunk[..take]);
            self.pos += take as u64;
        }
    }

    /// Fails unless the next bytes are exactly `tag` (which includes its NUL, if any).
    pub fn expect_tag(&mut self, tag: &'static [u8], what: &'static str) -> Result<(), DatError> {
        let at = self.pos;
        let found = self.bytes(what, tag.len() as u64)?;
        if found != tag {
            return Err(DatError::MissingTag { what, offset: at });
        }
        Ok(())
    }
}

/// The [`DatError`] inside an `io::Error` from one of this module's readers (they carry
/// one), or the `io::Error` itself as an error reading trace data.
pub fn dat_error(error: std::io::Error) -> DatError {
    error
        .downcast::<DatError>()
        .unwrap_or_else(|source| DatError::Io {
            path: PathBuf::from("(trace data)"),
            source,
        })
}

/// Reads numbers of the file's byte order out of an option's bytes.
#[derive(Debug)]
pub struct Slice<'b> {
    pub bytes: &'b [u8],
    pub pos: usize,
    pub endian: Endian,
}

impl<'b> Slice<'b> {
    pub fn new(bytes: &'b [u8], endian: Endian) -> Slice<'b> {
        Slice {
            bytes,
            pos: 0,
            endian,
        }
    }

    pub fn left(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let b = self.bytes.get(self.pos..self.pos.checked_add(N)?)?;
        self.pos += N;
        b.try_into().ok()
    }

    pub fn u32(&mut self) -> Option<u32> {
        let b = self.take()?;
        Some(match self.endian {
            Endian::Little => u32::from_le_bytes(b),
            Endian::Big => u32::from_be_bytes(b),
        })
    }

    pub fn u64(&mut self) -> Option<u64> {
        let b = self.take()?;
        Some(match self.endian {
            Endian::Little => u64::from_le_bytes(b),
            Endian::Big => u64::from_be_bytes(b),
        })
    }

    /// A NUL-terminated string (the NUL consumed); `None` without a NUL.
    pub fn c_string(&mut self) -> Option<String> {
        let rest = self.bytes.get(self.pos..)?;
        let nul = rest.iter().position(|&b| b == 0)?;
        self.pos += nul + 1;
        Some(String::from_utf8_lossy(&rest[..nul]).into_owned())
    }
}

/// The text of an option that holds a C string: up to the first NUL, lossily decoded.
pub fn option_text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}
