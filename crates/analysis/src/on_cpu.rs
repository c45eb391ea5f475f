//! Where the subject's on-CPU time went, by code path, from the on-CPU samples.
//!
//! The samples are those of the subject's threads inside its windows (the timed samples of
//! the measuring thread, each timed call on its thread, or a recorded command's tasks over
//! the recording), the same time every other analysis explains. A sample is named by its
//! *path*: the innermost kernel function that is not a library routine (a copy, a clear,
//! a lock primitive), with that routine beside it when the leaf is one ("memset in
//! clear_page_erms" would say nothing; "copy_page in do_wp_page" does). A sample whose
//! kernel stack is spinning on a lock is named so ("spinning in kvm_irqfd"); one with only
//! user frames, by its user leaf.

use std::collections::HashMap;
use std::path::Path;

use vmscale_run::findings::{CodePath, EntryPaths, OnCpuPaths};
use vmscale_sample::{Samples, Symbolizer};

/// Paths kept per kind.
const TOP_PATHS: usize = 12;

/// Which samples are the subject's.
#[derive(Debug, Clone, Default)]
pub struct SampledSubject {
    /// Per thread, its windows (sorted): samples outside them are not the subject's. A
    /// thread with an empty list counts whole.
    pub windows: HashMap<u32, Vec<(u64, u64)>>,
}

impl SampledSubject {
    fn keeps(&self, tid: u32, ts: u64) -> bool {
        match self.windows.get(&tid) {
            None => false,
            Some(list) if list.is_empty() => true,
            Some(list) => {
                let at = list.partition_point(|w| w.1 <= ts);
                list.get(at).is_some_and(|w| w.0 <= ts)
            }
        }
    }
}

/// Frames that are library routines or lock and scheduler plumbing: a path is named by
/// the function that called them.
fn is_routine(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "memset",
        "memcpy",
        "memmove",
        "__memset",
        "__memcpy",
        "__memmove",
        "copy_user",
        "copy_to_user",
        "copy_from_user",
        "_copy_to_user",
        "_copy_from_user",
        "rep_movs",
        "rep_stos",
        "clear_page",
        "copy_page",
        "strlen",
        "strcmp",
        "strncpy",
        "__list_",
        "_raw_",
        "__raw_",
        "queued_",
        "native_queued",
        "__pv_queued",
        "pv_",
        "__x86_indirect_thunk",
        "__x86_return_thunk",
        "srso_",
        "entry_SYSCALL",
        "do_syscall_64",
        "asm_",
        "irq_",
        "__irq_",
        "sysvec_",
        "__sysvec_",
        "native_",
        // Sleeping locks' plumbing: the path is the function that took the lock.
        "rwsem_",
        "down_read",
        "down_write",
        "__down_",
        "mutex_",
        "__mutex_",
        "osq_",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// How a path spinning on a sleeping lock is said: it spins on the lock's owner, on the
/// queue of spinners before it (osq_lock), or until a reader-owned rwsem's timeout.
pub const OPTIMISTIC_SPIN: &str = "optimistic spinning on a sleeping lock";

/// Whether one of a kernel stack's three innermost frames (leaf first) starts with one of
/// `prefixes`: where a lock's spin loops sit.
fn spins_in(names: &[String], prefixes: &[&str]) -> bool {
    names
        .iter()
        .take(3)
        .any(|n| prefixes.iter().any(|p| n.starts_with(p)))
}

/// A kernel stack (leaf first) spinning on a sleeping lock before sleeping on it
/// (optimistic spinning): for a mutex inside the lock's events, for an rwsem before them
/// (6.x opens an rwsem's wait only once the spin gives up).
fn spinning_on_owner(names: &[String]) -> bool {
    spins_in(
        names,
        &[
            "rwsem_spin_on_owner",
            "rwsem_optimistic_spin",
            "mutex_spin_on_owner",
            "mutex_optimistic_spin",
            "osq_lock",
        ],
    )
}

/// A kernel stack (leaf first) spinning on a lock.
fn spinning(names: &[String]) -> bool {
    spins_in(
        names,
        &[
            "native_queued_spin_lock_slowpath",
            "__pv_queued_spin_lock_slowpath",
            "queued_spin_lock_slowpath",
            "queued_read_lock_slowpath",
            "queued_write_lock_slowpath",
        ],
    )
}

/// What a kernel stack (leaf first) shows of the kernel's tracing at work (writing an
/// event, taking a stack for it, running a BPF program on it): the recording's own cost,
/// named by its event where a frame tells it, never the subject's code path.
fn tracing(names: &[String]) -> Option<String> {
    const MACHINERY: &[&str] = &[
        "trace_event_buffer_",
        "trace_event_raw_event_",
        "trace_buffer_lock_reserve",
        // Not "rb_": the ring buffer's inner functions sit under ring_buffer_*, and
        // rb_insert_color, rb_erase are the red-black trees every subsystem uses.
        "ring_buffer_",
        "__ftrace_trace_stack",
        "__trace_stack",
        "event_triggers_call",
        "stacktrace_trigger",
        "perf_trace_",
        "__bpf_trace_",
        "bpf_trace_run",
        "bpf_prog_",
    ];
    let traced = names
        .iter()
        .take(24)
        .any(|n| MACHINERY.iter().any(|m| n.starts_with(m)));
    if !traced {
        return None;
    }
    let event = names.iter().find_map(|n| {
        ["trace_event_raw_event_", "perf_trace_", "__bpf_trace_"]
            .iter()
            .find_map(|p| n.strip_prefix(p))
    });
    Some(match event {
        // The function is the event class's ("mmap_lock" writes all three mmap_lock
        // events), so the class is what is named.
        Some(event) => format!("the recording's tracing ({event} events)"),
        None => "the recording's tracing".into(),
    })
}

/// The path a kernel stack (function names, leaf first) is named by.
pub fn kernel_path(names: &[String]) -> Option<String> {
    let leaf = names.first()?;
    if let Some(tracing) = tracing(names) {
        return Some(tracing);
    }
    let owner = names.iter().find(|n| !is_routine(n));
    if spinning_on_owner(names) {
        return Some(match owner {
            Some(owner) => format!("{OPTIMISTIC_SPIN} in {owner}"),
            None => OPTIMISTIC_SPIN.into(),
        });
    }
    if spinning(names) {
        return Some(match owner {
            Some(owner) => format!("spinning on a lock in {owner}"),
            None => "spinning on a lock".into(),
        });
    }
    // A clock sample cannot interrupt code that runs with interrupts off: it fires as soon
    // as they come back, at the unlock that re-enables them. Such samples are the time
    // the caller spent in that critical section.
    if is_irq_unlock(leaf) {
        return Some(match owner {
            Some(owner) => {
                format!("{owner} with interrupts off (sampled as {leaf} re-enabled them)")
            }
            None => format!("interrupts off (sampled at {leaf})"),
        });
    }
    Some(match owner {
        Some(owner) if owner == leaf => owner.clone(),
        Some(owner) => format!("{leaf} in {owner}"),
        None => leaf.clone(),
    })
}

/// An unlock that re-enables interrupts (spin_unlock_irq, _irqrestore, and the rwlock's).
fn is_irq_unlock(name: &str) -> bool {
    [
        "_raw_spin_unlock_irq",
        "_raw_write_unlock_irq",
        "_raw_read_unlock_irq",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// The function a path names (its owner), for matching it against lock takers.
pub fn path_function(path: &str) -> &str {
    let path = path.trim_start_matches("spinning on a lock in ");
    let path = path.split(" with interrupts off").next().unwrap_or(path);
    path.rsplit(" in ").next().unwrap_or(path)
}

/// How a kernel stack (leaf first) entered the kernel: the system call (the frame do_syscall_64
/// called), a page fault, an interrupt, or for a kernel thread its outermost function.
pub fn entry(names: &[String]) -> Option<String> {
    if let Some(at) = names.iter().position(|n| n.starts_with("do_syscall_64")) {
        // Sampled in do_syscall_64 itself: the way in and out of every system call (its
        // checks, the work it does on return), no call's own code.
        // The work on the way in or out (syscall_trace_enter, syscall_exit_work) names no
        // call either.
        let call = at.checked_sub(1).map(|i| names[i].as_str());
        let Some(call) = call.filter(|c| !c.starts_with("syscall_")) else {
            return Some(format!("{} (entering and leaving system calls)", names[at]));
        };
        if RETURN_TO_USER.iter().any(|r| call.starts_with(r)) {
            return Some(return_work(&names[..at - 1]));
        }
        let call = call
            .trim_start_matches("__x64_sys_")
            .trim_start_matches("__arm64_sys_")
            .trim_start_matches("__do_sys_")
            .trim_start_matches("ksys_");
        return Some(format!("{call} (system call)"));
    }
    if names
        .iter()
        .any(|n| n.starts_with("exc_page_fault") || n.starts_with("asm_exc_page_fault"))
    {
        return Some("page faults".into());
    }
    if let Some(irq) = names.iter().find(|n| {
        n.starts_with("sysvec_")
            || n.starts_with("asm_sysvec_")
            || n.starts_with("common_interrupt")
    }) {
        return Some(format!("interrupt ({})", irq.trim_start_matches("asm_")));
    }
    names
        .iter()
        .rev()
        .find(|n| !n.starts_with("ret_from_fork"))
        .map(|n| format!("{n} (kernel thread)"))
}

/// The kernel's work on the way back to user space after a system call, inlined into
/// do_syscall_64 on some kernels: not the call's own code.
const RETURN_TO_USER: [&str; 3] = [
    "exit_to_user_mode_loop",
    "exit_to_user_mode_prepare",
    "irqentry_exit_to_user_mode",
];

/// What the return to user space did, from the frames it called (leaf first): a task that
/// exits on a signal tears its memory down there (do_exit), a signal is delivered, or work
/// deferred to that moment runs (task_work_run: the last fput of a file closed).
fn return_work(called: &[String]) -> String {
    let has = |f: &str| called.iter().position(|n| n == f);
    if has("do_exit").is_some() {
        return "do_exit (the task exiting, on its way back to user space)".into();
    }
    if let Some(at) = has("task_work_run") {
        let work = at
            .checked_sub(1)
            .map_or("task_work_run", |i| called[i].as_str());
        return format!("{work} (deferred task work, on the way back to user space)");
    }
    if has("get_signal").is_some() || has("arch_do_signal_or_restart").is_some() {
        return "signal delivery (on the way back to user space)".into();
    }
    match called.last() {
        Some(f) => format!("{f} (on the way back to user space)"),
        None => "returning to user space".into(),
    }
}

/// The subject's samples by path, kernel and user apart, leaving out those `in_lock_waits`
/// (a spinning waiter's: the lock's wait, said by its own finding); `None` without samples.
pub fn paths(
    trace_dir: &Path,
    subject: &SampledSubject,
    in_lock_waits: &crate::sampled_waits::SamplesInWaits,
) -> Option<OnCpuPaths> {
    if subject.windows.is_empty() || !Samples::exist(trace_dir) {
        return None;
    }
    let samples = Samples::open(trace_dir).ok()?;
    let mut symbols = Symbolizer::load(&samples, trace_dir).ok()?;
    let mut kernel: HashMap<String, u64> = HashMap::new();
    let mut user: HashMap<String, u64> = HashMap::new();
    let mut entries: HashMap<String, (u64, HashMap<String, u64>)> = HashMap::new();
    let mut out = OnCpuPaths {
        period_ns: samples.meta().period_ns,
        ..OnCpuPaths::default()
    };
    let mut index = 0;
    samples
        .for_each(|s| {
            index += 1;
            if !subject.keeps(s.tid, s.ts) {
                return;
            }
            if in_lock_waits.contains(index - 1) {
                out.lock_wait_samples += 1;
                return;
            }
            out.samples += 1;
            if s.guest {
                out.guest_samples += 1;
                return;
            }
            if !s.kernel.is_empty() {
                out.kernel_samples += 1;
                let names: Vec<String> = s
                    .kernel
                    .iter()
                    .take(24)
                    .map(|&ip| symbols.kernel(ip).name())
                    .collect();
                if let Some(path) = kernel_path(&names) {
                    let by_entry = entries
                        .entry(entry(&names).unwrap_or_default())
                        .or_default();
                    by_entry.0 += 1;
                    *by_entry.1.entry(path.clone()).or_default() += 1;
                    *kernel.entry(path).or_default() += 1;
                }
            } else if let Some(&leaf) = s.user.first() {
                out.user_samples += 1;
                let name = symbols.user(s.pid, s.ts, leaf).name();
                *user.entry(name).or_default() += 1;
            }
        })
        .ok()?;
    out.kernel = top(kernel);
    out.user = top(user);
    let mut entries: Vec<EntryPaths> = entries
        .into_iter()
        .map(|(entry, (samples, paths))| {
            let mut paths = top(paths);
            paths.truncate(3);
            EntryPaths {
                entry,
                samples,
                paths,
            }
        })
        .collect();
    entries.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.entry.cmp(&b.entry)));
    entries.truncate(TOP_PATHS);
    out.entries = entries;
    Some(out)
}

fn top(paths: HashMap<String, u64>) -> Vec<CodePath> {
    let mut out: Vec<CodePath> = paths
        .into_iter()
        .map(|(path, samples)| CodePath { path, samples })
        .collect();
    out.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.path.cmp(&b.path)));
    out.truncate(TOP_PATHS);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_path_is_the_function_that_called_the_routine() {
        assert_eq!(
            kernel_path(&names(&["kvm_irqfd_deassign", "kvm_irqfd", "kvm_vm_ioctl"])).as_deref(),
            Some("kvm_irqfd_deassign")
        );
        assert_eq!(
            kernel_path(&names(&["clear_page_erms", "__handle_mm_fault"])).as_deref(),
            Some("clear_page_erms in __handle_mm_fault")
        );
        assert_eq!(
            kernel_path(&names(&[
                "native_queued_spin_lock_slowpath",
                "_raw_spin_lock_irq",
                "kvm_irqfd_deassign"
            ]))
            .as_deref(),
            Some("spinning on a lock in kvm_irqfd_deassign")
        );
        let irqs_off = names(&["_raw_spin_unlock_irq", "kvm_irqfd", "kvm_vm_ioctl"]);
        assert_eq!(
            kernel_path(&irqs_off).as_deref(),
            Some("kvm_irqfd with interrupts off (sampled as _raw_spin_unlock_irq re-enabled them)")
        );
        assert_eq!(path_function(&kernel_path(&irqs_off).unwrap()), "kvm_irqfd");
        assert_eq!(
            path_function("clear_page_erms in __handle_mm_fault"),
            "__handle_mm_fault"
        );
        assert_eq!(kernel_path(&[]), None);
        // A sleeping lock's optimistic spin, and its slow path, are named by the taker.
        assert_eq!(
            kernel_path(&names(&[
                "rwsem_spin_on_owner",
                "rwsem_optimistic_spin",
                "rwsem_down_write_slowpath",
                "down_write_killable",
                "__vm_munmap"
            ]))
            .as_deref(),
            Some("optimistic spinning on a sleeping lock in __vm_munmap")
        );
        assert_eq!(
            kernel_path(&names(&[
                "rwsem_down_write_slowpath",
                "down_write",
                "__vm_munmap"
            ]))
            .as_deref(),
            Some("rwsem_down_write_slowpath in __vm_munmap")
        );
        assert_eq!(
            path_function("optimistic spinning on a sleeping lock in __vm_munmap"),
            "__vm_munmap"
        );
    }

    #[test]
    fn a_system_call_is_named_by_the_frame_under_do_syscall_64_and_its_own_code_as_such() {
        assert_eq!(
            entry(&names(&["alloc_fd", "__x64_sys_dup", "do_syscall_64"])).as_deref(),
            Some("dup (system call)")
        );
        assert_eq!(
            entry(&names(&["do_syscall_64", "entry_SYSCALL_64_after_hwframe"])).as_deref(),
            Some("do_syscall_64 (entering and leaving system calls)")
        );
        assert_eq!(
            entry(&names(&["syscall_trace_enter", "do_syscall_64"])).as_deref(),
            Some("do_syscall_64 (entering and leaving system calls)")
        );
        // The work on the way back to user space is no system call of its own: a task
        // killed by its process's exit tears the memory down there.
        let exiting = names(&[
            "unmap_page_range",
            "exit_mmap",
            "__mmput",
            "do_exit",
            "do_group_exit",
            "get_signal",
            "arch_do_signal_or_restart",
            "exit_to_user_mode_loop",
            "do_syscall_64",
        ]);
        assert_eq!(
            entry(&exiting).as_deref(),
            Some("do_exit (the task exiting, on its way back to user space)")
        );
        let deferred = names(&[
            "__fput",
            "task_work_run",
            "exit_to_user_mode_loop",
            "do_syscall_64",
        ]);
        assert_eq!(
            entry(&deferred).as_deref(),
            Some("__fput (deferred task work, on the way back to user space)")
        );
        let signal = names(&[
            "get_signal",
            "arch_do_signal_or_restart",
            "exit_to_user_mode_loop",
            "do_syscall_64",
        ]);
        assert_eq!(
            entry(&signal).as_deref(),
            Some("signal delivery (on the way back to user space)")
        );
    }

    #[test]
    fn a_sample_in_the_kernels_tracing_is_the_recordings_cost_named_by_its_event() {
        let stack = names(&[
            "unwind_next_frame",
            "arch_stack_walk",
            "stack_trace_save",
            "__ftrace_trace_stack",
            "event_triggers_call",
            "trace_event_buffer_commit",
            "trace_event_raw_event_contention_begin",
            "queued_spin_lock_slowpath",
            "_raw_spin_lock",
            "alloc_fd",
        ]);
        assert_eq!(
            kernel_path(&stack).as_deref(),
            Some("the recording's tracing (contention_begin events)")
        );
        // A red-black tree's function is not the ring buffer's.
        assert_eq!(
            kernel_path(&names(&["rb_insert_color", "timerqueue_add"])).as_deref(),
            Some("rb_insert_color")
        );
    }
}
