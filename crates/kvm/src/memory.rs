//! Anonymous host mappings that back guest memory.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// One anonymous, private mapping; unmapped on drop.
///
/// Pages are not touched up front (MAP_NORESERVE): a 2 MiB scratch slot that the guest
/// never reads costs the host nothing until something writes to it.
pub struct HostMapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving the owner to another
// thread moves nothing the kernel tracks per thread.
unsafe impl Send for HostMapping {}
// SAFETY: shared access goes only through `read_u64` (atomic loads) and `write`, which takes
// `&mut self`, so no data race can be expressed through a shared reference.
unsafe impl Sync for HostMapping {}

impl HostMapping {
    pub fn new(len: usize) -> io::Result<HostMapping> {
        // SAFETY: a fresh anonymous mapping with no address hint aliases nothing; the result
        // is checked for MAP_FAILED before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(HostMapping { base, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Host virtual address, as KVM_SET_USER_MEMORY_REGION wants it.
    pub fn host_address(&self) -> u64 {
        self.base.as_ptr() as u64
    }

    /// Copies `bytes` to `offset`. Panics on an out-of-range write: layouts are computed by
    /// this crate, so that would be a bug here, not bad input.
    pub fn write(&mut self, offset: u64, bytes: &[u8]) {
        let offset = offset as usize;
        assert!(offset
            .checked_add(bytes.len())
            .is_some_and(|end| end <= self.len));
        // SAFETY: the range was bounds-checked above and `&mut self` excludes other host
        // writers; the guest is not running while the boot image is written.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.base.as_ptr().add(offset),
                bytes.len(),
            )
        };
    }

    /// Reads a u64 that a running guest may be writing at the same time.
    pub fn read_u64(&self, offset: u64) -> u64 {
        self.atomic_u64(offset).load(Ordering::Acquire)
    }

    /// Stores a u64 that a running guest reads.
    pub fn store_u64(&self, offset: u64, value: u64) {
        self.atomic_u64(offset).store(value, Ordering::Release)
    }

    fn atomic_u64(&self, offset: u64) -> &AtomicU64 {
        let offset = offset as usize;
        assert!(offset.is_multiple_of(8) && offset + 8 <= self.len);
        // SAFETY: in bounds and 8-byte aligned (mmap returns page-aligned memory); the guest
        // accesses these words with single aligned 8-byte instructions, which x86 performs
        // atomically, so an atomic view races with nothing. The reference lives no longer
        // than `&self`, which keeps the mapping alive.
        unsafe { &*(self.base.as_ptr().add(offset) as *const AtomicU64) }
    }
}

impl Drop for HostMapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range mapped in `new`; no reference into it outlives
        // `self`. KVM slots using it are deleted (VM closed) before the owner drops it.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_atomic_reads_agree() {
        let mut m = HostMapping::new(1 << 20).unwrap();
        m.write(4096, &0xdead_beef_u64.to_le_bytes());
        assert_eq!(m.read_u64(4096), 0xdead_beef);
        m.store_u64(8, 7);
        assert_eq!(m.read_u64(8), 7);
        assert_eq!(m.read_u64(16), 0, "anonymous memory starts zeroed");
    }

    #[test]
    #[should_panic]
    fn out_of_range_write_is_refused() {
        let mut m = HostMapping::new(4096).unwrap();
        m.write(4090, &[0u8; 8]);
    }
}
