//! Running the measuring thread SCHED_FIFO, to separate KVM's own cost from waiting for a
//! CPU behind spinning vCPUs.

use crate::Error;

/// While alive, the calling thread runs SCHED_FIFO at priority 1; restored on drop (see
/// [`vmscale_kvm::affinity::FifoGuard`]).
///
/// Created only after the vCPU threads exist, because new threads inherit the policy and
/// FIFO vCPUs would starve everything else on a small host.
pub struct FifoGuard(#[allow(dead_code)] vmscale_kvm::affinity::FifoGuard);

impl FifoGuard {
    pub fn enter() -> Result<FifoGuard, Error> {
        vmscale_kvm::affinity::FifoGuard::enter()
            .map(FifoGuard)
            .map_err(|e| {
                Error::Usage(format!(
                    "--fifo: cannot switch to SCHED_FIFO: {e} (needs root or CAP_SYS_NICE)"
                ))
            })
    }
}
