//! VMs for irqfd registration storms: an in-kernel irqchip and no vCPUs, and threads with
//! file descriptor tables of their own.
//!
//! RLIMIT_NOFILE caps the fds of one *table*, not of a process: a thread that calls
//! unshare(CLONE_FILES) gets a private copy of the process's table and may fill it up to the
//! limit again. That is how one process holds more eventfds (and so irqfds) than the limit
//! when the hard limit cannot be raised.

use std::os::fd::{AsRawFd, RawFd};

use kvm_ioctls::VmFd;
use vmm_sys_util::eventfd::EventFd;

use crate::system::KvmSystem;
use crate::Error;

/// GSIs the default routing of the in-kernel PIC + IOAPIC covers.
pub const IRQCHIP_GSIS: u32 = 24;

/// A VM with an in-kernel irqchip, the only thing KVM_IRQFD needs.
pub struct IrqchipVm {
    vm_fd: VmFd,
}

impl IrqchipVm {
    pub fn create(system: &KvmSystem) -> Result<IrqchipVm, Error> {
        let vm_fd = system
            .kvm
            .create_vm()
            .map_err(Error::kvm("KVM_CREATE_VM"))?;
        vm_fd
            .create_irq_chip()
            .map_err(Error::kvm("KVM_CREATE_IRQCHIP"))?;
        Ok(IrqchipVm { vm_fd })
    }

    /// Binds `eventfd` to `gsi` (KVM_IRQFD). The eventfd must be open in the calling
    /// thread's fd table: the kernel resolves the number there.
    pub fn assign(&self, eventfd: &EventFd, gsi: u32) -> Result<(), Error> {
        self.vm_fd
            .register_irqfd(eventfd, gsi)
            .map_err(Error::kvm("KVM_IRQFD (assign)"))
    }

    /// Unbinds it again (KVM_IRQFD with KVM_IRQFD_FLAG_DEASSIGN).
    pub fn deassign(&self, eventfd: &EventFd, gsi: u32) -> Result<(), Error> {
        self.vm_fd
            .unregister_irqfd(eventfd, gsi)
            .map_err(Error::kvm("KVM_IRQFD (deassign)"))
    }

    /// The VM's fd number, which threads with a private fd table inherited a copy of.
    pub fn raw_fd(&self) -> RawFd {
        self.vm_fd.as_raw_fd()
    }
}

/// Gives the calling thread a private copy of the process's fd table. Every fd it opens from
/// now on lives only there and is closed when the thread exits; fds it inherited are copies
/// (closing one here leaves the original open).
pub fn private_fd_table() -> Result<(), Error> {
    // SAFETY: unshare(CLONE_FILES) only replaces this thread's fd table with a copy; no
    // memory is touched and the Rust objects owning fds keep valid numbers in both tables.
    if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
        return Err(Error::Setup(format!(
            "unshare(CLONE_FILES): {}",
            std::io::Error::last_os_error()
        )));
    }
    vmscale_sys::cleanup::note_private_fd_table();
    Ok(())
}

/// Closes this thread's copy of an inherited fd, after [`private_fd_table`]. Used so that a
/// VM is really destroyed when its owner closes it, instead of living on through copies.
///
/// # Safety
/// The caller must have called [`private_fd_table`] on this thread and must not use `fd`
/// on this thread afterwards: the number is only closed here, its owner elsewhere keeps its
/// own copy.
pub unsafe fn close_inherited(fd: RawFd) {
    // SAFETY: per the contract, `fd` is a copy in this thread's private table that nothing
    // on this thread owns or uses any more.
    unsafe { libc::close(fd) };
}

/// Closes this thread's copies of every inherited fd from 3 up except `keep`, after
/// [`private_fd_table`]: the thread then holds nothing of the process's (a tracefs
/// instance's open files, which keep it from being removed, above all) beyond what it uses,
/// however long its own exit takes.
///
/// # Safety
/// The caller must have called [`private_fd_table`] on this thread, and must not use any
/// fd it inherited on this thread afterwards except those in `keep`.
pub unsafe fn close_inherited_except(keep: &[RawFd]) {
    // Allocates nothing: until the copies are closed, this thread holds the process's
    // files, and an allocation that fails here would park it (the exit after an allocation
    // failure stops every other thread at its next allocation) with a tracefs instance's
    // files open, so the exit could not remove the instance.
    let mut from = 3u32;
    loop {
        let next = keep
            .iter()
            .filter(|&&fd| fd >= 0 && fd as u32 >= from)
            .map(|&fd| fd as u32)
            .min();
        let end = next.unwrap_or(u32::MAX);
        if end > from {
            // SAFETY: per the contract, every fd in from..end is an inherited copy in this
            // thread's private table that nothing on this thread uses.
            unsafe { libc::syscall(libc::SYS_close_range, from, end - 1, 0u32) };
        }
        match next {
            Some(fd) if fd < u32::MAX => from = fd + 1,
            _ => return,
        }
    }
}
