//! What to call a lock: its type and mode from the contention flags, and a name from a
//! kallsyms data symbol or, failing that, from the stack that waits on it.

use vmscale_trace::views::contention_flags as flag;

/// The lock type a contention_begin's flags describe (include/trace/events/lock.h and the
/// call sites that pass them: queued spin/rwlocks, mutexes, rwsems, percpu-rwsems, rtmutex).
pub fn kind(flags: u32) -> &'static str {
    let rw = flags & (flag::READ | flag::WRITE) != 0;
    if flags & flag::PERCPU != 0 {
        "percpu-rwsem"
    } else if flags & flag::RT != 0 {
        "rt-mutex"
    } else if flags & flag::MUTEX != 0 {
        "mutex"
    } else if rw && flags & flag::SPIN != 0 {
        "rwlock"
    } else if rw {
        "rwsem"
    } else if flags & flag::SPIN != 0 {
        "spinlock"
    } else {
        "lock"
    }
}

/// "read", "write", or "" for exclusive locks.
pub fn mode(flags: u32) -> &'static str {
    if flags & flag::WRITE != 0 {
        "write"
    } else if flags & flag::READ != 0 {
        "read"
    } else {
        ""
    }
}

/// Frames that belong to tracing or to the lock implementation itself: they say how a task
/// waits, not what it was doing, so a name skips them.
fn is_plumbing(frame: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "trace_event_raw_event_",
        "perf_trace_",
        "__traceiter_",
        "trace_contention",
        "__pv_queued_spin_lock_slowpath",
        "native_queued_spin_lock_slowpath",
        "queued_spin_lock_slowpath",
        "queued_read_lock_slowpath",
        "queued_write_lock_slowpath",
        "__queued_",
        "_raw_",
        "do_raw_",
        "__mutex_lock",
        "mutex_lock",
        "__rt_mutex",
        "rt_mutex",
        "rwsem_down_",
        "__down_",
        "down_read",
        "down_write",
        "__percpu_down",
        "percpu_down",
        "rwbase_",
        "lock_acquire",
        "__lock_acquire",
        "osq_lock",
        "__rwsem_",
    ];
    PREFIXES.iter().any(|p| frame.starts_with(p))
}

/// The first frame outside tracing and lock plumbing: where the waiter wanted the lock.
/// Frames are symbolized `name+0xoff` strings, innermost first.
pub fn distinctive_frame(frames: &[String]) -> Option<&str> {
    frames
        .iter()
        .map(|f| f.split(['+', ' ']).next().unwrap_or(f))
        .find(|name| !is_plumbing(name) && !name.is_empty() && !name.starts_with("0x"))
}

/// "rwlock (write) in kvm_mmu_free_roots", "mutex in vfio_pci_core_disable", ...
pub fn stack_name(kind: &str, mode: &str, frame: Option<&str>) -> String {
    let mode = if mode.is_empty() {
        String::new()
    } else {
        format!(" ({mode})")
    };
    match frame {
        Some(frame) => format!("{kind}{mode} in {frame}"),
        None => format!("{kind}{mode}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_map_to_the_lock_types_that_pass_them() {
        assert_eq!(kind(flag::SPIN), "spinlock");
        assert_eq!(kind(flag::SPIN | flag::WRITE), "rwlock");
        assert_eq!(mode(flag::SPIN | flag::WRITE), "write");
        assert_eq!(kind(flag::READ), "rwsem");
        assert_eq!(kind(flag::MUTEX | flag::SPIN), "mutex");
        assert_eq!(kind(flag::MUTEX), "mutex");
        assert_eq!(kind(flag::PERCPU | flag::READ), "percpu-rwsem");
        assert_eq!(mode(flag::MUTEX), "");
    }

    #[test]
    fn the_name_skips_tracing_and_lock_frames() {
        // A real stack from this kernel (a contended runqueue lock in the scheduler).
        let frames: Vec<String> = [
            "trace_event_raw_event_contention_begin+0x8e",
            "__pv_queued_spin_lock_slowpath+0x2c5",
            "_raw_spin_lock+0x2a",
            "__schedule+0x1f0",
            "schedule+0x27",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(distinctive_frame(&frames), Some("__schedule"));
        assert_eq!(
            stack_name("spinlock", "", distinctive_frame(&frames)),
            "spinlock in __schedule"
        );
        assert_eq!(
            stack_name("rwlock", "write", Some("kvm_mmu_free_roots")),
            "rwlock (write) in kvm_mmu_free_roots"
        );
    }
}
