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
use vmscale_vmm::{Qemu, QemuConfig};

use crate::qemu::{Operation, QemuSweep, Timed};
use crate::{Cancel, Error, Knob, PhaseHook, Progress, Range, ScenarioInfo};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QemuHotplugKnobs {
    /// `--qemu`, `--vcpus`, `--repeat`, `--warmup`.
    #[serde(flatten)]
    pub sweep: QemuSweep,
    pub dimm_mib: u64,
    pub mem_mib: u64,
}

pub const DEFAULT_REPEAT: usize = 50;
pub const DEFAULT_WARMUP: usize = 2;
pub const DEFAULT_DIMM_MIB: u64 = 128;
pub const DEFAULT_MEM_MIB: u64 = 128;

/// `vmscale run qemu-hotplug`'s flags.
#[derive(Debug, clap::Args)]
pub struct QemuHotplugArgs {
    /// The QEMU to drive (default: qemu-system-x86_64 on PATH)
    #[arg(long, value_name = "PATH")]
    pub qemu: Option<PathBuf>,
    /// vCPU counts to sweep (one QEMU each)
    #[arg(long, value_delimiter = ',', default_value = crate::qemu::DEFAULT_VCPUS)]
    pub vcpus: Vec<usize>,
    /// Measured hotplugs per point, one DIMM each (with --warmup at most 256, QEMU's slots)
    #[arg(long, default_value_t = DEFAULT_REPEAT)]
    pub repeat: usize,
    /// Hotplugs run first at every point and not counted
    #[arg(long, default_value_t = DEFAULT_WARMUP)]
    pub warmup: usize,
    /// Size of each hotplugged DIMM, in MiB (even)
    #[arg(long, default_value_t = DEFAULT_DIMM_MIB)]
    pub dimm_mib: u64,
    /// Boot memory of each QEMU, in MiB
    #[arg(long, default_value_t = DEFAULT_MEM_MIB)]
    pub mem_mib: u64,
}

/// QEMU's limit on DIMM slots (ACPI_MAX_RAM_SLOTS): every sample takes one.
pub const MAX_SLOTS: usize = 256;

pub const REPEAT: Range = Range::new(1, MAX_SLOTS as u64);
pub const WARMUP: Range = Range::new(0, 16);
pub const DIMM_MIB: Range = Range::new(2, 4_096);

impl Default for QemuHotplugKnobs {
    fn default() -> Self {
        QemuHotplugKnobs {
            sweep: QemuSweep::new(DEFAULT_REPEAT, DEFAULT_WARMUP),
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
            Knob { flag: "--vcpus", range: Some(crate::qemu::VCPUS) },
            Knob { flag: "--repeat", range: Some(REPEAT) },
            Knob { flag: "--warmup", range: Some(WARMUP) },
            Knob { flag: "--dimm-mib", range: Some(DIMM_MIB) },
            Knob { flag: "--mem-mib", range: Some(crate::qemu::MEM_MIB) },
        ],
    }
}

impl QemuHotplugKnobs {
    pub fn validate(&self) -> Result<(), Error> {
        self.sweep.validate(REPEAT, WARMUP)?;
        DIMM_MIB.check("--dimm-mib", self.dimm_mib)?;
        crate::qemu::MEM_MIB.check("--mem-mib", self.mem_mib)?;
        let slots = self.slots();
        if slots > MAX_SLOTS {
            return Err(Error::Usage(format!(
                "--repeat plus --warmup must be at most {MAX_SLOTS}, QEMU's DIMM slots: every hotplug takes one (got {slots})"
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

    /// DIMMs one point plugs, warm-up included.
    fn slots(&self) -> usize {
        self.sweep.repeat + self.sweep.warmup
    }

    fn config(&self, binary: PathBuf, vcpus: usize) -> QemuConfig {
        let slots = self.slots();
        let mut config = QemuConfig::new(binary, vcpus, self.mem_mib);
        config.dimm_slots = slots;
        config.maxmem_mib = self.mem_mib + slots as u64 * self.dimm_mib;
        config
    }

    pub fn total_samples(&self) -> u64 {
        self.sweep.total_samples()
    }
}

/// The `qemu-hotplug` scenario.
#[derive(Debug, Clone, Copy)]
pub struct QemuHotplug;

impl crate::Scenario for QemuHotplug {
    type Knobs = QemuHotplugKnobs;
    /// The QEMU binary.
    type Host = PathBuf;
    type Flags = QemuHotplugArgs;

    const ABOUT: &'static str =
        "A real QEMU: DIMM hotplug latency while N vCPUs run, with QEMU's KVM ioctls";

    fn knobs(&self, args: &QemuHotplugArgs) -> Result<QemuHotplugKnobs, Error> {
        Ok(QemuHotplugKnobs {
            sweep: QemuSweep {
                qemu: args.qemu.clone(),
                vcpus: args.vcpus.clone(),
                repeat: args.repeat,
                warmup: args.warmup,
            },
            dimm_mib: args.dimm_mib,
            mem_mib: args.mem_mib,
        })
    }

    fn info(&self) -> ScenarioInfo {
        info()
    }

    fn tour_knobs(&self) -> Result<QemuHotplugKnobs, String> {
        crate::qemu::tour_requirement()?;
        let mut knobs = QemuHotplugKnobs::default();
        knobs.sweep.repeat = 30;
        Ok(knobs)
    }

    fn tracing(&self) -> crate::TraceNeeds {
        crate::qemu::trace_needs()
    }

    fn prepare(&self, knobs: &QemuHotplugKnobs) -> Result<crate::Prepared<PathBuf>, Error> {
        crate::qemu::prepare(|| knobs.validate(), knobs.sweep.qemu.as_deref())
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
    let mut hotplugs = Hotplugs { knobs, next: 0 };
    crate::qemu::sweep(
        "qemu-hotplug",
        &knobs.sweep,
        &mut hotplugs,
        progress,
        cancel,
        hook,
    )
}

/// The hotplugs into one QEMU; `next` is the index of the next DIMM.
struct Hotplugs<'a> {
    knobs: &'a QemuHotplugKnobs,
    next: usize,
}

impl Operation for Hotplugs<'_> {
    type Marks = Marks;

    fn config(&self, binary: PathBuf, vcpus: usize) -> QemuConfig {
        self.knobs.config(binary, vcpus)
    }

    fn setup(&mut self, _: &mut Qemu) -> Result<(), Error> {
        self.next = 0;
        Ok(())
    }

    fn once(&mut self, qemu: &mut Qemu) -> Result<Marks, Error> {
        let marks = hotplug(qemu, self.next, self.knobs.dimm_mib)?;
        self.next += 1;
        Ok(marks)
    }

    /// Every DIMM must be there: a hotplug QEMU acknowledged but did not do would make the
    /// samples meaningless.
    fn check(&mut self, qemu: &mut Qemu) -> Result<(), Error> {
        let dimms = qemu.execute("query-memory-devices", None)?.value;
        let plugged = dimms.as_array().map_or(0, Vec::len);
        if plugged != self.next {
            return Err(qemu
                .error(format!(
                    "QEMU reports {plugged} DIMMs after {} hotplugs",
                    self.next
                ))
                .into());
        }
        Ok(())
    }

    fn series(&self, marks: &[Marks]) -> Series {
        let phase =
            |name: &str, f: &dyn Fn(&Marks) -> u64| Phase::new(name, marks.iter().map(f).collect());
        Series {
            name: "hotplug".into(),
            sample_is: format!(
                "one {} MiB DIMM hotplug (QMP object-add memory-backend-ram + device_add pc-dimm), vCPUs running",
                self.knobs.dimm_mib
            ),
            phases: vec![
                phase("object-add", &|m| m.added - m.start),
                phase("device_add", &|m| m.end - m.added),
            ],
            ..Series::default()
        }
    }
}

impl Timed for Marks {
    fn start(&self) -> u64 {
        self.start
    }
    fn end(&self) -> u64 {
        self.end
    }
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
        let mut knobs = QemuHotplugKnobs::default();
        knobs.sweep.repeat = 250;
        knobs.sweep.warmup = 10;
        let e = knobs.validate().unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("256"), "{e}");
        let knobs = QemuHotplugKnobs {
            dimm_mib: 3,
            ..Default::default()
        };
        assert!(knobs.validate().unwrap_err().is_usage());
    }

    #[test]
    fn the_shared_sweep_knobs_stay_beside_the_others_in_run_json() {
        let knobs = serde_json::to_value(QemuHotplugKnobs::default()).unwrap();
        let keys: Vec<&str> = knobs
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            ["dimm_mib", "mem_mib", "qemu", "repeat", "vcpus", "warmup"]
        );
        assert_eq!(knobs["vcpus"], serde_json::json!([1, 2, 4]));
        assert_eq!(knobs["qemu"], serde_json::Value::Null);
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
