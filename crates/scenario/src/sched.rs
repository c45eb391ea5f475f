//! Running the measuring thread SCHED_FIFO, to separate KVM's own cost from waiting for a
//! CPU behind spinning vCPUs.

use crate::Error;

/// While alive, the calling thread runs SCHED_FIFO at priority 1; restored on drop.
///
/// Created only after the vCPU threads exist, because new threads inherit the policy and
/// FIFO vCPUs would starve everything else on a small host.
pub struct FifoGuard {
    previous_policy: libc::c_int,
    previous_param: libc::sched_param,
}

impl FifoGuard {
    pub fn enter() -> Result<FifoGuard, Error> {
        // SAFETY: sched_getscheduler / sched_getparam on the calling thread (pid 0) only
        // read its scheduling state into the struct we own.
        let (previous_policy, previous_param) = unsafe {
            let mut param: libc::sched_param = std::mem::zeroed();
            libc::sched_getparam(0, &mut param);
            (libc::sched_getscheduler(0), param)
        };
        let fifo = libc::sched_param { sched_priority: 1 };
        // SAFETY: sets the calling thread's policy from a valid sched_param.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &fifo) } != 0 {
            return Err(Error::Usage(format!(
                "--fifo: cannot switch to SCHED_FIFO: {} (needs root or CAP_SYS_NICE)",
                std::io::Error::last_os_error()
            )));
        }
        Ok(FifoGuard {
            previous_policy,
            previous_param,
        })
    }
}

impl Drop for FifoGuard {
    fn drop(&mut self) {
        // SAFETY: restores the policy read in `enter` on the same thread.
        unsafe { libc::sched_setscheduler(0, self.previous_policy, &self.previous_param) };
    }
}
