//! What to call a lock: its type and mode from the contention flags, and a name from a
//! kallsyms data symbol or, failing that, from the stack that waits on it.

pub mod known;

pub use known::WaitContext;
use vmscale_run::findings::LockKind;
use vmscale_trace::decode::views::contention_flags as flag;

/// The lock type a contention_begin's flags describe (include/trace/events/lock.h and the
/// call sites that pass them: queued spin/rwlocks, mutexes, rwsems, percpu-rwsems, rtmutex).
pub fn kind(flags: u32) -> LockKind {
    let rw = flags & (flag::READ | flag::WRITE) != 0;
    if flags & flag::PERCPU != 0 {
        LockKind::PercpuRwsem
    } else if flags & flag::RT != 0 {
        LockKind::RtMutex
    } else if flags & flag::MUTEX != 0 {
        LockKind::Mutex
    } else if rw && flags & flag::SPIN != 0 {
        LockKind::Rwlock
    } else if rw {
        LockKind::Rwsem
    } else if flags & flag::SPIN != 0 {
        LockKind::Spinlock
    } else {
        LockKind::Unknown
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
    let names: Vec<&str> = frames.iter().map(|f| frame_name(f)).collect();
    taker_index(&names).map(|at| frame_name(&frames[at]))
}

/// The kernel's own name for a lock of `kind` waited on from `frames` (symbolized,
/// innermost first) in `context`, when [`known::KNOWN_LOCKS`] names it; with the place
/// to show beside it (the taker, or its caller for generic helpers).
pub fn well_known(
    kind: LockKind,
    frames: &[String],
    context: WaitContext,
) -> Option<(&'static str, &str)> {
    let names: Vec<&str> = frames.iter().map(|f| frame_name(f)).collect();
    let at = taker_index(&names)?;
    let (taker, primitive, caller) = (
        names[at],
        at.checked_sub(1).map(|i| names[i]),
        names.get(at + 1).copied(),
    );
    let found = known::find(kind, taker, primitive, caller, context)?;
    let shown = if found.shown_at_caller {
        caller.unwrap_or(taker)
    } else {
        taker
    };
    Some((found.name, shown))
}

/// A lock's name from the stack that waited on it (symbolized frames, innermost first): the
/// kernel's name with where it was waited on ("mmap_lock (write, in __vm_munmap)"), or, for
/// a lock not recognized, the type and that place ("rwlock (write) in kvm_mmu_free_roots",
/// "mutex in vfio_pci_core_disable").
pub fn lock_name(kind: LockKind, mode: &str, frames: &[String], context: WaitContext) -> String {
    match well_known(kind, frames, context) {
        Some((known, frame)) => known_name(known, mode, frame),
        None => stack_name(kind, mode, distinctive_frame(frames)),
    }
}

/// "mmap_lock (write, in __vm_munmap)", "pipe->mutex (in anon_pipe_write)".
pub fn known_name(known: &str, mode: &str, frame: &str) -> String {
    if mode.is_empty() {
        format!("{known} (in {frame})")
    } else {
        format!("{known} ({mode}, in {frame})")
    }
}

/// Where the first frame outside tracing and lock plumbing is: the function that took the
/// lock.
fn taker_index(names: &[&str]) -> Option<usize> {
    names
        .iter()
        .position(|name| !is_plumbing(name) && !name.is_empty() && !name.starts_with("0x"))
}

fn frame_name(frame: &str) -> &str {
    frame.split(['+', ' ']).next().unwrap_or(frame)
}

/// "rwlock (write) in kvm_mmu_free_roots", "mutex in vfio_pci_core_disable", ...
pub fn stack_name(kind: LockKind, mode: &str, frame: Option<&str>) -> String {
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

    fn frames(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| format!("{name}+0x10")).collect()
    }

    #[test]
    fn flags_map_to_the_lock_types_that_pass_them() {
        assert_eq!(kind(flag::SPIN), LockKind::Spinlock);
        assert_eq!(kind(flag::SPIN | flag::WRITE), LockKind::Rwlock);
        assert_eq!(mode(flag::SPIN | flag::WRITE), "write");
        assert_eq!(kind(flag::READ), LockKind::Rwsem);
        assert_eq!(kind(flag::MUTEX | flag::SPIN), LockKind::Mutex);
        assert_eq!(kind(flag::MUTEX), LockKind::Mutex);
        assert_eq!(kind(flag::PERCPU | flag::READ), LockKind::PercpuRwsem);
        assert_eq!(mode(flag::MUTEX), "");
    }

    #[test]
    fn well_known_locks_get_the_kernels_names_and_keep_where_they_were_waited_on() {
        assert_eq!(
            lock_name(
                LockKind::Rwsem,
                "write",
                &frames(&["__vm_munmap"]),
                WaitContext::default()
            ),
            "mmap_lock (write, in __vm_munmap)"
        );
        assert_eq!(
            lock_name(
                LockKind::Rwsem,
                "read",
                &frames(&["lock_mm_and_find_vma"]),
                WaitContext::default()
            ),
            "mmap_lock (read, in lock_mm_and_find_vma)"
        );
        assert_eq!(
            lock_name(
                LockKind::Rwlock,
                "write",
                &frames(&["kvm_mmu_free_roots"]),
                WaitContext::default()
            ),
            "kvm->mmu_lock (write, in kvm_mmu_free_roots)"
        );
        assert_eq!(
            lock_name(
                LockKind::Spinlock,
                "",
                &frames(&["kvm_irqfd"]),
                WaitContext::default()
            ),
            "kvm->irqfds.lock (in kvm_irqfd)"
        );
        assert_eq!(
            lock_name(
                LockKind::Mutex,
                "",
                &frames(&["anon_pipe_write"]),
                WaitContext::default()
            ),
            "pipe->mutex (in anon_pipe_write)"
        );
        assert_eq!(
            lock_name(
                LockKind::Spinlock,
                "",
                &frames(&["__schedule"]),
                WaitContext::default()
            ),
            "rq->__lock (in __schedule)"
        );
        // A spinlock in a KVM MMU function is not mmu_lock, which is an rwlock on x86.
        assert_eq!(
            lock_name(
                LockKind::Spinlock,
                "",
                &frames(&["kvm_tdp_mmu_map"]),
                WaitContext::default()
            ),
            "spinlock in kvm_tdp_mmu_map"
        );
        // The type must match too: a mutex taken in a fault path is not mmap_lock.
        assert_eq!(
            lock_name(
                LockKind::Mutex,
                "",
                &frames(&["do_user_addr_fault"]),
                WaitContext::default()
            ),
            "mutex in do_user_addr_fault"
        );
        // Unknown places keep today's name.
        assert_eq!(
            lock_name(
                LockKind::Mutex,
                "",
                &frames(&["vfio_pci_core_disable"]),
                WaitContext::default()
            ),
            "mutex in vfio_pci_core_disable"
        );
        assert_eq!(
            lock_name(LockKind::Spinlock, "", &[], WaitContext::default()),
            "spinlock"
        );
    }

    #[test]
    fn the_lock_primitive_tells_a_wakers_two_spinlocks_apart() {
        // Stacks from this kernel: try_to_wake_up takes p->pi_lock with irqsave and the
        // runqueue's lock (through the inlined ttwu_queue) with a plain raw_spin_lock. The
        // second one's contended addresses were a megabyte apart per CPU: the per-CPU rq.
        let pi = frames(&[
            "trace_event_raw_event_contention_begin",
            "__pv_queued_spin_lock_slowpath",
            "_raw_spin_lock_irqsave",
            "try_to_wake_up",
        ]);
        let rq = frames(&[
            "trace_event_raw_event_contention_begin",
            "__pv_queued_spin_lock_slowpath",
            "_raw_spin_lock",
            "try_to_wake_up",
            "wake_up_q",
        ]);
        assert_eq!(
            lock_name(LockKind::Spinlock, "", &pi, WaitContext::default()),
            "p->pi_lock (in try_to_wake_up)"
        );
        assert_eq!(
            lock_name(LockKind::Spinlock, "", &rq, WaitContext::default()),
            "rq->__lock (in try_to_wake_up)"
        );
        // Without the primitive in the stack, neither is claimed.
        assert_eq!(
            lock_name(
                LockKind::Spinlock,
                "",
                &frames(&["try_to_wake_up"]),
                WaitContext::default()
            ),
            "spinlock in try_to_wake_up"
        );
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
            stack_name(LockKind::Spinlock, "", distinctive_frame(&frames)),
            "spinlock in __schedule"
        );
        assert_eq!(
            stack_name(LockKind::Rwlock, "write", Some("kvm_mmu_free_roots")),
            "rwlock (write) in kvm_mmu_free_roots"
        );
    }

    #[test]
    fn a_lock_is_named_by_its_taker_whatever_the_caller() {
        let none = WaitContext::default();
        // An inode's lock from any filesystem's write_iter.
        for write_iter in [
            "ext4_file_write_iter",
            "shmem_file_write_iter",
            "btrfs_buffered_write_iter",
        ] {
            assert_eq!(
                lock_name(
                    LockKind::Rwsem,
                    "write",
                    &frames(&["down_write", write_iter, "vfs_write"]),
                    none
                ),
                format!("inode->i_rwsem (write, in {write_iter})")
            );
        }
        // lock_rename takes two locks of two types.
        assert_eq!(
            lock_name(
                LockKind::Mutex,
                "",
                &frames(&["mutex_lock", "lock_rename", "do_renameat2"]),
                none
            ),
            "sb->s_vfs_rename_mutex (in lock_rename)"
        );
        // The same, with lock_rename inlined (6.18): the mutex is still the only one.
        assert_eq!(
            lock_name(
                LockKind::Mutex,
                "",
                &frames(&["__mutex_lock_slowpath", "mutex_lock", "do_renameat2"]),
                none
            ),
            "sb->s_vfs_rename_mutex (in do_renameat2)"
        );
        assert_eq!(
            lock_name(
                LockKind::Rwsem,
                "write",
                &frames(&["down_write_nested", "lock_rename"]),
                none
            ),
            "inode->i_rwsem (write, in lock_rename)"
        );
        // A helper that serves many locks is named by its caller.
        assert_eq!(
            lock_name(
                LockKind::Spinlock,
                "",
                &frames(&["_raw_spin_lock", "_atomic_dec_and_lock", "iput"]),
                none
            ),
            "inode->i_lock (in _atomic_dec_and_lock)"
        );
        assert_eq!(
            lock_name(
                LockKind::Spinlock,
                "",
                &frames(&["_raw_spin_lock", "_atomic_dec_and_lock", "put_css_set"]),
                none
            ),
            "spinlock in _atomic_dec_and_lock"
        );
        // A wait queue's lock is shown where the queue was woken from.
        assert_eq!(
            lock_name(
                LockKind::Spinlock,
                "",
                &frames(&["_raw_spin_lock_irqsave", "__wake_up", "eventfd_signal_mask"]),
                none
            ),
            "wait_queue_head->lock (in eventfd_signal_mask)"
        );
    }

    #[test]
    fn where_the_lock_lives_and_the_ioctl_narrow_a_taker_down() {
        let stack = frames(&[
            "__mutex_lock",
            "mutex_lock",
            "do_epoll_ctl",
            "__x64_sys_epoll_ctl",
        ]);
        let at = |is_static| WaitContext {
            is_static,
            ioctl: None,
        };
        assert_eq!(
            lock_name(LockKind::Mutex, "", &stack, at(Some(false))),
            "ep->mtx (in do_epoll_ctl)"
        );
        assert_eq!(
            lock_name(LockKind::Mutex, "", &stack, at(Some(true))),
            "epnested_mutex (in do_epoll_ctl)"
        );
        // Not knowing where it lives, do_epoll_ctl's mutex could be either: not named.
        assert_eq!(
            lock_name(LockKind::Mutex, "", &stack, at(None)),
            "mutex in do_epoll_ctl"
        );
        // tasklist_lock is a static rwlock.
        let fork = frames(&["_raw_write_lock_irq", "copy_process", "kernel_clone"]);
        assert_eq!(
            lock_name(LockKind::Rwlock, "write", &fork, at(Some(true))),
            "tasklist_lock (write, in copy_process)"
        );
        assert_eq!(
            lock_name(LockKind::Rwlock, "write", &fork, at(Some(false))),
            "rwlock (write) in copy_process"
        );
        // kvm_vm_ioctl takes kvm->slots_lock for a memslot update and kvm->lock to create a
        // vCPU, both inlined into it: only the waiter's ioctl tells.
        let ioctl = frames(&[
            "__mutex_lock",
            "mutex_lock",
            "kvm_vm_ioctl",
            "__x64_sys_ioctl",
        ]);
        let in_ioctl = |cmd| WaitContext {
            is_static: Some(false),
            ioctl: Some(cmd),
        };
        assert_eq!(
            lock_name(LockKind::Mutex, "", &ioctl, in_ioctl(0x4020_ae46)),
            "kvm->slots_lock (in kvm_vm_ioctl)"
        );
        assert_eq!(
            lock_name(LockKind::Mutex, "", &ioctl, in_ioctl(0xae41)),
            "kvm->lock (in kvm_vm_ioctl)"
        );
        assert_eq!(
            lock_name(LockKind::Mutex, "", &ioctl, at(Some(false))),
            "mutex in kvm_vm_ioctl"
        );
    }
}
