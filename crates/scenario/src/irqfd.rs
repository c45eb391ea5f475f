//! `irqfd` (case 5): a registration storm. Many threads create eventfds and bind them to
//! VMs with KVM_IRQFD, then release them, and every call is timed against how many irqfds
//! its VM already had.
//!
//! On recent kernels assign stays cheap, but deassign walks the VM's whole irqfd list under
//! a spinlock with interrupts off: a list walked under one lock, the pattern of case 5.
//!
//! Threads and fds: RLIMIT_NOFILE caps one fd table, so the irqfds live in *holder* threads
//! with private fd tables (unshare(CLONE_FILES)), each filled up to the limit; `--threads`
//! of them register at once. An eventfd is created, bound, released and closed on its
//! holder thread only, since its number means nothing in any other table.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmscale_kvm::irqfd::{close_inherited, close_inherited_except, private_fd_table, IrqchipVm, IRQCHIP_GSIS};
use vmscale_kvm::KvmSystem;
use vmscale_run::schema::TaskWindow;
use vmscale_run::{monotonic_ns, Point, Series};
use vmscale_stats::Summary;

use crate::{Cancel, Error, Knob, PhaseHook, Progress, Range, ScenarioInfo};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Release {
    /// KVM_IRQFD deassign, one call per irqfd, timed.
    Deassign,
    /// Close the eventfds without deassigning: KVM's shutdown work runs in kworkers.
    Close,
    /// Close the VMs with every irqfd still bound.
    VmClose,
}

impl Release {
    pub fn parse(word: &str) -> Result<Release, Error> {
        match word {
            "deassign" => Ok(Release::Deassign),
            "close" => Ok(Release::Close),
            "vm-close" => Ok(Release::VmClose),
            other => Err(Error::Usage(format!(
                "unknown --release '{other}' (expected deassign, close or vm-close)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Release::Deassign => "deassign",
            Release::Close => "close",
            Release::VmClose => "vm-close",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IrqfdKnobs {
    /// irqfds to register, one point per value.
    pub total: Vec<usize>,
    /// Threads registering (and releasing) at once.
    pub threads: usize,
    pub vms: usize,
    pub release: Release,
}

pub const DEFAULT_TOTAL: &str = "10000";

/// `vmscale run irqfd`'s flags.
#[derive(Debug, clap::Args)]
pub struct IrqfdArgs {
    /// irqfds to register (a list sweeps)
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_TOTAL)]
    pub total: Vec<usize>,
    /// Threads registering (and releasing) at once
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// VMs the irqfds are spread over
    #[arg(long, default_value_t = 1)]
    pub vms: usize,
    /// How the irqfds go away: deassign, close (the eventfds, no deassign) or vm-close
    #[arg(long, default_value = "deassign")]
    pub release: String,
}

impl Default for IrqfdKnobs {
    fn default() -> Self {
        IrqfdKnobs {
            total: vec![10_000],
            threads: 2,
            vms: 1,
            release: Release::Deassign,
        }
    }
}

/// Accepted values of `--total`: each irqfd costs kernel memory (~1 KiB) and an fd.
pub const TOTAL: Range = Range::new(1, 2_000_000);
/// Accepted values of `--threads`.
pub const THREADS: Range = Range::new(1, 1_024);
/// Accepted values of `--vms`.
pub const VMS: Range = Range::new(1, 256);

pub fn info() -> ScenarioInfo {
    ScenarioInfo {
        name: "irqfd",
        case: "case 5: registration storm on a global lock and a linear list",
        summary: "per-call latency of KVM_IRQFD assign and release versus irqfds already registered, from many threads across VMs",
        sweep: "total",
        knobs: vec![
            Knob { flag: "--total", range: Some(TOTAL) },
            Knob { flag: "--threads", range: Some(THREADS) },
            Knob { flag: "--vms", range: Some(VMS) },
            Knob { flag: "--release", range: None },
        ],
    }
}

/// File descriptors a holder thread keeps free for everything else it inherited.
const FD_MARGIN: u64 = 256;

impl IrqfdKnobs {
    pub fn validate(&self) -> Result<(), Error> {
        TOTAL.check_all("--total", &crate::as_u64(&self.total))?;
        THREADS.check("--threads", self.threads as u64)?;
        VMS.check("--vms", self.vms as u64)?;
        Ok(())
    }
}

/// irqfds one holder thread may own: its table's limit less what it inherited and a margin.
fn per_holder_capacity() -> Result<usize, Error> {
    let soft = vmscale_kvm::preflight::raise_fd_limit_for(u64::MAX);
    let inherited = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as u64)
        .unwrap_or(64);
    let capacity = soft.saturating_sub(inherited + FD_MARGIN);
    if capacity < 16 {
        return Err(Error::Usage(format!(
            "RLIMIT_NOFILE is {soft}: too low to hold irqfds (raise it with `ulimit -n`)"
        )));
    }
    Ok(capacity as usize)
}

/// One holder's measured calls: (irqfds its VM had before the call, latency).
#[derive(Default)]
struct HolderSamples {
    /// The holder thread.
    tid: u32,
    /// Per call: (irqfds registered before it, its ns), as the series record them.
    assign: Vec<(u64, u64)>,
    release: Vec<(u64, u64)>,
    /// Per call, when it started (CLOCK_MONOTONIC ns), in the order above.
    assign_start: Vec<u64>,
    release_start: Vec<u64>,
}

impl HolderSamples {
    /// Each call as a window of its thread, for the trace to explain.
    fn windows<'a>(
        &'a self,
        calls: &'a [(u64, u64)],
        starts: &'a [u64],
    ) -> impl Iterator<Item = TaskWindow> + 'a {
        calls.iter().zip(starts).map(|(&(_, ns), &start)| TaskWindow {
            tid: self.tid,
            start_ns: start,
            end_ns: start + ns,
        })
    }
}

/// A counting gate: at most `permits` holders register or release at once.
struct Gate {
    free: Mutex<usize>,
    changed: Condvar,
}

impl Gate {
    fn new(permits: usize) -> Gate {
        Gate {
            free: Mutex::new(permits),
            changed: Condvar::new(),
        }
    }
    fn enter(&self) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.changed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
    }
    fn leave(&self) {
        *self.free.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.changed.notify_one();
    }
}

/// Where holders and the coordinator meet.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// Every holder has registered its share (or failed).
    Registered = 1,
    /// Holders no longer reference the VMs (vm-close mode).
    VmsLetGo = 2,
    /// The VMs are closed (vm-close mode); holders may release and exit.
    Closed = 3,
}

/// A reusable barrier over the phases.
struct Phases {
    /// (latest phase reached, parties that reached it, parties)
    state: Mutex<(Phase, usize, usize)>,
    changed: Condvar,
}

impl Phases {
    fn new(parties: usize) -> Phases {
        Phases {
            state: Mutex::new((Phase::Registered, 0, parties)),
            changed: Condvar::new(),
        }
    }

    /// Returns once every party has arrived at `phase`.
    fn arrive(&self, phase: Phase) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.0 < phase {
            s.0 = phase;
            s.1 = 0;
        }
        s.1 += 1;
        self.changed.notify_all();
        while s.0 == phase && s.1 < s.2 {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// A party that will never arrive (its thread could not start): nobody waits for it.
    fn absent(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.2 -= 1;
        self.changed.notify_all();
    }
}

/// The `irqfd` scenario.
#[derive(Debug, Clone, Copy)]
pub struct Irqfd;

impl crate::Scenario for Irqfd {
    type Knobs = IrqfdKnobs;
    type Host = KvmSystem;
    type Flags = IrqfdArgs;

    const ABOUT: &'static str = "Case 5: KVM_IRQFD registration storm from many threads across VMs";

    fn knobs(&self, args: &IrqfdArgs) -> Result<IrqfdKnobs, Error> {
        Ok(IrqfdKnobs {
            total: args.total.clone(),
            threads: args.threads,
            vms: args.vms,
            release: Release::parse(&args.release)?,
        })
    }

    fn info(&self) -> ScenarioInfo {
        info()
    }

    fn tour_knobs(&self) -> Result<IrqfdKnobs, String> {
        Ok(IrqfdKnobs {
            total: vec![10_000],
            threads: 2,
            vms: 1,
            release: Release::Deassign,
        })
    }

    /// The calls come from holder threads created mid-run.
    fn tracing(&self) -> crate::TraceNeeds {
        crate::TraceNeeds {
            syscalls: crate::Syscalls::Off,
            ..crate::TraceNeeds::default()
        }
    }

    fn prepare(&self, knobs: &IrqfdKnobs) -> Result<crate::Prepared<KvmSystem>, Error> {
        knobs.validate()?;
        let system = KvmSystem::open()?;
        Ok(crate::Prepared {
            kvm: Some(system.facts()),
            host: system,
        })
    }

    fn run(
        &self,
        knobs: &IrqfdKnobs,
        system: &KvmSystem,
        progress: &dyn Progress,
        cancel: &Cancel,
        hook: &mut dyn PhaseHook,
    ) -> Result<Vec<Point>, Error> {
        run(system, knobs, progress, cancel, hook)
    }
}

pub fn run(
    system: &KvmSystem,
    knobs: &IrqfdKnobs,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
) -> Result<Vec<Point>, Error> {
    knobs.validate()?;
    let capacity = per_holder_capacity()?;
    progress.start(knobs.total.iter().map(|&t| 2 * t as u64).sum());
    let mut points = Vec::new();
    for &total in &knobs.total {
        cancel.check()?;
        progress.set_message(format!(
            "{total} irqfds, {} threads, {} VMs",
            knobs.threads, knobs.vms
        ));
        points.push(one_point(
            system, knobs, total, capacity, progress, cancel, hook,
        )?);
    }
    Ok(points)
}

fn one_point(
    system: &KvmSystem,
    knobs: &IrqfdKnobs,
    total: usize,
    capacity: usize,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
) -> Result<Point, Error> {
    // Shared through Arcs that every holder drops before the VMs are closed, so the last
    // reference (whose drop closes the fd) is always the one on this thread, in this table.
    let mut vms: Vec<Arc<IrqchipVm>> = (0..knobs.vms)
        .map(|_| {
            cancel.check()?;
            Ok(Arc::new(IrqchipVm::create(system)?))
        })
        .collect::<Result<_, Error>>()?;
    let vm_fds: Vec<i32> = vms.iter().map(|vm| vm.raw_fd()).collect();
    // Whole multiples of the VM count, so every VM gets the same number of holders and so
    // the same share of irqfds.
    let holders = total
        .div_ceil(capacity)
        .max(knobs.threads)
        .div_ceil(knobs.vms)
        .saturating_mul(knobs.vms)
        .min(total);
    let registered: Vec<AtomicU64> = (0..knobs.vms).map(|_| AtomicU64::new(0)).collect();
    let gate = Gate::new(knobs.threads);
    // Every holder plus this thread meet at each phase boundary.
    let phases = Phases::new(holders + 1);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    // Set when a holder thread cannot start: the others stop registering.
    let failed = AtomicBool::new(false);
    let label = format!(
        "irqfd total={total} threads={} vms={}",
        knobs.threads, knobs.vms
    );
    let kworkers_before = count_kworkers();
    let mut vm_close_ns = None;
    let mut kworkers = None;

    hook.measured_phase_begins(&label)?;
    let samples: Vec<HolderSamples> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..holders)
            .map(|h| {
                let vm = Arc::clone(&vms[h % knobs.vms]);
                let job = HolderJob {
                    vm_fds: &vm_fds,
                    share: total / holders + usize::from(h < total % holders),
                    release: knobs.release,
                    registered: &registered[h % knobs.vms],
                    gate: &gate,
                    phases: &phases,
                    progress,
                    cancel: &cancel.0,
                    failed: &failed,
                };
                let first_error = &first_error;
                let spawned = std::thread::Builder::new()
                    .name(format!("irqfd{h}"))
                    .stack_size(256 * 1024)
                    .spawn_scoped(scope, move || {
                        let mut out = HolderSamples {
                            tid: vmscale_sys::gettid(),
                            ..HolderSamples::default()
                        };
                        if let Err(e) = job.run(vm, &mut out) {
                            first_error
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .get_or_insert(e);
                        }
                        out
                    });
                match spawned {
                    Ok(handle) => Some(handle),
                    // No thread left (a memory or thread limit): one line, not a panic.
                    Err(e) => {
                        first_error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(Error::Host(format!(
                                "cannot start irqfd holder thread {h}: {e}"
                            )));
                        failed.store(true, Ordering::Relaxed);
                        phases.absent();
                        None
                    }
                }
            })
            .collect::<Vec<_>>()
            .into_iter()
            .flatten()
            .collect::<Vec<_>>();
        phases.arrive(Phase::Registered);
        phases.arrive(Phase::VmsLetGo);
        if knobs.release == Release::VmClose {
            // Every holder has dropped its reference and its fd copies: this closes the
            // last fd of each VM, with every irqfd still bound.
            let start = monotonic_ns();
            vms.clear();
            vm_close_ns = Some(monotonic_ns() - start);
        }
        phases.arrive(Phase::Closed);
        let results = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect();
        if knobs.release == Release::Close {
            // Closing a bound eventfd queues KVM's irqfd shutdown, which waits for an SRCU
            // grace period in a kworker: they pile up, then drain.
            kworkers = Some(watch_kworkers(
                kworkers_before,
                Duration::from_secs(60),
                cancel,
            ));
        }
        results
    });
    hook.measured_phase_ends(&label)?;
    drop(vms);
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    cancel.check()?;

    let mut assign = calls_series(
        "assign",
        "one KVM_IRQFD assign",
        samples.iter().flat_map(|s| &s.assign),
    );
    assign.timed_calls = samples
        .iter()
        .flat_map(|s| s.windows(&s.assign, &s.assign_start))
        .collect();
    // A close is the release only with the eventfd's last reference: its window is the
    // call and the close alike.
    let release_windows = || -> Vec<TaskWindow> {
        samples
            .iter()
            .flat_map(|s| s.windows(&s.release, &s.release_start))
            .collect()
    };
    assign.notes.push(limit_note(total, holders, capacity));
    let mut series = vec![assign];
    match knobs.release {
        Release::Deassign => {
            let mut deassign = calls_series(
                "deassign",
                "one KVM_IRQFD deassign",
                samples.iter().flat_map(|s| &s.release),
            );
            deassign.timed_calls = release_windows();
            series.push(deassign);
        }
        Release::Close => {
            let mut close = calls_series(
                "close",
                "one close() of a bound eventfd",
                samples.iter().flat_map(|s| &s.release),
            );
            close.timed_calls = release_windows();
            series.push(close);
            let (peak, gone) = kworkers.unwrap_or((kworkers_before, None));
            let mut drain = single_series(
                "kworker-drain",
                "from the last close until the kworkers it spawned are gone",
                gone,
            );
            drain.notes.push(format!(
                "kworkers: {kworkers_before} before, {peak} at peak{}",
                if gone.is_none() {
                    ", still not drained after 60 s"
                } else {
                    ""
                }
            ));
            series.push(drain);
        }
        Release::VmClose => series.push(single_series(
            "vm-close",
            "closing the VMs with every irqfd bound",
            vm_close_ns,
        )),
    }
    Ok(Point {
        n: total as u64,
        vcpus_per_host_cpu: 0.0,
        series,
    })
}

/// Which limit shaped the run, for the record.
fn limit_note(total: usize, holders: usize, capacity: usize) -> String {
    let (soft, hard) = vmscale_kvm::preflight::fd_limits();
    format!(
        "RLIMIT_NOFILE {soft} (hard {hard}) applies per fd table: {holders} threads with private fd tables held {total} irqfds (up to {capacity} each)"
    )
}

/// One holder thread's work and what it shares with the others.
struct HolderJob<'a> {
    vm_fds: &'a [i32],
    share: usize,
    release: Release,
    registered: &'a AtomicU64,
    gate: &'a Gate,
    phases: &'a Phases,
    progress: &'a dyn Progress,
    /// Polled between calls: one point can hold tens of thousands of them.
    cancel: &'a std::sync::atomic::AtomicBool,
    /// Another holder could not start: the point has failed, stop registering.
    failed: &'a AtomicBool,
}

impl HolderJob<'_> {
    /// Registers its share, lets go of the VMs if they are to be closed, releases. Arrives
    /// at every phase even after an error, so the others never wait for it forever.
    fn run(self, vm: Arc<IrqchipVm>, out: &mut HolderSamples) -> Result<(), Error> {
        let mut eventfds = Vec::with_capacity(self.share);
        let (private, registered) = match private_fd_table() {
            Ok(()) => {
                // SAFETY: this thread runs on a private fd table and uses no inherited fd
                // but the VMs'. Copies of the process's other files (a tracefs instance's
                // per-CPU files) would otherwise stay open until this thread has exited.
                unsafe { close_inherited_except(self.vm_fds) };
                (true, self.register(&vm, &mut eventfds, out))
            }
            Err(e) => (false, Err(Error::from(e))),
        };
        self.phases.arrive(Phase::Registered);
        let vm = if self.release == Release::VmClose {
            drop(vm);
            for &fd in self.vm_fds {
                // SAFETY: this thread runs on a private fd table (or unshare failed and it
                // registered nothing) and never uses the VM fds again; the VMs' owner
                // closes its own copies.
                unsafe { close_inherited(fd) };
            }
            None
        } else {
            Some(vm)
        };
        self.phases.arrive(Phase::VmsLetGo);
        self.phases.arrive(Phase::Closed);
        let result = registered.and_then(|()| match &vm {
            Some(vm) => {
                self.gate.enter();
                let released = self.release_all(vm, &mut eventfds, out);
                self.gate.leave();
                released
            }
            None => Ok(()),
        });
        // Whatever is left closes here, in this thread's table.
        drop(eventfds);
        if let (Some(vm), true) = (vm, private) {
            drop(vm);
            for &fd in self.vm_fds {
                // SAFETY: a private table, and the VMs are not used on this thread again.
                // The VMs' last references are then their owner's, which closes them and
                // waits for the kernel's release of every irqfd itself, not this thread's
                // exit after it has been joined.
                unsafe { close_inherited(fd) };
            }
        }
        result
    }

    fn register(
        &self,
        vm: &IrqchipVm,
        eventfds: &mut Vec<(EventFd, u32)>,
        out: &mut HolderSamples,
    ) -> Result<(), Error> {
        self.gate.enter();
        let result = (0..self.share).try_for_each(|i| {
            crate::check_flag(self.cancel)?;
            if self.failed.load(Ordering::Relaxed) {
                return Err(Error::Host("another holder thread could not start".into()));
            }
            let eventfd = EventFd::new(EFD_NONBLOCK)
                .map_err(|e| Error::Usage(format!("eventfd: {e} (file descriptor limit?)")))?;
            let gsi = i as u32 % IRQCHIP_GSIS;
            let before = self.registered.fetch_add(1, Ordering::Relaxed);
            let start = monotonic_ns();
            vm.assign(&eventfd, gsi)?;
            out.assign.push((before, monotonic_ns() - start));
            out.assign_start.push(start);
            eventfds.push((eventfd, gsi));
            self.progress.advance(1);
            Ok(())
        });
        self.gate.leave();
        result
    }

    fn release_all(
        &self,
        vm: &IrqchipVm,
        eventfds: &mut Vec<(EventFd, u32)>,
        out: &mut HolderSamples,
    ) -> Result<(), Error> {
        for (eventfd, gsi) in eventfds.drain(..) {
            // What is left is closed with `eventfds`, which KVM handles like a release.
            crate::check_flag(self.cancel)?;
            let before = self.registered.fetch_sub(1, Ordering::Relaxed);
            let start = monotonic_ns();
            if self.release == Release::Deassign {
                vm.deassign(&eventfd, gsi)?;
            }
            drop(eventfd);
            out.release.push((before, monotonic_ns() - start));
            out.release_start.push(start);
            self.progress.advance(1);
        }
        Ok(())
    }
}

fn calls_series<'a>(name: &str, what: &str, calls: impl Iterator<Item = &'a (u64, u64)>) -> Series {
    let (sample_x, samples_ns): (Vec<u64>, Vec<u64>) = calls.copied().unzip();
    Series {
        name: name.into(),
        sample_is: what.into(),
        summary: Summary::from_samples(&samples_ns),
        samples_ns,
        sample_x,
        ..Series::default()
    }
}

fn single_series(name: &str, what: &str, ns: Option<u64>) -> Series {
    let samples_ns: Vec<u64> = ns.into_iter().collect();
    Series {
        name: name.into(),
        sample_is: what.into(),
        summary: Summary::from_samples(&samples_ns),
        samples_ns,
        ..Series::default()
    }
}

/// Kernel worker threads now (tasks named kworker*).
pub fn count_kworkers() -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .filter(|e| {
                    std::fs::read_to_string(e.path().join("comm"))
                        .is_ok_and(|c| c.starts_with("kworker"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Peak kworker count, and how long until the count is back within 10% of `baseline`.
fn watch_kworkers(baseline: usize, limit: Duration, cancel: &Cancel) -> (usize, Option<u64>) {
    let start = Instant::now();
    let mut peak = baseline;
    while start.elapsed() < limit && cancel.check().is_ok() {
        let now = count_kworkers();
        peak = peak.max(now);
        if now <= baseline + baseline / 10 + 2 {
            return (peak, Some(start.elapsed().as_nanos() as u64));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (peak, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_knobs_are_usage_errors() {
        for knobs in [
            IrqfdKnobs {
                total: vec![0],
                ..IrqfdKnobs::default()
            },
            IrqfdKnobs {
                threads: 0,
                ..IrqfdKnobs::default()
            },
            IrqfdKnobs {
                vms: 0,
                ..IrqfdKnobs::default()
            },
            IrqfdKnobs {
                total: vec![10_000_000],
                ..IrqfdKnobs::default()
            },
        ] {
            assert!(knobs.validate().unwrap_err().is_usage(), "{knobs:?}");
        }
        assert!(Release::parse("sometimes").unwrap_err().is_usage());
    }
}
