//! vmscale's scenarios. Each one drives real KVM at every point of its sweep and returns raw
//! samples; it never reads a report and never formats output.
//!
//! One file per scenario. A scenario declares its knobs (for `vmscale list`) and returns
//! [`vmscale_run::Point`]s; the caller wraps them into a run record.

pub mod irqfd;
pub mod memslot;
pub mod mlock;
pub mod placement;
pub mod qemu;
pub mod qemu_hotplug;
pub mod qemu_migrate;
pub mod qemu_start;
pub mod sched;
pub mod teardown;
pub mod zap;

use std::sync::atomic::{AtomicBool, Ordering};

/// A knob's accepted values, as the scenario checks them. Its flag, default and help are
/// described once, in the command line's definitions, which `vmscale list` and `--help`
/// read; the range is added to that help from here.
#[derive(Debug, Clone)]
pub struct Knob {
    pub flag: &'static str,
    /// Every numeric knob has one.
    pub range: Option<Range>,
}

/// The values a numeric knob accepts. `vmscale list` and `--help` show it, and the scenario
/// checks it before it creates anything, so an absurd value is a one-line error rather than
/// an allocation failure, a run that never ends, or half a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub min: u64,
    pub max: u64,
}

impl Range {
    pub const fn new(min: u64, max: u64) -> Range {
        Range { min, max }
    }

    pub fn check(&self, flag: &str, value: u64) -> Result<(), Error> {
        if (self.min..=self.max).contains(&value) {
            Ok(())
        } else {
            Err(Error::Usage(format!(
                "{flag} must be between {} and {} (got {value})",
                self.min, self.max
            )))
        }
    }

    /// Checks every value of a list knob; an empty list has nothing to measure.
    pub fn check_all<T: Copy + Into<u64>>(&self, flag: &str, values: &[T]) -> Result<(), Error> {
        if values.is_empty() {
            return Err(Error::Usage(format!("{flag} needs at least one value")));
        }
        values.iter().try_for_each(|&v| self.check(flag, v.into()))
    }
}

/// What `vmscale list` shows of a scenario.
#[derive(Debug, Clone)]
pub struct ScenarioInfo {
    pub name: &'static str,
    /// The canonical case it reproduces (see CASES.md).
    pub case: &'static str,
    pub summary: &'static str,
    pub sweep: &'static str,
    pub knobs: Vec<Knob>,
}

/// Every scenario this build has.
pub fn catalogue() -> Vec<ScenarioInfo> {
    vec![
        memslot::info(),
        zap::info(),
        teardown::info(),
        mlock::info(),
        irqfd::info(),
        qemu_hotplug::info(),
        qemu_start::info(),
        qemu_migrate::info(),
    ]
}

/// Receives progress as samples complete; the front end decides how (or whether) to show it.
/// Shared by every thread of a scenario that measures.
pub trait Progress: Sync {
    /// A new stretch of work: `total` samples described by `what`.
    fn start(&self, total: u64);
    fn set_message(&self, message: String);
    fn advance(&self, samples: u64);
}

/// Progress that goes nowhere (tests, --quiet).
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: u64) {}
    fn set_message(&self, _: String) {}
    fn advance(&self, _: u64) {}
}

/// Called around every measured phase (never around warm-up or VM setup), so the caller can
/// switch kernel tracing on only while it matters and mark the phase on the trace's clock.
/// Scenarios never see what is recorded.
pub trait PhaseHook {
    fn measured_phase_begins(&mut self, label: &str) -> Result<(), Error>;
    fn measured_phase_ends(&mut self, label: &str) -> Result<(), Error>;
    /// The tasks that carry out the next measured phases besides the measuring thread (a
    /// VMM the scenario started), in place of those named before: their system calls
    /// matter too. Called between phases.
    fn carried_out_by(&mut self, _tids: &[u32]) -> Result<(), Error> {
        Ok(())
    }
}

/// For runs without tracing.
pub struct NoPhaseHook;

impl PhaseHook for NoPhaseHook {
    fn measured_phase_begins(&mut self, _: &str) -> Result<(), Error> {
        Ok(())
    }
    fn measured_phase_ends(&mut self, _: &str) -> Result<(), Error> {
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Tracing failed while the scenario ran.
    #[error("{0}")]
    Trace(String),
    /// The knobs ask for something impossible on this host; nothing was created.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Kvm(#[from] vmscale_kvm::Error),
    /// The VMM a scenario drives (QEMU) is missing or failed.
    #[error(transparent)]
    Vmm(#[from] vmscale_vmm::Error),
    #[error("interrupted")]
    Interrupted,
}

impl Error {
    /// Usage errors exit 2, everything else 1.
    pub fn is_usage(&self) -> bool {
        match self {
            Error::Usage(_) | Error::Kvm(vmscale_kvm::Error::Impossible(_)) => true,
            Error::Vmm(e) => e.is_usage(),
            _ => false,
        }
    }
}

/// Accepted values of `--runs`.
pub const RUNS: Range = Range::new(1, 1_000);

/// The `--runs` knob as `vmscale list` shows it.
pub const RUNS_KNOB: Knob = Knob {
    flag: "--runs",
    range: Some(RUNS),
};

/// Runs a whole sweep `runs` times, each with fresh VMs and threads, and merges the
/// points (see [`vmscale_run::runs`]). Whole sweeps rather than K runs per point, so a
/// slow drift of the host lands on every point alike instead of on the last ones.
pub(crate) fn independent_runs(
    runs: usize,
    mut sweep: impl FnMut() -> Result<Vec<vmscale_run::Point>, Error>,
) -> Result<Vec<vmscale_run::Point>, Error> {
    RUNS.check("--runs", runs as u64)?;
    let done = (0..runs).map(|_| sweep()).collect::<Result<Vec<_>, _>>()?;
    Ok(vmscale_run::runs::merge(done))
}

fn one() -> usize {
    1
}

/// A list of counts as the `u64`s [`Range::check_all`] takes.
pub(crate) fn as_u64(values: &[usize]) -> Vec<u64> {
    values.iter().map(|&v| v as u64).collect()
}

/// Set from a signal handler (Ctrl-C); scenarios poll it between samples so that VMs are
/// dropped, and with them every vCPU thread and fd, before the process exits.
pub struct Cancel<'a>(pub &'a AtomicBool);

impl Cancel<'_> {
    pub fn check(&self) -> Result<(), Error> {
        if self.0.load(Ordering::Relaxed) {
            Err(Error::Interrupted)
        } else {
            Ok(())
        }
    }
}
