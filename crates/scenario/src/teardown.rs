//! `teardown` (case 1): how long releasing M VMs takes, in the four ways the original
//! reproducer freed its devices, and how that grows with M.
//!
//! VMs are built in *holder* processes (the `vmscale` binary run with the hidden
//! `teardown-holder` command), so that `exit` can be measured at all and every release
//! starts from a process that owns nothing else. The clock runs from the moment the holder
//! is told to release until it is reaped: by then every fd is closed and every page of guest
//! memory is back, which close() returning alone does not guarantee.
//!
//! - `exit`: the holder exits with everything open; the kernel closes fds one after another.
//! - `close`: the holder drops its VMs one by one, timing vCPUs, KVM and munmap separately.
//! - `threads`: the holder drops every VM at once, one thread each.
//! - `fork`: one holder process per VM, all told to exit at once.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};

use serde::{Deserialize, Serialize};
use vmscale_kvm::TeardownTimes;
use vmscale_run::{monotonic_ns, Point, Series};
use vmscale_stats::Summary;

use crate::{Cancel, Error, Knob, PhaseHook, Progress, Range, ScenarioInfo};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Exit,
    Close,
    Threads,
    Fork,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Exit, Mode::Close, Mode::Threads, Mode::Fork];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Exit => "exit",
            Mode::Close => "close",
            Mode::Threads => "threads",
            Mode::Fork => "fork",
        }
    }

    pub fn parse_list(words: &[String]) -> Result<Vec<Mode>, Error> {
        let mut out = Vec::new();
        for word in words {
            let modes: &[Mode] = match word.as_str() {
                "all" => &Mode::ALL,
                "exit" => &[Mode::Exit],
                "close" => &[Mode::Close],
                "threads" => &[Mode::Threads],
                "fork" => &[Mode::Fork],
                other => {
                    return Err(Error::Usage(format!(
                        "unknown --mode '{other}' (expected exit, close, threads, fork or all)"
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

    /// How the holder releases its VMs when told to.
    fn holder_release(self) -> &'static str {
        match self {
            Mode::Exit | Mode::Fork => "exit",
            Mode::Close => "close",
            Mode::Threads => "threads",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TeardownKnobs {
    /// VM counts to sweep.
    pub vms: Vec<usize>,
    pub vcpus: usize,
    /// Guest memory per VM beyond the boot image, in MiB.
    pub mem_mib: u64,
    /// Write every page of that memory first, so the host really backs it.
    pub touch: bool,
    pub modes: Vec<Mode>,
    pub repeat: usize,
    /// PCI devices already bound to vfio-pci: release device fds instead of VMs, and sweep
    /// `vms` as the number of devices.
    #[serde(default)]
    pub vfio: Vec<String>,
}

pub const DEFAULT_VMS: &str = "1,2,4,8,16";

/// `vmscale run teardown`'s flags.
#[derive(Debug, clap::Args)]
pub struct TeardownArgs {
    /// VM counts to sweep
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_VMS)]
    pub vms: Vec<usize>,
    /// vCPUs per VM (halted)
    #[arg(long, default_value_t = 1)]
    pub vcpus: usize,
    /// Guest memory per VM, in MiB
    #[arg(long, default_value_t = 64)]
    pub mem_mib: u64,
    /// Leave guest memory untouched (not backed by host pages)
    #[arg(long)]
    pub untouched: bool,
    /// exit, close, threads, fork, or all
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub mode: Vec<String>,
    /// Releases measured per point and mode
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// PCI devices already bound to vfio-pci (BDF,...): release their fds instead of VMs;
    /// --vms then counts devices. vmscale never binds, unbinds or resets a device
    #[arg(long, value_delimiter = ',', value_name = "BDF")]
    pub vfio: Vec<String>,
}

impl Default for TeardownKnobs {
    fn default() -> Self {
        TeardownKnobs {
            vms: vec![1, 2, 4, 8, 16],
            vcpus: 1,
            mem_mib: 64,
            touch: true,
            modes: Mode::ALL.to_vec(),
            repeat: 3,
            vfio: Vec::new(),
        }
    }
}

/// Accepted values of `--vms`.
pub const VMS: Range = Range::new(1, 1_024);
/// Accepted values of `--vcpus`.
pub const VCPUS: Range = Range::new(1, 256);
/// Accepted values of `--mem-mib`.
pub const MEM_MIB: Range = Range::new(2, 65_536);
/// Accepted values of `--repeat`.
pub const REPEAT: Range = Range::new(1, 10_000);

pub fn info() -> ScenarioInfo {
    ScenarioInfo {
        name: "teardown",
        case: "case 1: device release serialized behind a sleeping lock",
        summary: "time until M VMs are really gone (process reaped, memory returned), per release mode, and the per-VM slope",
        sweep: "vms",
        knobs: vec![
            Knob { flag: "--vms", range: Some(VMS) },
            Knob { flag: "--vcpus", range: Some(VCPUS) },
            Knob { flag: "--mem-mib", range: Some(MEM_MIB) },
            Knob { flag: "--untouched", range: None },
            Knob { flag: "--mode", range: None },
            Knob { flag: "--repeat", range: Some(REPEAT) },
            Knob { flag: "--vfio", range: None },
        ],
    }
}

impl TeardownKnobs {
    pub fn validate(&self) -> Result<(), Error> {
        VMS.check_all("--vms", &crate::as_u64(&self.vms))?;
        VCPUS.check("--vcpus", self.vcpus as u64)?;
        MEM_MIB.check("--mem-mib", self.mem_mib)?;
        REPEAT.check("--repeat", self.repeat as u64)?;
        if !self.mem_mib.is_multiple_of(2) {
            return Err(Error::Usage(format!(
                "--mem-mib must be a positive multiple of 2 (got {})",
                self.mem_mib
            )));
        }
        if self.repeat == 0 || self.modes.is_empty() {
            return Err(Error::Usage(
                "nothing to measure: --repeat and --mode need values".into(),
            ));
        }
        Ok(())
    }

    /// Refuses a sweep whose largest point needs more memory than the host has available,
    /// or devices that are not ready for VFIO (read from sysfs only; nothing is touched).
    pub fn preflight(&self, max_vcpus: usize) -> Result<(), Error> {
        self.validate()?;
        if !self.vfio.is_empty() {
            vfio_targets(&self.vfio)?;
            let largest = *self.vms.iter().max().expect("validated");
            if largest > self.vfio.len() {
                return Err(Error::Usage(format!(
                    "--vms {largest} asks for more devices than the {} given with --vfio",
                    self.vfio.len()
                )));
            }
            return Ok(());
        }
        let largest = *self.vms.iter().max().expect("validated");
        let config = holder_config(self.vcpus, self.mem_mib);
        let bytes = config.total_memory_bytes().saturating_mul(largest as u64);
        vmscale_kvm::preflight::check_vm_request(self.vcpus, bytes, max_vcpus)?;
        Ok(())
    }
}

/// The devices behind `--vfio`, each checked (sysfs only) before anything is opened.
pub fn vfio_targets(bdfs: &[String]) -> Result<Vec<vmscale_kvm::vfio::VfioTarget>, Error> {
    let (sys, dev) = vmscale_kvm::vfio::host_roots();
    bdfs.iter()
        .map(|text| {
            let bdf = vmscale_kvm::vfio::Bdf::parse(text)?;
            Ok(vmscale_kvm::vfio::check_device(&sys, &dev, &bdf)?)
        })
        .collect()
}

fn holder_config(vcpus: usize, mem_mib: u64) -> vmscale_kvm::VmConfig {
    let mut config = vmscale_kvm::VmConfig::new(vcpus, vmscale_kvm::GuestProgram::Halt);
    config.scratch_slots = 1;
    config.scratch_slot_bytes = mem_mib << 20;
    config.stats = false;
    config
}

/// What a holder reports after `close` or `threads`: one entry per VM.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HolderReport {
    /// Closing each VFIO device fd (the driver's release path), in --vfio mode.
    #[serde(default)]
    pub devices_ns: Vec<u64>,
    pub vcpus_ns: Vec<u64>,
    pub kvm_ns: Vec<u64>,
    pub munmap_ns: Vec<u64>,
}

/// The holder side for VFIO devices: open them, say "ready", wait for "go", release the
/// device fds as `release` says, report, exit.
pub fn hold_devices_and_release(bdfs: &[String], release: &str) -> Result<(), Error> {
    let targets = vfio_targets(bdfs)?;
    let (_, dev) = vmscale_kvm::vfio::host_roots();
    let mut held = vmscale_kvm::vfio::VfioDevices::open(&dev, &targets)?;
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| Error::Usage(format!("teardown holder: {e}"));
    writeln!(out, "ready").map_err(io)?;
    out.flush().map_err(io)?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(io)?;
    let close_timed = |file: std::fs::File| {
        let start = std::time::Instant::now();
        drop(file);
        start.elapsed().as_nanos() as u64
    };
    let mut report = HolderReport::default();
    match release {
        "exit" => std::process::exit(0),
        "close" => report.devices_ns = held.take_devices().into_iter().map(close_timed).collect(),
        _ => {
            report.devices_ns = std::thread::scope(|scope| {
                joined(
                    held.take_devices()
                        .into_iter()
                        .map(|f| {
                            std::thread::Builder::new().spawn_scoped(scope, move || close_timed(f))
                        })
                        .collect(),
                )
            })?
        }
    }
    drop(held);
    let json = serde_json::to_string(&report).expect("report serializes");
    writeln!(out, "{json}").map_err(io)?;
    out.flush().map_err(io)
}

/// The process that holds VMs for the teardown scenario (not for direct use).
#[derive(Debug, clap::Args)]
pub struct HolderArgs {
    #[arg(long)]
    pub vms: usize,
    #[arg(long)]
    pub vcpus: usize,
    #[arg(long)]
    pub mem_mib: u64,
    #[arg(long)]
    pub untouched: bool,
    #[arg(long)]
    pub release: String,
    #[arg(long, value_delimiter = ',')]
    pub vfio: Vec<String>,
}

/// The hidden `teardown-holder` command: holds VMs (or VFIO devices) for the teardown
/// scenario and releases them when told.
pub fn holder(args: &HolderArgs) -> Result<(), Error> {
    // A terminal's Ctrl-C reaches the whole process group. The parent decides what an
    // interruption means and ends its holders itself (SIGKILL, or closing their stdin), so
    // a holder dying first would only turn an interruption into a holder failure.
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: SIG_IGN installs no handler code; it only changes the disposition.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    if !args.vfio.is_empty() {
        return hold_devices_and_release(&args.vfio, &args.release);
    }
    let system = vmscale_kvm::KvmSystem::open()?;
    hold_and_release(
        &system,
        args.vms,
        args.vcpus,
        args.mem_mib,
        !args.untouched,
        &args.release,
    )
}

/// The holder side: build `vms` VMs, say "ready", wait for "go", release, report, exit.
/// Runs in its own process (`vmscale teardown-holder`).
pub fn hold_and_release(
    system: &vmscale_kvm::KvmSystem,
    vms: usize,
    vcpus: usize,
    mem_mib: u64,
    touch: bool,
    release: &str,
) -> Result<(), Error> {
    let config = holder_config(vcpus, mem_mib);
    let mut held = Vec::with_capacity(vms);
    for _ in 0..vms {
        let mut vm = vmscale_kvm::Vm::start(system, &config)?;
        vm.set_scratch(0, true)?;
        if touch {
            vm.touch_scratch(0);
        }
        held.push(vm);
    }
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| Error::Usage(format!("teardown holder: {e}"));
    writeln!(out, "ready").map_err(io)?;
    out.flush().map_err(io)?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(io)?;
    let mut report = HolderReport::default();
    match release {
        // Everything is still open: the kernel releases it as the process exits.
        "exit" => std::process::exit(0),
        "close" => {
            for vm in held.drain(..) {
                record(&mut report, vm.teardown());
            }
        }
        _ => {
            let times: Vec<TeardownTimes> = std::thread::scope(|scope| {
                joined(
                    held.drain(..)
                        .map(|vm| {
                            std::thread::Builder::new().spawn_scoped(scope, move || vm.teardown())
                        })
                        .collect(),
                )
            })?;
            times.into_iter().for_each(|t| record(&mut report, t));
        }
    }
    let json = serde_json::to_string(&report).expect("report serializes");
    writeln!(out, "{json}").map_err(io)?;
    out.flush().map_err(io)
}

/// The results of release threads; a thread that could not start (no memory or threads
/// left) is an error in one line, not a panic. What it would have released goes with the
/// holder's exit.
fn joined<T: Default>(
    spawned: Vec<std::io::Result<std::thread::ScopedJoinHandle<'_, T>>>,
) -> Result<Vec<T>, Error> {
    let mut results = Vec::with_capacity(spawned.len());
    let mut failure = None;
    for thread in spawned {
        match thread {
            Ok(handle) => results.push(handle.join().unwrap_or_default()),
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    match failure {
        Some(e) => Err(Error::Host(format!(
            "teardown holder: cannot start a release thread: {e}"
        ))),
        None => Ok(results),
    }
}

fn record(report: &mut HolderReport, t: TeardownTimes) {
    report.vcpus_ns.push(t.vcpus_ns);
    report.kvm_ns.push(t.kvm_ns);
    report.munmap_ns.push(t.munmap_ns);
}

/// A running holder process.
struct Holder {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Option<ChildStderr>,
}

impl Holder {
    /// `first` selects which of the --vfio devices this holder takes (`vms` of them).
    fn spawn(
        exe: &Path,
        knobs: &TeardownKnobs,
        first: usize,
        vms: usize,
        release: &str,
        cancel: &Cancel,
    ) -> Result<Holder, Error> {
        let mut command = Command::new(exe);
        if !knobs.vfio.is_empty() {
            command.args(["--vfio", &knobs.vfio[first..first + vms].join(",")]);
        }
        command
            .args([
                "teardown-holder",
                "--vms",
                &vms.to_string(),
                "--vcpus",
                &knobs.vcpus.to_string(),
            ])
            .args([
                "--mem-mib",
                &knobs.mem_mib.to_string(),
                "--release",
                release,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Its error, if it fails, becomes part of vmscale's one line.
            .stderr(Stdio::piped());
        if !knobs.touch {
            command.arg("--untouched");
        }
        // SAFETY: runs in the forked child before exec and calls only signal(2), which is
        // async-signal-safe; it allocates nothing and takes no lock.
        unsafe {
            command.pre_exec(|| {
                // Ignored from before exec (a disposition exec keeps), so a Ctrl-C or a
                // hang-up that reaches the whole group never ends a holder that is still
                // starting; its parent ends it.
                for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(signal, libc::SIG_IGN);
                }
                Ok(())
            })
        };
        let mut child = command
            .spawn()
            .map_err(|e| Error::Usage(format!("cannot start {}: {e}", exe.display())))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let stderr = child.stderr.take();
        let mut holder = Holder {
            child,
            stdin,
            stdout,
            stderr,
        };
        // Building large VMs takes a while: the wait looks at the flag every 20 ms (the
        // holder itself is killed by its drop).
        holder.wait_readable(cancel)?;
        let line = holder.read_line()?;
        if line.trim() != "ready" {
            return Err(holder.failed("did not get ready"));
        }
        Ok(holder)
    }

    /// Returns once the holder has written something (or closed its stdout), or with
    /// [`Error::Interrupted`] once `cancel` is set.
    fn wait_readable(&mut self, cancel: &Cancel) -> Result<(), Error> {
        use std::os::fd::AsRawFd;
        if !self.stdout.buffer().is_empty() {
            return Ok(());
        }
        loop {
            cancel.check()?;
            let mut fd = libc::pollfd {
                fd: self.stdout.get_ref().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd on the holder's stdout pipe, which this owns.
            let ready = unsafe { libc::poll(&mut fd, 1, 20) };
            let interrupted = ready < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
            if ready > 0 || (ready < 0 && !interrupted) {
                return Ok(());
            }
        }
    }

    /// Why the holder failed, in one line: its own error (it exits 2 for a request the host
    /// cannot satisfy, such as too little memory), or how it ended.
    fn failed(&mut self, what: &str) -> Error {
        use std::io::Read;
        let _ = self.child.kill();
        let status = self.child.wait();
        let mut said = String::new();
        if let Some(stderr) = self.stderr.take() {
            let _ = stderr.take(16 << 10).read_to_string(&mut said);
        }
        let said = said
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .map(|l| l.strip_prefix("vmscale: error: ").unwrap_or(l).to_string());
        let message = match (&said, &status) {
            (Some(said), _) => format!("teardown holder {what}: {said}"),
            (None, Ok(status)) => format!("teardown holder {what} ({status})"),
            (None, Err(e)) => format!("teardown holder {what}: {e}"),
        };
        match status.ok().and_then(|s| s.code()) {
            Some(2) => Error::Usage(message),
            _ => Error::Host(message),
        }
    }

    fn read_line(&mut self) -> Result<String, Error> {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| Error::Usage(format!("teardown holder: {e}")))?;
        Ok(line)
    }

    fn go(&mut self) -> Result<(), Error> {
        self.stdin
            .write_all(b"go\n")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| Error::Usage(format!("teardown holder: {e}")))
    }

    /// Reads the holder's report (if its mode sends one) and reaps it.
    fn finish(mut self, cancel: &Cancel) -> Result<Option<HolderReport>, Error> {
        // poll returns as the report arrives: the wait costs the timed release nothing.
        self.wait_readable(cancel)?;
        let line = self.read_line()?;
        let status = self
            .child
            .wait()
            .map_err(|e| Error::Host(format!("teardown holder: {e}")))?;
        if !status.success() {
            return Err(self.failed("failed"));
        }
        Ok(serde_json::from_str(line.trim()).ok())
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // On any error path: never leave a holder (and its VMs) behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One measured release: how long it took, the holders' reports, and the window each
/// holder thread was timed in.
struct Release {
    total_ns: u64,
    reports: Vec<HolderReport>,
    windows: Vec<vmscale_run::schema::TaskWindow>,
}

/// The threads of process `pid` now (its vCPU threads and main thread: any of them may be
/// the last to leave and release the VMs).
fn threads_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_else(|_| vec![pid])
}

/// One measured release of `vms` VMs in `mode`.
fn release_once(
    exe: &Path,
    knobs: &TeardownKnobs,
    vms: usize,
    mode: Mode,
    cancel: &Cancel,
) -> Result<Release, Error> {
    let holders: Vec<Holder> = match mode {
        Mode::Fork => (0..vms)
            .map(|i| Holder::spawn(exe, knobs, i, 1, mode.holder_release(), cancel))
            .collect::<Result<_, _>>()?,
        _ => vec![Holder::spawn(
            exe,
            knobs,
            0,
            vms,
            mode.holder_release(),
            cancel,
        )?],
    };
    let mut holders = holders;
    // The release's work happens in the holders' own threads (and threads they start for
    // it): those are the tasks the trace explains, for the sample's window.
    let tids: Vec<u32> = holders.iter().flat_map(|h| threads_of(h.child.id())).collect();
    let start = monotonic_ns();
    for holder in &mut holders {
        holder.go()?;
    }
    let mut reports = Vec::new();
    for holder in holders {
        reports.extend(holder.finish(cancel)?);
    }
    let end = monotonic_ns();
    Ok(Release {
        total_ns: end - start,
        reports,
        windows: tids
            .into_iter()
            .map(|tid| vmscale_run::schema::TaskWindow {
                tid,
                start_ns: start,
                end_ns: end,
            })
            .collect(),
    })
}

/// The `teardown` scenario. Its VMs are held by child processes running this executable's
/// hidden `teardown-holder` command (see [`hold_and_release`]).
#[derive(Debug, Clone, Copy)]
pub struct Teardown;

impl crate::Scenario for Teardown {
    type Knobs = TeardownKnobs;
    /// The executable the holders run: this one.
    type Host = PathBuf;
    type Flags = TeardownArgs;

    const ABOUT: &'static str = "Case 1: time until M VMs are really gone, per release mode";

    fn knobs(&self, args: &TeardownArgs) -> Result<TeardownKnobs, Error> {
        Ok(TeardownKnobs {
            vms: args.vms.clone(),
            vcpus: args.vcpus,
            mem_mib: args.mem_mib,
            touch: !args.untouched,
            modes: Mode::parse_list(&args.mode)?,
            repeat: args.repeat,
            vfio: args.vfio.clone(),
        })
    }

    fn info(&self) -> ScenarioInfo {
        info()
    }

    fn tour_knobs(&self) -> Result<TeardownKnobs, String> {
        Ok(TeardownKnobs {
            vms: vec![1, 4, 8],
            repeat: 2,
            ..TeardownKnobs::default()
        })
    }

    /// The releases happen in holder processes created mid-run.
    fn tracing(&self) -> crate::TraceNeeds {
        crate::TraceNeeds {
            syscalls: crate::Syscalls::Off,
            ..crate::TraceNeeds::default()
        }
    }

    fn prepare(&self, knobs: &TeardownKnobs) -> Result<crate::Prepared<PathBuf>, Error> {
        knobs.validate()?;
        let system = vmscale_kvm::KvmSystem::open()?;
        knobs.preflight(system.max_vcpus())?;
        let exe = std::env::current_exe().map_err(|e| {
            Error::Host(format!(
                "cannot find the vmscale binary to run holders: {e}"
            ))
        })?;
        Ok(crate::Prepared {
            host: exe,
            kvm: Some(system.facts()),
        })
    }

    fn run(
        &self,
        knobs: &TeardownKnobs,
        exe: &PathBuf,
        progress: &dyn Progress,
        cancel: &Cancel,
        hook: &mut dyn PhaseHook,
    ) -> Result<Vec<Point>, Error> {
        run(exe, knobs, progress, cancel, hook)
    }
}

pub fn run(
    exe: &Path,
    knobs: &TeardownKnobs,
    progress: &dyn Progress,
    cancel: &Cancel,
    hook: &mut dyn PhaseHook,
) -> Result<Vec<Point>, Error> {
    knobs.validate()?;
    progress.start((knobs.vms.len() * knobs.modes.len() * knobs.repeat) as u64);
    let host_cpus = vmscale_run::host::online_cpus();
    let mut points = Vec::new();
    for &vms in &knobs.vms {
        let mut series = Vec::new();
        for &mode in &knobs.modes {
            progress.set_message(format!("{vms} VMs, {}", mode.name()));
            let label = format!("teardown vms={vms} mode={}", mode.name());
            let mut totals = Vec::new();
            let mut reports = Vec::new();
            let mut windows = Vec::new();
            for _ in 0..knobs.repeat {
                cancel.check()?;
                hook.measured_phase_begins(&label)?;
                // A signal that reached a holder too (Ctrl-C goes to the whole process
                // group) is an interruption, whatever the holder then said.
                let measured = release_once(exe, knobs, vms, mode, cancel)
                    .map_err(|e| cancel.check().err().unwrap_or(e));
                hook.measured_phase_ends(&label)?;
                let release = measured?;
                totals.push(release.total_ns);
                reports.extend(release.reports);
                windows.extend(release.windows);
                progress.advance(1);
            }
            let mut one = mode_series(mode, totals, &reports);
            one.timed_calls = windows;
            series.push(one);
        }
        points.push(Point {
            n: vms as u64,
            vcpus_per_host_cpu: (vms * knobs.vcpus) as f64 / host_cpus as f64,
            series,
        });
    }
    add_slopes(&mut points);
    Ok(points)
}

/// The per-VM cost of each mode across the sweep (case 1's "seconds per device"): a least
/// squares line through every raw sample against its VM count, noted on the last point.
fn add_slopes(points: &mut [Point]) {
    let Some(last) = points.len().checked_sub(1) else {
        return;
    };
    for index in 0..points[last].series.len() {
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        for point in points.iter() {
            if let Some(series) = point.series.get(index) {
                xs.extend(series.samples_ns.iter().map(|_| point.n as f64));
                ys.extend(series.samples_ns.iter().map(|&ns| ns as f64));
            }
        }
        if let Some(fit) = vmscale_stats::linear_fit(&xs, &ys) {
            points[last].series[index].notes.push(format!(
                "per-VM slope over the sweep: {:.2} ms per VM (intercept {:.2} ms, R^2 {:.3})",
                fit.slope / 1e6,
                fit.intercept / 1e6,
                fit.r_squared
            ));
        }
    }
}

fn mode_series(mode: Mode, totals: Vec<u64>, reports: &[HolderReport]) -> Series {
    let mut notes = Vec::new();
    if !reports.is_empty() {
        // The holders' own timings of each part, summed over VMs, per release. For
        // `threads` the parts overlap in time, so they are shares of work, not of the wall
        // time; they are notes rather than phases for that reason.
        let per_release = |pick: fn(&HolderReport) -> &Vec<u64>| -> f64 {
            reports
                .iter()
                .map(|r| pick(r).iter().sum::<u64>())
                .sum::<u64>() as f64
                / reports.len() as f64
        };
        let (vcpus, kvm, munmap) = (
            per_release(|r| &r.vcpus_ns),
            per_release(|r| &r.kvm_ns),
            per_release(|r| &r.munmap_ns),
        );
        let devices = per_release(|r| &r.devices_ns);
        if devices > 0.0 {
            notes.push(format!(
                "closing the device fds took {:.1} ms per run (the driver's release path)",
                devices / 1e6
            ));
        }
        let work = vcpus + kvm + munmap;
        if work > 0.0 {
            notes.push(format!(
                "release work per run: munmap of guest memory {:.1} ms ({:.0}%), KVM closing the VM fds {:.1} ms ({:.0}%), vCPU threads {:.1} ms ({:.0}%)",
                munmap / 1e6,
                munmap * 100.0 / work,
                kvm / 1e6,
                kvm * 100.0 / work,
                vcpus / 1e6,
                vcpus * 100.0 / work,
            ));
        }
    }
    Series {
        name: mode.name().into(),
        sample_is: "from the release order until every holder is reaped".into(),
        summary: Summary::from_samples(&totals),
        samples_ns: totals,
        notes,
        ..Series::default()
    }
}
