//! What to call a lock: its type and mode from the contention flags, and a name from a
//! kallsyms data symbol or, failing that, from the stack that waits on it.

use vmscale_trace::decode::views::contention_flags as flag;

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
    distinctive_place(frames).map(|(frame, _)| frame)
}

/// A kernel lock a kernel engineer knows by name, recognized from the lock type and the
/// function that waits on it (the first frame outside tracing and lock plumbing).
struct WellKnown {
    kinds: &'static [&'static str],
    /// Prefixes of the waiting function.
    waiters: &'static [&'static str],
    /// The lock primitive the waiter called (the frame right inside it), when the function
    /// takes two locks of one type and only the primitive tells them apart.
    via: Option<&'static str>,
    name: &'static str,
}

/// Each entry was checked against the kernel source of the function: it takes that lock
/// there.
const WELL_KNOWN: &[WellKnown] = &[
    // mm/: page faults, mmap, munmap, mprotect, madvise, mlock, brk, GUP.
    WellKnown {
        kinds: &["rwsem"],
        waiters: &[
            "lock_mm_and_find_vma",
            "do_user_addr_fault",
            "__vm_munmap",
            "vm_mmap_pgoff",
            "do_mprotect_pkey",
            "do_madvise",
            "madvise_lock",
            "do_mlock",
            "__x64_sys_mlockall",
            "__do_sys_mlockall",
            "__mm_populate",
            "__do_sys_brk",
            "__x64_sys_brk",
            "__x64_sys_munmap",
            "__x64_sys_mremap",
            "do_mremap",
            "mmap_read_lock",
            "mmap_write_lock",
            "get_user_pages_unlocked",
            "__access_remote_vm",
            "exit_mmap",
            "__x64_sys_mincore",
            "__do_sys_mincore",
        ],
        via: None,
        name: "mmap_lock",
    },
    // virt/kvm and arch/x86/kvm/mmu: an rwlock on x86 (KVM_HAVE_MMU_RWLOCK). Spinlocks in
    // the same functions are other locks (tdp_mmu_pages_lock, mmu_unsync_pages_lock).
    WellKnown {
        kinds: &["rwlock"],
        waiters: &[
            "kvm_mmu_",
            "__kvm_mmu_",
            "kvm_tdp_mmu_",
            "kvm_zap_",
            "kvm_unmap_gfn_range",
            "kvm_mmu_notifier_",
            "kvm_handle_hva_range",
            "kvm_tdp_page_fault",
            "direct_page_fault",
            "kvm_arch_flush_shadow",
            "mmu_free_root",
            "kvm_page_fault",
            "fast_page_fault",
        ],
        via: None,
        name: "kvm->mmu_lock",
    },
    WellKnown {
        kinds: &["mutex"],
        waiters: &[
            "kvm_set_memory_region",
            "kvm_vm_ioctl_set_memory_region",
            "kvm_assign_ioeventfd",
            "kvm_deassign_ioeventfd",
            "kvm_vm_ioctl_register_coalesced_mmio",
            "kvm_vm_ioctl_unregister_coalesced_mmio",
        ],
        via: None,
        name: "kvm->slots_lock",
    },
    WellKnown {
        kinds: &["mutex"],
        waiters: &["kvm_vm_ioctl_create_vcpu"],
        via: None,
        name: "kvm->lock",
    },
    WellKnown {
        kinds: &["spinlock"],
        waiters: &["kvm_irqfd", "irqfd_wakeup", "kvm_irq_routing_update"],
        via: None,
        name: "kvm->irqfds.lock",
    },
    WellKnown {
        kinds: &["mutex"],
        waiters: &[
            "anon_pipe_",
            "pipe_read",
            "pipe_write",
            "pipe_lock",
            "__pipe_lock",
            "pipe_double_lock",
            "pipe_release",
            "splice_",
        ],
        via: None,
        name: "pipe->mutex",
    },
    WellKnown {
        kinds: &["rwsem"],
        waiters: &[
            "path_openat",
            "open_last_lookups",
            "lookup_slow",
            "do_truncate",
            "generic_file_write_iter",
            "ext4_buffered_write_iter",
            "ext4_file_write_iter",
            "shmem_file_write_iter",
            "iterate_dir",
            "do_unlinkat",
            "filename_create",
            "lock_rename",
            "chmod_common",
            "chown_common",
            "do_rmdir",
        ],
        via: None,
        name: "inode->i_rwsem",
    },
    WellKnown {
        kinds: &["mutex"],
        waiters: &["rtnl_lock", "__rtnl_lock", "rtnetlink_rcv_msg"],
        via: None,
        name: "rtnl_mutex",
    },
    WellKnown {
        kinds: &["mutex"],
        waiters: &[
            "cgroup_kn_lock_live",
            "cgroup_lock",
            "cgroup_lock_and_drain_offline",
        ],
        via: None,
        name: "cgroup_mutex",
    },
    WellKnown {
        kinds: &["spinlock"],
        waiters: &[
            "__schedule",
            "raw_spin_rq_lock",
            "_raw_spin_rq_lock",
            "task_rq_lock",
            "__task_rq_lock",
            "sched_ttwu_pending",
            "ttwu_queue",
            "sched_tick",
            "scheduler_tick",
            "wake_up_new_task",
            "sched_balance_rq",
            "load_balance",
            "double_rq_lock",
        ],
        via: None,
        name: "rq->__lock",
    },
    // try_to_wake_up takes the woken task's pi_lock with irqsave, then (ttwu_queue and
    // rq_lock inlined into it) the target runqueue's lock with a plain raw_spin_lock.
    WellKnown {
        kinds: &["spinlock"],
        waiters: &["try_to_wake_up"],
        via: Some("_raw_spin_lock_irqsave"),
        name: "p->pi_lock",
    },
    WellKnown {
        kinds: &["spinlock"],
        waiters: &["try_to_wake_up"],
        via: Some("_raw_spin_lock"),
        name: "rq->__lock",
    },
    WellKnown {
        kinds: &["spinlock"],
        waiters: &[
            "eventfd_write",
            "eventfd_read",
            "eventfd_signal",
            "eventfd_ctx_do_read",
        ],
        via: None,
        name: "eventfd_ctx->wqh.lock",
    },
    WellKnown {
        kinds: &["spinlock"],
        waiters: &["folio_lruvec_lock", "folio_lruvec_relock"],
        via: None,
        name: "lruvec->lru_lock",
    },
    WellKnown {
        kinds: &["mutex"],
        waiters: &["tracing_check_open_get_tr", "trace_array_get"],
        via: None,
        name: "trace_types_lock",
    },
];

/// The kernel's own name for a lock of `kind` waited on from `frame` through the lock
/// primitive `via` (the frame right inside `frame`, when the stack has one), when it is one
/// of the locks in [`WELL_KNOWN`].
pub fn well_known(kind: &str, frame: &str, via: Option<&str>) -> Option<&'static str> {
    WELL_KNOWN
        .iter()
        .find(|known| {
            known.kinds.contains(&kind)
                && known.waiters.iter().any(|p| frame.starts_with(p))
                && known.via.is_none_or(|primitive| via == Some(primitive))
        })
        .map(|known| known.name)
}

/// A lock's name from the stack that waited on it (symbolized frames, innermost first): the
/// kernel's name with where it was waited on ("mmap_lock (write, in __vm_munmap)"), or, for
/// a lock not recognized, the type and that place ("rwlock (write) in kvm_mmu_free_roots",
/// "mutex in vfio_pci_core_disable").
pub fn lock_name(kind: &str, mode: &str, frames: &[String]) -> String {
    let place = distinctive_place(frames);
    let frame = place.map(|(frame, _)| frame);
    match place.and_then(|(frame, via)| Some((well_known(kind, frame, via)?, frame))) {
        Some((known, frame)) if mode.is_empty() => format!("{known} (in {frame})"),
        Some((known, frame)) => format!("{known} ({mode}, in {frame})"),
        None => stack_name(kind, mode, frame),
    }
}

/// The distinctive frame and the plumbing frame right inside it (the lock primitive it
/// called), by name.
fn distinctive_place(frames: &[String]) -> Option<(&str, Option<&str>)> {
    let names: Vec<&str> = frames.iter().map(|f| frame_name(f)).collect();
    let at = names
        .iter()
        .position(|name| !is_plumbing(name) && !name.is_empty() && !name.starts_with("0x"))?;
    let via = at.checked_sub(1).map(|inner| names[inner]);
    Some((names[at], via))
}

fn frame_name(frame: &str) -> &str {
    frame.split(['+', ' ']).next().unwrap_or(frame)
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

    fn frames(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| format!("{name}+0x10")).collect()
    }

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
    fn well_known_locks_get_the_kernels_names_and_keep_where_they_were_waited_on() {
        assert_eq!(
            lock_name("rwsem", "write", &frames(&["__vm_munmap"])),
            "mmap_lock (write, in __vm_munmap)"
        );
        assert_eq!(
            lock_name("rwsem", "read", &frames(&["lock_mm_and_find_vma"])),
            "mmap_lock (read, in lock_mm_and_find_vma)"
        );
        assert_eq!(
            lock_name("rwlock", "write", &frames(&["kvm_mmu_free_roots"])),
            "kvm->mmu_lock (write, in kvm_mmu_free_roots)"
        );
        assert_eq!(
            lock_name("spinlock", "", &frames(&["kvm_irqfd"])),
            "kvm->irqfds.lock (in kvm_irqfd)"
        );
        assert_eq!(
            lock_name("mutex", "", &frames(&["anon_pipe_write"])),
            "pipe->mutex (in anon_pipe_write)"
        );
        assert_eq!(
            lock_name("spinlock", "", &frames(&["__schedule"])),
            "rq->__lock (in __schedule)"
        );
        // A spinlock in a KVM MMU function is not mmu_lock, which is an rwlock on x86.
        assert_eq!(
            lock_name("spinlock", "", &frames(&["kvm_tdp_mmu_map"])),
            "spinlock in kvm_tdp_mmu_map"
        );
        // The type must match too: a mutex taken in a fault path is not mmap_lock.
        assert_eq!(
            lock_name("mutex", "", &frames(&["do_user_addr_fault"])),
            "mutex in do_user_addr_fault"
        );
        // Unknown places keep today's name.
        assert_eq!(
            lock_name("mutex", "", &frames(&["vfio_pci_core_disable"])),
            "mutex in vfio_pci_core_disable"
        );
        assert_eq!(lock_name("spinlock", "", &[]), "spinlock");
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
            lock_name("spinlock", "", &pi),
            "p->pi_lock (in try_to_wake_up)"
        );
        assert_eq!(
            lock_name("spinlock", "", &rq),
            "rq->__lock (in try_to_wake_up)"
        );
        // Without the primitive in the stack, neither is claimed.
        assert_eq!(
            lock_name("spinlock", "", &frames(&["try_to_wake_up"])),
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
            stack_name("spinlock", "", distinctive_frame(&frames)),
            "spinlock in __schedule"
        );
        assert_eq!(
            stack_name("rwlock", "write", Some("kvm_mmu_free_roots")),
            "rwlock (write) in kvm_mmu_free_roots"
        );
    }
}
