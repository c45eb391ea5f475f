//! A run's kernel trace as a trace-cmd .dat file.
//!
//! The file format, read and written, is the trace crate's; this is the choice an export
//! offers on top of it: which compressions a reader of the file can open.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use vmscale_trace::dat::write::{DatWriteOptions, Written};
use vmscale_trace::dat::Algorithm;

pub use vmscale_trace::dat::write::DatWriteError;

/// How an exported .dat file is compressed. zlib, trace-cmd's other codec, is left out:
/// Debian's trace-cmd (and so KernelShark) cannot read it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Compression {
    /// Every trace-cmd 3 reads it.
    #[default]
    None,
    Zstd,
}

impl Compression {
    pub const ALL: [Compression; 2] = [Compression::None, Compression::Zstd];

    /// The name [`Compression::from_str`] accepts.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd => "zstd",
        }
    }

    fn algorithm(self) -> Option<Algorithm> {
        match self {
            Compression::None => None,
            Compression::Zstd => Some(Algorithm::Zstd),
        }
    }
}

/// A compression name that is not one of [`Compression::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCompression(pub String);

impl fmt::Display for UnknownCompression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Compression::ALL.iter().map(|c| c.name()).collect();
        write!(f, "{}: use {}", self.0, names.join(" or "))
    }
}

impl std::error::Error for UnknownCompression {}

impl FromStr for Compression {
    type Err = UnknownCompression;

    fn from_str(name: &str) -> Result<Compression, UnknownCompression> {
        Compression::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| UnknownCompression(name.to_string()))
    }
}

/// What was written: bytes, events, CPUs, pages, task names and pages copied damaged.
pub type DatSummary = Written;

/// The kernel trace in `trace_dir` (a run's `trace/`) as a .dat file at `out`.
pub fn write_dat(
    trace_dir: &Path,
    out: &Path,
    compression: Compression,
) -> Result<DatSummary, DatWriteError> {
    let options = DatWriteOptions {
        compression: compression.algorithm(),
    };
    vmscale_trace::dat::write::write_dat(trace_dir, out, &options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressions_parse_by_name_and_zlib_is_refused() {
        assert_eq!("none".parse(), Ok(Compression::None));
        assert_eq!("zstd".parse(), Ok(Compression::Zstd));
        let refused = "zlib".parse::<Compression>().unwrap_err();
        assert_eq!(refused.to_string(), "zlib: use none or zstd");
    }
}
