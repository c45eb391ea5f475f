//! What a sleep is: where it slept, and what kind of event it waited for.
//!
//! A sleeping stack goes through the scheduler and generic wait helpers
//! (`schedule_timeout`, `wait_for_completion`) before it reaches the function that decided
//! to wait. That function is the sleep's site; where it is itself a helper that waits for
//! someone else's work (`__flush_workqueue`, `synchronize_rcu`), its caller is named too,
//! since that is the code that asked for the wait ("__flush_workqueue in
//! kvm_irqfd_deassign"). The frames also say what the sleep waits for: a timer, an RCU
//! grace period, a workqueue's workers, I/O, a futex, a pipe, other CPUs.

/// Frames that say how a task sleeps, not why: the scheduler, tracing, generic waits.
fn is_sleep_plumbing(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "trace_event_raw_event_",
        "perf_trace_",
        "__traceiter_",
        "__schedule",
        "schedule",
        "io_schedule",
        "preempt_schedule",
        "__cond_resched",
        "do_wait_for_common",
        "__wait_for_common",
        "wait_for_common",
        "__wait_on_bit",
        "out_of_line_wait_on_bit",
        "bit_wait",
        "__wait_event",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Generic waits on a completion or a wait queue: the function that called them is where
/// the sleep was decided.
fn is_generic_wait(name: &str) -> bool {
    name.starts_with("wait_for_completion")
        || name == "wait_woken"
        // wait_event_interruptible_locked(_irq)'s loop, as timerfd_read uses it.
        || name.starts_with("do_wait_intr")
}

/// Helpers that wait for work other tasks do: their caller is named beside them.
const WAITS_FOR_OTHERS: &[&str] = &[
    "__flush_workqueue",
    "flush_workqueue",
    "drain_workqueue",
    "__flush_work",
    "flush_work",
    "cancel_work_sync",
    "__cancel_work_sync",
    "flush_delayed_work",
    "synchronize_rcu",
    "synchronize_rcu_normal",
    "synchronize_rcu_expedited",
    "synchronize_srcu",
    "synchronize_srcu_expedited",
    "__synchronize_srcu",
    "__wait_rcu_gp",
    "rcu_barrier",
    "kthread_stop",
];

/// A frame's function, without its offset and without the compiler's suffix for a clone of
/// it (`__synchronize_srcu.part.0` is `__synchronize_srcu`'s own code).
fn name_of(frame: &str) -> &str {
    let name = frame.split(['+', ' ']).next().unwrap_or(frame);
    name.split('.').next().unwrap_or(name)
}

fn names(frames: &[String]) -> impl Iterator<Item = &str> {
    frames
        .iter()
        .map(|f| name_of(f))
        .filter(|name| !name.is_empty() && !name.starts_with("0x"))
}

/// The function a sleeping stack slept in (frames symbolized, innermost first): its first
/// frame outside the scheduler, tracing and generic waits; for a helper that waits for
/// others' work, "helper in caller".
pub fn sleep_site(frames: &[String]) -> Option<String> {
    let mut rest = names(frames).skip_while(|n| is_sleep_plumbing(n) || is_generic_wait(n));
    let site = rest.next()?;
    if WAITS_FOR_OTHERS.contains(&site) {
        // The caller that is not itself one of the helpers (__wait_rcu_gp under
        // synchronize_rcu_normal under synchronize_rcu).
        if let Some(caller) = rest.find(|n| !WAITS_FOR_OTHERS.contains(n)) {
            return Some(format!("{site} in {caller}"));
        }
    }
    Some(site.to_string())
}

/// What the sleep at interned stack `stack` waits for, when its frames say it (None: no
/// stack, or frames that do not tell).
pub(crate) fn stack_wait_kind(
    stacks: &crate::stacks::StackTable,
    stack: Option<crate::stacks::StackId>,
    symbols: &dyn crate::symbols::Symbols,
) -> Option<&'static str> {
    let frames: Vec<String> = stacks
        .frames(stack?)
        .iter()
        .map(|&a| symbols.frame(a))
        .collect();
    wait_kind(&frames)
}

/// Of the kinds one sleep site's stacks gave, each with the time it weighs, the heaviest
/// (ties by name, so a trace is said the same on every reading).
pub(crate) fn heaviest_kind<'a>(
    kinds: impl IntoIterator<Item = (&'a &'static str, &'a u64)>,
) -> Option<&'static str> {
    kinds
        .into_iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(kind, _)| *kind)
}

/// What a sleep waits for, as a phrase, when its frames say it.
pub fn wait_kind(frames: &[String]) -> Option<&'static str> {
    const KINDS: &[(&[&str], &str)] = &[
        (
            &[
                "__flush_workqueue",
                "flush_workqueue",
                "drain_workqueue",
                "__flush_work",
                "flush_work",
                "cancel_work_sync",
                "__cancel_work_sync",
                "flush_delayed_work",
            ],
            "a workqueue's workers to finish queued work",
        ),
        (
            &[
                "synchronize_rcu",
                "synchronize_rcu_normal",
                "synchronize_rcu_expedited",
                "synchronize_srcu",
                "synchronize_srcu_expedited",
                "__synchronize_srcu",
                "__wait_rcu_gp",
                "rcu_barrier",
                "synchronize_rcu_tasks_trace",
            ],
            "an RCU grace period",
        ),
        (
            &[
                "do_nanosleep",
                "hrtimer_nanosleep",
                "schedule_hrtimeout_range",
                "schedule_hrtimeout_range_clock",
                "msleep",
                "usleep_range_state",
                "timerfd_read",
                "timerfd_read_iter",
            ],
            "a timer",
        ),
        (
            &[
                "io_schedule",
                "io_schedule_timeout",
                "folio_wait_bit_common",
                "folio_wait_bit",
                "__folio_lock",
                "submit_bio_wait",
                "blk_mq_get_tag",
                "wait_on_page_writeback",
                "folio_wait_writeback",
                "jbd2_log_wait_commit",
                "__sync_dirty_buffer",
            ],
            "I/O",
        ),
        (
            &["futex_do_wait", "futex_wait_queue", "futex_wait"],
            "a futex (a user-space lock or condition)",
        ),
        (
            &[
                "pipe_read",
                "anon_pipe_read",
                "pipe_write",
                "anon_pipe_write",
                "pipe_wait_readable",
                "pipe_wait_writable",
            ],
            "a pipe's other end",
        ),
        (
            &["ep_poll", "do_sys_poll", "do_select", "do_epoll_wait"],
            "events on a file (poll)",
        ),
        (&["do_wait", "kernel_wait4", "__do_wait"], "a child to exit"),
        (&["handle_userfault"], "a userfaultfd page to be resolved"),
        (
            &[
                "smp_call_function_many_cond",
                "stop_machine",
                "stop_one_cpu",
                "stop_machine_cpuslocked",
            ],
            "other CPUs' work",
        ),
    ];
    names(frames).find_map(|name| {
        KINDS
            .iter()
            .find(|(functions, _)| functions.contains(&name))
            .map(|(_, kind)| *kind)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| format!("{n}+0x10")).collect()
    }

    #[test]
    fn wait_loops_and_compiler_clones_are_read_through() {
        // timerfd_read_iter waits in wait_event_interruptible_locked_irq's loop.
        let timerfd = frames(&[
            "schedule",
            "do_wait_intr_irq",
            "timerfd_read_iter",
            "vfs_read",
        ]);
        assert_eq!(sleep_site(&timerfd).as_deref(), Some("timerfd_read_iter"));
        assert_eq!(wait_kind(&timerfd), Some("a timer"));
        let srcu = frames(&[
            "schedule_timeout",
            "wait_for_completion",
            "__synchronize_srcu.part.0",
            "synchronize_srcu_expedited",
            "kvm_swap_active_memslots",
        ]);
        assert_eq!(
            sleep_site(&srcu).as_deref(),
            Some("__synchronize_srcu in kvm_swap_active_memslots")
        );
    }

    #[test]
    fn a_sleep_is_named_by_the_function_that_decided_to_wait() {
        let userfault = frames(&[
            "__schedule",
            "schedule",
            "handle_userfault",
            "__handle_mm_fault",
        ]);
        assert_eq!(sleep_site(&userfault).as_deref(), Some("handle_userfault"));
        assert_eq!(
            wait_kind(&userfault),
            Some("a userfaultfd page to be resolved")
        );
        // A flush is named with the code that asked for it, and waits for workers.
        let flush = frames(&[
            "__schedule",
            "schedule",
            "schedule_timeout",
            "wait_for_completion",
            "__flush_workqueue",
            "kvm_irqfd_deassign",
            "kvm_vm_ioctl",
        ]);
        assert_eq!(
            sleep_site(&flush).as_deref(),
            Some("__flush_workqueue in kvm_irqfd_deassign")
        );
        assert_eq!(
            wait_kind(&flush),
            Some("a workqueue's workers to finish queued work")
        );
        // RCU helpers nest: the caller named is the first that is not one of them.
        let rcu = frames(&[
            "schedule_timeout",
            "wait_for_completion_state",
            "__wait_rcu_gp",
            "synchronize_rcu_normal",
            "event_trace_del_tracer",
        ]);
        assert_eq!(
            sleep_site(&rcu).as_deref(),
            Some("__wait_rcu_gp in event_trace_del_tracer")
        );
        assert_eq!(wait_kind(&rcu), Some("an RCU grace period"));
        let timer = frames(&[
            "schedule_hrtimeout_range",
            "do_nanosleep",
            "hrtimer_nanosleep",
        ]);
        assert_eq!(sleep_site(&timer).as_deref(), Some("do_nanosleep"));
        assert_eq!(wait_kind(&timer), Some("a timer"));
        assert_eq!(sleep_site(&frames(&["schedule"])), None);
        assert_eq!(wait_kind(&frames(&["some_driver_wait"])), None);
    }
}
