//! Refusing impossible requests before anything is created.
//!
//! A request that cannot succeed (more vCPUs than KVM allows, more memory than the host has,
//! more file descriptors than the process may open) should fail in a millisecond with one
//! line saying why, not half-way through building a VM with a confusing errno.

use vmscale_sys::host::host_memory;

use crate::Error;

/// File descriptors one VM needs per vCPU: the vCPU fd and its statistics fd.
pub const FDS_PER_VCPU: u64 = 2;
/// Everything else: /dev/kvm, the VM, its statistics, stdio, tracing and report files.
pub const FDS_BASE: u64 = 64;

/// Address space each vCPU thread takes besides guest memory: its 256 KiB stack and guard.
pub const VCPU_THREAD_BYTES: u64 = 260 << 10;
/// Address space vmscale takes itself (code, libraries, heap, a trace reader per CPU), at
/// least: an address-space limit below this plus a VM's needs cannot run it.
pub const PROCESS_BYTES: u64 = 48 << 20;

/// Current (soft, hard) RLIMIT_NOFILE.
pub fn fd_limits() -> (u64, u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (limit.rlim_cur, limit.rlim_max)
}

/// Raises the soft fd limit to the hard one (always permitted) when `needed` exceeds it.
/// Returns the soft limit in force afterwards.
pub fn raise_fd_limit_for(needed: u64) -> u64 {
    let (soft, hard) = fd_limits();
    if needed <= soft || soft >= hard {
        return soft;
    }
    let limit = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct we pass; raising soft up to hard needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0 {
        hard
    } else {
        soft
    }
}

/// Checks a VM request against what this host allows. `max_vcpus` is KVM_CAP_MAX_VCPUS.
pub fn check_vm_request(vcpus: usize, guest_bytes: u64, max_vcpus: usize) -> Result<(), Error> {
    if vcpus == 0 {
        return Err(Error::Impossible(
            "a VM needs at least 1 vCPU (got 0)".into(),
        ));
    }
    if vcpus > max_vcpus {
        return Err(Error::Impossible(format!(
            "{vcpus} vCPUs requested but this host's KVM allows at most {max_vcpus} per VM (KVM_CAP_MAX_VCPUS)"
        )));
    }
    if let Some(memory) = host_memory() {
        if guest_bytes > memory.available_bytes {
            return Err(Error::Impossible(format!(
                "the VM needs {} MiB of guest memory but only {} MiB is available on this host (of {} MiB)",
                guest_bytes >> 20,
                memory.available_bytes >> 20,
                memory.total_bytes >> 20
            )));
        }
    }
    if let Some(limit) = vmscale_sys::cleanup::address_space_limit() {
        let needed = guest_bytes
            .saturating_add(VCPU_THREAD_BYTES * vcpus as u64)
            .saturating_add(PROCESS_BYTES);
        if needed > limit {
            return Err(Error::Impossible(format!(
                "{vcpus} vCPUs with {} MiB of guest memory need about {} MiB of address space but the address-space limit (`ulimit -v`) is {} MiB (raise it or ask for less)",
                guest_bytes >> 20,
                needed >> 20,
                limit >> 20
            )));
        }
    }
    let needed_fds = FDS_BASE + FDS_PER_VCPU * vcpus as u64;
    let soft = raise_fd_limit_for(needed_fds);
    if needed_fds > soft {
        return Err(Error::Impossible(format!(
            "{vcpus} vCPUs need about {needed_fds} file descriptors but RLIMIT_NOFILE is {soft} and cannot be raised (raise it with `ulimit -n` or ask for fewer vCPUs)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_vcpus_is_refused() {
        let e = check_vm_request(0, 1 << 20, 1024).unwrap_err();
        assert!(matches!(e, Error::Impossible(_)));
    }

    #[test]
    fn more_vcpus_than_kvm_allows_is_refused_with_the_limit_named() {
        let e = check_vm_request(2000, 1 << 20, 1024).unwrap_err();
        assert!(e.to_string().contains("at most 1024"), "{e}");
    }

    #[test]
    fn more_memory_than_the_host_has_is_refused() {
        let e = check_vm_request(1, u64::MAX / 2, 1024).unwrap_err();
        assert!(e.to_string().contains("MiB is available"), "{e}");
    }

    #[test]
    fn a_modest_request_passes() {
        check_vm_request(4, 8 << 20, 1024).unwrap();
    }
}
