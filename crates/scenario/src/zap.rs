//! `zap` (case 4): the stall every vCPU suffers when a memslot delete invalidates every
//! MMU root, measured from inside the guest.
//!
//! Each vCPU runs the spinning guest, which logs every gap between consecutive TSC reads
//! above a threshold. The host deletes (and re-adds) a memslot and reads its own TSC around
//! the delete; a vCPU's stall for that delete is its longest logged gap that overlaps the
//! window from the delete's start until the vCPU has run again. Under PVM the guest reads the
//! host's TSC unchanged, so guest gaps and host timestamps share one timeline (on VMX/SVM
//! hosts the vCPU's TSC offset and scaling would apply: see `tsc_matches_host`).
//!
//! A baseline pass does the same with no memslot change, so the stalls the host's own
//! scheduling causes (overcommit on a small host) are reported apart from the delete's.

use serde::{Deserialize, Serialize};
use vmscale_kvm::{rdtsc, GuestProgram, KvmSystem, Vm, VmConfig};
use vmscale_run::{monotonic_ns, Point, RunRecord, Series};
use vmscale_stats::Summary;

use crate::overcommit::overcommit_warnings;
use crate::placement::Pinning;
use crate::{Cancel, Error, Knob, PhaseHook, Progress, Range, ScenarioInfo, TraceNeeds};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ZapKnobs {
    pub vcpus: Vec<usize>,
    pub repeat: usize,
    /// Guest TSC gaps shorter than this are not stalls.
    pub threshold_ns: u64,
    /// Also measure the same windows with no memslot change.
    pub baseline: bool,
    /// Where the measuring thread and the vCPUs run (`--pin`).
    #[serde(default)]
    pub pin: Pinning,
    /// Independent runs of the sweep (`--runs`).
    #[serde(default = "crate::one")]
    pub runs: usize,
}

pub const DEFAULT_VCPUS: &str = "1,2,4,8,16,32,64";

/// `vmscale run zap`'s flags.
#[derive(Debug, clap::Args)]
pub struct ZapArgs {
    /// vCPU counts to sweep
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_VCPUS)]
    pub vcpus: Vec<usize>,
    /// Deletes per point
    #[arg(long, default_value_t = 50)]
    pub repeat: usize,
    /// Guest TSC gaps shorter than this (microseconds) are not stalls
    #[arg(long, default_value_t = 5)]
    pub threshold_us: u64,
    /// Skip the no-delete baseline
    #[arg(long)]
    pub no_baseline: bool,
    #[command(flatten)]
    pub repeatability: crate::placement::RepeatabilityArgs,
}

impl Default for ZapKnobs {
    fn default() -> Self {
        ZapKnobs {
            vcpus: vec![1, 2, 4, 8, 16, 32, 64],
            repeat: 50,
            threshold_ns: 5_000,
            baseline: true,
            pin: Pinning::default(),
            runs: 1,
        }
    }
}

/// Accepted values of `--vcpus`.
pub const VCPUS: Range = Range::new(1, 4_096);
/// Accepted values of `--repeat`.
pub const REPEAT: Range = Range::new(1, 1_000_000);
/// Accepted values of `--threshold-us`.
pub const THRESHOLD_US: Range = Range::new(1, 1_000_000);

pub fn info() -> ScenarioInfo {
    ScenarioInfo {
        name: "zap",
        case: "case 4: vCPU stalls when every MMU root is reloaded",
        summary: "the stall each running vCPU suffers (from inside the guest) when a memslot delete invalidates every MMU root, against a no-delete baseline",
        sweep: "vcpus",
        knobs: vec![
            Knob { flag: "--vcpus", range: Some(VCPUS) },
            Knob { flag: "--repeat", range: Some(REPEAT) },
            Knob { flag: "--threshold-us", range: Some(THRESHOLD_US) },
            Knob { flag: "--no-baseline", range: None },
            Knob { flag: "--pin", range: None },
            crate::RUNS_KNOB,
        ],
    }
}

impl ZapKnobs {
    pub fn validate(&self) -> Result<(), Error> {
        VCPUS.check_all("--vcpus", &crate::as_u64(&self.vcpus))?;
        REPEAT.check("--repeat", self.repeat as u64)?;
        THRESHOLD_US.check("--threshold-us", self.threshold_ns / 1000)?;
        crate::RUNS.check("--runs", self.runs as u64)?;
        Ok(())
    }

    fn vm_config(&self, vcpus: usize) -> VmConfig {
        let mut config = VmConfig::new(vcpus, GuestProgram::Spin);
        config.scratch_slots = 1;
        config.gap_threshold_ns = self.threshold_ns;
        config.vcpu_cpus = self.pin.vcpus.clone();
        config
    }

    pub fn preflight(&self, system: &KvmSystem) -> Result<(), Error> {
        self.validate()?;
        for &n in &self.vcpus {
            let config = self.vm_config(n);
            vmscale_kvm::preflight::check_vm_request(
                n,
                config.total_memory_bytes(),
                system.max_vcpus(),
            )?;
        }
        Ok(())
    }
}

/// Whether guest TSC values are host TSC values (no offset or scaling to undo): true on
/// PVM, where the guest reads the host's TSC directly.
pub fn tsc_matches_host(backend: &str) -> bool {
    backend == "pvm"
}

/// The `zap` scenario.
#[derive(Debug, Clone, Copy)]
pub struct Zap;

impl crate::Scenario for Zap {
    type Knobs = ZapKnobs;
    type Host = KvmSystem;
    type Flags = ZapArgs;

    const ABOUT: &'static str =
        "Case 4: the stall vCPUs suffer when a memslot delete reloads every MMU root";

    fn knobs(&self, args: &ZapArgs) -> Result<ZapKnobs, Error> {
        Ok(ZapKnobs {
            vcpus: args.vcpus.clone(),
            repeat: args.repeat,
            threshold_ns: args.threshold_us.saturating_mul(1_000),
            baseline: !args.no_baseline,
            pin: args.repeatability.pinning()?,
            runs: args.repeatability.runs,
        })
    }

    fn info(&self) -> ScenarioInfo {
        info()
    }

    fn tour_knobs(&self) -> Result<ZapKnobs, String> {
        Ok(ZapKnobs {
            vcpus: vec![1, 2, 4, 8],
            repeat: 30,
            ..ZapKnobs::default()
        })
    }

    /// The MMU's own view of the storm: root zaps and the obsolete roots each vCPU frees.
    fn tracing(&self) -> TraceNeeds {
        TraceNeeds {
            extra_events: vec!["kvmmmu:kvm_mmu_zap_all_fast"],
            ..TraceNeeds::default()
        }
    }

    fn prepare(&self, knobs: &ZapKnobs) -> Result<crate::Prepared<KvmSystem>, Error> {
        knobs.validate()?;
        let system = KvmSystem::open()?;
        knobs.preflight(&system)?;
        Ok(crate::Prepared {
            kvm: Some(system.facts()),
            host: system,
        })
    }

    fn run(
        &self,
        knobs: &ZapKnobs,
        system: &KvmSystem,
        progress: &dyn Progress,
        cancel: &Cancel,
        hook: &mut dyn PhaseHook,
    ) -> Result<Vec<Point>, Error> {
        run(system, knobs, progress, cancel, hook)
    }

    /// First among the warnings: overcommitted points, and what this KVM backend means for
    /// the stalls (TSC alignment, which MMU).
    fn annotate(&self, _: &ZapKnobs, system: &KvmSystem, record: &mut RunRecord, _: u32) {
        note_busy_host_in_baselines(record);
        let facts = system.facts();
        let mut warnings =
            overcommit_warnings(&record.points, record.host.online_cpus, GuestProgram::Spin);
        if !tsc_matches_host(&facts.backend) {
            warnings.push(format!(
                "KVM backend {}: guest TSC values are not corrected for the vCPU's TSC offset and scaling, so stalls are lined up with host time only approximately",
                facts.backend
            ));
        }
        warnings.push(format!(
            "MMU: {} backend, {}; case 4's numbers come from the TDP MMU on VMX/SVM hosts",
            facts.backend,
            match facts.tdp_mmu {
                Some(true) => "TDP MMU",
                _ => "shadow paging",
            }
        ));
        record.warnings.splice(0..0, warnings);
    }
}

/// With fewer vCPUs than CPUs the measuring thread has a CPU of its own only while the
/// host's other work leaves one free. On a busy host it may wake (every poll of a window)
/// on a vCPU's CPU and displace it: a traced 1-vCPU run beside a CPU-bound nice-19 job
/// counted two such preemptions per window, and every baseline window held a gap, where on
/// the idle host 92 to 100 of 100 held none (docs/repeatability.md); beside a nice-0 job
/// the scheduler placed it elsewhere and no window held one. The baselines of points whose
/// windows mostly held a gap on a busy host say so.
fn note_busy_host_in_baselines(record: &mut RunRecord) {
    let busy = record.background.as_ref().map(|b| b.other_busy_fraction);
    note_busy_baselines(&mut record.points, record.host.online_cpus, busy);
}

/// [`note_busy_host_in_baselines`] on the points of a run on `host_cpus` CPUs, of which
/// others used the share `busy`.
fn note_busy_baselines(points: &mut [Point], host_cpus: usize, busy: Option<f64>) {
    let Some(busy) = busy.filter(|&f| f > vmscale_run::load::BUSY_THRESHOLD) else {
        return;
    };
    for point in points.iter_mut().filter(|p| p.n < host_cpus.max(1) as u64) {
        // Only where most windows held a gap: a busy share that cost no window says nothing.
        for series in point.series.iter_mut().filter(|s| {
            s.name == "baseline-stall" && s.summary.as_ref().is_some_and(|x| x.p50_ns > 0)
        }) {
            series.notes.push(format!(
                "other processes used {:.0}% of the host's CPU time and most windows held a gap: with no CPU free, the measuring thread (or that work) runs by displacing a vCPU, which adds gaps to the windows, the delete's included; the baseline holds them (docs/repeatability.md)",
                busy * 100.0
            ));
        }
    }
}

/// A vCPU that gets no CPU within this long shows as a long stall rather than a hang.
const SETTLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

pub fn run(
    system: &KvmSystem,
    knobs: &ZapKnobs,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
) -> Result<Vec<Point>, Error> {
    knobs.preflight(system)?;
    let passes = if knobs.baseline { 2 } else { 1 };
    progress.start((knobs.runs * knobs.vcpus.len() * knobs.repeat * passes) as u64);
    crate::independent_runs(knobs.runs, || {
        one_run(system, knobs, progress, cancel, hook)
    })
}

fn one_run(
    system: &KvmSystem,
    knobs: &ZapKnobs,
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
        vm.set_scratch(0, true)?;
        // After the vCPU threads exist, which place themselves (see Pinning).
        let _pin = knobs.pin.pin_measuring_thread()?;
        let mut series = Vec::new();
        if knobs.baseline {
            progress.set_message(format!("{vcpus} vCPUs, baseline"));
            let label = format!("zap vcpus={vcpus} baseline");
            let pass = measure(&mut vm, knobs.repeat, false, progress, cancel, hook, &label)?;
            let mut baseline = stall_series(
                "baseline-stall",
                "a vCPU's longest guest TSC gap in a window with no memslot change",
                &pass,
            );
            if vcpus >= host_cpus {
                baseline.notes.push(format!(
                    "{vcpus} spinning vCPUs on {host_cpus} host CPUs: the measuring thread (and, when tracing, the trace readers) can only run by displacing a vCPU, which adds such gaps to every window, the delete's included; the baseline holds them with whatever else stalls the vCPUs (docs/repeatability.md)"
                ));
            }
            series.push(baseline);
        }
        progress.set_message(format!("{vcpus} vCPUs, deletes"));
        let label = format!("zap vcpus={vcpus} delete");
        let pass = measure(&mut vm, knobs.repeat, true, progress, cancel, hook, &label)?;
        series.push(Series {
            name: "delete".into(),
            sample_is: "one KVM_SET_USER_MEMORY_REGION deleting a memslot".into(),
            summary: Summary::from_samples(&pass.delete_ns),
            samples_ns: pass.delete_ns.clone(),
            sample_start_ns: pass.delete_start_ns.clone(),
            ..Series::default()
        });
        series.push(stall_series(
            "stall",
            "a vCPU's longest guest TSC gap overlapping a delete",
            &pass,
        ));
        points.push(Point {
            n: vcpus as u64,
            vcpus_per_host_cpu: vcpus as f64 / host_cpus as f64,
            series,
        });
    }
    Ok(points)
}

/// One pass over `repeat` windows: per window and vCPU, the longest gap in it.
struct Pass {
    /// [window][vcpu] longest stall (0: none above the threshold).
    stalls: Vec<Vec<u64>>,
    delete_ns: Vec<u64>,
    /// When each delete started (CLOCK_MONOTONIC), for the trace to explain exactly it.
    delete_start_ns: Vec<u64>,
    lost_gaps: u64,
}

#[allow(clippy::too_many_arguments)]
fn measure(
    vm: &mut Vm,
    repeat: usize,
    delete: bool,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
    label: &str,
) -> Result<Pass, Error> {
    let khz = vm.tsc_khz().max(1);
    let ticks_to_ns = |ticks: u64| ticks * 1_000_000 / khz;
    let mut pass = Pass {
        stalls: Vec::with_capacity(repeat),
        delete_ns: Vec::with_capacity(repeat),
        delete_start_ns: Vec::with_capacity(repeat),
        lost_gaps: 0,
    };
    hook.measured_phase_begins(label)?;
    for _ in 0..repeat {
        cancel.check()?;
        vm.wait_until_every_vcpu_ran(SETTLE_TIMEOUT)?;
        for i in 0..vm.vcpu_count() {
            pass.lost_gaps += vm.take_gaps(i).lost;
        }
        let window_start = rdtsc();
        if delete {
            let start = monotonic_ns();
            vm.set_scratch(0, false)?;
            pass.delete_ns.push(monotonic_ns() - start);
            pass.delete_start_ns.push(start);
        }
        // The window closes once every vCPU has run guest code again: any stall the delete
        // caused is behind it by then.
        vm.wait_until_every_vcpu_ran(SETTLE_TIMEOUT)?;
        let window_end = rdtsc();
        if delete {
            vm.set_scratch(0, true)?;
        }
        let stalls = (0..vm.vcpu_count())
            .map(|i| {
                let log = vm.take_gaps(i);
                pass.lost_gaps += log.lost;
                log.gaps
                    .iter()
                    .filter(|g| g.tsc_after >= window_start && g.tsc_before <= window_end)
                    .map(|g| ticks_to_ns(g.tsc_after - g.tsc_before))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        pass.stalls.push(stalls);
        progress.advance(1);
    }
    hook.measured_phase_ends(label)?;
    Ok(pass)
}

fn stall_series(name: &str, what: &str, pass: &Pass) -> Series {
    let all: Vec<u64> = pass.stalls.iter().flatten().copied().collect();
    let vcpus = pass.stalls.first().map_or(0, Vec::len);
    let mut notes = Vec::new();
    let per_vcpu: Vec<String> = (0..vcpus.min(16))
        .filter_map(|v| {
            let mine: Vec<u64> = pass.stalls.iter().map(|w| w[v]).collect();
            let s = Summary::from_samples(&mine)?;
            Some(format!(
                "v{v} {:.0}/{:.0}",
                s.p50_ns as f64 / 1e3,
                s.max_ns as f64 / 1e3
            ))
        })
        .collect();
    if !per_vcpu.is_empty() {
        notes.push(format!(
            "per vCPU p50/max (us): {}{}",
            per_vcpu.join(", "),
            if vcpus > 16 {
                format!(" (first 16 of {vcpus})")
            } else {
                String::new()
            }
        ));
    }
    let none = all.iter().filter(|&&s| s == 0).count();
    if none > 0 {
        notes.push(format!(
            "{none} of {} vCPU windows had no gap above the threshold (counted as 0)",
            all.len()
        ));
    }
    if pass.lost_gaps > 0 {
        notes.push(format!(
            "{} guest gaps were overwritten before the host read them: stalls are a lower bound",
            pass.lost_gaps
        ));
    }
    Series {
        name: name.into(),
        sample_is: what.into(),
        summary: Summary::from_samples(&all),
        samples_ns: all,
        notes,
        ..Series::default()
    }
}

#[cfg(test)]
mod tests {
    use vmscale_run::{Point, Series};

    #[test]
    fn a_busy_hosts_gapped_baseline_is_noted_and_nothing_else() {
        let points = |p50_ns: u64, n: u64| {
            vec![Point {
                n,
                vcpus_per_host_cpu: 0.5,
                series: vec![Series {
                    name: "baseline-stall".into(),
                    summary: vmscale_stats::Summary::from_samples(&[p50_ns, p50_ns, p50_ns]),
                    ..Series::default()
                }],
            }]
        };
        let noted = |mut points: Vec<Point>, busy: Option<f64>| {
            super::note_busy_baselines(&mut points, 2, busy);
            !points[0].series[0].notes.is_empty()
        };
        assert!(noted(points(70_000, 1), Some(0.5)));
        assert!(!noted(points(70_000, 1), Some(0.05)), "an idle host");
        assert!(!noted(points(70_000, 1), None), "not measured");
        assert!(!noted(points(0, 1), Some(0.5)), "no gap in most windows");
        assert!(!noted(points(70_000, 2), Some(0.5)), "as many vCPUs as CPUs");
    }
}
