//! Background load: CPU time the rest of the machine used while a run measured, and who
//! used it.
//!
//! This machine kind is shared, and a build on the other core changes latency tails a lot,
//! so every run records how much CPU time processes other than vmscale consumed over its
//! wall time, from /proc/stat (all CPUs) minus /proc/self/stat (this process, all threads,
//! vCPU guest time included), and names the processes behind it ([`crate::neighbours`]).
//! One [`HostWatch`] does both around a measurement.

use serde::{Deserialize, Serialize};

use crate::neighbours::{NeighbourReport, NeighbourWatch};
use vmscale_sys::ticks_to_ns;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackgroundLoad {
    pub wall_ns: u64,
    /// CPU time every CPU spent busy (not idle, not iowait).
    pub host_busy_ns: u64,
    /// CPU time this process used.
    pub own_ns: u64,
    /// Busy time not ours, as a fraction of all CPUs' wall time (0..1).
    pub other_busy_fraction: f64,
    /// The processes behind that time that could be named, and every other vmscale run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub neighbours: Vec<crate::neighbours::Neighbour>,
}

/// Above this share of the machine used by others, a run is flagged as measured on a busy
/// host.
pub const BUSY_THRESHOLD: f64 = 0.10;

impl BackgroundLoad {
    pub fn warning(&self) -> Option<String> {
        (self.other_busy_fraction > BUSY_THRESHOLD).then(|| {
            format!(
                "the machine was busy with other work: {:.0}% of all CPU time went to other processes during the run; tails are inflated",
                self.other_busy_fraction * 100.0
            )
        })
    }
}

/// Watches the host while a run measures, from [`HostWatch::start`] to
/// [`HostWatch::finish`]: how much CPU time others used, which processes used it, and the
/// threads of other vmscale runs.
pub struct HostWatch {
    start_wall: u64,
    start_busy: u64,
    start_own: u64,
    neighbours: NeighbourWatch,
}

/// What a [`HostWatch`] saw.
pub struct Watched {
    /// The load with its neighbours; `None` when /proc/stat could not be read.
    pub background: Option<BackgroundLoad>,
    /// Threads of the other vmscale runs, to leave out of this run's trace analyses; known
    /// even when the load is not.
    pub foreign_tids: Vec<u32>,
}

/// Busy ticks summed over all CPUs: the first line of /proc/stat minus idle and iowait.
fn host_busy_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = text
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8) // user nice system idle iowait irq softirq steal; guest is inside user
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let total: u64 = fields.iter().sum();
    Some(total - fields.get(3).copied().unwrap_or(0) - fields.get(4).copied().unwrap_or(0))
}

/// CPU time of this process (all threads) and of the children it waited for: a recorded
/// command and teardown's holders are the run's own work, not background.
fn own_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    // comm may contain spaces; fields after the closing parenthesis are fixed.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime, cstime are fields 14 to 17 of the full line: 11 to 14 after
    // "pid (comm)".
    (11..=14).map(|i| fields.get(i)?.parse::<u64>().ok()).sum()
}

impl HostWatch {
    pub fn start() -> HostWatch {
        HostWatch {
            start_wall: crate::monotonic_ns(),
            start_busy: host_busy_ticks().unwrap_or(0),
            start_own: own_ticks().unwrap_or(0),
            neighbours: NeighbourWatch::start(),
        }
    }

    /// The load over the watch's wall time on a host with `online_cpus`, with its
    /// neighbours, and the other vmscale runs' threads.
    pub fn finish(self, online_cpus: usize) -> Watched {
        let wall_ns = crate::monotonic_ns().saturating_sub(self.start_wall);
        let NeighbourReport {
            neighbours,
            foreign_tids,
        } = self.neighbours.finish(wall_ns);
        let background = (|| {
            let host_busy_ns = ticks_to_ns(host_busy_ticks()?.saturating_sub(self.start_busy));
            let own_ns = ticks_to_ns(own_ticks()?.saturating_sub(self.start_own));
            let capacity = wall_ns as f64 * online_cpus.max(1) as f64;
            let other = host_busy_ns.saturating_sub(own_ns) as f64;
            Some(BackgroundLoad {
                wall_ns,
                host_busy_ns,
                own_ns,
                other_busy_fraction: if capacity > 0.0 {
                    (other / capacity).clamp(0.0, 1.0)
                } else {
                    0.0
                },
                neighbours,
            })
        })();
        Watched {
            background,
            foreign_tids,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests here measure the whole host's CPU use, and one of them starts spinning
    /// processes: one at a time, or each counts the other's work.
    static HOST: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn own_busy_work_is_not_counted_as_background() {
        let _host = HOST.lock().unwrap_or_else(|e| e.into_inner());
        let watch = HostWatch::start();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let load = watch.finish(crate::host::online_cpus()).background.unwrap();
        // A busy host may deschedule the spinner; it still gets a good share of 300 ms, and
        // none of it may be counted as other processes' work.
        assert!(
            load.own_ns >= 50_000_000,
            "spinning 300 ms used {} ns",
            load.own_ns
        );
        assert!(load.host_busy_ns >= load.own_ns / 2);
        assert!((0.0..=1.0).contains(&load.other_busy_fraction));
    }

    #[test]
    fn a_busy_child_is_ours_and_a_busy_stranger_is_named() {
        let _host = HOST.lock().unwrap_or_else(|e| e.into_inner());
        // Neighbours are named through the host watch a run uses, so they are those its
        // load carries. A child spinning is part of the run (like a holder or a recorded command).
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        // A stranger: a process whose parent is not us (setsid's child, via a grandchild
        // that the shell leaves behind).
        let stranger_pid_file =
            std::env::temp_dir().join(format!("vmscale-nb-{}", std::process::id()));
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "(exec sh -c 'while :; do :; done') & echo $! > {}",
                stranger_pid_file.display()
            ))
            .status()
            .unwrap();
        let stranger: u32 = std::fs::read_to_string(&stranger_pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Through the host watch a run uses, so the neighbours are those its load carries.
        let watch = HostWatch::start();
        std::thread::sleep(std::time::Duration::from_millis(600));
        let report = watch
            .finish(crate::host::online_cpus())
            .background
            .expect("/proc/stat is readable");
        child.kill().unwrap();
        child.wait().unwrap();
        // SAFETY: the stranger is a process this test started; only a signal is sent.
        unsafe { libc::kill(stranger as i32, libc::SIGKILL) };
        let _ = std::fs::remove_file(&stranger_pid_file);
        assert!(
            !report.neighbours.iter().any(|n| n.pid == child.id()),
            "our own child was named: {:?}",
            report.neighbours
        );
        let named = report.neighbours.iter().find(|n| n.pid == stranger);
        assert!(
            named.is_some_and(|n| n.cpus_used >= crate::neighbours::HEAVY_CPUS && !n.vmscale),
            "the spinning stranger {stranger} was not named: {:?}",
            report.neighbours
        );
        assert!(crate::neighbours::warnings(&report.neighbours)
            .iter()
            .any(|w| w.contains(&format!("pid {stranger}"))));
    }
}
