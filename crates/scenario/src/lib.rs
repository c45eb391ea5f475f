//! vmscale's scenarios. Each one drives real KVM (or a real VMM) at every point of its sweep
//! and returns raw samples; it never reads a report and never formats output.
//!
//! One file per scenario, each implementing [`Scenario`]: what it is, its flags and the knobs
//! they make, how it runs and what it adds to the run record. The `scenarios!` list below
//! names them once; from it come [`registry`] (which `vmscale list`, `tour` and `--help`
//! read) and [`RunScenario`] (the `vmscale run <scenario>` subcommands).
//!
//! # Adding a scenario
//!
//! One file here plus one line in the `scenarios!` list below; nothing in the front end.
//!
//! 1. `src/<name>.rs`: a unit struct implementing [`Scenario`]. Its flags are a
//!    `#[derive(clap::Args)]` struct, the one description of its knobs (flags, defaults,
//!    help) that `vmscale run <name> --help` and `vmscale list` print; flatten
//!    [`placement::RepeatabilityArgs`] for `--pin` and `--runs`. [`Scenario::knobs`] turns
//!    the flags into its knobs (a flag that cannot be one is [`Error::Usage`], exit 2), and
//!    [`Scenario::ABOUT`] is its line in `vmscale run --help`:
//!
//!    ```text
//!    #[derive(Debug, clap::Args)]
//!    pub struct StormArgs {
//!        /// Threads at once
//!        #[arg(long, default_value_t = 2)]
//!        pub threads: usize,
//!    }
//!
//!    impl crate::Scenario for Storm {
//!        type Knobs = StormKnobs;
//!        type Host = KvmSystem;
//!        type Flags = StormArgs;
//!        const ABOUT: &'static str = "Case 6: ...";
//!        fn knobs(&self, args: &StormArgs) -> Result<StormKnobs, Error> { ... }
//!        fn info(&self) -> ScenarioInfo { ... }
//!        // tour_knobs, prepare, run, and optionally tracing, annotate
//!    }
//!    ```
//!
//! 2. One line in the list: `Storm: storm::Storm,` (variant, module, type; the list
//!    declares the module). The variant, in kebab case, is the subcommand's name and must
//!    equal [`ScenarioInfo::name`] (a test checks it); the line's place is the scenario's
//!    place in `list`, `tour` and `vmscale run --help`.
//!
//! The front end adds the options every run shares (`--out`, `--format`, tracing) and runs
//! the knobs through the path every scenario shares.

pub mod overcommit;
pub mod placement;
pub mod qemu;
pub mod sched;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;
use vmscale_run::{KvmFacts, Point, RunRecord};

/// A knob's accepted values, as the scenario checks them. Its flag, default and help are
/// described once, in the scenario's [`Scenario::Flags`], which `vmscale list` and `--help`
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

    /// Checks every value of a list knob; an empty list has nothing to measure, and a value
    /// given twice would measure the same point twice as if they were two.
    pub fn check_all<T: Copy + Into<u64>>(&self, flag: &str, values: &[T]) -> Result<(), Error> {
        if values.is_empty() {
            return Err(Error::Usage(format!("{flag} needs at least one value")));
        }
        values
            .iter()
            .try_for_each(|&v| self.check(flag, v.into()))?;
        let mut seen = std::collections::BTreeSet::new();
        match values.iter().map(|&v| v.into()).find(|&v| !seen.insert(v)) {
            Some(twice) => Err(Error::Usage(format!(
                "{flag} lists {twice} more than once: each value is one point of the sweep (--runs repeats the whole sweep)"
            ))),
            None => Ok(()),
        }
    }
}

/// What `vmscale list` shows of a scenario.
#[derive(Debug, Clone)]
pub struct ScenarioInfo {
    pub name: &'static str,
    /// The canonical case it reproduces (see docs/cases.md).
    pub case: &'static str,
    pub summary: &'static str,
    pub sweep: &'static str,
    pub knobs: Vec<Knob>,
}

/// Generates, from one list of `Variant: module::Scenario` lines, each scenario's module
/// (`pub mod module;`), [`registry`] and the [`RunScenario`] subcommands with their
/// dispatch.
macro_rules! scenarios {
    ($($variant:ident: $module:ident::$scenario:ident),+ $(,)?) => {
        $(pub mod $module;)+

        /// Every scenario this build has, in the order `list` shows, `tour` runs and
        /// `vmscale run --help` lists them.
        pub fn registry() -> Vec<&'static dyn Registered> {
            vec![$(&$module::$scenario),+]
        }

        /// `vmscale run <scenario>`: one subcommand per scenario, each its own flags
        /// followed by the options every run shares (`Shared`, the front end's).
        #[derive(Debug, clap::Subcommand)]
        pub enum RunScenario<Shared: clap::Args> {
            $(
                #[command(about = <$module::$scenario as Scenario>::ABOUT)]
                $variant(Invocation<<$module::$scenario as Scenario>::Flags, Shared>),
            )+
        }

        impl<Shared: clap::Args> RunScenario<Shared> {
            /// Hands the chosen scenario, its parsed flags and the shared options to
            /// `runner`.
            pub fn dispatch<R: Runner<Shared>>(&self, runner: R) -> R::Output {
                match self {
                    $(RunScenario::$variant(i) => runner.run($module::$scenario, &i.flags, &i.shared),)+
                }
            }
        }
    };
}

// Every scenario, one line each (its module, declared here, and its type). Adding a
// scenario is its file plus one line here.
scenarios! {
    Memslot: memslot::Memslot,
    Zap: zap::Zap,
    Teardown: teardown::Teardown,
    Mlock: mlock::Mlock,
    Irqfd: irqfd::Irqfd,
    QemuHotplug: qemu_hotplug::QemuHotplug,
    QemuStart: qemu_start::QemuStart,
    QemuMigrate: qemu_migrate::QemuMigrate,
}

/// One `vmscale run <scenario>` command line: the scenario's flags, then the options every
/// run shares.
#[derive(Debug, clap::Args)]
pub struct Invocation<Flags: clap::Args, Shared: clap::Args> {
    #[command(flatten)]
    pub flags: Flags,
    #[command(flatten)]
    pub shared: Shared,
}

/// What the front end does with a parsed `vmscale run <scenario>`: typically turn the flags
/// into knobs ([`Scenario::knobs`]) and run them through the path every scenario shares.
pub trait Runner<Shared> {
    type Output;
    fn run<S: Scenario>(self, scenario: S, flags: &S::Flags, shared: &Shared) -> Self::Output;
}

/// What `vmscale list` shows of every scenario, in [`registry`] order.
pub fn catalogue() -> Vec<ScenarioInfo> {
    registry().iter().map(|s| s.info()).collect()
}

/// One scenario. The front end parses its [`Scenario::Flags`], turns them into
/// [`Scenario::Knobs`] with [`Scenario::knobs`] and hands them, with the scenario, to the
/// run path every scenario shares ([`Job`]):
/// [`prepare`](Scenario::prepare) before anything is created, [`run`](Scenario::run) with
/// tracing around its measured phases, then the trace's analyses, then
/// [`annotate`](Scenario::annotate), then the reports. Data flows one way: a scenario sees
/// its own samples and the findings drawn from them, never a report.
pub trait Scenario: Copy + Sync + 'static {
    /// Its knobs, as run.json records them.
    type Knobs: Serialize + 'static;
    /// What [`Scenario::prepare`] opens for the run: the KVM system, a binary to run.
    type Host: 'static;
    /// Its command-line flags (`vmscale run <name>`), with their defaults and help: the
    /// one description of its knobs, which `vmscale list` and `--help` read.
    type Flags: clap::Args + std::fmt::Debug;

    /// The one line `vmscale run --help` shows beside its name.
    const ABOUT: &'static str;

    /// Its flags as its knobs. A flag that cannot be a knob (an unknown mode, a `--pin` on
    /// CPUs this process may not use) is [`Error::Usage`]; ranges are checked later, by
    /// [`Scenario::prepare`].
    fn knobs(&self, flags: &Self::Flags) -> Result<Self::Knobs, Error>;

    /// Name, the case it reproduces, one line of description, what it sweeps, its knobs'
    /// accepted ranges.
    fn info(&self) -> ScenarioInfo;

    /// The small sweep `vmscale tour` runs, or one line saying why this host leaves the
    /// scenario out and how to change that.
    fn tour_knobs(&self) -> Result<Self::Knobs, String>;

    /// Which system calls the trace needs, and events beyond the usual set.
    fn tracing(&self) -> TraceNeeds {
        TraceNeeds::default()
    }

    /// Checks the knobs, and the host against them, before anything is created, so an
    /// impossible request is a one-line usage error that leaves nothing behind.
    fn prepare(&self, knobs: &Self::Knobs) -> Result<Prepared<Self::Host>, Error>;

    /// Measures the whole sweep: one [`Point`] per swept value. Calls `hook` around every
    /// measured phase and `progress` as samples complete, and stops between samples once
    /// `cancel` says so.
    fn run(
        &self,
        knobs: &Self::Knobs,
        host: &Self::Host,
        progress: &dyn Progress,
        cancel: &Cancel,
        hook: &mut dyn PhaseHook,
    ) -> Result<Vec<Point>, Error>;

    /// What the scenario adds to the finished record, once the trace's findings and the
    /// verdict are in: notes on its series, warnings on what its numbers mean on this host.
    /// `measuring_tid` is the thread that ran [`Scenario::run`].
    fn annotate(
        &self,
        _knobs: &Self::Knobs,
        _host: &Self::Host,
        _record: &mut RunRecord,
        _measuring_tid: u32,
    ) {
    }
}

/// What [`Scenario::prepare`] found: what the run needs, and the KVM the record describes
/// (`None` when /dev/kvm could not be opened and the scenario does not need it).
pub struct Prepared<H> {
    pub host: H,
    pub kvm: Option<KvmFacts>,
}

/// Whose system calls the trace keeps, besides the usual lock, scheduler and IPI events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceNeeds {
    pub syscalls: Syscalls,
    /// `system:event` names beyond the usual set.
    pub extra_events: Vec<&'static str>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Syscalls {
    /// Those of the thread that runs [`Scenario::run`]: the measured calls are its own.
    #[default]
    MeasuringThread,
    /// None: the measured calls come from threads or processes created later, whose calls
    /// cannot be filtered in advance, and every task's would swamp the buffers.
    Off,
    /// The measuring thread's, plus these system calls (by number) from every task: a
    /// VMM's threads, some created mid-run, are found by what they call.
    MeasuringThreadAnd(Vec<i64>),
}

/// A scenario with its knobs, as the front end runs it. Object-safe, so `run <scenario>`
/// and `tour` share one run path.
pub trait Job {
    fn info(&self) -> ScenarioInfo;
    /// The knobs as run.json records them.
    fn knobs(&self) -> serde_json::Value;
    fn tracing(&self) -> TraceNeeds;
    /// [`Scenario::prepare`]; gives the KVM facts for the record.
    fn prepare(&mut self) -> Result<Option<KvmFacts>, Error>;
    /// [`Scenario::run`]; only after [`Job::prepare`] succeeded.
    fn run(
        &self,
        progress: &dyn Progress,
        cancel: &Cancel,
        hook: &mut dyn PhaseHook,
    ) -> Result<Vec<Point>, Error>;
    /// [`Scenario::annotate`]; only after [`Job::prepare`] succeeded.
    fn annotate(&self, record: &mut RunRecord, measuring_tid: u32);
}

/// `scenario` with `knobs`, ready to be prepared and run.
pub fn job<S: Scenario>(scenario: S, knobs: S::Knobs) -> Box<dyn Job> {
    Box::new(Configured {
        scenario,
        knobs,
        host: None,
    })
}

struct Configured<S: Scenario> {
    scenario: S,
    knobs: S::Knobs,
    host: Option<S::Host>,
}

impl<S: Scenario> Configured<S> {
    fn host(&self) -> &S::Host {
        self.host
            .as_ref()
            .expect("the run path prepares a job before it runs or annotates it")
    }
}

impl<S: Scenario> Job for Configured<S> {
    fn info(&self) -> ScenarioInfo {
        self.scenario.info()
    }

    fn knobs(&self) -> serde_json::Value {
        serde_json::to_value(&self.knobs).expect("knobs serialize")
    }

    fn tracing(&self) -> TraceNeeds {
        self.scenario.tracing()
    }

    fn prepare(&mut self) -> Result<Option<KvmFacts>, Error> {
        let Prepared { host, kvm } = self.scenario.prepare(&self.knobs)?;
        self.host = Some(host);
        Ok(kvm)
    }

    fn run(
        &self,
        progress: &dyn Progress,
        cancel: &Cancel,
        hook: &mut dyn PhaseHook,
    ) -> Result<Vec<Point>, Error> {
        self.scenario
            .run(&self.knobs, self.host(), progress, cancel, hook)
    }

    fn annotate(&self, record: &mut RunRecord, measuring_tid: u32) {
        self.scenario
            .annotate(&self.knobs, self.host(), record, measuring_tid)
    }
}

/// A scenario as the registry holds it, whatever its knobs' type.
pub trait Registered: Sync {
    fn info(&self) -> ScenarioInfo;
    /// The scenario with its tour knobs, or why this host leaves it out of the tour.
    fn tour(&self) -> Result<Box<dyn Job>, String>;
}

impl<S: Scenario> Registered for S {
    fn info(&self) -> ScenarioInfo {
        Scenario::info(self)
    }

    fn tour(&self) -> Result<Box<dyn Job>, String> {
        Ok(job(*self, self.tour_knobs()?))
    }
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
    /// The calling thread `spawner` is about to start the command the recording is about
    /// (`None`: it has started it, or failed to): a recorder that follows its subject live
    /// (aggregate mode) takes the task it creates as the subject from its first moment.
    fn subject_spawns(&mut self, _spawner: Option<u32>) {}
    /// The command the recording is about is process `pid`.
    fn subject_started(&mut self, _pid: u32) -> Result<(), Error> {
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
    Kvm(vmscale_kvm::Error),
    /// The VMM a scenario drives (QEMU) is missing or failed.
    #[error(transparent)]
    Vmm(vmscale_vmm::Error),
    /// The host lacks something the run needs (and the request itself was fine).
    #[error("{0}")]
    Host(String),
    #[error("interrupted")]
    Interrupted,
}

/// A wait the flag ended is the interruption itself, not a failure of KVM.
impl From<vmscale_kvm::Error> for Error {
    fn from(e: vmscale_kvm::Error) -> Error {
        match e {
            vmscale_kvm::Error::Interrupted => Error::Interrupted,
            e => Error::Kvm(e),
        }
    }
}

/// A wait the flag ended is the interruption itself, not a failure of QEMU.
impl From<vmscale_vmm::Error> for Error {
    fn from(e: vmscale_vmm::Error) -> Error {
        match e {
            vmscale_vmm::Error::Interrupted => Error::Interrupted,
            e => Error::Vmm(e),
        }
    }
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
    mut sweep: impl FnMut() -> Result<Vec<Point>, Error>,
) -> Result<Vec<Point>, Error> {
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

/// Set from a signal handler (Ctrl-C, SIGTERM, SIGHUP); scenarios poll it between samples,
/// and every wait in setup (vCPUs starting, QEMU answering) polls it too, so that VMs are
/// dropped, and with them every vCPU thread and fd, before the process exits. Shared, so
/// that a VM or a QEMU can keep it for the waits it does itself.
#[derive(Debug, Clone, Default)]
pub struct Cancel(pub Arc<AtomicBool>);

impl Cancel {
    /// A flag nothing sets (tests, examples).
    pub fn never() -> Cancel {
        Cancel::default()
    }

    pub fn check(&self) -> Result<(), Error> {
        check_flag(&self.0)
    }

    /// The flag, for a VM or QEMU to keep.
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

/// [`Cancel::check`] of a bare flag.
pub(crate) fn check_flag(flag: &AtomicBool) -> Result<(), Error> {
    if flag.load(Ordering::Relaxed) {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_scenario_has_its_own_name_and_a_valid_tour() {
        let names: Vec<&str> = registry().iter().map(|s| s.info().name).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        // The tour's sweeps pass the checks a run applies (QEMU ones only where QEMU is
        // installed; otherwise the reason names the package).
        use Scenario as _;
        memslot::Memslot.tour_knobs().unwrap().validate().unwrap();
        zap::Zap.tour_knobs().unwrap().validate().unwrap();
        teardown::Teardown.tour_knobs().unwrap().validate().unwrap();
        mlock::Mlock.tour_knobs().unwrap().validate().unwrap();
        irqfd::Irqfd.tour_knobs().unwrap().validate().unwrap();
        match qemu_hotplug::QemuHotplug.tour_knobs() {
            Ok(knobs) => knobs.validate().unwrap(),
            Err(why) => assert!(why.contains("apt-get install qemu-system-x86"), "{why}"),
        }
        if let Ok(knobs) = qemu_start::QemuStart.tour_knobs() {
            knobs.validate().unwrap();
        }
        if let Ok(knobs) = qemu_migrate::QemuMigrate.tour_knobs() {
            knobs.validate().unwrap();
        }
    }

    /// The one list gives `run`'s subcommands and the registry: each subcommand is named
    /// as its scenario, in the same order.
    #[test]
    fn every_run_subcommand_is_its_registered_scenario() {
        #[derive(Debug, clap::Args)]
        struct NoShared {}
        use clap::Subcommand;
        let run = RunScenario::<NoShared>::augment_subcommands(clap::Command::new("run"));
        let subcommands: Vec<&str> = run.get_subcommands().map(|c| c.get_name()).collect();
        let names: Vec<&str> = registry().iter().map(|s| s.info().name).collect();
        assert_eq!(subcommands, names);
    }
}
