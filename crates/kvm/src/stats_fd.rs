//! KVM's binary statistics (KVM_GET_STATS_FD), for VMs and vCPUs.
//!
//! The fd holds a header, a table of descriptors (flags, exponent, size, offset, name) and a
//! data block of u64 values; see Documentation/virt/kvm/api.rst, "KVM_GET_STATS_FD". The
//! descriptors are read once; each snapshot is a single `pread` of the data block, which
//! takes no vCPU lock and so never waits for a running vCPU. (Obtaining a vCPU's fd does take
//! the vCPU lock: it must be opened before the vCPU first enters KVM_RUN.)

use std::collections::BTreeMap;
use std::fs::File;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

use kvm_bindings::{
    kvm_stats_desc, kvm_stats_header, KVMIO, KVM_STATS_TYPE_CUMULATIVE, KVM_STATS_TYPE_INSTANT,
    KVM_STATS_TYPE_MASK, KVM_STATS_TYPE_PEAK,
};
use vmm_sys_util::ioctl::ioctl;
use vmm_sys_util::ioctl_io_nr;

// kvm-ioctls does not wrap this ioctl; the number is built from the kernel's definition
// (_IO(KVMIO, 0xce)) with vmm-sys-util's macro rather than written out.
ioctl_io_nr!(KVM_GET_STATS_FD, KVMIO, 0xce);

/// Whether a statistic counts events (a delta is meaningful) or shows a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatKind {
    Cumulative,
    Instant,
    Peak,
}

#[derive(Debug, Clone)]
struct Descriptor {
    name: String,
    kind: StatKind,
    offset: u64,
}

/// An open statistics fd with its parsed descriptors (scalar statistics only; histograms
/// are skipped).
pub struct StatsReader {
    file: File,
    data_offset: u64,
    data_len: usize,
    descriptors: Vec<Descriptor>,
}

/// One snapshot: statistic name -> value.
pub type StatsSnapshot = BTreeMap<String, u64>;

impl StatsReader {
    /// Opens the statistics of the VM or vCPU behind `owner`.
    pub fn open(owner: &impl AsRawFd) -> std::io::Result<StatsReader> {
        // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new fd or -1; the owner
        // fd is a valid KVM VM or vCPU fd borrowed for the call.
        let fd = unsafe { ioctl(owner, KVM_GET_STATS_FD()) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this fd to us and nothing else owns it.
        let file = unsafe { File::from_raw_fd(fd) };
        Self::parse(file)
    }

    fn parse(file: File) -> std::io::Result<StatsReader> {
        let invalid = |what: &str| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("KVM stats fd: {what}"),
            )
        };
        let mut header_bytes = [0u8; size_of::<kvm_stats_header>()];
        file.read_exact_at(&mut header_bytes, 0)?;
        let word =
            |i: usize| u32::from_ne_bytes(header_bytes[i * 4..i * 4 + 4].try_into().unwrap());
        let (name_size, num_desc, desc_offset, data_offset) = (word(1), word(2), word(4), word(5));
        // Sanity bounds: the kernel has a few hundred statistics with names under 64 bytes.
        if name_size > 4096 || num_desc > 100_000 {
            return Err(invalid("implausible header"));
        }
        let desc_size = size_of::<kvm_stats_desc>() + name_size as usize;
        let mut table = vec![0u8; desc_size * num_desc as usize];
        file.read_exact_at(&mut table, desc_offset as u64)?;

        let mut descriptors = Vec::new();
        let mut data_len = 0usize;
        for raw in table.chunks_exact(desc_size) {
            let flags = u32::from_ne_bytes(raw[0..4].try_into().unwrap());
            let size = u16::from_ne_bytes(raw[6..8].try_into().unwrap());
            let offset = u32::from_ne_bytes(raw[8..12].try_into().unwrap());
            let name_bytes = &raw[size_of::<kvm_stats_desc>()..];
            let name_len = name_bytes
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(name_bytes.len());
            let name = String::from_utf8_lossy(&name_bytes[..name_len]).into_owned();
            data_len = data_len.max(offset as usize + size as usize * 8);
            let kind = match flags & KVM_STATS_TYPE_MASK {
                KVM_STATS_TYPE_CUMULATIVE => StatKind::Cumulative,
                KVM_STATS_TYPE_INSTANT => StatKind::Instant,
                KVM_STATS_TYPE_PEAK => StatKind::Peak,
                _ => continue, // histograms
            };
            if size != 1 {
                continue;
            }
            descriptors.push(Descriptor {
                name,
                kind,
                offset: offset as u64,
            });
        }
        if data_len > 1 << 20 {
            return Err(invalid("implausible data size"));
        }
        Ok(StatsReader {
            file,
            data_offset: data_offset as u64,
            data_len,
            descriptors,
        })
    }

    /// Reads every scalar statistic now.
    pub fn snapshot(&self) -> std::io::Result<StatsSnapshot> {
        let mut data = vec![0u8; self.data_len];
        self.file.read_exact_at(&mut data, self.data_offset)?;
        Ok(self
            .descriptors
            .iter()
            .map(|d| {
                let at = d.offset as usize;
                (
                    d.name.clone(),
                    u64::from_ne_bytes(data[at..at + 8].try_into().unwrap()),
                )
            })
            .collect())
    }

    /// The names of the cumulative statistics, whose deltas count events in an interval.
    pub fn cumulative_names(&self) -> impl Iterator<Item = &str> {
        self.descriptors
            .iter()
            .filter(|d| d.kind == StatKind::Cumulative)
            .map(|d| d.name.as_str())
    }
}

/// `after - before` for every cumulative statistic that changed.
pub fn cumulative_delta<'a>(
    names: impl Iterator<Item = &'a str>,
    before: &StatsSnapshot,
    after: &StatsSnapshot,
) -> BTreeMap<String, u64> {
    names
        .filter_map(|name| {
            let delta = after.get(name)?.checked_sub(*before.get(name)?)?;
            (delta > 0).then(|| (name.to_string(), delta))
        })
        .collect()
}
