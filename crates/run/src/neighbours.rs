//! The processes that shared the host with a run: which used a noticeable share of a CPU
//! while it measured, and which were other vmscale runs, whose kernel events land in this
//! run's trace too (tracefs instances record every task's events). Read from /proc at the
//! start and the end of the run; a process that came and went in between is not seen.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::owner::{process_start_ticks, ProcessStamp};
use vmscale_sys::ticks_to_ns;

/// A process that shared the host with the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Neighbour {
    pub pid: u32,
    pub comm: String,
    /// Its command line, cut to a readable length.
    pub command: String,
    /// CPU time it used over the run's wall time, in CPUs (0.5: half of one CPU).
    pub cpus_used: f64,
    /// Another vmscale run (or one of its holder processes).
    pub vmscale: bool,
    /// A kernel thread (a child of kthreadd): it may be doing this run's deferred work
    /// (kworkers cleaning up its irqfds, RCU callbacks), so it is named apart.
    #[serde(default)]
    pub kernel: bool,
}

/// The parent of every kernel thread.
const KTHREADD_PID: u32 = 2;

/// Processes using less than this share of one CPU are not named.
pub const HEAVY_CPUS: f64 = 0.10;

/// What the host's other processes were at the start of a run; part of
/// [`crate::load::HostWatch`].
pub(crate) struct NeighbourWatch {
    ticks: HashMap<ProcessStamp, u64>,
    /// Other vmscale processes seen at the start, with their threads then.
    vmscale: HashMap<ProcessStamp, Vec<u32>>,
}

/// What [`NeighbourWatch::finish`] found.
pub(crate) struct NeighbourReport {
    /// Heavy processes and every other vmscale run, heaviest first.
    pub neighbours: Vec<Neighbour>,
    /// Threads of the other vmscale runs, to leave out of this run's trace analyses.
    pub foreign_tids: Vec<u32>,
}

struct Proc {
    stamp: ProcessStamp,
    ppid: u32,
    comm: String,
    ticks: u64,
}

/// `pid (comm) state ppid ... utime stime ... starttime`: the fields after the last `)`.
fn read_proc(pid: u32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15, starttime 22.
    let number = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(Proc {
        stamp: ProcessStamp {
            pid,
            start_ticks: number(19)?,
        },
        ppid: number(1)? as u32,
        comm,
        ticks: number(11)? + number(12)?,
    })
}

fn all_processes() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(read_proc)
        .collect()
}

fn threads(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn command_line(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text: String = String::from_utf8_lossy(&raw)
        .split('\0')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// This process and its descendants: the run itself (holders, a recorded command).
fn ours(processes: &[Proc]) -> BTreeSet<u32> {
    let parent: HashMap<u32, u32> = processes.iter().map(|p| (p.stamp.pid, p.ppid)).collect();
    let me = std::process::id();
    processes
        .iter()
        .map(|p| p.stamp.pid)
        .filter(|&pid| {
            let mut at = pid;
            // A parent chain is short; the bound guards against a cycle read mid-change.
            for _ in 0..64 {
                if at == me {
                    return true;
                }
                match parent.get(&at) {
                    Some(&up) if up != 0 && up != at => at = up,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

fn is_vmscale(comm: &str) -> bool {
    comm.starts_with("vmscale")
}

impl NeighbourWatch {
    pub(crate) fn start() -> NeighbourWatch {
        let processes = all_processes();
        let ours = ours(&processes);
        NeighbourWatch {
            vmscale: processes
                .iter()
                .filter(|p| is_vmscale(&p.comm) && !ours.contains(&p.stamp.pid))
                .map(|p| (p.stamp, threads(p.stamp.pid)))
                .collect(),
            ticks: processes.into_iter().map(|p| (p.stamp, p.ticks)).collect(),
        }
    }

    /// The processes as they are now, `wall_ns` after [`NeighbourWatch::start`].
    pub(crate) fn finish(self, wall_ns: u64) -> NeighbourReport {
        let wall_ns = wall_ns.max(1);
        let processes = all_processes();
        let ours = ours(&processes);
        let mut foreign: BTreeSet<u32> = self.vmscale.values().flatten().copied().collect();
        let mut neighbours = Vec::new();
        for p in processes.iter().filter(|p| !ours.contains(&p.stamp.pid)) {
            let before = self.ticks.get(&p.stamp).copied().unwrap_or(0);
            let cpus_used = ticks_to_ns(p.ticks.saturating_sub(before)) as f64 / wall_ns as f64;
            let vmscale = is_vmscale(&p.comm);
            if vmscale {
                foreign.extend(threads(p.stamp.pid));
            }
            if vmscale || cpus_used >= HEAVY_CPUS {
                neighbours.push(Neighbour {
                    pid: p.stamp.pid,
                    comm: p.comm.clone(),
                    command: command_line(p.stamp.pid),
                    cpus_used,
                    vmscale,
                    kernel: p.ppid == KTHREADD_PID,
                });
            }
        }
        // Other vmscale runs that ended before this one did.
        for stamp in self.vmscale.keys() {
            if !neighbours.iter().any(|n| n.pid == stamp.pid)
                && process_start_ticks(stamp.pid) != Some(stamp.start_ticks)
            {
                neighbours.push(Neighbour {
                    pid: stamp.pid,
                    comm: "vmscale".into(),
                    command: "(ended during this run)".into(),
                    cpus_used: 0.0,
                    vmscale: true,
                    kernel: false,
                });
            }
        }
        neighbours.sort_by(|a, b| b.cpus_used.total_cmp(&a.cpus_used));
        NeighbourReport {
            neighbours,
            foreign_tids: foreign.into_iter().collect(),
        }
    }
}

/// One warning per kind of neighbour: other vmscale runs first (their events are in this
/// trace), then the heaviest other processes.
pub fn warnings(neighbours: &[Neighbour]) -> Vec<String> {
    let describe = |n: &Neighbour| {
        format!(
            "pid {} `{}`, {:.0}% of a CPU",
            n.pid,
            if n.command.is_empty() {
                &n.comm
            } else {
                &n.command
            },
            n.cpus_used * 100.0
        )
    };
    let mut out = Vec::new();
    let runs: Vec<String> = neighbours
        .iter()
        .filter(|n| n.vmscale)
        .map(describe)
        .collect();
    if !runs.is_empty() {
        out.push(format!(
            "another vmscale run shared this host ({}): it competed for the same CPUs and kernel locks, and its tasks' lock waits, stacks, IPIs and system calls are left out of this run's analyses",
            runs.join("; ")
        ));
    }
    let heavy = |kernel: bool| -> Vec<String> {
        neighbours
            .iter()
            .filter(|n| !n.vmscale && n.kernel == kernel)
            .take(5)
            .map(describe)
            .collect()
    };
    let processes = heavy(false);
    if !processes.is_empty() {
        out.push(format!(
            "other processes used CPU during the run: {}",
            processes.join("; ")
        ));
    }
    let kernel = heavy(true);
    if !kernel.is_empty() {
        out.push(format!(
            "kernel threads used CPU during the run, possibly doing this run's deferred work: {}",
            kernel.join("; ")
        ));
    }
    out
}
