//! The "explain" section: for the worst sleeping locks, one numbered sentence saying whose
//! hold the waiters sat behind and what that holder was doing, then the lock's holders and
//! how their time splits.
//!
//! The analysis already ranked locks, holders and activities; nothing here reorders them,
//! so the section agrees with run.json.

use vmscale_run::findings::{ActivityShare, HolderActivity, LockHolders};
use vmscale_run::TraceSection;

use crate::grid::Grid;
use crate::units;

pub(crate) const TITLE: &str = "explain: what the holders of contended sleeping locks were doing";
/// Locks explained; the worst first.
const LOCKS: usize = 5;
/// Activities shown per holder and per lock.
const SHARES: usize = 3;

/// One explained lock.
pub(crate) struct Explained {
    pub sentence: String,
    /// How the lock's whole wait splits, e.g. "asleep in handle_userfault 98.1%, ...".
    pub split: String,
    /// One row per holder.
    pub holders: Grid,
    /// Held-across-sleep lines, worst first.
    pub sleeps: Vec<String>,
}

/// The explained locks, worst first; empty when the trace has no sleeping-lock waits.
pub(crate) fn explain(trace: &TraceSection) -> Vec<Explained> {
    trace
        .holders
        .iter()
        .filter(|l| l.total_wait_ns > 0)
        .take(LOCKS)
        .map(explain_lock)
        .collect()
}

/// "612 ms", "1.50 s", "412 us".
pub(crate) fn duration(ns: u64) -> String {
    let ns = ns as f64;
    if ns >= 1e9 {
        format!("{} s", units::significant(ns / 1e9, 3, 2))
    } else if ns >= 1e6 {
        format!("{} ms", units::significant(ns / 1e6, 3, 1))
    } else {
        format!("{} us", units::significant(ns / 1e3, 3, 1))
    }
}

fn share_of(part: u64, whole: u64) -> String {
    if whole == 0 {
        return units::MISSING.into();
    }
    // Whole percents read best; below 10% a decimal keeps small shares from showing as 0.
    let percent = part as f64 * 100.0 / whole as f64;
    if percent >= 9.95 {
        format!("{percent:.0}%")
    } else {
        format!("{percent:.1}%")
    }
}

/// What a holder was doing, as words: "asleep in handle_userfault", "waiting on mutex in X".
fn doing(share: &ActivityShare) -> String {
    match share.activity {
        HolderActivity::Asleep => format!("asleep in {}", share.detail),
        HolderActivity::NestedWait => format!("waiting on {}", share.detail),
        HolderActivity::Unknown => format!("unknown ({})", share.detail),
        HolderActivity::Runnable => "runnable (not on a CPU)".into(),
        HolderActivity::Handoff => "handoff between holders".into(),
        HolderActivity::Running => "running".into(),
    }
}

fn shares(shares: &[ActivityShare], whole: u64) -> String {
    let mut parts: Vec<String> = shares
        .iter()
        .take(SHARES)
        .map(|s| format!("{} {}", doing(s), share_of(s.wait_ns, whole)))
        .collect();
    if shares.len() > SHARES {
        parts.push(format!("{} more", shares.len() - SHARES));
    }
    parts.join(", ")
}

fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn sentence(lock: &LockHolders) -> String {
    let head = format!(
        "{}: {} waited {} in total",
        lock.name,
        plural(lock.waiter_count, "waiter"),
        duration(lock.total_wait_ns)
    );
    if let Some(sleep) = lock.held_across_sleep.first() {
        let at_least = if sleep.held_at_least { "at least " } else { "" };
        return format!(
            "{head}, {} of it while the holder {}/{} slept in {} (held {at_least}{})",
            share_of(sleep.waiter_wait_ns, lock.total_wait_ns),
            sleep.holder_comm,
            sleep.holder_pid,
            sleep.function,
            duration(sleep.held_ns)
        );
    }
    let Some(top) = lock.activity.first() else {
        return head;
    };
    let holder = match lock.holders.first() {
        Some(h) => format!("the holder ({}/{}) was", h.comm, h.pid),
        None => "the holder was".into(),
    };
    let what = match top.activity {
        HolderActivity::Handoff => "the lock was passing between holders".to_string(),
        HolderActivity::Unknown => format!("the holder is unknown ({})", top.detail),
        _ => format!("{holder} {}", doing(top)),
    };
    format!(
        "{head}, {} of it while {what}",
        share_of(top.wait_ns, lock.total_wait_ns)
    )
}

fn explain_lock(lock: &LockHolders) -> Explained {
    let mut holders = Grid::new(&[
        ("holder", false),
        ("holds", true),
        ("waiters' time behind it", true),
        ("what it was doing", false),
    ]);
    for holder in &lock.holders {
        holders.rows.push(vec![
            format!("{}/{}", holder.comm, holder.pid),
            holder.holds.to_string(),
            duration(holder.waited_behind_ns),
            shares(&holder.activity, holder.waited_behind_ns),
        ]);
    }
    let sleeps = lock
        .held_across_sleep
        .iter()
        .map(|s| {
            let at_least = if s.held_at_least { "at least " } else { "" };
            format!(
                "held across a sleep: {}/{} slept {} in {} while holding it ({}, held \
                 {at_least}{}); {} waited {} meanwhile",
                s.holder_comm,
                s.holder_pid,
                duration(s.slept_ns),
                s.function,
                plural(s.holds, "hold"),
                duration(s.held_ns),
                plural(s.waiters, "waiter"),
                duration(s.waiter_wait_ns)
            )
        })
        .collect();
    Explained {
        sentence: sentence(lock),
        split: shares(&lock.activity, lock.total_wait_ns),
        holders,
        sleeps,
    }
}

/// The section for the terminal table; `layout` draws a grid. Empty without findings.
pub(crate) fn terminal(trace: &TraceSection, layout: impl Fn(&Grid) -> String) -> String {
    let explained = explain(trace);
    if explained.is_empty() {
        return String::new();
    }
    let mut out = format!("\n{TITLE}\n");
    for (rank, e) in explained.iter().enumerate() {
        out.push_str(&format!("  {}. {}\n", rank + 1, e.sentence));
    }
    for (rank, e) in explained.iter().enumerate() {
        out.push_str(&format!("\n  {}. wait split: {}\n", rank + 1, e.split));
        for line in &e.sleeps {
            out.push_str(&format!("     {line}\n"));
        }
        if !e.holders.rows.is_empty() {
            out.push_str(&layout(&e.holders));
        }
    }
    out
}

/// The section in Markdown; `table` draws a grid, `code` quotes a symbol.
pub(crate) fn markdown(
    trace: &TraceSection,
    table: impl Fn(&Grid) -> String,
    code: impl Fn(&str) -> String,
) -> String {
    let mut explained = explain(trace);
    if explained.is_empty() {
        return String::new();
    }
    let mut out =
        "\n#### Explain: what the holders of contended sleeping locks were doing\n\n".to_string();
    for (rank, e) in explained.iter().enumerate() {
        out.push_str(&format!("{}. {}\n", rank + 1, e.sentence));
    }
    for (rank, e) in explained.iter_mut().enumerate() {
        out.push_str(&format!("\nLock {}, wait split: {}\n", rank + 1, e.split));
        for line in &e.sleeps {
            out.push_str(&format!("\n- {line}\n"));
        }
        if !e.holders.rows.is_empty() {
            for row in &mut e.holders.rows {
                row[0] = code(&row[0]);
            }
            out.push('\n');
            out.push_str(&table(&e.holders));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(duration(612_345_678), "612 ms");
        assert_eq!(duration(1_500_000_000), "1.50 s");
        assert_eq!(duration(1_500_000), "1.5 ms");
        assert_eq!(duration(412_000), "412 us");
        assert_eq!(share_of(98, 100), "98%");
        assert_eq!(share_of(98, 10_000), "1.0%");
        assert_eq!(share_of(1, 0), units::MISSING);
    }
}
