//! The operating-system facts and helpers several of vmscale's crates need, in one place:
//! the calling thread's id (what the trace calls a pid), the kernel's clock tick (the unit
//! of /proc's CPU times), reads bounded in size ([`bounded`]), what vmscale leaves on the
//! system while it runs and its removal on every exit ([`cleanup`]), outputs that never
//! destroy what is at their path ([`output`]), which process made something ([`owner`]),
//! and the host's memory and KVM ([`host`]). The crates that only need these (the tracer,
//! the KVM wrappers) do not depend on the run model.

pub mod bounded;
pub mod cleanup;
pub mod host;
pub mod output;
pub mod owner;

pub use owner::ProcessStamp;

/// CLOCK_MONOTONIC in nanoseconds: the clock every vmscale timestamp uses, and the one the
/// tracefs instance is set to (`trace_clock=mono`), so samples and kernel events share a
/// timeline.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's id, as the kernel's events name it (`common_pid`).
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// Clock ticks per second of /proc's CPU times (`USER_HZ`), 100 when the system does not
/// say.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

/// `ticks` of /proc's CPU times in nanoseconds.
pub fn ticks_to_ns(ticks: u64) -> u64 {
    ticks.saturating_mul(1_000_000_000) / clock_ticks_per_second()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_id_is_this_threads_and_ticks_convert() {
        // The test runs on a thread of its own: its id is one of the process's tasks, and
        // another thread's is another.
        let here = gettid();
        assert!(
            std::path::Path::new(&format!("/proc/self/task/{here}")).exists(),
            "{here} is not a task of this process"
        );
        let other = std::thread::spawn(gettid).join().unwrap();
        assert_ne!(other, here);
        let hz = clock_ticks_per_second();
        assert!(hz > 0);
        assert_eq!(ticks_to_ns(hz), 1_000_000_000);
    }
}
