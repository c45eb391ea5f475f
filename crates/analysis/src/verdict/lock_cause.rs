//! What waiting on one lock is, and who held it, as the trace shows it.

use vmscale_run::findings::TraceSection;
use vmscale_run::verdict::Cause;
use vmscale_run::LockContention;
use vmscale_stats::units::duration;

use super::{holders_of, is_spinning, percent};

/// The cause of waiting on a lock, and the holder as the trace shows it.
pub(crate) fn lock_cause(
    trace: &TraceSection,
    lock: Option<&LockContention>,
) -> (Cause, Option<String>) {
    let Some(lock) = lock else {
        return (Cause::LockWait, None);
    };
    if is_spinning(&lock.kind) {
        // A spinning waiter is never woken by its holder: the trace cannot name it.
        return (Cause::LockSpin, None);
    }
    let Some(holders) = holders_of(trace, lock.lock_addr) else {
        return (Cause::LockWait, None);
    };
    let across_sleep: u64 = holders
        .held_across_sleep
        .iter()
        .map(|h| h.waiter_wait_ns)
        .sum();
    if let Some(worst) = holders.held_across_sleep.first() {
        if holders.total_wait_ns > 0 && across_sleep * 2 >= holders.total_wait_ns {
            return (
                Cause::HeldAcrossSleep,
                Some(format!(
                    "{}/{} slept in {} while holding it ({} of {} waiters' time behind such holds)",
                    worst.holder_comm,
                    worst.holder_pid,
                    worst.function,
                    percent(across_sleep as f64 / holders.total_wait_ns as f64),
                    duration(holders.total_wait_ns)
                )),
            );
        }
    }
    let holder = holders.holders.first().map(|h| {
        let doing = h
            .activity
            .first()
            .map(|a| {
                let share = if h.waited_behind_ns > 0 {
                    a.wait_ns as f64 / h.waited_behind_ns as f64
                } else {
                    0.0
                };
                let what = match a.detail.as_str() {
                    "" => a.activity.label().to_string(),
                    detail => format!("{} ({detail})", a.activity.label()),
                };
                format!(", {what} for {} of the waiting behind it", percent(share))
            })
            .unwrap_or_default();
        let doing = if h.ipis_sent > 0 {
            format!(
                "{doing}, and sent {} while waiters queued",
                vmscale_stats::units::plural(h.ipis_sent, "IPI")
            )
        } else {
            doing
        };
        if holders.exact_holds {
            // Every acquisition and release was traced: the holds are the kernel's.
            let holds = vmscale_stats::units::plural(h.holds, "hold");
            let how = match h.shared_holds {
                0 => format!("for writing in {holds}"),
                n if n == h.holds => {
                    format!("for reading (shared with any other readers) in {holds}")
                }
                n => format!("in {holds}, {n} of them for reading (shared)"),
            };
            format!(
                "{}/{} held it {how}; every acquisition and release was traced (mmap_lock events){doing}",
                h.comm, h.pid
            )
        } else if h.shared_holds > 0 {
            // A read hold is shared: other readers may have held it too, unseen.
            format!(
                "{}/{} was among the readers holding it ({} of {} holds shared), so no single holder is named{doing}",
                h.comm, h.pid, h.shared_holds, h.holds
            )
        } else {
            format!("{}/{} held it in {} holds{doing}", h.comm, h.pid, h.holds)
        }
    });
    // Another holder that sent cross-CPU calls while waiters queued is part of the story
    // even when its holds were not the longest.
    let senders = holders
        .holders
        .iter()
        .skip(1)
        .filter(|h| h.ipis_sent > 0)
        .max_by_key(|h| h.ipis_sent)
        .map(|h| {
            format!(
                "{}/{} sent {} in its {} while waiters queued",
                h.comm,
                h.pid,
                vmscale_stats::units::plural(h.ipis_sent, "IPI"),
                vmscale_stats::units::plural(h.holds, "hold")
            )
        });
    let holder = match (holder, senders) {
        (Some(first), Some(sender)) => Some(format!("{first}; {sender}")),
        (first, sender) => first.or(sender),
    };
    (Cause::LockWait, holder)
}
