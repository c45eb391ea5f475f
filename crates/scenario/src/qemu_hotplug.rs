//! `qemu-hotplug`: the latency of one DIMM hotplug in a real QEMU while N vCPUs run.
//!
//! One sample is the pair of QMP commands a management layer sends to add memory:
//! `object-add memory-backend-ram` (QEMU maps the memory) and `device_add pc-dimm` (QEMU
//! places the DIMM and commits its memory map to KVM: the memslot update of case 3, made by
//! a real VMM). Every sample adds a new DIMM: unplugging needs the guest's cooperation,
//! which a firmware-only guest never gives, so a point holds at most the machine's DIMM
//! slots. The trace then shows, per hotplug, which KVM ioctls QEMU made and how long its
//! vCPU threads were out of the guest.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::json;
use vmscale_run::{monotonic_ns, Phase, Point, Series};
use vmscale_stats::Summary;
use vmscale_vmm::{Qemu, QemuConfig};

use crate::{Cancel, Error, Knob, PhaseHook, Progress, Range, ScenarioInfo};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QemuHotplugKnobs {
    /// `--qemu`; `None`: qemu-system-x86_64 on PATH.
    pub qemu: Option<PathBuf>,
    pub vcpus: Vec<usize>,
    pub repeat: usize,
    pub warmup: usize,
    pub dimm_mib: u64,
    pub mem_mib: u64,
}

pub const DEFAULT_VCPUS: &str = "1,2,4";
pub const DEFAULT_REPEAT: usize = 50;
pub const DEFAULT_WARMUP: usize = 2;
pub const DEFAULT_DIMM_MIB: u64 = 128;
pub const DEFAULT_MEM_MIB: u64 = 128;

/// QEMU's limit on DIMM slots (ACPI_MAX_RAM_SLOTS): every sample takes one.
pub const MAX_SLOTS: usize = 256;

pub const VCPUS: Range = Range::new(1, 255);
pub const REPEAT: Range = Range::new(1, MAX_SLOTS as u64);
pub const WARMUP: Range = Range::new(0, 16);
pub const DIMM_MIB: Range = Range::new(2, 4_096);
pub const MEM_MIB: Range = Range::new(16, 65_536);

impl Default for QemuHotplugKnobs {
    fn default() -> Self {
        QemuHotplugKnobs {
            qemu: None,
            vcpus: vec![1, 2, 4],
            repeat: DEFAULT_REPEAT,
            warmup: DEFAULT_WARMUP,
            dimm_mib: DEFAULT_DIMM_MIB,
            mem_mib: DEFAULT_MEM_MIB,
        }
    }
}

pub fn info() -> ScenarioInfo {
    ScenarioInfo {
        name: "qemu-hotplug",
        case: "case 3 in a real VMM: QEMU's memory commit on DIMM hotplug",
        summary: "latency of one DIMM hotplug (QMP object-add + device_add) in QEMU while N vCPUs run, with the KVM ioctls QEMU made per hotplug",
        sweep: "vcpus",
        knobs: vec![
            crate::qemu::qemu_knob(),
            Knob { flag: "--vcpus", range: Some(VCPUS) },
            Knob { flag: "--repeat", range: Some(REPEAT) },
            Knob { flag: "--warmup", range: Some(WARMUP) },
            Knob { flag: "--dimm-mib", range: Some(DIMM_MIB) },
            Knob { flag: "--mem-mib", range: Some(MEM_MIB) },
        ],
    }
}

impl QemuHotplugKnobs {
    pub fn validate(&self) -> Result<(), Error> {
        VCPUS.check_all("--vcpus", &crate::as_u64(&self.vcpus))?;
        REPEAT.check("--repeat", self.repeat as u64)?;
        WARMUP.check("--warmup", self.warmup as u64)?;
        DIMM_MIB.check("--dimm-mib", self.dimm_mib)?;
        MEM_MIB.check("--mem-mib", self.mem_mib)?;
        if self.repeat + self.warmup > MAX_SLOTS {
            return Err(Error::Usage(format!(
                "--repeat plus --warmup must be at most {MAX_SLOTS}, QEMU's DIMM slots: every hotplug takes one (got {})",
                self.repeat + self.warmup
            )));
        }
        if !self.dimm_mib.is_multiple_of(2) {
            return Err(Error::Usage(format!(
                "--dimm-mib must be even: QEMU aligns DIMMs to 2 MiB (got {})",
                self.dimm_mib
            )));
        }
        Ok(())
    }

    fn config(&self, binary: PathBuf, vcpus: usize) -> QemuConfig {
        let slots = self.repeat + self.warmup;
        let mut config = QemuConfig::new(binary, vcpus, self.mem_mib);
        config.dimm_slots = slots;
        config.maxmem_mib = self.mem_mib + slots as u64 * self.dimm_mib;
        config
    }

    pub fn total_samples(&self) -> u64 {
        (self.vcpus.len() * (self.repeat + self.warmup)) as u64
    }
}

/// The `qemu-hotplug` scenario.
#[derive(Debug, Clone, Copy)]
pub struct QemuHotplug;

impl crate::Scenario for QemuHotplug {
    type Knobs = QemuHotplugKnobs;
    /// The QEMU binary.
    type Host = PathBuf;

    fn info(&self) -> ScenarioInfo {
        info()
    }

    fn tour_knobs(&self) -> Result<QemuHotplugKnobs, String> {
        crate::qemu::tour_requirement()?;
        Ok(QemuHotplugKnobs {
            vcpus: vec![1, 2, 4],
            repeat: 30,
            ..QemuHotplugKnobs::default()
        })
    }

    fn tracing(&self) -> crate::TraceNeeds {
        crate::qemu::trace_needs()
    }

    fn prepare(&self, knobs: &QemuHotplugKnobs) -> Result<crate::Prepared<PathBuf>, Error> {
        crate::qemu::prepare(|| knobs.validate(), knobs.qemu.as_deref())
    }

    fn run(
        &self,
        knobs: &QemuHotplugKnobs,
        _: &PathBuf,
        progress: &dyn Progress,
        cancel: &Cancel,
        hook: &mut dyn PhaseHook,
    ) -> Result<Vec<Point>, Error> {
        run(knobs, progress, cancel, hook)
    }
}

/// Runs the sweep: one QEMU per vCPU count, one DIMM per sample.
pub fn run(
    knobs: &QemuHotplugKnobs,
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
        cancel.check()?;
        progress.set_message(format!("QEMU with {vcpus} vCPUs"));
        let mut qemu = Qemu::start(&knobs.config(binary.clone(), vcpus))?;
        crate::qemu::expect_running(&mut qemu)?;
        let notes = crate::qemu::notes(&mut qemu)?;
        let mut next = 0usize;
        for _ in 0..knobs.warmup {
            cancel.check()?;
            hotplug(&mut qemu, next, knobs.dimm_mib)?;
            next += 1;
            progress.advance(1);
        }
        let vmm_tids = qemu.threads();
        hook.carried_out_by(&vmm_tids)?;
        let label = format!("qemu-hotplug vcpus={vcpus}");
        let mut marks = Vec::with_capacity(knobs.repeat);
        hook.measured_phase_begins(&label)?;
        for _ in 0..knobs.repeat {
            cancel.check()?;
            marks.push(hotplug(&mut qemu, next, knobs.dimm_mib)?);
            next += 1;
            progress.advance(1);
        }
        hook.measured_phase_ends(&label)?;
        // Every DIMM must be there: a hotplug QEMU acknowledged but did not do would make
        // the samples meaningless.
        let dimms = qemu.execute("query-memory-devices", None)?.value;
        let plugged = dimms.as_array().map_or(0, Vec::len);
        if plugged != next {
            return Err(qemu
                .error(format!(
                    "QEMU reports {plugged} DIMMs after {next} hotplugs"
                ))
                .into());
        }
        qemu.quit()?;
        let samples_ns: Vec<u64> = marks.iter().map(|m| m.end - m.start).collect();
        let phase =
            |name: &str, f: &dyn Fn(&Marks) -> u64| Phase::new(name, marks.iter().map(f).collect());
        points.push(Point {
            n: vcpus as u64,
            vcpus_per_host_cpu: vcpus as f64 / host_cpus as f64,
            series: vec![Series {
                name: "hotplug".into(),
                sample_is: format!(
                    "one {} MiB DIMM hotplug (QMP object-add memory-backend-ram + device_add pc-dimm), vCPUs running",
                    knobs.dimm_mib
                ),
                summary: Summary::from_samples(&samples_ns),
                sample_start_ns: marks.iter().map(|m| m.start).collect(),
                samples_ns,
                phases: vec![
                    phase("object-add", &|m| m.added - m.start),
                    phase("device_add", &|m| m.end - m.added),
                ],
                notes,
                vmm_tids,
                ..Series::default()
            }],
        });
    }
    Ok(points)
}

struct Marks {
    start: u64,
    added: u64,
    end: u64,
}

/// One timed hotplug of DIMM `index`; only the two round trips happen between the marks.
fn hotplug(qemu: &mut Qemu, index: usize, dimm_mib: u64) -> Result<Marks, Error> {
    let backend = json!({
        "qom-type": "memory-backend-ram",
        "id": format!("vmscale-mem{index}"),
        "size": dimm_mib << 20,
    });
    let dimm = json!({
        "driver": "pc-dimm",
        "id": format!("vmscale-dimm{index}"),
        "memdev": format!("vmscale-mem{index}"),
    });
    let start = monotonic_ns();
    qemu.execute("object-add", Some(backend))?;
    let added = monotonic_ns();
    qemu.execute("device_add", Some(dimm))?;
    let end = monotonic_ns();
    Ok(Marks { start, added, end })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_hotplugs_than_dimm_slots_is_a_usage_error() {
        let knobs = QemuHotplugKnobs {
            repeat: 250,
            warmup: 10,
            ..Default::default()
        };
        let e = knobs.validate().unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("256"), "{e}");
        let knobs = QemuHotplugKnobs {
            dimm_mib: 3,
            ..Default::default()
        };
        assert!(knobs.validate().unwrap_err().is_usage());
    }

    #[test]
    fn the_machine_has_a_slot_for_every_sample() {
        let knobs = QemuHotplugKnobs::default();
        let config = knobs.config(PathBuf::from("qemu"), 2);
        assert_eq!(config.dimm_slots, 52);
        assert_eq!(config.maxmem_mib, 128 + 52 * 128);
        let args = config.args(std::path::Path::new("/x/qmp.sock")).join(" ");
        assert!(args.contains("-smp 2 "), "{args}");
        assert!(args.contains("-m 128M,slots=52,maxmem=6784M "), "{args}");
        assert!(!args.contains("-S"), "{args}");
    }
}
