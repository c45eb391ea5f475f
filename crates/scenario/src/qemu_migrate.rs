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
use vmscale_stats::Summary;
use vmscale_vmm::{Qemu, QemuConfig};

use crate::{Cancel, Error, Knob, PhaseHook, Progress, Range, ScenarioInfo};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QemuMigrateKnobs {
    pub qemu: Option<PathBuf>,
    pub vcpus: Vec<usize>,
    pub repeat: usize,
    pub warmup: usize,
    pub mem_mib: u64,
}

pub const DEFAULT_VCPUS: &str = "1,2,4";
pub const DEFAULT_REPEAT: usize = 10;
pub const DEFAULT_WARMUP: usize = 1;
pub const DEFAULT_MEM_MIB: u64 = 256;

pub const VCPUS: Range = Range::new(1, 255);
pub const REPEAT: Range = Range::new(1, 10_000);
pub const WARMUP: Range = Range::new(0, 100);
pub const MEM_MIB: Range = Range::new(16, 65_536);

/// The sink: everything QEMU sends is read and dropped by a `cat` QEMU spawns.
pub const NULL_SINK: &str = "exec:cat > /dev/null";

impl Default for QemuMigrateKnobs {
    fn default() -> Self {
        QemuMigrateKnobs {
            qemu: None,
            vcpus: vec![1, 2, 4],
            repeat: DEFAULT_REPEAT,
            warmup: DEFAULT_WARMUP,
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
            Knob { flag: "--vcpus", range: Some(VCPUS) },
            Knob { flag: "--repeat", range: Some(REPEAT) },
            Knob { flag: "--warmup", range: Some(WARMUP) },
            Knob { flag: "--mem-mib", range: Some(MEM_MIB) },
        ],
    }
}

impl QemuMigrateKnobs {
    pub fn validate(&self) -> Result<(), Error> {
        VCPUS.check_all("--vcpus", &crate::as_u64(&self.vcpus))?;
        REPEAT.check("--repeat", self.repeat as u64)?;
        WARMUP.check("--warmup", self.warmup as u64)?;
        MEM_MIB.check("--mem-mib", self.mem_mib)?;
        Ok(())
    }

    pub fn total_samples(&self) -> u64 {
        (self.vcpus.len() * (self.repeat + self.warmup)) as u64
    }
}

/// The `qemu-migrate` scenario.
#[derive(Debug, Clone, Copy)]
pub struct QemuMigrate;

impl crate::Scenario for QemuMigrate {
    type Knobs = QemuMigrateKnobs;
    /// The QEMU binary.
    type Host = PathBuf;

    fn info(&self) -> ScenarioInfo {
        info()
    }

    fn tour_knobs(&self) -> Result<QemuMigrateKnobs, String> {
        crate::qemu::tour_requirement()?;
        Ok(QemuMigrateKnobs {
            vcpus: vec![1, 2, 4],
            repeat: 3,
            ..QemuMigrateKnobs::default()
        })
    }

    fn tracing(&self) -> crate::TraceNeeds {
        crate::qemu::trace_needs()
    }

    fn prepare(&self, knobs: &QemuMigrateKnobs) -> Result<crate::Prepared<PathBuf>, Error> {
        crate::qemu::prepare(|| knobs.validate(), knobs.qemu.as_deref())
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
    let binary = crate::qemu::binary(knobs.qemu.as_deref())?;
    progress.start(knobs.total_samples());
    let host_cpus = vmscale_run::host::online_cpus();
    let mut points = Vec::new();
    for &vcpus in &knobs.vcpus {
        cancel.check()?;
        progress.set_message(format!("QEMU with {vcpus} vCPUs"));
        let mut qemu = Qemu::start(&QemuConfig::new(binary.clone(), vcpus, knobs.mem_mib))?;
        crate::qemu::expect_running(&mut qemu)?;
        let notes = crate::qemu::notes(&mut qemu)?;
        // MIGRATION events end a sample when the migration does, with no polling; the
        // default bandwidth cap (32 MiB/s) would measure the cap, not the work.
        qemu.execute(
            "migrate-set-capabilities",
            Some(json!({"capabilities": [{"capability": "events", "state": true}]})),
        )?;
        qemu.execute(
            "migrate-set-parameters",
            Some(json!({"max-bandwidth": 1u64 << 40})),
        )?;
        for _ in 0..knobs.warmup {
            cancel.check()?;
            migrate(&mut qemu)?;
            progress.advance(1);
        }
        let vmm_tids = qemu.threads();
        hook.carried_out_by(&vmm_tids)?;
        let label = format!("qemu-migrate vcpus={vcpus}");
        let mut marks = Vec::with_capacity(knobs.repeat);
        hook.measured_phase_begins(&label)?;
        for _ in 0..knobs.repeat {
            cancel.check()?;
            marks.push(migrate(&mut qemu)?);
            progress.advance(1);
        }
        hook.measured_phase_ends(&label)?;
        qemu.quit()?;
        let samples_ns: Vec<u64> = marks.iter().map(|m| m.end - m.start).collect();
        let phase =
            |name: &str, f: &dyn Fn(&Marks) -> u64| Phase::new(name, marks.iter().map(f).collect());
        points.push(Point {
            n: vcpus as u64,
            vcpus_per_host_cpu: vcpus as f64 / host_cpus as f64,
            series: vec![Series {
                name: "migrate".into(),
                sample_is: format!(
                    "one live migration of {} MiB to a null sink ({NULL_SINK}), from the migrate command to the completed event, vCPUs running",
                    knobs.mem_mib
                ),
                summary: Summary::from_samples(&samples_ns),
                sample_start_ns: marks.iter().map(|m| m.start).collect(),
                samples_ns,
                phases: vec![
                    phase("migrate command", &|m| m.started - m.start),
                    phase("until completed", &|m| m.end - m.started),
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
