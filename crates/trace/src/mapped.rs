//! Trace data decoded where it lies in the page cache: a read-only mapping of a file, and
//! the ranges of it that one CPU's pages take.
//!
//! Reading a multi-gigabyte trace through `read(2)` copies every byte once more than
//! decoding needs; a mapping hands the decoder the page cache itself. Memory stays flat
//! in the trace's size because each range is given back ([`MappedRange::release`]) once
//! its events have been handed out: its page-table entries go, the file's pages stay in
//! the page cache for whoever reads them next.
//!
//! A mapping is only made of a regular file opened read-only. If another process shrinks
//! the file while it is mapped, reading past the new end raises SIGBUS. vmscale decodes a
//! trace once its writer is done with it (the recorder stops before the analysis starts;
//! `report` reads finished files), and that is the one condition this relies on.

use std::fs::File;
use std::sync::Arc;

use memmap2::{Mmap, MmapOptions, UncheckedAdvice};

/// A whole file mapped read-only.
#[derive(Debug)]
pub struct MappedFile {
    map: Mmap,
}

impl MappedFile {
    /// Maps `file` (at most `len` bytes of it, the length it had when it was checked).
    /// `None` when it cannot be mapped (an empty file, a file system without mmap): the
    /// caller then reads it instead.
    pub fn map(file: &File, len: u64) -> Option<Arc<MappedFile>> {
        let len = usize::try_from(len).ok().filter(|&len| len > 0)?;
        // SAFETY: the mapping is read-only, so nothing in this process writes through it.
        // Its bytes stay valid as long as no other process truncates the file, which is
        // the documented condition of this module (see above).
        let map = unsafe { MmapOptions::new().len(len).map(file) }.ok()?;
        // Each CPU's pages are read front to back; the kernel reads ahead accordingly.
        // Only a hint: a kernel that refuses it still serves every read.
        let _ = map.advise(memmap2::Advice::Sequential);
        Some(Arc::new(MappedFile { map }))
    }

    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// `start..start + len` of the file as a range, if the file holds all of it.
    pub fn range(self: &Arc<Self>, start: u64, len: u64) -> Option<MappedRange> {
        let start = usize::try_from(start).ok()?;
        let len = usize::try_from(len).ok()?;
        let end = start.checked_add(len)?;
        (end <= self.map.len()).then(|| MappedRange {
            file: Arc::clone(self),
            start,
            len,
        })
    }
}

/// Part of a [`MappedFile`], shared by whoever decodes from it.
#[derive(Debug, Clone)]
pub struct MappedRange {
    file: Arc<MappedFile>,
    start: usize,
    len: usize,
}

impl MappedRange {
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        // In range: checked when the range was made.
        &self.file.map[self.start..self.start + self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `start..end` of this range (offsets into it), or `None` when that is not inside it.
    pub fn sub(&self, start: usize, end: usize) -> Option<MappedRange> {
        (start <= end && end <= self.len).then(|| MappedRange {
            file: Arc::clone(&self.file),
            start: self.start + start,
            len: end - start,
        })
    }

    /// Maps the whole range in one call, ahead of reading it: faulting it in page by page
    /// as the decoder touches it costs more (a trap per 64 KiB of fault-around, and on a
    /// virtualized host each trap is an exit to the hypervisor) than the decode of those
    /// pages itself. Only a hint: a kernel before 5.14 refuses it and the reads fault in.
    pub fn populate(&self) {
        if self.len == 0 {
            return;
        }
        let _ = self
            .file
            .map
            .advise_range(memmap2::Advice::PopulateRead, self.start, self.len);
    }

    /// Gives back the memory that maps this range, once nothing will read it soon: what
    /// keeps a whole-trace decode's resident memory flat. A later read still sees the
    /// same bytes, fetched from the page cache again.
    pub fn release(&self) {
        if self.len == 0 {
            return;
        }
        // SAFETY: MADV_DONTNEED on a read-only file mapping drops its page-table entries; the next access faults the file's unchanged pages back in, so every
        // slice into the mapping keeps reading the same bytes. memmap2 widens the range
        // to whole pages, which only costs a neighbour a fault.
        let _ = unsafe {
            self.file
                .map
                .unchecked_advise_range(UncheckedAdvice::DontNeed, self.start, self.len)
        };
    }
}
