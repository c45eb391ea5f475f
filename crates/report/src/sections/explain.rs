//! The "explain" section: for the worst sleeping locks, one numbered sentence saying whose
//! hold the waiters sat behind and what that holder was doing, then the lock's holders and
//! how their time splits.
//!
//! Two more parts follow: where the measuring thread's operations spent their time in each
//! measured phase, and the contended spinning locks by wait mode.
//!
//! The analysis already ranked locks, holders and activities; nothing here reorders them,
//! so the section agrees with run.json (the breakdown sentences alone rank phases by their
//! operation's mean, the slowest first).

use vmscale_run::findings::{
    ActivityShare, Component, ComponentKind, HolderActivity, LockHolders, OperationBreakdown,
    PhaseBreakdown, SpinLockWaits, TIMED_SAMPLE,
};
use vmscale_run::TraceSection;

use crate::document::{Block, Entry, Ranked, Section, Text};
use crate::grid::Grid;
use crate::units::{self, duration, plural};

const TITLE: &str = "explain: what the holders of contended sleeping locks were doing";
/// Locks explained; the worst first.
const LOCKS: usize = 5;
/// Activities shown per holder and per lock.
const SHARES: usize = 3;

/// The explain parts that have findings: the holders of sleeping locks, where the measured
/// operations' time went, the contended spinning locks.
pub(crate) fn sections(trace: &TraceSection) -> Vec<Section> {
    [holders(trace), breakdown(trace), spinlocks(trace)]
        .into_iter()
        .flatten()
        .collect()
}

fn holders(trace: &TraceSection) -> Option<Section> {
    let explained = explain(trace);
    if explained.is_empty() {
        return None;
    }
    let mut section = Section::new("holders", TITLE);
    section.blocks.push(Block::Ranked(
        explained
            .iter()
            .map(|e| Ranked::sentence(e.sentence.as_str()))
            .collect(),
    ));
    for (index, e) in explained.into_iter().enumerate() {
        let mut blocks = Vec::new();
        if !e.sleeps.is_empty() {
            blocks.push(Block::Lines(e.sleeps.into_iter().map(Text::from).collect()));
        }
        if !e.holders.rows.is_empty() {
            blocks.push(Block::Table(e.holders.with_code_column(0)));
        }
        section.blocks.push(Block::Entry(Entry {
            rank: index + 1,
            title: format!("wait split: {}", e.split).into(),
            blocks,
        }));
    }
    Some(section)
}

/// One explained lock.
struct Explained {
    pub sentence: String,
    /// How the lock's whole wait splits, e.g. "asleep in handle_userfault 98.1%, ...".
    pub split: String,
    /// One row per holder.
    pub holders: Grid,
    /// Held-across-sleep lines, worst first.
    pub sleeps: Vec<String>,
}

/// The explained locks, worst first; empty when the trace has no sleeping-lock waits.
fn explain(trace: &TraceSection) -> Vec<Explained> {
    trace
        .holders
        .iter()
        .filter(|l| l.total_wait_ns > 0)
        .take(LOCKS)
        .map(explain_lock)
        .collect()
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
            match holder.shared_holds {
                0 => format!("{}/{}", holder.comm, holder.pid),
                n if n == holder.holds => format!("{}/{} (shared: read)", holder.comm, holder.pid),
                n => format!("{}/{} ({n} shared: read)", holder.comm, holder.pid),
            },
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

const BREAKDOWN_TITLE: &str = "explain: where the measured operations' time went";
const SPINLOCKS_TITLE: &str = "explain: contended spinning locks";
/// A spinning waiter is woken by nobody, so no wakeup names the holder.
const SPINLOCKS_ASIDE: &str =
    "a spinning waiter is not woken by the holder, so the trace cannot name who held them";
/// Phases explained in sentences, the slowest operation first.
const PHASES: usize = 8;
/// Spinning locks explained.
const SPINLOCKS: usize = 5;
/// Columns of the breakdown table, one per kind of component, as per-call means.
const KINDS: [ComponentKind; 6] = [
    ComponentKind::OnCpu,
    ComponentKind::Runnable,
    ComponentKind::Lock,
    ComponentKind::Asleep,
    ComponentKind::CrossCpu,
    ComponentKind::Other,
];

/// The operation a phase measured: the one with the most time (the update ioctl).
fn main_operation(phase: &PhaseBreakdown) -> Option<&OperationBreakdown> {
    phase.operations.iter().find(|o| o.count > 0)
}

fn mean(total: u64, count: u64) -> u64 {
    total.checked_div(count).unwrap_or(0)
}

/// A component as words: "runnable", "waiting for rwlock (write) in kvm_mmu_free_roots".
fn component(c: &Component) -> String {
    match c.kind {
        ComponentKind::OnCpu | ComponentKind::Runnable => c.kind.label().into(),
        ComponentKind::Lock => format!("waiting for {}", c.detail),
        ComponentKind::Asleep if c.detail.starts_with('(') => format!("asleep {}", c.detail),
        ComponentKind::Asleep => format!("asleep in {}", c.detail),
        ComponentKind::CrossCpu => format!("waiting for other CPUs to run {}", c.detail),
        ComponentKind::HoldingAsleep => {
            format!("asleep in {} holding a contended lock", c.detail)
        }
        ComponentKind::Other => format!("unknown ({})", c.detail),
    }
}

fn breakdown_sentence(phase: &PhaseBreakdown, op: &OperationBreakdown) -> String {
    let parts: Vec<String> = op
        .components
        .iter()
        .take(SHARES)
        .map(|c| format!("{} {}", share_of(c.total_ns, op.total_ns), component(c)))
        .collect();
    let (what, unit) = match op.syscall {
        TIMED_SAMPLE => ("one timed sample".to_string(), "sample"),
        s if s < 0 => ("the phase".to_string(), "call"),
        _ => (format!("the {} call", op.operation), "call"),
    };
    let mut out = format!(
        "{}: {what} took {} on average ({}): {}",
        phase.label,
        duration(mean(op.total_ns, op.count)),
        plural(op.count, unit),
        parts.join(", ")
    );
    if let Some(w) = op.wakers.first() {
        out.push_str(&format!(
            "; woken {} by {}/{} ({})",
            plural(w.wakeups, "time"),
            w.comm,
            w.pid,
            w.doing
        ));
    }
    out
}

/// Numbered sentences, slowest operation first, then a table with one row per phase in run
/// order.
fn breakdown(trace: &TraceSection) -> Option<Section> {
    let (sentences, grid) = breakdown_findings(trace)?;
    let mut section = Section::new("breakdown", BREAKDOWN_TITLE);
    section.blocks = vec![
        Block::Ranked(sentences.into_iter().map(Ranked::sentence).collect()),
        Block::Paragraph(BREAKDOWN_NOTE.into()),
        Block::Table(grid.with_code_column(1)),
    ];
    Some(section)
}

fn breakdown_findings(trace: &TraceSection) -> Option<(Vec<String>, Grid)> {
    let mut ranked: Vec<(&PhaseBreakdown, &OperationBreakdown)> = trace
        .breakdown
        .iter()
        .filter_map(|p| main_operation(p).map(|o| (p, o)))
        .collect();
    if ranked.is_empty() {
        return None;
    }
    let mut grid = Grid::new(&[
        ("phase", false),
        ("operation", false),
        ("calls", true),
        ("mean", true),
        ("p99", true),
        ("on CPU", true),
        ("runnable", true),
        ("locks", true),
        ("asleep", true),
        ("other CPUs", true),
        ("other", true),
    ]);
    for (phase, op) in &ranked {
        let mut row = vec![
            phase.label.clone(),
            op.operation.clone(),
            op.count.to_string(),
            duration(mean(op.total_ns, op.count)),
            op.latency
                .as_ref()
                .map_or_else(|| units::MISSING.into(), |l| duration(l.p99_ns)),
        ];
        for kind in KINDS {
            let total: u64 = op
                .components
                .iter()
                .filter(|c| c.kind == kind)
                .map(|c| c.total_ns)
                .sum();
            row.push(duration(mean(total, op.count)));
        }
        grid.rows.push(row);
    }
    ranked.sort_by(|a, b| {
        mean(b.1.total_ns, b.1.count)
            .cmp(&mean(a.1.total_ns, a.1.count))
            .then(a.0.label.cmp(&b.0.label))
    });
    let sentences = ranked
        .iter()
        .take(PHASES)
        .map(|(p, o)| breakdown_sentence(p, o))
        .collect();
    Some((sentences, grid))
}

const BREAKDOWN_NOTE: &str =
    "per-call means; \"other CPUs\" is time on a CPU waiting for other CPUs to run a function it asked them to";

/// "p50 42.7 us, p99 82.7 us, max 82.7 us".
fn spread(lock: &SpinLockWaits, mode: &str) -> Option<(u64, String)> {
    let m = lock.modes.iter().find(|m| m.mode == mode)?;
    let s = m.waits.as_ref()?;
    Some((
        s.n,
        format!(
            "p50 {}, p99 {}, max {}",
            duration(s.p50_ns),
            duration(s.p99_ns),
            duration(s.max_ns)
        ),
    ))
}

fn spinlock_sentence(lock: &SpinLockWaits) -> String {
    let mut out = format!(
        "{}: {}, {} in total",
        lock.name,
        plural(lock.waits, "contended wait"),
        duration(lock.total_wait_ns)
    );
    let mut any_mode = false;
    for (mode, who) in [("write", "writers"), ("read", "readers")] {
        if let Some((n, spread)) = spread(lock, mode) {
            out.push_str(&format!("; {who} {n}: {spread}"));
            any_mode = true;
        }
    }
    if !any_mode {
        if let Some((_, spread)) = spread(lock, "") {
            out.push_str(&format!(" ({spread})"));
        }
    }
    if lock.kind == vmscale_run::findings::LockKind::Rwlock {
        if lock.writer_waits_overtaken > 0 {
            out.push_str(&format!(
                "; writer starvation: readers got it {} while writers waited ({} overtaken)",
                plural(lock.reads_during_writer_waits, "time"),
                plural(lock.writer_waits_overtaken, "writer wait")
            ));
        } else if spread(lock, "read").is_none() {
            out.push_str("; no contended reader was traced");
        } else {
            out.push_str("; no reader got it while a writer waited");
        }
    }
    out
}

fn spinlocks(trace: &TraceSection) -> Option<Section> {
    let (sentences, grid) = spinlock_findings(trace)?;
    Some(Section {
        aside: Some(SPINLOCKS_ASIDE.into()),
        blocks: vec![
            Block::Ranked(sentences.into_iter().map(Ranked::sentence).collect()),
            Block::Table(grid.with_code_column(0)),
        ],
        ..Section::new("spinlocks", SPINLOCKS_TITLE)
    })
}

fn spinlock_findings(trace: &TraceSection) -> Option<(Vec<String>, Grid)> {
    let locks: Vec<&SpinLockWaits> = trace
        .spinlocks
        .iter()
        .filter(|l| l.waits > 0)
        .take(SPINLOCKS)
        .collect();
    if locks.is_empty() {
        return None;
    }
    let mut grid = Grid::new(&[
        ("lock", false),
        ("mode", false),
        ("waits", true),
        ("p50", true),
        ("p99", true),
        ("max", true),
        ("total", true),
    ]);
    for lock in &locks {
        for m in &lock.modes {
            let Some(s) = &m.waits else { continue };
            grid.rows.push(vec![
                lock.name.clone(),
                if m.mode.is_empty() {
                    "exclusive".into()
                } else {
                    m.mode.clone()
                },
                s.n.to_string(),
                duration(s.p50_ns),
                duration(s.p99_ns),
                duration(s.max_ns),
                duration(m.total_wait_ns),
            ]);
        }
    }
    Some((locks.iter().map(|l| spinlock_sentence(l)).collect(), grid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_keep_a_decimal_below_ten_percent() {
        assert_eq!(share_of(98, 100), "98%");
        assert_eq!(share_of(98, 10_000), "1.0%");
        assert_eq!(share_of(1, 0), units::MISSING);
    }
}
