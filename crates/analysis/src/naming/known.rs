//! Kernel locks a kernel engineer knows by name, recognized from where they are taken.
//!
//! A contended wait's kernel stack goes through the lock primitive (`mutex_lock`,
//! `down_write`, `_raw_spin_lock_irqsave`, ...) and, right outside it, the function that
//! takes the lock: the *taker*. Most takers take one lock of a given type, so the type and
//! the taker name the lock. Where they do not, an entry narrows it down with what else the
//! trace says:
//! - the primitive (`try_to_wake_up` takes `p->pi_lock` with irqsave, the runqueue's lock
//!   without);
//! - the taker's caller (a helper such as `_atomic_dec_and_lock` serves many locks);
//! - where the lock lives: a static variable of the kernel image (`tasklist_lock`,
//!   `namespace_sem`) or a field of an allocated object (`ep->mtx`, `inode->i_rwsem`);
//! - the ioctl the waiter was in (`kvm_vm_ioctl` takes `kvm->slots_lock` for a memslot
//!   update and `kvm->lock` to create a vCPU, both inlined into it).
//!
//! Takers differ between kernel builds as the compiler inlines (`kvm_vm_ioctl_create_vcpu`
//! is its own function on one kernel and part of `kvm_vm_ioctl` on another), so an entry
//! lists the function that takes the lock and the functions it is inlined into where that
//! keeps the name unambiguous. Each entry was checked against the source of the functions
//! it lists (Linux 6.x): every one of them takes that lock, of that type, and no other of
//! that type that the entry's narrowing would let through.
//!
//! Adding a lock: one entry here, and a case in the tests below with a stack as the kernel
//! records it (docs/ARCHITECTURE.md has the recipe).

use vmscale_run::findings::LockKind;
use LockKind::{Mutex, PercpuRwsem, Rwlock, Rwsem, Spinlock};

/// Where a lock lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Anywhere: the entry does not depend on it.
    Any,
    /// A static variable of the kernel image or a module.
    Static,
    /// Allocated memory (a field of a slab or vmalloc object, or per-CPU data).
    Heap,
}

/// One known lock.
pub struct KnownLock {
    pub name: &'static str,
    pub kinds: &'static [LockKind],
    /// Functions that take it ([`matches`]: `name`, `prefix*` or `*suffix`).
    pub takers: &'static [&'static str],
    /// The lock primitive the taker called, when the taker takes two locks of one type and
    /// only the primitive tells them apart.
    pub via: Option<&'static str>,
    /// The taker's caller, when the taker is a helper that serves many locks.
    pub callers: &'static [&'static str],
    pub place: Place,
    /// The waiter's ioctl, as (type, number) with the size and direction bits left out,
    /// when the taker takes several locks of one type by ioctl; empty: any.
    pub ioctls: &'static [(u8, u8)],
    /// The taker is generic plumbing (a wait queue helper): the place to show is its caller.
    pub shown_at_caller: bool,
}

const fn lock(
    name: &'static str,
    kinds: &'static [LockKind],
    takers: &'static [&'static str],
) -> KnownLock {
    KnownLock {
        name,
        kinds,
        takers,
        via: None,
        callers: &[],
        place: Place::Any,
        ioctls: &[],
        shown_at_caller: false,
    }
}

const fn at(mut known: KnownLock, place: Place) -> KnownLock {
    known.place = place;
    known
}

const fn via(mut known: KnownLock, primitive: &'static str) -> KnownLock {
    known.via = Some(primitive);
    known
}

const fn called_from(mut known: KnownLock, callers: &'static [&'static str]) -> KnownLock {
    known.callers = callers;
    known
}

const fn in_ioctls(mut known: KnownLock, ioctls: &'static [(u8, u8)]) -> KnownLock {
    known.ioctls = ioctls;
    known
}

const fn shown_at_caller(mut known: KnownLock) -> KnownLock {
    known.shown_at_caller = true;
    known
}

/// KVM's ioctl type (`KVMIO`).
const KVMIO: u8 = 0xae;

/// The table. Order matters only where two entries could match one wait: the first wins.
pub const KNOWN_LOCKS: &[KnownLock] = &[
    // mm/: page faults, mmap, munmap, mprotect, madvise, mlock, brk, GUP, exit.
    lock(
        "mmap_lock",
        &[Rwsem],
        &[
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
            "mmap_read_lock*",
            "mmap_write_lock*",
            "get_user_pages_unlocked",
            "__access_remote_vm",
            "exit_mmap",
            "exit_mm",
            // Its only rwsem: the exiting mm's (exit_mm, inlined).
            "do_exit",
            "__x64_sys_mincore",
            "__do_sys_mincore",
            "vm_brk_flags",
            "userfaultfd_register",
            "userfaultfd_unregister",
        ],
    ),
    lock(
        "mapping->i_mmap_rwsem",
        &[Rwsem],
        &[
            "unlink_file_vma",
            "unlink_file_vma_batch_process",
            "rmap_walk_file",
            "__rmap_walk_file",
        ],
    ),
    lock(
        "anon_vma->rwsem",
        &[Rwsem],
        &[
            "anon_vma_clone",
            "unlink_anon_vmas",
            "rmap_walk_anon",
            "folio_lock_anon_vma_read",
        ],
    ),
    lock(
        "lruvec->lru_lock",
        &[Spinlock],
        &[
            "folio_lruvec_lock*",
            "folio_lruvec_relock*",
            "shrink_active_list",
            "shrink_inactive_list",
            "move_folios_to_lru",
        ],
    ),
    // The buddy allocator: per-CPU lists are refilled and drained under the zone's lock
    // (their own lock is only ever tried, never waited on).
    lock(
        "zone->lock",
        &[Spinlock],
        &[
            "rmqueue_bulk",
            "rmqueue_buddy",
            "__rmqueue_pcplist",
            "get_page_from_freelist",
            "free_pcppages_bulk",
            "free_one_page",
            "reserve_highatomic_pageblock",
            "unreserve_highatomic_pageblock",
        ],
    ),
    lock(
        "ptl (page table lock)",
        &[Spinlock],
        &["__pte_offset_map_lock", "pte_offset_map_lock"],
    ),
    at(
        lock(
            "hugetlb_lock",
            &[Spinlock],
            &[
                "alloc_hugetlb_folio",
                "free_huge_folio",
                "hugetlb_acct_memory",
            ],
        ),
        Place::Static,
    ),
    // virt/kvm and arch/x86/kvm/mmu: an rwlock on x86 (KVM_HAVE_MMU_RWLOCK). Spinlocks in
    // the same functions are other locks (tdp_mmu_pages_lock, mmu_unsync_pages_lock).
    lock(
        "kvm->mmu_lock",
        &[Rwlock],
        &[
            "kvm_mmu_*",
            "__kvm_mmu_*",
            "kvm_tdp_mmu_*",
            "kvm_zap_*",
            "kvm_unmap_gfn_range",
            "kvm_mmu_notifier_*",
            "kvm_handle_hva_range",
            "kvm_tdp_page_fault",
            "direct_page_fault",
            "kvm_arch_flush_shadow*",
            "mmu_free_root*",
            "kvm_page_fault",
            "fast_page_fault",
        ],
    ),
    lock(
        "kvm->slots_lock",
        &[Mutex],
        &[
            "kvm_set_memory_region",
            "kvm_vm_ioctl_set_memory_region",
            "kvm_vm_ioctl_get_dirty_log",
            "kvm_vm_ioctl_clear_dirty_log",
            "kvm_assign_ioeventfd*",
            "kvm_deassign_ioeventfd*",
            "kvm_vm_ioctl_register_coalesced_mmio",
            "kvm_vm_ioctl_unregister_coalesced_mmio",
        ],
    ),
    // kvm_vm_ioctl with the memslot and dirty-log helpers inlined into it: the ioctl says
    // which (KVM_SET_USER_MEMORY_REGION(2), KVM_GET_DIRTY_LOG, KVM_CLEAR_DIRTY_LOG,
    // KVM_SET_MEMORY_ATTRIBUTES).
    in_ioctls(
        lock("kvm->slots_lock", &[Mutex], &["kvm_vm_ioctl"]),
        &[
            (KVMIO, 0x46),
            (KVMIO, 0x49),
            (KVMIO, 0x42),
            (KVMIO, 0xc0),
            (KVMIO, 0xd2),
        ],
    ),
    lock("kvm->slots_arch_lock", &[Mutex], &["kvm_set_memslot"]),
    // KVM_CREATE_VCPU and KVM_CREATE_DEVICE.
    in_ioctls(
        lock(
            "kvm->lock",
            &[Mutex],
            &[
                "kvm_vm_ioctl",
                "kvm_vm_ioctl_create_vcpu",
                "kvm_ioctl_create_device",
            ],
        ),
        &[(KVMIO, 0x41), (KVMIO, 0xe0)],
    ),
    at(
        lock(
            "kvm->lock",
            &[Mutex],
            &["kvm_vm_ioctl_create_vcpu", "kvm_ioctl_create_device"],
        ),
        Place::Heap,
    ),
    // kvm_create_vm (inlined into kvm_dev_ioctl) and kvm_destroy_vm put the VM on the
    // global list.
    at(
        lock(
            "kvm_lock",
            &[Mutex],
            &["kvm_create_vm", "kvm_destroy_vm", "kvm_dev_ioctl"],
        ),
        Place::Static,
    ),
    lock(
        "kvm->irqfds.lock",
        &[Spinlock],
        &["kvm_irqfd*", "irqfd_wakeup", "kvm_irq_routing_update"],
    ),
    // fs/pipe.c.
    lock(
        "pipe->mutex",
        &[Mutex],
        &[
            "anon_pipe_*",
            "pipe_read",
            "pipe_write",
            "pipe_lock",
            "__pipe_lock",
            "pipe_double_lock",
            "pipe_release",
            "splice_*",
        ],
    ),
    // The VFS: an inode's lock, taken by path walks that create or look up, by writes and
    // attribute changes; a filesystem's write_iter takes it for the whole write.
    lock(
        "inode->i_rwsem",
        &[Rwsem],
        &[
            "path_openat",
            "open_last_lookups",
            "lookup_slow",
            "do_truncate",
            "generic_file_write_iter",
            "*_file_write_iter",
            "*_buffered_write_iter",
            "*_dio_write_iter",
            "shmem_fallocate",
            "ext4_fallocate",
            "iterate_dir",
            "do_unlinkat",
            "filename_create",
            "lock_rename",
            "lock_rename_child",
            "lock_two_nondirectories",
            "lock_two_inodes",
            "chmod_common",
            "chown_common",
            "vfs_utimes",
            "vfs_setxattr",
            "vfs_removexattr",
            "do_rmdir",
        ],
    ),
    // lock_rename is inlined into do_renameat2 on some builds (6.18 here); do_renameat2
    // takes no other mutex (its other locks are the parents' i_rwsem and the superblock's
    // percpu freeze lock).
    lock(
        "sb->s_vfs_rename_mutex",
        &[Mutex],
        &["lock_rename", "lock_rename_child", "do_renameat2"],
    ),
    // read(2), write(2), lseek(2) and getdents on a file shared by threads.
    lock(
        "file->f_pos_lock",
        &[Mutex],
        &["fdget_pos", "__fdget_pos", "__f_unlock_pos"],
    ),
    lock(
        "sb->s_umount",
        &[Rwsem],
        &[
            "super_lock",
            "__super_lock",
            "grab_super",
            "deactivate_super",
            "iterate_supers",
        ],
    ),
    // fs/namespace.c: namespace_lock() and lock_mount() are inlined into most of these.
    at(
        lock(
            "namespace_sem",
            &[Rwsem],
            &[
                "namespace_lock",
                "lock_mount",
                "do_lock_mount",
                "path_mount",
                "path_umount",
                "__x64_sys_umount",
                "ksys_umount",
                "copy_mnt_ns",
                "put_mnt_ns",
                "__detach_mounts",
                "mark_mounts_for_expiry",
                "__x64_sys_move_mount",
                "__do_sys_move_mount",
                "__x64_sys_pivot_root",
                "__do_sys_pivot_root",
                "__do_sys_open_tree",
                "collect_mounts",
                "drop_collected_mounts",
                "m_start",
            ],
        ),
        Place::Static,
    ),
    at(
        lock(
            "inode_hash_lock",
            &[Spinlock],
            &[
                "iget_locked",
                "insert_inode_locked",
                "__insert_inode_hash",
                "__remove_inode_hash",
                "ilookup",
            ],
        ),
        Place::Static,
    ),
    lock(
        "sb->s_inode_list_lock",
        &[Spinlock],
        &[
            "inode_sb_list_add",
            "inode_sb_list_del",
            "evict_inodes",
            "invalidate_inodes",
        ],
    ),
    lock(
        "dentry->d_lock",
        &[Spinlock],
        &[
            "dput",
            "__d_lookup",
            "d_alloc",
            "dget_parent",
            "__dentry_kill",
            "lock_for_kill",
            "d_walk",
            "fast_dput",
            "d_alloc_parallel",
            "__d_add",
            "d_instantiate",
        ],
    ),
    called_from(
        lock("inode->i_lock", &[Spinlock], &["_atomic_dec_and_lock"]),
        &["iput"],
    ),
    lock("inode->i_lock", &[Spinlock], &["igrab"]),
    // fs/file.c: the descriptor table.
    lock(
        "files->file_lock",
        &[Spinlock],
        &[
            "alloc_fd",
            "ksys_dup3",
            "do_dup2",
            "close_fd",
            "file_close_fd",
            "__close_range",
            "put_unused_fd",
            "fd_install",
            "replace_fd",
            "set_close_on_exec",
            "do_close_on_exec",
            "iterate_fd",
        ],
    ),
    // fs/eventpoll.c: each epoll instance's mutex, and the global one for nested epoll.
    at(
        lock(
            "ep->mtx",
            &[Mutex],
            &[
                "do_epoll_ctl",
                "ep_clear_and_put",
                "ep_free",
                "eventpoll_release_file",
                "ep_loop_check_proc",
            ],
        ),
        Place::Heap,
    ),
    at(
        lock("epnested_mutex", &[Mutex], &["do_epoll_ctl"]),
        Place::Static,
    ),
    lock(
        "ep->lock",
        &[Spinlock, Rwlock],
        &[
            "ep_poll_callback",
            "ep_poll",
            "do_epoll_wait",
            "ep_start_scan",
            "ep_done_scan",
            "ep_send_events",
        ],
    ),
    // fs/notify: a notification group's marks.
    lock(
        "fsnotify_group->mark_mutex",
        &[Mutex],
        &[
            "inotify_update_watch",
            "__x64_sys_inotify_add_watch",
            "__x64_sys_inotify_rm_watch",
            "fsnotify_add_mark",
            "fsnotify_destroy_mark",
            "fsnotify_clear_marks_by_group",
            "do_fanotify_mark",
        ],
    ),
    // kernel/: processes.
    at(
        lock(
            "tasklist_lock",
            &[Rwlock],
            &[
                "copy_process",
                "exit_notify",
                "do_exit",
                "release_task",
                "__do_wait",
                "do_wait",
                "kill_pgrp",
                "kill_something_info",
                "__x64_sys_setpgid",
                "ksys_setsid",
                "de_thread",
                "begin_new_exec",
                "ptrace_attach",
                "__x64_sys_setpriority",
                "__x64_sys_getpriority",
                "zap_pid_ns_processes",
            ],
        ),
        Place::Static,
    ),
    at(
        lock(
            "pidmap_lock",
            &[Spinlock],
            &["alloc_pid", "free_pid", "free_pids"],
        ),
        Place::Static,
    ),
    at(
        lock(
            "sighand->siglock",
            &[Spinlock],
            &[
                "__lock_task_sighand",
                "do_sigaction",
                "set_current_blocked",
                "__set_current_blocked",
                "do_signal_stop",
                "get_signal",
                "do_send_sig_info",
                "exit_signals",
                "__exit_signal",
                "release_task",
                "copy_process",
                "do_notify_parent",
                "do_notify_parent_cldstop",
                "force_sig_info_to_task",
                "do_sigtimedwait",
                "do_sigpending",
            ],
        ),
        Place::Heap,
    ),
    at(
        lock(
            "cgroup_threadgroup_rwsem",
            &[PercpuRwsem],
            &[
                "copy_process",
                "exit_signals",
                "cgroup_attach_lock",
                "cgroup_procs_write_start",
                "de_thread",
                "begin_new_exec",
            ],
        ),
        Place::Static,
    ),
    at(
        lock(
            "cpu_hotplug_lock",
            &[PercpuRwsem],
            &["cpus_read_lock", "cpus_write_lock"],
        ),
        Place::Static,
    ),
    at(
        lock(
            "cgroup_mutex",
            &[Mutex],
            &[
                "cgroup_kn_lock_live",
                "cgroup_lock",
                "cgroup_lock_and_drain_offline",
            ],
        ),
        Place::Static,
    ),
    at(
        lock(
            "uts_sem",
            &[Rwsem],
            &[
                "__x64_sys_sethostname",
                "__do_sys_sethostname",
                "__x64_sys_newuname",
                "__do_sys_newuname",
                "__x64_sys_setdomainname",
            ],
        ),
        Place::Static,
    ),
    // ipc/: a namespace's ids of one kind (semaphores, queues or segments).
    lock(
        "ipc_ids->rwsem",
        &[Rwsem],
        &[
            "ipcget",
            "ipcget_new",
            "ipcget_public",
            "semctl_down",
            "msgctl_down",
            "shmctl_down",
            "exit_shm",
            "shm_destroy_orphaned",
        ],
    ),
    // kernel/futex: the hash bucket a futex word hashes to.
    lock(
        "futex_hash_bucket->lock",
        &[Spinlock],
        &[
            "futex_q_lock",
            "futex_wake",
            "futex_wake_op",
            "futex_requeue",
            "futex_unqueue",
        ],
    ),
    // kernel/sched: runqueues and a task's pi_lock.
    lock(
        "rq->__lock",
        &[Spinlock],
        &[
            "__schedule",
            "raw_spin_rq_lock*",
            "_raw_spin_rq_lock*",
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
    ),
    // try_to_wake_up takes the woken task's pi_lock with irqsave, then (ttwu_queue and
    // rq_lock inlined into it) the target runqueue's lock with a plain raw_spin_lock.
    via(
        lock("p->pi_lock", &[Spinlock], &["try_to_wake_up"]),
        "_raw_spin_lock_irqsave",
    ),
    via(
        lock("rq->__lock", &[Spinlock], &["try_to_wake_up"]),
        "_raw_spin_lock",
    ),
    lock(
        "eventfd_ctx->wqh.lock",
        &[Spinlock],
        &[
            "eventfd_write",
            "eventfd_read",
            "eventfd_signal*",
            "eventfd_ctx_do_read",
        ],
    ),
    // A wait queue's own lock, taken by the generic helpers for whoever owns the queue.
    shown_at_caller(lock(
        "wait_queue_head->lock",
        &[Spinlock],
        &[
            "__wake_up",
            "__wake_up_common_lock",
            "__wake_up_sync_key",
            "__wake_up_locked_key",
            "prepare_to_wait",
            "prepare_to_wait_event",
            "prepare_to_wait_exclusive",
            "finish_wait",
            "add_wait_queue",
            "add_wait_queue_exclusive",
            "remove_wait_queue",
        ],
    )),
    // kernel/trace.
    at(
        lock(
            "trace_types_lock",
            &[Mutex],
            &["tracing_check_open_get_tr", "trace_array_get"],
        ),
        Place::Static,
    ),
    at(
        lock(
            "event_mutex",
            &[Mutex],
            &["__ftrace_set_clr_event", "event_enable_write"],
        ),
        Place::Static,
    ),
    // net/.
    at(
        lock(
            "rtnl_mutex",
            &[Mutex],
            &["rtnl_lock", "__rtnl_lock", "rtnetlink_rcv_msg"],
        ),
        Place::Static,
    ),
];

/// Whether `function` matches `pattern`: `name`, `prefix*` or `*suffix`. The compiler's
/// suffixes for a function's clones (`.part.0`, `.isra.0`, `.constprop.0`, `.cold`) are
/// the function's own code and match as the function.
pub fn matches(pattern: &str, function: &str) -> bool {
    let function = function.split('.').next().unwrap_or(function);
    if let Some(prefix) = pattern.strip_suffix('*') {
        function.starts_with(prefix)
    } else if let Some(suffix) = pattern.strip_prefix('*') {
        function.ends_with(suffix)
    } else {
        function == pattern
    }
}

/// What the trace says about one wait besides its stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitContext {
    /// Whether the lock is a static variable of the kernel image; `None`: unknown.
    pub is_static: Option<bool>,
    /// The ioctl command the waiter was in, when its system calls were traced.
    pub ioctl: Option<u64>,
}

/// The ioctl's (type, number), without the size and direction bits.
fn ioctl_type_nr(cmd: u64) -> (u8, u8) {
    (((cmd >> 8) & 0xff) as u8, (cmd & 0xff) as u8)
}

/// The known lock of `kind` taken by `taker`, which `caller` called, through `primitive`,
/// in `context`; `None` when no entry names it unambiguously.
pub fn find(
    kind: LockKind,
    taker: &str,
    primitive: Option<&str>,
    caller: Option<&str>,
    context: WaitContext,
) -> Option<&'static KnownLock> {
    KNOWN_LOCKS.iter().find(|known| {
        known.kinds.contains(&kind)
            && known.takers.iter().any(|p| matches(p, taker))
            && known.via.is_none_or(|v| primitive == Some(v))
            && (known.callers.is_empty()
                || caller.is_some_and(|c| known.callers.iter().any(|p| matches(p, c))))
            && match known.place {
                Place::Any => true,
                Place::Static => context.is_static == Some(true),
                Place::Heap => context.is_static == Some(false),
            }
            && (known.ioctls.is_empty()
                || context
                    .ioctl
                    .is_some_and(|cmd| known.ioctls.contains(&ioctl_type_nr(cmd))))
    })
}

/// Whether `function` is one the table says takes the lock called `name` of `kind`.
pub fn takes(name: &str, kind: LockKind, function: &str) -> bool {
    KNOWN_LOCKS.iter().any(|known| {
        known.name == name
            && known.kinds.contains(&kind)
            && known.takers.iter().any(|p| matches(p, function))
    })
}

/// The one spinning lock the table says `function` takes, where no narrowing (primitive,
/// caller, ioctl) is needed to tell it: what a sample of `function` with interrupts off
/// was holding when it was taken with them off.
pub fn only_spinlock_of(function: &str) -> Option<&'static str> {
    let mut found = KNOWN_LOCKS.iter().filter(|known| {
        known.kinds.iter().any(|k| matches!(k, Spinlock | Rwlock))
            && known.takers.iter().any(|p| matches(p, function))
    });
    let first = found.next()?;
    let plain = first.via.is_none() && first.callers.is_empty() && first.ioctls.is_empty();
    (plain && found.next().is_none()).then_some(first.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_taking_one_known_spinlock_names_it() {
        assert_eq!(only_spinlock_of("kvm_irqfd"), Some("kvm->irqfds.lock"));
        assert_eq!(only_spinlock_of("no_such_function_here"), None);
    }

    #[test]
    fn patterns_are_exact_prefix_or_suffix() {
        assert!(matches("alloc_fd", "alloc_fd"));
        assert!(!matches("alloc_fd", "alloc_fdtable"));
        assert!(matches("kvm_mmu_*", "kvm_mmu_free_roots"));
        assert!(matches("*_file_write_iter", "xfs_file_write_iter"));
        assert!(!matches("*_file_write_iter", "xfs_file_write_iter_x"));
        assert!(matches(
            "tracing_check_open_get_tr",
            "tracing_check_open_get_tr.part.0"
        ));
        assert!(matches("kvm_mmu_*", "kvm_mmu_zap_all_fast.isra.0"));
    }

    #[test]
    fn every_entry_is_well_formed() {
        for known in KNOWN_LOCKS {
            assert!(
                !known.name.is_empty() && !known.kinds.is_empty(),
                "{}",
                known.name
            );
            assert!(!known.takers.is_empty(), "{}", known.name);
            for taker in known.takers {
                // A lone `*` would match every function.
                assert!(taker.trim_matches('*').len() > 2, "{}: {taker}", known.name);
            }
        }
    }
}
