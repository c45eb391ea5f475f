//! The kernel-trace section's lock parts: how the trace was recorded (its first lines),
//! which locks were contended, and who waited on the worst of them and from where.
//!
//! The analysis already sorted the locks, waiters and stacks worst first, so nothing here
//! reorders them: a rendering that re-ranked would disagree with run.json.

use std::collections::BTreeMap;

use vmscale_run::{LockContention, TraceSection};

use crate::document::{Block, Entry, Section, Text};
use crate::grid::Grid;
use crate::units::{self, plural, MISSING};

/// Rows of the contention table; the rest are counted in one "(N more locks)" line.
const TABLE_LOCKS: usize = 15;
/// Locks whose waiters and stacks are shown.
const DETAILED_LOCKS: usize = 5;
const WAITERS_PER_LOCK: usize = 5;
const STACKS_PER_LOCK: usize = 3;
/// The innermost frames say who took the lock and why; the outer ones are mostly the
/// syscall or worker entry that every stack shares.
const FRAMES_PER_STACK: usize = 12;

/// Said instead of an empty table, so a quiet trace is not mistaken for a missing one.
pub(crate) const NO_CONTENTION: &str = "no lock contention recorded";

/// The contended locks, worst first, then who waited on the worst of them and from where;
/// or why there is no table.
pub(crate) fn blocks(trace: &TraceSection) -> Vec<Block> {
    let Some((locks, more)) = table(trace) else {
        return vec![Block::Paragraph(empty_table_reason(trace).into())];
    };
    let mut contended = Section::new("contention", "lock contention (worst first)");
    contended
        .blocks
        .push(Block::Table(locks.with_code_column(0)));
    contended
        .blocks
        .extend(more.map(|more| Block::Paragraph(more.into())));
    let mut worst = Section::new("", details_title(trace));
    worst.blocks = details(trace)
        .into_iter()
        .enumerate()
        .map(|(index, lock)| Block::Entry(lock.entry(index + 1)))
        .collect();
    vec![Block::Section(contended), Block::Section(worst)]
}

/// Why the contention table is empty: nothing contended, or nothing could have been seen
/// (the events were not recorded, or the trace lacks their format).
fn empty_table_reason(trace: &TraceSection) -> String {
    if vmscale_run::findings::contention_observable(trace) {
        NO_CONTENTION.into()
    } else if trace.lock_format_missing {
        "lock contention unknown: the trace has no format for lock:contention_begin, so its events cannot be decoded".into()
    } else {
        CONTENTION_UNKNOWN.into()
    }
}

/// Said when the trace holds no lock events: an absence that must not read as "none".
pub(crate) const CONTENTION_UNKNOWN: &str = "lock contention unknown: lock contention needs lock:contention_begin/end (kernel 5.19 or later), and this trace has none";

/// The header lines: what was recorded, what recording stacks cost, what was lost.
pub(crate) fn header(trace: &TraceSection) -> Vec<String> {
    let mut lines = vec![recording(trace)];
    if let Some(cost) = &trace.stack_cost {
        // The stack is captured after contention_begin, while the task is already waiting,
        // so every wait with a stack is longer by this much than it would have been.
        lines.push(format!(
            "kernel stacks cost p50 {} us (max {} us) per contended wait; waits below \
             include it, since the kernel captures each stack while the task is waiting",
            units::micros_u64(cost.p50_ns),
            units::micros_u64(cost.max_ns)
        ));
    }
    lines.extend(lost(trace));
    lines
}

fn recording(trace: &TraceSection) -> String {
    let mut parts = Vec::new();
    // A function-tracer import has no events at all: nothing to say "0 recorded" of.
    if !trace.events.is_empty() {
        parts.push(format!(
            "{} recorded{}",
            plural(trace.events.len() as u64, "event type"),
            event_systems(&trace.events)
        ));
    }
    parts.push(format!(
        "kernel stacks {}",
        if trace.stacks { "on" } else { "off" }
    ));
    // An import does not know its buffer size: left out rather than shown as 0.
    if trace.buffer_kib > 0 {
        parts.push(format!(
            "{} buffer per CPU",
            vmscale_stats::units::kib_size(trace.buffer_kib)
        ));
    }
    parts.push(format!(
        "{} events decoded",
        units::count(trace.decoded_events)
    ));
    if !trace.events_seen.is_empty() {
        parts.push(format!(
            "{} seen{}",
            plural(trace.events_seen.len() as u64, "event type"),
            event_systems(&trace.events_seen.keys().cloned().collect::<Vec<_>>())
        ));
    }
    if !trace.dir.is_empty() {
        // Written as a directory, so that "trace" does not read as a word of the sentence.
        let slash = if trace.dir.ends_with('/') { "" } else { "/" };
        parts.push(format!("raw trace in {}{slash}", trace.dir));
    }
    parts.join(", ")
}

/// " (lock, sched, ipi)": the tracing systems of `system:event` names, in recording order.
fn event_systems(events: &[String]) -> String {
    let mut systems: Vec<&str> = Vec::new();
    for event in events {
        let system = event.split_once(':').map_or(event.as_str(), |(s, _)| s);
        if !systems.contains(&system) {
            systems.push(system);
        }
    }
    if systems.is_empty() {
        String::new()
    } else {
        format!(" ({})", systems.join(", "))
    }
}

/// One line per CPU that lost events, in CPU order. The run's warnings say the same; the
/// section repeats it so that it reads correctly on its own.
fn lost(trace: &TraceSection) -> Vec<String> {
    let mut cpus: Vec<(&String, u64)> = trace
        .lost_per_cpu
        .iter()
        .filter(|(_, &lost)| lost > 0)
        .map(|(cpu, &lost)| (cpu, lost))
        .collect();
    // Keys are CPU numbers as strings, which a map orders "10" before "2".
    cpus.sort_by_key(|(cpu, _)| (cpu_number(cpu), cpu.to_string()));
    cpus.into_iter()
        .map(|(cpu, lost)| {
            let cpu = cpu.strip_prefix("cpu").unwrap_or(cpu);
            format!("trace lost {lost} events on cpu{cpu}: waits and counts below are lower bounds")
        })
        .collect()
}

fn cpu_number(cpu: &str) -> u64 {
    cpu.trim_start_matches("cpu").parse().unwrap_or(u64::MAX)
}

/// The contention table, worst lock first, and the "(N more locks)" line when it was cut;
/// `None` when no lock was contended.
fn table(trace: &TraceSection) -> Option<(Grid, Option<String>)> {
    if trace.contention.is_empty() {
        return None;
    }
    let mut grid = Grid::new(&[
        ("lock", false),
        ("kind", false),
        ("modes", false),
        ("contended", true),
        ("total wait (us)", true),
        ("mean (us)", true),
        ("p50 (us)", true),
        ("p99 (us)", true),
        ("max (us)", true),
        ("open waits", true),
    ]);
    for lock in trace.contention.iter().take(TABLE_LOCKS) {
        let mut row = vec![
            lock.name.clone(),
            lock.kind.to_string(),
            nonempty(modes(&lock.modes)),
            lock.waits.as_ref().map_or(0, |w| w.n).to_string(),
            units::micros_u64(lock.total_wait_ns),
        ];
        row.extend(match &lock.waits {
            Some(w) => vec![
                units::micros(w.mean_ns),
                units::micros_u64(w.p50_ns),
                units::micros_u64(w.p99_ns),
                units::micros_u64(w.max_ns),
            ],
            None => vec![MISSING.to_string(); 4],
        });
        row.push(lock.open_waits.to_string());
        grid.rows.push(row);
    }
    Some((grid, more(trace.contention.len(), TABLE_LOCKS, "lock")))
}

/// Contended acquisitions per mode, most first: "write 120, read 3". An exclusive lock's
/// only mode is "", shown as the bare count. Empty when the analysis recorded no mode.
pub(crate) fn modes(modes: &BTreeMap<String, u64>) -> String {
    let mut entries: Vec<(&String, &u64)> = modes.iter().collect();
    entries.sort_by_key(|(mode, count)| (std::cmp::Reverse(**count), mode.to_string()));
    entries
        .into_iter()
        .map(|(mode, count)| {
            if mode.is_empty() {
                count.to_string()
            } else {
                format!("{mode} {count}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn nonempty(text: String) -> String {
    if text.is_empty() {
        MISSING.to_string()
    } else {
        text
    }
}

/// Who waited on one of the worst locks, and from where.
struct LockDetail {
    name: String,
    /// "mutex at 0xffff888104a3c0d8", or just the kind when the address is unknown.
    what: String,
    /// "comm/pid" and what that task waited, worst first.
    waiters: Vec<(String, String)>,
    /// "(N more waiters)" when the list was cut.
    more_waiters: Option<String>,
    stacks: Vec<StackDetail>,
    more_stacks: Option<String>,
}

impl LockDetail {
    fn entry(self, rank: usize) -> Entry {
        let mut blocks = Vec::new();
        if !self.waiters.is_empty() {
            let mut items: Vec<Text> = self
                .waiters
                .into_iter()
                .map(|(who, waited)| Text::code(who).then(format!(": {waited}")))
                .collect();
            items.extend(self.more_waiters.map(Text::from));
            blocks.push(Block::List {
                label: "waiters".into(),
                items,
            });
        }
        blocks.extend(self.stacks.into_iter().map(|stack| Block::Code {
            label: "stack".into(),
            detail: stack.title,
            lines: stack.frames,
        }));
        blocks.extend(self.more_stacks.map(|more| Block::Paragraph(more.into())));
        Entry {
            rank,
            title: Text::code(self.name).then(format!(" ({})", self.what)),
            blocks,
        }
    }
}

struct StackDetail {
    /// "100 waits, total 4000 us".
    title: String,
    /// Innermost first, then "... (N more frames)" when cut.
    frames: Vec<String>,
}

/// Title of the details block, which says when there are no stacks to expect.
fn details_title(trace: &TraceSection) -> &'static str {
    if trace.stacks {
        "worst locks: who waited, and from which kernel stacks"
    } else {
        "worst locks: who waited (kernel stacks were not recorded)"
    }
}

/// The waiters and stacks of the worst locks.
fn details(trace: &TraceSection) -> Vec<LockDetail> {
    trace
        .contention
        .iter()
        .take(DETAILED_LOCKS)
        .map(detail)
        .collect()
}

fn detail(lock: &LockContention) -> LockDetail {
    let what = if lock.lock_addr == 0 {
        lock.kind.to_string()
    } else {
        format!("{} at {:#x}", lock.kind, lock.lock_addr)
    };
    let waiters = lock
        .waiters
        .iter()
        .take(WAITERS_PER_LOCK)
        .map(|w| {
            (
                format!("{}/{}", w.comm, w.pid),
                waits_and_total(w.waits, w.total_wait_ns),
            )
        })
        .collect();
    let stacks = lock
        .stacks
        .iter()
        .take(STACKS_PER_LOCK)
        .map(|stack| {
            let mut frames: Vec<String> = stack
                .frames
                .iter()
                .take(FRAMES_PER_STACK)
                .cloned()
                .collect();
            if let Some(more) = more(stack.frames.len(), FRAMES_PER_STACK, "frame") {
                frames.push(format!("... {more}"));
            }
            StackDetail {
                title: waits_and_total(stack.waits, stack.total_wait_ns),
                frames,
            }
        })
        .collect();
    LockDetail {
        name: lock.name.clone(),
        what,
        waiters,
        more_waiters: more(lock.waiters.len(), WAITERS_PER_LOCK, "waiter"),
        stacks,
        more_stacks: more(lock.stacks.len(), STACKS_PER_LOCK, "stack"),
    }
}

/// "(3 more locks)" when only `shown` of `len` items are listed.
fn more(len: usize, shown: usize, noun: &str) -> Option<String> {
    let hidden = len.saturating_sub(shown);
    match hidden {
        0 => None,
        1 => Some(format!("(1 more {noun})")),
        _ => Some(format!("({hidden} more {noun}s)")),
    }
}

/// "3 waits, total 12.0 us".
fn waits_and_total(waits: u64, total_ns: u64) -> String {
    format!(
        "{}, total {} us",
        plural(waits, "wait"),
        units::micros_u64(total_ns)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_most_first_and_exclusive_locks_show_a_bare_count() {
        let rw = BTreeMap::from([("read".to_string(), 3), ("write".to_string(), 120)]);
        assert_eq!(modes(&rw), "write 120, read 3");
        assert_eq!(modes(&BTreeMap::from([(String::new(), 7)])), "7");
        assert_eq!(modes(&BTreeMap::new()), "");
    }

    #[test]
    fn lost_lines_follow_cpu_numbers_and_skip_cpus_that_lost_nothing() {
        let trace = TraceSection {
            lost_per_cpu: BTreeMap::from([
                ("10".to_string(), 5),
                ("2".to_string(), 7),
                ("3".to_string(), 0),
            ]),
            ..TraceSection::default()
        };
        let lines = lost(&trace);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("trace lost 7 events on cpu2"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("trace lost 5 events on cpu10"),
            "{lines:?}"
        );
    }

    #[test]
    fn recording_line_names_event_systems_and_buffer_size() {
        let trace = TraceSection {
            dir: "trace".into(),
            events: [
                "lock:contention_begin",
                "lock:contention_end",
                "sched:sched_switch",
            ]
            .map(String::from)
            .to_vec(),
            stacks: false,
            buffer_kib: 16 * 1024,
            decoded_events: 1_234_567,
            ..TraceSection::default()
        };
        assert_eq!(
            recording(&trace),
            "3 event types recorded (lock, sched), kernel stacks off, 16 MiB buffer per CPU, \
             1.23M events decoded, raw trace in trace/"
        );
        assert_eq!(vmscale_stats::units::kib_size(1536), "1536 KiB");
    }

    #[test]
    fn long_stacks_are_cut_with_a_count_of_what_was_left_out() {
        let lock = LockContention {
            lock_addr: 0,
            name: "slots_lock".into(),
            kind: "mutex".into(),
            modes: BTreeMap::new(),
            waits: None,
            total_wait_ns: 0,
            open_waits: 0,
            waiters: Vec::new(),
            stacks: vec![vmscale_run::WaitStack {
                frames: (0..20).map(|i| format!("f{i}")).collect(),
                waits: 1,
                total_wait_ns: 1_000,
            }],
        };
        let detail = detail(&lock);
        assert_eq!(detail.what, "mutex");
        let frames = &detail.stacks[0].frames;
        assert_eq!(frames.len(), FRAMES_PER_STACK + 1);
        assert_eq!(frames[FRAMES_PER_STACK - 1], "f11");
        assert_eq!(frames[FRAMES_PER_STACK], "... (8 more frames)");
        assert_eq!(detail.stacks[0].title, "1 wait, total 1.00 us");
        assert!(detail.more_stacks.is_none());
    }
}
