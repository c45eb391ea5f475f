//! A perf event's mmap'd ring buffer, read from user space.
//!
//! The mapping is one metadata page (`perf_event_mmap_page`) followed by `2^n` data pages.
//! The kernel writes records at `data_head` and never past our `data_tail`; we read from
//! `data_tail` up to `data_head` and then advance `data_tail`, which hands the space back.
//! The ordering is the one perf_event_open(2) prescribes: `data_head` is read with acquire
//! ordering (the records before it are visible once it is), and `data_tail` is written with
//! release ordering (our reads of the records are done before the kernel may overwrite
//! them). Records may wrap around the end of the data area; the bytes are copied out as
//! one or two slices and the stream of records stays intact.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings::perf_event_mmap_page;

use crate::format::{self, Header, HEADER_LEN};

/// What one drain found in the bytes it copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub bytes: u64,
    pub records: u64,
    pub samples: u64,
    /// Sum of PERF_RECORD_LOST's counts.
    pub lost: u64,
    pub throttled: u64,
}

impl Counts {
    pub fn add(&mut self, other: Counts) {
        self.bytes += other.bytes;
        self.records += other.records;
        self.samples += other.samples;
        self.lost += other.lost;
        self.throttled += other.throttled;
    }
}

/// One event's ring buffer, mapped read-write (writing `data_tail` tells the kernel what
/// was consumed, so it never overwrites unread records: a full buffer loses new records
/// and says so with PERF_RECORD_LOST).
pub struct Ring {
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    /// Our read position: bytes consumed since the buffer was created.
    tail: u64,
}

// SAFETY: the mapping is owned by this struct alone (no aliasing Ring exists for it) and
// the kernel side is synchronised through the atomic head/tail protocol; moving the owner
// to the reader thread is sound.
unsafe impl Send for Ring {}

impl Ring {
    /// Maps `data_pages` (a power of two) data pages plus the metadata page of `fd`.
    pub fn map(fd: BorrowedFd<'_>, data_pages: usize) -> io::Result<Ring> {
        assert!(data_pages.is_power_of_two(), "perf needs 2^n data pages");
        let page = page_size();
        let map_len = page * (1 + data_pages);
        // SAFETY: a fresh shared mapping of a perf event fd, at an address the kernel
        // chooses; nothing else refers to that range. Failure is checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut ring = Ring {
            base: base.cast(),
            map_len,
            data_offset: page,
            data_size: page * data_pages,
            tail: 0,
        };
        // Kernels since 4.1 say where the data area is; older ones leave these 0 and
        // use the layout assumed above.
        let meta = ring.meta();
        // SAFETY: `meta` points at the metadata page we just mapped, which lives as long
        // as `ring`; data_offset and data_size are written once by the kernel at mmap
        // time, before we can see the mapping.
        let (offset, size) = unsafe {
            (
                std::ptr::addr_of!((*meta).data_offset).read_volatile(),
                std::ptr::addr_of!((*meta).data_size).read_volatile(),
            )
        };
        if size != 0 && offset as usize + size as usize <= map_len {
            ring.data_offset = offset as usize;
            ring.data_size = size as usize;
        }
        ring.tail = ring.tail_atomic().load(Ordering::Acquire);
        Ok(ring)
    }

    fn meta(&self) -> *mut perf_event_mmap_page {
        self.base.cast()
    }

    fn head_atomic(&self) -> &AtomicU64 {
        // SAFETY: data_head is an 8-byte-aligned u64 inside the metadata page, which
        // lives as long as `self`; the kernel updates it concurrently, which is exactly
        // what an atomic view is for (AtomicU64 has u64's size and alignment).
        unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*self.meta()).data_head)) }
    }

    fn tail_atomic(&self) -> &AtomicU64 {
        // SAFETY: as for data_head; data_tail is ours to write, the kernel only reads it.
        unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*self.meta()).data_tail)) }
    }

    /// The data area as a byte slice.
    fn data(&self) -> &[u8] {
        // SAFETY: [data_offset, data_offset + data_size) lies inside the mapping (checked
        // in `map`). The kernel writes only between data_head and our data_tail, so the
        // bytes we read, below data_head (acquired) and at or past data_tail, are not
        // being written while we read them.
        unsafe { std::slice::from_raw_parts(self.base.add(self.data_offset), self.data_size) }
    }

    /// Copies every complete record now in the buffer to `out` (one or two slices, record
    /// boundaries kept) and hands the space back to the kernel. Returns what the copied
    /// records were. A header whose size is below 8 or past `data_head` means the stream
    /// cannot be followed: everything up to head is then copied as is and the caller's
    /// reader will count the damage.
    pub fn drain(&mut self, out: &mut impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<Counts> {
        let head = self.head_atomic().load(Ordering::Acquire);
        let mut counts = Counts::default();
        if head <= self.tail {
            return Ok(counts);
        }
        let size = self.data_size as u64;
        // The kernel never gets more than a buffer ahead of our tail.
        let available = (head - self.tail).min(size);
        let start = self.tail;
        let end = start + available;
        // Walk the headers to count what is there.
        let mut at = start;
        let mut header = [0u8; HEADER_LEN];
        let mut body = [0u8; 16];
        while at + HEADER_LEN as u64 <= end {
            self.copy_out(at, &mut header);
            let Some(h) = Header::parse(&header) else {
                break;
            };
            if (h.size as usize) < HEADER_LEN || at + h.size as u64 > end {
                break;
            }
            counts.records += 1;
            match h.kind {
                format::RECORD_SAMPLE => counts.samples += 1,
                format::RECORD_LOST if h.size as usize >= HEADER_LEN + 16 => {
                    self.copy_out(at + HEADER_LEN as u64, &mut body);
                    counts.lost += u64::from_ne_bytes(body[8..16].try_into().expect("8 bytes"));
                }
                format::RECORD_THROTTLE => counts.throttled += 1,
                _ => {}
            }
            at += h.size as u64;
        }
        // Copy [start, end) out: one slice, or two where it wraps.
        let data = self.data();
        let from = (start % size) as usize;
        let len = available as usize;
        if from + len <= data.len() {
            out(&data[from..from + len])?;
        } else {
            out(&data[from..])?;
            out(&data[..len - (data.len() - from)])?;
        }
        counts.bytes = available;
        self.tail = end;
        self.tail_atomic().store(self.tail, Ordering::Release);
        Ok(counts)
    }

    /// Copies `buf.len()` bytes of the stream at position `at`, wrapping at the end.
    fn copy_out(&self, at: u64, buf: &mut [u8]) {
        let data = self.data();
        let from = (at % data.len() as u64) as usize;
        for (i, b) in buf.iter_mut().enumerate() {
            *b = data[(from + i) % data.len()];
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `map` created; no slice into it outlives
        // `self` (every borrow of `data()` ends within a method call).
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}

pub fn page_size() -> usize {
    // SAFETY: sysconf only reads a system value.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}
