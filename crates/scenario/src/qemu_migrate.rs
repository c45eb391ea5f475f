//! `qemu-migrate`: one live migration of a real QEMU to a null sink while N vCPUs run.
//!
//! The sink is `exec:cat > /dev/null`: no second QEMU and no network, so a sample is what
//! the source pays: enabling dirty logging on every memslot, the passes over guest memory
//! with their dirty-log ioctls, stopping the vCPUs for the last pass, and disabling dirty
//! logging again. Between samples (untimed) the source is resumed with `cont`, so every
//! sample starts with its vCPUs running.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use vmscale_run::{monotonic_ns, Phase, Point, Series};
use vmscale_vmm::{Qemu, QemuConfig};

use crate::qemu::{Operation, QemuSweep, Timed};
use crate::{Cancel, Error, Knob, PhaseHook, Progress, Range, ScenarioInfo};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QemuMigrateKnobs {
    /// `--qemu`, `--vcpus`, `--repeat`, `--warmup`.
    #[serde(flatten)]
    pub sweep: QemuSweep,
    pub mem_mib: u64,
}

pub const DEFAULT_REPEAT: usize = 10;
pub const DEFAULT_WARMUP: usize = 1;
pub const DEFAULT_MEM_MIB: u64 = 256;

/// `vmscale run qemu-migrate`'s flags.
#[derive(Debug, clap::Args)]
pub struct QemuMigrateArgs {
    /// The QEMU to drive (default: qemu-system-x86_64 on PATH)
    #[arg(long, value_name = "PATH")]
    pub qemu: Option<PathBuf>,
    /// vCPU counts to sweep (one QEMU each)
    #[arg(long, value_delimiter = ',', default_value = crate::qemu::DEFAULT_VCPUS)]
    pub vcpus: Vec<usize>,
    /// Measured migrations per point
    #[arg(long, default_value_t = DEFAULT_REPEAT)]
    pub repeat: usize,
    /// Migrations run first at every point and not counted
    #[arg(long, default_value_t = DEFAULT_WARMUP)]
    pub warmup: usize,
    /// Guest memory of each QEMU, in MiB (what every migration sends)
    #[arg(long, default_value_t = DEFAULT_MEM_MIB)]
    pub mem_mib: u64,
}

pub const REPEAT: Range = Range::new(1, 10_000);
pub const WARMUP: Range = Range::new(0, 100);

/// The sink: everything QEMU sends is read and dropped by a `cat` QEMU spawns.
pub const NULL_SINK: &str = "exec:cat > /dev/null";

impl Default for QemuMigrateKnobs {
    fn default() -> Self {
        QemuMigrateKnobs {
            sweep: QemuSweep::new(DEFAULT_REPEAT, DEFAULT_WARMUP),
            mem_mib: DEFAULT_MEM_MIB,
        }
    }
}

pub fn info() -> ScenarioInfo {
    ScenarioInfo {
        name: "qemu-migrate",
        case: "dirty logging in a real VMM: QEMU live migration to a null sink",
        summary: "time of one QEMU live migration to a null sink while N vCPUs run, with the dirty-log ioctls QEMU made",
        sweep: "vcpus",
        knobs: vec![
            crate::qemu::qemu_knob(),
            Knob { flag: "--vcpus", range: Some(crate::qemu::VCPUS) },
            Knob { flag: "--repeat", range: Some(REPEAT) },
            Knob { flag: "--warmup", range: Some(WARMUP) },
            Knob { flag: "--mem-mib", range: Some(crate::qemu::MEM_MIB) },
        ],
    }
}

impl QemuMigrateKnobs {
    pub fn validate(&self) -> Result<(), Error> {
        self.sweep.validate(REPEAT, WARMUP)?;
        crate::qemu::MEM_MIB.check("--mem-mib", self.mem_mib)?;
        Ok(())
    }

    pub fn total_samples(&self) -> u64 {
        self.sweep.total_samples()
    }
}

/// The `qemu-migrate` scenario.
#[derive(Debug, Clone, Copy)]
pub struct QemuMigrate;

impl crate::Scenario for QemuMigrate {
    type Knobs = QemuMigrateKnobs;
    /// The QEMU binary.
    type Host = PathBuf;
    type Flags = QemuMigrateArgs;

    const ABOUT: &'static str = "A real QEMU: one live migration to a null sink while N vCPUs run";

    fn knobs(&self, args: &QemuMigrateArgs) -> Result<QemuMigrateKnobs, Error> {
        Ok(QemuMigrateKnobs {
            sweep: QemuSweep {
                qemu: args.qemu.clone(),
                vcpus: args.vcpus.clone(),
                repeat: args.repeat,
                warmup: args.warmup,
            },
            mem_mib: args.mem_mib,
        })
    }

    fn info(&self) -> ScenarioInfo {
        info()
    }

    fn tour_knobs(&self) -> Result<QemuMigrateKnobs, String> {
        crate::qemu::tour_requirement()?;
        let mut knobs = QemuMigrateKnobs::default();
        knobs.sweep.repeat = 3;
        Ok(knobs)
    }

    fn tracing(&self) -> crate::TraceNeeds {
        crate::qemu::trace_needs()
    }

    fn prepare(&self, knobs: &QemuMigrateKnobs) -> Result<crate::Prepared<PathBuf>, Error> {
        crate::qemu::prepare(|| knobs.validate(), knobs.sweep.qemu.as_deref())
    }

    fn run(
        &self,
        knobs: &QemuMigrateKnobs,
        _: &PathBuf,
        progress: &dyn Progress,
        cancel: &Cancel,
        hook: &mut dyn PhaseHook,
    ) -> Result<Vec<Point>, Error> {
        run(knobs, progress, cancel, hook)
    }
}

pub fn run(
    knobs: &QemuMigrateKnobs,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
) -> Result<Vec<Point>, Error> {
    knobs.validate()?;
    crate::qemu::sweep(
        "qemu-migrate",
        &knobs.sweep,
        &mut Migrations(knobs),
        progress,
        cancel,
        hook,
    )
}

/// Migrations of one QEMU after another.
struct Migrations<'a>(&'a QemuMigrateKnobs);

impl Operation for Migrations<'_> {
    type Marks = Marks;

    fn config(&self, binary: PathBuf, vcpus: usize) -> QemuConfig {
        QemuConfig::new(binary, vcpus, self.0.mem_mib)
    }

    /// MIGRATION events end a sample when the migration does, with no polling; the default
    /// bandwidth cap (32 MiB/s) would measure the cap, not the work.
    fn setup(&mut self, qemu: &mut Qemu) -> Result<(), Error> {
        qemu.execute(
            "migrate-set-capabilities",
            Some(json!({"capabilities": [{"capability": "events", "state": true}]})),
        )?;
        qemu.execute(
            "migrate-set-parameters",
            Some(json!({"max-bandwidth": 1u64 << 40})),
        )?;
        Ok(())
    }

    fn once(&mut self, qemu: &mut Qemu) -> Result<Marks, Error> {
        migrate(qemu)
    }

    fn series(&self, marks: &[Marks]) -> Series {
        let phase =
            |name: &str, f: &dyn Fn(&Marks) -> u64| Phase::new(name, marks.iter().map(f).collect());
        Series {
            name: "migrate".into(),
            sample_is: format!(
                "one live migration of {} MiB to a null sink ({NULL_SINK}), from the migrate command to the completed event, vCPUs running",
                self.0.mem_mib
            ),
            phases: vec![
                phase("migrate command", &|m| m.started - m.start),
                phase("until completed", &|m| m.end - m.started),
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
    started: u64,
    end: u64,
}

/// One timed migration, then (untimed) the source resumed.
fn migrate(qemu: &mut Qemu) -> Result<Marks, Error> {
    qemu.clear_events();
    let start = monotonic_ns();
    qemu.execute("migrate", Some(json!({ "uri": NULL_SINK })))?;
    let started = monotonic_ns();
    let event = qemu.wait_event("migrate (waiting for it to end)", |e| {
        e["event"] == "MIGRATION"
            && matches!(
                e["data"]["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            )
    })?;
    let end = monotonic_ns();
    let status = event["data"]["status"].as_str().unwrap_or("?").to_string();
    if status != "completed" {
        let info = qemu.execute("query-migrate", None)?.value;
        let why = info["error-desc"]
            .as_str()
            .unwrap_or("no error-desc")
            .to_string();
        return Err(qemu
            .error(format!("migration to {NULL_SINK} {status}: {why}"))
            .into());
    }
    resume(qemu)?;
    Ok(Marks {
        start,
        started,
        end,
    })
}

/// The source stops for the last pass and stays stopped; `cont` is refused until QEMU has
/// finished cleaning up the migration (status `postmigrate`).
fn resume(qemu: &mut Qemu) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = qemu.execute("query-status", None)?.value;
        match status["status"].as_str() {
            Some("running") => return Ok(()),
            Some("postmigrate" | "paused") => {
                qemu.execute("cont", None)?;
            }
            _ if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            other => {
                return Err(qemu
                    .error(format!(
                        "QEMU stayed in status {} after a migration",
                        other.unwrap_or("?")
                    ))
                    .into())
            }
        }
    }
}
