//! vmscale's KVM engine: VMs with N vCPUs running tiny guests, driven through rust-vmm's
//! `kvm-ioctls`.
//!
//! - [`system`]: opening /dev/kvm and what the host's KVM can do.
//! - [`preflight`]: refusing impossible requests before anything is created.
//! - [`vm`]: the VM builder and the running VM (vCPU control, memslots, statistics).
//! - [`guest`]: the guest programs and the long-mode environment they run in.

pub mod affinity;
pub mod guest;
pub mod irqfd;
pub mod memory;
pub mod preflight;
pub mod stats_fd;
pub mod system;
mod vcpu;
pub mod vfio;
pub mod vm;

pub use guest::GuestProgram;
pub use system::KvmSystem;
pub use vm::{Gap, GapLog, TeardownTimes, Vm, VmConfig};

/// What can go wrong while building or driving a VM.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request cannot be satisfied on this host (too many vCPUs, too much memory, too
    /// few file descriptors). Nothing was created.
    #[error("{0}")]
    Impossible(String),
    /// KVM is missing or unusable here.
    #[error("{0}")]
    Unavailable(String),
    /// A KVM call failed.
    #[error("{what}: {source}")]
    Kvm {
        what: String,
        #[source]
        source: kvm_ioctls::Error,
    },
    #[error("{0}")]
    Setup(String),
    /// A vCPU did not answer a kick in time.
    #[error("{0}")]
    Stuck(String),
    /// A guest did something it was not written to do.
    #[error("{0}")]
    Guest(String),
    /// A signal asked vmscale to stop during a wait in setup ([`VmConfig::interrupt`]);
    /// whatever was built has been torn down.
    #[error("interrupted")]
    Interrupted,
}

impl Error {
    pub(crate) fn kvm(what: impl Into<String>) -> impl FnOnce(kvm_ioctls::Error) -> Error {
        let what = what.into();
        move |source| Error::Kvm { what, source }
    }
}

/// The host's time stamp counter: the clock the guests' stall logs use, so host marks taken
/// with it fall on the same timeline.
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no memory effects; every x86-64 CPU implements it.
    unsafe { core::arch::x86_64::_rdtsc() }
}
