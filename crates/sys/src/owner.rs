//! Which process made something vmscale leaves on the system while it runs (a tracefs
//! instance, a run directory being written), so a later vmscale can tell the leftovers of a
//! killed run from the work of one still running.
//!
//! A pid alone is not enough: after a SIGKILL the pid may be reused by an unrelated
//! process. The pair (pid, start time in clock ticks since boot) names one process for the
//! life of the boot, and vmscale writes both into the names it creates.

use std::fmt;

/// One process: its pid and when it started (field 22 of /proc/PID/stat).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessStamp {
    pub pid: u32,
    pub start_ticks: u64,
}

impl ProcessStamp {
    /// This process. Read once (per process: a forked child reads its own), so that it is
    /// known also when file descriptors have run out and /proc cannot be opened.
    pub fn current() -> ProcessStamp {
        static CURRENT: std::sync::Mutex<Option<ProcessStamp>> = std::sync::Mutex::new(None);
        let pid = std::process::id();
        let mut current = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(stamp) = *current {
            if stamp.pid == pid {
                return stamp;
            }
        }
        // /proc/self is readable by its own process; 0 only on a system without /proc (or
        // with no descriptor left), where no later run can check liveness either.
        let stamp = ProcessStamp {
            pid,
            start_ticks: process_start_ticks(pid).unwrap_or(0),
        };
        if stamp.start_ticks != 0 {
            *current = Some(stamp);
        }
        stamp
    }

    /// Parses `<pid>-<start>` as written by [`fmt::Display`].
    pub fn parse(text: &str) -> Option<ProcessStamp> {
        let (pid, start) = text.split_once('-')?;
        Some(ProcessStamp {
            pid: pid.parse().ok()?,
            start_ticks: start.parse().ok()?,
        })
    }

    /// Whether that very process still runs (not merely some process with its pid).
    pub fn is_alive(&self) -> bool {
        process_start_ticks(self.pid) == Some(self.start_ticks)
    }

    /// Whether this is the calling process.
    pub fn is_current(&self) -> bool {
        *self == ProcessStamp::current()
    }
}

impl fmt::Display for ProcessStamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.pid, self.start_ticks)
    }
}

/// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot. The
/// command name (field 2) may hold spaces and parentheses, so fields are counted after its
/// last closing parenthesis.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // after_comm starts at field 3 (state); starttime is field 22.
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_process_is_alive_and_round_trips() {
        let me = ProcessStamp::current();
        assert!(me.start_ticks > 0);
        assert!(me.is_alive());
        assert_eq!(ProcessStamp::parse(&me.to_string()), Some(me));
    }

    #[test]
    fn a_reused_pid_is_not_the_owner() {
        // Same pid, another start time: what a pid reused after a SIGKILL looks like.
        let me = ProcessStamp::current();
        let earlier = ProcessStamp {
            start_ticks: me.start_ticks - 1,
            ..me
        };
        assert!(!earlier.is_alive());
        assert!(!earlier.is_current());
    }

    #[test]
    fn garbage_is_not_a_stamp() {
        for text in ["", "12", "x-3", "3-x", "-", "1-2-3"] {
            assert_eq!(ProcessStamp::parse(text), None, "{text}");
        }
    }
}
