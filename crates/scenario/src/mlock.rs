//! `mlock` (case 2): what locking a buffer around every call costs, and the IPIs it sends.
//!
//! A device model that mlock()s its hypercall buffer on every call made Xen's dom0 send
//! over 200,000 IPIs a second: since 2.6.28 mlock drained every CPU's LRU cache. Kernels
//! moved on, and which variant still storms is a measurement, not an assumption:
//!
//! - `lock`: mlock + munlock of one existing buffer per call;
//! - `map`: mmap + mlock + munlock + munmap per call (a fresh buffer each time); the unmap
//!   must shoot down the TLB of every other CPU running a thread of this process;
//! - `pool`: the fix: one buffer locked once, each call only writes to it.
//!
//! `--busy N` keeps N sibling threads of the process spinning on other CPUs, the condition
//! under which an unmap needs a TLB-shootdown IPI. IPIs per call come from the trace (the
//! ipi and csd events inside each mode's measured phase), next to the case's formula,
//! calls x (CPUs - 1).

use vmscale_kvm::affinity::PinGuard;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use vmscale_run::{monotonic_ns, Point, RunRecord, Series};
use vmscale_stats::Summary;

use crate::{Cancel, Error, Knob, PhaseHook, Progress, Range, ScenarioInfo};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Lock,
    Map,
    Pool,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Lock, Mode::Map, Mode::Pool];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Lock => "lock",
            Mode::Map => "map",
            Mode::Pool => "pool",
        }
    }

    pub fn parse_list(words: &[String]) -> Result<Vec<Mode>, Error> {
        let mut out = Vec::new();
        for word in words {
            let modes: &[Mode] = match word.as_str() {
                "all" => &Mode::ALL,
                "lock" => &[Mode::Lock],
                "map" => &[Mode::Map],
                "pool" => &[Mode::Pool],
                other => {
                    return Err(Error::Usage(format!(
                        "unknown --mode '{other}' (expected lock, map, pool or all)"
                    )))
                }
            };
            for m in modes {
                if !out.contains(m) {
                    out.push(*m);
                }
            }
        }
        Ok(out)
    }

    fn sample_is(self) -> &'static str {
        match self {
            Mode::Lock => "one call: mlock + munlock of an existing buffer",
            Mode::Map => "one call: mmap + mlock + munlock + munmap of a fresh buffer",
            Mode::Pool => "one call: write to a buffer locked once up front",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MlockKnobs {
    pub calls: usize,
    pub modes: Vec<Mode>,
    /// Sibling threads spinning on other CPUs while the calls run.
    pub busy: Vec<usize>,
    pub buffer_kib: usize,
}

pub const DEFAULT_CALLS: usize = 20_000;

/// `vmscale run mlock`'s flags.
#[derive(Debug, clap::Args)]
pub struct MlockArgs {
    /// Calls per mode and point
    #[arg(long, default_value_t = DEFAULT_CALLS)]
    pub calls: usize,
    /// lock (mlock+munlock), map (mmap+mlock+munlock+munmap), pool (locked once), or all
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub mode: Vec<String>,
    /// Sibling threads spinning on other CPUs (a list sweeps)
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    pub busy: Vec<usize>,
    /// Size of the buffer each call locks, in KiB
    #[arg(long, default_value_t = 16)]
    pub size_kib: usize,
}

impl Default for MlockKnobs {
    fn default() -> Self {
        MlockKnobs {
            calls: DEFAULT_CALLS,
            modes: Mode::ALL.to_vec(),
            busy: vec![0, 1],
            buffer_kib: 16,
        }
    }
}

/// Accepted values of `--calls`.
pub const CALLS: Range = Range::new(1, 1_000_000);
/// Accepted values of `--busy`.
pub const BUSY: Range = Range::new(0, 256);
/// Accepted values of `--size-kib`.
pub const SIZE_KIB: Range = Range::new(4, 1_048_576);

pub fn info() -> ScenarioInfo {
    ScenarioInfo {
        name: "mlock",
        case: "case 2: IPI storm from a per-call mlock",
        summary: "per-call latency of locking a buffer around every call (lock, map) versus a pool locked once, and the IPIs each sends",
        sweep: "busy",
        knobs: vec![
            Knob { flag: "--calls", range: Some(CALLS) },
            Knob { flag: "--mode", range: None },
            Knob { flag: "--busy", range: Some(BUSY) },
            Knob { flag: "--size-kib", range: Some(SIZE_KIB) },
        ],
    }
}

impl MlockKnobs {
    pub fn validate(&self) -> Result<(), Error> {
        if self.calls == 0 || self.modes.is_empty() || self.busy.is_empty() {
            return Err(Error::Usage(
                "nothing to measure: --calls, --mode and --busy need values".into(),
            ));
        }
        CALLS.check("--calls", self.calls as u64)?;
        BUSY.check_all("--busy", &crate::as_u64(&self.busy))?;
        SIZE_KIB.check("--size-kib", self.buffer_kib as u64)?;
        // Spinners are meant to sit on *other* CPUs: more than there are is not the
        // experiment asked for, only CPU starvation of the caller.
        let others = vmscale_run::host::online_cpus().saturating_sub(1) as u64;
        if let Some(&b) = self.busy.iter().find(|&&b| b as u64 > others) {
            return Err(Error::Usage(format!(
                "--busy {b}: this host has {} online CPUs, so at most {others} can spin beside the caller",
                others + 1
            )));
        }
        Ok(())
    }
}

/// The label of a mode's measured phase; the trace analysis finds the phase by it.
pub fn phase_label(mode: Mode, busy: usize) -> String {
    format!("mlock mode={} busy={busy}", mode.name())
}

/// The `mlock` scenario.
#[derive(Debug, Clone, Copy)]
pub struct Mlock;

impl crate::Scenario for Mlock {
    type Knobs = MlockKnobs;
    type Host = ();
    type Flags = MlockArgs;

    const ABOUT: &'static str = "Case 2: per-call page locking and the IPIs it sends";

    fn knobs(&self, args: &MlockArgs) -> Result<MlockKnobs, Error> {
        Ok(MlockKnobs {
            calls: args.calls,
            modes: Mode::parse_list(&args.mode)?,
            busy: args.busy.clone(),
            buffer_kib: args.size_kib,
        })
    }

    fn info(&self) -> ScenarioInfo {
        info()
    }

    fn tour_knobs(&self) -> Result<MlockKnobs, String> {
        Ok(MlockKnobs {
            calls: 5_000,
            ..MlockKnobs::default()
        })
    }

    /// Needs no KVM; the record describes it when there is one.
    fn prepare(&self, knobs: &MlockKnobs) -> Result<crate::Prepared<()>, Error> {
        knobs.validate()?;
        Ok(crate::Prepared {
            host: (),
            kvm: vmscale_kvm::KvmSystem::open().ok().map(|s| s.facts()),
        })
    }

    fn run(
        &self,
        knobs: &MlockKnobs,
        _: &(),
        progress: &dyn Progress,
        cancel: &Cancel,
        hook: &mut dyn PhaseHook,
    ) -> Result<Vec<Point>, Error> {
        run(knobs, progress, cancel, hook)
    }

    /// Each series' IPIs, as the trace counted them, beside the case's formula.
    fn annotate(&self, knobs: &MlockKnobs, _: &(), record: &mut RunRecord, measuring_tid: u32) {
        add_ipi_notes(record, knobs, measuring_tid);
    }
}

pub fn run(
    knobs: &MlockKnobs,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
) -> Result<Vec<Point>, Error> {
    knobs.validate()?;
    progress.start((knobs.busy.len() * knobs.modes.len() * knobs.calls) as u64);
    let host_cpus = vmscale_run::host::online_cpus();
    let bytes = knobs.buffer_kib * 1024;
    let mut points = Vec::new();
    for &busy in &knobs.busy {
        let stop = AtomicBool::new(false);
        let series = std::thread::scope(|scope| -> Result<Vec<Series>, Error> {
            // The caller on CPU 0, siblings on the others: an unmap then really has another
            // CPU running this mm to shoot down, instead of the scheduler stacking both on
            // one CPU.
            let _pinned = pinned_to(0);
            for i in 0..busy {
                let stop = &stop;
                let cpu = 1 + i % host_cpus.saturating_sub(1).max(1);
                std::thread::Builder::new()
                    .name(format!("busy{i}"))
                    .spawn_scoped(scope, move || {
                        let _pinned = pinned_to(cpu);
                        spin_until(stop)
                    })
                    .map_err(|e| Error::Usage(format!("cannot start a busy thread: {e}")))?;
            }
            let result = knobs
                .modes
                .iter()
                .map(|&mode| {
                    progress.set_message(format!("{} with {busy} busy threads", mode.name()));
                    measure_mode(mode, knobs.calls, bytes, busy, progress, cancel, hook)
                })
                .collect();
            stop.store(true, Ordering::Relaxed);
            result
        })?;
        points.push(Point {
            n: busy as u64,
            vcpus_per_host_cpu: 0.0,
            series,
        });
    }
    Ok(points)
}

/// Pins the calling thread to `cpu` while the guard lives. Best effort (a CPU may be
/// offline or forbidden): the run then says nothing about placement, and the IPI counts
/// show it.
fn pinned_to(cpu: usize) -> Option<PinGuard> {
    PinGuard::enter(&[cpu]).ok()
}

fn spin_until(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        std::hint::spin_loop();
    }
}

#[allow(clippy::too_many_arguments)]
fn measure_mode(
    mode: Mode,
    calls: usize,
    bytes: usize,
    busy: usize,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
) -> Result<Series, Error> {
    let pool = match mode {
        Mode::Lock | Mode::Pool => Some(Buffer::map(bytes)?),
        Mode::Map => None,
    };
    if let (Mode::Pool, Some(pool)) = (mode, &pool) {
        pool.lock()?;
    }
    let label = phase_label(mode, busy);
    let mut samples = Vec::with_capacity(calls);
    let mut starts = Vec::with_capacity(calls);
    hook.measured_phase_begins(&label)?;
    let measured = (|| {
        for i in 0..calls {
            if i % 1024 == 0 {
                cancel.check()?;
            }
            let start = monotonic_ns();
            match (mode, &pool) {
                (Mode::Lock, Some(buffer)) => {
                    buffer.lock()?;
                    buffer.unlock()?;
                }
                (Mode::Pool, Some(buffer)) => buffer.touch(i),
                _ => {
                    let buffer = Buffer::map(bytes)?;
                    buffer.lock()?;
                    buffer.unlock()?;
                    drop(buffer);
                }
            }
            samples.push(monotonic_ns() - start);
            starts.push(start);
            if i % 256 == 255 {
                progress.advance(256);
            }
        }
        Ok::<(), Error>(())
    })();
    hook.measured_phase_ends(&label)?;
    measured?;
    progress.advance((calls % 256) as u64);
    Ok(Series {
        name: mode.name().into(),
        sample_is: mode.sample_is().into(),
        summary: Summary::from_samples(&samples),
        samples_ns: samples,
        sample_start_ns: starts,
        ..Series::default()
    })
}

/// An anonymous mapping; unmapped on drop (which is the munmap a `map` call times).
struct Buffer {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Buffer {
    fn map(len: usize) -> Result<Buffer, Error> {
        // SAFETY: a fresh private anonymous mapping aliases nothing; checked for MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::Usage(format!(
                "mmap: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Buffer { ptr, len })
    }

    fn lock(&self) -> Result<(), Error> {
        // SAFETY: locks pages of a mapping this value owns, for its whole length.
        if unsafe { libc::mlock(self.ptr, self.len) } != 0 {
            return Err(Error::Usage(format!(
                "mlock: {} (RLIMIT_MEMLOCK too low? run as root)",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    fn unlock(&self) -> Result<(), Error> {
        // SAFETY: unlocks the same range; the mapping is still ours.
        if unsafe { libc::munlock(self.ptr, self.len) } != 0 {
            return Err(Error::Usage(format!(
                "munlock: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    /// What a call does with a pooled buffer: write the request into it.
    fn touch(&self, i: usize) {
        // SAFETY: the offset is inside the mapping (len >= 1) and the buffer is only used
        // by this thread.
        unsafe {
            self.ptr
                .cast::<u8>()
                .add(i % self.len)
                .write_volatile(i as u8)
        };
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped; nothing refers into it any more.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// Puts the trace's IPI count for each mode's phase beside the case's formula.
fn add_ipi_notes(record: &mut RunRecord, knobs: &MlockKnobs, measuring_tid: u32) {
    let cpus = record.host.online_cpus;
    let Some(trace) = record.trace.clone() else {
        for series in record.points.iter_mut().flat_map(|p| p.series.iter_mut()) {
            series.notes.push(format!(
                "IPIs not measured (no trace); the case's formula, calls x (CPUs - 1), predicts {}",
                knobs.calls * cpus.saturating_sub(1)
            ));
        }
        return;
    };
    let measuring = measuring_tid as i32;
    for point in &mut record.points {
        for series in &mut point.series {
            let Ok(modes) = Mode::parse_list(std::slice::from_ref(&series.name)) else {
                continue;
            };
            let label = phase_label(modes[0], point.n as usize);
            let Some(phase) = trace.ipis.iter().find(|p| p.label == label) else {
                series
                    .notes
                    .push("the trace has no phase for these calls: IPIs unknown".into());
                continue;
            };
            let sent: u64 = phase
                .by_sender
                .iter()
                .filter(|s| s.pid == measuring)
                .map(|s| s.ipis)
                .sum();
            let calls = knobs.calls as f64;
            series.notes.push(format!(
                "measured: the calling thread sent {sent} IPIs in {} calls ({:.3} per call; the case's formula calls x (CPUs - 1) = {}); all tasks sent {} during the phase and queued {} cross-CPU calls",
                knobs.calls,
                sent as f64 / calls,
                knobs.calls * cpus.saturating_sub(1),
                phase.ipis,
                phase.csd_queued,
            ));
            if phase.ipis > 0 {
                let targets: Vec<String> = phase
                    .by_target
                    .iter()
                    .map(|(cpu, n)| format!("cpu{cpu} {n}"))
                    .collect();
                let sites: Vec<String> = phase
                    .by_site
                    .iter()
                    .take(3)
                    .map(|s| {
                        let callback = if s.callback.is_empty() {
                            "none"
                        } else {
                            &s.callback
                        };
                        format!("{} from {} (callback {callback})", s.ipis, s.callsite)
                    })
                    .collect();
                let syscalls: Vec<String> = phase
                    .by_syscall
                    .iter()
                    .map(|s| format!("{} {}", s.syscall, s.ipis))
                    .collect();
                series.notes.push(format!(
                    "IPIs by target: {}; by call site: {}; by system call: {}",
                    targets.join(", "),
                    sites.join(", "),
                    if syscalls.is_empty() {
                        "-".to_string()
                    } else {
                        syscalls.join(", ")
                    }
                ));
                if let Some(work) = phase.victim_work.first() {
                    series.notes.push(format!(
                        "cost to the target CPUs: {} ran {} times, {:.1} us in all ({:.2} us per call)",
                        work.function,
                        work.calls,
                        work.total_ns as f64 / 1e3,
                        work.total_ns as f64 / 1e3 / knobs.calls as f64
                    ));
                }
            }
        }
    }
}
