//! `memslot` (case 3): the cost of one memslot update while N vCPUs run, done directly or
//! after pausing every vCPU.
//!
//! One *update* replaces a memslot: delete it, then add it back, the pair a VMM's memory
//! commit performs when a region moves. Between the two ioctls a running guest could see the
//! slot missing, which is what the competing fixes close:
//!
//! - `direct`: delete + add while the vCPUs keep running (phases `delete`, `add`).
//! - `pause-all`: kick every vCPU out of KVM_RUN, wait for the slowest, update, resume
//!   (phases `kick+wait`, `update`, `resume`): where userspace pays for atomicity.
//!
//! A pause has two clocks. The VMM's: the caller's time until its resume returns, with the
//! vCPUs released and not awaited, as QEMU resumes them. The guest's (spinning guests): each
//! vCPU's gap in its TSC log from its last instruction before the kick to its first after
//! the resume, which goes on after the VMM's clock stops while the vCPU thread is woken,
//! waits for a CPU and re-enters the guest. Series `pause-all guest stall` holds it, split
//! at the release and at the thread's KVM_RUN entry.
//! - `batch-direct` / `batch-pause-all`: K updates in a row, as one transaction, each way.
//!
//! Every update also makes KVM kick every vCPU itself (kvm_make_all_cpus_request), so even
//! `direct` grows with N; with halted vCPUs that growth is clean, with spinning vCPUs beyond
//! the host's CPU count it mostly measures overcommit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use vmscale_kvm::vm::Gap;
use vmscale_kvm::{rdtsc, GuestProgram, KvmSystem, Vm, VmConfig};
use vmscale_run::schema::TaskWindow;
use vmscale_run::{monotonic_ns, Phase, Point, RunRecord, Series};
use vmscale_stats::Summary;

use crate::overcommit::{overcommit_warnings, stalled_vcpu_warnings};
use crate::placement::Pinning;
use crate::sched::FifoGuard;
use crate::{Cancel, Error, Knob, PhaseHook, Progress, Range, ScenarioInfo};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    Direct,
    PauseAll,
    BatchDirect,
    BatchPauseAll,
}

impl Strategy {
    pub const ALL: [Strategy; 4] = [
        Strategy::Direct,
        Strategy::PauseAll,
        Strategy::BatchDirect,
        Strategy::BatchPauseAll,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Direct => "direct",
            Strategy::PauseAll => "pause-all",
            Strategy::BatchDirect => "batch-direct",
            Strategy::BatchPauseAll => "batch-pause-all",
        }
    }

    /// Parses one `--strategy` word; `batch` stands for both batch strategies.
    pub fn parse_list(words: &[String]) -> Result<Vec<Strategy>, Error> {
        let mut out = Vec::new();
        for word in words {
            let add: &[Strategy] = match word.as_str() {
                "all" => &Strategy::ALL,
                "direct" => &[Strategy::Direct],
                "pause-all" => &[Strategy::PauseAll],
                "batch" => &[Strategy::BatchDirect, Strategy::BatchPauseAll],
                "batch-direct" => &[Strategy::BatchDirect],
                "batch-pause-all" => &[Strategy::BatchPauseAll],
                other => {
                    return Err(Error::Usage(format!(
                        "unknown strategy '{other}' (expected direct, pause-all, batch, batch-direct, batch-pause-all or all)"
                    )))
                }
            };
            for s in add {
                if !out.contains(s) {
                    out.push(*s);
                }
            }
        }
        Ok(out)
    }

    fn pauses(self) -> bool {
        matches!(self, Strategy::PauseAll | Strategy::BatchPauseAll)
    }

    fn is_batch(self) -> bool {
        matches!(self, Strategy::BatchDirect | Strategy::BatchPauseAll)
    }

    fn sample_is(self, batch: usize) -> String {
        match self {
            Strategy::Direct => "one update (delete + add of one memslot), vCPUs running".into(),
            Strategy::PauseAll => "pause every vCPU, one update, resume".into(),
            Strategy::BatchDirect => format!("{batch} updates in a row, vCPUs running"),
            Strategy::BatchPauseAll => format!("pause every vCPU, {batch} updates, resume"),
        }
    }
}

/// The knobs of one memslot run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemslotKnobs {
    pub vcpus: Vec<usize>,
    pub repeat: usize,
    pub warmup: usize,
    pub strategies: Vec<Strategy>,
    pub batch: usize,
    pub guest: GuestProgram,
    pub fifo: bool,
    /// Size of the memslot being updated.
    pub slot_bytes: u64,
    /// Where the measuring thread and the vCPUs run (`--pin`).
    #[serde(default)]
    pub pin: Pinning,
    /// Independent runs of the sweep (`--runs`).
    #[serde(default = "crate::one")]
    pub runs: usize,
}

pub const DEFAULT_VCPUS: &str = "1,2,4,8,16,32";
pub const DEFAULT_REPEAT: usize = 200;
pub const DEFAULT_WARMUP: usize = 10;
pub const DEFAULT_BATCH: usize = 8;

/// `vmscale run memslot`'s flags.
#[derive(Debug, clap::Args)]
pub struct MemslotArgs {
    /// vCPU counts to sweep
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_VCPUS)]
    pub vcpus: Vec<usize>,
    /// Measured updates per point and strategy
    #[arg(long, default_value_t = DEFAULT_REPEAT)]
    pub repeat: usize,
    /// Updates run first at every point and not counted
    #[arg(long, default_value_t = DEFAULT_WARMUP)]
    pub warmup: usize,
    /// direct, pause-all, batch (batch-direct and batch-pause-all), or all
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub strategy: Vec<String>,
    /// Updates per batch transaction
    #[arg(long, default_value_t = DEFAULT_BATCH)]
    pub batch: usize,
    /// What the vCPUs run: spin (a CPL3 loop) or halt (HLT in the in-kernel irqchip)
    #[arg(long, default_value = "spin", value_parser = ["spin", "halt"])]
    pub guest: String,
    /// Measure from a SCHED_FIFO thread, separating KVM's cost from CPU scheduling
    #[arg(long)]
    pub fifo: bool,
    /// Size of each updated memslot, in MiB
    #[arg(long, default_value_t = 2)]
    pub slot_mib: u64,
    #[command(flatten)]
    pub repeatability: crate::placement::RepeatabilityArgs,
}

impl Default for MemslotKnobs {
    fn default() -> Self {
        MemslotKnobs {
            vcpus: vec![1, 2, 4, 8, 16, 32],
            repeat: DEFAULT_REPEAT,
            warmup: DEFAULT_WARMUP,
            strategies: Strategy::ALL.to_vec(),
            batch: DEFAULT_BATCH,
            guest: GuestProgram::Spin,
            fifo: false,
            slot_bytes: 2 << 20,
            pin: Pinning::default(),
            runs: 1,
        }
    }
}

/// Accepted values of `--vcpus`.
pub const VCPUS: Range = Range::new(1, 4_096);
/// Accepted values of `--repeat`.
pub const REPEAT: Range = Range::new(1, 1_000_000);
/// Accepted values of `--warmup`.
pub const WARMUP: Range = Range::new(0, 100_000);
/// Accepted values of `--batch`.
pub const BATCH: Range = Range::new(1, 256);
/// Accepted values of `--slot-mib`.
pub const SLOT_MIB: Range = Range::new(2, 4_096);

pub fn info() -> ScenarioInfo {
    ScenarioInfo {
        name: "memslot",
        case: "case 3: atomic memslot updates versus pausing every vCPU",
        summary: "latency of one memslot update (delete + add) while N vCPUs run, directly or with every vCPU paused",
        sweep: "vcpus",
        knobs: vec![
            Knob { flag: "--vcpus", range: Some(VCPUS) },
            Knob { flag: "--repeat", range: Some(REPEAT) },
            Knob { flag: "--warmup", range: Some(WARMUP) },
            Knob { flag: "--strategy", range: None },
            Knob { flag: "--batch", range: Some(BATCH) },
            Knob { flag: "--guest", range: None },
            Knob { flag: "--fifo", range: None },
            Knob { flag: "--slot-mib", range: Some(SLOT_MIB) },
            Knob { flag: "--pin", range: None },
            crate::RUNS_KNOB,
        ],
    }
}

impl MemslotKnobs {
    /// Refuses knob values that cannot produce a measurement.
    pub fn validate(&self) -> Result<(), Error> {
        VCPUS.check_all("--vcpus", &crate::as_u64(&self.vcpus))?;
        REPEAT.check("--repeat", self.repeat as u64)?;
        WARMUP.check("--warmup", self.warmup as u64)?;
        BATCH.check("--batch", self.batch as u64)?;
        SLOT_MIB.check("--slot-mib", self.slot_bytes >> 20)?;
        crate::RUNS.check("--runs", self.runs as u64)?;
        if self.strategies.is_empty() {
            return Err(Error::Usage("--strategy: nothing to run".into()));
        }
        if self.slot_bytes == 0 || !self.slot_bytes.is_multiple_of(2 << 20) {
            return Err(Error::Usage(format!(
                "--slot-mib must be a positive multiple of 2 (got {} MiB)",
                self.slot_bytes >> 20
            )));
        }
        Ok(())
    }

    fn vm_config(&self, vcpus: usize) -> VmConfig {
        let mut config = VmConfig::new(vcpus, self.guest);
        config.scratch_slots = self.batch.max(1);
        config.scratch_slot_bytes = self.slot_bytes;
        config.vcpu_cpus = self.pin.vcpus.clone();
        config
    }

    /// Samples the whole run will take, for the progress bar.
    pub fn total_samples(&self) -> u64 {
        (self.runs * self.vcpus.len() * self.strategies.len() * (self.repeat + self.warmup)) as u64
    }
}

/// Checks every point against the host's limits before any VM exists, so an impossible
/// sweep fails at once instead of after its first points.
pub fn preflight(system: &KvmSystem, knobs: &MemslotKnobs) -> Result<(), Error> {
    knobs.validate()?;
    for &n in &knobs.vcpus {
        let config = knobs.vm_config(n);
        vmscale_kvm::preflight::check_vm_request(
            n,
            config.total_memory_bytes(),
            system.max_vcpus(),
        )?;
    }
    Ok(())
}

/// The `memslot` scenario.
#[derive(Debug, Clone, Copy)]
pub struct Memslot;

impl crate::Scenario for Memslot {
    type Knobs = MemslotKnobs;
    type Host = KvmSystem;
    type Flags = MemslotArgs;

    const ABOUT: &'static str =
        "Case 3: memslot update latency while N vCPUs run, direct versus pause-all";

    fn knobs(&self, args: &MemslotArgs) -> Result<MemslotKnobs, Error> {
        Ok(MemslotKnobs {
            vcpus: args.vcpus.clone(),
            repeat: args.repeat,
            warmup: args.warmup,
            strategies: Strategy::parse_list(&args.strategy)?,
            batch: args.batch,
            guest: match args.guest.as_str() {
                "halt" => GuestProgram::Halt,
                _ => GuestProgram::Spin,
            },
            fifo: args.fifo,
            slot_bytes: args.slot_mib.saturating_mul(1 << 20),
            pin: args.repeatability.pinning()?,
            runs: args.repeatability.runs,
        })
    }

    fn info(&self) -> ScenarioInfo {
        info()
    }

    fn tour_knobs(&self) -> Result<MemslotKnobs, String> {
        Ok(MemslotKnobs {
            vcpus: vec![1, 2, 4, 8],
            repeat: 100,
            warmup: 5,
            strategies: vec![Strategy::Direct, Strategy::PauseAll],
            guest: GuestProgram::Spin,
            ..MemslotKnobs::default()
        })
    }

    fn prepare(&self, knobs: &MemslotKnobs) -> Result<crate::Prepared<KvmSystem>, Error> {
        knobs.validate()?;
        let system = KvmSystem::open()?;
        preflight(&system, knobs)?;
        Ok(crate::Prepared {
            kvm: Some(system.facts()),
            host: system,
        })
    }

    fn run(
        &self,
        knobs: &MemslotKnobs,
        system: &KvmSystem,
        progress: &dyn Progress,
        cancel: &Cancel,
        hook: &mut dyn PhaseHook,
    ) -> Result<Vec<Point>, Error> {
        run(system, knobs, progress, cancel, hook)
    }

    /// Overcommitted points, and spinning vCPUs that never ran while measured, first among
    /// the warnings.
    fn annotate(&self, knobs: &MemslotKnobs, _: &KvmSystem, record: &mut RunRecord, _: u32) {
        let guest = knobs.guest;
        let mut warnings = overcommit_warnings(&record.points, record.host.online_cpus, guest);
        warnings.extend(stalled_vcpu_warnings(&record.points, guest));
        record.warnings.splice(0..0, warnings);
    }
}

/// Runs the sweep and returns one point per vCPU count.
pub fn run(
    system: &KvmSystem,
    knobs: &MemslotKnobs,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
) -> Result<Vec<Point>, Error> {
    preflight(system, knobs)?;
    progress.start(knobs.total_samples());
    crate::independent_runs(knobs.runs, || {
        one_run(system, knobs, progress, cancel, hook)
    })
}

fn one_run(
    system: &KvmSystem,
    knobs: &MemslotKnobs,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
) -> Result<Vec<Point>, Error> {
    let host_cpus = vmscale_run::host::online_cpus();
    let mut points = Vec::new();
    for &vcpus in &knobs.vcpus {
        let mut config = knobs.vm_config(vcpus);
        config.interrupt = Some(cancel.flag());
        let mut vm = Vm::start(system, &config)?;
        // Every slot starts present; an update deletes and re-adds it.
        for slot in 0..vm.scratch_slot_count() {
            vm.set_scratch(slot, true)?;
        }
        let mut series = Vec::new();
        for &strategy in &knobs.strategies {
            progress.set_message(format!("{vcpus} vCPUs, {}", strategy.name()));
            let label = format!("memslot vcpus={vcpus} strategy={}", strategy.name());
            series.extend(measure_strategy(
                &mut vm, knobs, strategy, progress, cancel, hook, &label,
            )?);
        }
        points.push(Point {
            n: vcpus as u64,
            vcpus_per_host_cpu: vcpus as f64 / host_cpus as f64,
            series,
        });
    }
    Ok(points)
}

/// Time stamps taken around one sample, from which its phases are derived.
struct Marks {
    start: u64,
    paused: u64,
    updated: u64,
    end: u64,
    /// For single direct updates: when the delete returned.
    deleted: u64,
    /// Host TSC once every vCPU was out (pause returned) and just before the release, on
    /// the guests' clock, to find each vCPU's stall in its log (pausing strategies only).
    paused_tsc: u64,
    release_tsc: u64,
}

/// One vCPU's stall around one pausing sample, from its guest TSC log, in ns: the gap from
/// its last guest instruction before the kick to its first after the resume, cut where the
/// host released it and where its thread entered KVM_RUN again.
#[derive(Debug, Clone, Copy, Default)]
struct GuestStall {
    /// Last guest instruction until the release: kicked out, waiting for the others, the
    /// update.
    until_release: u64,
    /// The release until the vCPU thread entered KVM_RUN: woken, given a CPU, past the
    /// pause's mutex.
    until_thread_ran: u64,
    /// KVM_RUN entry until the first guest instruction.
    into_guest: u64,
}

impl GuestStall {
    fn total(&self) -> u64 {
        self.until_release + self.until_thread_ran + self.into_guest
    }
}

fn measure_strategy(
    vm: &mut Vm,
    knobs: &MemslotKnobs,
    strategy: Strategy,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
    label: &str,
) -> Result<Vec<Series>, Error> {
    let updates = if strategy.is_batch() { knobs.batch } else { 1 };
    // A halted guest runs no code, so it logs no stall to read.
    let guest_clock = strategy.pauses() && vm.program() == GuestProgram::Spin;
    let _pin = knobs.pin.pin_measuring_thread()?;
    let _fifo = knobs.fifo.then(FifoGuard::enter).transpose()?;
    for _ in 0..knobs.warmup {
        cancel.check()?;
        wait_until_every_vcpu_ran(vm)?;
        one_sample(vm, strategy, updates)?;
        settle(vm, strategy)?;
        progress.advance(1);
    }

    let stats_before = vm.stats_snapshot();
    let progress_before: Vec<u64> = (0..vm.vcpu_count()).map(|i| vm.progress(i)).collect();
    let mut marks = Vec::with_capacity(knobs.repeat);
    let mut stalls: Vec<GuestStall> = Vec::new();
    let mut windows: Vec<TaskWindow> = Vec::new();
    let tids = vm.vcpu_tids();
    let mut lost_gaps = 0;
    let mut unmatched = 0;
    hook.measured_phase_begins(label)?;
    for _ in 0..knobs.repeat {
        cancel.check()?;
        wait_until_every_vcpu_ran(vm)?;
        if guest_clock {
            for i in 0..vm.vcpu_count() {
                lost_gaps += vm.take_gaps(i).lost;
            }
        }
        let m = one_sample(vm, strategy, updates)?;
        settle(vm, strategy)?;
        if guest_clock {
            wait_until_every_vcpu_ran(vm)?;
            for (i, &tid) in tids.iter().enumerate() {
                let log = vm.take_gaps(i);
                lost_gaps += log.lost;
                match guest_stall(&log.gaps, &m, vm.entered_tsc(i), vm.tsc_khz()) {
                    Some(stall) => {
                        // The release follows `updated` by one TSC read.
                        windows.push(TaskWindow {
                            tid: tid as u32,
                            start_ns: m.updated,
                            end_ns: m.updated + stall.until_thread_ran,
                        });
                        stalls.push(stall);
                    }
                    None => unmatched += 1,
                }
            }
        }
        marks.push(m);
        progress.advance(1);
    }
    hook.measured_phase_ends(label)?;
    let vcpu_progress = (0..vm.vcpu_count())
        .map(|i| vm.progress(i) - progress_before[i])
        .collect();
    let kvm_stats = match (stats_before, vm.stats_snapshot()) {
        (Some(before), Some(after)) => prefixed_stats(vm.stats_delta(&before, &after)),
        _ => BTreeMap::new(),
    };

    let samples_ns: Vec<u64> = marks.iter().map(|m| m.end - m.start).collect();
    let sample_start_ns: Vec<u64> = marks.iter().map(|m| m.start).collect();
    let phase =
        |name: &str, f: &dyn Fn(&Marks) -> u64| Phase::new(name, marks.iter().map(f).collect());
    let phases = match strategy {
        Strategy::Direct => vec![
            phase("delete", &|m| m.deleted - m.start),
            phase("add", &|m| m.end - m.deleted),
        ],
        Strategy::PauseAll | Strategy::BatchPauseAll => vec![
            phase("kick+wait", &|m| m.paused - m.start),
            phase("update", &|m| m.updated - m.paused),
            phase("resume", &|m| m.end - m.updated),
        ],
        Strategy::BatchDirect => Vec::new(),
    };
    let mut series = vec![Series {
        name: strategy.name().into(),
        sample_is: strategy.sample_is(knobs.batch),
        summary: Summary::from_samples(&samples_ns),
        samples_ns,
        sample_start_ns,
        phases,
        kvm_stats,
        vcpu_progress,
        notes: if strategy.pauses() {
            vec![VMM_CLOCK_NOTE.into()]
        } else {
            Vec::new()
        },
        ..Series::default()
    }];
    if strategy.pauses() && !guest_clock {
        series[0].notes.push(
            "halted vCPUs run no guest code, so the guest-visible stall is not measured (--guest spin measures it)".into(),
        );
    }
    if guest_clock {
        let mut stall = guest_stall_series(strategy, &stalls, lost_gaps, unmatched);
        stall.task_windows = windows;
        series.push(stall);
    }
    Ok(series)
}

const VMM_CLOCK_NOTE: &str = "the VMM's clock: the caller's time from the kick until its resume returns, with the vCPUs released but not awaited, as QEMU resumes them";

/// The name of the guest-visible stall series of a pausing strategy.
pub fn guest_stall_name(strategy: Strategy) -> String {
    format!("{} guest stall", strategy.name())
}

fn guest_stall_series(
    strategy: Strategy,
    stalls: &[GuestStall],
    lost_gaps: u64,
    unmatched: usize,
) -> Series {
    let samples_ns: Vec<u64> = stalls.iter().map(GuestStall::total).collect();
    let phase =
        |name: &str, f: fn(&GuestStall) -> u64| Phase::new(name, stalls.iter().map(f).collect());
    let mut notes = vec![
        "the guest's clock: per vCPU and sample, from its last guest instruction before the kick to its first after the resume (its TSC log); phases split it where the host released the vCPU and where its thread entered KVM_RUN".to_string(),
    ];
    if unmatched > 0 {
        notes.push(format!(
            "{unmatched} vCPU windows had no logged gap spanning the pause (a stall shorter than the log's threshold, or overwritten): left out"
        ));
    }
    if lost_gaps > 0 {
        notes.push(format!(
            "{lost_gaps} guest gaps were overwritten before the host read them"
        ));
    }
    Series {
        name: guest_stall_name(strategy),
        sample_is: "one vCPU's stall around one pause (guest TSC log)".into(),
        summary: Summary::from_samples(&samples_ns),
        samples_ns,
        phases: vec![
            phase("until release", |s| s.until_release),
            phase("until thread ran", |s| s.until_thread_ran),
            phase("into guest", |s| s.into_guest),
        ],
        notes,
        ..Series::default()
    }
}

/// The gap in one vCPU's log that spans the pause (it was out of the guest from before the
/// pause returned until after the release), split at the release and at its thread's
/// KVM_RUN entry. None when no logged gap spans it.
fn guest_stall(gaps: &[Gap], m: &Marks, entered_tsc: u64, tsc_khz: u64) -> Option<GuestStall> {
    let gap = gaps
        .iter()
        .find(|g| g.tsc_before <= m.paused_tsc && g.tsc_after >= m.release_tsc)?;
    let ns = |ticks: u64| ticks.saturating_mul(1_000_000) / tsc_khz.max(1);
    // The entry stamp belongs to this resume only if it lies inside the gap's tail.
    let entered = if (m.release_tsc..=gap.tsc_after).contains(&entered_tsc) {
        entered_tsc
    } else {
        m.release_tsc
    };
    Some(GuestStall {
        until_release: ns(m.release_tsc - gap.tsc_before),
        until_thread_ran: ns(entered - m.release_tsc),
        into_guest: ns(gap.tsc_after - entered),
    })
}

/// Untimed, after a sample: released vCPUs must have left the pause before the next kick,
/// or that kick finds them still paused and costs nothing.
fn settle(vm: &Vm, strategy: Strategy) -> Result<(), Error> {
    if strategy.pauses() {
        vm.wait_released()?;
    }
    Ok(())
}

/// Untimed, between samples: each sample starts once every spinning vCPU has run guest
/// code again, as the scenario claims. Without it, back-to-back pause-all samples kick vCPUs
/// that never got back into the guest (cheaper than the real thing), and on an
/// overcommitted host some never run at all. A vCPU that still never ran after the timeout
/// shows as zero progress in the results.
fn wait_until_every_vcpu_ran(vm: &Vm) -> Result<(), Error> {
    vm.wait_until_every_vcpu_ran(std::time::Duration::from_secs(5))?;
    Ok(())
}

/// What one sample acts on: a real VM, or nothing at all when measuring the driver's own
/// overhead (see [`driver_overhead`]), so both run exactly the same timed code.
trait UpdateTarget {
    fn pause(&mut self) -> Result<(), Error>;
    /// Lets the vCPUs go without waiting for them (the VMM's clock).
    fn release(&mut self);
    fn set_slot(&mut self, slot: usize, present: bool) -> Result<(), Error>;
}

impl UpdateTarget for Vm {
    fn pause(&mut self) -> Result<(), Error> {
        Ok(self.pause_all()?)
    }
    fn release(&mut self) {
        self.release_all()
    }
    fn set_slot(&mut self, slot: usize, present: bool) -> Result<(), Error> {
        Ok(self.set_scratch(slot, present)?)
    }
}

struct NoTarget;

impl UpdateTarget for NoTarget {
    fn pause(&mut self) -> Result<(), Error> {
        Ok(())
    }
    fn release(&mut self) {}
    fn set_slot(&mut self, slot: usize, present: bool) -> Result<(), Error> {
        std::hint::black_box((slot, present));
        Ok(())
    }
}

/// One timed sample. Only clock reads and the operations themselves happen between marks.
#[inline(always)]
fn one_sample(
    target: &mut impl UpdateTarget,
    strategy: Strategy,
    updates: usize,
) -> Result<Marks, Error> {
    let start = monotonic_ns();
    if strategy.pauses() {
        target.pause()?;
    }
    let paused = monotonic_ns();
    let paused_tsc = if strategy.pauses() { rdtsc() } else { 0 };
    let mut deleted = paused;
    for slot in 0..updates {
        target.set_slot(slot, false)?;
        if slot == 0 {
            deleted = monotonic_ns();
        }
        target.set_slot(slot, true)?;
    }
    let updated = monotonic_ns();
    let mut release_tsc = 0;
    if strategy.pauses() {
        release_tsc = rdtsc();
        target.release();
    }
    let end = monotonic_ns();
    Ok(Marks {
        start,
        paused,
        updated,
        end,
        deleted,
        paused_tsc,
        release_tsc,
    })
}

/// Samples of the timed loop with no VM behind it: what the driver itself adds to every
/// sample (clock reads and bookkeeping), for the benchmark under bench/.
pub fn driver_overhead(strategy: Strategy, updates: usize, repeat: usize) -> Vec<u64> {
    (0..repeat)
        .map(|_| {
            let m = one_sample(&mut NoTarget, strategy, updates).expect("no-op target cannot fail");
            m.end - m.start
        })
        .collect()
}

fn prefixed_stats(
    (vm, vcpu): (BTreeMap<String, u64>, BTreeMap<String, u64>),
) -> BTreeMap<String, u64> {
    vm.into_iter()
        .map(|(k, v)| (format!("vm.{k}"), v))
        .chain(vcpu.into_iter().map(|(k, v)| (format!("vcpu.{k}"), v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategy_words_expand_and_deduplicate() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            Strategy::parse_list(&words(&["batch", "direct", "batch-direct"])).unwrap(),
            vec![
                Strategy::BatchDirect,
                Strategy::BatchPauseAll,
                Strategy::Direct
            ]
        );
        assert_eq!(Strategy::parse_list(&words(&["all"])).unwrap().len(), 4);
        let e = Strategy::parse_list(&words(&["fast"])).unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("'fast'"));
    }

    #[test]
    fn zero_vcpus_and_zero_repeats_are_usage_errors() {
        let knobs = MemslotKnobs {
            vcpus: vec![1, 0],
            ..Default::default()
        };
        assert!(knobs.validate().unwrap_err().is_usage());
        let knobs = MemslotKnobs {
            repeat: 0,
            ..Default::default()
        };
        assert!(knobs.validate().unwrap_err().is_usage());
    }
}
