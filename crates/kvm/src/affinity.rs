//! CPU affinity of the calling thread, for `--pin`: which CPUs the measuring thread and the
//! vCPU threads may run on decides whether a wakeup crosses CPUs, and so how long it takes
//! (see docs/repeatability.md).

use std::io;

/// CPUs the calling thread may run on.
pub fn current_thread_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain bytes, so all zeros is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the kernel writes at most size_of::<cpu_set_t>()
    // bytes into the set we own.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the set's capacity.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// CPUs the process as a whole may run on, which a new thread gets back when it must not
/// inherit its creator's pin: the main thread's set when first asked, which is before any
/// [`PinGuard`] exists, since entering one asks first.
pub fn process_cpus() -> io::Result<Vec<usize>> {
    static FIRST: std::sync::OnceLock<Result<Vec<usize>, i32>> = std::sync::OnceLock::new();
    FIRST
        .get_or_init(|| main_thread_cpus().map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL)))
        .clone()
        .map_err(io::Error::from_raw_os_error)
}

fn main_thread_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: as in current_thread_cpus; the process id names its main thread.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: getpid cannot fail; the kernel writes at most the set's size into it.
    let rc = unsafe {
        libc::sched_getaffinity(
            libc::getpid(),
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the set's capacity.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Restricts the calling thread to `cpus`. Threads it creates afterwards inherit the set.
pub fn set_current_thread_cpus(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: as above, an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("CPU {cpu} is beyond the largest CPU number this build can name"),
            ));
        }
        // SAFETY: `cpu` was checked to be below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the set is fully initialised and sized.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// While alive, the calling thread runs only on the given CPUs; its previous set comes back
/// on drop.
pub struct PinGuard {
    previous: Vec<usize>,
}

impl PinGuard {
    pub fn enter(cpus: &[usize]) -> io::Result<PinGuard> {
        process_cpus()?;
        let previous = current_thread_cpus()?;
        set_current_thread_cpus(cpus)?;
        Ok(PinGuard { previous })
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        // The previous set was valid a moment ago; if CPUs went offline since, the thread
        // keeps its pin, which only costs placement freedom.
        let _ = set_current_thread_cpus(&self.previous);
    }
}

/// While alive, the calling thread runs SCHED_FIFO at priority 1; its policy is restored
/// on drop.
///
/// Enter it only once the vCPU threads exist: new threads inherit the policy, and FIFO
/// vCPUs would starve everything else on a small host. A thread that sleeps between short
/// polls cannot starve the vCPUs either way, and under overcommit (hundreds of spinning
/// vCPU threads on a few CPUs) it is the only way its wakeups are served in milliseconds
/// rather than once per round of the run queue, about a second with 512 vCPUs on 2 CPUs.
pub struct FifoGuard {
    previous_policy: libc::c_int,
    previous_param: libc::sched_param,
}

impl FifoGuard {
    /// Fails without root or CAP_SYS_NICE.
    pub fn enter() -> io::Result<FifoGuard> {
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
            return Err(io::Error::last_os_error());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_holds_while_the_guard_lives_and_is_undone_after() {
        let before = current_thread_cpus().unwrap();
        assert!(!before.is_empty());
        let cpu = *before.last().unwrap();
        {
            let _pin = PinGuard::enter(&[cpu]).unwrap();
            assert_eq!(current_thread_cpus().unwrap(), vec![cpu]);
        }
        assert_eq!(current_thread_cpus().unwrap(), before);
    }

    #[test]
    fn a_cpu_beyond_the_set_is_an_error_not_a_crash() {
        assert!(set_current_thread_cpus(&[1 << 20]).is_err());
    }
}
