//! `qemu-start`: how long a real QEMU takes to come up (exec to QMP ready) and to go away
//! (`quit` to reaped), for a sweep of vCPU counts and memory sizes, with M QEMUs at once.
//!
//! Case 1 is many VMs released at once: with `--vms M`, M QEMUs are started back to back
//! and each is timed from its own exec until its QMP monitor accepts commands; then all M
//! are sent `quit` at once and each is timed until it is reaped. Each QEMU is one sample.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use vmscale_run::{Point, Series};
use vmscale_stats::Summary;
use vmscale_vmm::{Qemu, QemuConfig};

use crate::{Cancel, Error, Knob, PhaseHook, Progress, Range, ScenarioInfo};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QemuStartKnobs {
    pub qemu: Option<PathBuf>,
    pub vcpus: Vec<usize>,
    pub mem_mib: Vec<u64>,
    pub vms: usize,
    pub repeat: usize,
}

pub const DEFAULT_MEM_MIB: &str = "128";
pub const DEFAULT_VMS: usize = 1;
pub const DEFAULT_REPEAT: usize = 5;

/// `vmscale run qemu-start`'s flags.
#[derive(Debug, clap::Args)]
pub struct QemuStartArgs {
    /// The QEMU to drive (default: qemu-system-x86_64 on PATH)
    #[arg(long, value_name = "PATH")]
    pub qemu: Option<PathBuf>,
    /// vCPU counts to sweep
    #[arg(long, value_delimiter = ',', default_value = crate::qemu::DEFAULT_VCPUS)]
    pub vcpus: Vec<usize>,
    /// Guest memory sizes to sweep, in MiB (a series each)
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_MEM_MIB)]
    pub mem_mib: Vec<u64>,
    /// QEMUs started and quit at once
    #[arg(long, default_value_t = DEFAULT_VMS)]
    pub vms: usize,
    /// Rounds per point and memory size (each gives --vms samples)
    #[arg(long, default_value_t = DEFAULT_REPEAT)]
    pub repeat: usize,
}

pub const VMS: Range = Range::new(1, 64);
pub const REPEAT: Range = Range::new(1, 1_000);

impl Default for QemuStartKnobs {
    fn default() -> Self {
        QemuStartKnobs {
            qemu: None,
            vcpus: crate::qemu::default_vcpus(),
            mem_mib: vec![DEFAULT_MEM_MIB
                .parse()
                .expect("DEFAULT_MEM_MIB is a number")],
            vms: DEFAULT_VMS,
            repeat: DEFAULT_REPEAT,
        }
    }
}

pub fn info() -> ScenarioInfo {
    ScenarioInfo {
        name: "qemu-start",
        case: "case 1 in a real VMM: QEMU start-up and exit, M at once",
        summary: "time from exec to QMP ready and from quit to reaped for QEMU with N vCPUs, M QEMUs in parallel",
        sweep: "vcpus",
        knobs: vec![
            crate::qemu::qemu_knob(),
            Knob { flag: "--vcpus", range: Some(crate::qemu::VCPUS) },
            Knob { flag: "--mem-mib", range: Some(crate::qemu::MEM_MIB) },
            Knob { flag: "--vms", range: Some(VMS) },
            Knob { flag: "--repeat", range: Some(REPEAT) },
        ],
    }
}

impl QemuStartKnobs {
    pub fn validate(&self) -> Result<(), Error> {
        crate::qemu::VCPUS.check_all("--vcpus", &crate::as_u64(&self.vcpus))?;
        crate::qemu::MEM_MIB.check_all("--mem-mib", &self.mem_mib)?;
        VMS.check("--vms", self.vms as u64)?;
        REPEAT.check("--repeat", self.repeat as u64)?;
        Ok(())
    }

    pub fn total_samples(&self) -> u64 {
        (self.vcpus.len() * self.mem_mib.len() * self.repeat * self.vms) as u64
    }

    fn series_name(&self, what: &str, mem_mib: u64) -> String {
        if self.mem_mib.len() == 1 {
            what.to_string()
        } else {
            format!("{what} {mem_mib} MiB")
        }
    }
}

/// The `qemu-start` scenario.
#[derive(Debug, Clone, Copy)]
pub struct QemuStart;

impl crate::Scenario for QemuStart {
    type Knobs = QemuStartKnobs;
    /// The QEMU binary.
    type Host = PathBuf;
    type Flags = QemuStartArgs;

    const ABOUT: &'static str =
        "A real QEMU: exec to QMP ready and quit to reaped, M QEMUs at once";

    fn knobs(&self, args: &QemuStartArgs) -> Result<QemuStartKnobs, Error> {
        Ok(QemuStartKnobs {
            qemu: args.qemu.clone(),
            vcpus: args.vcpus.clone(),
            mem_mib: args.mem_mib.clone(),
            vms: args.vms,
            repeat: args.repeat,
        })
    }

    fn info(&self) -> ScenarioInfo {
        info()
    }

    fn tour_knobs(&self) -> Result<QemuStartKnobs, String> {
        crate::qemu::tour_requirement()?;
        Ok(QemuStartKnobs {
            vms: 2,
            repeat: 3,
            ..QemuStartKnobs::default()
        })
    }

    fn tracing(&self) -> crate::TraceNeeds {
        crate::qemu::trace_needs()
    }

    fn prepare(&self, knobs: &QemuStartKnobs) -> Result<crate::Prepared<PathBuf>, Error> {
        crate::qemu::prepare(|| knobs.validate(), knobs.qemu.as_deref())
    }

    fn run(
        &self,
        knobs: &QemuStartKnobs,
        _: &PathBuf,
        progress: &dyn Progress,
        cancel: &Cancel,
        hook: &mut dyn PhaseHook,
    ) -> Result<Vec<Point>, Error> {
        run(knobs, progress, cancel, hook)
    }
}

pub fn run(
    knobs: &QemuStartKnobs,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
) -> Result<Vec<Point>, Error> {
    knobs.validate()?;
    let binary = crate::qemu::binary(knobs.qemu.as_deref())?;
    progress.start(knobs.total_samples());
    let host_cpus = vmscale_run::host::online_cpus();
    let mut points = Vec::new();
    for &vcpus in &knobs.vcpus {
        let mut series = Vec::new();
        for &mem_mib in &knobs.mem_mib {
            progress.set_message(format!(
                "{} x QEMU with {vcpus} vCPUs, {mem_mib} MiB",
                knobs.vms
            ));
            let mut config = QemuConfig::new(binary.clone(), vcpus, mem_mib);
            config.interrupt = Some(cancel.flag());
            let label = format!(
                "qemu-start vcpus={vcpus} mem={mem_mib}MiB vms={}",
                knobs.vms
            );
            let (mut start_ns, mut quit_ns) = (Vec::new(), Vec::new());
            let mut notes = Vec::new();
            hook.measured_phase_begins(&label)?;
            for _ in 0..knobs.repeat {
                cancel.check()?;
                let round = round(&config, knobs.vms, notes.is_empty())?;
                start_ns.extend(round.ready_ns);
                quit_ns.extend(round.reaped_ns);
                if notes.is_empty() {
                    notes = round.notes;
                }
                progress.advance(knobs.vms as u64);
            }
            hook.measured_phase_ends(&label)?;
            let mut start_notes = notes.clone();
            start_notes.push(format!("{} QEMUs started at once", knobs.vms));
            series.push(Series {
                name: knobs.series_name("start", mem_mib),
                sample_is: format!(
                    "one QEMU ({vcpus} vCPUs, {mem_mib} MiB) from exec until its QMP monitor accepts commands, {} started at once",
                    knobs.vms
                ),
                summary: Summary::from_samples(&start_ns),
                samples_ns: start_ns,
                notes: start_notes,
                ..Series::default()
            });
            series.push(Series {
                name: knobs.series_name("quit", mem_mib),
                sample_is: format!(
                    "one running QEMU ({vcpus} vCPUs, {mem_mib} MiB) from QMP quit until it is reaped, {} quit at once",
                    knobs.vms
                ),
                summary: Summary::from_samples(&quit_ns),
                samples_ns: quit_ns,
                notes,
                ..Series::default()
            });
        }
        points.push(Point {
            n: vcpus as u64,
            vcpus_per_host_cpu: (vcpus * knobs.vms) as f64 / host_cpus as f64,
            series,
        });
    }
    Ok(points)
}

struct Round {
    ready_ns: Vec<u64>,
    reaped_ns: Vec<u64>,
    notes: Vec<String>,
}

/// `vms` QEMUs up and down. They are spawned from this thread, which outlives them (their
/// parent-death signal is tied to it); waiting for each is done from a thread of its own,
/// so one slow QEMU does not delay another's timestamp.
fn round(config: &QemuConfig, vms: usize, with_notes: bool) -> Result<Round, Error> {
    let mut qemus = Vec::with_capacity(vms);
    for _ in 0..vms {
        qemus.push(Qemu::spawn(config)?);
    }
    let ready: Vec<Result<u64, vmscale_vmm::Error>> = std::thread::scope(|scope| {
        let waits: Vec<_> = qemus
            .iter_mut()
            .map(|qemu| scope.spawn(move || qemu.connect()))
            .collect();
        waits
            .into_iter()
            .map(|w| w.join().expect("connect does not panic"))
            .collect()
    });
    let ready_ns = ready.into_iter().collect::<Result<Vec<u64>, _>>()?;
    for qemu in &mut qemus {
        crate::qemu::expect_running(qemu)?;
    }
    let notes = match (with_notes, qemus.first_mut()) {
        (true, Some(first)) => crate::qemu::notes(first)?,
        _ => Vec::new(),
    };
    let reaped: Vec<Result<u64, vmscale_vmm::Error>> = std::thread::scope(|scope| {
        let quits: Vec<_> = qemus
            .iter_mut()
            .map(|qemu| scope.spawn(move || qemu.quit()))
            .collect();
        quits
            .into_iter()
            .map(|q| q.join().expect("quit does not panic"))
            .collect()
    });
    let reaped_ns = reaped.into_iter().collect::<Result<Vec<u64>, _>>()?;
    Ok(Round {
        ready_ns,
        reaped_ns,
        notes,
    })
}
