//! What waiting on one lock is, and who held it, as the trace shows it.

use vmscale_run::findings::{HolderActivity, LockHolders, TraceSection};
use vmscale_run::verdict::{Cause, ExplainedBy};
use vmscale_run::LockContention;
use vmscale_stats::units::duration;

use super::{holders_of, percent};

/// The cause of waiting on a lock, and the holder as the trace shows it.
pub(crate) fn lock_cause(
    trace: &TraceSection,
    lock: Option<&LockContention>,
) -> (Cause, Option<String>) {
    let Some(lock) = lock else {
        return (Cause::LockWait, None);
    };
    if lock.kind.is_spinning() {
        // A spinning waiter is never woken by its holder: the trace cannot name it.
        return (Cause::LockSpin, None);
    }
    let Some(holders) = holders_of(trace, lock.lock_addr) else {
        return (Cause::LockWait, None);
    };
    let (across_sleep, holder) = named_holder(holders);
    let cause = Cause::LockWait;
    if let Some(spun) = spun_holder(holders).filter(|_| !across_sleep) {
        return (cause, Some(spun));
    }
    let holder = match (holder, proven_coverage(holders)) {
        // Where the trace proves little, that comes first and no holder speaks for the rest.
        (Some(holder), Some((coverage, proven))) if proven >= NAMED_HOLDER_FLOOR => {
            Some(format!("{coverage}; where proven: {holder}"))
        }
        (_, Some((coverage, _))) => Some(format!("unknown: {coverage}")),
        (holder, None) => holder,
    };
    (cause, holder)
}

/// Where waiters spent most of their wait spinning on a mutex, what that proves: its owner
/// ran, whoever it was (a spin names no owner).
fn spun_holder(holders: &LockHolders) -> Option<String> {
    let total = holders.total_wait_ns;
    let spun: u64 = holders
        .activity
        .iter()
        .filter(|a| a.activity == HolderActivity::Running && a.detail == crate::holders::SPUN)
        .map(|a| a.wait_ns)
        .sum();
    if total == 0 || spun * 2 < total {
        return None;
    }
    let rest = holders
        .holders
        .first()
        .filter(|h| h.waited_behind_ns * 200 >= total)
        .map(|h| {
            format!(
                "; the longest proven holder, {}/{}, is behind {} of it",
                h.comm,
                h.pid,
                percent(h.waited_behind_ns as f64 / total as f64)
            )
        })
        .unwrap_or_default();
    Some(format!(
        "running: for {} of the {} waited on it a waiter spun, which a mutex's waiter does only \
         while its owner is on a CPU; which task owned it the spin does not say{rest}",
        percent(spun as f64 / total as f64),
        duration(total)
    ))
}

/// A holder is named in the verdict only when the trace proves a holder for at least this
/// share of the waiting on the lock.
const NAMED_HOLDER_FLOOR: f64 = 0.05;

/// How much of the waiting on a sleeping lock the trace proves a holder for, and why the
/// rest has none, with the proven share; `None` when every nanosecond has a proven holder
/// or a handoff.
fn proven_coverage(holders: &LockHolders) -> Option<(String, f64)> {
    let total = holders.total_wait_ns;
    if total == 0 {
        return None;
    }
    let of = |activity: HolderActivity| -> u64 {
        holders
            .activity
            .iter()
            .filter(|a| a.activity == activity)
            .map(|a| a.wait_ns)
            .sum()
    };
    let (unknown, handoff) = (of(HolderActivity::Unknown), of(HolderActivity::Handoff));
    // Under half a percent is said as nothing.
    let shown = |ns: u64| ns * 200 >= total;
    if !shown(unknown) {
        return None;
    }
    let proven = total.saturating_sub(unknown + handoff);
    let mut reasons: Vec<(&str, u64)> = Vec::new();
    for a in holders
        .activity
        .iter()
        .filter(|a| a.activity == HolderActivity::Unknown && shown(a.wait_ns))
    {
        match reasons.iter_mut().find(|r| r.0 == a.detail) {
            Some(r) => r.1 += a.wait_ns,
            None => reasons.push((&a.detail, a.wait_ns)),
        }
    }
    reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
    let why: Vec<String> = reasons
        .iter()
        .map(|(reason, ns)| format!("{} {reason}", percent(*ns as f64 / total as f64)))
        .collect();
    let share = proven as f64 / total as f64;
    let sentence = format!(
        "the trace proves a holder for {} of the {} waited on it{}, and none for {} ({})",
        percent(proven as f64 / total as f64),
        duration(total),
        if shown(handoff) {
            format!(
                " ({} between holders)",
                percent(handoff as f64 / total as f64)
            )
        } else {
            String::new()
        },
        percent(unknown as f64 / total as f64),
        why.join(", ")
    );
    Some((sentence, share))
}

/// The holder the trace proves, and whether it is one asleep while holding the lock for
/// half of the waiting or more. A lock held across sleeps is still a lock waited on: its
/// cause stays lock-wait, and the holder line says what the holders slept in, so that one
/// lock is one cause whichever side of a half its sleeps fall on from run to run.
fn named_holder(holders: &LockHolders) -> (bool, Option<String>) {
    let across_sleep: u64 = holders
        .held_across_sleep
        .iter()
        .map(|h| h.waiter_wait_ns)
        .sum();
    if let Some(worst) = holders.held_across_sleep.first() {
        if holders.total_wait_ns > 0 && across_sleep * 2 >= holders.total_wait_ns {
            return (
                true,
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
        // What the holder did most, and next where that is a fifth of the waiting too: a
        // holder that slept in the I/O for 48% and ran for 40% is said as both, not as one
        // whose share swings either side of the other from run to run.
        let share = |a: &vmscale_run::findings::ActivityShare| {
            if h.waited_behind_ns > 0 {
                a.wait_ns as f64 / h.waited_behind_ns as f64
            } else {
                0.0
            }
        };
        let said: Vec<String> = h
            .activity
            .iter()
            .enumerate()
            .take_while(|&(rank, a)| rank == 0 || (rank == 1 && share(a) >= SECOND_ACTIVITY_SAID))
            .map(|(_, a)| {
                let what = match a.detail.as_str() {
                    "" => a.activity.label().to_string(),
                    detail => format!("{} ({detail})", a.activity.label()),
                };
                format!("{what} for {}", percent(share(a)))
            })
            .collect();
        let doing = if said.is_empty() {
            String::new()
        } else {
            format!(", {} of the waiting behind it", said.join(" and "))
        };
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
    // Holders asleep under it for a part of the waiting short of half are said too: the
    // share moves from run to run, and the holder line must not say "running" in one run
    // and "slept" in the next of one program.
    let asleep = holders
        .held_across_sleep
        .first()
        .filter(|_| across_sleep as f64 >= ASLEEP_SAID * holders.total_wait_ns as f64)
        .map(|worst| {
            format!(
                "holders were asleep in {} while holding it for {} of the waiting",
                worst.function,
                percent(across_sleep as f64 / holders.total_wait_ns as f64)
            )
        });
    let holder = [holder, senders, asleep]
        .into_iter()
        .flatten()
        .reduce(|said, more| format!("{said}; {more}"));
    (false, holder)
}

/// The share of a lock's waiting behind holders asleep holding it from which the holder
/// line says so.
const ASLEEP_SAID: f64 = 0.1;

/// What the waiting on a lock was made of: for a sleeping lock, each proven holder's
/// activity (running, asleep in F, waiting for another lock), the handoffs between holders
/// and what the trace cannot attribute; for a spinning lock, that its holder ran.
pub(crate) fn lock_explained_by(
    trace: &TraceSection,
    lock: Option<&LockContention>,
) -> Vec<ExplainedBy> {
    let Some(lock) = lock else {
        return Vec::new();
    };
    if lock.kind.is_spinning() {
        return vec![super::code_paths::spin_holders(trace, lock).unwrap_or_else(|| ExplainedBy {
            what: "a holder running with preemption off (a spinlock's holder never sleeps); the trace does not say which task".into(),
            share: 1.0,
        })];
    }
    let Some(holders) = holders_of(trace, lock.lock_addr) else {
        return Vec::new();
    };
    let total = holders.total_wait_ns.max(1) as f64;
    let mut out: Vec<ExplainedBy> = Vec::new();
    // Per (name or kind, what they did): the holders and the waiting behind them. Holders
    // of one name doing the same are one entry: which of a pool's threads held the lock at
    // a given moment is the scheduler's accident; that the pool held it doing X is the
    // mechanism.
    let mut groups: Vec<HolderPart> = Vec::new();
    // Per activity: the waiting behind the holders said by name, to say the rest.
    let mut listed: Vec<(HolderActivity, &str, u64)> = Vec::new();
    let named = holders
        .holders
        .iter()
        .flat_map(|h| {
            let name = crate::task_names::group_of(&h.comm);
            h.activity.iter().map(move |a| {
                (
                    name.clone(),
                    Some(format!("{}/{}", h.comm, h.pid)),
                    1,
                    a.activity,
                    a.detail.as_str(),
                    a.wait_ns,
                )
            })
        })
        .chain(holders.more_holders.iter().map(|g| {
            (
                g.name.clone(),
                None,
                g.tasks,
                g.activity,
                g.detail.as_str(),
                g.wait_ns,
            )
        }));
    for (name, task, tasks, activity, detail, ns) in named {
        let Some(doing) = holder_doing(activity, detail) else {
            continue;
        };
        match listed
            .iter_mut()
            .find(|(act, d, _)| *act == activity && *d == detail)
        {
            Some(entry) => entry.2 += ns,
            None => listed.push((activity, detail, ns)),
        }
        let part = match groups
            .iter_mut()
            .find(|g| g.name == name && g.doing == doing)
        {
            Some(part) => part,
            None => {
                groups.push(HolderPart {
                    name,
                    doing,
                    ..HolderPart::default()
                });
                groups.last_mut().expect("just pushed")
            }
        };
        part.tasks += tasks;
        part.ns += ns;
        part.named.extend(task);
    }
    for part in groups {
        let what = match (part.tasks, part.named.as_slice()) {
            (1, [task]) => format!("{task} holding it, {}", part.doing),
            (1, _) => format!("a {} task holding it, {}", part.name, part.doing),
            (tasks, []) => format!("{tasks} {} tasks holding it, {}", part.name, part.doing),
            (tasks, named) => format!(
                "{tasks} {} tasks holding it, {} ({}{})",
                part.name,
                part.doing,
                named[..named.len().min(3)].join(", "),
                if tasks > 3 { ", ..." } else { "" }
            ),
        };
        out.push(ExplainedBy {
            what,
            share: part.ns as f64 / total,
        });
    }
    // Holders past the listed ones: the lock's total per activity less the listed share.
    for a in &holders.activity {
        let Some(doing) = holder_doing(a.activity, &a.detail) else {
            continue;
        };
        let said = listed
            .iter()
            .find(|(act, detail, _)| *act == a.activity && *detail == a.detail)
            .map_or(0, |l| l.2);
        let rest = a.wait_ns.saturating_sub(said);
        if rest > 0 {
            out.push(ExplainedBy {
                what: format!("more holders holding it, {doing}"),
                share: rest as f64 / total,
            });
        }
    }
    for a in &holders.activity {
        let what = match a.activity {
            HolderActivity::Handoff => {
                "between holders (released, the next not yet running)".to_string()
            }
            HolderActivity::Unknown => format!("no proven holder: {}", a.detail),
            HolderActivity::Running if a.detail == crate::holders::SPUN => {
                "spinning while an unnamed owner ran on a CPU".to_string()
            }
            _ => continue,
        };
        out.push(ExplainedBy {
            what,
            share: a.wait_ns as f64 / total,
        });
    }
    out.retain(|e| e.share >= 0.005);
    out.sort_by(|a, b| b.share.total_cmp(&a.share).then(a.what.cmp(&b.what)));
    out
}

/// Holders of one name that did one thing, said as one part of a lock's waiting.
#[derive(Default)]
struct HolderPart {
    name: String,
    doing: String,
    /// Distinct tasks, and the first few by name (the holders listed one by one).
    tasks: u64,
    named: Vec<String>,
    ns: u64,
}

/// What a holder did while waiters waited, as said after "holding it, "; None for what is
/// not the holder's doing (a handoff between holders, or no proven holder).
fn holder_doing(activity: HolderActivity, detail: &str) -> Option<String> {
    Some(match activity {
        HolderActivity::Unknown | HolderActivity::Handoff => return None,
        HolderActivity::Asleep => format!("asleep in {detail}"),
        HolderActivity::NestedWait => format!("waiting for {detail}"),
        HolderActivity::Runnable => "runnable, preempted while holding it".into(),
        HolderActivity::Running if detail == crate::holders::SPUN => return None,
        activity => activity.label().to_string(),
    })
}

/// A holder's second activity is said from this share of the waiting behind it.
const SECOND_ACTIVITY_SAID: f64 = 0.2;
