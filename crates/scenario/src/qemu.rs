//! What the three QEMU scenarios share: which QEMU, the knobs they have in common, how
//! they are traced, the loop that times operations in one running QEMU per point, and the
//! notes that say which QEMU a series measured.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use vmscale_run::{Point, Series};
use vmscale_stats::Summary;
use vmscale_vmm::{Qemu, QemuConfig};

use crate::{Cancel, Error, Knob, PhaseHook, Progress, Range, Syscalls, TraceNeeds};

/// vCPU counts every QEMU scenario sweeps by default.
pub const DEFAULT_VCPUS: &str = "1,2,4";
/// Accepted values of `--vcpus`: QEMU's limit for the machine type it runs.
pub const VCPUS: Range = Range::new(1, 255);
/// Accepted values of `--mem-mib` (guest memory of each QEMU).
pub const MEM_MIB: Range = Range::new(16, 65_536);

/// [`DEFAULT_VCPUS`] as a list.
pub fn default_vcpus() -> Vec<usize> {
    DEFAULT_VCPUS
        .split(',')
        .map(|n| n.parse().expect("DEFAULT_VCPUS is a list of numbers"))
        .collect()
}

/// The knobs of a scenario that times operations in one running QEMU per vCPU count:
/// which QEMU, the counts, and how many operations per point are warm-up and measured.
/// Flattened into the scenario's own knobs, so run.json keeps them beside the others.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QemuSweep {
    /// `--qemu`; `None`: qemu-system-x86_64 on PATH.
    pub qemu: Option<PathBuf>,
    pub vcpus: Vec<usize>,
    pub repeat: usize,
    pub warmup: usize,
}

impl QemuSweep {
    /// The default QEMU and vCPU counts, with the scenario's own repeat and warm-up.
    pub fn new(repeat: usize, warmup: usize) -> QemuSweep {
        QemuSweep {
            qemu: None,
            vcpus: default_vcpus(),
            repeat,
            warmup,
        }
    }

    /// Checks the counts against [`VCPUS`] and the scenario's ranges.
    pub fn validate(&self, repeat: Range, warmup: Range) -> Result<(), Error> {
        VCPUS.check_all("--vcpus", &crate::as_u64(&self.vcpus))?;
        repeat.check("--repeat", self.repeat as u64)?;
        warmup.check("--warmup", self.warmup as u64)?;
        Ok(())
    }

    pub fn total_samples(&self) -> u64 {
        (self.vcpus.len() * (self.repeat + self.warmup)) as u64
    }
}

/// The tracing every QEMU scenario needs: the measuring thread's system calls (the QMP
/// round trips) and QEMU's (named once QEMU runs), every ioctl (QEMU's later threads' KVM
/// calls among them; the analysis keeps QEMU's own), and thread creation, which ties
/// threads QEMU creates later to it.
pub fn trace_needs() -> TraceNeeds {
    TraceNeeds {
        // The ioctl system call, by this host's numbering (QEMU runs here), kept from every
        // task: the threads QEMU creates mid-run (a migration thread) cannot be named before
        // they exist.
        syscalls: Syscalls::MeasuringThreadAnd(vec![libc::SYS_ioctl]),
        extra_events: vec!["sched:sched_process_fork"],
    }
}

/// What every QEMU scenario checks before anything starts: its knobs, then the QEMU binary
/// (a missing QEMU is a usage error, exit 2). The record describes the host's KVM when
/// /dev/kvm opens.
pub(crate) fn prepare(
    validate: impl FnOnce() -> Result<(), Error>,
    qemu: Option<&Path>,
) -> Result<crate::Prepared<PathBuf>, Error> {
    validate()?;
    let binary = binary(qemu)?;
    Ok(crate::Prepared {
        host: binary,
        kvm: vmscale_kvm::KvmSystem::open().ok().map(|s| s.facts()),
    })
}

/// The tour leaves the QEMU scenarios out when no QEMU is installed, and says how to get one.
pub(crate) fn tour_requirement() -> Result<(), String> {
    if installed() {
        Ok(())
    } else {
        Err(format!(
            "no {} on PATH, so the qemu scenarios are left out (apt-get install qemu-system-x86)",
            vmscale_vmm::QEMU_BINARY
        ))
    }
}

/// One timed operation's start and end on the monotonic clock.
pub(crate) trait Timed {
    fn start(&self) -> u64;
    fn end(&self) -> u64;
}

/// What a QEMU scenario times, one sample at a time, in one running QEMU per point.
pub(crate) trait Operation {
    /// What one timed operation recorded.
    type Marks: Timed;
    /// The QEMU of one point.
    fn config(&self, binary: PathBuf, vcpus: usize) -> QemuConfig;
    /// Untimed, once QEMU runs and before the warm-up.
    fn setup(&mut self, _qemu: &mut Qemu) -> Result<(), Error> {
        Ok(())
    }
    /// One operation, timed (warm-up operations too, their marks unused).
    fn once(&mut self, qemu: &mut Qemu) -> Result<Self::Marks, Error>;
    /// Untimed, after the measured phase and before QEMU quits: that QEMU did what it
    /// acknowledged.
    fn check(&mut self, _qemu: &mut Qemu) -> Result<(), Error> {
        Ok(())
    }
    /// The point's series: its name, what a sample is and the phases of `marks`. The loop
    /// adds the samples, their start times, the notes and QEMU's threads.
    fn series(&self, marks: &[Self::Marks]) -> Series;
}

/// The loop a QEMU scenario runs per point: start QEMU with `vcpus`, check its vCPUs run,
/// set up, warm up, name QEMU's threads to the trace, time `repeat` operations in one
/// measured phase labelled `<scenario> vcpus=N`, check, quit.
pub(crate) fn sweep<O: Operation>(
    scenario: &str,
    knobs: &QemuSweep,
    operation: &mut O,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
) -> Result<Vec<Point>, Error> {
    let binary = binary(knobs.qemu.as_deref())?;
    progress.start(knobs.total_samples());
    let host_cpus = vmscale_run::host::online_cpus();
    let mut points = Vec::new();
    for &vcpus in &knobs.vcpus {
        cancel.check()?;
        progress.set_message(format!("QEMU with {vcpus} vCPUs"));
        let mut config = operation.config(binary.clone(), vcpus);
        config.interrupt = Some(cancel.flag());
        let mut qemu = Qemu::start(&config)?;
        expect_running(&mut qemu)?;
        let notes = notes(&mut qemu)?;
        operation.setup(&mut qemu)?;
        for _ in 0..knobs.warmup {
            cancel.check()?;
            operation.once(&mut qemu)?;
            progress.advance(1);
        }
        let vmm_tids = qemu.threads();
        hook.carried_out_by(&vmm_tids)?;
        let label = format!("{scenario} vcpus={vcpus}");
        let mut marks = Vec::with_capacity(knobs.repeat);
        hook.measured_phase_begins(&label)?;
        for _ in 0..knobs.repeat {
            cancel.check()?;
            marks.push(operation.once(&mut qemu)?);
            progress.advance(1);
        }
        hook.measured_phase_ends(&label)?;
        operation.check(&mut qemu)?;
        qemu.quit()?;
        let samples_ns: Vec<u64> = marks.iter().map(|m| m.end() - m.start()).collect();
        points.push(Point {
            n: vcpus as u64,
            vcpus_per_host_cpu: vcpus as f64 / host_cpus as f64,
            series: vec![Series {
                summary: Summary::from_samples(&samples_ns),
                sample_start_ns: marks.iter().map(Timed::start).collect(),
                samples_ns,
                notes,
                vmm_tids,
                ..operation.series(&marks)
            }],
        });
    }
    Ok(points)
}

/// `--qemu PATH`, the same in every QEMU scenario.
pub fn qemu_knob() -> Knob {
    Knob {
        flag: "--qemu",
        range: None,
    }
}

/// The QEMU binary a run uses, or a usage error saying how to get one.
pub fn binary(explicit: Option<&Path>) -> Result<PathBuf, Error> {
    Ok(vmscale_vmm::find_qemu(explicit)?)
}

/// Whether a QEMU can be found without `--qemu` (for `tour`).
pub fn installed() -> bool {
    vmscale_vmm::find_qemu(None).is_ok()
}

/// Notes of a series driven through `qemu`: its command line and version, so two runs
/// with different QEMUs are told apart.
pub(crate) fn notes(qemu: &mut Qemu) -> Result<Vec<String>, Error> {
    let version = qemu.execute("query-version", None)?.value;
    let part = |name: &str| version["qemu"][name].as_u64().unwrap_or(0);
    let package = version["package"].as_str().unwrap_or("").trim();
    Ok(vec![
        format!(
            "QEMU {}.{}.{}{}",
            part("major"),
            part("minor"),
            part("micro"),
            if package.is_empty() {
                String::new()
            } else {
                format!(" ({package})")
            }
        ),
        format!("QEMU command line: {}", qemu.command_line()),
    ])
}

/// Refuses to measure a QEMU whose vCPUs are not running: every QEMU scenario claims they
/// do.
pub(crate) fn expect_running(qemu: &mut Qemu) -> Result<(), Error> {
    let status = qemu.execute("query-status", None)?.value;
    if status["status"] != "running" {
        return Err(qemu
            .error(format!(
                "QEMU's vCPUs are not running (status {})",
                status["status"]
            ))
            .into());
    }
    Ok(())
}
